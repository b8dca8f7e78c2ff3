//! The subcommands that run a VM: run, demo, profile.

use std::path::Path;
use std::process::ExitCode;

use profile_core::source::ProfileSource;
use report::symbols::guest_files::GuestFiles;
use report::symbols::Finder;
use report::Symbols;
use vmm::config::VmConfig;
use vmm::outcome::{Blame, STATUS_CONFIG_ERROR};
use vmm::profiler::host_profiles::guest_awareness::GuestTypes;
use vmm::report_input::RunMetadata;
use vmm::session::{Progress, SessionOptions, Span};
use vmm::vm::{RunHooks, RunReport};

use super::args::{seconds, BootArgs, DemoArgs, ProfileArgs, RunArgs, VmArgs};
use super::progress::Bar;
use super::stdout::{err, errln, out};
use super::{exit_code, fail, results_filter};

/// The API socket while its VM runs: the caller holds it until the run is over, so the socket
/// file is removed here, not by the API's filtered thread.
type ApiGuard = Option<std::sync::Arc<vmm::api::ApiSocket>>;

/// Builds the config, or prints why not.
fn config(
    vm: VmArgs,
    boot: BootArgs,
    default: Option<vmm::boot::KernelSpec>,
) -> Result<(VmConfig, RunHooks, ApiGuard), ExitCode> {
    let socket = vm.api_socket.clone();
    let config = boot.into_config(vm, default).map_err(|e| {
        errln!("hvprof: error: {e}");
        exit_code(STATUS_CONFIG_ERROR)
    })?;
    if let Some(notice) = vmm::vm::hyperv_notice(&config) {
        errln!("hvprof: {notice}");
    }
    let mut hooks = RunHooks::default();
    let mut guard = None;
    if let Some(path) = socket {
        let socket = vmm::api::ApiSocket::bind(&path).map_err(|e| {
            let status = e.fault().exit_status();
            fail(e, status)
        })?;
        let socket = std::sync::Arc::new(socket);
        guard = Some(socket.clone());
        let kernel = config.boot_image().display().to_string();
        hooks
            .controllers
            .push(Box::new(move |control| socket.serve(control, kernel)));
    }
    Ok((config, hooks, guard))
}

/// Proves `--out` writable (created if missing) before the VM is built, and that nothing is
/// at the name of any file of the set that an output never replaces (a directory, a FIFO
/// nobody reads): a bad `--out` is the user's mistake (status 2) and must not cost the run.
fn check_out(out: Option<&Path>) -> Result<(), ExitCode> {
    match out.map(|dir| files::atomic::check_names(dir, &report::OUTPUT_NAMES)) {
        Some(Err(e)) => Err(fail(e, STATUS_CONFIG_ERROR)),
        _ => Ok(()),
    }
}

/// Prints the end-of-run summary (and the error, if the outcome is one).
fn summarize(report: &RunReport) {
    err!("{}", report.summary());
    if report.outcome.is_error() {
        errln!("hvprof: error: {}", report.outcome);
    }
}

/// Where a run's Linux guest files are found.
enum Places {
    /// Settled before the run (`profile` on a guest that may run Linux: the booted initrd is
    /// read then, for the user-mode stacks).
    Settled(GuestFiles),
    /// These, and the initrd the guest booted, read after the run if a process mapped a file.
    AddBooted(GuestFiles),
}

/// `given` and the initrd the guest boots, if it boots one that `given` does not hold yet. An
/// initrd that cannot be read as an archive is a warning: the run goes on, and its results are
/// still written.
fn with_booted_initrd(config: &VmConfig, given: GuestFiles) -> GuestFiles {
    let booted = config.kernel().and_then(|k| k.initrd.as_deref());
    match booted {
        Some(path) if !given.has_initrd(path) => match super::symbols::read_initramfs(path) {
            Ok(initrd) => given.with_initrd(path.to_path_buf(), initrd),
            Err(e) => {
                errln!(
                    "hvprof: warning: {e}; the files the guest's processes mapped are looked for only in --sysroot and --initramfs"
                );
                given
            }
        },
        _ => given,
    }
}

/// `given` and the disks the guest had, last: each whose image (or, for a `,snapshot` disk,
/// the base the guest booted from) holds an ext2/3/4 file system. A disk without one (a
/// Windows disk, swap, a blank image) is passed over (`--disk-image IMAGE` says why one
/// cannot be read).
fn with_disks(config: &VmConfig, given: GuestFiles) -> GuestFiles {
    config.disks.iter().fold(given, |files, disk| {
        let place = vmm::report_input::disk_image_place(&disk.path);
        // `--disk-image` names an image whose file system cannot be read; here it is only
        // left out.
        match place.check() {
            Ok(()) => files.with_image(place),
            Err(_) => files,
        }
    })
}

/// Finishes a run: the text report of its profile objects (the same as report.txt), the
/// summary, and the four report files when `out` is given. With a finder, the PDBs of the
/// modules found in guest memory are looked up, and those not found listed on stderr.
/// `places`: where a Linux guest's mapped files are found.
fn finish(
    config: &VmConfig,
    result: Result<RunReport, vmm::vm::VmError>,
    out: Option<&Path>,
    finder: Option<&mut Finder>,
    places: Places,
    status_of: impl Fn(&RunReport) -> i32,
) -> ExitCode {
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let status = e.exit_status();
            return fail(e, status);
        }
    };
    // From here this thread turns what the guest left (module lists, PDB names, stacks) into
    // reports: it is filtered like every thread that ran beside the guest.
    if let Err(code) = results_filter(config.seccomp) {
        return code;
    }
    let status = status_of(&report);
    let mut meta = RunMetadata::new(config);
    meta.exit_status = status;
    let mut profile = vmm::report_input::profile(&report, &meta);
    // Symbols (and their line tables) only for a report that is printed or written.
    let symbols = if profile.objects.is_empty() && out.is_none() {
        Symbols::default()
    } else {
        let mapped = profile.processes.iter().any(|p| !p.mappings.is_empty());
        let files = match places {
            Places::Settled(f) => f,
            Places::AddBooted(f) if mapped => with_booted_initrd(config, f),
            Places::AddBooted(f) => f,
        };
        let files = if mapped {
            with_disks(config, files)
        } else {
            files
        };
        vmm::report_input::run_symbols(config, &profile, finder, &files)
    };
    // Once: the printed report and every file written below use these per-function totals.
    if symbols.all_modules().next().is_some() {
        profile.symbolize(&symbols);
    }
    if !profile.objects.is_empty() {
        out!("{}", report::text::render(&profile, &symbols, 10));
    }
    summarize(&report);
    super::symbols::report_gaps(&symbols);
    if let Some(dir) = out {
        match report::write_all(dir, &profile, &symbols) {
            Ok(files) => {
                for f in files.all() {
                    errln!("hvprof: wrote {}", f.display());
                }
            }
            Err(e) => return super::fail_write(e),
        }
    }
    exit_code(status)
}

/// `hvprof run`.
pub fn run(a: RunArgs) -> ExitCode {
    let (config, hooks, _api) = match config(a.vm, a.boot, None) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let result = vmm::vm::run_with(&config, hooks);
    finish(
        &config,
        result,
        None,
        None,
        Places::AddBooted(GuestFiles::new()),
        |r| r.outcome.exit_status(),
    )
}

/// `hvprof demo`.
pub fn demo(a: DemoArgs) -> ExitCode {
    if let Err(code) = check_out(a.out.as_deref()) {
        return code;
    }
    let (config, hooks, _api) = match config(
        a.vm,
        BootArgs::none(),
        Some(vmm::refguest::kernel_spec(&a.cmdline)),
    ) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let result = vmm::vm::run_with(&config, hooks);
    let places = Places::AddBooted(GuestFiles::new());
    finish(&config, result, a.out.as_deref(), None, places, |r| {
        vmm::refguest::exit_status(&r.outcome)
    })
}

/// `hvprof profile`.
pub fn profile(a: ProfileArgs) -> ExitCode {
    let host = match a.host_profiles() {
        Ok(h) => h,
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    let interval = match a.checked_interval() {
        Ok(i) => i,
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    let span = match a.duration.map(|s| seconds("--duration", s)).transpose() {
        Ok(Some(d)) => Span::For(d),
        Ok(None) => Span::UntilExit,
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    if let Err(code) = check_out(Some(&a.out)) {
        return code;
    }
    // A bad symbol path fails before the run, not after it.
    let mut finder = match super::symbols::finder(&a.symbol_path, a.quiet) {
        Ok(f) => f,
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    // So is a --sysroot that is no directory, or an --initramfs that is no archive.
    let files = match super::symbols::guest_files(&a.symbol_path) {
        Ok(f) => f,
        Err(e) => return fail(anyhow::anyhow!(e), STATUS_CONFIG_ERROR),
    };
    let embedded = a.boot.is_empty();
    let mut boot = a.boot;
    // The built-in guest's scenario sets ProfileTime's interval itself once it starts, after
    // the host did: it is told the same, or the run is refused.
    if let Some((ProfileSource::TIME, i)) = interval.filter(|_| embedded) {
        let cmdline = boot
            .cmdline
            .as_deref()
            .unwrap_or(vmm::refguest::DEFAULT_CMDLINE);
        match vmm::refguest::keep_interval(cmdline, i) {
            Ok(c) => boot.cmdline = Some(c),
            Err(e) => return fail(e, STATUS_CONFIG_ERROR),
        }
    }
    let types = vmm::profiler::host_profiles::guest_awareness::layout_source::guest_types(
        a.guest_os,
        a.guest_types.as_deref(),
        boot.kernel.as_deref(),
        finder.as_ref().map(|f| f.path().clone()),
    );
    let guest_types = match types {
        Ok(t) => t,
        Err(e) => return fail(e, STATUS_CONFIG_ERROR),
    };
    // A process filter where no process can ever be named would record nothing: refused now.
    if let (Some(spec), Some(why)) = (host.first(), guest_types.why_no_process_names()) {
        if !spec.process.is_empty() {
            let e = vmm::profiler::host_profiles::HostProfileError::NoProcessNames(why);
            let e = anyhow::Error::new(e).context(format!("--process {}", spec.process.join(" ")));
            return fail(e, STATUS_CONFIG_ERROR);
        }
    }
    let default = vmm::refguest::kernel_spec(vmm::refguest::DEFAULT_CMDLINE);
    let (config, mut hooks, _api) = match config(a.vm, boot, Some(default)) {
        Ok(c) => c,
        Err(code) => return code,
    };
    hooks.guest_types = guest_types;
    // A guest whose Linux processes may be named: the initrd it boots is read now, for their
    // user-mode stacks, unwound with their files' call-frame information as they are sampled.
    // (Another guest's initrd, such as the reference guest's PE module, is not an archive.)
    let places = if matches!(
        hooks.guest_types,
        GuestTypes::Linux(_) | GuestTypes::Lookup(_)
    ) {
        let files = with_booted_initrd(&config, files);
        hooks.guest_files = files.clone();
        Places::Settled(files)
    } else {
        Places::AddBooted(files)
    };
    let opts = SessionOptions {
        span,
        interval: interval.map(|(_, i)| i),
        host_profiles: host,
    };
    let progress: Option<Box<dyn Progress>> = if a.quiet {
        None
    } else {
        Some(Box::new(Bar::new(span)))
    };
    let result = vmm::session::run(&config, &opts, hooks, progress);
    finish(
        &config,
        result,
        Some(&a.out),
        finder.as_mut(),
        places,
        |r| {
            if embedded {
                vmm::refguest::exit_status(&r.outcome)
            } else {
                r.outcome.exit_status()
            }
        },
    )
}
