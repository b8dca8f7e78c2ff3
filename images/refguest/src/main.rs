//! hvprof reference guest: a small PVH kernel that boots every vCPU and runs
//! CPL3 workloads in separate address spaces. See README.md.

#![no_std]
#![no_main]

mod boot;
mod cpu;
mod exit;
mod mem;
mod serial;
mod sync;

#[no_mangle]
extern "C" fn kmain_bsp(start_info: u64) -> ! {
    serial::init();
    println!("boot start_info={:#x}", start_info);
    let t0 = cpu::rdtsc();
    #[repr(C, align(16))] struct Fx([u8; 512]);
    let mut fx = Fx([0; 512]);
    // SAFETY: test
    unsafe { core::arch::asm!("fxsave64 [{0}]", "fxrstor64 [{0}]", in(reg) fx.0.as_mut_ptr()) };
    println!("fxsave ok mxcsr={:#x} tsc delta={}", u32::from_le_bytes([fx.0[24], fx.0[25], fx.0[26], fx.0[27]]), cpu::rdtsc() - t0);
    exit::pass()
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    exit::fail(format_args!("panic: {}", info))
}
