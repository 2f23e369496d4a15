//! `ListMetricDescriptors` and `ListPodSandboxMetrics`: the CRI's own metrics, cAdvisor's names
//! and labels as containerd's CRI plugin gives them (`container_cpu_usage_seconds_total`,
//! `container_memory_working_set_bytes`, …), so that kubelet can serve `/metrics/cadvisor`
//! from the runtime instead of cAdvisor.
//!
//! Where each comes from, for a running container:
//!
//! | metrics | the kernel's file |
//! |---|---|
//! | cpu usage, user, system | `cpuacct.usage`, `cpuacct.stat` (v2: `cpu.stat` `usage_usec`, `user_usec`, `system_usec`) |
//! | cfs periods, throttling | `cpu.stat` `nr_periods`, `nr_throttled`, `throttled_time` (v2: `throttled_usec`) |
//! | memory | `memory.usage_in_bytes`, `memory.max_usage_in_bytes`, `memory.failcnt`, `memory.kmem.usage_in_bytes`, `memory.stat` (v2: `memory.current`, `memory.peak`, `memory.stat`), the working set as cAdvisor counts it, OOM kills |
//! | processes, threads, descriptors, sockets | the cgroup's `cgroup.procs`, each process's `/proc/PID/task` and `/proc/PID/fd`; `pids.max` |
//! | writable layer | `statvfs` of the overlay's upper folder (inodes, size of its filesystem), the folder's bytes |
//! | spec | `cpu.cfs_period_us`, `cpu.shares`, the memory limit, `memory.memsw.limit_in_bytes` |
//! | network (the pod's) | `/proc/<pause pid>/net/dev`: the pod's namespace's interfaces but `lo` |
//!
//! Values are whole units (seconds, bytes), as containerd's: `Metric.value` is an integer. The
//! block I/O metrics are described but have no values (podlab makes no blkio cgroups; critest
//! holds them optional).

use std::collections::BTreeMap;
use std::path::Path;

use podlab_cgroups::{Cgroup, Controller, Version};
use podlab_runtime::status::{ContainerState, SandboxState};
use podlab_runtime::{ContainerFilter, ContainerStatus, SandboxStatus};

use crate::proto;
use crate::service::Cri;

const BASE: &[&str] = &["pod", "namespace", "container", "id", "image"];
const NETWORK: &[&str] = &["pod", "namespace", "container", "id", "image", "interface"];
const DISK: &[&str] = &["pod", "namespace", "container", "id", "image", "device"];
const BLKIO: &[&str] = &[
    "pod",
    "namespace",
    "container",
    "id",
    "image",
    "device",
    "major",
    "minor",
    "operation",
];
const FAILURES: &[&str] = &[
    "pod",
    "namespace",
    "container",
    "id",
    "image",
    "failure_type",
    "scope",
];

/// Name, help, label keys: cAdvisor's (containerd's) words.
const DESCRIPTORS: &[(&str, &str, &[&str])] = &[
    ("container_cpu_user_seconds_total", "Cumulative user CPU time consumed in seconds.", BASE),
    ("container_cpu_system_seconds_total", "Cumulative system CPU time consumed in seconds.", BASE),
    ("container_cpu_usage_seconds_total", "Cumulative CPU time consumed in seconds.", BASE),
    ("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", BASE),
    ("container_cpu_cfs_throttled_periods_total", "Number of CPU throttled period intervals.", BASE),
    ("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", BASE),
    ("container_memory_cache", "Number of bytes of memory used by the container for caching purposes.", BASE),
    ("container_memory_rss", "Size of RSS in bytes, total anonymous memory and swap cache memory used by the container.", BASE),
    ("container_memory_kernel_usage", "Size of kernel memory allocated to the container in bytes, includes page tables, socket buffers...", BASE),
    ("container_memory_mapped_file", "Size of container's memory mapped files in bytes.", BASE),
    ("container_memory_swap", "Container swap usage in bytes.", BASE),
    ("container_memory_failcnt", "Number of times container memory usage has hit its cgroup v1 upper memory limit, for cg2 this value is not currently supported", BASE),
    ("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", BASE),
    ("container_memory_max_usage_bytes", "Maximum container memory usage recorded in bytes", BASE),
    ("container_memory_working_set_bytes", "Amount of memory that is actively used by the container, excluding cached memory.", BASE),
    ("container_memory_total_active_file_bytes", "Amount of cache memory bytes, in use by the container, in file on disk.", BASE),
    ("container_memory_total_inactive_file_bytes", "Amount of inactive cache memory bytes, for the container, in file on disk.", BASE),
    ("container_memory_failures_total", "Cumulative count of container memory allocation failures.", FAILURES),
    ("container_oom_events_total", "Count of out of memory events observed for the container", BASE),
    ("container_network_receive_bytes_total", "Cumulative count of bytes received", NETWORK),
    ("container_network_receive_packets_total", "Cumulative count of packets received", NETWORK),
    ("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", NETWORK),
    ("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", NETWORK),
    ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", NETWORK),
    ("container_network_transmit_packets_total", "Cumulative count of packets transmitted", NETWORK),
    ("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", NETWORK),
    ("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", NETWORK),
    ("container_fs_inodes_free", "Number of available Inodes", DISK),
    ("container_fs_inodes_total", "Number of Inodes", DISK),
    ("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", DISK),
    ("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", DISK),
    ("container_fs_reads_bytes_total", "Cumulative count of bytes read", DISK),
    ("container_fs_reads_total", "Cumulative count of reads completed", DISK),
    ("container_fs_writes_bytes_total", "Cumulative count of bytes written", DISK),
    ("container_fs_writes_total", "Cumulative count of writes completed", DISK),
    ("container_blkio_device_usage_total", "Blkio device bytes usage", BLKIO),
    ("container_processes", "Number of processes running inside the container.", BASE),
    ("container_file_descriptors", "Number of open file descriptors for the container.", BASE),
    ("container_sockets", "Number of open sockets for the container.", BASE),
    ("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", BASE),
    ("container_threads", "Number of threads running inside the container", BASE),
    ("container_last_seen", "Last time a container was seen by the exporter", BASE),
    ("container_start_time_seconds", "Start time of the container since unix epoch in seconds", BASE),
    ("container_spec_cpu_period", "CPU period of the container", BASE),
    ("container_spec_cpu_shares", "CPU share of the container", BASE),
    ("container_spec_memory_limit_bytes", "Memory limit for the container", BASE),
    ("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container", BASE),
];

/// Every metric podlab gives.
pub fn descriptors() -> Vec<proto::MetricDescriptor> {
    DESCRIPTORS
        .iter()
        .map(|(name, help, keys)| proto::MetricDescriptor {
            name: (*name).to_owned(),
            help: (*help).to_owned(),
            label_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        })
        .collect()
}

/// Whether a metric only grows.
fn is_counter(name: &str) -> bool {
    name.ends_with("_total")
}

/// One container's (or the pod's) metrics, with the label values they share.
struct Collector {
    labels: Vec<String>,
    metrics: Vec<proto::Metric>,
}

impl Collector {
    fn new(labels: Vec<String>) -> Collector {
        Collector {
            labels,
            metrics: Vec::new(),
        }
    }

    fn add(&mut self, name: &str, value: Option<u64>) {
        self.add_labelled(name, &[], value);
    }

    fn add_labelled(&mut self, name: &str, extra: &[&str], value: Option<u64>) {
        let Some(value) = value else {
            return;
        };
        let mut label_values = self.labels.clone();
        label_values.extend(extra.iter().map(|v| (*v).to_owned()));
        self.metrics.push(proto::Metric {
            name: name.to_owned(),
            timestamp: 0,
            metric_type: if is_counter(name) {
                proto::MetricType::Counter
            } else {
                proto::MetricType::Gauge
            } as i32,
            label_values,
            value: Some(proto::UInt64Value { value }),
        });
    }
}

const NS_PER_SECOND: u64 = 1_000_000_000;

impl Cri {
    /// ListPodSandboxMetrics: every ready sandbox's network metrics and its running
    /// containers' metrics.
    pub(crate) fn pod_sandbox_metrics(&self) -> Vec<proto::PodSandboxMetrics> {
        let runtime = self.runtime();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut all = Vec::new();
        for sandbox in runtime.list_pod_sandboxes().unwrap_or_default() {
            if sandbox.state != SandboxState::Ready {
                continue;
            }
            let metrics = network_metrics(&sandbox);
            let filter = ContainerFilter {
                sandbox_id: Some(sandbox.id.clone()),
                ..Default::default()
            };
            let container_metrics = runtime
                .list_containers(&filter)
                .unwrap_or_default()
                .iter()
                .filter(|c| c.state == ContainerState::Running)
                .map(|c| proto::ContainerMetrics {
                    container_id: c.id.to_string(),
                    metrics: self.container_metrics(&sandbox, c, &mounts),
                })
                .collect();
            all.push(proto::PodSandboxMetrics {
                pod_sandbox_id: sandbox.id.to_string(),
                metrics,
                container_metrics,
            });
        }
        all
    }

    fn container_metrics(
        &self,
        sandbox: &SandboxStatus,
        container: &ContainerStatus,
        mounts: &str,
    ) -> Vec<proto::Metric> {
        let mut out = Collector::new(vec![
            sandbox.metadata.name.clone(),
            sandbox.metadata.namespace.clone(),
            container.metadata.name.clone(),
            container.id.to_string(),
            container.image.clone(),
        ]);
        let now = podlab_runtime::liveness::now_ns() as u64;
        out.add("container_last_seen", Some(now / NS_PER_SECOND));
        out.add(
            "container_start_time_seconds",
            Some(container.started_at.max(0) as u64 / NS_PER_SECOND),
        );
        let cgroup = self
            .runtime()
            .container_record(&container.id)
            .ok()
            .and_then(|r| r.cgroup);
        if let Some(cgroup) = cgroup.filter(Cgroup::exists) {
            cpu(&mut out, &cgroup);
            memory(&mut out, &cgroup);
            processes(&mut out, &cgroup);
            spec(&mut out, &cgroup);
        }
        let upper = self
            .runtime()
            .layout()
            .sandbox(&container.sandbox_id)
            .container(&container.id)
            .upper();
        filesystem(&mut out, &upper, mounts);
        out.metrics
    }
}

fn read(cgroup: &Cgroup, controller: Controller, file: &str) -> Option<String> {
    cgroup.read(controller, file).ok().flatten()
}

fn read_number(cgroup: &Cgroup, controller: Controller, file: &str) -> Option<u64> {
    read(cgroup, controller, file)?.trim().parse().ok()
}

/// `key value` lines: every value by key.
fn stat(text: Option<String>) -> BTreeMap<String, u64> {
    text.unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// USER_HZ, the unit of `cpuacct.stat`.
fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

fn cpu(out: &mut Collector, cgroup: &Cgroup) {
    let seconds = |ns: Option<u64>| ns.map(|ns| ns / NS_PER_SECOND);
    let cpu_stat = stat(read(cgroup, Controller::Cpu, "cpu.stat"));
    match cgroup.version {
        Version::V1 => {
            let usage = read_number(cgroup, Controller::Cpuacct, "cpuacct.usage");
            out.add("container_cpu_usage_seconds_total", seconds(usage));
            let ticks = stat(read(cgroup, Controller::Cpuacct, "cpuacct.stat"));
            let hz = clock_ticks();
            out.add(
                "container_cpu_user_seconds_total",
                ticks.get("user").map(|t| t / hz),
            );
            out.add(
                "container_cpu_system_seconds_total",
                ticks.get("system").map(|t| t / hz),
            );
            out.add(
                "container_cpu_cfs_throttled_seconds_total",
                seconds(cpu_stat.get("throttled_time").copied()),
            );
        }
        Version::V2 => {
            let usec = |key: &str| cpu_stat.get(key).map(|us| us / 1_000_000);
            out.add("container_cpu_usage_seconds_total", usec("usage_usec"));
            out.add("container_cpu_user_seconds_total", usec("user_usec"));
            out.add("container_cpu_system_seconds_total", usec("system_usec"));
            out.add(
                "container_cpu_cfs_throttled_seconds_total",
                usec("throttled_usec"),
            );
        }
    }
    out.add(
        "container_cpu_cfs_periods_total",
        cpu_stat.get("nr_periods").copied(),
    );
    out.add(
        "container_cpu_cfs_throttled_periods_total",
        cpu_stat.get("nr_throttled").copied(),
    );
}

fn memory(out: &mut Collector, cgroup: &Cgroup) {
    let memory_stat = stat(read(cgroup, Controller::Memory, "memory.stat"));
    let get = |key: &str| memory_stat.get(key).copied();
    let number = |file: &str| read_number(cgroup, Controller::Memory, file);
    let (usage, max_usage, failcnt, kernel, swap) = match cgroup.version {
        Version::V1 => {
            let usage = number("memory.usage_in_bytes");
            let swap = number("memory.memsw.usage_in_bytes")
                .zip(usage)
                .map(|(memsw, usage)| memsw.saturating_sub(usage))
                .or(Some(0));
            (
                usage,
                number("memory.max_usage_in_bytes"),
                number("memory.failcnt"),
                number("memory.kmem.usage_in_bytes"),
                swap,
            )
        }
        Version::V2 => (
            number("memory.current"),
            number("memory.peak"),
            Some(0),
            get("kernel").or_else(|| {
                Some(get("kernel_stack")? + get("slab")? + get("sock")? + get("pagetables")?)
            }),
            number("memory.swap.current").or(Some(0)),
        ),
    };
    let (cache, rss, mapped, active_file, inactive_file) = match cgroup.version {
        Version::V1 => (
            get("total_cache"),
            get("total_rss"),
            get("total_mapped_file"),
            get("total_active_file"),
            get("total_inactive_file"),
        ),
        Version::V2 => (
            get("file"),
            get("anon"),
            get("file_mapped"),
            get("active_file"),
            get("inactive_file"),
        ),
    };
    out.add("container_memory_usage_bytes", usage);
    out.add("container_memory_max_usage_bytes", max_usage.or(usage));
    out.add("container_memory_failcnt", failcnt);
    out.add("container_memory_kernel_usage", kernel);
    out.add("container_memory_swap", swap);
    out.add("container_memory_cache", cache);
    out.add("container_memory_rss", rss);
    out.add("container_memory_mapped_file", mapped);
    out.add("container_memory_total_active_file_bytes", active_file);
    out.add("container_memory_total_inactive_file_bytes", inactive_file);
    out.add(
        "container_memory_working_set_bytes",
        podlab_cgroups::memory::working_set_bytes(cgroup)
            .ok()
            .flatten(),
    );
    // cAdvisor's four: page faults, minor and major, of the cgroup alone and with its children.
    let (own, hierarchy) = match cgroup.version {
        Version::V1 => (
            ("pgfault", "pgmajfault"),
            ("total_pgfault", "total_pgmajfault"),
        ),
        Version::V2 => (("pgfault", "pgmajfault"), ("pgfault", "pgmajfault")),
    };
    for (scope, (minor, major)) in [("container", own), ("hierarchy", hierarchy)] {
        out.add_labelled(
            "container_memory_failures_total",
            &["pgfault", scope],
            get(minor),
        );
        out.add_labelled(
            "container_memory_failures_total",
            &["pgmajfault", scope],
            get(major),
        );
    }
    out.add(
        "container_oom_events_total",
        podlab_cgroups::memory::oom_kills(cgroup).ok(),
    );
}

fn processes(out: &mut Collector, cgroup: &Cgroup) {
    let pids = cgroup.processes().unwrap_or_default();
    let (mut threads, mut fds, mut sockets) = (0u64, 0u64, 0u64);
    for pid in &pids {
        threads += std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for entry in dir.flatten() {
                fds += 1;
                let target = std::fs::read_link(entry.path()).unwrap_or_default();
                if target.to_string_lossy().starts_with("socket:") {
                    sockets += 1;
                }
            }
        }
    }
    out.add("container_processes", Some(pids.len() as u64));
    out.add("container_threads", Some(threads));
    out.add("container_file_descriptors", Some(fds));
    out.add("container_sockets", Some(sockets));
    // 0: no limit, as cAdvisor says it.
    let max = read(cgroup, Controller::Pids, "pids.max")
        .map(|text| text.trim().parse().unwrap_or(0))
        .or(Some(0));
    out.add("container_threads_max", max);
}

fn spec(out: &mut Collector, cgroup: &Cgroup) {
    match cgroup.version {
        Version::V1 => {
            out.add(
                "container_spec_cpu_period",
                read_number(cgroup, Controller::Cpu, "cpu.cfs_period_us"),
            );
            out.add(
                "container_spec_cpu_shares",
                read_number(cgroup, Controller::Cpu, "cpu.shares"),
            );
            let swap = read_number(cgroup, Controller::Memory, "memory.memsw.limit_in_bytes")
                .filter(|v| *v < 1 << 62);
            out.add("container_spec_memory_swap_limit_bytes", swap.or(Some(0)));
        }
        Version::V2 => {
            let max = read(cgroup, Controller::Cpu, "cpu.max").unwrap_or_default();
            let period = max.split_whitespace().nth(1).and_then(|p| p.parse().ok());
            out.add("container_spec_cpu_period", period);
            // cpu.weight back to shares, as cAdvisor converts it.
            let weight = read_number(cgroup, Controller::Cpu, "cpu.weight");
            out.add(
                "container_spec_cpu_shares",
                weight.map(|w| 2 + (w.saturating_sub(1) * 262142) / 9999),
            );
            let swap = read(cgroup, Controller::Memory, "memory.swap.max")
                .and_then(|t| t.trim().parse().ok());
            out.add("container_spec_memory_swap_limit_bytes", swap.or(Some(0)));
        }
    }
    out.add(
        "container_spec_memory_limit_bytes",
        Some(
            podlab_cgroups::memory::limit(cgroup)
                .ok()
                .flatten()
                .unwrap_or(0),
        ),
    );
}

/// The container's writable layer: its filesystem's inodes and size, its own bytes; `device`
/// is the filesystem's mount source.
fn filesystem(out: &mut Collector, upper: &Path, mounts: &str) {
    let Ok(fs) = nix::sys::statvfs::statvfs(upper) else {
        return;
    };
    let device = device_of(upper, mounts).unwrap_or_default();
    let (bytes, _) = crate::images::usage(upper);
    let extra = [device.as_str()];
    out.add_labelled("container_fs_inodes_free", &extra, Some(fs.files_free()));
    out.add_labelled("container_fs_inodes_total", &extra, Some(fs.files()));
    out.add_labelled(
        "container_fs_limit_bytes",
        &extra,
        Some(fs.blocks() * fs.fragment_size()),
    );
    out.add_labelled("container_fs_usage_bytes", &extra, Some(bytes));
}

/// The mount source of the filesystem `path` is on (`/proc/self/mountinfo`'s, by its device
/// number), as cAdvisor names devices.
fn device_of(path: &Path, mounts: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let wanted = format!("{}:{}", libc::major(dev), libc::minor(dev));
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.get(2) != Some(&wanted.as_str()) {
            return None;
        }
        // After the optional fields and the "-": the type, then the source.
        let dash = fields.iter().position(|f| *f == "-")?;
        fields.get(dash + 2).map(|s| (*s).to_owned())
    })
}

/// The pod's interfaces but `lo`, from its namespace's `/proc/<pause>/net/dev`; none for a
/// pod in the node's network (the node's are not the pod's).
fn network_metrics(sandbox: &SandboxStatus) -> Vec<proto::Metric> {
    let Some(pause) = sandbox.pause_pid else {
        return Vec::new();
    };
    if sandbox.network_mode != podlab_runtime::status::NetworkMode::Pod {
        return Vec::new();
    }
    let Ok(dev) = std::fs::read_to_string(format!("/proc/{pause}/net/dev")) else {
        return Vec::new();
    };
    let mut out = Collector::new(vec![
        sandbox.metadata.name.clone(),
        sandbox.metadata.namespace.clone(),
        String::new(),
        sandbox.id.to_string(),
        String::new(),
    ]);
    for (interface, counters) in parse_net_dev(&dev) {
        if interface == "lo" {
            continue;
        }
        let names = [
            (0, "container_network_receive_bytes_total"),
            (1, "container_network_receive_packets_total"),
            (2, "container_network_receive_errors_total"),
            (3, "container_network_receive_packets_dropped_total"),
            (8, "container_network_transmit_bytes_total"),
            (9, "container_network_transmit_packets_total"),
            (10, "container_network_transmit_errors_total"),
            (11, "container_network_transmit_packets_dropped_total"),
        ];
        for (column, name) in names {
            out.add_labelled(name, &[interface.as_str()], counters.get(column).copied());
        }
    }
    out.metrics
}

/// `/proc/net/dev`: each interface with its 16 counters (receive: bytes packets errs drop fifo
/// frame compressed multicast; transmit: bytes packets errs drop fifo colls carrier compressed).
fn parse_net_dev(text: &str) -> Vec<(String, Vec<u64>)> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let counters = counters
                .split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect();
            Some((name.trim().to_owned(), counters))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_descriptor_has_help_and_labels_and_counters_end_in_total() {
        let all = descriptors();
        assert!(all.len() >= 45);
        let mut names = std::collections::BTreeSet::new();
        for d in &all {
            assert!(names.insert(d.name.clone()), "{} twice", d.name);
            assert!(!d.help.is_empty() && !d.label_keys.is_empty(), "{}", d.name);
            assert_eq!(&d.label_keys[..5], BASE, "{}", d.name);
        }
    }

    #[test]
    fn net_dev_counters_are_read_by_interface() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
             lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0\n  \
             eth0:    4242      7    1    2    0     0          0         0      999       5    3    4    0     0       0          0\n";
        let parsed = parse_net_dev(text);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].0, "eth0");
        assert_eq!(parsed[1].1[0], 4242);
        assert_eq!(parsed[1].1[3], 2);
        assert_eq!(parsed[1].1[8], 999);
        assert_eq!(parsed[1].1[11], 4);
    }

    #[test]
    fn a_labelled_metric_has_one_value_per_key() {
        let mut out = Collector::new(BASE.iter().map(|s| s.to_string()).collect());
        out.add_labelled(
            "container_memory_failures_total",
            &["pgfault", "container"],
            Some(3),
        );
        out.add("container_processes", None);
        assert_eq!(out.metrics.len(), 1);
        assert_eq!(out.metrics[0].label_values.len(), FAILURES.len());
        assert_eq!(
            out.metrics[0].metric_type,
            proto::MetricType::Counter as i32
        );
    }
}
