//! A container's root filesystem as the kernel shows it: the overlay mount in
//! `/proc/PID/mountinfo`, with its `lowerdir` (the image layers, read-only, topmost first),
//! `upperdir` (the container's own writes) and `workdir`.
//!
//! [`super::MountInfo`] keeps the per-mount options; the overlay's layer folders are in the
//! *super block* options, the last field after the ` - ` separator, so they are read here. The
//! image store (which snapshots are in use) and the layers demo (what a container's root is
//! made of) both read them through this module.

use std::path::PathBuf;

/// The folders of one overlay mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlay {
    /// Where it is mounted, as the reading process sees it (`/` for a container's own root).
    pub mount_point: PathBuf,
    /// Topmost first, as given to the kernel.
    pub lowerdirs: Vec<PathBuf>,
    pub upperdir: Option<PathBuf>,
    pub workdir: Option<PathBuf>,
}

/// Every overlay mount in a mountinfo text.
pub fn overlays(mountinfo: &str) -> Vec<Overlay> {
    mountinfo.lines().filter_map(parse_line).collect()
}

/// The overlay mounted at `/` of a mountinfo text (a container's root), if it is one.
pub fn root_overlay(mountinfo: &str) -> Option<Overlay> {
    overlays(mountinfo)
        .into_iter()
        .find(|o| o.mount_point == std::path::Path::new("/"))
}

/// `95 71 0:41 / / rw,relatime - overlay overlay rw,lowerdir=A:B,upperdir=U,workdir=W`
fn parse_line(line: &str) -> Option<Overlay> {
    let (left, right) = line.split_once(" - ")?;
    let mount_point = left.split(' ').nth(4)?;
    let mut right = right.split(' ');
    if right.next()? != "overlay" {
        return None;
    }
    let _source = right.next()?;
    let options = right.next()?;
    let mut overlay = Overlay {
        mount_point: PathBuf::from(unescape(mount_point)),
        lowerdirs: Vec::new(),
        upperdir: None,
        workdir: None,
    };
    for option in split_unescaped(options, ',') {
        if let Some(value) = option.strip_prefix("lowerdir=") {
            overlay.lowerdirs.extend(
                split_unescaped(value, ':')
                    .iter()
                    .map(|d| PathBuf::from(unescape(d))),
            );
        } else if let Some(value) = option.strip_prefix("lowerdir+=") {
            // Newer kernels may show each layer as its own `lowerdir+=` option.
            overlay.lowerdirs.push(PathBuf::from(unescape(value)));
        } else if let Some(value) = option.strip_prefix("upperdir=") {
            overlay.upperdir = Some(PathBuf::from(unescape(value)));
        } else if let Some(value) = option.strip_prefix("workdir=") {
            overlay.workdir = Some(PathBuf::from(unescape(value)));
        }
    }
    Some(overlay)
}

/// Splits at `sep` where it is not escaped by a backslash (overlayfs prints `\,` and `\:` for
/// those characters inside paths).
fn split_unescaped(text: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in text.chars() {
        let last = parts.last_mut().expect("never empty");
        if escaped {
            last.push('\\');
            last.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else {
            last.push(c);
        }
    }
    parts
}

/// Undoes overlayfs's `\,` `\:` `\\` and mountinfo's octal `\040` (space) style escapes.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            let octal = bytes
                .get(i + 1..i + 4)
                .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
            if let Some(d) = octal {
                out.push(((d[0] - b'0') << 6) | ((d[1] - b'0') << 3) | (d[2] - b'0'));
                i += 4;
                continue;
            }
            if let Some(next) = bytes.get(i + 1) {
                out.push(*next);
                i += 2;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTR: &str = "95 71 0:41 / / rw,relatime - overlay overlay rw,lowerdir=/tmp/l/snapshots/2/fs:/tmp/l/snapshots/1/fs,upperdir=/tmp/l/snapshots/3/fs,workdir=/tmp/l/snapshots/3/work\n\
96 95 0:44 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n\
97 95 0:45 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755\n";

    #[test]
    fn root_overlay_of_a_containerd_container() {
        let o = root_overlay(CTR).expect("overlay at /");
        assert_eq!(
            o.lowerdirs,
            vec![
                PathBuf::from("/tmp/l/snapshots/2/fs"),
                PathBuf::from("/tmp/l/snapshots/1/fs")
            ]
        );
        assert_eq!(o.upperdir, Some(PathBuf::from("/tmp/l/snapshots/3/fs")));
        assert_eq!(o.workdir, Some(PathBuf::from("/tmp/l/snapshots/3/work")));
        assert_eq!(overlays(CTR).len(), 1);
    }

    #[test]
    fn escapes_and_plus_form() {
        let line = "1 0 0:1 / /merged\\040dir rw - overlay overlay rw,lowerdir+=/a\\:b,lowerdir+=/c,upperdir=/u\\,v,workdir=/w,index=off";
        let o = overlays(line).pop().unwrap();
        assert_eq!(o.mount_point, PathBuf::from("/merged dir"));
        assert_eq!(
            o.lowerdirs,
            vec![PathBuf::from("/a:b"), PathBuf::from("/c")]
        );
        assert_eq!(o.upperdir, Some(PathBuf::from("/u,v")));
    }

    #[test]
    fn not_an_overlay() {
        assert_eq!(root_overlay("22 1 8:1 / / rw - ext4 /dev/vda1 rw\n"), None);
        assert!(overlays("junk\n").is_empty());
    }
}
