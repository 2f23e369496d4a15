//! `podlab describe pod NAME`: the pod as `kubectl describe` shows it: identity, status, each
//! container's state and last state, conditions, volumes, and the events about it.

use anyhow::Result;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerState, ContainerStatus, Event, Pod, PodSpec, Probe,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::columns::human_duration;
use crate::context::Ctx;

pub fn run(name: &str, namespace: &str) -> Result<()> {
    let ctx = Ctx::open()?;
    let pod: Pod = ctx.store.get(namespace, name)?;
    let (events, _) = ctx.store.list::<Event>(Some(namespace))?;
    let uid = pod.metadata.uid.clone();
    let mut events: Vec<Event> = events
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Pod") && e.involved_object.uid == uid
        })
        .collect();
    // kubectl sorts them by their last time (SortableEvents).
    events.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .or(e.first_timestamp.as_ref())
            .map(|t| t.0)
    });
    print!("{}", describe(&pod, &events, crate::columns::now()));
    Ok(())
}

/// kubectl's `PrefixWriter`: each line indented by its level (two spaces a level), cells
/// separated by tabs, aligned at the end by Go's tab writer ([`podlab_print::describe_aligned`]).
#[derive(Default)]
struct Tabbed(String);

impl Tabbed {
    fn line(&mut self, level: usize, text: impl AsRef<str>) {
        self.0.push_str(&"  ".repeat(level));
        self.0.push_str(text.as_ref());
        self.0.push('\n');
    }
}

/// `printLabelsMultiline`: `Title:\tk=v`, further pairs on lines of their own in the same column.
fn labels(w: &mut Tabbed, title: &str, map: Option<&BTreeMap<String, String>>) {
    pairs(w, title, map, |k, v| format!("{k}={v}"));
}

/// `printAnnotationsMultiline`: `k: v`; a long or multi-line value goes below its key.
fn annotations(w: &mut Tabbed, map: Option<&BTreeMap<String, String>>) {
    const MAX: usize = 140;
    pairs(w, "Annotations", map, |k, v| {
        let v = v.trim_end_matches('\n');
        if v.len() + k.len() + 2 > MAX || v.contains('\n') {
            let lines: Vec<String> = v
                .split('\n')
                .map(|l| format!("\t  {}", shorten(l, MAX - 2)))
                .collect();
            format!("{k}:\n{}", lines.join("\n"))
        } else {
            format!("{k}: {v}")
        }
    });
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        format!("{}...", s.chars().take(max).collect::<String>())
    } else {
        s.to_string()
    }
}

fn pairs(
    w: &mut Tabbed,
    title: &str,
    map: Option<&BTreeMap<String, String>>,
    pair: impl Fn(&str, &str) -> String,
) {
    match map.filter(|m| !m.is_empty()) {
        None => w.line(0, format!("{title}:\t<none>")),
        Some(m) => {
            for (i, (k, v)) in m.iter().enumerate() {
                let head = if i == 0 {
                    format!("{title}:")
                } else {
                    String::new()
                };
                w.line(0, format!("{head}\t{}", pair(k, v)));
            }
        }
    }
}

/// `describeStatus`.
fn state_lines(w: &mut Tabbed, title: &str, state: Option<&ContainerState>) {
    match state {
        Some(ContainerState {
            running: Some(r), ..
        }) => {
            w.line(2, format!("{title}:\tRunning"));
            if let Some(t) = &r.started_at {
                w.line(3, format!("Started:\t{}", rfc1123z(t.0)));
            }
        }
        Some(ContainerState {
            terminated: Some(t),
            ..
        }) => {
            w.line(2, format!("{title}:\tTerminated"));
            w.line(3, format!("Reason:\t{}", t.reason.as_deref().unwrap_or("")));
            if let Some(m) = t.message.as_deref().filter(|m| !m.is_empty()) {
                w.line(3, format!("Message:\t{m}"));
            }
            w.line(3, format!("Exit Code:\t{}", t.exit_code));
            if let Some(signal) = t.signal.filter(|s| *s > 0) {
                w.line(3, format!("Signal:\t{signal}"));
            }
            if let Some(s) = &t.started_at {
                w.line(3, format!("Started:\t{}", rfc1123z(s.0)));
            }
            if let Some(f) = &t.finished_at {
                w.line(3, format!("Finished:\t{}", rfc1123z(f.0)));
            }
        }
        Some(ContainerState {
            waiting: Some(wait),
            ..
        }) => {
            w.line(2, format!("{title}:\tWaiting"));
            if let Some(r) = &wait.reason {
                w.line(3, format!("Reason:\t{r}"));
            }
            if let Some(m) = &wait.message {
                w.line(3, format!("Message:\t{m}"));
            }
        }
        _ => w.line(2, format!("{title}:\tWaiting")),
    }
}

/// `IntOrString` as Go's `intstr.String()` prints it.
fn port_text(port: &IntOrString) -> String {
    match port {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// `DescribeProbe`.
fn probe_text(p: &Probe) -> String {
    let attrs = format!(
        "delay={}s timeout={}s period={}s #success={} #failure={}",
        p.initial_delay_seconds.unwrap_or(0),
        p.timeout_seconds.unwrap_or(1),
        p.period_seconds.unwrap_or(10),
        p.success_threshold.unwrap_or(1),
        p.failure_threshold.unwrap_or(3)
    );
    if let Some(e) = &p.exec {
        format!(
            "exec [{}] {attrs}",
            e.command.clone().unwrap_or_default().join(" ")
        )
    } else if let Some(h) = &p.http_get {
        let scheme = h.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
        let host = h.host.as_deref().unwrap_or("");
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        format!(
            "http-get {scheme}://{host}:{}{} {attrs}",
            port_text(&h.port),
            h.path.as_deref().unwrap_or("")
        )
    } else if let Some(t) = &p.tcp_socket {
        format!(
            "tcp-socket {}:{} {attrs}",
            t.host.as_deref().unwrap_or(""),
            port_text(&t.port)
        )
    } else if let Some(g) = &p.grpc {
        format!(
            "grpc <pod>:{} {} {attrs}",
            g.port,
            g.service.as_deref().unwrap_or("")
        )
    } else {
        format!("unknown {attrs}")
    }
}

/// `describeContainers` for one container.
fn container_block(w: &mut Tabbed, c: &Container, status: Option<&ContainerStatus>) {
    w.line(1, format!("{}:", c.name));
    if let Some(s) = status {
        w.line(
            2,
            format!("Container ID:\t{}", s.container_id.as_deref().unwrap_or("")),
        );
    }
    w.line(2, format!("Image:\t{}", c.image.as_deref().unwrap_or("")));
    if let Some(s) = status {
        w.line(2, format!("Image ID:\t{}", s.image_id));
    }
    // `describeContainerPorts`: `80/TCP, 443/TCP`, or `<none>`.
    let ports = |number: &dyn Fn(&ContainerPort) -> i32| {
        let list: Vec<String> = c
            .ports
            .iter()
            .flatten()
            .map(|p| format!("{}/{}", number(p), p.protocol.as_deref().unwrap_or("TCP")))
            .collect();
        if list.is_empty() {
            "<none>".to_string()
        } else {
            list.join(", ")
        }
    };
    w.line(2, format!("Port:\t{}", ports(&|p| p.container_port)));
    w.line(
        2,
        format!("Host Port:\t{}", ports(&|p| p.host_port.unwrap_or(0))),
    );
    for (title, words) in [("Command", &c.command), ("Args", &c.args)] {
        if let Some(words) = words.as_ref().filter(|w| !w.is_empty()) {
            w.line(2, format!("{title}:"));
            for word in words {
                for line in word.split('\n') {
                    w.line(3, line);
                }
            }
        }
    }
    if let Some(s) = status {
        state_lines(w, "State", s.state.as_ref());
        if s.last_state
            .as_ref()
            .is_some_and(|l| l.terminated.is_some())
        {
            state_lines(w, "Last State", s.last_state.as_ref());
        }
        w.line(
            2,
            format!("Ready:\t{}", if s.ready { "True" } else { "False" }),
        );
        w.line(2, format!("Restart Count:\t{}", s.restart_count));
    }
    // `describeContainerResources`: each map by resource name, quantities in their canonical
    // form (`Quantity.String()`), nothing for an empty one.
    let resources = c.resources.as_ref();
    for (title, map) in [
        ("Limits", resources.and_then(|r| r.limits.as_ref())),
        ("Requests", resources.and_then(|r| r.requests.as_ref())),
    ] {
        let Some(map) = map.filter(|m| !m.is_empty()) else {
            continue;
        };
        w.line(2, format!("{title}:"));
        for (name, quantity) in map {
            let text = podlab_api::quantity::canonical(&quantity.0);
            w.line(
                3,
                format!("{name}:\t{}", text.unwrap_or(quantity.0.clone())),
            );
        }
    }
    for (title, probe) in [
        ("Liveness", &c.liveness_probe),
        ("Readiness", &c.readiness_probe),
        ("Startup", &c.startup_probe),
    ] {
        if let Some(p) = probe {
            w.line(2, format!("{title}:\t{}", probe_text(p)));
        }
    }
    let env: Vec<_> = c.env.iter().flatten().collect();
    if env.is_empty() {
        w.line(2, "Environment:\t<none>");
    } else {
        w.line(2, "Environment:");
        for e in env {
            w.line(3, format!("{}:\t{}", e.name, env_value(c, e)));
        }
    }
    let mounts: Vec<_> = c.volume_mounts.iter().flatten().collect();
    if mounts.is_empty() {
        w.line(2, "Mounts:\t<none>");
    } else {
        w.line(2, "Mounts:");
        for m in mounts {
            let mut flags = vec![if m.read_only == Some(true) {
                "ro"
            } else {
                "rw"
            }
            .to_string()];
            if let Some(sub) = m.sub_path.as_deref().filter(|p| !p.is_empty()) {
                flags.push(format!("path=\"{sub}\""));
            }
            w.line(
                3,
                format!("{} from {} ({})", m.mount_path, m.name, flags.join(",")),
            );
        }
    }
}

/// `describeVolumes`.
fn volumes(w: &mut Tabbed, spec: &PodSpec) {
    let volumes: Vec<_> = spec.volumes.iter().flatten().collect();
    if volumes.is_empty() {
        w.line(0, "Volumes:\t<none>");
        return;
    }
    w.line(0, "Volumes:");
    for v in volumes {
        w.line(1, format!("{}:", v.name));
        if let Some(e) = &v.empty_dir {
            w.line(
                2,
                "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)",
            );
            w.line(2, format!("Medium:\t{}", e.medium.as_deref().unwrap_or("")));
            w.line(
                2,
                format!(
                    "SizeLimit:\t{}",
                    e.size_limit.as_ref().map_or("<unset>", |q| q.0.as_str())
                ),
            );
        } else if let Some(h) = &v.host_path {
            w.line(2, "Type:\tHostPath (bare host directory volume)");
            w.line(2, format!("Path:\t{}", h.path));
            w.line(
                2,
                format!("HostPathType:\t{}", h.type_.as_deref().unwrap_or("")),
            );
        } else if let Some(m) = &v.config_map {
            w.line(2, "Type:\tConfigMap (a volume populated by a ConfigMap)");
            w.line(2, format!("Name:\t{}", m.name));
            w.line(2, format!("Optional:\t{}", m.optional.unwrap_or(false)));
        } else if let Some(secret) = &v.secret {
            w.line(2, "Type:\tSecret (a volume populated by a Secret)");
            w.line(
                2,
                format!(
                    "SecretName:\t{}",
                    secret.secret_name.as_deref().unwrap_or("")
                ),
            );
            w.line(
                2,
                format!("Optional:\t{}", secret.optional.unwrap_or(false)),
            );
        } else if let Some(d) = &v.downward_api {
            w.line(
                2,
                "Type:\tDownwardAPI (a volume populated by information about the pod)",
            );
            w.line(2, "Items:");
            for item in d.items.iter().flatten() {
                if let Some(f) = &item.field_ref {
                    w.line(3, format!("{} -> {}", f.field_path, item.path));
                }
                if let Some(r) = &item.resource_field_ref {
                    w.line(3, format!("{} -> {}", r.resource, item.path));
                }
            }
        } else if let Some(image) = &v.image {
            w.line(2, "Type:\tImage (a container image or OCI artifact)");
            w.line(
                2,
                format!("Reference:\t{}", image.reference.as_deref().unwrap_or("")),
            );
            w.line(
                2,
                format!(
                    "PullPolicy:\t{}",
                    image.pull_policy.as_deref().unwrap_or("")
                ),
            );
        } else {
            w.line(2, "Type:\t<unknown>");
        }
    }
}

/// `kubectl describe pod` for `pod` and its `events`, laid out as kubectl's `describePod`
/// writes it.
pub fn describe(pod: &Pod, events: &[Event], now: Timestamp) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let mut w = Tabbed::default();
    w.line(
        0,
        format!("Name:\t{}", pod.metadata.name.as_deref().unwrap_or("")),
    );
    w.line(
        0,
        format!(
            "Namespace:\t{}",
            pod.metadata.namespace.as_deref().unwrap_or("default")
        ),
    );
    w.line(0, format!("Priority:\t{}", spec.priority.unwrap_or(0)));
    // The API server's ServiceAccount admission gives every pod `default` unless it names one.
    w.line(
        0,
        format!(
            "Service Account:\t{}",
            spec.service_account_name.as_deref().unwrap_or("default")
        ),
    );
    match spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        None => w.line(0, "Node:\t<none>"),
        Some(node) => w.line(
            0,
            format!("Node:\t{node}/{}", status.host_ip.as_deref().unwrap_or("")),
        ),
    }
    if let Some(t) = &status.start_time {
        w.line(0, format!("Start Time:\t{}", rfc1123z(t.0)));
    }
    labels(&mut w, "Labels", pod.metadata.labels.as_ref());
    annotations(&mut w, pod.metadata.annotations.as_ref());
    if let Some(t) = &pod.metadata.deletion_timestamp {
        w.line(
            0,
            format!("Status:\tTerminating (lasts {})", human_duration(now, t.0)),
        );
        if let Some(grace) = pod.metadata.deletion_grace_period_seconds {
            w.line(0, format!("Termination Grace Period:\t{grace}s"));
        }
    } else {
        w.line(
            0,
            format!("Status:\t{}", status.phase.as_deref().unwrap_or("Pending")),
        );
    }
    if let Some(reason) = status.reason.as_deref().filter(|r| !r.is_empty()) {
        w.line(0, format!("Reason:\t{reason}"));
    }
    if let Some(message) = status.message.as_deref().filter(|m| !m.is_empty()) {
        w.line(0, format!("Message:\t{message}"));
    }
    w.line(
        0,
        format!("IP:\t{}", status.pod_ip.as_deref().unwrap_or("")),
    );
    let ips: Vec<_> = status.pod_ips.iter().flatten().collect();
    if ips.is_empty() {
        w.line(0, "IPs:\t<none>");
    } else {
        w.line(0, "IPs:");
        for ip in ips {
            w.line(1, format!("IP:\t{}", ip.ip));
        }
    }
    if let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        w.line(0, format!("Controlled By:\t{}/{}", owner.kind, owner.name));
    }
    let find = |list: &Option<Vec<ContainerStatus>>, name: &str| {
        list.iter().flatten().find(|s| s.name == name).cloned()
    };
    if let Some(init) = spec.init_containers.as_ref().filter(|i| !i.is_empty()) {
        w.line(0, "Init Containers:");
        for c in init {
            container_block(
                &mut w,
                c,
                find(&status.init_container_statuses, &c.name).as_ref(),
            );
        }
    }
    w.line(0, "Containers:");
    for c in &spec.containers {
        container_block(
            &mut w,
            c,
            find(&status.container_statuses, &c.name).as_ref(),
        );
    }
    if let Some(eph) = spec.ephemeral_containers.as_ref().filter(|e| !e.is_empty()) {
        w.line(0, "Ephemeral Containers:");
        for e in eph {
            let as_container = Container {
                name: e.name.clone(),
                image: e.image.clone(),
                command: e.command.clone(),
                args: e.args.clone(),
                env: e.env.clone(),
                volume_mounts: e.volume_mounts.clone(),
                ..Default::default()
            };
            container_block(
                &mut w,
                &as_container,
                find(&status.ephemeral_container_statuses, &e.name).as_ref(),
            );
        }
    }
    let conditions: Vec<_> = status.conditions.iter().flatten().collect();
    if !conditions.is_empty() {
        w.line(0, "Conditions:");
        w.line(1, "Type\tStatus");
        for c in conditions {
            w.line(1, format!("{} \t{} ", c.type_, c.status));
        }
    }
    volumes(&mut w, &spec);
    w.line(
        0,
        format!(
            "QoS Class:\t{}",
            status.qos_class.as_deref().unwrap_or("BestEffort")
        ),
    );
    labels(&mut w, "Node-Selectors", spec.node_selector.as_ref());
    tolerations(&mut w, &spec);
    let mut out = if events.is_empty() {
        w.line(0, "Events:\t<none>");
        podlab_print::describe_aligned(&w.0)
    } else {
        // kubectl flushes its tab writer before the events: their table is aligned on its own.
        let head = podlab_print::describe_aligned(&w.0);
        let mut table = Tabbed::default();
        table.line(0, "Events:");
        table.line(1, "Type\tReason\tAge\tFrom\tMessage");
        table.line(1, "----\t------\t----\t----\t-------");
        for e in events {
            table.line(1, event_row(e, now).join("\t"));
        }
        head + &podlab_print::describe_aligned(&table.0)
    };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// `printPodTolerationsMultiline`.
fn tolerations(w: &mut Tabbed, spec: &PodSpec) {
    let tolerations: Vec<_> = spec.tolerations.iter().flatten().collect();
    if tolerations.is_empty() {
        w.line(0, "Tolerations:\t<none>");
        return;
    }
    for (i, t) in tolerations.iter().enumerate() {
        let head = if i == 0 { "Tolerations:" } else { "" };
        let mut text = t.key.clone().unwrap_or_default();
        if let Some(value) = t.value.as_deref().filter(|v| !v.is_empty()) {
            text.push_str(&format!("={value}"));
        }
        if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty()) {
            text.push_str(&format!(":{effect}"));
        }
        if t.operator.as_deref() == Some("Exists") && t.value.as_deref().unwrap_or("").is_empty() {
            text.push_str(" op=Exists");
        }
        if let Some(seconds) = t.toleration_seconds {
            text.push_str(&format!(" for {seconds}s"));
        }
        w.line(0, format!("{head}\t{text}"));
    }
}

/// One row of describe's events: `Age` is the first time, or `LAST (xN over FIRST)` for an
/// event seen N times, as kubectl's describer writes it.
fn event_row(e: &Event, now: Timestamp) -> Vec<String> {
    let since = |t: Option<Timestamp>| {
        t.map(|t| human_duration(now, t))
            .unwrap_or_else(|| "<unknown>".into())
    };
    let first = since(
        e.first_timestamp
            .as_ref()
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0)),
    );
    let age = match e.count.filter(|c| *c > 1) {
        Some(count) => format!(
            "{} (x{count} over {first})",
            since(e.last_timestamp.as_ref().map(|t| t.0))
        ),
        None => first,
    };
    let source = e
        .source
        .as_ref()
        .and_then(|s| s.component.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| e.reporting_component.clone())
        .unwrap_or_default();
    vec![
        e.type_.clone().unwrap_or_default(),
        e.reason.clone().unwrap_or_default(),
        age,
        source,
        e.message.clone().unwrap_or_default().trim().to_string(),
    ]
}

/// Go's `time.RFC1123Z`, as kubectl's describers print times: `Wed, 02 Dec 2026 14:29:40 +0000`.
fn rfc1123z(t: Timestamp) -> String {
    t.strftime("%a, %d %b %Y %H:%M:%S +0000").to_string()
}

/// An env var as kubectl describes it: a literal value, or where the value comes from (never
/// a Secret's or ConfigMap's value).
fn env_value(
    c: &k8s_openapi::api::core::v1::Container,
    e: &k8s_openapi::api::core::v1::EnvVar,
) -> String {
    let Some(from) = &e.value_from else {
        return e.value.clone().unwrap_or_default();
    };
    if let Some(f) = &from.field_ref {
        let version = f.api_version.as_deref().unwrap_or("v1");
        return format!(" ({version}:{})", f.field_path);
    }
    if let Some(r) = &from.resource_field_ref {
        let facts = podlab_kubelet::env::PodRuntimeFacts::default();
        let mut value = podlab_kubelet::env::resource_value(c, r, &facts).unwrap_or_default();
        if value == "0" && matches!(r.resource.as_str(), "limits.cpu" | "limits.memory") {
            value = "node allocatable".into();
        }
        return format!("{value} ({})", r.resource);
    }
    if let Some(k) = &from.config_map_key_ref {
        return format!(
            "<set to the key '{}' of config map '{}'>\tOptional: {}",
            k.key,
            k.name,
            k.optional.unwrap_or(false)
        );
    }
    if let Some(k) = &from.secret_key_ref {
        return format!(
            "<set to the key '{}' in secret '{}'>\tOptional: {}",
            k.key,
            k.name,
            k.optional.unwrap_or(false)
        );
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column where each `Title:` line's value starts, for the lines of `block`.
    fn value_columns(text: &str, titles: &[&str]) -> Vec<usize> {
        titles
            .iter()
            .map(|title| {
                let line = text
                    .lines()
                    .find(|l| l.trim_start().starts_with(title))
                    .unwrap_or_else(|| panic!("no {title} line in:\n{text}"));
                let after = line.find(title).unwrap() + title.len();
                after + line[after..].len() - line[after..].trim_start().len()
            })
            .collect()
    }

    /// Issue 13, defect 9: describe wrote its titles padded to fixed widths, so a field longer
    /// than the column (`Termination Grace Period:`, a long environment variable name) pushed
    /// its value out of line. As kubectl's tab writer, a block is as wide as its widest title.
    #[test]
    fn defect_9_describe_aligns_fields_longer_than_the_column() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default",
                "deletionTimestamp": "2026-12-02T14:29:30Z", "deletionGracePeriodSeconds": 30,
                "labels": {"app": "web", "tier": "front"}},
            "spec": {"nodeName": "node1", "containers": [{"name": "app", "image": "busybox",
                "env": [{"name": "A", "value": "1"},
                        {"name": "A_VERY_LONG_ENVIRONMENT_VARIABLE_NAME", "value": "2"}]}]},
            "status": {"phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.88.0.2",
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 3,
                    "image": "busybox", "imageID": "sha256:x", "containerID": "podlab://c",
                    "state": {"running": {"startedAt": "2026-12-02T14:28:40Z"}}}]}
        }))
        .unwrap();
        let now: Timestamp = "2026-12-02T14:29:40Z".parse().unwrap();
        let text = describe(&pod, &[], now);
        let top = value_columns(
            &text,
            &[
                "Name:",
                "Namespace:",
                "Service Account:",
                "Labels:",
                "Status:",
                "Termination Grace Period:",
                "IP:",
                "IPs:",
            ],
        );
        assert!(
            top.iter()
                .all(|c| *c == "Termination Grace Period:".len() + 2),
            "{top:?}\n{text}"
        );
        assert!(
            text.contains("\n                           tier=front\n"),
            "{text}"
        );
        let env = value_columns(&text, &["A:", "A_VERY_LONG_ENVIRONMENT_VARIABLE_NAME:"]);
        assert_eq!(env[0], env[1], "{text}");
        let container = value_columns(&text, &["Image:", "Restart Count:", "State:", "Started:"]);
        assert!(container.iter().all(|c| *c == container[0]), "{text}");
        assert!(
            text.contains("    Image:          busybox\n"),
            "a block without long titles is as kubectl's: {text}"
        );
    }

    #[test]
    fn limits_requests_and_projected_volumes_read_as_kubectl_describe_writes_them() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "busybox",
                "resources": {"limits": {"memory": "1024Mi", "cpu": "0.5"},
                              "requests": {"cpu": "250m", "memory": "1000"}}}],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "settings"}},
                    {"name": "keys", "secret": {"secretName": "tls", "optional": true}},
                    {"name": "info", "downwardAPI": {"items": [
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                        {"path": "cpu", "resourceFieldRef": {"containerName": "app",
                            "resource": "limits.cpu"}}]}}]},
            "status": {"phase": "Pending"}
        }))
        .unwrap();
        let now: Timestamp = "2026-12-02T14:29:40Z".parse().unwrap();
        let text = describe(&pod, &[], now);
        let want = "    Limits:\n      cpu:     500m\n      memory:  1Gi\n    Requests:\n      cpu:        250m\n      memory:     1k\n";
        assert!(text.contains(want), "{text}");
        let want = "  cfg:\n    Type:      ConfigMap (a volume populated by a ConfigMap)\n    Name:      settings\n    Optional:  false\n";
        assert!(text.contains(want), "{text}");
        let want = "  keys:\n    Type:        Secret (a volume populated by a Secret)\n    SecretName:  tls\n    Optional:    true\n";
        assert!(text.contains(want), "{text}");
        let want = "  info:\n    Type:  DownwardAPI (a volume populated by information about the pod)\n    Items:\n      metadata.name -> name\n      limits.cpu -> cpu\n";
        assert!(text.contains(want), "{text}");
        let bare = describe(&Pod::default(), &[], now);
        assert!(!bare.contains("Limits:") && !bare.contains("Requests:"));
    }

    #[test]
    fn times_and_events_read_as_kubectl_describe_writes_them() {
        let t: Timestamp = "2026-12-02T14:29:40Z".parse().unwrap();
        assert_eq!(rfc1123z(t), "Wed, 02 Dec 2026 14:29:40 +0000");
        let event: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "e"}, "involvedObject": {}, "type": "Warning",
            "reason": "BackOff", "count": 3, "message": "back-off ",
            "firstTimestamp": "2026-12-02T14:28:40Z", "lastTimestamp": "2026-12-02T14:29:30Z",
            "source": {"component": "kubelet"}
        }))
        .unwrap();
        assert_eq!(
            event_row(&event, t),
            [
                "Warning",
                "BackOff",
                "10s (x3 over 60s)",
                "kubelet",
                "back-off"
            ]
        );
    }
}
