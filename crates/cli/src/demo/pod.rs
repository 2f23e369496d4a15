//! `podlab demo pod` (the default `podlab demo`): a whole pod, built the way kubelet +
//! containerd + runc build it, from the built-in manifest `pod.yaml`: a pause process first,
//! then the init container, then two app containers that join the pause process's namespaces.
//!
//! The evidence, all from the kernel: every container's net, ipc and uts inode ids equal the
//! pause process's, while pid and mnt are each container's own; the init container finished
//! before the app containers started; `client` reaches `web` over 127.0.0.1; both report the
//! pod's hostname; a SysV message queue made in `web`'s IPC namespace is read from `client`'s
//! and is absent from the host's. Then the pod is deleted and nothing of it is left.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_ns::{ops, NsKind};
use podlab_runtime::id::ContainerId;

use super::kit::exec_text;
use super::{say, Evidence, Shown};
use crate::context::Ctx;

const MANIFEST: &str = include_str!("pod.yaml");
const NAMESPACE: &str = "default";
const KINDS: [NsKind; 5] = [
    NsKind::Net,
    NsKind::Ipc,
    NsKind::Uts,
    NsKind::Pid,
    NsKind::Mnt,
];

pub fn run(evidence: &mut Evidence) -> Result<()> {
    say("A Kubernetes pod is a set of Linux namespaces that several containers share. kubelet");
    say("asks the runtime for a sandbox first: a tiny pause process in new uts, ipc and net");
    say("namespaces. Every container then joins them, and gets only its own mnt (its image's");
    say("root filesystem) and, unless the pod shares its process namespace, its own pid.");
    let pod = podlab_api::decode_pod(MANIFEST, "the built-in pod.yaml")?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    // A root of its own, so that the demo leaves nothing behind: its agent is stopped and the
    // folder removed when it ends, also on error.
    let scratch = super::kit::ScratchRoot::new("pod", &[])?;
    let ctx = scratch.ctx()?;
    say(format!(
        "(this demo keeps its pods, store and node agent in a root of its own: PODLAB_ROOT={})",
        scratch.path().display()
    ));
    remove_leftover(&ctx, &name)?;
    crate::image::ensure_builtin_if_busybox(&ctx, "busybox")?;

    say(format!("\n$ podlab apply -f pod.yaml     # pod/{name}: init container prepare, containers web and client"));
    crate::apply::apply_pod(&ctx, pod)?;
    ctx.ensure_node()?;
    let outcome = inspect_running_pod(&ctx, &name, evidence);
    if super::keep() {
        return outcome.map(|_| ());
    }

    say(format!("\n$ podlab delete pod {name}"));
    crate::delete::delete_pod(&ctx, NAMESPACE, &name, None, true)?;
    if let Ok(Some(gone)) = &outcome {
        let leftovers: Vec<String> = gone
            .iter()
            .filter(|pid| pid_alive(**pid))
            .map(|p| p.to_string())
            .collect();
        evidence.check(
            "after delete, no process of the pod is left",
            leftovers.is_empty(),
            format!("alive: {}", leftovers.shown()),
        );
    }
    outcome.map(|_| ())
}

/// A pod of the same name from an earlier, interrupted run is deleted first.
fn remove_leftover(ctx: &Ctx, name: &str) -> Result<()> {
    match ctx.store.get::<Pod>(NAMESPACE, name) {
        Ok(_) => {
            say(format!(
                "(a pod {name} from an earlier run is still there: deleting it first)"
            ));
            crate::delete::delete_pod(ctx, NAMESPACE, name, Some(1), true)
        }
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Waits for the pod to run, prints the namespace table and checks the evidence. Returns the
/// pids seen (pause and containers), to check after the delete that they are gone.
fn inspect_running_pod(ctx: &Ctx, name: &str, evidence: &mut Evidence) -> Result<Option<Vec<i32>>> {
    let pod = wait_ready(ctx, name, Duration::from_secs(90))?;
    let runtime = ctx.runtime()?;
    let status = pod.status.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let sandbox = runtime
        .list_pod_sandboxes()?
        .into_iter()
        .filter(|s| s.metadata.uid == uid && s.state == podlab_runtime::status::SandboxState::Ready)
        .max_by_key(|s| s.created_at)
        .context("the pod's sandbox")?;
    let pause = sandbox.pause_pid.context("the sandbox's pause pid")?;

    let id_of = |container: &str| -> Result<ContainerId> {
        let s = status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .find(|s| s.name == container)
            .and_then(|s| s.container_id.clone())
            .with_context(|| format!("container {container} has no id"))?;
        Ok(ContainerId::parse(s.trim_start_matches("podlab://"))?)
    };
    let web = runtime.container_status(&id_of("web")?)?;
    let client = runtime.container_status(&id_of("client")?)?;
    let (web_pid, client_pid) = (
        web.pid.context("web's pid")?,
        client.pid.context("client's pid")?,
    );

    say("\nThe pod runs. Its processes and their namespaces (inode ids from /proc/PID/ns):");
    let rows = [
        ("pause (sandbox)", pause),
        ("web", web_pid),
        ("client", client_pid),
        ("podlab (host)", std::process::id() as i32),
    ];
    say(format!(
        "  {:<16} {:>7}  {:>11} {:>11} {:>11} {:>11} {:>11}",
        "process", "pid", "net", "ipc", "uts", "pid", "mnt"
    ));
    let mut ids = Vec::new();
    for (label, pid) in rows {
        let inodes = ops::inspect(pid)?;
        let cells: Vec<String> = KINDS
            .iter()
            .map(|k| inodes.get(k).map(|i| i.to_string()).unwrap_or_default())
            .collect();
        say(format!(
            "  {label:<16} {pid:>7}  {}",
            cells
                .iter()
                .map(|c| format!("{c:>11}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        ids.push(inodes);
    }
    let (p, w, c, host) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    for kind in [NsKind::Net, NsKind::Ipc, NsKind::Uts] {
        evidence.check(
            format!("web and client are in the pause process's {kind} namespace"),
            w[&kind] == p[&kind] && c[&kind] == p[&kind],
            format!("pause {} web {} client {}", p[&kind], w[&kind], c[&kind]),
        );
        evidence.compare(
            format!("the pod's {kind} namespace is not the host's"),
            p[&kind],
            host[&kind],
            false,
        );
    }
    for kind in [NsKind::Pid, NsKind::Mnt] {
        evidence.check(
            format!("each container has its own {kind} namespace"),
            w[&kind] != p[&kind] && c[&kind] != p[&kind] && w[&kind] != c[&kind],
            format!("pause {} web {} client {}", p[&kind], w[&kind], c[&kind]),
        );
    }

    say("\nWhy a pause process and not the first container? The init container `prepare` had to");
    say("run in the pod's namespaces before any app container existed, and an app container may");
    say("crash and restart at any time: if it held the network namespace, the pod's IP and every");
    say("open connection would go with it. pause does nothing, so it never dies, and holds them.");
    let init = status
        .init_container_statuses
        .iter()
        .flatten()
        .find(|s| s.name == "prepare")
        .cloned();
    let init_finished = init
        .as_ref()
        .and_then(|s| s.state.as_ref()?.terminated.as_ref()?.finished_at.clone());
    let first_app_start = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|s| s.state.as_ref()?.running.as_ref()?.started_at.clone())
        .min_by_key(|t| t.0);
    evidence.check(
        "the init container finished before any app container started",
        matches!((&init_finished, &first_app_start), (Some(f), Some(s)) if f.0 <= s.0),
        format!(
            "prepare finished {}, first app container started {}",
            init_finished.map_or("never".into(), |t| t.0.to_string()),
            first_app_start.map_or("never".into(), |t| t.0.to_string())
        ),
    );

    say("\n$ podlab exec podlab-demo -c client -- wget -q -O - http://127.0.0.1:8080/");
    let page = exec_text(
        &runtime,
        &client.id,
        &["wget", "-q", "-O", "-", "http://127.0.0.1:8080/"],
    )?;
    say(format!("  {}", page.trim()));
    evidence.check(
        "client reaches web over 127.0.0.1 (one network namespace)",
        page.contains("hello from the init container"),
        page.trim().to_string(),
    );

    let host_name = podlab_ns::uts::hostname()?;
    let web_host = exec_text(&runtime, &web.id, &["hostname"])?
        .trim()
        .to_string();
    let client_host = exec_text(&runtime, &client.id, &["hostname"])?
        .trim()
        .to_string();
    say(format!(
        "\nhostname:  host \"{host_name}\"   web \"{web_host}\"   client \"{client_host}\""
    ));
    evidence.check(
        "both containers report the pod's hostname",
        web_host == name && client_host == name,
        format!("{web_host} / {client_host}"),
    );
    evidence.compare(
        "the host's hostname is its own",
        host_name.as_str(),
        name,
        false,
    );

    say("\nSysV IPC: podlab steps into web's IPC namespace (setns), makes a message queue and sends");
    say(
        "a message; then it steps into client's IPC namespace and receives it from the same queue:",
    );
    let (queue, sent) = podlab_ns::child::run_in_child(move || {
        ops::join(
            std::os::fd::AsFd::as_fd(&ops::open_pid(web_pid, NsKind::Ipc)?),
            NsKind::Ipc,
        )?;
        let id = podlab_ns::ipc::create_sysv_queue()?;
        let text = format!("hello from pid {web_pid}'s IPC namespace");
        podlab_ns::ipc::msg_send(id, 1, text.as_bytes())?;
        Ok((id, text))
    })?;
    let received = podlab_ns::child::run_in_child(move || {
        ops::join(
            std::os::fd::AsFd::as_fd(&ops::open_pid(client_pid, NsKind::Ipc)?),
            NsKind::Ipc,
        )?;
        let bytes = podlab_ns::ipc::msg_receive(queue, 256)?;
        podlab_ns::ipc::remove_sysv_queue(queue)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    })?;
    say(format!(
        "  queue {queue}: sent \"{sent}\", received \"{received}\""
    ));
    evidence.compare(
        "a message queued in web's IPC namespace is read in client's",
        received.as_str(),
        sent.as_str(),
        true,
    );
    let host_objects = podlab_ns::ipc::list_sysv()?;
    let on_host = host_objects
        .iter()
        .any(|o| o.id == queue && matches!(o.kind, podlab_ns::ipc::SysvKind::Queue) && o.key == 0);
    evidence.check(
        "the pod's queue was never in the host's IPC namespace",
        !on_host,
        format!("host queues: {}", host_objects.len()),
    );

    Ok(Some(vec![pause, web_pid, client_pid]))
}

/// Waits (bounded) until the pod is Running with every container ready, narrating its phases.
fn wait_ready(ctx: &Ctx, name: &str, limit: Duration) -> Result<Pod> {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let pod: Pod = ctx.store.get(NAMESPACE, name)?;
        let row = crate::columns::pod_row(&pod, crate::columns::now(), false);
        let shown = format!("{} {}", row[1], row[2]);
        if shown != last {
            say(format!("  {name}   READY {}   STATUS {}", row[1], row[2]));
            last = shown;
        }
        let status = pod.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if status.phase.as_deref() == Some("Running") && ready {
            return Ok(pod);
        }
        if start.elapsed() > limit {
            bail!(
                "pod {name} is not ready after {} s (status {}); see `podlab describe pod {name}`",
                limit.as_secs(),
                row[2]
            );
        }
        super::poll_pause(Duration::from_millis(100));
    }
}

fn pid_alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
