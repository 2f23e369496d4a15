//! `encoding/json` output: `json.Marshal` (compact) and `json.MarshalIndent(v, "", "    ")`
//! (what `kubectl -o json` prints), with Go's key order (sorted), number spelling and string
//! escaping (`<`, `>`, `&`, U+2028 and U+2029 become `\u003c` ...).

use super::data::Data;
use super::float::json_float;

/// `json.Marshal`.
pub(crate) fn marshal(d: &Data) -> String {
    let mut out = String::new();
    write_value(&mut out, d, None, 0);
    out
}

/// `json.MarshalIndent(d, "", indent)`.
pub(crate) fn marshal_indent(d: &Data, indent: &str) -> String {
    let mut out = String::new();
    write_value(&mut out, d, Some(indent), 0);
    out
}

fn newline(out: &mut String, indent: Option<&str>, depth: usize) {
    if let Some(unit) = indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(unit);
        }
    }
}

fn write_value(out: &mut String, d: &Data, indent: Option<&str>, depth: usize) {
    match d {
        Data::Null => out.push_str("null"),
        Data::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Data::Int(i) => out.push_str(&i.to_string()),
        Data::Float(f) => out.push_str(&json_float(*f)),
        Data::Str(s) => write_string(out, s),
        Data::List(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                write_value(out, item, indent, depth + 1);
            }
            newline(out, indent, depth);
            out.push(']');
        }
        Data::Map(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                write_string(out, k);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write_value(out, v, indent, depth + 1);
            }
            newline(out, indent, depth);
            out.push('}');
        }
    }
}

/// A JSON string as Go writes it with HTML escaping on.
pub(crate) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golang::NumberMode;

    #[test]
    fn marshals_like_go() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"s":"a<b>&c\u2028é\t","n":null,"e":1.5e-7,"big":1e21,"l":[],"m":{},"x":[1,{"k":"v"}]}"#,
        )
        .unwrap();
        let d = Data::from_json(&v, NumberMode::Unstructured);
        assert_eq!(
            marshal(&d),
            r#"{"big":1e+21,"e":1.5e-7,"l":[],"m":{},"n":null,"s":"a\u003cb\u003e\u0026c\u2028é\t","x":[1,{"k":"v"}]}"#
        );
        assert_eq!(
            marshal_indent(&d, "    "),
            "{\n    \"big\": 1e+21,\n    \"e\": 1.5e-7,\n    \"l\": [],\n    \"m\": {},\n    \"n\": null,\n    \"s\": \"a\\u003cb\\u003e\\u0026c\\u2028é\\t\",\n    \"x\": [\n        1,\n        {\n            \"k\": \"v\"\n        }\n    ]\n}"
        );
    }
}
