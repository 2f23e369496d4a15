//! `podlab describe pod NAME`: the pod as `kubectl describe` shows it: identity, status, each
//! container's state and last state, conditions, volumes, and the events about it.

use std::fmt::Write as _;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus, Event, Pod};
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

fn map_text(map: &Option<std::collections::BTreeMap<String, String>>, indent: usize) -> String {
    match map.as_ref().filter(|m| !m.is_empty()) {
        None => "<none>".into(),
        Some(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(&format!("\n{}", " ".repeat(indent))),
    }
}

fn state_lines(out: &mut String, title: &str, state: Option<&ContainerState>) {
    let pad = "      ";
    match state {
        Some(ContainerState {
            running: Some(r), ..
        }) => {
            let _ = writeln!(out, "    {title}:          Running");
            if let Some(t) = &r.started_at {
                let _ = writeln!(out, "{pad}Started:      {}", rfc1123z(t.0));
            }
        }
        Some(ContainerState {
            terminated: Some(t),
            ..
        }) => {
            let _ = writeln!(out, "    {title}:          Terminated");
            let _ = writeln!(
                out,
                "{pad}Reason:       {}",
                t.reason.as_deref().unwrap_or("")
            );
            if let Some(m) = &t.message {
                let _ = writeln!(out, "{pad}Message:      {m}");
            }
            let _ = writeln!(out, "{pad}Exit Code:    {}", t.exit_code);
            if let Some(s) = &t.started_at {
                let _ = writeln!(out, "{pad}Started:      {}", rfc1123z(s.0));
            }
            if let Some(f) = &t.finished_at {
                let _ = writeln!(out, "{pad}Finished:     {}", rfc1123z(f.0));
            }
        }
        Some(ContainerState {
            waiting: Some(w), ..
        }) => {
            let _ = writeln!(out, "    {title}:          Waiting");
            if let Some(r) = &w.reason {
                let _ = writeln!(out, "{pad}Reason:       {r}");
            }
            if let Some(m) = &w.message {
                let _ = writeln!(out, "{pad}Message:      {m}");
            }
        }
        _ => {}
    }
}

fn container_block(out: &mut String, c: &Container, status: Option<&ContainerStatus>) {
    let _ = writeln!(out, "  {}:", c.name);
    if let Some(s) = status {
        let _ = writeln!(
            out,
            "    Container ID:   {}",
            s.container_id.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(
        out,
        "    Image:          {}",
        c.image.as_deref().unwrap_or("")
    );
    if let Some(s) = status {
        let _ = writeln!(out, "    Image ID:       {}", s.image_id);
    }
    if let Some(cmd) = &c.command {
        let _ = writeln!(
            out,
            "    Command:\n{}",
            cmd.iter()
                .map(|a| format!("      {a}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    if let Some(args) = &c.args {
        let _ = writeln!(
            out,
            "    Args:\n{}",
            args.iter()
                .map(|a| format!("      {a}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    if let Some(s) = status {
        state_lines(out, "State", s.state.as_ref());
        if s.last_state
            .as_ref()
            .is_some_and(|l| l.terminated.is_some() || l.running.is_some() || l.waiting.is_some())
        {
            state_lines(out, "Last State", s.last_state.as_ref());
        }
        let _ = writeln!(
            out,
            "    Ready:          {}",
            if s.ready { "True" } else { "False" }
        );
        let _ = writeln!(out, "    Restart Count:  {}", s.restart_count);
    }
    for (title, probe) in [
        ("Liveness", &c.liveness_probe),
        ("Readiness", &c.readiness_probe),
        ("Startup", &c.startup_probe),
    ] {
        if let Some(p) = probe {
            let how = if let Some(e) = &p.exec {
                format!("exec [{}]", e.command.clone().unwrap_or_default().join(" "))
            } else if let Some(t) = &p.tcp_socket {
                format!(
                    "tcp-socket :{}",
                    serde_json::to_value(&t.port).unwrap_or_default()
                )
            } else if let Some(h) = &p.http_get {
                format!(
                    "http-get :{}{}",
                    serde_json::to_value(&h.port).unwrap_or_default(),
                    h.path.as_deref().unwrap_or("/")
                )
            } else {
                "?".into()
            };
            let _ = writeln!(
                out,
                "    {title}:{}{how} delay={}s timeout={}s period={}s #success={} #failure={}",
                " ".repeat(16usize.saturating_sub(title.len() + 1)),
                p.initial_delay_seconds.unwrap_or(0),
                p.timeout_seconds.unwrap_or(1),
                p.period_seconds.unwrap_or(10),
                p.success_threshold.unwrap_or(1),
                p.failure_threshold.unwrap_or(3)
            );
        }
    }
    let env: Vec<String> = c
        .env
        .iter()
        .flatten()
        .map(|e| format!("      {}:  {}", e.name, e.value.as_deref().unwrap_or("")))
        .collect();
    let _ = writeln!(
        out,
        "    Environment:{}",
        if env.is_empty() {
            "    <none>".to_string()
        } else {
            format!("\n{}", env.join("\n"))
        }
    );
    let mounts: Vec<String> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            format!(
                "      {} from {} ({})",
                m.mount_path,
                m.name,
                if m.read_only == Some(true) {
                    "ro"
                } else {
                    "rw"
                }
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "    Mounts:{}",
        if mounts.is_empty() {
            "         <none>".to_string()
        } else {
            format!("\n{}", mounts.join("\n"))
        }
    );
}

pub fn describe(pod: &Pod, events: &[Event], now: Timestamp) -> String {
    let mut out = String::new();
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "Name:             {}",
        pod.metadata.name.as_deref().unwrap_or("")
    );
    let _ = writeln!(
        out,
        "Namespace:        {}",
        pod.metadata.namespace.as_deref().unwrap_or("default")
    );
    let _ = writeln!(out, "Priority:         0");
    let _ = writeln!(
        out,
        "Node:             {}/{}",
        spec.node_name.as_deref().unwrap_or("<none>"),
        status.host_ip.as_deref().unwrap_or("")
    );
    if let Some(t) = &status.start_time {
        let _ = writeln!(out, "Start Time:       {}", rfc1123z(t.0));
    }
    let _ = writeln!(
        out,
        "Labels:           {}",
        map_text(&pod.metadata.labels, 18)
    );
    let _ = writeln!(
        out,
        "Annotations:      {}",
        map_text(&pod.metadata.annotations, 18)
    );
    if let Some(t) = &pod.metadata.deletion_timestamp {
        let _ = writeln!(
            out,
            "Status:           Terminating (lasts {})",
            human_duration(now, t.0)
        );
    } else {
        let _ = writeln!(
            out,
            "Status:           {}",
            status.phase.as_deref().unwrap_or("Pending")
        );
    }
    let _ = writeln!(
        out,
        "IP:               {}",
        status.pod_ip.as_deref().unwrap_or("")
    );
    let ips: Vec<String> = status
        .pod_ips
        .iter()
        .flatten()
        .map(|i| format!("  IP:  {}", i.ip))
        .collect();
    let _ = writeln!(
        out,
        "IPs:{}",
        if ips.is_empty() {
            "              <none>".to_string()
        } else {
            format!("\n{}", ips.join("\n"))
        }
    );
    if let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        let _ = writeln!(out, "Controlled By:    {}/{}", owner.kind, owner.name);
    }
    let find = |list: &Option<Vec<ContainerStatus>>, name: &str| {
        list.iter().flatten().find(|s| s.name == name).cloned()
    };
    if let Some(init) = spec.init_containers.as_ref().filter(|i| !i.is_empty()) {
        let _ = writeln!(out, "Init Containers:");
        for c in init {
            container_block(
                &mut out,
                c,
                find(&status.init_container_statuses, &c.name).as_ref(),
            );
        }
    }
    let _ = writeln!(out, "Containers:");
    for c in &spec.containers {
        container_block(
            &mut out,
            c,
            find(&status.container_statuses, &c.name).as_ref(),
        );
    }
    if let Some(eph) = spec.ephemeral_containers.as_ref().filter(|e| !e.is_empty()) {
        let _ = writeln!(out, "Ephemeral Containers:");
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
                &mut out,
                &as_container,
                find(&status.ephemeral_container_statuses, &e.name).as_ref(),
            );
        }
    }
    let _ = writeln!(out, "Conditions:\n  Type                        Status");
    for c in status.conditions.iter().flatten() {
        let _ = writeln!(out, "  {:<27} {}", c.type_, c.status);
    }
    let volumes: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| {
            let medium = v.empty_dir.as_ref().and_then(|e| e.medium.clone()).unwrap_or_default();
            format!("  {}:\n    Type:       EmptyDir (a temporary directory that shares a pod's lifetime)\n    Medium:     {medium}", v.name)
        })
        .collect();
    let _ = writeln!(
        out,
        "Volumes:{}",
        if volumes.is_empty() {
            "          <none>".to_string()
        } else {
            format!("\n{}", volumes.join("\n"))
        }
    );
    let _ = writeln!(
        out,
        "QoS Class:        {}",
        status.qos_class.as_deref().unwrap_or("BestEffort")
    );
    if events.is_empty() {
        let _ = writeln!(out, "Events:           <none>");
    } else {
        let _ = writeln!(out, "Events:");
        let mut rows: Vec<Vec<String>> = vec![
            ["Type", "Reason", "Age", "From", "Message"]
                .map(String::from)
                .to_vec(),
            ["----", "------", "----", "----", "-------"]
                .map(String::from)
                .to_vec(),
        ];
        rows.extend(events.iter().map(|e| event_row(e, now)));
        out.push_str(&tab_aligned(&rows, "  "));
    }
    out
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

/// Rows laid out as Go's tabwriter lays them out for kubectl's describers (padding 2, the
/// last cell not padded), each line after `indent`.
fn tab_aligned(rows: &[Vec<String>], indent: &str) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count() + if i == 0 { indent.len() } else { 0 })
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::from(indent);
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let used = cell.chars().count() + if i == 0 { indent.len() } else { 0 };
                line.push_str(&" ".repeat(widths[i] + 2 - used));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Go's `time.RFC1123Z`, as kubectl's describers print times: `Wed, 02 Dec 2026 14:29:40 +0000`.
fn rfc1123z(t: Timestamp) -> String {
    t.strftime("%a, %d %b %Y %H:%M:%S +0000").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_events_read_as_kubectl_describe_writes_them() {
        let t: Timestamp = "2026-12-02T14:29:40Z".parse().unwrap();
        assert_eq!(rfc1123z(t), "Wed, 02 Dec 2026 14:29:40 +0000");
        let rows = vec![
            vec!["Type".to_string(), "Reason".into(), "Message".into()],
            vec!["Normal".to_string(), "SandboxChanged".into(), "x".into()],
        ];
        assert_eq!(
            tab_aligned(&rows, "  "),
            "  Type    Reason          Message\n  Normal  SandboxChanged  x\n"
        );
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
