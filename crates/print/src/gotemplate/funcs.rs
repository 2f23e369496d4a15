//! The functions a kubectl go-template can call: Go's builtins (`and`, `or`, `not`, `len`,
//! `index`, `slice`, `eq` ... `ge`, `print`, `printf`, `println`, `html`, `js`, `urlquery`,
//! `call`) and the two kubectl adds (`exists`, `base64decode`), each with Go's error texts.

use super::value::{truth, Val};
use crate::golang::fmt::{sprint, sprintf, sprintln, Arg, IntType};
use crate::golang::quote::is_print;
use crate::golang::Data;

/// How an argument is passed, which decides how a missing value or a literal arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    /// `reflect.Value`: passed as is, a missing value stays missing.
    Value,
    /// `interface{}`: a missing value becomes a nil interface.
    Any,
    /// `string`: must be a string.
    Str,
}

pub(crate) struct Signature {
    pub(crate) fixed: &'static [Param],
    pub(crate) variadic: Option<Param>,
}

impl Signature {
    pub(crate) fn num_in(&self) -> usize {
        self.fixed.len() + usize::from(self.variadic.is_some())
    }
}

const fn sig(fixed: &'static [Param], variadic: Option<Param>) -> Signature {
    Signature { fixed, variadic }
}

/// Every function name a template may use.
pub(crate) const NAMES: &[&str] = &[
    "and",
    "base64decode",
    "call",
    "eq",
    "exists",
    "ge",
    "gt",
    "html",
    "index",
    "js",
    "le",
    "len",
    "lt",
    "ne",
    "not",
    "or",
    "print",
    "printf",
    "println",
    "slice",
    "urlquery",
];

pub(crate) fn signature(name: &str) -> Signature {
    use Param::*;
    match name {
        "and" | "or" | "index" | "slice" | "eq" | "call" => sig(&[Value], Some(Value)),
        "not" | "len" => sig(&[Value], None),
        "ne" | "lt" | "le" | "gt" | "ge" => sig(&[Value, Value], None),
        "print" | "println" | "html" | "js" | "urlquery" => sig(&[], Some(Any)),
        "printf" => sig(&[Str], Some(Any)),
        "exists" => sig(&[Any], Some(Any)),
        "base64decode" => sig(&[Str], None),
        _ => sig(&[], None),
    }
}

/// Calls builtin `name` with evaluated arguments.
pub(crate) fn call<'a>(name: &str, args: Vec<Val<'a>>) -> Result<Val<'a>, String> {
    match name {
        "not" => Ok(Val::Bool(!truth(&args[0]))),
        "len" => length(args.into_iter().next().unwrap_or(Val::Invalid)),
        "index" => {
            let mut it = args.into_iter();
            let item = it.next().unwrap_or(Val::Invalid);
            index(item, it.collect())
        }
        "slice" => {
            let mut it = args.into_iter();
            let item = it.next().unwrap_or(Val::Invalid);
            slice(item, it.collect())
        }
        "eq" => eq(&args[0], &args[1..]).map(Val::Bool),
        "ne" => eq(&args[0], &args[1..]).map(|e| Val::Bool(!e)),
        "lt" => lt(&args[0], &args[1]).map(Val::Bool),
        "le" => le(&args[0], &args[1]).map(Val::Bool),
        "gt" => le(&args[0], &args[1]).map(|le| Val::Bool(!le)),
        "ge" => lt(&args[0], &args[1]).map(|lt| Val::Bool(!lt)),
        "print" => Ok(Val::Str(sprint(&fmt_args(&args)))),
        "println" => Ok(Val::Str(sprintln(&fmt_args(&args)))),
        "printf" => {
            let format = args[0].as_str().unwrap_or_default().to_string();
            Ok(Val::Str(sprintf(&format, &fmt_args(&args[1..]))))
        }
        "html" => Ok(Val::Str(html_escape(&eval_args(&args)))),
        "js" => Ok(Val::Str(js_escape(&eval_args(&args)))),
        "urlquery" => Ok(Val::Str(query_escape(&eval_args(&args)))),
        "exists" => Ok(Val::Bool(exists(&args[0], &args[1..]))),
        "base64decode" => {
            let s = args[0].as_str().unwrap_or_default();
            base64_decode(s)
                .map(|b| Val::Str(String::from_utf8_lossy(&b).into_owned()))
                .map_err(|e| format!("base64 decode failed: {e}"))
        }
        other => Err(format!("{other:?} is not a defined function")),
    }
}

fn fmt_args<'b>(args: &'b [Val]) -> Vec<Arg<'b>> {
    args.iter().map(Val::as_arg).collect()
}

/// Go's `evalArgs`: one string argument as is, otherwise `Sprint` with missing values shown as
/// `<no value>`.
fn eval_args(args: &[Val]) -> String {
    if let [only] = args {
        if let Some(s) = only.as_str() {
            return s.to_string();
        }
        if let Val::Iface(Data::Str(s)) = only {
            return s.clone();
        }
    }
    const NO_VALUE: &str = "<no value>";
    let printable: Vec<Arg> = args
        .iter()
        .map(|a| match a {
            Val::Invalid | Val::Iface(Data::Null) => Arg::Str(NO_VALUE),
            other => other.as_arg(),
        })
        .collect();
    sprint(&printable)
}

fn length(v: Val) -> Result<Val, String> {
    let (v, is_nil) = v.indirect();
    if is_nil {
        return Err("len of nil pointer".into());
    }
    if !v.is_valid() {
        return Err("reflect: call of reflect.Value.Type on zero Value".into());
    }
    match v.length() {
        Some(n) => Ok(Val::Int(n as i64, IntType::Int)),
        None => Err(format!("len of type {}", v.type_name())),
    }
}

/// Go's `indexArg`: an integer index within `0..=cap`.
fn index_arg(index: &Val, cap: usize) -> Result<usize, String> {
    let x = match index {
        Val::Int(i, _) => *i,
        Val::Data(Data::Int(i)) => *i,
        Val::Invalid => return Err("cannot index slice/array with nil".into()),
        other => {
            return Err(format!(
                "cannot index slice/array with type {}",
                other.type_name()
            ))
        }
    };
    if x < 0 || x as u64 > cap as u64 {
        return Err(format!("index out of range: {x}"));
    }
    Ok(x as usize)
}

fn index<'a>(item: Val<'a>, indexes: Vec<Val<'a>>) -> Result<Val<'a>, String> {
    let mut v = item.elem();
    if !v.is_valid() {
        return Err("index of untyped nil".into());
    }
    for i in indexes {
        let index = i.elem();
        let (cur, is_nil) = v.indirect();
        if is_nil {
            return Err("index of nil pointer".into());
        }
        v = match cur {
            Val::Data(Data::List(_)) | Val::Slice(_) => {
                let items = cur.as_list().unwrap_or_default();
                let x = index_arg(&index, items.len())?;
                match items.get(x) {
                    Some(d) => Val::Iface(d),
                    None => return Err("reflect: slice index out of range".into()),
                }
            }
            Val::Data(Data::Str(_)) | Val::Str(_) => {
                let s = cur.as_str().unwrap_or_default();
                let x = index_arg(&index, s.len())?;
                match s.as_bytes().get(x) {
                    Some(b) => Val::Int(*b as i64, IntType::Uint8),
                    None => return Err("reflect: string index out of range".into()),
                }
            }
            Val::Data(Data::Map(map)) => {
                let key = match &index {
                    Val::Invalid => return Err("value is nil; should be of type string".into()),
                    other => match other.as_str() {
                        Some(k) => k.to_string(),
                        None => {
                            return Err(format!(
                                "value has type {}; should be string",
                                other.type_name()
                            ))
                        }
                    },
                };
                match map.get(&key) {
                    Some(d) => Val::Iface(d),
                    None => Val::nil_iface(),
                }
            }
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(v)
}

fn slice<'a>(item: Val<'a>, indexes: Vec<Val<'a>>) -> Result<Val<'a>, String> {
    let v = item.elem();
    if !v.is_valid() {
        return Err("slice of untyped nil".into());
    }
    if indexes.len() > 3 {
        return Err(format!("too many slice indexes: {}", indexes.len()));
    }
    let len = match &v {
        Val::Data(Data::Str(_)) | Val::Str(_) => {
            if indexes.len() == 3 {
                return Err("cannot 3-index slice a string".into());
            }
            v.length().unwrap_or(0)
        }
        Val::Data(Data::List(_)) | Val::Slice(_) => v.length().unwrap_or(0),
        other => return Err(format!("can't slice item of type {}", other.type_name())),
    };
    let mut idx = [0, len, len];
    for (i, index) in indexes.iter().enumerate() {
        idx[i] = index_arg(&index.clone().elem(), len)?;
    }
    if idx[0] > idx[1] {
        return Err(format!("invalid slice index: {} > {}", idx[0], idx[1]));
    }
    if indexes.len() == 3 && idx[1] > idx[2] {
        return Err(format!("invalid slice index: {} > {}", idx[1], idx[2]));
    }
    Ok(match v.as_list() {
        Some(items) => Val::Slice(&items[idx[0]..idx[1]]),
        None => {
            let s = v.as_str().unwrap_or_default().as_bytes();
            Val::Str(String::from_utf8_lossy(&s[idx[0]..idx[1]]).into_owned())
        }
    })
}

/// The basic kinds of Go's comparison functions.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Basic<'b> {
    Invalid,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Complex(f64, f64),
    Str(&'b str),
}

impl Basic<'_> {
    fn kind(&self) -> u8 {
        match self {
            Basic::Invalid => 0,
            Basic::Bool(_) => 1,
            Basic::Complex(..) => 2,
            Basic::Int(_) => 3,
            Basic::Float(_) => 4,
            Basic::Str(_) => 5,
            Basic::Uint(_) => 6,
        }
    }
}

fn basic<'b>(v: &'b Val) -> Basic<'b> {
    match v {
        Val::Bool(b) | Val::Data(Data::Bool(b)) => Basic::Bool(*b),
        Val::Int(i, IntType::Uint8) => Basic::Uint(*i as u64),
        Val::Int(i, _) | Val::Data(Data::Int(i)) => Basic::Int(*i),
        Val::Float(f) | Val::Data(Data::Float(f)) => Basic::Float(*f),
        Val::Complex(r, i) => Basic::Complex(*r, *i),
        Val::Str(s) => Basic::Str(s),
        Val::Data(Data::Str(s)) => Basic::Str(s),
        _ => Basic::Invalid,
    }
}

const BAD_TYPE: &str = "invalid type for comparison";
const BAD_COMPARISON: &str = "incompatible types for comparison";

fn eq(arg1: &Val, rest: &[Val]) -> Result<bool, String> {
    let a = arg1.clone().elem();
    if rest.is_empty() {
        return Err("missing argument for comparison".into());
    }
    let k1 = basic(&a);
    for arg in rest {
        let b = arg.clone().elem();
        let k2 = basic(&b);
        let truth = if k1.kind() != k2.kind() {
            match (k1, k2) {
                (Basic::Int(x), Basic::Uint(y)) => x >= 0 && x as u64 == y,
                (Basic::Uint(x), Basic::Int(y)) => y >= 0 && x == y as u64,
                _ => {
                    if a.is_valid() && b.is_valid() {
                        return Err(BAD_COMPARISON.into());
                    }
                    false
                }
            }
        } else {
            match (k1, k2) {
                (Basic::Bool(x), Basic::Bool(y)) => x == y,
                (Basic::Complex(x, y), Basic::Complex(p, q)) => x == p && y == q,
                (Basic::Float(x), Basic::Float(y)) => x == y,
                (Basic::Int(x), Basic::Int(y)) => x == y,
                (Basic::Str(x), Basic::Str(y)) => x == y,
                (Basic::Uint(x), Basic::Uint(y)) => x == y,
                _ => {
                    // Neither is a basic kind: only nil-ness can be compared; maps and slices
                    // are not comparable.
                    if !a.is_valid() || !b.is_valid() {
                        !a.is_valid() && !b.is_valid()
                    } else if a.type_name() != b.type_name() {
                        return Err(format!(
                            "non-comparable types {}: {}, {}: {}",
                            sprintf("%s", &[a.as_arg()]),
                            a.type_name(),
                            b.type_name(),
                            sprintf("%v", &[b.as_arg()])
                        ));
                    } else {
                        return Err(format!(
                            "non-comparable type {}: {}",
                            sprintf("%s", &[b.as_arg()]),
                            b.type_name()
                        ));
                    }
                }
            }
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn lt(arg1: &Val, arg2: &Val) -> Result<bool, String> {
    let a = arg1.clone().elem();
    let b = arg2.clone().elem();
    let (k1, k2) = (basic(&a), basic(&b));
    if k1.kind() == 0 || k2.kind() == 0 {
        return Err(BAD_TYPE.into());
    }
    if k1.kind() != k2.kind() {
        return match (k1, k2) {
            (Basic::Int(x), Basic::Uint(y)) => Ok(x < 0 || (x as u64) < y),
            (Basic::Uint(x), Basic::Int(y)) => Ok(y >= 0 && x < y as u64),
            _ => Err(BAD_COMPARISON.into()),
        };
    }
    match (k1, k2) {
        (Basic::Float(x), Basic::Float(y)) => Ok(x < y),
        (Basic::Int(x), Basic::Int(y)) => Ok(x < y),
        (Basic::Str(x), Basic::Str(y)) => Ok(x < y),
        (Basic::Uint(x), Basic::Uint(y)) => Ok(x < y),
        _ => Err(BAD_TYPE.into()),
    }
}

fn le(arg1: &Val, arg2: &Val) -> Result<bool, String> {
    if lt(arg1, arg2)? {
        return Ok(true);
    }
    eq(arg1, std::slice::from_ref(arg2))
}

/// kubectl's `exists`: whether `index` would find something non-nil.
fn exists(item: &Val, indexes: &[Val]) -> bool {
    let mut v = item.clone().elem();
    for i in indexes {
        let index = i.clone().elem();
        let (cur, is_nil) = v.indirect();
        if is_nil {
            return false;
        }
        let position = |len: usize| index.as_int().filter(|x| *x >= 0 && (*x as usize) < len);
        v = if let Some(items) = cur.as_list() {
            match position(items.len()) {
                Some(x) => Val::Iface(&items[x as usize]),
                None => return false,
            }
        } else if let Some(s) = cur.as_str() {
            match position(s.len()) {
                Some(x) => Val::Int(s.as_bytes()[x as usize] as i64, IntType::Uint8),
                None => return false,
            }
        } else if let Val::Data(Data::Map(map)) = cur {
            let key = match &index {
                Val::Invalid => String::new(),
                other => match other.as_str() {
                    Some(k) => k.to_string(),
                    None => return false,
                },
            };
            match map.get(&key) {
                Some(d) => Val::Iface(d),
                None => Val::nil_iface(),
            }
        } else {
            return false;
        };
    }
    !v.indirect().1
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push('\u{FFFD}'),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

fn js_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u00{:02X}", c as u32)),
            c if (c as u32) < 0x80 => out.push(c),
            c if is_print(c) => out.push(c),
            c => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    out
}

/// `url.QueryEscape`.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `base64.StdEncoding.DecodeString`: padding required, CR and LF ignored, and Go's
/// "illegal base64 data at input byte N".
fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    fn value(b: u8) -> Option<u8> {
        match b {
            b'A'..=b'Z' => Some(b - b'A'),
            b'a'..=b'z' => Some(b - b'a' + 26),
            b'0'..=b'9' => Some(b - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let corrupt = |at: usize| format!("illegal base64 data at input byte {at}");
    let src = s.as_bytes();
    let is_newline = |b: u8| b == b'\n' || b == b'\r';
    let mut out = Vec::new();
    let mut si = 0usize;
    loop {
        let mut dbuf = [0u8; 4];
        let mut dlen = 4;
        let mut j = 0;
        let mut trailing_garbage = None;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(corrupt(si - j));
            }
            let c = src[si];
            si += 1;
            if let Some(v) = value(c) {
                dbuf[j] = v;
                j += 1;
                continue;
            }
            if is_newline(c) {
                continue;
            }
            if c != b'=' {
                return Err(corrupt(si - 1));
            }
            match j {
                0 | 1 => return Err(corrupt(si - 1)),
                2 => {
                    while si < src.len() && is_newline(src[si]) {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(corrupt(src.len()));
                    }
                    if src[si] != b'=' {
                        return Err(corrupt(si - 1));
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && is_newline(src[si]) {
                si += 1;
            }
            if si < src.len() {
                trailing_garbage = Some(si);
            }
            dlen = j;
            break;
        }
        let val = (dbuf[0] as u32) << 18
            | (dbuf[1] as u32) << 12
            | (dbuf[2] as u32) << 6
            | dbuf[3] as u32;
        let bytes = [(val >> 16) as u8, (val >> 8) as u8, val as u8];
        out.extend_from_slice(&bytes[..dlen - 1]);
        if let Some(at) = trailing_garbage {
            return Err(corrupt(at));
        }
        if dlen < 4 {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_like_go() {
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVs\nbG8=").unwrap(), b"hello");
        assert_eq!(
            base64_decode("aGk").unwrap_err(),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            base64_decode("a!==").unwrap_err(),
            "illegal base64 data at input byte 1"
        );
        assert_eq!(
            base64_decode("aGk=x").unwrap_err(),
            "illegal base64 data at input byte 4"
        );
    }

    #[test]
    fn escapers_like_go() {
        assert_eq!(html_escape("a<b>&\"'"), "a&lt;b&gt;&amp;&#34;&#39;");
        assert_eq!(
            js_escape("a<b>&c=\t\u{2028}é"),
            "a\\u003Cb\\u003E\\u0026c\\u003D\\u0009\\u2028é"
        );
        assert_eq!(query_escape("a b&c/é"), "a+b%26c%2F%C3%A9");
    }
}
