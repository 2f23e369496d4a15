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
    reader: R,
    what: &str,
) -> Result<(Compression, Box<dyn Read + 'a>)> {
    let (kind, reader) = sniffed(reader, what)?;
    let decoded: Box<dyn Read + 'a> = match kind {
        Compression::None => Box::new(reader),
        // Several gzip members one after the other are one stream (pigz, concatenated layers).
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(reader)),
        Compression::Zstd => zstd_decoder(reader, what)?,
    };
    Ok((kind, decoded))
}

/// A stream whose first bytes were read, put back in front of the rest.
type Sniffed<R> = io::Chain<io::Cursor<Vec<u8>>, R>;

/// The stream as it was, and what its first four bytes say it is. They are read until there
/// are four (or the stream ends): the first read of a layer streaming in from a registry may
/// bring fewer, and a gzip layer whose first chunk was one byte was taken for a plain tar.
fn sniffed<R: BufRead>(mut reader: R, what: &str) -> Result<(Compression, Sniffed<R>)> {
    let head =
        read_head(&mut reader, ZSTD_MAGIC.len()).map_err(|e| Error::io("reading", what, e))?;
    let kind = Compression::sniff(&head);
    Ok((kind, io::Cursor::new(head).chain(reader)))
}

/// The first `len` bytes of `reader`, fewer only where it ends: reads until there are that
/// many, whatever each read brings. The caller puts them back in front of the rest
/// (`Cursor::new(head).chain(reader)`) once it has looked at them.
pub(crate) fn read_head(reader: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    let mut head = vec![0u8; len];
    let mut have = 0;
    while have < len {
        match reader.read(&mut head[have..]) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    head.truncate(have);
    Ok(head)
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

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    }

    /// Compressible but not trivially: words from a small generator, as a tar of text is.
    fn sample(len: usize) -> Vec<u8> {
        let mut state = 0x2545_f491_u32;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let word = format!("w{} ", state % 5000);
            out.extend_from_slice(word.as_bytes());
        }
        out.truncate(len);
        out
    }

    fn read_all(reader: &mut dyn Read) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        reader.read_to_end(&mut out).map(|_| out)
    }

    /// A reader that hands out one byte a read for its first `small` bytes, then 4 KB.
    struct Trickle<'a> {
        data: &'a [u8],
        at: usize,
        small: usize,
    }

    impl io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = if self.at < self.small { 1 } else { 4096 };
            let n = n.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn gzip_read_a_byte_at_a_time_comes_out_whole() {
        let data = sample(300_000);
        let compressed = gzip(&data);
        for capacity in [1, 2, 7, 8192] {
            let trickle = io::BufReader::with_capacity(capacity, &compressed[..]);
            let (kind, mut reader) = decompress(trickle, "test").unwrap();
            assert_eq!(kind, Compression::Gzip);
            assert!(
                read_all(&mut reader).unwrap() == data,
                "capacity {capacity}"
            );
        }
    }

    #[test]
    fn regression_a_gzip_stream_whose_first_read_brings_one_byte_is_still_gzip() {
        let data = sample(50_000);
        let compressed = gzip(&data);
        for small in [1, 3, 10, compressed.len()] {
            let first_bytes_alone = Trickle {
                data: &compressed,
                at: 0,
                small,
            };
            let stream = io::BufReader::with_capacity(8192, first_bytes_alone);
            let (kind, mut reader) = decompress(stream, "test").unwrap();
            assert_eq!(kind, Compression::Gzip, "first {small} bytes one at a time");
            assert!(read_all(&mut reader).unwrap() == data);
        }
    }

    #[test]
    fn a_gzip_stream_cut_short_is_an_error_not_an_end() {
        let compressed = gzip(&sample(100_000));
        for cut in [5, 20, compressed.len() / 2, compressed.len() - 4] {
            let (_, mut reader) = decompress(&compressed[..cut], "test").unwrap();
            let err = read_all(&mut reader).expect_err("a cut stream");
            assert!(
                matches!(
                    err.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::InvalidData
                ),
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn a_gzip_member_whose_crc_does_not_match_is_refused() {
        let mut compressed = gzip(&sample(10_000));
        let crc_at = compressed.len() - 8;
        compressed[crc_at] ^= 0xff;
        let (_, mut reader) = decompress(&compressed[..], "test").unwrap();
        let err = read_all(&mut reader).expect_err("a wrong CRC-32");
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput
            ),
            "{err}"
        );
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
