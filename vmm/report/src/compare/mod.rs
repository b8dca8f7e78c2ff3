//! `hvprof compare`: per-symbol and per-bucket changes between two profiles, with a stated
//! statistical test, a Markdown summary and JUnit XML; a significant regression above the
//! threshold fails the comparison.

pub mod processes;
pub mod profiles;
pub mod render;
pub mod significance;

pub use profiles::{
    compare_profiles, label, merge_profiles, run_differences, MergeError, ObjectComparison, Scope,
};
pub use render::{junit, markdown};
pub use significance::{compare, Change, TestOptions};
