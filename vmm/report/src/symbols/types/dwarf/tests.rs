//! The DWARF reader on tests/fixtures/linux_types.c, built here with the host's `cc -g`, against
//! tests/fixtures/linux_types.h.

use std::path::Path;
use std::process::Command;

use super::*;
use crate::symbols::types::tests::defines;
use crate::symbols::types::{field, linux_layout_from_elf};

fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

/// Builds the fixture; `tag` keeps parallel tests' outputs apart.
fn built(tag: &str) -> Vec<u8> {
    let out = std::env::temp_dir().join(format!("hvprof-linux-types-{}-{tag}", std::process::id()));
    let status = Command::new("cc")
        .args(["-g", "-O0", "-o"])
        .arg(&out)
        .arg(fixtures().join("linux_types.c"))
        .status()
        .expect("the host's cc runs (Debian package gcc)");
    assert!(status.success(), "cc failed on linux_types.c");
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    bytes
}

#[test]
fn reads_the_layout_from_dwarf() {
    let bytes = built("layout");
    let d = defines(&fixtures().join("linux_types.h"));
    let h = |n: &str| {
        *d.get(n)
            .unwrap_or_else(|| panic!("linux_types.h defines {n}"))
    };
    let l = linux_layout_from_elf(&bytes).unwrap();
    let t = &l.task_struct;
    assert_eq!(t.size, h("TASK_SIZE"));
    assert_eq!(t.flags, h("TASK_FLAGS"));
    assert_eq!(t.tasks, Some(h("TASK_TASKS")));
    assert_eq!(t.mm, h("TASK_MM"));
    assert_eq!(t.pid, h("TASK_PID"));
    assert_eq!(t.tgid, h("TASK_TGID"));
    assert_eq!(t.group_leader, h("TASK_GROUP_LEADER"));
    assert_eq!(t.start_time, h("TASK_START_TIME"));
    assert_eq!(t.comm, h("TASK_COMM"));
    assert_eq!(l.mm_struct.size, h("MM_SIZE"));
    assert_eq!(l.mm_struct.pgd, h("MM_PGD"));
    assert_eq!(l.pcpu_hot, None);
    // Symbols from the symbol table.
    assert!(l.symbols.init_task.is_some());
    assert!(l.symbols.current_task.is_some());
    assert_eq!(l.symbols.pcpu_hot, None);
}

#[test]
fn bitfields_and_arrays() {
    let bytes = built("bits");
    let file = object::File::parse(&bytes[..]).unwrap();
    let endian = RunTimeEndian::Little;
    let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    };
    let sections = gimli::DwarfSections::load(load).unwrap();
    let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));
    // The whole path, as the layout reads it.
    let l = linux_layout(&file).unwrap();
    assert_eq!(l.task_struct.flags, 0x2c);
    // Bitfields through the resolver: re-read the records the layout used.
    let mut found = Found(HashMap::new());
    let mut units = dwarf.units();
    while let Some(header) = units.next().unwrap() {
        let unit = dwarf.unit(header).unwrap();
        let reader = UnitReader {
            dwarf: &dwarf,
            unit: &unit,
            budget: Cell::new(MAX_MEMBERS),
        };
        let mut cursor = unit.entries();
        while let Some((_, e)) = cursor.next_dfs().unwrap() {
            if e.tag() == gimli::DW_TAG_structure_type
                && reader.name(e).as_deref() == Some("task_struct")
            {
                found.0.insert(
                    "task_struct".into(),
                    Rc::new(reader.read(e.offset(), 0).unwrap()),
                );
            }
        }
    }
    let f = field(&mut found, "task_struct", "in_execve")
        .unwrap()
        .unwrap();
    assert_eq!(
        f,
        Field {
            offset: 0x30,
            bits: Some((1, 1)),
            size: 4
        }
    );
    let f = field(&mut found, "task_struct", "comm").unwrap().unwrap();
    assert_eq!((f.offset, f.size), (0x738, 16));
}

#[test]
fn no_debug_information_is_an_error() {
    let bytes = built("none");
    let file = object::File::parse(&bytes[..]).unwrap();
    // Stripped of everything: an ELF header alone is not DWARF.
    assert!(linux_layout_from_elf(&bytes[..64]).is_err());
    assert!(linux_layout(&file).is_ok());
    assert!(matches!(
        linux_layout_from_elf(b"not an ELF"),
        Err(TypeError::Elf(_))
    ));
}
