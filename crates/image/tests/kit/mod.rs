//! The registry tests' kit: a real `docker-registry` on a free port of 127.0.0.1 (TLS from a CA
//! made here with openssl, htpasswd auth, or a token server's tokens as Docker Hub's anonymous
//! pulls get them), OCI layouts written byte by byte and pushed with
//! skopeo, a one-request-per-connection HTTP proxy that corrupts or cuts off one blob, a small
//! tmpfs. Everything it starts stops when its guard is dropped, a failing test included.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use podlab_image::credentials::Credentials;
use podlab_image::pull::PullOptions;
use podlab_image::Digest;
use serde_json::{json, Value};

pub const USER: &str = "podlab";
pub const PASSWORD: &str = "pull-test-secret";

/// A tool from PATH, or None with the reason printed (the test then checks nothing more).
pub fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        let reason = format!("SKIPPED: {name} is not installed (apt-get install {package})");
        eprintln!("{reason}");
        if let Some(log) = std::env::var_os("PODLAB_SKIP_LOG") {
            if let Ok(mut file) = fs::OpenOptions::new().create(true).append(true).open(log) {
                let _ = writeln!(file, "{reason}");
            }
        }
    }
    found
}

fn run(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A port of 127.0.0.1 on which nothing listens (it was free a moment ago).
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls until something accepts connections on `port` (bounded).
fn wait_for_port(port: u16, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on 127.0.0.1:{port}: {}",
            fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running `docker-registry serve`; killed and reaped on drop.
pub struct Registry {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    tls: bool,
    auth: bool,
    skopeo: PathBuf,
}

/// A registry's `auth: token` section: where its 401s send clients, the service and issuer the
/// tokens must name, the certificate their signatures are checked against.
pub struct TokenAuth {
    pub realm: String,
    pub service: &'static str,
    pub issuer: &'static str,
    pub certificate: PathBuf,
}

impl Registry {
    /// Starts a registry (HTTPS with a fresh CA if `tls`, htpasswd if `auth`); None when a
    /// tool is missing.
    pub fn start(tls: bool, auth: bool) -> Option<Registry> {
        Registry::start_with(tls, auth, None)
    }

    /// Starts a plain-HTTP registry that wants a token from a token server for every request,
    /// as Docker Hub does, anonymous pulls too (the registry tests' `token` module serves them).
    pub fn start_with_tokens(tokens: &TokenAuth) -> Option<Registry> {
        Registry::start_with(false, false, Some(tokens))
    }

    fn start_with(tls: bool, auth: bool, tokens: Option<&TokenAuth>) -> Option<Registry> {
        let registry = tool("docker-registry", "docker-registry")?;
        let skopeo = tool("skopeo", "skopeo")?;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let port = closed_port();
        let mut config = format!(
            "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            root.join("data").display()
        );
        if tls {
            let openssl = tool("openssl", "openssl")?;
            make_certificates(&openssl, root);
            config += &format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                root.join("server.pem").display(),
                root.join("server.key").display()
            );
        }
        if auth {
            let htpasswd = tool("htpasswd", "apache2-utils")?;
            let output = Command::new(htpasswd)
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .unwrap();
            assert!(output.status.success());
            fs::write(root.join("htpasswd"), output.stdout).unwrap();
            config += &format!(
                "auth:\n  htpasswd:\n    realm: podlab-test\n    path: {}\n",
                root.join("htpasswd").display()
            );
        }
        if let Some(tokens) = tokens {
            config += &format!(
                "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    \
                 rootcertbundle: {}\n",
                tokens.realm,
                tokens.service,
                tokens.issuer,
                tokens.certificate.display()
            );
        }
        fs::write(root.join("config.yml"), config).unwrap();
        let log = root.join("registry.log");
        let child = Command::new(registry)
            .arg("serve")
            .arg(root.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(fs::File::create(&log).unwrap())
            .stderr(fs::File::create(root.join("registry.err")).unwrap())
            .spawn()
            .unwrap();
        let registry = Registry {
            child,
            dir,
            port,
            tls,
            auth,
            skopeo,
        };
        wait_for_port(
            port,
            "docker-registry",
            &registry.dir.path().join("registry.err"),
        );
        Some(registry)
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The requests the registry served so far, oldest first, from its access log: the
    /// request line and the status (`GET /v2/ HTTP/1.1 401`).
    pub fn requests(&self) -> Vec<String> {
        let log = fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default();
        log.lines()
            .filter_map(|line| {
                let mut parts = line.split('"');
                let request = parts.nth(1)?;
                let status = parts.next()?.split_whitespace().next()?;
                Some(format!("{request} {status}"))
            })
            .collect()
    }

    /// A certs.d folder for this registry: its CA, or plain HTTP.
    pub fn certs_d(&self) -> PathBuf {
        let certs = self.dir.path().join("certs.d");
        let folder = certs.join(self.host());
        fs::create_dir_all(&folder).unwrap();
        let hosts = if self.tls {
            format!(
                "server = \"https://{}\"\nca = \"{}\"\n",
                self.host(),
                self.dir.path().join("ca.pem").display()
            )
        } else {
            format!("server = \"http://{}\"\n", self.host())
        };
        fs::write(folder.join("hosts.toml"), hosts).unwrap();
        certs
    }

    pub fn credentials(&self) -> Option<Credentials> {
        self.auth.then(|| Credentials::Basic {
            username: USER.into(),
            password: PASSWORD.into(),
        })
    }

    /// An amd64 image of gzip `layers`, written as an OCI layout under `dir/layout` and pushed
    /// as `repo_tag`.
    pub fn push_image(&self, dir: &Path, layers: &[&[(&str, &[u8])]], repo_tag: &str) -> Written {
        let mut layout = Layout::new(&dir.join("layout"));
        let image = layout.image(layers, Compression::Gzip, "amd64");
        layout.tag(&image, "t");
        layout.save();
        self.push(&layout, "t", repo_tag);
        image
    }

    /// `skopeo copy --all oci:LAYOUT:TAG docker://HOST/REPO_TAG`.
    pub fn push(&self, layout: &Layout, tag: &str, repo_tag: &str) {
        self.push_with(layout, tag, repo_tag, &[]);
    }

    pub fn push_with(&self, layout: &Layout, tag: &str, repo_tag: &str, extra: &[&str]) {
        let source = format!("oci:{}:{tag}", layout.dir.display());
        let dest = format!("docker://{}/{repo_tag}", self.host());
        let creds = format!("{USER}:{PASSWORD}");
        let mut args = vec!["copy", "-q", "--all", "--dest-tls-verify=false"];
        if self.auth {
            args.extend(["--dest-creds", &creds]);
        }
        args.extend(extra);
        args.extend([source.as_str(), dest.as_str()]);
        // skopeo keeps a blob cache in /var/lib/containers: a private tmpfs takes it.
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount -t tmpfs podlab-test /var/lib && exec "$0" "$@""#)
            .arg(&self.skopeo)
            .args(&args);
        run(&mut command, &format!("skopeo {args:?}"));
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A P-256 key and a self-signed certificate for `subject`, valid two days: `dir/NAME.key`
/// (PKCS#8 PEM) and `dir/NAME.pem`.
pub fn self_signed(openssl: &Path, dir: &Path, name: &str, subject: &str) {
    let path = |suffix: &str| dir.join(format!("{name}.{suffix}")).display().to_string();
    run(
        Command::new(openssl)
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes"])
            .args(["-keyout", &path("key"), "-out", &path("pem")])
            .args(["-days", "2", "-subj", subject]),
        &format!("openssl: the certificate of {subject}"),
    );
}

/// A CA, and a server certificate for 127.0.0.1 signed by it.
fn make_certificates(openssl: &Path, dir: &Path) {
    let path = |name: &str| dir.join(name).display().to_string();
    self_signed(openssl, dir, "ca", "/CN=podlab test CA");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(
        Command::new(openssl)
            .arg("req")
            .args(ec)
            .args(["-keyout", &path("server.key"), "-out", &path("server.csr")])
            .args(["-subj", "/CN=127.0.0.1"]),
        "openssl: the server's request",
    );
    fs::write(
        dir.join("san.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(
        Command::new(openssl)
            .args(["x509", "-req", "-in", &path("server.csr")])
            .args([
                "-CA",
                &path("ca.pem"),
                "-CAkey",
                &path("ca.key"),
                "-CAcreateserial",
            ])
            .args([
                "-out",
                &path("server.pem"),
                "-days",
                "2",
                "-extfile",
                &path("san.cnf"),
            ]),
        "openssl: the server's certificate",
    );
}

/// What the proxy does to one blob.
pub enum Mischief {
    /// Flips a byte of the blob's body (same length).
    Corrupt(Digest),
    /// Sends only the first N bytes of each response for the blob, then closes.
    CutOff(Digest, usize),
}

/// A server on a free port of 127.0.0.1 that hands each connection to its own thread; it
/// stops (and its accepting thread is joined) when dropped.
pub struct LocalServer {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalServer {
    pub fn start(handle: impl Fn(TcpStream) + Send + Sync + 'static) -> LocalServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let handle = Arc::new(handle);
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let handle = handle.clone();
                    std::thread::spawn(move || handle(stream));
                }
            })
        };
        LocalServer {
            port,
            stop,
            thread: Some(thread),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accept
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An HTTP request's head, up to its empty line; None when the client closed first.
pub fn read_head(client: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 {
            return Ok(None);
        }
        head.push(byte[0]);
    }
    Ok(Some(head))
}

/// An HTTP proxy in front of a plain-HTTP registry, one request per connection.
pub struct Proxy {
    server: LocalServer,
    dir: tempfile::TempDir,
}

impl Proxy {
    pub fn start(registry: &Registry, mischief: Mischief) -> Proxy {
        assert!(!registry.tls, "the proxy speaks plain HTTP");
        let upstream = registry.host();
        let server = LocalServer::start(move |stream| {
            let _ = serve(stream, &upstream, &mischief);
        });
        Proxy {
            server,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.server.port())
    }

    /// Pull options that reach the proxy over plain HTTP.
    pub fn options(&self) -> PullOptions {
        let certs = self.dir.path().join("certs.d");
        fs::create_dir_all(certs.join(self.host())).unwrap();
        fs::write(
            certs.join(self.host()).join("hosts.toml"),
            format!("server = \"http://{}\"\n", self.host()),
        )
        .unwrap();
        PullOptions {
            registry_config_dir: Some(certs),
            ..PullOptions::default()
        }
    }
}

fn serve(mut client: TcpStream, upstream: &str, mischief: &Mischief) -> std::io::Result<()> {
    let Some(head) = read_head(&mut client)? else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(&head).into_owned();
    let target_line = text.lines().next().unwrap_or("").to_owned();
    // One request per connection: the registry closes after answering.
    let mut request: String = text
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:") && !l.is_empty())
        .map(|l| format!("{l}\r\n"))
        .collect();
    request += "Connection: close\r\n\r\n";
    let mut server = TcpStream::connect(upstream)?;
    server.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    server.read_to_end(&mut response)?;
    let body_at = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(response.len(), |i| i + 4);
    let (digest, action) = match mischief {
        Mischief::Corrupt(d) => (d, None),
        Mischief::CutOff(d, n) => (d, Some(*n)),
    };
    let is_target = target_line.starts_with("GET ")
        && target_line.contains(&format!("/blobs/{digest}"))
        && response.len() > body_at;
    if is_target {
        match action {
            None => {
                let last = response.len() - 1;
                response[last] ^= 0xff;
            }
            Some(n) => response.truncate((body_at + n).min(response.len())),
        }
    }
    client.write_all(&response)?;
    client.shutdown(std::net::Shutdown::Both)
}

/// A held exclusive flock on `path` (as a pull in another process holds it).
pub fn hold_lock(path: &Path) -> nix::fcntl::Flock<fs::File> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap();
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .unwrap()
}

/// A tmpfs of `size` mounted on `path`; unmounted on drop.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(path: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(path).unwrap();
        nix::mount::mount(
            Some("podlab-test"),
            path,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(format!("size={size}").as_str()),
        )
        .unwrap();
        Tmpfs(path.to_owned())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[derive(Clone, Copy)]
pub enum Compression {
    Gzip,
    Zstd,
}

/// A manifest or index in a layout: its descriptor and what the test needs to know of it.
#[derive(Clone, Debug)]
pub struct Written {
    pub digest: Digest,
    pub descriptor: Value,
    /// Layer blob digests, bottom first.
    pub layers: Vec<Digest>,
    /// Bytes of config and layer blobs.
    pub blobs: u64,
    /// Bytes of each layer blob, bottom first.
    pub layer_sizes: Vec<u64>,
}

impl Written {
    pub fn blob_sizes(&self) -> u64 {
        self.blobs
    }
}

/// An OCI image layout written blob by blob.
pub struct Layout {
    dir: PathBuf,
    tagged: Vec<Value>,
}

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        Layout {
            dir: dir.to_owned(),
            tagged: Vec::new(),
        }
    }

    fn blob(&self, media_type: &str, bytes: &[u8]) -> (Digest, Value) {
        let digest = Digest::of(bytes);
        fs::write(self.dir.join("blobs/sha256").join(digest.hex()), bytes).unwrap();
        let descriptor =
            json!({"mediaType": media_type, "digest": digest.to_string(), "size": bytes.len()});
        (digest, descriptor)
    }

    /// An image of `layers` (each a list of files; names are written raw, `..` included).
    pub fn image(
        &mut self,
        layers: &[&[(&str, &[u8])]],
        compression: Compression,
        arch: &str,
    ) -> Written {
        let mut diff_ids = Vec::new();
        let mut descriptors = Vec::new();
        let mut digests = Vec::new();
        let mut total = 0;
        let mut sizes = Vec::new();
        for files in layers {
            let tar = tar_of(files);
            diff_ids.push(Digest::of(&tar).to_string());
            let (media_type, blob) = match compression {
                Compression::Gzip => {
                    let mut encoder =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    encoder.write_all(&tar).unwrap();
                    (
                        "application/vnd.oci.image.layer.v1.tar+gzip",
                        encoder.finish().unwrap(),
                    )
                }
                Compression::Zstd => (
                    "application/vnd.oci.image.layer.v1.tar+zstd",
                    ruzstd::encoding::compress_to_vec(
                        &tar[..],
                        ruzstd::encoding::CompressionLevel::Fastest,
                    ),
                ),
            };
            let (digest, descriptor) = self.blob(media_type, &blob);
            total += blob.len() as u64;
            sizes.push(blob.len() as u64);
            digests.push(digest);
            descriptors.push(descriptor);
        }
        let config = json!({
            "architecture": arch, "os": "linux",
            "config": {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        });
        let config_bytes = serde_json::to_vec(&config).unwrap();
        let (_, config_descriptor) =
            self.blob("application/vnd.oci.image.config.v1+json", &config_bytes);
        total += config_bytes.len() as u64;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_descriptor,
            "layers": descriptors,
        });
        let (digest, mut descriptor) = self.blob(
            "application/vnd.oci.image.manifest.v1+json",
            &serde_json::to_vec(&manifest).unwrap(),
        );
        descriptor["platform"] = json!({"os": "linux", "architecture": arch});
        Written {
            digest,
            descriptor,
            layers: digests,
            blobs: total,
            layer_sizes: sizes,
        }
    }

    /// A manifest whose config is of `config_type` (an artifact, not an image).
    pub fn artifact(&mut self, config_type: &str) -> Written {
        let (_, config) = self.blob(config_type, b"{}");
        let (_, layer) = self.blob("application/vnd.example.thing.layer.v1", b"payload");
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config, "layers": [layer],
        });
        let (digest, descriptor) = self.blob(
            "application/vnd.oci.image.manifest.v1+json",
            &serde_json::to_vec(&manifest).unwrap(),
        );
        Written {
            digest,
            descriptor,
            layers: Vec::new(),
            blobs: 0,
            layer_sizes: Vec::new(),
        }
    }

    /// An index of `images` (their platforms in their descriptors).
    pub fn index(&mut self, images: &[Written]) -> Written {
        let index = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": images.iter().map(|i| i.descriptor.clone()).collect::<Vec<_>>(),
        });
        let (digest, descriptor) = self.blob(
            "application/vnd.oci.image.index.v1+json",
            &serde_json::to_vec(&index).unwrap(),
        );
        Written {
            digest,
            descriptor,
            layers: Vec::new(),
            blobs: 0,
            layer_sizes: Vec::new(),
        }
    }

    pub fn tag(&mut self, written: &Written, tag: &str) {
        let mut descriptor = written.descriptor.clone();
        if let Some(map) = descriptor.as_object_mut() {
            map.remove("platform");
        }
        descriptor["annotations"] = json!({"org.opencontainers.image.ref.name": tag});
        self.tagged.push(descriptor);
    }

    pub fn save(&self) {
        let index = json!({"schemaVersion": 2, "manifests": self.tagged});
        fs::write(
            self.dir.join("index.json"),
            serde_json::to_vec(&index).unwrap(),
        )
        .unwrap();
    }
}

/// A tar of `files` (mode 0644, root-owned), names written as given.
fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(1_700_000_000);
        header.set_size(data.len() as u64);
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap()
}
