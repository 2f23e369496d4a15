//! Where containers' images come from: CRI's ImageService, as far as the runtime needs it. The
//! default is podlab-image's store; anything that can name a stack of layer folders will do.

use std::path::{Path, PathBuf};

use crate::process::ImageProcess;
use crate::{Error, Result};

/// An image ready for a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// The name as the store knows it.
    pub name: String,
    /// The image id (config digest).
    pub id: String,
    /// Layer folders, the top-most first (overlayfs's `lowerdir=` order).
    pub lowerdirs: Vec<PathBuf>,
    pub process: ImageProcess,
}

pub trait ImageService: Send + Sync {
    /// The image `name`; [`Error::ImageNotFound`] when there is none.
    fn resolve(&self, name: &str) -> Result<ResolvedImage>;
}

/// podlab-image's content store and snapshots.
#[derive(Debug)]
pub struct StoreImages {
    store: podlab_image::Store,
}

impl StoreImages {
    pub fn open(root: &Path) -> Result<StoreImages> {
        let store = podlab_image::Store::open(root).map_err(|e| Error::Image {
            name: String::new(),
            message: format!("opening the image store {}: {e}", root.display()),
        })?;
        Ok(StoreImages { store })
    }

    /// A store the caller has opened already (and may have used, to build an image first).
    pub fn new(store: podlab_image::Store) -> StoreImages {
        StoreImages { store }
    }

    pub fn store(&self) -> &podlab_image::Store {
        &self.store
    }
}

impl ImageService for StoreImages {
    fn resolve(&self, name: &str) -> Result<ResolvedImage> {
        let image = self.store.resolve(name).map_err(|e| match e {
            podlab_image::Error::NotFound { .. } => Error::ImageNotFound {
                name: name.to_string(),
                message: e.to_string(),
            },
            other => Error::Image {
                name: name.to_string(),
                message: other.to_string(),
            },
        })?;
        let lowerdirs = self.store.lowerdirs(&image);
        let config = &image.config;
        Ok(ResolvedImage {
            name: image.name.clone(),
            id: image.config_digest.to_string(),
            lowerdirs,
            process: ImageProcess {
                entrypoint: config.entrypoint.clone(),
                cmd: config.cmd.clone(),
                env: config.env.clone(),
                working_dir: config.working_dir.clone(),
                user: config.user.clone(),
            },
        })
    }
}

/// The first of `lowerdirs` (top-most first) that has `relative`, read as text: the image's
/// `/etc/passwd` or `/etc/group` for resolving user names. A whiteout (a 0/0 character device)
/// hides the file of the layers below.
pub fn read_from_layers(lowerdirs: &[PathBuf], relative: &str) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    for dir in lowerdirs {
        let path = dir.join(relative);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_char_device() => return None,
            Ok(meta) if meta.is_file() => return std::fs::read_to_string(&path).ok(),
            _ => continue,
        }
    }
    None
}
