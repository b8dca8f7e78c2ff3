//! The session code (`hvprof_agent::session`) driven against the emulated NT kernel of
//! guest-agent/windows/emulator: the IOCTLs go to the emulated hvprof.sys, the counters live in
//! an emulated process, the token is that process's. One request per line on stdout, one
//! answer per line on stdin:
//!
//! - `ioctl CODE INPUT_HEX OUTPUT_LEN` -> `ok OUTPUT_HEX` or `err STATUS`
//! - `privilege` -> `ok 1` (held, now enabled) or `ok 0` (not held)
//! - `alloc BYTES` -> `ok ADDRESS`; `write ADDRESS VALUE` -> `ok`; `read ADDRESS` -> `ok VALUE`
//! - `wait` -> `ok` (the emulator takes its samples while the object is started)
//!
//! Usage: emulated_session kernel | process PID BASE SIZE. Prints `counts N...` or `error ...`.
//! Not a user tool: the emulator's tests run it.

use std::io::Write;

use hvprof_agent::plan::{plan, Region};
use hvprof_agent::session::{run, Device, Host};
use hvprof_ioctl::NtStatus;

/// The emulator at the other end of stdin/stdout (stdin's buffer is shared, so any number of
/// these may exist).
struct Emulator;

impl Emulator {
    fn ask(&self, line: String) -> String {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .expect("stdout");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).expect("stdin");
        answer.trim().to_string()
    }

    fn ok(&self, line: String) -> String {
        let a = self.ask(line);
        a.strip_prefix("ok")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| panic!("{a}"))
    }
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn number(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).expect("hex"),
        None => s.parse().expect("number"),
    }
}

impl Device for Emulator {
    fn ioctl(&mut self, code: u32, input: &[u8], output: &mut [u8]) -> Result<usize, NtStatus> {
        let a = self.ask(format!("ioctl {code:#x} {} {}", hex(input), output.len()));
        match a.split_once(' ') {
            Some(("ok", data)) => {
                let data = if data == "-" { "" } else { data };
                let bytes: Vec<u8> = (0..data.len() / 2)
                    .map(|i| u8::from_str_radix(&data[2 * i..2 * i + 2], 16).expect("hex"))
                    .collect();
                output[..bytes.len()].copy_from_slice(&bytes);
                Ok(bytes.len())
            }
            _ => Err(NtStatus(u32::try_from(number(&a[4..])).expect("status"))),
        }
    }
}

impl Host for Emulator {
    fn enable_profile_privilege(&mut self) -> Result<bool, String> {
        Ok(self.ok("privilege".into()) == "1")
    }
    fn alloc_counters(&mut self, n: usize) -> Result<u64, String> {
        Ok(number(&self.ok(format!("alloc {}", n * 4))))
    }
    fn write_u32(&mut self, addr: u64, value: u32) {
        self.ok(format!("write {addr:#x} {value}"));
    }
    fn read_u32(&self, addr: u64) -> u32 {
        u32::try_from(number(&self.ok(format!("read {addr:#x}")))).expect("u32")
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let region = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["kernel"] => Region {
            name: "nt".into(),
            base: 0xFFFF_F800_0000_0000,
            size: 0x10000,
            process_id: 0,
        },
        ["process", pid, base, size] => Region {
            name: "range".into(),
            base: number(base),
            size: number(size),
            process_id: u32::try_from(number(pid)).expect("pid"),
        },
        _ => panic!("usage: emulated_session kernel | process PID BASE SIZE"),
    };
    let plan = plan(region, 2, 0).expect("plan");
    let result = run(&mut Emulator, &mut Emulator, &plan, None, || {
        Emulator.ok("wait".into());
        Ok(())
    });
    let mut out = std::io::stdout().lock();
    let line = match result {
        Ok(o) => format!(
            "counts {}",
            o.counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c != 0)
                .map(|(i, c)| format!("{i}:{c}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Err(e) => format!("error {e}"),
    };
    writeln!(out, "{line}").expect("stdout");
}
