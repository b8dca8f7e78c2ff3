//! The serving loop on real sockets with a made-up handler: slow, idle, greedy and foreign
//! clients against one that wants an answer. Bounds on waiting are generous upper limits that
//! turn "never" into a failure; no test measures how fast anything is.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use super::*;

/// Far above anything a test needs: reaching it means something hung.
const HANG: Duration = Duration::from_secs(10);

struct Echo {
    stop: Arc<AtomicBool>,
    afters: Arc<AtomicUsize>,
    /// `/deferred` is answered once this is set (by the test), with its value.
    release: Arc<std::sync::Mutex<Option<String>>>,
    later: usize,
}

impl Handler for Echo {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn handle(&mut self, request: &Request) -> Answer {
        match request.path.as_str() {
            "/big" => Answer::Now(Response::json(200, "x".repeat(16 << 20)), false),
            "/shutdown" => Answer::Now(Response::json(200, "{}".into()), true),
            "/deferred" => {
                self.later += 1;
                Answer::Later
            }
            path => Answer::Now(Response::json(200, format!("{path:?}")), false),
        }
    }

    fn ready(&mut self) -> Option<Response> {
        if self.later == 0 {
            return None;
        }
        let body = self.release.lock().unwrap().take()?;
        self.later -= 1;
        Some(Response::json(200, body))
    }

    fn after(&mut self) {
        self.afters.fetch_add(1, Ordering::AcqRel);
    }
}

/// A server on its own thread; dropping it stops the server and removes its directory.
struct Server {
    dir: PathBuf,
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    afters: Arc<AtomicUsize>,
    release: Arc<std::sync::Mutex<Option<String>>>,
    done: Receiver<()>,
}

impl Server {
    fn start(limits: Limits, owner: u32) -> Server {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "hvprof-serve-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("api.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let afters = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(std::sync::Mutex::new(None));
        let mut handler = Echo {
            stop: stop.clone(),
            afters: afters.clone(),
            release: release.clone(),
            later: 0,
        };
        let (tx, done) = channel();
        std::thread::spawn(move || {
            serve(&listener, owner, &mut handler, &limits);
            let _ = tx.send(());
        });
        Server {
            dir,
            socket,
            stop,
            afters,
            release,
            done,
        }
    }

    fn owned(limits: Limits) -> Server {
        // SAFETY: geteuid has no preconditions.
        Server::start(limits, unsafe { libc::geteuid() })
    }

    fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(HANG)).unwrap();
        s
    }

    /// Sends a GET and reads the whole answer.
    fn get(&self, path: &str) -> String {
        let mut s = self.connect();
        s.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        answer(&mut s)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.done.recv_timeout(HANG);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads to the end of the stream (the server closes after each answer).
fn answer(s: &mut UnixStream) -> String {
    let mut out = String::new();
    s.read_to_string(&mut out)
        .expect("an answer before the read timeout");
    out
}

fn limits(request: Duration) -> Limits {
    Limits {
        request,
        answer: request,
        ..Limits::API
    }
}

#[test]
fn a_slow_client_delays_no_other() {
    let server = Server::owned(limits(HANG * 3));
    let mut slow = server.connect();
    slow.write_all(b"GET /slo").unwrap();
    // Answered while the slow client is still connected, far before its deadline.
    assert!(server.get("/fast").ends_with("\"/fast\""));
    slow.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        slow.read(&mut byte).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the slow client was answered or closed first"
    );
    // It still gets its answer once it finishes.
    slow.set_nonblocking(false).unwrap();
    slow.write_all(b"w HTTP/1.1\r\n\r\n").unwrap();
    assert!(answer(&mut slow).ends_with("\"/slow\""));
}

#[test]
fn a_request_not_sent_in_time_gets_408() {
    let server = Server::owned(limits(Duration::from_millis(200)));
    let mut idle = server.connect();
    idle.write_all(b"GET / HT").unwrap();
    let got = answer(&mut idle);
    assert!(got.starts_with("HTTP/1.1 408 "), "{got}");
    assert!(server.get("/after").ends_with("\"/after\""));
}

#[test]
fn past_the_cap_the_oldest_idle_connection_makes_room() {
    let server = Server::owned(Limits {
        connections: 4,
        ..limits(HANG * 3)
    });
    let mut idle: Vec<UnixStream> = (0..4).map(|_| server.connect()).collect();
    assert!(server.get("/wanted").ends_with("\"/wanted\""));
    let oldest = answer(&mut idle[0]);
    assert!(oldest.starts_with("HTTP/1.1 503 "), "{oldest}");
    // The others are still open, waiting for their requests.
    for s in &mut idle[1..] {
        s.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(
            s.read(&mut byte).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
    }
}

#[test]
fn past_the_cap_with_every_connection_being_answered_the_new_one_gets_503() {
    let server = Server::owned(Limits {
        connections: 1,
        ..limits(HANG * 3)
    });
    let mut greedy = server.connect();
    greedy.write_all(b"GET /big HTTP/1.1\r\n\r\n").unwrap();
    // The one slot is taken by an answer far larger than the socket's buffers, unread.
    let mut head = [0u8; 12];
    greedy.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // (It sends nothing: what it sent could arrive after the server closed it, a reset.)
    let got = answer(&mut server.connect());
    assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
    // The answer under way is not cut short.
    let mut rest = Vec::new();
    greedy.read_to_end(&mut rest).unwrap();
    assert!(rest.ends_with(&b"x".repeat(1000)));
    assert!(server.get("/after").ends_with("\"/after\""));
}

#[test]
fn while_answers_wait_past_the_backlog_requests_get_503() {
    let server = Server::owned(Limits {
        backlog: 1 << 20,
        ..limits(HANG * 3)
    });
    let mut greedy = server.connect();
    greedy.write_all(b"GET /big HTTP/1.1\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    greedy.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // Most of 16 MiB waits for the greedy client: more than the 1 MiB backlog.
    let got = server.get("/refused");
    assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
    assert!(got.contains("too many answers waiting"), "{got}");
    let mut rest = Vec::new();
    greedy.read_to_end(&mut rest).unwrap();
    assert!(server.get("/after").ends_with("\"/after\""));
}

#[test]
fn an_answer_nobody_reads_is_abandoned_at_its_deadline() {
    let server = Server::owned(limits(Duration::from_millis(300)));
    let mut greedy = server.connect();
    greedy.write_all(b"GET /big HTTP/1.1\r\n\r\n").unwrap();
    // Served while the big answer waits for a reader.
    assert!(server.get("/small").ends_with("\"/small\""));
    // Past the deadline (waited out several times over) the server has closed it: reading
    // ends before the whole answer.
    std::thread::sleep(Duration::from_millis(1500));
    let mut got = Vec::new();
    let _ = greedy.read_to_end(&mut got);
    assert!(got.len() < 16 << 20, "the whole answer went out");
    assert!(server.get("/later").ends_with("\"/later\""));
}

#[test]
fn the_server_returns_once_stopped_whatever_its_clients_do() {
    let server = Server::owned(limits(HANG * 3));
    let mut slow = server.connect();
    slow.write_all(b"G").unwrap();
    let _idle = server.connect();
    server.stop.store(true, Ordering::Release);
    server
        .done
        .recv_timeout(HANG)
        .expect("the server returned with clients connected");
}

#[test]
fn after_runs_once_the_answer_that_asked_for_it_went_out() {
    let server = Server::owned(limits(HANG));
    assert_eq!(server.afters.load(Ordering::Acquire), 0);
    let got = server.get("/shutdown");
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
    server.get("/x");
    assert_eq!(server.afters.load(Ordering::Acquire), 1);
}

#[test]
fn other_users_malformed_and_oversized_requests_are_refused() {
    // SAFETY: geteuid has no preconditions.
    let someone_else = unsafe { libc::geteuid() }.wrapping_add(1);
    let foreign = Server::start(limits(HANG), someone_else);
    assert!(foreign.get("/").starts_with("HTTP/1.1 403 "));

    let server = Server::owned(limits(HANG));
    assert!(server.get("nope").starts_with("HTTP/1.1 400 "));
    let mut huge = server.connect();
    let head = format!("POST / HTTP/1.1\r\nX: {}\r\n", "a".repeat(http::MAX_HEAD));
    let _ = huge.write_all(head.as_bytes());
    assert!(answer(&mut huge).starts_with("HTTP/1.1 413 "));
    let mut short = server.connect();
    short.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    short.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(answer(&mut short).starts_with("HTTP/1.1 400 "));
}

/// Issue 40: a pause waited for the vCPUs inside the loop, so every other client waited too
/// (and was closed with 408 past its 2 s deadline).
#[test]
fn pause_blocked_every_other_client() {
    let server = Server::owned(limits(Duration::from_millis(300)));
    let mut deferred = server.connect();
    deferred
        .write_all(b"PUT /deferred HTTP/1.1\r\n\r\n")
        .unwrap();
    // Answered while the deferred one waits, several times past the request deadline.
    for i in 0..5 {
        let path = format!("/meanwhile{i}");
        assert!(server.get(&path).ends_with(&format!("{path:?}")));
        std::thread::sleep(Duration::from_millis(100));
    }
    deferred.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        deferred.read(&mut byte).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the deferred request was answered or closed before its answer was ready"
    );
    deferred.set_nonblocking(false).unwrap();
    *server.release.lock().unwrap() = Some("\"done\"".into());
    let got = answer(&mut deferred);
    assert!(
        got.starts_with("HTTP/1.1 200 ") && got.ends_with("\"done\""),
        "{got}"
    );
    assert!(server.get("/after").ends_with("\"/after\""));
}

/// Issue 40: of two requests sent together on one connection, only the first was answered.
#[test]
fn only_the_first_of_two_pipelined_requests_was_answered() {
    let server = Server::owned(limits(HANG));
    let mut s = server.connect();
    s.write_all(b"GET /a HTTP/1.1\r\n\r\nPUT /b HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        .unwrap();
    let got = answer(&mut s);
    let answers: Vec<&str> = got.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(answers.len(), 2, "{got}");
    assert!(answers[0].contains("Connection: keep-alive\r\n") && answers[0].ends_with("\"/a\""));
    assert!(answers[1].contains("Connection: close\r\n") && answers[1].ends_with("\"/b\""));
    // A deferred answer is followed by the next request's too.
    let mut s = server.connect();
    s.write_all(b"PUT /deferred HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n\r\n")
        .unwrap();
    *server.release.lock().unwrap() = Some("\"done\"".into());
    let got = answer(&mut s);
    assert!(
        got.contains("\"done\"HTTP/1.1 200 OK") && got.ends_with("\"/c\""),
        "{got}"
    );
}

#[test]
fn past_the_pipelining_bound_the_connection_closes() {
    let server = Server::owned(limits(HANG));
    let mut s = server.connect();
    let one = "GET /x HTTP/1.1\r\n\r\n";
    s.write_all(one.repeat(MAX_PIPELINED + 3).as_bytes())
        .unwrap();
    let got = answer(&mut s);
    assert_eq!(
        got.matches("HTTP/1.1 200 OK").count(),
        MAX_PIPELINED,
        "{got}"
    );
    assert_eq!(got.matches("Connection: close").count(), 1, "{got}");
    assert!(got.ends_with("\"/x\""));
    assert!(server.get("/after").ends_with("\"/after\""));
}
