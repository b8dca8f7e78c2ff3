//! The repository's structure, checked (issue 34): no import runs up a layer or around a
//! circle in any source root ([`roots`]), and the crates depend on each other only as
//! docs/architecture.md draws them ([`deps`]). Nothing boots here; it runs in seconds:
//! `cargo nextest run --test guests structure`.

mod deps;
mod graph;
mod roots;

use std::path::{Path, PathBuf};

/// The repository's top folder: the nearest folder above the package that declares this test
/// binary (vmm/hvprof today) that holds tests/main.rs, wherever that package moves.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("tests/main.rs").is_file() && d.join("Cargo.toml").is_file())
        .expect("tests/main.rs above the package's folder")
        .to_path_buf()
}

#[test]
fn no_import_runs_up_a_layer_or_around_a_circle() {
    let mut report = Vec::new();
    for root in roots::ROOTS {
        let (new, gone) = root.check(&repo());
        report.extend(new.into_iter().map(|w| format!("  {w}")));
        report.extend(
            gone.into_iter()
                .map(|k| format!("  mended, take it off {}'s known list: {k}", root.dir)),
        );
    }
    assert!(
        report.is_empty(),
        "layers broken (a module may use only modules on lower floors: tests/structure/roots.rs):\n{}",
        report.join("\n")
    );
}
