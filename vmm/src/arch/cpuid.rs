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
            LEAF_TOPOLOGY | LEAF_TOPOLOGY_V2 => {
                e.edx = apic_id;
                match e.index {
                    0 => {
                        e.eax = 0;
                        e.ebx = 1;
                        e.ecx = 1 << 8;
                    }
                    1 => {
                        e.eax = shift;
                        e.ebx = count;
                        e.ecx = (2 << 8) | 1;
                    }
                    _ => {
                        e.eax = 0;
                        e.ebx = 0;
                        e.ecx = e.index;
                    }
                }
            }
            _ => {}
        }
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
            kvm_cpuid_entry2 {
                function: 0xb,
                index: 1,
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
        let topo = c.as_slice()[1];
        assert_eq!((topo.eax, topo.ebx, topo.edx), (2, 4, 3));
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
