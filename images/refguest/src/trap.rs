//! Trap dispatch: exceptions, timer, IPIs and system calls.

use crate::idt::{self, TrapFrame};
use crate::sched::{self, Fault, State};
use crate::{apic, exit, gs, prof, syscall};

fn read_cr2() -> u64 {
    let value: u64;
    // SAFETY: reading CR2 has no side effects.
    unsafe { core::arch::asm!("mov {}, cr2", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// Called by `trap_common` with the frame on this CPU's IST stack.
#[no_mangle]
extern "C" fn trap_dispatch(frame: &mut TrapFrame) {
    // SAFETY: every gate uses an IST stack whose top word (just above the
    // hardware frame) holds the CPU index; see `percpu::ist_top`.
    let cpu = unsafe { *((frame as *const TrapFrame).add(1) as *const u64) } as usize;
    if frame.is_user() {
        gs::enter(cpu);
    }
    match frame.vector as u8 {
        idt::TIMER_VECTOR => {
            apic::eoi();
            sched::reschedule(cpu, frame, true);
        }
        idt::WAKE_VECTOR => {
            apic::eoi();
            sched::reschedule(cpu, frame, false);
        }
        idt::SYSCALL_VECTOR if frame.is_user() => syscall::dispatch(cpu, frame),
        prof::PROFILE_VECTOR => {
            apic::eoi();
            prof::count_delivery(cpu);
        }
        idt::SPURIOUS_VECTOR => {}
        0x20..=0x2F => {} // spurious IRQ 7/15 from the masked PIC
        0..=31 => exception(cpu, frame),
        _ => exit::fail(format_args!("cpu {} unexpected vector {:#x} rip={:#x}", cpu, frame.vector, frame.rip)),
    }
    // The frame may now be another process's (a context switch) or the idle loop's.
    if frame.is_user() {
        gs::leave(cpu);
    }
}

fn exception(cpu: usize, frame: &mut TrapFrame) {
    let cr2 = read_cr2();
    if frame.vector == 14 && syscall::complete_from_fault(cpu, frame, cr2) {
        return;
    }
    if frame.is_user() {
        crate::println!(
            "cpu {} user fault vector={} error={:#x} rip={:#x} cr2={:#x} cs={:#x} ss={:#x} rsp={:#x} rfl={:#x}",
            cpu,
            frame.vector,
            frame.error,
            frame.rip,
            cr2,
            frame.cs, frame.ss, frame.rsp, frame.rflags
        );
        let fault = Fault { vector: frame.vector, error: frame.error, rip: frame.rip, cr2 };
        sched::end_current(cpu, frame, State::Faulted, u64::MAX, Some(fault));
        return;
    }
    exit::fail(format_args!(
        "cpu {} kernel exception vector={} error={:#x} rip={:#x} cr2={:#x}",
        cpu, frame.vector, frame.error, frame.rip, cr2
    ))
}
