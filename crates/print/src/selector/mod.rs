//! Selectors: `-l` label selectors (apimachinery's `labels.Parse`, with its grammar, validation
//! and error texts; also built from a Kubernetes `LabelSelector` object) and `--field-selector`
//! (`fields.ParseSelector`, with the fields the API server supports per kind).

mod field;
mod label;
mod validation;

pub use field::{selectable_fields, FieldSelector, FieldTerm};
pub use label::{LabelSelector, Operator, Requirement};
