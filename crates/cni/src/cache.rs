//! The result cache: what an ADD returned, kept per attachment for the DEL and CHECK after it.
//!
//! libcni keeps it under `/var/lib/cni/results/<network>-<containerID>-<ifname>`; podlab keeps the
//! same record in a folder the caller names (the sandbox folder), so that it goes with the pod.
//! Besides the result it holds the configuration the ADD ran with, so that DEL releases exactly
//! what that configuration allocated even if the conflist was edited since. Writes are atomic
//! (temporary file, then rename): a process killed at any point leaves the old record or the
//! new one. They are not fsynced: a record describes kernel objects (a veth, a netns) that do
//! not survive a power loss either, and an fsync costs milliseconds on a disk-backed root.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Error, Result};

/// One cached attachment, libcni's `cniCacheV1` record (with the config as JSON, not base64).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedAttachment {
    pub kind: String,
    #[serde(rename = "containerId")]
    pub container_id: String,
    #[serde(rename = "ifName")]
    pub ifname: String,
    #[serde(rename = "networkName")]
    pub network_name: String,
    /// The netns the ADD ran on.
    pub netns: String,
    #[serde(rename = "cniArgs")]
    pub cni_args: String,
    /// The capability arguments the ADD offered (`portMappings`), for a DEL whose caller no
    /// longer has them (libcni's `capabilityArgs`).
    #[serde(
        rename = "capabilityArgs",
        default,
        skip_serializing_if = "serde_json::Map::is_empty"
    )]
    pub capability_args: serde_json::Map<String, Value>,
    /// The conflist as the ADD read it.
    pub config: Value,
    /// The final ADD result, exactly as the last plugin printed it.
    pub result: Value,
}

impl CachedAttachment {
    pub const KIND: &'static str = "cniCacheV1";
}

/// The cache file of (network, container, interface) in `dir`.
pub fn cache_path(dir: &Path, network: &str, container_id: &str, ifname: &str) -> PathBuf {
    dir.join(format!("{network}-{container_id}-{ifname}"))
}

/// Stores `record` at `path` atomically.
pub fn store(path: &Path, record: &CachedAttachment) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(record).expect("a cache record serializes");
    write_atomically(
        path,
        &bytes,
        "writing the CNI result cache",
        Durability::ProcessCrash,
    )
}

/// The record at `path`; `None` when there is none.
pub fn load(path: &Path) -> Result<Option<CachedAttachment>> {
    let bytes = match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading the CNI result cache", path, e)),
        Ok(bytes) => bytes,
    };
    let record: CachedAttachment = serde_json::from_slice(&bytes).map_err(|e| {
        Error::io(
            "reading the CNI result cache",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    Ok(Some(record))
}

/// Removes the record at `path`; already gone is fine.
pub fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("removing the CNI result cache", path, e))
        }
        _ => Ok(()),
    }
}

/// What a write must survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// The writer being killed: a rename is enough (the page cache outlives the process).
    ProcessCrash,
    /// A power loss too: fsync before the rename (for configuration, which outlives boots).
    PowerLoss,
}

/// Writes `bytes` to `path` through a temporary file in the same folder, then renames it.
pub(crate) fn write_atomically(
    path: &Path,
    bytes: &[u8],
    what: &'static str,
    durability: Durability,
) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io(what, dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::File::create(&temporary).and_then(|mut file| {
        file.write_all(bytes)?;
        if durability == Durability::PowerLoss {
            file.sync_all()?;
        }
        Ok(())
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&temporary, path)) {
        let _ = std::fs::remove_file(&temporary);
        return Err(Error::io(what, path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_removal_is_idempotent() {
        let dir = std::env::temp_dir().join(format!("podlab-cni-cache-{}", std::process::id()));
        let path = cache_path(&dir, "podlab", "abc", "eth0");
        assert!(path.ends_with("podlab-abc-eth0"));
        let record = CachedAttachment {
            kind: CachedAttachment::KIND.to_owned(),
            container_id: "abc".to_owned(),
            ifname: "eth0".to_owned(),
            network_name: "podlab".to_owned(),
            netns: "/run/netns/x".to_owned(),
            cni_args: "IgnoreUnknown=1".to_owned(),
            capability_args: Default::default(),
            config: serde_json::json!({"name": "podlab"}),
            result: serde_json::json!({"cniVersion": "1.0.0"}),
        };
        assert_eq!(load(&path).unwrap(), None);
        store(&path, &record).unwrap();
        let back = load(&path).unwrap();
        remove(&path).unwrap();
        remove(&path).unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back, Some(record));
        assert!(left.is_empty(), "no temporary file stays: {left:?}");
    }
}
