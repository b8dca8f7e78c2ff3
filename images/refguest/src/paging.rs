//! User address spaces. Each process has its own PML4 and PDPT; the PDPT
//! shares the kernel's page directories for 0..1 GiB and 2..4 GiB
//! (supervisor-only) and maps its own user window at 1 GiB:
//!
//! USER_BASE..  user code (.user section, read-only, same physical pages in every process)
//! USER_DATA    one private read-write data page
//! ..USER_STACK_TOP  private read-write stack
//! pe::WINDOW..   a PE image passed as module 0, if one was loaded (read-only, shared)
//!
//! A PE image based in pe::KERNEL_WINDOW is mapped in kernel space instead (`map_kernel_image`):
//! in the boot page tables, and in every address space created afterwards (supervisor only),
//! as a kernel is mapped in every process.

use crate::boot;
use crate::pe;
use crate::cpu::Page;
use crate::sync::RacyCell;
use crate::user::{USER_BASE, USER_DATA, USER_STACK_PAGES, USER_STACK_TOP};

pub const MAX_SPACES: usize = 8;

const PRESENT: u64 = 1;
const WRITABLE: u64 = 1 << 1;
const USER: u64 = 1 << 2;

#[repr(C)]
struct SpacePages {
    pml4: Page,
    pdpt: Page,
    pd: Page,
    pt: Page,
    pe_pt: Page,
    data: Page,
    stack: [Page; USER_STACK_PAGES],
}

const EMPTY: SpacePages =
    SpacePages { pml4: Page::ZERO, pdpt: Page::ZERO, pd: Page::ZERO, pt: Page::ZERO, pe_pt: Page::ZERO, data: Page::ZERO, stack: [Page::ZERO; USER_STACK_PAGES] };

static SPACES: RacyCell<[SpacePages; MAX_SPACES]> = RacyCell::new([EMPTY; MAX_SPACES]);

extern "C" {
    static __user_lma: u8;
    static __user_start: u8;
    static __user_end: u8;
}

/// A user address space; `cr3` is its PML4's physical address.
#[derive(Clone, Copy)]
pub struct AddressSpace {
    pub cr3: u64,
    /// Which slot of `SPACES` it is built in.
    pub slot: usize,
    /// The physical (and kernel) address of its data page, mapped at USER_DATA.
    pub data: u64,
}

fn addr<T>(page: &T) -> u64 {
    page as *const T as u64
}

/// Builds address space number `slot`: a fresh slot, or one whose processes have all ended
/// (`sched::respawn`), which then gets the same CR3 back.
pub fn create(slot: usize) -> AddressSpace {
    // SAFETY: `sched` hands out a slot under its lock, either fresh or once every process in
    // it has ended, so no CPU uses a slot's tables while they are rebuilt.
    let s = unsafe { &mut (*SPACES.get())[slot] };
    // SAFETY: SpacePages is plain data; all-zero is its empty state.
    unsafe { core::ptr::write_bytes(s as *mut SpacePages, 0, 1) };
    // SAFETY: the boot PDPT is initialised before Rust code runs.
    let kernel = unsafe { &*boot::kernel_pdpt() };
    s.pml4.0[0] = addr(&s.pdpt) | PRESENT | WRITABLE | USER;
    s.pdpt.0 = *kernel;
    let window = (USER_BASE >> 30) as usize;
    s.pdpt.0[window] = addr(&s.pd) | PRESENT | WRITABLE | USER;
    s.pd.0[0] = addr(&s.pt) | PRESENT | WRITABLE | USER;
    let index = |va: u64| ((va - USER_BASE) >> 12) as usize;
    let lma = (&raw const __user_lma) as u64;
    let code_len = (&raw const __user_end) as u64 - (&raw const __user_start) as u64;
    for offset in (0..code_len).step_by(4096) {
        s.pt.0[index(USER_BASE + offset)] = (lma + offset) | PRESENT | USER;
    }
    s.pt.0[index(USER_DATA)] = addr(&s.data) | PRESENT | WRITABLE | USER;
    let stack_bottom = USER_STACK_TOP - 4096 * USER_STACK_PAGES as u64;
    for (i, page) in s.stack.iter().enumerate() {
        s.pt.0[index(stack_bottom) + i] = addr(page) | PRESENT | WRITABLE | USER;
    }
    if let Some((image, phys)) = pe::loaded().filter(|(image, _)| !image.kernel) {
        s.pd.0[((pe::WINDOW - USER_BASE) >> 21) as usize] = addr(&s.pe_pt) | PRESENT | WRITABLE | USER;
        let first = ((image.base - pe::WINDOW) >> 12) as usize;
        for i in 0..image.pages {
            s.pe_pt.0[first + i] = (phys + 4096 * i as u64) | PRESENT | USER;
        }
    }
    let kernel_window = ((pe::KERNEL_WINDOW >> 39) & 511) as usize;
    // SAFETY: the boot PML4 is identity mapped; its kernel-window entry is written once, by
    // `map_kernel_image`, before any address space that should share it is created.
    s.pml4.0[kernel_window] = unsafe { (*(boot::kernel_pml4() as *const [u64; 512]))[kernel_window] };
    AddressSpace { cr3: addr(&s.pml4), slot, data: addr(&s.data) }
}

/// Page tables for each 2 MiB of pe::KERNEL_WINDOW.
const KERNEL_WINDOW_PTS: usize = (pe::KERNEL_WINDOW_SIZE >> 21) as usize;

/// Page tables for pe::KERNEL_WINDOW: a PDPT, a PD and its PTs under the boot PML4.
static KERNEL_WINDOW_TABLES: RacyCell<([Page; 2], [Page; KERNEL_WINDOW_PTS])> =
    RacyCell::new(([Page::ZERO; 2], [Page::ZERO; KERNEL_WINDOW_PTS]));

/// Maps the kernel-window PE image (supervisor, read-write, as a kernel's data is) into the
/// boot page tables and reloads CR3. Returns false if the loaded image is not one.
pub fn map_kernel_image() -> bool {
    let Some((image, phys)) = pe::loaded().filter(|(image, _)| image.kernel) else {
        return false;
    };
    // SAFETY: called once by the BSP during scenario setup, before any other CPU could
    // walk these tables (they are unreachable until the PML4 entry below is written).
    let ([pdpt, pd], pts) = unsafe { &mut *KERNEL_WINDOW_TABLES.get() };
    pdpt.0[((pe::KERNEL_WINDOW >> 30) & 511) as usize] = addr(pd) | PRESENT | WRITABLE;
    let first_pd = ((pe::KERNEL_WINDOW >> 21) & 511) as usize;
    for (i, pt) in pts.iter().enumerate() {
        pd.0[first_pd + i] = addr(pt) | PRESENT | WRITABLE;
    }
    let first = ((image.base - pe::KERNEL_WINDOW) >> 12) as usize;
    for i in 0..image.pages {
        let page = first + i;
        pts[page / 512].0[page % 512] = (phys + 4096 * i as u64) | PRESENT | WRITABLE;
    }
    let pml4 = boot::kernel_pml4() as *mut [u64; 512];
    // SAFETY: the boot PML4 is identity mapped; its kernel-window slot is unused until now.
    unsafe { (*pml4)[((pe::KERNEL_WINDOW >> 39) & 511) as usize] = addr(pdpt) | PRESENT | WRITABLE };
    // SAFETY: reloading the current CR3 only flushes the TLB.
    unsafe { crate::cpu::write_cr3(boot::kernel_pml4()) };
    true
}
