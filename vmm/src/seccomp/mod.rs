//! System-call filters, one per kind of thread, as Firecracker and Cloud Hypervisor install
//! them: built with rust-vmm's seccompiler, installed by each thread on itself after its
//! set-up and before it touches anything a guest controls, and never removed. A call outside
//! the thread's list is not run: the thread gets SIGSYS and hvprof ends at once with a message
//! naming the call and the thread ([`trap`], exit status 14).
//!
//! Filtered: every vCPU thread, the event-loop thread, every controller thread (the API
//! server, the session's progress, the benchmark's timing), the in-kernel sampler's drain, and the main thread once the VM is
//! gone, while it turns what the guest left (module lists, PDB names, stacks) into reports.
//! Not filtered: the main thread while it builds the VM, before any guest code runs, and while
//! it waits for the event loop.

mod names;
mod rules;
mod trap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

use crate::outcome::{Blame, Fault};

/// The kinds of thread that get a filter of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadKind {
    /// A vCPU: KVM_RUN, exits, devices, sampling.
    Vcpu,
    /// The event loop: epoll over timers, signals, queue notifications and the console.
    EventLoop,
    /// A controller: the API server, the progress of a session, a benchmark's timing.
    Controller,
    /// The in-kernel sampler's drain: reads the rings and counts, with nothing beyond the
    /// calls every thread makes.
    Drain,
    /// The results: the main thread once the VM is gone (and `report`, `compare`, `merge`
    /// from their start), turning guest-derived data into reports: files, the symbol cache,
    /// symbol servers; never KVM, processes or anything else.
    Results,
    /// `hvprof top`: the results' calls (it reads guest text from a run's API) and the
    /// terminal's mode set and restored for its full-screen view.
    Watch,
}

impl ThreadKind {
    /// The name messages use.
    pub fn name(self) -> &'static str {
        match self {
            ThreadKind::Vcpu => "vcpu",
            ThreadKind::EventLoop => "event-loop",
            ThreadKind::Controller => "controller",
            ThreadKind::Drain => "drain",
            ThreadKind::Results => "results",
            ThreadKind::Watch => "watch",
        }
    }
}

/// Whether threads filter their system calls (`--seccomp`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Seccomp {
    /// Each thread kind gets its filter (the default).
    #[default]
    On,
    /// No filters, for debugging.
    Off,
}

impl std::str::FromStr for Seccomp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" => Ok(Seccomp::On),
            "off" => Ok(Seccomp::Off),
            _ => Err(format!("--seccomp takes on or off, not {s:?}")),
        }
    }
}

/// A filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// seccompiler refused the rules or the kernel refused the filter.
    #[error("cannot install the {0} thread's seccomp filter")]
    Filter(&'static str, #[source] seccompiler::Error),
    /// The SIGSYS handler could not be installed.
    #[error("cannot install the SIGSYS handler")]
    Handler(#[source] std::io::Error),
}

impl Blame for SeccompError {
    fn fault(&self) -> Fault {
        match self {
            SeccompError::Filter(..) | SeccompError::Handler(_) => Fault::Host,
        }
    }
}

/// The BPF program of `kind`'s filter: its allow list, SIGSYS for anything else.
fn program(kind: ThreadKind) -> Result<BpfProgram, seccompiler::Error> {
    let filter = SeccompFilter::new(
        rules::rules(kind)?,
        SeccompAction::Trap,
        SeccompAction::Allow,
        TargetArch::x86_64,
    )?;
    Ok(filter.try_into()?)
}

/// The second filter every thread installs: calls that fail with an error instead of ending
/// the process (opening a file, on every thread but the results'; clone3 on the results'
/// thread). Stacked filters all run and the strictest answer wins, so this one's error beats
/// the first one's allowance, and anything the first one refuses stays refused.
fn errno_filter(kind: ThreadKind) -> Result<BpfProgram, seccompiler::Error> {
    let (calls, errno) = rules::refused_with_errno(kind);
    let filter = SeccompFilter::new(
        calls.iter().map(|nr| (*nr, vec![])).collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(errno.unsigned_abs()),
        TargetArch::x86_64,
    )?;
    Ok(filter.try_into()?)
}

/// Installs `kind`'s filter on the calling thread (nothing with [`Seccomp::Off`]).
pub fn install(kind: ThreadKind, mode: Seccomp) -> Result<(), SeccompError> {
    if mode == Seccomp::Off {
        return Ok(());
    }
    let refuse = test_trigger::asked(kind);
    trap::install_handler().map_err(SeccompError::Handler)?;
    let fail = |e| SeccompError::Filter(kind.name(), e);
    let (program, errors) = (
        program(kind).map_err(fail)?,
        errno_filter(kind).map_err(fail)?,
    );
    trap::set_thread_kind(kind.name());
    // The error filter first: installing a filter takes calls the main one does not allow.
    seccompiler::apply_filter(&errors).map_err(fail)?;
    seccompiler::apply_filter(&program).map_err(fail)?;
    if refuse {
        test_trigger::refused_call();
    }
    Ok(())
}

/// Debug builds only (the test suite's): `HVPROF_SECCOMP_TEST_TRIGGER=<kind>` makes a thread of
/// that kind make a call no filter allows right after installing its filter, to show that the
/// refusal is caught and reported. Release builds have no trigger.
#[cfg(debug_assertions)]
mod test_trigger {
    use super::ThreadKind;

    pub(super) fn asked(kind: ThreadKind) -> bool {
        std::env::var("HVPROF_SECCOMP_TEST_TRIGGER").is_ok_and(|k| k == kind.name())
    }

    pub(super) fn refused_call() {
        // A packet socket: no thread may open one (the results thread opens only the
        // families a download uses).
        // SAFETY: socket(2) has no memory arguments; the filter refuses it before it runs.
        unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    }
}

#[cfg(not(debug_assertions))]
mod test_trigger {
    use super::ThreadKind;

    pub(super) fn asked(_: ThreadKind) -> bool {
        false
    }

    pub(super) fn refused_call() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_and_allows_ioctl_only_where_needed() {
        for kind in [
            ThreadKind::Vcpu,
            ThreadKind::EventLoop,
            ThreadKind::Controller,
            ThreadKind::Drain,
            ThreadKind::Results,
            ThreadKind::Watch,
        ] {
            let p = program(kind).unwrap();
            assert!(!p.is_empty(), "{kind:?}");
        }
        let has = |kind, nr| rules::allowed(kind).iter().any(|(n, _)| *n == nr);
        assert!(has(ThreadKind::Vcpu, libc::SYS_ioctl));
        assert!(!has(ThreadKind::Controller, libc::SYS_socket));
        assert!(!has(ThreadKind::Vcpu, libc::SYS_execve));
        assert!(!has(ThreadKind::EventLoop, libc::SYS_execve));
        assert!(has(ThreadKind::Controller, libc::SYS_accept4));
        // The drain: only what the other threads may too; no ioctl, no files.
        assert!(rules::allowed(ThreadKind::Drain).iter().all(|(nr, _)| has(
            ThreadKind::Controller,
            *nr
        ) && has(
            ThreadKind::Vcpu,
            *nr
        )));
        assert!(!has(ThreadKind::Drain, libc::SYS_ioctl));
        // The results: files and symbol servers, threads but no processes, no KVM.
        assert!(has(ThreadKind::Results, libc::SYS_openat));
        assert!(has(ThreadKind::Results, libc::SYS_connect));
        for nr in [
            libc::SYS_execve,
            libc::SYS_fork,
            libc::SYS_vfork,
            libc::SYS_ptrace,
            libc::SYS_kill,
        ] {
            assert!(!has(ThreadKind::Results, nr), "{nr}");
        }
        let results = rules::rules(ThreadKind::Results).unwrap();
        assert!(
            !results[&libc::SYS_ioctl].is_empty(),
            "ioctl: terminal, sockets"
        );
        assert_eq!(
            results[&libc::SYS_clone].len(),
            1,
            "clone: CLONE_THREAD only"
        );
        assert_eq!(
            rules::refused_with_errno(ThreadKind::Results),
            (&[libc::SYS_clone3][..], libc::ENOSYS)
        );
        assert!(!rules::refused_with_errno(ThreadKind::Results)
            .0
            .contains(&libc::SYS_openat));
    }

    #[test]
    fn a_call_allowed_with_any_argument_somewhere_is_not_narrowed_elsewhere() {
        // fcntl: any command for controllers (sockets), only F_GETFD for the others.
        let fcntl = |kind| rules::rules(kind).unwrap()[&libc::SYS_fcntl].len();
        assert_eq!(
            fcntl(ThreadKind::Controller),
            0,
            "no conditions: any argument"
        );
        assert_eq!(fcntl(ThreadKind::Vcpu), 1);
        let ioctls = rules::rules(ThreadKind::Vcpu).unwrap()[&libc::SYS_ioctl].len();
        assert!(ioctls > 10);
    }

    #[test]
    fn a_filtered_thread_runs_what_it_may_and_is_refused_the_rest() {
        // In a child process: a refused call ends the whole process by design. The programs
        // are built before the fork, so the child allocates nothing.
        let (program, files) = (
            program(ThreadKind::Controller).unwrap(),
            errno_filter(ThreadKind::Controller).unwrap(),
        );
        // SAFETY: fork in a test; the child makes only system calls and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = trap::install_handler().is_ok()
                && seccompiler::apply_filter(&files).is_ok()
                && seccompiler::apply_filter(&program).is_ok();
            // Allowed: a write of nothing to stdout.
            // SAFETY: a zero-length write.
            unsafe { libc::write(libc::STDOUT_FILENO, std::ptr::null(), 0) };
            // Opening a file fails with EACCES and the thread goes on.
            // SAFETY: a constant NUL-terminated path.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
            let eacces =
                fd == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EACCES);
            if !ok || !eacces {
                // SAFETY: ending the child.
                unsafe { libc::_exit(1) };
            }
            // Refused: socket, which ends the process with the seccomp status.
            // SAFETY: no memory arguments.
            unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            // SAFETY: ending the child.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), crate::outcome::STATUS_SECCOMP);
    }

    #[test]
    fn the_results_thread_opens_files_but_cannot_start_a_process() {
        let (program, errors) = (
            program(ThreadKind::Results).unwrap(),
            errno_filter(ThreadKind::Results).unwrap(),
        );
        // SAFETY: fork in a test; the child makes only system calls and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = trap::install_handler().is_ok()
                && seccompiler::apply_filter(&errors).is_ok()
                && seccompiler::apply_filter(&program).is_ok();
            // SAFETY: a constant NUL-terminated path.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
            // SAFETY: clone3 with no arguments: refused with ENOSYS before it reads them.
            let clone3 = unsafe { libc::syscall(libc::SYS_clone3, 0, 0) };
            let enosys = clone3 == -1
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS);
            if !ok || fd < 0 || !enosys {
                // SAFETY: ending the child.
                unsafe { libc::_exit(1) };
            }
            // A process (clone without CLONE_THREAD) ends this one with the seccomp status.
            // SAFETY: the raw call with fork's flags; refused before it runs.
            unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
            // SAFETY: ending the child.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), crate::outcome::STATUS_SECCOMP);
    }

    #[test]
    fn modes_parse() {
        assert_eq!("on".parse(), Ok(Seccomp::On));
        assert_eq!("off".parse(), Ok(Seccomp::Off));
        assert!("yes".parse::<Seccomp>().is_err());
    }
}
