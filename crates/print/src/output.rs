//! `-o FORMAT` as kubectl takes it: parsing the flag value (including the `*-file=` forms, which
//! read the template from a file) and rendering one printed object, which is a single object for
//! `get KIND NAME` or the `List` kubectl wraps around several ([`kubectl_list`]).

use crate::columns::CustomColumns;
use crate::golang::{json, Data, NumberMode};
use crate::gotemplate::GoTemplate;
use crate::jsonpath::JsonPath;
use crate::yaml::to_yaml;
use crate::PrintError;

/// One `-o` value, parsed and ready to render.
#[derive(Debug, Clone)]
pub enum OutputFormat {
    /// No `-o`: the kind's table.
    Table,
    /// `-o wide`: the kind's table with its extra columns.
    Wide,
    Json,
    Yaml,
    /// `-o name`: `pod/NAME`, `replicaset.apps/NAME`.
    Name,
    JsonPath(JsonPath),
    /// `-o jsonpath-as-json=`.
    JsonPathAsJson(JsonPath),
    /// `-o go-template=` (also `template=`).
    GoTemplate(GoTemplate),
    CustomColumns(CustomColumns),
}

/// The formats kubectl get lists in its error message, in its order.
pub const ALLOWED_FORMATS: &str = "custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,jsonpath-as-json,jsonpath-file,name,template,templatefile,wide,yaml";

impl OutputFormat {
    /// Parses an `-o` value such as `json`, `jsonpath={.items[*].metadata.name}`,
    /// `go-template-file=tmpl.txt` or `custom-columns=NAME:.metadata.name`. An empty string is
    /// the default table.
    pub fn parse(spec: &str) -> Result<Self, PrintError> {
        let (name, value) = match spec.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (spec, None),
        };
        let template = |value: Option<&str>| -> Result<String, PrintError> {
            match value {
                Some(v) if !v.is_empty() => Ok(v.to_string()),
                _ => Err(PrintError::MissingTemplate),
            }
        };
        let file = |value: Option<&str>, what: &str| -> Result<String, PrintError> {
            let path = template(value)?;
            std::fs::read_to_string(&path).map_err(|e| PrintError::TemplateFile {
                what: what.to_string(),
                path: path.clone(),
                reason: go_open_error(&path, &e),
            })
        };
        Ok(match name {
            "" if value.is_none() => OutputFormat::Table,
            "wide" if value.is_none() => OutputFormat::Wide,
            "json" if value.is_none() => OutputFormat::Json,
            "yaml" if value.is_none() => OutputFormat::Yaml,
            "name" if value.is_none() => OutputFormat::Name,
            "jsonpath" => OutputFormat::JsonPath(JsonPath::parse(&template(value)?)?),
            "jsonpath-as-json" => OutputFormat::JsonPathAsJson(JsonPath::parse(&template(value)?)?),
            "jsonpath-file" => {
                OutputFormat::JsonPath(JsonPath::parse(&file(value, "--template")?)?)
            }
            "go-template" | "template" => {
                OutputFormat::GoTemplate(GoTemplate::parse(&template(value)?)?)
            }
            "go-template-file" | "templatefile" => {
                OutputFormat::GoTemplate(GoTemplate::parse(&file(value, "--template")?)?)
            }
            "custom-columns" => {
                OutputFormat::CustomColumns(CustomColumns::parse_spec(value.unwrap_or(""))?)
            }
            "custom-columns-file" => {
                let path = value.unwrap_or("");
                let text = std::fs::read_to_string(path).map_err(|e| PrintError::TemplateFile {
                    what: "template".into(),
                    path: path.to_string(),
                    reason: go_open_error(path, &e),
                })?;
                OutputFormat::CustomColumns(CustomColumns::parse_template(&text)?)
            }
            _ => {
                return Err(PrintError::UnknownFormat {
                    format: spec.to_string(),
                    allowed: ALLOWED_FORMATS.to_string(),
                })
            }
        })
    }

    /// Whether this is one of the table formats the caller prints with [`crate::Table`].
    pub fn is_table(&self) -> bool {
        matches!(self, OutputFormat::Table | OutputFormat::Wide)
    }

    /// `--allow-missing-template-keys` (default true) for the template formats.
    pub fn allow_missing_template_keys(self, allow: bool) -> Self {
        match self {
            OutputFormat::JsonPath(j) => OutputFormat::JsonPath(j.allow_missing_keys(allow)),
            OutputFormat::JsonPathAsJson(j) => {
                OutputFormat::JsonPathAsJson(j.allow_missing_keys(allow))
            }
            OutputFormat::GoTemplate(g) => OutputFormat::GoTemplate(g.allow_missing_keys(allow)),
            other => other,
        }
    }
}

/// Go's `os.Open` error text: `open PATH: no such file or directory`.
fn go_open_error(path: &str, e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    let lowered = match chars.next() {
        Some(c) => c.to_lowercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    };
    format!("open {path}: {lowered}")
}

/// The `List` kubectl prints when a command yields several objects (or when listing):
/// `{"apiVersion": "v1", "items": [...], "kind": "List", "metadata": {"resourceVersion": ""}}`.
pub fn kubectl_list(items: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "items": items,
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    })
}

fn is_list(object: &serde_json::Value) -> bool {
    object.get("items").is_some_and(|i| i.is_array())
}

/// `-o name` of one object: the lower-case kind, `.group` when it has one, `/`, the name.
pub fn resource_name(object: &serde_json::Value) -> Result<String, PrintError> {
    let kind = object.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let api_version = object
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    if kind.is_empty() || api_version.is_empty() {
        return Err(PrintError::Name(
            "missing apiVersion or kind; try GetObjectKind().SetGroupVersionKind() if you know the type".into(),
        ));
    }
    let name = object
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
        .unwrap_or("<unknown>");
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    let mut out = kind.to_lowercase();
    if !group.is_empty() {
        out.push('.');
        out.push_str(group);
    }
    out.push('/');
    out.push_str(name);
    Ok(out)
}

/// Renders one printed object (an object, or a [`kubectl_list`]) in a non-table format into
/// `out`, byte for byte as kubectl would print it on stdout. On an error, `out` holds what kubectl
/// would have printed before failing (custom-columns rows so far, a go-template's partial output
/// and debugging dump); the error is what it prints after `error: `.
pub fn render(
    format: &OutputFormat,
    object: &serde_json::Value,
    no_headers: bool,
    out: &mut String,
) -> Result<(), PrintError> {
    match format {
        OutputFormat::Table | OutputFormat::Wide => Err(PrintError::TableFormat),
        OutputFormat::Json => {
            let data = Data::from_json(object, NumberMode::Unstructured);
            out.push_str(&json::marshal_indent(&data, "    "));
            out.push('\n');
            Ok(())
        }
        OutputFormat::Yaml => {
            out.push_str(&to_yaml(object)?);
            Ok(())
        }
        OutputFormat::Name => {
            let items: Vec<&serde_json::Value> = if is_list(object) {
                object["items"].as_array().into_iter().flatten().collect()
            } else {
                vec![object]
            };
            for item in items {
                out.push_str(&resource_name(item)?);
                out.push('\n');
            }
            Ok(())
        }
        OutputFormat::JsonPath(j) => {
            out.push_str(&j.execute(object)?);
            Ok(())
        }
        OutputFormat::JsonPathAsJson(j) => {
            out.push_str(&j.execute_as_json(object)?);
            Ok(())
        }
        OutputFormat::GoTemplate(g) => g.execute_into(object, out),
        OutputFormat::CustomColumns(c) => {
            c.render_into(std::slice::from_ref(object), no_headers, out)
        }
    }
}

/// [`render`] into a new string; on error the partial output is dropped.
pub fn render_to_string(
    format: &OutputFormat,
    object: &serde_json::Value,
    no_headers: bool,
) -> Result<String, PrintError> {
    let mut out = String::new();
    render(format, object, no_headers, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_every_form() {
        assert!(matches!(
            OutputFormat::parse("").unwrap(),
            OutputFormat::Table
        ));
        assert!(matches!(
            OutputFormat::parse("wide").unwrap(),
            OutputFormat::Wide
        ));
        assert!(matches!(
            OutputFormat::parse("jsonpath={.a}").unwrap(),
            OutputFormat::JsonPath(_)
        ));
        assert!(matches!(
            OutputFormat::parse("template={{.a}}").unwrap(),
            OutputFormat::GoTemplate(_)
        ));
        assert_eq!(
            OutputFormat::parse("jsonpath").unwrap_err().to_string(),
            "template format specified but no template given"
        );
        assert_eq!(
            OutputFormat::parse("xyz").unwrap_err().to_string(),
            format!("unable to match a printer suitable for the output format \"xyz\", allowed formats are: {ALLOWED_FORMATS}")
        );
        assert_eq!(
            OutputFormat::parse("go-template-file=/nonexistent/t").unwrap_err().to_string(),
            "error reading --template /nonexistent/t, open /nonexistent/t: no such file or directory\n"
        );
    }

    #[test]
    fn names_and_lists() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}});
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r"}});
        let list = kubectl_list(vec![pod.clone(), rs]);
        let out = render_to_string(&OutputFormat::Name, &list, false).unwrap();
        assert_eq!(out, "pod/a\nreplicaset.apps/r\n");
        let empty = kubectl_list(Vec::new());
        let cc = OutputFormat::parse("custom-columns=NAME:.metadata.name").unwrap();
        assert_eq!(render_to_string(&cc, &empty, false).unwrap(), "NAME\n");
        assert_eq!(
            render_to_string(&OutputFormat::Name, &empty, false).unwrap(),
            ""
        );
        assert_eq!(
            render_to_string(&OutputFormat::Yaml, &empty, false).unwrap(),
            "apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: \"\"\n"
        );
        let out = render_to_string(&OutputFormat::Json, &pod, false).unwrap();
        assert_eq!(
            out,
            "{\n    \"apiVersion\": \"v1\",\n    \"kind\": \"Pod\",\n    \"metadata\": {\n        \"name\": \"a\"\n    }\n}\n"
        );
    }
}
