//! Content addresses: `sha256:<hex>` digests, and readers/writers that hash what passes through
//! them, so that content is verified while it is copied instead of being read twice.

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// A sha256 content digest, written `sha256:<64 lowercase hex digits>` as in OCI descriptors.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Parses `sha256:<hex>`; other algorithms are refused because the store only keeps sha256.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = |reason| Error::InvalidDigest {
            digest: text.to_owned(),
            reason,
        };
        let hex = text
            .strip_prefix("sha256:")
            .ok_or_else(|| invalid("only sha256 digests are supported"))?;
        Self::from_hex(hex).map_err(|_| invalid("expected 64 lowercase hex digits after sha256:"))
    }

    /// A digest from its 64 hex digits (a blob's file name).
    pub fn from_hex(hex: &str) -> Result<Self> {
        let valid = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !valid {
            return Err(Error::InvalidDigest {
                digest: hex.to_owned(),
                reason: "expected 64 lowercase hex digits",
            });
        }
        Ok(Digest {
            hex: hex.to_owned(),
        })
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    fn from_hasher(hasher: Sha256) -> Self {
        Digest {
            hex: hex::encode(hasher.finalize()),
        }
    }

    /// The 64 hex digits, without the algorithm.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The first 12 hex digits, as docker and crictl show image ids.
    pub fn short(&self) -> &str {
        &self.hex[..12]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Digest {
    type Err = Error;
    fn from_str(text: &str) -> Result<Self> {
        Digest::parse(text)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Digest::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A reader that hashes and counts every byte read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    len: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    /// Reads what is left, so the digest covers the whole stream (tar archives end with padding
    /// that a tar reader may leave unread).
    pub fn drain(&mut self) -> io::Result<()> {
        io::copy(self, &mut io::sink()).map(drop)
    }

    /// The digest and length of everything read so far.
    pub fn finish(self) -> (Digest, u64) {
        (Digest::from_hasher(self.hasher), self.len)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

/// A writer that hashes and counts every byte written through it.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    /// The inner writer, with the digest and length of everything written.
    pub fn finish(self) -> (W, Digest, u64) {
        (self.inner, Digest::from_hasher(self.hasher), self.len)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_of_empty_is_the_well_known_one() {
        assert_eq!(
            Digest::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn parse_refuses_other_algorithms_and_bad_hex() {
        assert!(Digest::parse("sha512:abcd").is_err());
        assert!(Digest::parse("sha256:ABCD").is_err());
        let good = Digest::of(b"x").to_string();
        assert_eq!(Digest::parse(&good).unwrap().to_string(), good);
        assert!(Digest::parse(&good.to_uppercase()).is_err());
    }

    #[test]
    fn hashing_reader_and_writer_agree_with_of() {
        let data = b"hello layers".repeat(1000);
        let mut reader = HashingReader::new(&data[..]);
        let mut writer = HashingWriter::new(Vec::new());
        io::copy(&mut reader, &mut writer).unwrap();
        let (copy, written, wlen) = writer.finish();
        let (read, rlen) = reader.finish();
        assert_eq!(copy, data);
        assert_eq!(read, Digest::of(&data));
        assert_eq!(written, read);
        assert_eq!((rlen, wlen), (data.len() as u64, data.len() as u64));
    }
}
