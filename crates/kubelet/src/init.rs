//! Init-container actions (kubelet's `computeInitContainerActions`, spec 2.4, INIT-1..13): one
//! walk from the last init container to the first decides what to start next, which sidecar to
//! restart, and whether the pod counts as initialized. Handles plain and sidecar pods alike.

use crate::actions::{KillReason, PodActions};
use crate::model::{
    ContainerRecord, PassContext, PodSpecView, ProbeResult, ProbeType, RuntimeState, RuntimeView,
};
use crate::rules::Trace;

/// kubelet's `isInitContainerFailed`: OOMKilled, a non-zero exit, or an unknown state.
pub fn is_init_container_failed(record: &ContainerRecord) -> bool {
    record.reason == "OOMKilled"
        || (record.state == RuntimeState::Exited && record.exit_code != 0)
        || record.state == RuntimeState::Unknown
}

/// Fills the init-container part of `actions`; returns whether the pod is initialized (so the
/// regular containers may be examined).
pub(crate) fn compute(
    pod: &PodSpecView,
    rt: &RuntimeView,
    ctx: &PassContext,
    actions: &mut PodActions,
    trace: &mut Trace,
) -> bool {
    let inits = &pod.init_containers;
    if inits.is_empty() {
        return true;
    }

    // INIT-1: only created/running regular containers prove a past initialization.
    let mut initialized = pod.containers.iter().any(|c| {
        rt.newest(&c.name)
            .is_some_and(|r| matches!(r.state, RuntimeState::Created | RuntimeState::Running))
    });
    if initialized {
        actions.fire(trace, "INIT-1", || {
            "a regular container is created or running, so the pod counts as initialized already".into()
        });
    } else if pod.containers.iter().any(|c| rt.newest(&c.name).is_some()) {
        actions.fire(trace, "INIT-1", || {
            "the regular containers have only exited records, which do not prove initialization"
                .into()
        });
    }

    let mut seen = initialized;
    let restart_on_failure = pod.restart_policy.restarts_on_failure();
    let last = inits.len() - 1;
    let mut starts: Vec<usize> = Vec::new();

    for i in (0..inits.len()).rev() {
        let container = &inits[i];
        let name = container.name.as_str();
        let Some(record) = rt.newest(name) else {
            if seen && container.sidecar {
                starts.push(i);
                trace.say(|| {
                    format!("sidecar {name} has no record after initialization: it is started")
                });
            } else {
                trace.say(|| format!("init container {name} has no record: skipped"));
            }
            continue;
        };
        if seen && !container.sidecar {
            actions.fire(trace, "INIT-2", || {
                format!("{name} is a regular init container after initialization: ignored")
            });
            continue;
        }

        match record.state {
            RuntimeState::Created => {
                starts.push(i);
                actions.fire(trace, "INIT-13", || {
                    format!("{name} is only created (the runtime probably failed to start it): it is started")
                });
            }
            RuntimeState::Running if !container.sidecar => {
                actions.fire(trace, "INIT-4", || {
                    format!("{name} is running: wait for it")
                });
            }
            RuntimeState::Running => {
                if running_sidecar(pod, ctx, i, record, seen, &mut starts, actions, trace) {
                    initialized = true;
                }
            }
            RuntimeState::Exited if container.sidecar => {
                starts.push(i);
                actions.fire(trace, "INIT-12", || {
                    format!(
                        "sidecar {name} exited: it is started again whatever the restart policy"
                    )
                });
            }
            RuntimeState::Exited => {
                if is_init_container_failed(record) {
                    if !restart_on_failure {
                        return kill_pod_for_init(actions, trace, "INIT-8", name);
                    }
                    starts.push(i);
                    actions.fire(trace, "INIT-7", || {
                        format!(
                            "{name} failed (exit {}): it is started again (subject to backoff)",
                            record.exit_code
                        )
                    });
                } else if i == last {
                    initialized = true;
                    actions.fire(trace, "INIT-5", || {
                        format!("{name}, the last init container, exited 0: the pod is initialized")
                    });
                } else {
                    starts.push(i + 1);
                    actions.fire(trace, "INIT-6", || {
                        format!(
                            "{name} exited 0: the next init container {} is started",
                            inits[i + 1].name
                        )
                    });
                }
            }
            RuntimeState::Unknown if container.sidecar => {
                starts.push(i);
                actions.kill(record, KillReason::Unknown, unknown_message());
                actions.fire(trace, "INIT-12", || {
                    format!("sidecar {name} is in unknown state: it is killed and started again")
                });
            }
            RuntimeState::Unknown => {
                if !restart_on_failure {
                    return kill_pod_for_init(actions, trace, "INIT-9", name);
                }
                starts.push(i);
                actions.kill(record, KillReason::Unknown, unknown_message());
                actions.fire(trace, "INIT-9", || {
                    format!("{name} is in unknown state: it is killed and started again")
                });
            }
        }
        seen = true;
    }

    if !seen {
        starts.push(0);
        actions.fire(trace, "INIT-10", || {
            format!(
                "no init container has run yet: the first one, {}, is started",
                inits[0].name
            )
        });
    }
    starts.reverse();
    actions.init_containers_to_start = starts;
    initialized
}

fn unknown_message() -> String {
    "Init container is in \"unknown\" state, try killing it before restart".into()
}

/// INIT-8 / INIT-9 under Never: the failed initialization kills the pod.
fn kill_pod_for_init(
    actions: &mut PodActions,
    trace: &mut Trace,
    rule: &'static str,
    name: &str,
) -> bool {
    actions.kill_pod = true;
    actions.init_containers_to_start.clear();
    actions.fire(trace, rule, || {
        format!("init container {name} failed and restartPolicy is Never: the pod is killed (KillPod), nothing is started")
    });
    false
}

/// INIT-11 for a running sidecar at index `i`; returns true when it completes initialization
/// (it is the last init container and has started).
#[allow(clippy::too_many_arguments)]
fn running_sidecar(
    pod: &PodSpecView,
    ctx: &PassContext,
    i: usize,
    record: &ContainerRecord,
    seen: bool,
    starts: &mut Vec<usize>,
    actions: &mut PodActions,
    trace: &mut Trace,
) -> bool {
    let container = &pod.init_containers[i];
    let name = container.name.as_str();
    if container.probes.startup {
        match ctx.probe(Some(record), ProbeType::Startup) {
            None => {
                actions.fire(trace, "INIT-11", || {
                    format!(
                        "sidecar {name} is running but its startup probe has no result yet: wait"
                    )
                });
                return false;
            }
            Some(ProbeResult::Failure) => {
                actions.kill(
                    record,
                    KillReason::StartupProbe,
                    format!("Init container {name} failed startup probe"),
                );
                starts.push(i);
                actions.fire(trace, "INIT-11", || {
                    format!(
                        "sidecar {name} failed its startup probe: it is killed and started again"
                    )
                });
                return false;
            }
            Some(ProbeResult::Unknown) => {
                actions.fire(trace, "INIT-11", || {
                    format!("sidecar {name} is running, startup probe result unknown: wait")
                });
                return false;
            }
            Some(ProbeResult::Success) => {}
        }
    }

    let mut completes = false;
    if i == pod.init_containers.len() - 1 {
        completes = true;
        actions.fire(trace, "INIT-11", || {
            format!("sidecar {name}, the last init container, has started: the pod is initialized")
        });
    } else if !seen {
        starts.push(i + 1);
        actions.fire(trace, "INIT-11", || {
            format!(
                "sidecar {name} has started: the next init container {} is started",
                pod.init_containers[i + 1].name
            )
        });
    } else {
        actions.fire(trace, "INIT-11", || {
            format!("sidecar {name} is running and started")
        });
    }

    if container.hash != record.hash {
        actions.kill(
            record,
            KillReason::DefinitionChanged,
            format!("Init container {name} definition changed"),
        );
        starts.push(i);
        actions.fire(trace, "INIT-11", || {
            format!("sidecar {name}'s definition changed: it is killed and started again")
        });
    } else if container.probes.liveness
        && ctx.probe(Some(record), ProbeType::Liveness) == Some(ProbeResult::Failure)
    {
        actions.kill(
            record,
            KillReason::LivenessProbe,
            format!("Init container {name} failed liveness probe"),
        );
        starts.push(i);
        actions.fire(trace, "INIT-11", || {
            format!("sidecar {name} failed its liveness probe: it is killed and started again")
        });
    }
    completes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerSpecView, RestartPolicy};
    use crate::testkit::{exited, record, runtime};

    fn sidecar(name: &str) -> ContainerSpecView {
        ContainerSpecView {
            sidecar: true,
            ..ContainerSpecView::new(name)
        }
    }

    #[test]
    fn missing_sidecars_after_initialization_restart_in_spec_order() {
        let mut pod = PodSpecView::new(RestartPolicy::Always, &["app"]);
        pod.init_containers = vec![sidecar("a"), ContainerSpecView::new("setup"), sidecar("b")];
        let rt = runtime(vec![record("app", RuntimeState::Running, 30)]);
        let mut actions = PodActions::default();
        let initialized = compute(
            &pod,
            &rt,
            &PassContext::default(),
            &mut actions,
            &mut Trace::quiet(),
        );
        assert!(initialized);
        assert_eq!(actions.init_containers_to_start, [0, 2]);
    }

    #[test]
    fn init_failed_counts_oom_and_unknown() {
        let oom = ContainerRecord {
            reason: "OOMKilled".into(),
            ..exited("i", 1, 0)
        };
        assert!(is_init_container_failed(&oom));
        assert!(is_init_container_failed(&exited("i", 1, 2)));
        assert!(is_init_container_failed(&record(
            "i",
            RuntimeState::Unknown,
            1
        )));
        assert!(!is_init_container_failed(&exited("i", 1, 0)));
        assert!(!is_init_container_failed(&record(
            "i",
            RuntimeState::Running,
            1
        )));
    }
}
