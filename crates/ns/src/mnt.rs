//! Mount namespaces: the mount table a process sees, and the mounts a container root is built of.
//!
//! A new mount namespace starts as a copy of its parent's mount table. Whether later mounts
//! travel between the copies is decided by each mount's *propagation* (shared, slave, private),
//! so the first thing a container does in its new namespace is [`make_rprivate`] on `/`:
//! without it, systemd's default of "shared" would leak the container's mounts to the host.
//!
//! Then a container root is assembled like runc does it: an [`mount_overlay`] of the image
//! layers, `/proc` ([`mount_proc`]), `/sys` ([`mount_sysfs`]), a minimal `/dev` ([`mount_dev`]),
//! volumes ([`bind`], [`mount_tmpfs`]), and finally [`pivot_root`] makes it `/` and lets go of
//! the host's root. [`mounts`] reads back what the kernel actually has (`/proc/self/mountinfo`).
//!
//! Everything here acts on the mount namespace of the calling process; call it in a process that
//! has its own (see [`crate::child`]).

pub mod detached;
pub mod overlay;

use std::os::unix::fs::{symlink, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};
use nix::sys::statvfs::FsFlags;
use serde::{Deserialize, Serialize};

use crate::error::Target;
use crate::{Error, NsKind, Result};

/// One line of `/proc/PID/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountInfo {
    pub mount_id: u32,
    pub parent_id: u32,
    /// The directory of the mounted filesystem that appears at `mount_point` (`/` unless a
    /// bind mount of a subdirectory).
    pub root: PathBuf,
    /// Where it is mounted, relative to the reading process's root.
    pub mount_point: PathBuf,
    /// Per-mount options (`rw,nosuid,relatime`).
    pub options: String,
    pub fs_type: String,
    pub source: String,
    /// As findmnt spells it: `shared`, `slave`, `private`, `unbindable`, or a combination
    /// such as `shared,slave`.
    pub propagation: String,
}

/// The mount table of the calling process (`/proc/self/mountinfo`).
pub fn mounts() -> Result<Vec<MountInfo>> {
    read_mountinfo(Path::new("/proc/self/mountinfo"))
}

/// The mount table of another process, as seen from its mount namespace.
pub fn mounts_of(pid: i32) -> Result<Vec<MountInfo>> {
    read_mountinfo(&PathBuf::from(format!("/proc/{pid}/mountinfo")))
}

/// The caller's mounts at or below `dir` (compared after resolving symlinks in `dir`).
pub fn mounts_below(dir: &Path) -> Result<Vec<MountInfo>> {
    let dir = absolute(dir)?;
    Ok(mounts()?
        .into_iter()
        .filter(|m| m.mount_point.starts_with(&dir))
        .collect())
}

fn read_mountinfo(path: &Path) -> Result<Vec<MountInfo>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
    parse_mountinfo(&text)
        .map_err(|line| Error::Invalid(format!("{}: unreadable line {line:?}", path.display())))
}

/// Parses the text of a mountinfo file; a line it cannot read is returned as the error.
pub fn parse_mountinfo(text: &str) -> std::result::Result<Vec<MountInfo>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| parse_mountinfo_line(line).ok_or_else(|| line.to_string()))
        .collect()
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`
/// (see proc_pid_mountinfo(5)): optional fields until a lone `-`, then type, source, options.
fn parse_mountinfo_line(line: &str) -> Option<MountInfo> {
    let mut fields = line.split(' ');
    let mount_id = fields.next()?.parse().ok()?;
    let parent_id = fields.next()?.parse().ok()?;
    let _major_minor = fields.next()?;
    let root = PathBuf::from(unescape_octal(fields.next()?));
    let mount_point = PathBuf::from(unescape_octal(fields.next()?));
    let options = fields.next()?.to_string();
    let mut tags = Vec::new();
    for field in fields.by_ref() {
        if field == "-" {
            break;
        }
        tags.push(field);
    }
    let fs_type = unescape_octal(fields.next()?);
    let source = unescape_octal(fields.next()?);
    Some(MountInfo {
        mount_id,
        parent_id,
        root,
        mount_point,
        options,
        fs_type,
        source,
        propagation: propagation_of(&tags),
    })
}

fn propagation_of(tags: &[&str]) -> String {
    let mut kinds = Vec::new();
    if tags.iter().any(|t| t.starts_with("shared:")) {
        kinds.push("shared");
    }
    if tags.iter().any(|t| t.starts_with("master:")) {
        kinds.push("slave");
    }
    if tags.contains(&"unbindable") {
        kinds.push("unbindable");
    }
    if kinds.is_empty() {
        kinds.push("private");
    }
    kinds.join(",")
}

/// The kernel writes space, tab, newline and backslash in mountinfo as `\040` `\011` `\012` `\134`.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(value as u8);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` is a mount point in the caller's mount table. A path that does not exist is
/// not one.
///
/// One `statx(2)`: the kernel says whether the file is the root of a mount
/// (`STATX_ATTR_MOUNT_ROOT`, Linux 5.8). An older kernel does not say, and the mount table is
/// searched instead.
pub fn is_mountpoint(path: &Path) -> Result<bool> {
    if let Some(answer) = is_mount_root(path)? {
        return Ok(answer);
    }
    let path = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("resolving", path, e)),
    };
    Ok(mounts()?.iter().any(|m| m.mount_point == path))
}

/// The kernel's `STATX_ATTR_MOUNT_ROOT` for `path` (symlinks followed); None when the kernel
/// does not report that attribute.
fn is_mount_root(path: &Path) -> Result<Option<bool>> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{} holds a NUL byte", path.display())))?;
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: a NUL-terminated path and a buffer of the size the kernel fills.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            0,
            libc::STATX_TYPE,
            stx.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return match nix::Error::last() {
            nix::Error::ENOENT => Ok(Some(false)),
            // No statx at all (seccomp, old kernels): the mount table answers.
            nix::Error::ENOSYS => Ok(None),
            errno => Err(Error::sys_at("statx", mnt_target(path), errno)),
        };
    }
    // SAFETY: statx succeeded, so the kernel filled the buffer.
    let stx = unsafe { stx.assume_init() };
    let mount_root = libc::STATX_ATTR_MOUNT_ROOT as u64;
    Ok((stx.stx_attributes_mask & mount_root != 0).then_some(stx.stx_attributes & mount_root != 0))
}

/// Makes `path` and every mount below it private: mounts made here from now on stay here, and
/// mounts made elsewhere stay away (`mount --make-rprivate`).
pub fn make_rprivate(path: &Path) -> Result<()> {
    set_propagation(path, MsFlags::MS_PRIVATE, "mount(make-rprivate)")
}

/// How mount and unmount events travel between a volume and the host path it shows, as the
/// CRI's `MountPropagation` and runc's `rprivate` / `rslave` / `rshared` have it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Propagation {
    /// Neither way (`rprivate`, the default).
    #[default]
    Private,
    /// From the host into the container only (`rslave`, Kubernetes' HostToContainer).
    Slave,
    /// Both ways (`rshared`, Kubernetes' Bidirectional).
    Shared,
}

impl Propagation {
    pub fn is_private(&self) -> bool {
        *self == Propagation::Private
    }

    /// runc's name of it (`rprivate`, `rslave`, `rshared`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Propagation::Private => "rprivate",
            Propagation::Slave => "rslave",
            Propagation::Shared => "rshared",
        }
    }
}

/// Sets `propagation` on the mount at `path` and every mount below it (`mount --make-rslave`
/// and its kin). A mount becomes a slave of the peer group it was in, so a volume must still be
/// a peer of the host's mount (bound from it, not from a private copy) to be made `rslave`.
pub fn set_rpropagation(path: &Path, propagation: Propagation) -> Result<()> {
    let (kind, call) = match propagation {
        Propagation::Private => (MsFlags::MS_PRIVATE, "mount(make-rprivate)"),
        Propagation::Slave => (MsFlags::MS_SLAVE, "mount(make-rslave)"),
        Propagation::Shared => (MsFlags::MS_SHARED, "mount(make-rshared)"),
    };
    set_propagation(path, kind, call)
}

/// The mount that holds `path` in the caller's mount table: the one whose mount point is the
/// longest prefix of the path with its symlinks resolved (the last one mounted there wins, as
/// it hides the others).
pub fn mount_holding(path: &Path) -> Result<MountInfo> {
    let path = absolute(path)?;
    mounts()?
        .into_iter()
        .filter(|m| path.starts_with(&m.mount_point))
        .fold(None::<MountInfo>, |best, m| match best {
            Some(b) if b.mount_point.as_os_str().len() > m.mount_point.as_os_str().len() => Some(b),
            _ => Some(m),
        })
        .ok_or_else(|| Error::Invalid(format!("no mount holds {}", path.display())))
}

fn set_propagation(path: &Path, kind: MsFlags, call: &'static str) -> Result<()> {
    nix::mount::mount(
        None::<&str>,
        path,
        None::<&str>,
        kind | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| mount_error(call, path, e))
}

/// Bind-mounts `src` (a directory or a file) onto `dst`, which must exist and be of the same
/// kind. Mounts below `src` are not carried along. With `readonly` the new mount is then
/// remounted read-only, keeping the nosuid/nodev/noexec/atime flags it inherited: the kernel
/// refuses to clear those inside a user namespace, so they must be restated.
pub fn bind(src: &Path, dst: &Path, readonly: bool) -> Result<()> {
    nix::mount::mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| mount_error("mount(bind)", dst, e))?;
    if readonly {
        remount_bind_readonly(dst)?;
    }
    Ok(())
}

/// Bind-mounts `src` with every mount below it onto `dst` (`mount --rbind`); with `readonly`
/// only the new top mount is remounted read-only (as [`bind`] does it), the mounts below keep
/// their own flags: runc's non-recursive read-only bind, which kubelet's volumes are.
pub fn rbind(src: &Path, dst: &Path, readonly: bool) -> Result<()> {
    nix::mount::mount(
        Some(src),
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| mount_error("mount(rbind)", dst, e))?;
    if readonly {
        remount_bind_readonly(dst)?;
    }
    Ok(())
}

/// `mount_setattr(2)`'s flag for a whole tree (linux/mount.h).
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// Makes the mount at `path` and every mount below it read-only (a recursive read-only mount,
/// runc's `rro`): `mount_setattr(2)` with `AT_RECURSIVE` and `MOUNT_ATTR_RDONLY` (Linux 5.12+),
/// which, unlike a read-only remount, reaches the submounts too.
pub fn make_readonly_recursive(path: &Path) -> Result<()> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| mount_error("mount_setattr", path, nix::Error::EINVAL))?;
    let rc = detached::mount_setattr(
        libc::AT_FDCWD,
        &c_path,
        AT_RECURSIVE,
        detached::MOUNT_ATTR_RDONLY,
    );
    if rc < 0 {
        return Err(mount_error(
            "mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)",
            path,
            nix::Error::last(),
        ));
    }
    Ok(())
}

/// Whether the kernel has `mount_setattr(2)` (Linux 5.12+), which recursive read-only mounts
/// need: a call with no path fails EBADF or EINVAL there, ENOSYS before.
pub fn recursive_readonly_supported() -> bool {
    // No descriptor, no path, nothing to set: it fails, with ENOSYS only where it is missing.
    let rc = detached::mount_setattr(-1, c"", 0, 0);
    rc == 0 || nix::Error::last() != nix::Error::ENOSYS
}

/// Remounts the bind mount at `dst` read-only, restating the nosuid/nodev/noexec/atime flags it
/// inherited (the kernel refuses to clear those inside a user namespace).
fn remount_bind_readonly(dst: &Path) -> Result<()> {
    let inherited = inherited_mount_flags(dst)?;
    nix::mount::mount(
        None::<&str>,
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | inherited,
        None::<&str>,
    )
    .map_err(|e| mount_error("mount(remount-bind-readonly)", dst, e))
}

/// statvfs(2)'s flag for a `relatime` mount: the kernel's value, which musl's headers leave out.
const ST_RELATIME: libc::c_ulong = 0x1000;

/// The per-mount flags of the mount that holds `path`, as mount(2) flags: what a read-only
/// remount must repeat (the kernel refuses to clear flags locked on a less privileged mount).
pub fn inherited_mount_flags(path: &Path) -> Result<MsFlags> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(|e| mount_error("statvfs", path, e))?;
    let pairs = [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::from_bits_retain(ST_RELATIME), MsFlags::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st, _)| stat.flags().contains(*st))
        .fold(MsFlags::empty(), |acc, (_, ms)| acc | *ms))
}

/// Mounts a fresh tmpfs on `target`. `options` are written as for mount(8): the generic mount
/// flags among them (`ro`, `nosuid`, `nodev`, `noexec`, `noatime`, ...) become mount(2) flags and
/// the rest (`size=64m,mode=1777`) is handed to tmpfs.
pub fn mount_tmpfs(target: &Path, options: &str) -> Result<()> {
    let (flags, data) = split_mount_options(options);
    mount_fs("tmpfs", target, "tmpfs", flags, &data, "mount(tmpfs)")
}

/// Splits mount(8)-style options into mount(2) flags and the filesystem's own data string.
pub fn split_mount_options(options: &str) -> (MsFlags, String) {
    let mut flags = MsFlags::empty();
    let mut data = Vec::new();
    for option in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let flag = match option {
            "ro" => MsFlags::MS_RDONLY,
            "rw" => MsFlags::empty(),
            "nosuid" => MsFlags::MS_NOSUID,
            "nodev" => MsFlags::MS_NODEV,
            "noexec" => MsFlags::MS_NOEXEC,
            "noatime" => MsFlags::MS_NOATIME,
            "nodiratime" => MsFlags::MS_NODIRATIME,
            "relatime" => MsFlags::MS_RELATIME,
            "strictatime" => MsFlags::MS_STRICTATIME,
            "sync" => MsFlags::MS_SYNCHRONOUS,
            "dirsync" => MsFlags::MS_DIRSYNC,
            _ => {
                data.push(option);
                continue;
            }
        };
        flags |= flag;
    }
    (flags, data.join(","))
}

/// Mounts an overlay of `lowers` (read-only; the first is the top-most layer, as the kernel's
/// `lowerdir=` takes them) under the writable `upper` on `target`. `work` is overlayfs's scratch
/// directory and must be empty and on the same filesystem as `upper`. In a user namespace the
/// overlay keeps its metadata in `user.overlay.*` xattrs (`userxattr`), since `trusted.*` ones
/// need root on the host.
pub fn mount_overlay(lowers: &[PathBuf], upper: &Path, work: &Path, target: &Path) -> Result<()> {
    let data = overlay_options(lowers, upper, work, !crate::user::in_initial_userns())?;
    mount_fs(
        "overlay",
        target,
        "overlay",
        MsFlags::empty(),
        &data,
        "mount(overlay)",
    )
}

/// The data string of an overlay mount. The kernel takes at most one page of it, and splits it
/// at `,` and `:`, so paths holding those are refused rather than misread.
pub fn overlay_options(
    lowers: &[PathBuf],
    upper: &Path,
    work: &Path,
    userxattr: bool,
) -> Result<String> {
    overlay_data(lowers, Some((upper, work)), userxattr)
}

/// The data string of a read-only overlay of `lowers` alone (no upper layer, so the kernel
/// wants at least two of them).
pub fn read_only_overlay_options(lowers: &[PathBuf], userxattr: bool) -> Result<String> {
    if lowers.len() < 2 {
        return Err(Error::Invalid(
            "an overlay without an upper layer needs at least two lower directories".into(),
        ));
    }
    overlay_data(lowers, None, userxattr)
}

fn overlay_data(
    lowers: &[PathBuf],
    upper_work: Option<(&Path, &Path)>,
    userxattr: bool,
) -> Result<String> {
    if lowers.is_empty() {
        return Err(Error::Invalid(
            "an overlay mount needs at least one lower directory".into(),
        ));
    }
    let mut lower_list = Vec::new();
    let upper_work_dirs = upper_work.map(|(upper, work)| [upper, work]);
    for dir in lowers
        .iter()
        .map(PathBuf::as_path)
        .chain(upper_work_dirs.into_iter().flatten())
    {
        let text = dir.to_str().ok_or_else(|| {
            Error::Invalid(format!("overlay path {} is not UTF-8", dir.display()))
        })?;
        if text.contains([',', ':', '\\']) {
            return Err(Error::Invalid(format!(
                "overlay path {text:?} holds ',', ':' or '\\', which the overlay options cannot carry"
            )));
        }
    }
    for lower in lowers {
        lower_list.push(lower.display().to_string());
    }
    let mut data = format!("lowerdir={}", lower_list.join(":"));
    if let Some((upper, work)) = upper_work {
        data.push_str(&format!(
            ",upperdir={},workdir={}",
            upper.display(),
            work.display()
        ));
    }
    if userxattr {
        data.push_str(",userxattr");
    }
    let page = 4096;
    if data.len() >= page {
        return Err(Error::Invalid(format!(
            "overlay options are {} bytes, more than the kernel's {page}: use shorter layer paths",
            data.len()
        )));
    }
    Ok(data)
}

/// Mounts a procfs on `target`. It shows the processes of the caller's pid namespace (the one
/// its children are made in), so mount it after entering a new pid namespace. Allowed in a user
/// namespace that owns that pid namespace.
pub fn mount_proc(target: &Path) -> Result<()> {
    mount_fs(
        "proc",
        target,
        "proc",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "",
        "mount(proc)",
    )
}

/// Mounts a sysfs on `target`. The kernel allows it only to a caller whose user namespace owns
/// its network namespace, so inside a user namespace it needs a new network namespace too.
pub fn mount_sysfs(target: &Path, readonly: bool) -> Result<()> {
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if readonly {
        flags |= MsFlags::MS_RDONLY;
    }
    mount_fs("sysfs", target, "sysfs", flags, "", "mount(sysfs)")
}

/// The device files a container's `/dev` gets from the host, as runc's default set.
const HOST_DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Gives `rootfs` a minimal `/dev`: a tmpfs with the host's null, zero, full, random, urandom and
/// tty bind-mounted in (binding, not mknod, so it also works in a user namespace), a private
/// devpts instance on `/dev/pts`, a tmpfs on `/dev/shm`, an mqueue on `/dev/mqueue` when the
/// caller may mount one, and the usual symlinks (`fd`, `stdin`, `stdout`, `stderr`, `ptmx`).
pub fn mount_dev(rootfs: &Path) -> Result<()> {
    let devices = host_devices()
        .into_iter()
        .map(|(name, host)| (name, DeviceFile::Mounted(detached::Source::Path(host))))
        .collect();
    mount_dev_from(rootfs, devices, None)
}

/// The host's device files of `HOST_DEVICES` that exist, by name.
pub fn host_devices() -> Vec<(&'static str, PathBuf)> {
    HOST_DEVICES
        .iter()
        .map(|name| (*name, Path::new("/dev").join(name)))
        .filter(|(_, host)| host.exists())
        .collect()
}

/// The host's character devices of `HOST_DEVICES` that exist, by name, with their numbers
/// (`st_rdev`), to be made anew with [`DeviceFile::Made`].
pub fn host_device_numbers() -> Vec<(&'static str, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    // One stat a device: this is on every container's start.
    HOST_DEVICES
        .iter()
        .filter_map(|name| {
            let meta = std::fs::metadata(Path::new("/dev").join(name)).ok()?;
            meta.file_type()
                .is_char_device()
                .then(|| (*name, meta.rdev()))
        })
        .collect()
}

/// How one of the default device files gets into a `/dev` of [`mount_dev_from`].
pub enum DeviceFile {
    /// A character device made with `mknod` and these numbers, mode 0666, as runc makes a
    /// container's devices outside a user namespace: one system call where a bind is three
    /// (the file to mount on, the tree, the mount), each taking the namespace's lock.
    Made(u64),
    /// The host's file bound by path or attached: the way inside a user namespace, where the
    /// kernel refuses `mknod` of a device.
    Mounted(detached::Source),
}

/// [`mount_dev`] with the device files from `devices` (made, or bound by path, or attached), the
/// tmpfs owned by `owner` (uid, gid as the node numbers them; root when None): a container in a
/// user namespace of its own has its root own its `/dev`, as runc gives it.
pub fn mount_dev_from(
    rootfs: &Path,
    devices: Vec<(&str, DeviceFile)>,
    owner: Option<(u32, u32)>,
) -> Result<()> {
    use nix::sys::stat::{Mode, SFlag};
    let dev = rootfs.join("dev");
    create_dir(&dev)?;
    let mut options = String::from("nosuid,strictatime,mode=755,size=65536k");
    if let Some((uid, gid)) = owner {
        options.push_str(&format!(",uid={uid},gid={gid}"));
    }
    mount_tmpfs(&dev, &options)?;
    for (name, file) in devices {
        let node = dev.join(name);
        match file {
            DeviceFile::Made(rdev) => {
                // 0666 whatever the caller's umask, without a chmod after.
                let umask = nix::sys::stat::umask(Mode::empty());
                let made = nix::sys::stat::mknod(
                    &node,
                    SFlag::S_IFCHR,
                    Mode::from_bits_truncate(0o666),
                    rdev,
                );
                nix::sys::stat::umask(umask);
                made.map_err(|e| mount_error("mknod", &node, e))?;
            }
            DeviceFile::Mounted(source) => {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o666)
                    .open(&node)
                    .map_err(|e| Error::io("creating", &node, e))?;
                source.place(&node, false)?;
            }
        }
    }
    let pts = dev.join("pts");
    create_dir(&pts)?;
    mount_devpts(&pts)?;
    let shm = dev.join("shm");
    create_dir(&shm)?;
    mount_tmpfs(&shm, "nosuid,nodev,noexec,mode=1777,size=65536k")?;
    mount_mqueue_if_allowed(&dev.join("mqueue"))?;
    let links = [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ];
    for (name, to) in links {
        let link = dev.join(name);
        symlink(to, &link).map_err(|e| Error::io("creating symlink", &link, e))?;
    }
    Ok(())
}

/// A devpts instance of the container's own, its ptys owned by group tty (5). Inside a user
/// namespace gid 5 is often not mapped, and the kernel then refuses `gid=5` with EINVAL.
fn mount_devpts(pts: &Path) -> Result<()> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let options = "newinstance,ptmxmode=0666,mode=0620";
    match mount_fs(
        "devpts",
        pts,
        "devpts",
        flags,
        &format!("{options},gid=5"),
        "mount(devpts)",
    ) {
        Err(e) if e.errno() == Some(nix::Error::EINVAL) => {
            mount_fs("devpts", pts, "devpts", flags, options, "mount(devpts)")
        }
        other => other,
    }
}

/// The kernel lets only a caller that owns its ipc namespace mount an mqueue; when podlab runs in
/// a user namespace that shares the host's ipc namespace there is simply no `/dev/mqueue`.
fn mount_mqueue_if_allowed(dir: &Path) -> Result<()> {
    let has_mqueue = std::fs::read_to_string("/proc/filesystems")
        .map(|fs| {
            fs.lines()
                .any(|l| l.split_whitespace().last() == Some("mqueue"))
        })
        .unwrap_or(false);
    if !has_mqueue {
        return Ok(());
    }
    create_dir(dir)?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    match mount_fs("mqueue", dir, "mqueue", flags, "", "mount(mqueue)") {
        Err(e) if e.errno() == Some(nix::Error::EPERM) => {
            std::fs::remove_dir(dir).map_err(|e| Error::io("removing", dir, e))
        }
        other => other,
    }
}

/// Makes `new_root` the caller's `/` and detaches the old root, as runc does: bind `new_root` on
/// itself when it is not yet a mount point (pivot_root(2) wants one), `pivot_root(".", ".")`
/// stacks the old root on top of the new one, which is turned into a slave (so that detaching it
/// cannot propagate an unmount to the host) and detached; then the working directory is `/`.
///
/// The old root is reached through a descriptor of it opened before the pivot (runc's
/// `fchdir(oldroot)`): after `pivot_root(".", ".")` the working directory is still the new
/// root, and `mount(".", MS_SLAVE|MS_REC)` there would turn the new root's own mounts into
/// slaves, an `rshared` volume among them.
///
/// The caller must be in a mount namespace of its own whose `/` is not shared
/// ([`make_rprivate`]), or the kernel answers EINVAL.
pub fn pivot_root(new_root: &Path) -> Result<()> {
    if !is_mountpoint(new_root)? {
        nix::mount::mount(
            Some(new_root),
            new_root,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| mount_error("mount(bind new root onto itself)", new_root, e))?;
    }
    let old_root_fd = std::fs::File::open("/").map_err(|e| Error::io("opening", "/", e))?;
    nix::unistd::chdir(new_root).map_err(|e| mount_error("chdir", new_root, e))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| match e {
        nix::Error::EINVAL => Error::SysExplained {
            call: "pivot_root",
            target: mnt_target(new_root),
            errno: e,
            why: "the caller must be in a mount namespace of its own, with / made private \
                  (make_rprivate) first"
                .into(),
        },
        e => mount_error("pivot_root", new_root, e),
    })?;
    let old_root = Path::new(".");
    nix::unistd::fchdir(&old_root_fd).map_err(|e| mount_error("fchdir(old root)", old_root, e))?;
    drop(old_root_fd);
    set_propagation(old_root, MsFlags::MS_SLAVE, "mount(make-rslave old root)")?;
    nix::mount::umount2(old_root, MntFlags::MNT_DETACH)
        .map_err(|e| mount_error("umount2(old root)", old_root, e))?;
    nix::unistd::chdir("/").map_err(|e| mount_error("chdir", Path::new("/"), e))
}

/// Detaches the mount on `target` (`umount -l`): it disappears from the namespace at once and is
/// freed when no longer in use. A path that is not mounted, or does not exist, is fine.
pub fn unmount(target: &Path) -> Result<()> {
    match nix::mount::umount2(target, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::Error::ENOENT) => Ok(()),
        // Not a mount point (EINVAL), or not ours to unmount when we are not root (EPERM).
        Err(nix::Error::EINVAL | nix::Error::EPERM) if !is_mountpoint(target)? => Ok(()),
        Err(e) => Err(mount_error("umount2", target, e)),
    }
}

/// A temporary directory for mount work that cleans up after itself: on drop, every mount still
/// below it (in the dropping process's namespace) is detached, deepest first, and the directory
/// removed.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Creates `/tmp/<prefix>XXXXXX`.
    pub fn new(prefix: &str) -> Result<Scratch> {
        let template = std::env::temp_dir().join(format!("{prefix}XXXXXX"));
        let path =
            nix::unistd::mkdtemp(&template).map_err(|e| mount_error("mkdtemp", &template, e))?;
        Ok(Scratch { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A directory below the scratch directory, created if missing.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.path.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
        Ok(dir)
    }

    /// Detaches every mount below the scratch directory and removes it.
    pub fn remove(self) -> Result<()> {
        let result = self.clean();
        std::mem::forget(self);
        result
    }

    fn clean(&self) -> Result<()> {
        if !self.path.exists() {
            return Ok(());
        }
        let mut below = mounts_below(&self.path)?;
        below.sort_by_key(|m| std::cmp::Reverse(m.mount_point.components().count()));
        for mount in below {
            unmount(&mount.mount_point)?;
        }
        std::fs::remove_dir_all(&self.path).map_err(|e| Error::io("removing", &self.path, e))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(err) = self.clean() {
            eprintln!("podlab: could not clean up {}: {err}", self.path.display());
        }
    }
}

fn mount_fs(
    source: &str,
    target: &Path,
    fs_type: &str,
    flags: MsFlags,
    data: &str,
    call: &'static str,
) -> Result<()> {
    let data = (!data.is_empty()).then_some(data);
    nix::mount::mount(Some(source), target, Some(fs_type), flags, data)
        .map_err(|e| mount_error(call, target, e))
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(path).map_err(|e| Error::io("resolving", path, e))
}

fn mount_error(call: &'static str, path: &Path, errno: nix::Error) -> Error {
    Error::sys_at(call, mnt_target(path), errno)
}

fn mnt_target(path: &Path) -> Target {
    Target {
        kind: Some(NsKind::Mnt),
        path: Some(path.to_path_buf()),
        pid: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
25 22 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
40 22 0:35 / /tmp/with\\040space rw - tmpfs tmpfs rw,size=64k
41 22 0:36 / /srv rw shared:7 master:3 unbindable - tmpfs none rw
";

    #[test]
    fn mountinfo_fields_are_read() {
        let mounts = parse_mountinfo(SAMPLE).unwrap();
        assert_eq!(mounts.len(), 5);
        let root = &mounts[0];
        assert_eq!((root.mount_id, root.parent_id), (22, 1));
        assert_eq!(root.mount_point, Path::new("/"));
        assert_eq!(root.fs_type, "ext4");
        assert_eq!(root.source, "/dev/vda");
        assert_eq!(root.options, "rw,relatime");
        let bound = &mounts[2];
        assert_eq!(bound.root, Path::new("/mnt1"));
        assert_eq!(bound.mount_point, Path::new("/mnt2"));
    }

    #[test]
    fn propagation_is_named_as_findmnt_does() {
        let mounts = parse_mountinfo(SAMPLE).unwrap();
        let kinds: Vec<_> = mounts.iter().map(|m| m.propagation.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "shared",
                "shared",
                "slave",
                "private",
                "shared,slave,unbindable"
            ]
        );
    }

    #[test]
    fn escaped_spaces_are_decoded() {
        let mounts = parse_mountinfo(SAMPLE).unwrap();
        assert_eq!(mounts[3].mount_point, Path::new("/tmp/with space"));
        assert_eq!(unescape_octal("a\\134b\\011c\\12"), "a\\b\tc\\12");
    }

    #[test]
    fn a_broken_line_is_reported() {
        let err = parse_mountinfo("22 1 254:0 / /\n").unwrap_err();
        assert_eq!(err, "22 1 254:0 / /");
    }

    #[test]
    fn the_real_mountinfo_parses() {
        let mounts = mounts().unwrap();
        assert!(mounts.iter().any(|m| m.mount_point == Path::new("/")));
    }

    #[test]
    fn mount_flags_are_split_from_filesystem_options() {
        let (flags, data) = split_mount_options("nosuid, nodev,mode=1777,ro,size=64k");
        assert_eq!(
            flags,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RDONLY
        );
        assert_eq!(data, "mode=1777,size=64k");
        assert_eq!(split_mount_options(""), (MsFlags::empty(), String::new()));
    }

    #[test]
    fn overlay_options_put_the_first_lower_on_top() {
        let lowers = [PathBuf::from("/l/top"), PathBuf::from("/l/base")];
        let data = overlay_options(&lowers, Path::new("/u"), Path::new("/w"), false).unwrap();
        assert_eq!(data, "lowerdir=/l/top:/l/base,upperdir=/u,workdir=/w");
        let data = overlay_options(&lowers, Path::new("/u"), Path::new("/w"), true).unwrap();
        assert!(data.ends_with(",userxattr"), "{data}");
    }

    #[test]
    fn a_read_only_overlay_has_lowers_alone_and_at_least_two() {
        let lowers = [PathBuf::from("/l/top"), PathBuf::from("/l/base")];
        assert_eq!(
            read_only_overlay_options(&lowers, false).unwrap(),
            "lowerdir=/l/top:/l/base"
        );
        assert!(read_only_overlay_options(&lowers[..1], false).is_err());
    }

    #[test]
    fn overlay_refuses_what_it_cannot_say() {
        let u = Path::new("/u");
        let w = Path::new("/w");
        assert!(overlay_options(&[], u, w, false).is_err());
        assert!(overlay_options(&[PathBuf::from("/a:b")], u, w, false).is_err());
        assert!(overlay_options(&[PathBuf::from("/a")], Path::new("/u,x"), w, false).is_err());
        let long: Vec<_> = (0..200)
            .map(|i| PathBuf::from(format!("/var/lib/podlab/layers/{i:040}")))
            .collect();
        let err = overlay_options(&long, u, w, false).unwrap_err();
        assert!(err.to_string().contains("4096"), "{err}");
    }

    #[test]
    fn the_kernels_mount_root_attribute_agrees_with_the_mount_table() {
        let table = mounts().unwrap();
        // Mounts that a later mount on one of their parents does not hide.
        let visible: Vec<&MountInfo> = table
            .iter()
            .enumerate()
            .filter(|(i, m)| {
                !table[i + 1..].iter().any(|later| {
                    m.mount_point != later.mount_point
                        && m.mount_point.starts_with(&later.mount_point)
                })
            })
            .map(|(_, m)| m)
            .filter(|m| std::fs::canonicalize(&m.mount_point).is_ok_and(|p| p == m.mount_point))
            .collect();
        assert!(!visible.is_empty());
        for mount in visible {
            assert!(is_mountpoint(&mount.mount_point).unwrap(), "{mount:?}");
        }
        let scratch = Scratch::new("podlab-mnt-attr-").unwrap();
        assert_eq!(is_mount_root(scratch.path()).unwrap(), Some(false));
        assert_eq!(
            is_mount_root(&scratch.path().join("missing")).unwrap(),
            Some(false)
        );
        assert_eq!(is_mount_root(Path::new("/")).unwrap(), Some(true));
        scratch.remove().unwrap();
    }

    #[test]
    fn unmounting_what_is_not_mounted_is_fine() {
        let scratch = Scratch::new("podlab-mnt-unit-").unwrap();
        unmount(scratch.path()).unwrap();
        unmount(&scratch.path().join("missing")).unwrap();
        assert!(!is_mountpoint(scratch.path()).unwrap());
        let path = scratch.path().to_path_buf();
        scratch.remove().unwrap();
        assert!(!path.exists());
    }
}
