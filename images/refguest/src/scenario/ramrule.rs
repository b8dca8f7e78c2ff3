//! `scenario=ramrule`: the memory-map rule (docs/abi.md section 3, "Guest RAM"). The legacy
//! area 0x9FC00-0xFFFFF is backed by the VMM's memory slot but is not RAM by the guest's memory
//! map, so:
//!
//! * a request block there (a valid QUERY_INFO block at 0xA0000 and at 0xF0000, and one that
//!   starts in RAM at 0x9FBF0 and runs into 0x9FC00) gets STATUS_ACCESS_VIOLATION as the
//!   doorbell's last status and is neither read nor written (its `status` field keeps the
//!   marker the guest wrote);
//! * a START whose page list names a frame in 0xA0-0xFF (one of the buffer's four frames
//!   replaced by 0xA0, then by 0xFF) gets STATUS_INSUFFICIENT_RESOURCES;
//! * afterwards the same START with the buffer's own frames, STOP, CLOSE and QUERY_INFO succeed
//!   (the VMM kept running and the object was left stopped).
//!
//! Prints `refguest: ramrule <check> status=<got> want=<want> ok|BAD`.

use guest_agent::{abi, NtStatus, ProfileParams, Transport};

use super::common;
use super::{Env, Scenario};
use crate::prof;
use crate::sched::Table;
use crate::sync::SpinLock;
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "ramrule", setup, check, control: None };

static VERDICT: SpinLock<Result<(), &'static str>> = SpinLock::new(Ok(()));

/// What the guest leaves in a block's `status` field before ringing.
const MARKER: u32 = 0x5a5a_5a5a;
const QUERY_INFO_LEN: usize = 56;
/// The profile's buffer: four pages.
const BUFFER_BYTES: u32 = 4 * 4096;

fn expect(bad: &mut u32, what: &str, got: u32, want: NtStatus) {
    let good = got == want.0;
    if !good {
        *bad += 1;
    }
    crate::println!("ramrule {} status={:#010x} want={:#010x} {}", what, got, want.0, common::ok(good));
}

/// Writes a QUERY_INFO block at `gpa` (identity mapped), rings it, and returns the doorbell's
/// last status and the block's `status` field afterwards. The bytes there are restored.
fn ring_query_info_at(gpa: u64) -> (u32, u32) {
    let mut saved = [0u8; QUERY_INFO_LEN];
    // SAFETY: the kernel identity-maps the first GiB and nothing else uses these bytes while
    // interrupts are off on this CPU (prof::with); they are restored before returning.
    let block = unsafe { core::slice::from_raw_parts_mut(gpa as *mut u8, QUERY_INFO_LEN) };
    saved.copy_from_slice(block);
    block.fill(0);
    let header = [abi::ABI_VERSION, abi::CALL_QUERY_INFO, QUERY_INFO_LEN as u32, MARKER];
    for (i, v) in header.iter().enumerate() {
        block[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    let last = prof::with(|c| {
        // SAFETY: `block` is at `gpa` and contiguous (identity mapped); the VMM may write only
        // inside it.
        unsafe { c.transport().ring(gpa, block) };
        c.transport().last_status()
    });
    // SAFETY: reading the field the VMM may have written, as the VMM may write it.
    let field = unsafe { ((gpa + 12) as *const u32).read_volatile() };
    block.copy_from_slice(&saved);
    (last, field)
}

fn start(handle: u32, frames: &[u64]) -> u32 {
    // SAFETY: the frames are the static buffer's own (or, for the refused calls, frames the
    // VMM must refuse before pinning); the buffer stays resident until STOP.
    let r = prof::with(|c| unsafe { c.start_page_list(handle, 0, frames) });
    prof::status(&r).0
}

fn setup(_: &Env) -> Result<(), &'static str> {
    common::hvprof("ramrule")?;
    let mut bad = 0;
    for (what, gpa) in [("block_a0000", 0xa_0000u64), ("block_f0000", 0xf_0000), ("block_into_9fc00", 0x9_fbf0)] {
        let (last, field) = ring_query_info_at(gpa);
        expect(&mut bad, what, last, NtStatus::ACCESS_VIOLATION);
        let untouched = field == MARKER;
        if !untouched {
            bad += 1;
        }
        crate::println!("ramrule {}_untouched field={:#010x} {}", what, field, common::ok(untouched));
    }

    let (start_va, end_va) = prof::user_range();
    let buffer = prof::buffer(0);
    let p = ProfileParams::global(start_va, end_va - start_va, 4, buffer, BUFFER_BYTES);
    prof::clear(buffer, BUFFER_BYTES);
    let created = prof::with(|c| c.create(&p.to_create()));
    expect(&mut bad, "create", prof::status(&created).0, NtStatus::SUCCESS);
    let handle = created.map_err(|_| "CREATE failed")?.handle;
    let first = buffer >> 12;
    let own = [first, first + 1, first + 2, first + 3];
    expect(&mut bad, "start_frame_a0", start(handle, &[first, 0xa0, first + 2, first + 3]), NtStatus::INSUFFICIENT_RESOURCES);
    expect(&mut bad, "start_frame_ff", start(handle, &[first, first + 1, first + 2, 0xff]), NtStatus::INSUFFICIENT_RESOURCES);
    expect(&mut bad, "start_own_frames", start(handle, &own), NtStatus::SUCCESS);
    expect(&mut bad, "stop", prof::status(&prof::with(|c| c.stop(handle))).0, NtStatus::SUCCESS);
    expect(&mut bad, "close", prof::status(&prof::with(|c| c.close(handle))).0, NtStatus::SUCCESS);
    expect(&mut bad, "query_info_after", prof::status(&prof::with(|c| c.query_info())).0, NtStatus::SUCCESS);
    crate::println!("ramrule bad={}", bad);
    if bad != 0 {
        *VERDICT.lock() = Err("a block or frame outside guest RAM got the wrong status");
    }
    common::spawn(work::w().start, 0, work::plan(common::ms(1), 1, false))?;
    Ok(())
}

fn check(_: &Table) -> Result<(), &'static str> {
    *VERDICT.lock()
}
