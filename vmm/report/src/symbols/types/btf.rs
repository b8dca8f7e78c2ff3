//! Linux structure layouts from BTF (a vmlinux's `.BTF` section, or a raw blob as
//! `/sys/kernel/btf/vmlinux` and `pahole --btf_encode_detached` write it).
//!
//! A parser of our own, for the ~5% of BTF a layout needs: the header, the string section, every
//! one of the 19 kinds only so far as to step over it, structures and unions by name, members with
//! `kind_flag` bitfields (bit offset in bits 0..24, width in bits 24..32) and the older
//! INT-encoded ones, anonymous members recursed into (`mm_struct.pgd` lies inside an anonymous
//! struct in 6.1), and typedef / const / volatile / restrict / type-tag chains followed at most
//! [`MAX_DEPTH`] links. Little-endian only (x86 guests).
//!
//! The bytes are hostile: every section must lie inside the blob, every entry's trailing data
//! inside the type section, every string inside the string section; type ids out of range read
//! as unknown types, and at most [`MAX_BTF_TYPES`] entries are indexed.

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

use introspect::bytes::u32_at;
use introspect::os::layout::Field;
use introspect::os::LinuxLayout;

use super::{Member, Record, Records, Ty, TypeError, MAX_DEPTH, MAX_MEMBERS};

/// The most type entries indexed (a distribution kernel's vmlinux has ~130k).
pub const MAX_BTF_TYPES: usize = 1 << 21;

const MAGIC: u16 = 0xeb9f;
const HEADER: usize = 24;

/// Why a BTF blob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BtfError {
    /// Not BTF (or big-endian BTF).
    #[error("bad magic {0:#06x}")]
    Magic(u16),
    /// Shorter than its header, or a section outside the blob.
    #[error("truncated: {0}")]
    Truncated(&'static str),
    /// A type entry of a kind BTF does not define.
    #[error("type {id}: unknown kind {kind}")]
    Kind {
        /// The entry's type id.
        id: u32,
        /// Its kind.
        kind: u32,
    },
    /// More type entries than [`MAX_BTF_TYPES`].
    #[error("more than {MAX_BTF_TYPES} types")]
    TooMany,
}

/// Reads a [`LinuxLayout`]'s structures from a BTF blob (symbols: none).
pub fn linux_layout(blob: &[u8]) -> Result<LinuxLayout, TypeError> {
    let mut btf = Btf::parse(blob)?;
    super::linux_structures(&mut btf)
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    name: u32,
    kind: u32,
    kind_flag: bool,
    vlen: usize,
    size_or_type: u32,
    /// Where its trailing data starts in the type section.
    data: usize,
}

/// A parsed BTF blob.
pub struct Btf<'b> {
    types: &'b [u8],
    strings: &'b [u8],
    /// Entries by type id - 1.
    entries: Vec<Entry>,
    /// Complete structures and unions by name (the first of a name).
    by_name: HashMap<&'b str, u32>,
    cache: HashMap<String, Option<Rc<Record>>>,
    /// Members left to read for the current top-level record (anonymous members that contain
    /// themselves several times would otherwise cost exponential time within the depth bound).
    budget: Cell<usize>,
}

fn section<'b>(
    body: &'b [u8],
    off: u32,
    len: u32,
    what: &'static str,
) -> Result<&'b [u8], BtfError> {
    let start = off as usize;
    let end = start
        .checked_add(len as usize)
        .ok_or(BtfError::Truncated(what))?;
    body.get(start..end).ok_or(BtfError::Truncated(what))
}

impl<'b> Btf<'b> {
    /// Checks `blob`'s header and sections and indexes its type entries.
    pub fn parse(blob: &'b [u8]) -> Result<Self, BtfError> {
        if blob.len() < HEADER {
            return Err(BtfError::Truncated("header"));
        }
        let magic = u16::from_le_bytes([blob[0], blob[1]]);
        if magic != MAGIC {
            return Err(BtfError::Magic(magic));
        }
        let word = |i: usize| u32_at(blob, i).ok_or(BtfError::Truncated("header"));
        let hdr_len = word(4)? as usize;
        if hdr_len < HEADER {
            return Err(BtfError::Truncated("header"));
        }
        let body = blob.get(hdr_len..).ok_or(BtfError::Truncated("header"))?;
        let types = section(body, word(8)?, word(12)?, "type section")?;
        let strings = section(body, word(16)?, word(20)?, "string section")?;
        let mut entries = Vec::new();
        let mut at = 0usize;
        while at < types.len() {
            if entries.len() >= MAX_BTF_TYPES {
                return Err(BtfError::TooMany);
            }
            // At most MAX_BTF_TYPES (2^21) entries: ids fit in u32.
            let id = u32::try_from(entries.len() + 1).unwrap_or(u32::MAX);
            let (Some(name), Some(info), Some(size_or_type)) = (
                u32_at(types, at),
                u32_at(types, at + 4),
                u32_at(types, at + 8),
            ) else {
                return Err(BtfError::Truncated("type entry"));
            };
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let trailing = match kind {
                1 | 14 | 17 => 4,
                3 => 12,
                4 | 5 | 15 | 19 => vlen * 12,
                6 | 13 => vlen * 8,
                2 | 7..=12 | 16 | 18 => 0,
                _ => return Err(BtfError::Kind { id, kind }),
            };
            let data = at + 12;
            let end = data + trailing;
            if end > types.len() {
                return Err(BtfError::Truncated("type entry"));
            }
            entries.push(Entry {
                name,
                kind,
                kind_flag: info >> 31 != 0,
                vlen,
                size_or_type,
                data,
            });
            at = end;
        }
        let mut btf = Btf {
            types,
            strings,
            entries,
            by_name: HashMap::new(),
            cache: HashMap::new(),
            budget: Cell::new(0),
        };
        for (i, e) in btf.entries.iter().enumerate() {
            if matches!(e.kind, 4 | 5) {
                if let Some(name) = btf.string(e.name).filter(|n| !n.is_empty()) {
                    btf.by_name
                        .entry(name)
                        .or_insert(u32::try_from(i + 1).unwrap_or(u32::MAX));
                }
            }
        }
        Ok(btf)
    }

    fn string(&self, off: u32) -> Option<&'b str> {
        let rest = self.strings.get(off as usize..)?;
        let len = rest.iter().position(|&c| c == 0)?;
        std::str::from_utf8(&rest[..len]).ok()
    }

    fn entry(&self, id: u32) -> Option<Entry> {
        self.entries.get((id as usize).checked_sub(1)?).copied()
    }

    /// The record of the structure or union `id`, anonymous members read inline.
    fn read(&self, id: u32, depth: usize) -> Result<Record, TypeError> {
        let Some(e) = self.entry(id).filter(|e| matches!(e.kind, 4 | 5)) else {
            return Ok(Record::default());
        };
        if e.vlen > MAX_MEMBERS {
            return Err(TypeError::TooBig(format!("BTF type {id}")));
        }
        let mut rec = Record {
            size: e.size_or_type,
            members: Vec::with_capacity(e.vlen),
        };
        for i in 0..e.vlen {
            let left = self.budget.get();
            if left == 0 {
                return Err(TypeError::TooBig(format!("BTF type {id}")));
            }
            self.budget.set(left - 1);
            let at = e.data + i * 12;
            let (Some(name), Some(ty), Some(off)) = (
                u32_at(self.types, at),
                u32_at(self.types, at + 4),
                u32_at(self.types, at + 8),
            ) else {
                break;
            };
            let (bit_off, mut bit_size) = if e.kind_flag {
                (off & 0x00ff_ffff, off >> 24)
            } else {
                (off, 0)
            };
            let (size, int_bits, ty) = self.describe(ty, depth)?;
            if bit_size == 0 && int_bits != 0 && int_bits != size.saturating_mul(8) {
                bit_size = int_bits;
            }
            let field = if bit_size != 0 && (1..=8).contains(&size) {
                let unit = size * 8;
                let offset = bit_off / unit * size;
                Field {
                    offset,
                    // unit <= 64 and the width is clamped: both fit in u8.
                    bits: Some((
                        u8::try_from(bit_off % unit).unwrap_or(0),
                        u8::try_from(bit_size.min(255)).unwrap_or(u8::MAX),
                    )),
                    size,
                }
            } else {
                Field {
                    offset: bit_off / 8,
                    bits: None,
                    size,
                }
            };
            rec.members.push(Member {
                name: self.string(name).unwrap_or("").to_string(),
                field,
                ty,
            });
        }
        Ok(rec)
    }

    /// A type's size, an INT's bit width (0 for others) and kind, through typedef chains.
    fn describe(&self, mut id: u32, depth: usize) -> Result<(u32, u32, Ty), TypeError> {
        for _ in 0..MAX_DEPTH {
            let Some(e) = self.entry(id) else {
                return Ok((0, 0, Ty::Other));
            };
            match e.kind {
                // TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG
                8..=11 | 18 => id = e.size_or_type,
                // INT
                1 => {
                    let bits = u32_at(self.types, e.data).unwrap_or(0) & 0xff;
                    return Ok((e.size_or_type, bits, Ty::Other));
                }
                2 => return Ok((8, 0, Ty::Other)),
                3 => {
                    let elem = u32_at(self.types, e.data).unwrap_or(0);
                    let n = u32_at(self.types, e.data + 8).unwrap_or(0);
                    let size = if depth < MAX_DEPTH {
                        self.describe(elem, depth + 1)?.0
                    } else {
                        0
                    };
                    return Ok((size.saturating_mul(n), 0, Ty::Other));
                }
                4 | 5 => {
                    let name = self.string(e.name).unwrap_or("");
                    if !name.is_empty() {
                        return Ok((e.size_or_type, 0, Ty::Named(name.to_string())));
                    }
                    if depth >= MAX_DEPTH {
                        return Err(TypeError::TooBig(format!("BTF type {id}")));
                    }
                    let inner = self.read(id, depth + 1)?;
                    return Ok((e.size_or_type, 0, Ty::Anon(Rc::new(inner))));
                }
                6 | 16 | 19 => return Ok((e.size_or_type, 0, Ty::Other)),
                _ => return Ok((0, 0, Ty::Other)),
            }
        }
        Ok((0, 0, Ty::Other))
    }
}

impl Records for Btf<'_> {
    fn record(&mut self, name: &str) -> Result<Option<Rc<Record>>, TypeError> {
        if let Some(r) = self.cache.get(name) {
            return Ok(r.clone());
        }
        let rec = match self.by_name.get(name) {
            Some(&id) => {
                self.budget.set(MAX_MEMBERS);
                Some(Rc::new(self.read(id, 0)?))
            }
            None => None,
        };
        self.cache.insert(name.to_string(), rec.clone());
        Ok(rec)
    }
}

#[cfg(test)]
mod tests;
