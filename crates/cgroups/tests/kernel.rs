//! podlab-cgroups against the machine's kernel: cgroups made in the real hierarchy, a process
//! put in one before it runs, the values read back from the kernel's files, an OOM kill counted,
//! and everything removed. Needs root (the xtask's sandbox); each test's cgroups live below a
//! root of its own, removed by a guard even when the test fails.

use std::ffi::CString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use podlab_cgroups::{
    devices, memory, Cgroup, CgroupRoot, Controller, Hierarchy, QosClass, Resources, Version,
};

fn record_skip(test: &str, reason: &str) {
    eprintln!("PODLAB-SKIP: {test}: {reason}");
    if let Ok(log) = std::env::var("PODLAB_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(file, "{test}: {reason}");
        }
    }
}

/// The machine's v1 hierarchy, or why the test cannot run here.
fn v1_hierarchy(test: &str) -> Option<Hierarchy> {
    if !nix::unistd::geteuid().is_root() {
        record_skip(test, "needs root to make cgroups");
        return None;
    }
    match Hierarchy::detect() {
        Ok(h) if h.version == Version::V1 => Some(h),
        Ok(_) => {
            record_skip(
                test,
                "this machine runs cgroup v2; the v1 files are tested here",
            );
            None
        }
        Err(e) => {
            record_skip(test, &format!("no cgroups: {e}"));
            None
        }
    }
}

/// Removes the test's cgroup root (and all below it) when dropped.
struct Cleanup(Cgroup);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Err(e) = self.0.remove() {
            eprintln!("cleanup of {}: {e}", self.0.relative);
        }
    }
}

fn root_for(hierarchy: &Hierarchy, test: &str) -> (CgroupRoot, Cleanup) {
    let root = CgroupRoot {
        name: format!("podlab-test-{test}-{}", std::process::id()),
    };
    let guard = Cleanup(root.cgroup(hierarchy));
    (root, guard)
}

/// The `cgroup.procs` files of `cgroup`, ready for `open` between fork and exec.
fn procs_files(cgroup: &Cgroup) -> Vec<CString> {
    cgroup
        .unique_dirs()
        .iter()
        .map(|d| {
            CString::new(d.join("cgroup.procs").into_os_string().into_encoded_bytes()).unwrap()
        })
        .collect()
}

/// A command that writes itself into `cgroup` before it `execve`s: between fork and exec only
/// raw system calls run (the test harness is multi-threaded).
fn in_cgroup(mut command: Command, cgroup: &Cgroup) -> Command {
    let files = procs_files(cgroup);
    // SAFETY: the closure only calls open, write and close.
    unsafe {
        command.pre_exec(move || {
            for file in &files {
                let fd = libc::open(file.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            Ok(())
        });
    }
    command
}

fn read(cgroup: &Cgroup, controller: Controller, file: &str) -> String {
    cgroup
        .read(controller, file)
        .unwrap()
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn a_guaranteed_pods_values_reach_the_kernel_and_its_process_is_inside() {
    let Some(hierarchy) = v1_hierarchy("a_guaranteed_pods_values_reach_the_kernel") else {
        return;
    };
    let (root, _cleanup) = root_for(&hierarchy, "values");
    let pod = hierarchy.cgroup(&root.pod(QosClass::Guaranteed, "u-1"));
    pod.create().unwrap();
    let container = pod.child("c1");
    container.create().unwrap();
    Resources {
        cpu_shares: 256,
        cpu_quota: 25_000,
        cpu_period: 100_000,
        memory_limit_in_bytes: 64 << 20,
        pids_limit: 0,
        hugepage_limits: Vec::new(),
    }
    .apply(&container)
    .unwrap();
    Resources {
        pids_limit: 64,
        ..Resources::default()
    }
    .apply(&pod)
    .unwrap();
    assert!(devices::apply_default(&container).unwrap());

    assert_eq!(read(&container, Controller::Cpu, "cpu.shares"), "256");
    assert_eq!(
        read(&container, Controller::Cpu, "cpu.cfs_quota_us"),
        "25000"
    );
    assert_eq!(
        read(&container, Controller::Cpu, "cpu.cfs_period_us"),
        "100000"
    );
    assert_eq!(
        read(&container, Controller::Memory, "memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(read(&pod, Controller::Pids, "pids.max"), "64");
    let list = read(&container, Controller::Devices, "devices.list");
    let mut lines: Vec<&str> = list.lines().collect();
    lines.sort();
    let mut want: Vec<String> = devices::DEFAULT_ALLOWED.iter().map(|r| r.line()).collect();
    want.sort();
    assert_eq!(lines, want, "deny all, then runc's allow list");

    let mut child = in_cgroup(Command::new("sleep"), &container)
        .arg("100")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let procs = container.processes().unwrap();
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(procs, vec![pid]);
    assert!(
        own.lines()
            .any(|l| l.ends_with(&format!(":memory:/{}", container.relative))),
        "/proc/{pid}/cgroup: {own}"
    );

    pod.remove_with_empty_ancestors(2).unwrap();
    for dir in pod.unique_dirs() {
        assert!(!dir.exists(), "{} was removed", dir.display());
    }
    assert!(
        !hierarchy.cgroup(&root.kubepods()).exists(),
        "kubepods went with its last pod"
    );
}

#[test]
fn a_process_past_its_memory_limit_is_oom_killed_and_counted() {
    let Some(hierarchy) = v1_hierarchy("a_process_past_its_memory_limit_is_oom_killed") else {
        return;
    };
    if !Path::new("/bin/busybox").exists() {
        return record_skip("oom", "no /bin/busybox (busybox-static)");
    }
    let (root, _cleanup) = root_for(&hierarchy, "oom");
    let container = hierarchy
        .cgroup(&root.pod(QosClass::Burstable, "u-2"))
        .child("c1");
    container.create().unwrap();
    memory::set_limit(&container, 32 << 20).unwrap();
    assert_eq!(memory::oom_kills(&container).unwrap(), 0);
    let mut command = Command::new("/bin/busybox");
    command.args(["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"]);
    let status = in_cgroup(command, &container)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert_eq!(memory::oom_kills(&container).unwrap(), 1);
    container.remove().unwrap();
    assert!(!container.exists());
}

#[test]
fn removing_a_cgroup_kills_what_is_left_in_it() {
    let Some(hierarchy) = v1_hierarchy("removing_a_cgroup_kills_what_is_left") else {
        return;
    };
    let (root, _cleanup) = root_for(&hierarchy, "kill");
    let pod = hierarchy.cgroup(&root.pod(QosClass::BestEffort, "u-3"));
    let container = pod.child("c1");
    container.create().unwrap();
    let mut child = in_cgroup(Command::new("sleep"), &container)
        .arg("100")
        .spawn()
        .unwrap();
    // Reaped by a thread, as the shim or the sandbox's PID 1 would.
    let reaper = std::thread::spawn(move || child.wait().unwrap());
    pod.remove().unwrap();
    let status = reaper.join().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(!pod.exists() && !container.exists());
}

/// The cgroup2 filesystem of this machine: `/sys/fs/cgroup` on a v2 machine, the `unified`
/// mount beside the v1 controllers on a hybrid one (this lab's), found in mountinfo.
fn cgroup2_mount(test: &str) -> Option<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        record_skip(test, "needs root to make cgroups and load BPF programs");
        return None;
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let found = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = left.split(' ').nth(4)?;
        (right.split(' ').next() == Some("cgroup2")).then(|| PathBuf::from(mount_point))
    });
    if found.is_none() {
        record_skip(test, "no cgroup2 filesystem is mounted");
    }
    found
}

/// What a process of `cgroup` gets from the kernel for each device access, as errnos (0: it
/// worked): open `/dev/null` read-write, open `/dev/kmsg` read-only, mknod `node` as `c 1:11`
/// (kmsg), open that node. Measured in a forked child that enters the cgroup first; between
/// fork and `_exit` it makes only raw system calls (the test harness has threads).
fn device_accesses(cgroup: &Cgroup, node: &Path) -> [i32; 4] {
    let procs = procs_files(cgroup);
    let null = CString::new("/dev/null").unwrap();
    let kmsg = CString::new("/dev/kmsg").unwrap();
    let node = CString::new(node.as_os_str().as_encoded_bytes()).unwrap();
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    // SAFETY: the child makes only async-signal-safe system calls and leaves with _exit.
    match unsafe { libc::fork() } {
        0 => unsafe {
            use std::os::fd::AsRawFd;
            let errno = || *libc::__errno_location();
            let mut results = [0i32; 4];
            for file in &procs {
                let fd = libc::open(file.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    libc::_exit(3);
                }
                libc::close(fd);
            }
            let try_open = |path: &CString, flags: i32| {
                let fd = libc::open(path.as_ptr(), flags | libc::O_NONBLOCK | libc::O_CLOEXEC);
                if fd < 0 {
                    errno()
                } else {
                    libc::close(fd);
                    0
                }
            };
            results[0] = try_open(&null, libc::O_RDWR);
            results[1] = try_open(&kmsg, libc::O_RDONLY);
            results[2] =
                if libc::mknod(node.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 11)) < 0 {
                    errno()
                } else {
                    0
                };
            results[3] = try_open(&node, libc::O_RDONLY);
            libc::unlink(node.as_ptr());
            let bytes: [u8; 16] = std::mem::transmute(results);
            libc::write(write_end.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::_exit(0)
        },
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        pid => {
            drop(write_end);
            let mut bytes = [0u8; 16];
            let got = nix::unistd::read(&read_end, &mut bytes).unwrap();
            let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0),
                "the probe could not enter {}",
                cgroup.relative
            );
            assert_eq!(got, 16);
            // SAFETY: 16 bytes are four i32s.
            unsafe { std::mem::transmute::<[u8; 16], [i32; 4]>(bytes) }
        }
    }
}

#[test]
fn a_v2_device_program_lets_a_process_open_only_the_default_devices() {
    let test = "a_v2_device_program_lets_a_process_open_only_the_default_devices";
    let Some(mount) = cgroup2_mount(test) else {
        return;
    };
    let hierarchy = Hierarchy::v2_at(&mount).unwrap();
    let (root, _cleanup) = root_for(&hierarchy, "devbpf");
    let free = root.cgroup(&hierarchy).child("free");
    let default = root.cgroup(&hierarchy).child("default");
    let privileged = root.cgroup(&hierarchy).child("privileged");
    let none = root.cgroup(&hierarchy).child("none");
    for cgroup in [&free, &default, &privileged, &none] {
        cgroup.create().unwrap();
    }
    let scratch = std::env::temp_dir().join(format!("podlab-devbpf-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let node = scratch.join("kmsg");

    // Without a program every access works: what follows is the program's doing.
    let before = device_accesses(&free, &node);
    if before != [0, 0, 0, 0] {
        let _ = std::fs::remove_dir_all(&scratch);
        return record_skip(
            test,
            &format!("this process cannot open /dev/kmsg or mknod here without a cgroup: errnos {before:?}"),
        );
    }
    assert!(devices::apply_default(&default).unwrap());
    assert!(devices::apply_privileged(&privileged).unwrap());
    assert!(devices::apply(&none, &[]).unwrap());
    let with_default = device_accesses(&default, &node);
    let with_privileged = device_accesses(&privileged, &node);
    let with_none = device_accesses(&none, &node);
    let _ = std::fs::remove_dir_all(&scratch);

    let eperm = libc::EPERM;
    // runc's defaults: /dev/null opens, mknod of anything works (`c *:* m`), the host's
    // /dev/kmsg cannot be opened, neither the node just made for it.
    assert_eq!(with_default, [0, eperm, 0, eperm], "default rules");
    assert_eq!(with_privileged, [0, 0, 0, 0], "privileged: every device");
    assert_eq!(
        with_none,
        [eperm, eperm, eperm, libc::ENOENT],
        "no rule: nothing"
    );
}
