//! The API's routes.

use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::{Duration, Instant};

use report::hex::{Hex, OptHex};
use serde::{Deserialize, Deserializer};
use serde_json::json;

use super::addr;
use super::http::{Request, Response};
use super::serve::Handler;
use crate::outcome::RunOutcome;
use crate::profiler::host_profiles::{HostProfileError, HostProfileSpec};
use crate::profiler::vcpu_counters::{total, StatsSnapshot};
use crate::vcpu::Request as VcpuRequest;
use crate::vm::VmControl;

/// The body of POST /v1/profiles/host. Addresses may be numbers or `"0x..."` strings.
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostProfileBody {
    #[serde(default, deserialize_with = "start")]
    start: Option<u64>,
    #[serde(default, deserialize_with = "last")]
    last: Option<u64>,
    bucket_shift: Option<u32>,
    #[serde(default, deserialize_with = "cr3")]
    cr3: Option<u64>,
    vcpus: Option<Vec<usize>>,
    cpl: Option<u8>,
    stack_depth: Option<usize>,
    event: Option<String>,
    /// Guest process names (`["awk"]`).
    #[serde(default)]
    process: Vec<String>,
    /// Record the run on a time axis (issue 32).
    #[serde(default)]
    timeline: bool,
}

fn start<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    addr::optional(d, "start")
}

fn last<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    addr::optional(d, "last")
}

fn cr3<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    addr::optional(d, "cr3")
}

impl HostProfileBody {
    /// Reads a request body (empty: every default); the error is the 400 message.
    fn parse(body: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(if body.is_empty() { b"{}" } else { body })
            .map_err(|e| format!("bad profile: {e}"))
    }
}

/// The server's view of the VM.
pub struct ApiState {
    pub control: VmControl,
    started: Instant,
    shutdown_requested: bool,
}

/// Counters under the same names as in profile.json (`VcpuStats`), without the vCPU index.
fn stats_json(s: &StatsSnapshot) -> serde_json::Value {
    let mut v = serde_json::to_value(crate::report_input::vcpu_stats(0, s)).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        map.remove("vcpu");
    }
    v
}

impl ApiState {
    pub fn new(control: VmControl) -> Self {
        ApiState {
            control,
            started: Instant::now(),
            shutdown_requested: false,
        }
    }

    pub fn route(&mut self, req: &Request) -> Response {
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        match (req.method.as_str(), segments.as_slice()) {
            ("GET", ["v1", "vm"]) => self.vm_info(),
            ("PUT", ["v1", "vm", "pause"]) => self.pause(),
            ("PUT", ["v1", "vm", "resume"]) => self.resume(),
            ("PUT", ["v1", "vm", "shutdown"]) => {
                self.shutdown_requested = true;
                Response::json(200, json!({ "state": "shutting down" }).to_string())
            }
            ("GET", ["v1", "stats"]) => self.stats(),
            ("GET", ["v1", "profiles", "host"]) => self.host_list(),
            ("POST", ["v1", "profiles", "host"]) => self.host_start(&req.body),
            ("GET", ["v1", "profiles", "host", id]) => self.host_get(id),
            ("PUT", ["v1", "profiles", "host", id, "stop"]) => self.host_stop(id),
            (_, ["v1", "vm" | "stats"] | ["v1", "vm", _] | ["v1", "profiles", "host", ..]) => {
                Response::error(405, "method not allowed")
            }
            _ => Response::error(404, "no such resource"),
        }
    }

    fn vm_info(&self) -> Response {
        let body = json!({
            "state": if self.control.uptime.is_paused() { "paused" } else { "running" },
            "vcpus": self.control.vcpus.len(),
            "api_uptime_ms": u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "interval_100ns": self.control.profiler.time_interval(),
            "clock": self.control.profiler.sampling().clock().name(),
        });
        Response::json(200, body.to_string())
    }

    fn pause(&mut self) -> Response {
        if self.control.uptime.is_paused() {
            return Response::error(409, "already paused");
        }
        let (tx, rx) = channel();
        let asked = self
            .control
            .vcpus
            .iter()
            .filter(|v| v.request(VcpuRequest::Pause(tx.clone())))
            .count();
        // Waited for in slices, so the end of the run is noticed here too: the API thread must
        // not hold up the main thread's join of it.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut acked = 0;
        while acked < asked && !self.control.stop.is_requested() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(_) => acked += 1,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.control.uptime.pause();
        if acked < self.control.vcpus.len() {
            return Response::error(500, "not every vCPU acknowledged the pause");
        }
        Response::json(200, json!({ "state": "paused" }).to_string())
    }

    fn resume(&mut self) -> Response {
        if !self.control.uptime.is_paused() {
            return Response::error(409, "not paused");
        }
        for v in &self.control.vcpus {
            v.request(VcpuRequest::Resume);
        }
        self.control.uptime.resume();
        Response::json(200, json!({ "state": "running" }).to_string())
    }

    fn stats(&self) -> Response {
        let per_vcpu = self.control.profiler.stats();
        let body = json!({
            "total": stats_json(&total(&per_vcpu)),
            "vcpus": per_vcpu.iter().map(stats_json).collect::<Vec<_>>(),
        });
        Response::json(200, body.to_string())
    }

    fn host_list(&self) -> Response {
        let list: Vec<_> = self
            .control
            .profiler
            .host_summaries()
            .iter()
            .map(|r| {
                json!({
                    "id": r.id, "running": r.running, "samples": r.total,
                    "start": Hex(r.spec.start), "last": Hex(r.spec.last),
                    "bucket_shift": r.spec.bucket_shift, "cr3": OptHex(r.spec.cr3),
                    "vcpus": r.spec.vcpus, "stack_depth": r.spec.stack_depth,
                    "event": r.spec.event, "process": r.spec.process,
                    "timeline": r.spec.timeline,
                })
            })
            .collect();
        Response::json(200, json!(list).to_string())
    }

    fn host_start(&self, body: &[u8]) -> Response {
        let b = match HostProfileBody::parse(body) {
            Ok(b) => b,
            Err(e) => return Response::error(400, &e),
        };
        let whole = HostProfileSpec::whole_space();
        let spec = HostProfileSpec {
            start: b.start.unwrap_or(whole.start),
            last: b.last.unwrap_or(whole.last),
            bucket_shift: b.bucket_shift.unwrap_or(whole.bucket_shift),
            cr3: b.cr3,
            vcpus: b.vcpus,
            cpl: b.cpl,
            stack_depth: b.stack_depth.unwrap_or(whole.stack_depth),
            event: b.event,
            process: b.process,
            timeline: b.timeline,
        };
        if let Some(bad) = spec
            .vcpus
            .iter()
            .flatten()
            .find(|v| **v >= self.control.vcpus.len())
        {
            return Response::error(400, &format!("no vCPU {bad}"));
        }
        match self.control.profiler.start_host_profile(spec) {
            Ok(id) => Response::json(201, json!({ "id": id }).to_string()),
            Err(e) => Response::error(400, &e.to_string()),
        }
    }

    fn host_get(&self, id: &str) -> Response {
        let Ok(id) = id.parse::<u32>() else {
            return Response::error(404, "no such profile");
        };
        let Some(r) = self.control.profiler.host_result(id) else {
            return Response::error(404, "no such profile");
        };
        // [index, count] with the index as a "0x..." string: a whole-space profile's indices
        // pass 2^53, where readers of doubles round them.
        let buckets: Vec<(Hex, u64)> = r.counts.iter().map(|(b, c)| (Hex(*b), *c)).collect();
        let body = json!({
            "id": r.id, "running": r.running, "samples": r.total(),
            "start": Hex(r.spec.start), "bucket_shift": r.spec.bucket_shift, "buckets": buckets,
        });
        Response::json(200, body.to_string())
    }

    fn host_stop(&self, id: &str) -> Response {
        let Ok(id) = id.parse::<u32>() else {
            return Response::error(404, "no such profile");
        };
        match self.control.profiler.stop_host_profile(id) {
            Ok(()) => Response::json(200, json!({ "id": id, "running": false }).to_string()),
            Err(HostProfileError::Unknown(_)) => Response::error(404, "no such profile"),
            Err(e) => Response::error(409, &e.to_string()),
        }
    }
}

impl Handler for ApiState {
    fn stopped(&self) -> bool {
        self.control.stop.is_requested()
    }

    fn handle(&mut self, request: &Request) -> (Response, bool) {
        let response = self.route(request);
        (response, std::mem::take(&mut self.shutdown_requested))
    }

    /// The shutdown's answer went out: end the run.
    fn after(&mut self) {
        self.control
            .stop
            .request(RunOutcome::Stopped("the control API".into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_profile_body_takes_numbers_and_hex_strings() {
        let hex = HostProfileBody::parse(
            br#"{"start": "0xffffffff80000000", "last": "0xffffffffffffffff", "cr3": "0x1000"}"#,
        )
        .unwrap();
        assert_eq!(
            (hex.start, hex.last, hex.cr3),
            (Some(0xffff_ffff_8000_0000), Some(u64::MAX), Some(0x1000))
        );
        let num = HostProfileBody::parse(
            br#"{"start": 4096, "last": 8191, "bucket_shift": 4, "cr3": null, "cpl": 3}"#,
        )
        .unwrap();
        assert_eq!(
            (num.start, num.last, num.bucket_shift, num.cr3, num.cpl),
            (Some(4096), Some(8191), Some(4), None, Some(3))
        );
        assert_eq!(
            HostProfileBody::parse(b"").unwrap(),
            HostProfileBody::default()
        );
        assert!(!HostProfileBody::parse(b"{}").unwrap().timeline);
        assert!(
            HostProfileBody::parse(br#"{"timeline": true}"#)
                .unwrap()
                .timeline
        );
        assert!(HostProfileBody::parse(br#"{"timeline": 1}"#).is_err());
    }

    #[test]
    fn host_profile_body_errors_name_the_field() {
        for (body, field) in [
            (&br#"{"start": "0xzz"}"#[..], "start"),
            (br#"{"last": "ffff"}"#, "last"),
            (br#"{"cr3": -4096}"#, "cr3"),
        ] {
            let e = HostProfileBody::parse(body).unwrap_err();
            assert!(e.starts_with(&format!("bad profile: {field}: ")), "{e}");
        }
        let e = HostProfileBody::parse(br#"{"bogus": 1}"#).unwrap_err();
        assert!(e.contains("unknown field `bogus`"), "{e}");
    }
}
