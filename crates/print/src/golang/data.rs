//! JSON as a Go program holds it after decoding into `interface{}`: `map[string]interface {}`,
//! `[]interface {}`, `string`, `bool`, `int64`, `float64` and `nil`.
//!
//! kubectl decodes numbers in two slightly different ways, and the difference is visible (in `%T`,
//! in `printf "%d"`, in comparisons): the JSONPath printer sees the object as client-go's
//! unstructured decoder made it (integers that fit in int64 become `int64`, everything else
//! `float64`), while the go-template printer first re-encodes the object with `encoding/json`, so a
//! float with an integral value such as `3.0` is written `3` and comes back as `int64`.

use std::collections::BTreeMap;

/// A decoded JSON value with Go's types. Map keys sort bytewise, as Go's `fmt` and
/// `encoding/json` print them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Data {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Data>),
    Map(BTreeMap<String, Data>),
}

/// Which of kubectl's two number decodings to imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumberMode {
    /// client-go unstructured decoding (JSONPath, custom columns, sort-by).
    Unstructured,
    /// `encoding/json` re-encode then decode with int64 conversion (go-template).
    JsonRoundTrip,
}

impl Data {
    pub(crate) fn from_json(value: &serde_json::Value, mode: NumberMode) -> Data {
        match value {
            serde_json::Value::Null => Data::Null,
            serde_json::Value::Bool(b) => Data::Bool(*b),
            serde_json::Value::Number(n) => number(n, mode),
            serde_json::Value::String(s) => Data::Str(s.clone()),
            serde_json::Value::Array(items) => {
                Data::List(items.iter().map(|v| Data::from_json(v, mode)).collect())
            }
            serde_json::Value::Object(map) => Data::Map(
                map.iter()
                    .map(|(k, v)| (k.clone(), Data::from_json(v, mode)))
                    .collect(),
            ),
        }
    }

    /// The Go type name `%T` and error messages use for this value held in an `interface{}`.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Data::Null => "<nil>",
            Data::Bool(_) => "bool",
            Data::Int(_) => "int64",
            Data::Float(_) => "float64",
            Data::Str(_) => "string",
            Data::List(_) => "[]interface {}",
            Data::Map(_) => "map[string]interface {}",
        }
    }
}

fn number(n: &serde_json::Number, mode: NumberMode) -> Data {
    if let Some(i) = n.as_i64() {
        return Data::Int(i);
    }
    // A u64 beyond int64 fails Go's Int64() conversion and falls back to float64.
    let f = n.as_f64().unwrap_or(0.0);
    if n.is_f64() && mode == NumberMode::JsonRoundTrip && f.fract() == 0.0 && f.abs() < 1e21 {
        // encoding/json writes an integral float without a fraction ("3"), which decodes as
        // int64 when it fits.
        if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) {
            return Data::Int(f as i64);
        }
    }
    Data::Float(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_decode_like_kubectl() {
        let v = json!({"i": 3, "f": 3.0, "h": 0.5, "big": 12345678901234567890u64});
        let un = Data::from_json(&v, NumberMode::Unstructured);
        let rt = Data::from_json(&v, NumberMode::JsonRoundTrip);
        let Data::Map(un) = un else { panic!() };
        let Data::Map(rt) = rt else { panic!() };
        assert_eq!(un["i"], Data::Int(3));
        assert_eq!(un["f"], Data::Float(3.0));
        assert_eq!(rt["f"], Data::Int(3));
        assert_eq!(rt["h"], Data::Float(0.5));
        assert!(matches!(rt["big"], Data::Float(_)));
    }
}
