//! profile.json: the [`Profile`] as JSON (schema: docs/profile-json.md and
//! docs/profile.schema.json).

use std::io::{Read, Write};

use serde_json::Value;

use super::hex::Hex;
use super::profile::{Profile, FORMAT_NAME, FORMAT_VERSION, OLDEST_FORMAT_VERSION};
use super::ReportError;

pub mod keys;

/// Writes `profile` as one line of JSON and a newline (compact: `jq .` pretty-prints it),
/// with every host object's per-process and per-thread totals filled in afresh from its
/// per-thread counts ([`crate::processes::add_totals`]): whatever made the profile, the file
/// has them, and they agree with the counts.
pub fn write(profile: &Profile, mut w: impl Write) -> Result<(), ReportError> {
    let filled;
    let profile = if profile.objects.iter().any(|o| !o.threads.is_empty()) {
        let mut p = profile.clone();
        crate::processes::add_totals(&mut p);
        filled = p;
        &filled
    } else {
        profile
    };
    serde_json::to_writer(&mut w, profile).map_err(ReportError::Json)?;
    w.write_all(b"\n").map_err(ReportError::Io)?;
    Ok(())
}

/// Reads a profile.json, checking its format name and version first so that a file of
/// another version gets a clear error rather than a field-by-field complaint. A version-1 file
/// (bucket indices as numbers) is upgraded as it is read: the profile returned is always of
/// [`FORMAT_VERSION`], so writing it again writes the current version. The profile is then
/// checked for consistency ([`crate::validate`]): nothing reads a profile that fails. A key
/// given twice in any object is refused first ([`keys`]).
pub fn read(mut r: impl Read) -> Result<Profile, ReportError> {
    let mut text = String::new();
    r.read_to_string(&mut text).map_err(ReportError::Io)?;
    keys::check(&text).map_err(ReportError::Json)?;
    let mut value: Value = serde_json::from_str(&text).map_err(ReportError::Json)?;
    let format = value.get("format").and_then(|v| v.as_str());
    if format != Some(FORMAT_NAME) {
        return Err(ReportError::NotAProfile);
    }
    let version = match value.get("format_version") {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| ReportError::VersionNotANumber(format!("{v} is not an integer")))?,
        None => return Err(ReportError::VersionNotANumber("missing".to_string())),
    };
    match version {
        v if v == u64::from(FORMAT_VERSION) => {}
        // Version 3 added optional fields (stacks), version 4 optional tables (processes,
        // threads) and a stack's thread: an older file is one without them.
        2 | 3 => value["format_version"] = FORMAT_VERSION.into(),
        1 => {
            upgrade_from_v1(&mut value)?;
            value["format_version"] = FORMAT_VERSION.into();
        }
        _ => {
            return Err(ReportError::Version {
                found: version,
                oldest: OLDEST_FORMAT_VERSION,
                newest: FORMAT_VERSION,
            })
        }
    }
    let profile: Profile = serde_json::from_value(value).map_err(ReportError::Json)?;
    crate::validate::check(&profile)?;
    Ok(profile)
}

/// Version 1 to 2: every object's `counts` index, a number in version 1, becomes a `"0x..."`
/// string. Anything else in the way is left for deserialization to report, except an index
/// that is not a number (version 1 never wrote one).
fn upgrade_from_v1(value: &mut Value) -> Result<(), ReportError> {
    let Some(objects) = value.get_mut("objects").and_then(Value::as_array_mut) else {
        return Ok(());
    };
    for (o, object) in objects.iter_mut().enumerate() {
        let Some(counts) = object.get_mut("counts").and_then(Value::as_array_mut) else {
            continue;
        };
        for (b, pair) in counts.iter_mut().enumerate() {
            let Some(index) = pair.as_array_mut().and_then(|p| p.first_mut()) else {
                continue;
            };
            let Some(i) = index.as_u64() else {
                return Err(ReportError::Json(serde::de::Error::custom(format!(
                    "format version 1: objects[{o}].counts[{b}]: the bucket index {index} is \
                     not a non-negative integer"
                ))));
            };
            *index = serde_json::to_value(Hex(i)).map_err(ReportError::Json)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex::Hex;
    use crate::profile::tests::sample_profile;
    use crate::symbols::tests::module;
    use crate::Symbols;

    fn round_trip(p: &Profile) -> Profile {
        let mut buf = Vec::new();
        write(p, &mut buf).unwrap();
        read(&buf[..]).unwrap()
    }

    #[test]
    fn a_profile_survives_a_round_trip() {
        let mut p = sample_profile(0xffff_f800_0000_1000);
        assert_eq!(round_trip(&p), p);
        p.symbolize(&Symbols::from_module(
            module("m", 0xffff_f800_0000_1000, &[(0x20, 0x10, "f")])
                .placed_at(0xffff_f800_0000_1000),
        ));
        p.objects[0].process.0 = None;
        assert_eq!(round_trip(&p), p);
    }

    #[test]
    fn counts_are_sparse_pairs_and_addresses_hex() {
        let p = sample_profile(0x1000);
        let mut buf = Vec::new();
        write(&p, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(
            text.contains(r#""counts":[["0x2",5],["0x7",9],["0x9",1]]"#),
            "{text}"
        );
        assert!(text.contains(r#""format_version":4"#), "{text}");
        assert!(
            !text.contains("stacks"),
            "an object without stacks has no stack fields"
        );
        assert!(text.contains(r#""base":"0x1000""#), "{text}");
        assert!(text.contains(r#""process":"0x12345000""#), "{text}");
        assert!(text.ends_with("}\n"));
    }

    /// Regression (issue 40, item 13): a key given twice in profile.json was read, the last
    /// value winning (the file went through a `serde_json::Value`).
    #[test]
    fn duplicate_keys_are_refused_naming_the_key_and_object() {
        let p = sample_profile(0x1000);
        let mut buf = Vec::new();
        write(&p, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        for (edited, want) in [
            (
                text.replacen(r#""total":15"#, r#""total":15,"total":16"#, 1),
                r#"the key "total" is given twice in objects[0]"#,
            ),
            (
                text.replacen(r#""vcpus":2"#, r#""vcpus":2,"vcpus":2"#, 1),
                r#"the key "vcpus" is given twice in run"#,
            ),
            (
                text.replacen('{', r#"{"format":"x","#, 1),
                r#"the key "format" is given twice in the top level"#,
            ),
        ] {
            assert_ne!(edited, text);
            let e = read(edited.as_bytes()).unwrap_err();
            let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
            assert!(chain.contains(want), "{chain}");
        }
    }

    #[test]
    fn other_formats_and_versions_are_refused() {
        assert!(matches!(read(&b"{}"[..]), Err(ReportError::NotAProfile)));
        let p = sample_profile(0x1000);
        for (bad, found) in [
            (Value::from(99), 99),
            (Value::from(5), 5),
            (Value::from(0), 0),
        ] {
            let mut v = serde_json::to_value(&p).unwrap();
            v["format_version"] = bad.clone();
            let e = read(v.to_string().as_bytes()).unwrap_err();
            assert!(
                matches!(
                    e,
                    ReportError::Version { found: f, oldest: 1, newest: 4 } if f == found
                ),
                "{bad}: {e:?}"
            );
        }
        // Regression: a string version read as "version 0".
        for (bad, message) in [
            (Value::from("2"), r#""2" is not an integer"#),
            (Value::from(2.5), "2.5 is not an integer"),
            (Value::from(-1), "-1 is not an integer"),
            (Value::Null, "null is not an integer"),
        ] {
            let mut v = serde_json::to_value(&p).unwrap();
            v["format_version"] = bad.clone();
            let e = read(v.to_string().as_bytes()).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("format_version: {message}; this hvprof reads the integers 1 to 4")
            );
        }
        let mut v = serde_json::to_value(&p).unwrap();
        v.as_object_mut().unwrap().remove("format_version");
        let e = read(v.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "format_version: missing; this hvprof reads the integers 1 to 4"
        );
        v["format_version"] = 99.into();
        let e = read(v.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "profile format version 99; this hvprof reads versions 1 to 4"
        );
        assert!(matches!(read(&b"not json"[..]), Err(ReportError::Json(_))));
    }

    /// `p` as version 1 wrote it: bucket indices as JSON numbers.
    fn as_version_1(p: &Profile) -> String {
        let mut v = serde_json::to_value(p).unwrap();
        v["format_version"] = 1.into();
        for o in v["objects"].as_array_mut().unwrap() {
            for pair in o["counts"].as_array_mut().unwrap() {
                let index = crate::hex::parse(pair[0].as_str().unwrap()).unwrap();
                pair[0] = index.into();
            }
        }
        v.to_string()
    }

    #[test]
    fn version_1_files_are_read_and_upgraded() {
        let mut p = sample_profile(0);
        // A whole-space host profile's index of a kernel address, past 2^53.
        let o = &mut p.objects[0];
        (o.size, o.buckets, o.total) = (Hex(u64::MAX), 1 << 60, o.total + 4);
        o.counts.push((0xffff_ffff_8100_0000 >> 4, 3));
        o.counts.push((u64::MAX >> 4, 1));
        let v1 = as_version_1(&p);
        assert!(v1.contains(r#""format_version":1"#), "{v1}");
        assert!(
            v1.contains(
                r#""counts":[[2,5],[7,9],[9,1],[1152921504473677824,3],[1152921504606846975,1]]"#
            ),
            "{v1}"
        );
        let read_back = read(v1.as_bytes()).unwrap();
        assert_eq!(read_back.format_version, FORMAT_VERSION);
        assert_eq!(read_back, p, "indices above 2^53 are read exactly");
        // Written again, it is a current file.
        let mut buf = Vec::new();
        write(&read_back, &mut buf).unwrap();
        let v2 = String::from_utf8(buf).unwrap();
        assert!(v2.contains(r#""format_version":4"#), "{v2}");
        assert!(
            v2.contains(r#"["0xffffffff8100000",3],["0xfffffffffffffff",1]]"#),
            "{v2}"
        );
        assert_eq!(read(v2.as_bytes()).unwrap(), p);
    }

    /// Regression: `buckets` of a whole-space profile (2^60) was written as a JSON number,
    /// which readers of doubles round; so was any count or total past 2^53.
    #[test]
    fn numbers_past_2_53_are_written_as_hex_strings_and_read_back() {
        let mut p = sample_profile(0);
        let o = &mut p.objects[0];
        (o.size, o.buckets) = (Hex(u64::MAX), (1 << 60) + 1);
        o.counts = vec![(0, (1 << 53) + 1), (1 << 59, 1 << 53)];
        o.total = (1 << 54) + 1;
        let mut buf = Vec::new();
        write(&p, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains(r#""buckets":"0x1000000000000001""#), "{text}");
        assert!(text.contains(r#""total":"0x40000000000001""#), "{text}");
        assert!(
            text.contains(
                r#""counts":[["0x0","0x20000000000001"],["0x800000000000000",9007199254740992]]"#
            ),
            "{text}"
        );
        assert_eq!(read(text.as_bytes()).unwrap(), p);
        // Every JSON number written is exact as a double.
        let v: Value = serde_json::from_str(&text).unwrap();
        fn numbers(v: &Value, out: &mut Vec<u64>) {
            match v {
                Value::Number(n) => out.extend(n.as_u64()),
                Value::Array(a) => a.iter().for_each(|x| numbers(x, out)),
                Value::Object(o) => o.values().for_each(|x| numbers(x, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        numbers(&v, &mut all);
        assert!(all.iter().all(|n| *n <= crate::hex::MAX_EXACT), "{all:?}");
    }

    #[test]
    fn each_version_has_its_own_index_form() {
        let p = sample_profile(0x1000);
        // Version 1 with a string index, or a negative one: refused, naming the place.
        let v1 = as_version_1(&p).replacen("[7,9]", r#"["0x7",9]"#, 1);
        let e = read(v1.as_bytes()).unwrap_err();
        let message = format!("{:?}", e);
        assert!(matches!(e, ReportError::Json(_)), "{message}");
        assert!(message.contains("objects[0].counts[1]"), "{message}");
        let v1 = as_version_1(&p).replacen("[7,9]", "[-7,9]", 1);
        assert!(matches!(read(v1.as_bytes()), Err(ReportError::Json(_))));
        // Version 2 with a numeric index, or a signed hex one: refused.
        let mut v = serde_json::to_value(&p).unwrap();
        v["objects"][0]["counts"][1][0] = 7.into();
        assert!(matches!(
            read(v.to_string().as_bytes()),
            Err(ReportError::Json(_))
        ));
        v["objects"][0]["counts"][1][0] = "0x+7".into();
        assert!(matches!(
            read(v.to_string().as_bytes()),
            Err(ReportError::Json(_))
        ));
        v["objects"][0]["counts"][1][0] = "0x7".into();
        assert_eq!(read(v.to_string().as_bytes()).unwrap(), p);
    }

    /// The keys hvprof writes for each kind of object are exactly the ones the JSON Schema
    /// requires (so the schema and the serde types cannot drift apart unnoticed).
    #[test]
    fn the_clock_is_written_only_when_it_is_the_cpu_clock() {
        let mut p = sample_profile(0x1000);
        let wall = serde_json::to_value(&p).unwrap();
        assert!(wall["run"].get("clock").is_none());
        let back: Profile = serde_json::from_value(wall).unwrap();
        assert_eq!(back.run.clock, "wall");
        p.run.clock = "cpu".into();
        let cpu = serde_json::to_value(&p).unwrap();
        assert_eq!(cpu["run"]["clock"], "cpu");
        assert_eq!(
            serde_json::from_value::<Profile>(cpu).unwrap().run.clock,
            "cpu"
        );
    }

    #[test]
    fn the_schema_requires_exactly_the_fields_written() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/profile.schema.json")).unwrap();
        let mut p = sample_profile(0x1000);
        p.symbolize(&Symbols::from_module(module(
            "m",
            0x1000,
            &[(0x20, 0x10, "f")],
        )));
        let v = serde_json::to_value(&p).unwrap();
        let keys = |o: &serde_json::Value| {
            let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let required = |s: &serde_json::Value| {
            let mut k: Vec<String> = s["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect();
            k.sort();
            k
        };
        let defs = &schema["$defs"];
        assert_eq!(keys(&v), required(&schema));
        assert_eq!(keys(&v["run"]), required(&defs["run"]));
        assert_eq!(keys(&v["vcpus"][0]), required(&defs["vcpu"]));
        assert_eq!(keys(&v["modules"][0]), required(&defs["module"]));
        assert_eq!(keys(&v["objects"][0]), required(&defs["object"]));
        assert_eq!(
            keys(&v["objects"][0]["functions"][0]),
            required(&defs["function"])
        );
        assert_eq!(
            schema["properties"]["format_version"]["const"],
            FORMAT_VERSION
        );
        // A profile with processes, threads, per-thread counts and stacks, and the totals
        // the writer adds.
        let mut tasks = crate::processes::tests::tasks_profile();
        crate::processes::add_totals(&mut tasks);
        let v = serde_json::to_value(tasks).unwrap();
        assert_eq!(keys(&v["processes"][0]), required(&defs["process"]));
        assert_eq!(keys(&v["threads"][0]), required(&defs["thread"]));
        let mut thread_counts = required(&defs["thread_counts"]);
        thread_counts.extend(["samples", "user", "kernel"].map(String::from));
        thread_counts.sort();
        assert_eq!(keys(&v["objects"][0]["threads"][0]), thread_counts);
        assert_eq!(
            keys(&v["objects"][0]["processes"][0]),
            required(&defs["process_samples"])
        );
        let mut object = required(&defs["object"]);
        object.extend(["processes", "threads", "stacks", "stacks_dropped"].map(String::from));
        object.sort();
        assert_eq!(keys(&v["objects"][0]), object);
        let mut stack = required(&defs["stack"]);
        stack.push("thread".into());
        stack.sort();
        assert_eq!(keys(&v["objects"][0]["stacks"][0]), stack);
        let mut top = required(&schema);
        top.extend(["processes".to_string(), "threads".to_string()]);
        top.sort();
        assert_eq!(keys(&v), top);
    }

    #[test]
    fn processes_threads_and_per_thread_counts_round_trip() {
        let p = crate::processes::tests::tasks_profile();
        let mut buf = Vec::new();
        write(&p, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(
            text.contains(
                r#"{"key":10,"pid":57,"name":"awk","path":"/usr/bin/awk","cr3s":["0x3000"],"first_seen_s":0.25,"last_seen_s":1.0,"kernel":false,"identified":true}"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"{"key":24,"process":12,"tid":null,"name":null}"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"{"thread":20,"samples":50,"user":40,"kernel":10,"counts":[["0x107",40],["0xffffffff8100000",10]]}"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#""processes":[{"process":10,"samples":70,"user":60,"kernel":10},{"process":11,"samples":26,"user":21,"kernel":5},{"process":12,"samples":4,"user":4,"kernel":0}],"threads":[{"thread":20,"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"{"pcs":["0x1044"],"truncated":false,"count":20,"thread":21}"#),
            "{text}"
        );
        // Read back with the totals the writer added.
        let mut totalled = p.clone();
        crate::processes::add_totals(&mut totalled);
        assert_ne!(totalled, p);
        assert_eq!(read(text.as_bytes()).unwrap(), totalled);
        // Ids past 2^53 (a hostile guest's) are written as hex strings, and read back.
        let mut big = p.clone();
        big.processes[0].pid = Some(u64::MAX);
        let mut buf = Vec::new();
        write(&big, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains(r#""pid":"0xffffffffffffffff""#), "{text}");
        crate::processes::add_totals(&mut big);
        assert_eq!(read(text.as_bytes()).unwrap(), big);
    }

    /// The version-4 fixture tests/reports.rs hands to `hvprof report` and `go tool pprof` is
    /// the profile every output's unit tests use, as this build writes it.
    #[test]
    fn the_version_4_fixture_is_the_tasks_profile() {
        let fixture = include_str!("../testdata/profile-v4-processes.json");
        let mut p = crate::processes::tests::tasks_profile();
        crate::processes::add_totals(&mut p);
        assert_eq!(read(fixture.as_bytes()).unwrap(), p);
        let mut buf = Vec::new();
        write(&p, &mut buf).unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), fixture);
    }

    /// A version-4 file written before the totals (no `objects[].processes`, no per-thread
    /// `samples`, `user`, `kernel`) still reads, as the same profile without them, and what
    /// hvprof writes from it has them.
    #[test]
    fn a_version_4_file_without_totals_reads_and_is_written_with_them() {
        let mut v: Value =
            serde_json::from_str(include_str!("../testdata/profile-v4-processes.json")).unwrap();
        let o = v["objects"][0].as_object_mut().unwrap();
        assert!(o.remove("processes").is_some());
        for t in o["threads"].as_array_mut().unwrap() {
            for field in ["samples", "user", "kernel"] {
                assert!(t.as_object_mut().unwrap().remove(field).is_some());
            }
        }
        let old = read(v.to_string().as_bytes()).unwrap();
        assert_eq!(old, crate::processes::tests::tasks_profile());
        let mut buf = Vec::new();
        write(&old, &mut buf).unwrap();
        let again = read(&buf[..]).unwrap();
        assert_eq!(again.objects[0].processes.len(), 3);
        assert_eq!(again.objects[0].threads[0].samples, Some(50));
    }

    /// A version-3 file as hvprof 0.1 wrote it (guest object, whole-space host profile with
    /// stacks): read as a current profile with no process or thread table.
    #[test]
    fn a_version_3_file_reads_back_without_processes() {
        let v3 = include_str!("../testdata/profile-v3.json");
        assert!(v3.contains(r#""format_version":3"#));
        let p = read(v3.as_bytes()).unwrap();
        assert_eq!(p.format_version, FORMAT_VERSION);
        assert!(p.processes.is_empty() && p.threads.is_empty());
        let host = &p.objects[1];
        assert_eq!(
            (host.total, host.stacks.len(), host.stacks_dropped),
            (40, 2, 1)
        );
        assert!(host.threads.is_empty() && host.stacks.iter().all(|s| s.thread.is_none()));
        // Written again, it is a version-4 file without the new fields, and reads back equal.
        let mut buf = Vec::new();
        write(&p, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains(r#""format_version":4"#), "{text}");
        assert!(
            !text.contains("processes") && !text.contains("\"thread"),
            "{text}"
        );
        assert_eq!(read(text.as_bytes()).unwrap(), p);
    }

    #[test]
    fn stacks_round_trip_and_version_2_files_read_as_stackless() {
        let mut p = sample_profile(0x1000);
        p.objects[0].stacks = vec![crate::profile::StackCount::new(
            [0x1020, 0xffff_f800_0000_1234],
            true,
            4,
        )];
        p.objects[0].stacks_dropped = 2;
        let mut buf = Vec::new();
        write(&p, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(
            text.contains(r#""stacks":[{"pcs":["0x1020","0xfffff80000001234"],"truncated":true,"count":4}],"stacks_dropped":2"#),
            "{text}"
        );
        assert_eq!(read(text.as_bytes()).unwrap(), p);
        let mut v2 = serde_json::to_value(sample_profile(0x1000)).unwrap();
        v2["format_version"] = 2.into();
        let read_back = read(v2.to_string().as_bytes()).unwrap();
        assert_eq!(read_back.format_version, FORMAT_VERSION);
        assert_eq!(read_back, sample_profile(0x1000));
    }

    #[test]
    fn unknown_fields_are_ignored_and_missing_ones_refused() {
        let p = sample_profile(0x1000);
        let mut v = serde_json::to_value(&p).unwrap();
        v["objects"][0]["added_in_a_later_build"] = 1.into();
        assert_eq!(read(v.to_string().as_bytes()).unwrap(), p);
        v["objects"][0].as_object_mut().unwrap().remove("counts");
        assert!(matches!(
            read(v.to_string().as_bytes()),
            Err(ReportError::Json(_))
        ));
    }
}
