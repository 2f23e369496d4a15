//! The small mount namespace containers are made from, so that starting one does not cost in
//! proportion to the node's mount table (see `podlab_ns::mnt::detached`).
//!
//! It holds one mount, a tmpfs `/` with an empty `/rootfs`. A long-lived caller (the node
//! agent) makes it once ([`MountTemplate::make`]) and keeps only a descriptor of it: nothing is
//! pinned on disk, no process holds it, and it goes when the agent does. StartContainer hands
//! the descriptor to the shim; the container's init makes its mounts detached in the node's
//! namespace, enters the template, copies it (`unshare(CLONE_NEWNS)` of one mount) and attaches
//! them on `/rootfs` there. Without a template (one-shot commands, whose node has few mounts
//! anyway) the init copies the node's namespace as before.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sched::CloneFlags;
use podlab_ns::{mnt, ops, NsKind};

use crate::{Error, Result};

/// Where containers attach their root filesystem in the template.
pub const ROOTFS: &str = "/rootfs";

/// The argument that makes `podlab-shim` build and hold a template instead of a pod.
pub const SHIM_FLAG: &str = "--mount-template";

/// A descriptor of the template mount namespace.
#[derive(Debug)]
pub struct MountTemplate {
    fd: OwnedFd,
}

impl MountTemplate {
    /// Builds one with `podlab-shim --mount-template DIR` (a single-threaded process, as
    /// `unshare(CLONE_NEWNS)` needs): it prints `ready` once in the template, the descriptor is
    /// taken from its `/proc/PID/ns/mnt`, and closing its stdin lets it exit.
    pub fn make(shim: &Path, scratch_dir: &Path) -> Result<MountTemplate> {
        let mut child = Command::new(shim)
            .arg(SHIM_FLAG)
            .arg(scratch_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io("starting podlab-shim --mount-template", shim, e))?;
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
        let opened = match read {
            Ok(_) if line.trim() == "ready" => ops::open(
                Path::new(&format!("/proc/{}/ns/mnt", child.id())),
                NsKind::Mnt,
            )
            .map_err(Error::from),
            Ok(_) | Err(_) => {
                let mut why = String::new();
                if let Some(mut err) = child.stderr.take() {
                    let _ = err.read_to_string(&mut why);
                }
                Err(Error::Invalid(format!(
                    "podlab-shim {SHIM_FLAG} did not get ready: {}",
                    why.trim()
                )))
            }
        };
        drop(child.stdin.take());
        let _ = child.wait();
        Ok(MountTemplate { fd: opened? })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What `podlab-shim --mount-template DIR` does: a check that the kernel has detached mounts
/// (else an error, and no template), a mount namespace of its own, private, with a tmpfs
/// mounted on `DIR` (there only) made its root and the node's mounts let go; `ready` on
/// stdout; then it waits for stdin to close.
pub fn hold(scratch_dir: &Path) -> Result<()> {
    // Without detached mounts a container cannot be made from the template: no template then.
    podlab_ns::mnt::detached::supported()?;
    nix::sched::unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| Error::Invalid(format!("unshare(CLONE_NEWNS): {e}")))?;
    mnt::make_rprivate(Path::new("/"))?;
    mnt::mount_tmpfs(scratch_dir, "mode=0755,size=64k")?;
    let rootfs = scratch_dir.join(ROOTFS.trim_start_matches('/'));
    std::fs::create_dir(&rootfs).map_err(|e| Error::io("creating", &rootfs, e))?;
    mnt::pivot_root(scratch_dir)?;
    let mut out = std::io::stdout();
    writeln!(out, "ready")
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("writing", Path::new("stdout"), e))?;
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    Ok(())
}
