//! See the module list in faults/mod.rs.

#[allow(unused_imports)]
use crate::harness;
