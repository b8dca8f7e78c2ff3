//! `hvprof top`: a running hvprof watched through its control API (docs/api.openapi.yaml).
//!
//! Each [`Watch::refresh`] reads what the watched host profile counted since the last read
//! (`GET /v1/profiles/host/{id}?since=TOKEN`: only the buckets and threads that grew), the
//! run's state and counters, and the guest's process and thread names when a thread it has
//! not named appears. Buckets are symbolized once each with the run's kernel (the built-in
//! reference guest's own ELF, or the file the run booted: the socket is its owner's alone)
//! or the `--symbols` files given. Samples are tallied per thread and bucket, in all and in a
//! recent window whose weights halve every `half_life_s` ([`tally`]); [`Watch::rows`] makes
//! each view's rows from them and [`frame`] prints a screen. The watch costs the vCPUs
//! nothing: it polls at its own rate, and each read is the API thread's work.

pub mod frame;
mod tally;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use report::load::SymbolSpec;
use report::symbols::Symbols;
use serde_json::Value;

use crate::api::client::{ApiClient, ClientError};
use tally::{Tally, ThreadKey};

/// Why a watch could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// The API refused or did not answer.
    #[error(transparent)]
    Api(#[from] ClientError),
    /// An answer lacks a field every answer of this hvprof has.
    #[error("{0}: the answer has no {1}: is this hvprof's API?")]
    Answer(&'static str, &'static str),
    /// A `--symbols` file could not be read.
    #[error(transparent)]
    Symbols(#[from] report::ReportError),
    /// The run has no host profile with that id.
    #[error("the run has no host profile {0}")]
    NoProfile(u32),
}

/// What a watch shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Functions (symbolized, with their module).
    Functions,
    /// Guest processes.
    Processes,
    /// Guest threads.
    Threads,
    /// Modules (the kernel, DLLs, mapped files).
    Modules,
    /// vCPUs: their samples.
    Vcpus,
}

impl View {
    /// Every view, in the order keys and help list them.
    pub const ALL: [View; 5] = [
        View::Functions,
        View::Processes,
        View::Threads,
        View::Modules,
        View::Vcpus,
    ];

    /// Its name on screen and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            View::Functions => "functions",
            View::Processes => "processes",
            View::Threads => "threads",
            View::Modules => "modules",
            View::Vcpus => "vcpus",
        }
    }
}

/// How rows are sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// By the recent window's share.
    Recent,
    /// By all samples so far.
    Total,
}

/// One line of a view.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What it counts: a function, a process, a thread, a module, a vCPU.
    pub name: String,
    /// Where it is: the function's module, the process's pid, the thread's process.
    pub detail: String,
    /// Its recent weight (decayed samples).
    pub recent: f64,
    /// Its samples so far.
    pub total: u64,
}

/// What `hvprof top` asks of a watch.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The API socket of the run.
    pub socket: PathBuf,
    /// The host profile to watch: this id, else the first running one, else a new one.
    pub profile: Option<u32>,
    /// Symbol files beyond the run's kernel.
    pub symbols: Vec<SymbolSpec>,
    /// The recent window's half life, seconds.
    pub half_life_s: f64,
}

/// The run as the last refresh found it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunState {
    /// `running`, `pausing` or `paused`.
    pub state: String,
    /// The run's kernel as profile.json names it.
    pub kernel: String,
    /// Seconds since the API started.
    pub uptime_s: f64,
    /// ProfileTime's interval in 100 ns units.
    pub interval_100ns: u64,
    /// How samples are taken: `kernel` or `kick`.
    pub sampler: String,
    /// Samples per vCPU so far.
    pub vcpu_samples: Vec<u64>,
    /// Timer ticks lost to coalescing, all vCPUs.
    pub lost: u64,
    /// The watched profile's samples.
    pub profile_samples: u64,
    /// The watched profile is still sampling.
    pub profile_running: bool,
}

/// A symbolized bucket.
#[derive(Debug, Clone)]
struct Place {
    function: String,
    module: String,
}

/// A running hvprof, watched.
pub struct Watch {
    client: ApiClient,
    profile: u32,
    token: Option<u64>,
    half_life_s: f64,
    symbols: Symbols,
    start: u64,
    bucket_shift: u32,
    places: HashMap<u64, Place>,
    processes: HashMap<u32, (Option<u64>, String)>,
    threads: HashMap<u32, (u32, Option<u64>, Option<String>)>,
    tally: Tally,
    vcpus: Vec<(u64, f64)>,
    last: Option<Instant>,
    state: RunState,
}

/// Each request's bound: the API answers at once or not at all.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

impl Watch {
    /// Attaches to the run serving `options.socket`: reads its state, picks (or starts) the
    /// host profile to watch, and reads the symbols.
    pub fn attach(options: &WatchOptions) -> Result<Self, TopError> {
        let client = ApiClient::new(&options.socket, REQUEST_TIMEOUT);
        let vm = client.get("/v1/vm")?;
        let kernel = vm["kernel"].as_str().unwrap_or_default().to_string();
        let listed = client.get("/v1/profiles/host")?;
        let listed = listed.as_array().cloned().unwrap_or_default();
        let id = |p: &Value| p["id"].as_u64().and_then(|i| u32::try_from(i).ok());
        let profile = match options.profile {
            Some(want) if listed.iter().any(|p| id(p) == Some(want)) => want,
            Some(want) => return Err(TopError::NoProfile(want)),
            None => match listed.iter().find(|p| p["running"] == true).and_then(id) {
                Some(running) => running,
                None => {
                    let started = client.post("/v1/profiles/host", &serde_json::json!({}))?;
                    id(&started).ok_or(TopError::Answer("POST /v1/profiles/host", "id"))?
                }
            },
        };
        let mut symbols = kernel_symbols(&kernel);
        for spec in &options.symbols {
            symbols.push(report::load::module(spec, None, None)?);
        }
        let mut watch = Watch {
            client,
            profile,
            token: None,
            half_life_s: options.half_life_s,
            symbols,
            start: 0,
            bucket_shift: 0,
            places: HashMap::new(),
            processes: HashMap::new(),
            threads: HashMap::new(),
            tally: Tally::default(),
            vcpus: Vec::new(),
            last: None,
            state: RunState {
                kernel,
                ..RunState::default()
            },
        };
        watch.refresh()?;
        Ok(watch)
    }

    /// Reads what the run counted since the last refresh.
    pub fn refresh(&mut self) -> Result<(), TopError> {
        let now = Instant::now();
        let elapsed = self
            .last
            .map_or(0.0, |l| now.duration_since(l).as_secs_f64());
        self.last = Some(now);
        self.tally.age(elapsed, self.half_life_s);
        let vm = self.client.get("/v1/vm")?;
        self.state.state = vm["state"].as_str().unwrap_or("?").to_string();
        self.state.uptime_s = vm["api_uptime_ms"].as_u64().unwrap_or(0) as f64 / 1000.0;
        self.state.interval_100ns = vm["interval_100ns"].as_u64().unwrap_or(0);
        self.state.sampler = vm["sampler"].as_str().unwrap_or("?").to_string();
        self.read_stats(elapsed)?;
        let target = match self.token {
            Some(t) => format!("/v1/profiles/host/{}?since={t}", self.profile),
            None => format!("/v1/profiles/host/{}?since=0", self.profile),
        };
        let got = self.client.get(&target)?;
        let what = "GET /v1/profiles/host/{id}";
        self.token = Some(
            got["token"]
                .as_u64()
                .ok_or(TopError::Answer(what, "token"))?,
        );
        self.start = hex(&got["start"]).unwrap_or(0);
        self.bucket_shift = got["bucket_shift"].as_u64().unwrap_or(0).min(63) as u32;
        self.state.profile_samples = got["samples"].as_u64().unwrap_or(0);
        self.state.profile_running = got["running"] == true;
        if got["since"].as_u64() == Some(0) {
            self.tally.clear();
        }
        let mut named: HashMap<u64, u64> = HashMap::new();
        let mut unknown = false;
        for t in got["threads"].as_array().into_iter().flatten() {
            let Some(row) = t[0].as_u64().and_then(|r| u32::try_from(r).ok()) else {
                continue;
            };
            unknown |= !self.threads.contains_key(&row);
            for (bucket, n) in pairs(&t[1]) {
                self.tally.add(Some(row), bucket, n);
                *named.entry(bucket).or_default() += n;
            }
        }
        for (bucket, n) in pairs(&got["buckets"]) {
            let rest = n.saturating_sub(named.get(&bucket).copied().unwrap_or(0));
            if rest > 0 {
                self.tally.add(None, bucket, rest);
            }
        }
        if unknown {
            self.read_names()?;
        }
        Ok(())
    }

    fn read_stats(&mut self, elapsed: f64) -> Result<(), TopError> {
        let stats = self.client.get("/v1/stats")?;
        let per: Vec<u64> = (stats["vcpus"].as_array().into_iter().flatten())
            .map(|v| v["samples"].as_u64().unwrap_or(0))
            .collect();
        self.state.lost = stats["total"]["lost"].as_u64().unwrap_or(0);
        let factor = tally::decay(elapsed, self.half_life_s);
        self.vcpus.resize(per.len(), (0, 0.0));
        for (v, &now) in self.vcpus.iter_mut().zip(&per) {
            let added = now.saturating_sub(v.0);
            *v = (now, v.1 * factor + added as f64);
        }
        self.state.vcpu_samples = per;
        Ok(())
    }

    fn read_names(&mut self) -> Result<(), TopError> {
        let got = self.client.get("/v1/processes")?;
        let row = |v: &Value| v.as_u64().and_then(|r| u32::try_from(r).ok());
        for p in got["processes"].as_array().into_iter().flatten() {
            if let Some(key) = row(&p["key"]) {
                let name = p["name"].as_str().unwrap_or("?").to_string();
                self.processes.insert(key, (p["pid"].as_u64(), name));
            }
        }
        for t in got["threads"].as_array().into_iter().flatten() {
            if let (Some(key), Some(process)) = (row(&t["key"]), row(&t["process"])) {
                let name = t["name"].as_str().map(str::to_string);
                self.threads.insert(key, (process, t["tid"].as_u64(), name));
            }
        }
        Ok(())
    }

    /// The run as the last refresh found it.
    pub fn state(&self) -> &RunState {
        &self.state
    }

    /// The watched host profile's id.
    pub fn profile(&self) -> u32 {
        self.profile
    }

    /// The recent window's half life, seconds.
    pub fn half_life_s(&self) -> f64 {
        self.half_life_s
    }

    /// Pauses the VM (true) or resumes it.
    pub fn set_paused(&self, paused: bool) -> Result<(), TopError> {
        self.client.put(if paused {
            "/v1/vm/pause"
        } else {
            "/v1/vm/resume"
        })?;
        Ok(())
    }

    /// The process row of `thread`, and its name (`[unnamed]` for samples no thread was
    /// named for).
    fn process_of(&self, thread: ThreadKey) -> (Option<u32>, &str) {
        let process = thread.and_then(|t| self.threads.get(&t)).map(|t| t.0);
        let name = process
            .and_then(|p| self.processes.get(&p))
            .map_or("[unnamed]", |p| p.1.as_str());
        (process, name)
    }

    /// The function and module at bucket `bucket`'s first byte.
    fn place(&mut self, bucket: u64) -> Place {
        if let Some(p) = self.places.get(&bucket) {
            return p.clone();
        }
        let addr = self.start.wrapping_add(bucket << self.bucket_shift);
        let place = match self.symbols.resolve(addr) {
            Some(hit) => Place {
                function: hit.function(),
                module: hit.module.name.clone(),
            },
            None => Place {
                function: format!("{addr:#x}"),
                module: "[unknown]".to_string(),
            },
        };
        self.places.insert(bucket, place.clone());
        place
    }

    /// The rows of `view` sorted by `order`, only samples of processes named `process` (ASCII
    /// case ignored) when given; at most `limit`.
    pub fn rows(
        &mut self,
        view: View,
        order: Order,
        process: Option<&str>,
        limit: usize,
    ) -> Vec<Row> {
        let mut rows: HashMap<(String, String), (f64, u64)> = HashMap::new();
        if view == View::Vcpus {
            for (v, &(total, recent)) in self.vcpus.iter().enumerate() {
                rows.insert((format!("vCPU {v}"), String::new()), (recent, total));
            }
        } else {
            let cells: Vec<_> = self.tally.cells().collect();
            for (thread, bucket, cell) in cells {
                let (process_row, process_name) = self.process_of(thread);
                if process.is_some_and(|want| !want.eq_ignore_ascii_case(process_name)) {
                    continue;
                }
                let key = match view {
                    View::Functions => {
                        let p = self.place(bucket);
                        (p.function, p.module)
                    }
                    View::Modules => (self.place(bucket).module, String::new()),
                    View::Processes => {
                        let pid = process_row
                            .and_then(|p| self.processes.get(&p))
                            .and_then(|p| p.0)
                            .map_or(String::new(), |pid| format!("pid {pid}"));
                        (process_name.to_string(), pid)
                    }
                    View::Threads => {
                        let t = thread.and_then(|t| self.threads.get(&t));
                        let name = match t {
                            Some((_, _, Some(name))) => name.clone(),
                            Some((_, Some(tid), None)) => format!("tid {tid}"),
                            _ => "[unnamed]".to_string(),
                        };
                        (name, process_name.to_string())
                    }
                    View::Vcpus => unreachable!("handled above"),
                };
                let r = rows.entry(key).or_default();
                r.0 += cell.recent;
                r.1 += cell.total;
            }
        }
        let mut rows: Vec<Row> = rows
            .into_iter()
            .map(|((name, detail), (recent, total))| Row {
                name,
                detail,
                recent,
                total,
            })
            .collect();
        rows.sort_by(|a, b| {
            let by = match order {
                Order::Recent => b.recent.total_cmp(&a.recent),
                Order::Total => b.total.cmp(&a.total),
            };
            by.then_with(|| b.total.cmp(&a.total))
                .then_with(|| a.name.cmp(&b.name))
        });
        rows.truncate(limit);
        rows
    }

    /// The recent weight and the samples of every row `view` would show (the shares' base).
    pub fn sums(&self, process: Option<&str>) -> (f64, u64) {
        let mut sums = (0.0, 0);
        for (thread, _, cell) in self.tally.cells() {
            if process.is_some_and(|want| !want.eq_ignore_ascii_case(self.process_of(thread).1)) {
                continue;
            }
            sums.0 += cell.recent;
            sums.1 += cell.total;
        }
        sums
    }

    /// The vCPUs' recent weight and samples.
    pub fn vcpu_sums(&self) -> (f64, u64) {
        self.vcpus
            .iter()
            .fold((0.0, 0), |s, &(total, recent)| (s.0 + recent, s.1 + total))
    }
}

/// The symbols of the run's kernel: the built-in reference guest's own, or the file the run
/// booted; none (addresses shown bare) when it cannot be read as an image.
fn kernel_symbols(kernel: &str) -> Symbols {
    let builtin = crate::refguest::kernel_spec("");
    if kernel == builtin.kernel.to_string_lossy() {
        if let Some(bytes) = builtin.embedded {
            if let Ok(m) = report::symbols::elf::read("refguest", bytes) {
                return Symbols::from_module(m);
            }
        }
    }
    let spec = SymbolSpec {
        path: Path::new(kernel).to_path_buf(),
        base: None,
    };
    match report::load::module(&spec, None, None) {
        Ok(m) => Symbols::from_module(m),
        Err(e) => {
            log::info!("{kernel}: no symbols ({e}): addresses are shown bare");
            Symbols::default()
        }
    }
}

/// A `"0x..."` string's value.
fn hex(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

/// `[["0x..", n], ...]` as (index, n) pairs; malformed entries are skipped.
fn pairs(v: &Value) -> impl Iterator<Item = (u64, u64)> + '_ {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((hex(&p[0])?, p[1].as_u64()?)))
}
