//! Guest RAM as the page-table walker reads it: `introspect::paging` walks the guest's tables
//! through its own small trait, which this gives the VMM's guest memory.

use introspect::paging::PhysRead;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Guest-physical reads of `GuestMemoryMmap` for [`introspect::paging`]: None where no
/// memory region backs the address.
#[derive(Clone, Copy)]
pub struct GuestPhys<'a>(pub &'a GuestMemoryMmap);

impl PhysRead for GuestPhys<'_> {
    fn read_u64(&self, gpa: u64) -> Option<u64> {
        self.0.read_obj::<u64>(GuestAddress(gpa)).ok()
    }
    fn read_u32(&self, gpa: u64) -> Option<u32> {
        self.0.read_obj::<u32>(GuestAddress(gpa)).ok()
    }
}
