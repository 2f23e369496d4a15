//! podlab's own IP address management, on disk in host-local's layout.
//!
//! A lease is a file named after the address, holding `<containerID>\r\n<ifname>`, in one folder
//! per network; `last_reserved_ip.0` remembers the last address handed out, and allocation goes
//! round-robin after it (so a freed address is not reused at once). Every change happens under
//! an exclusive `flock(2)` on the folder's `lock` file: the same lock host-local takes, so the
//! built-in path and the CNI plugin can share one store without handing out an address twice.
//! Leases are plain files: `ls` shows them, `rm` frees one. Like host-local's, they are not
//! fsynced: a lease matters only while its pod's network namespace lives, and none outlives a
//! power loss; against a killed process, the page cache is enough.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::{Error, Result};

/// One allocated address and its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub ip: Ipv4Addr,
    pub container_id: String,
    pub ifname: String,
}

/// The leases of one network.
#[derive(Debug, Clone)]
pub struct LeaseStore {
    dir: PathBuf,
    network: String,
    start: Ipv4Addr,
    end: Ipv4Addr,
    /// Never handed out (the bridge has it).
    reserved: Ipv4Addr,
}

const LAST_RESERVED: &str = "last_reserved_ip.0";

impl LeaseStore {
    /// The store in `dir` handing out `start..=end` except `reserved`.
    pub fn new(
        dir: &Path,
        network: &str,
        start: Ipv4Addr,
        end: Ipv4Addr,
        reserved: Ipv4Addr,
    ) -> Self {
        LeaseStore {
            dir: dir.to_owned(),
            network: network.to_owned(),
            start,
            end,
            reserved,
        }
    }

    /// Hands out the next free address to (`container_id`, `ifname`). Like host-local, an
    /// attachment that already holds a lease gets an error, not a second address.
    pub fn allocate(&self, container_id: &str, ifname: &str) -> Result<Ipv4Addr> {
        let _lock = self.lock()?;
        if let Some(held) = self.find(container_id, ifname)?.first() {
            return Err(Error::Invalid(format!(
                "{container_id} ({ifname}) already holds {} in network {:?}: a DEL must come before a second ADD",
                held.ip, self.network
            )));
        }
        self.allocate_locked(container_id, ifname)
    }

    /// [`LeaseStore::allocate`] for an attachment its caller knows to hold no lease (its own
    /// record of the attachment is absent): no read of every lease, which at 500 pods is 500
    /// files read per pod.
    pub fn allocate_new(&self, container_id: &str, ifname: &str) -> Result<Ipv4Addr> {
        let _lock = self.lock()?;
        self.allocate_locked(container_id, ifname)
    }

    fn allocate_locked(&self, container_id: &str, ifname: &str) -> Result<Ipv4Addr> {
        let (start, end) = (u32::from(self.start), u32::from(self.end));
        let last = std::fs::read_to_string(self.dir.join(LAST_RESERVED))
            .ok()
            .and_then(|text| text.trim().parse::<Ipv4Addr>().ok())
            .map(u32::from)
            .filter(|last| (start..=end).contains(last));
        let first = match last {
            Some(last) if last < end => last + 1,
            _ => start,
        };
        let size = end - start + 1;
        for step in 0..size {
            let candidate = Ipv4Addr::from(start + (first - start + step) % size);
            if candidate == self.reserved {
                continue;
            }
            let path = self.dir.join(candidate.to_string());
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io("creating the lease", path, e)),
                Ok(mut file) => {
                    let content = format!("{container_id}\r\n{ifname}");
                    if let Err(e) = file.write_all(content.as_bytes()) {
                        let _ = std::fs::remove_file(&path);
                        return Err(Error::io("writing the lease", path, e));
                    }
                    // Under the lock, and only a hint: a torn write just restarts the round.
                    let last = self.dir.join(LAST_RESERVED);
                    std::fs::write(&last, candidate.to_string())
                        .map_err(|e| Error::io("writing the last reserved address", last, e))?;
                    return Ok(candidate);
                }
            }
        }
        Err(Error::Exhausted {
            network: self.network.clone(),
            range: format!("{}-{}", self.start, self.end),
        })
    }

    /// Frees what (`container_id`, `ifname`) holds; nothing held is fine.
    pub fn release(&self, container_id: &str, ifname: &str) -> Result<Vec<Ipv4Addr>> {
        let _lock = self.lock()?;
        self.release_locked(container_id, ifname)
    }

    fn release_locked(&self, container_id: &str, ifname: &str) -> Result<Vec<Ipv4Addr>> {
        let held = self.find(container_id, ifname)?;
        for lease in &held {
            self.remove_lease(lease.ip)?;
        }
        Ok(held.into_iter().map(|lease| lease.ip).collect())
    }

    /// Removes the lease file of `ip`; already gone is fine.
    fn remove_lease(&self, ip: Ipv4Addr) -> Result<()> {
        let path = self.dir.join(ip.to_string());
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("removing the lease", path, e))
            }
            _ => Ok(()),
        }
    }

    /// Frees what (`container_id`, `ifname`) holds, reading only the lease of `ip` when it is
    /// theirs (the address their attachment was given); else as [`LeaseStore::release`].
    pub fn release_at(
        &self,
        ip: Ipv4Addr,
        container_id: &str,
        ifname: &str,
    ) -> Result<Vec<Ipv4Addr>> {
        let _lock = self.lock()?;
        let path = self.dir.join(ip.to_string());
        if read_lease(ip, &path)?.is_some_and(|lease| lease.holder_is(container_id, ifname)) {
            self.remove_lease(ip)?;
            return Ok(vec![ip]);
        }
        self.release_locked(container_id, ifname)
    }

    /// Every lease of the network (also those host-local made), in address order.
    pub fn leases(&self) -> Result<Vec<Lease>> {
        leases_in(&self.dir)
    }

    fn find(&self, container_id: &str, ifname: &str) -> Result<Vec<Lease>> {
        Ok(self
            .leases()?
            .into_iter()
            .filter(|lease| lease.holder_is(container_id, ifname))
            .collect())
    }

    fn lock(&self) -> Result<Flock<File>> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io("creating the lease folder", &self.dir, e))?;
        let path = self.dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("opening the lease lock", &path, e))?;
        Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| Error::io("locking (flock) the lease lock", path, errno.into()))
    }
}

/// The leases in a host-local style folder `dir` (files named after an IPv4 address); none
/// when the folder does not exist.
pub fn leases_in(dir: &Path) -> Result<Vec<Lease>> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("reading the lease folder", dir, e)),
        Ok(entries) => entries,
    };
    let mut leases = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("reading the lease folder", dir, e))?;
        let Some(ip) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<Ipv4Addr>().ok())
        else {
            continue;
        };
        leases.extend(read_lease(ip, &entry.path())?);
    }
    leases.sort_by_key(|lease| lease.ip);
    Ok(leases)
}

/// The lease of `ip` in file `path`; None when there is none.
fn read_lease(ip: Ipv4Addr, path: &Path) -> Result<Option<Lease>> {
    let content = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading the lease", path, e)),
        Ok(content) => content,
    };
    let mut lines = content.lines().map(str::trim);
    Ok(Some(Lease {
        ip,
        container_id: lines.next().unwrap_or_default().to_owned(),
        ifname: lines.next().unwrap_or_default().to_owned(),
    }))
}

impl Lease {
    fn holder_is(&self, container_id: &str, ifname: &str) -> bool {
        self.container_id == container_id && self.ifname == ifname
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn store(name: &str, start: &str, end: &str) -> (TempDir, LeaseStore) {
        let dir =
            std::env::temp_dir().join(format!("podlab-cni-ipam-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = LeaseStore::new(
            &dir.join("net"),
            "net",
            start.parse().unwrap(),
            end.parse().unwrap(),
            "10.9.0.1".parse().unwrap(),
        );
        (TempDir(dir), store)
    }

    #[test]
    fn allocation_skips_the_gateway_goes_round_robin_and_files_match_host_local() {
        let (dir, store) = store("rr", "10.9.0.1", "10.9.0.4");
        let a = store.allocate("a", "eth0").unwrap();
        let b = store.allocate("b", "eth0").unwrap();
        assert_eq!(
            (a.to_string(), b.to_string()),
            ("10.9.0.2".into(), "10.9.0.3".into())
        );
        let content = std::fs::read_to_string(dir.0.join("net/10.9.0.2")).unwrap();
        assert_eq!(content, "a\r\neth0");
        assert_eq!(store.release("a", "eth0").unwrap(), [a]);
        // Round robin: the freed .2 is not handed out before .4.
        assert_eq!(store.allocate("c", "eth0").unwrap().to_string(), "10.9.0.4");
        assert_eq!(store.allocate("d", "eth0").unwrap().to_string(), "10.9.0.2");
        let err = store.allocate("e", "eth0").unwrap_err();
        assert!(matches!(err, Error::Exhausted { .. }), "{err}");
        assert!(err.to_string().contains("10.9.0.1-10.9.0.4"), "{err}");
        let holders: Vec<String> = store
            .leases()
            .unwrap()
            .into_iter()
            .map(|l| l.container_id)
            .collect();
        assert_eq!(holders, ["d", "b", "c"]);
    }

    #[test]
    fn a_second_add_is_refused_and_release_is_idempotent() {
        let (_dir, store) = store("twice", "10.9.0.2", "10.9.0.9");
        store.allocate("a", "eth0").unwrap();
        assert!(store.allocate("a", "eth0").is_err());
        assert!(
            store.allocate("a", "net1").is_ok(),
            "another interface is another attachment"
        );
        assert_eq!(store.release("a", "eth0").unwrap().len(), 1);
        assert!(store.release("a", "eth0").unwrap().is_empty());
        assert!(store.release("nobody", "eth0").unwrap().is_empty());
    }

    #[test]
    fn release_at_frees_only_its_holders_lease_and_falls_back_to_a_scan() {
        let (dir, store) = store("at", "10.9.0.2", "10.9.0.9");
        let a = store.allocate_new("a", "eth0").unwrap();
        let b = store.allocate_new("b", "eth0").unwrap();
        // b's address given for a: b's lease stays, a's is found by the scan.
        assert_eq!(store.release_at(b, "a", "eth0").unwrap(), [a]);
        assert!(dir.0.join(format!("net/{b}")).exists(), "b keeps {b}");
        assert_eq!(store.release_at(b, "b", "eth0").unwrap(), [b]);
        assert!(store.leases().unwrap().is_empty());
        assert!(store.release_at(b, "b", "eth0").unwrap().is_empty());
    }

    #[test]
    fn parallel_allocations_never_share_an_address() {
        let (_dir, store) = store("parallel", "10.9.0.2", "10.9.0.200");
        let ips: Vec<Ipv4Addr> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let store = &store;
                    scope.spawn(move || {
                        (0..10)
                            .map(|j| store.allocate(&format!("c{i}-{j}"), "eth0").unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let mut unique = ips.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 80, "{ips:?}");
    }
}
