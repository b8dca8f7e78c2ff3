//! Which triggers each vCPU arms. The guest's started objects and the host-side profiles each
//! claim a trigger on the vCPUs they sample; a vCPU arms a trigger while any claim on it
//! stands, and re-reads its settings whenever the generation changes. A claim that needs the
//! vCPU's registers (a process restriction, call stacks, guest thread names) is also counted
//! apart: while one stands, the in-kernel sampler cannot serve that trigger on that vCPU. A
//! claim that needs registers only every so often (a host profile with a kick interval) is
//! kept apart again, with its interval: the in-kernel sampler serves the trigger's other
//! claims while kicks at the shortest such interval serve those.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sampler::{Sampling, TriggerId};
use crate::signals::KickTable;

/// What a claim needs of each sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Its PC and privilege level: the in-kernel sampler can serve it.
    Flat,
    /// The vCPU's registers, at the trigger's interval: kicks.
    Registers,
    /// The vCPU's registers, at this interval (the trigger's unit) or a longer one: kicks at
    /// their own rate, beside the in-kernel sampler's samples for the flat claims.
    RegistersEvery(u32),
}

/// The kick intervals of one trigger's `RegistersEvery` claims on one vCPU, each with the
/// claims that asked for it.
type Slow = BTreeMap<u32, u32>;

/// The VM's triggers and every vCPU's claims on them.
pub struct Triggers {
    /// What the vCPUs sample on: ProfileTime's clock and the events present here.
    sampling: Arc<Sampling>,
    /// Per vCPU, per trigger: the started objects and running host profiles that sample the
    /// vCPU on it; the vCPU arms the trigger while its count is above zero.
    claims: Box<[Box<[AtomicU32]>]>,
    /// The same, of the claims that need registers at the trigger's interval.
    register_claims: Box<[Box<[AtomicU32]>]>,
    /// Per vCPU, per trigger: the claims that need registers at an interval of their own.
    slow: Mutex<Vec<Vec<Slow>>>,
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
            slow: Mutex::new(vec![vec![Slow::new(); triggers]; vcpus]),
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

    /// The shortest kick interval of the claims on trigger `t` of vCPU `v` that need
    /// registers at an interval of their own, and how many such claims there are.
    pub fn slow(&self, v: usize, t: TriggerId) -> Option<(u32, u32)> {
        let slow = self.slow.lock().unwrap_or_else(|e| e.into_inner());
        let claims = slow.get(v)?.get(t)?;
        let (&interval, _) = claims.first_key_value()?;
        Some((interval, claims.values().sum()))
    }

    /// True while some claim on trigger `t` of vCPU `v` needs only PCs and privilege levels.
    pub fn has_flat_claims(&self, v: usize, t: TriggerId) -> bool {
        let count = |table: &[Box<[AtomicU32]>]| {
            table
                .get(v)
                .and_then(|c| c.get(t))
                .map_or(0, |c| c.load(Ordering::Acquire))
        };
        let slow = self.slow(v, t).map_or(0, |(_, n)| n);
        count(&self.claims) > count(&self.register_claims) + slow
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

    /// What vCPU `v` arms trigger `t` by: whether anything samples it, anything needs
    /// registers at its interval, the shortest kick interval, and whether flat claims stand.
    fn setting(&self, v: usize, t: TriggerId) -> (bool, bool, Option<u32>, bool) {
        (
            self.is_sampled(v, t),
            self.needs_registers(v, t),
            self.slow(v, t).map(|(every, _)| every),
            self.has_flat_claims(v, t),
        )
    }

    /// Adds or removes one claim on trigger `t` of the vCPUs `covers` selects, needing `need`
    /// of each sample, and has the vCPUs whose settings changed re-arm it.
    pub fn claim(&self, t: TriggerId, covers: impl Fn(usize) -> bool, add: bool, need: Need) {
        let covered: Vec<usize> = (0..self.vcpu_count()).filter(|&v| covers(v)).collect();
        let before: Vec<_> = covered.iter().map(|&v| self.setting(v, t)).collect();
        let bump = |table: &[Box<[AtomicU32]>], v: usize| {
            if let Some(count) = table.get(v).and_then(|c| c.get(t)) {
                if add {
                    count.fetch_add(1, Ordering::AcqRel);
                } else {
                    count.fetch_sub(1, Ordering::AcqRel);
                }
            }
        };
        for &v in &covered {
            bump(&self.claims, v);
            match need {
                Need::Flat => {}
                Need::Registers => bump(&self.register_claims, v),
                Need::RegistersEvery(interval) => {
                    let mut slow = self.slow.lock().unwrap_or_else(|e| e.into_inner());
                    let Some(claims) = slow.get_mut(v).and_then(|s| s.get_mut(t)) else {
                        continue;
                    };
                    if add {
                        *claims.entry(interval).or_default() += 1;
                    } else if let Some(n) = claims.get_mut(&interval) {
                        *n -= 1;
                        if *n == 0 {
                            claims.remove(&interval);
                        }
                    }
                }
            }
        }
        let after: Vec<_> = covered.iter().map(|&v| self.setting(v, t)).collect();
        if before != after {
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
        t.claim(0, |v| v == 1, true, Need::Flat);
        assert!(t.is_sampled(1, 0) && !t.is_sampled(0, 0));
        assert_eq!(t.generation(), g + 1);
        t.claim(0, |v| v == 1, true, Need::Flat);
        assert_eq!(t.generation(), g + 1, "a second claim changes no setting");
        t.claim(0, |v| v == 1, false, Need::Flat);
        assert!(t.is_sampled(1, 0));
        assert_eq!(t.generation(), g + 1);
        t.claim(0, |v| v == 1, false, Need::Flat);
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
        t.claim(0, |_| true, true, Need::Flat);
        assert!(!t.needs_registers(0, 0));
        let g = t.generation();
        t.claim(0, |v| v == 0, true, Need::Registers);
        assert!(t.needs_registers(0, 0) && !t.needs_registers(1, 0));
        assert_eq!(t.generation(), g + 1, "vCPU 0 re-arms: kicks now");
        t.claim(0, |v| v == 0, false, Need::Registers);
        assert!(!t.needs_registers(0, 0) && t.is_sampled(0, 0));
        assert_eq!(t.generation(), g + 2, "and back to the kernel's samples");
    }

    #[test]
    fn claims_with_a_kick_interval_keep_the_shortest_and_leave_the_flat_ones_flat() {
        let t = triggers(2);
        assert!(!t.has_flat_claims(0, 0) && t.slow(0, 0).is_none());
        t.claim(0, |_| true, true, Need::RegistersEvery(5000));
        assert!(t.is_sampled(0, 0) && !t.needs_registers(0, 0));
        assert_eq!(t.slow(0, 0), Some((5000, 1)));
        assert!(!t.has_flat_claims(0, 0), "its only claim needs registers");
        let g = t.generation();
        t.claim(0, |v| v == 0, true, Need::Flat);
        assert!(t.has_flat_claims(0, 0) && !t.has_flat_claims(1, 0));
        assert_eq!(t.generation(), g + 1, "vCPU 0 re-arms: its ring too");
        let g = t.generation();
        t.claim(0, |v| v == 1, true, Need::RegistersEvery(2000));
        assert_eq!(
            (t.slow(0, 0), t.slow(1, 0)),
            (Some((5000, 1)), Some((2000, 2)))
        );
        assert_eq!(t.generation(), g + 1, "vCPU 1's kicks come faster");
        let g = t.generation();
        t.claim(0, |_| true, false, Need::RegistersEvery(5000));
        assert_eq!((t.slow(0, 0), t.slow(1, 0)), (None, Some((2000, 1))));
        assert_eq!(t.generation(), g + 1, "vCPU 0 has no kicks left");
        assert!(t.is_sampled(0, 0) && t.has_flat_claims(0, 0));
    }
}
