//! `strconv.Quote` and friends: how Go spells a string or rune inside double quotes, and
//! `unicode.IsPrint`, which decides what gets escaped.

/// An approximation of Go's `unicode.IsPrint` without Unicode tables: letters, marks, numbers,
/// punctuation and symbols are printable, as is U+0020; controls, other spaces, line and
/// paragraph separators, format characters, private-use and non-characters are not.
/// (Unassigned code points count as printable here; Go would escape them.)
pub(crate) fn is_print(c: char) -> bool {
    let u = c as u32;
    if c == ' ' {
        return true;
    }
    if c.is_control() {
        return false;
    }
    // Space separators other than U+0020, and the line/paragraph separators.
    if matches!(
        u,
        0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000
    ) {
        return false;
    }
    // Format characters (Cf) that show up in practice.
    if matches!(
        u,
        0xAD | 0x600..=0x605
            | 0x61C
            | 0x6DD
            | 0x70F
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    ) {
        return false;
    }
    // Private use, surrogates (never a char), non-characters.
    if matches!(u, 0xE000..=0xF8FF | 0xF0000..=0x10FFFF | 0xFDD0..=0xFDEF) {
        return false;
    }
    if u & 0xFFFE == 0xFFFE {
        return false;
    }
    true
}

fn push_escaped(out: &mut String, c: char, quote: char, ascii_only: bool) {
    if c == quote || c == '\\' {
        out.push('\\');
        out.push(c);
        return;
    }
    if ascii_only {
        if (c as u32) < 0x80 && is_print(c) {
            out.push(c);
            return;
        }
    } else if is_print(c) {
        out.push(c);
        return;
    }
    match c {
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{b}' => out.push_str("\\v"),
        c if (c as u32) < 0x20 || c as u32 == 0x7f => {
            out.push_str(&format!("\\x{:02x}", c as u32));
        }
        c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push_str(&format!("\\U{:08x}", c as u32)),
    }
}

/// `strconv.Quote`.
pub(crate) fn quote(s: &str) -> String {
    quote_with(s, '"', false)
}

/// `strconv.QuoteToASCII`.
pub(crate) fn quote_ascii(s: &str) -> String {
    quote_with(s, '"', true)
}

fn quote_with(s: &str, quote: char, ascii_only: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        push_escaped(&mut out, c, quote, ascii_only);
    }
    out.push(quote);
    out
}

/// `strconv.QuoteRune` (and `QuoteRuneToASCII` when `ascii_only`).
pub(crate) fn quote_rune(c: char, ascii_only: bool) -> String {
    quote_with(c.encode_utf8(&mut [0; 4]), '\'', ascii_only)
}

/// `strconv.CanBackquote`: no control characters other than tab, no backquote, no U+FEFF.
pub(crate) fn can_backquote(s: &str) -> bool {
    s.chars()
        .all(|c| c != '`' && c != '\u{FEFF}' && (c == '\t' || !(c.is_control() || c == '\u{7f}')))
}

/// Go's `%#U` of a rune as used in parser messages: `U+002C ','`, or `U+000A` when unprintable.
pub(crate) fn rune_u_sharp(c: char) -> String {
    if is_print(c) {
        format!("U+{:04X} '{}'", c as u32, c)
    } else {
        format!("U+{:04X}", c as u32)
    }
}

/// `strconv.UnquoteChar(s, quote)`: the first character or escape of `s`, as bytes (a `\x` or
/// octal escape is one raw byte), and the rest. `Err` is Go's `invalid syntax`.
pub(crate) fn unquote_char(s: &str, quote: char) -> Result<(Vec<u8>, &str), ()> {
    let mut chars = s.chars();
    let c = chars.next().ok_or(())?;
    if c == quote && (quote == '\'' || quote == '"') {
        return Err(());
    }
    if c != '\\' {
        return Ok((c.to_string().into_bytes(), chars.as_str()));
    }
    let rest = chars.as_str();
    let e = rest.chars().next().ok_or(())?;
    let rest = &rest[e.len_utf8()..];
    let simple = |b: u8| Ok((vec![b], rest));
    match e {
        'a' => simple(7),
        'b' => simple(8),
        'f' => simple(12),
        'n' => simple(b'\n'),
        'r' => simple(b'\r'),
        't' => simple(b'\t'),
        'v' => simple(11),
        '\\' => simple(b'\\'),
        '\'' | '"' => {
            if e != quote {
                return Err(());
            }
            simple(e as u8)
        }
        'x' | 'u' | 'U' => {
            let n = match e {
                'x' => 2,
                'u' => 4,
                _ => 8,
            };
            let hex = rest.get(..n).ok_or(())?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(());
            }
            let v = u32::from_str_radix(hex, 16).map_err(|_| ())?;
            let rest = &rest[n..];
            if e == 'x' {
                return Ok((vec![v as u8], rest));
            }
            let c = char::from_u32(v).ok_or(())?;
            Ok((c.to_string().into_bytes(), rest))
        }
        '0'..='7' => {
            let oct = rest.get(..2).ok_or(())?;
            if !oct.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                return Err(());
            }
            let v = (e as u32 - '0' as u32) * 64 + u32::from_str_radix(oct, 8).map_err(|_| ())?;
            if v > 255 {
                return Err(());
            }
            Ok((vec![v as u8], &rest[2..]))
        }
        _ => Err(()),
    }
}

/// `strconv.Unquote` for `"..."`, `'...'` (one character) and raw `` `...` `` strings.
/// Invalid UTF-8 from byte escapes is replaced, as Rust strings must stay valid.
pub(crate) fn unquote(s: &str) -> Result<String, ()> {
    if s.len() < 2 {
        return Err(());
    }
    let quote = s.chars().next().ok_or(())?;
    if !s.ends_with(quote) {
        return Err(());
    }
    let body = &s[quote.len_utf8()..s.len() - quote.len_utf8()];
    if quote == '`' {
        if body.contains('`') {
            return Err(());
        }
        return Ok(body.replace('\r', ""));
    }
    if quote != '"' && quote != '\'' {
        return Err(());
    }
    if body.contains('\n') {
        return Err(());
    }
    let mut bytes = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (b, tail) = unquote_char(rest, quote)?;
        bytes.extend(b);
        rest = tail;
        if quote == '\'' && !rest.is_empty() {
            return Err(());
        }
    }
    if quote == '\'' && bytes.is_empty() {
        return Err(());
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote("a\"b\\c\n\té"), r#""a\"b\\c\n\té""#);
        assert_eq!(quote("\u{2028}\u{1}"), r#""\u2028\x01""#);
        assert_eq!(quote_ascii("é"), r#""\u00e9""#);
        assert_eq!(quote_rune('\u{1}', false), r"'\x01'");
        assert_eq!(rune_u_sharp(','), "U+002C ','");
        assert_eq!(rune_u_sharp('\n'), "U+000A");
        assert_eq!(unquote(r#""\u00e9\x41\n""#).unwrap(), "éA\n");
        assert_eq!(unquote(r#""\xc3\xa9""#).unwrap(), "é");
        assert_eq!(unquote("`raw\\n`").unwrap(), "raw\\n");
        assert!(unquote(r#""\z""#).is_err());
        assert!(unquote("'ab'").is_err());
    }
}
