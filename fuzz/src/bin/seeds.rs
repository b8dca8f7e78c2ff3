//! Writes seed inputs for the fuzz targets whose interesting paths take a long script to
//! reach (a driver setting a virtio queue up, a firmware DMA transfer): `seeds DIR` writes
//! them under `DIR/<target>/`. fuzz/run.sh calls it before fuzzing.

use std::path::Path;

use hvprof_fuzz::platform::Script;

/// The virtio-blk disk the target attaches first: bus 0, slot 2, function 0.
const DEVFN: u32 = 2 << 3;
/// Where the scripts place its 64-bit BAR 0.
const BAR: u64 = 0xc000_0000;
const COMMON: u64 = BAR;
const NOTIFY: u64 = BAR + 0x3000;
const DESC: u32 = 0x1000;
const AVAIL: u32 = 0x2000;
const USED: u32 = 0x3000;
const FW_CFG: u16 = 0x510;
const PFLASH: u64 = 0xffc0_0000;

fn config_address(reg: u32) -> u32 {
    0x8000_0000 | DEVFN << 8 | reg
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

/// A driver's initialisation (virtio 1.2, 3.1.1) with one queue of 8 entries.
fn driver_init(s: &mut Script) {
    s.write(COMMON + 0x14, 1, 0)
        .write(COMMON + 0x14, 1, 3)
        .write(COMMON, 4, 1)
        .read(COMMON + 4, 4)
        .write(COMMON + 8, 4, 1)
        .write(COMMON + 0xc, 4, 1)
        .write(COMMON + 8, 4, 0)
        .write(COMMON + 0xc, 4, 1 << 9)
        .write(COMMON + 0x14, 1, 0xb)
        .read(COMMON + 0x14, 1)
        .write(COMMON + 0x16, 2, 0)
        .write(COMMON + 0x18, 2, 8)
        .write(COMMON + 0x20, 8, u64::from(DESC))
        .write(COMMON + 0x28, 8, u64::from(AVAIL))
        .write(COMMON + 0x30, 8, u64::from(USED))
        .write(COMMON + 0x1c, 2, 1)
        .write(COMMON + 0x14, 1, 0xf);
}

fn descriptor(addr: u64, len: u32, flags: u16, next: u16) -> Vec<u8> {
    let mut d = addr.to_le_bytes().to_vec();
    d.extend_from_slice(&len.to_le_bytes());
    d.extend_from_slice(&flags.to_le_bytes());
    d.extend_from_slice(&next.to_le_bytes());
    d
}

/// Request `n` (0-based) of `kind` on `sector`: header, data (for IN and OUT), status; made
/// available as entry `n` of the avail ring, then notified.
fn request(s: &mut Script, n: u16, kind: u32, sector: u64) {
    const NEXT: u16 = 1;
    const WRITE: u16 = 2;
    let base = 0x10000 + u32::from(n) * 0x1000;
    let mut header = kind.to_le_bytes().to_vec();
    header.extend_from_slice(&[0; 4]);
    header.extend_from_slice(&sector.to_le_bytes());
    s.store(base, &header);
    let first = n * 3;
    let mut table = descriptor(u64::from(base), 16, NEXT, first + 1);
    let data_flags = if kind == 0 { NEXT | WRITE } else { NEXT };
    if kind == 4 {
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
    s.store(DESC + u32::from(first) * 16, &table);
    // The avail ring: flags, idx = n + 1, then entries 0..=n (request k's chain starts at
    // descriptor 3k).
    let mut avail = vec![0, 0];
    avail.extend_from_slice(&(n + 1).to_le_bytes());
    for k in 0..=n {
        avail.extend_from_slice(&(k * 3).to_le_bytes());
    }
    s.store(AVAIL, &avail);
    s.write(NOTIFY, 2, 0).turn();
}

fn virtio(ioeventfd: bool) -> Vec<u8> {
    // Flags: bit 0 makes the route refuse eventfds (notifications exit instead).
    let mut s = Script(vec![u8::from(!ioeventfd)]);
    place_bar(&mut s);
    driver_init(&mut s);
    request(&mut s, 0, 0, 1); // IN
    request(&mut s, 1, 1, 2); // OUT
    request(&mut s, 2, 4, 0); // FLUSH
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

fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "corpus".into());
    let seeds: [(&str, &str, Vec<u8>); 4] = [
        ("platform_io", "virtio-ioeventfd", virtio(true)),
        ("platform_io", "virtio-exits", virtio(false)),
        ("platform_io", "fw_cfg", fw_cfg()),
        ("platform_io", "pflash", pflash()),
    ];
    for (target, name, bytes) in seeds {
        let at = Path::new(&dir).join(target);
        std::fs::create_dir_all(&at)?;
        std::fs::write(at.join(format!("seed-{name}")), bytes)?;
    }
    Ok(())
}
