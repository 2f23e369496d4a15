//! The image store: content store, name index and snapshots under one root folder, and the
//! operations `podlab image ls|import|inspect|rm` and the runtime use.
//!
//! ```text
//! ROOT/
//!   oci-layout            {"imageLayoutVersion":"1.0.0"}: ROOT is itself an OCI image layout
//!   index.json            names → manifest descriptors (atomic replace)
//!   blobs/sha256/<hex>    manifests, configs, layer blobs (content store)
//!   snapshots/<chainid>/  one read-only folder per unpacked layer (overlay lowerdirs)
//!   snapshots/empty/      the lower folder of images without layers
//!   tmp/                  staging folders of imports in progress
//!   trash/                snapshots and blobs a collection took away, deleted once it let the
//!                         locks go
//!   ingest/               pulls' downloads: <hex>.partial (resumable), <hex> (verified), <hex>.lock,
//!                         <hex>.unpack* (a layer unpacked while it downloaded)
//!   used/<manifest hex>   its mtime is when a container last resolved the image (for image GC)
//!   lock                  flock: shared for readers, exclusive for changes
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::busybox;
use crate::content::{Blobs, Content};
use crate::digest::Digest;
use crate::durable::{self, StoreLock};
use crate::error::{Error, Result};
use crate::image::{Image, ImageConfig, ImageDetails, ImageSummary, Loaded};
use crate::import::{self, Found};
use crate::index::{NameIndex, Target, MANIFEST_MEDIA_TYPE};
use crate::reference::Reference;
use crate::snapshot;
use crate::staging::Staging;

const LAYOUT_FILE: &str = "oci-layout";
const LAYOUT: &[u8] = br#"{"imageLayoutVersion":"1.0.0"}"#;
const EMPTY_SNAPSHOT: &str = "empty";

/// What a garbage collection removed, and what it had to keep.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    pub blobs_removed: usize,
    pub snapshots_removed: usize,
    /// Unreferenced snapshots kept because a mounted overlay still uses them.
    pub snapshots_in_use: Vec<PathBuf>,
    /// Why nothing was collected: an image that cannot be read might need any blob.
    pub skipped: Option<String>,
}

/// One named image as image garbage collection sees it (kubelet's `imageRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageUsage {
    pub name: String,
    pub digest: Digest,
    /// Bytes of content (manifest, config, layer blobs).
    pub size: u64,
    /// When a container last resolved it, else when it was pulled or imported; `None` for an
    /// image stored before podlab kept the time.
    pub last_used: Option<SystemTime>,
    /// A snapshot of it is a lower folder of a mounted overlay (a running container).
    pub in_use: bool,
}

/// What `podlab image prune` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    pub removed: Vec<String>,
    /// Downloads left by interrupted pulls that were dropped.
    pub partial_downloads_removed: usize,
    pub gc: GcReport,
}

/// What `podlab image verify` found: nothing in `problems` means the store is consistent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub images: usize,
    pub blobs: usize,
    pub snapshots: usize,
    pub problems: Vec<String>,
}

/// An image store rooted at one folder. Cheap to open; every call takes the store's lock, so
/// several processes can use one root at once.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    /// One folder; a slice so that it is a [`Content`] by itself.
    blobs: [Blobs; 1],
    snapshots: PathBuf,
    tmp: PathBuf,
    trash: PathBuf,
    index_path: PathBuf,
    lock_path: PathBuf,
}

impl Store {
    /// Opens the store at `root`, creating it if needed.
    pub fn open(root: &Path) -> Result<Store> {
        // 0700: the layers hold every image's files (its /etc/shadow too); other host users
        // have no business reading them, as containerd keeps /var/lib/containerd.
        std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700)
            .create(root)
            .map_err(|e| Error::io("creating image store", root, e))?;
        // Canonical, so snapshot paths compare equal to the ones the kernel shows in mountinfo.
        let root = root
            .canonicalize()
            .map_err(|e| Error::io("resolving", root, e))?;
        let store = Store {
            blobs: [Blobs::new(root.join("blobs/sha256"))],
            snapshots: root.join("snapshots"),
            tmp: root.join("tmp"),
            trash: root.join("trash"),
            index_path: root.join("index.json"),
            lock_path: root.join("lock"),
            root,
        };
        store.blobs[0].create_dir()?;
        for dir in [
            &store.snapshots,
            &store.tmp,
            &store.trash,
            &store.snapshots.join(EMPTY_SNAPSHOT),
        ] {
            fs::create_dir_all(dir).map_err(|e| Error::io("creating folder", dir, e))?;
        }
        if !store.index_path.exists() {
            let _lock = store.lock(true)?;
            if !store.index_path.exists() {
                durable::write_atomic(&store.root.join(LAYOUT_FILE), LAYOUT)?;
                NameIndex::default().save(&store.index_path)?;
            }
        }
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder holding all snapshots.
    pub fn snapshots_dir(&self) -> &Path {
        &self.snapshots
    }

    /// Where pulls keep their downloads (see [`crate::pull`]).
    pub(crate) fn ingest_dir(&self) -> PathBuf {
        self.root.join("ingest")
    }

    /// Makes the ingest folder (best effort: a fetch makes it too) and marks it, on ext4, as
    /// the top of unrelated subtrees (`FS_TOPDIR_FL`, `chattr +T`): the Orlov allocator then
    /// places each layer's unpack folder in a block group of its own choosing instead of the
    /// store's. Without a journal (as on this lab's disk) ext4 skips, one by one, every inode
    /// of the group freed in the last 60-360 s before it takes a free one, and a store that
    /// pulls and removes images frees many: a busybox layer's 35 new inodes cost 0.1-0.2 ms
    /// each in the store's group against 11 us in a quiet one. Other filesystems ignore it.
    pub(crate) fn prepare_ingest(&self) {
        let ingest = self.ingest_dir();
        if fs::create_dir_all(&ingest).is_ok() {
            set_top_folder(&ingest);
        }
    }

    pub(crate) fn blobs_dir(&self) -> PathBuf {
        self.blobs[0].dir().to_owned()
    }

    fn used_path(&self, manifest: &Digest) -> PathBuf {
        self.root.join("used").join(manifest.hex())
    }

    /// Records that `manifest` was used now (best effort: a missed mark only makes the image
    /// look older to garbage collection).
    fn mark_used(&self, manifest: &Digest) {
        let path = self.used_path(manifest);
        let touch = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?
                .set_modified(SystemTime::now())
        };
        let _ = touch();
    }

    /// The file whose `flock` guards the index, snapshots and blobs against a concurrent commit.
    pub(crate) fn lock_path(&self) -> PathBuf {
        self.lock_path.clone()
    }

    /// Held (shared) by a pull from its first look at the store to its commit: a garbage
    /// collection ([`Store::gc`]) takes it exclusive, so it never deletes what a pull in
    /// progress found in the store and counts on (containerd protects a pull's content with a
    /// lease the same way). A collection waits for the pulls in progress; a pull, for a
    /// collection in progress.
    pub(crate) fn hold_for_pull(&self) -> Result<StoreLock> {
        StoreLock::acquire(&self.pulls_lock_path(), false)
    }

    fn pulls_lock_path(&self) -> PathBuf {
        self.root.join("pulls.lock")
    }

    fn lock(&self, exclusive: bool) -> Result<StoreLock> {
        StoreLock::acquire(&self.lock_path, exclusive)
    }

    fn content(&self) -> Content<'_> {
        Content::new(&self.blobs)
    }

    fn index(&self) -> Result<NameIndex> {
        NameIndex::load(&self.index_path)
    }

    fn load(&self, digest: &Digest) -> Result<Loaded> {
        Loaded::read(self.content(), digest, &self.snapshots)
    }

    /// Imports every image of an oci-archive, docker-archive or OCI layout folder at `path`
    /// (the format is detected). `name` names the image (the archive must then hold one, or one
    /// whose tag matches); without it the names in the archive are used. All or nothing: on any
    /// error (corrupt tar, digest mismatch, bad layer) the store is left as it was.
    pub fn import(&self, path: &Path, name: Option<&str>) -> Result<Vec<ImageSummary>> {
        let imported = self.import_locked(path, name);
        self.empty_trash();
        imported
    }

    fn import_locked(&self, path: &Path, name: Option<&str>) -> Result<Vec<ImageSummary>> {
        let _lock = self.lock(true)?;
        self.remove_stale_staging();
        let staging = Staging::new(&self.tmp, &self.blobs[0], &self.snapshots)?;
        let found = import::read(path, &staging)?;
        let names = assign_names(path, &found, name)?;
        let index = self.index()?;
        let replaced = names
            .iter()
            .any(|(n, d)| index.names.get(n).is_some_and(|t| &t.digest != d));
        let summaries = self.commit(staging, names)?;
        if replaced {
            // A name moved to new content: the old image may now be garbage. Best effort: the
            // import itself has succeeded, and `gc` can be run again.
            let _ = self.index().and_then(|index| self.collect_garbage(&index));
        }
        Ok(summaries)
    }

    /// Unpacks, moves into place and names the staged images; the index write is the commit.
    /// An image imported (or built) counts as used now, as a pulled one does: image garbage
    /// collection removes the least recently used first.
    fn commit(&self, staging: Staging, names: Vec<(String, Digest)>) -> Result<Vec<ImageSummary>> {
        let loaded = self.unpack_staged(&staging, &names)?;
        let digests: Vec<Digest> = loaded.keys().cloned().collect();
        let summaries = self.commit_unpacked(staging, loaded, names)?;
        for digest in &digests {
            self.mark_used(digest);
        }
        Ok(summaries)
    }

    /// Reads and unpacks the staged images `names` point at.
    fn unpack_staged(
        &self,
        staging: &Staging,
        names: &[(String, Digest)],
    ) -> Result<BTreeMap<Digest, Loaded>> {
        let mut loaded: BTreeMap<Digest, Loaded> = BTreeMap::new();
        for (_, digest) in names {
            if !loaded.contains_key(digest) {
                let image = Loaded::read(staging.content(), digest, &self.snapshots)?;
                staging.unpack_layers(&image)?;
                loaded.insert(digest.clone(), image);
            }
        }
        Ok(loaded)
    }

    fn commit_unpacked(
        &self,
        staging: Staging,
        loaded: BTreeMap<Digest, Loaded>,
        names: Vec<(String, Digest)>,
    ) -> Result<Vec<ImageSummary>> {
        staging.commit()?;
        self.name_images(&loaded, names)
    }

    /// Writes `names` into the index (the commit point of an import or a pull).
    fn name_images(
        &self,
        loaded: &BTreeMap<Digest, Loaded>,
        names: Vec<(String, Digest)>,
    ) -> Result<Vec<ImageSummary>> {
        let mut index = self.index()?;
        let mut summaries = Vec::new();
        for (name, digest) in names {
            let image = &loaded[&digest];
            index.names.insert(
                name.clone(),
                Target {
                    digest: digest.clone(),
                    size: image.manifest_size,
                    media_type: image
                        .manifest
                        .media_type()
                        .as_ref()
                        .map_or(MANIFEST_MEDIA_TYPE.to_owned(), |m| m.to_string()),
                },
            );
            summaries.push(image.summary(&name));
        }
        index.save(&self.index_path)?;
        Ok(summaries)
    }

    /// Staging folders left by a killed import. Called with the exclusive lock held, when no
    /// other import can be running.
    fn remove_stale_staging(&self) {
        if let Ok(entries) = fs::read_dir(&self.tmp) {
            for entry in entries.flatten() {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }

    /// Makes sure the built-in `busybox:latest` is there, building it from the host's
    /// `/bin/busybox` the first time (later calls only look the name up).
    pub fn ensure_builtin_busybox(&self) -> Result<ImageSummary> {
        self.ensure_busybox_from(Path::new(busybox::HOST_BUSYBOX))
    }

    /// [`Store::ensure_builtin_busybox`] with another static busybox binary.
    pub fn ensure_busybox_from(&self, busybox_binary: &Path) -> Result<ImageSummary> {
        if let Some(summary) = self.summary_of(busybox::NAME)? {
            return Ok(summary);
        }
        let _lock = self.lock(true)?;
        if let Some(summary) = self.summary_unlocked(busybox::NAME)? {
            return Ok(summary); // another process built it while this one waited
        }
        self.remove_stale_staging();
        let staging = Staging::new(&self.tmp, &self.blobs[0], &self.snapshots)?;
        let digest = busybox::build(&staging, busybox_binary)?;
        let mut summaries = self.commit(staging, vec![(busybox::NAME.to_owned(), digest)])?;
        Ok(summaries.remove(0))
    }

    /// Builds the built-in `busybox:latest` when `name` names it and the store does not have it
    /// yet, as `podlab run --image busybox` needs on a fresh root; any other name is left to
    /// [`Store::resolve`] to find or refuse. Only the index is read: the image's blobs are read
    /// (and verified) once, when the container resolves it.
    pub fn ensure_builtin_if_named(&self, name: &str) -> Result<()> {
        if Reference::parse(name)
            .map(|r| r.to_string())
            .ok()
            .as_deref()
            != Some(busybox::NAME)
        {
            return Ok(());
        }
        let present = {
            let _lock = self.lock(false)?;
            self.index()?.names.contains_key(busybox::NAME)
        };
        if !present {
            self.ensure_builtin_busybox()?;
        }
        Ok(())
    }

    fn summary_of(&self, name: &str) -> Result<Option<ImageSummary>> {
        let _lock = self.lock(false)?;
        self.summary_unlocked(name)
    }

    fn summary_unlocked(&self, name: &str) -> Result<Option<ImageSummary>> {
        match self.index()?.names.get(name) {
            Some(target) => Ok(Some(self.load(&target.digest)?.summary(name))),
            None => Ok(None),
        }
    }

    /// Every named image, sorted by name.
    pub fn list(&self) -> Result<Vec<ImageSummary>> {
        let _lock = self.lock(false)?;
        self.index()?
            .names
            .iter()
            .map(|(name, target)| Ok(self.load(&target.digest)?.summary(name)))
            .collect()
    }

    /// Every name with its manifest digest, sorted by name, from the index alone: no blob is
    /// read. For a caller that keeps what it learned of each manifest ([`Store::describe`]),
    /// which never changes: a manifest digest names its bytes, and so its config and layers.
    pub fn names(&self) -> Result<Vec<(String, Digest)>> {
        let _lock = self.lock(false)?;
        Ok(self
            .index()?
            .names
            .into_iter()
            .map(|(name, target)| (name, target.digest))
            .collect())
    }

    /// The summary (named `name`) and the config defaults of the image whose manifest is
    /// `manifest`, read and checked from the content store.
    pub fn describe(&self, name: &str, manifest: &Digest) -> Result<(ImageSummary, ImageConfig)> {
        let _lock = self.lock(false)?;
        let loaded = self.load(manifest)?;
        Ok((loaded.summary(name), loaded.image(name).config))
    }

    /// The index file (`index.json`): it is replaced whole (a new file renamed over it) on
    /// every change of the names, so its identity (inode, change time) says whether they changed.
    pub fn index_path(&self) -> &Path {
        &self.index_path
    }

    /// Finds `name` (`busybox`, `busybox:latest`, `docker.io/library/busybox:latest`,
    /// `NAME@sha256:…` or a bare manifest digest `sha256:…`) in the index.
    fn lookup(&self, index: &NameIndex, name: &str) -> Result<(String, Target)> {
        let not_found = || Error::NotFound {
            name: name.to_owned(),
        };
        if name.starts_with("sha256:") {
            let digest = Digest::parse(name)?;
            return index
                .names
                .iter()
                .find(|(_, t)| t.digest == digest)
                .map(|(n, t)| (n.clone(), t.clone()))
                .ok_or_else(not_found);
        }
        let reference = Reference::parse(name)?;
        if let Some(target) = index.names.get(&reference.to_string()) {
            // A pull by digest names the image REPO@sha256:… (the digest may be an index's).
            return Ok((reference.to_string(), target.clone()));
        }
        if let Some(digest) = &reference.digest {
            let repository = reference.repository();
            return index
                .names
                .iter()
                .find(|(n, t)| &t.digest == digest && n.starts_with(&format!("{repository}:")))
                .map(|(n, t)| (n.clone(), t.clone()))
                .ok_or_else(not_found);
        }
        let full = reference.to_string();
        let target = index.names.get(&full).cloned().ok_or_else(not_found)?;
        Ok((full, target))
    }

    /// The image `name`, ready for a container: config and layers with their snapshot folders.
    /// A snapshot that has gone missing is unpacked again from its blob.
    pub fn resolve(&self, name: &str) -> Result<Image> {
        let (full, loaded) = {
            let _lock = self.lock(false)?;
            let (full, target) = self.lookup(&self.index()?, name)?;
            (full, self.load(&target.digest)?)
        };
        if loaded.layers.iter().any(|l| !l.snapshot.is_dir()) {
            let _lock = self.lock(true)?;
            let staging = Staging::new(&self.tmp, &self.blobs[0], &self.snapshots)?;
            staging.unpack_layers(&loaded)?;
            staging.commit()?;
        }
        self.mark_used(&loaded.manifest_digest);
        Ok(loaded.image(&full))
    }

    /// The config defaults (entrypoint, cmd, env, working dir, user, ports, labels) of `name`.
    pub fn config(&self, name: &str) -> Result<ImageConfig> {
        let _lock = self.lock(false)?;
        let (_, target) = self.lookup(&self.index()?, name)?;
        Ok(self.load(&target.digest)?.image(name).config)
    }

    /// Overlay lower folders for a container of `image`, in the kernel's order: the top-most
    /// layer first. An image without layers gets one empty folder (overlayfs needs a lower).
    ///
    /// `mount(2)` takes them as one `lowerdir=a:b:c` option inside a page (4 KiB) of options,
    /// which holds about 40 layers at a root like `/run/podlab/images`; the new mount API
    /// (`fsconfig` with `lowerdir+`, Linux 6.8) takes one folder at a time and has no such limit.
    /// A snapshot is protected from [`Store::remove`] once it is mounted, not between `resolve`
    /// and the mount.
    pub fn lowerdirs(&self, image: &Image) -> Vec<PathBuf> {
        if image.layers.is_empty() {
            return vec![self.snapshots.join(EMPTY_SNAPSHOT)];
        }
        image
            .layers
            .iter()
            .rev()
            .map(|l| l.snapshot.clone())
            .collect()
    }

    /// Manifest, config, layers and all names of `name`, for `podlab image inspect`.
    pub fn inspect(&self, name: &str) -> Result<ImageDetails> {
        let _lock = self.lock(false)?;
        let index = self.index()?;
        let (full, target) = self.lookup(&index, name)?;
        let loaded = self.load(&target.digest)?;
        Ok(ImageDetails {
            names: index.names_of(&target.digest),
            name: full,
            digest: target.digest,
            size: loaded.size(),
            manifest: loaded.manifest,
            config: loaded.config,
            layers: loaded.layers,
        })
    }

    /// Reads every blob of `name` and checks its digest (the layers are otherwise only checked
    /// when they are unpacked).
    pub fn verify(&self, name: &str) -> Result<()> {
        let _lock = self.lock(false)?;
        let (_, target) = self.lookup(&self.index()?, name)?;
        let loaded = self.load(&target.digest)?;
        for layer in &loaded.layers {
            self.blobs[0].verify(&layer.digest)?;
        }
        Ok(())
    }

    /// Names the pulled image `manifest` `name`: its blobs, verified and complete in `ingest/`
    /// or already in the store, are moved into a staging folder, its layers unpacked, and the
    /// whole committed as an import is; when every layer was unpacked ahead whole while it
    /// downloaded, nothing can fail halfway and blobs and layers go straight into the store
    /// (the staging folder's four `mkdir`s and `rmdir`s saved). On any error nothing is named
    /// (content moved in without a name is garbage for `gc`). On error, the layer at fault when
    /// there was one.
    pub(crate) fn commit_pulled(
        &self,
        blobs: &[Digest],
        manifest: &Digest,
        name: &str,
    ) -> std::result::Result<ImageSummary, (Option<Digest>, Error)> {
        let (summary, collected) = self.commit_pulled_locked(blobs, manifest, name)?;
        if collected {
            self.empty_trash();
        }
        Ok(summary)
    }

    /// [`Store::commit_pulled`] under the store's lock; also whether it collected garbage.
    fn commit_pulled_locked(
        &self,
        blobs: &[Digest],
        manifest: &Digest,
        name: &str,
    ) -> std::result::Result<(ImageSummary, bool), (Option<Digest>, Error)> {
        let none = |e: Error| (None, e);
        let _lock = self.lock(true).map_err(none)?;
        self.remove_stale_staging();
        let ingest = self.ingest_dir();
        let replaced = self
            .index()
            .map_err(none)?
            .names
            .get(name)
            .is_some_and(|t| &t.digest != manifest);
        let names = vec![(name.to_owned(), manifest.clone())];
        if let Some(ready) = self.ready_in_ingest(blobs, manifest, &ingest) {
            let committed = self
                .commit_from_ingest(blobs, ready, names.clone())
                .map_err(none)?;
            if let Some(mut summaries) = committed {
                return Ok(self.after_pull_commit(summaries.remove(0), blobs, manifest, replaced));
            }
        }
        let staging = Staging::new(&self.tmp, &self.blobs[0], &self.snapshots)
            .map_err(none)?
            .with_unpacked_ahead(ingest.clone());
        for digest in blobs {
            if staging.content().contains(digest) {
                continue;
            }
            let file = ingest.join(digest.hex());
            if !file.is_file() {
                return Err((
                    Some(digest.clone()),
                    Error::BlobMissing {
                        digest: digest.clone(),
                        path: file,
                    },
                ));
            }
            staging
                .blobs()
                .adopt(&file, digest)
                .map_err(|e| (Some(digest.clone()), e))?;
        }
        let loaded = self
            .unpack_staged(&staging, &names)
            .map_err(|e| (staging.failed_layer(), e))?;
        let mut summaries = self.commit_unpacked(staging, loaded, names).map_err(none)?;
        Ok(self.after_pull_commit(summaries.remove(0), blobs, manifest, replaced))
    }

    /// What follows a pull's commit, under the store's lock: the layers unpacked ahead that
    /// the commit passed over go, the image's use is marked, and a tag that moved may leave
    /// its old image garbage.
    fn after_pull_commit(
        &self,
        summary: ImageSummary,
        blobs: &[Digest],
        manifest: &Digest,
        replaced: bool,
    ) -> (ImageSummary, bool) {
        crate::unpack_ahead::discard_ready(&self.ingest_dir(), blobs);
        self.mark_used(manifest);
        if replaced {
            // The tag moved: the old image may be garbage now (best effort, as for imports).
            let _ = self.index().and_then(|index| self.collect_garbage(&index));
        }
        (summary, replaced)
    }

    /// The pulled image, when everything its commit needs is there and checked already: each
    /// blob in the store or verified in `ingest`, each layer a snapshot of the store or unpacked
    /// ahead whole from its verified blob with the DiffID the config names
    /// ([`crate::unpack_ahead`]). Nothing is left to unpack, so nothing can fail halfway and
    /// the commit needs no staging folder ([`Store::commit_from_ingest`]); `None` sends the
    /// commit through one.
    fn ready_in_ingest(&self, blobs: &[Digest], manifest: &Digest, ingest: &Path) -> Option<Ready> {
        let downloaded = Blobs::new(ingest.to_owned());
        if !blobs
            .iter()
            .all(|d| self.blobs[0].contains(d) || downloaded.contains(d))
        {
            return None;
        }
        let folders = [downloaded, self.blobs[0].clone()];
        // An error here is the staged commit's to report.
        let loaded = Loaded::read(Content::new(&folders), manifest, &self.snapshots).ok()?;
        let [downloaded, _] = folders;
        let mut moves = Vec::new();
        for (at, layer) in loaded.layers.iter().enumerate() {
            let to = snapshot::path(&self.snapshots, &layer.chain_id);
            if to.is_dir() {
                continue;
            }
            let ready = crate::unpack_ahead::ready(ingest, &layer.digest, &layer.diff_id, at == 0)?;
            moves.push((ready, to));
        }
        Some(Ready {
            loaded,
            moves,
            downloaded,
        })
    }

    /// Moves a pull's layers and blobs from `ingest` straight into the store and names the
    /// image, as [`Staging::commit`] moves staged ones: the name is still written last, so a
    /// failure before it leaves only content without a name (garbage for `gc`), never an image
    /// that is not whole. `None` when a layer could not be moved: the staged commit goes on
    /// from there (a snapshot moved already is whole, and found in the store).
    fn commit_from_ingest(
        &self,
        blobs: &[Digest],
        ready: Ready,
        names: Vec<(String, Digest)>,
    ) -> Result<Option<Vec<ImageSummary>>> {
        let Ready {
            loaded,
            moves,
            downloaded,
        } = ready;
        let sync_layers = durable::sync_unpacked_layers();
        for (folder, to) in moves {
            if sync_layers {
                durable::sync_tree(&folder)?;
            }
            if fs::rename(&folder, &to).is_err() {
                return Ok(None);
            }
        }
        for digest in blobs {
            if !self.blobs[0].contains(digest) {
                self.blobs[0].adopt(&downloaded.path(digest), digest)?;
            }
        }
        durable::sync_dir(self.blobs[0].dir())?;
        if sync_layers {
            durable::sync_dir(&self.snapshots)?;
        }
        let loaded = BTreeMap::from([(loaded.manifest_digest.clone(), loaded)]);
        self.name_images(&loaded, names).map(Some)
    }

    /// Every named image with its size, last use and whether a container uses it, for image
    /// garbage collection (kubelet: least recently used unused images first).
    pub fn usage(&self) -> Result<Vec<ImageUsage>> {
        let _lock = self.lock(false)?;
        let used = snapshot::in_use(&self.snapshots);
        let mut images = Vec::new();
        for (name, target) in &self.index()?.names {
            let image = self.load(&target.digest)?;
            let last_used = fs::metadata(self.used_path(&target.digest))
                .and_then(|m| m.modified())
                .ok();
            images.push(ImageUsage {
                name: name.clone(),
                digest: target.digest.clone(),
                size: image.size(),
                last_used,
                in_use: image
                    .layers
                    .iter()
                    .any(|l| used.contains_key(l.chain_id.hex())),
            });
        }
        Ok(images)
    }

    /// Removes every image no mounted container uses and whose name is not in `keep` (the
    /// images of containers that exist but do not run), then their blobs and snapshots, and
    /// the downloads of interrupted pulls.
    pub fn prune(&self, keep: &[String]) -> Result<PruneReport> {
        let pruned = self.prune_locked(keep);
        self.empty_trash();
        pruned
    }

    fn prune_locked(&self, keep: &[String]) -> Result<PruneReport> {
        let keep: BTreeSet<String> = keep
            .iter()
            .map(|k| {
                Reference::parse(k)
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| k.clone())
            })
            .collect();
        let unused: Vec<String> = self
            .usage()?
            .into_iter()
            .filter(|i| !i.in_use && !keep.contains(&i.name))
            .map(|i| i.name)
            .collect();
        let mut report = PruneReport::default();
        let _lock = self.lock(true)?;
        let mut index = self.index()?;
        for name in unused {
            if index.names.remove(&name).is_some() {
                report.removed.push(name);
            }
        }
        index.save(&self.index_path)?;
        self.remove_stale_staging();
        report.gc = self.collect_garbage(&index)?;
        report.partial_downloads_removed = self.remove_idle_downloads();
        let names: BTreeSet<Digest> = index.names.values().map(|t| t.digest.clone()).collect();
        if let Ok(entries) = fs::read_dir(self.root.join("used")) {
            for entry in entries.flatten() {
                let named = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| Digest::from_hex(n).ok())
                    .is_some_and(|d| names.contains(&d));
                if !named {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        Ok(report)
    }

    /// Ingest files no pull is downloading now (their lock is free).
    fn remove_idle_downloads(&self) -> usize {
        self.remove_idle_ingest(|_| true, true)
    }

    /// The ingest entries named `which` that no pull works on now (their lock is free), and
    /// their lock files with `and_locks` (`image prune`). A collection, which runs after every
    /// RemoveImage of the CRI, keeps the lock files: a pull that opened one before its removal
    /// and a pull that made a new one would both hold "the" lock of the blob.
    fn remove_idle_ingest(&self, which: impl Fn(&str) -> bool, and_locks: bool) -> usize {
        let ingest = self.ingest_dir();
        let Ok(entries) = fs::read_dir(&ingest) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".lock") || !which(&name) {
                continue;
            }
            let hex = name.split('.').next().unwrap_or("");
            let lock = ingest.join(format!("{hex}.lock"));
            if let Ok(Some(_held)) = StoreLock::try_acquire(&lock) {
                // Folders are layers unpacked while they downloaded (crate::unpack_ahead).
                let removed_entry = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    fs::remove_dir_all(entry.path())
                } else {
                    fs::remove_file(entry.path())
                };
                if removed_entry.is_ok() {
                    removed += 1;
                }
                if and_locks {
                    let _ = fs::remove_file(&lock);
                }
            }
        }
        removed
    }

    /// Checks the whole store: every blob hashes to its name, every named image's manifest,
    /// config and layer blobs are there, every snapshot they need is there, and no import or
    /// pull left a staging folder.
    pub fn verify_all(&self) -> Result<VerifyReport> {
        let _lock = self.lock(false)?;
        let mut report = VerifyReport::default();
        for digest in self.blobs[0].list()? {
            report.blobs += 1;
            if let Err(e) = self.blobs[0].verify(&digest) {
                report.problems.push(e.to_string());
            }
        }
        for (name, target) in &self.index()?.names {
            report.images += 1;
            let image = match self.load(&target.digest) {
                Ok(image) => image,
                Err(e) => {
                    report.problems.push(format!("image {name}: {e}"));
                    continue;
                }
            };
            for layer in &image.layers {
                if !self.blobs[0].contains(&layer.digest) {
                    report.problems.push(format!(
                        "image {name}: layer blob {} is missing",
                        layer.digest
                    ));
                }
                if layer.snapshot.is_dir() {
                    report.snapshots += 1;
                } else {
                    report.problems.push(format!(
                        "image {name}: snapshot {} of layer {} is missing",
                        layer.snapshot.display(),
                        layer.digest
                    ));
                }
            }
        }
        if let Ok(entries) = fs::read_dir(&self.tmp) {
            for entry in entries.flatten() {
                report.problems.push(format!(
                    "{}: left by an import or pull that did not finish",
                    entry.path().display()
                ));
            }
        }
        Ok(report)
    }

    /// Removes the name `name`; blobs and snapshots no other name needs are deleted. Refused while
    /// a snapshot that would be deleted is a lower folder of a mounted overlay (a container).
    pub fn remove(&self, name: &str) -> Result<()> {
        self.untag_unless_used(name, true)?;
        let collected = {
            let _lock = self.lock(true)?;
            self.collect_garbage(&self.index()?).map(drop)
        };
        self.empty_trash();
        collected
    }

    /// Removes the name `name` and leaves its blobs and snapshots to a later [`Store::gc`], as
    /// containerd's RemoveImage deletes the image record and lets its garbage collector take the
    /// content after. Not refused while a container uses the image (containerd does not refuse
    /// either; kubelet removes only images no container uses): [`Store::gc`] keeps a snapshot
    /// for as long as an overlay has it mounted. So no walk of every process's mount table is
    /// needed here.
    pub fn untag(&self, name: &str) -> Result<()> {
        self.untag_unless_used(name, false)?;
        durable::sync_parent(&self.index_path)
    }

    /// [`Store::untag`], made durable by the next garbage collection rather than now: it
    /// fsyncs the index's folder before it deletes anything, so a power cut before then can
    /// bring the name back but never leave it naming deleted content. For a caller that runs
    /// (or has a cleaner run) [`Store::gc`] next, as a CRI server's RemoveImage does.
    pub fn untag_until_collected(&self, name: &str) -> Result<()> {
        self.untag_unless_used(name, false)
    }

    /// Removes the name `name`; with `refuse_used`, refused as [`Store::remove`] is while a
    /// snapshot no other name needs is a lower folder of a mounted overlay.
    /// The index is written whole, its folder not fsynced: see the callers.
    fn untag_unless_used(&self, name: &str, refuse_used: bool) -> Result<()> {
        let _lock = self.lock(true)?;
        let mut index = self.index()?;
        let (full, target) = self.lookup(&index, name)?;
        index.names.remove(&full);
        let image = refuse_used
            .then(|| self.load(&target.digest).ok())
            .flatten();
        if let Some(image) = image {
            let kept = self
                .referenced(&index)
                .map(|r| r.snapshots)
                .unwrap_or_default();
            let used = snapshot::in_use(&self.snapshots);
            for layer in &image.layers {
                let id = layer.chain_id.hex();
                if let (false, Some(pid)) = (kept.contains(id), used.get(id)) {
                    return Err(Error::InUse {
                        name: full,
                        snapshot: layer.snapshot.clone(),
                        pid: *pid,
                    });
                }
            }
        }
        index.save_unsynced(&self.index_path)
    }

    /// Deletes every blob and snapshot that no name needs (except snapshots still mounted),
    /// once no pull is in progress (see `Store::hold_for_pull`).
    pub fn gc(&self) -> Result<GcReport> {
        let collected = {
            let _no_pull = StoreLock::acquire(&self.pulls_lock_path(), true)?;
            let _lock = self.lock(true)?;
            self.remove_stale_staging();
            self.collect_garbage(&self.index()?)
        };
        // The next pull waits for the decisions above, not for these deletions.
        self.empty_trash();
        // A layer a killed pull was unpacking as it downloaded (crate::unpack_ahead): no pull
        // can use it, nor one it was about to rename to that name. Its resumable download
        // (`.partial`) stays, for `image prune`.
        self.remove_idle_ingest(|name| name.contains(".unpacking"), false);
        collected
    }

    /// Deletes what collections moved to `trash/`: this one's, and what a collection killed
    /// before it was done left there. Called with no lock held; two processes emptying it at
    /// once both go on past what the other removed, and whatever is left goes the next time.
    pub(crate) fn empty_trash(&self) {
        if let Ok(entries) = fs::read_dir(&self.trash) {
            for entry in entries.flatten() {
                // A snapshot's folder, or a blob's file.
                let _ = match entry.file_type() {
                    Ok(kind) if kind.is_dir() => fs::remove_dir_all(entry.path()),
                    _ => fs::remove_file(entry.path()),
                };
            }
        }
    }

    fn collect_garbage(&self, index: &NameIndex) -> Result<GcReport> {
        // A name removed without its folder's fsync (`untag_until_collected`) is made durable
        // before the content it named goes.
        durable::sync_parent(&self.index_path)?;
        let mut report = GcReport::default();
        let keep = match self.referenced(index) {
            Ok(keep) => keep,
            Err(err) => {
                // What an unreadable image references is unknown: delete nothing.
                report.skipped = Some(format!("an image cannot be read: {err}"));
                return Ok(report);
            }
        };
        // What goes is renamed into the trash, under a name no other collection takes, and
        // deleted once the locks are let go (Store::empty_trash): a rename is one directory
        // entry, while an unlink frees the file's blocks (half a millisecond for a 1.4 MB
        // layer here) and a pull waits for this collection's lock.
        let doomed = |name: &str| {
            self.trash
                .join(format!("{name}-{}", crate::unique::suffix()))
        };
        for digest in self.blobs[0].list()? {
            if !keep.blobs.contains(&digest) {
                let path = self.blobs[0].path(&digest);
                fs::rename(&path, doomed(&format!("blob-{}", digest.hex())))
                    .map_err(|e| Error::io("moving blob away", &path, e))?;
                report.blobs_removed += 1;
            }
        }
        let used = snapshot::in_use(&self.snapshots);
        let entries =
            fs::read_dir(&self.snapshots).map_err(|e| Error::io("listing", &self.snapshots, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("listing", &self.snapshots, e))?;
            let id = entry.file_name().to_string_lossy().into_owned();
            if id == EMPTY_SNAPSHOT || keep.snapshots.contains(&id) {
                continue;
            }
            if used.contains_key(&id) {
                report.snapshots_in_use.push(entry.path());
                continue;
            }
            // Renamed away, so no half-deleted snapshot is ever seen under its name.
            fs::rename(entry.path(), doomed(&id))
                .map_err(|e| Error::io("moving snapshot away", entry.path(), e))?;
            report.snapshots_removed += 1;
        }
        // No fsync of the removals: one lost at a power cut leaves garbage for the next
        // collection, never a name without its content (the index went first, above).
        Ok(report)
    }

    fn referenced(&self, index: &NameIndex) -> Result<Referenced> {
        let mut referenced = Referenced::default();
        for target in index.names.values() {
            let image = self.load(&target.digest)?;
            referenced.blobs.insert(image.manifest_digest.clone());
            referenced.blobs.insert(image.config_digest.clone());
            for layer in image.layers {
                referenced.blobs.insert(layer.digest);
                referenced.snapshots.insert(layer.chain_id.hex().to_owned());
            }
        }
        Ok(referenced)
    }
}

#[derive(Default)]
struct Referenced {
    blobs: BTreeSet<Digest>,
    snapshots: BTreeSet<String>,
}

/// Which names the imported images get: `name` if given (the one image, or the one it picks out
/// by tag), else the names the source carries.
fn assign_names(path: &Path, found: &[Found], name: Option<&str>) -> Result<Vec<(String, Digest)>> {
    let mut distinct: Vec<&Found> = Vec::new();
    for f in found {
        if !distinct.iter().any(|d| d.manifest == f.manifest) {
            distinct.push(f);
        }
    }
    let Some(name) = name else {
        let mut names = Vec::new();
        for f in found {
            if f.names.is_empty() {
                let what = match f.tags.first() {
                    Some(tag) => format!("{} (tag {tag:?})", f.manifest),
                    None => f.manifest.to_string(),
                };
                return Err(Error::Unnamed {
                    path: path.to_owned(),
                    what,
                });
            }
            names.extend(f.names.iter().map(|n| (n.clone(), f.manifest.clone())));
        }
        return Ok(names);
    };
    let wanted = Reference::parse(name)?;
    if wanted.digest.is_some() {
        return Err(Error::InvalidReference {
            name: name.to_owned(),
            reason: "an image is named NAME:TAG; a digest cannot be given to it".into(),
        });
    }
    let full = wanted.to_string();
    let chosen: Vec<&&Found> = if distinct.len() == 1 {
        distinct.iter().collect()
    } else {
        distinct
            .iter()
            .filter(|f| {
                f.names.contains(&full) || wanted.tag.as_ref().is_some_and(|t| f.tags.contains(t))
            })
            .collect()
    };
    match chosen.as_slice() {
        [one] => Ok(vec![(full, one.manifest.clone())]),
        _ => Err(Error::Ambiguous {
            path: path.to_owned(),
            name: name.to_owned(),
            choices: distinct
                .iter()
                .map(|f| {
                    let labels: Vec<&String> = f.names.iter().chain(&f.tags).collect();
                    format!("{} {labels:?}", f.manifest)
                })
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// A pull whose commit needs no staging ([`Store::ready_in_ingest`]): its manifest and config,
/// the layers unpacked ahead with the snapshot folders they become, and `ingest/` as the
/// folder of its downloaded blobs.
struct Ready {
    loaded: Loaded,
    moves: Vec<(PathBuf, PathBuf)>,
    downloaded: Blobs,
}

/// The inode flag that makes ext4's Orlov allocator spread a folder's subfolders (`chattr +T`).
const FS_TOPDIR_FL: libc::c_long = 0x0002_0000;

/// A folder's inode flags (`FS_IOC_GETFLAGS`); None when its filesystem has none.
fn inode_flags(folder: &fs::File) -> Option<libc::c_long> {
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long at the pointer given.
    let got = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(folder),
            libc::FS_IOC_GETFLAGS,
            &mut flags,
        )
    };
    (got == 0).then_some(flags)
}

/// Sets `FS_TOPDIR_FL` on `dir` unless it is set (see [`Store::prepare_ingest`]); any error (a
/// filesystem without the flag) leaves it as it is.
fn set_top_folder(dir: &Path) {
    let Ok(folder) = fs::File::open(dir) else {
        return;
    };
    if let Some(flags) = inode_flags(&folder).filter(|f| f & FS_TOPDIR_FL == 0) {
        let flags = flags | FS_TOPDIR_FL;
        // SAFETY: FS_IOC_SETFLAGS reads one long at the pointer given.
        unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&folder),
                libc::FS_IOC_SETFLAGS,
                &flags,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ingest_folder_is_marked_the_top_of_unrelated_subtrees_where_the_filesystem_can() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.prepare_ingest();
        let Some(flags) = inode_flags(&fs::File::open(store.ingest_dir()).unwrap()) else {
            eprintln!(
                "skipped: the filesystem of {:?} has no inode flags",
                dir.path()
            );
            return;
        };
        // ext2/3/4 keep FS_TOPDIR_FL; others may take the ioctl and drop the flag.
        let ext4 = nix::sys::statfs::statfs(dir.path())
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC);
        if ext4 {
            assert_ne!(flags & FS_TOPDIR_FL, 0, "no FS_TOPDIR_FL: {flags:#x}");
        }
        // Again: nothing to do, nothing fails.
        store.prepare_ingest();
    }
}
