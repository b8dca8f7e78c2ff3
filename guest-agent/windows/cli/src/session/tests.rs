use super::*;
use crate::plan::{plan, Region};
use hvprof_ioctl::checks::{parse_create, parse_exact};
use hvprof_ioctl::messages::{CreateIn, HandleRequest, SetIntervalIn};

/// A model of the driver: records calls, and "samples" into the buffer on STOP.
#[derive(Default)]
struct Model {
    calls: Vec<&'static str>,
    created: Option<CreateIn>,
    fail: Option<(&'static str, NtStatus)>,
    interval: u32,
}

fn name(code: u32) -> &'static str {
    hvprof_ioctl::codes::ALL
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("?", |(_, n)| n)
}

impl Device for Model {
    fn ioctl(&mut self, code: u32, input: &[u8], output: &mut [u8]) -> Result<usize, NtStatus> {
        let n = name(code);
        self.calls.push(n);
        if let Some((call, status)) = self.fail {
            if call == n {
                return Err(status);
            }
        }
        match n {
            "SET_INTERVAL" => {
                let s: SetIntervalIn = parse_exact(input)?;
                self.interval = s.interval.max(1000);
                reply(
                    output,
                    &IntervalReply {
                        interval: self.interval,
                        reserved: 0,
                    },
                )
            }
            "QUERY_INTERVAL" => reply(
                output,
                &IntervalReply {
                    interval: self.interval,
                    reserved: 0,
                },
            ),
            "CREATE" => {
                self.created = Some(parse_create(input)?);
                reply(
                    output,
                    &CreateReply {
                        handle: 4,
                        reserved: 0,
                        object_id: 1,
                    },
                )
            }
            "START" => {
                let h: HandleRequest = parse_exact(input)?;
                assert_eq!(h.handle, 4);
                reply(
                    output,
                    &StartReply {
                        pinned_pages: 1,
                        reserved: 0,
                    },
                )
            }
            "STOP" => {
                let c = self.created.unwrap();
                // Count as the VMM would: the buffer is this process's own memory.
                let counters = c.buffer as *mut u32;
                // SAFETY: `buffer` is the run's live counters Vec of buffer_size / 4 elements.
                unsafe {
                    *counters.add(1) += 3;
                    *counters.add((c.buffer_size / 4 - 1) as usize) += 1;
                }
                Ok(0)
            }
            "CLOSE" => Ok(0),
            "QUERY_INFO" => {
                let mut out = [0u8; 48];
                DriverInfo {
                    port: 0x6A0,
                    port_source: 2,
                    interface_version: 1,
                }
                .encode(&mut out);
                InfoReply {
                    abi_version: 1,
                    processor_count: 2,
                    ..InfoReply::default()
                }
                .encode(&mut out[8..]);
                output[..48].copy_from_slice(&out);
                Ok(48)
            }
            "READ_STATS" => reply(
                output,
                &StatsReply {
                    samples: 7,
                    ..StatsReply::default()
                },
            ),
            _ => Err(hvprof_ioctl::status::INVALID_DEVICE_REQUEST),
        }
    }
}

/// The process: a token holding the privilege or not, counters in this process.
#[derive(Default)]
struct ModelHost {
    held: bool,
    enabled: bool,
    counters: LocalCounters,
    writes: Vec<u64>,
}

impl Host for ModelHost {
    fn enable_profile_privilege(&mut self) -> Result<bool, String> {
        self.enabled = self.held;
        Ok(self.held)
    }
    fn alloc_counters(&mut self, n: usize) -> Result<u64, String> {
        Ok(self.counters.alloc(n))
    }
    fn write_u32(&mut self, addr: u64, value: u32) {
        self.writes.push(addr);
        self.counters.write(addr, value);
    }
    fn read_u32(&self, addr: u64) -> u32 {
        self.counters.read(addr)
    }
}

fn reply<W: Wire>(out: &mut [u8], w: &W) -> Result<usize, NtStatus> {
    w.encode(out).ok_or(NtStatus::BUFFER_TOO_SMALL)
}

fn test_plan() -> Plan {
    let r = Region {
        name: "x.sys".into(),
        base: 0x1000,
        size: 0x100,
        process_id: 0,
    };
    plan(r, 4, 0).unwrap()
}

#[test]
fn a_run_issues_the_calls_in_order_and_collects_counts() {
    let mut m = Model {
        interval: 39063,
        ..Model::default()
    };
    let mut waited = false;
    let out = run(
        &mut m,
        &mut ModelHost::default(),
        &test_plan(),
        Some(500),
        || {
            waited = true;
            Ok(())
        },
    )
    .unwrap();
    assert!(waited);
    assert_eq!(
        m.calls,
        [
            "SET_INTERVAL",
            "QUERY_INTERVAL",
            "CREATE",
            "START",
            "STOP",
            "CLOSE"
        ]
    );
    assert_eq!(out.interval, 1000);
    assert_eq!(out.pinned_pages, 1);
    assert_eq!(out.counts.len(), 16);
    assert_eq!(out.counts[1], 3);
    assert_eq!(out.counts[15], 1);
    let c = m.created.unwrap();
    assert_eq!(
        (c.base, c.size, c.buffer_size, c.bucket_size),
        (0x1000, 0x100, 64, 4)
    );
}

#[test]
fn a_failed_start_still_closes_and_reports_the_status() {
    let mut m = Model {
        fail: Some(("START", NtStatus::PROFILING_AT_LIMIT)),
        ..Model::default()
    };
    let e = run(
        &mut m,
        &mut ModelHost::default(),
        &test_plan(),
        None,
        || panic!("must not wait"),
    )
    .unwrap_err();
    assert_eq!(
        e,
        SessionError::Driver {
            call: "START",
            status: NtStatus::PROFILING_AT_LIMIT
        }
    );
    assert!(e.to_string().contains("STATUS_PROFILING_AT_LIMIT"));
    assert_eq!(m.calls, ["QUERY_INTERVAL", "CREATE", "START", "CLOSE"]);
}

#[test]
fn a_failed_command_still_stops_and_closes() {
    let mut m = Model::default();
    let e = run(
        &mut m,
        &mut ModelHost::default(),
        &test_plan(),
        None,
        || Err("cmd.exe: not found".into()),
    )
    .unwrap_err();
    assert_eq!(e, SessionError::Wait("cmd.exe: not found".into()));
    assert_eq!(
        m.calls,
        ["QUERY_INTERVAL", "CREATE", "START", "STOP", "CLOSE"]
    );
}

#[test]
fn create_failures_come_back_unchanged() {
    let mut m = Model {
        fail: Some(("CREATE", NtStatus::PRIVILEGE_NOT_HELD)),
        ..Model::default()
    };
    let e = run(
        &mut m,
        &mut ModelHost::default(),
        &test_plan(),
        None,
        || Ok(()),
    )
    .unwrap_err();
    assert_eq!(
        e,
        SessionError::Driver {
            call: "CREATE",
            status: NtStatus::PRIVILEGE_NOT_HELD
        }
    );
    assert_eq!(m.calls, ["QUERY_INTERVAL", "CREATE"]);
}

#[test]
fn info_and_stats() {
    let mut m = Model::default();
    let (d, v) = query_info(&mut m).unwrap();
    assert_eq!((d.port, d.port_source), (0x6A0, 2));
    assert_eq!(v.processor_count, 2);
    assert_eq!(read_stats(&mut m).unwrap().samples, 7);
}

#[test]
fn a_run_enables_the_privilege_and_touches_every_counter_page_before_create() {
    let mut m = Model::default();
    let mut host = ModelHost {
        held: true,
        ..ModelHost::default()
    };
    let r = Region {
        name: "x.sys".into(),
        base: 0x1000,
        size: 0x10000,
        process_id: 0,
    };
    run(&mut m, &mut host, &plan(r, 2, 0).unwrap(), None, || Ok(())).unwrap();
    assert!(host.enabled);
    // 0x4000 counters = 64 KiB: at least one write in each of the 16 or 17 pages spanned.
    let mut pages: Vec<u64> = host.writes.iter().map(|a| a >> 12).collect();
    pages.dedup();
    assert!(pages.len() >= 16 && pages.len() == host.writes.len());
}
