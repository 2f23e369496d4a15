//! What go-yaml decides about one scalar: whether it would read back as something other than a
//! string (null, bool, number, timestamp, base-60 float), which styles libyaml's analysis allows
//! for it (plain, single-quoted, double-quoted, literal block), how a number is spelled after the
//! JSON round trip, and go-yaml v2's key order.

use crate::golang::float::{format_float, json_float};
use crate::golang::Data;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

pub(super) struct Scalar {
    pub(super) value: String,
    pub(super) requested: Style,
    pub(super) analysis: Analysis,
}

impl Scalar {
    pub(super) fn for_string(s: &str) -> Scalar {
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

    pub(super) fn for_data(d: &Data) -> Scalar {
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

    pub(super) fn is_simple_key(&self) -> bool {
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
pub(super) struct Analysis {
    pub(super) multiline: bool,
    pub(super) block_plain_allowed: bool,
    pub(super) single_quoted_allowed: bool,
    pub(super) block_allowed: bool,
}

pub(super) fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// libyaml's `is_printable` (note: nothing beyond the Basic Multilingual Plane).
pub(super) fn is_printable(c: char) -> bool {
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
pub(super) fn natural_key_less(a: &str, b: &str) -> bool {
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
