//! The wire under NRI. A plugin's one unix connection (the *trunk*) carries two byte streams,
//! as containerd/nri's `multiplex` package frames them: `[mux id: u32 BE][length: u32 BE]` and
//! that many bytes. On mux stream [`PLUGIN_CONN`] the plugin serves the `Plugin` service and the
//! runtime calls it; on [`RUNTIME_CONN`] the runtime serves `Runtime` (RegisterPlugin). Each
//! stream carries ttrpc messages (containerd/ttrpc, gRPC's small cousin without HTTP/2):
//! `[length: u32 BE][ttrpc stream id: u32 BE][type: u8][flags: u8]` then a protobuf
//! [`Request`] or [`Response`]. A mux frame may hold part of a message or several: each mux
//! stream is reassembled on its own ([`Demux`]).

use std::collections::HashMap;

/// The mux stream on which the plugin serves `nri.pkg.api.v1alpha1.Plugin`.
pub const PLUGIN_CONN: u32 = 1;
/// The mux stream on which the runtime serves `nri.pkg.api.v1alpha1.Runtime`.
pub const RUNTIME_CONN: u32 = 2;

const MUX_HEADER: usize = 8;
const TTRPC_HEADER: usize = 10;
/// ttrpc's limit on one message's protobuf (4 MiB).
pub const MAX_MESSAGE: usize = 4 << 20;

/// ttrpc message types.
pub const REQUEST: u8 = 1;
pub const RESPONSE: u8 = 2;

/// `google.rpc.Code` values that a ttrpc status carries.
pub const CODE_UNKNOWN: i32 = 2;
pub const CODE_UNIMPLEMENTED: i32 = 12;

/// ttrpc's request (containerd/ttrpc `request.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// ttrpc's response: a status (absent or code 0 is success) and the method's answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RpcStatus>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// `google.rpc.Status` without its details (a decoder skips them).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// One ttrpc message, on one mux stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub mux: u32,
    pub stream: u32,
    pub kind: u8,
    pub payload: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("a ttrpc message of {length} bytes on mux stream {mux} (at most {MAX_MESSAGE})")]
    TooLong { mux: u32, length: usize },
}

/// The bytes that send `message` on the trunk: one mux frame holding one ttrpc message.
pub fn frame(message: &Message) -> Vec<u8> {
    let ttrpc_len = TTRPC_HEADER + message.payload.len();
    let mut out = Vec::with_capacity(MUX_HEADER + ttrpc_len);
    out.extend_from_slice(&message.mux.to_be_bytes());
    out.extend_from_slice(&(ttrpc_len as u32).to_be_bytes());
    out.extend_from_slice(&(message.payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&message.stream.to_be_bytes());
    out.push(message.kind);
    out.push(0);
    out.extend_from_slice(&message.payload);
    out
}

/// Reassembles the trunk's bytes into mux frames, and each mux stream's bytes into ttrpc
/// messages, however the reads cut them.
#[derive(Default)]
pub struct Demux {
    trunk: Vec<u8>,
    streams: HashMap<u32, Vec<u8>>,
}

impl Demux {
    /// Takes the next bytes read from the trunk; returns the messages they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Message>, WireError> {
        self.trunk.extend_from_slice(bytes);
        let mut at = 0;
        let mut touched = Vec::new();
        while self.trunk.len() - at >= MUX_HEADER {
            let mux = be32(&self.trunk[at..]);
            let length = be32(&self.trunk[at + 4..]) as usize;
            if length > TTRPC_HEADER + MAX_MESSAGE {
                return Err(WireError::TooLong { mux, length });
            }
            if self.trunk.len() - at - MUX_HEADER < length {
                break;
            }
            let body = &self.trunk[at + MUX_HEADER..at + MUX_HEADER + length];
            self.streams.entry(mux).or_default().extend_from_slice(body);
            if !touched.contains(&mux) {
                touched.push(mux);
            }
            at += MUX_HEADER + length;
        }
        self.trunk.drain(..at);
        let mut messages = Vec::new();
        for mux in touched {
            let stream = self.streams.entry(mux).or_default();
            let mut at = 0;
            while stream.len() - at >= TTRPC_HEADER {
                let length = be32(&stream[at..]) as usize;
                if length > MAX_MESSAGE {
                    return Err(WireError::TooLong { mux, length });
                }
                if stream.len() - at - TTRPC_HEADER < length {
                    break;
                }
                messages.push(Message {
                    mux,
                    stream: be32(&stream[at + 4..]),
                    kind: stream[at + 8],
                    payload: stream[at + TTRPC_HEADER..at + TTRPC_HEADER + length].to_vec(),
                });
                at += TTRPC_HEADER + length;
            }
            stream.drain(..at);
        }
        Ok(messages)
    }
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    fn message(mux: u32, stream: u32, payload: &[u8]) -> Message {
        Message {
            mux,
            stream,
            kind: REQUEST,
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn a_frame_is_the_mux_header_then_the_ttrpc_header_then_the_protobuf() {
        let bytes = frame(&message(RUNTIME_CONN, 3, b"abc"));
        assert_eq!(
            bytes,
            [0, 0, 0, 2, 0, 0, 0, 13, 0, 0, 0, 3, 0, 0, 0, 3, 1, 0, b'a', b'b', b'c']
        );
    }

    /// Each mux stream's messages, in the order they came on it (the streams are independent).
    fn by_stream(messages: &[Message]) -> Vec<Vec<Message>> {
        [PLUGIN_CONN, RUNTIME_CONN]
            .iter()
            .map(|mux| messages.iter().filter(|m| m.mux == *mux).cloned().collect())
            .collect()
    }

    #[test]
    fn messages_cut_anywhere_by_the_reads_come_out_whole_and_in_order() {
        let sent = [
            message(PLUGIN_CONN, 1, b"first"),
            message(RUNTIME_CONN, 1, &[7; 300]),
            message(PLUGIN_CONN, 3, b""),
        ];
        let trunk: Vec<u8> = sent.iter().flat_map(frame).collect();
        for cut in [1, 2, 7, 8, 9, 17, 64, trunk.len()] {
            let mut demux = Demux::default();
            let mut got = Vec::new();
            for piece in trunk.chunks(cut) {
                got.extend(demux.push(piece).unwrap());
            }
            assert_eq!(by_stream(&got), by_stream(&sent), "reads of {cut} bytes");
        }
    }

    #[test]
    fn a_message_split_over_two_mux_frames_is_joined() {
        let whole = frame(&message(RUNTIME_CONN, 5, b"split me"));
        let ttrpc = &whole[MUX_HEADER..];
        let (a, b) = ttrpc.split_at(6);
        let mut trunk = Vec::new();
        for part in [a, b] {
            trunk.extend_from_slice(&RUNTIME_CONN.to_be_bytes());
            trunk.extend_from_slice(&(part.len() as u32).to_be_bytes());
            trunk.extend_from_slice(part);
        }
        let got = Demux::default().push(&trunk).unwrap();
        assert_eq!(got, [message(RUNTIME_CONN, 5, b"split me")]);
    }

    #[test]
    fn a_length_beyond_ttrpcs_limit_is_refused() {
        let mut trunk = PLUGIN_CONN.to_be_bytes().to_vec();
        trunk.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            Demux::default().push(&trunk),
            Err(WireError::TooLong {
                mux: PLUGIN_CONN,
                length: u32::MAX as usize
            })
        );
    }

    #[test]
    fn a_request_round_trips_through_protobuf() {
        let request = Request {
            service: "nri.pkg.api.v1alpha1.Runtime".into(),
            method: "RegisterPlugin".into(),
            payload: vec![1, 2, 3],
            timeout_nano: 5_000_000_000,
            metadata: vec![],
        };
        assert_eq!(Request::decode(&*request.encode_to_vec()).unwrap(), request);
    }
}
