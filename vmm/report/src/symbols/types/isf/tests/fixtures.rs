//! ISF files for the tests: one real Windows build's facts, and a synthetic Linux table.

use serde_json::{json, Value};

/// Windows 10 2004 (ntoskrnl 10.0.19041.329), ntkrnlmp.pdb GUID BBED7C2955FBE4522AAA23F4B8677AD9
/// age 1: sizes, member offsets and types, and symbol RVAs as listed in its public ISF file,
/// JPCERTCC/Windows-Symbol-Tables (BSD-3-Clause),
/// symbols/windows/ntkrnlmp.pdb/BBED7C2955FBE4522AAA23F4B8677AD9-1.json.xz (format 6.1.0, made
/// by Volatility 2.7.0). Only the members hvprof reads, and a bitfield, are kept.
pub(super) const WIN10_19041_GUID: &str = "BBED7C2955FBE4522AAA23F4B8677AD9";

/// (structure, kind, size, [(member, offset, type descriptor)]).
type Table = [(&'static str, &'static str, u64, &'static [Row])];

/// (member, offset, type descriptor as JSON).
type Row = (&'static str, u64, &'static str);

#[rustfmt::skip]
const WIN10_19041: &Table = &[
    ("_KPCR", "struct", 45184, &[
        ("Self", 24, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_KPCR"}}"#),
        ("CurrentPrcb", 32, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_KPRCB"}}"#),
        ("Prcb", 384, r#"{"kind":"struct","name":"_KPRCB"}"#),
    ]),
    ("_KPRCB", "struct", 44800, &[
        ("CurrentThread", 8, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_KTHREAD"}}"#),
    ]),
    ("_ETHREAD", "struct", 2200, &[
        ("Tcb", 0, r#"{"kind":"struct","name":"_KTHREAD"}"#),
        ("CreateTime", 1072, r#"{"kind":"union","name":"_LARGE_INTEGER"}"#),
        ("Cid", 1144, r#"{"kind":"struct","name":"_CLIENT_ID"}"#),
        ("ThreadName", 1552, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_UNICODE_STRING"}}"#),
    ]),
    ("_CLIENT_ID", "struct", 16, &[
        ("UniqueProcess", 0, r#"{"kind":"pointer","subtype":{"kind":"base","name":"void"}}"#),
        ("UniqueThread", 8, r#"{"kind":"pointer","subtype":{"kind":"base","name":"void"}}"#),
    ]),
    ("_KTHREAD", "struct", 1072, &[
        ("Process", 544, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_KPROCESS"}}"#),
    ]),
    ("_EPROCESS", "struct", 2624, &[
        ("Pcb", 0, r#"{"kind":"struct","name":"_KPROCESS"}"#),
        ("UniqueProcessId", 1088, r#"{"kind":"pointer","subtype":{"kind":"base","name":"void"}}"#),
        ("ActiveProcessLinks", 1096, r#"{"kind":"struct","name":"_LIST_ENTRY"}"#),
        ("AccountingFolded", 1120, r#"{"bit_length":1,"bit_position":1,"kind":"bitfield","type":{"kind":"base","name":"unsigned long"}}"#),
        ("CreateTime", 1128, r#"{"kind":"union","name":"_LARGE_INTEGER"}"#),
        ("Peb", 1360, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_PEB"}}"#),
        ("ImageFilePointer", 1440, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_FILE_OBJECT"}}"#),
        ("ImageFileName", 1448, r#"{"count":15,"kind":"array","subtype":{"kind":"base","name":"unsigned char"}}"#),
    ]),
    ("_KPROCESS", "struct", 1080, &[
        ("DirectoryTableBase", 40, r#"{"kind":"base","name":"unsigned long long"}"#),
        ("UserDirectoryTableBase", 904, r#"{"kind":"base","name":"unsigned long long"}"#),
    ]),
    ("_PEB", "struct", 1992, &[
        ("Ldr", 24, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_PEB_LDR_DATA"}}"#),
    ]),
    ("_PEB_LDR_DATA", "struct", 88, &[
        ("InLoadOrderModuleList", 16, r#"{"kind":"struct","name":"_LIST_ENTRY"}"#),
    ]),
    ("_LDR_DATA_TABLE_ENTRY", "struct", 288, &[
        ("InLoadOrderLinks", 0, r#"{"kind":"struct","name":"_LIST_ENTRY"}"#),
        ("DllBase", 48, r#"{"kind":"pointer","subtype":{"kind":"base","name":"void"}}"#),
        ("SizeOfImage", 64, r#"{"kind":"base","name":"unsigned long"}"#),
        ("FullDllName", 72, r#"{"kind":"struct","name":"_UNICODE_STRING"}"#),
        ("BaseDllName", 88, r#"{"kind":"struct","name":"_UNICODE_STRING"}"#),
    ]),
    ("_UNICODE_STRING", "struct", 16, &[
        ("Length", 0, r#"{"kind":"base","name":"unsigned short"}"#),
        ("Buffer", 8, r#"{"kind":"pointer","subtype":{"kind":"base","name":"wchar"}}"#),
    ]),
    ("_LIST_ENTRY", "struct", 16, &[
        ("Flink", 0, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_LIST_ENTRY"}}"#),
        ("Blink", 8, r#"{"kind":"pointer","subtype":{"kind":"struct","name":"_LIST_ENTRY"}}"#),
    ]),
    ("_LARGE_INTEGER", "union", 8, &[]),
];

/// The same file's symbols (RVAs).
const WIN10_19041_SYMBOLS: &[(&str, u64)] = &[
    ("PsActiveProcessHead", 12_705_888),
    ("PsLoadedModuleList", 12_755_632),
    ("KiSystemCall64", 4_124_288),
    ("KiSystemCall64Shadow", 10_633_600),
    ("PsInitialSystemProcess", 13_612_064),
];

/// The same file's base types that the table names.
fn base_types() -> Value {
    let base = |kind: &str, signed: bool, size: u64| json!({"endian": "little", "kind": kind, "signed": signed, "size": size});
    json!({
        "unsigned char": base("char", false, 1),
        "unsigned short": base("int", false, 2),
        "unsigned long": base("int", false, 4),
        "unsigned long long": base("int", false, 8),
        "wchar": base("int", false, 2),
        "void": base("void", true, 0),
        "pointer": base("int", false, 8),
    })
}

/// `user_types` from a table.
fn user_types(table: &Table) -> Value {
    let mut types = serde_json::Map::new();
    for (name, kind, size, members) in table {
        let mut fields = serde_json::Map::new();
        for (member, offset, ty) in *members {
            let ty: Value = serde_json::from_str(ty).unwrap();
            fields.insert(member.to_string(), json!({"offset": offset, "type": ty}));
        }
        types.insert(
            name.to_string(),
            json!({"kind": kind, "size": size, "fields": fields}),
        );
    }
    Value::Object(types)
}

/// The Windows 10 19041 ISF file, as JSON.
pub(crate) fn win10() -> Value {
    let symbols: serde_json::Map<String, Value> = WIN10_19041_SYMBOLS
        .iter()
        .map(|(n, a)| (n.to_string(), json!({"address": a})))
        .collect();
    json!({
        "metadata": {
            "format": "6.1.0",
            "producer": {"name": "volatility3", "version": "2.7.0"},
            "windows": {"pdb": {
                "GUID": WIN10_19041_GUID, "age": 1, "database": "ntkrnlmp.pdb",
                "machine_type": 34404
            }}
        },
        "base_types": base_types(),
        "user_types": user_types(WIN10_19041),
        "enums": {},
        "symbols": symbols,
    })
}

/// A Linux 6.1 kernel's table as dwarf2json writes it (synthetic offsets): `comm` and `pgd`
/// inside anonymous members, symbols as link-time addresses, per-CPU ones as offsets.
pub(crate) fn linux() -> Value {
    let int = |size: u64| json!({"endian": "little", "kind": "int", "signed": true, "size": size});
    let base = |name: &str| json!({"kind": "base", "name": name});
    let ptr = |name: &str| json!({"kind": "pointer", "subtype": {"kind": "struct", "name": name}});
    json!({
        "metadata": {
            "format": "6.2.0",
            "producer": {"name": "dwarf2json", "version": "0.8.0"},
            "linux": {"symbols": [{"kind": "symtab", "name": "vmlinux"}]}
        },
        "base_types": {"int": int(4), "unsigned int": int(4), "long long unsigned int": int(8),
                       "char": int(1), "pointer": int(8)},
        "user_types": {
            "task_struct": {"kind": "struct", "size": 0x2400, "fields": {
                "flags": {"offset": 0x2c, "type": base("unsigned int")},
                "tasks": {"offset": 0x478, "type": {"kind": "struct", "name": "list_head"}},
                "mm": {"offset": 0x4c8, "type": ptr("mm_struct")},
                "pid": {"offset": 0x598, "type": base("int")},
                "tgid": {"offset": 0x59c, "type": base("int")},
                "group_leader": {"offset": 0x5d0, "type": ptr("task_struct")},
                "start_time": {"offset": 0x6c0, "type": base("long long unsigned int")},
                "unnamed_field_0": {"offset": 0x700, "anonymous": true,
                                    "type": {"kind": "union", "name": "unnamed_1a2b"}},
            }},
            "unnamed_1a2b": {"kind": "union", "size": 16, "fields": {
                "comm": {"offset": 0, "type": {"kind": "array", "count": 16, "subtype": base("char")}},
            }},
            "mm_struct": {"kind": "struct", "size": 0x400, "fields": {
                "unnamed_field_0": {"offset": 0, "anonymous": true,
                                    "type": {"kind": "struct", "name": "unnamed_3c4d"}},
            }},
            "unnamed_3c4d": {"kind": "struct", "size": 0x3c0, "fields": {
                "pgd": {"offset": 0x48, "type": {"kind": "pointer", "subtype": base("long long unsigned int")}},
            }},
            "list_head": {"kind": "struct", "size": 16, "fields": {}},
        },
        "enums": {"pid_type": {"size": 4, "base": "unsigned int", "constants": {"PIDTYPE_PID": 0}}},
        "symbols": {
            "current_task": {"address": 0x21440u64, "type": ptr("task_struct")},
            "this_cpu_off": {"address": 0x21448u64},
            "__per_cpu_offset": {"address": 0xffff_ffff_8280_0000u64},
            "init_task": {"address": 0xffff_ffff_82a0_c940u64},
            "linux_banner": {"address": 0xffff_ffff_8220_0100u64, "constant_data": "TGludXg="},
        },
    })
}
