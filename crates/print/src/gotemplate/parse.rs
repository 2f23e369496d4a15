//! The parser of Go's text/template: builds the tree of a template (and of its `define`d and
//! `block` templates) from the lexer's tokens, checking functions and variables as Go does, with
//! Go's error messages (`template: output:LINE: ...`).

use std::collections::BTreeMap;
use std::fmt;

use super::lex::{Item, ItemType, Lexer};
use super::node::{new_number, Branch, Command, Node, Operand, Pipe, Variable};
use crate::golang::quote::{quote, unquote};

/// The name kubectl gives its template (`template.New("output")`).
pub(crate) const TEMPLATE_NAME: &str = "output";

/// All templates of one parse, by name; `output` is the top one.
#[derive(Debug, Clone, Default)]
pub(crate) struct TreeSet {
    pub(crate) trees: BTreeMap<String, Vec<Node>>,
}

/// What `itemList` stops at.
enum Stop {
    End,
    Else,
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::End => write!(f, "{{{{end}}}}"),
            Stop::Else => write!(f, "{{{{else}}}}"),
        }
    }
}

enum Parsed {
    Node(Node),
    Stop(Stop),
    Nothing,
}

/// Parses `text` with the given function names; returns the template set or Go's error text.
pub(crate) fn parse(text: &str, funcs: &[&str]) -> Result<TreeSet, String> {
    let mut p = Parser {
        lex: Lexer::new(text),
        token: std::array::from_fn(|_| Item {
            typ: ItemType::Eof,
            pos: 0,
            val: String::new(),
            line: 1,
        }),
        peek_count: 0,
        vars: vec!["$".into()],
        funcs,
        action_line: 0,
        range_depth: 0,
        set: TreeSet::default(),
    };
    let root = p.parse_top()?;
    p.add(TEMPLATE_NAME, root)?;
    Ok(p.set)
}

struct Parser<'a> {
    lex: Lexer<'a>,
    token: [Item; 3],
    peek_count: usize,
    vars: Vec<String>,
    funcs: &'a [&'a str],
    action_line: usize,
    range_depth: usize,
    set: TreeSet,
}

type PResult<T> = Result<T, String>;

impl Parser<'_> {
    fn next(&mut self) -> Item {
        if self.peek_count > 0 {
            self.peek_count -= 1;
        } else {
            self.token[0] = self.lex.next_item();
        }
        self.token[self.peek_count].clone()
    }

    fn backup(&mut self) {
        self.peek_count += 1;
    }

    fn backup2(&mut self, t1: Item) {
        self.token[1] = t1;
        self.peek_count = 2;
    }

    fn backup3(&mut self, t2: Item, t1: Item) {
        self.token[1] = t1;
        self.token[2] = t2;
        self.peek_count = 3;
    }

    fn peek(&mut self) -> Item {
        if self.peek_count > 0 {
            return self.token[self.peek_count - 1].clone();
        }
        self.peek_count = 1;
        self.token[0] = self.lex.next_item();
        self.token[0].clone()
    }

    fn next_non_space(&mut self) -> Item {
        loop {
            let t = self.next();
            if t.typ != ItemType::Space {
                return t;
            }
        }
    }

    fn peek_non_space(&mut self) -> Item {
        let t = self.next_non_space();
        self.backup();
        t
    }

    fn errorf(&self, msg: impl fmt::Display) -> String {
        format!("template: {TEMPLATE_NAME}:{}: {msg}", self.token[0].line)
    }

    fn expect(&mut self, expected: ItemType, context: &str) -> PResult<Item> {
        let t = self.next_non_space();
        if t.typ != expected {
            return Err(self.unexpected(&t, context));
        }
        Ok(t)
    }

    fn unexpected(&self, token: &Item, context: &str) -> String {
        if token.typ == ItemType::Error {
            let mut extra = String::new();
            if self.action_line != 0 && self.action_line != token.line {
                extra = format!(" in action started at {TEMPLATE_NAME}:{}", self.action_line);
                if token.val.ends_with(" action") {
                    extra = extra[" in action".len()..].to_string();
                }
            }
            return self.errorf(format!("{token}{extra}"));
        }
        self.errorf(format!("unexpected {token} in {context}"))
    }

    fn has_function(&self, name: &str) -> bool {
        self.funcs.contains(&name)
    }

    fn add(&mut self, name: &str, root: Vec<Node>) -> PResult<()> {
        match self.set.trees.get(name) {
            Some(existing) if !is_empty_tree(existing) => {
                if !is_empty_tree(&root) {
                    return Err(self.errorf(format!(
                        "template: multiple definition of template {}",
                        quote(name)
                    )));
                }
            }
            _ => {
                self.set.trees.insert(name.to_string(), root);
            }
        }
        Ok(())
    }

    fn parse_top(&mut self) -> PResult<Vec<Node>> {
        let mut root = Vec::new();
        while self.peek().typ != ItemType::Eof {
            if self.peek().typ == ItemType::LeftDelim {
                let delim = self.next();
                if self.next_non_space().typ == ItemType::Define {
                    self.parse_definition()?;
                    continue;
                }
                self.backup2(delim);
            }
            match self.text_or_action()? {
                Parsed::Stop(s) => return Err(self.errorf(format!("unexpected {s}"))),
                Parsed::Node(n) => root.push(n),
                Parsed::Nothing => {}
            }
        }
        Ok(root)
    }

    fn parse_definition(&mut self) -> PResult<()> {
        const CONTEXT: &str = "define clause";
        let name = self.next_non_space();
        if name.typ != ItemType::String && name.typ != ItemType::RawString {
            return Err(self.unexpected(&name, CONTEXT));
        }
        let name = unquote(&name.val).map_err(|_| self.errorf("invalid syntax"))?;
        self.expect(ItemType::RightDelim, CONTEXT)?;
        let saved_vars = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let (list, stop) = self.item_list()?;
        self.vars = saved_vars;
        if !matches!(stop, Stop::End) {
            return Err(self.errorf(format!("unexpected {stop} in {CONTEXT}")));
        }
        self.add(&name, list)
    }

    fn item_list(&mut self) -> PResult<(Vec<Node>, Stop)> {
        let mut list = Vec::new();
        while self.peek_non_space().typ != ItemType::Eof {
            match self.text_or_action()? {
                Parsed::Stop(s) => return Ok((list, s)),
                Parsed::Node(n) => list.push(n),
                Parsed::Nothing => {}
            }
        }
        Err(self.errorf("unexpected EOF"))
    }

    fn text_or_action(&mut self) -> PResult<Parsed> {
        let token = self.next_non_space();
        match token.typ {
            ItemType::Text => Ok(Parsed::Node(Node::Text { text: token.val })),
            ItemType::LeftDelim => {
                self.action_line = token.line;
                let r = self.action();
                self.action_line = 0;
                r
            }
            ItemType::Comment => Ok(Parsed::Nothing),
            _ => Err(self.unexpected(&token, "input")),
        }
    }

    fn action(&mut self) -> PResult<Parsed> {
        let token = self.next_non_space();
        match token.typ {
            ItemType::Block => return self.block_control().map(Parsed::Node),
            ItemType::Break => return self.break_control(token.pos, true).map(Parsed::Node),
            ItemType::Continue => return self.break_control(token.pos, false).map(Parsed::Node),
            ItemType::Else => return self.else_control().map(Parsed::Stop),
            ItemType::End => {
                self.expect(ItemType::RightDelim, "end")?;
                return Ok(Parsed::Stop(Stop::End));
            }
            ItemType::If => return self.if_control().map(Parsed::Node),
            ItemType::Range => {
                let b = self.parse_control("range")?;
                return Ok(Parsed::Node(Node::Range(b)));
            }
            ItemType::Template => return self.template_control().map(Parsed::Node),
            ItemType::With => return self.with_control().map(Parsed::Node),
            _ => {}
        }
        self.backup();
        let token = self.peek();
        let pipe = self.pipeline("command", ItemType::RightDelim)?;
        Ok(Parsed::Node(Node::Action {
            pos: token.pos,
            pipe,
        }))
    }

    fn break_control(&mut self, pos: usize, is_break: bool) -> PResult<Node> {
        let word = if is_break {
            "{{break}}"
        } else {
            "{{continue}}"
        };
        let token = self.next_non_space();
        if token.typ != ItemType::RightDelim {
            return Err(self.unexpected(&token, word));
        }
        if self.range_depth == 0 {
            return Err(self.errorf(format!("{word} outside {{{{range}}}}")));
        }
        Ok(if is_break {
            Node::Break { pos }
        } else {
            Node::Continue { pos }
        })
    }

    fn pipeline(&mut self, context: &str, end: ItemType) -> PResult<Pipe> {
        let token = self.peek_non_space();
        let mut pipe = Pipe {
            pos: token.pos,
            is_assign: false,
            decl: Vec::new(),
            cmds: Vec::new(),
        };
        'decls: loop {
            let v = self.peek_non_space();
            if v.typ != ItemType::Variable {
                break;
            }
            self.next();
            let token_after_variable = self.peek();
            let next = self.peek_non_space();
            if next.typ == ItemType::Assign || next.typ == ItemType::Declare {
                pipe.is_assign = next.typ == ItemType::Assign;
                self.next_non_space();
                pipe.decl.push(new_variable(v.pos, &v.val));
                self.vars.push(v.val.clone());
                break;
            } else if next.typ == ItemType::Char && next.val == "," {
                self.next_non_space();
                pipe.decl.push(new_variable(v.pos, &v.val));
                self.vars.push(v.val.clone());
                if context == "range" && pipe.decl.len() < 2 {
                    match self.peek_non_space().typ {
                        ItemType::Variable | ItemType::RightDelim | ItemType::RightParen => {
                            continue 'decls;
                        }
                        _ => return Err(self.errorf("range can only initialize variables")),
                    }
                }
                return Err(self.errorf(format!("too many declarations in {context}")));
            } else if token_after_variable.typ == ItemType::Space {
                self.backup3(v, token_after_variable);
            } else {
                self.backup2(v);
            }
            break;
        }
        loop {
            let token = self.next_non_space();
            if token.typ == end {
                self.check_pipeline(&pipe, context)?;
                return Ok(pipe);
            }
            match token.typ {
                ItemType::Bool
                | ItemType::CharConstant
                | ItemType::Complex
                | ItemType::Dot
                | ItemType::Field
                | ItemType::Identifier
                | ItemType::Number
                | ItemType::Nil
                | ItemType::RawString
                | ItemType::String
                | ItemType::Variable
                | ItemType::LeftParen => {
                    self.backup();
                    let cmd = self.command()?;
                    pipe.cmds.push(cmd);
                }
                _ => return Err(self.unexpected(&token, context)),
            }
        }
    }

    fn check_pipeline(&self, pipe: &Pipe, context: &str) -> PResult<()> {
        if pipe.cmds.is_empty() {
            return Err(self.errorf(format!("missing value for {context}")));
        }
        for (i, c) in pipe.cmds.iter().enumerate().skip(1) {
            if matches!(
                c.args.first(),
                Some(
                    Operand::Bool { .. }
                        | Operand::Dot { .. }
                        | Operand::Nil { .. }
                        | Operand::Number(_)
                        | Operand::Str { .. }
                )
            ) {
                return Err(self.errorf(format!(
                    "non executable command in pipeline stage {}",
                    i + 1
                )));
            }
        }
        Ok(())
    }

    fn parse_control(&mut self, context: &str) -> PResult<Branch> {
        let vars_len = self.vars.len();
        let r = self.parse_control_inner(context);
        self.vars.truncate(vars_len);
        r
    }

    fn parse_control_inner(&mut self, context: &str) -> PResult<Branch> {
        let pipe = self.pipeline(context, ItemType::RightDelim)?;
        if context == "range" {
            self.range_depth += 1;
        }
        let listed = self.item_list();
        if context == "range" {
            self.range_depth -= 1;
        }
        let (list, stop) = listed?;
        let mut else_list = None;
        if let Stop::Else = stop {
            if context == "if" && self.peek().typ == ItemType::If {
                self.next();
                else_list = Some(vec![self.if_control()?]);
            } else if context == "with" && self.peek().typ == ItemType::With {
                self.next();
                else_list = Some(vec![self.with_control()?]);
            } else {
                let (list, stop) = self.item_list()?;
                if !matches!(stop, Stop::End) {
                    return Err(self.errorf(format!("expected end; found {stop}")));
                }
                else_list = Some(list);
            }
        }
        Ok(Branch {
            pipe,
            list,
            else_list,
        })
    }

    fn if_control(&mut self) -> PResult<Node> {
        self.parse_control("if").map(Node::If)
    }

    fn with_control(&mut self) -> PResult<Node> {
        self.parse_control("with").map(Node::With)
    }

    fn else_control(&mut self) -> PResult<Stop> {
        let peek = self.peek_non_space();
        if peek.typ == ItemType::If || peek.typ == ItemType::With {
            return Ok(Stop::Else);
        }
        self.expect(ItemType::RightDelim, "else")?;
        Ok(Stop::Else)
    }

    fn template_name(&self, token: &Item, context: &str) -> PResult<String> {
        match token.typ {
            ItemType::String | ItemType::RawString => {
                unquote(&token.val).map_err(|_| self.errorf("invalid syntax"))
            }
            _ => Err(self.unexpected(token, context)),
        }
    }

    fn block_control(&mut self) -> PResult<Node> {
        const CONTEXT: &str = "block clause";
        let token = self.next_non_space();
        let name = self.template_name(&token, CONTEXT)?;
        let pipe = self.pipeline(CONTEXT, ItemType::RightDelim)?;
        let saved_vars = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let listed = self.item_list();
        self.vars = saved_vars;
        let (list, stop) = listed?;
        if !matches!(stop, Stop::End) {
            return Err(self.errorf(format!("unexpected {stop} in {CONTEXT}")));
        }
        self.add(&name, list)?;
        Ok(Node::Template {
            pos: token.pos,
            name,
            pipe: Some(pipe),
        })
    }

    fn template_control(&mut self) -> PResult<Node> {
        const CONTEXT: &str = "template clause";
        let token = self.next_non_space();
        let name = self.template_name(&token, CONTEXT)?;
        let mut pipe = None;
        if self.next_non_space().typ != ItemType::RightDelim {
            self.backup();
            pipe = Some(self.pipeline(CONTEXT, ItemType::RightDelim)?);
        }
        Ok(Node::Template {
            pos: token.pos,
            name,
            pipe,
        })
    }

    fn command(&mut self) -> PResult<Command> {
        let pos = self.peek_non_space().pos;
        let mut cmd = Command {
            pos,
            args: Vec::new(),
        };
        loop {
            self.peek_non_space();
            if let Some(operand) = self.operand()? {
                cmd.args.push(operand);
            }
            let token = self.next();
            match token.typ {
                ItemType::Space => continue,
                ItemType::RightDelim | ItemType::RightParen => self.backup(),
                ItemType::Pipe => {}
                _ => return Err(self.unexpected(&token, "operand")),
            }
            break;
        }
        if cmd.args.is_empty() {
            return Err(self.errorf("empty command"));
        }
        Ok(cmd)
    }

    fn operand(&mut self) -> PResult<Option<Operand>> {
        let Some(node) = self.term()? else {
            return Ok(None);
        };
        if self.peek().typ != ItemType::Field {
            return Ok(Some(node));
        }
        let chain_pos = self.peek().pos;
        let mut fields = Vec::new();
        while self.peek().typ == ItemType::Field {
            let f = self.next().val;
            fields.push(f[1..].to_string());
        }
        Ok(Some(match node {
            Operand::Field { ident, .. } => {
                let mut all = ident;
                all.extend(fields);
                Operand::Field {
                    pos: chain_pos,
                    ident: all,
                }
            }
            Operand::Variable(v) => {
                let mut all = v.ident;
                all.extend(fields);
                Operand::Variable(Variable {
                    pos: chain_pos,
                    ident: all,
                })
            }
            n @ (Operand::Bool { .. }
            | Operand::Str { .. }
            | Operand::Number(_)
            | Operand::Nil { .. }
            | Operand::Dot { .. }) => {
                return Err(
                    self.errorf(format!("unexpected . after term {}", quote(&n.to_string())))
                );
            }
            other => Operand::Chain {
                pos: chain_pos,
                node: Box::new(other),
                fields,
            },
        }))
    }

    fn term(&mut self) -> PResult<Option<Operand>> {
        let token = self.next_non_space();
        let pos = token.pos;
        Ok(Some(match token.typ {
            ItemType::Identifier => {
                if !self.has_function(&token.val) {
                    return Err(self.errorf(format!("function {} not defined", quote(&token.val))));
                }
                Operand::Identifier {
                    pos,
                    name: token.val,
                }
            }
            ItemType::Dot => Operand::Dot { pos },
            ItemType::Nil => Operand::Nil { pos },
            ItemType::Variable => {
                let v = new_variable(pos, &token.val);
                if !self.vars.iter().any(|name| *name == v.ident[0]) {
                    return Err(self.errorf(format!("undefined variable {}", quote(&v.ident[0]))));
                }
                Operand::Variable(v)
            }
            ItemType::Field => Operand::Field {
                pos,
                ident: token.val[1..].split('.').map(str::to_string).collect(),
            },
            ItemType::Bool => Operand::Bool {
                pos,
                value: token.val == "true",
            },
            ItemType::CharConstant | ItemType::Complex | ItemType::Number => {
                let n = new_number(pos, &token.val, token.typ).map_err(|e| self.errorf(e))?;
                Operand::Number(n)
            }
            ItemType::LeftParen => {
                let pipe = self.pipeline("parenthesized pipeline", ItemType::RightParen)?;
                Operand::Pipe(Box::new(pipe))
            }
            ItemType::String | ItemType::RawString => {
                let text = unquote(&token.val).map_err(|_| self.errorf("invalid syntax"))?;
                Operand::Str {
                    pos,
                    quoted: token.val,
                    text,
                }
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        }))
    }
}

fn new_variable(pos: usize, name: &str) -> Variable {
    Variable {
        pos,
        ident: name.split('.').map(str::to_string).collect(),
    }
}

/// Whether a tree holds nothing but white space.
fn is_empty_tree(list: &[Node]) -> bool {
    list.iter().all(|n| match n {
        Node::Text { text } => text.trim().is_empty(),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FUNCS: &[&str] = &["index", "len", "printf", "eq"];

    fn err(t: &str) -> String {
        parse(t, FUNCS).unwrap_err()
    }

    #[test]
    fn parse_errors_read_like_go() {
        assert_eq!(err("{{.a"), "template: output:1: unclosed action");
        assert_eq!(err("{{if .a}}x"), "template: output:1: unexpected EOF");
        assert_eq!(err("{{end}}"), "template: output:1: unexpected {{end}}");
        assert_eq!(
            err("{{.a b}}"),
            "template: output:1: function \"b\" not defined"
        );
        assert_eq!(
            err("{{$x}}"),
            "template: output:1: undefined variable \"$x\""
        );
        assert_eq!(err("{{(1}}"), "template: output:1: unclosed left paren");
        assert_eq!(
            err("{{| .a}}"),
            "template: output:1: unexpected \"|\" in command"
        );
        assert_eq!(
            err("{{.x | 1}}"),
            "template: output:1: non executable command in pipeline stage 2"
        );
        assert_eq!(
            err("{{break}}"),
            "template: output:1: {{break}} outside {{range}}"
        );
        assert_eq!(
            err("{{if}}{{end}}"),
            "template: output:1: missing value for if"
        );
        assert_eq!(
            err("{{range .a}}{{else}}{{else}}{{end}}"),
            "template: output:1: expected end; found {{else}}"
        );
    }

    #[test]
    fn field_chains_take_the_position_of_their_second_field() {
        let set = parse("{{.spec.containers.x}}", FUNCS).unwrap();
        let Node::Action { pipe, .. } = &set.trees["output"][0] else {
            panic!()
        };
        assert_eq!(pipe.cmds[0].args[0].pos(), 7);
        assert_eq!(pipe.cmds[0].args[0].to_string(), ".spec.containers.x");
    }

    #[test]
    fn nodes_print_back_like_go() {
        let t = r#"{{range $i, $v := .items}}{{if eq $v.a "x"}}{{printf "%d" (len .b)}}{{else}}n{{end}}{{end}}"#;
        let set = parse(t, FUNCS).unwrap();
        assert_eq!(set.trees["output"][0].to_string(), t);
    }
}
