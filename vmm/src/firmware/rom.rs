//! Read-only memory slots for firmware (ROM, pflash CODE) and the copy below 1 MiB.

use kvm_bindings::{kvm_userspace_memory_region, KVM_MEM_READONLY};
use kvm_ioctls::{Cap, VmFd};
use vm_memory::mmap::MmapRegion;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap, VolatileMemory};

use super::FirmwareError;
use crate::layout::{ISA_BIOS_SIZE, ISA_BIOS_START};

/// Host memory holding a firmware image, mapped into the guest read-only. Guest writes to
/// it exit to user space as MMIO (and are ignored). Must outlive the VM's vCPUs.
pub struct ReadOnlySlot {
    region: MmapRegion<()>,
    gpa: u64,
}

impl std::fmt::Debug for ReadOnlySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReadOnlySlot({:#x}+{:#x})", self.gpa, self.region.size())
    }
}

impl ReadOnlySlot {
    /// Maps `bytes` at guest-physical `gpa` in memory slot `slot`.
    pub fn new(vm_fd: &VmFd, slot: u32, gpa: u64, bytes: &[u8]) -> Result<Self, FirmwareError> {
        if !vm_fd.check_extension(Cap::ReadonlyMem) {
            return Err(FirmwareError::NoReadonlyMem);
        }
        let region = MmapRegion::<()>::new(bytes.len())
            .map_err(|e| FirmwareError::Map(std::io::Error::other(e.to_string())))?;
        region
            .get_slice(0, bytes.len())
            .map_err(|e| FirmwareError::Map(std::io::Error::other(e.to_string())))?
            .copy_from(bytes);
        let desc = kvm_userspace_memory_region {
            slot,
            guest_phys_addr: gpa,
            memory_size: u64::try_from(bytes.len()).unwrap_or(0),
            userspace_addr: region.as_ptr() as u64,
            flags: KVM_MEM_READONLY,
        };
        // SAFETY: the mapping is owned by the returned `ReadOnlySlot`, which the VM keeps until
        // its vCPUs have stopped and the VM fd is closed.
        unsafe { vm_fd.set_user_memory_region(desc) }.map_err(FirmwareError::Slot)?;
        Ok(ReadOnlySlot { region, gpa })
    }

    /// The guest-physical start.
    pub fn gpa(&self) -> u64 {
        self.gpa
    }

    /// Reads `buf.len()` bytes at guest-physical `gpa`; false if they are not all in the slot.
    pub fn read(&self, gpa: u64, buf: &mut [u8]) -> bool {
        let Some(off) = gpa.checked_sub(self.gpa) else {
            return false;
        };
        let Ok(off) = usize::try_from(off) else {
            return false;
        };
        match self.region.get_slice(off, buf.len()) {
            Ok(s) => {
                s.copy_to(buf);
                true
            }
            Err(_) => false,
        }
    }
}

/// Copies the last 128 KiB of `top` (the image that holds the reset vector) to 0xE0000, the
/// legacy BIOS area, where real-mode code at F000:xxxx runs from.
pub fn copy_low(mem: &GuestMemoryMmap, top: &[u8]) -> Result<(), FirmwareError> {
    let n = usize::try_from(ISA_BIOS_SIZE).unwrap_or(0);
    let tail = top.get(top.len().saturating_sub(n)..).unwrap_or(&[]);
    if tail.len() != n {
        return Err(FirmwareError::LowCopy);
    }
    mem.write_slice(tail, GuestAddress(ISA_BIOS_START))
        .map_err(|_| FirmwareError::LowCopy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_copy_is_the_last_128k() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 2 << 20)]).unwrap();
        let mut img = vec![0u8; 256 << 10];
        img[(128 << 10) - 1] = 0x11; // last byte of the first half: not copied
        img[128 << 10] = 0x22;
        *img.last_mut().unwrap() = 0x33;
        copy_low(&mem, &img).unwrap();
        let b: u8 = mem.read_obj(GuestAddress(0xe0000)).unwrap();
        assert_eq!(b, 0x22);
        let b: u8 = mem.read_obj(GuestAddress(0xfffff)).unwrap();
        assert_eq!(b, 0x33);
        let b: u8 = mem.read_obj(GuestAddress(0xdffff)).unwrap();
        assert_eq!(b, 0);
    }
}
