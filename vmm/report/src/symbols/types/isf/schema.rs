//! The parts of Volatility 3's Intermediate Symbol Format that hvprof reads, as serde types.
//!
//! They follow the ISF JSON schema (formats 4.1 to 6.x): every element that the schema closes
//! (`additionalProperties: false`) refuses unknown keys, required keys are required, and kinds,
//! endianness and type descriptors are checked against the schema's patterns. `metadata` is
//! left open (it grew between versions; only `format` and the OS's entry are read), and so are
//! enums' constants and symbols' types, which hvprof does not use.

use std::collections::HashMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

/// A whole ISF file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Isf {
    /// What the file describes.
    pub metadata: Metadata,
    /// Base types by name (`pointer` among them: the pointer size).
    pub base_types: HashMap<String, BaseType>,
    /// Structures, unions and classes by name.
    pub user_types: HashMap<String, UserType>,
    /// Enumerations by name.
    pub enums: HashMap<String, EnumType>,
    /// Symbols by name.
    pub symbols: HashMap<String, Symbol>,
}

/// `metadata`.
#[derive(Debug, Deserialize)]
pub struct Metadata {
    /// The ISF version, `MAJOR.MINOR.PATCH`.
    pub format: String,
    /// Set for a Windows module's table (from its PDB).
    #[serde(default)]
    pub windows: Option<WindowsMetadata>,
    /// Set for a Linux kernel's table (dwarf2json).
    #[serde(default)]
    pub linux: Option<IgnoredAny>,
    /// Set for a macOS kernel's table (dwarf2json).
    #[serde(default)]
    pub mac: Option<IgnoredAny>,
}

/// `metadata.windows`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowsMetadata {
    /// The PDB the table was made from.
    #[serde(default)]
    pub pdb: Option<PdbMetadata>,
    /// The PE's version.
    #[serde(default)]
    pub pe: Option<IgnoredAny>,
}

/// `metadata.windows.pdb`: the CodeView identity of the PDB the table was made from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PdbMetadata {
    /// Its GUID, 32 hex digits in symbol-server order.
    #[serde(rename = "GUID")]
    pub guid: String,
    /// Its age.
    pub age: u32,
    /// Its file name (`ntkrnlmp.pdb`).
    pub database: String,
    /// The PE machine type (0x8664 for x86-64).
    pub machine_type: u32,
}

/// `base_types.NAME`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseType {
    /// Size in bytes.
    pub size: u64,
    /// Whether it is signed.
    pub signed: bool,
    /// What it is.
    pub kind: BaseKind,
    /// Its byte order.
    pub endian: Endian,
}

/// A base type's kind.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BaseKind {
    /// `void`.
    Void,
    /// An integer.
    Int,
    /// A floating-point number.
    Float,
    /// A character.
    Char,
    /// A boolean.
    Bool,
}

/// A byte order.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Endian {
    /// Little-endian.
    Little,
    /// Big-endian.
    Big,
}

/// `user_types.NAME`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserType {
    /// Structure, union or class.
    pub kind: Aggregate,
    /// Size in bytes.
    pub size: u64,
    /// Members by name.
    pub fields: HashMap<String, FieldDef>,
}

/// What kind of user type.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    /// `struct`.
    Struct,
    /// `union`.
    Union,
    /// `class`.
    Class,
}

/// One member of a user type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldDef {
    /// Its type.
    #[serde(rename = "type")]
    pub ty: TypeDesc,
    /// Byte offset from the start of its user type.
    pub offset: u64,
    /// An anonymous structure or union, whose members are its parent's (dwarf2json).
    #[serde(default)]
    pub anonymous: bool,
}

/// A type descriptor (the schema's `type_descriptor`).
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum TypeDesc {
    /// A pointer to `subtype`.
    Pointer {
        /// What it points at.
        subtype: Box<TypeDesc>,
        /// The base type giving its size, when not `pointer`.
        #[serde(default)]
        base: Option<String>,
    },
    /// A base type.
    Base {
        /// Its name in `base_types`.
        name: String,
    },
    /// An array of `count` `subtype`s.
    Array {
        /// The element type.
        subtype: Box<TypeDesc>,
        /// How many.
        count: u64,
    },
    /// A structure, by name in `user_types`.
    Struct {
        /// Its name.
        name: String,
    },
    /// A class, by name in `user_types`.
    Class {
        /// Its name.
        name: String,
    },
    /// A union, by name in `user_types`.
    Union {
        /// Its name.
        name: String,
    },
    /// An enumeration, by name in `enums`.
    Enum {
        /// Its name.
        name: String,
    },
    /// A function.
    Function {},
    /// A bitfield.
    Bitfield {
        /// Its first bit in the storage unit.
        bit_position: u64,
        /// Its width in bits.
        bit_length: u64,
        /// The storage unit's type (a base type or an enum).
        #[serde(rename = "type")]
        ty: Box<TypeDesc>,
    },
}

/// `enums.NAME`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnumType {
    /// Size in bytes.
    pub size: u64,
    /// Its base type's name.
    pub base: String,
    /// Its constants (not read).
    pub constants: IgnoredAny,
}

/// `symbols.NAME`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Symbol {
    /// Windows: an RVA from the module's base. Linux: the link-time address (a per-CPU
    /// variable's: its offset in the per-CPU section).
    pub address: u64,
    /// The linker's name.
    #[serde(default)]
    pub linkage_name: Option<String>,
    /// Its type (not read).
    #[serde(default, rename = "type")]
    pub ty: Option<IgnoredAny>,
    /// The bytes it holds, base64 (dwarf2json gives `linux_banner`'s).
    #[serde(default)]
    pub constant_data: Option<String>,
}
