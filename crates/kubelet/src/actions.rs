//! computePodActions (spec 2.2 and 2.3): from the sandbox check and the runtime records to what
//! this pass kills and starts. ACT-1..6 when the sandbox is recreated, otherwise EPH-1/2
//! (ephemeral.rs), INIT-* (init.rs) and CTR-1..6 for the regular containers.

use serde::{Deserialize, Serialize};

use crate::attempt::ContainerAttempt;
use crate::model::{
    ContainerRecord, PassContext, PodSpecView, ProbeType, RestartPolicy, RuntimeState, RuntimeView,
};
use crate::restart::should_restart_traced;
use crate::rules::{RuleId, Trace};
use crate::sandbox::SandboxCheck;
use crate::{ephemeral, init};

/// Why a container is killed; `DefinitionChanged` is only a label (upstream leaves it empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KillReason {
    Unknown,
    LivenessProbe,
    StartupProbe,
    DefinitionChanged,
    /// An in-place resize whose `resizePolicy` is `RestartContainer`.
    ResizeRestart,
}

impl KillReason {
    pub fn as_str(self) -> &'static str {
        match self {
            KillReason::Unknown => "Unknown",
            KillReason::LivenessProbe => "LivenessProbe",
            KillReason::StartupProbe => "StartupProbe",
            KillReason::DefinitionChanged => "DefinitionChanged",
            KillReason::ResizeRestart => "ResizeRestart",
        }
    }
}

/// One entry of `ContainersToKill`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerToKill {
    pub container_id: String,
    pub name: String,
    pub reason: KillReason,
    /// The `Killing` event message.
    pub message: String,
}

/// kubelet's `podActions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodActions {
    pub kill_pod: bool,
    pub create_sandbox: bool,
    /// The sandbox the containers go into (old id when kept, `""` when none is reported).
    pub sandbox_id: String,
    /// Attempt number for a new sandbox.
    pub attempt: u32,
    /// Indexes into `initContainers`, in spec order.
    pub init_containers_to_start: Vec<usize>,
    /// Indexes into `containers`.
    pub containers_to_start: Vec<usize>,
    /// Kept as a list; upstream's is a map keyed by container id, so order means nothing.
    pub containers_to_kill: Vec<ContainerToKill>,
    /// Indexes into `ephemeralContainers`.
    pub ephemeral_containers_to_start: Vec<usize>,
    pub rules: Vec<RuleId>,
}

impl PodActions {
    /// Records that `rule` decided; narration goes to the trace.
    pub(crate) fn fire(&mut self, trace: &mut Trace, rule: RuleId, say: impl FnOnce() -> String) {
        if !self.rules.contains(&rule) {
            self.rules.push(rule);
        }
        trace.fire(rule, say);
    }

    pub(crate) fn kill(&mut self, record: &ContainerRecord, reason: KillReason, message: String) {
        self.containers_to_kill
            .retain(|k| k.container_id != record.id);
        self.containers_to_kill.push(ContainerToKill {
            container_id: record.id.clone(),
            name: record.name.clone(),
            reason,
            message,
        });
    }

    /// Whether `name` is started again in this pass (after a kill, say).
    pub fn starts(&self, pod: &PodSpecView, name: &str) -> bool {
        self.init_containers_to_start
            .iter()
            .any(|&i| pod.init_containers[i].name == name)
            || self
                .containers_to_start
                .iter()
                .any(|&i| pod.containers[i].name == name)
            || self
                .ephemeral_containers_to_start
                .iter()
                .any(|&i| pod.ephemeral_containers[i].name == name)
    }

    /// The attempt (restart count) each started container gets (spec 2.6), in start order:
    /// ephemeral, init, regular.
    pub fn attempts<'a>(
        &self,
        pod: &'a PodSpecView,
        rt: &RuntimeView,
    ) -> Vec<(&'a str, ContainerAttempt)> {
        let ephemeral = self
            .ephemeral_containers_to_start
            .iter()
            .map(|&i| pod.ephemeral_containers[i].name.as_str());
        let init = self
            .init_containers_to_start
            .iter()
            .map(|&i| pod.init_containers[i].name.as_str());
        let regular = self
            .containers_to_start
            .iter()
            .map(|&i| pod.containers[i].name.as_str());
        ephemeral
            .chain(init)
            .chain(regular)
            .map(|name| (name, ContainerAttempt::for_container(rt, name)))
            .collect()
    }
}

/// computePodActions.
pub fn compute(
    pod: &PodSpecView,
    rt: &RuntimeView,
    ctx: &PassContext,
    sandbox: &SandboxCheck,
    trace: &mut Trace,
) -> PodActions {
    let mut actions = PodActions {
        kill_pod: sandbox.recreate,
        create_sandbox: sandbox.recreate,
        sandbox_id: sandbox.sandbox_id.clone(),
        attempt: sandbox.attempt,
        ..PodActions::default()
    };
    if sandbox.recreate {
        recreate_sandbox(pod, rt, &mut actions, trace);
        return actions;
    }

    ephemeral::compute_starts(pod, rt, &mut actions, trace);

    let initialized = init::compute(pod, rt, ctx, &mut actions, trace);
    if actions.kill_pod || !initialized {
        trace.say(|| {
            "initialization failed or is in progress, so regular containers are not examined".into()
        });
        return actions;
    }
    regular_containers(pod, rt, ctx, &mut actions, trace);
    actions
}

/// ACT-1..6: the sandbox is (re)created, so everything is killed and started from scratch.
fn recreate_sandbox(
    pod: &PodSpecView,
    rt: &RuntimeView,
    actions: &mut PodActions,
    trace: &mut Trace,
) {
    actions.fire(trace, "ACT-1", || {
        "the sandbox is (re)created, so the pod is killed first (KillPod and CreateSandbox)".into()
    });
    for eph in &pod.ephemeral_containers {
        actions.fire(trace, "EPH-1", || {
            format!(
                "ephemeral container {} is not started in a pass that recreates the sandbox",
                eph.name
            )
        });
        if rt.newest(&eph.name).is_some() {
            actions.fire(trace, "EPH-2", || {
                format!(
                    "ephemeral container {} already ran once and is never re-created",
                    eph.name
                )
            });
        }
    }
    if pod.restart_policy == RestartPolicy::Never
        && actions.attempt != 0
        && !rt.containers.is_empty()
    {
        actions.create_sandbox = false;
        actions.fire(trace, "ACT-2", || {
            "restartPolicy is Never, this is not the first sandbox and containers have already existed: \
             the pod is only killed, no new sandbox"
                .into()
        });
        return;
    }
    let to_start: Vec<usize> = pod
        .containers
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            let succeeded = rt
                .newest(&c.name)
                .is_some_and(|r| r.state == RuntimeState::Exited && r.exit_code == 0);
            !(pod.restart_policy == RestartPolicy::OnFailure && succeeded)
        })
        .map(|(i, _)| i)
        .collect();
    actions.fire(trace, "ACT-3", || {
        let names: Vec<&str> = to_start
            .iter()
            .map(|&i| pod.containers[i].name.as_str())
            .collect();
        format!(
            "containers to start in the new sandbox: {} (OnFailure skips those that exited 0)",
            crate::rules::go_slice(&names)
        )
    });
    if to_start.is_empty() {
        let any_created = pod.containers.iter().any(|c| {
            rt.newest(&c.name).is_some_and(|r| {
                matches!(
                    r.state,
                    RuntimeState::Created | RuntimeState::Running | RuntimeState::Exited
                )
            })
        });
        if any_created {
            actions.create_sandbox = false;
            actions.fire(trace, "ACT-4", || {
                "nothing is left to start and a regular container already has a record: no new sandbox".into()
            });
            return;
        }
    }
    if pod.has_init_containers() {
        actions.init_containers_to_start = vec![0];
        actions.fire(trace, "ACT-5", || {
            format!(
                "the pod has init containers: initialization restarts from {} (their records are purged)",
                pod.init_containers[0].name
            )
        });
        return;
    }
    actions.fire(trace, "ACT-6", || {
        "the regular containers are started in the new sandbox".into()
    });
    actions.containers_to_start = to_start;
}

/// CTR-1..6 for `spec.containers`, once the pod is initialized.
fn regular_containers(
    pod: &PodSpecView,
    rt: &RuntimeView,
    ctx: &PassContext,
    actions: &mut PodActions,
    trace: &mut Trace,
) {
    let restart_on_failure = pod.restart_policy.restarts_on_failure();
    let mut keep_count = 0;
    for (idx, container) in pod.containers.iter().enumerate() {
        let name = container.name.as_str();
        let newest = rt.newest(name);
        let Some(record) = newest.filter(|r| r.state == RuntimeState::Running) else {
            let restart = should_restart_traced(pod, name, newest, trace);
            actions.fire(trace, "CTR-1", || {
                let state = newest.map_or("no record", |r| r.state.as_str());
                if restart {
                    format!("{name} ({state}) is not running and is started")
                } else {
                    format!("{name} ({state}) is not running and stays down")
                }
            });
            if restart {
                actions.containers_to_start.push(idx);
                if let Some(unknown) = newest.filter(|r| r.state == RuntimeState::Unknown) {
                    actions.kill(
                        unknown,
                        KillReason::Unknown,
                        "Container is in \"unknown\" state, try killing it before restart".into(),
                    );
                    trace.say(|| {
                        format!("{name} is in unknown state: it is killed before the restart")
                    });
                }
            }
            continue;
        };

        let (rule, reason, mut message, restart) = if container.hash != record.hash {
            (
                "CTR-2",
                KillReason::DefinitionChanged,
                format!("Container {name} definition changed"),
                true,
            )
        } else if container.resize_restart {
            // kubelet's message has no ", will be restarted": the restart is the resize's.
            actions.containers_to_start.push(idx);
            actions.fire(trace, "CTR-RESIZE", || {
                format!("{name} is running but its resize requires a restart: it is killed and started again")
            });
            let message = format!("Container {name} resize requires restart");
            actions.kill(record, KillReason::ResizeRestart, message);
            continue;
        } else if ctx.probe(Some(record), ProbeType::Liveness)
            == Some(crate::model::ProbeResult::Failure)
        {
            (
                "CTR-3",
                KillReason::LivenessProbe,
                format!("Container {name} failed liveness probe"),
                restart_on_failure,
            )
        } else if ctx.probe(Some(record), ProbeType::Startup)
            == Some(crate::model::ProbeResult::Failure)
        {
            (
                "CTR-4",
                KillReason::StartupProbe,
                format!("Container {name} failed startup probe"),
                restart_on_failure,
            )
        } else {
            keep_count += 1;
            actions.fire(trace, "CTR-5", || format!("{name} is running and is kept"));
            continue;
        };
        if restart {
            message.push_str(", will be restarted");
            actions.containers_to_start.push(idx);
        }
        actions.fire(trace, rule, || {
            let why = match reason {
                KillReason::DefinitionChanged => "its definition (image) changed",
                KillReason::LivenessProbe => "its liveness probe failed",
                _ => "its startup probe failed",
            };
            let then = if restart {
                "and started again"
            } else {
                "and not restarted (restartPolicy Never)"
            };
            format!("{name} is running but {why}: it is killed {then}")
        });
        actions.kill(record, reason, message);
    }

    if keep_count == 0 && actions.containers_to_start.is_empty() {
        actions.kill_pod = true;
        let dropped = std::mem::take(&mut actions.init_containers_to_start);
        actions.fire(trace, "CTR-6", || {
            if dropped.is_empty() {
                "no container is kept and none is started: the pod is killed (KillPod)".into()
            } else {
                "no container is kept and none is started: the pod is killed (KillPod), and the sidecar \
                 starts are dropped because sidecars never keep a pod alive"
                    .into()
            }
        });
        if pod.ephemeral_containers.iter().any(|e| {
            rt.newest(&e.name)
                .is_some_and(|r| r.state == RuntimeState::Running)
        }) {
            trace.fire("EPH-3", || {
                "a running ephemeral container does not count as kept, so it does not keep the pod alive; KillPod stops it"
                    .into()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SandboxRecord, SandboxState};
    use crate::testkit::{exited, ready_sandbox, record, runtime};

    fn run(pod: &PodSpecView, rt: &RuntimeView, ctx: &PassContext) -> PodActions {
        let mut trace = Trace::quiet();
        let sandbox = crate::sandbox::check(&rt.sandboxes, pod.host_network, &mut trace);
        compute(pod, rt, ctx, &sandbox, &mut trace)
    }

    fn dead_sandbox() -> SandboxRecord {
        SandboxRecord {
            state: SandboxState::NotReady,
            ..ready_sandbox()
        }
    }

    #[test]
    fn act_2_never_only_skips_creation_once_containers_existed() {
        let pod = PodSpecView::new(RestartPolicy::Never, &["app"]);
        let mut rt = RuntimeView {
            sandboxes: vec![dead_sandbox()],
            containers: vec![],
        };
        let a = run(&pod, &rt, &PassContext::default());
        assert!(a.kill_pod && a.create_sandbox);
        assert_eq!(a.containers_to_start, [0]);
        rt.containers.push(exited("app", 10, 1));
        let a = run(&pod, &rt, &PassContext::default());
        assert!(a.kill_pod && !a.create_sandbox);
        assert_eq!(a.rules, ["ACT-1", "ACT-2"]);
    }

    #[test]
    fn ctr_6_kill_pod_when_nothing_is_kept_or_started() {
        let pod = PodSpecView::new(RestartPolicy::Never, &["a", "b"]);
        let rt = runtime(vec![exited("a", 10, 0), exited("b", 11, 3)]);
        let a = run(&pod, &rt, &PassContext::default());
        assert!(a.kill_pod && !a.create_sandbox);
        assert!(a.containers_to_start.is_empty() && a.containers_to_kill.is_empty());
    }

    #[test]
    fn ctr_1_unknown_record_is_killed_by_its_id() {
        let pod = PodSpecView::new(RestartPolicy::Always, &["app"]);
        let rt = runtime(vec![
            exited("app", 5, 1),
            record("app", RuntimeState::Unknown, 9),
        ]);
        let a = run(&pod, &rt, &PassContext::default());
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(a.containers_to_kill[0].container_id, "app-9");
        assert_eq!(a.attempts(&pod, &rt), [("app", ContainerAttempt::Next(1))]);
    }
}
