//! A Linux process's mappings, read from its address space's own structures: the VMAs in the
//! maple tree `mm_struct.mm_mt` (Linux 6.1 and later), each with its range, flags, file offset
//! and the path of the file it maps, rebuilt from the dentries' names.
//!
//! The tree is read as the kernel's RCU readers read it, without its lock, while other vCPUs
//! may be changing it: a node's entry says its type in bits 3-6 and its address in the bits
//! above 8 (`MAPLE_NODE_MASK`), the root's with bit 1 set, a child's with bits 0-1 clear;
//! inner nodes of an address space's tree are `maple_arange_64`
//! (10 slots, 9 pivots), leaves `maple_leaf_64` with `maple_range_64`'s layout (16 slots, 15
//! pivots). Slot `i` covers the indices after pivot `i - 1` (or the node's minimum) up to
//! pivot `i` (the node's maximum for the last slot, and where the pivot is 0). The last slot
//! in use comes from the node's metadata (`meta.end`) as the kernel's `ma_data_end` finds it;
//! pivots past it are stale and never read. A leaf's entries are `vm_area_struct` pointers, each
//! checked against the range the tree gives it (`vm_start`, `vm_end - 1`): a VMA that does not
//! agree (a tree changing under the read) is left out, never given another's range.
//!
//! Bounds against a hostile or changing guest: at most [`MAX_NODES`] nodes and
//! [`MAX_MAPPINGS`] mappings, [`MAX_HEIGHT`] levels, every pointer a kernel object, ranges
//! strictly increasing; a path at most [`MAX_PATH_DEPTH`] names of at most [`MAX_NAME`] bytes.
//! A mount point is not crossed: a path is the file's within its own file system (the
//! initramfs's rootfs holds everything of a guest that mounts nothing over `/`).

use std::collections::HashMap;

use super::super::layout::{LinuxLayout, VmaLayout};
use super::super::read::{kernel_object, u64_at};
use super::super::IdentifyError;
use crate::mem::Memory;

/// Most mappings read of one address space (the kernel's default `vm.max_map_count` is 65,530).
pub const MAX_MAPPINGS: usize = 65_536;
/// Most tree nodes read for one address space.
pub const MAX_NODES: usize = 8_192;
/// `MAPLE_HEIGHT_MAX`.
pub const MAX_HEIGHT: usize = 31;
/// Most names in one path.
pub const MAX_PATH_DEPTH: usize = 64;
/// `NAME_MAX`.
pub const MAX_NAME: usize = 255;

/// `MAPLE_NODE_MASK`: the low bits of a node entry that are not its address.
const NODE_MASK: u64 = 0xff;
/// `maple_leaf_64` (enum maple_type): a leaf, laid out as `maple_range_64`.
pub const LEAF_64: u64 = 1;
/// `maple_range_64`: an inner node of a tree that does not track gaps.
pub const RANGE_64: u64 = 2;
/// `maple_arange_64`: an inner node of an allocation tree.
pub const ARANGE_64: u64 = 3;

/// `VM_READ`, `VM_WRITE`, `VM_EXEC`.
pub const VM_READ: u64 = 1;
/// Writable.
pub const VM_WRITE: u64 = 2;
/// Executable.
pub const VM_EXEC: u64 = 4;

/// One mapping of a process's address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Its first address.
    pub start: u64,
    /// The address after its last.
    pub end: u64,
    /// `vm_flags` ([`VM_READ`], [`VM_WRITE`], [`VM_EXEC`], ...).
    pub flags: u64,
    /// Where in the file it starts, in bytes (`vm_pgoff` pages).
    pub offset: u64,
    /// The file's path within its file system; None for anonymous memory, or a file whose
    /// name could not be read.
    pub path: Option<String>,
}

impl Mapping {
    /// True for executable code.
    pub fn exec(&self) -> bool {
        self.flags & VM_EXEC != 0
    }
}

/// An address space's mappings and how complete the read was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mappings {
    /// In address order, none overlapping.
    pub mappings: Vec<Mapping>,
    /// Entries left out: a VMA whose own range disagreed with the tree's, or a node past a
    /// bound.
    pub skipped: u64,
}

impl Mappings {
    /// The mapping holding `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.end <= addr);
        self.mappings.get(i).filter(|m| m.start <= addr)
    }
}

/// The tree's root entry as a node: (address, type). `ma_root` holds a node with bit 1 set
/// (`MAPLE_ROOT_NODE`; xa_is_node: low bits 0b10, above the first page); anything else is an
/// empty tree or a single entry.
fn root_node(entry: u64) -> Option<(u64, u64)> {
    (entry & 3 == 2 && entry > 4096).then_some((entry & !NODE_MASK, (entry >> 3) & 0xf))
}

/// An inner node's slot as a child node: (address, type). A child is an encoded node
/// (`mt_mk_node`: the type in bits 3-6, bit 2 a flag, bits 0-1 clear).
fn child_node(entry: u64) -> Option<(u64, u64)> {
    (entry & 3 == 0 && entry > 4096).then_some((entry & !NODE_MASK, (entry >> 3) & 0xf))
}

/// The mappings of the address space `mm` (a `mm_struct`), read through `kmem`.
pub fn mappings(
    kmem: &mut dyn Memory,
    layout: &LinuxLayout,
    mm: u64,
) -> Result<Mappings, IdentifyError> {
    let (Some(root_off), Some(v)) = (layout.mm_struct.mm_mt_root, layout.vmas.as_ref()) else {
        return Ok(Mappings::default());
    };
    kernel_object("mm", mm)?;
    let root = u64_at(kmem, mm, root_off)?;
    let mut out = Mappings::default();
    let mut vmas = Vec::new();
    if let Some(n) = root_node(root) {
        walk_tree(kmem, v, n, &mut vmas, &mut out.skipped)?;
    }
    // An empty tree is NULL; a tree of one entry at index 0 holds it in the root, which an
    // address space (nothing maps page 0's first byte alone) never does.
    let mut paths: HashMap<u64, Option<String>> = HashMap::new();
    for (lo, hi, vma) in vmas {
        let f = &v.vm_area_struct;
        let (start, end) = (u64_at(kmem, vma, f.vm_start)?, u64_at(kmem, vma, f.vm_end)?);
        if start != lo || end.wrapping_sub(1) != hi || end <= start {
            out.skipped += 1;
            continue;
        }
        let flags = u64_at(kmem, vma, f.vm_flags)?;
        let pgoff = u64_at(kmem, vma, f.vm_pgoff)?;
        let file = u64_at(kmem, vma, f.vm_file)?;
        let path = match file {
            0 => None,
            file => paths
                .entry(file)
                .or_insert_with(|| file_path(kmem, v, file))
                .clone(),
        };
        out.mappings.push(Mapping {
            start,
            end,
            flags,
            offset: pgoff.saturating_mul(4096),
            path,
        });
    }
    Ok(out)
}

/// Collects (first, last, vma) of every leaf entry under the node `(addr, kind)`, in index
/// order; ranges must increase strictly.
fn walk_tree(
    kmem: &mut dyn Memory,
    v: &VmaLayout,
    root: (u64, u64),
    vmas: &mut Vec<(u64, u64, u64)>,
    skipped: &mut u64,
) -> Result<(), IdentifyError> {
    // (node, kind, min, max, height); children pushed in reverse so they pop in order.
    let mut stack = vec![(root.0, root.1, 0u64, u64::MAX, 1usize)];
    let mut nodes = 0;
    let mut next = 0u64; // the lowest index the next entry may start at
    while let Some((addr, kind, min, max, height)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_NODES || height > MAX_HEIGHT {
            *skipped += 1;
            continue;
        }
        kernel_object("maple node", addr)?;
        // Leaves use maple_range_64's layout.
        let (pivots, slots, shape) = match kind {
            LEAF_64 | RANGE_64 => (15, 16, (v.range_64.pivot, v.range_64.slot, v.range_64.meta)),
            ARANGE_64 => (
                9,
                10,
                (v.arange_64.pivot, v.arange_64.slot, v.arange_64.meta),
            ),
            _ => {
                return Err(IdentifyError::Implausible {
                    what: "maple node type",
                    value: kind,
                })
            }
        };
        let (piv_off, slot_off, meta_off) = shape;
        let leaf = kind == LEAF_64;
        let pivot = |kmem: &mut dyn Memory, i: u32| u64_at(kmem, addr, piv_off + 8 * i);
        // The last slot in use (ma_data_end): an arange node's metadata says; a range or leaf
        // node is full when its last pivot is set (the node's maximum: slot 14; else all 16),
        // and says in its metadata (over slot 15) when it is not. Pivots past it are stale.
        let meta_end = |kmem: &mut dyn Memory| -> Result<u32, IdentifyError> {
            let word = u64_at(kmem, addr, meta_off)?;
            Ok(u32::from(word.to_le_bytes()[0]).min(slots - 1))
        };
        let end = match kind {
            ARANGE_64 => meta_end(kmem)?,
            _ => match pivot(kmem, pivots - 1)? {
                0 => meta_end(kmem)?,
                p if p == max => pivots - 1,
                _ => slots - 1,
            },
        };
        let mut children = Vec::new();
        let mut lo = min;
        for i in 0..=end {
            // A slot's last index: its pivot, or the node's maximum for the last slot and
            // where the pivot is 0 (mas_logical_pivot).
            let hi = match if i < pivots { pivot(kmem, i)? } else { 0 } {
                0 if i > 0 || end == 0 => max,
                p => p.min(max),
            };
            if hi < lo {
                return Err(IdentifyError::Implausible {
                    what: "maple pivot",
                    value: hi,
                });
            }
            let slot = u64_at(kmem, addr, slot_off + 8 * i)?;
            if slot != 0 {
                if leaf {
                    if lo < next || vmas.len() >= MAX_MAPPINGS {
                        *skipped += 1;
                    } else {
                        kernel_object("vm_area_struct", slot)?;
                        vmas.push((lo, hi, slot));
                        next = hi.saturating_add(1);
                    }
                } else {
                    match child_node(slot) {
                        Some((child, child_kind)) => {
                            children.push((child, child_kind, lo, hi, height + 1));
                        }
                        None => *skipped += 1,
                    }
                }
            }
            if hi >= max {
                break;
            }
            lo = hi + 1;
        }
        stack.extend(children.into_iter().rev());
    }
    Ok(())
}

/// The path of the file `file` (a `struct file`): its dentry's name and its parents' up to the
/// file system's root; None where a pointer or name is not readable or plausible.
pub fn file_path(kmem: &mut dyn Memory, v: &VmaLayout, file: u64) -> Option<String> {
    kernel_object("file", file).ok()?;
    let mut dentry = kernel_object("dentry", u64_at(kmem, file, v.file.dentry).ok()?).ok()?;
    let mut names: Vec<String> = Vec::new();
    for _ in 0..MAX_PATH_DEPTH {
        let parent = kernel_object("dentry", u64_at(kmem, dentry, v.dentry.parent).ok()?).ok()?;
        if parent == dentry {
            names.reverse();
            return Some(format!("/{}", names.join("/")));
        }
        let name = u64_at(kmem, dentry, v.dentry.name).ok()?;
        names.push(c_name(kmem, name)?);
        dentry = parent;
    }
    None
}

/// The NUL-terminated name at `addr`, at most [`MAX_NAME`] bytes, read a chunk at a time and
/// cleaned as every guest name is ([`text::fixed`](super::super::text::fixed)); None for an
/// empty or unterminated one.
fn c_name(kmem: &mut dyn Memory, addr: u64) -> Option<String> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 32];
    while bytes.len() <= MAX_NAME {
        let at = addr.wrapping_add(bytes.len() as u64);
        // Never read past the page the name is in only to find its end.
        let room = usize::try_from(4096 - (at % 4096)).unwrap_or(0);
        let n = chunk.len().min(room);
        kmem.read(at, &mut chunk[..n]).ok()?;
        match chunk[..n].iter().position(|b| *b == 0) {
            Some(end) => {
                bytes.extend_from_slice(&chunk[..end]);
                return (!bytes.is_empty() && bytes.len() <= MAX_NAME)
                    .then(|| super::super::text::fixed(&bytes));
            }
            None => bytes.extend_from_slice(&chunk[..n]),
        }
    }
    None
}

#[cfg(test)]
mod tests;
