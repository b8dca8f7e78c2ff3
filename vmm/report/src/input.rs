//! What a finished run hands to the report side: plain data and profile-core's object
//! configuration, never the VMM's own types, so that reading, comparing and symbolizing
//! profiles builds without a VMM. The VMM fills these in one place (vmm/src/report_input.rs).

use std::collections::BTreeMap;

use profile_core::object::ObjectConfig;

use crate::hex::{Hex, OptHex};
use crate::profile::{
    source_name, GuestModule, ObjectOwner, ProcessInfo, Profile, ProfileObject, RunInfo, SampledBy,
    StackCount, ThreadCounts, ThreadInfo, VcpuStats, FORMAT_NAME, FORMAT_VERSION,
};

/// A finished run.
#[derive(Debug, Clone)]
pub struct RunInput<'a> {
    /// The hvprof version that ran it.
    pub hvprof_version: &'a str,
    /// How it was set up and how it ended.
    pub run: RunInfo,
    /// Per-vCPU profiling counters.
    pub vcpus: Vec<VcpuStats>,
    /// The objects guest agents created.
    pub guest: Vec<GuestObject<'a>>,
    /// The host-side profiles.
    pub host: Vec<HostObject<'a>>,
    /// The PE images found in guest memory.
    pub guest_modules: Vec<GuestModule>,
    /// The guest's processes the samples ran in, keyed by [`ProcessInfo::key`]: the rows
    /// profile.json lists, as the VMM's process table fills them.
    pub processes: Vec<ProcessInfo>,
    /// The guest's threads the samples ran in, keyed by [`ThreadInfo::key`].
    pub threads: Vec<ThreadInfo>,
    /// The host profiles' timelines (those started with one).
    pub timelines: Vec<crate::timeline::Timeline>,
}

/// A guest agent's profile object as the run left it.
#[derive(Debug, Clone, Copy)]
pub struct GuestObject<'a> {
    /// Its id (unique for the run).
    pub id: u64,
    /// How the agent configured it.
    pub config: &'a ObjectConfig,
    /// One count per bucket.
    pub counts: &'a [u32],
}

/// A host-side profile as the run left it.
#[derive(Debug, Clone, Copy)]
pub struct HostObject<'a> {
    /// Its id.
    pub id: u32,
    /// First address sampled.
    pub start: u64,
    /// Last address sampled (inclusive, so the whole space is `0..=u64::MAX`).
    pub last: u64,
    /// log2 of the bucket size in bytes.
    pub bucket_shift: u32,
    /// The CR3 it was restricted to, if any.
    pub cr3: Option<u64>,
    /// The guest process names it was restricted to (empty: none).
    pub process_names: &'a [String],
    /// The vCPUs it was restricted to (None: all of them).
    pub vcpus: Option<&'a [usize]>,
    /// Bucket index -> samples, nonzero only.
    pub counts: &'a BTreeMap<u64, u64>,
    /// The samples' call stacks, in any order (empty without stacks).
    pub stacks: &'a [StackCount],
    /// Samples whose stack was not kept.
    pub stacks_dropped: u64,
    /// Per thread key: bucket index -> samples (empty when the run named no threads). Sums
    /// to `counts`.
    pub threads: &'a BTreeMap<u32, BTreeMap<u64, u64>>,
    /// The profile source its samples stand for (0, ProfileTime, for the clocks).
    pub source: u32,
    /// The name of what took its samples: the source's, or the software clock's.
    pub source_name: &'a str,
    /// Of its samples, those the in-kernel sampler took (the others were kicks).
    pub from_ring: u64,
}

impl ProfileObject {
    /// A guest agent's object, not yet symbolized; only its nonzero buckets inside the
    /// profiled range are kept. Counters past the range (the buffer may hold more than the
    /// range needs) count no sample: only the guest itself can have written them, and a
    /// saved profile lists no bucket outside its range ([`crate::validate`]).
    pub fn from_guest(o: &GuestObject) -> Self {
        let c = o.config;
        let in_range =
            |i: usize| (u128::from(i as u64) << c.bucket_size.min(63)) < u128::from(c.size);
        let counts: Vec<(u64, u64)> = o
            .counts
            .iter()
            .enumerate()
            .filter(|(i, c)| **c > 0 && in_range(*i))
            .map(|(i, c)| (i as u64, u64::from(*c)))
            .collect();
        ProfileObject {
            id: o.id,
            owner: ObjectOwner::Guest,
            process: OptHex(c.process),
            process_names: Vec::new(),
            base: Hex(c.base),
            size: Hex(c.size),
            bucket_shift: c.bucket_size,
            source: c.source.0,
            source_name: source_name(c.source.0).to_string(),
            affinity: c.affinity.iter().collect(),
            buckets: o.counts.len() as u64,
            // 32-bit counters, at most 2^30 of them (a u32 buffer size): no overflow.
            total: counts.iter().map(|(_, c)| c).sum(),
            counts,
            functions: Vec::new(),
            stacks: Vec::new(),
            stacks_dropped: 0,
            processes: Vec::new(),
            threads: Vec::new(),
            sampled_by: None,
        }
    }

    /// A host-side profile as an object owned by the host: a sampled range, the source or
    /// event that took its samples, on the vCPUs it names (all `vcpus` of the run when it names none).
    pub fn from_host(h: &HostObject, vcpus: u32) -> Self {
        let size = (h.last - h.start).saturating_add(1);
        let affinity = match h.vcpus {
            Some(v) => v.iter().filter_map(|v| u32::try_from(*v).ok()).collect(),
            None => (0..vcpus).collect(),
        };
        ProfileObject {
            id: u64::from(h.id),
            owner: ObjectOwner::Host,
            // Keyed as the guest agent's objects are, so the two compare alike.
            process: OptHex(h.cr3.map(profile_core::abi::process_key)),
            process_names: h.process_names.to_vec(),
            base: Hex(h.start),
            size: Hex(size),
            bucket_shift: h.bucket_shift,
            source: h.source,
            source_name: h.source_name.to_string(),
            affinity,
            buckets: ((size - 1) >> h.bucket_shift.min(63)) + 1,
            total: h.counts.values().sum(),
            counts: h.counts.iter().map(|(b, c)| (*b, *c)).collect(),
            functions: Vec::new(),
            stacks: {
                let mut s = h.stacks.to_vec();
                // Most samples first; ties in address order, then by thread, so the file is
                // the same every time.
                s.sort_by(|a, b| {
                    b.count
                        .cmp(&a.count)
                        .then_with(|| a.pcs.cmp(&b.pcs))
                        .then_with(|| a.thread.cmp(&b.thread))
                });
                s
            },
            stacks_dropped: h.stacks_dropped,
            // Filled with the threads' by Profile::from_run, which knows their processes.
            processes: Vec::new(),
            threads: h
                .threads
                .iter()
                .filter(|(_, c)| c.values().any(|n| *n > 0))
                .map(|(t, c)| ThreadCounts {
                    samples: None,
                    user: None,
                    kernel: None,
                    thread: *t,
                    counts: c
                        .iter()
                        .filter(|(_, n)| **n > 0)
                        .map(|(b, n)| (*b, *n))
                        .collect(),
                })
                .collect(),
            sampled_by: {
                let total: u64 = h.counts.values().sum();
                let kernel = h.from_ring.min(total);
                Some(SampledBy {
                    kernel,
                    kick: total - kernel,
                })
            },
        }
    }
}

impl Profile {
    /// The profile of a finished run, not yet symbolized (see [`Profile::symbolize`]).
    pub fn from_run(input: RunInput) -> Self {
        let vcpus = input.run.vcpus;
        let mut p = Profile {
            format: FORMAT_NAME.to_string(),
            format_version: FORMAT_VERSION,
            hvprof_version: input.hvprof_version.to_string(),
            run: input.run,
            vcpus: input.vcpus,
            modules: Vec::new(),
            guest_modules: input.guest_modules,
            processes: input.processes,
            threads: input.threads,
            objects: input
                .guest
                .iter()
                .map(ProfileObject::from_guest)
                .chain(
                    input
                        .host
                        .iter()
                        .map(|h| ProfileObject::from_host(h, vcpus)),
                )
                .collect(),
            timelines: input
                .timelines
                .into_iter()
                .map(|mut t| {
                    // In order as recorded; a stable sort keeps it so and costs one pass
                    // then, and timeline.json is written only in order.
                    t.samples.sort_by_key(|s| s.t_ns);
                    t.markers.sort_by_key(|m| m.start_ns);
                    t
                })
                .collect(),
        };
        crate::processes::add_totals(&mut p);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    fn config() -> ObjectConfig {
        ObjectConfig {
            process: None,
            base: 0x1000,
            size: 0x40,
            bucket_size: 4,
            buffer: 0,
            buffer_size: 16,
            source: profile_core::ProfileSource::TIME,
            affinity: profile_core::affinity::ProcessorSet::all_active(2),
        }
    }

    #[test]
    fn guest_objects_keep_only_nonzero_buckets() {
        let config = config();
        let o = ProfileObject::from_guest(&GuestObject {
            id: 3,
            config: &config,
            counts: &[0, 4, 0, 2],
        });
        assert_eq!(o.counts, vec![(1, 4), (3, 2)]);
        assert_eq!((o.buckets, o.total, o.id), (4, 6, 3));
        assert_eq!(o.affinity, vec![0, 1]);
        assert_eq!(
            (o.owner, o.source_name.as_str()),
            (ObjectOwner::Guest, "ProfileTime")
        );
    }

    /// Regression: a guest that wrote its buffer's counters past the profiled range got them
    /// into profile.json, which then failed its own consistency check.
    #[test]
    fn guest_counters_past_the_range_are_not_exported() {
        let config = ObjectConfig {
            size: 0x21,
            buffer_size: 32,
            ..config()
        };
        let o = ProfileObject::from_guest(&GuestObject {
            id: 1,
            config: &config,
            counts: &[1, 0, 2, u32::MAX, 5, 0, 0, u32::MAX],
        });
        assert_eq!(
            o.counts,
            vec![(0, 1), (2, 2)],
            "buckets 0..=2 cover 0x21 bytes"
        );
        assert_eq!((o.buckets, o.total), (8, 3));
        crate::validate::check_object("objects[0]", &o).unwrap();
        let empty = ObjectConfig { size: 0, ..config };
        let o = ProfileObject::from_guest(&GuestObject {
            id: 2,
            config: &empty,
            counts: &[u32::MAX; 4],
        });
        assert!(o.counts.is_empty() && o.total == 0);
        crate::validate::check_object("objects[0]", &o).unwrap();
    }

    #[test]
    fn a_whole_space_host_profile_spans_every_bucket_on_every_vcpu() {
        let counts = BTreeMap::from([(0x100, 3), (u64::MAX >> 4, 1)]);
        let no_threads = BTreeMap::new();
        let stacks = [
            StackCount::new([0x1008, 0x2000], false, 1),
            StackCount::new([0x1000, 0x2000], false, 3),
        ];
        let h = HostObject {
            id: 7,
            start: 0,
            last: u64::MAX,
            bucket_shift: 4,
            cr3: Some(0x1234_5fff),
            process_names: &[],
            vcpus: None,
            counts: &counts,
            stacks: &stacks,
            stacks_dropped: 0,
            threads: &no_threads,
            source: 0x13,
            source_name: "ProfileTotalCycles",
            from_ring: 0,
        };
        let o = ProfileObject::from_host(&h, 2);
        assert_eq!((o.owner, o.id, o.total), (ObjectOwner::Host, 7, 4));
        assert_eq!(
            (o.source, o.source_name.as_str()),
            (0x13, "ProfileTotalCycles")
        );
        assert_eq!(
            o.stacks,
            [stacks[1].clone(), stacks[0].clone()],
            "most samples first"
        );
        assert_eq!(
            (o.size.0, o.buckets),
            (u64::MAX, 1 << 60),
            "2^64 bytes saturate; the last bucket is still counted"
        );
        crate::validate::check_object("objects[0]", &o).unwrap();
        let top_counts = BTreeMap::from([(0, 1), ((u64::MAX - 0x1000) >> 4, 1)]);
        let to_the_top = ProfileObject::from_host(
            &HostObject {
                start: 0x1000,
                counts: &top_counts,
                stacks: &[],
                ..h
            },
            2,
        );
        crate::validate::check_object("objects[0]", &to_the_top).unwrap();
        assert_eq!(
            o.process.0,
            Some(0x1234_5000),
            "PCID bits are not the process"
        );
        assert_eq!(o.affinity, vec![0, 1]);
        let only_one = ProfileObject::from_host(
            &HostObject {
                vcpus: Some(&[1]),
                ..h
            },
            2,
        );
        assert_eq!(only_one.affinity, vec![1]);
    }

    #[test]
    fn a_run_lists_guest_objects_then_host_profiles() {
        let run = sample_profile(0).run;
        let config = config();
        let counts = BTreeMap::from([(1, 1)]);
        let no_threads = BTreeMap::new();
        let p = Profile::from_run(RunInput {
            hvprof_version: "9.9.9",
            run: run.clone(),
            vcpus: Vec::new(),
            guest: vec![GuestObject {
                id: 1,
                config: &config,
                counts: &[1],
            }],
            host: vec![HostObject {
                id: 1,
                start: 0x1000,
                last: 0x1fff,
                bucket_shift: 4,
                cr3: None,
                process_names: &[],
                vcpus: None,
                counts: &counts,
                stacks: &[],
                stacks_dropped: 0,
                threads: &no_threads,
                source: 0,
                source_name: "ProfileTime",
                from_ring: 0,
            }],
            guest_modules: Vec::new(),
            processes: Vec::new(),
            threads: Vec::new(),
            timelines: Vec::new(),
        });
        let owners: Vec<ObjectOwner> = p.objects.iter().map(|o| o.owner).collect();
        assert_eq!(owners, [ObjectOwner::Guest, ObjectOwner::Host]);
        assert_eq!((p.hvprof_version.as_str(), &p.run), ("9.9.9", &run));
        assert_eq!(p.objects[1].affinity, vec![0, 1], "the run's two vCPUs");
        assert_eq!((p.format_version, p.modules.len()), (FORMAT_VERSION, 0));
        // What hvprof writes, it reads back: the consistency check passes.
        let mut buf = Vec::new();
        crate::json::write(&p, &mut buf).unwrap();
        assert_eq!(crate::json::read(&buf[..]).unwrap(), p);
    }

    #[test]
    fn a_run_with_processes_keeps_its_tables_and_per_thread_counts() {
        let counts = BTreeMap::from([(0x102, 6), (0x104, 4)]);
        let threads = BTreeMap::from([
            (1, BTreeMap::from([(0x102, 6), (0x104, 1)])),
            (2, BTreeMap::from([(0x104, 3)])),
            // A thread with no sample in this object is not listed.
            (3, BTreeMap::from([(0x104, 0)])),
        ]);
        let mut a = StackCount::new([0x1024], false, 2);
        a.thread = Some(2);
        let mut b = a.clone();
        b.thread = Some(1);
        let stacks = [a, b];
        let p = Profile::from_run(RunInput {
            hvprof_version: "9.9.9",
            run: sample_profile(0).run,
            vcpus: Vec::new(),
            guest: Vec::new(),
            host: vec![HostObject {
                id: 1,
                start: 0,
                last: 0xffff,
                bucket_shift: 4,
                cr3: None,
                process_names: &[],
                vcpus: None,
                counts: &counts,
                stacks: &stacks,
                stacks_dropped: 0,
                threads: &threads,
                source: 0,
                source_name: "ProfileTime",
                from_ring: 0,
            }],
            guest_modules: Vec::new(),
            processes: vec![ProcessInfo {
                key: 7,
                pid: Some(57),
                name: "awk".into(),
                path: None,
                cr3s: vec![Hex(0x3000)],
                first_seen_s: 0.0,
                last_seen_s: 0.5,
                kernel: false,
                identified: true,
                mappings: Vec::new(),
            }],
            threads: [1, 2, 3]
                .map(|key| ThreadInfo {
                    key,
                    process: 7,
                    tid: Some(u64::from(key) + 56),
                    name: None,
                })
                .to_vec(),
            timelines: Vec::new(),
        });
        assert_eq!(
            (p.processes[0].label(), p.processes[0].cr3s[0]),
            ("awk (pid 57)".to_string(), Hex(0x3000))
        );
        assert_eq!(p.threads.len(), 3);
        let o = &p.objects[0];
        let listed: Vec<(u32, Vec<(u64, u64)>)> = o
            .threads
            .iter()
            .map(|t| (t.thread, t.counts.clone()))
            .collect();
        assert_eq!(
            listed,
            [(1, vec![(0x102, 6), (0x104, 1)]), (2, vec![(0x104, 3)])]
        );
        // The same stack in two threads: two entries, ordered by thread.
        let order: Vec<Option<u32>> = o.stacks.iter().map(|s| s.thread).collect();
        assert_eq!(order, [Some(1), Some(2)]);
        crate::validate::check(&p).unwrap();
    }
}
