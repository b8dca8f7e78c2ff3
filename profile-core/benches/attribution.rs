//! Attribution cost per sample with 1, 100 and 10,000 started objects, for the index
//! (`record/index/*`) and the naive model that walks every object (`record/naive/*`), in the
//! same run; and the cost of starts and stops with 10,000 objects started.
//! docs/performance.md records the figures and the budgets.
//!
//! The objects are laid out like a busy Windows guest: 10% global kernel-range objects (one per
//! driver) and 90% per-process user-range objects spread over n/50 processes (one per module).
//! Module sizes are log-uniform from 16 KiB to 4 MiB; each module starts on a 64 KiB boundary
//! (Windows' allocation granularity) after a random gap of 0 to 15 x 64 KiB. Each sample picks
//! any object and a PC inside it (so it counts exactly one object at every n), the process of
//! a global object's sample at random.

// The scenario's numbers are small and known (indexes below 10,000, vCPUs below 8).
#![allow(clippy::cast_possible_truncation)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use profile_core::{
    AccessMask, CallerRights, CounterSink, CreateParams, Handle, ObjectId, ObjectManager, Owner,
    PlatformInfo, ProfileSource, Sample,
};

const VCPUS: u32 = 8;
const OWNER: Owner = Owner(1);
const SIZES: [usize; 3] = [1, 100, 10_000];

/// A cheap sink: the VMM's real sink adds 1 to guest memory; this measures the lookup.
#[derive(Default)]
struct Sum(u64);

impl CounterSink<u32> for Sum {
    fn increment(&mut self, pin: &u32, _object: ObjectId, byte_offset: u64) {
        self.0 = self.0.wrapping_add(byte_offset ^ u64::from(*pin));
    }
}

/// Deterministic xorshift so runs are comparable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `n` started objects and 4,096 samples over them.
fn scenario(n: usize) -> (ObjectManager<u32>, Vec<Sample>) {
    let mut m = ObjectManager::new(PlatformInfo::timer_only(VCPUS)).unwrap();
    let globals = (n / 10).max(1);
    let processes = (n / 50).max(1) as u64;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    // Per process (index 0: the global kernel range): the next free address.
    let mut next = vec![0u64; processes as usize + 1];
    let mut objects: Vec<(Option<u64>, u64, u64)> = Vec::with_capacity(n);
    for i in 0..n {
        let process = if i < globals {
            None
        } else {
            Some((((i - globals) as u64 % processes) + 1) << 12)
        };
        let cursor = &mut next[process.map_or(0, |p| (p >> 12) as usize)];
        if *cursor == 0 {
            *cursor = if process.is_none() {
                0xFFFF_F800_0000_0000
            } else {
                0x7FF8_0000_0000
            };
        }
        let size = 1u64 << (14 + rng.next() % 8); // 16 KiB ..= 2 MiB, times [1, 2)
        let size = (size + rng.next() % size) & !0xFFF;
        let base = *cursor + rng.next() % 16 * 0x1_0000;
        *cursor = (base + size + 0xFFFF) & !0xFFFF;
        objects.push((process, base, size));
    }
    for (i, &(process, base, size)) in objects.iter().enumerate() {
        let params = CreateParams {
            owner: OWNER,
            process,
            base,
            size,
            bucket_size: 4,
            buffer: 0x1000_0000,
            buffer_size: u32::try_from(size / 16 * 4).unwrap(),
            source: ProfileSource::TIME,
            buffer_writable: true,
            access: AccessMask::PROFILE_CONTROL,
            caller: CallerRights::KERNEL,
        };
        let h = m.create(&params, 0, u64::MAX).unwrap();
        m.start(OWNER, h, |_| Ok(i as u32)).unwrap();
    }
    let samples = (0..4096)
        .map(|_| {
            let (process, base, size) = objects[(rng.next() % n as u64) as usize];
            Sample {
                vcpu: (rng.next() % u64::from(VCPUS)) as u32,
                pc: base + rng.next() % size,
                process: process.or(Some(((rng.next() % processes) + 1) << 12)),
                source: ProfileSource::TIME,
            }
        })
        .collect();
    (m, samples)
}

fn bench_record(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    for n in SIZES {
        let (m, samples) = scenario(n);
        let counted: u32 = samples.iter().map(|s| m.record(s, &mut Sum(0))).sum();
        assert_eq!(counted, 4096, "every sample counts exactly one object");
        let mut sink = Sum::default();
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::new("index", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) & 4095;
                black_box(m.record(black_box(&samples[i]), &mut sink))
            })
        });
        group.bench_with_input(BenchmarkId::new("naive", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) & 4095;
                black_box(m.record_naive(black_box(&samples[i]), &mut sink))
            })
        });
        black_box(sink.0);
    }
    group.finish();
}

/// Start and stop, with 10,000 objects started, in the global table (1,000 objects) and in
/// one process's (45), including the rebuild every few dozen changes; and all 10,000 started
/// from none, then stopped.
fn bench_start_stop(c: &mut Criterion) {
    let (mut m, _) = scenario(10_000);
    let mut group = c.benchmark_group("start_stop_with_10000_started");
    // Handle 4 is the first global object; the last handle is a per-process one.
    for (name, h) in [
        ("global_table", Handle(4)),
        ("process_table", Handle(10_000 * 4)),
    ] {
        m.stop(OWNER, h).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                m.start(OWNER, h, |_| Ok(0)).unwrap();
                black_box(m.stop(OWNER, h).unwrap())
            })
        });
        m.start(OWNER, h, |_| Ok(0)).unwrap();
    }
    group.finish();
    let handles: Vec<Handle> = (1..=10_000u32).map(|k| Handle(k * 4)).collect();
    for &h in &handles {
        m.stop(OWNER, h).unwrap();
    }
    let mut group = c.benchmark_group("start_all_then_stop_all_10000");
    group.sample_size(10);
    group.bench_function("total", |b| {
        b.iter(|| {
            for &h in &handles {
                m.start(OWNER, h, |_| Ok(0)).unwrap();
            }
            for &h in &handles {
                black_box(m.stop(OWNER, h).unwrap());
            }
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
        .sample_size(50);
    targets = bench_record, bench_start_stop
}
criterion_main!(benches);
