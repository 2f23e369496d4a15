//! What the tests and demos need from the machine, and the exact line that installs it.

use std::path::Path;

use anyhow::{bail, Result};

/// A file the tasks need, and the Debian/Ubuntu package that provides it.
pub struct Tool {
    pub path: &'static str,
    pub package: &'static str,
}

const fn tool(path: &'static str, package: &'static str) -> Tool {
    Tool { path, package }
}

pub const DEMO_TOOLS: &[Tool] = &[
    tool("/usr/bin/unshare", "util-linux"),
    tool("/bin/busybox", "busybox-static"),
    tool("/usr/lib/cni/bridge", "containernetworking-plugins"),
];

pub const TEST_TOOLS: &[Tool] = &[
    tool("/usr/bin/unshare", "util-linux"),
    tool("/bin/busybox", "busybox-static"),
    tool("/usr/lib/cni/bridge", "containernetworking-plugins"),
    tool("/usr/sbin/ip", "iproute2"),
    tool("/usr/sbin/runc", "runc"),
    tool("/usr/bin/umoci", "umoci"),
    tool("/usr/bin/skopeo", "skopeo"),
    tool("/usr/bin/containerd", "containerd"),
    tool("/usr/sbin/dockerd", "docker.io"),
    // The HTTPS server (and its certificate) of the HTTPS probe test.
    tool("/usr/bin/openssl", "openssl"),
    // The registry the pull tests start (TLS, htpasswd auth), and its htpasswd file.
    tool("/usr/bin/docker-registry", "docker-registry"),
    tool("/usr/bin/htpasswd", "apache2-utils"),
];

/// Fails with the exact install line when something is missing. `scripts/run` installs these
/// itself; this check is for people who call `cargo xtask` directly.
pub fn check_tools(tools: &[Tool]) -> Result<()> {
    let missing: Vec<&str> = tools
        .iter()
        .filter(|t| !Path::new(t.path).exists() && !alt_path_exists(t.path))
        .map(|t| t.package)
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing packages; install them with:\n    sudo apt-get install -y {}",
            missing.join(" ")
        );
    }
    Ok(())
}

/// Debian merged /usr: /bin and /usr/bin, /sbin and /usr/sbin are the same folders.
fn alt_path_exists(path: &str) -> bool {
    let alt = if let Some(rest) = path.strip_prefix("/usr") {
        rest.to_string()
    } else {
        format!("/usr{path}")
    };
    Path::new(&alt).exists()
}
