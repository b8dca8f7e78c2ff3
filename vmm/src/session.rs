//! A profiling session (`hvprof profile`): run a VM with a host-side profile (no agent needed)
//! beside whatever profile objects the guest's agent starts, for a fixed duration or until the
//! guest exits; the run's report carries every object's and host profile's counts. How it is
//! going goes to a [`Progress`] hook: the library draws nothing, the binary draws a bar.

use std::time::Duration;

use crate::config::VmConfig;
use crate::outcome::RunOutcome;
use crate::profiler::host_profiles::HostProfileSpec;
use crate::profiler::vcpu_counters::total;
use crate::vm::{run_with, RunHooks, RunReport, VmControl, VmError};

/// How long to profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// Stop the VM after it has run this long (time paused through the API not counted).
    For(Duration),
    /// Until the guest ends the run.
    UntilExit,
}

/// A profiling session.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// How long.
    pub span: Span,
    /// The interval of the source the host profiles sample on (ProfileTime's, in 100 ns
    /// units, unless the first names a PMU source's event); None: the default.
    pub interval: Option<u32>,
    /// Host-side profiles to run (usually one over the whole address space).
    pub host_profiles: Vec<HostProfileSpec>,
}

/// Told how a session is going, about ten times a second, on the session's own thread.
pub trait Progress: Send {
    /// The guest's running time (pauses excluded), and the samples taken so far over every
    /// vCPU.
    fn update(&mut self, elapsed: Duration, samples: u64);
    /// The session is over: called once, before [`run`] returns, if the VM got as far as
    /// running (a VM that could not be built never reports progress).
    fn finish(&mut self) {}
}

/// Runs `config` as a profiling session, telling `progress` (if any) how it goes; `hooks` may
/// carry more controllers (the API).
pub fn run(
    config: &VmConfig,
    opts: &SessionOptions,
    hooks: RunHooks,
    mut progress: Option<Box<dyn Progress>>,
) -> Result<RunReport, VmError> {
    let span = opts.span;
    let controller = Box::new(move |control: VmControl| {
        while !control.stop.is_requested() {
            // Running time: a pause through the API does not count against --duration.
            let elapsed = control.uptime.running();
            if let Span::For(d) = span {
                if elapsed >= d {
                    control
                        .stop
                        .request(RunOutcome::Stopped("--duration".into()));
                    break;
                }
            }
            if let Some(p) = progress.as_mut() {
                p.update(elapsed, total(&control.profiler.stats()).samples);
            }
            std::thread::sleep(Duration::from_millis(100).min(match span {
                Span::For(d) => d.saturating_sub(elapsed).max(Duration::from_millis(1)),
                Span::UntilExit => Duration::from_millis(100),
            }));
        }
        // The run's controllers are joined before run_with returns, so this comes first.
        if let Some(p) = progress.as_mut() {
            p.finish();
        }
    });
    let mut hooks = hooks;
    hooks.controllers.push(controller);
    hooks
        .host_profiles
        .extend(opts.host_profiles.iter().cloned());
    let event = opts.host_profiles.first().and_then(|h| h.event.as_deref());
    let source = crate::sampler::events::interval_source(event);
    hooks.interval = opts.interval.map(|i| (source, i)).or(hooks.interval);
    run_with(config, hooks)
}
