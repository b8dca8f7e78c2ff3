//! The BTF reader on hand-made blobs: bitfields both ways, anonymous members, typedef chains
//! and loops, bad type ids, huge vlen and every truncation.

#![allow(clippy::cast_possible_truncation)]

use super::*;
use crate::symbols::types::field;

/// Builds a BTF blob one type at a time.
#[derive(Default)]
pub(crate) struct Builder {
    types: Vec<u8>,
    strings: Vec<u8>,
    count: u32,
}

impl Builder {
    pub(crate) fn new() -> Self {
        Builder {
            strings: vec![0],
            ..Default::default()
        }
    }

    fn str(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        off
    }

    fn entry(
        &mut self,
        name: &str,
        kind: u32,
        flag: bool,
        vlen: u32,
        st: u32,
        data: &[u32],
    ) -> u32 {
        let name = self.str(name);
        let info = (kind << 24) | (u32::from(flag) << 31) | vlen;
        for w in [name, info, st].iter().chain(data) {
            self.types.extend_from_slice(&w.to_le_bytes());
        }
        self.count += 1;
        self.count
    }

    pub(crate) fn int(&mut self, name: &str, size: u32) -> u32 {
        self.entry(name, 1, false, 0, size, &[size.wrapping_mul(8)])
    }

    pub(crate) fn ptr(&mut self, to: u32) -> u32 {
        self.entry("", 2, false, 0, to, &[])
    }

    pub(crate) fn array(&mut self, elem: u32, index: u32, n: u32) -> u32 {
        self.entry("", 3, false, 0, 0, &[elem, index, n])
    }

    pub(crate) fn typedef(&mut self, name: &str, to: u32) -> u32 {
        self.entry(name, 8, false, 0, to, &[])
    }

    /// A structure of `(name, type, bit offset, bitfield width)` members (kind_flag when any
    /// width is given).
    pub(crate) fn structure(
        &mut self,
        name: &str,
        size: u32,
        members: &[(&str, u32, u32, u32)],
    ) -> u32 {
        let flag = members.iter().any(|m| m.3 != 0);
        let mut data = Vec::new();
        for &(n, ty, off, width) in members {
            let n = self.str(n);
            data.extend([n, ty, if flag { (width << 24) | off } else { off }]);
        }
        self.entry(name, 4, flag, members.len() as u32, size, &data)
    }

    pub(crate) fn raw(&mut self, words: &[u32]) {
        for w in words {
            self.types.extend_from_slice(&w.to_le_bytes());
        }
        self.count += 1;
    }

    pub(crate) fn build(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let t = self.types.len() as u32;
        for w in [0x0001_eb9fu32, 24, 0, t, t, self.strings.len() as u32] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&self.types);
        b.extend_from_slice(&self.strings);
        b
    }
}

/// A 6.1-like kernel: task_struct with a bitfield, mm_struct's pgd inside an anonymous struct.
pub(crate) fn kernel() -> Builder {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let uint = b.int("unsigned int", 4);
    let u64_ = b.int("long long unsigned int", 8);
    let pid_t = b.typedef("pid_t", int);
    let chr = b.int("char", 1);
    let comm = b.array(chr, int, 16);
    let ptr_any = b.ptr(0);
    let pgd_anon = b.structure(
        "",
        0x40,
        &[("map_count", int, 0, 0), ("pgd", ptr_any, 0x18 * 8, 0)],
    );
    b.structure("mm_struct", 0x380, &[("", pgd_anon, 0x30 * 8, 0)]);
    b.structure(
        "task_struct",
        0x2400,
        &[
            ("flags", uint, 0x2c * 8, 0),
            ("in_execve", uint, 0x31 * 8 + 3, 1),
            ("pid", pid_t, 0x5c8 * 8, 0),
            ("tgid", pid_t, 0x5cc * 8, 0),
            ("mm", ptr_any, 0x498 * 8, 0),
            ("group_leader", ptr_any, 0x5f0 * 8, 0),
            ("start_time", u64_, 0x6a8 * 8, 0),
            ("comm", comm, 0x738 * 8, 0),
        ],
    );
    b
}

#[test]
fn reads_a_kernels_layout() {
    let l = linux_layout(&kernel().build()).unwrap();
    let t = &l.task_struct;
    assert_eq!(
        (
            t.size,
            t.flags,
            t.pid,
            t.tgid,
            t.mm,
            t.group_leader,
            t.start_time,
            t.comm
        ),
        (0x2400, 0x2c, 0x5c8, 0x5cc, 0x498, 0x5f0, 0x6a8, 0x738)
    );
    assert_eq!(t.tasks, None);
    assert_eq!(l.mm_struct.pgd, 0x48);
    assert_eq!(l.pcpu_hot, None);
}

#[test]
fn bitfields_arrays_and_typedefs() {
    let blob = kernel().build();
    let mut btf = Btf::parse(&blob).unwrap();
    let f = field(&mut btf, "task_struct", "in_execve")
        .unwrap()
        .unwrap();
    assert_eq!(
        f,
        Field {
            offset: 0x30,
            bits: Some((11, 1)),
            size: 4
        }
    );
    let f = field(&mut btf, "task_struct", "comm").unwrap().unwrap();
    assert_eq!((f.offset, f.size), (0x738, 16));
    let f = field(&mut btf, "task_struct", "pid").unwrap().unwrap();
    assert_eq!((f.offset, f.size, f.bits), (0x5c8, 4, None));
}

#[test]
fn int_encoded_bitfields() {
    let mut b = Builder::new();
    let three = b.entry("", 1, false, 0, 4, &[3]);
    b.structure("s", 8, &[("x", three, 37, 0)]);
    let blob = b.build();
    let mut btf = Btf::parse(&blob).unwrap();
    let f = field(&mut btf, "s", "x").unwrap().unwrap();
    assert_eq!(
        f,
        Field {
            offset: 4,
            bits: Some((5, 3)),
            size: 4
        }
    );
}

#[test]
fn typedef_loops_and_bad_ids_end() {
    let mut b = Builder::new();
    // 1 -> 2 -> 1: a typedef loop; 99: no such type.
    b.typedef("a", 2);
    b.typedef("b", 1);
    b.structure("s", 16, &[("looped", 1, 0, 0), ("bad", 99, 64, 0)]);
    let blob = b.build();
    let mut btf = Btf::parse(&blob).unwrap();
    let f = field(&mut btf, "s", "looped").unwrap().unwrap();
    assert_eq!((f.offset, f.size), (0, 0));
    let f = field(&mut btf, "s", "bad").unwrap().unwrap();
    assert_eq!((f.offset, f.size), (8, 0));
    assert_eq!(field(&mut btf, "s", "bad.x").unwrap(), None);
}

#[test]
fn self_containing_anonymous_structs_are_bounded() {
    let mut b = Builder::new();
    // Type 1: an anonymous struct whose only member is itself.
    b.structure("", 8, &[("", 1, 0, 0)]);
    b.structure("s", 8, &[("", 1, 0, 0)]);
    let blob = b.build();
    let mut btf = Btf::parse(&blob).unwrap();
    assert!(field(&mut btf, "s", "x").is_err());
    // Four times itself: the member budget ends it long before 4^32 reads.
    let mut b = Builder::new();
    b.structure(
        "",
        8,
        &[("", 1, 0, 0), ("", 1, 0, 0), ("", 1, 0, 0), ("", 1, 0, 0)],
    );
    b.structure("s", 8, &[("", 1, 0, 0)]);
    let blob = b.build();
    let mut btf = Btf::parse(&blob).unwrap();
    assert!(field(&mut btf, "s", "x").is_err());
}

#[test]
fn huge_vlen_and_unknown_kinds_are_refused() {
    let mut b = Builder::new();
    b.raw(&[0, (4 << 24) | 0xffff, 8]);
    assert_eq!(
        Btf::parse(&b.build()).err(),
        Some(BtfError::Truncated("type entry"))
    );
    let mut b = Builder::new();
    b.raw(&[0, 31 << 24, 0]);
    let mut huge = Builder::new();
    let big = huge.int("big", u32::MAX);
    huge.structure("s", 8, &[("x", big, 7, 3)]);
    let blob = huge.build();
    let f = field(&mut Btf::parse(&blob).unwrap(), "s", "x")
        .unwrap()
        .unwrap();
    assert_eq!(f.bits, None);
    assert_eq!(
        Btf::parse(&b.build()).err(),
        Some(BtfError::Kind { id: 1, kind: 31 })
    );
}

#[test]
fn bad_headers_and_every_truncation_are_errors() {
    let blob = kernel().build();
    for len in 0..blob.len() {
        let _ = Btf::parse(&blob[..len]);
        let _ = linux_layout(&blob[..len]);
    }
    let mut bad = blob.clone();
    bad[0] = 0;
    assert!(matches!(Btf::parse(&bad), Err(BtfError::Magic(_))));
    let mut bad = blob.clone();
    bad[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(Btf::parse(&bad), Err(BtfError::Truncated(_))));
    let mut bad = blob;
    bad[4..8].copy_from_slice(&4u32.to_le_bytes());
    assert!(matches!(Btf::parse(&bad), Err(BtfError::Truncated(_))));
}

#[test]
fn missing_members_are_named() {
    let mut b = Builder::new();
    b.structure("task_struct", 16, &[("pid", 0, 0, 0)]);
    let err = linux_layout(&b.build()).unwrap_err();
    assert_eq!(err.to_string(), "task_struct has no member tgid");
}

#[test]
fn mutated_blobs_are_errors_or_valid_layouts() {
    let good = kernel().build();
    let mut x = 0x0bad_cafe_f00d_d00du64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let mut b = good.clone();
        for _ in 0..(1 + rnd() % 4) {
            let at = usize::try_from(rnd() % b.len() as u64).unwrap();
            b[at] = rnd().to_le_bytes()[0];
        }
        if let Ok(l) = linux_layout(&b) {
            assert!(l.validate().is_ok());
        }
    }
}

/// The host kernel's own BTF, where it has one (`/sys/kernel/btf/vmlinux`, CONFIG_DEBUG_INFO_BTF):
/// real data from pahole, every kind in use. Skipped, saying so, on a host without it.
#[test]
fn reads_the_host_kernels_btf() {
    let Ok(blob) = std::fs::read("/sys/kernel/btf/vmlinux") else {
        eprintln!("no /sys/kernel/btf/vmlinux on this host: skipped");
        return;
    };
    let l = linux_layout(&blob).unwrap();
    eprintln!("{l:#x?}");
    let t = &l.task_struct;
    // Sanity only (offsets differ per build): pid and tgid are adjacent ints, comm is 16
    // bytes, and everything lies inside the structure.
    assert_eq!(t.tgid, t.pid + 4);
    let mut btf = Btf::parse(&blob).unwrap();
    let comm = field(&mut btf, "task_struct", "comm").unwrap().unwrap();
    assert_eq!(comm.size, 16);
    let pgd = field(&mut btf, "mm_struct", "pgd").unwrap().unwrap();
    assert_eq!(pgd.size, 8);
    // 6.2 and later: pcpu_hot holds current_task (until 6.15 moved it out again).
    if let Some(hot) = l.pcpu_hot {
        assert!(hot.current_task < hot.size);
    }
}
