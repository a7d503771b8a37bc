//! WebSocket helpers shared by the node and the gateway: close frames, and which read errors are
//! the peer's protocol errors (RFC 6455 §7.4.1 codes) rather than a lost connection.

use crate::protocol::close;
use axum::extract::ws::{CloseFrame, Message};

/// Longest close reason we send (RFC 6455 §5.5: a control frame's payload is at most 125 bytes,
/// 2 of them for the code).
pub const MAX_REASON: usize = 123;

/// A close frame with `code` and `reason` cut to fit a control frame (axum's message type).
pub fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: bounded(reason).into() }))
}

/// The same close frame as tungstenite's message type.
pub fn close_frame(code: u16, reason: &str) -> tungstenite::Message {
    tungstenite::Message::Close(Some(tungstenite::protocol::CloseFrame { code: code.into(), reason: bounded(reason).into() }))
}

/// Fragments of at most this many payload bytes carry a long text message (RFC 6455 §5.4).
/// tungstenite keeps its write buffer at the capacity of the largest frame it ever wrote, so a
/// 16 KiB snapshot sent as one frame would stay resident for the connection's life.
pub const FRAGMENT: usize = 2048;

/// `text` as the frames to send: one text frame when it fits in [`FRAGMENT`] bytes, else a
/// fragmented message (a text frame, continuation frames, the last one final), which every
/// WebSocket client reassembles into the one message.
pub fn text_frames(text: tungstenite::Utf8Bytes) -> Vec<tungstenite::Message> {
    use tungstenite::protocol::frame::coding::{Data, OpCode};
    use tungstenite::protocol::frame::Frame;
    let bytes: bytes::Bytes = text.clone().into();
    if bytes.len() <= FRAGMENT {
        return vec![tungstenite::Message::Text(text)];
    }
    let n = bytes.len().div_ceil(FRAGMENT);
    (0..n)
        .map(|i| {
            let chunk = bytes.slice(i * FRAGMENT..((i + 1) * FRAGMENT).min(bytes.len()));
            let opcode = if i == 0 { OpCode::Data(Data::Text) } else { OpCode::Data(Data::Continue) };
            tungstenite::Message::Frame(Frame::message(chunk, opcode, i + 1 == n))
        })
        .collect()
}

/// `text` as the bytes of the frames a server sends for it (unmasked, so the same for every
/// client): one final text frame when it fits in [`FRAGMENT`] bytes, else a text frame and
/// continuation frames of at most [`FRAGMENT`] payload bytes, the last one final (RFC 6455 §5.4).
/// Encoded once per message and written to every session as is.
pub fn encode_text(text: &[u8]) -> bytes::Bytes {
    let n = text.len().div_ceil(FRAGMENT).max(1);
    let mut out = Vec::with_capacity(text.len() + n * 4);
    for i in 0..n {
        let chunk = &text[(i * FRAGMENT).min(text.len())..((i + 1) * FRAGMENT).min(text.len())];
        let opcode = if i == 0 { 0x1 } else { 0x0 };
        let fin = if i + 1 == n { 0x80 } else { 0 };
        push_frame(&mut out, fin | opcode, chunk);
    }
    out.into()
}

/// [`encode_text`] of the text `write` appends to an empty buffer, with one allocation and no
/// copy when it fits in one frame ([`FRAGMENT`] bytes): the text is written after room for the
/// largest header it can need, and the header goes right before it.
pub fn encode_text_with(write: impl FnOnce(&mut Vec<u8>)) -> bytes::Bytes {
    use bytes::Buf;
    const ROOM: usize = 4; // a header for up to 65,535 payload bytes
    let mut out = Vec::with_capacity(160);
    out.resize(ROOM, 0);
    write(&mut out);
    let n = out.len() - ROOM;
    if n > FRAGMENT {
        return encode_text(&out[ROOM..]);
    }
    let start = if n < 126 {
        out[ROOM - 2..ROOM].copy_from_slice(&[0x81, n as u8]);
        ROOM - 2
    } else {
        out[..ROOM].copy_from_slice(&[0x81, 126, (n >> 8) as u8, n as u8]);
        0
    };
    let mut b = bytes::Bytes::from(out);
    b.advance(start);
    b
}

/// The bytes of a close frame with `code` and `reason` (cut to fit a control frame).
pub fn encode_close(code: u16, reason: &str) -> bytes::Bytes {
    let reason = bounded(reason).as_bytes();
    let mut payload = Vec::with_capacity(2 + reason.len());
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(reason);
    let mut out = Vec::with_capacity(4 + payload.len());
    push_frame(&mut out, 0x88, &payload);
    out.into()
}

/// The bytes of an empty ping frame.
pub fn encode_ping() -> bytes::Bytes {
    bytes::Bytes::from_static(&[0x89, 0x00])
}

/// Appends an unmasked frame: `first` is the FIN bit and opcode, then the length and `payload`.
fn push_frame(out: &mut Vec<u8>, first: u8, payload: &[u8]) {
    out.push(first);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= u16::MAX as usize => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// `s` cut to at most [`MAX_REASON`] bytes on a character boundary (also used to bound what
/// goes into logs).
pub fn bounded(s: &str) -> &str {
    if s.len() <= MAX_REASON {
        return s;
    }
    let mut end = MAX_REASON;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Maps a read error to the close code that names the peer's protocol error, or `None` for
/// errors of the connection itself (reset without a closing handshake, I/O errors).
pub fn classify(e: &axum::Error) -> Option<(u16, &'static str)> {
    classify_ws(std::error::Error::source(e).and_then(|s| s.downcast_ref::<tungstenite::Error>())?)
}

/// [`classify`] for tungstenite's error type.
pub fn classify_ws(e: &tungstenite::Error) -> Option<(u16, &'static str)> {
    use tungstenite::error::{CapacityError, Error as WsError, ProtocolError};
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { .. }) => Some((close::MESSAGE_TOO_BIG, "message too big")),
        WsError::Capacity(_) => Some((close::MESSAGE_TOO_BIG, "frame too big")),
        WsError::Utf8(_) => Some((close::INVALID_PAYLOAD, "text frame is not valid UTF-8")),
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        WsError::Protocol(_) => Some((close::PROTOCOL_ERROR, "websocket protocol error")),
        _ => None,
    }
}

/// Whether a read error is the connection going away (a reset without a closing handshake, a
/// broken pipe, an EOF): normal on real networks, not worth an error line.
pub fn is_connection_loss(e: &axum::Error) -> bool {
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<tungstenite::Error>()).is_some_and(is_connection_loss_ws)
}

/// [`is_connection_loss`] for tungstenite's error type.
pub fn is_connection_loss_ws(e: &tungstenite::Error) -> bool {
    use std::io::ErrorKind;
    use tungstenite::error::{Error as WsError, ProtocolError};
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => true,
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => true,
        WsError::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::UnexpectedEof | ErrorKind::ConnectionAborted
        ),
        _ => false,
    }
}

/// Logs a peer's protocol error as the warning operators filter on (`ws.protocol_error`):
/// close code, a bounded reason, origin and user agent, never the payload.
pub fn log_protocol_error(code: u16, reason: &str, origin: &str, user_agent: &str) {
    tracing::warn!(
        event = "ws.protocol_error",
        close_code = code,
        reason = %bounded(reason),
        origin = %bounded(origin),
        user_agent = %bounded(user_agent),
        "closing a connection that broke the WebSocket protocol"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_written_in_place_is_framed_as_encode_text_frames_it() {
        for len in [0, 1, 125, 126, 127, 2047, 2048, 2049, 70_000] {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert_eq!(encode_text_with(|out| out.extend_from_slice(&text)), encode_text(&text), "{len} bytes");
        }
    }

    #[test]
    fn long_texts_leave_as_fragments_of_at_most_fragment_bytes() {
        use tungstenite::protocol::frame::coding::{Data, OpCode};
        assert!(matches!(text_frames("short".into()).as_slice(), [tungstenite::Message::Text(t)] if t.as_str() == "short"));
        let exact = "x".repeat(FRAGMENT);
        assert!(matches!(text_frames(exact.clone().into()).as_slice(), [tungstenite::Message::Text(_)]));
        let long: String = (0..FRAGMENT * 2 + 7).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let frames = text_frames(long.clone().into());
        assert_eq!(frames.len(), 3);
        let mut joined = Vec::new();
        for (i, m) in frames.iter().enumerate() {
            let tungstenite::Message::Frame(f) = m else { panic!("frame {i} is not a raw frame") };
            let h = f.header();
            assert_eq!(h.opcode, if i == 0 { OpCode::Data(Data::Text) } else { OpCode::Data(Data::Continue) }, "frame {i}");
            assert_eq!(h.is_final, i == 2, "frame {i}");
            assert!(f.payload().len() <= FRAGMENT);
            joined.extend_from_slice(f.payload());
        }
        assert_eq!(joined, long.as_bytes());
    }

    /// Parses `wire` as a server's frames with tungstenite: (opcode, final, payload) of each.
    fn parse(wire: &[u8]) -> Vec<(tungstenite::protocol::frame::coding::OpCode, bool, Vec<u8>)> {
        use tungstenite::protocol::frame::FrameHeader;
        let mut cur = std::io::Cursor::new(wire);
        let mut out = Vec::new();
        while (cur.position() as usize) < wire.len() {
            let (h, len) = FrameHeader::parse(&mut cur).unwrap().expect("a whole header");
            assert!(h.mask.is_none(), "server frames are unmasked");
            let at = cur.position() as usize;
            out.push((h.opcode, h.is_final, wire[at..at + len as usize].to_vec()));
            cur.set_position((at + len as usize) as u64);
        }
        out
    }

    #[test]
    fn encoded_texts_are_the_frames_tungstenite_would_send() {
        use tungstenite::protocol::frame::coding::{Data, OpCode};
        for len in [0, 5, 125, 126, 127, 300, FRAGMENT, FRAGMENT + 1, FRAGMENT * 2 + 7, 70_000] {
            let text: String = (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            let frames = parse(&encode_text(text.as_bytes()));
            assert_eq!(frames.len(), len.div_ceil(FRAGMENT).max(1), "{len}");
            let mut joined = Vec::new();
            for (i, (op, fin, payload)) in frames.iter().enumerate() {
                assert_eq!(*op, if i == 0 { OpCode::Data(Data::Text) } else { OpCode::Data(Data::Continue) });
                assert_eq!(*fin, i + 1 == frames.len());
                assert!(payload.len() <= FRAGMENT);
                joined.extend_from_slice(payload);
            }
            assert_eq!(joined, text.as_bytes());
            // The same bytes as tungstenite's own formatting when it fits in one frame.
            if len <= FRAGMENT {
                let f = tungstenite::protocol::frame::Frame::message(text.clone(), OpCode::Data(Data::Text), true);
                let mut theirs = Vec::new();
                f.format(&mut theirs).unwrap();
                assert_eq!(&encode_text(text.as_bytes())[..], &theirs[..], "{len}");
            }
        }
    }

    #[test]
    fn encoded_control_frames() {
        use tungstenite::protocol::frame::coding::{Control, OpCode};
        let frames = parse(&encode_close(1013, &"x".repeat(300)));
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].0, OpCode::Control(Control::Close));
        assert_eq!(&frames[0].2[..2], &1013u16.to_be_bytes());
        assert_eq!(frames[0].2.len(), 2 + MAX_REASON);
        assert_eq!(parse(&encode_ping()), vec![(OpCode::Control(Control::Ping), true, vec![])]);
    }

    #[test]
    fn reasons_are_cut_on_char_boundaries() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(100); // 200 bytes
        let b = bounded(&long);
        assert!(b.len() <= MAX_REASON && b.is_char_boundary(b.len()));
        assert_eq!(b.len(), 122);
    }
}
