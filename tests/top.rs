//! `hvprof top` attached to a running reference guest: its screens name the shares
//! scenario's functions in the order of their shares, near 4:2:1, and end when asked or when
//! the run does; a socket nobody serves is the user's error.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{hvprof, status, TempDir};

/// The rows of the last screen in `text`: (name, total %) of each.
fn last_screen(text: &str) -> Vec<(String, f64)> {
    let screen = text.rsplit("hvprof top: ").next().unwrap_or_default();
    screen
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let _recent = w.next()?.strip_suffix('%')?.parse::<f64>().ok()?;
            let total = w.next()?.strip_suffix('%')?.parse::<f64>().ok()?;
            let _samples = w.next()?.parse::<u64>().ok()?;
            Some((w.next()?.to_string(), total))
        })
        .collect()
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < deadline, "the API socket never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn batch_screens_rank_the_shares_functions_four_two_one() {
    let dir = TempDir::new("top-batch");
    let socket = dir.join("api.sock");
    let sock = socket.to_str().unwrap();
    let mut run = hvprof([
        "profile",
        "--cmdline",
        "scenario=shares shares.ms=60000",
        "--quiet",
        "--api-socket",
        sock,
        "--out",
        dir.join("out").to_str().unwrap(),
    ])
    .limit(Duration::from_secs(120))
    .spawn();
    wait_for(&socket);
    run.wait_for_stdout("refguest: scenario shares start", Duration::from_secs(30));
    let top = hvprof([
        "top",
        "--api-socket",
        sock,
        "--batch",
        "--iterations",
        "4",
        "--rows",
        "5",
    ])
    .limit(Duration::from_secs(60))
    .run();
    top.assert_status(0);
    let screen = last_screen(&top.stdout);
    let share = |f: &str| {
        screen
            .iter()
            .find(|(name, _)| name == f)
            .unwrap_or_else(|| panic!("no {f} on the last screen\n{top}"))
            .1
    };
    let names: Vec<&str> = screen.iter().take(3).map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["shares_f4", "shares_f2", "shares_f1"], "{top}");
    // 4:2:1 of the three functions' samples (57.1%, 28.6%, 14.3%): three seconds of 1 kHz
    // sampling give thousands of samples, so each share is within 6 points however they fall.
    let three = share("shares_f4") + share("shares_f2") + share("shares_f1");
    for (f, ideal) in [("shares_f4", 4.0), ("shares_f2", 2.0), ("shares_f1", 1.0)] {
        let of_three = 100.0 * share(f) / three;
        let want = 100.0 * ideal / 7.0;
        assert!(
            (of_three - want).abs() < 6.0,
            "{f}: {of_three:.1}% of the three, not {want:.1}%\n{top}"
        );
    }
    assert!(
        top.stdout.contains("view: functions by recent share"),
        "{top}"
    );

    let vcpus = hvprof([
        "top",
        "--api-socket",
        sock,
        "--batch",
        "--iterations",
        "1",
        "--view",
        "vcpus",
    ])
    .run();
    vcpus.assert_status(0);
    assert!(
        vcpus.stdout.lines().any(|l| l.contains("vCPU 0")),
        "{vcpus}"
    );

    // The run goes on after top: a stop signal ends it, its profile written.
    run.signal(libc::SIGTERM);
    let end = run.wait();
    assert!(dir.join("out/profile.json").is_file(), "{end}");
}

#[test]
fn a_socket_nobody_serves_is_the_users_error() {
    let dir = TempDir::new("top-no-run");
    let sock = dir.join("none.sock");
    let top = hvprof(["top", "--api-socket", sock.to_str().unwrap(), "--batch"]).run();
    top.assert_status(status::USAGE);
    top.assert_stderr_contains("cannot connect to");
}
