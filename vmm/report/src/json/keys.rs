//! Duplicate keys in saved JSON: `{"a": 1, "a": 2}` is valid JSON to serde_json, which keeps
//! the last value (a map, a `serde_json::Value`) or refuses it only for a struct's own fields.
//! A saved file with two values for one key is not one hvprof wrote, and which one a reader
//! takes is a guess: [`check`] refuses it, naming the key and the object it is in, before the
//! file is read for its content.
//!
//! The check is one pass over the text with serde's visitor and no value kept (each object's
//! keys only while it is read); its depth is serde_json's recursion limit (128), like the read
//! that follows.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Where a value is: a path of keys and indexes from the top (`objects[2].counts`).
#[derive(Clone, Copy)]
enum At<'a> {
    Top,
    Key(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Top => f.write_str("the top level"),
            At::Key(At::Top, k) => f.write_str(k),
            At::Key(parent, k) => write!(f, "{parent}.{k}"),
            At::Index(At::Top, i) => write!(f, "[{i}]"),
            At::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// A value at `.0` whose objects must not repeat a key.
struct Unique<'a>(At<'a>);

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Unique(At::Index(&self.0, i)))?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key {key:?} is given twice in {}: a saved file has one value per key",
                    self.0
                )));
            }
            map.next_value_seed(Unique(At::Key(&self.0, &key)))?;
            seen.insert(key);
        }
        Ok(())
    }
}

/// Checks that no object in the JSON `text` repeats a key (an error naming the key and the
/// object's path; malformed JSON is an error too, as serde_json reports it).
pub fn check(text: &str) -> Result<(), serde_json::Error> {
    let mut d = serde_json::Deserializer::from_str(text);
    Unique(At::Top).deserialize(&mut d)?;
    d.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_named_with_its_object() {
        check(r#"{"a":1,"b":[{"c":2},{"c":3,"d":{"e":[]}}],"f":{"a":1}}"#).unwrap();
        let cases = [
            (
                r#"{"a":1,"a":2}"#,
                r#"the key "a" is given twice in the top level"#,
            ),
            (
                r#"{"b":[{"c":2},{"c":3,"c":4}]}"#,
                r#"the key "c" is given twice in b[1]"#,
            ),
            (
                r#"{"x":{"y":{"z\u0041":1,"zA":2}}}"#,
                r#"the key "zA" is given twice in x.y"#,
            ),
            (r#"[{"k":1,"k":1}]"#, r#"the key "k" is given twice in [0]"#),
        ];
        for (text, want) in cases {
            let e = check(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text}: {e}");
            assert!(e.contains("line 1 column"), "{e}");
        }
        assert!(check("{").is_err());
        assert!(check("{} {}").is_err(), "trailing data");
    }
}
