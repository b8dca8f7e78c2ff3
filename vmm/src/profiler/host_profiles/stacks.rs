//! Call stacks of sampled vCPUs, walked in guest memory at sample time.
//!
//! The walk itself (which unwinder for which frame, every bound on guest data) is the
//! `introspect` crate's; this module gives it the sampled vCPU's address space: reads go
//! through the guest's own page tables for the sampled CR3 ([`introspect::paging`]), never write,
//! and a page that does not translate is simply unreadable (the guest never sees a fault).

use introspect::cfi::SpaceUnwinder;
use introspect::nt::Kernel;
use introspect::os::WindowsLayout;
use introspect::paging::{lookup, Paging, PhysRead};
use introspect::pe::{CodeView, Image};
use introspect::{End, Memory, Options, Regs, Stack, Unreadable, WalkCache, KERNEL_SPACE};
use vm_memory::{
    ByteValued, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    VolatileMemory, VolatileSlice,
};

use crate::arch::cpu_state::CpuState;

/// How far below a PC the search for its PE image's header looks: more than the largest
/// Windows kernel image, so a PC anywhere in ntoskrnl finds its header.
pub const IMAGE_SCAN_LIMIT: u64 = 64 << 20;
/// Translations remembered during one walk (stack pages, image headers, unwind data, code):
/// a direct-mapped table by virtual page.
const TLB_ENTRIES: usize = 16;
const PAGE: u64 = 0x1000;
const PAGE_BYTES: usize = 0x1000;

/// One translation: a virtual page, its guest-physical page and the host's view of it.
#[derive(Clone, Copy)]
struct TlbEntry<'a> {
    virt: u64,
    phys: u64,
    bytes: VolatileSlice<'a>,
}

/// Guest RAM regions held as the host maps them; RAM beyond these is looked up per access.
const RAM_REGIONS: usize = 4;

/// Guest RAM for the page-table walker and the walk's pages: each region's start and the
/// host's view of all of it, taken once per walk, so that reaching a guest-physical address is a
/// compare or two instead of a search of the memory map.
struct Ram<'a> {
    mem: &'a GuestMemoryMmap,
    regions: [Option<(u64, VolatileSlice<'a>)>; RAM_REGIONS],
}

impl<'a> Ram<'a> {
    fn new(mem: &'a GuestMemoryMmap) -> Self {
        let mut regions = [None; RAM_REGIONS];
        for (slot, r) in regions.iter_mut().zip(mem.iter()) {
            *slot = r.as_volatile_slice().ok().map(|v| (r.start_addr().0, v));
        }
        Ram { mem, regions }
    }

    /// True if any byte of `[gpa, gpa + len)` is guest RAM.
    fn overlaps(&self, gpa: u64, len: u64) -> bool {
        let end = gpa.saturating_add(len);
        self.mem.iter().any(|r| {
            let start = r.start_addr().0;
            start < end && gpa < start.saturating_add(r.len())
        })
    }

    /// The host's view of `len` bytes of guest RAM at `gpa`, if they lie in one region.
    fn slice(&self, gpa: u64, len: usize) -> Option<VolatileSlice<'a>> {
        for (start, bytes) in self.regions.iter().flatten() {
            if let Some(off) = gpa.checked_sub(*start) {
                if let Ok(off) = usize::try_from(off) {
                    if off < bytes.len() {
                        return bytes.subslice(off, len).ok();
                    }
                }
            }
        }
        self.mem.get_slice(GuestAddress(gpa), len).ok()
    }
}

/// `T` at `offset` of a page, read at once (volatile: other vCPUs may be writing it).
fn load<T: ByteValued>(page: &VolatileSlice, offset: u64) -> Option<T> {
    let offset = usize::try_from(offset).ok()?;
    page.get_ref::<T>(offset).ok().map(|r| r.load())
}

impl PhysRead for Ram<'_> {
    fn read_u64(&self, gpa: u64) -> Option<u64> {
        load::<u64>(&self.slice(gpa, 8)?, 0).map(u64::from_le)
    }

    fn read_u32(&self, gpa: u64) -> Option<u32> {
        load::<u32>(&self.slice(gpa, 4)?, 0).map(u32::from_le)
    }
}

/// One address space of the guest, read-only, as one sample's walk sees it. Each page it
/// touches is translated through the guest's page tables once per walk; the walk reads a page's
/// bytes straight from the host's mapping of guest RAM (volatile reads of just the bytes
/// asked for: other vCPUs may be writing them).
pub struct GuestVirt<'a> {
    ram: Ram<'a>,
    paging: Paging,
    /// Valid for this walk only: the guest may change its page tables once its vCPU runs.
    tlb: [Option<TlbEntry<'a>>; TLB_ENTRIES],
    /// The last page that did not translate to guest RAM, and the range around it unreadable
    /// with it ([`Memory::hole`], answered without walking again).
    missed: Option<(u64, Option<(u64, u64)>)>,
}

impl<'a> GuestVirt<'a> {
    /// The address space `paging` describes.
    pub fn new(mem: &'a GuestMemoryMmap, paging: Paging) -> Self {
        GuestVirt {
            ram: Ram::new(mem),
            paging,
            tlb: [None; TLB_ENTRIES],
            missed: None,
        }
    }

    /// The translation of the virtual page `page`, or None if it is not mapped to guest RAM.
    /// The hit is every frame's path and stays small enough to inline into each read.
    #[inline]
    fn page(&mut self, page: u64) -> Option<TlbEntry<'a>> {
        let slot = usize::try_from((page >> 12) % TLB_ENTRIES as u64).unwrap_or(0);
        match &self.tlb[slot] {
            Some(e) if e.virt == page => Some(*e),
            _ => self.translate(page, slot),
        }
    }

    /// [`Self::page`]'s miss: walks the guest's page tables for `page` and fills `slot`.
    #[cold]
    #[inline(never)]
    fn translate(&mut self, page: u64, slot: usize) -> Option<TlbEntry<'a>> {
        let t = match lookup(&self.ram, &self.paging, page) {
            Ok(t) => t,
            Err(miss) => {
                self.missed = Some((page, miss.hole(page)));
                return None;
            }
        };
        let phys = t.gpa & !(PAGE - 1);
        // A page lies in one region: regions start and end on page boundaries.
        let Some(bytes) = self.ram.slice(phys, PAGE_BYTES) else {
            // A large page with no guest RAM anywhere behind it is unreadable as a whole.
            let whole = (t.size > PAGE && !self.ram.overlaps(t.gpa & !(t.size - 1), t.size))
                .then(|| (page & !(t.size - 1), t.size));
            self.missed = Some((page, whole));
            return None;
        };
        let e = TlbEntry {
            virt: page,
            phys,
            bytes,
        };
        self.tlb[slot] = Some(e);
        Some(e)
    }

    /// `T` at `addr` if it lies in one page, read at once; None if it spans two.
    fn load<T: ByteValued>(&mut self, addr: u64) -> Option<Result<T, Unreadable>> {
        let within = addr % PAGE;
        if within + std::mem::size_of::<T>() as u64 > PAGE {
            return None;
        }
        Some(
            self.page(addr - within)
                .and_then(|e| load::<T>(&e.bytes, within))
                .ok_or(Unreadable(addr)),
        )
    }
}

impl Memory for GuestVirt<'_> {
    fn physical(&mut self, addr: u64) -> Option<u64> {
        let within = addr % PAGE;
        self.page(addr - within).map(|e| e.phys + within)
    }

    fn hole(&mut self, addr: u64) -> Option<(u64, u64)> {
        let page = addr & !(PAGE - 1);
        let known = matches!(self.missed, Some((p, _)) if p == page);
        if !known && self.page(page).is_some() {
            return None;
        }
        match self.missed {
            Some((p, hole)) if p == page => hole,
            _ => None,
        }
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Unreadable> {
        let mut done = 0;
        while done < buf.len() {
            let va = addr.wrapping_add(done as u64);
            let within = va % PAGE;
            let e = self.page(va - within).ok_or(Unreadable(va))?;
            let n = (buf.len() - done).min(usize::try_from(PAGE - within).unwrap_or(0));
            let from = usize::try_from(within).map_err(|_| Unreadable(va))?;
            let src = e.bytes.subslice(from, n).map_err(|_| Unreadable(va))?;
            if src.copy_to(&mut buf[done..done + n]) != n {
                return Err(Unreadable(va));
            }
            done += n;
        }
        Ok(())
    }

    // Stack slots, unwind data and header fields: one volatile load where the value lies in
    // one page (nearly always), instead of a copy into a buffer.
    fn read_u64(&mut self, addr: u64) -> Result<u64, Unreadable> {
        match self.load::<u64>(addr) {
            Some(v) => v.map(u64::from_le),
            None => {
                let mut b = [0; 8];
                self.read(addr, &mut b)?;
                Ok(u64::from_le_bytes(b))
            }
        }
    }

    fn read_u32(&mut self, addr: u64) -> Result<u32, Unreadable> {
        match self.load::<u32>(addr) {
            Some(v) => v.map(u32::from_le),
            None => {
                let mut b = [0; 4];
                self.read(addr, &mut b)?;
                Ok(u32::from_le_bytes(b))
            }
        }
    }
}

/// Guest modules one vCPU records; images found beyond this are not.
const MAX_MODULES: usize = 4096;

/// A PE image found in guest memory during the run, read when it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundModule {
    /// The address space (CR3 without PCID bits) of an image in user space; None for one in
    /// kernel space, which every address space maps.
    pub process: Option<u64>,
    /// Its headers.
    pub image: Image,
    /// The name its export directory gives it.
    pub name: Option<String>,
    /// The PDB its CodeView record names.
    pub codeview: Option<CodeView>,
}

impl FoundModule {
    /// True if this is `image`: the same place, size and build. (Directories are not compared:
    /// a module the kernel's list names whose header is unmapped has none.)
    pub fn is(&self, image: &Image) -> bool {
        (self.image.base, self.image.size, self.image.timestamp)
            == (image.base, image.size, image.timestamp)
    }
}

/// The module a loader list's entry `m` names, in the address space `virt` reads (`process`:
/// its key, None for kernel space): the image's headers when they are mapped and agree with
/// the entry, else what the entry says. None for an entry of size 0.
pub fn listed_module(
    virt: &mut GuestVirt,
    process: Option<u64>,
    m: introspect::nt::Module,
) -> Option<FoundModule> {
    if m.size == 0 {
        return None;
    }
    let image = Image::read(virt, m.base)
        .ok()
        .filter(|im| im.size == m.size)
        .unwrap_or(Image {
            base: m.base,
            // Not known without its header: the default, x86-64.
            machine: Default::default(),
            size: m.size,
            timestamp: 0,
            exports: Default::default(),
            exceptions: Default::default(),
            debug: Default::default(),
        });
    let name = m.name.or_else(|| image.export_name(virt));
    Some(FoundModule {
        process,
        image,
        name,
        codeview: image.codeview(virt),
    })
}

/// A vCPU's stack walker: the PE images it has found, kept across samples, and the list of
/// every one it found (the guest's modules, as far as samples reached them, and every module
/// on a Windows kernel's list once a sample reached the kernel).
pub struct StackWalker {
    cache: WalkCache,
    modules: Vec<FoundModule>,
    /// The modules on the Windows kernel's list as last walked (replaced by each walk: a later
    /// walk at the PDB's offsets corrects one at the built-in ones).
    listed: Vec<FoundModule>,
    /// The Windows kernel, once found, and the page tables it was found through.
    kernel: Option<(Paging, Kernel)>,
    /// The kernel's base and CodeView record, from when it was found until taken.
    new_kernel: Option<(u64, Option<CodeView>)>,
}

impl Default for StackWalker {
    fn default() -> Self {
        StackWalker {
            cache: WalkCache::new(IMAGE_SCAN_LIMIT),
            modules: Vec::new(),
            listed: Vec::new(),
            kernel: None,
            new_kernel: None,
        }
    }
}

impl StackWalker {
    /// The modules found so far, in the order found, then those on the kernel's list.
    pub fn modules(&self) -> impl Iterator<Item = &FoundModule> {
        self.modules.iter().chain(&self.listed)
    }

    /// Looks for the image holding the sampled PC only (a sample whose stack is not walked).
    pub fn note_pc(&mut self, mem: &GuestMemoryMmap, cpu: &CpuState) {
        let mut virt = GuestVirt::new(mem, cpu.paging);
        self.cache.images.begin_walk();
        self.cache.images.find(&mut virt, cpu.paging.cr3, cpu.rip);
        self.collect(&mut virt);
    }

    /// Looks for the image holding the kernel-space address `addr` (a system-call entry read
    /// from IA32_LSTAR) through the page tables `paging`.
    pub fn note_address(&mut self, mem: &GuestMemoryMmap, paging: Paging, addr: u64) {
        if addr >> 63 == 0 || self.kernel.is_some() {
            return;
        }
        let mut virt = GuestVirt::new(mem, paging);
        self.cache.images.begin_walk();
        self.cache.images.find(&mut virt, paging.cr3, addr);
        self.collect(&mut virt);
    }

    /// The Windows kernel's base and CodeView record, once, after a sample found it.
    pub fn take_new_kernel(&mut self) -> Option<(u64, Option<CodeView>)> {
        self.new_kernel.take()
    }

    /// The Windows kernel this vCPU's samples found, if any.
    pub fn kernel(&self) -> Option<&Kernel> {
        self.kernel.as_ref().map(|(_, k)| k)
    }

    /// Moves the images the cache found into the module list, reading each one's name and
    /// CodeView record while its address space is the one being walked. The first kernel-space
    /// image that is the Windows kernel brings in every module on its list.
    fn collect(&mut self, virt: &mut GuestVirt) {
        for (space, image) in self.cache.images.take_found() {
            let process = (space != KERNEL_SPACE).then_some(space);
            let name = image.export_name(virt);
            self.add(virt, process, image, name);
            if space == KERNEL_SPACE && self.kernel.is_none() {
                if let Some(kernel) = Kernel::of(virt, &image) {
                    log::info!("Windows kernel found at {:#x}", image.base);
                    self.new_kernel = Some((image.base, image.codeview(virt)));
                    self.kernel = Some((virt.paging, kernel));
                    self.add_kernel_modules(virt, None);
                }
            }
        }
    }

    /// Records `image` unless it is known; its CodeView record is read here.
    fn add(
        &mut self,
        virt: &mut GuestVirt,
        process: Option<u64>,
        image: Image,
        name: Option<String>,
    ) {
        let known = self
            .modules
            .iter()
            .any(|m| m.process == process && m.is(&image));
        if self.modules.len() < MAX_MODULES && !known {
            self.modules.push(FoundModule {
                process,
                image,
                name,
                codeview: image.codeview(virt),
            });
        }
    }

    /// Adds every module on the kernel's loaded-module list: each image's headers when they
    /// are mapped and agree with the list, else what the list says.
    fn add_kernel_modules(&mut self, virt: &mut GuestVirt, layout: Option<&WindowsLayout>) {
        let Some((_, kernel)) = &self.kernel else {
            return;
        };
        let list = match layout {
            Some(layout) => kernel.modules_with(virt, layout),
            None => kernel.modules(virt),
        };
        if list.end != introspect::nt::ListEnd::Complete {
            log::warn!("the kernel's module list ended early: {:?}", list.end);
        }
        self.listed = list
            .modules
            .into_iter()
            .filter(|m| m.base >> 63 == 1)
            .filter_map(|m| listed_module(virt, None, m))
            .take(MAX_MODULES)
            .collect();
    }

    /// Walks the kernel's module list again, if this walker found the kernel (the run is
    /// ending: drivers loaded since the kernel was found are added), at `layout`'s offsets
    /// when the kernel's PDB gave them.
    pub fn refresh_kernel_modules(
        &mut self,
        mem: &GuestMemoryMmap,
        layout: Option<&WindowsLayout>,
    ) {
        if let Some((paging, _)) = self.kernel {
            let mut virt = GuestVirt::new(mem, paging);
            self.add_kernel_modules(&mut virt, layout);
        }
    }

    /// The call stack of a vCPU sampled at `cpu`, at most `max_depth` frames.
    pub fn walk(&mut self, mem: &GuestMemoryMmap, cpu: &CpuState, max_depth: usize) -> Stack {
        self.walk_with_files(mem, cpu, max_depth, None, false)
    }

    /// [`StackWalker::walk`], with the ELF files the sampled process maps (their call-frame
    /// information unwinds the frames in them); `linux`: the guest is Linux, whose kernel
    /// entry frames lead to the contexts they saved ([`introspect::entry`]).
    pub fn walk_with_files(
        &mut self,
        mem: &GuestMemoryMmap,
        cpu: &CpuState,
        max_depth: usize,
        files: Option<&SpaceUnwinder>,
        linux: bool,
    ) -> Stack {
        if cpu.compat {
            self.note_pc(mem, cpu);
            return Stack {
                pcs: vec![cpu.rip],
                end: End::Compat,
            };
        }
        let regs = Regs {
            gpr: cpu.gpr,
            rip: cpu.rip,
        };
        let mut virt = GuestVirt::new(mem, cpu.paging);
        let stack = introspect::walk_with_files(
            &mut virt,
            &mut self.cache,
            cpu.paging.cr3,
            regs,
            Options {
                max_depth,
                linux_entries: linux,
            },
            files,
        );
        self.collect(&mut virt);
        stack
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::Bytes;

    const CR0_PG: u64 = 1 << 31;
    const CR4_PAE: u64 = 1 << 5;
    const EFER_LMA: u64 = 1 << 10;

    /// 4-level paging at 0x1000 mapping virtual 0x40_0000.. to physical 0x10_0000.., 4 KiB
    /// pages (`pages` of them), and nothing else.
    fn guest(pages: u64) -> (GuestMemoryMmap, Paging) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 4 << 20)]).unwrap();
        let entry = |table: u64, index: u64, value: u64| {
            mem.write_obj(value | 3, GuestAddress(table + index * 8))
                .unwrap();
        };
        entry(0x1000, 0, 0x2000);
        entry(0x2000, 0, 0x3000);
        entry(0x3000, 2, 0x4000);
        for i in 0..pages {
            entry(0x4000, i, 0x10_0000 + i * PAGE);
        }
        let paging = Paging {
            cr0: CR0_PG | 1,
            cr3: 0x1000,
            cr4: CR4_PAE,
            efer: EFER_LMA,
        };
        (mem, paging)
    }

    #[test]
    fn reads_cross_pages_and_stop_at_unmapped_ones() {
        let (mem, paging) = guest(2);
        mem.write_obj(0x1122_3344_5566_7788u64, GuestAddress(0x10_0ffc))
            .unwrap();
        let mut v = GuestVirt::new(&mem, paging);
        assert_eq!(v.read_u64(0x40_0ffc), Ok(0x1122_3344_5566_7788));
        assert_eq!(v.read_u64(0x40_1ffc), Err(Unreadable(0x40_2000)));
        assert_eq!(v.read_u64(0x7fff_0000), Err(Unreadable(0x7fff_0000)));
    }

    /// What a search for image headers may step over: a range whose page directory entry is
    /// missing, and a large page with no guest RAM behind it; not a 4 KiB page that is mapped
    /// or one whose page table says only that page is missing.
    #[test]
    fn holes_are_whole_unreadable_ranges() {
        let (mem, paging) = guest(2);
        // PD entry 3: a 2 MiB page at 3 GiB, beyond the guest's 4 MiB of RAM; entry 4: one at
        // 2 MiB, in RAM.
        let large = |index: u64, frame: u64| {
            mem.write_obj(frame | 0x83, GuestAddress(0x3000 + index * 8))
                .unwrap();
        };
        large(3, 0xc000_0000);
        large(4, 0x20_0000);
        let mut v = GuestVirt::new(&mem, paging);
        let mib2 = 2 << 20;
        assert_eq!(v.hole(0x40_0000), None, "mapped");
        assert_eq!(v.hole(0x40_2000), Some((0x40_2000, PAGE)), "its PTE");
        assert_eq!(
            v.hole(0x2_0000_1234),
            Some((8 << 30, 1 << 30)),
            "no PDPT entry 8"
        );
        assert_eq!(
            v.hole(0x80_0000_1234),
            Some((1 << 39, 1 << 39)),
            "no PML4 entry 1"
        );
        assert_eq!(v.hole(0x20_5000), Some((0x20_0000, mib2)), "no PD entry 1");
        assert_eq!(v.read_u16(0x60_1000), Err(Unreadable(0x60_1000)));
        assert_eq!(
            v.hole(0x60_1000),
            Some((0x60_0000, mib2)),
            "no RAM behind it"
        );
        assert_eq!(v.hole(0x80_1000), None, "a large page in RAM");
    }

    #[test]
    fn walks_a_frame_pointer_chain_in_guest_memory() {
        let (mem, paging) = guest(4);
        // Frames at virtual 0x40_3f00 (rbp) -> 0x40_3f40 -> end.
        let words = [
            (0x10_3f00, 0x40_3f40u64),
            (0x10_3f08, 0x40_0111),
            (0x10_3f48, 0x40_0222),
        ];
        for (at, w) in words {
            mem.write_obj(w, GuestAddress(at)).unwrap();
        }
        let mut gpr = [0; 16];
        gpr[Regs::RSP] = 0x40_3ef0;
        gpr[Regs::RBP] = 0x40_3f00;
        let cpu = CpuState {
            rip: 0x40_0010,
            gpr,
            cpl: 3,
            paging,
            ..CpuState::default()
        };
        let s = StackWalker::default().walk(&mem, &cpu, 64);
        assert_eq!(s.pcs, [0x40_0010, 0x40_0111, 0x40_0222]);
        assert_eq!(s.end, End::Complete);
        // The same registers in compatibility mode (x86 code of a WOW64 process): the stack
        // holds 4-byte frames, not x64's, and only the sampled PC is taken.
        let compat = CpuState {
            compat: true,
            ..cpu
        };
        let s = StackWalker::default().walk(&mem, &compat, 64);
        assert_eq!(s.pcs, [0x40_0010]);
        assert_eq!(s.end, End::Compat);
    }
}
