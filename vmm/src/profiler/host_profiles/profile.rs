//! Host-side profiles: profiles the VMM owns, which need no agent in the guest. Each covers a
//! range of guest-virtual addresses (by default the whole address space), optionally only one
//! process (CR3) and some vCPUs, in buckets of 2^shift bytes. Counts live in VMM memory, one
//! sparse map per vCPU (no lock is shared between vCPUs on the sample path), merged when read.
//! With a stack depth, each sample also counts its call stack, in a bounded table per vCPU.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use introspect::Stack;

use super::guest_awareness::process_table::ThreadRef;
use crate::outcome::{Blame, Fault};
use profile_core::attribution::process_key;

/// What a host-side profile samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostProfileSpec {
    /// First address (inclusive).
    pub start: u64,
    /// Last address (inclusive), so the whole space is `0..=u64::MAX`.
    pub last: u64,
    /// log2 of the bucket size in bytes (0..=63).
    pub bucket_shift: u32,
    /// Only samples whose CR3 has this process key (PCID bits ignored).
    pub cr3: Option<u64>,
    /// Only these vCPUs (None: all).
    pub vcpus: Option<Vec<usize>>,
    /// Only samples taken at this privilege level (3: user mode, 0: kernel), None: any.
    pub cpl: Option<u8>,
    /// Call-stack frames kept per sample (the sampled PC included); 0: no stacks.
    pub stack_depth: usize,
    /// The perf event whose overflows take the samples (`hvprof events` lists them); None:
    /// ProfileTime's clock.
    pub event: Option<String>,
    /// Only samples in a guest process of one of these names (empty: any): matched against
    /// the process's name as the guest kernel keeps it (ImageFileName, comm), ignoring ASCII
    /// case, as processes appear. A sample whose process is not named does not count.
    pub process: Vec<String>,
    /// Record every sample it counts on the run's time axis, with the run's markers
    /// (`profiler::timeline`).
    pub timeline: bool,
    /// Count each sample per guest thread while guest awareness is on (which needs each
    /// sample's registers); false keeps a profile without a filter or stacks flat.
    pub names: bool,
    /// Where the in-kernel sampler serves its trigger, take this profile's samples (if they
    /// need registers) by kicks at this interval, in its trigger's unit, while the kernel's
    /// samples at the trigger's interval serve the flat claims; None: at the trigger's
    /// interval, by kicks for every claim on it.
    pub kick_interval: Option<u32>,
}

/// Process names a profile may be restricted to.
pub const MAX_PROCESS_NAMES: usize = 64;
/// The longest process name accepted, in bytes.
pub const MAX_PROCESS_NAME: usize = 255;

/// Frames kept per sample unless the user says otherwise.
pub const DEFAULT_STACK_DEPTH: usize = 64;
/// Frames a stack may keep: `--stack-depth` above this is refused.
pub const MAX_STACK_DEPTH: usize = 1024;
/// Frames of distinct stacks one vCPU's table of a profile holds (8 MiB of PCs); a new stack
/// beyond that is counted as dropped (its flat count is kept).
const MAX_STACK_FRAMES: usize = 1 << 20;

impl HostProfileSpec {
    /// The whole guest address space, all processes and vCPUs, in 16-byte buckets.
    pub fn whole_space() -> Self {
        HostProfileSpec {
            start: 0,
            last: u64::MAX,
            bucket_shift: 4,
            cr3: None,
            vcpus: None,
            cpl: None,
            stack_depth: DEFAULT_STACK_DEPTH,
            event: None,
            process: Vec::new(),
            timeline: false,
            names: true,
            kick_interval: None,
        }
    }

    /// Checks the values a user can get wrong.
    pub fn validate(&self) -> Result<(), HostProfileError> {
        if self.start > self.last {
            return Err(HostProfileError::EmptyRange);
        }
        if self.bucket_shift > 63 {
            return Err(HostProfileError::BucketShift(self.bucket_shift));
        }
        if self.cpl.is_some_and(|c| c > 3) {
            return Err(HostProfileError::Cpl);
        }
        if self.stack_depth > MAX_STACK_DEPTH {
            return Err(HostProfileError::StackDepth(self.stack_depth));
        }
        if self.kick_interval == Some(0) {
            return Err(HostProfileError::KickInterval);
        }
        if !self.process.is_empty() && self.cr3.is_some() {
            return Err(HostProfileError::ProcessAndCr3);
        }
        if self.process.len() > MAX_PROCESS_NAMES
            || self
                .process
                .iter()
                .any(|n| n.is_empty() || n.len() > MAX_PROCESS_NAME)
        {
            return Err(HostProfileError::ProcessName);
        }
        Ok(())
    }

    /// True if a sample needs only its PC and privilege level to count here: no CR3 or
    /// process filter and no stacks (what the in-kernel sampler can serve).
    pub fn flat(&self) -> bool {
        self.cr3.is_none() && self.process.is_empty() && self.stack_depth == 0
    }

    /// True if a sample in the process named `name` (None: not named) may count.
    fn covers_process(&self, name: Option<&str>) -> bool {
        self.process.is_empty()
            || name.is_some_and(|n| self.process.iter().any(|p| names_match(p, n)))
    }

    fn covers_vcpu(&self, v: usize) -> bool {
        self.vcpus.as_ref().is_none_or(|set| set.contains(&v))
    }

    fn bucket_at(&self, at: &SampleAt) -> Option<u64> {
        if !self.covers_process(at.who.map(|(_, name)| name)) {
            return None;
        }
        self.bucket(at.pc, at.cr3, at.cpl)
    }

    fn bucket(&self, pc: u64, cr3: u64, cpl: u8) -> Option<u64> {
        if pc < self.start || pc > self.last || self.cpl.is_some_and(|want| want != cpl) {
            return None;
        }
        if self
            .cr3
            .is_some_and(|want| process_key(want) != process_key(cr3))
        {
            return None;
        }
        Some((pc - self.start) >> self.bucket_shift)
    }
}

/// A bad host profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostProfileError {
    /// Start after end.
    #[error("the profile's range is empty")]
    EmptyRange,
    /// Bucket size.
    #[error("bucket shift {0} is over 63")]
    BucketShift(u32),
    /// A privilege level above 3.
    #[error("the privilege level filter must be 0..=3")]
    Cpl,
    /// A stack depth above [`MAX_STACK_DEPTH`].
    #[error("stack depth {0} is over {MAX_STACK_DEPTH}")]
    StackDepth(usize),
    /// A kick interval of 0.
    #[error("a kick interval must be at least 1")]
    KickInterval,
    /// Both a process name and a CR3.
    #[error("a host profile is restricted by process name or by CR3, not both")]
    ProcessAndCr3,
    /// An empty or too long process name, or too many.
    #[error(
        "process names must be 1 to {MAX_PROCESS_NAME} bytes, at most {MAX_PROCESS_NAMES} of them"
    )]
    ProcessName,
    /// A process filter in a run where no guest process can ever be named: it would count
    /// nothing.
    #[error(
        "a host profile restricted to guest processes by name counts nothing in this run: {0}"
    )]
    NoProcessNames(&'static str),
    /// No such profile.
    #[error("no host profile {0}")]
    Unknown(u32),
    /// It was stopped already.
    #[error("host profile {0} is stopped")]
    Stopped(u32),
    /// Its event is unknown or absent on this host.
    #[error(transparent)]
    Event(crate::sampler::SamplingError),
}

impl Blame for HostProfileError {
    /// A host-side profile is specified by the user (command line or API).
    fn fault(&self) -> Fault {
        match self {
            HostProfileError::EmptyRange
            | HostProfileError::BucketShift(_)
            | HostProfileError::Cpl
            | HostProfileError::StackDepth(_)
            | HostProfileError::KickInterval
            | HostProfileError::ProcessAndCr3
            | HostProfileError::ProcessName
            | HostProfileError::NoProcessNames(_)
            | HostProfileError::Unknown(_)
            | HostProfileError::Stopped(_)
            | HostProfileError::Event(_) => Fault::User,
        }
    }
}

/// True if the filter `want` names the process `name`: equal ignoring ASCII case, or, for a
/// name the kernel truncated (Windows keeps 14 characters of ImageFileName, Linux 15 of comm),
/// its start.
pub fn names_match(want: &str, name: &str) -> bool {
    want.eq_ignore_ascii_case(name)
        || (name.len() >= 14
            && want.len() > name.len()
            && want
                .get(..name.len())
                .is_some_and(|w| w.eq_ignore_ascii_case(name)))
}

/// A sample as the host profiles see it.
#[derive(Clone, Copy, Debug)]
pub struct SampleAt<'a> {
    /// The vCPU.
    pub v: usize,
    /// The sampled PC.
    pub pc: u64,
    /// CR3.
    pub cr3: u64,
    /// The privilege level.
    pub cpl: u8,
    /// The guest thread it ran in and its process's name, when guest awareness is on.
    pub who: Option<(ThreadRef, &'a str)>,
    /// Taken by the in-kernel sampler (from a ring record) rather than by a kick.
    pub ring: bool,
}

/// A host profile's counts: bucket index -> samples.
pub type SparseCounts = BTreeMap<u64, u64>;

/// A sampled call stack: program counters, innermost (the sampled PC) first, and whether the
/// walk stopped before the outermost frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackKey {
    /// Program counters, innermost first.
    pub pcs: Box<[u64]>,
    /// The walk ended early (depth limit, unreadable or implausible frame).
    pub truncated: bool,
    /// The guest thread (a row of the run's process table) it ran in.
    pub thread: Option<u32>,
}

/// Call stacks and their sample counts, and what could not be kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackCounts {
    /// Each distinct stack and its samples.
    pub stacks: BTreeMap<StackKey, u64>,
    /// Samples whose stack ended early (included in `stacks`).
    pub truncated: u64,
    /// Samples whose new stack did not fit the table (counted in the flat counts only).
    pub dropped: u64,
}

/// One vCPU's counts and their sum (kept so a summary needs no walk of the map).
#[derive(Default)]
struct VcpuCounts {
    counts: SparseCounts,
    /// (thread row, bucket) -> samples, for samples whose thread is known.
    threads: HashMap<(u32, u64), u64>,
    total: u64,
    stacks: HashMap<StackKey, u64>,
    stack_frames: usize,
    truncated: u64,
    dropped: u64,
    /// Of `total`, the samples the in-kernel sampler took.
    from_ring: u64,
}

impl VcpuCounts {
    /// Counts one sample's stack, cut to `depth` frames.
    fn count_stack(&mut self, stack: &Stack, depth: usize, thread: Option<u32>) {
        let keep = stack.pcs.len().min(depth);
        let key = StackKey {
            pcs: stack.pcs[..keep].into(),
            truncated: stack.truncated() || keep < stack.pcs.len(),
            thread,
        };
        self.truncated += u64::from(key.truncated);
        if let Some(n) = self.stacks.get_mut(&key) {
            *n += 1;
        } else if self.stack_frames + keep <= MAX_STACK_FRAMES {
            self.stack_frames += keep;
            self.stacks.insert(key, 1);
        } else {
            self.dropped += 1;
        }
    }
}

/// One host profile.
pub(super) struct HostProfile {
    pub(super) id: u32,
    pub(super) spec: HostProfileSpec,
    pub(super) running: bool,
    /// The trigger whose samples it counts.
    pub(super) trigger: crate::sampler::TriggerId,
    per_vcpu: Vec<Mutex<VcpuCounts>>,
}

impl HostProfile {
    pub(super) fn new(
        id: u32,
        spec: HostProfileSpec,
        vcpus: usize,
        trigger: crate::sampler::TriggerId,
    ) -> Self {
        HostProfile {
            id,
            spec,
            running: true,
            trigger,
            per_vcpu: (0..vcpus)
                .map(|_| Mutex::new(VcpuCounts::default()))
                .collect(),
        }
    }

    /// True when samples of vCPU `v` may count.
    pub(super) fn samples_vcpu(&self, v: usize) -> bool {
        self.running && self.spec.covers_vcpu(v)
    }

    /// True if the sample `at` counts in this profile.
    pub(super) fn takes(&self, at: &SampleAt) -> bool {
        self.samples_vcpu(at.v) && self.spec.bucket_at(at).is_some()
    }

    /// The stack depth the sample `at` needs for this profile: 0 if the sample does not
    /// count here or the profile keeps no stacks.
    pub(super) fn stack_depth(&self, at: &SampleAt) -> usize {
        if self.takes(at) {
            self.spec.stack_depth
        } else {
            0
        }
    }

    /// Counts the sample `at`, and its call stack if one was walked; true if it fell in the
    /// profile.
    pub(super) fn record(&self, at: &SampleAt, stack: Option<&Stack>) -> bool {
        let (Some(bucket), Some(map)) = (self.spec.bucket_at(at), self.per_vcpu.get(at.v)) else {
            return false;
        };
        if !self.samples_vcpu(at.v) {
            return false;
        }
        let thread = at.who.filter(|_| self.spec.names).map(|(w, _)| w.thread);
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        *map.counts.entry(bucket).or_default() += 1;
        if let Some(t) = thread {
            *map.threads.entry((t, bucket)).or_default() += 1;
        }
        map.total += 1;
        map.from_ring += u64::from(at.ring);
        if let Some(stack) = stack.filter(|_| self.spec.stack_depth > 0) {
            map.count_stack(stack, self.spec.stack_depth, thread);
        }
        true
    }

    /// All vCPUs' per-thread counts merged: thread row -> bucket -> samples.
    pub(super) fn thread_counts(&self) -> BTreeMap<u32, SparseCounts> {
        let mut all: BTreeMap<u32, SparseCounts> = BTreeMap::new();
        for m in &self.per_vcpu {
            for ((t, b), c) in &m.lock().unwrap_or_else(|e| e.into_inner()).threads {
                *all.entry(*t).or_default().entry(*b).or_default() += c;
            }
        }
        all
    }

    /// All vCPUs' stacks merged.
    pub(super) fn stacks(&self) -> StackCounts {
        let mut all = StackCounts::default();
        for m in &self.per_vcpu {
            let m = m.lock().unwrap_or_else(|e| e.into_inner());
            for (k, c) in &m.stacks {
                *all.stacks.entry(k.clone()).or_default() += c;
            }
            all.truncated += m.truncated;
            all.dropped += m.dropped;
        }
        all
    }

    /// All vCPUs' counts merged.
    pub(super) fn counts(&self) -> SparseCounts {
        let mut all = SparseCounts::new();
        for m in &self.per_vcpu {
            for (b, c) in &m.lock().unwrap_or_else(|e| e.into_inner()).counts {
                *all.entry(*b).or_default() += c;
            }
        }
        all
    }

    /// Its id, spec, state and merged counts.
    pub(super) fn result(&self) -> HostProfileResult {
        HostProfileResult {
            stacks: self.stacks(),
            from_ring: self
                .per_vcpu
                .iter()
                .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).from_ring)
                .sum(),
            ..self.counts_now()
        }
    }

    /// Its id, spec, state and merged counts, per thread too, without its stacks: what a
    /// client polling a running profile reads (each vCPU's lock is held only while its counts
    /// are merged, never while its stack table would be).
    pub(super) fn counts_now(&self) -> HostProfileResult {
        HostProfileResult {
            id: self.id,
            spec: self.spec.clone(),
            running: self.running,
            counts: self.counts(),
            threads: self.thread_counts(),
            stacks: StackCounts::default(),
            from_ring: 0,
        }
    }

    /// Samples counted on every vCPU (the sum of [`counts`](Self::counts)), without copying
    /// the counts.
    pub(super) fn total(&self) -> u64 {
        self.per_vcpu
            .iter()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).total)
            .sum()
    }
}

/// A host profile without its counts (for listing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProfileSummary {
    /// Its id.
    pub id: u32,
    /// What it samples.
    pub spec: HostProfileSpec,
    /// Still sampling.
    pub running: bool,
    /// Samples counted so far.
    pub total: u64,
}

/// A host profile's results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProfileResult {
    /// Its id.
    pub id: u32,
    /// What it sampled.
    pub spec: HostProfileSpec,
    /// Still sampling.
    pub running: bool,
    /// Bucket index -> samples.
    pub counts: SparseCounts,
    /// Per guest thread (a row of the run's process table): bucket index -> samples. Empty
    /// when the run did not name threads; else it sums to `counts`.
    pub threads: BTreeMap<u32, SparseCounts>,
    /// The samples' call stacks (empty with a stack depth of 0).
    pub stacks: StackCounts,
    /// Of its samples, those the in-kernel sampler took (the rest were kicks).
    pub from_ring: u64,
}

impl HostProfileResult {
    /// Samples counted.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(v: usize, pc: u64, cr3: u64, cpl: u8) -> SampleAt<'static> {
        SampleAt {
            ring: false,
            v,
            pc,
            cr3,
            cpl,
            who: None,
        }
    }

    #[test]
    fn whole_space_counts_every_pc_per_bucket() {
        let p = HostProfile::new(1, HostProfileSpec::whole_space(), 2, 0);
        assert!(p.record(&at(0, 0x1000, 0, 3), None));
        assert!(p.record(&at(1, 0x100f, 0, 0), None));
        assert!(p.record(&at(1, u64::MAX, 0, 3), None));
        let c = p.counts();
        assert_eq!(c.get(&0x100), Some(&2));
        assert_eq!(c.get(&(u64::MAX >> 4)), Some(&1));
        assert_eq!(p.total(), 3);
    }

    #[test]
    fn total_is_the_sum_of_the_counts() {
        let p = HostProfile::new(1, HostProfileSpec::whole_space(), 3, 0);
        assert_eq!(p.total(), 0);
        for (v, pc) in [(0, 0x10), (0, 0x10), (1, 0x20), (2, 0x10), (2, u64::MAX)] {
            assert!(p.record(&at(v, pc, 0, 0), None));
        }
        assert!(!p.record(&at(3, 0x10, 0, 0), None), "no such vCPU");
        assert_eq!(p.total(), 5);
        assert_eq!(p.counts().values().sum::<u64>(), 5);
    }

    #[test]
    fn result_is_the_merged_counts_with_id_spec_and_state() {
        let mut p = HostProfile::new(7, HostProfileSpec::whole_space(), 2, 0);
        assert!(p.record(&at(0, 0xffff_ffff_8100_0000, 0, 0), None));
        assert!(p.record(&at(1, 0xffff_ffff_8100_0008, 0, 0), None));
        p.running = false;
        let r = p.result();
        assert_eq!((r.id, r.running), (7, false));
        assert_eq!(r.spec, HostProfileSpec::whole_space());
        assert_eq!(
            r.counts,
            SparseCounts::from([(0xffff_ffff_8100_0000 >> 4, 2)])
        );
        assert_eq!(r.total(), 2);
    }

    #[test]
    fn range_process_and_vcpu_filters() {
        let spec = HostProfileSpec {
            start: 0x4000_0000,
            last: 0x4000_0fff,
            bucket_shift: 4,
            cr3: Some(0x1000 | 0x5), // PCID bits are ignored
            vcpus: Some(vec![1]),
            cpl: Some(3),
            stack_depth: 0,
            event: None,
            process: Vec::new(),
            timeline: false,
            names: true,
            kick_interval: None,
        };
        let p = HostProfile::new(1, spec, 2, 0);
        assert!(!p.record(&at(1, 0x3fff_ffff, 0x1000, 3), None));
        assert!(!p.record(&at(1, 0x4000_1000, 0x1000, 3), None));
        assert!(!p.record(&at(1, 0x4000_0010, 0x2000, 3), None));
        assert!(!p.record(&at(0, 0x4000_0010, 0x1000, 3), None));
        assert!(
            !p.record(&at(1, 0x4000_0010, 0x1003, 0), None),
            "kernel-mode samples are filtered"
        );
        assert!(p.record(&at(1, 0x4000_0010, 0x1003, 3), None));
        assert_eq!(p.counts(), SparseCounts::from([(1, 1)]));
        assert_eq!(p.total(), 1, "filtered samples are not counted");
    }

    fn stack(pcs: &[u64], end: introspect::End) -> Stack {
        Stack {
            pcs: pcs.to_vec(),
            end,
        }
    }

    #[test]
    fn stacks_are_counted_cut_to_depth_and_marked_truncated() {
        use introspect::End;
        let mut spec = HostProfileSpec::whole_space();
        spec.stack_depth = 2;
        let p = HostProfile::new(1, spec, 2, 0);
        let whole = stack(&[0x10, 0x20], End::Complete);
        assert_eq!(p.stack_depth(&at(0, 0x10, 0, 3)), 2);
        assert!(p.record(&at(0, 0x10, 0, 3), Some(&whole)));
        assert!(p.record(&at(1, 0x10, 0, 3), Some(&whole)));
        // Deeper than the profile keeps: cut, and marked.
        assert!(p.record(
            &at(1, 0x10, 0, 3),
            Some(&stack(&[0x10, 0x20, 0x30], End::Complete))
        ));
        // A walk that stopped early.
        assert!(p.record(
            &at(0, 0x10, 0, 3),
            Some(&stack(&[0x10], End::Unreadable(8)))
        ));
        // No stack walked (depth 0 elsewhere): the flat count only.
        assert!(p.record(&at(0, 0x10, 0, 3), None));
        let s = p.stacks();
        let key = |pcs: &[u64], truncated| StackKey {
            pcs: pcs.into(),
            truncated,
            thread: None,
        };
        assert_eq!(
            s.stacks,
            BTreeMap::from([
                (key(&[0x10, 0x20], false), 2),
                (key(&[0x10, 0x20], true), 1),
                (key(&[0x10], true), 1)
            ])
        );
        assert_eq!((s.truncated, s.dropped), (2, 0));
        assert_eq!(p.total(), 5);
        assert_eq!(p.result().stacks, s);
    }

    #[test]
    fn a_full_stack_table_drops_new_stacks_but_counts_known_ones() {
        use introspect::End;
        let mut c = VcpuCounts::default();
        c.count_stack(&stack(&[1, 2], End::Complete), 64, None);
        c.stack_frames = MAX_STACK_FRAMES - 1;
        c.count_stack(&stack(&[3, 4], End::Complete), 64, None);
        c.count_stack(&stack(&[1, 2], End::Complete), 64, None);
        c.count_stack(&stack(&[5], End::Complete), 64, None);
        assert_eq!((c.stacks.len(), c.dropped), (2, 1));
        assert_eq!(c.stacks.values().sum::<u64>(), 3);
    }

    #[test]
    fn bad_specs_are_refused() {
        let mut s = HostProfileSpec::whole_space();
        s.start = 10;
        s.last = 9;
        assert_eq!(s.validate(), Err(HostProfileError::EmptyRange));
        let mut s = HostProfileSpec::whole_space();
        s.bucket_shift = 64;
        assert_eq!(s.validate(), Err(HostProfileError::BucketShift(64)));
        let mut s = HostProfileSpec::whole_space();
        s.stack_depth = MAX_STACK_DEPTH + 1;
        assert_eq!(
            s.validate(),
            Err(HostProfileError::StackDepth(MAX_STACK_DEPTH + 1))
        );
    }

    #[test]
    fn process_names_match_ignoring_case_and_the_kernels_truncation() {
        assert!(names_match("AWK", "awk"));
        assert!(!names_match("awk", "gawk"));
        // ImageFileName keeps 14 characters: a longer wanted name matches its start.
        assert!(names_match("VeryLongProcessName.exe", "VeryLongProces"));
        assert!(!names_match("VeryLongProcessName.exe", "VeryLong"));
    }

    #[test]
    fn a_process_filter_counts_only_named_samples_of_that_process_per_thread() {
        let spec = HostProfileSpec {
            process: vec!["awk".into()],
            stack_depth: 2,
            ..HostProfileSpec::whole_space()
        };
        spec.validate().unwrap();
        let p = HostProfile::new(1, spec, 1, 0);
        let awk = ThreadRef {
            thread: 3,
            process: 1,
        };
        let seq = ThreadRef {
            thread: 4,
            process: 2,
        };
        let named = |who| SampleAt {
            who,
            ..at(0, 0x10, 0x1000, 3)
        };
        let whole = stack(&[0x10, 0x20], introspect::End::Complete);
        assert!(p.record(&named(Some((awk, "AWK"))), Some(&whole)));
        assert!(p.record(&named(Some((awk, "awk"))), None));
        assert!(!p.record(&named(Some((seq, "seq"))), None));
        assert!(!p.record(&named(None), None), "not identified: not counted");
        let r = p.result();
        assert_eq!(r.total(), 2);
        assert_eq!(
            r.threads,
            BTreeMap::from([(3, SparseCounts::from([(1, 2)]))])
        );
        let keys: Vec<_> = r.stacks.stacks.keys().map(|k| k.thread).collect();
        assert_eq!(keys, [Some(3)]);
        let mut both = HostProfileSpec::whole_space();
        both.process = vec!["awk".into()];
        both.cr3 = Some(0x1000);
        assert_eq!(both.validate(), Err(HostProfileError::ProcessAndCr3));
        both.cr3 = None;
        both.process = vec![String::new()];
        assert_eq!(both.validate(), Err(HostProfileError::ProcessName));
    }
}
