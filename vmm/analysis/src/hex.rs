//! Addresses in profile.json: `"0x..."` strings, because JSON numbers lose precision past
//! 2^53 in most readers and kernel addresses are far above that.

use std::fmt;

use serde::de::{Error, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 64-bit value written as a `0x`-prefixed hex string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hex(pub u64);

/// An optional 64-bit value: `null` or a `0x`-prefixed hex string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OptHex(pub Option<u64>);

/// Parses `"0x"` followed by at least one hex digit (either case; leading zeros allowed) of a
/// value that fits 64 bits. Nothing else: no sign, no spaces, no `0X`.
pub fn parse(s: &str) -> Option<u64> {
    let digits = s.strip_prefix("0x")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    // Only digits are left, so the one error from_str_radix can still give is overflow.
    u64::from_str_radix(digits, 16).ok()
}

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:#x}", self.0))
    }
}

struct HexVisitor;

impl Visitor<'_> for HexVisitor {
    type Value = Hex;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a 0x-prefixed hex string of at most 64 bits")
    }

    fn visit_str<E: Error>(self, s: &str) -> Result<Hex, E> {
        parse(s).map(Hex).ok_or_else(|| {
            E::custom(format!(
                "{s:?} is not a 0x-prefixed hex string of at most 64 bits"
            ))
        })
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(HexVisitor)
    }
}

impl Serialize for OptHex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.map(Hex).serialize(s)
    }
}

impl<'de> Deserialize<'de> for OptHex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(OptHex(Option::<Hex>::deserialize(d)?.map(|h| h.0)))
    }
}

/// Serde for sparse counts (`Vec<(index, count)>`) written as `[["0x...", count], ...]`: the
/// index as a [`Hex`] string (a whole-space host profile's bucket indices pass 2^53), the
/// count a number. Use with `#[serde(with = "hex::indexed_counts")]`.
pub mod indexed_counts {
    use super::Hex;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes each pair as `["0x...", count]`.
    pub fn serialize<S: Serializer>(counts: &[(u64, u64)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(counts.iter().map(|(i, c)| (Hex(*i), *c)))
    }

    /// Reads `[["0x...", count], ...]` (numeric indices are refused).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u64, u64)>, D::Error> {
        let pairs = Vec::<(Hex, u64)>::deserialize(d)?;
        Ok(pairs.into_iter().map(|(i, c)| (i.0, c)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let v = Hex(0xffff_8000_0000_1234);
        let s = serde_json::to_string(&v).unwrap();
        assert_eq!(s, "\"0xffff800000001234\"");
        assert_eq!(serde_json::from_str::<Hex>(&s).unwrap(), v);
        assert_eq!(serde_json::to_value(v).unwrap(), "0xffff800000001234");
        assert!(serde_json::from_str::<Hex>("\"1234\"").is_err());
        assert!(serde_json::from_str::<Hex>("\"0xzz\"").is_err());
        assert!(serde_json::from_str::<Hex>("1234").is_err());
        assert_eq!(serde_json::to_string(&OptHex(None)).unwrap(), "null");
        assert_eq!(
            serde_json::from_str::<OptHex>("\"0x10\"").unwrap(),
            OptHex(Some(16))
        );
        let from_value: Hex = serde_json::from_value("0x10".into()).unwrap();
        assert_eq!(from_value, Hex(16));
    }

    #[test]
    fn only_0x_and_hex_digits_are_read() {
        assert_eq!(parse("0x0"), Some(0));
        assert_eq!(parse("0x10"), Some(16));
        assert_eq!(parse("0xFFFF8000"), Some(0xffff_8000));
        assert_eq!(parse("0xffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse("0x00000000000000000010"), Some(16), "leading zeros");
        for bad in [
            "0x+10",
            "0x-10",
            "+0x10",
            "0x",
            "0X10",
            "10",
            " 0x10",
            "0x10 ",
            "0x1_0",
            "0x10000000000000000",
            "",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
            let json = serde_json::to_string(bad).unwrap();
            let e = serde_json::from_str::<Hex>(&json).unwrap_err().to_string();
            assert!(e.contains("not a 0x-prefixed hex string"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn indexed_counts_write_hex_indices_and_number_counts() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct O {
            #[serde(with = "indexed_counts")]
            counts: Vec<(u64, u64)>,
        }
        let o = O {
            counts: vec![(2, 5), (0x0fff_ffff_f810_0000, 9), (u64::MAX, 1)],
        };
        let s = serde_json::to_string(&o).unwrap();
        assert_eq!(
            s,
            r#"{"counts":[["0x2",5],["0xffffffff8100000",9],["0xffffffffffffffff",1]]}"#
        );
        assert_eq!(serde_json::from_str::<O>(&s).unwrap(), o);
        assert_eq!(
            serde_json::from_value::<O>(serde_json::to_value(&o).unwrap()).unwrap(),
            o
        );
        assert!(serde_json::from_str::<O>(r#"{"counts":[[2,5]]}"#).is_err());
        assert!(serde_json::from_str::<O>(r#"{"counts":[["0x+2",5]]}"#).is_err());
        assert!(serde_json::from_str::<O>(r#"{"counts":[["0x2","5"]]}"#).is_err());
        assert!(serde_json::from_str::<O>(r#"{"counts":[["0x2"]]}"#).is_err());
    }
}
