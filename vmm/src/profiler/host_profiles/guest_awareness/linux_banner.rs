//! A Linux guest's kernel banner, read from guest memory to find the kernel's table in a
//! symbol pack ([`report::symbols::packs::linux_isf_layout`]), and the KASLR slide it shows.
//!
//! The kernel keeps its banner (`linux_banner`: `Linux version <release> (<builder>) <compiler>
//! #<build> <date>` and a newline, NUL-terminated) in its read-only data. Guest memory is
//! scanned for `Linux version ` as Volatility scans a memory image; every NUL-terminated
//! printable string that follows, up to [`MAX_BANNER`] bytes, is a candidate (the kernel log
//! and other copies may hold the same text, so each distinct one is kept with where it lies).
//! The scan is bounded: [`MAX_SCAN_BYTES`] of guest RAM, [`MAX_CANDIDATES`] distinct strings,
//! [`MAX_PLACES`] places each. It reads guest memory into a buffer of its own, on the lookup
//! thread, never on a vCPU's.
//!
//! The slide: an x86-64 kernel's image lies in the top 1 GiB window of the virtual address
//! space (from `__START_KERNEL_map`, `0xffffffff80000000`), moved by KASLR in steps of
//! `CONFIG_PHYSICAL_ALIGN`, a multiple of 2 MiB on x86-64. The banner's link-time address
//! (the ISF's `linux_banner`), moved by each 2 MiB step in that window, is translated through
//! the kernel's page tables: the step whose page holds the banner found in RAM is the slide.

use introspect::paging::{translate, Paging, PhysRead};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// What the banner starts with.
pub const PREFIX: &[u8] = b"Linux version ";
/// The longest banner read, its NUL included.
pub const MAX_BANNER: usize = report::symbols::types::isf::banner::MAX_BANNER_BYTES;
/// The most guest RAM scanned.
pub const MAX_SCAN_BYTES: u64 = 64 << 30;
/// The most distinct candidate banners kept.
pub const MAX_CANDIDATES: usize = 16;
/// The most places kept for one candidate.
pub const MAX_PLACES: usize = 16;
/// The bytes read at a time (and the overlap between reads: a banner across two reads is
/// read whole from the first).
const CHUNK: usize = 1 << 20;

/// The start of the kernel image's window and its size.
const KERNEL_MAP: u64 = 0xffff_ffff_8000_0000;
const KERNEL_WINDOW: u64 = 1 << 30;
/// The KASLR step.
const ALIGN: u64 = 2 << 20;

/// A string that may be the kernel's banner: its bytes (without the NUL) and the
/// guest-physical addresses where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The text, `Linux version ...` up to (not including) its NUL.
    pub text: Vec<u8>,
    /// Where it lies in guest-physical memory (at most [`MAX_PLACES`]).
    pub at: Vec<u64>,
}

/// The candidate banners in `mem`, in address order of their first place; the scan ends early
/// when `stop` says so (asked before each read).
pub fn scan(mem: &GuestMemoryMmap, stop: &dyn Fn() -> bool) -> Vec<Candidate> {
    let regions: Vec<(u64, u64)> = mem.iter().map(|r| (r.start_addr().0, r.len())).collect();
    scan_ranges(&regions, MAX_SCAN_BYTES, |gpa, buf| {
        !stop() && mem.read_slice(buf, GuestAddress(gpa)).is_ok()
    })
}

/// The candidates in the ranges `(start, length)`, read through `read` (false: unreadable),
/// at most `budget` bytes of them.
pub fn scan_ranges(
    ranges: &[(u64, u64)],
    budget: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> bool,
) -> Vec<Candidate> {
    let mut found: Vec<Candidate> = Vec::new();
    let mut left = budget;
    let mut buf = vec![0u8; CHUNK + MAX_BANNER];
    for &(start, len) in ranges {
        let mut off = 0u64;
        while off < len && left > 0 {
            let step = (CHUNK as u64).min(len - off).min(left);
            // The chunk and the overlap after it, within the range.
            let n = usize::try_from((step + MAX_BANNER as u64).min(len - off)).unwrap_or(CHUNK);
            let at = start.saturating_add(off);
            if read(at, &mut buf[..n]) {
                let data = &buf[..n];
                let mut i = 0;
                while let Some(p) = find(&data[i..], PREFIX) {
                    let pos = i + p;
                    // A banner starting in the overlap is the next chunk's.
                    if pos as u64 >= step {
                        break;
                    }
                    if let Some(text) = banner_at(&data[pos..]) {
                        note(&mut found, text, at + pos as u64);
                    }
                    i = pos + 1;
                }
            }
            off += step;
            left -= step;
        }
    }
    found
}

/// The NUL-terminated printable string at the start of `data`, if it ends within
/// [`MAX_BANNER`] bytes.
fn banner_at(data: &[u8]) -> Option<&[u8]> {
    let window = &data[..data.len().min(MAX_BANNER)];
    let end = window.iter().position(|&b| b == 0)?;
    let text = &window[..end];
    text.iter()
        .all(|&b| (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t')
        .then_some(text)
}

fn note(found: &mut Vec<Candidate>, text: &[u8], gpa: u64) {
    if let Some(c) = found.iter_mut().find(|c| c.text == text) {
        if c.at.len() < MAX_PLACES {
            c.at.push(gpa);
        }
    } else if found.len() < MAX_CANDIDATES {
        found.push(Candidate {
            text: text.to_vec(),
            at: vec![gpa],
        });
    }
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while from + needle.len() <= hay.len() {
        let p = from + hay[from..].iter().position(|&b| b == first)?;
        if hay.get(p..p + needle.len())? == needle {
            return Some(p);
        }
        from = p + 1;
    }
    None
}

/// The KASLR slide of a kernel whose `linux_banner` is at `link` in its vmlinux and at one of
/// the guest-physical addresses `at` in the guest whose kernel page tables `paging` gives:
/// None when no 2 MiB step in the kernel's window maps it there.
pub fn slide(mem: &impl PhysRead, paging: &Paging, link: u64, at: &[u64]) -> Option<u64> {
    if !(KERNEL_MAP..KERNEL_MAP + KERNEL_WINDOW).contains(&link) {
        return None;
    }
    let maps_banner = |va: u64| translate(mem, paging, va).is_ok_and(|t| at.contains(&t.gpa));
    // Not relocated first, then every step of the window.
    if maps_banner(link) {
        return Some(0);
    }
    let first = KERNEL_MAP + link % ALIGN;
    (0..KERNEL_WINDOW / ALIGN)
        .map(|k| first + k * ALIGN)
        .find(|&va| maps_banner(va))
        .map(|va| va.wrapping_sub(link))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BANNER: &[u8] = b"Linux version 6.1.0-13-amd64 (builder@host) (gcc 12.2.0) #1 SMP 2023\n";

    fn scan_vec(mem: &[u8], budget: u64) -> Vec<Candidate> {
        scan_ranges(&[(0, mem.len() as u64)], budget, |gpa, buf| {
            let at = usize::try_from(gpa).unwrap();
            match mem.get(at..at + buf.len()) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    true
                }
                None => false,
            }
        })
    }

    fn put(mem: &mut [u8], at: usize, s: &[u8]) {
        mem[at..at + s.len()].copy_from_slice(s);
    }

    #[test]
    fn banners_are_found_whole_across_chunks_and_kept_once_with_their_places() {
        let mut mem = vec![0u8; 3 * CHUNK];
        put(&mut mem, 0x1234, BANNER);
        // Across the first chunk's end, and again further on.
        put(&mut mem, CHUNK - 20, BANNER);
        put(&mut mem, 2 * CHUNK + 7, b"Linux version 5.10 (other)\n");
        let found = scan_vec(&mem, u64::MAX);
        assert_eq!(
            found,
            [
                Candidate {
                    text: BANNER.to_vec(),
                    at: vec![0x1234, CHUNK as u64 - 20]
                },
                Candidate {
                    text: b"Linux version 5.10 (other)\n".to_vec(),
                    at: vec![2 * CHUNK as u64 + 7]
                }
            ]
        );
        // The budget stops the scan: only the first chunk is read.
        let found = scan_vec(&mem, CHUNK as u64 - 100);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].at, [0x1234]);
    }

    #[test]
    fn guest_memory_is_scanned_region_by_region_until_told_to_stop() {
        let mem = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 0x10000),
            (GuestAddress(0x10_0000), 0x10000),
        ])
        .unwrap();
        mem.write_slice(&[BANNER, b"\0"].concat(), GuestAddress(0x10_0ff0))
            .unwrap();
        let found = scan(&mem, &|| false);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].at, [0x10_0ff0]);
        assert_eq!(scan(&mem, &|| true), []);
    }

    #[test]
    fn unterminated_unprintable_or_cut_strings_are_not_banners() {
        let mut mem = vec![0u8; 8192];
        // No NUL within the limit.
        put(&mut mem, 0, PREFIX);
        mem[PREFIX.len()..PREFIX.len() + MAX_BANNER].fill(b'x');
        // A control byte.
        put(&mut mem, 4000, b"Linux version \x01bad\0");
        // Cut by the end of memory.
        let end = mem.len() - 10;
        put(&mut mem, end, b"Linux vers");
        assert_eq!(scan_vec(&mem, u64::MAX), []);
        // At the limit exactly: MAX_BANNER bytes, its NUL included.
        let mut mem = vec![0u8; 4096];
        put(&mut mem, 0, PREFIX);
        mem[PREFIX.len()..MAX_BANNER - 1].fill(b'y');
        assert_eq!(scan_vec(&mem, u64::MAX)[0].text.len(), MAX_BANNER - 1);
    }

    #[test]
    fn candidates_and_places_are_capped() {
        let mut mem = vec![0u8; 64 * 1024];
        for i in 0..MAX_CANDIDATES + 4 {
            put(&mut mem, i * 128, format!("Linux version {i}\0").as_bytes());
        }
        for i in 0..MAX_PLACES + 4 {
            put(&mut mem, 32 * 1024 + i * 64, b"Linux version 0\0");
        }
        let found = scan_vec(&mem, u64::MAX);
        assert_eq!(found.len(), MAX_CANDIDATES);
        assert_eq!(found[0].at.len(), MAX_PLACES);
    }

    #[test]
    fn the_slide_is_the_2mib_step_that_maps_the_banner_found() {
        use introspect::testguest::{long_mode, PhysMem};
        let link = 0xffff_ffff_8220_0100;
        let mut phys = PhysMem::new(1 << 20);
        let root = phys.new_root(None);
        let text = phys.alloc();
        let paging = long_mode(root);
        // Not mapped anywhere: no slide.
        assert_eq!(slide(&phys, &paging, link, &[text + 0x100]), None);
        phys.map(root, (link + 0x1a00_0000) & !0xfff, text);
        assert_eq!(
            slide(&phys, &paging, link, &[0x5000, text + 0x100]),
            Some(0x1a00_0000)
        );
        // Mapped, but to another copy than the banner found: no slide.
        assert_eq!(slide(&phys, &paging, link, &[text + 0x200]), None);
        // Not relocated.
        phys.map(root, link & !0xfff, text);
        assert_eq!(slide(&phys, &paging, link, &[text + 0x100]), Some(0));
        // A link-time address outside the kernel's window is not tried.
        assert_eq!(
            slide(&phys, &paging, 0xffff_8880_0000_0100, &[text + 0x100]),
            None
        );
    }
}
