//! The control API: HTTP/1.1 + JSON on a Unix socket (docs/api.openapi.yaml). Pause and resume
//! the vCPUs, start, stop and read host-side profiles, read counters, shut the VM down.
//!
//! Only the socket's owner can use it: the socket file is created mode 0600, and every
//! connection's peer credentials (SO_PEERCRED) must carry hvprof's own user id.
//!
//! One thread serves every connection, driven by `poll(2)` ([`serve`]): all sockets are
//! non-blocking, so a client that sends its request a byte at a time, or never, delays no other
//! client, and the thread wakes at least every 100 ms to see whether the run is over, so the
//! main thread's join of it (after `--duration`, `--timeout`, a signal, the guest's exit) waits
//! at most that long. Each connection has a deadline for its whole request and one for its
//! whole answer, and at most 256 are open at once (the oldest still sending its request is
//! closed, with 503, to make room). One thread rather than a pool: the controller thread
//! already exists under its seccomp filter, `poll` is on its allow list, the routes share the
//! VM's state without locks, and no client needs more than microseconds of the thread's time;
//! a pool would cost a stack per thread and still need the deadlines. What waits on others (a
//! pause, until the vCPUs acknowledge it: [`pause`]) is not waited for in the loop: the
//! connection waits for its deferred answer while the loop serves everyone else.

mod addr;
pub mod client;
mod deltas;
pub mod http;
mod live;
mod pause;
mod routes;
mod serve;

use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::outcome::{Blame, Fault};
use crate::vm::VmControl;

/// Errors setting up the API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The socket path is taken by something that is not a socket.
    #[error("{}: already exists and is not a socket; remove it or choose another --api-socket", .0.display())]
    Exists(PathBuf),
    /// Another process listens on the socket.
    #[error("{}: another process is listening on this socket (another hvprof?); stop it or choose another --api-socket", .0.display())]
    Live(PathBuf),
    /// An existing socket could not be checked (connecting failed other than by refusal) or,
    /// nobody listening on it, removed.
    #[error("{}: an existing socket that cannot be checked or replaced; remove it or choose another --api-socket", .0.display())]
    Stale(PathBuf, #[source] std::io::Error),
    /// The path does not fit in a Unix socket address.
    #[error("{}: too long for a Unix socket ({len} bytes; at most {MAX_SOCKET_PATH}); choose a shorter --api-socket (a relative path counts from the current directory)", .path.display())]
    TooLong {
        /// The path given.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// Binding or configuring the socket failed.
    #[error("cannot listen on {}", .0.display())]
    Listen(PathBuf, #[source] std::io::Error),
}

impl Blame for ApiError {
    fn fault(&self) -> Fault {
        match self {
            ApiError::Exists(_) | ApiError::Live(_) | ApiError::TooLong { .. } => Fault::User,
            ApiError::Stale(_, e) | ApiError::Listen(_, e) => io_fault(e),
        }
    }
}

/// The longest socket path, in bytes: `sun_path` holds 108 bytes with the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// Refuses a path that cannot be a socket's address (the user's to mend), before anything is
/// looked at or created.
pub fn check_path(path: &Path) -> Result<(), ApiError> {
    use std::os::unix::ffi::OsStrExt;
    let len = path.as_os_str().as_bytes().len();
    if len > MAX_SOCKET_PATH {
        return Err(ApiError::TooLong {
            path: path.to_owned(),
            len,
        });
    }
    Ok(())
}

/// A path the user can mend (no such directory, no permission, a name too long, a read-only
/// file system) or a host failure (out of memory or descriptors).
fn io_fault(e: &std::io::Error) -> Fault {
    match e.raw_os_error() {
        Some(
            libc::ENOENT
            | libc::EACCES
            | libc::EPERM
            | libc::ENOTDIR
            | libc::ENAMETOOLONG
            | libc::ELOOP
            | libc::EROFS
            | libc::EINVAL
            | libc::EADDRINUSE
            | libc::EEXIST
            | libc::EISDIR,
        ) => Fault::User,
        _ => Fault::Host,
    }
}

/// A bound, owner-only API socket; the file is removed on drop. Whoever serves it borrows it,
/// so the file is removed by its owner (the main thread, after the run), not by the server's
/// filtered thread.
pub struct ApiSocket {
    listener: UnixListener,
    path: PathBuf,
    /// The socket file's device and inode as bound: what is at `path` at the end is removed
    /// only if it is still this file.
    file: Option<(u64, u64)>,
    /// The effective user id of hvprof, the only peer served.
    owner: u32,
}

impl ApiSocket {
    /// Creates the socket at `path`, which must not exist or be a stale socket: a socket
    /// nobody listens on (connecting is refused), as a killed hvprof leaves behind, is
    /// removed and replaced.
    pub fn bind(path: &Path) -> Result<Self, ApiError> {
        check_path(path)?;
        remove_stale(path)?;
        let err = |e| ApiError::Listen(path.to_owned(), e);
        // Created owner-only: bind applies the umask, and a chmod afterwards would leave a
        // moment in which the socket had the default mode. The VM is not built yet, so no
        // other thread creates files meanwhile.
        // SAFETY: umask has no preconditions; the old mask is restored below.
        let old_mask = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(path);
        // SAFETY: as above.
        unsafe { libc::umask(old_mask) };
        let listener = bound.map_err(err)?;
        let file = std::fs::symlink_metadata(path)
            .ok()
            .filter(|m| m.file_type().is_socket())
            .map(|m| (m.dev(), m.ino()));
        let socket = ApiSocket {
            listener,
            path: path.to_owned(),
            file,
            // SAFETY: geteuid has no preconditions.
            owner: unsafe { libc::geteuid() },
        };
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
        socket.listener.set_nonblocking(true).map_err(err)?;
        Ok(socket)
    }

    /// Serves requests about a run of `kernel` (as profile.json's `run.kernel` names it)
    /// until the VM's stop signal is requested; returns within 100 ms of it, whatever the
    /// clients do.
    pub fn serve(&self, control: VmControl, kernel: String) {
        let mut state = routes::ApiState::new(control).with_kernel(kernel);
        serve::serve(&self.listener, self.owner, &mut state, &serve::Limits::API);
    }
}

/// Makes way for a new socket at `path`: nothing there is fine; a socket whose connect is
/// refused (nobody listening) is removed, with a warning; anything else is refused: a live
/// socket, or any other kind of file (never removed).
fn remove_stale(path: &Path) -> Result<(), ApiError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ApiError::Listen(path.to_owned(), e)),
    };
    if !meta.file_type().is_socket() {
        return Err(ApiError::Exists(path.to_owned()));
    }
    match UnixStream::connect(path) {
        Ok(_) => return Err(ApiError::Live(path.to_owned())),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
        Err(e) => return Err(ApiError::Stale(path.to_owned(), e)),
    }
    // Still the socket that refused the connection (not one another process bound since).
    let again = std::fs::symlink_metadata(path).map_err(|e| ApiError::Stale(path.to_owned(), e))?;
    if (again.dev(), again.ino()) != (meta.dev(), meta.ino()) {
        return Err(ApiError::Live(path.to_owned()));
    }
    std::fs::remove_file(path).map_err(|e| ApiError::Stale(path.to_owned(), e))?;
    log::warn!(
        "{}: removed a stale API socket (nobody was listening on it)",
        path.display()
    );
    Ok(())
}

impl Drop for ApiSocket {
    /// Removes the socket file if it is still the one bound (same device and inode): whatever
    /// replaced it during the run (a file, another process's socket) is left alone, with a
    /// warning.
    fn drop(&mut self) {
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        match (now, self.file) {
            (None, _) => {}
            (Some(now), Some(bound)) if now == bound => {
                let _ = std::fs::remove_file(&self.path);
            }
            (Some(_), _) => log::warn!(
                "{}: not removed: it is no longer the API socket hvprof created",
                self.path.display()
            ),
        }
    }
}

/// The peer's user id.
pub(crate) fn peer_uid(stream: &UnixStream) -> Option<u32> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hvprof-api-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_stale_socket_is_replaced_and_a_live_one_refused() {
        let d = dir("stale");
        let path = d.join("api.sock");
        // A listener dropped without removing its file: what a killed hvprof leaves.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let socket = ApiSocket::bind(&path).expect("the stale socket is replaced");
        assert!(UnixStream::connect(&path).is_ok(), "the new socket listens");
        let e = ApiSocket::bind(&path)
            .err()
            .expect("a live socket is refused");
        assert!(matches!(e, ApiError::Live(_)), "{e}");
        assert_eq!(e.fault(), Fault::User);
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        drop(socket);
        assert!(!path.exists(), "the file goes with its socket");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Issue 40: a path too long for a socket address failed as a host failure (status 12).
    #[test]
    fn an_over_long_socket_path_was_a_host_failure() {
        let d = dir("long");
        let name = "s".repeat(MAX_SOCKET_PATH);
        let e = ApiSocket::bind(&d.join(&name)).err().expect("refused");
        assert_eq!(e.fault(), Fault::User, "{e}");
        assert!(e.to_string().contains("too long"), "{e}");
        assert!(!d.join(&name).exists());
        // The longest that fits is taken.
        let fits = format!("{}/{}", d.display(), "s").len();
        let fits = d.join("s".repeat(MAX_SOCKET_PATH - fits + 1));
        assert_eq!(fits.as_os_str().len(), MAX_SOCKET_PATH);
        drop(ApiSocket::bind(&fits).expect("a path of the longest length"));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Issue 40: the socket's path was removed blindly at the end, whatever was there by then.
    #[test]
    fn the_socket_path_was_removed_blindly_at_the_end() {
        let d = dir("replaced");
        let path = d.join("api.sock");
        let socket = ApiSocket::bind(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"someone else's").unwrap();
        drop(socket);
        assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
        // Another socket bound at the path since is not hvprof's either.
        let socket = ApiSocket::bind(&d.join("other.sock")).unwrap();
        std::fs::remove_file(d.join("other.sock")).unwrap();
        let theirs = UnixListener::bind(d.join("other.sock")).unwrap();
        drop(socket);
        assert!(d.join("other.sock").exists(), "another socket was removed");
        drop(theirs);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn what_is_not_a_socket_is_never_removed() {
        let d = dir("not-socket");
        let file = d.join("file");
        std::fs::write(&file, b"keep").unwrap();
        let e = ApiSocket::bind(&file).err().expect("a file is refused");
        assert!(matches!(e, ApiError::Exists(_)), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        // A symbolic link to a stale socket is not a socket either.
        let stale = d.join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let link = d.join("link");
        std::os::unix::fs::symlink(&stale, &link).unwrap();
        let e = ApiSocket::bind(&link).err().expect("a symlink is refused");
        assert!(matches!(e, ApiError::Exists(_)), "{e}");
        assert!(std::fs::symlink_metadata(&link).is_ok() && stale.exists());
        let e = ApiSocket::bind(&d.join("no/such/dir.sock")).err().unwrap();
        assert_eq!(e.fault(), Fault::User, "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
