//! Kicking a vCPU out of `KVM_RUN`: a real-time signal whose handler sets `immediate_exit` in
//! the vCPU thread's own `kvm_run` page. A kick that lands while the thread is outside
//! `KVM_RUN` makes the next `KVM_RUN` return at once, so no kick is lost between checking for
//! requests and entering the guest.
//!
//! Other threads kick vCPUs through a [`KickTable`]: each vCPU thread enters its slot before
//! its first `KVM_RUN` and leaves it before it returns, and a kick is sent under the slot's
//! lock, so no signal is ever sent to a thread that has finished. The table can only kick:
//! holding it gives no power to pause, stop or reconfigure a vCPU.
//!
//! Threads are addressed by their thread id with the system calls glibc's `pthread_kill` and
//! `pthread_sigqueue` make (`tgkill`, `rt_tgsigqueueinfo`), so the same calls are made, and
//! allowed by the seccomp filters, whichever C library hvprof is linked with (musl has no
//! `pthread_sigqueue`, and its `pthread_kill` calls `tkill`).

use std::cell::Cell;
use std::sync::Mutex;

use kvm_bindings::kvm_run;

thread_local! {
    /// The calling vCPU thread's kvm_run page, or null outside vCPU threads.
    static KVM_RUN_PAGE: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
}

pub(super) extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    request_immediate_exit();
}

/// Makes the calling vCPU thread's current or next KVM_RUN return at once. Async-signal-safe:
/// signal handlers (kicks, sampling ticks) call it.
pub(super) fn request_immediate_exit() {
    let page = KVM_RUN_PAGE.with(Cell::get);
    if !page.is_null() {
        // SAFETY: the pointer is the live kvm_run mapping of this thread's vCPU: it is set by
        // `KickTable::enter` before the thread first enters KVM_RUN and cleared when the
        // returned `Entered` is dropped, which the vCPU thread does before its fd (and so the
        // mapping) is dropped. A volatile byte store is async-signal-safe.
        unsafe { std::ptr::addr_of_mut!((*page).immediate_exit).write_volatile(1) };
    }
}

/// Where each vCPU thread can be kicked while it runs; one slot per vCPU.
#[derive(Debug)]
pub struct KickTable {
    threads: Box<[Mutex<Option<libc::pid_t>>]>,
}

impl KickTable {
    /// A table for `vcpus` vCPUs, none of them running yet.
    pub fn new(vcpus: usize) -> Self {
        KickTable {
            threads: (0..vcpus).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// True when the table has no slot.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Called by vCPU thread `index` before its first `KVM_RUN`: kicks to `index` now reach
    /// this thread and set `immediate_exit` in `page`, its vCPU's `kvm_run` mapping, until
    /// the returned guard is dropped. The caller must drop the guard before it unmaps `page`.
    pub fn enter(&self, index: usize, page: *mut kvm_run) -> Entered<'_> {
        KVM_RUN_PAGE.with(|p| p.set(page));
        if let Some(slot) = self.threads.get(index) {
            // SAFETY: gettid has no preconditions.
            *lock(slot) = Some(unsafe { libc::gettid() });
        }
        Entered { table: self, index }
    }

    /// Kicks vCPU `index` out of `KVM_RUN`. False when no thread is in that slot (not started
    /// yet, or finished): such a vCPU is not in the guest and will look at its requests and
    /// settings before it enters.
    pub fn kick(&self, index: usize) -> bool {
        self.signal(index, super::kick_signal())
    }

    /// Kicks every running vCPU.
    pub fn kick_all(&self) {
        for index in 0..self.threads.len() {
            self.kick(index);
        }
    }

    /// Queues `signal` with `value` to vCPU thread `index` (as `pthread_sigqueue` does);
    /// false as for [`KickTable::signal`].
    pub fn queue(&self, index: usize, signal: i32, value: i32) -> bool {
        self.send(index, signal, Some(value))
    }

    /// Sends `signal` (a kick or a sampling tick) to vCPU thread `index`. False when no thread
    /// is in that slot or the signal could not be sent.
    pub fn signal(&self, index: usize, signal: i32) -> bool {
        self.send(index, signal, None)
    }

    fn send(&self, index: usize, signal: i32, value: Option<i32>) -> bool {
        let Some(slot) = self.threads.get(index) else {
            return false;
        };
        let guard = lock(slot);
        let Some(thread) = *guard else {
            return false;
        };
        let sent = match value {
            None => tgkill(thread, signal),
            Some(v) => queue(thread, signal, usize::try_from(v).unwrap_or(0)),
        };
        if let Err(e) = &sent {
            log::debug!("signal {signal} to vCPU {index} failed: {e}");
        }
        sent.is_ok()
    }
}

/// Sends `signal` to thread `tid` of this process. The caller holds the slot lock that keeps
/// `tid` a live thread of this process (it leaves its slot under the lock before it returns).
fn tgkill(tid: libc::pid_t, signal: i32) -> std::io::Result<()> {
    // SAFETY: tgkill takes three integers and sends a signal; it touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The `siginfo_t` a queued signal carries (x86-64 layout, 128 bytes): the sender's pid and
/// uid, and the value the handler reads as `si_value`, after `si_signo`, `si_errno`,
/// `si_code` and padding to 8 bytes.
#[repr(C)]
struct QueuedInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    pid: libc::pid_t,
    uid: libc::uid_t,
    value: usize,
    _rest: [u64; 12],
}

/// Queues `signal` with `value` to thread `tid` of this process; the same contract as
/// [`tgkill`].
pub(super) fn queue(tid: libc::pid_t, signal: i32, value: usize) -> std::io::Result<()> {
    const _: () = assert!(std::mem::size_of::<QueuedInfo>() == 128);
    // SAFETY: getpid and getuid have no preconditions.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    let info = QueuedInfo {
        signo: signal,
        errno: 0,
        code: libc::SI_QUEUE,
        _pad: 0,
        pid,
        uid,
        value,
        _rest: [0; 12],
    };
    // SAFETY: `info` is a siginfo_t-sized record the kernel only reads, alive for the call;
    // its code is SI_QUEUE, which a process may send to its own threads.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            pid,
            tid,
            signal,
            std::ptr::addr_of!(info),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A vCPU thread's place in a [`KickTable`]; dropping it leaves the slot and unbinds the
/// thread's `kvm_run` page.
#[must_use = "kicks stop reaching the thread when this is dropped"]
pub struct Entered<'a> {
    table: &'a KickTable,
    index: usize,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.table.threads.get(self.index) {
            *lock(slot) = None;
        }
        KVM_RUN_PAGE.with(|p| p.set(std::ptr::null_mut()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A zeroed kvm_run page owned by the test.
    fn page() -> Box<kvm_run> {
        // SAFETY: kvm_run is plain data (integers, arrays and unions of them); all zeroes is a
        // valid value.
        Box::new(unsafe { std::mem::zeroed() })
    }

    #[test]
    fn no_thread_no_kick() {
        let table = KickTable::new(2);
        assert!(!table.kick(0));
        assert!(!table.kick(5));
        table.kick_all();
    }

    #[test]
    fn a_kick_sets_immediate_exit_in_the_entered_threads_page() {
        super::super::install_handlers().unwrap();
        let table = Arc::new(KickTable::new(1));
        let entered = Arc::new(AtomicBool::new(false));
        let kicked = Arc::new(AtomicBool::new(false));
        let t = {
            let (table, entered, kicked) = (table.clone(), entered.clone(), kicked.clone());
            std::thread::spawn(move || {
                let mut run = page();
                let page: *mut kvm_run = &mut *run;
                let guard = table.enter(0, page);
                entered.store(true, Ordering::Release);
                // Wait (without a time limit: the main thread kicks once it saw `entered`).
                // SAFETY: `page` points into `run`, a live page this thread owns; the handler
                // writes the same byte on this thread, so a volatile read observes it.
                while unsafe { std::ptr::addr_of!((*page).immediate_exit).read_volatile() } == 0 {
                    std::thread::yield_now();
                }
                drop(guard);
                kicked.store(true, Ordering::Release);
            })
        };
        while !entered.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        assert!(table.kick(0));
        t.join().unwrap();
        assert!(kicked.load(Ordering::Acquire));
        // The thread left its slot: later kicks reach nobody.
        assert!(!table.kick(0));
    }
}
