//! One pod's network, set up and torn down: the CNI path (Debian's bridge + host-local plugins,
//! plus loopback as containerd runs it) against podlab's built-in netlink path, next to their
//! baselines measured in the same run.
//!
//! Every sample runs in a forked single-threaded driver (`podlab_benches::time_in_child`) that
//! first joins a network namespace the bench made: that namespace is the node, where the bridge,
//! the host ends of the veths and the plugins live. So `cargo bench` on a real host makes
//! nothing in the host's network namespace. The pod is one held namespace, attached and
//! detached again and again.
//!
//! Rows:
//! - `baseline/netns`: a pod's network namespace made and dropped (a holder process spawned with
//!   CLONE_NEWNET, then killed), the cost every sandbox pays before any network is attached;
//! - `baseline/plugins-exec`: the plugins alone, run by a bare `Command` with fixed stdin (bridge
//!   ADD + DEL, each delegating to host-local; loopback ADD + DEL): what the CNI path cannot go
//!   below;
//! - `cni/setup+teardown`, `cni-no-loopback/setup+teardown`: podlab's CNI client, ADD then DEL;
//! - `builtin/setup+teardown`, `builtin/setup`: the built-in path, both steps and setup alone;
//!   `builtin/setup-state-on-disk` with leases and cache on the temporary folder's disk instead
//!   of tmpfs (every row but this one keeps its state on tmpfs, as under `/run/podlab`).
//!
//! Each driver first attaches and detaches once, untimed: a node makes its bridge once.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use podlab_benches::{or_die, time_in_child};
use podlab_cni::{Attachment, BuiltinNetwork, CniConfig, CniNetwork, PodNetwork, PodlabNet};
use podlab_ns::ops::{self, Holder};
use podlab_ns::NsKind;

const PLUGINS: &str = "/usr/lib/cni";

/// The node and the pod namespaces, made once for the whole run (so that the kernel's slow,
/// asynchronous teardown of dead namespaces, which takes the rtnl lock, does not fall into the
/// next samples): each driver joins the node and attaches the pod.
struct Lab {
    node: Holder,
    pod: Holder,
    /// The drivers' state folders, by kind; removed with the lab (a driver ends with `_exit`,
    /// which runs no destructor, so it cannot clean up after itself).
    memory: PathBuf,
    disk: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.memory);
        let _ = std::fs::remove_dir_all(&self.disk);
    }
}

/// What one driver holds: the pod's attachment and its state folder.
struct Driver {
    pod_netns: PathBuf,
    attachment: Attachment,
    net: PodlabNet,
    dir: PathBuf,
}

/// Where a driver keeps leases and cached results.
#[derive(Clone, Copy)]
enum State {
    /// tmpfs, as `/run` (podlab's root for root) is on most hosts.
    Memory,
    /// The temporary folder's disk.
    Disk,
}

impl State {
    fn base(self) -> PathBuf {
        let folder = format!("podlab-cni-bench-{}", std::process::id());
        match self {
            State::Memory if is_tmpfs(Path::new("/dev/shm")) => Path::new("/dev/shm").join(folder),
            _ => std::env::temp_dir().join(folder),
        }
    }
}

fn is_tmpfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

/// In the forked driver: into the node's namespace, with a state folder of its own.
fn driver(lab: &Lab) -> Driver {
    driver_on(lab, State::Memory)
}

fn driver_on(lab: &Lab, state: State) -> Driver {
    or_die(ops::join_path(&lab.node.ns_path(NsKind::Net), NsKind::Net));
    let base = match state {
        State::Memory => &lab.memory,
        State::Disk => &lab.disk,
    };
    let dir = base.join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    or_die(std::fs::create_dir_all(&dir));
    let pod_netns = lab.pod.ns_path(NsKind::Net);
    let attachment = Attachment::new("bench", &pod_netns, &dir.join("sandbox")).for_pod(
        "default",
        "bench",
        "bench-uid",
    );
    let net = PodlabNet::new(&dir.join("ipam"));
    Driver {
        pod_netns,
        attachment,
        net,
        dir,
    }
}

fn cni(driver: &Driver, loopback: bool) -> CniNetwork {
    let mut config = CniConfig::new(&driver.dir.join("net.d"), &[PathBuf::from(PLUGINS)]);
    config.default_net = Some(driver.net.clone());
    config.loopback = loopback;
    warmed_up(or_die(CniNetwork::new(config)), driver)
}

fn builtin(driver: &Driver) -> BuiltinNetwork {
    warmed_up(or_die(BuiltinNetwork::new(driver.net.clone())), driver)
}

/// One untimed round first: a node makes its bridge once, not once per pod, so the timed rounds
/// are those of a node that has it.
fn warmed_up<N: PodNetwork>(network: N, driver: &Driver) -> N {
    attach_detach(&network, &driver.attachment);
    network
}

fn attach_detach(network: &dyn PodNetwork, attachment: &Attachment) {
    or_die(network.setup(attachment));
    or_die(network.teardown(attachment));
}

fn baselines(c: &mut Criterion, lab: &Lab) {
    let mut group = c.benchmark_group("baseline");
    group.sample_size(20);
    group.bench_function("netns", |b| {
        b.iter_custom(|n| {
            time_in_child(
                n,
                || or_die(ops::create(&[NsKind::Net])),
                |_| or_die(Holder::spawn(&[NsKind::Net], || Ok(()))).kill(),
            )
        })
    });
    group.bench_function("plugins-exec", |b| {
        b.iter_custom(|n| {
            time_in_child(
                n,
                || driver(lab),
                |d| {
                    let netns = &d.pod_netns;
                    let list = d.net.conflist();
                    let mut bridge = list["plugins"][0].clone();
                    bridge["cniVersion"] = list["cniVersion"].clone();
                    bridge["name"] = list["name"].clone();
                    let bridge = bridge.to_string();
                    let loopback =
                        r#"{"cniVersion":"1.0.0","name":"cni-loopback","type":"loopback"}"#;
                    for (plugin, ifname, stdin, command) in [
                        ("loopback", "lo", loopback, "ADD"),
                        ("bridge", "eth0", bridge.as_str(), "ADD"),
                        ("bridge", "eth0", bridge.as_str(), "DEL"),
                        ("loopback", "lo", loopback, "DEL"),
                    ] {
                        exec_plugin(plugin, command, netns, ifname, stdin);
                    }
                },
            )
        })
    });
    group.finish();
}

/// Runs a plugin the plainest way: spawn, write stdin, read stdout, wait.
fn exec_plugin(plugin: &str, command: &str, netns: &Path, ifname: &str, stdin: &str) {
    let mut child = or_die(
        Command::new(Path::new(PLUGINS).join(plugin))
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", "bench")
            .env("CNI_NETNS", netns)
            .env("CNI_IFNAME", ifname)
            .env("CNI_PATH", PLUGINS)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn(),
    );
    or_die(
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(stdin.as_bytes()),
    );
    let mut out = String::new();
    or_die(child.stdout.take().expect("piped").read_to_string(&mut out));
    let status = or_die(child.wait());
    if !status.success() {
        or_die(Err::<(), _>(format!("{plugin} {command}: {out}")));
    }
}

fn cni_path(c: &mut Criterion, lab: &Lab) {
    for (group_name, loopback) in [("cni", true), ("cni-no-loopback", false)] {
        let mut group = c.benchmark_group(group_name);
        group.sample_size(20);
        group.bench_function("setup+teardown", |b| {
            b.iter_custom(|n| {
                time_in_child(
                    n,
                    || {
                        let d = driver(lab);
                        let network = cni(&d, loopback);
                        (d, network)
                    },
                    |(d, network)| attach_detach(network, &d.attachment),
                )
            })
        });
        group.finish();
    }
}

fn builtin_path(c: &mut Criterion, lab: &Lab) {
    let mut group = c.benchmark_group("builtin");
    group.bench_function("setup+teardown", |b| {
        b.iter_custom(|n| {
            time_in_child(
                n,
                || {
                    let d = driver(lab);
                    let network = builtin(&d);
                    (d, network)
                },
                |(d, network)| attach_detach(network, &d.attachment),
            )
        })
    });
    for (name, state) in [
        ("setup", State::Memory),
        ("setup-state-on-disk", State::Disk),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|n| {
                setup_time_in_child(n, || {
                    let d = driver_on(lab, state);
                    let network = builtin(&d);
                    (d, network)
                })
            })
        });
    }
    group.finish();
}

/// Like `time_in_child`, but only the setups are timed (each is followed by an untimed
/// teardown); the forked driver sends its sum back through `run_in_child`.
fn setup_time_in_child(n: u64, make: impl FnOnce() -> (Driver, BuiltinNetwork)) -> Duration {
    let nanos = podlab_ns::child::run_in_child(|| {
        let (d, network) = make();
        let mut spent = Duration::ZERO;
        for _ in 0..n {
            let start = Instant::now();
            or_die(network.setup(&d.attachment));
            spent += start.elapsed();
            or_die(network.teardown(&d.attachment));
        }
        Ok(spent.as_nanos() as u64)
    });
    Duration::from_nanos(nanos.expect("bench driver"))
}

fn allowed() -> bool {
    let allowed = podlab_ns::child::run_in_child(|| ops::create(&[NsKind::Net])).is_ok()
        && Path::new(PLUGINS).join("bridge").exists();
    if !allowed {
        eprintln!(
            "podlab-cni benches skipped: they need root (a network namespace of their own) and {PLUGINS}"
        );
    }
    allowed
}

fn all(c: &mut Criterion) {
    if !allowed() {
        return;
    }
    let lab = Lab {
        node: or_die(Holder::spawn(&[NsKind::Net], || Ok(()))),
        pod: or_die(Holder::spawn(&[NsKind::Net], || Ok(()))),
        memory: State::Memory.base(),
        disk: State::Disk.base(),
    };
    baselines(c, &lab);
    cni_path(c, &lab);
    builtin_path(c, &lab);
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(8)).warm_up_time(Duration::from_secs(2));
    targets = all
}
criterion_main!(benches);
