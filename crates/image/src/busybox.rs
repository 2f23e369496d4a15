//! The built-in `busybox` image, made on this machine from the host's static busybox, so that pods
//! run without a registry. It is a real two-layer OCI image, built the same way every time (fixed
//! times, sorted entries, no compression), so its digests depend only on the busybox binary:
//!
//! 1. base: `bin/busybox`, a symlink per applet (`busybox --list-full`), the usual empty folders,
//!    `etc/passwd` and `etc/group` with root and nobody, and `etc/issue`;
//! 2. top: `etc/os-release`, a marker file `etc/podlab-layer`, and a whiteout of `etc/issue`, so
//!    that the merged root shows both layers and a deletion across them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use oci_spec::image::{ImageManifestBuilder, MediaType};
use serde::Serialize;

use crate::compression::Compression;
use crate::content::BlobWriter;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::image::{descriptor, OCI_CONFIG_TYPE};
use crate::import::host_architecture;
use crate::staging::Staging;

/// Where Debian's busybox-static puts the binary.
pub const HOST_BUSYBOX: &str = "/bin/busybox";
/// The built-in image's name.
pub const NAME: &str = "docker.io/library/busybox:latest";
/// The time of every entry and of the config: 2000-01-01T00:00:00Z.
const EPOCH: u64 = 946_684_800;
const CREATED: &str = "2000-01-01T00:00:00Z";
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The file of the base layer that the top layer deletes.
pub const WHITED_OUT: &str = "etc/issue";
/// The file only the top layer has.
pub const MARKER: &str = "etc/podlab-layer";

const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const GROUP: &str = "root:x:0:\nnobody:x:65534:\n";
const OS_RELEASE: &str = "NAME=\"podlab busybox\"\nID=podlab-busybox\nPRETTY_NAME=\"podlab busybox (built from the host's busybox-static)\"\n";

enum Entry {
    Folder(u32),
    File(u32, Contents),
    Symlink(&'static str),
}

enum Contents {
    Text(&'static str),
    Host(PathBuf),
}

/// Builds the image's blobs into `staging`; returns the manifest digest.
pub(crate) fn build(staging: &Staging, busybox: &Path) -> Result<Digest> {
    check_static(busybox)?;
    let applets = applets(busybox)?;

    let mut base = BTreeMap::new();
    for (folder, mode) in [
        ("bin", 0o755),
        ("dev", 0o755),
        ("etc", 0o755),
        ("home", 0o755),
        ("proc", 0o555),
        ("root", 0o700),
        ("sbin", 0o755),
        ("sys", 0o555),
        ("tmp", 0o1777),
        ("usr", 0o755),
        ("usr/bin", 0o755),
        ("usr/sbin", 0o755),
        ("var", 0o755),
    ] {
        base.insert(folder.to_owned(), Entry::Folder(mode));
    }
    for applet in &applets {
        for parent in Path::new(applet).ancestors().skip(1) {
            let parent = parent.to_string_lossy();
            if !parent.is_empty() {
                base.entry(parent.into_owned())
                    .or_insert(Entry::Folder(0o755));
            }
        }
        base.insert(applet.clone(), Entry::Symlink("/bin/busybox"));
    }
    base.insert(
        "bin/busybox".into(),
        Entry::File(0o755, Contents::Host(busybox.to_owned())),
    );
    base.insert(
        "etc/passwd".into(),
        Entry::File(0o644, Contents::Text(PASSWD)),
    );
    base.insert(
        "etc/group".into(),
        Entry::File(0o644, Contents::Text(GROUP)),
    );
    base.insert(
        WHITED_OUT.into(),
        Entry::File(
            0o644,
            Contents::Text("podlab busybox: this file is deleted by the top layer\n"),
        ),
    );

    let mut top = BTreeMap::new();
    top.insert("etc".to_owned(), Entry::Folder(0o755));
    top.insert(
        "etc/os-release".into(),
        Entry::File(0o644, Contents::Text(OS_RELEASE)),
    );
    top.insert(
        MARKER.into(),
        Entry::File(
            0o644,
            Contents::Text("this file comes from layer 2 of 2 of the built-in busybox image\n"),
        ),
    );
    let whiteout = format!("etc/{}issue", crate::layer::WHITEOUT_PREFIX);
    top.insert(whiteout, Entry::File(0o644, Contents::Text("")));

    let layers = [
        (
            write_layer(staging, &base)?,
            "podlab: busybox base layer (bin/busybox and applet symlinks)",
        ),
        (
            write_layer(staging, &top)?,
            "podlab: top layer (os-release, a marker, a whiteout of etc/issue)",
        ),
    ];

    let config = ConfigFile {
        created: CREATED,
        architecture: host_architecture(),
        os: "linux",
        config: RunConfig {
            env: vec![PATH_ENV.into()],
            cmd: vec!["sh".into()],
            working_dir: "/".into(),
            labels: [("io.podlab.image".to_owned(), "builtin-busybox".to_owned())].into(),
        },
        rootfs: RootFs {
            kind: "layers",
            // Uncompressed layers: the DiffID is the blob's digest.
            diff_ids: layers.iter().map(|((d, _), _)| d.clone()).collect(),
        },
        history: layers
            .iter()
            .map(|(_, created_by)| History {
                created: CREATED,
                created_by,
            })
            .collect(),
    };
    let config_bytes = serde_json::to_vec(&config).expect("a config always serialises");
    let config_digest = staging.blobs().write_bytes(&config_bytes)?;
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(
            OCI_CONFIG_TYPE,
            config_bytes.len() as u64,
            &config_digest,
        ))
        .layers(
            layers
                .iter()
                .map(|((d, size), _)| descriptor(Compression::None.layer_media_type(), *size, d))
                .collect::<Vec<_>>(),
        )
        .build()
        .map_err(|e| Error::Unsupported(format!("building the busybox manifest: {e}")))?;
    let bytes = serde_json::to_vec(&manifest).expect("a manifest always serialises");
    staging.blobs().write_bytes(&bytes)
}

#[derive(Serialize)]
struct ConfigFile<'a> {
    created: &'a str,
    architecture: &'a str,
    os: &'a str,
    config: RunConfig,
    rootfs: RootFs,
    history: Vec<History<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct RunConfig {
    env: Vec<String>,
    cmd: Vec<String>,
    working_dir: String,
    labels: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct RootFs {
    #[serde(rename = "type")]
    kind: &'static str,
    diff_ids: Vec<Digest>,
}

#[derive(Serialize)]
struct History<'a> {
    created: &'a str,
    created_by: &'a str,
}

/// Writes one layer as an uncompressed tar blob, entries in path order; (digest, size).
fn write_layer(staging: &Staging, entries: &BTreeMap<String, Entry>) -> Result<(Digest, u64)> {
    let writer = staging.blobs().create()?;
    let mut tar = tar::Builder::new(writer);
    for (path, entry) in entries {
        append(&mut tar, path, entry)
            .map_err(|e| Error::io("writing busybox layer entry", path, e))?;
    }
    let writer = tar
        .into_inner()
        .map_err(|e| Error::io("finishing busybox layer", staging.blobs().dir(), e))?;
    writer.commit(None, staging.blobs().dir())
}

fn append(tar: &mut tar::Builder<BlobWriter>, path: &str, entry: &Entry) -> io::Result<()> {
    let mut header = tar::Header::new_ustar();
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(EPOCH);
    header.set_username("root")?;
    header.set_groupname("root")?;
    match entry {
        Entry::Folder(mode) => {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(*mode);
            header.set_size(0);
            tar.append_data(&mut header, format!("{path}/"), io::empty())
        }
        Entry::File(mode, contents) => {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(*mode);
            match contents {
                Contents::Text(text) => {
                    header.set_size(text.len() as u64);
                    tar.append_data(&mut header, path, text.as_bytes())
                }
                Contents::Host(host) => {
                    let file = File::open(host)?;
                    header.set_size(file.metadata()?.len());
                    tar.append_data(&mut header, path, file)
                }
            }
        }
        Entry::Symlink(target) => {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            tar.append_link(&mut header, path, target)
        }
    }
}

/// The applet paths busybox installs itself as (`bin/sh`, `usr/bin/awk`, ...), sorted.
fn applets(busybox: &Path) -> Result<Vec<String>> {
    let failed = |problem: String| Error::BusyboxMissing {
        path: busybox.to_owned(),
        problem,
    };
    let output = Command::new(busybox)
        .arg("--list-full")
        .output()
        .map_err(|e| failed(format!("cannot run it: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!(
            "`busybox --list-full` failed: {}",
            output.status
        )));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let mut applets: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && *line != "bin/busybox")
        .filter(|line| {
            Path::new(line)
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
        })
        .map(str::to_owned)
        .collect();
    applets.sort();
    applets.dedup();
    if applets.is_empty() {
        return Err(failed("`busybox --list-full` listed no applets".into()));
    }
    Ok(applets)
}

/// Refuses a missing or dynamically linked busybox: the container has no libc for it.
fn check_static(busybox: &Path) -> Result<()> {
    let failed = |problem: String| Error::BusyboxMissing {
        path: busybox.to_owned(),
        problem,
    };
    let mut bytes = Vec::new();
    File::open(busybox)
        .and_then(|f| f.take(1 << 16).read_to_end(&mut bytes))
        .map_err(|e| failed(format!("cannot read it: {e}")))?;
    match elf_interpreter(&bytes) {
        None => Err(failed("not an ELF executable".into())),
        Some(true) => Err(failed(
            "it is dynamically linked (the `busybox` package, not `busybox-static`), \
             so it cannot run in an image without a libc"
                .into(),
        )),
        Some(false) => Ok(()),
    }
}

/// Whether a little-endian ELF file asks for a program interpreter (is dynamically linked);
/// None if it is not one, or its program headers lie past the bytes given.
fn elf_interpreter(bytes: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if !bytes.starts_with(b"\x7fELF") || bytes.get(5) != Some(&1) {
        return None;
    }
    let u16_at =
        |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?) as usize);
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at =
        |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?) as usize);
    let (phoff, phentsize, phnum) = match bytes.get(4)? {
        1 => (u32_at(0x1c)? as usize, u16_at(0x2a)?, u16_at(0x2c)?),
        2 => (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?),
        _ => return None,
    };
    let mut interpreter = false;
    for i in 0..phnum {
        interpreter |= u32_at(phoff + i * phentsize)? == PT_INTERP;
    }
    Some(interpreter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_busybox_is_static_and_a_shell_is_dynamic() {
        let read = |p: &str| std::fs::read(p).ok();
        if let Some(busybox) = read(HOST_BUSYBOX) {
            assert_eq!(
                elf_interpreter(&busybox),
                Some(false),
                "busybox-static has no interpreter"
            );
        }
        let ls = read("/bin/ls").expect("/bin/ls exists");
        assert_eq!(
            elf_interpreter(&ls),
            Some(true),
            "/bin/ls is dynamically linked"
        );
        assert_eq!(elf_interpreter(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn a_missing_busybox_says_what_to_install() {
        let err = check_static(Path::new("/nonexistent/busybox")).unwrap_err();
        assert!(
            err.to_string().contains("apt-get install busybox-static"),
            "{err}"
        );
    }
}
