//! The checker on made-up sources: each rule must fail on the code that breaks it, so that the
//! checks over the real roots cannot pass by seeing nothing.

use std::path::Path;

use super::*;

/// A made-up root: (path below the root, contents).
fn files(sources: &[(&str, &str)]) -> Vec<File> {
    without_test_modules(
        sources
            .iter()
            .map(|(p, t)| parse(Path::new(p), t))
            .collect(),
    )
}

const ROOT: Root = Root {
    dir: "made-up",
    floors: &[("cpu", 0), ("serial", 1), ("sched", 2)],
    known: &[],
};

#[test]
fn a_use_down_passes_and_a_use_up_or_sideways_fails() {
    let ok = files(&[
        ("main.rs", "mod cpu; mod serial; mod sched; use crate::sched::run;"),
        ("cpu.rs", "pub fn rdtsc() -> u64 { 0 }"),
        ("serial.rs", "use crate::cpu::rdtsc;\n#[macro_export] macro_rules! println { () => { $crate::serial::p() } }"),
        ("sched.rs", "use crate::{cpu, serial::{self, p as q}};\nfn f() { crate::println!(); }"),
    ]);
    assert_eq!(ROOT.upward_uses(&ok), Vec::<String>::new());

    let up = files(&[
        ("cpu.rs", "use crate::sched::Table;"),
        (
            "serial.rs",
            "fn f() { crate::cpu::g(); let x = crate::boot_cpu(); }",
        ),
        ("sched.rs", "use crate::{cpu, serial};"),
        ("time.rs", "use crate::cpu;"),
    ]);
    assert_eq!(
        ROOT.upward_uses(&up),
        [
            "cpu.rs: cpu (floor 0) uses crate::sched::Table (floor 2)",
            "serial.rs: serial uses crate::boot_cpu, an item of the crate root (or a module with no floor)",
            "time.rs: module time has no floor in the table",
        ]
    );
    // A macro or a re-exported item of a higher module, through its name at the crate root;
    // what the root takes from another crate names no module.
    let through_root = files(&[
        (
            "main.rs",
            "pub use serial::{Port, p as q};\nuse core::fmt::Write;",
        ),
        (
            "serial.rs",
            "#[macro_export]\nmacro_rules! println { () => {} }",
        ),
        (
            "cpu.rs",
            "fn f() { crate::println!(\"x\"); let p: crate::Port; crate::q(); crate::Write::f(); }",
        ),
        (
            "sched.rs",
            "fn f() { crate::println!(\"x\"); let p: crate::Port; }",
        ),
    ]);
    assert_eq!(
        ROOT.upward_uses(&through_root),
        [
            "cpu.rs: cpu (floor 0) uses crate::Port (floor 1)",
            "cpu.rs: cpu (floor 0) uses crate::println (floor 1)",
            "cpu.rs: cpu (floor 0) uses crate::q (floor 1)",
        ]
    );
}

#[test]
fn super_paths_reach_siblings_and_climb_to_the_root() {
    let up = files(&[("cpu/apic.rs", "use super::super::sched;\nuse super::msr;")]);
    assert_eq!(
        up[0].uses,
        [vec!["sched".to_string()], vec!["cpu".into(), "msr".into()]]
    );
    assert_eq!(
        ROOT.upward_uses(&up),
        ["cpu/apic.rs: cpu (floor 0) uses crate::sched (floor 2)"]
    );
    // `self::` in a folder's mod.rs names its children; `super::super` is one path, not two.
    let f = files(&[
        ("a/mod.rs", "use self::b::X; let y = super::c::d;"),
        ("a/b/c.rs", "super::super::e::f()"),
    ]);
    assert_eq!(
        f[0].uses,
        [
            vec!["a".to_string(), "b".into(), "X".into()],
            vec!["c".into(), "d".into()]
        ]
    );
    assert_eq!(f[1].uses, [vec!["a".to_string(), "e".into(), "f".into()]]);
    // Inside an inline module, `super` is the file's own module.
    let f = files(&[(
        "hex.rs",
        "pub mod big { use super::Big; mod deep { use super::super::Hex; } }\nuse super::up;",
    )]);
    assert_eq!(
        f[0].uses,
        [
            vec!["hex".to_string(), "Big".into()],
            vec!["hex".into(), "Hex".into()],
            vec!["up".into()]
        ]
    );
}

#[test]
fn comments_and_strings_name_nothing() {
    let f = files(&[(
        "cpu.rs",
        "// crate::sched\n/// [x](crate::sched::Table)\n/* crate::sched /* nested */ crate::serial */\n\
         let s = \"crate::sched\"; let r = r#\"crate::\"sched\"#; let c = '\"'; let l: &'static str = \"\";\n\
         fn g<'a>(x: &'a u8) {}\nlet url = \"http://x\"; crate::serial::p();",
    )]);
    assert_eq!(f[0].uses, [vec!["serial".to_string(), "p".into()]]);
}

#[test]
fn test_modules_are_left_out_and_the_rest_is_not() {
    let f = files(&[
        ("sched.rs", "use crate::cpu;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline { use crate::serial; }\nuse crate::serial::p;"),
        ("sched/tests.rs", "use crate::main_only;"),
        ("cpu.rs", "#[cfg(test)]\n#[allow(dead_code)]\npub(crate) fn helper() { crate::sched::x() }\nfn real() {}"),
    ]);
    let names: Vec<&str> = f.iter().map(|f| f.path.to_str().unwrap()).collect();
    assert_eq!(names, ["sched.rs", "cpu.rs"]);
    assert_eq!(
        f[0].uses,
        [vec!["cpu".to_string()], vec!["serial".into(), "p".into()]]
    );
    assert!(f[1].uses.is_empty());
    assert_eq!(ROOT.upward_uses(&f), Vec::<String>::new());
}

#[test]
fn a_circle_of_three_in_a_folder_is_found() {
    let f = files(&[
        ("user/mod.rs", "mod a; mod b; mod c; use self::a::X;"),
        ("user/a.rs", "use super::b::Y;"),
        ("user/b.rs", "use crate::user::{c, a::X as Z};"),
        ("user/c/mod.rs", "use super::a;\n#[cfg(test)]\nmod tests;"),
        ("user/c/tests.rs", "use super::super::b;"),
    ]);
    assert_eq!(
        Root::sibling_edges(&f, &["user".to_string()]),
        [
            ("a".into(), "b".into()),
            ("b".into(), "a".into()),
            ("b".into(), "c".into()),
            ("c".into(), "a".into())
        ]
    );
    assert_eq!(Root::circles(&f), ["user: a -> b -> a"]);
    // Take a -> b away: b -> c -> a is a line, not a circle.
    let f = files(&[
        ("user/a.rs", ""),
        ("user/b.rs", "use crate::user::{c, a::X};"),
        ("user/c.rs", "use super::a;"),
    ]);
    assert_eq!(Root::circles(&f), Vec::<String>::new());
    let e = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        circle(&[e("a", "b"), e("b", "c"), e("c", "a")]),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(circle(&[e("a", "b"), e("b", "c"), e("a", "c")]), None);
}
