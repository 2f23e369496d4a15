//! `podlab top pod [NAME]` and `podlab top node`: kubectl top's columns, read straight from the
//! cgroups instead of metrics-server. CPU is the usage's rate over a short window (two reads
//! of the cgroup's CPU time, [`WINDOW`] apart; metrics-server's window is longer), memory the
//! working set (usage less inactive file cache), as cAdvisor counts it.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use podlab_cgroups::{cpu, memory, Cgroup};

use crate::context::Ctx;

/// How long CPU time is watched for one rate.
pub const WINDOW: Duration = Duration::from_millis(500);

/// `podlab top pod [NAME] [--containers]`: NAME CPU(cores) MEMORY(bytes) for the namespace's
/// running pods, or with `containers` POD NAME CPU(cores) MEMORY(bytes) for each of their
/// running containers (each container's own cgroup).
pub fn pods(name: Option<&str>, namespace: &str, containers: bool) -> Result<()> {
    let ctx = Ctx::open()?;
    let runtime = ctx.runtime()?;
    if runtime.cgroups().is_none() {
        bail!("no cgroups on this node (not root, or PODLAB_CGROUPS=off): nothing to measure");
    }
    let mut pods: Vec<(String, Cgroup)> = Vec::new();
    let mut rows_of_containers: Vec<(String, String, Cgroup)> = Vec::new();
    for sandbox in runtime.list_pod_sandboxes()? {
        let ready = sandbox.state == podlab_runtime::SandboxState::Ready;
        if !ready || sandbox.metadata.namespace != namespace {
            continue;
        }
        if name.is_some_and(|n| n != sandbox.metadata.name) {
            continue;
        }
        if let Some(cgroup) = runtime.pod_sandbox_cgroup(&sandbox.id)? {
            pods.push((sandbox.metadata.name.clone(), cgroup));
        }
        if containers {
            let filter = podlab_runtime::status::ContainerFilter {
                sandbox_id: Some(sandbox.id.clone()),
                state: Some(podlab_runtime::status::ContainerState::Running),
                ..Default::default()
            };
            for container in runtime.list_containers(&filter)? {
                if let Some(cgroup) = runtime.container_cgroup(&container.id)? {
                    rows_of_containers.push((
                        sandbox.metadata.name.clone(),
                        container.metadata.name.clone(),
                        cgroup,
                    ));
                }
            }
        }
    }
    if pods.is_empty() {
        match name {
            Some(name) => bail!("pods \"{name}\" not found"),
            None => {
                eprintln!("No resources found in {namespace} namespace.");
                return Ok(());
            }
        }
    }
    if containers {
        rows_of_containers.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let cgroups: Vec<&Cgroup> = rows_of_containers.iter().map(|(_, _, c)| c).collect();
        let cores = cpu_rates(&cgroups)?;
        let mut rows = vec![["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]
            .map(String::from)
            .to_vec()];
        for ((pod, container, cgroup), milli) in rows_of_containers.iter().zip(cores) {
            let bytes = memory::working_set_bytes(cgroup)?.unwrap_or(0);
            rows.push(vec![
                pod.clone(),
                container.clone(),
                format!("{milli}m"),
                mebibytes(bytes),
            ]);
        }
        print_table(&rows);
        return Ok(());
    }
    let cgroups: Vec<&Cgroup> = pods.iter().map(|(_, c)| c).collect();
    let cores = cpu_rates(&cgroups)?;
    let mut rows = vec![vec![
        "NAME".to_string(),
        "CPU(cores)".to_string(),
        "MEMORY(bytes)".to_string(),
    ]];
    for ((name, cgroup), milli) in pods.iter().zip(cores) {
        let bytes = memory::working_set_bytes(cgroup)?.unwrap_or(0);
        rows.push(vec![name.clone(), format!("{milli}m"), mebibytes(bytes)]);
    }
    print_table(&rows);
    Ok(())
}

/// `podlab top node`: the node's CPU and memory, as kubectl top node shows them.
pub fn node() -> Result<()> {
    let ctx = Ctx::open()?;
    let runtime = ctx.runtime()?;
    let Some(node) = runtime.cgroups() else {
        bail!("no cgroups on this node (not root, or PODLAB_CGROUPS=off): nothing to measure");
    };
    let root = node.hierarchy.cgroup("");
    let milli = cpu_rates(&[&root])?[0];
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let field = |key: &str| -> u64 {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    let total = field("MemTotal:");
    let used = total.saturating_sub(field("MemAvailable:"));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let name = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| h.to_lowercase())
        .unwrap_or_else(|| "localhost".into());
    print_table(&[
        vec![
            "NAME".into(),
            "CPU(cores)".into(),
            "CPU(%)".into(),
            "MEMORY(bytes)".into(),
            "MEMORY(%)".into(),
        ],
        vec![
            name,
            format!("{milli}m"),
            format!("{}%", milli * 100 / (cpus * 1000)),
            mebibytes(used),
            format!("{}%", used * 100 / total.max(1)),
        ],
    ]);
    Ok(())
}

/// Milli-CPUs used by each cgroup over [`WINDOW`].
fn cpu_rates(cgroups: &[&Cgroup]) -> Result<Vec<u64>> {
    let read = |c: &Cgroup| cpu::usage_ns(c).map(|u| u.unwrap_or(0));
    let before: Vec<u64> = cgroups.iter().map(|c| read(c)).collect::<Result<_, _>>()?;
    let started = Instant::now();
    std::thread::sleep(WINDOW);
    let elapsed = started.elapsed().as_nanos().max(1) as u64;
    let after: Vec<u64> = cgroups.iter().map(|c| read(c)).collect::<Result<_, _>>()?;
    Ok(before
        .iter()
        .zip(after)
        .map(|(b, a)| a.saturating_sub(*b).saturating_mul(1000) / elapsed)
        .collect())
}

/// kubectl top's memory: whole mebibytes.
fn mebibytes(bytes: u64) -> String {
    format!("{}Mi", bytes / (1024 * 1024))
}

/// Columns padded as kubectl's tabwriter pads them (3 spaces between).
fn print_table(rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                if i + 1 == row.len() {
                    cell.clone()
                } else {
                    format!("{cell:<width$}   ", width = widths[i])
                }
            })
            .collect();
        println!("{}", cells.concat());
    }
}
