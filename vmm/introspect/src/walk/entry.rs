//! Linux's kernel entry frames, where an x86-64 Linux frame-pointer chain leaves the code it
//! was walking for the context an interrupt, exception or system call saved: a `struct
//! pt_regs` on the kernel stack. Two marks lead to one:
//!
//! - an odd RBP: interrupt and exception entries built with frame pointers store the address
//!   of their `pt_regs` plus one in RBP (`ENCODE_FRAME_POINTER`), so the first C handler's
//!   saved RBP says where the interrupted context is;
//! - RBP 0 in kernel code: the system-call entry clears RBP before it calls
//!   `do_syscall_64`, whose frame sits right below the `pt_regs`; one step up the chain leaves
//!   RSP at them.
//!
//! What such a place holds is checked before it is believed: a user context (CS 0x33, SS 0x2b,
//! a lower-half RIP and RSP) or a kernel one (CS 0x10, an upper-half RIP and RSP). Anything
//! else ends the walk as before.

use crate::bytes::u64_at;
use crate::mem::Memory;
use crate::Regs;

/// `sizeof(struct pt_regs)` on x86-64: 21 quadwords.
pub const PT_REGS_SIZE: usize = 21 * 8;
/// The saved RBP, RIP, CS, RSP and SS in `struct pt_regs` (r15, r14, r13, r12, bp, bx, r11,
/// r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss).
const BP: usize = 4 * 8;
const IP: usize = 16 * 8;
const CS: usize = 17 * 8;
const SP: usize = 19 * 8;
const SS: usize = 20 * 8;
/// `__USER_CS`, `__USER_DS` and `__KERNEL_CS`.
const USER_CS: u64 = 0x33;
const USER_SS: u64 = 0x2b;
const KERNEL_CS: u64 = 0x10;
/// The first upper-half (kernel) address.
const UPPER: u64 = 0xffff_8000_0000_0000;
/// The end of the lower half.
const LOWER_END: u64 = 0x0000_8000_0000_0000;

/// Where the walk's frame pointer and stack pointer say an entry's `pt_regs` are, if they
/// say so: an odd `rbp`, or `rbp` 0 with `rsp` at them.
pub fn pt_regs_at(regs: &Regs) -> Option<u64> {
    match regs.rbp() {
        0 => Some(regs.rsp()),
        rbp if rbp & 1 == 1 => Some(rbp & !1),
        _ => None,
    }
}

/// The context the `pt_regs` at `at` saved, if it reads as an entry's.
pub fn saved_regs<M: Memory + ?Sized>(mem: &mut M, at: u64) -> Option<Regs> {
    if at < UPPER || at.checked_add(PT_REGS_SIZE as u64).is_none() {
        return None;
    }
    let mut raw = [0u8; PT_REGS_SIZE];
    mem.read(at, &mut raw).ok()?;
    let q = |off: usize| u64_at(&raw, off).unwrap_or_default();
    let (ip, sp, cs, ss) = (q(IP), q(SP), q(CS), q(SS));
    let user = cs == USER_CS && ss == USER_SS && ip < LOWER_END && sp < LOWER_END;
    let kernel = cs == KERNEL_CS && ip >= UPPER && sp >= UPPER;
    if !(user || kernel) || ip == 0 {
        return None;
    }
    Some(Regs::new(ip, sp, q(BP)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Regions;

    const AT: u64 = 0xffff_c900_0001_3f58;

    fn pt_regs(ip: u64, cs: u64, sp: u64, ss: u64, bp: u64) -> Vec<u8> {
        let mut q = [0u64; 21];
        q[BP / 8] = bp;
        q[IP / 8] = ip;
        q[CS / 8] = cs;
        q[SP / 8] = sp;
        q[SS / 8] = ss;
        q.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn a_user_or_kernel_context_is_taken_anything_else_is_not() {
        let user = pt_regs(
            0x40_1a2b,
            USER_CS,
            0x7ffe_0000_1000,
            USER_SS,
            0x7ffe_0000_1040,
        );
        let mut mem = Regions::new().with(AT, user);
        let r = saved_regs(&mut mem, AT).unwrap();
        assert_eq!(
            (r.rip, r.rsp(), r.rbp()),
            (0x40_1a2b, 0x7ffe_0000_1000, 0x7ffe_0000_1040)
        );

        let kernel = pt_regs(
            0xffff_ffff_8100_1234,
            KERNEL_CS,
            AT + 0x200,
            0x18,
            AT + 0x220,
        );
        let mut mem = Regions::new().with(AT, kernel);
        assert_eq!(saved_regs(&mut mem, AT).unwrap().rip, 0xffff_ffff_8100_1234);

        for bad in [
            pt_regs(0xffff_ffff_8100_1234, USER_CS, 0x7ffe_0000_1000, USER_SS, 0),
            pt_regs(0x40_1a2b, USER_CS, 0x7ffe_0000_1000, 0x18, 0),
            pt_regs(0x40_1a2b, 0x23, 0x7ffe_0000_1000, USER_SS, 0),
            pt_regs(0x40_1a2b, KERNEL_CS, AT, 0x18, 0),
            pt_regs(0, USER_CS, 0x7ffe_0000_1000, USER_SS, 0),
        ] {
            let mut mem = Regions::new().with(AT, bad);
            assert!(saved_regs(&mut mem, AT).is_none());
        }
        let mut mem = Regions::new().with(AT, vec![0; 64]);
        assert!(saved_regs(&mut mem, AT).is_none(), "unreadable");
        assert!(saved_regs(&mut mem, 0x1000).is_none(), "a user address");
    }

    #[test]
    fn an_odd_rbp_or_rbp_zero_points_at_them() {
        assert_eq!(pt_regs_at(&Regs::new(1, 0x2000, AT + 1)), Some(AT));
        assert_eq!(pt_regs_at(&Regs::new(1, AT, 0)), Some(AT));
        assert_eq!(pt_regs_at(&Regs::new(1, AT, AT + 0x40)), None);
    }
}
