//! ImageService over podlab-image's store, with containerd's view of it: one CRI image per
//! config digest (its id), every name of it a repo tag, and `repository@manifest-digest` its
//! repo digests.

use std::collections::BTreeMap;
use std::path::Path;

use podlab_image::reference::Reference;
use podlab_image::Store;
use tonic::Status;

use crate::proto;
use crate::status::from_image;

/// One image as CRI sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriImage {
    /// The config digest, `sha256:…`.
    pub id: String,
    /// A store name of it, to hand to the runtime.
    pub name: String,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub size: u64,
    /// The config's USER.
    pub user: String,
}

impl CriImage {
    pub fn to_proto(&self) -> proto::Image {
        let (uid, username) = user_of(&self.user);
        proto::Image {
            id: self.id.clone(),
            repo_tags: self.repo_tags.clone(),
            repo_digests: self.repo_digests.clone(),
            size: self.size,
            uid: uid.map(|value| proto::Int64Value { value }),
            username,
            spec: Some(proto::ImageSpec {
                image: self.id.clone(),
                ..Default::default()
            }),
            pinned: false,
        }
    }
}

/// containerd's `getUserFromImage`: a numeric user is a uid, anything else a user name; a group
/// after `:` is not reported.
fn user_of(user: &str) -> (Option<i64>, String) {
    let user = user.split(':').next().unwrap_or_default();
    if user.is_empty() {
        return (None, String::new());
    }
    match user.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, user.to_string()),
    }
}

/// Every image in the store, grouped by id, sorted by id.
pub fn list(store: &Store) -> Result<Vec<CriImage>, Status> {
    let mut by_id: BTreeMap<String, CriImage> = BTreeMap::new();
    for summary in store.list().map_err(from_image)? {
        let id = summary.id.to_string();
        let image = match by_id.entry(id.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let user = store
                    .config(&summary.name)
                    .map(|c| c.user)
                    .unwrap_or_default();
                e.insert(CriImage {
                    id,
                    name: summary.name.clone(),
                    repo_tags: Vec::new(),
                    repo_digests: Vec::new(),
                    size: summary.size,
                    user,
                })
            }
        };
        let Ok(reference) = Reference::parse(&summary.name) else {
            continue;
        };
        if reference.tag.is_some() && reference.digest.is_none() {
            image.repo_tags.push(summary.name.clone());
        }
        let digest = format!("{}@{}", reference.repository(), summary.digest);
        if !image.repo_digests.contains(&digest) {
            image.repo_digests.push(digest);
        }
    }
    for image in by_id.values_mut() {
        image.repo_tags.sort();
        image.repo_digests.sort();
    }
    Ok(by_id.into_values().collect())
}

/// The image a CRI reference names: an id (`sha256:…` config digest, or its 64 hex digits), a
/// manifest digest, `name@digest` or a name; None when the store has none.
pub fn find(store: &Store, reference: &str) -> Result<Option<CriImage>, Status> {
    if reference.is_empty() {
        return Ok(None);
    }
    let images = list(store)?;
    let bare = reference.strip_prefix("sha256:").unwrap_or(reference);
    let is_digest = bare.len() == 64 && bare.bytes().all(|b| b.is_ascii_hexdigit());
    if is_digest {
        let id = format!("sha256:{bare}");
        if let Some(image) = images.iter().find(|i| i.id == id) {
            return Ok(Some(image.clone()));
        }
        let manifest = format!("@{id}");
        return Ok(images
            .into_iter()
            .find(|i| i.repo_digests.iter().any(|d| d.ends_with(&manifest))));
    }
    let Ok(parsed) = Reference::parse(reference) else {
        return Ok(None);
    };
    if parsed.digest.is_some() {
        let wanted = parsed.to_string();
        let wanted = match &parsed.tag {
            // name:tag@digest: the digest decides.
            Some(_) => format!(
                "{}@{}",
                parsed.repository(),
                parsed.digest.as_ref().unwrap()
            ),
            None => wanted,
        };
        return Ok(images
            .into_iter()
            .find(|i| i.repo_digests.contains(&wanted)));
    }
    let name = parsed.to_string();
    Ok(images.into_iter().find(|i| i.repo_tags.contains(&name)))
}

/// RemoveImage: every name of the image goes (containerd removes all its references).
pub fn remove(store: &Store, image: &CriImage) -> Result<(), Status> {
    let all = store.list().map_err(from_image)?;
    for summary in all.iter().filter(|s| s.id.to_string() == image.id) {
        match store.remove(&summary.name) {
            Ok(()) | Err(podlab_image::Error::NotFound { .. }) => {}
            Err(e) => return Err(from_image(e)),
        }
    }
    Ok(())
}

/// Bytes and inodes used below `dir` (the snapshots), as ImageFsInfo reports them.
pub fn usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    let mut inodes = 0;
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = std::collections::HashSet::new();
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        inodes += 1;
        bytes += meta.blocks() * 512;
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    (bytes, inodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_uids_or_names_as_containerd_reports_them() {
        assert_eq!(user_of(""), (None, String::new()));
        assert_eq!(user_of("1002"), (Some(1002), String::new()));
        assert_eq!(user_of("1003:1004"), (Some(1003), String::new()));
        assert_eq!(user_of("www-data"), (None, "www-data".into()));
        assert_eq!(user_of("www-data:1004"), (None, "www-data".into()));
    }
}
