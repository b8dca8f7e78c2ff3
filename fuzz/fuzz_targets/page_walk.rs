//! The guest page-table walker on guest memory made of fuzz bytes, with every paging mode:
//! it must never panic, and a translation must come from the bytes it was given. A hole it
//! reports contains the address, is a power of two in size and aligned to it, and neither of
//! its ends translates.
#![no_main]

use introspect::paging::{hole, translate, writable_frames, Paging, PhysRead};
use libfuzzer_sys::fuzz_target;

/// Guest RAM: the fuzz input, from guest-physical address 0.
struct Ram<'a>(&'a [u8]);

impl PhysRead for Ram<'_> {
    fn read_u64(&self, gpa: u64) -> Option<u64> {
        let at = usize::try_from(gpa).ok()?;
        Some(u64::from_le_bytes(
            self.0.get(at..at.checked_add(8)?)?.try_into().ok()?,
        ))
    }
    fn read_u32(&self, gpa: u64) -> Option<u32> {
        let at = usize::try_from(gpa).ok()?;
        Some(u32::from_le_bytes(
            self.0.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 48 {
        return;
    }
    let word = |i: usize| u64::from_le_bytes(data[i * 8..i * 8 + 8].try_into().unwrap());
    let paging = Paging {
        cr0: word(0),
        cr3: word(1) & 0xffff,
        cr4: word(2),
        efer: word(3),
    };
    let va = word(4);
    let ram = Ram(&data[48..]);
    if let Ok(t) = translate(&ram, &paging, va) {
        assert!(t.size.is_power_of_two() && t.size >= 0x1000);
    }
    if let Some((start, len)) = hole(&ram, &paging, va) {
        assert!(len.is_power_of_two() && start % len == 0);
        assert!(start <= va && va - start < len);
        assert!(translate(&ram, &paging, start).is_err());
        assert!(translate(&ram, &paging, start + (len - 1)).is_err());
    }
    let _ = writable_frames(&ram, &paging, va, word(5) & 0x3_ffff);
});
