//! Guest operating systems seen from outside: what hvprof needs to know about a Windows or Linux
//! kernel's own structures to name the process and thread a sample ran in.
//!
//! [`layout`] holds the member offsets of those structures and the kernel symbols they hang
//! from, as plain data. They are read from the kernel's own debug information (a PDB's type
//! stream, BTF, DWARF) by the report crate's type readers; nothing here knows a Windows build's
//! or a Linux version's offsets.

pub mod layout;

pub use layout::{Field, LayoutError, LinuxLayout, WindowsLayout};
