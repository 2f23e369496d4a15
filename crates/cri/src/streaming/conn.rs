//! One upgraded connection: frames read from the client (PINGs answered on the way), and
//! frames to it through one writer task, so that the relays' data frames and the session's
//! replies reach the socket whole and in order (the header blocks' zlib stream depends on it).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::spdy::{Decoder, Encoder, Frame};

/// The largest data frame sent.
pub const CHUNK: usize = 32 * 1024;
/// How many frames may wait for the socket before a relay waits too.
const QUEUE: usize = 64;

/// The sending side: encoded frames for the writer task.
pub type Out = mpsc::Sender<Vec<u8>>;

pub struct Conn {
    read: OwnedReadHalf,
    decoder: Decoder,
    encoder: Encoder,
    out: Out,
    writer: JoinHandle<()>,
    last_stream: u32,
    closed: bool,
}

impl Conn {
    /// `rest`: what was read past the HTTP request's head.
    pub fn new(stream: TcpStream, rest: &[u8]) -> Conn {
        let (read, mut write) = stream.into_split();
        let (out, mut queue) = mpsc::channel::<Vec<u8>>(QUEUE);
        let writer = tokio::spawn(async move {
            while let Some(frame) = queue.recv().await {
                if write.write_all(&frame).await.is_err() {
                    break;
                }
            }
            let _ = write.shutdown().await;
        });
        let mut decoder = Decoder::new();
        decoder.push(rest);
        Conn {
            read,
            decoder,
            encoder: Encoder::new(),
            out,
            writer,
            last_stream: 0,
            closed: false,
        }
    }

    /// The sender for relays' data frames.
    pub fn out(&self) -> Out {
        self.out.clone()
    }

    /// The client's next frame; None once it has gone (end of file, GOAWAY, an error).
    /// PINGs are answered here. Cancel-safe: what was read stays in the decoder.
    pub async fn next(&mut self) -> Option<Frame> {
        if self.closed {
            return None;
        }
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match self.decoder.next_frame() {
                Ok(Some(Frame::Ping { id })) => {
                    let _ = self.out.send(Encoder::ping(id)).await;
                }
                Ok(Some(Frame::GoAway)) | Err(_) => {
                    self.closed = true;
                    return None;
                }
                Ok(Some(frame)) => {
                    if let Frame::SynStream { stream_id, .. } = &frame {
                        self.last_stream = self.last_stream.max(*stream_id);
                    }
                    return Some(frame);
                }
                Ok(None) => match self.read.read(&mut buffer).await {
                    Ok(0) | Err(_) => {
                        self.closed = true;
                        return None;
                    }
                    Ok(n) => self.decoder.push(&buffer[..n]),
                },
            }
        }
    }

    /// Accepts a stream the client opened.
    pub async fn accept(&mut self, stream_id: u32) {
        let frame = self.encoder.syn_reply(stream_id, &[]);
        let _ = self.out.send(frame).await;
    }

    /// Refuses a stream the client opened.
    pub async fn refuse(&mut self, stream_id: u32) {
        let _ = self
            .out
            .send(Encoder::rst_stream(
                stream_id,
                super::spdy::RST_INVALID_STREAM,
            ))
            .await;
    }

    /// Sends `data` on a stream, in frames of at most [`CHUNK`] bytes; `fin` ends the stream.
    pub async fn send(out: &Out, stream_id: u32, data: &[u8], fin: bool) -> bool {
        let mut chunks = data.chunks(CHUNK).peekable();
        if chunks.peek().is_none() {
            return out.send(Encoder::data(stream_id, &[], fin)).await.is_ok();
        }
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            if out
                .send(Encoder::data(stream_id, chunk, fin && last))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Ends the connection as spdystream's Close does: GOAWAY, then the socket's write side
    /// once every queued frame is out; then what the client still sends is read and dropped
    /// until it closes (at most `linger`), so that closing never resets data still in flight.
    pub async fn close(mut self, linger: Duration) {
        let _ = self.out.send(Encoder::go_away(self.last_stream)).await;
        drop(self.out);
        let _ = self.writer.await;
        let mut buffer = [0u8; 4096];
        let _ = tokio::time::timeout(linger, async {
            while !self.closed {
                match self.read.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }
}
