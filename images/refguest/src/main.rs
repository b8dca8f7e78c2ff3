//! hvprof reference guest: a small PVH kernel that boots every vCPU and runs
//! CPL3 workloads in separate address spaces. See README.md.

#![no_std]
#![no_main]

mod acpi;
mod apic;
mod boot;
mod cpu;
mod exit;
mod gdt;
mod gs;
mod idt;
mod mem;
mod paging;
mod pe;
mod percpu;
mod prof;
mod scenario;
mod sched;
mod serial;
mod smp;
mod start_info;
mod sync;
mod syscall;
mod time;
mod trap;
mod user;

const DEFAULT_TIMER_HZ: u64 = 100;

#[no_mangle]
extern "C" fn kmain_bsp(start_info_paddr: u64) -> ! {
    time::mark_boot();
    serial::init();
    let info = match start_info::parse(start_info_paddr, smp::TRAMPOLINE) {
        Ok(info) => info,
        Err(magic) => exit::fail(format_args!("bad start_info magic {:#x}", magic)),
    };
    println!(
        "boot start_info version={} memmap={} cmdline=\"{}\"",
        info.version,
        info.memmap_entries,
        start_info::cmdline()
    );
    let name = start_info::param("scenario").unwrap_or("smoke");
    let Some(scenario) = scenario::select(name) else {
        for known in scenario::names() {
            println!("known scenario: {}", known);
        }
        exit::fail(format_args!("unknown scenario \"{}\"", name))
    };
    // The kernel below calls up into the scenario through these two hooks only.
    sched::on_all_ended(scenario::finish);
    syscall::on_control(scenario::control);

    let cpus = acpi::cpus(info.rsdp_paddr).unwrap_or_else(|e| exit::fail(format_args!("acpi: {}", e)));
    if cpus.dropped > 0 {
        println!("warning: {} CPUs beyond {} ignored", cpus.dropped, percpu::MAX_CPUS);
    }
    percpu::set_cpus(&cpus.ids[..cpus.count]);
    let bsp_apic = apic::id();
    let Some(bsp) = cpus.ids[..cpus.count].iter().position(|&id| id == bsp_apic) else {
        exit::fail(format_args!("boot CPU apic={} is not in the MADT", bsp_apic))
    };
    percpu::set_boot_cpu(bsp);

    gdt::init();
    idt::init();
    apic::disable_pic();
    apic::enable(idt::SPURIOUS_VECTOR);
    time::calibrate();
    let hz = start_info::param_u64("hz", DEFAULT_TIMER_HZ);
    smp::cpu_init(bsp, hz);
    println!("timer hz={} tsc_khz={} apic_khz={}", hz, time::tsc_hz() / 1000, time::apic_hz() / 1000);
    smp::bsp_online(bsp);

    if cpus.count > 1 && !info.trampoline_is_ram {
        exit::fail(format_args!("trampoline page {:#x} is not RAM in the memmap", smp::TRAMPOLINE));
    }
    if let Err(cpu) = smp::start_aps(bsp) {
        exit::fail(format_args!("cpu {} apic={} did not start", cpu, percpu::apic_id(cpu)));
    }
    println!("smp {}/{} cpus online", smp::online_count(), percpu::cpu_count());

    let env = scenario::Env { cpus: percpu::cpu_count(), bsp, tsc_hz: time::tsc_hz() };
    if let Err(e) = (scenario.setup)(&env) {
        exit::fail(format_args!("{}: setup: {}", scenario.name, e));
    }
    println!("scenario {} start", scenario.name);
    apic::send_ipi(0, apic::ICR_FIXED | apic::ICR_ALL_INCLUDING_SELF | u32::from(idt::WAKE_VECTOR));
    sched::idle(bsp)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    exit::fail(format_args!("panic: {}", info))
}
