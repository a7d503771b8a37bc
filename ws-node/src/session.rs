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
use tungstenite::Message;
use futures::{SinkExt, StreamExt};
use shared::protocol::{close, ServerMessage};
use shared::ws::{classify_ws as classify, close_frame as close_message, is_connection_loss_ws, text_frames};
use shared::CanvasId;
use std::time::Duration;

/// Frames written per flush at most.
const BATCH: usize = 64;

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
    /// Interval of WebSocket pings to the client (liveness both ways; a client silent for three
    /// intervals is dropped).
    pub ping_interval: Duration,
    pub peer: Peer,
    /// This node's id, named in the session's `welcome` frame.
    pub node_id: String,
}

/// Why the session ended (for the log line at its end).
#[derive(Debug)]
enum End {
    ClientClosed,
    Ordered(u16, String),
    Protocol(u16, String),
    WriteFailed(String),
    /// Nothing (not even a pong) came from the client for three ping intervals.
    Unresponsive,
    /// A socket error that is neither the peer's protocol error nor the connection going away.
    SocketError(String),
}

/// The upgraded connection a session runs on.
pub type WebSocket = tokio_tungstenite::WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

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
            let msg = ServerMessage::Error { code: "not_served_here".into(), message: refusal.to_string(), retry_after_ms: Some(1000) };
            let _ = sink.send(Message::Text(msg.to_json().into())).await;
            let _ = sink.send(close_message(close::TRY_AGAIN_LATER, &refusal.to_string())).await;
            tracing::info!(session = id, canvas = %spec.canvas, reason = %refusal, "session refused after upgrade");
            return;
        }
    };
    let welcome: Frame = ServerMessage::Welcome { node: spec.node_id.clone(), canvas: spec.canvas.to_string(), since: spec.since }
        .to_json()
        .into();
    let (backlog_frames, kind) = match backlog {
        Backlog::Events(fs) => (std::iter::once(welcome).chain(fs).collect::<Vec<_>>(), "events"),
        Backlog::Snapshot { frame, .. } => (vec![welcome, frame], "snapshot"),
        Backlog::Behind { .. } => (vec![welcome], "none"),
    };
    tracing::debug!(session = id, canvas = %spec.canvas, since = spec.since, backlog = kind, frames = backlog_frames.len(), "session started");

    let end = 'session: {
        if let Err(e) = write_all(&mut sink, backlog_frames, spec.write_timeout).await {
            break 'session End::WriteFailed(e);
        }
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + spec.ping_interval, spec.ping_interval);
        let mut last_heard = tokio::time::Instant::now();
        loop {
            tokio::select! {
                // Close orders first; then the client (its close frames and pongs must not wait
                // behind a busy queue); then frames; then the ping timer.
                biased;
                changed = rx.control.changed() => {
                    let order = rx.control.borrow().clone();
                    match (changed, order) {
                        (_, Some(o)) => break 'session End::Ordered(o.code, o.reason),
                        (Err(_), None) => break 'session End::Ordered(close::SERVICE_RESTART, "session handed over".into()),
                        (Ok(()), None) => {}
                    }
                }
                msg = stream.next() => match msg {
                    None | Some(Ok(Message::Close(_))) => break 'session End::ClientClosed,
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => last_heard = tokio::time::Instant::now(),
                    Some(Ok(Message::Text(t))) => {
                        last_heard = tokio::time::Instant::now();
                        if serde_json::from_str::<serde::de::IgnoredAny>(t.as_str()).is_err() {
                            break 'session End::Protocol(close::INVALID_PAYLOAD, "text frame is not JSON".into());
                        }
                    }
                    Some(Ok(Message::Binary(_))) => {
                        break 'session End::Protocol(close::UNSUPPORTED_DATA, "binary frames are not accepted".into());
                    }
                    // Reading yields whole messages, never raw frames.
                    Some(Ok(Message::Frame(_))) => {}
                    Some(Err(e)) => match classify(&e) {
                        Some((code, reason)) => break 'session End::Protocol(code, reason.into()),
                        None if is_connection_loss_ws(&e) => break 'session End::WriteFailed(format!("read: {e}")),
                        None => break 'session End::SocketError(e.to_string()),
                    },
                },
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
                _ = ping.tick() => {
                    if last_heard.elapsed() > spec.ping_interval * 3 {
                        break 'session End::Unresponsive;
                    }
                    let sent = tokio::time::timeout(spec.write_timeout, sink.send(Message::Ping(Default::default()))).await;
                    if !matches!(sent, Ok(Ok(()))) {
                        break 'session End::WriteFailed("ping could not be written".into());
                    }
                }
            }
        }
    };
    hub.unsubscribe(&spec.canvas, id);
    match end {
        End::ClientClosed => {
            // Completes the closing handshake: sends the close reply tungstenite queued.
            let _ = tokio::time::timeout(spec.write_timeout, sink.close()).await;
            tracing::debug!(session = id, canvas = %spec.canvas, "client closed the session");
        }
        End::Unresponsive => tracing::info!(session = id, canvas = %spec.canvas, "client answered no ping; dropping the session"),
        End::Ordered(code, reason) => {
            let _ = tokio::time::timeout(spec.write_timeout, sink.send(close_message(code, &reason))).await;
            linger(&mut stream).await;
            tracing::debug!(session = id, canvas = %spec.canvas, code, reason = %reason, "session closed by the node");
        }
        End::Protocol(code, reason) => {
            let _ = tokio::time::timeout(spec.write_timeout, sink.send(close_message(code, &reason))).await;
            linger(&mut stream).await;
            shared::ws::log_protocol_error(code, &reason, &spec.peer.origin, &spec.peer.user_agent);
        }
        End::WriteFailed(e) => tracing::debug!(session = id, canvas = %spec.canvas, error = %e, "session connection lost"),
        End::SocketError(e) => tracing::error!(session = id, canvas = %spec.canvas, error = %e, "websocket error; session ended"),
    }
}

/// After our close frame: reads (and drops) what the client still sends, until its close reply or
/// 1 s, instead of dropping the socket at once. A socket closed with unread data is reset by the
/// kernel, and a reset can destroy our close frame before the peer reads it.
async fn linger(stream: &mut futures::stream::SplitStream<WebSocket>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(Ok(msg)) = stream.next().await {
            if matches!(msg, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
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
            for m in text_frames(f) {
                sink.feed(m).await?;
            }
        }
        sink.flush().await
    };
    match tokio::time::timeout(deadline, work).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("write blocked for more than {deadline:?}")),
    }
}
