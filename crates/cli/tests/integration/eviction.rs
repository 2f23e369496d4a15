//! kubelet's eviction manager against the kernel: an emptyDir written past its `sizeLimit`, a
//! container's writable layer written past its `limits.ephemeral-storage`, and a pod's disk
//! emptyDir written past its containers' total limit each get the pod evicted in kubelet's
//! words, and every process of it gone.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::pods::{wait_for_running_container, Root};
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(60);

/// The container waits for the test's word (a file the test makes in the volume's host
/// folder), so that its pid is known before it writes 2 MiB into a 1 MiB emptyDir.
const GREEDY: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec:
  terminationGracePeriodSeconds: 30
  volumes: [{name: scratch, emptyDir: {sizeLimit: 1Mi}}]
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "until [ -e /scratch/go ]; do sleep 0.1; done; dd if=/dev/urandom of=/scratch/big bs=65536 count=32; exec sleep 1000"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
"#;

#[test]
fn an_empty_dir_past_its_size_limit_gets_its_pod_evicted_in_kubelets_words() {
    let root = Root::new("evict").with_env("PODLAB_NODE_EVICTION_PERIOD", "200ms");
    evicted_in_kubelets_words(
        &root,
        GREEDY,
        "greedy",
        "app",
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ",
        |volume, _upper| volume.join("big"),
    );
}

/// Two containers limited to 1Mi and 8Mi (the pod's total is 9Mi): the first one writes 2 MiB
/// into its own root (its overlay's upper folder), past its limit but not the pod's.
const WRITER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  terminationGracePeriodSeconds: 30
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "until [ -e /scratch/go ]; do sleep 0.1; done; dd if=/dev/urandom of=/big bs=65536 count=32; exec sleep 1000"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
    resources: {limits: {ephemeral-storage: 1Mi}}
  - name: idle
    image: busybox
    command: [sleep, "1000"]
    resources: {limits: {ephemeral-storage: 8Mi}}
"#;

#[test]
fn a_container_written_past_its_ephemeral_storage_limit_gets_its_pod_evicted() {
    let root = Root::new("evictc").with_env("PODLAB_NODE_EVICTION_PERIOD", "200ms");
    evicted_in_kubelets_words(
        &root,
        WRITER,
        "writer",
        "app",
        "Container app exceeded its local ephemeral storage limit \"1Mi\". ",
        |_volume, upper| upper.join("big"),
    );
}

/// One container limited to 1Mi writes 2 MiB into a disk emptyDir without a `sizeLimit`: the
/// pod's ephemeral storage (the containers' layers and logs, its disk volumes) passes the
/// total of its containers' limits.
const FILLER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: filler}
spec:
  terminationGracePeriodSeconds: 30
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "until [ -e /scratch/go ]; do sleep 0.1; done; dd if=/dev/urandom of=/scratch/big bs=65536 count=32; exec sleep 1000"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
    resources: {limits: {ephemeral-storage: 1Mi}}
"#;

#[test]
fn a_pod_written_past_its_containers_total_ephemeral_storage_limit_is_evicted() {
    let root = Root::new("evictp").with_env("PODLAB_NODE_EVICTION_PERIOD", "200ms");
    evicted_in_kubelets_words(
        &root,
        FILLER,
        "filler",
        "app",
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ",
        |volume, _upper| volume.join("big"),
    );
}

/// Applies `manifest`, waits for its container `writer` to run, lets it write (a `go` file in
/// its `scratch` emptyDir), and checks the eviction that follows: the bytes are on the disk
/// (`written` names the file in the host's folders: the volume's, the container's upper
/// folder), the pod Failed with reason `Evicted` and `message`, a Warning event, no
/// `DisruptionTarget` condition, every process gone, nothing restarted, and everything
/// removed after its deletion.
fn evicted_in_kubelets_words(
    root: &Root,
    manifest: &str,
    name: &str,
    writer: &str,
    message: &str,
    written: impl Fn(&Path, &Path) -> PathBuf,
) {
    let out = root.apply(manifest);
    assert_eq!(out.code, Some(0), "{out:?}");
    wait_for_running_container(root, name);
    let mut record = None;
    assert!(
        wait_until(LIMIT, || {
            record = root
                .runtime()
                .list_containers(&Default::default())
                .unwrap_or_default()
                .into_iter()
                .find(|c| {
                    c.metadata.name == writer && c.state == podlab_runtime::ContainerState::Running
                });
            record.is_some()
        }),
        "{writer} does not run"
    );
    let record = record.unwrap();
    let pid = record.pid.unwrap();
    let upper = root
        .runtime()
        .layout()
        .sandbox(&record.sandbox_id)
        .container(&record.id)
        .upper();
    let uid = root.pod(name).unwrap().metadata.uid.unwrap();
    let volume = root
        .dir
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/scratch");
    std::fs::write(volume.join("go"), b"").unwrap();

    let pod = root.wait_pod(name, "evicted", LIMIT, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    });
    // The file system holds what the container wrote: 2 MiB in blocks, past the 1 MiB limit.
    let file = written(&volume, &upper);
    let blocks = std::fs::metadata(&file).map(|m| m.blocks() * 512);
    assert!(
        blocks.as_ref().is_ok_and(|b| *b >= 2 << 20),
        "{}: {blocks:?}",
        file.display()
    );
    let status = pod.status.unwrap();
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    assert_eq!(status.message.as_deref(), Some(message));
    // kubelet's local-storage evictions pass no condition (a node-pressure one would).
    assert!(
        !status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DisruptionTarget"),
        "{:?}",
        status.conditions
    );
    let events = root.ok(&["get", "events"]);
    assert!(
        events.contains("Warning   Evicted") && events.contains(message.trim_end()),
        "{events}"
    );

    // The kernel's view: the container's process is gone (killed, not left to its 30 s
    // grace), its sandbox is stopped, and nothing is started again.
    assert!(
        wait_until(LIMIT, || !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))),
        "the container's process {pid} still runs"
    );
    assert!(
        wait_until(LIMIT, || root
            .runtime()
            .list_pod_sandboxes()
            .unwrap()
            .iter()
            .all(
                |s| s.state == podlab_runtime::SandboxState::NotReady && s.pause_pid.is_none()
            )),
        "the sandbox was not stopped"
    );
    // The final status shows the containers terminated, never restarted.
    let pod = root.wait_pod(name, "stopped", LIMIT, |p| {
        let statuses = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref());
        statuses.is_some_and(|s| {
            s.iter()
                .all(|c| c.state.as_ref().is_some_and(|st| st.terminated.is_some()))
        })
    });
    let status = pod.status.unwrap();
    assert_eq!(
        (status.reason.as_deref(), status.message.as_deref()),
        (Some("Evicted"), Some(message)),
        "kept with the final states"
    );
    let statuses = status.container_statuses.unwrap();
    assert!(
        statuses.iter().all(|c| c.restart_count == 0),
        "{statuses:?}"
    );
    root.ok(&["delete", "pod", name]);
    // A Failed pod leaves the store at once (the API server's grace period 0 for a terminal
    // pod); the agent then removes what it left on the node.
    let empty = |folder: &str| {
        std::fs::read_dir(root.dir.join(folder)).map_or(true, |mut d| d.next().is_none())
    };
    assert!(
        wait_until(LIMIT, || empty("sandboxes")
            && empty("pods")
            && empty("logs")),
        "the evicted pod's sandbox, volumes and logs were not removed"
    );
    root.assert_nothing_left();
}
