//! Records kept in memory while their file is unchanged.
//!
//! A long-running caller (`podlab cri`, the node agent) asks for the same records again and
//! again: ContainerStatus and ListContainers read each container's `container.json`, and
//! every call on a sandbox reads its `shim.json`. Parsing one costs tens of microseconds,
//! as much as the gRPC round trip itself; a `statx` costs one. Every record is replaced by a
//! rename ([`crate::state::write_atomic`]), so a new record is a new inode: a cached record
//! is used only while the file still has the inode, modification time and size it had when
//! it was read. Whoever writes a record (this process, a shim, another command) needs to tell
//! nobody.
//!
//! The stamp is taken before the read, so a record replaced between the two is cached under
//! the older stamp and read again at the next call: the cache can be late by one read, never
//! wrong after it.
//!
//! A file system may give a freed inode number to the next file (ext4 does), and stamps a
//! file's times from a clock that ticks every few milliseconds: two writes within one tick
//! could then leave a file with the inode, time and size of a record two versions back. So a
//! record is kept only once its file is older than [`SETTLED`]; a write after that has a later
//! time. Records being written are read each time; the ones asked for again and again, of
//! running containers and sandboxes, are old.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// How old a record's file must be to be kept: many ticks of the file system's clock.
const SETTLED: std::time::Duration = std::time::Duration::from_millis(100);

/// What tells one version of a record's file from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    modified_ns: i128,
    size: u64,
}

impl Stamp {
    fn of(path: &Path) -> std::io::Result<Stamp> {
        let meta = std::fs::metadata(path)?;
        Ok(Stamp {
            inode: meta.ino(),
            modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            size: meta.len(),
        })
    }

    fn settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        now - self.modified_ns >= SETTLED.as_nanos() as i128
    }
}

/// The records of one kind, by path.
#[derive(Debug)]
pub(crate) struct RecordCache<T> {
    entries: Mutex<HashMap<PathBuf, (Stamp, Arc<T>)>>,
}

impl<T> Default for RecordCache<T> {
    fn default() -> Self {
        RecordCache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: DeserializeOwned> RecordCache<T> {
    /// The record at `path` ([`crate::state::read_record`]); None when there is no file.
    pub(crate) fn read(&self, path: &Path) -> Result<Option<Arc<T>>> {
        let stamp = match Stamp::of(path) {
            Ok(stamp) => stamp,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.entries().remove(path);
                return Ok(None);
            }
            Err(e) => return Err(Error::io("reading", path, e)),
        };
        if let Some((cached, record)) = self.entries().get(path) {
            if *cached == stamp {
                return Ok(Some(Arc::clone(record)));
            }
        }
        let Some(record) = crate::state::read_record::<T>(path)? else {
            self.entries().remove(path);
            return Ok(None);
        };
        let record = Arc::new(record);
        if stamp.settled() {
            self.entries()
                .insert(path.to_path_buf(), (stamp, Arc::clone(&record)));
        } else {
            self.entries().remove(path);
        }
        Ok(Some(record))
    }

    /// Forgets the records below `dir` (a removed sandbox's or container's folder).
    pub(crate) fn forget_below(&self, dir: &Path) {
        self.entries().retain(|path, _| !path.starts_with(dir));
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<PathBuf, (Stamp, Arc<T>)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Record {
        n: u32,
    }

    /// Sets the file's modification time a second back, as if written then.
    fn age(path: &Path) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
        file.set_modified(then).unwrap();
    }

    #[test]
    fn a_replaced_record_is_read_again_and_a_removed_one_is_gone() {
        let dir = std::env::temp_dir().join(format!("podlab-record-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("record.json");
        let cache = RecordCache::<Record>::default();
        assert_eq!(cache.read(&path).unwrap(), None);
        crate::state::write_record(&path, &Record { n: 1 }).unwrap();
        // Just written: read again at each call.
        let fresh = cache.read(&path).unwrap().unwrap();
        assert_eq!(fresh.n, 1);
        assert!(!Arc::ptr_eq(&fresh, &cache.read(&path).unwrap().unwrap()));
        age(&path);
        let first = cache.read(&path).unwrap().unwrap();
        // A settled file: the same record, not a second parse.
        assert!(Arc::ptr_eq(&first, &cache.read(&path).unwrap().unwrap()));
        // Same size, written by a rename: a new inode.
        crate::state::write_record(&path, &Record { n: 2 }).unwrap();
        assert_eq!(cache.read(&path).unwrap().unwrap().n, 2);
        age(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(cache.read(&path).unwrap(), None);
        crate::state::write_record(&path, &Record { n: 3 }).unwrap();
        age(&path);
        cache.read(&path).unwrap();
        assert_eq!(cache.entries().len(), 1);
        cache.forget_below(&dir);
        assert!(cache.entries().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
