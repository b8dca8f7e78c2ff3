//! The frame-pointer unwinder: code built with frame pointers keeps the caller's RBP at
//! `[rbp]` and the return address at `[rbp + 8]`.

use crate::mem::{Memory, Unreadable};
use crate::Regs;

/// One frame up the RBP chain: the caller's RIP, RSP (just above the return address) and
/// RBP. The caller checks that the chain moves up the stack.
pub fn step<M: Memory + ?Sized>(mem: &mut M, regs: &mut Regs) -> Result<(), Unreadable> {
    let rbp = regs.rbp();
    let caller_rbp = mem.read_u64(rbp)?;
    let ret = mem.read_u64(rbp.wrapping_add(8))?;
    regs.rip = ret;
    regs.gpr[Regs::RSP] = rbp.wrapping_add(16);
    regs.gpr[Regs::RBP] = caller_rbp;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Regions;

    #[test]
    fn one_step_reads_the_saved_pair() {
        let stack: Vec<u8> = [0x2000u64, 0x4000_1234]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut mem = Regions::new().with(0x1ff0, stack);
        let mut r = Regs::new(0x4000_0000, 0x1fe0, 0x1ff0);
        step(&mut mem, &mut r).unwrap();
        assert_eq!((r.rip, r.rsp(), r.rbp()), (0x4000_1234, 0x2000, 0x2000));
        assert_eq!(step(&mut mem, &mut r), Err(Unreadable(0x2000)));
    }
}
