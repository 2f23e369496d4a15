//! One cgroup: its folder in each controller's hierarchy, made, entered, listed, emptied and
//! removed.
//!
//! A process is put in a cgroup by writing its pid to `cgroup.procs`; `0` means the writer
//! itself, which is how a container's process enters its cgroup between `fork` and `execve`
//! (runc's parent writes the child's pid while the child waits; a podlab container's process
//! writes its own, before it joins any namespace, so there is no moment where it runs outside).
//! On v1 the single-threaded child writes `0` to `tasks` instead, the kernel's path that moves
//! the calling thread without the global lock ([`Cgroup::enter_self`]).
//! A cgroup with processes in it cannot be removed (`EBUSY`): [`Cgroup::remove`] kills what is
//! left first, as runc's `destroy` does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::hierarchy::{Controller, Hierarchy, Version};
use crate::{Error, Result};

/// How long [`Cgroup::remove`] waits for killed processes to leave the cgroup.
const EMPTY_WAIT: Duration = Duration::from_secs(5);

/// A cgroup, by the folder it has in each controller's hierarchy. Plain data: the runtime keeps
/// it in its records, and the shim works with it without looking at the machine again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroup {
    pub version: Version,
    /// The path below each hierarchy's root, `/`-separated, without a leading `/` (what
    /// `/proc/PID/cgroup` shows, less that `/`).
    pub relative: String,
    /// Its folder in each controller's hierarchy (one folder for all of them on v2).
    pub dirs: BTreeMap<Controller, PathBuf>,
    /// v2: the controllers each ancestor gives its children (`+cpu +memory +pids`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub v2_enable: String,
}

impl Cgroup {
    pub fn new(hierarchy: &Hierarchy, relative: &str) -> Cgroup {
        let relative = relative.trim_matches('/').to_string();
        let dirs = hierarchy
            .mounts
            .iter()
            .map(|(controller, mount)| (*controller, mount.join(&relative)))
            .collect();
        let v2_enable = match hierarchy.version {
            Version::V1 => String::new(),
            Version::V2 => Controller::ALL
                .into_iter()
                .filter_map(Controller::v2_name)
                .filter(|name| hierarchy.v2_controllers.iter().any(|have| have == name))
                .map(|name| format!("+{name}"))
                .collect::<Vec<_>>()
                .join(" "),
        };
        Cgroup {
            version: hierarchy.version,
            relative,
            dirs,
            v2_enable,
        }
    }

    /// The cgroup `name` below this one.
    pub fn child(&self, name: &str) -> Cgroup {
        Cgroup {
            version: self.version,
            relative: format!("{}/{name}", self.relative),
            dirs: self.dirs.iter().map(|(c, d)| (*c, d.join(name))).collect(),
            v2_enable: self.v2_enable.clone(),
        }
    }

    /// The cgroup this one is in (None at a hierarchy's root).
    pub fn parent(&self) -> Option<Cgroup> {
        let (parent, _) = self.relative.rsplit_once('/')?;
        Some(Cgroup {
            version: self.version,
            relative: parent.to_string(),
            dirs: self
                .dirs
                .iter()
                .filter_map(|(c, d)| Some((*c, d.parent()?.to_path_buf())))
                .collect(),
            v2_enable: self.v2_enable.clone(),
        })
    }

    pub fn dir(&self, controller: Controller) -> Option<&Path> {
        self.dirs.get(&controller).map(PathBuf::as_path)
    }

    pub fn has(&self, controller: Controller) -> bool {
        self.dirs.contains_key(&controller)
    }

    /// Each folder once (co-mounted v1 controllers and v2 share one).
    pub fn unique_dirs(&self) -> Vec<&Path> {
        let mut seen = BTreeSet::new();
        self.dirs
            .values()
            .filter(|d| seen.insert(d.as_path()))
            .map(PathBuf::as_path)
            .collect()
    }

    /// Whether the cgroup's folders exist (all of them).
    pub fn exists(&self) -> bool {
        self.unique_dirs().iter().all(|d| d.is_dir())
    }

    /// Makes the cgroup's folder in every hierarchy, with its missing parents. On v2 every
    /// ancestor is given the controllers first, as the no-internal-process rule wants.
    pub fn create(&self) -> Result<()> {
        if self.version == Version::V2 {
            self.enable_v2_controllers()?;
        }
        for dir in self.unique_dirs() {
            create_dir_all_retrying(dir)?;
        }
        Ok(())
    }

    /// v2: `+cpu +memory +pids` in the `cgroup.subtree_control` of the root and of every
    /// ancestor of this cgroup, made where missing.
    fn enable_v2_controllers(&self) -> Result<()> {
        if self.v2_enable.is_empty() {
            return Ok(());
        }
        let Some(leaf) = self.unique_dirs().first().map(|d| d.to_path_buf()) else {
            return Ok(());
        };
        let depth = self.relative.split('/').filter(|p| !p.is_empty()).count();
        let ancestors: Vec<&Path> = leaf.ancestors().skip(1).take(depth).collect();
        for dir in ancestors.into_iter().rev() {
            create_dir_all_retrying(dir)?;
            let control = dir.join("cgroup.subtree_control");
            let enabled = std::fs::read_to_string(&control).unwrap_or_default();
            let missing = self
                .v2_enable
                .split(' ')
                .any(|want| !enabled.split_whitespace().any(|have| have == &want[1..]));
            if missing {
                write_file(&control, &self.v2_enable)?;
            }
        }
        Ok(())
    }

    /// Puts the calling process in this cgroup. On v1 a single-threaded caller (a forked
    /// child, which is how every podlab process enters its cgroup) writes `0` to each `tasks`
    /// file: the kernel moves the calling thread alone without taking the global
    /// `cgroup_threadgroup_rwsem` for writing, whose first taking after a quiet while waits
    /// for an RCU grace period (about 8 ms here, against 0.05 to 0.25 ms this way). A caller
    /// with other threads, and v2 (where `cgroup.threads` cannot cross resource domains),
    /// write `0` to `cgroup.procs`.
    pub fn enter_self(&self) -> Result<()> {
        if self.version == Version::V1 && single_threaded() {
            for dir in self.unique_dirs() {
                write_file(&dir.join("tasks"), "0")?;
            }
            return Ok(());
        }
        self.add_process(0)
    }

    /// Puts process `pid` (all its threads) in this cgroup.
    pub fn add_process(&self, pid: i32) -> Result<()> {
        let text = pid.to_string();
        for dir in self.unique_dirs() {
            write_file(&dir.join("cgroup.procs"), &text)?;
        }
        Ok(())
    }

    /// Every process in the cgroup, in any of its hierarchies (not in its children).
    pub fn processes(&self) -> Result<Vec<i32>> {
        let mut pids = BTreeSet::new();
        for dir in self.unique_dirs() {
            let path = dir.join("cgroup.procs");
            match std::fs::read_to_string(&path) {
                Ok(text) => pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("reading", path, e)),
            }
        }
        Ok(pids.into_iter().collect())
    }

    /// SIGKILLs every process in the cgroup and its children, and waits (bounded) until the
    /// kernel has taken them out. Returns the pids killed.
    pub fn kill_all(&self) -> Result<Vec<i32>> {
        let mut killed = Vec::new();
        let deadline = Instant::now() + EMPTY_WAIT;
        loop {
            let mut left = self.processes()?;
            for child in self.children()? {
                left.extend(child.processes()?);
            }
            if left.is_empty() {
                return Ok(killed);
            }
            for pid in left {
                if pid > 0 && pid != std::process::id() as i32 {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    if !killed.contains(&pid) {
                        killed.push(pid);
                    }
                }
            }
            if Instant::now() >= deadline {
                return Ok(killed);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The cgroups directly below this one, by their folders in any hierarchy: a remover
    /// killed between two hierarchies' rmdirs leaves a child in some of them only.
    pub fn children(&self) -> Result<Vec<Cgroup>> {
        let mut names = BTreeSet::new();
        for dir in self.unique_dirs() {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("listing", dir.to_path_buf(), e)),
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    if let Some(name) = entry.file_name().to_str() {
                        names.insert(name.to_string());
                    }
                }
            }
        }
        Ok(names.iter().map(|name| self.child(name)).collect())
    }

    /// Removes the cgroup and every cgroup below it, killing what still runs there. A cgroup
    /// that is already gone is fine.
    pub fn remove(&self) -> Result<()> {
        self.kill_all()?;
        self.remove_tree()
    }

    fn remove_tree(&self) -> Result<()> {
        for child in self.children()? {
            child.remove_tree()?;
        }
        let deadline = Instant::now() + EMPTY_WAIT;
        for dir in self.unique_dirs() {
            // The kernel removes a cgroup's files with its folder; a test's fake hierarchy
            // holds plain files, removed with it.
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) && !is_cgroupfs(dir) => {
                        std::fs::remove_dir_all(dir).map_err(|e| Error::io("removing", dir, e))?;
                        break;
                    }
                    // A process that moved itself in after the kill (a pause entering its pod's
                    // cgroups while its shim was being killed), or a child made meanwhile:
                    // killed and removed in turn.
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
                    {
                        self.kill_all()?;
                        for child in self.children()? {
                            child.remove_tree()?;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(Error::io("removing the cgroup", dir, e)),
                }
            }
        }
        Ok(())
    }

    /// Removes the cgroup, then each of its `levels` nearest ancestors that is left empty (no
    /// processes, no other child): a pod's cgroup with its QoS folder and podlab's root when it
    /// was the last pod. An ancestor still in use stays.
    pub fn remove_with_empty_ancestors(&self, levels: usize) -> Result<()> {
        self.remove()?;
        if let Some(parent) = self.parent() {
            parent.remove_if_empty(levels.saturating_sub(1));
        }
        Ok(())
    }

    /// Removes this cgroup if nothing is in it (no process, no child cgroup), then so on up
    /// its `levels` nearest ancestors; stops at the first one still in use. Never kills.
    /// Whether this cgroup was removed by the call.
    pub fn remove_if_empty(&self, levels: usize) -> bool {
        let mut current = Some(self.clone());
        let mut removed_self = false;
        for level in 0..=levels {
            let Some(cgroup) = current else { break };
            let mut in_use = false;
            let mut removed = false;
            for dir in cgroup.unique_dirs() {
                match std::fs::remove_dir(dir) {
                    Ok(()) => removed = true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    // A process or another child is in it: it stays, and so does all above it.
                    Err(_) => in_use = true,
                }
            }
            if in_use {
                break;
            }
            if level == 0 {
                removed_self = removed;
            }
            current = cgroup.parent();
        }
        removed_self
    }

    /// Writes `value` to the controller's `file` in this cgroup.
    pub fn write(&self, controller: Controller, file: &str, value: &str) -> Result<()> {
        match self.dir(controller) {
            Some(dir) => write_file(&dir.join(file), value),
            None => Ok(()),
        }
    }

    /// Writes each of `lines` to the controller's `file` with a `write` of its own, through one
    /// open: a file that takes one entry per write (v1 `devices.allow`) without an open and a
    /// close for each.
    pub fn write_each(&self, controller: Controller, file: &str, lines: &[String]) -> Result<()> {
        use std::io::Write;
        let Some(dir) = self.dir(controller) else {
            return Ok(());
        };
        let path = dir.join(file);
        let failed = |line: &str, source| Error::Write {
            value: line.to_string(),
            path: path.clone(),
            source,
        };
        let mut opened = open_for_writing(&path).map_err(|e| failed(&lines.join("\n"), e))?;
        for line in lines {
            // One write per entry: the kernel reads one rule from each.
            let written = opened.write(line.as_bytes()).map_err(|e| failed(line, e))?;
            if written != line.len() {
                return Err(failed(line, std::io::ErrorKind::WriteZero.into()));
            }
        }
        Ok(())
    }

    /// Reads the controller's `file` (None when the controller or the file is missing).
    pub fn read(&self, controller: Controller, file: &str) -> Result<Option<String>> {
        let Some(dir) = self.dir(controller) else {
            return Ok(None);
        };
        let path = dir.join(file);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("reading", path, e)),
        }
    }

    /// Whether the controller's `file` exists here (an optional file: `memory.memsw.*` needs
    /// swap accounting, `cpu.cfs_*` a kernel with CFS bandwidth control).
    pub fn has_file(&self, controller: Controller, file: &str) -> bool {
        self.dir(controller).is_some_and(|d| d.join(file).exists())
    }
}

/// Whether the calling process has one thread (`num_threads`, the 20th field of
/// `/proc/self/stat`); unknown counts as not.
fn single_threaded() -> bool {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return false;
    };
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(17))
        .is_some_and(|threads| threads == "1")
}

/// One write, as the kernel wants cgroup values: the whole value in one `write(2)`.
pub(crate) fn write_file(path: &Path, value: &str) -> Result<()> {
    use std::io::Write;
    let mut file = open_for_writing(path).map_err(|source| Error::Write {
        value: value.to_string(),
        path: path.to_path_buf(),
        source,
    })?;
    file.write_all(value.as_bytes())
        .map_err(|source| Error::Write {
            value: value.to_string(),
            path: path.to_path_buf(),
            source,
        })
}

fn open_for_writing(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        // A real cgroup's files are the kernel's and O_CREAT leaves them be; a test's fake
        // hierarchy gets them made.
        .create(true)
        .open(path)
}

/// mkdir -p, again when a concurrent removal of an empty parent (another pod's last one)
/// takes a folder away between two of its steps.
fn create_dir_all_retrying(dir: &Path) -> Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::create_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
            Err(e) => return Err(Error::io("creating the cgroup", dir, e)),
        }
    }
}

fn is_cgroupfs(dir: &Path) -> bool {
    matches!(
        crate::hierarchy::fs_magic(dir),
        Some(crate::hierarchy::CGROUP_SUPER_MAGIC | crate::hierarchy::CGROUP2_SUPER_MAGIC)
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A throw-away folder for a fake hierarchy.
    pub(crate) fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "podlab-cgroups-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_forked_child_enters_by_its_tasks_file_and_a_threaded_process_by_cgroup_procs() {
        let root = scratch("enter");
        let h = Hierarchy::v1_at(&root);
        let threaded = h.cgroup("threaded");
        let forked = h.cgroup("forked");
        threaded.create().unwrap();
        forked.create().unwrap();
        let (parked, park) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            scope.spawn(move || park.recv());
            assert!(!single_threaded());
            threaded.enter_self().unwrap();
            drop(parked);
        });
        let memory = |c: &Cgroup| c.dir(Controller::Memory).unwrap().to_path_buf();
        assert_eq!(
            std::fs::read_to_string(memory(&threaded).join("cgroup.procs")).unwrap(),
            "0"
        );
        assert!(!memory(&threaded).join("tasks").exists());
        // SAFETY: the child only writes files and leaves with _exit.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let ok = single_threaded() && forked.enter_self().is_ok();
                // SAFETY: ends the forked child without running the parent's exit handlers.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
        assert_eq!(
            std::fs::read_to_string(memory(&forked).join("tasks")).unwrap(),
            "0"
        );
        assert!(!memory(&forked).join("cgroup.procs").exists());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn paths_children_and_parents() {
        let root = scratch("paths");
        let h = Hierarchy::v1_at(&root);
        let pod = h.cgroup("/podlab-x/kubepods/burstable/podu1/");
        assert_eq!(pod.relative, "podlab-x/kubepods/burstable/podu1");
        assert_eq!(
            pod.dir(Controller::Memory).unwrap(),
            root.join("memory/podlab-x/kubepods/burstable/podu1")
        );
        let c = pod.child("abc");
        assert_eq!(c.relative, "podlab-x/kubepods/burstable/podu1/abc");
        assert_eq!(c.parent().unwrap(), pod);
        assert_eq!(h.cgroup("top").parent(), None);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn v2_ancestors_get_the_controllers_and_removal_prunes_empty_ones() {
        let root = scratch("v2-enable");
        std::fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        let h = Hierarchy::v2_at(&root).unwrap();
        assert_eq!(h.version, Version::V2);
        let pod = h.cgroup("podlab-x/kubepods/besteffort/podu1");
        assert_eq!(pod.v2_enable, "+cpu +memory +pids");
        assert_eq!(
            pod.unique_dirs().len(),
            1,
            "one folder for every controller"
        );
        pod.create().unwrap();
        for ancestor in [
            "",
            "podlab-x",
            "podlab-x/kubepods",
            "podlab-x/kubepods/besteffort",
        ] {
            let control = root.join(ancestor).join("cgroup.subtree_control");
            assert_eq!(
                std::fs::read_to_string(&control).unwrap(),
                "+cpu +memory +pids",
                "{}",
                control.display()
            );
        }
        assert!(pod.exists());
        let other = h.cgroup("podlab-x/kubepods/besteffort/podu2");
        other.create().unwrap();
        pod.remove_with_empty_ancestors(3).unwrap();
        assert!(!pod.exists());
        assert!(
            root.join("podlab-x/kubepods/besteffort/podu2").is_dir(),
            "a sibling pod keeps the QoS folder"
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
