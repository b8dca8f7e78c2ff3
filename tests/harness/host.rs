//! Time limits for guests whose run is mostly guest-kernel code, derived from a measurement of
//! this host rather than from constants.
//!
//! Hosts of the same kind differ by 3-5x in how fast they run guest-kernel code (a PVM-based
//! KVM emulates it), and VMX/SVM hosts run it 10-100x faster still. A guest's budget is
//! therefore stated as work, in guest-kernel instructions of the calibration loop
//! (tests/fixtures/calibrate.S), and turned into seconds with the cost of one such instruction
//! measured here, once per test process, under whatever load the host carries at that moment.

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{fixture, hvprof_run, status, Fixture, FIXTURE_OK};

/// Iterations of the calibration loop in the long run; the short run does one.
const LOOPS: u32 = 200_000;
/// Instructions in one iteration of the loop (calibrate.S).
const INSNS_PER_LOOP: u64 = 6;
/// Runs of each length; the fastest of each is kept (load only ever slows a run down).
const ROUNDS: usize = 2;

/// How fast this host runs guest-kernel code.
#[derive(Clone, Copy, Debug)]
pub struct HostSpeed {
    /// Wall-clock cost of one guest-kernel instruction of the calibration loop, in nanoseconds.
    pub ns_per_insn: f64,
    /// Wall-clock time of the one-iteration run: VMM start-up and tear-down.
    pub startup: Duration,
}

impl fmt::Display for HostSpeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "this host runs guest-kernel code at {:.3} us an instruction (calibration loop, \
             VMM start-up {:.2} s)",
            self.ns_per_insn / 1000.0,
            self.startup.as_secs_f64()
        )
    }
}

/// Times one run of the calibration kernel.
fn time_calibration(loops: u32) -> Duration {
    let kernel = fixture(Fixture::Calibrate { loops });
    let started = Instant::now();
    let out = hvprof_run::<&str>(&kernel, &[]).run();
    let took = started.elapsed();
    out.assert_status(status::debug_exit(FIXTURE_OK));
    took
}

/// This host's speed, measured on first use in this test process (a few seconds at most on
/// hosts that emulate guest-kernel code, well under one on others).
pub fn speed() -> HostSpeed {
    static SPEED: OnceLock<HostSpeed> = OnceLock::new();
    *SPEED.get_or_init(|| {
        let (mut short, mut long) = (Duration::MAX, Duration::MAX);
        for _ in 0..ROUNDS {
            short = short.min(time_calibration(1));
            long = long.min(time_calibration(LOOPS));
        }
        let insns = u64::from(LOOPS - 1) * INSNS_PER_LOOP;
        // On a fast host the difference can vanish in the noise of process start-up: it is
        // then no more than start-up itself, and the budget's floor decides.
        let diff = long.saturating_sub(short);
        HostSpeed {
            ns_per_insn: diff.as_secs_f64() * 1e9 / insns as f64,
            startup: short,
        }
    })
}

/// What a guest's run may cost: its work in guest-kernel instructions, with a margin for a
/// host busier during the run than during the calibration, and a floor for what does not
/// scale with the host's speed (start-up, devices, user-mode code).
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Guest-kernel instructions (of the calibration loop's kind) the run is expected to take.
    pub insns: u64,
    /// How many times the expected time the run may take before it counts as hung.
    pub margin: u32,
    /// The least time a run is given, on any host.
    pub floor: Duration,
}

/// A time limit derived from a [`Budget`] and this host's measured speed.
#[derive(Clone, Debug)]
pub struct Limit {
    /// hvprof's `--timeout`.
    pub timeout: Duration,
    /// The harness's limit on the whole process: `timeout` plus time to write the results.
    pub harness: Duration,
    /// How the limit was derived, for failure messages.
    pub why: String,
}

impl Limit {
    /// hvprof's `--timeout` in whole seconds, as an argument.
    pub fn timeout_arg(&self) -> String {
        self.timeout.as_secs().max(1).to_string()
    }
}

impl Budget {
    /// The limit on this host.
    pub fn limit(&self) -> Limit {
        self.limit_at(speed())
    }

    /// The limit on a host of the given speed.
    pub fn limit_at(&self, speed: HostSpeed) -> Limit {
        let expected = Duration::from_secs_f64(self.insns as f64 * speed.ns_per_insn / 1e9);
        let scaled = expected * self.margin + speed.startup * 2;
        let timeout = scaled.max(self.floor);
        // Whole seconds, rounded up, as hvprof's --timeout takes them.
        let timeout = Duration::from_secs(timeout.as_secs() + 1);
        Limit {
            timeout,
            harness: timeout + Duration::from_secs(30),
            why: format!(
                "{speed}; the budget of {:.0}M instructions is {:.0} s here, x{} margin, \
                 floor {} s: limit {} s",
                self.insns as f64 / 1e6,
                expected.as_secs_f64(),
                self.margin,
                self.floor.as_secs(),
                timeout.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns_per_insn: f64) -> HostSpeed {
        HostSpeed {
            ns_per_insn,
            startup: Duration::from_millis(100),
        }
    }

    const BUDGET: Budget = Budget {
        insns: 100_000_000,
        margin: 4,
        floor: Duration::from_secs(60),
    };

    #[test]
    fn a_slower_host_gets_a_proportionally_longer_limit() {
        let here = BUDGET.limit_at(at(600.0));
        let slow = BUDGET.limit_at(at(3000.0));
        assert_eq!(here.timeout.as_secs(), 241);
        assert_eq!(slow.timeout.as_secs(), 1201);
        assert!(slow.why.contains("3.000 us"), "{}", slow.why);
    }

    #[test]
    fn a_fast_host_gets_the_floor_so_a_hung_guest_fails_fast() {
        let vmx = BUDGET.limit_at(at(1.0));
        assert_eq!(vmx.timeout.as_secs(), 61);
        assert_eq!(vmx.harness.as_secs(), 91);
    }
}

/// Prints this host's measured speed (`cargo nextest run --test guests host_speed
/// --no-capture`): the figure every derived limit starts from.
#[test]
fn host_speed_is_measured() {
    let s = speed();
    println!("{s}");
    assert!(s.ns_per_insn.is_finite() && s.ns_per_insn >= 0.0, "{s}");
}
