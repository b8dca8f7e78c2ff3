//! The bundled reference guest (images/refguest), built by vmm/build.rs and embedded in the
//! binary so `hvprof demo` needs nothing else.

use crate::boot::KernelSpec;
use crate::outcome::RunOutcome;

/// The reference guest's ELF image.
pub static REFGUEST_ELF: &[u8] = include_bytes!(env!("HVPROF_REFGUEST_ELF"));

/// The default scenario: a global profile over three CPL3 functions costing 1:2:4.
pub const DEFAULT_CMDLINE: &str = "scenario=shares";

/// The scenarios that set ProfileTime's interval right after they start, to their command
/// line's `SCENARIO.interval=N` (images/refguest/src/scenario/common.rs).
const INTERVAL_FROM_PARAM: [&str; 5] = ["shares", "process", "affinity", "interrupts", "stopped"];
/// The scenarios that set intervals of their own whatever they are told.
const INTERVAL_FIXED: [&str; 2] = ["bench", "interval"];

/// Why a host-side `--interval` cannot hold in a reference-guest scenario.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntervalError {
    /// The scenario sets intervals of its own.
    #[error("--interval: the reference guest's scenario={0} sets its own sampling intervals")]
    Fixed(String),
    /// `--interval` and the command line's `SCENARIO.interval` disagree.
    #[error("--interval {interval} and {key}={value} on the command line disagree")]
    Disagree {
        /// The host's interval.
        interval: u32,
        /// `SCENARIO.interval`.
        key: String,
        /// Its value on the command line.
        value: String,
    },
}

impl crate::outcome::Blame for IntervalError {
    fn fault(&self) -> crate::outcome::Fault {
        match self {
            IntervalError::Fixed(_) | IntervalError::Disagree { .. } => crate::outcome::Fault::User,
        }
    }
}

/// The reference guest's command line `cmdline` made to keep ProfileTime's interval at
/// `interval` (set by the host with `hvprof profile --interval`): a scenario that sets the
/// interval itself when it starts, which would override the host's, is told the same value
/// through its `SCENARIO.interval` parameter. A scenario that sets intervals of its own
/// cannot keep it: an error, as is a `SCENARIO.interval` on the command line that differs.
pub fn keep_interval(cmdline: &str, interval: u32) -> Result<String, IntervalError> {
    let param = |key: &str| {
        cmdline
            .split_ascii_whitespace()
            .find_map(|w| w.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
    };
    // The guest's own default scenario.
    let scenario = param("scenario").unwrap_or("smoke");
    if INTERVAL_FIXED.contains(&scenario) {
        return Err(IntervalError::Fixed(scenario.to_owned()));
    }
    if !INTERVAL_FROM_PARAM.contains(&scenario) {
        return Ok(cmdline.to_owned());
    }
    let key = format!("{scenario}.interval");
    match param(&key) {
        None => Ok(format!("{cmdline} {key}={interval}")),
        Some(v) if v == interval.to_string() => Ok(cmdline.to_owned()),
        Some(v) => Err(IntervalError::Disagree {
            interval,
            key,
            value: v.to_owned(),
        }),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_that_sets_the_interval_is_told_the_hosts() {
        assert_eq!(
            keep_interval(DEFAULT_CMDLINE, 5000).unwrap(),
            "scenario=shares shares.interval=5000"
        );
        let given = "scenario=process process.interval=2000 x=1";
        assert_eq!(keep_interval(given, 2000).unwrap(), given);
        assert_eq!(
            keep_interval(given, 3000),
            Err(IntervalError::Disagree {
                interval: 3000,
                key: "process.interval".into(),
                value: "2000".into()
            })
        );
    }

    #[test]
    fn other_scenarios_keep_their_command_line_or_cannot_keep_the_interval() {
        for cmdline in ["scenario=stacks stacks.ms=3000", "", "scenario=smoke"] {
            assert_eq!(keep_interval(cmdline, 10_000).unwrap(), cmdline);
        }
        assert_eq!(
            keep_interval("scenario=bench", 10_000),
            Err(IntervalError::Fixed("bench".into()))
        );
        assert!(keep_interval("scenario=interval", 10_000).is_err());
    }
}
