//! One GDT shared by all CPUs, with a 64-bit TSS per CPU whose IST stacks
//! carry every interrupt and exception.

use core::arch::asm;

use crate::percpu::MAX_CPUS;
use crate::sync::RacyCell;

pub const KERNEL_CS: u16 = 0x08;
pub const KERNEL_DS: u16 = 0x10;
/// User selectors (RPL 3): data and 64-bit code. 0x18 is 32-bit code (`user::USER32_CS`:
/// compatibility mode, what a WOW64 process's x86 code runs in; also where SYSRET's STAR
/// layout wants it).
pub const USER_DS: u16 = 0x20 | 3;
pub const USER_CS: u16 = 0x28 | 3;
const TSS_BASE_SELECTOR: usize = 0x30;
const ENTRIES: usize = 6 + 2 * MAX_CPUS;

/// IST slots (1-based as in the IDT gate).
pub const IST_EXCEPTION: u8 = 1;
pub const IST_DOUBLE_FAULT: u8 = 2;
pub const IST_INTERRUPT: u8 = 3;

#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct Tss {
    reserved0: u32,
    pub rsp: [u64; 3],
    reserved1: u64,
    pub ist: [u64; 7],
    reserved2: u64,
    reserved3: u16,
    iomap_base: u16,
}

const TSS_ZERO: Tss = Tss { reserved0: 0, rsp: [0; 3], reserved1: 0, ist: [0; 7], reserved2: 0, reserved3: 0, iomap_base: 104 };

static GDT: RacyCell<[u64; ENTRIES]> = RacyCell::new([0; ENTRIES]);
static TSS: RacyCell<[Tss; MAX_CPUS]> = RacyCell::new([TSS_ZERO; MAX_CPUS]);

#[repr(C, packed)]
struct Pointer {
    limit: u16,
    base: u64,
}

/// Fills the shared descriptors. BSP only, before any AP starts.
pub fn init() {
    // SAFETY: single-threaded boot; no CPU has loaded this GDT yet.
    let gdt = unsafe { &mut *GDT.get() };
    gdt[1] = 0x00AF_9A00_0000_FFFF; // kernel code, 64-bit
    gdt[2] = 0x00CF_9200_0000_FFFF; // kernel data
    gdt[3] = 0x00CF_FA00_0000_FFFF; // user code, 32-bit, DPL3
    gdt[4] = 0x00CF_F200_0000_FFFF; // user data, DPL3
    gdt[5] = 0x00AF_FA00_0000_FFFF; // user code, 64-bit, DPL3
}

/// Sets up `cpu`'s TSS with the given IST stack tops and loads GDT and TR.
pub fn load(cpu: usize, ist_tops: [u64; 3]) {
    // SAFETY: each CPU touches only its own TSS slot and GDT descriptor.
    let tss = unsafe { &mut (*TSS.get())[cpu] };
    tss.ist[0] = ist_tops[0];
    tss.ist[1] = ist_tops[1];
    tss.ist[2] = ist_tops[2];
    tss.rsp[0] = ist_tops[2];
    let base = tss as *mut Tss as u64;
    let limit = (core::mem::size_of::<Tss>() - 1) as u64;
    let index = TSS_BASE_SELECTOR / 8 + 2 * cpu;
    // SAFETY: as above.
    let gdt = unsafe { &mut *GDT.get() };
    gdt[index] = (limit & 0xFFFF) | ((base & 0xFF_FFFF) << 16) | (0x89 << 40) | ((limit >> 16) << 48) | ((base >> 24 & 0xFF) << 56);
    gdt[index + 1] = base >> 32;
    let pointer = Pointer { limit: (ENTRIES * 8 - 1) as u16, base: GDT.get() as u64 };
    let tr = (TSS_BASE_SELECTOR + 16 * cpu) as u16;
    // SAFETY: the GDT holds valid kernel code/data descriptors at the
    // selectors reloaded here and an available TSS at `tr`.
    unsafe {
        asm!(
            "lgdt [{ptr}]",
            "push {cs}",
            "lea {tmp}, [rip + 2f]",
            "push {tmp}",
            "retfq",
            "2:",
            "mov ds, {ds:e}",
            "mov es, {ds:e}",
            "mov ss, {ds:e}",
            "ltr {tr:x}",
            ptr = in(reg) &pointer,
            cs = in(reg) u64::from(KERNEL_CS),
            ds = in(reg) u32::from(KERNEL_DS),
            tr = in(reg) tr,
            tmp = out(reg) _,
        );
    }
}
