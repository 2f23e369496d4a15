//! Applying one image layer to its own empty snapshot folder, the way containerd's overlay
//! snapshotter does.
//!
//! A layer is a tar of the changes to the layers below it (image-spec `layer.md`). Added and changed
//! files are written as they are, keeping mode, owner, times, symlinks, hardlinks, devices and
//! `SCHILY.xattr.*` extended attributes. Deletions are AUFS-style whiteout entries, which overlayfs
//! spells differently, so they are converted:
//!
//! | in the tar                  | in the snapshot (what overlayfs reads)              |
//! |-----------------------------|-----------------------------------------------------|
//! | `dir/.wh.name`              | `dir/name`: a character device 0/0 (a whiteout)     |
//! | `dir/.wh..wh..opq`          | `dir` gets xattr `trusted.overlay.opaque=y`         |
//!
//! The snapshot only ever holds this one layer: lower layers are not copied in, overlayfs stacks
//! them at mount time. A folder the tar needs but does not list is created with the mode and owner
//! it has in the nearest lower layer (as containerd does), so that the upper copy does not change
//! its permissions in the merged view.
//!
//! Nothing is written outside the snapshot: entries with `..` are refused, and so is any entry
//! whose path, or hardlink target, goes through a symlink, since a symlink's target means
//! something only inside the container, never on the host.

use std::collections::{BTreeMap, HashSet};
use std::ffi::CString;
use std::fs::{self, Metadata};
use std::io::{self, BufWriter, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{makedev, Mode, SFlag};
use nix::sys::time::TimeSpec;
use tar::EntryType;

use crate::content::COPY_BUFFER;
use crate::digest::{Digest, HashingReader};
use crate::error::{Error, Result};

/// Name prefix of an AUFS/OCI whiteout entry: `.wh.NAME` deletes `NAME` from the lower layers.
pub const WHITEOUT_PREFIX: &str = ".wh.";
/// Name of the entry that makes its folder opaque: nothing below it in lower layers shows.
pub const OPAQUE_MARKER: &str = ".wh..wh..opq";
/// The xattr overlayfs reads to treat a folder as opaque.
pub const OPAQUE_XATTR: &str = "trusted.overlay.opaque";
/// Prefix of the other AUFS bookkeeping entries (`.wh..wh.plnk`, `.wh..wh.aufs`): skipped.
const AUFS_META_PREFIX: &str = ".wh..wh.";
const PAX_XATTR_PREFIX: &str = "SCHILY.xattr.";

/// What unpacking a layer found out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpacked {
    /// sha256 of the uncompressed tar: the layer's DiffID in the image config.
    pub diff_id: Digest,
    /// Length of the uncompressed tar.
    pub size: u64,
    /// Whether folders the tar leaves out were made, with attributes taken from `lowers`: the
    /// result depends on the layers below as well as on this one.
    pub implied_folders: bool,
}

/// Unpacks the (uncompressed) layer tar `stream` into `dest`, an empty folder, converting whiteouts
/// for overlayfs. `lowers` are the snapshot folders of the layers below, top-most first; they are
/// only read, for the attributes of folders the tar leaves out. `layer` names the layer in errors.
pub fn unpack(stream: impl Read, dest: &Path, lowers: &[PathBuf], layer: &str) -> Result<Unpacked> {
    let mut hashing = HashingReader::new(stream);
    let root_dir = open_folder(dest)?;
    let mut applier = Applier {
        root: dest,
        root_dir: root_dir.as_fd(),
        lowers,
        layer,
        folder_times: BTreeMap::new(),
        implied_folders: false,
        known_folders: HashSet::new(),
    };
    {
        let mut archive = tar::Archive::new(&mut hashing);
        let entries = archive
            .entries()
            .map_err(|e| applier.broken(format!("not a tar archive: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| applier.broken(format!("corrupt tar: {e}")))?;
            applier.apply(&mut entry)?;
        }
    }
    hashing
        .drain()
        .map_err(|e| applier.broken(format!("reading the end of the tar: {e}")))?;
    applier.set_folder_times()?;
    let (diff_id, size) = hashing.finish();
    Ok(Unpacked {
        diff_id,
        size,
        implied_folders: applier.implied_folders,
    })
}

struct Applier<'a> {
    root: &'a Path,
    /// `root` held open: a file, hard link or mtime made from it walks the entry's own path
    /// only, not the store's folders above it each time (busybox's 258 links, an image's
    /// thousands of files).
    root_dir: BorrowedFd<'a>,
    lowers: &'a [PathBuf],
    layer: &'a str,
    /// Folder mtimes are set last: writing into a folder changes its mtime. The last one given
    /// for a folder wins, as tar's last entry does.
    folder_times: BTreeMap<PathBuf, i64>,
    implied_folders: bool,
    /// Folders of this snapshot (relative paths) that this unpack made or found to be real
    /// folders, reached through no symlink: their lstat is not asked again. An entry that
    /// replaces one forgets it and what is below it. A layer's many hard links (busybox's
    /// 400) each walked their parents and their target's before.
    known_folders: HashSet<PathBuf>,
}

impl Applier<'_> {
    fn broken(&self, reason: String) -> Error {
        Error::format(self.layer, reason)
    }

    fn refuse(&self, entry: &Path, reason: impl Into<String>) -> Error {
        Error::UnsafeEntry {
            layer: self.layer.to_owned(),
            entry: entry.display().to_string(),
            reason: reason.into(),
        }
    }

    fn apply<R: Read>(&mut self, entry: &mut tar::Entry<R>) -> Result<()> {
        let raw = entry
            .path()
            .map_err(|e| self.broken(format!("unreadable entry name: {e}")))?
            .into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            EntryType::XGlobalHeader
                | EntryType::XHeader
                | EntryType::GNULongName
                | EntryType::GNULongLink
        ) {
            return Ok(());
        }
        let rel = self.inside(&raw)?;
        if let Some(name) = rel.file_name().and_then(|n| n.to_str()) {
            if name == OPAQUE_MARKER {
                let marker = self.prepare_parents(&rel, &raw)?;
                return set_xattr(marker.parent().unwrap_or(self.root), OPAQUE_XATTR, b"y");
            }
            if name.starts_with(AUFS_META_PREFIX) {
                return Ok(());
            }
            if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
                if hidden.is_empty() || hidden == "." || hidden == ".." {
                    return Err(self.refuse(&raw, "a whiteout that names no file"));
                }
                let hidden = rel.with_file_name(hidden);
                let target = self.prepare_parents(&hidden, &raw)?;
                self.forget(&hidden);
                remove_existing(&target)?;
                return make_whiteout(&target);
            }
        }
        if rel.as_os_str().is_empty() && kind != EntryType::Directory {
            return Err(self.refuse(&raw, "only a folder can stand for the layer's root"));
        }
        let path = self.prepare_parents(&rel, &raw)?;
        let header = entry.header();
        let bad_header =
            |e: io::Error| self.broken(format!("entry {}: bad header: {e}", raw.display()));
        let mode = header.mode().map_err(bad_header)? & 0o7777;
        let uid = header.uid().map_err(bad_header)? as u32;
        let gid = header.gid().map_err(bad_header)? as u32;
        let mtime = header.mtime().map_err(bad_header)? as i64;
        let root = self.root_dir;
        match kind {
            EntryType::Directory => {
                match fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        remove_existing(&path)?;
                        make_folder(&path)?;
                    }
                    Err(_) => make_folder(&path)?,
                }
                if !rel.as_os_str().is_empty() {
                    self.known_folders.insert(rel.clone());
                }
                set_owner(&path, uid, gid)?;
                set_mode(&path, mode)?;
                self.folder_times.insert(path.clone(), mtime);
            }
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                let file = self
                    .replacing(&path, &rel, || create_file_at(root, &rel))
                    .map_err(|e| Error::io("creating", &path, e))?;
                // Big writes for big files, without a big buffer for each of many small ones.
                let buffer = (entry.size() as usize).clamp(8 * 1024, COPY_BUFFER);
                let mut out = BufWriter::with_capacity(buffer, file);
                io::copy(entry, &mut out)
                    .map_err(|e| self.broken(format!("entry {}: {e}", raw.display())))?;
                let file = out
                    .into_inner()
                    .map_err(|e| Error::io("writing", &path, e.into_error()))?;
                // Through the open file: no walk of the path for each attribute.
                std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
                    .map_err(|e| Error::io("fchown", &path, e))?;
                file.set_permissions(fs::Permissions::from_mode(mode))
                    .map_err(|e| Error::io("fchmod", &path, e))?;
            }
            EntryType::Symlink => {
                let target = self.link_name(entry, &raw)?;
                self.replacing(&path, &rel, || std::os::unix::fs::symlink(&target, &path))
                    .map_err(|e| Error::io("creating symlink", &path, e))?;
                set_owner(&path, uid, gid)?;
            }
            EntryType::Link => {
                let target = self.link_name(entry, &raw)?;
                let target_rel = self.inside(&target)?;
                // Through folders known to be real, the link itself is the only check needed:
                // linkat does not follow a symlink target and refuses a folder or a missing
                // name; the walk below then says which it was.
                let through_known = target_rel
                    .parent()
                    .is_some_and(|p| p.as_os_str().is_empty() || self.known_folders.contains(p));
                if through_known && target_rel != rel {
                    let link = || {
                        nix::unistd::linkat(root, &target_rel, root, &rel, AtFlags::empty())
                            .map_err(io::Error::from)
                    };
                    if self.replacing(&path, &rel, link).is_ok() {
                        return Ok(());
                    }
                }
                let existing = lstat_inside(self.root, &target_rel)?;
                match existing {
                    Some(m) if !m.is_dir() => {}
                    _ => {
                        return Err(self.refuse(
                            &raw,
                            format!(
                                "hardlink to {}, which is not a file earlier in this layer",
                                target.display()
                            ),
                        ))
                    }
                }
                if target_rel != rel {
                    self.forget(&rel);
                    remove_existing(&path)?;
                    fs::hard_link(self.root.join(&target_rel), &path)
                        .map_err(|e| Error::io("creating hardlink", &path, e))?;
                }
                return Ok(()); // a hardlink shares its target's inode: no attributes of its own
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                let major = header.device_major().map_err(bad_header)?.unwrap_or(0);
                let minor = header.device_minor().map_err(bad_header)?.unwrap_or(0);
                let sflag = match kind {
                    EntryType::Char => SFlag::S_IFCHR,
                    EntryType::Block => SFlag::S_IFBLK,
                    _ => SFlag::S_IFIFO,
                };
                self.forget(&rel);
                remove_existing(&path)?;
                let dev = makedev(major.into(), minor.into());
                nix::sys::stat::mknod(&path, sflag, Mode::from_bits_truncate(mode), dev)
                    .map_err(|e| Error::sys("mknod", &path, e))?;
                set_owner(&path, uid, gid)?;
                set_mode(&path, mode)?;
            }
            other => {
                return Err(self.refuse(&raw, format!("unsupported tar entry type {other:?}")));
            }
        }
        self.apply_xattrs(entry, &path)?;
        if kind != EntryType::Directory {
            set_mtime_at(root, &rel, mtime).map_err(|e| Error::sys("utimensat", &path, e))?;
        }
        Ok(())
    }

    /// The entry's path relative to the snapshot root; `..` anywhere is refused. A leading `/` or
    /// `./` is dropped, as tar does.
    fn inside(&self, raw: &Path) -> Result<PathBuf> {
        let mut rel = PathBuf::new();
        for component in raw.components() {
            match component {
                Component::Normal(part) => rel.push(part),
                Component::CurDir | Component::RootDir => {}
                Component::ParentDir => {
                    return Err(self.refuse(raw, "a path with `..` could leave the snapshot"))
                }
                Component::Prefix(_) => return Err(self.refuse(raw, "not a Unix path")),
            }
        }
        Ok(rel)
    }

    fn link_name<R: Read>(&self, entry: &tar::Entry<R>, raw: &Path) -> Result<PathBuf> {
        match entry.link_name() {
            Ok(Some(target)) => Ok(target.into_owned()),
            Ok(None) => Err(self.refuse(raw, "a link without a target")),
            Err(e) => Err(self.broken(format!("entry {}: bad link name: {e}", raw.display()))),
        }
    }

    /// Makes sure every folder on the way to `rel` is a real folder of this snapshot (never a
    /// symlink), creating missing ones like the lower layers have them; returns the full path.
    fn prepare_parents(&mut self, rel: &Path, raw: &Path) -> Result<PathBuf> {
        let mut path = self.root.to_path_buf();
        let mut walked = PathBuf::new();
        for component in rel.parent().into_iter().flat_map(Path::components) {
            path.push(component);
            walked.push(component);
            if self.known_folders.contains(&walked) {
                continue;
            }
            match fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(self.refuse(
                        raw,
                        format!(
                            "goes through the symlink {}; refusing to follow it",
                            walked.display()
                        ),
                    ))
                }
                Ok(_) => {
                    return Err(self.refuse(raw, format!("{} is not a folder", walked.display())))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.make_parent(&path, &walked)?
                }
                Err(e) => return Err(Error::io("inspecting", &path, e)),
            }
            self.known_folders.insert(walked.clone());
        }
        Ok(self.root.join(rel))
    }

    /// Makes `path` (`rel` in the snapshot) with `create`, which fails with `AlreadyExists`
    /// when the name is taken: an earlier entry of this layer is then removed, as tar's last
    /// entry wins, and `create` runs again. Trying first spares every new name an lstat.
    fn replacing<T>(
        &mut self,
        path: &Path,
        rel: &Path,
        create: impl Fn() -> io::Result<T>,
    ) -> io::Result<T> {
        match create() {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                self.forget(rel);
                remove_existing(path).map_err(io::Error::other)?;
                create()
            }
            done => done,
        }
    }

    /// `rel` is replaced: it, and what was below it, is no longer a known folder.
    fn forget(&mut self, rel: &Path) {
        if self.known_folders.remove(rel) {
            self.known_folders.retain(|known| !known.starts_with(rel));
        }
    }

    fn make_parent(&mut self, path: &Path, rel: &Path) -> Result<()> {
        self.implied_folders = true;
        let mut like = None;
        for lower in self.lowers {
            if let Some(m) = lstat_inside(lower, rel)? {
                if m.is_dir() {
                    like = Some(m);
                }
                break; // the top-most lower that has the name decides, folder or not
            }
        }
        make_folder(path)?;
        match like {
            Some(m) => {
                set_owner(path, m.uid(), m.gid())?;
                set_mode(path, m.mode() & 0o7777)?;
                self.folder_times.insert(path.to_path_buf(), m.mtime());
            }
            None => set_mode(path, 0o755)?,
        }
        Ok(())
    }

    fn apply_xattrs<R: Read>(&self, entry: &mut tar::Entry<R>, path: &Path) -> Result<()> {
        let Some(extensions) = entry
            .pax_extensions()
            .map_err(|e| self.broken(format!("{}: bad pax header: {e}", path.display())))?
        else {
            return Ok(());
        };
        for extension in extensions {
            let extension = extension
                .map_err(|e| self.broken(format!("{}: bad pax header: {e}", path.display())))?;
            if let Some(name) = extension
                .key()
                .ok()
                .and_then(|k| k.strip_prefix(PAX_XATTR_PREFIX))
            {
                set_xattr(path, name, extension.value_bytes())?;
            }
        }
        Ok(())
    }

    fn set_folder_times(&self) -> Result<()> {
        for (path, mtime) in &self.folder_times {
            // A later entry may have replaced the folder, or a folder above it.
            if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
                set_mtime(path, *mtime)?;
            }
        }
        Ok(())
    }
}

/// `folder` open for the `*at` calls made under it.
fn open_folder(folder: &Path) -> Result<OwnedFd> {
    nix::fcntl::open(
        folder,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::sys("open", folder, e))
}

/// lstat of `rel` under `root`, refusing to follow a symlink on the way; None if absent.
fn lstat_inside(root: &Path, rel: &Path) -> Result<Option<Metadata>> {
    let mut path = root.to_path_buf();
    let mut components = rel.components().peekable();
    while let Some(component) = components.next() {
        path.push(component);
        let m = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("inspecting", &path, e)),
        };
        if components.peek().is_none() {
            return Ok(Some(m));
        }
        if !m.is_dir() {
            return Ok(None);
        }
    }
    fs::symlink_metadata(&path)
        .map(Some)
        .map_err(|e| Error::io("inspecting", &path, e))
}

/// Removes what a later entry of the same layer replaces (tar semantics: the last entry wins).
fn remove_existing(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            fs::remove_dir_all(path).map_err(|e| Error::io("removing replaced folder", path, e))
        }
        Ok(_) => fs::remove_file(path).map_err(|e| Error::io("removing replaced file", path, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("inspecting", path, e)),
    }
}

fn make_folder(path: &Path) -> Result<()> {
    fs::create_dir(path).map_err(|e| Error::io("creating folder", path, e))
}

/// An overlayfs whiteout: a character device with device number 0/0.
fn make_whiteout(path: &Path) -> Result<()> {
    nix::sys::stat::mknod(path, SFlag::S_IFCHR, Mode::empty(), makedev(0, 0))
        .map_err(|e| Error::sys("mknod of an overlay whiteout (char 0/0)", path, e))
}

fn set_owner(path: &Path, uid: u32, gid: u32) -> Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(|e| Error::io("lchown", path, e))
}

/// Sets permission bits; after the owner, because chown clears setuid and setgid.
fn set_mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io("chmod", path, e))
}

/// Creates the regular file `rel` under `root` (the folders on the way are known to be real),
/// for writing; refuses to follow a symlink at `rel`, and to take a file that is there.
fn create_file_at(root: BorrowedFd, rel: &Path) -> io::Result<fs::File> {
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW;
    nix::fcntl::openat(
        root,
        rel,
        flags | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map(fs::File::from)
    .map_err(io::Error::from)
}

/// The mtime (and atime) of `rel` under `root`, not following a symlink at `rel`.
fn set_mtime_at(root: BorrowedFd, rel: &Path, mtime: i64) -> nix::Result<()> {
    let time = TimeSpec::new(mtime, 0);
    nix::sys::stat::utimensat(
        root,
        rel,
        &time,
        &time,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
}

fn set_mtime(path: &Path, mtime: i64) -> Result<()> {
    set_mtime_at(nix::fcntl::AT_FDCWD, path, mtime).map_err(|e| Error::sys("utimensat", path, e))
}

/// lsetxattr(2); nix has no xattr calls, so this goes to libc directly.
pub(crate) fn set_xattr(path: &Path, name: &str, value: &[u8]) -> Result<()> {
    let bad = |_| Error::Unsupported(format!("xattr name {name:?} holds a NUL byte"));
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Unsupported(format!("path {} holds a NUL byte", path.display())))?;
    let c_name = CString::new(name).map_err(bad)?;
    // SAFETY: both strings are NUL-terminated and `value` is valid for its length.
    let rc = unsafe {
        libc::lsetxattr(
            c_path.as_ptr(),
            c_name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Xattr {
            call: "lsetxattr",
            name: name.to_owned(),
            path: path.to_owned(),
            errno: nix::Error::last(),
        })
    }
}

/// lgetxattr(2): the value of xattr `name` on `path`, None if it is not set.
pub fn get_xattr(path: &Path, name: &str) -> Result<Option<Vec<u8>>> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Unsupported(format!("path {} holds a NUL byte", path.display())))?;
    let c_name = CString::new(name)
        .map_err(|_| Error::Unsupported(format!("xattr name {name:?} holds a NUL byte")))?;
    let mut buf = vec![0u8; 256];
    // SAFETY: both strings are NUL-terminated; `buf` is writable for its length.
    let n = unsafe {
        libc::lgetxattr(
            c_path.as_ptr(),
            c_name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let errno = nix::Error::last();
        return if errno == nix::Error::ENODATA {
            Ok(None)
        } else {
            Err(Error::Xattr {
                call: "lgetxattr",
                name: name.to_owned(),
                path: path.to_owned(),
                errno,
            })
        };
    }
    buf.truncate(n as usize);
    Ok(Some(buf))
}

/// Whether `path` is an overlayfs whiteout (a character device 0/0).
pub fn is_whiteout(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    /// A layer tar built entry by entry; names are written raw, so that tests can make the
    /// malicious entries that `tar::Builder` itself refuses to write.
    struct LayerTar(tar::Builder<Vec<u8>>);

    impl LayerTar {
        fn new() -> Self {
            LayerTar(tar::Builder::new(Vec::new()))
        }

        fn entry(
            &mut self,
            name: &str,
            kind: EntryType,
            mode: u32,
            data: &[u8],
            link: Option<&str>,
        ) {
            let mut header = tar::Header::new_gnu();
            header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            header.set_entry_type(kind);
            header.set_mode(mode);
            header.set_uid(1000);
            header.set_gid(2000);
            header.set_mtime(1_000_000_000);
            header.set_size(data.len() as u64);
            if let Some(link) = link {
                header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
            }
            header.set_cksum();
            self.0.append(&header, data).unwrap();
        }

        fn dir(&mut self, name: &str, mode: u32) -> &mut Self {
            self.entry(name, EntryType::Directory, mode, b"", None);
            self
        }

        fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> &mut Self {
            self.entry(name, EntryType::Regular, mode, data, None);
            self
        }

        fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
            self.entry(name, EntryType::Symlink, 0o777, b"", Some(target));
            self
        }

        fn hardlink(&mut self, name: &str, target: &str) -> &mut Self {
            self.entry(name, EntryType::Link, 0o644, b"", Some(target));
            self
        }

        fn bytes(&mut self) -> Vec<u8> {
            std::mem::replace(&mut self.0, tar::Builder::new(Vec::new()))
                .into_inner()
                .unwrap()
        }
    }

    fn unpack_into(tar: &[u8], lowers: &[PathBuf]) -> (tempfile::TempDir, Result<Unpacked>) {
        let dir = tempfile::tempdir().unwrap();
        let result = unpack(tar, dir.path(), lowers, "test-layer");
        (dir, result)
    }

    #[test]
    fn files_keep_mode_owner_time_and_links() {
        let tar = LayerTar::new()
            .dir("usr/", 0o755)
            .dir("usr/bin/", 0o700)
            .file("usr/bin/tool", 0o4755, b"#!/bin/sh\n")
            .symlink("usr/bin/alias", "/usr/bin/tool")
            .hardlink("usr/bin/same", "usr/bin/tool")
            .bytes();
        let (dir, result) = unpack_into(&tar, &[]);
        let unpacked = result.unwrap();
        assert_eq!(
            unpacked.diff_id,
            Digest::of(&tar),
            "the DiffID is the tar's sha256"
        );
        assert_eq!(unpacked.size, tar.len() as u64);
        let root = dir.path();
        let tool = fs::symlink_metadata(root.join("usr/bin/tool")).unwrap();
        assert_eq!(tool.mode() & 0o7777, 0o4755, "setuid survives the chown");
        assert_eq!((tool.uid(), tool.gid()), (1000, 2000));
        assert_eq!(tool.mtime(), 1_000_000_000);
        assert_eq!(tool.nlink(), 2, "the hardlink shares the inode");
        let same = fs::symlink_metadata(root.join("usr/bin/same")).unwrap();
        assert_eq!(same.ino(), tool.ino());
        let alias = root.join("usr/bin/alias");
        assert_eq!(
            fs::read_link(&alias).unwrap(),
            PathBuf::from("/usr/bin/tool")
        );
        let alias_meta = fs::symlink_metadata(&alias).unwrap();
        assert_eq!(
            (alias_meta.uid(), alias_meta.mtime()),
            (1000, 1_000_000_000)
        );
        let bin = fs::symlink_metadata(root.join("usr/bin")).unwrap();
        assert_eq!(bin.mode() & 0o7777, 0o700);
        assert_eq!(
            bin.mtime(),
            1_000_000_000,
            "folder times are set after their content"
        );
    }

    #[test]
    fn whiteouts_become_overlay_whiteouts_and_opaque_folders() {
        let tar = LayerTar::new()
            .dir("etc/", 0o755)
            .file("etc/.wh.passwd", 0o644, b"")
            .dir("var/cache/", 0o755)
            .file("var/cache/.wh..wh..opq", 0o644, b"")
            .file("var/cache/new", 0o644, b"fresh")
            .file(".wh..wh.plnk", 0o644, b"")
            .bytes();
        let (dir, result) = unpack_into(&tar, &[]);
        result.unwrap();
        let root = dir.path();
        let whiteout = root.join("etc/passwd");
        let meta = fs::symlink_metadata(&whiteout).unwrap();
        assert!(
            meta.file_type().is_char_device(),
            "a whiteout is a character device"
        );
        assert_eq!(meta.rdev(), 0, "with device number 0/0");
        assert!(is_whiteout(&whiteout));
        assert!(
            !root.join("etc/.wh.passwd").exists(),
            "the AUFS name is not kept"
        );
        assert_eq!(
            get_xattr(&root.join("var/cache"), OPAQUE_XATTR).unwrap(),
            Some(b"y".to_vec())
        );
        assert!(!root.join("var/cache/.wh..wh..opq").exists());
        assert_eq!(fs::read(root.join("var/cache/new")).unwrap(), b"fresh");
        assert_eq!(get_xattr(&root.join("etc"), OPAQUE_XATTR).unwrap(), None);
        assert!(
            !root.join(".wh..wh.plnk").exists(),
            "AUFS bookkeeping is skipped"
        );
    }

    #[test]
    fn missing_parent_folders_are_made_like_the_lower_layer_has_them() {
        let lower = tempfile::tempdir().unwrap();
        let lower_etc = lower.path().join("etc");
        fs::create_dir(&lower_etc).unwrap();
        fs::set_permissions(&lower_etc, fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::chown(&lower_etc, Some(7), Some(8)).unwrap();
        // umoci writes deletions this way: a whiteout whose folder the tar does not list.
        let tar = LayerTar::new()
            .file("etc/.wh.hello", 0o644, b"")
            .file("opt/new/file", 0o600, b"x")
            .bytes();
        let (dir, result) = unpack_into(&tar, &[lower.path().to_owned()]);
        result.unwrap();
        let etc = fs::symlink_metadata(dir.path().join("etc")).unwrap();
        assert_eq!((etc.mode() & 0o7777, etc.uid(), etc.gid()), (0o750, 7, 8));
        assert!(is_whiteout(&dir.path().join("etc/hello")));
        let opt = fs::symlink_metadata(dir.path().join("opt/new")).unwrap();
        assert_eq!(
            (opt.mode() & 0o7777, opt.uid()),
            (0o755, 0),
            "no lower: 0755 root"
        );
    }

    #[test]
    fn later_entries_replace_earlier_ones() {
        let tar = LayerTar::new()
            .file("a", 0o644, b"first")
            .file("a", 0o600, b"second")
            .dir("b/", 0o755)
            .dir("b/sub/", 0o755)
            .file("b/sub/inner", 0o644, b"")
            .file("b", 0o644, b"now a file")
            .bytes();
        let (dir, result) = unpack_into(&tar, &[]);
        result.unwrap();
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"second");
        assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"now a file");
    }

    #[test]
    fn pax_xattrs_are_applied() {
        let mut builder = tar::Builder::new(Vec::new());
        builder
            .append_pax_extensions([("SCHILY.xattr.user.podlab", &b"layer"[..])])
            .unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_size(2);
        builder
            .append_data(&mut header, "tagged", &b"hi"[..])
            .unwrap();
        let tar = builder.into_inner().unwrap();
        let (dir, result) = unpack_into(&tar, &[]);
        result.unwrap();
        assert_eq!(
            get_xattr(&dir.path().join("tagged"), "user.podlab").unwrap(),
            Some(b"layer".to_vec())
        );
    }

    fn assert_refused(tar: &[u8], outside: &Path) {
        let (_dir, result) = unpack_into(tar, &[]);
        let err = result.unwrap_err();
        assert!(matches!(err, Error::UnsafeEntry { .. }), "{err}");
        assert!(
            !outside.exists(),
            "{} was written outside the snapshot",
            outside.display()
        );
    }

    /// The tar is refused, and `host_file` (outside the snapshot) got no second link.
    fn assert_link_refused(tar: &[u8], host_file: &Path) {
        let (_dir, result) = unpack_into(tar, &[]);
        assert!(
            matches!(result, Err(Error::UnsafeEntry { .. })),
            "{result:?}"
        );
        assert_eq!(fs::symlink_metadata(host_file).unwrap().nlink(), 1);
    }

    #[test]
    fn paths_that_leave_the_snapshot_are_refused() {
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("escaped");
        let dotdot = format!("../../../../../../..{}", victim.display());
        assert_refused(&LayerTar::new().file(&dotdot, 0o644, b"x").bytes(), &victim);

        let through_symlink = LayerTar::new()
            .symlink("link", &outside.path().display().to_string())
            .file("link/escaped", 0o644, b"x")
            .bytes();
        assert_refused(&through_symlink, &victim);

        let relative_symlink = LayerTar::new()
            .symlink("up", "../../../../../../..")
            .file(&format!("up{}", victim.display()), 0o644, b"x")
            .bytes();
        assert_refused(&relative_symlink, &victim);

        let outside_file = outside.path().join("secret");
        fs::write(&outside_file, "host data").unwrap();
        let hardlink_out = LayerTar::new()
            .hardlink(
                "stolen",
                &format!("../../../../../../..{}", outside_file.display()),
            )
            .bytes();
        let (_dir, result) = unpack_into(&hardlink_out, &[]);
        assert!(matches!(result, Err(Error::UnsafeEntry { .. })));
        let hardlink_via_symlink = LayerTar::new()
            .symlink("out", &outside.path().display().to_string())
            .hardlink("stolen", "out/secret")
            .bytes();
        assert_link_refused(&hardlink_via_symlink, &outside_file);
    }

    #[test]
    fn regression_a_folder_replaced_by_a_symlink_is_not_trusted_as_a_folder_again() {
        // The unpack remembers the folders it made; a later entry that turns one into a
        // symlink must make it forget them, or the next file or hard link through the name
        // would follow the symlink out of the snapshot.
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("escaped");
        let outside_file = outside.path().join("secret");
        fs::write(&outside_file, "host data").unwrap();
        let target = outside.path().display().to_string();
        let file_through = LayerTar::new()
            .dir("a", 0o755)
            .file("a/inner", 0o644, b"x")
            .symlink("a", &target)
            .file("a/escaped", 0o644, b"x")
            .bytes();
        assert_refused(&file_through, &victim);
        let link_through = LayerTar::new()
            .dir("a", 0o755)
            .dir("a/b", 0o755)
            .file("a/b/inner", 0o644, b"x")
            .symlink("a", &target)
            .hardlink("stolen", "a/secret")
            .bytes();
        assert_link_refused(&link_through, &outside_file);
        // A whiteout of the folder, then a symlink under its name, the same.
        let whiteout_then_symlink = LayerTar::new()
            .dir("a", 0o755)
            .file("a/inner", 0o644, b"x")
            .file(".wh.a", 0o644, b"")
            .symlink("a", &target)
            .file("a/escaped", 0o644, b"x")
            .bytes();
        assert_refused(&whiteout_then_symlink, &victim);
    }

    #[test]
    fn absolute_paths_are_confined_to_the_snapshot() {
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("absolute");
        let tar = LayerTar::new()
            .file(&victim.display().to_string(), 0o644, b"inside")
            .bytes();
        let (dir, result) = unpack_into(&tar, &[]);
        result.unwrap();
        assert!(!victim.exists(), "nothing was written at the absolute path");
        let confined = dir.path().join(victim.strip_prefix("/").unwrap());
        assert_eq!(fs::read(confined).unwrap(), b"inside");
    }

    #[test]
    fn a_file_over_a_symlink_replaces_the_link_not_its_target() {
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("shadow");
        fs::write(&target, "host secret").unwrap();
        let tar = LayerTar::new()
            .symlink("etc-shadow", &target.display().to_string())
            .file("etc-shadow", 0o600, b"layer content")
            .bytes();
        let (dir, result) = unpack_into(&tar, &[]);
        result.unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "host secret");
        let written = dir.path().join("etc-shadow");
        assert!(fs::symlink_metadata(&written).unwrap().is_file());
        assert_eq!(fs::read(written).unwrap(), b"layer content");
    }

    #[test]
    fn hardlinks_to_absolute_paths_only_reach_files_of_this_layer() {
        let outside = tempfile::tempdir().unwrap();
        let host_file = outside.path().join("passwd");
        fs::write(&host_file, "host").unwrap();
        let tar = LayerTar::new()
            .hardlink("stolen", &host_file.display().to_string())
            .bytes();
        assert_link_refused(&tar, &host_file);
        // The same absolute name, given earlier in the layer, is the layer's own file.
        let tar = LayerTar::new()
            .file("etc/passwd", 0o644, b"layer")
            .hardlink("copy", "/etc/passwd")
            .bytes();
        let (dir, result) = unpack_into(&tar, &[]);
        result.unwrap();
        assert_eq!(fs::read(dir.path().join("copy")).unwrap(), b"layer");
    }

    #[test]
    fn the_root_can_only_be_a_folder() {
        let tar = LayerTar::new()
            .dir("./", 0o700)
            .file("./", 0o644, b"x")
            .bytes();
        let (dir, result) = unpack_into(&tar, &[]);
        assert!(
            matches!(result, Err(Error::UnsafeEntry { .. })),
            "{result:?}"
        );
        let root = fs::symlink_metadata(dir.path()).unwrap();
        assert!(root.is_dir(), "the snapshot folder is still there");
        assert_eq!(
            root.mode() & 0o7777,
            0o700,
            "the root entry's mode applies to the snapshot"
        );
    }

    #[test]
    fn a_corrupt_tar_is_an_error() {
        let mut tar = LayerTar::new().file("a", 0o644, b"content").bytes();
        tar[148] ^= 0xff; // the header checksum
        let (_dir, result) = unpack_into(&tar, &[]);
        assert!(matches!(result, Err(Error::Format { .. })), "{result:?}");
    }
}
