//! `scenario=ntkernel`: a stand-in Windows kernel at CPL0. Module 0 (hvprof `--initrd`) must be
//! a PE32+ image linked /fixed into the kernel window that exports PsLoadedModuleList and whose
//! entry point is a Microsoft x64 `fn(u64) -> u64` (tests/fixtures/pe/nt.c). The boot CPU maps
//! it in kernel space and calls its entry in a loop for `nt.ms` milliseconds (default 1000);
//! the first call builds the loaded-module list, the rest spin. The host finds the kernel from
//! its samples and walks the list. One short CPL3 process follows (the run ends when its
//! processes have). PASS when the loop ran and the process exited cleanly.

use super::{common, Env, Scenario};
use crate::sched::Table;
use crate::user::prof as work;
use crate::start_info::{module, param_u64};
use core::sync::atomic::{AtomicU64, Ordering};

pub const SCENARIO: Scenario = Scenario { name: "ntkernel", setup, check, control: None };

/// Iterations of the image's spin per call: tens of milliseconds of emulated CPL0 code.
const SPIN: u64 = 20_000;
static CALLS: AtomicU64 = AtomicU64::new(0);

fn setup(_env: &Env) -> Result<(), &'static str> {
    let image = crate::pe::load(module().ok_or("no module 0: pass the kernel image as --initrd")?)?;
    if !crate::paging::map_kernel_image() {
        return Err("module 0 is not based in the kernel window");
    }
    let ms = param_u64("nt.ms", 1000);
    crate::println!("ntkernel base={:#x} pages={} entry={:#x} ms={}", image.base, image.pages, image.entry, ms);
    // SAFETY: the image is mapped executable at its base and its entry point is a Microsoft
    // x64 function of one u64 (the module's contract above); it uses only its own data.
    let entry: extern "win64" fn(u64) -> u64 = unsafe { core::mem::transmute(image.entry as usize) };
    let deadline = crate::cpu::rdtsc() + common::ms(ms);
    let mut acc = 0u64;
    while crate::cpu::rdtsc() < deadline {
        acc ^= entry(SPIN);
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
    crate::println!("ntkernel calls={} acc={:#x}", CALLS.load(Ordering::Relaxed), acc);
    common::spawn(work::w().start, 0, work::plan(common::ms(1), 1, false))?;
    Ok(())
}

fn check(table: &Table) -> Result<(), &'static str> {
    if CALLS.load(Ordering::Relaxed) == 0 {
        return Err("the kernel image never ran");
    }
    common::all_exited("ntkernel", table)
}
