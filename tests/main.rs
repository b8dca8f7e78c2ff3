//! hvprof's guest-booting tests (tier 3): one test binary, `guests`, with a module per area.
//! Each test runs the `hvprof` binary on a guest (the fixture kernels of tests/fixtures/, the
//! built-in reference guest, SeaBIOS, Debian's Linux, the Linux test guest of images/linux) through [`harness`], which bounds every
//! run's wall-clock time and prints everything a failed run said.
//!
//! Run them with `cargo nextest run --test guests` (per-test time limits in
//! .config/nextest.toml) or `cargo test --test guests`; one area with a filter, for example
//! `cargo nextest run --test guests firmware::`.

mod harness;

/// `--api-socket`: pause, resume, host-side profiles, shutdown.
mod api;
/// `hvprof bench` on the reference guest.
mod bench_guest;
/// `hvprof bench` end to end: each kick kind on its path, its stacks walked and timed.
mod bench_paths;
/// `hvprof bench --peer`: sampling's cost to the guest, hvprof against perf kvm's events.
mod bench_peer;
/// PVH, multiboot and a.out fixture kernels.
mod boot;
/// `hvprof profile`, `compare` and `merge` on the reference guest.
mod compare;
/// How runs end: crashes, hangs, timeouts, signals, bad input.
mod failures;
/// Faults and hostile input: outputs, the API, inputs, images, saved profiles.
mod faults;
/// SeaBIOS (Debian's `seabios` package) and OVMF boots.
mod firmware;
/// The in-kernel sampler: shares, Stop and the interval with it on, the fallback to kicks.
mod in_kernel;
/// What a package installs: `--version`, completions, man pages.
mod install;
/// The early boot of Debian's Linux kernel.
mod linux;
/// A small Linux built from Debian's source (images/linux): platform, disk, power, profile.
mod linux_guest;
/// A stand-in Windows kernel at CPL0: ntoskrnl and its module list found from outside.
mod ntkernel;
/// PE/PDB symbolization of a DLL built at test time (Debian's clang and lld).
mod pdb;
/// Profile objects, sampling and injection, end to end.
mod profiling;
/// qcow2 images, backing chains and `,snapshot` (images made by qemu-img).
mod qcow2;
/// Guest RAM by the memory map: blocks and frames in 0xA0000-0xFFFFF, PVH and SeaBIOS.
mod ramrule;
/// The CI and Kubernetes recipes of docs/ci/: checked, and their hvprof lines run.
mod recipes;
/// The reference guest's scenarios.
mod refguest;
/// `hvprof demo --out` and `hvprof report` (`go tool pprof` needs Debian's golang-go).
mod reports;
/// Sample sources: the CPU-time clock, perf-event host profiles, PMU sources offered.
mod sampling;
/// System-call filters: a refused call on each kind of thread.
mod seccomp;
/// Call stacks: frame pointers and Windows x64 unwind data (clang, lld, llvm, golang-go).
mod stacks;
/// The tree's structure: module layers and circles, crate dependencies (boots nothing).
mod structure;
/// `--symbol-path`: symbol stores, a symbol server on loopback, `_NT_SYMBOL_PATH`.
mod symserver;
/// The run on a time axis: the reference guest's known phases against hvprof's timeline.
mod timeline;
/// `hvprof top` on a running reference guest.
mod top;
/// Timeline exports opened in speedscope in headless Chromium (Node.js, Debian's chromium).
mod viewer;
/// virtio-blk driven by a fixture kernel.
mod virtio_blk;
