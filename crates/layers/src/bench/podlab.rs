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
use crate::Result;

/// The podlab binary, if built.
#[derive(Debug, Clone)]
pub struct Podlab {
    pub binary: Option<PathBuf>,
}

/// The pod manifest of the pod comparison: two busybox containers that sleep.
pub const POD_YAML: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: NAME\nspec:\n  \
terminationGracePeriodSeconds: 0\n  containers:\n  - name: one\n    image: busybox\n    \
command: [sleep, \"100000\"]\n  - name: two\n    image: busybox\n    command: [sleep, \"100000\"]\n";

impl Podlab {
    /// `target/release/podlab`, else `target/debug/podlab`, below `workspace`.
    pub fn find(workspace: &Path) -> Podlab {
        let binary = ["target/release/podlab", "target/debug/podlab"]
            .iter()
            .map(|p| workspace.join(p))
            .find(|p| p.is_file());
        Podlab { binary }
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

    fn command(&self, lab: &Lab) -> Option<Command> {
        let mut cmd = lab.command(self.binary.as_ref()?);
        cmd.env("PODLAB_ROOT", lab.dir().join("podlab"));
        Some(cmd)
    }

    /// Comparison 1 as podlab will offer it. Measured meanwhile by the `podlab-ns-true` helper
    /// (podlab-ns's `spawn_with_clone` + exec), a row of its own.
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

    /// Comparison 2: one `/bin/true` container, created, run and removed.
    pub fn container_true<'a>(&'a self, lab: &'a Lab) -> Contender<'a> {
        let args = ["run", "--rm", "busybox", "/bin/true"];
        contender(
            format!("podlab {}", args.join(" ")),
            self.has(&["run"]).then(|| {
                Box::new(move || {
                    let mut cmd = self.command(lab).expect("has() saw it");
                    cmd.args(args);
                    Ok(vec![super::suite::timed(&mut cmd)?])
                }) as super::stats::Trial<'a>
            }),
        )
    }

    /// Comparison 3: a pod of two containers, applied, Ready, then deleted.
    pub fn pod<'a>(&'a self, lab: &'a Lab, counter: &'a std::cell::Cell<u64>) -> Contender<'a> {
        let text =
            "podlab apply -f pod.yaml; podlab get pod NAME -o jsonpath={.status.conditions} \
                    until Ready=True; podlab delete pod NAME";
        let runnable = self.has(&["apply"]) && self.has(&["delete"]) && self.has(&["get"]);
        contender(
            text.to_string(),
            runnable
                .then(|| Box::new(move || self.pod_trial(lab, counter)) as super::stats::Trial<'a>),
        )
    }

    fn pod_trial(&self, lab: &Lab, counter: &std::cell::Cell<u64>) -> Result<Vec<f64>> {
        let n = counter.get();
        counter.set(n + 1);
        let name = format!("peers-pod-{n}");
        let manifest = lab.path(&format!("podlab/{name}.yaml"))?;
        std::fs::write(&manifest, POD_YAML.replace("NAME", &name))
            .map_err(|e| crate::Error::io("writing", &manifest, e))?;
        let start = std::time::Instant::now();
        let mut apply = self.command(lab).expect("has() saw it");
        apply.arg("apply").arg("-f").arg(&manifest);
        crate::lab::run(&mut apply)?;
        crate::lab::wait_until(
            &format!("podlab pod {name} Ready"),
            std::time::Duration::from_secs(30),
            || {
                let mut get = self.command(lab).expect("has() saw it");
                get.args(["get", "pod", &name, "-o", "json"]);
                get.output()
                    .is_ok_and(|o| is_ready(&String::from_utf8_lossy(&o.stdout)))
            },
        )?;
        let up = start.elapsed().as_secs_f64() * 1e3;
        let mut delete = self.command(lab).expect("has() saw it");
        delete.args(["delete", "pod", &name]);
        let down = super::suite::timed(&mut delete)?;
        Ok(vec![up, down, up + down])
    }

    /// Comparisons 4 and 5 need podlab pods that stay up (`podlab apply`) and their removal.
    pub fn scale_pending(&self) -> Option<String> {
        (!(self.has(&["apply"]) && self.has(&["delete"])))
            .then(|| "podlab apply -f pod.yaml (one container); podlab delete pod NAME".to_string())
    }
}

fn contender<'a>(command: String, trial: Option<super::stats::Trial<'a>>) -> Contender<'a> {
    Contender {
        name: "podlab".into(),
        command,
        trial,
    }
}

/// Whether a Pod's JSON says `Ready` is `True`.
pub fn is_ready(json: &str) -> bool {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else {
        return false;
    };
    value["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_from_pod_json() {
        assert!(is_ready(
            r#"{"status":{"conditions":[{"type":"PodScheduled","status":"True"},{"type":"Ready","status":"True"}]}}"#
        ));
        assert!(!is_ready(
            r#"{"status":{"conditions":[{"type":"Ready","status":"False"}]}}"#
        ));
        assert!(!is_ready("not json"));
    }

    #[test]
    fn missing_binary_means_pending() {
        let podlab = Podlab { binary: None };
        assert!(!podlab.has(&["run"]));
        assert!(podlab.ns_set().trial.is_none());
        assert!(podlab.scale_pending().is_some());
    }
}
