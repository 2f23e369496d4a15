//! Go's `fmt` package for the values a template can hold: `Sprint`, `Sprintln`, `Sprintf` with
//! flags, width, precision, argument indexes, the verbs of bool, integer, float and string, maps
//! and slices printed element by element with the same verb, and Go's in-band error notes
//! (`%!d(string=abc)`, `%!d(MISSING)`, `%!(EXTRA int=2)`).

use std::collections::BTreeMap;

use super::data::Data;
use super::float::format_float;
use super::quote::{can_backquote, is_print, quote, quote_ascii, quote_rune};

/// The integer types a template can produce: `int` (literals, `len`), `int64` (JSON data),
/// `uint8` (indexing a string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntType {
    Int,
    Int64,
    Uint8,
}

impl IntType {
    fn name(self) -> &'static str {
        match self {
            IntType::Int => "int",
            IntType::Int64 => "int64",
            IntType::Uint8 => "uint8",
        }
    }
}

/// One operand of a print function, as Go's `fmt` sees an `interface{}` argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// A nil `interface{}`.
    Nil,
    Bool(bool),
    Int(i64, IntType),
    Float(f64),
    Str(&'a str),
    List(&'a [Data]),
    Map(&'a BTreeMap<String, Data>),
    Complex(f64, f64),
}

impl<'a> Arg<'a> {
    pub(crate) fn from_data(d: &'a Data) -> Arg<'a> {
        match d {
            Data::Null => Arg::Nil,
            Data::Bool(b) => Arg::Bool(*b),
            Data::Int(i) => Arg::Int(*i, IntType::Int64),
            Data::Float(f) => Arg::Float(*f),
            Data::Str(s) => Arg::Str(s),
            Data::List(l) => Arg::List(l),
            Data::Map(m) => Arg::Map(m),
        }
    }

    /// `reflect.TypeOf(arg).String()`; `<nil>` for a nil interface.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Arg::Nil => "<nil>",
            Arg::Bool(_) => "bool",
            Arg::Int(_, t) => t.name(),
            Arg::Float(_) => "float64",
            Arg::Str(_) => "string",
            Arg::List(_) => "[]interface {}",
            Arg::Map(_) => "map[string]interface {}",
            Arg::Complex(..) => "complex128",
        }
    }

    fn is_string(&self) -> bool {
        matches!(self, Arg::Str(_))
    }
}

/// `fmt.Sprint`: operands printed with `%v`, a space between two operands when neither is a
/// string.
pub(crate) fn sprint(args: &[Arg]) -> String {
    let mut p = Printer::default();
    let mut prev_string = false;
    for (i, arg) in args.iter().enumerate() {
        let is_string = arg.is_string();
        if i > 0 && !is_string && !prev_string {
            p.buf.push(' ');
        }
        p.print_arg(arg, 'v');
        prev_string = is_string;
    }
    p.buf
}

/// `fmt.Sprintln`: always a space between operands, and a newline at the end.
pub(crate) fn sprintln(args: &[Arg]) -> String {
    let mut p = Printer::default();
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            p.buf.push(' ');
        }
        p.print_arg(arg, 'v');
    }
    p.buf.push('\n');
    p.buf
}

/// `fmt.Sprintf("%v", arg)`.
pub(crate) fn sprint_v(arg: &Arg) -> String {
    let mut p = Printer::default();
    p.print_arg(arg, 'v');
    p.buf
}

/// `fmt.Sprintf("%#v", arg)`: Go syntax.
pub(crate) fn sprint_sharp_v(arg: &Arg) -> String {
    let mut p = Printer::default();
    p.flags.sharp_v = true;
    p.print_arg(arg, 'v');
    p.buf
}

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    plus: bool,
    minus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    sharp_v: bool,
    wid: Option<usize>,
    prec: Option<usize>,
}

#[derive(Default)]
struct Printer {
    buf: String,
    flags: Flags,
}

const LOWER_DIGITS: &[u8] = b"0123456789abcdefx";
const UPPER_DIGITS: &[u8] = b"0123456789ABCDEFX";

impl Printer {
    fn write_padding(&mut self, n: usize) {
        let c = if self.flags.zero { '0' } else { ' ' };
        self.buf.extend(std::iter::repeat_n(c, n));
    }

    /// Pads `s` to the width, on the left unless `-` was given.
    fn pad(&mut self, s: &str) {
        let Some(wid) = self.flags.wid else {
            self.buf.push_str(s);
            return;
        };
        let len = s.chars().count();
        if wid <= len {
            self.buf.push_str(s);
        } else if self.flags.minus {
            self.buf.push_str(s);
            self.write_padding(wid - len);
        } else {
            self.write_padding(wid - len);
            self.buf.push_str(s);
        }
    }

    fn print_arg(&mut self, arg: &Arg, verb: char) {
        if let Arg::Nil = arg {
            match verb {
                'T' | 'v' => self.pad("<nil>"),
                _ => self.bad_verb(arg, verb),
            }
            return;
        }
        if verb == 'T' {
            let name = arg.type_name();
            self.fmt_s(name);
            return;
        }
        match *arg {
            Arg::Nil => {}
            Arg::Bool(b) => match verb {
                't' | 'v' => self.pad(if b { "true" } else { "false" }),
                _ => self.bad_verb(arg, verb),
            },
            Arg::Int(i, t) => {
                let signed = t != IntType::Uint8;
                self.fmt_integer_verb(i as u64, signed, verb, arg);
            }
            Arg::Float(f) => self.fmt_float_verb(f, verb, arg),
            Arg::Complex(re, im) => match verb {
                'v' | 'b' | 'g' | 'G' | 'x' | 'X' | 'f' | 'F' | 'e' | 'E' => {
                    let saved = self.flags;
                    self.buf.push('(');
                    self.fmt_float_verb(re, verb, arg);
                    self.flags.plus = true;
                    self.fmt_float_verb(im, verb, arg);
                    self.buf.push_str("i)");
                    self.flags = saved;
                }
                _ => self.bad_verb(arg, verb),
            },
            Arg::Str(s) => match verb {
                'v' if self.flags.sharp_v => self.fmt_q(s),
                'v' | 's' => self.fmt_s(s),
                'x' => self.fmt_sx(s, LOWER_DIGITS),
                'X' => self.fmt_sx(s, UPPER_DIGITS),
                'q' => self.fmt_q(s),
                _ => self.bad_verb(arg, verb),
            },
            Arg::List(items) => {
                if self.flags.sharp_v {
                    self.buf.push_str("[]interface {}{");
                } else {
                    self.buf.push('[');
                }
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.buf
                            .push_str(if self.flags.sharp_v { ", " } else { " " });
                    }
                    self.print_element(item, verb);
                }
                self.buf.push(if self.flags.sharp_v { '}' } else { ']' });
            }
            Arg::Map(map) => {
                if self.flags.sharp_v {
                    self.buf.push_str("map[string]interface {}{");
                } else {
                    self.buf.push_str("map[");
                }
                for (i, (k, v)) in map.iter().enumerate() {
                    if i > 0 {
                        self.buf
                            .push_str(if self.flags.sharp_v { ", " } else { " " });
                    }
                    self.print_arg(&Arg::Str(k), verb);
                    self.buf.push(':');
                    self.print_element(v, verb);
                }
                self.buf.push(if self.flags.sharp_v { '}' } else { ']' });
            }
        }
    }

    /// An element of a `[]interface {}` or a value of a `map[string]interface {}`: a nil one
    /// prints as `<nil>` whatever the verb.
    fn print_element(&mut self, d: &Data, verb: char) {
        if let Data::Null = d {
            if self.flags.sharp_v {
                self.buf.push_str("interface {}(nil)");
            } else {
                self.buf.push_str("<nil>");
            }
            return;
        }
        self.print_arg(&Arg::from_data(d), verb);
    }

    fn bad_verb(&mut self, arg: &Arg, verb: char) {
        self.buf.push_str("%!");
        self.buf.push(verb);
        self.buf.push('(');
        if let Arg::Nil = arg {
            self.buf.push_str("<nil>");
        } else {
            self.buf.push_str(arg.type_name());
            self.buf.push('=');
            self.print_arg(arg, 'v');
        }
        self.buf.push(')');
    }

    fn fmt_integer_verb(&mut self, u: u64, signed: bool, verb: char, arg: &Arg) {
        match verb {
            'v' if self.flags.sharp_v && !signed => {
                let saved = self.flags.sharp;
                self.flags.sharp = true;
                self.fmt_integer(u, 16, signed, verb, LOWER_DIGITS);
                self.flags.sharp = saved;
            }
            'v' | 'd' => self.fmt_integer(u, 10, signed, verb, LOWER_DIGITS),
            'b' => self.fmt_integer(u, 2, signed, verb, LOWER_DIGITS),
            'o' | 'O' => self.fmt_integer(u, 8, signed, verb, LOWER_DIGITS),
            'x' => self.fmt_integer(u, 16, signed, verb, LOWER_DIGITS),
            'X' => self.fmt_integer(u, 16, signed, verb, UPPER_DIGITS),
            'c' => {
                let c = rune(u);
                self.pad(c.encode_utf8(&mut [0; 4]));
            }
            'q' => {
                let q = quote_rune(rune(u), self.flags.plus);
                self.pad(&q);
            }
            'U' => self.fmt_unicode(u),
            _ => self.bad_verb(arg, verb),
        }
    }

    fn fmt_integer(&mut self, u: u64, base: u64, signed: bool, verb: char, digits: &[u8]) {
        let negative = signed && (u as i64) < 0;
        let mut u = if negative {
            (u as i64).unsigned_abs()
        } else {
            u
        };
        let mut prec = 0usize;
        if let Some(p) = self.flags.prec {
            prec = p;
            if p == 0 && u == 0 {
                let saved = self.flags.zero;
                self.flags.zero = false;
                let wid = self.flags.wid.unwrap_or(0);
                self.write_padding(wid);
                self.flags.zero = saved;
                return;
            }
        } else if self.flags.zero && !self.flags.minus {
            if let Some(wid) = self.flags.wid {
                prec = wid;
                if negative || self.flags.plus || self.flags.space {
                    prec = prec.saturating_sub(1);
                }
            }
        }
        let mut out: Vec<u8> = Vec::new();
        loop {
            out.push(digits[(u % base) as usize]);
            u /= base;
            if u == 0 {
                break;
            }
        }
        while out.len() < prec {
            out.push(b'0');
        }
        if self.flags.sharp {
            match base {
                2 => out.extend_from_slice(b"b0"),
                8 if out.last() != Some(&b'0') => out.push(b'0'),
                16 => {
                    out.push(digits[16]);
                    out.push(b'0');
                }
                _ => {}
            }
        }
        if verb == 'O' {
            out.extend_from_slice(b"o0");
        }
        if negative {
            out.push(b'-');
        } else if self.flags.plus {
            out.push(b'+');
        } else if self.flags.space {
            out.push(b' ');
        }
        out.reverse();
        let s = String::from_utf8(out).unwrap_or_default();
        let saved = self.flags.zero;
        self.flags.zero = false;
        self.pad(&s);
        self.flags.zero = saved;
    }

    fn fmt_unicode(&mut self, u: u64) {
        let mut s = format!("U+{:04X}", u);
        if let Some(p) = self.flags.prec {
            let hex = format!("{:X}", u);
            if p > hex.len() {
                s = format!("U+{}{}", "0".repeat(p - hex.len()), hex);
            }
        }
        if self.flags.sharp {
            let c = rune(u);
            if u <= 0x10FFFF && is_print(c) {
                s.push_str(" '");
                s.push(c);
                s.push('\'');
            }
        }
        let saved = self.flags.zero;
        self.flags.zero = false;
        self.pad(&s);
        self.flags.zero = saved;
    }

    fn fmt_float_verb(&mut self, f: f64, verb: char, arg: &Arg) {
        match verb {
            'v' => self.fmt_float(f, 'g', -1),
            'g' | 'G' | 'b' | 'x' | 'X' => self.fmt_float(f, verb, -1),
            'f' | 'F' | 'e' | 'E' => self.fmt_float(f, verb, 6),
            _ => self.bad_verb(arg, verb),
        }
    }

    fn fmt_float(&mut self, f: f64, verb: char, default_prec: i32) {
        let prec = self.flags.prec.map(|p| p as i32).unwrap_or(default_prec);
        let mut num = format_float(f, verb, prec);
        if self.flags.sharp && verb != 'b' {
            num = sharp_float(&num, verb, prec);
        }
        let (sign, digits) = match num.strip_prefix('-') {
            Some(rest) => ("-", rest.to_string()),
            None => match num.strip_prefix('+') {
                Some(rest) => ("+", rest.to_string()),
                None => ("+", num.clone()),
            },
        };
        let sign = if sign == "+" && self.flags.space && !self.flags.plus {
            " "
        } else {
            sign
        };
        if digits.starts_with("Inf") || digits.starts_with("NaN") {
            let saved = self.flags.zero;
            self.flags.zero = false;
            let s = if digits == "NaN" && !self.flags.space && !self.flags.plus {
                digits
            } else {
                format!("{sign}{digits}")
            };
            self.pad(&s);
            self.flags.zero = saved;
            return;
        }
        if self.flags.plus || sign != "+" {
            let full = format!("{sign}{digits}");
            if self.flags.zero && !self.flags.minus {
                if let Some(wid) = self.flags.wid {
                    if wid > full.len() {
                        self.buf.push_str(sign);
                        self.write_padding(wid - full.len());
                        self.buf.push_str(&digits);
                        return;
                    }
                }
            }
            self.pad(&full);
            return;
        }
        self.pad(&digits);
    }

    fn fmt_s(&mut self, s: &str) {
        match self.flags.prec {
            Some(p) => {
                let truncated: String = s.chars().take(p).collect();
                self.pad(&truncated);
            }
            None => self.pad(s),
        }
    }

    fn fmt_q(&mut self, s: &str) {
        let s: String = match self.flags.prec {
            Some(p) => s.chars().take(p).collect(),
            None => s.to_string(),
        };
        if self.flags.sharp && can_backquote(&s) {
            self.pad(&format!("`{s}`"));
        } else if self.flags.plus {
            self.pad(&quote_ascii(&s));
        } else {
            self.pad(&quote(&s));
        }
    }

    fn fmt_sx(&mut self, s: &str, digits: &[u8]) {
        let bytes = s.as_bytes();
        let mut length = bytes.len();
        if let Some(p) = self.flags.prec {
            length = length.min(p);
        }
        let mut width = 2 * length;
        if width > 0 {
            if self.flags.space {
                if self.flags.sharp {
                    width *= 2;
                }
                width += length - 1;
            } else if self.flags.sharp {
                width += 2;
            }
        } else {
            if let Some(wid) = self.flags.wid {
                self.write_padding(wid);
            }
            return;
        }
        let wid = self.flags.wid.unwrap_or(0);
        if wid > width && !self.flags.minus {
            self.write_padding(wid - width);
        }
        if self.flags.sharp {
            self.buf.push('0');
            self.buf.push(digits[16] as char);
        }
        for (i, b) in bytes[..length].iter().enumerate() {
            if self.flags.space && i > 0 {
                self.buf.push(' ');
                if self.flags.sharp {
                    self.buf.push('0');
                    self.buf.push(digits[16] as char);
                }
            }
            self.buf.push(digits[(b >> 4) as usize] as char);
            self.buf.push(digits[(b & 0xF) as usize] as char);
        }
        if wid > width && self.flags.minus {
            self.write_padding(wid - width);
        }
    }
}

fn rune(u: u64) -> char {
    u32::try_from(u)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or('\u{FFFD}')
}

/// The `#` flag on floats: always a decimal point, and for `%g` the trailing zeros kept up to
/// the precision (6 when shortest).
fn sharp_float(num: &str, verb: char, prec: i32) -> String {
    let (mantissa, exponent) = match num.find(['e', 'E']) {
        Some(pos) => (&num[..pos], &num[pos..]),
        None => (num, ""),
    };
    if mantissa.ends_with("Inf") || mantissa.ends_with("NaN") {
        return num.to_string();
    }
    let mut m = mantissa.to_string();
    if !m.contains('.') {
        m.push('.');
    }
    if matches!(verb, 'g' | 'G') {
        let want = if prec < 0 { 6 } else { prec.max(1) } as usize;
        let digits = m
            .trim_start_matches('-')
            .trim_start_matches(['0', '.'])
            .chars()
            .filter(char::is_ascii_digit)
            .count();
        let digits = if digits == 0 { 1 } else { digits };
        for _ in digits..want {
            m.push('0');
        }
    }
    format!("{m}{exponent}")
}

/// Where `Sprintf` is in its argument list: the next operand, whether an explicit `[n]` index
/// was bad, and whether any index was used (then unused operands are not reported).
struct Cursor {
    num: usize,
    count: usize,
    good: bool,
    reordered: bool,
}

impl Cursor {
    /// Reads an explicit argument index `[n]` at `i`; returns the next index and whether one
    /// was found.
    fn explicit_index(&mut self, bytes: &[u8], i: usize) -> (usize, bool) {
        if i >= bytes.len() || bytes[i] != b'[' {
            return (i, false);
        }
        self.reordered = true;
        let (index, wid, ok) = parse_arg_number(&bytes[i..]);
        if ok && index >= 1 && index - 1 < self.count {
            self.num = index - 1;
            return (i + wid, true);
        }
        self.good = false;
        (i + wid, ok)
    }

    /// A `*` width or precision taken from the next operand, which must be an integer.
    fn star(&mut self, args: &[Arg]) -> Option<i64> {
        if self.num >= args.len() {
            return None;
        }
        let n = match args[self.num] {
            Arg::Int(i, _) => Some(i).filter(|i| (-1_000_000..=1_000_000).contains(i)),
            _ => None,
        };
        self.num += 1;
        n
    }
}

/// `fmt.Sprintf(format, args...)`.
pub(crate) fn sprintf(format: &str, args: &[Arg]) -> String {
    let mut p = Printer::default();
    let bytes = format.as_bytes();
    let end = bytes.len();
    let mut cur = Cursor {
        num: 0,
        count: args.len(),
        good: true,
        reordered: false,
    };
    let mut i = 0usize;
    'format: while i < end {
        cur.good = true;
        let last = i;
        while i < end && bytes[i] != b'%' {
            i += 1;
        }
        if i > last {
            p.buf.push_str(&format[last..i]);
        }
        if i >= end {
            break;
        }
        i += 1;
        p.flags = Flags::default();
        // Flags, and the fast path of a simple lower-case verb.
        while i < end {
            let c = bytes[i];
            match c {
                b'#' => p.flags.sharp = true,
                b'0' => p.flags.zero = !p.flags.minus,
                b'+' => p.flags.plus = true,
                b'-' => {
                    p.flags.minus = true;
                    p.flags.zero = false;
                }
                b' ' => p.flags.space = true,
                _ => {
                    if c.is_ascii_lowercase() && cur.num < args.len() {
                        if c == b'v' {
                            p.flags.sharp_v = p.flags.sharp;
                            p.flags.sharp = false;
                            p.flags.plus = false;
                        }
                        p.print_arg(&args[cur.num], c as char);
                        cur.num += 1;
                        i += 1;
                        continue 'format;
                    }
                    break;
                }
            }
            i += 1;
        }

        let mut after_index;
        (i, after_index) = cur.explicit_index(bytes, i);

        if i < end && bytes[i] == b'*' {
            i += 1;
            match cur.star(args) {
                Some(n) => {
                    if n < 0 {
                        p.flags.minus = true;
                        p.flags.zero = false;
                    }
                    p.flags.wid = Some(n.unsigned_abs() as usize);
                }
                None => p.buf.push_str("%!(BADWIDTH)"),
            }
            after_index = false;
        } else {
            let (n, ok, next) = parse_num(bytes, i, end);
            i = next;
            if ok {
                p.flags.wid = Some(n);
                if after_index {
                    cur.good = false;
                }
            }
        }

        if i + 1 < end && bytes[i] == b'.' {
            i += 1;
            if after_index {
                cur.good = false;
            }
            (i, after_index) = cur.explicit_index(bytes, i);
            if i < end && bytes[i] == b'*' {
                i += 1;
                match cur.star(args) {
                    Some(n) if n >= 0 => p.flags.prec = Some(n as usize),
                    _ => {
                        p.flags.prec = None;
                        p.buf.push_str("%!(BADPREC)");
                    }
                }
                after_index = false;
            } else {
                let (n, ok, next) = parse_num(bytes, i, end);
                i = next;
                p.flags.prec = Some(if ok { n } else { 0 });
            }
        }

        if !after_index {
            (i, _) = cur.explicit_index(bytes, i);
        }

        if i >= end {
            p.buf.push_str("%!(NOVERB)");
            break;
        }
        let verb = format[i..].chars().next().unwrap_or('?');
        i += verb.len_utf8();

        if verb == '%' {
            p.buf.push('%');
        } else if !cur.good {
            p.buf.push_str(&format!("%!{verb}(BADINDEX)"));
        } else if cur.num >= args.len() {
            p.buf.push_str(&format!("%!{verb}(MISSING)"));
        } else {
            if verb == 'v' {
                p.flags.sharp_v = p.flags.sharp;
                p.flags.sharp = false;
                p.flags.plus = false;
            }
            p.print_arg(&args[cur.num], verb);
            cur.num += 1;
        }
    }

    if !cur.reordered && cur.num < args.len() {
        p.flags = Flags::default();
        p.buf.push_str("%!(EXTRA ");
        for (i, arg) in args[cur.num..].iter().enumerate() {
            if i > 0 {
                p.buf.push_str(", ");
            }
            if let Arg::Nil = arg {
                p.buf.push_str("<nil>");
            } else {
                p.buf.push_str(arg.type_name());
                p.buf.push('=');
                p.print_arg(arg, 'v');
            }
        }
        p.buf.push(')');
    }
    p.buf
}

/// Parses a decimal number at `start`; `(value, found, next index)`. Refuses absurd widths.
fn parse_num(bytes: &[u8], start: usize, end: usize) -> (usize, bool, usize) {
    let mut i = start;
    let mut n = 0usize;
    let mut found = false;
    while i < end && bytes[i].is_ascii_digit() {
        if n > 1_000_000 {
            return (0, false, end);
        }
        n = n * 10 + (bytes[i] - b'0') as usize;
        found = true;
        i += 1;
    }
    (n, found, i)
}

/// `[n]` → (n, bytes consumed, ok).
fn parse_arg_number(rest: &[u8]) -> (usize, usize, bool) {
    if rest.len() < 3 {
        return (0, 1, false);
    }
    for i in 1..rest.len() {
        if rest[i] == b']' {
            let (n, ok, next) = parse_num(rest, 1, i);
            if !ok || next != i {
                return (0, i + 1, false);
            }
            return (n, i + 1, true);
        }
    }
    (0, 1, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> Arg<'static> {
        Arg::Int(i, IntType::Int)
    }

    #[test]
    fn printf_matches_go() {
        assert_eq!(sprintf("%d %d", &[int(1)]), "1 %!d(MISSING)");
        assert_eq!(sprintf("%d", &[int(1), int(2)]), "1%!(EXTRA int=2)");
        assert_eq!(sprintf("%z", &[int(1)]), "%!z(int=1)");
        assert_eq!(sprintf("%!", &[]), "%!!(MISSING)");
        assert_eq!(sprintf("%.2s", &[Arg::Str("abc")]), "ab");
        assert_eq!(sprintf("%5.1q", &[Arg::Str("abc")]), "  \"a\"");
        assert_eq!(sprintf("%08.3f", &[Arg::Float(-3.5)]), "-003.500");
        assert_eq!(sprintf("% d|% x", &[int(5), Arg::Str("hi")]), " 5|68 69");
        assert_eq!(
            sprintf("%#x|%#o|%#q", &[int(255), int(8), Arg::Str("a")]),
            "0xff|010|`a`"
        );
        assert_eq!(
            sprintf(
                "%*d|%-*d|%.*f",
                &[int(5), int(1), int(4), int(2), int(2), Arg::Float(1.23456)]
            ),
            "    1|2   |1.23"
        );
        assert_eq!(sprintf("%[2]d %[1]d", &[int(1), int(2)]), "2 1");
        assert_eq!(
            sprintf(
                "%6.2f|%-8s|%+d|%x|%X|%o|%b|%c|%U|%e|%E|%G|%t|%%",
                &[
                    Arg::Float(1.23456),
                    Arg::Str("ab"),
                    int(5),
                    int(255),
                    int(255),
                    int(8),
                    int(5),
                    int(65),
                    int(65),
                    Arg::Float(12345.678),
                    Arg::Float(0.000012),
                    Arg::Float(1e21),
                    Arg::Bool(true)
                ]
            ),
            "  1.23|ab      |+5|ff|FF|10|101|A|U+0041|1.234568e+04|1.200000E-05|1E+21|true|%"
        );
        assert_eq!(sprintf("%03d", &[Arg::Int(2, IntType::Int64)]), "002");
    }

    #[test]
    fn maps_and_slices_apply_the_verb_per_element() {
        let data: Data =
            serde_json::from_str::<serde_json::Value>(r#"[1,"two",null,{"k":"v"},[3]]"#)
                .map(|v| Data::from_json(&v, super::super::NumberMode::Unstructured))
                .unwrap();
        let Data::List(items) = &data else { panic!() };
        assert_eq!(
            sprintf("%d", &[Arg::List(items)]),
            "[1 %!d(string=two) <nil> map[%!d(string=k):%!d(string=v)] [3]]"
        );
        assert_eq!(
            sprintf("%s", &[Arg::List(items)]),
            "[%!s(int64=1) two <nil> map[k:v] [%!s(int64=3)]]"
        );
        assert_eq!(
            sprint_sharp_v(&Arg::List(items)),
            r#"[]interface {}{1, "two", interface {}(nil), map[string]interface {}{"k":"v"}, []interface {}{3}}"#
        );
    }

    #[test]
    fn sprint_spaces_between_non_strings() {
        assert_eq!(
            sprint(&[int(1), int(2), Arg::Str("a"), Arg::Str("b"), int(3)]),
            "1 2ab3"
        );
        assert_eq!(sprintln(&[Arg::Str("x"), int(1)]), "x 1\n");
        assert_eq!(sprint(&[Arg::Nil]), "<nil>");
    }
}
