//! Mounts made in one mount namespace and attached in another: the new mount API
//! (`open_tree(2)`, `fsopen(2)`/`fsmount(2)`, `move_mount(2)`, Linux 5.2+).
//!
//! `unshare(CLONE_NEWNS)` copies the caller's whole mount table, and making it private and
//! detaching the old root after `pivot_root` walk all of it again: on a node with 500 pods (and
//! their namespace pins, `/dev/shm`s and the other runtimes' overlays) that is thousands of
//! mounts, about a microsecond each, three times per container. A container whose mounts are
//! all made *detached* in the node's namespace first ([`Detached::bind`], [`Detached::overlay`])
//! can instead enter a small namespace (a tmpfs with an empty `/rootfs`), copy that, and attach
//! them there ([`Detached::attach`]): its cost no longer grows with the node's mount table.
//!
//! A detached mount belongs to no namespace until attached; the kernel lets a process attach it
//! in whatever mount namespace it is in then. Paths (bind sources, overlay layers) are resolved
//! when the detached mount is made, in the namespace the caller is in at that moment.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::user::IdMapping;
use crate::{Error, Result};

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
pub(super) const MOUNT_ATTR_RDONLY: u64 = 1;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
pub(super) struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(2)`: sets `attr_set` on the mount at `dirfd`/`path` (`flags`: `AT_EMPTY_PATH`,
/// `AT_RECURSIVE`); the raw return value.
pub(super) fn mount_setattr(
    dirfd: libc::c_int,
    path: &std::ffi::CStr,
    flags: libc::c_uint,
    attr_set: u64,
) -> libc::c_long {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a correctly sized mount_attr, alive for the call; the
    // kernel checks the descriptor.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    }
}

/// A mount not attached to any mount namespace yet.
#[derive(Debug)]
pub struct Detached {
    fd: OwnedFd,
    /// What it is, for error messages (the bind source, or `overlay`).
    what: PathBuf,
}

impl Detached {
    /// A copy of the mount at `src` (`mount --bind src`, not recursive), read-only when
    /// `readonly` (the other flags it has are kept).
    pub fn bind(src: &Path, readonly: bool) -> Result<Detached> {
        Detached::clone_tree(src, readonly, 0)
    }

    /// A copy of the mount at `src` with every mount below it (`mount --rbind src`), as
    /// kubelet's and containerd's volume mounts are; with `readonly` only the top one is made
    /// read-only, the mounts below keep their own flags (a non-recursive read-only bind).
    pub fn rbind(src: &Path, readonly: bool) -> Result<Detached> {
        Detached::clone_tree(src, readonly, libc::AT_RECURSIVE as libc::c_uint)
    }

    fn clone_tree(src: &Path, readonly: bool, recursive: libc::c_uint) -> Result<Detached> {
        let path = c_path(src)?;
        // SAFETY: a NUL-terminated path and plain flags; the kernel returns a new descriptor.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                path.as_ptr(),
                OPEN_TREE_CLONE | recursive | libc::O_CLOEXEC as libc::c_uint,
            )
        };
        let detached = Detached {
            fd: owned(fd, "open_tree(OPEN_TREE_CLONE)", src)?,
            what: src.to_owned(),
        };
        if readonly {
            detached.set_readonly()?;
        }
        Ok(detached)
    }

    /// An overlay of `lowers` (the first is the top-most) under `upper`, as
    /// [`super::mount_overlay`] mounts it, but not yet anywhere.
    pub fn overlay(lowers: &[PathBuf], upper: &Path, work: &Path) -> Result<Detached> {
        let data = super::overlay_options(lowers, upper, work, !crate::user::in_initial_userns())?;
        Detached::overlay_with(&data, upper)
    }

    /// [`Detached::overlay`] for a container in the user namespace `userns`, as containerd's
    /// overlay snapshotter makes it: overlayfs itself cannot be idmapped, its layers can. Each
    /// lower layer is a copy idmapped to `userns` (a file the image gives to root is root's
    /// inside), named to the kernel as `/proc/self/fd/N` while the overlay is made. The upper
    /// and work folders are not: they must belong to the namespace's root already.
    pub fn overlay_idmapped(
        lowers: &[PathBuf],
        upper: &Path,
        work: &Path,
        userns: BorrowedFd<'_>,
    ) -> Result<Detached> {
        let (named, held) = idmapped_layers(lowers, userns)?;
        let data = super::overlay_options(&named, upper, work, false)?;
        let overlay = Detached::overlay_with(&data, upper);
        drop(held);
        overlay
    }

    /// Idmaps this mount to `userns` (`mount_setattr(MOUNT_ATTR_IDMAP)`, Linux 5.12, and a
    /// filesystem that allows it: ext4, xfs, btrfs, tmpfs since 6.3; not overlayfs): a file of
    /// uid N on disk is seen, through this mount, as the uid that N is inside `userns`.
    pub fn set_idmap(&self, userns: BorrowedFd<'_>) -> Result<()> {
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: userns.as_raw_fd() as u64,
        };
        // SAFETY: a live mount descriptor, an empty path and a correctly sized mount_attr.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                self.fd.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH as libc::c_uint,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        check(rc, "mount_setattr(MOUNT_ATTR_IDMAP)", &self.what)
    }

    /// An image's layers (the first is the top-most) as one read-only mount, not yet anywhere:
    /// an overlay without an upper layer, or a read-only bind of its one layer (overlayfs
    /// wants two lower layers when it has no upper one). An image volume's content.
    ///
    /// With `userns`, its files are seen as that user namespace numbers them: the one layer's
    /// bind idmapped, or each layer of the overlay (see [`Detached::overlay_idmapped`]).
    pub fn image(lowers: &[PathBuf], userns: Option<BorrowedFd<'_>>) -> Result<Detached> {
        let mount = match (lowers, userns) {
            ([one], userns) => {
                let bind = Detached::bind(one, true)?;
                if let Some(userns) = userns {
                    bind.set_idmap(userns)?;
                }
                bind
            }
            (_, None) => {
                let userxattr = !crate::user::in_initial_userns();
                let data = super::read_only_overlay_options(lowers, userxattr)?;
                Detached::overlay_with(&data, lowers.first().map_or(Path::new(""), |p| p))?
            }
            (_, Some(userns)) => {
                let (named, held) = idmapped_layers(lowers, userns)?;
                let data = super::read_only_overlay_options(&named, false)?;
                let overlay =
                    Detached::overlay_with(&data, lowers.first().map_or(Path::new(""), |p| p));
                drop(held);
                overlay?
            }
        };
        mount.set_readonly()?;
        Ok(mount)
    }

    /// A copy of the file or folder `relative` inside this mount, read-only if this one is,
    /// not yet anywhere. `relative` is resolved with this mount as its root
    /// (`openat2(RESOLVE_IN_ROOT)`), so that an image's symlinks, absolute ones included,
    /// cannot lead out of it, as a subPath must not.
    pub fn sub_tree(&self, relative: &Path) -> Result<Detached> {
        let path = c_path(relative)?;
        // SAFETY: `open_how` is plain integers, for which zero is valid.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_XDEV;
        // SAFETY: a live descriptor, a NUL-terminated path and an `open_how` of the size given.
        let found = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        let found = owned(found, "openat2(RESOLVE_IN_ROOT)", relative)?;
        // SAFETY: a live descriptor with an empty path; the kernel returns a new descriptor.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                found.as_raw_fd(),
                c"".as_ptr(),
                OPEN_TREE_CLONE | (libc::AT_EMPTY_PATH | libc::O_CLOEXEC) as libc::c_uint,
            )
        };
        Ok(Detached {
            fd: owned(fd, "open_tree(OPEN_TREE_CLONE)", relative)?,
            what: self.what.join(relative),
        })
    }

    /// Whether the mount's root is a folder (a bind of a file is not).
    pub fn is_dir(&self) -> bool {
        // SAFETY: fstat into a zeroed stat of a live descriptor.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::fstat(self.fd.as_raw_fd(), &mut stat) };
        rc == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFDIR
    }

    /// An overlay made from its data string (`lowerdir=...[,upperdir=...,workdir=...]`);
    /// `named` is the path its errors name.
    fn overlay_with(data: &str, named: &Path) -> Result<Detached> {
        let what = Path::new("overlay");
        // SAFETY: a NUL-terminated name; the kernel returns a new descriptor.
        let fs = unsafe { libc::syscall(libc::SYS_fsopen, c"overlay".as_ptr(), FSOPEN_CLOEXEC) };
        let fs = owned(fs, "fsopen(overlay)", what)?;
        // fsconfig(2) takes at most 255 bytes per string value (the kernel's strndup_user
        // limit; longer is EINVAL), where mount(2)'s data string may have a page: a deep
        // podlab root makes `lowerdir` or even `upperdir` longer than that. Such values go as
        // one `lowerdir+` per layer (Linux 6.8+), and a path still too long as
        // `/proc/self/fd/N` of a descriptor held open until the overlay is created.
        let mut held = Vec::new();
        for option in data.split(',') {
            let (key, value) = match option.split_once('=') {
                Some((key, value)) => (key, Some(value)),
                None => (option, None),
            };
            let Some(value) = value else {
                set_overlay_option(&fs, key, None)?;
                continue;
            };
            if value.len() <= FSCONFIG_VALUE_MAX {
                set_overlay_option(&fs, key, Some(value))?;
            } else if key == "lowerdir" {
                for layer in value.split(':') {
                    let layer = short_path(layer, &mut held)?;
                    set_overlay_option(&fs, "lowerdir+", Some(&layer))?;
                }
            } else {
                let short = short_path(value, &mut held)?;
                set_overlay_option(&fs, key, Some(&short))?;
            }
        }
        // SAFETY: as above, with no key.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_char>(),
                0,
            )
        };
        check(rc, "fsconfig(FSCONFIG_CMD_CREATE overlay)", named)?;
        drop(held);
        // SAFETY: a created fs context; the kernel returns a new mount descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0) };
        Ok(Detached {
            fd: owned(fd, "fsmount(overlay)", named)?,
            what: what.to_owned(),
        })
    }

    fn set_readonly(&self) -> Result<()> {
        let rc = mount_setattr(
            self.fd.as_raw_fd(),
            c"",
            libc::AT_EMPTY_PATH as libc::c_uint,
            MOUNT_ATTR_RDONLY,
        );
        check(rc, "mount_setattr(MOUNT_ATTR_RDONLY)", &self.what)
    }

    /// Attaches the mount on `target` (which must exist) in the caller's mount namespace now.
    pub fn attach(self, target: &Path) -> Result<()> {
        let to = c_path(target)?;
        // SAFETY: a live mount descriptor with an empty path, and a NUL-terminated target.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                self.fd.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        check(rc, "move_mount", target)
    }
}

/// Whether the kernel has the new mount API (`fsopen(2)`, `open_tree(2)`; Linux 5.2), and
/// lets the caller use it (a seccomp filter, or an emulator such as valgrind, may answer
/// ENOSYS). Callers that can do without detached mounts check this first.
pub fn supported() -> Result<()> {
    // SAFETY: a NUL-terminated name; the kernel returns a new descriptor.
    let fs = unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) };
    drop(owned(fs, "fsopen(tmpfs)", Path::new("tmpfs"))?);
    drop(Detached::bind(Path::new("/"), false)?);
    Ok(())
}

/// A copy of each layer idmapped to `userns`, and the names an overlay made while they are
/// held takes them by (`/proc/self/fd/N`).
fn idmapped_layers(
    lowers: &[PathBuf],
    userns: BorrowedFd<'_>,
) -> Result<(Vec<PathBuf>, Vec<Detached>)> {
    let mut held = Vec::with_capacity(lowers.len());
    let mut named = Vec::with_capacity(lowers.len());
    for lower in lowers {
        let copy = Detached::bind(lower, false)?;
        copy.set_idmap(userns)?;
        named.push(PathBuf::from(format!(
            "/proc/self/fd/{}",
            copy.fd.as_raw_fd()
        )));
        held.push(copy);
    }
    Ok((named, held))
}

/// Whether a copy of the mount at `path` can be idmapped to a new user namespace (the kernel
/// makes user namespaces, has `mount_setattr(2)`, and the filesystem there allows idmapped
/// mounts), tried with a namespace made for it.
pub fn idmap_supported(path: &Path) -> bool {
    let probe = IdMapping {
        inside: 0,
        outside: 65_536,
        count: 65_536,
    };
    let Ok(userns) = crate::user::new_mapped(&[probe], &[probe]) else {
        return false;
    };
    Detached::bind(path, false).is_ok_and(|copy| copy.set_idmap(userns.as_fd()).is_ok())
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{} holds a NUL byte", path.display())))
}

/// The longest string value fsconfig(2) takes (it copies at most 256 bytes, NUL included).
const FSCONFIG_VALUE_MAX: usize = 255;

/// One `FSCONFIG_SET_STRING` (or `FSCONFIG_SET_FLAG` without a value) of an overlay context.
fn set_overlay_option(fs: &OwnedFd, key: &str, value: Option<&str>) -> Result<()> {
    let key_c = CString::new(key).map_err(|_| Error::Invalid(format!("{key:?}")))?;
    let value_c = value
        .map(|v| CString::new(v).map_err(|_| Error::Invalid(format!("{v:?}"))))
        .transpose()?;
    let (cmd, value_ptr) = match &value_c {
        Some(v) => (FSCONFIG_SET_STRING, v.as_ptr()),
        None => (FSCONFIG_SET_FLAG, std::ptr::null()),
    };
    // SAFETY: a live fs-context descriptor and NUL-terminated key and value.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            cmd,
            key_c.as_ptr(),
            value_ptr,
            0,
        )
    };
    check(rc, "fsconfig(overlay)", Path::new(key))
}

/// `path` itself when fsconfig(2) can take it, else `/proc/self/fd/N` of an `O_PATH`
/// descriptor of it, kept in `held` (the overlay resolves it before the descriptor closes).
fn short_path(path: &str, held: &mut Vec<OwnedFd>) -> Result<String> {
    if path.len() <= FSCONFIG_VALUE_MAX {
        return Ok(path.to_owned());
    }
    let fd = nix::fcntl::open(
        Path::new(path),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| super::mount_error("open(O_PATH) of an overlay layer", Path::new(path), e))?;
    let short = format!("/proc/self/fd/{}", fd.as_raw_fd());
    held.push(fd);
    Ok(short)
}

fn owned(rc: libc::c_long, call: &'static str, path: &Path) -> Result<OwnedFd> {
    check(rc, call, path)?;
    // SAFETY: the call succeeded, so `rc` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) })
}

fn check(rc: libc::c_long, call: &'static str, path: &Path) -> Result<()> {
    if rc < 0 {
        return Err(super::mount_error(call, path, nix::Error::last()));
    }
    Ok(())
}

/// Where a mount of a container comes from: a path to bind now, or a mount made detached
/// earlier (in another namespace).
#[derive(Debug)]
pub enum Source {
    Path(PathBuf),
    /// A path bound with every mount below it (a volume).
    Tree(PathBuf),
    Detached(Detached),
}

impl Source {
    /// Mounts it on `target`: a bind of the path (read-only when `readonly`), or the detached
    /// mount attached (made read-only, if so, when it was made).
    pub fn place(self, target: &Path, readonly: bool) -> Result<()> {
        match self {
            Source::Path(path) => super::bind(&path, target, readonly),
            Source::Tree(path) => super::rbind(&path, target, readonly),
            Source::Detached(mount) => mount.attach(target),
        }
    }
}
