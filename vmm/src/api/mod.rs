//! The control API: HTTP/1.1 + JSON on a Unix socket (docs/api.openapi.yaml). Pause and resume
//! the vCPUs, start, stop and read host-side profiles, read counters, shut the VM down.
//!
//! Only the socket's owner can use it: the socket file is created mode 0600, and every
//! connection's peer credentials (SO_PEERCRED) must carry hvprof's own user id.

mod addr;
pub mod http;
mod routes;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::vm::VmControl;
use http::{parse, ParseError, Response};

/// Errors setting up the API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The socket path is taken.
    #[error("{}: already exists; remove it or choose another --api-socket", .0.display())]
    Exists(PathBuf),
    /// Binding or configuring the socket failed.
    #[error("cannot listen on {}", .0.display())]
    Listen(PathBuf, #[source] std::io::Error),
}

/// A bound, owner-only API socket; the file is removed on drop. Whoever serves it borrows it,
/// so the file is removed by its owner (the main thread, after the run), not by the server's
/// filtered thread.
pub struct ApiSocket {
    listener: UnixListener,
    path: PathBuf,
    /// The effective user id of hvprof, the only peer served.
    owner: u32,
}

impl ApiSocket {
    /// Creates the socket at `path` (which must not exist).
    pub fn bind(path: &Path) -> Result<Self, ApiError> {
        if path.exists() {
            return Err(ApiError::Exists(path.to_owned()));
        }
        let err = |e| ApiError::Listen(path.to_owned(), e);
        let listener = UnixListener::bind(path).map_err(err)?;
        let socket = ApiSocket {
            listener,
            path: path.to_owned(),
            // SAFETY: geteuid has no preconditions.
            owner: unsafe { libc::geteuid() },
        };
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
        socket.listener.set_nonblocking(true).map_err(err)?;
        Ok(socket)
    }

    /// Serves requests until the VM's stop signal is requested.
    pub fn serve(&self, control: VmControl) {
        let mut state = routes::ApiState::new(control);
        while !state.control.stop.is_requested() {
            match self.listener.accept() {
                Ok((stream, _)) => handle(stream, self.owner, &mut state),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    log::warn!("api: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

impl Drop for ApiSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The peer's user id.
fn peer_uid(stream: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>()).ok()?;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given; the fd is open.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred.uid)
}

fn handle(mut stream: UnixStream, owner: u32, state: &mut routes::ApiState) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let response = if peer_uid(&stream) != Some(owner) {
        Response::error(403, "only the owner of the socket may use this API")
    } else {
        match read_request(&mut stream) {
            Ok(req) => state.route(&req),
            Err(ParseError::TooLarge) => Response::error(413, "request too large"),
            Err(e) => Response::error(400, &e.to_string()),
        }
    };
    let _ = stream.write_all(&response.to_bytes());
    state.after_response();
}

fn read_request(stream: &mut UnixStream) -> Result<http::Request, ParseError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match parse(&buf) {
            Ok((req, _)) => return Ok(req),
            Err(ParseError::Incomplete) => {}
            Err(e) => return Err(e),
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(ParseError::Incomplete),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > http::MAX_HEAD + http::MAX_BODY {
            return Err(ParseError::TooLarge);
        }
    }
}
