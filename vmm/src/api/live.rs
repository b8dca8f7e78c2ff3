//! Routes for clients that watch a running VM (`hvprof top`): a host profile's counts, whole
//! or since the client's last read ([`super::deltas`]), and the guest's processes and threads
//! by name.

use report::hex::Hex;
use serde_json::json;

use super::deltas::Reads;
use super::http::Response;
use crate::profiler::Profiler;

/// GET /v1/profiles/host/{id}[?since=TOKEN]: every count, or with `since` what grew since
/// that read (and per guest thread); each answer carries the token of this read.
pub(super) fn host_counts(
    profiler: &Profiler,
    reads: &mut Reads,
    id: &str,
    query: &str,
) -> Response {
    let Ok(id) = id.parse::<u32>() else {
        return Response::error(404, "no such profile");
    };
    let since = match since(query) {
        Ok(s) => s,
        Err(e) => return Response::error(400, &e),
    };
    let Some(r) = profiler.host_counts(id) else {
        return Response::error(404, "no such profile");
    };
    let samples = r.total();
    let hex = |b: Vec<(u64, u64)>| -> Vec<(Hex, u64)> {
        b.into_iter().map(|(i, n)| (Hex(i), n)).collect()
    };
    let head = json!({
        "id": r.id, "running": r.running, "samples": samples,
        "start": Hex(r.spec.start), "bucket_shift": r.spec.bucket_shift,
    });
    let (counts, threads) = (r.counts, r.threads);
    let body = match since {
        // [index, count] with the index as a "0x..." string: a whole-space profile's indices
        // pass 2^53, where readers of doubles round them.
        None => {
            let buckets: Vec<(Hex, u64)> = counts.iter().map(|(b, c)| (Hex(*b), *c)).collect();
            let token = reads.read(id, None, counts, threads).token;
            with(head, json!({ "token": token, "buckets": buckets }))
        }
        Some(t) => {
            let g = reads.read(id, Some(t), counts, threads);
            let threads: Vec<(u32, Vec<(Hex, u64)>)> = g
                .threads
                .into_iter()
                .map(|(row, b)| (row, hex(b)))
                .collect();
            with(
                head,
                json!({ "token": g.token, "since": g.since, "buckets": hex(g.buckets), "threads": threads }),
            )
        }
    };
    Response::json(200, body.to_string())
}

/// `a`'s fields and `b`'s in one object.
fn with(mut a: serde_json::Value, b: serde_json::Value) -> serde_json::Value {
    if let (Some(a), serde_json::Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// The `since` token of a query string; any other parameter is refused.
fn since(query: &str) -> Result<Option<u64>, String> {
    let mut since = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("since", v)) => {
                let t = v
                    .parse::<u64>()
                    .map_err(|_| "since: not a read's token".to_string())?;
                since = Some(t);
            }
            _ => return Err("unknown query parameter (only since=TOKEN is known)".to_string()),
        }
    }
    Ok(since)
}

/// GET /v1/processes: the run's process and thread rows (the keys a profile's `threads`
/// use), named as far as the guest's kernel was read.
pub(super) fn processes(profiler: &Profiler) -> Response {
    let (processes, threads) = profiler.guest().table().rows();
    let processes: Vec<serde_json::Value> = processes
        .iter()
        .map(|p| json!({ "key": p.key, "pid": p.pid, "name": p.name, "kernel": p.kernel }))
        .collect();
    let threads: Vec<serde_json::Value> = threads
        .iter()
        .map(|t| json!({ "key": t.key, "process": t.process, "tid": t.tid, "name": t.name }))
        .collect();
    Response::json(
        200,
        json!({ "processes": processes, "threads": threads }).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_numeric_since_is_taken() {
        assert_eq!(since(""), Ok(None));
        assert_eq!(since("since=7"), Ok(Some(7)));
        for bad in [
            "since=",
            "since=-1",
            "since=0x7",
            "since",
            "x=1",
            "since=1&x=2",
        ] {
            assert!(since(bad).is_err(), "{bad}");
        }
    }
}
