//! User namespaces: uid/gid maps, so that unprivileged users can run the other demos.
//!
//! A user namespace has its own numbering of user and group ids, tied to the ids outside by two
//! maps (`/proc/PID/uid_map`, `/proc/PID/gid_map`), each line `inside outside count`. The
//! process that makes a new user namespace holds every capability *in it*, over the namespaces
//! it then creates, while outside it stays the unprivileged user it was. That is what rootless
//! podman and `unshare --map-root-user` stand on: one map line `0 <uid> 1` makes the user root
//! inside, able to set the hostname of its own uts namespace, and still unable to touch the host's.
//!
//! An unprivileged process may write only one map line, for its own id, and for the gid map it
//! must first give up `setgroups(2)` (`/proc/PID/setgroups` = `deny`) so that it can never drop a
//! group that was denying it access.

use std::io::Write;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use serde::{Deserialize, Serialize};

use crate::error::Target;
use crate::{Error, NsKind, Result};

/// One line of a uid or gid map: ids `inside..inside+count` are `outside..outside+count` in the
/// parent user namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMapping {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

impl IdMapping {
    /// The outside id of `inside`, if this line maps it.
    pub fn to_outside(&self, inside: u32) -> Option<u32> {
        let offset = inside.checked_sub(self.inside)?;
        (offset < self.count).then(|| self.outside + offset)
    }

    /// The inside id of `outside`, if this line maps it.
    pub fn to_inside(&self, outside: u32) -> Option<u32> {
        let offset = outside.checked_sub(self.outside)?;
        (offset < self.count).then(|| self.inside + offset)
    }
}

/// Parses the text of a uid_map or gid_map file.
pub fn parse_id_map(text: &str) -> Result<Vec<IdMapping>> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let numbers: Vec<u32> = line
                .split_whitespace()
                .map(str::parse)
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| Error::Invalid(format!("unreadable id map line {line:?}")))?;
            match numbers[..] {
                [inside, outside, count] => Ok(IdMapping {
                    inside,
                    outside,
                    count,
                }),
                _ => Err(Error::Invalid(format!(
                    "id map line {line:?} does not have three numbers"
                ))),
            }
        })
        .collect()
}

/// The outside id that `inside` maps to under `map`, if any.
pub fn map_to_outside(map: &[IdMapping], inside: u32) -> Option<u32> {
    map.iter().find_map(|line| line.to_outside(inside))
}

/// The inside id that `outside` is under `map` (what a process of the namespace sees of an id
/// of the parent's), if any.
pub fn map_to_inside(map: &[IdMapping], outside: u32) -> Option<u32> {
    map.iter().find_map(|line| line.to_inside(outside))
}

/// Whether `map` is the initial user namespace's: every id mapped to itself.
pub fn is_identity_map(map: &[IdMapping]) -> bool {
    map == [IdMapping {
        inside: 0,
        outside: 0,
        count: u32::MAX,
    }]
}

/// Whether the calling process is in the initial user namespace (its uid map is the identity).
pub fn in_initial_userns() -> bool {
    id_maps(std::process::id() as i32)
        .and_then(|(uid_map, _)| parse_id_map(&uid_map))
        .map(|map| is_identity_map(&map))
        .unwrap_or(true)
}

/// The text of a uid_map or gid_map file for `map`.
pub fn id_map_text(map: &[IdMapping]) -> String {
    map.iter()
        .map(|line| format!("{} {} {}\n", line.inside, line.outside, line.count))
        .collect()
}

/// A new user namespace with these maps, held by the returned descriptor alone: what a pod's
/// `userns_options` (Kubernetes' `hostUsers: false`) gets, before anything joins it.
///
/// A child made for it unshares `CLONE_NEWUSER` and waits; the caller, privileged in its own
/// namespace, writes both maps (setgroups stays allowed: the pod's processes set their
/// supplementary groups), opens `/proc/CHILD/ns/user` and lets the child go. The caller needs
/// no thread of its own to be alone: only the forked child enters the namespace.
pub fn new_mapped(uid_map: &[IdMapping], gid_map: &[IdMapping]) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    let pipe =
        || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Error::sys("pipe2", e));
    let (ready_r, ready_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    // SAFETY: the child makes raw system calls only, then `_exit`s.
    let child = match unsafe { nix::unistd::fork() }.map_err(|e| Error::sys("fork", e))? {
        nix::unistd::ForkResult::Child => {
            drop(ready_r);
            drop(go_w);
            // SAFETY: unshare, write and read of this child's own descriptors, then _exit.
            unsafe {
                // 0, or the errno (all fit in a byte).
                let status = if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                    0u8
                } else {
                    nix::Error::last_raw() as u8
                };
                libc::write(ready_w.as_raw_fd(), [status].as_ptr().cast(), 1);
                let mut byte = [0u8; 1];
                libc::read(go_r.as_raw_fd(), byte.as_mut_ptr().cast(), 1);
                libc::_exit(0)
            }
        }
        nix::unistd::ForkResult::Parent { child } => child,
    };
    drop(ready_w);
    drop(go_r);
    let made = (|| {
        let mut status = [0u8; 1];
        let read = nix::unistd::read(&ready_r, &mut status).map_err(|e| Error::sys("read", e))?;
        let errno = match (read, status[0]) {
            (1, 0) => None,
            (1, errno) => Some(nix::Error::from_raw(errno.into())),
            _ => Some(nix::Error::ECHILD),
        };
        if let Some(errno) = errno {
            return Err(Error::sys_on("unshare(CLONE_NEWUSER)", NsKind::User, errno));
        }
        write_id_maps(
            child.as_raw(),
            &id_map_text(uid_map),
            &id_map_text(gid_map),
            false,
        )?;
        crate::ops::open(&proc_path(child.as_raw(), "ns/user"), NsKind::User)
    })();
    drop(go_w);
    let _ = crate::child::wait_for(child);
    made
}

/// Enters a new user namespace in which the calling (single-threaded) process's uid and gid are
/// mapped to root, as `unshare --user --map-root-user` does.
pub fn become_root_in_new_userns() -> Result<()> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let call = "unshare(CLONE_NEWUSER)";
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER).map_err(|errno| match errno {
        nix::Error::EINVAL if thread_count() > 1 => Error::SysExplained {
            call,
            target: Target {
                kind: Some(NsKind::User),
                ..Target::default()
            },
            errno,
            why: format!(
                "this process has {} threads, and only a single-threaded one may enter a new \
                 user namespace",
                thread_count()
            ),
        },
        errno => Error::sys_on(call, NsKind::User, errno),
    })?;
    write_id_maps(
        std::process::id() as i32,
        &format!("0 {uid} 1"),
        &format!("0 {gid} 1"),
        true,
    )
    .map_err(|err| match err {
        Error::Sys {
            call,
            target,
            errno: errno @ nix::Error::EACCES,
        } if !dumpable() => Error::SysExplained {
            call,
            target,
            errno,
            why: "the process is not dumpable (it changed uid without exec), so its /proc files \
                  belong to root: call prctl(PR_SET_DUMPABLE, 1) first"
                .into(),
        },
        err => err,
    })
}

fn dumpable() -> bool {
    // SAFETY: PR_GET_DUMPABLE takes no pointers.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE) == 1 }
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| tasks.count())
        .unwrap_or(1)
}

/// Writes the uid and gid maps of `pid`'s user namespace (each can be written once), first
/// denying setgroups if asked, which an unprivileged writer must do before the gid map.
/// Each map is given as the file's text: lines `inside outside count`.
pub fn write_id_maps(pid: i32, uid_map: &str, gid_map: &str, deny_setgroups: bool) -> Result<()> {
    write_maps_of(Some(pid), uid_map, gid_map, deny_setgroups)
}

/// [`write_id_maps`] for the caller's own user namespace, through `/proc/self`: what a process
/// cloned into a new user namespace does (`unshare --map-root-user`). Its pid is of no use for
/// that when it was cloned into a new pid namespace too, as the `/proc` it still sees is the
/// parent's, which knows it by another number.
pub fn write_own_id_maps(uid_map: &str, gid_map: &str, deny_setgroups: bool) -> Result<()> {
    write_maps_of(None, uid_map, gid_map, deny_setgroups)
}

/// `pid`: the process whose maps to write; `None` for the caller.
fn write_maps_of(
    pid: Option<i32>,
    uid_map: &str,
    gid_map: &str,
    deny_setgroups: bool,
) -> Result<()> {
    if deny_setgroups {
        write_proc_file(pid, "setgroups", "deny")?;
    }
    write_proc_file(pid, "uid_map", uid_map)?;
    write_proc_file(pid, "gid_map", gid_map)
}

/// The kernel takes a map in one write(2) only, so it is written in one piece or not at all.
fn write_proc_file(pid: Option<i32>, name: &str, text: &str) -> Result<()> {
    let path = match pid {
        Some(pid) => proc_path(pid, name),
        None => PathBuf::from(format!("/proc/self/{name}")),
    };
    let mut text = text.trim_end().to_string();
    text.push('\n');
    let fail = |e: std::io::Error| match e.raw_os_error() {
        Some(errno) => Error::sys_at(
            match name {
                "uid_map" => "write(uid_map)",
                "gid_map" => "write(gid_map)",
                _ => "write(setgroups)",
            },
            Target {
                kind: Some(NsKind::User),
                path: Some(path.clone()),
                pid,
            },
            nix::Error::from_raw(errno),
        ),
        None => Error::io("writing", &path, e),
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(fail)?;
    let written = file.write(text.as_bytes()).map_err(fail)?;
    if written != text.len() {
        return Err(Error::Invalid(format!(
            "{}: the kernel took {written} of {} bytes",
            path.display(),
            text.len()
        )));
    }
    Ok(())
}

/// The uid and gid maps of `pid`'s user namespace, as the kernel prints them.
pub fn id_maps(pid: i32) -> Result<(String, String)> {
    let read = |name: &str| {
        let path = proc_path(pid, name);
        std::fs::read_to_string(&path).map_err(|e| Error::io("reading", path, e))
    };
    Ok((read("uid_map")?, read("gid_map")?))
}

fn proc_path(pid: i32, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{name}"))
}

/// Whether this kernel lets an unprivileged user create a user namespace: a non-zero
/// `user.max_user_namespaces`, and neither Debian's `kernel.unprivileged_userns_clone` nor
/// Ubuntu's AppArmor restriction saying no (where those knobs exist).
pub fn unprivileged_userns_allowed() -> bool {
    let sysctl = |name: &str| -> Option<u64> {
        std::fs::read_to_string(Path::new("/proc/sys").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    sysctl("user/max_user_namespaces").is_some_and(|max| max > 0)
        && sysctl("kernel/unprivileged_userns_clone").is_none_or(|on| on == 1)
        && sysctl("kernel/apparmor_restrict_unprivileged_userns").is_none_or(|on| on == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_are_parsed() {
        let map = parse_id_map("         0      65534          1\n  1  100000  65536\n").unwrap();
        assert_eq!(
            map,
            [
                IdMapping {
                    inside: 0,
                    outside: 65534,
                    count: 1
                },
                IdMapping {
                    inside: 1,
                    outside: 100000,
                    count: 65536
                }
            ]
        );
        assert_eq!(map_to_outside(&map, 0), Some(65534));
        assert_eq!(map_to_outside(&map, 2), Some(100001));
        assert_eq!(map_to_outside(&map, 65537), None);
        assert_eq!(map_to_inside(&map, 100001), Some(2));
        assert_eq!(map_to_inside(&map, 65534), Some(0));
        assert_eq!(map_to_inside(&map, 0), None);
    }

    #[test]
    fn the_initial_map_is_recognised() {
        let map = parse_id_map("         0          0 4294967295\n").unwrap();
        assert!(is_identity_map(&map));
        assert!(!is_identity_map(&parse_id_map("0 1000 1").unwrap()));
        assert_eq!(map_to_outside(&map, 4294967294), Some(4294967294));
    }

    #[test]
    fn broken_maps_are_refused() {
        assert!(parse_id_map("0 1000").is_err());
        assert!(parse_id_map("0 x 1").is_err());
        assert!(parse_id_map("").unwrap().is_empty());
    }

    #[test]
    fn own_maps_can_be_read() {
        let (uid_map, gid_map) = id_maps(std::process::id() as i32).unwrap();
        assert!(!parse_id_map(&uid_map).unwrap().is_empty());
        assert!(!parse_id_map(&gid_map).unwrap().is_empty());
    }

    #[test]
    fn a_multithreaded_process_is_told_why() {
        // The test harness has several threads, so this must fail, and say why.
        let _other = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(1)));
        let err = become_root_in_new_userns().unwrap_err();
        assert!(err.to_string().contains("threads"), "{err}");
    }
}
