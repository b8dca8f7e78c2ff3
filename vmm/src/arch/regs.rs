//! Register state for the boot vCPU's first instruction.

use kvm_bindings::{kvm_fpu, kvm_regs, kvm_sregs};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::cpu_state::EFER_LMA;
use super::gdt::{boot_gdt, segment_from_entry, CODE_SELECTOR, DATA_SELECTOR, TSS_SELECTOR};
use crate::boot::EntryPoint;
use crate::layout::{BOOT_GDT_START, PDE_START, PDPTE_START, PML4_START};

const X86_CR0_PE: u64 = 1 << 0;
const X86_CR0_ET: u64 = 1 << 4;
const X86_CR0_PG: u64 = 1 << 31;
const X86_CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const RFLAGS_RESERVED: u64 = 1 << 1;

/// Could not write the boot descriptors or page tables.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the boot {0} into guest memory")]
pub struct RegsError(&'static str);

/// General-purpose registers at entry.
pub fn entry_regs(entry: EntryPoint) -> kvm_regs {
    let mut regs = kvm_regs {
        rflags: RFLAGS_RESERVED,
        ..Default::default()
    };
    match entry {
        EntryPoint::Protected32 { eip, eax, ebx } => {
            regs.rip = u64::from(eip);
            regs.rax = u64::from(eax);
            regs.rbx = u64::from(ebx);
        }
        EntryPoint::Long64 { rip, rsi } => {
            regs.rip = rip;
            regs.rsi = rsi;
        }
    }
    regs
}

/// Sets up `sregs` for the entry mode and writes the GDT (and page tables for long mode).
pub fn setup_sregs(
    mem: &GuestMemoryMmap,
    entry: EntryPoint,
    sregs: &mut kvm_sregs,
) -> Result<(), RegsError> {
    let long = matches!(entry, EntryPoint::Long64 { .. });
    let gdt = boot_gdt(long);
    for (i, e) in gdt.iter().enumerate() {
        mem.write_obj(*e, GuestAddress(BOOT_GDT_START + 8 * i as u64))
            .map_err(|_| RegsError("GDT"))?;
    }
    sregs.gdt.base = BOOT_GDT_START;
    sregs.gdt.limit = u16::try_from(std::mem::size_of_val(&gdt) - 1).unwrap_or(u16::MAX);
    sregs.idt.base = 0;
    sregs.idt.limit = 0;

    let code = segment_from_entry(gdt[1], CODE_SELECTOR);
    let data = segment_from_entry(gdt[2], DATA_SELECTOR);
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = segment_from_entry(gdt[3], TSS_SELECTOR);

    sregs.cr0 = (sregs.cr0 | X86_CR0_PE | X86_CR0_ET) & !X86_CR0_PG;
    sregs.cr4 = 0;
    sregs.efer = 0;
    if long {
        write_identity_page_tables(mem)?;
        sregs.cr3 = PML4_START;
        sregs.cr4 |= X86_CR4_PAE;
        sregs.cr0 |= X86_CR0_PG;
        sregs.efer |= EFER_LME | EFER_LMA;
    }
    Ok(())
}

/// x87/SSE state at reset: FCW 0x37f, MXCSR 0x1f80.
pub fn entry_fpu() -> kvm_fpu {
    kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    }
}

/// Identity-maps the first 4 GiB with 2 MiB pages.
fn write_identity_page_tables(mem: &GuestMemoryMmap) -> Result<(), RegsError> {
    let err = |_| RegsError("page tables");
    mem.write_obj(PDPTE_START | 0x3, GuestAddress(PML4_START))
        .map_err(err)?;
    for dir in 0..4u64 {
        let pd = PDE_START + dir * 0x1000;
        mem.write_obj(pd | 0x3, GuestAddress(PDPTE_START + dir * 8))
            .map_err(err)?;
        for i in 0..512u64 {
            let phys = (dir << 30) | (i << 21);
            mem.write_obj(phys | 0x83, GuestAddress(pd + i * 8))
                .map_err(err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_mode_entry_has_paging_off() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 16 << 20)]).unwrap();
        let entry = EntryPoint::Protected32 {
            eip: 0x10_0000,
            eax: 1,
            ebx: 0x6000,
        };
        let mut sregs = kvm_sregs::default();
        setup_sregs(&mem, entry, &mut sregs).unwrap();
        assert_eq!(sregs.cr0 & (X86_CR0_PE | X86_CR0_PG), X86_CR0_PE);
        assert_eq!(sregs.cs.db, 1);
        assert_eq!(sregs.cs.l, 0);
        let regs = entry_regs(entry);
        assert_eq!((regs.rip, regs.rax, regs.rbx), (0x10_0000, 1, 0x6000));
    }

    #[test]
    fn long_mode_entry_identity_maps_low_memory() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 16 << 20)]).unwrap();
        let mut sregs = kvm_sregs::default();
        setup_sregs(
            &mem,
            EntryPoint::Long64 {
                rip: 0x10_0200,
                rsi: 0x7000,
            },
            &mut sregs,
        )
        .unwrap();
        assert_eq!(sregs.efer & (EFER_LME | EFER_LMA), EFER_LME | EFER_LMA);
        assert_eq!(sregs.cs.l, 1);
        let pde: u64 = mem.read_obj(GuestAddress(PDE_START + 8)).unwrap();
        assert_eq!(pde, (1 << 21) | 0x83);
    }
}
