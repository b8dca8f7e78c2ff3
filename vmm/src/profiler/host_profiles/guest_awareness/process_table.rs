//! The guest's processes and threads the run's samples ran in: one table for the whole run,
//! shared by the vCPUs, touched only when a vCPU's thread changes (never on the sample path's
//! common case, the same thread as the vCPU's last sample).
//!
//! A row is keyed by what identifies its process or thread for as long as it lives
//! ([`ProcessKey`], [`ThreadKey`]: the kernel object's address with its id and create time), so
//! a process that reuses an exited one's page tables or kernel object gets a row of its own.
//! Samples whose thread could not be named get a row per address space instead, named
//! `[cr3 0x..]`, as profiles without guest awareness always were.
//!
//! The rows are the report's own types ([`ProcessInfo`], [`ThreadInfo`]: what profile.json
//! lists), keyed by their row index, so the run hands them over as they are.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use introspect::os::{Identity, ProcessFacts, ProcessKey, ThreadKey};
use report::hex::Hex;
use report::profile::{ProcessInfo, ThreadInfo};

/// Process rows kept; beyond this, new processes share the `[other]` row.
pub const MAX_PROCESSES: usize = 65_536;
/// Thread rows kept; beyond this, new threads share the table's `[other]` row.
pub const MAX_THREADS: usize = 262_144;

/// A sample's thread and process, as row indexes of the [`ProcessTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadRef {
    /// The thread's row.
    pub thread: u32,
    /// Its process's row.
    pub process: u32,
}

#[derive(Default)]
struct Tables {
    processes: Vec<ProcessInfo>,
    threads: Vec<ThreadInfo>,
    by_process: HashMap<ProcessKey, u32>,
    by_thread: HashMap<ThreadKey, u32>,
    /// `[cr3 ..]` rows by address space.
    by_cr3: HashMap<u64, ThreadRef>,
    other: Option<ThreadRef>,
    /// `[cr3 ..]` process rows folded into the process a list walk found owning their
    /// address space: left out of [`ProcessTable::rows`], their thread rows moved.
    folded: HashSet<u32>,
    /// Process rows a list walk added that no sample has found yet: the first sample that
    /// does finds it as new ([`Found::new_process`]: its loader list is read then).
    unsampled: HashSet<u32>,
}

/// What [`ProcessTable::listed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Listed {
    /// Process rows added (processes no sample had found yet: 0 samples so far).
    pub added: usize,
    /// `[cr3 ..]` rows folded into the process that owned their address space.
    pub folded: usize,
}

/// What a row lookup did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The rows.
    pub at: ThreadRef,
    /// True when the process row was created by this lookup, or this is the first sample
    /// in a process a list walk added.
    pub new_process: bool,
}

/// The run's process and thread rows.
pub struct ProcessTable {
    start: Instant,
    tables: Mutex<Tables>,
}

impl ProcessTable {
    /// An empty table whose times count from `start`.
    pub fn new(start: Instant) -> Self {
        ProcessTable {
            start,
            tables: Mutex::new(Tables::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Seconds since the table's start.
    pub fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The rows of the thread `id` names, created if new (a known row's names are updated:
    /// a Linux thread may rename itself, a Windows one be given a name), seen at `now_s`.
    pub fn identified(&self, id: &Identity, now_s: f64) -> Found {
        let mut t = self.lock();
        let t = &mut *t;
        let (process, new_process) = match t.by_process.get(&id.process.key) {
            Some(&p) => {
                let first_sample = t.unsampled.remove(&p);
                let row = &mut t.processes[p as usize];
                if row.name != id.process.name {
                    row.name.clone_from(&id.process.name);
                }
                if id.process.path.is_some() {
                    row.path.clone_from(&id.process.path);
                }
                (p, first_sample)
            }
            None if t.processes.len() < MAX_PROCESSES => {
                let p = row(t.processes.len());
                t.processes.push(ProcessInfo {
                    key: p,
                    pid: Some(id.process.key.id),
                    name: id.process.name.clone(),
                    path: id.process.path.clone(),
                    cr3s: id.process.cr3s.iter().copied().map(Hex).collect(),
                    first_seen_s: now_s,
                    last_seen_s: now_s,
                    kernel: id.process.kernel,
                    identified: true,
                    mappings: Vec::new(),
                });
                t.by_process.insert(id.process.key, p);
                (p, true)
            }
            None => {
                return Found {
                    at: other(t, now_s),
                    new_process: false,
                }
            }
        };
        let thread = match t.by_thread.get(&id.thread.key) {
            Some(&th) if t.threads[th as usize].process == process => {
                let row = &mut t.threads[th as usize];
                if id.thread.name.is_some() && row.name != id.thread.name {
                    row.name.clone_from(&id.thread.name);
                }
                th
            }
            _ if t.threads.len() < MAX_THREADS => {
                let th = row(t.threads.len());
                t.threads.push(ThreadInfo {
                    key: th,
                    process,
                    tid: Some(id.thread.key.id),
                    name: id.thread.name.clone(),
                });
                t.by_thread.insert(id.thread.key, th);
                th
            }
            _ => {
                return Found {
                    at: other(t, now_s),
                    new_process,
                }
            }
        };
        let at = ThreadRef { thread, process };
        seen(t, at, now_s);
        Found { at, new_process }
    }

    /// The `[cr3 ..]` rows of samples in address space `cr3` whose thread was not named.
    pub fn unidentified(&self, cr3: u64, now_s: f64) -> ThreadRef {
        let space = cr3 & !0xfff;
        let mut t = self.lock();
        let t = &mut *t;
        if let Some(&at) = t.by_cr3.get(&space) {
            seen(t, at, now_s);
            return at;
        }
        if t.processes.len() >= MAX_PROCESSES || t.threads.len() >= MAX_THREADS {
            return other(t, now_s);
        }
        let at = unnamed(t, format!("[cr3 {space:#x}]"), vec![space], now_s);
        t.by_cr3.insert(space, at);
        at
    }

    /// Takes in the processes a walk of the guest kernel's process list found at `now_s`:
    /// each that is not a row yet becomes one, without threads (0 samples; its times are the
    /// walk's), and each `[cr3 ..]` row of an address space that exactly one of them owns is
    /// folded into it: its thread row (the samples hvprof could not name, taken before the
    /// layout was known) moves to that process, whose times take in the row's, and a later
    /// unnamed sample in that space (on a vCPU that has left it since) starts a new
    /// `[cr3 ..]` row.
    pub fn listed(&self, facts: &[ProcessFacts], now_s: f64) -> Listed {
        let mut t = self.lock();
        let t = &mut *t;
        let mut done = Listed::default();
        // Address space -> the listed process owning it; None when two claim it.
        let mut owner: HashMap<u64, Option<u32>> = HashMap::new();
        for f in facts {
            let p = match t.by_process.get(&f.key) {
                Some(&p) => {
                    // A kernel thread starts under its creator's name (Linux: kthreadd's)
                    // and is renamed after: a row a sample named in that window takes the
                    // name the kernel's list gives it now.
                    match t.processes.get_mut(p as usize) {
                        Some(r) if f.kernel && r.kernel && r.name != f.name => {
                            r.name.clone_from(&f.name);
                        }
                        _ => {}
                    }
                    p
                }
                None if t.processes.len() < MAX_PROCESSES => {
                    let p = row(t.processes.len());
                    t.processes.push(ProcessInfo {
                        key: p,
                        pid: Some(f.key.id),
                        name: f.name.clone(),
                        path: f.path.clone(),
                        cr3s: f.cr3s.iter().copied().map(Hex).collect(),
                        first_seen_s: now_s,
                        last_seen_s: now_s,
                        kernel: f.kernel,
                        identified: true,
                        mappings: Vec::new(),
                    });
                    t.by_process.insert(f.key, p);
                    t.unsampled.insert(p);
                    done.added += 1;
                    p
                }
                None => continue,
            };
            for &space in &f.cr3s {
                owner
                    .entry(space)
                    .and_modify(|o| {
                        if *o != Some(p) {
                            *o = None;
                        }
                    })
                    .or_insert(Some(p));
            }
        }
        let spaces: Vec<u64> = t.by_cr3.keys().copied().collect();
        for space in spaces {
            let Some(&Some(p)) = owner.get(&space) else {
                continue;
            };
            let Some(at) = t.by_cr3.remove(&space) else {
                continue;
            };
            if let Some(th) = t.threads.get_mut(at.thread as usize) {
                th.process = p;
            }
            let (first, last) = match t.processes.get(at.process as usize) {
                Some(r) => (r.first_seen_s, r.last_seen_s),
                None => continue,
            };
            if let Some(r) = t.processes.get_mut(p as usize) {
                r.first_seen_s = r.first_seen_s.min(first);
                r.last_seen_s = r.last_seen_s.max(last);
            }
            t.folded.insert(at.process);
            done.folded += 1;
        }
        done
    }

    /// Notes that a vCPU found `at` running at `now_s` (called when a vCPU leaves a thread).
    pub fn seen(&self, at: ThreadRef, now_s: f64) {
        seen(&mut self.lock(), at, now_s);
    }

    /// Sets the executable file mappings of process row `p`.
    /// A build id read before is kept for a file whose first page a later read found missing.
    pub fn set_mappings(&self, p: u32, mut mappings: Vec<report::profile::MappingInfo>) {
        if let Some(row) = self.lock().processes.get_mut(p as usize) {
            for m in mappings.iter_mut().filter(|m| m.build_id.is_none()) {
                let before = row.mappings.iter().find(|o| o.path == m.path);
                m.build_id = before.and_then(|o| o.build_id.clone());
            }
            row.mappings = mappings;
        }
    }

    /// Sets the full path of process row `p` (from its loader list).
    pub fn set_path(&self, p: u32, path: String) {
        if let Some(row) = self.lock().processes.get_mut(p as usize) {
            row.path = Some(path);
        }
    }

    /// A copy of every row (but the `[cr3 ..]` rows folded into a listed process).
    pub fn rows(&self) -> (Vec<ProcessInfo>, Vec<ThreadInfo>) {
        let t = self.lock();
        let processes = t
            .processes
            .iter()
            .filter(|r| !t.folded.contains(&r.key))
            .cloned()
            .collect();
        (processes, t.threads.clone())
    }

    /// Process row `p`, copied.
    pub fn process(&self, p: u32) -> Option<ProcessInfo> {
        self.lock().processes.get(p as usize).cloned()
    }
}

/// The index of the next row of a table of `len` rows (the caps keep it far below u32::MAX).
fn row(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn seen(t: &mut Tables, at: ThreadRef, now_s: f64) {
    if let Some(row) = t.processes.get_mut(at.process as usize) {
        row.first_seen_s = row.first_seen_s.min(now_s);
        row.last_seen_s = row.last_seen_s.max(now_s);
    }
}

/// The row shared by everything past the table's bounds (created once, past them).
fn other(t: &mut Tables, now_s: f64) -> ThreadRef {
    if let Some(at) = t.other {
        seen(t, at, now_s);
        return at;
    }
    let at = unnamed(t, "[other]".into(), Vec::new(), now_s);
    t.other = Some(at);
    at
}

/// Adds a process row the guest kernel did not name (`name`, page tables `cr3s`) with one
/// thread row, seen at `now_s`.
fn unnamed(t: &mut Tables, name: String, cr3s: Vec<u64>, now_s: f64) -> ThreadRef {
    let at = ThreadRef {
        process: row(t.processes.len()),
        thread: row(t.threads.len()),
    };
    t.processes.push(ProcessInfo {
        key: at.process,
        pid: None,
        name,
        path: None,
        cr3s: cr3s.into_iter().map(Hex).collect(),
        first_seen_s: now_s,
        last_seen_s: now_s,
        kernel: false,
        identified: false,
        mappings: Vec::new(),
    });
    t.threads.push(ThreadInfo {
        key: at.thread,
        process: at.process,
        tid: None,
        name: None,
    });
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use introspect::os::{ProcessFacts, ThreadFacts};

    fn id(object: u64, pid: u64, created: u64, tid: u64, name: &str) -> Identity {
        Identity {
            process: ProcessFacts {
                key: ProcessKey {
                    object,
                    id: pid,
                    created,
                    space: 0,
                },
                name: name.into(),
                cr3s: vec![0x1000],
                ..Default::default()
            },
            thread: ThreadFacts {
                key: ThreadKey {
                    object: object + 0x800,
                    id: tid,
                    created,
                },
                name: None,
            },
        }
    }

    /// A reread that found a file's first page gone (a process tearing its mappings down)
    /// keeps the build id an earlier read found; a file new in the list has none to keep.
    #[test]
    fn a_build_id_once_read_is_kept_by_a_reread_that_could_not_read_it() {
        let t = ProcessTable::new(Instant::now());
        let row = t
            .identified(&id(0xffff_8000_0000_1000, 8, 1, 12, "burn"), 1.0)
            .at
            .process;
        let mapping = |path: &str, build_id: Option<&str>| report::profile::MappingInfo {
            start: report::hex::Hex(0x40_1000),
            end: report::hex::Hex(0x47_9000),
            offset: report::hex::Hex(0x1000),
            path: path.into(),
            build_id: build_id.map(String::from),
        };
        t.set_mappings(row, vec![mapping("/bin/burn", Some("d5ed"))]);
        t.set_mappings(
            row,
            vec![mapping("/bin/burn", None), mapping("/lib/libc.so.6", None)],
        );
        let (p, _) = t.rows();
        let ids: Vec<_> = p[0]
            .mappings
            .iter()
            .map(|m| m.build_id.as_deref())
            .collect();
        assert_eq!(ids, [Some("d5ed"), None]);
    }

    #[test]
    fn a_reused_object_with_a_new_id_is_a_new_process() {
        let t = ProcessTable::new(Instant::now());
        let a = t.identified(&id(0xffff_8000_0000_1000, 8, 1, 12, "c.exe"), 1.0);
        assert!(a.new_process);
        let again = t.identified(&id(0xffff_8000_0000_1000, 8, 1, 12, "c.exe"), 2.0);
        assert_eq!((again.at, again.new_process), (a.at, false));
        let d = t.identified(&id(0xffff_8000_0000_1000, 16, 5, 20, "d.exe"), 3.0);
        assert!(d.new_process);
        assert_ne!(d.at.process, a.at.process);
        let (p, th) = t.rows();
        assert_eq!((p.len(), th.len()), (2, 2));
        assert_eq!((p[0].first_seen_s, p[0].last_seen_s), (1.0, 2.0));
        assert_eq!((p[1].pid, p[1].name.as_str()), (Some(16), "d.exe"));
    }

    #[test]
    fn listed_processes_are_rows_without_samples_and_take_in_their_address_spaces_rows() {
        let t = ProcessTable::new(Instant::now());
        // Samples before the layout: two address spaces, and one a walk will not find.
        let early = t.unidentified(0x1000, 0.1);
        let system = t.unidentified(0x9000, 0.2);
        let stray = t.unidentified(0x7000, 0.3);
        // A process already named by a sample, in another space.
        let mut named = id(0xffff_8000_0000_2000, 12, 1, 16, "b.exe");
        named.process.cr3s = vec![0x2000];
        let b = t.identified(&named, 0.4);
        let mut a = id(0xffff_8000_0000_1000, 8, 1, 12, "a.exe").process;
        let mut sys = id(0xffff_8000_0000_3000, 4, 1, 0, "System").process;
        sys.cr3s = vec![0x9000];
        sys.kernel = true;
        let mut idle = id(0xffff_8000_0000_4000, 100, 1, 0, "idle.exe").process;
        idle.cr3s = vec![0x8000];
        let listed = t.listed(&[a.clone(), named.process.clone(), sys, idle], 1.0);
        assert_eq!(
            listed,
            Listed {
                added: 3,
                folded: 2
            }
        );
        let (p, th) = t.rows();
        let names: Vec<&str> = p.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["[cr3 0x7000]", "b.exe", "a.exe", "System", "idle.exe"],
            "the folded rows are left out, the stray one kept"
        );
        let row = |name: &str| p.iter().find(|r| r.name == name).unwrap();
        // a.exe owns 0x1000: the early samples' thread is now a.exe's, and its times start then.
        assert_eq!(th[early.thread as usize].process, row("a.exe").key);
        assert_eq!(
            (row("a.exe").first_seen_s, row("a.exe").last_seen_s),
            (0.1, 1.0)
        );
        assert_eq!(th[system.thread as usize].process, row("System").key);
        assert_eq!(th[stray.thread as usize].process, stray.process);
        assert_eq!(th[b.at.thread as usize].process, b.at.process);
        // idle.exe had no sample: a row without threads, seen only by the walk.
        assert!(th.iter().all(|t| t.process != row("idle.exe").key));
        assert_eq!(row("idle.exe").first_seen_s, 1.0);
        // The first sample in a listed process finds it as new, once.
        let mut in_idle = id(0xffff_8000_0000_4000, 100, 1, 104, "idle.exe");
        in_idle.process.cr3s = vec![0x8000];
        let found = t.identified(&in_idle, 1.5);
        assert_eq!(
            (found.at.process, found.new_process),
            (row("idle.exe").key, true)
        );
        assert!(!t.identified(&in_idle, 1.6).new_process);
        // Another walk adds nothing; an unnamed sample in 0x1000 now starts a row of its own.
        a.name = "a.exe".into();
        assert_eq!(t.listed(&[a], 2.0), Listed::default());
        assert_ne!(t.unidentified(0x1000, 2.1), early);
    }

    #[test]
    fn a_kernel_thread_sampled_before_its_rename_takes_its_listed_name() {
        let t = ProcessTable::new(Instant::now());
        let mut early = id(0xffff_8000_0000_5000, 16, 1, 16, "[kthreadd]");
        early.process.kernel = true;
        early.process.cr3s = Vec::new();
        let found = t.identified(&early, 0.5);
        let mut now = early.process.clone();
        now.name = "[oom_reaper]".into();
        assert_eq!(t.listed(&[now], 1.0), Listed::default());
        let (p, _) = t.rows();
        assert_eq!(p[found.at.process as usize].name, "[oom_reaper]");
        // A user process keeps the name its samples gave it (an exec is a new row).
        let user = id(0xffff_8000_0000_6000, 20, 1, 20, "sh");
        let u = t.identified(&user, 1.1);
        let mut renamed = user.process.clone();
        renamed.name = "other".into();
        t.listed(&[renamed], 1.2);
        assert_eq!(t.rows().0[u.at.process as usize].name, "sh");
    }

    #[test]
    fn a_space_two_listed_processes_claim_is_not_folded() {
        let t = ProcessTable::new(Instant::now());
        let early = t.unidentified(0x1000, 0.1);
        let a = id(0xffff_8000_0000_1000, 8, 1, 12, "a.exe").process;
        let b = id(0xffff_8000_0000_2000, 12, 1, 16, "b.exe").process;
        assert_eq!(t.listed(&[a, b], 1.0).folded, 0);
        assert_eq!(t.rows().1[early.thread as usize].process, early.process);
    }

    #[test]
    fn unnamed_samples_get_one_row_per_address_space() {
        let t = ProcessTable::new(Instant::now());
        let a = t.unidentified(0x5003, 0.5);
        assert_eq!(
            t.unidentified(0x5000, 0.7),
            a,
            "PCID bits are not the space"
        );
        assert_ne!(t.unidentified(0x6000, 0.7), a);
        let (p, _) = t.rows();
        assert_eq!(p[0].name, "[cr3 0x5000]");
        assert_eq!((p[0].pid, p[0].identified), (None, false));
    }
}
