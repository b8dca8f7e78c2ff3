//! The `hvprof` binary: argument parsing only; everything else is the `vmm` library (and
//! the `report` crate for the subcommands that read saved profiles).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
