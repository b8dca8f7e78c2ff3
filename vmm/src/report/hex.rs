//! Addresses in profile.json: `"0x..."` strings, because JSON numbers lose precision past
//! 2^53 in most readers and kernel addresses are far above that.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 64-bit value written as a `0x`-prefixed hex string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hex(pub u64);

/// An optional 64-bit value: `null` or a `0x`-prefixed hex string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OptHex(pub Option<u64>);

fn parse<E: serde::de::Error>(s: &str) -> Result<u64, E> {
    let digits = s
        .strip_prefix("0x")
        .ok_or_else(|| E::custom(format!("expected a 0x-prefixed hex string, not {s:?}")))?;
    u64::from_str_radix(digits, 16).map_err(|e| E::custom(format!("{s:?}: {e}")))
}

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map(Hex)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let v = Hex(0xffff_8000_0000_1234);
        let s = serde_json::to_string(&v).unwrap();
        assert_eq!(s, "\"0xffff800000001234\"");
        assert_eq!(serde_json::from_str::<Hex>(&s).unwrap(), v);
        assert!(serde_json::from_str::<Hex>("\"1234\"").is_err());
        assert!(serde_json::from_str::<Hex>("\"0xzz\"").is_err());
        assert!(serde_json::from_str::<Hex>("1234").is_err());
        assert_eq!(serde_json::to_string(&OptHex(None)).unwrap(), "null");
        assert_eq!(
            serde_json::from_str::<OptHex>("\"0x10\"").unwrap(),
            OptHex(Some(16))
        );
    }
}
