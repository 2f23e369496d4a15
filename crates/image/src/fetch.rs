//! The network half of a pull (async, on the pull's current-thread tokio runtime): resolve the
//! reference on the first host that answers, pick the platform's manifest, and download every
//! blob the store lacks into `ROOT/ingest`, verified by digest and size as it streams.
//!
//! ```text
//! ROOT/ingest/<hex>.lock      flock held by the one process downloading the blob
//! ROOT/ingest/<hex>.partial   bytes so far; kept when a download is cut off, resumed later
//! ROOT/ingest/<hex>           complete and verified, waiting for the pull's commit
//! ROOT/ingest/<hex>.unpack*   a layer unpacked while it downloads (see crate::unpack_ahead)
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use futures_util::{StreamExt, TryStreamExt};
use oci_client::client::BlobResponse;
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::credentials::{Credentials, DockerConfig};
use crate::digest::Digest;
use crate::durable::StoreLock;
use crate::error::Error;
use crate::hosts::RegistryHost;
use crate::image::{INDEX_TYPES, MANIFEST_TYPES};
use crate::platform::{IndexDocument, Platform};
use crate::pull::{Progress, ProgressEvent, PullErrorKind};
use crate::reference::Reference;
use crate::registry::{self, HostClient};
use crate::unpack_ahead::UnpackAhead;

/// What a manifest GET accepts: both image manifests and both kinds of index.
const ACCEPT: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
const CONFIG_TYPES: &[&str] = &[
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
];
const LAYER_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar.zstd",
];
/// Attempts at one blob when the connection breaks mid-way, each resuming where the last ended.
const ATTEMPTS: usize = 3;

pub(crate) struct Plan<'a> {
    pub reference: &'a Reference,
    pub hosts: &'a [RegistryHost],
    pub explicit: Option<&'a Credentials>,
    pub auth_file: &'a DockerConfig,
    pub platform: &'a Platform,
    pub ingest: PathBuf,
    pub store_blobs: PathBuf,
    /// The store's lock, held by a pull's commit while it moves blobs out of ingest.
    pub store_lock: PathBuf,
    pub progress: Option<&'a dyn Progress>,
    pub concurrency: usize,
    /// Holds the store against collections ([`crate::Store::hold_for_pull`]) from the first
    /// look at it; a no-op once held. The registry is asked first: a collection that runs
    /// (the CRI's after each RemoveImage) ends while the manifest is on its way.
    pub hold_store: &'a dyn Fn() -> Result<(), Error>,
}

/// Every blob of the image is in the store or complete in ingest.
pub(crate) struct Fetched {
    pub manifest: Digest,
    pub index: Option<Digest>,
    /// Manifest, config, layers: each in the store already or at `ingest/<hex>`.
    pub blobs: Vec<Digest>,
    pub downloaded: u64,
    pub host: String,
}

type Failure = (Option<Digest>, PullErrorKind);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shape {
    #[serde(default)]
    schema_version: Option<u32>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<serde_json::Value>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    size: u64,
}

impl Plan<'_> {
    fn report(&self, event: ProgressEvent) {
        if let Some(progress) = self.progress {
            progress.report(&event);
        }
    }

    fn auth_for(&self, host: &RegistryHost) -> RegistryAuth {
        let bare = host.host.split('/').next().unwrap_or(&host.host);
        let found = self.explicit.or_else(|| {
            self.auth_file
                .credentials_for(bare)
                .or_else(|| self.auth_file.credentials_for(&self.reference.domain))
        });
        match found {
            Some(Credentials::Basic { username, password }) => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
            Some(Credentials::Token(token)) => RegistryAuth::Bearer(token.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    fn who(&self, auth: &RegistryAuth) -> String {
        match auth {
            RegistryAuth::Anonymous => "anonymous access".into(),
            RegistryAuth::Basic(user, _) => format!("user {user:?}"),
            RegistryAuth::Bearer(_) => "the registry token".into(),
        }
    }

    /// oci-client's reference for `host`: the registry's own name, with the host as a mirror
    /// when it is another (oci-client then adds `?ns=REGISTRY`, as containerd does).
    fn oci_reference(&self, host: &RegistryHost, digest: Option<&str>) -> oci_client::Reference {
        let r = self.reference;
        let registry = r.domain.clone();
        let repository = r.path.clone();
        let mut reference = match (
            digest
                .map(str::to_owned)
                .or_else(|| r.digest.as_ref().map(|d| d.to_string())),
            &r.tag,
        ) {
            (Some(digest), _) => oci_client::Reference::with_digest(registry, repository, digest),
            (None, Some(tag)) => oci_client::Reference::with_tag(registry, repository, tag.clone()),
            (None, None) => oci_client::Reference::with_tag(registry, repository, "latest".into()),
        };
        let is_upstream = host.host == r.domain
            || (r.domain == "docker.io" && !host.mirror && host.host == "registry-1.docker.io");
        if !is_upstream {
            reference.set_mirror_registry(host.host.clone());
        }
        reference
    }
}

/// Turns oci-client's error into what the user is told; `what` names the object asked for.
fn classify(
    host: &RegistryHost,
    who: String,
    what: &str,
    err: OciDistributionError,
) -> PullErrorKind {
    let host_name = host.url();
    match err {
        OciDistributionError::UnauthorizedError { .. } => PullErrorKind::Unauthorized {
            host: host_name,
            who,
        },
        OciDistributionError::AuthenticationFailure(reason) => PullErrorKind::Unauthorized {
            host: host_name,
            who: format!("{who} ({})", reason.chars().take(200).collect::<String>()),
        },
        OciDistributionError::RegistryError { envelope, .. } => {
            let unknown = envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NameUnknown
                )
            });
            let denied = envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied));
            if unknown {
                PullErrorKind::NotFound {
                    host: host_name,
                    what: format!("{what} ({envelope})"),
                }
            } else if denied {
                PullErrorKind::Unauthorized {
                    host: host_name,
                    who,
                }
            } else {
                PullErrorKind::Registry {
                    host: host_name,
                    message: format!("{what}: {envelope}"),
                }
            }
        }
        OciDistributionError::ServerError { code: 404, .. } => PullErrorKind::NotFound {
            host: host_name,
            what: what.to_owned(),
        },
        OciDistributionError::ServerError { code, message, .. } => PullErrorKind::Registry {
            host: host_name,
            message: format!(
                "{what}: HTTP {code}: {}",
                message.chars().take(200).collect::<String>()
            ),
        },
        OciDistributionError::RequestError(e) => PullErrorKind::Unreachable {
            host: host_name,
            cause: request_cause(&e),
        },
        OciDistributionError::DigestError(e) => PullErrorKind::Registry {
            host: host_name,
            message: format!("{what}: {e}"),
        },
        other => PullErrorKind::Registry {
            host: host_name,
            message: format!("{what}: {other}"),
        },
    }
}

/// reqwest's error with its causes (`dns error: failed to lookup address`, `connection
/// refused`, `invalid peer certificate: UnknownIssuer`), without the URL it repeats.
fn request_cause(err: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    if parts.is_empty() {
        parts.push(err.to_string());
    }
    parts.join(": ")
}

/// Resolves and downloads everything `plan` needs.
pub(crate) async fn fetch(plan: &Plan<'_>) -> Result<Fetched, Failure> {
    let (host, client, auth, bytes, digest) = resolve(plan).await?;
    let who = plan.who(&auth);
    let mut shape = parse_shape(&bytes)?;
    let mut index = None;
    let (mut manifest_bytes, mut manifest_digest) = (bytes, digest);
    if shape.manifests.is_some()
        || shape
            .media_type
            .as_deref()
            .is_some_and(|m| INDEX_TYPES.contains(&m))
    {
        let document: IndexDocument = serde_json::from_slice(&manifest_bytes).map_err(|e| {
            (
                None,
                PullErrorKind::Registry {
                    host: host.url(),
                    message: format!("the image index does not parse: {e}"),
                },
            )
        })?;
        let entry = document.pick(plan.platform).map_err(|offered| {
            (
                None,
                PullErrorKind::NoMatchingPlatform {
                    wanted: plan.platform.to_string(),
                    offered,
                },
            )
        })?;
        if !entry.media_type.is_empty() && !MANIFEST_TYPES.contains(&entry.media_type.as_str()) {
            return Err((
                None,
                PullErrorKind::Unsupported(format!(
                    "the index's entry for {} has media type {}",
                    plan.platform, entry.media_type
                )),
            ));
        }
        let reference = plan.oci_reference(&host, Some(&entry.digest));
        let (bytes, digest) = client
            .manifest(&host, &reference, &auth, ACCEPT)
            .await
            .map_err(|e| {
                (
                    None,
                    classify(&host, who.clone(), &format!("manifest {}", entry.digest), e),
                )
            })?;
        index = Some(manifest_digest);
        manifest_bytes = bytes;
        manifest_digest = digest;
        shape = parse_shape(&manifest_bytes)?;
    }
    let manifest = Digest::parse(&manifest_digest).map_err(|e| (None, PullErrorKind::Store(e)))?;
    let index = index
        .map(|d| Digest::parse(&d))
        .transpose()
        .map_err(|e| (None, PullErrorKind::Store(e)))?;
    check_manifest(&shape, &manifest)?;
    let config = shape.config.clone().expect("checked");
    plan.report(ProgressEvent::Resolved {
        manifest: manifest.clone(),
        host: host.url(),
        layers: shape.layers.len(),
    });
    (plan.hold_store)().map_err(|e| (None, PullErrorKind::Store(e)))?;
    let mut blobs = vec![manifest.clone()];
    let mut wanted = vec![config];
    wanted.extend(shape.layers.iter().cloned());
    let mut downloads = Vec::new();
    for (n, descriptor) in wanted.iter().enumerate() {
        let digest =
            Digest::parse(&descriptor.digest).map_err(|e| (None, PullErrorKind::Store(e)))?;
        blobs.push(digest.clone());
        // The config is wanted[0]; the layers follow, the bottom one first.
        let layer = (n > 0).then_some(Layer { bottom: n == 1 });
        downloads.push((digest, descriptor.clone(), layer));
    }
    let reference = plan.oci_reference(&host, Some(manifest.to_string().as_str()));
    // The config and the layers download together, as containerd's fetch handlers do; the
    // config's platform is checked before anything is committed. Waiting for the config first
    // cost a whole round trip to the registry on every pull.
    let config_digest = downloads[0].0.clone();
    // The biggest first: its download and unpack end last, and the requests go out (and are
    // answered by the registry) in this order. Asked last, busybox's layer waited for the
    // registry to answer the config and a 112-byte layer first.
    downloads.sort_by_key(|(_, descriptor, _)| std::cmp::Reverse(descriptor.size));
    // Written (and fsynced) by a thread of the runtime's pool while the blobs download; joined
    // below, whatever they come to.
    let manifest_written = {
        let (ingest, store_blobs, digest) = (
            plan.ingest.clone(),
            plan.store_blobs.clone(),
            manifest.clone(),
        );
        let bytes = std::mem::take(&mut manifest_bytes);
        tokio::task::spawn_blocking(move || write_ingest(&ingest, &store_blobs, &digest, &bytes))
    };
    let downloads = futures_util::stream::iter(downloads)
        .map(|(digest, descriptor, layer)| {
            let (client, reference, auth, host, who) =
                (&client, &reference, &auth, &host, who.clone());
            async move {
                fetch_blob(
                    plan,
                    client,
                    reference,
                    auth,
                    host,
                    who,
                    &digest,
                    &descriptor,
                    layer,
                )
                .await
            }
        })
        .buffer_unordered(plan.concurrency)
        .try_collect::<Vec<u64>>();
    let (downloaded, written) = futures_util::future::join(downloads, manifest_written).await;
    written.map_err(|e| {
        let e = std::io::Error::other(e);
        (None, ingest_io("writing the manifest", &plan.ingest, e))
    })??;
    let downloaded = downloaded?;
    check_platform(plan, &config_digest, index.is_some())?;
    let downloaded = downloaded.iter().sum::<u64>();
    Ok(Fetched {
        manifest,
        index,
        blobs,
        downloaded,
        host: host.url(),
    })
}

/// An image that did not come out of an index must still be for the wanted platform, as
/// containerd checks a single manifest's config (its OS and architecture; variants vary too
/// much in configs to be compared).
fn check_platform(plan: &Plan<'_>, config: &Digest, from_index: bool) -> Result<(), Failure> {
    if from_index {
        return Ok(());
    }
    #[derive(Deserialize)]
    struct ConfigPlatform {
        #[serde(default)]
        os: String,
        #[serde(default)]
        architecture: String,
    }
    // Another pull of the same image may be committing its config now, moving it from ingest
    // into the store under the store's lock: a shared hold of that lock sees it in one place.
    let settled = StoreLock::acquire(&plan.store_lock, false)
        .map_err(|e| (Some(config.clone()), PullErrorKind::Store(e)))?;
    // Found in neither when a garbage collection took it from the store after the fetch saw
    // it there: missing, which the pull answers by fetching again.
    let path = [&plan.ingest, &plan.store_blobs]
        .iter()
        .map(|dir| dir.join(config.hex()))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            let path = plan.store_blobs.join(config.hex());
            let missing = Error::BlobMissing {
                digest: config.clone(),
                path,
            };
            (Some(config.clone()), PullErrorKind::Store(missing))
        })?;
    let bytes =
        fs::read(&path).map_err(|e| (Some(config.clone()), ingest_io("reading", &path, e)))?;
    drop(settled);
    let found: ConfigPlatform = serde_json::from_slice(&bytes).map_err(|e| {
        (
            Some(config.clone()),
            PullErrorKind::Unsupported(format!("the image config does not parse: {e}")),
        )
    })?;
    if found.os == plan.platform.os && found.architecture == plan.platform.architecture {
        return Ok(());
    }
    Err((
        None,
        PullErrorKind::NoMatchingPlatform {
            wanted: plan.platform.to_string(),
            offered: vec![format!("{}/{}", found.os, found.architecture)],
        },
    ))
}

fn parse_shape(bytes: &[u8]) -> Result<Shape, Failure> {
    serde_json::from_slice(bytes).map_err(|e| {
        (
            None,
            PullErrorKind::Unsupported(format!(
                "the manifest is not an image manifest or index (JSON: {e})"
            )),
        )
    })
}

fn check_manifest(shape: &Shape, digest: &Digest) -> Result<(), Failure> {
    if shape.schema_version != Some(2) {
        return Err((None, PullErrorKind::Unsupported(format!(
            "manifest {digest} has schemaVersion {:?}; podlab reads schema 2 (OCI and Docker v2.2), not Docker's schema 1",
            shape.schema_version
        ))));
    }
    if let Some(mt) = &shape.media_type {
        if !MANIFEST_TYPES.contains(&mt.as_str()) {
            return Err((
                None,
                PullErrorKind::Unsupported(format!("manifest {digest} has media type {mt}")),
            ));
        }
    }
    let Some(config) = &shape.config else {
        return Err((
            None,
            PullErrorKind::Unsupported(format!("manifest {digest} has no config")),
        ));
    };
    if !CONFIG_TYPES.contains(&config.media_type.as_str()) {
        return Err((
            None,
            PullErrorKind::Unsupported(format!(
            "manifest {digest} has a config of media type {}: not a container image (an artifact?)",
            config.media_type
        )),
        ));
    }
    for layer in &shape.layers {
        if !LAYER_TYPES.contains(&layer.media_type.as_str()) {
            let layer_digest = Digest::parse(&layer.digest).ok();
            return Err((layer_digest, PullErrorKind::Unsupported(format!(
                "layer media type {} (podlab unpacks tar, tar+gzip and tar+zstd layers; not foreign, encrypted or artifact layers)",
                layer.media_type
            ))));
        }
    }
    Ok(())
}

/// The first host that resolves the reference: its client, auth and the manifest (or index).
async fn resolve(
    plan: &Plan<'_>,
) -> Result<(RegistryHost, HostClient, RegistryAuth, Vec<u8>, String), Failure> {
    let by_digest = plan.reference.digest.is_some();
    let mut last = None;
    for host in plan
        .hosts
        .iter()
        .filter(|h| if by_digest { h.pull } else { h.resolve })
    {
        let auth = plan.auth_for(host);
        let client = registry::client_for(host, &auth).map_err(|k| (None, k))?;
        let reference = plan.oci_reference(host, None);
        let what = format!("manifest {}", plan.reference);
        match client.manifest(host, &reference, &auth, ACCEPT).await {
            Ok((bytes, digest)) => return Ok((host.clone(), client, auth, bytes, digest)),
            Err(err) => {
                let kind = classify(host, plan.who(&auth), &what, err);
                // A mirror that fails or lacks the image is skipped, as containerd does. What
                // a host that answered said (not found, unauthorized) says more than a later
                // host that could not be reached.
                let answered = |k: &Option<PullErrorKind>| {
                    k.as_ref()
                        .is_some_and(|k| !matches!(k, PullErrorKind::Unreachable { .. }))
                };
                if !answered(&last) {
                    last = Some(kind);
                }
            }
        }
    }
    Err((
        None,
        last.unwrap_or_else(|| {
            PullErrorKind::Config(format!(
                "no host of {} may {} (check the capabilities in hosts.toml)",
                plan.reference.domain,
                if by_digest { "pull" } else { "resolve" }
            ))
        }),
    ))
}

fn ingest_io(what: &'static str, path: &Path, e: std::io::Error) -> PullErrorKind {
    PullErrorKind::Store(Error::io(what, path, e))
}

/// Puts a small blob already in memory (the manifest) into ingest.
fn write_ingest(
    ingest: &Path,
    store_blobs: &Path,
    digest: &Digest,
    bytes: &[u8],
) -> Result<(), Failure> {
    if store_blobs.join(digest.hex()).is_file() {
        return Ok(());
    }
    fs::create_dir_all(ingest).map_err(|e| (None, ingest_io("creating folder", ingest, e)))?;
    let done = ingest.join(digest.hex());
    // Unique per call: two pulls in one process may write the same manifest at once.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = ingest.join(format!(
        "{}.{}-{n}.manifest",
        digest.hex(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, &done)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        (Some(digest.clone()), ingest_io("writing", &done, e))
    })
}

/// A blob that is one of the image's layers.
#[derive(Clone, Copy)]
struct Layer {
    /// The bottom-most layer: nothing below it to take folder attributes from.
    bottom: bool,
}

/// Downloads one blob into `ingest/<hex>` unless the store or ingest has it; returns the bytes
/// downloaded.
#[allow(clippy::too_many_arguments)]
async fn fetch_blob(
    plan: &Plan<'_>,
    client: &HostClient,
    reference: &oci_client::Reference,
    auth: &RegistryAuth,
    host: &RegistryHost,
    who: String,
    digest: &Digest,
    descriptor: &Descriptor,
    layer: Option<Layer>,
) -> Result<u64, Failure> {
    let failed = |kind| (Some(digest.clone()), kind);
    let size = descriptor.size;
    let present = || {
        plan.store_blobs.join(digest.hex()).is_file() || plan.ingest.join(digest.hex()).is_file()
    };
    let already_there = || {
        plan.report(ProgressEvent::BlobDone {
            digest: digest.clone(),
            size,
            fetched: false,
            unpacked: false,
        });
        Ok(0)
    };
    if present() {
        return already_there();
    }
    fs::create_dir_all(&plan.ingest)
        .map_err(|e| failed(ingest_io("creating folder", &plan.ingest, e)))?;
    let lock_path = plan.ingest.join(format!("{}.lock", digest.hex()));
    let _lock = match StoreLock::try_acquire(&lock_path) {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            plan.report(ProgressEvent::BlobWaiting {
                digest: digest.clone(),
            });
            let path = lock_path.clone();
            tokio::task::spawn_blocking(move || StoreLock::acquire(&path, true))
                .await
                .map_err(|e| {
                    failed(PullErrorKind::Store(Error::io(
                        "waiting for",
                        &lock_path,
                        std::io::Error::other(e),
                    )))
                })?
                .map_err(|e| failed(PullErrorKind::Store(e)))?
        }
        Err(e) => return Err(failed(PullErrorKind::Store(e))),
    };
    // Another pull that fetched this blob may be committing it now: its commit moves the blob
    // from ingest through staging into the store, all under the store's lock. Looking under a
    // shared hold of that lock, a blob in neither place is truly missing.
    // Taken at once unless a commit holds it: a blocking wait needs a thread of its own.
    let settled = match StoreLock::try_acquire_shared(&plan.store_lock) {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            let path = plan.store_lock.clone();
            tokio::task::spawn_blocking(move || StoreLock::acquire(&path, false))
                .await
                .map_err(|e| {
                    failed(PullErrorKind::Store(Error::io(
                        "waiting for",
                        &plan.store_lock,
                        std::io::Error::other(e),
                    )))
                })?
                .map_err(|e| failed(PullErrorKind::Store(e)))?
        }
        Err(e) => return Err(failed(PullErrorKind::Store(e))),
    };
    let coalesced = present();
    drop(settled);
    if coalesced {
        return already_there(); // another pull fetched it while this one waited
    }
    let partial = plan.ingest.join(format!("{}.partial", digest.hex()));
    let done = plan.ingest.join(digest.hex());
    let oci_descriptor = OciDescriptor {
        media_type: descriptor.media_type.clone(),
        digest: descriptor.digest.clone(),
        size: descriptor.size as i64,
        ..OciDescriptor::default()
    };
    let mut downloaded = 0u64;
    let mut last_error = None;
    for _attempt in 0..ATTEMPTS {
        // What is there already is hashed again: the digest covers the whole blob.
        let (mut file, mut hasher, mut have) = open_partial(&partial)
            .map_err(|e| failed(ingest_io("reading partial blob", &partial, e)))?;
        if have > size {
            drop(file);
            let _ = fs::remove_file(&partial);
            continue;
        }
        plan.report(ProgressEvent::BlobStarted {
            digest: digest.clone(),
            size,
            from: have,
        });
        let response = if have == size {
            None
        } else {
            match client.blob(reference, auth, &oci_descriptor, have).await {
                Ok(r) => Some(r),
                Err(e) => {
                    return Err(failed(classify(
                        host,
                        who.clone(),
                        &format!("blob {digest}"),
                        e,
                    )))
                }
            }
        };
        let mut stream = match response {
            None => None,
            Some(BlobResponse::Partial(s)) => Some(s.stream),
            Some(BlobResponse::Full(s)) => {
                // The registry sent all of it: start over.
                file.set_len(0)
                    .map_err(|e| failed(ingest_io("truncating", &partial, e)))?;
                hasher = Sha256::new();
                have = 0;
                Some(s.stream)
            }
        };
        // Unpacked as it streams only when this attempt streams it all; a resumed download
        // is unpacked by the commit, from the file. An attempt that breaks off drops its own.
        let mut ahead = match (layer, stream.is_some() && have == 0) {
            (Some(layer), true) => UnpackAhead::start(&plan.ingest, digest, layer.bottom),
            _ => None,
        };
        let mut broken = None;
        if let Some(stream) = stream.as_mut() {
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(bytes) => {
                        if have + bytes.len() as u64 > size {
                            drop(file);
                            let _ = fs::remove_file(&partial);
                            return Err(failed(PullErrorKind::SizeMismatch {
                                expected: size,
                                actual: have + bytes.len() as u64,
                            }));
                        }
                        file.write_all(&bytes)
                            .map_err(|e| failed(ingest_io("writing", &partial, e)))?;
                        hasher.update(&bytes);
                        if let Some(ahead) = ahead.as_mut() {
                            ahead.feed(&bytes).await;
                        }
                        have += bytes.len() as u64;
                        downloaded += bytes.len() as u64;
                        plan.report(ProgressEvent::BlobProgress {
                            digest: digest.clone(),
                            done: have,
                            size,
                        });
                    }
                    Err(e) => {
                        broken = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(e) = broken {
            // Kept: the next attempt, or the next pull, goes on from here.
            file.flush()
                .map_err(|e| failed(ingest_io("writing", &partial, e)))?;
            last_error = Some(PullErrorKind::Unreachable {
                host: host.url(),
                cause: format!(
                    "the download of the blob broke off after {have} of {size} bytes: {}",
                    io_cause(&e)
                ),
            });
            continue;
        }
        if have < size {
            last_error = Some(PullErrorKind::SizeMismatch {
                expected: size,
                actual: have,
            });
            continue; // a cut-off response: resume
        }
        let actual = Digest::from_hex(&hex::encode(hasher.finalize())).expect("sha256 is 32 bytes");
        if &actual != digest {
            drop(file);
            let _ = fs::remove_file(&partial);
            return Err(failed(PullErrorKind::DigestMismatch { actual }));
        }
        // On a thread of the pool: the disk's write of a layer takes milliseconds (up to 7
        // here for busybox's 1.46 MB), and this thread serves the pull's other downloads.
        tokio::task::spawn_blocking(move || file.sync_all())
            .await
            .map_err(std::io::Error::other)
            .and_then(|synced| synced)
            .map_err(|e| failed(ingest_io("fsyncing", &partial, e)))?;
        fs::rename(&partial, &done)
            .map_err(|e| failed(ingest_io("moving blob into place", &done, e)))?;
        let unpacked = match ahead.take() {
            Some(ahead) => ahead.finish().await,
            None => false,
        };
        let _ = fs::remove_file(&lock_path);
        plan.report(ProgressEvent::BlobDone {
            digest: digest.clone(),
            size,
            fetched: true,
            unpacked,
        });
        return Ok(downloaded);
    }
    Err(failed(last_error.unwrap_or(PullErrorKind::SizeMismatch {
        expected: size,
        actual: 0,
    })))
}

fn io_cause(e: &std::io::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = cause.source();
    }
    text
}

/// Opens (or creates) the partial file for appending, with the hash of what it holds.
fn open_partial(path: &Path) -> std::io::Result<(File, Sha256, u64)> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut have = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        have += n as u64;
    }
    Ok((file, hasher, have))
}
