//! Renders a [`SyncResult`] as the `expect` members of a sync case (spec 11), with the member
//! names and value spellings of the case format.

use serde_json::{json, Map, Value};

use crate::attempt::ContainerAttempt;
use crate::conditions::Condition;
use crate::model::{ApiState, CarriedCondition, PodSpecView, RuntimeView};
use crate::status::ApiContainerStatus;
use crate::sync::SyncResult;

pub(crate) fn sync(pod: &PodSpecView, rt: &RuntimeView, r: &SyncResult) -> Value {
    let a = &r.actions;
    let names = |indexes: &[usize], list: &dyn Fn(usize) -> String| -> Vec<Value> {
        indexes.iter().map(|&i| Value::String(list(i))).collect()
    };
    let kills: Vec<Value> = a
        .containers_to_kill
        .iter()
        .map(|k| {
            json!({
                "name": k.name,
                "reason": k.reason.as_str(),
                "restart": a.starts(pod, &k.name),
                "message": k.message,
            })
        })
        .collect();
    let mut attempts = Map::new();
    for (name, attempt) in a.attempts(pod, rt) {
        let value = match attempt {
            ContainerAttempt::Next(n) => Value::from(n),
            ContainerAttempt::FromLogDir => Value::from("fromLogDir"),
        };
        attempts.insert(name.to_string(), value);
    }
    let c = &r.conditions;
    let mut conditions = Map::new();
    conditions.insert(
        "PodReadyToStartContainers".into(),
        condition(&c.ready_to_start_containers),
    );
    conditions.insert("Initialized".into(), condition(&c.initialized));
    conditions.insert("ContainersReady".into(), condition(&c.containers_ready));
    conditions.insert("Ready".into(), condition(&c.ready));
    conditions.insert("PodScheduled".into(), condition(&c.scheduled));
    if let Some(dt) = &c.disruption_target {
        conditions.insert("DisruptionTarget".into(), carried(dt));
    }
    if let Some(pending) = &c.resize_pending {
        conditions.insert("PodResizePending".into(), condition(pending));
    }
    if let Some(progress) = &c.resize_in_progress {
        conditions.insert("PodResizeInProgress".into(), condition(progress));
    }

    json!({
        "runtimeSyncCalled": r.runtime_sync_called,
        "sandbox": {
            "recreate": r.sandbox.recreate,
            "reason": r.sandbox.reason.as_str(),
            "attempt": r.sandbox.attempt,
            "sandboxChangedEvent": r.sandbox_changed_event,
        },
        "actions": {
            "killPod": a.kill_pod,
            "createSandbox": a.create_sandbox,
            "sandboxAttempt": a.attempt,
            "initContainersToStart": names(&a.init_containers_to_start, &|i| pod.init_containers[i].name.clone()),
            "containersToStart": names(&a.containers_to_start, &|i| pod.containers[i].name.clone()),
            "containersToKill": kills,
            "ephemeralContainersToStart": names(&a.ephemeral_containers_to_start, &|i| pod.ephemeral_containers[i].name.clone()),
            "containerAttempts": attempts,
        },
        "apiStatuses": {
            "init": r.statuses.init.iter().map(status).collect::<Vec<_>>(),
            "containers": r.statuses.containers.iter().map(status).collect::<Vec<_>>(),
        },
        "phase": r.phase.phase.as_str(),
        "conditions": conditions,
    })
}

fn condition(c: &Condition) -> Value {
    condition_value(c.status, c.reason.as_deref(), c.message.as_deref())
}

fn carried(c: &CarriedCondition) -> Value {
    condition_value(&c.status, c.reason.as_deref(), c.message.as_deref())
}

/// `{status, reason?, message?}`.
fn condition_value(status: &str, reason: Option<&str>, message: Option<&str>) -> Value {
    let mut m = Map::new();
    m.insert("status".into(), status.into());
    if let Some(reason) = reason {
        m.insert("reason".into(), reason.into());
    }
    if let Some(message) = message {
        m.insert("message".into(), message.into());
    }
    Value::Object(m)
}

/// `{name, state, waitingReason?, exitCode?, lastTerminatedExitCode?, started, ready,
/// terminatedReason?, inferred?, restartCount}`.
fn status(s: &ApiContainerStatus) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), s.name.as_str().into());
    m.insert("state".into(), s.state.kind().into());
    match &s.state {
        ApiState::Waiting {
            reason: Some(reason),
            ..
        } => {
            m.insert("waitingReason".into(), reason.as_str().into());
        }
        ApiState::Terminated(t) => {
            m.insert("exitCode".into(), t.exit_code.into());
            if let Some(reason) = &t.reason {
                m.insert("terminatedReason".into(), reason.as_str().into());
            }
        }
        _ => {}
    }
    if let Some(ApiState::Terminated(last)) = &s.last_state {
        m.insert("lastTerminatedExitCode".into(), last.exit_code.into());
    }
    m.insert("started".into(), s.started.into());
    m.insert("ready".into(), s.ready.into());
    if s.inferred {
        m.insert("inferred".into(), true.into());
    }
    m.insert("restartCount".into(), s.restart_count.into());
    Value::Object(m)
}
