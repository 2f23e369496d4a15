//! `podlab cri` driven by the real `crictl` (cri-tools, from the critest kit beside the
//! checkout): the core verbs end to end, checked against the kernel, and the CRI's error rules.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use podlab_runtime::config::RuntimeConfig;
use podlab_runtime::Runtime;

use crate::support::{podlab, record_skip, wait_until, SharedDir};

/// The kit: `$PODLAB_CRITEST_KIT`, else `shared/critest-kit` beside the checkout.
fn kit() -> PathBuf {
    std::env::var_os("PODLAB_CRITEST_KIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/critest-kit")
        })
}

/// A `podlab cri` on a socket of its own, with a state root of its own; on drop it is stopped
/// and every sandbox left in its root is removed.
struct Server {
    dir: SharedDir,
    child: Child,
    crictl: PathBuf,
}

impl Server {
    /// None (the test skipped) when the kit's crictl cannot be had.
    fn start(test: &str) -> Option<Server> {
        let packed = kit().join("bin/crictl.xz");
        if !packed.exists() {
            record_skip(
                test,
                &format!(
                    "no crictl at {} (the critest kit beside the checkout; set PODLAB_CRITEST_KIT)",
                    packed.display()
                ),
            );
            return None;
        }
        let dir = SharedDir::new("podlab-cri", 0o755);
        let crictl = dir.path().join("crictl");
        let unpacked = Command::new("xz")
            .arg("-dc")
            .arg(&packed)
            .stdout(std::fs::File::create(&crictl).unwrap())
            .status();
        if !unpacked.is_ok_and(|s| s.success()) {
            record_skip(
                test,
                "xz could not unpack the kit's crictl (install xz-utils)",
            );
            return None;
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&crictl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = podlab()
            .args(["cri", "--listen"])
            .arg(dir.path().join("cri.sock"))
            .arg("--root")
            .arg(dir.path().join("root"))
            .env("PODLAB_NETWORK", "none")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
            .spawn()
            .unwrap();
        let server = Server { dir, child, crictl };
        let socket = server.socket();
        assert!(
            wait_until(Duration::from_secs(20), || socket.exists()),
            "podlab cri did not make its socket; its log: {}",
            server.log()
        );
        Some(server)
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("cri.sock")
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// `crictl ARGS`: exit status, stdout, stderr.
    fn crictl(&self, args: &[&str]) -> (i32, String, String) {
        let endpoint = format!("unix://{}", self.socket().display());
        let out = Command::new(&self.crictl)
            .args([
                "--runtime-endpoint",
                &endpoint,
                "--image-endpoint",
                &endpoint,
            ])
            .args(["--timeout", "60s"])
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `crictl ARGS`, which must succeed; its stdout, trimmed.
    fn ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.crictl(args);
        assert_eq!(
            code,
            0,
            "crictl {args:?} failed: {stderr}\nserver log: {}",
            self.log()
        );
        stdout.trim().to_string()
    }

    fn write(&self, name: &str, json: serde_json::Value) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, json.to_string()).unwrap();
        path.display().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the server's own pid, which this test spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        if let Ok(runtime) = Runtime::open(RuntimeConfig::with_root(self.root())) {
            for sandbox in runtime.list_pod_sandboxes().unwrap_or_default() {
                let _ = runtime.remove_pod_sandbox(&sandbox.id);
            }
        }
    }
}

fn threads(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Threads:"))
        .map(|l| l["Threads:".len()..].trim().to_string())
        .unwrap()
}

fn ns_inode(pid: &str, kind: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/{kind}"))
        .unwrap()
        .ino()
}

#[test]
fn crictl_drives_a_pod_through_podlab_cri() {
    let Some(server) = Server::start("cri::crictl_drives_a_pod_through_podlab_cri") else {
        return;
    };
    let version = server.ok(&["version"]);
    assert!(version.contains("RuntimeName:  podlab"), "{version}");
    assert!(version.contains("RuntimeApiVersion:  v1"), "{version}");
    server.ok(&["pull", "busybox"]);
    let logs = server.dir.path().join("logs");
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "uid-web", "attempt": 0},
            "hostname": "web-host",
            "log_directory": logs,
            "dns_config": {"servers": ["10.96.0.10"], "searches": ["default.svc.cluster.local"], "options": ["ndots:5"]},
            "labels": {"app": "web"},
            "linux": {}
        }),
    );
    let container = server.write(
        "container.json",
        serde_json::json!({
            "metadata": {"name": "app"},
            "image": {"image": "busybox"},
            "command": ["sh", "-c", "echo started; exec sleep 1000"],
            "log_path": "app.log",
            "labels": {"tier": "front"},
            "linux": {"security_context": {"run_as_user": {"value": 1234}, "readonly_rootfs": true}}
        }),
    );
    let sandbox = server.ok(&["runp", &pod]);
    assert_eq!(
        sandbox.len(),
        64,
        "a sandbox id is 64 hex digits: {sandbox}"
    );
    let id = server.ok(&["create", &sandbox, &container, &pod]);
    assert_eq!(id.len(), 64, "{id}");
    server.ok(&["start", &id]);

    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", &id])).unwrap();
    assert_eq!(inspect["status"]["state"], "CONTAINER_RUNNING", "{inspect}");
    let pid = inspect["info"]["pid"].to_string();
    // The kernel's word: the process runs as asked, in the pod's uts namespace, not ours.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t1234\t")),
        "{status}"
    );
    let pods: serde_json::Value =
        serde_json::from_str(&server.ok(&["inspectp", &sandbox])).unwrap();
    let pause = pods["info"]["pid"].to_string();
    assert_ne!(pause, "0", "{pods}");
    assert_eq!(ns_inode(&pid, "uts"), ns_inode(&pause, "uts"));
    assert_ne!(ns_inode(&pid, "uts"), ns_inode("self", "uts"));
    assert_eq!(pods["status"]["state"], "SANDBOX_READY");
    assert_eq!(pods["status"]["labels"]["app"], "web");

    assert_eq!(server.ok(&["exec", "-s", &id, "hostname"]), "web-host");
    let resolv = server.ok(&["exec", "-s", &id, "cat", "/etc/resolv.conf"]);
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local"),
        "{resolv}"
    );
    let (code, _, stderr) = server.crictl(&["exec", "-s", &id, "touch", "/x"]);
    assert_ne!(code, 0, "a read-only rootfs refuses a new file");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    // The CRI log format, in the sandbox's log directory.
    let log = std::fs::read_to_string(logs.join("app.log")).unwrap();
    let line = log.lines().next().unwrap();
    let fields: Vec<&str> = line.splitn(4, ' ').collect();
    assert_eq!(&fields[1..], ["stdout", "F", "started"], "{line}");
    assert!(
        fields[0].ends_with('Z') && fields[0].contains('T'),
        "{line}"
    );

    // ContainerStats: the CPU time and memory of the container's own cgroup.
    let stats: serde_json::Value =
        serde_json::from_str(&server.ok(&["stats", "-o", "json", "--id", &id])).unwrap();
    let stat = &stats["stats"][0];
    assert_eq!(stat["attributes"]["id"], id.as_str(), "{stats}");
    assert_ne!(stat["cpu"]["timestamp"], "0", "{stats}");
    assert!(
        stat["memory"]["workingSetBytes"]["value"].is_string(),
        "{stats}"
    );

    let listed = server.ok(&["ps", "-q", "--label", "tier=front"]);
    assert_eq!(listed, id);
    assert_eq!(server.ok(&["ps", "-q", "--label", "tier=back"]), "");
    // The server has one thread: forks for namespace work are safe in it.
    assert_eq!(threads(server.child.id()), "1");

    server.ok(&["stop", "--timeout", "0", &id]);
    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", &id])).unwrap();
    assert_eq!(inspect["status"]["state"], "CONTAINER_EXITED", "{inspect}");
    assert_eq!(inspect["status"]["exitCode"], 137);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    server.ok(&["rm", &id]);
    server.ok(&["stopp", &sandbox]);
    server.ok(&["rmp", &sandbox]);
    assert!(
        !Path::new(&format!("/proc/{pause}")).exists() || {
            // A pid may be reused; the pause must at least be gone from the pod.
            !std::fs::read_to_string(format!("/proc/{pause}/cmdline"))
                .unwrap_or_default()
                .contains("podlab-pause")
        }
    );
    assert!(!server.root().join("sandboxes").join(&sandbox).exists());
    assert_eq!(server.ok(&["pods", "-q"]), "");
}

#[test]
fn crictl_sees_cri_errors_as_containerd_words_them() {
    let Some(server) = Server::start("cri::crictl_sees_cri_errors_as_containerd_words_them") else {
        return;
    };
    let unknown = "0".repeat(64);
    // Stop is idempotent, unknown ids included (crictl's rm and rmp ask for the status first,
    // so they cannot show it for Remove).
    for verb in ["stopp", "stop"] {
        server.ok(&[verb, &unknown]);
    }
    let (code, _, stderr) = server.crictl(&["inspect", &unknown]);
    assert_ne!(code, 0);
    assert!(stderr.contains("code = NotFound"), "{stderr}");
    server.ok(&["pull", "busybox"]);
    let pod = server.write(
        "pod.json",
        serde_json::json!({"metadata": {"name": "twice", "namespace": "default", "uid": "u", "attempt": 0}, "linux": {}}),
    );
    let sandbox = server.ok(&["runp", &pod]);
    let (code, _, stderr) = server.crictl(&["runp", &pod]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("code = AlreadyExists")
            && stderr.contains("failed to reserve sandbox name \\\"twice_default_u_0\\\""),
        "{stderr}"
    );
    let container = server.write(
        "c.json",
        serde_json::json!({"metadata": {"name": "c"}, "image": {"image": "busybox"},
            "devices": [{"container_path": "/dev/x", "host_path": "/dev/null", "permissions": "rw"}]}),
    );
    let (code, _, stderr) = server.crictl(&["create", &sandbox, &container, &pod]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("code = InvalidArgument") && stderr.contains("config.devices"),
        "{stderr}"
    );
    // Nothing half-made: the refused container left no trace.
    assert_eq!(server.ok(&["ps", "-a", "-q"]), "");
    server.ok(&["rmp", "-f", &sandbox]);
}
