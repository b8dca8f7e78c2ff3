//! `hvprof top` attached to a running reference guest: its screens name the shares
//! scenario's functions in the order of their shares, near 4:2:1, and end when asked or when
//! the run does; a socket nobody serves is the user's error.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{hvprof, status, TempDir};

/// The rows of the last screen in `text`: (name, total %, samples) of each.
fn last_screen(text: &str) -> Vec<(String, f64, u64)> {
    let screen = text.rsplit("\nview: ").next().unwrap_or_default();
    screen
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let _recent = w.next()?.strip_suffix('%')?.parse::<f64>().ok()?;
            let total = w.next()?.strip_suffix('%')?.parse::<f64>().ok()?;
            let samples = w.next()?.parse::<u64>().ok()?;
            Some((w.next()?.to_string(), total, samples))
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

/// A `profile` run of the reference guest's shares scenario for `seconds`, its API at
/// DIR/api.sock and its outputs in DIR/out, once the scenario has started.
fn shares_run(tag: &str, seconds: u64) -> (TempDir, crate::harness::Running) {
    let dir = TempDir::new(tag);
    let socket = dir.join("api.sock");
    let mut run = hvprof([
        "profile".to_string(),
        "--cmdline".to_string(),
        format!("scenario=shares shares.ms={}", seconds * 1000),
        "--quiet".to_string(),
        "--api-socket".to_string(),
        socket.display().to_string(),
        "--out".to_string(),
        dir.join("out").display().to_string(),
    ])
    .limit(Duration::from_secs(seconds + 60))
    .spawn();
    wait_for(&socket);
    run.wait_for_stdout("refguest: scenario shares start", Duration::from_secs(30));
    (dir, run)
}

#[test]
fn batch_screens_rank_the_shares_functions_four_two_one() {
    let (dir, run) = shares_run("top-batch", 60);
    let socket = dir.join("api.sock");
    let sock = socket.to_str().unwrap();
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
            .find(|(name, ..)| name == f)
            .unwrap_or_else(|| panic!("no {f} on the last screen\n{top}"))
            .1
    };
    let names: Vec<&str> = screen.iter().take(3).map(|(n, ..)| n.as_str()).collect();
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

/// A tmux session of its own: a shell in a `width` x `height` terminal.
struct Tmux {
    name: String,
}

impl Tmux {
    fn new(tag: &str, width: u16, height: u16) -> Tmux {
        let name = format!("hvprof-{tag}-{}", std::process::id());
        let size = [width.to_string(), height.to_string()];
        let args = [
            "new-session",
            "-d",
            "-s",
            &name,
            "-x",
            &size[0],
            "-y",
            &size[1],
        ];
        crate::harness::tool(
            "tmux",
            "tmux",
            &[&args[..], &["bash --norc --noprofile"]].concat(),
        );
        Tmux { name }
    }

    fn keys(&self, keys: &[&str]) {
        let args = [&["send-keys", "-t", self.name.as_str()][..], keys].concat();
        crate::harness::tool("tmux", "tmux", &args);
    }

    fn screen(&self) -> String {
        let out = std::process::Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits (up to 30 s) until the screen shows what `holds` wants; returns that screen.
    fn until(&self, what: &str, holds: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.screen();
            if holds(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{what} within 30 s; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .output();
    }
}

/// top's exit status as the shell printed it: a line `top-ended-N` (the command line typed
/// holds `top-ended-$?`, which may wrap to the start of a line too).
fn top_status(screen: &str) -> Option<&str> {
    screen.lines().find_map(|l| {
        let status = l.trim_end().strip_prefix("top-ended-")?;
        (!status.is_empty() && status.bytes().all(|b| b.is_ascii_digit())).then_some(status)
    })
}

/// The run's state and samples, read through its API.
fn vm(sock: &str) -> (String, u64) {
    use std::io::{Read, Write};
    let ask = |path: &str| -> serde_json::Value {
        let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or("null")).unwrap()
    };
    let state = ask("/v1/vm")["state"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (
        state,
        ask("/v1/stats")["total"]["samples"].as_u64().unwrap_or(0),
    )
}

#[test]
fn the_full_screen_view_switches_views_pauses_the_vm_and_gives_the_terminal_back() {
    let (dir, run) = shares_run("top-screen", 120);
    let socket = dir.join("api.sock");
    let sock = socket.to_str().unwrap();
    // 80 x 24, the smallest terminal the view is laid out for.
    let tmux = Tmux::new("top", 80, 24);
    let bin = crate::harness::hvprof_bin();
    let command = format!(
        "{} top --api-socket {sock}; echo top-ended-$?",
        bin.display()
    );
    tmux.keys(&["-l", &command]);
    tmux.keys(&["Enter"]);
    // Once the three functions have 1,500 samples between them their order is the shares'
    // whatever the noise (f2's expected lead over f1 is then some 12 standard deviations).
    let s = tmux.until("the functions view with the three functions", |s| {
        let rows = last_screen(s);
        let three = rows.iter().take(3);
        rows.len() >= 3
            && three.clone().all(|(n, ..)| n.starts_with("shares_f"))
            && three.map(|r| r.2).sum::<u64>() >= 1500
    });
    let names: Vec<String> = last_screen(&s).into_iter().take(3).map(|r| r.0).collect();
    assert_eq!(names, ["shares_f4", "shares_f2", "shares_f1"], "{s}");
    assert!(s.contains("FUNCTION") && s.contains("? keys"), "{s}");

    tmux.keys(&["p"]);
    tmux.until("the processes view", |s| {
        s.contains("PROCESS") && s.contains("[cr3 0x")
    });
    tmux.keys(&["?"]);
    tmux.until("the keys", |s| {
        s.contains(" keys ") && s.contains("pause or resume the VM")
    });
    tmux.keys(&["?"]);

    // Space pauses the VM: its samples stop growing; again, it runs on.
    tmux.keys(&["Space"]);
    tmux.until("paused on the screen", |s| s.contains(": paused, up"));
    let (state, a) = vm(sock);
    std::thread::sleep(Duration::from_millis(300));
    let (_, b) = vm(sock);
    assert_eq!(
        (state.as_str(), a),
        ("paused", b),
        "samples grew while paused"
    );
    tmux.keys(&["Space"]);
    tmux.until("running again", |s| s.contains(": running, up"));
    assert_eq!(vm(sock).0, "running");

    // q: the shell's screen back, in cooked mode, and top's status 0.
    tmux.keys(&["q"]);
    let s = tmux.until("top's end", |s| top_status(s).is_some());
    assert_eq!(top_status(&s), Some("0"), "{s}");
    assert!(
        !s.contains("RECENT"),
        "the view is left on the screen:\n{s}"
    );
    tmux.keys(&[
        "-l",
        "stty -a | tr ' ;' '\\n\\n' | grep -qx icanon && echo cooked-mode",
    ]);
    tmux.keys(&["Enter"]);
    tmux.until("the terminal in cooked mode", |s| {
        s.contains("\ncooked-mode")
    });

    // Ctrl-C, and a SIGTERM from outside, give the terminal back too.
    for (n, how) in ["ctrl-c", "sigterm"].into_iter().enumerate() {
        tmux.keys(&["-l", &format!("clear; {command}")]);
        tmux.keys(&["Enter"]);
        tmux.until("the view again", |s| s.contains("FUNCTION"));
        if how == "ctrl-c" {
            tmux.keys(&["C-c"]);
        } else {
            let pattern = format!("{} top --api-socket {sock}", bin.display());
            crate::harness::tool("pkill", "procps", &["-TERM", "-f", &pattern]);
        }
        let s = tmux.until("top's end", |s| top_status(s).is_some());
        assert!(
            top_status(&s) == Some("0") && !s.contains("RECENT"),
            "{how}:\n{s}"
        );
        let marker = format!("cooked-{n}");
        let check = format!("stty -a | tr ' ;' '\\n\\n' | grep -qx icanon && echo {marker}");
        tmux.keys(&["-l", &check]);
        tmux.keys(&["Enter"]);
        tmux.until("cooked mode", |s| s.contains(&format!("\n{marker}")));
    }

    run.signal(libc::SIGTERM);
    let end = run.wait();
    assert!(dir.join("out/profile.json").is_file(), "{end}");
}
