//! What each kind of thread may call once its filter is on, and why. Set-up (opening /dev/kvm
//! and files, creating the VM, mapping memory, creating timers and fds) happens before any
//! filter, so none of it is here. docs/architecture.md's threat model is this file in prose.

use std::collections::BTreeMap;

use kvm_bindings::{
    kvm_fpu, kvm_interrupt, kvm_ioeventfd, kvm_irq_level, kvm_irq_routing, kvm_irqfd,
    kvm_lapic_state, kvm_mp_state, kvm_msi, kvm_msrs, kvm_regs, kvm_sregs, kvm_translation,
    kvm_userspace_memory_region, KVMIO,
};
use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
use vmm_sys_util::{ioctl_io_nr, ioctl_ior_nr, ioctl_iow_nr, ioctl_iowr_nr};

use super::ThreadKind;

ioctl_io_nr!(KVM_RUN, KVMIO, 0x80);
ioctl_ior_nr!(KVM_GET_REGS, KVMIO, 0x81, kvm_regs);
ioctl_iow_nr!(KVM_SET_REGS, KVMIO, 0x82, kvm_regs);
ioctl_ior_nr!(KVM_GET_SREGS, KVMIO, 0x83, kvm_sregs);
ioctl_iow_nr!(KVM_SET_SREGS, KVMIO, 0x84, kvm_sregs);
ioctl_iowr_nr!(KVM_TRANSLATE, KVMIO, 0x85, kvm_translation);
ioctl_iow_nr!(KVM_INTERRUPT, KVMIO, 0x86, kvm_interrupt);
ioctl_iowr_nr!(KVM_GET_MSRS, KVMIO, 0x88, kvm_msrs);
ioctl_iow_nr!(KVM_SET_MSRS, KVMIO, 0x89, kvm_msrs);
ioctl_iow_nr!(KVM_SET_FPU, KVMIO, 0x8d, kvm_fpu);
ioctl_ior_nr!(KVM_GET_LAPIC, KVMIO, 0x8e, kvm_lapic_state);
ioctl_iow_nr!(KVM_SET_LAPIC, KVMIO, 0x8f, kvm_lapic_state);
ioctl_ior_nr!(KVM_GET_MP_STATE, KVMIO, 0x98, kvm_mp_state);
ioctl_iow_nr!(KVM_SET_MP_STATE, KVMIO, 0x99, kvm_mp_state);
ioctl_io_nr!(KVM_NMI, KVMIO, 0x9a);
ioctl_iow_nr!(
    KVM_SET_USER_MEMORY_REGION,
    KVMIO,
    0x46,
    kvm_userspace_memory_region
);
ioctl_iow_nr!(KVM_IRQ_LINE, KVMIO, 0x61, kvm_irq_level);
ioctl_iowr_nr!(KVM_IRQ_LINE_STATUS, KVMIO, 0x67, kvm_irq_level);
ioctl_iow_nr!(KVM_SET_GSI_ROUTING, KVMIO, 0x6a, kvm_irq_routing);
ioctl_iow_nr!(KVM_IRQFD, KVMIO, 0x76, kvm_irqfd);
ioctl_iow_nr!(KVM_IOEVENTFD, KVMIO, 0x79, kvm_ioeventfd);
ioctl_iow_nr!(KVM_SIGNAL_MSI, KVMIO, 0xa5, kvm_msi);

/// PERF_EVENT_IOC_ENABLE, _DISABLE, _RESET and _PERIOD.
const PERF_EVENT_IOCTLS: [u64; 4] = {
    use perf_event_open_sys::bindings::{DISABLE, ENABLE, PERIOD, RESET};
    [ENABLE as u64, DISABLE as u64, RESET as u64, PERIOD as u64]
};

/// Terminal ioctls: the event loop puts a console into raw mode and back.
const TCGETS: u64 = 0x5401;
const TCSETS: u64 = 0x5402;
const TCSETSW: u64 = 0x5403;
const TIOCGWINSZ: u64 = 0x5413;
/// The termios2 forms (`struct termios2`, 44 bytes) that crossterm's terminal calls (rustix's
/// tcgetattr and tcsetattr) make: `_IOR('T', 0x2A, ..)`, `_IOW('T', 0x2B, ..)`, `_IOW('T',
/// 0x2C, ..)`.
const TCGETS2: u64 = 0x802c_542a;
const TCSETS2: u64 = 0x402c_542b;
const TCSETSW2: u64 = 0x402c_542c;
const FIONBIO: u64 = 0x5421;

/// `(system call, only with these values of its selecting argument)`: an empty list allows
/// any argument. See [`selector`].
type Allow = (i64, Vec<u64>);

/// The argument that selects what a call does, which a narrowed rule compares: socket's
/// domain (the first), ioctl's request and fcntl's command (the second).
fn selector(nr: i64) -> u8 {
    if nr == libc::SYS_socket {
        0
    } else {
        1
    }
}

/// Every thread: memory (the allocator), futexes (locks, condition variables), signals
/// (returning from the kick and tick handlers, masks), writes (the console, logs, eventfds),
/// reads (eventfds), time, ending the thread or the process, and `fcntl(F_GETFD)` (debug
/// builds of the standard library check that an fd is open before closing it).
fn common() -> Vec<Allow> {
    let mut v: Vec<Allow> = [
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_writev,
        libc::SYS_close,
        libc::SYS_futex,
        libc::SYS_mmap,
        libc::SYS_munmap,
        libc::SYS_mremap,
        libc::SYS_mprotect,
        libc::SYS_madvise,
        libc::SYS_brk,
        libc::SYS_rt_sigreturn,
        libc::SYS_rt_sigprocmask,
        libc::SYS_sigaltstack,
        libc::SYS_gettid,
        libc::SYS_getpid,
        libc::SYS_tgkill,
        libc::SYS_sched_yield,
        libc::SYS_sched_getaffinity,
        libc::SYS_clock_gettime,
        libc::SYS_clock_nanosleep,
        libc::SYS_nanosleep,
        libc::SYS_getrandom,
        libc::SYS_restart_syscall,
        libc::SYS_exit,
        libc::SYS_exit_group,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect();
    v.push((libc::SYS_fcntl, vec![libc::F_GETFD as u64]));
    v
}

/// Calls the second filter answers with an error instead of letting them run: passed
/// through by the allow list, so that the error, not SIGSYS, is the answer.
///
/// Opening files, refused on every filtered thread but the results' with EACCES rather than
/// SIGSYS, because glibc's allocator opens /proc/sys/vm/overcommit_memory the first time it
/// trims a thread's heap, from whichever thread that is, and takes a failed open as "do not
/// know". On the results' thread, clone3, whose flags a filter cannot read: ENOSYS makes glibc
/// fall back to clone, whose flags the allow list checks (threads only, never a process).
pub(super) fn refused_with_errno(kind: ThreadKind) -> (&'static [i64], i32) {
    match kind {
        ThreadKind::Results | ThreadKind::Watch => (&[libc::SYS_clone3], libc::ENOSYS),
        _ => (&[libc::SYS_open, libc::SYS_openat], libc::EACCES),
    }
}

/// A virtio-blk disk's image files, read and written where requests are served (a qcow2
/// image grows with `ftruncate` when imago zeroes a new cluster at its end).
fn disk_io() -> Vec<Allow> {
    [
        libc::SYS_pread64,
        libc::SYS_pwrite64,
        libc::SYS_preadv,
        libc::SYS_pwritev,
        libc::SYS_fsync,
        libc::SYS_fdatasync,
        libc::SYS_lseek,
        libc::SYS_fallocate,
        libc::SYS_ftruncate,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect()
}

/// Interrupts devices raise (virtio, the ACPI SCI).
fn device_irqs() -> Vec<u64> {
    vec![KVM_IRQ_LINE(), KVM_IRQ_LINE_STATUS(), KVM_SIGNAL_MSI()]
}

/// The allow list of `kind`.
pub(super) fn allowed(kind: ThreadKind) -> Vec<Allow> {
    let mut v = common();
    v.extend(refused_with_errno(kind).0.iter().map(|nr| (*nr, vec![])));
    match kind {
        ThreadKind::Vcpu => {
            // KVM_RUN and register access for exits, sampling and stack walks; interrupt
            // injection; device emulation runs here, so the VM ioctls devices make (interrupt
            // lines, MSIs, ioeventfds a driver sets up, flash remapping) and disk I/O.
            let mut ioctls = vec![
                KVM_RUN(),
                KVM_GET_REGS(),
                KVM_SET_REGS(),
                KVM_GET_SREGS(),
                KVM_SET_SREGS(),
                KVM_TRANSLATE(),
                KVM_INTERRUPT(),
                KVM_NMI(),
                KVM_GET_MSRS(),
                KVM_SET_MSRS(),
                KVM_SET_FPU(),
                KVM_GET_LAPIC(),
                KVM_SET_LAPIC(),
                KVM_GET_MP_STATE(),
                KVM_SET_MP_STATE(),
                KVM_SET_USER_MEMORY_REGION(),
                KVM_SET_GSI_ROUTING(),
                KVM_IRQFD(),
                KVM_IOEVENTFD(),
            ];
            ioctls.extend(device_irqs());
            // Its perf-event triggers (opened before the filter): arm, re-arm, disarm.
            ioctls.extend(PERF_EVENT_IOCTLS);
            v.push((libc::SYS_ioctl, ioctls));
            // The vCPU's own sampling timer.
            for nr in [
                libc::SYS_timer_settime,
                libc::SYS_timer_gettime,
                libc::SYS_timer_getoverrun,
                libc::SYS_timer_delete,
            ] {
                v.push((nr, vec![]));
            }
            v.extend(disk_io());
        }
        ThreadKind::EventLoop => {
            // epoll over the run's fds, its timers, queue notifications served here (disk I/O
            // and the interrupts completions raise), and the console's terminal mode.
            for nr in [
                libc::SYS_epoll_wait,
                libc::SYS_epoll_pwait,
                libc::SYS_epoll_ctl,
                libc::SYS_timerfd_settime,
                libc::SYS_timerfd_gettime,
            ] {
                v.push((nr, vec![]));
            }
            let mut ioctls = vec![TCGETS, TCSETS, TCSETSW];
            ioctls.extend(device_irqs());
            v.push((libc::SYS_ioctl, ioctls));
            v.extend(disk_io());
        }
        ThreadKind::Controller => {
            // The API's Unix socket: accepting connections, reading requests, writing
            // replies; and the progress bar's terminal queries.
            for nr in [
                libc::SYS_accept4,
                libc::SYS_accept,
                libc::SYS_recvfrom,
                libc::SYS_recvmsg,
                libc::SYS_sendto,
                libc::SYS_sendmsg,
                libc::SYS_shutdown,
                libc::SYS_fcntl,
                libc::SYS_poll,
                libc::SYS_ppoll,
                libc::SYS_getsockopt,
                libc::SYS_setsockopt,
            ] {
                v.push((nr, vec![]));
            }
            // FIONBIO: std sets an accepted stream's blocking mode with it.
            v.push((libc::SYS_ioctl, vec![TCGETS, TIOCGWINSZ, FIONBIO]));
            // Signals queued to a vCPU with a value (rt_tgsigqueueinfo with the sender's uid,
            // as signals::kick sends them): the benchmark's perf-overflow path.
            v.push((libc::SYS_rt_tgsigqueueinfo, vec![]));
            v.push((libc::SYS_getuid, vec![]));
        }
        // Memory the kernel and the guest share, counters: nothing beyond the common calls.
        ThreadKind::Drain => {}
        ThreadKind::Results => v.extend(results()),
        ThreadKind::Watch => {
            v.extend(results());
            // Raw mode on and off (tcgetattr, tcsetattr) for the full-screen view.
            let modes = vec![TCSETS, TCSETSW, TCGETS2, TCSETS2, TCSETSW2];
            v.push((libc::SYS_ioctl, modes));
        }
    }
    v
}

/// The results thread: reading inputs (saved profiles, symbol files, PDBs), writing outputs
/// atomically (a temporary file, fsync, rename) and the symbol cache, fetching symbols over
/// HTTP(S) (name resolution included: glibc asks netlink for the host's addresses and sends
/// DNS queries with sendmmsg), and terminal queries for the printed report.
fn results() -> Vec<Allow> {
    let mut v: Vec<Allow> = [
        // Files and directories.
        libc::SYS_open,
        libc::SYS_openat,
        libc::SYS_stat,
        libc::SYS_fstat,
        libc::SYS_lstat,
        libc::SYS_newfstatat,
        libc::SYS_statx,
        libc::SYS_statfs,
        libc::SYS_fstatfs,
        libc::SYS_access,
        libc::SYS_faccessat,
        libc::SYS_faccessat2,
        libc::SYS_readlink,
        libc::SYS_readlinkat,
        libc::SYS_getcwd,
        libc::SYS_getdents64,
        libc::SYS_lseek,
        libc::SYS_pread64,
        // A disk image read for a guest's files (--disk-image): the qcow2 reader's vectored
        // reads.
        libc::SYS_preadv,
        libc::SYS_pwrite64,
        libc::SYS_fsync,
        libc::SYS_fdatasync,
        libc::SYS_ftruncate,
        libc::SYS_fallocate,
        // std::io::copy between files (a symbol file copied into the cache).
        libc::SYS_copy_file_range,
        libc::SYS_sendfile,
        libc::SYS_fchmod,
        libc::SYS_fcntl,
        libc::SYS_flock,
        libc::SYS_rename,
        libc::SYS_renameat,
        libc::SYS_renameat2,
        libc::SYS_unlink,
        libc::SYS_unlinkat,
        libc::SYS_mkdir,
        libc::SYS_mkdirat,
        libc::SYS_rmdir,
        libc::SYS_umask,
        // Symbol servers.
        libc::SYS_connect,
        libc::SYS_bind,
        libc::SYS_getsockname,
        libc::SYS_getpeername,
        libc::SYS_getsockopt,
        libc::SYS_setsockopt,
        libc::SYS_sendto,
        libc::SYS_sendmsg,
        libc::SYS_sendmmsg,
        libc::SYS_recvfrom,
        libc::SYS_recvmsg,
        libc::SYS_shutdown,
        libc::SYS_poll,
        libc::SYS_ppoll,
        libc::SYS_uname,
        libc::SYS_getuid,
        libc::SYS_geteuid,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect();
    // Sockets of the families a download and its name resolution use, nothing else.
    let families = [
        libc::AF_UNIX,
        libc::AF_INET,
        libc::AF_INET6,
        libc::AF_NETLINK,
    ];
    v.push((
        libc::SYS_socket,
        families
            .iter()
            .map(|f| u64::from(f.unsigned_abs()))
            .collect(),
    ));
    v.push((libc::SYS_ioctl, vec![TCGETS, TIOCGWINSZ, FIONBIO]));
    // A download's name resolution runs on a thread of the HTTP client's (with a time
    // limit): clone with CLONE_THREAD (checked in `rules`), and what a new thread calls.
    v.push((libc::SYS_clone, vec![]));
    v.push((libc::SYS_set_robust_list, vec![]));
    v.push((libc::SYS_rseq, vec![]));
    v
}

/// clone only for a thread: its flags (the first argument) include CLONE_THREAD.
fn thread_only() -> Result<SeccompRule, seccompiler::Error> {
    let thread = libc::CLONE_THREAD as u64;
    Ok(SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(thread),
        thread,
    )?])?)
}

/// The allow list as seccompiler rules: a narrowed call compared on its [`selector`] (the
/// kernel reads each of them as a 32-bit int).
pub(super) fn rules(
    kind: ThreadKind,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::Error> {
    // Per call: None once any entry allows every argument, else the arguments allowed.
    let mut merged: BTreeMap<i64, Option<Vec<u64>>> = BTreeMap::new();
    for (nr, args) in allowed(kind) {
        let slot = merged.entry(nr).or_insert_with(|| Some(Vec::new()));
        match (args.is_empty(), slot.as_mut()) {
            (true, _) => *slot = None,
            (false, Some(list)) => list.extend(args),
            (false, None) => {}
        }
    }
    let mut map = BTreeMap::new();
    for (nr, args) in merged {
        let mut rules = Vec::new();
        for a in args.unwrap_or_default() {
            let c =
                SeccompCondition::new(selector(nr), SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, a)?;
            rules.push(SeccompRule::new(vec![c])?);
        }
        map.insert(nr, rules);
    }
    if let Some(clone) = map.get_mut(&libc::SYS_clone) {
        *clone = vec![thread_only()?];
    }
    Ok(map)
}
