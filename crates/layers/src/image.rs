//! One busybox image for every peer, so that all of them run the same bits.
//!
//! There is no registry here. The root filesystem is made from the host's static busybox
//! (`bin/busybox` plus one symlink per applet, empty `proc sys dev tmp etc`), written once as a
//! plain tar with fixed owners and times (the same bytes, so the same layer digest, every run),
//! and then handed to each peer in the form it takes:
//! * docker and podman: `docker import` / `podman import` of that tar;
//! * containerd: an OCI layout made by `umoci` from the same folder, archived (`oci-archive`)
//!   and loaded with `ctr images import`;
//! * runc and crun: the folder itself, as the bundle's root.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::lab::run;
use crate::{tools, Error, Result};

/// The name every peer knows the image by (podman and docker add `localhost/` or nothing).
pub const NAME: &str = "podlab-peers/busybox";
pub const TAG: &str = "1";

/// What [`build`] made, all below one folder.
#[derive(Debug, Clone)]
pub struct Busybox {
    /// The root filesystem folder (runc and crun bundles point at it).
    pub rootfs: PathBuf,
    /// The same files as one tar (docker import, podman import).
    pub tar: PathBuf,
    /// The OCI layout (umoci), if umoci is installed.
    pub oci_layout: Option<PathBuf>,
    /// The OCI layout as an `oci-archive` tar (ctr images import).
    pub oci_archive: Option<PathBuf>,
}

impl Busybox {
    pub fn reference() -> String {
        format!("{NAME}:{TAG}")
    }
}

/// Builds the rootfs, its tar, and (with umoci) its OCI layout and archive under `dir`.
pub fn build(dir: &Path) -> Result<Busybox> {
    let busybox = tools::require(tools::BUSYBOX)?;
    let rootfs = dir.join("rootfs");
    make_rootfs(&busybox, &rootfs)?;
    let tar = dir.join("rootfs.tar");
    write_tar(&rootfs, &tar)?;
    let (oci_layout, oci_archive) = match tools::which("umoci") {
        Some(umoci) => {
            let layout = dir.join("oci");
            umoci_layout(&umoci, &rootfs, &layout, &dir.join("umoci-bundle"))?;
            let archive = dir.join("oci.tar");
            write_tar(&layout, &archive)?;
            (Some(layout), Some(archive))
        }
        None => (None, None),
    };
    Ok(Busybox {
        rootfs,
        tar,
        oci_layout,
        oci_archive,
    })
}

/// `bin/busybox` (a copy of the host's static one), a symlink per applet, and the empty
/// folders a container runtime mounts on.
pub fn make_rootfs(busybox: &Path, rootfs: &Path) -> Result<()> {
    let bin = rootfs.join("bin");
    for sub in ["bin", "proc", "sys", "dev", "tmp", "etc", "root"] {
        let path = rootfs.join(sub);
        std::fs::create_dir_all(&path).map_err(|e| Error::io("creating", &path, e))?;
    }
    let target = bin.join("busybox");
    std::fs::copy(busybox, &target).map_err(|e| Error::io("copying busybox to", &target, e))?;
    let list = crate::lab::run_text(Command::new(busybox).arg("--list"))?;
    for applet in list.lines().map(str::trim).filter(|a| !a.is_empty()) {
        if applet == "busybox" || applet.contains('/') {
            continue;
        }
        let link = bin.join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link)
                .map_err(|e| Error::io("linking", &link, e))?;
        }
    }
    // Names the peers look up; an empty file is enough for getent-free busybox.
    for (file, text) in [
        ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
        ("etc/group", "root:x:0:\n"),
    ] {
        let path = rootfs.join(file);
        std::fs::write(&path, text).map_err(|e| Error::io("writing", &path, e))?;
    }
    Ok(())
}

/// The folder as a tar with owner 0, fixed times and sorted entries.
pub fn write_tar(folder: &Path, tar_path: &Path) -> Result<()> {
    let file = std::fs::File::create(tar_path).map_err(|e| Error::io("creating", tar_path, e))?;
    let mut builder = tar::Builder::new(file);
    builder.mode(tar::HeaderMode::Deterministic);
    builder.follow_symlinks(false);
    let mut entries = Vec::new();
    collect(folder, folder, &mut entries)?;
    entries.sort();
    for rel in entries {
        let path = folder.join(&rel);
        builder
            .append_path_with_name(&path, &rel)
            .map_err(|e| Error::io("archiving", &path, e))?;
    }
    builder
        .into_inner()
        .map_err(|e| Error::io("finishing", tar_path, e))?;
    Ok(())
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("listing", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("listing", dir, e))?;
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        out.push(rel);
        let kind = entry
            .file_type()
            .map_err(|e| Error::io("reading the type of", &path, e))?;
        if kind.is_dir() {
            collect(root, &path, out)?;
        }
    }
    Ok(())
}

/// `umoci init`, `umoci new`, `umoci unpack`, copy the rootfs in, `umoci repack`: an OCI layout
/// whose one layer holds the rootfs.
fn umoci_layout(umoci: &Path, rootfs: &Path, layout: &Path, bundle: &Path) -> Result<()> {
    let image = format!("{}:{TAG}", layout.display());
    let layout_arg = layout.display().to_string();
    run(Command::new(umoci).args(["init", "--layout", &layout_arg]))?;
    run(Command::new(umoci).args(["new", "--image", &image]))?;
    run(Command::new(umoci)
        .args(["unpack", "--image", &image])
        .arg(bundle))?;
    let target = bundle.join("rootfs");
    run(Command::new("cp")
        .arg("-a")
        .arg(rootfs.join("."))
        .arg(&target))?;
    run(Command::new(umoci)
        .args(["repack", "--image", &image])
        .arg(bundle))?;
    std::fs::remove_dir_all(bundle).map_err(|e| Error::io("removing", bundle, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tar_is_the_same_bytes_twice() {
        let Some(busybox) = tools::which("busybox") else {
            eprintln!("skipped: busybox-static is not installed");
            return;
        };
        let dir = std::env::temp_dir().join(format!("podlab-layers-tar-{}", std::process::id()));
        let rootfs = dir.join("rootfs");
        make_rootfs(&busybox, &rootfs).unwrap();
        assert!(rootfs
            .join("bin/sh")
            .symlink_metadata()
            .unwrap()
            .is_symlink());
        write_tar(&rootfs, &dir.join("a.tar")).unwrap();
        write_tar(&rootfs, &dir.join("b.tar")).unwrap();
        let a = std::fs::read(dir.join("a.tar")).unwrap();
        let b = std::fs::read(dir.join("b.tar")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(a.len() > 500_000, "busybox is in the tar");
        assert!(a == b, "two archives of the same folder differ");
    }
}
