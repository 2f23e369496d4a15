//! Integration tests: kubectl's verbs on several objects at once (`get` of several names and
//! kinds, `delete` by `-f`, `-l`, `--all`, `--force`), and the in-place changes (`patch` of the
//! three types, `edit` through `$EDITOR`), with kubectl's messages and exit statuses; where
//! kubectl is installed, its own `patch --local` is the reference for a strategic merge.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

use crate::pods::{installed, running, Out, Root};
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(60);

fn config_map(name: &str, tier: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, labels: {{tier: {tier}}}}}\ndata: {{k: v}}\n"
    )
}

const RS: &str = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web}\nspec:\n  replicas: 0\n  \
    selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      \
    containers: [{name: app, image: busybox, command: [sleep, \"1000\"]}]\n";

fn maps(root: &Root) -> Vec<String> {
    let (maps, _) = root.store().list::<ConfigMap>(Some("default")).unwrap();
    maps.into_iter().filter_map(|m| m.metadata.name).collect()
}

fn names_in(table: &str) -> Vec<String> {
    table
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("NAME"))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn get_and_delete_take_several_objects_as_kubectl_does() {
    let root = Root::new("objverbs");
    for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y"), ("d", "y")] {
        assert_eq!(root.apply(&config_map(name, tier)).code, Some(0));
    }
    assert_eq!(root.apply(RS).code, Some(0));

    // Several names, in the order given; a missing one reported after the others.
    assert_eq!(names_in(&root.ok(&["get", "cm", "b", "a"])), ["b", "a"]);
    let out = root.run(&["get", "configmaps", "a", "nosuch", "c"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(names_in(&out.stdout), ["a", "c"]);
    assert_eq!(
        out.stderr,
        "podlab: Error from server (NotFound): configmaps \"nosuch\" not found\n"
    );
    // Several kinds: one table each, a blank line between, names with their kind.
    let out = root.ok(&["get", "cm,rs"]);
    let tables: Vec<&str> = out.split("\n\n").collect();
    assert_eq!(tables.len(), 2, "{out}");
    assert!(tables[0].starts_with("NAME          DATA   AGE\n"), "{out}");
    assert_eq!(
        names_in(tables[0]),
        ["configmap/a", "configmap/b", "configmap/c", "configmap/d"]
    );
    assert!(
        tables[1].starts_with("NAME                  DESIRED"),
        "{out}"
    );
    assert_eq!(names_in(tables[1]), ["replicaset.apps/web"]);
    assert_eq!(
        names_in(&root.ok(&["get", "cm/d", "rs/web", "cm/a"])),
        ["configmap/d", "replicaset.apps/web", "configmap/a"]
    );
    // One kind found: plain names, as kubectl.
    assert_eq!(names_in(&root.ok(&["get", "rs/web"])), ["web"]);
    // -l and --field-selector on every kind.
    assert_eq!(
        names_in(&root.ok(&["get", "cm", "-l", "tier=y"])),
        ["c", "d"]
    );
    assert_eq!(
        names_in(&root.ok(&[
            "get",
            "cm",
            "--field-selector",
            "metadata.name!=a",
            "-l",
            "tier=x"
        ])),
        ["b"]
    );
    assert_eq!(
        names_in(&root.ok(&["get", "rs", "--field-selector", "status.replicas=0"])),
        ["web"]
    );
    let out = root.run(&["get", "cm,rs", "-w"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (Some(1), "podlab: watch is only supported on individual resources and resource collections, but 2 resources were found\n")
    );

    // delete: flags combined as kubectl combines them.
    let out = root.run(&["delete", "cm", "a", "--force", "--grace-period=5"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(1),
            "podlab: --force and --grace-period greater than 0 cannot be specified together\n"
        )
    );
    let out = root.run(&["delete", "cm", "a", "--now", "--grace-period=5"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    let out = root.run(&["delete", "cm", "--all", "-l", "tier=x"]);
    assert_eq!(
        out.stderr,
        "podlab: cannot set --all and --selector at the same time\n"
    );
    let out = root.run(&["delete", "cm"]);
    assert_eq!(
        out.stderr,
        "podlab: resource(s) were provided, but no name was specified\n"
    );
    assert_eq!(maps(&root), ["a", "b", "c", "d"]);

    // -l, then a missing name among present ones, then -f, then --all.
    assert_eq!(
        root.ok(&["delete", "cm", "-l", "tier=x"]),
        "configmap \"a\" deleted\nconfigmap \"b\" deleted\n"
    );
    assert_eq!(
        root.ok(&["delete", "cm", "-l", "tier=x"]),
        "No resources found\n"
    );
    let out = root.run(&["delete", "cm", "nosuch", "c"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stdout, "configmap \"c\" deleted\n");
    assert_eq!(
        out.stderr,
        "podlab: Error from server (NotFound): configmaps \"nosuch\" not found\n"
    );
    assert_eq!(
        root.ok(&["delete", "cm", "nosuch", "--ignore-not-found"]),
        ""
    );
    let file = root.dir.join("objects.yaml");
    std::fs::write(&file, format!("{RS}---\n{}", config_map("d", "y"))).unwrap();
    let file = file.to_str().unwrap();
    assert_eq!(
        root.ok(&["delete", "-f", file]),
        "replicaset.apps \"web\" deleted\nconfigmap \"d\" deleted\n"
    );
    let out = root.run(&["delete", "-f", file]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "Error from server (NotFound): error when deleting {file:?}: replicasets.apps \"web\" not found"
        )) || out.stderr.contains(&format!(
            "Error from server (NotFound): error when deleting {file:?}: replicasets \"web\" not found"
        )),
        "{out:?}"
    );
    assert!(maps(&root).is_empty());
    for name in ["e", "f"] {
        assert_eq!(root.apply(&config_map(name, "z")).code, Some(0));
    }
    assert_eq!(
        root.ok(&["delete", "configmaps", "--all"]),
        "configmap \"e\" deleted\nconfigmap \"f\" deleted\n"
    );
}

#[test]
fn force_delete_removes_the_pod_at_once_and_watch_shows_terminating() {
    let root = Root::new("forcedel");
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 30\n  \
             containers: [{{name: app, image: busybox, command: [sleep, \"1000\"]}}]\n"
        )
    };
    assert_eq!(root.apply(&pod("hard")).code, Some(0));
    assert_eq!(root.apply(&pod("soft")).code, Some(0));
    root.wait_pod("hard", "running", LIMIT, running);
    root.wait_pod("soft", "running", LIMIT, running);

    let mut watch = root
        .command(&["get", "pod", "soft", "-w", "--no-headers"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let lines = BufReader::new(watch.stdout.take().unwrap());
    let collector = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                seen.lock().unwrap().push_str(&format!("{line}\n"));
            }
        })
    };
    assert!(wait_until(LIMIT, || seen
        .lock()
        .unwrap()
        .contains("Running")));
    let out = root.run(&["delete", "pod", "soft", "--wait=false"]);
    assert_eq!(out.stdout, "pod \"soft\" deleted\n", "{out:?}");
    assert!(
        wait_until(LIMIT, || seen.lock().unwrap().contains("Terminating")),
        "the watch never showed Terminating: {}",
        seen.lock().unwrap()
    );
    let _ = watch.kill();
    let _ = watch.wait();
    let _ = collector.join();

    let out = root.run(&["delete", "pod", "hard", "--force", "--grace-period=0"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "pod \"hard\" force deleted\n");
    assert_eq!(
        out.stderr,
        "Warning: Immediate deletion does not wait for confirmation that the running resource has been terminated. The resource may continue to run on the cluster indefinitely.\n"
    );
    // Gone from the store at once; the agent then ends what ran.
    assert!(root.pod("hard").is_none());
    assert!(wait_until(LIMIT, || root
        .store()
        .list::<Pod>(None)
        .unwrap()
        .0
        .is_empty()));
    // The agent's teardown of what ran goes on after the store forgot the pod.
    let empty = |folder: &str| {
        std::fs::read_dir(root.dir.join(folder)).map_or(true, |mut d| d.next().is_none())
    };
    // Its log folder goes last: a sandbox's folder leaves `sandboxes/` at once (it is moved
    // to the trash), so waiting for that alone raced the rest of the teardown.
    assert!(
        wait_until(LIMIT, || empty("sandboxes")
            && empty("pods")
            && empty("logs")),
        "the agent never tore down the force-deleted pod"
    );
    root.assert_nothing_left();
}

const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 0\n  \
    selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      \
    containers:\n      - {name: app, image: busybox, command: [sleep, \"1000\"], env: [{name: A, value: \"1\"}]}\n      \
    - {name: side, image: busybox, command: [sleep, \"1000\"]}\n";

fn deployment(root: &Root) -> Deployment {
    root.store().get("default", "web").unwrap()
}

fn edit(root: &Root, editor: &str, args: &[&str]) -> Out {
    let mut command = root.command(args);
    command.env("EDITOR", editor).env_remove("KUBE_EDITOR");
    Out::with_stdin(command, "")
}

#[test]
fn patch_and_edit_change_what_may_change_and_refuse_the_rest() {
    let root = Root::new("patchedit");
    assert_eq!(root.apply(DEPLOY).code, Some(0));
    let strategic = r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"busybox:1.36","env":[{"name":"B","value":"2"}]}]}}}}"#;
    let before = root.ok(&["get", "deploy", "web", "-o", "json"]);
    assert_eq!(
        root.ok(&["patch", "deploy", "web", "-p", strategic]),
        "deployment.apps/web patched\n"
    );
    let containers = deployment(&root)
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers;
    assert_eq!(containers.len(), 2, "merged by name, the other kept");
    assert_eq!(containers[0].image.as_deref(), Some("busybox:1.36"));
    let env: Vec<String> = containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(
        env,
        ["B", "A"],
        "a new element before the ones the patch does not name, as kubectl"
    );
    if installed("kubectl") {
        // kubectl's own strategic merge of the same patch on the same object.
        let mut child = Command::new("kubectl")
            .args(["patch", "--local", "-f", "-", "-o", "json", "-p", strategic])
            .env("KUBECONFIG", "/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(before.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let theirs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let ours: serde_json::Value =
            serde_json::from_str(&root.ok(&["get", "deploy", "web", "-o", "json"])).unwrap();
        assert_eq!(
            ours["spec"]["template"]["spec"]["containers"],
            theirs["spec"]["template"]["spec"]["containers"]
        );
    }
    assert_eq!(
        root.ok(&["patch", "deploy/web", "-p", strategic]),
        "deployment.apps/web patched (no change)\n"
    );
    // merge: the list is replaced whole.
    let merge = r#"{"metadata":{"labels":{"team":"a"}},"spec":{"template":{"spec":{"containers":[{"name":"app","image":"busybox","command":["sleep","1000"]}]}}}}"#;
    assert_eq!(
        root.ok(&["patch", "deploy", "web", "--type", "merge", "-p", merge]),
        "deployment.apps/web patched\n"
    );
    let d = deployment(&root);
    assert_eq!(d.metadata.labels.unwrap()["team"], "a");
    assert_eq!(d.spec.unwrap().template.spec.unwrap().containers.len(), 1);
    // json: positional, with a test that must hold.
    let json = r#"[{"op":"test","path":"/spec/replicas","value":0},{"op":"replace","path":"/spec/replicas","value":0},{"op":"add","path":"/metadata/annotations","value":{"note":"x"}}]"#;
    assert_eq!(
        root.ok(&["patch", "deploy", "web", "--type=json", "-p", json]),
        "deployment.apps/web patched\n"
    );
    let out = root.run(&[
        "patch",
        "deploy",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/replicas","value":5}]"#,
    ]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stderr,
        "podlab: The request is invalid: testing value /spec/replicas failed: test failed\n"
    );
    // Immutable: the selector, in the API server's words; nothing written. What is compared
    // is what the patch would have written (spec, generation, labels), not the
    // resourceVersion: the deployment controller is still writing the revision annotation the
    // JSON patch above took away (and the status) while this runs, and under load its write
    // came between the two reads (the intermittent failure of this test).
    let unpatched = |d: Deployment| (d.spec, d.metadata.generation, d.metadata.labels);
    let version = unpatched(deployment(&root));
    let out = root.run(&["patch", "deploy", "web", "-p", r#"{"spec":{"selector":{"matchLabels":{"app":"db"}},"template":{"metadata":{"labels":{"app":"db"}}}}}"#]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.starts_with(
            "podlab: The Deployment \"web\" is invalid: spec.selector: Invalid value: "
        ) && out.stderr.contains("field is immutable"),
        "{out:?}"
    );
    assert_eq!(unpatched(deployment(&root)), version);
    // A field that does not validate.
    let out = root.run(&[
        "patch",
        "deploy",
        "web",
        "-p",
        r#"{"spec":{"replicas":-1}}"#,
    ]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("spec.replicas: Invalid value: -1"),
        "{out:?}"
    );

    // edit: the editor's change saved...
    let out = edit(
        &root,
        "sed -i 's/image: busybox$/image: busybox:1.36/'",
        &["edit", "deploy", "web"],
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "deployment.apps/web edited\n");
    let containers = deployment(&root)
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers;
    assert_eq!(containers[0].image.as_deref(), Some("busybox:1.36"));
    // ...no change is no write...
    let out = edit(&root, "true", &["edit", "deploy/web"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (Some(0), "Edit cancelled, no changes made.\n")
    );
    // ...and a refused change reopens the file with the error on top; saved again as it
    // was, the edit is cancelled.
    let seen = root.dir.join("seen");
    let editor = format!(
        "sh -c 'cat \"$0\" >> {}; sed -i \"s/app: web/app: other/\" \"$0\"'",
        seen.display()
    );
    let out = edit(&root, &editor, &["edit", "deploy", "web"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stderr,
        "podlab: Edit cancelled, no valid changes were saved.\n"
    );
    let seen = std::fs::read_to_string(seen).unwrap();
    assert!(
        seen.contains(
            "# deployments \"web\" was not valid:\n# * The Deployment \"web\" is invalid: "
        ),
        "{seen}"
    );
    assert_eq!(
        deployment(&root)
            .spec
            .unwrap()
            .selector
            .match_labels
            .unwrap()["app"],
        "web"
    );
    // A pod's spec is fixed but for its images.
    root.ok(&["delete", "deploy", "web"]);
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
               containers: [{name: app, image: busybox, command: [sleep, \"1000\"]}]\n";
    assert_eq!(root.apply(pod).code, Some(0));
    let out = root.run(&[
        "patch",
        "pod",
        "p",
        "-p",
        r#"{"spec":{"restartPolicy":"Never"}}"#,
    ]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.starts_with("podlab: The Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{out:?}"
    );
    assert_eq!(
        root.ok(&["patch", "pod", "p", "-p", "metadata: {labels: {x: y}}"]),
        "pod/p patched\n"
    );
    assert_eq!(root.pod("p").unwrap().metadata.labels.unwrap()["x"], "y");
    root.ok(&["delete", "pod", "p", "--now"]);
    root.assert_nothing_left();
}
