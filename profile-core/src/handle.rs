//! Handles, access masks, owners and object identities.

/// An access mask as a handle carries it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(transparent)]
pub struct AccessMask(pub u32);

impl AccessMask {
    /// `PROFILE_CONTROL` (0x1): the right Start and Stop need.
    pub const PROFILE_CONTROL: AccessMask = AccessMask(0x0000_0001);
    /// `PROFILE_ALL_ACCESS`: `STANDARD_RIGHTS_REQUIRED | PROFILE_CONTROL`.
    pub const PROFILE_ALL_ACCESS: AccessMask = AccessMask(0x000F_0001);

    /// True if every bit of `needed` is granted.
    pub const fn grants(self, needed: AccessMask) -> bool {
        self.0 & needed.0 == needed.0
    }
}

/// A handle to a profile object, as the guest sees it: a nonzero multiple of 4, like a Windows
/// handle value. Handle values are reused after close, as in Windows; [`ObjectId`]s are not.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(transparent)]
pub struct Handle(pub u32);

/// Who owns an object: the VMM tags each object with the guest agent (or guest) that created
/// it. Handles resolve only for their owner, so one agent cannot use another's handles, and
/// `close_all(owner)` ends every object of a guest on reset.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(transparent)]
pub struct Owner(pub u64);

/// A profile object's identity for its whole life; never reused by one manager.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(transparent)]
pub struct ObjectId(pub u64);
