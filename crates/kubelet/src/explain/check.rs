//! Compares an explain output with a case's `expect`: only the members `expect` names (for sync
//! cases also only the sub-members it names of `sandbox`, `actions`, `apiStatuses` and
//! `conditions`), strictly below that, start lists in order, `containersToKill` as a set.
//! podlab's extra output members (`restartCount` and any `terminatedReason` of a status,
//! `restart`/`message` of a kill) are compared only when `expect` gives them.

use std::fmt;

use serde_json::Value;

/// One difference between `expect` and the output.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Mismatch {
    /// JSON path below `expect`, e.g. `actions.containersToStart`.
    pub path: String,
    /// `None`: the output has a member that `expect` does not allow.
    pub expected: Option<Value>,
    /// `None`: the output lacks the member.
    pub actual: Option<Value>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.expected, &self.actual) {
            (Some(e), Some(a)) => write!(f, "{}: expected {e}, got {a}", self.path),
            (Some(e), None) => write!(
                f,
                "{}: expected {e}, but the output has no such member",
                self.path
            ),
            (None, Some(a)) => write!(f, "{}: not expected, but the output has {a}", self.path),
            (None, None) => write!(f, "{}: missing", self.path),
        }
    }
}

/// Sync output members whose sub-members are compared only as far as `expect` names them.
const PARTIAL_SYNC_MEMBERS: &[&str] = &["sandbox", "actions", "apiStatuses", "conditions"];

/// Compares `output` (a [`super::CaseResult::output`]) with `case["expect"]`.
pub fn check(case: &Value, output: &Value) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let Some(expect) = case.get("expect").and_then(Value::as_object) else {
        out.push(Mismatch {
            path: "expect".into(),
            expected: None,
            actual: None,
        });
        return out;
    };
    let partial = case.get("kind").and_then(Value::as_str) == Some("sync");
    for (member, expected) in expect {
        let actual = output.get(member);
        match (expected, actual) {
            (Value::Object(exp), Some(Value::Object(act)))
                if partial && PARTIAL_SYNC_MEMBERS.contains(&member.as_str()) =>
            {
                for (sub, e) in exp {
                    compare(&format!("{member}.{sub}"), e, act.get(sub), &mut out);
                }
            }
            _ => compare(member, expected, actual, &mut out),
        }
    }
    out
}

/// Output members compared only when the expectation names them.
fn optional_members(path: &str) -> &'static [&'static str] {
    let in_list = |list: &str| path.starts_with(list) && path.ends_with(']');
    if in_list("apiStatuses.init[") || in_list("apiStatuses.containers[") {
        // terminatedReason: section 11 only shows it as "Completed"; podlab renders any reason.
        &["restartCount", "terminatedReason"]
    } else if in_list("actions.containersToKill[") {
        &["restart", "message"]
    } else {
        &[]
    }
}

fn compare(path: &str, expected: &Value, actual: Option<&Value>, out: &mut Vec<Mismatch>) {
    let Some(actual) = actual else {
        out.push(Mismatch {
            path: path.into(),
            expected: Some(expected.clone()),
            actual: None,
        });
        return;
    };
    match (expected, actual) {
        (Value::Array(exp), Value::Array(act)) if path.ends_with("containersToKill") => {
            if !same_set(path, exp, act) {
                out.push(Mismatch {
                    path: path.into(),
                    expected: Some(expected.clone()),
                    actual: Some(actual.clone()),
                });
            }
        }
        (Value::Array(exp), Value::Array(act)) if exp.len() == act.len() => {
            for (i, (e, a)) in exp.iter().zip(act).enumerate() {
                compare(&format!("{path}[{i}]"), e, Some(a), out);
            }
        }
        (Value::Object(exp), Value::Object(act)) => {
            for (key, e) in exp {
                compare(&format!("{path}.{key}"), e, act.get(key), out);
            }
            let optional = optional_members(path);
            for (key, a) in act {
                if !exp.contains_key(key) && !optional.contains(&key.as_str()) {
                    out.push(Mismatch {
                        path: format!("{path}.{key}"),
                        expected: None,
                        actual: Some(a.clone()),
                    });
                }
            }
        }
        _ if expected == actual => {}
        _ => out.push(Mismatch {
            path: path.into(),
            expected: Some(expected.clone()),
            actual: Some(actual.clone()),
        }),
    }
}

/// Every expected entry matches a distinct actual entry, and none is left over.
fn same_set(path: &str, expected: &[Value], actual: &[Value]) -> bool {
    if expected.len() != actual.len() {
        return false;
    }
    let mut used = vec![false; actual.len()];
    expected.iter().enumerate().all(|(i, e)| {
        let element_path = format!("{path}[{i}]");
        let found = actual.iter().enumerate().position(|(j, a)| {
            if used[j] {
                return false;
            }
            let mut diffs = Vec::new();
            compare(&element_path, e, Some(a), &mut diffs);
            diffs.is_empty()
        });
        match found {
            Some(j) => {
                used[j] = true;
                true
            }
            None => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_members_in_expect_are_compared() {
        let case =
            json!({"kind": "sync", "expect": {"phase": "Running", "actions": {"killPod": false}}});
        let output = json!({"phase": "Running", "runtimeSyncCalled": true, "actions": {"killPod": false, "createSandbox": true}});
        assert!(check(&case, &output).is_empty());
    }

    #[test]
    fn kills_compare_as_a_set_and_restart_only_when_expected() {
        let case = json!({"kind": "sync", "expect": {"actions": {"containersToKill": [
            {"name": "b", "reason": "Unknown"},
            {"name": "a", "reason": "LivenessProbe", "restart": false}
        ]}}});
        let output = json!({"actions": {"containersToKill": [
            {"name": "a", "reason": "LivenessProbe", "restart": false, "message": "m"},
            {"name": "b", "reason": "Unknown", "restart": true, "message": "m"}
        ]}});
        assert!(check(&case, &output).is_empty());
        let wrong = json!({"actions": {"containersToKill": [
            {"name": "a", "reason": "LivenessProbe", "restart": true, "message": "m"},
            {"name": "b", "reason": "Unknown", "restart": true, "message": "m"}
        ]}});
        assert_eq!(check(&case, &wrong)[0].path, "actions.containersToKill");
    }

    #[test]
    fn start_lists_are_ordered_and_statuses_strict_but_restart_count() {
        let case = json!({"kind": "sync", "expect": {
            "actions": {"containersToStart": ["a", "b"]},
            "apiStatuses": {"containers": [{"name": "a", "state": "running", "started": true, "ready": true}]}
        }});
        let output = json!({
            "actions": {"containersToStart": ["b", "a"]},
            "apiStatuses": {"containers": [{"name": "a", "state": "running", "started": true, "ready": true,
                                            "restartCount": 3, "waitingReason": "x"}]}
        });
        let paths: Vec<String> = check(&case, &output).into_iter().map(|m| m.path).collect();
        assert_eq!(
            paths,
            [
                "actions.containersToStart[0]",
                "actions.containersToStart[1]",
                "apiStatuses.containers[0].waitingReason"
            ]
        );
    }

    #[test]
    fn missing_expect_is_reported() {
        assert_eq!(
            check(&json!({"kind": "sync"}), &json!({}))[0].path,
            "expect"
        );
    }
}
