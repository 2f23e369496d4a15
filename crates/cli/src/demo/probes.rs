//! `podlab demo probes`: kubelet's probes on real containers. A liveness probe (exec) that
//! starts failing makes the agent kill the container after failureThreshold failures and start
//! it again (Unhealthy and Killing events, restartCount 1: CTR-3); a readiness probe makes the
//! Ready and ContainersReady conditions follow a file that `podlab exec` creates and removes
//! (False → True → False), without any restart (PRB-3).

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Event, Pod};

use super::kit::{container_id, exec_text};
use super::lab::{condition, container, restarts, show_pods, Lab};
use super::{say, Evidence, Shown};

const MANIFEST: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: liveness}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [{name: state, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    # The first run is healthy for 2 s, then its /tmp/healthy goes; the run after the restart
    # (its own new root filesystem) stays healthy. SIGTERM ends it at once.
    command:
    - sh
    - -c
    - |
      trap 'exit 0' TERM
      touch /tmp/healthy
      if [ ! -e /state/ran ]; then touch /state/ran; (sleep 2; rm /tmp/healthy) & fi
      sleep 1000 & wait
    volumeMounts: [{name: state, mountPath: /state}]
    livenessProbe:
      exec: {command: [cat, /tmp/healthy]}
      periodSeconds: 1
      failureThreshold: 2
---
apiVersion: v1
kind: Pod
metadata: {name: readiness}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "trap 'exit 0' TERM; sleep 1000 & wait"]
    readinessProbe:
      exec: {command: [cat, /tmp/ready]}
      periodSeconds: 1
      failureThreshold: 1
"#;

const LIMIT: Duration = Duration::from_secs(30);

pub fn run(evidence: &mut Evidence) -> Result<()> {
    let lab = Lab::open(
        "probes",
        &[("PODLAB_NODE_VERBOSE", "1"), ("PODLAB_NETWORK", "none")],
    )?;
    say("kubelet runs each probe of a container on its period (here every second) in the");
    say("container's namespaces. A liveness probe that fails failureThreshold times in a row gets");
    say("the container killed and restarted; a readiness probe only decides whether the pod is");
    say("Ready (whether a Service would send it traffic), and never restarts anything.");
    say("\n$ podlab apply -f probes.yaml     # liveness: exec cat /tmp/healthy; readiness: exec cat /tmp/ready");
    let names = lab.apply(MANIFEST, "probes.yaml")?;
    let outcome = liveness(&lab, evidence).and_then(|()| readiness(&lab, evidence));
    if super::keep() {
        return outcome;
    }
    say("\n$ podlab delete pod liveness readiness");
    let deleted = lab.delete(&names);
    outcome?;
    deleted
}

fn count(events: &[Event], reason: &str, message_start: &str) -> i32 {
    events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| {
            e.message
                .as_deref()
                .is_some_and(|m| m.starts_with(message_start))
        })
        .map(|e| e.count.unwrap_or(1))
        .sum()
}

fn liveness(lab: &Lab, evidence: &mut Evidence) -> Result<()> {
    say("\nliveness: healthy for 2 s, then /tmp/healthy is removed (failureThreshold 2, period 1 s):");
    let pod = lab.wait_for("liveness", "restarted and running", LIMIT, |p| {
        restarts(p, "app") == 1
            && container(p, "app")
                .and_then(|s| s.state)
                .is_some_and(|s| s.running.is_some())
    })?;
    show_pods(&lab.ctx)?;
    let events = lab.events(&pod)?;
    say("\n$ podlab describe pod liveness     # its events");
    for e in &events {
        say(format!(
            "  {:<8} {:<10} x{:<2} {}",
            e.type_.as_deref().unwrap_or(""),
            e.reason.as_deref().unwrap_or(""),
            e.count.unwrap_or(1),
            e.message.as_deref().unwrap_or("")
        ));
    }
    let unhealthy = count(&events, "Unhealthy", "Liveness probe failed");
    let killing = count(&events, "Killing", "Container app failed liveness probe");
    evidence.check(
        "liveness: Unhealthy events for failureThreshold (2) failures",
        unhealthy >= 2,
        format!("{unhealthy} failures recorded"),
    );
    evidence.compare(
        "liveness: one Killing event (failed liveness probe, will be restarted)",
        killing,
        1,
        true,
    );
    let status = container(&pod, "app").context("the app container's status")?;
    let last = status
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.clone());
    evidence.check(
        "liveness: restartCount 1, running again, the killed run in lastState",
        status.restart_count == 1
            && last.as_ref().is_some_and(|t| t.exit_code == 0)
            && status.state.as_ref().is_some_and(|s| s.running.is_some()),
        format!(
            "restartCount {}, lastState exit code {}",
            status.restart_count,
            last.map(|t| t.exit_code).shown()
        ),
    );
    let observed = lab.observe(&pod)?;
    let records: Vec<_> = observed
        .containers
        .iter()
        .filter(|c| c.metadata.name == "app")
        .collect();
    evidence.check(
        "liveness: the runtime has the killed run (SIGTERM, exited 0) and the new one (attempt 1)",
        records.len() == 2
            && records
                .iter()
                .any(|c| c.metadata.attempt == 0 && c.exit_code == Some(0))
            && records
                .iter()
                .any(|c| c.metadata.attempt == 1 && c.exit_code.is_none()),
        records
            .iter()
            .map(|c| match c.exit_code {
                Some(code) => format!("attempt {} exited {code}", c.metadata.attempt),
                None => format!("attempt {} running", c.metadata.attempt),
            })
            .collect::<Vec<_>>()
            .shown(),
    );
    let rule = lab.show_rule("liveness", "CTR-3", "\nThe agent's pass that killed it: ");
    evidence.check(
        "liveness: the agent decided by CTR-3 (running, liveness Failure: kill, restart)",
        rule.is_some(),
        rule.unwrap_or_default(),
    );
    Ok(())
}

fn readiness(lab: &Lab, evidence: &mut Evidence) -> Result<()> {
    say("\nreadiness: the probe reads /tmp/ready, which does not exist yet (failureThreshold 1):");
    let is = |want: &'static str| {
        move |p: &Pod| condition(p, "Ready") == want && condition(p, "ContainersReady") == want
    };
    let running = |p: &Pod| {
        container(p, "app")
            .and_then(|s| s.state)
            .is_some_and(|s| s.running.is_some())
    };
    let before = lab.wait_for("readiness", "running, not ready", LIMIT, |p| {
        running(p) && is("False")(p)
    })?;
    let runtime = lab.ctx.runtime()?;
    let id = container_id(&before, "app")?;
    say("$ podlab exec readiness -- touch /tmp/ready");
    exec_text(&runtime, &id, &["touch", "/tmp/ready"])?;
    let ready = lab.wait_for("readiness", "ready", LIMIT, is("True"))?;
    say("$ podlab exec readiness -- rm /tmp/ready");
    exec_text(&runtime, &id, &["rm", "/tmp/ready"])?;
    let after = lab.wait_for("readiness", "not ready again", LIMIT, is("False"))?;
    let transition = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready").cloned())
            .map(|c| {
                format!(
                    "{} since {} ({})",
                    c.status,
                    c.last_transition_time
                        .map(|t| t.0.to_string())
                        .unwrap_or_default(),
                    c.reason.unwrap_or_default()
                )
            })
            .unwrap_or_default()
    };
    say(format!(
        "  Ready: {}  →  {}  →  {}",
        transition(&before),
        transition(&ready),
        transition(&after)
    ));
    for (when, pod, want) in [
        ("before the file exists", &before, "False"),
        ("once it exists", &ready, "True"),
        ("once it is gone", &after, "False"),
    ] {
        evidence.check(
            format!("readiness: Ready and ContainersReady are {want} {when}"),
            condition(pod, "Ready") == want && condition(pod, "ContainersReady") == want,
            format!(
                "Ready {}, ContainersReady {}",
                condition(pod, "Ready"),
                condition(pod, "ContainersReady")
            ),
        );
    }
    evidence.compare(
        "readiness: never restarted (readiness decides traffic, not life)",
        restarts(&after, "app"),
        0,
        true,
    );
    let failed = count(&lab.events(&after)?, "Unhealthy", "Readiness probe failed");
    evidence.check(
        "readiness: Unhealthy events for the failed readiness probes",
        failed >= 2,
        format!("{failed} failures recorded"),
    );
    let rule = lab
        .agent_said("readiness", "PRB-3")
        .into_iter()
        .find(|l| l.contains("ready = true"));
    evidence.check(
        "readiness: the agent's status pass made it ready by PRB-3",
        rule.is_some(),
        rule.unwrap_or_default(),
    );
    Ok(())
}
