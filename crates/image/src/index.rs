//! The names of the images in the store: an OCI `index.json` at the store's root, one manifest
//! descriptor per name, the name in the `io.containerd.image.name` and
//! `org.opencontainers.image.ref.name` annotations. The store's root is so itself a valid OCI
//! image layout (`umoci ls --layout ROOT` lists it). It is replaced atomically on every change.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::durable;
use crate::error::{Error, Result};

pub const CONTAINERD_NAME: &str = "io.containerd.image.name";
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// What a name points at: a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub digest: Digest,
    pub size: u64,
    pub media_type: String,
}

/// Image names (normalised, `docker.io/library/busybox:latest`) and their manifests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameIndex {
    pub names: BTreeMap<String, Target>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexFile {
    schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<DescriptorFile>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescriptorFile {
    media_type: String,
    digest: Digest,
    size: u64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl NameIndex {
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::io("reading image index", path, e))?;
        let file: IndexFile = serde_json::from_slice(&bytes).map_err(|cause| Error::Json {
            what: "image index",
            path: path.to_owned(),
            cause,
        })?;
        let names = file
            .manifests
            .into_iter()
            .filter_map(|d| {
                let name = d
                    .annotations
                    .get(CONTAINERD_NAME)
                    .or_else(|| d.annotations.get(REF_NAME))?
                    .clone();
                let target = Target {
                    digest: d.digest,
                    size: d.size,
                    media_type: d.media_type,
                };
                Some((name, target))
            })
            .collect();
        Ok(NameIndex { names })
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        durable::write_atomic(path, &self.to_bytes())
    }

    /// [`NameIndex::save`] without the folder's fsync (see [`durable::replace`]).
    pub fn save_unsynced(&self, path: &Path) -> Result<()> {
        durable::replace(path, &self.to_bytes())
    }

    /// The index as an OCI `index.json`, each name in containerd's and OCI's annotations.
    fn to_bytes(&self) -> Vec<u8> {
        let manifests = self
            .names
            .iter()
            .map(|(name, target)| DescriptorFile {
                media_type: target.media_type.clone(),
                digest: target.digest.clone(),
                size: target.size,
                annotations: [
                    (CONTAINERD_NAME.to_owned(), name.clone()),
                    (REF_NAME.to_owned(), name.clone()),
                ]
                .into(),
            })
            .collect();
        let file = IndexFile {
            schema_version: 2,
            media_type: Some(INDEX_MEDIA_TYPE.to_owned()),
            manifests,
        };
        serde_json::to_vec_pretty(&file).expect("an index always serialises")
    }

    /// All names of one manifest, sorted.
    pub fn names_of(&self, digest: &Digest) -> Vec<String> {
        self.names
            .iter()
            .filter(|(_, t)| &t.digest == digest)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_index_loads_back_and_is_an_oci_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.json");
        let mut index = NameIndex::default();
        index.names.insert(
            "docker.io/library/busybox:latest".into(),
            Target {
                digest: Digest::of(b"manifest"),
                size: 8,
                media_type: MANIFEST_MEDIA_TYPE.into(),
            },
        );
        index.save(&path).unwrap();
        assert_eq!(NameIndex::load(&path).unwrap(), index);
        let parsed = oci_spec::image::ImageIndex::from_file(&path).unwrap();
        assert_eq!(parsed.manifests().len(), 1);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left beside the index");
    }
}
