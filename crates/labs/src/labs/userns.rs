//! Lab 19, user namespaces: an app that needs root (it chowns its files) and a node that must
//! not give a pod its root. `hostUsers: false` gives the pod ids of its own: root inside, an
//! unprivileged user of the node outside; `runAsUser` would take root away inside too, and
//! break the app. The check reads the app's uids as the node sees them (`/proc/PID/status`),
//! its user namespace's map (`/proc/PID/uid_map`) and the file the app keeps chowning.

use std::time::Duration;

use anyhow::Result;

use crate::env::Env;
use crate::kit::{pods, procs};
use crate::{Lab, Level, Verdict};

const POD: &str = "rooty";

pub static LAB: Lab = Lab {
    number: 19,
    name: "userns",
    title: "hostUsers: false: root in the pod, a nobody on the node",
    level: Level::Advanced,
    minutes: 15,
    goal: "Pod rooty runs app as root, which it needs: it chowns /tmp/owned every second. But
root in a container is root of the node, for whatever escapes it. Keep app root in its pod,
and make it an unprivileged user of the node:
1. app's process is not root on the node (its uid in the node's /proc);
2. app is still root inside its pod (uid 0 there);
3. app still chowns /tmp/owned (the manifest is {work}/rooty.yaml).",
    hints: &[
        "Compare what the node and the pod see: `grep Uid /proc/PID/status` on the node, \
`podlab exec rooty -- id` in the pod (`podlab get pod rooty -o wide` and `podlab describe` \
name the container; `podlab ns` lists its namespaces).",
        "A user namespace numbers users anew: `cat /proc/PID/uid_map` shows `inside outside \
count`. A pod gets one of its own with `hostUsers: false` in its spec; `runAsUser` only picks \
another user, and a user other than root cannot chown.",
        "(in {work}/rooty.yaml, on the pod's spec)\n\
  hostUsers: false\n\
podlab delete pod rooty; podlab apply -f {work}/rooty.yaml",
    ],
    not_yet: "app is root on the node",
    mistake_story: "runAsUser: 1000 instead: app is no longer root on the node, but no longer \
root in its pod either, cannot chown, and crash-loops",
    scene,
    check,
    solve,
    mistake,
    reset,
};

/// The pod, with a user namespace of its own or as uid `run_as` or neither.
fn manifest(own_users: bool, run_as: Option<u32>) -> String {
    let host_users = if own_users {
        "  hostUsers: false\n"
    } else {
        ""
    };
    let context = match run_as {
        Some(uid) => format!("    securityContext: {{runAsUser: {uid}}}\n"),
        None => String::new(),
    };
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
  terminationGracePeriodSeconds: 1
{host_users}  containers:
  - name: app
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; touch /tmp/owned; while chown 65534 /tmp/owned && touch /tmp/owned; do sleep 1 & wait $!; done; echo cannot chown /tmp/owned; exit 1\"]
{context}"
    )
}

fn scene(env: &Env) -> Result<()> {
    env.apply("rooty.yaml", &manifest(false, None))?;
    pods::wait_running(env, POD)?;
    env.podlab(&["exec", POD, "-c", "app", "--", "id"])?;
    Ok(())
}

/// The uid `node_uid` has inside the process's user namespace, from its `uid_map`.
fn uid_inside(pid: i32, node_uid: u32) -> Option<u32> {
    let (uid_map, _) = podlab_ns::user::id_maps(pid).ok()?;
    podlab_ns::user::map_to_inside(&podlab_ns::user::parse_id_map(&uid_map).ok()?, node_uid)
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)? else {
        verdict.missing(format!("there is no pod {POD}"));
        return Ok(verdict);
    };
    let Some(pid) = pods::running_pid_or_say(env, &pod, "app", &mut verdict)? else {
        return Ok(verdict);
    };
    let (_, on_node) = procs::uids(pid).unwrap_or((0, 0));
    verdict.part(
        on_node != 0,
        format!("app (pid {pid}) is uid {on_node} on the node, not root"),
        format!("app is root on the node (uid 0 in /proc/{pid}/status): what escapes it is root"),
    );
    let inside = uid_inside(pid, on_node);
    verdict.part(
        inside == Some(0),
        format!("app is root inside its pod (its uid_map makes the node's {on_node} its 0)"),
        match inside {
            Some(uid) => format!("app is uid {uid} inside its pod, not root"),
            None => format!("app's uid {on_node} has no number in its pod"),
        },
    );
    let file = format!("/proc/{pid}/root/tmp/owned");
    let fresh = procs::written_within(std::path::Path::new(&file), Duration::from_secs(5));
    verdict.part(
        fresh,
        "app keeps chowning /tmp/owned",
        "app's /tmp/owned is not being chowned",
    );
    Ok(verdict)
}

fn remake(env: &Env, own_users: bool, run_as: Option<u32>) -> Result<()> {
    pods::delete(env, &[POD])?;
    env.apply("rooty.yaml", &manifest(own_users, run_as))?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    remake(env, true, None)?;
    pods::wait_running(env, POD)?;
    std::thread::sleep(Duration::from_millis(1500));
    env.podlab(&["exec", POD, "-c", "app", "--", "id"])?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    remake(env, false, Some(1000))?;
    pods::wait_restarted(env, POD, "app")?;
    Ok(())
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])
}
