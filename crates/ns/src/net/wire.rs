//! The conversation under [`super::Netlink`]: one `NETLINK_ROUTE` socket, one request at a time,
//! and every answer checked.
//!
//! Each request carries `NLM_F_ACK` and its own sequence number. The kernel answers a change
//! with an `NLMSG_ERROR` whose code is 0 (the acknowledgement) or a negative errno, and a dump
//! with its messages followed by `NLMSG_DONE` (whose code is the dump's errno, if any). With
//! `NETLINK_EXT_ACK` on, a refusal also carries the kernel's own sentence ("Unknown device
//! type", "Invalid prefix for given prefix length"), which goes into the error message next to
//! the errno's text. Messages with another sequence number (answers to an earlier request that
//! was given up) are skipped without being parsed.

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NlasIterator, NLM_F_ACK,
    NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_CREATE, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::error::Target;
use crate::{Error, NsKind, Result};

/// The kernel never sends a netlink datagram larger than 32 KiB unless asked to; twice that
/// leaves room and is still one allocation for the handle's life.
const RECEIVE_BUFFER: usize = 64 * 1024;
const NETLINK_HEADER_LEN: usize = 16;
/// `NLMSGERR_ATTR_MSG` of `linux/netlink.h`: the extended ack's human-readable message.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// A dump the kernel marks as interrupted (the table changed meanwhile) is asked again this often.
const DUMP_ATTEMPTS: usize = 5;

/// What a request is, for its error: the request's name and what it was aimed at.
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub name: &'static str,
    pub subject: Option<&'a str>,
}

impl Request<'_> {
    pub fn error(&self, message: impl Into<String>, errno: Option<nix::Error>) -> Error {
        Error::Netlink {
            request: self.name,
            target: Target {
                kind: Some(NsKind::Net),
                path: self.subject.map(Into::into),
                pid: None,
            },
            message: message.into(),
            errno,
        }
    }

    fn sys(&self, call: &'static str, err: std::io::Error) -> Error {
        Error::sys_at(
            call,
            Target {
                kind: Some(NsKind::Net),
                ..Target::default()
            },
            nix::Error::from_raw(err.raw_os_error().unwrap_or(libc::EIO)),
        )
    }
}

/// A new `NETLINK_ROUTE` socket, in the calling thread's network namespace.
pub(super) fn new_socket() -> nix::Result<OwnedFd> {
    let socket = Socket::new(NETLINK_ROUTE)
        .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    // SAFETY: the descriptor was just opened and is owned by `socket` alone.
    Ok(unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) })
}

/// An open `NETLINK_ROUTE` socket with its sequence counter and receive buffer.
pub(super) struct Wire {
    socket: Socket,
    sequence: u32,
    send: Vec<u8>,
    receive: Vec<u8>,
}

impl Wire {
    /// Takes a fresh `NETLINK_ROUTE` socket (see [`new_socket`]): binds it, connects it to the
    /// kernel, turns extended acks on and capped acks (the kernel does not echo our request back).
    pub fn over(socket: OwnedFd) -> Result<Wire> {
        let request = Request {
            name: "open socket",
            subject: None,
        };
        // SAFETY: `socket` is an open socket that this function now owns.
        let mut socket = unsafe { Socket::from_raw_fd(socket.into_raw_fd()) };
        socket
            .bind_auto()
            .map_err(|e| request.sys("bind(netlink)", e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| request.sys("connect(netlink)", e))?;
        socket
            .set_ext_ack(true)
            .map_err(|e| request.sys("setsockopt(NETLINK_EXT_ACK)", e))?;
        socket
            .set_cap_ack(true)
            .map_err(|e| request.sys("setsockopt(NETLINK_CAP_ACK)", e))?;
        Ok(Wire {
            socket,
            sequence: 0,
            send: Vec::new(),
            receive: Vec::with_capacity(RECEIVE_BUFFER),
        })
    }

    /// Sends a change (`flags` adds e.g. `NLM_F_CREATE | NLM_F_EXCL`) and waits for its
    /// acknowledgement; returns the messages the kernel sent before it (a GET's answer).
    pub fn change(
        &mut self,
        request: Request<'_>,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let (answers, _) = self.exchange(request, message, flags)?;
        Ok(answers)
    }

    /// Creates something that must not exist yet (`NLM_F_CREATE | NLM_F_EXCL`: EEXIST if it does).
    pub fn create(&mut self, request: Request<'_>, message: RouteNetlinkMessage) -> Result<()> {
        self.change(request, message, NLM_F_CREATE | NLM_F_EXCL)
            .map(drop)
    }

    /// Dumps a table: every message the kernel has of that kind.
    pub fn dump(
        &mut self,
        request: Request<'_>,
        message: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        for _ in 0..DUMP_ATTEMPTS {
            let (answers, interrupted) = self.exchange(request, message.clone(), NLM_F_DUMP)?;
            if !interrupted {
                return Ok(answers);
            }
        }
        Err(request.error(
            format!("the table kept changing during {DUMP_ATTEMPTS} dumps (NLM_F_DUMP_INTR)"),
            None,
        ))
    }

    fn exchange(
        &mut self,
        request: Request<'_>,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(Vec<RouteNetlinkMessage>, bool)> {
        self.sequence = self.sequence.wrapping_add(1);
        let sequence = self.sequence;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
        packet.finalize();
        self.send.clear();
        self.send.resize(packet.buffer_len(), 0);
        packet.serialize(&mut self.send);
        loop {
            match self.socket.send(&self.send, 0) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(request.sys("send(netlink)", e)),
                Ok(_) => break,
            }
        }
        self.await_answer(request, sequence)
    }

    /// Reads datagrams until the answer to `sequence` is complete.
    fn await_answer(
        &mut self,
        request: Request<'_>,
        sequence: u32,
    ) -> Result<(Vec<RouteNetlinkMessage>, bool)> {
        let mut answers = Vec::new();
        let mut interrupted = false;
        loop {
            self.receive.clear();
            let length = loop {
                match self.socket.recv(&mut self.receive, libc::MSG_TRUNC) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(request.sys("recv(netlink)", e)),
                    Ok(length) => break length,
                }
            };
            if length > self.receive.len() {
                return Err(request.error(
                    format!("an answer of {length} bytes did not fit the receive buffer"),
                    None,
                ));
            }
            let mut rest = &self.receive[..length];
            while !rest.is_empty() {
                let (one, after) = split_message(request, rest)?;
                rest = after;
                let header = NetlinkBuffer::new(one);
                if header.sequence_number() != sequence {
                    continue;
                }
                interrupted |= header.flags() & NLM_F_DUMP_INTR != 0;
                let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(one)
                    .map_err(|e| request.error(format!("unreadable answer: {e}"), None))?;
                match parsed.payload {
                    NetlinkPayload::InnerMessage(inner) => answers.push(inner),
                    NetlinkPayload::Error(error) => match error.code {
                        None => return Ok((answers, interrupted)),
                        Some(code) => {
                            let said = kernel_message(parsed.header.flags, &error.header);
                            return Err(refusal(request, code.get(), said));
                        }
                    },
                    NetlinkPayload::Done(done) if done.code < 0 => {
                        let said = attribute_message(&done.extended_ack);
                        return Err(refusal(request, done.code, said));
                    }
                    NetlinkPayload::Done(_) => return Ok((answers, interrupted)),
                    NetlinkPayload::Overrun(_) => {
                        return Err(request.error("the kernel reported an overrun", None))
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Splits the first netlink message off a datagram; returns it and the (aligned) rest.
fn split_message<'b>(request: Request<'_>, datagram: &'b [u8]) -> Result<(&'b [u8], &'b [u8])> {
    let length = NetlinkBuffer::new_checked(datagram)
        .map_err(|e| request.error(format!("unreadable answer: {e}"), None))?
        .length() as usize;
    if length < NETLINK_HEADER_LEN || length > datagram.len() {
        return Err(request.error(
            format!(
                "unreadable answer: a message of {length} bytes in {} bytes",
                datagram.len()
            ),
            None,
        ));
    }
    let aligned = (length + 3) & !3;
    Ok((
        &datagram[..length],
        &datagram[aligned.min(datagram.len())..],
    ))
}

/// The error for a negative errno from the kernel: the errno's text, its name, and what the
/// kernel said about it.
fn refusal(request: Request<'_>, code: i32, said: Option<String>) -> Error {
    let errno = nix::Error::from_raw(code.abs());
    let mut message = format!("{} ({errno:?})", errno.desc());
    if let Some(said) = said {
        message.push_str(": ");
        message.push_str(&said);
    }
    request.error(message, Some(errno))
}

/// The extended ack's message of an `NLMSG_ERROR`. Its payload (after the code) is the
/// request's header, then the request's body unless the ack is capped, then the attributes.
fn kernel_message(flags: u16, payload: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 || payload.len() < NETLINK_HEADER_LEN {
        return None;
    }
    let echoed = if flags & NLM_F_CAPPED != 0 {
        NETLINK_HEADER_LEN
    } else {
        NetlinkBuffer::new(payload).length() as usize
    };
    let echoed = (echoed + 3) & !3;
    attribute_message(payload.get(echoed..)?)
}

/// The `NLMSGERR_ATTR_MSG` among extended-ack attributes.
fn attribute_message(attributes: &[u8]) -> Option<String> {
    NlasIterator::new(attributes)
        .filter_map(|nla| nla.ok())
        .find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)
        .map(|nla| {
            let text = nla.value();
            let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
            String::from_utf8_lossy(&text[..end]).into_owned()
        })
        .filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(value);
        while bytes.len() % 4 != 0 {
            bytes.push(0);
        }
        bytes
    }

    #[test]
    fn the_kernels_sentence_is_found_after_a_capped_echo() {
        let mut payload = vec![0u8; NETLINK_HEADER_LEN];
        payload[0] = 40; // the echoed request claimed 40 bytes, but the echo is capped
        payload.extend(nla(3, &7u32.to_ne_bytes())); // NLMSGERR_ATTR_OFFS comes first
        payload.extend(nla(NLMSGERR_ATTR_MSG, b"Unknown device type\0"));
        assert_eq!(
            kernel_message(NLM_F_ACK_TLVS | NLM_F_CAPPED, &payload).as_deref(),
            Some("Unknown device type")
        );
        assert_eq!(kernel_message(NLM_F_CAPPED, &payload), None, "no TLV flag");
    }

    #[test]
    fn the_kernels_sentence_is_found_after_a_full_echo() {
        let mut payload = vec![0u8; 20];
        payload[0] = 20;
        payload.extend(nla(NLMSGERR_ATTR_MSG, b"Invalid prefix\0"));
        assert_eq!(
            kernel_message(NLM_F_ACK_TLVS, &payload).as_deref(),
            Some("Invalid prefix")
        );
    }

    #[test]
    fn a_refusal_names_the_errno_and_the_subject() {
        let request = Request {
            name: "set link up",
            subject: Some("eth9"),
        };
        let err = refusal(request, -libc::ENODEV, None);
        let text = err.to_string();
        assert!(text.contains("eth9"), "{text}");
        assert!(text.contains("No such device (ENODEV)"), "{text}");
        assert_eq!(err.errno(), Some(nix::Error::ENODEV));
    }

    #[test]
    fn a_datagram_splits_on_aligned_boundaries() {
        let request = Request {
            name: "test",
            subject: None,
        };
        let mut datagram = vec![0u8; 20 + 16];
        datagram[0] = 18; // 18 bytes, padded to 20
        datagram[20] = 16;
        let (first, rest) = split_message(request, &datagram).unwrap();
        assert_eq!((first.len(), rest.len()), (18, 16));
        datagram[20] = 99;
        assert!(split_message(request, &datagram[20..]).is_err());
    }
}
