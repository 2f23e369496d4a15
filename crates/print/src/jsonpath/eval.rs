//! Evaluation of a parsed JSONPath template over decoded JSON, with client-go's semantics: every
//! action starts again from the current object, a field missing everywhere yields nothing
//! (kubectl allows missing keys), `range`...`end` repeats the nodes between them per element,
//! filters compare one value with Go's template comparison rules, and the results of one action
//! print separated by spaces (maps and lists as compact JSON).

use super::parse::{Node, Param};
use crate::golang::fmt::{sprint_v, Arg, IntType};
use crate::golang::{json, Data};

/// One result value: a piece of the object, or a literal of the template.
#[derive(Debug, Clone)]
pub(crate) enum JVal<'a> {
    /// A value inside the object (`Data::Null` is a nil `interface{}`).
    Data(&'a Data),
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A byte of a string, from `*` or `..` over a string.
    Byte(u8),
    /// No value at all (what a range body is walked with when the range is empty).
    Invalid,
}

impl<'a> JVal<'a> {
    /// Go's `template.Indirect`: `None` for a nil interface.
    fn indirect(&self) -> Option<&JVal<'a>> {
        match self {
            JVal::Data(Data::Null) => None,
            other => Some(other),
        }
    }

    /// `reflect.Value.Type().String()` of the value.
    fn type_name(&self) -> &'static str {
        match self {
            JVal::Data(d) => d.type_name(),
            JVal::Text(_) => "string",
            JVal::Int(_) => "int",
            JVal::Float(_) => "float64",
            JVal::Bool(_) => "bool",
            JVal::Byte(_) => "uint8",
            JVal::Invalid => "<invalid reflect.Value>",
        }
    }

    pub(crate) fn as_arg(&self) -> Arg<'_> {
        match self {
            JVal::Data(d) => Arg::from_data(d),
            JVal::Text(s) => Arg::Str(s),
            JVal::Int(i) => Arg::Int(*i, IntType::Int),
            JVal::Float(f) => Arg::Float(*f),
            JVal::Bool(b) => Arg::Bool(*b),
            JVal::Byte(b) => Arg::Int(*b as i64, IntType::Uint8),
            JVal::Invalid => Arg::Nil,
        }
    }

    /// The value as `reflect.ValueOf(v.Interface())` sees it, for comparisons.
    fn basic(&self) -> Basic<'_> {
        match self {
            JVal::Data(Data::Bool(b)) | JVal::Bool(b) => Basic::Bool(*b),
            JVal::Data(Data::Int(i)) | JVal::Int(i) => Basic::Int(*i),
            JVal::Byte(b) => Basic::Uint(*b as u64),
            JVal::Data(Data::Float(f)) | JVal::Float(f) => Basic::Float(*f),
            JVal::Data(Data::Str(s)) => Basic::Str(s),
            JVal::Text(s) => Basic::Str(s),
            _ => Basic::Invalid,
        }
    }
}

/// The "basic kinds" of Go's template comparison functions.
enum Basic<'a> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(&'a str),
    Invalid,
}

impl Basic<'_> {
    fn kind(&self) -> u8 {
        match self {
            Basic::Bool(_) => 1,
            Basic::Int(_) => 2,
            Basic::Uint(_) => 3,
            Basic::Float(_) => 4,
            Basic::Str(_) => 5,
            Basic::Invalid => 0,
        }
    }
}

const BAD_TYPE: &str = "invalid type for comparison";
const BAD_COMPARISON: &str = "incompatible types for comparison";

fn equal(a: &JVal, b: &JVal) -> Result<bool, String> {
    let (x, y) = (a.basic(), b.basic());
    if x.kind() == 0 || y.kind() == 0 {
        return Err(BAD_TYPE.into());
    }
    if x.kind() != y.kind() {
        return Err(BAD_COMPARISON.into());
    }
    Ok(match (x, y) {
        (Basic::Bool(p), Basic::Bool(q)) => p == q,
        (Basic::Int(p), Basic::Int(q)) => p == q,
        (Basic::Uint(p), Basic::Uint(q)) => p == q,
        (Basic::Float(p), Basic::Float(q)) => p == q,
        (Basic::Str(p), Basic::Str(q)) => p == q,
        _ => false,
    })
}

fn less(a: &JVal, b: &JVal) -> Result<bool, String> {
    let (x, y) = (a.basic(), b.basic());
    if x.kind() == 0 || y.kind() == 0 {
        return Err(BAD_TYPE.into());
    }
    if x.kind() != y.kind() {
        return Err(BAD_COMPARISON.into());
    }
    match (x, y) {
        (Basic::Int(p), Basic::Int(q)) => Ok(p < q),
        (Basic::Uint(p), Basic::Uint(q)) => Ok(p < q),
        (Basic::Float(p), Basic::Float(q)) => Ok(p < q),
        (Basic::Str(p), Basic::Str(q)) => Ok(p < q),
        _ => Err(BAD_TYPE.into()),
    }
}

fn compare(op: &str, a: &JVal, b: &JVal) -> Result<bool, String> {
    match op {
        "<" => less(a, b),
        ">" => {
            // Greater is "not LessEqual".
            let le = less(a, b)? || equal(a, b)?;
            Ok(!le)
        }
        "==" => equal(a, b),
        "!=" => equal(a, b).map(|e| !e),
        "<=" => Ok(less(a, b)? || equal(a, b)?),
        ">=" => less(a, b).map(|l| !l),
        other => Err(format!("unrecognized filter operator {other}")),
    }
}

/// Executes a template: the state of client-go's JSONPath walker.
pub(crate) struct Exec<'t> {
    nodes: &'t [Node],
    begin_range: i32,
    in_range: i32,
    end_range: i32,
    last_end_node: Option<usize>,
    allow_missing: bool,
}

impl<'t> Exec<'t> {
    pub(crate) fn new(nodes: &'t [Node], allow_missing: bool) -> Self {
        Exec {
            nodes,
            allow_missing,
            begin_range: 0,
            in_range: 0,
            end_range: 0,
            last_end_node: None,
        }
    }

    /// client-go's `FindResults`: one list of values per printed node.
    pub(crate) fn find_results<'a>(
        &mut self,
        data: JVal<'a>,
        start: usize,
    ) -> Result<Vec<Vec<JVal<'a>>>, String> {
        let mut full = Vec::new();
        let mut i = start;
        while i < self.nodes.len() {
            let results = self.walk(vec![data.clone()], &self.nodes[i])?;
            if self.end_range > 0 && self.end_range <= self.in_range {
                self.end_range -= 1;
                self.last_end_node = Some(i);
                break;
            }
            if self.begin_range > 0 {
                self.begin_range -= 1;
                self.in_range += 1;
                if results.is_empty() {
                    // Walk the body anyway so that the position reaches its end.
                    self.find_results(JVal::Invalid, i + 1)?;
                } else {
                    for value in results {
                        let value = match value {
                            JVal::Data(Data::Null) => JVal::Invalid,
                            v => v,
                        };
                        full.extend(self.find_results(value, i + 1)?);
                    }
                }
                self.in_range -= 1;
                if let Some(end) = self.last_end_node {
                    if end > i {
                        i = end;
                    }
                }
                i += 1;
                continue;
            }
            full.push(results);
            i += 1;
        }
        Ok(full)
    }

    fn walk<'a>(&mut self, input: Vec<JVal<'a>>, node: &Node) -> Result<Vec<JVal<'a>>, String> {
        match node {
            Node::List(nodes) => self.eval_list(input, nodes),
            Node::Text(t) => Ok(vec![JVal::Text(t.clone())]),
            Node::Field(name) => eval_field(&input, name, self.allow_missing),
            Node::Array(params) => eval_array(&input, params),
            Node::Filter { left, right, op } => self.eval_filter(&input, left, right, op),
            Node::Int(i) => Ok(input.iter().map(|_| JVal::Int(*i)).collect()),
            Node::Float(f) => Ok(input.iter().map(|_| JVal::Float(*f)).collect()),
            Node::Bool(b) => Ok(input.iter().map(|_| JVal::Bool(*b)).collect()),
            Node::Wildcard => Ok(input.iter().flat_map(children).collect()),
            Node::Recursive => Ok(eval_recursive(&input)),
            Node::Union(lists) => {
                let mut out = Vec::new();
                for list in lists {
                    out.extend(self.eval_list(input.clone(), list)?);
                }
                Ok(out)
            }
            Node::Identifier(name) => match name.as_str() {
                "range" => {
                    self.begin_range += 1;
                    Ok(input)
                }
                "end" => {
                    if self.in_range > 0 {
                        self.end_range += 1;
                        Ok(Vec::new())
                    } else {
                        Err("not in range, nothing to end".into())
                    }
                }
                other => Err(format!("unrecognized identifier {other}")),
            },
        }
    }

    fn eval_list<'a>(
        &mut self,
        input: Vec<JVal<'a>>,
        nodes: &[Node],
    ) -> Result<Vec<JVal<'a>>, String> {
        let mut cur = input;
        for node in nodes {
            cur = self.walk(cur, node)?;
        }
        Ok(cur)
    }

    fn eval_filter<'a>(
        &mut self,
        input: &[JVal<'a>],
        left: &[Node],
        right: &[Node],
        op: &str,
    ) -> Result<Vec<JVal<'a>>, String> {
        let mut results = Vec::new();
        for value in input {
            let items: &'a [Data] = match value {
                JVal::Data(Data::List(items)) => items,
                other => {
                    return Err(format!(
                        "{} is not array or slice and cannot be filtered",
                        sprint_v(&other.as_arg())
                    ))
                }
            };
            for item in items {
                let temp = vec![JVal::Data(item)];
                let lefts = self.eval_list(temp.clone(), left);
                if op == "exists" {
                    if matches!(&lefts, Ok(l) if !l.is_empty()) {
                        results.push(JVal::Data(item));
                    }
                    continue;
                }
                let lefts = lefts?;
                match lefts.len() {
                    0 => continue,
                    1 => {}
                    _ => return Err("can only compare one element at a time".into()),
                }
                let rights = self.eval_list(temp, right)?;
                match rights.len() {
                    0 => continue,
                    1 => {}
                    _ => return Err("can only compare one element at a time".into()),
                }
                if compare(op, &lefts[0], &rights[0])? {
                    results.push(JVal::Data(item));
                }
            }
        }
        Ok(results)
    }
}

fn eval_field<'a>(
    input: &[JVal<'a>],
    name: &str,
    allow_missing: bool,
) -> Result<Vec<JVal<'a>>, String> {
    let mut results = Vec::new();
    if input.is_empty() {
        return Ok(results);
    }
    for value in input {
        if let Some(JVal::Data(Data::Map(map))) = value.indirect() {
            if let Some(found) = map.get(name) {
                results.push(JVal::Data(found));
            }
        }
    }
    if results.is_empty() && !allow_missing {
        return Err(format!("{name} is not found"));
    }
    Ok(results)
}

fn eval_array<'a>(input: &[JVal<'a>], node_params: &[Param; 3]) -> Result<Vec<JVal<'a>>, String> {
    // Index arithmetic wraps as Go's int does (client-go's evalArray), so that indices at the
    // ends of int64 give kubectl's out-of-bounds errors rather than an overflow.
    let mut result = Vec::new();
    for value in input {
        let Some(value) = value.indirect() else {
            continue;
        };
        let items: &'a [Data] = match value {
            JVal::Data(Data::List(items)) => items,
            other => return Err(format!("{} is not array or slice", other.type_name())),
        };
        let len = items.len() as i64;
        let mut params = *node_params;
        if !params[0].known {
            params[0].value = 0;
        }
        if params[0].value < 0 {
            params[0].value = params[0].value.wrapping_add(len);
        }
        if !params[1].known {
            params[1].value = len;
        }
        if params[1].value < 0 || (params[1].value == 0 && params[1].derived) {
            params[1].value = params[1].value.wrapping_add(len);
        }
        if params[1].value == params[0].value {
            return Ok(result);
        }
        if params[0].value >= len || params[0].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {}",
                params[0].value, len
            ));
        }
        if params[1].value > len || params[1].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {}",
                params[1].value.wrapping_sub(1),
                len
            ));
        }
        if params[0].value > params[1].value {
            return Err(format!(
                "starting index {} is greater than ending index {}",
                params[0].value, params[1].value
            ));
        }
        let slice = &items[params[0].value as usize..params[1].value as usize];
        let mut step = 1usize;
        if params[2].known {
            if params[2].value <= 0 {
                return Err("step must be > 0".into());
            }
            step = params[2].value as usize;
        }
        result.extend(slice.iter().step_by(step).map(JVal::Data));
    }
    Ok(result)
}

/// The members of a map (sorted by key; Go's order would be random), of a list, or the bytes of
/// a string.
fn children<'a>(value: &JVal<'a>) -> Vec<JVal<'a>> {
    match value.indirect() {
        Some(JVal::Data(Data::Map(map))) => map.values().map(JVal::Data).collect(),
        Some(JVal::Data(Data::List(items))) => items.iter().map(JVal::Data).collect(),
        Some(JVal::Data(Data::Str(s))) => s.bytes().map(JVal::Byte).collect(),
        Some(JVal::Text(s)) => s.bytes().map(JVal::Byte).collect(),
        _ => Vec::new(),
    }
}

fn eval_recursive<'a>(input: &[JVal<'a>]) -> Vec<JVal<'a>> {
    let mut result = Vec::new();
    for value in input {
        let kids = children(value);
        if !kids.is_empty() {
            result.push(value.clone());
            result.extend(eval_recursive(&kids));
        }
    }
    result
}

/// Prints one node's results: separated by spaces, maps and lists as compact JSON, nil as
/// `null`, everything else with Go's `%v`.
pub(crate) fn print_results(out: &mut String, results: &[JVal]) {
    for (i, r) in results.iter().enumerate() {
        match r {
            JVal::Data(d @ (Data::Map(_) | Data::List(_))) => out.push_str(&json::marshal(d)),
            JVal::Data(Data::Null) => out.push_str("null"),
            JVal::Invalid => out.push_str("<no value>"),
            other => out.push_str(&sprint_v(&other.as_arg())),
        }
        if i + 1 != results.len() {
            out.push(' ');
        }
    }
}

/// `jsonpath-as-json`: one node's results as an indented JSON array and a newline.
pub(crate) fn print_results_json(out: &mut String, results: &[JVal]) {
    let items: Vec<Data> = results
        .iter()
        .map(|r| match r {
            JVal::Data(d) => (*d).clone(),
            JVal::Text(s) => Data::Str(s.clone()),
            JVal::Int(i) => Data::Int(*i),
            JVal::Float(f) => Data::Float(*f),
            JVal::Bool(b) => Data::Bool(*b),
            JVal::Byte(b) => Data::Int(*b as i64),
            JVal::Invalid => Data::Null,
        })
        .collect();
    out.push_str(&json::marshal_indent(&Data::List(items), "    "));
    out.push('\n');
}
