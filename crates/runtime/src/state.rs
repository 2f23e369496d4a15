//! The runtime's state on disk, and who writes what.
//!
//! ```text
//! $PODLAB_ROOT/sandboxes/<sandbox id>/
//!     sandbox.json     config, metadata, Ready/NotReady, IP       (written by the library)
//!     shim.json        shim and pause identities, pinned namespaces (written by the shim)
//!     shim.pid         the shim's pid, for people and scripts        (written by the shim)
//!     shim.sock        the shim's request socket
//!     shim.log         the shim's own stderr
//!     lock             flock(2) taken by every library call that changes the sandbox
//!     ns/{uts,ipc,net,pid}  the pinned namespaces (nsfs bind mounts)
//!     shm/             the pod's /dev/shm (a tmpfs every container gets)
//!     hostname hosts resolv.conf   bind-mounted into every container
//!     containers/<container id>/
//!         container.json   config, resolved process, state, exit code (library at create, then the shim)
//!         upper/ work/     the container's overlay upper and work folders
//!         rootfs/          where its overlay is mounted (inside its own mount namespace only)
//!         container.log    its CRI log when the config names no other place
//! ```
//!
//! Every record is replaced atomically: written to a temporary file and renamed over the old
//! one, so a reader sees the old or the new record, never half of one, and a `kill -9` at any
//! moment loses nothing that was recorded (what a process wrote is the kernel's once `write`
//! returns). There is no fsync: these records describe processes, namespaces and mounts that a
//! power loss destroys anyway, which is why containerd keeps its state in /run (a tmpfs, where
//! fsync is free). On a disk-backed /run an fsync costs 1 to 16 ms, several times per pod.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use podlab_ns::NsKind;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::config::{ContainerConfig, PodSandboxConfig};
use crate::id::{ContainerId, SandboxId};
use crate::liveness::ProcessIdentity;
use crate::process::ProcessSpec;
use crate::status::{ContainerState, NetworkMode, PinnedNamespace, SandboxState};
use crate::{Error, Result};

/// The paths below the runtime's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn sandboxes_dir(&self) -> PathBuf {
        self.root.join("sandboxes")
    }

    pub fn sandbox(&self, id: &SandboxId) -> SandboxPaths {
        SandboxPaths::new(self.sandboxes_dir().join(id.as_str()))
    }

    /// The ids of every sandbox folder (including half-made or half-removed ones).
    pub fn sandbox_ids(&self) -> Result<Vec<SandboxId>> {
        list_ids(&self.sandboxes_dir(), |name| SandboxId::parse(name).ok())
    }
}

/// The files of one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPaths {
    pub dir: PathBuf,
}

impl SandboxPaths {
    pub fn new(dir: PathBuf) -> SandboxPaths {
        SandboxPaths { dir }
    }
    pub fn record(&self) -> PathBuf {
        self.dir.join("sandbox.json")
    }
    pub fn shim_record(&self) -> PathBuf {
        self.dir.join("shim.json")
    }
    pub fn shim_pid(&self) -> PathBuf {
        self.dir.join("shim.pid")
    }
    pub fn socket(&self) -> PathBuf {
        self.dir.join("shim.sock")
    }
    pub fn shim_log(&self) -> PathBuf {
        self.dir.join("shim.log")
    }
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
    pub fn ns_dir(&self) -> PathBuf {
        self.dir.join("ns")
    }
    pub fn ns(&self, kind: NsKind) -> PathBuf {
        self.ns_dir().join(kind.proc_name())
    }
    pub fn shm(&self) -> PathBuf {
        self.dir.join("shm")
    }
    pub fn hostname(&self) -> PathBuf {
        self.dir.join("hostname")
    }
    pub fn hosts(&self) -> PathBuf {
        self.dir.join("hosts")
    }
    pub fn resolv_conf(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }
    pub fn containers_dir(&self) -> PathBuf {
        self.dir.join("containers")
    }
    pub fn container(&self, id: &ContainerId) -> ContainerPaths {
        ContainerPaths {
            dir: self.containers_dir().join(id.as_str()),
        }
    }
    pub fn container_ids(&self) -> Result<Vec<ContainerId>> {
        list_ids(&self.containers_dir(), |name| ContainerId::parse(name).ok())
    }
}

/// The files of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPaths {
    pub dir: PathBuf,
}

impl ContainerPaths {
    pub fn record(&self) -> PathBuf {
        self.dir.join("container.json")
    }
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
    pub fn default_log(&self) -> PathBuf {
        self.dir.join("container.log")
    }
}

fn list_ids<T: Ord>(dir: &Path, parse: impl Fn(&str) -> Option<T>) -> Result<Vec<T>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("listing", dir, e)),
    };
    let mut ids: Vec<T> = entries
        .filter_map(|entry| parse(entry.ok()?.file_name().to_str()?))
        .collect();
    ids.sort();
    Ok(ids)
}

/// `sandbox.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: SandboxId,
    pub config: PodSandboxConfig,
    pub created_at: i64,
    /// Ready once made; NotReady after a stop.
    pub state: SandboxState,
    pub network_mode: NetworkMode,
    pub ips: Vec<String>,
    /// The network plugin's own words about the attachment, kept for its teardown.
    pub network_result: Option<serde_json::Value>,
    /// The pod's cgroup (the sandbox's own is its child named by the sandbox id).
    #[serde(default)]
    pub cgroup: Option<podlab_cgroups::Cgroup>,
}

/// `shim.json`: what the shim started, so that nothing it made is ever lost track of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimRecord {
    pub shim: ProcessIdentity,
    pub pause: Option<ProcessIdentity>,
    pub namespaces: Vec<PinnedNamespace>,
}

/// The image a container was created from, as resolved at create time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// The name as asked for.
    pub name: String,
    /// The image id (config digest).
    pub id: String,
    /// The read-only layer folders, top-most first, as overlayfs takes them.
    pub lowerdirs: Vec<PathBuf>,
}

/// `container.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: ContainerId,
    pub sandbox_id: SandboxId,
    pub config: ContainerConfig,
    pub image: ImageRecord,
    pub process: ProcessSpec,
    pub log_path: PathBuf,
    /// How it gets its pid namespace.
    pub pid_mode: PidMode,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    /// Created, Running or Exited (Unknown is never recorded, only derived).
    pub state: ContainerState,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub pid: Option<ProcessIdentity>,
    pub namespaces: BTreeMap<NsKind, u64>,
    /// How long each step of its start took (fork ... execve).
    #[serde(default)]
    pub start_trace: Vec<crate::report::StartStep>,
    /// Its cgroup, when the pod has one.
    #[serde(default)]
    pub cgroup: Option<podlab_cgroups::Cgroup>,
    /// The identity its process got, read from the kernel after its `execve`.
    #[serde(default)]
    pub user: Option<crate::process::LinuxUser>,
    /// The annotations NRI plugins see, once one of them changed them (the OCI spec's
    /// annotations in containerd, not the CRI's); None: the CRI's, as the config has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_annotations: Option<BTreeMap<String, String>>,
}

/// Where a container's processes are numbered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PidMode {
    /// A pid namespace of its own, the container's process its PID 1 (Kubernetes' default).
    Container,
    /// The pod's, whose PID 1 is the pause process (`shareProcessNamespace`).
    Pod,
    /// Another container's (ephemeral containers with a target).
    Target(ContainerId),
    /// The node's (`hostPID`): the shim's own pid namespace.
    Node,
}

/// Makes `dir` (and missing parents) 0700, as containerd keeps its state: the records hold env
/// values and the log and overlay folders are below. A `dir` that exists loses its group and
/// other bits: an older podlab made its state root and folders 0755, and containerd's fix of
/// the same flaw (CVE-2021-41103) chmods the folders it finds at start. Missing parents are
/// made 0700 too; existing parents are left as they are (they are not podlab's).
pub fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io("creating", dir, e))?;
    let mode = std::fs::metadata(dir)
        .map_err(|e| Error::io("reading", dir, e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        let private = std::fs::Permissions::from_mode(mode & 0o7700);
        std::fs::set_permissions(dir, private).map_err(|e| Error::io("chmod", dir, e))?;
    }
    Ok(())
}

/// The state root and its folders private ([`private_dir`]): the root and `sandboxes/` made
/// or tightened, `store/`, `logs/` and the image store tightened where they exist (an older
/// podlab left them 0755).
pub fn private_state(root: &Path, image_root: &Path) -> Result<()> {
    private_dir(root)?;
    private_dir(&root.join("sandboxes"))?;
    for dir in [
        root.join("store"),
        root.join("logs"),
        image_root.to_path_buf(),
    ] {
        if dir.is_dir() {
            private_dir(&dir)?;
        }
    }
    Ok(())
}

/// Replaces `path` with `bytes` atomically: temporary file, rename (see the module doc for why
/// without fsync).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{} has no file name", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        // 0600: records carry the containers' env values.
        let mut file = std::os::unix::fs::OpenOptionsExt::mode(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true),
            0o600,
        )
        .open(&tmp)
        .map_err(|e| Error::io("creating", &tmp, e))?;
        file.write_all(bytes)
            .map_err(|e| Error::io("writing", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::io("renaming into place", path, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// [`write_atomic`] of a record as pretty JSON.
pub fn write_record<T: Serialize>(path: &Path, record: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(record).map_err(|e| Error::State {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Reads a record; None when the file does not exist.
pub fn read_record<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading", path, e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::State {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// An exclusive flock(2) on a sandbox's lock file, held until dropped. The kernel drops it when
/// the holder dies, so a killed CLI never leaves a sandbox locked.
#[derive(Debug)]
pub struct SandboxLock {
    _file: File,
}

impl SandboxLock {
    /// Waits for the lock.
    pub fn acquire(path: &Path) -> Result<SandboxLock> {
        Self::take(path, false).map(|lock| lock.expect("a blocking flock always returns the lock"))
    }

    /// Takes the lock if nobody holds it; None if somebody does.
    pub fn try_acquire(path: &Path) -> Result<Option<SandboxLock>> {
        Self::take(path, true)
    }

    fn take(path: &Path, nonblocking: bool) -> Result<Option<SandboxLock>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("opening the lock file", path, e))?;
        let mut operation = libc::LOCK_EX;
        if nonblocking {
            operation |= libc::LOCK_NB;
        }
        loop {
            // SAFETY: flock on an fd we own.
            if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
                return Ok(Some(SandboxLock { _file: file }));
            }
            match nix::Error::last() {
                nix::Error::EINTR => continue,
                nix::Error::EWOULDBLOCK if nonblocking => return Ok(None),
                errno => return Err(Error::sys("flock", path.display(), errno)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ContainerMetadata, PodSandboxMetadata};

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "podlab-runtime-state-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn records_round_trip() {
        let dir = temp_dir("round-trip");
        let sandbox = SandboxRecord {
            id: SandboxId::generate(),
            config: PodSandboxConfig {
                metadata: PodSandboxMetadata {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u1".into(),
                    attempt: 2,
                },
                hostname: "web".into(),
                share_process_namespace: true,
                ..PodSandboxConfig::default()
            },
            created_at: 17,
            state: SandboxState::Ready,
            network_mode: NetworkMode::Pod,
            ips: vec!["10.88.0.2".into()],
            network_result: None,
            cgroup: None,
        };
        let path = dir.join("sandbox.json");
        write_record(&path, &sandbox).unwrap();
        assert_eq!(
            read_record::<SandboxRecord>(&path).unwrap().unwrap(),
            sandbox
        );

        let mut namespaces = BTreeMap::new();
        namespaces.insert(NsKind::Net, 4026531840);
        let container = ContainerRecord {
            id: ContainerId::generate(),
            sandbox_id: sandbox.id.clone(),
            config: ContainerConfig {
                metadata: ContainerMetadata {
                    name: "app".into(),
                    attempt: 1,
                },
                image: "busybox".into(),
                ..ContainerConfig::default()
            },
            image: ImageRecord::default(),
            process: ProcessSpec {
                argv: vec!["sh".into()],
                ..ProcessSpec::default()
            },
            log_path: dir.join("c.log"),
            pid_mode: PidMode::Target(ContainerId::generate()),
            created_at: 1,
            started_at: 2,
            finished_at: 3,
            state: ContainerState::Exited,
            exit_code: Some(3),
            reason: Some("Error".into()),
            message: None,
            pid: Some(ProcessIdentity {
                pid: 42,
                start_time: 99,
            }),
            namespaces,
            start_trace: vec![crate::report::StartStep {
                step: "execve".into(),
                nanos: 5,
            }],
            cgroup: None,
            user: Some(crate::process::LinuxUser {
                uid: 1000,
                gid: 1000,
                supplemental_groups: vec![1000, 50000],
            }),
            spec_annotations: Some(BTreeMap::from([("set.by/plugin".into(), "yes".into())])),
        };
        let path = dir.join("container.json");
        write_record(&path, &container).unwrap();
        assert_eq!(
            read_record::<ContainerRecord>(&path).unwrap().unwrap(),
            container
        );
        assert!(read_record::<ContainerRecord>(&dir.join("absent"))
            .unwrap()
            .is_none());
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "no temporary file stays behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_record_names_its_file() {
        let dir = temp_dir("corrupt");
        let path = dir.join("sandbox.json");
        std::fs::write(&path, b"{not json").unwrap();
        let err = read_record::<SandboxRecord>(&path).unwrap_err();
        assert!(err.to_string().contains("sandbox.json"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_lock_is_exclusive() {
        let dir = temp_dir("lock");
        let path = dir.join("lock");
        let held = SandboxLock::acquire(&path).unwrap();
        assert!(SandboxLock::try_acquire(&path).unwrap().is_none());
        drop(held);
        assert!(SandboxLock::try_acquire(&path).unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ids_are_listed_from_folders() {
        let dir = temp_dir("ids");
        let layout = Layout::new(&dir);
        assert!(layout.sandbox_ids().unwrap().is_empty());
        let id = SandboxId::generate();
        std::fs::create_dir_all(layout.sandbox(&id).dir).unwrap();
        std::fs::create_dir_all(layout.sandboxes_dir().join("not-an-id")).unwrap();
        assert_eq!(layout.sandbox_ids().unwrap(), vec![id]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
