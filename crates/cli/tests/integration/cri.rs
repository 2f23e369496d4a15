//! `podlab cri` driven by the real `crictl` (cri-tools, from the critest kit beside the
//! checkout): the core verbs end to end, checked against the kernel, and the CRI's error rules.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use podlab_cgroups::Controller;
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
    network: String,
    /// The network namespace it serves in (None: the test's).
    netns: Option<PathBuf>,
}

/// `command` run in the network namespace `netns` (through `nsenter`, which enters it and
/// execs the program: the same pid), or as it is.
fn in_netns(command: Command, netns: Option<&Path>) -> Command {
    let Some(netns) = netns else {
        return command;
    };
    let mut entered = Command::new("nsenter");
    entered
        .arg(format!("--net={}", netns.display()))
        .arg("--")
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            entered.env(key, value);
        }
    }
    entered
}

impl Server {
    /// None (the test skipped) when the kit's crictl cannot be had.
    fn start(test: &str) -> Option<Server> {
        Server::start_on(test, "none")
    }

    /// [`Server::start`] with `PODLAB_NETWORK=network`.
    fn start_on(test: &str, network: &str) -> Option<Server> {
        Server::start_with(test, network, &[])
    }

    /// [`Server::start_on`] with more arguments for `podlab cri`.
    fn start_with(test: &str, network: &str, args: &[&str]) -> Option<Server> {
        Server::start_in(test, network, args, None)
    }

    /// [`Server::start`] serving NRI plugins on `nri_socket` too, once it is there.
    fn start_with_nri(test: &str, nri_socket: &Path) -> Option<Server> {
        let server = Server::start_with(
            test,
            "none",
            &["--nri-socket", nri_socket.to_str().unwrap()],
        )?;
        assert!(
            wait_until(Duration::from_secs(10), || nri_socket.exists()),
            "no NRI socket at {}; the server's log: {}",
            nri_socket.display(),
            server.log()
        );
        Some(server)
    }

    /// [`Server::start_with`], the server in the network namespace `netns` when given.
    fn start_in(test: &str, network: &str, args: &[&str], netns: Option<&Path>) -> Option<Server> {
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
        let child = in_netns(podlab(), netns)
            .args(["cri", "--listen"])
            .arg(dir.path().join("cri.sock"))
            .arg("--root")
            .arg(dir.path().join("root"))
            .args(args)
            .env("PODLAB_NETWORK", network)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
            .spawn()
            .unwrap();
        let server = Server {
            dir,
            child,
            crictl,
            network: network.to_string(),
            netns: netns.map(Path::to_path_buf),
        };
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

    /// `podlab gc` on the server's root, with its network, in its network namespace.
    fn gc(&self) -> Command {
        let mut gc = podlab();
        gc.arg("gc")
            .env("PODLAB_ROOT", self.root())
            .env("PODLAB_NETWORK", &self.network);
        in_netns(gc, self.netns.as_deref())
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

    /// `crictl ARGS` with its connection flags, for a caller that sets its stdio itself.
    fn crictl_command(&self, args: &[&str]) -> Command {
        let endpoint = format!("unix://{}", self.socket().display());
        let mut command = Command::new(&self.crictl);
        command
            .args([
                "--runtime-endpoint",
                &endpoint,
                "--image-endpoint",
                &endpoint,
            ])
            .args(["--timeout", "60s"])
            .args(args)
            .current_dir(self.dir.path());
        command
    }

    /// `crictl ARGS` with `input` on its stdin: exit status, stdout, stderr.
    fn crictl_input(&self, args: &[&str], input: &[u8]) -> (i32, String, String) {
        use std::io::Write;
        let mut child = self
            .crictl_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
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
        // The pods go through the server first, also when the test failed half-way: its
        // network tears each one down (CNI DEL: its lease, its host ports' nat rules).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.crictl(&["rmp", "-a", "-f"]);
        }
        // SAFETY: kill(2) on the server's own pid, which this test spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        // What a killed server left: `podlab gc` on its root, with its network.
        let _ = self
            .gc()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
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
    // The shim keeps a stopped container's log open (ReopenContainerLog, its last lines); the
    // removal has it let go: with the server's cleaner, after the answer.
    let shim = parent_of(&pause);
    let app_log = logs.join("app.log");
    assert_eq!(
        descriptors_on(shim, &app_log),
        1,
        "shim {shim} holds the log"
    );
    server.ok(&["rm", &id]);
    assert!(
        wait_until(Duration::from_secs(10), || descriptors_on(shim, &app_log)
            == 0),
        "shim {shim} still holds {} after the removal",
        app_log.display()
    );
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

/// Regression: `podlab gc` on the root of a running `podlab cri` removed every sandbox its
/// clients had made, none of them being in the root's store.
#[test]
fn regression_gc_leaves_the_sandboxes_of_a_running_cri_server_to_its_clients() {
    let Some(server) = Server::start(
        "cri::regression_gc_leaves_the_sandboxes_of_a_running_cri_server_to_its_clients",
    ) else {
        return;
    };
    let pod = server.write(
        "pod.json",
        serde_json::json!({"metadata": {"name": "kept", "namespace": "default", "uid": "u-kept", "attempt": 0}, "linux": {}}),
    );
    let sandbox = server.ok(&["runp", &pod]);
    let gc = server.gc().output().unwrap();
    let said = String::from_utf8_lossy(&gc.stdout);
    assert!(
        gc.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert!(
        said.contains(&format!(
            "kept sandbox {}",
            &sandbox[..podlab_runtime::id::SHORT_LEN]
        )),
        "{said}"
    );
    let status: serde_json::Value =
        serde_json::from_str(&server.ok(&["inspectp", "-o", "json", &sandbox])).unwrap();
    assert_eq!(status["status"]["state"], "SANDBOX_READY", "{status}");
    server.ok(&["rmp", "-f", &sandbox]);
}

/// A running pod of the test server (`PODLAB_NETWORK=none`: its own network namespace with
/// `lo` only) and its containers, by name, from `(name, config)`.
fn pod_with(
    server: &Server,
    name: &str,
    containers: &[(&str, serde_json::Value)],
) -> (String, Vec<String>) {
    server.ok(&["pull", "busybox"]);
    let pod = server.write(
        &format!("{name}-pod.json"),
        serde_json::json!({"metadata": {"name": name, "namespace": "default", "uid": name, "attempt": 0},
            "log_directory": server.dir.path().join("logs"), "linux": {}}),
    );
    let sandbox = server.ok(&["runp", &pod]);
    let mut ids = Vec::new();
    for (container, config) in containers {
        let mut config = config.clone();
        config["metadata"] = serde_json::json!({"name": container});
        config["image"] = serde_json::json!({"image": "busybox"});
        config["log_path"] = serde_json::json!(format!("{container}.log"));
        config["linux"] = serde_json::json!({});
        let file = server.write(&format!("{container}.json"), config);
        let id = server.ok(&["create", &sandbox, &file, &pod]);
        server.ok(&["start", &id]);
        ids.push(id);
    }
    (sandbox, ids)
}

fn container_state(server: &Server, id: &str) -> (String, i64) {
    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", id])).unwrap();
    (
        inspect["status"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        inspect["status"]["exitCode"].as_i64().unwrap_or(-1),
    )
}

#[test]
fn crictl_exec_and_attach_stream_through_podlab_cri() {
    use crate::terminals::{wait_exit, Terminal};
    let Some(server) = Server::start("cri::crictl_exec_and_attach_stream_through_podlab_cri")
    else {
        return;
    };
    let (sandbox, ids) = pod_with(
        &server,
        "streams",
        &[
            ("app", serde_json::json!({"command": ["sleep", "1000"]})),
            (
                "once",
                serde_json::json!({"command": ["sh"], "stdin": true, "stdin_once": true}),
            ),
            (
                "console",
                serde_json::json!({"command": ["sh"], "stdin": true, "tty": true}),
            ),
        ],
    );
    let (app, once, console) = (&ids[0], &ids[1], &ids[2]);

    // Exec (the streaming server, not ExecSync): stdout and stderr apart, and the exit code as
    // client-go reads it from the status on the error stream.
    let (code, stdout, stderr) =
        server.crictl(&["exec", app, "sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(stdout, "out\n");
    assert!(stderr.contains("err\n"), "{stderr}");
    assert!(
        stderr.contains("command terminated with exit code 3"),
        "{stderr}"
    );
    assert_eq!(code, 1, "crictl ends 1 on a non-zero exit; {stderr}");
    // -i: stdin piped to the process, its end the process's end of file.
    let (code, stdout, stderr) = server.crictl_input(
        &["exec", "-i", app, "sh", "-c", "cat; echo end"],
        b"piped\nlines\n",
    );
    assert_eq!(
        (code, stdout.as_str()),
        (0, "piped\nlines\nend\n"),
        "{stderr}"
    );

    // -it through a real pty: the terminal's size inside, a resize, the exit code.
    let mut terminal = Terminal::new(30, 100);
    let mut crictl = terminal.spawn(server.crictl_command(&["exec", "-it", app, "sh"]));
    terminal.expect("# ");
    assert!(
        terminal.shell("stty size").contains("\n30 100"),
        "stty size inside is the terminal's"
    );
    terminal.resize(40, 120);
    let mut resized = false;
    for _ in 0..100 {
        if terminal.shell("stty size").contains("\n40 120") {
            resized = true;
            break;
        }
    }
    assert!(resized, "stty size follows the resize");
    assert!(terminal.shell("tty").contains("\n/dev/pts/0"));
    terminal.send(b"exit 7\r");
    terminal.expect("command terminated with exit code 7");
    assert_eq!(wait_exit(&mut crictl), 1);

    // Attach to a stdinOnce container: its output, our input, and the end of our input is
    // the end of its stdin, so its shell exits.
    let (code, stdout, stderr) = server.crictl_input(
        &["attach", "-i", once],
        b"echo hello-attach; echo to-stderr >&2; exit 4\n",
    );
    assert_eq!((code, stdout.as_str()), (0, "hello-attach\n"), "{stderr}");
    assert!(stderr.contains("to-stderr"), "{stderr}");
    assert!(
        wait_until(Duration::from_secs(30), || container_state(&server, once)
            == ("CONTAINER_EXITED".to_string(), 4)),
        "the attached shell exited 4: {:?}",
        container_state(&server, once)
    );

    // Attach -it to a container's own console: its size is the terminal's, what is typed
    // reaches its shell.
    let mut terminal = Terminal::new(25, 90);
    let mut crictl = terminal.spawn(server.crictl_command(&["attach", "-it", console]));
    let mut sized = false;
    for _ in 0..100 {
        if terminal.shell("stty size").contains("\n25 90") {
            sized = true;
            break;
        }
    }
    assert!(sized, "the console has the attached terminal's size");
    terminal.send(b"exit 5\r");
    assert_eq!(wait_exit(&mut crictl), 0);
    assert!(wait_until(Duration::from_secs(30), || container_state(
        &server, console
    ) == (
        "CONTAINER_EXITED".to_string(),
        5
    )));

    // The server still has one thread: streams are tasks on it.
    assert_eq!(threads(server.child.id()), "1");
    server.ok(&["rmp", "-f", &sandbox]);
}

#[test]
fn crictl_port_forward_reaches_a_server_in_the_pods_network_namespace() {
    use std::io::{BufRead, BufReader, Read, Write};
    let Some(server) =
        Server::start("cri::crictl_port_forward_reaches_a_server_in_the_pods_network_namespace")
    else {
        return;
    };
    // The server listens on the pod's own 127.0.0.1: only a socket made in the pod's network
    // namespace reaches it.
    let (sandbox, ids) = pod_with(
        &server,
        "forward",
        &[(
            "web",
            serde_json::json!({"command": ["sh", "-c",
                "mkdir -p /tmp/www && echo pod-page > /tmp/www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"]}),
        )],
    );
    // httpd listens once its shell has made its page: asked from inside the pod (bounded).
    assert!(
        wait_until(Duration::from_secs(30), || {
            let (_, stdout, _) = server.crictl(&[
                "exec",
                "-s",
                &ids[0],
                "wget",
                "-q",
                "-O-",
                "http://127.0.0.1:8080/",
            ]);
            stdout.contains("pod-page")
        }),
        "httpd did not serve in the pod; server log: {}",
        server.log()
    );
    let mut child = server
        .crictl_command(&["port-forward", &sandbox, ":8080", ":8081"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut ports = Vec::new();
    while ports.len() < 2 {
        let mut line = String::new();
        assert_ne!(
            lines.read_line(&mut line).unwrap(),
            0,
            "crictl port-forward ended early"
        );
        if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
            let port: u16 = rest.split(' ').next().unwrap().parse().unwrap();
            ports.push(port);
        }
    }
    let fetch = |port: u16| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    };
    for _ in 0..2 {
        let response = fetch(ports[0]);
        assert!(
            response.starts_with("HTTP/1.") && response.ends_with("pod-page\n"),
            "{response}"
        );
    }
    // Nothing listens on 8081 in the pod: the connection ends, and the error comes back on
    // the error stream, for crictl to print.
    assert_eq!(fetch(ports[1]), "");
    // SAFETY: kill(2) on the crictl this test spawned and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("an error occurred forwarding") && stderr.contains("connection refused"),
        "{stderr}"
    );
    assert_eq!(threads(server.child.id()), "1");
}

/// `iptables -t nat -S`: the nat table's rules in this network namespace, or None when there is
/// no usable iptables NAT here.
fn nat_rules() -> Option<String> {
    nat_rules_in(None)
}

/// [`nat_rules`] of the network namespace `netns`.
fn nat_rules_in(netns: Option<&Path>) -> Option<String> {
    let mut iptables = Command::new("iptables");
    iptables.args(["-w", "-t", "nat", "-S"]);
    let out = in_netns(iptables, netns).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The `CNI-DN-` chains that portmap's entry rules for CNI container id `id` jump to (their
/// comment names the id).
fn dn_chains_of(id: &str) -> Vec<String> {
    dn_chains_in(None, id)
}

/// [`dn_chains_of`] in the network namespace `netns`.
fn dn_chains_in(netns: Option<&Path>, id: &str) -> Vec<String> {
    nat_rules_in(netns)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.starts_with("-A CNI-HOSTPORT-DNAT ") && l.contains(&format!("id: \\\"{id}\\\""))
        })
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "-j").nth(1))
        .map(str::to_string)
        .collect()
}

/// An HTTP/1.0 GET of `path` from 127.0.0.1:`port`; None while nothing answers there.
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    (!answer.is_empty()).then_some(answer)
}

#[test]
fn a_host_port_is_dnat_to_the_pods_address_through_portmap_and_goes_with_the_pod() {
    let test = "cri::a_host_port_is_dnat_to_the_pods_address_through_portmap_and_goes_with_the_pod";
    if nat_rules().is_none() {
        record_skip(
            test,
            "no usable iptables NAT here (`iptables -t nat -S` fails)",
        );
        return;
    }
    // Pods on the run's shared network: no other test may count its bridge's ports meanwhile.
    let _network = crate::support::network_lock();
    let Some(server) = Server::start_on(test, "cni") else {
        return;
    };
    const HOST_PORT: u16 = 18917;
    server.ok(&["pull", "busybox"]);
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "hostport", "namespace": "default", "uid": "uid-hp", "attempt": 0},
            "hostname": "hp-host",
            "port_mappings": [{"container_port": 80, "host_port": HOST_PORT}],
            "linux": {}
        }),
    );
    let container = server.write(
        "web.json",
        serde_json::json!({
            "metadata": {"name": "web"}, "image": {"image": "busybox"},
            "command": ["httpd", "-f", "-p", "80", "-h", "/etc"], "linux": {}
        }),
    );
    let sandbox = server.ok(&["runp", &pod]);
    let id = server.ok(&["create", &sandbox, &container, &pod]);
    server.ok(&["start", &id]);
    let pods: serde_json::Value =
        serde_json::from_str(&server.ok(&["inspectp", &sandbox])).unwrap();
    let ip = pods["status"]["network"]["ip"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(ip.starts_with("10.88."), "{pods}");
    // The kernel's word: one DNAT rule for the port, to the pod's own address only.
    let rules = nat_rules().unwrap();
    let dnat: Vec<&str> = rules
        .lines()
        .filter(|l| l.contains(&format!("--dport {HOST_PORT}")) && l.contains("-j DNAT"))
        .collect();
    assert_eq!(dnat.len(), 1, "{rules}");
    assert!(
        dnat[0].ends_with(&format!("--to-destination {ip}:80")),
        "{rules}"
    );
    assert!(!rules.contains("0.0.0.0/0 -j MASQUERADE"), "{rules}");
    // From 127.0.0.1 on this node, through the DNAT (portmap's snat and route_localnet), to
    // the pod's httpd: it serves the pod's /etc/hostname.
    let mut answer = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            answer = http_get(HOST_PORT, "/hostname");
            answer.is_some()
        }),
        "nothing answered on 127.0.0.1:{HOST_PORT}; nat rules: {rules}\nserver log: {}",
        server.log()
    );
    let answer = answer.unwrap();
    assert!(answer.lines().next().unwrap().contains(" 200 "), "{answer}");
    assert!(answer.ends_with("hp-host\n"), "{answer}");
    assert_eq!(dn_chains_of(&sandbox).len(), 1, "{rules}");
    // StopPodSandbox's CNI DEL takes the pod's rules away, its CNI-DN chain with them.
    server.ok(&["stopp", &sandbox]);
    let rules = nat_rules().unwrap();
    assert!(!rules.contains(&format!("--dport {HOST_PORT}")), "{rules}");
    assert!(!rules.contains(&ip), "{rules}");
    assert_eq!(dn_chains_of(&sandbox), Vec::<String>::new(), "{rules}");
    assert_eq!(http_get(HOST_PORT, "/hostname"), None);
    server.ok(&["rmp", &sandbox]);
}

/// A SysV shared memory segment of the test's ipc namespace, removed on drop.
struct ShmSegment(i32);

impl ShmSegment {
    fn new() -> ShmSegment {
        // SAFETY: shmget with IPC_PRIVATE makes a new segment; no memory is attached.
        let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600) };
        assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
        ShmSegment(id)
    }
}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        // SAFETY: IPC_RMID of the segment this guard made.
        unsafe { libc::shmctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

#[test]
fn host_pid_and_host_ipc_pods_live_in_the_nodes_pid_and_ipc_namespaces() {
    let Some(server) =
        Server::start("cri::host_pid_and_host_ipc_pods_live_in_the_nodes_pid_and_ipc_namespaces")
    else {
        return;
    };
    server.ok(&["pull", "busybox"]);
    // NamespaceMode NODE is 2.
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "hostns", "namespace": "default", "uid": "uid-hostns", "attempt": 0},
            "linux": {"security_context": {"namespace_options": {"pid": 2, "ipc": 2}}}
        }),
    );
    let container = server.write(
        "c.json",
        serde_json::json!({
            "metadata": {"name": "c"}, "image": {"image": "busybox"},
            "command": ["sleep", "1000"],
            "linux": {"security_context": {"namespace_options": {"pid": 2, "ipc": 2}}}
        }),
    );
    let segment = ShmSegment::new();
    let sandbox = server.ok(&["runp", &pod]);
    let id = server.ok(&["create", &sandbox, &container, &pod]);
    server.ok(&["start", &id]);
    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", &id])).unwrap();
    let pid = inspect["info"]["pid"].to_string();
    let pods: serde_json::Value =
        serde_json::from_str(&server.ok(&["inspectp", &sandbox])).unwrap();
    let pause = pods["info"]["pid"].to_string();
    let options = &pods["status"]["linux"]["namespaces"]["options"];
    assert_eq!(options["pid"], "NODE", "{pods}");
    assert_eq!(options["ipc"], "NODE", "{pods}");
    // The kernel's word: pause and the container are in this node's pid and ipc namespaces,
    // and still in a uts namespace of the pod's.
    for process in [&pid, &pause] {
        assert_eq!(ns_inode(process, "pid"), ns_inode("self", "pid"));
        assert_eq!(ns_inode(process, "ipc"), ns_inode("self", "ipc"));
        assert_ne!(ns_inode(process, "uts"), ns_inode("self", "uts"));
    }
    // Inside, /proc shows the node's processes by the node's pids (the server's among them),
    // and the node's SysV segment.
    let server_pid = server.child.id().to_string();
    let status = server.ok(&[
        "exec",
        "-s",
        &id,
        "cat",
        &format!("/proc/{server_pid}/status"),
    ]);
    assert!(status.contains("Name:\tpodlab"), "{status}");
    let shm = server.ok(&["exec", "-s", &id, "cat", "/proc/sysvipc/shm"]);
    assert!(
        shm.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(&segment.0.to_string())),
        "segment {} not seen inside: {shm}",
        segment.0
    );
    server.ok(&["stop", "--timeout", "0", &id]);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    server.ok(&["rmp", "-f", &sandbox]);
}

/// Host-side mounts of a test, detached (deepest first) on drop, failed test or not.
struct HostMounts(Vec<PathBuf>);

impl HostMounts {
    fn mount(&mut self, args: &[&str], target: &Path) {
        let status = Command::new("mount")
            .args(args)
            .arg(target)
            .status()
            .unwrap();
        assert!(status.success(), "mount {args:?} {}", target.display());
        self.0.push(target.to_path_buf());
    }

    /// `target` bound on itself and made shared, as critest makes its volumes' sources.
    fn shared(&mut self, target: &Path) {
        std::fs::create_dir_all(target).unwrap();
        self.mount(&["--bind", target.to_str().unwrap()], target);
        let status = Command::new("mount")
            .arg("--make-shared")
            .arg(target)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for HostMounts {
    fn drop(&mut self) {
        for target in self.0.iter().rev() {
            let _ = nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

fn is_mountpoint(path: &Path) -> bool {
    podlab_ns::mnt::is_mountpoint(path).unwrap_or(false)
}

#[test]
fn volumes_propagate_mounts_as_rprivate_rslave_and_rshared_say() {
    let Some(server) =
        Server::start("cri::volumes_propagate_mounts_as_rprivate_rslave_and_rshared_say")
    else {
        return;
    };
    server.ok(&["pull", "busybox"]);
    let mut host = HostMounts(Vec::new());
    let base = server.dir.path().join("volumes");
    let (private, slave, shared) = (
        base.join("private"),
        base.join("slave"),
        base.join("shared"),
    );
    for dir in [&private, &slave, &shared] {
        host.shared(dir);
    }
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "prop", "namespace": "default", "uid": "uid-prop", "attempt": 0},
            "linux": {"security_context": {"privileged": true}}
        }),
    );
    // MountPropagation: 0 PRIVATE, 1 HOST_TO_CONTAINER (rslave), 2 BIDIRECTIONAL (rshared).
    let container = server.write(
        "c.json",
        serde_json::json!({
            "metadata": {"name": "c"}, "image": {"image": "busybox"},
            "command": ["sleep", "1000"],
            "mounts": [
                {"container_path": "/private", "host_path": private, "propagation": 0},
                {"container_path": "/slave", "host_path": slave, "propagation": 1},
                {"container_path": "/shared", "host_path": shared, "propagation": 2}
            ],
            "linux": {"security_context": {"privileged": true}}
        }),
    );
    let sandbox = server.ok(&["runp", &pod]);
    // A volume whose host mount is private cannot be rshared: containerd's words.
    let lonely = server.dir.path().join("lonely");
    std::fs::create_dir_all(&lonely).unwrap();
    let refused = server.write(
        "refused.json",
        serde_json::json!({
            "metadata": {"name": "refused"}, "image": {"image": "busybox"},
            "command": ["sleep", "1000"],
            "mounts": [{"container_path": "/v", "host_path": lonely, "propagation": 2}],
            "linux": {"security_context": {"privileged": true}}
        }),
    );
    let (code, _, stderr) = server.crictl(&["create", &sandbox, &refused, &pod]);
    assert_ne!(code, 0);
    assert!(stderr.contains("but it is not a shared mount"), "{stderr}");

    let id = server.ok(&["create", &sandbox, &container, &pod]);
    server.ok(&["start", &id]);
    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", &id])).unwrap();
    let propagations: Vec<&str> = inspect["status"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["propagation"].as_str().unwrap_or("PROPAGATION_PRIVATE"))
        .collect();
    assert_eq!(
        propagations,
        [
            "PROPAGATION_PRIVATE",
            "PROPAGATION_HOST_TO_CONTAINER",
            "PROPAGATION_BIDIRECTIONAL"
        ],
        "{inspect}"
    );
    // Host to container: a tmpfs mounted on the host after the start, with a file in it.
    for dir in [&private, &slave, &shared] {
        let sub = dir.join("from-host");
        std::fs::create_dir_all(&sub).unwrap();
        host.mount(&["-t", "tmpfs", "tmpfs"], &sub);
        std::fs::write(sub.join("marker"), "host").unwrap();
    }
    let seen = |inside: &str| {
        server
            .crictl(&[
                "exec",
                "-s",
                &id,
                "cat",
                &format!("/{inside}/from-host/marker"),
            ])
            .0
            == 0
    };
    assert!(!seen("private"), "rprivate received the host's mount");
    assert!(seen("slave"), "rslave did not receive the host's mount");
    assert!(seen("shared"), "rshared did not receive the host's mount");
    // Container to host: a tmpfs mounted inside; only rshared hands it back.
    for inside in ["private", "slave", "shared"] {
        server.ok(&[
            "exec", "-s", &id, "sh", "-c",
            &format!("mkdir -p /{inside}/from-container && mount -t tmpfs tmpfs /{inside}/from-container"),
        ]);
    }
    let back = shared.join("from-container");
    if is_mountpoint(&back) {
        host.0.push(back.clone());
    }
    assert!(!is_mountpoint(&private.join("from-container")));
    assert!(!is_mountpoint(&slave.join("from-container")));
    assert!(
        is_mountpoint(&back),
        "rshared did not hand the container's mount back"
    );
    server.ok(&["rmp", "-f", &sandbox]);
}

/// An image volume (`Mount.image`, the OCI volume source) through crictl: the image named by
/// the id PullImage answered, read-only, with its sub path; ContainerStatus reports the image's
/// id (`image_ref`), as kubelet reads it; read-write and a missing sub path are refused.
#[test]
fn an_image_volume_mounts_the_pulled_image_read_only_and_reports_its_id() {
    let Some(server) =
        Server::start("cri::an_image_volume_mounts_the_pulled_image_read_only_and_reports_its_id")
    else {
        return;
    };
    // "Image is up to date for sha256:…"
    let pulled = server.ok(&["pull", "busybox"]);
    let image_ref = pulled
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    assert!(image_ref.starts_with("sha256:"), "{pulled}");
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "iv", "namespace": "default", "uid": "uid-iv", "attempt": 0}
        }),
    );
    let with = |name: &str, readonly: bool, sub: &str| {
        server.write(
            &format!("{name}.json"),
            serde_json::json!({
                "metadata": {"name": name}, "image": {"image": "busybox"},
                "command": ["sleep", "1000"],
                "mounts": [{"container_path": "/mnt/iv", "readonly": readonly,
                            "image": {"image": image_ref}, "image_sub_path": sub}]
            }),
        )
    };
    let sandbox = server.ok(&["runp", &pod]);
    let (code, _, stderr) = server.crictl(&["create", &sandbox, &with("rw", false, ""), &pod]);
    assert_ne!(code, 0);
    assert!(stderr.contains("read-only"), "{stderr}");
    let (code, _, stderr) = server.crictl(&[
        "create",
        &sandbox,
        &with("lost", true, "not-existing"),
        &pod,
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("not-existing"), "{stderr}");

    let id = server.ok(&["create", &sandbox, &with("reader", true, "etc"), &pod]);
    server.ok(&["start", &id]);
    let passwd = server.ok(&["exec", "-s", &id, "cat", "/mnt/iv/passwd"]);
    assert!(passwd.starts_with("root:"), "{passwd}");
    let (code, _, _) = server.crictl(&["exec", "-s", &id, "touch", "/mnt/iv/written"]);
    assert_ne!(code, 0, "an image volume is read-only");
    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", &id])).unwrap();
    let mount = &inspect["status"]["mounts"][0];
    assert_eq!(mount["containerPath"], "/mnt/iv", "{inspect}");
    assert_eq!(mount["image"]["imageRef"], image_ref.as_str(), "{inspect}");
    assert_eq!(mount["imageSubPath"], "etc", "{inspect}");
    server.ok(&["rmp", "-f", &sandbox]);
}

/// The parent of process `pid` (`/proc/PID/stat`'s fourth field).
fn parent_of(pid: &str) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(1).unwrap().parse().unwrap()
}

/// How many of process `pid`'s descriptors are open on `path`.
fn descriptors_on(pid: u32, path: &Path) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter(|fd| {
            fd.as_ref()
                .is_ok_and(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to == path))
        })
        .count()
}

/// The server's open descriptors.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// `crictl events -o json` while it runs: the events it printed so far.
struct EventWatch {
    child: Child,
    events: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl EventWatch {
    /// Subscribes, and returns once the server has the subscription (its trace says so).
    fn start(server: &Server) -> EventWatch {
        let mut child = server
            .crictl_command(&["events", "-o", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&events);
        std::thread::spawn(move || {
            // crictl prints each event as one indented JSON object.
            let stream = serde_json::Deserializer::from_reader(stdout).into_iter();
            for event in stream {
                match event {
                    Ok(event) => sink.lock().unwrap().push(event),
                    Err(_) => break,
                }
            }
        });
        assert!(
            wait_until(Duration::from_secs(30), || server
                .log()
                .contains("cri: GetContainerEvents  ok")),
            "crictl events did not subscribe; server log: {}",
            server.log()
        );
        EventWatch { child, events }
    }

    /// Waits (bounded) for `count` events; (container id, event type) of each.
    fn wait_for(&self, count: usize) -> Vec<(String, String)> {
        wait_until(Duration::from_secs(30), || {
            self.events.lock().unwrap().len() >= count
        });
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["containerId"].as_str().unwrap_or_default().to_string(),
                    e["containerEventType"]
                        .as_str()
                        .unwrap_or("CONTAINER_CREATED_EVENT")
                        .to_string(),
                )
            })
            .collect()
    }
}

impl Drop for EventWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn get_container_events_streams_what_happens_to_containers_and_sandboxes_in_order() {
    let test =
        "cri::get_container_events_streams_what_happens_to_containers_and_sandboxes_in_order";
    let Some(server) = Server::start_with(test, "none", &["--trace"]) else {
        return;
    };
    server.ok(&["pull", "busybox"]);
    let before = open_fds(server.child.id());
    // What happened before a client subscribes is not sent to it.
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "events", "namespace": "default", "uid": "uid-ev", "attempt": 0},
            "linux": {}
        }),
    );
    let early = server.write(
        "early.json",
        serde_json::json!({
            "metadata": {"name": "early"}, "image": {"image": "busybox"},
            "command": ["sleep", "1000"], "linux": {}
        }),
    );
    let sandbox = server.ok(&["runp", &pod]);
    let early = server.ok(&["create", &sandbox, &early, &pod]);
    let watch = EventWatch::start(&server);
    let sleeper = server.write(
        "sleeper.json",
        serde_json::json!({
            "metadata": {"name": "sleeper"}, "image": {"image": "busybox"},
            "command": ["sleep", "1000"], "linux": {}
        }),
    );
    let quitter = server.write(
        "quitter.json",
        serde_json::json!({
            "metadata": {"name": "quitter"}, "image": {"image": "busybox"},
            "command": ["sh", "-c", "exit 3"], "linux": {}
        }),
    );
    let id = server.ok(&["create", &sandbox, &sleeper, &pod]);
    server.ok(&["start", &id]);
    server.ok(&["stop", "--timeout", "0", &id]);
    server.ok(&["rm", &id]);
    // A container that exits by itself: its STOPPED comes from its shim's notice.
    let quits = server.ok(&["create", &sandbox, &quitter, &pod]);
    server.ok(&["start", &quits]);
    let stopped = (quits.clone(), "CONTAINER_STOPPED_EVENT".to_string());
    assert!(
        wait_until(Duration::from_secs(30), || watch
            .wait_for(0)
            .contains(&stopped)),
        "no STOPPED for a container that exited: {:?}\nserver log: {}",
        watch.wait_for(0),
        server.log()
    );
    server.ok(&["rm", &quits]);
    server.ok(&["stopp", &sandbox]);
    server.ok(&["rmp", &sandbox]);
    let event = |id: &str, kind: &str| (id.to_string(), format!("CONTAINER_{kind}_EVENT"));
    let expected = vec![
        event(&id, "CREATED"),
        event(&id, "STARTED"),
        event(&id, "STOPPED"),
        event(&id, "DELETED"),
        event(&quits, "CREATED"),
        event(&quits, "STARTED"),
        event(&quits, "STOPPED"),
        event(&quits, "DELETED"),
        // The sandbox's own events carry its id; the container that was only created is
        // deleted with it.
        event(&sandbox, "STOPPED"),
        event(&early, "DELETED"),
        event(&sandbox, "DELETED"),
    ];
    assert_eq!(
        watch.wait_for(expected.len()),
        expected,
        "server log: {}",
        server.log()
    );
    let events = watch.events.lock().unwrap().clone();
    for (n, e) in events.iter().enumerate() {
        assert!(
            e["createdAt"].as_str().is_some_and(|t| t.len() >= 19),
            "event {n}: a time in ns: {e}"
        );
        if n < events.len() - 1 {
            // The sandbox's status comes with each event until the sandbox is gone.
            assert_eq!(
                e["podSandboxStatus"]["id"],
                sandbox.as_str(),
                "event {n}: {e}"
            );
        }
    }
    // The STARTED event's statuses say the container runs; the STOPPED one's how it ended.
    let status_of = |n: usize, id: &str| {
        events[n]["containersStatuses"]
            .as_array()
            .and_then(|list| list.iter().find(|c| c["id"] == id).cloned())
            .unwrap_or_default()
    };
    assert_eq!(
        status_of(1, &id)["state"],
        "CONTAINER_RUNNING",
        "{}",
        events[1]
    );
    assert_eq!(
        status_of(6, &quits)["state"],
        "CONTAINER_EXITED",
        "{}",
        events[6]
    );
    assert_eq!(status_of(6, &quits)["exitCode"], 3, "{}", events[6]);
    assert_eq!(threads(server.child.id()), "1");
    // A client that goes away leaves nothing in the server.
    drop(watch);
    assert!(
        wait_until(Duration::from_secs(30), || open_fds(server.child.id())
            <= before),
        "the server keeps {} descriptors, {before} before the subscriber came",
        open_fds(server.child.id())
    );
}

#[test]
fn cri_metrics_are_cadvisors_read_from_the_containers_cgroup_and_the_pods_namespace() {
    let test =
        "cri::cri_metrics_are_cadvisors_read_from_the_containers_cgroup_and_the_pods_namespace";
    // Pods on the run's shared network: no other test may count its bridge's ports meanwhile.
    let _network = crate::support::network_lock();
    let Some(server) = Server::start_on(test, "cni") else {
        return;
    };
    server.ok(&["pull", "busybox"]);
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "metrics", "namespace": "default", "uid": "uid-metrics", "attempt": 0},
            "linux": {"cgroup_parent": "/kubepods/burstable/poduid-metrics"}
        }),
    );
    let container = server.write(
        "c.json",
        serde_json::json!({
            "metadata": {"name": "busy"}, "image": {"image": "busybox"},
            "command": ["sh", "-c", "sleep 1000 & sleep 1000"],
            "linux": {"resources": {"memory_limit_in_bytes": 67108864, "cpu_shares": 512,
                                    "cpu_period": 100000, "cpu_quota": 20000}}
        }),
    );
    let sandbox = server.ok(&["runp", &pod]);
    let id = server.ok(&["create", &sandbox, &container, &pod]);
    server.ok(&["start", &id]);
    let descriptors: serde_json::Value =
        serde_json::from_str(&server.ok(&["metricdescs", "-o", "json"])).unwrap();
    let keys: std::collections::BTreeMap<String, usize> = descriptors["descriptors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_string(),
                d["labelKeys"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert!(
        keys.contains_key("container_cpu_usage_seconds_total"),
        "{descriptors}"
    );
    // Both processes of the container run before the metrics are read.
    let pids = |server: &Server| {
        let inspect: serde_json::Value =
            serde_json::from_str(&server.ok(&["inspect", &id])).unwrap();
        inspect["info"]["pid"].as_i64().unwrap()
    };
    let pid = pids(&server);
    assert!(wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .is_ok_and(|c| !c.trim().is_empty())
    }));
    let metrics: serde_json::Value =
        serde_json::from_str(&server.ok(&["metricsp", "-o", "json"])).unwrap();
    let pod_metrics = metrics["podMetrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podSandboxId"] == sandbox.as_str())
        .unwrap_or_else(|| panic!("no metrics of the pod: {metrics}"))
        .clone();
    let ours = pod_metrics["containerMetrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["containerId"] == id.as_str())
        .unwrap_or_else(|| panic!("no metrics of the container: {metrics}"))["metrics"]
        .as_array()
        .unwrap()
        .clone();
    let mut all: Vec<serde_json::Value> = ours.clone();
    all.extend(
        pod_metrics["metrics"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    // Each metric is described, with one label value per key (critest's check).
    for metric in &all {
        let name = metric["name"].as_str().unwrap();
        assert_eq!(
            Some(&metric["labelValues"].as_array().unwrap().len()),
            keys.get(name),
            "{metric}"
        );
    }
    let value = |name: &str| -> u64 {
        ours.iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {ours:?}"))["value"]["value"]
            .as_str()
            .unwrap_or("0")
            .parse()
            .unwrap()
    };
    // The kernel's values: the limits as the container's cgroup holds them, its processes.
    assert_eq!(value("container_spec_memory_limit_bytes"), 67108864);
    assert_eq!(value("container_spec_cpu_shares"), 512);
    assert_eq!(value("container_spec_cpu_period"), 100000);
    assert_eq!(value("container_processes"), 2);
    assert!(value("container_threads") >= 2);
    assert!(value("container_memory_working_set_bytes") > 0);
    assert!(value("container_memory_usage_bytes") >= value("container_memory_working_set_bytes"));
    assert!(value("container_fs_inodes_total") > 0);
    let labels = ours
        .iter()
        .find(|m| m["name"] == "container_processes")
        .unwrap()["labelValues"]
        .clone();
    // pod, namespace, container, id, image (the name the runtime resolved it to).
    let labels = labels.as_array().unwrap();
    let expected: Vec<serde_json::Value> = ["metrics", "default", "busy", id.as_str()]
        .iter()
        .map(|v| serde_json::json!(v))
        .collect();
    assert_eq!(labels[..4], expected[..], "{labels:?}");
    assert!(
        labels[4].as_str().unwrap().contains("busybox"),
        "{labels:?}"
    );
    // The pod's interface, from its own network namespace.
    let received = pod_metrics["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "container_network_receive_packets_total")
        .unwrap_or_else(|| panic!("no network metrics: {pod_metrics}"))
        .clone();
    assert_eq!(received["labelValues"][5], "eth0", "{received}");
    assert_eq!(threads(server.child.id()), "1");
    server.ok(&["stop", "--timeout", "0", &id]);
    server.ok(&["stopp", &sandbox]);
    server.ok(&["rmp", &sandbox]);
}

/// A network namespace of the test's own, held by a `sleep` (lo up) that is killed on drop.
struct OwnNetns(Child);

impl OwnNetns {
    fn new() -> OwnNetns {
        let child = Command::new("unshare")
            .args(["--net", "sh", "-c", "ip link set lo up && exec sleep 600"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let netns = OwnNetns(child);
        let own = std::fs::metadata(netns.path()).map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.ino()
        });
        assert!(
            wait_until(Duration::from_secs(10), || {
                ns_inode(&netns.0.id().to_string(), "net") != ns_inode("self", "net")
                    && Command::new("nsenter")
                        .arg(format!("--net={}", netns.path().display()))
                        .args(["ip", "-o", "link", "show", "lo", "up"])
                        .output()
                        .is_ok_and(|o| !o.stdout.is_empty())
            }),
            "the namespace holder did not start ({own:?})"
        );
        netns
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.0.id()))
    }
}

impl Drop for OwnNetns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn host_port_rules_go_with_podlab_gc_after_the_server_is_killed_and_after_the_records_are_lost() {
    let test = "cri::host_port_rules_go_with_podlab_gc_after_the_server_is_killed_and_after_the_records_are_lost";
    if nat_rules().is_none() {
        record_skip(
            test,
            "no usable iptables NAT here (`iptables -t nat -S` fails)",
        );
        return;
    }
    // A network namespace of its own: whatever happens, its nat table goes with it, and no
    // other test's pod holds a lease on its bridge.
    let netns = OwnNetns::new();
    let ns = netns.path();
    let ns = Some(ns.as_path());
    let Some(mut server) = Server::start_in(test, "cni", &[], ns) else {
        return;
    };
    server.ok(&["pull", "busybox"]);
    let pod = |name: &str, port: u16| {
        server.write(
            &format!("{name}.json"),
            serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "attempt": 0},
                "port_mappings": [{"container_port": 80, "host_port": port}],
                "linux": {}
            }),
        )
    };
    let first = pod("killed", 18918);
    let second = pod("lost", 18919);
    let killed = server.ok(&["runp", &first]);
    let lost = server.ok(&["runp", &second]);
    assert_eq!(dn_chains_in(ns, &killed).len(), 1, "{:?}", nat_rules_in(ns));
    assert_eq!(dn_chains_in(ns, &lost).len(), 1, "{:?}", nat_rules_in(ns));
    // kill -9 of the server: the pods keep running and their rules stay.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert_eq!(dn_chains_in(ns, &killed).len(), 1);
    // The second pod's records are lost, as when a state root is deleted by hand: its shim,
    // pause and folder go without any DEL.
    let runtime = Runtime::open(RuntimeConfig::with_root(server.root())).unwrap();
    runtime
        .remove_pod_sandbox(&podlab_runtime::SandboxId::parse(&lost).unwrap())
        .unwrap();
    assert!(!server.root().join("sandboxes").join(&lost).exists());
    assert_eq!(dn_chains_in(ns, &lost).len(), 1, "no DEL ran for it");
    // `podlab gc` on the root: the first pod's sandbox is torn down with its DEL; the second's
    // rules, which no record names any more, go by their comment's id, which holds no lease
    // once no pod is left on the bridge.
    let gc = server.gc().output().unwrap();
    let said = String::from_utf8_lossy(&gc.stdout);
    assert!(
        gc.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let rules = nat_rules_in(ns).unwrap();
    assert_eq!(
        dn_chains_in(ns, &killed),
        Vec::<String>::new(),
        "{said}\n{rules}"
    );
    assert_eq!(
        dn_chains_in(ns, &lost),
        Vec::<String>::new(),
        "{said}\n{rules}"
    );
    assert!(
        said.contains(&format!("removed the host-port nat rules of {lost}")),
        "{said}"
    );
    // Nobody's host ports are left: portmap's own chains go too.
    assert!(!rules.contains("CNI-"), "{rules}");
}

/// A feature of the default runtime handler, as `crictl info` shows it.
fn handler_feature(server: &Server, feature: &str) -> serde_json::Value {
    let info: serde_json::Value =
        serde_json::from_str(&server.ok(&["info", "-o", "json"])).unwrap();
    info["runtimeHandlers"][0]["features"][feature].clone()
}

#[test]
fn a_recursive_read_only_volume_is_read_only_down_to_its_submounts() {
    let test = "cri::a_recursive_read_only_volume_is_read_only_down_to_its_submounts";
    let Some(server) = Server::start(test) else {
        return;
    };
    // The runtime says it can (mount_setattr), as critest asks before its specs.
    assert_eq!(handler_feature(&server, "recursive_read_only_mounts"), true);
    server.ok(&["pull", "busybox"]);
    // critest's host path: a folder with a tmpfs mounted in it.
    let host = server.dir.path().join("volume");
    std::fs::create_dir_all(host.join("tmpfs")).unwrap();
    let mut mounts = HostMounts(Vec::new());
    mounts.mount(&["-t", "tmpfs", "tmpfs"], &host.join("tmpfs"));
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "rro", "namespace": "default", "uid": "uid-rro", "attempt": 0},
            "linux": {}
        }),
    );
    let sandbox = server.ok(&["runp", &pod]);
    let container = |name: &str, mount: serde_json::Value| {
        server.write(
            &format!("{name}.json"),
            serde_json::json!({
                "metadata": {"name": name}, "image": {"image": "busybox"},
                "command": ["sleep", "1000"], "mounts": [mount], "linux": {}
            }),
        )
    };
    // Propagation as crictl reads it: 0 PRIVATE, 1 HOST_TO_CONTAINER, 2 BIDIRECTIONAL.
    let volume = |readonly: bool, recursive: bool, propagation: i32| {
        serde_json::json!({
            "host_path": host, "container_path": "/mnt", "readonly": readonly,
            "recursive_read_only": recursive, "propagation": propagation
        })
    };
    let rro = container("rro", volume(true, true, 0));
    let ro = container("ro", volume(true, false, 0));
    let rro = server.ok(&["create", &sandbox, &rro, &pod]);
    let ro = server.ok(&["create", &sandbox, &ro, &pod]);
    server.ok(&["start", &rro]);
    server.ok(&["start", &ro]);
    // The kernel's word: the submount is read-only in the recursive one only.
    let (code, _, stderr) = server.crictl(&["exec", "-s", &rro, "touch", "/mnt/tmpfs/file"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    let (code, _, stderr) = server.crictl(&["exec", "-s", &rro, "touch", "/mnt/file"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    server.ok(&["exec", "-s", &ro, "touch", "/mnt/tmpfs/file"]);
    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", &rro])).unwrap();
    assert_eq!(
        inspect["status"]["mounts"][0]["recursiveReadOnly"], true,
        "{inspect}"
    );
    // containerd's refusals: recursive needs read-only and private propagation.
    for (name, mount, words) in [
        (
            "rw",
            volume(false, true, 0),
            "recursive read-only mount conflicts with RW mount",
        ),
        (
            "slave",
            volume(true, true, 1),
            "recursive read-only mount needs private propagation",
        ),
        (
            "shared",
            volume(true, true, 2),
            "recursive read-only mount needs private propagation",
        ),
    ] {
        let config = container(name, mount);
        let (code, _, stderr) = server.crictl(&["create", &sandbox, &config, &pod]);
        assert_ne!(code, 0, "{name}");
        assert!(stderr.contains(words), "{name}: {stderr}");
    }
    server.ok(&["stop", "--timeout", "0", &rro]);
    server.ok(&["stop", "--timeout", "0", &ro]);
    server.ok(&["stopp", &sandbox]);
    server.ok(&["rmp", &sandbox]);
    drop(mounts);
}

/// Files below `dir` (none when it is gone), but the store's `empty` snapshot, which stays.
fn files_below(dir: &Path) -> usize {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_name() != "empty")
            .map(|e| 1 + files_below(&e.path()))
            .sum(),
        Err(_) => 0,
    }
}

#[test]
fn crictl_rmi_answers_and_the_cleaner_takes_the_images_content_after() {
    let Some(server) =
        Server::start("cri::crictl_rmi_answers_and_the_cleaner_takes_the_images_content_after")
    else {
        return;
    };
    server.ok(&["pull", "busybox"]);
    let images = server.root().join("images");
    let (blobs, snapshots) = (images.join("blobs/sha256"), images.join("snapshots"));
    assert!(files_below(&blobs) > 0 && files_below(&snapshots) > 0);
    server.ok(&["rmi", "busybox"]);
    assert_eq!(
        server.ok(&["images", "-q"]).trim(),
        "",
        "the image is gone at once"
    );
    // Its layers and blobs go after the answer, in the server's cleaner (as containerd's GC).
    assert!(
        wait_until(Duration::from_secs(20), || files_below(&blobs) == 0
            && files_below(&snapshots) == 0),
        "left: {} blobs, {} snapshot files; the server's log: {}",
        files_below(&blobs),
        files_below(&snapshots),
        server.log()
    );
}

/// Files named `name` below `dir`, at any depth.
fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == name {
            found.push(path.clone());
        }
        if path.is_dir() {
            found.extend(files_named(&path, name));
        }
    }
    found
}

/// A `podlab cri` on the CNI network of a network namespace of its own (its leases are the
/// test's alone), and a pod config for it. The server goes first (fields drop in order), while
/// its namespace is still held.
struct LeaseScene {
    server: Server,
    pod: String,
    leases: PathBuf,
    netns: OwnNetns,
}

impl LeaseScene {
    fn start(test: &str, pod_name: &str) -> Option<LeaseScene> {
        let netns = OwnNetns::new();
        let server = Server::start_in(test, "cni", &["--trace"], Some(netns.path().as_path()))?;
        let pod = server.write(
            "pod.json",
            serde_json::json!({
                "metadata": {"name": pod_name, "namespace": "default", "uid": format!("uid-{pod_name}"), "attempt": 0},
                "linux": {}
            }),
        );
        use std::os::unix::fs::MetadataExt;
        let inode = std::fs::metadata(netns.path()).unwrap().ino();
        let leases = PathBuf::from(format!("/run/podlab-net/{inode}/cni/ipam"));
        Some(LeaseScene {
            server,
            pod,
            leases,
            netns,
        })
    }

    /// A pod, and the address it holds a lease on.
    fn started(&self) -> (String, String) {
        let sandbox = self.server.ok(&["runp", &self.pod]);
        let status: serde_json::Value =
            serde_json::from_str(&self.server.ok(&["inspectp", &sandbox])).unwrap();
        let ip = status["status"]["network"]["ip"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(
            files_named(&self.leases, &ip).len(),
            1,
            "the lease of {ip:?}"
        );
        (sandbox, ip)
    }
}

#[test]
fn stopp_answers_before_the_cni_del_and_the_cleaner_releases_the_lease_after() {
    let test = "cri::stopp_answers_before_the_cni_del_and_the_cleaner_releases_the_lease_after";
    let Some(scene) = LeaseScene::start(test, "quick-stop") else {
        return;
    };
    let (server, leases) = (&scene.server, &scene.leases);
    let queue = server.root().join("network-teardown");
    let started = || scene.started();
    let released = |ip: &str| {
        assert!(
            wait_until(Duration::from_secs(20), || files_named(leases, ip)
                .is_empty()
                && files_below(&queue) == 0),
            "lease {:?}, queued {}; the server's log: {}",
            files_named(leases, ip),
            files_below(&queue),
            server.log()
        );
    };
    let (sandbox, ip) = started();
    server.ok(&["stopp", &sandbox]);
    // StopPodSandbox answered once the pod's processes and namespaces were gone, with its DEL
    // left to the cleaner, which releases the lease after the answer.
    assert!(
        server.log().contains("CNI DEL left to the cleaner"),
        "{}",
        server.log()
    );
    released(&ip);
    let pods: serde_json::Value =
        serde_json::from_str(&server.ok(&["inspectp", &sandbox])).unwrap();
    assert_eq!(pods["status"]["state"], "SANDBOX_NOTREADY", "{pods}");
    server.ok(&["rmp", &sandbox]);
    assert!(!server.root().join("sandboxes").join(&sandbox).exists());
    // A Ready pod removed without a stop first: its DEL is left to the cleaner the same way.
    let (sandbox, ip) = started();
    server.ok(&["rmp", "--force", &sandbox]);
    released(&ip);
}

/// Regression: the cleaner's DEL (StopPodSandbox's, run after the answer) took the pod
/// network's lock for its whole run, so the next RunPodSandbox's ADD waited for it (critest's
/// pod benchmark: the ADD 13.7 ms with the lock, 7.4 without). A DEL that keeps the bridge now
/// takes no lock: here the lock is held by the test all along, and the lease is released all
/// the same.
#[test]
fn regression_the_cleaners_del_does_not_wait_for_the_network_lock() {
    let test = "cri::regression_the_cleaners_del_does_not_wait_for_the_network_lock";
    let Some(scene) = LeaseScene::start(test, "unlocked") else {
        return;
    };
    let (server, leases) = (&scene.server, &scene.leases);
    let (sandbox, ip) = scene.started();
    // The lock: the abstract socket `podlab-network` of the pod network's namespace, bound
    // as the network binds it.
    let netns_fd = std::fs::File::open(scene.netns.path()).unwrap();
    let lock = podlab_ns::net::socket_in(
        std::os::fd::AsFd::as_fd(&netns_fd),
        "bind(@podlab-network)",
        || podlab_ns::net::bind_abstract(b"podlab-network"),
    )
    .expect("the pod network's lock is free between calls");
    server.ok(&["stopp", &sandbox]);
    assert!(
        wait_until(Duration::from_secs(20), || files_named(leases, &ip)
            .is_empty()),
        "the lease {:?} stayed while the lock was held; the server's log: {}",
        files_named(leases, &ip),
        server.log()
    );
    drop(lock);
    server.ok(&["rmp", &sandbox]);
}

#[test]
fn a_pod_with_userns_options_is_root_inside_and_a_user_of_the_node_outside() {
    let test = "cri::a_pod_with_userns_options_is_root_inside_and_a_user_of_the_node_outside";
    let Some(server) = Server::start(test) else {
        return;
    };
    // The runtime handler says it can, as critest and kubelet ask before they try.
    assert_eq!(handler_feature(&server, "user_namespaces"), true);
    server.ok(&["pull", "busybox"]);
    // NamespaceMode as crictl reads it: 0 POD, 1 CONTAINER, 2 NODE, 3 TARGET.
    let pod_with = |name: &str, userns: serde_json::Value| {
        server.write(
            &format!("{name}.json"),
            serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "attempt": 0},
                "linux": {"security_context": {"namespace_options": {"userns_options": userns}}}
            }),
        )
    };
    let mapping = serde_json::json!([{"container_id": 0, "host_id": 300000, "length": 65536}]);
    let pod = pod_with(
        "userns",
        serde_json::json!({"mode": 0, "uids": mapping, "gids": mapping}),
    );
    // A container says its pod's user namespace again (kubelet sends it, crictl copies the
    // pod's); one that says another is refused, as containerd refuses it.
    let container_with = |file: &str, host_id: u32| {
        let mapping = serde_json::json!([{"container_id": 0, "host_id": host_id, "length": 65536}]);
        server.write(
            file,
            serde_json::json!({
                "metadata": {"name": "app"}, "image": {"image": "busybox"},
                "command": ["sleep", "1000"],
                "linux": {"security_context": {"namespace_options": {"userns_options":
                    {"mode": 0, "uids": mapping, "gids": mapping}}}}
            }),
        )
    };
    let container = container_with("container.json", 300000);
    let sandbox = server.ok(&["runp", &pod]);
    let (code, _, stderr) = server.crictl(&[
        "create",
        &sandbox,
        &container_with("other.json", 400000),
        &pod,
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("InvalidArgument"), "{stderr}");
    assert!(
        stderr.contains("user namespace config for sandbox is different from container"),
        "{stderr}"
    );
    let id = server.ok(&["create", &sandbox, &container, &pod]);
    server.ok(&["start", &id]);
    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", &id])).unwrap();
    let pid = inspect["info"]["pid"].to_string();
    // The kernel's word: the pod's map, root inside, the node's 300000 outside.
    let uid_map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let numbers: Vec<&str> = uid_map.split_whitespace().collect();
    assert_eq!(numbers, ["0", "300000", "65536"], "{uid_map}");
    assert_eq!(server.ok(&["exec", "-s", &id, "id", "-u"]), "0");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t300000\t")),
        "{status}"
    );
    assert_ne!(ns_inode(&pid, "user"), ns_inode("self", "user"));
    // PodSandboxStatus reports the options back.
    let pods: serde_json::Value =
        serde_json::from_str(&server.ok(&["inspectp", &sandbox])).unwrap();
    let options = &pods["status"]["linux"]["namespaces"]["options"]["usernsOptions"];
    assert_eq!(options["uids"][0]["hostId"], 300000, "{pods}");

    // containerd's refusals, each an InvalidArgument naming the field.
    for (name, userns, words) in [
        (
            "container-mode",
            serde_json::json!({"mode": 1}),
            "is not a mode of a pod's user namespace",
        ),
        (
            "unmapped-root",
            serde_json::json!({"mode": 0,
                "uids": [{"container_id": 1, "host_id": 300000, "length": 65536}],
                "gids": mapping}),
            "container id 0 must be mapped",
        ),
    ] {
        let config = pod_with(name, userns);
        let (code, _, stderr) = server.crictl(&["runp", &config]);
        assert_ne!(code, 0, "{name}");
        assert!(stderr.contains("InvalidArgument"), "{name}: {stderr}");
        assert!(stderr.contains(words), "{name}: {stderr}");
    }
    server.ok(&["stop", "--timeout", "0", &id]);
    server.ok(&["stopp", &sandbox]);
    server.ok(&["rmp", &sandbox]);
    assert!(!server.root().join("sandboxes").join(&sandbox).exists());
    assert_eq!(server.ok(&["pods", "-q"]), "");
}

/// critest's own NRI specs (cri-tools' `pkg/validate/nri_linux.go`, with containerd/nri's
/// plugin stub) against `podlab cri --nri-socket`: each pod and container step reaches the
/// plugin with its metadata and in order, a pod or container is hidden while its creating hook
/// runs and removed when the hook fails, a pod's containers stop before its StopPodSandbox hook,
/// and a plugin that joins late hears of every container, in its Synchronize or as an event.
/// The kit's critest, offline: podlab's built-in busybox is the test image.
#[test]
fn critest_nri_specs_pass_against_podlab_cri() {
    let test = "cri::critest_nri_specs_pass_against_podlab_cri";
    let packed = kit().join("bin/critest.xz");
    if !packed.exists() {
        record_skip(
            test,
            &format!("no critest at {} (the critest kit)", packed.display()),
        );
        return;
    }
    let nri_dir = SharedDir::new("podlab-nri", 0o700);
    let nri_socket = nri_dir.path().join("nri.sock");
    let Some(server) = Server::start_with_nri(test, &nri_socket) else {
        return;
    };
    let critest = nri_dir.path().join("critest");
    let unpacked = Command::new("xz")
        .arg("-dc")
        .arg(&packed)
        .stdout(std::fs::File::create(&critest).unwrap())
        .status();
    assert!(
        unpacked.is_ok_and(|s| s.success()),
        "xz -dc {}",
        packed.display()
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&critest, std::fs::Permissions::from_mode(0o755)).unwrap();
    let images = nri_dir.path().join("images.yaml");
    std::fs::write(
        &images,
        "defaultTestContainerImage: docker.io/library/busybox:latest\n\
         webServerTestImage: docker.io/library/busybox:latest\n",
    )
    .unwrap();
    let endpoint = format!("unix://{}", server.socket().display());
    let out = Command::new(&critest)
        .args([
            "--runtime-endpoint",
            &endpoint,
            "--image-endpoint",
            &endpoint,
        ])
        .arg(format!("--nri-socket={}", nri_socket.display()))
        .arg(format!("--test-images-file={}", images.display()))
        .args([
            "--ginkgo.focus=NRI",
            "--ginkgo.no-color",
            "--ginkgo.timeout=5m",
        ])
        .current_dir(nri_dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let tail: Vec<&str> = report.lines().rev().take(40).collect();
    let tail = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(
        out.status.success() && report.contains("SUCCESS! -- 13 Passed | 0 Failed"),
        "critest's NRI specs: {}\n{tail}\nthe server's log: {}",
        out.status,
        server.log()
    );
    drop(server);
    assert!(
        !nri_socket.exists(),
        "the stopped server left its NRI socket"
    );
}

/// A bare NRI plugin, built on podlab-cri's wire code: connected and registered, it answers
/// the runtime's calls on a thread of its own with `answer` (method, request payload → the
/// response), and can call the runtime itself ([`TestPlugin::call_runtime`]).
struct TestPlugin {
    writer: std::os::unix::net::UnixStream,
    /// The runtime's answers to this plugin's own calls.
    answers: std::sync::mpsc::Receiver<podlab_cri::nri::ttrpc::Message>,
    next_call: u32,
}

impl TestPlugin {
    /// Connects to `socket` as `name` (at `index`), subscribed to `events`; returns once the
    /// runtime has configured and synchronized it.
    fn connect(
        socket: &Path,
        name: &str,
        index: &str,
        events: &[podlab_cri::nri::api::Event],
        mut answer: impl FnMut(&str, &[u8]) -> podlab_cri::nri::ttrpc::Response + Send + 'static,
    ) -> TestPlugin {
        use podlab_cri::nri::{api, ttrpc};
        use prost::Message as _;
        use std::io::Read;
        let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mask = events.iter().map(|e| 1 << (*e as i32 - 1)).sum::<i32>();
        let (synced, ready) = std::sync::mpsc::channel();
        let (answered, answers) = std::sync::mpsc::channel();
        let mut reader = stream.try_clone().unwrap();
        let mut writer = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut demux = ttrpc::Demux::default();
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                let Ok(n) = reader.read(&mut buffer) else {
                    return;
                };
                if n == 0 {
                    return;
                }
                for message in demux.push(&buffer[..n]).unwrap() {
                    if (message.mux, message.kind) == (ttrpc::RUNTIME_CONN, ttrpc::RESPONSE) {
                        let _ = answered.send(message);
                        continue;
                    }
                    if (message.mux, message.kind) != (ttrpc::PLUGIN_CONN, ttrpc::REQUEST) {
                        continue;
                    }
                    let request = ttrpc::Request::decode(message.payload.as_slice()).unwrap();
                    let response = match request.method.as_str() {
                        "Configure" => ttrpc::Response {
                            status: None,
                            payload: api::ConfigureResponse { events: mask }.encode_to_vec(),
                        },
                        "Synchronize" => {
                            let _ = synced.send(());
                            ttrpc::Response {
                                status: None,
                                payload: api::SynchronizeResponse::default().encode_to_vec(),
                            }
                        }
                        method => answer(method, &request.payload),
                    };
                    send_frame(
                        &mut writer,
                        ttrpc::PLUGIN_CONN,
                        message.stream,
                        ttrpc::RESPONSE,
                        response.encode_to_vec(),
                    );
                }
            }
        });
        let mut plugin = TestPlugin {
            writer: stream,
            answers,
            next_call: 1,
        };
        let register = api::RegisterPluginRequest {
            plugin_name: name.into(),
            plugin_idx: index.into(),
            nri_version: String::new(),
        };
        let registered = plugin.call_runtime("RegisterPlugin", register.encode_to_vec());
        assert!(
            registered.status.is_none(),
            "{name} registered: {registered:?}"
        );
        ready
            .recv_timeout(Duration::from_secs(20))
            .expect("the plugin was configured and synchronized");
        plugin
    }

    /// Calls the runtime's service (`RegisterPlugin`, `UpdateContainers`) and waits for its answer.
    fn call_runtime(&mut self, method: &str, payload: Vec<u8>) -> podlab_cri::nri::ttrpc::Response {
        use podlab_cri::nri::ttrpc;
        use prost::Message as _;
        let request = ttrpc::Request {
            service: "nri.pkg.api.v1alpha1.Runtime".into(),
            method: method.into(),
            payload,
            timeout_nano: 5_000_000_000,
            metadata: Vec::new(),
        };
        let id = self.next_call;
        self.next_call += 2; // a client's streams are odd
        send_frame(
            &mut self.writer,
            ttrpc::RUNTIME_CONN,
            id,
            ttrpc::REQUEST,
            request.encode_to_vec(),
        );
        let answer = self
            .answers
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no answer to {method}"));
        assert_eq!(answer.stream, id);
        ttrpc::Response::decode(answer.payload.as_slice()).unwrap()
    }
}

fn send_frame(
    stream: &mut std::os::unix::net::UnixStream,
    mux: u32,
    id: u32,
    kind: u8,
    payload: Vec<u8>,
) {
    use std::io::Write;
    let message = podlab_cri::nri::ttrpc::Message {
        mux,
        stream: id,
        kind,
        payload,
    };
    stream
        .write_all(&podlab_cri::nri::ttrpc::frame(&message))
        .unwrap();
}

/// A [`TestPlugin`] that asks only for RunPodSandbox and holds each one until the test
/// answers it: its pod id goes out on the first channel, the answer (None: success,
/// Some(message): a veto) comes in on the second.
fn holding_nri_plugin(
    socket: &Path,
) -> (
    TestPlugin,
    std::sync::mpsc::Receiver<String>,
    std::sync::mpsc::Sender<Option<String>>,
) {
    use podlab_cri::nri::{api, ttrpc};
    use prost::Message as _;
    let (reached, hooks) = std::sync::mpsc::channel();
    let (answer, answers) = std::sync::mpsc::channel::<Option<String>>();
    let plugin = TestPlugin::connect(
        socket,
        "hold",
        "10",
        &[api::Event::RunPodSandbox],
        move |_, payload| {
            let event = api::StateChangeEvent::decode(payload).unwrap();
            let _ = reached.send(event.pod.unwrap_or_default().id);
            let status = answers
                .recv()
                .ok()
                .flatten()
                .map(|message| ttrpc::RpcStatus {
                    code: ttrpc::CODE_UNKNOWN,
                    message,
                });
            ttrpc::Response {
                status,
                payload: api::Empty {}.encode_to_vec(),
            }
        },
    );
    (plugin, hooks, answer)
}

/// A client that gives up while an NRI plugin holds its RunPodSandbox leaves nothing half
/// made: the call runs to its end without it. Vetoed then, the sandbox is removed (no record,
/// no pause); let through, it is listed Ready as if the client had waited.
#[test]
fn regression_a_client_gone_during_an_nri_hook_leaves_no_hidden_sandbox() {
    let test = "cri::regression_a_client_gone_during_an_nri_hook_leaves_no_hidden_sandbox";
    let nri_dir = SharedDir::new("podlab-nri", 0o700);
    let nri_socket = nri_dir.path().join("nri.sock");
    let Some(server) = Server::start_with_nri(test, &nri_socket) else {
        return;
    };
    let (_plugin, hooks, answer) = holding_nri_plugin(&nri_socket);
    let records = || {
        Runtime::open(RuntimeConfig::with_root(server.root()))
            .and_then(|runtime| runtime.list_pod_sandboxes())
            .map(|sandboxes| sandboxes.len())
            .unwrap_or(usize::MAX)
    };
    for (attempt, veto) in [(0, Some("vetoed by the test")), (1, None)] {
        let pod = server.write(
            &format!("held-{attempt}.json"),
            serde_json::json!({"metadata": {"name": "held", "namespace": "default",
                "uid": "held", "attempt": attempt}, "linux": {}}),
        );
        let mut client = server
            .crictl_command(&["runp", &pod])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let held = hooks
            .recv_timeout(Duration::from_secs(20))
            .expect("the plugin was told of the sandbox");
        // The client goes while the hook holds its call (well within the plugin's 2 s).
        client.kill().unwrap();
        assert!(
            !client.wait().unwrap().success(),
            "crictl finished the held call"
        );
        assert_eq!(
            server.ok(&["pods", "-q"]),
            "",
            "a held sandbox is not listed"
        );
        answer.send(veto.map(str::to_string)).unwrap();
        if veto.is_some() {
            assert!(
                wait_until(Duration::from_secs(20), || records() == 0),
                "the vetoed sandbox {held} is still recorded; server log: {}",
                server.log()
            );
            assert_eq!(server.ok(&["pods", "-q"]), "");
        } else {
            assert!(
                wait_until(Duration::from_secs(20), || server
                    .ok(&["pods", "-q", "--state", "ready"])
                    == held),
                "the sandbox let through is not listed Ready; server log: {}",
                server.log()
            );
        }
    }
}

/// A server that cannot bind its NRI socket says so and leaves no CRI socket behind: clients
/// wait for that socket, and one left by a server that never served would look alive. (The CRI
/// socket used to be bound first, and stayed when what was bound after it failed.)
#[test]
fn regression_a_cri_server_that_cannot_bind_its_nri_socket_leaves_no_cri_socket() {
    let dir = SharedDir::new("podlab-cri-nri-bind", 0o700);
    let socket = dir.path().join("cri.sock");
    // procfs makes no folders: the NRI socket's cannot exist.
    let nri_socket = Path::new("/proc/podlab-no-such-folder/nri.sock");
    let out = podlab()
        .args(["cri", "--listen"])
        .arg(&socket)
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--nri-socket")
        .arg(nri_socket)
        .env("PODLAB_NETWORK", "none")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "podlab cri served: {stderr}");
    assert!(
        stderr.contains("binding the NRI socket") && stderr.contains(nri_socket.to_str().unwrap()),
        "the error names the NRI socket: {stderr}"
    );
    assert!(!socket.exists(), "a CRI socket was left: {stderr}");
    let _ = podlab()
        .arg("gc")
        .env("PODLAB_ROOT", dir.path().join("root"))
        .env("PODLAB_NETWORK", "none")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// NRI plugins adjust a container before it starts, as containerd applies their answers: the
/// environment, a bind mount, `oom_score_adj` and cgroup limits reach the container's process
/// (checked in the kernel), the next plugin is shown the container adjusted, and what podlab
/// cannot apply fails the creation naming the field, leaving nothing. An
/// UpdateContainerResources is shown to the plugin, which adds to it; a validator plugin is shown
/// the pending adjustment and its owners, and a rejection fails the creation; the plugin's own
/// UpdateContainers then changes the running container's cgroup, and its eviction stops it.
#[test]
fn nri_plugins_adjust_a_container_before_its_start_update_it_and_evict_it() {
    use podlab_cri::nri::{api, ttrpc};
    use prost::Message as _;
    let test = "cri::nri_plugins_adjust_a_container_before_its_start_update_it_and_evict_it";
    let nri_dir = SharedDir::new("podlab-nri", 0o700);
    let nri_socket = nri_dir.path().join("nri.sock");
    let Some(server) = Server::start_with_nri(test, &nri_socket) else {
        return;
    };
    server.ok(&["pull", "busybox"]);
    let volume = SharedDir::new("podlab-nri-volume", 0o755);
    std::fs::write(volume.path().join("note"), "from the host").unwrap();
    let source = volume.path().to_str().unwrap().to_string();
    const MIB: i64 = 1 << 20;
    let (asked_update, update_seen) = std::sync::mpsc::channel();
    let adjuster = TestPlugin::connect(
        &nri_socket,
        "adjuster",
        "10",
        &[api::Event::CreateContainer, api::Event::UpdateContainer],
        move |method, payload| {
            if method == "UpdateContainer" {
                // The update as asked, and a pids limit of the plugin's own added to it.
                let request = api::UpdateContainerRequest::decode(payload).unwrap();
                let _ = asked_update.send(request.linux_resources.unwrap_or_default());
                let update = api::ContainerUpdate {
                    container_id: request.container.unwrap_or_default().id,
                    linux: Some(api::LinuxContainerUpdate {
                        resources: Some(api::LinuxResources {
                            pids: Some(api::LinuxPids { limit: 80 }),
                            ..Default::default()
                        }),
                    }),
                    ignore_failure: false,
                };
                return ttrpc::Response {
                    status: None,
                    payload: api::UpdateContainerResponse {
                        update: vec![update],
                        evict: Vec::new(),
                    }
                    .encode_to_vec(),
                };
            }
            let request = api::CreateContainerRequest::decode(payload).unwrap();
            let name = request.container.unwrap_or_default().name;
            let mut linux = api::LinuxContainerAdjustment {
                oom_score_adj: Some(api::OptionalInt { value: 321 }),
                resources: Some(api::LinuxResources {
                    memory: Some(api::LinuxMemory {
                        limit: Some(api::OptionalInt64 { value: 48 * MIB }),
                        ..Default::default()
                    }),
                    pids: Some(api::LinuxPids { limit: 64 }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            if name == "refused" {
                linux.sysctl = [("net.ipv4.ip_forward".to_string(), "1".to_string())].into();
            }
            let adjust = api::ContainerAdjustment {
                env: vec![api::KeyValue {
                    key: "NRI_ADDED".into(),
                    value: "yes".into(),
                }],
                mounts: vec![api::Mount {
                    destination: "/nri".into(),
                    r#type: "bind".into(),
                    source: source.clone(),
                    options: vec!["rbind".into(), "ro".into()],
                }],
                annotations: [("podlab.test/adjusted".to_string(), "yes".to_string())].into(),
                linux: Some(linux),
                ..Default::default()
            };
            ttrpc::Response {
                status: None,
                payload: api::CreateContainerResponse {
                    adjust: Some(adjust),
                    ..Default::default()
                }
                .encode_to_vec(),
            }
        },
    );
    let (shown, follower_saw) = std::sync::mpsc::channel();
    let _follower = TestPlugin::connect(
        &nri_socket,
        "follower",
        "20",
        &[api::Event::CreateContainer],
        move |_, payload| {
            let request = api::CreateContainerRequest::decode(payload).unwrap();
            let _ = shown.send(request.container.unwrap_or_default());
            ttrpc::Response {
                status: None,
                payload: api::CreateContainerResponse::default().encode_to_vec(),
            }
        },
    );
    // A validator: shown what the plugins asked for and who asked, it rejects one container.
    let (validated, validator_saw) = std::sync::mpsc::channel();
    let _validator = TestPlugin::connect(
        &nri_socket,
        "validator",
        "30",
        &[api::Event::ValidateContainerAdjustment],
        move |_, payload| {
            let request = api::ValidateContainerAdjustmentRequest::decode(payload).unwrap();
            let reject = request.container.as_ref().unwrap().name == "rejected";
            let _ = validated.send(request);
            ttrpc::Response {
                status: None,
                payload: api::ValidateContainerAdjustmentResponse {
                    reject,
                    reason: "the test rejects it".into(),
                }
                .encode_to_vec(),
            }
        },
    );
    let mut adjuster = adjuster;
    let pod = server.write(
        "pod.json",
        serde_json::json!({
            "metadata": {"name": "adjusted", "namespace": "default", "uid": "uid-nri-adjusted", "attempt": 0},
            "linux": {"cgroup_parent": "/kubepods/burstable/poduid-nri-adjusted"}
        }),
    );
    let container = |name: &str| {
        server.write(
            &format!("{name}.json"),
            serde_json::json!({"metadata": {"name": name}, "image": {"image": "busybox"},
                "command": ["sleep", "1000"]}),
        )
    };
    let sandbox = server.ok(&["runp", &pod]);

    // What podlab cannot apply fails the creation, naming the field and the plugin.
    let (code, _, stderr) = server.crictl(&["create", &sandbox, &container("refused"), &pod]);
    assert_ne!(code, 0, "a sysctl adjustment was accepted");
    assert!(
        stderr.contains("adjuster") && stderr.contains("linux.sysctl"),
        "{stderr}"
    );
    assert_eq!(
        server.ok(&["ps", "-a", "-q"]),
        "",
        "the refused container is left"
    );
    assert!(
        follower_saw.try_recv().is_err(),
        "a refused container went on to the next plugin"
    );

    let id = server.ok(&["create", &sandbox, &container("app"), &pod]);
    let seen = follower_saw
        .recv_timeout(Duration::from_secs(10))
        .expect("the follower was asked");
    assert!(
        seen.env.iter().any(|e| e == "NRI_ADDED=yes")
            && seen.mounts.iter().any(|m| m.destination == "/nri")
            && seen
                .annotations
                .get("podlab.test/adjusted")
                .is_some_and(|v| v == "yes"),
        "the second plugin was shown the container as the first adjusted it: {seen:?}"
    );
    let validation = validator_saw
        .recv_timeout(Duration::from_secs(10))
        .expect("the validator was asked");
    let consulted: Vec<(&str, &str)> = validation
        .plugins
        .iter()
        .map(|p| (p.name.as_str(), p.index.as_str()))
        .collect();
    assert_eq!(consulted, [("adjuster", "10"), ("follower", "20")]);
    let pending = validation.adjust.clone().unwrap_or_default();
    assert!(
        pending.env.iter().any(|e| e.key == "NRI_ADDED")
            && !validation
                .container
                .as_ref()
                .unwrap()
                .env
                .iter()
                .any(|e| e.starts_with("NRI_ADDED=")),
        "the validator is shown the pending adjustment and the container as it was: {validation:?}"
    );
    let owners = &validation.owners.as_ref().unwrap().owners[&id];
    assert_eq!(
        owners.compound[&(api::Field::Env as i32)].owners["NRI_ADDED"],
        "10-adjuster"
    );
    assert_eq!(owners.simple[&(api::Field::MemLimit as i32)], "10-adjuster");
    // A rejected adjustment fails the creation and leaves nothing.
    let (code, _, stderr) = server.crictl(&["create", &sandbox, &container("rejected"), &pod]);
    assert_ne!(code, 0, "a rejected container was made");
    assert!(
        stderr.contains("validator") && stderr.contains("the test rejects it"),
        "{stderr}"
    );
    assert_eq!(
        server.ok(&["ps", "-a", "-q"]),
        id,
        "the rejected container is left"
    );
    server.ok(&["start", &id]);
    let inspect: serde_json::Value = serde_json::from_str(&server.ok(&["inspect", &id])).unwrap();
    let pid = inspect["info"]["pid"].as_i64().unwrap();
    assert!(
        inspect["status"]["annotations"]
            .get("podlab.test/adjusted")
            .is_none(),
        "a plugin's annotation is the spec's, not the CRI's: {inspect}"
    );
    // The kernel's word on each adjustment.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        environ.split(|b| *b == 0).any(|e| e == b"NRI_ADDED=yes"),
        "{}",
        String::from_utf8_lossy(&environ)
    );
    assert_eq!(
        server.ok(&["exec", "-s", &id, "cat", "/nri/note"]),
        "from the host"
    );
    let (code, _, stderr) = server.crictl(&["exec", "-s", &id, "touch", "/nri/new"]);
    assert_ne!(code, 0, "the read-only mount took a new file");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
            .unwrap()
            .trim(),
        "321"
    );
    let runtime = Runtime::open(RuntimeConfig::with_root(server.root())).unwrap();
    let cgroup_file = |controller, file: &str| {
        let pid = i32::try_from(pid).unwrap();
        crate::cgroups::read(
            &crate::cgroups::cgroup_dir_of(&runtime, pid, controller),
            file,
        )
    };
    assert_eq!(
        cgroup_file(Controller::Memory, "memory.limit_in_bytes"),
        (48 * MIB).to_string()
    );
    assert_eq!(cgroup_file(Controller::Pids, "pids.max"), "64");

    // UpdateContainerResources: the plugin is shown the update and adds to it.
    server.ok(&["update", "--memory", &(44 * MIB).to_string(), &id]);
    let asked = update_seen
        .recv_timeout(Duration::from_secs(10))
        .expect("the plugin was asked about the update");
    assert_eq!(
        asked.memory.unwrap_or_default().limit.map(|l| l.value),
        Some(44 * MIB)
    );
    assert_eq!(
        cgroup_file(Controller::Memory, "memory.limit_in_bytes"),
        (44 * MIB).to_string()
    );
    assert_eq!(
        cgroup_file(Controller::Pids, "pids.max"),
        "80",
        "the plugin's part of the update"
    );

    // The plugin's own UpdateContainers: one update made, one it cannot be, answered failed.
    let update = |id: &str, resources: api::LinuxResources| api::ContainerUpdate {
        container_id: id.to_string(),
        linux: Some(api::LinuxContainerUpdate {
            resources: Some(resources),
        }),
        ignore_failure: false,
    };
    let memory = api::LinuxResources {
        memory: Some(api::LinuxMemory {
            limit: Some(api::OptionalInt64 { value: 40 * MIB }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cpuset = api::LinuxResources {
        cpu: Some(api::LinuxCpu {
            cpus: "0".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let asked = api::UpdateContainersRequest {
        update: vec![update(&id, memory), update(&id, cpuset)],
        evict: Vec::new(),
    };
    let answer = adjuster.call_runtime("UpdateContainers", asked.encode_to_vec());
    assert!(answer.status.is_none(), "{answer:?}");
    let failed = api::UpdateContainersResponse::decode(answer.payload.as_slice())
        .unwrap()
        .failed;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        failed[0]
            .linux
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .cpu
            .as_ref()
            .unwrap()
            .cpus,
        "0"
    );
    assert_eq!(
        cgroup_file(Controller::Memory, "memory.limit_in_bytes"),
        (40 * MIB).to_string()
    );

    // An eviction stops the container, as containerd's (no grace).
    let evict = api::UpdateContainersRequest {
        update: Vec::new(),
        evict: vec![api::ContainerEviction {
            container_id: id.clone(),
            reason: "the test evicts it".into(),
        }],
    };
    let answer = adjuster.call_runtime("UpdateContainers", evict.encode_to_vec());
    assert!(answer.status.is_none(), "{answer:?}");
    assert_eq!(
        server.ok(&["ps", "-a", "--state", "exited", "-q"]),
        id,
        "the evicted container is not exited"
    );
}
