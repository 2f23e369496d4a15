//! kubelet's `AtomicWriter` (`pkg/volume/util/atomic_writer.go`): how configMap, secret and
//! downwardAPI volumes hold their files, so that a container never reads half an update.
//!
//! The files are written into a new timestamped folder (`..2026_12_03_11_20_00.1234567`),
//! `..data` is a symlink to it, replaced by renaming a `..data_tmp` symlink over it (rename is
//! atomic), and each top-level name the user sees is a symlink into `..data`:
//!
//! ```text
//! <volume>/podname -> ..data/podname
//! <volume>/labels  -> ..data/labels
//! <volume>/..data  -> ..2026_12_03_11_20_00.1234567
//! ```
//!
//! A payload equal to what `..data` holds writes nothing; names that are no longer in the
//! payload are removed after the switch, and so is the previous timestamped folder.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::volume::VolumeError;

pub const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// One file of a payload: its bytes and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Files by their path relative to the volume.
pub type Payload = BTreeMap<String, FileProjection>;

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError {
    let path = path.to_path_buf();
    move |source| VolumeError::Io { what, path, source }
}

/// kubelet's `validatePath`: relative, no `..` level, not starting with `..`, levels of at most
/// 255 bytes, at most 4096 in all.
fn validate_path(path: &str) -> Result<(), VolumeError> {
    let invalid = |why: String| Err(VolumeError::Object(format!("invalid path: {why}")));
    if path.is_empty() {
        return invalid(format!("must not be empty: {path:?}"));
    }
    if path.starts_with('/') {
        return invalid(format!("must be relative path: {path}"));
    }
    if path.len() > 4096 {
        return invalid("must be less than or equal to 4096 characters".into());
    }
    let levels: Vec<&str> = path.split('/').collect();
    if levels.contains(&"..") {
        return invalid(format!("must not contain '..': {path}"));
    }
    if levels.iter().any(|l| l.len() > 255) {
        return invalid("filenames must be less than or equal to 255 characters".into());
    }
    if levels[0].starts_with("..") && levels[0].len() > 2 {
        return invalid(format!("must not start with '..': {path}"));
    }
    Ok(())
}

/// `filepath.Clean` of a relative path: no empty or `.` levels.
fn clean(path: &str) -> String {
    path.split('/')
        .filter(|l| !l.is_empty() && *l != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Writes `payload` into `target` (which must exist) as kubelet's writer does. `set_perms` runs
/// on the volume after the new files are written and before they become visible (kubelet's
/// fsGroup ownership change). Returns whether anything was written.
pub fn write(
    target: &Path,
    payload: &Payload,
    set_perms: impl FnOnce(&Path) -> Result<(), VolumeError>,
) -> Result<bool, VolumeError> {
    let mut clean_payload = Payload::new();
    for (path, file) in payload {
        validate_path(path)?;
        clean_payload.insert(clean(path), file.clone());
    }
    let data_dir = target.join(DATA_DIR);
    let old_ts = match std::fs::read_link(&data_dir) {
        Ok(link) => Some(link),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("reading the link", &data_dir)(e)),
    };
    let old_ts_path = old_ts.as_ref().map(|t| target.join(t));
    let mut to_remove = BTreeSet::new();
    if let Some(old) = &old_ts_path {
        to_remove = paths_to_remove(&clean_payload, old);
        let same = clean_payload.iter().all(|(path, file)| {
            let on_disk = old.join(path);
            std::fs::read(&on_disk).is_ok_and(|bytes| bytes == file.data)
        });
        if same && to_remove.is_empty() {
            return Ok(false);
        }
    }
    let ts_dir = new_timestamp_dir(target)?;
    let ts_name = ts_dir.file_name().map(PathBuf::from).unwrap_or_default();
    let result = (|| {
        write_payload(&clean_payload, &ts_dir)?;
        set_perms(target)?;
        create_user_visible_files(target, &clean_payload)?;
        let tmp = target.join(DATA_DIR_TMP);
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&ts_name, &tmp).map_err(io("linking", &tmp))?;
        std::fs::rename(&tmp, &data_dir).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io("renaming", &data_dir)(e)
        })
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&ts_dir);
        return Err(e);
    }
    // Only names at the volume's top are links of their own; deeper ones went with `..data`.
    for path in to_remove.iter().filter(|p| !p.contains('/')) {
        let visible = target.join(path);
        std::fs::remove_file(&visible).map_err(io("removing", &visible))?;
    }
    if let Some(old) = old_ts_path {
        std::fs::remove_dir_all(&old).map_err(io("removing", &old))?;
    }
    Ok(true)
}

/// What the old timestamped folder holds that the new payload does not (with every level of
/// the payload's paths counted as present).
fn paths_to_remove(payload: &Payload, old_ts: &Path) -> BTreeSet<String> {
    let mut old = BTreeSet::new();
    collect(old_ts, "", &mut old);
    let mut new = BTreeSet::new();
    for path in payload.keys() {
        let mut sub = path.as_str();
        loop {
            new.insert(sub.to_string());
            match sub.rfind('/') {
                Some(i) => sub = &sub[..i],
                None => break,
            }
        }
    }
    old.difference(&new).cloned().collect()
}

fn collect(dir: &Path, prefix: &str, into: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let relative = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect(&entry.path(), &relative, into);
        }
        into.insert(relative);
    }
}

/// `..YYYY_MM_DD_HH_MM_SS.<random>` (Go's `MkdirTemp` with that prefix), chmod 0755 so that
/// group and others may walk into it whatever the umask.
fn new_timestamp_dir(target: &Path) -> Result<PathBuf, VolumeError> {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::from_second(since_epoch.as_secs() as i64)
        .map_err(|e| VolumeError::Object(format!("the clock: {e}")))?;
    let prefix = now.strftime("..%Y_%m_%d_%H_%M_%S.").to_string();
    let mut seed = since_epoch.subsec_nanos() as u64 ^ ((std::process::id() as u64) << 32) | 1;
    for _ in 0..100 {
        // xorshift: Go's MkdirTemp tries random suffixes until one is free.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let dir = target.join(format!("{prefix}{}", seed % 10_000_000_000));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(io("chmod", &dir))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("creating", &dir)(e)),
        }
    }
    Err(VolumeError::Object(format!(
        "no free timestamped folder in {}",
        target.display()
    )))
}

/// Each file with its mode (chmod'ed past the umask), its folders made as needed.
fn write_payload(payload: &Payload, dir: &Path) -> Result<(), VolumeError> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(io("creating", parent))?;
        }
        std::fs::write(&full, &file.data).map_err(io("writing", &full))?;
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(file.mode & 0o7777))
            .map_err(io("chmod", &full))?;
    }
    Ok(())
}

/// `name -> ..data/name` for each top-level name of the payload that has no link yet.
fn create_user_visible_files(target: &Path, payload: &Payload) -> Result<(), VolumeError> {
    for path in payload.keys() {
        let top = path.split('/').next().unwrap_or(path);
        let visible = target.join(top);
        if std::fs::symlink_metadata(&visible).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(top), &visible)
                .map_err(io("linking", &visible))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: text.as_bytes().to_vec(),
            mode,
        }
    }

    #[test]
    fn files_are_links_into_a_timestamped_folder_swapped_whole() {
        let dir = std::env::temp_dir().join(format!("podlab-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut payload = Payload::new();
        payload.insert("podname".into(), file("web", 0o644));
        payload.insert("k8s/labels".into(), file("app=\"web\"", 0o400));
        assert!(write(&dir, &payload, |_| Ok(())).unwrap());
        let ts = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
        let ts_name = ts.to_string_lossy().into_owned();
        assert!(
            ts_name.starts_with("..20") && ts_name.len() > 22,
            "{ts_name}"
        );
        assert_eq!(
            std::fs::read_link(dir.join("podname")).unwrap(),
            Path::new("..data/podname")
        );
        assert_eq!(
            std::fs::read_link(dir.join("k8s")).unwrap(),
            Path::new("..data/k8s")
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("k8s/labels")).unwrap(),
            "app=\"web\""
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&dir.join("k8s/labels")), 0o400);
        assert_eq!(mode(&dir.join(&ts)), 0o755);

        assert!(
            !write(&dir, &payload, |_| Ok(())).unwrap(),
            "nothing changed"
        );
        payload.remove("k8s/labels");
        payload.insert("podname".into(), file("web-2", 0o644));
        assert!(write(&dir, &payload, |_| Ok(())).unwrap());
        assert_ne!(std::fs::read_link(dir.join(DATA_DIR)).unwrap(), ts);
        assert!(!dir.join(&ts).exists(), "the old folder is gone");
        assert!(
            std::fs::symlink_metadata(dir.join("k8s")).is_err(),
            "k8s is gone"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("podname")).unwrap(),
            "web-2"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_paths_are_refused_with_kubelets_words() {
        let err = |p: &str| validate_path(p).unwrap_err().to_string();
        assert_eq!(err("/etc/x"), "invalid path: must be relative path: /etc/x");
        assert_eq!(err("a/../b"), "invalid path: must not contain '..': a/../b");
        assert_eq!(
            err("..data/x"),
            "invalid path: must not start with '..': ..data/x"
        );
        assert!(validate_path("a/b.c").is_ok());
    }
}
