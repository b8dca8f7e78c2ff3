//! The peer's sampling, done in this process: the events `perf kvm --guest record -e cpu-clock
//! -c <period> -t <tid>` opens on a thread, opened on every vCPU thread, with perf's ring size,
//! read by a thread of their own as perf's writer would.
//!
//! The attributes are those perf 6.1 prints with `-vv` for that command line: a software
//! `cpu-clock` event with a fixed period, `sample_type` IP|TID|TIME, `read_format` ID|LOST,
//! opened disabled and enabled once every event is open, the side-band bits (mmap, mmap2,
//! comm, comm_exec, task, ksymbol, bpf_event), `sample_id_all` and `exclude_host`, with
//! `exclude_guest` and `exclude_kernel` clear. Perf opens one such event per online CPU for the
//! thread (`pid` = the thread, `cpu` = each CPU), each with its own 512 KiB ring; so does this.
//! Left out: perf's extra dummy event for side-band records of the whole system (bpf and
//! ksymbol), and the file it writes the records to; the records are copied out of the ring
//! and counted instead.
//!
//! The thread that opens them ([`Watcher`], in every mode: it also follows the vCPU threads'
//! CPU time) is started outside the VM's run, so it has none of the VMM threads' seccomp
//! filters: a controller could not open perf events or read another thread's CPU clock.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use perf_event_open_sys::bindings::{
    perf_event_attr, PERF_COUNT_SW_CPU_CLOCK, PERF_FLAG_FD_CLOEXEC, PERF_FORMAT_ID,
    PERF_FORMAT_LOST, PERF_RECORD_LOST, PERF_RECORD_MISC_CPUMODE_MASK,
    PERF_RECORD_MISC_GUEST_KERNEL, PERF_RECORD_MISC_GUEST_USER, PERF_RECORD_SAMPLE, PERF_SAMPLE_IP,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_TYPE_SOFTWARE,
};
use perf_event_open_sys::{ioctls, perf_event_open};
use vmm::config::SharedBuffer;

const PAGE: usize = 4096;
/// perf record's default ring: 512 KiB of data (`mmap size 528384B` with the control page).
const DATA_PAGES: usize = 128;
/// How often the reader empties the rings.
const READ_EVERY: Duration = Duration::from_millis(10);

/// What the peer's rings held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerCounts {
    /// Samples the kernel attributed to the guest (`misc` guest kernel or guest user).
    pub guest: u64,
    /// Samples of host time.
    pub host: u64,
    /// Samples the kernel dropped for a full ring (PERF_RECORD_LOST).
    pub lost: u64,
}

/// The attributes of the peer's event at `period` nanoseconds of the thread's CPU time.
fn attr(period: u64) -> perf_event_attr {
    let mut a = perf_event_attr {
        size: u32::try_from(std::mem::size_of::<perf_event_attr>()).unwrap_or(0),
        type_: PERF_TYPE_SOFTWARE,
        config: u64::from(PERF_COUNT_SW_CPU_CLOCK),
        sample_type: u64::from(PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME),
        read_format: u64::from(PERF_FORMAT_ID | PERF_FORMAT_LOST),
        ..Default::default()
    };
    a.__bindgen_anon_1.sample_period = period;
    a.set_disabled(1);
    a.set_mmap(1);
    a.set_comm(1);
    a.set_task(1);
    a.set_sample_id_all(1);
    a.set_exclude_host(1);
    a.set_mmap2(1);
    a.set_comm_exec(1);
    a.set_ksymbol(1);
    a.set_bpf_event(1);
    a
}

/// One event's ring, mapped.
/// One perf kvm event and its ring (read with the VMM's own ring reader).
struct Ring {
    fd: OwnedFd,
    ring: vmm::sampler::ring::Ring,
}

impl Ring {
    fn open(tid: i32, cpu: i32, period: u64) -> io::Result<Ring> {
        let mut a = attr(period);
        // SAFETY: `a` is a fully initialised perf_event_attr whose size field is its own size;
        // the call reads it and names a thread of this process on one CPU, with no group.
        let fd = unsafe { perf_event_open(&mut a, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC.into()) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let ring = vmm::sampler::ring::Ring::map(&fd, PAGE * DATA_PAGES)?;
        Ok(Ring { fd, ring })
    }

    fn enable(&self) -> io::Result<()> {
        // SAFETY: ENABLE takes no argument beyond the flag word; the descriptor is live.
        match unsafe { ioctls::ENABLE(self.fd.as_raw_fd(), 0) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Appends what the kernel published since the last call to `out`, unwrapped, and gives
    /// the room back.
    fn read(&mut self, out: &mut Vec<u8>) {
        self.ring.take(out);
    }
}

/// Counts the records in `bytes` (whole records, as a ring's reader gets them) into `c`.
pub(crate) fn count(bytes: &[u8], c: &mut PeerCounts) {
    let guest = [PERF_RECORD_MISC_GUEST_KERNEL, PERF_RECORD_MISC_GUEST_USER];
    let u64_at = |at: usize| -> u64 {
        bytes
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_ne_bytes)
    };
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let kind = u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let misc = u16::from_ne_bytes([bytes[at + 4], bytes[at + 5]]);
        let size = usize::from(u16::from_ne_bytes([bytes[at + 6], bytes[at + 7]]));
        if size < 8 {
            break;
        }
        match kind {
            PERF_RECORD_SAMPLE
                if guest.contains(&(u32::from(misc) & PERF_RECORD_MISC_CPUMODE_MASK)) =>
            {
                c.guest += 1
            }
            PERF_RECORD_SAMPLE => c.host += 1,
            // { header, id, lost }
            PERF_RECORD_LOST => c.lost += u64_at(at + 16),
            _ => {}
        }
        at += size;
    }
}

/// The CPUs the kernel has online (`/sys/devices/system/cpu/online`, as `0-3,6`).
fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
            cpus.extend(a..=b);
        }
    }
    if cpus.is_empty() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        cpus.extend(0..i32::try_from(n).unwrap_or(1));
    }
    cpus
}

/// This process's vCPU threads (named `vcpu<N>` by the VMM).
fn vcpu_threads() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let tid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            comm.trim().starts_with("vcpu").then_some(tid)
        })
        .collect()
}

/// The CPU time thread `tid` of this process has run, in nanoseconds (its thread CPU clock,
/// `clockid` as the kernel makes it for another thread: `(~tid << 3) | 6`).
fn thread_cpu_ns(tid: i32) -> Option<u64> {
    let clock: libc::clockid_t = (!tid << 3) | 6;
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer, live for the call; an
    // unknown clock (a thread that has exited) is an error return, not undefined behaviour.
    if unsafe { libc::clock_gettime(clock, &mut t) } != 0 {
        return None;
    }
    Some(u64::try_from(t.tv_sec).ok()? * 1_000_000_000 + u64::try_from(t.tv_nsec).ok()?)
}

/// What the watcher saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watched {
    /// The vCPU threads' CPU time from the workload's start to their last reading (every
    /// [`READ_EVERY`] until they exit), summed.
    pub cpu_ns: u64,
    /// What perf kvm's rings held, when the watcher opened them.
    pub peer: Option<PeerCounts>,
}

/// The bench's watcher of the vCPU threads: waits for `start` on the guest's console, then
/// follows their CPU time and, with a period, samples them as perf kvm would, until
/// [`Watcher::finish`].
pub struct Watcher {
    done: Arc<AtomicBool>,
    thread: JoinHandle<Result<Watched, String>>,
}

impl Watcher {
    /// Starts the watcher thread; `period` (perf kvm's events) is in nanoseconds of each vCPU
    /// thread's CPU time.
    pub fn spawn(
        serial: SharedBuffer,
        start: &'static str,
        period: Option<u64>,
    ) -> io::Result<Watcher> {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let thread = std::thread::Builder::new()
            .name("bench-watcher".into())
            .spawn(move || watch(&serial, start, period, &d))?;
        Ok(Watcher { done, thread })
    }

    /// Stops watching (the VM has ended), empties the rings and returns what it saw.
    pub fn finish(self) -> Result<Watched, String> {
        self.done.store(true, Ordering::Release);
        self.thread
            .join()
            .unwrap_or_else(|_| Err("the bench's watcher panicked".into()))
    }
}

fn watch(
    serial: &SharedBuffer,
    start: &str,
    period: Option<u64>,
    done: &AtomicBool,
) -> Result<Watched, String> {
    while !serial.text().contains(start) {
        if done.load(Ordering::Acquire) {
            return Err(format!("the guest never printed {start:?}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let threads = vcpu_threads();
    if threads.is_empty() {
        return Err("no vCPU thread found in /proc/self/task".into());
    }
    let first: Vec<Option<u64>> = threads.iter().map(|t| thread_cpu_ns(*t)).collect();
    let mut last = first.clone();
    let mut rings = Vec::new();
    if let Some(period) = period {
        for &tid in &threads {
            for cpu in online_cpus() {
                rings.push(
                    Ring::open(tid, cpu, period).map_err(|e| format!("perf_event_open: {e}"))?,
                );
            }
        }
        for r in &rings {
            r.enable().map_err(|e| format!("enabling the event: {e}"))?;
        }
    }
    let mut counts = PeerCounts::default();
    let mut bytes = Vec::with_capacity(PAGE * DATA_PAGES);
    loop {
        let end = done.load(Ordering::Acquire);
        for (t, l) in threads.iter().zip(&mut last) {
            if let Some(ns) = thread_cpu_ns(*t) {
                *l = Some(ns);
            }
        }
        for r in &mut rings {
            bytes.clear();
            r.read(&mut bytes);
            count(&bytes, &mut counts);
        }
        if end {
            let cpu_ns = first
                .iter()
                .zip(&last)
                .filter_map(|(a, b)| Some(b.as_ref()?.saturating_sub(*a.as_ref()?)))
                .sum();
            return Ok(Watched {
                cpu_ns,
                peer: period.map(|_| counts),
            });
        }
        std::thread::sleep(READ_EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u64]) -> Vec<u8> {
        let mut r = kind.to_ne_bytes().to_vec();
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&u16::try_from(8 + 8 * body.len()).unwrap().to_ne_bytes());
        for w in body {
            r.extend_from_slice(&w.to_ne_bytes());
        }
        r
    }

    #[test]
    fn records_are_counted_by_mode_and_lost_by_their_count() {
        let mut bytes = record(PERF_RECORD_SAMPLE, 5, &[0x4000_0000, 7, 1]);
        bytes.extend(record(
            PERF_RECORD_SAMPLE,
            4,
            &[0xffff_8000_0000_0000, 7, 2],
        ));
        bytes.extend(record(
            PERF_RECORD_SAMPLE,
            1,
            &[0xffff_ffff_8100_0000, 7, 3],
        ));
        bytes.extend(record(PERF_RECORD_LOST, 0, &[9, 12]));
        bytes.extend(record(3, 0, &[1, 2, 3])); // a side-band record (COMM)
        let mut c = PeerCounts::default();
        count(&bytes, &mut c);
        assert_eq!(
            c,
            PeerCounts {
                guest: 2,
                host: 1,
                lost: 12
            }
        );
        // A truncated or zero-sized header ends the walk instead of looping.
        count(&[0; 12], &mut c);
        assert_eq!(c.guest, 2);
    }

    #[test]
    fn the_event_is_perf_kvm_s() {
        let a = attr(100_000);
        // SAFETY: reading the period member of the union this test just wrote.
        assert_eq!(unsafe { a.__bindgen_anon_1.sample_period }, 100_000);
        assert_eq!(
            (a.exclude_host(), a.exclude_guest(), a.exclude_kernel()),
            (1, 0, 0)
        );
        assert_eq!(a.disabled(), 1);
    }
}
