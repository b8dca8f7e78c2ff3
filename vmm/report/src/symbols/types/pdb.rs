//! Windows structure layouts from a PDB's type stream, through the `pdb` crate.
//!
//! The type stream (TPI) is indexed once: every complete (not forward-declared) `LF_STRUCTURE`,
//! `LF_CLASS` and `LF_UNION` by name and by unique (decorated) name. Members usually point at a
//! forward reference (MSVC and clang emit `struct _KPROCESS` as a forward record before its
//! definition), so a member's structure type is kept by key and resolved through the index, as
//! Volatility, vminer and llvm-pdbutil do: its unique name where it has one (two classes of one
//! name in different namespaces or translation units stay apart), else its name.
//! A field list continues through `LF_INDEX` records past 0xFF00 bytes; at most
//! [`MAX_CONTINUATIONS`] links are followed. Field lists are read by `fields` from the raw
//! stream: pdb 0.8 misreads `LF_INDEX` (it skips no padding before the index), so every
//! continued list fails to parse there. Anonymous unions and structs are flattened into their
//! parent's list by MSVC and clang; an `<unnamed-tag>` member is still recursed into. Bitfields
//! (`LF_BITFIELD`) give their position and width, arrays their size in bytes (`LF_ARRAY`'s last
//! dimension), pointers their own size; const/volatile (`LF_MODIFIER`) are looked through.
//!
//! C++ classes: a direct base class (`LF_BCLASS`) is a member without a name whose record (the
//! base's, read inline) lies at the base's offset, so a path finds an inherited member as C++
//! name lookup does. Virtual bases are left out (their offset is read from the vbtable at run
//! time); methods, nested types, static members, enumerators, friends and vtable pointers are
//! stepped over. [`structure`] lists any structure's members this way; the layout's
//! structures are read by the same code.
//!
//! Checked against real MSVC-written PDBs (testdata/msvc-pdb) member by member with
//! `llvm-pdbutil dump -types` (the `msvc` tests).
//!
//! Symbols: `S_PUB32` publics (data as well as functions) and `S_GDATA32` globals, as RVAs
//! through the PDB's address map. lld-link writes both; Microsoft's public PDBs have publics.

use std::cell::Cell;
use std::collections::HashMap;
use std::io::Cursor;
use std::rc::Rc;

use introspect::os::layout::{Field, WindowsSymbols};
use introspect::os::WindowsLayout;
use pdb::{FallibleIterator, TypeData, TypeFinder, TypeIndex, TypeInformation};

mod fields;

use super::{Member, Record, Records, Ty, TypeError, MAX_DEPTH, MAX_MEMBERS};

/// The most `LF_FIELDLIST` continuation links followed for one structure.
pub const MAX_CONTINUATIONS: usize = 64;

/// The most type records indexed (ntkrnlmp.pdb has ~100k).
pub const MAX_TYPES: usize = 1 << 22;

/// The most symbol records looked at.
pub const MAX_SYMBOLS: usize = 1 << 24;

fn pdb_err(e: pdb::Error) -> TypeError {
    TypeError::Pdb(e.to_string())
}

/// Reads ntoskrnl's [`WindowsLayout`] from its PDB's bytes.
///
/// pdb 0.8 panics on some malformed records in builds with debug assertions (an
/// `unreachable!` on an unknown numeric leaf, a `debug_assert!` on a record's length) where a
/// release build returns an error: such a panic is caught and returned as [`TypeError::Pdb`]. (A
/// panic hook that aborts, as libFuzzer's does, still sees it.)
pub fn windows_layout(bytes: &[u8]) -> Result<WindowsLayout, TypeError> {
    caught(|| {
        let mut pdb = pdb::PDB::open(Cursor::new(bytes)).map_err(pdb_err)?;
        let mut layout = with_types(&mut pdb, |t| super::windows_structures(t))?;
        layout.symbols = symbols(&mut pdb)?;
        Ok(layout)
    })
}

/// The complete structure, class or union called `name` (or of that unique name) in a PDB's
/// type stream: its size and members as the layout code reads them.
pub fn structure(bytes: &[u8], name: &str) -> Result<Option<Rc<Record>>, TypeError> {
    caught(|| {
        let mut pdb = pdb::PDB::open(Cursor::new(bytes)).map_err(pdb_err)?;
        with_types(&mut pdb, |t| t.record(name))
    })
}

/// `read`'s result, or an error if the pdb crate panicked.
fn caught<T>(read: impl FnOnce() -> Result<T, TypeError>) -> Result<T, TypeError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|_| {
        Err(TypeError::Pdb(
            "malformed type records (the pdb crate panicked)".into(),
        ))
    })
}

/// Runs `f` on the PDB's type stream.
fn with_types<'s, S: pdb::Source<'s> + 's, T>(
    pdb: &mut pdb::PDB<'s, S>,
    f: impl FnOnce(&mut PdbTypes<'_>) -> Result<T, TypeError>,
) -> Result<T, TypeError> {
    let raw = pdb
        .raw_stream(pdb::StreamIndex(2))
        .map_err(pdb_err)?
        .map(|s| s.as_slice().to_vec())
        .unwrap_or_default();
    let tpi = pdb.type_information().map_err(pdb_err)?;
    let mut types = PdbTypes::new(&tpi, &raw)?;
    f(&mut types)
}

/// Reads the kernel symbols of a [`WindowsLayout`] from a PDB.
fn symbols<'s, S: pdb::Source<'s> + 's>(
    pdb: &mut pdb::PDB<'s, S>,
) -> Result<WindowsSymbols, TypeError> {
    let globals = pdb.global_symbols().map_err(pdb_err)?;
    let map = pdb.address_map().map_err(pdb_err)?;
    let mut found: [Option<u32>; 5] = [None; 5];
    let mut it = globals.iter();
    for _ in 0..MAX_SYMBOLS {
        let Some(sym) = it.next().map_err(pdb_err)? else {
            break;
        };
        let (name, offset) = match sym.parse() {
            Ok(pdb::SymbolData::Public(p)) => (p.name, p.offset),
            Ok(pdb::SymbolData::Data(d)) => (d.name, d.offset),
            _ => continue,
        };
        let name = name.to_string();
        let Some(slot) = WindowsSymbols::NAMES.iter().position(|n| *n == name) else {
            continue;
        };
        if found[slot].is_none() {
            found[slot] = offset.to_rva(&map).map(|r| r.0);
        }
    }
    Ok(WindowsSymbols {
        ps_active_process_head: found[0].ok_or(TypeError::MissingSymbol("PsActiveProcessHead"))?,
        ps_loaded_module_list: found[1].ok_or(TypeError::MissingSymbol("PsLoadedModuleList"))?,
        ki_system_call64: found[2],
        ki_system_call64_shadow: found[3],
        ps_initial_system_process: found[4],
    })
}

/// A member type's size, bitfield (position, width) and kind.
type Described = (u32, Option<(u8, u8)>, Ty);

/// Is `name` what compilers call an anonymous structure or union (MSVC `<unnamed-tag>`, clang
/// `_EPROCESS::<unnamed-tag>`, older `__unnamed`)? Many types share such a name, so they are
/// never looked up by it.
fn anonymous(name: &str) -> bool {
    name.is_empty()
        || name.contains("<unnamed")
        || name.contains("<anonymous")
        || name.starts_with("__unnamed")
}

/// A PDB's type stream as [`Records`].
pub struct PdbTypes<'t> {
    finder: TypeFinder<'t>,
    /// The raw records, for field lists.
    lists: fields::Lists<'t>,
    /// Complete structures and unions by name and by unique name (the first of each).
    by_name: HashMap<String, TypeIndex>,
    /// Records already read, by name.
    cache: HashMap<String, Option<Rc<Record>>>,
    /// Members left to read for the current top-level record (bounds anonymous members that
    /// contain themselves several times, which the depth bound alone lets cost exponential time).
    budget: Cell<usize>,
}

impl<'t> PdbTypes<'t> {
    /// Indexes `tpi`'s structures and unions by name; `raw` is the same type stream's bytes
    /// (stream 2), whose field lists are read by `fields`.
    pub fn new(tpi: &'t TypeInformation<'_>, raw: &'t [u8]) -> Result<Self, TypeError> {
        let mut finder = tpi.finder();
        let mut by_name = HashMap::new();
        let mut it = tpi.iter();
        for _ in 0..MAX_TYPES {
            let Some(t) = it.next().map_err(pdb_err)? else {
                break;
            };
            finder.update(&it);
            let (name, unique, forward) = match t.parse() {
                Ok(TypeData::Class(c)) => (c.name, c.unique_name, c.properties.forward_reference()),
                Ok(TypeData::Union(u)) => (u.name, u.unique_name, u.properties.forward_reference()),
                _ => continue,
            };
            if forward {
                continue;
            }
            if let Some(unique) = unique {
                by_name
                    .entry(unique.to_string().into_owned())
                    .or_insert(t.index());
            }
            if !anonymous(&name.to_string()) {
                by_name
                    .entry(name.to_string().into_owned())
                    .or_insert(t.index());
            }
        }
        Ok(PdbTypes {
            finder,
            lists: fields::Lists::new(raw),
            by_name,
            cache: HashMap::new(),
            budget: Cell::new(0),
        })
    }

    fn parse(&self, index: TypeIndex) -> Option<TypeData<'t>> {
        self.finder.find(index).ok()?.parse().ok()
    }

    /// The structure, class or union at type index `index`, if it is a complete one.
    pub fn structure_at(&self, index: u32) -> Result<Option<Record>, TypeError> {
        let complete = match self.parse(TypeIndex(index)) {
            Some(TypeData::Class(c)) => !c.properties.forward_reference(),
            Some(TypeData::Union(u)) => !u.properties.forward_reference(),
            _ => false,
        };
        if !complete {
            return Ok(None);
        }
        self.budget.set(MAX_MEMBERS);
        self.read(TypeIndex(index), 0).map(Some)
    }

    /// The record of the structure or union at `index`, its anonymous members read inline.
    fn read(&self, index: TypeIndex, depth: usize) -> Result<Record, TypeError> {
        let (size, fields) = match self.parse(index) {
            Some(TypeData::Class(c)) => (c.size, c.fields),
            Some(TypeData::Union(u)) => (u.size, Some(u.fields)),
            _ => return Ok(Record::default()),
        };
        let mut rec = Record {
            size: u32::try_from(size).unwrap_or(u32::MAX),
            members: Vec::new(),
        };
        let mut next = fields;
        for _ in 0..=MAX_CONTINUATIONS {
            let Some(list) = next.take() else { break };
            let Some((members, continuation)) = self.lists.members(list.0) else {
                break;
            };
            for m in members {
                let left = self.budget.get();
                if left == 0 {
                    return Err(TypeError::TooBig(format!("type {index}")));
                }
                self.budget.set(left - 1);
                let Ok(offset) = u32::try_from(m.offset) else {
                    continue;
                };
                let (size, bits, ty) = if m.base {
                    self.base(TypeIndex(m.ty), depth)?
                } else {
                    self.describe(TypeIndex(m.ty), depth)?
                };
                rec.members.push(Member {
                    name: m.name,
                    field: Field { offset, bits, size },
                    ty,
                });
            }
            next = continuation.map(TypeIndex);
        }
        Ok(rec)
    }

    /// A base class's size and record, read inline (its definition's, if forward-declared).
    fn base(&self, index: TypeIndex, depth: usize) -> Result<Described, TypeError> {
        let (size, _, ty) = self.describe(index, depth)?;
        let Ty::Named(key) = ty else {
            return Ok((size, None, ty));
        };
        let Some(&full) = self.by_name.get(&key) else {
            return Ok((size, None, Ty::Other));
        };
        if depth >= MAX_DEPTH {
            return Err(TypeError::TooBig(format!("type {index}")));
        }
        let inner = self.read(full, depth + 1)?;
        Ok((inner.size, None, Ty::Anon(Rc::new(inner))))
    }

    /// A member type's size, bits and kind, through modifiers and forward references.
    fn describe(&self, mut index: TypeIndex, depth: usize) -> Result<Described, TypeError> {
        let mut bits = None;
        for _ in 0..MAX_DEPTH {
            let Some(t) = self.parse(index) else {
                return Ok((0, bits, Ty::Other));
            };
            match t {
                TypeData::Modifier(m) => index = m.underlying_type,
                TypeData::Bitfield(b) => {
                    bits = Some((b.position, b.length));
                    index = b.underlying_type;
                }
                TypeData::Enumeration(e) => index = e.underlying_type,
                TypeData::Primitive(p) => {
                    let size = match p.indirection {
                        None => primitive_size(p.kind),
                        Some(i) => pointer_size(i),
                    };
                    return Ok((size, bits, Ty::Other));
                }
                TypeData::Pointer(p) => return Ok((p.attributes.size().into(), bits, Ty::Other)),
                TypeData::Array(a) => {
                    return Ok((a.dimensions.last().copied().unwrap_or(0), bits, Ty::Other))
                }
                TypeData::Class(c) => {
                    let named = Named {
                        name: c.name.to_string(),
                        unique: c.unique_name.map(|u| u.to_string()),
                        size: c.size,
                        forward: c.properties.forward_reference(),
                    };
                    return self.composite(named, index, depth);
                }
                TypeData::Union(u) => {
                    let named = Named {
                        name: u.name.to_string(),
                        unique: u.unique_name.map(|u| u.to_string()),
                        size: u.size,
                        forward: u.properties.forward_reference(),
                    };
                    return self.composite(named, index, depth);
                }
                _ => return Ok((0, bits, Ty::Other)),
            }
        }
        Ok((0, bits, Ty::Other))
    }

    /// A structure or union member's type. An anonymous one is read inline: where it is
    /// defined, or a forward reference's definition by unique name (MSVC's
    /// `Parent::<unnamed-type-u>`), else it is left unread. A named one is its key (the unique
    /// name if the index has a definition of it, else the name) and its definition's size.
    fn composite(
        &self,
        t: Named<'_>,
        index: TypeIndex,
        depth: usize,
    ) -> Result<Described, TypeError> {
        let full = |key: &str| self.by_name.get(key).copied();
        if anonymous(&t.name) {
            let index = match (t.forward, t.unique.as_deref().and_then(full)) {
                (false, _) => index,
                (true, Some(definition)) => definition,
                (true, None) => return Ok((0, None, Ty::Other)),
            };
            if depth >= MAX_DEPTH {
                return Err(TypeError::TooBig(format!("type {index}")));
            }
            let inner = self.read(index, depth + 1)?;
            return Ok((inner.size, None, Ty::Anon(Rc::new(inner))));
        }
        let key = match t.unique {
            Some(u) if full(&u).is_some() => u,
            _ => t.name,
        };
        let size = match (t.size, full(&key)) {
            (0, Some(full)) => match self.parse(full) {
                Some(TypeData::Class(c)) => c.size,
                Some(TypeData::Union(u)) => u.size,
                _ => 0,
            },
            (size, _) => size,
        };
        let size = u32::try_from(size).unwrap_or(u32::MAX);
        Ok((size, None, Ty::Named(key.into_owned())))
    }
}

/// A structure or union type as a member's type names it.
struct Named<'n> {
    name: std::borrow::Cow<'n, str>,
    unique: Option<std::borrow::Cow<'n, str>>,
    size: u64,
    forward: bool,
}

impl Records for PdbTypes<'_> {
    fn record(&mut self, name: &str) -> Result<Option<Rc<Record>>, TypeError> {
        if let Some(r) = self.cache.get(name) {
            return Ok(r.clone());
        }
        let rec = match self.by_name.get(name) {
            Some(&index) => {
                self.budget.set(MAX_MEMBERS);
                Some(Rc::new(self.read(index, 0)?))
            }
            None => None,
        };
        self.cache.insert(name.to_string(), rec.clone());
        Ok(rec)
    }
}

/// The size of a primitive pointer type (`T_32PINT4`, `T_64PVOID`...), in bytes.
fn pointer_size(mode: pdb::Indirection) -> u32 {
    use pdb::Indirection as I;
    match mode {
        I::Near16 => 2,
        I::Far16 | I::Huge16 | I::Near32 => 4,
        I::Far32 => 6,
        I::Near64 => 8,
        I::Near128 => 16,
    }
}

/// The size of a primitive type, in bytes.
fn primitive_size(kind: pdb::PrimitiveKind) -> u32 {
    use pdb::PrimitiveKind as K;
    match kind {
        K::Char | K::UChar | K::RChar | K::I8 | K::U8 | K::Bool8 => 1,
        K::WChar | K::RChar16 | K::Short | K::UShort | K::I16 | K::U16 | K::F16 | K::Bool16 => 2,
        K::RChar32
        | K::Long
        | K::ULong
        | K::I32
        | K::U32
        | K::F32
        | K::F32PP
        | K::Bool32
        | K::HRESULT => 4,
        K::Quad | K::UQuad | K::I64 | K::U64 | K::F64 | K::Bool64 => 8,
        K::F80 => 10,
        K::Octa | K::UOcta | K::I128 | K::U128 | K::F128 => 16,
        _ => 0,
    }
}

#[cfg(test)]
pub(crate) mod msvc_tests;
#[cfg(test)]
mod tests;
