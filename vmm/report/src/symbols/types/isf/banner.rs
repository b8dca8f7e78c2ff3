//! A Linux ISF file's kernel banner: dwarf2json stores the bytes of the kernel's
//! `linux_banner` (the `Linux version ...` string `/proc/version` shows, with its newline and
//! NUL) base64-encoded in `symbols.linux_banner.constant_data`. Volatility 3 finds the table of
//! a memory image's kernel by that banner; a symbol pack is searched the same way
//! ([`crate::symbols::packs::linux_isf_layout`]).
//!
//! Reading a banner does not check the rest of the file against the schema: a pack holds many
//! files and only the one whose banner matches is read as a table.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::IsfError;

/// The longest banner read (the guest side reads at most as much from guest memory).
pub const MAX_BANNER_BYTES: usize = 1024;

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    metadata: Option<HeadMetadata>,
    #[serde(default)]
    symbols: Option<HeadSymbols>,
}

#[derive(Deserialize)]
struct HeadMetadata {
    #[serde(default)]
    linux: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct HeadSymbols {
    #[serde(default)]
    linux_banner: Option<HeadBanner>,
}

#[derive(Deserialize)]
struct HeadBanner {
    #[serde(default)]
    address: Option<u64>,
    #[serde(default)]
    constant_data: Option<String>,
}

/// A Linux table's banner and the link-time address of `linux_banner`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Banner {
    /// The banner, trimmed of trailing NULs and newlines ([`trim`]).
    pub text: Vec<u8>,
    /// `linux_banner`'s address in the vmlinux, if the file gives it.
    pub address: Option<u64>,
}

/// Why a file has no banner to match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BannerError {
    /// The file could not be read as ISF JSON.
    #[error(transparent)]
    Isf(#[from] IsfError),
    /// Not a Linux table.
    #[error("not a Linux table (no metadata.linux)")]
    NotLinux,
    /// A Linux table without the banner (dwarf2json made it from a vmlinux without one, or
    /// from a System.map alone).
    #[error("no symbols.linux_banner.constant_data")]
    NoBanner,
    /// The banner is not base64, or longer than [`MAX_BANNER_BYTES`].
    #[error("symbols.linux_banner.constant_data: {0}")]
    BadBanner(&'static str),
}

/// The banner of the Linux table in `json` (ISF JSON, already unpacked).
pub fn linux_banner(json: &[u8]) -> Result<Banner, BannerError> {
    let head: Head = serde_json::from_slice(json).map_err(|e| IsfError::Schema(e.to_string()))?;
    if head.metadata.and_then(|m| m.linux).is_none() {
        return Err(BannerError::NotLinux);
    }
    let sym = head
        .symbols
        .and_then(|s| s.linux_banner)
        .ok_or(BannerError::NoBanner)?;
    let data = sym.constant_data.ok_or(BannerError::NoBanner)?;
    // Base64 grows by 4/3: a longer string cannot decode to an acceptable banner.
    if data.len() > MAX_BANNER_BYTES.div_ceil(3) * 4 + 4 {
        return Err(BannerError::BadBanner("longer than a banner may be"));
    }
    let bytes = base64(data.as_bytes()).ok_or(BannerError::BadBanner("not base64"))?;
    if bytes.len() > MAX_BANNER_BYTES {
        return Err(BannerError::BadBanner("longer than a banner may be"));
    }
    Ok(Banner {
        text: trim(&bytes).to_vec(),
        address: sym.address,
    })
}

/// `banner` without its trailing NULs, newlines and carriage returns: what is compared.
pub fn trim(banner: &[u8]) -> &[u8] {
    let end = banner
        .iter()
        .rposition(|b| !matches!(b, 0 | b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    &banner[..end]
}

/// Decodes standard base64 (RFC 4648, `+` and `/`, `=` padding optional), or None.
pub fn base64(text: &[u8]) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let body = match text {
        [rest @ .., b'=', b'='] | [rest @ .., b'='] if text.len().is_multiple_of(4) => rest,
        _ => text,
    };
    if body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    for chunk in body.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_with_and_without_padding_and_refuses_the_rest() {
        assert_eq!(base64(b"").unwrap(), b"");
        assert_eq!(base64(b"TQ==").unwrap(), b"M");
        assert_eq!(base64(b"TWE=").unwrap(), b"Ma");
        assert_eq!(base64(b"TWFu").unwrap(), b"Man");
        assert_eq!(base64(b"TWE").unwrap(), b"Ma");
        assert_eq!(base64(b"TGludXggdmVyc2lvbgo=").unwrap(), b"Linux version\n");
        assert_eq!(base64(b"+/+/").unwrap(), [0xfb, 0xff, 0xbf]);
        assert_eq!(base64(b"TWFuT"), None);
        assert_eq!(base64(b"TW!u"), None);
        assert_eq!(base64(b"T==="), None);
    }

    #[test]
    fn banners_are_compared_without_their_trailing_newline_and_nul() {
        assert_eq!(trim(b"Linux version 6.1\n\0"), b"Linux version 6.1");
        assert_eq!(trim(b"Linux version 6.1"), b"Linux version 6.1");
        assert_eq!(trim(b"\n\0"), b"");
    }

    #[test]
    fn a_banner_is_read_only_from_a_linux_table() {
        let json = br#"{"metadata": {"format": "6.2.0", "linux": {}},
            "symbols": {"linux_banner": {"address": 18446744071600000000,
                "constant_data": "TGludXggdmVyc2lvbiA2LjEK"}}}"#;
        assert_eq!(
            linux_banner(json).unwrap(),
            Banner {
                text: b"Linux version 6.1".to_vec(),
                address: Some(18446744071600000000)
            }
        );
        let windows = br#"{"metadata": {"format": "6.2.0", "windows": {}}, "symbols": {}}"#;
        assert_eq!(linux_banner(windows), Err(BannerError::NotLinux));
        let none = br#"{"metadata": {"linux": {}}, "symbols": {"init_task": {"address": 1}}}"#;
        assert_eq!(linux_banner(none), Err(BannerError::NoBanner));
        let bad = br#"{"metadata": {"linux": {}},
            "symbols": {"linux_banner": {"constant_data": "not base64!"}}}"#;
        assert!(matches!(linux_banner(bad), Err(BannerError::BadBanner(_))));
        let long = format!(
            r#"{{"metadata": {{"linux": {{}}}}, "symbols": {{"linux_banner": {{"constant_data": "{}"}}}}}}"#,
            "A".repeat(4096)
        );
        assert!(matches!(
            linux_banner(long.as_bytes()),
            Err(BannerError::BadBanner(_))
        ));
        // Short enough as text, one byte too long decoded.
        let long = format!(
            r#"{{"metadata": {{"linux": {{}}}}, "symbols": {{"linux_banner": {{"constant_data": "{}"}}}}}}"#,
            "A".repeat(MAX_BANNER_BYTES.div_ceil(3) * 4)
        );
        assert!(matches!(
            linux_banner(long.as_bytes()),
            Err(BannerError::BadBanner(_))
        ));
        assert!(matches!(linux_banner(b"[1]"), Err(BannerError::Isf(_))));
    }
}
