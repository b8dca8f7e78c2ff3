//! A synthetic Windows guest: KPCRs for two vCPUs, the System process and three user processes
//! (A, B with a separate KVA-shadow user DTB, C) with two named threads each and three DLLs on
//! each PEB's loader list, all on `PsActiveProcessHead`, at the offsets of the layout given.
//! [`WindowsGuest::replace`] makes a process exit and a new one take both its EPROCESS address
//! and its DTB (and its first thread's ETHREAD address) with a new id and create time.
//! [`WindowsGuest::add_wow64_process`] adds a 32-bit process: WOW64's DLLs on its PEB's list,
//! x86 DLLs from SysWOW64 on its 32-bit PEB's (found through `EPROCESS.WoW64Process`).

use super::{utf16, Bump, PhysMem, Space};
use crate::os::layout::{
    Eprocess, Ethread, Kpcr, Kprcb, Kthread, LdrDataTableEntry, Peb, PebLdrData, UnicodeString,
    WindowsLayout, WindowsSymbols,
};
use crate::os::{
    GuestOs, Identity, OsLayout, ProcessFacts, ProcessKey, SampleRegs, ThreadFacts, ThreadKey,
};

/// Where the stand-in ntoskrnl is.
pub const NT_BASE: u64 = 0xffff_f806_1a40_0000;
const POOL: u64 = 0xffff_a38c_0000_0000;
const USER_HEAP: u64 = 0x0000_02a0_0000_0000;
/// Where a WOW64 process's 32-bit PEB, loader data and names are (below 4 GiB).
const USER_HEAP32: u64 = 0x0030_0000;
/// A WOW64 process's executable.
pub const WOW64_EXE_BASE: u64 = 0x0040_0000;
/// A user-mode GS base (a TEB), what GS holds at CPL3.
pub const TEB: u64 = 0x0000_00e1_5f4d_0000;
const FIRST_TIME: u64 = 0x01db_3c2a_0000_0000;

/// `tests/fixtures/pe/ntproc.h`'s offsets (the stand-in kernel whose PDB the report crate's
/// type reader is tested on) as a layout, with symbol RVAs of this file's choosing. None is a
/// real Windows build's.
pub fn ntproc_layout() -> WindowsLayout {
    let text = include_str!("../../../../tests/fixtures/pe/ntproc.h");
    let h = |name: &str| -> u32 {
        text.lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("#define") && w.next() == Some(name))
                    .then(|| w.next())
                    .flatten()
            })
            .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
            .unwrap_or_else(|| panic!("ntproc.h defines {name}"))
    };
    let at = |size: &str, pairs: &[(&'static str, &str)]| -> (u32, Vec<(&'static str, u32)>) {
        (h(size), pairs.iter().map(|&(m, d)| (m, h(d))).collect())
    };
    let get = |t: &[(&'static str, u32)], m: &str| t.iter().find(|(p, _)| *p == m).map(|&(_, v)| v);
    let (s, f) = at(
        "KPCR_SIZE",
        &[
            ("Self", "KPCR_SELF"),
            ("CurrentPrcb", "KPCR_CURRENTPRCB"),
            ("Prcb", "KPCR_PRCB"),
        ],
    );
    let kpcr = Kpcr::build(s, |m| get(&f, m)).unwrap();
    let (s, f) = at("KPRCB_SIZE", &[("CurrentThread", "KPRCB_CURRENTTHREAD")]);
    let kprcb = Kprcb::build(s, |m| get(&f, m)).unwrap();
    let (s, f) = at(
        "ETHREAD_SIZE",
        &[
            ("Tcb", "ETHREAD_TCB"),
            ("Cid.UniqueProcess", "ETHREAD_CID_UNIQUEPROCESS"),
            ("Cid.UniqueThread", "ETHREAD_CID_UNIQUETHREAD"),
            ("CreateTime", "ETHREAD_CREATETIME"),
            ("ThreadName", "ETHREAD_THREADNAME"),
        ],
    );
    let ethread = Ethread::build(s, |m| get(&f, m)).unwrap();
    let (s, f) = at("KTHREAD_SIZE", &[("Process", "KTHREAD_PROCESS")]);
    let kthread = Kthread::build(s, |m| get(&f, m)).unwrap();
    let (s, f) = at(
        "EPROCESS_SIZE",
        &[
            ("Pcb", "EPROCESS_PCB"),
            ("Pcb.DirectoryTableBase", "EPROCESS_PCB_DIRECTORYTABLEBASE"),
            (
                "Pcb.UserDirectoryTableBase",
                "EPROCESS_PCB_USERDIRECTORYTABLEBASE",
            ),
            ("UniqueProcessId", "EPROCESS_UNIQUEPROCESSID"),
            ("CreateTime", "EPROCESS_CREATETIME"),
            ("ImageFileName", "EPROCESS_IMAGEFILENAME"),
            ("ActiveProcessLinks", "EPROCESS_ACTIVEPROCESSLINKS"),
            ("Peb", "EPROCESS_PEB"),
            ("ImageFilePointer", "EPROCESS_IMAGEFILEPOINTER"),
            ("WoW64Process", "EPROCESS_WOW64PROCESS"),
        ],
    );
    let eprocess = Eprocess::build(s, |m| get(&f, m)).unwrap();
    let (s, f) = at("PEB_SIZE", &[("Ldr", "PEB_LDR")]);
    let peb = Peb::build(s, |m| get(&f, m)).unwrap();
    let (s, f) = at(
        "PEB_LDR_DATA_SIZE",
        &[(
            "InLoadOrderModuleList",
            "PEB_LDR_DATA_INLOADORDERMODULELIST",
        )],
    );
    let peb_ldr_data = PebLdrData::build(s, |m| get(&f, m)).unwrap();
    let (s, f) = at(
        "LDR_DATA_TABLE_ENTRY_SIZE",
        &[
            ("InLoadOrderLinks", "LDR_DATA_TABLE_ENTRY_INLOADORDERLINKS"),
            ("DllBase", "LDR_DATA_TABLE_ENTRY_DLLBASE"),
            ("SizeOfImage", "LDR_DATA_TABLE_ENTRY_SIZEOFIMAGE"),
            ("FullDllName", "LDR_DATA_TABLE_ENTRY_FULLDLLNAME"),
            ("BaseDllName", "LDR_DATA_TABLE_ENTRY_BASEDLLNAME"),
        ],
    );
    let ldr_data_table_entry = LdrDataTableEntry::build(s, |m| get(&f, m)).unwrap();
    let (s, f) = at(
        "UNICODE_STRING_SIZE",
        &[
            ("Length", "UNICODE_STRING_LENGTH"),
            ("Buffer", "UNICODE_STRING_BUFFER"),
        ],
    );
    let unicode_string = UnicodeString::build(s, |m| get(&f, m)).unwrap();
    WindowsLayout {
        kpcr,
        kprcb,
        ethread,
        kthread,
        eprocess,
        peb,
        peb_ldr_data,
        ldr_data_table_entry,
        unicode_string,
        symbols: WindowsSymbols {
            ps_active_process_head: 0x4_3a58,
            ps_loaded_module_list: 0x4_3b18,
            ki_system_call64: Some(0x1_2340),
            ki_system_call64_shadow: None,
            ps_initial_system_process: Some(0x4_3c00),
        },
    }
}

/// A user-mode module on a process's loader list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserModule {
    /// DllBase.
    pub base: u64,
    /// SizeOfImage.
    pub size: u32,
    /// BaseDllName.
    pub name: String,
    /// FullDllName.
    pub path: String,
}

/// A thread of the guest: its ETHREAD and what identification must find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WinThread {
    /// The ETHREAD's address.
    pub ethread: u64,
    /// The thread's facts.
    pub facts: ThreadFacts,
}

/// A process of the guest, with its ground truth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WinProcess {
    /// What identification must find (path None: the walkers do not fill it).
    pub facts: ProcessFacts,
    /// Its threads.
    pub threads: Vec<WinThread>,
    /// Its loader list, executable first.
    pub modules: Vec<UserModule>,
    /// Its 32-bit loader list, executable first (empty unless it runs under WOW64).
    pub wow64_modules: Vec<UserModule>,
    /// Its 32-bit PEB (0 unless it runs under WOW64).
    pub peb32: u64,
    /// Its DirectoryTableBase (the root page of its address space).
    pub dtb: u64,
    /// Its KVA-shadow user DTB, if it has one.
    pub user_dtb: Option<u64>,
    /// False once it has exited (it is then off the process list).
    pub alive: bool,
}

impl WinProcess {
    /// The identity of its thread `i`.
    pub fn identity(&self, i: usize) -> Identity {
        Identity {
            process: self.facts.clone(),
            thread: self.threads[i].facts.clone(),
        }
    }
}

/// The synthetic Windows guest.
#[derive(Debug, Clone)]
pub struct WindowsGuest {
    /// Guest-physical memory.
    pub phys: PhysMem,
    /// The layout it was built with.
    pub layout: WindowsLayout,
    /// The kernel's page-table root (System's DTB).
    pub kernel_cr3: u64,
    /// Each vCPU's KPCR (its kernel GS base).
    pub kpcrs: Vec<u64>,
    /// System first, then A, B, C (and any that replaced one).
    pub processes: Vec<WinProcess>,
    /// The kernel's loaded-module list (`PsLoadedModuleList`), at the layout's offsets.
    pub kernel_modules: Vec<UserModule>,
    pool: Bump,
    clock: u64,
    next_id: u64,
}

impl WindowsGuest {
    /// Builds the guest at `layout`'s offsets, both vCPUs running System's thread.
    pub fn new(layout: &WindowsLayout) -> Self {
        let mut phys = PhysMem::new(1 << 20);
        let kernel_cr3 = phys.new_root(None);
        let mut g = WindowsGuest {
            phys,
            layout: *layout,
            kernel_cr3,
            kpcrs: Vec::new(),
            processes: Vec::new(),
            kernel_modules: Vec::new(),
            pool: Bump { next: POOL },
            clock: FIRST_TIME,
            next_id: 0x1a4,
        };
        // The kernel half's top-level entries exist before any process root copies them.
        g.write(NT_BASE, &[0; 16]);
        g.write(POOL, &[0; 16]);
        for _ in 0..2 {
            g.add_cpu();
        }
        let head = NT_BASE + u64::from(layout.symbols.ps_loaded_module_list);
        let drivers = [
            (NT_BASE, "\\SystemRoot\\system32\\ntoskrnl.exe".to_string()),
            (
                0xffff_f806_1c20_0000,
                "\\SystemRoot\\system32\\hal.dll".into(),
            ),
        ];
        let (root, mut pool) = (g.kernel_cr3, g.pool);
        g.kernel_modules = g.loader_list(root, &mut pool, head, &drivers);
        g.pool = pool;
        let system = g.spawn("System", 4, None, false, &[None], false);
        for p in [("a.exe", false), ("b.exe", true), ("c.exe", false)] {
            let name = p.0.trim_end_matches(".exe");
            let threads = [Some(format!("{name} main")), Some(format!("{name} worker"))];
            let id = g.id();
            g.spawn(p.0, id, None, p.1, &threads, false);
        }
        g.relink();
        let t = g.processes[system].threads[0].ethread;
        for v in 0..2 {
            g.switch(v, t);
        }
        g
    }

    /// The kernel this guest runs, for a [`GuestContext`](crate::os::GuestContext).
    pub fn os(&self) -> GuestOs {
        GuestOs {
            layout: OsLayout::Windows(self.layout),
            load_bias: NT_BASE,
        }
    }

    /// The kernel's paging registers (4-level long mode, CR3 = the kernel's root), as a vCPU
    /// sampled in the kernel has them.
    pub fn kernel_paging(&self) -> crate::paging::Paging {
        super::long_mode(self.kernel_cr3)
    }

    /// Kernel-virtual memory (through System's DTB).
    pub fn kmem(&self) -> Space<'_> {
        self.phys.space(self.kernel_cr3)
    }

    /// The address space rooted at `cr3`.
    pub fn space(&self, cr3: u64) -> Space<'_> {
        self.phys.space(cr3)
    }

    /// Adds a CPU (its KPCR) running nothing yet; returns its index.
    pub fn add_cpu(&mut self) -> usize {
        let k = self.layout.kpcr;
        let kpcr = self.pool.take(u64::from(k.size));
        self.write_u64(kpcr + u64::from(k.self_), kpcr);
        self.write_u64(kpcr + u64::from(k.current_prcb), kpcr + u64::from(k.prcb));
        self.kpcrs.push(kpcr);
        self.kpcrs.len() - 1
    }

    /// Every thread's ETHREAD, of live and exited processes.
    pub fn threads(&self) -> Vec<u64> {
        self.processes
            .iter()
            .flat_map(|p| p.threads.iter().map(|t| t.ethread))
            .collect()
    }

    /// Makes vCPU `vcpu` run the thread whose ETHREAD is at `ethread`.
    pub fn switch(&mut self, vcpu: usize, ethread: u64) {
        let slot = crate::os::windows::current_thread_slot(&self.layout, self.kpcrs[vcpu]);
        self.write_u64(slot, ethread);
    }

    /// The registers of vCPU `vcpu` sampled at `cpl` (at CPL3 GS holds a TEB; IA32_KERNEL_GS_BASE
    /// is given when `with_kgs`).
    pub fn regs(&self, vcpu: usize, cpl: u8, with_kgs: bool) -> SampleRegs {
        let kpcr = self.kpcrs[vcpu];
        SampleRegs {
            cpl,
            gs_base: if cpl == 0 { kpcr } else { TEB },
            kernel_gs_base: with_kgs.then_some(kpcr),
        }
    }

    /// Process `i` exits and a new one (`name`) takes its EPROCESS address, its DTB and its
    /// first thread's ETHREAD address, with new ids and create times; returns the new one's
    /// index.
    pub fn replace(&mut self, i: usize, name: &str) -> usize {
        self.processes[i].alive = false;
        let old = self.processes[i].clone();
        // The reused DTB: the old user half is gone.
        for slot in 0..256 {
            self.phys
                .write_phys(old.dtb + slot * 8, &0u64.to_le_bytes());
        }
        let id = self.id();
        let short = name.trim_end_matches(".exe");
        let threads = [
            Some(format!("{short} main")),
            Some(format!("{short} worker")),
        ];
        let reuse = Reuse {
            eprocess: old.facts.key.object,
            dtb: old.dtb,
            ethread: old.threads[0].ethread,
        };
        let new = self.spawn(name, id, Some(reuse), false, &threads, false);
        self.relink();
        new
    }

    /// Adds a 32-bit process `name` (one thread) running under WOW64; returns its index.
    pub fn add_wow64_process(&mut self, name: &str) -> usize {
        let id = self.id();
        let short = name.trim_end_matches(".exe");
        let i = self.spawn(
            name,
            id,
            None,
            false,
            &[Some(format!("{short} main"))],
            true,
        );
        self.relink();
        i
    }

    /// Overwrites the u64 at kernel address `va`.
    pub fn write_u64(&mut self, va: u64, value: u64) {
        self.write(va, &value.to_le_bytes());
    }

    /// Writes kernel memory at `va`.
    pub fn write(&mut self, va: u64, data: &[u8]) {
        self.phys.write(self.kernel_cr3, va, data);
    }

    /// Rewrites `PsActiveProcessHead` and every live process's `ActiveProcessLinks`.
    pub fn relink(&mut self) {
        let head = NT_BASE + u64::from(self.layout.symbols.ps_active_process_head);
        let links = u64::from(self.layout.eprocess.active_process_links);
        let live: Vec<u64> = self
            .processes
            .iter()
            .filter(|p| p.alive)
            .map(|p| p.facts.key.object + links)
            .collect();
        let mut chain = vec![head];
        chain.extend(&live);
        for (i, &at) in chain.iter().enumerate() {
            let next = chain[(i + 1) % chain.len()];
            let prev = chain[(i + chain.len() - 1) % chain.len()];
            self.write_u64(at, next);
            self.write_u64(at + 8, prev);
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 0x1c;
        self.next_id
    }

    fn tick(&mut self) -> u64 {
        self.clock += 10_000_019;
        self.clock
    }

    /// A `_UNICODE_STRING` of `s` at `at` in the address space `root`, its buffer from `heap`.
    fn unicode(&mut self, root: u64, heap: &mut Bump, at: u64, s: &str) {
        let u = self.layout.unicode_string;
        let bytes = utf16(s);
        let buffer = heap.take(bytes.len() as u64 + 2);
        self.phys.write(root, buffer, &bytes);
        let len = u16::try_from(bytes.len()).unwrap();
        self.phys
            .write(root, at + u64::from(u.length), &len.to_le_bytes());
        self.phys
            .write(root, at + u64::from(u.buffer), &buffer.to_le_bytes());
    }

    /// Creates a process with `threads` (their names) and, for a user process, its PEB and
    /// loader list.
    fn spawn(
        &mut self,
        name: &str,
        pid: u64,
        reuse: Option<Reuse>,
        shadow: bool,
        threads: &[Option<String>],
        wow64: bool,
    ) -> usize {
        let l = self.layout;
        let e: Eprocess = l.eprocess;
        let kernel = pid == 4;
        let eprocess = reuse.map_or_else(|| self.pool.take(u64::from(e.size)), |r| r.eprocess);
        self.write(eprocess, &vec![0; usize::try_from(e.size).unwrap()]);
        let dtb = match (kernel, reuse) {
            (true, _) => self.kernel_cr3,
            (false, Some(r)) => r.dtb,
            (false, None) => self.phys.new_root(Some(self.kernel_cr3)),
        };
        let created = self.tick();
        let (mut modules, mut wow64_modules) = (Vec::new(), Vec::new());
        let (mut peb, mut peb32) = (0, 0);
        if !kernel {
            let mut heap = Bump {
                next: USER_HEAP + (pid << 20),
            };
            peb = heap.take(u64::from(l.peb.size));
            let ldr = heap.take(u64::from(l.peb_ldr_data.size));
            self.phys
                .write(dtb, peb + u64::from(l.peb.ldr), &ldr.to_le_bytes());
            let head = ldr + u64::from(l.peb_ldr_data.in_load_order_module_list);
            let short = name.trim_end_matches(".exe");
            let exe = format!("C:\\apps\\{short}\\{name}");
            let system32 = |base: u64, dll: &str| (base, format!("C:\\Windows\\System32\\{dll}"));
            let dlls = if wow64 {
                vec![
                    (WOW64_EXE_BASE, exe.clone()),
                    system32(0x7ffb_2a00_0000, "ntdll.dll"),
                    system32(0x7ffb_2900_0000, "wow64.dll"),
                    system32(0x7ffb_2980_0000, "wow64win.dll"),
                    system32(0x7ffb_2990_0000, "wow64cpu.dll"),
                ]
            } else {
                vec![
                    (0x7ff6_4000_0000 + (pid << 24), exe.clone()),
                    system32(0x7ffb_2a00_0000, "ntdll.dll"),
                    system32(0x7ffb_2800_0000, "KERNEL32.DLL"),
                ]
            };
            modules = self.loader_list(dtb, &mut heap, head, &dlls);
            if wow64 {
                let syswow64 =
                    |base: u64, dll: &str| (base, format!("C:\\Windows\\SysWOW64\\{dll}"));
                let dlls32 = [
                    (WOW64_EXE_BASE, exe),
                    syswow64(0x77a0_0000, "ntdll.dll"),
                    syswow64(0x7640_0000, "KERNEL32.DLL"),
                    syswow64(0x7510_0000, "KERNELBASE.dll"),
                ];
                let mut low = Bump { next: USER_HEAP32 };
                peb32 = low.take(0x480);
                let ldr32 = low.take(0x30);
                self.phys.write(
                    dtb,
                    peb32 + 0x0c,
                    &u32::try_from(ldr32).unwrap().to_le_bytes(),
                );
                wow64_modules = self.loader_list32(dtb, &mut low, ldr32 + 0x0c, &dlls32);
            }
        }
        let user_dtb = shadow.then(|| {
            let root = self.phys.new_root(None);
            for slot in 0..256 {
                let entry = crate::paging::PhysRead::read_u64(&self.phys, dtb + slot * 8).unwrap();
                self.phys.write_phys(root + slot * 8, &entry.to_le_bytes());
            }
            root
        });
        let at = |off: u32| eprocess + u64::from(off);
        // The DTBs as the kernel stores them: with PCID and flag bits the walkers must clear.
        self.write_u64(at(e.directory_table_base), dtb | 0x2);
        if let (Some(off), Some(u)) = (e.user_directory_table_base, user_dtb) {
            self.write_u64(at(off), u | 0x8000_0000_0000_0001);
        }
        self.write_u64(at(e.unique_process_id), pid);
        self.write_u64(at(e.create_time), created);
        let mut image = [0u8; 15];
        let n = name.len().min(15);
        image[..n].copy_from_slice(&name.as_bytes()[..n]);
        self.write(at(e.image_file_name), &image);
        self.write_u64(at(e.peb), peb);
        if peb32 != 0 {
            // The later form: WoW64Process -> _EWOW64PROCESS { Peb, .. }; the earlier: the PEB32.
            if let Some(off) = e.wow64_process {
                let ewow64 = self.pool.take(16);
                self.write_u64(ewow64, peb32);
                self.write_u64(at(off), ewow64);
            } else if let Some(off) = e.wow64_peb32 {
                self.write_u64(at(off), peb32);
            }
        }
        let mut cr3s = vec![dtb];
        cr3s.extend(user_dtb);
        let facts = ProcessFacts {
            key: ProcessKey {
                object: eprocess,
                id: pid,
                created,
                space: 0,
            },
            name: name[..n].to_string(),
            path: None,
            cr3s,
            kernel,
            peb,
        };
        let mut out = Vec::new();
        for (i, tname) in threads.iter().enumerate() {
            let ethread = match reuse {
                Some(r) if i == 0 => r.ethread,
                _ => self.pool.take(u64::from(l.ethread.size)),
            };
            let tid = self.id();
            let tcreated = self.tick();
            self.thread(ethread, eprocess, pid, tid, tcreated, tname.as_deref());
            out.push(WinThread {
                ethread,
                facts: ThreadFacts {
                    key: ThreadKey {
                        object: ethread,
                        id: tid,
                        created: tcreated,
                    },
                    name: tname.clone(),
                },
            });
        }
        self.processes.push(WinProcess {
            facts,
            threads: out,
            modules,
            wow64_modules,
            peb32,
            dtb,
            user_dtb,
            alive: true,
        });
        self.processes.len() - 1
    }

    /// A loader list headed at `head` in the address space `root` (entries and names from
    /// `heap`) of the modules `dlls` (base, full path).
    fn loader_list(
        &mut self,
        root: u64,
        heap: &mut Bump,
        head: u64,
        dlls: &[(u64, String)],
    ) -> Vec<UserModule> {
        let o = self.layout.ldr_data_table_entry;
        let entries: Vec<u64> = dlls.iter().map(|_| heap.take(u64::from(o.size))).collect();
        let mut chain = vec![head];
        chain.extend(entries.iter().map(|e| e + u64::from(o.in_load_order_links)));
        for (i, &at) in chain.iter().enumerate() {
            let next = chain[(i + 1) % chain.len()];
            let prev = chain[(i + chain.len() - 1) % chain.len()];
            self.phys.write(root, at, &next.to_le_bytes());
            self.phys.write(root, at + 8, &prev.to_le_bytes());
        }
        let mut modules = Vec::new();
        for (i, (base, path)) in dlls.iter().enumerate() {
            let size = 0x2_4000 + 0x1000 * u32::try_from(i).unwrap();
            let base_name = path.rsplit('\\').next().unwrap().to_string();
            let entry = entries[i];
            self.phys
                .write(root, entry + u64::from(o.dll_base), &base.to_le_bytes());
            self.phys.write(
                root,
                entry + u64::from(o.size_of_image),
                &size.to_le_bytes(),
            );
            self.unicode(root, heap, entry + u64::from(o.full_dll_name), path);
            self.unicode(root, heap, entry + u64::from(o.base_dll_name), &base_name);
            modules.push(UserModule {
                base: *base,
                size,
                name: base_name,
                path: path.clone(),
            });
        }
        modules
    }

    /// A 32-bit loader list (`_LDR_DATA_TABLE_ENTRY32`s, `LIST_ENTRY32` links and
    /// `UNICODE_STRING32` names at the x86 offsets) headed at `head` in the address space
    /// `root`, everything from `heap` (below 4 GiB).
    fn loader_list32(
        &mut self,
        root: u64,
        heap: &mut Bump,
        head: u64,
        dlls: &[(u64, String)],
    ) -> Vec<UserModule> {
        use crate::os::windows::Ldr32;
        let low = |a: u64| u32::try_from(a).unwrap().to_le_bytes();
        let entries: Vec<u64> = dlls.iter().map(|_| heap.take(0x50)).collect();
        let mut chain = vec![head];
        chain.extend(&entries);
        for (i, &at) in chain.iter().enumerate() {
            let next = chain[(i + 1) % chain.len()];
            let prev = chain[(i + chain.len() - 1) % chain.len()];
            self.phys.write(root, at, &low(next));
            self.phys.write(root, at + 4, &low(prev));
        }
        let mut modules = Vec::new();
        for (i, (base, path)) in dlls.iter().enumerate() {
            let size = 0x1_8000 + 0x1000 * u32::try_from(i).unwrap();
            let base_name = path.rsplit('\\').next().unwrap().to_string();
            let entry = entries[i];
            let put =
                |g: &mut Self, off: u32, b: &[u8]| g.phys.write(root, entry + u64::from(off), b);
            put(self, Ldr32::DLL_BASE, &low(*base));
            put(self, Ldr32::SIZE_OF_IMAGE, &size.to_le_bytes());
            for (off, s) in [
                (Ldr32::FULL_DLL_NAME, path),
                (Ldr32::BASE_DLL_NAME, &base_name),
            ] {
                let bytes = utf16(s);
                let buffer = heap.take(bytes.len() as u64 + 2);
                self.phys.write(root, buffer, &bytes);
                let len = u16::try_from(bytes.len()).unwrap();
                put(self, off, &len.to_le_bytes());
                put(self, off + 4, &low(buffer));
            }
            modules.push(UserModule {
                base: *base,
                size,
                name: base_name,
                path: path.clone(),
            });
        }
        modules
    }

    /// Lays out an ETHREAD.
    fn thread(
        &mut self,
        ethread: u64,
        eprocess: u64,
        pid: u64,
        tid: u64,
        created: u64,
        name: Option<&str>,
    ) {
        let l = self.layout;
        let t: Ethread = l.ethread;
        let k: Kthread = l.kthread;
        self.write(ethread, &vec![0; usize::try_from(t.size).unwrap()]);
        let at = |off: u32| ethread + u64::from(off);
        self.write_u64(at(t.unique_thread), tid);
        self.write_u64(at(t.unique_process), pid);
        self.write_u64(at(t.create_time), created);
        self.write_u64(
            at(t.tcb) + u64::from(k.process),
            eprocess + u64::from(l.eprocess.pcb),
        );
        if let (Some(off), Some(name)) = (t.thread_name, name) {
            let ustr = self.pool.take(u64::from(l.unicode_string.size));
            let mut pool = self.pool;
            self.unicode(self.kernel_cr3, &mut pool, ustr, name);
            self.pool = pool;
            self.write_u64(at(off), ustr);
        }
    }
}

/// What a new process takes over from an exited one.
#[derive(Debug, Clone, Copy)]
struct Reuse {
    eprocess: u64,
    dtb: u64,
    ethread: u64,
}
