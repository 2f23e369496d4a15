//! Integration tests of `podlab lab`: for every lab, start → check says "not yet" (with the
//! lab's own words) → the lab's common mistake → check still fails → reset → start → solve →
//! check passes → reset → nothing left on the host (processes the lab started, mounts, pods,
//! sandboxes, the lab's work folder; and per lab what it makes besides: network namespaces,
//! links, IPC objects, hand-made pause processes).
//!
//! Each test has a `PODLAB_ROOT` ([`Root`]) and an `XDG_STATE_HOME` of its own.

use crate::pods::{Out, Root};

/// What each lab test runs against: its root, its state folder and the lab's id.
struct LabRun {
    root: Root,
    id: String,
    number: String,
}

impl LabRun {
    fn new(name: &str, network: bool) -> LabRun {
        LabRun::named(name, &format!("lab-{name}"), network)
    }

    fn named(name: &str, test: &str, network: bool) -> LabRun {
        LabRun::build(
            name,
            test,
            |root| if network { root.with_network() } else { root },
        )
    }

    /// A lab run whose root `adapt` changes (network, agent settings).
    fn with_root(name: &str, adapt: impl FnOnce(Root) -> Root) -> LabRun {
        LabRun::build(name, &format!("lab-{name}"), adapt)
    }

    fn build(name: &str, test: &str, adapt: impl FnOnce(Root) -> Root) -> LabRun {
        let lab = podlab_labs::find(name).unwrap_or_else(|| panic!("no lab {name}"));
        let root = Root::new(test);
        let state = root.dir.join("state").display().to_string();
        let root = adapt(root.with_env("XDG_STATE_HOME", &state));
        LabRun {
            root,
            id: lab.id(),
            number: lab.number.to_string(),
        }
    }

    fn lab(&self, args: &[&str]) -> Out {
        let mut all = vec!["lab"];
        all.extend(args);
        self.root.run(&all)
    }

    fn step_ok(&self, args: &[&str]) -> String {
        let out = self.lab(args);
        assert_eq!(
            out.code,
            Some(0),
            "podlab lab {args:?} failed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// `podlab lab check` must fail and say "not yet"; its output.
    fn check_fails(&self, when: &str) -> String {
        let out = self.lab(&["check", &self.number]);
        assert_eq!(
            out.code,
            Some(1),
            "check after {when} should fail:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        assert!(out.stdout.contains("not yet"), "{}", out.stdout);
        out.stdout
    }

    /// The whole cycle; `extra_clean` checks what this lab makes outside podlab's root.
    fn cycle(&self, extra_clean: impl Fn()) {
        let lab = podlab_labs::find(&self.id).unwrap();
        self.step_ok(&["start", &self.number]);
        let first = self.check_fails("start");
        assert!(
            first.contains(lab.not_yet),
            "the first check of {} should say {:?}:\n{first}",
            self.id,
            lab.not_yet
        );
        self.step_ok(&["solve", &self.number, "--mistake"]);
        let after_mistake = self.check_fails("the mistake");
        eprintln!("{} after its mistake:\n{after_mistake}", self.id);
        self.step_ok(&["reset", &self.number]);
        self.step_ok(&["start", &self.number]);
        self.step_ok(&["solve", &self.number]);
        let out = self.lab(&["check", &self.number]);
        assert_eq!(
            out.code,
            Some(0),
            "check after solve should pass:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        assert!(out.stdout.contains("passed"), "{}", out.stdout);
        let status = self.step_ok(&["status"]);
        assert!(status.contains(&self.id), "{status}");
        self.step_ok(&["reset", &self.number]);
        self.assert_nothing_left();
        extra_clean();
    }

    fn assert_nothing_left(&self) {
        let left = podlab_labs::kit::procs::tagged(&self.id);
        assert!(
            left.is_empty(),
            "processes of lab {} left: {left:?}",
            self.id
        );
        let work = self.root.dir.join("state/podlab/labs").join(&self.id);
        assert!(!work.exists(), "{} is left", work.display());
        self.root.assert_nothing_left();
    }
}

#[test]
fn lab_01_pod_by_hand() {
    LabRun::new("pod-by-hand", false).cycle(|| {
        let left: Vec<_> = podlab_labs::kit::procs::all()
            .into_iter()
            .filter(|p| p.name.contains("pause") && !p.is_zombie())
            .filter(|p| {
                podlab_labs::kit::procs::uts_names(p.pid).is_ok_and(|(h, _)| h == "lab-pod")
            })
            .collect();
        assert!(left.is_empty(), "hand-made pause processes left: {left:?}");
    });
}

#[test]
fn lab_list_shows_every_lab_and_an_unknown_lab_is_a_usage_error() {
    let run = LabRun::named("pod-by-hand", "lab-list", false);
    let list = run.step_ok(&["list"]);
    for lab in podlab_labs::all() {
        assert!(list.contains(&lab.id()), "{}: {list}", lab.id());
    }
    let out = run.lab(&["start", "no-such-lab"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("no lab \"no-such-lab\""),
        "{}",
        out.stderr
    );
    let out = run.lab(&["check"]);
    assert_eq!(out.code, Some(2), "check before any start: {out:?}");
    // Hints come one after the other; the last one of lab 8 names `podlab explain`.
    let first = run.step_ok(&["hint", "8"]);
    assert!(first.starts_with("hint 1 of 3"), "{first}");
    assert!(run.step_ok(&["hint", "8"]).starts_with("hint 2 of 3"));
    assert!(run.step_ok(&["hint", "8", "3"]).contains("podlab explain"));
    assert_eq!(run.lab(&["hint", "8", "4"]).code, Some(2));
    // Resetting every lab when none was started removes nothing and fails nowhere.
    run.step_ok(&["reset"]);
    let status = run.step_ok(&["status"]);
    assert!(
        status.starts_with(&format!("0 of {} labs passed", podlab_labs::all().len())),
        "{status}"
    );
    assert!(
        status.contains("08-phase"),
        "hints are progress too: {status}"
    );
}

#[test]
fn lab_02_uts() {
    LabRun::new("uts", false).cycle(|| {
        assert_ne!(podlab_ns::uts::domainname().unwrap(), "lab.example");
    });
}

#[test]
fn lab_03_ipc() {
    LabRun::new("ipc", false).cycle(|| {
        let left = podlab_ns::ipc::list_sysv().unwrap();
        assert!(
            left.is_empty(),
            "System V objects left in the test's ipc namespace: {left:?}"
        );
    });
}

#[test]
fn lab_04_veth_bridge() {
    LabRun::new("veth-bridge", false).cycle(|| {
        let netns: Vec<_> = std::fs::read_dir("/run/netns")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("lab-"))
                    .collect()
            })
            .unwrap_or_default();
        assert!(netns.is_empty(), "network namespaces left: {netns:?}");
        let out = std::process::Command::new("ip")
            .args(["-o", "link"])
            .output()
            .unwrap();
        let links = String::from_utf8_lossy(&out.stdout);
        assert!(
            !links.contains("br0") && !links.contains("-port"),
            "links left: {links}"
        );
    });
}

#[test]
fn lab_05_pid_zombies() {
    LabRun::new("pid-zombies", false).cycle(|| {});
}

#[test]
fn lab_06_init_order() {
    LabRun::new("init-order", false).cycle(|| {});
}

#[test]
fn lab_07_probes() {
    LabRun::new("probes", false).cycle(|| {});
}

#[test]
fn lab_08_phase() {
    LabRun::new("phase", false).cycle(|| {});
}

#[test]
fn lab_09_sandbox() {
    LabRun::new("sandbox", false).cycle(|| {});
}

#[test]
fn lab_10_cni_failure() {
    let run = LabRun::with_root("cni-failure", |root| {
        root.with_network()
            .with_env("PODLAB_NODE_ERROR_BACKOFF", "1s")
    });
    run.cycle(|| {
        // The bridge is the node's while its agent runs (as a CNI bridge on a kubelet node);
        // once the agent stops, nothing of the network may be left.
        run.root.ok(&["node", "--stop"]);
        let out = std::process::Command::new("ip")
            .args(["-o", "link"])
            .output()
            .unwrap();
        let links = String::from_utf8_lossy(&out.stdout);
        let left: Vec<&str> = links
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .filter(|n| n.starts_with("podlab") || n.starts_with("veth"))
            .collect();
        assert!(left.is_empty(), "links left: {left:?}");
        // /run/podlab-net/<netns inode>: this network namespace's conflist and leases (other
        // namespaces on the host have their own).
        let inode = podlab_ns::ops::self_inode(podlab_ns::NsKind::Net).unwrap();
        let state = std::path::Path::new("/run/podlab-net").join(inode.to_string());
        assert!(
            !state.exists(),
            "network state (conflist, leases) left in {}",
            state.display()
        );
    });
}

#[test]
fn lab_11_templates() {
    LabRun::new("templates", false).cycle(|| {});
}

#[test]
fn lab_12_informer() {
    LabRun::new("informer", false).cycle(|| {});
}

#[test]
fn lab_13_debug() {
    let run = LabRun::new("debug", false);
    run.cycle(|| {
        let images = run.root.ok(&["image", "ls"]);
        assert!(
            !images.contains("noshell"),
            "the lab's image is left: {images}"
        );
    });
}

#[test]
fn lab_14_docker_containerd() {
    let missing = podlab_layers::tools::missing(podlab_layers::tools::DEMO_TOOLS);
    crate::skip_unless!(
        missing.is_empty(),
        format!(
            "lab 14 needs the real daemons: {}",
            podlab_layers::tools::install_line(&missing)
        )
    );
    LabRun::new("docker-containerd", false).cycle(|| {
        let left: Vec<_> = podlab_labs::kit::procs::all()
            .into_iter()
            .filter(|p| !p.is_zombie() && (p.name == "dockerd" || p.name == "containerd"))
            .filter(|p| podlab_labs::kit::procs::tagged_with(p.pid, "14-docker-containerd"))
            .collect();
        assert!(left.is_empty(), "daemons left: {left:?}");
    });
}

#[test]
fn lab_15_layers() {
    LabRun::new("layers", false).cycle(|| {});
}

#[test]
fn lab_16_security() {
    LabRun::new("security", false).cycle(|| {});
}

#[test]
fn lab_19_userns() {
    LabRun::new("userns", false).cycle(|| {});
}

#[test]
fn lab_17_oom() {
    let run = LabRun::new("oom", false);
    let memory_cgroup = run.root.runtime().cgroups().is_some_and(|node| {
        node.hierarchy.version == podlab_cgroups::Version::V1
            && node
                .hierarchy
                .mounts
                .contains_key(&podlab_cgroups::Controller::Memory)
    });
    crate::skip_unless!(
        memory_cgroup,
        "lab 17 needs a writable cgroup v1 memory hierarchy (needs root)"
    );
    run.cycle(|| {});
}

#[test]
fn lab_18_resize() {
    let run = LabRun::new("resize", false);
    let cgroups = run.root.runtime().cgroups().is_some_and(|node| {
        node.hierarchy.version == podlab_cgroups::Version::V1
            && [
                podlab_cgroups::Controller::Cpu,
                podlab_cgroups::Controller::Memory,
            ]
            .iter()
            .all(|c| node.hierarchy.mounts.contains_key(c))
    });
    crate::skip_unless!(
        cgroups,
        "lab 18 needs writable cgroup v1 cpu and memory hierarchies (needs root)"
    );
    run.cycle(|| {});
}
