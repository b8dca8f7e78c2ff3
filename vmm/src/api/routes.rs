//! The API's routes.

use std::time::Instant;

use report::hex::{Hex, OptHex};
use serde::{Deserialize, Deserializer};
use serde_json::json;

use super::addr;
use super::http::{Request, Response};
use super::pause::{PauseEnd, PendingPause, PAUSE_BOUND};
use super::serve::{Answer, Handler};
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
    /// Count per guest thread while guest awareness is on (default true).
    names: Option<bool>,
    /// With the in-kernel sampler, the samples that need registers by kicks at this interval.
    kick_interval: Option<u32>,
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
    /// The run's kernel as profile.json names it (`run.kernel`), for clients that symbolize.
    kernel: String,
    /// Each host profile's last reads, for reads of what grew since ([`super::deltas`]).
    reads: super::deltas::Reads,
    started: Instant,
    shutdown_requested: bool,
    /// The pause whose answer is deferred until the vCPUs acknowledge it (one at a time: the
    /// only deferred answer).
    pausing: Option<PendingPause>,
}

/// What a route gives: an answer now, or a pause to wait for.
enum Routed {
    Now(Response),
    Pause,
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
            kernel: String::new(),
            reads: super::deltas::Reads::default(),
            started: Instant::now(),
            shutdown_requested: false,
            pausing: None,
        }
    }

    /// The state of a run of `kernel` (as profile.json's `run.kernel` names it).
    pub fn with_kernel(mut self, kernel: String) -> Self {
        self.kernel = kernel;
        self
    }

    fn route(&mut self, req: &Request) -> Routed {
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        Routed::Now(match (req.method.as_str(), segments.as_slice()) {
            ("GET", ["v1", "vm"]) => self.vm_info(),
            ("PUT", ["v1", "vm", "pause"]) => return self.pause(),
            ("PUT", ["v1", "vm", "resume"]) => self.resume(),
            ("PUT", ["v1", "vm", "shutdown"]) => {
                self.shutdown_requested = true;
                Response::json(200, json!({ "state": "shutting down" }).to_string())
            }
            ("GET", ["v1", "stats"]) => self.stats(),
            ("GET", ["v1", "profiles", "host"]) => self.host_list(),
            ("POST", ["v1", "profiles", "host"]) => self.host_start(&req.body),
            ("GET", ["v1", "profiles", "host", id]) => {
                super::live::host_counts(&self.control.profiler, &mut self.reads, id, &req.query)
            }
            ("GET", ["v1", "processes"]) => super::live::processes(&self.control.profiler),
            ("PUT", ["v1", "profiles", "host", id, "stop"]) => self.host_stop(id),
            (
                _,
                ["v1", "vm" | "stats" | "processes"]
                | ["v1", "vm", _]
                | ["v1", "profiles", "host", ..],
            ) => Response::error(405, "method not allowed"),
            _ => Response::error(404, "no such resource"),
        })
    }

    fn vm_info(&self) -> Response {
        let state = if self.pausing.is_some() {
            "pausing"
        } else if self.control.uptime.is_paused() {
            "paused"
        } else {
            "running"
        };
        let body = json!({
            "state": state,
            "vcpus": self.control.vcpus.len(),
            "api_uptime_ms": u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "interval_100ns": self.control.profiler.time_interval(),
            "clock": self.control.profiler.sampling().clock().name(),
            "sampler": self.control.profiler.sampling().mode().name(),
            "kernel": self.kernel,
        });
        Response::json(200, body.to_string())
    }

    /// Asks the vCPUs to pause; the answer waits for their acknowledgements (at most
    /// [`PAUSE_BOUND`]) without holding up other clients ([`Handler::ready`]).
    fn pause(&mut self) -> Routed {
        if self.pausing.is_some() {
            return Routed::Now(Response::error(409, "a pause is in progress"));
        }
        if self.control.uptime.is_paused() {
            return Routed::Now(Response::error(409, "already paused"));
        }
        self.pausing = Some(PendingPause::start(&self.control.vcpus, PAUSE_BOUND));
        Routed::Pause
    }

    /// The pending pause's answer, once it has one.
    fn pause_ended(&mut self) -> Option<Response> {
        let run_over = self.control.stop.is_requested();
        let end = self.pausing.as_mut()?.poll(Instant::now(), run_over)?;
        self.pausing = None;
        self.control.uptime.pause();
        Some(match end {
            PauseEnd::Paused => Response::json(200, json!({ "state": "paused" }).to_string()),
            PauseEnd::Partial { acked, of } => Response::error(
                500,
                &format!("{acked} of {of} vCPUs acknowledged the pause"),
            ),
        })
    }

    fn resume(&mut self) -> Response {
        if self.pausing.is_some() {
            return Response::error(409, "a pause is in progress");
        }
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
                    "timeline": r.spec.timeline, "names": r.spec.names,
                    "kick_interval": r.spec.kick_interval,
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
            names: b.names.unwrap_or(whole.names),
            kick_interval: b.kick_interval,
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

    fn handle(&mut self, request: &Request) -> Answer {
        match self.route(request) {
            Routed::Now(response) => {
                Answer::Now(response, std::mem::take(&mut self.shutdown_requested))
            }
            Routed::Pause => Answer::Later,
        }
    }

    fn ready(&mut self) -> Option<Response> {
        self.pause_ended()
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

    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::sync::mpsc::{channel, Receiver};
    use std::sync::Arc;
    use std::time::Duration;

    use vm_memory::{GuestAddress, GuestMemoryMmap};

    use crate::outcome::StopSignal;
    use crate::profiler::Profiler;
    use crate::sampler::probe::ProbeReport;
    use crate::sampler::{Clock, Sampling};
    use crate::signals::KickTable;
    use crate::vcpu::VcpuRequester;
    use crate::vm::uptime::Uptime;

    /// A VM's controls with made-up vCPUs (their requests arrive on the receivers).
    fn control(vcpus: usize) -> (VmControl, Vec<Receiver<VcpuRequest>>) {
        let kvm = kvm_ioctls::Kvm::new().expect("/dev/kvm");
        let vm_fd = Arc::new(kvm.create_vm().expect("KVM_CREATE_VM"));
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let report = ProbeReport { events: Vec::new() };
        let sampling = Arc::new(Sampling::new(Clock::Wall, &report).unwrap());
        let kicks = Arc::new(KickTable::new(vcpus));
        let clock = crate::clock::RunClock::start();
        let profiler = Profiler::new(mem, vm_fd, kicks, sampling, Arc::new(report), clock).unwrap();
        let (requesters, receivers) = (0..vcpus).map(VcpuRequester::detached).unzip();
        let control = VmControl {
            stop: Arc::new(StopSignal::new().unwrap()),
            profiler: Arc::new(profiler),
            vcpus: requesters,
            uptime: Arc::new(Uptime::start()),
        };
        (control, receivers)
    }

    fn send(socket: &std::path::Path, method: &str, path: &str) -> UnixStream {
        let mut s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(format!("{method} {path} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        s
    }

    fn answer(mut s: UnixStream) -> String {
        let mut out = String::new();
        s.read_to_string(&mut out).expect("an answer");
        out
    }

    /// Issue 40: a host profile restricted to processes by name was started in a run that can
    /// never name a process, and counted nothing without a word.
    #[test]
    fn a_process_filter_that_could_never_match_was_accepted() {
        use crate::profiler::host_profiles::guest_awareness::GuestTypes;
        for (types, why) in [
            (GuestTypes::Off, "--guest-os off"),
            (GuestTypes::AddressSpaces, "no guest kernel layout"),
        ] {
            let (control, _vcpus) = control(1);
            assert!(control.profiler.guest().set_types(types).is_none());
            let mut state = ApiState::new(control);
            let request = Request {
                method: "POST".into(),
                path: "/v1/profiles/host".into(),
                query: String::new(),
                body: br#"{"process": ["awk"]}"#.to_vec(),
            };
            let Answer::Now(r, _) = state.handle(&request) else {
                panic!("deferred");
            };
            assert_eq!(r.status, 400, "{}", r.body);
            assert!(
                r.body.contains("counts nothing") && r.body.contains(why),
                "{}",
                r.body
            );
            assert!(state.control.profiler.host_summaries().is_empty());
        }
    }

    /// Issue 40: the API's pause waited for the vCPUs inside the serving loop, so a client
    /// asking anything meanwhile waited for the pause (or was closed with 408). Here the one
    /// vCPU acknowledges the pause only once another client's GET has been answered.
    #[test]
    fn pause_blocked_every_other_client() {
        let dir = std::env::temp_dir().join(format!("hvprof-routes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("api.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let (control, mut receivers) = control(1);
        let stop = control.stop.clone();
        let mut state = ApiState::new(control);
        let server = std::thread::spawn(move || {
            // SAFETY: geteuid has no preconditions.
            let owner = unsafe { libc::geteuid() };
            super::super::serve::serve(
                &listener,
                owner,
                &mut state,
                &super::super::serve::Limits::API,
            );
        });
        let (answered, got_answered) = channel::<()>();
        let (asked, got_asked) = channel::<()>();
        let vcpu_rx = receivers.remove(0);
        let vcpu = std::thread::spawn(move || {
            let Ok(VcpuRequest::Pause(ack)) = vcpu_rx.recv_timeout(Duration::from_secs(30)) else {
                panic!("no pause request");
            };
            asked.send(()).unwrap();
            // Not acknowledged until the other client has its answer (or 30 s have passed).
            let _ = got_answered.recv_timeout(Duration::from_secs(30));
            let _ = ack.send(0);
            vcpu_rx
        });
        let pause = send(&socket, "PUT", "/v1/vm/pause");
        // The GET is sent once the pause is under way.
        got_asked.recv().unwrap();
        let get = answer(send(&socket, "GET", "/v1/vm"));
        assert!(get.starts_with("HTTP/1.1 200 "), "{get}");
        answered.send(()).unwrap();
        let paused = answer(pause);
        assert!(paused.starts_with("HTTP/1.1 200 "), "{paused}");
        assert!(paused.ends_with(r#"{"state":"paused"}"#), "{paused}");
        let _ = vcpu.join();
        stop.request(RunOutcome::Stopped("the test".into()));
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

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
