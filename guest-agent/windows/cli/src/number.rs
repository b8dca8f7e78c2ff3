//! Numbers as the agent's user and its result file write them: `0x` hex or decimal. The
//! command line ([`crate::args`]), the source names ([`crate::sources`]) and the result file's
//! reader ([`crate::result_file`]) all read them, so they sit below all three.

/// A number: `0x` hex or decimal, `_` allowed as a separator.
pub fn parse_u64(text: &str) -> Option<u64> {
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    if let Some(hex) = clean
        .strip_prefix("0x")
        .or_else(|| clean.strip_prefix("0X"))
    {
        u64::from_str_radix(hex, 16).ok()
    } else if !clean.is_empty() && clean.bytes().all(|b| b.is_ascii_digit()) {
        clean.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_decimal_and_separators() {
        assert_eq!(parse_u64("0x10"), Some(16));
        assert_eq!(parse_u64("0XfF"), Some(255));
        assert_eq!(parse_u64("1_000"), Some(1000));
        assert_eq!(parse_u64(""), None);
        assert_eq!(parse_u64("+1"), None);
        assert_eq!(parse_u64("0x"), None);
        assert_eq!(parse_u64("0x1_0000_0000_0000_0000"), None);
    }
}
