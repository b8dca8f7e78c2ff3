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
    ("demo", 3),
    // The machine.
    ("arch", 4),
    ("devices", 4),
    ("acpi", 5),
    ("firmware", 6),
    // Profiling.
    ("profiler", 7),
    // Running it.
    ("vcpu", 8),
    ("vm", 9),
    // Driving it.
    ("session", 10),
    ("bench", 10),
    // Handing a run to the analysis crate (a crate of its own, below everything here).
    ("export", 10),
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
        // The binary's own files and the crate root sit above every floor.
        if matches!(module.as_str(), "cli" | "main" | "lib" | "layering") {
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
