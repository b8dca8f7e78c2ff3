//! Error messages that say each thing once (issue 40, item 13). hvprof prints an error with
//! its causes, `hvprof: error: what: why: deeper why`; an error whose own message also quotes
//! its cause made the line say that cause twice ("nope: cannot open nope: cannot open nope:
//! ..."). [`said_twice`] finds such lines; the harness applies it to every `hvprof: error: `
//! line a test asserts ([`crate::harness::Output::assert_error_line`]), so every failure the
//! fault-injection suite and tests/failures.rs produce is checked, and the tests below pin the
//! cases that repeated themselves.

use crate::harness::{fixture, hvprof, status, Fixture, TempDir, ERROR_PREFIX};

/// The parts of an `hvprof: error: ` line (split at `": "`, where one cause follows another)
/// that the line says more than once.
pub fn said_twice(line: &str) -> Vec<String> {
    let message = line.strip_prefix(ERROR_PREFIX).unwrap_or(line);
    let parts: Vec<&str> = message.split(": ").map(str::trim).collect();
    let mut twice: Vec<String> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if !p.is_empty() && parts[i + 1..].contains(p) && !twice.iter().any(|t| t == p) {
            twice.push(p.to_string());
        }
    }
    twice
}

/// Fails when `line` says a part twice.
pub fn assert_said_once(line: &str) {
    let twice = said_twice(line);
    assert!(
        twice.is_empty(),
        "the error line says {twice:?} more than once:\n{line}"
    );
}

#[test]
fn said_twice_finds_a_cause_quoted_by_its_error() {
    let repeats = [
        "hvprof: error: nope: cannot open nope: cannot open nope: No such file or directory (os error 2)",
        "hvprof: error: rnd: not a PDB, an ELF file or BTF: not a PDB, an ELF file or BTF",
        "hvprof: error: k: ELF: Unknown file magic: ELF: Unknown file magic",
    ];
    for line in repeats {
        assert!(!said_twice(line).is_empty(), "{line}");
    }
    let once = [
        "hvprof: error: --kernel: cannot open nope: No such file or directory (os error 2)",
        "hvprof: error: cannot read the guest kernel's types: cannot open nope: No such file or directory (os error 2)",
        "hvprof: error: a.json: profile 2 is the same run as profile 1",
    ];
    for line in once {
        assert_eq!(said_twice(line), Vec::<String>::new(), "{line}");
    }
}

/// `profile --guest-types FILE` (and `--guest-os linux --kernel FILE`) with a file that gives
/// no layout: the error named the file and quoted its cause, and the chain said both again.
#[test]
fn guest_types_errors_said_their_cause_twice() {
    let dir = TempDir::new("messages");
    let missing = dir.join("no-such-types");
    let random = dir.write("random.bin", &[0x5a; 4096]);
    let empty = dir.write("empty.bin", b"");
    let folder = dir.join("folder");
    std::fs::create_dir(&folder).unwrap();
    // An ELF file without BTF or DWARF: a fixture kernel.
    let elf = fixture(Fixture::Pvh32);
    let out = dir.join("out");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--guest-types", missing.to_str().unwrap()],
            "No such file",
        ),
        (vec!["--guest-types", random.to_str().unwrap()], "not a PDB"),
        (vec!["--guest-types", empty.to_str().unwrap()], "not a PDB"),
        (vec!["--guest-types", folder.to_str().unwrap()], "directory"),
        (vec!["--guest-types", elf.to_str().unwrap()], "neither"),
        (
            vec!["--guest-os", "linux", "--kernel", elf.to_str().unwrap()],
            "neither",
        ),
    ];
    for (args, why) in cases {
        let mut all = vec!["profile", "--out", out.to_str().unwrap(), "--quiet"];
        all.extend(args);
        let run = hvprof(all).run();
        run.assert_status(status::USAGE);
        // assert_error_line checks the line with assert_said_once.
        run.assert_error_line(&[why]);
    }
}

/// `merge P P -o M`: "P is P given again (the same file)" named one path as its own copy.
#[test]
fn merge_of_one_path_given_twice_named_it_as_its_own_copy() {
    let dir = TempDir::new("messages");
    // Refused before it is read: any regular file will do.
    let p = dir.write("profile.json", b"{}");
    let merged = dir.join("merged.json");
    let run = hvprof([
        "merge",
        p.to_str().unwrap(),
        p.to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
    ])
    .run();
    run.assert_status(status::USAGE);
    let line = run.assert_error_line(&["given twice"]);
    assert_eq!(line.matches(p.to_str().unwrap()).count(), 1, "{line}");
    assert!(!merged.exists());
}
