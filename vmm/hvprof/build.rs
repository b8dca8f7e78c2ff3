//! Hands the reference guest's ELF, which vmm's build script builds (and the vmm library
//! embeds), to the guest-booting tests of this package as `env!("HVPROF_REFGUEST_ELF")`, and
//! names the commit the binary is built from for `hvprof --version` (`HVPROF_COMMIT`).

use std::path::Path;
use std::process::Command;

fn main() {
    // Set by cargo from vmm/build.rs's `cargo:elf=` (vmm's manifest says `links = "refguest"`).
    let elf = std::env::var("DEP_REFGUEST_ELF").expect("vmm's build script names the ELF");
    println!("cargo:rustc-env=HVPROF_REFGUEST_ELF={elf}");
    // Rerun when vmm's build script runs again (cargo tracks that), not on every edit here.
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-env=HVPROF_COMMIT={}", commit());
}

/// The commit being built: `HVPROF_COMMIT` when the packager sets it (a source tarball has
/// no repository), else git's HEAD in the source tree, else `unknown`. Cargo runs this again
/// when HEAD moves (the files git keeps it in).
fn commit() -> String {
    println!("cargo:rerun-if-env-changed=HVPROF_COMMIT");
    if let Ok(c) = std::env::var("HVPROF_COMMIT") {
        return c;
    }
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(["-C", &manifest])
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    // HEAD, and the branch file or packed refs it resolves through.
    for file in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", file]) {
            println!(
                "cargo:rerun-if-changed={}",
                Path::new(&manifest).join(p).display()
            );
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
            println!(
                "cargo:rerun-if-changed={}",
                Path::new(&manifest).join(p).display()
            );
        }
    }
    head
}
