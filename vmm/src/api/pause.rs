//! A pause in progress: the vCPUs have been asked to pause and the API waits for each to say it
//! has, without blocking the serving loop (other clients are answered meanwhile). The loop asks
//! [`PendingPause::poll`] on each wake-up until it has the pause's answer.

use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use crate::vcpu::{Request as VcpuRequest, VcpuRequester};

/// The longest a pause waits for the vCPUs to acknowledge it.
pub const PAUSE_BOUND: Duration = Duration::from_secs(5);

/// How a pause ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseEnd {
    /// Every vCPU acknowledged it.
    Paused,
    /// Some did not (gone, or not within the bound, or the run ended first); the others are
    /// paused.
    Partial {
        /// vCPUs that acknowledged.
        acked: usize,
        /// vCPUs in the VM.
        of: usize,
    },
}

/// The vCPUs asked to pause, their acknowledgements not all in yet.
#[derive(Debug)]
pub struct PendingPause {
    acks: Receiver<usize>,
    asked: usize,
    acked: usize,
    vcpus: usize,
    deadline: Instant,
}

impl PendingPause {
    /// Asks every vCPU of `vcpus` to pause, now; the answer is due within `bound`.
    pub fn start(vcpus: &[VcpuRequester], bound: Duration) -> Self {
        let (tx, acks) = channel();
        let asked = vcpus
            .iter()
            .filter(|v| v.request(VcpuRequest::Pause(tx.clone())))
            .count();
        PendingPause {
            acks,
            asked,
            acked: 0,
            vcpus: vcpus.len(),
            deadline: Instant::now() + bound,
        }
    }

    /// Takes the acknowledgements that came in; the pause's end once every vCPU asked has
    /// acknowledged, the bound has passed, or `run_over`.
    pub fn poll(&mut self, now: Instant, run_over: bool) -> Option<PauseEnd> {
        let mut gone = false;
        while self.acked < self.asked {
            match self.acks.try_recv() {
                Ok(_) => self.acked += 1,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    gone = true;
                    break;
                }
            }
        }
        let waiting = self.acked < self.asked && !gone && !run_over && now < self.deadline;
        if waiting {
            return None;
        }
        Some(if self.acked == self.vcpus {
            PauseEnd::Paused
        } else {
            PauseEnd::Partial {
                acked: self.acked,
                of: self.vcpus,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_ends_when_every_vcpu_has_acknowledged() {
        let (a, ra) = VcpuRequester::detached(0);
        let (b, rb) = VcpuRequester::detached(1);
        let mut p = PendingPause::start(&[a, b], PAUSE_BOUND);
        let now = Instant::now();
        assert_eq!(p.poll(now, false), None, "nobody acknowledged yet");
        let ack = |r: &Receiver<VcpuRequest>, i| match r.try_recv() {
            Ok(VcpuRequest::Pause(tx)) => tx.send(i).unwrap(),
            other => panic!("not a pause: {other:?}"),
        };
        ack(&ra, 0);
        assert_eq!(p.poll(now, false), None, "one of two");
        ack(&rb, 1);
        assert_eq!(p.poll(now, false), Some(PauseEnd::Paused));
    }

    #[test]
    fn a_pause_not_acknowledged_ends_at_its_bound_or_with_the_run() {
        let (a, _ra) = VcpuRequester::detached(0);
        let mut p = PendingPause::start(&[a], Duration::from_secs(60));
        let now = Instant::now();
        assert_eq!(p.poll(now, false), None);
        let partial = Some(PauseEnd::Partial { acked: 0, of: 1 });
        assert_eq!(p.poll(now, true), partial, "the run ended");
        assert_eq!(p.poll(now + Duration::from_secs(61), false), partial);
    }

    #[test]
    fn a_vcpu_that_left_its_loop_is_not_waited_for() {
        let (a, ra) = VcpuRequester::detached(0);
        let (b, rb) = VcpuRequester::detached(1);
        drop(rb);
        let mut p = PendingPause::start(&[a, b], Duration::from_secs(60));
        match ra.try_recv() {
            Ok(VcpuRequest::Pause(tx)) => tx.send(0).unwrap(),
            other => panic!("not a pause: {other:?}"),
        }
        assert_eq!(
            p.poll(Instant::now(), false),
            Some(PauseEnd::Partial { acked: 1, of: 2 })
        );
    }
}
