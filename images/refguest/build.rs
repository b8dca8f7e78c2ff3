//! Link the reference guest as a freestanding ELF with `link.ld`.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let script = dir.join("link.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    for arg in [
        "-nostdlib",
        "-nostartfiles",
        "-static",
        "-no-pie",
        "-Wl,--build-id=none",
        "-Wl,-z,norelro",
        "-Wl,-z,max-page-size=0x1000",
        "-Wl,--no-eh-frame-hdr",
    ] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
}
