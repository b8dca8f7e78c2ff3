//! What naming a sample's guest process and thread adds to the sample path.
//!
//! The reference guest has no operating system to name, so this part runs the VMM's own
//! identification (`GuestAwareness::identify`, exactly what a host-side sample calls) on a
//! synthetic Windows guest in guest memory (`introspect::testguest`: real page tables, KPCRs,
//! EPROCESS and ETHREAD at a PDB's offsets) and times it per sample, in two mixes: the vCPU's
//! thread changing every 16 samples (the common case: a sample interval far shorter than a
//! quantum) and at every sample (the worst case: every sample reads a new thread's identity).
//! The figures are then set against the same run's sample path.

use std::time::Instant;

use introspect::os::windows::current_thread_slot;
use introspect::paging::translate;
use introspect::testguest::windows::{ntproc_layout, WindowsGuest};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmm::arch::cpu_state::CpuState;
use vmm::memory::GuestPhys;
use vmm::profiler::host_profiles::guest_awareness::{GuestAwareness, GuestTypes, VcpuGuest};

/// Per-sample identification costs, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NamingCost {
    /// Mean per sample, the thread changing every 16 samples.
    pub every_16_ns: f64,
    /// Mean per sample, the thread changing at every sample.
    pub every_sample_ns: f64,
}

/// Times `samples` identifications in each mix.
pub fn measure(samples: usize) -> NamingCost {
    let g = WindowsGuest::new(&ntproc_layout());
    let bytes = g.phys.bytes();
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), bytes.len())])
        .expect("a guest memory of the synthetic guest's size");
    mem.write_slice(bytes, GuestAddress(0))
        .expect("the synthetic guest's memory fits");
    let paging = g.kernel_paging();
    // Where vCPU 0's KPCR keeps its current thread, in guest-physical memory.
    let slot = translate(
        &GuestPhys(&mem),
        &paging,
        current_thread_slot(&g.layout, g.kpcrs[0]),
    )
    .expect("the KPCR is mapped")
    .gpa;
    let threads: Vec<u64> = g.processes[1..]
        .iter()
        .flat_map(|p| p.threads.iter().map(|t| t.ethread))
        .collect();
    let aware = GuestAwareness::new(1, Instant::now());
    aware.set_types(GuestTypes::Windows(g.layout));
    aware.kernel_found(g.os().load_bias, None);
    let cpu = CpuState {
        cpl: 0,
        paging,
        gs_base: g.kpcrs[0],
        ..CpuState::default()
    };
    let run = |every: usize| {
        let mut v = VcpuGuest::default();
        let start = Instant::now();
        for i in 0..samples {
            if i % every == 0 {
                let t = threads[(i / every) % threads.len()];
                mem.write_obj(t, GuestAddress(slot))
                    .expect("the slot is in guest memory");
            }
            std::hint::black_box(aware.identify(0, &mut v, &mem, &cpu).map(|w| w.at));
        }
        start.elapsed().as_nanos() as f64 / samples.max(1) as f64
    };
    // Once through first: every thread's rows exist, as they would after a run's first second.
    run(1);
    NamingCost {
        every_16_ns: run(16),
        every_sample_ns: run(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_mixes_are_timed() {
        let c = measure(64);
        assert!(c.every_16_ns > 0.0 && c.every_sample_ns > 0.0, "{c:?}");
    }
}
