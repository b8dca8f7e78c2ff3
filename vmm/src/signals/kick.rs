//! Kicking a vCPU out of `KVM_RUN`: a real-time signal whose handler sets `immediate_exit` in
//! the vCPU thread's own `kvm_run` page. A kick that lands while the thread is outside
//! `KVM_RUN` makes the next `KVM_RUN` return at once, so no kick is lost between checking for
//! requests and entering the guest.
//!
//! Other threads kick vCPUs through a [`KickTable`]: each vCPU thread enters its slot before
//! its first `KVM_RUN` and leaves it before it returns, and a kick is sent under the slot's
//! lock, so no signal is ever sent to a thread that has finished. The table can only kick:
//! holding it gives no power to pause, stop or reconfigure a vCPU.

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
    threads: Box<[Mutex<Option<libc::pthread_t>>]>,
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
            // SAFETY: pthread_self has no preconditions.
            *lock(slot) = Some(unsafe { libc::pthread_self() });
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

    /// Queues `signal` with `value` to vCPU thread `index` (`pthread_sigqueue`); false as
    /// for [`KickTable::signal`].
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
        let rc = match value {
            // SAFETY: `thread` is a live thread: it entered this slot and leaves it (under
            // this lock, which we hold) before it returns, so it has not finished.
            None => unsafe { libc::pthread_kill(thread, signal) },
            Some(v) => {
                let value = libc::sigval {
                    sival_ptr: usize::try_from(v).unwrap_or(0) as *mut libc::c_void,
                };
                // SAFETY: as above.
                unsafe { libc::pthread_sigqueue(thread, signal, value) }
            }
        };
        if rc != 0 {
            log::debug!("signal {signal} to vCPU {index} failed: error {rc}");
        }
        rc == 0
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
