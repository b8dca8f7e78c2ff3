//! One vCPU thread's triggers: created on that thread (before its system-call filter, since
//! opening events and timers needs calls the filter refuses), armed and disarmed as started
//! objects and host profiles come and go, and read after every kick. With the in-kernel
//! sampler each trigger also has a ring event ([`super::ring`]); a trigger samples through
//! either, or through both at their own intervals, as the profiler says
//! (`Profiler::serving`): the ring for the claims that need only PCs, kicks for those that
//! need registers.

use super::perf::PerfEvent;
use super::ring::{Ring, ThreadEvents};
use super::{interval_duration, SampleTimer, SamplerMode, Sampling, TriggerId, TIME_TRIGGER};
use crate::signals::{overflow, tick};

/// An event armed on this thread and the overflow slot that counts its signals.
struct Watched {
    event: PerfEvent,
    slot: usize,
}

/// A vCPU thread's triggers, indexed like its VM's [`Sampling`].
pub struct VcpuSampler {
    timer: Option<SampleTimer>,
    events: Vec<Option<Watched>>,
    /// The in-kernel sampler's events on this thread, if it samples with them.
    ring: Option<ThreadEvents>,
    /// Per trigger: counts nanoseconds (a clock), so intervals are 100 ns units to convert.
    clocks: Vec<bool>,
    /// Per trigger: its ring event is armed, so its kicks serve only what needs registers.
    ring_armed: Vec<bool>,
}

/// How one trigger samples one vCPU: the interval of each path, in the trigger's unit (None:
/// that path is off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Serving {
    /// The in-kernel sampler's ring event.
    pub ring: Option<u32>,
    /// Kicks: the trigger's perf event or wall-clock timer, with a signal.
    pub kicks: Option<u32>,
}

/// Ticks a trigger delivered since the last look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticks {
    /// The trigger.
    pub trigger: TriggerId,
    /// Signals taken (one sample is taken for any number of them).
    pub ticks: u32,
    /// Expirations the kernel folded into those signals (timer overruns).
    pub folded: u32,
    /// The trigger's ring event was armed beside its kicks ([`Serving`] with both paths):
    /// the ring serves the flat claims, the kicks only those that need registers.
    pub beside_ring: bool,
}

impl VcpuSampler {
    /// Creates the calling thread's triggers for `sampling`, all disarmed, and with the
    /// in-kernel sampler the ring they sample into, for the drain. A trigger that cannot be
    /// created is reported in the last value and never samples this vCPU; without its ring the
    /// vCPU is sampled by kicks alone.
    pub fn for_current_thread(sampling: &Sampling) -> (Self, Option<Ring>, Vec<String>) {
        let mut errors = Vec::new();
        let timer = match sampling.spec(TIME_TRIGGER) {
            Some(_) => None,
            None => SampleTimer::for_current_thread()
                .map_err(|e| errors.push(format!("no sampling timer: {e}")))
                .ok(),
        };
        let events = (0..sampling.len())
            .map(|t| {
                let spec = sampling.spec(t)?;
                let opened = PerfEvent::open_on_current_thread(&spec)
                    .map_err(|e| format!("cannot open {}: {e}", sampling.name(t)));
                let watched = opened.and_then(|event| {
                    let slot = overflow::watch(event.fd())
                        .ok_or_else(|| format!("no overflow slot left for {}", sampling.name(t)))?;
                    Ok(Watched { event, slot })
                });
                watched.map_err(|e| errors.push(e)).ok()
            })
            .collect();
        let clocks = (0..sampling.len())
            .map(|t| sampling.spec(t).is_some_and(|s| s.clock))
            .collect();
        let (ring, reader) = match sampling.mode() {
            SamplerMode::Kick => (None, None),
            SamplerMode::Kernel => {
                let specs: Vec<_> = (0..sampling.len())
                    .filter_map(|t| sampling.spec(t).map(|s| (t, s)))
                    .collect();
                match ThreadEvents::open_on_current_thread(&specs, sampling.len()) {
                    Ok((events, ring)) => (Some(events), Some(ring)),
                    Err(e) => {
                        errors.push(format!(
                            "no in-kernel sampling ({}): kicks only",
                            report::chain::with_causes(&e)
                        ));
                        (None, None)
                    }
                }
            }
        };
        let sampler = VcpuSampler {
            timer,
            events,
            ring,
            ring_armed: vec![false; sampling.len()],
            clocks,
        };
        (sampler, reader, errors)
    }

    /// Arms trigger `t` as `serving` says, each path at its interval (the source's unit: 100
    /// ns for ProfileTime and the software clocks, events for a PMU source), or disarms it.
    /// Where this thread has no ring event for `t`, kicks take the ring's part, at the shorter
    /// of the two intervals.
    pub fn set(&mut self, t: TriggerId, serving: Serving) -> std::io::Result<()> {
        let clock = self.clocks.get(t).copied().unwrap_or(false);
        let period = |i: u32| {
            if clock {
                u64::try_from(interval_duration(i).as_nanos()).unwrap_or(u64::MAX)
            } else {
                u64::from(i)
            }
        };
        let (ring, kick) = match &self.ring {
            Some(r) if r.has(t) => (serving.ring, serving.kicks),
            _ => (None, serving.ring.into_iter().chain(serving.kicks).min()),
        };
        // Disarm before arming, so no stretch of guest time is sampled twice by one path.
        if ring.is_none() {
            if let Some(r) = self.ring.as_mut() {
                r.set(t, None)?;
            }
        }
        self.set_kick(t, kick.map(period), kick)?;
        if ring.is_some() {
            if let Some(r) = self.ring.as_mut() {
                r.set(t, ring.map(period))?;
            }
        }
        if let Some(armed) = self.ring_armed.get_mut(t) {
            *armed = ring.is_some();
        }
        Ok(())
    }

    /// Arms or disarms trigger `t`'s kicks: its perf event at `period`, or the wall-clock
    /// timer at `interval`.
    fn set_kick(
        &mut self,
        t: TriggerId,
        period: Option<u64>,
        interval: Option<u32>,
    ) -> std::io::Result<()> {
        if let Some(Some(w)) = self.events.get_mut(t) {
            return w.event.set(period);
        }
        match (t, self.timer.as_mut()) {
            (TIME_TRIGGER, Some(timer)) => timer.set(interval),
            _ => Ok(()),
        }
    }

    /// Calls `f` for each trigger that ticked since the last call. Returns the overflow
    /// signals that named no event of this thread (lost samples of no known trigger).
    pub fn take(&mut self, mut f: impl FnMut(Ticks)) -> u32 {
        if let Some(timer) = &self.timer {
            let ticks = tick::take_ticks();
            if ticks > 0 {
                f(Ticks {
                    trigger: TIME_TRIGGER,
                    ticks,
                    folded: timer.overruns(),
                    beside_ring: self.ring_armed.get(TIME_TRIGGER).copied().unwrap_or(false),
                });
            }
        }
        for (trigger, w) in self.events.iter().enumerate() {
            let Some(w) = w else { continue };
            let ticks = overflow::take(w.slot);
            if ticks > 0 {
                f(Ticks {
                    trigger,
                    ticks,
                    folded: 0,
                    beside_ring: self.ring_armed.get(trigger).copied().unwrap_or(false),
                });
            }
        }
        overflow::stray()
    }

    /// The descriptor of trigger `t`'s perf event on this thread, if it has one.
    pub fn fd(&self, t: TriggerId) -> Option<std::os::fd::RawFd> {
        self.events.get(t)?.as_ref().map(|w| w.event.fd())
    }

    /// Drops whatever ticked while the vCPU was not running guest code (paused).
    pub fn discard(&mut self) {
        self.take(|_| {});
    }
}

impl Drop for VcpuSampler {
    fn drop(&mut self) {
        for w in self.events.iter().flatten() {
            overflow::unwatch(w.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::{probe, Clock};

    fn kicks(interval: u32) -> Serving {
        Serving {
            ring: None,
            kicks: Some(interval),
        }
    }

    #[test]
    fn the_cpu_clock_ticks_trigger_zero_on_its_own_thread() {
        let report = probe::probe_host();
        let Ok(sampling) = Sampling::new(Clock::Cpu, &report) else {
            eprintln!("no task-clock for this user here; the probe's tests cover that");
            return;
        };
        crate::signals::install_handlers().unwrap();
        let got = std::thread::spawn(move || {
            let (mut s, _, errors) = VcpuSampler::for_current_thread(&sampling);
            assert_eq!(errors, Vec::<String>::new());
            s.set(TIME_TRIGGER, kicks(10_000)).unwrap();
            let mut seen = Vec::new();
            while seen.iter().map(|t: &Ticks| t.ticks).sum::<u32>() < 3 {
                s.take(|t| seen.push(t));
            }
            s.set(TIME_TRIGGER, Serving::default()).unwrap();
            seen
        })
        .join()
        .unwrap();
        assert!(got
            .iter()
            .all(|t| t.trigger == TIME_TRIGGER && t.folded == 0));
    }

    #[test]
    fn the_wall_clock_uses_the_timer_and_opens_no_event() {
        crate::signals::install_handlers().unwrap();
        std::thread::spawn(|| {
            let (mut s, ring, errors) = VcpuSampler::for_current_thread(&Sampling::timer_only());
            assert!(ring.is_none());
            assert!(errors.is_empty());
            assert!(s.events.iter().all(Option::is_none));
            s.set(TIME_TRIGGER, kicks(10_000)).unwrap();
            let mut n = 0;
            while n < 2 {
                s.take(|t| n += t.ticks);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            s.set(TIME_TRIGGER, Serving::default()).unwrap();
        })
        .join()
        .unwrap();
    }
}
