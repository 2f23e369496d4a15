//! podlab's side of each comparison: one small function each, so that a row goes from
//! "pending" to measured as soon as the podlab command it needs exists.
//!
//! A podlab command counts as there when `podlab <subcommand> --help` exits 0. Until then its
//! row is written as `pending` with the exact command it will run. Everything podlab does runs
//! inside the same lab as the peers, with `PODLAB_ROOT` in the lab folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::stats::Contender;
use crate::lab::Lab;
use crate::procs::Memory;
use crate::Result;

/// The podlab binary, if built.
#[derive(Debug, Clone)]
pub struct Podlab {
    pub binary: Option<PathBuf>,
    /// `PODLAB_NETWORK` for its pods (`cni`, `builtin`, `none`); None: podlab's default (cni).
    /// A network of its own gets a root of its own, so that its node agent is started with it.
    pub network: Option<&'static str>,
}

/// A pod manifest: `containers` busybox containers running the rows' common workload (see
/// [`WORKLOAD`](super::suite::WORKLOAD)), with the default grace period.
pub fn pod_yaml(name: &str, containers: usize) -> String {
    let mut text =
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n");
    let command = serde_json::to_string(&super::suite::WORKLOAD).expect("strings encode");
    for i in 0..containers {
        text.push_str(&format!(
            "  - name: c{i}\n    image: busybox\n    command: {command}\n"
        ));
    }
    text
}

impl Podlab {
    /// `target/release/podlab`, else `target/debug/podlab`, below `workspace`.
    pub fn find(workspace: &Path) -> Podlab {
        let binary = ["target/release/podlab", "target/debug/podlab"]
            .iter()
            .map(|p| workspace.join(p))
            .find(|p| p.is_file());
        Podlab {
            binary,
            network: None,
        }
    }

    /// Whether `podlab SUBCOMMAND... --help` works.
    pub fn has(&self, subcommand: &[&str]) -> bool {
        self.binary.as_ref().is_some_and(|b| {
            Command::new(b)
                .args(subcommand)
                .arg("--help")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    }

    /// `text`, marked when the binary is a debug build (its figures are then not podlab's).
    fn label(&self, text: String) -> String {
        match &self.binary {
            Some(b) if b.to_string_lossy().contains("/target/debug/") => {
                format!("{text} [debug build: run `cargo build --release -p podlab`]")
            }
            _ => text,
        }
    }

    /// Its `PODLAB_ROOT` in the lab: one per network, so that each has its own node agent.
    fn root(&self, lab: &Lab) -> PathBuf {
        match self.network {
            None => lab.dir().join("podlab"),
            Some(network) => lab.dir().join(format!("podlab-{network}")),
        }
    }

    fn command(&self, lab: &Lab) -> Option<Command> {
        let mut cmd = lab.command(self.binary.as_ref()?);
        cmd.env("PODLAB_ROOT", self.root(lab));
        if let Some(network) = self.network {
            cmd.env("PODLAB_NETWORK", network);
        }
        Some(cmd)
    }

    /// The same podlab with its pods on `network`.
    pub fn on_network(&self, network: &'static str) -> Podlab {
        Podlab {
            binary: self.binary.clone(),
            network: Some(network),
        }
    }

    /// Comparison 1: `podlab ns run`, podlab's `unshare --fork`. The `podlab-ns-true` helper
    /// (podlab-ns's `spawn_with_clone` + exec, without the CLI) is a row of its own beside it.
    pub fn ns_set(&self) -> Contender<'_> {
        let args = [
            "ns",
            "run",
            "--uts",
            "--ipc",
            "--net",
            "--pid",
            "--mount",
            "--",
            "/bin/true",
        ];
        let runnable = self.has(&["ns", "run"]);
        contender(
            format!("podlab {}", args.join(" ")),
            runnable.then(|| {
                Box::new(move || {
                    let mut cmd = Command::new(self.binary.as_ref().expect("has() saw it"));
                    cmd.args(args);
                    Ok(vec![super::suite::timed(&mut cmd)?])
                }) as super::stats::Trial<'_>
            }),
        )
    }

    /// Comparison 2: one `/bin/true` container, created, run and removed, the `kubectl run`
    /// way: a one-container pod that podlab waits for and removes (`--rm`).
    pub fn container_true<'a>(
        &'a self,
        lab: &'a Lab,
        counter: &'a std::sync::atomic::AtomicU64,
    ) -> Contender<'a> {
        contender(
            self.label(format!("podlab {}", run_args("NAME").join(" "))),
            self.has(&["run"]).then(|| {
                Box::new(move || {
                    let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut cmd = self.command(lab).expect("has() saw it");
                    // Like the runc, crun, ctr, docker and podman rows (`--network none`): the
                    // container's own network namespace with `lo`, no CNI plugins.
                    cmd.env("PODLAB_NETWORK", "none");
                    cmd.args(run_args(&format!("peers-true-{n}")));
                    Ok(vec![super::suite::timed(&mut cmd)?])
                }) as super::stats::Trial<'a>
            }),
        )
    }

    /// Comparison 3: a pod of two containers, applied, Ready, then deleted.
    pub fn pod<'a>(
        &'a self,
        lab: &'a Lab,
        counter: &'a std::sync::atomic::AtomicU64,
    ) -> Contender<'a> {
        let text = "podlab apply -f pod.yaml; podlab wait --for=condition=Ready pod/NAME; \
                    podlab delete pod NAME (kubectl's: SIGTERM, and it waits until the pod is \
                    gone, its pause reaped)";
        let text = match self.network {
            Some(network) => format!("PODLAB_NETWORK={network} {text}"),
            None => text.to_string(),
        };
        contender(
            self.label(text),
            self.has_pods().then(|| {
                Box::new(move || {
                    let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let name = format!("peers-pod-{n}");
                    let start = std::time::Instant::now();
                    self.apply_pod(lab, &name, 2)?;
                    let up = start.elapsed().as_secs_f64() * 1e3;
                    let start = std::time::Instant::now();
                    self.delete_pod(lab, &name)?;
                    let down = start.elapsed().as_secs_f64() * 1e3;
                    Ok(vec![up, down, up + down])
                }) as super::stats::Trial<'a>
            }),
        )
    }

    /// `podlab node --stop`: the node agent of this podlab's root goes (it would otherwise exit
    /// by itself a minute after its last pod), taking the pod network it kept with it.
    pub fn stop_agent(&self, lab: &Lab) {
        if let Some(mut cmd) = self.command(lab) {
            if let Err(e) = crate::lab::run(cmd.args(["node", "--stop"])) {
                eprintln!("podlab node --stop: {e}");
            }
        }
    }

    /// Whether `apply`, `get`, `wait` and `delete` are there (the pod, scale and teardown
    /// rows).
    pub fn has_pods(&self) -> bool {
        ["apply", "get", "wait", "delete"]
            .iter()
            .all(|command| self.has(&[command]))
    }

    /// `podlab apply -f` a pod of `containers` busybox containers, then
    /// `podlab wait --for=condition=Ready pod/NAME`.
    pub fn apply_pod(&self, lab: &Lab, name: &str, containers: usize) -> Result<()> {
        let manifest = lab.path(&format!("podlab/{name}.yaml"))?;
        std::fs::write(&manifest, pod_yaml(name, containers))
            .map_err(|e| crate::Error::io("writing", &manifest, e))?;
        let mut apply = self.command(lab).expect("has() saw it");
        apply.arg("apply").arg("-f").arg(&manifest);
        crate::lab::run(&mut apply)?;
        let mut wait = self.command(lab).expect("has() saw it");
        wait.args(["wait", "--for=condition=Ready", "--timeout=30s"])
            .arg(format!("pod/{name}"));
        crate::lab::run(&mut wait).map(drop)
    }

    /// `podlab delete pod NAME`, which waits, as kubectl's does, until the pod is gone; the node
    /// agent removes it only after StopPodSandbox has reaped the pod's pause process. (Counting
    /// pause processes before and after would time a scan of every process of the machine,
    /// thousands at the 500-pod level, not podlab.)
    pub fn delete_pod(&self, lab: &Lab, name: &str) -> Result<()> {
        self.delete_pods(lab, &[name.to_string()])
    }

    /// `podlab delete pod NAME...` for many pods in one command (it marks them all, then waits
    /// for each to be gone).
    pub fn delete_pods(&self, lab: &Lab, names: &[String]) -> Result<()> {
        let mut delete = self.command(lab).expect("has() saw it");
        delete.args(["delete", "pod"]).args(names);
        crate::lab::run(&mut delete).map(drop)
    }

    /// The memory of this root's per-pod processes in the lab (podlab-shim + podlab-pause,
    /// whose command lines name their sandbox folder; the containers are not counted, as the
    /// peers' rows count only their sandbox machinery), and of its node agent (whose
    /// environment names the root).
    pub fn pod_memory(&self, lab: &Lab) -> ((Memory, usize), Memory) {
        let table = crate::procs::Table::read();
        let lab_pids = lab.lab_processes();
        let root = self.root(lab);
        let below_root = format!("{}/", root.display());
        let agent_env = format!("PODLAB_ROOT={}", root.display());
        let ours = |pid: i32, comm: &str| {
            if comm == "podlab" {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|b| *b == 0)
                        .any(|var| var == agent_env.as_bytes())
                })
            } else {
                table
                    .get(pid)
                    .is_some_and(|p| p.command_text().contains(&below_root))
            }
        };
        let sum = |comms: &[&str]| {
            let pids: Vec<i32> = lab_pids
                .iter()
                .copied()
                .filter(|p| {
                    table
                        .get(*p)
                        .is_some_and(|p| comms.contains(&p.comm.as_str()) && ours(p.pid, &p.comm))
                })
                .collect();
            let memory = pids
                .iter()
                .filter_map(|p| crate::procs::memory(*p))
                .fold(Memory::default(), |a, b| a + b);
            (memory, pids.len())
        };
        (sum(&["podlab-shim", "podlab-pause"]), sum(&["podlab"]).0)
    }
}

/// `run NAME --image busybox --rm --restart Never --command -- /bin/true`.
fn run_args(name: &str) -> Vec<String> {
    [
        "run",
        name,
        "--image",
        "busybox",
        "--rm",
        "--restart",
        "Never",
        "--command",
        "--",
        "/bin/true",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn contender<'a>(command: String, trial: Option<super::stats::Trial<'a>>) -> Contender<'a> {
    Contender {
        name: "podlab".into(),
        command,
        trial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_means_pending() {
        let podlab = Podlab {
            binary: None,
            network: None,
        };
        assert!(!podlab.has(&["run"]));
        assert!(podlab.ns_set().trial.is_none());
        assert!(!podlab.has_pods());
        let yaml = pod_yaml("p", 2);
        assert!(yaml.contains("name: p\n") && yaml.contains("- name: c1\n"));
    }
}
