//! SIGSYS: how a refused system call is reported. A filter's mismatch action is `Trap`, so the
//! kernel sends the calling thread SIGSYS instead of running the call; the handler prints which
//! call, on which kind of thread, and ends the process with [`STATUS_SECCOMP`] at once. It
//! never returns to code that just did something hvprof does not do.
//!
//! The handler runs under the thread's filter, so it makes only calls every filter allows
//! (`write`, `exit_group`), and it allocates nothing.

use std::cell::Cell;

use vmm_sys_util::signal::register_signal_handler;

use super::names::NAMES;
use crate::outcome::STATUS_SECCOMP;

thread_local! {
    /// The filtered thread's kind, for the message (set before its filter is installed).
    static KIND: Cell<&'static str> = const { Cell::new("unfiltered") };
}

/// Names the calling thread's kind in a refusal's message.
pub(super) fn set_thread_kind(kind: &'static str) {
    KIND.with(|k| k.set(kind));
}

/// Installs the SIGSYS handler (idempotent).
pub(super) fn install_handler() -> std::io::Result<()> {
    register_signal_handler(libc::SIGSYS, on_sigsys)
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
}

/// A fixed buffer that a message is written into without allocating.
struct Message {
    buf: [u8; 256],
    len: usize,
}

impl Message {
    fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }

    fn push_number(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }
}

/// The message for system call `nr` refused on a `kind` thread.
fn message(kind: &str, nr: i64) -> Message {
    let mut m = Message {
        buf: [0; 256],
        len: 0,
    };
    m.push(b"hvprof: seccomp: the ");
    m.push(kind.as_bytes());
    m.push(b" thread made a system call its filter does not allow: ");
    let name = usize::try_from(nr).ok().and_then(|i| NAMES.get(i)).copied();
    m.push(
        name.filter(|n| !n.is_empty())
            .unwrap_or("unknown")
            .as_bytes(),
    );
    m.push(b" (");
    m.push_number(nr.unsigned_abs());
    m.push(b"); ending the run (rerun with --seccomp off to debug)\n");
    m
}

/// The number of the system call a SIGSYS reports: siginfo's `_sigsys._syscall`, an int after
/// the three ints of the header, its padding and the 8-byte `_call_addr`.
///
/// # Safety
/// `info` must be the siginfo the kernel passed with a seccomp SIGSYS.
unsafe fn syscall_number(info: *const libc::siginfo_t) -> i64 {
    // SAFETY: the kernel fills `_sigsys` for SIGSYS with si_code SYS_SECCOMP; offset 24 lies
    // inside siginfo_t's 128 bytes.
    i64::from(unsafe { info.cast::<u8>().add(24).cast::<i32>().read_unaligned() })
}

extern "C" fn on_sigsys(_num: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: this handler is only registered for SIGSYS, which only seccomp sends here.
    let nr = unsafe { syscall_number(info) };
    let kind = KIND.with(|k| k.get());
    let m = message(kind, nr);
    // SAFETY: write(2) on stderr from a buffer that outlives the call; async-signal-safe.
    unsafe { libc::write(libc::STDERR_FILENO, m.buf.as_ptr().cast(), m.len) };
    // SAFETY: _exit is async-signal-safe and ends every thread at once.
    unsafe { libc::_exit(STATUS_SECCOMP) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_call_and_the_thread() {
        let m = message("vcpu", 41);
        let text = std::str::from_utf8(&m.buf[..m.len]).unwrap();
        assert!(text.contains("the vcpu thread"), "{text}");
        assert!(text.contains(": socket (41);"), "{text}");
        let m = message("api", 9999);
        let text = std::str::from_utf8(&m.buf[..m.len]).unwrap();
        assert!(text.contains("unknown (9999)"), "{text}");
        assert!(text.ends_with('\n'));
    }
}
