//! What an image is once it is in the store: its manifest and config (OCI image-spec, parsed with
//! `oci-spec`), its layers with their DiffIDs and ChainIDs, and the part of the config a runtime
//! needs to start a process (entrypoint, cmd, env, working dir, user).

use std::collections::BTreeMap;
use std::path::PathBuf;

use oci_spec::image::{ImageConfiguration, ImageManifest};
use serde::{Deserialize, Serialize};

use crate::content::Content;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::snapshot;

/// Media types of image manifests: OCI's and Docker's schema 2 (same shape).
pub(crate) const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];
/// Media types of lists of manifests, one per platform.
pub(crate) const INDEX_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
pub(crate) const OCI_CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const CONFIG_TYPES: &[&str] = &[
    OCI_CONFIG_TYPE,
    "application/vnd.docker.container.image.v1+json",
];

/// An OCI descriptor for a blob.
pub(crate) fn descriptor(
    media_type: &str,
    size: u64,
    digest: &Digest,
) -> oci_spec::image::Descriptor {
    let digest: oci_spec::image::Digest = digest
        .to_string()
        .parse()
        .expect("a sha256 digest is valid");
    oci_spec::image::Descriptor::new(media_type.into(), size, digest)
}

/// An image resolved from the store, ready for a container: what `Store::resolve` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The normalised name it was resolved by (`docker.io/library/busybox:latest`).
    pub name: String,
    /// The manifest's digest: the image's identity (what `crictl images` calls the digest).
    pub manifest_digest: Digest,
    /// The config's digest: what docker calls the image ID.
    pub config_digest: Digest,
    pub config: ImageConfig,
    /// Bottom-most first, as in the manifest.
    pub layers: Vec<Layer>,
    pub created: Option<String>,
    pub architecture: String,
    pub os: String,
}

/// One layer: its blob, its uncompressed content id, and the snapshot folder it is unpacked in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    /// Digest of the blob as stored (compressed or not).
    pub digest: Digest,
    /// Digest of the uncompressed tar, from the config's `rootfs.diff_ids`.
    pub diff_id: Digest,
    /// The layer with all layers below it: names its snapshot, as in containerd.
    pub chain_id: Digest,
    pub media_type: String,
    /// Size of the blob in bytes.
    pub size: u64,
    /// The read-only folder holding this layer alone, an overlay lowerdir.
    pub snapshot: PathBuf,
}

/// The image config's defaults for a container's process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `NAME=value`, in image order.
    pub env: Vec<String>,
    /// Empty means `/`.
    pub working_dir: String,
    /// `user`, `uid`, `user:group` or `uid:gid`; empty means root.
    pub user: String,
    /// `80/tcp`, sorted.
    pub exposed_ports: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub stop_signal: Option<String>,
    pub volumes: Vec<String>,
}

impl ImageConfig {
    pub(crate) fn from_oci(config: &ImageConfiguration) -> Self {
        let Some(c) = config.config() else {
            return ImageConfig::default();
        };
        let list = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
        let sorted = |v: &Option<Vec<String>>| {
            let mut v = list(v);
            v.sort();
            v
        };
        ImageConfig {
            entrypoint: list(c.entrypoint()),
            cmd: list(c.cmd()),
            env: list(c.env()),
            working_dir: c.working_dir().clone().unwrap_or_default(),
            user: c.user().clone().unwrap_or_default(),
            exposed_ports: sorted(c.exposed_ports()),
            labels: c.labels().clone().unwrap_or_default().into_iter().collect(),
            stop_signal: c.stop_signal().clone(),
            volumes: sorted(c.volumes()),
        }
    }
}

/// One line of `podlab image ls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageSummary {
    pub name: String,
    /// The manifest digest.
    pub digest: Digest,
    /// The config digest (docker's image ID).
    pub id: Digest,
    /// Bytes of content: manifest, config and layer blobs.
    pub size: u64,
    pub created: Option<String>,
    pub layers: usize,
}

/// Everything `podlab image inspect` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageDetails {
    pub name: String,
    /// Every name in the store that points at the same manifest.
    pub names: Vec<String>,
    pub digest: Digest,
    pub size: u64,
    pub manifest: ImageManifest,
    pub config: ImageConfiguration,
    pub layers: Vec<Layer>,
}

/// An image's manifest and config, read and verified from content.
pub(crate) struct Loaded {
    pub manifest_digest: Digest,
    pub manifest_size: u64,
    pub manifest: ImageManifest,
    pub config_digest: Digest,
    pub config: ImageConfiguration,
    pub layers: Vec<Layer>,
}

impl Loaded {
    /// Reads the manifest `digest` and its config from `content`, checking both digests, that the
    /// manifest's layers match the config's DiffIDs in number, and the media types.
    pub fn read(
        content: Content<'_>,
        digest: &Digest,
        snapshots: &std::path::Path,
    ) -> Result<Self> {
        let bytes = content.read(digest)?;
        let blob_path = || PathBuf::from(digest.to_string());
        let manifest: ImageManifest =
            serde_json::from_slice(&bytes).map_err(|cause| Error::Json {
                what: "image manifest",
                path: blob_path(),
                cause,
            })?;
        if let Some(mt) = manifest.media_type() {
            if !MANIFEST_TYPES.contains(&mt.as_ref()) {
                return Err(Error::Unsupported(format!(
                    "manifest {digest} has media type {mt}, not an image manifest"
                )));
            }
        }
        let config_descriptor = manifest.config();
        let config_type = config_descriptor.media_type().to_string();
        if !CONFIG_TYPES.contains(&config_type.as_str()) {
            return Err(Error::Unsupported(format!(
                "manifest {digest} has a config of type {config_type}: not a container image \
                 (an artifact?)"
            )));
        }
        let config_digest = Digest::parse(config_descriptor.digest().as_ref())?;
        let config_bytes = content.read(&config_digest)?;
        let config: ImageConfiguration =
            serde_json::from_slice(&config_bytes).map_err(|cause| Error::Json {
                what: "image config",
                path: PathBuf::from(config_digest.to_string()),
                cause,
            })?;
        let diff_ids = config
            .rootfs()
            .diff_ids()
            .iter()
            .map(|d| Digest::parse(d))
            .collect::<Result<Vec<_>>>()?;
        if diff_ids.len() != manifest.layers().len() {
            return Err(Error::format(
                blob_path(),
                format!(
                    "the manifest lists {} layers but its config {config_digest} has {} DiffIDs",
                    manifest.layers().len(),
                    diff_ids.len()
                ),
            ));
        }
        let chain_ids = snapshot::chain_ids(&diff_ids);
        let mut layers = Vec::new();
        for ((descriptor, diff_id), chain_id) in
            manifest.layers().iter().zip(diff_ids).zip(chain_ids)
        {
            let media_type = descriptor.media_type().to_string();
            if media_type.contains("encrypted") || media_type.contains("foreign") {
                return Err(Error::Unsupported(format!(
                    "layer {} has media type {media_type}, which podlab cannot unpack",
                    descriptor.digest()
                )));
            }
            layers.push(Layer {
                digest: Digest::parse(descriptor.digest().as_ref())?,
                diff_id,
                snapshot: snapshot::path(snapshots, &chain_id),
                chain_id,
                media_type,
                size: descriptor.size(),
            });
        }
        Ok(Loaded {
            manifest_digest: digest.clone(),
            manifest_size: bytes.len() as u64,
            manifest,
            config_digest,
            config,
            layers,
        })
    }

    /// Bytes of content the image needs.
    pub fn size(&self) -> u64 {
        let config_size = self.manifest.config().size();
        self.manifest_size + config_size + self.layers.iter().map(|l| l.size).sum::<u64>()
    }

    pub fn image(&self, name: &str) -> Image {
        Image {
            name: name.to_owned(),
            manifest_digest: self.manifest_digest.clone(),
            config_digest: self.config_digest.clone(),
            config: ImageConfig::from_oci(&self.config),
            layers: self.layers.clone(),
            created: self.config.created().clone(),
            architecture: self.config.architecture().to_string(),
            os: self.config.os().to_string(),
        }
    }

    pub fn summary(&self, name: &str) -> ImageSummary {
        ImageSummary {
            name: name.to_owned(),
            digest: self.manifest_digest.clone(),
            id: self.config_digest.clone(),
            size: self.size(),
            created: self.config.created().clone(),
            layers: self.layers.len(),
        }
    }
}
