//! [`ObjectManager`]: the table of profile objects and the operations on them.

use alloc::vec::Vec;

use super::checks::validate_create;
use super::index::{Index, Rec};
use super::intervals::Intervals;
use super::{
    AffinityArg, CallerRights, CreateParams, ObjectConfig, PinRequest, PlatformInfo, Started,
};
use crate::affinity::{GroupAffinity, KAffinity, MAX_GROUPS, PROCESSORS_PER_GROUP};
use crate::attribution::{bucket_offset, CounterSink, Sample};
use crate::handle::{AccessMask, Handle, ObjectId, Owner};
use crate::source::ProfileSource;
use crate::NtStatus;

/// One profile object: its configuration and whether it is started. (While it is started the
/// VMM's pin token lives in the index of started objects, beside the fields a sample reads.)
#[derive(Debug)]
pub struct ProfileObject {
    id: ObjectId,
    owner: Owner,
    access: AccessMask,
    config: ObjectConfig,
    started: bool,
}

impl ProfileObject {
    /// The object's lifetime identity.
    pub fn id(&self) -> ObjectId {
        self.id
    }
    /// The owner whose handle names it.
    pub fn owner(&self) -> Owner {
        self.owner
    }
    /// The access its handle grants.
    pub fn access(&self) -> AccessMask {
        self.access
    }
    /// Its validated configuration.
    pub fn config(&self) -> &ObjectConfig {
        &self.config
    }
    /// True while started.
    pub fn is_started(&self) -> bool {
        self.started
    }
}

/// The profile objects of one VM, with Windows 10's semantics.
///
/// `P` is the VMM's pin token: whatever it needs to find and later release the pinned counter
/// buffer (for example a list of host addresses). The manager stores it while the object is
/// started, hands a `&P` to the [`crate::attribution::CounterSink`] for each count, and hands it
/// back on stop or close. See the [module documentation](crate::object) for the protocol.
#[derive(Debug)]
pub struct ObjectManager<P> {
    platform: PlatformInfo,
    intervals: Intervals,
    slots: Vec<Option<ProfileObject>>,
    free: Vec<u32>,
    next_id: u64,
    started: u64,
    started_per_source: Vec<(ProfileSource, u32)>,
    index: Index<P>,
}

impl<P> ObjectManager<P> {
    /// A manager for `platform`. `STATUS_INVALID_PARAMETER` if the platform is inconsistent: no
    /// or more than 2048 processors, no `ProfileTime` source, or a source whose
    /// `min <= default <= max` does not hold.
    pub fn new(platform: PlatformInfo) -> Result<ObjectManager<P>, NtStatus> {
        let max_processors = u32::from(MAX_GROUPS) * PROCESSORS_PER_GROUP;
        let consistent = (1..=max_processors).contains(&platform.active_processors)
            && platform
                .sources
                .iter()
                .any(|s| s.source == ProfileSource::TIME)
            && platform.sources.iter().all(|s| {
                s.min_interval <= s.default_interval && s.default_interval <= s.max_interval
            });
        if !consistent {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        Ok(ObjectManager {
            intervals: Intervals::new(&platform.sources),
            platform,
            slots: Vec::new(),
            free: Vec::new(),
            next_id: 1,
            started: 0,
            started_per_source: Vec::new(),
            index: Index::default(),
        })
    }

    /// The platform the manager was made for.
    pub fn platform(&self) -> &PlatformInfo {
        &self.platform
    }

    /// True if the platform supports `source` (it can be created and sampled).
    pub fn is_supported(&self, source: ProfileSource) -> bool {
        self.platform.sources.iter().any(|s| s.source == source)
    }

    /// The most objects that may be started at once: 8192 x processors.
    pub fn started_limit(&self) -> u64 {
        u64::from(self.platform.started_limit_per_processor)
            * u64::from(self.platform.active_processors)
    }

    /// Objects started now.
    pub fn started_count(&self) -> u64 {
        self.started
    }

    /// Objects open now (started or not).
    pub fn open_count(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// How many started objects use `source`: the VMM samples a source while this is nonzero.
    pub fn started_for_source(&self, source: ProfileSource) -> u32 {
        self.started_per_source
            .iter()
            .find(|(s, _)| *s == source)
            .map_or(0, |(_, n)| *n)
    }

    /// NtCreateProfile: one `KAFFINITY` in the caller's current `group` (-1 = all active).
    pub fn create(
        &mut self,
        params: &CreateParams,
        group: u16,
        affinity: KAffinity,
    ) -> Result<Handle, NtStatus> {
        self.create_with(
            params,
            AffinityArg::KAffinity {
                group,
                mask: affinity,
            },
        )
    }

    /// NtCreateProfileEx: an array of `GROUP_AFFINITY` (empty = all active processors).
    pub fn create_ex(
        &mut self,
        params: &CreateParams,
        groups: &[GroupAffinity],
    ) -> Result<Handle, NtStatus> {
        self.create_with(params, AffinityArg::Groups(groups))
    }

    /// Either create call; the checks run in Windows' order (see `validate_create`).
    pub fn create_with(
        &mut self,
        params: &CreateParams,
        affinity: AffinityArg<'_>,
    ) -> Result<Handle, NtStatus> {
        let config = validate_create(params, affinity, &self.platform)?;
        let object = ProfileObject {
            id: ObjectId(self.next_id),
            owner: params.owner,
            access: params.access,
            config,
            started: false,
        };
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                // Handle values are (slot + 1) * 4 and must fit in 32 bits.
                if self.slots.len() >= (u32::MAX / 4 - 1) as usize {
                    return Err(NtStatus::INSUFFICIENT_RESOURCES);
                }
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?
            }
        };
        self.next_id += 1;
        self.slots[slot as usize] = Some(object);
        Ok(Handle((slot + 1) * 4))
    }

    fn slot_of(&self, owner: Owner, handle: Handle) -> Result<usize, NtStatus> {
        if handle.0 == 0 || handle.0 % 4 != 0 {
            return Err(NtStatus::INVALID_HANDLE);
        }
        let slot = (handle.0 / 4 - 1) as usize;
        match self.slots.get(slot) {
            Some(Some(object)) if object.owner == owner => Ok(slot),
            _ => Err(NtStatus::INVALID_HANDLE),
        }
    }

    /// The object `handle` names for `owner`; `STATUS_INVALID_HANDLE` otherwise.
    pub fn object(&self, owner: Owner, handle: Handle) -> Result<&ProfileObject, NtStatus> {
        let slot = self.slot_of(owner, handle)?;
        self.slots[slot].as_ref().ok_or(NtStatus::INVALID_HANDLE)
    }

    /// Every open object with its handle.
    pub fn objects(&self) -> impl Iterator<Item = (Handle, &ProfileObject)> {
        self.slots.iter().enumerate().filter_map(|(slot, o)| {
            let handle = Handle(u32::try_from(slot + 1).unwrap_or(0).wrapping_mul(4));
            o.as_ref().map(|o| (handle, o))
        })
    }

    /// NtStartProfile, with the pin step in the middle.
    ///
    /// Order: `STATUS_INVALID_HANDLE` (not this owner's handle), `STATUS_ACCESS_DENIED` (no
    /// `PROFILE_CONTROL`), `STATUS_PROFILING_NOT_STOPPED` (already started),
    /// `STATUS_PROFILING_AT_LIMIT` (8192 x processors started), then `pin` is called once with
    /// the whole buffer. A `pin` error (the VMM should use `STATUS_INSUFFICIENT_RESOURCES`) is
    /// returned unchanged and leaves the object stopped. Then the object is committed: from the
    /// return of `start`, `record` counts for it.
    pub fn start<F>(&mut self, owner: Owner, handle: Handle, pin: F) -> Result<Started, NtStatus>
    where
        F: FnOnce(&PinRequest) -> Result<P, NtStatus>,
    {
        let slot = self.slot_of(owner, handle)?;
        let limit = self.started_limit();
        let object = self.slots[slot].as_mut().ok_or(NtStatus::INVALID_HANDLE)?;
        if !object.access.grants(AccessMask::PROFILE_CONTROL) {
            return Err(NtStatus::ACCESS_DENIED);
        }
        if object.started {
            return Err(NtStatus::PROFILING_NOT_STOPPED);
        }
        if self.started >= limit {
            return Err(NtStatus::PROFILING_AT_LIMIT);
        }
        let request = PinRequest {
            object: object.id,
            owner: object.owner,
            process: object.config.process,
            buffer: object.config.buffer,
            buffer_size: object.config.buffer_size,
            counters_len: object.config.counters_len(),
        };
        let slot32 = u32::try_from(slot).map_err(|_| NtStatus::INVALID_HANDLE)?;
        let token = pin(&request)?;
        object.started = true;
        let started = Started {
            object: object.id,
            source: object.config.source,
        };
        self.index.insert(slot32, object.id, &object.config, token);
        self.started += 1;
        self.count_source(started.source, true);
        Ok(started)
    }

    /// NtStopProfile: `STATUS_INVALID_HANDLE`, `STATUS_ACCESS_DENIED`, then
    /// `STATUS_PROFILING_NOT_STARTED`; otherwise the object leaves the index and its pin token is
    /// handed back for the VMM to release. The object stays open and may be started again.
    pub fn stop(&mut self, owner: Owner, handle: Handle) -> Result<P, NtStatus> {
        let slot = self.slot_of(owner, handle)?;
        let object = self.slots[slot].as_ref().ok_or(NtStatus::INVALID_HANDLE)?;
        if !object.access.grants(AccessMask::PROFILE_CONTROL) {
            return Err(NtStatus::ACCESS_DENIED);
        }
        if !object.started {
            return Err(NtStatus::PROFILING_NOT_STARTED);
        }
        self.unstart(slot).ok_or(NtStatus::PROFILING_NOT_STARTED)
    }

    /// Closing the handle: stops the object if started (handing back the pin token) and deletes
    /// it. Needs no access right; `STATUS_INVALID_HANDLE` if `handle` is not this owner's.
    pub fn close(&mut self, owner: Owner, handle: Handle) -> Result<Option<P>, NtStatus> {
        let slot = self.slot_of(owner, handle)?;
        let pin = self.unstart(slot);
        self.slots[slot] = None;
        self.free
            .push(u32::try_from(slot).map_err(|_| NtStatus::INVALID_HANDLE)?);
        Ok(pin)
    }

    /// Closes every object of `owner` (guest reset, agent gone); returns the pin tokens of
    /// those that were started.
    pub fn close_all(&mut self, owner: Owner) -> Vec<P> {
        let mut pins = Vec::new();
        for slot in 0..self.slots.len() {
            if matches!(&self.slots[slot], Some(o) if o.owner == owner) {
                if let Some(pin) = self.unstart(slot) {
                    pins.push(pin);
                }
                self.slots[slot] = None;
                if let Ok(slot) = u32::try_from(slot) {
                    self.free.push(slot);
                }
            }
        }
        pins
    }

    fn unstart(&mut self, slot: usize) -> Option<P> {
        let object = self.slots[slot].as_mut()?;
        if !object.started {
            return None;
        }
        object.started = false;
        let (id, source, process) = (object.id, object.config.source, object.config.process);
        let slot32 = u32::try_from(slot).ok()?;
        let pin = self.index.remove(slot32, id, process);
        debug_assert!(pin.is_some(), "a started object is in the index");
        self.started -= 1;
        self.count_source(source, false);
        pin
    }

    fn count_source(&mut self, source: ProfileSource, up: bool) {
        match self
            .started_per_source
            .iter()
            .position(|(s, _)| *s == source)
        {
            Some(i) if up => self.started_per_source[i].1 += 1,
            Some(i) => {
                self.started_per_source[i].1 -= 1;
                if self.started_per_source[i].1 == 0 {
                    self.started_per_source.swap_remove(i);
                }
            }
            None if up => self.started_per_source.push((source, 1)),
            None => {}
        }
    }

    /// NtSetIntervalProfile: `STATUS_PRIVILEGE_NOT_HELD` without `SeSystemProfilePrivilege`;
    /// otherwise succeeds and returns the interval now in force: clamped to the source's
    /// [min, max]; for an unsupported source nothing changes and 0 is returned; for
    /// ProfileAlignmentFixup the value is stored as given. Intervals are global per source.
    pub fn set_interval(
        &mut self,
        caller: CallerRights,
        source: ProfileSource,
        interval: u32,
    ) -> Result<u32, NtStatus> {
        if !caller.system_profile_privilege {
            return Err(NtStatus::PRIVILEGE_NOT_HELD);
        }
        Ok(self.intervals.set(source, interval))
    }

    /// NtQueryIntervalProfile: always succeeds. 0 for an unsupported source; the last value set
    /// (0 if none) for ProfileAlignmentFixup.
    pub fn query_interval(&self, source: ProfileSource) -> u32 {
        self.intervals.query(source)
    }
    /// Counts `sample` into every started object that matches it; returns how many counted:
    /// the index's candidates for the PC, each checked against the rule of
    /// [`crate::attribution`].
    ///
    /// Takes `&self`: call it from any number of vCPU threads at once (under the read side of
    /// the lock whose write side `start`/`stop`/`close` take).
    #[inline]
    pub fn record<S: CounterSink<P>>(&self, sample: &Sample, sink: &mut S) -> u32 {
        let mut counted = 0;
        self.index.candidates(sample.pc, sample.process, |r| {
            counted += self.count_one(r, sample, sink);
        });
        counted
    }

    /// Applies the rule to one candidate; counts and returns 1 if it matches.
    fn count_one<S: CounterSink<P>>(&self, r: &Rec<P>, sample: &Sample, sink: &mut S) -> u32 {
        let pc = sample.pc;
        // The index yields only records whose range holds the PC; the range is checked again
        // here so that the offset below is in bounds by this function alone.
        if !(r.source == sample.source && pc >= r.base && pc < r.end) {
            return 0;
        }
        let in_affinity = if sample.vcpu < 64 {
            r.group0 >> sample.vcpu & 1 != 0
        } else {
            r.higher_groups
                && matches!(self.slots.get(r.slot as usize),
                    Some(Some(o)) if o.config().affinity.contains(sample.vcpu))
        };
        if !in_affinity {
            return 0;
        }
        let offset = bucket_offset(pc, r.base, u32::from(r.shift));
        if offset >= r.counters_len {
            return 0; // cannot happen for a validated object; never write past the buffer
        }
        sink.increment(&r.pin, r.id, offset);
        1
    }

    /// Counts `sample` like [`ObjectManager::record`] but by walking every started object and
    /// applying the rule to each from the object's own configuration: O(n). The model the
    /// index is tested and benchmarked against. (It reaches the started objects through the
    /// index's records, where the pin tokens live, but uses none of the records' copied fields
    /// and no stabbing structure.)
    pub fn record_naive<S: CounterSink<P>>(&self, sample: &Sample, sink: &mut S) -> u32 {
        let mut counted = 0;
        let slots = &self.slots;
        debug_assert_eq!(
            self.index.len() as u64,
            self.started_count(),
            "every started object is in the index exactly once"
        );
        for entry in self.index.records() {
            let object = match slots.get(entry.slot as usize) {
                Some(Some(object)) if object.is_started() && object.id() == entry.id => object,
                _ => continue,
            };
            let pin = &entry.pin;
            let c = object.config();
            let process_matches = match c.process {
                None => true,
                Some(key) => sample.process == Some(key),
            };
            if process_matches
                && c.source == sample.source
                && c.affinity.contains(sample.vcpu)
                && c.base <= sample.pc
                && sample.pc < c.end()
            {
                sink.increment(
                    pin,
                    object.id(),
                    bucket_offset(sample.pc, c.base, c.bucket_size),
                );
                counted += 1;
            }
        }
        counted
    }
}
