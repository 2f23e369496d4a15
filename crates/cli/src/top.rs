//! `podlab top pod [NAME]` and `podlab top node`: kubectl top's columns, read straight from the
//! cgroups instead of metrics-server. CPU is the usage's rate over a short window (two reads
//! of the cgroup's CPU time, [`WINDOW`] apart; metrics-server's window is longer), memory the
//! working set (usage less inactive file cache), as cAdvisor counts it. The pods are chosen as
//! kubectl top's are (a name, or `-l`/`--field-selector` over the stored pods, `-A`) and
//! sorted as its `metricsutil` sorters sort them: by name (namespace first with `-A`), or with
//! `--sort-by=cpu|memory` the largest first, containers within their pod alike.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_cgroups::{cpu, memory, Cgroup};

use crate::context::Ctx;

/// How long CPU time is watched for one rate.
pub const WINDOW: Duration = Duration::from_millis(500);

/// `--sort-by` of kubectl top: `cpu` or `memory`, the largest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    Cpu,
    Memory,
}

impl SortBy {
    /// kubectl top's Validate.
    pub fn parse(text: Option<&str>) -> Result<Option<SortBy>> {
        match text {
            None | Some("") => Ok(None),
            Some("cpu") => Ok(Some(SortBy::Cpu)),
            Some("memory") => Ok(Some(SortBy::Memory)),
            Some(_) => bail!("--sort-by accepts only cpu or memory"),
        }
    }
}

/// What `podlab top pod` was asked for.
pub struct PodQuery<'a> {
    pub name: Option<&'a str>,
    pub namespace: &'a str,
    pub all_namespaces: bool,
    pub selector: Option<&'a str>,
    pub field_selector: Option<&'a str>,
    pub sort_by: Option<&'a str>,
    pub containers: bool,
    pub no_headers: bool,
}

/// One measured row: its keys (namespace, pod[, container]), CPU in millicores, bytes.
struct Usage {
    namespace: String,
    pod: String,
    container: Option<String>,
    milli: u64,
    bytes: u64,
}

/// Sorts as kubectl's sorters: the largest first for `cpu` or `memory` (a stable sort over
/// the name order, so that equal values keep it), else by name.
fn sort(rows: &mut [Usage], sort_by: Option<SortBy>) {
    match sort_by {
        Some(SortBy::Cpu) => rows.sort_by_key(|row| std::cmp::Reverse(row.milli)),
        Some(SortBy::Memory) => rows.sort_by_key(|row| std::cmp::Reverse(row.bytes)),
        None => {}
    }
}

/// `podlab top pod [NAME] [-l SEL] [--field-selector SEL] [-A] [--sort-by=cpu|memory]
/// [--containers]`: NAME CPU(cores) MEMORY(bytes) for the running pods chosen, or with
/// `containers` POD NAME CPU(cores) MEMORY(bytes) for each of their running containers (each
/// container's own cgroup); NAMESPACE first with `-A`.
pub fn pods(query: &PodQuery) -> Result<()> {
    let sort_by = SortBy::parse(query.sort_by)?;
    if query.name.is_some() && (query.selector.is_some() || query.field_selector.is_some()) {
        bail!("only one of NAME or selector can be provided");
    }
    let labels = query
        .selector
        .map(podlab_print::LabelSelector::parse)
        .transpose()
        .map_err(|e| anyhow!("{e}"))?;
    let fields = query
        .field_selector
        .map(|text| {
            let selector = podlab_print::FieldSelector::parse(text)?;
            selector.validate_for("Pod")?;
            Ok::<_, podlab_print::PrintError>(selector)
        })
        .transpose()
        .map_err(|e| anyhow!("{e}"))?;
    let ctx = Ctx::open()?;
    let runtime = ctx.runtime()?;
    if runtime.cgroups().is_none() {
        bail!("no cgroups on this node (not root, or PODLAB_CGROUPS=off): nothing to measure");
    }
    let namespace = (!query.all_namespaces).then_some(query.namespace);
    // The pods a selector chooses, as the API server lists them (their labels as they are now).
    let chosen: Option<BTreeSet<(String, String)>> = match (&labels, &fields) {
        (None, None) => None,
        _ => {
            let (pods, _) = ctx.store.list::<Pod>(namespace)?;
            let mut chosen = BTreeSet::new();
            for pod in pods {
                let value = serde_json::to_value(&pod)?;
                let labelled = labels
                    .as_ref()
                    .is_none_or(|l| l.matches(&pod.metadata.labels.clone().unwrap_or_default()));
                if labelled && fields.as_ref().is_none_or(|f| f.matches(&value)) {
                    chosen.insert((
                        pod.metadata.namespace.unwrap_or_default(),
                        pod.metadata.name.unwrap_or_default(),
                    ));
                }
            }
            Some(chosen)
        }
    };
    let mut pods: Vec<(String, String, Cgroup)> = Vec::new();
    let mut of_containers: Vec<(String, String, String, Cgroup)> = Vec::new();
    for sandbox in runtime.list_pod_sandboxes()? {
        let meta = &sandbox.metadata;
        if sandbox.state != podlab_runtime::SandboxState::Ready
            || namespace.is_some_and(|n| n != meta.namespace)
            || query.name.is_some_and(|n| n != meta.name)
            || chosen
                .as_ref()
                .is_some_and(|c| !c.contains(&(meta.namespace.clone(), meta.name.clone())))
        {
            continue;
        }
        if let Some(cgroup) = runtime.pod_sandbox_cgroup(&sandbox.id)? {
            pods.push((meta.namespace.clone(), meta.name.clone(), cgroup));
        }
        if query.containers {
            let filter = podlab_runtime::status::ContainerFilter {
                sandbox_id: Some(sandbox.id.clone()),
                state: Some(podlab_runtime::status::ContainerState::Running),
                ..Default::default()
            };
            for container in runtime.list_containers(&filter)? {
                if let Some(cgroup) = runtime.container_cgroup(&container.id)? {
                    of_containers.push((
                        meta.namespace.clone(),
                        meta.name.clone(),
                        container.metadata.name.clone(),
                        cgroup,
                    ));
                }
            }
        }
    }
    if pods.is_empty() {
        if let Some(name) = query.name {
            bail!("pods \"{name}\" not found");
        }
        if chosen.as_ref().is_some_and(|c| !c.is_empty()) {
            // Pods chosen, none running yet: kubectl's words for pods without metrics.
            bail!("metrics not available yet");
        }
        match namespace {
            Some(namespace) => eprintln!("No resources found in {namespace} namespace."),
            None => eprintln!("No resources found"),
        }
        return Ok(());
    }
    // One window for every cgroup measured: the pods', then their containers'.
    let cgroups: Vec<&Cgroup> = pods
        .iter()
        .map(|(_, _, c)| c)
        .chain(of_containers.iter().map(|(_, _, _, c)| c))
        .collect();
    let cores = cpu_rates(&cgroups)?;
    let mut rows = Vec::new();
    for ((namespace, pod, cgroup), milli) in pods.iter().zip(&cores) {
        rows.push(Usage {
            namespace: namespace.clone(),
            pod: pod.clone(),
            container: None,
            milli: *milli,
            bytes: memory::working_set_bytes(cgroup)?.unwrap_or(0),
        });
    }
    rows.sort_by(|a, b| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)));
    sort(&mut rows, sort_by);
    let mut table: Vec<Vec<String>> = Vec::new();
    let mut header = Vec::new();
    if query.all_namespaces {
        header.push("NAMESPACE");
    }
    if query.containers {
        header.extend(["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]);
    } else {
        header.extend(["NAME", "CPU(cores)", "MEMORY(bytes)"]);
    }
    if !query.no_headers {
        table.push(header.into_iter().map(String::from).collect());
    }
    let mut containers_of: BTreeMap<(String, String), Vec<Usage>> = BTreeMap::new();
    for ((namespace, pod, container, cgroup), milli) in
        of_containers.iter().zip(&cores[pods.len()..])
    {
        containers_of
            .entry((namespace.clone(), pod.clone()))
            .or_default()
            .push(Usage {
                namespace: namespace.clone(),
                pod: pod.clone(),
                container: Some(container.clone()),
                milli: *milli,
                bytes: memory::working_set_bytes(cgroup)?.unwrap_or(0),
            });
    }
    for row in &rows {
        let lines: Vec<Usage> = match query.containers {
            true => {
                let mut lines = containers_of
                    .remove(&(row.namespace.clone(), row.pod.clone()))
                    .unwrap_or_default();
                lines.sort_by(|a, b| a.container.cmp(&b.container));
                sort(&mut lines, sort_by);
                lines
            }
            false => vec![Usage {
                namespace: row.namespace.clone(),
                pod: row.pod.clone(),
                container: None,
                milli: row.milli,
                bytes: row.bytes,
            }],
        };
        for line in lines {
            let mut cells = Vec::new();
            if query.all_namespaces {
                cells.push(line.namespace);
            }
            cells.push(line.pod);
            cells.extend(line.container);
            cells.push(format!("{}m", line.milli));
            cells.push(mebibytes(line.bytes));
            table.push(cells);
        }
    }
    print_table(&table);
    Ok(())
}

/// What `podlab top node` was asked for.
pub struct NodeQuery<'a> {
    pub name: Option<&'a str>,
    pub selector: Option<&'a str>,
    pub sort_by: Option<&'a str>,
    pub no_headers: bool,
}

/// The labels kubelet puts on its Node (`kubernetes.io/hostname`, `os`, `arch` and their
/// `beta.` twins), what `top node -l` selects on.
fn node_labels(name: &str) -> BTreeMap<String, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    };
    [
        ("beta.kubernetes.io/arch", arch),
        ("beta.kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch),
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// `podlab top node [NAME] [-l SEL] [--sort-by=cpu|memory]`: the node's CPU and memory, as
/// kubectl top node shows them (this one node; a name or selector that is not it finds none).
pub fn node(query: &NodeQuery) -> Result<()> {
    // One node: sorting changes nothing, but a bad --sort-by is refused as kubectl does.
    SortBy::parse(query.sort_by)?;
    if query.name.is_some() && query.selector.is_some() {
        bail!("only one of NAME or --selector can be provided");
    }
    let labels = query
        .selector
        .map(podlab_print::LabelSelector::parse)
        .transpose()
        .map_err(|e| anyhow!("{e}"))?;
    let name = crate::apply::node_name();
    if let Some(asked) = query.name.filter(|n| *n != name) {
        bail!("Error from server (NotFound): nodemetrics.metrics.k8s.io \"{asked}\" not found");
    }
    if labels.is_some_and(|l| !l.matches(&node_labels(&name))) {
        bail!("metrics not available yet");
    }
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
    let mut table = Vec::new();
    if !query.no_headers {
        table.push(
            ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
                .map(String::from)
                .to_vec(),
        );
    }
    table.push(vec![
        name,
        format!("{milli}m"),
        format!("{}%", milli * 100 / (cpus * 1000)),
        mebibytes(used),
        format!("{}%", used * 100 / total.max(1)),
    ]);
    print_table(&table);
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
    if rows.is_empty() {
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(pod: &str, milli: u64, bytes: u64) -> Usage {
        Usage {
            namespace: "default".into(),
            pod: pod.into(),
            container: None,
            milli,
            bytes,
        }
    }

    #[test]
    fn sort_by_takes_cpu_or_memory_in_kubectls_words() {
        assert_eq!(SortBy::parse(None).unwrap(), None);
        assert_eq!(SortBy::parse(Some("cpu")).unwrap(), Some(SortBy::Cpu));
        assert_eq!(SortBy::parse(Some("memory")).unwrap(), Some(SortBy::Memory));
        assert_eq!(
            SortBy::parse(Some("name")).unwrap_err().to_string(),
            "--sort-by accepts only cpu or memory"
        );
    }

    #[test]
    fn the_largest_first_and_equal_values_keep_the_name_order() {
        let mut rows = vec![
            usage("a", 5, 10),
            usage("b", 20, 10),
            usage("c", 5, 30),
            usage("d", 20, 1),
        ];
        sort(&mut rows, Some(SortBy::Cpu));
        let names: Vec<&str> = rows.iter().map(|r| r.pod.as_str()).collect();
        assert_eq!(names, ["b", "d", "a", "c"]);
        rows.sort_by(|a, b| a.pod.cmp(&b.pod));
        sort(&mut rows, Some(SortBy::Memory));
        let names: Vec<&str> = rows.iter().map(|r| r.pod.as_str()).collect();
        assert_eq!(names, ["c", "a", "b", "d"]);
    }

    #[test]
    fn a_node_carries_kubelets_well_known_labels() {
        let labels = node_labels("box");
        assert_eq!(labels["kubernetes.io/hostname"], "box");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        let selector = podlab_print::LabelSelector::parse("kubernetes.io/os=linux").unwrap();
        assert!(selector.matches(&labels));
    }
}
