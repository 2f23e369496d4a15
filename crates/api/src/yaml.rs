//! YAML read as kubectl reads it: `sigs.k8s.io/yaml` over go-yaml v2, which follows YAML 1.1.
//!
//! Where YAML 1.1 and 1.2 differ in a way manifests meet, it is file modes: Kubernetes' own
//! examples write `defaultMode: 0400`, a plain scalar with a leading zero, which YAML 1.1 (and
//! so kubectl) reads as the octal integer 256. `serde_yaml_ng` follows YAML 1.2, where that is
//! the string `"0400"`, and the Pod would be refused (`expected i32`). This module decodes a
//! document into a JSON value with go-yaml v2's reading of such scalars:
//!
//! * a plain (unquoted) scalar of an optional sign, a leading `0` and octal digits is that
//!   octal integer (`0644` → 420, `-010` → -8);
//! * one with a leading `0` and an 8 or 9 in it is the decimal number (go-yaml's float
//!   fallback: `09` → 9);
//! * a quoted one (`'0644'`, `"0644"`) stays a string, as in both versions.
//!
//! A scalar is known to be plain by where its text lies in the manifest: `serde_yaml_ng` lends
//! the scalar's own bytes from the input, and a quoted one is preceded by its quote. The other
//! YAML 1.1 readings (`yes`/`no`/`on`/`off` as booleans, `1_000`) are not applied: kubectl
//! refuses them in string fields, and podlab keeps accepting them as strings.

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A seed that decodes one document of `text` (the whole manifest the deserializer reads)
/// into a JSON value, with YAML 1.1 octal integers.
#[derive(Clone, Copy)]
pub struct Yaml11<'t> {
    pub text: &'t str,
}

impl<'de> DeserializeSeed<'de> for Yaml11<'de> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// go-yaml v2's integer reading of a plain scalar with a leading zero (see the module doc);
/// None when `scalar` is not one.
pub fn leading_zero_integer(scalar: &str) -> Option<i64> {
    let (negative, digits) = match scalar.as_bytes().first()? {
        b'-' => (true, &scalar[1..]),
        b'+' => (false, &scalar[1..]),
        _ => (false, scalar),
    };
    if digits.len() < 2 || !digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let radix = if digits.bytes().all(|b| b < b'8') {
        8
    } else {
        10
    };
    let value = i64::from_str_radix(digits, radix).ok()?;
    Some(if negative { -value } else { value })
}

impl<'t> Yaml11<'t> {
    /// Whether `s` is a slice of the manifest that no quote precedes (a plain scalar).
    fn is_plain(&self, s: &str) -> bool {
        let start = self.text.as_ptr() as usize;
        let at = s.as_ptr() as usize;
        if at < start || at + s.len() > start + self.text.len() {
            return false; // not lent from the text: made by unescaping, so it was quoted
        }
        let offset = at - start;
        offset == 0 || !matches!(self.text.as_bytes()[offset - 1], b'"' | b'\'')
    }
}

impl<'de> Visitor<'de> for Yaml11<'de> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or_else(|_| float(v as f64), Value::from))
    }

    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(u64::try_from(v).map_or_else(|_| float(v as f64), Value::from))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(float(v))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Value, E> {
        if self.is_plain(v) {
            if let Some(n) = leading_zero_integer(v) {
                return Ok(Value::from(n));
            }
        }
        Ok(Value::String(v.to_string()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A float as serde_json keeps it (NaN and infinities are null).
fn float(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Value {
        let document = serde_yaml_ng::Deserializer::from_str(text).next().unwrap();
        Yaml11 { text }.deserialize(document).unwrap()
    }

    #[test]
    fn plain_leading_zero_scalars_are_octal_as_kubectl_reads_them_and_quoted_ones_strings() {
        let value = read(
            "a: 0644\nb: '0644'\nc: \"0400\"\nd: [0400, 0777, 0]\ne: 09\nf: -010\ng: 420\n\
             h: 0o644\ni: 0x1A4\nj: '00'\nk: 1.5\nl: abc\nm: ~\nn: true\n",
        );
        assert_eq!(
            value,
            serde_json::json!({
                "a": 420, "b": "0644", "c": "0400", "d": [256, 511, 0], "e": 9, "f": -8,
                "g": 420, "h": 420, "i": 420, "j": "00", "k": 1.5, "l": "abc", "m": null,
                "n": true
            })
        );
    }

    #[test]
    fn json_is_read_unchanged() {
        let value = read(r#"{"mode": "0644", "n": [1, 2.5, -3], "o": {"p": null}}"#);
        assert_eq!(
            value,
            serde_json::json!({"mode": "0644", "n": [1, 2.5, -3], "o": {"p": null}})
        );
    }

    #[test]
    fn only_leading_zero_digit_runs_are_integers() {
        assert_eq!(leading_zero_integer("0644"), Some(420));
        assert_eq!(leading_zero_integer("+017"), Some(15));
        assert_eq!(leading_zero_integer("0089"), Some(89));
        assert_eq!(
            leading_zero_integer("0"),
            None,
            "plain 0 is read as 0 already"
        );
        assert_eq!(leading_zero_integer("644"), None);
        assert_eq!(leading_zero_integer("06a"), None);
        assert_eq!(leading_zero_integer("-"), None);
    }
}
