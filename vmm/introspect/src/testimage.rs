//! Hand-made PE32+ (and PE32) images and unwind info: the one PE builder of the workspace, for the unit
//! tests here and in the report crate (a symbol store's identity files) and for `hvprof
//! bench` (the image its guest spins in, which the Windows x64 unwinder walks). Behind the
//! `test-support` feature: the default build of this crate (what vmm, report and the fuzz
//! targets link) does not contain it; the `hvprof` binary does, through the bench crate.

// Test images are small: every length and offset fits the PE fields.
#![allow(clippy::cast_possible_truncation)]

/// Where the builder puts the NT headers and the exception directory.
const LFANEW: usize = 0x80;
const EXCEPTIONS: usize = 0x200;

/// A section header: name, RVA, size in memory and in the file, characteristics.
type Section = ([u8; 8], u32, u32, u32);

/// A PE32+ image built in memory: headers, an exception directory, and bytes placed at RVAs.
pub struct ImageBuilder {
    size: usize,
    timestamp: u32,
    executable: Option<(u64, u32)>,
    sections: Vec<Section>,
    functions: Vec<[u32; 3]>,
    bytes: Vec<(usize, Vec<u8>)>,
    directories: Vec<(usize, u32, u32)>,
    pe32: bool,
}

impl ImageBuilder {
    /// An image of `size` bytes (SizeOfImage) with no functions.
    pub fn new(size: usize) -> Self {
        ImageBuilder {
            size,
            timestamp: 0x5eed_1234,
            executable: None,
            sections: Vec::new(),
            functions: Vec::new(),
            bytes: Vec::new(),
            directories: Vec::new(),
            pe32: false,
        }
    }

    /// Makes it an x86 image (PE32: Machine 0x14c, a PE32 optional header), as a WOW64
    /// process maps. Its data directories are placed as PE32's; `executable` and `function`
    /// are for x86-64 images only.
    pub fn pe32(mut self) -> Self {
        self.pe32 = true;
        self
    }

    /// Sets the file header's TimeDateStamp (0x5eed_1234 unless set).
    pub fn timestamp(mut self, timestamp: u32) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// Makes it an image a loader maps, as a native Windows executable linked /fixed at `base`
    /// with its entry point (and code) at `entry`: the headers in the first page, page-aligned
    /// sections laid out in the file as in memory, large-address aware.
    pub fn executable(mut self, base: u64, entry: u32) -> Self {
        self.executable = Some((base, entry));
        self
    }

    /// Adds a section header: `size` bytes at `rva` in memory and at the same offset in the
    /// file, with these characteristics. Three at most: the headers end at 0x200.
    pub fn section(mut self, name: &[u8; 8], rva: u32, size: u32, characteristics: u32) -> Self {
        self.sections.push((*name, rva, size, characteristics));
        self
    }

    /// Sets data directory `index` (0 exports, 6 debug) to `rva`, `size`.
    pub fn directory(mut self, index: usize, rva: u32, size: u32) -> Self {
        self.directories.push((index, rva, size));
        self
    }

    /// Adds a RUNTIME_FUNCTION.
    pub fn function(mut self, begin: u32, end: u32, unwind: u32) -> Self {
        self.functions.push([begin, end, unwind]);
        self
    }

    /// An export directory at `at` (it and its tables take 0x800 bytes) exporting `names` in
    /// the order given (the PE format wants them sorted), each at its RVA.
    pub fn exports(self, at: u32, names: &[(&str, u32)]) -> Self {
        let n = names.len() as u32;
        let mut dir = vec![0u8; 40];
        for (off, v) in [
            (20, n),
            (24, n),
            (28, at + 0x100),
            (32, at + 0x200),
            (36, at + 0x300),
        ] {
            dir[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        let (mut funcs, mut ptrs, mut ords, mut strings) = (vec![], vec![], vec![], vec![]);
        for (i, (name, rva)) in names.iter().enumerate() {
            funcs.extend(rva.to_le_bytes());
            ptrs.extend((at + 0x400 + strings.len() as u32).to_le_bytes());
            ords.extend((i as u16).to_le_bytes());
            strings.extend(name.as_bytes());
            strings.push(0);
        }
        self.directory(0, at, 0x800)
            .bytes(at, &dir)
            .bytes(at + 0x100, &funcs)
            .bytes(at + 0x200, &ptrs)
            .bytes(at + 0x300, &ords)
            .bytes(at + 0x400, &strings)
    }

    /// Places `bytes` at `rva`.
    pub fn bytes(mut self, rva: u32, bytes: &[u8]) -> Self {
        self.bytes.push((rva as usize, bytes.to_vec()));
        self
    }

    /// The image's bytes.
    pub fn build(mut self) -> Vec<u8> {
        let mut m = vec![0u8; self.size];
        let put = |m: &mut Vec<u8>, at: usize, b: &[u8]| m[at..at + b.len()].copy_from_slice(b);
        put(&mut m, 0, b"MZ");
        put(&mut m, 0x3c, &(LFANEW as u32).to_le_bytes());
        put(&mut m, LFANEW, b"PE\0\0");
        // Machine, the optional header's size and magic, and where its directories start.
        let (machine, optional_len, magic, dirs) = if self.pe32 {
            (0x14cu16, 224u16, 0x10bu16, 96)
        } else {
            (0x8664, 240, 0x20b, 112)
        };
        put(&mut m, LFANEW + 4, &machine.to_le_bytes());
        put(
            &mut m,
            LFANEW + 6,
            &(self.sections.len() as u16).to_le_bytes(),
        );
        put(&mut m, LFANEW + 8, &self.timestamp.to_le_bytes());
        put(&mut m, LFANEW + 20, &optional_len.to_le_bytes());
        let opt = LFANEW + 24;
        put(&mut m, opt, &magic.to_le_bytes());
        put(&mut m, opt + 56, &(self.size as u32).to_le_bytes());
        put(&mut m, opt + dirs - 4, &16u32.to_le_bytes());
        if let Some((base, entry)) = self.executable {
            const PAGE: u32 = 0x1000;
            // Executable, large address aware.
            put(&mut m, LFANEW + 22, &0x0022u16.to_le_bytes());
            put(&mut m, opt + 16, &entry.to_le_bytes()); // AddressOfEntryPoint
            put(&mut m, opt + 20, &entry.to_le_bytes()); // BaseOfCode
            put(&mut m, opt + 24, &base.to_le_bytes()); // ImageBase
            put(&mut m, opt + 32, &PAGE.to_le_bytes()); // SectionAlignment
            put(&mut m, opt + 36, &PAGE.to_le_bytes()); // FileAlignment
            put(&mut m, opt + 48, &6u16.to_le_bytes()); // MajorSubsystemVersion
            put(&mut m, opt + 60, &PAGE.to_le_bytes()); // SizeOfHeaders
            put(&mut m, opt + 68, &1u16.to_le_bytes()); // Subsystem: native
        }
        for (i, (name, rva, size, flags)) in self.sections.iter().enumerate() {
            let at = opt + usize::from(optional_len) + 40 * i;
            put(&mut m, at, name);
            for (j, v) in [size, rva, size, rva].into_iter().enumerate() {
                put(&mut m, at + 8 + 4 * j, &v.to_le_bytes());
            }
            put(&mut m, at + 36, &flags.to_le_bytes());
        }
        if !self.functions.is_empty() {
            self.functions.sort();
            let table: Vec<u8> = self
                .functions
                .iter()
                .flatten()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            put(&mut m, opt + dirs + 24, &(EXCEPTIONS as u32).to_le_bytes());
            put(
                &mut m,
                opt + dirs + 4 + 24,
                &(table.len() as u32).to_le_bytes(),
            );
            put(&mut m, EXCEPTIONS, &table);
        }
        for (index, rva, size) in &self.directories {
            put(&mut m, opt + dirs + 8 * index, &rva.to_le_bytes());
            put(&mut m, opt + dirs + 4 + 8 * index, &size.to_le_bytes());
        }
        for (at, b) in &self.bytes {
            put(&mut m, *at, b);
        }
        m
    }

    /// The headers alone (the first 0x200 bytes, before the exception directory): a file that
    /// says which image it is and holds nothing else, as a symbol store may keep one.
    pub fn build_headers(self) -> Vec<u8> {
        let mut m = self.build();
        m.truncate(EXCEPTIONS);
        m
    }
}

/// One unwind-code slot: the prologue offset, the operation and its 4-bit operand.
pub fn code(offset: u8, op: u8, info: u8) -> u16 {
    u16::from_le_bytes([offset, op | info << 4])
}

/// An UNWIND_INFO (version 1) with these slots, chained to `parent` if given.
pub fn unwind_info(
    prolog: u8,
    frame: (u8, u8),
    slots: &[u16],
    parent: Option<[u32; 3]>,
) -> Vec<u8> {
    let flags = if parent.is_some() { 4u8 } else { 0 };
    let mut v = vec![
        1 | flags << 3,
        prolog,
        slots.len() as u8,
        frame.0 | frame.1 << 4,
    ];
    v.extend(slots.iter().flat_map(|s| s.to_le_bytes()));
    if slots.len() % 2 == 1 {
        v.extend([0, 0]);
    }
    if let Some(p) = parent {
        v.extend(p.iter().flat_map(|x| x.to_le_bytes()));
    }
    v
}

/// Little-endian u64s laid out as stack bytes.
pub fn stack(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}
