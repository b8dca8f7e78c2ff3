//! ELF images through the object crate: function symbols, build id, code sections, and the
//! sections a user-mode unwinder reads ([`unwind_info`]).
//!
//! Function symbols are `STT_FUNC` symbols. As a fallback for hand-written assembly, a
//! `STT_NOTYPE` label defined in an executable section counts too (a `FUNC` symbol at the same
//! address wins); a label without a size extends to the next symbol.

use introspect::cfi::{self, ElfUnwindInfo};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};

use super::{sort_symbols, ImageKind, Module, Section, Symbol, SymbolError};

/// Reads an ELF image (or any other format the object crate reads the same way) as a module
/// named `name`, placed where it was linked. Its range is that of its executable segments
/// (all loadable ones when none is marked executable): samples are code addresses, and a
/// kernel's data segments may be linked far from its code (Linux's per-CPU segment at 0 would
/// otherwise make vmlinux claim every user-mode address).
pub fn read(name: &str, bytes: &[u8]) -> Result<Module, SymbolError> {
    let file = object::File::parse(bytes)?;
    let (base, size) = range(&file);
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
    let debug_id = build_id_of(&file);
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

/// The range a module of `file` spans where it was linked: its executable segments (all
/// loadable ones when none is marked executable); from 0, unbounded, without segments.
fn range(file: &object::File<'_>) -> (u64, u64) {
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
    if lo < hi {
        (lo, hi - lo)
    } else {
        (0, u64::MAX)
    }
}

/// Adds to `module`, read from the ELF file `bytes`, the functions inlined in it (DWARF's
/// inlined-subroutine entries, [`LineTable::add_inlines`](super::LineTable::add_inlines)).
pub fn add_inlines(module: &mut Module, bytes: &[u8]) {
    if let Ok(file) = object::File::parse(bytes) {
        let (base, _) = range(&file);
        module.lines.add_inlines(&file, base);
    }
}

/// Where an ELF file's loadable segments put its bytes: each segment's file range, the
/// address it was linked at and whether it is executable, read once to place every mapping of
/// the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments(Vec<Segment>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    offset: u64,
    size: u64,
    address: u64,
    exec: bool,
}

/// The page size the kernel's ELF loader maps segments by (x86-64).
const PAGE: u64 = 0x1000;

impl Segments {
    /// The loadable segments of the ELF file `bytes`; None when it does not parse.
    pub fn of(bytes: &[u8]) -> Option<Segments> {
        let file = object::File::parse(bytes).ok()?;
        Some(Segments(
            file.segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    let exec = matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. }
                        if p_flags.0 & object::elf::PF_X.0 != 0);
                    Segment {
                        offset,
                        size,
                        address: s.address(),
                        exec,
                    }
                })
                .collect(),
        ))
    }

    /// The address an executable mapping of the file from `offset` was linked to start at;
    /// None when no loadable segment holds it. The kernel's ELF loader maps each segment from
    /// the page holding its first byte, so a mapping's first page may also hold the end of the
    /// segment before (linkers such as lld and mold pack segments in the file): the executable
    /// segment whose pages hold `offset` is the one mapped there, else any segment that does.
    pub fn linked_address(&self, offset: u64) -> Option<u64> {
        let holds = |s: &&Segment| {
            s.offset & !(PAGE - 1) <= offset && offset < s.offset.saturating_add(s.size)
        };
        let s =
            (self.0.iter().filter(|s| s.exec).find(holds)).or_else(|| self.0.iter().find(holds))?;
        s.address.checked_add(offset)?.checked_sub(s.offset)
    }
}

/// The GNU build id of the ELF file `bytes`, in lowercase hex; None for a file without one
/// or not ELF.
pub fn build_id(bytes: &[u8]) -> Option<String> {
    build_id_of(&object::File::parse(bytes).ok()?)
}

fn build_id_of(file: &object::File<'_>) -> Option<String> {
    let id = file.build_id().ok()??;
    Some(introspect::os::linux::build_id::hex(id))
}

/// What the ELF file `bytes` gives a user-mode unwinder (`.text`, `.eh_frame`,
/// `.eh_frame_hdr`, `.got`, at their linked addresses); None when it does not parse or has no
/// `.eh_frame`. The sections' bytes are copied: the file's own bytes can go.
pub fn unwind_info(bytes: &[u8]) -> Option<ElfUnwindInfo> {
    let file = object::File::parse(bytes).ok()?;
    let section = |name: &str| -> Option<cfi::Section> {
        let s = file.section_by_name(name)?;
        let data = s.data().ok()?;
        Some(cfi::Section {
            addresses: s.address()..s.address().checked_add(s.size())?,
            bytes: data.into(),
        })
    };
    let info = ElfUnwindInfo {
        text: section(".text"),
        eh_frame: section(".eh_frame"),
        eh_frame_hdr: section(".eh_frame_hdr"),
        got: file
            .section_by_name(".got")
            .and_then(|s| Some(s.address()..s.address().checked_add(s.size())?)),
    };
    info.has_cfi().then_some(info)
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

    /// The test binary, built by rustc with its `.eh_frame` and `.eh_frame_hdr` (as every
    /// x86-64 ELF linker writes them), gives an unwinder both; garbage gives nothing.
    #[test]
    fn an_elf_has_call_frame_information() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let info = unwind_info(&exe).unwrap();
        for s in [&info.text, &info.eh_frame, &info.eh_frame_hdr] {
            let s = s.as_ref().unwrap();
            assert_eq!(s.addresses.end - s.addresses.start, s.bytes.len() as u64);
        }
        assert!(unwind_info(b"not an image").is_none());
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

    /// lld's layout of a PIE (the test binaries' own): the executable segment starts 0x480 into
    /// a page whose start still belongs to the read-only segment before it. The loader maps
    /// the executable segment from that page, so its mapping at offset 0x4ae000 starts at the
    /// address 0x4af000, not at the read-only segment's 0x4ae000.
    #[test]
    fn a_mapping_from_a_page_two_segments_share_is_the_executable_ones() {
        let segment = |offset, size, address, exec| Segment {
            offset,
            size,
            address,
            exec,
        };
        let segments = Segments(vec![
            segment(0, 0x4a_e454, 0, false),
            segment(0x4a_e480, 0xb6_eef0, 0x4a_f480, true),
            segment(0x101_d370, 0xb_a878, 0x101_f370, false),
        ]);
        assert_eq!(segments.linked_address(0x4a_e000), Some(0x4a_f000));
        assert_eq!(segments.linked_address(0x4b_0000), Some(0x4b_1000));
        assert_eq!(
            segments.linked_address(0),
            Some(0),
            "no executable segment holds it"
        );
        // The executable segment's last page, which the writable one's first byte shares.
        assert_eq!(segments.linked_address(0x101_d000), Some(0x101_e000));
        assert_eq!(segments.linked_address(0x101_e000), Some(0x102_0000));
        assert_eq!(segments.linked_address(0x200_0000), None);
    }
}
