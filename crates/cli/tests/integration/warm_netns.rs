//! Integration tests: the warm network namespace a `podlab run --rm` leaves for the next
//! one-shot pod (`network::warm`). The kernel is the judge: the inode of the network namespace
//! the keeper holds (`/proc/PID/fd`) and the one the next pod's container runs in
//! (`/proc/self/ns/net`), the address on its `eth0`, the veths and bridge of the node, the
//! leases; no timing.
//!
//! Each test runs its podlab commands in a network namespace of its own (the node), so that
//! no other test's `podlab gc` (which ends this namespace's keeper) or pods meet its keeper.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::pods::{Out, Root};
use crate::support::wait_until;

/// A network namespace for one test, held by a descriptor; podlab's state in it is collected
/// (`podlab gc` inside) when it drops, also when the test fails.
struct Node {
    netns: OwnedFd,
    root: Root,
}

impl Node {
    fn new(test: &str) -> Node {
        let netns = std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            podlab_ns::ops::open(
                std::path::Path::new("/proc/thread-self/ns/net"),
                podlab_ns::NsKind::Net,
            )
            .unwrap()
        })
        .join()
        .unwrap();
        Node {
            netns,
            root: Root::new(test).on_the_network_of_this_test(),
        }
    }

    fn inode(&self) -> u64 {
        nix::sys::stat::fstat(self.netns.as_fd()).unwrap().st_ino
    }

    /// `podlab ARGS` in this node's network namespace, with `env`.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut command: Command = self.root.command(args);
        command.envs(env.iter().copied()).stdin(Stdio::null());
        let fd = self.netns.as_raw_fd();
        // SAFETY: setns is async-signal-safe; the child is single-threaded after fork.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let output = command.output().unwrap();
        Out {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `podlab run NAME` of a pod that sleeps, with `env`, until the node agent runs it.
    fn run_sleeper(&self, name: &str, env: &[(&str, &str)]) {
        let out = self.run(
            &["run", name, "--image", "busybox", "--", "sleep", "3600"],
            env,
        );
        assert_eq!(out.code, Some(0), "{out:?}");
        self.root.wait_pod(
            name,
            "running",
            Duration::from_secs(60),
            crate::pods::running,
        );
    }

    /// A one-shot pod that prints its network namespace and its `eth0` addresses.
    fn run_rm(&self, name: &str, env: &[(&str, &str)]) -> (u64, Vec<String>) {
        let out = self.run(
            &[
                "run",
                name,
                "--image",
                "busybox",
                "--rm",
                "--restart",
                "Never",
                "--command",
                "--",
                "sh",
                "-c",
                "readlink /proc/self/ns/net; ip -4 -o addr show dev eth0",
            ],
            env,
        );
        assert_eq!(out.code, Some(0), "{out:?}");
        let mut lines = out.stdout.lines();
        let netns = lines
            .next()
            .and_then(|l| l.strip_prefix("net:["))
            .and_then(|l| l.strip_suffix(']'))
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| panic!("no netns in {out:?}"));
        let addresses = lines
            .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "inet").nth(1))
            .map(str::to_owned)
            .collect();
        (netns, addresses)
    }

    /// The keepers of warm namespaces in this node (pid, the inode of the namespace they hold).
    fn keepers(&self) -> Vec<(i32, Option<u64>)> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() != "podlab-warm" {
                continue;
            }
            let node = podlab_ns::ops::ns_inode(pid, podlab_ns::NsKind::Net).ok();
            if node != Some(self.inode()) {
                continue;
            }
            let held = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter_map(|l| {
                    l.to_str()?
                        .strip_prefix("net:[")?
                        .strip_suffix(']')?
                        .parse()
                        .ok()
                })
                // While it makes its namespace, a keeper holds the node's for a moment.
                .find(|held| *held != self.inode());
            found.push((pid, held));
        }
        found
    }

    /// The links of this node: (name, kind, master index), and the bridge's index.
    fn links(&self) -> Vec<podlab_ns::net::Link> {
        podlab_ns::net::in_netns(self.netns.as_fd(), || {
            podlab_ns::net::Netlink::open().unwrap().links().unwrap()
        })
        .unwrap()
    }

    fn veths(&self) -> Vec<String> {
        self.links()
            .into_iter()
            .filter(|l| l.kind.as_deref() == Some("veth"))
            .map(|l| l.name)
            .collect()
    }

    fn state_dir(&self) -> PathBuf {
        PathBuf::from("/run/podlab-net").join(self.inode().to_string())
    }

    fn leases(&self) -> Vec<String> {
        podlab_cni::ipam::leases_in(&self.state_dir().join("cni/ipam/podlab"))
            .unwrap_or_default()
            .into_iter()
            .map(|l| l.ip.to_string())
            .collect()
    }

    /// Nothing of podlab's network is left in this node: no keeper, veth, bridge, lease or
    /// state folder.
    fn assert_nothing_left(&self) {
        assert_eq!(self.keepers(), vec![], "keepers left");
        assert_eq!(self.veths(), Vec::<String>::new(), "veths left");
        let bridge = self.links().into_iter().any(|l| l.name == "podlab0");
        assert!(!bridge, "the bridge is left");
        assert_eq!(self.leases(), Vec::<String>::new(), "leases left");
        assert!(!self.state_dir().exists(), "{:?} left", self.state_dir());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let gc = self.run(&["gc"], &[]);
        if gc.code != Some(0) {
            eprintln!("podlab gc in the test's node failed: {gc:?}");
        }
    }
}

/// A keeper of this node holding a namespace (its ADD may still run), within a bounded wait.
fn warm_keeper(node: &Node) -> (i32, u64) {
    let mut found = None;
    wait_until(Duration::from_secs(30), || {
        found = node
            .keepers()
            .into_iter()
            .find_map(|(pid, held)| Some((pid, held?)));
        found.is_some()
    });
    found.expect("a keeper holding a warm network namespace")
}

/// A keeper of this node whose ADD is done (its result is cached in its warm folder), within a
/// bounded wait: a command finding the keeper still in its ADD waits for it only a few seconds,
/// which a loaded machine can exceed, and then rightly makes a namespace of its own.
fn ready_warm_keeper(node: &Node) -> (i32, u64) {
    let warm = node.state_dir().join("warm");
    let added = || {
        std::fs::read_dir(&warm)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|folder| std::fs::read_dir(folder.path()).into_iter().flatten())
            .flatten()
            .any(|file| file.file_name().to_string_lossy().ends_with("-eth0"))
    };
    assert!(
        wait_until(Duration::from_secs(60), added),
        "the keeper's ADD left no cached result in {warm:?}"
    );
    warm_keeper(node)
}

#[test]
fn the_next_run_rm_joins_the_warm_namespace_and_gc_removes_the_one_after() {
    let node = Node::new("warm-join");
    // A warm namespace that outlives any slowness of a loaded machine; gc ends it below.
    let lasting = [("PODLAB_WARM_NETNS", "600")];
    let (_, first_addresses) = node.run_rm("one", &lasting);
    assert_eq!(first_addresses.len(), 1, "eth0 has an address");
    // The pod is gone; what stays is the keeper's namespace. (Its inode number may be the
    // first pod's: the kernel gives a destroyed namespace's number to the next one made.)
    let (_, warm) = ready_warm_keeper(&node);
    let (second, addresses) = node.run_rm("two", &lasting);
    assert_eq!(second, warm, "the second pod runs in the warm namespace");
    assert_eq!(addresses.len(), 1, "{addresses:?}");
    assert!(addresses[0].starts_with("10.88."), "{addresses:?}");
    node.root.assert_nothing_left();
    // Its removal left the next warm namespace; gc ends it with everything of the network.
    warm_keeper(&node);
    let gc = node.run(&["gc"], &[]);
    assert_eq!(gc.code, Some(0), "{gc:?}");
    node.assert_nothing_left();
}

#[test]
fn a_warm_namespace_ends_by_itself_or_on_sigterm_and_none_is_made_when_switched_off() {
    let node = Node::new("warm-ttl");
    // The default: the keeper, if the removal left time for one, ends by itself (1.5 s after
    // the command returned), and with it everything of the network.
    node.run_rm("default", &[]);
    assert!(
        wait_until(Duration::from_secs(30), || node.keepers().is_empty()
            && node.veths().is_empty()
            && !node.state_dir().exists()),
        "with the default wait, the keeper and its network stay: keepers {:?}, veths {:?}",
        node.keepers(),
        node.veths()
    );
    node.assert_nothing_left();
    // A wait that ends before the removal does: no keeper is made, and the bridge is gone once
    // the removal is (the command's stderr, read to its end here, closes with it).
    node.run_rm("late", &[("PODLAB_WARM_NETNS", "0.001")]);
    node.assert_nothing_left();
    // A wait long enough to see the keeper on a loaded machine; it ends by itself.
    node.run_rm("short", &[("PODLAB_WARM_NETNS", "5")]);
    warm_keeper(&node);
    assert!(
        wait_until(Duration::from_secs(30), || node.keepers().is_empty()
            && node.veths().is_empty()
            && !node.state_dir().exists()),
        "the keeper and its network stay: keepers {:?}, veths {:?}",
        node.keepers(),
        node.veths()
    );
    node.assert_nothing_left();
    node.run_rm("off", &[("PODLAB_WARM_NETNS", "0")]);
    node.assert_nothing_left();
    // SIGTERM ends a keeper as its deadline does: DEL, bridge, folder.
    node.run_rm("term", &[("PODLAB_WARM_NETNS", "600")]);
    let (pid, _) = warm_keeper(&node);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || node.keepers().is_empty()
            && node.veths().is_empty()
            && !node.state_dir().exists()),
        "after SIGTERM: keepers {:?}, veths {:?}",
        node.keepers(),
        node.veths()
    );
    node.assert_nothing_left();
}

#[test]
fn gc_releases_the_lease_of_a_killed_keeper_next_to_a_running_pod() {
    let node = Node::new("warm-kill");
    // A pod of the node agent on the same bridge, made first (so it does not take the warm
    // namespace): with it the bridge and the network's folder stay, so only gc's release of
    // the dead keeper's lease removes that lease.
    // The agent it starts keeps no warm namespace of its own (it would hold the keeper's
    // socket that the one-shot command's keeper is to take here).
    let out = node.run(
        &["run", "stay", "--image", "busybox", "--", "sleep", "3600"],
        &[("PODLAB_WARM_NETNS", "0")],
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        wait_until(Duration::from_secs(60), || node.leases().len() == 1),
        "the running pod's lease: {:?}",
        node.leases()
    );
    let bystander = node.leases();
    // A keeper that outlives any slowness of a loaded machine, so that it is there to kill.
    node.run_rm("one", &[("PODLAB_WARM_NETNS", "600")]);
    let (pid, _) = warm_keeper(&node);
    // Killed once its ADD is done (its lease is taken).
    assert!(
        wait_until(Duration::from_secs(30), || node.leases().len() == 2),
        "the keeper's lease: {:?}",
        node.leases()
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || node
        .keepers()
        .is_empty()));
    // Its namespace and veth went with it (the running pod's stays); the lease stays until gc.
    assert!(
        wait_until(Duration::from_secs(10), || node.veths().len() == 1),
        "veths: {:?}",
        node.veths()
    );
    assert_eq!(
        node.leases().len(),
        2,
        "the dead keeper's lease stays until gc"
    );
    let gc = node.run(&["gc"], &[]);
    assert_eq!(gc.code, Some(0), "{gc:?}");
    assert_eq!(
        node.leases(),
        bystander,
        "only the running pod's lease stays"
    );
    assert!(
        !node.state_dir().join("warm").exists(),
        "the dead keeper's folder stays"
    );
    assert_eq!(
        node.veths().len(),
        1,
        "the running pod's veth: {:?}",
        node.veths()
    );
    let out = node.run(&["delete", "pod", "stay"], &[]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = node.run(&["node", "--stop"], &[]);
    assert_eq!(out.code, Some(0), "{out:?}");
    node.assert_nothing_left();
}

/// The netns inode a running pod's container is in, read inside it.
fn netns_inside(node: &Node, pod: &str) -> u64 {
    let out = node.run(&["exec", pod, "--", "readlink", "/proc/self/ns/net"], &[]);
    assert_eq!(out.code, Some(0), "{out:?}");
    out.stdout
        .trim()
        .strip_prefix("net:[")
        .and_then(|l| l.strip_suffix(']'))
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no netns in {out:?}"))
}

#[test]
fn the_node_agents_next_pod_joins_the_namespace_its_keeper_made_and_the_keeper_ends_with_the_agent()
{
    let node = Node::new("warm-agent");
    let run = |name: &str| node.run_sleeper(name, &[]);
    // The first pod of the node makes its own; its question starts the agent's keeper.
    run("first");
    let (keeper, warm) = ready_warm_keeper(&node);
    assert_ne!(netns_inside(&node, "first"), warm);
    run("second");
    assert_eq!(
        netns_inside(&node, "second"),
        warm,
        "the second pod runs in the namespace the agent's keeper made"
    );
    // And the next one is made for the pod after.
    let mut next = None;
    wait_until(Duration::from_secs(60), || {
        next = node
            .keepers()
            .into_iter()
            .find(|(pid, held)| *pid != keeper && held.is_some());
        next.is_some()
    });
    let (next, _) = next.expect("a keeper after the taken one");
    assert!(
        wait_until(Duration::from_secs(60), || node.leases().len() == 3),
        "two pods' and the keeper's leases: {:?}",
        node.leases()
    );
    // The keeper lives as long as its agent: kill -9 of the agent ends it, with its DEL.
    let agent = podlab_kubelet::node::running_agent(&node.root.dir).expect("the node agent");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || node.keepers().is_empty()),
        "keeper {next} outlived its agent"
    );
    assert!(
        wait_until(Duration::from_secs(30), || node.leases().len() == 2
            && node.veths().len() == 2),
        "the keeper's lease or veth stayed: {:?}, {:?}",
        node.leases(),
        node.veths()
    );
    for pod in ["first", "second"] {
        let out = node.run(&["delete", "pod", pod], &[]);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let out = node.run(&["node", "--stop"], &[]);
    assert_eq!(out.code, Some(0), "{out:?}");
    node.assert_nothing_left();
}

/// `PODLAB_NODE_WARM_NETNS=0` switches the agent's keeper off: its pods make their own
/// namespaces, and no keeper, lease or veth of a warm namespace appears beside them.
#[test]
fn with_podlab_node_warm_netns_0_the_agent_keeps_no_namespace() {
    let node = Node::new("warm-agent-off");
    let off = [("PODLAB_NODE_WARM_NETNS", "0")];
    for name in ["first", "second"] {
        node.run_sleeper(name, &off);
    }
    // With the keeper on, one is started as soon as the first pod has asked (the test above).
    assert!(
        !wait_until(Duration::from_secs(3), || !node.keepers().is_empty()),
        "a keeper runs: {:?}",
        node.keepers()
    );
    assert_eq!(node.leases().len(), 2, "{:?}", node.leases());
    assert_eq!(node.veths().len(), 2, "{:?}", node.veths());
    for pod in ["first", "second"] {
        let out = node.run(&["delete", "pod", pod], &off);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let out = node.run(&["node", "--stop"], &off);
    assert_eq!(out.code, Some(0), "{out:?}");
    node.assert_nothing_left();
}
