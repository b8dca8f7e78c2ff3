//! Linux structure layouts from DWARF, through gimli, for a vmlinux built without BTF.
//!
//! The units are scanned in order for the complete (`DW_AT_declaration`-less)
//! `DW_TAG_structure_type`s and `DW_TAG_union_type`s a [`LinuxLayout`] names, stopping once all are
//! found. Members give `DW_AT_data_member_location` (a constant), bitfields
//! `DW_AT_data_bit_offset` (DWARF 4+) or the older `DW_AT_bit_offset` counted from the storage
//! unit's most significant bit, with `DW_AT_bit_size`. Member types are followed through typedef,
//! const, volatile, restrict and atomic links (at most [`MAX_DEPTH`]); unnamed structure and union
//! members are read inline and looked through. Type references are followed within their unit only
//! (a cross-unit reference reads as an unknown type).
//!
//! The file is hostile like every other: gimli bounds every read, this module bounds the depth, the
//! members read per structure ([`MAX_MEMBERS`]) and the units scanned ([`MAX_UNITS`]).

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

use gimli::{AttributeValue, EndianSlice, RunTimeEndian, UnitOffset};
use introspect::os::layout::{
    Dentry, Field, FileStruct, MapleArange64, MapleRange64, MmStruct, PcpuHot, TaskStruct,
    VmAreaStruct,
};
use introspect::os::LinuxLayout;
use object::{Object, ObjectSection};

use super::{Member, Record, Records, Ty, TypeError, MAX_DEPTH, MAX_MEMBERS};

/// The most compilation units scanned (a vmlinux has a few thousand).
pub const MAX_UNITS: usize = 1 << 16;

type R<'a> = EndianSlice<'a, RunTimeEndian>;

fn dwarf_err(e: gimli::Error) -> TypeError {
    TypeError::Dwarf(e.to_string())
}

/// The structures found, by name.
struct Found(HashMap<String, Rc<Record>>);

impl Records for Found {
    fn record(&mut self, name: &str) -> Result<Option<Rc<Record>>, TypeError> {
        Ok(self.0.get(name).cloned())
    }
}

/// Reads a [`LinuxLayout`]'s structures from an ELF file's DWARF (symbols: the caller's).
pub fn linux_layout(file: &object::File<'_>) -> Result<LinuxLayout, TypeError> {
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    if file.section_by_name(".debug_info").is_none() {
        return Err(TypeError::NoTypes);
    }
    let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    };
    let sections = gimli::DwarfSections::load(load).map_err(dwarf_err)?;
    let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));
    let wanted = [
        TaskStruct::NAME,
        MmStruct::NAME,
        PcpuHot::NAME,
        VmAreaStruct::NAME,
        FileStruct::NAME,
        Dentry::NAME,
        MapleRange64::NAME,
        MapleArange64::NAME,
        // The types of the named members the paths above go through (`mm_mt.ma_root`,
        // `f_path.dentry`, `d_name.name`).
        "maple_tree",
        "path",
        "qstr",
    ];
    let mut found = Found(HashMap::new());
    let mut units = dwarf.units();
    for _ in 0..MAX_UNITS {
        let Some(header) = units.next().map_err(dwarf_err)? else {
            break;
        };
        let unit = dwarf.unit(header).map_err(dwarf_err)?;
        let reader = UnitReader {
            dwarf: &dwarf,
            unit: &unit,
            budget: Cell::new(0),
        };
        let mut cursor = unit.entries();
        while let Some((_, entry)) = cursor.next_dfs().map_err(dwarf_err)? {
            if !matches!(
                entry.tag(),
                gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type
            ) || entry
                .attr(gimli::DW_AT_declaration)
                .map_err(dwarf_err)?
                .is_some()
            {
                continue;
            }
            let Some(name) = reader.name(entry) else {
                continue;
            };
            if !wanted.contains(&name.as_str()) || found.0.contains_key(&name) {
                continue;
            }
            reader.budget.set(MAX_MEMBERS);
            let rec = reader.read(entry.offset(), 0)?;
            found.0.insert(name, Rc::new(rec));
        }
        // pcpu_hot is optional: stop once the two mandatory ones and it are in.
        if wanted.iter().all(|w| found.0.contains_key(*w)) {
            break;
        }
    }
    super::linux_structures(&mut found)
}

struct UnitReader<'a, 'd> {
    dwarf: &'a gimli::Dwarf<R<'d>>,
    unit: &'a gimli::Unit<R<'d>>,
    budget: Cell<usize>,
}

impl UnitReader<'_, '_> {
    fn name(&self, entry: &gimli::DebuggingInformationEntry<R<'_>>) -> Option<String> {
        let v = entry.attr_value(gimli::DW_AT_name).ok()??;
        let s = self.dwarf.attr_string(self.unit, v).ok()?;
        Some(String::from_utf8_lossy(s.slice()).into_owned())
    }

    fn udata(entry: &gimli::DebuggingInformationEntry<R<'_>>, at: gimli::DwAt) -> Option<u64> {
        entry.attr(at).ok()??.udata_value()
    }

    fn type_of(entry: &gimli::DebuggingInformationEntry<R<'_>>) -> Option<UnitOffset> {
        match entry.attr_value(gimli::DW_AT_type).ok()?? {
            AttributeValue::UnitRef(o) => Some(o),
            _ => None,
        }
    }

    /// The structure or union at `offset`, anonymous members read inline.
    fn read(&self, offset: UnitOffset, depth: usize) -> Result<Record, TypeError> {
        let mut tree = self.unit.entries_tree(Some(offset)).map_err(dwarf_err)?;
        let root = tree.root().map_err(dwarf_err)?;
        let size = Self::udata(root.entry(), gimli::DW_AT_byte_size).unwrap_or(0);
        let mut rec = Record {
            size: u32::try_from(size).unwrap_or(u32::MAX),
            members: Vec::new(),
        };
        let mut children = root.children();
        while let Some(child) = children.next().map_err(dwarf_err)? {
            let e = child.entry();
            if e.tag() != gimli::DW_TAG_member {
                continue;
            }
            let left = self.budget.get();
            if left == 0 {
                return Err(TypeError::TooBig(format!("DWARF entry {:#x}", offset.0)));
            }
            self.budget.set(left - 1);
            let (size, ty) = match Self::type_of(e) {
                Some(t) => self.describe(t, depth)?,
                None => (0, Ty::Other),
            };
            let byte = Self::udata(e, gimli::DW_AT_data_member_location).unwrap_or(0);
            let bit_size = Self::udata(e, gimli::DW_AT_bit_size);
            let field = match bit_size {
                Some(width) if (1..=8).contains(&size) => {
                    let unit_bits = u64::from(size) * 8;
                    let bit = if let Some(b) = Self::udata(e, gimli::DW_AT_data_bit_offset) {
                        Some(b)
                    } else {
                        // DWARF 2/3: from the storage unit's most significant bit.
                        Self::udata(e, gimli::DW_AT_bit_offset).and_then(|from_msb| {
                            let lsb = unit_bits.checked_sub(from_msb)?.checked_sub(width)?;
                            byte.checked_mul(8)?.checked_add(lsb)
                        })
                    };
                    let bit = bit.unwrap_or(byte.saturating_mul(8));
                    let start = bit / unit_bits * u64::from(size);
                    Field {
                        offset: u32::try_from(start).unwrap_or(u32::MAX),
                        bits: Some((
                            u8::try_from(bit % unit_bits).unwrap_or(0),
                            u8::try_from(width.min(255)).unwrap_or(u8::MAX),
                        )),
                        size,
                    }
                }
                _ => Field {
                    offset: u32::try_from(byte).unwrap_or(u32::MAX),
                    bits: None,
                    size,
                },
            };
            rec.members.push(Member {
                name: self.name(e).unwrap_or_default(),
                field,
                ty,
            });
        }
        Ok(rec)
    }

    /// A type's size and kind, through typedef chains.
    fn describe(&self, mut at: UnitOffset, depth: usize) -> Result<(u32, Ty), TypeError> {
        for _ in 0..MAX_DEPTH {
            let Ok(e) = self.unit.entry(at) else {
                return Ok((0, Ty::Other));
            };
            let size = Self::udata(&e, gimli::DW_AT_byte_size)
                .and_then(|s| u32::try_from(s).ok())
                .unwrap_or(0);
            match e.tag() {
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_restrict_type
                | gimli::DW_TAG_atomic_type => match Self::type_of(&e) {
                    Some(t) => at = t,
                    None => return Ok((0, Ty::Other)),
                },
                gimli::DW_TAG_pointer_type => {
                    return Ok((if size == 0 { 8 } else { size }, Ty::Other))
                }
                gimli::DW_TAG_array_type => {
                    return Ok((self.array_size(&e, at, depth)?, Ty::Other))
                }
                gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => {
                    if let Some(name) = self.name(&e) {
                        return Ok((size, Ty::Named(name)));
                    }
                    if depth >= MAX_DEPTH {
                        return Err(TypeError::TooBig(format!("DWARF entry {:#x}", at.0)));
                    }
                    let inner = self.read(at, depth + 1)?;
                    return Ok((size, Ty::Anon(Rc::new(inner))));
                }
                _ => return Ok((size, Ty::Other)),
            }
        }
        Ok((0, Ty::Other))
    }

    /// An array's size: its element's times every subrange's count.
    fn array_size(
        &self,
        e: &gimli::DebuggingInformationEntry<R<'_>>,
        at: UnitOffset,
        depth: usize,
    ) -> Result<u32, TypeError> {
        if let Some(s) = Self::udata(e, gimli::DW_AT_byte_size) {
            return Ok(u32::try_from(s).unwrap_or(u32::MAX));
        }
        if depth >= MAX_DEPTH {
            return Ok(0);
        }
        let elem = match Self::type_of(e) {
            Some(t) => self.describe(t, depth + 1)?.0,
            None => 0,
        };
        let mut size = u64::from(elem);
        let mut tree = self.unit.entries_tree(Some(at)).map_err(dwarf_err)?;
        let root = tree.root().map_err(dwarf_err)?;
        let mut children = root.children();
        for _ in 0..MAX_DEPTH {
            let Some(child) = children.next().map_err(dwarf_err)? else {
                break;
            };
            let c = child.entry();
            if c.tag() != gimli::DW_TAG_subrange_type {
                continue;
            }
            let n = Self::udata(c, gimli::DW_AT_count)
                .or_else(|| Self::udata(c, gimli::DW_AT_upper_bound)?.checked_add(1))
                .unwrap_or(0);
            size = size.saturating_mul(n);
        }
        Ok(u32::try_from(size).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests;
