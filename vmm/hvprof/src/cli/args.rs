//! Argument types.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use profile_core::source::ProfileSource;
use vmm::boot::KernelSpec;
use vmm::config::{parse_disk, BootSource, SerialOutput, VmConfig};
use vmm::firmware::FirmwareSpec;
use vmm::profiler::host_profiles::HostProfileSpec;

/// Where the PDBs (and images) of PE modules are found.
#[derive(Args)]
pub struct SymbolArgs {
    /// Where PE modules' PDBs are found, in _NT_SYMBOL_PATH syntax: entries separated by `;`,
    /// each a directory, srv*CACHE*URL (an HTTP(S) symbol server), srv*STORE, or cache*DIR
    /// (default: the _NT_SYMBOL_PATH environment variable). A directory may also hold
    /// Volatility 3 ISF symbol packs, as trees or as windows.zip and linux.zip: Windows
    /// kernels' found by their PDB's GUID and age, Linux kernels' by the banner read from guest
    /// memory (symbols/linux/).
    #[arg(long, value_name = "PATH")]
    pub symbol_path: Option<String>,
    /// Deprecated: the same as --symbol-path DIR.
    #[arg(long, value_name = "DIR", hide = true, conflicts_with = "symbol_path")]
    pub symbol_dir: Option<PathBuf>,
    /// A Linux guest's root tree on the host (as perf's --symfs), where the ELF files its
    /// processes mapped are found for their symbols (and, during a run, the call-frame
    /// information their user stacks are unwound with); its absolute symbolic links resolve
    /// inside it. Repeatable; searched before the initramfs.
    #[arg(long, value_name = "DIR")]
    pub sysroot: Vec<PathBuf>,
    /// An initramfs (cpio, plain or gzip, xz or zstd) holding the files a Linux guest's
    /// processes mapped, for their symbols. A run also looks in the --initrd it booted.
    #[arg(long, value_name = "FILE")]
    pub initramfs: Option<PathBuf>,
    /// A Linux guest's disk image (raw or qcow2, read-only) whose ext2, ext3 or ext4 file
    /// system, bare or in an MBR or GPT partition, holds the files its processes mapped, for
    /// their symbols and, during a run, call-frame information. Repeatable; searched after
    /// --sysroot and --initramfs. A run also looks in the disks it gave the guest, after it.
    #[arg(long, value_name = "IMAGE")]
    pub disk_image: Vec<PathBuf>,
}

/// The system-call filter of the subcommands that read saved profiles.
#[derive(Args)]
pub struct FilterArgs {
    /// The results' system-call filter while the profiles (data a guest wrote) are read and
    /// turned into outputs: files and symbol servers only (off: for debugging a refused call
    /// only).
    #[arg(long, value_enum, default_value = "on")]
    pub seccomp: OnOff,
}

/// Options every VM-running subcommand shares.
#[derive(Args)]
pub struct VmArgs {
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1)]
    pub cpus: usize,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 256)]
    pub memory: u64,
    /// Where COM1's output goes: `stdout`, `null` or a file path.
    #[arg(long, default_value = "stdout")]
    pub serial: String,
    /// Log file for the debug console at port 0x402.
    #[arg(long)]
    pub debugcon: Option<PathBuf>,
    /// End the run (exit status 8) this many seconds after it began, the VM's set-up
    /// included.
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Serve the control API (HTTP + JSON) on this Unix socket, for its owner only.
    #[arg(long)]
    pub api_socket: Option<PathBuf>,
    /// A disk image (raw or qcow2, with its backing chain) as a virtio-blk PCI device:
    /// IMAGE[,readonly][,snapshot][,format=raw|qcow2]. Repeatable. The format is detected
    /// unless given. ,snapshot: the guest writes to a temporary overlay discarded at the end
    /// of the run and the image is never changed. Locked while the VM runs: exclusively, or
    /// shared with other readers with ,readonly or ,snapshot.
    #[arg(long = "disk", value_name = "IMAGE[,readonly][,snapshot][,format=F]")]
    pub disks: Vec<String>,
    /// System-call filters on every vCPU, event-loop and controller thread (off: for
    /// debugging a refused call only).
    #[arg(long, value_enum, default_value = "on")]
    pub seccomp: OnOff,
    /// What ProfileTime samples tick on: wall-clock time (as Windows' timer interrupt), or
    /// each vCPU thread's CPU time (nothing lost to host scheduling; needs perf events).
    /// Default: the CPU time with the in-kernel sampler, the wall clock with kicks.
    #[arg(long, value_enum)]
    pub clock: Option<ClockArg>,
    /// How samples are taken: in the host kernel, without stopping the vCPU, for whatever
    /// needs only the sampled RIP and privilege level (kernel); by kicking the vCPU out of
    /// the guest (kick); or the kernel's where its self-test passes at start (auto).
    #[arg(long, value_enum, default_value = "auto")]
    pub sampler: SamplerArg,
}

/// `--sampler`.
#[derive(Clone, Copy, ValueEnum)]
pub enum SamplerArg {
    /// The kernel's where it works, else kicks (saying why in one line).
    Auto,
    /// In-kernel samples (the run fails if they cannot be taken).
    Kernel,
    /// Kicks only.
    Kick,
}

/// `--clock`.
#[derive(Clone, Copy, ValueEnum)]
pub enum ClockArg {
    /// Wall-clock time.
    Wall,
    /// The vCPU thread's CPU time.
    Cpu,
}

/// `--scope` of `hvprof compare`.
#[derive(Clone, Copy, ValueEnum)]
pub enum ScopeArg {
    /// The guest agent's objects.
    Guest,
    /// hvprof's host-side profiles.
    Host,
    /// Both.
    All,
}

/// On or off.
#[derive(Clone, Copy, ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

impl From<OnOff> for vmm::seccomp::Seccomp {
    fn from(v: OnOff) -> Self {
        match v {
            OnOff::On => vmm::seccomp::Seccomp::On,
            OnOff::Off => vmm::seccomp::Seccomp::Off,
        }
    }
}

/// What to boot: a kernel hvprof loads, or firmware started at the reset vector.
#[derive(Args)]
pub struct BootArgs {
    /// The kernel to boot (PVH ELF, multiboot, Linux bzImage).
    #[arg(long, conflicts_with = "firmware")]
    pub kernel: Option<PathBuf>,
    /// An initrd (Linux) or first module (multiboot, PVH, the built-in reference guest).
    #[arg(long, conflicts_with = "firmware")]
    pub initrd: Option<PathBuf>,
    /// The kernel command line.
    #[arg(long)]
    pub cmdline: Option<String>,
    /// Firmware to boot from the reset vector: a ROM (SeaBIOS bios.bin) or, with --vars, a
    /// pflash CODE image (OVMF_CODE.fd).
    #[arg(long)]
    pub firmware: Option<PathBuf>,
    /// The writable pflash VARS image for --firmware (a copy of OVMF_VARS.fd); changes are
    /// written back to it.
    #[arg(long, requires = "firmware")]
    pub vars: Option<PathBuf>,
    /// Hyper-V enlightenments (default: on for --firmware, off for --kernel).
    #[arg(long, value_enum)]
    pub hyperv: Option<OnOff>,
    /// After "No bootable device", SeaBIOS reboots after this many milliseconds (a reboot
    /// ends the run with status 0); by default it waits forever, as QEMU's reboot-timeout.
    #[arg(long, value_name = "MS", requires = "firmware")]
    pub reboot_timeout: Option<u64>,
}

impl BootArgs {
    /// No boot options (the caller's default kernel boots).
    pub fn none() -> Self {
        BootArgs {
            kernel: None,
            initrd: None,
            cmdline: None,
            firmware: None,
            vars: None,
            hyperv: None,
            reboot_timeout: None,
        }
    }

    /// True when neither a kernel nor firmware was given.
    pub fn is_empty(&self) -> bool {
        self.kernel.is_none() && self.firmware.is_none()
    }

    /// The VM configuration: the kernel or firmware given, else `default` (a kernel).
    pub fn into_config(self, vm: VmArgs, default: Option<KernelSpec>) -> Result<VmConfig, String> {
        if self.firmware.is_some() && self.cmdline.is_some() {
            return Err("--cmdline needs --kernel (firmware has no command line)".into());
        }
        let boot = match (self.kernel, self.firmware, default) {
            (Some(k), _, _) => BootSource::Kernel(KernelSpec::from_file(
                k,
                self.initrd,
                self.cmdline.unwrap_or_default(),
            )),
            (None, Some(path), _) => BootSource::Firmware(FirmwareSpec {
                path,
                vars: self.vars,
            }),
            (None, None, Some(mut k)) => {
                if let Some(c) = self.cmdline {
                    k.cmdline = c;
                }
                if self.initrd.is_some() {
                    k.initrd = self.initrd;
                }
                BootSource::Kernel(k)
            }
            (None, None, None) => return Err("give --kernel FILE or --firmware FILE".into()),
        };
        let mut c = vm.into_config(boot)?;
        c.hyperv = self.hyperv.map(|h| matches!(h, OnOff::On));
        c.boot_fail_wait = self.reboot_timeout.map(Duration::from_millis);
        Ok(c)
    }
}

/// `hvprof run`.
#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub boot: BootArgs,
    #[command(flatten)]
    pub vm: VmArgs,
}

/// `hvprof demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// The reference guest's command line (selects the scenario).
    #[arg(long, default_value = vmm::refguest::DEFAULT_CMDLINE)]
    pub cmdline: String,
    /// Write profile.json, profile.pb.gz, flamegraph.svg and report.txt into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub vm: VmArgs,
}

/// `hvprof profile`.
#[derive(Args)]
pub struct ProfileArgs {
    /// What to boot (default: the bundled reference guest with its demo scenario).
    #[command(flatten)]
    pub boot: BootArgs,
    /// Profile for this many seconds, then stop the VM.
    #[arg(long, conflicts_with = "until_exit")]
    pub duration: Option<f64>,
    /// Profile until the guest ends the run (the default when --duration is absent).
    #[arg(long)]
    pub until_exit: bool,
    /// The sampling interval: ProfileTime's in 100 ns units (1000 to 10000000; default
    /// 39063), or with --event of a PMU source, events per sample (10000 to 2147483647;
    /// default 1000000). The built-in reference guest's scenarios that set ProfileTime's
    /// interval themselves are told the same (SCENARIO.interval=N on their command line).
    #[arg(long, value_name = "N")]
    pub interval: Option<u32>,
    /// What takes the host-side profile's samples: a perf event `hvprof events` lists as
    /// present (cycles, instructions, cpu-clock, ...); default: ProfileTime's clock.
    #[arg(long, value_name = "NAME", conflicts_with = "no_host_profile")]
    pub event: Option<String>,
    /// Host-side profile range START:LAST (inclusive, hex or decimal); default: everything.
    #[arg(long, value_name = "START:LAST")]
    pub range: Option<String>,
    /// Host-side profile bucket size as log2 bytes.
    #[arg(long, default_value_t = 4)]
    pub bucket: u32,
    /// Host-side profile of only this process (CR3).
    #[arg(long, conflicts_with = "process")]
    pub cr3: Option<String>,
    /// Host-side profile of only the guest processes of this name (the kernel's name:
    /// ImageFileName, comm; ASCII case ignored); repeatable. Resolved as processes appear:
    /// needs the guest kernel's layout (see --guest-os).
    #[arg(long, value_name = "NAME")]
    pub process: Vec<String>,
    /// Which guest kernel's processes and threads to name: auto, windows, linux or off
    /// (auto: Linux from a --kernel vmlinux with BTF or DWARF, else, when a symbol path is
    /// given, the kernel a sample shows: a Windows kernel's PDB or ISF file, or the Linux ISF
    /// file in a symbol pack whose banner is the guest's).
    #[arg(long, value_name = "OS", default_value = "auto")]
    pub guest_os: vmm::profiler::host_profiles::guest_awareness::layout_source::GuestOsChoice,
    /// The guest kernel's type information: a PDB (ntkrnlmp.pdb), a vmlinux, raw BTF (such as
    /// a guest's /sys/kernel/btf/vmlinux), or a Volatility 3 ISF file (.json, .json.xz, .json.gz).
    #[arg(long, value_name = "FILE")]
    pub guest_types: Option<PathBuf>,
    /// Host-side profile of only samples at this privilege level (3: user mode, 0: kernel).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub cpl: Option<u8>,
    /// No host-side profile: collect only the guest agent's objects.
    #[arg(long, conflicts_with_all = ["range", "bucket", "cr3", "cpl", "stack_depth", "process", "timeline", "stack_interval"])]
    pub no_host_profile: bool,
    /// Also record the host-side profile's samples on a time axis (time, vCPU, CPL, guest
    /// thread, stack) with the run's markers: halts, hypercalls, guest objects, pauses, slow
    /// exits (at most 2,000,000 samples and 100,000 markers, the rest counted as dropped).
    #[arg(long)]
    pub timeline: bool,
    #[command(flatten)]
    pub symbol_path: SymbolArgs,
    /// Call-stack frames walked per host-side sample, the sampled PC included (0: no stacks)
    #[arg(long, value_name = "N", default_value_t = vmm::profiler::host_profiles::DEFAULT_STACK_DEPTH)]
    pub stack_depth: usize,
    /// Where the host kernel's sampler runs (--sampler): take the samples that need the
    /// vCPU's registers (call stacks, process and thread names, --process, --cr3) by kicks
    /// every N (--interval's unit), while the kernel's own samples at --interval feed a flat
    /// profile of the same range beside it (a second host profile in the results). Elsewhere
    /// both profiles take every sample by kicks at --interval.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub stack_interval: Option<u32>,
    /// Where profile.json, profile.pb.gz, flamegraph.svg and report.txt go.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub vm: VmArgs,
}

/// `hvprof report`.
#[derive(Args)]
pub struct ReportArgs {
    /// The profile.json to read.
    pub profile: PathBuf,
    /// Disassemble the hottest buckets, counts beside each instruction.
    #[arg(long)]
    pub annotate: bool,
    /// An image (ELF, PE) or PDB to symbolize with, placed at BASE when given as FILE@0xBASE.
    #[arg(long = "symbols", value_name = "FILE[@0xBASE]")]
    pub symbols: Vec<report::SymbolSpec>,
    #[command(flatten)]
    pub symbol_path: SymbolArgs,
    /// Rows per table (and buckets annotated).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Also rewrite profile.json, profile.pb.gz, flamegraph.svg and report.txt into DIR with
    /// these symbols (for symbols found after the run).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the run's timeline instead of the tables: per vCPU and time bin, the top
    /// functions and guest processes (the run recorded with --timeline).
    #[arg(long)]
    pub timeline: bool,
    /// The timeline's bins in seconds (default: the run's phases, else 1 s).
    #[arg(long, value_name = "SECONDS", requires = "timeline", value_parser = parse_bin)]
    pub bin: Option<f64>,
    /// Also write the run's timeline as `perf script` text to FILE (as timeline.perf.txt, with
    /// these symbols), for speedscope, Perfetto, the Firefox Profiler or inferno.
    #[arg(long, value_name = "FILE")]
    pub perf_script: Option<PathBuf>,
    /// Also write the run's timeline in the Firefox Profiler's format to FILE (as
    /// timeline.fxprof.json, with these symbols).
    #[arg(long, value_name = "FILE")]
    pub fxprof: Option<PathBuf>,
    /// In the --perf-script text, a track per vCPU (`vcpuN 0/0`) instead of per guest thread:
    /// the whole machine's time axis in one view.
    #[arg(long, requires = "perf_script")]
    pub per_vcpu: bool,
    /// With --timeline, --perf-script or --fxprof: the timeline of this host profile (its
    /// object id), for a run in which several recorded one (default: every one for
    /// --timeline, the first for the files).
    #[arg(long, value_name = "ID")]
    pub object: Option<u64>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// A `--bin`: a positive, finite number of seconds.
fn parse_bin(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

/// A `--from` or `--to`: a finite number of seconds, not negative.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds from the run's start"
        )),
    }
}

/// `hvprof compare`.
#[derive(Args)]
pub struct CompareArgs {
    /// The baseline profile.json.
    pub base: PathBuf,
    /// The new profile.json.
    pub new: PathBuf,
    /// Smallest relative increase of a function's share that counts as a regression (%,
    /// 0 to 10000).
    #[arg(long, default_value_t = 10.0, value_parser = report::compare::significance::parse_threshold)]
    pub threshold: f64,
    /// Family-wise significance level of the test (strictly between 0 and 1).
    #[arg(long, default_value_t = 0.01, value_parser = report::compare::significance::parse_alpha)]
    pub alpha: f64,
    /// Samples (base + new) a function needs to be tested.
    #[arg(long, default_value_t = 20)]
    pub min_samples: u64,
    /// Smallest absolute increase of a function's share that counts (percentage points, 0 to
    /// 100).
    #[arg(long, default_value_t = 1.0, value_parser = report::compare::significance::parse_min_points)]
    pub min_points: f64,
    /// Which objects to compare: the guest agent's, hvprof's host-side profiles, or both.
    #[arg(long, value_enum, default_value = "all")]
    pub scope: ScopeArg,
    /// Write the Markdown summary here (it is always printed).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Write JUnit XML here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write diff-flamegraph.svg here: the new run's stacks, red where they grew, blue where
    /// they shrank.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Both profiles' guest modules are symbolized through it.
    #[command(flatten)]
    pub symbol_path: SymbolArgs,
    /// An image (ELF, PE) or PDB to name both profiles' stack frames with, placed at BASE
    /// when given as FILE@0xBASE: the kernel file of a `--kernel` run (the kernel path a
    /// saved profile records is never opened).
    #[arg(long = "symbols", value_name = "FILE[@0xBASE]")]
    pub symbols: Vec<report::SymbolSpec>,
    /// Compare only the samples from this many seconds after each run's start (both runs
    /// recorded with --timeline).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, conflicts_with = "phase")]
    pub from: Option<f64>,
    /// Compare only the samples before this many seconds after each run's start.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, conflicts_with = "phase")]
    pub to: Option<f64>,
    /// Compare only the samples inside each run's phase marker of this name (`kernel`).
    #[arg(long, value_name = "NAME")]
    pub phase: Option<String>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

impl CompareArgs {
    /// The time window asked for, if any.
    pub fn window(&self) -> Option<report::time_axis::window::Window> {
        use report::time_axis::window::Window;
        match (&self.phase, self.from, self.to) {
            (Some(name), _, _) => Some(Window::Phase(name.clone())),
            (None, None, None) => None,
            (None, from, to) => Some(Window::Seconds {
                from: from.unwrap_or(0.0),
                to,
            }),
        }
    }
}

/// `hvprof merge`.
#[derive(Args)]
pub struct MergeArgs {
    /// Where the merged profile.json goes.
    #[arg(long, short)]
    pub out: PathBuf,
    /// The profiles to merge.
    #[arg(required = true)]
    pub profiles: Vec<PathBuf>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `hvprof events`.
#[derive(Args)]
pub struct EventsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `hvprof bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Kicks of each kind per round (at least 1).
    #[arg(long, default_value_t = 500, value_parser = at_least_one())]
    pub kicks: usize,
    /// Rounds (at least 1).
    #[arg(long, default_value_t = 6, value_parser = at_least_one())]
    pub rounds: usize,
    /// Measure only the disk path: sequential and random 4 KiB reads from a qcow2 image
    /// against the same data in raw (no VM).
    #[arg(long)]
    pub disk: bool,
    /// Measure only what sampling costs the guest: its rate of work unprofiled, under perf
    /// kvm's events, and under hvprof's in-kernel and kick samplers at the same rate
    /// (--rounds rounds of each).
    #[arg(long, conflicts_with = "disk")]
    pub peer: bool,
    /// With --peer: samples per second of each vCPU thread's CPU time.
    #[arg(long, default_value_t = 10_000, requires = "peer", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rate: u32,
    /// With --peer: milliseconds the guest works in each run.
    #[arg(long, default_value_t = 1000, requires = "peer", value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub ms: u64,
}

impl VmArgs {
    /// The VM configuration that boots `boot`.
    pub fn into_config(self, boot: BootSource) -> Result<VmConfig, String> {
        let mut c = VmConfig::with_boot(boot);
        c.cpus = self.cpus;
        c.memory_mib = self.memory;
        c.serial = match self.serial.as_str() {
            "stdout" => SerialOutput::Stdout,
            "null" => SerialOutput::Null,
            path => SerialOutput::File(path.into()),
        };
        c.debugcon = self.debugcon;
        c.seccomp = self.seccomp.into();
        c.clock = self.clock.map(|c| match c {
            ClockArg::Wall => vmm::sampler::Clock::Wall,
            ClockArg::Cpu => vmm::sampler::Clock::Cpu,
        });
        c.sampler = match self.sampler {
            SamplerArg::Auto => vmm::sampler::SamplerChoice::Auto,
            SamplerArg::Kernel => vmm::sampler::SamplerChoice::Kernel,
            SamplerArg::Kick => vmm::sampler::SamplerChoice::Kick,
        };
        c.disks = self
            .disks
            .iter()
            .map(|d| parse_disk(d).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        c.timeout = match self.timeout {
            None => None,
            Some(s) => Some(seconds("--timeout", s)?),
        };
        Ok(c)
    }
}

/// A count of 1 or more.
fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..)
}

/// A positive, finite number of seconds that fits a `Duration`.
pub fn seconds(flag: &str, s: f64) -> Result<Duration, String> {
    match Duration::try_from_secs_f64(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(format!(
            "{flag} must be a positive number of seconds, not {s}"
        )),
    }
}

/// Parses `0x...` or decimal.
pub fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => t.replace('_', "").parse(),
    };
    r.map_err(|_| format!("not a number: {s:?}"))
}

impl ProfileArgs {
    /// `--interval` with its source (ProfileTime, or the PMU source `--event` names),
    /// checked against that source's range: a value the profiler would clamp is refused
    /// rather than changed without a word.
    pub fn checked_interval(&self) -> Result<Option<(ProfileSource, u32)>, String> {
        let Some(interval) = self.interval else {
            return Ok(None);
        };
        let source = vmm::sampler::events::interval_source(self.event.as_deref());
        let (info, unit) = if source == ProfileSource::TIME {
            (
                profile_core::source::SourceInfo::profile_time(),
                "ProfileTime's interval in 100 ns units",
            )
        } else {
            (
                vmm::sampler::pmu_source_info(source),
                "events per sample of --event's source",
            )
        };
        if (info.min_interval..=info.max_interval).contains(&interval) {
            Ok(Some((source, interval)))
        } else {
            Err(format!(
                "--interval {interval}: {unit} must be from {} to {}",
                info.min_interval, info.max_interval
            ))
        }
    }

    /// The host-side profiles the options describe: none, the one, or with --stack-interval
    /// that one (its samples by kicks at that interval) and a flat one of the same range.
    pub fn host_profiles(&self) -> Result<Vec<HostProfileSpec>, String> {
        let Some(mut spec) = self.host_profile()? else {
            return Ok(Vec::new());
        };
        let Some(every) = self.stack_interval else {
            return Ok(vec![spec]);
        };
        spec.kick_interval = Some(every);
        let flat = HostProfileSpec {
            cr3: None,
            process: Vec::new(),
            stack_depth: 0,
            timeline: false,
            names: false,
            kick_interval: None,
            ..spec.clone()
        };
        Ok(vec![spec, flat])
    }

    /// The host-side profile the options describe, without --stack-interval's companion.
    fn host_profile(&self) -> Result<Option<HostProfileSpec>, String> {
        if self.no_host_profile {
            return Ok(None);
        }
        let mut spec = HostProfileSpec::whole_space();
        if let Some(r) = &self.range {
            let (a, b) = r
                .split_once(':')
                .ok_or_else(|| format!("--range {r:?}: want START:LAST"))?;
            spec.start = parse_u64(a)?;
            spec.last = parse_u64(b)?;
        }
        spec.bucket_shift = self.bucket;
        spec.cr3 = self.cr3.as_deref().map(parse_u64).transpose()?;
        spec.cpl = self.cpl;
        spec.stack_depth = self.stack_depth;
        spec.event = self.event.clone();
        spec.process.clone_from(&self.process);
        spec.timeline = self.timeline;
        spec.validate().map_err(|e| e.to_string())?;
        Ok(Some(spec))
    }
}
