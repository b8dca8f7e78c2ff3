//! The I/O-port doorbell (docs/abi.md section 3) and the [`Transport`] trait the client rings
//! through.

use profile_core::abi::{DOORBELL_HIGH, DOORBELL_MAGIC, DOORBELL_RING};

/// How a [`crate::Client`] hands a request block to the VMM. [`Doorbell`] is the real one; tests
/// implement it with a model of the VMM.
pub trait Transport {
    /// Runs the call in `block`, whose guest-physical address is `gpa`. When this returns, the
    /// VMM has written the status (and reply) into `block`, or left it untouched if it refused
    /// the block itself (see [`Transport::last_status`]).
    ///
    /// # Safety
    ///
    /// `gpa` must be the guest-physical address of `block[0]`, `block` must be guest-physically
    /// contiguous for its whole length, and the block must stay valid and unmoved for the call:
    /// the VMM writes guest memory at `gpa`. The caller must stay on one processor for the call.
    unsafe fn ring(&mut self, gpa: u64, block: &mut [u8]);

    /// The NTSTATUS of this processor's last ring as the doorbell reports it (`base + 4`); also
    /// set when the VMM did not touch the block.
    fn last_status(&mut self) -> u32;
}

/// hvprof's doorbell: 8 I/O ports from `base` (CPUID 0x40000101 EBX, default 0x6A0).
#[derive(Debug)]
pub struct Doorbell {
    base: u16,
}

impl Doorbell {
    /// A doorbell at `base`.
    ///
    /// # Safety
    ///
    /// `base` must be hvprof's doorbell port (from [`crate::discover`]), and the code using the
    /// doorbell must run at CPL0 (or otherwise be allowed port I/O): the doorbell writes to
    /// these ports, and a write to another device's ports could do anything.
    pub const unsafe fn new(base: u16) -> Doorbell {
        Doorbell { base }
    }

    /// The first port.
    pub fn base(&self) -> u16 {
        self.base
    }

    /// Reads the ring port, which answers [`DOORBELL_MAGIC`] ("hvpf") if the device is there.
    pub fn magic(&mut self) -> u32 {
        // SAFETY: `new`'s contract: these ports are hvprof's; reading the ring port has no
        // side effect.
        unsafe { in32(self.base + DOORBELL_RING) }
    }

    /// True if the device answers its magic value.
    pub fn is_present(&mut self) -> bool {
        self.magic() == DOORBELL_MAGIC
    }
}

impl Transport for Doorbell {
    unsafe fn ring(&mut self, gpa: u64, block: &mut [u8]) {
        let high = (gpa >> 32) as u32;
        #[allow(clippy::cast_possible_truncation)] // the low dword, by design
        let low = gpa as u32;
        let anchor = block.as_mut_ptr();
        // SAFETY: `new`'s contract makes these hvprof's ports; the caller guarantees `gpa` is
        // `block`'s contiguous physical address, so the VMM writes only inside `block`. The
        // high latch resets after every ring, so it is written only when nonzero.
        unsafe {
            if high != 0 {
                out32(self.base + DOORBELL_HIGH, high, anchor);
            }
            out32(self.base + DOORBELL_RING, low, anchor);
        }
    }

    fn last_status(&mut self) -> u32 {
        // SAFETY: as in `magic`: reading the status port has no side effect.
        unsafe { in32(self.base + DOORBELL_HIGH) }
    }
}

/// `OUT DX, EAX`. Not `nomem`: the ring makes the VMM read and write the block that `anchor`
/// points to, so the compiler must complete earlier stores to it before the `OUT` and must not
/// reuse values loaded from it across the `OUT`. `anchor` is passed in so that the block counts
/// as reachable by the asm.
///
/// # Safety
///
/// The port must belong to a device whose write side effects the caller intends.
#[cfg(target_arch = "x86_64")]
unsafe fn out32(port: u16, value: u32, anchor: *mut u8) {
    // SAFETY: delegated to the caller; the instruction touches no memory itself.
    unsafe {
        core::arch::asm!(
            "/* block {anchor} */",
            "out dx, eax",
            anchor = in(reg) anchor,
            in("dx") port,
            in("eax") value,
            options(nostack, preserves_flags)
        );
    }
}

/// `IN EAX, DX`.
///
/// # Safety
///
/// The port must belong to a device whose read side effects the caller intends.
#[cfg(target_arch = "x86_64")]
unsafe fn in32(port: u16) -> u32 {
    let value: u32;
    // SAFETY: delegated to the caller; the instruction touches no memory.
    unsafe {
        core::arch::asm!(
            "in eax, dx",
            in("dx") port,
            out("eax") value,
            options(nomem, nostack, preserves_flags)
        );
    }
    value
}
