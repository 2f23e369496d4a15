//! The five comparisons, run in one lab against every peer that is installed.
//!
//! 1. `ns-set`: a namespace set (uts+ipc+net+pid+mnt) around `/bin/true`, as one command line:
//!    `unshare --uts --ipc --net --pid --fork --mount /bin/true` vs podlab-ns's clone + exec
//!    (the `podlab-ns-true` helper), with a plain spawn of `/bin/true` as the baseline.
//! 2. `container-true`: one container running `/bin/true`, created, run and removed: runc,
//!    runc and crun in the cgroup2-only view, `ctr run --rm`, `docker run --rm`, `podman run --rm`.
//! 3. `pod`: a sandbox and two containers up (every command returned: they run), then deleted:
//!    podman (`pod create` + `pod start` + 2× `run -d --pod`; `pod rm -f -t 0`), docker (a
//!    sandbox container and 2 joining it with `--network container:` and `--ipc container:`;
//!    `rm -f`), containerd the way its CRI plugin builds a pod (a sandbox task and 2 joining its
//!    net, ipc and uts namespaces with `ctr run --with-ns`; kill + delete).
//! 4. `scale`: 1, 10, 100, 500 pods alive (podman pods; docker and ctr sandbox containers): the
//!    time to start one more at each level (and remove it again), and the memory per pod (Pss
//!    and RSS of catatonit + conmon for podman, of the shim + its sandbox process for docker and
//!    ctr; the daemons' own memory apart).
//! 5. `teardown`: delete N pods one after another, and wait until the kernel has freed their
//!    network namespaces (the `net_namespace` slab count is back where it was).
//!
//! Every command of the peers runs inside the lab (see [`crate::lab`]); comparison 1 makes its
//! namespaces from the host's, which is what `unshare` users do.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::podlab::Podlab;
use super::record::{fill_ratios, rows_of, Row};
use super::stats::{interleave, Contender, Trial};
use crate::engines::containerd::Containerd;
use crate::engines::dockerd::{Dockerd, NETWORK as DOCKER_NETWORK};
use crate::engines::oci::Bundle;
use crate::engines::podman::{self, Podman};
use crate::hostcheck::{self, net_namespaces_in_kernel, Change};
use crate::image::{self, Busybox};
use crate::lab::{run, Lab};
use crate::procs::{Memory, Table};
use crate::{interrupt, tools, Error, Result};

/// How much of each comparison to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: &'static str,
    pub warmup: usize,
    pub ns_rounds: usize,
    pub container_rounds: usize,
    pub pod_rounds: usize,
    pub levels: Vec<u32>,
    pub level_rounds: usize,
    pub teardown_pods: u32,
    pub teardown_rounds: usize,
    /// How long the teardown waits for the kernel to free the namespaces. dockerd (libnetwork)
    /// removes the pins of its sandboxes' namespaces in a garbage collection that runs once a
    /// minute, so its namespaces may outlive the containers by up to 60 s.
    pub netns_wait: Duration,
}

impl Plan {
    /// Under 3 minutes here.
    pub fn quick() -> Plan {
        Plan {
            name: "quick",
            warmup: 1,
            ns_rounds: 30,
            container_rounds: 8,
            pod_rounds: 3,
            levels: vec![1, 10],
            level_rounds: 3,
            teardown_pods: 10,
            teardown_rounds: 1,
            netns_wait: Duration::from_secs(15),
        }
    }

    /// Under 20 minutes here.
    pub fn full() -> Plan {
        Plan {
            name: "full",
            warmup: 2,
            ns_rounds: 200,
            container_rounds: 20,
            pod_rounds: 8,
            levels: vec![1, 10, 100, 500],
            level_rounds: 3,
            teardown_pods: 100,
            teardown_rounds: 1,
            netns_wait: Duration::from_secs(90),
        }
    }
}

pub struct Options {
    pub plan: Plan,
    pub podlab: Podlab,
    /// The `podlab-ns-true` helper binary.
    pub ns_helper: PathBuf,
}

/// What a run found: the rows, the versions of everything measured, what could not run, and
/// whether the host is as it was.
pub struct Outcome {
    pub rows: Vec<Row>,
    pub versions: Vec<(String, String)>,
    pub notes: Vec<String>,
    pub host_changes: Vec<Change>,
    pub seconds: f64,
}

/// The peers of one lab.
struct Peers {
    lab: Lab,
    containerd: Option<Containerd>,
    dockerd: Option<Dockerd>,
    podman: Option<Podman>,
    bundle: Option<Bundle>,
    cgroup2_view: bool,
    docker_network: bool,
    counter: AtomicU64,
}

impl Peers {
    fn next_id(&self, prefix: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}{n}")
    }
}

pub fn run_all(options: &Options) -> Result<Outcome> {
    let started = Instant::now();
    let before = hostcheck::snapshot();
    let netns_baseline = net_namespaces_in_kernel();
    let mut notes = Vec::new();
    let mut rows = Vec::new();

    println!("== 1. namespace set around /bin/true ==");
    rows.extend(ns_set(options)?);
    drain_netns(netns_baseline);

    let result = with_peers(&mut notes, |peers, notes| {
        let plan = &options.plan;
        println!("== 2. one /bin/true container, created, run, removed ==");
        rows.extend(container_true(peers, &options.podlab, plan)?);
        drain_netns(netns_baseline);
        println!("== 3. a pod: sandbox + two containers up, then deleted ==");
        rows.extend(pod(peers, &options.podlab, plan)?);
        drain_netns(netns_baseline);
        println!("== 4. scale: {:?} pods alive ==", plan.levels);
        rows.extend(scale(peers, &options.podlab, plan, notes)?);
        drain_netns(netns_baseline);
        println!("== 5. teardown of {} pods ==", plan.teardown_pods);
        rows.extend(teardown(peers, &options.podlab, plan)?);
        if options.podlab.has_pods() {
            for network in [None, Some("builtin"), Some("none")] {
                let podlab = match network {
                    None => options.podlab.clone(),
                    Some(network) => options.podlab.on_network(network),
                };
                podlab.stop_agent(&peers.lab);
            }
        }
        Ok(())
    });
    let after = hostcheck::snapshot();
    let host_changes = hostcheck::changes(&before, &after);
    result?;
    fill_ratios(&mut rows);
    Ok(Outcome {
        rows,
        versions: versions(),
        notes,
        host_changes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Starts the lab and every installed peer, runs `body`, and always tears the lab down.
fn with_peers(
    notes: &mut Vec<String>,
    body: impl FnOnce(&Peers, &mut Vec<String>) -> Result<()>,
) -> Result<()> {
    let mut lab = Lab::new()?;
    println!(
        "lab: {} (net:[{}] mnt:[{}])",
        lab.dir().display(),
        lab.net_inode(),
        lab.mnt_inode()
    );
    let built = image::build(&lab.subdir("image")?)?;
    let mut note = |what: &str, err: &Error| {
        let line = format!("{what}: {err}");
        eprintln!("  {line}");
        notes.push(line);
    };
    let containerd = match Containerd::start(&mut lab) {
        Ok(c) => match built.oci_archive.as_deref().map(|a| c.import(&lab, a)) {
            Some(Ok(())) => Some(c),
            Some(Err(err)) => {
                note("ctr images import", &err);
                None
            }
            None => {
                note(
                    "ctr",
                    &Error::Missing {
                        binary: "umoci",
                        package: "umoci",
                    },
                );
                None
            }
        },
        Err(err) => {
            note("containerd", &err);
            None
        }
    };
    let dockerd = match containerd.as_ref().map(|c| Dockerd::start(&mut lab, c)) {
        Some(Ok(d)) => match d.import(&lab, &built.tar) {
            Ok(()) => Some(d),
            Err(err) => {
                note("docker import", &err);
                None
            }
        },
        Some(Err(err)) => {
            note("dockerd", &err);
            None
        }
        None => None,
    };
    let docker_network = dockerd
        .as_ref()
        .map(|d| {
            d.create_network(&lab)
                .map_err(|err| note("docker network create", &err))
        })
        .is_some_and(|r| r.is_ok());
    let podman = match Podman::setup(&mut lab) {
        Ok(p) => match p.import(&lab, &built.tar) {
            Ok(()) => Some(p),
            Err(err) => {
                note("podman import", &err);
                None
            }
        },
        Err(err) => {
            note("podman", &err);
            None
        }
    };
    let bundle = Bundle::create(
        &lab.subdir("bundle")?,
        &built.rootfs,
        &["/bin/true"],
        &lab.cgroup_parent("runc"),
    )
    .map_err(|err| note("runc spec", &err))
    .ok();
    let cgroup2_view = lab
        .enable_cgroup2_view()
        .map_err(|err| note("cgroup2 view", &err))
        .is_ok();
    let mut peers = Peers {
        lab,
        containerd,
        dockerd,
        podman,
        bundle,
        cgroup2_view,
        docker_network,
        counter: AtomicU64::new(0),
    };
    let result = body(&peers, notes);
    // Engines first (their clean-up steps run inside teardown), then the lab itself.
    let torn = peers.lab.teardown();
    result.and(torn)
}

/// Runs `cmd` and returns how long it took, in ms; fails if it fails.
pub fn timed(cmd: &mut Command) -> Result<f64> {
    let start = Instant::now();
    run(cmd)?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// `trial`, then (not timed) the reaping of the orphans it left (see [`Lab::reap_orphans`]).
fn reaping<'a>(lab: &'a Lab, mut trial: Trial<'a>) -> Trial<'a> {
    Box::new(move || {
        let values = trial();
        lab.reap_orphans();
        values
    })
}

fn reap_after_each<'a>(lab: &'a Lab, contenders: Vec<Contender<'a>>) -> Vec<Contender<'a>> {
    contenders
        .into_iter()
        .map(|mut c| {
            c.trial = c.trial.take().map(|t| reaping(lab, t));
            c
        })
        .collect()
}

/// A contender whose trial is one command, made fresh by `make` each time, and timed.
fn timed_command<'a>(
    name: &str,
    text: &str,
    make: impl Fn() -> Result<Command> + 'a,
) -> Contender<'a> {
    one(
        name,
        text.into(),
        Box::new(move || Ok(vec![timed(&mut make()?)?])),
    )
}

fn one<'a>(name: &str, command: String, trial: Trial<'a>) -> Contender<'a> {
    Contender {
        name: name.into(),
        command,
        trial: Some(trial),
    }
}

fn ns_set(options: &Options) -> Result<Vec<Row>> {
    let plan = &options.plan;
    let unshare = [
        "--uts",
        "--ipc",
        "--net",
        "--pid",
        "--fork",
        "--mount",
        "/bin/true",
    ];
    let helper = options.ns_helper.clone();
    let mut contenders = vec![
        options.podlab.ns_set(),
        timed_command(
            "podlab-ns (clone + exec helper)",
            &format!("{} /bin/true", helper.display()),
            move || {
                let mut cmd = Command::new(&helper);
                cmd.arg("/bin/true");
                Ok(cmd)
            },
        ),
        timed_command(
            "unshare (util-linux)",
            &format!("unshare {}", unshare.join(" ")),
            move || {
                let mut cmd = Command::new("unshare");
                cmd.args(unshare);
                Ok(cmd)
            },
        ),
        timed_command("baseline: spawn /bin/true", "/bin/true", || {
            Ok(Command::new("/bin/true"))
        }),
    ];
    let outcomes = interleave(&mut contenders, 1, plan.warmup * 5, plan.ns_rounds)?;
    Ok(rows_of("ns-set", None, &[("total", "ms")], &outcomes))
}

fn container_true(peers: &Peers, podlab: &Podlab, plan: &Plan) -> Result<Vec<Row>> {
    let lab = &peers.lab;
    let mut contenders = vec![podlab.container_true(lab, &peers.counter)];
    if let Some(bundle) = &peers.bundle {
        let state = lab.dir().join("runc-state");
        let state2 = lab.dir().join("runc-state-cgroup2");
        let crun_state = lab.dir().join("crun-state");
        contenders.push(timed_command(
            "runc",
            "runc --root STATE run --bundle B ID (cgroup v1 hybrid, as the host has it)",
            move || bundle.runc_run(lab, &state, &peers.next_id("runc")),
        ));
        if peers.cgroup2_view {
            contenders.push(timed_command(
                "runc (cgroup2 view)",
                "runc --root STATE run --bundle B ID (in the cgroup2-only mount namespace)",
                move || bundle.runc_run_cgroup2(lab, &state2, &peers.next_id("runc2-")),
            ));
            if tools::which("crun").is_some() {
                contenders.push(timed_command(
                    "crun (cgroup2 view)",
                    "crun --cgroup-manager=disabled --root STATE run --bundle B ID",
                    move || bundle.crun_run(lab, &crun_state, &peers.next_id("crun")),
                ));
            }
        }
    }
    let image = Busybox::reference();
    if let Some(c) = &peers.containerd {
        contenders.push(timed_command(
            "ctr run --rm",
            &format!("ctr run --rm {image} ID /bin/true"),
            move || {
                let id = peers.next_id("ctr");
                let mut cmd = c.ctr(lab, "default");
                cmd.args(["run", "--rm", "--cgroup"])
                    .arg(format!("{}/{id}", lab.cgroup_parent("ctr")))
                    .arg(Busybox::reference())
                    .args([id.as_str(), "/bin/true"]);
                Ok(cmd)
            },
        ));
    }
    if let Some(d) = &peers.dockerd {
        contenders.push(timed_command(
            "docker run --rm",
            &format!("docker run --rm --network none {image} /bin/true"),
            move || {
                let mut cmd = d.docker(lab);
                cmd.args(["run", "--rm", "--network", "none"])
                    .arg(Busybox::reference())
                    .arg("/bin/true");
                Ok(cmd)
            },
        ));
    }
    if let Some(p) = &peers.podman {
        contenders.push(timed_command(
            "podman run --rm",
            &format!(
                "podman run --rm --network none {} /bin/true",
                podman::image()
            ),
            move || {
                let mut cmd = p.podman(lab);
                cmd.args(["run", "--rm", "--network", "none", "--cgroup-parent"])
                    .arg(&p.cgroup_parent)
                    .arg(podman::image())
                    .arg("/bin/true");
                Ok(cmd)
            },
        ));
    }
    let outcomes = interleave(
        &mut reap_after_each(lab, contenders),
        1,
        plan.warmup * 2,
        plan.container_rounds,
    )?;
    Ok(rows_of(
        "container-true",
        None,
        &[("total", "ms")],
        &outcomes,
    ))
}

/// What every pod's containers run, in every row: a shell that sleeps and exits at once on
/// SIGTERM. `sleep` alone as PID 1 of its pid namespace ignores SIGTERM, so kubelet's way of
/// stopping (SIGTERM, then SIGKILL after at least 2 s) would measure the workload, not the pod
/// machinery, against peers that SIGKILL at once.
pub const WORKLOAD: [&str; 3] = ["sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"];

fn pod(peers: &Peers, podlab: &Podlab, plan: &Plan) -> Result<Vec<Row>> {
    let lab = &peers.lab;
    // podlab's default network (the CNI plugins) is the row the ratios are of; the built-in
    // path runs beside it in a root of its own.
    let builtin = podlab.on_network("builtin");
    let mut builtin_row = builtin.pod(lab, &peers.counter);
    builtin_row.name = "podlab (built-in network)".into();
    let mut contenders = vec![podlab.pod(lab, &peers.counter), builtin_row];
    if let Some(p) = &peers.podman {
        for network in ["none", podman::NETWORK] {
            contenders.push(one(
                if network == "none" { "podman pod" } else { "podman pod (CNI bridge)" },
                format!(
                    "podman pod create --network {network}; pod start; 2x run -d --pod; pod rm -f -t 0"
                ),
                Box::new(move || podman_pod(peers, p, network)),
            ));
        }
    }
    if let Some(d) = &peers.dockerd {
        let networks: &[&str] = if peers.docker_network {
            &["none", DOCKER_NETWORK]
        } else {
            &["none"]
        };
        for &network in networks {
            contenders.push(one(
                if network == "none" {
                    "docker --network container:"
                } else {
                    "docker --network container: (bridge)"
                },
                format!(
                    "docker run -d --network {network} --ipc shareable (sandbox); 2x run -d \
                     --network container:S --ipc container:S; rm -f"
                ),
                Box::new(move || docker_pod(peers, d, network)),
            ));
        }
    }
    if let Some(c) = &peers.containerd {
        contenders.push(one(
            "containerd (ctr, CRI-style)",
            "ctr run -d (sandbox); 2x ctr run -d --with-ns network|ipc|uts:/proc/PID/ns/..; \
             task kill, task rm, container rm"
                .into(),
            Box::new(move || ctr_pod(peers, c)),
        ));
    }
    let outcomes = interleave(
        &mut reap_after_each(lab, contenders),
        3,
        plan.warmup,
        plan.pod_rounds,
    )?;
    Ok(rows_of(
        "pod",
        None,
        &[("up", "ms"), ("down", "ms"), ("total", "ms")],
        &outcomes,
    ))
}

fn podman_pod(peers: &Peers, p: &Podman, network: &str) -> Result<Vec<f64>> {
    let lab = &peers.lab;
    let name = peers.next_id("pod");
    let start = Instant::now();
    run(p
        .podman(lab)
        .args([
            "pod",
            "create",
            "--name",
            &name,
            "--network",
            network,
            "--cgroup-parent",
        ])
        .arg(&p.cgroup_parent))?;
    run(p.podman(lab).args(["pod", "start", &name]))?;
    for _ in 0..2 {
        run(p
            .podman(lab)
            .args(["run", "-d", "--pod", &name])
            .arg(podman::image())
            .args(WORKLOAD))?;
    }
    let up = ms_since(start);
    let down = timed(p.podman(lab).args(["pod", "rm", "-f", "-t", "0", &name]))?;
    Ok(vec![up, down, up + down])
}

fn docker_pod(peers: &Peers, d: &Dockerd, network: &str) -> Result<Vec<f64>> {
    let lab = &peers.lab;
    let sandbox = peers.next_id("sandbox");
    let names = [
        sandbox.clone(),
        format!("{sandbox}-a"),
        format!("{sandbox}-b"),
    ];
    let start = Instant::now();
    run(d
        .docker(lab)
        .args([
            "run",
            "-d",
            "--name",
            &sandbox,
            "--network",
            network,
            "--ipc",
            "shareable",
        ])
        .arg(Busybox::reference())
        .args(WORKLOAD))?;
    for name in &names[1..] {
        run(d
            .docker(lab)
            .args(["run", "-d", "--name", name])
            .arg(format!("--network=container:{sandbox}"))
            .arg(format!("--ipc=container:{sandbox}"))
            .arg(Busybox::reference())
            .args(WORKLOAD))?;
    }
    let up = ms_since(start);
    let down = timed(d.docker(lab).args(["rm", "-f"]).args(&names))?;
    Ok(vec![up, down, up + down])
}

fn ctr_pod(peers: &Peers, c: &Containerd) -> Result<Vec<f64>> {
    let lab = &peers.lab;
    let sandbox = peers.next_id("csandbox");
    let ids = [
        sandbox.clone(),
        format!("{sandbox}-a"),
        format!("{sandbox}-b"),
    ];
    let start = Instant::now();
    ctr_start(peers, c, &sandbox, &[])?;
    let pid = c.task_pid(lab, "default", &sandbox)?;
    let joins: Vec<String> = [("network", "net"), ("ipc", "ipc"), ("uts", "uts")]
        .iter()
        .map(|(kind, file)| format!("{kind}:/proc/{pid}/ns/{file}"))
        .collect();
    for id in &ids[1..] {
        ctr_start(peers, c, id, &joins)?;
    }
    let up = ms_since(start);
    let start = Instant::now();
    for id in ids.iter().rev() {
        ctr_remove(peers, c, id)?;
    }
    let down = ms_since(start);
    Ok(vec![up, down, up + down])
}

fn ctr_start(peers: &Peers, c: &Containerd, id: &str, joins: &[String]) -> Result<()> {
    let lab = &peers.lab;
    let mut cmd = c.ctr(lab, "default");
    cmd.args(["run", "-d", "--cgroup"])
        .arg(format!("{}/{id}", lab.cgroup_parent("ctr")));
    for join in joins {
        cmd.args(["--with-ns", join]);
    }
    cmd.arg(Busybox::reference()).arg(id).args(WORKLOAD);
    run(&mut cmd).map(drop)
}

/// `task kill -s SIGKILL`, `task rm -f`, `containers rm` (which also removes the snapshot).
fn ctr_remove(peers: &Peers, c: &Containerd, id: &str) -> Result<()> {
    let lab = &peers.lab;
    run(c.ctr(lab, "default").args(["task", "rm", "-f", id]))?;
    run(c.ctr(lab, "default").args(["containers", "rm", id]))?;
    Ok(())
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Starts or removes one pod, by id.
type PodOp<'a> = Box<dyn Fn(&str) -> Result<()> + Sync + 'a>;
/// Removes many pods at once.
type PodsOp<'a> = Box<dyn Fn(&[String]) -> Result<()> + Sync + 'a>;

/// One kind of pod for the scale and teardown comparisons.
struct Kind<'a> {
    name: &'static str,
    command: String,
    start: PodOp<'a>,
    remove: PodOp<'a>,
    /// Removes many at once where the peer's CLI takes several names (not timed).
    remove_many: PodsOp<'a>,
    /// The processes each pod keeps alive, summed over all pods of this kind now.
    memory: Box<dyn Fn() -> (Memory, usize) + Sync + 'a>,
    /// The daemons' memory (dockerd, containerd), summed.
    daemons: Box<dyn Fn() -> Memory + Sync + 'a>,
}

/// podlab's pods for scale and teardown (one [`WORKLOAD`] container each; its memory row counts
/// podlab-shim + podlab-pause), once `podlab apply`, `get` and `delete` exist.
fn podlab_kind<'a>(peers: &'a Peers, podlab: &'a Podlab, name: &'static str) -> Option<Kind<'a>> {
    let lab = &peers.lab;
    let command = "podlab apply -f pod.yaml (one container); podlab wait --for=condition=Ready; \
                   podlab delete pod NAME (waits until it is gone)";
    podlab.has_pods().then(|| Kind {
        name,
        command: match podlab.network {
            Some(network) => format!("PODLAB_NETWORK={network} {command}"),
            None => command.into(),
        },
        start: Box::new(move |id| podlab.apply_pod(lab, id, 1)),
        remove: Box::new(move |id| podlab.delete_pod(lab, id)),
        remove_many: Box::new(move |ids| podlab.delete_pods(lab, ids)),
        memory: Box::new(move || podlab.pod_memory(lab).0),
        daemons: Box::new(move || podlab.pod_memory(lab).1),
    })
}

/// The kinds of pods to compare: podlab's (and, with `bare`, podlab's without a pod network, as
/// the peers' pods here are), then the peers'.
fn kinds<'a>(peers: &'a Peers, podlab: &'a Podlab, bare: Option<&'a Podlab>) -> Vec<Kind<'a>> {
    let lab = &peers.lab;
    let dir = lab.dir().display().to_string();
    let mut out: Vec<Kind<'a>> = podlab_kind(peers, podlab, "podlab").into_iter().collect();
    if let Some(bare) = bare {
        out.extend(podlab_kind(peers, bare, "podlab (no pod network)"));
    }
    if let Some(p) = &peers.podman {
        let dir = dir.clone();
        out.push(Kind {
            name: "podman pod",
            command: "podman pod create --network none; podman pod start".into(),
            start: Box::new(move |id| {
                run(p
                    .podman(lab)
                    .args([
                        "pod",
                        "create",
                        "--name",
                        id,
                        "--network",
                        "none",
                        "--cgroup-parent",
                    ])
                    .arg(&p.cgroup_parent))?;
                run(p.podman(lab).args(["pod", "start", id])).map(drop)
            }),
            remove: Box::new(move |id| {
                run(p.podman(lab).args(["pod", "rm", "-f", "-t", "0", id])).map(drop)
            }),
            remove_many: Box::new(move |ids| {
                run(p.podman(lab).args(["pod", "rm", "-f", "-t", "0"]).args(ids)).map(drop)
            }),
            memory: Box::new(move || {
                processes_below(|p| p.comm == "conmon" && p.command_text().contains(&dir))
            }),
            daemons: Box::new(Memory::default),
        });
    }
    if let (Some(d), Some(c)) = (&peers.dockerd, &peers.containerd) {
        out.push(Kind {
            name: "docker sandbox",
            command: "docker run -d --network none --ipc shareable IMAGE sleep".into(),
            start: Box::new(move |id| {
                run(d
                    .docker(lab)
                    .args([
                        "run",
                        "-d",
                        "--name",
                        id,
                        "--network",
                        "none",
                        "--ipc",
                        "shareable",
                    ])
                    .arg(Busybox::reference())
                    .args(WORKLOAD))
                .map(drop)
            }),
            remove: Box::new(move |id| run(d.docker(lab).args(["rm", "-f", id])).map(drop)),
            remove_many: Box::new(move |ids| {
                run(d.docker(lab).args(["rm", "-f"]).args(ids)).map(drop)
            }),
            memory: Box::new(|| shims_of("moby")),
            daemons: Box::new(move || daemon_memory(&[d.pid, c.pid])),
        });
    }
    if let Some(c) = &peers.containerd {
        out.push(Kind {
            name: "ctr sandbox",
            command: "ctr run -d IMAGE ID sleep".into(),
            start: Box::new(move |id| ctr_start(peers, c, id, &[])),
            remove: Box::new(move |id| ctr_remove(peers, c, id)),
            remove_many: Box::new(move |ids| {
                ids.iter().try_for_each(|id| ctr_remove(peers, c, id))
            }),
            memory: Box::new(|| shims_of("default")),
            daemons: Box::new(move || daemon_memory(&[c.pid])),
        });
    }
    out
}

/// The memory of the processes matching `root` and of everything below them.
fn processes_below(root: impl Fn(&crate::procs::Proc) -> bool) -> (Memory, usize) {
    let table = Table::read();
    let mut pids: Vec<i32> = table
        .procs
        .values()
        .filter(|p| root(p))
        .map(|p| p.pid)
        .collect();
    let below: Vec<i32> = pids
        .iter()
        .flat_map(|p| table.descendants(*p))
        .map(|p| p.pid)
        .collect();
    pids.extend(below);
    pids.sort_unstable();
    pids.dedup();
    let total = pids
        .iter()
        .filter_map(|p| crate::procs::memory(*p))
        .fold(Memory::default(), |a, b| a + b);
    (total, pids.len())
}

/// The runc v2 shims of one containerd namespace (`moby` is dockerd's), and their containers.
fn shims_of(namespace: &str) -> (Memory, usize) {
    processes_below(|p| p.comm == "containerd-shim" && p.arg_after("-namespace") == Some(namespace))
}

fn daemon_memory(pids: &[i32]) -> Memory {
    pids.iter()
        .filter_map(|p| crate::procs::memory(*p))
        .fold(Memory::default(), |a, b| a + b)
}

fn scale(peers: &Peers, podlab: &Podlab, plan: &Plan, notes: &mut Vec<String>) -> Result<Vec<Row>> {
    // The peers' pods here have no network (`--network none`): podlab's are measured both on
    // its default network (the CNI plugins) and, like theirs, without one.
    let bare = podlab.on_network("none");
    let kinds = kinds(peers, podlab, Some(&bare));
    let mut rows = Vec::new();
    let mut alive: Vec<Vec<String>> = vec![Vec::new(); kinds.len()];
    let mut broken: Vec<Option<String>> = vec![None; kinds.len()];
    let result = (|| -> Result<()> {
        for &level in &plan.levels {
            // Grow every kind to `level`, the kinds side by side (one thread each: growing is
            // not measured, and the full run's 500 pods would otherwise take most of its time).
            let grow_start = Instant::now();
            let grown: Vec<(Vec<String>, Option<String>)> = std::thread::scope(|scope| {
                let handles: Vec<_> = kinds
                    .iter()
                    .enumerate()
                    .map(|(k, kind)| {
                        let missing = if broken[k].is_some() {
                            0
                        } else {
                            (level as usize).saturating_sub(alive[k].len())
                        };
                        scope.spawn(move || grow(peers, kind, missing))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| (Vec::new(), Some("panicked".into())))
                    })
                    .collect()
            });
            for (k, (ids, err)) in grown.into_iter().enumerate() {
                alive[k].extend(ids);
                if let Some(err) = err {
                    notes.push(format!(
                        "scale: {} stopped at {} pods: {err}",
                        kinds[k].name,
                        alive[k].len()
                    ));
                    broken[k] = Some(format!("failed: {err}"));
                }
            }
            interrupt::check()?;
            peers.lab.reap_orphans();
            println!(
                "  {level} pods alive each (grown in {:.1} s)",
                grow_start.elapsed().as_secs_f64()
            );
            // One more, timed, then removed again: interleaved rounds.
            let mut contenders: Vec<Contender> = kinds
                .iter()
                .enumerate()
                .map(|(k, kind)| Contender {
                    name: kind.name.into(),
                    command: kind.command.clone(),
                    trial: broken[k].is_none().then(|| {
                        Box::new(move || {
                            let id = peers.next_id("extra");
                            let start = Instant::now();
                            (kind.start)(&id)?;
                            let up = ms_since(start);
                            let start = Instant::now();
                            (kind.remove)(&id)?;
                            Ok(vec![up, ms_since(start)])
                        }) as Trial
                    }),
                })
                .collect();
            if !podlab.has_pods() {
                contenders.insert(0, pending_podlab(podlab));
            }
            let outcomes = interleave(
                &mut reap_after_each(&peers.lab, contenders),
                2,
                0,
                plan.level_rounds,
            )?;
            rows.extend(rows_of(
                "scale",
                Some(level),
                &[("start_one_more", "ms"), ("remove_one", "ms")],
                &outcomes,
            ));
            for (k, kind) in kinds.iter().enumerate() {
                if broken[k].is_some() || alive[k].is_empty() {
                    continue;
                }
                let (memory, processes) = (kind.memory)();
                let n = alive[k].len() as f64;
                let daemons = (kind.daemons)();
                for (metric, unit, value) in [
                    ("pss_per_pod", "kB", memory.pss_kb as f64 / n),
                    ("rss_per_pod", "kB", memory.rss_kb as f64 / n),
                    ("processes_per_pod", "count", processes as f64 / n),
                    ("daemons_pss", "kB", daemons.pss_kb as f64),
                ] {
                    rows.push(single(
                        "scale",
                        kind.name,
                        metric,
                        Some(level),
                        unit,
                        value,
                        &kind.command,
                    ));
                }
            }
            if !podlab.has_pods() {
                for (metric, unit) in [("pss_per_pod", "kB"), ("rss_per_pod", "kB")] {
                    rows.push(pending_row("scale", metric, Some(level), unit, PODLAB_PODS));
                }
            }
        }
        Ok(())
    })();
    // Take the scale pods down (not timed: the teardown comparison times deletion).
    println!("  removing the scale pods");
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = kinds
            .iter()
            .zip(&alive)
            .map(|(kind, ids)| {
                scope.spawn(move || {
                    ids.chunks(50)
                        .filter_map(|chunk| (kind.remove_many)(chunk).err())
                        .map(|err| format!("scale: removing {} pods: {err}", kind.name))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    notes.extend(failures);
    peers.lab.reap_orphans();
    result?;
    Ok(rows)
}

const PODLAB_PODS: &str =
    "podlab apply -f pod.yaml (one container) until Ready; podlab delete pod NAME --grace-period 0";

/// Starts `count` pods of one kind, one after another; returns their ids and the error that
/// stopped it, if one did.
fn grow(peers: &Peers, kind: &Kind, count: usize) -> (Vec<String>, Option<String>) {
    let mut ids = Vec::new();
    for _ in 0..count {
        if interrupt::requested() {
            break;
        }
        let id = peers.next_id("scale");
        match (kind.start)(&id) {
            Ok(()) => ids.push(id),
            Err(err) => return (ids, Some(err.to_string())),
        }
    }
    (ids, None)
}

fn pending_podlab(_podlab: &Podlab) -> Contender<'static> {
    Contender {
        name: "podlab".into(),
        command: PODLAB_PODS.into(),
        trial: None,
    }
}

fn single(
    comparison: &str,
    subject: &str,
    metric: &str,
    level: Option<u32>,
    unit: &str,
    value: f64,
    command: &str,
) -> Row {
    Row {
        n: 1,
        median: Some(value),
        min: Some(value),
        max: Some(value),
        status: "measured".into(),
        ..pending_row(comparison, metric, level, unit, command)
    }
    .with_subject(subject)
}

fn pending_row(
    comparison: &str,
    metric: &str,
    level: Option<u32>,
    unit: &str,
    command: &str,
) -> Row {
    Row {
        comparison: comparison.into(),
        subject: "podlab".into(),
        metric: metric.into(),
        level,
        unit: unit.into(),
        n: 0,
        median: None,
        min: None,
        max: None,
        podlab_ratio: None,
        status: "pending".into(),
        command: command.into(),
    }
}

fn teardown(peers: &Peers, podlab: &Podlab, plan: &Plan) -> Result<Vec<Row>> {
    let mut kinds = kinds(peers, podlab, None);
    // dockerd frees its namespaces lazily (see Plan::netns_wait): last, so that a namespace it
    // has not freed yet cannot fall into another kind's measurement.
    kinds.sort_by_key(|k| k.name.starts_with("docker"));
    let n = plan.teardown_pods;
    let mut contenders: Vec<Contender> = kinds
        .iter()
        .map(|kind| Contender {
            name: kind.name.into(),
            command: format!("{n}x ({}), then remove each", kind.command),
            trial: Some(Box::new(move || teardown_trial(peers, kind, n, plan.netns_wait)) as Trial),
        })
        .collect();
    if !podlab.has_pods() {
        contenders.insert(0, pending_podlab(podlab));
    }
    let outcomes = interleave(
        &mut reap_after_each(&peers.lab, contenders),
        5,
        0,
        plan.teardown_rounds,
    )?;
    Ok(rows_of(
        "teardown",
        Some(n),
        &[
            ("delete_all", "ms"),
            ("netns_freed", "ms"),
            ("netns_lag", "ms"),
            ("delete_per_pod", "ms"),
            ("netns_per_pod", "count"),
        ],
        &outcomes,
    ))
}

/// Creates `n` pods (not timed), then deletes them one after another (timed) and waits for the
/// kernel's count of network namespaces to come back to where it was before they were made.
/// The namespace metrics are NaN (shown as –) when the kernel's count is not back within `wait`.
fn teardown_trial(peers: &Peers, kind: &Kind, n: u32, wait: Duration) -> Result<Vec<f64>> {
    let before = net_namespaces_in_kernel();
    let mut ids = Vec::new();
    let made = (|| -> Result<()> {
        for _ in 0..n {
            interrupt::check()?;
            let id = peers.next_id("td");
            (kind.start)(&id)?;
            ids.push(id);
        }
        Ok(())
    })();
    if let Err(err) = made {
        for id in &ids {
            let _ = (kind.remove)(id);
        }
        return Err(err);
    }
    let with_pods = net_namespaces_in_kernel();
    let start = Instant::now();
    for id in &ids {
        (kind.remove)(id)?;
    }
    let deleted = ms_since(start);
    peers.lab.reap_orphans();
    let freed = match before {
        Some(target) => {
            let back = crate::lab::wait_until(
                "the kernel to free the deleted pods' network namespaces",
                wait,
                || net_namespaces_in_kernel().is_some_and(|now| now <= target),
            );
            if back.is_ok() {
                ms_since(start)
            } else {
                eprintln!(
                    "  teardown, {}: {:.0} s after the deletions the kernel still counts {:?} \
                     network namespaces (before the pods: {target}, with them: {with_pods:?}); \
                     held by: {}",
                    kind.name,
                    wait.as_secs_f64(),
                    net_namespaces_in_kernel(),
                    netns_holders()
                );
                f64::NAN
            }
        }
        None => f64::NAN,
    };
    let per_pod_netns = match (before, with_pods) {
        (Some(b), Some(w)) => w.saturating_sub(b) as f64 / f64::from(n),
        _ => f64::NAN,
    };
    Ok(vec![
        deleted,
        freed,
        freed - deleted,
        deleted / f64::from(n),
        per_pod_netns,
    ])
}

/// The processes that are in, or hold a descriptor of, a network namespace other than this
/// process's: `PID comm net:[INODE]`, for a teardown whose namespaces do not go.
fn netns_holders() -> String {
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap_or_default();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let mut links: Vec<std::path::PathBuf> = std::fs::read_link(format!("/proc/{pid}/ns/net"))
            .into_iter()
            .collect();
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            links.extend(std::fs::read_link(fd.path()));
        }
        for link in links {
            if link != ours && link.to_string_lossy().starts_with("net:") {
                found.push(format!("{pid} {} {}", comm.trim(), link.display()));
            }
        }
    }
    // Pins: nsfs mounts of network namespaces in this (the lab's) mount namespace.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mountinfo.lines().filter(|l| l.contains(" net:[")) {
        let fields: Vec<&str> = line.split(' ').collect();
        found.push(format!("pin {} at {}", fields[3], fields[4]));
    }
    if found.is_empty() {
        "no process and no pin (a kernel reference)".into()
    } else {
        found.join(", ")
    }
}

/// Waits (at most 20 s) until the kernel's count of network namespaces is back to `baseline`,
/// so that the next comparison does not pay for the previous one's asynchronous clean-up.
fn drain_netns(baseline: Option<u64>) {
    let Some(target) = baseline else { return };
    let _ = crate::lab::wait_until(
        "network namespaces to drain",
        Duration::from_secs(20),
        || net_namespaces_in_kernel().is_some_and(|n| n <= target),
    );
}

/// Every peer's version, as it says it.
pub fn versions() -> Vec<(String, String)> {
    [
        tools::RUNC,
        tools::CRUN,
        tools::CONTAINERD,
        tools::DOCKERD,
        tools::DOCKER,
        tools::PODMAN,
        tools::CONMON,
        tools::CATATONIT,
        tools::UMOCI,
        tools::UNSHARE,
        tools::BUSYBOX,
    ]
    .iter()
    .map(|t| (t.binary.to_string(), tools::version(*t)))
    .collect()
}

/// The folder of a benchmark record: `docs/benchmarks/<date>` below `workspace`.
pub fn record_dir(workspace: &Path, date: &str) -> PathBuf {
    workspace.join("docs/benchmarks").join(date)
}
