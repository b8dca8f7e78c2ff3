//! The vCPU thread's states and the requests that move it between them.
//!
//! ```text
//! Running --Pause--> Paused --Resume--> Running
//! Running or Paused --Stop--> Exited
//! Running --an exit that ends the run (shutdown, debug exit, error)--> Exited
//! ```
//!
//! Probe leaves the state as it is; Pause while paused and Resume while running change
//! nothing but are answered. Only `Running` enters the guest.

use std::sync::mpsc::Sender;

use super::Probe;

/// Requests to a vCPU thread.
#[derive(Debug)]
pub enum Request {
    /// Report the vCPU's state on the channel.
    Probe(Sender<Probe>),
    /// Stop running the guest until `Resume`; the vCPU index is sent once it is paused.
    Pause(Sender<usize>),
    /// Run the guest again after `Pause`.
    Resume,
    /// Leave the run loop.
    Stop,
}

/// Where the vCPU thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Taking requests, then entering the guest.
    Running,
    /// Outside the guest, blocked on the next request.
    Paused,
    /// Left its run loop; the thread ends.
    Exited,
}

impl State {
    /// The state `req` leads to from this one.
    pub(super) fn after(self, req: &Request) -> State {
        match (self, req) {
            (State::Exited, _) | (_, Request::Stop) => State::Exited,
            (state, Request::Probe(_)) => state,
            (_, Request::Pause(_)) => State::Paused,
            (_, Request::Resume) => State::Running,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    fn all_requests() -> Vec<Request> {
        vec![
            Request::Probe(channel().0),
            Request::Pause(channel().0),
            Request::Resume,
            Request::Stop,
        ]
    }

    #[test]
    fn pause_and_resume() {
        let pause = Request::Pause(channel().0);
        assert_eq!(State::Running.after(&pause), State::Paused);
        assert_eq!(State::Paused.after(&pause), State::Paused);
        assert_eq!(State::Paused.after(&Request::Resume), State::Running);
        assert_eq!(State::Running.after(&Request::Resume), State::Running);
    }

    #[test]
    fn probes_change_nothing() {
        for s in [State::Running, State::Paused, State::Exited] {
            assert_eq!(s.after(&Request::Probe(channel().0)), s);
        }
    }

    #[test]
    fn stop_ends_from_every_state_and_nothing_leaves_exited() {
        for s in [State::Running, State::Paused, State::Exited] {
            assert_eq!(s.after(&Request::Stop), State::Exited);
        }
        for r in all_requests() {
            assert_eq!(State::Exited.after(&r), State::Exited);
        }
    }
}
