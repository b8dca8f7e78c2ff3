//! Configuring a vCPU before it first runs: CPUID, MSRs, the local APIC's LINT pins, and, for
//! the boot vCPU, the entry registers. Also the description of KVM internal errors.

use kvm_bindings::{kvm_msr_entry, kvm_run, CpuId, Msrs};
use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::arch::regs::{entry_fpu, entry_regs, setup_sregs, RegsError};
use crate::boot::EntryPoint;
use crate::firmware::rom::ReadOnlySlot;

const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
const MISC_ENABLE_FAST_STRINGS: u64 = 1;
const MTRR_ENABLE_WRITEBACK: u64 = (1 << 11) | 6;
const APIC_LVT_LINT0: usize = 0x350;
const APIC_LVT_LINT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

/// Errors configuring a vCPU.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A KVM vCPU ioctl failed.
    #[error("{0} failed")]
    Kvm(&'static str, #[source] kvm_ioctls::Error),
    /// Boot structures could not be written.
    #[error(transparent)]
    Regs(#[from] RegsError),
}

fn kvm(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> SetupError {
    move |e| SetupError::Kvm(what, e)
}

/// Configures vCPU `fd`; the boot vCPU also gets `entry`'s registers.
pub fn configure_vcpu(
    fd: &VcpuFd,
    cpuid: &CpuId,
    mem: &GuestMemoryMmap,
    entry: Option<EntryPoint>,
) -> Result<(), SetupError> {
    fd.set_cpuid2(cpuid).map_err(kvm("KVM_SET_CPUID2"))?;
    let msrs = Msrs::from_entries(&[
        kvm_msr_entry {
            index: MSR_IA32_MISC_ENABLE,
            data: MISC_ENABLE_FAST_STRINGS,
            ..Default::default()
        },
        kvm_msr_entry {
            index: MSR_MTRR_DEF_TYPE,
            data: MTRR_ENABLE_WRITEBACK,
            ..Default::default()
        },
    ])
    .expect("two MSRs fit");
    fd.set_msrs(&msrs).map_err(kvm("KVM_SET_MSRS"))?;

    let mut lapic = fd.get_lapic().map_err(kvm("KVM_GET_LAPIC"))?;
    set_lvt_mode(&mut lapic.regs, APIC_LVT_LINT0, APIC_MODE_EXTINT);
    set_lvt_mode(&mut lapic.regs, APIC_LVT_LINT1, APIC_MODE_NMI);
    fd.set_lapic(&lapic).map_err(kvm("KVM_SET_LAPIC"))?;

    if let Some(entry) = entry {
        let mut sregs = fd.get_sregs().map_err(kvm("KVM_GET_SREGS"))?;
        setup_sregs(mem, entry, &mut sregs)?;
        fd.set_sregs(&sregs).map_err(kvm("KVM_SET_SREGS"))?;
        fd.set_regs(&entry_regs(entry))
            .map_err(kvm("KVM_SET_REGS"))?;
        fd.set_fpu(&entry_fpu()).map_err(kvm("KVM_SET_FPU"))?;
    }
    Ok(())
}

/// Sets the delivery-mode bits (10:8) of a local APIC LVT register.
fn set_lvt_mode(regs: &mut [libc::c_char; 1024], offset: usize, mode: u32) {
    let mut raw = [0u8; 4];
    for (dst, src) in raw.iter_mut().zip(&regs[offset..offset + 4]) {
        *dst = src.to_ne_bytes()[0];
    }
    let value = (u32::from_le_bytes(raw) & !0x700) | (mode << 8);
    for (dst, src) in regs[offset..offset + 4].iter_mut().zip(value.to_le_bytes()) {
        *dst = libc::c_char::from_ne_bytes([src]);
    }
}

/// Describes a KVM_EXIT_INTERNAL_ERROR: the suberror, RIP and the instruction bytes there.
pub fn describe_internal_error(
    fd: &mut VcpuFd,
    mem: &GuestMemoryMmap,
    firmware: Option<&ReadOnlySlot>,
) -> String {
    let run: &kvm_run = fd.get_kvm_run();
    // SAFETY: KVM filled the `internal` member of the exit union: this is only called after
    // KVM_RUN returned KVM_EXIT_INTERNAL_ERROR.
    let internal = unsafe { run.__bindgen_anon_1.internal };
    let what = match internal.suberror {
        1 => "emulation failure (an instruction KVM cannot emulate)",
        2 => "exception while delivering an exception",
        3 => "error delivering an event",
        4 => "unexpected exit reason",
        _ => "unknown suberror",
    };
    let mut text = format!("suberror {} ({what})", internal.suberror);
    if let (Ok(regs), Ok(sregs)) = (fd.get_regs(), fd.get_sregs()) {
        text.push_str(&format!(", RIP {:#x}", regs.rip));
        let linear = sregs.cs.base.wrapping_add(regs.rip);
        let phys = fd
            .translate_gva(linear)
            .ok()
            .filter(|t| t.valid != 0)
            .map(|t| t.physical_address);
        let paging = sregs.cr0 & (1 << 31) != 0;
        let phys = phys.or((!paging).then_some(linear));
        if let Some(p) = phys {
            let mut bytes = [0u8; 15];
            let read = mem.read_slice(&mut bytes, GuestAddress(p)).is_ok()
                || firmware.is_some_and(|f| f.read(p, &mut bytes));
            if read {
                let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
                text.push_str(&format!(", bytes at RIP: {}", hex.join(" ")));
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lvt_mode_bits_are_replaced() {
        let mut regs = [0 as libc::c_char; 1024];
        regs[APIC_LVT_LINT0 + 1] = 0x07; // mode bits set to something else
        regs[APIC_LVT_LINT0] = 0x20; // vector kept
        set_lvt_mode(&mut regs, APIC_LVT_LINT0, APIC_MODE_NMI);
        assert_eq!(regs[APIC_LVT_LINT0], 0x20);
        assert_eq!(regs[APIC_LVT_LINT0 + 1], 0x04);
    }
}
