//! `hvprof report --annotate`: the hottest buckets disassembled with iced-x86, each
//! instruction with the count of the bucket it starts in.
//!
//! The code bytes come from the symbol image (an ELF's or PE's code sections, mapped to guest
//! addresses through the module's load base), not from the guest: a profile names addresses,
//! the image says what was there. Decoding starts at the function's first byte when a symbol
//! covers the bucket (so instruction boundaries are right), and the listing shows the bucket
//! with one bucket of context either side (within the function when its size is known),
//! the hot bucket's lines marked `>`.

use std::collections::HashMap;
use std::fmt::Write as _;

use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};

use super::profile::{Bucket, Profile, ProfileObject};
use super::symbols::{ImageKind, Module, Symbols};
use super::text::{hottest, percent};

/// Longest stretch decoded before a bucket, when no symbol says where its function starts.
const MAX_LEAD_IN: u64 = 4096;

/// The annotated listing of the `top` hottest buckets of every object.
pub fn render(p: &Profile, symbols: &Symbols, top: usize) -> String {
    let mut out = String::new();
    for o in p.objects.iter().filter(|o| o.total > 0) {
        let _ = writeln!(
            out,
            "\nprofile object {} ({}): the {} hottest buckets",
            o.id,
            o.scope(),
            top
        );
        let counts: HashMap<u64, u64> = o.counts.iter().copied().collect();
        for b in hottest(o, top) {
            bucket(&mut out, o, &counts, &b, symbols);
        }
    }
    crate::sanitize::terminal(&out).into_owned()
}

/// Reads the functions inlined in the ELF modules that [`render`]'s listing of the `top`
/// hottest buckets shows, from their files: `read` gives a module's bytes, or None (a module
/// whose file is not at hand keeps its lines alone).
pub fn add_inlines(
    p: &Profile,
    symbols: &mut Symbols,
    top: usize,
    read: &dyn Fn(&Module) -> Option<Vec<u8>>,
) {
    let mut shown: Vec<(String, u64)> = Vec::new();
    for o in p.objects.iter().filter(|o| o.total > 0) {
        for b in hottest(o, top) {
            if let Some(hit) = symbols.resolve(b.start) {
                let key = (hit.module.name.clone(), hit.module.base);
                if !shown.contains(&key) {
                    shown.push(key);
                }
            }
        }
    }
    for m in symbols.all_modules_mut() {
        if m.kind != ImageKind::Elf || !shown.contains(&(m.name.clone(), m.base)) {
            continue;
        }
        if let Some(bytes) = read(m) {
            crate::symbols::elf::add_inlines(m, &bytes);
        }
    }
}

/// One bucket's listing; `counts`: the object's counts by bucket index.
fn bucket(
    out: &mut String,
    o: &ProfileObject,
    counts: &HashMap<u64, u64>,
    b: &Bucket,
    symbols: &Symbols,
) {
    let _ = writeln!(
        out,
        "\n{:#x}..{:#x} {}: {} samples ({:.2}%)",
        b.start,
        b.end,
        symbols.describe_qualified(b.start),
        b.count,
        percent(b.count, o.total)
    );
    let Some(hit) = symbols.resolve(b.start) else {
        let _ = writeln!(out, "  (no module covers this address: pass --symbols)");
        return;
    };
    let width = b.end - b.start;
    let from = match hit.symbol {
        Some(_) => b.start - hit.offset,
        None => b.start.saturating_sub(MAX_LEAD_IN.min(width)),
    };
    let show_from = b.start.saturating_sub(width).max(from);
    let mut show_to = b.end.saturating_add(width);
    if let Some(sym) = hit.symbol.filter(|s| s.size > 0) {
        show_to = show_to.min(from.saturating_add(sym.size)).max(b.end);
    }
    let Some(code) = hit.module.code_at(from) else {
        let _ = writeln!(
            out,
            "  (no code bytes for this address in {})",
            hit.module.name
        );
        return;
    };
    // Up to one longest instruction past the end, so the last one shown decodes whole.
    let len = usize::try_from(show_to - from + 15)
        .unwrap_or(usize::MAX)
        .min(code.len());
    let shift = o.bucket_shift.min(63);
    let mut decoder = Decoder::with_ip(hit.module.bits, &code[..len], from, DecoderOptions::NONE);
    let mut formatter = IntelFormatter::new();
    let mut insn = Instruction::default();
    let mut text = String::new();
    let mut last_line = None;
    let mut last_chain = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        let ip = insn.ip();
        if ip < show_from {
            continue;
        }
        if ip >= show_to {
            break;
        }
        let count = ip
            .checked_sub(o.base.0)
            .and_then(|off| counts.get(&(off >> shift)))
            .copied()
            .unwrap_or(0);
        // The functions inlined here, when that changes (innermost first, each with the line
        // that called it), then the source line above its first instruction, when the module
        // has lines.
        let rva = ip.checked_sub(hit.module.base);
        let chain = rva
            .map(|rva| hit.module.lines.inlined(rva))
            .unwrap_or_default();
        if chain != last_chain {
            if !chain.is_empty() {
                let _ = writeln!(out, "  {:>9}  inlined: {}", "", inline_text(&chain));
            }
            last_chain = chain;
        }
        let line = rva.and_then(|rva| hit.module.lines.lookup(rva));
        if line.is_some() && line != last_line {
            if let Some(l) = line {
                let _ = writeln!(out, "  {:>9}  {}", "", l.short());
            }
        }
        last_line = line;
        text.clear();
        formatter.format(&insn, &mut text);
        let start = usize::try_from(ip - from).unwrap_or(0);
        let bytes: String = code[start..start + insn.len()]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect();
        let mark = if ip >= b.start && ip < b.end {
            '>'
        } else {
            ' '
        };
        let count = if count == 0 {
            ".".to_string()
        } else {
            count.to_string()
        };
        let _ = writeln!(out, "{mark} {count:>9}  {ip:#018x}  {bytes:<20} {text}");
    }
}

/// `f (a.c:12) <- g (a.c:40)`: the inlined functions, innermost first, each with the line
/// that called it.
fn inline_text(chain: &[crate::symbols::inlines::Inlined<'_>]) -> String {
    let each: Vec<String> = chain.iter().map(|i| i.describe()).collect();
    each.join(" <- ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::symbols::{ImageKind, LineTable, Module, Section, Symbol};

    #[test]
    fn instructions_carry_their_bucket_counts() {
        // Bucket 7 (0x1070..0x1080) is the hottest: code there is `nop; add eax, 1; ret` then
        // int3 padding; bucket 6 holds nops.
        let mut data = vec![0x90u8; 0x100];
        data[0x70..0x75].copy_from_slice(&[0x90, 0x83, 0xc0, 0x01, 0xc3]);
        data[0x75..0x80].fill(0xcc);
        let module = Module {
            name: "m".into(),
            path: None,
            kind: ImageKind::Elf,
            base: 0x1000,
            size: 0x100,
            debug_id: None,
            symbols: vec![Symbol {
                rva: 0x60,
                size: 0x20,
                name: "f".into(),
            }],
            code: vec![Section { rva: 0, data }],
            bits: 64,
            lines: LineTable::from_rows(&[(0x60, "/src/m.rs", 41), (0x71, "/src/m.rs", 42)])
                .with_inlines(&[(0x71, 0x74, 1, "add_one", 41)]),
        };
        let p = sample_profile(0x1000);
        let t = render(&p, &Symbols::from_module(module), 1);
        assert!(
            t.contains("0x1070..0x1080 m!f+0x10: 9 samples (60.00%)"),
            "{t}"
        );
        assert!(
            t.contains(">         9  0x0000000000001071  83c001               add eax,1"),
            "{t}"
        );
        assert!(
            t.contains(">         9  0x0000000000001074  c3                   ret"),
            "{t}"
        );
        assert!(
            t.contains("          .  0x0000000000001060  90                   nop"),
            "{t}"
        );
        assert!(!t.contains("0x0000000000001080"), "{t}");
        // Each source line once, above its first instruction.
        let lines: Vec<&str> = t.lines().collect();
        let at = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap();
        assert_eq!(t.matches("m.rs:42").count(), 1, "{t}");
        assert_eq!(at("m.rs:42") + 1, at("0x0000000000001071"), "{t}");
        assert!(at("m.rs:41") < at("0x0000000000001060"), "{t}");
        // The inlined copy at 0x1071..0x1074, once, above its first instruction.
        assert_eq!(t.matches("inlined: add_one (m.rs:41)").count(), 1, "{t}");
        assert_eq!(at("inlined: add_one") + 2, at("0x0000000000001071"), "{t}");
    }

    #[test]
    fn addresses_without_images_say_so() {
        let t = render(&sample_profile(0x1000), &Symbols::default(), 1);
        assert!(t.contains("no module covers this address"), "{t}");
    }
}
