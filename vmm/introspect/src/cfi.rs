//! The user-mode unwinder of ELF programs and libraries: DWARF call-frame information
//! (`.eh_frame`, its functions found through `.eh_frame_hdr`'s sorted table), as perf's and
//! samply's unwinders read it, for code built without frame pointers (most Linux user space).
//!
//! The rules come from the ELF files on the host (the booted initramfs, an `--initramfs`
//! archive), never from guest memory; only the stack is the guest's, read through [`Memory`]
//! like every other walk's. Evaluation is framehop's (gimli's CFI parser; rules cached per
//! address, with no allocation during a walk): a rule the file does not give, or gives in a form
//! framehop does not evaluate, falls back to the frame-pointer chain, as in framehop.
//!
//! One [`SpaceUnwinder`] serves one address space (a process's mapped files, each at its own
//! load bias); one [`CfiCache`] per walker keeps decoded rules for the last address space it
//! walked and starts empty when the walker moves to another.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{
    Error, ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind, Unwinder,
};

use crate::mem::Memory;
use crate::Regs;

/// Why a frame could not be unwound (the walk ends there for that reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepError {
    /// A stack slot at this address was not readable.
    Unreadable(u64),
    /// The caller's frame was not above the callee's.
    NotGrowing,
    /// The rules gave an address past the end of the address space, at this PC.
    Malformed(u64),
}

/// Section bytes, shared by every address space that maps the file.
pub type Bytes = Arc<[u8]>;

/// A section's linked addresses and its bytes.
#[derive(Clone, Debug)]
pub struct Section {
    /// Its addresses as linked (SVMAs).
    pub addresses: Range<u64>,
    /// Its contents.
    pub bytes: Bytes,
}

/// What an ELF file gives its unwinder, read by the report crate's ELF reader.
#[derive(Clone, Debug, Default)]
pub struct ElfUnwindInfo {
    /// `.text`: for a first frame in a prologue or epilogue, which framehop recognizes.
    pub text: Option<Section>,
    /// `.eh_frame`: the CIEs and FDEs.
    pub eh_frame: Option<Section>,
    /// `.eh_frame_hdr`: the FDEs' table, sorted by address.
    pub eh_frame_hdr: Option<Section>,
    /// `.got`'s addresses, for pointers encoded relative to it.
    pub got: Option<Range<u64>>,
}

impl ElfUnwindInfo {
    /// True if the file has call-frame information to unwind with.
    pub fn has_cfi(&self) -> bool {
        self.eh_frame.is_some()
    }
}

/// True for an `.eh_frame_hdr` in the form every ELF linker writes (version 1, a 4-byte
/// `.eh_frame` pointer, a 4-byte FDE count, a table of 4-byte data-relative pairs) whose table
/// fits the section. Anything else is not handed to the unwinder, which then indexes
/// `.eh_frame` itself: gimli's binary search trusts the count (it multiplies it unchecked).
fn hdr_table_fits(hdr: &[u8]) -> bool {
    const UDATA4: u8 = 0x03;
    const TABLE: u8 = 0x3b; // datarel | sdata4
    let [1, ptr_enc, UDATA4, TABLE, rest @ ..] = hdr else {
        return false;
    };
    if ptr_enc & 0x0f != 0x0b && ptr_enc & 0x0f != 0x03 {
        return false; // a 4-byte pointer: sdata4 or udata4
    }
    let Some(count) = rest
        .get(4..8)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    else {
        return false;
    };
    u64::from(count) * 8 <= (rest.len() as u64).saturating_sub(8)
}

/// Ids that tell address spaces apart in a [`CfiCache`].
static NEXT_SPACE: AtomicU64 = AtomicU64::new(1);

/// The unwinder of one address space: the files it maps, each at its addresses there.
pub struct SpaceUnwinder {
    id: u64,
    inner: UnwinderX86_64<Bytes, MustNotAllocateDuringUnwind>,
    /// The mapped ranges, sorted and disjoint.
    ranges: Vec<Range<u64>>,
}

impl Default for SpaceUnwinder {
    fn default() -> Self {
        SpaceUnwinder {
            id: NEXT_SPACE.fetch_add(1, Ordering::Relaxed),
            inner: UnwinderX86_64::new(),
            ranges: Vec::new(),
        }
    }
}

impl fmt::Debug for SpaceUnwinder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpaceUnwinder")
            .field("ranges", &self.ranges)
            .finish_non_exhaustive()
    }
}

impl SpaceUnwinder {
    /// An address space with no files yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the file `name`, whose code is mapped at `code` and whose linked address 0 lies at
    /// `bias` in this address space. A file without CFI, an empty range or one overlapping a
    /// file already added is left out (returns false): its frames are unwound as before.
    pub fn add(&mut self, name: &str, code: Range<u64>, bias: u64, info: &ElfUnwindInfo) -> bool {
        if !info.has_cfi() || code.start >= code.end {
            return false;
        }
        let i = self.ranges.partition_point(|r| r.end <= code.start);
        if self.ranges.get(i).is_some_and(|r| r.start < code.end) {
            return false;
        }
        let part = |s: &Option<Section>| s.as_ref().map(|s| (s.addresses.clone(), s.bytes.clone()));
        let (text_svma, text) = part(&info.text).unzip();
        let (eh_frame_svma, eh_frame) = part(&info.eh_frame).unzip();
        let hdr = info
            .eh_frame_hdr
            .as_ref()
            .filter(|h| hdr_table_fits(&h.bytes));
        let (eh_frame_hdr_svma, eh_frame_hdr) = part(&hdr.cloned()).unzip();
        let sections = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma,
            text,
            got_svma: info.got.clone(),
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            ..Default::default()
        };
        self.inner
            .add_module(Module::new(name.to_string(), code.clone(), bias, sections));
        self.ranges.insert(i, code);
        true
    }

    /// True if `addr` lies in a file added.
    pub fn covers(&self, addr: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= addr);
        self.ranges.get(i).is_some_and(|r| r.start <= addr)
    }

    /// The files' ranges, in address order.
    pub fn ranges(&self) -> &[Range<u64>] {
        &self.ranges
    }

    /// Unwinds one frame: `regs` at a PC in a file added (`first`: the sampled PC, else a
    /// return address) become the caller's (RIP, RSP, RBP; the other registers are left as
    /// they were). `Ok(false)`: the outermost frame (the rules leave no return address).
    pub fn step<M: Memory + ?Sized>(
        &self,
        mem: &mut M,
        cache: &mut CfiCache,
        regs: &mut Regs,
        first: bool,
    ) -> Result<bool, StepError> {
        if cache.space != self.id {
            cache.space = self.id;
            cache.rules = CacheX86_64::new_in();
        }
        let address = if first {
            FrameAddress::from_instruction_pointer(regs.rip)
        } else {
            match FrameAddress::from_return_address(regs.rip) {
                Some(a) => a,
                None => return Ok(false),
            }
        };
        let mut unwound = UnwindRegsX86_64::new(regs.rip, regs.rsp(), regs.rbp());
        let mut read = |addr: u64| mem.read_u64(addr).map_err(|_| ());
        match self
            .inner
            .unwind_frame(address, &mut unwound, &mut cache.rules, &mut read)
        {
            Ok(Some(ret)) => {
                regs.rip = ret;
                regs.gpr[Regs::RSP] = unwound.sp();
                regs.gpr[Regs::RBP] = unwound.bp();
                Ok(true)
            }
            Ok(None) | Err(Error::ReturnAddressIsNull) => Ok(false),
            Err(Error::CouldNotReadStack(addr)) => Err(StepError::Unreadable(addr)),
            Err(Error::FramepointerUnwindingMovedBackwards | Error::DidNotAdvance) => {
                Err(StepError::NotGrowing)
            }
            Err(Error::IntegerOverflow) => Err(StepError::Malformed(regs.rip)),
        }
    }
}

/// One walker's decoded rules, for the address space it walked last.
pub struct CfiCache {
    space: u64,
    rules: CacheX86_64<MustNotAllocateDuringUnwind>,
}

impl Default for CfiCache {
    fn default() -> Self {
        CfiCache {
            space: 0,
            rules: CacheX86_64::new_in(),
        }
    }
}

impl fmt::Debug for CfiCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CfiCache")
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

/// `.eh_frame` sections as a linker writes them, for tests, fuzz seeds and benchmarks.
#[cfg(any(test, feature = "test-support"))]
pub mod build {
    /// A function of a synthetic file: where it is linked, how long it is, and whether its
    /// first byte is a `push` (its CFA RSP + 16 after it) or it pushes nothing (RSP + 8
    /// throughout).
    pub struct Function {
        /// Its first byte's linked address.
        pub start: u64,
        /// Its length in bytes.
        pub len: u64,
        /// Its first instruction is a one-byte push.
        pub pushes: bool,
    }

    /// `.eh_frame` for `functions`, the section itself linked at `at`: one CIE ("zR", code
    /// alignment 1, data alignment -8, the return address in DWARF register 16, FDE addresses
    /// PC-relative and 4-byte signed; CFA = RSP + 8, the return address at CFA - 8), an FDE
    /// per function, and a zero terminator.
    ///
    /// # Panics
    /// If a function lies more than 2 GiB from the section.
    pub fn eh_frame(at: u64, functions: &[Function]) -> Vec<u8> {
        eh_frame_and_fdes(at, functions).0
    }

    /// [`eh_frame`] and, linked at `hdr_at`, the `.eh_frame_hdr` that indexes it (version 1,
    /// its table of initial locations and FDE addresses relative to the header, sorted).
    ///
    /// # Panics
    /// If a function or the `.eh_frame` lies more than 2 GiB from the header.
    pub fn eh_frame_with_hdr(at: u64, hdr_at: u64, functions: &[Function]) -> (Vec<u8>, Vec<u8>) {
        let (eh, fdes) = eh_frame_and_fdes(at, functions);
        let rel = |to: u64, from: u64| {
            i32::try_from(i128::from(to) - i128::from(from))
                .unwrap()
                .to_le_bytes()
        };
        // eh_frame_ptr: PC-relative sdata4; count: udata4; table: data-relative sdata4.
        let mut hdr = vec![1, 0x1b, 0x03, 0x3b];
        hdr.extend_from_slice(&rel(at, hdr_at + 4));
        hdr.extend_from_slice(&u32::try_from(fdes.len()).unwrap().to_le_bytes());
        let mut table: Vec<(u64, u64)> = functions
            .iter()
            .zip(&fdes)
            .map(|(f, &off)| (f.start, at + off as u64))
            .collect();
        table.sort_unstable();
        for (start, fde) in table {
            hdr.extend_from_slice(&rel(start, hdr_at));
            hdr.extend_from_slice(&rel(fde, hdr_at));
        }
        (eh, hdr)
    }

    /// The section and each function's FDE offset in it.
    fn eh_frame_and_fdes(at: u64, functions: &[Function]) -> (Vec<u8>, Vec<usize>) {
        fn record(out: &mut Vec<u8>, body: &[u8]) {
            let mut body = body.to_vec();
            while !(body.len() + 4).is_multiple_of(8) {
                body.push(0); // DW_CFA_nop
            }
            out.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
            out.extend_from_slice(&body);
        }
        let mut out = Vec::new();
        let mut cie = vec![0, 0, 0, 0, 1];
        cie.extend_from_slice(b"zR\0");
        cie.extend_from_slice(&[1, 0x78, 16, 1, 0x1b]);
        cie.extend_from_slice(&[0x0c, 7, 8, 0x90, 1]); // def_cfa rsp+8; r16 at cfa-8
        record(&mut out, &cie);
        let mut fdes = Vec::with_capacity(functions.len());
        for f in functions {
            let here = out.len();
            fdes.push(here);
            let mut fde = Vec::new();
            fde.extend_from_slice(&u32::try_from(here + 4).unwrap().to_le_bytes());
            let field = i128::from(at) + i128::try_from(here).unwrap() + 8;
            let pc_begin = i32::try_from(i128::from(f.start) - field).unwrap();
            fde.extend_from_slice(&pc_begin.to_le_bytes());
            fde.extend_from_slice(&u32::try_from(f.len).unwrap().to_le_bytes());
            fde.push(0); // no augmentation data
            if f.pushes {
                fde.extend_from_slice(&[0x41, 0x0e, 16]); // advance 1; def_cfa_offset 16
            }
            record(&mut out, &fde);
        }
        out.extend_from_slice(&[0, 0, 0, 0]);
        (out, fdes)
    }
}

#[cfg(test)]
mod tests;
