//! Crash-safe writes and the store's lock: a file is replaced by writing a sibling, fsyncing it and
//! renaming it over the old one (rename is atomic, so readers see the old or the new file, never a
//! part of one), and concurrent podlab processes serialise their changes with `flock`.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, Result};

/// Replaces `path` with `bytes`: write a temporary sibling, fsync it, rename, fsync the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    if let Err(err) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io("writing", &tmp, err));
    }
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io("renaming into place", path, e)
    })?;
    sync_parent(path)
}

/// Makes a rename or unlink inside `path`'s folder durable.
pub fn sync_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// fsyncs a folder, so that the names in it survive a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsyncing folder", dir, e))
}

/// Flushes all data of the filesystem holding `path` (one syscall instead of an fsync per file).
pub fn sync_filesystem(path: &Path) -> Result<()> {
    let dir = File::open(path).map_err(|e| Error::io("opening", path, e))?;
    nix::unistd::syncfs(&dir).map_err(|e| Error::sys("syncfs", path, e))
}

/// A held `flock` on the store's lock file; released when dropped.
pub struct StoreLock {
    _lock: Flock<File>,
}

impl StoreLock {
    /// An exclusive lock if no one holds one; `None` when it would have to wait.
    pub fn try_acquire(path: &Path) -> Result<Option<Self>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("opening lock file", path, e))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(StoreLock { _lock: lock })),
            Err((_, nix::Error::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(Error::sys("flock", path, errno)),
        }
    }

    /// Shared for readers, exclusive for writers; blocks until granted.
    pub fn acquire(path: &Path, exclusive: bool) -> Result<Self> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("opening lock file", path, e))?;
        let arg = if exclusive {
            FlockArg::LockExclusive
        } else {
            FlockArg::LockShared
        };
        loop {
            match Flock::lock(file, arg) {
                Ok(lock) => return Ok(StoreLock { _lock: lock }),
                Err((again, nix::Error::EINTR)) => file = again,
                Err((_, errno)) => return Err(Error::sys("flock", path, errno)),
            }
        }
    }
}
