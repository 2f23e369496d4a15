//! Integration tests: `podlab get`'s printers and queries on real pods, against kubectl itself.
//! kubectl prints a pod it is given with `kubectl annotate --local -f - x- -o FORMAT` (removing
//! an annotation the pod does not have changes nothing, and every pod here has another one, so
//! that kubectl's copy is the same object). A List is flattened by `annotate`, so a template
//! over `get pods` (`{{range .items}}BODY{{end}}`) is checked against BODY printed by kubectl
//! for each item in turn.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::pods::{installed, kubectl_annotate, phase, running, Out, Root};

const PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  labels: {app: web, tier: front, paas.sogou.com/app: sogou-web}
  annotations: {note: printers}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: busybox, command: [sleep, "1000"]}
  - {name: side, image: busybox, command: [sleep, "1001"], env: [{name: MODE, value: side}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-2
  labels: {app: web, tier: back, paas.sogou.com/app: sogou-api}
  annotations: {note: printers}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: job-ok, labels: {app: job}, annotations: {note: printers}}
spec:
  restartPolicy: Never
  containers: [{name: app, image: busybox, command: ["true"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: job-fail, labels: {app: job, tier: back}, annotations: {note: printers}}
spec:
  restartPolicy: Never
  containers: [{name: app, image: busybox, command: [sh, -c, "exit 2"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: waiting, labels: {app: init}, annotations: {note: printers}}
spec:
  terminationGracePeriodSeconds: 1
  initContainers: [{name: hold, image: busybox, command: [sleep, "1000"]}]
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-3, namespace: other, labels: {app: web}, annotations: {note: printers}}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
"#;

const LIMIT: Duration = Duration::from_secs(60);

/// The root with the pods above, each in its settled state.
fn pods_root(test: &str) -> Root {
    let root = Root::new(test);
    let out = root.apply(PODS);
    assert_eq!(out.code, Some(0), "{out:?}");
    for name in ["web-1", "web-2"] {
        root.wait_pod(name, "running", LIMIT, running);
    }
    root.wait_pod("job-ok", "Succeeded", LIMIT, |p| phase(p) == "Succeeded");
    root.wait_pod("job-fail", "Failed", LIMIT, |p| phase(p) == "Failed");
    root.wait_pod("waiting", "initializing", LIMIT, |p| {
        p.status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .is_some_and(|i| {
                i.iter()
                    .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            })
    });
    let other = root.store().get::<Pod>("other", "web-3");
    let start = Instant::now();
    let mut ready = other.as_ref().is_ok_and(running);
    while !ready && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(50));
        ready = root
            .store()
            .get::<Pod>("other", "web-3")
            .is_ok_and(|p| running(&p));
    }
    assert!(ready, "other/web-3 did not run");
    root
}

/// kubectl's error and podlab's say the same: `error: X` and `podlab: X`. (Trailing blank
/// lines aside: kubectl adds no newline to a message that ends with one, podlab always does.)
fn same_error(ours: &Out, theirs: &Out) -> bool {
    let text = |s: &str, prefix: &str| s.strip_prefix(prefix).map(|t| t.trim_end().to_string());
    text(&ours.stderr, "podlab: ") == text(&theirs.stderr, "error: ")
}

/// `get ARGS -o FORMAT` by podlab for each format, and by kubectl on the JSON podlab gives for
/// the same objects, taken before and after (all again if the objects changed in between: the
/// agent writes statuses). A format with a list body is `range`d over the items by podlab and
/// printed for each item by kubectl.
fn compare(root: &Root, args: &[&str], formats: &[(String, Option<&str>)]) {
    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    for attempt in 0.. {
        let before = root.ok(&json_args);
        let ours: Vec<(String, Out)> = formats
            .iter()
            .map(|(format, body)| {
                let spec = match body {
                    Some(body) => format!("{format}{}", list_template(format, body)),
                    None => format.clone(),
                };
                let mut our_args = args.to_vec();
                our_args.extend(["-o", spec.as_str()]);
                (
                    format!("podlab {}", our_args.join(" ")),
                    root.run(&our_args),
                )
            })
            .collect();
        if root.ok(&json_args) != before && attempt < 5 {
            continue;
        }
        for ((format, body), (what, ours)) in formats.iter().zip(ours) {
            let theirs =
                kubectl_annotate(&before, &["-o", &format!("{format}{}", body.unwrap_or(""))]);
            assert_eq!(
                ours.stdout, theirs.stdout,
                "{what}: stdout differs from kubectl's"
            );
            assert_eq!(
                ours.code, theirs.code,
                "{what}: exit status: {ours:?} vs {theirs:?}"
            );
            assert!(
                same_error(&ours, &theirs),
                "{what}: stderr {ours:?} vs kubectl's {theirs:?}"
            );
        }
        return;
    }
}

/// `{{range .items}}BODY{{end}}` or `{range .items[*]}BODY{end}`.
fn list_template(format: &str, body: &str) -> String {
    if format.starts_with("go-template") {
        format!("{{{{range .items}}}}{body}{{{{end}}}}")
    } else {
        format!("{{range .items[*]}}{body}{{end}}")
    }
}

const GO_TEMPLATES: &[&str] = &[
    "{{.metadata.name}}",
    r#"{{index .metadata.labels "paas.sogou.com/app"}}"#,
    r#"{{.status.phase}} {{len .spec.containers}}{{"\n"}}"#,
    r#"{{range .status.containerStatuses}}{{.name}}:{{.restartCount}}:{{.ready}}{{"\n"}}{{end}}"#,
    r#"{{if eq .status.phase "Running"}}up{{else if eq .status.phase "Succeeded"}}done{{else}}{{.status.phase}}{{end}}"#,
    "{{range $k, $v := .metadata.labels}}{{$k}}={{$v}};{{end}}",
    r#"{{printf "%s/%s %d %v" .metadata.namespace .metadata.name (len .status.conditions) .spec.terminationGracePeriodSeconds}}"#,
    r#"{{range .status.conditions}}{{if and (eq .type "Ready") (ne .status "Unknown")}}{{.type}}={{.status}} {{.lastTransitionTime}}{{end}}{{end}}"#,
    r#"{{not .spec.hostNetwork}} {{or .spec.hostname "no-hostname"}} {{.spec.restartPolicy}}"#,
    "{{.status.podIP}} {{.status.nosuch}} {{.metadata.labels.tier}}",
    "{{.spec.containers}}",
    "{{.status}}",
    r#"{{range $i, $c := .spec.containers}}{{$i}}:{{$c.name}}{{range .env}}[{{.name}}={{.value}}]{{end}} {{end}}"#,
    // Templates that fail: kubectl's exit status, message and debugging dump.
    "{{.metadata.name",
    r#"{{template "nope"}}"#,
    "{{index .spec.containers 5}}",
    "{{len 3}}",
    "{{.metadata.name.first}}",
];

const JSONPATHS: &[&str] = &[
    "{.metadata.name}",
    r"{.metadata.labels.paas\.sogou\.com/app}",
    "{.spec.containers[*].name}",
    r#"{range .status.conditions[*]}{.type}={.status}{"\n"}{end}"#,
    r#"{.status.conditions[?(@.type=="Ready")].status}"#,
    r#"{.status.containerStatuses[?(@.restartCount==0)].name}"#,
    "{..image}",
    "{.spec.containers[0:1].command}",
    "{.spec.containers[-1:].name}",
    r#"{"\t"}{.status.phase}{"\n"}"#,
    "{.spec}",
    "{.status.nosuch}",
    "{.metadata.labels}",
    // Failing ones.
    "{.metadata.name",
    "{.spec.containers[5].name}",
    "{.status.phase[?(@]}",
];

#[test]
fn templates_print_what_kubectl_prints_for_the_same_pods() {
    crate::skip_unless!(installed("kubectl"), "kubectl is not installed");
    let root = pods_root("templates");
    let single: Vec<(String, Option<&str>)> = GO_TEMPLATES
        .iter()
        .map(|t| (format!("go-template={t}"), None))
        .chain(JSONPATHS.iter().map(|t| (format!("jsonpath={t}"), None)))
        .collect();
    for pod in ["web-1", "job-fail", "waiting"] {
        compare(&root, &["get", "pod", pod], &single);
    }
    // Over lists: `range .items` with each body, kubectl printing it for every item in order.
    let go = |body| vec![("go-template=".to_string(), Some(body))];
    let jsonpath = |body| vec![("jsonpath=".to_string(), Some(body))];
    compare(
        &root,
        &["get", "pods"],
        &go(r#"{{.metadata.name}} {{.status.phase}}{{"\n"}}"#),
    );
    compare(
        &root,
        &["get", "pods", "-l", "app=web"],
        &go(r#"{{index .metadata.labels "paas.sogou.com/app"}}{{"\n"}}"#),
    );
    compare(
        &root,
        &["get", "pods", "-A", "--sort-by", ".metadata.name"],
        &go(
            r#"{{.metadata.namespace}}/{{.metadata.name}} {{range .status.containerStatuses}}{{.name}} {{end}}{{"\n"}}"#,
        ),
    );
    compare(
        &root,
        &["get", "pods"],
        &jsonpath(r#"{.metadata.name}{"\t"}{.status.phase}{"\n"}"#),
    );
    compare(
        &root,
        &["get", "pods", "--field-selector", "status.phase=Running"],
        &jsonpath(r#"{.metadata.name}{" "}{.status.containerStatuses[*].ready}{"\n"}"#),
    );
}

/// The names `get pods ARGS` prints, one per line (`-o name` without the `pod/`).
fn names(root: &Root, args: &[&str]) -> Vec<String> {
    let mut all = vec!["get", "pods"];
    all.extend(args);
    all.extend(["-o", "name"]);
    root.ok(&all)
        .lines()
        .map(|l| l.trim_start_matches("pod/").to_string())
        .collect()
}

#[test]
fn selectors_and_sorting_pick_and_order_the_pods_and_bad_ones_change_nothing() {
    let root = pods_root("queries");
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--field-selector", "status.phase=Running"],
            &["web-1", "web-2"],
        ),
        (
            &[
                "--field-selector",
                "status.phase!=Running,spec.restartPolicy=Never",
            ],
            &["job-fail", "job-ok"],
        ),
        (
            &["--field-selector", "metadata.name==waiting"],
            &["waiting"],
        ),
        (&["--field-selector", "status.phase=Pending"], &["waiting"]),
        (
            &["-A", "--field-selector", "metadata.namespace=other"],
            &["web-3"],
        ),
        (&["-l", "app=web"], &["web-1", "web-2"]),
        (&["-A", "-l", "app=web"], &["web-1", "web-2", "web-3"]),
        (&["-n", "other"], &["web-3"]),
        (
            &["-l", "app in (job,init),tier!=back"],
            &["job-ok", "waiting"],
        ),
        (
            &["-l", "app notin (web)"],
            &["job-fail", "job-ok", "waiting"],
        ),
        (&["-l", "!tier"], &["job-ok", "waiting"]),
        (
            &["-l", "tier", "--field-selector", "status.phase=Running"],
            &["web-1", "web-2"],
        ),
        (&["-l", "paas.sogou.com/app=sogou-api"], &["web-2"]),
        (
            &["--sort-by", ".status.phase"],
            &["job-fail", "waiting", "web-1", "web-2", "job-ok"],
        ),
        (
            &["--sort-by", "{.metadata.labels.tier}", "-l", "tier"],
            &["job-fail", "web-2", "web-1"],
        ),
        (&["-l", "app=none"], &[]),
    ];
    for (args, want) in cases {
        assert_eq!(names(&root, args), *want, "get pods {args:?}");
    }
    // The table has the NAMESPACE column with -A, and the labels with --show-labels.
    let table = root.ok(&["get", "pods", "-A", "-l", "app=web", "--show-labels"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "LABELS"
        ]
    );
    assert!(
        table.contains("app=web,paas.sogou.com/app=sogou-web,tier=front"),
        "{table}"
    );
    let sorted = root.ok(&["get", "pods", "--sort-by", ".metadata.name", "--no-headers"]);
    let first: Vec<&str> = sorted
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(first, ["job-fail", "job-ok", "waiting", "web-1", "web-2"]);

    // Malformed selectors, templates and formats: a clear error, exit 1, nothing printed or changed.
    let snapshot = |root: &Root| -> Vec<(String, String, Option<i64>)> {
        let (pods, _) = root.store().list::<Pod>(None).unwrap();
        pods.into_iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap(),
                    p.metadata.uid.clone().unwrap(),
                    p.metadata.generation,
                )
            })
            .collect()
    };
    let before = snapshot(&root);
    let bad: &[(&[&str], &str)] = &[
        (&["-l", "app in (web"], "unable to parse requirement"),
        (&["-l", "=web"], "found '='"),
        (&["-l", "a b"], "unable to parse requirement"),
        (&["--field-selector", "status.phase"], "invalid selector"),
        (
            &["--field-selector", "spec.nosuch=x"],
            "field label not supported",
        ),
        (&["-o", "jsonpath={.metadata.name"], "unclosed action"),
        (&["-o", "go-template={{.metadata.name"], "unclosed action"),
        (
            &["-o", "go-template={{nosuchfunc .}}"],
            "function \"nosuchfunc\" not defined",
        ),
        (&["--sort-by", "{.metadata.name"], "unclosed action"),
        (&["-o", "bogus"], "bogus"),
        (&["--index", "nosuch=x"], "no index"),
    ];
    for (args, message) in bad {
        let mut all = vec!["get", "pods"];
        all.extend(*args);
        let out = root.run(&all);
        assert_eq!(out.code, Some(1), "get pods {args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "get pods {args:?} printed: {out:?}");
        assert!(
            out.stderr.starts_with("podlab: ") && out.stderr.contains(message),
            "get pods {args:?}: {out:?}"
        );
    }
    assert_eq!(snapshot(&root), before, "a refused query changed the pods");
}
