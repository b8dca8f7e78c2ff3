//! COM1 (16550 at 0x3F8) console. Every OUT is a VM exit, so lines are
//! formatted into a buffer first and printing is kept modest.

use core::fmt::{self, Write};

use crate::cpu::{inb, outb};
use crate::sync::SpinLock;

const COM1: u16 = 0x3F8;
const LSR_THRE: u8 = 1 << 5;

static CONSOLE: SpinLock<()> = SpinLock::new(());

pub fn init() {
    outb(COM1 + 1, 0x00); // no interrupts
    outb(COM1 + 3, 0x80); // DLAB
    outb(COM1, 0x01); // 115200 baud
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x03); // 8N1
    outb(COM1 + 4, 0x03); // DTR | RTS
}

fn put_byte(byte: u8) {
    while inb(COM1 + 5) & LSR_THRE == 0 {
        core::hint::spin_loop();
    }
    outb(COM1, byte);
}

/// A line buffer; longer lines are truncated.
pub struct Line {
    buf: [u8; 160],
    len: usize,
}

impl Line {
    pub const fn new() -> Self {
        Self { buf: [0; 160], len: 0 }
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
        Ok(())
    }
}

/// Writes raw bytes (already a whole line or more) under the console lock.
pub fn write_bytes(bytes: &[u8]) {
    let _guard = CONSOLE.lock();
    for &b in bytes {
        put_byte(b);
    }
}

pub fn print_line(args: fmt::Arguments<'_>) {
    let mut line = Line::new();
    let _ = line.write_fmt(args);
    let _ = line.write_str("\n");
    write_bytes(&line.buf[..line.len]);
}

/// Prints one line on COM1, prefixed with "refguest: ".
#[macro_export]
macro_rules! println {
    ($($arg:tt)*) => {
        $crate::serial::print_line(format_args!("refguest: {}", format_args!($($arg)*)))
    };
}
