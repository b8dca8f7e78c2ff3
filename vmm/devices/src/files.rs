//! Files the devices open: a checked open without blocking, then blocking I/O.

/// Clears O_NONBLOCK on `file`, once a file opened without blocking (a FIFO's open waits for
/// the other end) has been checked: a disk image's, a log's.
pub fn blocking(file: &std::fs::File) -> std::io::Result<()> {
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
