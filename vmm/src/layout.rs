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
//! 0x1_0000_0000 RAM above 4 GiB when the VM has more than 3 GiB
//! ```

/// Start of the boot GDT.
pub const BOOT_GDT_START: u64 = 0x500;
/// Boot information block: PVH start_info or multiboot info.
pub const BOOT_INFO_START: u64 = 0x6000;
/// Size reserved for the boot information block and its tables.
pub const BOOT_INFO_SIZE: u64 = 0x1000;
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
/// RAM resumes here when the VM has more memory than fits below the hole.
pub const RAM_ABOVE_4G_START: u64 = 0x1_0000_0000;
/// IOAPIC MMIO base.
pub const IOAPIC_START: u64 = 0xfec0_0000;
/// Local APIC MMIO base.
pub const LAPIC_START: u64 = 0xfee0_0000;
/// KVM's TSS region (needed on Intel hosts), just below the identity-map page.
pub const KVM_TSS_ADDRESS: u64 = 0xfffb_d000;
/// KVM's identity-map page (needed on Intel hosts).
pub const KVM_IDENTITY_MAP_ADDRESS: u64 = 0xfffb_c000;
