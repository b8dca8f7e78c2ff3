//! Guest awareness: which guest process and thread each host-side sample ran in. The folder
//! holds all of it: this file ([`GuestAwareness`]: the layout in use, each vCPU's context, the
//! Windows kernel's discovery and processes' user-mode modules), [`layout_source`] (where a
//! run's layout comes from: `--guest-os`, `--guest-types`, the booted vmlinux, the symbol
//! path), [`process_table`] (the run's process and thread rows), [`process_list`] (the
//! guest kernel's own process list, walked once a layout is known and at the end),
//! [`linux_maps`] (a Linux process's executable file mappings) and [`unwind_files`] (the
//! files they name, for the process's user-mode stacks).
//!
//! The guest kernel's structures are read by `introspect::os` (one [`GuestContext`] per vCPU:
//! its per-CPU base, the current thread pointer in it, the thread's identity read once per
//! thread change); their layout comes from the kernel's own debug information ([`GuestTypes`]):
//! a Linux vmlinux's BTF or DWARF before the run, a Windows kernel's PDB once a sample has
//! found the kernel in guest memory, or a Linux kernel's ISF table in a symbol pack, matched by
//! the banner read from guest memory ([`linux_banner`]) once a kernel-mode sample shows a
//! long-mode guest (both looked up on a thread of its own, so a symbol server's latency or a
//! scan of guest memory never stalls a vCPU). Until a layout is known, and for samples whose thread cannot
//! be named, samples are split by address space (`[cr3 ..]` rows).
//!
//! The per-sample cost with a layout is one 8-byte read through the kernel's page tables and a
//! comparison with the vCPU's last thread; the shared [`ProcessTable`] is locked only when a
//! vCPU's thread changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Instant;

pub mod layout_source;
pub mod linux_banner;
pub mod linux_maps;
pub mod process_list;
pub mod process_table;
pub mod unwind_files;

use introspect::cfi::SpaceUnwinder;
use introspect::os::{
    GuestContext, GuestOs, IdentifyError, Identity, LinuxLayout, OsLayout, ProcessKey, SampleRegs,
    ThreadKey, WindowsLayout,
};
use introspect::paging::Paging;
use introspect::pe::CodeView;
use report::symbols::guest_files::GuestFiles;
use report::symbols::packs::LinuxMatch;
use vm_memory::GuestMemoryMmap;

use super::stacks::{listed_module, FoundModule, GuestVirt};
use crate::arch::cpu_state::{CpuState, WantedMsrs};
use linux_maps::Why;
use process_table::{Found, ProcessTable, ThreadRef};
use unwind_files::{UnwindFiles, UnwindRequests};

/// Samples between two reads of IA32_LSTAR on a vCPU while a Windows kernel is looked for.
pub const LSTAR_PERIOD: u32 = 1024;

/// Looks a Windows kernel's structure layout up from the PDB its CodeView record names (the
/// caller's symbol path).
pub type WindowsLookup = Box<dyn FnOnce(&CodeView) -> Result<WindowsLayout, String> + Send>;

/// Looks a Linux kernel's structure layout up from the candidate banners read from guest
/// memory (the caller's symbol path's packs), until the second argument says the run is over.
pub type LinuxLookup =
    Box<dyn FnOnce(&[Vec<u8>], &dyn Fn() -> bool) -> Result<LinuxMatch, String> + Send>;

/// The lookups a run may make once a sample shows which kernel the guest runs: either or both
/// (`--guest-os auto` with a symbol path: whichever kernel the guest shows first).
#[derive(Default)]
pub struct Lookup {
    /// A Windows kernel's, by its CodeView identity.
    pub windows: Option<WindowsLookup>,
    /// A Linux kernel's, by its banner.
    pub linux: Option<LinuxLookup>,
}

impl Lookup {
    /// A Windows kernel's lookup alone.
    pub fn windows(lookup: WindowsLookup) -> Self {
        Lookup {
            windows: Some(lookup),
            linux: None,
        }
    }
}

/// What the vCPUs tell the lookup thread.
pub enum KernelSeen {
    /// The Windows kernel is at this base, with this CodeView record.
    Windows(u64, CodeView),
    /// A long-mode guest ran in kernel mode with these page tables: its memory may hold a Linux
    /// banner.
    Linux(Paging, GuestMemoryMmap),
}

/// Where the run learns the guest kernel's structure layout from.
#[derive(Default)]
pub enum GuestTypes {
    /// Processes and threads are not named: samples carry no thread at all.
    Off,
    /// No layout: samples are split by address space only (`[cr3 ..]` rows).
    #[default]
    AddressSpaces,
    /// A Linux kernel's layout, read from its vmlinux before the run.
    Linux(LinuxLayout),
    /// A Windows kernel's layout, given before the run; used once a sample finds the kernel.
    Windows(WindowsLayout),
    /// A kernel's layout looked up once a sample shows it: a Windows kernel's from its PDB or
    /// ISF file, a Linux kernel's from the ISF file whose banner it shows.
    Lookup(Lookup),
}

impl GuestTypes {
    /// Why no guest process can ever be named in a run with these types (so a process filter
    /// would count nothing), or None when a layout is or may become known.
    pub fn why_no_process_names(&self) -> Option<&'static str> {
        match self {
            GuestTypes::Off => Some("guest awareness is off (--guest-os off)"),
            GuestTypes::AddressSpaces => Some(
                "no guest kernel layout: give --guest-types FILE, a --kernel vmlinux with BTF or \
                 DWARF, or a symbol path for a Windows guest's kernel",
            ),
            GuestTypes::Linux(_) | GuestTypes::Windows(_) | GuestTypes::Lookup(_) => None,
        }
    }
}

impl std::fmt::Debug for GuestTypes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GuestTypes::Off => "Off",
            GuestTypes::AddressSpaces => "AddressSpaces",
            GuestTypes::Linux(_) => "Linux",
            GuestTypes::Windows(_) => "Windows",
            GuestTypes::Lookup(_) => "Lookup",
        })
    }
}

/// What the Windows kernel's discovery waits for.
enum Pending {
    /// Nothing: no Windows layout is wanted, or it is known.
    Nothing,
    /// This layout, once the kernel's base is known.
    Layout(WindowsLayout),
    /// The lookup thread, which takes what the vCPUs found.
    Lookup(Sender<KernelSeen>),
}

/// What a vCPU's current thread is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    /// A thread in its process: a Linux exec keeps the thread and makes a new process.
    Thread(ThreadKey, ProcessKey),
    Space(u64),
}

/// The thread a vCPU's last sample ran in.
#[derive(Debug)]
pub struct Who {
    key: Key,
    /// Its rows.
    pub at: ThreadRef,
    /// Its process's name (what `--process` matches).
    pub process_name: String,
}

/// One vCPU's identification state.
#[derive(Default)]
pub struct VcpuGuest {
    context: Option<GuestContext>,
    /// The layout generation `context` was made for.
    generation: u32,
    /// The page tables of this vCPU's last kernel-mode sample: kernel objects are read through
    /// them (a user-mode CR3 under KVA shadow or PTI does not map the kernel).
    kernel_paging: Option<Paging>,
    current: Option<Who>,
    /// Why the last identification failed, logged once per kind.
    logged: u8,
    /// The executable ranges of the Linux process it last checked a user-mode PC against.
    mapped: linux_maps::VcpuMapped,
}

/// The run's guest awareness: the layout once known, the vCPUs' contexts and the rows.
pub struct GuestAwareness {
    /// Off: no rows at all.
    enabled: AtomicBool,
    /// Set with the types: why no process can ever be named in this run (None: one may be).
    no_names: Mutex<Option<&'static str>>,
    os: RwLock<Option<GuestOs>>,
    generation: AtomicU32,
    /// The layout generation whose process list was walked ([`process_list`]).
    walked: AtomicU32,
    /// The kernel page tables the first walk read through.
    walk_paging: Mutex<Option<Paging>>,
    pending: Mutex<Pending>,
    want_kernel_gs: Box<[AtomicBool]>,
    /// A Windows layout waits for the kernel: samples read IA32_LSTAR now and then.
    windows_pending: AtomicBool,
    /// A Linux lookup waits for a long-mode kernel-mode sample.
    linux_pending: AtomicBool,
    /// The run is over: a lookup under way gives up.
    closed: AtomicBool,
    /// Per vCPU: samples since it last read IA32_LSTAR.
    since_lstar: Box<[AtomicU32]>,
    vcpus: Box<[Mutex<VcpuGuest>]>,
    table: ProcessTable,
    /// Windows processes' user-mode modules, from their PEB loader lists.
    user_modules: Mutex<UserModules>,
    /// Linux processes' mapped ELF files, for their user-mode stacks; set before the guest runs.
    unwind_files: OnceLock<UnwindFiles>,
    /// Linux process row -> its executable mappings as last read.
    linux_mapped: RwLock<HashMap<u32, Arc<linux_maps::Mapped>>>,
    /// Bumped when `linux_mapped` changes: each vCPU refreshes its copy.
    mapped_generation: AtomicU32,
}

/// The user-mode modules read so far, and the processes whose list is still to be read.
#[derive(Default)]
struct UserModules {
    found: Vec<FoundModule>,
    /// Process row -> walks left: a process whose loader has not run yet is read again when
    /// a vCPU switches to it, a few times.
    retry: HashMap<u32, u8>,
    /// Linux process row -> where its reads of its mappings stand (`linux_maps`' back-off).
    linux_reads: HashMap<u32, linux_maps::Reads>,
}

/// User-mode modules kept over the run, all processes together.
const MAX_USER_MODULES: usize = 16_384;
/// Reads of a process's loader list when the earlier ones found nothing.
const LDR_TRIES: u8 = 8;

impl GuestAwareness {
    /// Nothing known yet, for `vcpus` vCPUs, rows timed from `start`.
    pub fn new(vcpus: usize, start: Instant) -> Self {
        GuestAwareness {
            enabled: AtomicBool::new(true),
            no_names: Mutex::new(None),
            os: RwLock::new(None),
            generation: AtomicU32::new(0),
            walked: AtomicU32::new(0),
            walk_paging: Mutex::new(None),
            pending: Mutex::new(Pending::Nothing),
            want_kernel_gs: (0..vcpus).map(|_| AtomicBool::new(false)).collect(),
            windows_pending: AtomicBool::new(false),
            linux_pending: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            since_lstar: (0..vcpus).map(|_| AtomicU32::new(0)).collect(),
            vcpus: (0..vcpus).map(|_| Mutex::default()).collect(),
            table: ProcessTable::new(start),
            user_modules: Mutex::default(),
            unwind_files: OnceLock::new(),
            linux_mapped: RwLock::default(),
            mapped_generation: AtomicU32::new(0),
        }
    }

    /// Unwinds Linux processes' user-mode stacks with the call-frame information of the files
    /// they map, looked up in `files` (the first call counts). Called before the guest runs.
    /// With a sysroot or a disk image among them, returns what [`Self::serve_unwind_files`]
    /// reads them from, on a thread that may open files.
    pub fn set_unwind_files(&self, files: &GuestFiles) -> Option<UnwindRequests> {
        let (unwind, requests) = UnwindFiles::new(files);
        if unwind.is_empty() || self.unwind_files.set(unwind).is_err() {
            return None;
        }
        requests
    }

    /// The `guest-files` thread: reads the files the processes' unwinders wait for until the
    /// run is over ([`Self::close`]).
    pub fn serve_unwind_files(&self, requests: UnwindRequests) {
        if let Some(files) = self.unwind_files.get() {
            files.serve(requests);
        }
    }

    /// Notes a Linux process's walked stack (vCPU state `g`, process row `row`): a user-mode
    /// frame outside its executable mappings has them read again at its next sample.
    pub fn note_stack(&self, g: &mut VcpuGuest, row: u32, pcs: &[u64]) {
        if self.is_linux() {
            self.note_user_frames(&mut g.mapped, row, pcs);
        }
    }

    /// The unwinder of process row `row`'s mapped files, when they were found.
    pub fn user_unwinder(&self, row: u32) -> Option<Arc<SpaceUnwinder>> {
        self.unwind_files.get()?.of_process(row)
    }

    /// Takes the layout source; returns the lookup to run on a thread of its own (with the
    /// receiver of the kernel's discovery) for [`GuestTypes::Lookup`].
    /// Called before the guest runs.
    pub fn set_types(&self, types: GuestTypes) -> Option<(Lookup, Receiver<KernelSeen>)> {
        self.enabled
            .store(!matches!(types, GuestTypes::Off), Ordering::Relaxed);
        *self.no_names.lock().unwrap_or_else(|e| e.into_inner()) = types.why_no_process_names();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match types {
            GuestTypes::Off | GuestTypes::AddressSpaces => None,
            GuestTypes::Linux(layout) => {
                self.publish(GuestOs {
                    layout: OsLayout::Linux(layout),
                    load_bias: 0,
                });
                None
            }
            GuestTypes::Windows(layout) => {
                *pending = Pending::Layout(layout);
                self.windows_pending.store(true, Ordering::Relaxed);
                None
            }
            GuestTypes::Lookup(lookup) => {
                let (tx, rx) = std::sync::mpsc::channel();
                *pending = Pending::Lookup(tx);
                self.windows_pending
                    .store(lookup.windows.is_some(), Ordering::Relaxed);
                self.linux_pending
                    .store(lookup.linux.is_some(), Ordering::Relaxed);
                Some((lookup, rx))
            }
        }
    }

    /// Why no guest process can ever be named in this run (the types set say so), or None.
    pub fn why_no_process_names(&self) -> Option<&'static str> {
        *self.no_names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `os` the kernel every vCPU reads from its next sample on.
    pub fn publish(&self, os: GuestOs) {
        *self.os.write().unwrap_or_else(|e| e.into_inner()) = Some(os);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Runs `lookup` for the kernel `found` reports (until the run ends and drops the sender),
    /// then publishes its layout: a Windows kernel's lookup ends the wait, found or not; a
    /// Linux banner that matches no pack leaves a Windows kernel to be looked for still.
    /// Runs on the lookup thread.
    pub fn serve_lookup(&self, mut lookup: Lookup, found: Receiver<KernelSeen>) {
        while lookup.windows.is_some() || lookup.linux.is_some() {
            let Ok(what) = found.recv() else {
                return;
            };
            match what {
                KernelSeen::Windows(base, codeview) => {
                    if let Some(windows) = lookup.windows.take() {
                        self.serve_windows(windows, base, codeview);
                        return;
                    }
                }
                KernelSeen::Linux(paging, mem) => {
                    if let Some(linux) = lookup.linux.take() {
                        if self.serve_linux(linux, &mem, &paging) {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Looks the Linux kernel's layout up by the banners in `mem` and publishes it, with the
    /// KASLR slide the kernel page tables `paging` show; false when none is found.
    fn serve_linux(&self, lookup: LinuxLookup, mem: &GuestMemoryMmap, paging: &Paging) -> bool {
        let stop = || self.closed.load(Ordering::Relaxed);
        let candidates = linux_banner::scan(mem, &stop);
        if stop() {
            return true;
        }
        if candidates.is_empty() {
            log::info!("no Linux banner in guest memory: no Linux symbol pack looked up");
            return false;
        }
        let texts: Vec<Vec<u8>> = candidates.iter().map(|c| c.text.clone()).collect();
        let found = match lookup(&texts, &stop) {
            Ok(found) => found,
            Err(e) => {
                log::warn!(
                    "guest processes and threads are not named from a Linux symbol pack: {e} \
                     (guest banner: {:?})",
                    String::from_utf8_lossy(&texts[0]).trim_end()
                );
                return false;
            }
        };
        let at = candidates
            .get(found.banner)
            .map_or(&[][..], |c| c.at.as_slice());
        let slide = found
            .banner_address
            .and_then(|link| linux_banner::slide(&crate::memory::GuestPhys(mem), paging, link, at));
        let load_bias = match slide {
            Some(s) => s,
            None => {
                log::warn!(
                    "{}: the kernel's KASLR slide was not found from its banner: symbols are \
                     taken as not relocated (give --guest-types for a randomized kernel)",
                    found.file
                );
                0
            }
        };
        log::info!(
            "guest processes and threads: layout read from {} (KASLR slide {load_bias:#x})",
            found.file
        );
        self.windows_pending.store(false, Ordering::Relaxed);
        self.publish(GuestOs {
            layout: OsLayout::Linux(found.layout),
            load_bias,
        });
        true
    }

    /// Runs the Windows lookup for the kernel at `base` and publishes its layout.
    fn serve_windows(&self, lookup: WindowsLookup, base: u64, codeview: CodeView) {
        match lookup(&codeview) {
            Ok(layout) => {
                log::info!(
                    "guest processes and threads: layout read from {} ({})",
                    codeview.pdb,
                    codeview.guid
                );
                self.publish(GuestOs {
                    layout: OsLayout::Windows(layout),
                    load_bias: base,
                });
            }
            Err(e) => log::warn!(
                "guest processes and threads are not named: {}: {e}; samples are split by address space",
                codeview.pdb
            ),
        }
    }

    /// Called once when a vCPU's samples find the Windows kernel at `base`.
    pub fn kernel_found(&self, base: u64, codeview: Option<CodeView>) {
        self.windows_pending.store(false, Ordering::Relaxed);
        self.linux_pending.store(false, Ordering::Relaxed);
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *pending, Pending::Nothing) {
            Pending::Nothing => {}
            Pending::Layout(layout) => self.publish(GuestOs {
                layout: OsLayout::Windows(layout),
                load_bias: base,
            }),
            Pending::Lookup(tx) => match codeview {
                Some(cv) => {
                    let _ = tx.send(KernelSeen::Windows(base, cv));
                }
                None => log::warn!(
                    "the Windows kernel at {base:#x} has no CodeView record: its PDB cannot be found, so guest processes are not named"
                ),
            },
        }
    }

    /// Ends the lookup's wait (the run is over).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        if let Some(files) = self.unwind_files.get() {
            files.close();
        }
        self.windows_pending.store(false, Ordering::Relaxed);
        self.linux_pending.store(false, Ordering::Relaxed);
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Pending::Nothing;
    }

    /// True when vCPU `v`'s next sample should read IA32_KERNEL_GS_BASE.
    pub fn wants_kernel_gs_base(&self, v: usize) -> bool {
        self.want_kernel_gs
            .get(v)
            .is_some_and(|w| w.load(Ordering::Relaxed))
    }

    /// The MSRs vCPU `v`'s next sample should read: IA32_KERNEL_GS_BASE while its context
    /// asks for it, IA32_LSTAR once every [`LSTAR_PERIOD`] samples while a Windows layout waits
    /// for the kernel.
    pub fn wanted_msrs(&self, v: usize) -> WantedMsrs {
        let lstar = self.windows_pending.load(Ordering::Relaxed)
            && self
                .since_lstar
                .get(v)
                .is_some_and(|n| n.fetch_add(1, Ordering::Relaxed) % LSTAR_PERIOD == 0);
        WantedMsrs {
            kernel_gs_base: self.wants_kernel_gs_base(v),
            lstar,
        }
    }

    /// The page tables a vCPU sampled at `cpu` reads kernel memory through: this sample's in
    /// kernel mode, else the vCPU's last kernel-mode sample's (a user-mode CR3 under KVA
    /// shadow or PTI does not map the kernel), else this sample's.
    pub fn kernel_paging(&self, g: &VcpuGuest, cpu: &CpuState) -> Paging {
        match (cpu.cpl, g.kernel_paging) {
            (0, _) | (_, None) => cpu.paging,
            (_, Some(p)) => p,
        }
    }

    /// The run's rows.
    pub fn table(&self) -> &ProcessTable {
        &self.table
    }

    /// True when samples are given threads.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// vCPU `v`'s state (only its own thread locks it on the sample path).
    pub fn vcpu(&self, v: usize) -> Option<MutexGuard<'_, VcpuGuest>> {
        self.vcpus
            .get(v)
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn os(&self) -> Option<GuestOs> {
        *self.os.read().unwrap_or_else(|e| e.into_inner())
    }

    /// True once the guest's kernel is known to be Linux.
    pub fn is_linux(&self) -> bool {
        matches!(self.os().map(|o| o.layout), Some(OsLayout::Linux(_)))
    }

    /// The thread vCPU `v` (whose state is `g`) ran when sampled at `cpu`.
    pub fn identify<'g>(
        &self,
        v: usize,
        g: &'g mut VcpuGuest,
        mem: &GuestMemoryMmap,
        cpu: &CpuState,
    ) -> Option<&'g Who> {
        if !self.enabled() {
            return None;
        }
        if cpu.cpl == 0 {
            g.kernel_paging = Some(cpu.paging);
            if self.linux_pending.load(Ordering::Relaxed) {
                self.linux_kernel_sample(mem, cpu.paging);
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        if generation != g.generation {
            g.generation = generation;
            g.context = self.os().map(GuestContext::new);
        }
        if let (Some(_), Some(kernel)) = (&g.context, g.kernel_paging) {
            self.walk_once(generation, mem, kernel);
        }
        let key = match g.context.as_mut() {
            Some(context) => {
                let mut kmem = GuestVirt::new(mem, g.kernel_paging.unwrap_or(cpu.paging));
                let regs = SampleRegs {
                    cpl: cpu.cpl,
                    gs_base: cpu.gs_base,
                    kernel_gs_base: cpu.kernel_gs_base,
                };
                let want = self.want_kernel_gs.get(v);
                match context.identify(&mut kmem, &regs) {
                    Ok(id) => {
                        let key = Key::Thread(id.thread.key, id.process.key);
                        if !matches!(&g.current, Some(c) if c.key == key) {
                            let now = self.table.now_s();
                            if let Some(old) = &g.current {
                                self.table.seen(old.at, now);
                            }
                            let found = self.table.identified(id, now);
                            let kernel = g.kernel_paging.unwrap_or(cpu.paging);
                            match self.os().map(|o| o.layout) {
                                Some(OsLayout::Windows(layout)) => {
                                    self.read_user_modules(mem, kernel, &layout, id, found);
                                }
                                Some(OsLayout::Linux(layout)) => {
                                    let why = Why::Switch {
                                        new: found.new_process,
                                    };
                                    let row = found.at.process;
                                    self.read_linux_mappings(mem, kernel, &layout, id, row, why);
                                }
                                None => {}
                            }
                            g.current = Some(Who {
                                key,
                                at: found.at,
                                process_name: id.process.name.clone(),
                            });
                        }
                        // A user-mode PC outside the process's executable mappings: a file
                        // mapped since they were read.
                        let row = g.current.as_ref().map(|c| c.at.process);
                        if let (3, Some(row)) = (cpu.cpl, row) {
                            if !self.pc_mapped(&mut g.mapped, row, cpu.rip) {
                                if let Some(OsLayout::Linux(layout)) = self.os().map(|o| o.layout) {
                                    let kernel = g.kernel_paging.unwrap_or(cpu.paging);
                                    let why = Why::Outside;
                                    self.read_linux_mappings(mem, kernel, &layout, id, row, why);
                                }
                            }
                        }
                        if let Some(w) = want {
                            w.store(context.wants_kernel_gs_base(), Ordering::Relaxed);
                        }
                        return g.current.as_ref();
                    }
                    Err(e) => {
                        if let Some(w) = want {
                            w.store(context.wants_kernel_gs_base(), Ordering::Relaxed);
                        }
                        log_failure(v, &mut g.logged, e);
                        Key::Space(cpu.paging.cr3 & !0xfff)
                    }
                }
            }
            None => Key::Space(cpu.paging.cr3 & !0xfff),
        };
        if !matches!(&g.current, Some(c) if c.key == key) {
            let now = self.table.now_s();
            if let Some(old) = &g.current {
                self.table.seen(old.at, now);
            }
            let at = self.table.unidentified(cpu.paging.cr3, now);
            g.current = Some(Who {
                key,
                at,
                process_name: String::new(),
            });
        }
        g.current.as_ref()
    }

    /// Hands the first kernel-mode sample of a long-mode guest to the lookup thread, which
    /// scans guest memory for a Linux banner (once per run).
    fn linux_kernel_sample(&self, mem: &GuestMemoryMmap, paging: Paging) {
        const EFER_LMA: u64 = 1 << 10;
        if paging.efer & EFER_LMA == 0 || !self.linux_pending.swap(false, Ordering::Relaxed) {
            return;
        }
        if let Pending::Lookup(tx) = &*self.pending.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = tx.send(KernelSeen::Linux(paging, mem.clone()));
        }
    }

    /// Reads the loader list of the process `id` names (its row: `found`) when it is new, or
    /// when an earlier read found nothing, in its own address space (its DirectoryTableBase
    /// with the kernel's paging mode: a KVA-shadow kernel's DTB maps user space too).
    fn read_user_modules(
        &self,
        mem: &GuestMemoryMmap,
        kernel: Paging,
        layout: &WindowsLayout,
        id: &Identity,
        found: Found,
    ) {
        let p = &id.process;
        let Some(&cr3) = p.cr3s.first() else { return };
        if p.peb == 0 || p.kernel {
            return;
        }
        let mut user = self.user_modules.lock().unwrap_or_else(|e| e.into_inner());
        let tries = match user.retry.get(&found.at.process) {
            Some(0) => return,
            Some(&n) => n,
            None if found.new_process => LDR_TRIES,
            None => return,
        };
        let mut virt = GuestVirt::new(mem, Paging { cr3, ..kernel });
        // Its PEB's list and, under WOW64, its 32-bit PEB's (the EPROCESS through the kernel's).
        let list = introspect::os::windows::process_modules(
            &mut GuestVirt::new(mem, kernel),
            &mut virt,
            layout,
            p,
            introspect::os::windows::MAX_USER_MODULES,
        );
        let list = introspect::os::windows::ModuleList {
            end: list.native.end,
            modules: list.modules(),
        };
        if list.modules.is_empty() {
            user.retry.insert(found.at.process, tries - 1);
            return;
        }
        user.retry.insert(found.at.process, 0);
        if let Some(path) = list.modules[0].path.clone() {
            self.table.set_path(found.at.process, path);
        }
        for m in list.modules {
            if user.found.len() >= MAX_USER_MODULES {
                break;
            }
            if let Some(module) = listed_module(&mut virt, Some(cr3), m) {
                user.found.push(module);
            }
        }
    }

    /// The user-mode modules read from Windows processes' loader lists.
    pub fn user_modules(&self) -> Vec<FoundModule> {
        self.user_modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .found
            .clone()
    }

    /// The Windows layout in use, if the guest is a Windows one whose layout is known.
    pub fn windows_layout(&self) -> Option<WindowsLayout> {
        match self.os() {
            Some(GuestOs {
                layout: OsLayout::Windows(l),
                ..
            }) => Some(l),
            _ => None,
        }
    }

    /// Notes, as vCPU `v` leaves the guest for good, that its last thread ran until now.
    pub fn vcpu_exiting(&self, v: usize) {
        if let Some(g) = self.vcpu(v) {
            if let Some(c) = &g.current {
                self.table.seen(c.at, self.table.now_s());
            }
        }
    }
}

/// Logs the first failure of each kind on vCPU `v` (a guest that never gives a per-CPU base,
/// or one whose structures do not read, would otherwise log at every sample).
fn log_failure(v: usize, logged: &mut u8, e: IdentifyError) {
    let bit = match e {
        IdentifyError::NoPerCpuBase => 1,
        IdentifyError::BadPerCpuBase(_) => 2,
        IdentifyError::Unreadable(_) => 4,
        IdentifyError::Implausible { .. } => 8,
    };
    if *logged & bit == 0 {
        *logged |= bit;
        log::info!("vCPU {v}: a sample's thread could not be named: {e}");
    }
}

#[cfg(test)]
mod tests;
