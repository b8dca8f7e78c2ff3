//! The fields of the reference guest's `refguest: ...` lines the benchmarks read.

/// The decimal integer `name=N` of a guest's line, as a float.
pub fn field(line: &str, name: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))?
        .parse::<u64>()
        .ok()
        .map(|v| v as f64)
}
