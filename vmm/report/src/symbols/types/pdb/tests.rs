//! The PDB type reader on tests/fixtures/pe/ntproc.c, built here with clang and lld-link
//! (Debian's `clang` and `lld`; without them the test fails and says so), against the offsets
//! of tests/fixtures/pe/ntproc.h.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::symbols::types::field;
use crate::symbols::types::tests::defines;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pe")
}

fn run(tool: &str, package: &str, args: &[&str]) {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool} (Debian package {package}) could not run: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds ntproc.c into a DLL and its PDB; returns the PDB's and the DLL's bytes. `tag` keeps
/// parallel tests' directories apart.
pub(super) fn ntproc(tag: &str) -> (Vec<u8>, Vec<u8>) {
    let dir = std::env::temp_dir().join(format!("hvprof-ntproc-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixtures().join("ntproc.c");
    let obj = dir.join("ntproc.obj");
    let pdb = dir.join("ntproc.pdb");
    let dll = dir.join("ntproc.dll");
    let s = |p: &Path| p.display().to_string();
    run(
        "clang",
        "clang",
        &[
            "--target=x86_64-pc-windows-msvc",
            "-g",
            "-gcodeview",
            "-O1",
            "-c",
            &s(&src),
            "-o",
            &s(&obj),
        ],
    );
    run(
        "lld-link",
        "lld",
        &[
            "/dll",
            "/debug",
            "/noentry",
            "/nodefaultlib",
            &format!("/pdb:{}", s(&pdb)),
            &format!("/out:{}", s(&dll)),
            &s(&obj),
        ],
    );
    let bytes = (std::fs::read(&pdb).unwrap(), std::fs::read(&dll).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

/// The RVA of each of the DLL's exports, by name: an independent witness for the symbols.
fn exports(dll: &[u8]) -> HashMap<String, u32> {
    use object::Object;
    let file = object::File::parse(dll).unwrap();
    let base = file.relative_address_base();
    file.exports()
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let (object::NameOrOrdinal::Name(name), object::ExportTarget::Address { address }) =
                (e.name(), e.target())
            else {
                return None;
            };
            let rva = u32::try_from(address - base).unwrap();
            Some((String::from_utf8_lossy(name).into_owned(), rva))
        })
        .collect()
}

#[test]
fn reads_the_stand_in_kernels_layout_from_its_pdb() {
    let (bytes, dll) = ntproc("layout");
    let d = defines(&fixtures().join("ntproc.h"));
    let h = |n: &str| *d.get(n).unwrap_or_else(|| panic!("ntproc.h defines {n}"));
    let l = windows_layout(&bytes).unwrap();

    assert_eq!(l.kpcr.size, h("KPCR_SIZE"));
    assert_eq!(l.kpcr.self_, h("KPCR_SELF"));
    assert_eq!(l.kpcr.current_prcb, h("KPCR_CURRENTPRCB"));
    assert_eq!(l.kpcr.prcb, h("KPCR_PRCB"));
    assert_eq!(l.kprcb.current_thread, h("KPRCB_CURRENTTHREAD"));
    assert_eq!(l.kthread.process, h("KTHREAD_PROCESS"));
    assert_eq!(l.ethread.tcb, h("ETHREAD_TCB"));
    assert_eq!(l.ethread.unique_process, h("ETHREAD_CID_UNIQUEPROCESS"));
    assert_eq!(l.ethread.unique_thread, h("ETHREAD_CID_UNIQUETHREAD"));
    assert_eq!(l.ethread.create_time, h("ETHREAD_CREATETIME"));
    assert_eq!(l.ethread.thread_name, Some(h("ETHREAD_THREADNAME")));
    let e = &l.eprocess;
    assert_eq!(e.size, h("EPROCESS_SIZE"));
    assert_eq!(e.pcb, h("EPROCESS_PCB"));
    assert_eq!(e.directory_table_base, h("EPROCESS_PCB_DIRECTORYTABLEBASE"));
    assert_eq!(
        e.user_directory_table_base,
        Some(h("EPROCESS_PCB_USERDIRECTORYTABLEBASE"))
    );
    assert_eq!(e.unique_process_id, h("EPROCESS_UNIQUEPROCESSID"));
    assert_eq!(e.create_time, h("EPROCESS_CREATETIME"));
    assert_eq!(e.image_file_name, h("EPROCESS_IMAGEFILENAME"));
    assert_eq!(e.active_process_links, h("EPROCESS_ACTIVEPROCESSLINKS"));
    assert_eq!(e.peb, h("EPROCESS_PEB"));
    assert_eq!(e.image_file_pointer, Some(h("EPROCESS_IMAGEFILEPOINTER")));
    assert_eq!(e.wow64_process, Some(h("EPROCESS_WOW64PROCESS")));
    assert_eq!(
        e.wow64_peb32, None,
        "the earlier builds' Wow64Process is not declared"
    );
    assert_eq!(l.peb.ldr, h("PEB_LDR"));
    assert_eq!(
        l.peb_ldr_data.in_load_order_module_list,
        h("PEB_LDR_DATA_INLOADORDERMODULELIST")
    );
    let m = &l.ldr_data_table_entry;
    assert_eq!(
        m.in_load_order_links,
        h("LDR_DATA_TABLE_ENTRY_INLOADORDERLINKS")
    );
    assert_eq!(m.dll_base, h("LDR_DATA_TABLE_ENTRY_DLLBASE"));
    assert_eq!(m.size_of_image, h("LDR_DATA_TABLE_ENTRY_SIZEOFIMAGE"));
    assert_eq!(m.full_dll_name, h("LDR_DATA_TABLE_ENTRY_FULLDLLNAME"));
    assert_eq!(m.base_dll_name, h("LDR_DATA_TABLE_ENTRY_BASEDLLNAME"));
    assert_eq!(l.unicode_string.length, h("UNICODE_STRING_LENGTH"));
    assert_eq!(l.unicode_string.buffer, h("UNICODE_STRING_BUFFER"));
    assert!(l.validate().is_ok());

    // The symbols' RVAs are the DLL's exports'.
    let s = &l.symbols;
    let x = exports(&dll);
    assert_eq!(s.ps_active_process_head, x["PsActiveProcessHead"]);
    assert_eq!(s.ps_loaded_module_list, x["PsLoadedModuleList"]);
    assert_eq!(s.ki_system_call64, Some(x["KiSystemCall64"]));
    assert_eq!(
        s.ps_initial_system_process,
        Some(x["PsInitialSystemProcess"])
    );
    assert_eq!(s.ki_system_call64_shadow, None);

    // Members past the field list's continuations, bitfields and arrays.
    let tpi_pdb = &mut pdb::PDB::open(Cursor::new(&bytes[..])).unwrap();
    let raw = tpi_pdb
        .raw_stream(pdb::StreamIndex(2))
        .unwrap()
        .unwrap()
        .as_slice()
        .to_vec();
    let tpi = tpi_pdb.type_information().unwrap();
    let mut t = PdbTypes::new(&tpi, &raw).unwrap();
    let marked = field(&mut t, "_EPROCESS", "Marked").unwrap().unwrap();
    assert_eq!(
        marked,
        Field {
            offset: h("EPROCESS_FLAGS"),
            bits: Some((7, 3)),
            size: 4
        }
    );
    let high = field(&mut t, "_KPRCB", "Mixed.High").unwrap().unwrap();
    assert_eq!((high.offset, high.size), (h("KPRCB_MIXED_HIGH"), 4));
    let name = field(&mut t, "_EPROCESS", "ImageFileName")
        .unwrap()
        .unwrap();
    assert_eq!(name.size, 15);
    let last = field(
        &mut t,
        "_EPROCESS",
        "FillerMemberWithARatherLongName_x333333",
    )
    .unwrap()
    .unwrap();
    assert_eq!(last.offset, h("EPROCESS_FILLER") + 4095);
    assert_eq!(
        field(&mut t, "_EPROCESS", "Pcb.NoSuchMember").unwrap(),
        None
    );
    assert_eq!(field(&mut t, "_NO_SUCH_TYPE", "Pcb").unwrap(), None);
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for bytes in [
        &b""[..],
        b"Microsoft C/C++ MSF 7.00\r\n\x1aDS\0\0\0",
        &[0xffu8; 4096],
    ] {
        assert!(windows_layout(bytes).is_err());
    }
}
#[test]
fn mutated_pdbs_are_errors_or_valid_layouts() {
    let (good, _) = ntproc("mutated");
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..300 {
        let mut b = good.clone();
        for _ in 0..(1 + rnd() % 8) {
            let at = usize::try_from(rnd() % b.len() as u64).unwrap();
            b[at] = rnd().to_le_bytes()[0];
        }
        if let Ok(l) = windows_layout(&b) {
            assert!(l.validate().is_ok());
        }
    }
}
