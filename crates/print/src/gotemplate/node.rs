//! The nodes of a parsed Go template (text/template/parse's node.go): positions kept for error
//! reports, and each node printing back as Go prints it, because execution errors quote it
//! (`at <.spec.containers.x>`). Number literals are classified here as Go's `newNumber` does.

use std::fmt;

use super::lex::ItemType;
use crate::golang::quote::quote;

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Text {
        text: String,
    },
    Action {
        pos: usize,
        pipe: Pipe,
    },
    If(Branch),
    Range(Branch),
    With(Branch),
    Template {
        pos: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    Break {
        pos: usize,
    },
    Continue {
        pos: usize,
    },
}

impl Node {
    pub(crate) fn pos(&self) -> usize {
        match self {
            Node::Text { .. } => 0,
            Node::Action { pos, .. }
            | Node::Template { pos, .. }
            | Node::Break { pos }
            | Node::Continue { pos } => *pos,
            Node::If(b) | Node::Range(b) | Node::With(b) => b.pipe.pos,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Branch {
    pub(crate) pipe: Pipe,
    pub(crate) list: Vec<Node>,
    pub(crate) else_list: Option<Vec<Node>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Pipe {
    pub(crate) pos: usize,
    pub(crate) is_assign: bool,
    pub(crate) decl: Vec<Variable>,
    pub(crate) cmds: Vec<Command>,
}

#[derive(Debug, Clone)]
pub(crate) struct Variable {
    pub(crate) pos: usize,
    pub(crate) ident: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub(crate) pos: usize,
    pub(crate) args: Vec<Operand>,
}

#[derive(Debug, Clone)]
pub(crate) struct Number {
    pub(crate) pos: usize,
    pub(crate) text: String,
    pub(crate) is_int: bool,
    pub(crate) is_uint: bool,
    pub(crate) is_float: bool,
    pub(crate) is_complex: bool,
    pub(crate) int64: i64,
    pub(crate) float64: f64,
    pub(crate) complex: (f64, f64),
}

#[derive(Debug, Clone)]
pub(crate) enum Operand {
    Field {
        pos: usize,
        ident: Vec<String>,
    },
    Chain {
        pos: usize,
        node: Box<Operand>,
        fields: Vec<String>,
    },
    Identifier {
        pos: usize,
        name: String,
    },
    Dot {
        pos: usize,
    },
    Nil {
        pos: usize,
    },
    Variable(Variable),
    Bool {
        pos: usize,
        value: bool,
    },
    Number(Number),
    Str {
        pos: usize,
        quoted: String,
        text: String,
    },
    Pipe(Box<Pipe>),
}

impl Operand {
    pub(crate) fn pos(&self) -> usize {
        match self {
            Operand::Field { pos, .. }
            | Operand::Chain { pos, .. }
            | Operand::Identifier { pos, .. }
            | Operand::Dot { pos }
            | Operand::Nil { pos }
            | Operand::Bool { pos, .. }
            | Operand::Str { pos, .. } => *pos,
            Operand::Variable(v) => v.pos,
            Operand::Number(n) => n.pos,
            Operand::Pipe(p) => p.pos,
        }
    }
}

// Go's String() of each node: execution errors show it between `<` and `>`.

fn write_list(f: &mut fmt::Formatter<'_>, list: &[Node]) -> fmt::Result {
    list.iter().try_for_each(|n| write!(f, "{n}"))
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Text { text } => write!(f, "{text}"),
            Node::Action { pipe, .. } => write!(f, "{{{{{pipe}}}}}"),
            Node::If(b) => write_branch(f, "if", b),
            Node::Range(b) => write_branch(f, "range", b),
            Node::With(b) => write_branch(f, "with", b),
            Node::Template { name, pipe, .. } => {
                write!(f, "{{{{template {}", quote(name))?;
                if let Some(p) = pipe {
                    write!(f, " {p}")?;
                }
                write!(f, "}}}}")
            }
            Node::Break { .. } => write!(f, "{{{{break}}}}"),
            Node::Continue { .. } => write!(f, "{{{{continue}}}}"),
        }
    }
}

fn write_branch(f: &mut fmt::Formatter<'_>, name: &str, b: &Branch) -> fmt::Result {
    write!(f, "{{{{{name} {}}}}}", b.pipe)?;
    write_list(f, &b.list)?;
    if let Some(e) = &b.else_list {
        write!(f, "{{{{else}}}}")?;
        write_list(f, e)?;
    }
    write!(f, "{{{{end}}}}")
}

impl fmt::Display for Pipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.decl.is_empty() {
            for (i, v) in self.decl.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "{v}")?;
            }
            write!(f, "{}", if self.is_assign { " = " } else { " := " })?;
        }
        for (i, c) in self.cmds.iter().enumerate() {
            if i > 0 {
                write!(f, " | ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.ident.join("."))
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, arg) in self.args.iter().enumerate() {
            if i > 0 {
                write!(f, " ")?;
            }
            match arg {
                Operand::Pipe(p) => write!(f, "({p})")?,
                other => write!(f, "{other}")?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Field { ident, .. } => ident.iter().try_for_each(|i| write!(f, ".{i}")),
            Operand::Chain { node, fields, .. } => {
                match node.as_ref() {
                    Operand::Pipe(p) => write!(f, "({p})")?,
                    other => write!(f, "{other}")?,
                }
                fields.iter().try_for_each(|i| write!(f, ".{i}"))
            }
            Operand::Identifier { name, .. } => write!(f, "{name}"),
            Operand::Dot { .. } => write!(f, "."),
            Operand::Nil { .. } => write!(f, "nil"),
            Operand::Variable(v) => write!(f, "{v}"),
            Operand::Bool { value, .. } => write!(f, "{value}"),
            Operand::Number(n) => write!(f, "{}", n.text),
            Operand::Str { quoted, .. } => write!(f, "{quoted}"),
            Operand::Pipe(p) => write!(f, "{p}"),
        }
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` / `ParseUint`: sign, 0x/0o/0b/0 prefixes, underscores
/// between digits.
fn parse_go_integer(text: &str) -> Option<i128> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_string(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string(), true)
    } else {
        (10, lower.clone(), false)
    };
    if !underscores_ok(&digits, prefixed) {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    let v = i128::from_str_radix(&clean, radix).ok()?;
    Some(if neg { -v } else { v })
}

/// Go's rule: an underscore must sit between digits (a base prefix counts as a digit).
fn underscores_ok(digits: &str, prefixed: bool) -> bool {
    let b = digits.as_bytes();
    for (i, c) in b.iter().enumerate() {
        if *c == b'_' {
            let before_ok = if i == 0 { prefixed } else { b[i - 1] != b'_' };
            let after_ok = i + 1 < b.len() && b[i + 1] != b'_';
            if !before_ok || !after_ok {
                return false;
            }
        }
    }
    true
}

fn parse_go_float(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("0x") || lower.contains("inf") || lower.contains("nan") {
        return None;
    }
    let body = lower.trim_start_matches(['+', '-']);
    if !underscores_ok(body, false) {
        return None;
    }
    let clean: String = lower.chars().filter(|c| *c != '_').collect();
    clean.parse::<f64>().ok()
}

/// Go's `newNumber`: what a number literal can be (int, uint, float, complex).
pub(crate) fn new_number(pos: usize, text: &str, typ: ItemType) -> Result<Number, String> {
    let mut n = Number {
        pos,
        text: text.to_string(),
        is_int: false,
        is_uint: false,
        is_float: false,
        is_complex: false,
        int64: 0,
        float64: 0.0,
        complex: (0.0, 0.0),
    };
    if typ == ItemType::CharConstant {
        let body = &text[1..];
        let (bytes, tail) = crate::golang::quote::unquote_char(body, '\'')
            .map_err(|_| "invalid syntax".to_string())?;
        if tail != "'" {
            return Err(format!("malformed character constant: {text}"));
        }
        let r = match String::from_utf8(bytes.clone()) {
            Ok(s) => s.chars().next().map(|c| c as i64).unwrap_or(0),
            Err(_) => bytes[0] as i64,
        };
        n.int64 = r;
        n.is_int = true;
        n.is_uint = true;
        n.float64 = r as f64;
        n.is_float = true;
        return Ok(n);
    }
    if typ == ItemType::Complex {
        return Err(format!("complex constants are not supported: {text}"));
    }
    if let Some(imag) = text.strip_suffix('i') {
        if let Some(f) = parse_go_float(imag).or_else(|| parse_go_integer(imag).map(|i| i as f64)) {
            n.is_complex = true;
            n.complex = (0.0, f);
            if f == 0.0 {
                n.is_float = true;
                n.is_int = true;
                n.is_uint = true;
            }
            return Ok(n);
        }
    }
    if let Some(v) = parse_go_integer(text) {
        if (0..=u64::MAX as i128).contains(&v) {
            n.is_uint = true;
        }
        if (i64::MIN as i128..=i64::MAX as i128).contains(&v) {
            n.is_int = true;
            n.int64 = v as i64;
        }
    }
    if n.is_int {
        n.is_float = true;
        n.float64 = n.int64 as f64;
    } else if n.is_uint {
        n.is_float = true;
        n.float64 = parse_go_integer(text).unwrap_or(0) as f64;
    } else if let Some(f) = parse_go_float(text) {
        if !text.contains(['.', 'e', 'E', 'p', 'P']) {
            return Err(format!("integer overflow: {}", quote(text)));
        }
        n.is_float = true;
        n.float64 = f;
        if f.fract() == 0.0 && f.abs() < 9.2e18 {
            n.is_int = true;
            n.int64 = f as i64;
        }
        if f.fract() == 0.0 && (0.0..1.8e19).contains(&f) {
            n.is_uint = true;
        }
    }
    if !n.is_int && !n.is_uint && !n.is_float {
        return Err(format!("illegal number syntax: {}", quote(text)));
    }
    Ok(n)
}
