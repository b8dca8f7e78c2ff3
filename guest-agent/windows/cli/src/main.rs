//! `hvprof-agent.exe`: parses the command line and hands the work to the library.

use hvprof_agent::args::{self, Action};

fn main() {
    let action = match args::parse(std::env::args().skip(1)) {
        Ok(action) => action,
        Err(e) => {
            eprintln!("hvprof-agent: {}", e);
            std::process::exit(2);
        }
    };
    match action {
        Action::Help => print!("{}", args::USAGE),
        Action::Version => println!("hvprof-agent {}", hvprof_agent::VERSION),
        other => std::process::exit(run(other)),
    }
}

#[cfg(windows)]
fn run(action: Action) -> i32 {
    hvprof_agent::windows::run(action)
}

#[cfg(not(windows))]
fn run(_: Action) -> i32 {
    eprintln!(
        "hvprof-agent: this build is not for Windows; it only parses arguments. \
         Build hvprof-agent.exe with guest-agent/windows/build.sh."
    );
    1
}
