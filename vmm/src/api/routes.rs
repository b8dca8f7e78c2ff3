//! The API's routes.

use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use super::http::{Request, Response};
use crate::outcome::RunOutcome;
use crate::profiler::host::{HostProfileError, HostProfileSpec};
use crate::profiler::stats::{total, StatsSnapshot};
use crate::report::profile::VcpuStats;
use crate::vcpu::Request as VcpuRequest;
use crate::vm::VmControl;

/// The body of POST /v1/profiles/host.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostProfileBody {
    start: Option<u64>,
    last: Option<u64>,
    bucket_shift: Option<u32>,
    cr3: Option<u64>,
    vcpus: Option<Vec<usize>>,
    cpl: Option<u8>,
}

/// The server's view of the VM.
pub struct ApiState {
    pub control: VmControl,
    paused: bool,
    started: Instant,
    shutdown_requested: bool,
}

/// Counters under the same names as in profile.json (`VcpuStats`), without the vCPU index.
fn stats_json(s: &StatsSnapshot) -> serde_json::Value {
    let mut v = serde_json::to_value(VcpuStats::from_snapshot(0, s)).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        map.remove("vcpu");
    }
    v
}

impl ApiState {
    pub fn new(control: VmControl) -> Self {
        ApiState {
            control,
            paused: false,
            started: Instant::now(),
            shutdown_requested: false,
        }
    }

    /// Runs what must happen after the response went out (shutdown).
    pub fn after_response(&mut self) {
        if self.shutdown_requested {
            self.control
                .stop
                .request(RunOutcome::Stopped("the control API".into()));
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
            "state": if self.paused { "paused" } else { "running" },
            "vcpus": self.control.vcpus.len(),
            "api_uptime_ms": u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "interval_100ns": self.control.profiler.time_interval(),
        });
        Response::json(200, body.to_string())
    }

    fn pause(&mut self) -> Response {
        if self.paused {
            return Response::error(409, "already paused");
        }
        let (tx, rx) = channel();
        let asked = self
            .control
            .vcpus
            .iter()
            .filter(|v| v.request(VcpuRequest::Pause(tx.clone())))
            .count();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut acked = 0;
        while acked < asked {
            let left = deadline.saturating_duration_since(Instant::now());
            if rx.recv_timeout(left).is_err() {
                break;
            }
            acked += 1;
        }
        self.paused = true;
        if acked < self.control.vcpus.len() {
            return Response::error(500, "not every vCPU acknowledged the pause");
        }
        Response::json(200, json!({ "state": "paused" }).to_string())
    }

    fn resume(&mut self) -> Response {
        if !self.paused {
            return Response::error(409, "not paused");
        }
        for v in &self.control.vcpus {
            v.request(VcpuRequest::Resume);
        }
        self.paused = false;
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
            .host_results()
            .iter()
            .map(|r| {
                json!({
                    "id": r.id, "running": r.running, "samples": r.total(),
                    "start": r.spec.start, "last": r.spec.last,
                    "bucket_shift": r.spec.bucket_shift, "cr3": r.spec.cr3, "vcpus": r.spec.vcpus,
                })
            })
            .collect();
        Response::json(200, json!(list).to_string())
    }

    fn host_start(&self, body: &[u8]) -> Response {
        let b: HostProfileBody =
            match serde_json::from_slice(if body.is_empty() { b"{}" } else { body }) {
                Ok(b) => b,
                Err(e) => return Response::error(400, &format!("bad profile: {e}")),
            };
        let whole = HostProfileSpec::whole_space();
        let spec = HostProfileSpec {
            start: b.start.unwrap_or(whole.start),
            last: b.last.unwrap_or(whole.last),
            bucket_shift: b.bucket_shift.unwrap_or(whole.bucket_shift),
            cr3: b.cr3,
            vcpus: b.vcpus,
            cpl: b.cpl,
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
        let Some(r) = self
            .control
            .profiler
            .host_results()
            .into_iter()
            .find(|r| r.id == id)
        else {
            return Response::error(404, "no such profile");
        };
        let buckets: Vec<[u64; 2]> = r.counts.iter().map(|(b, c)| [*b, *c]).collect();
        let body = json!({
            "id": r.id, "running": r.running, "samples": r.total(),
            "start": r.spec.start, "bucket_shift": r.spec.bucket_shift, "buckets": buckets,
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
