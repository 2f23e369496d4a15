//! [`Runtime`]: the CRI RuntimeService, as a library. Its methods run in the caller's process
//! (the kubelet layer, the CLI); the long-lived parts live in each pod's shim, reached over its
//! socket, and in the state files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::RuntimeConfig;
use crate::id::{resolve_prefix, ContainerId, SandboxId};
use crate::image::{ImageService, StoreImages};
use crate::network::NetworkPlugin;
use crate::protocol::ShimClient;
use crate::record_cache::RecordCache;
use crate::state::{Layout, SandboxPaths, ShimRecord};
use crate::{Error, Result};

/// The runtime: state under a root folder, images from an image service, an optional network
/// plugin. Cheap to open; every method reads the state it needs, so several processes may use
/// the same root at once (changes to a sandbox are serialised by its lock).
pub struct Runtime {
    pub(crate) config: RuntimeConfig,
    pub(crate) layout: Layout,
    pub(crate) images: Arc<dyn ImageService>,
    pub(crate) network: Option<Arc<dyn NetworkPlugin>>,
    /// The namespace containers are made from, when the caller asked for one.
    pub(crate) mount_template: Option<crate::mount_template::MountTemplate>,
    /// The node's cgroups (None: pods get none).
    pub(crate) cgroups: Option<crate::cgroups::NodeCgroups>,
    /// The process that empties the trash after removals answered (None: they empty it
    /// themselves); see [`crate::trash`].
    pub(crate) cleaner: Option<crate::trash::Cleaner>,
    /// Whether a removal leaves the node's cgroup folders above a pod's
    /// ([`Runtime::keep_node_cgroups`]).
    pub(crate) keep_node_cgroups: std::sync::atomic::AtomicBool,
    /// Where a pod without a network plugin may find a network namespace made ahead
    /// ([`Runtime::set_empty_netns_source`]).
    pub(crate) empty_netns: Option<Box<EmptyNetnsSource>>,
    /// The sandbox each container was found in ([`Runtime::sandbox_of`]).
    sandboxes_of: std::sync::Mutex<HashMap<ContainerId, SandboxId>>,
    /// `container.json`, `shim.json` and `sandbox.json` as last read
    /// ([`crate::record_cache`]).
    pub(crate) container_records: RecordCache<crate::state::ContainerRecord>,
    pub(crate) shim_records: RecordCache<ShimRecord>,
    pub(crate) sandbox_records: RecordCache<crate::state::SandboxRecord>,
    /// Shims and pause processes found running, kept as pidfds ([`crate::live_processes`]).
    pub(crate) live: crate::live_processes::LiveProcesses,
}

/// See [`Runtime::set_empty_netns_source`].
pub type EmptyNetnsSource = dyn Fn() -> Option<std::os::fd::OwnedFd> + Send + Sync;

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.config)
            .field(
                "network",
                &self.network.as_ref().map(|n| n.name().to_string()),
            )
            .finish()
    }
}

impl Runtime {
    /// Opens the runtime on `config.root` (made if missing) with podlab-image's store at
    /// `config.image_root`.
    pub fn open(config: RuntimeConfig) -> Result<Runtime> {
        let images = StoreImages::open(&config.image_root)?;
        Runtime::with_images(config, Arc::new(images))
    }

    /// [`Runtime::open`] with another image service.
    pub fn with_images(
        mut config: RuntimeConfig,
        images: Arc<dyn ImageService>,
    ) -> Result<Runtime> {
        crate::state::private_state(&config.root, &config.image_root)?;
        // Absolute and free of symlinks: the paths go into mount tables and command lines,
        // where gc looks for them.
        config.root = std::fs::canonicalize(&config.root)
            .map_err(|e| Error::io("resolving", &config.root, e))?;
        let layout = Layout::new(&config.root);
        let cgroups = crate::cgroups::NodeCgroups::detect(&config.root);
        Ok(Runtime {
            config,
            layout,
            images,
            network: None,
            mount_template: None,
            cgroups,
            cleaner: None,
            keep_node_cgroups: Default::default(),
            empty_netns: None,
            sandboxes_of: Default::default(),
            container_records: Default::default(),
            shim_records: Default::default(),
            sandbox_records: Default::default(),
            live: Default::default(),
        })
    }

    /// The USER of an image's config (empty: root), which kubelet reads from the image's
    /// status for its runAsNonRoot check.
    pub fn image_user(&self, image: &str) -> Result<String> {
        Ok(self.images.resolve(image)?.process.user)
    }

    /// Makes containers from a small mount namespace of their own (see
    /// [`crate::mount_template`]) instead of a copy of the node's: for a long-lived caller on a
    /// node with many mounts. When it cannot be made, containers are made as before.
    pub fn use_mount_template(&mut self) -> Result<()> {
        let shim = self.helper("podlab-shim")?;
        self.mount_template = Some(crate::mount_template::MountTemplate::make(
            &shim,
            &self.config.root,
        )?);
        Ok(())
    }

    /// For pods without a network plugin (`lo` only): `source` may hand over a network
    /// namespace made ahead, with nothing in it but `lo`, up (as
    /// `podlab_ns::net::new_held` makes it); pause joins it instead of making one, and it is
    /// pinned and torn down as any pod's. None from `source`: the pod makes its own.
    pub fn set_empty_netns_source(&mut self, source: Box<EmptyNetnsSource>) {
        self.empty_netns = Some(source);
    }

    /// Sets the plugin that attaches pods to a network (CNI).
    pub fn set_network_plugin(&mut self, plugin: Arc<dyn NetworkPlugin>) {
        self.network = Some(plugin);
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The node's cgroups, when pods get them.
    pub fn cgroups(&self) -> Option<&crate::cgroups::NodeCgroups> {
        self.cgroups.as_ref()
    }

    /// From now on, removing a pod's last cgroup leaves the node's folders above it (podlab's
    /// root, `kubepods`, the QoS folder) in place, as kubelet keeps them, for the next pod to
    /// find made; [`Runtime::remove_node_cgroups_if_empty`] removes them. For a one-shot
    /// command whose caller removes them a moment later (see `podlab run --rm`).
    pub fn keep_node_cgroups(&self, keep: bool) {
        self.keep_node_cgroups
            .store(keep, std::sync::atomic::Ordering::Relaxed);
    }

    /// Removes the node's cgroup folders that no pod uses any more (see
    /// [`crate::cgroups::NodeCgroups::remove_node_folders_if_empty`]).
    pub fn remove_node_cgroups_if_empty(&self) {
        if let Some(node) = &self.cgroups {
            node.remove_node_folders_if_empty();
        }
    }

    /// How far up a pod's removal prunes the folders it leaves empty.
    pub(crate) fn pruned_above_pod(&self) -> crate::cgroups::Prune {
        match self
            .keep_node_cgroups
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            true => crate::cgroups::Prune::PodOnly,
            false => crate::cgroups::Prune::UpToRoot,
        }
    }

    pub(crate) fn helper(&self, name: &str) -> Result<PathBuf> {
        helper_path(&self.config.helper_dir, name)
    }

    /// The full id of the sandbox an id or unambiguous prefix names.
    pub fn resolve_sandbox_id(&self, prefix: &str) -> Result<SandboxId> {
        // A whole id (what the CRI's clients send) is its own folder: no listing of every pod.
        if let Ok(id) = SandboxId::parse(prefix) {
            if self.layout.sandbox(&id).record().exists() {
                return Ok(id);
            }
        }
        let ids = self.layout.sandbox_ids()?;
        let found = resolve_prefix("pod sandbox", prefix, ids.iter().map(|i| i.as_str()))?;
        found
            .and_then(|id| SandboxId::parse(&id).ok())
            .filter(|id| self.layout.sandbox(id).record().exists())
            .ok_or_else(|| Error::SandboxNotFound {
                id: prefix.to_string(),
            })
    }

    /// The full id of the container an id or unambiguous prefix names.
    pub fn resolve_container_id(&self, prefix: &str) -> Result<ContainerId> {
        if let Ok(id) = ContainerId::parse(prefix) {
            if self.sandbox_of(&id).is_ok() {
                return Ok(id);
            }
        }
        let mut all = Vec::new();
        for sandbox in self.layout.sandbox_ids()? {
            all.extend(self.layout.sandbox(&sandbox).container_ids()?);
        }
        let found = resolve_prefix("container", prefix, all.iter().map(|i| i.as_str()))?;
        found
            .and_then(|id| ContainerId::parse(&id).ok())
            .ok_or_else(|| Error::ContainerNotFound {
                id: prefix.to_string(),
            })
    }

    /// A container's sandbox and record. Where the container was found before, its record is
    /// read without [`Runtime::sandbox_of`]'s look first: the read's own `statx` tells whether it
    /// is still there (ContainerStatus: two of the record's `statx` instead of three).
    pub(crate) fn sandbox_and_record_of(
        &self,
        container: &ContainerId,
    ) -> Result<(SandboxId, std::sync::Arc<crate::state::ContainerRecord>)> {
        let record_in = |sandbox: &SandboxId| {
            self.container_records
                .read(&self.layout.sandbox(sandbox).container(container).record())
        };
        let remembered = self.known_sandboxes().get(container).cloned();
        if let Some(sandbox) = remembered {
            if let Some(record) = record_in(&sandbox)? {
                return Ok((sandbox, record));
            }
        }
        // Not found where it was: sandbox_of forgets that place and looks in every sandbox.
        let sandbox = self.sandbox_of(container)?;
        let record = record_in(&sandbox)?.ok_or_else(|| Error::ContainerNotFound {
            id: container.to_string(),
        })?;
        Ok((sandbox, record))
    }

    /// The sandbox a container belongs to.
    ///
    /// A container never moves to another sandbox, so the answer is remembered, and a
    /// remembered one only needs the record to be still there: one `statx` instead of a
    /// listing of every sandbox for each per-container call (ContainerStatus above all).
    pub(crate) fn sandbox_of(&self, container: &ContainerId) -> Result<SandboxId> {
        let has_record = |sandbox: &SandboxId| {
            self.layout
                .sandbox(sandbox)
                .container(container)
                .record()
                .exists()
        };
        let mut known = self.known_sandboxes();
        match known.get(container) {
            Some(sandbox) if has_record(sandbox) => return Ok(sandbox.clone()),
            Some(_) => {
                known.remove(container);
            }
            None => {}
        }
        for sandbox in self.layout.sandbox_ids()? {
            if has_record(&sandbox) {
                known.insert(container.clone(), sandbox.clone());
                return Ok(sandbox);
            }
        }
        Err(Error::ContainerNotFound {
            id: container.to_string(),
        })
    }

    /// Forgets where a removed container was ([`Runtime::sandbox_of`]).
    pub(crate) fn forget_container(&self, container: &ContainerId) {
        if let Some(sandbox) = self.known_sandboxes().remove(container) {
            let dir = self.layout.sandbox(&sandbox).container(container).dir;
            self.container_records.forget_below(&dir);
        }
    }

    /// Forgets where the containers of a removed sandbox were, and its records.
    pub(crate) fn forget_containers_of(&self, sandbox: &SandboxId) {
        self.known_sandboxes().retain(|_, of| of != sandbox);
        let dir = &self.layout.sandbox(sandbox).dir;
        self.container_records.forget_below(dir);
        self.shim_records.forget_below(dir);
        self.sandbox_records.forget_below(dir);
        self.live.forget_below(dir);
    }

    fn known_sandboxes(&self) -> std::sync::MutexGuard<'_, HashMap<ContainerId, SandboxId>> {
        self.sandboxes_of.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shim's record, if its shim is alive.
    pub(crate) fn live_shim(&self, paths: &SandboxPaths) -> Result<Option<ShimRecord>> {
        Ok(self
            .shim_records
            .read(&paths.shim_record())?
            .filter(|record| self.live.runs(&record.shim, &paths.dir))
            .map(|record| ShimRecord::clone(&record)))
    }

    /// A connection to the sandbox's shim; SandboxNotReady when it is gone.
    pub(crate) fn shim(&self, id: &SandboxId) -> Result<ShimClient> {
        let paths = self.layout.sandbox(id);
        if self.live_shim(&paths)?.is_none() {
            return Err(Error::SandboxNotReady {
                id: id.to_string(),
                reason: "its shim is not running".into(),
            });
        }
        ShimClient::connect(&paths.socket(), id.as_str())
    }
}

/// Removes `dir` and everything below it, first detaching any mount left there (deepest first).
///
/// The mounts are found by walking the tree and asking the kernel about each entry (one
/// `statx`), not by reading the mount table: that table lists every pod's pins and `/dev/shm`,
/// so reading it made each removal cost more the more pods there were.
pub(crate) fn remove_tree(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    detach_mounts_below(dir, &mut Vec::new())?;
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", dir, e)),
    }
}

/// Detaches every mount at or below `path` (several stacked on one place too), adding the
/// places to `detached`; symlinks are not followed.
pub(crate) fn detach_mounts_below(
    path: &Path,
    detached: &mut Vec<std::path::PathBuf>,
) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(()); // gone meanwhile
    };
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    while podlab_ns::mnt::is_mountpoint(path)? {
        podlab_ns::mnt::unmount(path)?;
        detached.push(path.to_path_buf());
    }
    if meta.is_dir() {
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("reading", path, e)),
        };
        for entry in entries.flatten() {
            detach_mounts_below(&entry.path(), detached)?;
        }
    }
    Ok(())
}

/// The absolute path of the helper program `name` (`podlab-shim`, `podlab-pause`) in
/// `helper_dir`.
pub(crate) fn helper_path(helper_dir: &Path, name: &str) -> Result<PathBuf> {
    let path = helper_dir.join(name);
    if path.is_file() {
        // Absolute: the shim runs from / and execs pause from there.
        std::fs::canonicalize(&path).map_err(|e| Error::io("resolving", path, e))
    } else {
        Err(Error::Invalid(format!(
            "{name} not found in {} (build it with `cargo build -p podlab-pause -p podlab-runtime --bins`)",
            helper_dir.display()
        )))
    }
}
