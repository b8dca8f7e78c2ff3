//! Addresses in request bodies: a JSON number or a `"0x..."` hex string (responses always
//! write the string, [`Hex`](report::hex::Hex), because JSON numbers lose precision
//! past 2^53 in most readers). Errors name the field.

use std::fmt;

use serde::de::{Deserializer, Error, Visitor};

/// Reads an optional address field named `field`: absent (with `#[serde(default)]`) or
/// `null` is None, a number or a `"0x..."` hex string is the value.
pub(super) fn optional<'de, D: Deserializer<'de>>(
    d: D,
    field: &'static str,
) -> Result<Option<u64>, D::Error> {
    d.deserialize_option(OptionalAddress(field))
}

struct OptionalAddress(&'static str);

impl<'de> Visitor<'de> for OptionalAddress {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        Address(self.0).expecting(f)
    }

    fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Address(self.0)).map(Some)
    }
}

struct Address(&'static str);

impl Visitor<'_> for Address {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{}: an address, as a number or a \"0x...\" hex string",
            self.0
        )
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::custom(format!("{}: {v} is negative", self.0)))
    }

    fn visit_str<E: Error>(self, s: &str) -> Result<u64, E> {
        report::hex::parse(s).ok_or_else(|| {
            E::custom(format!(
                "{}: {s:?} is not an address (expected \"0x\" and hex digits, at most 0xffffffffffffffff)",
                self.0
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        #[serde(default, deserialize_with = "a")]
        a: Option<u64>,
    }

    fn a<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        super::optional(d, "a")
    }

    fn read(json: &str) -> Result<Option<u64>, String> {
        serde_json::from_str::<Body>(json)
            .map(|b| b.a)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_hex_strings_null_and_absent() {
        assert_eq!(read(r#"{"a": 4096}"#), Ok(Some(4096)));
        assert_eq!(read(r#"{"a": "0x1000"}"#), Ok(Some(4096)));
        assert_eq!(read(r#"{"a": "0xFFFF8000"}"#), Ok(Some(0xffff_8000)));
        assert_eq!(read(r#"{"a": 18446744073709551615}"#), Ok(Some(u64::MAX)));
        assert_eq!(read(r#"{"a": "0xffffffffffffffff"}"#), Ok(Some(u64::MAX)));
        assert_eq!(read(r#"{"a": "0x0"}"#), Ok(Some(0)));
        assert_eq!(read(r#"{"a": "0x00000000000000000010"}"#), Ok(Some(16)));
        assert_eq!(read(r#"{"a": null}"#), Ok(None));
        assert_eq!(read("{}"), Ok(None));
    }

    #[test]
    fn bad_values_name_the_field() {
        for bad in [
            r#""4096""#,
            r#""0x""#,
            r#""0xzz""#,
            r#""0x+10""#,
            r#""0X10""#,
            r#"" 0x10""#,
            r#""0x10000000000000000""#,
            "-1",
            "1.5",
            "18446744073709551616",
            "true",
            "[1]",
        ] {
            let e = read(&format!(r#"{{"a": {bad}}}"#)).unwrap_err();
            assert!(
                e.starts_with("a: ") || e.contains("expected a: "),
                "{bad}: {e}"
            );
        }
        let e = read(r#"{"a": "0xzz"}"#).unwrap_err();
        assert!(e.starts_with(r#"a: "0xzz" is not an address"#), "{e}");
        assert!(read(r#"{"b": 1}"#).unwrap_err().contains("unknown field"));
    }
}
