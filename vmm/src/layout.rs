//! The guest-physical memory map of an hvprof x86_64 VM.
//!
//! ```text
//! 0x0000_0000  real-mode IVT and BIOS data area (left alone)
//! 0x0000_0500  boot GDT (descriptors loaded into the vCPU at entry)
//! 0x0000_6000  boot information: PVH hvm_start_info, or the multiboot info block
//! 0x0000_7000  Linux zero page (boot_params)
//! 0x0000_9000  identity page tables for a 64-bit Linux entry (PML4, PDPT, 4 PDs)
//! 0x0002_0000  kernel command line (up to CMDLINE_MAX bytes)
//! 0x0009_fc00  top of low RAM reported in the memory map
//! 0x000e_0000  ACPI tables (RSDP first, so legacy scanners find it)
//! 0x0010_0000  kernel (ELF segments at their physical addresses, bzImage at 1 MiB)
//! ...          RAM, then the initrd at the top of low RAM
//! 0xc000_0000  PCI hole: MMIO up to 4 GiB
//!                0xc000_0000  32-bit PCI BARs the VMM assigns (512 MiB)
//!                0xe000_0000  PCI ECAM (MMCONFIG), buses 0-255 (256 MiB)
//!                0xf000_0000  free: firmware (SeaBIOS) places BARs top-down below the IOAPIC
//!                0xfec0_0000  IOAPIC, 0xfee0_0000 LAPIC
//!                0xfeff_c000  KVM's identity-map page and TSS (as QEMU: below the firmware)
//!                0xff00_0000  firmware: a ROM (SeaBIOS) or pflash (OVMF CODE, VARS below it)
//!                             ending at 4 GiB
//! 0x1_0000_0000 RAM above 4 GiB when the VM has more than 3 GiB
//! ```

use devices::pci::PciWindows;

/// Start of the boot GDT.
pub const BOOT_GDT_START: u64 = 0x500;
/// Its size: four 8-byte descriptors.
pub const BOOT_GDT_SIZE: u64 = 4 * 8;
/// Boot information block: PVH start_info or multiboot info.
pub const BOOT_INFO_START: u64 = 0x6000;
/// Linux zero page.
pub const ZERO_PAGE_START: u64 = 0x7000;
/// First page-table page for a 64-bit entry (PML4).
pub const PML4_START: u64 = 0x9000;
/// Page-directory-pointer table.
pub const PDPTE_START: u64 = 0xa000;
/// First of four page directories (2 MiB pages, identity map of 4 GiB).
pub const PDE_START: u64 = 0xb000;
/// Kernel command line.
pub const CMDLINE_START: u64 = 0x20000;
/// Largest command line we accept, including the terminating NUL.
pub const CMDLINE_MAX: usize = 0x10000;
/// End of the low RAM reported to the guest (the EBDA starts here).
pub const EBDA_START: u64 = 0x9fc00;
/// ACPI tables live in the BIOS area.
pub const ACPI_START: u64 = 0xe0000;
/// Size of the ACPI table area.
pub const ACPI_SIZE: u64 = 0x20000;
/// Where high memory (the kernel) begins.
pub const HIGH_MEMORY_START: u64 = 0x10_0000;
/// Start of the 32-bit PCI/MMIO hole.
pub const MMIO_HOLE_START: u64 = 0xc000_0000;
/// First address of the window the VMM assigns 32-bit PCI memory BARs from.
pub const PCI_MMIO32_START: u64 = MMIO_HOLE_START;
/// End (exclusive) of that window.
pub const PCI_MMIO32_END: u64 = PCI_ECAM_START;
/// PCI Express enhanced configuration space (MMCONFIG); the MCFG table points here.
pub const PCI_ECAM_START: u64 = 0xe000_0000;
/// Size of the ECAM window: 1 MiB per bus, buses 0-255.
pub const PCI_ECAM_SIZE: u64 = 0x1000_0000;
/// First port of the window the VMM assigns PCI I/O BARs from (as SeaBIOS does).
pub const PCI_IO_START: u64 = 0xc000;
/// End (exclusive) of that window.
pub const PCI_IO_END: u64 = 0x1_0000;
/// The windows above, as the PCI root takes them.
pub const PCI_WINDOWS: PciWindows = PciWindows {
    ecam_start: PCI_ECAM_START,
    ecam_size: PCI_ECAM_SIZE,
    mmio32_start: PCI_MMIO32_START,
    mmio32_end: PCI_MMIO32_END,
    io_start: PCI_IO_START,
    io_end: PCI_IO_END,
};
/// RAM resumes here when the VM has more memory than fits below the hole.
pub const RAM_ABOVE_4G_START: u64 = 0x1_0000_0000;
/// IOAPIC MMIO base.
pub const IOAPIC_START: u64 = 0xfec0_0000;
/// Local APIC MMIO base.
pub const LAPIC_START: u64 = 0xfee0_0000;
/// KVM's TSS region (needed on Intel hosts): three pages after the identity-map page, where
/// QEMU puts them, so they stay clear of a firmware image of up to 16 MiB below 4 GiB.
pub const KVM_TSS_ADDRESS: u64 = 0xfeff_d000;
/// KVM's identity-map page (needed on Intel hosts).
pub const KVM_IDENTITY_MAP_ADDRESS: u64 = 0xfeff_c000;
/// The identity-map page and the TSS together (reserved in the firmware's e820 map).
pub const KVM_PRIVATE_SIZE: u64 = 0x4000;

// ---- firmware boot

/// End (exclusive) of the firmware's flash or ROM: the reset vector is at 4 GiB - 16.
pub const FIRMWARE_END: u64 = 0x1_0000_0000;
/// Largest firmware (ROM, or pflash CODE + VARS) hvprof maps below 4 GiB.
pub const FIRMWARE_MAX_SIZE: u64 = 16 << 20;
/// The legacy BIOS area below 1 MiB that receives a copy of the firmware's last 128 KiB
/// (QEMU's "isa-bios"), as RAM the firmware may write (shadowing).
pub const ISA_BIOS_START: u64 = 0xe_0000;
/// Size of that copy.
pub const ISA_BIOS_SIZE: u64 = 0x2_0000;

/// fw_cfg selector port (16-bit); the data port follows at +1.
pub const FW_CFG_PORT: u64 = 0x510;
/// fw_cfg's ports: selector, data, (2 unused), DMA address (8 bytes, big-endian).
pub const FW_CFG_LEN: u64 = 0xc;

/// ACPI PM block base (as QEMU's ICH9 PMBASE): PM1a event at +0, PM1a control at +4,
/// PM timer at +8.
pub const ACPI_PM_BASE: u64 = 0x600;
/// PM1a event block (status, enable: 2 bytes each).
pub const ACPI_PM1A_EVT: u64 = ACPI_PM_BASE;
/// PM1a control block (2 bytes).
pub const ACPI_PM1A_CNT: u64 = ACPI_PM_BASE + 4;
/// PM timer (4 bytes, 24 bits counting at 3.579545 MHz).
pub const ACPI_PM_TMR: u64 = ACPI_PM_BASE + 8;
/// Length of the PM1 event + control + timer ports.
pub const ACPI_PM_LEN: u64 = 12;
/// GPE0 block (status then enable, 8 bytes each), as QEMU's ICH9.
pub const ACPI_GPE0_BLK: u64 = ACPI_PM_BASE + 0x20;
/// GPE0 block length.
pub const ACPI_GPE0_LEN: u64 = 16;
/// The SCI's ISA IRQ (and GSI): level-triggered, active high, as QEMU.
pub const ACPI_SCI_IRQ: u32 = 9;
/// System control port A: bit 0 resets, bit 1 is A20.
pub const PORT92: u64 = 0x92;
/// Reset control register (the FADT's reset register): writing 0x06 resets.
pub const RESET_CONTROL_PORT: u64 = 0xcf9;

// ---- PCI, as the firmware's ACPI tables describe it (ECAM above, with the PCI root).

/// 32-bit MMIO windows for BARs (the hole minus ECAM, up to the IOAPIC), inclusive ends.
pub const PCI_MMIO32_WINDOWS: [(u32, u32); 2] =
    [(0xc000_0000, 0xdfff_ffff), (0xf000_0000, 0xfebf_ffff)];
