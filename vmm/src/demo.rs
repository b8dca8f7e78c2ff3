//! The bundled reference guest (images/refguest), built by vmm/build.rs and embedded in the
//! binary so `hvprof demo` needs nothing else.

use crate::boot::KernelSpec;
use crate::outcome::RunOutcome;

/// The reference guest's ELF image.
pub static REFGUEST_ELF: &[u8] = include_bytes!(env!("HVPROF_REFGUEST_ELF"));

/// The default scenario: a global profile over three CPL3 functions costing 1:2:4.
pub const DEFAULT_CMDLINE: &str = "scenario=shares";

/// What the reference guest writes to isa-debug-exit when its scenario passed.
pub const REFGUEST_PASS: u32 = 0x10;
/// What it writes when its scenario failed.
pub const REFGUEST_FAIL: u32 = 0x11;

/// The reference guest with `cmdline`.
pub fn kernel_spec(cmdline: &str) -> KernelSpec {
    KernelSpec {
        kernel: "refguest (built in)".into(),
        embedded: Some(REFGUEST_ELF),
        initrd: None,
        cmdline: cmdline.to_owned(),
    }
}

/// The demo's exit status: 0 when the reference guest reported PASS, 1 when it reported FAIL,
/// otherwise the run's own status.
pub fn exit_status(outcome: &RunOutcome) -> i32 {
    match outcome {
        RunOutcome::DebugExit(REFGUEST_PASS) => 0,
        RunOutcome::DebugExit(REFGUEST_FAIL) => 1,
        other => other.exit_status(),
    }
}
