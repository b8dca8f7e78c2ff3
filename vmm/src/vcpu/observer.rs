//! A window on a vCPU thread for measurements: `hvprof bench` times how long a kicked vCPU
//! takes to be back in KVM_RUN, and signals a perf event's overflow to it. Production runs
//! have no observer; the run loop then pays one `None` check per guest entry.

use std::os::fd::RawFd;

use crate::profiler::host_profiles::WalkObserver;
use crate::sampler::TriggerId;

/// Called on a vCPU's own thread at the points a measurement needs, the stack walks of its
/// samples included. Every method does nothing unless an observer overrides it.
pub trait VcpuObserver: WalkObserver {
    /// vCPU `vcpu` is about to enter the guest (`KVM_RUN`).
    fn entering(&self, vcpu: usize) {
        let _ = vcpu;
    }

    /// vCPU `vcpu`'s thread has set up its trigger `trigger`: `fd` is the descriptor of the
    /// trigger's perf event on that thread (None: not a perf event, or it could not open).
    fn trigger_opened(&self, vcpu: usize, trigger: TriggerId, fd: Option<RawFd>) {
        let _ = (vcpu, trigger, fd);
    }
}
