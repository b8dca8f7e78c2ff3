//! The CPL3 workload of `scenario=bench`: a register loop that never returns, so the host's
//! sample-path benchmark always finds the vCPU at CPL3 in known code.

core::arch::global_asm!(
    r#"
    .section .user.text.bench, "ax"
    .p2align 6
    .global bench_spin
    .type bench_spin, @function
bench_spin:
    xor %eax, %eax
    xor %ecx, %ecx
1:  add %rcx, %rax
    xor $0x5a, %rax
    dec %rcx
    jmp 1b
    .global bench_spin_end
bench_spin_end:
    .size bench_spin, bench_spin_end - bench_spin
    .text
    "#,
    options(att_syntax)
);

extern "C" {
    /// Never returns; needs no stack. A process entry point.
    pub fn bench_spin() -> !;
    static bench_spin_end: u8;
}

/// The spin loop's user address range `[start, end)`.
pub fn spin() -> super::prof::Range {
    super::prof::Range {
        name: "bench_spin",
        start: bench_spin as *const () as u64,
        end: (&raw const bench_spin_end) as u64,
    }
}
