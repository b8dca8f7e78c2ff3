//! A guest's disk image as a place its files are found: an ext2, ext3 or ext4 file system
//! (read with ext4-view, read-only), the whole image or one of its MBR or GPT partitions, the
//! first that holds one. The image's bytes come through an [`Opener`] the caller gives (the
//! VMM opens raw and qcow2 images with their backing chains); whoever wrote the image, a
//! guest included, controls every byte: the partition tables are bounded, and ext4-view
//! refuses what it cannot read.

use std::path::PathBuf;
use std::sync::Arc;

use ext4_view::Ext4;
/// What an [`Opener`] gives: the image's bytes by offset (ext4-view's reader trait).
pub use ext4_view::Ext4Read;
use introspect::bytes::{u32_at, u64_at};

/// Opens the image's bytes afresh (ext4-view's file system is not `Send`, so each lookup
/// opens its own).
pub type Opener = Arc<dyn Fn() -> Result<Box<dyn Ext4Read>, String> + Send + Sync>;

/// Bytes in a sector, as partition tables count them.
const SECTOR: u64 = 512;
/// Where an ext2/3/4 superblock is, and its magic within it.
const SUPERBLOCK: u64 = 1024;
const MAGIC_AT: u64 = 56;
const EXT_MAGIC: u16 = 0xef53;
/// GPT partition entries looked at, at most.
const MAX_GPT_ENTRIES: u32 = 128;
/// Block groups a file system may have: 128 TiB of 4 KiB blocks. The reader keeps a
/// descriptor of each in memory, read at once, so a superblock's count is bounded first.
const MAX_GROUPS: u64 = 1 << 20;
/// `s_feature_incompat`'s 64-bit flag: descriptors of `s_desc_size` bytes, not 32.
const INCOMPAT_64BIT: u32 = 0x80;
/// Symbolic links followed in one lookup, and the longest target read: Linux's MAXSYMLINKS
/// and PATH_MAX. The reader would follow links itself, reading a target of whatever length
/// its inode claims.
const MAX_LINKS: usize = 40;
const MAX_LINK_LEN: u64 = 4096;
/// `0xEE`: a protective MBR entry in front of a GPT.
const GPT_PROTECTIVE: u8 = 0xee;

/// A disk image among the places a guest's files are looked for.
pub struct ImagePlace {
    /// The image's path on the host, for messages.
    pub name: PathBuf,
    open: Opener,
}

impl std::fmt::Debug for ImagePlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImagePlace")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ImagePlace {
    /// The image at `name` (for messages), its bytes from `open`.
    pub fn new(name: PathBuf, open: Opener) -> Self {
        ImagePlace { name, open }
    }

    /// The file system on the image, where it starts (0 for a bare file system).
    fn file_system(&self) -> Result<(Ext4, u64), String> {
        let mut bytes = (self.open)()?;
        let start = fs_start(bytes.as_mut()).ok_or_else(|| {
            "no ext2, ext3 or ext4 file system on it or its partitions".to_string()
        })?;
        let mut at = At { bytes, start };
        check_groups(&mut at)?;
        let fs = Ext4::load(Box::new(at)).map_err(|e| e.to_string())?;
        Ok((fs, start))
    }

    /// The guest's file `path` (absolute, its symbolic links resolved within the file system),
    /// if the image holds it as a regular file of at most `max` bytes.
    pub fn read(&self, path: &str, max: u64) -> Option<Vec<u8>> {
        let fs = match self.file_system() {
            Ok((fs, _)) => fs,
            Err(e) => {
                log::warn!("disk image {}: {e}", self.name.display());
                return None;
            }
        };
        let path = resolve(&fs, path).ok()?;
        let meta = fs.symlink_metadata(path.as_slice()).ok()?;
        if !meta.file_type().is_regular_file() {
            return None;
        }
        if meta.len() > max {
            log::warn!(
                "{} in the disk image {}: {} bytes, over {max}",
                String::from_utf8_lossy(&path),
                self.name.display(),
                meta.len()
            );
            return None;
        }
        fs.read(path.as_slice()).ok()
    }

    /// Checks that the image opens and holds a file system it can read.
    pub fn check(&self) -> Result<(), String> {
        self.file_system().map(drop)
    }
}

/// `path` with its symbolic links resolved, as the guest's kernel would, one component at a
/// time: each looked up under a prefix already free of links, so the reader follows none, and
/// each link's target length checked before it is read. `..` at the root stays there.
fn resolve(fs: &Ext4, path: &str) -> Result<Vec<u8>, String> {
    let mut todo: std::collections::VecDeque<Vec<u8>> =
        path.split('/').map(|c| c.as_bytes().to_vec()).collect();
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut links = 0;
    let joined = |parts: &[Vec<u8>]| -> Vec<u8> {
        parts.iter().flat_map(|c| [&b"/"[..], c].concat()).collect()
    };
    while let Some(c) = todo.pop_front() {
        match c.as_slice() {
            b"" | b"." => continue,
            b".." => {
                done.pop();
                continue;
            }
            _ => {}
        }
        done.push(c);
        let here = joined(&done);
        let meta = fs
            .symlink_metadata(here.as_slice())
            .map_err(|e| e.to_string())?;
        if !meta.is_symlink() {
            continue;
        }
        links += 1;
        if links > MAX_LINKS || meta.len() > MAX_LINK_LEN {
            return Err("too many symbolic links, or one too long".into());
        }
        let target = fs.read_link(here.as_slice()).map_err(|e| e.to_string())?;
        done.pop();
        if target.is_absolute() {
            done.clear();
        }
        let parts = target.as_ref().split(|&b| b == b'/');
        for part in parts.rev() {
            todo.push_front(part.to_vec());
        }
    }
    Ok(if done.is_empty() {
        b"/".to_vec()
    } else {
        joined(&done)
    })
}

/// Refuses a superblock whose blocks are over 64 KiB, whose block group count is above
/// [`MAX_GROUPS`] or whose descriptor table runs past the image's end (the last descriptor's
/// byte is read), before the reader reserves memory for a block or for that many groups.
fn check_groups(fs: &mut dyn Ext4Read) -> Result<(), String> {
    let mut sb = [0u8; 1024];
    fs.read(SUPERBLOCK, &mut sb).map_err(|e| e.to_string())?;
    let field = |at| u32_at(&sb, at).map(u64::from).unwrap_or(0);
    // As the reader counts them: the high half whether or not the 64-bit flag is set.
    let blocks = field(0x04) | field(0x150) << 32;
    let (first_data, log_size, per_group) = (field(0x14), field(0x18), field(0x20));
    let desc = if field(0x60) & u64::from(INCOMPAT_64BIT) != 0 {
        u64::from(u16::from_le_bytes([sb[0xfe], sb[0xff]]))
    } else {
        32
    };
    // The reader takes blocks up to 2 GiB and reads whole blocks; Linux, 64 KiB at most.
    if log_size > 6 {
        return Err(format!(
            "its superblock's block size is 2^{} bytes, over ext4's 64 KiB",
            log_size.saturating_add(10)
        ));
    }
    // The reader refuses these itself, with its own words.
    if per_group == 0 || desc == 0 {
        return Ok(());
    }
    let groups = blocks.saturating_sub(first_data).div_ceil(per_group);
    if groups > MAX_GROUPS {
        return Err(format!(
            "its superblock counts {groups} block groups, over the {MAX_GROUPS} read"
        ));
    }
    let block = 1024u64 << log_size;
    let per_block = (block / desc).max(1);
    let table = if block == 1024 { 2 } else { 1 };
    let last = groups.saturating_sub(1);
    let end = (table + last / per_block) * block + (last % per_block) * desc;
    fs.read(end, &mut [0u8; 1]).map_err(|_| {
        format!("its block group descriptor table ({groups} groups) runs past the image's end")
    })
}

/// The image's bytes from `start` on, as the file system sees them.
struct At {
    bytes: Box<dyn Ext4Read>,
    start: u64,
}

impl Ext4Read for At {
    fn read(
        &mut self,
        start_byte: u64,
        dst: &mut [u8],
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync + 'static>> {
        let at = self
            .start
            .checked_add(start_byte)
            .ok_or("a read past the end of the address range")?;
        self.bytes.read(at, dst)
    }
}

/// True when an ext2/3/4 superblock's magic is where a file system starting at `start` has it.
fn has_ext(bytes: &mut dyn Ext4Read, start: u64) -> bool {
    let mut magic = [0u8; 2];
    start
        .checked_add(SUPERBLOCK + MAGIC_AT)
        .is_some_and(|at| bytes.read(at, &mut magic).is_ok())
        && u16::from_le_bytes(magic) == EXT_MAGIC
}

/// Where the image's file system starts: the image itself, else the first MBR partition, or
/// with a protective MBR the first GPT partition, that holds one.
pub fn fs_start(bytes: &mut dyn Ext4Read) -> Option<u64> {
    if has_ext(bytes, 0) {
        return Some(0);
    }
    let mut mbr = [0u8; 512];
    bytes.read(0, &mut mbr).ok()?;
    if mbr[510..] != [0x55, 0xaa] {
        return None;
    }
    let entries: Vec<(u8, u64)> = (0..4)
        .filter_map(|i| {
            let e = 446 + 16 * i;
            Some((mbr[e + 4], u64::from(u32_at(&mbr, e + 8)?)))
        })
        .filter(|&(kind, lba)| kind != 0 && lba != 0)
        .collect();
    if entries.iter().any(|&(kind, _)| kind == GPT_PROTECTIVE) {
        return gpt_start(bytes);
    }
    entries
        .into_iter()
        .map(|(_, lba)| lba.saturating_mul(SECTOR))
        .find(|&start| has_ext(bytes, start))
}

/// The first GPT partition that holds an ext2/3/4 file system (the header at LBA 1).
fn gpt_start(bytes: &mut dyn Ext4Read) -> Option<u64> {
    let mut header = [0u8; 92];
    bytes.read(SECTOR, &mut header).ok()?;
    if &header[..8] != b"EFI PART" {
        return None;
    }
    let table = u64_at(&header, 72)?.checked_mul(SECTOR)?;
    let count = u32_at(&header, 80)?.min(MAX_GPT_ENTRIES);
    let size = u64::from(u32_at(&header, 84)?);
    if !(128..=4096).contains(&size) {
        return None;
    }
    let mut entry = [0u8; 48];
    (0..u64::from(count)).find_map(|i| {
        let at = table.checked_add(i.checked_mul(size)?)?;
        bytes.read(at, &mut entry).ok()?;
        if entry[..16].iter().all(|&b| b == 0) {
            return None;
        }
        let start = u64_at(&entry, 32)?.checked_mul(SECTOR)?;
        has_ext(bytes, start).then_some(start)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image of `len` bytes with an ext superblock magic at `fs`.
    fn image(len: usize, fs: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        let at = fs + usize::try_from(SUPERBLOCK + MAGIC_AT).unwrap();
        b[at..at + 2].copy_from_slice(&EXT_MAGIC.to_le_bytes());
        b
    }

    fn mbr(b: &mut [u8], slot: usize, kind: u8, lba: u32) {
        let e = 446 + 16 * slot;
        b[e + 4] = kind;
        b[e + 8..e + 12].copy_from_slice(&lba.to_le_bytes());
        b[510] = 0x55;
        b[511] = 0xaa;
    }

    #[test]
    fn a_bare_file_system_or_its_mbr_partition_is_found() {
        let mut bare = image(8192, 0);
        assert_eq!(fs_start(&mut bare), Some(0));
        let mut parted = image(64 * 1024, 2048 * 16);
        mbr(&mut parted, 0, 0x82, 8); // swap: no file system there
        mbr(&mut parted, 1, 0x83, 64);
        assert_eq!(fs_start(&mut parted), Some(64 * 512));
        let mut none = vec![0u8; 8192];
        assert_eq!(fs_start(&mut none), None);
        mbr(&mut none, 0, 0x83, 0xffff_ffff);
        assert_eq!(fs_start(&mut none), None, "a partition past the end");
    }

    #[test]
    fn a_gpt_partition_is_found_behind_its_protective_mbr() {
        let fs = 40 * 512;
        let mut b = image(64 * 1024, fs);
        mbr(&mut b, 0, GPT_PROTECTIVE, 1);
        b[512..520].copy_from_slice(b"EFI PART");
        b[512 + 72..512 + 80].copy_from_slice(&2u64.to_le_bytes()); // entries at LBA 2
        b[512 + 80..512 + 84].copy_from_slice(&4u32.to_le_bytes());
        b[512 + 84..512 + 88].copy_from_slice(&128u32.to_le_bytes());
        // Entry 0 unused; entry 1 a partition at LBA 40.
        let e = 1024 + 128;
        b[e] = 0xaf; // any non-zero type GUID
        b[e + 32..e + 40].copy_from_slice(&40u64.to_le_bytes());
        assert_eq!(fs_start(&mut b), Some(fs as u64));
        b[512 + 84..512 + 88].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(fs_start(&mut b), None, "an entry size out of range");
    }

    /// mke2fs's file system of testdata/ext4-links.img (remade with `mke2fs -t ext4 -b 1024
    /// -N 32 -O ^has_journal,^resize_inode,^metadata_csum -d ROOT IMG 128K`): `/bin/prog` holds
    /// `\x7fELFprog`, `/usr/lib/libc.so.6` holds `libc`, `/lib` links to `usr/lib` and
    /// `/loop` to itself.
    fn links_place() -> ImagePlace {
        let open: Opener = Arc::new(|| {
            let bytes = include_bytes!("../../../testdata/ext4-links.img").to_vec();
            Ok(Box::new(bytes) as Box<dyn Ext4Read>)
        });
        ImagePlace::new("ext4-links.img".into(), open)
    }

    #[test]
    fn files_are_read_through_links_and_bounded() {
        let place = links_place();
        assert_eq!(place.check(), Ok(()));
        assert_eq!(place.read("/bin/prog", 100).unwrap(), b"\x7fELFprog");
        assert_eq!(place.read("/lib/libc.so.6", 100).unwrap(), b"libc");
        assert_eq!(place.read("/usr/../bin/prog", 100).unwrap(), b"\x7fELFprog");
        assert_eq!(place.read("/bin/prog", 7), None, "8 bytes, over the bound");
        assert_eq!(place.read("/loop", 100), None, "a link to itself");
        assert_eq!(place.read("/bin", 100), None, "a directory");
        assert_eq!(place.read("/bin/none", 100), None);
    }

    #[test]
    fn an_image_that_does_not_open_or_holds_no_file_system_says_so() {
        let fails: Opener = Arc::new(|| Err("cannot open disk image x".into()));
        let place = ImagePlace::new("x".into(), fails);
        assert_eq!(place.check(), Err("cannot open disk image x".into()));
        assert_eq!(place.read("/bin/prog", 100), None);
        let blank: Opener = Arc::new(|| Ok(Box::new(vec![0u8; 8192]) as Box<dyn Ext4Read>));
        let place = ImagePlace::new("blank".into(), blank);
        assert!(place.check().unwrap_err().contains("no ext2, ext3 or ext4"));
    }

    #[test]
    fn a_superblock_with_more_block_groups_than_the_image_holds_is_refused() {
        let mut bytes = include_bytes!("../../../testdata/ext4-links.img").to_vec();
        assert_eq!(check_groups(&mut bytes), Ok(()));
        // s_blocks_count_lo: 2^32 - 1 blocks of 1 KiB, 8192 a group.
        bytes[1024 + 4..1024 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = check_groups(&mut bytes).unwrap_err();
        assert!(
            e.contains("524288 groups) runs past the image's end"),
            "{e}"
        );
        // 64-bit: the high half too.
        bytes[1024 + 0x60] |= 0x80;
        bytes[1024 + 0xfe] = 64;
        bytes[1024 + 0x150..1024 + 0x154].copy_from_slice(&2u32.to_le_bytes());
        let e = check_groups(&mut bytes).unwrap_err();
        assert!(e.contains("over the 1048576 read"), "{e}");
    }
}
