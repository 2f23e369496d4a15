//! Pulling images from OCI registries into the store, as `ctr image pull` / the CRI's
//! PullImage do: resolve the reference (tag → manifest, an index or Docker manifest list →
//! the manifest of one platform), fetch the config and the layers (three at once), verify every
//! blob against its digest while it streams, unpack the layers into snapshots and name the image.
//!
//! ```no_run
//! use podlab_image::pull::{pull, PullOptions};
//! use podlab_image::reference::Reference;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = podlab_image::Store::open(std::path::Path::new("/run/podlab/images"))?;
//! let reference = Reference::parse("127.0.0.1:5443/demo/app:1")?; // busybox → docker.io/library/busybox:latest
//! let pulled = pull(&store, &reference, &PullOptions::default())?;
//! println!("{} {} ({} bytes)", pulled.name, pulled.manifest_digest, pulled.size);
//! # Ok(()) }
//! ```
//!
//! * **Where from**: the hosts of [`crate::hosts`] (containerd's `certs.d/HOST/hosts.toml`:
//!   mirrors first, then the registry; plain HTTP only for a host configured `http://`).
//! * **Who**: [`PullOptions::credentials`] when given (a pod's `imagePullSecrets`: parse each
//!   Secret's `.dockerconfigjson` with [`crate::credentials::DockerConfig::parse`] and take
//!   `credentials_for(&reference.domain)`; try the next on [`PullError::is_unauthorized`]), else
//!   [`crate::credentials::DockerConfig::load_default`] (`$REGISTRY_AUTH_FILE`, then
//!   `~/.docker/config.json`); anonymous bearer tokens are fetched as the registry asks.
//!   Credentials are never printed or logged.
//! * **Never twice**: a blob already in the content store is not fetched; a blob being fetched
//!   by another pull (any process) is waited for (a `flock` per digest in `ROOT/ingest`), not
//!   fetched again; a download cut off (network, kill) leaves `ROOT/ingest/<hex>.partial`,
//!   which the next pull continues with an HTTP range request, hashing what is there first.
//! * **All or nothing**: the image is named only when every blob is verified and every layer
//!   unpacked ([`crate::Store`]'s staging, or straight from `ingest/` when every layer was
//!   unpacked ahead), so a failed pull leaves nothing half-imported;
//!   [`crate::Store::verify`] checks the store.
//!
//! The registry client is `oci-client` (async, on tokio): [`pull`] makes a current-thread
//! runtime for the pull in the calling thread and drops it before returning, so the caller is
//! as single-threaded afterwards as before. Never call it in a forked namespace child; from
//! async code call it in `spawn_blocking`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::credentials::{Credentials, DockerConfig};
use crate::digest::Digest;
use crate::error::Error;
use crate::fetch;
use crate::hosts;
use crate::platform::Platform;
use crate::reference::Reference;
use crate::store::Store;

/// How to pull. `PullOptions::default()` pulls for this machine's platform with the
/// credentials of the docker config file and the hosts of `$PODLAB_REGISTRY_CONFIG` or
/// `/etc/podlab/certs.d`.
#[derive(Clone)]
pub struct PullOptions {
    /// The platform to pick from an index; `None` is this machine ([`Platform::host`]).
    pub platform: Option<Platform>,
    /// Credentials to use for every host of this pull instead of the docker config file's.
    pub credentials: Option<Credentials>,
    /// The certs.d folder; `None` is [`hosts::config_dir`].
    pub registry_config_dir: Option<PathBuf>,
    /// Told of each step and of bytes arriving; `None` says nothing.
    pub progress: Option<Arc<dyn Progress>>,
    /// Blobs downloaded at once (3, as containerd's default).
    pub max_concurrent_downloads: usize,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            platform: None,
            credentials: None,
            registry_config_dir: None,
            progress: None,
            max_concurrent_downloads: 3,
        }
    }
}

impl std::fmt::Debug for PullOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullOptions")
            .field("platform", &self.platform)
            .field("credentials", &self.credentials)
            .field("registry_config_dir", &self.registry_config_dir)
            .field("progress", &self.progress.is_some())
            .field("max_concurrent_downloads", &self.max_concurrent_downloads)
            .finish()
    }
}

/// What a pull reports as it goes; called from the pulling thread.
pub trait Progress: Send + Sync {
    fn report(&self, event: &ProgressEvent);
}

/// One step of a pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressEvent {
    /// The pull holds the store against collections (after waiting for one that ran); it
    /// comes after `Resolved`, before the pull's first look at the store.
    Holding,
    /// The reference resolved to this manifest, on this host.
    Resolved {
        manifest: Digest,
        host: String,
        layers: usize,
    },
    /// A blob is being fetched; `from` bytes were there already (a resumed download).
    BlobStarted {
        digest: Digest,
        size: u64,
        from: u64,
    },
    /// Bytes of a blob so far.
    BlobProgress {
        digest: Digest,
        done: u64,
        size: u64,
    },
    /// Another pull is fetching this blob; this one waits for it.
    BlobWaiting { digest: Digest },
    /// A blob is complete and verified; `fetched` is false when it was there already.
    BlobDone {
        digest: Digest,
        size: u64,
        fetched: bool,
        /// A layer unpacked as its bytes arrived: the commit only moves its folder.
        unpacked: bool,
    },
    /// Every blob is here; the layers are being unpacked.
    Unpacking,
}

/// What a pull did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledImage {
    /// The name the image has in the store (`docker.io/library/busybox:latest`, or
    /// `REPO@sha256:…` for a reference with a digest and no tag).
    pub name: String,
    /// The image's manifest digest (for a multi-platform image, the chosen platform's).
    pub manifest_digest: Digest,
    /// The digest of the index or manifest list the reference resolved to, if it did.
    pub index_digest: Option<Digest>,
    /// The config's digest: the image ID.
    pub config_digest: Digest,
    /// Bytes of content: manifest, config and layer blobs (kubelet's "Image size").
    pub size: u64,
    pub layers: usize,
    /// Bytes downloaded by this pull (0 when everything was there already).
    pub downloaded: u64,
    /// The host that resolved the reference (`https://127.0.0.1:5443`).
    pub host: String,
    pub elapsed: Duration,
}

/// A pull that failed: which reference, which layer (when one was at fault), and why.
#[derive(Debug, thiserror::Error)]
#[error("pulling {reference}{}: {kind}", layer_part(.layer))]
pub struct PullError {
    pub reference: String,
    pub layer: Option<Digest>,
    pub kind: PullErrorKind,
}

fn layer_part(layer: &Option<Digest>) -> String {
    layer
        .as_ref()
        .map(|l| format!(", blob {l}"))
        .unwrap_or_default()
}

/// Why a pull failed. Kubelet maps all of them to `ErrImagePull`; [`PullError::is_not_found`]
/// and [`PullError::is_unauthorized`] tell the cases it words differently.
#[derive(Debug, thiserror::Error)]
pub enum PullErrorKind {
    #[error("{0}")]
    InvalidReference(String),
    /// certs.d or config.json cannot be read.
    #[error("{0}")]
    Config(String),
    /// No connection: unknown host, refused, TLS failure.
    #[error("cannot reach registry {host}: {cause}")]
    Unreachable { host: String, cause: String },
    #[error("{host}: 401 Unauthorized: the registry refused {who}; log in (podlab reads $REGISTRY_AUTH_FILE, then ~/.docker/config.json) or check the credentials")]
    Unauthorized { host: String, who: String },
    #[error("{host}: not found: {what}")]
    NotFound { host: String, what: String },
    #[error("{host}: {message}")]
    Registry { host: String, message: String },
    #[error("content hashes to {actual}, not the digest it was asked for; the registry or a proxy on the way changed or cut it")]
    DigestMismatch { actual: Digest },
    #[error("{actual} bytes, but its descriptor says {expected}")]
    SizeMismatch { expected: u64, actual: u64 },
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("no image for platform {wanted} in the index (it has: {})", .offered.join(", "))]
    NoMatchingPlatform {
        wanted: String,
        offered: Vec<String>,
    },
    #[error("{0}")]
    Store(Error),
}

impl PullError {
    /// The registry has no such manifest (kubelet's "manifest unknown", "not found").
    pub fn is_not_found(&self) -> bool {
        matches!(self.kind, PullErrorKind::NotFound { .. })
    }

    pub fn is_unauthorized(&self) -> bool {
        matches!(self.kind, PullErrorKind::Unauthorized { .. })
    }
}

/// How many times a pull fetches and commits when blobs it found went before its commit.
const COMMIT_TRIES: u32 = 3;

/// Pulls `reference` into `store`; see the module doc. Blocks until the image is in the store
/// (named, unpacked) or the pull failed.
// The error is large (it carries the store's error) but made at most once per pull.
#[allow(clippy::result_large_err)]
pub fn pull(
    store: &Store,
    reference: &Reference,
    options: &PullOptions,
) -> Result<PulledImage, PullError> {
    let started = Instant::now();
    let name = reference.to_string();
    let fail = |kind| PullError {
        reference: name.clone(),
        layer: None,
        kind,
    };
    let config_dir = options
        .registry_config_dir
        .clone()
        .unwrap_or_else(hosts::config_dir);
    let hosts = hosts::hosts_for(&config_dir, &reference.domain)
        .map_err(|m| fail(PullErrorKind::Config(m)))?;
    let auth_file = match options.credentials {
        Some(_) => DockerConfig::default(),
        None => DockerConfig::load_default().map_err(|m| fail(PullErrorKind::Config(m)))?,
    };
    let platform = options.platform.clone().unwrap_or_else(Platform::host);
    // A blob the fetch found in the store may still be deleted before the pull is done with
    // it: a collection waits for the pull (`hold_for_pull`), but a commit that moved a tag to
    // another image, or a `podlab image rm`, collects at once. The platform check or the
    // commit then finds it missing, and the fetch runs again: it downloads what is gone now.
    // Held from the fetch's first look at the store to the end of the commit.
    let pulling = std::cell::OnceCell::new();
    let hold_store = || -> Result<(), Error> {
        if pulling.get().is_none() {
            let _ = pulling.set(store.hold_for_pull()?);
            if let Some(progress) = &options.progress {
                progress.report(&ProgressEvent::Holding);
            }
        }
        Ok(())
    };
    store.prepare_ingest();
    let plan = fetch::Plan {
        reference,
        hosts: &hosts,
        explicit: options.credentials.as_ref(),
        auth_file: &auth_file,
        platform: &platform,
        ingest: store.ingest_dir(),
        store_blobs: store.blobs_dir(),
        store_lock: store.lock_path(),
        progress: options.progress.as_deref(),
        concurrency: options.max_concurrent_downloads.max(1),
        hold_store: &hold_store,
    };
    // reqwest is built without a rustls crypto provider of its own (aws-lc is a C build);
    // ring is the process's. Another part of the process may have installed one already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            fail(PullErrorKind::Store(Error::io(
                "starting the pull's runtime",
                "tokio",
                e,
            )))
        })?;
    let stored_name = match (&reference.tag, &reference.digest) {
        (None, Some(digest)) => format!("{}@{digest}", reference.repository()),
        _ => {
            let mut plain = reference.clone();
            plain.digest = None;
            plain.to_string()
        }
    };
    let mut tries = 0;
    let (fetched, summary) = loop {
        tries += 1;
        let fetched = match runtime.block_on(fetch::fetch(&plan)) {
            Ok(fetched) => fetched,
            Err((_, PullErrorKind::Store(Error::BlobMissing { .. }))) if tries < COMMIT_TRIES => {
                continue
            }
            Err((layer, kind)) => {
                return Err(PullError {
                    reference: name.clone(),
                    layer,
                    kind,
                })
            }
        };
        if let Some(progress) = &options.progress {
            progress.report(&ProgressEvent::Unpacking);
        }
        match store.commit_pulled(&fetched.blobs, &fetched.manifest, &stored_name) {
            Ok(summary) => break (fetched, summary),
            Err((_, Error::BlobMissing { .. })) if tries < COMMIT_TRIES => continue,
            Err((layer, e)) => {
                return Err(PullError {
                    reference: name.clone(),
                    layer,
                    kind: PullErrorKind::Store(e),
                })
            }
        }
    };
    // Its blocking-pool threads (DNS lookups) end here, before the caller goes on.
    drop(runtime);
    Ok(PulledImage {
        name: stored_name,
        manifest_digest: fetched.manifest,
        index_digest: fetched.index,
        config_digest: summary.id,
        size: summary.size,
        layers: summary.layers,
        downloaded: fetched.downloaded,
        host: fetched.host,
        elapsed: started.elapsed(),
    })
}
