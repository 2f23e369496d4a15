//! Snapshots, as containerd's overlay snapshotter keeps them: every layer unpacked once into its
//! own folder `snapshots/<chain id>`, never written again, shared by every image and container
//! that has the same layers. A container's root filesystem is an overlay mount with the image's
//! snapshots as its lower folders (top-most layer first) and a fresh upper folder of its own.
//!
//! A snapshot is named by the layer's ChainID (image-spec `config.md`): the DiffID of the
//! bottom layer, then `sha256(parent chain id + " " + diff id)` upwards. Two images share a
//! snapshot only when the layer and everything beneath it are the same.
//!
//! Whether a snapshot is in use is asked of the kernel: an overlay mounted in any mount namespace
//! shows its lower folders in `/proc/PID/mountinfo` of the processes in that namespace.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::BufReader;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::compression;
use crate::content::{Content, COPY_BUFFER};
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::image::Layer;
use crate::layer;

/// ChainIDs of a stack of layers given bottom-most first.
pub fn chain_ids(diff_ids: &[Digest]) -> Vec<Digest> {
    let mut chain: Vec<Digest> = Vec::with_capacity(diff_ids.len());
    for diff_id in diff_ids {
        let next = match chain.last() {
            None => diff_id.clone(),
            Some(parent) => Digest::of(format!("{parent} {diff_id}").as_bytes()),
        };
        chain.push(next);
    }
    chain
}

/// The snapshot folder of `chain_id` under `snapshots`.
pub fn path(snapshots: &Path, chain_id: &Digest) -> PathBuf {
    snapshots.join(chain_id.hex())
}

/// Unpacks `layer` from `content` into the new folder `dest`, checking on the way the blob's
/// digest and size and the DiffID of what it uncompresses to. `lowers` are the snapshots below,
/// top-most first. `dest` must not exist; on error the caller removes what was written.
pub(crate) fn unpack(
    content: Content<'_>,
    layer: &Layer,
    dest: &Path,
    lowers: &[PathBuf],
) -> Result<()> {
    fs::create_dir(dest).map_err(|e| Error::io("creating snapshot", dest, e))?;
    fs::set_permissions(dest, fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io("chmod", dest, e))?;
    let name = format!("{} ({})", layer.digest, layer.media_type);
    let mut blob = content.open(&layer.digest)?;
    let blob_path = blob.path().to_owned();
    let unpacked = (|| {
        let buffered = BufReader::with_capacity(COPY_BUFFER, &mut blob);
        let (_, tar_stream) = compression::decompress(buffered, &name)?;
        layer::unpack(tar_stream, dest, lowers, &name)
    })();
    // A corrupt blob usually breaks the tar or the gzip stream first; its digest says why.
    let size = blob.finish()?;
    let unpacked = unpacked?;
    if size != layer.size {
        return Err(Error::SizeMismatch {
            digest: layer.digest.clone(),
            path: blob_path,
            expected: layer.size,
            actual: size,
        });
    }
    if unpacked.diff_id != layer.diff_id {
        return Err(Error::DigestMismatch {
            what: "layer DiffID (the uncompressed tar of blob)",
            path: blob_path,
            expected: layer.diff_id.clone(),
            actual: unpacked.diff_id,
        });
    }
    Ok(())
}

/// Snapshots under `snapshots` that are a lower folder of a mounted overlay, with one pid of a
/// process in that mount namespace.
pub fn in_use(snapshots: &Path) -> BTreeMap<String, i32> {
    let mut used = BTreeMap::new();
    let mut seen_namespaces = HashSet::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return used;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // Processes in one mount namespace share one table: read it once.
        let Ok(namespace) = fs::read_link(format!("/proc/{pid}/ns/mnt")) else {
            continue;
        };
        if !seen_namespaces.insert(namespace) {
            continue;
        }
        let Ok(table) = fs::read_to_string(format!("/proc/{pid}/mountinfo")) else {
            continue;
        };
        for lower in overlay_lowers(&table) {
            if let Ok(rest) = lower.strip_prefix(snapshots) {
                if let Some(id) = rest.components().next() {
                    used.entry(id.as_os_str().to_string_lossy().into_owned())
                        .or_insert(pid);
                }
            }
        }
    }
    used
}

/// The lower folders of every overlay in a mountinfo table.
pub fn overlay_lowers(mountinfo: &str) -> Vec<PathBuf> {
    podlab_ns::mnt::overlay::overlays(mountinfo)
        .into_iter()
        .flat_map(|o| o.lowerdirs)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_ids_follow_the_image_spec() {
        let a = Digest::of(b"a");
        let b = Digest::of(b"b");
        let chain = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(chain[0], a);
        assert_eq!(chain[1], Digest::of(format!("{a} {b}").as_bytes()));
    }

    #[test]
    fn overlay_lowers_are_read_from_mountinfo() {
        let table = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
90 27 0:50 / /c rw,relatime - overlay overlay rw,lowerdir=/s/a:/s/b\\040c,upperdir=/u,workdir=/w
91 27 0:51 / /d rw - overlay overlay rw,lowerdir+=/s/x,lowerdir+=/s/y,upperdir=/u2,workdir=/w2
";
        let lowers = overlay_lowers(table);
        let expected: Vec<PathBuf> = ["/s/a", "/s/b c", "/s/x", "/s/y"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(lowers, expected);
    }
}
