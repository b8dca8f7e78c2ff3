//! Turning counts into something people read: symbols for guest addresses and tables of the
//! hottest buckets and functions.

pub mod hot;
pub mod symbols;

pub use hot::{function_totals, hottest_buckets, text_report, Bucket, FunctionTotal};
pub use symbols::{SymbolError, Symbols};
