//! An import in progress: a folder inside the store (`tmp/stage-*`) with its own `blobs/sha256`
//! and `snapshots`, filled and checked completely before anything is moved into the store. A
//! failed import only removes its staging folder, so the store stays exactly as it was; a
//! successful one renames its new blobs and snapshots into place and then, as the very last step,
//! rewrites the name index (the commit point: content without a name is just garbage for `gc`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::content::{Blobs, Content};
use crate::durable;
use crate::error::{Error, Result};
use crate::image::Loaded;
use crate::snapshot;
use crate::unpack_ahead;

pub(crate) struct Staging {
    dir: PathBuf,
    /// `[staged, store]`: lookups see new content first, then what the store already has.
    folders: [Blobs; 2],
    snapshots: PathBuf,
    store_snapshots: PathBuf,
    /// The blob of the layer whose unpacking failed, for errors that name it.
    failed_layer: std::cell::RefCell<Option<crate::Digest>>,
    /// A pull's `ingest/`, where its layers may wait already unpacked ([`crate::unpack_ahead`]).
    unpacked_ahead: Option<PathBuf>,
}

impl Staging {
    pub fn new(tmp: &Path, store_blobs: &Blobs, store_snapshots: &Path) -> Result<Self> {
        let dir = tmp.join(format!("stage-{}", crate::unique::suffix()));
        let staging = Staging {
            folders: [Blobs::new(dir.join("blobs/sha256")), store_blobs.clone()],
            snapshots: dir.join("snapshots"),
            store_snapshots: store_snapshots.to_owned(),
            failed_layer: Default::default(),
            unpacked_ahead: None,
            dir,
        };
        // From here on, Drop cleans up whatever part of the folder was made.
        staging.folders[0].create_dir()?;
        fs::create_dir_all(&staging.snapshots)
            .map_err(|e| Error::io("creating folder", &staging.snapshots, e))?;
        Ok(staging)
    }

    /// Takes the layers that `ingest` holds unpacked already instead of unpacking their blobs.
    pub fn with_unpacked_ahead(mut self, ingest: PathBuf) -> Self {
        self.unpacked_ahead = Some(ingest);
        self
    }

    /// A scratch folder for this import (an archive's unpacked files).
    pub fn scratch(&self, name: &str) -> Result<PathBuf> {
        let path = self.dir.join(name);
        fs::create_dir_all(&path).map_err(|e| Error::io("creating folder", &path, e))?;
        Ok(path)
    }

    /// Where new blobs go.
    pub fn blobs(&self) -> &Blobs {
        &self.folders[0]
    }

    /// New and existing content together.
    pub fn content(&self) -> Content<'_> {
        Content::new(&self.folders)
    }

    /// The folder of a snapshot that exists already, in the store or staged.
    fn existing_snapshot(&self, chain_id: &crate::Digest) -> Option<PathBuf> {
        [&self.store_snapshots, &self.snapshots]
            .into_iter()
            .map(|root| snapshot::path(root, chain_id))
            .find(|p| p.is_dir())
    }

    /// Unpacks every layer of `image` that has no snapshot yet, bottom-most first, so each
    /// layer's lowers are there when it is unpacked.
    pub fn unpack_layers(&self, image: &Loaded) -> Result<()> {
        let mut lowers: Vec<PathBuf> = Vec::new(); // top-most first
        for layer in &image.layers {
            let folder = match self.existing_snapshot(&layer.chain_id) {
                Some(folder) => folder,
                None => {
                    let folder = snapshot::path(&self.snapshots, &layer.chain_id);
                    // Unpacked from this blob, verified, with the DiffID the config names.
                    let bottom = lowers.is_empty();
                    let ahead = self.unpacked_ahead.as_deref().and_then(|ingest| {
                        unpack_ahead::ready(ingest, &layer.digest, &layer.diff_id, bottom)
                    });
                    let taken = ahead.is_some_and(|ready| fs::rename(ready, &folder).is_ok());
                    if !taken {
                        snapshot::unpack(self.content(), layer, &folder, &lowers).inspect_err(
                            |_| *self.failed_layer.borrow_mut() = Some(layer.digest.clone()),
                        )?;
                    }
                    folder
                }
            };
            lowers.insert(0, folder);
        }
        Ok(())
    }

    /// The blob of the layer that [`Staging::unpack_layers`] failed on.
    pub fn failed_layer(&self) -> Option<crate::Digest> {
        self.failed_layer.borrow().clone()
    }

    /// Moves the new blobs and snapshots into the store. Blobs were fsynced as they were
    /// written; the unpacked files are flushed first ([`durable::sync_tree`]) only when
    /// [`durable::sync_unpacked_layers`] asks for it, so that a power loss never leaves a
    /// half-written file under a final name. A `kill -9` never does: the page cache has it.
    pub fn commit(self) -> Result<()> {
        let sync_layers = durable::sync_unpacked_layers();
        if sync_layers {
            durable::sync_tree(&self.dir)?;
        }
        let store_blobs = &self.folders[1];
        for digest in self.folders[0].list()? {
            if !store_blobs.contains(&digest) {
                store_blobs.adopt(&self.folders[0].path(&digest), &digest)?;
            }
        }
        let staged =
            fs::read_dir(&self.snapshots).map_err(|e| Error::io("listing", &self.snapshots, e))?;
        for entry in staged {
            let entry = entry.map_err(|e| Error::io("listing", &self.snapshots, e))?;
            let to = self.store_snapshots.join(entry.file_name());
            if !to.exists() {
                fs::rename(entry.path(), &to)
                    .map_err(|e| Error::io("moving snapshot into place", &to, e))?;
            }
        }
        durable::sync_dir(store_blobs.dir())?;
        if sync_layers {
            durable::sync_dir(&self.store_snapshots)?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}
