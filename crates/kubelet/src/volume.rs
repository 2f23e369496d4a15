//! A pod's volumes and log folder on the node, as kubelet's volume manager and its plugins set
//! them up (`pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`) and tear them down.
//!
//! Nothing here is reachable by other host users: the pod folder and its `volumes` folder are
//! 0750 (kubelet's modes) under podlab's 0700 root, the log folders 0750 under a 0700 `logs`.
//! An `emptyDir` is 0777 inside, as kubelet makes it, so that a container running as any user
//! can write to it; `medium: Memory` is a tmpfs of `sizeLimit` bytes. A `hostPath` is checked
//! against its `type` (and made, for the `…OrCreate` types) with kubelet's messages.
//!
//! configMap, secret and downwardAPI volumes are emptyDirs underneath, as kubelet wraps them
//! (the secret and downwardAPI ones on a tmpfs), their files written by kubelet's atomic writer
//! ([`crate::atomic_writer`]: a timestamped folder behind `..data`). With a pod `fsGroup`, each
//! volume gets that group the first time it is made, and the projected ones again at each new
//! write ([`crate::ownership`]).

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ImageVolumeSource, Pod, Volume};

use crate::translate::PodDirs;

/// kubelet's folder modes: `/var/lib/kubelet/pods`, `pods/<uid>`, `pods/<uid>/volumes`.
pub(crate) const POD_DIR_MODE: u32 = 0o750;
/// The folder of all pods' logs: for root only (kubelet's `/var/log/pods` is under podlab's root).
const LOGS_ROOT_MODE: u32 = 0o700;
/// An emptyDir, as kubelet's plugin makes it (`perm = 0777`, chmod'ed past the umask).
const EMPTY_DIR_MODE: u32 = 0o777;

pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";
pub const CONFIG_MAP_PLUGIN: &str = "kubernetes.io~configmap";
pub const SECRET_PLUGIN: &str = "kubernetes.io~secret";
pub const DOWNWARD_API_PLUGIN: &str = "kubernetes.io~downward-api";
/// kubelet's `defaultMode` of configMap and secret volume files.
const DEFAULT_FILE_MODE: i32 = 0o644;

/// Why a volume could not be set up (kubelet's `MountVolume.SetUp failed`).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Mount(#[from] podlab_ns::Error),
    /// A ConfigMap or Secret that is not there (`configmap "x" not found`), or a key of an
    /// item that it lacks (`configmap references non-existent config key: k`).
    #[error("{0}")]
    Object(String),
    /// kubelet's `checkType` message (`hostPath type check failed: /x is not a directory`).
    #[error("hostPath type check failed: {path} is not {what}")]
    HostPathType { path: String, what: &'static str },
}

/// What [`set_up`] could not do.
#[derive(Debug, thiserror::Error)]
pub enum SetUpError {
    #[error("making the pod's folders: {0}")]
    PodDirs(VolumeError),
    /// Worded as kubelet's `FailedMount` event.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {source}")]
    Volume { volume: String, source: VolumeError },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError {
    let path = path.to_path_buf();
    move |source| VolumeError::Io { what, path, source }
}

/// `dir` and missing parents with `mode` (an existing folder keeps its own).
fn make_dir(dir: &Path, mode: u32) -> Result<(), VolumeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(io("creating", dir))
}

/// The pod's folder: `root/pods/<uid>`.
pub fn pod_dir(dirs: &PodDirs) -> &Path {
    dirs.volumes.parent().unwrap_or(&dirs.volumes)
}

/// The pod's log folder (and podlab's `logs` folder above it) with their modes.
pub fn make_log_dir(dirs: &PodDirs) -> Result<(), VolumeError> {
    if let Some(logs_root) = dirs.logs.parent() {
        make_dir(logs_root, LOGS_ROOT_MODE)?;
    }
    make_dir(&dirs.logs, POD_DIR_MODE)
}

/// A container's log folder inside the pod's.
pub fn make_container_log_dir(dirs: &PodDirs, container: &str) -> Result<(), VolumeError> {
    make_log_dir(dirs)?;
    make_dir(&dirs.logs.join(container), POD_DIR_MODE)
}

/// Sets up the pod's folders and every volume, in spec order; the first failure is returned
/// (the pod is retried, as kubelet's volume manager retries).
pub fn set_up(
    pod: &Pod,
    dirs: &PodDirs,
    objects: &dyn crate::env::ConfigSource,
) -> Result<(), SetUpError> {
    let whole_pod = SetUpError::PodDirs;
    make_log_dir(dirs).map_err(whole_pod)?;
    let pod_dir = pod_dir(dirs);
    if let Some(pods) = pod_dir.parent() {
        make_dir(pods, POD_DIR_MODE).map_err(whole_pod)?;
    }
    make_dir(pod_dir, POD_DIR_MODE).map_err(whole_pod)?;
    make_dir(&dirs.volumes, POD_DIR_MODE).map_err(whole_pod)?;
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        set_up_volume(volume, pod, dirs, objects).map_err(|source| SetUpError::Volume {
            volume: volume.name.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The pod's `spec.securityContext.fsGroup`.
fn fs_group(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()?
        .security_context
        .as_ref()?
        .fs_group
        .map(|g| g as u32)
}

fn set_up_volume(
    volume: &Volume,
    pod: &Pod,
    dirs: &PodDirs,
    objects: &dyn crate::env::ConfigSource,
) -> Result<(), VolumeError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let fs_group = fs_group(pod);
    if let Some(source) = &volume.downward_api {
        let dir = dirs.volumes.join(DOWNWARD_API_PLUGIN).join(&volume.name);
        let default_mode = source.default_mode.unwrap_or(DEFAULT_FILE_MODE);
        let payload = downward_api_payload(pod, dirs, source.items.iter().flatten(), default_mode)?;
        return write_projected(&dir, payload, true, fs_group);
    }
    if let Some(source) = &volume.config_map {
        let dir = dirs.volumes.join(CONFIG_MAP_PLUGIN).join(&volume.name);
        let data = match objects
            .config_map(namespace, &source.name)
            .map_err(VolumeError::Object)?
        {
            Some(map) => map
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .chain(
                    map.binary_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0)),
                )
                .collect(),
            None if source.optional == Some(true) => Default::default(),
            None => {
                return Err(VolumeError::Object(format!(
                    "configmap {:?} not found",
                    source.name
                )))
            }
        };
        let items = source
            .items
            .iter()
            .flatten()
            .map(|i| (&i.key, &i.path, i.mode));
        let files = project(data, items, source.optional == Some(true), "configmap")?;
        let payload = payload_of(files, source.default_mode.unwrap_or(DEFAULT_FILE_MODE));
        return write_projected(&dir, payload, false, fs_group);
    }
    if let Some(source) = &volume.secret {
        let dir = dirs.volumes.join(SECRET_PLUGIN).join(&volume.name);
        let name = source.secret_name.clone().unwrap_or_default();
        let data = match objects
            .secret(namespace, &name)
            .map_err(VolumeError::Object)?
        {
            Some(secret) => secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
            None if source.optional == Some(true) => Default::default(),
            None => return Err(VolumeError::Object(format!("secret {name:?} not found"))),
        };
        let items = source
            .items
            .iter()
            .flatten()
            .map(|i| (&i.key, &i.path, i.mode));
        let files = project(data, items, source.optional == Some(true), "secret")?;
        let payload = payload_of(files, source.default_mode.unwrap_or(DEFAULT_FILE_MODE));
        return write_projected(&dir, payload, true, fs_group);
    }
    if let Some(empty_dir) = &volume.empty_dir {
        let dir = dirs.empty_dir(&volume.name);
        let memory = empty_dir.medium.as_deref() == Some("Memory");
        let size = empty_dir
            .size_limit
            .as_ref()
            .and_then(|q| podlab_api::quantity::bytes(&q.0))
            .filter(|n| *n > 0);
        set_up_empty_dir(&dir, memory, size, fs_group)?;
    }
    if let Some(host_path) = &volume.host_path {
        check_host_path(Path::new(&host_path.path), host_path.type_.as_deref())?;
    }
    Ok(())
}

/// A projected volume's file: its path in the volume, its bytes and its mode, if given.
type ProjectedFile = (String, Vec<u8>, Option<i32>);

/// The files of a configMap or secret volume: every key, or only the `items` (key → path, own
/// mode); a missing item key is an error unless the volume is optional.
fn project<'a>(
    mut data: std::collections::BTreeMap<String, Vec<u8>>,
    items: impl Iterator<Item = (&'a String, &'a String, Option<i32>)>,
    optional: bool,
    kind: &str,
) -> Result<Vec<ProjectedFile>, VolumeError> {
    let items: Vec<_> = items.collect();
    if items.is_empty() {
        return Ok(data.into_iter().map(|(k, v)| (k, v, None)).collect());
    }
    let mut files = Vec::new();
    for (key, path, mode) in items {
        match data.remove(key) {
            Some(bytes) => files.push((path.clone(), bytes, mode)),
            None if optional => {}
            None => {
                return Err(VolumeError::Object(format!(
                    "{kind} references non-existent config key: {key}"
                )))
            }
        }
    }
    Ok(files)
}

/// kubelet's emptyDir `SetUpAt`: nothing to do when it is there already (a tmpfs mounted);
/// else the folder 0777 (chmod'ed past the umask), a tmpfs of `size` bytes (the kernel's
/// default of half the memory without one; its root is 1777) for `memory`, and the pod's
/// fsGroup over it, writable.
fn set_up_empty_dir(
    dir: &Path,
    memory: bool,
    size: Option<i128>,
    fs_group: Option<u32>,
) -> Result<(), VolumeError> {
    make_dir(dir.parent().unwrap_or(dir), POD_DIR_MODE)?;
    let ready = if memory {
        podlab_ns::mnt::is_mountpoint(dir).unwrap_or(false)
    } else {
        dir.is_dir()
    };
    if ready {
        return Ok(());
    }
    make_dir(dir, EMPTY_DIR_MODE)?;
    let perm = std::fs::metadata(dir)
        .map_err(io("reading", dir))?
        .permissions()
        .mode();
    if perm & 0o777 != EMPTY_DIR_MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(EMPTY_DIR_MODE))
            .map_err(io("chmod", dir))?;
    }
    if memory {
        let options = size.map(|n| format!("size={n}")).unwrap_or_default();
        podlab_ns::mnt::mount_tmpfs(dir, &options)?;
    }
    crate::ownership::set_volume_ownership(dir, fs_group, None, false)?;
    Ok(())
}

/// The files of a configMap or secret volume as the writer's payload, each with its item's
/// mode or the volume's `defaultMode`.
fn payload_of(files: Vec<ProjectedFile>, default_mode: i32) -> crate::atomic_writer::Payload {
    files
        .into_iter()
        .map(|(path, data, mode)| {
            let mode = (mode.unwrap_or(default_mode) & 0o777) as u32;
            (path, crate::atomic_writer::FileProjection { data, mode })
        })
        .collect()
}

/// A configMap, secret or downwardAPI volume: the wrapped emptyDir (a tmpfs for `in_memory`,
/// as kubelet keeps secrets and the downward API off the disk), then the payload through the
/// atomic writer, the pod's fsGroup applied (read-only) before the new files become visible.
fn write_projected(
    dir: &Path,
    payload: crate::atomic_writer::Payload,
    in_memory: bool,
    fs_group: Option<u32>,
) -> Result<(), VolumeError> {
    set_up_empty_dir(dir, in_memory, None, fs_group)?;
    crate::atomic_writer::write(dir, &payload, |volume| {
        crate::ownership::set_volume_ownership(volume, fs_group, None, true).map(drop)
    })?;
    Ok(())
}

/// kubelet's downwardAPI `CollectData`: each item's field (`metadata.*`, its lines sorted) or
/// a container's resource (with its divisor), with the item's mode or the `defaultMode`.
fn downward_api_payload<'a>(
    pod: &Pod,
    dirs: &PodDirs,
    items: impl Iterator<Item = &'a k8s_openapi::api::core::v1::DownwardAPIVolumeFile>,
    default_mode: i32,
) -> Result<crate::atomic_writer::Payload, VolumeError> {
    let facts = crate::env::PodRuntimeFacts::of_this_node(Vec::new(), String::new())
        .with_node_fs(&dirs.volumes);
    let mut payload = crate::atomic_writer::Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            crate::env::field_value(pod, field, &facts).map(|v| sort_lines(&v))
        } else if let Some(field) = &item.resource_field_ref {
            let name = field.container_name.as_deref().unwrap_or("");
            let spec = pod.spec.as_ref();
            let container = spec
                .into_iter()
                .flat_map(|s| {
                    s.containers
                        .iter()
                        .chain(s.init_containers.iter().flatten())
                })
                .find(|c| c.name == name);
            match container {
                Some(container) => {
                    let container = crate::env::with_pod_limits(pod, container);
                    crate::env::resource_value(&container, field, &facts)
                }
                None => Err(format!("container {name} not found")),
            }
        } else {
            Ok(String::new())
        };
        match value {
            Ok(value) => {
                let mode = (item.mode.unwrap_or(default_mode) & 0o777) as u32;
                let file = crate::atomic_writer::FileProjection {
                    data: value.into_bytes(),
                    mode,
                };
                payload.insert(item.path.clone(), file);
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(VolumeError::Object(errors.join(", ")));
    }
    Ok(payload)
}

/// kubelet's `sortLines`: the lines of a map's text (labels, annotations) in byte order.
fn sort_lines(text: &str) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.sort_unstable();
    lines.join("\n")
}

/// kubelet's hostPath `checkType`: the `…OrCreate` types make what is missing (a folder 0755
/// with its parents, an empty file 0644), then every type checks what is there.
pub fn check_host_path(path: &Path, kind: Option<&str>) -> Result<(), VolumeError> {
    let kind = kind.unwrap_or("");
    let meta = std::fs::metadata(path).ok();
    let not = |what| VolumeError::HostPathType {
        path: path.display().to_string(),
        what,
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" if meta.is_none() => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
            .map_err(io("creating", path)),
        "FileOrCreate" if meta.is_none() => std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map(drop)
            .map_err(io("creating", path)),
        "DirectoryOrCreate" | "Directory" => match meta {
            Some(m) if m.is_dir() => Ok(()),
            _ => Err(not("a directory")),
        },
        "FileOrCreate" | "File" => match meta {
            Some(m) if m.is_file() => Ok(()),
            _ => Err(not("a file")),
        },
        "Socket" => match meta {
            Some(m) if m.file_type().is_socket() => Ok(()),
            _ => Err(not("a socket file")),
        },
        "CharDevice" => match meta {
            Some(m) if m.file_type().is_char_device() => Ok(()),
            _ => Err(not("a character device")),
        },
        "BlockDevice" => match meta {
            Some(m) if m.file_type().is_block_device() => Ok(()),
            _ => Err(not("a block device")),
        },
        // Validation refuses other types; kubelet's wording if one got here anyway.
        other => Err(VolumeError::Io {
            what: "checking",
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("{other} is an invalid volume type")),
        }),
    }
}

/// Unmounts what the pod's volumes mounted (tmpfs emptyDirs), deepest first, then removes the
/// pod's folder and its log folder (never anything outside `root`).
pub fn tear_down(root: &Path, dirs: &PodDirs) {
    let pod_dir = pod_dir(dirs).to_path_buf();
    if pod_dir.starts_with(root) && pod_dir != root {
        unmount_below(&pod_dir);
    }
    for dir in [pod_dir, dirs.logs.clone()] {
        if dir.starts_with(root) && dir != root {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => eprintln!("podlab node: removing {}: {e}", dir.display()),
            }
        }
    }
}

/// Detaches every mount at or below `dir`, deepest first.
pub fn unmount_below(dir: &Path) {
    let Ok(mut mounts) = podlab_ns::mnt::mounts_below(dir) else {
        return;
    };
    mounts.sort_by_key(|m| std::cmp::Reverse(m.mount_point.components().count()));
    for m in mounts {
        if let Err(e) = podlab_ns::mnt::unmount(&m.mount_point) {
            eprintln!("podlab node: {e}");
        }
    }
}

/// configMap, secret and downwardAPI volumes are mounted read-only whatever the mount says, as kubelet has
/// done since CVE-2017-1002102 (a container writing them could make the kubelet delete host
/// files).
pub fn always_read_only(pod: &Pod, name: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .find(|v| v.name == name)
        .is_some_and(|v| v.config_map.is_some() || v.secret.is_some() || v.downward_api.is_some())
}

/// Volume `name` of `pod`'s image source when it is an image volume (the OCI volume source:
/// the runtime mounts the image's content read-only).
pub fn image_of<'p>(pod: &'p Pod, name: &str) -> Option<&'p ImageVolumeSource> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .find(|v| v.name == name)?
        .image
        .as_ref()
}

/// The host path of volume `name` of `pod` (None when the pod has no such volume, or it is an
/// image volume, which has none).
pub fn host_path_of(pod: &Pod, dirs: &PodDirs, name: &str) -> Option<PathBuf> {
    let volume = pod
        .spec
        .as_ref()?
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)?;
    if let Some(host_path) = &volume.host_path {
        return Some(PathBuf::from(&host_path.path));
    }
    if volume.image.is_some() {
        return None;
    }
    if volume.config_map.is_some() {
        return Some(dirs.volumes.join(CONFIG_MAP_PLUGIN).join(name));
    }
    if volume.secret.is_some() {
        return Some(dirs.volumes.join(SECRET_PLUGIN).join(name));
    }
    if volume.downward_api.is_some() {
        return Some(dirs.volumes.join(DOWNWARD_API_PLUGIN).join(name));
    }
    Some(dirs.empty_dir(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_path_types_are_checked_with_kubelets_messages() {
        let dir = std::env::temp_dir().join(format!("podlab-hostpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, "x").unwrap();
        let msg = |p: &Path, k: &str| check_host_path(p, Some(k)).unwrap_err().to_string();
        assert_eq!(
            msg(&file, "Directory"),
            format!(
                "hostPath type check failed: {} is not a directory",
                file.display()
            )
        );
        assert_eq!(
            msg(&dir, "File"),
            format!(
                "hostPath type check failed: {} is not a file",
                dir.display()
            )
        );
        assert!(msg(&file, "Socket").ends_with("is not a socket file"));
        assert!(msg(&file, "CharDevice").ends_with("is not a character device"));
        assert!(msg(&file, "BlockDevice").ends_with("is not a block device"));
        assert!(msg(&dir.join("missing"), "Directory").ends_with("is not a directory"));
        check_host_path(Path::new("/dev/null"), Some("CharDevice")).unwrap();

        let made = dir.join("a/b");
        check_host_path(&made, Some("DirectoryOrCreate")).unwrap();
        let meta = std::fs::metadata(&made).unwrap();
        assert!(meta.is_dir());
        let made_file = dir.join("new");
        check_host_path(&made_file, Some("FileOrCreate")).unwrap();
        assert!(std::fs::metadata(&made_file).unwrap().is_file());
        assert!(msg(&file, "DirectoryOrCreate").ends_with("is not a directory"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
