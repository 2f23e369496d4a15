//! ImageService over podlab-image's store, with containerd's view of it: one CRI image per
//! config digest (its id), every name of it a repo tag, and `repository@manifest-digest` its
//! repo digests.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use podlab_image::reference::Reference;
use podlab_image::{Digest, Store};
use tonic::Status;

use crate::proto;
use crate::status::from_image;

/// One image as CRI sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriImage {
    /// The config digest, `sha256:…`.
    pub id: String,
    /// A store name of it, to hand to the runtime.
    pub name: String,
    /// Every store name of it.
    pub names: Vec<String>,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub size: u64,
    /// The config's USER.
    pub user: String,
}

impl CriImage {
    pub fn to_proto(&self) -> proto::Image {
        let (uid, username) = user_of(&self.user);
        proto::Image {
            id: self.id.clone(),
            repo_tags: self.repo_tags.clone(),
            repo_digests: self.repo_digests.clone(),
            size: self.size,
            uid: uid.map(|value| proto::Int64Value { value }),
            username,
            spec: Some(proto::ImageSpec {
                image: self.id.clone(),
                ..Default::default()
            }),
            pinned: false,
        }
    }
}

/// containerd's `getUserFromImage`: a numeric user is a uid, anything else a user name; a group
/// after `:` is not reported.
fn user_of(user: &str) -> (Option<i64>, String) {
    let user = user.split(':').next().unwrap_or_default();
    if user.is_empty() {
        return (None, String::new());
    }
    match user.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, user.to_string()),
    }
}

/// What the server keeps of the image store between calls, so that the status and list calls
/// read no blob: the CRI images as of the index's last change, and what each manifest said
/// (its config digest, size and user), which never changes since a manifest digest names its
/// bytes. The index is the record: one `stat` of it per call says whether the names changed
/// (it is replaced whole on every change, by this server or by another podlab command), and
/// only then is it read again, with only the new manifests' blobs.
#[derive(Debug, Default)]
pub struct ImageCache {
    state: std::sync::Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    /// The index's identity when `images` was made (None: never made, or dropped).
    stamp: Option<IndexStamp>,
    images: std::sync::Arc<Vec<CriImage>>,
    manifests: HashMap<Digest, Described>,
}

/// How many manifests' descriptions the cache keeps when no name points at them any more.
const KEPT_MANIFESTS: usize = 256;

/// What a manifest says, for its CRI image.
#[derive(Debug, Clone)]
struct Described {
    id: String,
    size: u64,
    user: String,
}

/// An index file's identity: a rename of a new file over it changes the inode and the change
/// time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexStamp {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
    size: u64,
}

fn stamp_of(path: &Path) -> Option<IndexStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(IndexStamp {
        dev: meta.dev(),
        ino: meta.ino(),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        size: meta.size(),
    })
}

impl ImageCache {
    /// Every image in the store, grouped by id, sorted by id.
    pub fn list(&self, store: &Store) -> Result<std::sync::Arc<Vec<CriImage>>, Status> {
        // The stamp is taken before the names are read: a change in between makes the next
        // call read them again, never keeps an old list under a new stamp.
        let stamp = stamp_of(store.index_path());
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if stamp.is_some() && state.stamp == stamp {
            return Ok(state.images.clone());
        }
        let names = store.names().map_err(from_image)?;
        let mut by_id: BTreeMap<String, CriImage> = BTreeMap::new();
        for (name, manifest) in &names {
            let described = match state.manifests.get(manifest) {
                Some(described) => described.clone(),
                None => {
                    let (summary, config) = store.describe(name, manifest).map_err(from_image)?;
                    let described = Described {
                        id: summary.id.to_string(),
                        size: summary.size,
                        user: config.user,
                    };
                    state.manifests.insert(manifest.clone(), described.clone());
                    described
                }
            };
            let image = by_id
                .entry(described.id.clone())
                .or_insert_with(|| CriImage {
                    id: described.id.clone(),
                    name: name.clone(),
                    names: Vec::new(),
                    repo_tags: Vec::new(),
                    repo_digests: Vec::new(),
                    size: described.size,
                    user: described.user.clone(),
                });
            image.names.push(name.clone());
            let Ok(reference) = Reference::parse(name) else {
                continue;
            };
            if reference.tag.is_some() && reference.digest.is_none() {
                image.repo_tags.push(name.clone());
            }
            let digest = format!("{}@{}", reference.repository(), manifest);
            if !image.repo_digests.contains(&digest) {
                image.repo_digests.push(digest);
            }
        }
        for image in by_id.values_mut() {
            image.repo_tags.sort();
            image.repo_digests.sort();
        }
        // A manifest's description never changes (its digest names its content), so it is
        // kept after its last name goes: kubelet and critest pull an image again after removing
        // it, and the store need not be read for it then. Past a bound, only what names point
        // at is kept.
        if state.manifests.len() > KEPT_MANIFESTS {
            state
                .manifests
                .retain(|digest, _| names.iter().any(|(_, d)| d == digest));
        }
        state.images = std::sync::Arc::new(by_id.into_values().collect());
        state.stamp = stamp;
        Ok(state.images.clone())
    }

    /// The image a CRI reference names: an id (`sha256:…` config digest, or its 64 hex
    /// digits), a manifest digest, `name@digest` or a name; None when the store has none.
    pub fn find(&self, store: &Store, reference: &str) -> Result<Option<CriImage>, Status> {
        if reference.is_empty() {
            return Ok(None);
        }
        let images = self.list(store)?;
        Ok(find_in(&images, reference))
    }
}

/// [`ImageCache::find`] in a list of images.
fn find_in(images: &[CriImage], reference: &str) -> Option<CriImage> {
    let bare = reference.strip_prefix("sha256:").unwrap_or(reference);
    let is_digest = bare.len() == 64 && bare.bytes().all(|b| b.is_ascii_hexdigit());
    if is_digest {
        let id = format!("sha256:{bare}");
        if let Some(image) = images.iter().find(|i| i.id == id) {
            return Some(image.clone());
        }
        let manifest = format!("@{id}");
        return images
            .iter()
            .find(|i| i.repo_digests.iter().any(|d| d.ends_with(&manifest)))
            .cloned();
    }
    let parsed = Reference::parse(reference).ok()?;
    if let Some(digest) = &parsed.digest {
        let wanted = match &parsed.tag {
            // name:tag@digest: the digest decides.
            Some(_) => format!("{}@{digest}", parsed.repository()),
            None => parsed.to_string(),
        };
        return images
            .iter()
            .find(|i| i.repo_digests.contains(&wanted))
            .cloned();
    }
    let name = parsed.to_string();
    images.iter().find(|i| i.repo_tags.contains(&name)).cloned()
}

/// RemoveImage: every name of the image goes (containerd removes all its references).
/// RemoveImage's first half: each of the image's names removed (its content is left to the
/// store's garbage collection).
///
/// The names' removal is made durable by the garbage collection that must follow (see
/// [`Store::untag_until_collected`]): one folder fsync fewer before RemoveImage's answer.
pub fn untag(store: &Store, image: &CriImage) -> Result<(), Status> {
    for name in &image.names {
        match store.untag_until_collected(name) {
            Ok(()) | Err(podlab_image::Error::NotFound { .. }) => {}
            Err(e) => return Err(from_image(e)),
        }
    }
    Ok(())
}

/// ImageFsInfo's count of the snapshots folder, each snapshot walked once.
///
/// A snapshot comes into the folder by one `rename` of a folder already complete, is never
/// written again (its name is its content's ChainID) and leaves by one `rename`: so what it
/// uses is known once it has been walked, as containerd's snapshotter records a snapshot's
/// usage when it commits it. A call lists the folder, walks only the snapshots it has not
/// seen and forgets the ones gone: kubelet's periodic ImageFsInfo (and crictl's, at each
/// command) costs one listing of the folder instead of a `stat` of every file of every image.
#[derive(Debug, Default)]
pub struct SnapshotsUsage {
    walked: std::sync::Mutex<HashMap<std::ffi::OsString, (u64, u64)>>,
}

impl SnapshotsUsage {
    /// Bytes and inodes used by `snapshots` and everything below it.
    pub fn of(&self, snapshots: &Path) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt;
        let Ok(folder) = std::fs::symlink_metadata(snapshots) else {
            return (0, 0);
        };
        let (mut bytes, mut inodes) = (folder.blocks() * 512, 1);
        let Ok(entries) = std::fs::read_dir(snapshots) else {
            return (bytes, inodes);
        };
        let mut walked = self.walked.lock().unwrap_or_else(|e| e.into_inner());
        let mut present = HashMap::with_capacity(walked.len());
        for entry in entries.flatten() {
            let name = entry.file_name();
            let used = match walked.remove(&name) {
                Some(used) => used,
                None => usage(&entry.path()),
            };
            bytes += used.0;
            inodes += used.1;
            present.insert(name, used);
        }
        *walked = present;
        (bytes, inodes)
    }
}

/// Bytes and inodes used below `dir` (a container's upper folder, a snapshot), each inode
/// counted once.
pub fn usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    let mut inodes = 0;
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = std::collections::HashSet::new();
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        inodes += 1;
        bytes += meta.blocks() * 512;
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    (bytes, inodes)
}

/// `podlab cri --trace` of a PullImage: the pull's steps as it reports them, printed below the
/// RPC's line, each with the time since the step before (as the pod phases of the other RPCs).
pub(crate) struct PullTrace {
    marks: std::sync::Mutex<Vec<(std::time::Instant, String)>>,
}

impl PullTrace {
    pub fn start() -> PullTrace {
        PullTrace {
            marks: std::sync::Mutex::new(vec![(std::time::Instant::now(), String::new())]),
        }
    }

    fn mark(&self, step: String) {
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        marks.push((std::time::Instant::now(), step));
    }

    /// Marks the end (`step`: what was done since the last step) and prints every step.
    pub fn print(&self, step: &str) {
        self.mark(step.to_owned());
        let marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        for pair in marks.windows(2) {
            let ms = pair[1].0.duration_since(pair[0].0).as_secs_f64() * 1e3;
            crate::service::print_step(&pair[1].1, "pull", ms);
        }
    }
}

impl podlab_image::pull::Progress for PullTrace {
    fn report(&self, event: &podlab_image::pull::ProgressEvent) {
        use podlab_image::pull::ProgressEvent;
        let step = match event {
            ProgressEvent::Holding => "store held against collections".to_owned(),
            ProgressEvent::Resolved { layers, .. } => {
                format!("manifest resolved ({layers} layers)")
            }
            ProgressEvent::BlobDone {
                digest,
                fetched: true,
                unpacked,
                ..
            } => format!(
                "blob {} fetched{}",
                digest.short(),
                if *unpacked { " and unpacked" } else { "" }
            ),
            ProgressEvent::BlobDone { digest, .. } => {
                format!("blob {} there already", digest.short())
            }
            ProgressEvent::BlobWaiting { digest } => {
                format!("blob {}: another pull has it", digest.short())
            }
            ProgressEvent::Unpacking => "every blob here".to_owned(),
            ProgressEvent::BlobStarted { .. } | ProgressEvent::BlobProgress { .. } => return,
        };
        self.mark(step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, usize)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, size) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, vec![7u8; *size]).unwrap();
        }
        dir
    }

    #[test]
    fn the_snapshots_usage_adds_up_to_a_walk_of_the_whole_folder() {
        let snapshots = tree(&[
            ("a/bin/sh", 10_000),
            ("a/etc/passwd", 100),
            ("b/lib", 70_000),
        ]);
        std::fs::create_dir(snapshots.path().join("empty")).unwrap();
        std::fs::hard_link(
            snapshots.path().join("a/bin/sh"),
            snapshots.path().join("a/bin/ls"),
        )
        .unwrap();
        let whole = usage(snapshots.path());
        assert_eq!(
            whole.1, 9,
            "the folder, a, a/bin, sh (once), a/etc, passwd, b, lib, empty"
        );
        assert_eq!(SnapshotsUsage::default().of(snapshots.path()), whole);
    }

    #[test]
    fn regression_image_fs_info_walked_every_file_of_every_snapshot_at_each_call() {
        let snapshots = tree(&[("a/bin/sh", 10_000), ("b/lib", 70_000)]);
        let usage = SnapshotsUsage::default();
        let first = usage.of(snapshots.path());

        // A snapshot is never written once it is in place: a file slipped into one already
        // counted is not seen, which shows it was not walked again.
        std::fs::write(snapshots.path().join("a/bin/ls"), [0u8; 9000]).unwrap();
        assert_eq!(usage.of(snapshots.path()), first);

        // A snapshot renamed in is walked; one renamed away is forgotten.
        let c = tree(&[("c/usr/bin/env", 5000)]);
        std::fs::rename(c.path().join("c"), snapshots.path().join("c")).unwrap();
        let with_c = usage.of(snapshots.path());
        assert_eq!(with_c.1, first.1 + 4, "c, c/usr, c/usr/bin, env");
        assert!(with_c.0 > first.0);
        std::fs::remove_dir_all(snapshots.path().join("a")).unwrap();
        let without_a = usage.of(snapshots.path());
        assert_eq!(
            without_a.1,
            with_c.1 - 3,
            "a, a/bin and sh, as a was counted"
        );
        assert_eq!(
            without_a,
            SnapshotsUsage::default().of(snapshots.path()),
            "nothing of a is remembered"
        );
    }

    #[test]
    fn users_are_uids_or_names_as_containerd_reports_them() {
        assert_eq!(user_of(""), (None, String::new()));
        assert_eq!(user_of("1002"), (Some(1002), String::new()));
        assert_eq!(user_of("1003:1004"), (Some(1003), String::new()));
        assert_eq!(user_of("www-data"), (None, "www-data".into()));
        assert_eq!(user_of("www-data:1004"), (None, "www-data".into()));
    }
}
