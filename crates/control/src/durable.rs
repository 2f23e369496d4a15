//! Files that survive a crash of the writer: a whole file is replaced atomically (write a
//! temporary beside it, rename over), and the change log only grows by whole lines.
//!
//! What survives what: every write(2) that returned is in the page cache, so a writer killed
//! at any point (`kill -9`) loses nothing that was committed. Surviving a power loss as well
//! takes fsyncs (of the temporary, the folder, the log line), which cost milliseconds each on a
//! disk; podlab's state is runtime state (every sandbox, namespace and process is gone after a
//! reboot, and its default root `/run/podlab` is a tmpfs on systemd machines), so they are made
//! only when asked for: [`Sync::Power`], `PODLAB_STORE_FSYNC=1`.

/// `PODLAB_STORE_FSYNC=1`: fsync every store write, so that the store also survives a power
/// loss (useful only when `PODLAB_ROOT` is on a disk and kept across reboots).
pub const ENV_FSYNC: &str = "PODLAB_STORE_FSYNC";

/// How durable a write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// Survives the death of any process (the default).
    Process,
    /// Also survives a power loss: fsyncs.
    Power,
}

impl Sync {
    /// [`Sync::Power`] when `PODLAB_STORE_FSYNC` is set to anything but `0`/`false`.
    pub fn from_env() -> Sync {
        match std::env::var(ENV_FSYNC) {
            Ok(v) if !v.is_empty() && v != "0" && v != "false" => Sync::Power,
            _ => Sync::Process,
        }
    }
}

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Replaces `path` with `bytes`; readers see the old file or the new one, never a mix.
pub(crate) fn replace_file(path: &Path, bytes: &[u8], sync: Sync) -> Result<()> {
    stage_file(path, bytes, sync)?.install()
}

/// A file's new content written beside it (`.NAME.tmp`), not yet in its place: the write that
/// needs space is done, the rename that puts it in place needs none.
pub(crate) struct Staged {
    temporary: PathBuf,
    path: PathBuf,
    sync: Sync,
}

impl Staged {
    /// Renames it over the file it replaces.
    pub(crate) fn install(self) -> Result<()> {
        fs::rename(&self.temporary, &self.path).map_err(|e| Error::io("rename", &self.path, e))?;
        sync_dir(self.path.parent().expect("a folder"), self.sync)
    }

    /// Removes it: the change it was for did not happen.
    pub(crate) fn discard(self) {
        let _ = fs::remove_file(&self.temporary);
    }
}

/// Writes `bytes` beside `path`, to be put in its place by [`Staged::install`].
pub(crate) fn stage_file(path: &Path, bytes: &[u8], sync: Sync) -> Result<Staged> {
    let dir = path.parent().expect("store files live in a folder");
    fs::create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
    let file_name = path.file_name().expect("a file name").to_string_lossy();
    // Dot-names are skipped by listings; only one writer holds the store lock at a time.
    let temporary = dir.join(format!(".{file_name}.tmp"));
    // 0600: objects may be Secrets.
    let mut file = std::os::unix::fs::OpenOptionsExt::mode(
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true),
        0o600,
    )
    .open(&temporary)
    .map_err(|e| Error::io("create", &temporary, e))?;
    let written = file
        .write_all(bytes)
        .map_err(|e| Error::io("write", &temporary, e))
        .and_then(|()| match sync {
            Sync::Power => file
                .sync_all()
                .map_err(|e| Error::io("fsync", &temporary, e)),
            Sync::Process => Ok(()),
        });
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(e);
    }
    Ok(Staged {
        temporary,
        path: path.to_owned(),
        sync,
    })
}

/// Cuts the log back to `length` bytes: an append that failed part-way leaves nothing.
pub(crate) fn truncate(path: &Path, length: u64) -> Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|log| log.set_len(length))
        .map_err(|e| Error::io("truncate", path, e))
}

/// Removes `path` if it exists.
pub(crate) fn remove_file(path: &Path, sync: Sync) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(path.parent().expect("a folder"), sync),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("unlink", path, e)),
    }
}

/// Appends `line` (which ends in `\n`) in one write(2), so that readers see it whole or not.
pub(crate) fn append_line(path: &Path, line: &[u8], sync: Sync) -> Result<()> {
    debug_assert_eq!(line.last(), Some(&b'\n'));
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    file.write_all(line)
        .map_err(|e| Error::io("write", path, e))?;
    if sync == Sync::Power {
        file.sync_data().map_err(|e| Error::io("fsync", path, e))?;
    }
    Ok(())
}

fn sync_dir(dir: &Path, sync: Sync) -> Result<()> {
    if sync == Sync::Process {
        return Ok(());
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync", dir, e))
}
