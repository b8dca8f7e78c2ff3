//! The ISF reader on a real Windows 10 build's facts and on hostile files.

use std::io::Write;

use introspect::os::layout::LayoutError;
use serde_json::{json, Value};

use super::compressed::{unpack, Packing};
use super::*;
use crate::symbols::types::{field, TypesFormat};

pub(crate) mod fixtures;
use fixtures::{linux, win10, WIN10_19041_GUID};

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(v).unwrap()
}

pub(crate) fn xz(data: &[u8]) -> Vec<u8> {
    let mut w =
        lzma_rust2::XzWriter::new(Vec::new(), lzma_rust2::XzOptions::with_preset(1)).unwrap();
    w.write_all(data).unwrap();
    w.finish().unwrap()
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    w.write_all(data).unwrap();
    w.finish().unwrap()
}

fn windows(v: &Value) -> Result<WindowsLayout, TypeError> {
    match layout(&bytes(v))? {
        OsLayout::Windows(l) => Ok(l),
        OsLayout::Linux(_) => panic!("a Linux layout from a Windows table"),
    }
}

#[test]
fn a_real_windows_10_build_is_read_at_its_offsets_and_rvas() {
    let l = windows(&win10()).unwrap();
    assert_eq!(
        (l.kpcr.size, l.kpcr.self_, l.kpcr.current_prcb, l.kpcr.prcb),
        (45184, 24, 32, 384)
    );
    assert_eq!(l.kprcb.current_thread, 8);
    let e = l.ethread;
    assert_eq!(
        (e.tcb, e.create_time, e.unique_process, e.unique_thread),
        (0, 1072, 1144, 1152)
    );
    assert_eq!(e.thread_name, Some(1552));
    assert_eq!(l.kthread.process, 544);
    let p = l.eprocess;
    assert_eq!(
        (p.size, p.pcb, p.directory_table_base, p.unique_process_id),
        (2624, 0, 40, 1088)
    );
    assert_eq!(
        (p.create_time, p.image_file_name, p.active_process_links),
        (1128, 1448, 1096)
    );
    assert_eq!(
        (p.peb, p.user_directory_table_base, p.image_file_pointer),
        (1360, Some(904), Some(1440))
    );
    assert_eq!(l.peb.ldr, 24);
    assert_eq!(l.peb_ldr_data.in_load_order_module_list, 16);
    let d = l.ldr_data_table_entry;
    assert_eq!(
        (
            d.dll_base,
            d.size_of_image,
            d.full_dll_name,
            d.base_dll_name
        ),
        (48, 64, 72, 88)
    );
    assert_eq!((l.unicode_string.length, l.unicode_string.buffer), (0, 8));
    let s = l.symbols;
    assert_eq!(
        (s.ps_active_process_head, s.ps_loaded_module_list),
        (0xC1_E060, 0xC2_A2B0)
    );
    assert_eq!(s.ki_system_call64, Some(4_124_288));
    assert_eq!(s.ki_system_call64_shadow, Some(10_633_600));
    assert_eq!(s.ps_initial_system_process, Some(13_612_064));
    l.validate().unwrap();
}

#[test]
fn members_have_their_sizes_and_bitfields_their_bits() {
    let isf = parse(&bytes(&win10())).unwrap();
    let mut t = IsfTypes::new(&isf);
    let f = |t: &mut IsfTypes<'_>, s, p| field(t, s, p).unwrap().unwrap();
    let folded = f(&mut t, "_EPROCESS", "AccountingFolded");
    assert_eq!(
        (folded.offset, folded.bits, folded.size),
        (1120, Some((1, 1)), 4)
    );
    assert_eq!(f(&mut t, "_EPROCESS", "ImageFileName").size, 15);
    assert_eq!(f(&mut t, "_EPROCESS", "Peb").size, 8);
    assert_eq!(f(&mut t, "_EPROCESS", "ActiveProcessLinks").size, 16);
    assert_eq!(f(&mut t, "_EPROCESS", "Pcb.DirectoryTableBase").offset, 40);
    assert_eq!(f(&mut t, "_ETHREAD", "Cid.UniqueThread").offset, 1152);
    assert_eq!(field(&mut t, "_EPROCESS", "Nothing").unwrap(), None);
}

#[test]
fn xz_and_gzip_files_read_as_the_plain_one() {
    let plain = bytes(&win10());
    let want = layout(&plain).unwrap();
    for packed in [xz(&plain), gz(&plain)] {
        assert_eq!(layout(&packed).unwrap(), want);
    }
}

#[test]
fn isf_files_are_told_apart_by_their_first_bytes() {
    let plain = bytes(&win10());
    let head = |b: &[u8]| b[..b.len().min(crate::symbols::types::SNIFF_BYTES)].to_vec();
    assert_eq!(
        TypesFormat::sniff(&head(&plain)),
        Some(TypesFormat::Isf(Packing::Json))
    );
    assert_eq!(
        TypesFormat::sniff(&head(&xz(&plain))),
        Some(TypesFormat::Isf(Packing::Xz))
    );
    assert_eq!(
        TypesFormat::sniff(&head(&gz(&plain))),
        Some(TypesFormat::Isf(Packing::Gzip))
    );
    assert_eq!(
        TypesFormat::sniff(b"\xef\xbb\xbf \n{"),
        Some(TypesFormat::Isf(Packing::Json))
    );
    assert_eq!(TypesFormat::sniff(b"[1, 2]"), None);
    assert!(matches!(
        crate::symbols::types::layout_from_file(&xz(&plain)),
        Ok(OsLayout::Windows(_))
    ));
}

#[test]
fn a_missing_structure_member_or_symbol_is_named() {
    let mut v = win10();
    v["user_types"].as_object_mut().unwrap().remove("_KPRCB");
    assert!(matches!(
        windows(&v),
        Err(TypeError::MissingStruct("_KPRCB"))
    ));

    let mut v = win10();
    v["user_types"]["_EPROCESS"]["fields"]
        .as_object_mut()
        .unwrap()
        .remove("ImageFileName");
    let err = windows(&v).unwrap_err();
    assert!(matches!(
        err,
        TypeError::Layout(LayoutError::Missing {
            structure: "_EPROCESS",
            member: "ImageFileName"
        })
    ));
    assert!(err.to_string().contains("ImageFileName"), "{err}");

    // A member path through a structure the file lacks.
    let mut v = win10();
    v["user_types"].as_object_mut().unwrap().remove("_KPROCESS");
    assert!(matches!(
        windows(&v),
        Err(TypeError::Layout(LayoutError::Missing {
            member: "Pcb.DirectoryTableBase",
            ..
        }))
    ));

    let mut v = win10();
    v["symbols"]
        .as_object_mut()
        .unwrap()
        .remove("PsActiveProcessHead");
    assert!(matches!(
        windows(&v),
        Err(TypeError::MissingSymbol("PsActiveProcessHead"))
    ));
}

fn schema_error(v: &Value) -> String {
    match windows(v) {
        Err(TypeError::Isf(IsfError::Schema(why))) => why,
        other => panic!("not a schema error: {other:?}"),
    }
}

#[test]
fn schema_violations_are_refused_naming_where() {
    let mut v = win10();
    v["user_types"]["_EPROCESS"]["fields"]["Peb"]["offset"] = json!("1360");
    let why = schema_error(&v);
    assert!(
        why.contains("user_types._EPROCESS.fields.Peb.offset"),
        "{why}"
    );

    let mut v = win10();
    v["user_types"]["_EPROCESS"]["fields"]["Peb"]["type"] =
        json!({"kind": "pointr", "subtype": {}});
    let why = schema_error(&v);
    assert!(
        why.contains("user_types._EPROCESS.fields.Peb.type"),
        "{why}"
    );

    let mut v = win10();
    v["user_types"]["_KPCR"]["colour"] = json!("blue");
    assert!(schema_error(&v).contains("colour"));

    let mut v = win10();
    v["user_types"]["_KPCR"]["kind"] = json!("enum");
    assert!(schema_error(&v).contains("user_types._KPCR.kind"));

    let mut v = win10();
    v["base_types"]["pointer"]["endian"] = json!("middle");
    assert!(schema_error(&v).contains("base_types.pointer.endian"));

    let mut v = win10();
    v.as_object_mut().unwrap().remove("enums");
    assert!(schema_error(&v).contains("enums"));

    let mut v = win10();
    v["symbols"]["PsActiveProcessHead"]["address"] = json!(-1);
    assert!(schema_error(&v).contains("symbols.PsActiveProcessHead.address"));

    for format in ["7.0.0", "4.0.0", "3.2.1", "6.1", "six"] {
        let mut v = win10();
        v["metadata"]["format"] = json!(format);
        assert!(matches!(windows(&v), Err(TypeError::Isf(IsfError::Format(f))) if f == format));
    }
    let mut v = win10();
    v["metadata"]["format"] = json!("4.1.0");
    windows(&v).unwrap();

    let mut v = win10();
    v["metadata"].as_object_mut().unwrap().remove("windows");
    assert!(matches!(
        windows(&v),
        Err(TypeError::Isf(IsfError::UnknownOs))
    ));

    let mut trailing = bytes(&win10());
    trailing.extend_from_slice(b" {}");
    assert!(matches!(
        layout(&trailing),
        Err(TypeError::Isf(IsfError::Schema(_)))
    ));
}

#[test]
fn deep_nesting_is_refused_without_recursing_far() {
    let mut ty = String::from(r#"{"kind":"base","name":"void"}"#);
    for _ in 0..10_000 {
        ty = format!(r#"{{"kind":"pointer","subtype":{ty}}}"#);
    }
    let text = bytes(&win10());
    let text = String::from_utf8(text).unwrap().replacen(
        r#""kind": "pointer","#,
        &format!(r#""kind": "pointer", "base": "pointer", "subtype": {ty}, "_x":"#),
        1,
    );
    let err = layout(text.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("recursion limit"), "{err}");

    // Within serde_json's limit, descriptor chains past MAX_DEPTH are cut short, not followed.
    let mut ty = json!({"kind": "base", "name": "unsigned long"});
    for _ in 0..60 {
        ty = json!({"kind": "array", "count": 2, "subtype": ty});
    }
    let mut v = win10();
    v["user_types"]["_KPROCESS"]["fields"]["Deep"] = json!({"offset": 0, "type": ty});
    windows(&v).unwrap();
}

#[test]
fn huge_sizes_and_offsets_are_refused_or_clamped() {
    let mut v = win10();
    v["user_types"]["_EPROCESS"]["size"] = json!(1u64 << 40);
    assert!(matches!(
        windows(&v),
        Err(TypeError::Layout(LayoutError::BadSize {
            structure: "_EPROCESS",
            ..
        }))
    ));

    let mut v = win10();
    v["user_types"]["_EPROCESS"]["fields"]["Peb"]["offset"] = json!(u64::MAX);
    assert!(matches!(
        windows(&v),
        Err(TypeError::Layout(LayoutError::Missing {
            structure: "_EPROCESS",
            member: "Peb"
        }))
    ));

    let mut v = win10();
    v["user_types"]["_EPROCESS"]["fields"]["ImageFileName"]["type"]["count"] = json!(u64::MAX);
    let isf = parse(&bytes(&v)).unwrap();
    let name = field(&mut IsfTypes::new(&isf), "_EPROCESS", "ImageFileName")
        .unwrap()
        .unwrap();
    assert_eq!(name.size, u32::MAX);

    let mut v = win10();
    v["symbols"]["PsLoadedModuleList"]["address"] = json!(1u64 << 32);
    assert!(matches!(
        windows(&v),
        Err(TypeError::Isf(IsfError::BadRva {
            name: "PsLoadedModuleList",
            ..
        }))
    ));
}

#[test]
fn a_structure_with_too_many_members_is_refused() {
    let mut v = win10();
    let fields: serde_json::Map<String, Value> = (0..=crate::symbols::types::MAX_MEMBERS)
        .map(|i| {
            (
                format!("m{i}"),
                json!({"offset": 0, "type": {"kind": "base", "name": "void"}}),
            )
        })
        .collect();
    v["user_types"]["_KPRCB"]["fields"] = Value::Object(fields);
    assert!(matches!(windows(&v), Err(TypeError::TooBig(s)) if s == "_KPRCB"));
}

#[test]
fn decompression_stops_at_its_limit() {
    // An xz bomb: 16 MiB of zeros in a few KiB.
    let bomb = {
        let mut w =
            lzma_rust2::XzWriter::new(Vec::new(), lzma_rust2::XzOptions::with_preset(1)).unwrap();
        w.write_all(b"{").unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..16 {
            w.write_all(&zeros).unwrap();
        }
        w.finish().unwrap()
    };
    assert!(bomb.len() < 16 << 10, "{}", bomb.len());
    assert_eq!(
        unpack(&bomb, 1 << 20).unwrap_err(),
        IsfError::TooLarge { limit: 1 << 20 }
    );
    let gz_bomb = gz(&vec![b' '; 8 << 20]);
    assert_eq!(
        unpack(&gz_bomb, 1 << 20).unwrap_err(),
        IsfError::TooLarge { limit: 1 << 20 }
    );
    let plain = bytes(&win10());
    assert_eq!(
        unpack(&plain, 100).unwrap_err(),
        IsfError::TooLarge { limit: 100 }
    );
    assert_eq!(
        unpack(&xz(&plain), plain.len() as u64).unwrap().len(),
        plain.len()
    );
}

#[test]
fn corrupt_or_non_json_contents_are_refused() {
    let plain = bytes(&win10());
    let mut bad = xz(&plain);
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    assert!(matches!(layout(&bad), Err(TypeError::Isf(IsfError::Xz(_)))));
    let short = gz(&plain);
    assert!(matches!(
        layout(&short[..short.len() / 2]),
        Err(TypeError::Isf(IsfError::Gzip(_)))
    ));
    assert!(matches!(
        layout(&xz(b"\x7fELF")),
        Err(TypeError::Isf(IsfError::NotJson))
    ));
    assert!(matches!(
        layout(&gz(b"")),
        Err(TypeError::Isf(IsfError::NotJson))
    ));
}

#[test]
fn a_pack_file_must_be_the_build_wanted() {
    let plain = bytes(&win10());
    let id = |guid: &str, age| PdbId {
        guid: guid.into(),
        age,
    };
    windows_layout_for(
        &plain,
        "ntkrnlmp.pdb",
        &id(&WIN10_19041_GUID.to_lowercase(), 1),
    )
    .unwrap();
    for (name, wanted) in [
        ("ntkrnlmp.pdb", id(WIN10_19041_GUID, 2)),
        ("ntkrnlmp.pdb", id(&"0".repeat(32), 1)),
        ("ntoskrnl.pdb", id(WIN10_19041_GUID, 1)),
    ] {
        let err = windows_layout_for(&plain, name, &wanted).unwrap_err();
        assert!(
            matches!(err, TypeError::Isf(IsfError::OtherBuild { .. })),
            "{err}"
        );
        assert!(err.to_string().contains(WIN10_19041_GUID), "{err}");
    }
}

#[test]
fn a_linux_table_is_read_through_anonymous_members_with_link_time_symbols() {
    let OsLayout::Linux(l) = layout(&bytes(&linux())).unwrap() else {
        panic!("not a Linux layout");
    };
    let t = l.task_struct;
    assert_eq!(
        (t.size, t.pid, t.tgid, t.comm, t.mm),
        (0x2400, 0x598, 0x59c, 0x700, 0x4c8)
    );
    assert_eq!(
        (t.group_leader, t.flags, t.start_time, t.tasks),
        (0x5d0, 0x2c, 0x6c0, Some(0x478))
    );
    assert_eq!((l.mm_struct.size, l.mm_struct.pgd), (0x400, 0x48));
    assert_eq!(l.pcpu_hot, None);
    let s = l.symbols;
    assert_eq!(
        (s.current_task, s.this_cpu_off, s.pcpu_hot),
        (Some(0x21440), Some(0x21448), None)
    );
    assert_eq!(s.per_cpu_offset, Some(0xffff_ffff_8280_0000));
    assert_eq!(s.init_task, Some(0xffff_ffff_82a0_c940));

    // Without the anonymous flag the union's members are its own, not task_struct's.
    let mut v = linux();
    v["user_types"]["task_struct"]["fields"]["unnamed_field_0"]["anonymous"] = json!(false);
    assert!(matches!(
        layout(&bytes(&v)),
        Err(TypeError::Layout(LayoutError::Missing {
            structure: "task_struct",
            member: "comm"
        }))
    ));
}

#[test]
fn anonymous_members_that_contain_themselves_are_bounded() {
    let mut v = linux();
    v["user_types"]["unnamed_1a2b"]["fields"]["again"] =
        json!({"offset": 0, "anonymous": true, "type": {"kind": "union", "name": "unnamed_1a2b"}});
    assert!(matches!(layout(&bytes(&v)), Err(TypeError::TooBig(_))));
}
