//! A container as an OCI bundle: `config.json` (the OCI runtime spec, typed by the `oci-spec`
//! crate) and a `rootfs/` folder, which real `runc run` starts. This is the hand-over point
//! between a CRI runtime and an OCI runtime: containerd writes the same two things for runc.
//!
//! The rootfs is a copy of what the container sees at `/`: its image layers with its own
//! changes on top, merged by the kernel through a read-only overlay (the container's upper
//! folder as the top-most lower one) mounted in a throw-away mount namespace. The pod's
//! /etc/hostname, /etc/hosts and /etc/resolv.conf are copied in. The namespaces are fresh ones:
//! the bundle runs on its own, without the pod.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    Capabilities, Capability, LinuxCapabilitiesBuilder, MountBuilder, ProcessBuilder, RootBuilder,
    Spec, UserBuilder,
};

use crate::id::ContainerId;
use crate::runtime::Runtime;
use crate::state::ContainerRecord;
use crate::{Error, Result};

impl Runtime {
    /// Writes the container `id` as an OCI bundle into `dir` (which must not exist or be
    /// empty): `dir/config.json` and `dir/rootfs/`. Then `runc run --bundle DIR NAME` runs it.
    pub fn export_bundle(&self, id: &ContainerId, dir: &Path) -> Result<()> {
        let record = self.container_record(id)?;
        let sandbox = self.layout.sandbox(&record.sandbox_id);
        if dir.exists()
            && std::fs::read_dir(dir)
                .map_err(|e| Error::io("listing", dir, e))?
                .next()
                .is_some()
        {
            return Err(Error::Invalid(format!(
                "bundle folder {} is not empty",
                dir.display()
            )));
        }
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(&rootfs).map_err(|e| Error::io("creating", &rootfs, e))?;
        // A container never started has no layer folders yet (they come at its first start).
        if !sandbox.container(id).rootfs().is_dir() {
            let owner = self
                .pod_sandbox_record(&record.sandbox_id)?
                .config
                .linux
                .security
                .user_namespace
                .map(|user| user.host_root());
            crate::container::make_layer_dirs(&sandbox.container(id), owner)?;
        }
        let mut lowers = vec![sandbox.container(id).upper()];
        lowers.extend(record.image.lowerdirs.iter().cloned());
        let mountpoint = sandbox.container(id).rootfs();
        let target = rootfs.clone();
        podlab_ns::child::run_in_child(move || copy_merged(&lowers, &mountpoint, &target))?;
        for (from, to) in [
            (sandbox.hostname(), "etc/hostname"),
            (sandbox.hosts(), "etc/hosts"),
            (sandbox.resolv_conf(), "etc/resolv.conf"),
        ] {
            let to = rootfs.join(to);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io("creating", parent, e))?;
            }
            if std::fs::symlink_metadata(&to).is_ok_and(|m| m.file_type().is_symlink()) {
                let _ = std::fs::remove_file(&to);
            }
            std::fs::copy(&from, &to).map_err(|e| Error::io("copying", &from, e))?;
        }
        let hostname = std::fs::read_to_string(sandbox.hostname()).unwrap_or_default();
        let spec = bundle_spec(&record, hostname.trim())?;
        let config = dir.join("config.json");
        spec.save(&config).map_err(|e| Error::State {
            path: config.clone(),
            message: e.to_string(),
        })
    }
}

/// The runtime spec of a container: its process (argv, env, cwd, user, capabilities,
/// no_new_privs), its seccomp profile, masked and read-only paths, its rootfs (read-only if
/// asked), the pod's hostname, the default mounts plus its volumes, and the spec's default
/// (fresh) namespaces.
pub fn bundle_spec(record: &ContainerRecord, hostname: &str) -> Result<Spec> {
    let invalid = |e: oci_spec::OciSpecError| Error::Invalid(format!("building config.json: {e}"));
    let caps: Capabilities = record
        .process
        .capabilities
        .clone()
        .unwrap_or_else(crate::capabilities::default_names)
        .into_iter()
        .filter_map(|name| {
            serde_json::from_value::<Capability>(serde_json::Value::String(name)).ok()
        })
        .collect();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(caps.clone())
        .effective(caps.clone())
        .permitted(caps)
        .inheritable(Capabilities::new())
        .ambient(Capabilities::new())
        .build()
        .map_err(invalid)?;
    let process = &record.process;
    let user = UserBuilder::default()
        .uid(process.uid)
        .gid(process.gid)
        .additional_gids(process.additional_gids.clone())
        .build()
        .map_err(invalid)?;
    let mut spec = Spec::default();
    let default_process = spec.process().clone().unwrap_or_default();
    spec.set_process(Some(
        ProcessBuilder::default()
            .terminal(false)
            .user(user)
            .args(process.argv.clone())
            .env(process.env.clone())
            .cwd(PathBuf::from(&process.cwd))
            .capabilities(capabilities)
            .no_new_privileges(record.process.no_new_privs)
            .rlimits(default_process.rlimits().clone().unwrap_or_default())
            .build()
            .map_err(invalid)?,
    ));
    spec.set_root(Some(
        RootBuilder::default()
            .path("rootfs")
            .readonly(record.config.readonly_rootfs)
            .build()
            .map_err(invalid)?,
    ));
    spec.set_hostname(Some(hostname.to_string()));
    if let Some(linux) = spec.linux_mut() {
        linux.set_seccomp(
            record
                .process
                .seccomp
                .as_ref()
                .map(|spec| spec.profile().into_owned()),
        );
        let security = &record.config.security;
        let (masked, readonly) = if security.privileged {
            (Vec::new(), Vec::new())
        } else {
            (security.masked(), security.readonly())
        };
        linux.set_masked_paths(Some(masked));
        linux.set_readonly_paths(Some(readonly));
    }
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    for volume in &record.config.mounts {
        if let Some(image) = &volume.image {
            mounts.push(image_volume_mount(volume, image)?);
            continue;
        }
        let mut options = vec!["rbind".to_string(), "rprivate".to_string()];
        options.push(if volume.readonly { "ro" } else { "rw" }.to_string());
        if volume.recursive_readonly {
            options.push("rro".to_string());
        }
        mounts.push(
            MountBuilder::default()
                .destination(volume.container_path.clone())
                .typ("bind")
                .source(volume.host_path.clone())
                .options(options)
                .build()
                .map_err(invalid)?,
        );
    }
    spec.set_mounts(Some(mounts));
    Ok(spec)
}

/// An image volume as runc mounts one: a read-only overlay of the image's layers (a read-only
/// bind of its one layer). A sub path has no OCI form (containerd mounts the image itself and
/// binds the folder), so such a container is refused.
fn image_volume_mount(
    volume: &crate::config::Mount,
    image: &crate::config::ImageVolume,
) -> Result<oci_spec::runtime::Mount> {
    if !image.sub_path.is_empty() {
        return Err(Error::Invalid(format!(
            "the image volume at {} has a sub path ({:?}), which an OCI bundle cannot express",
            volume.container_path.display(),
            image.sub_path
        )));
    }
    let built = match image.lowerdirs.as_slice() {
        [one] => MountBuilder::default()
            .destination(volume.container_path.clone())
            .typ("bind")
            .source(one.clone())
            .options(vec!["rbind".into(), "rprivate".into(), "ro".into()])
            .build(),
        lowers => {
            let lowerdir: Vec<String> = lowers.iter().map(|p| p.display().to_string()).collect();
            MountBuilder::default()
                .destination(volume.container_path.clone())
                .typ("overlay")
                .source("overlay")
                .options(vec![
                    format!("lowerdir={}", lowerdir.join(":")),
                    "ro".into(),
                ])
                .build()
        }
    };
    built.map_err(|e| Error::Invalid(format!("building config.json: {e}")))
}

/// In a forked child: the merged view of `lowers` mounted read-only at `mountpoint` in a mount
/// namespace of the child's own, copied to `target`.
fn copy_merged(lowers: &[PathBuf], mountpoint: &Path, target: &Path) -> podlab_ns::Result<()> {
    podlab_ns::ops::create(&[podlab_ns::NsKind::Mnt])?;
    podlab_ns::mnt::make_rprivate(Path::new("/"))?;
    let lowerdir: Vec<String> = lowers.iter().map(|p| p.display().to_string()).collect();
    nix::mount::mount(
        Some("overlay"),
        mountpoint,
        Some("overlay"),
        nix::mount::MsFlags::MS_RDONLY,
        Some(format!("lowerdir={}", lowerdir.join(":")).as_str()),
    )
    .map_err(|e| podlab_ns::Error::sys("mount(overlay, read-only)", e))?;
    let mut links = HashMap::new();
    copy_tree(mountpoint, target, &mut links)
        .map_err(|e| podlab_ns::Error::io("copying the rootfs", target, e))
}

/// Copies a tree keeping modes, owners, symlinks, device nodes and hard links.
fn copy_tree(
    from: &Path,
    to: &Path,
    links: &mut HashMap<(u64, u64), PathBuf>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let source = entry.path();
        let dest = to.join(entry.file_name());
        let meta = std::fs::symlink_metadata(&source)?;
        let kind = meta.file_type();
        if kind.is_dir() {
            std::fs::create_dir(&dest)?;
            copy_tree(&source, &dest, links)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &dest)?;
        } else if kind.is_file() {
            if meta.nlink() > 1 {
                if let Some(first) = links.get(&(meta.dev(), meta.ino())) {
                    std::fs::hard_link(first, &dest)?;
                    continue;
                }
                links.insert((meta.dev(), meta.ino()), dest.clone());
            }
            std::fs::copy(&source, &dest)?;
        } else {
            nix::sys::stat::mknod(
                &dest,
                nix::sys::stat::SFlag::from_bits_truncate(meta.mode()),
                nix::sys::stat::Mode::from_bits_truncate(meta.mode()),
                meta.rdev(),
            )?;
        }
        std::os::unix::fs::lchown(&dest, Some(meta.uid()), Some(meta.gid()))?;
        if !kind.is_symlink() {
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        }
    }
    Ok(())
}
