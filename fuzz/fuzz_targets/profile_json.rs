//! profile.json as `hvprof report`, `compare` and `merge` read it (user input, possibly
//! written by a hostile guest's run or edited by hand). Reading must never panic: a file that
//! cannot be read is an error. Whatever reads passes the consistency check, and then every
//! output of it (report.txt, flamegraph.svg, pprof, a comparison with itself, a merge with a
//! second run of itself) is made without panicking or overflowing, and what hvprof writes
//! from it, it reads back. It uses the report crate alone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use report::compare::{compare_profiles, junit, markdown, merge_profiles, Scope, TestOptions};
use report::{flame, json, pprof, text, validate, Symbols};

/// Writes `p` as profile.json and reads it back: it must read.
fn round_trip(p: &report::Profile) {
    let mut buf = Vec::new();
    json::write(p, &mut buf).expect("writing to memory");
    if let Err(e) = json::read(&buf[..]) {
        panic!("hvprof cannot read what it wrote: {e:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(p) = json::read(data) else {
        return;
    };
    validate::check(&p).expect("read profiles are consistent");
    let none = Symbols::default();
    let _ = text::render(&p, &none, 5);
    let _ = flame::write(&p, &none, std::io::sink());
    let _ = flame::write_diff((&p, &none), (&p, &none), std::io::sink());
    let _ = pprof::write(&p, &none, std::io::sink());
    round_trip(&p);
    let opts = TestOptions {
        min_samples: 1,
        ..TestOptions::default()
    };
    let (objects, _) = compare_profiles(&p, &p, &opts, Scope::All, [&none, &none]);
    for o in &objects {
        let _ = markdown("fuzz", &o.functions, &opts, 5);
        let _ = markdown("fuzz", &o.processes, &opts, 5);
        let _ = junit("fuzz", &o.functions, &[]);
    }
    let mut second = p.clone();
    second.run.start_time.push('x');
    if let Ok(m) = merge_profiles(vec![p, second]) {
        validate::check(&m).expect("a merge is consistent");
        round_trip(&m);
    }
});
