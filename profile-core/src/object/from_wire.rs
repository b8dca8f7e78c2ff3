//! From the wire format to the manager: the decoded requests of [`crate::abi`] as the
//! manager's [`CreateParams`] and [`CallerRights`], and the info reply a manager gives. The
//! wire format knows nothing of the manager; the manager's side of each call is here.

use alloc::vec::Vec;

use super::{CallerRights, CreateParams, ObjectManager};
use crate::abi::cpuid::FEATURES_KNOWN;
use crate::abi::{
    process_key, supported_sources_mask, CreateExRequest, CreateRequest, GroupList, InfoReply,
    SetIntervalRequest, ABI_VERSION, CALLER_RESTRICTED, CALLER_SYSTEM_PROFILE_PRIVILEGE,
    CREATE_PER_PROCESS, MAX_PAGE_COUNT, MAX_REQUEST_LEN,
};
use crate::affinity::{GroupAffinity, MAX_GROUPS};
use crate::handle::{AccessMask, Owner};
use crate::source::ProfileSource;

/// The caller rights `CALLER_*` flags state.
pub fn caller_rights(flags: u32) -> CallerRights {
    CallerRights {
        system_profile_privilege: flags & CALLER_SYSTEM_PROFILE_PRIVILEGE != 0,
        restricted: flags & CALLER_RESTRICTED != 0,
    }
}

fn params(
    owner: Owner,
    buffer_writable: bool,
    r: (u32, u64, u64, u64, u64, u32, u32, u32, u32),
) -> CreateParams {
    let (flags, cr3, base, size, buffer, buffer_size, bucket_size, source, access) = r;
    CreateParams {
        owner,
        process: (flags & CREATE_PER_PROCESS != 0).then(|| process_key(cr3)),
        base,
        size,
        bucket_size,
        buffer,
        buffer_size,
        source: ProfileSource(source),
        buffer_writable,
        access: AccessMask(access),
        caller: caller_rights(flags),
    }
}

/// NtCreateProfile's and NtCreateProfileEx's requests share every field but the affinity.
macro_rules! impl_to_params {
    ($($request:ty),*) => {$(
        impl $request {
            /// The manager's parameters for this request. `buffer_writable` is the VMM's
            /// verdict on `[buffer, buffer + buffer_size)` in the calling vCPU's address space.
            pub fn to_params(&self, owner: Owner, buffer_writable: bool) -> CreateParams {
                params(
                    owner,
                    buffer_writable,
                    (
                        self.flags,
                        self.process_cr3,
                        self.base,
                        self.size,
                        self.buffer,
                        self.buffer_size,
                        self.bucket_size,
                        self.source,
                        self.desired_access,
                    ),
                )
            }
        }
    )*};
}
impl_to_params!(CreateRequest, CreateExRequest);

impl SetIntervalRequest {
    /// The caller rights its flags state.
    pub fn caller(&self) -> CallerRights {
        caller_rights(self.flags)
    }
}

impl GroupList<'_> {
    /// The elements as a vector (for [`ObjectManager::create_ex`]).
    pub fn to_vec(&self) -> Vec<GroupAffinity> {
        self.iter().collect()
    }
}

impl InfoReply {
    /// The info reply for `manager`'s platform and the VMM's `features`.
    pub fn for_manager<P>(manager: &ObjectManager<P>, features: u32) -> InfoReply {
        let platform = manager.platform();
        InfoReply {
            abi_version: ABI_VERSION,
            processor_count: platform.active_processors,
            features: features & FEATURES_KNOWN,
            max_page_count: MAX_PAGE_COUNT,
            supported_sources: supported_sources_mask(&platform.sources),
            started_limit: u32::try_from(manager.started_limit()).unwrap_or(u32::MAX),
            max_groups: u32::from(MAX_GROUPS),
            max_request_len: MAX_REQUEST_LEN,
            reserved: 0,
        }
    }
}
