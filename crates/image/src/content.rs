//! The content store: immutable blobs named by their sha256 (`blobs/sha256/<hex>`), like
//! containerd's `io.containerd.content.v1.content`. A blob is written to a temporary name while
//! it is hashed, checked against the digest it was expected to have, fsynced and renamed to its
//! digest; a blob is checked again whenever it is read.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::digest::{Digest, HashingReader, HashingWriter};
use crate::error::{Error, Result};

/// Big enough that copying a layer is a few large reads and writes, not thousands of 8 KiB ones.
pub(crate) const COPY_BUFFER: usize = 256 * 1024;

/// One `blobs/sha256` folder.
#[derive(Debug, Clone)]
pub(crate) struct Blobs {
    dir: PathBuf,
}

impl Blobs {
    pub fn new(dir: PathBuf) -> Self {
        Blobs { dir }
    }

    pub fn create_dir(&self) -> Result<()> {
        fs::create_dir_all(&self.dir).map_err(|e| Error::io("creating folder", &self.dir, e))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    pub fn contains(&self, digest: &Digest) -> bool {
        self.path(digest).is_file()
    }

    /// Every blob in the folder (names that are not digests are ignored).
    pub fn list(&self) -> Result<Vec<Digest>> {
        let entries = fs::read_dir(&self.dir).map_err(|e| Error::io("listing", &self.dir, e))?;
        let mut digests = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("listing", &self.dir, e))?;
            if let Some(digest) = entry
                .file_name()
                .to_str()
                .and_then(|n| Digest::from_hex(n).ok())
            {
                digests.push(digest);
            }
        }
        digests.sort();
        Ok(digests)
    }

    /// Starts a new blob; [`BlobWriter::commit`] names it by what was written.
    pub fn create(&self) -> Result<BlobWriter> {
        let tmp = self
            .dir
            .join(format!(".ingest-{}", crate::unique::suffix()));
        let file = File::create(&tmp).map_err(|e| Error::io("creating", &tmp, e))?;
        Ok(BlobWriter {
            out: Some(HashingWriter::new(BufWriter::with_capacity(
                COPY_BUFFER,
                file,
            ))),
            tmp,
            dir: self.dir.clone(),
        })
    }

    /// Copies `reader` into a new blob, hashing on the way; `expected` (digest and size) is
    /// checked before the blob gets its name. `origin` names the source in errors.
    pub fn write(
        &self,
        mut reader: impl Read,
        expected: Option<(&Digest, Option<u64>)>,
        origin: &Path,
    ) -> Result<(Digest, u64)> {
        let mut writer = self.create()?;
        let mut buf = vec![0u8; COPY_BUFFER];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("reading", origin, e)),
            };
            writer
                .write_all(&buf[..n])
                .map_err(|e| Error::io("writing blob", &writer.tmp, e))?;
        }
        writer.commit(expected, origin)
    }

    pub fn write_bytes(&self, bytes: &[u8]) -> Result<Digest> {
        let origin = self.dir.clone();
        self.write(bytes, None, &origin).map(|(digest, _)| digest)
    }

    /// Gives an already hashed file its digest name (a rename: no second copy).
    pub fn adopt(&self, file: &Path, digest: &Digest) -> Result<()> {
        let to = self.path(digest);
        fs::rename(file, &to).map_err(|e| Error::io("moving blob into place", &to, e))
    }

    /// Reads a whole blob and checks its digest.
    pub fn read(&self, digest: &Digest) -> Result<Vec<u8>> {
        let path = self.path(digest);
        let bytes = fs::read(&path).map_err(|e| self.missing_or(digest, &path, e))?;
        let actual = Digest::of(&bytes);
        if &actual != digest {
            return Err(Error::DigestMismatch {
                what: "blob",
                path,
                expected: digest.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Opens a blob to stream it; [`VerifiedReader::finish`] checks the digest at the end.
    pub fn open(&self, digest: &Digest) -> Result<VerifiedReader> {
        let path = self.path(digest);
        let file = File::open(&path).map_err(|e| self.missing_or(digest, &path, e))?;
        Ok(VerifiedReader {
            inner: HashingReader::new(file),
            expected: digest.clone(),
            path,
        })
    }

    /// Hashes a whole blob; its size when it is intact.
    pub fn verify(&self, digest: &Digest) -> Result<u64> {
        let mut reader = self.open(digest)?;
        let mut buffered = BufReader::with_capacity(COPY_BUFFER, &mut reader);
        io::copy(&mut buffered, &mut io::sink())
            .map_err(|e| Error::io("reading blob", self.path(digest), e))?;
        drop(buffered);
        reader.finish()
    }

    fn missing_or(&self, digest: &Digest, path: &Path, err: io::Error) -> Error {
        if err.kind() == io::ErrorKind::NotFound {
            Error::BlobMissing {
                digest: digest.clone(),
                path: path.to_owned(),
            }
        } else {
            Error::io("reading blob", path, err)
        }
    }
}

/// A blob being written under a temporary name; removed unless committed.
pub(crate) struct BlobWriter {
    out: Option<HashingWriter<BufWriter<File>>>,
    tmp: PathBuf,
    dir: PathBuf,
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out
            .as_mut()
            .expect("blob writer used after commit")
            .write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out
            .as_mut()
            .expect("blob writer used after commit")
            .flush()
    }
}

impl BlobWriter {
    /// Flushes and fsyncs the blob, checks it against `expected` (digest, and size if given) and
    /// renames it to its digest.
    pub fn commit(
        mut self,
        expected: Option<(&Digest, Option<u64>)>,
        origin: &Path,
    ) -> Result<(Digest, u64)> {
        let out = self.out.take().expect("blob writer committed twice");
        let (buffered, digest, size) = out.finish();
        let file = buffered
            .into_inner()
            .map_err(|e| Error::io("writing blob", &self.tmp, e.into_error()))?;
        file.sync_all()
            .map_err(|e| Error::io("fsyncing blob", &self.tmp, e))?;
        if let Some((want, want_size)) = expected {
            if &digest != want {
                return Err(Error::DigestMismatch {
                    what: "blob",
                    path: origin.to_owned(),
                    expected: want.clone(),
                    actual: digest,
                });
            }
            if let Some(want_size) = want_size.filter(|&s| s != size) {
                return Err(Error::SizeMismatch {
                    digest,
                    path: origin.to_owned(),
                    expected: want_size,
                    actual: size,
                });
            }
        }
        let to = self.dir.join(digest.hex());
        fs::rename(&self.tmp, &to).map_err(|e| Error::io("moving blob into place", &to, e))?;
        Ok((digest, size))
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        // Not committed (an error on the way) or committed (renamed away): either way the
        // temporary name must not stay behind.
        let _ = fs::remove_file(&self.tmp);
    }
}

/// A blob being read; the digest is compared when the caller has read it all.
pub(crate) struct VerifiedReader {
    inner: HashingReader<File>,
    expected: Digest,
    path: PathBuf,
}

impl Read for VerifiedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

impl VerifiedReader {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads what is left and compares the digest; the blob's size when it matches.
    pub fn finish(mut self) -> Result<u64> {
        self.inner
            .drain()
            .map_err(|e| Error::io("reading blob", &self.path, e))?;
        let (actual, size) = self.inner.finish();
        if actual != self.expected {
            return Err(Error::DigestMismatch {
                what: "blob",
                path: self.path,
                expected: self.expected,
                actual,
            });
        }
        Ok(size)
    }
}

/// Content looked up in several blob folders in turn: an import's staging folder, then the store.
#[derive(Clone, Copy)]
pub(crate) struct Content<'a> {
    folders: &'a [Blobs],
}

impl<'a> Content<'a> {
    pub fn new(folders: &'a [Blobs]) -> Self {
        Content { folders }
    }

    /// The folder that has `digest`, else the last one (the store), for the error message.
    fn holder(&self, digest: &Digest) -> &'a Blobs {
        self.folders
            .iter()
            .find(|b| b.contains(digest))
            .or(self.folders.last())
            .expect("content has at least one blob folder")
    }

    pub fn contains(&self, digest: &Digest) -> bool {
        self.folders.iter().any(|b| b.contains(digest))
    }

    pub fn read(&self, digest: &Digest) -> Result<Vec<u8>> {
        self.holder(digest).read(digest)
    }

    pub fn open(&self, digest: &Digest) -> Result<VerifiedReader> {
        self.holder(digest).open(digest)
    }
}
