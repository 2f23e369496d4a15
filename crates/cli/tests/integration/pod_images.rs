//! Issue 16, kubelet's side: pods get their images as kubelet gets them, from a real
//! docker-registry (TLS from a test CA, htpasswd auth; the kit of podlab-image's registry tests)
//! through the node agent: `imagePullPolicy` Always / IfNotPresent / Never, a pod's
//! `imagePullSecrets` of type `kubernetes.io/dockerconfigjson`, `ErrImagePull` then
//! `ImagePullBackOff` with kubelet's events; and image garbage collection with kubelet's
//! thresholds on a small tmpfs as the image filesystem, on podlab's store and through a CRI
//! runtime's ImageService. The evidence is the store's images,
//! the files of the image filesystem, `statfs`, the container's process, and the events.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use serde_json::Value;

use crate::pods::{container, running, Root};
use crate::security::waiting_reason;
use crate::support::wait_until;

use crate::kit;

const LIMIT: Duration = Duration::from_secs(60);

/// The built-in busybox of `root`'s image store as an OCI layout tagged `t`, for skopeo to push
/// (the store is an OCI image layout itself).
fn busybox_layout(root: &Root, dir: &Path) -> kit::Layout {
    root.ok(&["image", "ls"]); // makes the built-in busybox
    let layout = kit::Layout::new(dir);
    let images = root.dir.join("images");
    for entry in std::fs::read_dir(images.join("blobs/sha256")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(
            entry.path(),
            dir.join("blobs/sha256").join(entry.file_name()),
        )
        .unwrap();
    }
    let mut index: Value =
        serde_json::from_slice(&std::fs::read(images.join("index.json")).unwrap()).unwrap();
    let manifests = index["manifests"].as_array_mut().unwrap();
    manifests.retain(|m| {
        m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .is_some_and(|n| n.contains("busybox"))
    });
    assert_eq!(manifests.len(), 1, "one busybox in {index}");
    manifests[0]["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": "t"});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    layout
}

fn events_of(root: &Root, pod: &Pod) -> Vec<Event> {
    let (events, _) = root.store().list::<Event>(Some("default")).unwrap();
    events
        .into_iter()
        .filter(|e| e.involved_object.uid == pod.metadata.uid)
        .collect()
}

fn has_event(root: &Root, pod: &Pod, reason: &str, message_part: &str) -> bool {
    events_of(root, pod).iter().any(|e| {
        e.reason.as_deref() == Some(reason)
            && e.message
                .as_deref()
                .is_some_and(|m| m.contains(message_part))
    })
}

fn event_lines(root: &Root, pod: &Pod) -> Vec<String> {
    events_of(root, pod)
        .into_iter()
        .map(|e| {
            format!(
                "{} {}: {}",
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect()
}

fn pod(name: &str, image: &str, policy: Option<&str>, secrets: &[&str]) -> String {
    let policy = policy
        .map(|p| format!(", imagePullPolicy: {p}"))
        .unwrap_or_default();
    let secrets = if secrets.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = secrets.iter().map(|s| format!("{{name: {s}}}")).collect();
        format!("  imagePullSecrets: [{}]\n", names.join(", "))
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{secrets}  \
         terminationGracePeriodSeconds: 2\n  containers:\n  \
         - {{name: app, image: \"{image}\"{policy}, command: [sleep, \"1000\"]}}\n"
    )
}

/// The names the image store under `images` holds.
fn names_in(images: &Path) -> Vec<String> {
    podlab_image::Store::open(images)
        .unwrap()
        .list()
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect()
}

fn image_names(root: &Root) -> Vec<String> {
    names_in(&root.dir.join("images"))
}

#[test]
fn pods_pull_by_policy_with_their_pull_secrets_and_back_off_after_failures() {
    let Some(registry) = kit::Registry::start(true, true) else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let root = Root::new("podpull")
        .with_env(
            "PODLAB_REGISTRY_CONFIG",
            registry.certs_d().to_str().unwrap(),
        )
        .with_env("HOME", scratch.path().to_str().unwrap())
        .with_env("REGISTRY_AUTH_FILE", "")
        .with_env("PODLAB_NODE_ERROR_BACKOFF", "1s")
        .with_env("PODLAB_NODE_PULL_BACKOFF", "2s,8s");
    let layout = busybox_layout(&root, &scratch.path().join("layout"));
    for tag in ["1", "2", "3"] {
        registry.push(&layout, "t", &format!("demo/busybox:{tag}"));
    }
    let image = |tag: &str| format!("{}/demo/busybox:{tag}", registry.host());
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: regcred}}\n\
         type: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{{\"auths\":{{\"{}\":{{\"username\":\"{}\",\"password\":\"{}\"}}}}}}'\n",
        registry.host(),
        kit::USER,
        kit::PASSWORD
    );
    let out = root.apply(&secret);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(root.dir.join("store"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o077, 0, "the store holds Secrets: 0700");

    // IfNotPresent (a tag), absent: pulled with the Secret's credentials, then run.
    let out = root.apply(&pod("pulled", &image("1"), None, &["regcred"]));
    assert_eq!(out.code, Some(0), "{out:?}");
    let pulled = root.wait_pod("pulled", "running", LIMIT, running);
    let pid = root.record(&container(&pulled, "app")).pid.unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    assert!(image_names(&root).contains(&image("1")));
    assert!(
        has_event(
            &root,
            &pulled,
            "Pulling",
            &format!("Pulling image \"{}\"", image("1"))
        ),
        "{:#?}",
        event_lines(&root, &pulled)
    );
    let size_line = format!("Successfully pulled image \"{}\" in ", image("1"));
    let pulled_event = events_of(&root, &pulled)
        .into_iter()
        .filter_map(|e| e.message)
        .find(|m| m.starts_with(&size_line))
        .unwrap_or_else(|| panic!("{:#?}", event_lines(&root, &pulled)));
    let size: u64 = pulled_event
        .rsplit_once("Image size: ")
        .and_then(|(_, s)| s.strip_suffix(" bytes."))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{pulled_event}"));
    assert!(size > 0, "{pulled_event}");

    // IfNotPresent, present: not pulled again. Never, present: runs.
    root.apply(&pod("present", &image("1"), None, &[]));
    root.apply(&pod("never-present", &image("1"), Some("Never"), &[]));
    for name in ["present", "never-present"] {
        let p = root.wait_pod(name, "running", LIMIT, running);
        let already = format!(
            "Container image \"{}\" already present on machine",
            image("1")
        );
        assert!(
            has_event(&root, &p, "Pulled", &already),
            "{:#?}",
            event_lines(&root, &p)
        );
        assert!(
            !has_event(&root, &p, "Pulling", ""),
            "{:#?}",
            event_lines(&root, &p)
        );
    }
    // Always: pulled although present.
    root.apply(&pod("always", &image("1"), Some("Always"), &["regcred"]));
    let always = root.wait_pod("always", "running", LIMIT, running);
    assert!(has_event(&root, &always, "Pulling", &image("1")));
    assert!(has_event(
        &root,
        &always,
        "Pulled",
        "Successfully pulled image"
    ));

    // Never, absent: ErrImageNeverPull, nothing pulled.
    root.apply(&pod("never", &image("3"), Some("Never"), &[]));
    let never = root.wait_pod("never", "ErrImageNeverPull", LIMIT, |p| {
        waiting_reason(p, "app").as_deref() == Some("ErrImageNeverPull")
    });
    assert!(has_event(
        &root,
        &never,
        "ErrImageNeverPull",
        &format!(
            "Container image \"{}\" is not present with pull policy of Never",
            image("3")
        )
    ));
    assert!(!image_names(&root).contains(&image("3")));

    // No credentials (the Secret it names is not there): 401, ErrImagePull, then
    // ImagePullBackOff while the backoff runs.
    root.apply(&pod("denied", &image("2"), None, &["nosuch"]));
    let denied = root.wait_pod("denied", "ImagePullBackOff", LIMIT, |p| {
        waiting_reason(p, "app").as_deref() == Some("ImagePullBackOff")
    });
    let lines = event_lines(&root, &denied);
    for (reason, part) in [
        (
            "FailedToRetrieveImagePullSecret",
            "Unable to retrieve some image pull secrets (nosuch)",
        ),
        ("Pulling", &format!("Pulling image \"{}\"", image("2"))),
        (
            "Failed",
            &format!("Failed to pull image \"{}\": ", image("2")),
        ),
        ("Failed", "401 Unauthorized"),
        ("Failed", "Error: ErrImagePull"),
        (
            "BackOff",
            &format!("Back-off pulling image \"{}\"", image("2")),
        ),
        ("Failed", "Error: ImagePullBackOff"),
    ] {
        assert!(
            has_event(&root, &denied, reason, part),
            "{reason} {part}: {lines:#?}"
        );
    }
    let waiting = denied
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert!(
        waiting
            .message
            .as_deref()
            .is_some_and(|m| m.contains("ErrImagePull: ") && m.contains("401 Unauthorized")),
        "{waiting:?}"
    );
    assert!(!image_names(&root).contains(&image("2")));
    // The password is in no event, no status and no log of the agent.
    let (events, _) = root.store().list::<Event>(Some("default")).unwrap();
    let everything = format!(
        "{}{}{}",
        serde_json::to_string(&events).unwrap(),
        serde_json::to_string(&denied).unwrap(),
        std::fs::read_to_string(root.dir.join("node.log")).unwrap_or_default()
    );
    assert!(!everything.contains(kit::PASSWORD));

    // `run --rm` pulls as a pod does, with the node's docker config this time.
    let docker = scratch.path().join(".docker");
    std::fs::create_dir_all(&docker).unwrap();
    std::fs::write(
        docker.join("config.json"),
        format!(
            r#"{{"auths":{{"{}":{{"username":"{}","password":"{}"}}}}}}"#,
            registry.host(),
            kit::USER,
            kit::PASSWORD
        ),
    )
    .unwrap();
    let ran = root.run(&[
        "run",
        "once",
        "--rm",
        "--restart",
        "Never",
        "--image",
        &image("3"),
        "--command",
        "--",
        "echo",
        "pulled by run",
    ]);
    assert_eq!(
        (ran.code, ran.stdout.as_str()),
        (Some(0), "pulled by run\n"),
        "{ran:?}"
    );
    assert!(
        ran.stderr
            .contains(&format!("Pulling image \"{}\"", image("3"))),
        "{ran:?}"
    );
    assert!(!ran.stderr.contains(kit::PASSWORD));
    assert!(image_names(&root).contains(&image("3")));

    for name in [
        "pulled",
        "present",
        "never-present",
        "always",
        "never",
        "denied",
    ] {
        root.ok(&["delete", "pod", name]);
    }
    root.assert_nothing_left();
}

/// Random (incompressible) bytes, so that a layer's blob is as big as its file.
fn random_bytes(len: usize) -> Vec<u8> {
    use std::io::Read;
    let mut bytes = vec![0; len];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    bytes
}

/// Writes the file `name` into the image filesystem `dir` until `free` bytes are left.
fn fill_leaving(dir: &Path, name: &str, free: u64) {
    let (_, available) = statfs(dir);
    assert!(available > free, "{available} bytes free, {free} to leave");
    std::fs::write(dir.join(name), vec![0u8; (available - free) as usize]).unwrap();
}

fn statfs(path: &Path) -> (u64, u64) {
    let fs = podlab_kubelet::node::images::image_fs(path).unwrap();
    (fs.capacity, fs.available)
}

/// An image of one 2 MiB layer, imported into `root`'s store as `name`.
fn import_image(root: &Root, dir: &Path, name: &str) -> kit::Written {
    let data = random_bytes(2 << 20);
    let mut layout = kit::Layout::new(dir);
    let image = layout.image(&[&[("data", &data)]], kit::Compression::Gzip, "amd64");
    layout.tag(&image, "t");
    layout.save();
    root.ok(&["image", "import", dir.to_str().unwrap(), "--name", name]);
    image
}

#[test]
fn image_gc_removes_least_recently_used_unused_images_above_the_high_threshold() {
    let scratch = tempfile::tempdir().unwrap();
    // Declared before the root: unmounted after the root's agent and pods are gone.
    let tmpfs = kit::Tmpfs::mount(&scratch.path().join("images"), "16m");
    let root = Root::new("imagegc")
        .with_env("PODLAB_IMAGE_ROOT", tmpfs.path().to_str().unwrap())
        .with_env("PODLAB_NODE_IMAGE_GC", "85,80,0s")
        .with_env("PODLAB_NODE_IMAGE_GC_PERIOD", "1s");
    // A running pod: its image (the built-in busybox) is in use and never removed.
    let out = root.apply(&pod("keep", "busybox", None, &[]));
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("keep", "running", LIMIT, running);
    let old = import_image(&root, &scratch.path().join("old"), "gc/old:1");
    let new = import_image(&root, &scratch.path().join("new"), "gc/new:1");
    let blob = |digest: &podlab_image::Digest| tmpfs.path().join("blobs/sha256").join(digest.hex());
    assert!(blob(&old.layers[0]).exists() && blob(&new.layers[0]).exists());

    // Fill the image filesystem to 20 % free minus half the old image: at least 85 % used,
    // and freeing the old image alone reaches the low threshold (80 %).
    let (capacity, available) = statfs(tmpfs.path());
    let old_size = old.blobs;
    let target = capacity / 5 - old_size / 2;
    assert!(
        target <= capacity * 15 / 100 && available > target,
        "the test's sizes do not fit: capacity {capacity}, available {available}, old image {old_size}"
    );
    std::fs::write(
        tmpfs.path().join("filler"),
        vec![0u8; (available - target) as usize],
    )
    .unwrap();
    let (_, now_available) = statfs(tmpfs.path());
    assert!(
        100 - now_available * 100 / capacity >= 85,
        "{now_available} of {capacity} free"
    );

    assert!(
        wait_until(LIMIT, || !blob(&old.layers[0]).exists()),
        "the least recently used image was not removed: {:?}\nagent log: {}",
        names_in(tmpfs.path()),
        root.agent_log()
    );
    // The agent says so once the whole collection has returned, after the blob went: what
    // follows is read then.
    assert!(
        wait_until(LIMIT, || root.agent_log().contains("high threshold 85%")),
        "{}",
        root.agent_log()
    );
    let names = names_in(tmpfs.path());
    assert!(!names.iter().any(|n| n.contains("gc/old")), "{names:?}");
    assert!(
        names.iter().any(|n| n.contains("gc/new")),
        "only down to 80 %: {names:?}"
    );
    assert!(blob(&new.layers[0]).exists());
    let (_, after) = statfs(tmpfs.path());
    assert!(
        100 - after * 100 / capacity < 80,
        "{after} of {capacity} free"
    );

    // Fill to 95 %: the one unused image is not enough, which is FreeDiskSpaceFailed; the
    // running pod's image stays.
    fill_leaving(tmpfs.path(), "filler2", capacity / 20);
    assert!(
        wait_until(LIMIT, || !blob(&new.layers[0]).exists()),
        "the unused image was not removed: {:?}",
        names_in(tmpfs.path())
    );
    let failed = wait_until(LIMIT, || {
        let (events, _) = root.store().list::<Event>(Some("default")).unwrap();
        events.iter().any(|e| {
            e.reason.as_deref() == Some("FreeDiskSpaceFailed")
                && e.involved_object.kind.as_deref() == Some("Node")
                && e.message.as_deref().is_some_and(|m| {
                    m.starts_with("Failed to garbage collect required amount of images.")
                })
        })
    });
    assert!(
        failed,
        "no FreeDiskSpaceFailed event; agent log: {}",
        root.agent_log()
    );
    assert!(names_in(tmpfs.path()).iter().any(|n| n.contains("busybox")));
    let keep = root.pod("keep").unwrap();
    assert!(running(&keep));
    std::fs::remove_file(tmpfs.path().join("filler")).unwrap();
    std::fs::remove_file(tmpfs.path().join("filler2")).unwrap();
    root.ok(&["delete", "pod", "keep"]);
    root.assert_nothing_left();
}

/// kubelet's image GC through the CRI: the agent on a `podlab cri` (`--runtime-endpoint`)
/// whose image store is a small tmpfs finds it above the high threshold by `ImageFsInfo` and
/// `statfs`, and removes the unused image by `RemoveImage`, keeping the image its running pod
/// uses.
#[test]
fn image_gc_through_the_cri_removes_the_unused_image_and_keeps_the_running_pods() {
    let scratch = tempfile::tempdir().unwrap();
    // Declared before the server and the root: unmounted after them.
    let tmpfs = kit::Tmpfs::mount(&scratch.path().join("images"), "16m");
    let images = tmpfs.path().to_str().unwrap();
    let server = crate::node_cri::CriServer::start_with_env(&[("PODLAB_IMAGE_ROOT", images)]);
    let root = Root::new("imagegc-cri")
        .with_env("PODLAB_NODE_RUNTIME_ENDPOINT", &server.endpoint())
        // The store `podlab image import` writes to: the server's.
        .with_env("PODLAB_IMAGE_ROOT", images)
        .with_env("PODLAB_NODE_IMAGE_GC", "85,80,0s")
        .with_env("PODLAB_NODE_IMAGE_GC_PERIOD", "1s");
    let out = root.apply(&pod("keep", "busybox", Some("IfNotPresent"), &[]));
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("keep", "running", LIMIT, running);
    let old = import_image(&root, &scratch.path().join("old"), "gc/old:1");
    let blob = |digest: &podlab_image::Digest| tmpfs.path().join("blobs/sha256").join(digest.hex());
    assert!(blob(&old.layers[0]).exists());

    // At least 85 % used, and removing the old image alone brings it below 80 %.
    let (capacity, _) = statfs(tmpfs.path());
    fill_leaving(tmpfs.path(), "filler", capacity / 5 - old.blobs / 2);
    assert!(
        wait_until(LIMIT, || !blob(&old.layers[0]).exists()),
        "the unused image was not removed through the CRI: {:?}\nagent log: {}\nserver log: {}",
        names_in(tmpfs.path()),
        root.agent_log(),
        server.log()
    );
    let names = names_in(tmpfs.path());
    assert!(!names.iter().any(|n| n.contains("gc/old")), "{names:?}");
    assert!(names.iter().any(|n| n.contains("busybox")), "{names:?}");
    let log = root.agent_log();
    assert!(
        log.contains("high threshold 85%") && log.contains("gc/old"),
        "{log}"
    );
    // The pod whose image was kept runs on, its container never restarted. Its status is
    // read until it shows that, within the limit: under a loaded CI run the assertion once
    // caught it not Running and Ready, with nothing to say why.
    let kept_running = wait_until(LIMIT, || root.pod("keep").is_some_and(|p| running(&p)));
    let keep = root.pod("keep").unwrap();
    assert!(
        kept_running && container(&keep, "app").restart_count == 0,
        "the pod using the kept image: {:?}\nagent log: {}\nserver log: {}",
        keep.status,
        root.agent_log(),
        server.log()
    );
    std::fs::remove_file(tmpfs.path().join("filler")).unwrap();
    root.ok(&["delete", "pod", "keep"]);
}
