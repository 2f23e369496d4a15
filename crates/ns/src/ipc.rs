//! The ipc namespace: System V message queues, semaphore sets and shared memory, and POSIX
//! message queues.
//!
//! These objects are named by numbers (SysV keys and ids) or by `/name` (POSIX mqueues) in one
//! table per ipc namespace, so two namespaces can hold the same names without meeting. A pod has
//! one ipc namespace that its containers join: that is what lets a sidecar share memory with the
//! main container, and what keeps two pods on a node from seeing each other's queues.
//!
//! `/proc/sysvipc/{msg,sem,shm}` list the SysV objects of the *reader's* ipc namespace, which is
//! how [`list_sysv`] and the demos show the isolation. POSIX mqueues are looked up by name with
//! `mq_open`, which also works in the caller's ipc namespace.

use std::ffi::CString;
use std::path::Path;

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use crate::error::Target;
use crate::{Error, NsKind, Result};

/// The three kinds of System V IPC object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SysvKind {
    Queue,
    Semaphores,
    SharedMemory,
}

impl SysvKind {
    pub const ALL: [SysvKind; 3] = [
        SysvKind::Queue,
        SysvKind::Semaphores,
        SysvKind::SharedMemory,
    ];

    /// The file under `/proc/sysvipc/` that lists this kind.
    pub fn proc_file(self) -> &'static str {
        match self {
            SysvKind::Queue => "/proc/sysvipc/msg",
            SysvKind::Semaphores => "/proc/sysvipc/sem",
            SysvKind::SharedMemory => "/proc/sysvipc/shm",
        }
    }

    /// What `ipcs` calls it.
    pub fn name(self) -> &'static str {
        match self {
            SysvKind::Queue => "message queue",
            SysvKind::Semaphores => "semaphore set",
            SysvKind::SharedMemory => "shared memory segment",
        }
    }

    /// The name of the id column in the `/proc/sysvipc` table.
    fn id_column(self) -> &'static str {
        match self {
            SysvKind::Queue => "msqid",
            SysvKind::Semaphores => "semid",
            SysvKind::SharedMemory => "shmid",
        }
    }
}

/// One System V IPC object of the caller's ipc namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SysvObject {
    pub kind: SysvKind,
    /// The key it was made with (0 is `IPC_PRIVATE`).
    pub key: i32,
    pub id: i32,
    pub owner_uid: u32,
}

const PRIVATE_RW: libc::c_int = libc::IPC_CREAT | 0o600;
/// A keyed object must be new: finding someone else's under the same key would be a lie.
const KEYED_RW: libc::c_int = libc::IPC_CREAT | libc::IPC_EXCL | 0o600;

/// Makes a new message queue (`msgget(IPC_PRIVATE)`) and returns its id.
pub fn create_sysv_queue() -> Result<i32> {
    msgget(libc::IPC_PRIVATE, PRIVATE_RW)
}

/// Makes a new message queue under `key`, which must be free in this ipc namespace.
pub fn create_sysv_queue_keyed(key: i32) -> Result<i32> {
    msgget(key, KEYED_RW)
}

fn msgget(key: libc::key_t, flags: libc::c_int) -> Result<i32> {
    // SAFETY: integer arguments only.
    let id = unsafe { libc::msgget(key, flags) };
    Errno::result(id).map_err(|e| Error::sys_on("msgget", NsKind::Ipc, e))
}

/// Makes a new set of `n` semaphores (`semget(IPC_PRIVATE)`) and returns its id.
pub fn create_sysv_semaphores(n: i32) -> Result<i32> {
    semget(libc::IPC_PRIVATE, n, PRIVATE_RW)
}

/// Makes a new set of `n` semaphores under `key`, which must be free in this ipc namespace.
pub fn create_sysv_semaphores_keyed(key: i32, n: i32) -> Result<i32> {
    semget(key, n, KEYED_RW)
}

fn semget(key: libc::key_t, n: i32, flags: libc::c_int) -> Result<i32> {
    // SAFETY: integer arguments only.
    let id = unsafe { libc::semget(key, n, flags) };
    Errno::result(id).map_err(|e| Error::sys_on("semget", NsKind::Ipc, e))
}

/// Makes a new shared memory segment of `size` bytes (`shmget(IPC_PRIVATE)`) and returns its id.
pub fn create_sysv_shm(size: usize) -> Result<i32> {
    shmget(libc::IPC_PRIVATE, size, PRIVATE_RW)
}

/// Makes a new shared memory segment under `key`, which must be free in this ipc namespace.
pub fn create_sysv_shm_keyed(key: i32, size: usize) -> Result<i32> {
    shmget(key, size, KEYED_RW)
}

fn shmget(key: libc::key_t, size: usize, flags: libc::c_int) -> Result<i32> {
    // SAFETY: integer arguments only.
    let id = unsafe { libc::shmget(key, size, flags) };
    Errno::result(id).map_err(|e| Error::sys_on("shmget", NsKind::Ipc, e))
}

/// Removes a message queue (`msgctl(IPC_RMID)`).
pub fn remove_sysv_queue(id: i32) -> Result<()> {
    // SAFETY: IPC_RMID reads no buffer.
    let done = unsafe { libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    on_object(done, "msgctl IPC_RMID", SysvKind::Queue, id).map(drop)
}

/// Removes a semaphore set (`semctl(IPC_RMID)`).
pub fn remove_sysv_semaphores(id: i32) -> Result<()> {
    // SAFETY: IPC_RMID takes no fourth argument.
    let done = unsafe { libc::semctl(id, 0, libc::IPC_RMID) };
    on_object(done, "semctl IPC_RMID", SysvKind::Semaphores, id).map(drop)
}

/// Marks a shared memory segment for removal (`shmctl(IPC_RMID)`); it goes when the last
/// process detaches.
pub fn remove_sysv_shm(id: i32) -> Result<()> {
    // SAFETY: IPC_RMID reads no buffer.
    let done = unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    on_object(done, "shmctl IPC_RMID", SysvKind::SharedMemory, id).map(drop)
}

/// Copies `bytes` to the start of shared memory segment `id`.
pub fn shm_write(id: i32, bytes: &[u8]) -> Result<()> {
    let segment = Attached::new(id, bytes.len())?;
    // SAFETY: the segment is attached and at least `bytes.len()` long (checked by Attached).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), segment.addr, bytes.len()) };
    segment.detach()
}

/// Reads the first `len` bytes of shared memory segment `id`.
pub fn shm_read(id: i32, len: usize) -> Result<Vec<u8>> {
    let segment = Attached::new(id, len)?;
    // SAFETY: the segment is attached and at least `len` long (checked by Attached).
    let bytes = unsafe { std::slice::from_raw_parts(segment.addr, len) }.to_vec();
    segment.detach()?;
    Ok(bytes)
}

/// A shared memory segment attached to this process, detached on drop.
struct Attached {
    id: i32,
    addr: *mut u8,
}

impl Attached {
    /// Attaches segment `id` after checking that it has at least `len` bytes.
    fn new(id: i32, len: usize) -> Result<Attached> {
        // SAFETY: shmid_ds is plain data that IPC_STAT fills in.
        let mut info: libc::shmid_ds = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid shmid_ds for IPC_STAT to write.
        let done = unsafe { libc::shmctl(id, libc::IPC_STAT, &mut info) };
        on_object(done, "shmctl IPC_STAT", SysvKind::SharedMemory, id)?;
        if info.shm_segsz < len {
            return Err(Error::Invalid(format!(
                "shared memory segment {id} has {} bytes, {len} asked for",
                info.shm_segsz
            )));
        }
        // SAFETY: the kernel picks the address; failure is (void*)-1.
        let addr = unsafe { libc::shmat(id, std::ptr::null(), 0) };
        if addr as isize == -1 {
            return Err(object_error(
                "shmat",
                SysvKind::SharedMemory,
                id,
                Errno::last(),
            ));
        }
        Ok(Attached {
            id,
            addr: addr.cast(),
        })
    }

    fn detach(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `addr` came from shmat and is detached once, here.
        let done = unsafe { libc::shmdt(this.addr.cast()) };
        on_object(done, "shmdt", SysvKind::SharedMemory, this.id).map(drop)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        // SAFETY: as in detach; reached only when detach was not called.
        unsafe { libc::shmdt(self.addr.cast()) };
    }
}

/// Sends one message of type `mtype` (> 0) on queue `id` without waiting (`IPC_NOWAIT`: a full
/// queue is `EAGAIN`).
pub fn msg_send(id: i32, mtype: i64, bytes: &[u8]) -> Result<()> {
    // The kernel reads a `long mtype` followed by the text; a buffer of longs keeps it aligned.
    let header = std::mem::size_of::<libc::c_long>();
    let mut buffer = vec![0 as libc::c_long; 1 + bytes.len().div_ceil(header)];
    buffer[0] = mtype as libc::c_long;
    // SAFETY: `buffer` has room for `bytes` after its first long.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            buffer.as_mut_ptr().add(1).cast::<u8>(),
            bytes.len(),
        )
    };
    // SAFETY: `buffer` holds the mtype and `bytes.len()` bytes of text.
    let done = unsafe { libc::msgsnd(id, buffer.as_ptr().cast(), bytes.len(), libc::IPC_NOWAIT) };
    on_object(done, "msgsnd", SysvKind::Queue, id).map(drop)
}

/// Takes the first message (of any type) off queue `id` without waiting: an empty queue is
/// `ENOMSG`, a message longer than `max` is `E2BIG` (and stays on the queue).
pub fn msg_receive(id: i32, max: usize) -> Result<Vec<u8>> {
    let header = std::mem::size_of::<libc::c_long>();
    let mut buffer = vec![0 as libc::c_long; 1 + max.div_ceil(header)];
    // SAFETY: `buffer` has room for a long and `max` bytes.
    let got = unsafe { libc::msgrcv(id, buffer.as_mut_ptr().cast(), max, 0, libc::IPC_NOWAIT) };
    let len = on_object(got as libc::c_int, "msgrcv", SysvKind::Queue, id)? as usize;
    // SAFETY: the kernel wrote `len` bytes after the first long.
    let text = unsafe { std::slice::from_raw_parts(buffer.as_ptr().add(1).cast::<u8>(), len) };
    Ok(text.to_vec())
}

/// Every SysV object of the caller's ipc namespace, as `/proc/sysvipc` lists them.
pub fn list_sysv() -> Result<Vec<SysvObject>> {
    let mut all = Vec::new();
    for kind in SysvKind::ALL {
        let path = kind.proc_file();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
        all.extend(parse_sysvipc(kind, &text)?);
    }
    Ok(all)
}

/// Parses one `/proc/sysvipc` table. Columns are found by their header names, which the kernel
/// has kept stable while adding columns at the end.
fn parse_sysvipc(kind: SysvKind, text: &str) -> Result<Vec<SysvObject>> {
    let broken = |what: String| Error::Invalid(format!("{}: {what}", kind.proc_file()));
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| broken(format!("no {name:?} column in the header {header:?}")))
    };
    let (key_at, id_at, uid_at) = (column("key")?, column(kind.id_column())?, column("uid")?);
    let mut objects = Vec::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let field = |at: usize| {
            fields
                .get(at)
                .ok_or_else(|| broken(format!("short line {line:?}")))
        };
        let number = |at: usize| -> Result<i64> {
            let text = field(at)?;
            text.parse()
                .map_err(|_| broken(format!("{text:?} is not a number in {line:?}")))
        };
        objects.push(SysvObject {
            kind,
            key: number(key_at)? as i32,
            id: number(id_at)? as i32,
            owner_uid: number(uid_at)? as u32,
        });
    }
    Ok(objects)
}

/// Makes a POSIX message queue `name` (`/name`; the leading slash may be left out) and closes
/// it; it stays until removed or until its ipc namespace ends.
pub fn create_posix_mqueue(name: &str) -> Result<()> {
    let c_name = mqueue_name(name)?;
    // SAFETY: zeroed mq_attr is valid; the fields set are the ones mq_open reads.
    let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
    // Small, so that it fits any RLIMIT_MSGQUEUE and the new namespace's msg_max default (10).
    attr.mq_maxmsg = 4;
    attr.mq_msgsize = 256;
    // SAFETY: a valid C string, flags, mode and attr pointer, as O_CREAT expects.
    let mqd = unsafe {
        libc::mq_open(
            c_name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
            0o600 as libc::mode_t,
            &attr as *const libc::mq_attr,
        )
    };
    let mqd = Errno::result(mqd).map_err(|e| mqueue_error("mq_open O_CREAT", &c_name, e))?;
    // SAFETY: `mqd` was just opened.
    unsafe { libc::mq_close(mqd) };
    Ok(())
}

/// Whether the caller's ipc namespace has a POSIX message queue `name`.
pub fn posix_mqueue_exists(name: &str) -> Result<bool> {
    let c_name = mqueue_name(name)?;
    // SAFETY: a valid C string and flags; no O_CREAT, so no further arguments.
    let mqd = unsafe { libc::mq_open(c_name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    match Errno::result(mqd) {
        Ok(mqd) => {
            // SAFETY: `mqd` was just opened.
            unsafe { libc::mq_close(mqd) };
            Ok(true)
        }
        Err(Errno::ENOENT) => Ok(false),
        // It is there, only not for us to open.
        Err(Errno::EACCES) => Ok(true),
        Err(e) => Err(mqueue_error("mq_open", &c_name, e)),
    }
}

/// Removes POSIX message queue `name` (`mq_unlink`).
pub fn remove_posix_mqueue(name: &str) -> Result<()> {
    let c_name = mqueue_name(name)?;
    // SAFETY: a valid C string.
    let done = unsafe { libc::mq_unlink(c_name.as_ptr()) };
    Errno::result(done)
        .map(drop)
        .map_err(|e| mqueue_error("mq_unlink", &c_name, e))
}

/// `/name` as mq_open wants it: one leading slash, no other, no NUL.
fn mqueue_name(name: &str) -> Result<CString> {
    let bare = name.strip_prefix('/').unwrap_or(name);
    if bare.is_empty() || bare.contains(['/', '\0']) || bare == "." || bare == ".." {
        return Err(Error::Invalid(format!(
            "{name:?} is not a POSIX message queue name (want /name: no other slash, not empty)"
        )));
    }
    Ok(CString::new(format!("/{bare}")).expect("checked for NUL above"))
}

fn mqueue_error(call: &'static str, name: &CString, errno: Errno) -> Error {
    Error::sys_at(
        call,
        Target {
            kind: Some(NsKind::Ipc),
            // The queue as the mqueue filesystem shows it, when mounted at /dev/mqueue.
            path: Some(Path::new("/dev/mqueue").join(&name.to_string_lossy()[1..])),
            pid: None,
        },
        errno,
    )
}

fn on_object(result: libc::c_int, call: &'static str, kind: SysvKind, id: i32) -> Result<i32> {
    Errno::result(result).map_err(|e| object_error(call, kind, id, e))
}

fn object_error(call: &'static str, kind: SysvKind, id: i32, errno: Errno) -> Error {
    Error::SysvObject {
        call,
        what: kind.name(),
        id,
        errno,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &str = "       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      ctime
         0          3   600           0          0     0     0     0     0     0     0          0          0 1767000000
";
    const SEM: &str =
        "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime
  12345678          1   600          2  1000  1000  1000  1000          0 1767000000
";
    const SHM: &str = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap
-559038737      32769  1600                  4096   100     0      0     0     0     0     0          0          0 1767000000                     0                     0
";

    #[test]
    fn tables_are_read_by_their_headers() {
        let msg = parse_sysvipc(SysvKind::Queue, MSG).unwrap();
        assert_eq!(
            msg,
            vec![SysvObject {
                kind: SysvKind::Queue,
                key: 0,
                id: 3,
                owner_uid: 0
            }]
        );
        let sem = parse_sysvipc(SysvKind::Semaphores, SEM).unwrap();
        assert_eq!(
            (sem[0].key, sem[0].id, sem[0].owner_uid),
            (12345678, 1, 1000)
        );
        let shm = parse_sysvipc(SysvKind::SharedMemory, SHM).unwrap();
        assert_eq!(
            (shm[0].key, shm[0].id, shm[0].owner_uid),
            (-559038737, 32769, 0)
        );
    }

    #[test]
    fn an_empty_table_has_no_objects() {
        let header = MSG.lines().next().unwrap();
        assert!(parse_sysvipc(SysvKind::Queue, header).unwrap().is_empty());
    }

    #[test]
    fn a_broken_table_is_named() {
        let err = parse_sysvipc(SysvKind::Semaphores, "key semid\n1 2\n").unwrap_err();
        assert!(
            err.to_string().contains("/proc/sysvipc/sem") && err.to_string().contains("uid"),
            "{err}"
        );
        let err = parse_sysvipc(SysvKind::Queue, "key msqid uid\n1 x 0\n").unwrap_err();
        assert!(err.to_string().contains("\"x\" is not a number"), "{err}");
    }

    #[test]
    fn the_real_tables_parse() {
        list_sysv().unwrap();
    }

    #[test]
    fn mqueue_names_are_checked() {
        assert_eq!(mqueue_name("q").unwrap().to_str().unwrap(), "/q");
        assert_eq!(mqueue_name("/q").unwrap().to_str().unwrap(), "/q");
        for bad in ["", "/", "/a/b", "a\0b", ".."] {
            assert!(mqueue_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_missing_object_is_named() {
        let err = remove_sysv_queue(-1).unwrap_err();
        assert!(err.to_string().contains("message queue -1"), "{err}");
    }
}
