//! isa-debug-exit at port 0xF4: a one-byte write of 0x10 (PASS, the VMM exits
//! with status 0x21 = 33) or 0x11 (FAIL, status 35).

use crate::cpu;

const DEBUG_EXIT_PORT: u16 = 0xF4;
const PASS: u8 = 0x10;
const FAIL: u8 = 0x11;

pub fn pass() -> ! {
    crate::println!("PASS");
    cpu::outb(DEBUG_EXIT_PORT, PASS);
    cpu::halt_forever()
}

pub fn fail(reason: core::fmt::Arguments<'_>) -> ! {
    crate::println!("FAIL: {}", reason);
    cpu::outb(DEBUG_EXIT_PORT, FAIL);
    cpu::halt_forever()
}
