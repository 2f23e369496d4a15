//! Lab 4, veth and bridge by hand: what the CNI `bridge` plugin does for every pod, typed with
//! `ip`. Two "pods" (network namespaces lab-red and lab-blue) each get one end of a veth pair
//! as `eth0`; the other ends are ports of a bridge. The bridge lives in a third namespace,
//! lab-switch, so that nothing of the lab touches the host's network: no route out, no NAT.
//! The check reads links, masters and addresses over netlink and sends a ping across.

use std::path::Path;

use anyhow::Result;
use podlab_ns::net::Netlink;

use crate::env::Env;
use crate::{Lab, Level, Verdict};

const RED: &str = "lab-red";
const BLUE: &str = "lab-blue";
const SWITCH: &str = "lab-switch";
const BRIDGE: &str = "br0";
const RED_IP: &str = "10.99.0.1";
const BLUE_IP: &str = "10.99.0.2";

pub static LAB: Lab = Lab {
    number: 4,
    name: "veth-bridge",
    title: "veth pairs and a bridge, by hand with ip",
    level: Level::Intermediate,
    minutes: 20,
    goal: "Wire two \"pods\" together the way the CNI bridge plugin does, with `ip` only:
1. network namespaces lab-red and lab-blue, each with an interface eth0 (one end of a veth
   pair), up, with 10.99.0.1/24 (red) and 10.99.0.2/24 (blue);
2. a network namespace lab-switch with a bridge br0, up, whose ports are the other ends of
   both veth pairs, up;
3. lab-red reaches lab-blue: `ip netns exec lab-red busybox ping -c1 10.99.0.2` answers.
Nothing on the host's own network changes: no route out, no NAT.",
    hints: &[
        "`ip netns add NAME` makes a named network namespace (a bind mount in /run/netns). \
`ip -n NAME ...` runs an ip command inside one. A veth pair is made in one namespace and \
one end can be born in another: `ip link add A type veth peer name B netns NS`.",
        "A bridge is `ip link add br0 type bridge`; a port joins it with `ip link set PORT \
master br0`. Every link starts down: `ip link set X up`, on both ends, on the bridge, and lo.",
        "ip netns add lab-red; ip netns add lab-blue; ip netns add lab-switch\n\
ip -n lab-switch link add br0 type bridge; ip -n lab-switch link set br0 up\n\
ip -n lab-switch link add red-port type veth peer name eth0 netns lab-red\n\
ip -n lab-switch link add blue-port type veth peer name eth0 netns lab-blue\n\
ip -n lab-switch link set red-port master br0 up\n\
ip -n lab-switch link set blue-port master br0 up\n\
ip -n lab-red addr add 10.99.0.1/24 dev eth0; ip -n lab-red link set eth0 up\n\
ip -n lab-blue addr add 10.99.0.2/24 dev eth0; ip -n lab-blue link set eth0 up",
    ],
    not_yet: "no network namespace lab-red",
    mistake_story: "forgetting `master br0` for blue's port: both veths exist and are up, \
but only one is plugged into the bridge",
    scene,
    check,
    solve,
    mistake,
    reset,
};

fn netns_path(name: &str) -> String {
    format!("/run/netns/{name}")
}

fn scene(env: &Env) -> Result<()> {
    env.say("Nothing is made for you in this lab: the network namespaces are yours to make.");
    env.say("Your own network namespace, for comparison (the lab never changes it):");
    env.run("ip", &["-brief", "link"])?;
    Ok(())
}

/// Checks one pod end: eth0 up, a veth, with its address.
fn check_pod(verdict: &mut Verdict, name: &str, ip: &str) -> Result<()> {
    if !Path::new(&netns_path(name)).exists() {
        verdict.missing(format!("no network namespace {name} (ip netns add {name})"));
        return Ok(());
    }
    let mut nl = Netlink::open_path(Path::new(&netns_path(name)))?;
    let Some(eth0) = nl.link("eth0")? else {
        verdict.missing(format!("{name} has no eth0 (one end of a veth pair)"));
        return Ok(());
    };
    verdict.part(
        eth0.kind.as_deref() == Some("veth") && eth0.up,
        format!("{name} has eth0, a veth, up"),
        format!(
            "{name}'s eth0 is {} and {}",
            eth0.kind.as_deref().unwrap_or("not a veth"),
            if eth0.up { "up" } else { "down" }
        ),
    );
    let addresses: Vec<String> = nl
        .addresses()?
        .into_iter()
        .filter(|a| a.ifname == "eth0")
        .map(|a| format!("{}/{}", a.addr, a.prefix_len))
        .collect();
    let want = format!("{ip}/24");
    verdict.part(
        addresses.contains(&want),
        format!("{name}'s eth0 has {want}"),
        format!("{name}'s eth0 has {:?}, not {want}", addresses),
    );
    let routes = nl.routes()?;
    verdict.part(
        !routes.iter().any(|r| r.dst.is_none()),
        format!("{name} has no default route (nothing leaves the lab)"),
        format!("{name} has a default route: the lab must not route anywhere else"),
    );
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    check_pod(&mut verdict, RED, RED_IP)?;
    check_pod(&mut verdict, BLUE, BLUE_IP)?;
    if !Path::new(&netns_path(SWITCH)).exists() {
        verdict.missing(format!("no network namespace {SWITCH} for the bridge"));
        return Ok(verdict);
    }
    let mut nl = Netlink::open_path(Path::new(&netns_path(SWITCH)))?;
    let links = nl.links()?;
    let Some(bridge) = links
        .iter()
        .find(|l| l.name == BRIDGE && l.kind.as_deref() == Some("bridge"))
    else {
        verdict.missing(format!("{SWITCH} has no bridge {BRIDGE}"));
        return Ok(verdict);
    };
    verdict.part(
        bridge.up,
        format!("{SWITCH} has bridge {BRIDGE}, up"),
        format!("bridge {BRIDGE} is down"),
    );
    let ports: Vec<_> = links
        .iter()
        .filter(|l| l.master == Some(bridge.index) && l.kind.as_deref() == Some("veth"))
        .collect();
    let loose: Vec<_> = links
        .iter()
        .filter(|l| l.master.is_none() && l.kind.as_deref() == Some("veth"))
        .map(|l| l.name.clone())
        .collect();
    verdict.part(
        ports.len() >= 2 && ports.iter().all(|p| p.up),
        format!(
            "{BRIDGE}'s ports are {} (veths, up)",
            ports
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "{BRIDGE} has {} veth port(s) up of the 2 needed{}",
            ports.iter().filter(|p| p.up).count(),
            if loose.is_empty() {
                String::new()
            } else {
                format!("; not plugged in: {}", loose.join(", "))
            }
        ),
    );
    if verdict.passed() {
        let (code, _, _) = ping(env)?;
        verdict.part(
            code == 0,
            format!("{RED} reaches {BLUE_IP} (ping answered)"),
            format!("{RED} does not reach {BLUE_IP} (ping got no answer)"),
        );
    }
    Ok(verdict)
}

fn ping(env: &Env) -> Result<(i32, String, String)> {
    let out = env
        .command(
            "ip",
            &[
                "netns", "exec", RED, "busybox", "ping", "-c", "1", "-W", "2", BLUE_IP,
            ],
        )
        .output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn build(env: &Env, plug_blue: bool) -> Result<()> {
    for ns in [RED, BLUE, SWITCH] {
        env.run("ip", &["netns", "add", ns])?;
    }
    env.run(
        "ip",
        &["-n", SWITCH, "link", "add", BRIDGE, "type", "bridge"],
    )?;
    env.run("ip", &["-n", SWITCH, "link", "set", BRIDGE, "up"])?;
    for (pod, port, ip, plug) in [
        (RED, "red-port", RED_IP, true),
        (BLUE, "blue-port", BLUE_IP, plug_blue),
    ] {
        env.run(
            "ip",
            &[
                "-n", SWITCH, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
                pod,
            ],
        )?;
        if plug {
            env.run(
                "ip",
                &["-n", SWITCH, "link", "set", port, "master", BRIDGE, "up"],
            )?;
        } else {
            env.run("ip", &["-n", SWITCH, "link", "set", port, "up"])?;
        }
        env.run(
            "ip",
            &["-n", pod, "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
        )?;
        env.run("ip", &["-n", pod, "link", "set", "eth0", "up"])?;
        env.run("ip", &["-n", pod, "link", "set", "lo", "up"])?;
    }
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    build(env, true)
}

fn mistake(env: &Env) -> Result<()> {
    build(env, false)
}

fn reset(env: &Env) -> Result<()> {
    for ns in [RED, BLUE, SWITCH] {
        if Path::new(&netns_path(ns)).exists() {
            // Deleting the namespaces deletes their veths and the bridge with them.
            env.run("ip", &["netns", "delete", ns])?;
        }
    }
    Ok(())
}
