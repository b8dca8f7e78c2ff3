//! How samples are taken (`--sampler`): in the kernel, into a ring buffer per vCPU thread that
//! a drain reads while the vCPUs run (`kernel`), or by kicking the vCPU out of the guest and
//! reading its registers (`kick`); `auto` takes the kernel's where its self-test passes.

use std::fmt;

use super::selftest::{Passed, Unavailable};
use super::Clock;

/// What the user asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SamplerChoice {
    /// The kernel's where it works, kicks elsewhere.
    #[default]
    Auto,
    /// The kernel's, or the run fails.
    Kernel,
    /// Kicks only.
    Kick,
}

impl std::str::FromStr for SamplerChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SamplerChoice::Auto),
            "kernel" => Ok(SamplerChoice::Kernel),
            "kick" => Ok(SamplerChoice::Kick),
            _ => Err(format!("--sampler takes auto, kernel or kick, not {s:?}")),
        }
    }
}

/// What a run samples with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SamplerMode {
    /// In-kernel samples for whatever needs only RIP and CPL; kicks for the rest.
    Kernel,
    /// Every sample is a kick.
    #[default]
    Kick,
}

impl SamplerMode {
    /// The name profile.json and the API use.
    pub fn name(self) -> &'static str {
        match self {
            SamplerMode::Kernel => "kernel",
            SamplerMode::Kick => "kick",
        }
    }
}

impl fmt::Display for SamplerMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The sampler a run uses, and why not the kernel's when it is not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The mode.
    pub mode: SamplerMode,
    /// Why `auto` did not take the kernel's sampler (None: it did, or kicks were asked for).
    pub fallback: Option<Unavailable>,
}

/// `--sampler kernel` cannot be honoured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--sampler kernel cannot run here: {0}")]
pub struct SamplerError(pub Unavailable);

impl crate::outcome::Blame for SamplerError {
    /// The user chose the sampler.
    fn fault(&self) -> crate::outcome::Fault {
        crate::outcome::Fault::User
    }
}

impl Decision {
    /// The one line a run prints when `auto` falls back to kicks (None otherwise, and for a
    /// wall clock the user asked for: that is a choice, not a failure).
    pub fn fallback_line(&self) -> Option<String> {
        match &self.fallback {
            None | Some(Unavailable::WallClock | Unavailable::Timeline) => None,
            Some(why) => Some(format!(
                "in-kernel sampling unavailable ({why}); sampling with kicks"
            )),
        }
    }
}

/// Decides the run's sampler: `choice`, the clock the user named (None: none), whether a
/// timeline records from the start (`auto` then keeps the wall clock's kicks, which show
/// halted vCPUs), and the self-test, run only when the kernel's sampler is a candidate.
pub fn decide(
    choice: SamplerChoice,
    clock: Option<Clock>,
    timeline: bool,
    self_test: impl FnOnce() -> Result<Passed, Unavailable>,
) -> Result<Decision, SamplerError> {
    let kick = |fallback| Decision {
        mode: SamplerMode::Kick,
        fallback,
    };
    match choice {
        SamplerChoice::Kick => return Ok(kick(None)),
        SamplerChoice::Kernel if clock == Some(Clock::Wall) => {
            return Err(SamplerError(Unavailable::WallClock))
        }
        SamplerChoice::Auto if clock == Some(Clock::Wall) => {
            return Ok(kick(Some(Unavailable::WallClock)))
        }
        SamplerChoice::Auto if timeline && clock.is_none() => {
            return Ok(kick(Some(Unavailable::Timeline)))
        }
        _ => {}
    }
    match (self_test(), choice) {
        (Ok(_), _) => Ok(Decision {
            mode: SamplerMode::Kernel,
            fallback: None,
        }),
        (Err(why), SamplerChoice::Kernel) => Err(SamplerError(why)),
        (Err(why), _) => Ok(kick(Some(why))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::probe::Absence;

    fn passes() -> Result<Passed, Unavailable> {
        Ok(Passed { guest: 10, host: 1 })
    }

    fn denied() -> Result<Passed, Unavailable> {
        Err(Unavailable::Open(Absence::Denied { paranoid: Some(2) }))
    }

    #[test]
    fn auto_takes_the_kernel_s_sampler_where_its_self_test_passes() {
        let d = decide(SamplerChoice::Auto, None, false, passes).unwrap();
        assert_eq!(d.mode, SamplerMode::Kernel);
        assert_eq!(d.fallback_line(), None);
        let d = decide(SamplerChoice::Auto, Some(Clock::Cpu), false, passes).unwrap();
        assert_eq!(d.mode, SamplerMode::Kernel);
    }

    #[test]
    fn auto_falls_back_to_kicks_with_one_line_saying_why() {
        let d = decide(SamplerChoice::Auto, None, false, denied).unwrap();
        assert_eq!(d.mode, SamplerMode::Kick);
        let line = d.fallback_line().unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("perf_event_paranoid=2"), "{line}");
        assert!(line.ends_with("sampling with kicks"), "{line}");
        let none = decide(SamplerChoice::Auto, None, false, || {
            Err(Unavailable::NotAttributed(7))
        });
        assert!(none
            .unwrap()
            .fallback_line()
            .unwrap()
            .contains("does not attribute"));
    }

    #[test]
    fn kicks_and_the_wall_clock_need_no_self_test() {
        let never = || -> Result<Passed, Unavailable> { panic!("no self-test wanted") };
        assert_eq!(
            decide(SamplerChoice::Kick, None, false, never)
                .unwrap()
                .mode,
            SamplerMode::Kick
        );
        let d = decide(SamplerChoice::Auto, Some(Clock::Wall), false, never).unwrap();
        assert_eq!(
            (d.mode, d.fallback_line()),
            (SamplerMode::Kick, None),
            "the user's choice, said nowhere"
        );
        assert_eq!(
            decide(SamplerChoice::Kernel, Some(Clock::Wall), false, never),
            Err(SamplerError(Unavailable::WallClock))
        );
        // A timeline from the start keeps the wall clock's kicks, silently, unless a clock
        // or the kernel's sampler is named.
        let d = decide(SamplerChoice::Auto, None, true, never).unwrap();
        assert_eq!((d.mode, d.fallback_line()), (SamplerMode::Kick, None));
        let d = decide(SamplerChoice::Auto, Some(Clock::Cpu), true, passes).unwrap();
        assert_eq!(d.mode, SamplerMode::Kernel);
    }

    #[test]
    fn an_explicit_kernel_sampler_that_cannot_run_is_an_error() {
        let e = decide(SamplerChoice::Kernel, None, false, denied).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("--sampler kernel cannot run here"));
    }
}
