//! The probe transports (spec 6.3): exec through the runtime's ExecSync, and tcpSocket and
//! httpGet over a TCP socket that is made inside the pod's network namespace, so that the probe
//! reaches the pod the way kubelet reaches it over the pod network — and never leaves the machine.
//!
//! A socket belongs for life to the network namespace its creating thread was in. The probe's
//! thread steps into the pod's pinned netns just long enough to create it
//! ([`podlab_ns::net::socket_in`]); the connect, the request and the reply then happen from the
//! agent's own namespace on that socket. Only the pod's own addresses are probed: its IP, or
//! loopback inside it; any other `host` is refused, since podlab sends nothing off the machine.
//!
//! `scheme: HTTPS` speaks TLS (rustls) on that socket without verifying the server's
//! certificate, as kubelet's prober does (`InsecureSkipVerify`): a pod's certificate names
//! whatever its owner chose, never the address the probe dials. The handshake's own signatures
//! are still checked, so the server must hold the key of the certificate it sends.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::{Arc, OnceLock};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, SockaddrStorage};
use podlab_runtime::ContainerId;

use super::runtime_service::RuntimeService;

/// kubelet's `User-Agent: kube-probe/<major>.<minor>` (the API version podlab speaks).
pub const USER_AGENT: &str = "kube-probe/1.34";
/// Only the first 10 KiB of a reply (or of exec output) count.
pub const MAX_OUTPUT: usize = 10 * 1024;
/// Same-host redirects followed before giving up, as Go's HTTP client.
const MAX_REDIRECTS: usize = 10;

/// What one attempt gave, with the output the events show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success(String),
    /// A success that deserves a `ProbeWarning` event (a redirect to another host).
    Warning(String),
    Failure(String),
    /// The probe could not be run at all (PRB-W5: retried, then discarded).
    Error(String),
}

/// Where a socket probe goes: the pod's pinned network namespace (None with hostNetwork: the
/// agent's own) and the pod's IP (None without a network plugin: loopback inside the pod).
#[derive(Debug, Clone, Copy)]
pub struct PodNet<'a> {
    pub netns: Option<&'a Path>,
    pub pod_ip: Option<&'a str>,
}

/// exec: the command in the container; exit 0 is success, anything else or a timeout failure.
pub fn exec(
    runtime: &dyn RuntimeService,
    container: &str,
    command: &[String],
    timeout: Duration,
) -> Outcome {
    let id = match ContainerId::parse(container) {
        Ok(id) => id,
        Err(e) => return Outcome::Error(format!("container id {container:?}: {e}")),
    };
    match runtime.exec_sync(&id, command, Some(timeout)) {
        Ok(result) => {
            let mut output = result.stdout;
            output.extend_from_slice(&result.stderr);
            output.truncate(MAX_OUTPUT);
            let text = String::from_utf8_lossy(&output).into_owned();
            if result.exit_code == 0 {
                Outcome::Success(text)
            } else {
                Outcome::Failure(text)
            }
        }
        Err(podlab_runtime::Error::Timeout { .. }) => {
            Outcome::Failure(format!("command {command:?} timed out"))
        }
        Err(e) => Outcome::Error(e.to_string()),
    }
}

/// tcpSocket: a TCP connect that succeeds is success; the connection is closed at once.
pub fn tcp(net: PodNet, host: Option<&str>, port: u16, timeout: Duration) -> Outcome {
    let ip = match probe_address(net, host) {
        Ok(ip) => ip,
        Err(e) => return Outcome::Error(e),
    };
    let addr = SocketAddr::new(ip, port);
    match connect(net.netns, addr, timeout) {
        Ok(_) => Outcome::Success(String::new()),
        Err(Connect::Setup(e)) => Outcome::Error(e),
        Err(Connect::Io(e)) => {
            Outcome::Failure(format!("dial tcp {addr}: connect: {}", io_words(&e)))
        }
        Err(Connect::Tls(e)) => Outcome::Failure(e),
    }
}

/// An httpGet probe's request.
#[derive(Debug, Clone, Default)]
pub struct HttpRequest<'a> {
    pub scheme: &'a str,
    pub host: Option<&'a str>,
    pub port: u16,
    pub path: &'a str,
    pub headers: &'a [(String, String)],
}

/// httpGet: a status of 200-399 is success; same-host redirects are followed, a redirect to
/// another host is a success with a warning.
pub fn http(net: PodNet, request: &HttpRequest, timeout: Duration) -> Outcome {
    let tls = if request.scheme.eq_ignore_ascii_case("https") {
        true
    } else if request.scheme.eq_ignore_ascii_case("http") {
        false
    } else {
        return Outcome::Error(format!(
            "unsupported scheme {:?}: httpGet probes speak HTTP or HTTPS",
            request.scheme
        ));
    };
    let scheme = if tls { "https" } else { "http" };
    let ip = match probe_address(net, request.host) {
        Ok(ip) => ip,
        Err(e) => return Outcome::Error(e),
    };
    let addr = SocketAddr::new(ip, request.port);
    let default_port = if tls { 443 } else { 80 };
    let authority = if request.port == default_port {
        host_text(ip)
    } else {
        format!("{}:{}", host_text(ip), request.port)
    };
    let deadline = Instant::now() + timeout;
    let mut path = if request.path.is_empty() {
        "/".to_string()
    } else {
        request.path.to_string()
    };
    for _ in 0..=MAX_REDIRECTS {
        let url = format!("{scheme}://{authority}{path}");
        let target = Target {
            netns: net.netns,
            addr,
            tls,
            authority: &authority,
        };
        let reply = match get(&target, &path, request.headers, deadline) {
            Ok(reply) => reply,
            Err(Connect::Setup(e)) => return Outcome::Error(e),
            Err(Connect::Tls(e)) => return Outcome::Failure(format!("Get {url:?}: {e}")),
            Err(Connect::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Outcome::Failure(format!(
                    "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                ))
            }
            Err(Connect::Io(e)) => {
                return Outcome::Failure(format!(
                    "Get {url:?}: dial tcp {addr}: connect: {}",
                    io_words(&e)
                ))
            }
        };
        let Some(code) = reply.status else {
            return Outcome::Failure(format!("Get {url:?}: malformed HTTP response"));
        };
        if is_redirect(code) {
            match reply
                .location
                .as_deref()
                .map(|l| redirect_target(l, scheme, &authority))
            {
                Some(Redirect::SameHost(next)) => {
                    path = next;
                    continue;
                }
                Some(Redirect::OtherHost) => {
                    return Outcome::Warning(format!(
                        "Probe terminated redirects, Response body: {}",
                        reply.body
                    ))
                }
                None => {}
            }
        }
        return if (200..400).contains(&code) {
            Outcome::Success(reply.body)
        } else {
            Outcome::Failure(format!("HTTP probe failed with statuscode: {code}"))
        };
    }
    Outcome::Failure(format!(
        "Get \"{scheme}://{authority}{path}\": stopped after 10 redirects"
    ))
}

/// The address a socket probe connects to: an explicit host only when it is the pod's own.
fn probe_address(net: PodNet, host: Option<&str>) -> Result<IpAddr, String> {
    let pod_ip = net.pod_ip.and_then(|ip| ip.parse::<IpAddr>().ok());
    let default = pod_ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let Some(host) = host.filter(|h| !h.is_empty()) else {
        return Ok(default);
    };
    let ip = if host == "localhost" {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.trim_matches(['[', ']'])
            .parse::<IpAddr>()
            .map_err(|_| format!("probe host {host:?} is not an IP address of the pod"))?
    };
    if ip.is_loopback() || Some(ip) == pod_ip {
        Ok(ip)
    } else {
        Err(format!(
            "probe host {host} is not the pod's own address; podlab probes only reach the pod itself"
        ))
    }
}

fn host_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

enum Connect {
    /// The socket could not be made in the pod's namespace: the probe errored.
    Setup(String),
    /// Connecting or talking failed: the probe failed.
    Io(std::io::Error),
    /// The TLS handshake failed (in Go's words where it has some): the probe failed.
    Tls(String),
}

/// A connected socket to `addr`, made inside `netns` (or here), within `timeout`.
fn connect(
    netns: Option<&Path>,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, Connect> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let make = || {
        socket::socket(
            family,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(std::io::Error::from)
    };
    let fd: OwnedFd = match netns {
        Some(path) => {
            let ns = File::open(path).map_err(|e| {
                Connect::Setup(format!(
                    "opening the pod's network namespace {}: {e}",
                    path.display()
                ))
            })?;
            podlab_ns::net::socket_in(ns.as_fd(), "socket(SOCK_STREAM)", make)
                .map_err(|e| Connect::Setup(e.to_string()))?
        }
        None => make().map_err(|e| Connect::Setup(format!("socket: {e}")))?,
    };
    let target = SockaddrStorage::from(addr);
    match socket::connect(fd.as_raw_fd(), &target) {
        Ok(()) => {}
        Err(nix::Error::EINPROGRESS) => wait_connected(&fd, timeout).map_err(Connect::Io)?,
        Err(e) => return Err(Connect::Io(e.into())),
    }
    let stream = TcpStream::from(fd);
    stream.set_nonblocking(false).map_err(Connect::Io)?;
    Ok(stream)
}

fn wait_connected(fd: &OwnedFd, timeout: Duration) -> std::io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        let millis = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
        match nix::poll::poll(
            &mut fds,
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => return Err(std::io::ErrorKind::TimedOut.into()),
            Ok(_) => break,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    match socket::getsockopt(fd, socket::sockopt::SocketError)? {
        0 => Ok(()),
        errno => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// The words Go's net package uses for the common connect errors.
fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::TimedOut => "i/o timeout".into(),
        _ => match e.raw_os_error() {
            Some(libc::ENETUNREACH) => "network is unreachable".into(),
            Some(libc::EHOSTUNREACH) => "no route to host".into(),
            _ => e.to_string(),
        },
    }
}

struct Reply {
    status: Option<u16>,
    location: Option<String>,
    body: String,
}

/// Where one request goes: the socket's namespace and address, and whether it speaks TLS.
struct Target<'a> {
    netns: Option<&'a Path>,
    addr: SocketAddr,
    tls: bool,
    authority: &'a str,
}

/// The connection a request is sent on: plain TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, FirstBytes<TcpStream>>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => &tls.sock.inner,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.write(buf),
            Stream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(tcp) => tcp.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}

/// A reader that keeps the first bytes the server sent: Go's HTTP client tells a plain HTTP
/// server that answers a TLS hello by the `HTTP/` its first record header would be.
struct FirstBytes<S> {
    inner: S,
    first: Vec<u8>,
}

impl<S: Read> Read for FirstBytes<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let room = 5usize.saturating_sub(self.first.len()).min(n);
        self.first.extend_from_slice(&buf[..room]);
        Ok(n)
    }
}

impl<S: Write> Write for FirstBytes<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The TLS handshake on `tcp`, within the timeouts already set on it.
fn handshake(tcp: TcpStream, addr: SocketAddr) -> Result<Stream, Connect> {
    let server = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let mut conn = rustls::ClientConnection::new(tls_config(), server)
        .map_err(|e| Connect::Tls(format!("tls: {e}")))?;
    let mut sock = FirstBytes {
        inner: tcp,
        first: Vec::new(),
    };
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            if sock.first == b"HTTP/" {
                return Err(Connect::Tls(
                    "http: server gave HTTP response to HTTPS client".into(),
                ));
            }
            return Err(match e.kind() {
                std::io::ErrorKind::InvalidData => Connect::Tls(format!("tls: {e}")),
                // SO_RCVTIMEO ran out mid-handshake.
                std::io::ErrorKind::WouldBlock => Connect::Io(std::io::ErrorKind::TimedOut.into()),
                _ => Connect::Io(e),
            });
        }
    }
    Ok(Stream::Tls(Box::new(rustls::StreamOwned::new(conn, sock))))
}

/// The prober's TLS settings, made once: ring's algorithms, TLS 1.2 and 1.3, no certificate
/// verification (see the module doc).
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SkipCertificateVerification(provider)))
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

/// kubelet's `InsecureSkipVerify`: any certificate is accepted; the handshake signatures are
/// checked with the provider's algorithms.
#[derive(Debug)]
struct SkipCertificateVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for SkipCertificateVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One `GET` with `Connection: close`, reading at most [`MAX_OUTPUT`] bytes of the reply.
fn get(
    target: &Target,
    path: &str,
    headers: &[(String, String)],
    deadline: Instant,
) -> Result<Reply, Connect> {
    let left = || {
        let d = deadline.saturating_duration_since(Instant::now());
        if d.is_zero() {
            Err(Connect::Io(std::io::ErrorKind::TimedOut.into()))
        } else {
            Ok(d)
        }
    };
    let tcp = connect(target.netns, target.addr, left()?)?;
    tcp.set_write_timeout(Some(left()?)).map_err(Connect::Io)?;
    tcp.set_read_timeout(Some(left()?)).map_err(Connect::Io)?;
    let mut stream = match target.tls {
        true => handshake(tcp, target.addr)?,
        false => Stream::Plain(tcp),
    };
    stream
        .tcp()
        .set_write_timeout(Some(left()?))
        .map_err(Connect::Io)?;
    stream
        .write_all(request_text(target.authority, path, headers).as_bytes())
        .map_err(Connect::Io)?;
    let mut bytes = Vec::with_capacity(1024);
    let mut buffer = [0u8; 4096];
    while bytes.len() < MAX_OUTPUT {
        stream
            .tcp()
            .set_read_timeout(Some(left()?))
            .map_err(Connect::Io)?;
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if bytes.is_empty() {
                    return Err(Connect::Io(std::io::ErrorKind::TimedOut.into()));
                }
                break;
            }
            // A TLS server that closes without close_notify (as many do after `Connection:
            // close`) has still sent its whole reply.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !bytes.is_empty() => break,
            Err(e) => return Err(Connect::Io(e)),
        }
    }
    bytes.truncate(MAX_OUTPUT);
    Ok(parse_reply(&String::from_utf8_lossy(&bytes)))
}

/// The request kubelet's prober sends: spec headers override `User-Agent` and `Accept`, and an
/// explicitly empty `Accept` removes it.
fn request_text(authority: &str, path: &str, headers: &[(String, String)]) -> String {
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut text = format!("GET {path} HTTP/1.1\r\n");
    if !has("host") {
        text.push_str(&format!("Host: {authority}\r\n"));
    }
    if !has("user-agent") {
        text.push_str(&format!("User-Agent: {USER_AGENT}\r\n"));
    }
    if !has("accept") {
        text.push_str("Accept: */*\r\n");
    }
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("accept") && value.is_empty() {
            continue;
        }
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("Connection: close\r\n\r\n");
    text
}

fn parse_reply(text: &str) -> Reply {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .filter(|l| l.starts_with("HTTP/"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok());
    let location = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("location"))
        .map(|(_, value)| value.trim().to_string());
    Reply {
        status,
        location,
        body: body.to_string(),
    }
}

fn is_redirect(code: u16) -> bool {
    matches!(code, 301 | 302 | 303 | 307 | 308)
}

enum Redirect {
    SameHost(String),
    OtherHost,
}

fn redirect_target(location: &str, scheme: &str, authority: &str) -> Redirect {
    if location.starts_with('/') {
        return Redirect::SameHost(location.to_string());
    }
    let Some(rest) = location.strip_prefix(&format!("{scheme}://")) else {
        return Redirect::OtherHost;
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let default_port = if scheme == "https" { 443 } else { 80 };
    let same = host == authority || format!("{host}:{default_port}") == authority;
    if same {
        Redirect::SameHost(if path.is_empty() {
            "/".into()
        } else {
            path.into()
        })
    } else {
        Redirect::OtherHost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_pods_own_addresses_are_probed() {
        let net = PodNet {
            netns: None,
            pod_ip: Some("10.88.0.5"),
        };
        assert_eq!(probe_address(net, None), Ok("10.88.0.5".parse().unwrap()));
        assert_eq!(
            probe_address(net, Some("localhost")),
            Ok(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(
            probe_address(net, Some("10.88.0.5")),
            Ok("10.88.0.5".parse().unwrap())
        );
        assert!(probe_address(net, Some("8.8.8.8")).is_err());
        assert!(probe_address(net, Some("example.com")).is_err());
        let no_ip = PodNet {
            netns: None,
            pod_ip: None,
        };
        assert_eq!(
            probe_address(no_ip, Some("")),
            Ok(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
    }

    #[test]
    fn the_request_reads_like_kubelets() {
        let text = request_text("127.0.0.1:8080", "/healthz", &[]);
        assert!(text.starts_with("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"));
        assert!(text.contains("User-Agent: kube-probe/1.34\r\nAccept: */*\r\n"));
        let custom = [
            ("Accept".to_string(), String::new()),
            ("X-Probe".to_string(), "1".to_string()),
        ];
        let text = request_text("h", "/", &custom);
        assert!(!text.contains("Accept"));
        assert!(text.contains("X-Probe: 1\r\n"));
    }

    #[test]
    fn replies_and_redirects() {
        let reply = parse_reply("HTTP/1.1 302 Found\r\nLocation: /next\r\n\r\nbody");
        assert_eq!(reply.status, Some(302));
        assert_eq!(reply.location.as_deref(), Some("/next"));
        assert_eq!(reply.body, "body");
        assert!(parse_reply("garbage").status.is_none());
        let same = |location, scheme, authority| match redirect_target(location, scheme, authority)
        {
            Redirect::SameHost(path) => Some(path),
            Redirect::OtherHost => None,
        };
        assert_eq!(same("/a", "http", "h:1").as_deref(), Some("/a"));
        assert_eq!(same("http://h:1/b", "http", "h:1").as_deref(), Some("/b"));
        assert_eq!(same("http://other/b", "http", "h:1"), None);
        assert_eq!(same("https://h:1/b", "http", "h:1"), None);
        assert_eq!(same("https://h:1/b", "https", "h:1").as_deref(), Some("/b"));
        assert_eq!(same("https://h/c", "https", "h").as_deref(), Some("/c"));
    }

    #[test]
    fn http_and_tcp_against_a_local_listener() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for (i, stream) in listener.incoming().take(4).enumerate() {
                let mut stream = stream.unwrap();
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf);
                let reply = match i {
                    0 => "HTTP/1.1 301 Moved\r\nLocation: /ok\r\n\r\n",
                    1 => "HTTP/1.1 204 No Content\r\n\r\n",
                    2 => "HTTP/1.1 500 Oops\r\n\r\n",
                    // What a plain server answers a TLS client hello.
                    _ => "HTTP/1.1 400 Bad Request\r\n\r\n",
                };
                stream.write_all(reply.as_bytes()).unwrap();
            }
        });
        let net = PodNet {
            netns: None,
            pod_ip: None,
        };
        let request = HttpRequest {
            scheme: "HTTP",
            port,
            path: "/",
            ..HttpRequest::default()
        };
        let timeout = Duration::from_secs(5);
        assert!(matches!(http(net, &request, timeout), Outcome::Success(_)));
        assert_eq!(
            http(net, &request, timeout),
            Outcome::Failure("HTTP probe failed with statuscode: 500".into())
        );
        // An HTTPS probe of a plain HTTP server: its reply to the TLS hello is no TLS record.
        let https = HttpRequest {
            scheme: "HTTPS",
            ..request.clone()
        };
        assert_eq!(
            http(net, &https, timeout),
            Outcome::Failure(format!(
                "Get \"https://127.0.0.1:{port}/\": http: server gave HTTP response to HTTPS client"
            ))
        );
        server.join().unwrap();
        // The listener is closed now: nothing listens on the port.
        assert!(
            matches!(tcp(net, None, port, timeout), Outcome::Failure(m) if m.contains("connection refused"))
        );
    }
}
