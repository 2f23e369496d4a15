//! The real peers' programs: where they are, which Debian package brings each, and their versions.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Result};

/// One program a peer needs, and the Debian package that installs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub binary: &'static str,
    pub package: &'static str,
}

const fn tool(binary: &'static str, package: &'static str) -> Tool {
    Tool { binary, package }
}

pub const RUNC: Tool = tool("runc", "runc");
pub const CRUN: Tool = tool("crun", "crun");
pub const CONTAINERD: Tool = tool("containerd", "containerd");
pub const CTR: Tool = tool("ctr", "containerd");
pub const SHIM: Tool = tool("containerd-shim-runc-v2", "containerd");
pub const DOCKERD: Tool = tool("dockerd", "docker.io");
pub const DOCKER: Tool = tool("docker", "docker.io");
pub const PODMAN: Tool = tool("podman", "podman");
pub const CONMON: Tool = tool("conmon", "conmon");
pub const CATATONIT: Tool = tool("catatonit", "catatonit");
pub const BUSYBOX: Tool = tool("busybox", "busybox-static");
pub const UMOCI: Tool = tool("umoci", "umoci");
pub const UNSHARE: Tool = tool("unshare", "util-linux");
pub const CNI_BRIDGE: Tool = tool("/usr/lib/cni/bridge", "containernetworking-plugins");

/// Everything `cargo xtask peers` uses.
pub const BENCH_TOOLS: &[Tool] = &[
    RUNC, CRUN, CONTAINERD, CTR, SHIM, DOCKERD, DOCKER, PODMAN, CONMON, CATATONIT, BUSYBOX, UMOCI,
    UNSHARE, CNI_BRIDGE,
];

/// What the layers demo drives when it is there.
pub const DEMO_TOOLS: &[Tool] = &[CONTAINERD, CTR, SHIM, RUNC, DOCKERD, DOCKER, BUSYBOX, UMOCI];

/// The Debian packages CI installs for both (one line: `apt-get install -y ...`).
pub const PACKAGES: &[&str] = &[
    "runc",
    "crun",
    "containerd",
    "docker.io",
    "podman",
    "catatonit",
    "busybox-static",
    "containernetworking-plugins",
    "umoci",
];

/// Where `binary` is: an absolute path as it is, otherwise the first match on `PATH` (then
/// `/usr/sbin` and `/sbin`, which a non-login root shell may lack).
pub fn which(binary: &str) -> Option<PathBuf> {
    if binary.starts_with('/') {
        return Path::new(binary).exists().then(|| PathBuf::from(binary));
    }
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(binary))
        .find(|p| p.is_file());
    found
}

/// The docker CLI that matches Debian's dockerd: `/usr/bin/docker` of docker.io when it is
/// there (another `docker` may come first on PATH), else the first on PATH.
pub fn docker_cli() -> Option<PathBuf> {
    let debian = Path::new("/usr/bin/docker");
    if debian.is_file() {
        Some(debian.to_path_buf())
    } else {
        which("docker")
    }
}

pub fn require(tool: Tool) -> Result<PathBuf> {
    let found = if tool == DOCKER {
        docker_cli()
    } else {
        which(tool.binary)
    };
    found.ok_or(Error::Missing {
        binary: tool.binary,
        package: tool.package,
    })
}

/// The tools of `tools` that are not installed.
pub fn missing(tools: &[Tool]) -> Vec<Tool> {
    tools
        .iter()
        .copied()
        .filter(|t| require(*t).is_err())
        .collect()
}

/// `apt-get install -y PKG...` for the packages of `tools`, each named once.
pub fn install_line(tools: &[Tool]) -> String {
    let mut packages: Vec<&str> = Vec::new();
    for t in tools {
        if !packages.contains(&t.package) {
            packages.push(t.package);
        }
    }
    format!("apt-get install -y {}", packages.join(" "))
}

/// The first line a program prints for its version flag, trimmed, or `not installed`.
pub fn version(tool: Tool) -> String {
    let Ok(path) = require(tool) else {
        return "not installed".into();
    };
    let args: &[&str] = match tool.binary {
        "busybox" => &[],
        "docker" => &["--version"],
        "ctr" => &["--version"],
        "containerd-shim-runc-v2" => &["-v"],
        _ => &["--version"],
    };
    let out = Command::new(&path).args(args).output();
    let text = out
        .map(|o| {
            let mut t = String::from_utf8_lossy(&o.stdout).into_owned();
            t.push_str(&String::from_utf8_lossy(&o.stderr));
            t
        })
        .unwrap_or_default();
    first_version_line(&text).unwrap_or_else(|| "unknown".into())
}

/// The first non-empty line, tidied (busybox prints its version in the first line of its help).
fn first_version_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.split(" multi-call").next().unwrap_or(l).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_line_names_each_package_once() {
        assert_eq!(
            install_line(&[CONTAINERD, CTR, SHIM, DOCKERD]),
            "apt-get install -y containerd docker.io"
        );
    }

    #[test]
    fn version_lines() {
        assert_eq!(
            first_version_line(
                "\nBusyBox v1.35.0 (Debian 1:1.35.0-4+b3) multi-call binary.\nUsage"
            ),
            Some("BusyBox v1.35.0 (Debian 1:1.35.0-4+b3)".into())
        );
        assert_eq!(first_version_line(""), None);
    }

    #[test]
    fn which_finds_sh_and_not_nonsense() {
        assert!(which("sh").is_some());
        assert!(which("/bin/sh").is_some());
        assert!(which("no-such-binary-podlab").is_none());
    }
}
