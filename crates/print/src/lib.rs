//! podlab-print: kubectl-grade output and queries over Kubernetes JSON objects.
//!
//! `podlab get` prints what `kubectl get` would print for the same objects, byte for byte:
//! `-o json|yaml|name`, `-o jsonpath=` (Kubernetes' JSONPath template dialect), `-o go-template=`
//! (Go's text/template as kubectl runs it), `-o custom-columns=`, aligned tables, `--sort-by`,
//! `--field-selector` and `-l` label selectors. kubectl itself is the reference in the tests
//! (`tests/kubectl.rs` serves the fixtures to the real `kubectl get` from a fake API server).
//!
//! Why not a template crate: kubectl's bytes are decided by Go's `fmt`, `strconv`,
//! `encoding/json`, `text/tabwriter`, go-yaml and `sort.Sort`; the crate's `golang` modules
//! reproduce those, and the engines are written over them.
//!
//! How `podlab get` uses it, mirroring kubectl: a named object is printed as itself, a listing as
//! the `List` kubectl builds; errors print as `error: {err}` (plus a newline when the message has
//! none) with exit status 1, after whatever `render` already put in the output.
//!
//! ```
//! use podlab_print::{kubectl_list, render, OutputFormat, LabelSelector, SortBy, SortTarget};
//! use serde_json::json;
//!
//! let pods = vec![
//!     json!({"apiVersion": "v1", "kind": "Pod",
//!            "metadata": {"name": "web-1", "labels": {"paas.sogou.com/app": "shop"}},
//!            "status": {"phase": "Running"}}),
//!     json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0"},
//!            "status": {"phase": "Pending"}}),
//! ];
//! let selector = LabelSelector::parse("paas.sogou.com/app").unwrap();
//! let mut items: Vec<_> = pods.into_iter().filter(|p| selector.matches_object(p)).collect();
//! SortBy::new(".metadata.name").sort(&mut items, SortTarget::Objects).unwrap();
//!
//! let format = OutputFormat::parse(
//!     r#"go-template={{range .items}}{{index .metadata.labels "paas.sogou.com/app"}}{{"\n"}}{{end}}"#,
//! ).unwrap();
//! let mut out = String::new();
//! render(&format, &kubectl_list(items), false, &mut out).unwrap();
//! assert_eq!(out, "shop\n");
//!
//! let err = OutputFormat::parse("jsonpath={.a").unwrap_err();
//! assert_eq!(err.to_string(), "error parsing jsonpath {.a, unclosed action\n");
//! ```

pub(crate) mod golang;

pub mod columns;
pub mod error;
pub mod gotemplate;
pub mod jsonpath;
pub mod output;
pub mod selector;
pub mod sort;
pub mod table;
pub mod yaml;

pub use columns::{Column, CustomColumns};
pub use error::PrintError;
pub use gotemplate::GoTemplate;
pub use jsonpath::{relaxed_expression, JsonPath};
pub use output::{kubectl_list, render, render_to_string, resource_name, OutputFormat};
pub use selector::{FieldSelector, LabelSelector};
pub use sort::{parse_quantity, sort_by, SortBy, SortTarget};
pub use table::{format_labels, labels_of, Row, Table, TableOptions};
pub use yaml::to_yaml;

/// A string as Go's `strconv.Quote` (`%q`) spells it: what kubelet's downward API files hold.
pub fn go_quote(s: &str) -> String {
    golang::quote::quote(s)
}

/// Tab-separated lines aligned as kubectl's describers align them (Go's `text/tabwriter` with
/// padding 2, `tabbedString`): each run of lines with a cell in a column is padded to that
/// column's widest cell plus two spaces.
pub fn describe_aligned(text: &str) -> String {
    golang::tabwriter::align_with(text, golang::tabwriter::DESCRIBE)
}
