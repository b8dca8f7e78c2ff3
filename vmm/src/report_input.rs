//! A run handed to the report crate: the one place where the VMM's types (RunReport,
//! ObjectResult, HostProfileResult, StatsSnapshot, VmConfig, the built-in kernel) become the
//! report crate's plain inputs. The report crate never sees a VMM type, so it builds and
//! tests without KVM; anything new a profile records is converted here.

use std::path::Path;
use std::sync::Arc;

use devices::virtio::block::disk::{DiskBackend, DiskConfig, DiskImage};
use report::hex::{Hex, OptHex};
use report::input::{GuestObject, HostObject, RunInput};
use report::profile::{GuestModule, GuestPdb, StackCount};
use report::symbols::guest_files::image::Ext4Read;
use report::symbols::guest_files::{GuestFiles, ImagePlace, Opener};
use report::symbols::{elf, Finder};
use report::{KernelImage, Module, Profile, ReportError, RunInfo, SymbolSpec, Symbols, VcpuStats};

use crate::boot::KernelSpec;
use crate::config::VmConfig;
use crate::profiler::host_profiles::FoundModule;
use crate::profiler::host_profiles::StackCounts;
use crate::profiler::vcpu_counters::StatsSnapshot;
use crate::vm::RunReport;

/// What a [`RunReport`] does not know about its run.
#[derive(Debug, Clone)]
pub struct RunMetadata {
    /// The kernel file or built-in name.
    pub kernel: String,
    /// Its command line.
    pub cmdline: String,
    /// Guest memory in MiB.
    pub memory_mib: u64,
    /// hvprof's exit status for the outcome (the demo maps it its own way).
    pub exit_status: i32,
}

impl RunMetadata {
    /// The metadata of a run of `config`, with exit status 0 (set `exit_status` once the
    /// outcome is known).
    pub fn new(config: &VmConfig) -> Self {
        RunMetadata {
            kernel: config.boot_image().display().to_string(),
            cmdline: config
                .kernel()
                .map(|k| k.cmdline.clone())
                .unwrap_or_default(),
            memory_mib: config.memory_mib,
            exit_status: 0,
        }
    }
}

/// vCPU `vcpu`'s counters as profile.json (and the control API) name them.
pub fn vcpu_stats(vcpu: u32, s: &StatsSnapshot) -> VcpuStats {
    VcpuStats {
        vcpu,
        samples: s.samples,
        attributed: s.attributed,
        outside: s.outside(),
        lost: s.coalesced,
        counts: s.counts,
        injected: s.injected,
        hypercalls: s.hypercalls,
    }
}

/// The profile of a finished run: every object in `report.results` is a guest agent's and
/// every host-side profile a host object. Symbolize it with [`Profile::symbolize`].
pub fn profile(report: &RunReport, meta: &RunMetadata) -> Profile {
    let vcpus = u32::try_from(report.vcpus.len()).unwrap_or(u32::MAX);
    let run = RunInfo {
        kernel: meta.kernel.clone(),
        cmdline: meta.cmdline.clone(),
        protocol: report.protocol.to_string(),
        vcpus,
        memory_mib: meta.memory_mib,
        // The run's one clock: the start the timeline's and the process table's times, and
        // `wall_time_s`, count from.
        start_time: crate::clock::rfc3339(report.start.unix()),
        wall_time_s: report.wall_time.as_secs_f64(),
        outcome: report.outcome.to_string(),
        exit_status: meta.exit_status,
        interval_100ns: report.interval_100ns,
        clock: report.clock.name().to_string(),
        sampler: report.sampler.name().to_string(),
    };
    let stacks: Vec<Vec<StackCount>> = report
        .host_results
        .iter()
        .map(|h| stack_counts(&h.stacks))
        .collect();
    Profile::from_run(RunInput {
        hvprof_version: env!("CARGO_PKG_VERSION"),
        run,
        vcpus: (0..)
            .zip(&report.profile_stats)
            .map(|(i, s)| vcpu_stats(i, s))
            .collect(),
        guest: report
            .results
            .iter()
            .map(|r| GuestObject {
                id: r.object.0,
                config: &r.config,
                counts: &r.counts,
            })
            .collect(),
        host: report
            .host_results
            .iter()
            .zip(&stacks)
            .map(|(h, stacks)| HostObject {
                id: h.id,
                start: h.spec.start,
                last: h.spec.last,
                bucket_shift: h.spec.bucket_shift,
                cr3: h.spec.cr3,
                process_names: &h.spec.process,
                vcpus: h.spec.vcpus.as_deref(),
                counts: &h.counts,
                stacks,
                stacks_dropped: h.stacks.dropped,
                threads: &h.threads,
                source: host_source(h.spec.event.as_deref()).0,
                source_name: host_source(h.spec.event.as_deref()).1,
                from_ring: h.from_ring,
            })
            .collect(),
        guest_modules: report.guest_modules.iter().map(guest_module).collect(),
        processes: report.processes.clone(),
        threads: report.threads.clone(),
        timelines: report.timelines.clone(),
    })
}

/// The source a host profile's samples stand for and its name: ProfileTime's clock by
/// default, a PMU source's event, or a software clock (source 0, named as perf names it).
fn host_source(event: Option<&str>) -> (u32, &str) {
    let def = event.and_then(crate::sampler::events::by_name);
    match (event, def.and_then(|d| d.source)) {
        (_, Some(s)) => (s.0, report::profile::source_name(s.0)),
        (Some(name), None) => (0, name),
        (None, None) => (0, report::profile::source_name(0)),
    }
}

/// A PE image found in guest memory, as profile.json records it.
fn guest_module(m: &FoundModule) -> GuestModule {
    let pdb = m.codeview.as_ref().map(|cv| GuestPdb {
        name: cv.pdb.clone(),
        guid: cv.guid.clone(),
        age: cv.age,
    });
    // The export name, else the PDB's without `.pdb`, else the address.
    let name = m.name.clone().or_else(|| {
        pdb.as_ref()
            .map(|p| p.name.trim_end_matches(".pdb").to_string())
    });
    GuestModule {
        process: OptHex(m.process.map(profile_core::abi::process_key)),
        name: name.unwrap_or_else(|| format!("image@{:#x}", m.image.base)),
        base: Hex(m.image.base),
        size: Hex(u64::from(m.image.size)),
        timestamp: m.image.timestamp,
        pdb,
    }
}

/// A host profile's stacks as the report crate keeps them.
fn stack_counts(s: &StackCounts) -> Vec<StackCount> {
    s.stacks
        .iter()
        .map(|(k, count)| StackCount {
            thread: k.thread,
            ..StackCount::new(k.pcs.iter().copied(), k.truncated, *count)
        })
        .collect()
}

/// The module name of a kernel: its file name, or the first word of a built-in one's name
/// (`refguest (built in)` is `refguest`).
fn module_name(spec: &KernelSpec) -> String {
    let name = spec.kernel.file_name().map_or_else(
        || "kernel".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    name.split_whitespace()
        .next()
        .unwrap_or("kernel")
        .to_string()
}

/// The symbols of the kernel `spec` boots, or none if its image has no readable table.
pub fn kernel_symbols(spec: &KernelSpec) -> Symbols {
    let name = module_name(spec);
    let module = match spec.embedded {
        Some(b) => elf::read(&name, b),
        None => match files::bounded::read(&spec.kernel, files::bounded::KERNEL) {
            Ok(b) => elf::read(&name, &b).map(|m| Module {
                path: Some(spec.kernel.clone()),
                ..m
            }),
            Err(_) => return Symbols::default(),
        },
    };
    module.map(Symbols::from_module).unwrap_or_default()
}

/// The symbols of the kernel a VM booted (none for a firmware boot).
pub fn config_symbols(config: &VmConfig) -> Symbols {
    config.kernel().map(kernel_symbols).unwrap_or_default()
}

/// The symbols of a run just ended: its kernel's, with a finder (a symbol path) the PDBs of
/// the modules it found in guest memory, and the ELF files its Linux processes mapped that
/// `files` holds; those not found are in [`Symbols::missing`] and [`Symbols::unmapped`].
pub fn run_symbols(
    config: &VmConfig,
    profile: &Profile,
    finder: Option<&mut Finder>,
    files: &GuestFiles,
) -> Symbols {
    let mut symbols = config_symbols(config);
    if let Some(finder) = finder {
        report::load::add_guest_modules(&mut symbols, profile, finder);
    }
    report::load::add_mapped_files(&mut symbols, profile, files);
    symbols
}

/// The disk image at `path` (raw or qcow2, with its backing chain) as a place a Linux guest's
/// files are found in, opened read-only and with a shared lock at each lookup.
pub fn disk_image_place(path: &Path) -> ImagePlace {
    let image = path.to_path_buf();
    let open: Opener = Arc::new(move || {
        let disk = DiskImage::open(&DiskConfig::new(&image, true))
            .map_err(|e| report::chain::with_causes(&e))?;
        Ok(Box::new(Sectors(disk.backend)) as Box<dyn Ext4Read>)
    });
    ImagePlace::new(path.to_path_buf(), open)
}

/// A disk backend read as ext4-view reads.
struct Sectors(Box<dyn DiskBackend>);

impl Ext4Read for Sectors {
    fn read(
        &mut self,
        start_byte: u64,
        dst: &mut [u8],
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync + 'static>> {
        Ok(self.0.read_at(start_byte, dst)?)
    }
}

/// The symbols for a saved profile: its kernel's when the profile ran the built-in reference
/// guest (from this binary's bytes), then every `specs` image, then with a finder the modules
/// found in guest memory. The kernel path a profile records is never opened: the profile may
/// be crafted, and the path may name anything (a FIFO, a device, a secret); the user names a
/// kernel file's symbols with `specs` (`--symbols`).
pub fn saved_profile_symbols(
    profile: &Profile,
    specs: &[SymbolSpec],
    finder: Option<&mut Finder>,
    files: &GuestFiles,
) -> Result<Symbols, ReportError> {
    // A profile records the kernel by the name RunMetadata gave it; the built-in one's name
    // is not a path, so its bytes come from this binary.
    let builtin = crate::refguest::kernel_spec("");
    let name = module_name(&builtin);
    let kernel = match builtin.embedded {
        Some(bytes) if profile.run.kernel == builtin.kernel.display().to_string() => {
            KernelImage::Bytes { name: &name, bytes }
        }
        _ => KernelImage::None,
    };
    let mut symbols = report::load::for_profile(profile, kernel, specs, finder)?;
    report::load::add_mapped_files(&mut symbols, profile, files);
    Ok(symbols)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::boot::Protocol;
    use crate::outcome::RunOutcome;
    use crate::profiler::host_profiles::{HostProfileResult, HostProfileSpec};
    use crate::profiler::ObjectResult;
    use crate::vm::VcpuSummary;

    fn refguest() -> Symbols {
        kernel_symbols(&crate::refguest::kernel_spec(""))
    }

    #[test]
    fn the_embedded_reference_guest_has_symbols_and_code() {
        let symbols = refguest();
        let m = &symbols.modules()[0];
        assert_eq!(m.name, "refguest");
        assert!(m.symbols.len() > 10);
        for f in ["shares_f1", "shares_f2", "shares_f4"] {
            let s = m.symbols.iter().find(|s| s.name == f);
            let s = s.unwrap_or_else(|| panic!("{f} is a symbol of the reference guest"));
            let addr = m.base + s.rva;
            assert_eq!(symbols.describe(addr), f);
            assert!(m.code_at(addr).is_some_and(|c| !c.is_empty()));
        }
    }

    #[test]
    fn the_reference_guest_kernel_has_lines() {
        // Its Rust code carries line tables; the CPL3 workload (shares_f1..f4) is assembly
        // without them.
        let symbols = refguest();
        let m = &symbols.modules()[0];
        assert!(!m.lines.is_empty());
        let rust = m
            .symbols
            .iter()
            .find(|s| s.name.contains("scenario::shares::"))
            .unwrap();
        let at = m.lines.lookup(rust.rva).unwrap();
        assert!(at.file.ends_with("src/scenario/shares.rs"), "{at:?}");
        assert!(at.line > 0);
        assert!(at.short().starts_with("shares.rs:"));
        let f4 = m.symbols.iter().find(|s| s.name == "shares_f4").unwrap();
        assert_eq!(m.lines.lookup(f4.rva), None);
    }

    fn saved(kernel: &str) -> Profile {
        let mut p = profile(&report(), &meta());
        p.run.kernel = kernel.into();
        p
    }

    #[test]
    fn a_saved_profile_of_the_built_in_guest_gets_its_symbols() {
        let builtin = crate::refguest::kernel_spec("")
            .kernel
            .display()
            .to_string();
        let s = saved_profile_symbols(&saved(&builtin), &[], None, &GuestFiles::new()).unwrap();
        assert_eq!(s.modules()[0].name, "refguest");
        assert!(s.len() > 10);
        let s = saved_profile_symbols(
            &saved("/nonexistent/vmlinux"),
            &[],
            None,
            &GuestFiles::new(),
        )
        .unwrap();
        assert!(s.modules().is_empty());
    }

    #[test]
    fn a_saved_profile_never_has_the_kernel_file_it_names_opened() {
        // The test binary is a readable ELF with symbols: named by a (possibly crafted)
        // profile it is still not read; named by the user it is.
        let exe = std::env::current_exe().unwrap();
        let p = saved(exe.to_str().unwrap());
        assert!(saved_profile_symbols(&p, &[], None, &GuestFiles::new())
            .unwrap()
            .modules()
            .is_empty());
        let spec: SymbolSpec = exe.to_str().unwrap().parse().unwrap();
        let s = saved_profile_symbols(&p, &[spec], None, &GuestFiles::new()).unwrap();
        assert_eq!(s.modules().len(), 1);
    }

    #[test]
    fn files_linux_processes_mapped_are_named_for_those_processes_only() {
        use report::hex::Hex;
        use report::profile::MappingInfo;
        use report::symbols::guest_files::GuestFiles;
        // The reference guest's ELF as a guest program, /bin/prog in a sysroot.
        let elf = crate::refguest::kernel_spec("").embedded.unwrap();
        let root = std::env::temp_dir().join(format!("hvprof-mapped-{}", std::process::id()));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/prog"), elf).unwrap();
        // Its first loadable byte, and a function in it.
        let segments = report::symbols::elf::Segments::of(elf).unwrap();
        let offset = (0..elf.len() as u64)
            .step_by(0x1000)
            .find(|&o| segments.linked_address(o).is_some())
            .unwrap();
        let linked = segments.linked_address(offset).unwrap();
        let m = report::symbols::elf::read("prog", elf).unwrap();
        let f4 = m.symbols.iter().find(|s| s.name == "shares_f4").unwrap();
        let at = m.base + f4.rva;
        let process = |key: u32, bias: u64, path: &str| {
            let map = MappingInfo {
                start: Hex(linked + bias),
                end: Hex(linked + bias + 0x10_0000),
                offset: Hex(offset),
                path: path.into(),
                build_id: None,
            };
            mapping_process(key, map)
        };
        let mut p = saved("/nonexistent/vmlinux");
        p.processes = vec![
            process(1, 0, "/bin/prog"),
            process(2, 0x4000_0000, "/bin/prog"),
            process(3, 0, "/bin/elsewhere"),
            process(4, 0, "/bin/prog"),
        ];
        let files = GuestFiles::new().with_sysroot(root.clone());
        let s = saved_profile_symbols(&p, &[], None, &files).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let name = |key, addr| {
            s.resolve_in(Some(key), addr)
                .map(|h| h.describe())
                .unwrap_or_default()
        };
        assert_eq!(name(1, at), "prog!shares_f4");
        assert_eq!(
            name(4, at),
            "prog!shares_f4",
            "one placement, two processes"
        );
        assert_eq!(name(2, at + 0x4000_0000), "prog!shares_f4");
        assert_eq!(name(2, at), "", "process 2 maps it elsewhere");
        assert_eq!(name(3, at), "", "process 3 maps another file");
        assert!(s.resolve(at).is_none(), "no process, no mapped file");
        assert_eq!(s.mapped().count(), 2);
        assert_eq!(s.unmapped(), ["/bin/elsewhere"]);
    }

    #[test]
    fn a_file_found_as_another_build_than_the_guests_is_not_used() {
        use report::hex::Hex;
        use report::profile::MappingInfo;
        // The test binary (Debian's gcc links a build id into it) as /bin/self in a sysroot.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let own = report::symbols::elf::build_id(&exe).expect("the test binary's build id");
        let root = std::env::temp_dir().join(format!("hvprof-build-id-{}", std::process::id()));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/self"), &exe).unwrap();
        let segments = report::symbols::elf::Segments::of(&exe).unwrap();
        let offset = (0..exe.len() as u64)
            .step_by(0x1000)
            .find(|&o| segments.linked_address(o).is_some())
            .unwrap();
        let linked = segments.linked_address(offset).unwrap();
        let process = |key: u32, build_id: Option<String>| {
            let map = MappingInfo {
                start: Hex(linked),
                end: Hex(linked + 0x1000),
                offset: Hex(offset),
                path: "/bin/self".into(),
                build_id,
            };
            mapping_process(key, map)
        };
        let files = GuestFiles::new().with_sysroot(root.clone());
        let of = |ids: Vec<Option<String>>| {
            let mut p = saved("/nonexistent/vmlinux");
            p.processes = (1..).zip(ids).map(|(k, id)| process(k, id)).collect();
            saved_profile_symbols(&p, &[], None, &files).unwrap()
        };
        let symbols = |id: Option<String>| of(vec![id]);
        let other = "00".repeat(20);
        let wrong = symbols(Some(other.clone()));
        let result = (symbols(Some(own.clone())), symbols(None));
        // Processes whose first page was not in memory (no id) and one whose was: one module.
        let some = || Some(own.clone());
        let mixed = [of(vec![None, some(), None]), of(vec![some(), None, some()])];
        std::fs::remove_dir_all(&root).unwrap();
        for s in &mixed {
            let placed: Vec<&[u32]> = s.mapped().map(|(keys, _)| keys).collect();
            assert_eq!(placed, [&[1, 2, 3][..]], "one module, mapped by all three");
        }
        assert_eq!(wrong.mapped().count(), 0, "another build is not placed");
        assert_eq!(wrong.mismatched().len(), 1);
        let m = &wrong.mismatched()[0];
        assert_eq!(
            (m.path.as_str(), &m.found, &m.guest),
            ("/bin/self", &own, &other)
        );
        assert!(m.origin.ends_with("bin/self"), "{}", m.origin);
        for (s, what) in [
            (&result.0, "the same build id"),
            (&result.1, "no guest build id"),
        ] {
            assert_eq!(s.mapped().count(), 1, "{what}");
            assert!(s.mismatched().is_empty(), "{what}");
        }
    }

    /// A Linux process `p{key}` (pid key + 100) with one mapping.
    fn mapping_process(
        key: u32,
        map: report::profile::MappingInfo,
    ) -> report::profile::ProcessInfo {
        report::profile::ProcessInfo {
            key,
            pid: Some(u64::from(key) + 100),
            name: format!("p{key}"),
            path: None,
            cr3s: Vec::new(),
            first_seen_s: 0.0,
            last_seen_s: 0.0,
            kernel: false,
            identified: true,
            mappings: vec![map],
        }
    }

    fn meta() -> RunMetadata {
        RunMetadata {
            kernel: "vmlinux".into(),
            cmdline: "quiet".into(),
            memory_mib: 256,
            exit_status: 3,
        }
    }

    fn report() -> RunReport {
        let config = profile_core::object::ObjectConfig {
            process: Some(0x5000),
            base: 0x1000,
            size: 0x40,
            bucket_size: 4,
            buffer: 0,
            buffer_size: 16,
            source: profile_core::ProfileSource::TIME,
            affinity: profile_core::affinity::ProcessorSet::all_active(2),
        };
        let stats = StatsSnapshot {
            samples: 10,
            attributed: 7,
            counts: 7,
            coalesced: 1,
            injected: 2,
            hypercalls: 4,
            host_time: 0,
        };
        RunReport {
            timelines: Vec::new(),
            outcome: RunOutcome::DebugExit(1),
            protocol: Protocol::Pvh,
            start: crate::clock::RunClock::at(
                std::time::Instant::now(),
                SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            ),
            wall_time: Duration::from_millis(1500),
            vcpus: (0..2)
                .map(|index| VcpuSummary {
                    index,
                    exits: Vec::new(),
                    unclaimed: 0,
                })
                .collect(),
            profile_stats: vec![stats, StatsSnapshot::default()],
            results: vec![ObjectResult {
                object: profile_core::ObjectId(3),
                config,
                counts: vec![0, 4, 0, 2],
            }],
            host_results: vec![HostProfileResult {
                id: 1,
                spec: HostProfileSpec {
                    vcpus: Some(vec![1]),
                    ..HostProfileSpec::whole_space()
                },
                running: false,
                counts: BTreeMap::from([(0x100, 5)]),
                threads: BTreeMap::from([(0, BTreeMap::from([(0x100, 5)]))]),
                stacks: Default::default(),
                from_ring: 0,
            }],
            processes: vec![report::profile::ProcessInfo {
                key: 0,
                pid: Some(57),
                name: "awk".into(),
                path: None,
                cr3s: vec![Hex(0x7000)],
                first_seen_s: 0.25,
                last_seen_s: 1.5,
                kernel: false,
                identified: true,
                mappings: Vec::new(),
            }],
            threads: vec![report::profile::ThreadInfo {
                key: 0,
                process: 0,
                tid: Some(57),
                name: Some("awk".into()),
            }],
            guest_modules: vec![FoundModule {
                process: Some(0x7000),
                image: introspect::pe::Image {
                    base: 0x7ff6_0000_0000,
                    machine: Default::default(),
                    size: 0x3000,
                    timestamp: 0x5eed_1234,
                    exports: Default::default(),
                    exceptions: Default::default(),
                    debug: Default::default(),
                },
                name: None,
                codeview: Some(introspect::pe::CodeView {
                    pdb: "app.pdb".into(),
                    guid: "0123456789ABCDEF0123456789ABCDEF".into(),
                    age: 2,
                }),
            }],
            interval_100ns: 39_063,
            clock: crate::sampler::Clock::Cpu,
            sampler: crate::sampler::SamplerMode::Kernel,
        }
    }

    #[test]
    fn a_run_report_becomes_a_profile() {
        let p = profile(&report(), &meta());
        assert_eq!(p.run.start_time, "2023-11-14T22:13:20.123Z");
        assert_eq!((p.run.protocol.as_str(), p.run.vcpus), ("PVH", 2));
        assert_eq!((p.run.kernel.as_str(), p.run.exit_status), ("vmlinux", 3));
        assert_eq!(p.run.clock, "cpu");
        assert_eq!(p.run.outcome, RunOutcome::DebugExit(1).to_string());
        assert_eq!(p.hvprof_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(p.vcpus[0], vcpu_stats(0, &report().profile_stats[0]));
        assert_eq!((p.vcpus[0].outside, p.vcpus[0].lost), (3, 1));
        assert_eq!(p.vcpus[1].vcpu, 1);
        let [guest, host] = &p.objects[..] else {
            panic!("{:?}", p.objects)
        };
        assert_eq!(
            (guest.id, guest.total, guest.process.0),
            (3, 6, Some(0x5000))
        );
        assert_eq!((host.id, host.total, &host.affinity), (1, 5, &vec![1]));
        assert_eq!((host.source, host.source_name.as_str()), (0, "ProfileTime"));
        let m = &p.guest_modules[0];
        assert_eq!(
            (m.process.0, m.base.0, m.size.0, m.timestamp),
            (Some(0x7000), 0x7ff6_0000_0000, 0x3000, 0x5eed_1234)
        );
        assert_eq!(m.name, "app", "named after its PDB when it exports no name");
        assert_eq!(m.pdb.as_ref().map(|p| p.age), Some(2));
    }

    #[test]
    fn host_profiles_name_what_took_their_samples() {
        assert_eq!(host_source(None), (0, "ProfileTime"));
        assert_eq!(host_source(Some("cycles")), (0x13, "ProfileTotalCycles"));
        assert_eq!(host_source(Some("cpu-clock")), (0, "cpu-clock"));
    }

    /// Issue 40: a host profile restricted by `--process` was saved without its filter (its
    /// object said "all processes"), and counting nothing went unsaid.
    #[test]
    fn a_process_filter_was_not_saved_and_counting_nothing_unsaid() {
        let mut r = report();
        r.host_results[0].spec.process = vec!["awk".into(), "sed".into()];
        let p = profile(&r, &meta());
        let host = p
            .objects
            .iter()
            .find(|o| o.owner == report::ObjectOwner::Host)
            .unwrap();
        assert_eq!(host.process_names, ["awk", "sed"]);
        assert_eq!(host.scope(), "processes named awk, sed");
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains(r#""process_names":["awk","sed"]"#), "{json}");
        // It counted samples: nothing to warn about.
        assert!(r.process_filter_warnings().is_empty());
        // Nothing counted, processes named: none of that name ran.
        r.host_results[0].counts.clear();
        let w = r.process_filter_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("--process awk sed") && w[0].contains("no guest process of that name")
        );
        assert!(r.summary().contains(&format!("hvprof: warning: {}", w[0])));
        // No process ever named: the layout never came.
        r.processes[0].identified = false;
        let w = r.process_filter_warnings();
        assert!(w[0].contains("layout was never found"), "{w:?}");
        // A profile without a filter warns of nothing.
        r.host_results[0].spec.process.clear();
        assert!(r.process_filter_warnings().is_empty());
    }
}
