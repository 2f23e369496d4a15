//! The parser of Kubernetes' JSONPath template dialect (client-go `util/jsonpath`): text with
//! `{...}` actions holding fields, array slices and unions, filters, recursive descent, quoted
//! literals, numbers and the `range`/`end` keywords. Its error messages are client-go's, which
//! kubectl prints after `error parsing jsonpath TEMPLATE, `.

/// One parsed element. An action `{...}` is a `List` of the elements inside it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Text(String),
    List(Vec<Node>),
    Field(String),
    Array([Param; 3]),
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        op: String,
    },
    Int(i64),
    Float(f64),
    Bool(bool),
    Wildcard,
    Recursive,
    Union(Vec<Vec<Node>>),
    Identifier(String),
}

/// One of `start:end:step` of an array selection.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Param {
    pub(crate) value: i64,
    pub(crate) known: bool,
    /// `end` was not written and stands for `start + 1` (a plain index `[i]`).
    pub(crate) derived: bool,
}

/// Parses a whole template into its top-level nodes (texts and actions).
pub(crate) fn parse(text: &str) -> Result<Vec<Node>, String> {
    let mut p = Parser {
        input: text,
        pos: 0,
        start: 0,
        width: 0,
        root: Vec::new(),
    };
    p.parse_text()?;
    Ok(p.root)
}

/// Parses `{text}` and returns the nodes inside the one action (client-go's `parseAction`).
fn parse_action(text: &str) -> Result<Vec<Node>, String> {
    let mut nodes = parse(&format!("{{{text}}}"))?;
    match nodes.first_mut() {
        Some(Node::List(inner)) => Ok(std::mem::take(inner)),
        _ => Ok(Vec::new()),
    }
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
    root: Vec<Node>,
}

const EOF: Option<char> = None;

fn is_terminator(r: Option<char>) -> bool {
    match r {
        None => true,
        Some(c) => matches!(
            c,
            ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
        ),
    }
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

impl Parser<'_> {
    fn next(&mut self) -> Option<char> {
        match self.input[self.pos..].chars().next() {
            None => {
                self.width = 0;
                EOF
            }
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                Some(c)
            }
        }
    }

    fn backup(&mut self) {
        self.pos -= self.width;
    }

    fn peek(&mut self) -> Option<char> {
        let r = self.next();
        self.backup();
        r
    }

    fn consume_text(&mut self) -> String {
        let value = self.input[self.start..self.pos].to_string();
        self.start = self.pos;
        value
    }

    fn rest(&self) -> &str {
        &self.input[self.pos..]
    }

    /// Text up to the next `{`, then the action; repeats until the end.
    fn parse_text(&mut self) -> Result<(), String> {
        loop {
            if self.rest().starts_with('{') {
                if self.pos > self.start {
                    let text = self.consume_text();
                    self.root.push(Node::Text(text));
                }
                // The left delimiter.
                self.pos += 1;
                self.consume_text();
                let mut action = Vec::new();
                let closed = self.parse_inside_action(&mut action);
                self.root.push(Node::List(action));
                if closed? {
                    continue;
                }
                return Ok(());
            }
            if self.next().is_none() {
                break;
            }
        }
        if self.pos > self.start {
            let text = self.consume_text();
            self.root.push(Node::Text(text));
        }
        Ok(())
    }

    /// Parses the inside of an action into `cur`; `Ok(true)` when the closing `}` was reached
    /// (the caller then goes on with text).
    fn parse_inside_action(&mut self, cur: &mut Vec<Node>) -> Result<bool, String> {
        loop {
            if self.rest().starts_with('}') {
                self.pos += 1;
                self.consume_text();
                return Ok(true);
            }
            if self.rest().starts_with("[?(") {
                self.parse_filter(cur)?;
                continue;
            }
            if self.rest().starts_with("..") {
                self.parse_recursive(cur)?;
                continue;
            }
            match self.next() {
                None | Some('\r') | Some('\n') => return Err("unclosed action".into()),
                Some(' ') => {
                    self.consume_text();
                }
                Some('@') | Some('$') => {
                    self.consume_text();
                }
                Some('[') => self.parse_array(cur)?,
                Some(q @ ('"' | '\'')) => self.parse_quote(cur, q)?,
                Some('.') => self.parse_field(cur),
                Some(c) if c == '+' || c == '-' || c.is_numeric() => {
                    self.backup();
                    self.parse_number(cur)?;
                }
                Some(c) if is_alphanumeric(c) => {
                    self.backup();
                    self.parse_identifier(cur)?;
                }
                Some(c) => {
                    return Err(format!(
                        "unrecognized character in action: {}",
                        crate::golang::quote::rune_u_sharp(c)
                    ))
                }
            }
        }
    }

    fn parse_identifier(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            let r = self.next();
            if is_terminator(r) {
                if r.is_some() {
                    self.backup();
                }
                break;
            }
        }
        let value = self.consume_text();
        match value.as_str() {
            "true" => cur.push(Node::Bool(true)),
            "false" => cur.push(Node::Bool(false)),
            _ => cur.push(Node::Identifier(value)),
        }
        Ok(())
    }

    fn parse_recursive(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        if matches!(cur.last(), Some(Node::Recursive)) {
            return Err("invalid multiple recursive descent".into());
        }
        self.pos += 2;
        self.consume_text();
        cur.push(Node::Recursive);
        if let Some(c) = self.peek() {
            if is_alphanumeric(c) {
                self.parse_field(cur);
            }
        }
        Ok(())
    }

    fn parse_number(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        if matches!(self.peek(), Some('+') | Some('-')) {
            self.next();
        }
        loop {
            match self.next() {
                Some(c) if c == '.' || c.is_numeric() => {}
                Some(_) => {
                    self.backup();
                    break;
                }
                None => break,
            }
        }
        let value = self.consume_text();
        if let Some(i) = go_atoi(&value) {
            cur.push(Node::Int(i));
            return Ok(());
        }
        if let Some(f) = go_parse_float(&value) {
            cur.push(Node::Float(f));
            return Ok(());
        }
        Err(format!("cannot parse number {value}"))
    }

    fn parse_array(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated array".into()),
                Some(']') => break,
                _ => {}
            }
        }
        let text = self.consume_text();
        let mut text = text[1..text.len() - 1].to_string();
        if text == "*" {
            text = ":".into();
        }

        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > 1 {
            let mut union = Vec::new();
            for part in parts {
                union.push(parse_action(&format!("[{}]", part.trim_matches(' ')))?);
            }
            cur.push(Node::Union(union));
            return Ok(());
        }

        if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
            let key = &text[1..text.len() - 1];
            if !key.contains('\'') {
                cur.extend(parse_action(&format!(".{key}"))?);
                return Ok(());
            }
        }

        let Some(groups) = slice_groups(&text) else {
            return Err(format!("invalid array index {text}"));
        };
        let mut params = [Param::default(); 3];
        for i in 0..3 {
            let mut value = groups[i];
            if !value.is_empty() {
                if i > 0 {
                    value = &value[1..];
                }
                if i > 0 && value.is_empty() {
                    params[i].known = false;
                } else {
                    params[i].known = true;
                    params[i].value = go_atoi(value)
                        .ok_or_else(|| format!("array index {value} is not a number"))?;
                }
            } else if i == 1 {
                params[i].known = true;
                // Go's int wraps: `[9223372036854775807]` ends at math.MinInt64, which the
                // evaluation then reports as out of bounds, as kubectl does.
                params[i].value = params[0].value.wrapping_add(1);
                params[i].derived = true;
            } else {
                params[i].known = false;
                params[i].value = 0;
            }
        }
        cur.push(Node::Array(params));
        Ok(())
    }

    fn parse_filter(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        self.pos += 3;
        self.consume_text();
        let mut begin = false;
        let mut end = false;
        let mut pair = '\0';
        loop {
            let r = self.next();
            match r {
                None | Some('\n') => return Err("unterminated filter".into()),
                Some(q @ ('"' | '\'')) => {
                    if !begin {
                        begin = true;
                        pair = q;
                        continue;
                    }
                    if self.input.as_bytes()[self.pos - 2] != b'\\' && q == pair {
                        end = true;
                    }
                }
                Some(')') if begin == end => break,
                _ => {}
            }
        }
        if self.next() != Some(']') {
            return Err("unclosed array expect ]".into());
        }
        let text = self.consume_text();
        let text = &text[..text.len() - 2];
        match split_filter(text) {
            None => {
                let left = parse_action(text)?;
                cur.push(Node::Filter {
                    left,
                    right: Vec::new(),
                    op: "exists".into(),
                });
            }
            Some((left, op, right)) => {
                let left = parse_action(left)?;
                let right = parse_action(right)?;
                cur.push(Node::Filter {
                    left,
                    right,
                    op: op.into(),
                });
            }
        }
        Ok(())
    }

    fn parse_quote(&mut self, cur: &mut Vec<Node>, end: char) -> Result<(), String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated quoted string".into()),
                Some(c) if c == end && self.input.as_bytes()[self.pos - 2] != b'\\' => break,
                _ => {}
            }
        }
        let value = self.consume_text();
        let s = unquote_extend(&value).map_err(|e| format!("unquote string {value} error {e}"))?;
        cur.push(Node::Text(s));
        Ok(())
    }

    fn parse_field(&mut self, cur: &mut Vec<Node>) {
        self.consume_text();
        loop {
            let r = self.next();
            if r == Some('\\') {
                self.next();
            } else if is_terminator(r) {
                if r.is_some() {
                    self.backup();
                }
                break;
            }
        }
        let value = self.consume_text();
        if value == "*" {
            cur.push(Node::Wildcard);
        } else {
            cur.push(Node::Field(value.replace('\\', "")));
        }
    }
}

/// `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$` → the three groups (empty when absent).
fn slice_groups(text: &str) -> Option<[&str; 3]> {
    fn signed_digits(s: &str) -> usize {
        let b = s.as_bytes();
        let mut i = 0;
        if i < b.len() && b[i] == b'-' {
            i += 1;
        }
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    }
    let mut groups = [""; 3];
    let first = signed_digits(text);
    groups[0] = &text[..first];
    let mut rest = &text[first..];
    for group in groups.iter_mut().skip(1) {
        if let Some(after) = rest.strip_prefix(':') {
            let n = 1 + signed_digits(after);
            *group = &rest[..n];
            rest = &rest[n..];
        }
    }
    rest.is_empty().then_some(groups)
}

/// `^([^!<>=]+)([!<>=]+)(.+?)$` → (left, operator, right).
fn split_filter(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let i = text.find(is_op)?;
    if i == 0 {
        return None;
    }
    let after = &text[i..];
    let op_len = after.find(|c: char| !is_op(c)).unwrap_or(after.len());
    if op_len < after.len() {
        return Some((&text[..i], &after[..op_len], &after[op_len..]));
    }
    // The operator run reaches the end: the lazy last group takes its final character.
    if op_len >= 2 {
        let cut = i + op_len - 1;
        return Some((&text[..i], &text[i..cut], &text[cut..]));
    }
    None
}

/// Go's `strconv.Atoi`: optional sign, decimal digits, int64 range.
pub(crate) fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

/// Go's `strconv.ParseFloat(s, 64)` for the forms the number scanner lets through.
fn go_parse_float(s: &str) -> Option<f64> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    if body.is_empty() || body == "." || body.matches('.').count() > 1 {
        return None;
    }
    s.parse::<f64>().ok()
}

/// client-go's `UnquoteExtend`: `strconv.Unquote` that also takes single-quoted strings.
fn unquote_extend(s: &str) -> Result<String, &'static str> {
    const SYNTAX: &str = "invalid syntax";
    let chars: Vec<char> = s.chars().collect();
    if chars.len() < 2 {
        return Err(SYNTAX);
    }
    let quote = chars[0];
    if quote != *chars.last().unwrap_or(&'\0') || (quote != '"' && quote != '\'') {
        return Err(SYNTAX);
    }
    let body = &chars[1..chars.len() - 1];
    let mut out = String::new();
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if c == quote {
            return Err(SYNTAX);
        }
        if c != '\\' {
            out.push(c);
            i += 1;
            continue;
        }
        i += 1;
        let Some(&e) = body.get(i) else {
            return Err(SYNTAX);
        };
        i += 1;
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' => {
                if e != quote {
                    return Err(SYNTAX);
                }
                out.push(e);
            }
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = body.get(i..i + n).ok_or(SYNTAX)?.iter().collect();
                i += n;
                let v = u32::from_str_radix(&hex, 16).map_err(|_| SYNTAX)?;
                if e == 'x' {
                    // A byte; a lone high byte would be invalid UTF-8, which a Rust string
                    // cannot hold, so it is refused.
                    out.push(char::from_u32(v).filter(|_| v < 0x80).ok_or(SYNTAX)?);
                } else {
                    out.push(char::from_u32(v).ok_or(SYNTAX)?);
                }
            }
            '0'..='7' => {
                let oct: String = body.get(i - 1..i + 2).ok_or(SYNTAX)?.iter().collect();
                i += 2;
                let v = u32::from_str_radix(&oct, 8).map_err(|_| SYNTAX)?;
                if v > 255 {
                    return Err(SYNTAX);
                }
                out.push(char::from_u32(v).filter(|_| v < 0x80).ok_or(SYNTAX)?);
            }
            _ => return Err(SYNTAX),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_arrays_and_text() {
        let nodes = parse("{.items[0:2].metadata.name}\n").unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1], Node::Text("\n".into()));
        let Node::List(inner) = &nodes[0] else {
            panic!()
        };
        assert_eq!(inner[0], Node::Field("items".into()));
        assert!(matches!(inner[1], Node::Array(_)));
    }

    #[test]
    fn errors_read_like_client_go() {
        assert_eq!(parse("{.a").unwrap_err(), "unclosed action");
        assert_eq!(
            parse("{.kind,.x}").unwrap_err(),
            "unrecognized character in action: U+002C ','"
        );
        assert_eq!(
            parse(r#"{.items[0]["metadata"]}"#).unwrap_err(),
            r#"invalid array index "metadata""#
        );
        assert_eq!(parse("{.a[}").unwrap_err(), "unterminated array");
        assert_eq!(parse("{..a..b}").unwrap(), parse("{..a..b}").unwrap());
        assert_eq!(
            parse("{....a}").unwrap_err(),
            "invalid multiple recursive descent"
        );
        assert_eq!(parse("{.a[?(@.x==1}").unwrap_err(), "unterminated filter");
    }

    #[test]
    fn filters_split_like_the_regexp() {
        assert_eq!(
            split_filter(r#"@.status.phase=="Running""#),
            Some(("@.status.phase", "==", r#""Running""#))
        );
        assert_eq!(split_filter("@.x"), None);
        assert_eq!(split_filter("@.x=="), Some(("@.x", "=", "=")));
    }
}
