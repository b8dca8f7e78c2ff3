//! hvprof's file safety, one layer for every file it opens, so that a fix lands once:
//!
//! - [`bounded`]: inputs a user names (kernels, firmware, symbol files, saved profiles) are
//!   opened without blocking, refused by kind and by size before a byte is read, and
//!   [sniffed](bounded::sniff) from their first bytes before any bulk read;
//! - [`atomic`]: outputs are written beside their final name and renamed over it, so a
//!   reader finds the whole old file or the whole new one; what stands at the name decides
//!   whether it is replaced at all ([`target`]); temporaries a killed writer left are removed
//!   later ([`leftovers`]);
//! - [`stream`]: logs streamed while a guest runs and disk images used in place;
//! - [`identity`]: which paths are the same file, so an output is never an input.
#![warn(missing_docs)]

pub mod atomic;
pub mod bounded;
mod fd;
pub mod identity;
pub mod leftovers;
pub mod stream;
pub mod target;
#[cfg(test)]
mod testdir;
