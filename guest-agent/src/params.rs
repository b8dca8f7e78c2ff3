//! The arguments of NtCreateProfile / NtCreateProfileEx with a kernel agent's defaults.

use profile_core::abi::{
    CreateExRequest, CreateFields, CreateRequest, CALLER_SYSTEM_PROFILE_PRIVILEGE,
    CREATE_PER_PROCESS,
};
use profile_core::affinity::KAFFINITY_ALL;
use profile_core::ProfileSource;

/// `PROFILE_CONTROL`, the access right START and STOP need.
pub const PROFILE_CONTROL: u32 = 1;

/// What to profile, where to count. Built with [`ProfileParams::global`] and adjusted with the
/// builder methods; turned into a request with [`ProfileParams::to_create`] or
/// [`ProfileParams::to_create_ex`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ProfileParams {
    /// `Some(cr3)`: only the process with this CR3 (`CREATE_PER_PROCESS`); `None`: every
    /// process.
    pub process_cr3: Option<u64>,
    /// `ProfileBase`.
    pub base: u64,
    /// `ProfileSize`.
    pub size: u64,
    /// `BucketSize`: log2 of the bytes per counter, 2..=31.
    pub bucket_size: u32,
    /// `Buffer`: the counters' virtual address, valid in the calling processor's address space.
    pub buffer: u64,
    /// `BufferSize` in bytes.
    pub buffer_size: u32,
    /// `ProfileSource`.
    pub source: ProfileSource,
    /// `CALLER_*` flags. Default: `CALLER_SYSTEM_PROFILE_PRIVILEGE` (a kernel agent profiling
    /// for itself holds the privilege and is not restricted).
    pub caller_flags: u32,
    /// Access of the new handle. Default: `PROFILE_CONTROL`.
    pub desired_access: u32,
    /// CREATE: the processor group `affinity` refers to. Default 0.
    pub group: u16,
    /// CREATE: `KAFFINITY`. Default: all active processors of `group`.
    pub affinity: u64,
}

impl ProfileParams {
    /// A ProfileTime profile of `[base, base + size)` for every process and processor, in
    /// buckets of `1 << bucket_size` bytes, counting into `buffer_size` bytes at `buffer`.
    pub const fn global(
        base: u64,
        size: u64,
        bucket_size: u32,
        buffer: u64,
        buffer_size: u32,
    ) -> ProfileParams {
        ProfileParams {
            process_cr3: None,
            base,
            size,
            bucket_size,
            buffer,
            buffer_size,
            source: ProfileSource::TIME,
            caller_flags: CALLER_SYSTEM_PROFILE_PRIVILEGE,
            desired_access: PROFILE_CONTROL,
            group: 0,
            affinity: KAFFINITY_ALL,
        }
    }

    /// Only the process whose address space is `cr3`.
    pub const fn per_process(mut self, cr3: u64) -> ProfileParams {
        self.process_cr3 = Some(cr3);
        self
    }

    /// Another profile source.
    pub const fn with_source(mut self, source: ProfileSource) -> ProfileParams {
        self.source = source;
        self
    }

    /// CREATE's single-group affinity.
    pub const fn with_affinity(mut self, group: u16, mask: u64) -> ProfileParams {
        self.group = group;
        self.affinity = mask;
        self
    }

    fn flags(&self) -> u32 {
        let per_process = if self.process_cr3.is_some() {
            CREATE_PER_PROCESS
        } else {
            0
        };
        self.caller_flags | per_process
    }

    /// The fields CREATE and CREATE_EX share.
    fn fields(&self) -> CreateFields {
        CreateFields {
            process_cr3: self.process_cr3.unwrap_or(0),
            base: self.base,
            size: self.size,
            buffer: self.buffer,
            buffer_size: self.buffer_size,
            bucket_size: self.bucket_size,
            source: self.source.0,
            flags: self.flags(),
            desired_access: self.desired_access,
        }
    }

    /// The CREATE request body.
    pub fn to_create(&self) -> CreateRequest {
        self.fields().create(self.group, self.affinity)
    }

    /// The CREATE_EX request body (`group` and `affinity` are not used: CREATE_EX takes a
    /// `GROUP_AFFINITY` array; `group_count` is filled in when the block is built).
    pub fn to_create_ex(&self) -> CreateExRequest {
        self.fields().create_ex(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_defaults_hold_the_privilege_and_all_processors() {
        let r = ProfileParams::global(0x4000_0000, 0x1000, 4, 0x20_0000, 0x400).to_create();
        assert_eq!(r.flags, CALLER_SYSTEM_PROFILE_PRIVILEGE);
        assert_eq!(r.process_cr3, 0);
        assert_eq!(r.affinity, u64::MAX);
        assert_eq!(r.desired_access, PROFILE_CONTROL);
        assert_eq!(r.source, 0);
        assert_eq!(r.bucket_size, 4);
        assert_eq!(r.buffer_size, 0x400);
    }

    #[test]
    fn per_process_sets_the_flag_and_cr3() {
        let p = ProfileParams::global(0, 0x1000, 4, 0x1000, 0x400)
            .per_process(0x1AB000)
            .with_affinity(0, 0b10)
            .with_source(ProfileSource(2));
        let r = p.to_create();
        assert_eq!(
            r.flags,
            CREATE_PER_PROCESS | CALLER_SYSTEM_PROFILE_PRIVILEGE
        );
        assert_eq!(r.process_cr3, 0x1AB000);
        assert_eq!(r.affinity, 0b10);
        assert_eq!(r.source, 2);
        let ex = p.to_create_ex();
        assert_eq!(ex.flags, r.flags);
        assert_eq!(ex.process_cr3, 0x1AB000);
        assert_eq!((ex.group_count, ex.reserved0, ex.reserved1), (0, 0, 0));
    }
}
