//! `podlab wait --for=... pod/NAME`: kubectl wait over the store's watch. It blocks until every
//! named pod meets the condition (or is gone, with `--for=delete`), printing
//! `pod/NAME condition met` for each, or fails after `--timeout` with kubectl's message. No
//! polling: the command sleeps on the store's change log and looks again at each change.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_print::JsonPath;

use crate::context::Ctx;
use crate::UsageError;

/// What `--for=` asks for.
#[derive(Debug)]
#[allow(clippy::enum_variant_names)] // `Condition::Condition` is kubectl's `--for=condition=`
pub enum Condition {
    /// `condition=NAME[=VALUE]`: a `status.conditions` entry of that type (case-insensitive, as
    /// kubectl compares it) whose status is VALUE (default `True`).
    Condition { kind: String, status: String },
    /// `delete`: the object is gone.
    Delete,
    /// `jsonpath='{EXPR}'=VALUE`: the expression's value, printed as `-o jsonpath` would.
    JsonPath { path: JsonPath, value: String },
    /// Ready, or a phase that never will be (Succeeded, Failed): what `apply --trace` waits
    /// for before it prints the pod's trace.
    ReadyOrFinished,
}

impl Condition {
    pub fn parse(text: &str) -> Result<Condition> {
        let invalid = || {
            UsageError(format!(
                "unrecognized condition: {text:?}; expected delete, condition=NAME[=VALUE] or \
                 jsonpath='{{EXPR}}'=VALUE"
            ))
        };
        if text.eq_ignore_ascii_case("delete") {
            return Ok(Condition::Delete);
        }
        if let Some(rest) = text.strip_prefix("condition=") {
            let (kind, status) = rest.split_once('=').unwrap_or((rest, "True"));
            if kind.is_empty() {
                return Err(invalid().into());
            }
            return Ok(Condition::Condition {
                kind: kind.to_string(),
                status: status.to_string(),
            });
        }
        if let Some(rest) = text.strip_prefix("jsonpath=") {
            // The expression ends at the `}` that closes its last action; the value follows.
            let close = rest.rfind('}').ok_or_else(invalid)?;
            let (expression, value) = rest.split_at(close + 1);
            // Quotes a shell did not remove (`'{.status.phase}'=Running`) are not part of it.
            let value = value
                .trim_start_matches('\'')
                .strip_prefix('=')
                .ok_or_else(invalid)?;
            let expression = expression.trim_matches('\'');
            let path = JsonPath::parse(expression).map_err(|e| UsageError(e.to_string()))?;
            return Ok(Condition::JsonPath {
                path,
                value: value.to_string(),
            });
        }
        Err(invalid().into())
    }

    /// Whether `pod` (None: gone from the store) meets the condition.
    fn met(&self, pod: Option<&Pod>) -> bool {
        match (self, pod) {
            (Condition::Delete, pod) => pod.is_none(),
            (_, None) => false,
            (Condition::ReadyOrFinished, Some(pod)) => {
                let ready = Condition::Condition {
                    kind: "Ready".into(),
                    status: "True".into(),
                };
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                ready.met(Some(pod)) || matches!(phase, Some("Succeeded" | "Failed"))
            }
            (Condition::Condition { kind, status }, Some(pod)) => pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| {
                    c.type_.eq_ignore_ascii_case(kind) && c.status.eq_ignore_ascii_case(status)
                }),
            (Condition::JsonPath { path, value }, Some(pod)) => serde_json::to_value(pod)
                .ok()
                .and_then(|object| path.execute(&object).ok())
                .is_some_and(|found| found == *value),
        }
    }
}

/// `pod/NAME` or `pods/NAME` (also `po/`), or the names that follow `pod`.
pub fn pod_names(words: &[String]) -> Result<Vec<String>> {
    let is_pods = |w: &str| matches!(w, "pod" | "pods" | "po");
    match words {
        [] => bail!(UsageError(
            "podlab wait needs pods: pod/NAME..., or pod NAME...".into()
        )),
        [kind, names @ ..] if is_pods(kind) && !names.is_empty() => Ok(names.to_vec()),
        words => words
            .iter()
            .map(|word| match word.split_once('/') {
                Some((kind, name)) if is_pods(kind) && !name.is_empty() => Ok(name.to_string()),
                _ => Err(UsageError(format!(
                    "podlab wait takes pods: expected pod/NAME, got {word:?}"
                ))
                .into()),
            })
            .collect(),
    }
}

/// Waits for every pod in turn, all within one `timeout`.
pub fn run(
    names: &[String],
    namespace: &str,
    condition: &Condition,
    timeout: Duration,
) -> Result<()> {
    let ctx = Ctx::open()?;
    let deadline = Instant::now() + timeout;
    for name in names {
        wait_for(&ctx, namespace, name, condition, deadline)?;
        println!("pod/{name} condition met");
    }
    Ok(())
}

fn wait_for(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    condition: &Condition,
    deadline: Instant,
) -> Result<()> {
    if !until(ctx, namespace, name, condition, deadline)? {
        bail!("timed out waiting for the condition on pods/{name}");
    }
    Ok(())
}

/// Sleeps on the store's watch until pod `name` meets `condition` (true) or `deadline` passes
/// (false). A pod that is not there at the first look is an error, unless its deletion is
/// what is waited for.
pub fn until(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    condition: &Condition,
    deadline: Instant,
) -> Result<bool> {
    // The watch starts before the first look, so that no change falls between the two.
    let mut watch = ctx.store.watch_now::<Pod>()?;
    let mut first = true;
    loop {
        let pod = match ctx.store.get::<Pod>(namespace, name) {
            Ok(pod) => Some(pod),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e).context(format!("reading pod {name:?}")),
        };
        if pod.is_none() && first && !matches!(condition, Condition::Delete) {
            bail!("pods {name:?} not found");
        }
        first = false;
        if condition.met(pod.as_ref()) {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        watch.next_timeout(left)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn conditions_as_kubectl_reads_them() {
        let ready = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }));
        assert!(Condition::parse("condition=Ready")
            .unwrap()
            .met(Some(&ready)));
        assert!(Condition::parse("condition=ready=true")
            .unwrap()
            .met(Some(&ready)));
        assert!(!Condition::parse("condition=Ready=False")
            .unwrap()
            .met(Some(&ready)));
        assert!(!Condition::parse("condition=Initialized")
            .unwrap()
            .met(Some(&ready)));
        assert!(Condition::parse("jsonpath='{.status.phase}'=Running")
            .unwrap()
            .met(Some(&ready)));
        assert!(!Condition::parse("jsonpath={.status.phase}=Pending")
            .unwrap()
            .met(Some(&ready)));
        assert!(!Condition::parse("delete").unwrap().met(Some(&ready)));
        assert!(Condition::parse("delete").unwrap().met(None));
        assert!(!Condition::parse("condition=Ready").unwrap().met(None));
    }

    #[test]
    fn bad_conditions_say_what_is_expected() {
        for text in ["", "Ready", "condition=", "jsonpath={.a}", "jsonpath=.a=b"] {
            let err = Condition::parse(text).unwrap_err();
            assert!(err.downcast_ref::<UsageError>().is_some(), "{text}: {err}");
        }
    }

    #[test]
    fn pods_by_slash_or_after_the_kind() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(pod_names(&words(&["pod/a", "pods/b"])).unwrap(), ["a", "b"]);
        assert_eq!(pod_names(&words(&["pod", "a", "b"])).unwrap(), ["a", "b"]);
        assert!(pod_names(&words(&["rs/a"])).is_err());
        assert!(pod_names(&words(&[])).is_err());
        assert!(pod_names(&words(&["pod"])).is_err());
    }
}
