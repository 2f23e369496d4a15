//! The lexer of Go's text/template: text, `{{ }}` actions with trim markers (`{{- `, ` -}}`),
//! comments, and the tokens inside actions. Positions are byte offsets, lines count from 1, and
//! errors are Go's own words ("unclosed action", "bad number syntax: ...").

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ItemType {
    Error,
    Bool,
    Char,
    CharConstant,
    Comment,
    Complex,
    Assign,
    Declare,
    Eof,
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    Variable,
    /// Keywords sort after this one.
    Keyword,
    Block,
    Break,
    Continue,
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    pub(crate) typ: ItemType,
    pub(crate) pos: usize,
    pub(crate) val: String,
    pub(crate) line: usize,
}

impl std::fmt::Display for Item {
    /// Go's `item.String()`, used in "unexpected X in Y".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.typ {
            ItemType::Eof => write!(f, "EOF"),
            ItemType::Error => write!(f, "{}", self.val),
            t if t > ItemType::Keyword => write!(f, "<{}>", self.val),
            _ if self.val.chars().count() > 10 => {
                let head: String = self.val.chars().take(10).collect();
                write!(f, "{}...", crate::golang::quote::quote(&head))
            }
            _ => write!(f, "{}", crate::golang::quote::quote(&self.val)),
        }
    }
}

fn keyword(word: &str) -> Option<ItemType> {
    Some(match word {
        "." => ItemType::Dot,
        "block" => ItemType::Block,
        "break" => ItemType::Break,
        "continue" => ItemType::Continue,
        "define" => ItemType::Define,
        "else" => ItemType::Else,
        "end" => ItemType::End,
        "if" => ItemType::If,
        "range" => ItemType::Range,
        "nil" => ItemType::Nil,
        "template" => ItemType::Template,
        "with" => ItemType::With,
        _ => return None,
    })
}

const LEFT_DELIM: &str = "{{";
const RIGHT_DELIM: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";
const SPACE_CHARS: &[char] = &[' ', '\t', '\r', '\n'];
/// The trim marker plus the space next to it.
const TRIM_MARKER_LEN: usize = 2;

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

fn has_left_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0] == b'-' && is_space(b[1] as char)
}

fn has_right_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && is_space(b[0] as char) && b[1] == b'-'
}

enum State {
    Text,
    LeftDelim,
    Comment,
    RightDelim,
    InsideAction,
    Space,
    Identifier,
    Field,
    Variable,
    Char,
    Number,
    Quote,
    RawQuote,
}

pub(crate) struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    at_eof: bool,
    paren_depth: i32,
    line: usize,
    start_line: usize,
    inside_action: bool,
    item: Option<Item>,
    done: bool,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(input: &'a str) -> Self {
        Lexer {
            input,
            pos: 0,
            start: 0,
            at_eof: false,
            paren_depth: 0,
            line: 1,
            start_line: 1,
            inside_action: false,
            item: None,
            done: false,
        }
    }

    fn next(&mut self) -> Option<char> {
        match self.input[self.pos..].chars().next() {
            None => {
                self.at_eof = true;
                None
            }
            Some(c) => {
                self.pos += c.len_utf8();
                if c == '\n' {
                    self.line += 1;
                }
                Some(c)
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.input[self.pos..].chars().next()
    }

    fn backup(&mut self) {
        if !self.at_eof && self.pos > 0 {
            if let Some(c) = self.input[..self.pos].chars().next_back() {
                self.pos -= c.len_utf8();
                if c == '\n' {
                    self.line -= 1;
                }
            }
        }
    }

    fn this_item(&mut self, typ: ItemType) -> Item {
        let item = Item {
            typ,
            pos: self.start,
            val: self.input[self.start..self.pos].to_string(),
            line: self.start_line,
        };
        self.start = self.pos;
        self.start_line = self.line;
        item
    }

    fn emit(&mut self, typ: ItemType) -> Option<State> {
        let item = self.this_item(typ);
        self.item = Some(item);
        None
    }

    fn ignore(&mut self) {
        self.line += self.input[self.start..self.pos].matches('\n').count();
        self.start = self.pos;
        self.start_line = self.line;
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.next() {
            Some(c) if valid.contains(c) => true,
            Some(_) => {
                self.backup();
                false
            }
            None => false,
        }
    }

    fn accept_run(&mut self, valid: &str) {
        loop {
            match self.next() {
                Some(c) if valid.contains(c) => {}
                Some(_) => {
                    self.backup();
                    return;
                }
                None => return,
            }
        }
    }

    fn errorf(&mut self, msg: String) -> Option<State> {
        self.item = Some(Item {
            typ: ItemType::Error,
            pos: self.start,
            val: msg,
            line: self.start_line,
        });
        self.done = true;
        None
    }

    /// The next token; after an error or EOF it keeps returning EOF.
    pub(crate) fn next_item(&mut self) -> Item {
        if self.done {
            return Item {
                typ: ItemType::Eof,
                pos: self.pos,
                val: "EOF".into(),
                line: self.start_line,
            };
        }
        self.item = Some(Item {
            typ: ItemType::Eof,
            pos: self.pos,
            val: "EOF".into(),
            line: self.start_line,
        });
        let mut state = if self.inside_action {
            State::InsideAction
        } else {
            State::Text
        };
        loop {
            let next = match state {
                State::Text => self.lex_text(),
                State::LeftDelim => self.lex_left_delim(),
                State::Comment => self.lex_comment(),
                State::RightDelim => self.lex_right_delim(),
                State::InsideAction => self.lex_inside_action(),
                State::Space => self.lex_space(),
                State::Identifier => self.lex_identifier(),
                State::Field => self.lex_field_or_variable(ItemType::Field),
                State::Variable => self.lex_variable(),
                State::Char => self.lex_quoted(
                    '\'',
                    ItemType::CharConstant,
                    "unterminated character constant",
                ),
                State::Number => self.lex_number(),
                State::Quote => {
                    self.lex_quoted('"', ItemType::String, "unterminated quoted string")
                }
                State::RawQuote => self.lex_raw_quote(),
            };
            match next {
                Some(s) => state = s,
                None => {
                    let item = self.item.take().unwrap_or(Item {
                        typ: ItemType::Eof,
                        pos: self.pos,
                        val: "EOF".into(),
                        line: self.start_line,
                    });
                    if item.typ == ItemType::Eof {
                        self.done = true;
                    }
                    return item;
                }
            }
        }
    }

    fn lex_text(&mut self) -> Option<State> {
        if let Some(x) = self.input[self.pos..].find(LEFT_DELIM) {
            if x > 0 {
                self.pos += x;
                let mut trim = 0;
                let delim_end = self.pos + LEFT_DELIM.len();
                if has_left_trim_marker(&self.input[delim_end..]) {
                    let text = &self.input[self.start..self.pos];
                    trim = text.len() - text.trim_end_matches(SPACE_CHARS).len();
                }
                self.pos -= trim;
                self.line += self.input[self.start..self.pos].matches('\n').count();
                let item = self.this_item(ItemType::Text);
                self.pos += trim;
                self.ignore();
                if !item.val.is_empty() {
                    self.item = Some(item);
                    return None;
                }
            }
            return Some(State::LeftDelim);
        }
        self.pos = self.input.len();
        if self.pos > self.start {
            self.line += self.input[self.start..self.pos].matches('\n').count();
            return self.emit(ItemType::Text);
        }
        self.emit(ItemType::Eof)
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let rest = &self.input[self.pos..];
        if has_right_trim_marker(rest) && rest[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM) {
            return (true, true);
        }
        if rest.starts_with(RIGHT_DELIM) {
            return (true, false);
        }
        (false, false)
    }

    fn lex_left_delim(&mut self) -> Option<State> {
        self.pos += LEFT_DELIM.len();
        let trim = has_left_trim_marker(&self.input[self.pos..]);
        let after_marker = if trim { TRIM_MARKER_LEN } else { 0 };
        if self.input[self.pos + after_marker..].starts_with(LEFT_COMMENT) {
            self.pos += after_marker;
            self.ignore();
            return Some(State::Comment);
        }
        let item = self.this_item(ItemType::LeftDelim);
        self.inside_action = true;
        self.pos += after_marker;
        self.ignore();
        self.paren_depth = 0;
        self.item = Some(item);
        None
    }

    fn lex_comment(&mut self) -> Option<State> {
        self.pos += LEFT_COMMENT.len();
        let Some(x) = self.input[self.pos..].find(RIGHT_COMMENT) else {
            return self.errorf("unclosed comment".into());
        };
        self.pos += x + RIGHT_COMMENT.len();
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.errorf("comment ends before closing delimiter".into());
        }
        self.line += self.input[self.start..self.pos].matches('\n').count();
        let _comment = self.this_item(ItemType::Comment);
        if trim {
            self.pos += TRIM_MARKER_LEN;
        }
        self.pos += RIGHT_DELIM.len();
        if trim {
            let rest = &self.input[self.pos..];
            self.pos += rest.len() - rest.trim_start_matches(SPACE_CHARS).len();
        }
        self.ignore();
        Some(State::Text)
    }

    fn lex_right_delim(&mut self) -> Option<State> {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += TRIM_MARKER_LEN;
            self.ignore();
        }
        self.pos += RIGHT_DELIM.len();
        let item = self.this_item(ItemType::RightDelim);
        if trim {
            let rest = &self.input[self.pos..];
            self.pos += rest.len() - rest.trim_start_matches(SPACE_CHARS).len();
            self.ignore();
        }
        self.inside_action = false;
        self.item = Some(item);
        None
    }

    fn lex_inside_action(&mut self) -> Option<State> {
        let (delim, _) = self.at_right_delim();
        if delim {
            if self.paren_depth == 0 {
                return Some(State::RightDelim);
            }
            return self.errorf("unclosed left paren".into());
        }
        match self.next() {
            None => self.errorf("unclosed action".into()),
            Some(c) if is_space(c) => {
                self.backup();
                Some(State::Space)
            }
            Some('=') => self.emit(ItemType::Assign),
            Some(':') => {
                if self.next() != Some('=') {
                    return self.errorf("expected :=".into());
                }
                self.emit(ItemType::Declare)
            }
            Some('|') => self.emit(ItemType::Pipe),
            Some('"') => Some(State::Quote),
            Some('`') => Some(State::RawQuote),
            Some('$') => Some(State::Variable),
            Some('\'') => Some(State::Char),
            Some('.') => {
                // ".field", unless a digit follows and it is a number.
                match self.input.as_bytes().get(self.pos) {
                    Some(b) if !b.is_ascii_digit() => Some(State::Field),
                    _ => {
                        self.backup();
                        Some(State::Number)
                    }
                }
            }
            Some(c) if c == '+' || c == '-' || c.is_ascii_digit() => {
                self.backup();
                Some(State::Number)
            }
            Some(c) if is_alphanumeric(c) => {
                self.backup();
                Some(State::Identifier)
            }
            Some('(') => {
                self.paren_depth += 1;
                self.emit(ItemType::LeftParen)
            }
            Some(')') => {
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    return self.errorf("unexpected right paren".into());
                }
                self.emit(ItemType::RightParen)
            }
            Some(c) if c.is_ascii() && !c.is_ascii_control() => self.emit(ItemType::Char),
            Some(c) => self.errorf(format!(
                "unrecognized character in action: {}",
                crate::golang::quote::rune_u_sharp(c)
            )),
        }
    }

    fn lex_space(&mut self) -> Option<State> {
        let mut num_spaces = 0;
        while let Some(c) = self.peek() {
            if !is_space(c) {
                break;
            }
            self.next();
            num_spaces += 1;
        }
        let rest = &self.input[self.pos - 1..];
        if has_right_trim_marker(rest) && rest[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM) {
            self.backup();
            if num_spaces == 1 {
                return Some(State::RightDelim);
            }
        }
        self.emit(ItemType::Space)
    }

    fn lex_identifier(&mut self) -> Option<State> {
        loop {
            match self.next() {
                Some(c) if is_alphanumeric(c) => {}
                r => {
                    if r.is_some() {
                        self.backup();
                    }
                    let word = self.input[self.start..self.pos].to_string();
                    if !self.at_terminator() {
                        return self.bad_character();
                    }
                    if let Some(k) = keyword(&word) {
                        return self.emit(k);
                    }
                    if word.starts_with('.') {
                        return self.emit(ItemType::Field);
                    }
                    if word == "true" || word == "false" {
                        return self.emit(ItemType::Bool);
                    }
                    return self.emit(ItemType::Identifier);
                }
            }
        }
    }

    fn lex_variable(&mut self) -> Option<State> {
        if self.at_terminator() {
            return self.emit(ItemType::Variable);
        }
        self.lex_field_or_variable(ItemType::Variable)
    }

    fn lex_field_or_variable(&mut self, typ: ItemType) -> Option<State> {
        if self.at_terminator() {
            return self.emit(if typ == ItemType::Variable {
                ItemType::Variable
            } else {
                ItemType::Dot
            });
        }
        loop {
            match self.next() {
                Some(c) if is_alphanumeric(c) => {}
                r => {
                    if r.is_some() {
                        self.backup();
                    }
                    break;
                }
            }
        }
        if !self.at_terminator() {
            return self.bad_character();
        }
        self.emit(typ)
    }

    fn at_terminator(&mut self) -> bool {
        match self.peek() {
            None => true,
            Some(c) if is_space(c) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            Some(_) => self.input[self.pos..].starts_with(RIGHT_DELIM),
        }
    }

    /// Scans to the closing `quote` of a character constant or quoted string, honouring
    /// backslash escapes; neither may span lines.
    fn lex_quoted(&mut self, quote: char, typ: ItemType, unterminated: &str) -> Option<State> {
        loop {
            match self.next() {
                Some('\\') => match self.next() {
                    Some(c) if c != '\n' => {}
                    _ => return self.errorf(unterminated.into()),
                },
                None | Some('\n') => return self.errorf(unterminated.into()),
                Some(c) if c == quote => break,
                _ => {}
            }
        }
        self.emit(typ)
    }

    fn bad_number(&mut self) -> Option<State> {
        let text = self.input[self.start..self.pos].to_string();
        self.errorf(format!(
            "bad number syntax: {}",
            crate::golang::quote::quote(&text)
        ))
    }

    fn bad_character(&mut self) -> Option<State> {
        let bad = self.peek().unwrap_or('\u{FFFD}');
        self.errorf(format!(
            "bad character {}",
            crate::golang::quote::rune_u_sharp(bad)
        ))
    }

    fn lex_number(&mut self) -> Option<State> {
        if !self.scan_number() {
            return self.bad_number();
        }
        if let Some('+' | '-') = self.peek() {
            if !self.scan_number() || !self.input[..self.pos].ends_with('i') {
                return self.bad_number();
            }
            return self.emit(ItemType::Complex);
        }
        self.emit(ItemType::Number)
    }

    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if let Some(c) = self.peek() {
            if is_alphanumeric(c) {
                self.next();
                return false;
            }
        }
        true
    }

    fn lex_raw_quote(&mut self) -> Option<State> {
        loop {
            match self.next() {
                None => return self.errorf("unterminated raw quoted string".into()),
                Some('`') => break,
                _ => {}
            }
        }
        self.emit(ItemType::RawString)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(s: &str) -> Vec<ItemType> {
        let mut l = Lexer::new(s);
        let mut out = Vec::new();
        loop {
            let item = l.next_item();
            out.push(item.typ);
            if matches!(item.typ, ItemType::Eof | ItemType::Error) {
                return out;
            }
        }
    }

    #[test]
    fn lexes_actions_and_trim_markers() {
        use ItemType::*;
        assert_eq!(
            types("a {{- .x.y -}} b"),
            vec![Text, LeftDelim, Field, Field, RightDelim, Text, Eof]
        );
        assert_eq!(
            types(r#"{{index .m "k"}}"#),
            vec![LeftDelim, Identifier, Space, Field, Space, String, RightDelim, Eof]
        );
        assert_eq!(types("{{/* c */}}x"), vec![Text, Eof]);
        assert_eq!(types("{{.a"), vec![LeftDelim, Field, Error]);
    }

    #[test]
    fn trims_spaces_around_markers() {
        let mut l = Lexer::new("a  \n{{- 1 -}}\n  b");
        assert_eq!(l.next_item().val, "a");
        assert_eq!(l.next_item().typ, ItemType::LeftDelim);
        assert_eq!(l.next_item().val, "1");
        assert_eq!(l.next_item().typ, ItemType::RightDelim);
        assert_eq!(l.next_item().val, "b");
    }
}
