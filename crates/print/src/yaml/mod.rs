//! `kubectl -o yaml`: sigs.k8s.io/yaml, which turns the object's JSON into YAML with go-yaml v2.
//! The emitter below follows go-yaml's (libyaml's) block style: 2-space indentation, sequences
//! inside a mapping not indented past their key, keys in go-yaml's "natural" order (digit runs
//! compared as numbers), strings plain when they read back as the same string, otherwise
//! single-quoted, double-quoted (with escapes) or a literal block (`|`) for multi-line text, and
//! empty collections as `{}` / `[]`. Numbers go through Go's JSON spelling and back, as they do
//! in kubectl (so `3.0` prints `3`).

mod scalar;

use crate::golang::Data;
use crate::PrintError;
use scalar::{is_break, is_printable, natural_key_less, Scalar, Style};

/// The YAML document for one value, ending in a newline. Fails like kubectl
/// (`yaml: control characters are not allowed`) on characters go-yaml's reader refuses.
pub fn to_yaml(value: &serde_json::Value) -> Result<String, PrintError> {
    let mut data = Data::from_json(value, crate::golang::NumberMode::Unstructured);
    reread_strings(&mut data)?;
    let mut e = Emitter {
        out: String::new(),
        column: 0,
        indent: -1,
        indents: Vec::new(),
        indention: true,
        whitespace: true,
    };
    e.node(&data, Context::Root);
    e.write_indent();
    Ok(e.out)
}

/// sigs.k8s.io/yaml reads the object's JSON back with the YAML parser before writing YAML, and
/// that parser refuses some characters Go's JSON writes raw (DEL, C1 controls, U+FFFE/U+FFFF)
/// and folds a raw NEL (U+0085) line break inside a quoted string into a space.
fn reread_strings(d: &mut Data) -> Result<(), PrintError> {
    fn check(s: &str) -> Result<(), PrintError> {
        let refused = s.chars().any(|c| {
            let u = c as u32;
            u == 0x7F || ((0x80..=0x9F).contains(&u) && u != 0x85) || u == 0xFFFE || u == 0xFFFF
        });
        if refused {
            return Err(PrintError::Yaml(
                "yaml: control characters are not allowed".into(),
            ));
        }
        Ok(())
    }
    match d {
        Data::Str(s) => {
            check(s)?;
            if s.contains('\u{85}') {
                *s = fold_line_breaks(s);
            }
        }
        Data::List(items) => items.iter_mut().try_for_each(reread_strings)?,
        Data::Map(map) => {
            for k in map.keys() {
                check(k)?;
            }
            if map.keys().any(|k| k.contains('\u{85}')) {
                let old = std::mem::take(map);
                *map = old
                    .into_iter()
                    .map(|(k, v)| (fold_line_breaks(&k), v))
                    .collect();
            }
            map.values_mut().try_for_each(reread_strings)?;
        }
        _ => {}
    }
    Ok(())
}

/// YAML's line folding in a double-quoted scalar, for the NEL breaks Go's JSON leaves raw:
/// blanks around a break go, one break becomes a space, n breaks become n-1 newlines.
fn fold_line_breaks(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let blank = |c: char| c == ' ' || c == '\t';
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let run_end = (i..chars.len())
            .find(|&j| !blank(chars[j]))
            .unwrap_or(chars.len());
        if run_end < chars.len() && chars[run_end] == '\u{85}' {
            let mut breaks = 0;
            i = run_end;
            while i < chars.len() && (blank(chars[i]) || chars[i] == '\u{85}') {
                breaks += usize::from(chars[i] == '\u{85}');
                i += 1;
            }
            if breaks == 1 {
                out.push(' ');
            } else {
                out.extend(std::iter::repeat_n('\n', breaks - 1));
            }
        } else if run_end > i {
            out.extend(&chars[i..run_end]);
            i = run_end;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

const BEST_INDENT: i32 = 2;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Root,
    MappingValue,
    SequenceItem,
    SimpleKey,
    ComplexKey,
}

struct Emitter {
    out: String,
    column: i32,
    indent: i32,
    indents: Vec<i32>,
    /// The line so far holds only indentation (and indicators that count as indentation).
    indention: bool,
    /// The last thing written was white space.
    whitespace: bool,
}

impl Emitter {
    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    /// A line break inside a scalar: `\n` starts a new line, other breaks are written as they
    /// are (and the column starts again).
    fn write_break(&mut self, c: char) {
        if c == '\n' {
            self.put_break();
        } else {
            self.out.push(c);
            self.column = 0;
        }
    }

    fn write(&mut self, s: &str) {
        for c in s.chars() {
            self.put(c);
        }
    }

    fn write_indent(&mut self) {
        let indent = self.indent.max(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    fn write_indicator(
        &mut self,
        s: &str,
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        self.write(s);
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    fn increase_indent(&mut self, flow: bool, indentless: bool) {
        self.indents.push(self.indent);
        if self.indent < 0 {
            self.indent = if flow { BEST_INDENT } else { 0 };
        } else if !indentless {
            self.indent += BEST_INDENT;
        }
    }

    fn pop_indent(&mut self) {
        self.indent = self.indents.pop().unwrap_or(-1);
    }

    fn node(&mut self, d: &Data, ctx: Context) {
        match d {
            Data::Map(map) if map.is_empty() => self.write_indicator("{}", true, false, false),
            Data::List(items) if items.is_empty() => self.write_indicator("[]", true, false, false),
            Data::Map(map) => {
                self.increase_indent(false, false);
                let mut keys: Vec<&String> = map.keys().collect();
                crate::golang::sort::sort(&mut keys, |a, b| natural_key_less(a, b));
                for key in keys {
                    self.write_indent();
                    let scalar = Scalar::for_string(key);
                    if scalar.is_simple_key() {
                        self.scalar(&scalar, Context::SimpleKey);
                        self.write_indicator(":", false, false, false);
                    } else {
                        self.write_indicator("?", true, false, true);
                        self.scalar(&scalar, Context::ComplexKey);
                        self.write_indent();
                        self.write_indicator(":", true, false, true);
                    }
                    self.node(&map[key], Context::MappingValue);
                }
                self.pop_indent();
            }
            Data::List(items) => {
                let indentless = ctx == Context::MappingValue && !self.indention;
                self.increase_indent(false, indentless);
                for item in items {
                    self.write_indent();
                    self.write_indicator("-", true, false, true);
                    self.node(item, Context::SequenceItem);
                }
                self.pop_indent();
            }
            scalar => {
                let s = Scalar::for_data(scalar);
                self.scalar(&s, ctx);
            }
        }
    }

    fn scalar(&mut self, s: &Scalar, ctx: Context) {
        let simple_key = ctx == Context::SimpleKey;
        let mut style = s.requested;
        let a = &s.analysis;
        if style == Style::Plain && (!a.block_plain_allowed || (s.value.is_empty() && simple_key)) {
            style = Style::Single;
        }
        if style == Style::Single && !a.single_quoted_allowed {
            style = Style::Double;
        }
        if style == Style::Literal && (!a.block_allowed || simple_key) {
            style = Style::Double;
        }
        self.increase_indent(true, false);
        match style {
            Style::Plain => self.write_plain(&s.value),
            Style::Single => self.write_single(&s.value),
            Style::Double => self.write_double(&s.value),
            Style::Literal => self.write_literal(&s.value),
        }
        self.pop_indent();
    }

    fn write_plain(&mut self, value: &str) {
        if !self.whitespace && !value.is_empty() {
            self.put(' ');
        }
        for c in value.chars() {
            if is_break(c) {
                self.put_break();
            } else {
                self.put(c);
                if c != ' ' {
                    self.indention = false;
                }
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn write_single(&mut self, value: &str) {
        self.write_indicator("'", true, false, false);
        let mut breaks = false;
        for c in value.chars() {
            if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                if c == '\'' {
                    self.write("''");
                } else {
                    self.put(c);
                }
                self.indention = false;
                breaks = false;
            }
        }
        self.write_indicator("'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_double(&mut self, value: &str) {
        self.write_indicator("\"", true, false, false);
        for c in value.chars() {
            if !is_printable(c) || c == '\u{FEFF}' || is_break(c) || c == '"' || c == '\\' {
                self.put('\\');
                match c {
                    '\0' => self.put('0'),
                    '\u{7}' => self.put('a'),
                    '\u{8}' => self.put('b'),
                    '\t' => self.put('t'),
                    '\n' => self.put('n'),
                    '\u{b}' => self.put('v'),
                    '\u{c}' => self.put('f'),
                    '\r' => self.put('r'),
                    '\u{1b}' => self.put('e'),
                    '"' => self.put('"'),
                    '\\' => self.put('\\'),
                    '\u{85}' => self.put('N'),
                    '\u{a0}' => self.put('_'),
                    '\u{2028}' => self.put('L'),
                    '\u{2029}' => self.put('P'),
                    c => {
                        let v = c as u32;
                        let text = if v <= 0xFF {
                            format!("x{v:02X}")
                        } else if v <= 0xFFFF {
                            format!("u{v:04X}")
                        } else {
                            format!("U{v:08X}")
                        };
                        self.write(&text);
                    }
                }
            } else {
                self.put(c);
            }
        }
        self.write_indicator("\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_literal(&mut self, value: &str) {
        self.write_indicator("|", true, false, false);
        // Block scalar hints: an indentation indicator when the text starts with a space or a
        // break, and the chomping indicator for the trailing breaks.
        let first = value.chars().next();
        if first.is_some_and(|c| c == ' ' || is_break(c)) {
            self.write_indicator(&BEST_INDENT.to_string(), false, false, false);
        }
        let mut rev = value.chars().rev();
        let chomp = match rev.next() {
            None => Some("-"),
            Some(c) if !is_break(c) => Some("-"),
            Some(_) => match rev.next() {
                None => Some("+"),
                Some(c) if is_break(c) => Some("+"),
                Some(_) => None,
            },
        };
        if let Some(ch) = chomp {
            self.write_indicator(ch, false, false, false);
        }
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        for c in value.chars() {
            if is_break(c) {
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                    breaks = false;
                }
                self.put(c);
                self.indention = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn block_style_like_kubectl() {
        let v = json!({"kind": "Pod", "metadata": {"annotations": {"multi": "line one\nline two\n"}},
            "spec": {"containers": [{"command": ["false", "sh"], "name": "c", "resources": {}}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "startedAt": "2025-05-01T10:00:05Z", "n": 3}});
        assert_eq!(
            to_yaml(&v).unwrap(),
            "kind: Pod\nmetadata:\n  annotations:\n    multi: |\n      line one\n      line two\nspec:\n  containers:\n  - command:\n    - \"false\"\n    - sh\n    name: c\n    resources: {}\nstatus:\n  \"n\": 3\n  phase: Running\n  podIP: 10.0.0.1\n  startedAt: \"2025-05-01T10:00:05Z\"\n"
        );
    }

    #[test]
    fn quoting_rules() {
        let y = |s: &str| to_yaml(&json!({ "k": s })).unwrap();
        assert_eq!(y(""), "k: \"\"\n");
        assert_eq!(y("yes"), "k: \"yes\"\n");
        assert_eq!(y("123"), "k: \"123\"\n");
        assert_eq!(y("1:20"), "k: \"1:20\"\n");
        assert_eq!(y(" lead"), "k: ' lead'\n");
        assert_eq!(y("a: b"), "k: 'a: b'\n");
        assert_eq!(y("it's"), "k: it's\n");
        assert_eq!(y("- x"), "k: '- x'\n");
        assert_eq!(y("tab\there"), "k: \"tab\\there\"\n");
        assert_eq!(y("nl\n"), "k: |\n  nl\n");
        assert_eq!(y("trailing \nx"), "k: \"trailing \\nx\"\n");
    }

    #[test]
    fn refuses_what_go_yaml_refuses() {
        assert!(to_yaml(&json!({"k": "a\u{7f}"})).is_err());
        assert_eq!(to_yaml(&json!({"k": "x\u{85}y"})).unwrap(), "k: x y\n");
    }

    #[test]
    fn keys_sort_naturally() {
        let mut keys = vec!["a10", "a9", "a-b", "ab", "B", "_x"];
        crate::golang::sort::sort(&mut keys, |a, b| natural_key_less(a, b));
        assert_eq!(keys, vec!["_x", "B", "a-b", "a9", "a10", "ab"]);
    }
}
