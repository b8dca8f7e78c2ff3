//! `scenario=bench`: the guest side of `hvprof bench`. Never passes or fails on its own when all
//! goes well: the host reads two lines from COM1 and stops the VM when it is done.
//!
//! (a) Hypercall cost, on the boot vCPU at CPL0 with interrupts off around each loop. One
//! QUERY_INTERVAL(ProfileTime) request block is prepared once in a static, 64-byte aligned
//! kernel buffer below 4 GiB (the kernel is identity mapped, so that is its guest-physical
//! address and one 32-bit OUT to the ring port rings it). For each kind, after `WARM_UP`
//! untimed rounds, `bench.n` samples (default 2000) of the TSC ticks between two RDTSCs:
//!
//! * `empty`: the timed sequence without its OUT (the measurement's own overhead);
//! * `io`: one `out dx, eax` to port 0x80, which no device claims (a bare port-I/O exit);
//! * `hypercall`: one `out dx, eax` of the block's address to the doorbell's ring port; the VMM
//!   runs QUERY_INTERVAL before the OUT retires.
//!
//! The three sequences are the same instructions but for the OUT (`timed!`), so `io - empty`
//! and `hypercall - empty` are the OUT's cost. The reply overwrites the request body, so the
//! body is rewritten before every ring (untimed). The status is checked on one ring before and
//! one after the loop, not per iteration. Medians go out as
//!
//!     refguest: bench hypercall empty_cycles=<u64> io_cycles=<u64> hypercall_cycles=<u64> tsc_khz=<u64> n=<n>
//!
//! (b) Sample path: a global ProfileTime profile of `.user` (16-byte buckets, page-list START)
//! with the ProfileTime interval at its maximum (1 s, so the VMM's own timer rarely samples),
//! then `refguest: bench profile started`, then `bench_spin` (a CPL3 register loop) on every
//! vCPU, forever, entered `bench.frames` (default 16) frame-pointer frames deep; with
//! `bench.pe=1`, as deep in module 0, a PE image hvprof bench generates, whose frames only its
//! unwind data describes. Any failure on the way prints `refguest: FAIL: bench: setup: ...` (exit 0x11).

use core::arch::asm;

use guest_agent::abi::{self, QueryIntervalRequest, HEADER_SIZE};
use guest_agent::{NtStatus, ProfileSource, STATUS_SENTINEL};

use super::common;
use super::{Env, Scenario};
use crate::sched::{self, Table};
use crate::start_info::param_u64;
use crate::sync::RacyCell;
use crate::user::bench as work;
use crate::{apic, cpu, prof, time};

pub const SCENARIO: Scenario = Scenario { name: "bench", setup, check, control: None };

/// Samples per kind unless `bench.n` says otherwise, and the most the static buffer holds.
const DEFAULT_N: u64 = 2000;
const MAX_N: usize = 16384;
/// Untimed rounds before each kind's samples.
const WARM_UP: usize = 32;
/// A port no device claims: the VMM handles the exit and returns.
const UNCLAIMED_PORT: u16 = 0x80;
/// ProfileTime's largest interval (100 ns units): 1 s.
const MAX_TIME_INTERVAL: u32 = 10_000_000;

/// The QUERY_INTERVAL request block: 24 bytes used; 64-byte aligned so it never crosses a page.
#[repr(C, align(64))]
struct Block([u64; 8]);

static BLOCK: RacyCell<Block> = RacyCell::new(Block([0; 8]));
/// The encoded request's body (8 bytes at offset 16), rewritten before every ring.
static BODY: RacyCell<u64> = RacyCell::new(0);
static SAMPLES: RacyCell<[u64; MAX_N]> = RacyCell::new([0; MAX_N]);

/// Offsets in the block, in u64 / u32 units.
const BODY_WORD: usize = HEADER_SIZE / 8;
const STATUS_DWORD: usize = 3;
const REPLY_DWORD: usize = HEADER_SIZE / 4;

fn block_ptr() -> *mut u64 {
    // SAFETY: only the address is taken.
    unsafe { (*BLOCK.get()).0.as_mut_ptr() }
}

/// Encodes QUERY_INTERVAL(ProfileTime) into the block. Returns its 32-bit guest-physical address.
fn prepare() -> Result<u32, &'static str> {
    let mut bytes = [0u8; 64];
    let request = QueryIntervalRequest { source: ProfileSource::TIME.0, reserved: 0 };
    let len = abi::encode_request(abi::CALL_QUERY_INTERVAL, &request, &mut bytes)
        .map_err(|_| "cannot encode QUERY_INTERVAL")?;
    if !(HEADER_SIZE + 8..=64).contains(&len) {
        return Err("QUERY_INTERVAL block has an unexpected length");
    }
    let words: [u64; 8] = core::array::from_fn(|i| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    });
    for (i, w) in words.iter().enumerate() {
        // SAFETY: the block is a static only this scenario touches, on the boot CPU.
        unsafe { block_ptr().add(i).write_volatile(*w) };
    }
    // SAFETY: as above.
    unsafe { *BODY.get() = words[BODY_WORD] };
    // Identity mapped: the virtual address is the guest-physical one.
    let gpa = block_ptr() as u64;
    if !gpa.is_multiple_of(8) {
        return Err("request block is not 8-byte aligned");
    }
    u32::try_from(gpa).map_err(|_| "request block is above 4 GiB")
}

/// Puts the request body back (the reply of the last ring overwrote it).
#[inline(always)]
fn restore_body() {
    // SAFETY: the block and BODY are statics only this scenario touches, on the boot CPU.
    unsafe { block_ptr().add(BODY_WORD).write_volatile(*BODY.get()) };
}

fn read_dword(index: usize) -> u32 {
    // SAFETY: index < 16, inside the block; the VMM wrote it before the OUT retired.
    unsafe { block_ptr().cast::<u32>().add(index).read_volatile() }
}

/// TSC ticks between two RDTSCs around the same register set-up and, if given, one OUT. Not
/// `nomem`: the doorbell's OUT makes the VMM write the block.
macro_rules! timed {
    ($port:expr, $value:expr $(, $op:literal)?) => {{
        let (lo0, hi0, lo1, hi1): (u32, u32, u32, u32);
        // SAFETY: RDTSC and MOVs only; the OUT (if any) goes to a port whose effect the caller
        // intends (the unclaimed port 0x80, or hvprof's ring port with a prepared block).
        unsafe {
            asm!(
                "rdtsc",
                "mov {lo0:e}, eax",
                "mov {hi0:e}, edx",
                "mov eax, {value:e}",
                "mov edx, {port:e}",
                $($op,)?
                "rdtsc",
                lo0 = out(reg) lo0,
                hi0 = out(reg) hi0,
                value = in(reg) $value,
                port = in(reg) u32::from($port),
                out("eax") lo1,
                out("edx") hi1,
                options(nostack, preserves_flags)
            )
        };
        ((u64::from(hi1) << 32) | u64::from(lo1)).wrapping_sub((u64::from(hi0) << 32) | u64::from(lo0))
    }};
}

#[derive(Clone, Copy)]
enum Kind {
    Empty,
    Io,
    Hypercall,
}

/// One timed sample of `kind`.
#[inline(always)]
fn sample(kind: Kind, ring_port: u16, gpa: u32) -> u64 {
    match kind {
        Kind::Empty => timed!(ring_port, gpa),
        Kind::Io => timed!(UNCLAIMED_PORT, gpa, "out dx, eax"),
        Kind::Hypercall => timed!(ring_port, gpa, "out dx, eax"),
    }
}

/// `n` samples of `kind` after a warm-up, interrupts off; returns their median.
fn measure(kind: Kind, ring_port: u16, gpa: u32, n: usize) -> u64 {
    // SAFETY: the sample buffer is a static only this scenario uses, on the boot CPU.
    let samples = unsafe { &mut (&mut *SAMPLES.get())[..n] };
    let were_enabled = cpu::interrupts_disable();
    for i in 0..WARM_UP + n {
        restore_body();
        let t = sample(kind, ring_port, gpa);
        if let Some(slot) = i.checked_sub(WARM_UP) {
            samples[slot] = t;
        }
    }
    if were_enabled {
        cpu::interrupts_enable();
    }
    samples.sort_unstable();
    samples[n / 2]
}

/// One untimed ring with the status checked: Ok(interval) if the VMM answered SUCCESS.
fn checked_ring(ring_port: u16, gpa: u32, when: &str) -> Result<u32, &'static str> {
    restore_body();
    // SAFETY: the status dword is inside the block (see `read_dword`).
    unsafe { block_ptr().cast::<u32>().add(STATUS_DWORD).write_volatile(STATUS_SENTINEL) };
    let _ = sample(Kind::Hypercall, ring_port, gpa);
    let status = read_dword(STATUS_DWORD);
    if status != NtStatus::SUCCESS.0 {
        crate::println!("bench QUERY_INTERVAL {} the loop: status={:#x} (want 0)", when, status);
        return Err("QUERY_INTERVAL through the prepared block did not succeed");
    }
    Ok(read_dword(REPLY_DWORD))
}

fn setup(env: &Env) -> Result<(), &'static str> {
    let found = common::hvprof("bench")?;
    let ring_port = found.port_base + abi::DOORBELL_RING;
    let gpa = prepare()?;
    let n = (param_u64("bench.n", DEFAULT_N) as usize).clamp(1, MAX_N);
    crate::println!(
        "bench setup vcpu={} block={:#x} ring_port={:#x} io_port={:#x} n={} warm_up={}",
        apic::id(),
        gpa,
        ring_port,
        UNCLAIMED_PORT,
        n,
        WARM_UP
    );
    let before = checked_ring(ring_port, gpa, "before")?;
    let empty = measure(Kind::Empty, ring_port, gpa, n);
    let io = measure(Kind::Io, ring_port, gpa, n);
    let hypercall = measure(Kind::Hypercall, ring_port, gpa, n);
    let after = checked_ring(ring_port, gpa, "after")?;
    if before != after {
        crate::println!("bench QUERY_INTERVAL interval before={} after={}", before, after);
        return Err("QUERY_INTERVAL answered differently after the loop");
    }
    crate::println!(
        "bench hypercall empty_cycles={} io_cycles={} hypercall_cycles={} tsc_khz={} n={}",
        empty,
        io,
        hypercall,
        time::tsc_hz() / 1000,
        n
    );

    let interval =
        prof::with(|c| c.set_interval(ProfileSource::TIME, MAX_TIME_INTERVAL)).map_err(|_| "SET_INTERVAL failed")?;
    let p = common::user_profile(0);
    let spin = work::spin();
    if spin.start < p.base || spin.end > p.base + p.size {
        return Err("bench_spin lies outside the profiled .user range");
    }
    common::create_start(&p, None)?;
    crate::println!(
        "bench profile base={:#x} size={:#x} bucket={} interval={} spin={:#x}..{:#x} cpus={}",
        p.base,
        p.size,
        p.bucket_size,
        interval,
        spin.start,
        spin.end,
        env.cpus
    );
    // The host times 16-frame stack walks: the spin PC, then 15 return addresses into
    // bench_deep; the outermost frame returns to the zero at the stack top, ending the walk.
    let frames = param_u64("bench.frames", 16).clamp(1, 200);
    // `bench.pe=1`: module 0 is hvprof bench's PE image, whose entry builds the same depth
    // of frames without frame pointers (only its unwind data describes them) and spins.
    let entry = if param_u64("bench.pe", 0) != 0 {
        let image = crate::pe::load(crate::start_info::module().ok_or("bench.pe=1 needs module 0")?)?;
        crate::println!("bench pe base={:#x} entry={:#x}", image.base, image.entry);
        image.entry
    } else {
        work::deep_entry()
    };
    for cpu in 0..env.cpus {
        sched::spawn(entry, cpu, [frames, 0]).ok_or("spawn failed")?;
    }
    crate::println!("bench profile started");
    Ok(())
}

/// Only reached if a spinner ended (faulted): they never exit.
fn check(_: &Table) -> Result<(), &'static str> {
    Err("a spinner ended; they spin until the host stops the VM")
}
