//! `LF_FIELDLIST` records read from the raw type stream (pdb 0.8 reads `LF_INDEX` without its two
//! padding bytes, so it fails on every continued list). Data members and direct base classes
//! are returned; nested types, static members, methods, enumerators, vtable pointers, friends
//! and virtual bases are stepped over. An unknown leaf ends the list with the members before
//! it (its length is not known, so nothing after it can be read).

use introspect::bytes::{u16_at, u32_at};

use crate::symbols::types::pdb::MAX_TYPES;

/// One `LF_MEMBER`, or one direct base class (`LF_BCLASS`).
pub struct RawMember {
    /// Its name (empty for a base class).
    pub name: String,
    /// Whether it is a base class (`ty` is the class, `offset` the base subobject's).
    pub base: bool,
    /// Its type's index.
    pub ty: u32,
    /// Its offset.
    pub offset: u64,
}

/// The type stream's records by index.
pub struct Lists<'t> {
    raw: &'t [u8],
    /// The first record's index.
    begin: u32,
    /// Each record's (start, end) in `raw`, past its length prefix.
    records: Vec<(usize, usize)>,
}

impl<'t> Lists<'t> {
    /// Indexes the records of a TPI stream's bytes (header, then `u16 length, data` records).
    pub fn new(raw: &'t [u8]) -> Self {
        let begin = u32_at(raw, 8).unwrap_or(0);
        let mut records = Vec::new();
        let mut at = u32_at(raw, 4).map_or(raw.len(), |h| h as usize);
        while records.len() < MAX_TYPES {
            let Some(len) = u16_at(raw, at) else { break };
            let start = at + 2;
            let end = start + len as usize;
            if end > raw.len() {
                break;
            }
            records.push((start, end));
            at = end;
        }
        Lists {
            raw,
            begin,
            records,
        }
    }

    /// The members of the field list at type index `index` and its continuation's index.
    pub fn members(&self, index: u32) -> Option<(Vec<RawMember>, Option<u32>)> {
        let slot = index.checked_sub(self.begin)? as usize;
        let &(start, end) = self.records.get(slot)?;
        let b = &self.raw[start..end];
        if u16_at(b, 0)? != 0x1203 {
            return None;
        }
        let mut c = Cursor { b, at: 2 };
        let mut out = Vec::new();
        let mut next = None;
        while c.at < b.len() {
            if c.skip_padding().is_none() || c.at >= b.len() {
                break;
            }
            let Some(done) = c.field(&mut out, &mut next) else {
                break;
            };
            if !done {
                break;
            }
        }
        Some((out, next))
    }
}

struct Cursor<'b> {
    b: &'b [u8],
    at: usize,
}

impl Cursor<'_> {
    fn u16(&mut self) -> Option<u16> {
        let v = u16_at(self.b, self.at)?;
        self.at += 2;
        Some(v)
    }

    fn u32(&mut self) -> Option<u32> {
        let v = u32_at(self.b, self.at)?;
        self.at += 4;
        Some(v)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        let at = self.at.checked_add(n)?;
        (at <= self.b.len()).then(|| self.at = at)
    }

    fn skip_padding(&mut self) -> Option<()> {
        while let Some(&p) = self.b.get(self.at) {
            if p < 0xf0 {
                break;
            }
            self.skip(usize::from(p & 0x0f).max(1))?;
        }
        Some(())
    }

    /// A numeric leaf (CodeView's variable-length integer).
    fn numeric(&mut self) -> Option<u64> {
        let leaf = self.u16()?;
        if leaf < 0x8000 {
            return Some(leaf.into());
        }
        let (n, signed) = match leaf {
            0x8000 => (1, true),
            0x8001 => (2, true),
            0x8002 => (2, false),
            0x8003 => (4, true),
            0x8004 => (4, false),
            0x8009 => (8, true),
            0x800a => (8, false),
            _ => return None,
        };
        let bytes = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(bytes);
        if signed && bytes[n - 1] & 0x80 != 0 {
            v[n..].fill(0xff);
        }
        Some(u64::from_le_bytes(v))
    }

    fn name(&mut self) -> Option<String> {
        let rest = self.b.get(self.at..)?;
        let len = rest.iter().position(|&c| c == 0)?;
        self.at += len + 1;
        Some(String::from_utf8_lossy(&rest[..len]).into_owned())
    }

    /// Reads one field; `Some(false)` on a leaf it does not know.
    fn field(&mut self, out: &mut Vec<RawMember>, next: &mut Option<u32>) -> Option<bool> {
        match self.u16()? {
            // LF_MEMBER
            0x150d => {
                self.skip(2)?;
                let ty = self.u32()?;
                let offset = self.numeric()?;
                let name = self.name()?;
                out.push(RawMember {
                    name,
                    base: false,
                    ty,
                    offset,
                });
            }
            // LF_INDEX
            0x1404 => {
                self.skip(2)?;
                *next = Some(self.u32()?);
            }
            // LF_NESTTYPE, LF_NESTTYPEEX, LF_FRIENDFCN: attributes or padding, a type, a name.
            0x1510 | 0x1512 | 0x150c => {
                self.skip(6)?;
                self.name()?;
            }
            // LF_VFUNCTAB, LF_FRIENDCLS: padding and a type.
            0x1409 | 0x140a => self.skip(6)?,
            // LF_VFUNCOFF: padding, a type and an offset.
            0x140c => self.skip(10)?,
            // LF_BCLASS
            0x1400 => {
                self.skip(2)?;
                let ty = self.u32()?;
                let offset = self.numeric()?;
                out.push(RawMember {
                    name: String::new(),
                    base: true,
                    ty,
                    offset,
                });
            }
            // LF_VBCLASS, LF_IVBCLASS: a virtual base lies where the vbtable says, at run time.
            0x1401 | 0x1402 => {
                self.skip(10)?;
                self.numeric()?;
                self.numeric()?;
            }
            // LF_STMEMBER
            0x150e => {
                self.skip(6)?;
                self.name()?;
            }
            // LF_METHOD
            0x150f => {
                self.skip(6)?;
                self.name()?;
            }
            // LF_ONEMETHOD: a virtual base offset for introducing virtuals.
            0x1511 => {
                let attr = self.u16()?;
                self.skip(4)?;
                if matches!((attr >> 2) & 7, 4 | 6) {
                    self.skip(4)?;
                }
                self.name()?;
            }
            // LF_ENUMERATE
            0x1502 => {
                self.skip(2)?;
                self.numeric()?;
                self.name()?;
            }
            _ => return Some(false),
        }
        Some(true)
    }
}
