//! QEMU's ACPI linker/loader script (the fw_cfg file "etc/table-loader"): commands that make
//! the firmware allocate fw_cfg files in guest memory, patch pointers between them once their
//! addresses are known, and fix up checksums. SeaBIOS (src/fw/romfile_loader.c) and OVMF
//! (OvmfPkg/AcpiPlatformDxe) both execute it.
//!
//! Each command is 128 bytes, little-endian: a u32 command number, then its fields, zero-padded.

use super::items::FILE_NAME_LEN;

/// The size of one command.
pub const COMMAND_SIZE: usize = 128;
/// ALLOCATE.
pub const COMMAND_ALLOCATE: u32 = 1;
/// ADD_POINTER.
pub const COMMAND_ADD_POINTER: u32 = 2;
/// ADD_CHECKSUM.
pub const COMMAND_ADD_CHECKSUM: u32 = 3;

/// Where the firmware allocates a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zone {
    /// Anywhere in high memory.
    High = 1,
    /// The F segment (below 1 MiB), where legacy scanners find the RSDP.
    FSeg = 2,
}

/// A loader command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Allocate `file` aligned to `align` (a power of two) in `zone` and copy it there.
    Allocate {
        /// The fw_cfg file.
        file: String,
        /// Alignment in bytes.
        align: u32,
        /// Zone.
        zone: Zone,
    },
    /// Add the address of `src` to the `size`-byte little-endian value at `offset` in `dest`.
    AddPointer {
        /// The file holding the pointer.
        dest: String,
        /// The file pointed to.
        src: String,
        /// Offset of the pointer in `dest`.
        offset: u32,
        /// 1, 2, 4 or 8.
        size: u8,
    },
    /// Subtract the byte sum of `file[start..start + length]` from the byte at `offset`.
    AddChecksum {
        /// The file.
        file: String,
        /// The checksum byte.
        offset: u32,
        /// Start of the summed range.
        start: u32,
        /// Length of the summed range.
        length: u32,
    },
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    let mut n = [0u8; FILE_NAME_LEN];
    let len = name.len().min(FILE_NAME_LEN - 1);
    n[..len].copy_from_slice(&name.as_bytes()[..len]);
    out.extend_from_slice(&n);
}

impl Command {
    /// The command's 128 bytes.
    pub fn encode(&self) -> [u8; COMMAND_SIZE] {
        let mut v = Vec::with_capacity(COMMAND_SIZE);
        match self {
            Command::Allocate { file, align, zone } => {
                v.extend_from_slice(&COMMAND_ALLOCATE.to_le_bytes());
                put_name(&mut v, file);
                v.extend_from_slice(&align.to_le_bytes());
                v.push(*zone as u8);
            }
            Command::AddPointer {
                dest,
                src,
                offset,
                size,
            } => {
                v.extend_from_slice(&COMMAND_ADD_POINTER.to_le_bytes());
                put_name(&mut v, dest);
                put_name(&mut v, src);
                v.extend_from_slice(&offset.to_le_bytes());
                v.push(*size);
            }
            Command::AddChecksum {
                file,
                offset,
                start,
                length,
            } => {
                v.extend_from_slice(&COMMAND_ADD_CHECKSUM.to_le_bytes());
                put_name(&mut v, file);
                v.extend_from_slice(&offset.to_le_bytes());
                v.extend_from_slice(&start.to_le_bytes());
                v.extend_from_slice(&length.to_le_bytes());
            }
        }
        let mut out = [0u8; COMMAND_SIZE];
        out[..v.len()].copy_from_slice(&v);
        out
    }
}

/// A loader script.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableLoader {
    commands: Vec<Command>,
}

impl TableLoader {
    /// An empty script.
    pub fn new() -> Self {
        TableLoader::default()
    }

    /// Appends a command.
    pub fn push(&mut self, c: Command) {
        self.commands.push(c);
    }

    /// The commands so far.
    pub fn commands(&self) -> &[Command] {
        &self.commands
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        self.commands.iter().flat_map(|c| c.encode()).collect()
    }
}

/// Runs a script the way the firmware does, over files given as `(name, bytes)`, placing
/// each allocated file at the address `place` returns (given the file's name, length and
/// alignment). Returns where each file went, in allocation order. A direct kernel boot links
/// its ACPI tables with it; tests use it to check what the firmware will see.
pub fn execute(
    script: &TableLoader,
    files: &mut [(String, Vec<u8>)],
    mut place: impl FnMut(&str, usize, u32) -> u64,
) -> Result<Vec<(String, u64)>, String> {
    let mut addrs: Vec<(String, u64)> = Vec::new();
    let find = |files: &[(String, Vec<u8>)], n: &str| files.iter().position(|(f, _)| f == n);
    for c in script.commands() {
        match c {
            Command::Allocate { file, align, .. } => {
                let i = find(files, file).ok_or_else(|| format!("no file {file}"))?;
                let at = place(file, files[i].1.len(), *align);
                addrs.push((file.clone(), at));
            }
            Command::AddPointer {
                dest,
                src,
                offset,
                size,
            } => {
                let base = addrs
                    .iter()
                    .find(|(n, _)| n == src)
                    .map(|(_, a)| *a)
                    .ok_or_else(|| format!("{src} not allocated"))?;
                let d = find(files, dest).ok_or_else(|| format!("no file {dest}"))?;
                let o = usize::try_from(*offset).map_err(|e| e.to_string())?;
                let s = usize::from(*size);
                let field = files[d]
                    .1
                    .get_mut(o..o + s)
                    .ok_or_else(|| format!("pointer at {o} outside {dest}"))?;
                let mut v = [0u8; 8];
                v[..s].copy_from_slice(field);
                let sum = u64::from_le_bytes(v).wrapping_add(base).to_le_bytes();
                field.copy_from_slice(&sum[..s]);
            }
            Command::AddChecksum {
                file,
                offset,
                start,
                length,
            } => {
                let i = find(files, file).ok_or_else(|| format!("no file {file}"))?;
                let data = &mut files[i].1;
                let (s, l) = (*start as usize, *length as usize);
                let range = data
                    .get(s..s + l)
                    .ok_or_else(|| format!("checksum range outside {file}"))?;
                let sum = range.iter().fold(0u8, |a, b| a.wrapping_add(*b));
                let b = data
                    .get_mut(*offset as usize)
                    .ok_or_else(|| format!("checksum byte outside {file}"))?;
                *b = b.wrapping_sub(sum);
            }
        }
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_encoding_matches_qemu() {
        let c = Command::Allocate {
            file: "etc/acpi/rsdp".into(),
            align: 16,
            zone: Zone::FSeg,
        }
        .encode();
        assert_eq!(c[..4], [1, 0, 0, 0]);
        assert_eq!(&c[4..17], b"etc/acpi/rsdp");
        assert!(c[17..60].iter().all(|&b| b == 0));
        assert_eq!(c[60..64], [16, 0, 0, 0]);
        assert_eq!(c[64], 2);
        assert!(c[65..].iter().all(|&b| b == 0));
    }

    #[test]
    fn add_pointer_and_checksum_encoding() {
        let p = Command::AddPointer {
            dest: "a".into(),
            src: "b".into(),
            offset: 0x24,
            size: 4,
        }
        .encode();
        assert_eq!(p[..4], [2, 0, 0, 0]);
        assert_eq!(p[4], b'a');
        assert_eq!(p[60], b'b');
        assert_eq!(p[116..120], [0x24, 0, 0, 0]);
        assert_eq!(p[120], 4);
        let k = Command::AddChecksum {
            file: "a".into(),
            offset: 9,
            start: 0,
            length: 36,
        }
        .encode();
        assert_eq!(k[..4], [3, 0, 0, 0]);
        assert_eq!(k[60..72], [9, 0, 0, 0, 0, 0, 0, 0, 36, 0, 0, 0]);
        let mut l = TableLoader::new();
        l.push(Command::AddChecksum {
            file: "a".into(),
            offset: 9,
            start: 0,
            length: 36,
        });
        assert_eq!(l.encode().len(), COMMAND_SIZE);
    }

    #[test]
    fn execute_patches_pointers_and_checksums() {
        let mut l = TableLoader::new();
        l.push(Command::Allocate {
            file: "t".into(),
            align: 64,
            zone: Zone::High,
        });
        l.push(Command::AddPointer {
            dest: "t".into(),
            src: "t".into(),
            offset: 0,
            size: 4,
        });
        l.push(Command::AddChecksum {
            file: "t".into(),
            offset: 4,
            start: 0,
            length: 8,
        });
        let mut files = vec![("t".to_string(), vec![0x10, 0, 0, 0, 0, 0, 0, 0])];
        execute(&l, &mut files, |_, _, _| 0x1000).unwrap();
        assert_eq!(files[0].1[..4], [0x10, 0x10, 0, 0]);
        assert_eq!(files[0].1.iter().fold(0u8, |a, b| a.wrapping_add(*b)), 0);
    }
}
