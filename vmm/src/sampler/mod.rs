//! Sample sources: what makes a vCPU take a sample. Every source delivers a signal to the vCPU
//! thread it samples, so the sample is taken on that thread from its own registers and no
//! other thread has to be scheduled for it.
//!
//! A VM's **triggers** are fixed when it is built ([`Sampling`]): trigger 0 is ProfileTime's
//! clock, either a POSIX timer per vCPU on the monotonic clock ([`Clock::Wall`], [`timer`]) or
//! a perf task-clock event on the vCPU thread ([`Clock::Cpu`]), which advances only while the
//! thread runs, so host scheduling cannot lose its samples. The others are the perf events the
//! probe ([`probe`]) found on this host ([`events`]): hardware events for the PMU profile
//! sources, software clocks for host-side profiles. Each vCPU thread arms the triggers some
//! started object or host profile needs on it ([`vcpu::VcpuSampler`]). Ticks that arrive
//! before the previous one was taken, and expirations the kernel folded into one signal, are
//! counted as lost samples.

pub mod events;
pub mod listing;
pub mod mode;
pub mod perf;
pub mod probe;
pub mod ring;
pub mod selftest;
pub mod timer;
pub mod vcpu;

use profile_core::{ProfileSource, SourceInfo};

use events::{EventDef, EventSpec};
pub use mode::{SamplerChoice, SamplerMode};
use probe::{Absence, ProbeReport};
pub use timer::{interval_duration, SampleTimer};

/// What ProfileTime's samples tick on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Clock {
    /// Wall-clock time: a vCPU is sampled whether or not the host runs its thread, as a
    /// Windows timer interrupt would; ticks that fall while the thread waits are lost.
    #[default]
    Wall,
    /// The vCPU thread's CPU time: nothing is lost to host scheduling, and a vCPU the host
    /// does not run (halted, preempted) is not sampled.
    Cpu,
}

impl Clock {
    /// The name users give `--clock`.
    pub fn name(self) -> &'static str {
        match self {
            Clock::Wall => "wall",
            Clock::Cpu => "cpu",
        }
    }
}

/// A trigger's index in a VM's [`Sampling`].
pub type TriggerId = usize;

/// ProfileTime's clock.
pub const TIME_TRIGGER: TriggerId = 0;

/// The interval clamps of every PMU source (events per sample). Windows' HAL clamps its PMC
/// sources to [4096, 2^31 - 1] with 65,536 as the default; each hvprof sample costs a VM exit,
/// so the floor and the default are higher here: 1,000,000 events is about 3,000 samples a
/// second at 3 GHz.
pub const fn pmu_source_info(source: ProfileSource) -> SourceInfo {
    SourceInfo {
        source,
        min_interval: 10_000,
        max_interval: i32::MAX as u32,
        default_interval: 1_000_000,
    }
}

/// A VM's triggers: ProfileTime's clock and the events present on this host.
#[derive(Clone, Debug)]
pub struct Sampling {
    clock: Clock,
    /// ProfileTime's perf clock, for [`Clock::Cpu`].
    clock_event: Option<EventSpec>,
    /// Trigger `i + 1` is `events[i]`.
    events: Vec<(&'static EventDef, EventSpec)>,
    /// Whether the vCPU threads also open ring events for the in-kernel sampler.
    mode: SamplerMode,
}

/// A sampling choice this host cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SamplingError {
    /// `--clock cpu` without a task-clock event on vCPU threads.
    #[error("--clock cpu needs the perf task-clock event on vCPU threads, which is absent: {0}")]
    CpuClock(Absence),
    /// `--event` names an event this host lacks.
    #[error("event {name} cannot be sampled here: {why}")]
    Absent {
        /// The event.
        name: String,
        /// Why.
        why: Absence,
    },
    /// `--event` names no event of the table.
    #[error("unknown event {0:?}; `hvprof events` lists them")]
    Unknown(String),
}

impl crate::outcome::Blame for SamplingError {
    /// The user chose the clock or event.
    fn fault(&self) -> crate::outcome::Fault {
        crate::outcome::Fault::User
    }
}

impl Sampling {
    /// The triggers `report` allows, with ProfileTime on `clock`.
    pub fn new(clock: Clock, report: &ProbeReport) -> Result<Self, SamplingError> {
        let clock_event = match clock {
            Clock::Wall => None,
            Clock::Cpu => {
                let p = report.get(events::TASK_CLOCK);
                match p.map(|p| p.result) {
                    Some(Ok(spec)) => Some(spec),
                    Some(Err(why)) => return Err(SamplingError::CpuClock(why)),
                    None => return Err(SamplingError::CpuClock(Absence::NoEncoding)),
                }
            }
        };
        Ok(Sampling {
            clock,
            clock_event,
            events: report.present().collect(),
            mode: SamplerMode::Kick,
        })
    }

    /// The triggers `report` allows for the in-kernel sampler: ProfileTime on each vCPU
    /// thread's cpu-clock (CPU time, as `--clock cpu`), every trigger also sampled into a ring.
    pub fn in_kernel(report: &ProbeReport) -> Result<Self, SamplingError> {
        let clock_event = match report.get(events::CPU_CLOCK).map(|p| p.result) {
            Some(Ok(spec)) => spec,
            Some(Err(why)) => return Err(SamplingError::CpuClock(why)),
            None => return Err(SamplingError::CpuClock(Absence::NoEncoding)),
        };
        Ok(Sampling {
            clock: Clock::Cpu,
            clock_event: Some(clock_event),
            events: report.present().collect(),
            mode: SamplerMode::Kernel,
        })
    }

    /// How samples are taken.
    pub fn mode(&self) -> SamplerMode {
        self.mode
    }

    /// ProfileTime on the wall clock and no event: what a host without perf offers.
    pub fn timer_only() -> Self {
        Sampling {
            clock: Clock::Wall,
            clock_event: None,
            events: Vec::new(),
            mode: SamplerMode::Kick,
        }
    }

    /// ProfileTime's clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Number of triggers (ProfileTime's clock included).
    pub fn len(&self) -> usize {
        1 + self.events.len()
    }

    /// Never: ProfileTime's clock is always a trigger.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The perf event trigger `t` opens on each vCPU thread; None for the wall-clock timer.
    pub fn spec(&self, t: TriggerId) -> Option<EventSpec> {
        match t {
            TIME_TRIGGER => self.clock_event,
            _ => self.events.get(t - 1).map(|(_, s)| *s),
        }
    }

    /// The profile source whose objects count trigger `t`'s samples; None for a software
    /// clock, which only host-side profiles name.
    pub fn source(&self, t: TriggerId) -> Option<ProfileSource> {
        match t {
            TIME_TRIGGER => Some(ProfileSource::TIME),
            _ => self.events.get(t - 1).and_then(|(d, _)| d.source),
        }
    }

    /// The trigger of `source`'s objects, if the source is present.
    pub fn for_source(&self, source: ProfileSource) -> Option<TriggerId> {
        if source == ProfileSource::TIME {
            return Some(TIME_TRIGGER);
        }
        self.events
            .iter()
            .position(|(d, _)| d.source == Some(source))
            .map(|i| i + 1)
    }

    /// The trigger a host-side profile names: None is ProfileTime's clock.
    pub fn for_event(
        &self,
        name: Option<&str>,
        report: &ProbeReport,
    ) -> Result<TriggerId, SamplingError> {
        let Some(name) = name else {
            return Ok(TIME_TRIGGER);
        };
        if let Some(i) = self.events.iter().position(|(d, _)| d.name == name) {
            return Ok(i + 1);
        }
        match report.get(name) {
            Some(p) => Err(SamplingError::Absent {
                name: name.to_string(),
                why: p.result.err().unwrap_or(Absence::NoEncoding),
            }),
            None => Err(SamplingError::Unknown(name.to_string())),
        }
    }

    /// Trigger `t`'s name: "time" or the event's.
    pub fn name(&self, t: TriggerId) -> &'static str {
        match t {
            TIME_TRIGGER => "time",
            _ => self.events.get(t - 1).map_or("?", |(d, _)| d.name),
        }
    }

    /// The PMU profile sources present, with their clamps.
    pub fn pmu_sources(&self) -> Vec<SourceInfo> {
        self.events
            .iter()
            .filter_map(|(d, _)| d.source)
            .map(pmu_source_info)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::Vendor;
    use probe::{probe, Fake};

    fn clocks_only() -> ProbeReport {
        probe(
            &Fake(|s| if s.clock { Ok(()) } else { Err(libc::ENOENT) }),
            Vendor::Intel,
            None,
        )
    }

    #[test]
    fn without_a_pmu_only_profile_time_has_a_source() {
        let s = Sampling::new(Clock::Wall, &clocks_only()).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.pmu_sources(), []);
        assert_eq!(s.for_source(ProfileSource::TIME), Some(TIME_TRIGGER));
        assert_eq!(s.for_source(ProfileSource::TOTAL_CYCLES), None);
        assert_eq!(s.spec(TIME_TRIGGER), None, "wall: the POSIX timer");
        let cpu = s.for_event(Some("cpu-clock"), &clocks_only()).unwrap();
        assert_eq!((s.name(cpu), s.source(cpu)), ("cpu-clock", None));
        assert_eq!(
            s.for_event(Some("cycles"), &clocks_only()),
            Err(SamplingError::Absent {
                name: "cycles".into(),
                why: Absence::NotCounted
            })
        );
        assert_eq!(
            s.for_event(Some("cycels"), &clocks_only()),
            Err(SamplingError::Unknown("cycels".into()))
        );
        assert_eq!(s.for_event(None, &clocks_only()), Ok(TIME_TRIGGER));
    }

    #[test]
    fn a_pmu_host_gives_each_present_source_its_trigger_and_clamps() {
        let report = probe(&Fake(|_| Ok(())), Vendor::Amd, None);
        let s = Sampling::new(Clock::Cpu, &report).unwrap();
        let t = s.for_source(ProfileSource::BRANCH_MISPREDICTIONS).unwrap();
        assert_eq!(s.name(t), "branch-misses");
        assert_eq!(s.source(t), Some(ProfileSource::BRANCH_MISPREDICTIONS));
        assert_eq!(s.for_event(Some("branch-misses"), &report), Ok(t));
        let sources = s.pmu_sources();
        assert_eq!(sources.len(), events::EVENTS.len() - 2);
        assert!(sources
            .iter()
            .all(|i| i.min_interval <= i.default_interval && i.default_interval <= i.max_interval));
        assert_eq!(
            s.spec(TIME_TRIGGER).map(|e| (e.kind, e.config)),
            Some((1, 1))
        );
    }

    #[test]
    fn the_cpu_clock_needs_the_task_clock() {
        let denied = probe(&Fake(|_| Err(libc::EACCES)), Vendor::Intel, Some(2));
        let e = Sampling::new(Clock::Cpu, &denied).unwrap_err();
        assert_eq!(
            e,
            SamplingError::CpuClock(Absence::Denied { paranoid: Some(2) })
        );
        assert!(e.to_string().starts_with("--clock cpu needs"));
        // The wall clock needs no perf at all.
        assert_eq!(Sampling::new(Clock::Wall, &denied).unwrap().len(), 1);
    }
}
