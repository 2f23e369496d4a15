//! The `podlab explain` engine (spec section 11): runs cases (`sync`, `backoff`,
//! `probeWorker`) through the pure rules, renders the output members of the case format, a
//! narration naming the rule IDs, and compares outputs with a case's `expect` ([`check`]).

mod check;
mod input;
mod output;

use serde_json::Value;

pub use check::{check, Mismatch};

use crate::backoff::{Backoff, GateDecision};
use crate::error::Error;
use crate::model::ProbeType;
use crate::probe::{ContainerObservation, PodObservation, Prepared, ProbeWorker, RawOutcome};
use crate::rules::Trace;
use crate::sync::sync_pass_traced;

/// The schema tag of a cases file.
pub const CASES_SCHEMA: &str = "podlab-kubelet-cases/v1";

/// What explaining one case gives.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CaseResult {
    pub id: String,
    pub kind: String,
    /// Exactly the members section 11 lists under `expect` for the kind.
    pub output: Value,
    /// One plain sentence per decision, naming the rule that made it.
    pub narration: Vec<String>,
    /// The distinct rule IDs that fired, in order.
    pub rules: Vec<String>,
}

/// Explains one case object (`{"id", "kind", "input", ...}`) or every case of an object with a
/// `cases` array.
pub fn explain(input: &Value) -> Result<Vec<CaseResult>, Error> {
    let Some(object) = input.as_object() else {
        return Err(Error::NotACase { path: "$".into() });
    };
    match object.get("cases") {
        Some(Value::Array(cases)) => cases
            .iter()
            .enumerate()
            .map(|(i, case)| explain_case(case, &format!("cases[{i}]")))
            .collect(),
        Some(_) => Err(Error::bad("cases", "expected an array of cases")),
        None if object.contains_key("kind") => Ok(vec![explain_case(input, "")?]),
        None => Err(Error::NotACase { path: "$".into() }),
    }
}

/// One explained case and how it compares with its `expect`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CheckedCase {
    pub result: CaseResult,
    /// `None` when the case has no `expect` (nothing to compare).
    pub mismatches: Option<Vec<Mismatch>>,
}

impl CheckedCase {
    pub fn passed(&self) -> bool {
        self.mismatches.as_ref().is_none_or(Vec::is_empty)
    }
}

/// [`explain`] plus [`check`] for every case that has an `expect`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Verification {
    pub cases: Vec<CheckedCase>,
}

impl Verification {
    pub fn passed(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| c.mismatches.as_ref().is_some_and(Vec::is_empty))
            .count()
    }

    pub fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.passed()).count()
    }

    /// The closing line: `N passed, M failed`.
    pub fn summary(&self) -> String {
        format!("{} passed, {} failed", self.passed(), self.failed())
    }
}

/// Explains a case or a cases file and checks each case that has an `expect`.
pub fn verify(input: &Value) -> Result<Verification, Error> {
    let results = explain(input)?;
    let cases: Vec<&Value> = match input.get("cases").and_then(Value::as_array) {
        Some(cases) => cases.iter().collect(),
        None => vec![input],
    };
    let checked = results
        .into_iter()
        .zip(cases)
        .map(|(result, case)| CheckedCase {
            mismatches: case.get("expect").map(|_| check(case, &result.output)),
            result,
        })
        .collect();
    Ok(Verification { cases: checked })
}

fn join(prefix: &str, member: &str) -> String {
    if prefix.is_empty() {
        member.to_string()
    } else {
        format!("{prefix}.{member}")
    }
}

/// Explains one case; `path` is where it sits in the document (`""` at the top).
pub fn explain_case(case: &Value, path: &str) -> Result<CaseResult, Error> {
    let Some(object) = case.as_object() else {
        return Err(Error::NotACase {
            path: if path.is_empty() {
                "$".into()
            } else {
                path.into()
            },
        });
    };
    let id = match object.get("id") {
        Some(Value::String(id)) => id.clone(),
        Some(_) => return Err(Error::bad(join(path, "id"), "expected a string")),
        None => return Err(Error::bad(join(path, "id"), "missing")),
    };
    let kind = match object.get("kind") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err(Error::bad(join(path, "kind"), "expected a string")),
        None => return Err(Error::bad(join(path, "kind"), "missing")),
    };
    let input_path = join(path, "input");
    let Some(input) = object.get("input") else {
        return Err(Error::bad(input_path, "missing"));
    };
    let mut trace = Trace::narrated();
    let output = match kind.as_str() {
        "sync" => run_sync(input, &input_path, &mut trace)?,
        "backoff" => run_backoff(input, &input_path, &mut trace)?,
        "probeWorker" => run_probe_worker(input, &input_path, &mut trace)?,
        _ => {
            return Err(Error::UnknownKind {
                path: join(path, "kind"),
                kind,
            })
        }
    };
    let (rules, narration) = trace.into_parts();
    Ok(CaseResult {
        id,
        kind,
        output,
        narration,
        rules: rules.into_iter().map(String::from).collect(),
    })
}

fn run_sync(input: &Value, path: &str, trace: &mut Trace) -> Result<Value, Error> {
    let parsed: input::SyncInput = input::parse(input, path)?;
    let case = parsed.into_model(path)?;
    let result = sync_pass_traced(&case.pod, &case.runtime, &case.context, trace);
    Ok(output::sync(&case.pod, &case.runtime, &result))
}

fn run_backoff(input: &Value, path: &str, trace: &mut Trace) -> Result<Value, Error> {
    let parsed: input::BackoffInput = input::parse(input, path)?;
    let policy = parsed.policy();
    if policy.initial <= 0 || policy.max <= 0 {
        return Err(Error::bad(
            path,
            "initialSeconds and maxSeconds must be positive",
        ));
    }
    let mut backoff = Backoff::default();
    let decisions: Vec<Value> = parsed
        .attempts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            trace.say(|| {
                format!(
                    "Attempt {}: the container finished at {}, start requested at {}.",
                    i + 1,
                    a.finished_at,
                    a.now
                )
            });
            match backoff
                .request(&policy, a.finished_at, a.now, trace)
                .decision
            {
                GateDecision::Start { backoff_after } => serde_json::json!({
                    "decision": "start",
                    "backoffAfter": backoff_after,
                }),
                GateDecision::CrashLoopBackOff {
                    earliest_start,
                    current_backoff,
                } => serde_json::json!({
                    "decision": "CrashLoopBackOff",
                    "earliestStart": earliest_start,
                    "currentBackoff": current_backoff,
                }),
            }
        })
        .collect();
    Ok(serde_json::json!({ "decisions": decisions }))
}

fn run_probe_worker(input: &Value, path: &str, trace: &mut Trace) -> Result<Value, Error> {
    let parsed: input::ProbeWorkerInput = input::parse(input, path)?;
    let spec = parsed.spec();
    if spec.success_threshold == 0 || spec.failure_threshold == 0 {
        return Err(Error::bad(
            join(path, "spec"),
            "thresholds must be at least 1",
        ));
    }
    let mut worker = ProbeWorker::new(parsed.probe_type, spec);
    let initial = crate::probe::initial_value(parsed.probe_type);
    let pod = PodObservation {
        has_status: true,
        terminal: false,
        deletion_requested: false,
    };
    let mut ticks = Vec::with_capacity(parsed.ticks.len());
    for tick in &parsed.ticks {
        let id = tick.container_id.as_deref().unwrap_or("c1");
        let container = ContainerObservation {
            container_id: Some(id),
            running: true,
            terminated: false,
            started: tick
                .started
                .unwrap_or(parsed.probe_type != ProbeType::Startup),
            started_at: parsed.container_started_at,
            can_restart: true,
        };
        trace.say(|| format!("t={}: raw outcome {:?}.", tick.t, tick.raw).to_lowercase());
        let mut entry = serde_json::Map::new();
        entry.insert("t".into(), tick.t.into());
        match worker.prepare(&pod, &container, tick.t, trace) {
            Prepared::Probe => {
                let raw = match tick.raw {
                    input::RawIn::Success => RawOutcome::Success,
                    input::RawIn::Failure => RawOutcome::Failure,
                    input::RawIn::Error => RawOutcome::Error,
                };
                let recorded = worker.record(raw, trace);
                entry.insert("probed".into(), true.into());
                if recorded.discarded {
                    entry.insert("why".into(), "errorDiscarded".into());
                }
                if recorded.kill_container {
                    entry.insert("action".into(), "killContainer".into());
                }
            }
            Prepared::Skip(why) => {
                entry.insert("probed".into(), false.into());
                entry.insert("why".into(), why.as_str().into());
            }
            Prepared::Exit => {
                entry.insert("probed".into(), false.into());
                entry.insert("why".into(), "workerExited".into());
            }
        }
        let reported = worker.cached().map_or(Value::Null, |r| r.as_str().into());
        entry.insert("reported".into(), reported);
        ticks.push(Value::Object(entry));
    }
    Ok(serde_json::json!({ "initial": initial.as_str(), "ticks": ticks }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sync_case(input: Value) -> Value {
        json!({"id": "c", "kind": "sync", "input": input})
    }

    #[test]
    fn one_case_or_a_cases_array() {
        let case =
            sync_case(json!({"pod": {"restartPolicy": "Always", "containers": [{"name": "app"}]}}));
        assert_eq!(explain(&case).unwrap().len(), 1);
        let file = json!({"schema": CASES_SCHEMA, "cases": [case.clone(), case]});
        let results = explain(&file).unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].output["phase"], "Pending");
        let members: Vec<&String> = results[0].output.as_object().unwrap().keys().collect();
        assert_eq!(
            members,
            [
                "actions",
                "apiStatuses",
                "conditions",
                "phase",
                "runtimeSyncCalled",
                "sandbox"
            ]
        );
    }

    #[test]
    fn verify_counts_passed_and_failed() {
        let good = json!({"id": "g", "kind": "backoff", "input": {"attempts": [{"finishedAt": 0, "now": 0}]},
                          "expect": {"decisions": [{"decision": "start", "backoffAfter": 10}]}});
        let bad = json!({"id": "b", "kind": "backoff", "input": {"attempts": [{"finishedAt": 0, "now": 0}]},
                         "expect": {"decisions": [{"decision": "start", "backoffAfter": 20}]}});
        let plain = json!({"id": "p", "kind": "backoff", "input": {"attempts": []}});
        let v = verify(&json!({"cases": [good, bad, plain]})).unwrap();
        assert_eq!(v.summary(), "1 passed, 1 failed");
        assert_eq!(
            v.cases[1].mismatches.as_ref().unwrap()[0].path,
            "decisions[0].backoffAfter"
        );
        assert!(v.cases[2].mismatches.is_none());
    }

    #[test]
    fn missing_field_names_its_path() {
        let file = json!({"cases": [sync_case(json!({"pod": {"containers": []}}))]});
        let err = explain(&file).unwrap_err();
        assert_eq!(err.path(), "cases[0].input.pod");
        assert!(err.to_string().contains("restartPolicy"), "{err}");
    }

    #[test]
    fn wrong_value_and_unknown_field_name_their_paths() {
        let bad_state = sync_case(json!({
            "pod": {"restartPolicy": "Always", "containers": [{"name": "app"}]},
            "runtime": {"containers": [{"name": "app", "state": "Running", "created": 1}]}
        }));
        assert_eq!(
            explain(&bad_state).unwrap_err().path(),
            "input.runtime.containers[0].state"
        );
        let typo = sync_case(
            json!({"pod": {"restartPolicy": "Always", "containers": [], "hostNetwrok": true}}),
        );
        let err = explain(&typo).unwrap_err();
        assert!(err.to_string().contains("hostNetwrok"), "{err}");
    }

    #[test]
    fn exited_record_needs_exit_code() {
        let case = sync_case(json!({
            "pod": {"restartPolicy": "Always", "containers": [{"name": "app"}]},
            "runtime": {"containers": [{"name": "app", "state": "exited", "created": 1}]}
        }));
        assert_eq!(
            explain(&case).unwrap_err().path(),
            "input.runtime.containers[0].exitCode"
        );
    }

    #[test]
    fn unknown_kind_and_non_case_are_typed_errors() {
        let err =
            explain(&json!({"cases": [{"id": "x", "kind": "resync", "input": {}}]})).unwrap_err();
        assert_eq!(
            err,
            Error::UnknownKind {
                path: "cases[0].kind".into(),
                kind: "resync".into()
            }
        );
        assert_eq!(
            explain(&json!([1])).unwrap_err(),
            Error::NotACase { path: "$".into() }
        );
        assert_eq!(
            explain(&json!({"id": "x"})).unwrap_err(),
            Error::NotACase { path: "$".into() }
        );
        let no_input = explain(&json!({"id": "x", "kind": "sync"})).unwrap_err();
        assert_eq!(no_input.path(), "input");
    }

    #[test]
    fn backoff_and_probe_worker_outputs_have_their_members() {
        let backoff = json!({"id": "b", "kind": "backoff", "input": {"attempts": [{"finishedAt": 0, "now": 0}]}});
        let out = &explain(&backoff).unwrap()[0];
        assert_eq!(
            out.output,
            json!({"decisions": [{"decision": "start", "backoffAfter": 10}]})
        );
        assert_eq!(out.rules, ["BO-1", "BO-3"]);
        let probe = json!({"id": "p", "kind": "probeWorker", "input": {
            "probeType": "liveness", "spec": {"periodSeconds": 10}, "containerStartedAt": 0,
            "ticks": [{"t": 0, "raw": "failure"}]}});
        let out = &explain(&probe).unwrap()[0];
        assert_eq!(
            out.output,
            json!({"initial": "success", "ticks": [{"t": 0, "probed": true, "reported": "success"}]})
        );
    }
}
