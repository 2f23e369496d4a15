//! The CLI's side of a node agent that runs its pods on a CRI runtime (`podlab node
//! --runtime-endpoint`, `PODLAB_NODE_RUNTIME_ENDPOINT`): the containers are that runtime's,
//! not this root's, so `logs`, `exec`, `attach` and `debug` go to it over the CRI, as
//! kubelet's do.
//!
//! `logs` reads the file the runtime's ContainerStatus names (it is below the agent's
//! `log_directory`), and `-f` relists the container between reads, the CRI having no wait.
//! `exec` without `-i`/`-t` is the CRI's ExecSync: the command runs to its end in the
//! container, then its output and exit status come back (a probe's way). `exec -i`/`-it` and
//! `attach` are the CRI's streaming Exec and Attach, as crictl's: the RPC answers a URL of the
//! runtime's streaming server, and [`streaming`] opens it and relays stdin, stdout, stderr and
//! the terminal's size over SPDY (`v4.channel.k8s.io`); the exit code comes back at the end.

mod streaming;

use std::path::Path;

use anyhow::{Context, Result};
use podlab_kubelet::node::config::ENV_RUNTIME_ENDPOINT;
use podlab_kubelet::node::remote::{RemoteRuntime, Streams as CriStreams};
use podlab_kubelet::node::runtime_service::RuntimeService;
use podlab_runtime::ContainerId;

/// The CRI endpoint the pods of `root` run on: this command's `PODLAB_NODE_RUNTIME_ENDPOINT`,
/// else the running agent's (its `--runtime-endpoint`, or that variable in its environment).
pub fn endpoint(root: &Path) -> Option<String> {
    if let Some(endpoint) = std::env::var(ENV_RUNTIME_ENDPOINT)
        .ok()
        .filter(|e| !e.is_empty())
    {
        return Some(endpoint);
    }
    let agent = podlab_kubelet::node::running_agent(root)?;
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect()
    };
    let args = split(std::fs::read(format!("/proc/{agent}/cmdline")).ok()?);
    let flag = "--runtime-endpoint";
    for (i, arg) in args.iter().enumerate() {
        if let Some(value) = arg.strip_prefix(&format!("{flag}=")) {
            return Some(value.to_string());
        }
        if arg == flag {
            return args.get(i + 1).cloned();
        }
    }
    let environ = split(std::fs::read(format!("/proc/{agent}/environ")).ok()?);
    environ
        .iter()
        .find_map(|v| v.strip_prefix(&format!("{ENV_RUNTIME_ENDPOINT}=")))
        .filter(|e| !e.is_empty())
        .map(str::to_string)
}

/// `podlab exec` without a terminal or stdin: ExecSync of `cmd` in container `id` on the CRI
/// runtime at `endpoint`; its output is written here once it has ended, and its exit status
/// is returned.
pub fn exec_sync(endpoint: &str, id: &ContainerId, cmd: &[String]) -> Result<i32> {
    use std::io::Write;
    let result = connect(endpoint)?
        .exec_sync(id, cmd, None)
        .with_context(|| format!("ExecSync in container {id} on {endpoint}"))?;
    std::io::stdout().write_all(&result.stdout)?;
    std::io::stderr().write_all(&result.stderr)?;
    std::io::stdout().flush()?;
    Ok(result.exit_code)
}

/// `podlab exec -i` (`streams` Stdin) or `-it` (Tty) of `cmd` in container `id` through the
/// CRI runtime at `endpoint`: its streaming Exec, as `crictl exec -i`/`-it`; returns the
/// command's exit status (128 + N when podlab was stopped by signal N).
pub fn exec(
    endpoint: &str,
    id: &ContainerId,
    cmd: &[String],
    streams: crate::terminal::Streams,
) -> Result<i32> {
    let tty = streams == crate::terminal::Streams::Tty;
    let url = connect(endpoint)?
        .exec(
            id,
            cmd,
            CriStreams {
                stdin: true,
                stdout: true,
                stderr: !tty,
                tty,
            },
        )
        .with_context(|| format!("Exec in container {id} on {endpoint}"))?;
    let session = streaming::Session {
        stdin: true,
        tty,
        raw: tty,
        detach_keys: false,
    };
    Ok(match streaming::run(&url, session)? {
        streaming::End::Exited(code) => code,
        streaming::End::Signal(signo) => 128 + signo,
        streaming::End::Detached => 0,
    })
}

/// `podlab attach` to container `id` through the CRI runtime at `endpoint`, with the streams
/// `plan` settled (as `crictl attach`); Ctrl-P Ctrl-Q end a session with a terminal.
pub fn attach(
    endpoint: &str,
    id: &ContainerId,
    plan: crate::attach::Plan,
) -> Result<crate::attach::Ended> {
    attach_on(&connect(endpoint)?, endpoint, id, plan)
}

/// [`attach`] on a connection made already to the runtime at `endpoint`.
fn attach_on(
    remote: &RemoteRuntime,
    endpoint: &str,
    id: &ContainerId,
    plan: crate::attach::Plan,
) -> Result<crate::attach::Ended> {
    let url = remote
        .attach(
            id,
            CriStreams {
                stdin: plan.input,
                stdout: true,
                stderr: !plan.tty,
                tty: plan.tty,
            },
        )
        .with_context(|| format!("Attach to container {id} on {endpoint}"))?;
    let session = streaming::Session {
        stdin: plan.input,
        tty: plan.tty,
        raw: plan.raw,
        detach_keys: plan.raw,
    };
    let end = streaming::run(&url, session)?;
    Ok(crate::attach::Ended {
        raw: plan.raw,
        detached: end == streaming::End::Detached,
        signal: match end {
            streaming::End::Signal(signo) => Some(signo),
            _ => None,
        },
    })
}

fn connect(endpoint: &str) -> Result<RemoteRuntime> {
    RemoteRuntime::connect(endpoint)
        .with_context(|| format!("connecting to the CRI runtime at {endpoint}"))
}

/// How often [`Containers::wait_a_while`] asks a CRI runtime whether the container still runs.
const RELIST: std::time::Duration = std::time::Duration::from_millis(50);

/// Where `podlab logs` asks after a container: this root's runtime, or the CRI runtime the
/// agent runs its pods on (whose ContainerStatus names the log file, as kubelet reads it).
pub enum Containers {
    Local(Box<podlab_runtime::Runtime>),
    Remote {
        endpoint: String,
        runtime: Box<RemoteRuntime>,
    },
}

impl Containers {
    pub fn open(ctx: &crate::context::Ctx) -> Result<Containers> {
        Ok(match endpoint(&ctx.root) {
            Some(endpoint) => Containers::Remote {
                runtime: Box::new(connect(&endpoint)?),
                endpoint,
            },
            None => Containers::Local(Box::new(ctx.runtime()?)),
        })
    }

    pub fn status(&self, id: &ContainerId) -> Result<podlab_runtime::status::ContainerStatus> {
        match self {
            Containers::Local(runtime) => Ok(runtime.container_status(id)?),
            Containers::Remote {
                runtime: remote, ..
            } => {
                let filter = podlab_runtime::ContainerFilter {
                    id: Some(id.clone()),
                    ..Default::default()
                };
                remote
                    .list_containers(&filter)?
                    .into_iter()
                    .next()
                    .with_context(|| format!("container {:?} not found", id.as_str()))
            }
        }
    }

    /// An attach session to container `id` (`name` in messages) with the streams `allocated`
    /// and the user's `flags`: the shim's, or the CRI runtime's Attach.
    pub fn attach(
        &self,
        id: &ContainerId,
        name: &str,
        allocated: crate::attach::Allocated,
        flags: crate::attach::Flags,
    ) -> Result<crate::attach::Ended> {
        match self {
            Containers::Local(runtime) => {
                crate::attach::session(runtime, id, name, allocated, flags, true)
            }
            Containers::Remote { endpoint, runtime } => {
                let plan = crate::attach::Plan::of(flags, allocated, name);
                attach_on(runtime, endpoint, id, plan)
            }
        }
    }

    pub fn log_path(&self, id: &ContainerId) -> Result<std::path::PathBuf> {
        Ok(self.status(id)?.log_path)
    }

    /// Waits up to `limit` for the container to exit and returns its status then (still
    /// Running when it did not exit in time): the step of a loop that streams its output.
    pub fn wait_a_while(
        &self,
        id: &ContainerId,
        limit: std::time::Duration,
    ) -> Result<podlab_runtime::status::ContainerStatus> {
        match self {
            Containers::Local(runtime) => crate::logs::wait_a_while(runtime, id, limit),
            Containers::Remote { .. } => {
                // The CRI has no wait: relists until the container is no longer running, or
                // `limit` has passed, as kubelet's follow relists.
                let deadline = std::time::Instant::now() + limit;
                loop {
                    let status = self.status(id)?;
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if status.state != podlab_runtime::status::ContainerState::Running
                        || left.is_zero()
                    {
                        return Ok(status);
                    }
                    std::thread::sleep(left.min(RELIST));
                }
            }
        }
    }
}
