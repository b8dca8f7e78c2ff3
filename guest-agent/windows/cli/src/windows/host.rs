//! This process as the session's [`Host`]: its token's SeSystemProfilePrivilege and counters
//! in its own heap.

use std::ffi::c_void;
use std::ptr;

use crate::session::{Host, LocalCounters};

type Handle = *mut c_void;

const TOKEN_ADJUST_PRIVILEGES: u32 = 0x0020;
const TOKEN_QUERY: u32 = 0x0008;
const SE_PRIVILEGE_ENABLED: u32 = 0x2;
const ERROR_NOT_ALL_ASSIGNED: u32 = 1300;

/// `TOKEN_PRIVILEGES` with one `LUID_AND_ATTRIBUTES`.
#[repr(C)]
struct TokenPrivileges {
    count: u32,
    luid_low: u32,
    luid_high: i32,
    attributes: u32,
}

#[link(name = "kernel32")]
extern "system" {
    fn GetCurrentProcess() -> Handle;
    fn GetLastError() -> u32;
    fn CloseHandle(handle: Handle) -> i32;
}

#[link(name = "advapi32")]
extern "system" {
    fn OpenProcessToken(process: Handle, access: u32, token: *mut Handle) -> i32;
    fn LookupPrivilegeValueW(system: *const u16, name: *const u16, luid: *mut [u32; 2]) -> i32;
    fn AdjustTokenPrivileges(
        token: Handle,
        disable_all: i32,
        new: *const TokenPrivileges,
        length: u32,
        previous: *mut c_void,
        returned: *mut u32,
    ) -> i32;
}

/// The running process.
#[derive(Default)]
pub struct ThisProcess {
    counters: LocalCounters,
}

impl Host for ThisProcess {
    fn enable_profile_privilege(&mut self) -> Result<bool, String> {
        let name: Vec<u16> = "SeSystemProfilePrivilege\0".encode_utf16().collect();
        let mut luid = [0u32; 2];
        let mut token: Handle = ptr::null_mut();
        // SAFETY: every pointer is valid for the call; the token handle is closed below.
        unsafe {
            if LookupPrivilegeValueW(ptr::null(), name.as_ptr(), &mut luid) == 0 {
                return Err(format!("LookupPrivilegeValue failed ({})", GetLastError()));
            }
            let access = TOKEN_ADJUST_PRIVILEGES | TOKEN_QUERY;
            if OpenProcessToken(GetCurrentProcess(), access, &mut token) == 0 {
                return Err(format!("OpenProcessToken failed ({})", GetLastError()));
            }
            let new = TokenPrivileges {
                count: 1,
                luid_low: luid[0],
                luid_high: luid[1] as i32,
                attributes: SE_PRIVILEGE_ENABLED,
            };
            let ok = AdjustTokenPrivileges(token, 0, &new, 0, ptr::null_mut(), ptr::null_mut());
            // AdjustTokenPrivileges succeeds even when the token lacks the privilege; the last
            // error tells.
            let error = GetLastError();
            CloseHandle(token);
            if ok == 0 {
                return Err(format!("AdjustTokenPrivileges failed ({})", error));
            }
            Ok(error != ERROR_NOT_ALL_ASSIGNED)
        }
    }

    fn alloc_counters(&mut self, n: usize) -> Result<u64, String> {
        Ok(self.counters.alloc(n))
    }

    fn write_u32(&mut self, addr: u64, value: u32) {
        self.counters.write(addr, value);
    }

    fn read_u32(&self, addr: u64) -> u32 {
        self.counters.read(addr)
    }
}
