//! The CPUID table each vCPU sees: KVM's supported set, with the topology patched per vCPU,
//! the hypervisor bit set, and hvprof's own leaves added.

use kvm_bindings::{kvm_cpuid_entry2, CpuId};

const LEAF_FEATURES: u32 = 1;
const LEAF_CACHE: u32 = 4;
const LEAF_TOPOLOGY: u32 = 0xb;
const LEAF_TOPOLOGY_V2: u32 = 0x1f;
const ECX_HYPERVISOR: u32 = 1 << 31;
const EDX_HTT: u32 = 1 << 28;
const KVM_CPUID_FLAG_SIGNIFCANT_INDEX: u32 = 1;

/// A leaf the VMM adds (or replaces) in every vCPU's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// EAX input.
    pub function: u32,
    /// Output registers.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// Could not build the table.
#[derive(Debug, thiserror::Error)]
#[error("the CPUID table has no room for hvprof's leaves")]
pub struct CpuidError;

/// Builds the CPUID table for vCPU `apic_id` of `count`.
pub fn vcpu_cpuid(
    supported: &CpuId,
    apic_id: u32,
    count: u32,
    extra: &[Leaf],
) -> Result<CpuId, CpuidError> {
    let mut cpuid = supported.clone();
    let shift = u32::BITS - count.saturating_sub(1).leading_zeros();
    for e in cpuid.as_mut_slice() {
        match e.function {
            LEAF_FEATURES => {
                e.ebx = (e.ebx & 0x0000_ffff) | (apic_id << 24) | (count.min(255) << 16);
                e.ecx |= ECX_HYPERVISOR;
                if count > 1 {
                    e.edx |= EDX_HTT;
                }
            }
            LEAF_CACHE => {
                e.eax = (e.eax & 0x03ff_ffff) | (count.saturating_sub(1).min(63) << 26);
            }
            _ => {}
        }
    }
    // KVM offers the topology leaves with subleaf 0 only; a guest reading subleaf 1 (the core
    // level) would get zeros and count every vCPU as a package of its own. Each leaf the host
    // offers is replaced by the full enumeration: one thread per core, `count` cores in one
    // package.
    let offered = |f: u32| cpuid.as_slice().iter().any(|e| e.function == f);
    let topology: Vec<u32> = [LEAF_TOPOLOGY, LEAF_TOPOLOGY_V2]
        .into_iter()
        .filter(|&f| offered(f))
        .collect();
    if !topology.is_empty() {
        let mut entries: Vec<kvm_cpuid_entry2> = cpuid
            .as_slice()
            .iter()
            .filter(|e| !topology.contains(&e.function))
            .copied()
            .collect();
        for &f in &topology {
            entries.extend(topology_leaves(f, apic_id, count, shift));
        }
        cpuid = CpuId::from_entries(&entries).map_err(|_| CpuidError)?;
    }
    for leaf in extra {
        let entry = kvm_cpuid_entry2 {
            function: leaf.function,
            index: 0,
            flags: 0,
            eax: leaf.eax,
            ebx: leaf.ebx,
            ecx: leaf.ecx,
            edx: leaf.edx,
            ..Default::default()
        };
        let slot = cpuid.as_mut_slice().iter_mut().find(|e| {
            e.function == leaf.function
                && (e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX == 0 || e.index == 0)
        });
        match slot {
            Some(e) => *e = entry,
            None => cpuid.push(entry).map_err(|_| CpuidError)?,
        }
    }
    Ok(cpuid)
}

/// The subleaves of topology leaf `function` (0xB or 0x1F) for vCPU `apic_id` of `count`:
/// the SMT level (one thread), the core level (`count` cores, APIC id shift `shift`), and the
/// invalid level that ends the enumeration.
fn topology_leaves(function: u32, apic_id: u32, count: u32, shift: u32) -> [kvm_cpuid_entry2; 3] {
    const LEVEL_SMT: u32 = 1;
    const LEVEL_CORE: u32 = 2;
    let level = |index: u32, eax: u32, ebx: u32, kind: u32| kvm_cpuid_entry2 {
        function,
        index,
        flags: KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
        eax,
        ebx,
        ecx: (kind << 8) | index,
        edx: apic_id,
        ..Default::default()
    };
    [
        level(0, 0, 1, LEVEL_SMT),
        level(1, shift, count, LEVEL_CORE),
        level(2, 0, 0, 0),
    ]
}

/// Splits a 12-byte signature into EBX, ECX, EDX as CPUID returns vendor strings.
pub fn signature_regs(sig: &[u8; 12]) -> (u32, u32, u32) {
    let word = |i: usize| u32::from_le_bytes([sig[i], sig[i + 1], sig[i + 2], sig[i + 3]]);
    (word(0), word(4), word(8))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> CpuId {
        let entries = [
            kvm_cpuid_entry2 {
                function: 1,
                ebx: 0xff00_0800,
                ..Default::default()
            },
            // As KVM offers it: subleaf 0 only.
            kvm_cpuid_entry2 {
                function: 0xb,
                index: 0,
                flags: KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
                edx: 1,
                ..Default::default()
            },
        ];
        CpuId::from_entries(&entries).unwrap()
    }

    #[test]
    fn topology_names_each_vcpu() {
        let c = vcpu_cpuid(&table(), 3, 4, &[]).unwrap();
        let l1 = c.as_slice()[0];
        assert_eq!(l1.ebx >> 24, 3);
        assert_eq!((l1.ebx >> 16) & 0xff, 4);
        assert_ne!(l1.ecx & ECX_HYPERVISOR, 0);
        let sub = |i: u32| {
            *c.as_slice()
                .iter()
                .find(|e| e.function == 0xb && e.index == i)
                .unwrap()
        };
        // SMT: shift 0, one thread; core: shift 2, four cores; then the end (type 0).
        assert_eq!(
            (sub(0).eax, sub(0).ebx, sub(0).ecx >> 8, sub(0).edx),
            (0, 1, 1, 3)
        );
        assert_eq!(
            (sub(1).eax, sub(1).ebx, sub(1).ecx, sub(1).edx),
            (2, 4, 0x201, 3)
        );
        assert_eq!((sub(2).ecx >> 8) & 0xff, 0);
        assert_eq!(c.as_slice().iter().filter(|e| e.function == 0xb).count(), 3);
        assert!(
            !c.as_slice().iter().any(|e| e.function == 0x1f),
            "not offered, not added"
        );
    }

    #[test]
    fn extra_leaves_are_added() {
        let (b, c, d) = signature_regs(b"hvprofhvprof");
        let leaf = Leaf {
            function: 0x4000_0100,
            eax: 0x4000_0101,
            ebx: b,
            ecx: c,
            edx: d,
        };
        let t = vcpu_cpuid(&table(), 0, 1, &[leaf]).unwrap();
        let e = t
            .as_slice()
            .iter()
            .find(|e| e.function == 0x4000_0100)
            .unwrap();
        assert_eq!(&e.ebx.to_le_bytes(), b"hvpr");
        assert_eq!(&e.edx.to_le_bytes(), b"prof");
    }
}
