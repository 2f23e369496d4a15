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

    /// Writes every complete log line added since the last call.
    pub fn pump(&mut self, out: &mut dyn Write) -> Result<()> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Ok(());
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            write_message(&line[..line.len() - 1], out)?;
        }
        Ok(())
    }
}

/// The text of one CRI log record. A full record (`F`) ends its line, a partial one (`P`)
/// continues on the next; an unreadable record is skipped.
fn write_message(line: &[u8], out: &mut dyn Write) -> Result<()> {
    if let Some(record) = podlab_runtime::cri_log::parse_line(line) {
        out.write_all(&record.content)?;
        if !record.partial {
            out.write_all(b"\n")?;
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
    let status = container_status(&pod, container)?;
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
        status.container_id.clone().with_context(|| {
            format!(
                "container {:?} in pod {:?} is waiting to start",
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
    while follow {
        let status = runtime.wait_container(&id, Some(Duration::from_millis(200)))?;
        follower.pump(&mut stdout)?;
        stdout.flush()?;
        if status.state != ContainerState::Running {
            break;
        }
    }
    Ok(())
}

/// The status of container `name` of the pod (the only one if not named, as kubectl requires).
pub fn container_status(pod: &Pod, name: Option<&str>) -> Result<ContainerStatus> {
    let status = pod.status.clone().unwrap_or_default();
    let all: Vec<ContainerStatus> = status
        .container_statuses
        .into_iter()
        .flatten()
        .chain(status.init_container_statuses.into_iter().flatten())
        .chain(status.ephemeral_container_statuses.into_iter().flatten())
        .collect();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    match name {
        Some(name) => all
            .into_iter()
            .find(|c| c.name == name)
            .with_context(|| format!("container {name} is not valid for pod {pod_name}")),
        None => {
            let regular = pod.spec.as_ref().map_or(0, |s| s.containers.len());
            if regular > 1 {
                let names: Vec<String> = pod
                    .spec
                    .iter()
                    .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
                    .collect();
                bail!(
                    "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                    names.join(" ")
                );
            }
            let first = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .map(|c| c.name.clone())
                .unwrap_or_default();
            all.into_iter()
                .find(|c| c.name == first)
                .with_context(|| format!("pod {pod_name} has no status yet"))
        }
    }
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
        )
        .unwrap();
        write_message(b"2026-12-02T10:00:00.000000002Z stderr P part", &mut out).unwrap();
        write_message(b"2026-12-02T10:00:00.000000003Z stderr F ial", &mut out).unwrap();
        assert_eq!(out, b"hello world\npartial\n");
    }
}
