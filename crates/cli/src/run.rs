//! `podlab run NAME --image IMAGE [--rm] [--restart P] [--command] -- ARGS...`: kubectl run's
//! twin. Without `--rm` it makes a one-container pod (labelled `run=NAME`) and hands it to the
//! node agent. With `--rm` it goes straight through the runtime, as `crictl runp` + `create` +
//! `start` would: sandbox, container, its output streamed from the CRI log, its exit code
//! returned, the sandbox removed with its container — no agent and no object store in the way
//! of the measurement (only the runtime and the image store are opened). Its
//! sandbox is labelled with the `run` process that owns it, so that `podlab gc` and the node
//! agent leave it alone while that process lives; Ctrl-C stops the container and cleans up.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use podlab_kubelet::translate::{container_config, sandbox_config, PodDirs, LABEL_MANAGED_BY};
use podlab_runtime::status::ContainerState;
use podlab_runtime::{Runtime, RuntimeConfig, SandboxId, StoreImages};

use crate::context::Ctx;

pub struct RunArgs {
    pub name: String,
    pub image: String,
    pub rm: bool,
    pub restart: String,
    pub command: bool,
    pub env: Vec<String>,
    /// `--annotations KEY=VALUE`: the pod's annotations.
    pub annotations: Vec<String>,
    /// `--image-pull-policy`: the container's `imagePullPolicy`.
    pub image_pull_policy: Option<String>,
    /// `--trace`: print what each phase took (until Ready or finished without `--rm`).
    pub trace: bool,
    pub namespace: String,
    pub args: Vec<String>,
    /// `-i`: the container gets an open stdin (`stdin`, `stdinOnce`), and this one is attached.
    pub stdin: bool,
    /// `-t`: the container gets a console (`tty`).
    pub tty: bool,
    pub quiet: bool,
}

/// The pod `kubectl run` would make, with the API server's warnings for its create.
pub fn pod_for(args: &RunArgs) -> Result<(Pod, Vec<String>)> {
    let mut annotations = BTreeMap::new();
    for pair in &args.annotations {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--annotations {pair:?}: expected KEY=VALUE");
        };
        annotations.insert(key.to_string(), value.to_string());
    }
    let mut env = Vec::new();
    for pair in &args.env {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--env {pair:?}: expected NAME=VALUE");
        };
        env.push(EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        });
    }
    let (command, container_args) = match args.command {
        true => (Some(args.args.clone()), None),
        false => (None, Some(args.args.clone()).filter(|a| !a.is_empty())),
    };
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(args.name.clone()),
            namespace: Some(args.namespace.clone()),
            labels: Some(BTreeMap::from([("run".to_string(), args.name.clone())])),
            annotations: Some(annotations).filter(|a| !a.is_empty()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(args.restart.clone()),
            containers: vec![Container {
                name: args.name.clone(),
                image: Some(args.image.clone()),
                image_pull_policy: args.image_pull_policy.clone(),
                command: command.filter(|c| !c.is_empty()),
                args: container_args,
                env: Some(env).filter(|e| !e.is_empty()),
                stdin: Some(true).filter(|_| args.stdin),
                // kubectl's default --leave-stdin-open=false.
                stdin_once: Some(true).filter(|_| args.stdin),
                tty: Some(true).filter(|_| args.tty),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    // Through the same decoder as `apply` (the API server's checks and defaults), from the
    // value itself: no text to parse again.
    let mut value = serde_json::to_value(&pod)?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "Pod".into();
    podlab_api::manifest::decode_pod_value_warned(value, "podlab run")
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// `run --rm` gets its image as the node agent gets a pod's (kubelet's `imagePullPolicy`,
/// defaulted as the API server does): pulled when `Always`, or `IfNotPresent` and absent;
/// `Never` and absent is `ErrImageNeverPull`. The built-in busybox is never pulled.
fn ensure_image(images: &podlab_image::Store, pod: &Pod, image: &str) -> Result<()> {
    use podlab_kubelet::images::{self, ImageStep, PullPolicy};
    if podlab_kubelet::node::images::ImageManager::is_builtin(image) {
        return Ok(());
    }
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image_pull_policy.as_deref());
    let policy = PullPolicy::of(policy, image);
    match images::image_step(policy, images.config(image).is_ok()) {
        ImageStep::Present => Ok(()),
        ImageStep::NeverPull => bail!("{}: ErrImageNeverPull", images::never_pull_message(image)),
        ImageStep::Pull => {
            let reference = podlab_image::reference::Reference::parse(image)?;
            let options = podlab_image::pull::PullOptions::default();
            eprintln!("{}", images::pulling_message(image));
            podlab_image::pull::pull(images, &reference, &options).map_err(|e| {
                anyhow::anyhow!(
                    "{}: ErrImagePull",
                    images::failed_pull_message(image, &e.to_string())
                )
            })?;
            Ok(())
        }
    }
}

/// podlab's label on the sandbox of a `run --rm`: who made it (`podlab-run`), so that the node
/// agent, which removes the sandboxes it made for pods gone from the store, leaves it alone.
pub const MANAGED_BY_RUN: &str = "podlab-run";
/// The process of the `run --rm` that owns the sandbox, as `PID:STARTTIME` (clock ticks after
/// boot, field 22 of /proc/PID/stat): `podlab gc` removes the sandbox only once that very
/// process is gone, whatever became of its pid number.
pub const LABEL_RUN_OWNER: &str = "podlab.io/run-owner";

/// Whether the `run --rm` that made a sandbox with these labels still runs.
pub fn run_owner_alive(labels: &std::collections::BTreeMap<String, String>) -> bool {
    let Some((pid, start)) = labels.get(LABEL_RUN_OWNER).and_then(|o| o.split_once(':')) else {
        return false;
    };
    match (pid.parse(), start.parse()) {
        (Ok(pid), Ok(start_time)) => {
            podlab_runtime::liveness::ProcessIdentity { pid, start_time }.is_alive()
        }
        _ => false,
    }
}

/// Set by SIGINT, SIGTERM or SIGHUP during `run --rm`: stop the container and clean up, as
/// `kubectl run --rm` removes its pod when interrupted.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_interrupt(signal: libc::c_int) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
}

fn catch_interrupts() -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_interrupt),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(signal, &action) }.context("sigaction")?;
    }
    Ok(())
}

pub fn run(args: RunArgs) -> Result<i32> {
    if args.tty && !args.stdin {
        bail!("-i/--stdin is required for containers with -t/--tty=true");
    }
    // The shim's start (its `execve` and libc's, about 0.9 ms here) runs on the other core
    // while this command decodes the pod, opens the stores and prepares the sandbox; it then
    // waits for its arguments. Where it cannot be started yet (no state folder, not root),
    // `run_rm` tries again once the folder is made; a command that fails before using it
    // lets it go (it exits at the end of its stdin) and removes its folder.
    let starting = args
        .rm
        .then(|| podlab_runtime::StartingShim::spawn(&RuntimeConfig::from_env()).ok())
        .flatten();
    let (pod, warnings) = pod_for(&args)?;
    crate::apply::print_warnings(&warnings, &mut Default::default());
    if args.rm {
        return run_rm(pod, &args, starting);
    }
    let ctx = Ctx::open()?;
    crate::image::ensure_builtin_if_busybox(&ctx, &args.image)?;
    let name = args.name.clone();
    // Without --rm, `--trace` follows the pod as `apply --trace` does: until Ready or finished.
    let tracing = args
        .trace
        .then(|| crate::trace::Tracing::begin(&ctx.root, &args.namespace, &name, "run"))
        .flatten();
    // kubectl run creates, never updates: a pod of that name is the API server's 409.
    crate::apply::create_pod(&ctx, pod).map_err(|e| match e.is_already_exists() {
        true => anyhow::anyhow!("Error from server (AlreadyExists): {e}"),
        false => anyhow::Error::new(e).context(format!("creating pod {name:?}")),
    })?;
    ctx.ensure_node()?;
    if !args.stdin {
        println!("pod/{name} created");
        if let Some(tracing) = tracing {
            tracing.mark("store, agent start");
            let pod = [(args.namespace.clone(), name)];
            crate::apply::finish_when_ready(&ctx, &pod, vec![Some(tracing)])?;
        }
        return Ok(0);
    }
    attach_when_running(&ctx, &args)
}

/// `run -i[t]` without `--rm`: once the container runs, kubectl's attach session; the
/// container's exit code if it ended (and was not restarted).
fn attach_when_running(ctx: &Ctx, args: &RunArgs) -> Result<i32> {
    let started = std::time::Instant::now();
    let (pod, id) = loop {
        let pod: Pod = ctx.store.get(&args.namespace, &args.name)?;
        let status =
            crate::logs::container_status(&pod, Some(&args.name), crate::logs::Caller::Exec);
        let running = status.as_ref().ok().and_then(|s| {
            s.state.as_ref()?.running.as_ref()?;
            s.container_id.clone()
        });
        if let Some(id) = running {
            break (
                pod,
                podlab_runtime::ContainerId::parse(id.trim_start_matches("podlab://"))?,
            );
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        if let Some(phase @ ("Succeeded" | "Failed")) = phase.as_deref() {
            bail!("cannot attach a container in a completed pod; current phase is {phase}");
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("timed out waiting for the condition");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // This root's runtime, or the CRI runtime the agent runs its pods on (`remote`).
    let containers = crate::remote::Containers::open(ctx)?;
    let flags = crate::attach::Flags {
        stdin: args.stdin,
        tty: args.tty,
        quiet: args.quiet,
    };
    let allocated = crate::attach::Allocated::of(&pod, &args.name);
    let ended = containers.attach(&id, &args.name, allocated, flags)?;
    let mut status = containers.status(&id)?;
    // The session ends with the container's output; its exit reaches a CRI runtime's status a
    // moment later. kubectl waits for the pod to complete too, unless it restarts its
    // containers, the user detached, or podlab was stopped.
    let ended_by_itself = !ended.detached && ended.signal.is_none();
    if args.restart != "Always" && ended_by_itself && status.state == ContainerState::Running {
        status = containers.wait_a_while(&id, Duration::from_secs(5))?;
    }
    if status.state == ContainerState::Running || args.restart == "Always" {
        if !args.quiet && ended.raw && args.restart == "Always" {
            println!(
                "Session ended, resume using 'podlab attach {} -c {} -i -t' command when the pod is running",
                args.name, args.name
            );
        }
        return Ok(0);
    }
    Ok(status.exit_code.unwrap_or(0))
}

/// `run --rm`: a pod that lives as long as this command, so only the runtime and its image
/// store are opened (no object store, no agent), and the image store once.
fn run_rm(
    mut pod: Pod,
    args: &RunArgs,
    starting: Option<podlab_runtime::StartingShim>,
) -> Result<i32> {
    crate::privilege::require_root_for_pods()?;
    let config = RuntimeConfig::from_env();
    podlab_runtime::state::private_state(&config.root, &config.image_root)?;
    // Not started ahead (the state folder was not there yet): now, before the stores open.
    let starting = starting.or_else(|| podlab_runtime::StartingShim::spawn(&config).ok());
    let images =
        podlab_image::Store::open(&config.image_root).context("opening the image store")?;
    images.ensure_builtin_if_named(&args.image)?;
    ensure_image(&images, &pod, &args.image)?;
    let root = config.root.clone();
    let tracing = args
        .trace
        .then(|| crate::trace::Tracing::begin(&root, &args.namespace, &args.name, "run --rm"))
        .flatten();
    let mut runtime = Runtime::with_images(config, Arc::new(StoreImages::new(images)))
        .context("opening the runtime")?;
    match crate::network::plugin(&root)? {
        Some(network) => runtime.set_network_plugin(network),
        None => {
            // `lo` only: the network namespace a keeper made ahead, if one is ready.
            let state_root = runtime.config().root.clone();
            runtime.set_empty_netns_source(Box::new(move || {
                crate::oneshot_keeper::take_empty_netns(&state_root)
            }));
        }
    }
    pod.metadata.uid = Some(podlab_control::names::new_uid());
    catch_interrupts()?;
    let dirs = PodDirs::new(&root, &pod);
    let me = podlab_runtime::liveness::ProcessIdentity::of(std::process::id() as i32)?;
    crate::trace::mark(&tracing, "open stores, runtime, network");
    let mut sandbox_config = sandbox_config(&pod, &dirs, 0);
    sandbox_config
        .labels
        .insert(LABEL_MANAGED_BY.into(), MANAGED_BY_RUN.into());
    sandbox_config.labels.insert(
        LABEL_RUN_OWNER.into(),
        format!("{}:{}", me.pid, me.start_time),
    );
    let (_, mut container) =
        container_config(&pod, &dirs, &args.name, 0).expect("the pod's own container");
    container
        .labels
        .insert(LABEL_MANAGED_BY.into(), MANAGED_BY_RUN.into());
    // RunPodSandbox and CreateContainer in one: the container is made while pause starts,
    // and without stdin started (its exit waited for) as soon as the sandbox is ready.
    let stdin = pod_stdin(&pod);
    let made = podlab_kubelet::volume::set_up(&pod, &dirs, &podlab_kubelet::env::NoObjects)
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            Ok(match stdin {
                true => runtime
                    .run_pod_sandbox_and_container(&sandbox_config, starting, &container)
                    .map(|(sandbox, made)| (sandbox, made.map(|id| (id, None))))?,
                false => runtime
                    .run_pod_sandbox_and_start(&sandbox_config, starting, &container)
                    .map(|(sandbox, made)| {
                        (sandbox, made.map(|(id, started)| (id, Some(started))))
                    })?,
            })
        });
    let (made, outcome) = match made {
        Ok((sandbox, Ok((id, started)))) => {
            let outcome = run_container(&runtime, &id, &pod, &args.name, args.quiet, started);
            (Ok(sandbox), outcome)
        }
        Ok((sandbox, Err(e))) => (
            Ok(sandbox),
            Err(anyhow::Error::new(e).context("CreateContainer")),
        ),
        Err(e) => (Err(e), Ok(1)),
    };
    crate::trace::mark(&tracing, "exit seen, output streamed");
    if let (Ok(sandbox), Ok(code)) = (&made, &outcome) {
        // What the command reports is complete: the container's output and exit code.
        return Ok(remove_after_return(
            &runtime, sandbox, &root, &dirs, tracing, *code,
        ));
    }
    // RemovePodSandbox kills and removes its containers too, as the CRI asks of it.
    let removed = match &made {
        Ok(sandbox) => runtime
            .remove_pod_sandbox(sandbox)
            .context("removing the pod's sandbox"),
        Err(_) => Ok(()),
    };
    podlab_kubelet::volume::tear_down(&root, &dirs);
    crate::trace::mark(&tracing, "volumes torn down");
    if let Some(tracing) = tracing {
        tracing.finish();
    }
    made.context("RunPodSandbox")?;
    let code = outcome?;
    removed?;
    Ok(code)
}

/// The pod's removal once its container has exited and its output is streamed: CNI DEL (a
/// plugin run each), the shim's shutdown with pause and the namespace pins, the sandbox's
/// folder and cgroups, the volumes. None of it changes what the command reports, so a child
/// of this command does it while the command returns `code` (a child sharing its memory, the
/// command ending at once: [`crate::handover`]), as kubelet tears a pod down
/// after its status is final (it takes well under the 2 s that `podlab gc` and the node agent
/// may find it in; both leave a sandbox alone while the child holds its lock). On the default
/// CNI network the child then leaves a network namespace attached for the next one-shot pod,
/// kept by a process of its own until 1.5 s after the command returned
/// ([`crate::network::warm`]), and a keeper holds the node's cgroup folders above the pod's
/// (and without a pod network an empty network namespace) for the next one about as long
/// ([`crate::oneshot_keeper`]): everything is gone within 2 s. The child
/// keeps stderr, for its errors, so a caller that reads the command's stderr to its end also
/// waits for the removal; stdin and stdout are closed at once. With `--trace` the command
/// forks the child, waits until its removal is done (and, when it becomes the keeper, the
/// keeper is ready) and prints the removal's phases after the mark where it returned.
fn remove_after_return(
    runtime: &Runtime,
    sandbox: &SandboxId,
    root: &std::path::Path,
    dirs: &PodDirs,
    tracing: Option<crate::trace::Tracing>,
    code: i32,
) -> i32 {
    // A child forked from a process with other threads could inherit a lock one of them held
    // (malloc's, stdio's): then the removal is done here, before returning.
    let threads = std::fs::read_dir("/proc/self/task").map_or(usize::MAX, |t| t.count());
    if threads == 1 && tracing.is_none() {
        // The command's output is complete; it ends here, and the removal goes on in a child
        // that shares its memory (no copy of it, no teardown of it on the command's way out).
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let returned = std::time::Instant::now();
        let Err(e) = crate::handover::exit_leaving(code, || {
            let keep = crate::oneshot_keeper::wanted(runtime);
            runtime.keep_node_cgroups(keep);
            let status = removal_child(runtime, sandbox, root, dirs, &None, returned);
            if keep {
                crate::oneshot_keeper::keep_or_leave(runtime, returned, status);
            }
            status
        });
        eprintln!("podlab: clone: {e}; removing the pod's sandbox in a forked child");
    }
    // Traced, the command waits for the removal's phases: until the child lets go of this
    // pipe, when it exits or, as a keeper, once it is ready for the next command (as an
    // untraced command's caller waits for stderr's end).
    let removal_marked = match &tracing {
        Some(_) => nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok(),
        None => None,
    };
    let forked = if threads == 1 {
        // SAFETY: the process has this one thread; the child only runs the removal, and
        // perhaps the keeper, and exits.
        unsafe { nix::unistd::fork() }
    } else {
        Err(nix::errno::Errno::EDEADLK)
    };
    match forked {
        Ok(nix::unistd::ForkResult::Child) => {
            let returned = std::time::Instant::now();
            let keep = removal_marked.is_some() && crate::oneshot_keeper::wanted(runtime);
            runtime.keep_node_cgroups(keep);
            let status = removal_child(runtime, sandbox, root, dirs, &tracing, returned);
            if keep {
                // The pipe's end closes with the command's descriptors, once the keeper is
                // ready; a traced run is followed by what an untraced one would be.
                crate::oneshot_keeper::keep_or_leave(runtime, returned, status);
            }
            // No destructor runs: the trace file is the command's to print and remove.
            std::process::exit(status);
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            crate::trace::mark(&tracing, "command returns (removal goes on)");
            if let Some(tracing) = tracing {
                match removal_marked {
                    Some((marked, writer)) => {
                        drop(writer);
                        let mut byte = [0u8; 1];
                        while let Err(nix::errno::Errno::EINTR) =
                            nix::unistd::read(&marked, &mut byte)
                        {}
                    }
                    None => {
                        let _ = nix::sys::wait::waitpid(child, None);
                    }
                }
                tracing.finish();
            }
            code
        }
        Err(e) => {
            // No child: the removal is done before returning.
            if e != nix::errno::Errno::EDEADLK {
                eprintln!("podlab: fork: {e}; removing the pod's sandbox before returning");
            }
            let removed = runtime.remove_pod_sandbox(sandbox);
            podlab_kubelet::volume::tear_down(root, dirs);
            crate::trace::mark(&tracing, "volumes torn down");
            if let Some(tracing) = tracing {
                tracing.finish();
            }
            match removed {
                Ok(()) => code,
                Err(e) => {
                    eprintln!("podlab: removing the pod's sandbox {sandbox}: {e}");
                    1
                }
            }
        }
    }
}

/// The removal, in a child of the command once the command has returned (`returned`):
/// detached from the terminal's session and from stdin and stdout, it removes the sandbox and
/// the volumes, then on the default CNI network forks the keeper of a warm namespace. Returns
/// the child's exit status (1 if the removal failed, said on stderr).
fn removal_child(
    runtime: &Runtime,
    sandbox: &SandboxId,
    root: &std::path::Path,
    dirs: &PodDirs,
    tracing: &Option<crate::trace::Tracing>,
    returned: std::time::Instant,
) -> i32 {
    // A Ctrl-C at the terminal, after the command returned, must not stop it midway.
    let _ = nix::unistd::setsid();
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let null = std::os::fd::AsRawFd::as_raw_fd(&null);
        // SAFETY: dup2 onto stdin and stdout of this single-threaded child.
        unsafe {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
        }
    }
    // The next one-shot pod's network is made now, off its way: the bridge stays for the
    // namespace kept warm (see `network::warm`).
    let warm = crate::network::warm::will_follow(root);
    let removed = runtime.remove_pod_sandbox(sandbox);
    podlab_kubelet::volume::tear_down(root, dirs);
    crate::trace::mark(tracing, "volumes torn down");
    if warm {
        crate::network::warm::start_keeper(root, returned);
    }
    match removed {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "podlab: removing the pod's sandbox {sandbox}: {e} (`podlab gc` removes what is left)"
            );
            1
        }
    }
}

/// Starts the container (unless `started` says how its start went), streams its output
/// (stdout to stdout, stderr to stderr) until it exits, and returns its exit code; an
/// interrupt stops it first (exit 128+signal).
fn run_container(
    runtime: &Runtime,
    id: &podlab_runtime::ContainerId,
    pod: &Pod,
    name: &str,
    quiet: bool,
    started: Option<podlab_runtime::Result<podlab_runtime::ExitWaiter>>,
) -> Result<i32> {
    let stdin = pod_stdin(pod);
    // Without stdin the exit is what the command waits for: asked for with the Start.
    let started = match (started, stdin) {
        (Some(started), _) => started.map(Some),
        (None, true) => runtime.start_container(id).map(|()| None),
        (None, false) => runtime.start_container_and_wait(id).map(Some),
    };
    let mut waiter = match started {
        Err(podlab_runtime::Error::StartFailed { failure, .. }) => {
            return crate::exec::cannot_run(&failure)
        }
        started => started.context("StartContainer")?,
    };
    if stdin {
        let flags = crate::attach::Flags {
            stdin: true,
            tty: pod_tty(pod),
            quiet,
        };
        let allocated = crate::attach::Allocated::of(pod, name);
        // The pod lives as long as this command: there is nothing to detach from.
        let ended = crate::attach::session(runtime, id, name, allocated, flags, false)?;
        if let Some(signal) = ended.signal {
            INTERRUPTED.store(signal, Ordering::SeqCst);
        }
        let status = loop {
            let status = crate::logs::wait_a_while(runtime, id, Duration::from_millis(100))?;
            if INTERRUPTED.load(Ordering::SeqCst) != 0 {
                runtime.stop_container(id, Duration::from_secs(2))?;
            }
            if status.state != ContainerState::Running {
                break status;
            }
        };
        return Ok(status.exit_code.unwrap_or(1));
    }
    let log = runtime.container_log_path(id)?;
    let mut follower = crate::logs::Follower::open(&log);
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let exit_code = loop {
        follower.pump_streams(&mut out, &mut err)?;
        out.flush()?;
        if INTERRUPTED.load(Ordering::SeqCst) != 0 {
            runtime.stop_container(id, Duration::from_secs(2))?;
        }
        let limit = Duration::from_millis(100);
        match waiter.as_ref().map(|w| w.wait(limit)) {
            Some(Ok(Some(exit))) => break Some(exit.exit_code),
            Some(Ok(None)) => continue,
            // The shim went away: the status says what is known (Unknown).
            Some(Err(_)) => waiter = None,
            None => {}
        }
        let status = crate::logs::wait_a_while(runtime, id, limit)?;
        if status.state != ContainerState::Running {
            break status.exit_code;
        }
    };
    follower.pump_streams(&mut out, &mut err)?;
    out.flush()?;
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => Ok(exit_code.unwrap_or(1)),
        signal => Ok(128 + signal),
    }
}

fn pod_stdin(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .is_some_and(|s| s.containers.iter().any(|c| c.stdin == Some(true)))
}

fn pod_tty(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .is_some_and(|s| s.containers.iter().any(|c| c.tty == Some(true)))
}
