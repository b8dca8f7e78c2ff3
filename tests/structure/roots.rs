//! Every checked source root and its floors, in one place. A module may use only modules on
//! lower floors (0 is the bottom); the crate root (`lib.rs`, `main.rs`) sits above every floor.
//! Every folder below a root gets the circle check without a table of its own.
//!
//! To check another root, add a [`Root`] to [`ROOTS`]: its folder, a floor for each of its
//! top-level modules (the test names any module without one), and `known: &[]`.

use super::graph::Root;

/// The roots the structure tests check.
pub const ROOTS: &[Root] = &[
    VMM,
    DEVICES,
    BENCH,
    HVPROF,
    DRIVER,
    REFGUEST,
    REPORT,
    INTROSPECT,
    PROFILE_CORE,
    GUEST_AGENT,
    FILES,
    WINDOWS_CLI,
];

/// The VMM library (vmm).
const VMM: Root = Root {
    dir: "vmm/src",
    floors: &[
        // Foundations: no imports from the crate.
        ("layout", 0),
        ("clock", 0),
        ("outcome", 0),
        ("signals", 0),
        // What a guest is made of.
        ("memory", 1),
        ("seccomp", 1),
        // Sample sources: the host's timers and perf events (what `config` chooses among).
        ("sampler", 1),
        ("boot", 2),
        ("config", 3),
        ("refguest", 3),
        // The machine: CPU state and entry; its tables and firmware (the devices are a crate).
        ("arch", 4),
        ("acpi", 5),
        ("firmware", 6),
        // Profiling.
        ("profiler", 7),
        // Running it.
        ("vcpu", 8),
        ("vm", 9),
        // Driving it.
        ("session", 10),
        // Handing a run to the report crate (a crate of its own, below everything here).
        ("report_input", 10),
        ("api", 11),
        // Watching a run through the API (`hvprof top`).
        ("top", 12),
    ],
    known: &[],
};

/// The devices (vmm/devices).
const DEVICES: Root = Root {
    dir: "vmm/devices/src",
    floors: &[
        // Bytes, dates, and what a guest may ask the machine to do.
        ("bytes", 0),
        ("calendar", 0),
        ("stop", 0),
        // The address-range bus every device sits on.
        ("bus", 1),
        // One device per file.
        ("acpi_pm", 2),
        ("cmos", 2),
        ("debug_exit", 2),
        ("debugcon", 2),
        ("i8042", 2),
        ("reset", 2),
        ("serial", 2),
        ("fw_cfg", 2),
        // PCI, then the virtio devices on it.
        ("pci", 3),
        ("virtio", 4),
    ],
    known: &[],
};

/// `hvprof bench` (vmm/bench).
const BENCH: Root = Root {
    dir: "vmm/bench/src",
    floors: &[
        ("quantiles", 0),
        ("guest_line", 0),
        ("observer", 0),
        ("pe", 0),
        ("naming", 0),
        ("disk", 1),
        // Sampling's cost to the guest against perf kvm's (`hvprof bench --peer`).
        ("peer", 1),
    ],
    known: &[],
};

/// The `hvprof` binary (vmm/hvprof): its command line.
const HVPROF: Root = Root {
    dir: "vmm/hvprof/src",
    floors: &[("cli", 0)],
    known: &[],
};

/// The Windows kernel driver (built by guest-agent/windows/build.sh, not by cargo).
const DRIVER: Root = Root {
    dir: "guest-agent/windows/driver/src",
    floors: &[
        // The NT kernel's types and routines.
        ("nt", 0),
        // Locking a caller's buffer; the driver's global state.
        ("mdl", 1),
        ("state", 1),
        // The VMM through guest-agent's client: the doorbell, the request block.
        ("vmm", 2),
        // The I/O manager's requests: IOCTLs and opens, PnP and power.
        ("dispatch", 3),
        ("pnp", 3),
        // DriverEntry's work and DriverUnload: wiring the routines above into the driver.
        ("entry", 4),
    ],
    known: &[],
};

/// The reference guest (built by vmm/build.rs); scenario/ and user/ are folders of their own.
const REFGUEST: Root = Root {
    dir: "images/refguest/src",
    floors: &[
        // Instructions; the CPL3 workloads (they import nothing of the kernel); memcpy & co.
        ("cpu", 0),
        ("user", 0),
        ("mem", 0),
        ("apic", 1),
        ("sync", 1),
        // The console (and `println!`), boot page tables, the boot parameters, PE images.
        ("serial", 2),
        ("boot", 2),
        ("start_info", 2),
        ("pe", 2),
        ("exit", 3),
        ("percpu", 3),
        ("paging", 3),
        ("acpi", 4),
        ("gdt", 4),
        // The GS bases a Windows kernel keeps (scenario ntprocs), written at trap entry and exit.
        ("gs", 4),
        ("prof", 4),
        ("idt", 5),
        ("time", 6),
        // Processes and system calls; the scenario reaches them through hooks set at boot.
        ("sched", 6),
        ("syscall", 7),
        ("smp", 8),
        ("trap", 8),
        ("scenario", 9),
    ],
    known: &[],
};

/// The report crate (vmm/report).
const REPORT: Root = Root {
    dir: "vmm/report/src",
    floors: &[
        // A run on a time axis: plain data, what the VMM hands over.
        ("timeline", 0),
        ("hex", 0),
        ("chain", 0),
        ("sanitize", 0),
        // Bounded decompression (xz, gzip, zstd) of ISF tables and initramfs archives.
        ("unpack", 0),
        ("symbols", 1),
        ("profile", 2),
        // A profile's processes and threads, and their totals (what input and validate fill
        // in and check).
        ("processes", 3),
        ("input", 4),
        ("validate", 4),
        ("error", 5),
        ("flame", 6),
        ("json", 6),
        ("load", 6),
        ("pprof", 6),
        ("callers", 7),
        // What is made of a timeline: its files, a text timeline, windows of a profile.
        ("time_axis", 7),
        ("text", 8),
        ("annotate", 9),
        ("compare", 9),
    ],
    known: &[],
};

/// The file-safety crate (vmm/files).
const FILES: Root = Root {
    dir: "vmm/files/src",
    floors: &[
        // File kinds and flags; what stands at a path; the test's scratch nodes.
        ("fd", 0),
        ("target", 1),
        ("testdir", 0),
        ("identity", 1),
        // Opens that block only once checked: logs, disk images; bounded inputs. The
        // temporaries' naming, and those a killed writer left.
        ("stream", 1),
        ("bounded", 1),
        ("leftovers", 1),
        // Atomic outputs.
        ("atomic", 2),
    ],
    known: &[],
};

/// The introspect crate (vmm/introspect).
const INTROSPECT: Root = Root {
    dir: "vmm/introspect/src",
    floors: &[
        ("mem", 0),
        ("regs", 0),
        // Little-endian integers from byte slices.
        ("bytes", 0),
        // The page-table walker, over a physical-memory trait of its own.
        ("paging", 0),
        // The PE image builder for tests and the bench (feature test-support).
        ("testimage", 0),
        // Guest kernels' processes and threads: structure layouts (plain data), list walks,
        // the Windows and Linux readers, the per-vCPU identification cache.
        ("os", 1),
        ("fp", 1),
        // ELF files' call-frame information (over mem and regs).
        ("cfi", 1),
        ("pe", 1),
        // Synthetic Windows and Linux guests with page tables (feature test-support).
        ("testguest", 2),
        ("images", 2),
        ("nt", 2),
        ("x64", 2),
        ("walk", 3),
    ],
    known: &[],
};

/// profile-core.
const PROFILE_CORE: Root = Root {
    dir: "profile-core/src",
    floors: &[
        ("handle", 0),
        ("source", 0),
        ("status", 0),
        ("affinity", 1),
        // The wire format (what a `no_std` driver links, without `alloc`); it knows nothing of
        // the object manager.
        ("abi", 2),
        // What a count is made of: the sample, the counter sink, the bucket offset.
        ("attribution", 3),
        // The object manager: the NT semantics, its index of started objects, the counting
        // (`record`, `record_naive`) and the wire format's requests as its parameters.
        ("object", 4),
    ],
    known: &[],
};

/// The guest side of the ABI (guest-agent).
const GUEST_AGENT: Root = Root {
    dir: "guest-agent/src",
    floors: &[
        ("error", 0),
        ("doorbell", 1),
        ("memory", 1),
        ("params", 1),
        ("discovery", 2),
        ("client", 2),
    ],
    known: &[],
};

/// The Windows guest agent's command line (guest-agent/windows/cli; built for Windows by
/// guest-agent/windows/build.sh, its pure parts tested on Linux).
const WINDOWS_CLI: Root = Root {
    dir: "guest-agent/windows/cli/src",
    floors: &[
        // Numbers and NTSTATUS text; the kernel's module list; what to profile.
        ("number", 0),
        ("ntstatus", 0),
        ("modules", 0),
        ("plan", 0),
        // Source names (read as numbers too); the IOCTL sequence over a device.
        ("sources", 1),
        ("session", 1),
        // The command line and the result file name sources; the table reads the result file.
        ("args", 2),
        ("result_file", 2),
        ("report", 3),
        // The Windows system calls (cfg(windows)), over all of the above.
        ("windows", 4),
    ],
    known: &[],
};
