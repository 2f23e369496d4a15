//! `podlab demo cni` and `podlab demo cni-failure`: pod networking through the real CNI
//! plugins (`bridge` + `host-local` from /usr/lib/cni), and what kubelet does when CNI ADD
//! fails.
//!
//! Each runs in a scratch `$PODLAB_ROOT` with a node agent of its own. The pods sit on the
//! bridge `podlab0`; they have one route (their subnet, on-link) and nothing beyond it.

use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Event, Pod};
use podlab_ns::net::Netlink;
use podlab_ns::{ops, NsKind};

use super::kit::{container_id, exec_text, is_ready, wait_pod, ScratchRoot};
use super::{say, Evidence, Shown};
use crate::context::Ctx;

fn web_pod(name: &str) -> Result<Pod> {
    let manifest = format!(
        r#"{{"apiVersion": "v1", "kind": "Pod",
  "metadata": {{"name": "{name}", "labels": {{"demo": "cni"}}}},
  "spec": {{"terminationGracePeriodSeconds": 1, "containers": [{{"name": "web", "image": "busybox",
    "command": ["sh", "-c", "mkdir -p /www && echo hello from {name} > /www/index.html && exec httpd -f -p 8080 -h /www"]}}]}}}}"#
    );
    Ok(podlab_api::decode_pod(&manifest, name)?)
}

/// The pod's IP from its status, once it has one.
fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

fn start(ctx: &Ctx, name: &str) -> Result<()> {
    crate::apply::apply_pod(ctx, web_pod(name)?)?;
    ctx.ensure_node()
}

pub fn run(evidence: &mut Evidence) -> Result<()> {
    say("kubelet asks the runtime for a sandbox; the runtime (containerd, here podlab-runtime)");
    say("pins the pause process's network namespace and runs the CNI plugins of its conflist on");
    say("it: CNI_COMMAND=ADD, CNI_NETNS=<the pin>, the config on stdin. podlab's conflist is");
    say("`bridge` (bridge podlab0, a veth per pod, no masquerade) with `host-local` IPAM.");
    let scratch = ScratchRoot::new("cni", &[("PODLAB_NETWORK", "cni")])?;
    let ctx = scratch.ctx()?;
    crate::image::ensure_builtin_if_busybox(&ctx, "busybox")?;
    for name in ["cni-a", "cni-b"] {
        say(format!("$ podlab apply -f {name}.yaml"));
        start(&ctx, name)?;
    }
    let limit = Duration::from_secs(60);
    let a = wait_pod(&ctx, "cni-a", limit, "Ready", is_ready)?.context("cni-a")?;
    let b = wait_pod(&ctx, "cni-b", limit, "Ready", is_ready)?.context("cni-b")?;
    let (ip_a, ip_b) = (
        pod_ip(&a).unwrap_or_default(),
        pod_ip(&b).unwrap_or_default(),
    );
    say(format!(
        "\n$ podlab get pods -o wide\n  cni-a  {ip_a}\n  cni-b  {ip_b}"
    ));

    let runtime = ctx.runtime()?;
    let sandboxes = runtime.list_pod_sandboxes()?;
    let mut node = Netlink::open()?;
    let links = node.links()?;
    let bridge = links.iter().find(|l| l.name == "podlab0").cloned();
    let ports: Vec<String> = bridge
        .as_ref()
        .map(|b| {
            links
                .iter()
                .filter(|l| l.master == Some(b.index))
                .map(|l| l.name.clone())
                .collect()
        })
        .unwrap_or_default();
    let bridge_addrs: Vec<String> = node
        .addresses()?
        .into_iter()
        .filter(|a| a.ifname == "podlab0")
        .map(|a| format!("{}/{}", a.addr, a.prefix_len))
        .collect();
    // A pod's port is the veth its ADD result names (cached in its sandbox's folder); another
    // is the node agent's warm namespace, made and attached ahead for the next pod.
    let pods_links: Vec<String> = sandboxes
        .iter()
        .filter_map(|s| s.namespace_path(NsKind::Net))
        .filter_map(|pin| pin.parent()?.parent().map(std::path::Path::to_path_buf))
        .flat_map(|dir| crate::network::warm::node_links_cached_in(&dir))
        .collect();
    let (pods_ports, others): (Vec<String>, Vec<String>) =
        ports.iter().cloned().partition(|p| pods_links.contains(p));
    say(format!(
        "\nOn the node: bridge podlab0 {}, its ports (one veth per pod): {}",
        bridge_addrs.shown(),
        pods_ports.shown()
    ));
    let kept = crate::network::warm::kept_node_links();
    for port in others {
        match kept.contains(&port) {
            true => say(format!(
                "  and {port}: the network namespace the node agent keeps made and attached for \
                 its next pod (`PODLAB_NODE_WARM_NETNS=0` turns it off)"
            )),
            false => say(format!(
                "  and {port}: not a pod's (its ADD is still running?)"
            )),
        }
    }
    evidence.check(
        "the node has the bridge podlab0 with a veth per pod",
        pods_ports.len() == 2,
        pods_ports.shown(),
    );

    for (name, pod, ip) in [("cni-a", &a, &ip_a), ("cni-b", &b, &ip_b)] {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let sandbox = sandboxes
            .iter()
            .find(|s| s.metadata.uid == uid)
            .context("the pod's sandbox")?;
        let pin = sandbox
            .namespace_path(NsKind::Net)
            .context("the pinned netns")?;
        let netns = ops::open(pin, NsKind::Net)?;
        let mut inside = Netlink::open_in(netns.as_fd())?;
        let eth0: Vec<String> = inside
            .addresses()?
            .into_iter()
            .filter(|a| a.ifname == "eth0" && a.addr.is_ipv4())
            .map(|a| a.addr.to_string())
            .collect();
        let routes = inside.routes()?;
        let links = inside.links()?;
        let default_route = routes.iter().any(|r| r.dst.is_none());
        say(format!(
            "{name}: eth0 {} (read inside its netns {})",
            eth0.shown(),
            pin.display()
        ));
        say(format!("  $ ip route     # inside {name}"));
        for route in &routes {
            say(format!("  {}", route_line(route, &links)));
        }
        evidence.check(
            format!("{name}'s eth0 inside its netns has the pod IP"),
            eth0.contains(ip),
            format!("eth0 has {}, the pod's IP is {ip}", eth0.shown()),
        );
        evidence.check(
            format!("{name} is on podlab's subnet 10.88.0.0/16"),
            ip.starts_with("10.88."),
            ip.clone(),
        );
        evidence.check(
            format!("{name} has no default route: nothing leaves the bridge"),
            !default_route,
            format!("{} routes", routes.len()),
        );
    }

    for (from, to, to_ip) in [("cni-a", "cni-b", &ip_b), ("cni-b", "cni-a", &ip_a)] {
        let pod = if from == "cni-a" { &a } else { &b };
        let url = format!("http://{to_ip}:8080/");
        say(format!("$ podlab exec {from} -- wget -q -O - {url}"));
        let page = exec_text(
            &runtime,
            &container_id(pod, "web")?,
            &["wget", "-q", "-O", "-", &url],
        )?;
        say(format!("  {}", page.trim()));
        evidence.check(
            format!("{from} reaches {to} over TCP on its pod IP"),
            page.contains(&format!("hello from {to}")),
            page.trim().to_string(),
        );
    }

    if super::keep() {
        return Ok(());
    }
    say("\n$ podlab delete pod cni-a cni-b     # CNI DEL for each: its veth and its lease go");
    for name in ["cni-a", "cni-b"] {
        crate::delete::delete_pod(&ctx, "default", name, Some(1), true)?;
    }
    let links_left = || -> Result<Vec<String>> {
        Ok(Netlink::open()?
            .links()?
            .into_iter()
            .filter(|l| l.name == "podlab0" || pods_ports.contains(&l.name))
            .map(|l| l.name)
            .collect())
    };
    let left = links_left()?;
    evidence.check(
        "after delete, no veth is left; the bridge stays for the next pod, as on a kubelet node",
        left == ["podlab0"],
        format!("links left: {}", left.shown()),
    );
    say("(the node agent stops, as it does after a minute without pods: it removes the bridge no pod uses)");
    podlab_kubelet::node::stop_agent(&ctx.root, Duration::from_secs(10))?;
    let left = links_left()?;
    evidence.check(
        "once the agent has stopped, no bridge and no veth is left",
        left.is_empty(),
        format!("links left: {}", left.shown()),
    );
    let leases = leases(&crate::network::network_root()?);
    evidence.check(
        "after delete, no IP lease is left in the IPAM store",
        leases.is_empty(),
        format!("leases: {}", leases.shown()),
    );
    Ok(())
}

/// The files of host-local's store under a network root that are leases (their name is an
/// address).
fn leases(root: &std::path::Path) -> Vec<String> {
    let dir = root.join("cni/ipam/podlab");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A conflist whose range holds a single address: the second pod cannot get one.
const ONE_ADDRESS: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "podlab",
  "plugins": [{
    "type": "bridge", "bridge": "podlab0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.89.0.0/24", "rangeStart": "10.89.0.2",
             "rangeEnd": "10.89.0.2", "gateway": "10.89.0.1"}]], "routes": [], "dataDir": "DATA_DIR"}
  }]
}"#;

pub fn run_failure(evidence: &mut Evidence) -> Result<()> {
    say("What happens when CNI ADD fails? RunPodSandbox returns the plugin's error; kubelet");
    say("records FailedCreatePodSandBox, the pod stays Pending with its containers waiting in");
    say("ContainerCreating, and the pod worker retries on the same node, with backoff, until it");
    say("works. Here the IPAM range holds one address, and two pods want one each.");
    let mut scratch = ScratchRoot::new(
        "cni-failure",
        &[
            ("PODLAB_NETWORK", "cni"),
            ("PODLAB_NODE_ERROR_BACKOFF", "1s"),
        ],
    )?;
    let conf_dir = scratch.path().join("cni/net.d");
    // The demo's own conflist, the way a user points podlab at theirs.
    scratch.set_env("PODLAB_CNI_CONF_DIR", &conf_dir);
    std::fs::create_dir_all(&conf_dir)?;
    let data_dir = scratch.path().join("cni/ipam");
    std::fs::write(
        conf_dir.join("10-podlab.conflist"),
        ONE_ADDRESS.replace("DATA_DIR", &data_dir.display().to_string()),
    )?;
    let ctx = scratch.ctx()?;
    crate::image::ensure_builtin_if_busybox(&ctx, "busybox")?;
    let limit = Duration::from_secs(60);

    say("$ podlab apply -f first.yaml     # takes the range's only address");
    start(&ctx, "first")?;
    let first = wait_pod(&ctx, "first", limit, "Ready", is_ready)?.context("first")?;
    say(format!("  first: {}", pod_ip(&first).unwrap_or_default()));
    say("$ podlab apply -f second.yaml    # CNI ADD fails: no address left");
    start(&ctx, "second")?;
    let failures = |ctx: &Ctx| -> Result<Vec<Event>> {
        let (events, _) = ctx.store.list::<Event>(Some("default"))?;
        Ok(events
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some("second")
                    && e.reason.as_deref() == Some("FailedCreatePodSandBox")
            })
            .collect())
    };
    let retried = |ctx: &Ctx| {
        failures(ctx)
            .map(|f| f.iter().map(|e| e.count.unwrap_or(1)).sum::<i32>())
            .unwrap_or(0)
    };
    wait_pod(&ctx, "second", limit, "two failed sandbox attempts", |_| {
        retried(&ctx) >= 2
    })?;
    let second = ctx.store.get::<Pod>("default", "second")?;
    let events = failures(&ctx)?;
    let message = events
        .last()
        .and_then(|e| e.message.clone())
        .unwrap_or_default();
    say(format!(
        "  event FailedCreatePodSandBox (x{}): {message}",
        retried(&ctx)
    ));
    let row = crate::columns::pod_row(&second, crate::columns::now(), false);
    say(format!("  second   READY {}   STATUS {}", row[1], row[2]));
    evidence.check(
        "the event carries the plugin's message",
        message.contains("no IP addresses available"),
        message.clone(),
    );
    evidence.check(
        "kubelet retried on the same node (several attempts)",
        retried(&ctx) >= 2,
        format!("{} attempts", retried(&ctx)),
    );
    evidence.compare(
        "the pod stays Pending",
        second
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
            .as_str(),
        "Pending",
        true,
    );
    evidence.compare(
        "its container waits in ContainerCreating",
        row[2].as_str(),
        "ContainerCreating",
        true,
    );
    let lease_files = leases_in(&data_dir);
    evidence.check(
        "between attempts nothing half-made is left: one lease (first's)",
        lease_files.len() == 1,
        format!("leases: {}", lease_files.shown()),
    );
    let ready_sandboxes = ctx
        .runtime()?
        .list_pod_sandboxes()?
        .into_iter()
        .filter(|s| s.metadata.name == "second")
        .count();
    evidence.check(
        "and no sandbox of second is left between attempts",
        ready_sandboxes == 0,
        format!("{ready_sandboxes} sandboxes"),
    );

    say("$ podlab delete pod first         # its lease is freed");
    crate::delete::delete_pod(&ctx, "default", "first", Some(1), true)?;
    let second = wait_pod(
        &ctx,
        "second",
        limit,
        "Ready after the lease was freed",
        is_ready,
    )?
    .context("second")?;
    say(format!(
        "  second: Running with {}",
        pod_ip(&second).unwrap_or_default()
    ));
    evidence.compare(
        "the pod comes up once the cause is gone",
        pod_ip(&second).unwrap_or_default().as_str(),
        "10.89.0.2",
        true,
    );
    if super::keep() {
        return Ok(());
    }
    crate::delete::delete_pod(&ctx, "default", "second", Some(1), true)?;
    let lease_files = leases_in(&data_dir);
    evidence.check(
        "after delete no lease is left",
        lease_files.is_empty(),
        format!("leases: {}", lease_files.shown()),
    );
    Ok(())
}

fn leases_in(data_dir: &std::path::Path) -> Vec<String> {
    leases(
        data_dir
            .parent()
            .and_then(|p| p.parent())
            .unwrap_or(data_dir),
    )
}

/// A route as `ip route` prints it: `10.88.0.0/16 dev eth0`, `default via 10.88.0.1 dev eth0`.
fn route_line(route: &podlab_ns::net::Route, links: &[podlab_ns::net::Link]) -> String {
    let mut line = match route.dst {
        Some((addr, prefix)) => format!("{addr}/{prefix}"),
        None => "default".into(),
    };
    if let Some(gateway) = route.gateway {
        line += &format!(" via {gateway}");
    }
    if let Some(index) = route.ifindex {
        match links.iter().find(|l| l.index == index) {
            Some(link) => line += &format!(" dev {}", link.name),
            None => line += &format!(" dev #{index}"),
        }
    }
    line
}
