//! Lab 18, in-place resize: a running container given more cpu and memory without a restart,
//! through the pod's `resize` subresource. The check reads the container's cpu and memory
//! cgroups (`cpu.cfs_quota_us`, `memory.limit_in_bytes`, found from `/proc/PID/cgroup`) and
//! compares the pod's uid and the container's process with those the scene started.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::env::Env;
use crate::kit::{cgroups, pods};
use crate::{Lab, Level, Verdict};

const POD: &str = "grow";
const MIB: i64 = 1 << 20;
/// The scene's pod uid and process, `<uid> <pid>`.
const STARTED: &str = ".started";

pub static LAB: Lab = Lab {
    number: 18,
    name: "resize",
    title: "in-place resize: more cpu and memory, same process",
    level: Level::Advanced,
    minutes: 15,
    goal: "Pod grow's container app runs with a 200m cpu limit and 64Mi of memory; it needs more,
and its work in memory must not be lost. Without restarting it:
1. app's cpu cgroup allows at least half a cpu (cpu.cfs_quota_us ≥ 50000 of 100000);
2. its memory cgroup allows at least 128 MiB (memory.limit_in_bytes);
3. it is the same pod (uid) and the same process as when the lab started (the manifest was
   {work}/grow.yaml).",
    hints: &[
        "Try the obvious first: `podlab patch pod grow -p '{\"spec\":{\"containers\":[{\"name\":\"app\",\
\"resources\":{\"limits\":{\"cpu\":\"500m\"}}}]}}'`. The API server refuses it: a pod's resources \
are fixed, except through its `resize` subresource.",
        "`podlab patch pod grow --subresource resize -p …` changes only the containers' resources; \
the node agent admits it (does it fit the node?) and writes the new values into the running \
container's cgroups. Watch `podlab get pod grow -o yaml`: the PodResizeInProgress condition, \
status.containerStatuses[0].allocatedResources and .resources.",
        "podlab patch pod grow --subresource resize -p \
'{\"spec\":{\"containers\":[{\"name\":\"app\",\"resources\":{\"limits\":{\"cpu\":\"500m\",\"memory\":\"128Mi\"}}}]}}'",
    ],
    not_yet: "it needs at least 50000 (500m)",
    mistake_story: "the pod deleted and applied again with bigger limits: the new pod has them, \
but it is a new pod with a new process, and the old one's work is gone",
    scene,
    check,
    solve,
    mistake,
    reset,
};

/// The pod, with `cpu` and `memory` as its container's limits.
fn manifest(cpu: &str, memory: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; date > /tmp/started; sleep 100000 & wait $!\"]
    resources: {{requests: {{cpu: 100m, memory: 32Mi}}, limits: {{cpu: {cpu}, memory: {memory}}}}}
"
    )
}

/// The pod's uid and its container's process, once it runs.
fn running(env: &Env) -> Result<(String, i32)> {
    let pod = pods::wait(env, POD, "running", Duration::from_secs(60), |p| {
        pods::running(p, "app")
    })?;
    let pid = pods::container_pid(env, &pod, "app")?.context("app has no process")?;
    Ok((pod.metadata.uid.unwrap_or_default(), pid))
}

fn scene(env: &Env) -> Result<()> {
    env.apply("grow.yaml", &manifest("200m", "64Mi"))?;
    let (uid, pid) = running(env)?;
    env.write(STARTED, &format!("{uid} {pid}\n"))?;
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)? else {
        verdict.missing(format!("there is no pod {POD}"));
        return Ok(verdict);
    };
    let started = std::fs::read_to_string(env.file(STARTED)).unwrap_or_default();
    let mut started = started.split_whitespace();
    let (uid, pid) = (started.next().unwrap_or(""), started.next().unwrap_or(""));
    let now_uid = pod.metadata.uid.as_deref().unwrap_or_default();
    verdict.part(
        now_uid == uid,
        format!("grow is the pod the lab started (uid {uid})"),
        format!("grow was made anew (uid {now_uid}, the lab's was {uid}): its process and what it held are gone"),
    );
    let Some(now_pid) = pods::container_pid(env, &pod, "app")? else {
        verdict.missing("app does not run");
        return Ok(verdict);
    };
    verdict.part(
        now_pid.to_string() == pid,
        format!("app is still process {pid}"),
        format!("app is process {now_pid}, not the lab's {pid}: it was restarted"),
    );
    let quota = cgroups::dir(env, now_pid, "cpu")?
        .and_then(|dir| cgroups::read_i64(&dir, "cpu.cfs_quota_us").map(|q| (dir, q)));
    let Some((cpu, quota)) = quota else {
        verdict.missing("app's process has no cpu cgroup (is the cpu controller mounted?)");
        return Ok(verdict);
    };
    verdict.part(
        quota >= 50_000,
        format!(
            "app's cpu quota is {quota} µs per 100 ms ({}/cpu.cfs_quota_us)",
            cpu.display()
        ),
        format!("app's cpu quota is {quota} µs per 100 ms: it needs at least 50000 (500m)"),
    );
    let memory = cgroups::dir(env, now_pid, "memory")?
        .and_then(|dir| cgroups::read_i64(&dir, "memory.limit_in_bytes").map(|m| (dir, m)));
    let Some((memory, bytes)) = memory else {
        verdict.missing("app's process has no memory cgroup (is the memory controller mounted?)");
        return Ok(verdict);
    };
    verdict.part(
        (128 * MIB..1 << 62).contains(&bytes),
        format!(
            "app's memory limit is {} MiB ({}/memory.limit_in_bytes)",
            bytes / MIB,
            memory.display()
        ),
        format!(
            "app's memory limit is {} MiB: it needs at least 128",
            bytes / MIB
        ),
    );
    Ok(verdict)
}

/// Waits until the node agent has actuated the resize (no resize condition left).
fn wait_resized(env: &Env) -> Result<()> {
    pods::wait(env, POD, "resized", Duration::from_secs(60), |p| {
        pods::condition(p, "PodResizePending").is_empty()
            && pods::condition(p, "PodResizeInProgress").is_empty()
            && pods::container(p, "app")
                .and_then(|c| c.resources)
                .and_then(|r| r.limits)
                .is_some_and(|l| l.get("cpu").is_some_and(|q| q.0 == "500m"))
    })?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    let patch = r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"500m","memory":"128Mi"}}}]}}"#;
    env.podlab(&["patch", "pod", POD, "--subresource", "resize", "-p", patch])?;
    wait_resized(env)
}

fn mistake(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])?;
    env.apply("grow.yaml", &manifest("500m", "128Mi"))?;
    running(env).map(drop)
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])
}
