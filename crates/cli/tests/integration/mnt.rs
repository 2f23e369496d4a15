//! Integration tests: mnt. Mount propagation, overlay layers and pivot_root, each checked in the
//! kernel's own mount tables (`/proc/PID/mountinfo`) and on the filesystems themselves.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;
use nix::sched::{unshare, CloneFlags};
use podlab_ns::child::run_in_child;
use podlab_ns::mnt::{self, Scratch};
use podlab_ns::{Error, Result};

fn new_mount_namespace() -> Result<()> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| Error::sys("unshare(CLONE_NEWNS)", e))
}

fn private_mount_namespace() -> Result<()> {
    new_mount_namespace()?;
    mnt::make_rprivate(Path::new("/"))
}

fn io<T>(what: &'static str, path: &Path, result: std::io::Result<T>) -> Result<T> {
    result.map_err(|e| Error::io(what, path, e))
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn has_mount(mounts: &[mnt::MountInfo], point: &Path) -> bool {
    mounts.iter().any(|m| m.mount_point == point)
}

/// Removes the scratch directory and asserts that no mount was left behind below it.
fn finish(scratch: Scratch) {
    let left = mnt::mounts_below(scratch.path()).unwrap();
    assert!(left.is_empty(), "mounts left behind: {left:?}");
    scratch.remove().unwrap();
}

/// A namespace copied from one whose mount is shared keeps receiving (and sending) mounts
/// there; after make_rprivate it does not. Both halves are read from the other side's mountinfo.
#[test]
fn make_rprivate_stops_mounts_from_reaching_the_parent() {
    let scratch = Scratch::new("podlab-it-mnt-").unwrap();
    let shared = scratch.dir("shared").unwrap();
    let (leaked, private_seen_inside, private_seen_by_parent): (bool, bool, bool) =
        run_in_child(|| {
            // A namespace of our own in which `shared` is a shared mount, like systemd's `/`.
            private_mount_namespace()?;
            mnt::bind(&shared, &shared, false)?;
            nix::mount::mount(
                None::<&str>,
                &shared,
                None::<&str>,
                MsFlags::MS_SHARED,
                None::<&str>,
            )
            .map_err(|e| Error::sys("mount(make-shared)", e))?;
            let parent = nix::unistd::getpid().as_raw();

            let leaky = shared.join("leaky");
            io("mkdir", &leaky, std::fs::create_dir(&leaky))?;
            run_in_child(|| {
                new_mount_namespace()?;
                mnt::mount_tmpfs(&leaky, "size=64k")?;
                Ok(())
            })?;
            let leaked = has_mount(&mnt::mounts_of(parent)?, &leaky);

            let private = shared.join("private");
            io("mkdir", &private, std::fs::create_dir(&private))?;
            let (inside, parents) = run_in_child(|| {
                private_mount_namespace()?;
                mnt::mount_tmpfs(&private, "size=64k")?;
                let inside = mnt::is_mountpoint(&private)?;
                Ok((inside, has_mount(&mnt::mounts_of(parent)?, &private)))
            })?;
            Ok((leaked, inside, parents))
        })
        .unwrap();
    assert!(
        leaked,
        "without make_rprivate a mount in the child's namespace propagates to its peer"
    );
    assert!(private_seen_inside, "the child sees its own mount");
    assert!(
        !private_seen_by_parent,
        "after make_rprivate the parent's mountinfo must not show the child's mount"
    );
    assert!(!has_mount(&mnt::mounts().unwrap(), &shared.join("private")));
    finish(scratch);
}

#[test]
fn overlay_shows_every_layer_and_writes_to_upper() {
    let scratch = Scratch::new("podlab-it-overlay-").unwrap();
    let top = scratch.dir("top").unwrap();
    let base = scratch.dir("base").unwrap();
    let upper = scratch.dir("upper").unwrap();
    let work = scratch.dir("work").unwrap();
    let merged = scratch.dir("merged").unwrap();
    write(&top.join("from-top"), "top");
    write(&top.join("both"), "top wins");
    write(&base.join("from-base"), "base");
    write(&base.join("both"), "base loses");
    write(&base.join("doomed"), "to be deleted");

    let seen: Vec<String> = run_in_child(|| {
        private_mount_namespace()?;
        mnt::mount_overlay(&[top.clone(), base.clone()], &upper, &work, &merged)?;
        let mut seen = Vec::new();
        for name in ["from-top", "from-base", "both"] {
            let path = merged.join(name);
            seen.push(io("reading", &path, std::fs::read_to_string(&path))?);
        }
        let fresh = merged.join("fresh");
        io("writing", &fresh, std::fs::write(&fresh, "new"))?;
        let doomed = merged.join("doomed");
        io("removing", &doomed, std::fs::remove_file(&doomed))?;
        seen.push(merged.join("doomed").exists().to_string());
        let fs_type = mnt::mounts()?
            .into_iter()
            .find(|m| m.mount_point == merged)
            .map(|m| m.fs_type)
            .unwrap_or_default();
        seen.push(fs_type);
        Ok(seen)
    })
    .unwrap();
    assert_eq!(
        seen,
        ["top", "base", "top wins", "false", "overlay"],
        "a file from each layer, the top-most first; the deleted one gone; an overlay mount"
    );
    assert_eq!(std::fs::read_to_string(upper.join("fresh")).unwrap(), "new");
    assert!(!top.join("fresh").exists() && !base.join("fresh").exists());
    let whiteout = std::fs::symlink_metadata(upper.join("doomed")).unwrap();
    assert!(
        whiteout.file_type().is_char_device() && whiteout.rdev() == 0,
        "deleting a lower file leaves a 0/0 character device (a whiteout) in upper"
    );
    assert!(base.join("doomed").exists(), "the lower layer is untouched");
    assert!(
        !mnt::is_mountpoint(&merged).unwrap(),
        "the overlay lived only in the child's namespace"
    );
    finish(scratch);
}

#[test]
fn readonly_bind_refuses_writes() {
    let scratch = Scratch::new("podlab-it-robind-").unwrap();
    let src = scratch.dir("src").unwrap();
    let dst = scratch.dir("dst").unwrap();
    write(&src.join("file"), "original");
    let (read, write_errno): (String, Option<i32>) = run_in_child(|| {
        private_mount_namespace()?;
        mnt::bind(&src, &dst, true)?;
        let path = dst.join("file");
        let read = io("reading", &path, std::fs::read_to_string(&path))?;
        let errno = std::fs::write(&path, "changed")
            .err()
            .and_then(|e| e.raw_os_error());
        Ok((read, errno))
    })
    .unwrap();
    assert_eq!(read, "original");
    assert_eq!(write_errno, Some(libc::EROFS));
    assert_eq!(
        std::fs::read_to_string(src.join("file")).unwrap(),
        "original"
    );
    finish(scratch);
}

/// What a process sees after pivot_root into a busybox rootfs.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct AfterPivot {
    marker: String,
    old_scratch_visible: bool,
    mount_points: Vec<PathBuf>,
    busybox_said: String,
    dev_null_took_a_write: bool,
    zeros: Vec<u8>,
    dev_types: Vec<(String, String)>,
}

#[test]
fn pivot_root_into_busybox_leaves_the_old_root_behind() {
    if !Path::new("/bin/busybox").exists() {
        crate::support::record_skip(module_path!(), "no /bin/busybox (busybox-static)");
        return;
    }
    let scratch = Scratch::new("podlab-it-pivot-").unwrap();
    let rootfs = scratch.dir("rootfs").unwrap();
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::create_dir_all(rootfs.join("proc")).unwrap();
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    write(&rootfs.join("marker"), "podlab rootfs");
    let scratch_path = scratch.path().to_path_buf();

    let after: AfterPivot = run_in_child(|| {
        private_mount_namespace()?;
        mnt::mount_dev(&rootfs)?;
        mnt::mount_proc(&rootfs.join("proc"))?;
        mnt::pivot_root(&rootfs)?;
        let marker = io(
            "reading",
            Path::new("/marker"),
            std::fs::read_to_string("/marker"),
        )?;
        let output = io(
            "running",
            Path::new("/bin/busybox"),
            std::process::Command::new("/bin/busybox")
                .args(["echo", "hello from busybox"])
                .output(),
        )?;
        let dev_null_took_a_write = std::fs::write("/dev/null", "gone").is_ok();
        let mut zeros = vec![1u8; 8];
        let zero = Path::new("/dev/zero");
        let mut file = io("opening", zero, std::fs::File::open(zero))?;
        io(
            "reading",
            zero,
            std::io::Read::read_exact(&mut file, &mut zeros),
        )?;
        let mounts = mnt::mounts()?;
        let dev_types = mounts
            .iter()
            .filter(|m| m.mount_point.starts_with("/dev"))
            .map(|m| (m.mount_point.display().to_string(), m.fs_type.clone()))
            .collect();
        Ok(AfterPivot {
            marker,
            old_scratch_visible: scratch_path.exists(),
            mount_points: mounts.into_iter().map(|m| m.mount_point).collect(),
            busybox_said: String::from_utf8_lossy(&output.stdout).trim().to_string(),
            dev_null_took_a_write,
            zeros,
            dev_types,
        })
    })
    .unwrap();
    assert_eq!(after.marker, "podlab rootfs", "/ is the new root");
    assert_eq!(after.busybox_said, "hello from busybox");
    assert!(
        !after.old_scratch_visible,
        "the host's {} is unreachable",
        scratch.path().display()
    );
    assert!(
        after
            .mount_points
            .iter()
            .all(|p| p == Path::new("/") || p.starts_with("/dev") || p.starts_with("/proc")),
        "only the new root's own mounts remain, the old root is detached: {:?}",
        after.mount_points
    );
    assert!(after.dev_null_took_a_write, "/dev/null accepts writes");
    assert_eq!(after.zeros, vec![0u8; 8], "/dev/zero reads zeros");
    for (point, fs_type) in [
        ("/dev", "tmpfs"),
        ("/dev/pts", "devpts"),
        ("/dev/shm", "tmpfs"),
        ("/dev/null", "devtmpfs"),
    ] {
        assert!(
            after
                .dev_types
                .iter()
                .any(|(p, t)| p == point && t == fs_type),
            "{point} is a {fs_type} mount: {:?}",
            after.dev_types
        );
    }
    finish(scratch);
}

#[test]
fn podlab_demo_mnt_holds_all_its_evidence() {
    crate::user::assert_demo_holds(crate::support::podlab(), "mnt");
}

/// pivot_root refuses a shared root, and the error says what to do about it.
#[test]
fn pivot_root_under_a_shared_root_is_refused_with_a_reason() {
    let scratch = Scratch::new("podlab-it-pivot-shared-").unwrap();
    let rootfs = scratch.dir("rootfs").unwrap();
    let err = run_in_child(|| {
        new_mount_namespace()?;
        // Only in this child's own namespace: its / becomes shared, as systemd leaves it.
        nix::mount::mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| Error::sys("mount(make-rshared /)", e))?;
        mnt::pivot_root(&rootfs)
    })
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("pivot_root")
            && message.contains("EINVAL")
            && message.contains("make_rprivate"),
        "{message}"
    );
    finish(scratch);
}
