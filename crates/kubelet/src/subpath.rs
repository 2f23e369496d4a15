//! `volumeMounts[*].subPath` and `subPathExpr` with kubelet's guard against a symlink in the
//! volume that leads out of it (CVE-2017-1002101).
//!
//! A container can put a symlink in a shared volume (`ln -s / /vol/escape`); the next container
//! that mounts `subPath: escape` would otherwise get the host's `/` bind-mounted. As kubelet's
//! `PrepareSafeSubpath`: the path is resolved and must stay inside the volume, then it is opened
//! one component at a time with `O_PATH|O_NOFOLLOW` from the volume's root (a symlink swapped in
//! meanwhile is refused, never followed), and the container gets a bind mount of that
//! descriptor (`/proc/<pid>/fd/<n>`), so what is mounted is exactly what was checked. A missing
//! subpath is made the same way, with the volume's mode, as kubelet's `SafeMakeDir`.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, VolumeMount};
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};
use podlab_runtime::config::ContainerConfig;

use crate::translate::PodDirs;

/// Why a subpath was refused (logged; the user sees kubelet's terse message, which names no
/// host path).
#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    #[error("subpath {path:?} not within volume path {volume:?}")]
    NotWithin { path: PathBuf, volume: PathBuf },
    #[error("{path}: is a symlink (not followed in a subpath)")]
    Symlink { path: PathBuf },
    #[error("{syscall} {path}: {errno}")]
    Sys {
        syscall: &'static str,
        path: PathBuf,
        errno: nix::Error,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("unable to expand subPathExpr {expr:?}: {why}")]
    Expand { expr: String, why: &'static str },
}

fn sys(syscall: &'static str, path: &Path) -> impl FnOnce(nix::Error) -> SubPathError {
    let path = path.to_path_buf();
    move |errno| SubPathError::Sys {
        syscall,
        path,
        errno,
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SubPathError {
    let path = path.to_path_buf();
    move |source| SubPathError::Io { what, path, source }
}

/// Descriptors of the subpaths a container mounts; they must stay open until the runtime has
/// made the container's mounts (its `start_container` returned).
#[derive(Debug, Default)]
pub struct Held(Vec<OwnedFd>);

/// Replaces the host path of every mount of container `name` that has a subpath by the safely
/// opened descriptor's `/proc/<pid>/fd/<n>`. Errors are kubelet's
/// `failed to prepare subPath for volumeMount "v" of container "c"` (the detail goes to the log).
pub fn prepare(
    pod: &Pod,
    dirs: &PodDirs,
    name: &str,
    config: &mut ContainerConfig,
) -> Result<Held, String> {
    let mut held = Held::default();
    let mounts = volume_mounts(pod, name);
    let env: BTreeMap<&str, &str> = config
        .env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_str()))
        .collect();
    for (mount, target) in mounts.iter().zip(config.mounts.iter_mut()) {
        let refused = |e: SubPathError| {
            eprintln!(
                "podlab node: container {name:?}, volumeMount {:?}: {e}",
                mount.name
            );
            format!(
                "failed to prepare subPath for volumeMount {:?} of container {name:?}",
                mount.name
            )
        };
        let sub = match sub_path(mount, &env) {
            Ok(Some(sub)) => sub,
            Ok(None) => continue,
            Err(e) => return Err(refused(e)),
        };
        if let Some(image) = &mut target.image {
            // kubelet's `image_sub_path`: the runtime opens it inside the image.
            image.sub_path = sub;
            continue;
        }
        let Some(volume) = crate::volume::host_path_of(pod, dirs, &mount.name) else {
            continue;
        };
        let fd = open_beneath(&volume, Path::new(&sub)).map_err(refused)?;
        target.host_path = PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            fd.as_raw_fd()
        ));
        held.0.push(fd);
    }
    Ok(held)
}

/// The container's volumeMounts, in the order `translate` made its mounts.
pub(crate) fn volume_mounts(pod: &Pod, name: &str) -> Vec<VolumeMount> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let regular = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c| c.name == name)
        .map(|c| c.volume_mounts.clone());
    let ephemeral = || {
        spec.ephemeral_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .map(|c| c.volume_mounts.clone())
    };
    regular.or_else(ephemeral).flatten().unwrap_or_default()
}

/// The mount's subpath: `subPath`, or `subPathExpr` with `$(VAR)` expanded from the container's
/// env (kubelet's `ExpandContainerVolumeMounts`); None without either.
pub fn sub_path(
    mount: &VolumeMount,
    env: &BTreeMap<&str, &str>,
) -> Result<Option<String>, SubPathError> {
    if let Some(sub) = mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
        return Ok(Some(sub.to_string()));
    }
    let Some(expr) = mount.sub_path_expr.as_deref().filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let expanded = crate::translate::expand(expr, env);
    let bad = |why| SubPathError::Expand {
        expr: expr.to_string(),
        why,
    };
    if expanded.starts_with('/') {
        return Err(bad("the expanded path must be relative"));
    }
    if expanded.split('/').any(|part| part == "..") {
        return Err(bad("the expanded path must not contain '..'"));
    }
    Ok(Some(expanded))
}

fn open_path(dir: &impl AsFd, part: &Path, shown: &Path) -> Result<OwnedFd, SubPathError> {
    let fd = nix::fcntl::openat(
        dir,
        part,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(sys("openat(O_NOFOLLOW)", shown))?;
    let stat = nix::sys::stat::fstat(&fd).map_err(sys("fstat", shown))?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK {
        return Err(SubPathError::Symlink {
            path: shown.to_path_buf(),
        });
    }
    Ok(fd)
}

/// `volume/sub` opened without following any symlink from the volume's root, after checking
/// that its resolved path stays inside the volume; a missing subpath is made first.
pub fn open_beneath(volume: &Path, sub: &Path) -> Result<OwnedFd, SubPathError> {
    let base = std::fs::canonicalize(volume).map_err(io("realpath", volume))?;
    let full = base.join(sub);
    if std::fs::symlink_metadata(&full).is_err() {
        make_dir_beneath(&base, sub)?;
    }
    let resolved = std::fs::canonicalize(&full).map_err(io("realpath", &full))?;
    let Ok(relative) = resolved.strip_prefix(&base) else {
        return Err(SubPathError::NotWithin {
            path: resolved,
            volume: base,
        });
    };
    let mut fd = nix::fcntl::open(
        &base,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(sys("open(O_NOFOLLOW)", &base))?;
    let mut shown = base.clone();
    for part in relative.components() {
        let Component::Normal(part) = part else {
            continue;
        };
        shown.push(part);
        fd = open_path(&fd, Path::new(part), &shown)?;
    }
    Ok(fd)
}

/// kubelet's `SafeMakeDir`: the missing folders of `sub` made one by one below `base`, each
/// opened with `O_NOFOLLOW` before going on, with the volume's mode.
fn make_dir_beneath(base: &Path, sub: &Path) -> Result<(), SubPathError> {
    let perm = std::fs::metadata(base)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755);
    let mut fd = nix::fcntl::open(
        base,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(sys("open(O_NOFOLLOW)", base))?;
    let mut shown = base.to_path_buf();
    for part in sub.components() {
        let Component::Normal(part) = part else {
            continue;
        };
        shown.push(part);
        let part = Path::new(part);
        match nix::sys::stat::mkdirat(&fd, part, Mode::from_bits_truncate(perm)) {
            Ok(()) => {
                // Past the umask, as kubelet chmods after MkdirAll.
                let made = open_path(&fd, part, &shown)?;
                let proc_path = format!("/proc/self/fd/{}", made.as_raw_fd());
                std::fs::set_permissions(&proc_path, std::fs::Permissions::from_mode(perm))
                    .map_err(io("chmod", &shown))?;
                fd = made;
            }
            Err(nix::Error::EEXIST) => fd = open_path(&fd, part, &shown)?,
            Err(errno) => return Err(sys("mkdirat", &shown)(errno)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch folder (removed on drop) with `vol/real` and `outside` in it.
    fn volume() -> podlab_ns::mnt::Scratch {
        let tmp = podlab_ns::mnt::Scratch::new("podlab-subpath-").unwrap();
        std::fs::create_dir_all(tmp.path().join("vol/real")).unwrap();
        std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
        tmp
    }

    #[test]
    fn a_symlink_out_of_the_volume_is_refused_and_one_inside_is_followed() {
        let tmp = volume();
        let vol = tmp.path().join("vol");
        std::os::unix::fs::symlink("/etc", vol.join("escape")).unwrap();
        std::os::unix::fs::symlink("../outside", vol.join("up")).unwrap();
        std::os::unix::fs::symlink("real", vol.join("inside")).unwrap();
        for sub in ["escape", "escape/passwd", "up"] {
            let err = open_beneath(&vol, Path::new(sub)).unwrap_err();
            assert!(
                matches!(err, SubPathError::NotWithin { .. }),
                "{sub}: {err}"
            );
        }
        let fd = open_beneath(&vol, Path::new("inside")).unwrap();
        let at = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        assert_eq!(at, std::fs::canonicalize(vol.join("real")).unwrap());
    }

    #[test]
    fn a_missing_subpath_is_made_with_the_volumes_mode() {
        let tmp = volume();
        let vol = tmp.path().join("vol");
        std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o777)).unwrap();
        let fd = open_beneath(&vol, Path::new("a/b")).unwrap();
        let made = vol.join("a/b");
        assert_eq!(
            std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap(),
            std::fs::canonicalize(&made).unwrap()
        );
        for dir in [vol.join("a"), made] {
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o777, "{}", dir.display());
        }
    }

    #[test]
    fn sub_path_expr_expands_the_containers_env() {
        let mount: VolumeMount = serde_json::from_value(
            serde_json::json!({"name": "v", "mountPath": "/x", "subPathExpr": "logs/$(POD)"}),
        )
        .unwrap();
        let env = BTreeMap::from([("POD", "web-1")]);
        assert_eq!(
            sub_path(&mount, &env).unwrap().as_deref(),
            Some("logs/web-1")
        );
        let env = BTreeMap::from([("POD", "../..")]);
        assert!(sub_path(&mount, &env).is_err());
    }
}
