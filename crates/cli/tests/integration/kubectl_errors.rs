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

#[test]
fn exec_of_a_missing_command_exits_127() {
    let root = Root::new("execmissing");
    let out = root.apply(&sleeper("target"));
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("target", "running", LIMIT, running);
    let out = root.run(&["exec", "target", "--", "nosuch"]);
    assert_eq!(out.code, Some(127), "{out:?}");
    assert_eq!(
        out.stderr,
        "podlab: exec failed: unable to start container process: exec: \"nosuch\": executable file not found in $PATH\n"
    );
    // Found but not executable: the shell's 126, with the errno's words.
    let out = root.run(&["exec", "target", "--", "/etc/passwd"]);
    assert_eq!(out.code, Some(126), "{out:?}");
    assert!(out.stderr.contains("permission denied"), "{out:?}");
    // A command that runs keeps its own status.
    let out = root.run(&["exec", "target", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.code, Some(7), "{out:?}");
}

#[test]
fn a_container_whose_command_does_not_exist_is_start_error_128() {
    let root = Root::new("starterror");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: nocmd}\nspec:\n  restartPolicy: Never\n  \
         containers: [{name: app, image: busybox, command: [nosuch]}]\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("nocmd", "Failed", LIMIT, |p| {
        crate::pods::phase(p) == "Failed"
    });
    let status = crate::pods::container(&pod, "app");
    let terminated = status.state.and_then(|s| s.terminated).expect("terminated");
    assert_eq!(terminated.exit_code, 128, "{terminated:?}");
    assert_eq!(terminated.reason.as_deref(), Some("StartError"));
    assert_eq!(
        terminated.message.as_deref(),
        Some("unable to start container process: exec: \"nosuch\": executable file not found in $PATH")
    );
    // The runtime agrees: its record exited with 128, and no process of it was ever left.
    let record = root.record(&crate::pods::container(&pod, "app"));
    assert_eq!(record.exit_code, Some(128));
    assert!(
        record.pid.is_none_or(
            |pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || crate::pods::is_zombie(pid)
        ),
        "{record:?}"
    );
}
