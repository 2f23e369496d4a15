//! `podlab cp SRC DEST [-c C]`: kubectl cp's twin, one side `[NAMESPACE/]POD:PATH`, the other
//! a local path. As kubectl does, it is `tar` through exec: into the pod, a tar made here is
//! the stdin of `tar -xmf - -C DIR` in the container; out of it, `tar cf - PATH` in the
//! container writes the archive that is unpacked here, each entry's path with the source's
//! prefix taken off and put under DEST. kubectl's guards are kept: an entry that would land
//! outside DEST is skipped, and so is a symbolic link, each with kubectl's warning.
//!
//! The archive is held in a memfd rather than a pipe, because the CLI stays single-threaded and
//! exec returns only when the command has ended; so a copy is bounded by memory.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_runtime::id::ContainerId;
use podlab_runtime::ExecStdio;

use crate::context::Ctx;

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    Local(PathBuf),
    Remote {
        namespace: Option<String>,
        pod: String,
        path: String,
    },
}

impl Spec {
    /// kubectl's reading: `POD:PATH` or `NAMESPACE/POD:PATH` is in a pod, anything else local.
    pub fn parse(text: &str) -> Result<Spec> {
        let Some((pod, path)) = text.split_once(':') else {
            return Ok(Spec::Local(PathBuf::from(text)));
        };
        if pod.is_empty() {
            bail!("filespec must match the canonical format: [[namespace/]pod:]file/path");
        }
        if path.is_empty() {
            bail!("remote path cannot be empty");
        }
        let (namespace, pod) = match pod.split_once('/') {
            Some((ns, pod)) => (Some(ns.to_string()), pod.to_string()),
            None => (None, pod.to_string()),
        };
        Ok(Spec::Remote {
            namespace,
            pod,
            path: path.to_string(),
        })
    }
}

pub fn run(src: &str, dest: &str, container: Option<&str>, namespace: &str) -> Result<i32> {
    match (Spec::parse(src)?, Spec::parse(dest)?) {
        (
            Spec::Local(from),
            Spec::Remote {
                namespace: ns,
                pod,
                path,
            },
        ) => {
            let ns = ns.as_deref().unwrap_or(namespace);
            to_pod(&from, ns, &pod, container, &path)
        }
        (
            Spec::Remote {
                namespace: ns,
                pod,
                path,
            },
            Spec::Local(to),
        ) => {
            let ns = ns.as_deref().unwrap_or(namespace);
            from_pod(ns, &pod, container, &path, &to)
        }
        (Spec::Local(_), Spec::Local(_)) => {
            bail!("one of src or dest must be a remote file specification")
        }
        (Spec::Remote { .. }, Spec::Remote { .. }) => {
            bail!("one of src or dest must be a local file specification")
        }
    }
}

/// The running container to exec `tar` in.
fn container_of(
    ctx: &Ctx,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
) -> Result<ContainerId> {
    let object: Pod = ctx.store.get(namespace, pod)?;
    let phase = object.status.as_ref().and_then(|s| s.phase.clone());
    if let Some(phase @ ("Succeeded" | "Failed")) = phase.as_deref() {
        bail!("cannot exec into a container in a completed pod; current phase is {phase}");
    }
    let status = crate::logs::container_status(&object, container, crate::logs::Caller::Exec)?;
    crate::logs::running_container_id(&status, "exec into", pod)
}

/// An anonymous file in memory (`memfd_create`).
fn memfd(name: &str) -> Result<File> {
    let name = std::ffi::CString::new(name)?;
    // SAFETY: a valid C string; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("memfd_create");
    }
    // SAFETY: the descriptor is new and ours.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Runs `cmd` in the container with `stdin`; its stdout and stderr (tar's messages, shown as
/// kubectl shows them) come back in memory files.
fn exec_tar(ctx: &Ctx, id: &ContainerId, cmd: &[&str], stdin: &File) -> Result<(i32, File)> {
    let runtime = ctx.runtime()?;
    let mut stdout = memfd("podlab-cp-out")?;
    let mut stderr = memfd("podlab-cp-err")?;
    let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
    let code = match runtime.exec(
        id,
        &cmd,
        ExecStdio {
            stdin: stdin.as_fd(),
            stdout: stdout.as_fd(),
            stderr: stderr.as_fd(),
        },
        None,
    ) {
        Err(podlab_runtime::Error::StartFailed { failure, .. }) => {
            bail!("exec failed: unable to start container process: {failure}")
        }
        other => other?,
    };
    let mut messages = Vec::new();
    stderr.seek(SeekFrom::Start(0))?;
    stderr.read_to_end(&mut messages)?;
    std::io::stderr().write_all(&messages)?;
    stdout.seek(SeekFrom::Start(0))?;
    Ok((code, stdout))
}

/// kubectl's `copyToPod`: DEST ending in `/`, or naming a folder in the container, gets the
/// source's name appended; the archive's one top entry is DEST's name, unpacked in DEST's
/// folder.
fn to_pod(
    from: &Path,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    dest: &str,
) -> Result<i32> {
    let meta = std::fs::symlink_metadata(from);
    if meta.is_err() {
        bail!("{} doesn't exist in local filesystem", from.display());
    }
    let ctx = Ctx::open()?;
    let id = container_of(&ctx, namespace, pod, container)?;
    let base = from
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| ".".into());
    let mut dest = dest.to_string();
    if dest.ends_with('/') {
        dest.push_str(&base);
    } else {
        let null = File::open("/dev/null")?;
        let (is_dir, _) = exec_tar(&ctx, &id, &["test", "-d", &dest], &null)?;
        if is_dir == 0 {
            dest = format!("{dest}/{base}");
        }
    }
    let dest_path = Path::new(&dest);
    let name = dest_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .with_context(|| format!("{dest}: not a file name to copy to"))?;
    let dir = dest_path
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| !p.is_empty());

    let mut archive = memfd("podlab-cp-in")?;
    {
        let mut builder = tar::Builder::new(&mut archive);
        builder.follow_symlinks(false);
        if std::fs::metadata(from)?.is_dir() {
            builder.append_dir_all(&name, from)?;
        } else {
            builder.append_path_with_name(from, &name)?;
        }
        builder.finish()?;
    }
    archive.seek(SeekFrom::Start(0))?;
    let mut cmd = vec!["tar", "-xmf", "-"];
    if let Some(dir) = dir.as_deref() {
        cmd.extend(["-C", dir]);
    }
    let (code, _) = exec_tar(&ctx, &id, &cmd, &archive)?;
    if code != 0 {
        bail!("command terminated with exit code {code}");
    }
    Ok(0)
}

/// kubectl's `copyFromPod`: `tar cf - SRC` in the container, each entry's SRC prefix (its
/// leading `/` taken off, as tar does) replaced by DEST here.
fn from_pod(
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    src: &str,
    to: &Path,
) -> Result<i32> {
    let ctx = Ctx::open()?;
    let id = container_of(&ctx, namespace, pod, container)?;
    let null = File::open("/dev/null")?;
    let (code, archive) = exec_tar(&ctx, &id, &["tar", "cf", "-", src], &null)?;
    if code != 0 {
        bail!("command terminated with exit code {code}");
    }
    let prefix = clean_prefix(src);
    unpack(archive, &prefix, to)
}

/// The source path as tar names its entries: no leading `/`, no `.` parts, no `..` that would
/// climb above the root (kubectl's `stripPathShortcuts`).
fn clean_prefix(src: &str) -> PathBuf {
    let mut clean = PathBuf::new();
    for part in Path::new(src).components() {
        match part {
            Component::Normal(p) => clean.push(p),
            Component::ParentDir => {
                clean.pop();
            }
            _ => {}
        }
    }
    clean
}

/// kubectl's `untarAll`: each entry under `prefix` goes to `dest` joined with the rest of its
/// path; entries outside `dest` and symbolic links are skipped with kubectl's warnings.
fn unpack(archive: impl Read, prefix: &Path, dest: &Path) -> Result<i32> {
    let mut archive = tar::Archive::new(archive);
    archive.set_preserve_permissions(true);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let name = entry.path()?.into_owned();
        let name = clean_prefix(&name.to_string_lossy());
        let Ok(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let escapes = rest
            .components()
            .any(|c| !matches!(c, Component::Normal(_)));
        let target = match rest.as_os_str().is_empty() {
            true => dest.to_path_buf(),
            false => dest.join(rest),
        };
        if escapes {
            eprintln!(
                "warning: file {:?} is outside target destination, skipping",
                target.display().to_string()
            );
            continue;
        }
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            let link = entry
                .link_name()?
                .map(|l| l.display().to_string())
                .unwrap_or_default();
            eprintln!(
                "warning: skipping symlink: {:?} -> {link:?}",
                target.display().to_string()
            );
            continue;
        }
        if kind.is_dir() {
            std::fs::create_dir_all(&target)
                .with_context(|| format!("creating {}", target.display()))?;
            continue;
        }
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        // A symbolic link already at the target is replaced, not followed.
        if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(&target)?;
        }
        let mut file =
            File::create(&target).with_context(|| format!("creating {}", target.display()))?;
        std::io::copy(&mut entry, &mut file)?;
        if let Ok(mode) = entry.header().mode() {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_specs_read_as_kubectl_reads_them() {
        assert_eq!(Spec::parse("/tmp/x").unwrap(), Spec::Local("/tmp/x".into()));
        assert_eq!(
            Spec::parse("web:/etc/hostname").unwrap(),
            Spec::Remote {
                namespace: None,
                pod: "web".into(),
                path: "/etc/hostname".into()
            }
        );
        assert_eq!(
            Spec::parse("prod/web:x").unwrap(),
            Spec::Remote {
                namespace: Some("prod".into()),
                pod: "web".into(),
                path: "x".into()
            }
        );
        assert!(Spec::parse("web:").is_err());
        assert!(Spec::parse(":x").is_err());
    }

    #[test]
    fn prefixes_lose_their_root_and_shortcuts() {
        assert_eq!(clean_prefix("/tmp/foo"), PathBuf::from("tmp/foo"));
        assert_eq!(clean_prefix("/../../etc/./x"), PathBuf::from("etc/x"));
        assert_eq!(clean_prefix("a/b/../c"), PathBuf::from("a/c"));
    }

    #[test]
    fn entries_land_under_dest_and_links_and_escapes_are_skipped() {
        let dir = std::env::temp_dir().join(format!("podlab-cp-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut bytes = Vec::new();
        {
            let mut b = tar::Builder::new(&mut bytes);
            let mut header = tar::Header::new_gnu();
            header.set_size(3);
            header.set_mode(0o640);
            header.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut header.clone(), "tmp/foo/a.txt", &b"abc"[..])
                .unwrap();
            let mut link = tar::Header::new_gnu();
            link.set_entry_type(tar::EntryType::Symlink);
            link.set_size(0);
            b.append_link(&mut link, "tmp/foo/evil", "/etc").unwrap();
            b.finish().unwrap();
        }
        unpack(&bytes[..], Path::new("tmp/foo"), &dir.join("out")).unwrap();
        assert_eq!(std::fs::read(dir.join("out/a.txt")).unwrap(), b"abc");
        assert!(std::fs::symlink_metadata(dir.join("out/evil")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
