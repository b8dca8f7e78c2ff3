//! The kernel's loaded-module list: the bytes `NtQuerySystemInformation(SystemModuleInformation)`
//! returns, parsed without trusting any count.
//!
//! x64 layout: `RTL_PROCESS_MODULES { ULONG NumberOfModules; RTL_PROCESS_MODULE_INFORMATION
//! Modules[]; }`, the array at offset 8 (pointer-aligned), each entry 296 bytes: `Section` (8),
//! `MappedBase` (8), `ImageBase` at 16 (8), `ImageSize` at 24 (4), `Flags` (4),
//! `LoadOrderIndex`, `InitOrderIndex`, `LoadCount` (2 each), `OffsetToFileName` at 38 (2),
//! `FullPathName[256]` at 40 (ANSI, NUL-terminated).

/// `SystemModuleInformation`.
pub const SYSTEM_MODULE_INFORMATION: u32 = 11;
/// Offset of the first entry.
pub const MODULES_OFFSET: usize = 8;
/// Bytes of one `RTL_PROCESS_MODULE_INFORMATION`.
pub const ENTRY_SIZE: usize = 296;

/// A loaded module.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Module {
    /// The file name (`ntoskrnl.exe`).
    pub name: String,
    /// The full path as the kernel reports it (`\SystemRoot\system32\ntoskrnl.exe`).
    pub path: String,
    /// Load address.
    pub base: u64,
    /// Bytes of the image.
    pub size: u64,
}

/// Why a module list could not be read.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ModuleListError {
    /// Fewer bytes than the header's count needs.
    Truncated,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(raw)
}

/// Parses the whole list.
pub fn parse(bytes: &[u8]) -> Result<Vec<Module>, ModuleListError> {
    let count = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(ModuleListError::Truncated)?;
    let count = usize::try_from(count).map_err(|_| ModuleListError::Truncated)?;
    let needed = count
        .checked_mul(ENTRY_SIZE)
        .and_then(|n| n.checked_add(MODULES_OFFSET))
        .ok_or(ModuleListError::Truncated)?;
    let entries = bytes
        .get(MODULES_OFFSET..needed)
        .ok_or(ModuleListError::Truncated)?;
    Ok(entries.chunks_exact(ENTRY_SIZE).map(entry).collect())
}

fn entry(e: &[u8]) -> Module {
    let base = u64_at(e, 16);
    let size = u64::from(u32::from_le_bytes([e[24], e[25], e[26], e[27]]));
    let name_at = usize::from(u16::from_le_bytes([e[38], e[39]]));
    let raw = &e[40..ENTRY_SIZE];
    let len = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    let path = String::from_utf8_lossy(&raw[..len]).into_owned();
    let name = if name_at < len {
        String::from_utf8_lossy(&raw[name_at..len]).into_owned()
    } else {
        path.rsplit('\\').next().unwrap_or("").to_string()
    };
    Module {
        name,
        path,
        base,
        size,
    }
}

/// The module whose file name is `name` (case-insensitive; `ntoskrnl` finds `ntoskrnl.exe`).
pub fn find<'m>(modules: &'m [Module], name: &str) -> Option<&'m Module> {
    let exact = modules.iter().find(|m| m.name.eq_ignore_ascii_case(name));
    exact.or_else(|| {
        modules.iter().find(|m| {
            m.name
                .rsplit_once('.')
                .map_or(false, |(stem, _)| stem.eq_ignore_ascii_case(name))
        })
    })
}

/// Builds the bytes of a module list (tests, and documentation of the layout).
pub fn encode(modules: &[(u64, u32, &str)]) -> Vec<u8> {
    let mut out = vec![0u8; MODULES_OFFSET + modules.len() * ENTRY_SIZE];
    let count = u32::try_from(modules.len()).unwrap_or(u32::MAX);
    out[..4].copy_from_slice(&count.to_le_bytes());
    for (i, (base, size, path)) in modules.iter().enumerate() {
        let e = &mut out[MODULES_OFFSET + i * ENTRY_SIZE..][..ENTRY_SIZE];
        e[16..24].copy_from_slice(&base.to_le_bytes());
        e[24..28].copy_from_slice(&size.to_le_bytes());
        let name_at = path.rfind('\\').map_or(0, |i| i + 1);
        let name_at = u16::try_from(name_at).unwrap_or(0);
        e[38..40].copy_from_slice(&name_at.to_le_bytes());
        let bytes = path.as_bytes();
        let n = bytes.len().min(255);
        e[40..40 + n].copy_from_slice(&bytes[..n]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_bases_and_sizes() {
        let bytes = encode(&[
            (
                0xFFFF_F800_1240_0000,
                0x104_6000,
                "\\SystemRoot\\system32\\ntoskrnl.exe",
            ),
            (
                0xFFFF_F800_1200_0000,
                0x6_0000,
                "\\SystemRoot\\system32\\hal.dll",
            ),
            (0xFFFF_F800_1300_0000, 0x1000, "nopath.sys"),
        ]);
        let m = parse(&bytes).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].name, "ntoskrnl.exe");
        assert_eq!(m[0].path, "\\SystemRoot\\system32\\ntoskrnl.exe");
        assert_eq!((m[0].base, m[0].size), (0xFFFF_F800_1240_0000, 0x104_6000));
        assert_eq!(m[2].name, "nopath.sys");
        assert_eq!(find(&m, "HAL.DLL").unwrap().base, 0xFFFF_F800_1200_0000);
        assert_eq!(find(&m, "ntoskrnl").unwrap().size, 0x104_6000);
        assert!(find(&m, "win32k.sys").is_none());
    }

    #[test]
    fn a_count_beyond_the_bytes_is_refused() {
        let mut bytes = encode(&[(1, 2, "a.sys")]);
        assert_eq!(
            parse(&bytes[..bytes.len() - 1]),
            Err(ModuleListError::Truncated)
        );
        bytes[0] = 0xFF;
        bytes[3] = 0xFF;
        assert_eq!(parse(&bytes), Err(ModuleListError::Truncated));
        assert_eq!(parse(&[1, 0]), Err(ModuleListError::Truncated));
        assert_eq!(parse(&encode(&[])), Ok(vec![]));
    }

    #[test]
    fn a_bad_name_offset_falls_back_to_the_path() {
        let mut bytes = encode(&[(1, 2, "\\x\\y.sys")]);
        bytes[MODULES_OFFSET + 38] = 200;
        assert_eq!(parse(&bytes).unwrap()[0].name, "y.sys");
    }
}
