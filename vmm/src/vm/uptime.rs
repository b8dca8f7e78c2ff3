//! The guest's running time: wall time since the run's start (its one clock), less the time they spent
//! paused (the control API's pause). `hvprof profile --duration` counts this, not wall time,
//! so a pause does not eat into the profile.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Running time, shared by the run's controllers: the one that pauses and resumes the vCPUs
/// says so here, the others read it.
#[derive(Debug)]
pub struct Uptime {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    started: Instant,
    paused_since: Option<Instant>,
    paused_before: Duration,
}

impl Uptime {
    /// Starts counting now.
    pub fn start() -> Self {
        Self::start_at(Instant::now())
    }

    /// Starts counting at `started` (the run's start: [`crate::clock::RunClock`]).
    pub fn start_at(started: Instant) -> Self {
        Uptime {
            state: Mutex::new(State {
                started,
                paused_since: None,
                paused_before: Duration::ZERO,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The vCPUs were paused; a second pause without a resume changes nothing.
    pub fn pause(&self) {
        self.pause_at(Instant::now());
    }

    fn pause_at(&self, now: Instant) {
        let mut s = self.lock();
        s.paused_since.get_or_insert(now);
    }

    /// The vCPUs run again.
    pub fn resume(&self) {
        self.resume_at(Instant::now());
    }

    fn resume_at(&self, now: Instant) {
        let mut s = self.lock();
        if let Some(since) = s.paused_since.take() {
            s.paused_before += now.saturating_duration_since(since);
        }
    }

    /// Whether the vCPUs are paused.
    pub fn is_paused(&self) -> bool {
        self.lock().paused_since.is_some()
    }

    /// Time the guest has been running.
    pub fn running(&self) -> Duration {
        self.running_at(Instant::now())
    }

    fn running_at(&self, now: Instant) -> Duration {
        let s = self.lock();
        let paused_now = s
            .paused_since
            .map_or(Duration::ZERO, |p| now.saturating_duration_since(p));
        now.saturating_duration_since(s.started)
            .saturating_sub(s.paused_before + paused_now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_time_does_not_count() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let u = Uptime::start_at(t0);
        assert_eq!(u.running_at(s(3)), Duration::from_secs(3));
        u.pause_at(s(3));
        assert!(u.is_paused());
        assert_eq!(u.running_at(s(10)), Duration::from_secs(3));
        // A second pause keeps the first one's start.
        u.pause_at(s(5));
        u.resume_at(s(10));
        assert!(!u.is_paused());
        assert_eq!(u.running_at(s(12)), Duration::from_secs(5));
        // A resume without a pause changes nothing.
        u.resume_at(s(13));
        assert_eq!(u.running_at(s(14)), Duration::from_secs(7));
    }
}
