//! The library's layers, checked: a module may use only modules on lower floors. The table is
//! the one drawn in docs/architecture.md; a new top-level module must be given a floor here.

use std::path::{Path, PathBuf};

/// Each top-level module of the library and its floor (0 is the bottom).
const FLOORS: &[(&str, u8)] = &[
    // Foundations: no imports from the crate.
    ("layout", 0),
    ("clock", 0),
    ("outcome", 0),
    ("signals", 0),
    // What a guest is made of.
    ("memory", 1),
    ("seccomp", 1),
    // Sample sources: the host's timers and perf events (what `config` chooses among).
    ("sampler", 1),
    ("boot", 2),
    ("config", 3),
    ("refguest", 3),
    // The machine.
    ("arch", 4),
    ("acpi", 5),
    ("firmware", 6),
    // Profiling.
    ("profiler", 7),
    // Running it.
    ("vcpu", 8),
    ("vm", 9),
    // Driving it.
    ("session", 10),
    // Handing a run to the report crate (a crate of its own, below everything here).
    ("report_input", 10),
    ("api", 11),
];

fn floor(module: &str) -> Option<u8> {
    FLOORS.iter().find(|(m, _)| *m == module).map(|(_, f)| *f)
}

/// The top-level module a source file belongs to (`vcpu/exit.rs` -> `vcpu`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

/// Every `crate::name` a line of code (not a comment) names.
fn crate_uses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let name: String = rest[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
            rest = &rest[at + 7..];
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_uses_a_module_on_its_floor_or_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let module = module_of(&src, file).unwrap();
        // The crate root sits above every floor.
        if matches!(module.as_str(), "lib" | "layering") {
            continue;
        }
        let Some(own) = floor(&module) else {
            wrong.push(format!("{module}: not in the layering table"));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for used in crate_uses(&text) {
            if used == module {
                continue;
            }
            match floor(&used) {
                Some(f) if f < own => {}
                _ => wrong.push(format!("{}: uses crate::{used}", file.display())),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_checker_sees_uses_and_skips_comments() {
    let text = "use crate::vm::Vm; // crate::api\n/// [x](crate::bench)\nlet a = crate::vcpu::f();";
    assert_eq!(crate_uses(text), ["vm", "vcpu"]);
}

/// A unit-test module's file (`x/tests.rs`, `x/ring_tests.rs`): not part of the layering.
fn is_test_file(f: &Path) -> bool {
    let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem == "tests" || stem.ends_with("_tests")
}

/// The modules of folder `dir` below the crate root (its `x.rs` files and `x/` folders, its
/// `mod.rs` aside), each with the files that make it up, tests left out.
fn siblings(dir: &Path) -> Vec<(String, Vec<PathBuf>)> {
    let mut out: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        if stem == "mod" || is_test_file(&path) {
            continue;
        }
        let files = if path.is_dir() {
            let mut f = Vec::new();
            rust_files(&path, &mut f);
            f
        } else if path.extension().is_some_and(|e| e == "rs") {
            vec![path.clone()]
        } else {
            continue;
        };
        match out.iter_mut().find(|(n, _)| *n == stem) {
            Some((_, f)) => f.extend(files),
            None => out.push((stem, files)),
        }
    }
    out
}

/// The names a piece of code reaches through `prefix` (`super::x`, `super::{x, y::z}`).
fn names_after(code: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(prefix).map(|i| from + i) {
        from = at + prefix.len();
        // `super::super::x` is not `super::x`: the match must not continue a path.
        if code[..at].ends_with("::") {
            continue;
        }
        let rest = &code[from..];
        if rest.starts_with("super::") {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            out.extend(group[..end].split(',').map(ident));
        } else {
            out.push(ident(rest));
        }
    }
    out.retain(|n| !n.is_empty() && n != "super" && n != "self");
    out
}

/// Within every folder, which sibling modules each sibling uses (code before its
/// `#[cfg(test)]`, comments aside), as `crate::folder::x` or through the right number of
/// `super::`.
fn sibling_graph(src: &Path, dir: &Path) -> Vec<(String, String)> {
    let sibs = siblings(dir);
    let rel = dir.strip_prefix(src).unwrap();
    let crate_prefix = format!(
        "crate::{}::",
        rel.components()
            .map(|c| c.as_os_str().to_str().unwrap())
            .collect::<Vec<_>>()
            .join("::")
    );
    let mut edges = Vec::new();
    for (own, files) in &sibs {
        for file in files.iter().filter(|f| !is_test_file(f)) {
            let text = std::fs::read_to_string(file).unwrap();
            let text = text.split("#[cfg(test)]").next().unwrap_or("");
            let code: String = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let below = file.strip_prefix(dir).unwrap().components().count();
            let depth = below - usize::from(file.ends_with("mod.rs"));
            let supers = "super::".repeat(depth);
            for name in names_after(&code, &crate_prefix)
                .into_iter()
                .chain(names_after(&code, &supers))
            {
                if name != *own && sibs.iter().any(|(n, _)| *n == name) {
                    edges.push((own.clone(), name));
                }
            }
        }
    }
    edges.sort();
    edges.dedup();
    edges
}

/// A circle in `edges`, if any, as the modules along it.
fn circle(edges: &[(String, String)]) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &[(String, String)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut c = path[at..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.iter().any(|d| d == n) {
            return None;
        }
        path.push(n.to_string());
        for (_, to) in edges.iter().filter(|(from, _)| from == n) {
            if let Some(c) = visit(to, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.push(n.to_string());
        None
    }
    let mut done = Vec::new();
    edges
        .iter()
        .find_map(|(from, _)| visit(from, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_two_modules_of_a_folder_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![];
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
                dirs.push(p);
            }
        }
    }
    let mut found = Vec::new();
    for dir in &dirs {
        if let Some(c) = circle(&sibling_graph(&src, dir)) {
            found.push(format!("{}: {}", dir.display(), c.join(" -> ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_circle_checker_reads_paths_and_groups() {
    let code = "use super::{qcow2, disk::X};\nlet a = super::super::up::f();\nsuper::queue::Q";
    assert_eq!(names_after(code, "super::"), ["qcow2", "disk", "queue"]);
    let e = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        circle(&[e("a", "b"), e("b", "c"), e("c", "a")]),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(circle(&[e("a", "b"), e("b", "c"), e("a", "c")]), None);
}
