//! The subcommands that work on saved profiles, and the benchmark.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use files::atomic;
use report::ReportError;

use report::compare::{
    compare_profiles, junit, markdown, merge_profiles, run_differences, ObjectComparison, Scope,
    TestOptions,
};
use report::sanitize::{markdown_code, terminal};
use vmm::outcome::{STATUS_CONFIG_ERROR, STATUS_HOST_ERROR};

use super::args::{BenchArgs, CompareArgs, EventsArgs, MergeArgs, ReportArgs, ScopeArg};
use super::stdout::{errln, out, outln};
use super::{fail, fail_write, results_filter, symbols};

/// `hvprof report`. With `--annotate` the symbol path is searched for the images of the
/// modules found in guest memory too: their code is what the listing disassembles.
pub fn report(a: &ReportArgs) -> ExitCode {
    if let Err(code) = results_filter(a.filter.seccomp.into()) {
        return code;
    }
    // A bad --out or --perf-script fails before anything is read or symbolized, and so
    // does an output that is one of the inputs.
    if let Some(dir) = &a.out {
        if let Err(e) = atomic::check_names(dir, &report::OUTPUT_NAMES) {
            return fail(e, STATUS_CONFIG_ERROR);
        }
    }
    for file in [&a.perf_script, &a.fxprof].into_iter().flatten() {
        if let Err(e) = atomic::check_file(file) {
            return fail(e, STATUS_CONFIG_ERROR);
        }
    }
    let outputs = set_in(a.out.as_deref())
        .into_iter()
        .chain(a.perf_script.iter().chain(&a.fxprof).cloned());
    if let Err(e) = distinct(&profile_inputs([&a.profile], &a.symbols), outputs) {
        return fail(e, STATUS_CONFIG_ERROR);
    }
    let mut finder = match symbols::finder(&a.symbol_path, false) {
        Ok(f) => f.map(|f| f.with_images(a.annotate)),
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    let files = match symbols::guest_files(&a.symbol_path) {
        Ok(f) => f,
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    let mut read = || -> Result<_, report::ReportError> {
        let profile = report::read_profile(&a.profile)?;
        let symbols = vmm::report_input::saved_profile_symbols(
            &profile,
            &a.symbols,
            finder.as_mut(),
            &files,
        )?;
        Ok((profile, symbols))
    };
    let (profile, symbols) = match read() {
        Ok(r) => r,
        Err(e) => return fail(e, STATUS_CONFIG_ERROR),
    };
    symbols::report_gaps(&symbols);
    let timeline_asked = a.timeline || a.perf_script.is_some() || a.fxprof.is_some();
    if timeline_asked && profile.timelines.is_empty() {
        return fail(
            report::time_axis::window::WindowError::NoTimeline,
            STATUS_CONFIG_ERROR,
        );
    }
    // What the timeline outputs read: with --object, the profile with that timeline alone
    // (--out and the tables keep every timeline).
    let picked;
    let timelines = match a.object {
        Some(_) if !timeline_asked => {
            return fail(
                anyhow::anyhow!(
                    "--object picks a timeline: give it with --timeline, --perf-script or --fxprof"
                ),
                STATUS_CONFIG_ERROR,
            );
        }
        Some(object) => {
            let mut p = profile.clone();
            if let Err(e) = report::time_axis::keep_only(&mut p, object) {
                return fail(e, STATUS_CONFIG_ERROR);
            }
            picked = p;
            &picked
        }
        None => &profile,
    };
    if let Some(dir) = &a.out {
        // --out was writable a moment ago: a failure now is the host's (a full file system).
        match report::write_all(dir, &profile, &symbols) {
            Ok(files) => {
                for path in files.all() {
                    errln!("hvprof: wrote {}", path.display());
                }
            }
            Err(e) => return fail_write(e),
        }
    }
    if let Some(file) = &a.perf_script {
        let tracks = if a.per_vcpu {
            report::time_axis::perf::Tracks::Vcpus
        } else {
            report::time_axis::perf::Tracks::Threads
        };
        let written = report::write_file(file, |w| {
            report::time_axis::perf::write(timelines, &symbols, tracks, w)
        });
        if let Err(code) = said(written) {
            return code;
        }
    }
    if let Some(file) = &a.fxprof {
        let written = report::write_file(file, |w| {
            report::time_axis::fxprof::write(timelines, &symbols, w)
        });
        if let Err(code) = said(written) {
            return code;
        }
    }
    if a.timeline {
        let bins = match a.bin {
            Some(s) => report::time_axis::text::Bins::Seconds(s),
            None => report::time_axis::text::Bins::Phases,
        };
        let limit = report::time_axis::EXPORT_LIMIT;
        match report::time_axis::text::render_within(timelines, &symbols, bins, a.top, limit) {
            Ok(text) => out!("{text}"),
            Err(e) => return fail(e, STATUS_CONFIG_ERROR),
        }
        return ExitCode::SUCCESS;
    }
    let mut out = report::text::render(&profile, &symbols, a.top);
    if a.annotate {
        // The functions inlined in what the listing shows, from each module's file on the
        // host (a --symbols image; not a guest file found in an archive or an image).
        let mut symbols = symbols;
        let read = |m: &report::symbols::Module| {
            let path = m.path.as_deref().filter(|p| p.is_file())?;
            files::bounded::read(path, files::bounded::SYMBOLS).ok()
        };
        report::annotate::add_inlines(&profile, &mut symbols, a.top, &read);
        out.push_str(&report::annotate::render(&profile, &symbols, a.top));
    }
    out!("{out}");
    ExitCode::SUCCESS
}

/// A file `report` wrote (named on stderr), or the exit of a failure to ([`fail_write`]).
fn said(written: Result<std::path::PathBuf, ReportError>) -> Result<(), ExitCode> {
    match written {
        Ok(path) => {
            errln!("hvprof: wrote {}", path.display());
            Ok(())
        }
        Err(e) => Err(fail_write(e)),
    }
}

/// Every file of the set `write_all` writes into `dir`, if given.
fn set_in(dir: Option<&Path>) -> Vec<PathBuf> {
    dir.map(|d| report::OUTPUT_NAMES.iter().map(|n| d.join(n)).collect())
        .unwrap_or_default()
}

/// What commands that read saved profiles read: each profile.json, the timeline beside it
/// and the `--symbols` files.
fn profile_inputs<'a>(
    profiles: impl IntoIterator<Item = &'a PathBuf>,
    symbols: &[report::SymbolSpec],
) -> Vec<PathBuf> {
    let mut inputs = Vec::new();
    for p in profiles {
        inputs.push(p.clone());
        inputs.push(report::time_axis::file::path_beside(p));
    }
    inputs.extend(symbols.iter().map(|s| s.path.clone()));
    inputs
}

/// Refuses an output that is one of the inputs (the same device and inode, whatever the
/// path): writing it would destroy what is being read.
fn distinct(
    inputs: &[PathBuf],
    outputs: impl IntoIterator<Item = PathBuf>,
) -> Result<(), files::identity::OutputIsInput> {
    let outputs: Vec<PathBuf> = outputs.into_iter().collect();
    files::identity::distinct_outputs(
        inputs.iter().map(PathBuf::as_path),
        outputs.iter().map(PathBuf::as_path),
    )
}

/// Proves every output of `compare` writable before any work: `--markdown` and `--junit`
/// files, the `--out` directory (created); and none of them an input.
fn check_compare_outputs(a: &CompareArgs) -> anyhow::Result<()> {
    for file in [&a.markdown, &a.junit].into_iter().flatten() {
        atomic::check_file(file)?;
    }
    let svg = a.out.as_ref().map(|dir| dir.join("diff-flamegraph.svg"));
    if let Some(dir) = &a.out {
        atomic::check_names(dir, &["diff-flamegraph.svg"])?;
    }
    let outputs = [&a.markdown, &a.junit, &svg].into_iter().flatten().cloned();
    distinct(&profile_inputs([&a.base, &a.new], &a.symbols), outputs)?;
    Ok(())
}

/// `hvprof compare`: exit status 1 on a significant regression.
pub fn compare(a: &CompareArgs) -> ExitCode {
    if let Err(code) = results_filter(a.filter.seccomp.into()) {
        return code;
    }
    if let Err(e) = check_compare_outputs(a) {
        return fail(e, STATUS_CONFIG_ERROR);
    }
    let (mut base, mut new) = match (report::read_profile(&a.base), report::read_profile(&a.new)) {
        (Ok(b), Ok(n)) => (b, n),
        (Err(e), _) | (_, Err(e)) => return fail(e, STATUS_CONFIG_ERROR),
    };
    let opts = TestOptions {
        threshold: a.threshold,
        alpha: a.alpha,
        min_samples: a.min_samples,
        min_points: a.min_points,
    };
    let scope = match a.scope {
        ScopeArg::Guest => Scope::Guest,
        ScopeArg::Host => Scope::Host,
        ScopeArg::All => Scope::All,
    };
    let mut finder = match symbols::finder(&a.symbol_path, false) {
        Ok(f) => f,
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    // Stack frames are named with the built-in guest's kernel when a profile ran it, with
    // the --symbols images (a kernel file: the path a profile records is never opened) and
    // with a symbol path, the guest modules' PDBs; anything else by address.
    let files = match symbols::guest_files(&a.symbol_path) {
        Ok(f) => f,
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    let mut symbols_of = |p: &report::Profile| {
        vmm::report_input::saved_profile_symbols(p, &a.symbols, finder.as_mut(), &files)
    };
    let symbols = match (symbols_of(&base), symbols_of(&new)) {
        (Ok(b), Ok(n)) => [b, n],
        (Err(e), _) | (_, Err(e)) => return fail(e, STATUS_CONFIG_ERROR),
    };
    // The finder records each PDB once: the new profile's symbols list all of them.
    symbols::report_missing(&symbols[1]);
    symbols.iter().for_each(symbols::report_file_gaps);
    // With a symbol path, both profiles' functions are counted afresh with what it found
    // (their kernels and guest modules; images a profile was symbolized with by --symbols
    // are not in these symbols: `hvprof report --out` keeps them).
    if finder.is_some() {
        for (p, s) in [(&mut base, &symbols[0]), (&mut new, &symbols[1])] {
            if !s.modules().is_empty() && !p.symbolized_with(s) {
                p.symbolize(s);
            }
        }
    }
    // A window: both runs' host profiles rebuilt from their timelines' samples inside it,
    // named again with the symbols at hand.
    let mut title = format!("{} vs {}", a.base.display(), a.new.display());
    if let Some(window) = a.window() {
        for (p, s, path) in [
            (&mut base, &symbols[0], &a.base),
            (&mut new, &symbols[1], &a.new),
        ] {
            let windowed = report::time_axis::window::resolve(p, &window)
                .and_then(|(from, to)| report::time_axis::window::restrict(p, from, to));
            match windowed {
                Ok(mut w) => {
                    if !s.modules().is_empty() {
                        w.symbolize(s);
                    }
                    *p = w;
                }
                Err(e) => {
                    let e = anyhow::Error::new(e).context(path.display().to_string());
                    return fail(e, STATUS_CONFIG_ERROR);
                }
            }
        }
        title.push_str(&match window {
            report::time_axis::window::Window::Phase(name) => format!(", phase {name}"),
            report::time_axis::window::Window::Seconds { from, to } => match to {
                Some(to) => format!(", {from} s to {to} s"),
                None => format!(", from {from} s"),
            },
        });
    }
    let (objects, unmatched) =
        compare_profiles(&base, &new, &opts, scope, [&symbols[0], &symbols[1]]);
    if objects.is_empty() {
        return fail(
            anyhow::anyhow!("the profiles have no object of that scope in common"),
            STATUS_CONFIG_ERROR,
        );
    }
    // Comparing other kernels or configurations is allowed (a new kernel build is the point
    // of a regression run), but said on stderr, in the Markdown and in the JUnit file.
    let warnings: Vec<String> = run_differences(&base.run, &new.run)
        .into_iter()
        .map(|(field, b, n)| {
            format!("the profiles are of different runs: {field} is {n:?} in the new profile, {b:?} in the base")
        })
        .collect();
    let mut md = String::new();
    for w in &warnings {
        errln!("hvprof: warning: {}", terminal(w));
        md.push_str(&format!(
            "> **Warning:** {}\n\n",
            terminal(w).replace('\n', " ")
        ));
    }
    let mut xml_rows = Vec::new();
    for o in &objects {
        md.push_str(&markdown(
            &format!("{title}, {}", o.label),
            &o.functions,
            &opts,
            20,
        ));
        let grown: Vec<_> = o.stacks.iter().filter(|s| s.regression).take(10).collect();
        if !o.stacks.is_empty() {
            md.push_str(&format!(
                "\nCall stacks tested: {} (alpha split evenly with the functions); {} grew \
                 significantly{}\n",
                o.stacks.iter().filter(|s| s.tested).count(),
                o.stacks.iter().filter(|s| s.regression).count(),
                if grown.is_empty() { "." } else { ":\n" }
            ));
            for s in grown {
                md.push_str(&format!(
                    "- {}: {:.2}% -> {:.2}% of samples ({:+.1}%)\n",
                    markdown_code(&s.name),
                    s.base_share,
                    s.new_share,
                    s.relative
                ));
            }
        }
        md.push_str(&processes_markdown(&title, o, &opts));
        let moved: Vec<_> = o.buckets.iter().filter(|b| b.regression).take(10).collect();
        if !moved.is_empty() {
            md.push_str("\nBuckets whose share grew significantly:\n\n");
            for b in moved {
                md.push_str(&format!(
                    "- {}: {} -> {} samples ({:+.1}%)\n",
                    markdown_code(&b.name),
                    b.base,
                    b.new,
                    b.relative
                ));
            }
        }
        md.push('\n');
        xml_rows.extend(o.functions.iter().cloned().map(|mut c| {
            c.name = format!("{}: {}", o.label, c.name);
            c
        }));
        xml_rows.extend(o.processes.iter().cloned().map(|mut c| {
            c.name = format!("{}: process {}", o.label, c.name);
            c
        }));
    }
    for u in &unmatched {
        md.push_str(&format!("_{u} is only in the base profile._\n"));
    }
    out!("{}", terminal(&md));
    // Every file is written beside its final name before any is put in place: a failure
    // (a full file system) leaves all of them as they were.
    let staged = || -> Result<Vec<atomic::Staged>, report::ReportError> {
        let text = |path: &std::path::Path, text: &str| {
            report::stage_file(path.to_path_buf(), atomic::Naming::Named, |w| {
                w.write_all(text.as_bytes()).map_err(ReportError::Io)
            })
        };
        let mut staged = Vec::new();
        if let Some(p) = &a.markdown {
            staged.push(text(p, &md)?);
        }
        if let Some(p) = &a.junit {
            staged.push(text(p, &junit("hvprof compare", &xml_rows, &warnings))?);
        }
        if let Some(dir) = &a.out {
            let path = dir.join("diff-flamegraph.svg");
            staged.push(report::stage_file(path, atomic::Naming::InDir, |w| {
                report::flame::write_diff((&base, &symbols[0]), (&new, &symbols[1]), w)
            })?);
        }
        Ok(staged)
    };
    let written = staged().and_then(|s| Ok(atomic::commit_all(s)?));
    match written {
        Ok(paths) => {
            for p in paths.iter().filter(|p| p.ends_with("diff-flamegraph.svg")) {
                errln!("hvprof: wrote {}", p.display());
            }
        }
        // The outputs were checked before: a failure now is the host's.
        Err(e) => return fail_write(e),
    }
    let regressions: usize = objects.iter().map(|o| o.regressions()).sum();
    if regressions > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The per-process part of one object's comparison: a table of the processes matched by
/// name, or which side did not record them (a profile older than format 4).
fn processes_markdown(title: &str, o: &ObjectComparison, opts: &TestOptions) -> String {
    match o.processes_recorded {
        [true, true] => {
            format!(
                "\n{}",
                markdown(
                    &format!("{title}, {}, processes by name", o.label),
                    &o.processes,
                    opts,
                    20
                )
            )
        }
        [false, false] => String::new(),
        [base, _] => format!(
            "\nProcesses: not recorded in the {} profile; functions compared without them.\n",
            if base { "new" } else { "base" }
        ),
    }
}

/// `hvprof merge`.
pub fn merge(a: &MergeArgs) -> ExitCode {
    if let Err(code) = results_filter(a.filter.seccomp.into()) {
        return code;
    }
    if let Err(e) = atomic::check_file(&a.out) {
        return fail(e, STATUS_CONFIG_ERROR);
    }
    if let Err(e) = distinct_files(&a.profiles) {
        return fail(e, STATUS_CONFIG_ERROR);
    }
    let inputs = profile_inputs(&a.profiles, &[]);
    if let Err(e) = distinct(&inputs, [a.out.clone()]) {
        return fail(e, STATUS_CONFIG_ERROR);
    }
    let mut profiles = Vec::new();
    for p in &a.profiles {
        match report::read_profile(p) {
            Ok(x) => profiles.push(x),
            Err(e) => return fail(e, STATUS_CONFIG_ERROR),
        }
    }
    let merged = match merge_profiles(profiles) {
        Ok(m) => m,
        Err(e) => {
            let path = e.profile().and_then(|n| a.profiles.get(n - 1));
            let e = match path {
                Some(p) => anyhow::Error::new(e).context(p.display().to_string()),
                None => anyhow::Error::new(e),
            };
            return fail(e, STATUS_CONFIG_ERROR);
        }
    };
    // A merged profile has no timeline: one an earlier profile left beside the output
    // would be read as this one's.
    let written = report::write_file(&a.out, |w| report::json::write(&merged, w)).and_then(|p| {
        match std::fs::symlink_metadata(&p) {
            // Written through a device or a FIFO: nothing beside it is this profile's.
            Ok(m) if !m.is_file() => Ok(p),
            _ => report::remove_timeline_beside(&p, &[]).map(|()| p),
        }
    });
    match written {
        Ok(_) => {
            errln!(
                "hvprof: merged {} profiles into {}",
                a.profiles.len(),
                a.out.display()
            );
            ExitCode::SUCCESS
        }
        // --out was checked before: a failure now is the host's.
        Err(e) => fail_write(e),
    }
}

/// Refuses a file given twice to `merge` (the same device and inode, whatever the path):
/// it would count one run as two.
fn distinct_files(paths: &[std::path::PathBuf]) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut seen: Vec<((u64, u64), &std::path::Path)> = Vec::new();
    for p in paths {
        // An unreadable file is reported by the read that follows.
        let Ok(m) = std::fs::metadata(p) else {
            continue;
        };
        let id = (m.dev(), m.ino());
        if let Some((_, first)) = seen.iter().find(|(i, _)| *i == id) {
            if first == p {
                anyhow::bail!(
                    "{} is given twice (the same file): each run may be merged once",
                    p.display()
                );
            }
            anyhow::bail!(
                "{} is {} given again (the same file): each run may be merged once",
                p.display(),
                first.display()
            );
        }
        seen.push((id, p));
    }
    Ok(())
}

/// `hvprof bench --disk`.
fn bench_disk(a: &BenchArgs) -> ExitCode {
    match bench::disk::run(&bench::disk::DiskBenchOptions::default()) {
        Ok(r) if a.json => {
            outln!("{}", r.to_json());
            ExitCode::SUCCESS
        }
        Ok(r) => {
            outln!(
                "sequential 4 KiB reads: {:>7.0} ns qcow2 vs {:>7.0} ns raw (median of {} rounds of {} reads)",
                r.seq_qcow2_ns, r.seq_raw_ns, r.rounds, r.reads
            );
            outln!(
                "seq_ratio       {:>9.3}   (qcow2 throughput / raw; target >= 0.8)",
                r.seq_ratio
            );
            outln!(
                "random 4 KiB reads:     {:>7.0} ns qcow2 vs {:>7.0} ns raw",
                r.rand_qcow2_ns,
                r.rand_raw_ns
            );
            outln!(
                "rand_ratio      {:>9.3}   (qcow2 throughput / raw)",
                r.rand_ratio
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e, STATUS_HOST_ERROR),
    }
}

/// `hvprof bench --peer`.
fn bench_peer(a: &BenchArgs) -> ExitCode {
    let opts = bench::peer::PeerOptions {
        rate_hz: a.rate,
        work: std::time::Duration::from_millis(a.ms),
        rounds: a.rounds,
        ..Default::default()
    };
    match bench::peer::run(&opts) {
        Ok(r) if a.json => {
            outln!("{}", r.to_json());
            ExitCode::SUCCESS
        }
        Ok(r) => {
            outln!(
                "guest work (scenario=stacks, CPL3) sampled at {} Hz of each vCPU thread's CPU time: {} vCPU, {} rounds of {} ms (load {:.1} before, {:.1} after)",
                r.rate_hz, r.cpus, r.rounds, r.work_ms, r.load_before, r.load_after
            );
            outln!(
                "{:<11} {:>10} {:>9} {:>6} {:>9} {:>8} {:>8} {:>6} {:>6} {:>6}",
                "mode",
                "work/s",
                "slowdown",
                "cpu",
                "per cpu",
                "samples",
                "of peer",
                "host",
                "lost",
                "kicks"
            );
            for row in &r.rows {
                match &row.unavailable {
                    Some(why) => outln!("{:<11} not measured: {why}", row.mode),
                    None => outln!(
                        "{:<11} {:>10.0} {:>9.3} {:>6.2} {:>9.3} {:>8.0} {:>8.3} {:>6.0} {:>6.0} {:>6.0}",
                        row.mode,
                        row.work_per_s,
                        row.slowdown,
                        row.cpu_share,
                        row.cpu_slowdown,
                        row.samples,
                        row.of_peer_samples,
                        row.host_samples,
                        row.lost,
                        row.kicks
                    ),
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e, STATUS_HOST_ERROR),
    }
}

/// `hvprof bench`.
pub fn bench(a: &BenchArgs) -> ExitCode {
    if a.disk {
        return bench_disk(a);
    }
    if a.peer {
        return bench_peer(a);
    }
    let opts = bench::BenchOptions {
        kicks: a.kicks,
        rounds: a.rounds,
        ..Default::default()
    };
    match bench::run(&opts) {
        Ok(r) if a.json => {
            outln!("{}", r.to_json());
            ExitCode::SUCCESS
        }
        Ok(r) => {
            outln!(
                "sample path:    {:>9.0} ns full vs {:>9.0} ns bare kick (median of {} each; p90 {:.0} vs {:.0})",
                r.kick_full_ns, r.kick_bare_ns, r.kicks, r.kick_full_p90_ns, r.kick_bare_p90_ns
            );
            outln!("sample_ratio    {:>9.3}   (target <= 1.15)", r.sample_ratio);
            outln!(
                "stack path:     {:>9.0} ns with a {:.1}-frame frame-pointer walk",
                r.kick_stack_ns,
                r.stack_frames
            );
            outln!("stack_ratio     {:>9.3}   (target <= 1.25)", r.stack_ratio);
            outln!(
                "walk:           {:>9.1} ns a frame inside the sample vs {:.1} ns repeated alone (medians)",
                r.ns_per_frame, r.alone_ns_per_frame
            );
            outln!("walk_ratio      {:>9.3}   (target <= 2.0)", r.walk_ratio);
            outln!(
                "timeline_ratio  {:>9.3}   (target <= 1.05; the stack walk's profile recording a timeline, over the same without)",
                r.timeline_ratio
            );
            outln!(
                "timeline:       {:>9.0} ns a sample to record it (off the vCPU), so {:.4} of the stack path",
                r.timeline_record_ns, r.timeline_record_ratio
            );
            if r.perf_ratio.is_nan() {
                outln!("perf path:      not measured (perf events are closed to this user)");
            } else {
                outln!(
                    "perf path:      {:>9.0} ns from a task-clock overflow signal (host profile, no stacks)",
                    r.kick_perf_ns
                );
                outln!("perf_ratio      {:>9.3}", r.perf_ratio);
            }
            outln!(
                "x64 unwind:     {:>9.0} ns with a {:.1}-frame unwind vs {:>9.0} ns bare kick, second VM",
                r.kick_unwind_ns, r.unwind_frames, r.kick_unwind_bare_ns
            );
            outln!("unwind_ratio    {:>9.3}   (target <= 1.25)", r.unwind_ratio);
            outln!(
                "unwind:         {:>9.1} ns a frame inside the sample vs {:.1} ns repeated alone (medians)",
                r.ns_per_unwind_frame, r.alone_ns_per_unwind_frame
            );
            outln!(
                "unwind_walk_ratio {:>7.3}   (target <= 2.0)",
                r.unwind_walk_ratio
            );
            outln!(
                "naming:         {:>9.0} ns a sample to name its guest thread (new thread every 16 samples), {:.0} ns (every sample)",
                r.naming_ns, r.naming_worst_ns
            );
            outln!(
                "naming_ratio    {:>9.3}   (target <= 1.10; worst case {:.3})",
                r.naming_ratio,
                r.naming_worst_ratio
            );
            outln!(
                "hypercall path: {:>9.0} ns full vs {:>9.0} ns bare port-I/O exit (guest-measured medians)",
                r.hypercall_ns, r.io_exit_ns
            );
            outln!(
                "hypercall_ratio {:>9.3}   (target <= 1.2)",
                r.hypercall_ratio
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e, STATUS_HOST_ERROR),
    }
}

/// `hvprof events`: what the probe a VM runs at start finds for this user on this host.
pub fn events(a: &EventsArgs) -> ExitCode {
    let report = vmm::sampler::probe::probe_host();
    let listing =
        vmm::sampler::listing::Listing::of(&report).with_sampler(vmm::sampler::selftest::run());
    if a.json {
        outln!("{}", listing.to_json());
    } else {
        out!("{}", listing.to_text());
    }
    ExitCode::SUCCESS
}
