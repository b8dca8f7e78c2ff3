//! Discovery through CPUID leaves 0x40000100 and 0x40000101.
//!
//! A guest first checks CPUID.1:ECX bit 31 (hypervisor present), then reads leaf 0x40000100:
//! EAX is the highest hvprof leaf and EBX, ECX, EDX spell "hvprofhvprof" (little-endian, as
//! KVM's 0x40000000 leaf spells "KVMKVMKVM"). Leaf 0x40000101 gives the ABI version, the
//! doorbell port base and feature flags.

/// The hvprof base leaf.
pub const LEAF_BASE: u32 = 0x4000_0100;
/// The hvprof information leaf.
pub const LEAF_INFO: u32 = 0x4000_0101;
/// The highest hvprof leaf (EAX of [`LEAF_BASE`]).
pub const MAX_LEAF: u32 = LEAF_INFO;

/// The 12-byte signature in EBX, ECX, EDX of [`LEAF_BASE`].
pub const SIGNATURE: [u8; 12] = *b"hvprofhvprof";
/// EBX of [`LEAF_BASE`]: "hvpr".
pub const SIGNATURE_EBX: u32 = u32::from_le_bytes(*b"hvpr");
/// ECX of [`LEAF_BASE`]: "ofhv".
pub const SIGNATURE_ECX: u32 = u32::from_le_bytes(*b"ofhv");
/// EDX of [`LEAF_BASE`]: "prof".
pub const SIGNATURE_EDX: u32 = u32::from_le_bytes(*b"prof");

/// Feature flag (ECX of [`LEAF_INFO`], `features` of the info reply): start accepts
/// [`super::START_MODE_GUEST_VIRTUAL`] (the VMM walks guest page tables).
pub const FEATURE_START_GUEST_VIRTUAL: u32 = 1 << 0;
/// Feature flag: [`super::CALL_SET_INTERRUPT`] is implemented.
pub const FEATURE_INTERRUPT_INJECTION: u32 = 1 << 1;
/// Feature flag: [`super::CALL_READ_STATS`] is implemented.
pub const FEATURE_STATISTICS: u32 = 1 << 2;
/// Feature flag: the host has a PMU and some PMU sources are supported.
pub const FEATURE_PMU_SOURCES: u32 = 1 << 3;
/// Every feature bit this ABI version defines.
pub const FEATURES_KNOWN: u32 = 0xF;

/// The four registers a CPUID leaf returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CpuidRegs {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// What the VMM answers for [`LEAF_BASE`].
pub const fn base_leaf() -> CpuidRegs {
    CpuidRegs {
        eax: MAX_LEAF,
        ebx: SIGNATURE_EBX,
        ecx: SIGNATURE_ECX,
        edx: SIGNATURE_EDX,
    }
}

/// What the VMM answers for [`LEAF_INFO`].
// `u32::from` is not const on Rust 1.63; widening u16 to u32 is lossless.
#[allow(clippy::cast_lossless)]
pub const fn info_leaf(port_base: u16, features: u32) -> CpuidRegs {
    CpuidRegs {
        eax: super::ABI_VERSION,
        ebx: port_base as u32,
        ecx: features,
        edx: 0,
    }
}

/// What a guest learns from the two leaves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Discovery {
    /// The VMM's ABI version; the guest must use exactly this one.
    pub abi_version: u32,
    /// The doorbell's first I/O port.
    pub port_base: u16,
    /// Feature flags.
    pub features: u32,
}

/// True if `base` (leaf 0x40000100) carries the signature and reaches the info leaf.
pub const fn is_hvprof(base: &CpuidRegs) -> bool {
    base.ebx == SIGNATURE_EBX
        && base.ecx == SIGNATURE_ECX
        && base.edx == SIGNATURE_EDX
        && base.eax >= LEAF_INFO
}

/// Parses the two leaves; `None` if not hvprof or if the port base does not fit 16 bits.
pub fn discover(base: &CpuidRegs, info: &CpuidRegs) -> Option<Discovery> {
    if !is_hvprof(base) {
        return None;
    }
    Some(Discovery {
        abi_version: info.eax,
        port_base: u16::try_from(info.ebx).ok()?,
        features: info.ecx,
    })
}
