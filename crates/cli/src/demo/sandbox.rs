//! `podlab demo sandbox`: what kubelet does when a pod's sandbox dies. `kill -9` of the pause
//! process leaves the pod without the process that held its namespaces; the next sync pass
//! finds the newest sandbox not ready (SBX-3), kills what is left of the pod, makes a new
//! sandbox (attempt 1, a `SandboxChanged` event) — a new pause process in NEW namespaces — and
//! starts the containers again. Under `restartPolicy: Never`, once a container has run, no new
//! sandbox is made (ACT-2): the pod is killed and ends Succeeded or Failed by its exit codes.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_kubelet::rules::Trace;
use podlab_ns::{ops, NsKind};
use podlab_runtime::status::{SandboxState, SandboxStatus};

use super::lab::{container, phase, restarts, sandboxes_of, show_pods, Lab};
use super::{say, Evidence, Shown};

const MANIFEST: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: sandbox}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - {name: app, image: busybox, command: [sh, -c, "trap 'exit 0' TERM; sleep 1000 & wait"]}
---
apiVersion: v1
kind: Pod
metadata: {name: sandbox-never}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - {name: app, image: busybox, command: [sh, -c, "trap 'exit 0' TERM; sleep 1000 & wait"]}
"#;

const LIMIT: Duration = Duration::from_secs(30);
const SHARED: [NsKind; 3] = [NsKind::Net, NsKind::Ipc, NsKind::Uts];

pub fn run(evidence: &mut Evidence) -> Result<()> {
    let lab = Lab::open(
        "sandbox",
        &[("PODLAB_NODE_VERBOSE", "1"), ("PODLAB_NETWORK", "none")],
    )?;
    say("The pause process is the pod's sandbox: it holds the net, ipc and uts namespaces that");
    say("the containers joined. If it dies, those namespaces are the pod's no longer, and kubelet");
    say("does not patch them up: it throws the sandbox away and makes a new one.");
    say("\n$ podlab apply -f sandbox.yaml     # `sandbox` (restartPolicy Always) and `sandbox-never` (Never)");
    let names = lab.apply(MANIFEST, "sandbox.yaml")?;
    let outcome = recreated(&lab, evidence).and_then(|()| never(&lab, evidence));
    if super::keep() {
        return outcome;
    }
    say("\n$ podlab delete pod sandbox sandbox-never");
    let deleted = lab.delete(&names);
    outcome?;
    deleted
}

fn running(pod: &Pod) -> bool {
    container(pod, "app")
        .and_then(|s| s.state)
        .is_some_and(|s| s.running.is_some())
}

/// The pod's ready sandbox, its pause pid and the inode ids of pause's shared namespaces.
fn ready_sandbox(lab: &Lab, pod: &Pod) -> Result<(SandboxStatus, i32, Vec<u64>)> {
    let runtime = lab.ctx.runtime()?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let sandbox = runtime
        .list_pod_sandboxes()?
        .into_iter()
        .filter(|s| s.metadata.uid == uid && s.state == SandboxState::Ready)
        .max_by_key(|s| s.created_at)
        .context("the pod's ready sandbox")?;
    let pause = sandbox.pause_pid.context("the sandbox's pause pid")?;
    let inodes = SHARED
        .iter()
        .map(|k| ops::ns_inode(pause, *k))
        .collect::<Result<_, _>>()?;
    Ok((sandbox, pause, inodes))
}

fn kill9(pid: i32) -> Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL)
        .with_context(|| format!("kill -9 {pid}"))
}

fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

fn inode_row(label: &str, pid: i32, inodes: &[u64]) {
    say(format!(
        "  {label:<22} pid {pid:>6}   net {:>11}  ipc {:>11}  uts {:>11}",
        inodes[0], inodes[1], inodes[2]
    ));
}

fn recreated(lab: &Lab, evidence: &mut Evidence) -> Result<()> {
    let pod = lab.wait_for("sandbox", "running", LIMIT, running)?;
    lab.wait_for("sandbox-never", "running", LIMIT, running)?;
    let (old, old_pause, old_inodes) = ready_sandbox(lab, &pod)?;
    say("\nBefore:");
    inode_row(
        &format!("pause, attempt {}", old.metadata.attempt),
        old_pause,
        &old_inodes,
    );
    // An inode id names a namespace only while it lives: once freed, the number may be given
    // to the next namespace made. Holding the old ones open (as a pin does) keeps them alive,
    // so that a different id below means a different namespace.
    let held: Vec<_> = SHARED
        .iter()
        .map(|k| ops::open_pid(old_pause, *k))
        .collect::<Result<_, _>>()?;
    say(format!(
        "(podlab holds the old namespaces open, so that their inode ids cannot be reused)\n\n$ kill -9 {old_pause}     # the pause process of pod sandbox"
    ));
    kill9(old_pause)?;

    let after = lab.wait_for("sandbox", "running in a new sandbox", LIMIT, |p| {
        restarts(p, "app") >= 1 && running(p)
    })?;
    let (new, new_pause, new_inodes) = ready_sandbox(lab, &after)?;
    say("\nAfter:");
    inode_row(
        &format!("pause, attempt {}", new.metadata.attempt),
        new_pause,
        &new_inodes,
    );
    let app = lab.observe(&after)?;
    let app_now = app
        .containers
        .iter()
        .filter(|c| c.metadata.name == "app" && c.sandbox_id == new.id)
        .max_by_key(|c| c.created_at)
        .context("app's record in the new sandbox")?;
    let app_pid = app_now.pid.context("app's pid")?;
    let app_inodes: Vec<u64> = SHARED
        .iter()
        .map(|k| ops::ns_inode(app_pid, *k))
        .collect::<Result<_, _>>()?;
    inode_row("app (restarted)", app_pid, &app_inodes);

    // The decision, as the agent's pass made it and as the pure rules make it on the dead
    // sandbox's record.
    let view = app.view();
    let dead: Vec<_> = view
        .sandboxes
        .iter()
        .filter(|s| s.id == old.id.as_str())
        .cloned()
        .collect();
    let check = podlab_kubelet::sandbox::check(&dead, false, &mut Trace::quiet());
    let logged = lab.show_rule("sandbox", "SBX-3", "\nThe pass after the kill: ");
    evidence.check(
        "the agent recreated the sandbox by SBX-3 (the newest sandbox is not ready)",
        logged.is_some() && check.rule == "SBX-3" && check.recreate,
        format!(
            "the agent logged \"{}\"; the rules on the dead sandbox: {} ({}), new attempt {}",
            logged.as_deref().unwrap_or("nothing"),
            check.rule,
            check.reason.as_str(),
            check.attempt
        ),
    );
    evidence.compare(
        "the new sandbox is attempt 1",
        new.metadata.attempt,
        old.metadata.attempt + 1,
        true,
    );
    evidence.check(
        "a new pause process",
        new_pause != old_pause && gone(old_pause),
        format!("{old_pause} → {new_pause}"),
    );
    for (i, kind) in SHARED.iter().enumerate() {
        evidence.check(
            format!("a NEW {kind} namespace, and the restarted app is in it"),
            new_inodes[i] != old_inodes[i] && app_inodes[i] == new_inodes[i],
            format!(
                "old {} new {} app {}",
                old_inodes[i], new_inodes[i], app_inodes[i]
            ),
        );
    }
    drop(held);
    let events = lab.events(&after)?;
    let changed = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("SandboxChanged"));
    evidence.check(
        "a SandboxChanged event",
        changed.is_some(),
        changed
            .and_then(|e| e.message.clone())
            .unwrap_or_else(|| "none".into()),
    );
    evidence.compare(
        "the container was started again in it (restartCount 1)",
        restarts(&after, "app"),
        1,
        true,
    );
    show_pods(&lab.ctx)?;
    Ok(())
}

fn never(lab: &Lab, evidence: &mut Evidence) -> Result<()> {
    say("\nThe same under restartPolicy Never, where app has run (its container record exists):");
    let pod = lab.pod("sandbox-never")?;
    let (_, pause, _) = ready_sandbox(lab, &pod)?;
    say(format!(
        "$ kill -9 {pause}     # the pause process of pod sandbox-never"
    ));
    kill9(pause)?;
    let after = lab.wait_for("sandbox-never", "finished", LIMIT, |p| {
        matches!(phase(p).as_str(), "Succeeded" | "Failed")
    })?;
    let runtime = lab.ctx.runtime()?;
    let sandboxes = sandboxes_of(&runtime, &after)?;
    let logged = lab.show_rule("sandbox-never", "ACT-2", "  the pass after the kill: ");
    evidence.check(
        "Never: no new sandbox (ACT-2); the pod is only killed",
        sandboxes.len() == 1 && logged.is_some(),
        format!(
            "{} sandbox(es); the agent logged \"{}\"",
            sandboxes.len(),
            logged.as_deref().unwrap_or("nothing")
        ),
    );
    let app = container(&after, "app").context("app's status")?;
    let terminated = app.state.as_ref().and_then(|s| s.terminated.clone());
    evidence.check(
        "Never: app was stopped, not restarted, and the phase follows its exit code",
        app.restart_count == 0
            && terminated
                .as_ref()
                .is_some_and(|t| (t.exit_code == 0) == (phase(&after) == "Succeeded")),
        format!(
            "phase {}, app exit code {}, restartCount {}",
            phase(&after),
            terminated.map(|t| t.exit_code).shown(),
            app.restart_count
        ),
    );
    show_pods(&lab.ctx)?;
    Ok(())
}
