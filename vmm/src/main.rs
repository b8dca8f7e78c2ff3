//! The `hvprof` command line: parses arguments and calls the `vmm` library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use vmm::boot::KernelSpec;
use vmm::config::{BootSource, SerialOutput, VmConfig};
use vmm::firmware::FirmwareSpec;
use vmm::outcome::STATUS_CONFIG_ERROR;

/// hvprof: a KVM hypervisor that profiles its guests from outside.
#[derive(Parser)]
#[command(name = "hvprof", version, about)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot a kernel (PVH ELF, multiboot or Linux bzImage) or firmware (SeaBIOS, OVMF) and run
    /// it to its end.
    Run(RunArgs),
    /// Run the bundled reference guest's default scenario.
    Demo(DemoArgs),
    /// Measure hvprof's sample and hypercall paths against same-run baselines.
    Bench(BenchArgs),
}

#[derive(Args)]
struct BenchArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Kicks of each kind per round.
    #[arg(long, default_value_t = 500)]
    kicks: usize,
    /// Rounds.
    #[arg(long, default_value_t = 6)]
    rounds: usize,
}

#[derive(Args)]
struct VmArgs {
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1)]
    cpus: usize,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 256)]
    memory: u64,
    /// Where COM1's output goes: `stdout` or a file path.
    #[arg(long, default_value = "stdout")]
    serial: String,
    /// Log file for the debug console at port 0x402.
    #[arg(long)]
    debugcon: Option<PathBuf>,
    /// End the run (exit status 8) after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
}

#[derive(Clone, Copy, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Args)]
#[command(group(ArgGroup::new("boot").required(true).args(["kernel", "firmware"])))]
struct RunArgs {
    /// The kernel to boot.
    #[arg(long)]
    kernel: Option<PathBuf>,
    /// An initrd (Linux) or first module (multiboot, PVH).
    #[arg(long, requires = "kernel")]
    initrd: Option<PathBuf>,
    /// The kernel command line.
    #[arg(long, default_value = "", requires = "kernel")]
    cmdline: String,
    /// Firmware to boot from the reset vector: a ROM (SeaBIOS bios.bin) or, with --vars, a
    /// pflash CODE image (OVMF_CODE.fd).
    #[arg(long)]
    firmware: Option<PathBuf>,
    /// The writable pflash VARS image for --firmware (a copy of OVMF_VARS.fd); changes are
    /// written back to it.
    #[arg(long, requires = "firmware")]
    vars: Option<PathBuf>,
    /// Hyper-V enlightenments (default: on for --firmware, off for --kernel).
    #[arg(long, value_enum)]
    hyperv: Option<OnOff>,
    /// After "No bootable device", SeaBIOS reboots after this many milliseconds (a reboot
    /// ends the run with status 0); by default it waits forever, as QEMU's reboot-timeout.
    #[arg(long, value_name = "MS", requires = "firmware")]
    reboot_timeout: Option<u64>,
    #[command(flatten)]
    vm: VmArgs,
}

#[derive(Args)]
struct DemoArgs {
    /// The reference guest's command line (selects the scenario).
    #[arg(long, default_value = vmm::demo::DEFAULT_CMDLINE)]
    cmdline: String,
    #[command(flatten)]
    vm: VmArgs,
}

impl VmArgs {
    fn into_config(self, kernel: KernelSpec) -> Result<VmConfig, String> {
        self.into_config_with(BootSource::Kernel(kernel))
    }

    fn into_config_with(self, boot: BootSource) -> Result<VmConfig, String> {
        let mut c = VmConfig::with_boot(boot);
        c.cpus = self.cpus;
        c.memory_mib = self.memory;
        c.serial = match self.serial.as_str() {
            "stdout" => SerialOutput::Stdout,
            "null" => SerialOutput::Null,
            path => SerialOutput::File(path.into()),
        };
        c.debugcon = self.debugcon;
        c.timeout = match self.timeout {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
            Some(s) => {
                return Err(format!(
                    "--timeout must be a positive number of seconds, not {s}"
                ))
            }
        };
        Ok(c)
    }
}

fn exit_code(status: i32) -> ExitCode {
    ExitCode::from(u8::try_from(status & 0xff).unwrap_or(u8::MAX))
}

fn bench(a: &BenchArgs) -> ExitCode {
    let opts = vmm::bench::BenchOptions {
        kicks: a.kicks,
        rounds: a.rounds,
        ..Default::default()
    };
    match vmm::bench::run(&opts) {
        Ok(r) if a.json => {
            println!("{}", r.to_json());
            ExitCode::SUCCESS
        }
        Ok(r) => {
            println!("sample path:    {:>9.0} ns full vs {:>9.0} ns bare kick (median of {} each; p90 {:.0} vs {:.0})", r.kick_full_ns, r.kick_bare_ns, r.kicks, r.kick_full_p90_ns, r.kick_bare_p90_ns);
            println!("sample_ratio    {:>9.3}   (target <= 1.15)", r.sample_ratio);
            println!("hypercall path: {:>9.0} ns full vs {:>9.0} ns bare port-I/O exit (guest-measured medians)", r.hypercall_ns, r.io_exit_ns);
            println!(
                "hypercall_ratio {:>9.3}   (target <= 1.2)",
                r.hypercall_ratio
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hvprof: error: {:#}", anyhow::Error::from(e));
            exit_code(vmm::outcome::STATUS_HOST_ERROR)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        .init();

    let (config, demo) = match cli.command {
        Command::Bench(a) => return bench(&a),
        Command::Run(a) => {
            let boot = match (a.kernel, a.firmware) {
                (Some(kernel), _) => {
                    BootSource::Kernel(KernelSpec::from_file(kernel, a.initrd, a.cmdline))
                }
                (None, Some(path)) => BootSource::Firmware(FirmwareSpec { path, vars: a.vars }),
                (None, None) => unreachable!("clap requires --kernel or --firmware"),
            };
            let hyperv = a.hyperv.map(|h| matches!(h, OnOff::On));
            let wait = a.reboot_timeout.map(Duration::from_millis);
            let config = a.vm.into_config_with(boot).map(|mut c| {
                c.hyperv = hyperv;
                c.boot_fail_wait = wait;
                c
            });
            (config, false)
        }
        Command::Demo(a) => (a.vm.into_config(vmm::demo::kernel_spec(&a.cmdline)), true),
    };
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hvprof: error: {e}");
            return exit_code(STATUS_CONFIG_ERROR);
        }
    };

    if let Some(notice) = vmm::vm::hyperv_notice(&config) {
        eprintln!("hvprof: {notice}");
    }
    match vmm::vm::run(&config) {
        Ok(report) => {
            if !report.results.is_empty() {
                let symbols = config
                    .kernel()
                    .map(vmm::report::Symbols::for_kernel)
                    .unwrap_or_default();
                print!(
                    "{}",
                    vmm::report::text_report(&report.results, &symbols, 10)
                );
            }
            eprint!("{}", report.summary());
            if report.outcome.is_error() {
                eprintln!("hvprof: error: {}", report.outcome);
            }
            let status = if demo {
                vmm::demo::exit_status(&report.outcome)
            } else {
                report.outcome.exit_status()
            };
            exit_code(status)
        }
        Err(e) => {
            let status = e.exit_status();
            eprintln!("hvprof: error: {:#}", anyhow::Error::from(e));
            exit_code(status)
        }
    }
}
