//! Execution of a parsed Go template over decoded JSON, following text/template's evaluation
//! rules step by step (pipelines, field chains, variables, `if`/`with`/`range`, function calls
//! with Go's argument conversions), so that output and errors match Go's, including the node an
//! error is reported at (`template: output:1:7: executing "output" at <.spec.containers.x>: ...`).

use std::fmt;

use super::funcs::{self, Param};
use super::node::{Branch, Command, Node, Number, Operand, Pipe, Variable};
use super::parse::{TreeSet, TEMPLATE_NAME};
use super::value::{is_true, truth, Val};
use crate::golang::fmt::{sprint_v, IntType};
use crate::golang::quote::quote;
use crate::golang::Data;

/// Why a walk stopped early.
pub(crate) enum Flow {
    Error(String),
    Break,
    Continue,
}

type R<T> = Result<T, Flow>;

/// A node errors can be reported at: its position and how Go prints it.
#[derive(Clone, Copy)]
struct At<'t> {
    pos: usize,
    show: &'t dyn fmt::Display,
}

pub(crate) struct State<'a, 't> {
    set: &'t TreeSet,
    text: &'t str,
    name: String,
    vars: Vec<(String, Val<'a>)>,
    at: Option<At<'t>>,
    depth: usize,
    allow_missing: bool,
    pub(crate) out: String,
}

const MAX_EXEC_DEPTH: usize = 100_000;

impl<'a, 't> State<'a, 't> {
    pub(crate) fn new(set: &'t TreeSet, text: &'t str, allow_missing: bool) -> Self {
        State {
            set,
            text,
            name: TEMPLATE_NAME.to_string(),
            vars: Vec::new(),
            at: None,
            depth: 0,
            allow_missing,
            out: String::new(),
        }
    }

    /// Runs the `output` template with `dot` as data.
    pub(crate) fn execute(&mut self, dot: Val<'a>) -> Result<(), String> {
        self.vars = vec![("$".into(), dot.clone())];
        let Some(root) = self.set.trees.get(TEMPLATE_NAME) else {
            return Err(format!(
                "template: {TEMPLATE_NAME}: {} is an incomplete or empty template",
                quote(TEMPLATE_NAME)
            ));
        };
        match self.walk_list(&dot, root) {
            Ok(()) => Ok(()),
            Err(Flow::Error(e)) => Err(e),
            Err(_) => Ok(()),
        }
    }

    fn at(&mut self, pos: usize, show: &'t dyn fmt::Display) {
        self.at = Some(At { pos, show });
    }

    /// Go's `state.errorf`: prefixed with the location and the node being executed.
    fn error(&self, msg: impl fmt::Display) -> Flow {
        let name = quote(&self.name);
        Flow::Error(match self.at {
            None => format!("template: {name}: {msg}"),
            Some(at) => {
                let before = &self.text[..at.pos.min(self.text.len())];
                let line = 1 + before.matches('\n').count();
                let col = match before.rfind('\n') {
                    Some(i) => at.pos - (i + 1),
                    None => at.pos,
                };
                format!(
                    "template: {TEMPLATE_NAME}:{line}:{col}: executing {name} at <{}>: {msg}",
                    at.show
                )
            }
        })
    }

    fn walk_list(&mut self, dot: &Val<'a>, list: &'t [Node]) -> R<()> {
        for node in list {
            self.walk(dot, node)?;
        }
        Ok(())
    }

    fn walk(&mut self, dot: &Val<'a>, node: &'t Node) -> R<()> {
        self.at(node.pos(), node);
        match node {
            Node::Text { text } => {
                self.out.push_str(text);
                Ok(())
            }
            Node::Action { pipe, .. } => {
                let val = self.eval_pipeline(dot, Some(pipe))?;
                if pipe.decl.is_empty() {
                    self.at(node.pos(), node);
                    self.print_value(&val);
                }
                Ok(())
            }
            Node::Break { .. } => Err(Flow::Break),
            Node::Continue { .. } => Err(Flow::Continue),
            Node::If(b) => self.walk_if_or_with(false, dot, b),
            Node::With(b) => self.walk_if_or_with(true, dot, b),
            Node::Range(b) => self.walk_range(dot, node, b),
            Node::Template { name, pipe, .. } => {
                let Some(root) = self.set.trees.get(name) else {
                    return Err(self.error(format!("template {} not defined", quote(name))));
                };
                if self.depth == MAX_EXEC_DEPTH {
                    return Err(self.error(format!(
                        "exceeded maximum template depth ({MAX_EXEC_DEPTH})"
                    )));
                }
                let new_dot = self.eval_pipeline(dot, pipe.as_ref())?;
                let saved_vars =
                    std::mem::replace(&mut self.vars, vec![("$".into(), new_dot.clone())]);
                let saved_name = std::mem::replace(&mut self.name, name.clone());
                self.depth += 1;
                let r = self.walk_list(&new_dot, root);
                self.depth -= 1;
                self.name = saved_name;
                self.vars = saved_vars;
                r
            }
        }
    }

    fn print_value(&mut self, v: &Val) {
        match v {
            Val::Invalid => self.out.push_str("<no value>"),
            other => {
                let s = sprint_v(&other.as_arg());
                self.out.push_str(&s);
            }
        }
    }

    fn walk_if_or_with(&mut self, with: bool, dot: &Val<'a>, b: &'t Branch) -> R<()> {
        let mark = self.vars.len();
        let r = (|| {
            let val = self.eval_pipeline(dot, Some(&b.pipe))?;
            let (t, ok) = is_true(&val.clone().elem());
            if !ok {
                return Err(self.error(format!("if/with can't use {}", sprint_v(&val.as_arg()))));
            }
            if t {
                if with {
                    self.walk_list(&val, &b.list)
                } else {
                    self.walk_list(dot, &b.list)
                }
            } else if let Some(else_list) = &b.else_list {
                self.walk_list(dot, else_list)
            } else {
                Ok(())
            }
        })();
        self.vars.truncate(mark);
        r
    }

    fn walk_range(&mut self, dot: &Val<'a>, node: &'t Node, r: &'t Branch) -> R<()> {
        self.at(node.pos(), node);
        let outer_mark = self.vars.len();
        let result = self.walk_range_inner(dot, r);
        self.vars.truncate(outer_mark);
        match result {
            Err(Flow::Break) => Ok(()),
            other => other,
        }
    }

    fn walk_range_inner(&mut self, dot: &Val<'a>, r: &'t Branch) -> R<()> {
        let (val, _) = self.eval_pipeline(dot, Some(&r.pipe))?.indirect();
        let mark = self.vars.len();
        let items: Vec<(Val<'a>, Val<'a>)> = match &val {
            Val::Data(Data::List(_)) | Val::Slice(_) => val
                .as_list()
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(i, d)| (Val::Int(i as i64, IntType::Int), Val::Iface(d)))
                .collect(),
            Val::Data(Data::Map(map)) => map
                .iter()
                .map(|(k, v)| (Val::Str(k.clone()), Val::Iface(v)))
                .collect(),
            Val::Invalid => Vec::new(),
            other => {
                return Err(self.error(format!(
                    "range can't iterate over {}",
                    sprint_v(&other.as_arg())
                )))
            }
        };
        if items.is_empty() {
            if let Some(else_list) = &r.else_list {
                return self.walk_list(dot, else_list);
            }
            return Ok(());
        }
        for (index, elem) in items {
            let decl = &r.pipe.decl;
            if !decl.is_empty() {
                if r.pipe.is_assign {
                    let target = if decl.len() > 1 {
                        index.clone()
                    } else {
                        elem.clone()
                    };
                    self.set_var(&decl[0].ident[0], target)?;
                } else {
                    let n = self.vars.len();
                    self.vars[n - 1].1 = elem.clone();
                }
            }
            if decl.len() > 1 {
                if r.pipe.is_assign {
                    self.set_var(&decl[1].ident[0], elem.clone())?;
                } else {
                    let n = self.vars.len();
                    self.vars[n - 2].1 = index.clone();
                }
            }
            let result = self.walk_list(&elem, &r.list);
            self.vars.truncate(mark);
            match result {
                Ok(()) | Err(Flow::Continue) => {}
                Err(other) => return Err(other),
            }
        }
        Ok(())
    }

    fn set_var(&mut self, name: &str, value: Val<'a>) -> R<()> {
        for (n, v) in self.vars.iter_mut().rev() {
            if n == name {
                *v = value;
                return Ok(());
            }
        }
        Err(self.error(format!("undefined variable: {name}")))
    }

    fn var_value(&self, name: &str) -> R<Val<'a>> {
        for (n, v) in self.vars.iter().rev() {
            if n == name {
                return Ok(v.clone());
            }
        }
        Err(self.error(format!("undefined variable: {name}")))
    }

    /// Evaluates a pipeline; declared variables are pushed (or assigned) and stay until the
    /// enclosing control ends.
    fn eval_pipeline(&mut self, dot: &Val<'a>, pipe: Option<&'t Pipe>) -> R<Val<'a>> {
        let Some(pipe) = pipe else {
            return Ok(Val::Invalid);
        };
        self.at(pipe.pos, pipe);
        let mut value: Option<Val<'a>> = None;
        for cmd in &pipe.cmds {
            let v = self.eval_command(dot, cmd, value.take())?;
            // A value of type interface{} goes down to the thing inside.
            value = Some(v.elem());
        }
        let value = value.unwrap_or(Val::Invalid);
        for var in &pipe.decl {
            if pipe.is_assign {
                self.set_var(&var.ident[0], value.clone())?;
            } else {
                self.vars.push((var.ident[0].clone(), value.clone()));
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &[Operand], final_: &Option<Val<'a>>) -> R<()> {
        if args.len() > 1 || final_.is_some() {
            return Err(self.error(format!("can't give argument to non-function {}", args[0])));
        }
        Ok(())
    }

    fn eval_command(
        &mut self,
        dot: &Val<'a>,
        cmd: &'t Command,
        final_: Option<Val<'a>>,
    ) -> R<Val<'a>> {
        let first = &cmd.args[0];
        match first {
            Operand::Field { pos, ident } => {
                self.at(*pos, first);
                self.eval_field_chain(dot.clone(), ident, &cmd.args, final_)
            }
            Operand::Chain { .. } => self.eval_chain(dot, first, &cmd.args, final_),
            Operand::Identifier { pos, name } => {
                self.at(*pos, first);
                let call_at = At {
                    pos: cmd.pos,
                    show: cmd,
                };
                self.eval_call(dot, name, call_at, &cmd.args, final_)
            }
            Operand::Pipe(p) => {
                self.not_a_function(&cmd.args, &final_)?;
                self.eval_pipeline(dot, Some(p))
            }
            Operand::Variable(v) => self.eval_variable(first, v, &cmd.args, final_),
            other => {
                self.at(other.pos(), other);
                self.not_a_function(&cmd.args, &final_)?;
                match other {
                    Operand::Bool { value, .. } => Ok(Val::Bool(*value)),
                    Operand::Dot { .. } => Ok(dot.clone()),
                    Operand::Nil { .. } => Err(self.error("nil is not a command")),
                    Operand::Number(n) => self.ideal_constant(other, n),
                    Operand::Str { text, .. } => Ok(Val::Str(text.clone())),
                    _ => Err(self.error(format!(
                        "can't evaluate command {}",
                        quote(&other.to_string())
                    ))),
                }
            }
        }
    }

    fn ideal_constant(&mut self, node: &'t Operand, n: &Number) -> R<Val<'a>> {
        self.at(n.pos, node);
        if n.is_complex {
            return Ok(Val::Complex(n.complex.0, n.complex.1));
        }
        let hex_int = n.text.len() > 2
            && n.text.starts_with('0')
            && matches!(n.text.as_bytes()[1], b'x' | b'X')
            && !n.text.contains(['p', 'P']);
        let rune = n.text.starts_with('\'');
        if n.is_float && !hex_int && !rune && n.text.contains(['.', 'e', 'E', 'p', 'P']) {
            return Ok(Val::Float(n.float64));
        }
        if n.is_int {
            return Ok(Val::Int(n.int64, IntType::Int));
        }
        if n.is_uint {
            return Err(self.error(format!("{} overflows int", n.text)));
        }
        Ok(Val::Invalid)
    }

    fn eval_variable(
        &mut self,
        node: &'t Operand,
        v: &'t Variable,
        args: &'t [Operand],
        final_: Option<Val<'a>>,
    ) -> R<Val<'a>> {
        self.at(v.pos, node);
        let value = self.var_value(&v.ident[0])?;
        if v.ident.len() == 1 {
            self.not_a_function(args, &final_)?;
            return Ok(value);
        }
        self.eval_field_chain(value, &v.ident[1..], args, final_)
    }

    fn eval_chain(
        &mut self,
        dot: &Val<'a>,
        node: &'t Operand,
        args: &'t [Operand],
        final_: Option<Val<'a>>,
    ) -> R<Val<'a>> {
        let Operand::Chain {
            pos,
            node: inner,
            fields,
        } = node
        else {
            return Ok(Val::Invalid);
        };
        self.at(*pos, node);
        if let Operand::Nil { .. } = inner.as_ref() {
            return Err(self.error(format!("indirection through explicit nil in {node}")));
        }
        let receiver = self.eval_arg(dot, None, inner)?;
        self.eval_field_chain(receiver, fields, args, final_)
    }

    fn eval_field_chain(
        &mut self,
        mut receiver: Val<'a>,
        ident: &'t [String],
        args: &'t [Operand],
        final_: Option<Val<'a>>,
    ) -> R<Val<'a>> {
        let n = ident.len();
        for name in &ident[..n - 1] {
            receiver = self.eval_field(name, &[], None, receiver)?;
        }
        self.eval_field(&ident[n - 1], args, final_, receiver)
    }

    fn eval_field(
        &mut self,
        field: &str,
        args: &[Operand],
        final_: Option<Val<'a>>,
        receiver: Val<'a>,
    ) -> R<Val<'a>> {
        if !receiver.is_valid() {
            if !self.allow_missing {
                return Err(self.error(format!("nil data; no entry for key {}", quote(field))));
            }
            return Ok(Val::Invalid);
        }
        let typ = receiver.type_name();
        let (receiver, is_nil) = receiver.indirect();
        if is_nil {
            return Err(self.error(format!("nil pointer evaluating {typ}.{field}")));
        }
        let has_args = args.len() > 1 || final_.is_some();
        match receiver {
            Val::Data(Data::Map(map)) => {
                if has_args {
                    return Err(self.error(format!("{field} is not a method but has arguments")));
                }
                match map.get(field) {
                    Some(v) => Ok(Val::Iface(v)),
                    None if !self.allow_missing => {
                        Err(self.error(format!("map has no entry for key {}", quote(field))))
                    }
                    None => Ok(Val::Invalid),
                }
            }
            _ => Err(self.error(format!("can't evaluate field {field} in type {typ}"))),
        }
    }

    /// Go's `validateType` for the three parameter types builtins use.
    fn validate(&self, value: Val<'a>, typ: Option<Param>) -> R<Val<'a>> {
        match typ {
            None | Some(Param::Value) => Ok(value),
            Some(Param::Any) => Ok(if value.is_valid() {
                value
            } else {
                Val::nil_iface()
            }),
            Some(Param::Str) => {
                if !value.is_valid() {
                    return Err(self.error("invalid value; expected string"));
                }
                match &value {
                    Val::Str(_) | Val::Data(Data::Str(_)) => Ok(value),
                    Val::Iface(Data::Str(s)) => Ok(Val::Str(s.clone())),
                    Val::Iface(Data::Null) => {
                        Err(self.error("wrong type for value; expected string; got interface {}"))
                    }
                    Val::Iface(d) => Err(self.error(format!(
                        "wrong type for value; expected string; got {}",
                        d.type_name()
                    ))),
                    other => Err(self.error(format!(
                        "wrong type for value; expected string; got {}",
                        other.type_name()
                    ))),
                }
            }
        }
    }

    fn eval_arg(&mut self, dot: &Val<'a>, typ: Option<Param>, n: &'t Operand) -> R<Val<'a>> {
        self.at(n.pos(), n);
        match n {
            Operand::Dot { .. } => return self.validate(dot.clone(), typ),
            Operand::Nil { .. } => {
                return match typ {
                    Some(Param::Str) => Err(self.error("cannot assign nil to string")),
                    Some(Param::Any) => Ok(Val::nil_iface()),
                    _ => Ok(Val::Invalid),
                }
            }
            Operand::Field { ident, .. } => {
                let v = self.eval_field_chain(dot.clone(), ident, std::slice::from_ref(n), None)?;
                return self.validate(v, typ);
            }
            Operand::Variable(v) => {
                let v = self.eval_variable(n, v, &[], None)?;
                return self.validate(v, typ);
            }
            Operand::Pipe(p) => {
                let v = self.eval_pipeline(dot, Some(p))?;
                return self.validate(v, typ);
            }
            Operand::Identifier { name, pos } => {
                let call_at = At { pos: *pos, show: n };
                let v = self.eval_call(dot, name, call_at, &[], None)?;
                return self.validate(v, typ);
            }
            Operand::Chain { .. } => {
                let v = self.eval_chain(dot, n, &[], None)?;
                return self.validate(v, typ);
            }
            _ => {}
        }
        // A literal.
        match typ {
            Some(Param::Str) => match n {
                Operand::Str { text, .. } => Ok(Val::Str(text.clone())),
                other => Err(self.error(format!("expected string; found {other}"))),
            },
            _ => match n {
                Operand::Bool { value, .. } => Ok(Val::Bool(*value)),
                Operand::Number(num) => self.ideal_constant(n, num),
                Operand::Str { text, .. } => Ok(Val::Str(text.clone())),
                other => Err(self.error(format!(
                    "can't handle assignment of {other} to empty interface argument"
                ))),
            },
        }
    }

    /// Go's `evalCall` for a builtin: argument count, conversions, and/or short-circuit.
    fn eval_call(
        &mut self,
        dot: &Val<'a>,
        name: &str,
        call_at: At<'t>,
        args: &'t [Operand],
        final_: Option<Val<'a>>,
    ) -> R<Val<'a>> {
        let args = if args.is_empty() { args } else { &args[1..] };
        let sig = funcs::signature(name);
        let num_in = args.len() + usize::from(final_.is_some());
        let num_fixed = if sig.variadic.is_some() {
            sig.fixed.len()
        } else {
            args.len()
        };
        if sig.variadic.is_some() {
            if num_in < num_fixed {
                return Err(self.error(format!(
                    "wrong number of args for {name}: want at least {} got {}",
                    sig.fixed.len(),
                    args.len()
                )));
            }
        } else if num_in != sig.num_in() {
            return Err(self.error(format!(
                "wrong number of args for {name}: want {} got {num_in}",
                sig.num_in()
            )));
        }

        if name == "and" || name == "or" {
            let want = name == "or";
            let mut v = Val::Invalid;
            for arg in args {
                v = self.eval_arg(dot, Some(Param::Value), arg)?;
                if truth(&v) == want {
                    return Ok(v);
                }
            }
            if let Some(f) = final_ {
                v = f;
            }
            return Ok(v);
        }

        let param = |i: usize| -> Param {
            if i < sig.fixed.len() {
                sig.fixed[i]
            } else {
                sig.variadic.unwrap_or(Param::Value)
            }
        };
        let mut argv = Vec::with_capacity(num_in);
        for (i, arg) in args.iter().enumerate() {
            argv.push(self.eval_arg(dot, Some(param(i)), arg)?);
        }
        if let Some(f) = final_ {
            let v = self.validate(f, Some(param(argv.len())))?;
            argv.push(v);
        }

        let result = if name == "call" {
            let fn_val = argv[0].clone().elem();
            let callee = args.first().map(|a| a.to_string()).unwrap_or_default();
            if !fn_val.is_valid() {
                Err("call of nil".to_string())
            } else {
                Err(format!(
                    "non-function {callee} of type {}",
                    fn_val.type_name()
                ))
            }
        } else {
            funcs::call(name, argv)
        };
        result.map_err(|e| {
            self.at = Some(call_at);
            self.error(format!("error calling {name}: {e}"))
        })
    }
}
