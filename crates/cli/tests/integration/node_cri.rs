//! The node agent as a CRI client (`podlab node --runtime-endpoint`): the same manifests run
//! through a `podlab cri` the test starts (a socket and a state root of its own) and in the
//! agent's own process, and give the same phases, exit codes, readiness and output; and, where
//! containerd can run here, through containerd's CRI plugin.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use podlab_runtime::config::RuntimeConfig;
use podlab_runtime::{ContainerFilter, Runtime};

use crate::pods::{container, phase, Root, LIMIT};
use crate::support::{podlab, wait_until, SharedDir};

/// A container that prints and fails: the pod ends Failed with its exit code.
const ONCE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: once}
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo hello from $(hostname); exit 3"]
"#;

/// A container that runs on and becomes Ready by an exec probe (ExecSync over the CRI).
const WEB: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "touch /tmp/ready; exec sleep 1000"]
    readinessProbe:
      exec: {command: [cat, /tmp/ready]}
      periodSeconds: 1
"#;

/// A `podlab cri` with its own socket and root; stopped on drop, with every sandbox left in
/// its root removed.
pub(crate) struct CriServer {
    dir: SharedDir,
    child: Child,
}

impl CriServer {
    fn start() -> CriServer {
        CriServer::start_with_env(&[])
    }

    /// [`CriServer::start`] with more variables for the server.
    pub(crate) fn start_with_env(env: &[(&str, &str)]) -> CriServer {
        let dir = SharedDir::new("podlab-node-cri", 0o755);
        let child = podlab()
            .args(["cri", "--listen"])
            .arg(dir.path().join("cri.sock"))
            .arg("--root")
            .arg(dir.path().join("root"))
            .env("PODLAB_NETWORK", "none")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
            .spawn()
            .unwrap();
        let server = CriServer { dir, child };
        let socket = server.socket();
        assert!(
            wait_until(Duration::from_secs(20), || socket.exists()),
            "podlab cri did not make its socket; its log: {}",
            server.log()
        );
        server
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("cri.sock")
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    fn runtime(&self) -> Runtime {
        Runtime::open(RuntimeConfig::with_root(self.dir.path().join("root"))).unwrap()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for CriServer {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the server this test spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let runtime = self.runtime();
        for sandbox in runtime.list_pod_sandboxes().unwrap_or_default() {
            let _ = runtime.remove_pod_sandbox(&sandbox.id);
        }
    }
}

/// The text of a container's CRI log file (`TIMESTAMP STREAM F|P TEXT` lines): what kubelet
/// reads for `kubectl logs`, wherever the runtime that wrote it runs.
fn log_text(root: &Root, pod: &Pod, name: &str, attempt: u32) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap();
    let path = root
        .dir
        .join("logs")
        .join(format!(
            "default_{}_{uid}",
            pod.metadata.name.as_deref().unwrap()
        ))
        .join(name)
        .join(format!("{attempt}.log"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading the log {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the two pods end as: `once`'s phase, exit code, reason and output, and whether `web`
/// is Ready.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    once_phase: String,
    exit_code: i32,
    reason: String,
    output: String,
    web_ready: bool,
}

impl Seen {
    /// What the manifests say: `once` fails with 3 after printing its hostname, `web` is Ready.
    fn expected() -> Seen {
        Seen {
            once_phase: "Failed".into(),
            exit_code: 3,
            reason: "Error".into(),
            output: "hello from once".into(),
            web_ready: true,
        }
    }
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn run_both(root: &Root) -> (Seen, Pod) {
    for manifest in [ONCE, WEB] {
        let out = root.apply(manifest);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let once = root.wait_pod("once", "Failed", LIMIT, |p| phase(p) == "Failed");
    let web = root.wait_pod("web", "Ready", LIMIT, ready);
    let app = container(&once, "app");
    let terminated = app
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("once's app terminated");
    let seen = Seen {
        once_phase: phase(&once),
        exit_code: terminated.exit_code,
        reason: terminated.reason.unwrap_or_default(),
        output: log_text(root, &once, "app", 0),
        web_ready: ready(&web),
    };
    (seen, web)
}

fn delete_both(root: &Root) {
    delete_pods(root, &["once", "web"]);
}

/// Waits (bounded) for the agent to remove deleted pods' folders: as kubelet's housekeeping,
/// it does so after their sandboxes, once `delete` has returned.
fn pod_folders_gone(root: &Root) {
    let empty = |folder: &str| {
        std::fs::read_dir(root.dir.join(folder)).map_or(true, |mut d| d.next().is_none())
    };
    wait_until(LIMIT, || empty("pods") && empty("logs"));
}

fn delete_pods(root: &Root, names: &[&str]) {
    for name in names {
        let out = root.run(&["delete", "pod", name, "--grace-period=1"]);
        assert_eq!(
            out.code,
            Some(0),
            "{out:?}\nagent log: {}",
            root.agent_log()
        );
    }
}

/// The agent with `--runtime-endpoint` on a `podlab cri`: the pods reach Failed (exit 3, its
/// output in the log file kubelet's layout names) and Ready exactly as in process; their
/// sandboxes and containers are the server's (its records, its processes), none the agent's;
/// deleting them leaves the server with nothing.
#[test]
fn the_agent_runs_the_same_pods_through_podlab_cri_as_in_process() {
    let server = CriServer::start();
    let remote =
        Root::new("node-cri-remote").with_env("PODLAB_NODE_RUNTIME_ENDPOINT", &server.endpoint());
    let (through_cri, web) = run_both(&remote);

    // The server made them: its records have the containers, running as processes.
    let runtime = server.runtime();
    let sandboxes = runtime.list_pod_sandboxes().unwrap();
    assert_eq!(
        sandboxes.len(),
        2,
        "the server's sandboxes: {sandboxes:?}\nserver log: {}",
        server.log()
    );
    let uid = web.metadata.uid.clone().unwrap();
    let running = runtime
        .list_containers(&ContainerFilter::default())
        .unwrap()
        .into_iter()
        .find(|c| c.labels.get("io.kubernetes.pod.uid") == Some(&uid))
        .expect("web's container is the server's");
    let pid = running.pid.expect("web's container runs");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("sleep"),
        "{cmdline:?}"
    );
    assert_eq!(
        running
            .annotations
            .get("io.kubernetes.container.restartCount"),
        Some(&"0".to_string())
    );
    // The agent's own runtime made nothing.
    assert!(remote.runtime().list_pod_sandboxes().unwrap().is_empty());

    // `podlab logs` reads the log file the server wrote where the agent's config named it,
    // as kubelet reads a container's log itself.
    let logs = remote.ok(&["logs", "once"]);
    assert_eq!(logs, "hello from once\n");
    // `podlab exec` goes to the server too (ExecSync): the command runs in web's container,
    // its output and exit status come back; the hostname read inside is the pod's.
    let out = remote.run(&[
        "exec",
        "web",
        "--",
        "sh",
        "-c",
        "echo out $(hostname); echo err >&2; exit 4",
    ]);
    assert_eq!(out.code, Some(4), "{out:?}");
    assert_eq!(out.stdout, "out web\n", "{out:?}");
    assert_eq!(out.stderr, "err\n", "{out:?}");
    // (`exec -i`/`-it` and `attach` stream through the CRI: the next test.)

    let local = Root::new("node-cri-local");
    let (in_process, _) = run_both(&local);
    assert_eq!(through_cri, in_process);
    assert_eq!(through_cri, Seen::expected());

    delete_both(&remote);
    delete_both(&local);
    assert!(
        wait_until(LIMIT, || runtime.list_pod_sandboxes().unwrap().is_empty()),
        "the server still has sandboxes: {:?}",
        runtime.list_pod_sandboxes()
    );
    assert!(
        wait_until(Duration::from_secs(10), || !Path::new(&format!(
            "/proc/{pid}"
        ))
        .exists()
            || crate::pods::is_zombie(pid)),
        "web's container still runs"
    );
    pod_folders_gone(&remote);
    pod_folders_gone(&local);
    remote.assert_nothing_left();
    local.assert_nothing_left();
}

/// A container that answers each line of its stdin (`stdin: true`, no tty), for `attach -i`,
/// and a shell on a console (`tty: true`), for `attach -it`.
const TALK: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: talk}
spec:
  containers:
  - name: echo
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "while read line; do echo got-$line; done; sleep 1000"]
    stdin: true
  - name: sh
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh]
    stdin: true
    tty: true
"#;

/// A `podlab` command started on a test's pty, killed if the test ends before it does.
struct Session(std::process::Child);

impl Drop for Session {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `podlab debug` on pod `web` of an agent whose runtime is a CRI runtime: the agent starts
/// the ephemeral container through the CRI; its output comes from the log file the runtime's
/// ContainerStatus names, its exit code from its status, and with `stdin` also a `-i` session
/// whose input goes through the runtime's Attach. `log` is the runtime's log, for failures.
fn debug_web(root: &Root, stdin: bool, log: &dyn Fn() -> String) {
    let cases = [
        (
            &[][..],
            "echo debug-says-hi; exit 3",
            "",
            3,
            "debug-says-hi",
        ),
        (&["-i"][..], "read v; echo got-$v", "x\n", 0, "got-x"),
    ];
    for (flags, script, input, code, said) in cases.into_iter().take(1 + usize::from(stdin)) {
        let mut args = vec!["debug"];
        args.extend(flags);
        // The image the pods run (imported, offline): not pulled again for a `:latest`.
        let image = ["--image", "busybox", "--image-pull-policy", "IfNotPresent"];
        args.extend(["web"].into_iter().chain(image));
        args.extend(["--", "sh", "-c", script]);
        let out = with_stdin(root, root.command(&args), input);
        assert_eq!(
            out.code,
            Some(code),
            "{out:?}\nthe runtime's log: {}",
            log()
        );
        assert!(out.stdout.contains(said), "{out:?}");
    }
}

/// `command` with `stdin` fed in and closed, waited for at most [`LIMIT`] (then killed): a
/// session that does not end (its stdin's end lost on the way) fails instead of hanging.
fn with_stdin(root: &Root, mut command: std::process::Command, stdin: &str) -> crate::pods::Out {
    use std::io::Write;
    let (out, err) = (root.dir.join("session.out"), root.dir.join("session.err"));
    let mut child = Session(
        command
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut input = child.0.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let mut status = None;
    let ended = wait_until(LIMIT, || {
        status = child.0.try_wait().unwrap();
        status.is_some()
    });
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        ended,
        "{command:?} did not end within {LIMIT:?}; its stderr: {}",
        read(&err)
    );
    crate::pods::Out {
        code: status.and_then(|s| s.code()),
        stdout: read(&out),
        stderr: read(&err),
    }
}

/// `exec -i`, `exec -it` and `attach -i` through a `podlab cri` (the CRI's streaming Exec and
/// Attach, SPDY as crictl speaks it): stdin reaches the container and its end is the command's
/// end of file; the exit code comes back through the `error` stream; with `-t` the command
/// gets a pty of the runtime's whose size is this terminal's and follows its resizes, this
/// terminal is in raw mode during the session and restored after; an attached container's
/// answers to the lines typed come back, and Ctrl-C ends the attach, not the container; an
/// attached console takes the terminal's size, and Ctrl-P Ctrl-Q detach from it. `podlab
/// debug`'s ephemeral container runs there too: its output, its exit code, its stdin.
#[test]
fn exec_i_t_and_attach_stream_through_podlab_cri() {
    use crate::terminals::{wait_exit, Terminal};
    use nix::sys::termios::LocalFlags;

    let server = CriServer::start();
    let root =
        Root::new("node-cri-stream").with_env("PODLAB_NODE_RUNTIME_ENDPOINT", &server.endpoint());
    for manifest in [WEB, TALK] {
        let out = root.apply(manifest);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    root.wait_pod("web", "Ready", LIMIT, ready);
    root.wait_pod("talk", "Running", LIMIT, crate::pods::running);

    // stdin piped: what it holds reaches `cat`, and its end ends `cat` (the stdin stream's FIN).
    let out = with_stdin(
        &root,
        root.command(&["exec", "-i", "web", "-c", "app", "--", "cat"]),
        "hello\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}\nserver log: {}", server.log());
    assert_eq!(out.stdout, "hello\n", "{out:?}");
    // The exit code comes back through the error stream's Status; stderr is its own stream.
    let out = with_stdin(
        &root,
        root.command(&[
            "exec",
            "-i",
            "web",
            "--",
            "sh",
            "-c",
            "read x; echo \"read $x\" >&2; exit 7",
        ]),
        "line\n",
    );
    assert_eq!(out.code, Some(7), "{out:?}");
    assert_eq!(out.stderr, "read line\n", "{out:?}");
    assert_eq!(out.stdout, "", "{out:?}");

    // `-it` on a pty this test holds: the shell inside has a pty of the container's own devpts,
    // the size set on this one, and follows a resize (the kernel's answers, through `stty`).
    let mut terminal = Terminal::new(30, 100);
    let before = terminal.settings();
    let mut podlab = Session(terminal.spawn(root.command(&["exec", "-it", "web", "--", "sh"])));
    terminal.expect("# ");
    let during = terminal.settings();
    assert!(
        !during.local_flags.contains(LocalFlags::ICANON),
        "the user's terminal is in raw mode during the session"
    );
    let tty = terminal.shell("tty");
    assert!(tty.contains("\n/dev/pts/"), "{tty}");
    assert!(
        terminal.shell("stty size").contains("\n30 100"),
        "stty size inside is the terminal's"
    );
    terminal.resize(40, 120);
    // SIGWINCH to podlab, a size on the resize stream, TIOCSWINSZ there: ask until it arrived.
    let resized = (0..100).any(|_| terminal.shell("stty size").contains("\n40 120"));
    assert!(resized, "stty size follows the resize");
    terminal.send(b"exit 3\r");
    assert_eq!(
        wait_exit(&mut podlab.0),
        3,
        "exit 3 inside is podlab's status"
    );
    let after = terminal.settings();
    assert!(
        after.local_flags == before.local_flags && after.input_flags == before.input_flags,
        "the terminal's settings are back"
    );

    // attach -i to a container with stdin (a pty without raw mode: no tty in the container).
    let mut terminal = Terminal::new(25, 90);
    let mut podlab = Session(terminal.spawn(root.command(&["attach", "-i", "talk", "-c", "echo"])));
    terminal.expect("try pressing enter.");
    // (The pty echoes the line itself; only the container writes `got-`.)
    terminal.send(b"hello\r");
    terminal.expect("got-hello");
    terminal.send(b"\x03");
    assert_eq!(wait_exit(&mut podlab.0), 0, "Ctrl-C ends an attach with 0");
    let talk = crate::pods::container(&root.pod("talk").unwrap(), "echo");
    assert!(
        talk.state.and_then(|s| s.running).is_some(),
        "Ctrl-C ended the attach, not the container"
    );

    // attach -it to the console: the shell's terminal takes this one's size (the resize
    // stream, applied to the container's console), and Ctrl-P Ctrl-Q detach.
    let mut terminal = Terminal::new(25, 90);
    let before = terminal.settings();
    let mut podlab = Session(terminal.spawn(root.command(&["attach", "-it", "talk", "-c", "sh"])));
    terminal.expect("try pressing enter.");
    terminal.send(b"\r");
    terminal.expect("# ");
    let resized = (0..100).any(|_| terminal.shell("stty size").contains("\n25 90"));
    assert!(resized, "stty size in the attached shell is the terminal's");
    terminal.send(b"\x10\x11");
    assert_eq!(wait_exit(&mut podlab.0), 0, "a detach is no failure");
    terminal.expect("Detached from container sh: it keeps running.");
    let after = terminal.settings();
    assert!(
        after.local_flags == before.local_flags && after.input_flags == before.input_flags,
        "the terminal's settings are back"
    );
    let sh = crate::pods::container(&root.pod("talk").unwrap(), "sh");
    assert!(
        sh.state.and_then(|s| s.running).is_some(),
        "the detach left the shell running"
    );

    debug_web(&root, true, &|| server.log());

    // `run -i` (no --rm): the agent runs the pod through the CRI runtime, and this command
    // attaches there (it used to look in this root's runtime, which has no such container):
    // its stdin in, its output out, and its exit code once the runtime has it.
    let out = with_stdin(
        &root,
        root.command(&[
            "run",
            "once",
            "-i",
            "--restart=Never",
            "--image",
            "busybox",
            "--image-pull-policy",
            "IfNotPresent",
            "--",
            "sh",
            "-c",
            "read v; echo ran-$v; exit 4",
        ]),
        "x\n",
    );
    assert_eq!(out.code, Some(4), "{out:?}\nserver log: {}", server.log());
    assert!(out.stdout.contains("ran-x"), "{out:?}");

    delete_pods(&root, &["web", "talk", "once"]);
    let runtime = server.runtime();
    assert!(
        wait_until(LIMIT, || runtime.list_pod_sandboxes().unwrap().is_empty()),
        "the server still has sandboxes: {:?}",
        runtime.list_pod_sandboxes()
    );
    pod_folders_gone(&root);
    root.assert_nothing_left();
}

/// A runtime endpoint that is not a unix socket, or where nothing answers, stops the agent
/// with the reason, as kubelet refuses to start without its runtime.
#[test]
fn an_endpoint_where_no_runtime_answers_is_refused() {
    let root = Root::new("node-cri-none");
    let socket = root.dir.join("nothing.sock");
    let out = root.run(&[
        "node",
        "--runtime-endpoint",
        &format!("unix://{}", socket.display()),
    ]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("connecting to the CRI runtime at")
            && out.stderr.contains(&socket.display().to_string()),
        "{}",
        out.stderr
    );
    let out = root.run(&["node", "--runtime-endpoint", "tcp://127.0.0.1:1"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("a unix socket is needed"),
        "{}",
        out.stderr
    );
}

/// An OCI image archive (`oci-archive`, as `ctr images import` takes it) of one layer: `files`
/// (path, mode, bytes) and `symlinks` (path, target), with `config` as the image config's
/// `config`, tagged `tag`.
fn oci_archive(
    dir: &Path,
    files: &[(&str, u32, Vec<u8>)],
    symlinks: &[(String, &str)],
    config: serde_json::Value,
    tag: &str,
) -> PathBuf {
    use podlab_image::Digest;
    let layout = dir.join(format!("layout-{tag}"));
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let blob = |bytes: &[u8], media_type: &str| {
        let digest = Digest::of(bytes);
        std::fs::write(layout.join("blobs/sha256").join(digest.hex()), bytes).unwrap();
        serde_json::json!({"mediaType": media_type, "digest": digest.to_string(), "size": bytes.len()})
    };
    let mut layer = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h.set_size(size);
        h
    };
    for dir in ["bin/", "etc/", "tmp/", "proc/", "sys/", "dev/"] {
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        layer.append_data(&mut h, dir, &[][..]).unwrap();
    }
    for (path, mode, bytes) in files {
        let mut h = header(tar::EntryType::Regular, *mode, bytes.len() as u64);
        layer.append_data(&mut h, path, &bytes[..]).unwrap();
    }
    for (path, target) in symlinks {
        let mut h = header(tar::EntryType::Symlink, 0o777, 0);
        layer.append_link(&mut h, path, target).unwrap();
    }
    let layer = layer.into_inner().unwrap();
    let diff_id = Digest::of(&layer).to_string();
    let layer = blob(&layer, "application/vnd.oci.image.layer.v1.tar");
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    });
    let config = blob(
        &serde_json::to_vec(&config).unwrap(),
        "application/vnd.oci.image.config.v1+json",
    );
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config, "layers": [layer],
    });
    let mut manifest = blob(
        &serde_json::to_vec(&manifest).unwrap(),
        "application/vnd.oci.image.manifest.v1+json",
    );
    manifest["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": tag});
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [manifest]}))
            .unwrap(),
    )
    .unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let archive = dir.join(format!("image-{tag}.tar"));
    let mut tar = tar::Builder::new(std::fs::File::create(&archive).unwrap());
    tar.append_dir_all(".", &layout).unwrap();
    tar.into_inner().unwrap();
    archive
}

/// A private containerd 1.6 with its CRI plugin on: root, state (its netns pins too), socket,
/// CNI config and IPAM below one folder, a host-only bridge of its own (no NAT, no route out),
/// the sandbox image and busybox imported with `ctr`. On drop: stopped, its shims killed by
/// pid, its mounts detached, its bridge and the pod cgroups kubelet's layout made removed.
struct Containerd {
    dir: SharedDir,
    child: Option<Child>,
    /// `kubepods` folders of the cgroup hierarchies that were not there before.
    new_kubepods: Vec<PathBuf>,
}

const CONTAINERD_BRIDGE: &str = "podlabcd0";

impl Containerd {
    /// None (the test skipped, with the reason recorded) when containerd cannot run here.
    fn start(test: &str) -> Option<Containerd> {
        let cni = ["/usr/lib/cni", "/opt/cni/bin"]
            .into_iter()
            .map(PathBuf::from)
            .find(|d| d.join("bridge").is_file() && d.join("host-local").is_file());
        let missing: Vec<&str> = ["containerd", "ctr", "runc", "containerd-shim-runc-v2"]
            .into_iter()
            .filter(|p| !crate::pods::installed(p))
            .collect();
        if !missing.is_empty() || cni.is_none() || !Path::new("/bin/busybox").is_file() {
            crate::support::record_skip(
                test,
                &format!(
                    "containerd cannot run here: missing {missing:?}{}{} (apt-get install containerd runc containernetworking-plugins busybox-static)",
                    if cni.is_none() { ", the CNI bridge and host-local plugins" } else { "" },
                    if Path::new("/bin/busybox").is_file() { "" } else { ", /bin/busybox" },
                ),
            );
            return None;
        }
        let cni = cni.unwrap();
        let dir = SharedDir::new("podlab-node-containerd", 0o755);
        let d = dir.path();
        let new_kubepods = std::fs::read_dir("/sys/fs/cgroup")
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path().join("kubepods"))
                    .filter(|p| !p.exists())
                    .collect()
            })
            .unwrap_or_default();
        std::fs::create_dir_all(d.join("cni/net.d")).unwrap();
        std::fs::write(
            d.join("cni/net.d/10-podlab-containerd.conflist"),
            serde_json::json!({
                "cniVersion": "0.4.0", "name": "podlab-containerd",
                "plugins": [{"type": "bridge", "bridge": CONTAINERD_BRIDGE, "isGateway": true,
                    "ipMasq": false,
                    "ipam": {"type": "host-local", "dataDir": d.join("cni/ipam"),
                        "ranges": [[{"subnet": "10.99.77.0/24"}]]}}]
            })
            .to_string(),
        )
        .unwrap();
        let socket = d.join("containerd.sock");
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
plugin_dir = ""
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{d}/cni/net.d"
    max_conf_num = 1
"#,
            d = d.display(),
            sock = socket.display(),
            cni = cni.display(),
        );
        std::fs::write(d.join("config.toml"), config).unwrap();
        let child = std::process::Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("containerd.log")).unwrap())
            .spawn()
            .unwrap();
        let this = Containerd {
            dir,
            child: Some(child),
            new_kubepods,
        };
        let endpoint = this.endpoint();
        let up = wait_until(Duration::from_secs(30), || {
            socket.exists()
                && podlab_kubelet::node::remote::RemoteRuntime::connect(&endpoint).is_ok()
        });
        assert!(
            up,
            "containerd did not answer on {}: {}",
            socket.display(),
            this.log()
        );
        // The sandbox image: podlab-pause as the entrypoint; and busybox.
        let pause = std::fs::read(crate::support::pause_binary()).unwrap();
        let archive = oci_archive(
            this.dir.path(),
            &[("pause", 0o755, pause)],
            &[],
            serde_json::json!({"Entrypoint": ["/pause"]}),
            "3.9",
        );
        this.import(&archive, "registry.k8s.io/pause");
        let busybox = std::fs::read("/bin/busybox").unwrap();
        let applets: Vec<(String, &str)> = [
            "sh", "echo", "hostname", "sleep", "touch", "cat", "stty", "tty",
        ]
        .into_iter()
        .map(|a| (format!("bin/{a}"), "busybox"))
        .collect();
        let archive = oci_archive(
            this.dir.path(),
            &[("bin/busybox", 0o755, busybox)],
            &applets,
            serde_json::json!({"Cmd": ["sh"], "Env": ["PATH=/bin"]}),
            "latest",
        );
        this.import(&archive, "docker.io/library/busybox");
        this.child.as_ref()?;
        Some(this)
    }

    fn endpoint(&self) -> String {
        format!(
            "unix://{}",
            self.dir.path().join("containerd.sock").display()
        )
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    fn ctr(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("ctr")
            .arg("--address")
            .arg(self.dir.path().join("containerd.sock"))
            .args(["-n", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn import(&self, archive: &Path, base: &str) {
        let out = self.ctr(&[
            "images",
            "import",
            "--base-name",
            base,
            &archive.display().to_string(),
        ]);
        assert!(out.status.success(), "ctr images import: {out:?}");
        let listed =
            String::from_utf8_lossy(&self.ctr(&["images", "ls", "-q"]).stdout).into_owned();
        assert!(
            listed.lines().any(|l| l.starts_with(base)),
            "ctr images ls: {listed}"
        );
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let d = self.dir.path().to_path_buf();
        let socket = d.join("containerd.sock");
        if let Ok(remote) = podlab_kubelet::node::remote::RemoteRuntime::connect(&self.endpoint()) {
            use podlab_kubelet::node::runtime_service::RuntimeService;
            for sandbox in remote.list_pod_sandboxes().unwrap_or_default() {
                let _ = remote.stop_pod_sandbox(&sandbox.id);
                let _ = remote.remove_pod_sandbox(&sandbox.id);
            }
        }
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the containerd this test spawned and has not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
        // Its shims, by the socket path they were given.
        let needle = format!("-address {}", socket.display());
        for (pid, args) in processes_with_args() {
            if args.contains(&needle) {
                // SAFETY: kill(2) on a shim of the containerd this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if let Ok(mounts) = podlab_ns::mnt::mounts_below(&d) {
            let mut points: Vec<PathBuf> = mounts.into_iter().map(|m| m.mount_point).collect();
            points.sort();
            for point in points.iter().rev() {
                let _ = nix::mount::umount2(point.as_path(), nix::mount::MntFlags::MNT_DETACH);
            }
        }
        if let Ok(mut nl) = podlab_ns::net::Netlink::open() {
            if nl.link_index(CONTAINERD_BRIDGE).ok().flatten().is_some() {
                let _ = nl.delete_link(CONTAINERD_BRIDGE);
            }
        }
        for kubepods in &self.new_kubepods {
            remove_cgroup_tree(kubepods);
        }
    }
}

/// rmdir of a cgroup folder and every folder below it, deepest first.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.filter_map(|e| e.ok()) {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The same pods through containerd's CRI plugin: kubelet's rules driving a real containerd
/// give what they give in process (exit 3 and its output in the log file, Ready by an exec
/// probe), `exec -i` and `-it` stream through containerd's streaming server, and the processes are
/// containerd's (their parent a `containerd-shim-runc-v2`).
#[test]
fn the_agent_runs_the_same_pods_through_containerds_cri() {
    let Some(containerd) = Containerd::start(module_path!()) else {
        return;
    };
    let root = Root::new("node-containerd")
        .with_env("PODLAB_NODE_RUNTIME_ENDPOINT", &containerd.endpoint());
    let (seen, web) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_both(&root)))
        .unwrap_or_else(|e| {
            eprintln!("containerd's log: {}", containerd.log());
            std::panic::resume_unwind(e)
        });
    assert_eq!(seen, Seen::expected());
    // `exec -i` streams through containerd's streaming server (SPDY, as crictl's does): stdin
    // and its end reach `cat`, and an exit code comes back through the error stream.
    let out = with_stdin(
        &root,
        root.command(&["exec", "-i", "web", "--", "cat"]),
        "hello\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "hello\n", "{out:?}");
    let out = with_stdin(
        &root,
        root.command(&["exec", "-i", "web", "--", "sh", "-c", "read x; exit 7"]),
        "line\n",
    );
    assert_eq!(out.code, Some(7), "{out:?}");
    // `exec -it`: containerd's pty has the size of the terminal podlab runs on.
    let mut terminal = crate::terminals::Terminal::new(30, 100);
    let mut podlab = Session(terminal.spawn(root.command(&["exec", "-it", "web", "--", "sh"])));
    terminal.expect("# ");
    let size = terminal.shell("stty size");
    assert!(size.contains("\n30 100"), "{size}");
    terminal.send(b"exit 3\r");
    assert_eq!(crate::terminals::wait_exit(&mut podlab.0), 3);
    // `podlab debug` through containerd. Not its `-i` (an Attach): in one of two runs here,
    // containerd 1.6 ended that session at stdin's end before the container's answer came back
    // (exit 0, no output).
    debug_web(&root, false, &|| containerd.log());
    // web's container is a child of a containerd shim.
    let remote =
        podlab_kubelet::node::remote::RemoteRuntime::connect(&containerd.endpoint()).unwrap();
    assert!(
        remote.runtime_name.contains("containerd"),
        "{}",
        remote.runtime_name
    );
    let id = container(&web, "app").container_id.unwrap();
    assert!(id.starts_with("podlab://"), "{id}");
    // (Other tests' pods may run the same manifest: one `sleep 1000` is a shim's child.)
    let parent_of = |pid: i32| -> String {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .unwrap_or("0");
        std::fs::read_to_string(format!("/proc/{ppid}/comm")).unwrap_or_default()
    };
    let parents: Vec<String> = processes_with_args()
        .into_iter()
        .filter(|(_, args)| args == "sleep 1000")
        .map(|(pid, _)| parent_of(pid))
        .collect();
    assert!(
        parents.iter().any(|p| p.starts_with("containerd-shim")),
        "no sleep 1000 is a containerd shim's child: their parents are {parents:?}"
    );

    delete_both(&root);
    use podlab_kubelet::node::runtime_service::RuntimeService;
    assert!(
        wait_until(LIMIT, || remote
            .list_pod_sandboxes()
            .is_ok_and(|s| s.is_empty())),
        "containerd still has sandboxes: {:?}",
        remote.list_pod_sandboxes()
    );
    pod_folders_gone(&root);
    root.assert_nothing_left();
}

/// Every process with its command line (arguments joined by spaces).
fn processes_with_args() -> Vec<(i32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<i32>().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some((pid, args.trim_end().to_string()))
        })
        .collect()
}
