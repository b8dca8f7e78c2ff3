//! `hvprof bench --disk`: 4 KiB reads from a qcow2 image against the same data in a raw image,
//! in the same run. Each read is a virtio-blk IN request executed by the device's request
//! path (`request::execute`: the capacity check, the backend, the bounce buffer, the copy into
//! guest memory), so what differs between the two is only the backend: the raw file or imago's
//! qcow2 driver (cluster lookup through its L2 cache, then the read).
//!
//! The guest's own costs (building the descriptor chain, the notification exit, the
//! interrupt) are the same for both formats, and on a host without VMX/SVM (guest CPL0
//! emulated) they are tens of microseconds a request, which would hide the backends'
//! difference; they are left out on purpose. Both images are in the page cache (a first pass
//! warms them); the passes alternate in order from round to round and medians are compared.

use std::path::{Path, PathBuf};
use std::time::Instant;

use vm_memory::{GuestAddress, GuestMemoryMmap};

use crate::quantiles::median;
use devices::virtio::block::disk::{DiskError, DiskImage};
use devices::virtio::block::execute::execute;
use devices::virtio::block::qcow2::create_qcow2;
use devices::virtio::block::request::{Request, RequestKind, Segment};
use vmm::config::DiskConfig;

/// Bytes in one read.
const READ: u64 = 4096;
/// Where the request's buffer is in the benchmark's guest memory.
const BUFFER: GuestAddress = GuestAddress(0x1000);

/// Benchmark parameters.
#[derive(Clone, Debug)]
pub struct DiskBenchOptions {
    /// Image size in MiB (each image is written in full).
    pub size_mib: u64,
    /// Rounds of the four passes.
    pub rounds: usize,
}

impl Default for DiskBenchOptions {
    fn default() -> Self {
        DiskBenchOptions {
            size_mib: 64,
            rounds: 7,
        }
    }
}

/// What the disk benchmark measured: nanoseconds per 4 KiB read, medians over the rounds.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct DiskBenchReport {
    /// Sequential reads from the raw image.
    pub seq_raw_ns: f64,
    /// Sequential reads from the qcow2 image.
    pub seq_qcow2_ns: f64,
    /// Random reads from the raw image.
    pub rand_raw_ns: f64,
    /// Random reads from the qcow2 image.
    pub rand_qcow2_ns: f64,
    /// qcow2 throughput as a fraction of raw, sequential (raw ns / qcow2 ns; target >= 0.8).
    pub seq_ratio: f64,
    /// The same for random reads.
    pub rand_ratio: f64,
    /// Reads in one pass.
    pub reads: u64,
    /// Rounds.
    pub rounds: usize,
}

impl DiskBenchReport {
    /// The report as a JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}

/// Why the disk benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum DiskBenchError {
    /// The images could not be made in the temporary directory.
    #[error("cannot make the benchmark's images in {}", .0.display())]
    Images(PathBuf, #[source] std::io::Error),
    /// An image could not be opened.
    #[error(transparent)]
    Open(#[from] DiskError),
    /// A read failed.
    #[error("a benchmark read failed: {0}")]
    Read(String),
}

/// Makes the two images in a fresh directory under the temporary directory, measures, and
/// removes them.
pub fn run(opts: &DiskBenchOptions) -> Result<DiskBenchReport, DiskBenchError> {
    let dir = std::env::temp_dir().join(format!("hvprof-bench-disk-{}", std::process::id()));
    let result =
        make_images(&dir, opts.size_mib << 20).and_then(|(raw, qcow2)| measure(&raw, &qcow2, opts));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A raw and a qcow2 image of `size` bytes holding the same pseudo-random data.
fn make_images(dir: &Path, size: u64) -> Result<(PathBuf, PathBuf), DiskBenchError> {
    let err = |e| DiskBenchError::Images(dir.to_owned(), e);
    std::fs::create_dir_all(dir).map_err(err)?;
    let raw = dir.join("bench.raw");
    let qcow2 = dir.join("bench.qcow2");
    create_qcow2(&qcow2, size).map_err(err)?;
    let mut q = DiskImage::open(&DiskConfig::new(&qcow2, false))?;
    let file = std::fs::File::create(&raw).map_err(err)?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for at in (0..size).step_by(chunk.len()) {
        for b in chunk.chunks_exact_mut(8) {
            b.copy_from_slice(&next(&mut seed).to_le_bytes());
        }
        std::os::unix::fs::FileExt::write_all_at(&file, &chunk, at).map_err(err)?;
        q.backend.write_at(at, &chunk).map_err(err)?;
    }
    q.backend.close().map_err(err)?;
    Ok((raw, qcow2))
}

/// xorshift64: the benchmark's data and random offsets, the same on every run.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn measure(
    raw: &Path,
    qcow2: &Path,
    opts: &DiskBenchOptions,
) -> Result<DiskBenchReport, DiskBenchError> {
    let mut raw = DiskImage::open(&DiskConfig::new(raw, true))?;
    let mut qcow2 = DiskImage::open(&DiskConfig::new(qcow2, true))?;
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)])
        .map_err(|e| DiskBenchError::Read(e.to_string()))?;
    let reads = raw.sectors * 512 / READ;
    let sequential: Vec<u64> = (0..reads).collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let random: Vec<u64> = (0..reads).map(|_| next(&mut seed) % reads).collect();
    // Warm the page cache and imago's tables.
    for disk in [&mut raw, &mut qcow2] {
        pass(disk, &mem, &sequential)?;
    }
    let (mut sr, mut sq, mut rr, mut rq) = (vec![], vec![], vec![], vec![]);
    for round in 0..opts.rounds.max(1) {
        let flip = round % 2 == 1;
        for (order, blocks) in [(flip, &sequential), (!flip, &random)] {
            let (a, b) = if order {
                (&mut qcow2, &mut raw)
            } else {
                (&mut raw, &mut qcow2)
            };
            let ta = pass(a, &mem, blocks)?;
            let tb = pass(b, &mem, blocks)?;
            let (traw, tq) = if order { (tb, ta) } else { (ta, tb) };
            let (r, q) = if std::ptr::eq(blocks, &sequential) {
                (&mut sr, &mut sq)
            } else {
                (&mut rr, &mut rq)
            };
            r.push(traw);
            q.push(tq);
        }
    }
    // Pass times are far below 2^52 ns, where f64 is exact.
    let per_read = |v: &[u64]| median(v) / reads as f64;
    let (seq_raw_ns, seq_qcow2_ns) = (per_read(&sr), per_read(&sq));
    let (rand_raw_ns, rand_qcow2_ns) = (per_read(&rr), per_read(&rq));
    Ok(DiskBenchReport {
        seq_raw_ns,
        seq_qcow2_ns,
        rand_raw_ns,
        rand_qcow2_ns,
        seq_ratio: seq_raw_ns / seq_qcow2_ns,
        rand_ratio: rand_raw_ns / rand_qcow2_ns,
        reads,
        rounds: opts.rounds.max(1),
    })
}

/// Reads the 4 KiB blocks `blocks` of `disk` as IN requests; the nanoseconds it took.
fn pass(
    disk: &mut DiskImage,
    mem: &GuestMemoryMmap,
    blocks: &[u64],
) -> Result<u64, DiskBenchError> {
    let mut req = Request {
        kind: RequestKind::In,
        sector: 0,
        data: vec![Segment {
            addr: BUFFER,
            len: READ,
        }],
        status: GuestAddress(0),
    };
    let start = Instant::now();
    for b in blocks {
        req.sector = b * (READ / 512);
        execute(&req, disk, mem).map_err(|e| DiskBenchError::Read(e.to_string()))?;
    }
    Ok(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_images_hold_the_same_data_and_every_figure_is_measured() {
        let opts = DiskBenchOptions {
            size_mib: 2,
            rounds: 1,
        };
        let dir =
            std::env::temp_dir().join(format!("hvprof-bench-disk-test-{}", std::process::id()));
        let (raw, qcow2) = make_images(&dir, 2 << 20).unwrap();
        let mut a = DiskImage::open(&DiskConfig::new(&raw, true)).unwrap();
        let mut b = DiskImage::open(&DiskConfig::new(&qcow2, true)).unwrap();
        let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
        a.backend.read_at(1 << 20, &mut x).unwrap();
        b.backend.read_at(1 << 20, &mut y).unwrap();
        assert!(x == y && x.iter().any(|v| *v != 0));
        drop((a, b));
        let _ = std::fs::remove_dir_all(&dir);
        let r = run(&opts).unwrap();
        assert_eq!(r.reads, 512);
        for v in [r.seq_raw_ns, r.seq_qcow2_ns, r.rand_raw_ns, r.rand_qcow2_ns] {
            assert!(v > 0.0, "{r:?}");
        }
        assert!(r.seq_ratio.is_finite() && r.rand_ratio.is_finite());
    }
}
