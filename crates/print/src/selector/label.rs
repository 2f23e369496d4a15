//! Label selectors: `app=web,tier in (frontend,edge),!canary` as apimachinery's `labels.Parse`
//! reads them (its lexer, recursive-descent parser, validation and error messages), and as
//! `metav1.LabelSelectorAsSelector` builds them from a `LabelSelector` object
//! (`matchLabels` + `matchExpressions`). All requirements must hold.

use std::collections::BTreeMap;
use std::fmt;

use super::validation::{
    aggregate, invalid, invalid_list, label_value_errors, qualified_name_errors,
};
use crate::PrintError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One requirement on one label key. `values` are sorted and distinct when parsed from the `-l`
/// syntax, and as given when built from a `LabelSelector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl Requirement {
    /// `labels.NewRequirement`: validates the key, the number of values and each value.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self, PrintError> {
        let mut errs = Vec::new();
        let key_errs = qualified_name_errors(key);
        if !key_errs.is_empty() {
            errs.push(invalid("key", key, &key_errs.join("; ")));
        }
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => errs.push(invalid_list(
                "values",
                &values,
                "for 'in', 'notin' operators, values set can't be empty",
            )),
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals
                if values.len() != 1 =>
            {
                errs.push(invalid_list(
                    "values",
                    &values,
                    "exact-match compatibility requires one single value",
                ))
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                errs.push(invalid_list(
                    "values",
                    &values,
                    "values set must be empty for exists and does not exist",
                ))
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(invalid(
                            &format!("values[{i}]"),
                            v,
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let problems = label_value_errors(v);
            if !problems.is_empty() {
                errs.push(invalid(
                    &format!("values[{i}][{key}]"),
                    v,
                    &problems.join("; "),
                ));
            }
        }
        match aggregate(&errs) {
            Some(msg) => Err(PrintError::LabelSelector(msg)),
            None => Ok(Requirement {
                key: key.to_string(),
                operator,
                values,
            }),
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let has = |v: &String| self.values.contains(v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => value.is_some_and(has),
            Operator::NotIn | Operator::NotEquals => !value.is_some_and(has),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(v), Some(r)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|r| r.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    v > r
                } else {
                    v < r
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// `Requirement.String()`: `!k`, `k`, `k=v`, `k in (a,b)` ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            write!(f, "!")?;
        }
        write!(f, "{}", self.key)?;
        let op = match self.operator {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
        };
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        write!(f, "{op}")?;
        if set {
            write!(f, "(")?;
        }
        let mut values = self.values.clone();
        values.sort();
        write!(f, "{}", values.join(","))?;
        if set {
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// A parsed label selector. `nothing` is the selector of an absent `LabelSelector`, which
/// matches no object; an empty one matches every object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// Matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Matches nothing (what a missing `spec.selector` means).
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// `labels.Parse`: the `-l` syntax. Errors read like apimachinery's
    /// (`unable to parse requirement: found '', expected: ',' or ')'`).
    pub fn parse(selector: &str) -> Result<Self, PrintError> {
        let mut p = Parser {
            items: lex(selector),
            position: 0,
        };
        let requirements = p.parse().map_err(PrintError::LabelSelector)?;
        Ok(Self::from_requirements(requirements))
    }

    fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        crate::golang::sort::sort(&mut requirements, |a, b| a.key < b.key);
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// `metav1.LabelSelectorAsSelector` on a `LabelSelector` JSON object
    /// (`{"matchLabels": {...}, "matchExpressions": [{"key", "operator", "values"}]}`);
    /// `null` selects nothing, `{}` everything.
    pub fn from_k8s(selector: &serde_json::Value) -> Result<Self, PrintError> {
        if selector.is_null() {
            return Ok(Self::nothing());
        }
        let match_labels = selector.get("matchLabels").and_then(|m| m.as_object());
        let expressions = selector
            .get("matchExpressions")
            .and_then(|m| m.as_array())
            .map(Vec::as_slice)
            .unwrap_or_default();
        if match_labels.is_none_or(|m| m.is_empty()) && expressions.is_empty() {
            return Ok(Self::everything());
        }
        let mut requirements = Vec::new();
        for (k, v) in match_labels.into_iter().flatten() {
            let value = v.as_str().unwrap_or_default().to_string();
            requirements.push(Requirement::new(k, Operator::Equals, vec![value])?);
        }
        for expr in expressions {
            let key = expr.get("key").and_then(|k| k.as_str()).unwrap_or_default();
            let op_name = expr
                .get("operator")
                .and_then(|k| k.as_str())
                .unwrap_or_default();
            let operator = match op_name {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(PrintError::LabelSelector(format!(
                        "{} is not a valid label selector operator",
                        crate::golang::quote::quote(other)
                    )))
                }
            };
            let values: Vec<String> = expr
                .get("values")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            requirements.push(Requirement::new(key, operator, values)?);
        }
        Ok(Self::from_requirements(requirements))
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when the selector does not restrict anything.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_object(&self, object: &serde_json::Value) -> bool {
        self.matches(&crate::table::labels_of(object))
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.requirements.iter().map(|r| r.to_string()).collect();
        write!(f, "{}", parts.join(","))
    }
}

// The lexer.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn lex(s: &str) -> Vec<(Token, String)> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut items = Vec::new();
    loop {
        while pos < b.len() && is_whitespace(b[pos]) {
            pos += 1;
        }
        if pos >= b.len() {
            items.push((Token::EndOfString, String::new()));
            return items;
        }
        if is_special(b[pos]) {
            let start = pos;
            let mut last: Option<(Token, usize)> = None;
            while pos < b.len() && is_special(b[pos]) {
                let candidate = &s[start..pos + 1];
                if let Some(t) = keyword(candidate) {
                    last = Some((t, pos + 1));
                    pos += 1;
                } else if last.is_some() {
                    break;
                } else {
                    pos += 1;
                }
            }
            match last {
                Some((t, end)) => {
                    pos = end;
                    items.push((t, s[start..end].to_string()));
                }
                None => items.push((
                    Token::Error,
                    format!("error expected: keyword found '{}'", &s[start..pos]),
                )),
            }
        } else {
            let start = pos;
            while pos < b.len() && !is_special(b[pos]) && !is_whitespace(b[pos]) {
                pos += 1;
            }
            let word = &s[start..pos];
            let token = keyword(word).unwrap_or(Token::Identifier);
            items.push((token, word.to_string()));
        }
    }
}

// The parser.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn lookahead(&self, context: Context) -> (Token, String) {
        let (mut tok, lit) = self.items[self.position.min(self.items.len() - 1)].clone();
        if context == Context::Values && matches!(tok, Token::In | Token::NotIn) {
            tok = Token::Identifier;
        }
        (tok, lit)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let r = self.lookahead(context);
        self.position += 1;
        r
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return Requirement::new(&key, op, Vec::new()).map_err(|e| e.to_string());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, operator, values).map_err(|e| e.to_string())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut tok, mut literal) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, literal) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let problems = qualified_name_errors(&literal);
        if !problems.is_empty() {
            return Err(invalid("<nil>", &literal, &problems.join("; ")));
        }
        let (t, _) = self.lookahead(Context::Values);
        if (t == Token::EndOfString || t == Token::Comma)
            && operator != Some(Operator::DoesNotExist)
        {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ))
            }
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut set = std::collections::BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.insert(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set.into_iter().collect()),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set.into_iter().collect());
                    }
                    if tok2 == Token::Comma {
                        self.consume(Context::Values);
                        set.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(vec![lit]);
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn err(s: &str) -> String {
        LabelSelector::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn parses_and_matches() {
        let web = labels(&[
            ("app", "web"),
            ("tier", "frontend"),
            ("paas.sogou.com/app", "shop"),
        ]);
        let db = labels(&[("app", "db"), ("tier", "backend")]);
        let none = labels(&[]);
        let m = |s: &str, l: &BTreeMap<String, String>| LabelSelector::parse(s).unwrap().matches(l);
        assert!(m("app=web", &web) && !m("app=web", &db));
        assert!(m("app==web", &web));
        assert!(m("app!=web", &db) && m("app!=web", &none) && !m("app!=web", &web));
        assert!(m("tier in (frontend,edge)", &web) && !m("tier in (frontend,edge)", &db));
        assert!(m("tier notin (frontend)", &db) && m("tier notin (frontend)", &none));
        assert!(m("paas.sogou.com/app", &web) && !m("paas.sogou.com/app", &db));
        assert!(m("!paas.sogou.com/app", &db) && !m("!paas.sogou.com/app", &web));
        assert!(m("app=web,tier=frontend", &web) && !m("app=web,tier=backend", &web));
        assert!(m("", &none));
        assert!(m(
            "x in (foo,,baz),app",
            &labels(&[("x", ""), ("app", "a")])
        ));
        assert_eq!(
            LabelSelector::parse("tier in (b,a),app=web,!x")
                .unwrap()
                .to_string(),
            "app=web,tier in (a,b),!x"
        );
    }

    #[test]
    fn errors_read_like_apimachinery() {
        assert_eq!(
            err("a in (b"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            err("bad key"),
            "unable to parse requirement: found 'key', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(err("a=b=c"), "found '=', expected: ',' or 'end of string'");
        assert_eq!(err("a,"), "found '', expected: identifier after ','");
        assert_eq!(
            err(",a"),
            "found ',', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            err("a=(b)"),
            "unable to parse requirement: found '(', expected: identifier"
        );
        assert_eq!(
            err("a notin"),
            "unable to parse requirement: found '' expected: '('"
        );
        assert_eq!(
            err("a=!b"),
            "unable to parse requirement: found '!', expected: identifier"
        );
        assert_eq!(
            err("Bad_/x=y"),
            "unable to parse requirement: <nil>: Invalid value: \"Bad_/x\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(
            err("a=-bad-"),
            "unable to parse requirement: values[0][a]: Invalid value: \"-bad-\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        assert_eq!(
            err(&format!("{}=b", "a".repeat(70))),
            format!("unable to parse requirement: <nil>: Invalid value: \"{}\": name part must be no more than 63 characters", "a".repeat(70))
        );
    }

    #[test]
    fn from_kubernetes_label_selectors() {
        let s = LabelSelector::from_k8s(&json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend", "edge"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]}))
        .unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "edge")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "edge"),
            ("canary", "1")
        ])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(LabelSelector::from_k8s(&json!({}))
            .unwrap()
            .matches(&labels(&[])));
        assert!(!LabelSelector::from_k8s(&json!(null))
            .unwrap()
            .matches(&labels(&[])));
        assert_eq!(
            LabelSelector::from_k8s(&json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}))
                .unwrap_err()
                .to_string(),
            "\"Gt\" is not a valid label selector operator"
        );
        assert_eq!(
            LabelSelector::from_k8s(&json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}))
                .unwrap_err()
                .to_string(),
            "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
        );
    }
}
