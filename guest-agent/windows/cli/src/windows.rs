//! The Windows side: `\\.\HvProf`, the module lists, the command. `cfg(windows)` only.

use std::ffi::c_void;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::windows::ffi::OsStrExt;
use std::ptr;

use crate::args::{Action, ProfileArgs, Run, Target};
use crate::modules::{self, SYSTEM_MODULE_INFORMATION};
use crate::ntstatus;
use crate::plan::{self, Region};
use crate::result_file::{self, Header};
use crate::session::{self, Device};
use crate::{codes, report, NtStatus};

mod host;

type Handle = *mut c_void;

const INVALID_HANDLE_VALUE: Handle = usize::MAX as Handle;
const GENERIC_READ: u32 = 0x8000_0000;
const GENERIC_WRITE: u32 = 0x4000_0000;
const OPEN_EXISTING: u32 = 3;
const PROCESS_QUERY_INFORMATION: u32 = 0x0400;
const PROCESS_VM_READ: u32 = 0x0010;
const LIST_MODULES_ALL: u32 = 3;
const STATUS_INFO_LENGTH_MISMATCH: i32 = 0xC000_0004_u32 as i32;

#[repr(C)]
struct IoStatusBlock {
    status: usize,
    information: usize,
}

#[repr(C)]
struct ModuleInfo {
    base: *mut c_void,
    size: u32,
    entry: *mut c_void,
}

#[link(name = "kernel32")]
extern "system" {
    fn CreateFileW(
        name: *const u16,
        access: u32,
        share: u32,
        security: *mut c_void,
        disposition: u32,
        flags: u32,
        template: Handle,
    ) -> Handle;
    fn CloseHandle(handle: Handle) -> i32;
    fn OpenProcess(access: u32, inherit: i32, pid: u32) -> Handle;
    fn K32EnumProcessModulesEx(
        process: Handle,
        modules: *mut Handle,
        bytes: u32,
        needed: *mut u32,
        filter: u32,
    ) -> i32;
    fn K32GetModuleBaseNameW(process: Handle, module: Handle, name: *mut u16, size: u32) -> u32;
    fn K32GetModuleInformation(
        process: Handle,
        module: Handle,
        info: *mut ModuleInfo,
        bytes: u32,
    ) -> i32;
}

#[link(name = "ntdll")]
extern "system" {
    fn NtDeviceIoControlFile(
        file: Handle,
        event: Handle,
        apc: *mut c_void,
        apc_context: *mut c_void,
        iosb: *mut IoStatusBlock,
        code: u32,
        input: *const c_void,
        input_len: u32,
        output: *mut c_void,
        output_len: u32,
    ) -> i32;
    fn NtQuerySystemInformation(class: u32, info: *mut c_void, len: u32, ret: *mut u32) -> i32;
}

fn wide(s: &str) -> Vec<u16> {
    std::ffi::OsStr::new(s)
        .encode_wide()
        .chain(Some(0))
        .collect()
}

/// An open `\\.\HvProf`.
pub struct Driver(Handle);

impl Driver {
    /// Opens the driver's device, or says clearly why not.
    pub fn open() -> Result<Driver, String> {
        let name = wide(codes::USER_PATH);
        // SAFETY: `name` is NUL-terminated and outlives the call; the other pointers are null.
        let h = unsafe {
            CreateFileW(
                name.as_ptr(),
                GENERIC_READ | GENERIC_WRITE,
                0,
                ptr::null_mut(),
                OPEN_EXISTING,
                0,
                ptr::null_mut(),
            )
        };
        if h == INVALID_HANDLE_VALUE || h.is_null() {
            let e = std::io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(2) | Some(3) => {
                    "the hvprof driver (hvprof.sys) is not installed or not running"
                }
                Some(5) => "access denied: run as Administrator",
                _ => "the hvprof driver did not accept the open",
            };
            return Err(format!(
                "cannot open {}: {} ({}). See docs/windows.md to install the driver.",
                codes::USER_PATH,
                why,
                e
            ));
        }
        Ok(Driver(h))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the handle `open` returned, closed only here.
        unsafe { CloseHandle(self.0) };
    }
}

impl Device for Driver {
    fn ioctl(&mut self, code: u32, input: &[u8], output: &mut [u8]) -> Result<usize, NtStatus> {
        let mut iosb = IoStatusBlock {
            status: 0,
            information: 0,
        };
        let in_len = u32::try_from(input.len()).map_err(|_| NtStatus::INVALID_PARAMETER)?;
        let out_len = u32::try_from(output.len()).map_err(|_| NtStatus::INVALID_PARAMETER)?;
        let in_ptr = if input.is_empty() {
            ptr::null()
        } else {
            input.as_ptr().cast()
        };
        let out_ptr = if output.is_empty() {
            ptr::null_mut()
        } else {
            output.as_mut_ptr().cast()
        };
        // SAFETY: the buffers are valid for their lengths for the (synchronous) call; the
        // handle is open for synchronous I/O, so the call completes before it returns.
        let status = unsafe {
            NtDeviceIoControlFile(
                self.0,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                &mut iosb,
                code,
                in_ptr,
                in_len,
                out_ptr,
                out_len,
            )
        };
        let status = NtStatus(status as u32);
        if status.is_success() {
            Ok(iosb.information.min(output.len()))
        } else {
            Err(status)
        }
    }
}

/// The kernel's loaded modules.
pub fn kernel_modules() -> Result<Vec<modules::Module>, String> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut needed = 0u32;
        let len = u32::try_from(buf.len()).map_err(|_| "module list too large".to_string())?;
        // SAFETY: `buf` is writable for `len` bytes; `needed` is a valid out pointer.
        let status = unsafe {
            NtQuerySystemInformation(
                SYSTEM_MODULE_INFORMATION,
                buf.as_mut_ptr().cast(),
                len,
                &mut needed,
            )
        };
        if status == STATUS_INFO_LENGTH_MISMATCH && buf.len() < (64 << 20) {
            buf.resize((needed as usize).max(buf.len() * 2), 0);
            continue;
        }
        if status < 0 {
            return Err(format!(
                "NtQuerySystemInformation(SystemModuleInformation) failed: {}",
                ntstatus::text(NtStatus(status as u32))
            ));
        }
        return modules::parse(&buf)
            .map_err(|_| "the kernel's module list is malformed".to_string());
    }
}

/// Base and size of module `name` in process `pid`.
pub fn process_module(pid: u32, name: &str) -> Result<(u64, u64), String> {
    // SAFETY: plain call; the handle is checked and closed below.
    let process = unsafe { OpenProcess(PROCESS_QUERY_INFORMATION | PROCESS_VM_READ, 0, pid) };
    if process.is_null() {
        return Err(format!(
            "cannot open process {}: {}",
            pid,
            std::io::Error::last_os_error()
        ));
    }
    let result = find_in_process(process, name);
    // SAFETY: `process` was opened above and is closed once.
    unsafe { CloseHandle(process) };
    result.ok_or_else(|| format!("process {} has no module named {}", pid, name))
}

fn find_in_process(process: Handle, name: &str) -> Option<(u64, u64)> {
    let mut mods: Vec<Handle> = vec![ptr::null_mut(); 1024];
    let mut needed = 0u32;
    let bytes = u32::try_from(mods.len() * std::mem::size_of::<Handle>()).ok()?;
    // SAFETY: `mods` is writable for `bytes` bytes.
    let ok = unsafe {
        K32EnumProcessModulesEx(
            process,
            mods.as_mut_ptr(),
            bytes,
            &mut needed,
            LIST_MODULES_ALL,
        )
    };
    if ok == 0 {
        return None;
    }
    let count = (needed as usize / std::mem::size_of::<Handle>()).min(mods.len());
    for &m in &mods[..count] {
        let mut buf = [0u16; 260];
        // SAFETY: `buf` holds 260 UTF-16 units.
        let n = unsafe { K32GetModuleBaseNameW(process, m, buf.as_mut_ptr(), 260) } as usize;
        let base_name = String::from_utf16_lossy(&buf[..n.min(260)]);
        if !base_name.eq_ignore_ascii_case(name) {
            continue;
        }
        let mut info = ModuleInfo {
            base: ptr::null_mut(),
            size: 0,
            entry: ptr::null_mut(),
        };
        // SAFETY: `info` is a valid MODULEINFO of the size passed.
        let ok = unsafe {
            K32GetModuleInformation(
                process,
                m,
                &mut info,
                std::mem::size_of::<ModuleInfo>() as u32,
            )
        };
        if ok != 0 {
            return Some((info.base as u64, u64::from(info.size)));
        }
    }
    None
}

fn region(target: &Target) -> Result<Region, String> {
    Ok(match target {
        Target::KernelModule(name) => {
            let list = kernel_modules()?;
            let m = modules::find(&list, name)
                .ok_or_else(|| format!("no loaded kernel module named {}", name))?;
            if m.base == 0 {
                return Err(format!(
                    "the kernel hid {}'s address (run as Administrator)",
                    m.name
                ));
            }
            Region {
                name: m.name.clone(),
                base: m.base,
                size: m.size,
                process_id: 0,
            }
        }
        Target::ProcessModule { pid, name } => {
            let (base, size) = process_module(*pid, name)?;
            Region {
                name: name.clone(),
                base,
                size,
                process_id: *pid,
            }
        }
        Target::ProcessRange { pid, base, size } => Region {
            name: "range".into(),
            base: *base,
            size: *size,
            process_id: *pid,
        },
        Target::Range { base, size } => Region {
            name: "range".into(),
            base: *base,
            size: *size,
            process_id: 0,
        },
    })
}

fn profile(driver: &mut Driver, a: &ProfileArgs) -> Result<(), String> {
    let region = region(&a.target)?;
    let plan = plan::plan(region, a.bucket_shift, a.source).map_err(|e| e.to_string())?;
    let run = a.run.clone();
    let outcome = session::run(
        driver,
        &mut host::ThisProcess::default(),
        &plan,
        a.interval,
        move || match run {
            Run::Seconds(s) => {
                std::thread::sleep(std::time::Duration::from_secs(u64::from(s)));
                Ok(())
            }
            Run::Command(cmd) => std::process::Command::new(&cmd[0])
                .args(&cmd[1..])
                .status()
                .map(|status| eprintln!("hvprof-agent: {} exited: {}", cmd[0], status))
                .map_err(|e| format!("cannot run {}: {}", cmd[0], e)),
        },
    )
    .map_err(|e| e.to_string())?;
    let header = Header {
        module: plan.region.name.clone(),
        process_id: plan.region.process_id,
        base: plan.region.base,
        size: plan.region.size,
        bucket_shift: plan.bucket_shift,
        source: plan.source,
        interval: outcome.interval,
        duration_ms: outcome.duration_ms,
    };
    let file = File::create(&a.out).map_err(|e| format!("cannot create {}: {}", a.out, e))?;
    let mut w = BufWriter::new(file);
    result_file::write(&mut w, &header, &outcome.counts)
        .and_then(|()| w.flush())
        .map_err(|e| format!("cannot write {}: {}", a.out, e))?;
    print!("{}", report::table(&header, &outcome.counts, a.top));
    println!("result: {}", a.out);
    Ok(())
}

/// Runs an action that needs the driver; returns the process exit code.
pub fn run(action: Action) -> i32 {
    let mut driver = match Driver::open() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("hvprof-agent: {}", e);
            return 3;
        }
    };
    let result = match action {
        Action::Info => session::query_info(&mut driver)
            .map(|(d, v)| {
                println!(
                    "doorbell port {:#x} (found by {})",
                    d.port,
                    match d.port_source {
                        1 => "ACPI HVPR0001",
                        2 => "CPUID",
                        3 => "default port",
                        _ => "?",
                    }
                );
                println!(
                    "ABI version {}, {} processors, features {:#x}",
                    v.abi_version, v.processor_count, v.features
                );
                println!(
                    "supported sources mask {:#x}, started limit {}",
                    v.supported_sources, v.started_limit
                );
            })
            .map_err(|e| e.to_string()),
        Action::Stats => session::read_stats(&mut driver)
            .map(|s| {
                println!(
                    "samples {} counted {} counts {} dropped {} injected {}",
                    s.samples,
                    s.counted_samples,
                    s.counts,
                    s.dropped_samples,
                    s.injected_interrupts
                );
                println!(
                    "objects open {} started {}",
                    s.objects_open, s.objects_started
                );
            })
            .map_err(|e| e.to_string()),
        Action::Profile(a) => profile(&mut driver, &a),
        Action::Help | Action::Version => Ok(()),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hvprof-agent: {}", e);
            1
        }
    }
}
