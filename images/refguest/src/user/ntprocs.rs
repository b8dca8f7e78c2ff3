//! The CPL3 work of `scenario=ntprocs`: one register loop per thread of the stand-in Windows
//! processes (the same loop as `prof`'s, in assembly so each has an exact range and a FUNC
//! symbol), run by `prof::main` until each thread's deadline. A sample's function names its
//! thread, whatever the host makes of the guest's kernel structures.

core::arch::global_asm!(
    r#"
    .section .user.text.ntprocs, "ax"
    .macro NT_SPIN name
    .p2align 6
    .global \name
    .type \name, @function
\name:"#,
    spin_loop_asm!(),
    r#"
    ret
    .global \name\()_end
\name\()_end:
    .size \name, \name\()_end - \name
    .endm

    NT_SPIN ntprocs_alpha_main
    NT_SPIN ntprocs_alpha_worker
    NT_SPIN ntprocs_bravo_main
    NT_SPIN ntprocs_charlie_main
    NT_SPIN ntprocs_delta_main
    .text
    "#,
    options(att_syntax)
);

extern "C" {
    fn ntprocs_alpha_main(n: u64);
    fn ntprocs_alpha_worker(n: u64);
    fn ntprocs_bravo_main(n: u64);
    fn ntprocs_charlie_main(n: u64);
    fn ntprocs_delta_main(n: u64);
}

/// The work function of each thread, in the scenario's thread order (alpha-main,
/// alpha-worker, bravo-main, charlie-main, delta-main).
pub fn work() -> [u64; 5] {
    [
        ntprocs_alpha_main as *const () as u64,
        ntprocs_alpha_worker as *const () as u64,
        ntprocs_bravo_main as *const () as u64,
        ntprocs_charlie_main as *const () as u64,
        ntprocs_delta_main as *const () as u64,
    ]
}
