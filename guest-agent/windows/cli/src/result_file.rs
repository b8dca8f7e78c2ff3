//! The result file the host collects (docs/windows.md, "Result file").
//!
//! Plain text, UTF-8, `\n` line ends, so that any tool (and a person) can read it:
//!
//! ```text
//! hvprof-agent-result 1
//! module ntoskrnl.exe
//! process_id 0
//! base 0xfffff80012400000
//! size 0x1046000
//! bucket_shift 4
//! bucket_bytes 16
//! source 0 ProfileTime
//! interval 39063
//! duration_ms 10000
//! buckets 1066496
//! total 2211
//! nonzero 2
//! counts
//! 0x1a30 17
//! 0x1a40 2194
//! end
//! ```
//!
//! The header lines are `key value`, in this order; `counts` starts one line per nonzero
//! bucket, `OFFSET COUNT`, with `OFFSET` the bucket's first byte minus `base` (hex) in
//! ascending order; `end` closes the file (a file without it was cut short).

use std::fmt;
use std::io::{self, Write};

/// The first line.
pub const MAGIC: &str = "hvprof-agent-result 1";

/// What the counts describe.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Header {
    /// The module name, or `range`.
    pub module: String,
    /// 0: every process; else the profiled process.
    pub process_id: u32,
    /// First byte of the range.
    pub base: u64,
    /// Bytes of the range.
    pub size: u64,
    /// log2 of the bytes per counter.
    pub bucket_shift: u32,
    /// KPROFILE_SOURCE.
    pub source: u32,
    /// The source's interval during the run.
    pub interval: u32,
    /// Milliseconds profiled.
    pub duration_ms: u64,
}

/// A result file read back.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ResultFile {
    /// The header.
    pub header: Header,
    /// One counter per bucket.
    pub counts: Vec<u32>,
}

/// Writes the result file.
pub fn write<W: Write>(out: &mut W, h: &Header, counts: &[u32]) -> io::Result<()> {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let nonzero = counts.iter().filter(|&&c| c != 0).count();
    writeln!(out, "{}", MAGIC)?;
    // Names come from the kernel or the command line: keep the file one record per line.
    let module: String = h
        .module
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect();
    writeln!(out, "module {}", module)?;
    writeln!(out, "process_id {}", h.process_id)?;
    writeln!(out, "base {:#x}", h.base)?;
    writeln!(out, "size {:#x}", h.size)?;
    writeln!(out, "bucket_shift {}", h.bucket_shift)?;
    writeln!(out, "bucket_bytes {}", 1u64 << h.bucket_shift)?;
    writeln!(
        out,
        "source {} {}",
        h.source,
        crate::sources::name(h.source)
    )?;
    writeln!(out, "interval {}", h.interval)?;
    writeln!(out, "duration_ms {}", h.duration_ms)?;
    writeln!(out, "buckets {}", counts.len())?;
    writeln!(out, "total {}", total)?;
    writeln!(out, "nonzero {}", nonzero)?;
    writeln!(out, "counts")?;
    for (i, &c) in counts.iter().enumerate() {
        if c != 0 {
            writeln!(out, "{:#x} {}", (i as u64) << h.bucket_shift, c)?;
        }
    }
    writeln!(out, "end")
}

/// Why a result file could not be read.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub what: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ParseError {}

fn number(text: &str) -> Option<u64> {
    crate::number::parse_u64(text)
}

/// Reads a result file (the host side's reader; also pins the format in the tests).
pub fn parse(text: &str) -> Result<ResultFile, ParseError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let bad = |line: usize, what: &str| ParseError {
        line,
        what: what.to_string(),
    };
    match lines.next() {
        Some((_, l)) if l == MAGIC => {}
        _ => return Err(bad(1, "not an hvprof-agent result (version 1)")),
    }
    let mut field = |key: &str| -> Result<(usize, String), ParseError> {
        let (n, l) = lines
            .next()
            .ok_or_else(|| bad(0, "file ends in the header"))?;
        let value = l
            .strip_prefix(key)
            .and_then(|v| v.strip_prefix(' '))
            .ok_or_else(|| bad(n, &format!("expected '{} ...'", key)))?;
        Ok((n, value.to_string()))
    };
    let num = |(n, v): (usize, String)| number(&v).ok_or_else(|| bad(n, "not a number"));
    let small = |(n, v): (usize, String)| {
        number(&v)
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| bad(n, "not a 32-bit number"))
    };
    let module = field("module")?.1;
    let process_id = small(field("process_id")?)?;
    let base = num(field("base")?)?;
    let size = num(field("size")?)?;
    let bucket_shift = small(field("bucket_shift")?)?;
    if bucket_shift > 31 {
        return Err(bad(6, "bucket_shift above 31"));
    }
    let _bucket_bytes = field("bucket_bytes")?;
    let (n, source) = field("source")?;
    let source = small((n, source.split(' ').next().unwrap_or("").to_string()))?;
    let interval = small(field("interval")?)?;
    let duration_ms = num(field("duration_ms")?)?;
    let (n, buckets) = field("buckets")?;
    let buckets = number(&buckets)
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b <= 1 << 27)
        .ok_or_else(|| bad(n, "bad bucket count"))?;
    let _total = field("total")?;
    let _nonzero = field("nonzero")?;
    let (n, rest) = lines.next().ok_or_else(|| bad(0, "no counts"))?;
    if rest != "counts" {
        return Err(bad(n, "expected 'counts'"));
    }
    let mut counts = vec![0u32; buckets];
    let mut ended = false;
    for (n, l) in lines {
        if l == "end" {
            ended = true;
            break;
        }
        let (offset, count) = l
            .split_once(' ')
            .ok_or_else(|| bad(n, "expected OFFSET COUNT"))?;
        let offset = number(offset).ok_or_else(|| bad(n, "bad offset"))?;
        let count = number(count)
            .and_then(|c| u32::try_from(c).ok())
            .ok_or_else(|| bad(n, "bad count"))?;
        let slot = usize::try_from(offset >> bucket_shift)
            .ok()
            .and_then(|i| counts.get_mut(i))
            .ok_or_else(|| bad(n, "offset beyond the buckets"))?;
        *slot = count;
    }
    if !ended {
        return Err(bad(0, "no 'end' line: the file was cut short"));
    }
    Ok(ResultFile {
        header: Header {
            module,
            process_id,
            base,
            size,
            bucket_shift,
            source,
            interval,
            duration_ms,
        },
        counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            module: "ntoskrnl.exe".into(),
            process_id: 0,
            base: 0xFFFF_F800_1240_0000,
            size: 0x104_6000,
            bucket_shift: 4,
            source: 0,
            interval: 39063,
            duration_ms: 10_000,
        }
    }

    fn text(h: &Header, counts: &[u32]) -> String {
        let mut out = Vec::new();
        write(&mut out, h, counts).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_documented_example() {
        let mut counts = vec![0u32; 0x10_4600];
        counts[0x1a3] = 17;
        counts[0x1a4] = 2194;
        let t = text(&header(), &counts);
        let expected = "hvprof-agent-result 1\nmodule ntoskrnl.exe\nprocess_id 0\n\
            base 0xfffff80012400000\nsize 0x1046000\nbucket_shift 4\nbucket_bytes 16\n\
            source 0 ProfileTime\ninterval 39063\nduration_ms 10000\nbuckets 1066496\n\
            total 2211\nnonzero 2\ncounts\n0x1a30 17\n0x1a40 2194\nend\n";
        assert_eq!(t, expected);
        // The module docs show the same file.
        let doc: String = include_str!("result_file.rs")
            .lines()
            .skip_while(|l| !l.contains("```text"))
            .skip(1)
            .take_while(|l| !l.contains("```"))
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
            .collect();
        assert_eq!(doc, expected);
    }

    #[test]
    fn round_trip() {
        let h = Header {
            module: "app.exe".into(),
            process_id: 1234,
            source: 0x13,
            ..header()
        };
        let counts = vec![0, 5, 0, 0, u32::MAX, 1];
        let f = parse(&text(&h, &counts)).unwrap();
        assert_eq!(f.header, h);
        assert_eq!(f.counts, counts);
    }

    #[test]
    fn whitespace_in_names_is_replaced() {
        let h = Header {
            module: "my driver.sys".into(),
            ..header()
        };
        assert!(text(&h, &[1]).contains("\nmodule my_driver.sys\n"));
    }

    #[test]
    fn damaged_files_are_refused() {
        let good = text(&header(), &[0, 1, 2]);
        assert!(parse(&good).is_ok());
        let cut = good.trim_end_matches("end\n");
        assert!(parse(cut).unwrap_err().what.contains("cut short"));
        assert_eq!(parse("hello\n").unwrap_err().line, 1);
        let beyond = good.replace("0x20 2", "0x40 2");
        assert!(parse(&beyond).unwrap_err().what.contains("beyond"));
        let swapped = good.replace("process_id 0\n", "");
        assert!(parse(&swapped).unwrap_err().what.contains("process_id"));
    }
}
