//! Test support: a tiny fake Kubernetes API server on loopback that serves the fixtures, so that
//! the real `kubectl get` (discovery, List wrapping, printers) can be run against the very objects
//! podlab-print renders; plus temp-dir and kubectl helpers. Everything is removed on drop.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::{json, Value};

/// kubectl, or `None` (and the reason printed) when it is not installed.
pub fn kubectl_path() -> Option<PathBuf> {
    let candidates = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("kubectl"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let found = std::iter::once(PathBuf::from("/usr/bin/kubectl"))
        .chain(candidates)
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!("SKIP: kubectl is not installed; the kubectl comparisons did not run");
    }
    found
}

pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

pub fn pods() -> Vec<Value> {
    fixture("pods.json").as_array().unwrap().clone()
}

pub fn replicasets() -> Vec<Value> {
    vec![fixture("replicaset.json")]
}

pub fn events() -> Vec<Value> {
    fixture("events.json").as_array().unwrap().clone()
}

pub fn pod(name: &str) -> Value {
    pods()
        .into_iter()
        .find(|p| p["metadata"]["name"] == name)
        .unwrap()
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "podlab-print-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a command printed.
#[derive(Debug, Clone, PartialEq)]
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
    pub success: bool,
}

/// The fake API server: `/api`, `/apis`, discovery of pods, events and apps/v1 replicasets, and
/// list/get of the fixtures in namespace `default`.
pub struct ApiServer {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    home: TempDir,
    kubectl: PathBuf,
}

/// The columns of the API server's pod table: (name, priority); priority 1 shows with `-o wide`.
pub const POD_COLUMNS: &[(&str, u8)] = &[
    ("Name", 0),
    ("Ready", 0),
    ("Status", 0),
    ("Restarts", 0),
    ("Age", 0),
    ("IP", 1),
    ("Node", 1),
    ("Nominated Node", 1),
    ("Readiness Gates", 1),
];

/// The cells of a pod's table row (a fixed AGE, as the fixtures do not age).
pub fn pod_cells(pod: &Value) -> Vec<String> {
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = statuses.iter().filter(|s| s["ready"] == true).count();
    let total = pod["spec"]["containers"].as_array().map_or(0, |c| c.len());
    let restarts: i64 = statuses
        .iter()
        .filter_map(|s| s["restartCount"].as_i64())
        .sum();
    let s = |v: &Value| v.as_str().unwrap_or("<none>").to_string();
    vec![
        s(&pod["metadata"]["name"]),
        format!("{ready}/{total}"),
        s(&pod["status"]["phase"]),
        restarts.to_string(),
        "3d".into(),
        s(&pod["status"]["podIP"]),
        s(&pod["spec"]["nodeName"]),
        "<none>".into(),
        "<none>".into(),
    ]
}

/// A `meta.k8s.io/v1` Table of the pods, as the API server answers `Accept: ...;as=Table`.
fn pod_table(pods: &[Value]) -> Value {
    let columns: Vec<Value> = POD_COLUMNS
        .iter()
        .map(|(name, priority)| json!({"name": name, "type": "string", "format": "", "description": "", "priority": priority}))
        .collect();
    let rows: Vec<Value> = pods
        .iter()
        .map(|p| json!({"cells": pod_cells(p), "object": p}))
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "42"},
        "columnDefinitions": columns, "rows": rows})
}

fn route(path: &str, table: bool, pods: &[Value], rss: &[Value], evs: &[Value]) -> (u16, Value) {
    let path = path.split('?').next().unwrap_or("");
    if table && (path == "/api/v1/namespaces/default/pods" || path == "/api/v1/pods") {
        return (200, pod_table(pods));
    }
    match path {
        "/version" => {
            return (
                200,
                json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0"}),
            );
        }
        "/api" => {
            return (
                200,
                json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
            );
        }
        "/apis" => {
            return (
                200,
                json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{"name": "apps",
                "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]}),
            );
        }
        "/api/v1" => {
            return (
                200,
                json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["get", "list"], "shortNames": ["po"]},
                {"name": "events", "singularName": "event", "namespaced": true, "kind": "Event", "verbs": ["get", "list"], "shortNames": ["ev"]}]}),
            );
        }
        "/apis/apps/v1" => {
            return (
                200,
                json!({"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": [
                {"name": "replicasets", "singularName": "replicaset", "namespaced": true, "kind": "ReplicaSet", "verbs": ["get", "list"], "shortNames": ["rs"]}]}),
            );
        }
        _ => {}
    }
    let collections: [(&str, &[Value], &str); 3] = [
        ("/api/v1/namespaces/default/pods", pods, "PodList"),
        ("/api/v1/namespaces/default/events", evs, "EventList"),
        (
            "/apis/apps/v1/namespaces/default/replicasets",
            rss,
            "ReplicaSetList",
        ),
    ];
    for (prefix, items, list_kind) in collections {
        if path == prefix {
            let api_version = if prefix.starts_with("/apis/apps") {
                "apps/v1"
            } else {
                "v1"
            };
            return (
                200,
                json!({"kind": list_kind, "apiVersion": api_version,
                "metadata": {"resourceVersion": "42"}, "items": items}),
            );
        }
        if let Some(name) = path.strip_prefix(&format!("{prefix}/")) {
            if let Some(item) = items.iter().find(|i| i["metadata"]["name"] == name) {
                return (200, item.clone());
            }
        }
    }
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
        "code": 404, "message": format!("{path} not found")}),
    )
}

fn serve(mut stream: TcpStream, pods: &[Value], rss: &[Value], evs: &[Value]) {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&request);
    let path = text.split_whitespace().nth(1).unwrap_or("/");
    let table = text
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("accept:") && l.contains("as=Table"));
    let (code, body) = route(path, table, pods, rss, evs);
    let body = serde_json::to_vec(&body).unwrap();
    let reason = if code == 200 { "OK" } else { "Not Found" };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
}

impl ApiServer {
    pub fn start(kubectl: PathBuf) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let (pods, rss, evs) = (pods(), replicasets(), events());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(s) = stream {
                    serve(s, &pods, &rss, &evs);
                }
            }
        });
        ApiServer {
            port,
            stop,
            thread: Some(thread),
            home: TempDir::new("kubectl-home"),
            kubectl,
        }
    }

    /// `kubectl --server ... -n default ARGS`.
    pub fn kubectl(&self, args: &[&str]) -> Printed {
        let server = format!("http://127.0.0.1:{}", self.port);
        let cache = self.home.0.join("cache");
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--server")
            .arg(&server)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["-n", "default"])
            .args(args);
        run(cmd, &self.home, None)
    }

    /// `kubectl annotate --local -f - x- ARGS` with `stdin` as the object.
    pub fn annotate_local(&self, stdin: &str, args: &[&str]) -> Printed {
        let mut cmd = Command::new(&self.kubectl);
        cmd.args(["annotate", "--local", "-f", "-", "x-"])
            .args(args);
        run(cmd, &self.home, Some(stdin))
    }

    /// Any other local kubectl command.
    pub fn kubectl_local(&self, args: &[&str], stdin: Option<&str>) -> Printed {
        let mut cmd = Command::new(&self.kubectl);
        cmd.args(args);
        run(cmd, &self.home, stdin)
    }
}

fn run(mut cmd: Command, home: &TempDir, stdin: Option<&str>) -> Printed {
    cmd.env("HOME", &home.0)
        .env("KUBECONFIG", home.0.join("no-kubeconfig"))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run kubectl");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    Printed {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        success: out.status.success(),
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How kubectl prints an error: `error: MSG` and a newline unless MSG ends with one.
pub fn kubectl_error(msg: &str) -> String {
    let mut s = format!("error: {msg}");
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// Collects mismatches so that one run shows all of them.
#[derive(Default)]
pub struct Report {
    pub checked: usize,
    pub failures: Vec<String>,
}

impl Report {
    pub fn compare(&mut self, case: &str, ours: &Printed, theirs: &Printed, unordered: bool) {
        self.checked += 1;
        let same_out = if unordered {
            let words = |s: &str| {
                let mut w: Vec<String> = s.split_whitespace().map(str::to_string).collect();
                w.sort();
                w
            };
            words(&ours.stdout) == words(&theirs.stdout)
        } else {
            ours.stdout == theirs.stdout
        };
        let mut problems = Vec::new();
        if !same_out {
            problems.push(format!(
                "stdout differs\n  kubectl: {:?}\n  podlab:  {:?}",
                theirs.stdout, ours.stdout
            ));
        }
        if ours.success != theirs.success {
            problems.push(format!(
                "exit differs: kubectl success={} podlab success={}\n  kubectl stderr: {:?}\n  podlab stderr:  {:?}",
                theirs.success, ours.success, theirs.stderr, ours.stderr
            ));
        } else if !theirs.stderr.starts_with('F') && ours.stderr != theirs.stderr {
            // (An `F...` line is klog's fatal log with a timestamp: only its outcome is compared.)
            problems.push(format!(
                "stderr differs\n  kubectl: {:?}\n  podlab:  {:?}",
                theirs.stderr, ours.stderr
            ));
        }
        if !problems.is_empty() {
            self.failures
                .push(format!("case {case}:\n{}", problems.join("\n")));
        }
    }

    pub fn finish(self, what: &str) {
        eprintln!("{what}: {} cases compared with kubectl", self.checked);
        assert!(
            self.failures.is_empty(),
            "{} of {} {what} cases differ from kubectl:\n\n{}",
            self.failures.len(),
            self.checked,
            self.failures.join("\n\n")
        );
    }
}
