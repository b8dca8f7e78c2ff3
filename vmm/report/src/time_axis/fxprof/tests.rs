use serde_json::Value;

use super::*;
use crate::profile::tests::call_site_symbols;
use crate::time_axis::testdata::profile;

fn exported() -> Value {
    let mut out = Vec::new();
    write(&profile(), &call_site_symbols(), &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

fn len(v: &Value) -> usize {
    v.as_array().unwrap().len()
}

fn index(v: &Value) -> usize {
    usize::try_from(v.as_u64().unwrap()).unwrap()
}

/// Every column of `table` has its `length` entries.
fn columns_of_one_length(what: &str, table: &Value) -> usize {
    let n = index(&table["length"]);
    for (k, v) in table.as_object().unwrap() {
        if let Some(a) = v.as_array() {
            assert_eq!(a.len(), n, "{what}.{k}");
        }
    }
    n
}

#[test]
fn the_file_is_well_formed() {
    let d = exported();
    let categories = len(&d["meta"]["categories"]);
    for t in d["threads"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let strings = len(&t["stringArray"]);
        let samples = columns_of_one_length(name, &t["samples"]);
        let stacks = columns_of_one_length(name, &t["stackTable"]);
        let frames = columns_of_one_length(name, &t["frameTable"]);
        let funcs = columns_of_one_length(name, &t["funcTable"]);
        let markers = columns_of_one_length(name, &t["markers"]);
        assert!(samples > 0, "{name}");
        // Times in order (deltas never negative).
        for d in t["samples"]["timeDeltas"].as_array().unwrap() {
            assert!(d.as_f64().unwrap() >= 0.0, "{name}");
        }
        for s in t["samples"]["stack"].as_array().unwrap() {
            assert!(index(s) < stacks, "{name}");
        }
        // A stack's prefix comes before it.
        for (i, (prefix, frame)) in t["stackTable"]["prefix"]
            .as_array()
            .unwrap()
            .iter()
            .zip(t["stackTable"]["frame"].as_array().unwrap())
            .enumerate()
        {
            if !prefix.is_null() {
                assert!(index(prefix) < i, "{name}: stack {i}");
            }
            assert!(index(frame) < frames, "{name}: stack {i}");
        }
        for (func, category) in t["frameTable"]["func"]
            .as_array()
            .unwrap()
            .iter()
            .zip(t["frameTable"]["category"].as_array().unwrap())
        {
            assert!(index(func) < funcs, "{name}");
            assert!(index(category) < categories, "{name}");
        }
        for s in t["funcTable"]["name"].as_array().unwrap() {
            assert!(index(s) < strings, "{name}");
        }
        for i in 0..markers {
            let m = &t["markers"];
            assert!(index(&m["name"][i]) < strings, "{name}");
            assert!(index(&m["data"][i]["what"]) < strings, "{name}");
            if m["phase"][i] == 1 {
                assert!(m["endTime"][i].as_f64() >= m["startTime"][i].as_f64());
            }
        }
    }
}

/// The function names of `thread`'s samples in time order, each run of one name once.
fn functions_in_order(t: &Value) -> Vec<String> {
    let strings = t["stringArray"].as_array().unwrap();
    let mut out: Vec<String> = Vec::new();
    for s in t["samples"]["stack"].as_array().unwrap() {
        let frame = index(&t["stackTable"]["frame"][index(s)]);
        let func = index(&t["frameTable"]["func"][frame]);
        let name = strings[index(&t["funcTable"]["name"][func])]
            .as_str()
            .unwrap()
            .to_string();
        if out.last() != Some(&name) {
            out.push(name);
        }
    }
    out
}

#[test]
fn a_track_per_vcpu_and_per_guest_thread_with_the_functions_in_order() {
    let d = exported();
    let threads = d["threads"].as_array().unwrap();
    let tracks: Vec<(&str, &str, u64)> = threads
        .iter()
        .map(|t| {
            (
                t["processName"].as_str().unwrap(),
                t["name"].as_str().unwrap(),
                t["samples"]["length"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tracks,
        [
            ("vCPUs", "vCPU 0", 30),
            ("vCPUs", "vCPU 1", 30),
            ("vCPUs", "vCPU 2", 30),
            ("init", "init", 30),
            ("awk", "awk", 20),
            ("awk", "worker", 10),
        ]
    );
    assert_eq!(
        functions_in_order(&threads[0]),
        ["m!caller", "m!hot", "0x5000", "m!next", "0x5000", "m!next"]
    );
    assert_eq!(functions_in_order(&threads[5]), ["m!hot"]);
    // The caller under `hot` is its own frame: the stack is two deep.
    let awk = &threads[4];
    let top = index(&awk["samples"]["stack"][0]);
    assert!(!awk["stackTable"]["prefix"][top].is_null());
    // Kernel and user by CPL: the firmware phase's samples are the kernel's.
    let categories: Vec<&str> = d["meta"]["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let vcpu0 = &threads[0];
    let first = index(&vcpu0["stackTable"]["frame"][index(&vcpu0["samples"]["stack"][0])]);
    assert_eq!(
        categories[index(&vcpu0["frameTable"]["category"][first])],
        "Kernel"
    );
    let frame = index(&awk["stackTable"]["frame"][top]);
    assert_eq!(
        categories[index(&awk["frameTable"]["category"][frame])],
        "User"
    );
}

#[test]
fn markers_sit_on_their_vcpu_and_the_vms_on_every_vcpu() {
    let d = exported();
    let threads = d["threads"].as_array().unwrap();
    let kinds = |t: &Value| -> Vec<String> {
        t["markers"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        kinds(&threads[0]),
        [
            "hvprof-phase",
            "hvprof-hypercall",
            "hvprof-phase",
            "hvprof-object",
            "hvprof-pause",
            "hvprof-phase"
        ]
    );
    assert!(kinds(&threads[1]).contains(&"hvprof-halt".to_string()));
    assert!(kinds(&threads[2]).contains(&"hvprof-exit".to_string()));
    assert_eq!(kinds(&threads[3]), Vec::<String>::new());
    // The halt: 500 to 700 ms, its name and what it says in the strings.
    let m = &threads[1]["markers"];
    let i = kinds(&threads[1])
        .iter()
        .position(|k| k == "hvprof-halt")
        .unwrap();
    assert_eq!(m["startTime"][i].as_f64(), Some(500.0));
    assert_eq!(m["endTime"][i].as_f64(), Some(700.0));
    let strings = threads[1]["stringArray"].as_array().unwrap();
    assert_eq!(strings[index(&m["name"][i])], "halt");
    assert_eq!(strings[index(&m["data"][i]["what"])], "hlt");
}

/// Regression (issue 40, item 4): the Firefox Profiler file is sized before it is written and
/// refused past its limit, nothing written.
#[test]
fn a_firefox_file_past_its_limit_is_refused_before_a_byte_is_written() {
    let p = crate::time_axis::testdata::profile();
    let symbols = crate::profile::tests::call_site_symbols();
    let mut out = Vec::new();
    write(&p, &symbols, &mut out).unwrap();
    let exact = u64::try_from(out.len()).unwrap();
    let mut again = Vec::new();
    write_within(&p, &symbols, exact, &mut again).unwrap();
    assert_eq!(again, out);
    let mut none = Vec::new();
    let e = write_within(&p, &symbols, exact - 1, &mut none).unwrap_err();
    assert!(none.is_empty(), "nothing written");
    assert!(e.is_too_large(), "{e}");
    assert!(e.to_string().contains("Firefox Profiler file"), "{e}");
}

/// A file a process mapped names that process's addresses: init's samples at 0x5000 by init's
/// own file, on init's track and on the vCPU tracks alike.
#[test]
fn a_processs_own_files_name_its_frames() {
    let p = profile();
    let symbols = crate::time_axis::testdata::init_maps_sh(&p);
    let mut out = Vec::new();
    write(&p, &symbols, &mut out).unwrap();
    let d: Value = serde_json::from_slice(&out).unwrap();
    let threads = d["threads"].as_array().unwrap();
    assert_eq!(
        functions_in_order(&threads[0]),
        ["m!caller", "m!hot", "sh!main", "m!next", "sh!main", "m!next"]
    );
    assert!(functions_in_order(&threads[3]).contains(&"sh!main".to_string()));
}
