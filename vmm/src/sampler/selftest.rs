//! Whether the in-kernel sampler works here, found by trying it: a throwaway VM with one vCPU
//! spins at CPL 3 in long mode while a cpu-clock ring event samples its thread, and the records
//! must come back attributed to the guest, at the loop. The kernel may refuse the event
//! (perf_event_paranoid above 1 without CAP_PERFMON, a seccomp or container policy), the ring
//! may not be mapped (the locked-memory limit), or a kernel may sample the thread without
//! attributing guest code (every record then says host): each is a [`Unavailable`] reason,
//! which the run prints in one line before it samples with kicks instead.

use std::time::{Duration, Instant};

use kvm_bindings::{kvm_segment, kvm_userspace_memory_region};
use kvm_ioctls::{Kvm, VcpuExit};
use vm_memory::{
    Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    MemoryRegionAddress,
};

use super::events::{self, EventSpec, Vendor};
use super::probe::{paranoid_level, Absence};
use super::ring::record::{self, Mode, Record};
use super::ring::{RingError, ThreadEvents};
use super::SampleTimer;

/// Why the in-kernel sampler is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The ring event could not be opened.
    #[error("the kernel refused the ring event: {0}")]
    Open(Absence),
    /// The ring could not be mapped.
    #[error("the ring buffer could not be mapped ({0}); raise RLIMIT_MEMLOCK or kernel.perf_event_mlock_kb")]
    Map(String),
    /// The throwaway VM could not be built or run.
    #[error("its self-test VM failed: {0}")]
    SelfTestVm(String),
    /// The thread was sampled but no record was attributed to the guest.
    #[error(
        "this kernel does not attribute samples to the guest ({0} host samples, none in the guest)"
    )]
    NotAttributed(u64),
    /// No record came back at all.
    #[error("no sample came back in the self-test")]
    NoSamples,
    /// `--clock wall` samples halted and preempted vCPUs, which an event on the thread's CPU
    /// time cannot.
    #[error("--clock wall asks for wall-clock samples, which only kicks take")]
    WallClock,
    /// A timeline from the run's start shows halted vCPUs and the run's phases, which only
    /// wall-clock kicks sample.
    #[error("a timeline shows when vCPUs halt, which only wall-clock kicks sample")]
    Timeline,
}

/// What the self-test saw when it worked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    /// Records attributed to the guest's loop.
    pub guest: u64,
    /// Records of host time.
    pub host: u64,
}

/// Where the loop runs, a page the page tables map for user mode.
const CODE: u64 = 0x8000;
/// The page tables: PML4, PDPT, PD (one 2 MiB user page at 0).
const PML4: u64 = 0x1000;
/// `jmp $`.
const LOOP: [u8; 2] = [0xEB, 0xFE];
/// How long the guest spins at most, and at least.
const MAX_SPIN: Duration = Duration::from_millis(500);
const MIN_SPIN: Duration = Duration::from_millis(20);
/// Sampling period: 50 µs of the thread's CPU time.
const PERIOD_NS: u64 = 50_000;

/// The cpu-clock event.
pub fn cpu_clock() -> Option<EventSpec> {
    events::by_name(events::CPU_CLOCK).and_then(|e| e.spec(Vendor::host()))
}

/// Runs the self-test on a thread of its own (the event samples the thread that opens it).
pub fn run() -> Result<Passed, Unavailable> {
    std::thread::Builder::new()
        .name("sampler-test".into())
        .spawn(run_here)
        .map_err(|e| Unavailable::SelfTestVm(e.to_string()))?
        .join()
        .unwrap_or(Err(Unavailable::SelfTestVm(
            "the test thread panicked".into(),
        )))
}

fn vm_error(what: &str) -> impl Fn(kvm_ioctls::Error) -> Unavailable + '_ {
    move |e| Unavailable::SelfTestVm(format!("{what}: {e}"))
}

fn user_segment(selector: u16, code: bool) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: if code { 0xb } else { 0x3 },
        present: 1,
        dpl: 3,
        db: u8::from(!code),
        s: 1,
        l: u8::from(code),
        g: 1,
        ..Default::default()
    }
}

fn run_here() -> Result<Passed, Unavailable> {
    let spec = cpu_clock().ok_or(Unavailable::Open(Absence::NoEncoding))?;
    if let Some(paranoid) = test_hook::denied() {
        return Err(Unavailable::Open(Absence::Denied {
            paranoid: Some(paranoid),
        }));
    }
    crate::signals::install_handlers().map_err(|e| Unavailable::SelfTestVm(e.to_string()))?;
    let (mut events, mut ring) =
        ThreadEvents::open_on_current_thread(&[(0, spec)], 1).map_err(|e| match e {
            RingError::Open(e) => Unavailable::Open(Absence::of_errno(
                e.raw_os_error().unwrap_or(libc::EIO),
                paranoid_level(),
            )),
            RingError::Map(e) => Unavailable::Map(e.to_string()),
            e => Unavailable::SelfTestVm(report::chain::with_causes(&e)),
        })?;
    let kvm = Kvm::new().map_err(vm_error("/dev/kvm"))?;
    let vm = kvm.create_vm().map_err(vm_error("KVM_CREATE_VM"))?;
    let mem: GuestMemoryMmap = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 2 << 20)])
        .map_err(|e| Unavailable::SelfTestVm(e.to_string()))?;
    let host = mem
        .iter()
        .next()
        .and_then(|r| r.get_host_address(MemoryRegionAddress(0)).ok())
        .ok_or_else(|| Unavailable::SelfTestVm("no guest memory".into()))?;
    let region = kvm_userspace_memory_region {
        slot: 0,
        guest_phys_addr: 0,
        memory_size: 2 << 20,
        userspace_addr: host as u64,
        flags: 0,
    };
    // SAFETY: the region is a live mapping owned by `mem`, which outlives the VM (dropped
    // after it, at the end of this function).
    unsafe { vm.set_user_memory_region(region) }.map_err(vm_error("memory"))?;
    // PML4 -> PDPT -> PD whose entry 0 maps 2 MiB at 0: present, writable, user, large.
    let tables = [
        (PML4, PML4 + 0x1000 + 7),
        (PML4 + 0x1000, PML4 + 0x2000 + 7),
        (PML4 + 0x2000, 0x87),
    ];
    for (at, entry) in tables {
        mem.write_obj(entry, GuestAddress(at))
            .map_err(|e| Unavailable::SelfTestVm(e.to_string()))?;
    }
    mem.write_slice(&LOOP, GuestAddress(CODE))
        .map_err(|e| Unavailable::SelfTestVm(e.to_string()))?;
    let mut vcpu = vm.create_vcpu(0).map_err(vm_error("KVM_CREATE_VCPU"))?;
    let mut sregs = vcpu.get_sregs().map_err(vm_error("KVM_GET_SREGS"))?;
    sregs.cr3 = PML4;
    sregs.cr4 = 1 << 5; // PAE
    sregs.cr0 = 1 | (1 << 4) | (1 << 31); // PE, ET, PG
    sregs.efer = (1 << 8) | (1 << 10); // LME, LMA
    sregs.cs = user_segment(0x1b, true);
    sregs.ss = user_segment(0x23, false);
    sregs.ds = sregs.ss;
    sregs.es = sregs.ss;
    vcpu.set_sregs(&sregs).map_err(vm_error("KVM_SET_SREGS"))?;
    let mut regs = vcpu.get_regs().map_err(vm_error("KVM_GET_REGS"))?;
    regs.rip = CODE;
    regs.rflags = 2;
    regs.rsp = CODE + 0x1000;
    vcpu.set_regs(&regs).map_err(vm_error("KVM_SET_REGS"))?;
    // Each tick of this timer interrupts KVM_RUN, so the loop below looks at the time.
    let mut timer =
        SampleTimer::for_current_thread().map_err(|e| Unavailable::SelfTestVm(e.to_string()))?;
    timer
        .set(Some(50_000)) // 5 ms
        .map_err(|e| Unavailable::SelfTestVm(e.to_string()))?;
    events
        .set(0, Some(PERIOD_NS))
        .map_err(|e| Unavailable::Open(Absence::Error(e.raw_os_error().unwrap_or(0))))?;
    let start = Instant::now();
    let (mut guest, mut host_n, mut bytes) = (0u64, 0u64, Vec::new());
    let outcome = loop {
        match vcpu.run() {
            Ok(VcpuExit::Intr) => {}
            Ok(other) => break Some(format!("the loop exited: {other:?}")),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {}
            Err(e) => break Some(format!("KVM_RUN: {e}")),
        }
        ring.take(&mut bytes);
        let _ = record::parse(&bytes, |r| match r {
            Record::Sample {
                ip,
                mode: Mode::Guest { cpl: 3 },
                ..
            } if ip == CODE => guest += 1,
            Record::Sample { .. } => host_n += 1,
            _ => {}
        });
        bytes.clear();
        let spun = start.elapsed();
        if spun >= MAX_SPIN || (spun >= MIN_SPIN && guest > 0) {
            break None;
        }
    };
    let _ = events.set(0, None);
    let _ = timer.set(None);
    crate::signals::tick::take_ticks();
    if let Some(why) = outcome {
        return Err(Unavailable::SelfTestVm(why));
    }
    match (guest, host_n) {
        (0, 0) => Err(Unavailable::NoSamples),
        (0, h) => Err(Unavailable::NotAttributed(h)),
        (g, h) => Ok(Passed { guest: g, host: h }),
    }
}

/// Debug builds only (the test suite's): `HVPROF_SAMPLER_TEST_DENY=<level>` answers the
/// self-test as a host whose kernel.perf_event_paranoid is `<level>` answers a user without
/// CAP_PERFMON, so the fallback to kicks is tested without changing the host's settings.
/// Release builds have no hook.
#[cfg(debug_assertions)]
mod test_hook {
    pub(super) fn denied() -> Option<i32> {
        std::env::var("HVPROF_SAMPLER_TEST_DENY")
            .ok()
            .and_then(|v| v.parse().ok())
    }
}

#[cfg(not(debug_assertions))]
mod test_hook {
    pub(super) fn denied() -> Option<i32> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_self_test_finds_the_guest_s_loop_or_says_why_not() {
        match run() {
            Ok(p) => {
                eprintln!("self-test: {p:?}");
                assert!(p.guest > 0, "{p:?}");
            }
            // Whatever the reason, it is one line a user can act on.
            Err(why) => {
                let line = why.to_string();
                eprintln!("in-kernel sampling unavailable here: {line}");
                assert!(!line.contains('\n') && !line.is_empty());
            }
        }
    }
}
