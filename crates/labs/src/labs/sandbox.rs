//! Lab 9, sandbox recreation: kill the pause process and see kubelet's decision. The pod's
//! namespaces die with pause; kubelet's `podSandboxChanged` finds the newest sandbox not ready
//! (SBX-3), kills what is left and makes a new sandbox (attempt 1, a `SandboxChanged` event),
//! in NEW namespaces, and starts the containers again. Under `restartPolicy: Never`, once a
//! container has run, no sandbox is made again (ACT-2): the pod just ends. The check reads the
//! runtime's sandbox records, the namespaces of the new pause and of the container, the phase
//! and the events.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_ns::NsKind;
use podlab_runtime::status::SandboxState;

use crate::env::Env;
use crate::kit::{pods, procs};
use crate::{Lab, Level, Verdict};

const ALWAYS: &str = "sandbox-always";
const NEVER: &str = "sandbox-never";

pub static LAB: Lab = Lab {
    number: 9,
    name: "sandbox",
    title: "Kill the pause process: kubelet's sandbox decision",
    level: Level::Intermediate,
    minutes: 15,
    goal: "Pods sandbox-always (restartPolicy Always) and sandbox-never (Never) each run one
container. Kill -9 the pause process of EACH pod, and see what kubelet decides:
1. sandbox-always gets a new sandbox: a new pause process in NEW namespaces, and its container
   running again inside them (a SandboxChanged event says so);
2. sandbox-never gets no new sandbox: its container has run, so kubelet only kills the pod, and
   it ends (Succeeded or Failed).",
    hints: &[
        "`podlab ns ls -t net` lists each pod's network namespace with its pause process \
(podlab-pause sandbox=...). `podlab describe pod NAME` shows the events afterwards.",
        "kubelet's podSandboxChanged (reference section 2.1): a sandbox whose pause is gone is \
not ready, so the pod needs a new one (SBX-3) — unless restartPolicy is Never and a container \
has already run (ACT-2). Predict with `podlab explain`, then kill.",
        "kill -9 <pause pid of sandbox-always>; kill -9 <pause pid of sandbox-never>\n\
podlab get pods -w\n\
podlab describe pod sandbox-always     # SandboxChanged",
    ],
    not_yet: "sandbox-always still has its first sandbox",
    mistake_story: "killing the app container's process instead of pause: the container is \
restarted in the SAME sandbox",
    scene,
    check,
    solve,
    mistake,
    reset,
};

const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: sandbox-always
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
---
apiVersion: v1
kind: Pod
metadata:
  name: sandbox-never
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
";

fn scene(env: &Env) -> Result<()> {
    env.apply("sandbox-pods.yaml", MANIFEST)?;
    for pod in [ALWAYS, NEVER] {
        let pod = pods::wait_running(env, pod)?;
        let pause = pods::pause_pid(env, &pod)?.unwrap_or(0);
        env.say(format!(
            "pod {}: pause pid {pause}, net namespace {}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            procs::read(pause)
                .and_then(|p| p.ns(NsKind::Net))
                .unwrap_or(0)
        ));
    }
    Ok(())
}

fn check_always(env: &Env, verdict: &mut Verdict, pod: &Pod) -> Result<()> {
    let sandboxes = pods::sandboxes(env, pod)?;
    let first = sandboxes.first().context("the pod has no sandbox")?;
    let Some(newest) = sandboxes.last().filter(|s| s.id != first.id) else {
        let alive = first
            .pause_pid
            .filter(|p| procs::read(*p).is_some_and(|p| !p.is_zombie()));
        verdict.missing(format!(
            "{ALWAYS} still has its first sandbox (attempt {}){}",
            first.metadata.attempt,
            alive.map_or(String::new(), |p| format!("; its pause process {p} lives"))
        ));
        return Ok(());
    };
    verdict.part(
        newest.state == SandboxState::Ready,
        format!(
            "{ALWAYS} has a new sandbox, attempt {}, ready; the first is {:?}",
            newest.metadata.attempt, first.state
        ),
        format!("{ALWAYS}'s new sandbox is not ready yet"),
    );
    let (old_net, new_net) = (
        first.namespace_inode(NsKind::Net),
        newest.namespace_inode(NsKind::Net),
    );
    verdict.part(
        old_net != new_net,
        format!("the new sandbox has NEW namespaces (net {old_net:?} -> {new_net:?})"),
        "the new sandbox has the old network namespace",
    );
    let app = pods::container_pid(env, pod, "app")?;
    let app_net = app.and_then(|p| procs::read(p)?.ns(NsKind::Net));
    verdict.part(
        app_net.is_some() && app_net == new_net,
        "app runs again, in the new sandbox's network namespace",
        format!("app does not run in the new sandbox's namespaces yet (net {app_net:?})"),
    );
    verdict.part(
        pods::has_event(env, pod, "SandboxChanged")?,
        "kubelet said so: a SandboxChanged event",
        format!("no SandboxChanged event about {ALWAYS}"),
    );
    Ok(())
}

fn check_never(env: &Env, verdict: &mut Verdict, pod: &Pod) -> Result<()> {
    let sandboxes = pods::sandboxes(env, pod)?;
    let ready = sandboxes
        .iter()
        .filter(|s| s.state == SandboxState::Ready)
        .count();
    if ready > 0 && sandboxes.len() == 1 {
        verdict.missing(format!("{NEVER}'s pause process still runs"));
        return Ok(());
    }
    verdict.part(
        sandboxes.len() == 1,
        format!("{NEVER} got no new sandbox"),
        format!("{NEVER} has {} sandboxes", sandboxes.len()),
    );
    let phase = pods::phase(pod);
    verdict.part(
        phase == "Succeeded" || phase == "Failed",
        format!("{NEVER} ended: {phase}"),
        format!("{NEVER} is {phase}, not ended yet"),
    );
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    for name in [ALWAYS, NEVER] {
        let Some(pod) = pods::get(env, name)? else {
            verdict.missing(format!(
                "there is no pod {name} (`podlab lab start 9` again)"
            ));
            return Ok(verdict);
        };
        if name == ALWAYS {
            check_always(env, &mut verdict, &pod)?;
        } else {
            check_never(env, &mut verdict, &pod)?;
        }
    }
    Ok(verdict)
}

fn kill_pause(env: &Env, name: &str) -> Result<()> {
    let pod = pods::get(env, name)?.with_context(|| format!("pod {name} is gone"))?;
    let pause = pods::pause_pid(env, &pod)?.context("the pod has no pause process")?;
    env.say(format!("(pod {name}'s pause process is pid {pause})"));
    env.run("kill", &["-9", &pause.to_string()])?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    kill_pause(env, ALWAYS)?;
    kill_pause(env, NEVER)?;
    let limit = Duration::from_secs(60);
    pods::wait(env, ALWAYS, "running in a new sandbox", limit, |p| {
        pods::running(p, "app") && pods::container(p, "app").is_some_and(|c| c.restart_count >= 1)
    })?;
    pods::wait(env, NEVER, "ended", limit, |p| {
        matches!(pods::phase(p).as_str(), "Succeeded" | "Failed")
    })?;
    env.podlab(&["get", "pods"])?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    let pod = pods::get(env, ALWAYS)?.context("pod sandbox-always is gone")?;
    let app = pods::container_pid(env, &pod, "app")?.context("app has no process")?;
    env.say(format!("(app's process is pid {app})"));
    env.run("kill", &["-9", &app.to_string()])?;
    pods::wait(env, ALWAYS, "restarted", Duration::from_secs(60), |p| {
        pods::running(p, "app") && pods::container(p, "app").is_some_and(|c| c.restart_count >= 1)
    })?;
    Ok(())
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[ALWAYS, NEVER])
}
