//! `podlab demo mnt`: a private mount table, a tmpfs, an overlay of image layers, and
//! pivot_root into a small busybox root, the way a container's root filesystem is made.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use nix::sched::{unshare, CloneFlags};
use podlab_ns::child::run_in_child;
use podlab_ns::mnt::{self, MountInfo, Scratch};
use podlab_ns::{Error, NsKind};
use serde::{Deserialize, Serialize};

use super::uts::side_by_side;
use super::{say, Evidence, Shown};

pub fn run(evidence: &mut Evidence) -> Result<()> {
    say("A mount namespace is a process's own copy of the mount table. Each container of a pod");
    say(
        "gets one: its root filesystem, /proc, /dev and volumes are mounts only it sees, made from",
    );
    say("the image's layers with overlayfs and entered with pivot_root. Everything below happens");
    say("in forked children, in temporary folders that are removed at the end.");
    let scratch = Scratch::new("podlab-demo-mnt-")?;
    // Its mounts live in the children's namespaces, which die with podlab; the folder is ours.
    super::interrupt::on_abandon(scratch.path(), |folder| {
        let _ = std::fs::remove_dir_all(folder);
    });
    private_tmpfs(&scratch, evidence)?;
    overlay(&scratch, evidence)?;
    pivot_into_busybox(&scratch, evidence)?;

    let path = scratch.path().to_path_buf();
    scratch.remove()?;
    super::interrupt::done(&path);
    let left = mnt::mounts()?
        .into_iter()
        .filter(|m| m.mount_point.starts_with(&path))
        .count();
    evidence.check(
        "nothing is left: no mount below the demo's folder, and the folder is gone",
        left == 0 && !path.exists(),
        format!(
            "{left} mounts; {} {}",
            path.display(),
            if path.exists() { "exists" } else { "is gone" }
        ),
    );
    Ok(())
}

/// What the child saw of its private tmpfs.
#[derive(Serialize, Deserialize)]
struct PrivateMount {
    root_propagation_copied: String,
    root_propagation_after: String,
    mount: Option<MountInfo>,
    in_parents_mountinfo: bool,
}

fn private_tmpfs(scratch: &Scratch, evidence: &mut Evidence) -> Result<()> {
    say("");
    say("1. Propagation. A new mount namespace starts as a copy, and mounts keep their propagation:");
    say("   a \"shared\" mount (systemd's default for /) would pass new mounts back to the host.");
    say("   So a container first makes everything private (mount --make-rprivate /), then mounts.");
    let target = scratch.dir("tmpfs")?;
    let host_root = root_propagation(&mnt::mounts()?);
    let seen: PrivateMount = run_in_child(|| {
        let parent = nix::unistd::getppid().as_raw();
        unshare(CloneFlags::CLONE_NEWNS)
            .map_err(|e| Error::sys_on("unshare(CLONE_NEWNS)", NsKind::Mnt, e))?;
        let root_propagation_copied = root_propagation(&mnt::mounts()?);
        mnt::make_rprivate(Path::new("/"))?;
        let root_propagation_after = root_propagation(&mnt::mounts()?);
        mnt::mount_tmpfs(&target, "nosuid,nodev,size=1m,mode=755")?;
        let note = target.join("written-inside");
        std::fs::write(&note, "lives in the tmpfs").map_err(|e| Error::io("writing", &note, e))?;
        Ok(PrivateMount {
            root_propagation_copied,
            root_propagation_after,
            mount: mnt::mounts()?.into_iter().find(|m| m.mount_point == target),
            in_parents_mountinfo: mnt::mounts_of(parent)?
                .iter()
                .any(|m| m.mount_point == target),
        })
    })?;
    side_by_side(
        ("host", "child"),
        &[
            ("propagation of /", &host_root, &seen.root_propagation_after),
            (
                &format!("{}", target.display()),
                "(not a mount point)",
                &seen
                    .mount
                    .as_ref()
                    .map(|m| format!("{} {} {}", m.fs_type, m.source, m.options))
                    .unwrap_or_else(|| "(not mounted)".into()),
            ),
        ],
    );
    let on_host: Vec<_> = std::fs::read_dir(&target)
        .with_context(|| format!("listing {}", target.display()))?
        .collect();
    say(format!(
        "   The child's copy of / started {}, then it mounted a tmpfs and wrote a file into it;",
        seen.root_propagation_copied
    ));
    say(format!(
        "   the host's folder under it holds {} entries: the file lived in the tmpfs.",
        on_host.len()
    ));
    evidence.compare(
        "after make_rprivate the child's / is private",
        seen.root_propagation_after.as_str(),
        "private",
        true,
    );
    evidence.check(
        "the child's mountinfo has its tmpfs",
        seen.mount.as_ref().is_some_and(|m| m.fs_type == "tmpfs"),
        seen.mount
            .as_ref()
            .map_or("no such mount".into(), |m| format!("a {} mount", m.fs_type)),
    );
    evidence.check(
        "the host's mountinfo, read while the tmpfs was mounted, does not have it",
        !seen.in_parents_mountinfo,
        format!(
            "in /proc/PPID/mountinfo: {}",
            if seen.in_parents_mountinfo {
                "present"
            } else {
                "absent"
            }
        ),
    );
    evidence.check(
        "the file written into the tmpfs is not in the host's folder",
        on_host.is_empty() && !mnt::is_mountpoint(&target)?,
        format!("{} entries", on_host.len()),
    );
    Ok(())
}

fn root_propagation(mounts: &[MountInfo]) -> String {
    mounts
        .iter()
        .rev()
        .find(|m| m.mount_point == Path::new("/"))
        .map(|m| m.propagation.clone())
        .unwrap_or_else(|| "?".into())
}

/// What the child saw in the merged overlay.
#[derive(Serialize, Deserialize)]
struct Merged {
    before: Vec<String>,
    shared: String,
    after: Vec<String>,
    fs_type: Option<String>,
}

fn overlay(scratch: &Scratch, evidence: &mut Evidence) -> Result<()> {
    say("");
    say("2. Overlay. An image is a stack of read-only layers; the container gets one writable");
    say("   layer on top, and overlayfs merges them (containerd's overlay snapshotter does this).");
    let base = scratch.dir("layers/base")?;
    let top = scratch.dir("layers/top")?;
    let upper = scratch.dir("container/upper")?;
    let work = scratch.dir("container/work")?;
    let merged = scratch.dir("container/merged")?;
    for (dir, name, text) in [
        (&base, "from-base", "base layer"),
        (&base, "shared", "the base layer's version"),
        (&base, "doomed", "deleted by the container"),
        (&top, "from-top", "top layer"),
        (&top, "shared", "the top layer's version"),
    ] {
        std::fs::write(dir.join(name), text)
            .with_context(|| format!("writing {}", dir.join(name).display()))?;
    }
    say(format!("   In {}:", scratch.path().display()));
    say("   lowerdir=layers/top:layers/base (top-most first), upperdir=container/upper");
    let seen: Merged = run_in_child(|| {
        enter_private_mount_namespace()?;
        mnt::mount_overlay(&[top.clone(), base.clone()], &upper, &work, &merged)?;
        let before = names_in(&merged)?;
        let shared = merged.join("shared");
        let shared =
            std::fs::read_to_string(&shared).map_err(|e| Error::io("reading", &shared, e))?;
        let written = merged.join("written");
        std::fs::write(&written, "by the container")
            .map_err(|e| Error::io("writing", &written, e))?;
        let doomed = merged.join("doomed");
        std::fs::remove_file(&doomed).map_err(|e| Error::io("removing", &doomed, e))?;
        Ok(Merged {
            before,
            shared,
            after: names_in(&merged)?,
            fs_type: mnt::mounts()?
                .into_iter()
                .find(|m| m.mount_point == merged)
                .map(|m| m.fs_type),
        })
    })?;
    say(format!(
        "   merged, as mounted:       {}",
        seen.before.join(" ")
    ));
    say(format!(
        "   \"shared\" reads:           \"{}\"",
        seen.shared
    ));
    say("   the container writes \"written\" and deletes \"doomed\":");
    say(format!(
        "   merged, afterwards:       {}",
        seen.after.join(" ")
    ));
    let upper_entries = describe_entries(&upper)?;
    say(format!(
        "   the upper layer now has:  {}",
        upper_entries.join(", ")
    ));
    say(format!(
        "   the base layer still has: {}",
        names_in(&base)?.join(" ")
    ));

    let whiteout = std::fs::symlink_metadata(upper.join("doomed"))
        .map(|m| m.file_type().is_char_device() && m.rdev() == 0)
        .unwrap_or(false);
    evidence.compare(
        "the merged view shows the files of both layers",
        seen.before.clone(),
        ["doomed", "from-base", "from-top", "shared"]
            .map(String::from)
            .to_vec(),
        true,
    );
    evidence.compare(
        "the first lower directory is the top-most layer",
        seen.shared.as_str(),
        "the top layer's version",
        true,
    );
    evidence.check(
        "a write lands in the upper layer, the lower layers are untouched",
        upper.join("written").is_file()
            && !base.join("written").exists()
            && !top.join("written").exists(),
        format!("upper: {}", upper_entries.join(", ")),
    );
    evidence.check(
        "deleting a lower file leaves a whiteout (character device 0/0) in upper and hides it",
        whiteout && base.join("doomed").is_file() && !seen.after.contains(&"doomed".to_string()),
        format!(
            "whiteout in upper: {}, doomed still in the base layer: {}",
            whiteout.shown(),
            base.join("doomed").is_file().shown()
        ),
    );
    evidence.check(
        "the overlay was an overlay mount in the child, and is none on the host",
        seen.fs_type.as_deref() == Some("overlay") && !mnt::is_mountpoint(&merged)?,
        format!(
            "child: {}, host: not mounted",
            seen.fs_type.as_deref().unwrap_or("no mount")
        ),
    );
    Ok(())
}

fn enter_private_mount_namespace() -> podlab_ns::Result<()> {
    unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| Error::sys_on("unshare(CLONE_NEWNS)", NsKind::Mnt, e))?;
    mnt::make_rprivate(Path::new("/"))
}

fn names_in(dir: &Path) -> podlab_ns::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io("listing", dir, e))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// "name (file)", "name (whiteout 0/0)" for each entry of `dir`.
fn describe_entries(dir: &Path) -> Result<Vec<String>> {
    let mut described = Vec::new();
    for name in names_in(dir)? {
        let meta = std::fs::symlink_metadata(dir.join(&name))?;
        let kind = if meta.file_type().is_char_device() && meta.rdev() == 0 {
            "whiteout: char device 0/0"
        } else if meta.is_dir() {
            "directory"
        } else {
            "file"
        };
        described.push(format!("{name} ({kind})"));
    }
    Ok(described)
}

/// What a process saw after pivot_root.
#[derive(Serialize, Deserialize)]
struct NewRoot {
    marker: Option<String>,
    host_folder_visible: bool,
    busybox_ls: String,
    mount_points: Vec<PathBuf>,
    dev_null_works: bool,
}

const MARKER: &str = "podlab-rootfs";

fn pivot_into_busybox(scratch: &Scratch, evidence: &mut Evidence) -> Result<()> {
    say("");
    say("3. pivot_root. The container's root becomes / and the host's root is let go of");
    say("   (runc does this; chroot would leave the old root reachable).");
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        say("   (skipped: no /bin/busybox here; install busybox-static)");
        return Ok(());
    }
    let rootfs = scratch.dir("busybox-rootfs")?;
    for dir in ["bin", "proc"] {
        std::fs::create_dir_all(rootfs.join(dir))?;
    }
    std::fs::copy(busybox, rootfs.join("bin/busybox")).context("copying /bin/busybox")?;
    std::fs::write(rootfs.join(MARKER), "the container's root\n")?;
    say(format!("   {}:", rootfs.display()));
    say(format!(
        "   bin/busybox and a file {MARKER}. A child unshares pid and mount namespaces;"
    ));
    say("   its PID 1 mounts /dev and /proc into it, calls pivot_root and looks around:");
    let host_folder = scratch.path().to_path_buf();
    let seen: NewRoot = run_in_child(|| {
        unshare(CloneFlags::CLONE_NEWPID)
            .map_err(|e| Error::sys_on("unshare(CLONE_NEWPID)", NsKind::Pid, e))?;
        run_in_child(|| {
            enter_private_mount_namespace()?;
            mnt::mount_dev(&rootfs)?;
            mnt::mount_proc(&rootfs.join("proc"))?;
            mnt::pivot_root(&rootfs)?;
            let ls = std::process::Command::new("/bin/busybox")
                .args(["ls", "/"])
                .output()
                .map_err(|e| Error::io("running", "/bin/busybox", e))?;
            Ok(NewRoot {
                marker: std::fs::read_to_string(Path::new("/").join(MARKER)).ok(),
                host_folder_visible: host_folder.exists(),
                busybox_ls: String::from_utf8_lossy(&ls.stdout)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
                mount_points: mnt::mounts()?.into_iter().map(|m| m.mount_point).collect(),
                dev_null_works: std::fs::write("/dev/null", "discarded").is_ok(),
            })
        })
    })?;
    say(format!("   busybox ls /:   {}", seen.busybox_ls));
    say(format!(
        "   /{MARKER}: \"{}\"",
        seen.marker.as_deref().unwrap_or("(missing)").trim()
    ));
    say(format!(
        "   mount table:    {}",
        seen.mount_points
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    ));
    evidence.check(
        "after pivot_root, / is the new root: its marker file is at /",
        seen.marker.is_some(),
        format!(
            "/{MARKER}: {}",
            seen.marker
                .as_deref()
                .map_or("missing".into(), |m| format!("\"{}\"", m.trim()))
        ),
    );
    evidence.check(
        "busybox from the new root runs and lists it",
        seen.busybox_ls.split(' ').any(|n| n == MARKER),
        seen.busybox_ls.clone(),
    );
    evidence.check(
        "the host's root is gone: the host folder is unreachable",
        !seen.host_folder_visible,
        format!(
            "{} {}",
            host_folder.display(),
            if seen.host_folder_visible {
                "is visible"
            } else {
                "is not there"
            }
        ),
    );
    let foreign: Vec<_> = seen
        .mount_points
        .iter()
        .filter(|p| **p != Path::new("/") && !p.starts_with("/dev") && !p.starts_with("/proc"))
        .collect();
    evidence.check(
        "the mount table holds only the new root, its /dev and its /proc",
        foreign.is_empty(),
        format!(
            "{} mounts, others: {}",
            seen.mount_points.len(),
            foreign.shown()
        ),
    );
    evidence.check(
        "the /dev made for it works (/dev/null takes a write)",
        seen.dev_null_works,
        if seen.dev_null_works {
            "the write succeeded"
        } else {
            "the write failed"
        },
    );
    Ok(())
}
