//! A private dockerd on top of the lab's containerd, as docker runs in real life: the docker CLI
//! talks to dockerd, dockerd asks containerd (namespace `moby`) to run each container, and
//! containerd starts a `containerd-shim-runc-v2` that runs runc.
//!
//! Flags, and why: `--iptables=false --ip-forward=false --ip-masq=false --ip6tables=false`
//! (dockerd's defaults add MASQUERADE rules and turn on `ip_forward`), `--bridge=none` (no
//! `docker0`), `--userland-proxy=false`; `--data-root`, `--exec-root`, `--pidfile`, `-H` and
//! `--config-file` in the lab; `--cgroup-parent` under the lab's own cgroup; the cgroupfs driver
//! (no systemd here).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::containerd::Containerd;
use crate::lab::{run, wait_until, Lab};
use crate::{tools, Error, Result};

/// The lab's docker network (see [`Dockerd::create_network`]).
pub const NETWORK: &str = "podlab-peers";

pub struct Dockerd {
    pub pid: i32,
    pub socket: PathBuf,
    /// `--data-root`: the overlay2 graph driver keeps the image layers here.
    pub data_root: PathBuf,
    docker: PathBuf,
}

impl Dockerd {
    pub fn start(lab: &mut Lab, containerd: &Containerd) -> Result<Dockerd> {
        let dockerd = tools::require(tools::DOCKERD)?;
        let docker = tools::require(tools::DOCKER)?;
        let base = lab.subdir("docker")?;
        let socket = base.join("docker.sock");
        let data_root = base.join("data");
        let config = base.join("daemon.json");
        std::fs::write(&config, "{}\n").map_err(|e| Error::io("writing", &config, e))?;
        let mut cmd = lab.command(&dockerd);
        cmd.args(flags(
            &base,
            &socket,
            &containerd.socket,
            &lab.cgroup_parent("docker"),
        ));
        let pid = lab.spawn_daemon("dockerd", cmd)?;
        let this = Dockerd {
            pid,
            socket,
            data_root,
            docker,
        };
        let ready = wait_until("dockerd to answer", Duration::from_secs(60), || {
            this.socket.exists()
                && this
                    .docker(lab)
                    .args(["version", "--format", "{{.Server.Version}}"])
                    .output()
                    .is_ok_and(|o| o.status.success())
        });
        if let Err(err) = ready {
            return Err(Error::Command {
                command: "dockerd".into(),
                status: err.to_string(),
                stderr: lab.log_tail("dockerd"),
            });
        }
        let docker = this.docker.clone();
        let sock = this.socket.clone();
        lab.on_teardown("docker: remove every container", move |lab| {
            let mut ps = docker_command(lab, &docker, &sock);
            let ids = ps
                .args(["ps", "-aq"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let _ = docker_command(lab, &docker, &sock)
                    .args(["rm", "-f"])
                    .args(&ids)
                    .output();
            }
        });
        Ok(this)
    }

    /// The docker CLI, pointed at this dockerd.
    pub fn docker(&self, lab: &Lab) -> Command {
        docker_command(lab, &self.docker, &self.socket)
    }

    /// An internal bridge network of the lab (`--internal`: no gateway route, and with
    /// `--iptables=false` no rule either), made in the lab's network namespace.
    pub fn create_network(&self, lab: &Lab) -> Result<()> {
        run(self.docker(lab).args([
            "network",
            "create",
            "--internal",
            "--driver",
            "bridge",
            "--subnet",
            "10.214.0.0/16",
            "-o",
            "com.docker.network.bridge.name=plabd0",
            NETWORK,
        ]))?;
        Ok(())
    }

    /// `docker import rootfs.tar podlab-peers/busybox:1`.
    pub fn import(&self, lab: &Lab, tar: &Path) -> Result<()> {
        run(self
            .docker(lab)
            .arg("import")
            .arg(tar)
            .arg(crate::image::Busybox::reference()))?;
        Ok(())
    }
}

fn docker_command(lab: &Lab, docker: &Path, socket: &Path) -> Command {
    let mut cmd = lab.command(docker);
    cmd.arg("-H").arg(format!("unix://{}", socket.display()));
    cmd
}

/// dockerd's command line (see the module doc for why each flag).
pub fn flags(base: &Path, socket: &Path, containerd: &Path, cgroup_parent: &str) -> Vec<String> {
    let b = base.display();
    vec![
        format!("--config-file={b}/daemon.json"),
        format!("--containerd={}", containerd.display()),
        format!("--data-root={b}/data"),
        format!("--exec-root={b}/exec"),
        format!("--pidfile={b}/docker.pid"),
        format!("--host=unix://{}", socket.display()),
        "--iptables=false".into(),
        "--ip6tables=false".into(),
        "--ip-forward=false".into(),
        "--ip-masq=false".into(),
        "--bridge=none".into(),
        "--userland-proxy=false".into(),
        format!("--cgroup-parent={cgroup_parent}"),
        "--exec-opt=native.cgroupdriver=cgroupfs".into(),
        "--storage-driver=overlay2".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_nat_no_forwarding_no_bridge() {
        let f = flags(
            Path::new("/tmp/lab/docker"),
            Path::new("/tmp/lab/docker/docker.sock"),
            Path::new("/tmp/lab/containerd/containerd.sock"),
            "/podlab-peers-x/docker",
        );
        for must in [
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--bridge=none",
        ] {
            assert!(f.iter().any(|a| a == must), "{must} missing");
        }
        for flag in f
            .iter()
            .filter(|a| a.contains('/') && !a.contains("cgroup"))
        {
            assert!(flag.contains("/tmp/lab/"), "{flag} leaves the lab");
        }
    }
}
