//! Network namespaces: the devices, addresses and routes inside one, over rtnetlink.
//!
//! A pod's containers share one network namespace, held by its pause process: they see the same
//! `lo`, the same `eth0` and reach each other over 127.0.0.1. What a runtime (or a CNI plugin)
//! does to give that namespace a network is a handful of rtnetlink requests, the ones
//! `ip link`/`ip addr`/`ip route` send: bring `lo` up, create a veth pair whose peer is born
//! inside the pod's namespace (`IFLA_NET_NS_FD` in the same `RTM_NEWLINK`), attach the host end
//! to a bridge, add addresses and routes. [`Netlink`] sends exactly those, and never runs `ip`.
//!
//! A netlink socket belongs to the network namespace its creator was in when it was made, for
//! its whole life. So a [`Netlink`] handle is bound to one namespace: [`Netlink::open`] for the
//! calling thread's, [`Netlink::open_in`] for another one (the thread steps in to make the socket
//! and steps back out, or a forked child makes it and hands it over: [`socket_in`]).

pub mod cookie;
mod netns;
mod wire;

pub use netns::{bind_abstract, in_netns, new_held, new_pinned, socket_in};

use std::collections::HashMap;
use std::fs::File;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkExtentMask, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use serde::{Deserialize, Serialize};

use crate::{Error, NsKind, Result};
use wire::{Request, Wire};

/// One network device, as `ip link` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// Administratively up (`IFF_UP`), what `ip link set NAME up` sets.
    pub up: bool,
    /// The driver kind for virtual devices ("veth", "bridge"); `None` for `lo` and hardware.
    pub kind: Option<String>,
    /// The link-layer address, as `aa:bb:cc:dd:ee:ff`.
    pub mac: Option<String>,
    /// The index of the bridge (or bond) this device is attached to.
    pub master: Option<u32>,
    pub mtu: u32,
}

/// One address on a device, as `ip addr` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    pub ifindex: u32,
    pub ifname: String,
    pub addr: IpAddr,
    pub prefix_len: u8,
}

/// One route of the main table, as `ip route` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The destination network; `None` is the default route.
    pub dst: Option<(IpAddr, u8)>,
    pub gateway: Option<IpAddr>,
    pub ifindex: Option<u32>,
}

/// An rtnetlink handle bound to one network namespace: one socket, one request at a time, each
/// acknowledged by the kernel before the call returns.
pub struct Netlink {
    wire: Wire,
}

impl Netlink {
    /// A handle on the calling thread's network namespace.
    pub fn open() -> Result<Netlink> {
        let socket = wire::new_socket()
            .map_err(|e| Error::sys_on("socket(NETLINK_ROUTE)", NsKind::Net, e))?;
        Ok(Netlink {
            wire: Wire::over(socket)?,
        })
    }

    /// A handle on the network namespace `netns` (an open `/proc/PID/ns/net` or a pinned netns
    /// file). The caller's namespaces are unchanged when this returns, also on error. Costs a
    /// setns there and back, or a fork when the way back is closed (rootless; see [`socket_in`]).
    pub fn open_in(netns: BorrowedFd<'_>) -> Result<Netlink> {
        let socket = socket_in(netns, "socket(NETLINK_ROUTE)", || {
            wire::new_socket().map_err(std::io::Error::from)
        })?;
        Ok(Netlink {
            wire: Wire::over(socket)?,
        })
    }

    /// A handle on the network namespace pinned at (or reachable through) `path`, such as
    /// `/run/netns/NAME` or `/proc/PID/ns/net`.
    pub fn open_path(path: &Path) -> Result<Netlink> {
        let netns = File::open(path).map_err(|e| Error::io("open network namespace", path, e))?;
        Netlink::open_in(netns.as_fd())
    }

    /// The index of the device `name`, or `None` if this namespace has no such device.
    pub fn link_index(&mut self, name: &str) -> Result<Option<u32>> {
        Ok(self.link(name)?.map(|link| link.index))
    }

    /// The device `name`, or `None` if this namespace has no such device.
    pub fn link(&mut self, name: &str) -> Result<Option<Link>> {
        let request = Request {
            name: "get link",
            subject: Some(name),
        };
        let mut message = LinkMessage::default();
        message.attributes = vec![
            LinkAttribute::IfName(name.to_owned()),
            LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]),
        ];
        match self
            .wire
            .change(request, RouteNetlinkMessage::GetLink(message), 0)
        {
            Err(err) if err.errno() == Some(nix::Error::ENODEV) => Ok(None),
            Err(err) => Err(err),
            Ok(answers) => Ok(answers.into_iter().find_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => link_of(link),
                _ => None,
            })),
        }
    }

    /// Sets the device `name` administratively up, like `ip link set NAME up`.
    pub fn set_up(&mut self, name: &str) -> Result<()> {
        let mut message = by_name(name);
        message.header.flags = LinkFlags::Up;
        message.header.change_mask = LinkFlags::Up;
        self.set_link("set link up", name, message)
    }

    /// Brings up `lo`: a new network namespace has only it, and down, so even 127.0.0.1 is
    /// unreachable until this is done (the CNI `loopback` plugin's job).
    pub fn loopback_up(&mut self) -> Result<()> {
        self.set_up("lo")
    }

    /// Creates a veth pair: `name` here, and `peer` in the namespace `peer_netns` (here when
    /// `None`). The peer is created directly inside its namespace, in the same request, so it
    /// never exists, not even for a moment, in this one (its name cannot clash here).
    pub fn create_veth(
        &mut self,
        name: &str,
        peer: &str,
        peer_netns: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        let mut peer_message = by_name(peer);
        if let Some(netns) = peer_netns {
            peer_message
                .attributes
                .push(LinkAttribute::NetNsFd(std::os::fd::AsRawFd::as_raw_fd(
                    &netns,
                )));
        }
        let mut message = by_name(name);
        message.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_message))),
        ]));
        self.create_link("create veth", name, message)
    }

    /// Creates a bridge `name` (down; [`Netlink::set_up`] it), like `ip link add NAME type bridge`.
    pub fn create_bridge(&mut self, name: &str) -> Result<()> {
        let mut message = by_name(name);
        message
            .attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        self.create_link("create bridge", name, message)
    }

    /// Attaches the device `name` to the bridge `bridge`, like `ip link set NAME master BRIDGE`.
    pub fn set_master(&mut self, name: &str, bridge: &str) -> Result<()> {
        let Some(bridge_index) = self.link_index(bridge)? else {
            return Err(Request {
                name: "set master",
                subject: Some(bridge),
            }
            .error(
                format!("no bridge named {bridge:?} to attach {name:?} to"),
                Some(nix::Error::ENODEV),
            ));
        };
        let mut message = by_name(name);
        message
            .attributes
            .push(LinkAttribute::Controller(bridge_index));
        self.set_link("set master", name, message)
    }

    /// Deletes the device `name`; a veth takes its peer with it. `Ok` if there is no such device.
    pub fn delete_link(&mut self, name: &str) -> Result<()> {
        let request = Request {
            name: "delete link",
            subject: Some(name),
        };
        match self
            .wire
            .change(request, RouteNetlinkMessage::DelLink(by_name(name)), 0)
        {
            Err(err) if err.errno() == Some(nix::Error::ENODEV) => Ok(()),
            other => other.map(drop),
        }
    }

    /// Adds `addr/prefix_len` to the device `ifname`, like `ip addr add ADDR/LEN dev IFNAME`.
    /// The kernel adds the subnet's route with it. An address already there is an error (EEXIST).
    pub fn add_address(&mut self, ifname: &str, addr: IpAddr, prefix_len: u8) -> Result<()> {
        let subject = format!("{addr}/{prefix_len} dev {ifname}");
        let request = Request {
            name: "add address",
            subject: Some(&subject),
        };
        check_prefix(request, addr, prefix_len)?;
        let index = self.existing_index(request, ifname)?;
        let mut message = AddressMessage::default();
        message.header.family = family_of(addr);
        message.header.prefix_len = prefix_len;
        message.header.index = index;
        message.header.scope = AddressScope::Universe;
        message.attributes = vec![AddressAttribute::Address(addr)];
        if addr.is_ipv4() {
            message.attributes.push(AddressAttribute::Local(addr));
        }
        self.wire
            .create(request, RouteNetlinkMessage::NewAddress(message))
    }

    /// Adds a route to the main table, like `ip route add DST [via GATEWAY] [dev IFNAME]`.
    /// `dst` `None` is the default route. Without a gateway the route is on-link (scope link).
    pub fn add_route(
        &mut self,
        dst: Option<(IpAddr, u8)>,
        gateway: Option<IpAddr>,
        ifname: Option<&str>,
    ) -> Result<()> {
        let subject = route_text(dst, gateway, ifname);
        let request = Request {
            name: "add route",
            subject: Some(&subject),
        };
        let family = match (dst.map(|(a, _)| a), gateway) {
            (Some(d), Some(g)) if d.is_ipv4() != g.is_ipv4() => {
                return Err(request.error("destination and gateway are of different families", None))
            }
            (Some(a), _) | (None, Some(a)) => family_of(a),
            (None, None) if ifname.is_some() => AddressFamily::Inet,
            (None, None) => {
                return Err(request.error("a route needs a destination, gateway or device", None))
            }
        };
        let mut message = RouteMessage::default();
        message.header.address_family = family;
        message.header.table = RouteHeader::RT_TABLE_MAIN;
        message.header.protocol = RouteProtocol::Boot;
        message.header.kind = RouteType::Unicast;
        message.header.scope = if gateway.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
        if let Some((addr, prefix_len)) = dst {
            check_prefix(request, addr, prefix_len)?;
            message.header.destination_prefix_length = prefix_len;
            message
                .attributes
                .push(RouteAttribute::Destination(route_address(addr)));
        }
        if let Some(gateway) = gateway {
            message
                .attributes
                .push(RouteAttribute::Gateway(route_address(gateway)));
        }
        if let Some(ifname) = ifname {
            let index = self.existing_index(request, ifname)?;
            message.attributes.push(RouteAttribute::Oif(index));
        }
        self.wire
            .create(request, RouteNetlinkMessage::NewRoute(message))
    }

    /// Every device of this namespace, in index order.
    pub fn links(&mut self) -> Result<Vec<Link>> {
        let request = Request {
            name: "list links",
            subject: None,
        };
        let mut message = LinkMessage::default();
        message.attributes = vec![LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats])];
        let mut links: Vec<Link> = self
            .wire
            .dump(request, RouteNetlinkMessage::GetLink(message))?
            .into_iter()
            .filter_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => link_of(link),
                _ => None,
            })
            .collect();
        links.sort_by_key(|link| link.index);
        Ok(links)
    }

    /// Every IPv4 and IPv6 address of this namespace, by device index.
    pub fn addresses(&mut self) -> Result<Vec<Address>> {
        let names: HashMap<u32, String> = self
            .links()?
            .into_iter()
            .map(|link| (link.index, link.name))
            .collect();
        let request = Request {
            name: "list addresses",
            subject: None,
        };
        let answers = self.wire.dump(
            request,
            RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        )?;
        let mut addresses: Vec<Address> = answers
            .into_iter()
            .filter_map(|answer| match answer {
                RouteNetlinkMessage::NewAddress(message) => address_of(message, &names),
                _ => None,
            })
            .collect();
        addresses.sort_by_key(|a| (a.ifindex, a.addr.is_ipv6()));
        Ok(addresses)
    }

    /// The IPv4 routes of the main table (what `ip route` shows).
    pub fn routes(&mut self) -> Result<Vec<Route>> {
        let request = Request {
            name: "list routes",
            subject: None,
        };
        let mut message = RouteMessage::default();
        message.header.address_family = AddressFamily::Inet;
        let answers = self
            .wire
            .dump(request, RouteNetlinkMessage::GetRoute(message))?;
        Ok(answers
            .into_iter()
            .filter_map(|answer| match answer {
                RouteNetlinkMessage::NewRoute(message) => main_route_of(message),
                _ => None,
            })
            .collect())
    }

    fn create_link(&mut self, what: &'static str, name: &str, message: LinkMessage) -> Result<()> {
        let request = Request {
            name: what,
            subject: Some(name),
        };
        self.wire
            .create(request, RouteNetlinkMessage::NewLink(message))
    }

    fn set_link(&mut self, what: &'static str, name: &str, message: LinkMessage) -> Result<()> {
        let request = Request {
            name: what,
            subject: Some(name),
        };
        self.wire
            .change(request, RouteNetlinkMessage::SetLink(message), 0)
            .map(drop)
    }

    fn existing_index(&mut self, request: Request<'_>, ifname: &str) -> Result<u32> {
        self.link_index(ifname)?.ok_or_else(|| {
            request.error(
                format!("no interface named {ifname:?}"),
                Some(nix::Error::ENODEV),
            )
        })
    }
}

/// A link message that names its device (index 0: the kernel looks the name up).
fn by_name(name: &str) -> LinkMessage {
    let mut message = LinkMessage::default();
    message
        .attributes
        .push(LinkAttribute::IfName(name.to_owned()));
    message
}

fn link_of(message: LinkMessage) -> Option<Link> {
    let mut link = Link {
        index: message.header.index,
        name: String::new(),
        up: message.header.flags.contains(LinkFlags::Up),
        kind: None,
        mac: None,
        master: None,
        mtu: 0,
    };
    for attribute in message.attributes {
        match attribute {
            LinkAttribute::IfName(name) => link.name = name,
            LinkAttribute::Mtu(mtu) => link.mtu = mtu,
            LinkAttribute::Controller(master) => link.master = Some(master),
            LinkAttribute::Address(bytes) if !bytes.is_empty() => link.mac = Some(mac_text(&bytes)),
            LinkAttribute::LinkInfo(infos) => {
                link.kind = infos.into_iter().find_map(|info| match info {
                    LinkInfo::Kind(kind) => Some(kind.to_string()),
                    _ => None,
                })
            }
            _ => {}
        }
    }
    (!link.name.is_empty()).then_some(link)
}

fn address_of(message: AddressMessage, names: &HashMap<u32, String>) -> Option<Address> {
    // For IPv4, IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer's on
    // point-to-point links); IPv6 only has IFA_ADDRESS.
    let mut local = None;
    let mut address = None;
    for attribute in message.attributes {
        match attribute {
            AddressAttribute::Local(addr) => local = Some(addr),
            AddressAttribute::Address(addr) => address = Some(addr),
            _ => {}
        }
    }
    let ifindex = message.header.index;
    Some(Address {
        ifindex,
        ifname: names.get(&ifindex).cloned().unwrap_or_default(),
        addr: local.or(address)?,
        prefix_len: message.header.prefix_len,
    })
}

fn main_route_of(message: RouteMessage) -> Option<Route> {
    let mut table = u32::from(message.header.table);
    let mut route = Route {
        dst: None,
        gateway: None,
        ifindex: None,
    };
    for attribute in message.attributes {
        match attribute {
            RouteAttribute::Table(id) => table = id,
            RouteAttribute::Destination(addr) => {
                route.dst = ip_of(addr).map(|a| (a, message.header.destination_prefix_length))
            }
            RouteAttribute::Gateway(addr) => route.gateway = ip_of(addr),
            RouteAttribute::Oif(index) => route.ifindex = Some(index),
            _ => {}
        }
    }
    (table == u32::from(RouteHeader::RT_TABLE_MAIN)).then_some(route)
}

fn ip_of(addr: RouteAddress) -> Option<IpAddr> {
    match addr {
        RouteAddress::Inet(v4) => Some(v4.into()),
        RouteAddress::Inet6(v6) => Some(v6.into()),
        _ => None,
    }
}

fn route_address(addr: IpAddr) -> RouteAddress {
    match addr {
        IpAddr::V4(v4) => RouteAddress::Inet(v4),
        IpAddr::V6(v6) => RouteAddress::Inet6(v6),
    }
}

fn family_of(addr: IpAddr) -> AddressFamily {
    if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

fn check_prefix(request: Request<'_>, addr: IpAddr, prefix_len: u8) -> Result<()> {
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    if prefix_len > bits {
        return Err(request.error(
            format!("prefix length {prefix_len} is longer than the {bits} bits of {addr}"),
            Some(nix::Error::EINVAL),
        ));
    }
    Ok(())
}

fn mac_text(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn route_text(dst: Option<(IpAddr, u8)>, gateway: Option<IpAddr>, ifname: Option<&str>) -> String {
    let mut text = match dst {
        Some((addr, len)) => format!("{addr}/{len}"),
        None => "default".to_owned(),
    };
    if let Some(gateway) = gateway {
        text.push_str(&format!(" via {gateway}"));
    }
    if let Some(ifname) = ifname {
        text.push_str(&format!(" dev {ifname}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::run_in_child;

    #[test]
    fn mac_and_route_texts() {
        assert_eq!(mac_text(&[0, 0x1b, 0xff, 2, 3, 0xa0]), "00:1b:ff:02:03:a0");
        let dst = Some(("10.213.0.0".parse().unwrap(), 24));
        assert_eq!(
            route_text(dst, Some("10.213.0.1".parse().unwrap()), Some("eth0")),
            "10.213.0.0/24 via 10.213.0.1 dev eth0"
        );
        assert_eq!(route_text(None, None, Some("eth0")), "default dev eth0");
    }

    #[test]
    fn a_prefix_longer_than_the_address_is_refused_before_asking() {
        let request = Request {
            name: "add address",
            subject: Some("eth0"),
        };
        assert!(check_prefix(request, "10.0.0.1".parse().unwrap(), 33).is_err());
        assert!(check_prefix(request, "fd00::1".parse().unwrap(), 128).is_ok());
    }

    /// Runs `f` in a forked child inside a fresh, empty network namespace (never the host's);
    /// `None` when this process may not make one.
    fn in_fresh_netns<T, F>(f: F) -> Option<T>
    where
        T: Serialize + serde::de::DeserializeOwned,
        F: FnOnce() -> Result<T>,
    {
        let allowed = run_in_child(|| crate::ops::create(&[NsKind::Net]));
        if allowed.is_err() {
            eprintln!("skipped: cannot create a network namespace here");
            return None;
        }
        Some(
            run_in_child(|| {
                crate::ops::create(&[NsKind::Net])?;
                f()
            })
            .unwrap(),
        )
    }

    #[test]
    fn a_fresh_namespace_has_only_lo_and_it_is_down_until_brought_up() {
        let Some((before, after)) = in_fresh_netns(|| {
            let mut netlink = Netlink::open()?;
            let before = netlink.links()?;
            netlink.loopback_up()?;
            Ok((before, netlink.link("lo")?))
        }) else {
            return;
        };
        assert_eq!(before.len(), 1, "{before:?}");
        assert_eq!(before[0].name, "lo");
        assert!(!before[0].up, "{before:?}");
        assert!(after.expect("lo is there").up);
    }

    #[test]
    fn veth_bridge_address_and_route_round_trip() {
        let Some((links, addresses, routes)) = in_fresh_netns(|| {
            let mut netlink = Netlink::open()?;
            netlink.create_veth("unit-a", "unit-b", None)?;
            netlink.create_bridge("unit-br")?;
            netlink.set_master("unit-a", "unit-br")?;
            netlink.set_up("unit-b")?;
            netlink.add_address("unit-b", "10.213.9.2".parse().unwrap(), 24)?;
            netlink.add_address("unit-b", "fd00:213::2".parse().unwrap(), 64)?;
            netlink.add_route(
                Some(("10.213.10.0".parse().unwrap(), 24)),
                Some("10.213.9.1".parse().unwrap()),
                Some("unit-b"),
            )?;
            Ok((netlink.links()?, netlink.addresses()?, netlink.routes()?))
        }) else {
            return;
        };
        let by_name = |name: &str| links.iter().find(|l| l.name == name).unwrap().clone();
        let (a, b, br) = (by_name("unit-a"), by_name("unit-b"), by_name("unit-br"));
        assert_eq!(a.kind.as_deref(), Some("veth"));
        assert_eq!(br.kind.as_deref(), Some("bridge"));
        assert_eq!(a.master, Some(br.index));
        assert!(b.up && !a.up);
        assert_eq!(b.mac.as_ref().map(String::len), Some(17), "{b:?}");
        let on_b: Vec<_> = addresses.iter().filter(|x| x.ifname == "unit-b").collect();
        assert!(on_b
            .iter()
            .any(|x| x.addr.to_string() == "10.213.9.2" && x.prefix_len == 24));
        assert!(on_b.iter().any(|x| x.addr.to_string() == "fd00:213::2"));
        assert!(routes.contains(&Route {
            dst: Some(("10.213.10.0".parse().unwrap(), 24)),
            gateway: Some("10.213.9.1".parse().unwrap()),
            ifindex: Some(b.index),
        }));
        assert!(
            routes
                .iter()
                .any(|r| r.dst == Some(("10.213.9.0".parse().unwrap(), 24))),
            "the kernel adds the subnet route with the address: {routes:?}"
        );
    }

    #[test]
    fn refusals_carry_errno_and_name() {
        let Some(messages) = in_fresh_netns(|| {
            let mut netlink = Netlink::open()?;
            let missing = netlink.set_up("unit-none").unwrap_err();
            netlink.create_bridge("unit-br")?;
            let twice = netlink.create_bridge("unit-br").unwrap_err();
            netlink.delete_link("unit-br")?;
            netlink.delete_link("unit-br")?;
            Ok(vec![
                (missing.to_string(), missing.errno().map(|e| e as i32)),
                (twice.to_string(), twice.errno().map(|e| e as i32)),
            ])
        }) else {
            return;
        };
        assert!(messages[0].0.contains("unit-none"), "{messages:?}");
        assert_eq!(messages[0].1, Some(libc::ENODEV), "{messages:?}");
        assert!(messages[1].0.contains("unit-br"), "{messages:?}");
        assert_eq!(messages[1].1, Some(libc::EEXIST), "{messages:?}");
    }

    #[test]
    fn rootless_sockets_come_from_a_child_and_the_thread_stays_home() {
        if !crate::user::unprivileged_userns_allowed() {
            eprintln!("skipped: no user namespaces here");
            return;
        }
        let (stayed, links, refused) = run_in_child(|| {
            crate::user::become_root_in_new_userns()?;
            // Owned by the new user namespace, unlike the one this process is in.
            let pod = crate::ops::Holder::spawn(&[NsKind::Net], || Ok(()))?;
            let netns = pod.open(NsKind::Net)?;
            let home = crate::ops::self_inode(NsKind::Net)?;
            let mut netlink = Netlink::open_in(netns.as_fd())?;
            netlink.create_bridge("unit-br")?;
            let links: Vec<String> = netlink.links()?.into_iter().map(|l| l.name).collect();
            let refused = in_netns(netns.as_fd(), || ()).is_err();
            Ok((crate::ops::self_inode(NsKind::Net)? == home, links, refused))
        })
        .unwrap();
        assert!(stayed, "the calling thread never left its namespace");
        assert_eq!(
            links,
            ["lo", "unit-br"],
            "the handle reaches the pod's namespace"
        );
        assert!(
            refused,
            "in_netns refuses to leave when it could not come back"
        );
    }
}
