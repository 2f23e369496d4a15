//! podlab-cni against the kernel: pods given a network by the real CNI plugins of Debian's
//! containernetworking-plugins and by the built-in netlink path, then taken off it again.
//!
//! Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); skipped otherwise. Run it inside a sandbox:
//! `unshare --mount --uts --ipc --net --pid --fork --mount-proc --propagation private
//!  cargo test -p podlab-cni --test cni`. Each test also makes its own "node": a forked child
//! in a fresh network namespace, where the bridge and the host ends of the veths live and the
//! plugins run, so nothing is ever made in the namespace the test was started in, and tests can
//! run in parallel with the same bridge name. Pods are `Holder`s with a network namespace each.
//! Traffic only goes between pod addresses inside those namespaces.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use podlab_cni::ipam::leases_in;
use podlab_cni::{Attachment, BuiltinNetwork, CniConfig, CniNetwork, Error, PodNetwork, PodlabNet};
use podlab_ns::child::run_in_child;
use podlab_ns::net::{socket_in, Link, Netlink};
use podlab_ns::ops::{self, Holder};
use podlab_ns::NsKind;

const PLUGINS: &str = "/usr/lib/cni";

// ---- the sandbox ---------------------------------------------------------------------------

/// Runs `scenario` in a forked child inside a fresh network namespace (the node). Assertions
/// inside fail the test with their message. `false` when this process may not do that.
fn on_fresh_node(scenario: impl FnOnce()) -> bool {
    if run_in_child(|| ops::create(&[NsKind::Net])).is_err() {
        eprintln!("skipped: cannot create network namespaces here (needs root)");
        return false;
    }
    if !Path::new(PLUGINS).join("bridge").exists() {
        eprintln!("skipped: no CNI plugins in {PLUGINS}");
        return false;
    }
    let outcome = run_in_child(|| {
        ops::create(&[NsKind::Net])?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(scenario)).map_err(|panic| {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".to_owned());
            podlab_ns::Error::Invalid(text)
        })
    });
    if let Err(err) = outcome {
        panic!("{err}");
    }
    true
}

/// A folder removed with everything in it when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("podlab-cni-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// podlab's network with its leases and conflists inside `lab`.
fn podlab_net(lab: &TempDir) -> PodlabNet {
    PodlabNet::new(&lab.path("ipam"))
}

/// The CNI path over `net`'s default conflist, written into `lab`'s config folder.
fn cni_network(lab: &TempDir, net: &PodlabNet, bin_dirs: &[PathBuf]) -> CniNetwork {
    let mut config = CniConfig::new(&lab.path("net.d"), bin_dirs);
    config.default_net = Some(net.clone());
    CniNetwork::new(config).unwrap()
}

/// A pod: a held network namespace and its attachment.
fn pod(lab: &TempDir, id: &str) -> (Holder, Attachment) {
    let holder = Holder::spawn(&[NsKind::Net], || Ok(())).unwrap();
    let cache = lab.path(&format!("sandbox-{id}"));
    let attachment = Attachment::new(id, &holder.ns_path(NsKind::Net), &cache).for_pod(
        "default",
        &format!("pod-{id}"),
        &format!("uid-{id}"),
    );
    (holder, attachment)
}

fn pod_netlink(holder: &Holder) -> Netlink {
    Netlink::open_in(holder.open(NsKind::Net).unwrap().as_fd()).unwrap()
}

/// The IPv4 addresses on the pod's `eth0`, read from inside its namespace.
fn eth0_addresses(holder: &Holder) -> Vec<(IpAddr, u8)> {
    pod_netlink(holder)
        .addresses()
        .unwrap()
        .into_iter()
        .filter(|a| a.ifname == "eth0" && a.addr.is_ipv4())
        .map(|a| (a.addr, a.prefix_len))
        .collect()
}

fn node_veths() -> Vec<Link> {
    Netlink::open()
        .unwrap()
        .links()
        .unwrap()
        .into_iter()
        .filter(|l| l.kind.as_deref() == Some("veth"))
        .collect()
}

fn lease_holders(net: &PodlabNet) -> Vec<String> {
    leases_in(&net.lease_dir())
        .unwrap()
        .into_iter()
        .map(|l| format!("{} {}", l.ip, l.container_id))
        .collect()
}

/// Polls (bounded) until the node has `count` veths: a namespace's devices go away a moment
/// after its last holder does.
fn wait_for_veths(count: usize) -> Vec<Link> {
    for _ in 0..500 {
        let veths = node_veths();
        if veths.len() == count {
            return veths;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    node_veths()
}

fn ip_forward() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")
        .unwrap()
        .trim()
        .to_owned()
}

// ---- what every path must give -------------------------------------------------------------

/// Two pods on `network`: addresses on the subnet, only the subnet's route, TCP both ways over
/// the pod IPs, CHECK passing, and DEL removing veth, lease and cache, twice.
fn two_pods_talk(network: &dyn PodNetwork, net: &PodlabNet, lab: &TempDir) {
    let (a_holder, a) = pod(lab, "pod-a");
    let (b_holder, b) = pod(lab, "pod-b");
    let a_status = network.setup(&a).unwrap();
    let b_status = network.setup(&b).unwrap();

    for (holder, status) in [(&a_holder, &a_status), (&b_holder, &b_status)] {
        let ip = status.ip.expect("a pod IP");
        assert!(net.subnet.contains(&match ip {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(_) => panic!("IPv4 expected: {ip}"),
        }));
        assert_eq!(status.ips, [ip]);
        assert_eq!(
            eth0_addresses(holder),
            [(ip, net.subnet.prefix_len())],
            "the pod's eth0, read inside its namespace, has the pod IP"
        );
        let container = &status.interfaces[2];
        assert_eq!(container.name, "eth0");
        assert_eq!(
            container.sandbox,
            holder.ns_path(NsKind::Net).display().to_string()
        );
        assert_eq!(status.network, net.name);
        assert!(status.result_json.contains(&ip.to_string()));

        let mut inside = pod_netlink(holder);
        assert!(inside.link("lo").unwrap().unwrap().up, "lo is up");
        let eth0 = inside.link("eth0").unwrap().unwrap().index;
        let routes = inside.routes().unwrap();
        assert!(
            routes.iter().all(|r| r.dst
                == Some((IpAddr::V4(net.subnet.network()), net.subnet.prefix_len()))
                && r.gateway.is_none()
                && r.ifindex == Some(eth0)),
            "the only route is the subnet's, on-link (no default route, no way out): {routes:?}"
        );
        assert_eq!(routes.len(), 1, "{routes:?}");
    }
    assert_ne!(a_status.ip, b_status.ip);

    let node = Netlink::open()
        .unwrap()
        .link(&net.bridge)
        .unwrap()
        .expect("the bridge");
    let mut node_netlink = Netlink::open().unwrap();
    let gateway = node_netlink
        .addresses()
        .unwrap()
        .into_iter()
        .find(|x| x.ifname == net.bridge)
        .expect("the bridge has the gateway address");
    assert_eq!(gateway.addr, IpAddr::V4(net.gateway()));
    let veths = node_veths();
    assert_eq!(veths.len(), 2, "{veths:?}");
    assert!(veths.iter().all(|v| v.master == Some(node.index) && v.up));

    let (a_ip, b_ip) = (a_status.ip.unwrap(), b_status.ip.unwrap());
    tcp_exchange(&a_holder, a_ip, &b_holder, b_ip);
    tcp_exchange(&b_holder, b_ip, &a_holder, a_ip);

    network.check(&a).unwrap();
    network.check(&b).unwrap();

    assert_eq!(lease_holders(net).len(), 2, "{:?}", lease_holders(net));
    network.teardown(&a).unwrap();
    assert_eq!(lease_holders(net), [format!("{b_ip} pod-b")]);
    assert_eq!(node_veths().len(), 1, "a's veth is gone");
    assert!(
        pod_netlink(&a_holder).link("eth0").unwrap().is_none(),
        "the pod end went with it"
    );
    network.teardown(&a).unwrap();
    assert!(network.check(&a).is_err(), "nothing to check after DEL");

    // b's namespace goes first (the pod's pause died): DEL still frees the lease.
    b_holder.kill();
    network.teardown(&b).unwrap();
    network.teardown(&b).unwrap();
    assert!(lease_holders(net).is_empty(), "{:?}", lease_holders(net));
    assert!(
        wait_for_veths(0).is_empty(),
        "b's veth died with its namespace"
    );
    let left: Vec<_> = std::fs::read_dir(&b.cache_dir)
        .map(|d| d.count())
        .into_iter()
        .collect();
    assert!(
        left.iter().all(|n| *n == 0),
        "no cached result is left: {left:?}"
    );
    Netlink::open().unwrap().delete_link(&net.bridge).unwrap();
}

/// `server` listens on its pod IP, `client` connects from its own; bytes go both ways and the
/// server sees the client's pod IP as the peer.
fn tcp_exchange(server: &Holder, server_ip: IpAddr, client: &Holder, client_ip: IpAddr) {
    let server_ns = server.open(NsKind::Net).unwrap();
    let client_ns = client.open(NsKind::Net).unwrap();
    let address = SocketAddr::new(server_ip, 7070);
    let listener: OwnedFd = socket_in(server_ns.as_fd(), "bind", || {
        TcpListener::bind(address).map(OwnedFd::from)
    })
    .unwrap();
    let listener = TcpListener::from(listener);
    let stream: OwnedFd = socket_in(client_ns.as_fd(), "connect", || {
        TcpStream::connect_timeout(&address, Duration::from_secs(10)).map(OwnedFd::from)
    })
    .unwrap();
    let mut outgoing = TcpStream::from(stream);
    let (mut incoming, peer) = listener.accept().unwrap();
    assert_eq!(
        peer.ip(),
        client_ip,
        "the connection came from the client's pod IP"
    );
    for s in [&outgoing, &incoming] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    outgoing.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    incoming.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    incoming.write_all(b"pong").unwrap();
    outgoing.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"pong");
}

// ---- the CNI path --------------------------------------------------------------------------

#[test]
fn cni_plugins_give_two_pods_addresses_they_talk_over_and_del_cleans_up() {
    on_fresh_node(|| {
        let lab = TempDir::new("cni-happy");
        let net = podlab_net(&lab);
        let network = cni_network(&lab, &net, &[PathBuf::from(PLUGINS)]);
        let list = network
            .validate()
            .expect("plugins speak the default conflist's version");
        assert_eq!(list.path, lab.path("net.d").join("10-podlab.conflist"));
        two_pods_talk(&network, &net, &lab);
        // Documented side effect of the bridge plugin with isGateway: it switched on
        // forwarding, in this (throw-away) node namespace, where it ran.
        assert_eq!(ip_forward(), "1");
    });
}

#[test]
fn cni_result_is_cached_for_del_and_check_and_the_loopback_plugin_ran() {
    on_fresh_node(|| {
        let lab = TempDir::new("cni-cache");
        let net = podlab_net(&lab);
        let network = cni_network(&lab, &net, &[PathBuf::from(PLUGINS)]);
        let (holder, a) = pod(&lab, "cached");
        assert!(!pod_netlink(&holder).link("lo").unwrap().unwrap().up);
        let status = network.setup(&a).unwrap();
        assert!(
            pod_netlink(&holder).link("lo").unwrap().unwrap().up,
            "the loopback plugin brought lo up"
        );
        let cache_file = a.cache_dir.join("podlab-cached-eth0");
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&cache_file).unwrap()).unwrap();
        assert_eq!(record["kind"], "cniCacheV1");
        assert_eq!(record["containerId"], "cached");
        assert_eq!(record["config"]["name"], "podlab");
        assert_eq!(
            record["result"],
            serde_json::from_str::<serde_json::Value>(&status.result_json).unwrap()
        );
        assert!(record["cniArgs"]
            .as_str()
            .unwrap()
            .contains("K8S_POD_NAME=pod-cached"));
        // The lease is host-local's: one file named after the IP, holding id and ifname.
        let lease =
            std::fs::read_to_string(net.lease_dir().join(status.ip.unwrap().to_string())).unwrap();
        assert_eq!(lease, "cached\r\neth0");

        // A second ADD without a DEL is refused before any plugin runs, and the first
        // attachment stays whole.
        let again = network.setup(&a).unwrap_err();
        assert!(again.to_string().contains("already attached"), "{again}");
        assert_eq!(lease_holders(&net).len(), 1);
        assert_eq!(node_veths().len(), 1);

        // Editing the conflist after ADD does not change what DEL releases.
        std::fs::write(lab.path("net.d/10-podlab.conflist"), "{ broken").unwrap();
        network
            .check(&a)
            .expect("CHECK runs with the cached configuration");
        network.teardown(&a).unwrap();
        assert!(!cache_file.exists());
        assert!(lease_holders(&net).is_empty());
        assert!(node_veths().is_empty());
    });
}

#[test]
fn exhausted_range_fails_with_the_plugins_message_leaves_nothing_and_recovers() {
    on_fresh_node(|| {
        let lab = TempDir::new("cni-exhausted");
        let mut net = podlab_net(&lab);
        net.subnet = "10.89.0.0/24".parse().unwrap();
        net.range_start = Some("10.89.0.2".parse().unwrap());
        net.range_end = Some("10.89.0.2".parse().unwrap());
        let network = cni_network(&lab, &net, &[PathBuf::from(PLUGINS)]);
        let (_a_holder, a) = pod(&lab, "first");
        let (b_holder, b) = pod(&lab, "second");
        assert_eq!(
            network.setup(&a).unwrap().ip.unwrap().to_string(),
            "10.89.0.2"
        );

        let err = network.setup(&b).unwrap_err();
        assert_eq!(
            err.to_string(),
            "plugin type=\"bridge\" failed (add): failed to allocate for range 0: \
             no IP addresses available in range set: 10.89.0.2-10.89.0.2"
        );
        assert!(matches!(err, Error::Plugin { .. }), "{err:?}");
        assert_eq!(
            lease_holders(&net),
            ["10.89.0.2 first"],
            "no lease for the failed pod"
        );
        assert_eq!(
            node_veths().len(),
            1,
            "the veth bridge made before IPAM failed was DELeted"
        );
        assert!(pod_netlink(&b_holder).link("eth0").unwrap().is_none());

        // A lease is freed: the retry succeeds and gets it.
        network.teardown(&a).unwrap();
        let status = network.setup(&b).unwrap();
        assert_eq!(status.ip.unwrap().to_string(), "10.89.0.2");
        assert_eq!(eth0_addresses(&b_holder), [(status.ip.unwrap(), 24)]);
        network.teardown(&b).unwrap();
        assert!(lease_holders(&net).is_empty());
    });
}

#[test]
fn missing_plugin_binary_fails_naming_it_and_the_path_then_recovers() {
    on_fresh_node(|| {
        let lab = TempDir::new("cni-missing");
        let bin = lab.path("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for plugin in ["loopback", "host-local"] {
            std::os::unix::fs::symlink(Path::new(PLUGINS).join(plugin), bin.join(plugin)).unwrap();
        }
        let net = podlab_net(&lab);
        let network = cni_network(&lab, &net, std::slice::from_ref(&bin));
        let (holder, a) = pod(&lab, "waiting");

        let err = network.setup(&a).unwrap_err();
        assert!(matches!(err, Error::PluginNotFound { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "CNI plugin \"bridge\" not found in CNI_PATH {}",
                bin.display()
            )
        );
        assert!(node_veths().is_empty());
        assert!(lease_holders(&net).is_empty());
        assert!(pod_netlink(&holder).link("eth0").unwrap().is_none());

        // The binary appears: the same attachment now comes up.
        std::os::unix::fs::symlink(Path::new(PLUGINS).join("bridge"), bin.join("bridge")).unwrap();
        let status = network.setup(&a).unwrap();
        assert_eq!(eth0_addresses(&holder)[0].0, status.ip.unwrap());
        network.teardown(&a).unwrap();
        assert!(node_veths().is_empty());
    });
}

#[test]
fn host_ports_fail_clearly_where_the_network_cannot_make_them_and_leave_nothing() {
    on_fresh_node(|| {
        use std::os::unix::fs::PermissionsExt;
        let lab = TempDir::new("cni-hostports");
        let bin = lab.path("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for plugin in ["loopback", "bridge", "host-local"] {
            std::os::unix::fs::symlink(Path::new(PLUGINS).join(plugin), bin.join(plugin)).unwrap();
        }
        // portmap as it answers on a node without iptables NAT (its words: "failed to open
        // iptables"); its DEL succeeds.
        let portmap = bin.join("portmap");
        std::fs::write(
            &portmap,
            "#!/bin/sh\nif [ \"$CNI_COMMAND\" = ADD ]; then\n  echo '{\"cniVersion\": \"1.0.0\", \"code\": 999, \"msg\": \"failed to open iptables: exit status 3\"}'\n  exit 1\nfi\n",
        )
        .unwrap();
        std::fs::set_permissions(&portmap, std::fs::Permissions::from_mode(0o755)).unwrap();
        let net = podlab_net(&lab);
        let network = cni_network(&lab, &net, std::slice::from_ref(&bin));
        let (holder, mut a) = pod(&lab, "hostport");
        a.capability_args.insert(
            "portMappings".to_owned(),
            serde_json::json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        );
        let err = network.setup(&a).unwrap_err();
        assert!(matches!(err.primary(), Error::HostPorts { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "network \"podlab\": the pod's host ports need iptables NAT on this node, and the \
             portmap plugin could not set them up: plugin type=\"portmap\" failed (add): \
             failed to open iptables: exit status 3"
        );
        // Nothing half-made: the bridge's ADD was undone.
        assert!(node_veths().is_empty());
        assert!(lease_holders(&net).is_empty());
        assert!(pod_netlink(&holder).link("eth0").unwrap().is_none());

        // Without host ports the same network works: portmap is not even run.
        a.capability_args.clear();
        network.setup(&a).unwrap();
        network.teardown(&a).unwrap();
        assert!(node_veths().is_empty());

        // A network with no plugin for host ports refuses them before any plugin runs.
        let mut plain = net.conflist();
        plain["plugins"].as_array_mut().unwrap().truncate(1);
        let file = lab.path("net.d").join("00-plain.conflist");
        std::fs::write(&file, plain.to_string()).unwrap();
        a.capability_args.insert(
            "portMappings".to_owned(),
            serde_json::json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        );
        let err = network.setup(&a).unwrap_err();
        assert!(matches!(err, Error::NoCapability { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("has no plugin with the \"portMappings\" capability"),
            "{err}"
        );
        assert!(node_veths().is_empty());
    });
}

#[test]
fn broken_conflist_fails_naming_the_file_then_recovers_once_fixed() {
    on_fresh_node(|| {
        let lab = TempDir::new("cni-broken");
        let net = podlab_net(&lab);
        let conf_dir = lab.path("net.d");
        std::fs::create_dir_all(&conf_dir).unwrap();
        let file = conf_dir.join("50-mine.conflist");
        std::fs::write(
            &file,
            r#"{"cniVersion": "1.0.0", "name": "podlab", "plugins": [{"type": "bridge","#,
        )
        .unwrap();
        // The user's own folder: no default is written into it.
        let network =
            CniNetwork::new(CniConfig::new(&conf_dir, &[PathBuf::from(PLUGINS)])).unwrap();
        let (holder, a) = pod(&lab, "patient");

        let err = network.setup(&a).unwrap_err();
        assert!(matches!(err, Error::Conf { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("50-mine.conflist") && message.contains("not valid JSON"),
            "{message}"
        );
        assert!(node_veths().is_empty());
        assert!(lease_holders(&net).is_empty());
        network
            .teardown(&a)
            .expect_err("no cache and no readable conflist: DEL cannot know what to do");

        std::fs::write(&file, net.conflist_text()).unwrap();
        let status = network.setup(&a).unwrap();
        assert_eq!(eth0_addresses(&holder)[0].0, status.ip.unwrap());
        network.teardown(&a).unwrap();
        assert!(lease_holders(&net).is_empty());
        assert!(node_veths().is_empty());
    });
}

// ---- the built-in path ---------------------------------------------------------------------

#[test]
fn builtin_path_gives_two_pods_addresses_they_talk_over_and_del_cleans_up() {
    on_fresh_node(|| {
        let lab = TempDir::new("builtin-happy");
        let net = podlab_net(&lab);
        let forwarding = ip_forward();
        let network = BuiltinNetwork::new(net.clone()).unwrap();
        two_pods_talk(&network, &net, &lab);
        assert_eq!(
            ip_forward(),
            forwarding,
            "the built-in path touches no sysctl"
        );
    });
}

#[test]
fn builtin_result_has_the_bridge_plugins_shape() {
    on_fresh_node(|| {
        let lab = TempDir::new("builtin-shape");
        let net = podlab_net(&lab);
        let builtin = BuiltinNetwork::new(net.clone()).unwrap();
        let (holder, a) = pod(&lab, "shape");
        let status = builtin.setup(&a).unwrap();
        let names: Vec<&str> = status.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["podlab0", builtin.host_veth(&a).as_str(), "eth0"]);
        assert!(
            status.interfaces.iter().all(|i| i.mac.len() == 17),
            "{:?}",
            status.interfaces
        );
        assert_eq!(status.result.ips[0].interface, Some(2));
        assert_eq!(
            status.result.ips[0].gateway,
            Some(IpAddr::V4(net.gateway()))
        );
        let lease =
            std::fs::read_to_string(net.lease_dir().join(status.ip.unwrap().to_string())).unwrap();
        assert_eq!(lease, "shape\r\neth0", "host-local's lease format");

        // CHECK notices a pod whose address was taken away.
        builtin.check(&a).unwrap();
        pod_netlink(&holder).delete_link("eth0").unwrap();
        let err = builtin.check(&a).unwrap_err();
        assert!(err.to_string().contains("no eth0"), "{err}");
        builtin.teardown(&a).unwrap();
        builtin.teardown(&a).unwrap();
        assert!(lease_holders(&net).is_empty());
        assert!(node_veths().is_empty());
    });
}

#[test]
fn builtin_exhausted_range_fails_leaves_nothing_and_recovers() {
    on_fresh_node(|| {
        let lab = TempDir::new("builtin-exhausted");
        let mut net = podlab_net(&lab);
        net.subnet = "10.89.0.0/30".parse().unwrap();
        let builtin = BuiltinNetwork::new(net.clone()).unwrap();
        let (_a_holder, a) = pod(&lab, "first");
        let (b_holder, b) = pod(&lab, "second");
        builtin.setup(&a).unwrap();
        let err = builtin.setup(&b).unwrap_err();
        assert_eq!(
            err.to_string(),
            "network \"podlab\": no IP addresses available in range 10.89.0.1-10.89.0.2"
        );
        assert_eq!(node_veths().len(), 1);
        assert_eq!(lease_holders(&net), ["10.89.0.2 first"]);
        assert!(pod_netlink(&b_holder).link("eth0").unwrap().is_none());
        builtin.teardown(&a).unwrap();
        assert_eq!(
            builtin.setup(&b).unwrap().ip.unwrap().to_string(),
            "10.89.0.2"
        );
        builtin.teardown(&b).unwrap();
    });
}

#[test]
fn both_paths_share_one_lease_store_and_one_bridge() {
    on_fresh_node(|| {
        let lab = TempDir::new("shared");
        let net = podlab_net(&lab);
        let cni = cni_network(&lab, &net, &[PathBuf::from(PLUGINS)]);
        let builtin = BuiltinNetwork::new(net.clone()).unwrap();
        let (a_holder, a) = pod(&lab, "by-plugin");
        let (b_holder, b) = pod(&lab, "by-netlink");
        let a_ip = cni.setup(&a).unwrap().ip.unwrap();
        let b_ip = builtin.setup(&b).unwrap().ip.unwrap();
        assert_ne!(
            a_ip, b_ip,
            "host-local and the built-in IPAM see each other's leases"
        );
        tcp_exchange(&a_holder, a_ip, &b_holder, b_ip);
        builtin.teardown(&b).unwrap();
        cni.teardown(&a).unwrap();
        assert!(lease_holders(&net).is_empty());
        assert!(node_veths().is_empty());
    });
}

#[test]
fn setup_refuses_what_is_not_a_network_namespace() {
    on_fresh_node(|| {
        let lab = TempDir::new("not-netns");
        let net = podlab_net(&lab);
        let not_netns = lab.path("plain-file");
        std::fs::write(&not_netns, "").unwrap();
        let a = Attachment::new("nons", &not_netns, &lab.path("sandbox"));
        let cni = cni_network(&lab, &net, &[PathBuf::from(PLUGINS)]);
        let builtin = BuiltinNetwork::new(net.clone()).unwrap();
        assert!(cni
            .setup(&a)
            .unwrap_err()
            .to_string()
            .contains("not a network namespace"));
        assert!(builtin.setup(&a).is_err());
        assert!(lease_holders(&net).is_empty());
        // DEL of an attachment whose namespace is a stale path succeeds (CNI_NETNS="").
        cni.teardown(&a).unwrap();
        builtin.teardown(&a).unwrap();
    });
}
