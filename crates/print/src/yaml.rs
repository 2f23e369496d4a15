//! `kubectl -o yaml`: sigs.k8s.io/yaml, which turns the object's JSON into YAML with go-yaml v2.
//! The emitter below follows go-yaml's (libyaml's) block style: 2-space indentation, sequences
//! inside a mapping not indented past their key, keys in go-yaml's "natural" order (digit runs
//! compared as numbers), strings plain when they read back as the same string, otherwise
//! single-quoted, double-quoted (with escapes) or a literal block (`|`) for multi-line text, and
//! empty collections as `{}` / `[]`. Numbers go through Go's JSON spelling and back, as they do
//! in kubectl (so `3.0` prints `3`).

use crate::golang::float::{format_float, json_float};
use crate::golang::Data;
use crate::PrintError;

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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

struct Scalar {
    value: String,
    requested: Style,
    analysis: Analysis,
}

impl Scalar {
    fn for_string(s: &str) -> Scalar {
        // go-yaml's stringv: multi-line text is a literal block; text that would read back as
        // something else (a number, a bool, null, a timestamp, a base-60 float) is quoted.
        let requested = if s.contains('\n') {
            Style::Literal
        } else if resolves_to_string(s) && !is_base60_float(s) {
            Style::Plain
        } else {
            Style::Double
        };
        Scalar {
            value: s.to_string(),
            requested,
            analysis: analyze(s),
        }
    }

    fn for_data(d: &Data) -> Scalar {
        let text = match d {
            Data::Null => "null".to_string(),
            Data::Bool(b) => b.to_string(),
            Data::Int(i) => i.to_string(),
            Data::Float(f) => yaml_number(&json_float(*f)),
            Data::Str(s) => return Scalar::for_string(s),
            Data::List(_) | Data::Map(_) => String::new(),
        };
        Scalar {
            analysis: analyze(&text),
            value: text,
            requested: Style::Plain,
        }
    }

    fn is_simple_key(&self) -> bool {
        !self.analysis.multiline && self.value.len() <= 128
    }
}

/// How go-yaml prints a number it read from Go's JSON text.
fn yaml_number(json_text: &str) -> String {
    if let Ok(i) = json_text.parse::<i64>() {
        return i.to_string();
    }
    if let Ok(u) = json_text.parse::<u64>() {
        return u.to_string();
    }
    match json_text.parse::<f64>() {
        Ok(f) if f.is_nan() => ".nan".into(),
        Ok(f) if f.is_infinite() => if f > 0.0 { ".inf" } else { "-.inf" }.into(),
        Ok(f) => format_float(f, 'g', -1),
        Err(_) => json_text.to_string(),
    }
}

/// What libyaml's `analyze_scalar` finds out about a scalar: which styles may show it.
#[derive(Debug, Clone, Copy)]
struct Analysis {
    multiline: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// libyaml's `is_printable` (note: nothing beyond the Basic Multilingual Plane).
fn is_printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0A
        || (0x20..=0x7E).contains(&u)
        || (0xA0..=0xD7FF).contains(&u)
        || ((0xE000..=0xFFFD).contains(&u) && u != 0xFEFF)
}

fn analyze(value: &str) -> Analysis {
    if value.is_empty() {
        return Analysis {
            multiline: false,
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let mut block_indicators = value.starts_with("---") || value.starts_with("...");
    let mut special_characters = false;
    let (mut line_breaks, mut leading_space, mut leading_break) = (false, false, false);
    let (mut trailing_space, mut trailing_break) = (false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    let chars: Vec<char> = value.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        let followed_by_whitespace = next.is_none_or(|n| is_blank(n) || is_break(n));
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' if followed_by_whitespace => block_indicators = true,
                '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) {
            special_characters = true;
        }
        let last = i + 1 == chars.len();
        if c == ' ' {
            leading_space |= i == 0;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= i == 0;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = is_blank(c) || is_break(c);
    }
    let mut a = Analysis {
        multiline: line_breaks,
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special_characters {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks || block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// go-yaml's `resolve("", s)` yields the string tag: `s` does not read back as null, a bool,
/// a number or a timestamp.
fn resolves_to_string(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", "n", "N", "no",
        "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", "", "~", "null", "Null",
        "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF",
    ];
    if SPECIAL.contains(&s) {
        return false;
    }
    let Some(first) = s.bytes().next() else {
        return false;
    };
    match first {
        b'.' => s.parse::<f64>().is_err() || s.contains(['i', 'I', 'n', 'N']),
        b'0'..=b'9' | b'+' | b'-' => {
            if is_timestamp(s) {
                return false;
            }
            let plain: String = s.chars().filter(|c| *c != '_').collect();
            !(go_parse_int(&plain) || is_yaml_float(&plain) || is_binary_int(&plain))
        }
        _ => true,
    }
}

/// `strconv.ParseInt(s, 0, 64)` or `ParseUint` would accept it (any size, as go-yaml then
/// tries big integers).
fn go_parse_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = body.to_ascii_lowercase();
    let (digits, radix) = if let Some(d) = lower.strip_prefix("0x") {
        (d, 16)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (d, 8)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (d, 2)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (&lower[1..], 8)
    } else {
        (lower.as_str(), 10)
    };
    !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix))
}

fn is_binary_int(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    body.strip_prefix("0b")
        .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c == '0' || c == '1'))
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// go-yaml's timestamp formats: `YYYY-M-D`, optionally followed by `T`/`t`/space and a time.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let rest = &s[5..];
    let (date, time) = match rest.find(['T', 't', ' ']) {
        Some(p) => (&rest[..p], Some((&rest[p..p + 1], &rest[p + 1..]))),
        None => (rest, None),
    };
    let mut parts = date.split('-');
    let (Some(month), Some(day), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let valid_num = |p: &str, max: u32| {
        !p.is_empty() && p.len() <= 2 && p.bytes().all(|c| c.is_ascii_digit()) && {
            let n: u32 = p.parse().unwrap_or(0);
            n >= 1 && n <= max
        }
    };
    if !valid_num(month, 12) || !valid_num(day, 31) {
        return false;
    }
    match time {
        None => true,
        Some((sep, t)) => {
            // 15:4:5 with optional fraction; a zone (Z or ±hh:mm) only after T/t.
            let (clock, zone) = if sep == " " {
                (t, "")
            } else {
                match t.find(['Z', '+', '-']) {
                    Some(p) => (&t[..p], &t[p..]),
                    None => return false,
                }
            };
            let (hms, frac) = match clock.split_once('.') {
                Some((h, f)) => (h, Some(f)),
                None => (clock, None),
            };
            if frac.is_some_and(|f| f.is_empty() || !f.bytes().all(|c| c.is_ascii_digit())) {
                return false;
            }
            let fields: Vec<&str> = hms.split(':').collect();
            if fields.len() != 3
                || !fields.iter().zip([23u32, 59, 59]).all(|(f, max)| {
                    !f.is_empty()
                        && f.len() <= 2
                        && f.bytes().all(|c| c.is_ascii_digit())
                        && f.parse::<u32>().unwrap_or(99) <= max
                })
            {
                return false;
            }
            if sep == " " {
                return true;
            }
            zone == "Z" || {
                let z = zone.as_bytes();
                z.len() == 6
                    && (z[0] == b'+' || z[0] == b'-')
                    && z[1..3].iter().all(u8::is_ascii_digit)
                    && z[3] == b':'
                    && z[4..6].iter().all(u8::is_ascii_digit)
            }
        }
    }
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`
fn is_base60_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = match body.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (body, None),
    };
    if frac.is_some_and(|f| !f.bytes().all(|c| c.is_ascii_digit() || c == b'_')) {
        return false;
    }
    let mut parts = main.split(':');
    let Some(head) = parts.next() else {
        return false;
    };
    if !head.bytes().next().is_some_and(|c| c.is_ascii_digit())
        || !head.bytes().all(|c| c.is_ascii_digit() || c == b'_')
    {
        return false;
    }
    let mut any = false;
    for part in parts {
        any = true;
        let b = part.as_bytes();
        let ok = match b.len() {
            1 => b[0].is_ascii_digit(),
            2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    any
}

/// go-yaml v2's key order: letters by code point, a non-letter before a letter, runs of digits
/// compared by value. (Not transitive: the result depends on Go's sort algorithm.)
fn natural_key_less(a: &str, b: &str) -> bool {
    let (x, y): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    {
        for i in 0..x.len().min(y.len()) {
            if x[i] == y[i] {
                continue;
            }
            let (xl, yl) = (x[i].is_alphabetic(), y[i].is_alphabetic());
            if xl && yl {
                return x[i] < y[i];
            }
            if xl || yl {
                return yl;
            }
            let (mut xn, mut yn) = (0i64, 0i64);
            if x[i] == '0' || y[i] == '0' {
                let mut j = i;
                while j > 0 && x[j - 1].is_ascii_digit() {
                    j -= 1;
                    if x[j] != '0' {
                        xn = 1;
                        yn = 1;
                        break;
                    }
                }
            }
            let mut xi = i;
            while xi < x.len() && x[xi].is_ascii_digit() {
                xn = xn
                    .wrapping_mul(10)
                    .wrapping_add((x[xi] as u8 - b'0') as i64);
                xi += 1;
            }
            let mut yi = i;
            while yi < y.len() && y[yi].is_ascii_digit() {
                yn = yn
                    .wrapping_mul(10)
                    .wrapping_add((y[yi] as u8 - b'0') as i64);
                yi += 1;
            }
            if xn != yn {
                return xn < yn;
            }
            if xi != yi {
                return xi < yi;
            }
            return x[i] < y[i];
        }
        x.len() < y.len()
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
