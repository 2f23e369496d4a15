//! Reading images out of the files other tools write, into an import's staging folder:
//!
//! * an **OCI image layout** folder (`umoci init`, `skopeo copy ... oci:DIR:TAG`): `oci-layout`,
//!   `index.json`, `blobs/sha256/*`;
//! * an **oci-archive** (`podman save --format oci-archive`, `skopeo copy ... oci-archive:F`): the
//!   same layout as one tar;
//! * a **docker-archive** (`docker save`, `skopeo copy ... docker-archive:F`): a tar with
//!   `manifest.json` (config file, `RepoTags`, layer tar files) and no OCI manifest, for which
//!   an OCI manifest is written, as containerd does on `ctr images import`.
//!
//! The format is told by what the folder or tar holds; a tar may itself be gzip- or
//! zstd-compressed (`docker save | gzip`). An archive is read once, from start to end: each file
//! in it is hashed while it is copied to the staging folder, and a blob then only needs a rename.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read};
use std::path::{Component, Path, PathBuf};

use oci_spec::image::{Descriptor, ImageIndex, ImageManifest, ImageManifestBuilder, MediaType};
use serde::Deserialize;

use crate::compression::{self, Compression};
use crate::content::COPY_BUFFER;
use crate::digest::{Digest, HashingWriter};
use crate::error::{Error, Result};
use crate::image::{descriptor, INDEX_TYPES, MANIFEST_TYPES, OCI_CONFIG_TYPE};
use crate::index::{CONTAINERD_NAME, REF_NAME};
use crate::reference;
use crate::staging::Staging;

/// An image found in the source, its blobs staged.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub manifest: Digest,
    /// Full names the source gives it, normalised.
    pub names: Vec<String>,
    /// Bare tags (`org.opencontainers.image.ref.name` = `t`), which name no repository.
    pub tags: Vec<String>,
}

/// Stages every image in `path`: an OCI layout (folder or archive) if it has an `oci-layout`
/// file, else a docker-archive if it has a `manifest.json`.
pub(crate) fn read(path: &Path, staging: &Staging) -> Result<Vec<Found>> {
    let meta = fs::metadata(path).map_err(|e| Error::io("reading import source", path, e))?;
    let source = if meta.is_dir() {
        Source::Folder(path.to_owned())
    } else {
        Source::extract(path, &staging.scratch("archive")?)?
    };
    if source.exists("oci-layout") {
        read_oci(&source, staging)
    } else if source.exists("manifest.json") {
        read_docker(&source, staging)
    } else {
        Err(Error::format(
            path,
            "neither an OCI image layout (no oci-layout file) nor a docker-archive (no manifest.json)",
        ))
    }
}

/// A file of an archive, copied out and hashed.
struct Extracted {
    file: PathBuf,
    digest: Digest,
    size: u64,
}

enum Source {
    Folder(PathBuf),
    Archive {
        path: PathBuf,
        files: HashMap<String, Extracted>,
        /// Symlinks and hardlinks (docker-archive links repeated layers), resolved to archive paths.
        links: HashMap<String, String>,
    },
}

/// What `podlab image import` reads, in words for the error that says a file is none of it.
const EXPECTED_SOURCE: &str = "expected an oci-archive or docker-archive (a tar file, plain or \
     gzip- or zstd-compressed, as podman save, docker save and skopeo copy write them) or an OCI \
     image layout folder";

/// `stream` (a decompressed file) if it starts with a tar header whose checksum holds, or with
/// the zero block of an empty tar; else the error that says the file is not an image archive.
fn tar_stream<'a>(path: &Path, mut stream: Box<dyn Read + 'a>) -> Result<impl Read + 'a> {
    let block = crate::compression::read_head(&mut stream, 512)
        .map_err(|e| Error::io("reading", path, e))?;
    let is_tar = block.len() == 512 && {
        let header = tar::Header::from_byte_slice(&block);
        let mut recomputed = header.clone();
        recomputed.set_cksum();
        block.iter().all(|b| *b == 0) || header.cksum().ok() == recomputed.cksum().ok()
    };
    if !is_tar {
        return Err(Error::format(
            path,
            format!("not an image archive: {EXPECTED_SOURCE}"),
        ));
    }
    Ok(io::Cursor::new(block).chain(stream))
}

impl Source {
    /// Copies every file of the tar at `path` into `scratch`, hashing it on the way.
    fn extract(path: &Path, scratch: &Path) -> Result<Source> {
        let file = File::open(path).map_err(|e| Error::io("opening", path, e))?;
        let what = path.display().to_string();
        let (_, stream) =
            compression::decompress(BufReader::with_capacity(COPY_BUFFER, file), &what)?;
        let stream = tar_stream(path, stream)?;
        // tar's own words quote the header fields they could not read: of a file that is not
        // quite a tar, that is its content, which has no place in an error message.
        let corrupt = |e: io::Error| {
            let said: String = e.to_string().chars().take(60).collect();
            Error::format(
                path,
                format!(
                    "not a readable tar archive (corrupt or truncated?): {}",
                    said.escape_debug()
                ),
            )
        };
        let mut archive = tar::Archive::new(stream);
        let mut files = HashMap::new();
        let mut links = HashMap::new();
        for (n, entry) in archive.entries().map_err(corrupt)?.enumerate() {
            let mut entry = entry.map_err(corrupt)?;
            let name = clean(&entry.path().map_err(corrupt)?)
                .ok_or_else(|| Error::format(path, "an entry's path leaves the archive"))?;
            match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let dest = scratch.join(n.to_string());
                    let out = File::create(&dest).map_err(|e| Error::io("creating", &dest, e))?;
                    let mut writer = HashingWriter::new(BufWriter::with_capacity(COPY_BUFFER, out));
                    io::copy(&mut entry, &mut writer).map_err(corrupt)?;
                    let (buffered, digest, size) = writer.finish();
                    buffered
                        .into_inner()
                        .map_err(|e| Error::io("writing", &dest, e.into_error()))?;
                    files.insert(
                        name,
                        Extracted {
                            file: dest,
                            digest,
                            size,
                        },
                    );
                }
                kind @ (tar::EntryType::Symlink | tar::EntryType::Link) => {
                    let target = entry
                        .link_name()
                        .map_err(corrupt)?
                        .ok_or_else(|| Error::format(path, format!("link {name} has no target")))?;
                    let target = if kind == tar::EntryType::Symlink {
                        Path::new(&name)
                            .parent()
                            .unwrap_or(Path::new(""))
                            .join(target)
                    } else {
                        target.into_owned()
                    };
                    let target = clean(&target).ok_or_else(|| {
                        Error::format(path, format!("link {name} leaves the archive"))
                    })?;
                    links.insert(name, target);
                }
                _ => {}
            }
        }
        Ok(Source::Archive {
            path: path.to_owned(),
            files,
            links,
        })
    }

    fn find(&self, rel: &str) -> Option<&Extracted> {
        let Source::Archive { files, links, .. } = self else {
            return None;
        };
        let mut name = rel;
        for _ in 0..32 {
            if let Some(found) = files.get(name) {
                return Some(found);
            }
            name = links.get(name)?;
        }
        None
    }

    fn exists(&self, rel: &str) -> bool {
        match self {
            Source::Folder(dir) => dir.join(rel).is_file(),
            Source::Archive { .. } => self.find(rel).is_some(),
        }
    }

    /// Where `rel` is, for messages.
    fn origin(&self, rel: &str) -> PathBuf {
        match self {
            Source::Folder(dir) => dir.join(rel),
            Source::Archive { path, .. } => PathBuf::from(format!("{}:{rel}", path.display())),
        }
    }

    fn missing(&self, rel: &str) -> Error {
        Error::format(self.origin(rel), "referenced, but not in the image source")
    }

    /// A small document (JSON), checked against `expected` when given.
    fn read(&self, rel: &str, expected: Option<&Digest>) -> Result<Vec<u8>> {
        let rel = clean(Path::new(rel)).ok_or_else(|| self.missing(rel))?;
        let (bytes, actual) = match self {
            Source::Folder(dir) => {
                let path = dir.join(&rel);
                let bytes = match fs::read(&path) {
                    Ok(bytes) => bytes,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(self.missing(&rel)),
                    Err(e) => return Err(Error::io("reading", path, e)),
                };
                let digest = Digest::of(&bytes);
                (bytes, digest)
            }
            Source::Archive { .. } => {
                let found = self.find(&rel).ok_or_else(|| self.missing(&rel))?;
                let bytes =
                    fs::read(&found.file).map_err(|e| Error::io("reading", &found.file, e))?;
                (bytes, found.digest.clone())
            }
        };
        self.check(
            &rel,
            expected.map(|d| (d, None)),
            &actual,
            bytes.len() as u64,
        )?;
        Ok(bytes)
    }

    fn check(
        &self,
        rel: &str,
        expected: Option<(&Digest, Option<u64>)>,
        actual: &Digest,
        size: u64,
    ) -> Result<()> {
        let Some((want, want_size)) = expected else {
            return Ok(());
        };
        if want != actual {
            return Err(Error::DigestMismatch {
                what: "blob",
                path: self.origin(rel),
                expected: want.clone(),
                actual: actual.clone(),
            });
        }
        match want_size {
            Some(want_size) if want_size != size => Err(Error::SizeMismatch {
                digest: actual.clone(),
                path: self.origin(rel),
                expected: want_size,
                actual: size,
            }),
            _ => Ok(()),
        }
    }

    /// Puts the file `rel` into the staging content store; checks digest and size if expected.
    fn ingest(
        &self,
        rel: &str,
        expected: Option<(&Digest, Option<u64>)>,
        staging: &Staging,
    ) -> Result<(Digest, u64)> {
        let rel = clean(Path::new(rel)).ok_or_else(|| self.missing(rel))?;
        match self {
            Source::Archive { .. } => {
                let found = self.find(&rel).ok_or_else(|| self.missing(&rel))?;
                self.check(&rel, expected, &found.digest, found.size)?;
                if !staging.content().contains(&found.digest) {
                    staging.blobs().adopt(&found.file, &found.digest)?;
                }
                Ok((found.digest.clone(), found.size))
            }
            Source::Folder(dir) => {
                if let Some((digest, Some(size))) = expected {
                    // Content-addressed: a blob the store has is the same blob; no need to read it.
                    if staging.content().contains(digest) {
                        return Ok((digest.clone(), size));
                    }
                }
                let path = dir.join(&rel);
                let file = match File::open(&path) {
                    Ok(file) => file,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(self.missing(&rel)),
                    Err(e) => return Err(Error::io("opening", path, e)),
                };
                staging.blobs().write(file, expected, &path)
            }
        }
    }
}

/// A path inside an archive or layout as a relative `a/b` string; None if it would leave it.
fn clean(path: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

fn blob_rel(digest: &Digest) -> String {
    format!("blobs/sha256/{}", digest.hex())
}

fn parse<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
    origin: PathBuf,
) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|cause| Error::Json {
        what,
        path: origin,
        cause,
    })
}

fn oci_digest(descriptor: &Descriptor) -> Result<Digest> {
    Digest::parse(descriptor.digest().as_ref())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LayoutFile {
    image_layout_version: String,
}

fn read_oci(source: &Source, staging: &Staging) -> Result<Vec<Found>> {
    let layout: LayoutFile = parse(
        &source.read("oci-layout", None)?,
        "oci-layout",
        source.origin("oci-layout"),
    )?;
    if !layout.image_layout_version.starts_with("1.") {
        return Err(Error::Unsupported(format!(
            "{}: image layout version {} (podlab reads 1.x)",
            source.origin("oci-layout").display(),
            layout.image_layout_version
        )));
    }
    let index: ImageIndex = parse(
        &source.read("index.json", None)?,
        "image index",
        source.origin("index.json"),
    )?;
    let mut found = Vec::new();
    for descriptor in index.manifests() {
        let (names, tags) = names_of(descriptor)?;
        let manifest = pick_manifest(source, descriptor.clone(), 0)?;
        let digest = stage_image(source, staging, &manifest)?;
        found.push(Found {
            manifest: digest,
            names,
            tags,
        });
    }
    if found.is_empty() {
        return Err(Error::format(
            source.origin("index.json"),
            "the index lists no images",
        ));
    }
    Ok(found)
}

/// The names an index descriptor carries, containerd's annotation first.
fn names_of(descriptor: &Descriptor) -> Result<(Vec<String>, Vec<String>)> {
    let mut names = Vec::new();
    let mut tags = Vec::new();
    let Some(annotations) = descriptor.annotations() else {
        return Ok((names, tags));
    };
    if let Some(name) = annotations.get(CONTAINERD_NAME) {
        names.push(reference::normalize(name)?);
    }
    if let Some(reference) = annotations.get(REF_NAME) {
        // A bare tag has neither; a full reference has a '/' or ':'.
        if reference.contains('/') || reference.contains(':') {
            let name = reference::normalize(reference)?;
            if !names.contains(&name) {
                names.push(name);
            }
        } else {
            tags.push(reference.clone());
        }
    }
    Ok((names, tags))
}

/// Follows image indexes (multi-platform images) down to this machine's image manifest.
fn pick_manifest(source: &Source, descriptor: Descriptor, depth: usize) -> Result<Descriptor> {
    let media_type = descriptor.media_type().to_string();
    if MANIFEST_TYPES.contains(&media_type.as_str()) {
        return Ok(descriptor);
    }
    let digest = oci_digest(&descriptor)?;
    if !INDEX_TYPES.contains(&media_type.as_str()) || depth > 4 {
        return Err(Error::Unsupported(format!(
            "{digest} has media type {media_type}: neither an image manifest nor an image index"
        )));
    }
    let rel = blob_rel(&digest);
    let index: ImageIndex = parse(
        &source.read(&rel, Some(&digest))?,
        "image index",
        source.origin(&rel),
    )?;
    let arch = host_architecture();
    let mut platforms = Vec::new();
    for candidate in index.manifests() {
        match candidate.platform() {
            Some(p) => {
                let (os, architecture) = (p.os().to_string(), p.architecture().to_string());
                if os == "linux" && architecture == arch {
                    return pick_manifest(source, candidate.clone(), depth + 1);
                }
                platforms.push(format!("{os}/{architecture}"));
            }
            None if index.manifests().len() == 1 => {
                return pick_manifest(source, candidate.clone(), depth + 1)
            }
            None => platforms.push("unknown".into()),
        }
    }
    Err(Error::Unsupported(format!(
        "image index {digest} has no linux/{arch} image (it has: {})",
        platforms.join(", ")
    )))
}

/// The GOARCH name of this machine, as image platforms are written.
pub(crate) fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// Stages a manifest, its config and its layers; returns the manifest digest.
fn stage_image(source: &Source, staging: &Staging, descriptor: &Descriptor) -> Result<Digest> {
    let digest = oci_digest(descriptor)?;
    source.ingest(
        &blob_rel(&digest),
        Some((&digest, Some(descriptor.size()))),
        staging,
    )?;
    let manifest: ImageManifest = parse(
        &staging.content().read(&digest)?,
        "image manifest",
        source.origin(&blob_rel(&digest)),
    )?;
    let children = std::iter::once(manifest.config()).chain(manifest.layers());
    for child in children {
        let child_digest = oci_digest(child)?;
        source.ingest(
            &blob_rel(&child_digest),
            Some((&child_digest, Some(child.size()))),
            staging,
        )?;
    }
    Ok(digest)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

fn read_docker(source: &Source, staging: &Staging) -> Result<Vec<Found>> {
    let entries: Vec<DockerEntry> = parse(
        &source.read("manifest.json", None)?,
        "docker-archive manifest",
        source.origin("manifest.json"),
    )?;
    let mut found = Vec::new();
    for entry in &entries {
        // docker names the config by its digest (`<hex>.json`, or `blobs/sha256/<hex>` since 25).
        let named = digest_in_name(&entry.config, true);
        let (config_digest, config_size) =
            source.ingest(&entry.config, named.as_ref().map(|d| (d, None)), staging)?;
        let mut layers = Vec::new();
        for layer in &entry.layers {
            let named = digest_in_name(layer, false);
            let (digest, size) =
                source.ingest(layer, named.as_ref().map(|d| (d, None)), staging)?;
            let compression = sniff(staging, &digest)?;
            layers.push(descriptor(compression.layer_media_type(), size, &digest));
        }
        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(descriptor(OCI_CONFIG_TYPE, config_size, &config_digest))
            .layers(layers)
            .build()
            .map_err(|e| Error::format(source.origin("manifest.json"), e.to_string()))?;
        let bytes = serde_json::to_vec(&manifest).expect("a manifest always serialises");
        let manifest = staging.blobs().write_bytes(&bytes)?;
        let names = entry
            .repo_tags
            .iter()
            .flatten()
            .map(|n| reference::normalize(n))
            .collect::<Result<Vec<_>>>()?;
        found.push(Found {
            manifest,
            names,
            tags: Vec::new(),
        });
    }
    if found.is_empty() {
        return Err(Error::format(
            source.origin("manifest.json"),
            "lists no images",
        ));
    }
    Ok(found)
}

/// The digest a docker-archive file name carries: `blobs/sha256/<hex>`, or `<hex>.json` for configs.
fn digest_in_name(rel: &str, config: bool) -> Option<Digest> {
    if let Some(hex) = rel.strip_prefix("blobs/sha256/") {
        return Digest::from_hex(hex).ok();
    }
    let hex = rel.strip_suffix(".json").filter(|_| config)?;
    Digest::from_hex(hex).ok()
}

fn sniff(staging: &Staging, digest: &Digest) -> Result<Compression> {
    let mut blob = staging.content().open(digest)?;
    let mut head = [0u8; 4];
    let mut filled = 0;
    while filled < head.len() {
        match blob.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) => return Err(Error::io("reading", blob.path(), e)),
        }
    }
    Ok(Compression::sniff(&head[..filled]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 13, defect 9: `image import /etc/passwd` printed the file's content (tar's error
    /// quotes the header fields it could not parse). A file that does not start with a tar
    /// header is said to be no image archive, with the path and what was expected.
    #[test]
    fn defect_9_a_file_that_is_no_tar_is_named_not_quoted() {
        let passwd =
            b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
                .repeat(10);
        for content in [&passwd[..], b"", &[0x55; 511][..]] {
            let err = tar_stream(Path::new("/etc/passwd"), Box::new(content))
                .err()
                .expect("refused")
                .to_string();
            assert!(
                err.starts_with("/etc/passwd: not an image archive: expected an oci-archive"),
                "{err}"
            );
            assert!(!err.contains("root:x") && !err.contains("UUU"), "{err}");
        }
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(3);
        header.set_cksum();
        tar.append_data(&mut header, "oci-layout", &b"{}\n"[..])
            .unwrap();
        let bytes = tar.into_inner().unwrap();
        let mut read = Vec::new();
        tar_stream(Path::new("x.tar"), Box::new(&bytes[..]))
            .unwrap()
            .read_to_end(&mut read)
            .unwrap();
        assert_eq!(read, bytes, "a tar passes whole");
        let empty = vec![0u8; 1024];
        assert!(tar_stream(Path::new("empty.tar"), Box::new(&empty[..])).is_ok());
    }

    #[test]
    fn clean_keeps_paths_inside() {
        assert_eq!(
            clean(Path::new("./blobs/sha256/x")).as_deref(),
            Some("blobs/sha256/x")
        );
        assert_eq!(clean(Path::new("a/../b.tar")).as_deref(), Some("b.tar"));
        assert_eq!(clean(Path::new("../etc/shadow")), None);
        assert_eq!(clean(Path::new("/abs/x")).as_deref(), Some("abs/x"));
    }

    #[test]
    fn docker_names_carry_digests_only_where_docker_puts_them() {
        let d = Digest::of(b"c");
        assert_eq!(
            digest_in_name(&format!("{}.json", d.hex()), true),
            Some(d.clone())
        );
        assert_eq!(digest_in_name(&format!("{}.tar", d.hex()), false), None);
        assert_eq!(
            digest_in_name(&format!("blobs/sha256/{}", d.hex()), false),
            Some(d)
        );
    }
}
