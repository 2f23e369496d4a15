//! The columns of `podlab get pods`, computed as kubectl's pod printer computes them: READY,
//! STATUS (Init:0/1, PodInitializing, CrashLoopBackOff, Completed, Error, Terminating, ...),
//! RESTARTS with the age of the last restart, and AGE in kubectl's short human form.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

/// One row of `podlab get pods` (with `wide`: IP, NODE, NOMINATED NODE, READINESS GATES).
pub fn pod_row(pod: &Pod, now: Timestamp, wide: bool) -> Vec<String> {
    let status = pod.status.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let sidecars: Vec<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    let total = spec.containers.len() + sidecars.len();
    let mut ready = 0;
    let mut restarts: i32 = 0;
    let mut sidecar_restarts: i32 = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_sidecar_restart: Option<Timestamp> = None;
    let note_restart = |s: &ContainerStatus, last: &mut Option<Timestamp>| {
        if let Some(t) = s
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref())
        {
            if last.is_none_or(|l| t.0 > l) {
                *last = Some(t.0);
            }
        }
    };

    let mut reason = status.phase.clone().unwrap_or_else(|| "Pending".into());
    if let Some(r) = status.reason.clone().filter(|r| !r.is_empty()) {
        reason = r;
    }
    let gated = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("SchedulingGated"));
    if gated {
        reason = "SchedulingGated".into();
    }
    let init_count = spec.init_containers.as_ref().map_or(0, Vec::len);
    let mut initializing = false;
    for (i, c) in status.init_container_statuses.iter().flatten().enumerate() {
        restarts += c.restart_count;
        note_restart(c, &mut last_restart);
        let state = c.state.clone().unwrap_or_default();
        let is_sidecar = sidecars.contains(&c.name.as_str());
        if is_sidecar {
            sidecar_restarts += c.restart_count;
            note_restart(c, &mut last_sidecar_restart);
        }
        match (&state.terminated, &state.waiting) {
            (Some(t), _) if t.exit_code == 0 => continue,
            _ if is_sidecar && c.started == Some(true) => {
                if c.ready {
                    ready += 1;
                }
                continue;
            }
            (Some(t), _) => {
                reason = match t.reason.as_deref().filter(|r| !r.is_empty()) {
                    Some(r) => format!("Init:{r}"),
                    None if t.signal.unwrap_or(0) != 0 => {
                        format!("Init:Signal:{}", t.signal.unwrap_or(0))
                    }
                    None => format!("Init:ExitCode:{}", t.exit_code),
                };
            }
            (None, Some(w))
                if w.reason
                    .as_deref()
                    .is_some_and(|r| !r.is_empty() && r != "PodInitializing") =>
            {
                reason = format!("Init:{}", w.reason.as_deref().unwrap_or(""));
            }
            _ => reason = format!("Init:{i}/{init_count}"),
        }
        initializing = true;
        break;
    }
    let initialized = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Initialized" && c.status == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in status.container_statuses.iter().flatten().rev() {
            restarts += c.restart_count;
            note_restart(c, &mut last_restart);
            let state = c.state.clone().unwrap_or_default();
            if let Some(w) = state
                .waiting
                .as_ref()
                .filter(|w| w.reason.as_deref().is_some_and(|r| !r.is_empty()))
            {
                reason = w.reason.clone().unwrap_or_default();
            } else if let Some(t) = &state.terminated {
                reason = match t.reason.as_deref().filter(|r| !r.is_empty()) {
                    Some(r) => r.to_string(),
                    None if t.signal.unwrap_or(0) != 0 => {
                        format!("Signal:{}", t.signal.unwrap_or(0))
                    }
                    None => format!("ExitCode:{}", t.exit_code),
                };
            } else if c.ready && state.running.is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            reason = if pod_ready {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    let phase = status.phase.as_deref().unwrap_or("");
    if pod.metadata.deletion_timestamp.is_some() && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts_text = match last_restart {
        Some(t) if restarts > 0 => format!("{restarts} ({} ago)", human_duration(now, t)),
        _ => restarts.to_string(),
    };
    let age = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| human_duration(now, t.0))
        .unwrap_or_else(|| "<unknown>".into());
    let mut row = vec![
        pod.metadata.name.clone().unwrap_or_default(),
        format!("{ready}/{total}"),
        reason,
        restarts_text,
        age,
    ];
    if wide {
        let gates = spec.readiness_gates.as_ref().map(|g| {
            let ok = g
                .iter()
                .filter(|gate| {
                    status
                        .conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == gate.condition_type && c.status == "True")
                })
                .count();
            format!("{ok}/{}", g.len())
        });
        row.push(
            status
                .pod_ip
                .clone()
                .filter(|ip| !ip.is_empty())
                .unwrap_or_else(|| "<none>".into()),
        );
        row.push(spec.node_name.clone().unwrap_or_else(|| "<none>".into()));
        row.push(
            status
                .nominated_node_name
                .clone()
                .unwrap_or_else(|| "<none>".into()),
        );
        row.push(gates.unwrap_or_else(|| "<none>".into()));
    }
    row
}

/// The current time as the API types carry it.
pub fn now() -> Timestamp {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::new(
        since_epoch.as_secs() as i64,
        since_epoch.subsec_nanos() as i32,
    )
    .unwrap_or(Timestamp::UNIX_EPOCH)
}

pub const POD_HEADERS: [&str; 5] = ["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
pub const POD_WIDE_HEADERS: [&str; 4] = ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"];

/// kubectl's `HumanDuration`: `45s`, `5m10s`, `3h`, `2d5h`, `400d`, `3y`.
pub fn human_duration(now: Timestamp, then: Timestamp) -> String {
    // Go truncates the duration to whole seconds; a clock a second behind still reads "0s".
    let elapsed = now.duration_since(then);
    let secs = elapsed.as_secs();
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        match secs % 60 {
            0 => format!("{m}m"),
            s => format!("{m}m{s}s"),
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            mm => format!("{h}h{mm}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        match h % 24 {
            0 => format!("{d}d"),
            hh => format!("{d}d{hh}h"),
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else if h < 24 * 365 * 8 {
        let y = d / 365;
        match d % 365 {
            0 => format!("{y}y"),
            dd => format!("{y}y{dd}d"),
        }
    } else {
        format!("{}y", d / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn durations_read_like_kubectl() {
        let now = at(1_000_000_000);
        assert_eq!(human_duration(now, at(1_000_000_000 - 45)), "45s");
        assert_eq!(human_duration(now, at(1_000_000_000 - 310)), "5m10s");
        assert_eq!(human_duration(now, at(1_000_000_000 - 3 * 3600)), "3h");
        assert_eq!(
            human_duration(now, at(1_000_000_000 - (2 * 86400 + 5 * 3600))),
            "2d5h"
        );
    }

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn init_progress_and_crash_loop_are_shown_as_kubectl_does() {
        let now = at(2_000_000_000);
        let initializing = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "i", "ready": false, "restartCount": 0, "image": "b", "imageID": "",
                 "state": {"running": {}}}]}
        }));
        assert_eq!(pod_row(&initializing, now, false)[2], "Init:0/1");
        let crashing = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 3, "image": "b", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2033-05-18T03:33:00Z"}}}]}
        }));
        let row = pod_row(&crashing, now, false);
        assert_eq!(
            row[1..4],
            [
                "0/1".to_string(),
                "CrashLoopBackOff".into(),
                "3 (20s ago)".into()
            ]
        );
    }
}
