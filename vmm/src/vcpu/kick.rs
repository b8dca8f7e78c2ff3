//! Kicking a vCPU out of KVM_RUN: a real-time signal whose handler sets `immediate_exit` in
//! the vCPU thread's own kvm_run page. A kick that lands while the thread is outside KVM_RUN
//! makes the next KVM_RUN return at once, so no kick is lost between checking for requests
//! and entering the guest.

use std::cell::Cell;
use std::sync::Once;

use kvm_bindings::kvm_run;
use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

thread_local! {
    /// The calling vCPU thread's kvm_run page, or null outside vCPU threads.
    static KVM_RUN_PAGE: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
}

/// The signal used for kicks.
pub fn kick_signal() -> i32 {
    SIGRTMIN()
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    request_immediate_exit();
}

/// Makes the calling vCPU thread's current or next KVM_RUN return at once. Async-signal-safe:
/// signal handlers (kicks, sampling timers) call it.
pub fn request_immediate_exit() {
    let page = KVM_RUN_PAGE.with(Cell::get);
    if !page.is_null() {
        // SAFETY: the pointer is the live kvm_run mapping of this thread's vCPU: it is set by
        // `bind` before the thread first enters KVM_RUN and cleared by `unbind` before the
        // vCPU fd (and so the mapping) is dropped. A volatile byte store is async-signal-safe.
        unsafe { std::ptr::addr_of_mut!((*page).immediate_exit).write_volatile(1) };
    }
}

/// Installs the kick handler (once per process).
pub fn install_handler() -> Result<(), vmm_sys_util::errno::Error> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| result = register_signal_handler(kick_signal(), on_kick));
    result
}

/// Binds the calling thread to `page` so kicks set its `immediate_exit`.
pub fn bind(page: *mut kvm_run) {
    KVM_RUN_PAGE.with(|p| p.set(page));
}

/// Unbinds the calling thread; later kicks do nothing.
pub fn unbind() {
    KVM_RUN_PAGE.with(|p| p.set(std::ptr::null_mut()));
}
