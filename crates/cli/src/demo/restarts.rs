//! `podlab demo restarts`: the three restartPolicy values against real exit codes 0 and 1.
//! Five pods, each with a container that exits 0 (`ok`) and/or one that exits 1 (`fail`):
//! kubelet restarts what the policy says (RST-3/4/5), crash-loops with a growing backoff, and
//! the pod's phase follows getPhase (PH-5b..e). The evidence: the STATUS and RESTARTS that
//! `get pods` prints, each pod's phase, the rule that decides for each container and the pod,
//! recomputed with the pure rules on the live runtime records and matched with what the agent
//! itself logged, and every restart count against the runtime's own records and exit codes.

use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use podlab_kubelet::node::view::{previous_status, spec_view};
use podlab_kubelet::restart::should_restart;
use podlab_kubelet::{sync_pass, PassContext};
use podlab_runtime::status::ContainerState;

use super::lab::{container, phase, restarts, show_pods, status_column, Lab};
use super::{say, Evidence, Shown};

const MANIFEST: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: always}
spec:
  restartPolicy: Always
  containers:
  - {name: ok, image: busybox, command: [sh, -c, "echo ok; exit 0"]}
  - {name: fail, image: busybox, command: [sh, -c, "echo fail; exit 1"]}
---
apiVersion: v1
kind: Pod
metadata: {name: on-failure}
spec:
  restartPolicy: OnFailure
  containers:
  - {name: ok, image: busybox, command: [sh, -c, "echo ok; exit 0"]}
  - {name: fail, image: busybox, command: [sh, -c, "echo fail; exit 1"]}
---
apiVersion: v1
kind: Pod
metadata: {name: on-failure-ok}
spec:
  restartPolicy: OnFailure
  containers:
  - {name: ok, image: busybox, command: [sh, -c, "echo ok; exit 0"]}
---
apiVersion: v1
kind: Pod
metadata: {name: never}
spec:
  restartPolicy: Never
  containers:
  - {name: ok, image: busybox, command: [sh, -c, "echo ok; exit 0"]}
  - {name: fail, image: busybox, command: [sh, -c, "echo fail; exit 1"]}
---
apiVersion: v1
kind: Pod
metadata: {name: never-ok}
spec:
  restartPolicy: Never
  containers:
  - {name: ok, image: busybox, command: [sh, -c, "echo ok; exit 0"]}
"#;

/// What each pod must show: (pod, STATUS, phase, the phase rule, per container: (name,
/// restarted?, the restart rule)).
type Expected = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, bool, &'static str)],
);

const EXPECTED: [Expected; 5] = [
    (
        "always",
        "CrashLoopBackOff",
        "Running",
        "PH-5b",
        &[("fail", true, "RST-5"), ("ok", true, "RST-5")],
    ),
    (
        "on-failure",
        "CrashLoopBackOff",
        "Running",
        "PH-5e",
        &[("fail", true, "RST-5"), ("ok", false, "RST-4")],
    ),
    (
        "on-failure-ok",
        "Completed",
        "Succeeded",
        "PH-5d",
        &[("ok", false, "RST-4")],
    ),
    (
        "never",
        "Error",
        "Failed",
        "PH-5c",
        &[("fail", false, "RST-3"), ("ok", false, "RST-3")],
    ),
    (
        "never-ok",
        "Completed",
        "Succeeded",
        "PH-5d",
        &[("ok", false, "RST-3")],
    ),
];

const LIMIT: Duration = Duration::from_secs(40);

pub fn run(evidence: &mut Evidence) -> Result<()> {
    let lab = Lab::open(
        "restarts",
        &[
            ("PODLAB_NODE_BACKOFF", "1s,30s"),
            ("PODLAB_NODE_VERBOSE", "1"),
            ("PODLAB_NETWORK", "none"),
        ],
    )?;
    say("A container that exits is restarted, or not, by its pod's restartPolicy: Always restarts");
    say("it whatever its exit code, OnFailure only after a non-zero exit, Never not at all. kubelet");
    say("waits longer before each restart of a container that keeps exiting (CrashLoopBackOff:");
    say("10 s doubling to 5 min; this demo's node agent runs with 1 s doubling to 30 s).");
    say(format!(
        "\n$ podlab apply -f restarts.yaml     # 5 pods; `ok` exits 0, `fail` exits 1   (PODLAB_ROOT={})",
        lab.root().display()
    ));
    let names = lab.apply(MANIFEST, "restarts.yaml")?;
    let outcome = watch_and_check(&lab, evidence);
    if super::keep() {
        return outcome;
    }
    say("\n$ podlab delete pod always on-failure on-failure-ok never never-ok");
    let deleted = lab.delete(&names);
    outcome?;
    deleted?;
    let (left, _) = lab.ctx.store.list::<Pod>(None)?;
    evidence.check(
        "every pod is deleted",
        left.is_empty(),
        format!("{} left", left.len()),
    );
    Ok(())
}

fn watch_and_check(lab: &Lab, evidence: &mut Evidence) -> Result<()> {
    say("\nWaiting for each pod to settle (restarted twice, or finished):");
    lab.wait_for("always", "restarted twice", LIMIT, |p| {
        restarts(p, "ok") >= 2 && restarts(p, "fail") >= 2
    })?;
    lab.wait_for("on-failure", "restarted twice", LIMIT, |p| {
        restarts(p, "fail") >= 2
    })?;
    for name in ["on-failure-ok", "never", "never-ok"] {
        lab.wait_for(name, "finished", LIMIT, |p| {
            matches!(phase(p).as_str(), "Succeeded" | "Failed")
        })?;
    }
    let pods = settled_snapshot(lab)?;
    show_pods(&lab.ctx)?;

    say("\nWhat decided, recomputed with kubelet's rules on the runtime's records (RST: restart this");
    say("container? PH: the pod's phase), and what the runtime recorded for each container:");
    for ((name, status, want_phase, phase_rule, containers), pod) in EXPECTED.iter().zip(&pods) {
        let observed = lab.observe(pod)?;
        let view = observed.view();
        let spec = spec_view(pod);
        let context = PassContext {
            previous: pod.status.as_ref().map(previous_status),
            ..PassContext::default()
        };
        let pass = sync_pass(&spec, &view, &context);
        let policy = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_default();
        say(format!(
            "\n  pod {name} (restartPolicy {policy}): STATUS {}, phase {} by {}",
            status_column(pod),
            phase(pod),
            pass.phase.rules.join(", ")
        ));
        evidence.compare(
            format!("{name}: get pods shows STATUS {status}"),
            status_column(pod).as_str(),
            *status,
            true,
        );
        evidence.compare(
            format!("{name}: phase {want_phase}"),
            phase(pod).as_str(),
            *want_phase,
            true,
        );
        evidence.check(
            format!("{name}: the phase is decided by {phase_rule}"),
            pass.phase.rules.contains(phase_rule),
            pass.phase.rules.join(", "),
        );
        let logged = lab.agent_said(name, phase_rule);
        evidence.check(
            format!("{name}: the node agent's own pass logged {phase_rule}"),
            !logged.is_empty(),
            logged
                .last()
                .cloned()
                .unwrap_or_else(|| "not in node.log".into()),
        );
        say(format!(
            "    {:<9}  {:<12}  {:<6}  {:<8}  {:<15}  {:<10}  {}",
            "container",
            "restartCount",
            "rule",
            "decides",
            "runtime records",
            "exit codes",
            "newest attempt"
        ));
        for (container, restarted, rule) in containers.iter() {
            let api_restarts = restarts(pod, container);
            let records: Vec<_> = observed
                .containers
                .iter()
                .filter(|c| c.metadata.name == *container)
                .collect();
            let newest = records.iter().max_by_key(|c| c.created_at);
            let exit_codes: Vec<i32> = records.iter().filter_map(|c| c.exit_code).collect();
            let decision = should_restart(&spec, view.newest(container));
            say(format!(
                "    {container:<9}  {api_restarts:<12}  {:<6}  {:<8}  {:<15}  {:<10}  {}",
                decision.rule.unwrap_or("running"),
                if decision.restart {
                    "restart"
                } else {
                    "leave it"
                },
                records.len(),
                exit_codes.shown(),
                newest.map_or(0, |c| c.metadata.attempt),
            ));
            evidence.check(
                format!("{name}/{container}: {rule} decides"),
                decision.rule == Some(*rule) && decision.restart == *restarted,
                decision.rule.unwrap_or("no rule").to_string(),
            );
            evidence.check(
                format!(
                    "{name}/{container}: {}",
                    if *restarted {
                        "restarted (restartCount >= 2)"
                    } else {
                        "never restarted (restartCount 0)"
                    }
                ),
                if *restarted {
                    api_restarts >= 2
                } else {
                    api_restarts == 0
                },
                format!("restartCount {api_restarts}"),
            );
            let want_code = if *container == "ok" { 0 } else { 1 };
            evidence.check(
                format!("{name}/{container}: restartCount = the newest runtime record's attempt, every run exited {want_code}"),
                newest.is_some_and(|c| c.metadata.attempt as i32 == api_restarts)
                    && !exit_codes.is_empty()
                    && exit_codes.iter().all(|c| *c == want_code)
                    && records.iter().all(|c| c.state == ContainerState::Exited),
                format!(
                    "restartCount {api_restarts}, newest attempt {}, exit codes {}",
                    newest.map(|c| c.metadata.attempt).shown(),
                    exit_codes.shown()
                ),
            );
        }
    }
    say("\nNote `ok` under Always: exit 0 is no reason to stay down when the policy is Always, so it");
    say("crash-loops too; and `never` is Failed although one of its containers succeeded (PH-5c).");
    Ok(())
}

/// The pods at a moment when no container of theirs is running, so that the phase rule of a
/// crash-looping pod is the one of its backoff (PH-5b/5e), not PH-4 of the instant a restarted
/// container runs, and with every container to be restarted waiting in its backoff; the store
/// is read twice and must agree.
fn settled_snapshot(lab: &Lab) -> Result<Vec<Pod>> {
    let start = Instant::now();
    loop {
        let pods: Vec<Pod> = EXPECTED
            .iter()
            .map(|(name, ..)| lab.pod(name))
            .collect::<Result<_>>()?;
        let mut quiet = true;
        for (pod, (_, _, _, _, containers)) in pods.iter().zip(&EXPECTED) {
            // A container to be restarted is shown waiting in its backoff, not as it exited.
            quiet &= containers
                .iter()
                .filter(|(_, restarted, _)| *restarted)
                .all(|(c, ..)| {
                    container(pod, c)
                        .and_then(|s| s.state)
                        .and_then(|s| s.waiting)
                        .and_then(|w| w.reason)
                        .as_deref()
                        == Some("CrashLoopBackOff")
                });
            let observed = lab.observe(pod)?;
            quiet &= !observed
                .containers
                .iter()
                .any(|c| c.state != ContainerState::Exited);
            quiet &= pod
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_none()));
        }
        let again: Vec<Option<String>> = EXPECTED
            .iter()
            .map(|(name, ..)| lab.pod(name).ok().and_then(|p| p.metadata.resource_version))
            .collect();
        let same = pods
            .iter()
            .map(|p| p.metadata.resource_version.clone())
            .eq(again);
        if (quiet && same) || start.elapsed() > Duration::from_secs(15) {
            return Ok(pods);
        }
        super::poll_pause(Duration::from_millis(50));
    }
}
