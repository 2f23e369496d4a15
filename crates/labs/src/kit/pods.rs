//! Pods as podlab's objects show them: the pod in the store (status, conditions, container
//! statuses), its events, its sandboxes and their pause processes in the runtime's records,
//! the host pid of a container; and the pod steps scenes, solutions and resets share
//! (wait for a state, delete the lab's pods).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use podlab_runtime::status::{SandboxState, SandboxStatus};
use podlab_runtime::ContainerId;

use crate::env::Env;

pub const NAMESPACE: &str = "default";

/// The pod, None when there is none of that name.
pub fn get(env: &Env, name: &str) -> Result<Option<Pod>> {
    get_in(env, NAMESPACE, name)
}

/// The pod of another namespace, None when there is none of that name.
pub fn get_in(env: &Env, namespace: &str, name: &str) -> Result<Option<Pod>> {
    match env.store()?.get::<Pod>(namespace, name) {
        Ok(pod) => Ok(Some(pod)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// The status (`True`, `False`) of one of the pod's conditions; empty when it has none.
pub fn condition(pod: &Pod, kind: &str) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == kind))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

/// The API status of a container (init, regular or ephemeral).
pub fn container(pod: &Pod, name: &str) -> Option<ContainerStatus> {
    let status = pod.status.clone().unwrap_or_default();
    status
        .init_container_statuses
        .into_iter()
        .flatten()
        .chain(status.container_statuses.into_iter().flatten())
        .chain(status.ephemeral_container_statuses.into_iter().flatten())
        .find(|s| s.name == name)
}

/// Whether the container runs now.
pub fn running(pod: &Pod, name: &str) -> bool {
    container(pod, name)
        .and_then(|c| c.state)
        .is_some_and(|s| s.running.is_some())
}

/// Whether every regular container of the pod runs.
pub fn all_running(pod: &Pod) -> bool {
    let names: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
        .collect();
    !names.is_empty() && names.iter().all(|n| running(pod, n))
}

/// The host pid of a running container's process, from the runtime's record.
pub fn container_pid(env: &Env, pod: &Pod, name: &str) -> Result<Option<i32>> {
    let Some(id) = container(pod, name).and_then(|c| c.container_id) else {
        return Ok(None);
    };
    let id = ContainerId::parse(id.trim_start_matches("podlab://"))?;
    let status = env.runtime()?.container_status(&id)?;
    Ok(status
        .pid
        .filter(|pid| crate::kit::procs::read(*pid).is_some_and(|p| !p.is_zombie())))
}

/// The pid of the pod's running container `name`; when it does not run, `verdict` says so
/// (with its restarts and where to read why) and None.
pub fn running_pid_or_say(
    env: &Env,
    pod: &Pod,
    name: &str,
    verdict: &mut crate::Verdict,
) -> Result<Option<i32>> {
    let pid = container_pid(env, pod, name)?;
    if pid.is_none() {
        let restarts = container(pod, name).map_or(0, |c| c.restart_count);
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        verdict.missing(format!(
            "{name} does not run (restarted {restarts} times): see `podlab logs {pod_name} --previous`"
        ));
    }
    Ok(pid)
}

/// Waits (a minute at most) until the pod's container `name` has restarted at least once:
/// what a lab's mistake that makes it crash shows.
pub fn wait_restarted(env: &Env, pod: &str, name: &str) -> Result<Pod> {
    wait(env, pod, "failing", Duration::from_secs(60), |p| {
        container(p, name).is_some_and(|c| c.restart_count >= 1)
    })
}

/// Every sandbox the runtime has for the pod, oldest first.
pub fn sandboxes(env: &Env, pod: &Pod) -> Result<Vec<SandboxStatus>> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut sandboxes: Vec<_> = env
        .runtime()?
        .list_pod_sandboxes()?
        .into_iter()
        .filter(|s| s.metadata.uid == uid)
        .collect();
    sandboxes.sort_by_key(|s| s.created_at);
    Ok(sandboxes)
}

/// The pod's newest ready sandbox.
pub fn ready_sandbox(env: &Env, pod: &Pod) -> Result<Option<SandboxStatus>> {
    Ok(sandboxes(env, pod)?
        .into_iter()
        .rev()
        .find(|s| s.state == SandboxState::Ready))
}

/// The pid of the pause process of the pod's ready sandbox.
pub fn pause_pid(env: &Env, pod: &Pod) -> Result<Option<i32>> {
    Ok(ready_sandbox(env, pod)?.and_then(|s| s.pause_pid))
}

/// The events about the pod (this incarnation of it), oldest first.
pub fn events(env: &Env, pod: &Pod) -> Result<Vec<Event>> {
    let (events, _) = env.store()?.list::<Event>(Some(NAMESPACE))?;
    let mut events: Vec<Event> = events
        .into_iter()
        .filter(|e| e.involved_object.uid == pod.metadata.uid)
        .collect();
    events.sort_by_key(|e| e.first_timestamp.as_ref().map(|t| t.0));
    Ok(events)
}

/// Whether an event of that reason was recorded about the pod.
pub fn has_event(env: &Env, pod: &Pod, reason: &str) -> Result<bool> {
    Ok(events(env, pod)?
        .iter()
        .any(|e| e.reason.as_deref() == Some(reason)))
}

/// Waits (bounded) until the pod exists and `done` holds; says what it waited for.
pub fn wait(
    env: &Env,
    name: &str,
    what: &str,
    limit: Duration,
    done: impl Fn(&Pod) -> bool,
) -> Result<Pod> {
    wait_in(env, NAMESPACE, name, what, limit, done)
}

/// [`wait`] for a pod of another namespace.
pub fn wait_in(
    env: &Env,
    namespace: &str,
    name: &str,
    what: &str,
    limit: Duration,
    done: impl Fn(&Pod) -> bool,
) -> Result<Pod> {
    env.say(format!("(waiting until pod {name} is {what})"));
    let start = Instant::now();
    loop {
        if let Some(pod) = get_in(env, namespace, name)?.filter(|p| done(p)) {
            return Ok(pod);
        }
        if start.elapsed() > limit {
            bail!(
                "pod {name} did not become {what} within {} s; see `podlab describe pod {name}`",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every regular container of the pod runs.
pub fn wait_running(env: &Env, name: &str) -> Result<Pod> {
    wait(env, name, "running", Duration::from_secs(60), all_running)
}

/// Deletes those of the pods that exist, through the node agent's termination path, and
/// waits until they are gone.
pub fn delete(env: &Env, names: &[&str]) -> Result<()> {
    delete_in(env, NAMESPACE, names)
}

/// [`delete`] for pods of another namespace.
pub fn delete_in(env: &Env, namespace: &str, names: &[&str]) -> Result<()> {
    let mut present = Vec::new();
    for name in names {
        if get_in(env, namespace, name)?.is_some() {
            present.push(*name);
        }
    }
    if present.is_empty() {
        return Ok(());
    }
    let mut args = vec!["delete", "pod", "-n", namespace];
    args.extend(&present);
    args.extend(["--grace-period", "1"]);
    env.podlab(&args)
        .with_context(|| format!("deleting pods {present:?}"))?;
    Ok(())
}
