//! Is the host as we found it? A snapshot of what the peers could change on the host, taken
//! before the lab starts and again after its teardown, and the difference in words.
//!
//! It covers what dockerd and podman change by default and what a leaked process or mount would
//! show: the host's network links (`docker0`, `cni-podman0`, veths), forwarding sysctls, the
//! iptables and nftables rules, the mount table, the cgroup folders, the peers' processes, the
//! fixed state paths the peers use by default (`/var/lib/docker`, `/run/containerd`, ...), the
//! netns pins in `/run/netns`, and the number of network namespaces the kernel still holds
//! (`net_namespace` objects in the slab allocator).
//!
//! The machine is shared: a change that names none of the peers is reported as someone else's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use crate::procs::Table;

/// The programs whose processes the check looks for.
pub const PEER_COMMS: &[&str] = &[
    "containerd",
    "containerd-shim",
    "dockerd",
    "docker-proxy",
    "conmon",
    "catatonit",
    "podman",
    "runc",
    "crun",
    "ctr",
];

/// Where the peers keep state when no flag says otherwise.
pub const DEFAULT_STATE_PATHS: &[&str] = &[
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers/storage",
    "/var/lib/cni/networks",
    "/run/docker",
    "/run/docker.sock",
    "/run/containerd",
    "/run/containers",
    "/run/libpod",
    "/run/runc",
    "/run/crun",
    "/opt/containerd",
    "/etc/docker/key.json",
];

/// Words that mark a change as the peers' doing.
const PEER_WORDS: &[&str] = &[
    "podlab-peers",
    "docker",
    "containerd",
    "libpod",
    "podman",
    "cni",
    "conmon",
    "catatonit",
    "runc",
    "crun",
    "veth",
    "netns",
    "overlay",
];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostState {
    pub links: BTreeSet<String>,
    pub sysctls: BTreeMap<String, String>,
    pub rules: BTreeMap<String, String>,
    pub mounts: BTreeSet<String>,
    pub cgroups: BTreeSet<String>,
    pub peer_processes: BTreeSet<String>,
    pub state_paths: BTreeSet<String>,
    pub netns_pins: BTreeSet<String>,
}

/// One difference between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub text: String,
    /// Whether it names one of the peers (else it is likely another user of the machine).
    pub ours: bool,
}

pub fn snapshot() -> HostState {
    let links = list_dir("/sys/class/net");
    let sysctls = [
        "/proc/sys/net/ipv4/ip_forward",
        "/proc/sys/net/ipv6/conf/all/forwarding",
        "/proc/sys/net/bridge/bridge-nf-call-iptables",
    ]
    .into_iter()
    .filter_map(|p| {
        Some((
            p.to_string(),
            std::fs::read_to_string(p).ok()?.trim().into(),
        ))
    })
    .collect();
    let mut rules = BTreeMap::new();
    for (program, args) in [
        ("iptables", &["-S"][..]),
        ("iptables", &["-t", "nat", "-S"][..]),
        ("ip6tables", &["-S"][..]),
        ("ip6tables", &["-t", "nat", "-S"][..]),
        ("nft", &["list", "ruleset"][..]),
    ] {
        if crate::tools::which(program).is_none() {
            continue;
        }
        if let Ok(out) = Command::new(program).args(args).output() {
            let key = format!("{program} {}", args.join(" "));
            rules.insert(key, String::from_utf8_lossy(&out.stdout).into_owned());
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| t.lines().map(mount_key).collect())
        .unwrap_or_default();
    let mut cgroups = BTreeSet::new();
    cgroup_dirs(Path::new("/sys/fs/cgroup"), 0, &mut cgroups);
    let peer_processes = Table::read()
        .procs
        .values()
        .filter(|p| PEER_COMMS.contains(&p.comm.as_str()) && p.state != 'Z')
        .map(|p| {
            let mut args = p.command_text();
            args.truncate(160);
            format!("{} {}: {args}", p.pid, p.comm)
        })
        .collect();
    let state_paths = DEFAULT_STATE_PATHS
        .iter()
        .filter(|p| Path::new(p).exists())
        .map(|p| p.to_string())
        .collect();
    HostState {
        links,
        sysctls,
        rules,
        mounts,
        cgroups,
        peer_processes,
        state_paths,
        netns_pins: list_dir("/run/netns"),
    }
}

/// What `after` has that `before` had not, or lost, in words.
pub fn changes(before: &HostState, after: &HostState) -> Vec<Change> {
    let mut out = Vec::new();
    let mut sets = |what: &str, a: &BTreeSet<String>, b: &BTreeSet<String>| {
        for added in b.difference(a) {
            out.push(change(format!("{what} appeared: {added}")));
        }
        for gone in a.difference(b) {
            out.push(change(format!("{what} disappeared: {gone}")));
        }
    };
    sets("network link", &before.links, &after.links);
    sets("mount", &before.mounts, &after.mounts);
    sets("cgroup", &before.cgroups, &after.cgroups);
    sets(
        "default state path",
        &before.state_paths,
        &after.state_paths,
    );
    sets("netns pin", &before.netns_pins, &after.netns_pins);
    // A peer process is the lab's only if it names a lab folder: others run runc and podman on
    // this machine too (the lab's daemons, shims and conmons carry its folder in their arguments).
    for added in after.peer_processes.difference(&before.peer_processes) {
        out.push(Change {
            text: format!("peer process appeared: {added}"),
            ours: added.contains("podlab-peers."),
        });
    }
    for (key, value) in &after.sysctls {
        if before.sysctls.get(key) != Some(value) {
            // A forwarding switch is the peers' kind of change whatever its name says.
            out.push(Change {
                text: format!(
                    "{key} changed: {} -> {value}",
                    before.sysctls.get(key).map_or("(absent)", String::as_str)
                ),
                ours: true,
            });
        }
    }
    for (key, value) in &after.rules {
        if before.rules.get(key) != Some(value) {
            let old: BTreeSet<&str> = before
                .rules
                .get(key)
                .map(|t| t.lines().collect())
                .unwrap_or_default();
            let new: BTreeSet<&str> = value.lines().collect();
            for line in new.difference(&old) {
                out.push(Change {
                    text: format!("{key}: rule added: {line}"),
                    ours: true,
                });
            }
            for line in old.difference(&new) {
                out.push(Change {
                    text: format!("{key}: rule removed: {line}"),
                    ours: true,
                });
            }
        }
    }
    out
}

fn change(text: String) -> Change {
    let lower = text.to_lowercase();
    let ours = PEER_WORDS.iter().any(|w| lower.contains(w));
    Change { text, ours }
}

/// `fstype mountpoint` of a mountinfo line: what identifies a mount across snapshots (ids and
/// options may be reused or change).
fn mount_key(line: &str) -> String {
    let mount_point = line.split(' ').nth(4).unwrap_or("?");
    let fs_type = line
        .split_once(" - ")
        .and_then(|(_, r)| r.split(' ').next())
        .unwrap_or("?");
    format!("{fs_type} {mount_point}")
}

fn list_dir(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// cgroup folders down to depth 3 (hierarchy / parent / child), where the peers put theirs.
fn cgroup_dirs(dir: &Path, depth: usize, out: &mut BTreeSet<String>) {
    if depth > 3 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let path = entry.path();
            out.insert(path.display().to_string());
            cgroup_dirs(&path, depth + 1, out);
        }
    }
}

/// How many network namespaces the kernel holds now: the `net_namespace` objects of the slab
/// allocator. A namespace is freed asynchronously (the `netns` workqueue) after its last
/// reference goes, so this count falls some time after the processes and pins are gone; it is
/// the kernel's own signal that the freeing is done.
///
/// SLUB counts an object that sits freed in a per-CPU cache (a CPU slab or sheaf) as in use, so
/// the raw count lags by up to a few dozen; writing `1` to the cache's `shrink` file first makes
/// SLUB flush those caches (it frees cached memory and changes no setting), and the count is
/// then exact. None when neither file can be read.
pub fn net_namespaces_in_kernel() -> Option<u64> {
    let slab = Path::new("/sys/kernel/slab/net_namespace");
    let _ = std::fs::write(slab.join("shrink"), "1");
    if let Ok(text) = std::fs::read_to_string(slab.join("objects")) {
        if let Some(n) = text.split_whitespace().next().and_then(|n| n.parse().ok()) {
            return Some(n);
        }
    }
    let text = std::fs::read_to_string("/proc/slabinfo").ok()?;
    parse_slabinfo_active(&text, "net_namespace")
}

/// The `<active_objs>` column of one cache in /proc/slabinfo.
pub fn parse_slabinfo_active(text: &str, cache: &str) -> Option<u64> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&cache))
        .and_then(|f| f.get(1)?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_in_words() {
        let before = HostState {
            links: ["lo", "eth0"].map(String::from).into(),
            sysctls: [("/proc/sys/net/ipv4/ip_forward".to_string(), "0".to_string())].into(),
            rules: [(
                "iptables -t nat -S".to_string(),
                "-P PREROUTING ACCEPT\n".to_string(),
            )]
            .into(),
            ..HostState::default()
        };
        let mut after = before.clone();
        after.links.insert("docker0".into());
        after
            .sysctls
            .insert("/proc/sys/net/ipv4/ip_forward".into(), "1".into());
        after.rules.insert(
            "iptables -t nat -S".into(),
            "-P PREROUTING ACCEPT\n-A POSTROUTING -s 172.17.0.0/16 -j MASQUERADE\n".into(),
        );
        after
            .cgroups
            .insert("/sys/fs/cgroup/pids/someone-else".into());
        after
            .peer_processes
            .insert("7 runc: runc run someone-elses-test".into());
        let c = changes(&before, &after);
        assert_eq!(c.len(), 5, "{c:?}");
        assert!(c
            .iter()
            .any(|c| c.text.contains("someone-elses-test") && !c.ours));
        assert!(c
            .iter()
            .any(|c| c.text == "network link appeared: docker0" && c.ours));
        assert!(c
            .iter()
            .any(|c| c.text.contains("ip_forward changed: 0 -> 1") && c.ours));
        assert!(c.iter().any(|c| c.text.contains("MASQUERADE") && c.ours));
        assert!(c.iter().any(|c| c.text.contains("someone-else") && !c.ours));
        assert!(changes(&before, &before).is_empty());
    }

    #[test]
    fn slabinfo_and_mount_keys() {
        let text = "slabinfo - version: 2.1\n# name <active_objs> <num_objs>\nnet_namespace  35  63  4288 7 8 : tunables 0 0 0 : slabdata 9 9 0\n";
        assert_eq!(parse_slabinfo_active(text, "net_namespace"), Some(35));
        assert_eq!(parse_slabinfo_active(text, "nope"), None);
        assert_eq!(
            mount_key("36 25 0:32 / /run rw,nosuid - tmpfs tmpfs rw,mode=755"),
            "tmpfs /run"
        );
    }
}
