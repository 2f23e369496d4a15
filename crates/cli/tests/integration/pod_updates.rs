//! Integration tests: an update of a pod that runs (`apply` of a changed manifest). The API
//! server's rule lets only container images change; the node agent then kills and recreates
//! that container, as kubelet does when a container's hash changes, and leaves the others.

use std::path::Path;
use std::time::Duration;

use crate::pods::{container, is_zombie, running, Root};

const LIMIT: Duration = Duration::from_secs(60);

fn manifest(image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: upd}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  \
         - {{name: app, image: \"{image}\", command: [sleep, \"1000\"]}}\n  \
         - {{name: keep, image: busybox, command: [sleep, \"1001\"]}}\n"
    )
}

/// The store's busybox under a second name, as a registry would hold a tag of it: the image
/// store is an OCI layout, so a copy of it imports.
pub fn tag_busybox(root: &Root, name: &str) {
    let images = root.dir.join("images");
    let copy = root.dir.join("tag-copy");
    std::fs::create_dir_all(&copy).unwrap();
    for file in ["oci-layout", "index.json"] {
        std::fs::copy(images.join(file), copy.join(file)).unwrap();
    }
    let status = std::process::Command::new("cp")
        .args([
            "-a",
            images.join("blobs").to_str().unwrap(),
            copy.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    root.ok(&["image", "import", copy.to_str().unwrap(), "--name", name]);
    std::fs::remove_dir_all(&copy).unwrap();
}

fn gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid)
}

#[test]
fn apply_of_a_changed_image_recreates_that_container() {
    let root = Root::new("imageupdate");
    let out = root.apply(&manifest("busybox"));
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("upd", "running", LIMIT, running);
    let app = container(&pod, "app");
    let app_pid = root.record(&app).pid.unwrap();
    let keep_pid = root.record(&container(&pod, "keep")).pid.unwrap();
    tag_busybox(&root, "busybox:1.36");

    // The stored `Always` (busybox is :latest) against the new `IfNotPresent` (a tag): the
    // pull policy follows the image on both sides, so the update is the image alone.
    let out = root.apply(&manifest("busybox:1.36"));
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "pod/upd configured\n"),
        "{out:?}"
    );
    let stored = root.pod("upd").unwrap().spec.unwrap();
    assert_eq!(stored.containers[0].image.as_deref(), Some("busybox:1.36"));
    assert_eq!(
        stored.containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );

    let pod = root.wait_pod("upd", "running the new image", LIMIT, |p| {
        let now = container(p, "app");
        running(p) && now.image == "busybox:1.36" && now.container_id != app.container_id
    });
    let recreated = container(&pod, "app");
    assert_eq!(recreated.restart_count, 1, "{recreated:?}");
    let new_pid = root.record(&recreated).pid.unwrap();
    assert_ne!(new_pid, app_pid);
    assert!(
        gone(app_pid),
        "the old app container (pid {app_pid}) still runs"
    );
    assert!(!gone(new_pid));
    // The container whose definition did not change was left alone.
    let keep = container(&pod, "keep");
    assert_eq!(keep.restart_count, 0);
    assert_eq!(root.record(&keep).pid, Some(keep_pid));
    assert!(!gone(keep_pid));

    // Any other change is still refused, with the API server's words, and changes nothing.
    let out = root.apply(&manifest("busybox:1.36").replace("\"1000\"", "\"999\""));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{out:?}"
    );
    assert_eq!(root.pod("upd").unwrap().spec.unwrap(), stored);
    root.ok(&["delete", "pod", "upd", "--now"]);
    root.assert_nothing_left();
}
