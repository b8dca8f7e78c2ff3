//! Writes seed inputs for the fuzz targets whose interesting paths take a long script or a
//! well-formed file to reach (a driver setting a virtio queue up, a firmware DMA transfer, a
//! bootable kernel): `seeds DIR` writes them under `DIR/<target>/`. fuzz/run.sh calls it
//! before fuzzing.

use std::path::Path;

use devices::pci::devfn;
use devices::pci::root::FIRST_DEVICE_SLOT;
use devices::virtio::block::request::{VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};
use devices::virtio::block::VIRTIO_BLK_F_FLUSH;
use devices::virtio::pci::NOTIFY_OFFSET;
use devices::virtio::{
    STATUS_ACKNOWLEDGE, STATUS_DRIVER, STATUS_DRIVER_OK, STATUS_FEATURES_OK,
    VIRTIO_F_INDIRECT_DESC, VIRTIO_F_RING_EVENT_IDX, VIRTIO_F_VERSION_1,
};
use hvprof_fuzz::platform::{Script, VARS_BASE};
use vmm::layout::FW_CFG_PORT;

/// Where the scripts place the virtio-blk disk's 64-bit BAR 0 (the common configuration is
/// at its start).
const BAR: u64 = 0xc000_0000;
const COMMON: u64 = BAR;
const NOTIFY: u64 = BAR + NOTIFY_OFFSET;
const DESC: u32 = 0x1000;
const AVAIL: u32 = 0x2000;
const USED: u32 = 0x3000;
const FW_CFG: u16 = FW_CFG_PORT as u16;
const PFLASH: u64 = VARS_BASE;

/// CONFIG_ADDRESS for register `reg` of the disk the target attaches first (the first free
/// slot, function 0).
fn config_address(reg: u32) -> u32 {
    0x8000_0000 | u32::from(devfn(FIRST_DEVICE_SLOT, 0)) << 8 | reg
}

/// Firmware placing BAR 0 and turning memory decoding and bus mastering on.
fn place_bar(s: &mut Script) {
    s.outp(0xcf8, 4, config_address(0x10))
        .outp(0xcfc, 4, 0xffff_ffff)
        .inp(0xcfc, 4)
        .outp(0xcfc, 4, BAR as u32 | 0xc)
        .outp(0xcf8, 4, config_address(0x14))
        .outp(0xcfc, 4, 0)
        .outp(0xcf8, 4, config_address(0x04))
        .outp(0xcfc, 2, 0x6);
}

/// A driver's initialisation (virtio 1.2, 3.1.1) with one queue of 8 entries; `ring`: it
/// also negotiates indirect descriptors and event indexes.
fn driver_init(s: &mut Script, ring: bool) {
    let ring_features = if ring {
        VIRTIO_F_INDIRECT_DESC | VIRTIO_F_RING_EVENT_IDX
    } else {
        0
    };
    let driver = u64::from(STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    let features_ok = driver | u64::from(STATUS_FEATURES_OK);
    s.write(COMMON + 0x14, 1, 0)
        .write(COMMON + 0x14, 1, driver)
        .write(COMMON, 4, 1)
        .read(COMMON + 4, 4)
        .write(COMMON + 8, 4, 1)
        .write(COMMON + 0xc, 4, VIRTIO_F_VERSION_1 >> 32)
        .write(COMMON + 8, 4, 0)
        .write(COMMON + 0xc, 4, VIRTIO_BLK_F_FLUSH | ring_features)
        .write(COMMON + 0x14, 1, features_ok)
        .read(COMMON + 0x14, 1)
        .write(COMMON + 0x16, 2, 0)
        .write(COMMON + 0x18, 2, 8)
        .write(COMMON + 0x20, 8, u64::from(DESC))
        .write(COMMON + 0x28, 8, u64::from(AVAIL))
        .write(COMMON + 0x30, 8, u64::from(USED))
        .write(COMMON + 0x1c, 2, 1)
        .write(COMMON + 0x14, 1, features_ok | u64::from(STATUS_DRIVER_OK));
}

fn descriptor(addr: u64, len: u32, flags: u16, next: u16) -> Vec<u8> {
    let mut d = addr.to_le_bytes().to_vec();
    d.extend_from_slice(&len.to_le_bytes());
    d.extend_from_slice(&flags.to_le_bytes());
    d.extend_from_slice(&next.to_le_bytes());
    d
}

/// Request `n` (0-based) of `kind` on `sector`: header, data (for IN and OUT), status; made
/// available as entry `n` of the avail ring, then notified. `ring`: the chain is an
/// indirect table that descriptor `n` names, and `used_event` asks for its interrupt.
fn request(s: &mut Script, n: u16, kind: u32, sector: u64, ring: bool) {
    const NEXT: u16 = 1;
    const WRITE: u16 = 2;
    const INDIRECT: u16 = 4;
    let base = 0x10000 + u32::from(n) * 0x1000;
    let mut header = kind.to_le_bytes().to_vec();
    header.extend_from_slice(&[0; 4]);
    header.extend_from_slice(&sector.to_le_bytes());
    s.store(base, &header);
    let first = if ring { 0 } else { n * 3 };
    let mut table = descriptor(u64::from(base), 16, NEXT, first + 1);
    let data_flags = if kind == VIRTIO_BLK_T_IN {
        NEXT | WRITE
    } else {
        NEXT
    };
    if kind == VIRTIO_BLK_T_FLUSH {
        table.extend(descriptor(u64::from(base) + 0x100, 1, WRITE, 0));
    } else {
        table.extend(descriptor(
            u64::from(base) + 0x200,
            512,
            data_flags,
            first + 2,
        ));
        table.extend(descriptor(u64::from(base) + 0x100, 1, WRITE, 0));
    }
    let stride = if ring {
        let len = u32::try_from(table.len()).unwrap_or(0);
        s.store(base + 0x400, &table);
        let head = descriptor(u64::from(base) + 0x400, len, INDIRECT, 0);
        s.store(DESC + u32::from(n) * 16, &head);
        1
    } else {
        s.store(DESC + u32::from(first) * 16, &table);
        3
    };
    // The avail ring: flags, idx = n + 1, then entries 0..=n (request k's chain starts at
    // descriptor 3k, or k with indirect tables), then used_event = n.
    let mut avail = vec![0, 0];
    avail.extend_from_slice(&(n + 1).to_le_bytes());
    for k in 0..8 {
        avail.extend_from_slice(&(if k <= n { k * stride } else { 0 }).to_le_bytes());
    }
    avail.extend_from_slice(&n.to_le_bytes());
    s.store(AVAIL, &avail);
    s.write(NOTIFY, 2, 0).turn();
}

/// A driver's three requests, by ioeventfd or by exits; `ring`: in indirect tables, with
/// event indexes.
fn virtio(ioeventfd: bool, ring: bool) -> Vec<u8> {
    // Flags: bit 0 makes the route refuse eventfds (notifications exit instead).
    let mut s = Script(vec![u8::from(!ioeventfd)]);
    place_bar(&mut s);
    driver_init(&mut s, ring);
    request(&mut s, 0, VIRTIO_BLK_T_IN, 1, ring);
    request(&mut s, 1, VIRTIO_BLK_T_OUT, 2, ring);
    request(&mut s, 2, VIRTIO_BLK_T_FLUSH, 0, ring);
    s.read(BAR + 0x1000, 1).serve();
    // Firmware moving the BAR, then turning decoding off.
    s.outp(0xcf8, 4, config_address(0x10))
        .outp(0xcfc, 4, (BAR + 0x10_0000) as u32 | 0xc)
        .write(NOTIFY + 0x10_0000, 2, 0)
        .turn()
        .outp(0xcf8, 4, config_address(0x04))
        .outp(0xcfc, 2, 0);
    s.0
}

/// fw_cfg: the signature through the data port, then the file directory by DMA.
fn fw_cfg() -> Vec<u8> {
    let mut s = Script(vec![0]);
    s.outp(FW_CFG, 2, 0).inp(FW_CFG + 1, 1).inp(FW_CFG + 1, 1);
    let mut block = (0x19u32 << 16 | 1 << 3 | 1 << 1).to_be_bytes().to_vec();
    block.extend_from_slice(&64u32.to_be_bytes());
    block.extend_from_slice(&0x9000u64.to_be_bytes());
    s.store(0x8000, &block).outp(FW_CFG + 4, 4, 0).outp(
        FW_CFG + 8,
        4,
        u32::from_be_bytes(0x8000u32.to_le_bytes()),
    );
    s.0
}

/// pflash: OVMF's detection, a program, a block erase, the CFI query.
fn pflash() -> Vec<u8> {
    let mut s = Script(vec![0]);
    s.write(PFLASH, 1, 0x50)
        .write(PFLASH, 1, 0x70)
        .read(PFLASH, 1)
        .write(PFLASH + 0x10, 1, 0x40)
        .write(PFLASH + 0x10, 1, 0x5a)
        .write(PFLASH, 1, 0xff)
        .read(PFLASH + 0x10, 1)
        .write(PFLASH + 0x1000, 1, 0x20)
        .write(PFLASH + 0x1000, 1, 0xd0)
        .write(PFLASH, 1, 0x98)
        .read(PFLASH + 0x10, 1)
        .write(PFLASH, 1, 0xff);
    s.0
}

/// A Linux bzImage of one setup sector and 2 KiB of "kernel": boot protocol 2.15, 64-bit
/// entry, loaded high. The kernel_load target's input starts with a byte saying how much of
/// the tail is an initrd (0: none).
fn bzimage() -> Vec<u8> {
    let mut f = vec![0u8; 0xc00];
    f[0x1f1] = 1; // setup_sects: the kernel starts at 2 x 512
                  // syssize: the kernel's 0x7e0 bytes (in 16-byte units) before the initrd's 32.
    f[0x1f4..0x1f8].copy_from_slice(&0x7eu32.to_le_bytes());
    f[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
    f[0x202..0x206].copy_from_slice(b"HdrS");
    f[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    f[0x211] = 1; // loadflags: LOADED_HIGH
    f[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes()); // code32_start
    f[0x22c..0x230].copy_from_slice(&0x37ff_ffffu32.to_le_bytes()); // initrd_addr_max
    f[0x236..0x238].copy_from_slice(&1u16.to_le_bytes()); // xloadflags: KERNEL_64
    let mut input = vec![0x82]; // the last 32 bytes are an initrd
    input.extend(f);
    input
}

/// An ELF64 executable with one PT_LOAD of 64 bytes at 1 MiB and a PT_NOTE holding the Xen
/// PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY = 18).
fn pvh_elf() -> Vec<u8> {
    const EHDR: usize = 64;
    const PHDR: usize = 56;
    let note_at = EHDR + 2 * PHDR;
    let mut note = Vec::new();
    note.extend_from_slice(&4u32.to_le_bytes()); // namesz ("Xen\0")
    note.extend_from_slice(&4u32.to_le_bytes()); // descsz
    note.extend_from_slice(&18u32.to_le_bytes());
    note.extend_from_slice(b"Xen\0");
    note.extend_from_slice(&0x10_0000u32.to_le_bytes());
    let code_at = note_at + note.len();
    let mut f = vec![0u8; EHDR];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4] = 2; // 64-bit
    f[5] = 1; // little-endian
    f[6] = 1;
    f[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    f[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    f[20..24].copy_from_slice(&1u32.to_le_bytes());
    f[24..32].copy_from_slice(&0x10_0000u64.to_le_bytes()); // e_entry
    f[32..40].copy_from_slice(&(EHDR as u64).to_le_bytes()); // e_phoff
    f[52..54].copy_from_slice(&(EHDR as u16).to_le_bytes());
    f[54..56].copy_from_slice(&(PHDR as u16).to_le_bytes());
    f[56..58].copy_from_slice(&2u16.to_le_bytes()); // e_phnum
    let phdr = |kind: u32, flags: u32, offset: usize, addr: u64, size: usize| {
        let mut p = Vec::new();
        p.extend_from_slice(&kind.to_le_bytes());
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&(offset as u64).to_le_bytes());
        p.extend_from_slice(&addr.to_le_bytes());
        p.extend_from_slice(&addr.to_le_bytes());
        p.extend_from_slice(&(size as u64).to_le_bytes());
        p.extend_from_slice(&(size as u64).to_le_bytes());
        p.extend_from_slice(&4u64.to_le_bytes());
        p
    };
    f.extend(phdr(1, 5, code_at, 0x10_0000, 64)); // PT_LOAD, R+X
    f.extend(phdr(4, 4, note_at, 0, note.len())); // PT_NOTE
    f.extend(note);
    f.extend([0xf4; 64]); // hlt
    let mut input = vec![0];
    input.extend(f);
    input
}

/// A stack_walk input whose shaped image has two functions (a prologue of PUSH_NONVOL and
/// ALLOC_SMALL with an epilogue, and a machine frame) and a stack that passes through both
/// into frame-pointer code.
fn pe_frames() -> Vec<u8> {
    let image_len: u16 = 0x800;
    let mut v = vec![0u8; 12];
    v[..2].copy_from_slice(&image_len.to_le_bytes());
    v[2] = 1; // shape the headers
    v[3] = 2; // two RUNTIME_FUNCTIONs
    v[4..6].copy_from_slice(&0x410u16.to_le_bytes()); // RIP in the first function's body
    v[7] = 0x10; // RBP = STACK + 0x80
    v[8] = 64; // depth
    let mut image = vec![0u8; usize::from(image_len)];
    let mut put = |at: usize, b: &[u8]| image[at..at + b.len()].copy_from_slice(b);
    for (i, f) in [[0x400u32, 0x480, 0x600], [0x500, 0x580, 0x620]]
        .iter()
        .enumerate()
    {
        let entry: Vec<u8> = f.iter().flat_map(|x| x.to_le_bytes()).collect();
        put(0x150 + 12 * i, &entry);
    }
    put(0x600, &[1, 5, 2, 0, 5, 0x32, 1, 0x30]); // sub rsp, 0x20 (5); push rbx (1)
    put(0x620, &[1, 0, 1, 0, 0, 0x0a, 0, 0]); // PUSH_MACHFRAME
    put(0x440, &[0x48, 0x83, 0xc4, 0x20, 0x5b, 0xc3]); // add rsp, 0x20; pop rbx; ret
    v.extend(image);
    let base = 0x1000u64;
    let stack = 0x10_0000u64;
    let words = [
        0,
        0,
        0,
        0,
        0xb0b,
        base + 0x505,
        base + 0x9000,
        0x33,
        0x202,
        stack + 0x70,
    ];
    v.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    v.extend([0u8; 0x20]);
    v.extend([0u64, 0x4000_1234].iter().flat_map(|w| w.to_le_bytes()));
    v
}

/// A pe_image input whose shaped image has an export name, a CodeView record and one
/// RUNTIME_FUNCTION (an x86 image, `pe32`, has the same but the function).
fn pe_image(pe32: bool) -> Vec<u8> {
    let mut v = vec![0u8; 16];
    v[0] = if pe32 { 3 } else { 1 }; // shape the headers
    v[1..7].copy_from_slice(&[22, 10, 6, 3, 54, 7]); // exports 0x200, exceptions 0x180, debug 0x300
    v[8..10].copy_from_slice(&0x404u16.to_le_bytes()); // a PC inside the function
    let mut image = vec![0u8; 0x800];
    let mut put = |at: usize, b: &[u8]| image[at..at + b.len()].copy_from_slice(b);
    put(0x200 + 12, &0x280u32.to_le_bytes());
    put(0x280, b"seed.dll\0");
    put(0x300 + 12, &2u32.to_le_bytes()); // CODEVIEW
    put(0x300 + 16, &0x30u32.to_le_bytes());
    put(0x300 + 20, &0x340u32.to_le_bytes());
    put(0x340, b"RSDS");
    put(0x344, &[7; 16]);
    put(0x354, &1u32.to_le_bytes());
    put(0x358, b"x\\seed.pdb\0");
    for (i, x) in [0x400u32, 0x410, 0x500].iter().enumerate() {
        put(0x180 + 4 * i, &x.to_le_bytes());
    }
    put(0x500, &[1, 0, 0, 0]);
    v.extend(image);
    v
}

/// An nt_modules input: a list head and three KLDR_DATA_TABLE_ENTRYs linked in a circle,
/// each with a BaseDllName and a FullDllName.
fn nt_modules() -> Vec<u8> {
    const POOL: u64 = 0xffff_a000_0000_0000;
    let mut v = vec![0u8; 0x340];
    let mut put = |at: usize, b: &[u8]| v[at..at + b.len()].copy_from_slice(b);
    let entries = [0x40u64, 0x140, 0x240];
    put(0, &(POOL + entries[0]).to_le_bytes());
    put(8, &(POOL + entries[2]).to_le_bytes());
    for (i, name) in ["ntoskrnl.exe", "hal.dll", "seed.sys"].iter().enumerate() {
        let at = entries[i];
        let next = entries.get(i + 1).map_or(POOL, |n| POOL + n);
        let prev = if i == 0 { POOL } else { POOL + entries[i - 1] };
        let e = usize::try_from(at).unwrap_or(0);
        put(e, &next.to_le_bytes());
        put(e + 8, &prev.to_le_bytes());
        put(
            e + 0x30,
            &(0xffff_f800_0000_0000u64 + 0x10_0000 * at).to_le_bytes(),
        );
        put(e + 0x40, &0x8000u32.to_le_bytes());
        let utf16: Vec<u8> = name.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let len = u16::try_from(utf16.len()).unwrap_or(0).to_le_bytes();
        for field in [0x48, 0x58] {
            put(e + field, &len);
            put(e + field + 8, &(POOL + at + 0x70).to_le_bytes());
        }
        put(e + 0x70, &utf16);
    }
    v
}

/// A consistent profile.json for `profile_json`: a guest object with per-function totals and
/// a whole-space host profile (`buckets` past 2^53, as a string) with call stacks.
const PROFILE_JSON: &str = r#"{"format":"hvprof-profile","format_version":3,"hvprof_version":"0.1.0","run":{"kernel":"refguest (built in)","cmdline":"scenario=shares","protocol":"PVH","vcpus":1,"memory_mib":256,"start_time":"2026-11-26T09:00:00.000Z","wall_time_s":0.5,"outcome":"guest wrote 0x10 to isa-debug-exit (status 33)","exit_status":0,"interval_100ns":10000},"vcpus":[{"vcpu":0,"samples":40,"attributed":40,"outside":0,"lost":1,"counts":70,"injected":0,"hypercalls":7}],"modules":[{"name":"refguest","kind":"elf","path":null,"base":"0x100000","size":"0x3ff01000","debug_id":null}],"objects":[{"id":1,"owner":"guest","process":null,"base":"0x40000000","size":"0x1000","bucket_shift":4,"source":0,"source_name":"ProfileTime","affinity":[0],"buckets":256,"total":30,"counts":[["0x0",5],["0x4",10],["0x8",15]],"functions":[{"module":"refguest","name":"shares_f4","samples":15},{"module":"refguest","name":"shares_f2","samples":10},{"module":"refguest","name":"shares_f1","samples":5}]},{"id":1,"owner":"host","process":null,"base":"0x0","size":"0xffffffffffffffff","bucket_shift":4,"source":0,"source_name":"ProfileTime","affinity":[0],"buckets":"0x1000000000000000","total":40,"counts":[["0x10000",10],["0x4000000",30]],"functions":[],"stacks":[{"pcs":["0x40000080","0x100010"],"truncated":false,"count":30},{"pcs":["0x100000"],"truncated":true,"count":9}],"stacks_dropped":1}]}"#;

/// The header `qemu-img create -f qcow2 IMG 64M` writes (version 3, 64 KiB clusters, the
/// refcount table at 0x10000, a one-entry L1 table at 0x30000), then the file's length
/// (0x30008) as the qcow2_header target's last 8 bytes.
fn qcow2_header() -> Vec<u8> {
    let mut h = vec![0u8; 112];
    let mut put = |at: usize, b: &[u8]| h[at..at + b.len()].copy_from_slice(b);
    put(0, b"QFI\xfb");
    put(4, &3u32.to_be_bytes());
    put(20, &16u32.to_be_bytes()); // cluster_bits
    put(24, &(64u64 << 20).to_be_bytes()); // size
    put(36, &1u32.to_be_bytes()); // l1_size
    put(40, &0x30000u64.to_be_bytes()); // l1_table_offset
    put(48, &0x10000u64.to_be_bytes()); // refcount_table_offset
    put(56, &1u32.to_be_bytes()); // refcount_table_clusters
    put(96, &4u32.to_be_bytes()); // refcount_order
    put(100, &112u32.to_be_bytes()); // header_length
    h.extend(0x30008u64.to_be_bytes());
    h
}

/// A whole 4 KiB qcow2 image of 512-byte clusters, for the qcow2_refcounts target: the
/// header (cluster 0), the refcount table (cluster 1: one entry, the block at cluster 2), the
/// refcount block (16-bit counts of 1 for clusters 0-3) and a one-entry L1 table (cluster 3)
/// for a 32 KiB disk.
fn qcow2_small() -> Vec<u8> {
    let mut f = vec![0u8; 4096];
    let mut put = |at: usize, b: &[u8]| f[at..at + b.len()].copy_from_slice(b);
    put(0, b"QFI\xfb");
    put(4, &3u32.to_be_bytes());
    put(20, &9u32.to_be_bytes()); // cluster_bits
    put(24, &(32u64 << 10).to_be_bytes()); // size
    put(36, &1u32.to_be_bytes()); // l1_size
    put(40, &0x600u64.to_be_bytes()); // l1_table_offset
    put(48, &0x200u64.to_be_bytes()); // refcount_table_offset
    put(56, &1u32.to_be_bytes()); // refcount_table_clusters
    put(96, &4u32.to_be_bytes()); // refcount_order
    put(100, &112u32.to_be_bytes()); // header_length
    put(0x200, &0x400u64.to_be_bytes());
    for c in 0..4 {
        put(0x400 + 2 * c, &1u16.to_be_bytes());
    }
    f
}

/// A newc archive with a file, links in a path and at its end, a link to itself and a hard
/// link, as the initramfs target reads it.
fn initramfs() -> Vec<u8> {
    let mut out = Vec::new();
    let mut entry = |name: &str, mode: u32, data: &[u8], ino: u32, nlink: u32| {
        report::symbols::guest_files::initrd::push_entry(&mut out, name, mode, data, ino, nlink);
    };
    entry("bin", 0o040_755, b"", 1, 2);
    entry("bin/prog", 0o100_755, b"\x7fELF", 2, 1);
    entry("lib", 0o120_777, b"usr/lib", 3, 1);
    entry("usr/lib/libc.so.6", 0o100_755, b"libc", 4, 2);
    entry("usr/lib/libc-2.36.so", 0o100_755, b"", 4, 2);
    entry("loop", 0o120_777, b"loop", 5, 1);
    entry("TRAILER!!!", 0, b"", 0, 1);
    out.resize(out.len().next_multiple_of(512), 0);
    out
}

/// A small ext4 file system made by mke2fs (`/bin/prog`, links `/lib` -> `usr/lib` and
/// `/loop` -> itself): the report crate's test image.
const EXT4_LINKS: &[u8] = include_bytes!("../../../vmm/report/testdata/ext4-links.img");

/// [`EXT4_LINKS`] behind an MBR (`gpt` false) or a GPT with its protective MBR: the partition
/// starts at LBA 34.
fn partitioned(gpt: bool) -> Vec<u8> {
    let fs = EXT4_LINKS;
    let mut out = vec![0u8; 34 * 512];
    let mbr = 446;
    out[mbr + 4] = if gpt { 0xee } else { 0x83 };
    out[mbr + 8..mbr + 12].copy_from_slice(&(if gpt { 1u32 } else { 34 }).to_le_bytes());
    out[510..512].copy_from_slice(&[0x55, 0xaa]);
    if gpt {
        out[512..520].copy_from_slice(b"EFI PART");
        out[512 + 72..512 + 80].copy_from_slice(&2u64.to_le_bytes());
        out[512 + 80..512 + 84].copy_from_slice(&4u32.to_le_bytes());
        out[512 + 84..512 + 88].copy_from_slice(&128u32.to_le_bytes());
        out[1024] = 0xaf;
        out[1024 + 32..1024 + 40].copy_from_slice(&34u64.to_le_bytes());
    }
    out.extend_from_slice(fs);
    out
}

/// A small Windows ISF table (after the isf target's selector byte 0): every structure and
/// symbol the layout needs, at made-up offsets.
fn isf_windows() -> Vec<u8> {
    let ptr = r#"{"kind":"pointer","subtype":{"kind":"base","name":"void"}}"#;
    let named = |n: &str| format!(r#"{{"kind":"struct","name":"{n}"}}"#);
    let structure = |name: &str, fields: &[(&str, u32, String)]| {
        let fields: Vec<String> = fields
            .iter()
            .map(|(f, o, t)| format!(r#""{f}":{{"offset":{o},"type":{t}}}"#))
            .collect();
        format!(
            r#""{name}":{{"kind":"struct","size":256,"fields":{{{}}}}}"#,
            fields.join(",")
        )
    };
    let p = || ptr.to_string();
    let types = [
        structure(
            "_KPCR",
            &[
                ("Self", 0, p()),
                ("CurrentPrcb", 8, p()),
                ("Prcb", 16, named("_KPRCB")),
            ],
        ),
        structure("_KPRCB", &[("CurrentThread", 8, p())]),
        structure(
            "_ETHREAD",
            &[
                ("Tcb", 0, named("_KTHREAD")),
                ("Cid", 64, named("_CLIENT_ID")),
                ("CreateTime", 80, p()),
            ],
        ),
        structure(
            "_CLIENT_ID",
            &[("UniqueProcess", 0, p()), ("UniqueThread", 8, p())],
        ),
        structure("_KTHREAD", &[("Process", 32, p())]),
        structure(
            "_EPROCESS",
            &[
                ("Pcb", 0, named("_KPROCESS")),
                ("UniqueProcessId", 64, p()),
                ("CreateTime", 72, p()),
                (
                    "ImageFileName",
                    80,
                    r#"{"kind":"array","count":15,"subtype":{"kind":"base","name":"char"}}"#
                        .to_string(),
                ),
                ("ActiveProcessLinks", 96, p()),
                ("Peb", 112, p()),
            ],
        ),
        structure("_KPROCESS", &[("DirectoryTableBase", 40, p())]),
        structure("_PEB", &[("Ldr", 24, p())]),
        structure("_PEB_LDR_DATA", &[("InLoadOrderModuleList", 16, p())]),
        structure(
            "_LDR_DATA_TABLE_ENTRY",
            &[
                ("InLoadOrderLinks", 0, p()),
                ("DllBase", 48, p()),
                ("SizeOfImage", 64, p()),
                ("FullDllName", 72, p()),
                ("BaseDllName", 88, p()),
            ],
        ),
        structure("_UNICODE_STRING", &[("Length", 0, p()), ("Buffer", 8, p())]),
    ];
    let json = format!(
        r#"{{"metadata":{{"format":"6.1.0","producer":{{"name":"seeds","version":"1.0.0"}},"windows":{{"pdb":{{"GUID":"BBED7C2955FBE4522AAA23F4B8677AD9","age":1,"database":"ntkrnlmp.pdb","machine_type":34404}}}}}},"base_types":{{"pointer":{{"size":8,"signed":false,"kind":"int","endian":"little"}},"char":{{"size":1,"signed":false,"kind":"char","endian":"little"}}}},"user_types":{{{}}},"enums":{{}},"symbols":{{"PsActiveProcessHead":{{"address":4096}},"PsLoadedModuleList":{{"address":8192}}}}}}"#,
        types.join(",")
    );
    [&[0u8][..], json.as_bytes()].concat()
}

/// A BTF blob (after the guest_types target's selector byte 1) with an `int`, an `mm_struct`
/// whose `pgd` lies in an anonymous struct, and a `task_struct` with a bitfield.
fn guest_types_btf() -> Vec<u8> {
    let mut strings = b"\0int\0mm_struct\0pgd\0task_struct\0pid\0tgid\0comm\0mm\0group_leader\0flags\0start_time\0x\0".to_vec();
    let at = |s: &[u8], name: &str| -> u32 {
        let needle = [name.as_bytes(), b"\0"].concat();
        s.windows(needle.len()).position(|w| w == needle).unwrap() as u32
    };
    let mut types: Vec<u32> = Vec::new();
    // 1: int; 2: pointer to void; 3: anonymous struct { pgd }; 4: mm_struct { anon }.
    types.extend([at(&strings, "int"), 1 << 24, 4, 32]);
    types.extend([0, 2 << 24, 0]);
    types.extend([0, (4 << 24) | 1, 16, at(&strings, "pgd"), 2, 64]);
    types.extend([at(&strings, "mm_struct"), (4 << 24) | 1, 64, 0, 3, 128]);
    // 5: task_struct, kind_flag bitfields on.
    let members = [
        ("flags", 1, 0),
        ("x", 1, (1 << 24) | 35),
        ("pid", 1, 64),
        ("tgid", 1, 96),
        ("mm", 2, 128),
        ("group_leader", 2, 192),
        ("start_time", 2, 256),
        ("comm", 2, 320),
    ];
    types.extend([at(&strings, "task_struct"), (1 << 31) | (4 << 24) | 8, 64]);
    for (name, ty, off) in members {
        types.extend([at(&strings, name), ty, off]);
    }
    let types: Vec<u8> = types.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut b = vec![1u8];
    for w in [
        0x0001_eb9fu32,
        24,
        0,
        types.len() as u32,
        types.len() as u32,
        strings.len() as u32,
    ] {
        b.extend(w.to_le_bytes());
    }
    b.extend(types);
    b.append(&mut strings);
    b
}

/// A timeline.json of timeline_json's fixed profile: three samples on two vCPUs (one in
/// thread 0 with a two-frame stack), a phase, a halt and a hypercall.
const TIMELINE_JSON: &str = r#"{"format":"hvprof-timeline","format_version":1,"run_start_time":"2026-11-26T09:00:00.000Z","timelines":[{"object":1,"start_unix_ns":"0x179b2e1a2f5c8000","dropped_samples":2,"dropped_markers":0,"samples":{"t_delta_ns":[0,1000,5],"vcpu":[0,1,0],"cpl":[0,3,3],"thread":[null,0,0],"stack":[0,1,1]},"stacks":[["0x100"],["0x2040","0x1050"]],"markers":{"kind":["phase","halt","hypercall"],"vcpu":[null,1,0],"start_delta_ns":[0,10,20],"duration_ns":[2000,30,0],"name":["kernel","hlt","QUERY -> OK"]}}]}"#;

/// A guest user and a guest kernel sample, one of host time and a lost notice, as a vCPU
/// thread's ring holds them.
fn perf_records() -> Vec<u8> {
    use vmm::sampler::ring::record::{encode_lost, encode_sample};
    let mut v = encode_sample(5, 1, 0x4000_0010, 100);
    v.extend(encode_sample(4, 1, 0xffff_8000_0000_1000, 200));
    v.extend(encode_sample(1, 2, 0xffff_ffff_8100_0000, 300));
    v.extend(encode_lost(1, 3));
    v
}

/// A cfi_walk input: `.eh_frame` for three functions at 0x1000, 0x1100 (a push) and 0x1200
/// (a push), no `.eh_frame_hdr`, and a stack that goes from the first through the other two
/// to a return address of 0.
fn cfi_frames() -> Vec<u8> {
    use introspect::cfi::build::{eh_frame, Function};
    let function = |start, pushes| Function {
        start,
        len: 0x100,
        pushes,
    };
    let eh = eh_frame(
        0x4000,
        &[
            function(0x1000, false),
            function(0x1100, true),
            function(0x1200, true),
        ],
    );
    let mut v = vec![0u8; 12];
    v[..2].copy_from_slice(&u16::try_from(eh.len()).unwrap().to_le_bytes());
    v[5..7].copy_from_slice(&0x10u16.to_le_bytes()); // rip 0x1010, in the first
    v[9] = 16; // depth
    v.extend(eh);
    for word in [0x1150u64, 1, 0x1280, 2, 0] {
        v.extend(word.to_le_bytes());
    }
    v
}

/// The first bytes of an ELF64 file as a loader maps them: the header, one `PT_NOTE` program
/// header, and the notes after it (an ABI tag, then a 20-byte GNU build id).
fn elf_build_id() -> Vec<u8> {
    let note = |kind: u32, desc: &[u8]| {
        let mut n = Vec::new();
        n.extend(4u32.to_le_bytes());
        n.extend((desc.len() as u32).to_le_bytes());
        n.extend(kind.to_le_bytes());
        n.extend(b"GNU\0");
        n.extend(desc);
        n
    };
    let mut notes = note(1, &[0; 16]);
    notes.extend(note(3, &(1..=20).collect::<Vec<u8>>()));
    let mut b = vec![0u8; 0x78];
    b[..6].copy_from_slice(b"\x7fELF\x02\x01");
    b[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes()); // e_phoff
    b[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes()); // e_phentsize
    b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    b[0x40..0x44].copy_from_slice(&4u32.to_le_bytes()); // PT_NOTE
    b[0x48..0x50].copy_from_slice(&0x78u64.to_le_bytes()); // p_offset
    b[0x60..0x68].copy_from_slice(&(notes.len() as u64).to_le_bytes()); // p_filesz
    b[0x70..0x78].copy_from_slice(&4u64.to_le_bytes()); // p_align
    b.extend(notes);
    b
}

fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "corpus".into());
    let seeds: [(&str, &str, Vec<u8>); 30] = [
        ("platform_io", "virtio-ioeventfd", virtio(true, false)),
        ("platform_io", "virtio-exits", virtio(false, false)),
        ("platform_io", "virtio-ring", virtio(true, true)),
        ("platform_io", "fw_cfg", fw_cfg()),
        ("platform_io", "pflash", pflash()),
        ("kernel_load", "bzimage", bzimage()),
        ("kernel_load", "pvh-elf", pvh_elf()),
        ("kernel_elf", "pvh-elf", pvh_elf()[1..].to_vec()),
        ("stack_walk", "pe-frames", pe_frames()),
        ("cfi_walk", "three-frames", cfi_frames()),
        ("pe_image", "named", pe_image(false)),
        ("pe_image", "x86", pe_image(true)),
        ("nt_modules", "three", nt_modules()),
        // A two-level maple tree: busybox's text and data, a heap and a stack.
        (
            "linux_maps",
            "process",
            introspect::testguest::linux_maps::process().0,
        ),
        // A mapped ELF file's first page with a build id.
        ("linux_maps", "build-id", elf_build_id()),
        ("timeline_json", "phases", TIMELINE_JSON.as_bytes().to_vec()),
        (
            "profile_json",
            "two-objects",
            PROFILE_JSON.as_bytes().to_vec(),
        ),
        // Format 4: three processes, five threads, per-thread counts, stacks with threads.
        (
            "profile_json",
            "processes",
            include_bytes!("../../../vmm/report/testdata/profile-v4-processes.json").to_vec(),
        ),
        ("qcow2_header", "qemu-img", qcow2_header()),
        ("qcow2_refcounts", "small", qcow2_small()),
        ("guest_types", "btf", guest_types_btf()),
        ("isf", "windows", isf_windows()),
        ("initramfs", "links", initramfs()),
        // The first byte even: the image as it is; odd: patches over the test image.
        ("disk_image", "bare", [&[0], EXT4_LINKS].concat()),
        ("disk_image", "mbr", [vec![0], partitioned(false)].concat()),
        ("disk_image", "gpt", [vec![0], partitioned(true)].concat()),
        // Over the superblock's magic, its own bytes; and nothing.
        ("disk_image", "patch", vec![1, 0x38, 4, 0, 0, 2, 0x53, 0xef]),
        ("disk_image", "unpatched", vec![1]),
        // ELF (first byte 0) with DWARF 5 lines and inlined copies, a range list among them.
        (
            "symbol_files",
            "inline-elf",
            [
                &[0][..],
                include_bytes!("../../../vmm/report/testdata/inline.elf"),
            ]
            .concat(),
        ),
        ("perf_records", "guest-host-lost", perf_records()),
    ];
    for (target, name, bytes) in seeds {
        let at = Path::new(&dir).join(target);
        std::fs::create_dir_all(&at)?;
        std::fs::write(at.join(format!("seed-{name}")), bytes)?;
    }
    Ok(())
}
