//! The `hvprof` binary: argument parsing only; everything else is the `vmm` library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
