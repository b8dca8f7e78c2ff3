//! The CPL3 workload of `scenario=bench`: a register loop that never returns, so the host's
//! sample-path benchmark always finds the vCPU at CPL3 in known code. It is entered through
//! `bench_deep`, which first builds a chain of frame-pointer frames, so that the stack walk
//! the benchmark times has a known depth.

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

    /* Process entry, RDI = frames: calls itself until RDI frames are on the stack, each with
       its saved RBP, then the innermost jumps into the spin loop. */
    .p2align 6
    .global bench_deep
    .type bench_deep, @function
bench_deep:
    push %rbp
    mov %rsp, %rbp
    dec %rdi
    jle 1f
    call bench_deep
1:  jmp bench_spin
    .global bench_deep_end
bench_deep_end:
    .size bench_deep, bench_deep_end - bench_deep
    .text
    "#,
    options(att_syntax)
);

extern "C" {
    /// Never returns; needs no stack.
    pub fn bench_spin() -> !;
    /// Never returns: `frames` frames deep, spins. A process entry point.
    pub fn bench_deep(frames: u64) -> !;
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

/// The process entry that spins `frames` frames deep.
pub fn deep_entry() -> u64 {
    bench_deep as *const () as u64
}
