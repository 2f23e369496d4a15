//! `-o` formats and the query flags of `podlab get` (`-n`, `-A`, `-l`, `--field-selector`,
//! `--sort-by`, `--no-headers`, `--show-labels`), on podlab-print, which renders them byte for
//! byte as kubectl does.

use anyhow::{anyhow, Result};
use podlab_print::{
    FieldSelector, LabelSelector, OutputFormat, Row, SortBy, SortTarget, Table, TableOptions,
};
use serde_json::Value;

/// How `get` prints: kubectl's table (plain or wide), or any other `-o` format.
pub enum Format {
    Table,
    Wide,
    Other(OutputFormat),
}

impl Format {
    /// An `-o` value; a bad one is refused with kubectl's message.
    pub fn parse(spec: Option<&str>) -> Result<Format> {
        Ok(match spec {
            None | Some("") => Format::Table,
            Some("wide") => Format::Wide,
            Some(other) => Format::Other(
                OutputFormat::parse(other).map_err(|e| anyhow!("{}", e.to_string().trim_end()))?,
            ),
        })
    }

    pub fn is_table(&self) -> bool {
        matches!(self, Format::Table | Format::Wide)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Query {
    pub namespace: Option<String>,
    pub all_namespaces: bool,
    pub selector: Option<String>,
    pub field_selector: Option<String>,
    pub sort_by: Option<String>,
    pub no_headers: bool,
    pub show_labels: bool,
}

impl Query {
    /// The namespace to list: `-n NS`, `default` when none is given, every one with `-A`.
    pub fn namespace(&self) -> Option<&str> {
        if self.all_namespaces {
            None
        } else {
            Some(self.namespace.as_deref().unwrap_or("default"))
        }
    }

    /// The items of `kind` that pass `-l` and `--field-selector`; a malformed selector is
    /// refused before anything is listed.
    pub fn filter(&self, kind: &str, items: Vec<Value>) -> Result<Vec<Value>> {
        let labels = self
            .selector
            .as_deref()
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|e| anyhow!("{e}"))?;
        let fields = match self.field_selector.as_deref() {
            Some(text) => {
                let fields = FieldSelector::parse(text).map_err(|e| anyhow!("{e}"))?;
                fields
                    .validate_for(kind)
                    .map_err(|e| anyhow!("Unable to find {:?} that match label selector \"\", field selector {text:?}: {e}", plural(kind)))?;
                Some(fields)
            }
            None => None,
        };
        Ok(items
            .into_iter()
            .filter(|item| labels.as_ref().is_none_or(|l| l.matches_object(item)))
            .filter(|item| fields.as_ref().is_none_or(|f| f.matches(item)))
            .collect())
    }

    pub fn sort(&self, items: &mut [Value], table: bool) -> Result<()> {
        if let Some(path) = &self.sort_by {
            let target = if table {
                SortTarget::Table
            } else {
                SortTarget::Objects
            };
            SortBy::new(path)
                .sort(items, target)
                .map_err(|e| anyhow!("{e}"))?;
        }
        Ok(())
    }
}

fn plural(kind: &str) -> String {
    format!("{}s", kind.to_lowercase())
}

/// Renders `items` in a non-table format: the one object when one was named (`single`), else
/// a `List` of them, as kubectl applies templates. Partial output of a failing template is
/// printed before the error, as kubectl prints it.
pub fn render(format: &Format, items: &[Value], single: bool) -> Result<String> {
    let Format::Other(format) = format else {
        unreachable!("tables are printed by table()")
    };
    let subject = match (single, items) {
        (true, [one]) => one.clone(),
        _ => podlab_print::kubectl_list(items.to_vec()),
    };
    let mut out = String::new();
    match podlab_print::render(format, &subject, false, &mut out) {
        Ok(()) => Ok(out),
        Err(e) => {
            print!("{out}");
            Err(anyhow!("{}", e.to_string().trim_end()))
        }
    }
}

/// kubectl's column layout, with the NAMESPACE and LABELS columns of `-A` and `--show-labels`.
pub fn table(headers: &[&str], rows: Vec<(Vec<String>, &Value)>, query: &Query) -> String {
    let mut table = Table::new(headers.iter().copied());
    for (cells, object) in rows {
        table.push(Row::new(cells).metadata_of(object));
    }
    table.render(&TableOptions {
        no_headers: query.no_headers,
        with_namespace: query.all_namespaces,
        show_labels: query.show_labels,
        label_columns: Vec::new(),
    })
}

/// A plain table of rows with no object behind them (images, describe's events).
pub fn align(headers: &[String], rows: &[Vec<String>], no_headers: bool) -> String {
    let mut table = Table::new(headers.iter().map(String::as_str));
    for row in rows {
        table.push(Row::new(row.clone()));
    }
    table.render(&TableOptions {
        no_headers,
        ..TableOptions::default()
    })
}
