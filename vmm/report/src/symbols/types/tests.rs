//! The member resolver on hand-made records: paths, anonymous members, depth bounds.

use std::path::Path;

use super::*;

/// The `#define NAME 0xVALUE` lines of a fixture header.
pub(super) fn defines(header: &Path) -> HashMap<String, u32> {
    let text = std::fs::read_to_string(header).unwrap();
    text.lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("#define ")?.split_whitespace();
            let (name, value) = (w.next()?, w.next()?);
            let v = u32::from_str_radix(value.strip_prefix("0x")?, 16).ok()?;
            Some((name.to_string(), v))
        })
        .collect()
}

struct Map(HashMap<String, Rc<Record>>);

impl Records for Map {
    fn record(&mut self, name: &str) -> Result<Option<Rc<Record>>, TypeError> {
        Ok(self.0.get(name).cloned())
    }
}

fn member(name: &str, offset: u32, ty: Ty) -> Member {
    Member {
        name: name.into(),
        field: Field {
            offset,
            bits: None,
            size: 8,
        },
        ty,
    }
}

#[test]
fn paths_go_through_named_and_anonymous_members() {
    let inner = Record {
        size: 16,
        members: vec![member("pgd", 8, Ty::Other)],
    };
    let anon = Record {
        size: 32,
        members: vec![member("", 16, Ty::Anon(Rc::new(inner)))],
    };
    let mm = Record {
        size: 0x100,
        members: vec![member("", 0x40, Ty::Anon(Rc::new(anon)))],
    };
    let task = Record {
        size: 0x200,
        members: vec![member("mm", 0x10, Ty::Named("mm".into()))],
    };
    let mut m = Map(HashMap::from([
        ("mm".to_string(), Rc::new(mm)),
        ("task".to_string(), Rc::new(task)),
    ]));
    assert_eq!(field(&mut m, "mm", "pgd").unwrap().unwrap().offset, 0x58);
    assert_eq!(
        field(&mut m, "task", "mm.pgd").unwrap().unwrap().offset,
        0x68
    );
    assert_eq!(field(&mut m, "task", "mm.nothing").unwrap(), None);
    assert_eq!(field(&mut m, "task", "mm.pgd.deeper").unwrap(), None);
    assert_eq!(field(&mut m, "nothing", "mm").unwrap(), None);
}

#[test]
fn anonymous_nesting_is_bounded() {
    let mut rec = Record {
        size: 8,
        members: vec![member("x", 0, Ty::Other)],
    };
    for _ in 0..MAX_DEPTH + 4 {
        rec = Record {
            size: 8,
            members: vec![member("", 0, Ty::Anon(Rc::new(rec)))],
        };
    }
    let mut m = Map(HashMap::from([("deep".to_string(), Rc::new(rec))]));
    assert_eq!(field(&mut m, "deep", "x").unwrap(), None);
}

#[test]
fn a_missing_mandatory_member_is_named() {
    let mut m = Map(HashMap::from([(
        "mm_struct".to_string(),
        Rc::new(Record {
            size: 0x100,
            members: vec![member("pgdir", 0x50, Ty::Other)],
        }),
    )]));
    let err = read!(&mut m, MmStruct).unwrap_err();
    assert_eq!(err.to_string(), "mm_struct has no member pgd");
    let mut empty = Map(HashMap::new());
    let err = read!(&mut empty, MmStruct).unwrap_err();
    assert!(matches!(err, TypeError::MissingStruct("mm_struct")));
}

#[test]
fn a_pcpu_hot_without_current_task_is_none() {
    let rec = |members| {
        Rc::new(Record {
            size: 0x100,
            members,
        })
    };
    let task = [
        "pid",
        "tgid",
        "comm",
        "mm",
        "group_leader",
        "flags",
        "start_time",
    ]
    .iter()
    .enumerate()
    .map(|(i, n)| member(n, 8 * u32::try_from(i).unwrap(), Ty::Other))
    .collect();
    let mut m = Map(HashMap::from([
        ("task_struct".to_string(), rec(task)),
        (
            "mm_struct".to_string(),
            rec(vec![member("pgd", 0x50, Ty::Other)]),
        ),
        (
            "pcpu_hot".to_string(),
            rec(vec![member("cpu_number", 0, Ty::Other)]),
        ),
    ]));
    let l = linux_structures(&mut m).unwrap();
    assert_eq!(l.pcpu_hot, None);
    assert_eq!(l.task_struct.start_time, 0x30);
    m.0.insert(
        "pcpu_hot".to_string(),
        rec(vec![member("current_task", 0, Ty::Other)]),
    );
    let l = linux_structures(&mut m).unwrap();
    assert_eq!(l.pcpu_hot.map(|p| p.current_task), Some(0));
}
