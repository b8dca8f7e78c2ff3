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
use super::processes::{self, Tasks};
use super::profile::{Bucket, FunctionCount, ObjectOwner, Profile, ProfileObject};
use super::symbols::Symbols;

/// Processes that get a "Functions in NAME (pid N)" table per object.
pub const PROCESS_FUNCTION_TABLES: usize = 5;

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
/// A thread's samples are named as its process (from `tasks`) sees them.
pub fn functions(
    o: &ProfileObject,
    tasks: &Tasks,
    symbols: &Symbols,
    stored: bool,
) -> Vec<FunctionCount> {
    if stored || symbols.all_modules().next().is_none() {
        o.functions.clone()
    } else {
        o.function_counts_in(symbols, |t| tasks.process_of(t).map(|p| p.key))
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
fn object(
    out: &mut String,
    o: &ProfileObject,
    tasks: &Tasks,
    symbols: &Symbols,
    stored: bool,
    top: usize,
) {
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
    if let Some(by) = o.sampled_by.filter(|b| b.kernel > 0) {
        let _ = writeln!(
            out,
            "  sampled: {} by the host kernel's sampler, {} by kicks",
            by.kernel, by.kick
        );
    }
    if total == 0 {
        return;
    }
    let funcs = functions(o, tasks, symbols, stored);
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
    process_tables(out, o, tasks, symbols, top);
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
    call_graph(out, o, tasks, symbols, top.min(5));
}

/// Callers and callees of the `n` functions with the most samples taken in them.
fn call_graph(out: &mut String, o: &ProfileObject, tasks: &Tasks, symbols: &Symbols, n: usize) {
    if o.stacks.is_empty() {
        return;
    }
    let stacks = callers::named(o, tasks, symbols);
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

/// A name the guest gave (a process's, a thread's) on one table row: line breaks and tabs as
/// U+FFFD (the whole report's controls are [`crate::sanitize::terminal`]'s).
fn one_line(name: &str) -> String {
    name.chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\t') {
                crate::sanitize::REPLACEMENT
            } else {
                c
            }
        })
        .collect()
}

/// The guest's processes in one object, from its per-thread counts (nothing when it has
/// none): the Processes table (with the user/kernel split by the bucket's address, bit 63),
/// the `top` threads, and the functions of the [`PROCESS_FUNCTION_TABLES`] busiest
/// processes, each with its share of that process's samples.
fn process_tables(
    out: &mut String,
    o: &ProfileObject,
    tasks: &Tasks,
    symbols: &Symbols,
    top: usize,
) {
    let rows = processes::process_samples(tasks, o);
    if rows.is_empty() {
        return;
    }
    let name = |key: u32| {
        tasks
            .process(key)
            .map_or_else(String::new, |p| one_line(&p.name))
    };
    let w = rows
        .iter()
        .map(|r| name(r.process).chars().count() + 2)
        .chain([32])
        .max()
        .unwrap_or(32);
    let _ = writeln!(
        out,
        "\n  {:<w$} {:>8} {:>10} {:>8} {:>10} {:>10}",
        "Process", "PID", "Samples", "% Total", "User", "Kernel"
    );
    let mut unidentified = false;
    for r in rows.iter().take(top) {
        let Some(p) = tasks.process(r.process) else {
            continue;
        };
        let mark = if p.identified {
            ""
        } else {
            unidentified = true;
            " *"
        };
        let pid = p.pid.map_or_else(|| "-".to_string(), |n| n.to_string());
        let _ = writeln!(
            out,
            "  {:<w$} {pid:>8} {:>10} {:>7.2}% {:>10} {:>10}",
            format!("{}{mark}", one_line(&p.name)),
            r.samples,
            percent(r.samples, o.total),
            r.user,
            r.kernel
        );
    }
    if unidentified {
        let _ = writeln!(
            out,
            "  * [cr3 0x..]: samples hvprof could not attribute to a named process (the guest \
             kernel's\n    structures were unknown or unreadable then), named by the address space \
             (CR3) they ran in"
        );
    }
    let threads: Vec<(String, String, String, u64)> = processes::thread_samples(o)
        .into_iter()
        .take(top)
        .filter_map(|(key, n)| {
            let t = tasks.thread(key)?;
            let p = tasks.process(t.process)?;
            let tid = t.tid.map_or_else(|| "-".to_string(), |n| n.to_string());
            let name = t.name.as_deref().map(one_line).unwrap_or_default();
            Some((one_line(&p.label()), tid, name, n))
        })
        .collect();
    let pw = threads
        .iter()
        .map(|t| t.0.chars().count())
        .chain([24])
        .max()
        .unwrap_or(24);
    let nw = threads
        .iter()
        .map(|t| t.2.chars().count())
        .chain([16])
        .max()
        .unwrap_or(16);
    let _ = writeln!(
        out,
        "\n  {:<pw$} {:>8} {:<nw$} {:>10} {:>8}",
        "Thread of", "TID", "Name", "Samples", "% Total"
    );
    for (process, tid, name, n) in &threads {
        let _ = writeln!(
            out,
            "  {process:<pw$} {tid:>8} {name:<nw$} {n:>10} {:>7.2}%",
            percent(*n, o.total)
        );
    }
    for r in rows.iter().take(PROCESS_FUNCTION_TABLES) {
        let Some(p) = tasks.process(r.process) else {
            continue;
        };
        let buckets = processes::process_buckets(tasks, o, r.process);
        let functions: Vec<(String, u64)> =
            processes::function_counts(o, &buckets, symbols, Some(r.process))
                .iter()
                .take(top)
                .map(|f| (f.qualified(), f.samples))
                .collect();
        shares_table(
            out,
            &format!("Functions in {}", one_line(&p.label())),
            &functions,
            r.samples,
            "% Proc",
        );
    }
}

/// A table of names, samples and shares, the name column as wide as its longest entry.
fn table(out: &mut String, title: &str, rows: &[(String, u64)], total: u64) {
    shares_table(out, title, rows, total, "% Total");
}

/// [`table`] with shares of `total` under the heading `share`.
fn shares_table(out: &mut String, title: &str, rows: &[(String, u64)], total: u64, share: &str) {
    let w = rows
        .iter()
        .map(|(n, _)| n.chars().count())
        .chain([title.len(), 32])
        .max()
        .unwrap_or(32);
    let _ = writeln!(out, "\n  {title:<w$} {:>10} {:>8}", "Samples", share);
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
    let tasks = Tasks::new(p);
    for o in &p.objects {
        object(&mut out, o, &tasks, symbols, stored, top);
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

    /// Regression (issue 40, item 11): bidi overrides and line separators in the command line,
    /// a symbol name and a guest process's name reached report.txt and stdout raw.
    #[test]
    fn bidi_and_separators_in_guest_text_are_replaced_in_the_report() {
        use crate::sanitize::tests::{assert_no_bidi, BIDI_NAME};
        let mut p = crate::time_axis::testdata::profile();
        p.run.cmdline = BIDI_NAME.into();
        p.processes[1].name = BIDI_NAME.into();
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, BIDI_NAME)]));
        let t = render(&p, &symbols, 10);
        assert!(t.contains("a\u{fffd}evil"), "{t}");
        assert_no_bidi("report.txt", &t);
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
    fn processes_threads_and_each_process_functions() {
        let p = crate::processes::tests::tasks_profile();
        let symbols = crate::profile::tests::call_site_symbols();
        let t = render(&p, &symbols, 20);
        let lines = |from: &str, n: usize| -> Vec<String> {
            let at = t.lines().position(|l| l.trim_start().starts_with(from));
            let at = at.unwrap_or_else(|| panic!("no {from:?} in {t}"));
            t.lines()
                .skip(at)
                .take(n)
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect()
        };
        assert_eq!(
            lines("Process ", 6),
            [
                "Process PID Samples % Total User Kernel",
                "awk 57 70 70.00% 60 10",
                "seq 58 26 26.00% 21 5",
                "[cr3 0x5000] * - 4 4.00% 4 0",
                "* [cr3 0x..]: samples hvprof could not attribute to a named process (the guest \
                 kernel's",
                "structures were unknown or unreadable then), named by the address space (CR3) \
                 they ran in",
            ]
        );
        assert_eq!(
            lines("Thread of", 6),
            [
                "Thread of TID Name Samples % Total",
                "awk (pid 57) 57 awk 50 50.00%",
                "awk (pid 57) 60 worker 20 20.00%",
                "seq (pid 58) 58 seq 20 20.00%",
                "seq (pid 58) 61 6 6.00%",
                "[cr3 0x5000] - 4 4.00%",
            ]
        );
        assert_eq!(
            lines("Functions in awk", 4),
            [
                "Functions in awk (pid 57) Samples % Proc",
                "m!hot 40 57.14%",
                "m!caller 20 28.57%",
                "0xffffffff81000000 10 14.29%",
            ]
        );
        assert_eq!(
            lines("Functions in seq", 4),
            [
                "Functions in seq (pid 58) Samples % Proc",
                "m!hot 15 57.69%",
                "m+0x20 6 23.08%",
                "0xffffffff81000000 5 19.23%",
            ]
        );
        assert!(has(&t, "Functions in [cr3 0x5000] Samples % Proc"), "{t}");
        // Only the busiest processes get a function table; `top` limits the threads.
        let t = render(&p, &symbols, 2);
        assert_eq!(t.matches("Functions in").count(), 3, "{t}");
        assert!(has(&t, "awk (pid 57) 60 worker 20 20.00%"), "{t}");
        assert!(!has(&t, "seq (pid 58) 58 seq"), "{t}");
        assert!(!t.contains("[cr3 0x5000] *"), "{t}");
    }

    #[test]
    fn a_profile_without_processes_prints_no_process_table() {
        let p = sample_profile(0x1000);
        let t = render(&p, &Symbols::default(), 10);
        assert!(!t.contains("Process") && !t.contains("Thread"), "{t}");
        // An object without per-thread counts beside one with them: only the latter.
        let mut p = crate::processes::tests::tasks_profile();
        let mut other = p.objects[0].clone();
        other.id = 2;
        other.threads.clear();
        other.stacks.iter_mut().for_each(|s| s.thread = None);
        p.objects.push(other);
        let t = render(&p, &Symbols::default(), 10);
        assert_eq!(t.matches("Thread of").count(), 1, "{t}");
    }

    #[test]
    fn hottest_first_then_by_address() {
        let p = sample_profile(0x1000);
        let b = hottest(&p.objects[0], 2);
        assert_eq!(b.iter().map(|b| b.count).collect::<Vec<_>>(), vec![9, 5]);
    }
}
