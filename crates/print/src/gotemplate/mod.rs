//! Go's text/template as `kubectl -o go-template=` runs it: the template is named `output`, its
//! functions are Go's builtins plus kubectl's `exists` and `base64decode`, a missing key prints
//! `<no value>`, and the object is what `encoding/json` makes of it (so integers are int64).
//! On an execution error kubectl prints the partial output and a debugging dump to stdout, then
//! fails; [`GoTemplate::execute_into`] does the same.

mod exec;
mod funcs;
mod lex;
mod node;
mod parse;
mod value;

use crate::golang::fmt::{sprint_v, Arg};
use crate::golang::{json, Data, NumberMode};
use crate::PrintError;

/// A parsed Go template such as `{{range .items}}{{index .metadata.labels "app"}}{{"\n"}}{{end}}`.
#[derive(Debug, Clone)]
pub struct GoTemplate {
    template: String,
    set: parse::TreeSet,
    allow_missing_keys: bool,
}

impl GoTemplate {
    /// Parses a template; the error reads like kubectl's
    /// `error parsing template {{.a, template: output:1: unclosed action`.
    pub fn parse(template: &str) -> Result<Self, PrintError> {
        let set =
            parse::parse(template, funcs::NAMES).map_err(|reason| PrintError::GoTemplateParse {
                template: template.to_string(),
                reason,
            })?;
        Ok(GoTemplate {
            template: template.to_string(),
            set,
            allow_missing_keys: true,
        })
    }

    /// `--allow-missing-template-keys=false`: a missing key is an error (`missingkey=error`).
    pub fn allow_missing_keys(mut self, allow: bool) -> Self {
        self.allow_missing_keys = allow;
        self
    }

    /// The template text as given.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Renders the template over one object; on error the partial output is dropped.
    pub fn execute(&self, object: &serde_json::Value) -> Result<String, PrintError> {
        let mut out = String::new();
        self.run(object, &mut out)
            .map_err(|(reason, _)| PrintError::GoTemplateExec {
                template: self.template.clone(),
                reason,
            })?;
        Ok(out)
    }

    /// Renders like kubectl: the output is appended to `out`; on an execution error `out` also
    /// gets kubectl's "Error executing template" dump (kubectl prints it on stdout) and the error
    /// is returned for stderr.
    pub fn execute_into(
        &self,
        object: &serde_json::Value,
        out: &mut String,
    ) -> Result<(), PrintError> {
        match self.run(object, out) {
            Ok(()) => Ok(()),
            Err((reason, partial)) => {
                out.push_str(&partial);
                let raw = json::marshal(&Data::from_json(object, NumberMode::Unstructured));
                let given = Data::from_json(object, NumberMode::JsonRoundTrip);
                out.push_str(&format!(
                    "Error executing template: {reason}. Printing more information for debugging the template:\n\ttemplate was:\n\t\t{}\n\traw data was:\n\t\t{raw}\n\tobject given to template engine was:\n\t\t{}\n\n",
                    self.template,
                    sprint_v(&Arg::from_data(&given)),
                ));
                Err(PrintError::GoTemplateExec {
                    template: self.template.clone(),
                    reason,
                })
            }
        }
    }

    fn run(&self, object: &serde_json::Value, out: &mut String) -> Result<(), (String, String)> {
        let data = Data::from_json(object, NumberMode::JsonRoundTrip);
        let mut state = exec::State::new(&self.set, &self.template, self.allow_missing_keys);
        match state.execute(value::Val::Data(&data)) {
            Ok(()) => {
                out.push_str(&state.out);
                Ok(())
            }
            Err(reason) => Err((reason, std::mem::take(&mut state.out))),
        }
    }
}
