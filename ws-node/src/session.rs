//! One WebSocket session: backlog, then live frames from the hub, until a close.
//!
//! The writer sends the backlog the hub computed at registration (events after `since`, or a
//! snapshot), then frames from the session's bounded queue (batched: up to 64 frames per flush),
//! and obeys close orders from the hub or a drain. Every write has a deadline, so a client that
//! stops reading cannot hold the task forever.
//!
//! Clients send only control frames. Anything else is a protocol problem, answered with the
//! RFC 6455 §7.4.1 close code that names it and logged as a warning labelled `ws.protocol_error`
//! (close code, a bounded reason, origin, user agent; never the payload).

use crate::hub::{Hub, SessionHandle};
use crate::state::{Backlog, Frame};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::{SinkExt, StreamExt};
use shared::protocol::{close, ServerMessage};
use shared::CanvasId;
use std::time::Duration;

/// Frames written per flush at most.
const BATCH: usize = 64;
/// Longest close reason we send (RFC 6455 §5.5: control frame payload ≤ 125 bytes, 2 for the code).
const MAX_REASON: usize = 123;

/// Who is on the other end, for logs.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    pub origin: String,
    pub user_agent: String,
}

/// What the session serves.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub canvas: CanvasId,
    pub partition: i32,
    pub since: u64,
    pub queue: usize,
    pub write_timeout: Duration,
    pub peer: Peer,
}

/// Why the session ended (for the log line at its end).
#[derive(Debug)]
enum End {
    ClientClosed,
    Ordered(u16, String),
    Protocol(u16, String),
    WriteFailed(String),
}

/// Runs the session on `socket` until it ends.
pub async fn run(socket: WebSocket, hub: &Hub, spec: SessionSpec) {
    let _open = hub.session_guard();
    let id = hub.next_session_id();
    let (handle, mut rx) = SessionHandle::new(id, spec.canvas.clone(), spec.partition, spec.queue);
    let (mut sink, mut stream) = socket.split();
    let backlog = match hub.subscribe(handle, spec.since) {
        Ok(b) => b,
        Err(refusal) => {
            // The handshake checks passed but ownership moved in between: tell the client to retry.
            let msg = ServerMessage::Error { code: "not_served_here".into(), message: refusal.to_string() };
            let _ = sink.send(Message::Text(msg.to_json().into())).await;
            let _ = sink.send(close_message(close::TRY_AGAIN_LATER, &refusal.to_string())).await;
            tracing::info!(session = id, canvas = %spec.canvas, reason = %refusal, "session refused after upgrade");
            return;
        }
    };
    let (backlog_frames, kind) = match backlog {
        Backlog::Events(fs) => (fs, "events"),
        Backlog::Snapshot { frame, .. } => (vec![frame], "snapshot"),
        Backlog::Behind { .. } => (Vec::new(), "none"),
    };
    tracing::debug!(session = id, canvas = %spec.canvas, since = spec.since, backlog = kind, frames = backlog_frames.len(), "session started");

    let end = 'session: {
        if let Err(e) = write_all(&mut sink, backlog_frames, spec.write_timeout).await {
            break 'session End::WriteFailed(e);
        }
        loop {
            tokio::select! {
                biased;
                changed = rx.control.changed() => {
                    let order = rx.control.borrow().clone();
                    match (changed, order) {
                        (_, Some(o)) => break 'session End::Ordered(o.code, o.reason),
                        (Err(_), None) => break 'session End::Ordered(close::SERVICE_RESTART, "session handed over".into()),
                        (Ok(()), None) => {}
                    }
                }
                frame = rx.frames.recv() => match frame {
                    Some(first) => {
                        let mut batch = vec![first];
                        while batch.len() < BATCH {
                            match rx.frames.try_recv() {
                                Ok(f) => batch.push(f),
                                Err(_) => break,
                            }
                        }
                        if let Err(e) = write_all(&mut sink, batch, spec.write_timeout).await {
                            break 'session End::WriteFailed(e);
                        }
                    }
                    None => {
                        let order = rx.control.borrow().clone();
                        break 'session match order {
                            Some(o) => End::Ordered(o.code, o.reason),
                            None => End::Ordered(close::SERVICE_RESTART, "session handed over".into()),
                        };
                    }
                },
                msg = stream.next() => match msg {
                    None | Some(Ok(Message::Close(_))) => break 'session End::ClientClosed,
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Text(t))) => {
                        if serde_json::from_str::<serde::de::IgnoredAny>(t.as_str()).is_err() {
                            break 'session End::Protocol(close::INVALID_PAYLOAD, "text frame is not JSON".into());
                        }
                    }
                    Some(Ok(Message::Binary(_))) => {
                        break 'session End::Protocol(close::UNSUPPORTED_DATA, "binary frames are not accepted".into());
                    }
                    Some(Err(e)) => match classify(&e) {
                        Some((code, reason)) => break 'session End::Protocol(code, reason.into()),
                        None => break 'session End::WriteFailed(format!("read: {e}")),
                    },
                },
            }
        }
    };
    hub.unsubscribe(&spec.canvas, id);
    match end {
        End::ClientClosed => tracing::debug!(session = id, canvas = %spec.canvas, "client closed the session"),
        End::Ordered(code, reason) => {
            let _ = tokio::time::timeout(spec.write_timeout, sink.send(close_message(code, &reason))).await;
            tracing::debug!(session = id, canvas = %spec.canvas, code, reason = %reason, "session closed by the node");
        }
        End::Protocol(code, reason) => {
            let _ = tokio::time::timeout(spec.write_timeout, sink.send(close_message(code, &reason))).await;
            tracing::warn!(
                event = "ws.protocol_error",
                session = id,
                close_code = code,
                reason = %bounded(&reason),
                origin = %bounded(&spec.peer.origin),
                user_agent = %bounded(&spec.peer.user_agent),
                "closing a session that broke the protocol"
            );
        }
        End::WriteFailed(e) => tracing::debug!(session = id, canvas = %spec.canvas, error = %e, "session connection lost"),
    }
}

async fn write_all(
    sink: &mut futures::stream::SplitSink<WebSocket, Message>,
    frames: Vec<Frame>,
    deadline: Duration,
) -> Result<(), String> {
    if frames.is_empty() {
        return Ok(());
    }
    let work = async {
        for f in frames {
            sink.feed(Message::Text(f)).await?;
        }
        sink.flush().await
    };
    match tokio::time::timeout(deadline, work).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("write blocked for more than {deadline:?}")),
    }
}

/// A close frame with `reason` cut to fit a control frame.
pub fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: bounded(reason).into() }))
}

/// `s` cut to at most [`MAX_REASON`] bytes on a character boundary.
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

/// Maps a read error to the close code that names it, `None` for errors of the connection itself
/// (reset without a closing handshake, I/O errors): those are not the client's protocol errors.
fn classify(e: &axum::Error) -> Option<(u16, &'static str)> {
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
