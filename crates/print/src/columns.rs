//! `-o custom-columns=NAME:.metadata.name,IP:.status.podIP` and `-o custom-columns-file=`:
//! kubectl's CustomColumnsPrinter. Each column is a header and a relaxed JSONPath; a cell shows
//! every value the path finds (Go's `%v`, joined by commas) or `<none>`; the table is aligned
//! like every kubectl table.

use crate::golang::fmt::sprint_v;
use crate::golang::{tabwriter, Data, NumberMode};
use crate::jsonpath::{relaxed_expression, JsonPath};
use crate::PrintError;

/// One column: its header as written, and the complete JSONPath (`{.metadata.name}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub header: String,
    pub field_spec: String,
}

/// A parsed custom-columns spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomColumns {
    pub columns: Vec<Column>,
}

impl CustomColumns {
    /// Parses `HEADER:path,HEADER:path` (the value of `-o custom-columns=`).
    pub fn parse_spec(spec: &str) -> Result<Self, PrintError> {
        if spec.is_empty() {
            return Err(PrintError::CustomColumns(
                "custom-columns format specified but no custom columns given".into(),
            ));
        }
        let mut columns = Vec::new();
        for part in spec.split(',') {
            let Some((header, path)) = part.split_once(':') else {
                return Err(PrintError::CustomColumns(format!(
                    "unexpected custom-columns spec: {part}, expected <header>:<json-path-expr>"
                )));
            };
            columns.push(Column {
                header: header.to_string(),
                field_spec: relaxed_expression(path).map_err(PrintError::CustomColumns)?,
            });
        }
        Ok(CustomColumns { columns })
    }

    /// Parses a custom-columns file: a line of headers and a line of paths, split on white space.
    pub fn parse_template(text: &str) -> Result<Self, PrintError> {
        let mut lines = text.lines();
        let Some(headers) = lines.next() else {
            return Err(PrintError::CustomColumns("invalid template, missing header line. Expected format is one line of space separated headers, one line of space separated column specs.".into()));
        };
        let Some(specs) = lines.next() else {
            return Err(PrintError::CustomColumns("invalid template, missing spec line. Expected format is one line of space separated headers, one line of space separated column specs.".into()));
        };
        let headers: Vec<&str> = headers.split_whitespace().collect();
        let specs: Vec<&str> = specs.split_whitespace().collect();
        if headers.len() != specs.len() {
            return Err(PrintError::CustomColumns(format!(
                "number of headers ({}) and field specifications ({}) don't match",
                headers.len(),
                specs.len()
            )));
        }
        let columns = headers
            .iter()
            .zip(&specs)
            .map(|(h, s)| {
                Ok(Column {
                    header: h.to_string(),
                    field_spec: relaxed_expression(s).map_err(PrintError::CustomColumns)?,
                })
            })
            .collect::<Result<_, PrintError>>()?;
        Ok(CustomColumns { columns })
    }

    /// Renders the objects (a List is expanded into its items) into `out`. On an error what
    /// kubectl would already have printed (the header, earlier rows) is in `out`.
    pub fn render_into(
        &self,
        objects: &[serde_json::Value],
        no_headers: bool,
        out: &mut String,
    ) -> Result<(), PrintError> {
        let mut text = String::new();
        let result = self.write_rows(objects, no_headers, &mut text);
        out.push_str(&tabwriter::align(&text));
        result
    }

    fn write_rows(
        &self,
        objects: &[serde_json::Value],
        no_headers: bool,
        text: &mut String,
    ) -> Result<(), PrintError> {
        let mut header_done = no_headers;
        for object in objects {
            if !header_done {
                let headers: Vec<&str> = self.columns.iter().map(|c| c.header.as_str()).collect();
                text.push_str(&headers.join("\t"));
                text.push('\n');
                header_done = true;
            }
            let parsers = self
                .columns
                .iter()
                .map(|c| {
                    JsonPath::parse(&c.field_spec).map_err(|e| match e {
                        PrintError::JsonPathParse { reason, .. } => {
                            PrintError::CustomColumns(reason)
                        }
                        other => other,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            match object.get("items").and_then(|i| i.as_array()) {
                Some(items) if is_list(object) => {
                    for item in items {
                        write_row(&parsers, item, text)?;
                    }
                }
                _ => write_row(&parsers, object, text)?,
            }
        }
        Ok(())
    }
}

fn is_list(object: &serde_json::Value) -> bool {
    object.get("items").is_some()
}

fn write_row(
    parsers: &[JsonPath],
    object: &serde_json::Value,
    text: &mut String,
) -> Result<(), PrintError> {
    let data = Data::from_json(object, NumberMode::Unstructured);
    let mut cells = Vec::with_capacity(parsers.len());
    for parser in parsers {
        let results = parser
            .find_results(&data)
            .map_err(PrintError::CustomColumns)?;
        let mut values = Vec::new();
        if results.first().is_none_or(|r| r.is_empty()) {
            values.push("<none>".to_string());
        }
        for list in &results {
            for v in list {
                values.push(sprint_v(&v.as_arg()));
            }
        }
        cells.push(values.join(","));
    }
    text.push_str(&cells.join("\t"));
    text.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spec_errors_match_kubectl() {
        assert_eq!(
            CustomColumns::parse_spec("NAME").unwrap_err().to_string(),
            "unexpected custom-columns spec: NAME, expected <header>:<json-path-expr>"
        );
        assert_eq!(
            CustomColumns::parse_spec("").unwrap_err().to_string(),
            "custom-columns format specified but no custom columns given"
        );
    }

    #[test]
    fn renders_values_and_none() {
        let cc = CustomColumns::parse_spec(
            "NAME:.metadata.name,C:.spec.containers[*].name,IP:.status.podIP",
        )
        .unwrap();
        let pod = json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "x"}, {"name": "y"}]}});
        let mut out = String::new();
        cc.render_into(&[pod], false, &mut out).unwrap();
        assert_eq!(out, "NAME   C     IP\na      x,y   <none>\n");
    }

    #[test]
    fn template_files_split_on_white_space() {
        let cc =
            CustomColumns::parse_template("NAME   IP\n.metadata.name  {.status.podIP}\n").unwrap();
        assert_eq!(cc.columns[1].field_spec, "{.status.podIP}");
    }
}
