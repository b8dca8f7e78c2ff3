//! The in-memory profile: what one run measured, built from a [`RunInput`](crate::input::RunInput)
//! or read from profile.json. Every output format (profile.json, profile.pb.gz, flamegraph.svg, report.txt) and the later
//! compare and merge consume this type. Its serde form is profile.json (docs/profile-json.md).

use serde::{Deserialize, Serialize};

use super::hex::{Hex, OptHex};
use super::symbols::{ImageKind, Module, Symbols};

/// The value of `format` in every profile.json.
pub const FORMAT_NAME: &str = "hvprof-profile";

/// The schema version this build writes. A new version is made for every change that old
/// readers would misread (docs/profile-json.md). Version 2 writes bucket indices as `"0x..."`
/// strings; version 1 wrote them as numbers, which readers of doubles (jq, JavaScript) round
/// past 2^53. Version 3 adds objects' call stacks (`stacks`, `stacks_dropped`); a version-2
/// file reads as one without stacks. Version 4 adds the guest's processes and threads
/// (`processes`, `threads`, objects' per-thread `threads` counts, a stack's `thread`): a
/// stack's identity now includes its thread, so the same call stack may be listed once per
/// thread, which a version-3 reader would misread as repeats; a version-3 file reads as one
/// without processes.
pub const FORMAT_VERSION: u32 = 4;

/// The oldest version this build still reads (and upgrades to [`FORMAT_VERSION`] on reading).
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// One run's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] when written by this build, and once read (an older file is
    /// upgraded as it is read).
    pub format_version: u32,
    /// The hvprof version that wrote it.
    pub hvprof_version: String,
    /// How the run was set up and how it ended.
    pub run: RunInfo,
    /// Per-vCPU profiling counters.
    pub vcpus: Vec<VcpuStats>,
    /// The modules the profile was symbolized with (empty when it was not).
    pub modules: Vec<ModuleInfo>,
    /// The PE images hvprof found in guest memory during the run, with what a symbol server
    /// needs to find their PDBs (empty when it found none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guest_modules: Vec<GuestModule>,
    /// The guest's processes the samples ran in (empty when the run named none: no guest
    /// kernel identified, guest agent objects only, or a file older than version 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessInfo>,
    /// The guest's threads the samples ran in, each in one of `processes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadInfo>,
    /// Every profile object that ran.
    pub objects: Vec<ProfileObject>,
    /// The host profiles' timelines (those started with one): not part of profile.json,
    /// whose meaning is unchanged, but kept beside it in timeline.json
    /// ([`crate::time_axis::file`]), read back with it by [`crate::read_profile`].
    #[serde(skip)]
    pub timelines: Vec<crate::timeline::Timeline>,
}

/// A guest process in a profile's process table (docs/profile-json.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Its key in this profile (unique; what threads refer to).
    pub key: u32,
    /// The guest's process id (null for a process hvprof could not identify).
    #[serde(with = "super::hex::opt_big")]
    pub pid: Option<u64>,
    /// The kernel's name for it (ImageFileName, comm), or `[cr3 0x..]` for samples whose
    /// process could not be identified.
    pub name: String,
    /// The executable's full path, when known.
    pub path: Option<String>,
    /// Its page-table roots (page-aligned).
    pub cr3s: Vec<Hex>,
    /// Seconds from the run's start to its first sample.
    pub first_seen_s: f64,
    /// Seconds from the run's start to its last sample.
    pub last_seen_s: f64,
    /// The kernel's own process (Windows System or Idle, Linux kernel threads).
    pub kernel: bool,
    /// The guest kernel's structures named it; false for a `[cr3 ..]` row.
    pub identified: bool,
    /// Its executable mappings of files, in address order, as its address space had them when
    /// hvprof first read it (Linux; absent elsewhere and in older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mappings: Vec<MappingInfo>,
}

/// An executable mapping of a file in a process's address space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingInfo {
    /// Its first address.
    pub start: Hex,
    /// The address after its last.
    pub end: Hex,
    /// Where in the file it starts, in bytes.
    pub offset: Hex,
    /// The file's path in the guest (within its own file system).
    pub path: String,
    /// The file's GNU build id in lowercase hex, as the guest had it mapped (its first page's
    /// `NT_GNU_BUILD_ID` note); absent when the file has none, that page was not in memory,
    /// or in older files. A file found on the host with another build id is not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

impl ProcessInfo {
    /// `name (pid N)`, or the name alone without a pid (a `[cr3 ..]` row).
    pub fn label(&self) -> String {
        match self.pid {
            Some(pid) => format!("{} (pid {pid})", self.name),
            None => self.name.clone(),
        }
    }
}

/// A guest thread in a profile's thread table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// Its key in this profile (unique; what stacks and per-thread counts refer to).
    pub key: u32,
    /// Its process's key.
    pub process: u32,
    /// The guest's thread id (null when not identified).
    #[serde(with = "super::hex::opt_big")]
    pub tid: Option<u64>,
    /// Its name, when the guest gave it one.
    pub name: Option<String>,
}

/// One thread's share of an object's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadCounts {
    /// The thread's key in the profile's thread table.
    pub thread: u32,
    /// Its samples: the sum of `counts`, written for scripts (`jq`) to read without adding up
    /// buckets. hvprof writes the three totals together ([`crate::processes::add_totals`]);
    /// None in files written before they were added, and in objects made from others
    /// (merge, time windows) until written. Checked against `counts` when present.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::hex::opt_big"
    )]
    pub samples: Option<u64>,
    /// Those of `samples` in user-half buckets.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::hex::opt_big"
    )]
    pub user: Option<u64>,
    /// Those of `samples` in kernel-half buckets (bit 63 of the bucket's start address).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::hex::opt_big"
    )]
    pub kernel: Option<u64>,
    /// Its nonzero buckets, as the object's `counts` (index order, `["0x..", count]`).
    #[serde(with = "super::hex::indexed_counts")]
    pub counts: Vec<(u64, u64)>,
}

/// What was run and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The kernel (file path, or the name of a built-in one).
    pub kernel: String,
    /// Its command line.
    pub cmdline: String,
    /// The boot protocol used.
    pub protocol: String,
    /// Number of vCPUs.
    pub vcpus: u32,
    /// Guest memory in MiB.
    #[serde(with = "super::hex::big")]
    pub memory_mib: u64,
    /// When the run started, RFC 3339 in UTC with milliseconds.
    pub start_time: String,
    /// Wall time of the run in seconds.
    pub wall_time_s: f64,
    /// Why it ended, as hvprof prints it.
    pub outcome: String,
    /// hvprof's exit status for that outcome.
    pub exit_status: i32,
    /// The ProfileTime interval in force at the end, in 100 ns units.
    pub interval_100ns: u32,
    /// What ProfileTime ticked on: "wall" (wall-clock time) or "cpu" (each vCPU thread's CPU
    /// time). Written only when it is "cpu", so files of wall-clock runs stay as they were.
    #[serde(default = "wall_clock", skip_serializing_if = "is_wall_clock")]
    pub clock: String,
    /// How samples were taken: "kernel" (the in-kernel sampler served what needs only RIP and
    /// CPL, kicks the rest) or "kick". Written only when it is "kernel", so files of runs
    /// sampled by kicks, and every older file, read as "kick".
    #[serde(default = "kick_sampler", skip_serializing_if = "is_kick_sampler")]
    pub sampler: String,
}

impl RunInfo {
    /// When the run started, in nanoseconds since the Unix epoch: `start_time` read back
    /// (`YYYY-MM-DDTHH:MM:SS[.fraction]Z`), None when it is not in that form.
    pub fn start_unix_ns(&self) -> Option<i64> {
        let (date, time) = self.start_time.split_once('T')?;
        let time = time.strip_suffix('Z')?;
        let number = |s: &str, max: i64| -> Option<i64> {
            let ok = !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit());
            ok.then(|| s.parse().ok()).flatten().filter(|&v| v <= max)
        };
        let mut d = date.split('-');
        let (year, month, day) = (d.next()?, d.next()?, d.next()?);
        let (year, month, day) = (number(year, 9999)?, number(month, 12)?, number(day, 31)?);
        let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
        let mut t = hms.split(':');
        let (h, m, s) = (t.next()?, t.next()?, t.next()?);
        let (h, m, s) = (number(h, 23)?, number(m, 59)?, number(s, 60)?);
        if d.next().is_some() || t.next().is_some() || month == 0 || day == 0 {
            return None;
        }
        if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let nanos = format!("{fraction:0<9}").parse::<i64>().ok()?;
        let seconds = days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s;
        seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (month 1-12), counting
/// in 400-year eras that start on 1 March, so leap days end a year.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn kick_sampler() -> String {
    "kick".to_string()
}

fn is_kick_sampler(sampler: &str) -> bool {
    sampler == "kick"
}

fn wall_clock() -> String {
    "wall".to_string()
}

fn is_wall_clock(clock: &str) -> bool {
    clock == "wall"
}

/// One vCPU's profiling counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VcpuStats {
    /// vCPU index.
    pub vcpu: u32,
    /// Samples taken.
    #[serde(with = "super::hex::big")]
    pub samples: u64,
    /// Samples that counted into at least one object.
    #[serde(with = "super::hex::big")]
    pub attributed: u64,
    /// Samples outside every started object.
    #[serde(with = "super::hex::big")]
    pub outside: u64,
    /// Timer ticks lost to coalescing.
    #[serde(with = "super::hex::big")]
    pub lost: u64,
    /// Counter increments (one per matching object).
    #[serde(with = "super::hex::big")]
    pub counts: u64,
    /// Profile interrupts injected.
    #[serde(with = "super::hex::big")]
    pub injected: u64,
    /// Hypercalls served.
    #[serde(with = "super::hex::big")]
    pub hypercalls: u64,
}

/// Who created a profile object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectOwner {
    /// A guest agent, by hypercall.
    Guest,
    /// hvprof itself (a host-side profile).
    Host,
}

/// A module the profile was symbolized with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// Short name.
    pub name: String,
    /// Where its symbols came from.
    pub kind: ImageKind,
    /// The file, when read from one.
    pub path: Option<String>,
    /// Load address.
    pub base: Hex,
    /// Bytes spanned.
    pub size: Hex,
    /// Build id or PDB GUID+age.
    pub debug_id: Option<String>,
}

/// A PE image found in guest memory during the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestModule {
    /// The address space: a process key (CR3 without PCID bits) for an image in user space,
    /// null for one in kernel space (the same in every address space).
    pub process: OptHex,
    /// Its name: the export directory's, else its PDB's with `.pdb` dropped, else
    /// `image@<base>`.
    pub name: String,
    /// Where it is mapped.
    pub base: Hex,
    /// SizeOfImage.
    pub size: Hex,
    /// The file header's TimeDateStamp (with the size, the image's key on a symbol server).
    pub timestamp: u32,
    /// The PDB its CodeView record names, if it has one.
    pub pdb: Option<GuestPdb>,
}

/// The PDB a guest image names: what a symbol server looks it up by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestPdb {
    /// The PDB's file name, directories dropped.
    pub name: String,
    /// The GUID as 32 upper-case hex digits in symbol-server order.
    pub guid: String,
    /// The age.
    pub age: u32,
}

/// A function's share of one object's samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCount {
    /// The module, or none outside every module.
    pub module: Option<String>,
    /// The function (or `module+0xrva`, or the bare address, where no symbol covers it).
    pub name: String,
    /// Samples counted in buckets that start inside it.
    #[serde(with = "super::hex::big")]
    pub samples: u64,
}

/// Per-function sample totals keyed by (module, function).
pub type FunctionTotals = std::collections::BTreeMap<(Option<String>, String), u64>;

impl FunctionCount {
    /// `totals` as a list, largest first (ties by module, then name).
    pub fn ranked(totals: FunctionTotals) -> Vec<FunctionCount> {
        let mut v: Vec<FunctionCount> = totals
            .into_iter()
            .map(|((module, name), samples)| FunctionCount {
                module,
                name,
                samples,
            })
            .collect();
        v.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.module.cmp(&b.module))
                .then_with(|| a.name.cmp(&b.name))
        });
        v
    }

    /// `module!function`, or the name alone when it is already a module-relative fallback
    /// (`module+0x20`) or there is no module.
    pub fn qualified(&self) -> String {
        match &self.module {
            Some(m) if !self.name.starts_with(&format!("{m}+0x")) => format!("{m}!{}", self.name),
            _ => self.name.clone(),
        }
    }
}

/// One profile object and its counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileObject {
    /// The object's id (unique for the run).
    #[serde(with = "super::hex::big")]
    pub id: u64,
    /// Who created it.
    pub owner: ObjectOwner,
    /// The process key (CR3 without PCID bits) it is restricted to, or null for all.
    pub process: OptHex,
    /// The guest process names a host profile was restricted to (`--process`; ASCII case
    /// ignored); empty for none. Absent from files before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_names: Vec<String>,
    /// First profiled address.
    pub base: Hex,
    /// Bytes profiled.
    pub size: Hex,
    /// log2 of the bucket size in bytes (NT's `BucketSize`).
    pub bucket_shift: u32,
    /// `KPROFILE_SOURCE` value.
    pub source: u32,
    /// Its name (`ProfileTime`, ...).
    pub source_name: String,
    /// The vCPUs it sampled.
    pub affinity: Vec<u32>,
    /// Number of buckets.
    #[serde(with = "super::hex::big")]
    pub buckets: u64,
    /// Sum of all counts.
    #[serde(with = "super::hex::big")]
    pub total: u64,
    /// The nonzero buckets, as `(index, count)` in index order; in profile.json each is
    /// `["0x...", count]` (the index as a hex string).
    #[serde(with = "super::hex::indexed_counts")]
    pub counts: Vec<(u64, u64)>,
    /// Per-function totals, largest first (empty when not symbolized).
    pub functions: Vec<FunctionCount>,
    /// The samples' call stacks, most samples first (host profiles with a stack depth;
    /// empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<StackCount>,
    /// Samples whose stack did not fit hvprof's table: in `counts`, not in `stacks`.
    #[serde(default, skip_serializing_if = "is_zero", with = "super::hex::big")]
    pub stacks_dropped: u64,
    /// Per process: its samples in this object and their user/kernel split, most first, every
    /// process with samples here once: the totals of `threads` by process, written for scripts
    /// (`jq`) to read directly ([`crate::processes::add_totals`]). Empty in files written
    /// before they were added, and in objects made from others (merge, time windows) until
    /// written. Checked against `threads` when present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessSamples>,
    /// Per thread: its counts, which together are `counts` (host profiles of runs that named
    /// threads; empty otherwise, and for guest agent objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadCounts>,
    /// How a host profile's samples were taken: by the in-kernel sampler or by kicks (absent
    /// for guest agent objects, time windows and files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_by: Option<SampledBy>,
}

/// How an object's samples were taken (`objects[].sampled_by` in profile.json): they add up
/// to its `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledBy {
    /// By the host kernel's perf events, from their rings, without stopping the vCPU.
    pub kernel: u64,
    /// By kicks: the vCPU stopped and its registers read.
    pub kick: u64,
}

/// One process's samples in one object (`objects[].processes` in profile.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSamples {
    /// Its key in the profile's process table.
    pub process: u32,
    /// All its samples.
    #[serde(with = "super::hex::big")]
    pub samples: u64,
    /// Those in user-half buckets.
    #[serde(with = "super::hex::big")]
    pub user: u64,
    /// Those in kernel-half buckets (bit 63 of the bucket's start address).
    #[serde(with = "super::hex::big")]
    pub kernel: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One call stack and the samples that had it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCount {
    /// Program counters, innermost (the sampled PC) first, then each return address.
    pub pcs: Vec<Hex>,
    /// The walk stopped before the outermost frame (depth limit, unreadable or implausible
    /// frame): the stack's base is unknown.
    #[serde(default)]
    pub truncated: bool,
    /// Samples.
    #[serde(with = "super::hex::big")]
    pub count: u64,
    /// The thread (a key of the profile's thread table) the samples ran in; None when the
    /// run named no threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<u32>,
}

impl StackCount {
    /// A stack of `pcs` (innermost first) seen `count` times.
    pub fn new(pcs: impl IntoIterator<Item = u64>, truncated: bool, count: u64) -> Self {
        StackCount {
            pcs: pcs.into_iter().map(Hex).collect(),
            truncated,
            count,
            thread: None,
        }
    }
}

/// One nonzero bucket of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// First guest address of the bucket.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// Samples counted.
    pub count: u64,
}

impl ProfileObject {
    /// One past the last profiled address.
    pub fn end(&self) -> u64 {
        self.base.0.saturating_add(self.size.0)
    }

    /// The address range of bucket `index`.
    pub fn bucket_range(&self, index: u64) -> (u64, u64) {
        let shift = self.bucket_shift.min(63);
        let start = self
            .base
            .0
            .saturating_add(index.checked_shl(shift).unwrap_or(u64::MAX));
        let end = start.saturating_add(1u64 << shift).min(self.end());
        (start, end)
    }

    /// The nonzero buckets in address order.
    pub fn nonzero(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.counts.iter().map(|(i, count)| {
            let (start, end) = self.bucket_range(*i);
            Bucket {
                start,
                end,
                count: *count,
            }
        })
    }

    /// `all processes`, `process 0x...` or `processes named a, b`.
    pub fn scope(&self) -> String {
        match self.process.0 {
            Some(key) => format!("process {key:#x}"),
            None if !self.process_names.is_empty() => format!(
                "processes named {}",
                crate::sanitize::terminal(&self.process_names.join(", "))
            ),
            None => "all processes".to_string(),
        }
    }

    /// Per-function totals from `symbols`, largest first (ties by module and name).
    pub fn function_counts(&self, symbols: &Symbols) -> Vec<FunctionCount> {
        self.function_counts_in(symbols, |_| None)
    }

    /// [`ProfileObject::function_counts`], with the buckets of an object with per-thread
    /// counts named as their thread's process sees them (`process_of` a thread key: its
    /// process's key), so that a process's mapped files name its samples.
    pub fn function_counts_in(
        &self,
        symbols: &Symbols,
        process_of: impl Fn(u32) -> Option<u32>,
    ) -> Vec<FunctionCount> {
        let mut totals = FunctionTotals::new();
        let mut add = |process: Option<u32>, start: u64, count: u64| {
            let key = match symbols.resolve_in(process, start) {
                Some(hit) => (Some(hit.module.name.clone()), hit.function()),
                None => (None, format!("{start:#x}")),
            };
            *totals.entry(key).or_default() += count;
        };
        if self.threads.is_empty() || symbols.mapped().next().is_none() {
            for b in self.nonzero() {
                add(None, b.start, b.count);
            }
        } else {
            // A checked profile's per-thread counts add up to the object's total.
            for t in &self.threads {
                let process = process_of(t.thread);
                for &(index, count) in &t.counts {
                    add(process, self.bucket_range(index).0, count);
                }
            }
        }
        FunctionCount::ranked(totals)
    }
}

impl Profile {
    /// True if this profile was symbolized with `symbols`' modules (same names, ranges and
    /// debug ids), so its stored per-function totals are what `symbols` would give.
    pub fn symbolized_with(&self, symbols: &Symbols) -> bool {
        let theirs: Vec<&Module> = symbols.all_modules().collect();
        !theirs.is_empty()
            && self.modules.len() == theirs.len()
            && self.modules.iter().zip(theirs).all(|(a, m)| {
                a.name == m.name
                    && a.base.0 == m.base
                    && a.size.0 == m.size
                    && a.debug_id == m.debug_id
            })
    }

    /// Records `symbols`' modules and fills every object's per-function totals from them.
    pub fn symbolize(&mut self, symbols: &Symbols) {
        self.modules = symbols
            .all_modules()
            .map(|m| ModuleInfo {
                name: m.name.clone(),
                kind: m.kind,
                path: m.path.as_ref().map(|p| p.display().to_string()),
                base: Hex(m.base),
                size: Hex(m.size),
                debug_id: m.debug_id.clone(),
            })
            .collect();
        let process_of: std::collections::HashMap<u32, u32> =
            self.threads.iter().map(|t| (t.key, t.process)).collect();
        let any = symbols.all_modules().next().is_some();
        for o in &mut self.objects {
            o.functions = if any {
                o.function_counts_in(symbols, |t| process_of.get(&t).copied())
            } else {
                Vec::new()
            };
        }
    }

    /// Samples over all vCPUs (saturating: a file's counters are not trusted to add up).
    pub fn total_stats(&self) -> VcpuStats {
        self.vcpus.iter().fold(
            VcpuStats {
                vcpu: 0,
                samples: 0,
                attributed: 0,
                outside: 0,
                lost: 0,
                counts: 0,
                injected: 0,
                hypercalls: 0,
            },
            |a, s| VcpuStats {
                vcpu: 0,
                samples: a.samples.saturating_add(s.samples),
                attributed: a.attributed.saturating_add(s.attributed),
                outside: a.outside.saturating_add(s.outside),
                lost: a.lost.saturating_add(s.lost),
                counts: a.counts.saturating_add(s.counts),
                injected: a.injected.saturating_add(s.injected),
                hypercalls: a.hypercalls.saturating_add(s.hypercalls),
            },
        )
    }
}

/// The name of a `KPROFILE_SOURCE` value.
pub fn source_name(source: u32) -> &'static str {
    const NAMES: [&str; 24] = [
        "ProfileTime",
        "ProfileAlignmentFixup",
        "ProfileTotalIssues",
        "ProfilePipelineDry",
        "ProfileLoadInstructions",
        "ProfilePipelineFrozen",
        "ProfileBranchInstructions",
        "ProfileTotalNonissues",
        "ProfileDcacheMisses",
        "ProfileIcacheMisses",
        "ProfileCacheMisses",
        "ProfileBranchMispredictions",
        "ProfileStoreInstructions",
        "ProfileFpInstructions",
        "ProfileIntegerInstructions",
        "Profile2Issue",
        "Profile3Issue",
        "Profile4Issue",
        "ProfileSpecialInstructions",
        "ProfileTotalCycles",
        "ProfileIcacheIssues",
        "ProfileDcacheAccesses",
        "ProfileMemoryBarrierCycles",
        "ProfileLoadLinkedIssues",
    ];
    usize::try_from(source)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("processor-specific")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_start_time_reads_back_as_unix_nanoseconds() {
        let at = |t: &str| {
            let mut p = sample_profile(0);
            p.run.start_time = t.to_string();
            p.run.start_unix_ns()
        };
        assert_eq!(at("1970-01-01T00:00:00.000Z"), Some(0));
        // What vmm::clock::rfc3339 writes for 1,700,000,000.123 s, and a leap day.
        assert_eq!(
            at("2023-11-14T22:13:20.123Z"),
            Some(1_700_000_000_123_000_000)
        );
        assert_eq!(at("2000-02-29T00:00:00Z"), Some(951_782_400_000_000_000));
        assert_eq!(
            at("2026-12-31T23:59:59.999999999Z"),
            Some(1_798_761_599_999_999_999)
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-11-14T22:13:20.123",
            "2023-13-14T22:13:20Z",
            "2023-11-14T24:13:20Z",
            "2023-11-14T22:13:20.1234567890Z",
            "2023-11-14T22:13:20.+1Z",
            "+2023-11-14T22:13:20Z",
            "2023-11-14-1T22:13:20Z",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }

    /// Module `m` at 0x1000 whose `caller` (0x1040..0x1050) ends with a call, so that its
    /// return address 0x1050 is the first byte of `next`; `hot` at 0x1070..0x10a0.
    pub(crate) fn call_site_symbols() -> crate::symbols::Symbols {
        crate::symbols::Symbols::from_module(crate::symbols::tests::module(
            "m",
            0x1000,
            &[
                (0x40, 0x10, "caller"),
                (0x50, 0x10, "next"),
                (0x70, 0x30, "hot"),
            ],
        ))
    }

    /// A small profile used by every format's tests: one object over `base..base+0x100` with
    /// 16-byte buckets and counts 5, 9, 1 in buckets 2, 7, 9.
    pub(crate) fn sample_profile(base: u64) -> Profile {
        let object = ProfileObject {
            id: 1,
            owner: ObjectOwner::Guest,
            process: OptHex(Some(0x1234_5000)),
            process_names: Vec::new(),
            base: Hex(base),
            size: Hex(0x100),
            bucket_shift: 4,
            source: 0,
            source_name: source_name(0).into(),
            affinity: vec![0, 1],
            buckets: 16,
            total: 15,
            counts: vec![(2, 5), (7, 9), (9, 1)],
            functions: Vec::new(),
            stacks: Vec::new(),
            stacks_dropped: 0,
            processes: Vec::new(),
            threads: Vec::new(),
            sampled_by: None,
        };
        Profile {
            format: FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            hvprof_version: "0.1.0".into(),
            run: RunInfo {
                kernel: "refguest (built in)".into(),
                cmdline: "scenario=shares".into(),
                protocol: "PVH".into(),
                vcpus: 2,
                memory_mib: 256,
                start_time: "2023-11-14T22:13:20.123Z".into(),
                wall_time_s: 1.5,
                outcome: "guest wrote 0x10 to isa-debug-exit".into(),
                exit_status: 0,
                interval_100ns: 39_063,
                clock: "wall".into(),
                sampler: "kick".into(),
            },
            vcpus: vec![VcpuStats {
                vcpu: 0,
                samples: 20,
                attributed: 15,
                outside: 5,
                lost: 1,
                counts: 15,
                injected: 0,
                hypercalls: 7,
            }],
            modules: Vec::new(),
            guest_modules: Vec::new(),
            processes: Vec::new(),
            threads: Vec::new(),
            objects: vec![object],
            timelines: Vec::new(),
        }
    }

    #[test]
    fn buckets_are_sparse_and_clipped_to_the_range() {
        let mut p = sample_profile(0x1000);
        let o = &mut p.objects[0];
        o.size = Hex(0x95);
        let b: Vec<Bucket> = o.nonzero().collect();
        assert_eq!(
            b[0],
            Bucket {
                start: 0x1020,
                end: 0x1030,
                count: 5
            }
        );
        assert_eq!(
            b[2],
            Bucket {
                start: 0x1090,
                end: 0x1095,
                count: 1
            }
        );
    }

    #[test]
    fn function_counts_by_module_and_symbol() {
        let mut p = sample_profile(0x1000);
        let symbols = Symbols::from_module(crate::symbols::tests::module(
            "m",
            0x1000,
            &[(0x20, 0x10, "f"), (0x70, 0x30, "g")],
        ));
        p.symbolize(&symbols);
        let f = &p.objects[0].functions;
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].name.as_str(), f[0].samples), ("g", 10));
        assert_eq!((f[1].name.as_str(), f[1].samples), ("f", 5));
        assert_eq!(f[0].module.as_deref(), Some("m"));
        assert_eq!(p.modules[0].name, "m");
    }

    #[test]
    fn symbolized_with_knows_the_symbols_it_was_symbolized_with() {
        let mut p = sample_profile(0x1000);
        let m = |name: &str, base| {
            Symbols::from_module(crate::symbols::tests::module(
                name,
                base,
                &[(0x20, 0x10, "f")],
            ))
        };
        assert!(!p.symbolized_with(&m("m", 0x1000)));
        p.symbolize(&m("m", 0x1000));
        assert!(p.symbolized_with(&m("m", 0x1000)));
        assert!(!p.symbolized_with(&m("other", 0x1000)));
        assert!(!p.symbolized_with(&m("m", 0x2000)));
        assert!(!p.symbolized_with(&Symbols::default()));
    }
}
