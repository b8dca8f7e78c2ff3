//! report.txt, Kernrate style: the run and its counters, then per profile object the samples
//! per module, per function and the hottest buckets, each with its share of the object's
//! samples; for an object with call stacks, the callers and callees of its hottest functions.
//!
//! With symbols the tables are computed from them; without (a saved profile reprinted with no
//! `--symbols`) the module and function tables come from the per-function totals stored in the
//! profile, and buckets are named by address.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::callers;
use super::profile::{Bucket, FunctionCount, ObjectOwner, Profile, ProfileObject};
use super::symbols::Symbols;

/// A share of `whole`, in percent.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        // Counts stay far below 2^52, where the conversion is exact.
        100.0 * part as f64 / whole as f64
    }
}

/// The `n` buckets with the most counts, hottest first (ties by address).
pub fn hottest(o: &ProfileObject, n: usize) -> Vec<Bucket> {
    let mut b: Vec<Bucket> = o.nonzero().collect();
    b.sort_by(|a, b| b.count.cmp(&a.count).then(a.start.cmp(&b.start)));
    b.truncate(n);
    b
}

/// Per-function totals: those stored in the object when `symbols` has no modules or is what
/// the profile was symbolized with (`stored`), else computed from `symbols`.
pub fn functions(o: &ProfileObject, symbols: &Symbols, stored: bool) -> Vec<FunctionCount> {
    if stored || symbols.modules().is_empty() {
        o.functions.clone()
    } else {
        o.function_counts(symbols)
    }
}

/// Per-module totals from per-function ones, largest first.
pub fn modules(functions: &[FunctionCount]) -> Vec<(String, u64)> {
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    for f in functions {
        let name = f.module.clone().unwrap_or_else(|| "[unknown]".into());
        *m.entry(name).or_default() += f.samples;
    }
    let mut v: Vec<(String, u64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

fn header(out: &mut String, p: &Profile) {
    let r = &p.run;
    let _ = writeln!(
        out,
        "hvprof {} profile of {} {}",
        p.hvprof_version, r.kernel, r.cmdline
    );
    let _ = writeln!(
        out,
        "started {}, {:.3} s, {} vCPU{}, {} MiB, {} boot; {} (exit status {})",
        r.start_time,
        r.wall_time_s,
        r.vcpus,
        if r.vcpus == 1 { "" } else { "s" },
        r.memory_mib,
        r.protocol,
        r.outcome,
        r.exit_status
    );
    let _ = writeln!(
        out,
        "ProfileTime interval {} (x 100 ns = {:.1} us) on the {} clock\n",
        r.interval_100ns,
        f64::from(r.interval_100ns) / 10.0,
        if r.clock == "cpu" {
            "vCPU threads' CPU-time"
        } else {
            "wall"
        }
    );
    let _ = writeln!(
        out,
        "{:>6} {:>10} {:>10} {:>10} {:>8} {:>10} {:>9} {:>10}",
        "vCPU", "samples", "attributed", "outside", "lost", "counts", "injected", "hypercalls"
    );
    let mut rows: Vec<(String, _)> = p.vcpus.iter().map(|v| (v.vcpu.to_string(), *v)).collect();
    if p.vcpus.len() > 1 {
        rows.push(("total".into(), p.total_stats()));
    }
    for (name, v) in rows {
        let _ = writeln!(
            out,
            "{name:>6} {:>10} {:>10} {:>10} {:>8} {:>10} {:>9} {:>10}",
            v.samples, v.attributed, v.outside, v.lost, v.counts, v.injected, v.hypercalls
        );
    }
}

fn affinity(v: &[u32]) -> String {
    let list: Vec<String> = v.iter().map(u32::to_string).collect();
    list.join(",")
}

/// One object's section; `stored`: its per-function totals are `symbols`' already.
fn object(out: &mut String, o: &ProfileObject, symbols: &Symbols, stored: bool, top: usize) {
    let total = o.total;
    let _ = writeln!(
        out,
        "\nprofile object {} ({}): {:#x}..{:#x}, {}-byte buckets, {}, {}, vCPUs {}: {} samples",
        o.id,
        match o.owner {
            ObjectOwner::Guest => "guest agent",
            ObjectOwner::Host => "host",
        },
        o.base.0,
        o.end(),
        1u64 << o.bucket_shift.min(63),
        o.scope(),
        o.source_name,
        affinity(&o.affinity),
        total
    );
    if total == 0 {
        return;
    }
    let funcs = functions(o, symbols, stored);
    if !funcs.is_empty() {
        let rows: Vec<(String, u64)> = modules(&funcs).into_iter().take(top).collect();
        table(out, "Module", &rows, total);
        let rows: Vec<(String, u64)> = funcs
            .iter()
            .take(top)
            .map(|f| (f.qualified(), f.samples))
            .collect();
        table(out, "Function", &rows, total);
    }
    let rows: Vec<(String, u64)> = hottest(o, top)
        .iter()
        .map(|b| {
            let mut name = format!(
                "{:#x}..{:#x} {}",
                b.start,
                b.end,
                symbols.describe_qualified(b.start)
            );
            if let Some(line) = symbols.resolve(b.start).and_then(|h| h.source()) {
                let _ = write!(name, " ({})", line.short());
            }
            (name, b.count)
        })
        .collect();
    table(out, "Hottest buckets", &rows, total);
    call_graph(out, o, symbols, top.min(5));
}

/// Callers and callees of the `n` functions with the most samples taken in them.
fn call_graph(out: &mut String, o: &ProfileObject, symbols: &Symbols, n: usize) {
    if o.stacks.is_empty() {
        return;
    }
    let stacks = callers::named(o, symbols);
    let truncated: u64 = o
        .stacks
        .iter()
        .filter(|s| s.truncated)
        .map(|s| s.count)
        .sum();
    let _ = writeln!(
        out,
        "
  Call stacks: {} distinct, {} samples whose walk ended early, {} not kept",
        o.stacks.len(),
        truncated,
        o.stacks_dropped
    );
    for (function, _) in callers::hottest(&stacks, n) {
        let e = callers::edges(&stacks, &function);
        let _ = writeln!(
            out,
            "
  {function}: {} samples on the stack ({:.2}%), {} in it",
            e.inclusive,
            percent(e.inclusive, o.total),
            e.own
        );
        for (kind, rows) in [("called by", &e.callers), ("calls", &e.callees)] {
            for (name, count) in rows.iter().take(8) {
                let _ = writeln!(
                    out,
                    "    {kind:<9} {name:<40} {count:>10} {:>7.2}%",
                    percent(*count, e.inclusive)
                );
            }
        }
    }
}

/// A table of names, samples and shares, the name column as wide as its longest entry.
fn table(out: &mut String, title: &str, rows: &[(String, u64)], total: u64) {
    let w = rows
        .iter()
        .map(|(n, _)| n.chars().count())
        .chain([title.len(), 32])
        .max()
        .unwrap_or(32);
    let _ = writeln!(out, "\n  {title:<w$} {:>10} {:>8}", "Samples", "% Total");
    for (name, n) in rows {
        let _ = writeln!(out, "  {name:<w$} {n:>10} {:>7.2}%", percent(*n, total));
    }
}

/// The whole report, with at most `top` rows per table.
pub fn render(p: &Profile, symbols: &Symbols, top: usize) -> String {
    let mut out = String::new();
    header(&mut out, p);
    if p.objects.is_empty() {
        let _ = writeln!(out, "\nno profile objects ran");
    }
    guest_modules(&mut out, p);
    missing_symbols(&mut out, symbols);
    let stored = p.symbolized_with(symbols);
    for o in &p.objects {
        object(&mut out, o, symbols, stored, top);
    }
    // Names and the command line come from the guest and from files: no escape sequence
    // reaches a terminal that prints report.txt.
    crate::sanitize::terminal(&out).into_owned()
}

/// The PE images found in guest memory, with the PDB each names (what a symbol path needs).
fn guest_modules(out: &mut String, p: &Profile) {
    if p.guest_modules.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nModules found in guest memory:\n");
    let _ = writeln!(
        out,
        "  {:<24} {:<20} {:>10} {:<18} PDB",
        "Name", "Base", "Size", "Address space"
    );
    for m in &p.guest_modules {
        let space = m
            .process
            .0
            .map_or_else(|| "kernel".to_string(), |k| format!("{k:#x}"));
        let pdb = m.pdb.as_ref().map_or_else(
            || "(no CodeView record)".to_string(),
            |d| format!("{} {}{:X}", d.name, d.guid, d.age),
        );
        let _ = writeln!(
            out,
            "  {:<24} {:<#20x} {:>#10x} {:<18} {pdb}",
            m.name, m.base.0, m.size.0, space
        );
    }
}

/// The PDBs the symbol path was searched for and did not have.
fn missing_symbols(out: &mut String, symbols: &Symbols) {
    if symbols.missing().is_empty() {
        return;
    }
    let _ = writeln!(out, "\nSymbols not found:\n");
    let _ = writeln!(
        out,
        "  {:<24} {:<24} {:<32} {:>4}",
        "Module", "PDB", "GUID", "Age"
    );
    for m in symbols.missing() {
        let _ = writeln!(
            out,
            "  {:<24} {:<24} {:<32} {:>4}",
            m.module, m.pdb, m.guid, m.age
        );
        for problem in &m.problems {
            let _ = writeln!(out, "    {problem}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::symbols::tests::module;

    /// True when some line of `t`, with runs of spaces squeezed, contains `want`.
    fn has(t: &str, want: &str) -> bool {
        t.lines().any(|l| {
            l.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .contains(want)
        })
    }

    #[test]
    fn guest_modules_are_listed_with_their_pdbs() {
        use crate::hex::{Hex, OptHex};
        use crate::profile::{GuestModule, GuestPdb};
        let mut p = sample_profile(0x1000);
        p.guest_modules = vec![
            GuestModule {
                process: OptHex(None),
                name: "ntoskrnl.exe".into(),
                base: Hex(0xffff_f800_0000_0000),
                size: Hex(0xa0_0000),
                timestamp: 1,
                pdb: Some(GuestPdb {
                    name: "ntkrnlmp.pdb".into(),
                    guid: "0123456789ABCDEF0123456789ABCDEF".into(),
                    age: 1,
                }),
            },
            GuestModule {
                process: OptHex(Some(0x5000)),
                name: "image@0x40300000".into(),
                base: Hex(0x4030_0000),
                size: Hex(0x5000),
                timestamp: 2,
                pdb: None,
            },
        ];
        let t = render(&p, &Symbols::default(), 10);
        assert!(
            has(&t, "ntoskrnl.exe 0xfffff80000000000 0xa00000 kernel ntkrnlmp.pdb 0123456789ABCDEF0123456789ABCDEF1"),
            "{t}"
        );
        assert!(
            has(
                &t,
                "image@0x40300000 0x40300000 0x5000 0x5000 (no CodeView record)"
            ),
            "{t}"
        );
    }

    #[test]
    fn pdbs_not_found_are_listed_with_their_identity() {
        let p = sample_profile(0x1000);
        assert!(!render(&p, &Symbols::default(), 10).contains("Symbols not found"));
        let mut symbols = Symbols::default();
        symbols.add_missing(crate::symbols::MissingPdb {
            module: "ntoskrnl.exe".into(),
            pdb: "ntkrnlmp.pdb".into(),
            guid: "0123456789ABCDEF0123456789ABCDEF".into(),
            age: 1,
            problems: vec!["http://h/x: HTTP status 500".into()],
        });
        let t = render(&p, &symbols, 10);
        assert!(has(&t, "Symbols not found:"), "{t}");
        assert!(
            has(
                &t,
                "ntoskrnl.exe ntkrnlmp.pdb 0123456789ABCDEF0123456789ABCDEF 1"
            ),
            "{t}"
        );
        assert!(has(&t, "http://h/x: HTTP status 500"), "{t}");
    }

    #[test]
    fn kernrate_tables_with_shares() {
        let p = sample_profile(0x1000);
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        let t = render(&p, &symbols, 10);
        assert!(has(&t, "profile object 1 (guest agent): 0x1000..0x1100, 16-byte buckets, process 0x12345000, ProfileTime, vCPUs 0,1: 15 samples"), "{t}");
        assert!(has(&t, "m 15 100.00%"), "{t}");
        assert!(has(&t, "m!hot 10 66.67%"), "{t}");
        assert!(has(&t, "m+0x20 5 33.33%"), "{t}");
        assert!(has(&t, "0x1070..0x1080 m!hot 9 60.00%"), "{t}");
        assert!(has(&t, "0 20 15 5 1 15 0 7"), "{t}");
    }

    #[test]
    fn other_symbols_than_the_profiles_own_are_applied_afresh() {
        let mut p = sample_profile(0x1000);
        p.symbolize(&Symbols::from_module(module(
            "m",
            0x1000,
            &[(0x70, 0x30, "hot")],
        )));
        let newer = Symbols::from_module(module("m2", 0x1000, &[(0x70, 0x30, "renamed")]));
        let t = render(&p, &newer, 10);
        assert!(has(&t, "m2!renamed 10 66.67%"), "{t}");
        assert!(!t.contains("m!hot"), "{t}");
    }

    #[test]
    fn hot_buckets_show_their_source_line() {
        let p = sample_profile(0x1000);
        let mut m = module("m", 0x1000, &[(0x70, 0x30, "hot")]);
        m.lines = crate::symbols::LineTable::from_rows(&[(0x70, "/src/m.rs", 42)]);
        let t = render(&p, &Symbols::from_module(m), 10);
        assert!(has(&t, "0x1070..0x1080 m!hot (m.rs:42) 9 60.00%"), "{t}");
        assert!(has(&t, "0x1020..0x1030 m+0x20 5 33.33%"), "{t}");
    }

    #[test]
    fn a_saved_profile_reprints_its_stored_functions() {
        let mut p = sample_profile(0x1000);
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        p.symbolize(&symbols);
        let t = render(&p, &Symbols::default(), 10);
        assert!(has(&t, "m!hot 10 66.67%"), "{t}");
        assert!(has(&t, "0x1070..0x1080 0x1070 9 60.00%"), "{t}");
    }

    #[test]
    fn hottest_first_then_by_address() {
        let p = sample_profile(0x1000);
        let b = hottest(&p.objects[0], 2);
        assert_eq!(b.iter().map(|b| b.count).collect::<Vec<_>>(), vec![9, 5]);
    }
}
