//! Emulated devices and the address-range buses they sit on.

pub mod acpi_pm;
pub mod bus;
pub mod cmos;
pub mod debug_exit;
pub mod debugcon;
pub mod fw_cfg;
pub mod i8042;
pub mod pci;
pub mod reset;
pub mod serial;
pub mod virtio;

pub use bus::{Bus, BusDevice, BusError, Origin};

/// Fills `data` from `src` at `offset`; bytes past the end of `src` read as zero. The
/// register images of small devices are read this way.
pub fn read_padded(src: &[u8], offset: u64, data: &mut [u8]) {
    for (i, b) in data.iter_mut().enumerate() {
        let at = usize::try_from(offset).ok().and_then(|o| o.checked_add(i));
        *b = at.and_then(|a| src.get(a)).copied().unwrap_or(0);
    }
}

/// Clears O_NONBLOCK on `file`, once a file opened without blocking (a FIFO's open waits for
/// the other end) has been checked: a disk image's, a log's.
pub(crate) fn blocking(file: &std::fs::File) -> std::io::Result<()> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    // SAFETY: F_GETFL only reads the flags of a descriptor `file` owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(vmm_sys_util::errno::Error::last().into());
    }
    // SAFETY: F_SETFL sets the flags of a descriptor `file` owns; only O_NONBLOCK changes.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(vmm_sys_util::errno::Error::last().into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn read_padded_zero_fills_past_the_end() {
        let mut d = [0xaau8; 4];
        super::read_padded(&[1, 2, 3], 1, &mut d);
        assert_eq!(d, [2, 3, 0, 0]);
        super::read_padded(&[1, 2, 3], u64::MAX, &mut d);
        assert_eq!(d, [0; 4]);
    }
}
