//! The whole kernel loader on an arbitrary file (user input): the PVH, multiboot (ELF and
//! a.out kludge) and Linux bzImage paths through linux-loader, with an initrd cut from the
//! input, into 32 MiB of guest RAM. It must never panic: a file it cannot boot is an error
//! naming the file.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm::boot::{load_image, LoadContext};

const MEM: usize = 32 << 20;

fn ram() -> &'static GuestMemoryMmap {
    static RAM: OnceLock<GuestMemoryMmap> = OnceLock::new();
    RAM.get_or_init(|| GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM)]).unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else {
        return;
    };
    // The last `split * 16` bytes are the initrd when the top bit is set.
    let cut = data.len().saturating_sub(usize::from(split & 0x7f) * 16);
    let (kernel, initrd) = if split & 0x80 != 0 {
        (&data[..cut], Some((Path::new("initrd"), &data[cut..])))
    } else {
        (data, None)
    };
    let ctx = LoadContext {
        mem: ram(),
        mem_size: MEM as u64,
        path: Path::new("kernel"),
    };
    let _ = load_image(&ctx, kernel, initrd, "console=ttyS0", 0xe0000);
});
