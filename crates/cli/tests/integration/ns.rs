//! Integration tests: ns. Creating, joining, pinning and listing namespaces, each checked in the
//! inode ids the kernel shows under /proc.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::Pid;
use podlab_ns::child::{run_in_child, wait_for};
use podlab_ns::ops::{self, Holder};
use podlab_ns::NsKind;

fn me() -> i32 {
    std::process::id() as i32
}

/// A fresh folder for pins; on drop every pin in it is released and the folder removed.
struct PinDir(PathBuf);

impl PinDir {
    fn new(test: &str) -> PinDir {
        let path = std::env::temp_dir().join(format!("podlab-it-{test}-{}", me()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).unwrap();
        PinDir(path)
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            for entry in entries.flatten() {
                let _ = ops::unpin(&entry.path());
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mounted_at(path: &Path) -> bool {
    let wanted = path.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(wanted.as_str()))
}

/// The file that shows the namespace a kind applies to: the caller's own, or, for pid and time
/// (whose new namespaces only the next children enter), the one its children will get.
fn new_namespace_file(kind: NsKind) -> String {
    match kind {
        NsKind::Pid | NsKind::Time => {
            format!("/proc/thread-self/ns/{}_for_children", kind.proc_name())
        }
        other => format!("/proc/thread-self/ns/{}", other.proc_name()),
    }
}

#[test]
fn each_kind_created_in_a_child_is_a_new_namespace() {
    let mut tested = 0;
    for kind in NsKind::ALL {
        if !kind.supported() {
            crate::support::record_skip(
                &format!("{}::{kind}", module_path!()),
                "the kernel has no such namespaces",
            );
            continue;
        }
        let parent = ops::ns_inode(me(), kind).unwrap();
        let inside: u64 = run_in_child(|| {
            ops::create(&[kind])?;
            // A new pid namespace shows in pid_for_children once it has its PID 1.
            let first_child = (kind == NsKind::Pid).then(spawn_sleeper).transpose()?;
            let file = new_namespace_file(kind);
            let inode = std::fs::metadata(&file)
                .map(|m| m.ino())
                .map_err(|e| podlab_ns::Error::io("stat", file, e));
            drop(first_child);
            inode
        })
        .unwrap_or_else(|err| panic!("{kind}: {err}"));
        assert_ne!(inside, parent, "{kind}: unshare made no new namespace");
        assert_eq!(
            ops::ns_inode(me(), kind).unwrap(),
            parent,
            "{kind}: the parent moved"
        );
        tested += 1;
    }
    assert!(tested >= 6, "only {tested} kinds were tried");
}

/// A child that sleeps until it is dropped (killed and reaped).
fn spawn_sleeper() -> podlab_ns::Result<KillOnDrop> {
    // SAFETY: called in a single-threaded forked child; the grandchild only sleeps.
    match unsafe { nix::unistd::fork() }.map_err(|e| podlab_ns::Error::sys("fork", e))? {
        nix::unistd::ForkResult::Child => loop {
            nix::unistd::pause();
        },
        nix::unistd::ForkResult::Parent { child } => Ok(KillOnDrop(child)),
    }
}

#[test]
fn joining_a_holder_gives_its_namespaces() {
    let kinds = [NsKind::Net, NsKind::Ipc, NsKind::Uts];
    let holder = Holder::spawn(&kinds, || Ok(())).unwrap();
    let held: BTreeMap<NsKind, u64> = kinds
        .iter()
        .map(|k| (*k, holder.inode(*k).unwrap()))
        .collect();
    for kind in kinds {
        assert_ne!(held[&kind], ops::ns_inode(me(), kind).unwrap(), "{kind}");
    }
    let fds: Vec<(NsKind, OwnedFd)> = kinds
        .iter()
        .map(|k| (*k, holder.open(*k).unwrap()))
        .collect();
    let joined: BTreeMap<NsKind, u64> = run_in_child(|| {
        for (kind, fd) in &fds {
            ops::join(fd.as_fd(), *kind)?;
        }
        kinds
            .iter()
            .map(|k| Ok((*k, ops::self_inode(*k)?)))
            .collect()
    })
    .unwrap();
    assert_eq!(joined, held);
}

#[test]
fn join_path_refuses_a_namespace_of_another_kind() {
    let holder = Holder::spawn(&[NsKind::Uts], || Ok(())).unwrap();
    let uts = holder.ns_path(NsKind::Uts);
    let err = run_in_child(|| ops::join_path(&uts, NsKind::Net)).unwrap_err();
    assert!(
        err.to_string()
            .contains("is a uts namespace, not a net namespace"),
        "{err}"
    );
}

#[test]
fn a_pinned_namespace_outlives_its_holder() {
    let dir = PinDir::new("pin");
    let pin = dir.0.join("net");
    let holder = Holder::spawn(&[NsKind::Net], || Ok(())).unwrap();
    let holder_pid = holder.pid;
    let inode = holder.inode(NsKind::Net).unwrap();
    ops::pin(holder_pid.as_raw(), NsKind::Net, &pin).unwrap();
    assert!(ops::is_pinned(&pin));
    assert!(mounted_at(&pin), "no mount at {}", pin.display());
    let again = ops::pin(holder_pid.as_raw(), NsKind::Net, &pin).unwrap_err();
    assert!(
        again.to_string().contains(&*pin.to_string_lossy()),
        "{again}"
    );

    holder.kill();
    assert!(
        !Path::new(&format!("/proc/{holder_pid}")).exists(),
        "the holder was reaped"
    );
    let fd = ops::open(&pin, NsKind::Net).unwrap();
    assert_eq!(nix::sys::stat::fstat(&fd).unwrap().st_ino, inode);
    drop(fd);
    // Found by its inode through the pin alone (no process is in it any more).
    let inodes = std::collections::BTreeSet::from([inode]);
    let found = ops::find(NsKind::Net, &inodes);
    let through = found.get(&inode).expect("found through its pin");
    assert!(
        through.ends_with(pin.strip_prefix("/").unwrap()),
        "{through:?}"
    );
    let fd = ops::open(through, NsKind::Net).unwrap();
    assert_eq!(nix::sys::stat::fstat(&fd).unwrap().st_ino, inode);
    drop(fd);
    let joined: u64 = run_in_child(|| {
        ops::join_path(&pin, NsKind::Net)?;
        ops::self_inode(NsKind::Net)
    })
    .unwrap();
    assert_eq!(
        joined, inode,
        "the pinned namespace is the one that was held"
    );

    ops::unpin(&pin).unwrap();
    assert!(!pin.exists(), "the pin file is removed");
    assert!(!mounted_at(&pin), "the bind mount is gone");
    assert!(!ops::is_pinned(&pin));
    assert!(
        ops::find(NsKind::Net, &inodes).is_empty(),
        "found once gone"
    );
    ops::unpin(&pin).unwrap();
}

#[test]
fn pin_self_pins_the_calling_threads_namespace() {
    let dir = PinDir::new("pin-self");
    let pin = dir.0.join("uts");
    let inode: u64 = run_in_child(|| {
        ops::create(&[NsKind::Uts])?;
        ops::pin_self(NsKind::Uts, &pin)?;
        ops::self_inode(NsKind::Uts)
    })
    .unwrap();
    // The child is gone; only the pin holds its namespace.
    let fd = ops::open(&pin, NsKind::Uts).unwrap();
    assert_eq!(nix::sys::stat::fstat(&fd).unwrap().st_ino, inode);
    assert_ne!(inode, ops::ns_inode(me(), NsKind::Uts).unwrap());
}

#[test]
fn list_shows_a_holder_with_its_pid() {
    let holder = Holder::spawn(&[NsKind::Net, NsKind::Uts], || Ok(())).unwrap();
    let pid = holder.pid.as_raw();
    let all = ops::list().unwrap();
    for kind in [NsKind::Net, NsKind::Uts] {
        let inode = holder.inode(kind).unwrap();
        let entry = all
            .iter()
            .find(|e| e.kind == kind && e.inode == inode)
            .unwrap_or_else(|| panic!("{kind}:[{inode}] not listed"));
        assert_eq!((entry.pid, entry.nprocs), (pid, 1), "{entry:?}");
        assert_eq!(entry.uid, nix::unistd::geteuid().as_raw());
    }
    let own_ipc = ops::ns_inode(me(), NsKind::Ipc).unwrap();
    let shared = ops::list_for(pid).unwrap();
    let ipc = shared.iter().find(|e| e.kind == NsKind::Ipc).unwrap();
    assert_eq!(ipc.inode, own_ipc, "the holder shares our ipc namespace");
    assert!(ipc.nprocs >= 2 && ipc.pid <= me(), "{ipc:?}");
}

#[test]
fn a_holder_of_a_pid_namespace_is_its_pid_1() {
    let holder = Holder::spawn(&[NsKind::Pid, NsKind::Uts], || {
        podlab_ns::uts::set_hostname("podlab-it-held")
    })
    .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", holder.pid)).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    let ids: Vec<&str> = nspid.split_whitespace().skip(1).collect();
    assert_eq!(ids.last(), Some(&"1"), "{nspid}");
    assert_eq!(
        ids.first().unwrap().parse::<i32>().unwrap(),
        holder.pid.as_raw()
    );
    assert_ne!(
        holder.inode(NsKind::Pid).unwrap(),
        ops::ns_inode(me(), NsKind::Pid).unwrap()
    );
    let held_pid = holder.pid;
    holder.kill();
    assert!(!Path::new(&format!("/proc/{held_pid}")).exists());
}

#[test]
fn a_failing_setup_reaches_the_parent() {
    for kinds in [&[NsKind::Uts][..], &[NsKind::Pid, NsKind::Uts][..]] {
        let err = Holder::spawn(kinds, || {
            Err(podlab_ns::Error::Invalid("setup refused".into()))
        })
        .unwrap_err();
        assert!(err.to_string().contains("setup refused"), "{err}");
    }
}

#[test]
fn spawn_with_clone_starts_the_child_in_new_namespaces() {
    const KINDS: [NsKind; 4] = [NsKind::Uts, NsKind::Ipc, NsKind::Net, NsKind::Pid];
    // The clone child of this multi-threaded harness must not allocate (see spawn_with_clone):
    // paths and buffers are made here, and the child reports in fixed-size binary.
    let paths: Vec<CString> = KINDS
        .iter()
        .map(|k| CString::new(format!("/proc/self/ns/{}", k.proc_name())).unwrap())
        .collect();
    let (view_read, view_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let (go_read, go_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let child = ops::spawn_with_clone(&KINDS, || {
        // The child's own view: its pid and its namespaces, then it waits to be looked at.
        let mut view = [0u64; 1 + KINDS.len()];
        view[0] = nix::unistd::getpid().as_raw() as u64;
        for (slot, path) in view[1..].iter_mut().zip(&paths) {
            // SAFETY: a valid C string and a stat buffer on this stack.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::stat(path.as_ptr(), &mut st) } == 0 {
                *slot = st.st_ino;
            }
        }
        // SAFETY: the bytes of a plain array of integers.
        let bytes = unsafe {
            std::slice::from_raw_parts(view.as_ptr().cast::<u8>(), std::mem::size_of_val(&view))
        };
        let _ = nix::unistd::write(&view_write, bytes);
        let _ = nix::unistd::read(&go_read, &mut [0u8; 1]);
        0
    })
    .unwrap();
    drop(view_write);
    drop(go_read);
    let guard = KillOnDrop(child);
    let mut bytes = [0u8; 8 * (1 + KINDS.len())];
    std::fs::File::from(view_read)
        .read_exact(&mut bytes)
        .unwrap();
    let seen: Vec<u64> = bytes
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(seen[0], 1, "the child is PID 1 of its new pid namespace");
    for (i, kind) in KINDS.iter().enumerate() {
        let from_outside = ops::ns_inode(child.as_raw(), *kind).unwrap();
        assert_eq!(
            seen[i + 1],
            from_outside,
            "{kind}: inside and outside agree"
        );
        assert_ne!(
            from_outside,
            ops::ns_inode(me(), *kind).unwrap(),
            "{kind} is new"
        );
    }
    let _ = nix::unistd::write(&go_write, b"g");
    std::mem::forget(guard);
    assert_eq!(
        wait_for(child).unwrap(),
        nix::sys::wait::WaitStatus::Exited(child, 0)
    );
}

#[test]
fn spawn_with_clone_refuses_time() {
    let err = ops::spawn_with_clone(&[NsKind::Time], || 0).unwrap_err();
    assert!(err.to_string().contains("time"), "{err}");
}

/// Kills and reaps a child if the test fails before it exits by itself.
struct KillOnDrop(Pid);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGKILL);
        let _ = wait_for(self.0);
    }
}
