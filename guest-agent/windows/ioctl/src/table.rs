//! The driver's per-caller table of VMM profile handles.
//!
//! VMM handles are per guest (docs/abi.md 6): every process talking to the driver shares one
//! handle space in the VMM. The driver therefore keeps, per open file object, the handles that
//! caller created, and refuses any other (`STATUS_INVALID_HANDLE`), so one process cannot stop,
//! close or start another's objects. Each entry also remembers the creating process (a handle
//! duplicated into another process cannot start or stop the object: `STATUS_ACCESS_DENIED`) and,
//! while started, the lock on the caller's buffer (`L`: the driver's locked MDL), so that STOP,
//! CLOSE, IRP_MJ_CLEANUP and process exit unlock exactly that caller's pages.
//!
//! The state machine mirrors NtStartProfile/NtStopProfile: START on a started object is
//! `STATUS_PROFILING_NOT_STOPPED`, STOP on a stopped one `STATUS_PROFILING_NOT_STARTED`, and
//! neither reaches the VMM. The driver only records a state change after the VMM confirmed it.

use profile_core::NtStatus;

/// Objects one caller (file object) may hold.
pub const MAX_OBJECTS_PER_CALLER: usize = 64;

/// One profile object of a caller.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Entry<L: Copy> {
    /// The VMM handle (also the caller's handle).
    pub handle: u32,
    /// The creating process (an opaque identity: the driver uses the EPROCESS address).
    pub owner: u64,
    /// `Buffer` as created.
    pub buffer: u64,
    /// `BufferSize` as created.
    pub buffer_size: u32,
    /// While started: the lock on the buffer.
    pub locked: Option<L>,
}

/// A fixed-size table (no allocation: it lives in the driver's nonpaged file context).
#[derive(Debug)]
pub struct HandleTable<L: Copy> {
    entries: [Option<Entry<L>>; MAX_OBJECTS_PER_CALLER],
}

impl<L: Copy> Default for HandleTable<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Copy> HandleTable<L> {
    /// An empty table.
    pub const fn new() -> Self {
        HandleTable {
            entries: [None; MAX_OBJECTS_PER_CALLER],
        }
    }

    /// Objects held.
    pub fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.is_some()).count()
    }

    /// True if the caller holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `Ok` if another object fits; else `STATUS_INSUFFICIENT_RESOURCES` (checked before the
    /// driver asks the VMM to create one).
    pub fn check_room(&self) -> Result<(), NtStatus> {
        if self.entries.iter().any(|e| e.is_none()) {
            Ok(())
        } else {
            Err(NtStatus::INSUFFICIENT_RESOURCES)
        }
    }

    /// Records a new, stopped object.
    pub fn insert(
        &mut self,
        handle: u32,
        owner: u64,
        buffer: u64,
        buffer_size: u32,
    ) -> Result<(), NtStatus> {
        if self.find(handle).is_some() {
            // The VMM never hands out a live handle twice; refuse rather than alias.
            return Err(NtStatus::INVALID_HANDLE);
        }
        let slot = self
            .entries
            .iter_mut()
            .find(|e| e.is_none())
            .ok_or(NtStatus::INSUFFICIENT_RESOURCES)?;
        *slot = Some(Entry {
            handle,
            owner,
            buffer,
            buffer_size,
            locked: None,
        });
        Ok(())
    }

    fn find(&self, handle: u32) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| matches!(e, Some(e) if e.handle == handle))
    }

    fn slot(&mut self, handle: u32, owner: u64) -> Result<&mut Entry<L>, NtStatus> {
        let i = self.find(handle).ok_or(NtStatus::INVALID_HANDLE)?;
        let entry = self.entries[i].as_mut().ok_or(NtStatus::INVALID_HANDLE)?;
        if entry.owner != owner {
            return Err(NtStatus::ACCESS_DENIED);
        }
        Ok(entry)
    }

    /// The object `handle` of this caller, checked for START: `STATUS_INVALID_HANDLE` if the
    /// caller has no such object, `STATUS_ACCESS_DENIED` from another process,
    /// `STATUS_PROFILING_NOT_STOPPED` if it is started.
    pub fn check_start(&mut self, handle: u32, owner: u64) -> Result<Entry<L>, NtStatus> {
        let entry = self.slot(handle, owner)?;
        if entry.locked.is_some() {
            return Err(NtStatus::PROFILING_NOT_STOPPED);
        }
        Ok(*entry)
    }

    /// Records that the VMM started `handle` with the buffer locked by `lock`.
    pub fn set_started(&mut self, handle: u32, owner: u64, lock: L) -> Result<(), NtStatus> {
        let entry = self.slot(handle, owner)?;
        if entry.locked.is_some() {
            return Err(NtStatus::PROFILING_NOT_STOPPED);
        }
        entry.locked = Some(lock);
        Ok(())
    }

    /// Checks STOP: as [`HandleTable::check_start`], but `STATUS_PROFILING_NOT_STARTED` if the
    /// object is stopped.
    pub fn check_stop(&mut self, handle: u32, owner: u64) -> Result<(), NtStatus> {
        let entry = self.slot(handle, owner)?;
        if entry.locked.is_none() {
            return Err(NtStatus::PROFILING_NOT_STARTED);
        }
        Ok(())
    }

    /// Records that the VMM stopped `handle`; returns the lock to release.
    pub fn set_stopped(&mut self, handle: u32, owner: u64) -> Result<L, NtStatus> {
        let entry = self.slot(handle, owner)?;
        entry.locked.take().ok_or(NtStatus::PROFILING_NOT_STARTED)
    }

    /// Checks CLOSE (no access right needed, but the creating process only).
    pub fn check_close(&mut self, handle: u32, owner: u64) -> Result<Entry<L>, NtStatus> {
        self.slot(handle, owner).map(|e| *e)
    }

    /// Removes `handle` (after the VMM closed it); returns the entry, whose lock (if any) the
    /// driver releases.
    pub fn remove(&mut self, handle: u32) -> Option<Entry<L>> {
        let i = self.find(handle)?;
        self.entries[i].take()
    }

    /// Removes and returns some object (IRP_MJ_CLEANUP: the driver closes each in the VMM and
    /// releases its lock).
    pub fn take_any(&mut self) -> Option<Entry<L>> {
        self.entries.iter_mut().find_map(|e| e.take())
    }

    /// Removes and returns an object created by `owner` (its process is exiting).
    pub fn take_owned_by(&mut self, owner: u64) -> Option<Entry<L>> {
        let i = self
            .entries
            .iter()
            .position(|e| matches!(e, Some(e) if e.owner == owner))?;
        self.entries[i].take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 0xFFFF_A000_0000_1000;
    const B: u64 = 0xFFFF_A000_0000_2000;

    #[test]
    fn start_stop_close_state_machine() {
        let mut t = HandleTable::<u32>::new();
        assert!(t.is_empty());
        t.insert(4, A, 0x10_0000, 0x400).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.check_stop(4, A), Err(NtStatus::PROFILING_NOT_STARTED));
        let e = t.check_start(4, A).unwrap();
        assert_eq!(
            (e.buffer, e.buffer_size, e.locked),
            (0x10_0000, 0x400, None)
        );
        t.set_started(4, A, 77).unwrap();
        assert_eq!(t.check_start(4, A), Err(NtStatus::PROFILING_NOT_STOPPED));
        assert_eq!(t.check_stop(4, A), Ok(()));
        assert_eq!(t.set_stopped(4, A), Ok(77));
        assert_eq!(t.set_stopped(4, A), Err(NtStatus::PROFILING_NOT_STARTED));
        // Restart after stop, as NtStartProfile allows.
        t.set_started(4, A, 78).unwrap();
        assert_eq!(t.check_close(4, A).unwrap().locked, Some(78));
        assert_eq!(t.remove(4).unwrap().locked, Some(78));
        assert_eq!(t.check_close(4, A), Err(NtStatus::INVALID_HANDLE));
        assert!(t.remove(4).is_none());
    }

    #[test]
    fn other_callers_handles_are_invalid_and_other_processes_denied() {
        let mut t = HandleTable::<u32>::new();
        t.insert(8, A, 0x1000, 4).unwrap();
        assert_eq!(t.check_start(12, A), Err(NtStatus::INVALID_HANDLE));
        assert_eq!(t.check_start(8, B), Err(NtStatus::ACCESS_DENIED));
        assert_eq!(t.check_stop(8, B), Err(NtStatus::ACCESS_DENIED));
        assert_eq!(t.check_close(8, B), Err(NtStatus::ACCESS_DENIED));
        assert_eq!(t.insert(8, A, 0, 4), Err(NtStatus::INVALID_HANDLE));
    }

    #[test]
    fn the_table_fills_up() {
        let mut t = HandleTable::<u32>::new();
        for i in 0..MAX_OBJECTS_PER_CALLER {
            assert_eq!(t.check_room(), Ok(()));
            t.insert(4 * (u32::try_from(i).unwrap() + 1), A, 0x1000, 4)
                .unwrap();
        }
        assert_eq!(t.check_room(), Err(NtStatus::INSUFFICIENT_RESOURCES));
        assert_eq!(
            t.insert(9999, A, 0, 4),
            Err(NtStatus::INSUFFICIENT_RESOURCES)
        );
    }

    #[test]
    fn cleanup_and_process_exit_take_exactly_the_right_entries() {
        let mut t = HandleTable::<u32>::new();
        t.insert(4, A, 0x1000, 4).unwrap();
        t.insert(8, B, 0x2000, 4).unwrap();
        t.insert(12, A, 0x3000, 4).unwrap();
        t.set_started(12, A, 5).unwrap();
        let mut gone: Vec<(u32, Option<u32>)> = Vec::new();
        while let Some(e) = t.take_owned_by(A) {
            gone.push((e.handle, e.locked));
        }
        assert_eq!(gone, vec![(4, None), (12, Some(5))]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.take_any().map(|e| e.handle), Some(8));
        assert!(t.take_any().is_none());
    }
}
