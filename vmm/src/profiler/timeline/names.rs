//! What markers say: hypercalls by the ABI's call names with the NTSTATUS they returned, and
//! the port or MMIO access of a slow exit.

use kvm_ioctls::VcpuExit;
use profile_core::{abi, NtStatus};

/// The ABI's name of hypercall `call` (docs/abi.md), None for a number it does not define.
pub fn call_name(call: u32) -> Option<&'static str> {
    Some(match call {
        abi::CALL_QUERY_INFO => "QUERY_INFO",
        abi::CALL_CREATE => "CREATE",
        abi::CALL_CREATE_EX => "CREATE_EX",
        abi::CALL_START => "START",
        abi::CALL_STOP => "STOP",
        abi::CALL_CLOSE => "CLOSE",
        abi::CALL_SET_INTERVAL => "SET_INTERVAL",
        abi::CALL_QUERY_INTERVAL => "QUERY_INTERVAL",
        abi::CALL_SET_INTERRUPT => "SET_INTERRUPT",
        abi::CALL_READ_STATS => "READ_STATS",
        _ => return None,
    })
}

/// A hypercall marker's name: `QUERY_INTERVAL -> STATUS_SUCCESS`; a call whose number was
/// not read is `?`, one the ABI does not define `call 0x..`, a status without a name its hex.
pub fn hypercall_marker(call: Option<u32>, status: NtStatus) -> String {
    let call = match call {
        Some(c) => call_name(c).map_or_else(|| format!("call {c:#x}"), str::to_string),
        None => "?".to_string(),
    };
    match status.name() {
        Some(s) => format!("{call} -> STATUS_{s}"),
        None => format!("{call} -> {:#010x}", status.0),
    }
}

/// A port or MMIO access, as a slow exit's marker names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitSite {
    /// A port read (true: write) of a port.
    Port(u16, bool),
    /// An MMIO read (true: write) at a guest-physical address.
    Mmio(u64, bool),
}

impl ExitSite {
    /// The access an exit made, None for any other exit.
    pub fn of(exit: &VcpuExit<'_>) -> Option<Self> {
        match exit {
            VcpuExit::IoIn(port, _) => Some(ExitSite::Port(*port, false)),
            VcpuExit::IoOut(port, _) => Some(ExitSite::Port(*port, true)),
            VcpuExit::MmioRead(addr, _) => Some(ExitSite::Mmio(*addr, false)),
            VcpuExit::MmioWrite(addr, _) => Some(ExitSite::Mmio(*addr, true)),
            _ => None,
        }
    }

    /// `port 0x3f8 write`, `mmio 0xfebf0000 read`.
    pub fn name(self) -> String {
        let rw = |w: bool| if w { "write" } else { "read" };
        match self {
            ExitSite::Port(p, w) => format!("port {p:#x} {}", rw(w)),
            ExitSite::Mmio(a, w) => format!("mmio {a:#x} {}", rw(w)),
        }
    }
}
