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

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use introspect::os::{Identity, ProcessKey, ThreadKey};
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
}

/// What a row lookup did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The rows.
    pub at: ThreadRef,
    /// True when the process row was created by this lookup.
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
                let row = &mut t.processes[p as usize];
                if row.name != id.process.name {
                    row.name.clone_from(&id.process.name);
                }
                if id.process.path.is_some() {
                    row.path.clone_from(&id.process.path);
                }
                (p, false)
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

    /// Notes that a vCPU found `at` running at `now_s` (called when a vCPU leaves a thread).
    pub fn seen(&self, at: ThreadRef, now_s: f64) {
        seen(&mut self.lock(), at, now_s);
    }

    /// Sets the full path of process row `p` (from its loader list).
    pub fn set_path(&self, p: u32, path: String) {
        if let Some(row) = self.lock().processes.get_mut(p as usize) {
            row.path = Some(path);
        }
    }

    /// A copy of every row.
    pub fn rows(&self) -> (Vec<ProcessInfo>, Vec<ThreadInfo>) {
        let t = self.lock();
        (t.processes.clone(), t.threads.clone())
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
