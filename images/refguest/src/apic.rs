//! Local xAPIC (MMIO at 0xFEE00000, handled by KVM's in-kernel irqchip) and
//! the legacy PIC, which is remapped and masked.

use crate::cpu::outb;

const BASE: u64 = 0xFEE0_0000;
const ID: u64 = 0x20;
const TPR: u64 = 0x80;
const EOI: u64 = 0xB0;
const SVR: u64 = 0xF0;
const ICR_LOW: u64 = 0x300;
const ICR_HIGH: u64 = 0x310;
const LVT_TIMER: u64 = 0x320;
const LVT_LINT0: u64 = 0x350;
const LVT_LINT1: u64 = 0x360;
const TIMER_INITIAL: u64 = 0x380;
const TIMER_CURRENT: u64 = 0x390;
const TIMER_DIVIDE: u64 = 0x3E0;

const MASKED: u32 = 1 << 16;
const PERIODIC: u32 = 1 << 17;
const DELIVERY_PENDING: u32 = 1 << 12;

/// ICR delivery modes and shorthands.
pub const ICR_INIT: u32 = 0x4500;
pub const ICR_STARTUP: u32 = 0x4600;
pub const ICR_FIXED: u32 = 0x4000;
pub const ICR_ALL_INCLUDING_SELF: u32 = 0x8_0000;

fn read(reg: u64) -> u32 {
    // SAFETY: the APIC page is identity mapped uncached; registers are 32-bit.
    unsafe { ((BASE + reg) as *const u32).read_volatile() }
}

fn write(reg: u64, value: u32) {
    // SAFETY: as for `read`.
    unsafe { ((BASE + reg) as *mut u32).write_volatile(value) }
}

pub fn id() -> u32 {
    read(ID) >> 24
}

/// Remaps the 8259 PICs to vectors 0x20..0x30 and masks them, so a timer
/// left running by firmware cannot arrive as an exception vector.
pub fn disable_pic() {
    for (port, value) in [(0x20, 0x11), (0xA0, 0x11), (0x21, 0x20), (0xA1, 0x28), (0x21, 4), (0xA1, 2), (0x21, 1), (0xA1, 1), (0x21, 0xFF), (0xA1, 0xFF)] {
        outb(port, value);
    }
}

/// Software-enables this CPU's APIC with `spurious` as its spurious vector.
pub fn enable(spurious: u8) {
    write(SVR, 0x100 | u32::from(spurious));
    write(TPR, 0);
    write(LVT_LINT0, MASKED);
    write(LVT_LINT1, 0x400); // NMI
}

pub fn eoi() {
    write(EOI, 0);
}

/// Starts the timer counting down from u32::MAX, masked; see `timer_elapsed`.
pub fn timer_start_free_running(vector: u8) {
    write(TIMER_DIVIDE, 0xB); // divide by 1
    write(LVT_TIMER, MASKED | u32::from(vector));
    write(TIMER_INITIAL, u32::MAX);
}

pub fn timer_elapsed() -> u32 {
    u32::MAX - read(TIMER_CURRENT)
}

pub fn timer_periodic(vector: u8, count: u32) {
    write(TIMER_DIVIDE, 0xB);
    write(LVT_TIMER, PERIODIC | u32::from(vector));
    write(TIMER_INITIAL, count);
}

/// Sends an IPI (ICR low word `icr`) to `apic_id`, waiting for delivery.
pub fn send_ipi(apic_id: u32, icr: u32) {
    write(ICR_HIGH, apic_id << 24);
    write(ICR_LOW, icr);
    while read(ICR_LOW) & DELIVERY_PENDING != 0 {
        core::hint::spin_loop();
    }
}
