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

/// The largest integer every JSON reader holds exactly (readers of doubles: jq, JavaScript).
pub const MAX_EXACT: u64 = 1 << 53;

/// A count or size: a JSON number up to [`MAX_EXACT`], a `"0x..."` string above it (the rule
/// of docs/profile-json.md: no JSON number hvprof writes is one a reader of doubles rounds).
/// Either form is read, at any value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Big(pub u64);

impl Serialize for Big {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 <= MAX_EXACT {
            s.serialize_u64(self.0)
        } else {
            Hex(self.0).serialize(s)
        }
    }
}

struct BigVisitor;

impl Visitor<'_> for BigVisitor {
    type Value = Big;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a non-negative integer, or a 0x-prefixed hex string of at most 64 bits")
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<Big, E> {
        Ok(Big(v))
    }

    fn visit_str<E: Error>(self, s: &str) -> Result<Big, E> {
        HexVisitor.visit_str(s).map(|h| Big(h.0))
    }
}

impl<'de> Deserialize<'de> for Big {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BigVisitor)
    }
}

/// Serde for a `u64` field written as a [`Big`]: `#[serde(with = "hex::big")]`.
pub mod big {
    use super::Big;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Writes a number up to 2^53, a hex string above.
    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        Big(*v).serialize(s)
    }

    /// Reads either form.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        Big::deserialize(d).map(|b| b.0)
    }
}

/// Serde for an `Option<u64>` field written as a [`Big`] or null:
/// `#[serde(with = "hex::opt_big")]` (a guest's process and thread ids).
pub mod opt_big {
    use super::Big;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Writes null, a number up to 2^53, or a hex string above.
    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        v.map(Big).serialize(s)
    }

    /// Reads null or either form.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Option::<Big>::deserialize(d).map(|b| b.map(|b| b.0))
    }
}

/// Serde for sparse counts (`Vec<(index, count)>`) written as `[["0x...", count], ...]`: the
/// index as a [`Hex`] string (a whole-space host profile's bucket indices pass 2^53), the
/// count a [`Big`](super::Big) (a number up to 2^53). Use with
/// `#[serde(with = "hex::indexed_counts")]`.
pub mod indexed_counts {
    use super::{Big, Hex};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes each pair as `["0x...", count]`.
    pub fn serialize<S: Serializer>(counts: &[(u64, u64)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(counts.iter().map(|(i, c)| (Hex(*i), Big(*c))))
    }

    /// Reads `[["0x...", count], ...]` (numeric indices are refused).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u64, u64)>, D::Error> {
        let pairs = Vec::<(Hex, Big)>::deserialize(d)?;
        Ok(pairs.into_iter().map(|(i, c)| (i.0, c.0)).collect())
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
    fn big_values_are_numbers_up_to_2_53_and_hex_strings_above() {
        let text = |v: u64| serde_json::to_string(&Big(v)).unwrap();
        assert_eq!(text(0), "0");
        assert_eq!(text(MAX_EXACT), "9007199254740992");
        assert_eq!(text(MAX_EXACT + 1), r#""0x20000000000001""#);
        assert_eq!(text(u64::MAX), r#""0xffffffffffffffff""#);
        for v in [0, 5, MAX_EXACT, MAX_EXACT + 1, 1 << 60, u64::MAX] {
            assert_eq!(serde_json::from_str::<Big>(&text(v)).unwrap(), Big(v));
            let value = serde_json::to_value(Big(v)).unwrap();
            assert_eq!(serde_json::from_value::<Big>(value).unwrap(), Big(v));
        }
        // Both forms are read at any value.
        assert_eq!(serde_json::from_str::<Big>(r#""0x10""#).unwrap(), Big(16));
        assert_eq!(
            serde_json::from_str::<Big>("18446744073709551615").unwrap(),
            Big(u64::MAX)
        );
        for bad in ["-1", "1.5", r#""16""#, "null", "1e3"] {
            assert!(serde_json::from_str::<Big>(bad).is_err(), "{bad}");
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
        assert!(serde_json::from_str::<O>(r#"{"counts":[["0x2",-5]]}"#).is_err());
        assert!(serde_json::from_str::<O>(r#"{"counts":[["0x2"]]}"#).is_err());
    }
}
