//! flamegraph.svg through inferno.
//!
//! An object with call stacks folds them as they are, outermost frame first, each frame
//! `module!function` (the call site's function for return addresses), under the object's
//! frame; a stack whose walk ended early sits under `[truncated]`, samples whose stack was
//! not kept under `[stack not kept]`:
//!
//! ```text
//! object 1 (all processes);refguest!main;refguest!stacks_round;refguest!stacks_a;refguest!stacks_leaf 211
//! ```
//!
//! An object without stacks counts program counters only, so each nonzero bucket becomes one
//! folded stack four frames deep:
//!
//! ```text
//! object 1 (all processes);refguest;shares_f4;shares_f4+0x10 1234
//! ```
//!
//! With the guest's processes (an object with per-thread counts, profile.json format 4), a
//! process frame `NAME (pid N)` sits between the object frame and the rest, as perf's comm
//! frame does; the differential graph of `hvprof compare` names it `NAME` alone, since pids
//! differ between runs:
//!
//! ```text
//! object 1 (all processes);awk (pid 57);m!caller;m!hot 30
//! object 1 (all processes);awk (pid 57);m;hot;hot 40
//! ```
//!
//! object (id and scope) → module → function → bucket (`function+offset` of its start). The
//! object frame keeps overlapping objects (a global and a per-process profile of the same
//! code) side by side rather than adding their counts together; the widths under it are the
//! module and function shares of report.txt, and the top row shows which buckets inside a
//! function are hot. Addresses outside every module sit under `[unknown]`; without a symbol
//! the function frame is `module+0xrva` of the bucket.

use std::collections::BTreeMap;
use std::io::Write;

use super::processes::Tasks;
use super::profile::{Profile, ProfileObject};
use super::symbols::Symbols;
use super::ReportError;

/// The flame-graph frame of `pc` in the process with key `process` (when known):
/// `module!function`, `module+0xrva` without a symbol, the bare address outside every module.
/// A return address (`ret`) is named by the call before it.
pub fn frame_name(symbols: &Symbols, process: Option<u32>, pc: u64, ret: bool) -> String {
    let lookup = if ret { pc.wrapping_sub(1) } else { pc };
    match symbols.resolve_in(process, lookup) {
        Some(hit) => match hit.symbol {
            Some(s) => format!("{}!{}", hit.module.name, s.name),
            None => format!("{}+{:#x}", hit.module.name, hit.offset),
        },
        None => format!("{pc:#x}"),
    }
}

/// How a process frame names its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessFrame {
    /// `NAME (pid N)`: one run's graph.
    WithPid,
    /// `NAME`: a differential graph's, whose two runs have other pids.
    NameOnly,
}

/// The folded stacks of `profile`: one line per stack of objects with stacks, one per
/// nonzero bucket of the others; with the guest's processes, under a process frame with
/// pids.
pub fn folded(profile: &Profile, symbols: &Symbols) -> Vec<String> {
    folded_with(profile, symbols, ProcessFrame::WithPid)
}

/// The module, function and bucket frames of a bucket starting at `start`, in the process
/// with key `process` when known.
fn bucket_frames(symbols: &Symbols, process: Option<u32>, start: u64) -> [String; 3] {
    let (module, function, bucket) = match symbols.resolve_in(process, start) {
        Some(hit) => (hit.module.name.clone(), hit.function(), hit.describe()),
        None => (
            "[unknown]".to_string(),
            format!("{start:#x}"),
            format!("{start:#x}"),
        ),
    };
    // `module!function+0x10` -> `function+0x10`: the module is the frame below.
    let bucket = bucket
        .split_once('!')
        .map_or(bucket.clone(), |(_, f)| f.to_string());
    [module, function, bucket]
}

/// [`folded`], with process frames named as `names` says.
pub fn folded_with(profile: &Profile, symbols: &Symbols, names: ProcessFrame) -> Vec<String> {
    let clean = |s: &str| crate::sanitize::flame_frame(s);
    let tasks = Tasks::new(profile);
    // The process frame of a thread, when the profile names it.
    let process = |thread: Option<u32>| {
        let p = tasks.process_of(thread?)?;
        Some(clean(&match names {
            ProcessFrame::WithPid => p.label(),
            ProcessFrame::NameOnly => p.name.clone(),
        }))
    };
    let mut lines = Vec::new();
    for o in &profile.objects {
        let root = clean(&format!("object {} ({})", o.id, o.scope()));
        if !o.stacks.is_empty() {
            for stack in &o.stacks {
                let mut frames = vec![root.clone()];
                frames.extend(process(stack.thread));
                let key = stack
                    .thread
                    .and_then(|t| tasks.process_of(t))
                    .map(|p| p.key);
                if stack.truncated {
                    frames.push("[truncated]".to_string());
                }
                let n = stack.pcs.len();
                frames.extend(
                    stack
                        .pcs
                        .iter()
                        .rev()
                        .enumerate()
                        .map(|(i, pc)| clean(&frame_name(symbols, key, pc.0, i + 1 < n))),
                );
                lines.push(format!("{} {}", frames.join(";"), stack.count));
            }
            if o.stacks_dropped > 0 {
                lines.push(format!("{root};[stack not kept] {}", o.stacks_dropped));
            }
            continue;
        }
        if !o.threads.is_empty() {
            lines.extend(thread_buckets(o, &root, symbols, &tasks, |t| {
                process(Some(t))
            }));
            continue;
        }
        for b in o.nonzero() {
            let [module, function, bucket] = bucket_frames(symbols, None, b.start);
            lines.push(format!(
                "{root};{};{};{} {}",
                clean(&module),
                clean(&function),
                clean(&bucket),
                b.count
            ));
        }
    }
    lines
}

/// The buckets of an object with per-thread counts, each under its thread's process frame
/// (`process` of the thread's key) and named as that process sees its addresses, the same
/// stacks of several threads added up; in frame order.
fn thread_buckets(
    o: &ProfileObject,
    root: &str,
    symbols: &Symbols,
    tasks: &Tasks,
    process: impl Fn(u32) -> Option<String>,
) -> Vec<String> {
    let clean = |s: &str| crate::sanitize::flame_frame(s);
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    for t in &o.threads {
        let mut frames = vec![root.to_string()];
        frames.extend(process(t.thread));
        let key = tasks.process_of(t.thread).map(|p| p.key);
        for &(index, count) in &t.counts {
            let (start, _) = o.bucket_range(index);
            let mut f = frames.clone();
            f.extend(bucket_frames(symbols, key, start).iter().map(|x| clean(x)));
            // A checked profile's per-thread counts add up to the object's total.
            *stacks.entry(f.join(";")).or_default() += count;
        }
    }
    stacks
        .into_iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect()
}

/// Writes `profile` as a flame graph SVG. A profile without samples gives inferno's
/// "no valid input" picture.
pub fn write(profile: &Profile, symbols: &Symbols, w: impl Write) -> Result<(), ReportError> {
    let lines = folded(profile, symbols);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = crate::sanitize::flame_frame(&format!(
        "hvprof: {} {}",
        profile.run.kernel, profile.run.cmdline
    ));
    opts.count_name = "samples".to_string();
    opts.name_type = "Bucket:".to_string();
    match inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w) {
        Ok(()) => Ok(()),
        Err(e) if lines.is_empty() && e.kind() == std::io::ErrorKind::InvalidData => Ok(()),
        Err(e) => Err(ReportError::Io(e)),
    }
}

/// Writes the differential flame graph of two profiles (inferno's, as Brendan Gregg's
/// difffolded.pl): the new profile's stacks, each frame colored by how its samples changed,
/// red where they grew and blue where they shrank. The base's counts are scaled to the new
/// total first, so a longer or busier run does not turn everything red.
pub fn write_diff(
    base: (&Profile, &Symbols),
    new: (&Profile, &Symbols),
    w: impl Write,
) -> Result<(), ReportError> {
    // Pids differ between runs: the process frames are matched by name.
    let before = folded_with(base.0, base.1, ProcessFrame::NameOnly).join("\n");
    let after = folded_with(new.0, new.1, ProcessFrame::NameOnly).join("\n");
    let mut diff = Vec::new();
    let opts = inferno::differential::Options {
        normalize: true,
        strip_hex: false,
    };
    inferno::differential::from_readers(opts, before.as_bytes(), after.as_bytes(), &mut diff)
        .map_err(ReportError::Io)?;
    let diff = String::from_utf8_lossy(&diff);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = crate::sanitize::flame_frame(&format!(
        "hvprof compare: {} {} (red: more samples than the base run, blue: fewer)",
        new.0.run.kernel, new.0.run.cmdline
    ));
    opts.count_name = "samples".to_string();
    let lines: Vec<&str> = diff.lines().collect();
    match inferno::flamegraph::from_lines(&mut opts, lines.iter().copied(), w) {
        Ok(()) => Ok(()),
        Err(e) if lines.is_empty() && e.kind() == std::io::ErrorKind::InvalidData => Ok(()),
        Err(e) => Err(ReportError::Io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::symbols::tests::module;

    #[test]
    fn stacks_are_object_module_function_bucket() {
        let p = sample_profile(0x1000);
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        let f = folded(&p, &symbols);
        assert_eq!(
            f,
            vec![
                "object 1 (process 0x12345000);m;m+0x20;m+0x20 5",
                "object 1 (process 0x12345000);m;hot;hot 9",
                "object 1 (process 0x12345000);m;hot;hot+0x20 1",
            ]
        );
        let none = folded(&p, &Symbols::default());
        assert_eq!(
            none[0],
            "object 1 (process 0x12345000);[unknown];0x1020;0x1020 5"
        );
    }

    #[test]
    fn stacks_fold_outermost_first_with_callers_named_by_their_call() {
        use crate::profile::StackCount;
        let mut p = sample_profile(0x1000);
        p.objects[0].stacks = vec![
            StackCount::new([0x1074, 0x1050, 0x9000], false, 7),
            StackCount::new([0x1074], true, 2),
        ];
        p.objects[0].stacks_dropped = 1;
        let symbols = crate::profile::tests::call_site_symbols();
        assert_eq!(
            folded(&p, &symbols),
            [
                "object 1 (process 0x12345000);0x9000;m!caller;m!hot 7",
                "object 1 (process 0x12345000);[truncated];m!hot 2",
                "object 1 (process 0x12345000);[stack not kept] 1",
            ]
        );
    }

    #[test]
    fn a_differential_graph_colors_growth_red_and_shrinking_blue() {
        let base = sample_profile(0x1000);
        let mut new = sample_profile(0x1000);
        // Bucket 2 (0x1020) shrinks from 5 to 1, bucket 7 (hot) grows from 9 to 13.
        new.objects[0].counts = vec![(2, 1), (7, 13), (9, 1)];
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        let mut svg = Vec::new();
        write_diff((&base, &symbols), (&new, &symbols), &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        // (title, [r, g, b]) of every frame.
        let frames: Vec<(&str, Vec<u32>)> = svg
            .split("<g><title>")
            .skip(1)
            .map(|g| {
                let title = g.split("</title>").next().unwrap();
                let rgb = g
                    .split("fill=\"rgb(")
                    .nth(1)
                    .unwrap()
                    .split(')')
                    .next()
                    .unwrap();
                (
                    title,
                    rgb.split(',').map(|c| c.trim().parse().unwrap()).collect(),
                )
            })
            .collect();
        let red = |f: &(&str, Vec<u32>)| f.1[0] > f.1[2];
        let blue = |f: &(&str, Vec<u32>)| f.1[2] > f.1[0];
        assert!(
            frames.iter().any(|f| f.0.starts_with("hot (") && red(f)),
            "{frames:?}"
        );
        assert!(
            frames
                .iter()
                .any(|f| f.0.starts_with("m+0x20 (") && blue(f)),
            "{frames:?}"
        );
        assert!(
            !frames.iter().any(|f| f.0.starts_with("hot") && blue(f)),
            "{frames:?}"
        );
    }

    #[test]
    fn each_stack_sits_under_its_process() {
        let mut p = crate::processes::tests::tasks_profile();
        let symbols = crate::profile::tests::call_site_symbols();
        assert_eq!(
            folded(&p, &symbols),
            [
                "object 1 (all processes);awk (pid 57);m!caller;m!hot 30",
                "object 1 (all processes);awk (pid 57);m!caller 20",
                "object 1 (all processes);seq (pid 58);m!caller;m!hot 10",
                "object 1 (all processes);[stack not kept] 5",
            ]
        );
        // Without stacks, from the per-thread counts: awk's two threads' buckets side by side.
        p.objects[0].stacks.clear();
        p.objects[0].stacks_dropped = 0;
        assert_eq!(
            folded(&p, &symbols),
            [
                "object 1 (all processes);[cr3 0x5000];m;caller;caller 4",
                "object 1 (all processes);awk (pid 57);[unknown];0xffffffff81000000;0xffffffff81000000 10",
                "object 1 (all processes);awk (pid 57);m;caller;caller 20",
                "object 1 (all processes);awk (pid 57);m;hot;hot 40",
                "object 1 (all processes);seq (pid 58);[unknown];0xffffffff81000000;0xffffffff81000000 5",
                "object 1 (all processes);seq (pid 58);m;hot;hot 15",
                "object 1 (all processes);seq (pid 58);m;m+0x20;m+0x20 6",
            ]
        );
        let by_name = folded_with(&p, &symbols, ProcessFrame::NameOnly);
        assert_eq!(by_name[3], "object 1 (all processes);awk;m;hot;hot 40");
    }

    /// A process's frame in the differential graph is its name: the same program under
    /// another pid in the new run is compared with the base's, not shown as new.
    #[test]
    fn a_differential_graph_matches_processes_by_name() {
        let base = crate::processes::tests::tasks_profile();
        let mut new = base.clone();
        new.processes[0].pid = Some(1057);
        let symbols = crate::profile::tests::call_site_symbols();
        let mut svg = Vec::new();
        write_diff((&base, &symbols), (&new, &symbols), &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("<title>awk ("), "{svg}");
        assert!(!svg.contains("pid"), "{svg}");
    }

    #[test]
    fn the_svg_names_the_functions() {
        let p = sample_profile(0x1000);
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        let mut svg = Vec::new();
        write(&p, &symbols, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("hot"));
        let mut empty = p.clone();
        empty.objects.clear();
        let mut svg = Vec::new();
        write(&empty, &symbols, &mut svg).unwrap();
        assert!(String::from_utf8(svg).unwrap().contains("<svg"));
    }

    /// Regression: control characters in the command line and in symbol names reached
    /// flamegraph.svg, which XML parsers then refused.
    #[test]
    fn guest_text_cannot_break_the_svg() {
        let mut p = sample_profile(0x1000);
        p.run.cmdline = "a\0\x1b[31m</text></g>&\u{fffe}".into();
        let hostile = "hot\x01;</g>&\n\u{ffff}";
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, hostile)]));
        for diff in [false, true] {
            let mut svg = Vec::new();
            if diff {
                write_diff((&p, &symbols), (&p, &symbols), &mut svg).unwrap();
            } else {
                write(&p, &symbols, &mut svg).unwrap();
            }
            let svg = String::from_utf8(svg).unwrap();
            assert!(
                !svg.chars()
                    .any(|c| (c.is_control() && !"\n\t\r".contains(c))
                        || c == '\u{fffe}'
                        || c == '\u{ffff}'),
                "{svg}"
            );
            assert!(!svg.contains("</g>&"), "markup escaped");
            assert!(
                svg.contains("hot\u{fffd}:&lt;/g&gt;&amp; \u{fffd}"),
                "{svg}"
            );
        }
    }

    /// Regression (issue 40, item 11): bidi overrides and line separators reached the flame
    /// graph's frames and title raw.
    #[test]
    fn bidi_and_separators_are_replaced_in_the_svg() {
        use crate::sanitize::tests::{assert_no_bidi, BIDI_NAME};
        let mut p = sample_profile(0x1000);
        p.run.cmdline = BIDI_NAME.into();
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, BIDI_NAME)]));
        let mut svg = Vec::new();
        write(&p, &symbols, &mut svg).unwrap();
        assert_no_bidi("flamegraph.svg", &String::from_utf8(svg).unwrap());
    }
}
