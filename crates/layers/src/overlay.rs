//! A container's root filesystem as the kernel shows it: the overlay mounts of a mountinfo
//! table, read by podlab-ns (`podlab_ns::mnt::overlay`).

pub use podlab_ns::mnt::overlay::{overlays, root_overlay, Overlay};
