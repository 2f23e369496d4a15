//! SPDY/3.1 framing as Kubernetes' streaming protocols use it (moby/spdystream under
//! client-go's `remotecommand` and `portforward`): the frames a server reads (SYN_STREAM, data,
//! RST_STREAM, PING, GOAWAY; SETTINGS and WINDOW_UPDATE are read and ignored, as spdystream
//! does no flow control) and the ones it writes (SYN_REPLY, data, PING, GOAWAY, RST_STREAM);
//! and a client's two more: it writes SYN_STREAM and reads SYN_REPLY (the CLI's `exec -it`
//! and `attach` through a CRI runtime, `podlab`'s `remote::streaming`).
//!
//! Every header block on a connection is one zlib stream per direction, primed with SPDY/3's
//! header dictionary and sync-flushed at the end of each frame (spec section 2.6.10.1), so the
//! decoder and encoder live as long as the connection.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

/// SPDY's version in every control frame.
const VERSION: u16 = 3;
/// The largest frame accepted (spdystream's `MaxDataLength`).
const MAX_FRAME: usize = 1 << 24;
/// A data or control frame flag: the sender's last frame on this stream.
pub const FLAG_FIN: u8 = 0x01;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;

/// RST_STREAM's status for a stream the sender gives up (`CANCEL`).
pub const RST_CANCEL: u32 = 5;
/// RST_STREAM's status for a stream the receiver does not know (`INVALID_STREAM`).
pub const RST_INVALID_STREAM: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("SPDY frame of {0} bytes is larger than the {MAX_FRAME} bytes allowed")]
    TooLarge(usize),
    #[error("malformed SPDY {what} frame: {message}")]
    Malformed { what: &'static str, message: String },
    #[error("SPDY header block: zlib: {0}")]
    Zlib(String),
}

/// A frame read from the other side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A new stream and its headers (lower-case names; a value may repeat).
    SynStream {
        stream_id: u32,
        headers: Vec<(String, String)>,
        fin: bool,
    },
    /// The server accepted a stream the client opened (read by a client).
    SynReply {
        stream_id: u32,
        headers: Vec<(String, String)>,
    },
    Data {
        stream_id: u32,
        data: Vec<u8>,
        fin: bool,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Ping {
        id: u32,
    },
    GoAway,
    /// Anything else (SETTINGS, WINDOW_UPDATE, HEADERS): read and left aside.
    Ignored,
}

impl Frame {
    /// The value of header `name` of a SYN_STREAM.
    pub fn header(headers: &[(String, String)], name: &str) -> Option<String> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}

/// SPDY/3's header dictionary.
pub fn header_dictionary() -> Vec<u8> {
    let mut dictionary = Vec::with_capacity(1423);
    for word in DICTIONARY_WORDS {
        dictionary.extend_from_slice(&(word.len() as u32).to_be_bytes());
        dictionary.extend_from_slice(word.as_bytes());
    }
    dictionary.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    dictionary
}

/// The reading half of a connection (either side's): bytes in, frames out.
pub struct Decoder {
    buffer: Vec<u8>,
    inflate: Decompress,
    dictionary: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            buffer: Vec::new(),
            inflate: Decompress::new(true),
            dictionary: header_dictionary(),
        }
    }

    /// Bytes read from the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame in what was pushed, if there is one.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, SpdyError> {
        if self.buffer.len() < 8 {
            return Ok(None);
        }
        let length =
            u32::from_be_bytes([0, self.buffer[5], self.buffer[6], self.buffer[7]]) as usize;
        if length >= MAX_FRAME {
            return Err(SpdyError::TooLarge(length));
        }
        if self.buffer.len() < 8 + length {
            return Ok(None);
        }
        let frame: Vec<u8> = self.buffer.drain(..8 + length).collect();
        let first = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let flags = frame[4];
        let payload = &frame[8..];
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream_id: first & 0x7fff_ffff,
                data: payload.to_vec(),
                fin: flags & FLAG_FIN != 0,
            }));
        }
        let kind = (first & 0xffff) as u16;
        let word = |at: usize, what: &'static str| -> Result<u32, SpdyError> {
            payload
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| SpdyError::Malformed {
                    what,
                    message: format!("{} bytes of payload", payload.len()),
                })
        };
        Ok(Some(match kind {
            SYN_STREAM => {
                let stream_id = word(0, "SYN_STREAM")? & 0x7fff_ffff;
                if payload.len() < 10 {
                    return Err(SpdyError::Malformed {
                        what: "SYN_STREAM",
                        message: "no header block".into(),
                    });
                }
                let block = self.inflate_block(&payload[10..])?;
                Frame::SynStream {
                    stream_id,
                    headers: parse_header_block(&block)?,
                    fin: flags & FLAG_FIN != 0,
                }
            }
            SYN_REPLY => {
                let stream_id = word(0, "SYN_REPLY")? & 0x7fff_ffff;
                let headers = match payload.len() > 4 {
                    true => parse_header_block(&self.inflate_block(&payload[4..])?)?,
                    false => Vec::new(),
                };
                Frame::SynReply { stream_id, headers }
            }
            HEADERS => {
                // Not used by Kubernetes' protocols, but the zlib stream must stay in step.
                if payload.len() > 4 {
                    self.inflate_block(&payload[4..])?;
                }
                Frame::Ignored
            }
            RST_STREAM => Frame::RstStream {
                stream_id: word(0, "RST_STREAM")? & 0x7fff_ffff,
                status: word(4, "RST_STREAM")?,
            },
            PING => Frame::Ping {
                id: word(0, "PING")?,
            },
            GOAWAY => Frame::GoAway,
            _ => Frame::Ignored,
        }))
    }

    /// Inflates one frame's part of the connection's header stream.
    fn inflate_block(&mut self, input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(1024);
        let mut consumed = 0;
        loop {
            if out.capacity() - out.len() < 512 {
                out.reserve(4096);
            }
            let before = self.inflate.total_in();
            let result =
                self.inflate
                    .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync);
            consumed += (self.inflate.total_in() - before) as usize;
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&self.dictionary)
                        .map_err(|e| SpdyError::Zlib(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(SpdyError::Zlib(e.to_string())),
            }
            if consumed >= input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// A header block: a 32-bit count, then each name and value with a 32-bit length; a value
/// holding several is NUL-separated.
fn parse_header_block(block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let bad = |message: &str| SpdyError::Malformed {
        what: "header block",
        message: message.to_string(),
    };
    let mut at = 0usize;
    let mut next = |n: usize| -> Result<&[u8], SpdyError> {
        let part = block.get(at..at + n).ok_or_else(|| bad("truncated"))?;
        at += n;
        Ok(part)
    };
    let number = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let count = number(next(4)?);
    if count > 1024 {
        return Err(bad("more than 1024 headers"));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let length = number(next(4)?);
        let name = String::from_utf8_lossy(next(length)?).to_lowercase();
        let length = number(next(4)?);
        let value = String::from_utf8_lossy(next(length)?).into_owned();
        for one in value.split('\0') {
            headers.push((name.clone(), one.to_string()));
        }
    }
    Ok(headers)
}

/// The writing half of a connection (either side's): frames in, bytes out.
pub struct Encoder {
    deflate: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    pub fn new() -> Encoder {
        let mut deflate = Compress::new(Compression::best(), true);
        // Primed as SPDY/3 says; a reader without it would fail on the header's dictionary id.
        let _ = deflate.set_dictionary(&header_dictionary());
        Encoder { deflate }
    }

    /// SYN_REPLY: the server accepts the stream (spdystream waits for it on `CreateStream`).
    pub fn syn_reply(&mut self, stream_id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
        payload.extend_from_slice(&self.header_block(headers));
        control(SYN_REPLY, 0, &payload)
    }

    /// SYN_STREAM: the client opens stream `stream_id` (odd, rising), with no associated
    /// stream and priority 0, as spdystream's `CreateStream` does; `headers`' names lower-case.
    pub fn syn_stream(&mut self, stream_id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
        // Associated-to stream 0, priority 0, unused slot.
        payload.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        payload.extend_from_slice(&self.header_block(headers));
        control(SYN_STREAM, 0, &payload)
    }

    /// A header block, compressed in the connection's zlib stream and sync-flushed.
    fn header_block(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        block.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            for part in [name.as_bytes(), value.as_bytes()] {
                block.extend_from_slice(&(part.len() as u32).to_be_bytes());
                block.extend_from_slice(part);
            }
        }
        let mut compressed = Vec::with_capacity(block.len() + 64);
        loop {
            if compressed.capacity() - compressed.len() < 64 {
                compressed.reserve(256);
            }
            let before = self.deflate.total_in() as usize;
            let _ = self
                .deflate
                .compress_vec(&block, &mut compressed, FlushCompress::Sync);
            block.drain(..self.deflate.total_in() as usize - before);
            if block.is_empty() && compressed.len() < compressed.capacity() {
                break;
            }
        }
        compressed
    }

    /// A data frame (`fin`: the server's last on this stream).
    pub fn data(stream_id: u32, data: &[u8], fin: bool) -> Vec<u8> {
        let mut frame = Vec::with_capacity(8 + data.len());
        frame.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
        frame.push(if fin { FLAG_FIN } else { 0 });
        frame.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
        frame.extend_from_slice(data);
        frame
    }

    /// The answer to a client's PING: the same id.
    pub fn ping(id: u32) -> Vec<u8> {
        control(PING, 0, &id.to_be_bytes())
    }

    pub fn rst_stream(stream_id: u32, status: u32) -> Vec<u8> {
        let mut payload = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
        payload.extend_from_slice(&status.to_be_bytes());
        control(RST_STREAM, 0, &payload)
    }

    /// GOAWAY (status OK): no new streams; the connection ends.
    pub fn go_away(last_stream_id: u32) -> Vec<u8> {
        let mut payload = (last_stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
        payload.extend_from_slice(&0u32.to_be_bytes());
        control(GOAWAY, 0, &payload)
    }
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + payload.len());
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(flags);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(payload);
    frame
}

/// The words at the head of SPDY/3's header dictionary (draft-mbelshe-httpbis-spdy-00,
/// section 2.6.10.1), each stored with its length as a 32-bit big-endian prefix.
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// The text that ends the dictionary, stored as it is.
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502",
    "504505203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Re",
    "quest401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Impl",
    "emented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00",
    ":00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,imag",
    "e/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivate",
    "max-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's SYN_STREAM, compressed as spdystream compresses (the dictionary in use).
    fn client_syn_stream(
        deflate: &mut Compress,
        stream_id: u32,
        headers: &[(&str, &str)],
    ) -> Vec<u8> {
        let mut block = (headers.len() as u32).to_be_bytes().to_vec();
        for (name, value) in headers {
            for part in [name.as_bytes(), value.as_bytes()] {
                block.extend_from_slice(&(part.len() as u32).to_be_bytes());
                block.extend_from_slice(part);
            }
        }
        let mut compressed = Vec::with_capacity(4096);
        deflate
            .compress_vec(&block, &mut compressed, FlushCompress::Sync)
            .unwrap();
        let mut payload = stream_id.to_be_bytes().to_vec();
        payload.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        payload.extend_from_slice(&compressed);
        control(SYN_STREAM, 0, &payload)
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        let dictionary = header_dictionary();
        assert_eq!(dictionary.len(), 1423);
        // The dictionary id that SPDY/3 zlib streams carry (its Adler-32).
        let mut a: u32 = 1;
        let mut b: u32 = 0;
        for byte in &dictionary {
            a = (a + u32::from(*byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }

    #[test]
    fn syn_streams_decode_across_one_zlib_stream() {
        let mut deflate = Compress::new(Compression::best(), true);
        deflate.set_dictionary(&header_dictionary()).unwrap();
        let mut bytes = client_syn_stream(&mut deflate, 1, &[("streamtype", "error")]);
        bytes.extend(client_syn_stream(
            &mut deflate,
            3,
            &[("port", "80"), ("requestid", "0"), ("streamtype", "data")],
        ));
        bytes.extend(Encoder::data(3, b"GET /", true));
        bytes.extend(Encoder::ping(7));
        let mut decoder = Decoder::new();
        // Byte by byte: a frame is only given whole.
        let mut frames = Vec::new();
        for byte in bytes {
            decoder.push(&[byte]);
            while let Some(frame) = decoder.next_frame().unwrap() {
                frames.push(frame);
            }
        }
        assert_eq!(
            frames,
            vec![
                Frame::SynStream {
                    stream_id: 1,
                    headers: vec![("streamtype".into(), "error".into())],
                    fin: false
                },
                Frame::SynStream {
                    stream_id: 3,
                    headers: vec![
                        ("port".into(), "80".into()),
                        ("requestid".into(), "0".into()),
                        ("streamtype".into(), "data".into())
                    ],
                    fin: false
                },
                Frame::Data {
                    stream_id: 3,
                    data: b"GET /".to_vec(),
                    fin: true
                },
                Frame::Ping { id: 7 },
            ]
        );
    }

    #[test]
    fn a_clients_syn_streams_and_a_servers_syn_replies_read_back() {
        let (mut client, mut server) = (Encoder::new(), Encoder::new());
        let (mut at_server, mut at_client) = (Decoder::new(), Decoder::new());
        for (id, kind) in [(1, "error"), (3, "stdin"), (5, "stdout")] {
            at_server.push(&client.syn_stream(id, &[("streamtype", kind)]));
            assert_eq!(
                at_server.next_frame().unwrap(),
                Some(Frame::SynStream {
                    stream_id: id,
                    headers: vec![("streamtype".into(), kind.into())],
                    fin: false
                })
            );
            at_client.push(&server.syn_reply(id, &[]));
            assert_eq!(
                at_client.next_frame().unwrap(),
                Some(Frame::SynReply {
                    stream_id: id,
                    headers: vec![]
                })
            );
        }
        assert_eq!(at_server.next_frame().unwrap(), None);
    }

    #[test]
    fn syn_replies_inflate_with_the_dictionary() {
        let mut encoder = Encoder::new();
        let first = encoder.syn_reply(1, &[]);
        let second = encoder.syn_reply(3, &[]);
        assert_eq!(&first[..4], &[0x80, 0x03, 0x00, 0x02]);
        let mut inflate = Decompress::new(true);
        let mut out = Vec::with_capacity(64);
        for frame in [&first, &second] {
            let mut input = &frame[12..];
            loop {
                let before = inflate.total_in();
                match inflate.decompress_vec(input, &mut out, FlushDecompress::Sync) {
                    Ok(_) => {}
                    Err(e) if e.needs_dictionary() == Some(0xe3c6_a7c2) => {
                        inflate.set_dictionary(&header_dictionary()).unwrap();
                    }
                    Err(e) => panic!("{e}"),
                }
                input = &input[(inflate.total_in() - before) as usize..];
                if input.is_empty() {
                    break;
                }
            }
        }
        // Two empty header blocks: a zero count each.
        assert_eq!(out, vec![0u8; 8]);
    }
}
