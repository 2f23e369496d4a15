//! `podlab debug POD --image busybox [--target C] -- CMD...`: `kubectl debug`'s ephemeral
//! container. It is added to the pod's spec (the `ephemeralcontainers` subresource); the node
//! agent starts it in the pod's namespaces (and in the target container's pid namespace with
//! `--target`), never restarts it, and lists it in `status.ephemeralContainerStatuses`. This
//! command then streams its output and returns its exit status, from this root's runtime or,
//! when the agent runs its pods on a CRI runtime, from that one (its log file, its Attach).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{EphemeralContainer, Pod};
use podlab_runtime::id::ContainerId;
use podlab_runtime::status::ContainerState;

use crate::context::Ctx;

#[allow(clippy::too_many_arguments)]
pub fn run(
    flags: crate::attach::Flags,
    pod_name: &str,
    image: &str,
    pull_policy: Option<&str>,
    target: Option<&str>,
    name: Option<String>,
    namespace: &str,
    cmd: &[String],
) -> Result<i32> {
    let ctx = Ctx::open()?;
    crate::image::ensure_builtin_if_busybox(&ctx, image)?;
    let named = name.is_some();
    let name = name.unwrap_or_else(|| {
        format!(
            "debugger-{}",
            &podlab_control::names::generate_name("")[..5]
        )
    });
    // The agent writes the pod's status all the time: add the container to a fresh read.
    crate::apply::retry_on_conflict(|| {
        let mut pod: Pod = ctx.store.get(namespace, pod_name)?;
        match add_ephemeral(&mut pod, &name, (image, pull_policy), target, cmd, flags) {
            Ok(()) => ctx.store.update(pod).map(|_| Ok(())),
            Err(refused) => Ok(Err(refused)),
        }
    })??;
    ctx.ensure_node()?;
    if !named {
        eprintln!("Defaulting debug container name to {name}.");
    }

    let id = wait_started(&ctx, namespace, pod_name, &name, Duration::from_secs(60))?;
    // This root's runtime, or the CRI runtime the agent runs its pods on (`remote`).
    let containers = crate::remote::Containers::open(&ctx)?;
    if flags.stdin || flags.tty {
        let allocated = crate::attach::Allocated {
            stdin: flags.stdin,
            tty: flags.tty,
        };
        let ended = containers.attach(&id, &name, allocated, flags)?;
        if !flags.quiet && flags.stdin && ended.raw {
            println!(
                "Session ended, the ephemeral container will not be restarted but may be reattached using 'podlab attach {pod_name} -c {name} -i -t' if it is still running"
            );
        }
        let status = containers.status(&id)?;
        return Ok(match status.state {
            ContainerState::Running => 0,
            _ => status.exit_code.unwrap_or(0),
        });
    }
    let mut follower = crate::logs::Follower::open(&containers.log_path(&id)?);
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    loop {
        let status = containers.wait_a_while(&id, Duration::from_millis(200))?;
        follower.pump_streams(&mut out, &mut err)?;
        out.flush()?;
        if status.state != ContainerState::Running {
            return Ok(status.exit_code.unwrap_or(1));
        }
    }
}

/// Adds the ephemeral container to the pod's spec, as the `ephemeralcontainers` subresource
/// does (with the API server's checks and defaults).
fn add_ephemeral(
    pod: &mut Pod,
    name: &str,
    (image, pull_policy): (&str, Option<&str>),
    target: Option<&str>,
    cmd: &[String],
    flags: crate::attach::Flags,
) -> Result<()> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
    if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
        bail!(
            "cannot debug pod {pod_name}: it has finished (phase {})",
            phase.unwrap_or_default()
        );
    }
    if pod.metadata.deletion_timestamp.is_some() {
        bail!("cannot debug pod {pod_name}: it is being deleted");
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    if let Some(target) = target {
        if !spec.containers.iter().any(|c| c.name == target) {
            bail!("target container {target:?} is not a container of pod {pod_name}");
        }
    }
    let taken = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| &c.name)
        .chain(spec.ephemeral_containers.iter().flatten().map(|e| &e.name))
        .any(|n| n == name);
    if taken {
        bail!("pod {pod_name} already has a container named {name:?}");
    }
    spec.ephemeral_containers
        .get_or_insert_with(Vec::new)
        .push(EphemeralContainer {
            name: name.to_string(),
            image: Some(image.to_string()),
            command: Some(cmd.to_vec()).filter(|c| !c.is_empty()),
            target_container_name: target.map(str::to_string),
            // kubectl debug -i/-t: an open stdin and a console, for its attach.
            stdin: Some(true).filter(|_| flags.stdin),
            tty: Some(true).filter(|_| flags.tty),
            termination_message_path: Some("/dev/termination-log".into()),
            termination_message_policy: Some("File".into()),
            // `--image-pull-policy`, else the API server's default for the image's tag.
            image_pull_policy: Some(
                pull_policy
                    .unwrap_or(podlab_api::defaults::pull_policy_for(Some(image)))
                    .into(),
            ),
            ..Default::default()
        });
    Ok(())
}

/// Waits until the agent reports a container id for the ephemeral container.
fn wait_started(
    ctx: &Ctx,
    namespace: &str,
    pod: &str,
    name: &str,
    limit: Duration,
) -> Result<ContainerId> {
    let start = Instant::now();
    let mut watch = ctx.store.watch_now::<Pod>()?;
    loop {
        let current: Pod = ctx.store.get(namespace, pod)?;
        let status = current.status.unwrap_or_default();
        let found = status
            .ephemeral_container_statuses
            .iter()
            .flatten()
            .find(|s| s.name == name)
            .cloned();
        if let Some(s) = found {
            if let Some(id) = &s.container_id {
                return Ok(ContainerId::parse(id.trim_start_matches("podlab://"))?);
            }
            if let Some(w) = s.state.as_ref().and_then(|st| st.waiting.as_ref()) {
                if let Some(reason) = w
                    .reason
                    .as_deref()
                    .filter(|r| *r != "ContainerCreating" && *r != "PodInitializing")
                {
                    bail!(
                        "debug container {name} cannot start: {reason}: {}",
                        w.message.as_deref().unwrap_or("")
                    );
                }
            }
        }
        if start.elapsed() > limit {
            bail!(
                "debug container {name} did not start within {} s; see `podlab describe pod {pod}`",
                limit.as_secs()
            );
        }
        let _ = watch
            .next_timeout(Duration::from_millis(500))
            .context("watching the pod")?;
    }
}
