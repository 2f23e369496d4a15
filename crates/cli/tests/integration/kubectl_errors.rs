//! Integration tests: the answers of `run`, `delete` and `exec` when a name or a command is not
//! what the user thought, worded and exited as kubectl and crictl do (found as a new user
//! would, issue 13).

use std::time::Duration;

use crate::pods::{running, Root};

const LIMIT: Duration = Duration::from_secs(60);

fn sleeper(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         containers: [{{name: app, image: busybox, command: [sleep, \"1000\"]}}]\n"
    )
}

#[test]
fn run_of_an_existing_name_is_already_exists() {
    let root = Root::new("runexists");
    let first = root.run(&["run", "taken", "--image", "busybox", "--", "sleep", "1000"]);
    assert_eq!(first.code, Some(0), "{first:?}");
    let uid = root.pod("taken").unwrap().metadata.uid;
    let again = root.run(&["run", "taken", "--image", "busybox", "--", "sleep", "2"]);
    assert_eq!(again.code, Some(1), "{again:?}");
    assert!(again.stdout.is_empty(), "{again:?}");
    assert!(
        again
            .stderr
            .contains(r#"Error from server (AlreadyExists): pods "taken" already exists"#),
        "{again:?}"
    );
    // The first pod is left as it was: same object, same command.
    let pod = root.pod("taken").unwrap();
    assert_eq!(pod.metadata.uid, uid);
    let command = &pod.spec.unwrap().containers[0].args;
    assert_eq!(
        command.as_deref(),
        Some(&["sleep".into(), "1000".into()][..])
    );
}

#[test]
fn delete_of_a_missing_name_deletes_the_others_and_exits_1() {
    let root = Root::new("deletemissing");
    let out = root.apply(&sleeper("present"));
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("present", "running", LIMIT, running);
    let out = root.run(&["delete", "pod", "present", "nosuch"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stdout, "pod \"present\" deleted\n", "{out:?}");
    assert!(
        out.stderr
            .contains(r#"Error from server (NotFound): pods "nosuch" not found"#),
        "{out:?}"
    );
    assert!(root.pod("present").is_none(), "present was not deleted");
    // The order does not matter: a missing name first does not stop the ones after it.
    let out = root.apply(&sleeper("later"));
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = root.run(&["delete", "pod", "nosuch", "later"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        root.pod("later").is_none(),
        "later was not deleted: {out:?}"
    );
    root.assert_nothing_left();
}
