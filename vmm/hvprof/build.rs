//! Hands the reference guest's ELF, which vmm's build script builds (and the vmm library
//! embeds), to the guest-booting tests of this package as `env!("HVPROF_REFGUEST_ELF")`.

fn main() {
    // Set by cargo from vmm/build.rs's `cargo:elf=` (vmm's manifest says `links = "refguest"`).
    let elf = std::env::var("DEP_REFGUEST_ELF").expect("vmm's build script names the ELF");
    println!("cargo:rustc-env=HVPROF_REFGUEST_ELF={elf}");
    // Rerun when vmm's build script runs again (cargo tracks that), not on every edit here.
    println!("cargo:rerun-if-changed=build.rs");
}
