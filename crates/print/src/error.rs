//! The one error type of podlab-print. Its `Display` is the message kubectl prints after
//! `error: ` for the same mistake, so the CLI can print `error: {err}` and match kubectl.

/// What went wrong while parsing a printer spec or a selector, or while rendering.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PrintError {
    /// `-o` names no known format.
    #[error("unable to match a printer suitable for the output format \"{format}\", allowed formats are: {allowed}")]
    UnknownFormat { format: String, allowed: String },

    /// A JSONPath template does not parse (`{.a` ...): kubectl's "error parsing jsonpath".
    #[error("error parsing jsonpath {template}, {reason}\n")]
    JsonPathParse { template: String, reason: String },

    /// A JSONPath template failed on the data; `object` is the Go `%#v` dump kubectl adds.
    #[error("error executing jsonpath {quoted}: Error executing template: {reason}. Printing more information for debugging the template:\n\ttemplate was:\n\t\t{template}\n\tobject given to jsonpath engine was:\n\t\t{object}\n\n\n", quoted = crate::golang::quote::quote(template))]
    JsonPathExec {
        template: String,
        reason: String,
        object: String,
    },

    /// A Go template does not parse; `reason` is Go's `template: output:LINE: ...`.
    #[error("error parsing template {template}, {reason}\n")]
    GoTemplateParse { template: String, reason: String },

    /// A Go template failed on the data; `reason` is Go's
    /// `template: output:LINE:COL: executing "output" at <...>: ...`.
    #[error("error executing template {quoted}: {reason}", quoted = crate::golang::quote::quote(template))]
    GoTemplateExec { template: String, reason: String },

    /// A custom-columns spec or file is malformed, or a column's JSONPath fails.
    #[error("{0}")]
    CustomColumns(String),

    /// `--sort-by` names a path no object has, or values that cannot be ordered.
    #[error("{0}")]
    SortBy(String),

    /// A `-l` label selector does not parse or fails validation (labels.Parse's message).
    #[error("{0}")]
    LabelSelector(String),

    /// A `--field-selector` does not parse or names an unsupported field.
    #[error("{0}")]
    FieldSelector(String),

    /// YAML output failed as kubectl's does.
    #[error("{0}")]
    Yaml(String),

    /// `-o name` on an object without kind or name.
    #[error("{0}")]
    Name(String),

    /// `render` was asked for a table format; tables are built with [`crate::Table`].
    #[error("the table formats (default, wide) are printed with podlab_print::Table")]
    TableFormat,

    /// `-o jsonpath` or `-o go-template` without a template.
    #[error("template format specified but no template given")]
    MissingTemplate,

    /// A `*-file=` template file could not be read (`what` is `--template` or `template`).
    #[error("error reading {what} {path}, {reason}\n")]
    TemplateFile {
        what: String,
        path: String,
        reason: String,
    },

    /// Writing the output failed.
    #[error("writing output: {0}")]
    Io(String),
}

impl From<std::io::Error> for PrintError {
    fn from(e: std::io::Error) -> Self {
        PrintError::Io(e.to_string())
    }
}
