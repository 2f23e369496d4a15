//! `podlab demo net`: the pod's one network namespace, held by a stand-in for pause, given a
//! veth whose inner end is born inside it, and proven to carry a real TCP connection.
//!
//! Both ends of the veth live in namespaces the demo makes (a "node" and a "pod"), so the
//! namespace podlab runs in is only looked at, never changed: run on a real host, the demo adds
//! no interface, address or route to it. Everything ends with the two holder processes.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use podlab_ns::net::{socket_in, Address, Link, Netlink};
use podlab_ns::ops::{self, Holder};
use podlab_ns::NsKind;

use super::{say, Evidence};

const NODE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
const POD_ADDR: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
const PREFIX_LEN: u8 = 24;
const NODE_END: &str = "veth-pod";
const POD_END: &str = "eth0";
const PATIENCE: Duration = Duration::from_secs(5);

pub fn run(evidence: &mut Evidence) -> Result<()> {
    say("A pod's containers share one network namespace: one lo, one eth0, one set of ports.");
    say("So the containers of a pod reach each other over 127.0.0.1, and the pod has one IP.");
    say("A namespace lives while something holds it. In a pod that is the pause process: it");
    say("sleeps in the namespaces and the containers join them with setns(2). Here two");
    say("sleeping child processes hold two new network namespaces: a \"node\" and a \"pod\".");
    let node = Holder::spawn(&[NsKind::Net], || Ok(())).context("holding the node netns")?;
    let pod = Holder::spawn(&[NsKind::Net], || Ok(())).context("holding the pod netns")?;
    let own_inode = ops::self_inode(NsKind::Net)?;
    let node_inode = node.inode(NsKind::Net)?;
    let pod_inode = pod.inode(NsKind::Net)?;
    say(format!(
        "  podlab net:[{own_inode}]   node (pid {}) net:[{node_inode}]   pod (pid {}) net:[{pod_inode}]",
        node.pid, pod.pid
    ));
    evidence.compare(
        "the pod's network namespace is not the one podlab runs in",
        pod_inode,
        own_inode,
        false,
    );
    evidence.compare(
        "the pod's network namespace is not the node's",
        pod_inode,
        node_inode,
        false,
    );

    let outcome = wire_and_prove(evidence, node.open(NsKind::Net)?, pod.open(NsKind::Net)?);
    // The sockets and fds above kept the namespaces alive; now only the holders do.
    let mut node_view = Netlink::open_in(node.open(NsKind::Net)?.as_fd())?;
    say("The pod ends: its holder is killed, nothing else holds its namespace, so the kernel");
    say(format!(
        "destroys it, and eth0 with it; a veth never outlives one end, so {NODE_END} goes too."
    ));
    pod.kill();
    let gone = wait_for(|| Ok(node_view.link_index(NODE_END)?.is_none()))?;
    evidence.check(
        format!("{NODE_END} vanished from the node with the pod's namespace"),
        gone,
        if gone { "gone" } else { "still there" },
    );
    drop(node_view);
    node.kill();
    outcome
}

/// Everything done while both namespaces are up: lo, the veth, addresses, views, traffic.
fn wire_and_prove(
    evidence: &mut Evidence,
    node_ns: std::os::fd::OwnedFd,
    pod_ns: std::os::fd::OwnedFd,
) -> Result<()> {
    let mut inside = Netlink::open_in(pod_ns.as_fd())?;
    let fresh = inside.links()?;
    let fresh_addresses = inside.addresses()?;
    say("Inside the new pod namespace there is lo, down, and no address at all:");
    for link in &fresh {
        say(format!("  {}", link_text(link, &fresh_addresses)));
    }
    // Only lo, unless the kernel has fallback tunnel modules loaded (sit0, tunl0 ... appear in
    // every new namespace then, also down).
    let lo = fresh.iter().find(|l| l.name == "lo");
    evidence.check(
        "a new network namespace has lo, down, and no address",
        lo.is_some_and(|lo| !lo.up) && fresh_addresses.is_empty(),
        fresh
            .iter()
            .map(|l| link_text(l, &fresh_addresses))
            .collect::<Vec<_>>()
            .join(", "),
    );
    say("Bringing lo up (the CNI loopback plugin's job): RTM_NEWLINK with IFF_UP.");
    inside.loopback_up()?;
    let lo_up = inside.link("lo")?.is_some_and(|lo| lo.up);
    evidence.check(
        "lo is up inside the pod",
        lo_up,
        if lo_up { "UP" } else { "DOWN" },
    );

    say(format!(
        "A veth pair is a virtual cable. From the node, one RTM_NEWLINK creates {NODE_END} there"
    ));
    say(format!(
        "and its peer {POD_END} straight inside the pod (IFLA_NET_NS_FD), as CNI plugins do."
    ));
    let mut outside = Netlink::open_in(node_ns.as_fd())?;
    outside.loopback_up()?;
    outside.create_veth(NODE_END, POD_END, Some(pod_ns.as_fd()))?;
    outside.add_address(NODE_END, IpAddr::V4(NODE_ADDR), PREFIX_LEN)?;
    outside.set_up(NODE_END)?;
    inside.add_address(POD_END, IpAddr::V4(POD_ADDR), PREFIX_LEN)?;
    inside.set_up(POD_END)?;
    say(format!(
        "  node: {NODE_END} {NODE_ADDR}/{PREFIX_LEN}    pod: {POD_END} {POD_ADDR}/{PREFIX_LEN}"
    ));

    let mut here = Netlink::open()?;
    let views = [
        ("podlab", ops::self_inode(NsKind::Net)?, view(&mut here)?),
        ("node", inode_of(node_ns.as_fd())?, view(&mut outside)?),
        ("pod", inode_of(pod_ns.as_fd())?, view(&mut inside)?),
    ];
    say("Interfaces and addresses, namespace by namespace (each asked over its own socket):");
    for (name, inode, (links, addresses)) in &views {
        say(format!("  {name:<7} net:[{inode}]"));
        for link in links {
            say(format!("      {}", link_text(link, addresses)));
        }
    }
    let (here_links, here_addresses) = &views[0].2;
    let (pod_links, pod_addresses) = &views[2].2;
    let pod_eth0 = pod_links.iter().find(|l| l.name == POD_END);
    let addressed = pod_addresses.iter().any(|a| {
        a.ifname == POD_END && a.addr == IpAddr::V4(POD_ADDR) && a.prefix_len == PREFIX_LEN
    });
    evidence.check(
        format!("{POD_END} was born inside the pod and has {POD_ADDR}/{PREFIX_LEN} there"),
        pod_eth0.is_some() && addressed,
        pod_eth0.map_or("no eth0 in the pod".to_owned(), |l| {
            format!("{}, index {}", link_text(l, pod_addresses), l.index)
        }),
    );
    let pod_mac = pod_eth0.and_then(|l| l.mac.clone());
    let seen_here = here_links
        .iter()
        .filter(|l| l.name == NODE_END || (pod_mac.is_some() && l.mac == pod_mac))
        .map(|l| l.name.clone())
        .chain(
            here_addresses
                .iter()
                .filter(|a| a.addr == IpAddr::V4(POD_ADDR) || a.addr == IpAddr::V4(NODE_ADDR))
                .map(|a| format!("{}/{}", a.addr, a.prefix_len)),
        )
        .collect::<Vec<_>>();
    evidence.check(
        format!(
            "neither veth end nor their addresses are in podlab's own namespace (pod {POD_END} mac {})",
            pod_mac.as_deref().unwrap_or("?")
        ),
        seen_here.is_empty(),
        if seen_here.is_empty() {
            "absent".to_owned()
        } else {
            format!("found {}", seen_here.join(", "))
        },
    );
    drop((inside, outside, here));

    prove_tcp_over_the_veth(evidence, node_ns.as_fd(), pod_ns.as_fd())?;
    prove_loopback_is_the_pods_own(evidence, node_ns.as_fd(), pod_ns.as_fd())
}

/// A listener in the node on 10.213.0.1, a client made inside the pod: a real TCP handshake
/// over the veth, and a line of data across it.
fn prove_tcp_over_the_veth(
    evidence: &mut Evidence,
    node_ns: BorrowedFd<'_>,
    pod_ns: BorrowedFd<'_>,
) -> Result<()> {
    say("A socket belongs to the namespace its maker was in. podlab's thread steps into a");
    say("namespace (setns), makes a socket and steps back, like a process that joined it");
    say("(rootless, where the way back is closed, a forked child makes it and hands it over).");
    let listener = TcpListener::from(socket_in(node_ns, "listen on the node's end", || {
        TcpListener::bind((NODE_ADDR, 0)).map(OwnedFd::from)
    })?);
    let target = listener.local_addr()?;
    say(format!(
        "  node listens on {target}; the pod connects to it over {POD_END} -> {NODE_END}"
    ));
    let connected = connect_from(pod_ns, target);
    let greeting = b"hello from the pod";
    let outcome: Result<(SocketAddr, Vec<u8>)> = connected
        .context("connecting from the pod")
        .and_then(|mut client| {
            client.write_all(greeting)?;
            drop(client);
            let (mut accepted, peer) = listener.accept()?;
            accepted.set_read_timeout(Some(PATIENCE))?;
            let mut received = Vec::new();
            accepted.read_to_end(&mut received)?;
            Ok((peer, received))
        });
    let seen = match &outcome {
        Ok((peer, received)) => format!(
            "{peer} → {target}: \"{}\"",
            String::from_utf8_lossy(received)
        ),
        Err(err) => format!("{err:#}"),
    };
    say(format!("  {seen}"));
    let holds = matches!(&outcome, Ok((peer, received))
        if peer.ip() == IpAddr::V4(POD_ADDR) && received == greeting);
    evidence.check(
        format!("a TCP connection from the pod reaches {NODE_ADDR}, coming from {POD_ADDR}"),
        holds,
        seen,
    );
    Ok(())
}

/// Two sockets made in the pod meet on its 127.0.0.1; the node's 127.0.0.1 is another one.
fn prove_loopback_is_the_pods_own(
    evidence: &mut Evidence,
    node_ns: BorrowedFd<'_>,
    pod_ns: BorrowedFd<'_>,
) -> Result<()> {
    let listener = TcpListener::from(socket_in(pod_ns, "listen on the pod's 127.0.0.1", || {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map(OwnedFd::from)
    })?);
    let target = listener.local_addr()?;
    let from_pod = connect_from(pod_ns, target);
    let from_node = connect_from(node_ns, target);
    let describe = |r: &podlab_ns::Result<TcpStream>| match r {
        Ok(_) => "connected".to_owned(),
        Err(err) => match err.errno() {
            Some(errno) => format!("failed with {}", errno.desc()),
            None => format!("failed: {err}"),
        },
    };
    say(format!(
        "  a second \"container\" in the pod connects to {target}: {}; from the node: {}",
        describe(&from_pod),
        describe(&from_node)
    ));
    evidence.check(
        format!("{target} inside the pod is reached from the pod, and not from the node"),
        from_pod.is_ok() && from_node.is_err(),
        format!(
            "pod: {}, node: {}",
            describe(&from_pod),
            describe(&from_node)
        ),
    );
    Ok(())
}

/// A TCP connection to `target` made from inside `netns`.
fn connect_from(netns: BorrowedFd<'_>, target: SocketAddr) -> podlab_ns::Result<TcpStream> {
    socket_in(netns, "connect", || {
        TcpStream::connect_timeout(&target, PATIENCE).map(OwnedFd::from)
    })
    .map(TcpStream::from)
}

fn view(netlink: &mut Netlink) -> Result<(Vec<Link>, Vec<Address>)> {
    Ok((netlink.links()?, netlink.addresses()?))
}

fn inode_of(netns: BorrowedFd<'_>) -> Result<u64> {
    Ok(nix::sys::stat::fstat(netns)?.st_ino)
}

/// `eth0 UP veth 10.213.0.2/24` in one line.
fn link_text(link: &Link, addresses: &[Address]) -> String {
    let mut text = format!("{} {}", link.name, if link.up { "UP" } else { "DOWN" });
    if let Some(kind) = &link.kind {
        text.push_str(&format!(" {kind}"));
    }
    let mine: BTreeMap<_, _> = addresses
        .iter()
        .filter(|a| a.ifindex == link.index)
        .map(|a| (a.addr, a.prefix_len))
        .collect();
    for (addr, len) in mine {
        text.push_str(&format!(" {addr}/{len}"));
    }
    text
}

/// Polls `done` until it holds or `PATIENCE` passes (the kernel tears namespaces down in a
/// work queue, a moment after the last holder is gone).
fn wait_for(mut done: impl FnMut() -> Result<bool>) -> Result<bool> {
    let start = Instant::now();
    loop {
        if done()? {
            return Ok(true);
        }
        if start.elapsed() > PATIENCE {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
