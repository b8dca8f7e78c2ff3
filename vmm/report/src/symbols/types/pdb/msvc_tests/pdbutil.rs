//! The witness: `llvm-pdbutil dump -types` (Debian's `llvm`) run on a PDB, its text parsed into
//! the records the comparison needs. Written against LLVM 14's output; a line it does not
//! understand in a record it needs fails the test rather than being guessed at.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// One entry of an `LF_FIELDLIST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `LF_MEMBER`.
    Member { name: String, ty: u32, offset: u64 },
    /// `LF_BCLASS`.
    Base { ty: u32, offset: u64 },
    /// `LF_INDEX`: the list goes on in this field list.
    Continue(u32),
    /// Anything else (`LF_NESTTYPE`, `LF_ONEMETHOD`, `LF_VBCLASS`...): its leaf's name.
    Other(String),
}

/// The type records the comparison looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    /// `LF_STRUCTURE`, `LF_CLASS`, `LF_UNION`, `LF_INTERFACE`.
    Composite {
        name: String,
        unique: Option<String>,
        fields: Option<u32>,
        forward: bool,
        /// What llvm-pdbutil resolved a forward reference to by unique name: `(-> 0x..)` or
        /// `(<- 0x..)`; `(= itself)` when the PDB has no definition.
        definition: Option<u32>,
        size: u64,
    },
    /// `LF_FIELDLIST`.
    Fields(Vec<Entry>),
    /// `LF_ENUM` and its underlying type.
    Enum(u32),
    /// `LF_MODIFIER` and its referent.
    Modifier(u32),
    /// `LF_POINTER`: its size, `None` for pointers to members (their size depends on the
    /// class's inheritance model).
    Pointer(Option<u32>),
    /// `LF_ARRAY` and its size in bytes.
    Array(u64),
    /// `LF_BITFIELD`: type, position, width.
    Bitfield(u32, u8, u8),
    /// Any other record.
    Other(String),
}

/// Runs `llvm-pdbutil dump -types` on `pdb`; fails (naming the Debian package) without it.
pub fn dump(pdb: &Path) -> HashMap<u32, Type> {
    let out = Command::new("llvm-pdbutil")
        .args(["dump", "-types"])
        .arg(pdb)
        .output()
        .unwrap_or_else(|e| panic!("llvm-pdbutil (Debian package llvm) could not run: {e}"));
    assert!(
        out.status.success(),
        "llvm-pdbutil dump -types {}: {}",
        pdb.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&String::from_utf8_lossy(&out.stdout))
}

/// Parses `llvm-pdbutil dump -types` output: a header line `0x1003 | LF_CLASS [size = 64]
/// \`name\`` per record, then its indented lines.
pub fn parse(text: &str) -> HashMap<u32, Type> {
    let mut types = HashMap::new();
    let mut current: Option<(u32, &str, Vec<&str>)> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some((index, rest)) = header(t) {
            if let Some((i, h, body)) = current.take() {
                types.insert(i, record(h, &body));
            }
            current = Some((index, rest, Vec::new()));
        } else if let Some((_, _, body)) = current.as_mut() {
            if !t.is_empty() {
                body.push(t);
            }
        }
    }
    if let Some((i, h, body)) = current {
        types.insert(i, record(h, &body));
    }
    types
}

/// `0x1003 | LF_CLASS ...` as (0x1003, `LF_CLASS ...`).
fn header(t: &str) -> Option<(u32, &str)> {
    let (index, rest) = t.split_once(" | ")?;
    let index = u32::from_str_radix(index.strip_prefix("0x")?, 16).ok()?;
    rest.starts_with("LF_").then_some((index, rest))
}

fn hex(s: &str) -> u32 {
    let digits: String = s
        .trim_start_matches("0x")
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u32::from_str_radix(&digits, 16).unwrap_or_else(|_| panic!("not a type index: {s:?}"))
}

fn number(s: &str) -> u64 {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// The text after `key` in `s`.
fn after<'s>(s: &'s str, key: &str) -> Option<&'s str> {
    s.find(key).map(|at| &s[at + key.len()..])
}

/// The text between the first and the last backtick.
fn quoted(s: &str) -> Option<String> {
    let start = s.find('`')?;
    let end = s.rfind('`')?;
    (end > start).then(|| s[start + 1..end].to_string())
}

fn record(head: &str, body: &[&str]) -> Type {
    let leaf = head.split_whitespace().next().unwrap_or_default();
    let all = body.join(", ");
    match leaf {
        "LF_STRUCTURE" | "LF_CLASS" | "LF_UNION" | "LF_INTERFACE" => {
            let unique = body
                .iter()
                .find_map(|l| l.strip_prefix("unique name: "))
                .and_then(quoted);
            let fields = after(&all, "field list: ")
                .filter(|f| f.starts_with("0x"))
                .map(hex);
            let options = body
                .iter()
                .find_map(|l| l.strip_prefix("options: "))
                .unwrap_or_else(|| panic!("{head}: no options line in {body:?}"));
            let size =
                number(after(options, "sizeof ").unwrap_or_else(|| panic!("{head}: no sizeof")));
            Type::Composite {
                name: quoted(head).unwrap_or_default(),
                unique,
                fields,
                forward: options.contains("forward ref"),
                definition: after(options, "forward ref (-> ")
                    .or_else(|| after(options, "forward ref (<- "))
                    .map(hex),
                size,
            }
        }
        "LF_FIELDLIST" => Type::Fields(entries(body)),
        "LF_ENUM" => Type::Enum(hex(after(&all, "underlying type: ").expect("LF_ENUM type"))),
        "LF_MODIFIER" => Type::Modifier(hex(after(&all, "referent = ").expect("referent"))),
        "LF_POINTER" => {
            let mode = after(&all, "mode = ").unwrap_or_default();
            let kind = after(&all, "kind = ").unwrap_or_default();
            let size = if mode.starts_with("pointer to") {
                None
            } else if kind.starts_with("ptr64") {
                Some(8)
            } else if kind.starts_with("ptr32") {
                Some(4)
            } else {
                panic!("LF_POINTER of kind {kind:?}")
            };
            Type::Pointer(size)
        }
        "LF_ARRAY" => Type::Array(number(after(&all, "size: ").expect("LF_ARRAY size"))),
        "LF_BITFIELD" => Type::Bitfield(
            hex(after(&all, "type = ").expect("bitfield type")),
            u8::try_from(number(after(&all, "bit offset = ").expect("bit offset"))).unwrap(),
            u8::try_from(number(after(&all, "# bits = ").expect("# bits"))).unwrap(),
        ),
        _ => Type::Other(leaf.to_string()),
    }
}

/// A field list's entries: each starts with `- LF_...`, its later lines continue it.
fn entries(body: &[&str]) -> Vec<Entry> {
    let mut groups: Vec<String> = Vec::new();
    for l in body {
        match (l.strip_prefix("- "), groups.last_mut()) {
            (Some(start), _) => groups.push(start.to_string()),
            (None, Some(g)) => {
                g.push_str(", ");
                g.push_str(l);
            }
            (None, None) => panic!("field list line before any entry: {l:?}"),
        }
    }
    groups.iter().map(|g| entry(g)).collect()
}

fn entry(g: &str) -> Entry {
    let leaf = g.split([' ', ',']).next().unwrap_or_default();
    match leaf {
        "LF_MEMBER" => {
            // `LF_MEMBER [name = `x`, Type = 0x0074 (int), offset = 0, attrs = public]`: the
            // name may hold commas (templates), so it ends at the backtick before `, Type =`.
            let start = g.find("name = `").expect("member name") + "name = `".len();
            let end = g.rfind("`, Type = ").expect("member type");
            let rest = &g[end..];
            Entry::Member {
                name: g[start..end].to_string(),
                ty: hex(after(rest, "Type = ").expect("member type")),
                offset: number(after(rest, "offset = ").expect("member offset")),
            }
        }
        "LF_BCLASS" => Entry::Base {
            ty: hex(after(g, "type = ").expect("base type")),
            offset: number(after(g, "offset = ").expect("base offset")),
        },
        "LF_INDEX" => Entry::Continue(hex(after(g, "continuation = ").expect("continuation"))),
        _ => Entry::Other(leaf.to_string()),
    }
}
