//! `scenario=objects`: the object life cycle and every documented status, checked from the
//! guest: start/stop/start/close, PROFILING_NOT_STOPPED, PROFILING_NOT_STARTED, the bad bucket
//! sizes, BUFFER_TOO_SMALL, BUFFER_OVERFLOW, INVALID_PARAMETER_7, DATATYPE_MISALIGNMENT,
//! NOT_SUPPORTED, bad affinities, PRIVILEGE_NOT_HELD, INVALID_HANDLE (never issued, and after
//! CLOSE), a page list that does not describe the buffer, and PROFILING_AT_LIMIT after
//! 8192 x processors objects were started on one shared one-page buffer (timed).
//! Every check prints `refguest: objects <check> status=0x... ok|BAD`. The checks run in
//! `setup`; one short worker lets the run end normally.

use guest_agent::{Error, NtStatus, ProfileParams, ProfileSource};

use super::common;
use super::{Env, Scenario};
use crate::prof;
use crate::sched::Table;
use crate::sync::{RacyCell, SpinLock};
use crate::user::prof as work;

pub const SCENARIO: Scenario = Scenario { name: "objects", setup, check, control: None };

static VERDICT: SpinLock<Result<(), &'static str>> = SpinLock::new(Ok(()));

/// Handles of the limit test: room for 8192 x 8 processors.
const MAX_HANDLES: usize = 8192 * 8;
static HANDLES: RacyCell<[u32; MAX_HANDLES]> = RacyCell::new([0; MAX_HANDLES]);

/// A valid profile: the first page of `.user` in 16-byte buckets (1 KiB of counters).
fn valid() -> ProfileParams {
    let (start, _) = prof::user_range();
    ProfileParams::global(start, 0x1000, 4, prof::buffer(0), 0x400)
}

struct Checks {
    bad: u32,
    total: u32,
}

impl Checks {
    fn expect<T>(&mut self, what: &str, result: &Result<T, Error>, want: NtStatus) {
        let got = prof::status(result);
        let good = got == want;
        self.total += 1;
        if !good {
            self.bad += 1;
        }
        crate::println!("objects {} status={:#010x} want={:#010x} {}", what, got.0, want.0, common::ok(good));
    }
}

fn create(p: &ProfileParams) -> Result<u32, Error> {
    prof::with(|c| c.create(&p.to_create())).map(|r| r.handle)
}

fn start(handle: u32, p: &ProfileParams) -> Result<guest_agent::StartReply, Error> {
    // SAFETY: prof's buffers are static and stay resident.
    prof::with(|c| unsafe { c.start_buffer(handle, p.buffer, p.buffer_size) })
}

fn lifecycle(k: &mut Checks) -> Result<(), &'static str> {
    let p = valid();
    let created = create(&p);
    k.expect("create", &created, NtStatus::SUCCESS);
    let h = created.map_err(|_| "CREATE of a valid profile failed")?;
    k.expect("start", &start(h, &p), NtStatus::SUCCESS);
    k.expect("start_again", &start(h, &p), NtStatus::PROFILING_NOT_STOPPED);
    k.expect("stop", &prof::with(|c| c.stop(h)), NtStatus::SUCCESS);
    k.expect("stop_again", &prof::with(|c| c.stop(h)), NtStatus::PROFILING_NOT_STARTED);
    k.expect("restart", &start(h, &p), NtStatus::SUCCESS);
    // A page list that does not describe the buffer (one page short): INVALID_PARAMETER.
    let h2 = create(&ProfileParams { buffer_size: 0x2000, size: 0x8000, ..p }).map_err(|_| "CREATE failed")?;
    // SAFETY: the frame is prof's static buffer 0.
    let short = prof::with(|c| unsafe { c.start_page_list(h2, 0, &[p.buffer >> 12]) });
    k.expect("start_short_page_list", &short, NtStatus::INVALID_PARAMETER);
    k.expect("close_stopped", &prof::with(|c| c.close(h2)), NtStatus::SUCCESS);
    k.expect("close_started", &prof::with(|c| c.close(h)), NtStatus::SUCCESS);
    k.expect("stop_after_close", &prof::with(|c| c.stop(h)), NtStatus::INVALID_HANDLE);
    k.expect("start_after_close", &start(h, &p), NtStatus::INVALID_HANDLE);
    k.expect("close_after_close", &prof::with(|c| c.close(h)), NtStatus::INVALID_HANDLE);
    k.expect("stop_never_issued", &prof::with(|c| c.stop(0x7FF0)), NtStatus::INVALID_HANDLE);
    Ok(())
}

fn create_checks(k: &mut Checks) {
    let p = valid();
    let cases: [(&str, ProfileParams, NtStatus); 10] = [
        ("bucket_1", ProfileParams { bucket_size: 1, ..p }, NtStatus::INVALID_PARAMETER),
        ("bucket_32", ProfileParams { bucket_size: 32, ..p }, NtStatus::INVALID_PARAMETER),
        ("buffer_too_small", ProfileParams { buffer_size: 0x3FC, ..p }, NtStatus::BUFFER_TOO_SMALL),
        (
            "range_overflow",
            ProfileParams { base: 0xFFFF_FFFF_FFFF_F000, size: 0x2000, bucket_size: 12, buffer_size: 8, ..p },
            NtStatus::BUFFER_OVERFLOW,
        ),
        ("buffer_size_0", ProfileParams { buffer_size: 0, ..p }, NtStatus::INVALID_PARAMETER_7),
        ("misaligned_buffer", ProfileParams { buffer: p.buffer + 2, ..p }, NtStatus::DATATYPE_MISALIGNMENT),
        ("unsupported_source", p.with_source(ProfileSource::ALIGNMENT_FIXUP), NtStatus::NOT_SUPPORTED),
        ("affinity_0", p.with_affinity(0, 0), NtStatus::INVALID_PARAMETER),
        ("affinity_inactive_cpu", p.with_affinity(0, 1 << 63), NtStatus::INVALID_PARAMETER),
        ("no_privilege", ProfileParams { caller_flags: 0, ..p }, NtStatus::PRIVILEGE_NOT_HELD),
    ];
    for (what, params, want) in cases {
        let r = create(&params);
        k.expect(what, &r, want);
        if let Ok(h) = r {
            let _ = prof::with(|c| c.close(h));
        }
    }
}

/// Creates and starts objects on one shared buffer until START fails; expects exactly the
/// advertised limit, PROFILING_AT_LIMIT, and a start to succeed again once one is closed.
fn limit(k: &mut Checks) -> Result<(), &'static str> {
    let limit = common::info()?.started_limit as usize;
    if limit > MAX_HANDLES {
        return Err("started_limit beyond this scenario's handle table");
    }
    // SAFETY: setup runs on the BSP alone.
    let handles = unsafe { &mut *HANDLES.get() };
    let p = ProfileParams { buffer_size: 4, size: 16, ..valid() };
    let t0 = crate::cpu::rdtsc();
    let mut started = 0;
    let mut failure = Ok(());
    while started <= limit {
        let h = match create(&p) {
            Ok(h) => h,
            Err(e) => {
                failure = Err(e);
                break;
            }
        };
        handles[started] = h;
        if let Err(e) = start(h, &p) {
            failure = Err(e);
            break;
        }
        started += 1;
    }
    let fill_ms = (crate::cpu::rdtsc() - t0) / common::ms(1).max(1);
    let good = started == limit && failure == Err(Error::Status(NtStatus::PROFILING_AT_LIMIT));
    k.total += 1;
    if !good {
        k.bad += 1;
    }
    crate::println!(
        "objects at_limit status={:#010x} started={} limit={} ms={} {}",
        prof::status(&failure).0,
        started,
        limit,
        fill_ms,
        common::ok(good)
    );
    // The object that failed to start (handles[started]) starts once another one is closed.
    if started > 0 && failure.is_err() {
        let waiting = handles[started];
        k.expect("close_one_at_limit", &prof::with(|c| c.close(handles[0])), NtStatus::SUCCESS);
        k.expect("start_after_close_at_limit", &start(waiting, &p), NtStatus::SUCCESS);
        handles[0] = waiting;
    }
    let t1 = crate::cpu::rdtsc();
    let mut closed_bad = 0;
    for &h in handles.iter().take(started.max(1)) {
        if prof::with(|c| c.close(h)).is_err() {
            closed_bad += 1;
        }
    }
    let close_ms = (crate::cpu::rdtsc() - t1) / common::ms(1).max(1);
    let stats = prof::with(|c| c.read_stats()).map_err(|_| "READ_STATS failed")?;
    let good = closed_bad == 0 && stats.objects_open == 0 && stats.objects_started == 0;
    k.total += 1;
    if !good {
        k.bad += 1;
    }
    crate::println!(
        "objects close_all closed={} failed={} open={} started={} ms={} {}",
        started.max(1),
        closed_bad,
        stats.objects_open,
        stats.objects_started,
        close_ms,
        common::ok(good)
    );
    Ok(())
}

fn setup(_: &Env) -> Result<(), &'static str> {
    common::hvprof("objects")?;
    let mut k = Checks { bad: 0, total: 0 };
    lifecycle(&mut k)?;
    create_checks(&mut k);
    if crate::start_info::param_u64("objects.limit", 1) != 0 {
        limit(&mut k)?;
    }
    crate::println!("objects checks={} bad={}", k.total, k.bad);
    if k.bad != 0 {
        *VERDICT.lock() = Err("a call returned the wrong status");
    }
    common::spawn(work::w().start, 0, work::plan(common::ms(1), 1, false))?;
    Ok(())
}

fn check(_: &Table) -> Result<(), &'static str> {
    *VERDICT.lock()
}
