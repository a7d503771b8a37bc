//! WebSocket helpers shared by the node and the gateway: close frames, and which read errors are
//! the peer's protocol errors (RFC 6455 §7.4.1 codes) rather than a lost connection.

use crate::protocol::close;
use axum::extract::ws::{CloseFrame, Message};

/// Longest close reason we send (RFC 6455 §5.5: a control frame's payload is at most 125 bytes,
/// 2 of them for the code).
pub const MAX_REASON: usize = 123;

/// A close frame with `code` and `reason` cut to fit a control frame.
pub fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: bounded(reason).into() }))
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
    use tungstenite::error::{CapacityError, Error as WsError, ProtocolError};
    let inner = std::error::Error::source(e).and_then(|s| s.downcast_ref::<WsError>());
    match inner? {
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
    use std::io::ErrorKind;
    use tungstenite::error::{Error as WsError, ProtocolError};
    match std::error::Error::source(e).and_then(|s| s.downcast_ref::<WsError>()) {
        Some(WsError::ConnectionClosed | WsError::AlreadyClosed) => true,
        Some(WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake)) => true,
        Some(WsError::Io(io)) => matches!(
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
    fn reasons_are_cut_on_char_boundaries() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(100); // 200 bytes
        let b = bounded(&long);
        assert!(b.len() <= MAX_REASON && b.is_char_boundary(b.len()));
        assert_eq!(b.len(), 122);
    }
}
