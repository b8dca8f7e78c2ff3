//! Callers and callees, from an object's call stacks: for one function, the samples whose
//! stack holds it, which function called it and which it called, each weighted by samples.
//! report.txt prints them for the hottest functions, as `perf report` does and Kernrate, with
//! flat counts only, cannot.

use super::flame::frame_name;
use super::processes::Tasks;
use super::profile::ProfileObject;
use super::symbols::Symbols;

/// What calls into the outermost frame of a stack that ended early.
pub const TRUNCATED: &str = "[truncated]";
/// What calls into the outermost frame of a complete stack.
pub const OUTERMOST: &str = "[outermost frame]";

/// One stack as frame names, innermost first, with its samples.
pub struct NamedStack {
    /// `module!function` per frame (see [`frame_name`]).
    pub frames: Vec<String>,
    /// The walk ended early.
    pub truncated: bool,
    /// Samples.
    pub count: u64,
}

/// The object's stacks with their frames named by `symbols`, each as the process it ran in
/// (from `tasks`) sees its addresses.
pub fn named(o: &ProfileObject, tasks: &Tasks, symbols: &Symbols) -> Vec<NamedStack> {
    o.stacks
        .iter()
        .map(|s| {
            let process = s.thread.and_then(|t| tasks.process_of(t)).map(|p| p.key);
            (s, process)
        })
        .map(|(s, process)| NamedStack {
            frames: s
                .pcs
                .iter()
                .enumerate()
                .map(|(i, pc)| frame_name(symbols, process, pc.0, i > 0))
                .collect(),
            truncated: s.truncated,
            count: s.count,
        })
        .collect()
}

/// One function's place in the call graph.
#[derive(Debug, PartialEq, Eq)]
pub struct Edges {
    /// Samples whose stack holds the function (recursion counted once).
    pub inclusive: u64,
    /// Samples taken in the function itself.
    pub own: u64,
    /// Its callers and their samples, most first.
    pub callers: Vec<(String, u64)>,
    /// The functions it called and their samples, most first.
    pub callees: Vec<(String, u64)>,
}

fn ranked(mut v: Vec<(String, u64)>) -> Vec<(String, u64)> {
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

fn add(v: &mut Vec<(String, u64)>, name: &str, n: u64) {
    match v.iter_mut().find(|(k, _)| k == name) {
        Some((_, c)) => *c += n,
        None => v.push((name.to_string(), n)),
    }
}

/// The callers and callees of `function` over `stacks`. In a recursive stack the innermost
/// occurrence counts.
pub fn edges(stacks: &[NamedStack], function: &str) -> Edges {
    let (mut inclusive, mut own) = (0, 0);
    let (mut callers, mut callees) = (Vec::new(), Vec::new());
    for s in stacks {
        let Some(i) = s.frames.iter().position(|f| f == function) else {
            continue;
        };
        inclusive += s.count;
        if i == 0 {
            own += s.count;
        } else {
            add(&mut callees, &s.frames[i - 1], s.count);
        }
        let caller = match s.frames.get(i + 1) {
            Some(f) => f.as_str(),
            None if s.truncated => TRUNCATED,
            None => OUTERMOST,
        };
        add(&mut callers, caller, s.count);
    }
    Edges {
        inclusive,
        own,
        callers: ranked(callers),
        callees: ranked(callees),
    }
}

/// The `n` functions to show: those with the most samples taken in them first, then those
/// on the most stacks (the callers that lead to them).
pub fn hottest(stacks: &[NamedStack], n: usize) -> Vec<(String, u64)> {
    // (function, own, inclusive), in one pass over the stacks.
    let mut totals: std::collections::HashMap<&str, (u64, u64)> = Default::default();
    for s in stacks {
        for (i, f) in s.frames.iter().enumerate() {
            // Recursion counts once: only a function's innermost frame.
            if s.frames[..i].contains(f) {
                continue;
            }
            let t = totals.entry(f.as_str()).or_default();
            t.1 += s.count;
            if i == 0 {
                t.0 += s.count;
            }
        }
    }
    let mut v: Vec<(&str, u64, u64)> = totals.into_iter().map(|(f, (o, i))| (f, o, i)).collect();
    v.sort_by(|a, b| (b.1, b.2).cmp(&(a.1, a.2)).then_with(|| a.0.cmp(b.0)));
    v.into_iter()
        .take(n)
        .map(|(f, own, _)| (f.to_string(), own))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(frames: &[&str], truncated: bool, count: u64) -> NamedStack {
        NamedStack {
            frames: frames.iter().map(|f| f.to_string()).collect(),
            truncated,
            count,
        }
    }

    #[test]
    fn callers_and_callees_weighted_by_samples() {
        let stacks = [
            s(&["leaf", "a", "round", "main"], false, 2),
            s(&["leaf", "b", "round", "main"], false, 3),
            s(&["leaf", "mid", "c", "round", "main"], false, 5),
            s(&["round", "main"], false, 1),
            s(&["leaf"], true, 4),
        ];
        let leaf = edges(&stacks, "leaf");
        assert_eq!((leaf.inclusive, leaf.own), (14, 14));
        assert_eq!(
            leaf.callers,
            [
                ("mid".into(), 5),
                (TRUNCATED.into(), 4),
                ("b".into(), 3),
                ("a".into(), 2)
            ]
        );
        assert!(leaf.callees.is_empty());
        let round = edges(&stacks, "round");
        assert_eq!((round.inclusive, round.own), (11, 1));
        assert_eq!(round.callers, [("main".into(), 11)]);
        assert_eq!(
            round.callees,
            [("c".into(), 5), ("b".into(), 3), ("a".into(), 2)]
        );
        assert_eq!(edges(&stacks, "main").callers, [(OUTERMOST.into(), 11)]);
        assert_eq!(
            hottest(&stacks, 3),
            [("leaf".into(), 14), ("round".into(), 1), ("main".into(), 0)]
        );
    }

    #[test]
    fn recursion_counts_once() {
        let stacks = [s(&["f", "f", "f", "main"], false, 3)];
        let f = edges(&stacks, "f");
        assert_eq!((f.inclusive, f.own), (3, 3));
        assert_eq!(f.callers, [("f".into(), 3)]);
    }
}
