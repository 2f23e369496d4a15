//! Lab 17, cgroups and OOMKilled: a container whose memory limit is smaller than what it needs
//! is killed by the kernel's OOM killer inside its memory cgroup, reported as OOMKilled (exit
//! 137) and restarted into CrashLoopBackOff, until its limit fits. The check reads the
//! container's memory cgroup (`memory.limit_in_bytes`, found from `/proc/PID/cgroup`), the
//! marker the app writes once it has its memory, and the pod's QoS class.

use std::time::Duration;

use anyhow::Result;

use crate::env::Env;
use crate::kit::{cgroups, pods};
use crate::{Lab, Level, Verdict};

const POD: &str = "hog";
const MIB: u64 = 1 << 20;
/// What the app allocates (dd's one 64 MiB block, read from /dev/zero).
const NEEDS: u64 = 64 * MIB;
/// A limit above this is no longer a limit that fits: it is a limit given up.
const MOST: u64 = 256 * MIB;

pub static LAB: Lab = Lab {
    number: 17,
    name: "oom",
    title: "cgroups and OOMKilled: a memory limit that fits",
    level: Level::Advanced,
    minutes: 15,
    goal: "Pod hog has a 32Mi memory limit; its container reads a 64 MiB block, writes /tmp/allocated,
and sleeps. It never gets that far. Find out why, then make it run:
1. hog's container runs and has written /tmp/allocated;
2. it keeps a memory limit (its memory cgroup's memory.limit_in_bytes) of 64 MiB to 256 MiB;
3. the pod is not BestEffort (the manifest is {work}/hog.yaml).",
    hints: &[
        "Ask why the last run ended: `podlab get pod hog -o \
jsonpath='{.status.containerStatuses[0].lastState.terminated.reason}'`, `podlab describe pod hog` \
(Last State, Exit Code 137 = 128 + SIGKILL, Restart Count).",
        "The kernel enforces `resources.limits.memory` as the container's memory cgroup: find it in \
/proc/PID/cgroup, then read memory.limit_in_bytes and memory.oom_control (oom_kill) under \
/sys/fs/cgroup/memory/. The app needs 64 MiB and a little more; removing the limit makes the pod \
BestEffort, the first one the node evicts.",
        "(in {work}/hog.yaml, on container hog)\n\
    resources: {requests: {memory: 128Mi}, limits: {memory: 128Mi}}\n\
podlab delete pod hog; podlab apply -f {work}/hog.yaml",
    ],
    not_yet: "hog does not run",
    mistake_story: "the memory limit removed altogether: hog runs, but without a limit (and \
BestEffort), free to take the node's memory",
    scene,
    check,
    solve,
    mistake,
    reset,
};

/// The pod, with `memory` as its request and limit (none at all when `None`).
fn manifest(memory: Option<&str>) -> String {
    let resources = memory.map_or(String::new(), |m| {
        format!("    resources: {{requests: {{memory: {m}}}, limits: {{memory: {m}}}}}\n")
    });
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 1
  containers:
  - name: hog
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; dd if=/dev/zero of=/dev/null bs=64M count=1 || exit 137; date > /tmp/allocated; echo allocated 64 MiB; sleep 100000 & wait $!\"]
{resources}"
    )
}

/// Whether the container's last run ended OOMKilled.
fn oom_killed(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pods::container(pod, "hog")
        .and_then(|c| c.last_state)
        .and_then(|s| s.terminated)
        .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled"))
}

/// Whether the app has its memory: it writes /tmp/allocated only after dd's block was read.
fn allocated(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/root/tmp/allocated")).exists()
}

fn scene(env: &Env) -> Result<()> {
    env.apply("hog.yaml", &manifest(Some("32Mi")))?;
    pods::wait(env, POD, "OOMKilled", Duration::from_secs(60), oom_killed)?;
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)? else {
        verdict.missing(format!("there is no pod {POD}"));
        return Ok(verdict);
    };
    let qos = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.clone())
        .unwrap_or_default();
    verdict.part(
        qos != "BestEffort",
        format!("the pod's QoS class is {qos}"),
        "the pod is BestEffort: it must keep a memory limit (and request)",
    );
    let Some(pid) = pods::container_pid(env, &pod, "hog")?.filter(|pid| allocated(*pid)) else {
        let restarts = pods::container(&pod, "hog").map_or(0, |c| c.restart_count);
        let why = if oom_killed(&pod) {
            ", last ended OOMKilled"
        } else {
            ""
        };
        verdict.missing(format!(
            "hog does not run (restarted {restarts} times{why}): see `podlab describe pod {POD}`"
        ));
        return Ok(verdict);
    };
    verdict.met(format!(
        "hog (pid {pid}) runs and has written /tmp/allocated"
    ));
    let Some(cgroup) = cgroups::dir(env, pid, "memory")? else {
        verdict.missing("hog's process has no memory cgroup (is the memory controller mounted?)");
        return Ok(verdict);
    };
    let limit: Option<u64> = std::fs::read_to_string(cgroup.join("memory.limit_in_bytes"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    // An unlimited v1 cgroup reads as a page-rounded i64::MAX.
    let limit = limit.filter(|l| *l < 1 << 62);
    match limit {
        Some(bytes) => {
            verdict.part(
                (NEEDS..=MOST).contains(&bytes),
                format!(
                    "hog's memory limit is {} MiB ({}/memory.limit_in_bytes)",
                    bytes / MIB,
                    cgroup.display()
                ),
                format!(
                    "hog's memory limit is {} MiB: it must be 64 to 256 MiB",
                    bytes / MIB
                ),
            );
        }
        None => verdict.missing(format!(
            "hog has no memory limit ({}/memory.limit_in_bytes): the pod must keep a memory limit",
            cgroup.display()
        )),
    }
    Ok(verdict)
}

fn remake(env: &Env, memory: Option<&str>) -> Result<()> {
    pods::delete(env, &[POD])?;
    env.apply("hog.yaml", &manifest(memory))?;
    Ok(())
}

/// Waits until the app runs and has its memory.
fn wait_allocated(env: &Env) -> Result<()> {
    pods::wait(
        env,
        POD,
        "running with its memory",
        Duration::from_secs(60),
        |p| {
            pods::container_pid(env, p, "hog")
                .ok()
                .flatten()
                .is_some_and(allocated)
        },
    )?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    remake(env, Some("128Mi"))?;
    wait_allocated(env)
}

fn mistake(env: &Env) -> Result<()> {
    remake(env, None)?;
    wait_allocated(env)
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])
}
