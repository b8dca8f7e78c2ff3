//! The control API against clients that take their time or never finish: a client sending a
//! byte every 1.5 s, hundreds of idle connections, a socket file left by a killed hvprof or
//! replaced during the run, a pause under way, pipelined requests, an over-long socket path.
//! Whatever they do, other requests are answered, and `--duration`, SIGTERM and shutdown take
//! effect. Every bound here is a generous "does not hang" limit, far from what the old
//! one-connection-at-a-time server gave (25 s for a GET, a 3 s profile running 16 s, or never
//! with a client that does not stop), not a benchmark.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::harness::{hvprof, hvprof_run, status, Running, TempDir};

/// What "answered promptly" means here: far above a real answer's time, far below the 25 s
/// the old server gave with one slow client.
const PROMPT: Duration = Duration::from_secs(5);

/// The reference guest running its shares workload for a minute, with the API on `socket`.
fn guest_with_api(socket: &Path) -> Running {
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let mut run = hvprof_run(
        elf,
        &[
            "--cmdline",
            "scenario=shares shares.ms=60000",
            "--api-socket",
            socket.to_str().unwrap(),
        ],
    )
    .limit(Duration::from_secs(90))
    .spawn();
    wait_for_socket(socket);
    run.wait_for_stdout("refguest: scenario shares start", Duration::from_secs(30));
    run
}

/// `hvprof profile` of the shares workload for a minute with the API on `socket`, its
/// results into `out`, plus `extra` options; returned once the workload has started.
fn profile_with_api(socket: &Path, out: &Path, extra: &[&str]) -> Running {
    let mut args = vec![
        "profile",
        "--cmdline",
        "scenario=shares shares.ms=60000",
        "--quiet",
        "--api-socket",
        socket.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut run = hvprof(args).limit(Duration::from_secs(90)).spawn();
    wait_for_socket(socket);
    run.wait_for_stdout("refguest: scenario shares start", Duration::from_secs(30));
    run
}

fn wait_for_socket(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < deadline, "the API socket never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends one request and returns (status, body, time to the whole answer). A read that does
/// not finish within 30 s fails the test instead of hanging it.
fn timed_call(socket: &Path, method: &str, path: &str) -> (u16, String, Duration) {
    let started = Instant::now();
    let mut s = UnixStream::connect(socket).expect("connect to the API socket");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(format!("{method} {path} HTTP/1.1\r\nHost: hvprof\r\n\r\n").as_bytes())
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap_or_else(|e| {
        panic!(
            "{method} {path}: no answer after {:?}: {e}",
            started.elapsed()
        )
    });
    let status = resp
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {resp:?}"));
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body, started.elapsed())
}

/// A GET /v1/vm answered 200 within [`PROMPT`].
fn assert_get_prompt(socket: &Path, what: &str) {
    let (status, body, took) = timed_call(socket, "GET", "/v1/vm");
    assert_eq!(status, 200, "{what}: {body}");
    assert!(took < PROMPT, "{what}: GET /v1/vm took {took:?}");
}

/// A client that sends a request one byte every 1.5 s and never finishes it; when the server
/// closes it, it connects again and goes on, so one is always connected.
struct SlowClient {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl SlowClient {
    fn start(socket: &Path) -> SlowClient {
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let (socket, flag, sent) = (socket.to_owned(), stop.clone(), bytes.clone());
        let thread = std::thread::spawn(move || {
            let request = b"GET /v1/vm HTTP/1.1\r\nX-Slow: ";
            while !flag.load(Ordering::Acquire) {
                let Ok(mut s) = UnixStream::connect(&socket) else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                for b in request.iter().chain(std::iter::repeat(&b'a')) {
                    if flag.load(Ordering::Acquire) || s.write_all(&[*b]).is_err() {
                        break;
                    }
                    sent.fetch_add(1, Ordering::AcqRel);
                    // In small steps, so stopping the client does not wait 1.5 s.
                    for _ in 0..15 {
                        if flag.load(Ordering::Acquire) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        });
        let client = SlowClient {
            stop,
            bytes,
            thread: Some(thread),
        };
        // Connected and sending: its first two bytes are out (1.5 s apart).
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.bytes.load(Ordering::Acquire) < 2 {
            assert!(Instant::now() < deadline, "the slow client never connected");
            std::thread::sleep(Duration::from_millis(20));
        }
        client
    }
}

impl Drop for SlowClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_slow_client_delays_no_get_and_no_shutdown() {
    let dir = TempDir::new("api-slow");
    let socket = dir.join("api.sock");
    let run = guest_with_api(&socket);
    let slow = SlowClient::start(&socket);
    for i in 0..3 {
        assert_get_prompt(&socket, &format!("GET {i} with a slow client connected"));
    }
    let (status, body, took) = timed_call(&socket, "PUT", "/v1/vm/shutdown");
    assert_eq!(status, 200, "{body}");
    assert!(took < PROMPT, "the shutdown took {took:?} to answer");
    let out = run.wait();
    drop(slow);
    out.assert_status(status::CLEAN);
    out.assert_stderr_contains("stopped by the control API");
}

#[test]
fn a_slow_client_delays_neither_duration_nor_sigterm() {
    let dir = TempDir::new("api-slow-end");
    let socket = dir.join("api.sock");
    let out_dir = dir.join("out");
    let run = profile_with_api(&socket, &out_dir, &["--duration", "3"]);
    let slow = SlowClient::start(&socket);
    let waited = Instant::now();
    let out = run.wait();
    drop(slow);
    out.assert_status(status::CLEAN);
    out.assert_stderr_contains("stopped by --duration");
    // The 3 s run had at least 1.5 s of it left when the client started (it was ~0 s in when
    // the guest started): well under 3 + PROMPT s more, where the old server took 16 s.
    let took = waited.elapsed();
    assert!(
        took < Duration::from_secs(3) + PROMPT,
        "--duration 3 with a slow API client: {took:?} after the client started\n{out}"
    );
    assert!(out_dir.join("profile.json").exists(), "{out}");

    let socket = dir.join("api2.sock");
    let run = guest_with_api(&socket);
    let slow = SlowClient::start(&socket);
    let signalled = Instant::now();
    run.signal(libc::SIGTERM);
    let out = run.wait();
    let took = signalled.elapsed();
    drop(slow);
    out.assert_status(status::SIGNALLED);
    assert!(
        took < PROMPT,
        "SIGTERM with a slow API client took {took:?} to end the run\n{out}"
    );
}

#[test]
fn hundreds_of_idle_connections_delay_no_get() {
    let dir = TempDir::new("api-idle");
    let socket = dir.join("api.sock");
    let run = guest_with_api(&socket);
    // 200 idle clients, then 100 more: past the 256-connection cap, so the oldest idle ones
    // are closed (503) to make room.
    let mut idle: Vec<UnixStream> = (0..200)
        .map(|_| UnixStream::connect(&socket).expect("an idle connection"))
        .collect();
    assert_get_prompt(&socket, "200 idle connections");
    idle.extend((0..100).map(|_| UnixStream::connect(&socket).expect("an idle connection")));
    assert_get_prompt(&socket, "300 idle connections");
    let first = &mut idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut answer = String::new();
    let _ = first.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 503 ") || answer.starts_with("HTTP/1.1 408 "),
        "the oldest idle connection was neither evicted nor timed out: {answer:?}"
    );
    assert_eq!(timed_call(&socket, "PUT", "/v1/vm/shutdown").0, 200);
    run.wait().assert_status(status::CLEAN);
}

/// Starts the reference guest with the API on `socket` and SIGKILLs it, leaving the file.
fn killed_run_leaves(socket: &Path) {
    let run = guest_with_api(socket);
    run.signal(libc::SIGKILL);
    let out = run.wait();
    assert_eq!(out.code(), None, "hvprof survived SIGKILL\n{out}");
    assert!(socket.exists(), "a SIGKILLed hvprof removed its socket");
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_refused() {
    let dir = TempDir::new("api-stale");
    let socket: PathBuf = dir.join("api.sock");
    killed_run_leaves(&socket);

    let run = guest_with_api(&socket);
    assert_get_prompt(&socket, "the socket that replaced the stale one");

    // A second hvprof on the live socket: refused before anything is created, naming it.
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let second = hvprof_run(elf, &["--api-socket", socket.to_str().unwrap()])
        .limit(Duration::from_secs(30))
        .run();
    second.assert_status(status::USAGE);
    second.assert_error_line(&[socket.to_str().unwrap(), "listening"]);
    assert_get_prompt(&socket, "the first run after the second was refused");

    assert_eq!(timed_call(&socket, "PUT", "/v1/vm/shutdown").0, 200);
    let out = run.wait();
    out.assert_status(status::CLEAN);
    out.assert_stderr_contains("stale API socket");
    assert!(!socket.exists(), "the socket file is removed at exit");
}

/// Sends `raw` as it is on one connection and reads everything answered.
fn raw_call(socket: &Path, raw: &[u8]) -> String {
    let mut s = UnixStream::connect(socket).expect("connect to the API socket");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(raw).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp)
        .expect("the answers before the read timeout");
    resp
}

/// Issue 40: a pause held the serving loop until the vCPUs acknowledged it. Pauses run while
/// other clients ask: every GET is answered, every pause too (whatever the order they meet
/// in), and the guest runs on after a resume.
#[test]
fn a_pause_under_way_holds_up_no_other_client() {
    let dir = TempDir::new("api-pause");
    let socket = dir.join("api.sock");
    let run = guest_with_api(&socket);
    for round in 0..3 {
        let pauser = {
            let socket = socket.clone();
            std::thread::spawn(move || timed_call(&socket, "PUT", "/v1/vm/pause"))
        };
        assert_get_prompt(&socket, &format!("round {round}: a GET beside a pause"));
        let (status, body, _) = pauser.join().unwrap();
        assert_eq!(status, 200, "round {round}: the pause: {body}");
        let (status, body, _) = timed_call(&socket, "GET", "/v1/vm");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""state":"paused""#), "{body}");
        let (status, body, _) = timed_call(&socket, "PUT", "/v1/vm/resume");
        assert_eq!(status, 200, "round {round}: the resume: {body}");
    }
    assert_eq!(timed_call(&socket, "PUT", "/v1/vm/shutdown").0, 200);
    run.wait().assert_status(status::CLEAN);
}

/// Issue 40: the socket's path was removed at the end whatever was there by then.
#[test]
fn a_file_put_at_the_socket_path_during_the_run_is_kept() {
    let dir = TempDir::new("api-replaced");
    let socket = dir.join("api.sock");
    let run = guest_with_api(&socket);
    std::fs::remove_file(&socket).unwrap();
    std::fs::write(&socket, b"not hvprof's").unwrap();
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_status(status::SIGNALLED);
    assert_eq!(
        std::fs::read(&socket).expect("the file put at the socket's path"),
        b"not hvprof's",
        "{out}"
    );
    out.assert_stderr_contains("no longer the API socket hvprof created");
}

/// Issue 40: a socket path too long for a socket address exited 12 (a host failure).
#[test]
fn an_over_long_socket_path_is_a_usage_error() {
    let dir = TempDir::new("api-long");
    let socket = dir.join(&"s".repeat(120));
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let out = hvprof_run(elf, &["--api-socket", socket.to_str().unwrap()])
        .limit(Duration::from_secs(30))
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["too long for a Unix socket"]);
    assert!(!socket.exists(), "{out}");
}

/// Issue 40: of two requests sent together, only the first was answered.
#[test]
fn pipelined_requests_are_each_answered() {
    let dir = TempDir::new("api-pipelined");
    let socket = dir.join("api.sock");
    let run = guest_with_api(&socket);
    let got = raw_call(
        &socket,
        b"GET /v1/vm HTTP/1.1\r\nHost: hvprof\r\n\r\nGET /v1/stats HTTP/1.1\r\nHost: hvprof\r\n\r\n",
    );
    let answers: Vec<&str> = got.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(answers.len(), 2, "{got}");
    assert!(answers.iter().all(|a| a.starts_with("200 ")), "{got}");
    assert!(answers[0].contains(r#""vcpus":"#), "{got}");
    assert!(answers[1].contains(r#""total":"#), "{got}");
    let got = raw_call(
        &socket,
        b"GET /v1/vm HTTP/1.1\r\n\r\nPUT /v1/vm/shutdown HTTP/1.1\r\n\r\n",
    );
    assert_eq!(got.matches("HTTP/1.1 200 OK").count(), 2, "{got}");
    let out = run.wait();
    out.assert_status(status::CLEAN);
    out.assert_stderr_contains("stopped by the control API");
}

/// Issue 40: a host profile restricted to processes by name was started in a run that can
/// never name a process (the built-in guest, no layout source) and counted nothing unsaid.
#[test]
fn a_process_filter_that_can_never_match_is_refused() {
    let dir = TempDir::new("api-process");
    let socket = dir.join("api.sock");
    let run = guest_with_api(&socket);
    let body = r#"{"process": ["awk"]}"#;
    let got = raw_call(
        &socket,
        format!(
            "POST /v1/profiles/host HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    assert!(got.starts_with("HTTP/1.1 400 "), "{got}");
    assert!(got.contains("no guest kernel layout"), "{got}");
    let (status, list, _) = timed_call(&socket, "GET", "/v1/profiles/host");
    assert_eq!((status, list.as_str()), (200, "[]"));
    assert_eq!(timed_call(&socket, "PUT", "/v1/vm/shutdown").0, 200);
    run.wait().assert_status(status::CLEAN);
}

/// Issue 40: the run's times came from several clocks. A run paused and resumed through the
/// API (its time on the host's clock runs on while the guest's does not) still records one
/// origin: the timeline starts at profile.json's `start_time` and every sample lies within
/// `wall_time_s`.
#[test]
fn a_paused_run_keeps_one_clock() {
    let dir = TempDir::new("api-clock");
    let socket = dir.join("api.sock");
    let out_dir = dir.join("out");
    let run = profile_with_api(&socket, &out_dir, &["--timeline"]);
    assert_eq!(timed_call(&socket, "PUT", "/v1/vm/pause").0, 200);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(timed_call(&socket, "PUT", "/v1/vm/resume").0, 200);
    assert_eq!(timed_call(&socket, "PUT", "/v1/vm/shutdown").0, 200);
    let out = run.wait();
    out.assert_status(status::CLEAN);
    let p = report::read_profile(&out_dir.join("profile.json")).expect("the run's profile");
    let t = p.timelines.first().expect("its timeline");
    let start = std::time::SystemTime::UNIX_EPOCH + Duration::from_nanos(t.start_unix_ns);
    assert_eq!(vmm::clock::rfc3339(start), p.run.start_time, "{out}");
    #[allow(clippy::cast_precision_loss)]
    let last = t.samples.iter().map(|s| s.t_ns).max().unwrap_or(0) as f64;
    assert!(
        last <= p.run.wall_time_s * 1e9,
        "a sample past the run's end"
    );
    assert!(
        t.markers
            .iter()
            .any(|m| m.kind == report::timeline::MarkerKind::Pause),
        "no pause marker"
    );
}
