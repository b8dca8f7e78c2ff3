//! The control API on a running reference guest: read the VM, start a host-side profile, pause
//! (samples stop growing), resume, stop the profile, shut down; addresses are "0x..." strings
//! in responses and numbers or "0x..." strings in requests; and nobody but the socket's owner
//! gets in.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{hvprof_run, TempDir};

/// Sends one request and returns (status, body).
fn call(socket: &Path, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let mut s = UnixStream::connect(socket).expect("connect to the API socket");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: hvprof\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp[9..12].parse().unwrap();
    let json = resp.split("\r\n\r\n").nth(1).unwrap_or("null");
    (
        status,
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}

/// A read `?since=` the token of `whole` (a read whose buckets are `buckets`) gives what grew:
/// the two add up to a later read's counts. Other query parameters are refused; the process
/// table and the run's kernel are there to read.
fn check_since(socket: &Path, id: u64, whole: &serde_json::Value, buckets: &[(u64, u64)]) {
    let token = whole["token"].as_u64().expect("every read has a token");
    let profile = format!("/v1/profiles/host/{id}");
    eventually("more samples", || {
        host_samples(socket, id) > whole["samples"].as_u64().unwrap()
    });
    let (status, grown) = call(socket, "GET", &format!("{profile}?since={token}"), "");
    assert_eq!(
        (status, grown["since"].as_u64()),
        (200, Some(token)),
        "{grown}"
    );
    let added = host_buckets(&grown, u64::MAX);
    assert!(
        added.iter().all(|&(_, n)| n > 0),
        "increments only: {grown}"
    );
    let sum = |b: &[(u64, u64)]| b.iter().map(|(_, n)| n).sum::<u64>();
    assert_eq!(
        sum(buckets) + sum(&added),
        grown["samples"].as_u64().unwrap(),
        "what grew and what was there are the later read's counts: {grown}"
    );
    assert!(grown["token"].as_u64() > Some(token));
    // Without a guest OS each address space is a row ([cr3 0x..]): every sample has one.
    let per_thread: u64 = (grown["threads"].as_array().unwrap().iter())
        .flat_map(|t| {
            t[1].as_array()
                .unwrap()
                .iter()
                .map(|b| b[1].as_u64().unwrap())
        })
        .sum();
    assert_eq!(per_thread, sum(&added), "{grown}");
    let (status, _) = call(socket, "GET", &format!("{profile}?since=0"), "");
    assert_eq!(status, 200);
    for bad in ["?since=x", "?since=-1", "?until=3", "?since=1&x=2"] {
        let (status, e) = call(socket, "GET", &format!("{profile}{bad}"), "");
        assert_eq!(status, 400, "{bad}: {e}");
    }
    let (status, table) = call(socket, "GET", "/v1/processes", "");
    assert_eq!(status, 200, "{table}");
    assert!(
        table["processes"].is_array() && table["threads"].is_array(),
        "{table}"
    );
    let (_, vm) = call(socket, "GET", "/v1/vm", "");
    assert_eq!(
        vm["kernel"].as_str(),
        Some(env!("HVPROF_REFGUEST_ELF")),
        "{vm}"
    );
}

fn wait_for_socket(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < deadline, "the API socket never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `holds` until it is true. When the vCPUs get to run (and so take samples) is up to the
/// host's scheduler, so a test waits for samples instead of sleeping a fixed time; the limit
/// only turns "never" into a failure.
fn eventually(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holds() {
        assert!(Instant::now() < deadline, "{what} within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn host_samples(socket: &Path, id: u64) -> u64 {
    let (status, p) = call(socket, "GET", &format!("/v1/profiles/host/{id}"), "");
    assert_eq!(status, 200, "{p}");
    p["samples"].as_u64().unwrap()
}

/// GET /v1/profiles/host/{id}'s `buckets` as (index, count) pairs: the index a lower-case
/// "0x..." string (whole-space indices pass 2^53), the count a number; every index, parsed,
/// lies in the profile's range (`last` is the profile's last address, from the list).
fn host_buckets(p: &serde_json::Value, last: u64) -> Vec<(u64, u64)> {
    let start = parse_hex(p["start"].as_str().expect("start is a string"));
    let shift = p["bucket_shift"]
        .as_u64()
        .expect("bucket_shift is a number");
    let max_index = (last - start) >> shift;
    let buckets = p["buckets"].as_array().expect("buckets is an array");
    buckets
        .iter()
        .map(|b| match b.as_array().map(Vec::as_slice) {
            Some([index, count]) => {
                let text = index
                    .as_str()
                    .unwrap_or_else(|| panic!("a bucket index is not a string: {b}"));
                let i = parse_hex(text);
                assert_eq!(text, format!("{i:#x}"), "not lower-case minimal hex: {b}");
                assert!(
                    i <= max_index,
                    "bucket {i:#x} is past the profile's last bucket {max_index:#x}: {p}"
                );
                let count = count
                    .as_u64()
                    .unwrap_or_else(|| panic!("a bucket count is not a number: {b}"));
                assert!(count > 0, "a zero bucket: {b}");
                (i, count)
            }
            _ => panic!("a bucket is not an [index, count] pair: {b}"),
        })
        .collect()
}

/// `"0x..."` as a number.
fn parse_hex(s: &str) -> u64 {
    let digits = s
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("{s:?} has no 0x prefix"));
    assert!(
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_hexdigit()),
        "{s:?} is not hex"
    );
    u64::from_str_radix(digits, 16).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// GET /v1/profiles/host, as (id, entry), checking the ids are unique.
fn host_list(socket: &Path) -> Vec<(u64, serde_json::Value)> {
    let (status, list) = call(socket, "GET", "/v1/profiles/host", "");
    assert_eq!(status, 200, "{list}");
    let list: Vec<_> = list
        .as_array()
        .expect("the list is an array")
        .iter()
        .map(|p| (p["id"].as_u64().unwrap(), p.clone()))
        .collect();
    for (i, (id, _)) in list.iter().enumerate() {
        assert!(
            list[..i].iter().all(|(other, _)| other != id),
            "id {id} twice"
        );
    }
    list
}

#[test]
fn api_pauses_profiles_and_shuts_down_a_running_vm() {
    let dir = TempDir::new("api");
    let socket = dir.join("api.sock");
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let sock = socket.to_str().unwrap();
    let mut run = hvprof_run(
        elf,
        &[
            "--cmdline",
            "scenario=shares shares.ms=60000",
            "--api-socket",
            sock,
        ],
    )
    .limit(Duration::from_secs(90))
    .spawn();
    wait_for_socket(&socket);
    run.wait_for_stdout("refguest: scenario shares start", Duration::from_secs(30));

    let (status, vm) = call(&socket, "GET", "/v1/vm", "");
    assert_eq!(
        (status, vm["state"].as_str()),
        (200, Some("running")),
        "{vm}"
    );

    // A host-side profile of the whole address space, 16-byte buckets; addresses as numbers
    // (the last one above 2^53).
    let (status, created) = call(
        &socket,
        "POST",
        "/v1/profiles/host",
        r#"{"start": 0, "last": 18446744073709551615, "bucket_shift": 4}"#,
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_u64().unwrap();
    eventually("the host profile counts samples", || {
        host_samples(&socket, id) > 0
    });

    // Paused: the guest does not run, so nothing is sampled. (Pausing returns once every vCPU
    // has acknowledged it, so no sample is in flight: this holds however long the window.)
    assert_eq!(call(&socket, "PUT", "/v1/vm/pause", "").0, 200);
    let paused_a = host_samples(&socket, id);
    std::thread::sleep(Duration::from_millis(400));
    let paused_b = host_samples(&socket, id);
    assert_eq!(paused_a, paused_b, "samples grew while paused");
    assert_eq!(call(&socket, "GET", "/v1/vm", "").1["state"], "paused");
    assert_eq!(call(&socket, "PUT", "/v1/vm/pause", "").0, 409);

    // Resumed: sampling continues.
    assert_eq!(call(&socket, "PUT", "/v1/vm/resume", "").0, 200);
    eventually("sampling resumes", || host_samples(&socket, id) > paused_b);

    let (status, stats) = call(&socket, "GET", "/v1/stats", "");
    assert_eq!(status, 200);
    assert!(stats["total"]["samples"].as_u64().unwrap() > 0, "{stats}");

    // Responses give addresses as "0x..." strings, and bucket indices too ([index, count]).
    let (status, whole) = call(&socket, "GET", &format!("/v1/profiles/host/{id}"), "");
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["start"].as_str(), Some("0x0"), "{whole}");
    let buckets = host_buckets(&whole, u64::MAX);
    assert!(!buckets.is_empty(), "no buckets: {whole}");
    assert!(
        buckets.windows(2).all(|w| w[0].0 < w[1].0),
        "buckets not in increasing index order: {whole}"
    );
    assert_eq!(
        buckets.iter().map(|(_, c)| c).sum::<u64>(),
        whole["samples"].as_u64().unwrap(),
        "{whole}"
    );
    check_since(&socket, id, &whole, &buckets);
    let (hot, _) = *buckets.iter().max_by_key(|(_, c)| *c).expect("no buckets");
    // A profile of the hottest bucket's page, with its addresses as hex strings; it counts
    // only if they were read as hex.
    let page = (hot << 4) & !0xfff;
    let (page_start, page_last) = (format!("{page:#x}"), format!("{:#x}", page + 0xfff));
    let body = format!(r#"{{"start": "{page_start}", "last": "{page_last}", "bucket_shift": 4}}"#);
    let (status, created) = call(&socket, "POST", "/v1/profiles/host", &body);
    assert_eq!(status, 201, "{created}");
    let page_id = created["id"].as_u64().unwrap();
    // A process filter as a hex string (echoed back; it need not match anything).
    let (status, created) = call(
        &socket,
        "POST",
        "/v1/profiles/host",
        r#"{"cr3": "0x1000", "cpl": 3}"#,
    );
    assert_eq!(status, 201, "{created}");
    let cr3_id = created["id"].as_u64().unwrap();
    // The hottest bucket is in the workload's loop, which keeps running.
    eventually("the page profile counts samples", || {
        host_samples(&socket, page_id) > 0
    });
    let (status, paged) = call(&socket, "GET", &format!("/v1/profiles/host/{page_id}"), "");
    assert_eq!(status, 200, "{paged}");
    assert_eq!(
        paged["start"].as_str(),
        Some(page_start.as_str()),
        "{paged}"
    );
    assert!(
        paged["samples"].as_u64().unwrap() > 0,
        "the page profile counted nothing"
    );
    // Every index within the page (0..=0xff for 16-byte buckets).
    assert!(
        !host_buckets(&paged, page + 0xfff).is_empty(),
        "no buckets: {paged}"
    );

    // Bad hex strings are refused, naming the field.
    for (body, field) in [
        (r#"{"start": "0xzz"}"#, "start"),
        (r#"{"last": "ffff"}"#, "last"),
        (r#"{"cr3": "0x"}"#, "cr3"),
    ] {
        let (status, e) = call(&socket, "POST", "/v1/profiles/host", body);
        assert_eq!(status, 400, "{body}: {e}");
        let message = e["error"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("{field}: ")), "{body}: {e}");
    }
    // A process name and a CR3 together, or an empty name, are refused by what they break.
    for (body, says) in [
        (r#"{"process": ["awk"], "cr3": 4096}"#, "not both"),
        (r#"{"process": [""]}"#, "process names"),
    ] {
        let (status, e) = call(&socket, "POST", "/v1/profiles/host", body);
        assert_eq!(status, 400, "{body}: {e}");
        assert!(
            e["error"].as_str().unwrap_or_default().contains(says),
            "{body}: {e}"
        );
    }

    assert_eq!(
        call(&socket, "PUT", &format!("/v1/profiles/host/{id}/stop"), "").0,
        200
    );

    // The list: the three profiles (the refused ones were not created), addresses as strings,
    // and the stopped profile's total equal to its buckets' sum.
    let list = host_list(&socket);
    let ids: Vec<u64> = list.iter().map(|(i, _)| *i).collect();
    assert_eq!(ids, [id, page_id, cr3_id], "{list:?}");
    let entry = |want: u64| &list.iter().find(|(i, _)| *i == want).unwrap().1;
    let first = entry(id);
    assert_eq!(
        (first["start"].as_str(), first["last"].as_str()),
        (Some("0x0"), Some("0xffffffffffffffff")),
        "{first}"
    );
    assert!(first["cr3"].is_null(), "{first}");
    assert_eq!(first["running"], false, "{first}");
    let (status, stopped) = call(&socket, "GET", &format!("/v1/profiles/host/{id}"), "");
    assert_eq!(status, 200, "{stopped}");
    let sum: u64 = host_buckets(&stopped, u64::MAX)
        .iter()
        .map(|(_, c)| c)
        .sum();
    assert!(sum > 0);
    assert_eq!(first["samples"].as_u64(), Some(sum), "{first}");
    assert_eq!(stopped["samples"].as_u64(), Some(sum), "{stopped}");
    let paged = entry(page_id);
    assert_eq!(
        (paged["start"].as_str(), paged["last"].as_str()),
        (Some(page_start.as_str()), Some(page_last.as_str())),
        "{paged}"
    );
    assert!(paged["samples"].as_u64().unwrap() > 0, "{paged}");
    assert_eq!(paged["running"], true, "{paged}");
    assert_eq!(entry(cr3_id)["cr3"].as_str(), Some("0x1000"));
    assert_eq!(
        call(&socket, "PUT", &format!("/v1/profiles/host/{id}/stop"), "").0,
        409
    );
    assert_eq!(call(&socket, "GET", "/v1/profiles/host/99", "").0, 404);
    assert_eq!(
        call(&socket, "POST", "/v1/profiles/host", r#"{"bogus": 1}"#).0,
        400
    );
    assert_eq!(call(&socket, "DELETE", "/v1/vm", "").0, 405);

    assert_eq!(call(&socket, "PUT", "/v1/vm/shutdown", "").0, 200);
    let out = run.wait();
    out.assert_status(0);
    out.assert_stderr_contains("stopped by the control API");
    assert!(!socket.exists(), "the socket file is removed at exit");
}

#[test]
fn api_socket_refuses_other_users() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test switches user and must run as root");
    let dir = TempDir::new("api-owner");
    let socket = dir.join("api.sock");
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let sock = socket.to_str().unwrap();
    let run = hvprof_run(
        elf,
        &[
            "--cmdline",
            "scenario=shares shares.ms=60000",
            "--api-socket",
            sock,
        ],
    )
    .limit(Duration::from_secs(60))
    .spawn();
    wait_for_socket(&socket);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Connect as nobody: the socket's mode refuses it.
    assert_eq!(
        connect_as_nobody(&socket),
        libc::EACCES,
        "another user could connect"
    );
    assert_eq!(call(&socket, "PUT", "/v1/vm/shutdown", "").0, 200);
    run.wait().assert_status(0);
}

/// Forks, becomes uid/gid 65534 in the child, and tries to connect; returns the child's exit
/// status: 0 if it connected, else the connect errno.
fn connect_as_nobody(socket: &Path) -> i32 {
    let path = std::ffi::CString::new(socket.to_str().unwrap()).unwrap();
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).unwrap();
    for (d, s) in addr.sun_path.iter_mut().zip(path.as_bytes()) {
        *d = libc::c_char::from_ne_bytes([*s]);
    }
    // SAFETY: the child only makes async-signal-safe calls (setgid, setuid, socket, connect,
    // _exit) on memory prepared before the fork.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(100);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let len = u32::try_from(std::mem::size_of::<libc::sockaddr_un>()).unwrap();
            let rc = libc::connect(fd, std::ptr::addr_of!(addr).cast(), len);
            libc::_exit(if rc == 0 {
                0
            } else {
                *libc::__errno_location()
            });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        libc::WEXITSTATUS(status)
    }
}

/// `profile --duration` counts the guest's running time: a pause through the API does not eat
/// into it. The guest runs 60 s of work, so only --duration ends the run; the run then lasts at
/// least the duration plus the pause, however the host schedules it.
#[test]
fn a_pause_does_not_count_against_the_profiles_duration() {
    const DURATION: Duration = Duration::from_secs(2);
    const PAUSE: Duration = Duration::from_secs(3);
    let dir = TempDir::new("api-duration");
    let socket = dir.join("api.sock");
    let out = dir.join("out");
    let mut run = crate::harness::hvprof([
        "profile",
        "--quiet",
        "--cmdline",
        "scenario=shares shares.ms=60000",
        "--duration",
        "2",
        "--api-socket",
        socket.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .limit(Duration::from_secs(90))
    .spawn();
    wait_for_socket(&socket);
    run.wait_for_stdout("refguest: scenario shares start", Duration::from_secs(30));
    let paused_at = Instant::now();
    assert_eq!(call(&socket, "PUT", "/v1/vm/pause", "").0, 200);
    std::thread::sleep(PAUSE);
    assert_eq!(call(&socket, "PUT", "/v1/vm/resume", "").0, 200);
    let out = run.wait();
    out.assert_status(0)
        .assert_stderr_contains("stopped by --duration");
    assert!(
        paused_at.elapsed() >= PAUSE,
        "the run ended {:.2?} after the pause began, within the pause itself\n{out}",
        paused_at.elapsed()
    );
    assert!(
        out.elapsed >= DURATION + PAUSE,
        "the run took {:.2?}: the pause counted against --duration\n{out}",
        out.elapsed
    );
}
