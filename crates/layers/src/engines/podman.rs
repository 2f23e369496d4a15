//! podman, daemonless, with a configuration of its own in the lab (`CONTAINERS_CONF`,
//! `CONTAINERS_STORAGE_CONF`, `CONTAINERS_REGISTRIES_CONF`):
//! * `default_ulimits = []`: podman's default nofile/nproc of 1048576 cannot be set here (root
//!   lacks CAP_SYS_RESOURCE, the hard limit is 20000);
//! * `runtime = "runc"`: crun refuses this host's hybrid cgroups;
//! * `cgroup_manager = "cgroupfs"`, `events_logger = "file"`: no systemd or journald here;
//! * storage (`graphroot`, `runroot`), `tmp_dir`, `static_dir`, `volume_path`, the events log and
//!   the CNI config folder in the lab; `netns = "none"` and `--network none` on every pod and
//!   container, so podman makes no bridge and no NAT rule by default;
//! * one network of the lab's own, [`NETWORK`]: a CNI `bridge` with `isGateway: false` and
//!   `ipMasq: false` (no address on the bridge, no route, no NAT) and `host-local` addresses
//!   kept in the lab. The bridge is made in the lab's network namespace, never the host's.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::lab::{run, Lab};
use crate::{tools, Error, Result};

pub struct Podman {
    podman: PathBuf,
    base: PathBuf,
    /// The cgroup every pod and container goes under (`--cgroup-parent`).
    pub cgroup_parent: String,
}

/// The lab's CNI network (see the module doc).
pub const NETWORK: &str = "podlab-peers";

/// The name podman gives the imported image.
pub fn image() -> String {
    format!("localhost/{}", crate::image::Busybox::reference())
}

impl Podman {
    pub fn setup(lab: &mut Lab) -> Result<Podman> {
        let podman = tools::require(tools::PODMAN)?;
        tools::require(tools::CONMON)?;
        let base = lab.subdir("podman")?;
        for (name, text) in [
            ("containers.conf", containers_conf(&base)),
            ("storage.conf", storage_conf(&base)),
            ("registries.conf", String::new()),
        ] {
            let path = base.join(name);
            std::fs::write(&path, text).map_err(|e| Error::io("writing", &path, e))?;
        }
        let conflist = base.join(format!("cni/{NETWORK}.conflist"));
        std::fs::create_dir_all(base.join("cni"))
            .map_err(|e| Error::io("creating", base.join("cni"), e))?;
        std::fs::write(&conflist, conflist_json(&base.join("cni-ipam")))
            .map_err(|e| Error::io("writing", &conflist, e))?;
        let this = Podman {
            podman: podman.clone(),
            base: base.clone(),
            cgroup_parent: lab.cgroup_parent("podman"),
        };
        lab.on_teardown("podman: remove every pod and container", move |lab| {
            for what in [&["pod", "rm"][..], &["rm"][..]] {
                let _ = podman_command(lab, &podman, &base)
                    .args(what)
                    .args(["--all", "--force", "--time", "0"])
                    .output();
            }
        });
        Ok(this)
    }

    pub fn podman(&self, lab: &Lab) -> Command {
        podman_command(lab, &self.podman, &self.base)
    }

    /// `podman import rootfs.tar localhost/podlab-peers/busybox:1`.
    pub fn import(&self, lab: &Lab, tar: &Path) -> Result<()> {
        run(self.podman(lab).arg("import").arg(tar).arg(image()))?;
        Ok(())
    }
}

fn podman_command(lab: &Lab, podman: &Path, base: &Path) -> Command {
    let mut cmd = lab.command(podman);
    cmd.env("CONTAINERS_CONF", base.join("containers.conf"))
        .env("CONTAINERS_STORAGE_CONF", base.join("storage.conf"))
        .env("CONTAINERS_REGISTRIES_CONF", base.join("registries.conf"));
    cmd
}

pub fn containers_conf(base: &Path) -> String {
    let b = base.display();
    format!(
        "[containers]\n\
         default_ulimits = []\n\
         netns = \"none\"\n\
         log_driver = \"k8s-file\"\n\
         [engine]\n\
         runtime = \"runc\"\n\
         cgroup_manager = \"cgroupfs\"\n\
         events_logger = \"file\"\n\
         events_logfile_path = \"{b}/events.log\"\n\
         tmp_dir = \"{b}/tmp\"\n\
         static_dir = \"{b}/root/libpod\"\n\
         volume_path = \"{b}/root/volumes\"\n\
         [network]\n\
         network_backend = \"cni\"\n\
         network_config_dir = \"{b}/cni\"\n\
         cni_plugin_dirs = [\"/usr/lib/cni\"]\n"
    )
}

/// A host-only bridge: no gateway address, no masquerade, addresses kept in `ipam_dir`.
pub fn conflist_json(ipam_dir: &Path) -> String {
    let value = serde_json::json!({
        "cniVersion": "0.4.0",
        "name": NETWORK,
        "plugins": [{
            "type": "bridge",
            "bridge": "plab0",
            "isGateway": false,
            "ipMasq": false,
            "hairpinMode": false,
            "ipam": {
                "type": "host-local",
                "dataDir": ipam_dir.display().to_string(),
                "ranges": [[{ "subnet": "10.213.0.0/16" }]]
            }
        }]
    });
    serde_json::to_string_pretty(&value).expect("a Value serializes")
}

pub fn storage_conf(base: &Path) -> String {
    let b = base.display();
    format!("[storage]\ndriver = \"overlay\"\nrunroot = \"{b}/run\"\ngraphroot = \"{b}/root\"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_says_what_this_machine_needs() {
        let c = containers_conf(Path::new("/tmp/lab/podman"));
        assert!(c.contains("default_ulimits = []"));
        assert!(c.contains("runtime = \"runc\""));
        assert!(c.contains("netns = \"none\""));
        let s = storage_conf(Path::new("/tmp/lab/podman"));
        assert!(s.contains("graphroot = \"/tmp/lab/podman/root\""));
        let net: serde_json::Value =
            serde_json::from_str(&conflist_json(Path::new("/tmp/lab/ipam"))).unwrap();
        let bridge = &net["plugins"][0];
        assert_eq!(bridge["isGateway"], false);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["dataDir"], "/tmp/lab/ipam");
        assert_eq!(
            net["plugins"].as_array().unwrap().len(),
            1,
            "no portmap or firewall"
        );
    }
}
