//! `podlab logs POD [-c C] [-f] [--previous]`: a container's output from its CRI log file
//! (`<RFC3339Nano> stdout|stderr F|P <text>`), the way kubelet serves it to kubectl.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use podlab_runtime::id::ContainerId;
use podlab_runtime::status::ContainerState;

use crate::context::Ctx;

/// Reads a CRI log file from where it last stopped and writes the messages it holds.
pub struct Follower {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl Follower {
    pub fn open(path: &Path) -> Follower {
        Follower {
            path: path.to_path_buf(),
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// Writes every complete log line added since the last call, both streams to `out` (as
    /// kubelet serves logs to `kubectl logs`).
    pub fn pump(&mut self, out: &mut dyn Write) -> Result<()> {
        for line in self.new_lines()? {
            write_message(&line, out, None)?;
        }
        Ok(())
    }

    /// [`Follower::pump`] with the container's stderr written to `err` (as an attached
    /// `kubectl run` shows them).
    pub fn pump_streams(&mut self, out: &mut dyn Write, err: &mut dyn Write) -> Result<()> {
        for line in self.new_lines()? {
            write_message(&line, out, Some(&mut *err))?;
        }
        Ok(())
    }

    fn new_lines(&mut self) -> Result<Vec<Vec<u8>>> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Ok(Vec::new());
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.partial.drain(..=end).collect();
            line.pop();
            lines.push(line);
        }
        Ok(lines)
    }
}

/// The text of one CRI log record, to `err` when it is from stderr and `err` is given. A full
/// record (`F`) ends its line, a partial one (`P`) continues on the next; an unreadable record
/// is skipped.
fn write_message<'a>(
    line: &[u8],
    out: &'a mut dyn Write,
    err: Option<&'a mut dyn Write>,
) -> Result<()> {
    if let Some(record) = podlab_runtime::cri_log::parse_line(line) {
        let to = match err {
            Some(err) if record.stream == podlab_runtime::cri_log::Stream::Stderr => err,
            _ => out,
        };
        to.write_all(&record.content)?;
        if !record.partial {
            to.write_all(b"\n")?;
        }
    }
    Ok(())
}

pub fn run(
    pod: &str,
    container: Option<&str>,
    namespace: &str,
    follow: bool,
    previous: bool,
) -> Result<()> {
    let ctx = Ctx::open()?;
    let pod: Pod = ctx.store.get(namespace, pod)?;
    let status = container_status(&pod, container, Caller::Logs)?;
    let id_text = if previous {
        status
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.container_id.clone())
            .with_context(|| {
                format!(
                    "previous terminated container {:?} in pod {:?} not found",
                    status.name,
                    pod.metadata.name.as_deref().unwrap_or("")
                )
            })?
    } else {
        // A container waiting to be restarted (CrashLoopBackOff) shows its last run's output,
        // as kubelet serves the newest container's log.
        let last_run = status
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.container_id.clone());
        status.container_id.clone().or(last_run).with_context(|| {
            let reason = status
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.clone())
                .unwrap_or_else(|| "ContainerCreating".into());
            format!(
                "container {:?} in pod {:?} is waiting to start: {reason}",
                status.name,
                pod.metadata.name.as_deref().unwrap_or("")
            )
        })?
    };
    let runtime = ctx.runtime()?;
    let id = ContainerId::parse(id_text.trim_start_matches("podlab://"))?;
    let mut follower = Follower::open(&runtime.container_log_path(&id)?);
    let mut stdout = std::io::stdout();
    follower.pump(&mut stdout)?;
    // -f: until the container exits, as kubelet ends the stream then.
    if follow {
        loop {
            let status = wait_a_while(&runtime, &id, Duration::from_millis(200))?;
            follower.pump(&mut stdout)?;
            stdout.flush()?;
            if status.state != ContainerState::Running {
                break;
            }
        }
    }
    Ok(())
}

/// Waits up to `limit` for the container to exit and returns its status then (still Running
/// when it did not exit in time): the step of a loop that streams a container's output.
pub fn wait_a_while(
    runtime: &podlab_runtime::Runtime,
    id: &ContainerId,
    limit: Duration,
) -> Result<podlab_runtime::status::ContainerStatus> {
    match runtime.wait_container(id, Some(limit)) {
        Err(podlab_runtime::Error::Timeout { .. }) => Ok(runtime.container_status(id)?),
        other => Ok(other?),
    }
}

/// Which command asks for a container: their messages differ, as kubectl's do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Logs,
    Exec,
}

/// kubectl's annotation naming the container that commands default to.
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";

/// The status of container `name` of the pod (init, regular or ephemeral). Without a name, the
/// one the `kubectl.kubernetes.io/default-container` annotation names, else the first
/// container, with kubectl's note on stderr when there was a choice. A container that has no
/// status yet is waiting to start.
pub fn container_status(pod: &Pod, name: Option<&str>, caller: Caller) -> Result<ContainerStatus> {
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let in_spec = |n: &str| {
        spec.containers.iter().any(|c| c.name == n)
            || spec.init_containers.iter().flatten().any(|c| c.name == n)
            || spec
                .ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == n)
    };
    let chosen = match name {
        Some(name) if in_spec(name) => name.to_string(),
        Some(name) => match caller {
            Caller::Logs => bail!("container {name} is not valid for pod {pod_name}"),
            Caller::Exec => bail!("container {name} not found in pod {pod_name}"),
        },
        None => {
            let annotated = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CONTAINER_ANNOTATION))
                .filter(|n| in_spec(n));
            match annotated {
                Some(name) => name.clone(),
                None => {
                    let first = spec
                        .containers
                        .first()
                        .map(|c| c.name.clone())
                        .with_context(|| format!("pod {pod_name} does not have any containers"))?;
                    let others = spec.containers.len() > 1
                        || spec.init_containers.as_ref().is_some_and(|i| !i.is_empty())
                        || spec
                            .ephemeral_containers
                            .as_ref()
                            .is_some_and(|e| !e.is_empty());
                    if others {
                        eprintln!(
                            "Defaulted container {first:?} out of: {}",
                            all_container_names(&spec)
                        );
                    }
                    first
                }
            }
        }
    };
    let status = pod.status.clone().unwrap_or_default();
    status
        .container_statuses
        .into_iter()
        .flatten()
        .chain(status.init_container_statuses.into_iter().flatten())
        .chain(status.ephemeral_container_statuses.into_iter().flatten())
        .find(|c| c.name == chosen)
        .with_context(|| {
            let reason = match spec.init_containers.as_ref().is_some_and(|i| !i.is_empty()) {
                true => "PodInitializing",
                false => "ContainerCreating",
            };
            format!("container {chosen:?} in pod {pod_name:?} is waiting to start: {reason}")
        })
}

/// The id of the container `status` describes if it is running, else kubectl's words for
/// `verb` (`exec into`, `attach to`) a container that is not.
pub fn running_container_id(
    status: &ContainerStatus,
    verb: &str,
    pod: &str,
) -> Result<ContainerId> {
    let running = status
        .state
        .as_ref()
        .and_then(|s| s.running.as_ref())
        .is_some();
    let id = status
        .container_id
        .clone()
        .filter(|_| running)
        .with_context(|| {
            format!(
                "cannot {verb} container {:?} of pod {pod:?}: it is not running",
                status.name
            )
        })?;
    Ok(ContainerId::parse(id.trim_start_matches("podlab://"))?)
}

/// kubectl's list of a pod's containers: `a, b, dbg (ephem), setup (init)`.
fn all_container_names(spec: &k8s_openapi::api::core::v1::PodSpec) -> String {
    let mut names: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
    names.extend(
        spec.ephemeral_containers
            .iter()
            .flatten()
            .map(|c| format!("{} (ephem)", c.name)),
    );
    names.extend(
        spec.init_containers
            .iter()
            .flatten()
            .map(|c| format!("{} (init)", c.name)),
    );
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_lines_become_their_text() {
        let mut out = Vec::new();
        write_message(
            b"2026-12-02T10:00:00.000000001Z stdout F hello world",
            &mut out,
            None,
        )
        .unwrap();
        write_message(
            b"2026-12-02T10:00:00.000000002Z stderr P part",
            &mut out,
            None,
        )
        .unwrap();
        write_message(
            b"2026-12-02T10:00:00.000000003Z stderr F ial",
            &mut out,
            None,
        )
        .unwrap();
        assert_eq!(out, b"hello world\npartial\n");
    }

    #[test]
    fn stderr_records_go_to_their_own_writer_when_asked() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        write_message(b"2026-12-02T10:00:00Z stdout F o", &mut out, Some(&mut err)).unwrap();
        write_message(b"2026-12-02T10:00:00Z stderr F e", &mut out, Some(&mut err)).unwrap();
        assert_eq!((out.as_slice(), err.as_slice()), (&b"o\n"[..], &b"e\n"[..]));
    }
}
