//! # podlab-image: images without a registry, stored the way containerd stores them
//!
//! An OCI image is a manifest naming a config and a stack of layer tarballs, all stored as blobs
//! addressed by their sha256. containerd keeps them in a *content store*, names them in a
//! *metadata index*, and before a container can start its *snapshotter* unpacks each layer into a
//! folder of its own; the container's root filesystem is then an overlay mount of those folders
//! (read-only, top-most layer first) under a fresh writable folder. This crate is that, small:
//!
//! * the content store — `blobs/sha256/<hex>`, verified when written and when read;
//! * [`Store::import`] — oci-archive, docker-archive and OCI layout folders, all or nothing
//!   (an import is built in a staging folder before anything is moved into the store);
//! * [`layer`] — unpacking a layer tar, turning its whiteouts into overlayfs whiteouts;
//! * [`snapshot`] — one folder per layer, named by ChainID; [`Store::lowerdirs`] for the mount;
//! * [`busybox`] — a real two-layer `busybox:latest` built from the host's busybox-static.
//!
//! ```no_run
//! # fn main() -> podlab_image::Result<()> {
//! let store = podlab_image::Store::open(std::path::Path::new("/run/podlab/images"))?;
//! store.ensure_builtin_busybox()?;
//! let image = store.resolve("busybox")?;
//! let lowers = store.lowerdirs(&image); // mount overlay: lowerdir=lowers.join(":"), upper, work
//! println!("{} runs {:?} from {} layers", image.name, image.config.cmd, lowers.len());
//! # Ok(()) }
//! ```

pub mod busybox;
pub mod compression;
mod content;
pub mod credentials;
pub mod digest;
mod durable;
pub mod error;
mod fetch;
pub mod hosts;
pub mod image;
mod import;
mod index;
pub mod layer;
pub mod platform;
pub mod pull;
pub mod reference;
mod registry;
pub mod snapshot;
mod staging;
mod store;
mod unique;
mod unpack_ahead;

pub use digest::Digest;
pub use error::{Error, Result};
pub use image::{Image, ImageConfig, ImageDetails, ImageSummary, Layer};
pub use oci_spec;
pub use store::{GcReport, ImageUsage, PruneReport, Store, VerifyReport};
