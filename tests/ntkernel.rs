//! A Windows kernel found from outside: tests/fixtures/pe/nt.c, a stand-in ntoskrnl built here
//! with clang and lld-link, runs at CPL0 in the reference guest (`scenario=ntkernel`) and builds
//! its loaded-module list the way Windows does (KLDR_DATA_TABLE_ENTRY as 64-bit Windows 10 and
//! 11 lay it out). hvprof, given only the PDB's store, finds the kernel from its samples,
//! PsLoadedModuleList from its exports, every module on the list, and names the kernel's
//! functions from the PDB its CodeView record names.
//!
//! This is a layout-level test: the list is laid out as Windows lays it out and is walked by
//! the code that would walk a real ntoskrnl's, but no real Windows kernel has been read.
//!
//! The second test runs tests/fixtures/pe/ntproc.c the same way (`scenario=ntprocs`): a
//! stand-in kernel whose PDB declares Windows' process and thread structures at offsets no
//! Windows build uses, holding four processes with their own CR3s, PEB loader lists and named
//! threads, one of which exits and is followed by another in its CR3 and EPROCESS. hvprof must
//! name every process, thread and user module from the PDB and the guest's memory alone, with
//! shares that match the guest's own accounting. [`real_builds`] runs the same kernel laid out
//! at real Windows builds' offsets, symbol RVAs and CodeView identities, and hvprof names it
//! from each build's public ISF file alone.
//!
//! Needs Debian's `clang`, `lld` and `golang-go`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;

use crate::harness::pe::{PeModule, PeSpec};
use crate::harness::{hvprof, pprof, Output, TempDir};

/// The same ntprocs test on the stand-in laid out at real Windows builds' offsets, named from
/// their public symbol tables alone.
mod real_builds;

const NT_BASE: u64 = 0xffff_f800_0010_0000;

/// Builds a stand-in kernel from tests/fixtures/pe/`source` (nt.c: modules; ntproc.c:
/// processes and threads) as ntoskrnl.exe with its ntkrnlmp.pdb, in `dir`.
fn build_nt(dir: &TempDir, source: &'static str) -> PeModule {
    let spec = PeSpec {
        source,
        image: "ntoskrnl.exe",
        pdb: "ntkrnlmp.pdb",
        entry: "KiSystemStartup",
        base: NT_BASE,
        link: &[],
        cflags: &[],
    };
    PeModule::build(dir, &spec)
}

#[test]
fn the_kernel_and_its_module_list_are_found_and_named_from_the_pdb_alone() {
    let dir = TempDir::new("ntkernel");
    let nt = build_nt(&dir, "nt.c");
    let r = nt.pdb_ref();
    let store = dir.join("store");
    nt.store_pdb(&store);
    let out = dir.join("out");
    hvprof([
        "profile",
        "--cmdline",
        "scenario=ntkernel nt.ms=1000",
        "--cpus",
        "1",
        "--quiet",
        "--initrd",
        nt.exe.to_str().unwrap(),
        "--symbol-path",
        store.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .run()
    .assert_status(0);

    // Every module on the list, in kernel space; the kernel with its PDB's identity.
    let profile = report::read_profile(&out.join("profile.json")).unwrap();
    let listed: Vec<(&str, u64, u64, Option<u32>)> = profile
        .guest_modules
        .iter()
        .map(|m| {
            assert_eq!(m.process.0, None, "{} is in kernel space", m.name);
            (
                m.name.as_str(),
                m.base.0,
                m.size.0,
                m.pdb.as_ref().map(|p| p.age),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("ntoskrnl.exe", NT_BASE, 0x5000, Some(r.id.age)),
            ("hal.dll", 0xffff_f800_00a0_0000, 0x6000, None),
            ("hvprof.sys", 0xffff_f800_0120_0000, 0x9000, None),
        ],
        "{:?}",
        profile.guest_modules
    );
    let pdb = profile.guest_modules[0].pdb.as_ref().unwrap();
    assert_eq!(
        (pdb.name.as_str(), pdb.guid.as_str()),
        (r.name.as_str(), r.id.guid.as_str())
    );

    // KiIdleSpin is not exported: only the PDB names it.
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("ntoskrnl.exe!KiIdleSpin"), "{text}");
    assert!(
        text.contains("hvprof.sys"),
        "the module table lists the driver\n{text}"
    );
    let (top, _) = pprof(&out, "-top", &[]);
    assert!(top.contains("KiIdleSpin"), "{top}");
}

/// The `key=value` words of the guest's `refguest: ntprocs <kind> ...` lines.
fn ground_truth(out: &Output, kind: &str) -> Vec<HashMap<String, String>> {
    let prefix = format!("refguest: ntprocs {kind} ");
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// A number of the guest's lines: decimal, or hex with `0x`.
fn guest_num(fields: &HashMap<String, String>, key: &str) -> u64 {
    let v = &fields[key];
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
        None => v.parse().unwrap(),
    }
}

/// A number of profile.json: a JSON number, or a `0x` string (docs/profile-json.md,
/// Conventions).
fn json_num(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => u64::from_str_radix(s.strip_prefix("0x")?, 16).ok(),
        _ => None,
    }
}

/// What profile.json says of one guest process: its row and its threads' (tid -> (key,
/// name)).
#[derive(Debug)]
struct Row<'a> {
    process: &'a Value,
    threads: BTreeMap<u64, (u64, Option<&'a str>)>,
}

#[test]
fn processes_threads_and_user_modules_are_named_from_the_pdb_with_the_guests_shares() {
    let dir = TempDir::new("ntprocs");
    let nt = build_nt(&dir, "ntproc.c");
    let store = dir.join("store");
    nt.store_pdb(&store);
    ntprocs(
        &nt,
        &dir.join("out"),
        ["--symbol-path", store.to_str().unwrap()],
    );
}

/// Runs the reference guest's ntprocs scenario on the stand-in kernel `nt`, its layout from
/// `layout` (`--symbol-path DIR` or `--guest-types FILE`), the results into `out`, and checks
/// them against the guest's own accounting. That accounting is the guest's TSC, wall-clock
/// time, so the run samples on the wall clock too: time the host did not run the vCPU then
/// shows as lost ticks, which the share check allows for, where a CPU-time clock would not
/// see it at all.
fn ntprocs(nt: &PeModule, out: &Path, layout: [&str; 2]) {
    let run = hvprof([
        "profile",
        "--cmdline",
        "scenario=ntprocs ntprocs.ms=3000 ntprocs.kms=500",
        "--cpus",
        "1",
        "--quiet",
        "--clock",
        "wall",
        "--interval",
        "10000",
        "--initrd",
        nt.exe.to_str().unwrap(),
        layout[0],
        layout[1],
        "--out",
        out.to_str().unwrap(),
    ])
    .run();
    run.assert_status(0)
        .assert_stdout_contains("refguest: PASS");
    check_ntprocs(&run, out);
}

/// Checks hvprof's outputs in `out` against the ground truth the guest printed in `run`.
fn check_ntprocs(run: &Output, out: &Path) {
    // The guest's ground truth: its processes, threads and loader entries, and the TSC time
    // its scheduler gave each thread.
    let processes = ground_truth(run, "process");
    let threads = ground_truth(run, "thread");
    let modules = ground_truth(run, "module");
    let names: Vec<&str> = processes.iter().map(|p| p["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "alpha.exe",
            "bravo.exe",
            "charlie.exe",
            "delta.exe",
            "echo32.exe"
        ],
        "{run}"
    );
    assert_eq!(threads.len(), 6, "{run}");
    let (charlie, delta) = (&processes[2], &processes[3]);
    assert_eq!(charlie["cr3"], delta["cr3"], "delta reuses charlie's CR3");
    assert_eq!(charlie["eprocess"], delta["eprocess"], "and its EPROCESS");

    let text = std::fs::read_to_string(out.join("profile.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        json["format_version"].as_u64(),
        Some(4),
        "profile.json format 4 (processes and threads)\n{run}"
    );
    let rows = json["processes"].as_array().expect("processes[]");
    let thread_rows = json["threads"].as_array().expect("threads[]");

    // One identified row per guest process, by PID: charlie and delta are two rows with the
    // same CR3.
    let by_pid = |pid: u64| -> Row {
        let matching: Vec<&Value> = rows
            .iter()
            .filter(|r| json_num(&r["pid"]) == Some(pid))
            .collect();
        assert_eq!(matching.len(), 1, "one row for pid {pid}: {rows:#?}");
        let process = matching[0];
        let key = json_num(&process["key"]).unwrap();
        let threads = thread_rows
            .iter()
            .filter(|t| json_num(&t["process"]) == Some(key))
            .map(|t| {
                let tid = json_num(&t["tid"]).unwrap_or_else(|| panic!("a tid: {t}"));
                (tid, (json_num(&t["key"]).unwrap(), t["name"].as_str()))
            })
            .collect();
        Row { process, threads }
    };
    let mut guest_rows = Vec::new();
    for p in &processes {
        let pid = guest_num(p, "pid");
        let row = by_pid(pid);
        let r = row.process;
        assert_eq!(r["name"], p["name"].as_str(), "{r}");
        assert_eq!(r["identified"], true, "{r}");
        assert_eq!(r["kernel"], false, "{r}");
        assert_eq!(
            r["path"].as_str(),
            Some(format!("C:\\stand-in\\{}", p["name"]).as_str()),
            "the executable's path, from its loader entry: {r}"
        );
        let cr3s: Vec<u64> = r["cr3s"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(json_num)
            .collect();
        // Its DirectoryTableBase (a row may list more if sampled CR3s are added: a switch
        // loads the next CR3 a few instructions before it changes the KPCR's current thread).
        assert!(cr3s.contains(&guest_num(p, "cr3")), "{r}");
        // Its threads by TID, named.
        let want: BTreeMap<u64, &str> = threads
            .iter()
            .filter(|t| guest_num(t, "pid") == pid)
            .map(|t| (guest_num(t, "tid"), t["name"].as_str()))
            .collect();
        let got: BTreeMap<u64, &str> = row
            .threads
            .iter()
            .map(|(&tid, &(_, name))| (tid, name.unwrap_or("(none)")))
            .collect();
        assert_eq!(got, want, "threads of pid {pid}: {thread_rows:#?}");
        guest_rows.push(row);
    }
    // The System process's thread ran at CPL0 (GS base = the KPCR) before any of them.
    assert!(
        rows.iter().any(|r| json_num(&r["pid"]) == Some(4)
            && r["name"] == "System"
            && r["kernel"] == true
            && r["identified"] == true),
        "System: {rows:#?}"
    );
    let key = |i: usize| json_num(&guest_rows[i].process["key"]).unwrap();
    assert_ne!(key(2), key(3), "charlie and delta are two processes");
    // The kernel's process list, walked once the layout arrived: the `[cr3 ..]` rows of
    // the samples before it were folded into the process that owned their address space, so
    // none is left for a CR3 an identified process owns.
    let owned: Vec<u64> = rows
        .iter()
        .filter(|r| r["identified"] == true)
        .flat_map(|r| r["cr3s"].as_array().unwrap().iter().filter_map(json_num))
        .collect();
    for r in rows.iter().filter(|r| r["identified"] == false) {
        let cr3s: Vec<u64> = r["cr3s"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(json_num)
            .collect();
        assert!(
            cr3s.iter().all(|c| !owned.contains(c)),
            "{r} is an address space an identified process owns\n{rows:#?}"
        );
    }

    // Every loader entry, in its process's address space (charlie's and delta's share one).
    let found: Vec<(Option<u64>, &str, u64, u64)> = json["guest_modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                json_num(&m["process"]),
                m["name"].as_str().unwrap(),
                json_num(&m["base"]).unwrap(),
                json_num(&m["size"]).unwrap(),
            )
        })
        .collect();
    // The kernel's own list is of _LDR_DATA_TABLE_ENTRY at the layout's offsets: at ntproc.h's,
    // x64 Windows' offsets built into a reader would not find hal.dll's name.
    assert!(
        found
            .iter()
            .any(|m| m.1 == "ntoskrnl.exe" && m.0.is_none() && m.2 == NT_BASE),
        "the kernel: {found:#x?}"
    );
    assert!(
        found.contains(&(None, "hal.dll", 0xffff_f800_01e0_0000, 0x6000)),
        "the kernel's module list, read at the layout's offsets: {found:#x?}"
    );
    for m in &modules {
        let pid = guest_num(m, "pid");
        let p = processes
            .iter()
            .find(|p| guest_num(p, "pid") == pid)
            .unwrap();
        let want = (
            Some(guest_num(p, "cr3")),
            m["name"].as_str(),
            guest_num(m, "base"),
            guest_num(m, "size"),
        );
        assert!(found.contains(&want), "{want:x?} in {found:#x?}");
    }

    // Shares: the host profile's samples per thread against the TSC time the guest's
    // scheduler gave each thread, both over the four processes' threads only (boot, the
    // System thread and the guest's own end are left out on both sides).
    let object = &json["objects"][0];
    let mut samples: BTreeMap<u64, u64> = BTreeMap::new();
    for t in object["threads"].as_array().expect("objects[0].threads[]") {
        let n: u64 = t["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json_num(&c[1]).unwrap())
            .sum();
        *samples.entry(json_num(&t["thread"]).unwrap()).or_default() += n;
    }
    let mut sampled = Vec::new(); // (what, samples, guest tsc)
    for (p, row) in processes.iter().zip(&guest_rows) {
        for t in threads.iter().filter(|t| t["pid"] == p["pid"]) {
            let (thread_key, _) = row.threads[&guest_num(t, "tid")];
            let n = samples.get(&thread_key).copied().unwrap_or(0);
            sampled.push((t["name"].clone(), p["name"].clone(), n, guest_num(t, "tsc")));
        }
    }
    let n: u64 = sampled.iter().map(|s| s.2).sum();
    let tsc: u64 = sampled.iter().map(|s| s.3).sum();
    // Each of the n samples lands in a thread with the probability of its share of the time
    // (at worst independently: sampling is periodic and the schedule round robin, which only
    // spreads the samples more evenly), so a share's count is binomial at worst and a bound of
    // 5 standard deviations fails by noise with probability under 1e-6. One point more covers
    // what is not noise: each switch moves the KPCR's current thread some microseconds after
    // the scheduler's clock (about 100 switches a second). At least 500 samples, or the bound
    // means nothing.
    // And what the host took: while it did not run the vCPU the guest's TSC went on and its
    // scheduler charged that time to the thread it was running, where hvprof's ticks fell
    // together (counted as lost). The lost fraction of the ticks bounds that error.
    assert!(n >= 500, "only {n} samples in the four processes\n{run}");
    let unseen = lost_fraction(&json);
    let within = |what: &str, got: u64, truth: u64| {
        let share = truth as f64 / tsc as f64;
        let measured = got as f64 / n as f64;
        let bound = 5.0 * (share * (1.0 - share) / n as f64).sqrt() + 0.01 + unseen;
        assert!(
            (measured - share).abs() <= bound,
            "{what}: {:.2}% of {n} samples, the guest ran it {:.2}% of the time (bound {:.2} \
             points, {:.2} of them for ticks lost)\n{sampled:?}",
            100.0 * measured,
            100.0 * share,
            100.0 * bound,
            100.0 * unseen
        );
    };
    for (thread, _, got, truth) in &sampled {
        within(thread, *got, *truth);
    }
    for p in &processes {
        let (got, truth) = sampled
            .iter()
            .filter(|s| s.1 == p["name"])
            .fold((0, 0), |(g, t), s| (g + s.2, t + s.3));
        within(&p["name"], got, truth);
    }

    // echo32's thread ran x86 code in compatibility mode, called from its 64-bit side: those
    // samples are named by the x86 function's symbol (its leaf alone, no x64 frames walked
    // through a 32-bit stack). Its loop is most of the thread's time wherever the run is
    // (about 98% where compatibility mode is emulated, as on PVM hosts, and the loop's 312
    // iterations against a far call and return per call where it runs natively).
    let x86: u64 = object["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == "ntprocs_echo32_x86")
        .map(|f| json_num(&f["samples"]).unwrap())
        .sum();
    let echo32 = sampled.iter().find(|s| s.0 == "echo32-main").unwrap().2;
    assert!(
        x86 * 2 > echo32 && x86 <= echo32,
        "{x86} samples in the x86 function of echo32's {echo32}\n{:#}",
        object["functions"]
    );

    // The report names them too.
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    for p in &processes {
        assert!(report.contains(p["name"].as_str()), "{report}");
    }
    check_jq_totals(&json, out);
}

/// The fraction of the run's ticks that fell together because the host did not run a vCPU in
/// time (profile.json's `vcpus[].lost` over samples plus lost).
pub(crate) fn lost_fraction(json: &Value) -> f64 {
    let (mut taken, mut lost) = (0u64, 0u64);
    for v in json["vcpus"].as_array().expect("vcpus[]") {
        taken += json_num(&v["samples"]).unwrap_or(0);
        lost += json_num(&v["lost"]).unwrap_or(0);
    }
    if taken + lost == 0 {
        0.0
    } else {
        lost as f64 / (taken + lost) as f64
    }
}

/// Runs the jq lines of docs/profile-json.md ("Totals for scripts") in `out` on its
/// profile.json (`json`), and checks each row against what the per-thread counts give,
/// added up here without the file's totals. Needs Debian's `jq` (.ci/run installs it).
fn check_jq_totals(json: &Value, out: &Path) {
    let doc =
        std::fs::read_to_string(crate::harness::workspace_root().join("docs/profile-json.md"))
            .unwrap();
    let section = doc
        .split("## Totals for scripts")
        .nth(1)
        .expect("the doc's section");
    let lines: Vec<&str> = section
        .split("\n## ")
        .next()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("jq "))
        .collect();
    assert_eq!(lines.len(), 2, "top processes and top threads: {lines:?}");
    let table = |name: &str| -> BTreeMap<u64, &Value> {
        json[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (json_num(&r["key"]).unwrap(), r))
            .collect()
    };
    let (processes, threads) = (table("processes"), table("threads"));
    let text = |v: &Value| match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        v => json_num(v).unwrap().to_string(),
    };
    let (mut want_processes, mut want_threads) = (Vec::new(), Vec::new());
    for o in json["objects"].as_array().unwrap() {
        if o["owner"] != "host" {
            continue;
        }
        let id = json_num(&o["id"]).unwrap();
        let (base, shift) = (
            json_num(&o["base"]).unwrap(),
            json_num(&o["bucket_shift"]).unwrap(),
        );
        // Per thread and per process: (samples, user, kernel).
        let mut per_process: BTreeMap<u64, [u64; 3]> = BTreeMap::new();
        let mut per_thread = Vec::new();
        for t in o["threads"].as_array().into_iter().flatten() {
            let key = json_num(&t["thread"]).unwrap();
            let mut sums = [0u64; 3];
            for c in t["counts"].as_array().unwrap() {
                let (index, n) = (json_num(&c[0]).unwrap(), json_num(&c[1]).unwrap());
                let kernel = base.wrapping_add(index << shift) >> 63 == 1;
                sums[0] += n;
                sums[if kernel { 2 } else { 1 }] += n;
            }
            let row = threads[&key];
            let process = json_num(&row["process"]).unwrap();
            let p = per_process.entry(process).or_default();
            for (a, b) in p.iter_mut().zip(sums) {
                *a += b;
            }
            per_thread.push((sums, key, row, processes[&process]));
        }
        let mut ranked: Vec<_> = per_process.into_iter().collect();
        ranked.sort_by_key(|&(key, sums)| (std::cmp::Reverse(sums[0]), key));
        for (key, [n, user, kernel]) in ranked {
            let p = processes[&key];
            want_processes.push(format!(
                "{id}\t{n}\t{user}\t{kernel}\t{}\t{}",
                text(&p["pid"]),
                text(&p["name"])
            ));
        }
        per_thread.sort_by_key(|&(sums, key, ..)| (std::cmp::Reverse(sums[0]), key));
        for ([n, user, kernel], _, t, p) in per_thread {
            want_threads.push(format!(
                "{id}\t{n}\t{user}\t{kernel}\t{}\t{}\t{}",
                text(&t["tid"]),
                text(&t["name"]),
                text(&p["name"])
            ));
        }
    }
    assert!(
        !want_processes.is_empty(),
        "a host object with per-thread counts"
    );
    for (line, want) in lines.iter().zip([want_processes, want_threads]) {
        let run = std::process::Command::new("sh")
            .args(["-c", line])
            .current_dir(out)
            .output()
            .expect("sh runs");
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{line}: {} (needs Debian's jq)\n{stdout}",
            String::from_utf8_lossy(&run.stderr)
        );
        let got: Vec<&str> = stdout.lines().collect();
        assert_eq!(got, want, "{line}");
    }
}
