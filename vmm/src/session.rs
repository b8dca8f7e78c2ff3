//! A profiling session (`hvprof profile`): run a VM with a host-side profile (no agent needed)
//! beside whatever profile objects the guest's agent starts, for a fixed duration or until the
//! guest exits, with a progress bar; the run's report carries every object's and host
//! profile's counts.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::config::VmConfig;
use crate::outcome::RunOutcome;
use crate::profiler::host::HostProfileSpec;
use crate::profiler::stats::total;
use crate::vm::{run_with, RunHooks, RunReport, VmControl, VmError};

/// How long to profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// Stop the VM after this long.
    For(Duration),
    /// Until the guest ends the run.
    UntilExit,
}

/// A profiling session.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// How long.
    pub span: Span,
    /// ProfileTime interval in 100 ns units (None: the default, 39,063).
    pub interval: Option<u32>,
    /// Host-side profiles to run (usually one over the whole address space).
    pub host_profiles: Vec<HostProfileSpec>,
    /// No progress bar.
    pub quiet: bool,
}

fn progress(span: Span, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    match span {
        Span::For(d) => {
            let bar = ProgressBar::new(d.as_millis().try_into().unwrap_or(u64::MAX));
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{bar:30}] {elapsed}/{msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar
        }
        Span::UntilExit => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar
        }
    }
}

/// Runs `config` as a profiling session; `hooks` may carry more controllers (the API).
pub fn run(
    config: &VmConfig,
    opts: &SessionOptions,
    hooks: RunHooks,
) -> Result<RunReport, VmError> {
    let span = opts.span;
    let bar = progress(span, opts.quiet);
    let bar_thread = bar.clone();
    let controller = Box::new(move |control: VmControl| {
        let started = Instant::now();
        while !control.stop.is_requested() {
            let elapsed = started.elapsed();
            let samples = total(&control.profiler.stats()).samples;
            match span {
                Span::For(d) => {
                    if elapsed >= d {
                        control
                            .stop
                            .request(RunOutcome::Stopped("--duration".into()));
                        break;
                    }
                    bar_thread.set_position(elapsed.as_millis().try_into().unwrap_or(u64::MAX));
                    bar_thread.set_message(format!("{:.0}s, {samples} samples", d.as_secs_f64()));
                }
                Span::UntilExit => bar_thread.set_message(format!("{samples} samples")),
            }
            bar_thread.tick();
            std::thread::sleep(Duration::from_millis(100).min(match span {
                Span::For(d) => d.saturating_sub(elapsed).max(Duration::from_millis(1)),
                Span::UntilExit => Duration::from_millis(100),
            }));
        }
    });
    let mut hooks = hooks;
    hooks.controllers.push(controller);
    hooks
        .host_profiles
        .extend(opts.host_profiles.iter().cloned());
    hooks.interval = opts.interval.or(hooks.interval);
    let report = run_with(config, hooks);
    bar.finish_and_clear();
    report
}
