//! One reconcile pass evaluated as pure functions (spec section 1): status, phase and
//! conditions first, then — unless the pod is terminal or the network is down — the sandbox
//! check and computePodActions whose result the node agent carries out.

use crate::actions::{self, PodActions};
use crate::conditions::{self, PodConditions};
use crate::events;
use crate::model::{ContainerSpecView, PassContext, PodSpecView, RuntimeView};
use crate::phase::{self, PhaseDecision};
use crate::rules::{RuleId, Trace};
use crate::sandbox::{self, SandboxCheck};
use crate::status::{self, PodStatuses};

/// Everything one pass decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResult {
    pub statuses: PodStatuses,
    pub phase: PhaseDecision,
    pub conditions: PodConditions,
    pub sandbox: SandboxCheck,
    /// computePodActions' pure result, also when the runtime reconcile is not run.
    pub actions: PodActions,
    /// False when the pass stops before the runtime reconcile (terminal phase, or the network
    /// is not ready for a pod network pod).
    pub runtime_sync_called: bool,
    /// The runtime reconcile emits `SandboxChanged` (a sandbox is created and an old id was reported).
    pub sandbox_changed_event: bool,
    /// The pass stopped with `NetworkNotReady` and retries after about 1 s.
    pub network_not_ready: bool,
    /// Every rule that fired, in order.
    pub rules: Vec<RuleId>,
}

impl SyncResult {
    /// The events the pass itself emits (reason, message); start/kill events come from
    /// carrying out the actions.
    pub fn events(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.network_not_ready {
            out.push((
                events::NETWORK_NOT_READY,
                events::network_not_ready_message("the runtime reports its network not ready"),
            ));
        }
        if self.runtime_sync_called && self.sandbox_changed_event {
            out.push((
                events::SANDBOX_CHANGED,
                events::SANDBOX_CHANGED_MESSAGE.to_string(),
            ));
        }
        out
    }
}

/// One pass; rule IDs are recorded, no narration is formatted.
pub fn sync_pass(pod: &PodSpecView, rt: &RuntimeView, ctx: &PassContext) -> SyncResult {
    sync_pass_traced(pod, rt, ctx, &mut Trace::quiet())
}

/// One pass with a narration line per decision.
pub fn sync_pass_narrated(
    pod: &PodSpecView,
    rt: &RuntimeView,
    ctx: &PassContext,
) -> (SyncResult, Vec<String>) {
    let mut trace = Trace::narrated();
    let mut result = sync_pass_traced(pod, rt, ctx, &mut trace);
    let (rules, lines) = trace.into_parts();
    result.rules = rules;
    (result, lines)
}

/// One pass into a caller's trace.
pub fn sync_pass_traced(
    pod: &PodSpecView,
    rt: &RuntimeView,
    ctx: &PassContext,
    trace: &mut Trace,
) -> SyncResult {
    trace.say(|| {
        "Step 1: the API status, phase and conditions are computed from the runtime view.".into()
    });
    let statuses = status::compute(pod, rt, ctx, trace);
    let phase = phase::compute(pod, rt, &statuses, ctx, trace);
    // The sandbox check feeds both PodReadyToStartContainers and computePodActions.
    let mut sandbox_trace = trace.child();
    let sandbox = sandbox::check(&rt.sandboxes, pod.host_network, &mut sandbox_trace);
    let visible = (!ctx.no_container_statuses).then_some(&statuses);
    let conditions = conditions::compute(pod, &sandbox, visible, phase.phase, ctx, trace);

    let terminal = phase.phase.is_terminal() || ctx.pod_is_terminal;
    let network_not_ready = !ctx.network_ready && !pod.host_network;
    let runtime_sync_called = !terminal && !network_not_ready;
    if terminal {
        trace.say(|| {
            "Step 2: the pod is terminal, so the runtime reconcile is not run; the termination path kills \
             what still runs and stops the sandbox. The actions below are computePodActions' pure result."
                .into()
        });
    } else if network_not_ready {
        trace.say(|| {
            "Step 3: the network is not ready: event NetworkNotReady, retry in about 1 s; the actions below \
             are computePodActions' pure result."
                .into()
        });
    } else {
        trace.say(|| "Step 5: the runtime reconcile runs computePodActions.".into());
    }

    // Told here, where the reconcile looks at it, though it was computed before the conditions.
    trace.absorb(sandbox_trace);
    let actions = actions::compute(pod, rt, ctx, &sandbox, trace);
    let sandbox_changed_event = actions.create_sandbox && !actions.sandbox_id.is_empty();
    trace.say(|| summary(pod, &actions));
    if actions.create_sandbox {
        trace.say(|| {
            if sandbox_changed_event {
                format!(
                    "Event SandboxChanged: \"{}\" (old sandbox {})",
                    events::SANDBOX_CHANGED_MESSAGE,
                    actions.sandbox_id
                )
            } else {
                "No SandboxChanged event: no old sandbox id was reported.".into()
            }
        });
    }
    SyncResult {
        statuses,
        phase,
        conditions,
        sandbox,
        actions,
        runtime_sync_called,
        sandbox_changed_event,
        network_not_ready,
        rules: trace.rules().to_vec(),
    }
}

/// One line with what computePodActions decided.
fn summary<'p>(pod: &'p PodSpecView, actions: &PodActions) -> String {
    fn names<'a>(list: impl Iterator<Item = &'a str>) -> String {
        crate::rules::go_slice(&list.collect::<Vec<_>>())
    }
    let mut parts = Vec::new();
    if actions.kill_pod {
        parts.push("kill the pod".to_string());
    }
    if actions.create_sandbox {
        parts.push(format!("create a sandbox with attempt {}", actions.attempt));
    }
    if !actions.containers_to_kill.is_empty() && !actions.kill_pod {
        let killed = names(actions.containers_to_kill.iter().map(|k| k.name.as_str()));
        parts.push(format!("kill {killed}"));
    }
    let pick = |indexes: &[usize], list: &'p [ContainerSpecView]| -> Vec<&'p str> {
        indexes.iter().map(|&i| list[i].name.as_str()).collect()
    };
    let ephemeral: Vec<&str> = actions
        .ephemeral_containers_to_start
        .iter()
        .map(|&i| pod.ephemeral_containers[i].name.as_str())
        .collect();
    let starts = [
        ("start ephemeral", ephemeral),
        (
            "start init",
            pick(&actions.init_containers_to_start, &pod.init_containers),
        ),
        ("start", pick(&actions.containers_to_start, &pod.containers)),
    ];
    for (what, list) in starts {
        if !list.is_empty() {
            parts.push(format!("{what} {}", crate::rules::go_slice(&list)));
        }
    }
    if parts.is_empty() {
        "Actions: nothing to do.".into()
    } else {
        format!("Actions: {}.", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RestartPolicy, RuntimeState};
    use crate::phase::Phase;
    use crate::testkit::{record, runtime};

    fn healthy() -> (PodSpecView, RuntimeView) {
        let pod = PodSpecView::new(RestartPolicy::Always, &["a", "b", "c"]);
        let rt = runtime(
            ["a", "b", "c"]
                .iter()
                .map(|n| record(n, RuntimeState::Running, 10))
                .collect(),
        );
        (pod, rt)
    }

    #[test]
    fn healthy_pod_has_nothing_to_do() {
        let (pod, rt) = healthy();
        let r = sync_pass(&pod, &rt, &PassContext::default());
        assert!(r.runtime_sync_called);
        assert!(!r.actions.kill_pod && !r.actions.create_sandbox);
        assert!(
            r.actions.containers_to_start.is_empty() && r.actions.containers_to_kill.is_empty()
        );
        assert_eq!(r.phase.phase, Phase::Running);
        assert!(r.conditions.ready.is_true());
        assert!(r.events().is_empty());
    }

    #[test]
    fn quiet_and_narrated_passes_decide_the_same() {
        let (pod, mut rt) = healthy();
        rt.sandboxes[0].state = crate::model::SandboxState::NotReady;
        let quiet = sync_pass(&pod, &rt, &PassContext::default());
        let (narrated, lines) = sync_pass_narrated(&pod, &rt, &PassContext::default());
        assert_eq!(quiet, narrated);
        assert!(lines.iter().any(|l| l.starts_with("SBX-3: ")));
        assert_eq!(narrated.events()[0].0, events::SANDBOX_CHANGED);
    }

    #[test]
    fn terminal_phase_skips_the_runtime_reconcile() {
        let (pod, rt) = healthy();
        let ctx = PassContext {
            eviction: Some(crate::model::Eviction {
                reason: "Evicted".into(),
                message: "The node was low on resource: memory.".into(),
            }),
            ..PassContext::default()
        };
        let r = sync_pass(&pod, &rt, &ctx);
        assert_eq!(r.phase.phase, Phase::Failed);
        assert_eq!(r.phase.reason.as_deref(), Some("Evicted"));
        assert!(!r.runtime_sync_called);
    }
}
