//! Which PE image holds a PC, remembered per address space.
//!
//! Finding an image means scanning down from the PC a page at a time for a header, which is
//! far too slow to repeat on every frame of every sample. The cache keeps the images found
//! (checked again by re-reading their headers the first time each walk uses them: the guest
//! may have unmapped or replaced them since the last sample, but not during a walk, which
//! happens while the sampled vCPU is out of the guest) and the page ranges known to hold no
//! header (forgotten every [`MISS_LIFETIME`] lookups, so an image mapped later is found).
//!
//! Most frames of a walk, and of the walks after it, lie on pages looked up before: the answer
//! for each page (an image, or none) is remembered in a small table, valid until the images or
//! the header-free ranges change, so such a lookup costs a hash and a compare. An image found
//! there is still re-checked on its first use in each walk.

use crate::mem::Memory;
use crate::pe::{Image, PAGE};

/// Images remembered, over all address spaces; the oldest is dropped beyond this.
const MAX_IMAGES: usize = 256;
/// Header-free page ranges remembered; all are dropped beyond this.
const MAX_MISSES: usize = 1024;
/// Lookups after which the header-free ranges are forgotten.
pub const MISS_LIFETIME: u32 = 16_384;
/// The address-space key of kernel addresses (bit 63 set): the same in every address space.
pub const KERNEL_SPACE: u64 = u64::MAX;
/// Newly found images kept until the caller takes them; more are not reported.
const MAX_FOUND: usize = 256;
/// Pages whose lookup is remembered (a direct-mapped table).
const MEMO: usize = 64;

/// A page's lookup, as it was at `generation`.
#[derive(Clone, Copy, Debug)]
struct Memo {
    space: u64,
    page: u64,
    generation: u64,
    /// The image's place in `images`, or None: no image holds the page.
    image: Option<usize>,
}

/// The address-space key of `addr` under the page tables at `cr3`: [`KERNEL_SPACE`] for
/// kernel addresses, else `cr3` without its PCID bits.
pub fn space_of(cr3: u64, addr: u64) -> u64 {
    if addr >> 63 == 1 {
        KERNEL_SPACE
    } else {
        cr3 & !(PAGE - 1)
    }
}

/// The memo slot of a page.
fn memo_slot(space: u64, page: u64) -> usize {
    let h = (page ^ space.rotate_left(23)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    usize::try_from(h >> 58).unwrap_or(0) % MEMO
}

/// PE images found in guest address spaces.
#[derive(Debug)]
pub struct ImageCache {
    /// How far below a PC the scan looks for its image's header.
    scan_limit: u64,
    /// (space, image, the walk that last checked it).
    images: Vec<(u64, Image, u64)>,
    /// (space, first page, last page) with no image header.
    misses: Vec<(u64, u64, u64)>,
    lookups: u32,
    /// The current walk's number.
    walk: u64,
    /// Images found by a scan since [`ImageCache::take_found`] was last called.
    found: Vec<(u64, Image)>,
    /// Lookups by page; an entry holds while `generation` is unchanged.
    memo: [Memo; MEMO],
    /// Changed whenever an image is added or dropped, or the header-free ranges are forgotten:
    /// whatever could change a lookup's answer (adding a header-free range cannot).
    generation: u64,
}

impl ImageCache {
    /// An empty cache whose scans look at most `scan_limit` bytes below a PC.
    pub fn new(scan_limit: u64) -> Self {
        ImageCache {
            scan_limit,
            images: Vec::new(),
            misses: Vec::new(),
            lookups: 0,
            walk: 0,
            found: Vec::new(),
            memo: [Memo {
                space: 0,
                page: 0,
                generation: u64::MAX,
                image: None,
            }; MEMO],
            generation: 0,
        }
    }

    /// The images scans found since the last call, each with its address-space key: what a
    /// caller records as the guest's modules. Re-validated hits are not reported again; an
    /// image replaced by another at the same place is.
    pub fn take_found(&mut self) -> Vec<(u64, Image)> {
        std::mem::take(&mut self.found)
    }

    /// Starts a walk: images are checked again on their first use after this.
    pub fn begin_walk(&mut self) {
        self.walk += 1;
    }

    /// The image holding `pc` in the address space `cr3` (its page-table root; PCID bits are
    /// ignored), or None if no header lies within the scan limit below it.
    pub fn find<M: Memory + ?Sized>(&mut self, mem: &mut M, cr3: u64, pc: u64) -> Option<Image> {
        let space = space_of(cr3, pc);
        self.lookups += 1;
        if self.lookups >= MISS_LIFETIME {
            self.lookups = 0;
            self.misses.clear();
            self.generation += 1;
        }
        let page = pc & !(PAGE - 1);
        let slot = memo_slot(space, page);
        let m = self.memo[slot];
        if m.generation == self.generation && (m.space, m.page) == (space, page) {
            match m.image {
                None => return None,
                Some(i) => {
                    let (_, cached, checked) = self.images[i];
                    if checked == self.walk && cached.contains(pc) {
                        return Some(cached);
                    }
                }
            }
        }
        let (found, whole_page) = self.find_uncached(&mut &mut *mem, space, pc);
        if found.is_some() || whole_page {
            self.memo[slot] = Memo {
                space,
                page,
                generation: self.generation,
                image: found,
            };
        }
        found.map(|i| self.images[i].1)
    }

    /// [`ImageCache::find`] without the memo of pages: the image's place in `images`, and
    /// for no image, whether the answer holds for the whole page (no image and no header
    /// found ends inside it: a hostile guest's image may end mid-page). Out of line, so that
    /// the remembered pages' path stays small.
    #[cold]
    #[inline(never)]
    fn find_uncached(
        &mut self,
        mem: &mut dyn Memory,
        space: u64,
        pc: u64,
    ) -> (Option<usize>, bool) {
        if let Some(i) = self
            .images
            .iter()
            .position(|(s, im, _)| *s == space && im.contains(pc))
        {
            let (_, cached, checked) = self.images[i];
            if checked == self.walk || Image::read(mem, cached.base).ok() == Some(cached) {
                self.images[i].2 = self.walk;
                return (Some(i), false);
            }
            self.images.remove(i);
            self.generation += 1;
        }
        let header = self.scan(mem, space, pc);
        if let Some(image) = header.filter(|h| h.contains(pc)) {
            if self.images.len() == MAX_IMAGES {
                self.images.remove(0);
            }
            self.images.push((space, image, self.walk));
            self.generation += 1;
            if self.found.len() < MAX_FOUND {
                self.found.push((space, image));
            }
            return (Some(self.images.len() - 1), false);
        }
        let page = pc & !(PAGE - 1);
        let ends_below = |im: &Image| im.base.saturating_add(u64::from(im.size)) <= page;
        let whole_page = header.is_none_or(|h| ends_below(&h))
            && self.images.iter().all(|(s, im, _)| {
                *s != space || ends_below(im) || im.base >= page.saturating_add(PAGE)
            });
        (None, whole_page)
    }

    /// Scans down from `pc`'s page, jumping over ranges known to hold no header and over
    /// ranges the page tables leave unmapped as a whole: the first header found, whether or
    /// not its image reaches `pc`.
    fn scan(&mut self, mem: &mut dyn Memory, space: u64, pc: u64) -> Option<Image> {
        let top = pc & !(PAGE - 1);
        let floor = top.saturating_sub(self.scan_limit);
        let mut page = top;
        let mut header = None;
        let mut probed = false;
        while page >= floor {
            if let Some(&(_, first, _)) = self
                .misses
                .iter()
                .find(|(s, first, last)| *s == space && (*first..=*last).contains(&page))
            {
                match first.checked_sub(PAGE) {
                    Some(below) => page = below,
                    None => break,
                }
                continue;
            }
            probed = true;
            if let Ok(image) = Image::read(mem, page) {
                header = Some(image);
                break;
            }
            // An unmapped page may lie in a range the page tables leave unmapped as a whole
            // (a missing page directory: 2 MiB, or more): no header anywhere in it.
            if let Some((start, _)) = mem.hole(page) {
                page = page.min(start);
            }
            match page.checked_sub(PAGE) {
                Some(below) => page = below,
                None => break,
            }
        }
        // Every page above the header (or down to the floor) is now known to hold none; if
        // every page was known already, there is nothing to add.
        let first = header.map_or(floor, |h| h.base + PAGE);
        if probed && first <= top {
            self.remember_miss(space, first, top);
        }
        header
    }

    fn remember_miss(&mut self, space: u64, first: u64, last: u64) {
        if self.misses.len() == MAX_MISSES {
            self.misses.clear();
            self.generation += 1;
        }
        self.misses.push((space, first, last));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testimage::ImageBuilder;
    use crate::Regions;

    #[test]
    fn finds_the_image_below_and_remembers_it() {
        let base = 0x7ff6_0000_0000;
        let mem = ImageBuilder::new(0x3000).build();
        let mut mem = Regions::new().with(base, mem);
        let mut cache = ImageCache::new(0x10_0000);
        let im = cache.find(&mut mem, 0x1000, base + 0x2345).unwrap();
        assert_eq!((im.base, im.size), (base, 0x3000));
        // Past the image's end there is none; both scans remember the pages above the header.
        assert_eq!(cache.find(&mut mem, 0x1000, base + 0x3010), None);
        assert_eq!(
            cache.misses,
            [
                (0x1000, base + 0x1000, base + 0x2000),
                (0x1000, base + 0x1000, base + 0x3000)
            ]
        );
        // Another address space does not see it.
        assert_eq!(
            cache.find(&mut mem, 0x2000, base + 0x1000).map(|i| i.base),
            Some(base)
        );
        assert_eq!(cache.images.len(), 2);
    }

    #[test]
    fn new_images_are_reported_once() {
        let base = 0x1_4000_0000;
        let mut mem = Regions::new().with(base, ImageBuilder::new(0x2000).build());
        let mut cache = ImageCache::new(0x10_0000);
        for _ in 0..3 {
            cache.begin_walk();
            assert!(cache.find(&mut mem, 0x5003, base + 0x10).is_some());
        }
        let found = cache.take_found();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].0, found[0].1.base), (0x5000, base));
        assert!(cache.take_found().is_empty());
        assert_eq!(space_of(0x5003, 0xffff_8000_0000_0000), KERNEL_SPACE);
    }

    #[test]
    fn a_replaced_image_is_noticed() {
        let base = 0x1_4000_0000;
        let mut mem = Regions::new().with(base, ImageBuilder::new(0x2000).build());
        let mut cache = ImageCache::new(0x10_0000);
        assert!(cache.find(&mut mem, 0, base + 0x1800).is_some());
        // The guest unmaps it: within a walk the image stays (the guest is stopped), in the
        // next walk the cached copy is not trusted.
        let mut gone = Regions::new().with(base, vec![0; 0x2000]);
        assert!(cache.find(&mut gone, 0, base + 0x1800).is_some());
        cache.begin_walk();
        assert_eq!(cache.find(&mut gone, 0, base + 0x1800), None);
        assert!(cache.images.is_empty());
    }

    /// Counts reads, to show which lookups touch guest memory.
    struct Counting(Regions, usize);

    impl Memory for Counting {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), crate::Unreadable> {
            self.1 += 1;
            self.0.read(addr, buf)
        }
    }

    /// A PC far above the nearest image, over ranges the page tables leave unmapped as a
    /// whole: the scan steps over each missing page table in one probe, and still finds the
    /// header (or knows there is none) exactly as a page-by-page scan would.
    #[test]
    fn a_scan_steps_over_unmapped_page_tables() {
        use crate::testguest::{Counting, PhysMem};
        let mut phys = PhysMem::new(1 << 20);
        let cr3 = phys.new_root(None);
        let base = 0x4000_0000u64;
        let image = ImageBuilder::new(0x2000).build();
        phys.write(cr3, base, &image);
        // A lone page 40 MiB above the image: 19 empty page directories entries between.
        let pc = base + (40 << 20) + 0x123;
        phys.write(cr3, pc & !0xfff, &[0x90; 16]);
        let mut mem = Counting {
            inner: phys.space(cr3),
            reads: 0,
        };
        let mut cache = ImageCache::new(64 << 20);
        assert_eq!(
            cache.find(&mut mem, cr3, pc),
            None,
            "the image ends far below"
        );
        assert_eq!(cache.misses, vec![(cr3, base + 0x1000, pc & !0xfff)]);
        // Page by page this is 10,241 probes; with the holes, the PC's page, one probe for each
        // of the 19 empty 2 MiB ranges below it, then the image's own 2 MiB range page by page
        // (its page table exists: each missing page is a 4 KiB hole) down to the header.
        assert!(
            mem.reads <= 512 + 19 + 8,
            "{} reads for a scan over 40 MiB of mostly unmapped space",
            mem.reads
        );
        // And an address in the image's own page is found.
        assert_eq!(
            cache.find(&mut mem, cr3, base + 0x10).map(|i| i.base),
            Some(base)
        );
    }

    #[test]
    fn a_scan_stops_at_its_limit_and_is_not_repeated() {
        let mut mem = Counting(Regions::new(), 0);
        let mut cache = ImageCache::new(0x4000);
        assert_eq!(cache.find(&mut mem, 0, 0x10_0000), None);
        assert_eq!(mem.1, 5, "pages 0x100000 down to 0xfc000, one read each");
        assert_eq!(cache.misses, vec![(0, 0xf_c000, 0x10_0000)]);
        for _ in 0..10 {
            assert_eq!(cache.find(&mut mem, 0, 0x10_0800), None);
        }
        assert_eq!(mem.1, 5, "a remembered miss reads nothing");
        assert_eq!(cache.misses.len(), 1, "and adds nothing");
    }

    #[test]
    fn a_page_where_an_image_ends_is_answered_per_address() {
        // A hostile header: SizeOfImage ends mid-page.
        let base = 0x1_4000_0000;
        let mut mem = Regions::new().with(base, ImageBuilder::new(0x1800).build());
        let mut cache = ImageCache::new(0x10_0000);
        for _ in 0..2 {
            cache.begin_walk();
            assert_eq!(cache.find(&mut mem, 0, base + 0x1900), None);
            assert_eq!(
                cache.find(&mut mem, 0, base + 0x1700).map(|i| i.base),
                Some(base)
            );
            assert_eq!(cache.find(&mut mem, 0, base + 0x1900), None);
        }
    }

    #[test]
    fn remembered_pages_cost_no_reads_until_the_next_walk() {
        let base = 0x1_4000_0000;
        let mut mem = Counting(
            Regions::new().with(base, ImageBuilder::new(0x2000).build()),
            0,
        );
        let mut cache = ImageCache::new(0x4000);
        cache.begin_walk();
        assert!(cache.find(&mut mem, 0, base + 0x1010).is_some());
        assert_eq!(cache.find(&mut mem, 0, base + 0x5010), None);
        let reads = mem.1;
        for _ in 0..10 {
            assert!(cache.find(&mut mem, 0, base + 0x1020).is_some());
            assert_eq!(cache.find(&mut mem, 0, base + 0x5020), None);
        }
        assert_eq!(
            mem.1, reads,
            "within a walk, a page looked up before reads nothing"
        );
        // The next walk checks the image's headers again, once.
        cache.begin_walk();
        assert!(cache.find(&mut mem, 0, base + 0x1030).is_some());
        assert!(cache.find(&mut mem, 0, base + 0x1040).is_some());
        assert!(mem.1 > reads);
    }

    #[test]
    fn the_kernel_half_is_one_space() {
        let k = 0xffff_f800_0000_0000;
        let mut mem = Regions::new().with(k, ImageBuilder::new(0x2000).build());
        let mut cache = ImageCache::new(0x4000);
        assert!(cache.find(&mut mem, 0x1000, k + 8).is_some());
        assert!(cache.find(&mut mem, 0x9000, k + 8).is_some());
        assert_eq!(cache.images.len(), 1);
    }

    #[test]
    fn an_image_mapped_where_none_was_is_found_once_misses_expire() {
        let mut cache = ImageCache::new(0x4000);
        assert_eq!(cache.find(&mut Regions::new(), 0, 0x10_0000), None);
        let mut mem = Regions::new().with(0xf_e000, ImageBuilder::new(0x4000).build());
        let mut found = 0;
        for _ in 0..=MISS_LIFETIME {
            found += usize::from(cache.find(&mut mem, 0, 0x10_0000).is_some());
        }
        assert!(found > 0 && found < MISS_LIFETIME as usize);
    }
}
