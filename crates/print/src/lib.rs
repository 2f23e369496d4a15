//! podlab-print: kubectl-grade output and queries over Kubernetes JSON objects.
//!
//! `podlab get` prints what `kubectl get` would print for the same objects, byte for byte:
//! `-o json|yaml|name`, `-o jsonpath=` (Kubernetes' JSONPath template dialect), `-o go-template=`
//! (Go's text/template as kubectl runs it), `-o custom-columns=`, aligned tables, `--sort-by`,
//! `--field-selector` and `-l` label selectors. kubectl itself is the reference in the tests.

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
