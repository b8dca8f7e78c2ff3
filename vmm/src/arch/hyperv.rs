//! Hyper-V enlightenments for Windows guests: the CPUID leaves from 0x40000000 ("Microsoft
//! Hv", interface "Hv#1") that announce the synthetic MSRs KVM implements (hypercall page, VP
//! index, SynIC, synthetic timers, reference counter and TSC page, APIC access MSRs,
//! frequency MSRs), and the recommendations (relaxed timing, no spinlock notifications).
//!
//! Only what KVM reports in KVM_GET_SUPPORTED_HV_CPUID is offered. With the Hyper-V leaves
//! at 0x40000000, KVM's own leaves ("KVMKVMKVM", its PV features) move to 0x40000200:
//! 0x40000100 belongs to hvprof's hypercall ABI (docs/abi.md), so the slot QEMU uses for
//! KVM's leaves is taken. Guests (Linux, SeaBIOS) and KVM itself find the KVM signature at
//! any 0x100-aligned base.

use kvm_bindings::{kvm_enable_cap, CpuId, KVM_CAP_HYPERV_SYNIC2, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::VcpuFd;
use vmm_sys_util::ioctl::ioctl_with_mut_ptr;

use super::cpuid::{signature_regs, Leaf};

/// The Hyper-V vendor leaf.
pub const HV_LEAF_VENDOR: u32 = 0x4000_0000;
/// Interface signature.
pub const HV_LEAF_INTERFACE: u32 = 0x4000_0001;
/// Hypervisor system identity.
pub const HV_LEAF_VERSION: u32 = 0x4000_0002;
/// Feature identification.
pub const HV_LEAF_FEATURES: u32 = 0x4000_0003;
/// Implementation recommendations.
pub const HV_LEAF_ENLIGHTENMENTS: u32 = 0x4000_0004;
/// Implementation limits.
pub const HV_LEAF_LIMITS: u32 = 0x4000_0005;
/// The highest Hyper-V leaf announced.
pub const HV_LEAF_MAX: u32 = 0x4000_000a;
/// Where KVM's leaves go when the Hyper-V leaves take 0x40000000.
pub const KVM_LEAVES_MOVED_BASE: u32 = 0x4000_0200;
/// KVM's base leaf without Hyper-V.
pub const KVM_LEAF_BASE: u32 = 0x4000_0000;

/// 0x40000003 EAX: partition privileges hvprof offers (when KVM supports them).
pub mod privileges {
    /// HV_X64_MSR_VP_RUNTIME.
    pub const VP_RUNTIME: u32 = 1 << 0;
    /// HV_X64_MSR_TIME_REF_COUNT.
    pub const TIME_REF_COUNT: u32 = 1 << 1;
    /// SynIC MSRs.
    pub const SYNIC: u32 = 1 << 2;
    /// Synthetic timer MSRs.
    pub const SYNTHETIC_TIMERS: u32 = 1 << 3;
    /// APIC access MSRs (EOI, ICR, TPR).
    pub const APIC_MSRS: u32 = 1 << 4;
    /// Hypercall page MSRs (guest OS id, hypercall).
    pub const HYPERCALL: u32 = 1 << 5;
    /// HV_X64_MSR_VP_INDEX.
    pub const VP_INDEX: u32 = 1 << 6;
    /// HV_X64_MSR_REFERENCE_TSC (the reference TSC page).
    pub const REFERENCE_TSC: u32 = 1 << 9;
    /// TSC and APIC frequency MSRs.
    pub const FREQUENCY: u32 = 1 << 11;
    /// Everything above.
    pub const WANTED: u32 = VP_RUNTIME
        | TIME_REF_COUNT
        | SYNIC
        | SYNTHETIC_TIMERS
        | APIC_MSRS
        | HYPERCALL
        | VP_INDEX
        | REFERENCE_TSC
        | FREQUENCY;
}

/// 0x40000003 EDX: frequency MSRs are available.
const EDX_FREQUENCY_AVAILABLE: u32 = 1 << 8;
/// 0x40000003 EDX: synthetic timers in direct mode.
const EDX_STIMER_DIRECT: u32 = 1 << 19;
/// 0x40000004 EAX: use MSRs for APIC access.
const REC_APIC_MSRS: u32 = 1 << 3;
/// 0x40000004 EAX: relaxed timing (no watchdog bug checks for a slow vCPU).
const REC_RELAXED_TIMING: u32 = 1 << 5;
/// 0x40000004 EBX: never notify about spinlocks.
const SPINLOCK_NEVER: u32 = u32::MAX;

fn find(supported: &[Leaf], function: u32) -> Leaf {
    supported
        .iter()
        .find(|l| l.function == function)
        .copied()
        .unwrap_or(Leaf {
            function,
            eax: 0,
            ebx: 0,
            ecx: 0,
            edx: 0,
        })
}

fn zero(function: u32) -> Leaf {
    Leaf {
        function,
        eax: 0,
        ebx: 0,
        ecx: 0,
        edx: 0,
    }
}

/// The Hyper-V leaves for a VM of `vcpus`, offering what `supported` (KVM's
/// KVM_GET_SUPPORTED_HV_CPUID) has among what hvprof wants.
pub fn hyperv_leaves(supported: &[Leaf], vcpus: u32) -> Vec<Leaf> {
    let (b, c, d) = signature_regs(b"Microsoft Hv");
    let features = find(supported, HV_LEAF_FEATURES);
    let eax = features.eax & privileges::WANTED;
    let edx = features.edx & (EDX_FREQUENCY_AVAILABLE | EDX_STIMER_DIRECT);
    let mut rec = REC_RELAXED_TIMING;
    if eax & privileges::APIC_MSRS != 0 {
        rec |= REC_APIC_MSRS;
    }
    let limits = find(supported, HV_LEAF_LIMITS);
    let mut leaves = vec![
        Leaf {
            function: HV_LEAF_VENDOR,
            eax: HV_LEAF_MAX,
            ebx: b,
            ecx: c,
            edx: d,
        },
        Leaf {
            function: HV_LEAF_INTERFACE,
            eax: u32::from_le_bytes(*b"Hv#1"),
            ebx: 0,
            ecx: 0,
            edx: 0,
        },
        // Windows Server 2016's identity, as QEMU: build 0x3839, version 10.0.
        Leaf {
            function: HV_LEAF_VERSION,
            eax: 0x0000_3839,
            ebx: 0x000a_0000,
            ecx: 0,
            edx: 0,
        },
        Leaf {
            function: HV_LEAF_FEATURES,
            eax,
            ebx: 0,
            ecx: 0,
            edx,
        },
        Leaf {
            function: HV_LEAF_ENLIGHTENMENTS,
            eax: rec,
            ebx: SPINLOCK_NEVER,
            ecx: 0,
            edx: 0,
        },
        Leaf {
            function: HV_LEAF_LIMITS,
            eax: limits.eax.max(vcpus),
            ebx: limits.ebx.max(vcpus),
            ecx: 0,
            edx: 0,
        },
    ];
    leaves.extend((0x4000_0006..=HV_LEAF_MAX).map(zero));
    leaves
}

/// KVM's leaves (from its supported CPUID) moved to `KVM_LEAVES_MOVED_BASE`, with the base
/// leaf's EAX (the highest leaf) moved along.
pub fn moved_kvm_leaves(kvm: &[Leaf]) -> Vec<Leaf> {
    let Some(base) = kvm.iter().find(|l| l.function == KVM_LEAF_BASE) else {
        return Vec::new();
    };
    let span = base.eax.saturating_sub(KVM_LEAF_BASE).min(0xff);
    (0..=span)
        .map(|i| {
            let mut l = find(kvm, KVM_LEAF_BASE + i);
            l.function = KVM_LEAVES_MOVED_BASE + i;
            if i == 0 {
                l.eax = KVM_LEAVES_MOVED_BASE + span;
            }
            l
        })
        .collect()
}

/// The leaves of a CPUID table, as `Leaf`s (index-0 entries).
pub fn leaves_of(cpuid: &CpuId) -> Vec<Leaf> {
    cpuid
        .as_slice()
        .iter()
        .filter(|e| e.index == 0)
        .map(|e| Leaf {
            function: e.function,
            eax: e.eax,
            ebx: e.ebx,
            ecx: e.ecx,
            edx: e.edx,
        })
        .collect()
}

mod ioctl {
    use vmm_sys_util::ioctl_iowr_nr;
    ioctl_iowr_nr!(
        KVM_GET_SUPPORTED_HV_CPUID,
        kvm_bindings::KVMIO,
        0xc1,
        kvm_bindings::kvm_cpuid2
    );
}

/// KVM_GET_SUPPORTED_HV_CPUID on a vCPU.
pub fn supported_hv_cpuid(fd: &VcpuFd) -> std::io::Result<CpuId> {
    let mut cpuid = CpuId::new(KVM_MAX_CPUID_ENTRIES)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
    // SAFETY: the ioctl writes at most `nent` entries into the kvm_cpuid2 the FAM wrapper
    // owns and sized; the fd is a live vCPU fd.
    let rc = unsafe {
        ioctl_with_mut_ptr(
            fd,
            ioctl::KVM_GET_SUPPORTED_HV_CPUID(),
            cpuid.as_mut_fam_struct_ptr(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cpuid)
}

/// Turns on the vCPU's SynIC (KVM_CAP_HYPERV_SYNIC2).
pub fn enable_synic(fd: &VcpuFd) -> Result<(), kvm_ioctls::Error> {
    let cap = kvm_enable_cap {
        cap: KVM_CAP_HYPERV_SYNIC2,
        ..Default::default()
    };
    fd.enable_cap(&cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supported() -> Vec<Leaf> {
        vec![
            Leaf {
                function: HV_LEAF_FEATURES,
                eax: 0xffff,
                ebx: 0x3f,
                ecx: 0,
                edx: 0xffff_ffff,
            },
            Leaf {
                function: HV_LEAF_LIMITS,
                eax: 1024,
                ebx: 1024,
                ecx: 0,
                edx: 0,
            },
        ]
    }

    #[test]
    fn vendor_interface_and_range() {
        let l = hyperv_leaves(&supported(), 4);
        assert_eq!(l[0].function, HV_LEAF_VENDOR);
        assert_eq!(l[0].eax, HV_LEAF_MAX);
        let mut sig = Vec::new();
        for r in [l[0].ebx, l[0].ecx, l[0].edx] {
            sig.extend_from_slice(&r.to_le_bytes());
        }
        assert_eq!(sig, b"Microsoft Hv");
        assert_eq!(l[1].eax.to_le_bytes(), *b"Hv#1");
        let functions: Vec<u32> = l.iter().map(|x| x.function).collect();
        assert_eq!(
            functions,
            (HV_LEAF_VENDOR..=HV_LEAF_MAX).collect::<Vec<_>>()
        );
    }

    #[test]
    fn features_are_the_wanted_subset_of_supported() {
        let l = hyperv_leaves(&supported(), 4);
        assert_eq!(l[3].eax, privileges::WANTED);
        assert_eq!(l[3].edx, EDX_FREQUENCY_AVAILABLE | EDX_STIMER_DIRECT);
        assert_eq!(l[4].eax, REC_RELAXED_TIMING | REC_APIC_MSRS);
        assert_eq!(l[4].ebx, SPINLOCK_NEVER);
        let mut few = supported();
        few[0].eax = privileges::HYPERCALL | privileges::VP_INDEX | (1 << 7);
        few[0].edx = 0;
        let l = hyperv_leaves(&few, 1);
        assert_eq!(l[3].eax, privileges::HYPERCALL | privileges::VP_INDEX);
        assert_eq!(l[3].edx, 0);
        assert_eq!(l[4].eax, REC_RELAXED_TIMING, "no APIC MSRs recommended");
    }

    #[test]
    fn kvm_leaves_move_clear_of_hvprofs() {
        let (b, c, d) = signature_regs(b"KVMKVMKVM\0\0\0");
        let kvm = [
            Leaf {
                function: 0x4000_0000,
                eax: 0x4000_0001,
                ebx: b,
                ecx: c,
                edx: d,
            },
            Leaf {
                function: 0x4000_0001,
                eax: 0x1234,
                ebx: 0,
                ecx: 0,
                edx: 0,
            },
        ];
        let moved = moved_kvm_leaves(&kvm);
        assert_eq!(moved.len(), 2);
        assert_eq!(moved[0].function, 0x4000_0200);
        assert_eq!(moved[0].eax, 0x4000_0201);
        assert_eq!(moved[0].ebx, b);
        assert_eq!((moved[1].function, moved[1].eax), (0x4000_0201, 0x1234));
        assert!(moved
            .iter()
            .all(|l| !(0x4000_0100..0x4000_0200).contains(&l.function)));
    }
}
