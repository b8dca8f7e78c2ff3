//! The VMM's side of the doorbell for guest-agent/windows/emulator, the emulated NT kernel that
//! runs hvprof.sys: the real doorbell (a vCPU's, `vmm::vcpu::doorbell`) and the real hypercall
//! handling (profile-core's object manager behind `vmm::profiler::Profiler`) over guest RAM
//! that the emulator shares.
//!
//! The emulator creates a memfd of `--ram-mib` MiB, passes it as descriptor `--ram-fd`, maps it
//! into its CPU; this program maps the same file as guest RAM (one region at guest-physical 0),
//! so request blocks and pinned counters are the same bytes on both sides. One command per line
//! on stdin, one answer per line on stdout:
//!
//! - `out OFFSET VALUE CR3`: a 32-bit OUT to the doorbell's port base + OFFSET by vCPU 0 at CPL0,
//!   whose address space is CR3; a ring runs the call at once. Answer: `ok` or `ring STATUS`.
//! - `in OFFSET`: a 32-bit IN; answer: the value.
//! - `tick RIP CR3`: one ProfileTime sample on vCPU 0 at RIP (kernel mode). Answer: `ok`.
//! - `map`: the guest's memory map; answer: `START-END:KIND` entries separated by spaces.
//!
//! Not a user tool: built and run only by the emulator's test suite.

use std::fs::File;
use std::io::{BufRead, Write};
use std::os::fd::FromRawFd;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use introspect::paging::Paging;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap};
use vmm::arch::cpu_state::CpuState;
use vmm::memory::memory_map;
use vmm::profiler::Profiler;
use vmm::sampler::probe::ProbeReport;
use vmm::sampler::Sampling;
use vmm::signals::KickTable;
use vmm::vcpu::doorbell::{Doorbell, DoorbellPorts};

/// CR0.PE | CR0.WP | CR0.PG: a Windows kernel's paging mode.
const CR0: u64 = 0x8001_0001;
/// CR4.PAE.
const CR4: u64 = 0x20;
/// EFER.LME | EFER.LMA.
const EFER: u64 = 0x500;

fn number(s: Option<&str>) -> Result<u64> {
    let s = s.context("missing argument")?;
    let v = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    v.with_context(|| format!("not a number: {s}"))
}

fn cpu(cr3: u64, rip: u64) -> CpuState {
    CpuState {
        rip,
        cpl: 0,
        paging: Paging {
            cr0: CR0,
            cr3,
            cr4: CR4,
            efer: EFER,
        },
        ..CpuState::default()
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (mib, fd): (u64, i32) = match args.as_slice() {
        [_, m, mib, f, fd] if m == "--ram-mib" && f == "--ram-fd" => (
            mib.parse().context("--ram-mib")?,
            fd.parse().context("--ram-fd")?,
        ),
        _ => bail!("usage: emu_doorbell --ram-mib N --ram-fd FD (guest RAM, a memfd)"),
    };
    if fd < 3 {
        bail!("--ram-fd {fd} is a standard stream");
    }
    let size = mib << 20;
    // SAFETY: the emulator passes its memfd as descriptor `fd` (not a standard stream, checked
    // above) and nothing else in this process owns that descriptor.
    let file = unsafe { File::from_raw_fd(fd) };
    let len = usize::try_from(size).context("RAM size")?;
    let mem = GuestMemoryMmap::from_ranges_with_files([(
        GuestAddress(0),
        len,
        Some(FileOffset::new(file, 0)),
    )])
    .context("mapping the emulator's RAM")?;
    let kvm = kvm_ioctls::Kvm::new().context("opening /dev/kvm (the profiler holds a VM)")?;
    let vm = Arc::new(kvm.create_vm().context("creating a VM")?);
    let profiler = Profiler::new(
        mem,
        vm,
        Arc::new(KickTable::new(1)),
        Arc::new(Sampling::timer_only()),
        Arc::new(ProbeReport { events: Vec::new() }),
        vmm::clock::RunClock::start(),
    )?;
    // vCPU 0's doorbell: the command's OFFSET is relative to its ports.
    let mut doorbell = Doorbell::new(DoorbellPorts::ABI);

    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        let mut words = line.split_whitespace();
        let answer = match words.next() {
            Some("out") => {
                // Beyond the ports, as any offset past 7: ignored, or all ones.
                let offset = u16::try_from(number(words.next())?).unwrap_or(u16::MAX);
                let value = u32::try_from(number(words.next())?).context("OUT value")?;
                let cr3 = number(words.next())?;
                match doorbell.write(offset, &value.to_le_bytes()) {
                    Some(gpa) => {
                        let status = profiler.hypercall(0, gpa, &cpu(cr3, 0));
                        doorbell.set_status(status.0);
                        format!("ring {:#x}", status.0)
                    }
                    None => "ok".to_string(),
                }
            }
            Some("in") => {
                let offset = u16::try_from(number(words.next())?).unwrap_or(u16::MAX);
                let mut data = [0u8; 4];
                doorbell.read(offset, &mut data);
                format!("{:#x}", u32::from_le_bytes(data))
            }
            Some("tick") => {
                let rip = number(words.next())?;
                let cr3 = number(words.next())?;
                let tick = vmm::sampler::vcpu::Ticks {
                    trigger: 0,
                    ticks: 1,
                    folded: 0,
                    beside_ring: false,
                };
                profiler.on_tick(0, &cpu(cr3, rip), tick);
                "ok".to_string()
            }
            Some("map") => memory_map(size)
                .iter()
                .map(|e| format!("{:#x}-{:#x}:{}", e.addr, e.addr + e.size, e.kind as u32))
                .collect::<Vec<_>>()
                .join(" "),
            _ => bail!("unknown command: {line}"),
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(())
}
