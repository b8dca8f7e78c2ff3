//! profile.json: the [`Profile`] as JSON (schema: docs/profile-json.md and
//! docs/profile.schema.json).

use std::io::{Read, Write};

use super::profile::{Profile, FORMAT_NAME, FORMAT_VERSION};
use super::ReportError;

/// Writes `profile` as one line of JSON and a newline (compact: `jq .` pretty-prints it).
pub fn write(profile: &Profile, mut w: impl Write) -> Result<(), ReportError> {
    serde_json::to_writer(&mut w, profile).map_err(ReportError::Json)?;
    w.write_all(b"\n").map_err(ReportError::Io)?;
    Ok(())
}

/// Reads a profile.json, checking its format name and version first so that a file of
/// another version gets a clear error rather than a field-by-field complaint.
pub fn read(mut r: impl Read) -> Result<Profile, ReportError> {
    let mut text = String::new();
    r.read_to_string(&mut text).map_err(ReportError::Io)?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(ReportError::Json)?;
    let format = value.get("format").and_then(|v| v.as_str());
    if format != Some(FORMAT_NAME) {
        return Err(ReportError::NotAProfile);
    }
    let version = value.get("format_version").and_then(|v| v.as_u64());
    if version != Some(u64::from(FORMAT_VERSION)) {
        return Err(ReportError::Version {
            found: version.unwrap_or(0),
            supported: FORMAT_VERSION,
        });
    }
    serde_json::from_value(value).map_err(ReportError::Json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::profile::tests::sample_profile;
    use crate::report::symbols::tests::module;
    use crate::report::Symbols;

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
        assert!(text.contains(r#""counts":[[2,5],[7,9],[9,1]]"#), "{text}");
        assert!(text.contains(r#""base":"0x1000""#), "{text}");
        assert!(text.contains(r#""process":"0x12345000""#), "{text}");
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn other_formats_and_versions_are_refused() {
        assert!(matches!(read(&b"{}"[..]), Err(ReportError::NotAProfile)));
        let p = sample_profile(0x1000);
        let mut v = serde_json::to_value(&p).unwrap();
        v["format_version"] = 99.into();
        let text = v.to_string();
        assert!(matches!(
            read(text.as_bytes()),
            Err(ReportError::Version {
                found: 99,
                supported: 1
            })
        ));
        assert!(matches!(read(&b"not json"[..]), Err(ReportError::Json(_))));
    }

    /// The keys hvprof writes for each kind of object are exactly the ones the JSON Schema
    /// requires (so the schema and the serde types cannot drift apart unnoticed).
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
