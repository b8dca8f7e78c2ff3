//! The guest side of `hvprof bench`: the reference guest's `scenario=bench` under `hvprof run`.
//! It times an empty RDTSC pair, a bare port-I/O exit and a QUERY_INTERVAL hypercall at CPL0,
//! prints the medians on one line, starts a profile over its CPL3 spin loop and spins on every
//! vCPU until stopped. This test reads the two lines `hvprof bench` parses, checks what must
//! hold of the numbers, and stops the run with SIGTERM.

use std::path::Path;
use std::time::Duration;

use crate::harness::{hvprof_run, status, Output};

const HYPERCALL_LINE: &str = "refguest: bench hypercall ";
const STARTED_LINE: &str = "refguest: bench profile started";

/// Boot plus 3 x 2000 emulated-CPL0 samples take about half a second here.
const WITHIN: Duration = Duration::from_secs(30);

/// The value of `key=<u64>` in `line`.
fn field(line: &str, key: &str) -> u64 {
    let word = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|w| w.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"));
    word.parse()
        .unwrap_or_else(|e| panic!("{key}={word} is not a u64 ({e}) in {line:?}"))
}

/// Runs the reference guest with `args` until its bench profile has started and its
/// spinners have run a little, then stops it: the guest never ends on its own, so only the
/// signal does (status 10; a guest that ended first would have another status).
fn spin_then_stop(args: &[&str]) -> Output {
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let mut run = hvprof_run(elf, args).limit(Duration::from_secs(60)).spawn();
    run.wait_for_stdout(STARTED_LINE, WITHIN);
    std::thread::sleep(Duration::from_millis(300));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_status(status::SIGNALLED);
    out.assert_stdout_lacks("refguest: FAIL");
    out.assert_stdout_lacks("refguest: PASS");
    out
}

#[test]
fn bench_scenario_reports_hypercall_timings_then_spins_until_stopped() {
    let out = spin_then_stop(&["--cpus", "2", "--cmdline", "scenario=bench"]);

    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with(HYPERCALL_LINE))
        .collect();
    assert_eq!(lines.len(), 1, "one {HYPERCALL_LINE:?} line\n{out}");
    let line = lines[0];
    let keys: Vec<&str> = line[HYPERCALL_LINE.len()..]
        .split_whitespace()
        .map(|w| w.split('=').next().unwrap_or(""))
        .collect();
    assert_eq!(
        keys,
        [
            "empty_cycles",
            "io_cycles",
            "hypercall_cycles",
            "tsc_khz",
            "n"
        ],
        "{line}"
    );
    let (empty, io, hypercall) = (
        field(line, "empty_cycles"),
        field(line, "io_cycles"),
        field(line, "hypercall_cycles"),
    );
    let (tsc_khz, n) = (field(line, "tsc_khz"), field(line, "n"));
    assert!(empty > 0, "{line}");
    // Each OUT is a VM exit on top of the measurement's own overhead. (Whether the hypercall
    // costs more than the bare exit depends on the host: here the exit dominates both.)
    assert!(io > empty, "io_cycles must exceed empty_cycles: {line}");
    assert!(
        hypercall > empty,
        "hypercall_cycles must exceed empty_cycles: {line}"
    );
    assert_eq!(n, 2000, "the default bench.n: {line}");
    // The same calibration the guest reports on its timer line.
    let timer = out
        .stdout_field("refguest: timer ")
        .unwrap_or_else(|| panic!("no timer line\n{out}"));
    assert_eq!(field(timer, "tsc_khz"), tsc_khz, "{timer} vs {line}");
    assert!(tsc_khz > 100_000, "{line}");

    // The hypercall line comes before the profile starts, and the spin loop lies in the profile.
    let at = |needle: &str| out.stdout.find(needle).expect("seen above");
    assert!(at(HYPERCALL_LINE) < at(STARTED_LINE), "{out}");
    let profile = out
        .stdout_field("refguest: bench profile base=")
        .unwrap_or_else(|| panic!("no profile line\n{out}"));
    assert!(profile.contains(" bucket=4 "), "{profile}");
    assert!(profile.contains(" interval=10000000 "), "{profile}");
}

/// `bench.pe=1`: the guest maps the PE image `hvprof bench` generates (here written by the
/// test from the same library function) and spins in it, 16 frames deep, until stopped.
#[test]
fn bench_scenario_spins_in_the_generated_pe_image() {
    let dir = crate::harness::TempDir::new("bench-pe");
    let module = dir.write("deep.exe", &bench::pe::deep_module());
    let out = spin_then_stop(&[
        "--initrd",
        module.to_str().unwrap(),
        "--cmdline",
        "scenario=bench bench.pe=1",
    ]);
    out.assert_stdout_lacks("user fault");
    let base = out.stdout_hex("refguest: bench pe base=");
    assert_eq!(base, bench::pe::IMAGE_BASE, "{out}");
}
