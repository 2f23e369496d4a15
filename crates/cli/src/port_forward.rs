//! `podlab port-forward POD|TYPE/NAME [LOCAL:]REMOTE...`: kubectl port-forward's twin. It listens on
//! 127.0.0.1 (and ::1 when this host has it) only, and relays each connection to
//! `localhost:REMOTE` *inside the pod's network namespace*, as kubelet's streaming server
//! does: the upstream socket is made by a forked child that joined the pod's net namespace
//! (a socket belongs to the namespace it was made in) and passed back over a unix socket, so
//! no address, route or NAT rule is added anywhere, and the CLI itself never changes
//! namespace. Every connection is relayed by one thread with `poll(2)`; Ctrl-C (or SIGTERM)
//! closes the listeners and connections, and nothing is left behind.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use podlab_ns::NsKind;
use podlab_runtime::status::SandboxState;

use crate::context::Ctx;

/// One `[LOCAL:]REMOTE` of the command line (LOCAL 0 or empty: a port the kernel picks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortPair {
    pub local: u16,
    pub remote: u16,
}

impl PortPair {
    /// kubectl's forms: `8080` (the same port), `8080:80`, `:80` and `0:80` (any local port).
    pub fn parse(text: &str) -> Result<PortPair> {
        let port = |s: &str, what: &str| -> Result<u16> {
            s.parse::<u16>()
                .with_context(|| format!("Error parsing {what} port '{s}': invalid syntax"))
        };
        match text.split_once(':') {
            None => {
                let p = port(text, "local")?;
                if p == 0 {
                    bail!("Remote port must be > 0");
                }
                Ok(PortPair {
                    local: p,
                    remote: p,
                })
            }
            Some((local, remote)) => {
                let local = if local.is_empty() {
                    0
                } else {
                    port(local, "local")?
                };
                let remote = port(remote, "remote")?;
                if remote == 0 {
                    bail!("Remote port must be > 0");
                }
                Ok(PortPair { local, remote })
            }
        }
    }
}

pub fn run(
    target: &str,
    timeout: std::time::Duration,
    namespace: &str,
    ports: &[String],
) -> Result<i32> {
    let pairs: Vec<PortPair> = ports
        .iter()
        .map(|p| PortPair::parse(p))
        .collect::<Result<_>>()?;
    let ctx = Ctx::open()?;
    let pod: Pod = crate::attachable::pod(&ctx, target, namespace, timeout)?;
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    if phase != "Running" {
        bail!("unable to forward port because pod is not running. Current status={phase}");
    }
    let netns = pod_netns(&ctx, &pod)?;

    let mut listeners: Vec<(TcpListener, PortPair)> = Vec::new();
    let mut failed: Vec<PortPair> = Vec::new();
    for pair in &pairs {
        match listen(*pair) {
            Ok(made) => {
                for (listener, shown) in made {
                    let port = listener.local_addr()?.port();
                    println!("Forwarding from {shown}:{port} -> {}", pair.remote);
                    listeners.push((
                        listener,
                        PortPair {
                            local: port,
                            remote: pair.remote,
                        },
                    ));
                }
            }
            Err(message) => {
                eprintln!("Unable to listen on port {}: {message}", pair.local);
                failed.push(*pair);
            }
        }
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    if listeners.is_empty() {
        let list: Vec<String> = failed
            .iter()
            .map(|p| format!("{{{} {}}}", p.local, p.remote))
            .collect();
        bail!(
            "unable to listen on any of the requested ports: [{}]",
            list.join(" ")
        );
    }
    serve(&pod, &netns, listeners)
}

/// Listeners on 127.0.0.1 and ::1 for one pair, as kubectl makes them: one failing is said
/// and skipped, both failing is the error (kubectl's words).
fn listen(pair: PortPair) -> std::result::Result<Vec<(TcpListener, &'static str)>, String> {
    let mut made = Vec::new();
    let mut errors = Vec::new();
    let v4 = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, pair.local)));
    let port = match &v4 {
        Ok(listener) => listener
            .local_addr()
            .map(|a| a.port())
            .unwrap_or(pair.local),
        Err(_) => pair.local,
    };
    match v4 {
        Ok(listener) => made.push((listener, "127.0.0.1")),
        Err(e) => errors.push(format!(
            "unable to create listener: Error listen tcp4 127.0.0.1:{}: bind: {}",
            pair.local,
            bind_error(&e)
        )),
    }
    // ::1 on the same port as 127.0.0.1 got (when the kernel chose it).
    match bind_v6_only(port) {
        Ok(listener) => made.push((listener, "[::1]")),
        Err(e)
            if e.raw_os_error() == Some(libc::EADDRNOTAVAIL)
                || e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {}
        Err(e) => errors.push(format!(
            "unable to create listener: Error listen tcp6 [::1]:{}: bind: {}",
            pair.local,
            bind_error(&e)
        )),
    }
    if made.is_empty() {
        return Err(format!(
            "Listeners failed to create with the following errors: [{}]",
            errors.join(" ")
        ));
    }
    Ok(made)
}

/// Go's words for a bind error (`address already in use`).
fn bind_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(errno) => nix::Error::from_raw(errno).desc().to_lowercase(),
        None => e.to_string(),
    }
}

fn bind_v6_only(port: u16) -> std::io::Result<TcpListener> {
    use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn6};
    let fd = socket::socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    let addr = SockaddrIn6::from(std::net::SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0));
    socket::bind(fd.as_raw_fd(), &addr)?;
    socket::listen(
        &fd,
        socket::Backlog::new(128).unwrap_or(socket::Backlog::MAXCONN),
    )?;
    Ok(TcpListener::from(fd))
}

/// The pinned network namespace of the pod's running sandbox.
fn pod_netns(ctx: &Ctx, pod: &Pod) -> Result<PathBuf> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let runtime = ctx.runtime()?;
    let sandbox = runtime
        .list_pod_sandboxes()?
        .into_iter()
        .filter(|s| s.state == SandboxState::Ready)
        .rfind(|s| s.labels.get(podlab_kubelet::translate::LABEL_POD_UID) == Some(&uid))
        .with_context(|| {
            format!(
                "unable to forward port because pod is not running: pod {} has no ready sandbox",
                pod.metadata.name.as_deref().unwrap_or_default()
            )
        })?;
    match sandbox.namespaces.iter().find(|n| n.kind == NsKind::Net) {
        Some(net) => Ok(net.path.clone()),
        None => bail!(
            "pod {} uses the host's network: port-forward has nothing to do (connect to the port on this host)",
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// A TCP socket made in the network namespace pinned at `netns`, by a forked child that
/// joined it (the CLI stays in its own namespaces), connected there to `127.0.0.1:port`.
pub fn connect_in_netns(netns: &Path, port: u16) -> Result<TcpStream> {
    let socket = podlab_runtime::network::tcp_socket_in_netns(netns)?;
    let addr = nix::sys::socket::SockaddrIn::new(127, 0, 0, 1, port);
    nix::sys::socket::connect(socket.as_raw_fd(), &addr).with_context(|| {
        format!(
            "failed to connect to localhost:{port} inside namespace {:?}, IPv4: dial tcp4 127.0.0.1:{port}",
            netns.display().to_string()
        )
    })?;
    Ok(TcpStream::from(socket))
}

/// One direction of a relayed connection.
struct Pipe {
    buffer: Vec<u8>,
    eof: bool,
}

struct Connection {
    client: TcpStream,
    upstream: TcpStream,
    /// client → upstream, upstream → client
    ways: [Pipe; 2],
}

fn serve(pod: &Pod, netns: &Path, listeners: Vec<(TcpListener, PortPair)>) -> Result<i32> {
    let mut mask = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        mask.add(signal);
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
    for (listener, _) in &listeners {
        listener.set_nonblocking(true)?;
    }
    let mut connections: BTreeMap<u64, Connection> = BTreeMap::new();
    let mut next = 0u64;
    loop {
        if !netns.exists() {
            bail!("lost connection to pod");
        }
        // Slots: signals, listeners, then two per connection.
        let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        for (listener, _) in &listeners {
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
        }
        let mut slots: Vec<(u64, usize)> = Vec::new();
        for (id, conn) in &connections {
            for (side, fd) in [(0, conn.client.as_fd()), (1, conn.upstream.as_fd())] {
                let mut flags = PollFlags::empty();
                // Read from this side when the way out of it is empty and open.
                let way_out = &conn.ways[side];
                if way_out.buffer.is_empty() && !way_out.eof {
                    flags |= PollFlags::POLLIN;
                }
                // Write to this side when the way into it has bytes.
                if !conn.ways[1 - side].buffer.is_empty() {
                    flags |= PollFlags::POLLOUT;
                }
                fds.push(PollFd::new(fd, flags));
                slots.push((*id, side));
            }
        }
        match nix::poll::poll(&mut fds, PollTimeout::from(1000u16)) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e).context("poll"),
        }
        let revents: Vec<PollFlags> = fds
            .iter()
            .map(|f| f.revents().unwrap_or(PollFlags::empty()))
            .collect();
        drop(fds);
        if !revents[0].is_empty() {
            if let Ok(Some(_)) = signals.read_signal() {
                // kubectl ends quietly on Ctrl-C; every listener and connection closes here.
                return Ok(0);
            }
        }
        for (index, (listener, pair)) in listeners.iter().enumerate() {
            if revents[1 + index].is_empty() {
                continue;
            }
            while let Ok((client, _)) = listener.accept() {
                println!("Handling connection for {}", pair.local);
                match connect_in_netns(netns, pair.remote) {
                    Ok(upstream) => {
                        client.set_nonblocking(true)?;
                        upstream.set_nonblocking(true)?;
                        next += 1;
                        connections.insert(
                            next,
                            Connection {
                                client,
                                upstream,
                                ways: [
                                    Pipe { buffer: Vec::new(), eof: false },
                                    Pipe { buffer: Vec::new(), eof: false },
                                ],
                            },
                        );
                    }
                    Err(e) => eprintln!(
                        "E{} an error occurred forwarding {} -> {}: error forwarding port {} to pod {}, uid : {e:#}",
                        chrono_like_now(),
                        pair.local,
                        pair.remote,
                        pair.remote,
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ),
                }
            }
            use std::io::Write;
            let _ = std::io::stdout().flush();
        }
        let base = 1 + listeners.len();
        for (slot, (id, side)) in slots.iter().enumerate() {
            let ready = revents[base + slot];
            if ready.is_empty() {
                continue;
            }
            if let Some(conn) = connections.get_mut(id) {
                conn.step(*side, ready);
            }
        }
        connections.retain(|_, c| !c.done());
    }
}

impl Connection {
    fn side(&self, side: usize) -> &TcpStream {
        if side == 0 {
            &self.client
        } else {
            &self.upstream
        }
    }

    /// Moves what `side` has ready: reads into the way out of it, writes the way into it.
    fn step(&mut self, side: usize, ready: PollFlags) {
        use std::io::{Read, Write};
        if ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            && self.ways[side].buffer.is_empty()
            && !self.ways[side].eof
        {
            let mut buffer = vec![0u8; 64 * 1024];
            match self.side(side).read(&mut buffer) {
                Ok(0) => {
                    self.ways[side].eof = true;
                    let _ = self.side(1 - side).shutdown(std::net::Shutdown::Write);
                }
                Ok(n) => self.ways[side].buffer.extend_from_slice(&buffer[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.ways = [
                        Pipe {
                            buffer: Vec::new(),
                            eof: true,
                        },
                        Pipe {
                            buffer: Vec::new(),
                            eof: true,
                        },
                    ];
                    return;
                }
            }
        }
        // Write what waits for the other side (it may be writable already).
        let other = 1 - side;
        for (way, target) in [(side, other), (other, side)] {
            if self.ways[way].buffer.is_empty() {
                continue;
            }
            match self.side(target).write(&self.ways[way].buffer) {
                Ok(n) => {
                    self.ways[way].buffer.drain(..n);
                    if self.ways[way].buffer.is_empty() && self.ways[way].eof {
                        let _ = self.side(target).shutdown(std::net::Shutdown::Write);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.ways[way].buffer.clear();
                    self.ways[way].eof = true;
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.ways.iter().all(|w| w.eof && w.buffer.is_empty())
    }
}

/// klog's `MMDD HH:MM:SS.uuuuuu` prefix (UTC), cut from the CRI log's RFC3339Nano time.
fn chrono_like_now() -> String {
    let now = podlab_runtime::cri_log::format_timestamp(podlab_runtime::liveness::now_ns());
    // 2026-12-03T12:00:00.123456789Z
    format!("{}{} {}", &now[5..7], &now[8..10], &now[11..26])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_times_are_month_day_and_microseconds() {
        let now = chrono_like_now();
        assert_eq!(now.len(), "1203 12:00:00.123456".len(), "{now}");
        assert_eq!(&now[4..5], " ");
        assert_eq!(&now[13..14], ".");
    }

    #[test]
    fn port_pairs_parse_as_kubectl_reads_them() {
        assert_eq!(
            PortPair::parse("8080").unwrap(),
            PortPair {
                local: 8080,
                remote: 8080
            }
        );
        assert_eq!(
            PortPair::parse("8080:80").unwrap(),
            PortPair {
                local: 8080,
                remote: 80
            }
        );
        assert_eq!(
            PortPair::parse(":80").unwrap(),
            PortPair {
                local: 0,
                remote: 80
            }
        );
        assert_eq!(
            PortPair::parse("0:80").unwrap(),
            PortPair {
                local: 0,
                remote: 80
            }
        );
        assert!(PortPair::parse("x:80").is_err());
        assert!(PortPair::parse("80:0").is_err());
    }
}
