//! Which triggers each vCPU arms. The guest's started objects and the host-side profiles each
//! claim a trigger on the vCPUs they sample; a vCPU arms a trigger while any claim on it
//! stands, and re-reads its settings whenever the generation changes. A claim that needs the
//! vCPU's registers (a process restriction, call stacks, guest thread names) is also counted
//! apart: while one stands, the in-kernel sampler cannot serve that trigger on that vCPU.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::sampler::{Sampling, TriggerId};
use crate::signals::KickTable;

/// The VM's triggers and every vCPU's claims on them.
pub struct Triggers {
    /// What the vCPUs sample on: ProfileTime's clock and the events present here.
    sampling: Arc<Sampling>,
    /// Per vCPU, per trigger: the started objects and running host profiles that sample the
    /// vCPU on it; the vCPU arms the trigger while its count is above zero.
    claims: Box<[Box<[AtomicU32]>]>,
    /// The same, of the claims that need registers.
    register_claims: Box<[Box<[AtomicU32]>]>,
    generation: AtomicU64,
    /// Only to make vCPUs re-read their timer settings: the profiler cannot pause or stop them.
    kicks: Arc<KickTable>,
}

impl Triggers {
    /// `sampling`'s triggers on one vCPU per slot of `kicks`, none claimed.
    pub fn new(sampling: Arc<Sampling>, kicks: Arc<KickTable>) -> Self {
        let (vcpus, triggers) = (kicks.len(), sampling.len());
        let table = || {
            (0..vcpus)
                .map(|_| (0..triggers).map(|_| AtomicU32::new(0)).collect())
                .collect()
        };
        Triggers {
            claims: table(),
            register_claims: table(),
            generation: AtomicU64::new(0),
            sampling,
            kicks,
        }
    }

    /// The VM's triggers.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// Number of vCPUs.
    pub fn vcpu_count(&self) -> usize {
        self.claims.len()
    }

    /// True while something claims trigger `t` on vCPU `v`.
    pub fn is_sampled(&self, v: usize, t: TriggerId) -> bool {
        self.claims
            .get(v)
            .and_then(|c| c.get(t))
            .is_some_and(|c| c.load(Ordering::Acquire) > 0)
    }

    /// True while a claim on trigger `t` of vCPU `v` needs the vCPU's registers.
    pub fn needs_registers(&self, v: usize, t: TriggerId) -> bool {
        self.register_claims
            .get(v)
            .and_then(|c| c.get(t))
            .is_some_and(|c| c.load(Ordering::Acquire) > 0)
    }

    /// Changes whenever the triggers' settings change.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Tells every vCPU to re-read its timer setting. A vCPU reads the generation before each
    /// `KVM_RUN`; one inside `KVM_RUN` is kicked out, and one not yet in the kick table has not
    /// entered the guest yet, so none misses the change.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.kicks.kick_all();
    }

    /// Adds or removes one claim on trigger `t` of the vCPUs `covers` selects (one that
    /// needs their registers if `registers`), and has the vCPUs whose need changed re-arm it.
    pub fn claim(&self, t: TriggerId, covers: impl Fn(usize) -> bool, add: bool, registers: bool) {
        let mut changed = false;
        let tables = [
            Some(&self.claims),
            registers.then_some(&self.register_claims),
        ];
        for table in tables.into_iter().flatten() {
            for (_, claims) in table.iter().enumerate().filter(|(v, _)| covers(*v)) {
                let Some(count) = claims.get(t) else {
                    continue;
                };
                // The trigger's need changes exactly when the count leaves or reaches zero;
                // one atomic read-modify-write decides it, whichever lock the caller holds.
                changed |= if add {
                    count.fetch_add(1, Ordering::AcqRel) == 0
                } else {
                    count.fetch_sub(1, Ordering::AcqRel) == 1
                };
            }
        }
        if changed {
            self.changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn triggers(vcpus: usize) -> Triggers {
        Triggers::new(
            Arc::new(Sampling::timer_only()),
            Arc::new(KickTable::new(vcpus)),
        )
    }

    #[test]
    fn a_vcpu_re_arms_only_when_a_trigger_s_first_claim_comes_or_last_goes() {
        let t = triggers(2);
        let g = t.generation();
        t.claim(0, |v| v == 1, true, false);
        assert!(t.is_sampled(1, 0) && !t.is_sampled(0, 0));
        assert_eq!(t.generation(), g + 1);
        t.claim(0, |v| v == 1, true, false);
        assert_eq!(t.generation(), g + 1, "a second claim changes no setting");
        t.claim(0, |v| v == 1, false, false);
        assert!(t.is_sampled(1, 0));
        assert_eq!(t.generation(), g + 1);
        t.claim(0, |v| v == 1, false, false);
        assert!(!t.is_sampled(1, 0));
        assert_eq!(t.generation(), g + 2);
        assert!(
            !t.is_sampled(2, 0) && !t.is_sampled(0, 1),
            "no such vCPU or trigger"
        );
    }

    #[test]
    fn a_claim_that_needs_registers_is_counted_apart_until_it_goes() {
        let t = triggers(2);
        t.claim(0, |_| true, true, false);
        assert!(!t.needs_registers(0, 0));
        let g = t.generation();
        t.claim(0, |v| v == 0, true, true);
        assert!(t.needs_registers(0, 0) && !t.needs_registers(1, 0));
        assert_eq!(t.generation(), g + 1, "vCPU 0 re-arms: kicks now");
        t.claim(0, |v| v == 0, false, true);
        assert!(!t.needs_registers(0, 0) && t.is_sampled(0, 0));
        assert_eq!(t.generation(), g + 2, "and back to the kernel's samples");
    }
}
