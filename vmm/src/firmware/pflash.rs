//! A CFI (Intel/Sharp command set) parallel flash for OVMF's variable store, as QEMU's
//! pflash_cfi01 with a 1-byte device width: read array, read status, clear status, program
//! (0x10/0x40), block erase (0x20 then 0xD0 at the block), read identifier (0x90) and the CFI
//! query (0x98). Program and erase write through to the VARS file at once, so a run's UEFI
//! variables survive it even when it ends abruptly.
//!
//! The whole VARS region is MMIO: every guest access exits to hvprof. OVMF's
//! QemuFlashFvbServicesRuntimeDxe detects the flash by writing CLEAR_STATUS and READ_STATUS
//! and expecting 0x00, then programs byte by byte and erases 4 KiB blocks.

use std::fs::File;
use std::os::unix::fs::FileExt;

use devices::{BusDevice, Origin};

const CMD_READ_ARRAY: u8 = 0xff;
const CMD_READ_ARRAY_ALT: u8 = 0x00;
const CMD_PROGRAM: u8 = 0x10;
const CMD_PROGRAM_ALT: u8 = 0x40;
const CMD_BLOCK_ERASE: u8 = 0x20;
const CMD_ERASE_CONFIRM: u8 = 0xd0;
const CMD_CLEAR_STATUS: u8 = 0x50;
const CMD_READ_STATUS: u8 = 0x70;
const CMD_READ_ID: u8 = 0x90;
const CMD_CFI_QUERY: u8 = 0x98;

/// Status: ready.
const STATUS_READY: u8 = 0x80;
/// Status: erase error / command sequence error (with 0x10).
const STATUS_ERASE_ERROR: u8 = 0x20;
/// Status: program error.
const STATUS_PROGRAM_ERROR: u8 = 0x10;

/// Manufacturer and device id (QEMU's values for PC flash: Intel, 0x18).
const ID_MANUFACTURER: u8 = 0x89;
const ID_DEVICE: u8 = 0x18;

/// What reads return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    ReadArray,
    Status,
    Id,
    Cfi,
}

/// What the next write completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    None,
    Program,
    Erase,
}

/// The flash device over `data`, persisted to `file` (None: not persisted, for tests).
pub struct Pflash {
    data: Vec<u8>,
    sector: usize,
    file: Option<File>,
    mode: Mode,
    pending: Pending,
    status: u8,
    write_failed: bool,
}

impl Pflash {
    /// A flash holding `data` in `sector`-byte erase blocks.
    pub fn new(data: Vec<u8>, sector: usize, file: Option<File>) -> Self {
        Pflash {
            data,
            sector,
            file,
            mode: Mode::ReadArray,
            pending: Pending::None,
            status: STATUS_READY,
            write_failed: false,
        }
    }

    /// The current contents.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    fn persist(&mut self, at: usize, len: usize) {
        let Some(f) = &self.file else { return };
        let r = f.write_all_at(&self.data[at..at + len], at as u64);
        if let Err(e) = r {
            if !self.write_failed {
                log::error!(
                    "pflash: cannot write the VARS file ({e}); UEFI variables will not persist"
                );
                self.write_failed = true;
            }
        }
    }

    /// The CFI query table (QEMU's layout, byte-wide device).
    fn cfi(&self, offset: usize) -> u8 {
        let size_log2 = u8::try_from(self.data.len().max(1).ilog2()).unwrap_or(0);
        let blocks = (self.data.len() / self.sector.max(1)).saturating_sub(1);
        let sector_256 = self.sector / 256;
        match offset {
            0x10 => b'Q',
            0x11 => b'R',
            0x12 => b'Y',
            0x13 => 0x01, // Intel/Sharp command set
            0x15 => 0x31, // extended table at 0x31
            0x1b => 0x45, // Vcc min 4.5 V
            0x1c => 0x55,
            0x1f => 0x07, // typical program time 2^7 us
            0x21 => 0x0a, // typical block erase 2^10 ms
            0x23 => 0x04,
            0x25 => 0x04,
            0x27 => size_log2,
            0x28 => 0x00, // x8 interface
            0x2c => 1,    // one erase block region
            0x2d => u8::try_from(blocks & 0xff).unwrap_or(0),
            0x2e => u8::try_from((blocks >> 8) & 0xff).unwrap_or(0),
            0x2f => u8::try_from(sector_256 & 0xff).unwrap_or(0),
            0x30 => u8::try_from((sector_256 >> 8) & 0xff).unwrap_or(0),
            0x31 => b'P',
            0x32 => b'R',
            0x33 => b'I',
            0x34 => b'1',
            0x35 => b'0',
            _ => 0,
        }
    }

    fn read_byte(&self, at: usize) -> u8 {
        match self.mode {
            Mode::ReadArray => self.data.get(at).copied().unwrap_or(0xff),
            Mode::Status => self.status,
            Mode::Id => match at & 0xff {
                0 => ID_MANUFACTURER,
                1 => ID_DEVICE,
                _ => 0,
            },
            Mode::Cfi => self.cfi(at & 0xff),
        }
    }

    fn program(&mut self, at: usize, bytes: &[u8]) {
        match at.checked_add(bytes.len()) {
            Some(end) if end <= self.data.len() => {
                self.data[at..end].copy_from_slice(bytes);
                self.persist(at, bytes.len());
            }
            _ => self.status |= STATUS_PROGRAM_ERROR,
        }
        self.status |= STATUS_READY;
    }

    fn erase(&mut self, at: usize) {
        let start = at - at % self.sector.max(1);
        let end = (start + self.sector).min(self.data.len());
        if start < end {
            self.data[start..end].fill(0xff);
            self.persist(start, end - start);
        } else {
            self.status |= STATUS_ERASE_ERROR;
        }
        self.status |= STATUS_READY;
    }

    fn command(&mut self, at: usize, cmd: u8) {
        match cmd {
            CMD_READ_ARRAY | CMD_READ_ARRAY_ALT => self.mode = Mode::ReadArray,
            CMD_PROGRAM | CMD_PROGRAM_ALT => {
                self.pending = Pending::Program;
                self.mode = Mode::Status;
            }
            CMD_BLOCK_ERASE => {
                self.pending = Pending::Erase;
                self.mode = Mode::Status;
            }
            CMD_CLEAR_STATUS => {
                self.status = 0;
                self.mode = Mode::ReadArray;
            }
            CMD_READ_STATUS => self.mode = Mode::Status,
            CMD_READ_ID => self.mode = Mode::Id,
            CMD_CFI_QUERY => self.mode = Mode::Cfi,
            CMD_ERASE_CONFIRM => {
                // A confirm without an erase before it.
                self.status |= STATUS_ERASE_ERROR | STATUS_PROGRAM_ERROR;
                self.mode = Mode::Status;
            }
            other => {
                log::debug!(
                    "pflash: unsupported command {other:#x} at {at:#x}; back to read array"
                );
                self.mode = Mode::ReadArray;
            }
        }
    }
}

impl BusDevice for Pflash {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        let base = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, b) in data.iter_mut().enumerate() {
            *b = self.read_byte(base.saturating_add(i));
        }
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        let Some(&first) = data.first() else { return };
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Program => self.program(at, data),
            Pending::Erase if first == CMD_ERASE_CONFIRM => self.erase(at),
            Pending::Erase => {
                self.status |= STATUS_ERASE_ERROR | STATUS_PROGRAM_ERROR;
                self.mode = Mode::Status;
            }
            Pending::None => self.command(at, first),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTOR: usize = 4096;

    fn flash() -> Pflash {
        Pflash::new(vec![0x5a; 4 * SECTOR], SECTOR, None)
    }

    fn rd(f: &mut Pflash, at: u64) -> u8 {
        let mut b = [0u8];
        f.read(at, &mut b, &Origin::default());
        b[0]
    }

    fn wr(f: &mut Pflash, at: u64, v: u8) {
        f.write(at, &[v], &Origin::default());
    }

    #[test]
    fn ovmf_detection_sequence_sees_a_flash() {
        // QemuFlashDetected: CLEAR_STATUS reads back the array (not 0x50), READ_STATUS reads
        // 0x00; then program the original byte back and check the status has no error.
        let mut f = flash();
        let original = rd(&mut f, 0);
        wr(&mut f, 0, CMD_CLEAR_STATUS);
        assert_eq!(rd(&mut f, 0), original);
        wr(&mut f, 0, CMD_READ_STATUS);
        assert_eq!(rd(&mut f, 0), 0x00);
        wr(&mut f, 0, CMD_PROGRAM);
        wr(&mut f, 0, original);
        wr(&mut f, 0, CMD_READ_STATUS);
        assert_eq!(rd(&mut f, 0) & STATUS_PROGRAM_ERROR, 0);
        wr(&mut f, 0, CMD_READ_ARRAY);
        assert_eq!(rd(&mut f, 0), original);
    }

    #[test]
    fn program_then_read_array() {
        let mut f = flash();
        wr(&mut f, 100, CMD_PROGRAM);
        wr(&mut f, 100, 0x12);
        assert_eq!(rd(&mut f, 100) & STATUS_READY, STATUS_READY, "status mode");
        wr(&mut f, 0, CMD_READ_ARRAY);
        assert_eq!(rd(&mut f, 100), 0x12);
        assert_eq!(rd(&mut f, 101), 0x5a);
    }

    #[test]
    fn block_erase_clears_one_sector() {
        let mut f = flash();
        wr(&mut f, SECTOR as u64 + 10, CMD_BLOCK_ERASE);
        wr(&mut f, SECTOR as u64 + 10, CMD_ERASE_CONFIRM);
        wr(&mut f, 0, CMD_READ_ARRAY);
        assert_eq!(rd(&mut f, SECTOR as u64 - 1), 0x5a);
        assert_eq!(rd(&mut f, SECTOR as u64), 0xff);
        assert_eq!(rd(&mut f, 2 * SECTOR as u64 - 1), 0xff);
        assert_eq!(rd(&mut f, 2 * SECTOR as u64), 0x5a);
    }

    #[test]
    fn erase_without_confirm_is_a_sequence_error() {
        let mut f = flash();
        wr(&mut f, 0, CMD_BLOCK_ERASE);
        wr(&mut f, 0, 0x11);
        assert_ne!(rd(&mut f, 0) & STATUS_ERASE_ERROR, 0);
        wr(&mut f, 0, CMD_READ_ARRAY);
        assert_eq!(rd(&mut f, 0), 0x5a, "nothing erased");
    }

    #[test]
    fn id_and_cfi_query() {
        let mut f = flash();
        wr(&mut f, 0, CMD_READ_ID);
        assert_eq!((rd(&mut f, 0), rd(&mut f, 1)), (ID_MANUFACTURER, ID_DEVICE));
        wr(&mut f, 0, CMD_CFI_QUERY);
        assert_eq!(
            [rd(&mut f, 0x10), rd(&mut f, 0x11), rd(&mut f, 0x12)],
            *b"QRY"
        );
        assert_eq!(rd(&mut f, 0x27), 14, "16 KiB = 2^14");
    }

    #[test]
    fn out_of_range_program_is_an_error_not_a_panic() {
        let mut f = flash();
        wr(&mut f, 0, CMD_PROGRAM);
        f.write(4 * SECTOR as u64 - 1, &[1, 2], &Origin::default());
        assert_ne!(rd(&mut f, 0) & STATUS_PROGRAM_ERROR, 0);
    }

    #[test]
    fn writes_reach_the_file() {
        let path = std::env::temp_dir().join(format!("hvprof-pflash-{}", std::process::id()));
        std::fs::write(&path, vec![0x5a; 2 * SECTOR]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut f = Pflash::new(vec![0x5a; 2 * SECTOR], SECTOR, Some(file));
        wr(&mut f, 0, CMD_BLOCK_ERASE);
        wr(&mut f, 0, CMD_ERASE_CONFIRM);
        wr(&mut f, 7, CMD_PROGRAM);
        wr(&mut f, 7, 0x42);
        let on_disk = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(on_disk[0], 0xff);
        assert_eq!(on_disk[7], 0x42);
        assert_eq!(on_disk[SECTOR], 0x5a);
    }
}
