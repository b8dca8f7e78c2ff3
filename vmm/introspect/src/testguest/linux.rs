//! A synthetic Linux guest: per-CPU areas for two vCPUs (`this_cpu_off`, the running task's
//! pointer), and tasks with pid, tgid, comm, flags, start_time, mm and group_leader at the
//! offsets of the layout given: the two idle tasks (`swapper/N`, pid 0), a kernel thread, a
//! one-thread process and a two-thread one whose second thread has a name of its own. The
//! thread-group leaders are on `init_task.tasks` as Linux links them: `swapper/0` is
//! `init_task` (the guest's layout says where) and heads the list; the other idle task and
//! the second thread are not on it.

use super::{Bump, PhysMem, Space};
use crate::os::layout::{LinuxLayout, LinuxSymbols, MmStruct, PcpuHot, TaskStruct};
use crate::os::linux::PF_KTHREAD;
use crate::os::{
    GuestOs, Identity, OsLayout, ProcessFacts, ProcessKey, SampleRegs, ThreadFacts, ThreadKey,
};

/// The direct map: physical address `pa` is at `DIRECT_MAP + pa`.
pub const DIRECT_MAP: u64 = 0xffff_8880_0000_0000;
/// Where the kernel's objects (tasks, mms) are allocated.
const SLAB: u64 = 0xffff_8880_0400_0000;
/// The per-CPU areas: CPU n's base is `PER_CPU + n * PER_CPU_STRIDE`.
const PER_CPU: u64 = 0xffff_8880_7fa0_0000;
const PER_CPU_STRIDE: u64 = 0x4_0000;

/// A layout at offsets no Linux build uses (per-CPU symbols at 6.1-like offsets); with
/// `pcpu_hot`, the running task is `pcpu_hot.current_task` (6.2 on) instead of `current_task`.
pub fn test_layout(pcpu_hot: bool) -> LinuxLayout {
    let offsets: &[(&str, u32)] = &[
        ("pid", 0x5c4),
        ("tgid", 0x5c8),
        ("comm", 0x7d3 - 3),
        ("mm", 0x518),
        ("group_leader", 0x608),
        ("flags", 0x2c),
        ("start_time", 0x6f8),
        ("tasks", 0x488),
    ];
    let task_struct =
        TaskStruct::build(0x1a40, |m| offsets.iter().find(|o| o.0 == m).map(|o| o.1)).unwrap();
    let mm_struct = MmStruct::build(0x3c0, |_| Some(0x58)).unwrap();
    let hot = PcpuHot::build(0x40, |_| Some(0x10)).unwrap();
    LinuxLayout {
        task_struct,
        mm_struct,
        pcpu_hot: pcpu_hot.then_some(hot),
        vmas: None,
        symbols: LinuxSymbols {
            current_task: (!pcpu_hot).then_some(0x1_ac00),
            pcpu_hot: pcpu_hot.then_some(0x2_1c40),
            this_cpu_off: Some(0x1_5168),
            per_cpu_offset: Some(0xffff_ffff_8260_0a80),
            init_task: Some(0xffff_ffff_8241_3940),
        },
    }
}

/// A task of the guest and what identification must find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinuxTask {
    /// The task_struct's address.
    pub task: u64,
    /// Its identity.
    pub identity: Identity,
}

/// The synthetic Linux guest.
#[derive(Debug, Clone)]
pub struct LinuxGuest {
    /// Guest-physical memory.
    pub phys: PhysMem,
    /// The layout it was built with.
    pub layout: LinuxLayout,
    /// The kernel's page-table root (init_mm's).
    pub kernel_cr3: u64,
    /// Each vCPU's per-CPU base (its kernel GS base).
    pub per_cpu: Vec<u64>,
    /// swapper/0, swapper/1, kworker/0:1, sh (pid 1), awk (pid 57), its thread `awk-io`
    /// (pid 58), in that order.
    pub tasks: Vec<LinuxTask>,
    /// The tasks on `init_task.tasks`, after `init_task` itself (indices into `tasks`).
    pub listed: Vec<usize>,
    slab: Bump,
    clock: u64,
}

impl LinuxGuest {
    /// Builds the guest at `layout`'s offsets, each vCPU running its idle task.
    pub fn new(layout: &LinuxLayout) -> Self {
        let mut phys = PhysMem::new(1 << 20);
        let kernel_cr3 = phys.new_root(None);
        let mut g = LinuxGuest {
            phys,
            layout: *layout,
            kernel_cr3,
            per_cpu: Vec::new(),
            tasks: Vec::new(),
            listed: Vec::new(),
            slab: Bump { next: SLAB },
            clock: 1_000_000_000,
        };
        g.write(SLAB, &[0; 8]);
        for _ in 0..2 {
            g.add_cpu();
        }
        // The kernel's own root is mapped in the direct map too.
        g.phys.map(kernel_cr3, DIRECT_MAP + kernel_cr3, kernel_cr3);
        let swapper0 = g.task(0, None, "swapper/0", PF_KTHREAD, None);
        let swapper1 = g.task(0, None, "swapper/1", PF_KTHREAD, None);
        let kworker = g.task(23, None, "kworker/0:1", PF_KTHREAD | 0x4000_0000, None);
        let sh_mm = g.mm();
        let sh = g.task(1, None, "sh", 0x0040_0100, Some(sh_mm));
        let awk_mm = g.mm();
        let awk = g.task(57, None, "awk", 0x0040_0000, Some(awk_mm));
        g.task(58, Some(awk), "awk-io", 0x0040_0040, Some(awk_mm));
        let (s0, s1) = (g.tasks[swapper0].task, g.tasks[swapper1].task);
        if g.layout.symbols.init_task.is_some() {
            g.layout.symbols.init_task = Some(s0);
        }
        g.listed = vec![kworker, sh, awk];
        g.link_tasks();
        g.switch(0, s0);
        g.switch(1, s1);
        g
    }

    /// Links `init_task` (swapper/0) and the [`listed`](Self::listed) tasks into the circular
    /// `tasks` list, when the layout has the member.
    pub fn link_tasks(&mut self) {
        let Some(off) = self.layout.task_struct.tasks else {
            return;
        };
        let mut ring = vec![self.tasks[0].task];
        ring.extend(self.listed.iter().map(|&i| self.tasks[i].task));
        for (i, &t) in ring.iter().enumerate() {
            let next = ring[(i + 1) % ring.len()] + u64::from(off);
            let prev = ring[(i + ring.len() - 1) % ring.len()] + u64::from(off);
            self.write_u64(t + u64::from(off), next);
            self.write_u64(t + u64::from(off) + 8, prev);
        }
    }

    /// The kernel this guest runs, for a [`GuestContext`](crate::os::GuestContext).
    pub fn os(&self) -> GuestOs {
        GuestOs {
            layout: OsLayout::Linux(self.layout),
            load_bias: 0,
        }
    }

    /// The kernel's paging registers (4-level long mode, CR3 = the kernel's root), as a vCPU
    /// sampled in the kernel has them.
    pub fn kernel_paging(&self) -> crate::paging::Paging {
        super::long_mode(self.kernel_cr3)
    }

    /// Kernel-virtual memory.
    pub fn kmem(&self) -> Space<'_> {
        self.phys.space(self.kernel_cr3)
    }

    /// Adds a CPU (its per-CPU area) running nothing yet; returns its index.
    pub fn add_cpu(&mut self) -> usize {
        let base = PER_CPU + self.per_cpu.len() as u64 * PER_CPU_STRIDE;
        if let Some(off) = self.layout.symbols.this_cpu_off {
            self.write_u64(base + off, base);
        }
        self.per_cpu.push(base);
        self.per_cpu.len() - 1
    }

    /// Makes vCPU `vcpu` run the task at `task`.
    pub fn switch(&mut self, vcpu: usize, task: u64) {
        let off = crate::os::linux::current_task_offset(&self.layout).unwrap();
        self.write_u64(self.per_cpu[vcpu] + off, task);
    }

    /// The registers of vCPU `vcpu` sampled at `cpl` (at CPL3 GS holds the user's TLS base,
    /// 0; IA32_KERNEL_GS_BASE is given when `with_kgs`).
    pub fn regs(&self, vcpu: usize, cpl: u8, with_kgs: bool) -> SampleRegs {
        let base = self.per_cpu[vcpu];
        SampleRegs {
            cpl,
            gs_base: if cpl == 0 { base } else { 0 },
            kernel_gs_base: with_kgs.then_some(base),
        }
    }

    /// Renames task `i` (PR_SET_NAME); a thread-group leader's process is renamed with it.
    pub fn rename(&mut self, i: usize, comm: &str) {
        let t = self.tasks[i].task;
        self.write(
            t + u64::from(self.layout.task_struct.comm),
            &comm_bytes(comm),
        );
        let leader = self.tasks[i].identity.process.key.object;
        for task in &mut self.tasks {
            if task.task == t {
                task.identity.thread.name = Some(comm.to_string());
            }
            if task.identity.process.key.object == leader && leader == t {
                task.identity.process.name = if task.identity.process.kernel {
                    format!("[{comm}]")
                } else {
                    comm.to_string()
                };
            }
        }
    }

    /// Task `i` (a leader) execs `comm`: a new mm, so a new process.
    pub fn exec(&mut self, i: usize, comm: &str) {
        let mm = self.mm();
        let t = self.tasks[i].task;
        self.write_u64(t + u64::from(self.layout.task_struct.mm), mm);
        self.rename(i, comm);
        let cr3 = self.pgd_phys(mm);
        let id = &mut self.tasks[i].identity;
        id.process.key.space = mm;
        id.process.cr3s = vec![cr3];
    }

    /// Task `i` exits and its task_struct is reused by a new process (pid `pid`, `comm`):
    /// returns the new task's index.
    pub fn reuse(&mut self, i: usize, pid: u64, comm: &str) -> usize {
        let at = self.tasks[i].task;
        let mm = self.mm();
        let new = self.task_at(at, pid, None, comm, 0x0040_0000, Some(mm));
        // The new process takes the old one's place on the list.
        for l in &mut self.listed {
            if *l == i {
                *l = new;
            }
        }
        self.link_tasks();
        new
    }

    /// Overwrites the u64 at kernel address `va`.
    pub fn write_u64(&mut self, va: u64, value: u64) {
        self.write(va, &value.to_le_bytes());
    }

    /// Writes kernel memory at `va`.
    pub fn write(&mut self, va: u64, data: &[u8]) {
        self.phys.write(self.kernel_cr3, va, data);
    }

    /// A new mm_struct with its own page-table root; returns its address.
    fn mm(&mut self) -> u64 {
        let m: MmStruct = self.layout.mm_struct;
        let mm = self.slab.take(u64::from(m.size));
        let root = self.phys.new_root(Some(self.kernel_cr3));
        self.phys.map(self.kernel_cr3, DIRECT_MAP + root, root);
        self.write_u64(mm + u64::from(m.pgd), DIRECT_MAP + root);
        mm
    }

    fn pgd_phys(&self, mm: u64) -> u64 {
        let mut k = self.kmem();
        let pgd = crate::Memory::read_u64(&mut k, mm + u64::from(self.layout.mm_struct.pgd));
        pgd.unwrap() - DIRECT_MAP
    }

    fn task(
        &mut self,
        pid: u64,
        leader: Option<usize>,
        comm: &str,
        flags: u32,
        mm: Option<u64>,
    ) -> usize {
        let at = self.slab.take(u64::from(self.layout.task_struct.size));
        self.task_at(at, pid, leader, comm, flags, mm)
    }

    /// Lays out a task at `at` (a leader unless `leader` is given).
    fn task_at(
        &mut self,
        at: u64,
        pid: u64,
        leader: Option<usize>,
        comm: &str,
        flags: u32,
        mm: Option<u64>,
    ) -> usize {
        let t: TaskStruct = self.layout.task_struct;
        self.write(at, &vec![0; usize::try_from(t.size).unwrap()]);
        self.clock += 1_234_567;
        let created = self.clock;
        let (leader_at, tgid, process) = match leader {
            Some(l) => {
                let p = &self.tasks[l].identity.process;
                (self.tasks[l].task, p.key.id, Some(p.clone()))
            }
            None => (at, pid, None),
        };
        let f = |off: u32| at + u64::from(off);
        self.write(f(t.pid), &u32::try_from(pid).unwrap().to_le_bytes());
        self.write(f(t.tgid), &u32::try_from(tgid).unwrap().to_le_bytes());
        self.write(f(t.flags), &flags.to_le_bytes());
        self.write_u64(f(t.start_time), created);
        self.write_u64(f(t.mm), mm.unwrap_or(0));
        self.write_u64(f(t.group_leader), leader_at);
        self.write(f(t.comm), &comm_bytes(comm));
        let kernel = flags & PF_KTHREAD != 0 || mm.is_none();
        let process = process.unwrap_or_else(|| ProcessFacts {
            key: ProcessKey {
                object: at,
                id: pid,
                created,
                space: if kernel { 0 } else { mm.unwrap_or(0) },
            },
            name: if kernel {
                format!("[{comm}]")
            } else {
                comm.to_string()
            },
            path: None,
            cr3s: match mm {
                Some(mm) if !kernel => vec![self.pgd_phys(mm)],
                _ => Vec::new(),
            },
            kernel,
            peb: 0,
        });
        let identity = Identity {
            process,
            thread: ThreadFacts {
                key: ThreadKey {
                    object: at,
                    id: pid,
                    created,
                },
                name: Some(comm.to_string()),
            },
        };
        self.tasks.push(LinuxTask { task: at, identity });
        self.tasks.len() - 1
    }
}

/// `comm` as TASK_COMM_LEN bytes, NUL-padded (truncated to 15).
fn comm_bytes(comm: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    let n = comm.len().min(15);
    b[..n].copy_from_slice(&comm.as_bytes()[..n]);
    b
}
