//! ELF images through the object crate: function symbols, build id and code sections.
//!
//! Function symbols are `STT_FUNC` symbols. As a fallback for hand-written assembly, a
//! `STT_NOTYPE` label defined in an executable section counts too (a `FUNC` symbol at the same
//! address wins); a label without a size extends to the next symbol.

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};

use super::{sort_symbols, ImageKind, Module, Section, Symbol, SymbolError};

/// Reads an ELF image (or any other format the object crate reads the same way) as a module
/// named `name`, placed where it was linked. Its range is that of its executable segments
/// (all loadable ones when none is marked executable): samples are code addresses, and a
/// kernel's data segments may be linked far from its code (Linux's per-CPU segment at 0 would
/// otherwise make vmlinux claim every user-mode address).
pub fn read(name: &str, bytes: &[u8]) -> Result<Module, SymbolError> {
    let file = object::File::parse(bytes)?;
    let executable_segment = |s: &object::Segment<'_, '_>| {
        matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. }
            if p_flags.0 & object::elf::PF_X.0 != 0)
    };
    let any_executable = file
        .segments()
        .any(|s| s.size() > 0 && executable_segment(&s));
    let (lo, hi) = file
        .segments()
        .filter(|s| s.size() > 0 && (!any_executable || executable_segment(s)))
        .fold((u64::MAX, 0u64), |(lo, hi), s| {
            (
                lo.min(s.address()),
                hi.max(s.address().saturating_add(s.size())),
            )
        });
    let (base, size) = if lo < hi {
        (lo, hi - lo)
    } else {
        (0, u64::MAX)
    };
    let executable = |s: &object::Symbol<'_, '_>| {
        s.section_index()
            .and_then(|i| file.section_by_index(i).ok())
            .is_some_and(|sec| sec.kind() == SectionKind::Text)
    };
    let mut symbols: Vec<(bool, Symbol)> = file
        .symbols()
        .filter(|s| s.address() >= base && s.address() != 0)
        .filter_map(|s| {
            let func = s.kind() == SymbolKind::Text;
            let label = s.kind() == SymbolKind::Unknown && executable(&s);
            if !func && !label {
                return None;
            }
            let name = s.name().ok().filter(|n| !n.is_empty())?;
            Some((
                func,
                Symbol {
                    rva: s.address() - base,
                    size: s.size(),
                    // `{:#}`: without the trailing hash (`::h0123...`).
                    name: format!("{:#}", rustc_demangle::demangle(name)),
                },
            ))
        })
        .collect();
    // FUNC symbols first, so they survive the per-address dedup over labels.
    symbols.sort_by_key(|(func, _)| !*func);
    let mut symbols: Vec<Symbol> = symbols.into_iter().map(|(_, s)| s).collect();
    sort_symbols(&mut symbols);
    let code = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text && s.address() >= base)
        .filter_map(|s| {
            Some(Section {
                rva: s.address() - base,
                data: s.data().ok()?.to_vec(),
            })
        })
        .collect();
    let debug_id = file
        .build_id()
        .ok()
        .flatten()
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
    Ok(Module {
        name: name.to_string(),
        path: None,
        kind: ImageKind::Elf,
        base,
        size,
        debug_id,
        symbols,
        code,
        bits: if file.is_64() { 64 } else { 32 },
        lines: super::LineTable::from_object(&file, base),
    })
}

/// Where an ELF file's loadable segments put its bytes: each segment's file range and the
/// address it was linked at, read once to place every mapping of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments(Vec<(u64, u64, u64)>);

impl Segments {
    /// The loadable segments of the ELF file `bytes`; None when it does not parse.
    pub fn of(bytes: &[u8]) -> Option<Segments> {
        let file = object::File::parse(bytes).ok()?;
        Some(Segments(
            file.segments()
                .map(|s| {
                    let (start, size) = s.file_range();
                    (start, size, s.address())
                })
                .collect(),
        ))
    }

    /// The address the byte at file offset `offset` was linked at (what a mapping of the file
    /// from that offset was linked to run at); None when no loadable segment holds it.
    pub fn linked_address(&self, offset: u64) -> Option<u64> {
        self.0.iter().find_map(|&(start, size, address)| {
            let into = offset.checked_sub(start).filter(|&d| d < size)?;
            address.checked_add(into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_elf_has_symbols_and_code() {
        // The test binary is an ELF; the reference guest's symbols are checked on the vmm side,
        // which embeds it.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let m = read("exe", &exe).unwrap();
        assert!(m.symbols.len() > 10);
        assert!(!m.code.is_empty());
        assert!(m.symbols.windows(2).all(|w| w[0].rva < w[1].rva));
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(read("x", b"not an image").is_err());
        assert_eq!(Segments::of(b"not an image"), None);
    }

    #[test]
    fn a_file_offset_has_the_address_its_segment_was_linked_at() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let file = object::File::parse(&exe[..]).unwrap();
        let text = file.section_by_name(".text").unwrap();
        let (offset, _) = text.file_range().unwrap();
        let segments = Segments::of(&exe).unwrap();
        assert_eq!(segments.linked_address(offset), Some(text.address()));
        assert_eq!(segments.linked_address(u64::MAX), None);
    }
}
