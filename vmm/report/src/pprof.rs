//! profile.pb.gz: the profile in pprof's protobuf format (profile.proto of
//! github.com/google/pprof), gzipped, for `go tool pprof` and everything that reads it.
//!
//! The messages are written by hand with prost's derive macros (no protoc at build time);
//! only the fields hvprof fills are declared, with profile.proto's numbers and types.
//!
//! Mapping: one sample type, `samples/count`; `time_nanos` the run's start (stores such as
//! Pyroscope and Parca file a profile under it); one Sample per nonzero bucket of every object
//! (value = count, labels `object` = its id and `scope` = its address-space restriction,
//! `all processes` or `process 0x..`), at one Location per bucket start address; an object
//! with per-thread counts gives one Sample per thread and bucket; an object with call stacks
//! gives one Sample per stack instead, its Locations leaf first (label `truncated` on stacks
//! that end early), so `-traces`, `-tree` and `-peek` show callers. A Sample whose thread is
//! known carries the guest's process and thread: numeric labels `pid` and `tid` (when the
//! guest gave them) and string labels `process` (its name) and `thread` (when named), so
//! `-tagfocus=process=awk` keeps one process's samples and `-tags` lists them. Each Location has one Line naming the Function that covers it: the
//! symbol, or `module+0xrva` / the bare address where no symbol does, so pprof never needs
//! to symbolize anything itself. One Mapping per module (ELF or PE image, or PDB) spans its
//! load range. Objects that overlap (a global and a per-process profile of the same code)
//! both contribute: filter with `-tagfocus object=N`.

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use prost::Message;

use super::processes::Tasks;
use super::profile::Profile;
use super::symbols::Symbols;
use super::ReportError;

/// profile.proto's `ValueType`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// Index into the string table.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// Index into the string table.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// profile.proto's `Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// Index into the string table.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// Index into the string table (string labels).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value (numeric labels).
    #[prost(int64, tag = "3")]
    pub num: i64,
}

/// profile.proto's `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// profile.proto's `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Unique nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Load address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// One past the end.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// Index into the string table.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Index into the string table.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations in it carry function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

/// profile.proto's `Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The Function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Source line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// profile.proto's `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Unique nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The Mapping's id, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Instruction address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The function(s) at it.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// profile.proto's `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Unique nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Index into the string table.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Index into the string table.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Index into the string table: the source file, 0 when unknown.
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// profile.proto's `Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct PprofProfile {
    /// What each sample value means.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Modules.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Addresses.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// When the run started, in nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Run length in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sample stands for.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling interval in `period_type` units.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form notes (indices into the string table).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
}

/// The string table under construction.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = i64::try_from(self.table.len()).unwrap_or(i64::MAX);
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn id(n: usize) -> u64 {
    n as u64 + 1
}

/// Locations and functions under construction, each made once.
struct Locations<'a> {
    symbols: &'a Symbols,
    functions: HashMap<String, u64>,
    /// (process key, address, is a return address) -> location id.
    ids: HashMap<(Option<u32>, u64, bool), u64>,
}

impl Locations<'_> {
    /// The location of `addr`: a sampled PC, or with `ret` a return address, which is named
    /// by the call before it (the return address itself may already lie past the caller's
    /// last byte, after a call that never returns). In the process with key `process`, when
    /// known: its mapped files name its addresses.
    fn get(
        &mut self,
        out: &mut PprofProfile,
        strings: &mut Strings,
        process: Option<u32>,
        addr: u64,
        ret: bool,
    ) -> u64 {
        if let Some(l) = self.ids.get(&(process, addr, ret)) {
            return *l;
        }
        let lookup = if ret { addr.wrapping_sub(1) } else { addr };
        let hit = self.symbols.resolve_in(process, lookup);
        let name = hit.map_or_else(|| format!("{addr:#x}"), |h| h.function());
        // The address's source line, when its module has lines.
        let source = hit.and_then(|h| h.source());
        let mapping_id = hit
            .and_then(|h| {
                self.symbols
                    .all_modules()
                    .position(|m| std::ptr::eq(m, h.module))
            })
            .map_or(0, id);
        let function_id = match self.functions.get(&name) {
            Some(f) => {
                // A function's file: that of its first location with a line.
                let function = usize::try_from(*f - 1)
                    .ok()
                    .and_then(|i| out.function.get_mut(i));
                if let (Some(func), Some(l)) = (function, source) {
                    if func.filename == 0 {
                        func.filename = strings.get(l.file);
                    }
                }
                *f
            }
            None => {
                let f = id(out.function.len());
                let n = strings.get(&name);
                out.function.push(Function {
                    id: f,
                    name: n,
                    system_name: n,
                    filename: source.map_or(0, |l| strings.get(l.file)),
                });
                self.functions.insert(name, f);
                f
            }
        };
        let l = id(out.location.len());
        out.location.push(Location {
            id: l,
            mapping_id,
            address: addr,
            line: vec![Line {
                function_id,
                line: source.map_or(0, |l| i64::from(l.line)),
            }],
        });
        self.ids.insert((process, addr, ret), l);
        l
    }
}

/// The pprof message for `profile`, symbolized with `symbols`. An object with call stacks
/// gives one Sample per stack (its locations leaf first, as profile.proto orders them);
/// samples whose stack was not kept, and objects without stacks, give one Sample per
/// nonzero bucket at its start address.
pub fn build(profile: &Profile, symbols: &Symbols) -> PprofProfile {
    let mut strings = Strings::new();
    let mut out = PprofProfile {
        sample_type: vec![ValueType {
            r#type: strings.get("samples"),
            unit: strings.get("count"),
        }],
        period_type: Some(ValueType {
            r#type: strings.get("cpu"),
            unit: strings.get("nanoseconds"),
        }),
        period: i64::from(profile.run.interval_100ns) * 100,
        // Profile stores (Parca, Pyroscope) file a profile under its time.
        time_nanos: profile.run.start_unix_ns().unwrap_or(0),
        // Wall times stay far below 2^63 ns.
        #[allow(clippy::cast_possible_truncation)]
        duration_nanos: (profile.run.wall_time_s * 1e9) as i64,
        ..Default::default()
    };
    for c in [
        format!("hvprof {}", profile.hvprof_version),
        format!("kernel {} {}", profile.run.kernel, profile.run.cmdline),
        format!(
            "started {}, {}",
            profile.run.start_time, profile.run.outcome
        ),
    ] {
        out.comment.push(strings.get(&c));
    }
    for (i, m) in symbols.all_modules().enumerate() {
        let file = m
            .path
            .as_ref()
            .map_or_else(|| m.name.clone(), |p| p.display().to_string());
        out.mapping.push(Mapping {
            id: id(i),
            memory_start: m.base,
            memory_limit: m.end(),
            file_offset: 0,
            filename: strings.get(&file),
            build_id: m.debug_id.as_deref().map_or(0, |b| strings.get(b)),
            has_functions: true,
        });
    }
    let mut locations = Locations {
        symbols,
        functions: HashMap::new(),
        ids: HashMap::new(),
    };
    let object_key = strings.get("object");
    let scope_key = strings.get("scope");
    let truncated_key = strings.get("truncated");
    let tasks = Tasks::new(profile);
    let mut task_labels = TaskLabels {
        tasks: &tasks,
        pid: strings.get("pid"),
        tid: strings.get("tid"),
        process: strings.get("process"),
        thread: strings.get("thread"),
    };
    for o in &profile.objects {
        let labels = vec![
            Label {
                key: object_key,
                str: 0,
                num: i64::try_from(o.id).unwrap_or(i64::MAX),
            },
            Label {
                key: scope_key,
                str: strings.get(&o.scope()),
                num: 0,
            },
        ];
        let value = |n: u64| vec![i64::try_from(n).unwrap_or(i64::MAX)];
        if o.stacks.is_empty() && !o.threads.is_empty() {
            for t in &o.threads {
                let mut label = labels.clone();
                label.extend(task_labels.of(Some(t.thread), &mut strings));
                let process = tasks.process_of(t.thread).map(|p| p.key);
                for &(index, count) in &t.counts {
                    let (start, _) = o.bucket_range(index);
                    let loc = locations.get(&mut out, &mut strings, process, start, false);
                    out.sample.push(Sample {
                        location_id: vec![loc],
                        value: value(count),
                        label: label.clone(),
                    });
                }
            }
            continue;
        }
        if o.stacks.is_empty() {
            for b in o.nonzero() {
                let loc = locations.get(&mut out, &mut strings, None, b.start, false);
                out.sample.push(Sample {
                    location_id: vec![loc],
                    value: value(b.count),
                    label: labels.clone(),
                });
            }
            continue;
        }
        for stack in &o.stacks {
            let process = stack
                .thread
                .and_then(|t| tasks.process_of(t))
                .map(|p| p.key);
            let location_id = stack
                .pcs
                .iter()
                .enumerate()
                .map(|(i, pc)| locations.get(&mut out, &mut strings, process, pc.0, i > 0))
                .collect();
            let mut label = labels.clone();
            label.extend(task_labels.of(stack.thread, &mut strings));
            if stack.truncated {
                label.push(Label {
                    key: truncated_key,
                    str: strings.get("yes"),
                    num: 0,
                });
            }
            out.sample.push(Sample {
                location_id,
                value: value(stack.count),
                label,
            });
        }
        if o.stacks_dropped > 0 {
            let name = strings.get("[stack not kept]");
            let f = id(out.function.len());
            out.function.push(Function {
                id: f,
                name,
                system_name: name,
                filename: 0,
            });
            let l = id(out.location.len());
            out.location.push(Location {
                id: l,
                mapping_id: 0,
                address: 0,
                line: vec![Line {
                    function_id: f,
                    line: 0,
                }],
            });
            out.sample.push(Sample {
                location_id: vec![l],
                value: value(o.stacks_dropped),
                label: labels,
            });
        }
    }
    out.string_table = strings.table;
    out
}

/// The labels naming a sample's guest process and thread.
struct TaskLabels<'a> {
    tasks: &'a Tasks<'a>,
    pid: i64,
    tid: i64,
    process: i64,
    thread: i64,
}

impl TaskLabels<'_> {
    /// `pid`, `tid` (numbers, when known), `process` and `thread` (names, the thread's when
    /// it has one) of `thread`; none for a sample without a thread or of a thread not listed.
    fn of(&mut self, thread: Option<u32>, strings: &mut Strings) -> Vec<Label> {
        let Some(t) = thread.and_then(|k| self.tasks.thread(k)) else {
            return Vec::new();
        };
        let Some(p) = self.tasks.process(t.process) else {
            return Vec::new();
        };
        let num = |key, n: Option<u64>| {
            n.map(|n| Label {
                key,
                str: 0,
                num: i64::try_from(n).unwrap_or(i64::MAX),
            })
        };
        let mut out: Vec<Label> = [num(self.pid, p.pid), num(self.tid, t.tid)]
            .into_iter()
            .flatten()
            .collect();
        out.push(Label {
            key: self.process,
            str: strings.get(&p.name),
            num: 0,
        });
        if let Some(name) = &t.name {
            out.push(Label {
                key: self.thread,
                str: strings.get(name),
                num: 0,
            });
        }
        out
    }
}

/// Writes `profile` as gzipped pprof protobuf.
pub fn write(profile: &Profile, symbols: &Symbols, w: impl Write) -> Result<(), ReportError> {
    let bytes = build(profile, symbols).encode_to_vec();
    let mut gz = GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&bytes).map_err(ReportError::Io)?;
    gz.finish().map_err(ReportError::Io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::symbols::tests::module;
    use std::io::Read;

    fn decoded(profile: &Profile, symbols: &Symbols) -> PprofProfile {
        let mut gz = Vec::new();
        write(profile, symbols, &mut gz).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut raw)
            .unwrap();
        PprofProfile::decode(&raw[..]).unwrap()
    }

    #[test]
    fn one_sample_per_nonzero_bucket_with_named_functions() {
        let p = sample_profile(0x1000);
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        let pb = decoded(&p, &symbols);
        let s = |i: i64| pb.string_table[usize::try_from(i).unwrap()].as_str();
        assert_eq!(pb.time_nanos, p.run.start_unix_ns().unwrap());
        assert!(pb.time_nanos > 0);
        assert_eq!(s(pb.sample_type[0].r#type), "samples");
        assert_eq!(s(pb.sample_type[0].unit), "count");
        assert_eq!(pb.string_table[0], "");
        assert_eq!(pb.sample.len(), 3);
        let values: Vec<i64> = pb.sample.iter().map(|x| x.value[0]).collect();
        assert_eq!(values, vec![5, 9, 1]);
        assert_eq!(pb.mapping.len(), 1);
        assert_eq!(pb.mapping[0].memory_start, 0x1000);
        let names: Vec<&str> = pb.function.iter().map(|f| s(f.name)).collect();
        assert_eq!(names, vec!["m+0x20", "hot"]);
        assert_eq!(pb.location[1].address, 0x1070);
        assert_eq!(pb.location[1].mapping_id, 1);
        assert_eq!(pb.location[2].line[0].function_id, 2);
        assert_eq!(pb.period, 3_906_300);
    }

    #[test]
    fn locations_carry_source_lines_and_functions_their_file() {
        let p = sample_profile(0x1000);
        let mut m = module("m", 0x1000, &[(0x70, 0x30, "hot")]);
        m.lines = crate::symbols::LineTable::from_rows(&[(0x80, "/src/m.rs", 43)]);
        let pb = decoded(&p, &Symbols::from_module(m));
        let s = |i: i64| pb.string_table[usize::try_from(i).unwrap()].as_str();
        // Buckets at 0x1020 and 0x1070 have no line, 0x1090 line 43; `hot`'s file comes from
        // its second location, the first with a line.
        let lines: Vec<i64> = pb.location.iter().map(|l| l.line[0].line).collect();
        assert_eq!(lines, vec![0, 0, 43]);
        let files: Vec<&str> = pb.function.iter().map(|f| s(f.filename)).collect();
        assert_eq!(files, vec!["", "/src/m.rs"]);
    }

    #[test]
    fn an_object_with_stacks_gives_one_sample_per_stack_leaf_first() {
        use crate::profile::StackCount;
        let mut p = sample_profile(0x1000);
        let stack =
            |pcs: &[u64], truncated, count| StackCount::new(pcs.iter().copied(), truncated, count);
        // `caller` ends at 0x1050 with a call: its return address 0x1050 is `next`'s first
        // byte, and must still be named `caller`.
        p.objects[0].stacks = vec![
            stack(&[0x1074, 0x1050], false, 10),
            stack(&[0x1074], true, 3),
        ];
        p.objects[0].stacks_dropped = 2;
        let symbols = crate::profile::tests::call_site_symbols();
        let pb = decoded(&p, &symbols);
        let s = |i: i64| pb.string_table[usize::try_from(i).unwrap()].as_str();
        let name = |loc: u64| {
            let l = &pb.location[usize::try_from(loc - 1).unwrap()];
            s(pb.function[usize::try_from(l.line[0].function_id - 1).unwrap()].name)
        };
        assert_eq!(pb.sample.len(), 3);
        let first: Vec<&str> = pb.sample[0].location_id.iter().map(|l| name(*l)).collect();
        assert_eq!(first, ["hot", "caller"]);
        assert_eq!(pb.sample[0].value, [10]);
        assert_eq!(pb.sample[1].location_id, [pb.sample[0].location_id[0]]);
        assert!(pb.sample[1].label.iter().any(|l| s(l.key) == "truncated"));
        assert!(!pb.sample[0].label.iter().any(|l| s(l.key) == "truncated"));
        assert_eq!(name(pb.sample[2].location_id[0]), "[stack not kept]");
        assert_eq!(pb.sample[2].value, [2]);
    }

    /// (pid, tid, process, thread, scope) labels of a sample; -1 or "" where absent.
    fn task_labels(pb: &PprofProfile, x: &Sample) -> (i64, i64, String, String, String) {
        let s = |i: i64| pb.string_table[usize::try_from(i).unwrap()].clone();
        let find = |key: &str| x.label.iter().find(|l| s(l.key) == key);
        (
            find("pid").map_or(-1, |l| l.num),
            find("tid").map_or(-1, |l| l.num),
            find("process").map_or_else(String::new, |l| s(l.str)),
            find("thread").map_or_else(String::new, |l| s(l.str)),
            find("scope").map_or_else(String::new, |l| s(l.str)),
        )
    }

    #[test]
    fn samples_carry_their_process_and_thread() {
        let mut p = crate::processes::tests::tasks_profile();
        let symbols = crate::profile::tests::call_site_symbols();
        let pb = decoded(&p, &symbols);
        let labels: Vec<_> = pb.sample.iter().map(|x| task_labels(&pb, x)).collect();
        let all = "all processes".to_string();
        let row = |pid, tid, process: &str, thread: &str| {
            (
                pid,
                tid,
                process.to_string(),
                thread.to_string(),
                all.clone(),
            )
        };
        // One Sample per stack, then the samples whose stack was not kept (no thread).
        assert_eq!(
            labels,
            [
                row(57, 57, "awk", "awk"),
                row(57, 60, "awk", "worker"),
                row(58, 58, "seq", "seq"),
                row(-1, -1, "", ""),
            ]
        );
        // Without stacks, one Sample per thread and bucket.
        p.objects[0].stacks.clear();
        p.objects[0].stacks_dropped = 0;
        let pb = decoded(&p, &symbols);
        let rows: Vec<_> = pb
            .sample
            .iter()
            .map(|x| {
                let (pid, tid, process, _, _) = task_labels(&pb, x);
                let address = pb.location[usize::try_from(x.location_id[0] - 1).unwrap()].address;
                (pid, tid, process, address, x.value[0])
            })
            .collect();
        let k = crate::processes::tests::KERNEL_PC;
        assert_eq!(
            rows,
            [
                (57, 57, "awk".into(), 0x1070, 40),
                (57, 57, "awk".into(), k, 10),
                (57, 60, "awk".into(), 0x1040, 20),
                (58, 58, "seq".into(), 0x1070, 15),
                (58, 58, "seq".into(), k, 5),
                (58, 61, "seq".into(), 0x1020, 6),
                (-1, -1, "[cr3 0x5000]".into(), 0x1040, 4),
            ]
        );
        let total: i64 = pb.sample.iter().map(|x| x.value[0]).sum();
        assert_eq!(total, 100);
    }

    #[test]
    fn the_objects_scope_is_the_label_scope() {
        let pb = decoded(&sample_profile(0x1000), &Symbols::default());
        let (pid, _, process, _, scope) = task_labels(&pb, &pb.sample[0]);
        assert_eq!((pid, process.as_str()), (-1, ""));
        assert_eq!(scope, "process 0x12345000");
    }

    #[test]
    fn addresses_outside_every_module_are_named_by_address() {
        let p = sample_profile(0x1000);
        let pb = decoded(&p, &Symbols::default());
        assert!(pb.mapping.is_empty());
        assert_eq!(pb.location[0].mapping_id, 0);
        let f = &pb.function[0];
        assert_eq!(pb.string_table[usize::try_from(f.name).unwrap()], "0x1020");
    }
}
