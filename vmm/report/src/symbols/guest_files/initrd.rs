//! The files of an initramfs as the kernel unpacks it: cpio archives in the "newc" format
//! (magic `070701`, or `070702` with checksums), one after another, each plain or compressed
//! (gzip, xz, zstd), with zero padding between them.
//!
//! Everything here is read from a file the user gave, and bounded: the decompressed size
//! ([`MAX_UNPACKED`]), the number of entries ([`MAX_ENTRIES`]), a name's length, and the
//! symbolic links followed in one lookup ([`MAX_LINKS`]). A later entry for a path replaces
//! an earlier one, as it does when the kernel unpacks; a hard-linked file's data, which newc
//! stores with the last of its names, serves every name.

use std::collections::HashMap;

use crate::unpack::{decompress, Compression, UnpackError};

/// The most bytes the archives may unpack to.
pub const MAX_UNPACKED: u64 = 2 << 30;
/// The most entries over all the archives.
pub const MAX_ENTRIES: usize = 1 << 20;
/// The longest name (with its NUL), as Linux's PATH_MAX.
pub const MAX_NAME: usize = 4096;
/// The most symbolic links one lookup follows, as Linux's MAXSYMLINKS.
pub const MAX_LINKS: usize = 40;

const HEADER: usize = 110;
const TRAILER: &str = "TRAILER!!!";

/// Why an initramfs cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum InitrdError {
    /// A compressed archive that does not decompress.
    #[error("the archive at byte {at}")]
    Unpack {
        /// Where it starts (in the file, or in the data decompressed before it).
        at: usize,
        /// Why.
        #[source]
        source: UnpackError,
    },
    /// Bytes that are neither an archive, a compressed one nor padding.
    #[error("byte {at} starts no cpio archive (newc) and no compressed one")]
    NotAnArchive {
        /// Where.
        at: usize,
    },
    /// A header that does not parse, or an entry that runs past the end.
    #[error("the cpio entry at byte {at} is damaged: {what}")]
    Damaged {
        /// Where its header starts.
        at: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// More entries than [`MAX_ENTRIES`].
    #[error("it has more than {MAX_ENTRIES} entries")]
    TooManyEntries,
}

/// What one path is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    /// A regular file: its data's range in [`Initrd::data`].
    File { start: usize, len: usize },
    /// A symbolic link to this target.
    Link(String),
    /// A directory, device or anything else.
    Other,
}

/// An initramfs's files, by path.
#[derive(Debug, Default)]
pub struct Initrd {
    /// The archives' bytes, decompressed where they were compressed, one after another.
    data: Vec<u8>,
    /// Each path (without a leading `/`) and what it is.
    nodes: HashMap<String, Node>,
}

/// A newc header's fields, in order.
struct Header {
    ino: u32,
    mode: u32,
    nlink: u32,
    filesize: u32,
    devmajor: u32,
    devminor: u32,
    namesize: u32,
}

fn hex_field(h: &[u8], i: usize) -> Option<u32> {
    let s = std::str::from_utf8(h.get(6 + 8 * i..14 + 8 * i)?).ok()?;
    u32::from_str_radix(s, 16).ok()
}

fn parse_header(h: &[u8]) -> Option<Header> {
    if h.len() < HEADER || !(h.starts_with(b"070701") || h.starts_with(b"070702")) {
        return None;
    }
    let f = |i| hex_field(h, i);
    Some(Header {
        ino: f(0)?,
        mode: f(1)?,
        nlink: f(4)?,
        filesize: f(6)?,
        devmajor: f(7)?,
        devminor: f(8)?,
        namesize: f(11)?,
    })
}

/// One entry of an archive: its header, its name and its data's range, and where the next
/// entry's header begins.
struct Entry<'a> {
    header: Header,
    name: &'a [u8],
    start: usize,
    end: usize,
    next: usize,
}

/// The entry whose header is at `at` in `data`, every length checked against `data`'s end.
fn entry_at(data: &[u8], at: usize) -> Result<Entry<'_>, InitrdError> {
    let damaged = |what| InitrdError::Damaged { at, what };
    let header = parse_header(&data[at..]).ok_or_else(|| {
        if data[at..].starts_with(b"0707") {
            damaged("not a newc header")
        } else {
            InitrdError::NotAnArchive { at }
        }
    })?;
    let namesize = header.namesize as usize;
    if namesize == 0 || namesize > MAX_NAME {
        return Err(damaged("a name longer than PATH_MAX, or none"));
    }
    let name_end = at + HEADER + namesize;
    let name = data
        .get(at + HEADER..name_end - 1)
        .ok_or_else(|| damaged("its name runs past the end"))?;
    let start = pad4(name_end).ok_or_else(|| damaged("too long"))?;
    let end = start
        .checked_add(header.filesize as usize)
        .filter(|&e| e <= data.len())
        .ok_or_else(|| damaged("its data runs past the end"))?;
    let next = pad4(end).ok_or_else(|| damaged("too long"))?;
    Ok(Entry {
        header,
        name,
        start,
        end,
        next,
    })
}

/// `n` rounded up to a multiple of 4.
fn pad4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

/// `path` without `.`, empty components and leading `/` (`..` is kept for the lookup).
fn clean(path: &str) -> String {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

impl Initrd {
    /// Reads the archives in `bytes` (an initramfs file as given to the kernel), unpacking to
    /// at most [`MAX_UNPACKED`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Initrd, InitrdError> {
        Initrd::parse_within(bytes, MAX_UNPACKED)
    }

    /// [`Initrd::parse`], unpacking to at most `limit` bytes.
    pub fn parse_within(bytes: &[u8], limit: u64) -> Result<Initrd, InitrdError> {
        let mut data: Vec<u8> = Vec::new();
        // Each archive's padding counts from its start: keep each at a multiple of 4.
        let align = |data: &mut Vec<u8>| data.resize(data.len().next_multiple_of(4), 0);
        // Split into plain runs and decompressed streams, as the kernel's unpacker walks it.
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            if rest[0] == 0 {
                at += rest.iter().position(|&b| b != 0).unwrap_or(rest.len());
                continue;
            }
            if rest.starts_with(b"0707") {
                let used = plain_archives(rest);
                align(&mut data);
                data.extend_from_slice(&rest[..used]);
                at += used.max(1);
                continue;
            }
            let Some(format) = Compression::sniff(rest) else {
                return Err(InitrdError::NotAnArchive { at });
            };
            // A compressed stream runs to the end of the file (the usual last archive).
            let room = limit.saturating_sub(data.len() as u64);
            let unpacked = decompress(format, rest, room)
                .map_err(|source| InitrdError::Unpack { at, source })?;
            align(&mut data);
            data.extend_from_slice(&unpacked);
            break;
        }
        if data.len() as u64 > limit {
            return Err(InitrdError::Unpack {
                at: 0,
                source: UnpackError::TooLarge { limit },
            });
        }
        let mut initrd = Initrd {
            data,
            nodes: HashMap::new(),
        };
        initrd.index()?;
        Ok(initrd)
    }

    /// Indexes every entry of [`Initrd::data`]: newc archives, each ended by its trailer,
    /// with zero padding between them.
    fn index(&mut self) -> Result<(), InitrdError> {
        let data = &self.data;
        let mut at = 0;
        let mut entries = 0usize;
        // Hard links: the inode's data, and the names still waiting for it.
        let mut inode_data: HashMap<(u32, u32, u32), (usize, usize)> = HashMap::new();
        let mut waiting: Vec<(String, (u32, u32, u32))> = Vec::new();
        while at < data.len() {
            if data[at] == 0 {
                at += 1;
                continue;
            }
            let e = entry_at(data, at)?;
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(InitrdError::TooManyEntries);
            }
            at = e.next;
            if e.name == TRAILER.as_bytes() {
                continue;
            }
            let (h, start, end) = (e.header, e.start, e.end);
            let len = end - start;
            let name = String::from_utf8_lossy(e.name);
            let path = clean(&name);
            let inode = (h.ino, h.devmajor, h.devminor);
            let node = match h.mode & 0o170_000 {
                0o100_000 => {
                    if h.nlink > 1 {
                        if len > 0 {
                            inode_data.insert(inode, (start, len));
                        } else {
                            waiting.push((path.clone(), inode));
                        }
                    }
                    Node::File { start, len }
                }
                0o120_000 => Node::Link(String::from_utf8_lossy(&data[start..end]).into_owned()),
                _ => Node::Other,
            };
            self.nodes.insert(path, node);
        }
        for (path, inode) in waiting {
            if let Some(&(start, len)) = inode_data.get(&inode) {
                self.nodes.insert(path, Node::File { start, len });
            }
        }
        Ok(())
    }

    /// Number of paths.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when it holds no path.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The regular file at `path` (absolute, as the guest names it), following symbolic
    /// links in its directories and at its end; None when there is none.
    pub fn read(&self, path: &str) -> Option<&[u8]> {
        let resolved = self.resolve(path)?;
        match self.nodes.get(&resolved)? {
            Node::File { start, len } => self.data.get(*start..start + len),
            _ => None,
        }
    }

    /// `path` with every symbolic link replaced by its target, at most [`MAX_LINKS`] of them.
    fn resolve(&self, path: &str) -> Option<String> {
        let parts = super::resolve_links(path, |parts| {
            Ok(match self.nodes.get(&parts.join("/")) {
                Some(Node::Link(target)) => Some(target.clone()),
                _ => None,
            })
        })?;
        Some(parts.join("/"))
    }
}

/// Appends one newc entry to `out`, an archive being built from its first byte: the header,
/// the name and the data, each padded to 4 bytes as the format wants (the trailer is an entry
/// named `TRAILER!!!`). For tests and tools that make archives.
///
/// # Panics
/// If the name or the data is 4 GiB or more.
pub fn push_entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8], ino: u32, nlink: u32) {
    let size = u32::try_from(data.len()).expect("newc data under 4 GiB");
    let namesize = u32::try_from(name.len() + 1).expect("newc name under 4 GiB");
    out.extend_from_slice(b"070701");
    for f in [ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, namesize, 0] {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    out.resize(out.len().next_multiple_of(4), 0);
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// How many bytes of `bytes` are plain newc archives (through the last trailer and the zero
/// padding after it) before compressed data or the end. Damaged or unfinished archives count
/// to the end, for the indexer to name the entry.
fn plain_archives(bytes: &[u8]) -> usize {
    let mut at = 0;
    let mut end = 0;
    while at < bytes.len() && bytes[at..].starts_with(b"0707") {
        let Ok(e) = entry_at(bytes, at) else {
            return bytes.len();
        };
        at = e.next;
        if at >= bytes.len() {
            return bytes.len();
        }
        if e.name == TRAILER.as_bytes() {
            while bytes.get(at) == Some(&0) {
                at += 1;
            }
            end = at;
        }
    }
    if end == 0 {
        bytes.len()
    } else {
        end
    }
}

#[cfg(test)]
mod tests;
