//! `podlab cri` driven by the real `crictl` (cri-tools, from the critest kit beside the
//! checkout): the core verbs end to end, checked against the kernel, and the CRI's error rules.

use std::net::TcpStream;
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
        Server::start_on(test, "none")
    }

    /// [`Server::start`] with `PODLAB_NETWORK=network`.
    fn start_on(test: &str, network: &str) -> Option<Server> {
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
            .env("PODLAB_NETWORK", network)
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
    let out = Command::new("iptables")
        .args(["-w", "-t", "nat", "-S"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
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
    // StopPodSandbox's CNI DEL takes the pod's rules away.
    server.ok(&["stopp", &sandbox]);
    let rules = nat_rules().unwrap();
    assert!(!rules.contains(&format!("--dport {HOST_PORT}")), "{rules}");
    assert!(!rules.contains(&ip), "{rules}");
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
