//! A Linux address space's mappings as Linux 6.1 keeps them (feature `test-support`): a
//! kernel heap holding an `mm_struct` whose maple tree of VMAs, the VMAs, their files and the
//! dentries of the files' paths are laid out at the test kernel's offsets, for the VMA
//! reader's tests ([`crate::os::linux::maps`]), its fuzz target and the fuzzer's seed.

use crate::os::layout::{
    Dentry, FileStruct, LinuxLayout, MapleArange64, MapleRange64, MmStruct, VmAreaStruct, VmaLayout,
};
use crate::os::linux::maps::{ARANGE_64, LEAF_64, VM_EXEC, VM_READ, VM_WRITE};
use crate::Regions;

/// Where the kernel heap lies.
pub const HEAP: u64 = 0xffff_8880_0100_0000;
/// Its size.
pub const HEAP_LEN: usize = 0x1_0000;

/// A layout with offsets like Linux 6.1's on x86-64 (the VMA and maple node members are
/// 6.1's; `file` and `dentry` are made up).
pub fn layout() -> LinuxLayout {
    let by = |pairs: &'static [(&'static str, u32)]| {
        move |m: &'static str| pairs.iter().find(|p| p.0 == m).map(|p| p.1)
    };
    LinuxLayout {
        mm_struct: MmStruct::build(0x380, by(&[("pgd", 0x48), ("mm_mt.ma_root", 0x8)])).unwrap(),
        vmas: Some(VmaLayout {
            vm_area_struct: VmAreaStruct::build(
                0x88,
                by(&[
                    ("vm_start", 0),
                    ("vm_end", 8),
                    ("vm_flags", 32),
                    ("vm_pgoff", 104),
                    ("vm_file", 112),
                ]),
            )
            .unwrap(),
            file: FileStruct::build(0xe8, by(&[("f_path.dentry", 0x18)])).unwrap(),
            dentry: Dentry::build(0xc0, by(&[("d_name.name", 0x28), ("d_parent", 0x18)])).unwrap(),
            range_64: MapleRange64::build(
                0x100,
                by(&[("pivot", 8), ("slot", 0x80), ("meta", 0xf8)]),
            )
            .unwrap(),
            arange_64: MapleArange64::build(
                0xf8,
                by(&[("pivot", 8), ("slot", 0x50), ("meta", 0xf0)]),
            )
            .unwrap(),
        }),
        ..Default::default()
    }
}

/// The kernel heap, written by address.
pub struct Heap(pub Vec<u8>);

impl Default for Heap {
    fn default() -> Self {
        Heap(vec![0; HEAP_LEN])
    }
}

impl Heap {
    /// All zero.
    pub fn new() -> Self {
        Self::default()
    }
    /// Writes `v` at `addr`.
    pub fn u64(&mut self, addr: u64, v: u64) {
        let at = usize::try_from(addr - HEAP).unwrap();
        self.0[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    /// Writes `b` at `addr`.
    pub fn bytes(&mut self, addr: u64, b: &[u8]) {
        let at = usize::try_from(addr - HEAP).unwrap();
        self.0[at..at + b.len()].copy_from_slice(b);
    }
    /// The heap as guest memory.
    pub fn mem(self) -> Regions {
        Regions::new().with(HEAP, self.0)
    }

    /// A node at `addr` of `kind` with `pivots` and `slots`; returns its encoded entry (as a
    /// parent's slot holds it; [`root`] makes it the tree's root).
    pub fn node(&mut self, addr: u64, kind: u64, pivots: &[u64], slots: &[u64]) -> u64 {
        let (p, s, meta) = if kind == ARANGE_64 {
            (8, 0x50, 0xf0)
        } else {
            (8, 0x80, 0xf8)
        };
        for (i, v) in pivots.iter().enumerate() {
            self.u64(addr + p + 8 * i as u64, *v);
        }
        for (i, v) in slots.iter().enumerate() {
            self.u64(addr + s + 8 * i as u64, *v);
        }
        // meta.end: the last slot in use.
        let end = u8::try_from(slots.len().saturating_sub(1)).unwrap_or(0);
        self.bytes(addr + meta, &[end]);
        // An encoded node as a parent's slot holds it (`mt_mk_node`: bit 2 set).
        addr | (kind << 3) | 4
    }

    /// A VMA at `addr`; returns its address.
    pub fn vma(
        &mut self,
        addr: u64,
        start: u64,
        end: u64,
        flags: u64,
        pgoff: u64,
        file: u64,
    ) -> u64 {
        self.u64(addr, start);
        self.u64(addr + 8, end);
        self.u64(addr + 32, flags);
        self.u64(addr + 104, pgoff);
        self.u64(addr + 112, file);
        addr
    }

    /// A dentry named `name` under `parent` (itself for the root).
    pub fn dentry(&mut self, addr: u64, name: &str, parent: u64) -> u64 {
        let name_at = addr + 0x80;
        self.bytes(name_at, name.as_bytes());
        self.u64(addr + 0x28, name_at);
        self.u64(addr + 0x18, if parent == 0 { addr } else { parent });
        addr
    }

    /// A `struct file` at `addr` naming `dentry`.
    pub fn file(&mut self, addr: u64, dentry: u64) -> u64 {
        self.u64(addr + 0x18, dentry);
        addr
    }
}

/// The `mm_struct`, at the heap's start.
pub const MM: u64 = HEAP;

/// An address space as a small process has it: a two-level tree (an inner node over two
/// leaves) of busybox's text and data, an anonymous heap, and the stack.
pub fn process() -> Heap {
    let mut h = Heap::new();
    let slash = h.dentry(HEAP + 0x2000, "/", 0);
    let bin = h.dentry(HEAP + 0x2100, "bin", slash);
    let busybox = h.dentry(HEAP + 0x2200, "busybox", bin);
    let file = h.file(HEAP + 0x2300, busybox);
    let text = h.vma(
        HEAP + 0x3000,
        0x40_1000,
        0x4a_0000,
        VM_READ | VM_EXEC,
        1,
        file,
    );
    let data = h.vma(
        HEAP + 0x3100,
        0x4a_0000,
        0x4a_2000,
        VM_READ | VM_WRITE,
        0xa0,
        file,
    );
    let heap = h.vma(
        HEAP + 0x3200,
        0x4c_0000,
        0x4e_0000,
        VM_READ | VM_WRITE,
        0,
        0,
    );
    let stack = h.vma(HEAP + 0x3300, 0x7ffc_0000_0000, 0x7ffc_0002_1000, 3, 0, 0);
    let low = h.node(
        HEAP + 0x1000,
        LEAF_64,
        &[
            0x40_0fff,
            0x49_ffff,
            0x4a_1fff,
            0x4b_ffff,
            0x4d_ffff,
            0x7fff_ffff,
        ],
        &[0, text, data, 0, heap, 0],
    );
    let high = h.node(
        HEAP + 0x1100,
        LEAF_64,
        &[0x7ffb_ffff_ffff, 0x7ffc_0002_0fff, u64::MAX],
        &[0, stack, 0],
    );
    // A node's last used slot ends at the node's maximum, written as its pivot.
    let top = h.node(
        HEAP + 0x1200,
        ARANGE_64,
        &[0x7fff_ffff, u64::MAX],
        &[low, high],
    );
    h.u64(MM + 8, root(top));
    h
}

/// An encoded node as `mm_mt.ma_root` holds it (`MAPLE_ROOT_NODE`, bit 1).
pub fn root(node: u64) -> u64 {
    node | 2
}
