//! The access stream of the `platform_io` target: how fuzz bytes become guest accesses, the
//! machine they are made against, and the encoder the seed writer uses to script a guest's
//! device setup in the same format.
//!
//! Each access starts with one byte: bits 0-2 the kind, bit 3 read (1) or write (0), bits
//! 4-5 the width (1, 2, 4 or 8 bytes; port accesses at most 4), bits 6-7 the vCPU.

/// Guest RAM in bytes, from address 0.
pub const RAM: usize = 1 << 20;
/// Where the pflash VARS device sits, and its size.
pub const VARS_BASE: u64 = 0xffc0_0000;
/// Bytes of pflash VARS (4 KiB erase blocks).
pub const VARS_LEN: usize = 0x10000;

/// One guest action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A port access to the `device`-th device of the port bus (by base), at `offset` from
    /// its base modulo its length plus 8 (so just past the end too).
    PickedPort { device: u8, offset: u32, value: u32 },
    /// The same on the MMIO bus (which also holds the mapped BARs).
    PickedMmio { device: u8, offset: u32, value: u64 },
    /// A port access at `port`.
    Port { port: u16, value: u32 },
    /// An MMIO access at `addr`.
    Mmio { addr: u64, value: u64 },
    /// A store of `value` to guest RAM at `addr` (aligned down to 8, wrapped into RAM).
    Store { addr: u32, value: u64 },
    /// A turn of the event loop (bit 3 clear), or serving what the queues hold (set).
    Loop,
}

/// An access: what, how wide, read or write, from which vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The action.
    pub op: Op,
    /// Bytes: 1, 2, 4 or 8.
    pub width: usize,
    /// A read (for [`Op::Loop`]: serve the queues).
    pub read: bool,
    /// The vCPU making it (0-3).
    pub vcpu: u8,
}

/// The input, read front to back; zeros once it runs out.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }

    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }

    /// The next access, or None at the end of the input.
    pub fn access(&mut self) -> Option<Access> {
        if self.0.is_empty() {
            return None;
        }
        let head = self.u8();
        let op = match head & 7 {
            0 | 6 => Op::PickedPort {
                device: self.u8(),
                offset: self.u32(),
                value: self.u32(),
            },
            1 | 7 => Op::PickedMmio {
                device: self.u8(),
                offset: self.u32(),
                value: self.u64(),
            },
            2 => Op::Port {
                port: self.u16(),
                value: self.u32(),
            },
            3 => Op::Mmio {
                addr: self.u64(),
                value: self.u64(),
            },
            4 => Op::Store {
                addr: self.u32(),
                value: self.u64(),
            },
            _ => Op::Loop,
        };
        Some(Access {
            op,
            width: 1 << (head >> 4 & 3),
            read: head & 8 != 0,
            vcpu: head >> 6,
        })
    }
}

/// Writes accesses in the format [`Input::access`] reads.
#[derive(Default)]
pub struct Script(pub Vec<u8>);

impl Script {
    fn head(&mut self, kind: u8, width: usize, read: bool) {
        let w = width.trailing_zeros() as u8 & 3;
        self.0.push(kind | u8::from(read) << 3 | w << 4);
    }

    fn access(&mut self, kind: u8, width: usize, read: bool, at: &[u8], value: &[u8]) -> &mut Self {
        self.head(kind, width, read);
        self.0.extend_from_slice(at);
        self.0.extend_from_slice(value);
        self
    }

    /// A port write.
    pub fn outp(&mut self, port: u16, width: usize, value: u32) -> &mut Self {
        self.access(2, width, false, &port.to_le_bytes(), &value.to_le_bytes())
    }

    /// A port read.
    pub fn inp(&mut self, port: u16, width: usize) -> &mut Self {
        self.access(2, width, true, &port.to_le_bytes(), &[0; 4])
    }

    /// An MMIO write.
    pub fn write(&mut self, addr: u64, width: usize, value: u64) -> &mut Self {
        self.access(3, width, false, &addr.to_le_bytes(), &value.to_le_bytes())
    }

    /// An MMIO read.
    pub fn read(&mut self, addr: u64, width: usize) -> &mut Self {
        self.access(3, width, true, &addr.to_le_bytes(), &[0; 8])
    }

    /// Stores `bytes` in guest RAM at `addr` (a multiple of 8), eight at a time.
    pub fn store(&mut self, addr: u32, bytes: &[u8]) -> &mut Self {
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut v = [0u8; 8];
            v[..chunk.len()].copy_from_slice(chunk);
            self.access(4, 8, false, &(addr + 8 * i as u32).to_le_bytes(), &v);
        }
        self
    }

    /// A turn of the event loop.
    pub fn turn(&mut self) -> &mut Self {
        self.head(5, 1, false);
        self
    }

    /// Serving what the queues hold, as at the end of a run.
    pub fn serve(&mut self) -> &mut Self {
        self.head(5, 1, true);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_decode_to_what_they_encode() {
        let mut s = Script::default();
        s.outp(0xcf8, 4, 0x8000_1010)
            .read(0xc000_0014, 1)
            .store(0x1000, &[1, 2, 3, 4, 5, 6, 7, 8, 9])
            .turn()
            .serve();
        let mut input = Input(&s.0);
        let mut got = Vec::new();
        while let Some(a) = input.access() {
            got.push((a.op, a.width, a.read));
        }
        assert_eq!(
            got,
            vec![
                (
                    Op::Port {
                        port: 0xcf8,
                        value: 0x8000_1010
                    },
                    4,
                    false
                ),
                (
                    Op::Mmio {
                        addr: 0xc000_0014,
                        value: 0
                    },
                    1,
                    true
                ),
                (
                    Op::Store {
                        addr: 0x1000,
                        value: 0x0807_0605_0403_0201
                    },
                    8,
                    false
                ),
                (
                    Op::Store {
                        addr: 0x1008,
                        value: 9
                    },
                    8,
                    false
                ),
                (Op::Loop, 1, false),
                (Op::Loop, 1, true),
            ]
        );
    }
}
