//! Layer compression: a layer blob is a tar, plain or compressed with gzip or zstd. The kind is
//! read off the blob's first bytes (its magic number) rather than trusted from the media type, as
//! containerd does, so a mislabelled layer still unpacks.

use std::io::{self, BufRead, Read};

use crate::error::{Error, Result};

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// What the first bytes of a stream say it is.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(GZIP_MAGIC) {
            Compression::Gzip
        } else if head.starts_with(ZSTD_MAGIC) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// The OCI layer media type for this compression.
    pub fn layer_media_type(self) -> &'static str {
        match self {
            Compression::None => "application/vnd.oci.image.layer.v1.tar",
            Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
        }
    }
}

/// Wraps `reader` in the decoder its first bytes call for; returns the kind it found.
pub fn decompress<'a, R: BufRead + 'a>(
    mut reader: R,
    what: &str,
) -> Result<(Compression, Box<dyn Read + 'a>)> {
    let head = reader
        .fill_buf()
        .map_err(|e| Error::io("reading", what, e))?;
    let kind = Compression::sniff(head);
    let decoded: Box<dyn Read + 'a> = match kind {
        Compression::None => Box::new(reader),
        // Several gzip members one after the other are one stream (pigz, concatenated layers).
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(reader)),
        Compression::Zstd => zstd_decoder(reader, what)?,
    };
    Ok((kind, decoded))
}

#[cfg(feature = "zstd")]
fn zstd_decoder<'a, R: BufRead + 'a>(reader: R, _what: &str) -> Result<Box<dyn Read + 'a>> {
    Ok(Box::new(zstd::Frames::new(reader)))
}

#[cfg(not(feature = "zstd"))]
fn zstd_decoder<'a, R: BufRead + 'a>(_reader: R, what: &str) -> Result<Box<dyn Read + 'a>> {
    Err(Error::Unsupported(format!(
        "{what} is zstd-compressed, and this podlab was built without the `zstd` feature"
    )))
}

#[cfg(feature = "zstd")]
mod zstd {
    //! ruzstd decodes one frame at a time; a zstd stream may hold several, and skippable frames
    //! (zstd:chunked keeps its table of contents in one), so this reader chains them.

    use super::*;
    use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
    use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

    pub struct Frames<R: BufRead> {
        source: R,
        decoder: FrameDecoder,
        in_frame: bool,
    }

    impl<R: BufRead> Frames<R> {
        pub fn new(source: R) -> Self {
            Frames {
                source,
                decoder: FrameDecoder::new(),
                in_frame: false,
            }
        }

        /// Reads the next frame header; false at the end of the stream.
        fn next_frame(&mut self) -> io::Result<bool> {
            loop {
                if self.source.fill_buf()?.is_empty() {
                    return Ok(false);
                }
                match self.decoder.reset(&mut self.source) {
                    Ok(()) => return Ok(true),
                    Err(FrameDecoderError::ReadFrameHeaderError(
                        ReadFrameHeaderError::SkipFrame { length, .. },
                    )) => {
                        let mut skipped = (&mut self.source).take(length.into());
                        io::copy(&mut skipped, &mut io::sink())?;
                    }
                    Err(err) => return Err(invalid(err)),
                }
            }
        }
    }

    fn invalid(err: impl std::fmt::Display) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {err}"))
    }

    impl<R: BufRead> Read for Frames<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if buf.is_empty() {
                return Ok(0);
            }
            loop {
                if !self.in_frame {
                    if !self.next_frame()? {
                        return Ok(0);
                    }
                    self.in_frame = true;
                }
                while self.decoder.can_collect() == 0 && !self.decoder.is_finished() {
                    self.decoder
                        .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBlocks(1))
                        .map_err(invalid)?;
                }
                let n = self.decoder.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                if self.decoder.is_finished() {
                    self.in_frame = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn sniffing_reads_the_magic_numbers() {
        assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8, 0]), Compression::Gzip);
        assert_eq!(
            Compression::sniff(&[0x28, 0xb5, 0x2f, 0xfd]),
            Compression::Zstd
        );
        assert_eq!(Compression::sniff(b"etc/\0\0\0"), Compression::None);
        assert_eq!(Compression::sniff(b""), Compression::None);
    }

    #[test]
    fn gzip_members_are_read_as_one_stream() {
        let mut data = Vec::new();
        for part in [&b"first "[..], b"second"] {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(part).unwrap();
            data.extend(gz.finish().unwrap());
        }
        let (kind, mut reader) = decompress(&data[..], "test").unwrap();
        let mut out = String::new();
        reader.read_to_string(&mut out).unwrap();
        assert_eq!((kind, out.as_str()), (Compression::Gzip, "first second"));
    }

    #[test]
    fn plain_streams_pass_through() {
        let (kind, mut reader) = decompress(&b"plain tar bytes"[..], "test").unwrap();
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        assert_eq!(
            (kind, &out[..]),
            (Compression::None, &b"plain tar bytes"[..])
        );
    }

    #[cfg(feature = "zstd")]
    #[test]
    fn zstd_frames_and_skippable_frames_are_read_as_one_stream() {
        use ruzstd::encoding::{compress_to_vec, CompressionLevel};
        // The first frame from the real zstd tool when it is installed, the second from ruzstd.
        let first = std::process::Command::new("zstd")
            .args(["-q", "-c"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .ok()
            .map(|mut child| {
                child.stdin.take().unwrap().write_all(b"first ").unwrap();
                child.wait_with_output().unwrap().stdout
            })
            .unwrap_or_else(|| compress_to_vec(&b"first "[..], CompressionLevel::Fastest));
        let mut data = first;
        data.extend([0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, b't', b'o', b'c']);
        data.extend(compress_to_vec(&b"second"[..], CompressionLevel::Fastest));
        let (kind, mut reader) = decompress(&data[..], "test").unwrap();
        let mut out = String::new();
        reader.read_to_string(&mut out).unwrap();
        assert_eq!((kind, out.as_str()), (Compression::Zstd, "first second"));
    }
}
