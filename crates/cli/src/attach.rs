//! `podlab attach POD|TYPE/NAME [-c C] [-i] [-t]`: kubectl attach's twin — the output of a running
//! container's own process as it comes and, with `-i`, this stdin to it; with a container
//! started with `tty`, this terminal in raw mode around its console. Also the session that
//! `run -it` and `debug -it` open once their container runs.
//!
//! The session ends when the container's process exits (its output closes), when the user
//! types the detach keys Ctrl-P Ctrl-Q in a tty session (docker's and podman's keys; kubectl
//! has none and is ended with its terminal), or when podlab is stopped (SIGTERM, SIGHUP, and
//! Ctrl-C without a tty); the last two leave the container running. The detach keys typed
//! where there is no tty are refused with an error that says so.
//!
//! When the node agent runs its pods on a CRI runtime, `attach` is that runtime's streaming
//! Attach (`remote::attach`), with the same rules for `-i` and `-t` ([`Plan`]).

use std::os::fd::AsFd;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType};
use podlab_runtime::id::ContainerId;
use podlab_runtime::tty::{self, RawMode, RelayEnds, WindowSize};
use podlab_runtime::Runtime;

use crate::context::Ctx;

/// What the user asked for with `-i`, `-t` and `-q`.
#[derive(Debug, Clone, Copy)]
pub struct Flags {
    pub stdin: bool,
    pub tty: bool,
    pub quiet: bool,
}

/// A container's `stdin` and `tty`, from the pod's spec.
#[derive(Debug, Clone, Copy, Default)]
pub struct Allocated {
    pub stdin: bool,
    pub tty: bool,
}

impl Allocated {
    pub fn of(pod: &Pod, container: &str) -> Allocated {
        let spec = pod.spec.clone().unwrap_or_default();
        let regular = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == container)
            .map(|c| (c.stdin, c.tty));
        let ephemeral = || {
            spec.ephemeral_containers
                .iter()
                .flatten()
                .find(|c| c.name == container)
                .map(|c| (c.stdin, c.tty))
        };
        let (stdin, tty) = regular.or_else(ephemeral).unwrap_or_default();
        Allocated {
            stdin: stdin.unwrap_or(false),
            tty: tty.unwrap_or(false),
        }
    }
}

pub fn run(
    target: &str,
    timeout: std::time::Duration,
    container: Option<&str>,
    namespace: &str,
    flags: Flags,
) -> Result<i32> {
    let ctx = Ctx::open()?;
    let pod: Pod = crate::attachable::pod(&ctx, target, namespace, timeout)?;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let pod_name = pod_name.as_str();
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
    if let Some(phase @ ("Succeeded" | "Failed")) = phase.as_deref() {
        bail!("cannot attach a container in a completed pod; current phase is {phase}");
    }
    let status = crate::logs::container_status(&pod, container, crate::logs::Caller::Exec)
        .map_err(|e| anyhow::anyhow!("cannot attach to the container: {e}"))?;
    let id = crate::logs::running_container_id(&status, "attach to", pod_name)?;
    let allocated = Allocated::of(&pod, &status.name);
    let ended = match crate::remote::endpoint(&ctx.root) {
        Some(endpoint) => {
            let plan = Plan::of(flags, allocated, &status.name);
            let ended = crate::remote::attach(&endpoint, &id, plan)?;
            if ended.detached && !flags.quiet {
                eprintln!("Detached from container {}: it keeps running.", status.name);
            }
            ended
        }
        None => session(&ctx.runtime()?, &id, &status.name, allocated, flags, true)?,
    };
    let always = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .is_none_or(|p| p == "Always");
    if !flags.quiet && flags.stdin && ended.raw && always {
        println!(
            "Session ended, resume using 'podlab attach {pod_name} -c {} -i -t' command when the pod is running",
            status.name
        );
    }
    Ok(0)
}

/// What an attach session streams, from the user's flags and the container's spec.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// The container's process has a console (its output one stream; sizes are passed on).
    pub tty: bool,
    /// This terminal goes in raw mode around it.
    pub raw: bool,
    /// The user's stdin goes to the container.
    pub input: bool,
}

impl Plan {
    /// kubectl's rules for `-i` and `-t` against what the container has (and its messages).
    pub fn of(flags: Flags, allocated: Allocated, name: &str) -> Plan {
        let mut use_tty = flags.tty;
        if flags.tty && !allocated.tty {
            use_tty = false;
            if !flags.quiet {
                eprintln!("error: Unable to use a TTY - container {name} did not allocate one");
            }
        } else if !flags.tty && allocated.tty {
            // Its output comes from a console either way.
            use_tty = true;
        }
        let streams = crate::terminal::streams(flags.stdin, use_tty, flags.quiet);
        let plan = Plan {
            tty: use_tty,
            raw: streams == crate::terminal::Streams::Tty,
            input: flags.stdin && (allocated.stdin || allocated.tty),
        };
        if !flags.quiet {
            eprintln!("If you don't see a command prompt, try pressing enter.");
        }
        plan
    }
}

/// How an attach session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The user's terminal was in raw mode around the container's console.
    pub raw: bool,
    /// The user typed the detach keys: the container goes on running.
    pub detached: bool,
    /// podlab was stopped by this signal.
    pub signal: Option<i32>,
}

/// Attaches this terminal to a running container until its output ends, the user detaches
/// (Ctrl-P Ctrl-Q, in a tty session when `detachable`) or podlab is stopped, with kubectl's
/// rules for `-i` and `-t` against what the container has.
pub fn session(
    runtime: &Runtime,
    id: &ContainerId,
    name: &str,
    allocated: Allocated,
    flags: Flags,
    detachable: bool,
) -> Result<Ended> {
    let Plan { raw, input, .. } = Plan::of(flags, allocated, name);
    let (local, remote) = socket::socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .context("socketpair")?;
    let stderr = std::io::stderr();
    let attached = runtime.attach(id, input, remote.as_fd(), (!raw).then(|| stderr.as_fd()))?;
    drop(remote);
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    // The detach keys need a tty session; typed into a terminal without one (its flow
    // control off, or Ctrl-Q would never reach podlab) they are refused, not passed on.
    let refusal = format!(
        "error: cannot detach: container {name} has no TTY, and Ctrl-P Ctrl-Q only detach from \
         one (Ctrl-C ends this attach and leaves the container running)"
    );
    let detach = match (raw, detachable) {
        (true, true) => tty::Detach::Keys,
        (false, true) if input && tty::is_terminal(stdin.as_fd()) => tty::Detach::Refused(&refusal),
        _ => tty::Detach::Off,
    };
    let ends = RelayEnds {
        input: input.then(|| stdin.as_fd()),
        output: stdout.as_fd(),
        remote_input: input.then(|| local.as_fd()),
        remote_output: local.as_fd(),
        ended: None,
        detach,
    };
    let end = if raw {
        let _raw = RawMode::enter(stdin.as_fd())?;
        let mut first = true;
        tty::relay(&ends, Some(stdout.as_fd()), |size| {
            if std::mem::take(&mut first) {
                // kubectl's trick: one size larger, then the size, so that a re-attached
                // program redraws its screen.
                let larger = WindowSize {
                    rows: size.rows + 1,
                    cols: size.cols + 1,
                };
                let _ = runtime.resize_container_tty(id, larger);
            }
            let _ = runtime.resize_container_tty(id, size);
        })?
    } else {
        tty::relay(&ends, None, |_| {})?
    };
    drop(attached);
    let detached = end == tty::RelayEnd::Detached;
    if detached && !flags.quiet {
        eprintln!("Detached from container {name}: it keeps running.");
    }
    let signal = match end {
        tty::RelayEnd::Signal(signo) => Some(signo),
        _ => None,
    };
    Ok(Ended {
        raw,
        detached,
        signal,
    })
}
