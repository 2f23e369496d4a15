//! A private containerd: root, state, sockets and the `opt` plugin's folder in the lab, the CRI
//! plugin off (this is containerd as docker and `ctr` use it, not as kubelet's CRI runtime).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::lab::{run, run_text, wait_until, Lab};
use crate::{tools, Error, Result};

pub struct Containerd {
    pub pid: i32,
    pub socket: PathBuf,
    /// containerd's `root`: the content store and the snapshotters' folders.
    pub root: PathBuf,
    ctr: PathBuf,
}

impl Containerd {
    pub fn start(lab: &mut Lab) -> Result<Containerd> {
        let containerd = tools::require(tools::CONTAINERD)?;
        let ctr = tools::require(tools::CTR)?;
        tools::require(tools::SHIM)?;
        let base = lab.subdir("containerd")?;
        let socket = base.join("containerd.sock");
        let root = base.join("root");
        let config = base.join("config.toml");
        let text = config_toml(&base, &socket);
        std::fs::write(&config, text).map_err(|e| Error::io("writing", &config, e))?;
        let mut cmd = lab.command(&containerd);
        cmd.arg("--config").arg(&config);
        let pid = lab.spawn_daemon("containerd", cmd)?;
        let this = Containerd {
            pid,
            socket,
            root,
            ctr,
        };
        let ready = wait_until("containerd to answer", Duration::from_secs(30), || {
            this.socket.exists()
                && this
                    .ctr(lab, "default")
                    .arg("version")
                    .output()
                    .is_ok_and(|o| o.status.success())
        });
        if let Err(err) = ready {
            return Err(Error::Command {
                command: format!("containerd --config {}", config.display()),
                status: err.to_string(),
                stderr: lab.log_tail("containerd"),
            });
        }
        let socket = this.socket.clone();
        let ctr_path = this.ctr.clone();
        lab.on_teardown("ctr: remove tasks and containers", move |lab| {
            remove_all(lab, &ctr_path, &socket, "default");
        });
        Ok(this)
    }

    /// `ctr --address SOCK -n NAMESPACE`, run inside the lab (ctr makes its stdio FIFOs under
    /// `/run/containerd/fifo`, which the shim must see at the same path).
    pub fn ctr(&self, lab: &Lab, namespace: &str) -> Command {
        ctr_command(lab, &self.ctr, &self.socket, namespace)
    }

    /// Loads an image archive (`oci-archive` or `docker-archive`) as `podlab-peers/busybox:1`.
    pub fn import(&self, lab: &Lab, archive: &Path) -> Result<()> {
        run(self
            .ctr(lab, "default")
            .args(["images", "import", "--base-name", crate::image::NAME])
            .arg(archive))?;
        let listed = run_text(self.ctr(lab, "default").args(["images", "ls", "-q"]))?;
        if !listed
            .lines()
            .any(|l| l == crate::image::Busybox::reference())
        {
            return Err(Error::evidence(
                format!(
                    "ctr images import made {}",
                    crate::image::Busybox::reference()
                ),
                format!("ctr images ls -q says {listed:?}"),
            ));
        }
        Ok(())
    }

    /// The overlayfs snapshotter's folder of numbered snapshots.
    pub fn snapshots_dir(&self) -> PathBuf {
        self.root
            .join("io.containerd.snapshotter.v1.overlayfs/snapshots")
    }

    /// The pid of a running task (`ctr task ls`).
    pub fn task_pid(&self, lab: &Lab, namespace: &str, id: &str) -> Result<i32> {
        let text = run_text(self.ctr(lab, namespace).args(["task", "ls"]))?;
        parse_task_pid(&text, id).ok_or(Error::Parse {
            what: "ctr task ls",
            text,
        })
    }
}

fn ctr_command(lab: &Lab, ctr: &Path, socket: &Path, namespace: &str) -> Command {
    let mut cmd = lab.command(ctr);
    cmd.arg("--address").arg(socket).args(["-n", namespace]);
    cmd
}

/// Kills and deletes every task, then every container, of one namespace.
fn remove_all(lab: &Lab, ctr: &Path, socket: &Path, namespace: &str) {
    let list = |what: &str| {
        ctr_command(lab, ctr, socket, namespace)
            .args([what, "ls", "-q"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    for id in list("containers").lines().filter(|l| !l.is_empty()) {
        let _ = ctr_command(lab, ctr, socket, namespace)
            .args(["task", "kill", "-s", "SIGKILL", id])
            .output();
        let _ = ctr_command(lab, ctr, socket, namespace)
            .args(["task", "rm", "-f", id])
            .output();
        let _ = ctr_command(lab, ctr, socket, namespace)
            .args(["containers", "rm", id])
            .output();
    }
}

/// The config: every path in the lab, CRI off, no debug or metrics listeners.
pub fn config_toml(base: &Path, socket: &Path) -> String {
    let b = base.display();
    let s = socket.display();
    format!(
        "version = 2\n\
         root = \"{b}/root\"\n\
         state = \"{b}/state\"\n\
         disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
         [grpc]\n  address = \"{s}\"\n\
         [ttrpc]\n  address = \"{s}.ttrpc\"\n\
         [debug]\n  address = \"\"\n\
         [metrics]\n  address = \"\"\n\
         [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{b}/opt\"\n"
    )
}

/// `TASK PID STATUS` lines of `ctr task ls`.
pub fn parse_task_pid(text: &str, id: &str) -> Option<i32> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&id))
        .and_then(|f| f.get(1)?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keeps_everything_in_the_lab() {
        let text = config_toml(
            Path::new("/tmp/lab/containerd"),
            Path::new("/tmp/lab/c.sock"),
        );
        assert!(text.contains("disabled_plugins = [\"io.containerd.grpc.v1.cri\"]"));
        assert!(text.contains("path = \"/tmp/lab/containerd/opt\""));
        for line in text.lines().filter(|l| l.contains('/')) {
            assert!(line.contains("/tmp/lab/"), "{line} leaves the lab");
        }
    }

    #[test]
    fn task_pid_from_ctr_task_ls() {
        let text = "TASK    PID     STATUS    \nt2      9338    RUNNING\nt10     11    STOPPED\n";
        assert_eq!(parse_task_pid(text, "t2"), Some(9338));
        assert_eq!(parse_task_pid(text, "t1"), None);
    }
}
