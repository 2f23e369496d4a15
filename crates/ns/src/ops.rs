//! What every namespace kind shares: name it, create it, join it, pin it, list it.
//!
//! A namespace has no name of its own. The kernel shows it as a file, `/proc/PID/ns/KIND`, whose
//! inode number is the namespace's identity: two processes are in the same namespace exactly when
//! those files have the same inode. Everything here works on those files:
//!
//! * **create**: `unshare(2)` moves the caller into new namespaces; `clone(2)` starts a child in
//!   them ([`create`], [`spawn_with_clone`]);
//! * **join**: `setns(2)` on an open namespace file moves the caller into it ([`open`], [`join`]);
//! * **pin**: a namespace lives as long as a process is in it *or* something holds its file open
//!   or bind-mounted. `ip netns add` and CRI-O's pinns bind-mount the file onto an empty file so
//!   that the namespace outlives its processes ([`pin`], [`unpin`]);
//! * **inspect/list**: read the inode ids of one process ([`inspect`]) or of all of them, the way
//!   `lsns` does ([`list`]);
//! * **find**: which live namespace has a given inode number, whatever keeps it alive (a
//!   process, an open file, a pin) ([`find`]);
//! * **hold**: a [`Holder`] is a sleeping child that keeps fresh namespaces alive, like a pod's
//!   pause process, for demos, tests and benchmarks.
//!
//! `unshare` and `setns` act on the calling *thread*; the functions taking a pid only read.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::{MntFlags, MsFlags};
use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::error::Target;
use crate::{Error, NsKind, Result};

mod find;
mod holder;
pub use find::{find, sees_every_process};
pub use holder::Holder;

/// `/proc/PID/ns/KIND`: the file that stands for the namespace of `kind` that `pid` is in.
pub fn ns_path(pid: i32, kind: NsKind) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/ns/{}", kind.proc_name()))
}

/// The calling thread's own namespace file. `/proc/self` would name the thread-group leader's,
/// which differs after this thread alone called `unshare` or `setns`.
fn thread_ns_path(kind: NsKind) -> PathBuf {
    PathBuf::from(format!("/proc/thread-self/ns/{}", kind.proc_name()))
}

/// The inode id of the namespace of `kind` that `pid` is in.
pub fn ns_inode(pid: i32, kind: NsKind) -> Result<u64> {
    inode_at(&ns_path(pid, kind), kind, Some(pid))
}

/// The inode id of the calling thread's namespace of `kind`.
pub fn self_inode(kind: NsKind) -> Result<u64> {
    inode_at(&thread_ns_path(kind), kind, None)
}

fn inode_at(path: &Path, kind: NsKind, pid: Option<i32>) -> Result<u64> {
    // stat, not lstat: the /proc entry is a magic link to the nsfs inode.
    nix::sys::stat::stat(path)
        .map(|st| st.st_ino)
        .map_err(|e| Error::sys_at("stat", target(Some(kind), Some(path), pid), e))
}

/// The inode id of every namespace of `pid`, for each kind this kernel has.
pub fn inspect(pid: i32) -> Result<BTreeMap<NsKind, u64>> {
    NsKind::ALL
        .into_iter()
        .filter(|kind| kind.supported())
        .map(|kind| Ok((kind, ns_inode(pid, kind)?)))
        .collect()
}

/// Moves the calling thread into new namespaces of all `kinds`, in one `unshare(2)` call, so
/// that a new user namespace (if asked for) owns the others. New pid and time namespaces apply
/// to the children made afterwards, not to the caller.
pub fn create(kinds: &[NsKind]) -> Result<()> {
    for kind in kinds {
        kind.require()?;
    }
    nix::sched::unshare(NsKind::flags_of(kinds)).map_err(|errno| Error::SysOnKinds {
        call: "unshare",
        kinds: kinds.to_vec(),
        errno,
    })
}

/// Opens a namespace file (`/proc/PID/ns/KIND` or a pin) for [`join`], and checks with
/// `NS_GET_NSTYPE` that it is a namespace of `kind`, so that a wrong path fails here, by name.
pub fn open(path: &Path, kind: NsKind) -> Result<OwnedFd> {
    let fd = nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| Error::sys_at("open", target(Some(kind), Some(path), None), e))?;
    let found = namespace_type(&fd).map_err(|e| {
        Error::sys_at(
            "ioctl NS_GET_NSTYPE",
            target(Some(kind), Some(path), None),
            e,
        )
    })?;
    if found != kind.clone_flag().bits() {
        let found = NsKind::ALL
            .into_iter()
            .find(|k| k.clone_flag().bits() == found)
            .map_or_else(|| format!("type {found:#x}"), |k| k.to_string());
        return Err(Error::Invalid(format!(
            "{} is a {found} namespace, not a {kind} namespace",
            path.display()
        )));
    }
    Ok(fd)
}

/// The `CLONE_NEW*` value of an open namespace file (ENOTTY when it is not one).
fn namespace_type(fd: &OwnedFd) -> nix::Result<i32> {
    const NS_GET_NSTYPE: libc::Ioctl = nix::request_code_none!(0xb7, 0x3) as libc::Ioctl;
    // SAFETY: NS_GET_NSTYPE takes no argument and only returns a value.
    let found = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE) };
    nix::errno::Errno::result(found)
}

/// Opens the namespace of `kind` that `pid` is in.
pub fn open_pid(pid: i32, kind: NsKind) -> Result<OwnedFd> {
    open(&ns_path(pid, kind), kind).map_err(|err| with_pid(err, pid))
}

/// Moves the calling thread into the namespace behind `fd` (`setns(2)`). Joining a mount
/// namespace or a user namespace needs a single-threaded caller.
pub fn join(fd: BorrowedFd<'_>, kind: NsKind) -> Result<()> {
    nix::sched::setns(fd, kind.clone_flag()).map_err(|e| Error::sys_on("setns", kind, e))
}

/// [`open`] then [`join`].
pub fn join_path(path: &Path, kind: NsKind) -> Result<()> {
    let fd = open(path, kind)?;
    nix::sched::setns(&fd, kind.clone_flag())
        .map_err(|e| Error::sys_at("setns", target(Some(kind), Some(path), None), e))
}

/// Keeps the namespace of `kind` that `pid` is in alive at `path`, as `ip netns add` does: an
/// empty file is made at `path` and the namespace file is bind-mounted onto it. `path` must not
/// exist yet; its folder must.
pub fn pin(pid: i32, kind: NsKind, path: &Path) -> Result<()> {
    pin_file(&ns_path(pid, kind), kind, path).map_err(|err| with_pid(err, pid))
}

/// [`pin`] for the calling thread's own namespace.
pub fn pin_self(kind: NsKind, path: &Path) -> Result<()> {
    pin_file(&thread_ns_path(kind), kind, path)
}

fn pin_file(source: &Path, kind: NsKind, path: &Path) -> Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io("creating the pin file", path, e))?;
    let mounted = nix::mount::mount(
        Some(source),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    );
    if let Err(errno) = mounted {
        let _ = std::fs::remove_file(path);
        return Err(Error::sys_at(
            "mount --bind",
            target(Some(kind), Some(path), None),
            errno,
        ));
    }
    Ok(())
}

/// Releases a pin: detaches the bind mount and removes the file. Already gone is fine, so that
/// cleanup can always call it.
pub fn unpin(path: &Path) -> Result<()> {
    // A pin may have been made twice on the same file; take every layer off.
    while is_pinned(path) {
        nix::mount::umount2(path, MntFlags::MNT_DETACH)
            .map_err(|e| Error::sys_at("umount2", target(None, Some(path), None), e))?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("removing the pin file", path, e))
        }
        _ => Ok(()),
    }
}

/// Whether a namespace is bind-mounted at `path` (the file there belongs to the nsfs).
pub fn is_pinned(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

/// Starts a child in new namespaces of all `kinds` with one `clone(2)`, the way container
/// runtimes start their init; the child runs `f` and exits with what it returns. The caller
/// waits for it (it is a normal child, SIGCHLD on exit).
///
/// Unlike `fork`, `clone(2)` skips the C library's fork handlers, so a lock that another thread
/// held at that moment (the allocator's, stdout's) stays locked in the child for ever. In a
/// multi-threaded caller, `f` must therefore not allocate, print or lock before it execs or
/// exits: build the `CString`s, argv pointers and buffers beforehand. A single-threaded caller
/// (the podlab CLI, a shim) has no such limit.
///
/// Time namespaces cannot be asked for here: `clone(2)` reads the byte of `CLONE_NEWTIME` as the
/// exit signal. Use [`create`], whose new time namespace the next children enter.
pub fn spawn_with_clone(kinds: &[NsKind], mut f: impl FnMut() -> isize) -> Result<Pid> {
    for kind in kinds {
        kind.require()?;
    }
    if kinds.contains(&NsKind::Time) {
        return Err(Error::Invalid(
            "clone(2) cannot make a time namespace (its flag is read as the exit signal); \
             unshare it with ops::create instead"
                .into(),
        ));
    }
    // The child gets a copy of this stack (no CLONE_VM), so it can be dropped on return.
    let mut stack = vec![0u8; 1 << 20];
    // SAFETY: without CLONE_VM the child runs on its own copy of memory, like after fork; `f`
    // is the caller's, with the same rules as code after fork.
    unsafe {
        nix::sched::clone(
            Box::new(&mut f),
            &mut stack,
            NsKind::flags_of(kinds),
            Some(Signal::SIGCHLD as i32),
        )
    }
    .map_err(|errno| Error::SysOnKinds {
        call: "clone",
        kinds: kinds.to_vec(),
        errno,
    })
}

/// One namespace on this host, as `lsns` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsEntry {
    pub kind: NsKind,
    pub inode: u64,
    /// How many processes are in it.
    pub nprocs: usize,
    /// The lowest pid in it.
    pub pid: i32,
    /// The owner of that process.
    pub uid: u32,
    /// That process's command line (its name in brackets when it has none, like a kernel thread).
    pub command: String,
}

/// Every namespace that a process visible in `/proc` is in, like `lsns`: one entry per
/// namespace, sorted by kind (in [`NsKind::ALL`] order) then inode id. Processes that end
/// during the scan, or whose files cannot be read, are left out.
pub fn list() -> Result<Vec<NsEntry>> {
    let proc_dir = std::fs::read_dir("/proc").map_err(|e| Error::io("reading", "/proc", e))?;
    let mut pids: Vec<i32> = proc_dir
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let kinds: Vec<NsKind> = NsKind::ALL.into_iter().filter(|k| k.supported()).collect();
    // (kind, inode) -> (process count, lowest pid); pids come in rising order.
    let mut seen: BTreeMap<(usize, u64), (usize, i32)> = BTreeMap::new();
    for pid in pids {
        for (order, kind) in kinds.iter().enumerate() {
            if let Ok(inode) = ns_inode(pid, *kind) {
                seen.entry((order, inode)).or_insert((0, pid)).0 += 1;
            }
        }
    }
    Ok(seen
        .into_iter()
        .map(|((order, inode), (nprocs, pid))| NsEntry {
            kind: kinds[order],
            inode,
            nprocs,
            pid,
            uid: process_uid(pid).unwrap_or(0),
            command: process_command(pid),
        })
        .collect())
}

/// The namespaces of one process, each with its host-wide count and lowest pid.
pub fn list_for(pid: i32) -> Result<Vec<NsEntry>> {
    let mine = inspect(pid)?;
    Ok(list()?
        .into_iter()
        .filter(|entry| mine.get(&entry.kind) == Some(&entry.inode))
        .collect())
}

fn process_uid(pid: i32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

fn process_command(pid: i32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<_> = cmdline
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(String::from_utf8_lossy)
        .collect();
    if !words.is_empty() {
        return words.join(" ");
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    format!("[{}]", comm.trim_end())
}

fn target(kind: Option<NsKind>, path: Option<&Path>, pid: Option<i32>) -> Target {
    Target {
        kind,
        path: path.map(Path::to_path_buf),
        pid,
    }
}

/// Adds the pid to an error's target, for the functions that take one.
fn with_pid(err: Error, pid: i32) -> Error {
    match err {
        Error::Sys {
            call,
            mut target,
            errno,
        } => {
            target.pid = Some(pid);
            Error::Sys {
                call,
                target,
                errno,
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ns_path_is_the_proc_file() {
        assert_eq!(ns_path(42, NsKind::Net), PathBuf::from("/proc/42/ns/net"));
    }

    #[test]
    fn inspect_self_matches_stat() {
        let me = std::process::id() as i32;
        let all = inspect(me).unwrap();
        assert!(all.contains_key(&NsKind::Net));
        let st = std::fs::metadata(format!("/proc/{me}/ns/uts")).unwrap();
        assert_eq!(all[&NsKind::Uts], st.ino());
    }

    #[test]
    fn a_missing_pid_is_named() {
        let err = ns_inode(i32::MAX, NsKind::Net).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("net namespace") && text.contains("2147483647"),
            "{text}"
        );
    }

    #[test]
    fn open_checks_the_kind() {
        let err = open(Path::new("/proc/self/ns/uts"), NsKind::Net).unwrap_err();
        assert!(
            err.to_string().contains("is a uts namespace, not a net"),
            "{err}"
        );
        let err = open(Path::new("/proc/self/status"), NsKind::Net).unwrap_err();
        assert!(err.to_string().contains("NS_GET_NSTYPE"), "{err}");
        open(Path::new("/proc/self/ns/net"), NsKind::Net).unwrap();
    }

    #[test]
    fn list_has_our_own_namespaces() {
        let me = std::process::id() as i32;
        let net = ns_inode(me, NsKind::Net).unwrap();
        let entries = list_for(me).unwrap();
        let entry = entries
            .iter()
            .find(|e| e.kind == NsKind::Net)
            .expect("own net namespace listed");
        assert_eq!(entry.inode, net);
        assert!(entry.pid <= me && entry.nprocs >= 1);
        let order: Vec<_> = entries.iter().map(|e| e.kind).collect();
        let mut sorted = order.clone();
        sorted.sort_by_key(|k| NsKind::ALL.iter().position(|a| a == k));
        assert_eq!(order, sorted);
    }

    #[test]
    fn unpin_of_nothing_is_fine() {
        unpin(Path::new("/nonexistent/podlab-pin")).unwrap();
        assert!(!is_pinned(Path::new("/proc/self/status")));
    }
}
