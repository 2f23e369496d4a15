//! Ephemeral containers (`kubectl debug`, spec 2.5): EPH-1/2 decide when one is started (once,
//! never again), EPH-4 which PID namespace it joins. EPH-3 (ignored by phase and conditions, no
//! keep-alive) is applied where those are computed.

use crate::actions::PodActions;
use crate::model::{EphemeralSpecView, PodSpecView, RuntimeState, RuntimeView};
use crate::rules::Trace;

/// The PID namespace an ephemeral container gets (it always shares net, IPC and UTS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidNamespace {
    /// `hostPID`.
    Node,
    /// `shareProcessNamespace`: the sandbox's.
    Pod,
    /// Its own (per-container PID mode, no target).
    Container,
    /// The target container's (CRI `NamespaceMode TARGET` with this record id).
    Target(String),
}

/// EPH-4: where the ephemeral container's PID namespace comes from. A target that has no
/// running record makes the start fail with `CreateContainerConfigError` (the error message).
pub fn pid_namespace(
    pod: &PodSpecView,
    rt: &RuntimeView,
    eph: &EphemeralSpecView,
) -> Result<PidNamespace, String> {
    if pod.host_pid {
        return Ok(PidNamespace::Node);
    }
    if pod.share_process_namespace {
        return Ok(PidNamespace::Pod);
    }
    let Some(target) = &eph.target_container else {
        return Ok(PidNamespace::Container);
    };
    match rt.newest(target) {
        Some(record) if record.state == RuntimeState::Running => {
            Ok(PidNamespace::Target(record.id.clone()))
        }
        _ => Err(format!("unable to find target container {target}")),
    }
}

/// EPH-1/EPH-2 in a pass that keeps the sandbox: start those that never had a record.
pub(crate) fn compute_starts(
    pod: &PodSpecView,
    rt: &RuntimeView,
    actions: &mut PodActions,
    trace: &mut Trace,
) {
    for (i, eph) in pod.ephemeral_containers.iter().enumerate() {
        let name = eph.name.as_str();
        if let Some(record) = rt.newest(name) {
            actions.fire(trace, "EPH-2", || {
                format!(
                    "ephemeral container {name} already has a record ({}); ephemeral containers are never restarted",
                    record.state.as_str()
                )
            });
            continue;
        }
        actions.ephemeral_containers_to_start.push(i);
        actions.fire(trace, "EPH-1", || {
            format!("ephemeral container {name} has no record, so it is started (even before initialization ends)")
        });
        trace.fire("EPH-4", || {
            let pid = match pid_namespace(pod, rt, eph) {
                Ok(PidNamespace::Node) => "the host's PID namespace".to_string(),
                Ok(PidNamespace::Pod) => "the pod's shared PID namespace".to_string(),
                Ok(PidNamespace::Container) => "a PID namespace of its own".to_string(),
                Ok(PidNamespace::Target(id)) => {
                    format!("the PID namespace of target container record {id}")
                }
                Err(e) => format!(
                    "no PID namespace: the start will fail with CreateContainerConfigError ({e})"
                ),
            };
            format!("{name} joins the sandbox's network, IPC and UTS namespaces and {pid}")
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerRecord, RestartPolicy};

    fn running(name: &str) -> ContainerRecord {
        ContainerRecord {
            id: format!("{name}-id"),
            ..crate::testkit::record(name, RuntimeState::Running, 1)
        }
    }

    #[test]
    fn eph_4_target_pid_namespace_only_in_per_container_mode() {
        let mut pod = PodSpecView::new(RestartPolicy::Always, &["app"]);
        let eph = EphemeralSpecView {
            name: "debug".into(),
            target_container: Some("app".into()),
        };
        let rt = RuntimeView {
            sandboxes: vec![],
            containers: vec![running("app")],
        };
        assert_eq!(
            pid_namespace(&pod, &rt, &eph),
            Ok(PidNamespace::Target("app-id".into()))
        );
        pod.share_process_namespace = true;
        assert_eq!(pid_namespace(&pod, &rt, &eph), Ok(PidNamespace::Pod));
        pod.share_process_namespace = false;
        pod.host_pid = true;
        assert_eq!(pid_namespace(&pod, &rt, &eph), Ok(PidNamespace::Node));
    }

    #[test]
    fn eph_4_missing_target_is_a_config_error() {
        let pod = PodSpecView::new(RestartPolicy::Always, &["app"]);
        let eph = EphemeralSpecView {
            name: "debug".into(),
            target_container: Some("app".into()),
        };
        assert!(pid_namespace(&pod, &RuntimeView::default(), &eph).is_err());
        let untargeted = EphemeralSpecView {
            name: "debug".into(),
            target_container: None,
        };
        assert_eq!(
            pid_namespace(&pod, &RuntimeView::default(), &untargeted),
            Ok(PidNamespace::Container)
        );
    }
}
