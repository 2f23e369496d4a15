//! Kubernetes' JSONPath template dialect, as `kubectl -o jsonpath=` runs it (client-go
//! `util/jsonpath` with missing keys allowed): parse once, then execute over an object.

mod eval;
mod parse;

pub(crate) use eval::JVal;

use crate::golang::fmt::{sprint_sharp_v, Arg};
use crate::golang::{Data, NumberMode};
use crate::PrintError;

/// A parsed JSONPath template such as `{range .items[*]}{.metadata.name}{"\n"}{end}`.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    template: String,
    nodes: Vec<parse::Node>,
    allow_missing_keys: bool,
}

impl JsonPath {
    /// Parses a template; the error reads like kubectl's
    /// `error parsing jsonpath {.a, unclosed action`.
    pub fn parse(template: &str) -> Result<Self, PrintError> {
        let nodes = parse::parse(template).map_err(|reason| PrintError::JsonPathParse {
            template: template.to_string(),
            reason,
        })?;
        Ok(JsonPath {
            template: template.to_string(),
            nodes,
            allow_missing_keys: true,
        })
    }

    /// `--allow-missing-template-keys=false`: a field found nowhere is an error
    /// (`X is not found`).
    pub fn allow_missing_keys(mut self, allow: bool) -> Self {
        self.allow_missing_keys = allow;
        self
    }

    /// The template text as given.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Renders the template over one object (a Pod, or the List `podlab get` builds), exactly
    /// as `kubectl -o jsonpath=` prints it (no newline is added).
    pub fn execute(&self, object: &serde_json::Value) -> Result<String, PrintError> {
        self.render(object, false)
    }

    /// `-o jsonpath-as-json=`: every action's results as an indented JSON array.
    pub fn execute_as_json(&self, object: &serde_json::Value) -> Result<String, PrintError> {
        self.render(object, true)
    }

    fn render(&self, object: &serde_json::Value, as_json: bool) -> Result<String, PrintError> {
        let data = Data::from_json(object, NumberMode::Unstructured);
        let results = self
            .find_results(&data)
            .map_err(|reason| PrintError::JsonPathExec {
                template: self.template.clone(),
                reason,
                object: sprint_sharp_v(&Arg::from_data(&data)),
            })?;
        let mut out = String::new();
        for list in &results {
            if as_json {
                eval::print_results_json(&mut out, list);
            } else {
                eval::print_results(&mut out, list);
            }
        }
        Ok(out)
    }

    /// The values each node yields (for custom columns and sort-by).
    pub(crate) fn find_results<'a>(&self, data: &'a Data) -> Result<Vec<Vec<JVal<'a>>>, String> {
        eval::Exec::new(&self.nodes, self.allow_missing_keys).find_results(JVal::Data(data), 0)
    }
}

/// kubectl's `RelaxedJSONPathExpression`: accepts `metadata.name`, `.metadata.name`,
/// `{metadata.name}` and `{.metadata.name}` and returns the complete `{.metadata.name}`.
pub fn relaxed_expression(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Ok(String::new());
    }
    // ^\{\.?([^{}]+)\}$|^\.?([^{}]+)$
    let no_braces = |s: &str| !s.is_empty() && !s.contains(['{', '}']);
    if let Some(inner) = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
        let field = inner.strip_prefix('.').unwrap_or(inner);
        if no_braces(field) {
            return Ok(format!("{{.{field}}}"));
        }
    }
    let field = path.strip_prefix('.').unwrap_or(path);
    if no_braces(field) {
        return Ok(format!("{{.{field}}}"));
    }
    Err("unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(t: &str, v: &serde_json::Value) -> String {
        JsonPath::parse(t).unwrap().execute(v).unwrap()
    }

    #[test]
    fn basic_paths() {
        let pod = json!({"kind": "Pod", "metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"containers": [{"name": "c1", "command": ["sh"]}, {"name": "c2"}]}});
        assert_eq!(run("{.metadata.name}", &pod), "a");
        assert_eq!(run("{.spec.containers[*].name}", &pod), "c1 c2");
        assert_eq!(run("{.spec.containers[-1].name}", &pod), "c2");
        assert_eq!(run("{.metadata.labels}", &pod), r#"{"x":"1"}"#);
        assert_eq!(run("{.nope}x{.metadata.nope}y", &pod), "xy");
        assert_eq!(
            run("{range .spec.containers[*]}[{.name}]{end}", &pod),
            "[c1][c2]"
        );
        assert_eq!(
            run(r#"{.spec.containers[?(@.name=="c2")].name}"#, &pod),
            "c2"
        );
        assert_eq!(run("{.spec.containers[?(@.command)].name}", &pod), "c1");
        assert_eq!(run("{$.kind} {@.kind}", &pod), "Pod Pod");
        assert_eq!(run("{['kind','kind']}", &pod), "Pod Pod");
    }

    #[test]
    fn exec_errors_carry_the_go_dump() {
        let pod = json!({"a": [1]});
        let err = JsonPath::parse("{.a[5]}")
            .unwrap()
            .execute(&pod)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "error executing jsonpath \"{.a[5]}\": Error executing template: array index out of bounds: index 5, length 1. Printing more information for debugging the template:\n\ttemplate was:\n\t\t{.a[5]}\n\tobject given to jsonpath engine was:\n\t\tmap[string]interface {}{\"a\":[]interface {}{1}}\n\n\n"
        );
    }

    /// An index at the ends of Go's int (`{.a[9223372036854775807]}`, `[-9223372036854775808]`)
    /// overflowed the derived end index (`start + 1`) and panicked; client-go's ints wrap, so
    /// kubectl answers these with its out-of-bounds errors, and so does podlab.
    #[test]
    fn slice_indices_at_the_ends_of_int64_give_kubectls_errors_not_a_panic() {
        let pod = json!({"a": [1, 2]});
        let reason = |t: &str| match JsonPath::parse(t).unwrap().execute(&pod) {
            Ok(out) => format!("ok: {out}"),
            Err(PrintError::JsonPathExec { reason, .. }) => reason,
            Err(other) => panic!("{t}: {other}"),
        };
        let max = i64::MAX;
        let min = i64::MIN;
        assert_eq!(
            reason(&format!("{{.a[{max}]}}")),
            format!("array index out of bounds: index {max}, length 2")
        );
        assert_eq!(
            reason(&format!("{{.a[{min}]}}")),
            format!("array index out of bounds: index {}, length 2", min + 2)
        );
        assert_eq!(
            reason(&format!("{{.a[0:{max}:{max}]}}")),
            format!("array index out of bounds: index {}, length 2", max - 1)
        );
        assert_eq!(
            reason(&format!("{{.a[0:{min}]}}")),
            format!("array index out of bounds: index {}, length 2", min + 1)
        );
        assert_eq!(
            reason(&format!("{{.a[{min}:{max}]}}")),
            format!("array index out of bounds: index {}, length 2", min + 2)
        );
        assert_eq!(reason(&format!("{{.a[0:2:{max}]}}")), "ok: 1");
        assert_eq!(reason(&format!("{{.a[{max}:{max}]}}")), "ok: ");
        assert!(JsonPath::parse("{.a[9223372036854775808]}").is_err());
    }

    #[test]
    fn relaxed_expressions() {
        assert_eq!(
            relaxed_expression("metadata.name").unwrap(),
            "{.metadata.name}"
        );
        assert_eq!(
            relaxed_expression(".metadata.name").unwrap(),
            "{.metadata.name}"
        );
        assert_eq!(
            relaxed_expression("{metadata.name}").unwrap(),
            "{.metadata.name}"
        );
        assert_eq!(
            relaxed_expression("{.metadata.name}").unwrap(),
            "{.metadata.name}"
        );
        assert!(relaxed_expression("{.a}{.b}").is_err());
    }
}
