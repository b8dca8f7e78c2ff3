//! The kernel's hvprof agent: discovery, one client shared by all CPUs (behind a lock that
//! also keeps interrupts off, so the doorbell's two writes stay on one vCPU), the counter
//! buffers the profiling scenarios hand to the VMM, and the profile-interrupt counters.
//!
//! The kernel is identity mapped, so buffers' virtual addresses are their guest-physical
//! addresses (`guest_agent::IdentityMapped`). All calls run at CPL0, as the ABI requires.

use core::sync::atomic::{AtomicU64, Ordering};

use guest_agent::{Client, Doorbell, Error, Found, IdentityMapped, NtStatus, Scratch};

use crate::percpu::MAX_CPUS;
use crate::sync::{RacyCell, SpinLock};

/// The vector the `interrupts` scenario asks the VMM to inject after each sample.
pub const PROFILE_VECTOR: u8 = 0x50;

pub type KernelClient = Client<'static, Doorbell, IdentityMapped>;

static SCRATCH: RacyCell<Scratch<512>> = RacyCell::new(Scratch::new());
static CLIENT: SpinLock<Option<KernelClient>> = SpinLock::new(None);

/// Finds hvprof (CPUID, then the doorbell's magic) and sets up the client. BSP, once.
pub fn init() -> Result<Found, &'static str> {
    let found = guest_agent::discover().map_err(|e| match e {
        Error::UnsupportedVersion(_) => "hvprof ABI version is not 1",
        _ => "hvprof not present (no CPUID signature)",
    })?;
    // SAFETY: the port base comes from hvprof's CPUID leaf and the kernel runs at CPL0.
    let mut doorbell = unsafe { Doorbell::new(found.port_base) };
    if !doorbell.is_present() {
        return Err("hvprof doorbell does not answer its magic");
    }
    // SAFETY: called once on the BSP before any other CPU uses the scratch block; afterwards
    // only the client (behind CLIENT's lock) touches it.
    let scratch = unsafe { (*SCRATCH.get()).bytes_mut() };
    let client = Client::new(doorbell, IdentityMapped, scratch).map_err(|_| "scratch block rejected")?;
    *CLIENT.lock() = Some(client);
    Ok(found)
}

/// Runs `f` with the client (interrupts off meanwhile).
pub fn with<R>(f: impl FnOnce(&mut KernelClient) -> R) -> R {
    let mut guard = CLIENT.lock();
    match guard.as_mut() {
        Some(client) => f(client),
        None => crate::exit::fail(format_args!("hvprof client used before prof::init")),
    }
}

/// The status a call ended with: SUCCESS, or the failure the VMM (or the client) reported.
pub fn status<T>(result: &Result<T, Error>) -> NtStatus {
    match result {
        Ok(_) => NtStatus::SUCCESS,
        Err(e) => e.status(),
    }
}

// ------------------------------------------------------------------- buffers

/// Counters of one profile: 16 KiB, page aligned (enough for 64 KiB of `.user` in 16-byte
/// buckets).
#[repr(C, align(4096))]
pub struct Counters(pub [u32; COUNTERS]);

pub const COUNTERS: usize = 4096;
pub const BUFFERS: usize = 4;

static BUFFER_POOL: RacyCell<[Counters; BUFFERS]> = RacyCell::new([const { Counters([0; COUNTERS]) }; BUFFERS]);

/// Address of counter buffer `i` (`i < BUFFERS`).
pub fn buffer(i: usize) -> u64 {
    // SAFETY: only the address is taken; the VMM and `read` access it with volatile accesses.
    unsafe { (*BUFFER_POOL.get())[i].0.as_ptr() as u64 }
}

/// Buffer bytes needed for `size` bytes of range in buckets of `1 << shift` bytes.
pub fn buffer_bytes(size: u64, shift: u32) -> u32 {
    (((size - 1) >> shift) + 1) as u32 * 4
}

/// Counter `index` of the buffer at `buffer`, read as the VMM may be writing it.
pub fn read(buffer: u64, index: u64) -> u32 {
    // SAFETY: callers pass a buffer of this module (or another live, aligned counter array)
    // and an index inside it.
    unsafe { ((buffer + index * 4) as *const u32).read_volatile() }
}

/// Zeroes `bytes` bytes of counters at `buffer` (before a profile starts).
pub fn clear(buffer: u64, bytes: u32) {
    for i in 0..u64::from(bytes / 4) {
        // SAFETY: as for `read`; no profile is counting into it now.
        unsafe { ((buffer + i * 4) as *mut u32).write_volatile(0) };
    }
}

/// Sum of the counters whose buckets lie in `[start, end)` of a profile at `base` with
/// buckets of `1 << shift` bytes (a bucket straddling `start` or `end` counts).
pub fn sum(buffer: u64, base: u64, shift: u32, start: u64, end: u64) -> u64 {
    if end <= start || end <= base {
        return 0;
    }
    let first = start.saturating_sub(base) >> shift;
    let last = (end - 1 - base) >> shift;
    (first..=last).map(|i| u64::from(read(buffer, i))).sum()
}

extern "C" {
    static __user_start: u8;
    static __user_end: u8;
}

/// The `.user` section's user-virtual range `[start, end)`.
pub fn user_range() -> (u64, u64) {
    ((&raw const __user_start) as u64, (&raw const __user_end) as u64)
}

// ------------------------------------------------------- profile interrupts

static DELIVERIES: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// The PROFILE_VECTOR handler's work (after EOI): count one delivery on `cpu`.
pub fn count_delivery(cpu: usize) {
    DELIVERIES[cpu].fetch_add(1, Ordering::Relaxed);
}

/// Profile interrupts delivered on `cpu` so far.
pub fn deliveries(cpu: usize) -> u64 {
    DELIVERIES[cpu].load(Ordering::Relaxed)
}
