//! Volumes and the state root against the kernel: modes and owners from `stat`, what another
//! host user can open (tried as `nobody`), tmpfs sizes from `statfs`, mounts from mountinfo.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::pods::{running, Root};
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(60);
const NOBODY: u32 = 65534;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `program args` run as uid/gid 65534 with no supplementary groups: (succeeded, output).
fn as_nobody(program: &str, args: &[&Path]) -> (bool, String) {
    use std::os::unix::process::CommandExt;
    let out = Command::new(program)
        .args(args)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every file below `dir` named `name`.
fn find(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && !kind.is_symlink() {
            if name == path.file_name().unwrap().to_str().unwrap() {
                found.push(path.clone());
            }
            found.extend(find(&path, name));
        } else if path.file_name().and_then(|n| n.to_str()) == Some(name) {
            found.push(path);
        }
    }
    found
}

const SECRETS_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: secrets}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    env: [{name: TOKEN, value: env-value-s3cr3t}]
    command: [sh, -c, "echo log-line-s3cr3t; echo upper-s3cr3t > /upper-file; echo volume-s3cr3t > /data/f; exec sleep 1000"]
    volumeMounts: [{name: data, mountPath: /data}]
"#;

/// Regression (issue 14): the state root was readable by every host user: container logs, env
/// values, other containers' upper dirs, emptyDir folders 0777 and reachable on the host.
#[test]
fn state_root_logs_env_values_and_upper_dirs_are_unreadable_by_other_users() {
    let root = Root::new("vol-private");
    let out = root.apply(SECRETS_POD);
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("secrets", "running", LIMIT, running);
    let uid = pod.metadata.uid.clone().unwrap();
    let logs = root.dir.join("logs").join(format!("default_secrets_{uid}"));
    let log = logs.join("app").join("0.log");
    let upper_file = || find(&root.dir.join("sandboxes"), "upper-file");
    assert!(
        wait_until(LIMIT, || {
            std::fs::read_to_string(&log).is_ok_and(|t| t.contains("log-line-s3cr3t"))
                && !upper_file().is_empty()
        }),
        "the container's log and upper file never appeared"
    );
    let records = find(&root.dir.join("sandboxes"), "container.json");
    let record = records
        .iter()
        .find(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("env-value-s3cr3t")))
        .expect("a container record holding the env value");
    let upper = find(&root.dir.join("sandboxes"), "upper");
    assert_eq!(upper.len(), 1, "{upper:?}");
    let pod_dir = root.dir.join("pods").join(&uid);
    let empty_dir = pod_dir.join("volumes/kubernetes.io~empty-dir/data");

    // The modes, as containerd and kubelet keep them.
    for (path, expected) in [
        (root.dir.join("store"), 0o700),
        (root.dir.join("sandboxes"), 0o700),
        (root.dir.join("images"), 0o700),
        (root.dir.join("logs"), 0o700),
        (logs.clone(), 0o750),
        (logs.join("app"), 0o750),
        (log.clone(), 0o640),
        (record.clone(), 0o600),
        (root.dir.join("node.log"), 0o600),
        (root.dir.join("pods"), 0o750),
        (pod_dir.clone(), 0o750),
        (pod_dir.join("volumes"), 0o750),
        (empty_dir.clone(), 0o777),
    ] {
        assert_eq!(mode(&path), expected, "mode of {}", path.display());
        assert_eq!(
            std::fs::metadata(&path).unwrap().uid(),
            0,
            "{}",
            path.display()
        );
    }

    // What another host user gets: nothing.
    let store_files = find(&root.dir.join("store"), "secrets.json");
    assert!(!store_files.is_empty(), "the pod's object in the store");
    let files = [
        log.as_path(),
        record.as_path(),
        store_files[0].as_path(),
        &upper_file()[0],
        &empty_dir.join("f"),
    ];
    for file in files {
        let (ok, text) = as_nobody("cat", &[file]);
        assert!(!ok, "nobody read {}: {text}", file.display());
        assert!(
            text.contains("Permission denied"),
            "{}: {text}",
            file.display()
        );
        assert!(!text.contains("s3cr3t"), "{text}");
    }
    for dir in [&upper[0], &empty_dir, &logs, &pod_dir] {
        let (ok, text) = as_nobody("ls", &[dir.as_path()]);
        assert!(!ok, "nobody listed {}: {text}", dir.display());
        assert!(
            text.contains("Permission denied"),
            "{}: {text}",
            dir.display()
        );
    }
    // And root (the node's log readers) still reads them.
    assert!(std::fs::read_to_string(empty_dir.join("f"))
        .unwrap()
        .contains("volume-s3cr3t"));
    root.ok(&["delete", "pod", "secrets"]);
    root.assert_nothing_left();
}

/// Issue 14: a state root that an older podlab made 0755, with its folders and a log left
/// readable in them, is made private by the next podlab command (as containerd chmods the
/// folders it finds at start since CVE-2021-41103).
#[test]
fn a_state_root_an_older_podlab_left_readable_is_made_private_by_the_next_command() {
    let root = Root::new("vol-old-root");
    let logs = root.dir.join("logs");
    let old_log = logs.join("default_old_1/app/0.log");
    std::fs::create_dir_all(old_log.parent().unwrap()).unwrap();
    std::fs::create_dir_all(root.dir.join("store")).unwrap();
    std::fs::create_dir_all(root.dir.join("sandboxes")).unwrap();
    std::fs::write(&old_log, "old-log-s3cr3t").unwrap();
    let folders = [
        root.dir.clone(),
        root.dir.join("store"),
        root.dir.join("sandboxes"),
        logs.clone(),
    ];
    for dir in folders
        .iter()
        .chain([&logs.join("default_old_1"), &logs.join("default_old_1/app")])
    {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&old_log, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, text) = as_nobody("cat", &[&old_log]);
    assert!(
        ok && text.contains("old-log-s3cr3t"),
        "an older podlab's state is readable by any user: {text}"
    );

    root.ok(&["get", "pods"]);
    for dir in &folders {
        assert_eq!(mode(dir), 0o700, "mode of {}", dir.display());
    }
    let (ok, text) = as_nobody("cat", &[&old_log]);
    assert!(!ok && text.contains("Permission denied"), "{text}");
    assert!(!text.contains("s3cr3t"), "{text}");
    let (ok, text) = as_nobody("ls", &[&root.dir]);
    assert!(!ok && text.contains("Permission denied"), "{text}");
    std::fs::remove_dir_all(logs.join("default_old_1")).unwrap();
    root.assert_nothing_left();
}

const MEMORY_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: memory}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: cache, emptyDir: {medium: Memory, sizeLimit: 4Mi}}]
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "dd if=/dev/zero of=/cache/big bs=1048576 count=5 2>&1; echo dd-exit=$?; exec sleep 1000"]
    volumeMounts: [{name: cache, mountPath: /cache}]
"#;

#[test]
fn memory_empty_dir_is_a_tmpfs_of_its_size_limit_and_goes_with_the_pod() {
    let root = Root::new("vol-tmpfs");
    let out = root.apply(MEMORY_POD);
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("memory", "running", LIMIT, running);
    let uid = pod.metadata.uid.clone().unwrap();
    let host = root
        .dir
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/cache");
    let stat = nix::sys::statfs::statfs(&host).unwrap();
    assert_eq!(stat.filesystem_type(), nix::sys::statfs::TMPFS_MAGIC);
    assert_eq!(
        stat.blocks() as u64 * stat.block_size() as u64,
        4 << 20,
        "tmpfs size = sizeLimit"
    );
    let log = root
        .dir
        .join("logs")
        .join(format!("default_memory_{uid}"))
        .join("app/0.log");
    assert!(
        wait_until(LIMIT, || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("dd-exit="))),
        "no dd output"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("No space left on device"), "{text}");
    assert!(text.contains("dd-exit=1"), "{text}");
    // The container sees the tmpfs at its mount path.
    let container_pid = crate::pods::wait_for_running_container(&root, "memory");
    let inside = podlab_ns::mnt::mounts_of(container_pid).unwrap();
    let cache = inside
        .iter()
        .find(|m| m.mount_point == Path::new("/cache"))
        .expect("/cache in the container's mountinfo");
    assert_eq!(cache.fs_type, "tmpfs");
    root.ok(&["delete", "pod", "memory"]);
    assert!(podlab_ns::mnt::mounts_below(&root.dir.join("pods"))
        .unwrap()
        .is_empty());
    root.assert_nothing_left();
}

fn host_path_pod(name: &str, path: &Path, kind: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: host, hostPath: {{path: "{}", type: {kind}}}}}]
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "echo from-the-pod > /host/made-inside; exec sleep 1000"]
    volumeMounts: [{{name: host, mountPath: /host}}]
"#,
        path.display()
    )
}

#[test]
fn host_path_directory_or_create_is_made_and_a_failed_type_check_creates_nothing() {
    let root = Root::new("vol-hostpath").with_env("PODLAB_NODE_ERROR_BACKOFF", "1s");
    let made = root.dir.join("host/made");
    assert_eq!(
        root.apply(&host_path_pod("made", &made, "DirectoryOrCreate"))
            .code,
        Some(0)
    );
    root.wait_pod("made", "running", LIMIT, running);
    assert!(std::fs::metadata(&made).unwrap().is_dir());
    assert_eq!(mode(&made), 0o755, "kubelet's MkdirAll(path, 0755)");
    assert!(wait_until(LIMIT, || made.join("made-inside").exists()));

    // A file where a Directory is asked for: kubelet's FailedMount, no sandbox.
    let file = root.dir.join("host/file");
    std::fs::write(&file, "x").unwrap();
    assert_eq!(
        root.apply(&host_path_pod("wrong", &file, "Directory")).code,
        Some(0)
    );
    let expected = format!(
        "MountVolume.SetUp failed for volume \"host\" : hostPath type check failed: {} is not a directory",
        file.display()
    );
    assert!(
        wait_until(LIMIT, || root
            .ok(&["get", "events", "-o", "json"])
            .contains(&expected.replace('"', "\\\""))),
        "no FailedMount event {expected:?}: {}",
        root.ok(&["get", "events"])
    );
    let wrong = root.pod("wrong").unwrap();
    let wrong_uid = wrong.metadata.uid.unwrap();
    let sandboxes = root.runtime().list_pod_sandboxes().unwrap();
    assert!(
        sandboxes.iter().all(|s| s.metadata.uid != wrong_uid),
        "a sandbox was made for a pod whose volume failed"
    );
    assert!(
        std::fs::metadata(&file).unwrap().is_file(),
        "the file is untouched"
    );
    root.ok(&["delete", "pod", "made", "wrong"]);
    root.assert_nothing_left();
}

const SUBPATH_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: subpath}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: vol, emptyDir: {}}]
  initContainers:
  - name: plant
    image: busybox
    command: [sh, -c, "mkdir /vol/real && echo inside > /vol/real/f && ln -s /etc /vol/escape && ln -s real /vol/inside"]
    volumeMounts: [{name: vol, mountPath: /vol}]
  containers:
  - name: good
    image: busybox
    env: [{name: DIR, value: made}]
    command: [sh, -c, "cat /mnt/f; echo from-expr > /expr/g; exec sleep 1000"]
    volumeMounts:
    - {name: vol, mountPath: /mnt, subPath: inside}
    - {name: vol, mountPath: /expr, subPathExpr: $(DIR)}
  - name: evil
    image: busybox
    command: [sh, -c, "cat /host-etc/hostname; exec sleep 1000"]
    volumeMounts: [{name: vol, mountPath: /host-etc, subPath: escape}]
"#;

/// CVE-2017-1002101: a container plants a symlink in a shared volume that points out of it; a
/// container mounting it as a subPath must not get the host's folder.
#[test]
fn subpath_symlink_out_of_the_volume_is_refused_cve_2017_1002101() {
    let root = Root::new("vol-subpath");
    assert_eq!(root.apply(SUBPATH_POD).code, Some(0));
    let status = |pod: &k8s_openapi::api::core::v1::Pod, name: &str| {
        pod.status
            .as_ref()?
            .container_statuses
            .iter()
            .flatten()
            .find(|s| s.name == name)
            .cloned()
    };
    let waiting_reason = |pod: &k8s_openapi::api::core::v1::Pod, name: &str| {
        status(pod, name)?
            .state
            .and_then(|s| s.waiting)
            .map(|w| (w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
    };
    let pod = root.wait_pod("subpath", "good running, evil refused", LIMIT, |p| {
        status(p, "good")
            .and_then(|s| s.state)
            .is_some_and(|s| s.running.is_some())
            && waiting_reason(p, "evil").is_some_and(|(r, _)| r == "CreateContainerConfigError")
    });
    let (_, message) = waiting_reason(&pod, "evil").unwrap();
    assert_eq!(
        message,
        "failed to prepare subPath for volumeMount \"vol\" of container \"evil\""
    );
    let uid = pod.metadata.uid.clone().unwrap();
    let volume = root
        .dir
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/vol");
    // subPathExpr made `made` with the volume's mode, and the container wrote into it.
    assert!(wait_until(LIMIT, || volume.join("made/g").exists()));
    assert_eq!(mode(&volume.join("made")), 0o777);
    let log = root
        .dir
        .join("logs")
        .join(format!("default_subpath_{uid}"))
        .join("good/0.log");
    assert!(wait_until(LIMIT, || std::fs::read_to_string(&log)
        .is_ok_and(|t| t.contains("inside"))));
    // The kernel: good's /mnt is the volume's `real`, and evil never ran.
    let pid = crate::pods::wait_for_running_container(&root, "subpath");
    let mounts = podlab_ns::mnt::mounts_of(pid).unwrap();
    let mnt = mounts
        .iter()
        .find(|m| m.mount_point == Path::new("/mnt"))
        .expect("/mnt in good's mountinfo");
    assert!(mnt.root.ends_with("vol/real"), "{mnt:?}");
    let records = root.runtime().list_containers(&Default::default()).unwrap();
    assert!(
        records.iter().all(|c| c
            .labels
            .get("io.kubernetes.container.name")
            .map(String::as_str)
            != Some("evil")),
        "a container record was made for evil"
    );
    root.ok(&["delete", "pod", "subpath"]);
    root.assert_nothing_left();
}

const CONFIG_OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {mode: fast}
---
apiVersion: v1
kind: Secret
metadata: {name: sec}
stringData: {token: tok-s3cr3t}
"#;

const ENV_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: envpod, labels: {app: web}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: out, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    resources: {limits: {cpu: 500m, memory: 64Mi}}
    command: [sh, -c, "env > /out/env; exec sleep 1000"]
    volumeMounts: [{name: out, mountPath: /out}]
    envFrom: [{configMapRef: {name: cfg}, prefix: CFG_}]
    env:
    - {name: MY_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: MY_UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}
    - {name: MY_APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    - {name: MY_NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
    - {name: MY_CPU_M, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}
    - {name: MY_MEM_MI, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
    - {name: MODE, valueFrom: {configMapKeyRef: {name: cfg, key: mode}}}
    - {name: TOKEN, valueFrom: {secretKeyRef: {name: sec, key: token}}}
    - {name: LATE, valueFrom: {configMapKeyRef: {name: late, key: k}}}
"#;

#[test]
fn env_from_config_maps_secrets_and_the_downward_api_and_a_missing_one_waits() {
    let root = Root::new("vol-env").with_env("PODLAB_NODE_ERROR_BACKOFF", "1s");
    let out = root.apply(CONFIG_OBJECTS);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "configmap/cfg created\nsecret/sec created\n");
    assert_eq!(
        root.apply(CONFIG_OBJECTS).stdout,
        "configmap/cfg unchanged\nsecret/sec unchanged\n"
    );
    // Secrets: 0600 in the store, no value in the table, base64 in -o yaml as kubectl prints.
    let stored = find(&root.dir.join("store"), "sec.json");
    assert_eq!(mode(&stored[0]), 0o600);
    let table = root.ok(&["get", "secrets"]);
    assert!(
        table.starts_with("NAME   TYPE     DATA   AGE\nsec    Opaque   1 "),
        "{table}"
    );
    assert!(!table.contains("tok-s3cr3t"));
    let yaml = root.ok(&["get", "secret", "sec", "-o", "yaml"]);
    assert!(yaml.contains("token: dG9rLXMzY3IzdA=="), "{yaml}");
    assert!(root.ok(&["get", "configmaps"]).contains("cfg    1 "));

    // A key of a ConfigMap that does not exist yet: kubelet's CreateContainerConfigError.
    assert_eq!(root.apply(ENV_POD).code, Some(0));
    let waiting = root.wait_pod("envpod", "waiting for its ConfigMap", LIMIT, |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.state.as_ref()?.waiting.clone())
            .is_some_and(|w| w.reason.as_deref() == Some("CreateContainerConfigError"))
    });
    let message = waiting.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap()
        .message
        .unwrap();
    assert_eq!(message, "configmap \"late\" not found");
    let described = root.ok(&["describe", "pod", "envpod"]);
    assert!(
        described
            .lines()
            .any(|l| l.trim_start().starts_with("TOKEN:")
                && l.contains("<set to the key 'token' in secret 'sec'>")
                && l.trim_end().ends_with("Optional: false")),
        "{described}"
    );
    let events = root.ok(&["get", "events", "-o", "json"]);
    for text in [
        &described,
        &events,
        &root.ok(&["get", "pod", "envpod", "-o", "yaml"]),
    ] {
        assert!(
            !text.contains("tok-s3cr3t"),
            "a secret value was printed: {text}"
        );
    }

    // Once it exists, the retry starts the container with every value.
    let late = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late}\ndata: {k: v}\n";
    assert_eq!(root.apply(late).code, Some(0));
    let pod = root.wait_pod("envpod", "running", LIMIT, running);
    let uid = pod.metadata.uid.clone().unwrap();
    let env_file = root
        .dir
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/out/env");
    assert!(wait_until(LIMIT, || std::fs::read_to_string(&env_file)
        .is_ok_and(|t| t.contains("LATE="))));
    let env = std::fs::read_to_string(&env_file).unwrap();
    let node = pod.spec.unwrap().node_name.unwrap();
    for line in [
        "CFG_mode=fast".to_string(),
        "MY_NAME=envpod".into(),
        format!("MY_UID={uid}"),
        "MY_APP=web".into(),
        format!("MY_NODE={node}"),
        "MY_CPU_M=500".into(),
        "MY_MEM_MI=64".into(),
        "MODE=fast".into(),
        "TOKEN=tok-s3cr3t".into(),
        "LATE=v".into(),
    ] {
        assert!(env.lines().any(|l| l == line), "{line} not in {env}");
    }
    root.ok(&["delete", "pod", "envpod"]);
    root.assert_nothing_left();
}

const PROJECTED_POD: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: files}
data: {a.conf: alpha, b.conf: beta}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: pw-s3cr3t}
---
apiVersion: v1
kind: Pod
metadata: {name: projected}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: all, configMap: {name: files}}
  # Octal as kubectl (YAML 1.1) reads it: 0400 is 256, 0440 is 288.
  - {name: some, configMap: {name: files, items: [{key: b.conf, path: sub/b.txt, mode: 0400}]}}
  - {name: creds, secret: {secretName: creds, defaultMode: 0440}}
  - {name: maybe, configMap: {name: absent, optional: true}}
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "cat /all/a.conf /some/sub/b.txt; touch /all/x 2>&1; exec sleep 1000"]
    volumeMounts:
    - {name: all, mountPath: /all}
    - {name: some, mountPath: /some}
    - {name: creds, mountPath: /creds}
    - {name: maybe, mountPath: /maybe}
"#;

#[test]
fn config_map_and_secret_volumes_with_items_modes_and_a_tmpfs_for_secrets() {
    let root = Root::new("vol-projected").with_env("PODLAB_NODE_ERROR_BACKOFF", "1s");
    assert_eq!(root.apply(PROJECTED_POD).code, Some(0));
    let pod = root.wait_pod("projected", "running", LIMIT, running);
    let uid = pod.metadata.uid.clone().unwrap();
    let volumes = root.dir.join("pods").join(&uid).join("volumes");
    let all = volumes.join("kubernetes.io~configmap/all");
    assert_eq!(
        std::fs::read_to_string(all.join("a.conf")).unwrap(),
        "alpha"
    );
    assert_eq!(mode(&all.join("a.conf")), 0o644);
    let some = volumes.join("kubernetes.io~configmap/some");
    assert_eq!(mode(&some.join("sub/b.txt")), 0o400);
    assert!(
        !some.join("a.conf").exists(),
        "only the items are projected"
    );
    let creds = volumes.join("kubernetes.io~secret/creds");
    assert_eq!(mode(&creds.join("password")), 0o440);
    let stat = nix::sys::statfs::statfs(&creds).unwrap();
    assert_eq!(
        stat.filesystem_type(),
        nix::sys::statfs::TMPFS_MAGIC,
        "secrets stay off the disk"
    );
    let log = root
        .dir
        .join("logs")
        .join(format!("default_projected_{uid}"))
        .join("app/0.log");
    assert!(wait_until(LIMIT, || std::fs::read_to_string(&log)
        .is_ok_and(|t| t.contains("Read-only file system"))));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("alpha") && text.contains("beta"), "{text}");
    let (ok, _) = as_nobody("cat", &[&creds.join("password")]);
    assert!(!ok, "nobody read the secret volume");

    // A volume whose ConfigMap is missing: kubelet's FailedMount, and no sandbox.
    let missing = "apiVersion: v1\nkind: Pod\nmetadata: {name: missing}\nspec:\n  volumes: [{name: cfg, configMap: {name: nope}}]\n  containers: [{name: a, image: busybox, command: [sleep, '100'], volumeMounts: [{name: cfg, mountPath: /c}]}]\n";
    assert_eq!(root.apply(missing).code, Some(0));
    let expected =
        "MountVolume.SetUp failed for volume \\\"cfg\\\" : configmap \\\"nope\\\" not found";
    assert!(
        wait_until(LIMIT, || root
            .ok(&["get", "events", "-o", "json"])
            .contains(expected)),
        "{}",
        root.ok(&["get", "events"])
    );
    root.ok(&["delete", "pod", "projected", "missing"]);
    root.assert_nothing_left();
}

const FACTS_POD: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a.conf: alpha}
---
apiVersion: v1
kind: Pod
metadata:
  name: facts
  labels: {app: web, tier: front}
  annotations: {team: blue, note: 'say "hi"'}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 1000, fsGroup: 2000}
  volumes:
  - name: info
    downwardAPI:
      defaultMode: 256
      items:
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: ns, fieldRef: {fieldPath: metadata.namespace}}
      - {path: uid, fieldRef: {fieldPath: metadata.uid}}
      - {path: meta/labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: meta/annotations, fieldRef: {fieldPath: metadata.annotations}, mode: 420}
      - {path: cpu_limit, resourceFieldRef: {containerName: app, resource: limits.cpu, divisor: 1m}}
      - {path: mem_request, resourceFieldRef: {containerName: app, resource: requests.memory, divisor: 1Mi}}
  - {name: scratch, emptyDir: {}}
  - {name: cfg, configMap: {name: settings, defaultMode: 256}}
  containers:
  - name: app
    image: busybox
    command: [sleep, '1000']
    resources: {limits: {cpu: 250m, memory: 64Mi}, requests: {cpu: 100m, memory: 32Mi}}
    volumeMounts:
    - {name: info, mountPath: /etc/info}
    - {name: scratch, mountPath: /scratch}
    - {name: cfg, mountPath: /etc/cfg}
"#;

#[test]
fn downward_api_volume_files_and_fs_group_ownership_as_kubelet_writes_them() {
    let root = Root::new("vol-downward");
    assert_eq!(root.apply(FACTS_POD).code, Some(0));
    let pod = root.wait_pod("facts", "running", LIMIT, running);
    let uid = pod.metadata.uid.clone().unwrap();
    let inside = |script: &str| {
        let out = root.ok(&["exec", "facts", "--", "sh", "-c", script]);
        out.trim_end_matches('\n').to_string()
    };

    // The files, read by uid 1000 through the group fsGroup gave them (0400 becomes 0440).
    assert_eq!(
        inside("id -u; id -G")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["1000", "0", "2000"]
    );
    assert_eq!(inside("cat /etc/info/name"), "facts");
    assert_eq!(inside("cat /etc/info/ns"), "default");
    assert_eq!(inside("cat /etc/info/uid"), uid);
    assert_eq!(
        inside("cat /etc/info/meta/labels"),
        "app=\"web\"\ntier=\"front\""
    );
    let mut annotations: Vec<String> = pod
        .metadata
        .annotations
        .clone()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={}", podlab_print::go_quote(v)))
        .collect();
    annotations.sort();
    assert_eq!(
        inside("cat /etc/info/meta/annotations"),
        annotations.join("\n")
    );
    assert!(
        annotations.contains(&"note=\"say \\\"hi\\\"\"".to_string()),
        "{annotations:?}"
    );
    assert_eq!(inside("cat /etc/info/cpu_limit"), "250");
    assert_eq!(inside("cat /etc/info/mem_request"), "32");

    // kubelet's atomic writer layout: names are links into ..data, a timestamped folder.
    assert_eq!(inside("readlink /etc/info/name"), "..data/name");
    assert_eq!(inside("readlink /etc/info/meta"), "..data/meta");
    let data = inside("readlink /etc/info/..data");
    assert!(data.starts_with("..20") && data.len() > 22, "{data}");

    // Modes and groups as the kernel has them: files gain group read, folders setgid.
    let stat = |path: &str| inside(&format!("stat -L -c '%a %g' {path}"));
    assert_eq!(stat("/etc/info/name"), "440 2000");
    assert_eq!(stat("/etc/info/meta/annotations"), "644 2000");
    assert_eq!(stat("/etc/info"), "3777 2000", "a tmpfs (1777) with setgid");
    assert_eq!(stat("/etc/cfg/a.conf"), "440 2000");
    assert_eq!(
        stat("/scratch"),
        "2777 2000",
        "the emptyDir: setgid, writable"
    );
    assert_eq!(
        inside("touch /scratch/made && stat -c '%u %g' /scratch/made"),
        "1000 2000",
        "a file made in it inherits the group"
    );
    let statfs = nix::sys::statfs::statfs(&root.dir.join(format!(
        "pods/{uid}/volumes/kubernetes.io~downward-api/info"
    )))
    .unwrap();
    assert_eq!(statfs.filesystem_type(), nix::sys::statfs::TMPFS_MAGIC);

    // fsGroup is a supplementary group of the container's process.
    let pid = root
        .record(&crate::pods::container(&pod, "app"))
        .pid
        .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let groups = status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .unwrap();
    assert!(groups.split_whitespace().any(|g| g == "2000"), "{groups}");

    root.ok(&["delete", "pod", "facts"]);
    root.assert_nothing_left();
}

const IMAGE_VOLUME_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: tools}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: tools, image: {reference: busybox, pullPolicy: IfNotPresent}}
  containers:
  - name: app
    image: busybox
    command: [sleep, "1000"]
    volumeMounts:
    - {name: tools, mountPath: /tools}
    - {name: tools, mountPath: /tools-etc, subPath: etc}
"#;

/// The `image` volume source (KEP-4639): the image's content in the container, read-only
/// whatever the mount says, its subPath alone where it has one; a manifest without a
/// reference is refused at its field.
#[test]
fn an_image_volume_mounts_the_image_read_only_and_its_sub_path() {
    let root = Root::new("vol-image");
    let refused = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  volumes: [{name: t, image: {pullPolicy: Never}}]\n  containers: [{name: a, image: busybox}]\n",
    );
    assert_ne!(refused.code, Some(0));
    assert!(
        refused
            .stderr
            .contains("spec.volumes[0].image.reference: Required value"),
        "{refused:?}"
    );
    let out = root.apply(IMAGE_VOLUME_POD);
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("tools", "running", LIMIT, running);
    let exec = |args: &[&str]| {
        let mut full = vec!["exec", "tools", "--"];
        full.extend_from_slice(args);
        root.run(&full)
    };
    let ran = exec(&["/tools/bin/busybox", "echo", "from-the-volume"]);
    assert_eq!(ran.stdout, "from-the-volume\n", "{ran:?}");
    let written = exec(&["touch", "/tools/written"]);
    assert_ne!(
        written.code,
        Some(0),
        "an image volume is read-only: {written:?}"
    );
    let passwd = exec(&["cat", "/tools-etc/passwd"]);
    assert!(passwd.stdout.starts_with("root:x:0:0:"), "{passwd:?}");
    let container_pid = crate::pods::wait_for_running_container(&root, "tools");
    let inside = podlab_ns::mnt::mounts_of(container_pid).unwrap();
    for target in ["/tools", "/tools-etc"] {
        let mount = inside
            .iter()
            .find(|m| m.mount_point == Path::new(target))
            .unwrap_or_else(|| panic!("{target} is not in the container's mountinfo"));
        assert!(
            mount.options.split(',').any(|o| o == "ro"),
            "{target}: {mount:?}"
        );
    }
    let described = root.ok(&["describe", "pod", "tools"]);
    assert!(
        described.contains("Type:        Image (a container image or OCI artifact)"),
        "{described}"
    );
    root.ok(&["delete", "pod", "tools"]);
    root.assert_nothing_left();
}
