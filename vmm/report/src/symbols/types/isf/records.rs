//! An ISF file's `user_types` as [`Records`].
//!
//! A member's size comes from its type descriptor: a base type's or an enum's `size`, the
//! `pointer` base type's for a pointer, `count` times the element's for an array, the named
//! user type's for a structure (kept by name, as the PDB reader keeps a forward reference). A
//! bitfield keeps its storage unit's offset and size and its position and width. A member marked
//! `anonymous` (dwarf2json's anonymous structures and unions) is read inline and nameless, so
//! path lookup looks through it as through a PDB's `<unnamed-tag>`.

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

use introspect::os::layout::Field;

use super::schema::{Isf, TypeDesc};
use crate::symbols::types::{Member, Record, Records, Ty, TypeError, MAX_DEPTH, MAX_MEMBERS};

/// A member type's size, bitfield (position, width) and kind.
type Described = (u32, Option<(u8, u8)>, Ty);

/// The pointer size when `base_types` has no `pointer` entry.
const DEFAULT_POINTER_SIZE: u64 = 8;

/// An ISF file's user types, read on demand.
pub struct IsfTypes<'a> {
    isf: &'a Isf,
    cache: HashMap<String, Option<Rc<Record>>>,
    /// Members left to read for the current top-level record (bounds anonymous members that
    /// name the same type many times over).
    budget: Cell<usize>,
}

impl<'a> IsfTypes<'a> {
    /// The user types of `isf`.
    pub fn new(isf: &'a Isf) -> Self {
        IsfTypes {
            isf,
            cache: HashMap::new(),
            budget: Cell::new(0),
        }
    }

    /// The record of the user type `name`, its anonymous members read inline.
    fn read(&self, name: &str, depth: usize) -> Result<Option<Record>, TypeError> {
        let Some(ut) = self.isf.user_types.get(name) else {
            return Ok(None);
        };
        let mut rec = Record {
            size: clamp(ut.size),
            members: Vec::new(),
        };
        for (member, def) in &ut.fields {
            let left = self.budget.get();
            if left == 0 {
                return Err(TypeError::TooBig(name.to_string()));
            }
            self.budget.set(left - 1);
            let Ok(offset) = u32::try_from(def.offset) else {
                continue;
            };
            let (size, bits, ty) = self.describe(&def.ty, 0);
            let (member_name, ty) = match (def.anonymous, ty) {
                (true, Ty::Named(inner)) => {
                    if depth >= MAX_DEPTH {
                        return Err(TypeError::TooBig(name.to_string()));
                    }
                    let inner = self.read(&inner, depth + 1)?.unwrap_or_default();
                    (String::new(), Ty::Anon(Rc::new(inner)))
                }
                (_, ty) => (member.clone(), ty),
            };
            rec.members.push(Member {
                name: member_name,
                field: Field { offset, bits, size },
                ty,
            });
        }
        Ok(Some(rec))
    }

    /// A type descriptor's size in bytes, bitfield (position, width) and kind.
    fn describe(&self, ty: &TypeDesc, depth: usize) -> Described {
        if depth > MAX_DEPTH {
            return (0, None, Ty::Other);
        }
        let isf = self.isf;
        match ty {
            TypeDesc::Pointer { base, .. } => {
                let name = base.as_deref().unwrap_or("pointer");
                let size = isf
                    .base_types
                    .get(name)
                    .map_or(DEFAULT_POINTER_SIZE, |b| b.size);
                (clamp(size), None, Ty::Other)
            }
            TypeDesc::Base { name } => {
                let size = isf.base_types.get(name).map_or(0, |b| b.size);
                (clamp(size), None, Ty::Other)
            }
            TypeDesc::Array { subtype, count } => {
                let (each, _, _) = self.describe(subtype, depth + 1);
                let size = u64::from(each).saturating_mul(*count);
                (clamp(size), None, Ty::Other)
            }
            TypeDesc::Struct { name } | TypeDesc::Class { name } | TypeDesc::Union { name } => {
                let size = isf.user_types.get(name).map_or(0, |u| u.size);
                (clamp(size), None, Ty::Named(name.clone()))
            }
            TypeDesc::Enum { name } => {
                let size = isf.enums.get(name).map_or(0, |e| e.size);
                (clamp(size), None, Ty::Other)
            }
            TypeDesc::Function {} => (0, None, Ty::Other),
            TypeDesc::Bitfield {
                bit_position,
                bit_length,
                ty,
            } => {
                let (size, _, _) = self.describe(ty, depth + 1);
                let bits = u8::try_from(*bit_position)
                    .ok()
                    .zip(u8::try_from(*bit_length).ok());
                (size, bits, Ty::Other)
            }
        }
    }
}

/// A size or offset from the file as a `u32`; a larger one becomes `u32::MAX`, which the
/// layout's checks refuse (no structure the walkers read is anywhere near 4 GiB).
fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Records for IsfTypes<'_> {
    fn record(&mut self, name: &str) -> Result<Option<Rc<Record>>, TypeError> {
        if let Some(r) = self.cache.get(name) {
            return Ok(r.clone());
        }
        self.budget.set(MAX_MEMBERS);
        let rec = self.read(name, 0)?.map(Rc::new);
        self.cache.insert(name.to_string(), rec.clone());
        Ok(rec)
    }
}
