//! `podlab exec POD|TYPE/NAME [-c C] [-i] [-t] -- CMD...`: a command inside a running container's
//! namespaces, with this terminal's stdout and stderr, its stdin with `-i`, and with `-it` a
//! pty of its own in the container; its exit status is podlab's.

use std::os::fd::AsFd;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use podlab_runtime::tty::WindowSize;
use podlab_runtime::ExecStdio;

use crate::context::Ctx;
use crate::terminal::Streams;

pub fn run(
    target: &str,
    timeout: std::time::Duration,
    container: Option<&str>,
    namespace: &str,
    cmd: &[String],
    streams: crate::terminal::Streams,
) -> Result<i32> {
    let ctx = Ctx::open()?;
    let pod_object: Pod = crate::attachable::pod(&ctx, target, namespace, timeout)?;
    let pod = pod_object.metadata.name.as_deref().unwrap_or_default();
    let status = crate::logs::container_status(&pod_object, container, crate::logs::Caller::Exec)?;
    let id = crate::logs::running_container_id(&status, "exec into", pod)?;
    if let Some(endpoint) = crate::remote::endpoint(&ctx.root) {
        return match streams {
            Streams::NoStdin => crate::remote::exec_sync(&endpoint, &id, cmd),
            _ => crate::remote::exec(&endpoint, &id, cmd, streams),
        };
    }
    let runtime = ctx.runtime()?;
    if streams == Streams::Tty {
        let size = crate::terminal::size().unwrap_or(WindowSize { rows: 24, cols: 80 });
        return match runtime.exec_tty(&id, cmd, size) {
            Ok(exec) => crate::terminal::run_console(&exec),
            Err(podlab_runtime::Error::StartFailed { failure, .. }) => cannot_run(&failure),
            Err(e) => Err(e.into()),
        };
    }
    let null = std::fs::File::open("/dev/null")?;
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let stdio = ExecStdio {
        stdin: match streams {
            Streams::NoStdin => null.as_fd(),
            _ => stdin.as_fd(),
        },
        stdout: stdout.as_fd(),
        stderr: stderr.as_fd(),
    };
    match runtime.exec(&id, cmd, stdio, None) {
        Err(podlab_runtime::Error::StartFailed { failure, .. }) => cannot_run(&failure),
        other => Ok(other?),
    }
}

/// A command that could not be run (not found, not executable): runc's words on stderr and the
/// shell's status, 127 or 126, as `crictl exec`, `docker exec` and `podman exec` end.
pub fn cannot_run(failure: &podlab_runtime::InitFailure) -> Result<i32> {
    match failure.exit_status() {
        Some(status) => {
            eprintln!("podlab: exec failed: unable to start container process: {failure}");
            Ok(status)
        }
        None => anyhow::bail!("exec failed: unable to start container process: {failure}"),
    }
}
