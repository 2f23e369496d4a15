//! `podlab node`: the node agent, kubelet's twin (and the ReplicaSet and Deployment
//! controllers, the pieces of kube-controller-manager podlab runs). Other commands start it on demand in the
//! background; run it in the foreground to watch each sync pass's decisions as they are made.
//!
//! Settings come from the environment a detached agent inherits (`PODLAB_NODE_BACKOFF`,
//! `PODLAB_NODE_RESYNC`, ... see podlab-kubelet's `node::config`) and from the flags here.

use std::sync::atomic::Ordering;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use podlab_control::{ControllerConfig, DeploymentController, ReplicaSetController};

use crate::context::Ctx;

#[derive(Args)]
pub struct NodeArgs {
    /// Started on demand by another command (output goes to `$PODLAB_ROOT/node.log`).
    #[arg(long)]
    background: bool,
    /// Narrate every pass that decides something, with its rule IDs (default in the foreground).
    #[arg(short, long)]
    verbose: bool,
    /// Narrate only this pod (`NAME`, or `NAMESPACE/NAME`): its passes, probes and rules, and
    /// nothing of the other pods or of the node. Implies `-v`.
    #[arg(long = "pod", value_name = "NAME")]
    pod: Option<String>,
    /// Crash-loop backoff `INITIAL[,MAX[,RESET]]`, e.g. `1s,8s,60s` (kubelet: `10s,300s,600s`).
    #[arg(long)]
    backoff: Option<String>,
    /// Unsafe sysctls pods may set besides kubelet's safe ones: names and `prefix*` patterns,
    /// comma-separated, each of a net or ipc namespace (kubelet's `--allowed-unsafe-sysctls`;
    /// also `PODLAB_NODE_ALLOWED_UNSAFE_SYSCTLS`).
    #[arg(long, value_name = "LIST")]
    allowed_unsafe_sysctls: Option<String>,
    /// Run the pods on the CRI runtime at this socket, as kubelet's
    /// `--container-runtime-endpoint`: `unix:///run/containerd/containerd.sock`, or a
    /// `podlab cri`'s (also `PODLAB_NODE_RUNTIME_ENDPOINT`). Without it they run on
    /// podlab-runtime in the agent's own process, with no RPC in between.
    #[arg(long, value_name = "unix:///PATH")]
    runtime_endpoint: Option<String>,
    /// Stop the agent of this root (SIGTERM; it removes the pod network it kept, if no pod uses
    /// it) and wait until it is gone. Pods keep running, as they do when kubelet stops.
    #[arg(long, conflicts_with_all = ["background", "verbose", "backoff", "pod", "allowed_unsafe_sysctls", "runtime_endpoint"])]
    stop: bool,
    /// Started by the agent itself (its pid): keep a warm network namespace for its next pod
    /// (`network::warm`).
    #[arg(long, hide = true, exclusive = true, value_name = "AGENT_PID")]
    warm_keeper: Option<i32>,
}

pub fn run(args: NodeArgs) -> Result<()> {
    if let Some(agent) = args.warm_keeper {
        crate::network::warm::keep_for_agent(agent);
        return Ok(());
    }
    let ctx = Ctx::open()?;
    if args.stop {
        let stopped =
            podlab_kubelet::node::stop_agent(&ctx.root, std::time::Duration::from_secs(30))
                .context("stopping the node agent")?;
        if !stopped && podlab_kubelet::node::running_agent(&ctx.root).is_some() {
            anyhow::bail!(
                "the node agent of {} did not stop within 30 s",
                ctx.root.display()
            );
        }
        println!(
            "{}",
            if stopped {
                "node agent stopped"
            } else {
                "no node agent runs"
            }
        );
        return Ok(());
    }
    let mut config = podlab_kubelet::node::NodeConfig::from_env()?;
    config.root = ctx.root.clone();
    config.runtime = ctx.runtime_config.clone();
    if let Some(backoff) = &args.backoff {
        config.backoff =
            podlab_kubelet::node::parse_backoff(backoff).map_err(|e| anyhow!("--backoff: {e}"))?;
    }
    if let Some(list) = &args.allowed_unsafe_sysctls {
        config
            .security
            .allow_unsafe_sysctls(list)
            .map_err(|e| anyhow!("--allowed-unsafe-sysctls: {e}"))?;
    }
    config.verbose |= args.verbose || !args.background || args.pod.is_some();
    config.follow_pod = args.pod;
    if args.runtime_endpoint.is_some() {
        config.runtime_endpoint = args.runtime_endpoint;
    }
    // A CRI runtime attaches its pods to its own network (RunPodSandbox's CNI ADD).
    if config.runtime_endpoint.is_none() {
        config.network = crate::network::plugin_with(&ctx.root, crate::network::Bridge::Keep)?;
        if crate::network::warm::agent_keeper_wanted() {
            crate::network::warm::refill_for_this_agent();
        }
    }
    if config.network.is_some() {
        // What kill -9 of every process of a network namespace left (see network::identity);
        // the agent collects it again when it stops.
        match crate::network::collect_gone() {
            Ok(removed) => {
                for folder in removed {
                    eprintln!(
                        "removed {} (its network namespace is gone)",
                        folder.display()
                    );
                }
            }
            Err(e) => eprintln!("collecting the state of gone network namespaces: {e:#}"),
        }
    }
    let stop = podlab_kubelet::node::stop_on_signals()?;

    let controller_stop = stop.clone();
    let store = ctx.store.clone();
    let controller = std::thread::Builder::new()
        .name("replicaset-controller".into())
        .spawn(move || {
            let mut controller = ReplicaSetController::new(store, ControllerConfig::default());
            controller.run(&controller_stop)
        })?;
    let deployment_stop = stop.clone();
    let store = ctx.store.clone();
    let deployments = std::thread::Builder::new()
        .name("deployment-controller".into())
        .spawn(move || DeploymentController::new(store).run(&deployment_stop))?;
    let result = podlab_kubelet::node::run(config, stop.clone()).context("the node agent stopped");
    stop.store(true, Ordering::SeqCst);
    let _ = controller.join();
    let _ = deployments.join();
    result
}
