//! flamegraph.svg through inferno.
//!
//! The samples carry no call stacks (a profile object counts program counters only), so each
//! nonzero bucket becomes one folded stack four frames deep:
//!
//! ```text
//! object 1 (all processes);refguest;shares_f4;shares_f4+0x10 1234
//! ```
//!
//! object (id and scope) → module → function → bucket (`function+offset` of its start). The
//! object frame keeps overlapping objects (a global and a per-process profile of the same
//! code) side by side rather than adding their counts together; the widths under it are the
//! module and function shares of report.txt, and the top row shows which buckets inside a
//! function are hot. Addresses outside every module sit under `[unknown]`; without a symbol
//! the function frame is `module+0xrva` of the bucket.

use std::io::Write;

use super::profile::Profile;
use super::symbols::Symbols;
use super::ReportError;

/// The folded stacks of `profile`, one line per nonzero bucket.
pub fn folded(profile: &Profile, symbols: &Symbols) -> Vec<String> {
    let clean = |s: &str| s.replace(';', ":");
    let mut lines = Vec::new();
    for o in &profile.objects {
        let root = format!("object {} ({})", o.id, o.scope());
        for b in o.nonzero() {
            let (module, function, bucket) = match symbols.resolve(b.start) {
                Some(hit) => (hit.module.name.clone(), hit.function(), hit.describe()),
                None => (
                    "[unknown]".to_string(),
                    format!("{:#x}", b.start),
                    format!("{:#x}", b.start),
                ),
            };
            // `module!function+0x10` -> `function+0x10`: the module is the frame below.
            let bucket = bucket
                .split_once('!')
                .map_or(bucket.clone(), |(_, f)| f.to_string());
            lines.push(format!(
                "{};{};{};{} {}",
                clean(&root),
                clean(&module),
                clean(&function),
                clean(&bucket),
                b.count
            ));
        }
    }
    lines
}

/// Writes `profile` as a flame graph SVG. A profile without samples gives inferno's
/// "no valid input" picture.
pub fn write(profile: &Profile, symbols: &Symbols, w: impl Write) -> Result<(), ReportError> {
    let lines = folded(profile, symbols);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = format!("hvprof: {} {}", profile.run.kernel, profile.run.cmdline);
    opts.count_name = "samples".to_string();
    opts.name_type = "Bucket:".to_string();
    match inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w) {
        Ok(()) => Ok(()),
        Err(e) if lines.is_empty() && e.kind() == std::io::ErrorKind::InvalidData => Ok(()),
        Err(e) => Err(ReportError::Io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::symbols::tests::module;

    #[test]
    fn stacks_are_object_module_function_bucket() {
        let p = sample_profile(0x1000);
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        let f = folded(&p, &symbols);
        assert_eq!(
            f,
            vec![
                "object 1 (process 0x12345000);m;m+0x20;m+0x20 5",
                "object 1 (process 0x12345000);m;hot;hot 9",
                "object 1 (process 0x12345000);m;hot;hot+0x20 1",
            ]
        );
        let none = folded(&p, &Symbols::default());
        assert_eq!(
            none[0],
            "object 1 (process 0x12345000);[unknown];0x1020;0x1020 5"
        );
    }

    #[test]
    fn the_svg_names_the_functions() {
        let p = sample_profile(0x1000);
        let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, "hot")]));
        let mut svg = Vec::new();
        write(&p, &symbols, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("hot"));
        let mut empty = p.clone();
        empty.objects.clear();
        let mut svg = Vec::new();
        write(&empty, &symbols, &mut svg).unwrap();
        assert!(String::from_utf8(svg).unwrap().contains("<svg"));
    }
}
