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

    #[test]
    fn reasons_are_cut_on_char_boundaries() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(100); // 200 bytes
        let b = bounded(&long);
        assert!(b.len() <= MAX_REASON && b.is_char_boundary(b.len()));
        assert_eq!(b.len(), 122);
    }
}
