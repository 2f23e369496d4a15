//! Integration tests: net. Every test makes its own network namespaces (held by sleeping child
//! processes) and works only in them; what netlink reports is checked against a second source
//! where the kernel has one (`/proc/PID/net/dev` and `/proc/PID/net/route` show the namespace
//! of process PID), and connectivity with a real TCP connection.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use podlab_ns::net::{socket_in, Link, Netlink, Route};
use podlab_ns::ops::Holder;
use podlab_ns::NsKind;

/// A new network namespace held by a sleeping child, and an fd on it.
struct Netns {
    fd: OwnedFd,
    holder: Holder,
}

impl Netns {
    fn new() -> Netns {
        let holder = Holder::spawn(&[NsKind::Net], || Ok(())).expect("holding a new netns");
        let fd = holder
            .open(NsKind::Net)
            .expect("opening the holder's netns");
        Netns { fd, holder }
    }

    fn netlink(&self) -> Netlink {
        Netlink::open_in(self.fd.as_fd()).expect("netlink handle in the netns")
    }

    /// The interface names the kernel lists in `/proc/PID/net/dev` for this namespace.
    fn proc_devices(&self) -> Vec<String> {
        let path = format!("/proc/{}/net/dev", self.holder.pid);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        text.lines()
            .skip(2)
            .filter_map(|line| line.split(':').next())
            .map(|name| name.trim().to_owned())
            .collect()
    }

    /// `(interface, destination, gateway, mask)` of `/proc/PID/net/route` (the IPv4 main table).
    fn proc_routes(&self) -> Vec<(String, Ipv4Addr, Ipv4Addr, Ipv4Addr)> {
        let path = format!("/proc/{}/net/route", self.holder.pid);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // The kernel prints each address as the hex of its in-memory (network order) u32.
        let addr = |hex: &str| Ipv4Addr::from(u32::from_str_radix(hex, 16).unwrap().to_ne_bytes());
        text.lines()
            .skip(1)
            .map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                (f[0].to_owned(), addr(f[1]), addr(f[2]), addr(f[7]))
            })
            .collect()
    }
}

fn v4(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn named<'a>(links: &'a [Link], name: &str) -> Option<&'a Link> {
    links.iter().find(|l| l.name == name)
}

/// A veth `host0` in `node` whose peer `pod0` is created inside `pod`.
fn veth_between(node: &Netns, pod: &Netns) {
    node.netlink()
        .create_veth("host0", "pod0", Some(pod.fd.as_fd()))
        .expect("create_veth");
}

/// Gives `ifname` in `netns` the address `addr/24` and sets it up; returns the handle.
fn address_and_up(netns: &Netns, ifname: &str, addr: &str) -> Netlink {
    let mut netlink = netns.netlink();
    netlink.add_address(ifname, v4(addr), 24).unwrap();
    netlink.set_up(ifname).unwrap();
    netlink
}

#[test]
fn loopback_up_makes_lo_up_in_a_fresh_netns() {
    let pod = Netns::new();
    let mut netlink = pod.netlink();
    let before = netlink.links().unwrap();
    let lo = named(&before, "lo").expect("a new netns has lo");
    assert!(!lo.up, "lo starts down: {before:?}");
    assert!(
        netlink.addresses().unwrap().is_empty(),
        "and without addresses"
    );

    netlink.loopback_up().unwrap();
    let after = netlink.links().unwrap();
    assert!(named(&after, "lo").unwrap().up, "{after:?}");
    // The kernel gives an up lo its 127.0.0.1/8 by itself.
    let addresses = netlink.addresses().unwrap();
    assert!(
        addresses
            .iter()
            .any(|a| a.ifname == "lo" && a.addr == v4("127.0.0.1") && a.prefix_len == 8),
        "{addresses:?}"
    );
}

#[test]
fn create_veth_puts_the_peer_directly_inside_the_target_netns() {
    let (node, pod) = (Netns::new(), Netns::new());
    veth_between(&node, &pod);

    let node_links = node.netlink().links().unwrap();
    let pod_links = pod.netlink().links().unwrap();
    assert!(named(&node_links, "host0").is_some(), "{node_links:?}");
    assert!(named(&node_links, "pod0").is_none(), "{node_links:?}");
    let peer = named(&pod_links, "pod0").expect("the peer is inside the pod netns");
    assert_eq!(peer.kind.as_deref(), Some("veth"));
    assert!(named(&pod_links, "host0").is_none(), "{pod_links:?}");
    // The kernel's other listing agrees.
    assert!(pod.proc_devices().contains(&"pod0".to_owned()));
    assert!(!node.proc_devices().contains(&"pod0".to_owned()));

    let mut inside = pod.netlink();
    inside
        .add_address("pod0", v4("10.213.1.2"), 24)
        .expect("add_address");
    inside
        .add_address("pod0", "fd00:213:1::2".parse().unwrap(), 64)
        .expect("add_address v6");
    let addresses = inside.addresses().unwrap();
    for (addr, len) in [
        (v4("10.213.1.2"), 24),
        ("fd00:213:1::2".parse().unwrap(), 64),
    ] {
        assert!(
            addresses.iter().any(|a| a.ifname == "pod0"
                && a.ifindex == peer.index
                && a.addr == addr
                && a.prefix_len == len),
            "{addr}/{len} listed inside: {addresses:?}"
        );
    }
    let outside = node.netlink().addresses().unwrap();
    assert!(
        outside.iter().all(|a| a.addr != v4("10.213.1.2")),
        "{outside:?}"
    );
}

#[test]
fn a_route_added_is_listed() {
    let (node, pod) = (Netns::new(), Netns::new());
    veth_between(&node, &pod);
    let mut inside = address_and_up(&pod, "pod0", "10.213.2.2");
    let index = inside.link_index("pod0").unwrap().expect("pod0 index");

    inside
        .add_route(
            Some((v4("10.213.3.0"), 24)),
            Some(v4("10.213.2.1")),
            Some("pod0"),
        )
        .expect("route via a gateway");
    inside
        .add_route(Some((v4("10.213.4.0"), 24)), None, Some("pod0"))
        .expect("on-link route");
    let routes = inside.routes().unwrap();
    for route in [
        Route {
            dst: Some((v4("10.213.3.0"), 24)),
            gateway: Some(v4("10.213.2.1")),
            ifindex: Some(index),
        },
        Route {
            dst: Some((v4("10.213.4.0"), 24)),
            gateway: None,
            ifindex: Some(index),
        },
    ] {
        assert!(routes.contains(&route), "{route:?} in {routes:?}");
    }
    let proc_routes = pod.proc_routes();
    assert!(
        proc_routes.contains(&(
            "pod0".to_owned(),
            Ipv4Addr::new(10, 213, 3, 0),
            Ipv4Addr::new(10, 213, 2, 1),
            Ipv4Addr::new(255, 255, 255, 0)
        )),
        "{proc_routes:?}"
    );
    assert!(
        node.netlink().routes().unwrap().is_empty(),
        "nothing in the node"
    );
}

#[test]
fn create_bridge_and_set_master_attach_the_host_end() {
    let (node, pod) = (Netns::new(), Netns::new());
    veth_between(&node, &pod);
    let mut netlink = node.netlink();
    netlink.create_bridge("br0").expect("create_bridge");
    netlink.set_up("br0").unwrap();
    netlink.set_master("host0", "br0").expect("set_master");

    let links = netlink.links().unwrap();
    let bridge = named(&links, "br0").expect("br0");
    assert_eq!(bridge.kind.as_deref(), Some("bridge"));
    assert!(bridge.up);
    assert_eq!(named(&links, "host0").unwrap().master, Some(bridge.index));
    assert_eq!(bridge.master, None);
}

#[test]
fn delete_link_removes_the_veth_with_its_peer_and_is_ok_twice() {
    let (node, pod) = (Netns::new(), Netns::new());
    veth_between(&node, &pod);
    let mut netlink = node.netlink();
    netlink.delete_link("host0").expect("delete_link");
    assert_eq!(netlink.link_index("host0").unwrap(), None);
    // The peer goes with it, in the other namespace.
    assert_eq!(pod.netlink().link_index("pod0").unwrap(), None);
    assert!(!pod.proc_devices().contains(&"pod0".to_owned()));
    netlink
        .delete_link("host0")
        .expect("deleting what is gone is Ok");
}

#[test]
fn a_tcp_connection_between_two_netns_over_the_veth_works() {
    let (node, pod) = (Netns::new(), Netns::new());
    veth_between(&node, &pod);
    address_and_up(&node, "host0", "10.213.6.1");
    address_and_up(&pod, "pod0", "10.213.6.2");

    let listener = TcpListener::from(
        socket_in(node.fd.as_fd(), "listen", || {
            TcpListener::bind((Ipv4Addr::new(10, 213, 6, 1), 0)).map(OwnedFd::from)
        })
        .unwrap(),
    );
    let target: SocketAddr = listener.local_addr().unwrap();
    let mut client = TcpStream::from(
        socket_in(pod.fd.as_fd(), "connect", || {
            TcpStream::connect_timeout(&target, Duration::from_secs(10)).map(OwnedFd::from)
        })
        .expect("connect from the pod to the node over the veth"),
    );
    client.write_all(b"ping over veth").unwrap();
    drop(client);
    let (mut accepted, peer) = listener.accept().unwrap();
    assert_eq!(
        peer.ip(),
        v4("10.213.6.2"),
        "it came from the pod's address"
    );
    accepted
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut received = Vec::new();
    accepted.read_to_end(&mut received).unwrap();
    assert_eq!(received, b"ping over veth");

    // The same address from a third namespace, with no cable to the node, is not reachable.
    let stranger = Netns::new();
    stranger.netlink().loopback_up().unwrap();
    let refused = socket_in(stranger.fd.as_fd(), "connect", || {
        TcpStream::connect_timeout(&target, Duration::from_secs(10)).map(OwnedFd::from)
    });
    assert!(
        refused.is_err(),
        "no route from a namespace without the veth"
    );
}

#[test]
fn errors_name_the_interface_and_carry_the_errno() {
    let (node, pod) = (Netns::new(), Netns::new());
    let mut netlink = node.netlink();

    let err = netlink.set_up("nosuch0").unwrap_err();
    assert!(err.to_string().contains("nosuch0"), "{err}");
    assert_eq!(err.errno(), Some(nix::Error::ENODEV), "{err}");

    let err = netlink
        .add_address("nosuch1", v4("10.213.7.1"), 24)
        .unwrap_err();
    assert!(err.to_string().contains("nosuch1"), "{err}");

    veth_between(&node, &pod);
    let err = netlink.set_master("host0", "nosuch-br").unwrap_err();
    assert!(err.to_string().contains("nosuch-br"), "{err}");

    let err = netlink.create_veth("host0", "other0", None).unwrap_err();
    assert!(err.to_string().contains("host0"), "{err}");
    assert_eq!(err.errno(), Some(nix::Error::EEXIST), "{err}");

    // The kernel's own explanation (extended ack) comes along.
    netlink.add_address("host0", v4("10.213.7.1"), 24).unwrap();
    let err = netlink
        .add_route(Some((v4("10.213.8.1"), 24)), None, Some("host0"))
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("10.213.8.1/24"), "{text}");
    assert!(text.contains("EINVAL") && text.contains("prefix"), "{text}");
}

#[test]
fn open_path_reaches_the_namespace_of_a_proc_path() {
    let pod = Netns::new();
    let mut netlink = Netlink::open_path(&pod.holder.ns_path(NsKind::Net)).unwrap();
    netlink.create_bridge("br-path").unwrap();
    assert!(pod.proc_devices().contains(&"br-path".to_owned()));
    let err = match Netlink::open_path("/nonexistent/netns".as_ref()) {
        Ok(_) => panic!("opened a netns that does not exist"),
        Err(err) => err,
    };
    assert!(err.to_string().contains("/nonexistent/netns"), "{err}");
}

#[test]
fn demo_net_exits_0_and_all_evidence_holds() {
    let output = crate::support::podlab()
        .args(["demo", "net"])
        .output()
        .expect("running podlab demo net");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "podlab demo net: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("demo net: all evidence holds"), "{stdout}");
    assert!(!stdout.contains("[FAIL]"), "{stdout}");
}
