//! Source lines: from DWARF line tables in ELF images built with debug information, such as
//! the reference guest (`debug = "line-tables-only"`) or a Linux `vmlinux`, and from the C13
//! line programs of PDBs (read in [`super::pdb`] through [`Builder`]).
//!
//! Debug information is optional: an image without it, or with line data this reader cannot
//! parse, simply has an empty table, and reports name functions without lines.

use std::borrow::Cow;
use std::collections::HashMap;

use gimli::{EndianSlice, RunTimeEndian};
use object::{Object, ObjectSection};

use super::inlines::{InlineBuilder, InlineTable, Inlined};

/// A module's address-to-line table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LineTable {
    /// Sorted by RVA; a row holds from its RVA up to the next row's.
    rows: Vec<Row>,
    files: Vec<String>,
    /// The functions inlined where, from the same DWARF (none from a PDB).
    inlines: InlineTable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    rva: u64,
    file: u32,
    /// 0: no line (the end of a sequence, or code the compiler gave no line).
    line: u32,
}

/// The source position of an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLine<'a> {
    /// The file as the compiler recorded it, made absolute with the unit's directory.
    pub file: &'a str,
    /// 1-based line number.
    pub line: u32,
}

impl SourceLine<'_> {
    /// `name.rs:42`: the file's last component and the line, for tables.
    pub fn short(&self) -> String {
        format!("{}:{}", super::base_name(self.file), self.line)
    }
}

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

impl LineTable {
    /// The line table of an ELF image whose lowest loaded address is `base`; empty without
    /// DWARF line information.
    pub fn from_object(file: &object::File<'_>, base: u64) -> LineTable {
        Self::read(file, base).unwrap_or_default()
    }

    fn read(file: &object::File<'_>, base: u64) -> Result<LineTable, gimli::Error> {
        let (sections, endian) = dwarf_sections(file)?;
        let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));
        let mut table = Builder::default();
        let mut units = dwarf.units();
        while let Some(header) = units.next()? {
            let unit = dwarf.unit(header)?;
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            let mut rows = program.rows();
            while let Some((header, row)) = rows.next_row()? {
                let Some(rva) = row.address().checked_sub(base) else {
                    continue;
                };
                if row.end_sequence() {
                    table.push(rva, 0, 0);
                    continue;
                }
                let line = row
                    .line()
                    .map_or(0, |l| u32::try_from(l.get()).unwrap_or(0));
                let file = match row.file(header) {
                    Some(f) => table.file(path(&dwarf, &unit, header, f)),
                    None => 0,
                };
                table.push(rva, file, line);
            }
        }
        Ok(table.finish())
    }

    /// Adds the functions inlined in the ELF image `file` whose lowest loaded address is
    /// `base` (the file the table was read from). Not read with the lines: walking every
    /// debugging entry costs far more than the line programs (seconds for a kernel), so only
    /// `report --annotate` asks, for the modules it lists.
    pub fn add_inlines(&mut self, file: &object::File<'_>, base: u64) {
        let Ok((sections, endian)) = dwarf_sections(file) else {
            return;
        };
        let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));
        let mut files = Builder {
            index: (self.files.iter().cloned()).zip(0u32..).collect(),
            files: std::mem::take(&mut self.files),
            rows: Vec::new(),
        };
        let mut inlines = InlineBuilder::default();
        let mut units = dwarf.units();
        while let Ok(Some(header)) = units.next() {
            let Ok(unit) = dwarf.unit(header) else {
                continue;
            };
            let program = unit.line_program.clone();
            // A call's file, as the line table's rows name files.
            let mut call_file = |i: u64| {
                let header = program.as_ref()?.header();
                let f = header.file(i)?;
                Some(files.file(path(&dwarf, &unit, header, f)))
            };
            if let Err(e) = inlines.unit(&dwarf, &unit, base, &mut call_file) {
                log::debug!("inlined functions of a unit not read: {e}");
            }
        }
        self.files = files.files;
        self.inlines = inlines.finish();
    }

    /// The functions inlined at `rva`, innermost first (none without DWARF inline entries).
    pub fn inlined(&self, rva: u64) -> Vec<Inlined<'_>> {
        self.inlines.at(rva, &self.files)
    }

    /// The source line of `rva`, if the table has one.
    pub fn lookup(&self, rva: u64) -> Option<SourceLine<'_>> {
        let i = self.rows.partition_point(|r| r.rva <= rva).checked_sub(1)?;
        let r = self.rows[i];
        if r.line == 0 {
            return None;
        }
        Some(SourceLine {
            file: self.files.get(r.file as usize)?,
            line: r.line,
        })
    }

    /// A table of `(rva, file, line)` rows (tests), each holding until the next.
    #[cfg(test)]
    pub(crate) fn from_rows(rows: &[(u64, &str, u32)]) -> LineTable {
        let mut b = Builder::default();
        for &(rva, file, line) in rows {
            let f = b.file(file.to_string());
            b.push(rva, f, line);
        }
        b.finish()
    }

    /// The table with `(start, end, level, name, call line)` inlined ranges called from its
    /// first file (tests).
    #[cfg(test)]
    pub(crate) fn with_inlines(mut self, ranges: &[(u64, u64, u32, &str, u32)]) -> LineTable {
        self.inlines = InlineBuilder::from_ranges(ranges);
        self
    }

    /// True if the module has no line information.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// A file's DWARF sections, uncompressed (borrowed where they were not compressed).
type Sections<'a> = gimli::DwarfSections<Cow<'a, [u8]>>;

/// The DWARF sections of `file` (empty where it has none), uncompressed, and its byte order.
fn dwarf_sections<'a>(
    file: &'a object::File<'_>,
) -> Result<(Sections<'a>, RunTimeEndian), gimli::Error> {
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Cow<'a, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    };
    Ok((gimli::DwarfSections::load(load)?, endian))
}

/// The file's path: its directory and name, under the unit's directory when relative.
fn path(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    header: &gimli::LineProgramHeader<Reader<'_>>,
    file: &gimli::FileEntry<Reader<'_>>,
) -> String {
    let text = |v| {
        dwarf
            .attr_string(unit, v)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut p = std::path::PathBuf::new();
    if let Some(dir) = &unit.comp_dir {
        p.push(dir.to_string_lossy().as_ref());
    }
    if let Some(dir) = file.directory(header) {
        p.push(text(dir));
    }
    p.push(text(file.path_name()));
    p.to_string_lossy().into_owned()
}

/// Collects rows in any order; [`Builder::finish`] sorts them into a [`LineTable`].
#[derive(Default)]
pub(super) struct Builder {
    rows: Vec<Row>,
    files: Vec<String>,
    index: HashMap<String, u32>,
}

impl Builder {
    /// The index of file `name`, added on first use.
    pub(super) fn file(&mut self, name: String) -> u32 {
        if let Some(&i) = self.index.get(&name) {
            return i;
        }
        let i = u32::try_from(self.files.len()).unwrap_or(u32::MAX);
        self.files.push(name.clone());
        self.index.insert(name, i);
        i
    }

    /// A row: from `rva` on, until the next row, the code is `file`'s `line` (0: no line).
    pub(super) fn push(&mut self, rva: u64, file: u32, line: u32) {
        self.rows.push(Row { rva, file, line });
    }

    pub(super) fn finish(mut self) -> LineTable {
        // At one address, a row with a line wins over the end of the sequence before it.
        self.rows.sort_by_key(|r| (r.rva, r.line == 0));
        self.rows.dedup_by_key(|r| r.rva);
        LineTable {
            rows: self.rows,
            files: self.files,
            inlines: InlineTable::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_hold_until_the_next_and_sequence_ends_hold_nothing() {
        let mut b = Builder::default();
        let f = b.file("/src/a.rs".into());
        b.push(0x20, f, 7);
        b.push(0x10, f, 5);
        b.push(0x30, 0, 0); // end of sequence
        b.push(0x40, 0, 0);
        b.push(0x40, f, 9); // a new sequence at the same address wins
        let t = b.finish();
        assert_eq!(t.lookup(0x0f), None);
        assert_eq!(t.lookup(0x10).map(|l| l.line), Some(5));
        assert_eq!(t.lookup(0x2f).map(|l| l.line), Some(7));
        assert_eq!(t.lookup(0x30), None);
        assert_eq!(
            t.lookup(0x41).map(|l| (l.file, l.line)),
            Some(("/src/a.rs", 9))
        );
    }

    #[test]
    fn addresses_below_the_base_are_left_out() {
        // Any ELF with line tables will do: the test binary is one.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let file = object::File::parse(&exe[..]).unwrap();
        assert!(!LineTable::from_object(&file, 0).is_empty());
        assert!(LineTable::from_object(&file, u64::MAX).is_empty());
    }
}
