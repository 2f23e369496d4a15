//! kubectl's human-readable tables: upper-case headers, columns aligned by kubectl's tab writer
//! (three spaces between columns), optional NAMESPACE first column (`-A`), label columns (`-L`)
//! and a LABELS column (`--show-labels`, `a=b,c=d` or `<none>`). Which columns a kind has, and
//! whether `-o wide` adds some, is the caller's business.

use std::collections::BTreeMap;

use crate::golang::tabwriter;

/// One row: its cells, and the object's namespace and labels for the optional columns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub cells: Vec<String>,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

impl Row {
    pub fn new<I, S>(cells: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Row {
            cells: cells.into_iter().map(Into::into).collect(),
            ..Row::default()
        }
    }

    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    pub fn labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    /// Takes namespace and labels from a Kubernetes object's `metadata`.
    pub fn metadata_of(self, object: &serde_json::Value) -> Self {
        let ns = object
            .pointer("/metadata/namespace")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        self.namespace(ns).labels(labels_of(object))
    }
}

/// The options of kubectl's table printer that add columns or drop the header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableOptions {
    /// `--no-headers`.
    pub no_headers: bool,
    /// `-A` / `--all-namespaces`: a NAMESPACE column first.
    pub with_namespace: bool,
    /// `--show-labels`: a LABELS column last.
    pub show_labels: bool,
    /// `-L key1,key2`: one column per label key, headed by the key's last path segment.
    pub label_columns: Vec<String>,
}

/// A table being built: headers (any case; printed upper-case) and rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Row>,
}

impl Table {
    pub fn new<I, S>(headers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The aligned table, each line ending in a newline.
    pub fn render(&self, options: &TableOptions) -> String {
        let mut text = String::new();
        if !options.no_headers {
            let mut headers = Vec::new();
            if options.with_namespace {
                headers.push("NAMESPACE".to_string());
            }
            headers.extend(self.headers.iter().map(|h| h.to_uppercase()));
            for key in &options.label_columns {
                let short = key.rsplit('/').next().unwrap_or(key);
                headers.push(short.to_uppercase());
            }
            if options.show_labels {
                headers.push("LABELS".into());
            }
            text.push_str(&headers.join("\t"));
            text.push('\n');
        }
        for row in &self.rows {
            let mut cells: Vec<&str> = Vec::new();
            if options.with_namespace {
                cells.push(&row.namespace);
            }
            cells.extend(row.cells.iter().map(String::as_str));
            for key in &options.label_columns {
                cells.push(row.labels.get(key).map(String::as_str).unwrap_or(""));
            }
            let formatted;
            if options.show_labels {
                formatted = format_labels(&row.labels);
                cells.push(&formatted);
            }
            text.push_str(&cells.join("\t"));
            text.push('\n');
        }
        tabwriter::align(&text)
    }
}

/// `labels.FormatLabels`: `a=b,c=d` in key order, or `<none>`.
pub fn format_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "<none>".into();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `metadata.labels` of an object as a map (non-string values are skipped).
pub fn labels_of(object: &serde_json::Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(|v| v.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn renders_like_kubectl() {
        let mut t = Table::new(["Name", "Ready", "Status"]);
        t.push(Row::new(["web-1", "1/1", "Running"]).labels(labels(&[("app", "web"), ("a", "b")])));
        t.push(Row::new(["db", "0/1", "Pending"]));
        assert_eq!(
            t.render(&TableOptions::default()),
            "NAME    READY   STATUS\nweb-1   1/1     Running\ndb      0/1     Pending\n"
        );
        assert_eq!(
            t.render(&TableOptions {
                no_headers: true,
                show_labels: true,
                ..Default::default()
            }),
            "web-1   1/1   Running   a=b,app=web\ndb      0/1   Pending   <none>\n"
        );
        let with_l = t.render(&TableOptions {
            label_columns: vec!["example.com/app".into(), "app".into()],
            with_namespace: true,
            ..Default::default()
        });
        assert!(with_l.starts_with("NAMESPACE   NAME    READY   STATUS    APP   APP\n"));
    }
}
