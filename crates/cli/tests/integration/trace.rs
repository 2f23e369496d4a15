//! Integration tests: `--trace` on `run --rm`, `apply` and `delete` prints each phase of the
//! pod's life, written by the processes that did it (the CLI, the node agent, the shim, the
//! container's init), in the order they happened, with times that add up to the total; and
//! the trace file is gone afterwards. No timing is asserted, only order and arithmetic.

use crate::pods::{Out, Root};

/// One row of the table: phase, process, AT(ms), TOOK(ms).
#[derive(Debug)]
struct Row {
    phase: String,
    process: String,
    at: f64,
    took: f64,
}

/// The rows of the trace table in `stderr` and its total.
fn table(stderr: &str) -> (Vec<Row>, f64) {
    let start = stderr
        .find("trace of ")
        .unwrap_or_else(|| panic!("no trace table in {stderr:?}"));
    let mut rows = Vec::new();
    let mut total = None;
    for line in stderr[start..].lines().skip(2) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"total") {
            total = Some(words[1].parse().unwrap());
            break;
        }
        // `#  PHASE WORDS...  PROCESS  PID  AT  TOOK`
        let n = words.len();
        assert!(n >= 6, "a row of the table: {line:?}");
        rows.push(Row {
            phase: words[1..n - 4].join(" "),
            process: words[n - 4].to_string(),
            at: words[n - 2].parse().unwrap(),
            took: words[n - 1].parse().unwrap(),
        });
    }
    (
        rows,
        total.unwrap_or_else(|| panic!("no total in {stderr:?}")),
    )
}

/// The phases of `rows`, each found after the one before it (others may come between).
fn assert_in_order(rows: &[Row], phases: &[&str]) {
    let mut next = 0;
    for phase in phases {
        match rows[next..].iter().position(|r| r.phase.starts_with(phase)) {
            Some(i) => next += i + 1,
            None => panic!("phase {phase:?} missing or out of order in {rows:#?}"),
        }
    }
}

/// Each row's time is the time since the row before, so they add up to the total (to the
/// table's rounding), and the AT column grows.
fn assert_adds_up(rows: &[Row], total: f64) {
    let sum: f64 = rows.iter().map(|r| r.took).sum();
    let rounding = 0.001 * rows.len() as f64;
    assert!(
        (sum - total).abs() <= rounding,
        "phases add up to {sum} ms, total {total} ms: {rows:#?}"
    );
    assert!(rows.windows(2).all(|w| w[0].at <= w[1].at), "{rows:#?}");
    assert!((rows.last().unwrap().at - total).abs() <= 0.001);
}

fn assert_no_trace_file(root: &Root) {
    let traces = root.dir.join("traces");
    let left: Vec<_> = std::fs::read_dir(&traces)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "trace files left behind: {left:?}");
}

/// `podlab run NAME --rm --trace -- COMMAND` in `root`, with `env` added.
fn traced_run_rm(root: &Root, name: &str, env: &[(&str, &str)], command: &[&str]) -> Out {
    let mut args = vec![
        "run",
        name,
        "--image",
        "busybox",
        "--rm",
        "--restart",
        "Never",
        "--trace",
        "--command",
        "--",
    ];
    args.extend_from_slice(command);
    let mut podlab = root.command(&args);
    podlab.envs(env.iter().copied());
    Out::of(podlab.stdin(std::process::Stdio::null()).output().unwrap())
}

#[test]
fn run_rm_trace_lists_every_phase_in_order_and_they_add_up() {
    let root = Root::new("trace-run").with_network();
    let out = traced_run_rm(&root, "t", &[], &["sh", "-c", "echo hi"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "hi\n", "the table goes to stderr, not stdout");
    let (rows, total) = table(&out.stderr);
    // The command's own phases, then the pod's removal.
    assert_in_order(
        &rows,
        &[
            "start",
            "open stores",
            "sandbox folder",
            "CNI ADD",
            "sandbox ready",
            "exit seen",
            "CNI DEL",
            "netns teardown",
            "shim exited",
            "removal",
        ],
    );
    // The ADD runs while the shim starts and pins once it is through (or was made ahead, and
    // then it is joined after): its row and the shim's come in either order.
    assert_in_order(&rows, &["sandbox folder", "namespaces", "sandbox ready"]);
    // The container: recorded once the sandbox is Ready, or before, with its start sent ahead,
    // when a warm namespace made the /etc files final (run_pod_sandbox_and_start); then its
    // mounts (made while pause still starts, when the shim took that start up then), its
    // program, its exit.
    assert_in_order(
        &rows,
        &[
            "sandbox folder",
            "CreateContainer",
            "mounts",
            "seccomp, caps, user",
            "exec, run, exit",
            "exit seen",
        ],
    );
    // Its program runs only once the shim has the sandbox up: pause's own "seccomp, caps,
    // user" comes before the shim's row, the container's after it.
    assert_in_order(
        &rows,
        &["namespaces", "seccomp, caps, user", "exec, run, exit"],
    );
    let by = |phase: &str| rows.iter().find(|r| r.phase.starts_with(phase)).unwrap();
    assert_eq!(by("namespaces").process, "shim");
    assert_eq!(by("mounts").process, "init");
    assert_eq!(by("CNI ADD").process, "podlab");
    assert_adds_up(&rows, total);
    assert_no_trace_file(&root);
}

/// Regression: `run --rm --trace` made no keeper, so a traced run was followed by the cold
/// path (the node's cgroup folders made again, pause making the network namespace) and not by
/// what follows an untraced one. The next pod now runs in the namespace the keeper made, and
/// its table says so.
#[test]
fn regression_a_traced_run_rm_leaves_the_keeper_an_untraced_one_leaves() {
    let root = Root::new("trace-keeper");
    let traced = |name: &str| {
        let env = [("PODLAB_NETWORK", "none"), ("PODLAB_ONESHOT_KEEPER", "600")];
        let out = traced_run_rm(&root, name, &env, &["true"]);
        assert_eq!(out.code, Some(0), "{out:?}");
        table(&out.stderr).0
    };
    let first = traced("first");
    assert_in_order(&first, &["start", "exit seen", "removal"]);
    let second = traced("second");
    assert!(
        second
            .iter()
            .any(|row| row.phase.starts_with("warm network namespace taken")),
        "the second pod did not take the namespace left for it: {second:#?}"
    );
    assert_eq!(root.run(&["gc"]).code, Some(0));
    assert_no_trace_file(&root);
}

#[test]
fn apply_and_delete_trace_follow_the_pod_through_the_agent() {
    let root = Root::new("trace-agent").with_network();
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: traced}\nspec:\n  \
                    terminationGracePeriodSeconds: 1\n  containers: [{name: app, image: \
                    busybox, command: [sh, -c, 'trap \"exit 0\" TERM; sleep 1000 & wait']}]\n";
    let path = root.dir.join("traced.yaml");
    std::fs::write(&path, manifest).unwrap();
    let out = root.run(&["apply", "-f", path.to_str().unwrap(), "--trace"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let (rows, total) = table(&out.stderr);
    assert_in_order(
        &rows,
        &[
            "start",
            "pod seen by the agent",
            "CNI ADD",
            "CreateContainer",
            "mounts",
            "status written (Running, Ready=True)",
            "Ready (or finished) seen",
        ],
    );
    assert_in_order(
        &rows,
        &["pod seen by the agent", "namespaces", "CreateContainer"],
    );
    let by = |phase: &str| rows.iter().find(|r| r.phase.starts_with(phase)).unwrap();
    // The agent may already work on the pod while apply still waits for it to come up.
    assert_eq!(by("store, agent start").process, "podlab");
    assert_eq!(by("pod seen by the agent").process, "agent");
    assert_eq!(by("CNI ADD").process, "agent");
    assert_adds_up(&rows, total);
    assert_no_trace_file(&root);

    let out = root.run(&["delete", "pod", "traced", "--trace"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let (rows, total) = table(&out.stderr);
    assert_in_order(
        &rows,
        &[
            "start",
            "deletion seen by the agent",
            "exec, run, exit",
            "CNI DEL",
            "netns teardown",
            "shim exited",
            // The agent marks "deleted from the store" once the deletion is visible, so the
            // command may see the pod gone (and even print the table) before that mark.
            "removal",
            "gone seen",
        ],
    );
    assert_adds_up(&rows, total);
    assert_no_trace_file(&root);
    assert!(root.pod("traced").is_none());
}

#[test]
fn podlab_trace_env_traces_run_without_rm_until_ready() {
    let root = Root::new("trace-env")
        .with_network()
        .with_env("PODLAB_TRACE", "1");
    let out = root.run(&[
        "run",
        "envtraced",
        "--image",
        "busybox",
        "--command",
        "--",
        "sh",
        "-c",
        "trap 'exit 0' TERM; sleep 1000 & wait",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "pod/envtraced created\n");
    let (rows, total) = table(&out.stderr);
    // The agent may be in the pod's ADD before the command marks its store and agent start:
    // each process's phases are in order, and Ready is seen last.
    assert_in_order(
        &rows,
        &["start", "store, agent start", "Ready (or finished) seen"],
    );
    assert_in_order(
        &rows,
        &["start", "CNI ADD", "mounts", "Ready (or finished) seen"],
    );
    let by = |phase: &str| rows.iter().find(|r| r.phase.starts_with(phase)).unwrap();
    assert_eq!(by("store, agent start").process, "podlab");
    assert_eq!(by("CNI ADD").process, "agent");
    assert_adds_up(&rows, total);
    assert_no_trace_file(&root);
    let out = root.run(&["delete", "pod", "envtraced"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("trace of delete"), "{out:?}");
    assert_no_trace_file(&root);
}
