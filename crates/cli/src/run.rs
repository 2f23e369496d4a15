//! `podlab run NAME --image IMAGE [--rm] [--restart P] [--command] -- ARGS...`: kubectl run's
//! twin. Without `--rm` it makes a one-container pod (labelled `run=NAME`) and hands it to the
//! node agent. With `--rm` it goes straight through the runtime, as `crictl runp` + `create` +
//! `start` would: sandbox, container, its output streamed from the CRI log, its exit code
//! returned, everything removed — no agent and no store in the way of the measurement.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use podlab_kubelet::translate::{container_config, sandbox_config, PodDirs};
use podlab_runtime::status::ContainerState;

use crate::context::Ctx;

pub struct RunArgs {
    pub name: String,
    pub image: String,
    pub rm: bool,
    pub restart: String,
    pub command: bool,
    pub env: Vec<String>,
    pub namespace: String,
    pub args: Vec<String>,
}

/// The pod `kubectl run` would make.
pub fn pod_for(args: &RunArgs) -> Result<Pod> {
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
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(args.restart.clone()),
            containers: vec![Container {
                name: args.name.clone(),
                image: Some(args.image.clone()),
                command: command.filter(|c| !c.is_empty()),
                args: container_args,
                env: Some(env).filter(|e| !e.is_empty()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    // Through the same decoder as `apply`: the API server's checks and defaults.
    let text = serde_json::to_string(&serde_json::json!({"apiVersion": "v1", "kind": "Pod"}))?;
    let mut value: serde_json::Value = serde_json::from_str(&text)?;
    let pod_value = serde_json::to_value(&pod)?;
    for (k, v) in pod_value.as_object().into_iter().flatten() {
        value[k] = v.clone();
    }
    podlab_api::decode_pod(&value.to_string(), "podlab run").map_err(|e| anyhow::anyhow!("{e}"))
}

pub fn run(args: RunArgs) -> Result<i32> {
    let mut pod = pod_for(&args)?;
    let ctx = Ctx::open()?;
    if !args.rm {
        let name = args.name.clone();
        crate::apply::apply_pod(&ctx, pod)?;
        ctx.ensure_node()?;
        println!("pod/{name} created");
        return Ok(0);
    }
    pod.metadata.uid = Some(podlab_control::names::new_uid());
    crate::image::ensure_builtin_if_busybox(&ctx, &args.image)?;
    let runtime = ctx.runtime()?;
    let dirs = PodDirs::new(&ctx.root, &pod);
    let sandbox = runtime
        .run_pod_sandbox(&sandbox_config(&pod, &dirs, 0))
        .context("RunPodSandbox")?;
    let outcome = (|| -> Result<i32> {
        let (_, config) =
            container_config(&pod, &dirs, &args.name, 0).expect("the pod's own container");
        let id = runtime
            .create_container(&sandbox, &config)
            .context("CreateContainer")?;
        runtime.start_container(&id).context("StartContainer")?;
        let log = runtime.container_log_path(&id)?;
        let mut follower = crate::logs::Follower::open(&log);
        let status = loop {
            follower.pump(&mut std::io::stdout())?;
            let status = runtime.wait_container(&id, Some(Duration::from_millis(100)))?;
            if status.state != ContainerState::Running {
                break status;
            }
        };
        follower.pump(&mut std::io::stdout())?;
        std::io::stdout().flush()?;
        runtime.remove_container(&id)?;
        Ok(status.exit_code.unwrap_or(1))
    })();
    let stopped = runtime
        .stop_pod_sandbox(&sandbox)
        .and_then(|()| runtime.remove_pod_sandbox(&sandbox));
    let _ = std::fs::remove_dir_all(dirs.logs.parent().map(|_| &dirs.logs).unwrap());
    let _ = std::fs::remove_dir_all(dirs.volumes.parent().unwrap_or(&dirs.volumes));
    let code = outcome?;
    stopped.context("removing the pod's sandbox")?;
    Ok(code)
}
