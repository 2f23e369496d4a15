//! Files that survive a crash of the writer: a whole file is replaced atomically (write a
//! temporary beside it, fsync, rename over, fsync the folder), and the change log only grows by
//! whole lines that are fsynced before anyone is told about them.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Replaces `path` with `bytes`; readers see the old file or the new one, never a mix.
pub(crate) fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().expect("store files live in a folder");
    fs::create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
    let file_name = path.file_name().expect("a file name").to_string_lossy();
    // Dot-names are skipped by listings; only one writer holds the store lock at a time.
    let temporary = dir.join(format!(".{file_name}.tmp"));
    let mut file = File::create(&temporary).map_err(|e| Error::io("create", &temporary, e))?;
    file.write_all(bytes)
        .map_err(|e| Error::io("write", &temporary, e))?;
    file.sync_all()
        .map_err(|e| Error::io("fsync", &temporary, e))?;
    fs::rename(&temporary, path).map_err(|e| Error::io("rename", path, e))?;
    sync_dir(dir)
}

/// Removes `path` if it exists, durably.
pub(crate) fn remove_file(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(path.parent().expect("a folder")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("unlink", path, e)),
    }
}

/// Appends `line` (which ends in `\n`) and fsyncs it.
pub(crate) fn append_line(path: &Path, line: &[u8]) -> Result<()> {
    debug_assert_eq!(line.last(), Some(&b'\n'));
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    file.write_all(line)
        .map_err(|e| Error::io("write", path, e))?;
    file.sync_data().map_err(|e| Error::io("fsync", path, e))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync", dir, e))
}
