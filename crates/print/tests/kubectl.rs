//! podlab-print against the real kubectl: the same objects, served to `kubectl get` by a fake API
//! server on loopback, printed through both, byte for byte (stdout, stderr and success). This is
//! what `podlab get ... -o ...` must match. Skipped (with a message) when kubectl is missing.

mod support;

use podlab_print::{kubectl_list, render, OutputFormat, SortBy, SortTarget};
use serde_json::Value;
use support::{kubectl_error, kubectl_path, ApiServer, Printed, Report};

/// Which objects a case prints: `get pods` (a List), `get pod NAME` (one object), or the same
/// for replicasets and events.
#[derive(Clone, Copy)]
enum Target {
    Pods,
    Pod(&'static str),
    ReplicaSets,
    ReplicaSet(&'static str),
    Events,
}

impl Target {
    fn args(self) -> Vec<&'static str> {
        match self {
            Target::Pods => vec!["get", "pods"],
            Target::Pod(n) => vec!["get", "pod", n],
            Target::ReplicaSets => vec!["get", "replicasets"],
            Target::ReplicaSet(n) => vec!["get", "replicaset", n],
            Target::Events => vec!["get", "events"],
        }
    }

    /// What `podlab get` hands to the printer: the object, or kubectl's List of the items.
    fn object(self) -> Value {
        match self {
            Target::Pods => kubectl_list(support::pods()),
            Target::Pod(n) => support::pod(n),
            Target::ReplicaSets => kubectl_list(support::replicasets()),
            Target::ReplicaSet(_) => support::replicasets().remove(0),
            Target::Events => kubectl_list(support::events()),
        }
    }
}

fn ours(spec: &str, object: &Value) -> Printed {
    let mut out = String::new();
    let result = OutputFormat::parse(spec).and_then(|f| render(&f, object, false, &mut out));
    Printed {
        stdout: out,
        stderr: result
            .as_ref()
            .err()
            .map(|e| kubectl_error(&e.to_string()))
            .unwrap_or_default(),
        success: result.is_ok(),
    }
}

/// Runs `-o SPEC` for every (target, template) through both and compares.
fn compare_outputs(what: &str, prefix: &str, cases: &[(Target, &str, bool)]) {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let server = ApiServer::start(kubectl);
    let mut report = Report::default();
    for (target, template, unordered) in cases {
        let spec = format!("{prefix}{template}");
        let mut args = target.args();
        args.extend(["-o", spec.as_str()]);
        let theirs = server.kubectl(&args);
        let mine = ours(&spec, &target.object());
        report.compare(&args.join(" "), &mine, &theirs, *unordered);
    }
    report.finish(what);
}

use Target::*;

#[test]
fn jsonpath_matches_kubectl() {
    let cases: &[(Target, &str, bool)] = &[
        (Pods, "{.items[*].metadata.name}", false),
        (
            Pods,
            r#"{range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end}"#,
            false,
        ),
        (
            Pods,
            r#"{range .items[*]}[{.metadata.name}]{range .spec.containers[*]}<{.name}>{end}{"\n"}{end}"#,
            false,
        ),
        (
            Pods,
            r#"{.items[?(@.status.phase=="Running")].metadata.name}"#,
            false,
        ),
        (
            Pods,
            r#"{.items[?(@.status.phase!="Running")].metadata.name}"#,
            false,
        ),
        (
            Pods,
            "{.items[?(@.status.containerStatuses[0].restartCount>2)].metadata.name}",
            false,
        ),
        (
            Pods,
            "{.items[?(@.status.containerStatuses[0].restartCount>=1)].metadata.name}",
            false,
        ),
        (
            Pods,
            "{.items[?(@.status.containerStatuses[0].restartCount<1)].metadata.name}",
            false,
        ),
        (
            Pods,
            "{.items[?(@.status.containerStatuses[0].restartCount<=1)].metadata.name}",
            false,
        ),
        (Pods, "{.items[?(@.status.podIP)].metadata.name}", false),
        (
            Pods,
            "{.items[?(@.metadata.labels.tier)].metadata.name}",
            false,
        ),
        (
            Pods,
            "{.items[?(@.status.containerStatuses[0].ready==true)].metadata.name}",
            false,
        ),
        (
            Pods,
            r#"{.items[?(@.status.phase<"Q")].metadata.name}"#,
            false,
        ),
        (
            Pods,
            "{.items[?(@.spec.restartPolicy=='Never')].metadata.name}",
            false,
        ),
        (Pods, "{.items[0:2].metadata.name}", false),
        (Pods, "{.items[::2].metadata.name}", false),
        (Pods, "{.items[-2:].metadata.name}", false),
        (Pods, "{.items[1:-1].metadata.name}", false),
        (Pods, "{.items[0,1].metadata.name}", false),
        (Pods, "{.items[-1].metadata.name}", false),
        (
            Pods,
            "{.items[*].status.containerStatuses[*].restartCount}",
            false,
        ),
        (Pods, "{..restartCount}", false),
        (
            Pods,
            "{.items[*].metadata.labels.paas\\.sogou\\.com/app}",
            false,
        ),
        (
            Pods,
            "{.items[*].metadata.labels['paas.sogou.com/app']}",
            false,
        ),
        (
            Pods,
            r#"{range .items[?(@.status.phase=="Failed")]}{.metadata.name}: {.status.message}{end}"#,
            false,
        ),
        (Pods, "{.kind} {.apiVersion} {.metadata}", false),
        (Pods, "{.items[2].spec.containers[*].ports}", false),
        (Pods, "{.items[*].spec.containers[*].image}", false),
        (Pods, "{.items[4].metadata.annotations}", false),
        (
            Pods,
            "{.items[0].metadata.annotations.podlab\\.io/note}",
            false,
        ),
        (Pods, "{.items[2]..name}", true),
        (Pods, "{.items[0].metadata.labels.*}", true),
        (Pods, "{.items[*].status.podIPs[*].ip}", false),
        (Pod("db-0"), "{.metadata.name}", false),
        (
            Pod("db-0"),
            "{.spec.containers[*].ports[*].containerPort}",
            false,
        ),
        (
            Pod("db-0"),
            "{.spec.containers[?(@.ports[0].containerPort==5432)].name}",
            false,
        ),
        (
            Pod("db-0"),
            r#"{.spec.containers[?(@.name=="exporter")].ports[?(@.containerPort>9187)].containerPort}"#,
            false,
        ),
        (
            Pod("db-0"),
            "{.status.containerStatuses[?(@.ready)].name}",
            false,
        ),
        (
            Pod("db-0"),
            r#"{range .status.containerStatuses[*]}{.name}={.restartCount}{"\n"}{end}"#,
            false,
        ),
        (Pod("db-0"), "{@.kind} {$.metadata.namespace}", false),
        (
            Pod("db-0"),
            "{.spec.containers[0:0]}{.spec.containers[-1].name}",
            false,
        ),
        (Pod("db-0"), "{['kind','apiVersion']}", false),
        (
            Pod("db-0"),
            r#"{.metadata.name}{"\x41"}{"\u00e9"}{"a\"b"}{'c\'d'}"#,
            false,
        ),
        (
            Pod("db-0"),
            "{.nope}x{.metadata.nope}y{.metadata.name.x}{.spec.containers[*].x}",
            false,
        ),
        (
            Pod("db-0"),
            "{.spec.terminationGracePeriodSeconds} {.status.containerStatuses[0].ready}",
            false,
        ),
        (Pod("db-0"), "{.status}", false),
        (Pod("db-0"), "text only", false),
        (Pod("crash"), "{.metadata.annotations}", false),
        (
            Pod("crash"),
            "{.status.containerStatuses[0].state.terminated}",
            false,
        ),
        (
            Pod("web-7d4b9c-abcde"),
            "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
            false,
        ),
        (Pod("web-7d4b9c-abcde"), "{.metadata.annotations}", false),
        (
            ReplicaSets,
            "{.items[*].spec.selector.matchExpressions[*].values}",
            false,
        ),
        (
            ReplicaSet("web-7d4b9c"),
            "{.spec.replicas} {.status.readyReplicas}/{.status.replicas}",
            false,
        ),
        (
            Events,
            "{range .items[*]}{.reason}: {.message} x{.count}{end}",
            false,
        ),
        // Templates kubectl refuses (parse errors) or fails on (execution errors).
        (Pods, "{.items[0].metadata.name", false),
        (Pods, "{.kind,.apiVersion}", false),
        (Pods, r#"{.items[0]["metadata"]}"#, false),
        (
            Pods,
            r#"{.items[?(@.status.phase=~"R.*")].metadata.name}"#,
            false,
        ),
        (Pods, "{.items[?(!@.status.podIP)].metadata.name}", false),
        (Pods, "{.items[a]}", false),
        (Pods, r#"{.items[?(@.x=="y"]}"#, false),
        (Pods, r#"{"abc}"#, false),
        (Pods, "{....name}", false),
        (Pods, "{.items[10:].metadata.name}", false),
        (Pods, "{.items[3:1].metadata.name}", false),
        (Pods, "{.items[::0].metadata.name}", false),
        (Pods, "{end}", false),
        (Pods, "{range .items[*]}{.metadata.name}{end}{end}", false),
        (
            Pods,
            r#"{.items[?(@.spec.containers[*].name=="nginx")].metadata.name}"#,
            false,
        ),
        (
            Pods,
            r#"{.items[?(@.status.containerStatuses[0].restartCount<"a")].metadata.name}"#,
            false,
        ),
        (Pod("db-0"), "{.spec.containers[5]}", false),
        (Pod("db-0"), "{.metadata.name[0]}", false),
        (
            Pod("db-0"),
            "{.spec.containers[?(@.name==main)].image}",
            false,
        ),
        (
            Pod("db-0"),
            "{.spec.containers[?(@.name==true)].name}",
            false,
        ),
        (Pod("db-0"), "{.metadata.labels[?(@.app)]}", false),
        (Pod("db-0"), "{unknown}", false),
    ];
    compare_outputs("jsonpath", "jsonpath=", cases);
}

#[test]
fn go_template_matches_kubectl() {
    let cases: &[(Target, &str, bool)] = &[
        // The seed's templates.
        (Pods, r#"{{range .items}}{{ range $key, $value := .metadata.labels }}{{if eq $key "paas.sogou.com/app"}}{{$value}}{{"\n"}}{{end}}{{end}}{{end}}"#, false),
        (Pod("web-7d4b9c-abcde"), r#"{{index .metadata.labels "paas.sogou.com/app"}}"#, false),
        (Pods, r#"{{range .items}}{{index .metadata.labels "paas.sogou.com/app"}}{{"\n"}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{.metadata.name}} {{.status.phase}}{{"\n"}}{{end}}"#, false),
        (Pods, r#"{{range $i, $p := .items}}{{$i}}:{{$p.metadata.name}} {{end}}"#, false),
        (Pods, r#"{{range .items}}{{if eq .status.phase "Running"}}{{.metadata.name}} {{else if eq .status.phase "Pending"}}({{.metadata.name}}) {{else}}[{{.metadata.name}}] {{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{if and .status.podIP (ne .status.phase "Failed")}}{{.status.podIP}} {{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{if or (eq .status.phase "Failed") (eq .status.phase "Succeeded")}}{{.metadata.name}} {{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{if not .status.podIP}}{{.metadata.name}} {{end}}{{end}}"#, false),
        (Pods, r#"{{len .items}} {{(index .items 0).metadata.name}} {{index .items 2 "metadata" "name"}}"#, false),
        (Pods, r#"{{range .items}}{{printf "%-20s %-10s %3d\n" .metadata.name .status.phase (len .spec.containers)}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{range .status.containerStatuses}}{{printf "%s=%d " .name .restartCount}}{{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{with .status.containerStatuses}}{{(index . 0).state}}{{"\n"}}{{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{range $k, $v := .metadata.labels}}{{$k}}={{$v}};{{end}}{{"\n"}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{.metadata.labels}}{{"\n"}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{.metadata.nope}} {{index .metadata.labels "nope"}} {{.status.podIP}}{{"\n"}}{{end}}"#, false),
        (Pods, r#"{{- range .items -}}{{ .metadata.name }}{{- "\n" -}}{{- end -}}"#, false),
        (Pods, r#"{{/* a comment */}}{{$n := len .items}}{{$n}} pods{{"\n"}}"#, false),
        (Pods, r#"{{range .items}}{{if gt (len .spec.containers) 1}}{{.metadata.name}}{{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{range .status.containerStatuses}}{{if ge .restartCount 3}}{{.name}} {{end}}{{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{if lt .metadata.name "d"}}{{.metadata.name}} {{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{with $c := index .spec.containers 0}}{{$c.image}} {{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{if exists .metadata "labels" "tier"}}{{.metadata.labels.tier}} {{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{.metadata.name | printf "%q"}} {{end}}"#, false),
        (Pods, r#"{{range .items}}{{print .metadata.name (len .metadata.name)}}{{println}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{if .status.podIP}}{{.status.podIP}}{{break}}{{end}}{{end}}"#, false),
        (Pods, r#"{{range .items}}{{if not .status.podIP}}{{continue}}{{end}}{{.metadata.name}} {{end}}"#, false),
        (Pods, r#"{{range .items}}{{.nope}}{{else}}none{{end}}{{range .metadata.nope}}x{{else}}empty{{end}}"#, false),
        (Pods, r#"{{define "row"}}{{.metadata.name}}/{{.status.phase}}{{end}}{{range .items}}{{template "row" .}} {{end}}"#, false),
        (Pods, r#"{{.kind}} {{.metadata}} {{.apiVersion}}"#, false),
        (Pods, r#"{{range .items}}{{slice .metadata.name 0 3}} {{end}}"#, false),
        (Pods, r#"{{range .items}}{{html .metadata.annotations}}|{{js .metadata.name}}|{{urlquery .metadata.name}} {{end}}"#, false),
        (Pod("db-0"), "{{.metadata.name}}", false),
        (Pod("db-0"), "{{.spec.containers}}", false),
        (Pod("db-0"), "{{.spec.terminationGracePeriodSeconds}} {{printf \"%d %v %T\" .spec.terminationGracePeriodSeconds .status.containerStatuses .status}}", false),
        (Pod("db-0"), r#"{{range .spec.containers}}{{.name}}:{{range .ports}}{{.containerPort}},{{end}};{{end}}"#, false),
        (Pod("db-0"), "{{$.kind}} {{$}}", false),
        (Pod("db-0"), "{{eq .status.nope \"x\"}} {{eq .kind \"Pod\" \"Job\"}} {{ne .kind \"Pod\"}}", false),
        (Pod("crash"), "{{.metadata.annotations}}", false),
        (Pod("crash"), r#"{{index .metadata.annotations "podlab.io/multi"}}"#, false),
        (Pod("crash"), "{{(index .status.containerStatuses 0).state.terminated.exitCode}}", false),
        (Pod("bare"), "{{.metadata.labels}} {{.spec.nodeName}} {{len .metadata.annotations}}", false),
        (ReplicaSet("web-7d4b9c"), "{{.spec.replicas}} {{.spec.selector.matchLabels.app}} {{range .spec.selector.matchExpressions}}{{.key}} {{.operator}} {{.values}}{{end}}", false),
        (Events, "{{range .items}}{{.reason}} {{.count}} {{.involvedObject.kind}}/{{.involvedObject.name}}{{end}}", false),
        // Templates kubectl refuses or fails on.
        (Pod("db-0"), "{{.metadata.name", false),
        (Pod("db-0"), "{{if .kind}}x", false),
        (Pod("db-0"), "{{end}}", false),
        (Pod("db-0"), "{{range .items}}{{else}}{{else}}{{end}}", false),
        (Pod("db-0"), "{{.kind nope}}", false),
        (Pod("db-0"), "{{$x}}", false),
        (Pod("db-0"), "{{(1}}", false),
        (Pod("db-0"), "{{\"abc}}", false),
        (Pod("db-0"), "{{| .kind}}", false),
        (Pod("db-0"), "{{.kind | 1}}", false),
        (Pod("db-0"), "{{break}}", false),
        (Pod("db-0"), "{{base64encode .kind}}", false),
        (Pod("db-0"), "{{.spec.containers.x}}", false),
        (Pod("db-0"), "{{.metadata.name}} then {{.kind.x}}", false),
        (Pod("db-0"), "{{index .spec.containers 5}}", false),
        (Pod("db-0"), "{{index .metadata.labels 1}}", false),
        (Pod("db-0"), "{{len .metadata.nope}}", false),
        (Pod("db-0"), "{{eq .kind 1}}", false),
        (Pod("db-0"), "{{lt .spec.terminationGracePeriodSeconds 1.5}}", false),
        (Pod("db-0"), "{{range .kind}}x{{end}}", false),
        (Pod("db-0"), "{{template \"nope\"}}", false),
        (Pod("db-0"), "{{nil}}", false),
        (Pod("db-0"), "{{.metadata nil}}", false),
        (Pod("db-0"), "line one\n{{.metadata.nope.x}}\n{{.metadata.name.x}}", false),
    ];
    compare_outputs("go-template", "go-template=", cases);
}

#[test]
fn custom_columns_match_kubectl() {
    let cases: &[(Target, &str, bool)] = &[
        (Pods, "NAME:.metadata.name,IP:.status.podIP,NODE:.spec.nodeName", false),
        (Pods, "NAME:.metadata.name,CONTAINERS:.spec.containers[*].name,RESTARTS:.status.containerStatuses[*].restartCount", false),
        (Pods, "NAME:{.metadata.name},LABELS:.metadata.labels", false),
        (Pods, "NAME:.metadata.name,PORTS:.spec.containers[*].ports[*].containerPort", false),
        (Pods, "NAME:.metadata.name,APP:.metadata.labels.paas\\.sogou\\.com/app", false),
        (Pods, "lower:.kind,ANN:.metadata.annotations", false),
        (Pods, "NAME:.metadata.name,READY:.status.containerStatuses[?(@.ready==true)].name", false),
        (Pods, "NAME:metadata.name,PHASE:status.phase", false),
        (Pods, "A:.metadata.name, B:.status.phase", false),
        (Pods, "NAME:.metadata.name:x", false),
        (Pod("db-0"), "NAME:.metadata.name,STARTED:.status.containerStatuses[*].state.running.startedAt", false),
        (ReplicaSets, "NAME:.metadata.name,DESIRED:.spec.replicas,READY:.status.readyReplicas", false),
        (Events, "REASON:.reason,OBJECT:.involvedObject.name,COUNT:.count", false),
        // Specs kubectl refuses.
        (Pods, "NAME", false),
        (Pods, "", false),
        (Pods, "NAME:.metadata.name,BAD:.a[", false),
        (Pods, "NAME:{.a}{.b}", false),
        (Pods, "NAME:.metadata.name[9]", false),
    ];
    compare_outputs("custom-columns", "custom-columns=", cases);
}

#[test]
fn json_yaml_and_name_match_kubectl() {
    let cases: &[(Target, &str, bool)] = &[
        (Pods, "json", false),
        (Pods, "yaml", false),
        (Pods, "name", false),
        (Pod("crash"), "json", false),
        (Pod("crash"), "yaml", false),
        (Pod("web-7d4b9c-abcde"), "yaml", false),
        (Pod("bare"), "name", false),
        (ReplicaSets, "yaml", false),
        (ReplicaSet("web-7d4b9c"), "json", false),
        (ReplicaSet("web-7d4b9c"), "name", false),
        (Events, "yaml", false),
        (Events, "name", false),
        (
            Pods,
            "jsonpath-as-json={.items[*].metadata.name}{.kind}",
            false,
        ),
        (Pods, "template={{len .items}}", false),
        (Pods, "xyz", false),
        (Pods, "jsonpath", false),
        (Pods, "go-template", false),
        (Pods, "custom-columns", false),
        (Pods, "go-template-file=/nonexistent/podlab-template", false),
        (
            Pods,
            "custom-columns-file=/nonexistent/podlab-columns",
            false,
        ),
    ];
    compare_outputs("json/yaml/name", "", cases);
}

#[test]
fn template_files_match_kubectl() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let server = ApiServer::start(kubectl);
    let dir = support::TempDir::new("templates");
    let write = |name: &str, text: &str| {
        let p = dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let jp = write(
        "jp.txt",
        "{range .items[*]}{.metadata.name}{\"\\n\"}{end}\n",
    );
    let gt = write("gt.txt", "{{range .items}}{{.metadata.name}}\n{{end}}");
    let cc = write("cc.txt", "NAME    IP\n.metadata.name   {.status.podIP}\n");
    let bad = write("bad.txt", "NAME IP\n.metadata.name\n");
    let mut report = Report::default();
    for spec in [
        format!("jsonpath-file={jp}"),
        format!("go-template-file={gt}"),
        format!("templatefile={gt}"),
        format!("custom-columns-file={cc}"),
        format!("custom-columns-file={bad}"),
    ] {
        let theirs = server.kubectl(&["get", "pods", "-o", &spec]);
        let mine = ours(&spec, &Target::Pods.object());
        report.compare(&spec, &mine, &theirs, false);
    }
    report.finish("template files");
}

#[test]
fn sort_by_matches_kubectl() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let server = ApiServer::start(kubectl);
    let mut report = Report::default();
    let paths = [
        ".metadata.name",
        "{.metadata.creationTimestamp}",
        "status.podIP",
        ".status.phase",
        ".status.containerStatuses[0].restartCount",
        ".spec.nodeName",
        ".metadata.labels.app",
        ".spec.containers[0].ports[0].containerPort",
        ".nope",
        ".status",
        ".status.containerStatuses[0].ready",
        "{.a}{.b}",
        "{.a",
    ];
    for path in paths {
        for target in [Target::Pods, Target::Pod("db-0")] {
            let mut args = target.args();
            let sort_flag = format!("--sort-by={path}");
            args.extend([sort_flag.as_str(), "-o", "name"]);
            let theirs = server.kubectl(&args);
            let mut items = match target {
                Target::Pods => support::pods(),
                _ => vec![target.object()],
            };
            let sorted = SortBy::new(path).sort(&mut items, SortTarget::Objects);
            let mine = match sorted {
                Ok(()) => {
                    let printed = if items.len() == 1 && !matches!(target, Target::Pods) {
                        items.remove(0)
                    } else {
                        kubectl_list(items)
                    };
                    ours("name", &printed)
                }
                Err(e) => Printed {
                    stdout: String::new(),
                    stderr: kubectl_error(&e.to_string()),
                    success: false,
                },
            };
            report.compare(&args.join(" "), &mine, &theirs, false);
        }
    }
    report.finish("sort-by");
}

/// The issue's own check: `podlab get pod X -o jsonpath=T` equals what
/// `kubectl annotate --local -f - x- -o jsonpath=T` prints when fed `podlab get pod X -o json`.
#[test]
fn annotate_local_on_our_json_matches() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let server = ApiServer::start(kubectl);
    let mut report = Report::default();
    let odd = support::fixture("odd.json");
    let objects = [
        support::pod("web-7d4b9c-abcde"),
        support::pod("crash"),
        support::pod("backup-28012345"),
        odd,
    ];
    let templates = [
        "jsonpath={.metadata.name} {.status.phase}{\"\\n\"}",
        "jsonpath={range .spec.containers[*]}{.name}={.image}{\"\\n\"}{end}",
        "jsonpath={.x}|{.x.arr[*]}|{.x.n}|{.x.f}|{.x.big}|{.x.e}|{.x.huge}",
        "jsonpath={.x.arr[?(@.k==\"v\")]}",
        "jsonpath={.x.s[*]}",
        "go-template={{index .metadata.labels \"paas.sogou.com/app\"}}",
        "go-template={{.x.n}}|{{.x.f}}|{{.x.big}}|{{.x.e}}|{{.x.i}}|{{.x.fl}}|{{.x.huge}}|{{.x.arr}}|{{.x.m}}",
        "go-template={{printf \"%d|%v|%5s|%-5s|%q|%x|%T\" .x.i .x.m \"ab\" \"cd\" .x.s .x.f .x.fl}}",
        "go-template={{range $i, $v := .x.arr}}{{$i}}:{{$v}} {{end}}{{range $k, $v := .x.m}}{{$k}}={{$v}};{{end}}",
        "go-template={{js .x.s}} {{html .x.s}} {{urlquery .x.s}} {{len .x.s}} {{slice .x.s 1 3}}",
        "go-template={{eq .x.i 1234567}} {{lt .x.f 1.0}} {{and .x.t .x.s}} {{or .x.n .x.emptym \"z\"}}",
        "go-template={{.x.n.y}}",
        "go-template={{base64decode \"aGVsbG8=\"}} {{exists .x \"m\" \"a\"}}",
    ];
    for object in &objects {
        let json_text = ours("json", object).stdout;
        for t in templates {
            let theirs = server.annotate_local(&json_text, &["-o", t]);
            let mine = ours(t, object);
            let name = object["metadata"]["name"].as_str().unwrap_or("?");
            report.compare(&format!("{name} -o {t}"), &mine, &theirs, false);
        }
    }
    report.finish("annotate --local");
}

/// Label selector syntax and validation errors, against kubectl's own parser
/// (`kubectl set selector --local` parses with labels.Parse).
#[test]
fn label_selector_errors_match_kubectl() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let server = ApiServer::start(kubectl);
    let pod = ours("json", &support::pod("db-0")).stdout;
    let mut report = Report::default();
    let long = format!("{}=b", "a".repeat(70));
    let selectors = [
        "a in (b",
        "a=b,c",
        "x in (foo,,baz),y,z notin ()",
        "bad key",
        "a==b",
        "!a",
        "a in ()",
        "a=b=c",
        "a,",
        ",a",
        "a=(b)",
        "Bad_/x=y",
        "a=b c",
        "a=-bad-",
        "app.kubernetes.io/name=web",
        &long,
        "a=b,!c,d notin (x,y)",
        "a notin",
        "a in b",
        "(a)",
        "a=b)",
        "a=!b",
        "a=b,,c",
        "a/b/c=d",
        "/a=b",
        "a/=b",
        "a=b,a=c",
        "in in (in)",
    ];
    for s in selectors {
        let theirs = server.kubectl_local(
            &["set", "selector", "--local", "-f", "-", s, "-o", "name"],
            Some(&pod),
        );
        let kubectl_says_syntax = theirs.stderr.contains("couldn't parse the selector string");
        let mine = podlab_print::LabelSelector::parse(s);
        report.checked += 1;
        match (&mine, kubectl_says_syntax) {
            (Ok(_), false) => {}
            (Err(e), true) => {
                let expected = format!(
                    "error: couldn't parse the selector string {}: {e}\n",
                    quote(s)
                );
                if theirs.stderr != expected {
                    report.failures.push(format!(
                        "selector {s:?}: kubectl {:?}, podlab {expected:?}",
                        theirs.stderr
                    ));
                }
            }
            _ => report.failures.push(format!(
                "selector {s:?}: kubectl {:?}, podlab {:?}",
                theirs.stderr, mine
            )),
        }
    }
    report.finish("label selectors");
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The table writer against kubectl's table printer, fed the API server's pod Table.
#[test]
fn tables_match_kubectl() {
    use podlab_print::{Row, Table, TableOptions};
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let server = ApiServer::start(kubectl);
    let mut report = Report::default();
    let cases: &[(&[&str], bool, TableOptions)] = &[
        (&[], false, TableOptions::default()),
        (&["-o", "wide"], true, TableOptions::default()),
        (
            &["--no-headers"],
            false,
            TableOptions {
                no_headers: true,
                ..Default::default()
            },
        ),
        (
            &["--show-labels"],
            false,
            TableOptions {
                show_labels: true,
                ..Default::default()
            },
        ),
        (
            &["-o", "wide", "--show-labels", "--no-headers"],
            true,
            TableOptions {
                show_labels: true,
                no_headers: true,
                ..Default::default()
            },
        ),
        (
            &["-L", "app,paas.sogou.com/app"],
            false,
            TableOptions {
                label_columns: vec!["app".into(), "paas.sogou.com/app".into()],
                ..Default::default()
            },
        ),
        (
            &["-A", "-L", "app"],
            false,
            TableOptions {
                with_namespace: true,
                label_columns: vec!["app".into()],
                ..Default::default()
            },
        ),
        (
            &["-L", "tier", "--show-labels"],
            false,
            TableOptions {
                label_columns: vec!["tier".into()],
                show_labels: true,
                ..Default::default()
            },
        ),
    ];
    for (flags, wide, options) in cases {
        let mut args = vec!["get", "pods"];
        args.extend_from_slice(flags);
        let theirs = server.kubectl(&args);
        let columns: Vec<&str> = support::POD_COLUMNS
            .iter()
            .filter(|(_, p)| *wide || *p == 0)
            .map(|(n, _)| *n)
            .collect();
        let mut table = Table::new(columns.iter().copied());
        for pod in support::pods() {
            let cells: Vec<String> = support::pod_cells(&pod)
                .into_iter()
                .take(columns.len())
                .collect();
            table.push(Row::new(cells).metadata_of(&pod));
        }
        let mine = Printed {
            stdout: table.render(options),
            stderr: String::new(),
            success: true,
        };
        report.compare(&args.join(" "), &mine, &theirs, false);
    }
    report.finish("tables");
}
