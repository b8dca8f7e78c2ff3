//! Inlined functions: DWARF's `DW_TAG_inlined_subroutine` entries, each a function the
//! compiler copied into another, with the address ranges of the copy and the line it was
//! called from. `report --annotate` shows, above an instruction, the functions it is inlined
//! from: `-O2` code is mostly inlined helpers, and a hot instruction's symbol alone names only
//! the function it was copied into.
//!
//! Read with the line tables, in one pass over the units, and bounded: at most
//! [`MAX_INLINES`] ranges a module, [`MAX_NESTING`] levels, names resolved through at most
//! four `DW_AT_abstract_origin` or `DW_AT_specification` references.

use gimli::{AttributeValue, EndianSlice, RunTimeEndian};

/// Inlined ranges kept for one module (a large kernel has a few million: past this, the rest
/// are left out).
pub const MAX_INLINES: usize = 1 << 22;
/// Inlined copies within inlined copies followed.
const MAX_NESTING: usize = 64;

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// One inlined copy's address range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    /// 1 for a copy in the function itself, 2 for a copy inside that copy, and so on.
    level: u32,
    /// Index into the names.
    name: u32,
    /// The call's file (index into the files) and line; line 0: unknown.
    call_file: u32,
    call_line: u32,
}

/// A function inlined at an address, and where it was called from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inlined<'a> {
    /// The inlined function's name (`?` when its entry has none this reader resolves).
    pub name: &'a str,
    /// The line in the function it was copied into that calls it: its file as the
    /// compiler recorded it, and its number.
    pub call: Option<(&'a str, u32)>,
}

impl Inlined<'_> {
    /// `name (a.c:12)`, or the name alone without a call line.
    pub fn describe(&self) -> String {
        match self.call {
            Some((file, line)) => format!("{} ({}:{line})", self.name, super::base_name(file)),
            None => self.name.to_string(),
        }
    }
}

/// A module's inlined ranges, by RVA.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InlineTable {
    /// Sorted by start.
    ranges: Vec<Range>,
    /// `ends[i]`: the furthest end of `ranges[..=i]`, so a lookup stops where no earlier
    /// range can reach.
    ends: Vec<u64>,
    names: Vec<String>,
}

impl InlineTable {
    /// The functions inlined at `rva`, innermost first; `files` are the line table's.
    pub fn at<'a>(&'a self, rva: u64, files: &'a [String]) -> Vec<Inlined<'a>> {
        let last = self.ranges.partition_point(|r| r.start <= rva);
        let mut found: Vec<&Range> = (0..last)
            .rev()
            .take_while(|&i| self.ends[i] > rva)
            .map(|i| &self.ranges[i])
            .filter(|r| rva < r.end)
            .collect();
        found.sort_by_key(|r| std::cmp::Reverse(r.level));
        found.dedup_by_key(|r| r.level);
        found
            .into_iter()
            .map(|r| Inlined {
                name: self.names.get(r.name as usize).map_or("?", String::as_str),
                call: files
                    .get(r.call_file as usize)
                    .filter(|_| r.call_line > 0)
                    .map(|file| (file.as_str(), r.call_line)),
            })
            .collect()
    }

    /// True if the module has no inlined ranges.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// Collects the inlined ranges of a module's units; [`InlineBuilder::finish`] sorts them.
#[derive(Default)]
pub(super) struct InlineBuilder {
    table: InlineTable,
    index: std::collections::HashMap<String, u32>,
}

impl InlineBuilder {
    /// Adds unit `unit`'s inlined ranges (RVAs from `base`); `file` turns a call's file
    /// index into the line table's file index.
    pub(super) fn unit(
        &mut self,
        dwarf: &gimli::Dwarf<Reader<'_>>,
        unit: &gimli::Unit<Reader<'_>>,
        base: u64,
        file: &mut dyn FnMut(u64) -> Option<u32>,
    ) -> Result<(), gimli::Error> {
        let mut entries = unit.entries();
        let mut depth: isize = 0;
        // The DFS depths of the inlined entries enclosing the current one.
        let mut open: Vec<isize> = Vec::new();
        while let Some((delta, entry)) = entries.next_dfs()? {
            depth += delta;
            while open.last().is_some_and(|&d| d >= depth) {
                open.pop();
            }
            if entry.tag() != gimli::DW_TAG_inlined_subroutine
                || self.table.ranges.len() >= MAX_INLINES
                || open.len() >= MAX_NESTING
            {
                continue;
            }
            open.push(depth);
            let level = u32::try_from(open.len()).unwrap_or(u32::MAX);
            let name = match name_of(dwarf, unit, entry, 4) {
                Some(n) => self.name(n),
                None => u32::MAX,
            };
            let call_file = match entry.attr_value(gimli::DW_AT_call_file)? {
                Some(AttributeValue::FileIndex(i)) => file(i).unwrap_or(u32::MAX),
                Some(AttributeValue::Udata(i)) => file(i).unwrap_or(u32::MAX),
                _ => u32::MAX,
            };
            let call_line = match entry.attr_value(gimli::DW_AT_call_line)? {
                Some(AttributeValue::Udata(l)) => u32::try_from(l).unwrap_or(0),
                _ => 0,
            };
            let mut ranges = dwarf.die_ranges(unit, entry)?;
            while let Some(r) = ranges.next()? {
                let (Some(start), Some(end)) = (r.begin.checked_sub(base), r.end.checked_sub(base))
                else {
                    continue;
                };
                if start < end && self.table.ranges.len() < MAX_INLINES {
                    self.table.ranges.push(Range {
                        start,
                        end,
                        level,
                        name,
                        call_file,
                        call_line,
                    });
                }
            }
        }
        Ok(())
    }

    fn name(&mut self, name: String) -> u32 {
        if let Some(&i) = self.index.get(&name) {
            return i;
        }
        let i = u32::try_from(self.table.names.len()).unwrap_or(u32::MAX);
        self.table.names.push(name.clone());
        self.index.insert(name, i);
        i
    }

    pub(super) fn finish(mut self) -> InlineTable {
        let t = &mut self.table;
        t.ranges.sort_by_key(|r| (r.start, r.level));
        t.ends = t
            .ranges
            .iter()
            .scan(0u64, |end, r| {
                *end = (*end).max(r.end);
                Some(*end)
            })
            .collect();
        self.table
    }

    /// A table of `(start, end, level, name, call line)` ranges in file 0 (tests).
    #[cfg(test)]
    pub(super) fn from_ranges(ranges: &[(u64, u64, u32, &str, u32)]) -> InlineTable {
        let mut b = InlineBuilder::default();
        for &(start, end, level, name, call_line) in ranges {
            let name = b.name(name.to_string());
            b.table.ranges.push(Range {
                start,
                end,
                level,
                name,
                call_file: 0,
                call_line,
            });
        }
        b.finish()
    }
}

/// The function `entry` is a copy or a declaration of: its `DW_AT_name`, else that of the
/// entry its `DW_AT_abstract_origin` or `DW_AT_specification` names in the same unit,
/// `hops` references deep at most.
fn name_of(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<'_, '_, Reader<'_>>,
    hops: u32,
) -> Option<String> {
    if let Some(v) = entry.attr_value(gimli::DW_AT_name).ok()? {
        let name = dwarf.attr_string(unit, v).ok()?;
        return Some(format!(
            "{:#}",
            rustc_demangle::demangle(&name.to_string_lossy())
        ));
    }
    if hops == 0 {
        return None;
    }
    let target = [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification]
        .into_iter()
        .find_map(|at| match entry.attr_value(at).ok()? {
            Some(AttributeValue::UnitRef(offset)) => Some(offset),
            Some(AttributeValue::DebugInfoRef(offset)) => offset.to_unit_offset(&unit.header),
            _ => None,
        })?;
    let origin = unit.entry(target).ok()?;
    name_of(dwarf, unit, &origin, hops - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gcc's DWARF 5 for testdata/inline.c (its recipe there): `scale` copied into `outer`
    /// at 0x401000..0x401011, `twice` into that copy twice, one copy's range in a range list.
    #[test]
    fn gccs_inlined_copies_are_read_with_their_call_lines() {
        let bytes = include_bytes!("../../testdata/inline.elf");
        let mut module = super::super::elf::read("inline.elf", bytes).unwrap();
        assert!(
            module.lines.inlined(0x3).is_empty(),
            "read with the lines only"
        );
        super::super::elf::add_inlines(&mut module, bytes);
        let chain = |rva| -> Vec<String> {
            let found = module.lines.inlined(rva);
            found.iter().map(Inlined::describe).collect()
        };
        assert_eq!(chain(0x3), ["twice (inline.c:11)", "scale (inline.c:16)"]);
        assert_eq!(chain(0x10), ["scale (inline.c:16)"]);
        assert_eq!(chain(0x11), Vec::<String>::new(), "outer's own xor");
    }

    #[test]
    fn nested_copies_are_found_innermost_first_and_ranges_end_where_they_say() {
        // f copied into the function at 0x10..0x40; g into that copy at 0x20..0x30; h into
        // the function again at 0x100..0x110, after a long gap.
        let t = InlineBuilder::from_ranges(&[
            (0x20, 0x30, 2, "g", 12),
            (0x10, 0x40, 1, "f", 7),
            (0x100, 0x110, 1, "h", 0),
        ]);
        let files = vec!["/src/a.c".to_string()];
        let names = |rva| -> Vec<(&str, Option<u32>)> {
            t.at(rva, &files)
                .into_iter()
                .map(|i| (i.name, i.call.map(|(_, line)| line)))
                .collect()
        };
        assert_eq!(names(0x0f), []);
        assert_eq!(names(0x10), [("f", Some(7))]);
        assert_eq!(names(0x25), [("g", Some(12)), ("f", Some(7))]);
        assert_eq!(names(0x30), [("f", Some(7))]);
        assert_eq!(names(0x40), []);
        assert_eq!(names(0x105), [("h", None)]);
    }
}
