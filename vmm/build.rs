//! Builds the reference guest kernel (`images/refguest`) so that the vmm
//! library can embed it with `include_bytes!(env!("HVPROF_REFGUEST_ELF"))`.
//!
//! The guest is a standalone cargo project with kernel code-generation flags
//! (its own `.cargo/config.toml` and linker script), so it is built by a
//! nested `cargo build --release` run in its directory, with its own target
//! directory under OUT_DIR and an environment scrubbed of everything the outer
//! cargo (or clippy, or a wrapper) set for this crate's compilation.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variables that must not leak into the nested build.
const SCRUB: &[&str] = &[
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_LINKER",
    "MAKEFLAGS",
    "MFLAGS",
    "OUT_DIR",
    "TARGET",
    "HOST",
    "PROFILE",
    "OPT_LEVEL",
    "DEBUG",
    "NUM_JOBS",
    "CLIPPY_ARGS",
    "CLIPPY_CONF_DIR",
];

/// `CARGO_*` variables the nested cargo still needs.
const KEEP_CARGO: &[&str] = &["CARGO_HOME"];

fn should_scrub(name: &str) -> bool {
    SCRUB.contains(&name) || (name.starts_with("CARGO_") && !KEEP_CARGO.contains(&name))
}

/// Reruns this script (and so the nested build) when the guest or one of its path
/// dependencies changes: `guest-agent` and, through it, `profile-core`.
fn rerun_if_changed(guest: &Path, path_deps: &[PathBuf]) {
    for entry in [
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "link.ld",
        ".cargo/config.toml",
        "src",
    ] {
        println!("cargo:rerun-if-changed={}", guest.join(entry).display());
    }
    for dep in path_deps {
        for entry in ["Cargo.toml", "src"] {
            println!("cargo:rerun-if-changed={}", dep.join(entry).display());
        }
    }
}

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let root = manifest_dir.join("..");
    let guest = root
        .join("images")
        .join("refguest")
        .canonicalize()
        .expect("images/refguest exists next to vmm/");
    // The guest's path dependencies (images/refguest/Cargo.toml: guest-agent, which depends on
    // profile-core).
    let path_deps: Vec<PathBuf> = ["guest-agent", "profile-core"]
        .iter()
        .map(|dir| {
            root.join(dir)
                .canonicalize()
                .unwrap_or_else(|e| panic!("{dir} exists next to vmm/: {e}"))
        })
        .collect();
    rerun_if_changed(&guest, &path_deps);

    let target_dir = out_dir.join("refguest-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(cargo);
    command
        .current_dir(&guest)
        .args(["build", "--release", "--bin", "refguest", "--target-dir"])
        .arg(&target_dir);
    for (name, _) in env::vars_os() {
        if name.to_str().is_some_and(should_scrub) {
            command.env_remove(&name);
        }
    }

    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build {}: {e}", guest.display()));
    if !output.status.success() {
        eprintln!(
            "--- nested cargo stdout ---\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        eprintln!(
            "--- nested cargo stderr ---\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        panic!(
            "building the reference guest in {} failed ({})",
            guest.display(),
            output.status
        );
    }

    let elf = target_dir.join("release").join("refguest");
    assert!(
        elf.is_file(),
        "nested cargo succeeded but {} is missing",
        elf.display()
    );
    println!("cargo:rustc-env=HVPROF_REFGUEST_ELF={}", elf.display());
    // The same path for the packages that depend on vmm (`links = "refguest"`): the hvprof
    // package's build script hands it to the guest-booting tests as DEP_REFGUEST_ELF.
    println!("cargo:elf={}", elf.display());
}
