//! Lab 6, init containers' order: init containers run one at a time, in order, each to
//! completion, before any app container starts (kubelet's `computeInitContainerActions`). The
//! scene's pod is stuck at `Init:0/2`: its first init container waits for a file nobody wrote.
//! The check reads the statuses' states and times, and the file through web's root
//! (`/proc/PID/root`).

use anyhow::Result;

use crate::env::Env;
use crate::kit::pods;
use crate::{Lab, Level, Verdict};

const POD: &str = "init-lab";
const INITS: [&str; 2] = ["wait-config", "migrate"];

pub static LAB: Lab = Lab {
    number: 6,
    name: "init-order",
    title: "Init containers run first, one at a time, in order",
    level: Level::Beginner,
    minutes: 10,
    goal: "Pod init-lab is stuck at Init:0/2. Find out why, and unblock it, so that:
1. its init containers wait-config and migrate have each run to completion (exit 0), in that
   order, before its app container web started;
2. web runs, and sees the file /work/migrated saying `ready` (written by migrate from the
   config you give wait-config).",
    hints: &[
        "`podlab get pods`, `podlab describe pod init-lab` and `podlab logs init-lab -c \
wait-config` say which init container runs and what it waits for. The manifest is \
{work}/init-lab.yaml.",
        "A running init container can be exec'd into like any container. The file must be in \
the pod's emptyDir volume, mounted at /work in every container of the pod.",
        "podlab exec init-lab -c wait-config -- sh -c 'echo ready > /work/config'\n\
podlab get pods -w      # Init:0/2 -> Init:1/2 -> PodInitializing -> Running",
    ],
    not_yet: "init container wait-config is still running",
    mistake_story: "writing the config outside the shared volume (/tmp/config): the init \
container keeps waiting",
    scene,
    check,
    solve,
    mistake,
    reset,
};

const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: init-lab
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: work
    emptyDir: {}
  initContainers:
  - name: wait-config
    image: busybox
    command: [sh, -c, \"echo waiting for /work/config; until [ -s /work/config ]; do sleep 0.2; done; echo got it\"]
    volumeMounts: [{name: work, mountPath: /work}]
  - name: migrate
    image: busybox
    command: [sh, -c, \"cat /work/config > /work/migrated && echo migrated\"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: web
    image: busybox
    command: [sh, -c, \"test -f /work/migrated || exit 1; trap 'exit 0' TERM; sleep 100000 & wait\"]
    volumeMounts: [{name: work, mountPath: /work}]
";

fn scene(env: &Env) -> Result<()> {
    env.apply("init-lab.yaml", MANIFEST)?;
    pods::wait(
        env,
        POD,
        "running its first init container",
        std::time::Duration::from_secs(60),
        |p| pods::running(p, INITS[0]),
    )?;
    env.podlab(&["get", "pods", POD])?;
    Ok(())
}

/// A container's terminated exit code and its start and finish times (seconds).
fn terminated(pod: &k8s_openapi::api::core::v1::Pod, name: &str) -> Option<(i32, i64, i64)> {
    let t = pods::container(pod, name)?.state?.terminated?;
    Some((
        t.exit_code,
        t.started_at.map_or(0, |s| s.0.as_second()),
        t.finished_at.map_or(0, |s| s.0.as_second()),
    ))
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)? else {
        verdict.missing(format!("there is no pod {POD}"));
        return Ok(verdict);
    };
    let spec_inits: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten().map(|c| c.name.clone()))
        .collect();
    if spec_inits != INITS {
        verdict.missing(format!(
            "pod {POD}'s init containers are {spec_inits:?}, not {INITS:?}: keep them, they \
prepare what web needs"
        ));
        return Ok(verdict);
    }
    let mut previous_finish = 0;
    for name in INITS {
        if pods::running(&pod, name) {
            verdict.missing(format!(
                "init container {name} is still running (see `podlab logs {POD} -c {name}`)"
            ));
            return Ok(verdict);
        }
        match terminated(&pod, name) {
            Some((0, started, finished)) if started >= previous_finish => {
                verdict.met(format!("init container {name} ran to completion (exit 0)"));
                previous_finish = finished;
            }
            Some((0, _, _)) => verdict.missing(format!(
                "init container {name} started before the one before it finished"
            )),
            Some((code, _, _)) => verdict.missing(format!("init container {name} exited {code}")),
            None => {
                verdict.missing(format!("init container {name} has not run yet"));
                return Ok(verdict);
            }
        }
    }
    let web_started = pods::container(&pod, "web")
        .and_then(|c| c.state?.running?.started_at)
        .map(|t| t.0.as_second());
    match web_started {
        Some(t) => verdict.part(
            t >= previous_finish,
            "web started after both init containers finished",
            "web started before the init containers finished",
        ),
        None => {
            verdict.missing("web does not run yet");
            return Ok(verdict);
        }
    };
    let content = pods::container_pid(env, &pod, "web")?
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/root/work/migrated")).ok());
    verdict.part(
        content.as_deref().map(str::trim) == Some("ready"),
        "web sees /work/migrated saying ready",
        format!("web's /work/migrated holds {content:?}, not \"ready\""),
    );
    Ok(verdict)
}

/// Writes the config `to` a path in wait-config, as a student would with `podlab exec`.
fn write_config(env: &Env, to: &str) -> Result<()> {
    let script = format!("echo ready > {to}");
    env.podlab(&["exec", POD, "-c", INITS[0], "--", "sh", "-c", &script])?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    write_config(env, "/work/config")?;
    pods::wait_running(env, POD)?;
    env.podlab(&["get", "pods", POD])?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    write_config(env, "/tmp/config")
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])
}
