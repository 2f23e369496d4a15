//! `podlab logs POD [-c C] [-f] [--previous] [--tail N] [--since D] [--timestamps]
//! [-l SELECTOR] [--all-containers] [--prefix]`: a container's output from its CRI log file
//! (`<RFC3339Nano> stdout|stderr F|P <text>`), the way kubelet serves it to kubectl; the
//! timestamps kubelet adds with `--timestamps` are the log records' own.

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

    /// Writes every complete log line added since the last call, the container's stdout to
    /// `out` and its stderr to `err` (as an attached `kubectl run` shows them).
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

// `podlab logs`' flags, kubectl's.
#[derive(Debug, Clone, clap::Args)]
pub struct LogsArgs {
    /// The pod (or `pod/NAME`); or `-l` instead.
    pub pod: Option<String>,
    #[arg(short = 'c', long = "container")]
    pub container: Option<String>,
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The previous instance of the container (before its last restart).
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// Lines of recent log to show (-1: all; 10 with a selector).
    #[arg(long)]
    pub tail: Option<i64>,
    /// Only lines newer than this duration (`5s`, `2m`, `1h30m`).
    #[arg(long)]
    pub since: Option<String>,
    /// Each line begins with its RFC3339 timestamp.
    #[arg(long)]
    pub timestamps: bool,
    /// The pods of this label selector instead of one named pod.
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// Every container of the pod (init, regular and ephemeral).
    #[arg(long = "all-containers")]
    pub all_containers: bool,
    /// Each line begins with `[pod/NAME/CONTAINER] `.
    #[arg(long)]
    pub prefix: bool,
}

/// How each line is shown.
#[derive(Debug, Clone, Default)]
struct Decor {
    prefix: Option<String>,
    timestamps: bool,
}

/// One container's log being shown.
struct Source {
    id: ContainerId,
    follower: Follower,
    decor: Decor,
    at_line_start: bool,
    running: bool,
}

pub fn run(args: &LogsArgs, namespace: &str) -> Result<()> {
    let ctx = Ctx::open()?;
    let pods: Vec<Pod> = match (&args.pod, &args.selector) {
        (Some(_), Some(_)) => bail!("only a selector (-l) or a POD name is allowed"),
        (None, None) => bail!(
            "expected 'logs [-f] [-p] (POD | TYPE/NAME) [-c CONTAINER]'.\nPOD or TYPE/NAME is a required argument for the logs command"
        ),
        (Some(name), None) => {
            let name = name.strip_prefix("pod/").or(name.strip_prefix("pods/")).unwrap_or(name);
            vec![ctx.store.get(namespace, name)?]
        }
        (None, Some(selector)) => {
            let selector =
                podlab_print::LabelSelector::parse(selector).map_err(|e| anyhow::anyhow!("{e}"))?;
            let (mut pods, _) = ctx.store.list::<Pod>(Some(namespace))?;
            pods.retain(|p| {
                selector.matches(&p.metadata.labels.clone().unwrap_or_default())
            });
            pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            if pods.is_empty() {
                eprintln!("No resources found in {namespace} namespace.");
                return Ok(());
            }
            pods
        }
    };
    // kubectl: every line, or the last 10 of each container with a selector.
    let tail = args
        .tail
        .unwrap_or(if args.selector.is_some() { 10 } else { -1 });
    let since = args
        .since
        .as_deref()
        .map(|text| {
            go_duration(text).with_context(|| {
                format!("invalid argument {text:?} for \"--since\" flag: time: invalid duration {text:?}")
            })
        })
        .transpose()?;
    let cutoff = since.map(|d| {
        podlab_runtime::cri_log::format_timestamp(
            podlab_runtime::liveness::now_ns() - d.as_nanos() as i64,
        )
    });
    let containers = crate::remote::Containers::open(&ctx)?;
    let mut sources = Vec::new();
    for pod in &pods {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let names: Vec<Option<String>> = match args.all_containers {
            true => all_containers(pod).into_iter().map(Some).collect(),
            false => vec![args.container.clone()],
        };
        for name in names {
            let status = container_status(pod, name.as_deref(), Caller::Logs)?;
            let id = log_container_id(pod, &status, args.previous)?;
            let decor = Decor {
                prefix: args
                    .prefix
                    .then(|| format!("[pod/{pod_name}/{}] ", status.name)),
                timestamps: args.timestamps,
            };
            let path = containers.log_path(&id)?;
            let text = std::fs::read(&path).unwrap_or_default();
            let mut lines = podlab_runtime::cri_log::parse_log(&text);
            if let Some(cutoff) = &cutoff {
                lines.retain(|l| l.timestamp >= *cutoff);
            }
            if tail >= 0 {
                let keep = usize::try_from(tail).unwrap_or(usize::MAX);
                let skip = lines.len().saturating_sub(keep);
                lines.drain(..skip);
            }
            let mut stdout = std::io::stdout().lock();
            let mut at_line_start = true;
            for line in &lines {
                write_line(
                    &mut stdout,
                    &decor,
                    &line.timestamp,
                    &line.content,
                    line.complete,
                )?;
                at_line_start = line.complete;
            }
            stdout.flush()?;
            let mut follower = Follower::open(&path);
            follower.offset = text.len() as u64;
            sources.push(Source {
                id,
                follower,
                decor,
                at_line_start,
                running: true,
            });
        }
    }
    // -f: until every container exits, as kubelet ends each stream then.
    if args.follow {
        let mut stdout = std::io::stdout();
        while sources.iter().any(|s| s.running) {
            let wait = Duration::from_millis(200) / sources.len().max(1) as u32;
            for source in sources.iter_mut().filter(|s| s.running) {
                let status = containers.wait_a_while(&source.id, wait)?;
                for line in source.follower.new_lines()? {
                    let Some(record) = podlab_runtime::cri_log::parse_line(&line) else {
                        continue;
                    };
                    let decor = match source.at_line_start {
                        true => source.decor.clone(),
                        false => Decor::default(),
                    };
                    write_line(
                        &mut stdout,
                        &decor,
                        &record.timestamp,
                        &record.content,
                        !record.partial,
                    )?;
                    source.at_line_start = !record.partial;
                }
                stdout.flush()?;
                source.running = status.state == ContainerState::Running;
            }
        }
    }
    Ok(())
}

/// One line as `kubectl logs` shows it: `[pod/P/C] ` with `--prefix`, the timestamp and a
/// space with `--timestamps`, the text, and its newline when the line was complete.
fn write_line(
    out: &mut dyn Write,
    decor: &Decor,
    timestamp: &str,
    content: &[u8],
    complete: bool,
) -> std::io::Result<()> {
    if let Some(prefix) = &decor.prefix {
        out.write_all(prefix.as_bytes())?;
    }
    if decor.timestamps {
        out.write_all(timestamp.as_bytes())?;
        out.write_all(b" ")?;
    }
    out.write_all(content)?;
    if complete {
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The pod's containers in kubectl's `--all-containers` order: init, regular, ephemeral.
fn all_containers(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let init = spec.init_containers.into_iter().flatten().map(|c| c.name);
    let regular = spec.containers.into_iter().map(|c| c.name);
    let ephemeral = spec
        .ephemeral_containers
        .into_iter()
        .flatten()
        .map(|c| c.name);
    init.chain(regular).chain(ephemeral).collect()
}

/// The container whose log is shown: the current one (or, while it waits to be restarted,
/// its last run, as kubelet serves the newest container's log), or with `previous` the one
/// before.
fn log_container_id(pod: &Pod, status: &ContainerStatus, previous: bool) -> Result<ContainerId> {
    let last_run = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.container_id.clone());
    let id_text = if previous {
        last_run.with_context(|| {
            format!(
                "previous terminated container {:?} in pod {:?} not found",
                status.name,
                pod.metadata.name.as_deref().unwrap_or("")
            )
        })?
    } else {
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
    Ok(ContainerId::parse(id_text.trim_start_matches("podlab://"))?)
}

/// A Go duration (`time.ParseDuration`): a sequence of decimal numbers with units `ns`, `us`
/// (`µs`), `ms`, `s`, `m`, `h`, such as `300ms`, `1.5h` or `2h45m`. Negative ones are refused.
pub fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * seconds;
    }
    Some(Duration::from_secs_f64(total))
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
    fn durations_read_as_go_reads_them() {
        assert_eq!(go_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        assert_eq!(go_duration("5"), None);
        assert_eq!(go_duration("-5s"), None);
        assert_eq!(go_duration("x"), None);
        assert_eq!(go_duration(""), None);
    }

    #[test]
    fn lines_take_their_prefix_and_timestamp_as_kubectl_shows_them() {
        let mut out = Vec::new();
        let decor = Decor {
            prefix: Some("[pod/p/c] ".into()),
            timestamps: true,
        };
        write_line(
            &mut out,
            &decor,
            "2026-12-03T12:00:00.000000001Z",
            b"hi",
            true,
        )
        .unwrap();
        assert_eq!(out, b"[pod/p/c] 2026-12-03T12:00:00.000000001Z hi\n");
    }

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
