//! Discovery through CPUID (docs/abi.md section 2).

use profile_core::abi::cpuid::{self, CpuidRegs};
use profile_core::abi::ABI_VERSION;

use crate::Error;

/// What the CPUID leaves say about this hvprof.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Found {
    /// The doorbell's first I/O port (CPUID 0x40000101 EBX).
    pub port_base: u16,
    /// `FEATURE_*` bits (`profile_core::abi::cpuid`).
    pub features: u32,
}

impl Found {
    /// True if every bit of `feature` is offered.
    pub fn has(&self, feature: u32) -> bool {
        self.features & feature == feature
    }
}

/// CPUID.1:ECX bit 31, "a hypervisor is present".
const HYPERVISOR_PRESENT: u32 = 1 << 31;

/// Discovery from a CPUID function (for tests, or an agent that must run CPUID its own way):
/// leaf 1 must report a hypervisor, leaf 0x40000100 must carry the signature, and leaf
/// 0x40000101 must report ABI version 1.
pub fn discover_with<F: FnMut(u32) -> CpuidRegs>(mut cpuid: F) -> Result<Found, Error> {
    if cpuid(1).ecx & HYPERVISOR_PRESENT == 0 {
        return Err(Error::NotPresent);
    }
    let base = cpuid(cpuid::LEAF_BASE);
    if !cpuid::is_hvprof(&base) {
        return Err(Error::NotPresent);
    }
    let info = cpuid(cpuid::LEAF_INFO);
    let found = cpuid::discover(&base, &info).ok_or(Error::NotPresent)?;
    if found.abi_version != ABI_VERSION {
        return Err(Error::UnsupportedVersion(found.abi_version));
    }
    Ok(Found {
        port_base: found.port_base,
        features: found.features,
    })
}

/// Runs CPUID on this processor.
#[cfg(target_arch = "x86_64")]
pub fn cpuid_leaf(leaf: u32) -> CpuidRegs {
    // `__cpuid` is an unsafe fn on older compilers (1.63) and safe on newer ones.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86-64 processor and has no side effects.
    let r = unsafe { core::arch::x86_64::__cpuid(leaf) };
    CpuidRegs {
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    }
}

/// Discovers hvprof with the CPUID instruction of this processor.
#[cfg(target_arch = "x86_64")]
pub fn discover() -> Result<Found, Error> {
    discover_with(cpuid_leaf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use profile_core::abi::cpuid::{base_leaf, info_leaf, FEATURE_STATISTICS};

    fn fake(hypervisor: bool, base: CpuidRegs, info: CpuidRegs) -> impl FnMut(u32) -> CpuidRegs {
        move |leaf| match leaf {
            1 => CpuidRegs {
                ecx: if hypervisor { HYPERVISOR_PRESENT } else { 0 },
                ..CpuidRegs::default()
            },
            cpuid::LEAF_BASE => base,
            cpuid::LEAF_INFO => info,
            _ => CpuidRegs::default(),
        }
    }

    #[test]
    fn finds_the_port_and_features() {
        let found = discover_with(fake(true, base_leaf(), info_leaf(0x6A0, 5))).unwrap();
        assert_eq!(found.port_base, 0x6A0);
        assert!(found.has(FEATURE_STATISTICS));
        assert!(!found.has(2));
    }

    #[test]
    fn no_hypervisor_bit_means_absent_even_with_the_signature() {
        let r = discover_with(fake(false, base_leaf(), info_leaf(0x6A0, 0)));
        assert_eq!(r, Err(Error::NotPresent));
    }

    #[test]
    fn kvm_signature_alone_is_absent() {
        // What QEMU/KVM answers past its own leaves: zeros.
        let r = discover_with(fake(true, CpuidRegs::default(), CpuidRegs::default()));
        assert_eq!(r, Err(Error::NotPresent));
        let mut short = base_leaf();
        short.eax = cpuid::LEAF_BASE;
        assert_eq!(
            discover_with(fake(true, short, info_leaf(0x6A0, 0))),
            Err(Error::NotPresent)
        );
    }

    #[test]
    fn another_abi_version_is_refused() {
        let mut info = info_leaf(0x6A0, 0);
        info.eax = 2;
        assert_eq!(
            discover_with(fake(true, base_leaf(), info)),
            Err(Error::UnsupportedVersion(2))
        );
    }

    #[test]
    fn a_port_base_beyond_16_bits_is_refused() {
        let mut info = info_leaf(0x6A0, 0);
        info.ebx = 0x1_0000;
        assert_eq!(
            discover_with(fake(true, base_leaf(), info)),
            Err(Error::NotPresent)
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn this_host_is_not_hvprof() {
        // Tests run on Linux, not inside hvprof.
        assert!(discover().is_err());
    }
}
