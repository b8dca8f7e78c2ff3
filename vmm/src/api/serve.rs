//! Serving the API's connections on one thread with `poll(2)`: every socket is non-blocking,
//! every connection has a deadline for its request and one for its answer, and at most
//! [`Limits::connections`] are open at once. The loop wakes at least every [`Limits::tick`]
//! to see whether the run is over, so nothing a client does (or does not do) keeps it waiting.
//!
//! A request whose answer needs others to act first (a pause waits for the vCPUs) is answered
//! [`Answer::Later`]: its connection waits, the loop serves every other client meanwhile and
//! asks [`Handler::ready`] every [`Limits::deferred_tick`] until the answer is there.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use super::http::{self, parse, ParseError, Request, Response};

/// How long a client may take, and how many may be connected.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// From accepting a connection to the last byte of its request (head and body).
    pub request: Duration,
    /// From the answer being ready to its last byte taken by the client.
    pub answer: Duration,
    /// Connections open at once; accepting one more closes the oldest still sending its
    /// request (answered 503), or the new one when every open one is being answered.
    pub connections: usize,
    /// Bytes of answers waiting for their clients to read them past which requests are
    /// answered 503 instead of routed (so clients that ask and never read cannot fill the
    /// host's memory); the bound is this plus one answer.
    pub backlog: usize,
    /// The longest the loop sleeps before looking at the stop condition again.
    pub tick: Duration,
    /// The longest the loop sleeps while an answer is deferred before asking for it again.
    pub deferred_tick: Duration,
}

impl Limits {
    /// The API's limits (docs/api.openapi.yaml).
    pub const API: Limits = Limits {
        request: Duration::from_secs(2),
        answer: Duration::from_secs(2),
        connections: 256,
        backlog: 64 << 20,
        tick: Duration::from_millis(100),
        deferred_tick: Duration::from_millis(2),
    };
}

/// A handler's answer to a request.
#[derive(Debug)]
pub enum Answer {
    /// The answer, now; `true` with it asks for [`Handler::after`] once it is out.
    Now(Response, bool),
    /// The answer comes from [`Handler::ready`]: deferred answers come in the order deferred.
    Later,
}

/// What the server asks of whoever answers requests.
pub trait Handler {
    /// True once the server should return (the run is over).
    fn stopped(&self) -> bool;
    /// Answers a request, now or later.
    fn handle(&mut self, request: &Request) -> Answer;
    /// The oldest deferred answer, once it is ready; asked while any is deferred, and once
    /// more for each still deferred when the server returns.
    fn ready(&mut self) -> Option<Response>;
    /// Called once an answer that asked for it went out (or could not be delivered).
    fn after(&mut self);
}

/// One open connection, in the order accepted.
struct Conn {
    stream: UnixStream,
    deadline: Instant,
    /// The peer runs as hvprof's user: its requests are routed, anyone else's refused.
    owner: bool,
    phase: Phase,
    /// What the client sent past the request being answered: the next pipelined request,
    /// read once the answer is out.
    rest: Vec<u8>,
    /// Requests answered or being answered on this connection.
    served: usize,
}

enum Phase {
    /// Reading the request: the bytes so far.
    Reading(Vec<u8>),
    /// Request read, its answer deferred ([`Answer::Later`]); the handler bounds the wait.
    Waiting,
    /// Writing the answer; `then` asks for `Handler::after` once done.
    Writing {
        bytes: Vec<u8>,
        sent: usize,
        then: bool,
    },
}

/// Where a connection stands after some progress.
enum Step {
    /// Waiting for the client.
    Open,
    /// Finished or failed: close it (and run `Handler::after` if `then`).
    Done { then: bool },
}

/// The largest request buffered: a maximal head, its terminator and a maximal body.
const MAX_REQUEST: usize = http::MAX_HEAD + 4 + http::MAX_BODY;

/// Requests answered on one connection, pipelined one after another; the last is answered
/// with `Connection: close` and the connection closed.
pub const MAX_PIPELINED: usize = 16;

impl Conn {
    fn is_reading(&self) -> bool {
        matches!(self.phase, Phase::Reading(_))
    }

    fn is_waiting(&self) -> bool {
        matches!(self.phase, Phase::Waiting)
    }

    /// Bytes of its answer not yet sent.
    fn unsent(&self) -> usize {
        match &self.phase {
            Phase::Reading(_) | Phase::Waiting => 0,
            Phase::Writing { bytes, sent, .. } => bytes.len() - sent,
        }
    }

    /// Its deferred answer is ready: write it from now on.
    fn answer_later(&mut self, response: &Response, limits: &Limits) {
        self.deadline = Instant::now() + limits.answer;
        self.phase = Phase::Writing {
            bytes: response.to_bytes(self.rest.is_empty()),
            sent: 0,
            then: false,
        };
    }

    /// Reads what is there, answers a complete request, writes what the socket takes.
    /// `backlog` is the bytes of answers waiting for their clients, this one's added if it
    /// must wait too.
    /// Once an answer is out, a pipelined request the client sent after it is read and
    /// answered the same way.
    fn progress(
        &mut self,
        handler: &mut dyn Handler,
        limits: &Limits,
        backlog: &mut usize,
    ) -> Step {
        loop {
            match self.progress_one(handler, limits, backlog) {
                Step::Done { then: false } if !self.rest.is_empty() => {
                    self.phase = Phase::Reading(std::mem::take(&mut self.rest));
                    self.deadline = Instant::now() + limits.request;
                }
                step => return step,
            }
        }
    }

    /// [`Conn::progress`] up to the end of one answer.
    fn progress_one(
        &mut self,
        handler: &mut dyn Handler,
        limits: &Limits,
        backlog: &mut usize,
    ) -> Step {
        let fresh = !matches!(self.phase, Phase::Writing { .. });
        if let Phase::Reading(buf) = &mut self.phase {
            let (eof, parsed) = match read_available(&mut self.stream, buf) {
                Err(_) => return Step::Done { then: false },
                Ok(eof) => (eof, parse(buf)),
            };
            // A request routed, with bytes after it, is followed by the next one.
            let mut next = None;
            let answer = match parsed {
                Ok(_) if self.owner && *backlog > limits.backlog => Some(Answer::Now(
                    Response::error(503, "too many answers waiting to be read"),
                    false,
                )),
                Ok((req, used)) if self.owner => {
                    self.served += 1;
                    if used < buf.len() && self.served < MAX_PIPELINED {
                        next = Some(buf.split_off(used));
                    }
                    Some(handler.handle(&req))
                }
                Ok(_) => Some(Answer::Now(
                    Response::error(403, "only the owner of the socket may use this API"),
                    false,
                )),
                Err(ParseError::Incomplete) if buf.len() >= MAX_REQUEST => Some(Answer::Now(
                    Response::error(413, "request too large"),
                    false,
                )),
                Err(ParseError::Incomplete) if eof => Some(Answer::Now(
                    Response::error(400, "incomplete request"),
                    false,
                )),
                Err(ParseError::Incomplete) => None,
                Err(ParseError::TooLarge) => Some(Answer::Now(
                    Response::error(413, "request too large"),
                    false,
                )),
                Err(e) => Some(Answer::Now(Response::error(400, &e.to_string()), false)),
            };
            match answer {
                Some(Answer::Later) => {
                    self.rest = next.unwrap_or_default();
                    self.phase = Phase::Waiting;
                    return Step::Open;
                }
                Some(Answer::Now(response, then)) => {
                    // Nothing is read after an answer that ends the run.
                    self.rest = next.filter(|_| !then).unwrap_or_default();
                    self.deadline = Instant::now() + limits.answer;
                    self.phase = Phase::Writing {
                        bytes: response.to_bytes(self.rest.is_empty()),
                        sent: 0,
                        then,
                    };
                }
                None => return Step::Open,
            }
        }
        let Phase::Writing { bytes, sent, then } = &mut self.phase else {
            return Step::Open;
        };
        while *sent < bytes.len() {
            match self.stream.write(&bytes[*sent..]) {
                Ok(0) => {
                    // The client is gone: nothing after this answer is read.
                    self.rest.clear();
                    return Step::Done { then: *then };
                }
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if fresh {
                        *backlog += bytes.len() - *sent;
                    }
                    return Step::Open;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.rest.clear();
                    return Step::Done { then: *then };
                }
            }
        }
        Step::Done { then: *then }
    }

    /// Closes a connection past its deadline or evicted: a client still sending its request
    /// gets `status` if its socket takes it at once; an answer not taken is abandoned.
    fn close(mut self, status: u16, why: &str) -> bool {
        match self.phase {
            Phase::Reading(_) => {
                let _ = self
                    .stream
                    .write(&Response::error(status, why).to_bytes(true));
                false
            }
            Phase::Waiting => false,
            Phase::Writing { then, .. } => then,
        }
    }
}

impl Drop for Conn {
    /// Takes what the client sent past its request (a little, without waiting) so closing
    /// does not reset the connection before the client has read its answer.
    fn drop(&mut self) {
        drain(&mut self.stream);
    }
}

/// Reads (without waiting) up to a request's worth of what the peer sent.
fn drain(stream: &mut UnixStream) {
    let mut sink = [0u8; 4096];
    for _ in 0..MAX_REQUEST / sink.len() {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

/// Appends what the socket has (up to [`MAX_REQUEST`] in all); true at end of stream.
fn read_available(stream: &mut UnixStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 4096];
    while buf.len() < MAX_REQUEST {
        let room = (MAX_REQUEST - buf.len()).min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return Ok(true),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// The events to wait for on `fd`.
fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Serves `listener` (non-blocking) until `handler.stopped()`; only peers whose user id is
/// `owner` are answered, others get 403.
pub fn serve(listener: &UnixListener, owner: u32, handler: &mut dyn Handler, limits: &Limits) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    // Set when accept ran out of file descriptors: the listener sits out one tick.
    let mut accept_paused = false;
    // Whether the last accept failed, so a lasting failure is logged once.
    let mut accept_failing = false;
    while !handler.stopped() {
        fds.clear();
        fds.push(pollfd(
            listener.as_raw_fd(),
            if accept_paused { 0 } else { libc::POLLIN },
        ));
        accept_paused = false;
        fds.extend(conns.iter().map(|c| match c.phase {
            Phase::Reading(_) => pollfd(c.stream.as_raw_fd(), libc::POLLIN),
            Phase::Writing { .. } => pollfd(c.stream.as_raw_fd(), libc::POLLOUT),
            // Not watched (poll skips a negative fd, so a hang-up cannot spin the loop): its
            // answer is the handler's to give.
            Phase::Waiting => pollfd(-1, 0),
        }));
        let now = Instant::now();
        let tick = if conns.iter().any(Conn::is_waiting) {
            limits.deferred_tick
        } else {
            limits.tick
        };
        let wait = conns
            .iter()
            .filter(|c| !c.is_waiting())
            .map(|c| c.deadline.saturating_duration_since(now))
            .fold(tick, Duration::min);
        // Rounded up, so a deadline not yet reached does not spin the loop.
        let timeout = i32::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let nfds = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: `fds` holds `nfds` initialised pollfd entries that poll may write into;
        // every fd in it is open (owned by `listener` or `conns`) for the call's duration.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout) };
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                log::warn!("api: poll failed: {e}");
                std::thread::sleep(limits.tick);
            }
            continue;
        }

        // Progress on ready connections and deferred answers, then deadlines, oldest first.
        let mut backlog = conns.iter().map(Conn::unsent).sum();
        let mut kept = Vec::with_capacity(conns.len());
        // Deferred answers come in order: once the oldest is not ready, none is asked for.
        let mut deferred_ready = true;
        for (mut c, fd) in conns.drain(..).zip(&fds[1..]) {
            let step = if c.is_waiting() {
                match deferred_ready.then(|| handler.ready()).flatten() {
                    Some(response) => {
                        c.answer_later(&response, limits);
                        c.progress(handler, limits, &mut backlog)
                    }
                    None => {
                        deferred_ready = false;
                        Step::Open
                    }
                }
            } else if fd.revents != 0 {
                c.progress(handler, limits, &mut backlog)
            } else {
                Step::Open
            };
            match step {
                Step::Done { then } => finish(handler, then),
                Step::Open if !c.is_waiting() && Instant::now() >= c.deadline => {
                    log::debug!("api: a connection missed its deadline; closed");
                    let then = c.close(408, "request not received in time");
                    finish(handler, then);
                }
                Step::Open => kept.push(c),
            }
        }
        conns = kept;

        if fds[0].revents != 0 {
            let failed = accept_all(listener, owner, &mut conns, handler, limits, backlog);
            if let Err(e) = &failed {
                if !accept_failing {
                    log::warn!("api: accept failed: {e}");
                }
            }
            accept_failing = failed.is_err();
            accept_paused = matches!(failed, Err(AcceptError::Paused(_)));
        }
    }
    // The run is over: a deferred answer the handler can still give goes out if the socket
    // takes it at once.
    for mut c in conns.into_iter().filter(Conn::is_waiting) {
        if let Some(response) = handler.ready() {
            let _ = c.stream.write(&response.to_bytes(true));
        }
    }
}

fn finish(handler: &mut dyn Handler, then: bool) {
    if then {
        handler.after();
    }
}

/// Why accepting stopped early.
#[derive(Debug, thiserror::Error)]
enum AcceptError {
    /// A connection was closed to free a descriptor: accept again at the next wake-up.
    #[error("{0} (closed the oldest idle connection)")]
    Evicted(#[source] std::io::Error),
    /// Nothing to close: the listener sits out one tick.
    #[error("{0} (waiting)")]
    Paused(#[source] std::io::Error),
}

/// Accepts every pending connection.
fn accept_all(
    listener: &UnixListener,
    owner: u32,
    conns: &mut Vec<Conn>,
    handler: &mut dyn Handler,
    limits: &Limits,
    mut backlog: usize,
) -> Result<(), AcceptError> {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // EMFILE, ENFILE, ENOBUFS: free a descriptor if there is one, else wait a tick.
            Err(e) if evict_oldest(conns, handler) => return Err(AcceptError::Evicted(e)),
            Err(e) => return Err(AcceptError::Paused(e)),
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        if conns.len() >= limits.connections && !evict_oldest(conns, handler) {
            // Every open connection is being answered: this one waits for none of them.
            let mut stream = stream;
            let _ = stream.write(&Response::error(503, "too many connections").to_bytes(true));
            drain(&mut stream);
            continue;
        }
        let mut conn = Conn {
            owner: super::peer_uid(&stream) == Some(owner),
            stream,
            deadline: Instant::now() + limits.request,
            phase: Phase::Reading(Vec::new()),
            rest: Vec::new(),
            served: 0,
        };
        // The request is usually there already: answer it now rather than a poll later.
        match conn.progress(handler, limits, &mut backlog) {
            Step::Done { then } => finish(handler, then),
            Step::Open => conns.push(conn),
        }
    }
}

/// Closes the oldest connection still sending its request (503); false if there is none.
fn evict_oldest(conns: &mut Vec<Conn>, handler: &mut dyn Handler) -> bool {
    let Some(i) = conns.iter().position(Conn::is_reading) else {
        return false;
    };
    log::debug!("api: connection limit reached; closed the oldest idle connection");
    let then = conns.remove(i).close(503, "too many connections");
    finish(handler, then);
    true
}

#[cfg(test)]
mod tests;
