//! One WebSocket session: backlog, then live frames from the hub, until a close.
//!
//! Writing: every frame is encoded once (see [`crate::state::Frame`]) and the fan-out
//! ([`crate::fanout::Fanout`]: `Hub::apply` hands it each event with the sessions registered at
//! that moment) writes its bytes straight to the session's socket with a non-blocking write, from
//! the thread that applied the event; no task and no thread is woken for a delivery. What the
//! kernel does not take waits in the session's [`Outbox`], which this task writes when the socket
//! is writable. Frames waiting beyond the session's bound close it with 1013, and waiting bytes
//! that make no progress for `write_timeout` drop it.
//!
//! Reading: tungstenite parses what the client sends (its pong and close replies are routed to
//! the outbox). Clients send only control frames. Anything else is a protocol problem, answered
//! with the RFC 6455 §7.4.1 close code that names it and logged as a warning labelled
//! `ws.protocol_error` (close code, a bounded reason, origin, user agent; never the payload).

use crate::hub::{Hub, SessionHandle};
use crate::outbox::Outbox;
use crate::state::{Backlog, Frame};
use bytes::Bytes;
use shared::http::ApiError;
use shared::protocol::{close, FrameStyle, ServerMessage, WsQuery, SUBSCRIBE_WAIT};
use shared::ws::{classify_ws as classify, encode_close, encode_ping, is_connection_loss_ws};
use shared::ChannelId;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tungstenite::protocol::{Role, WebSocketContext};
use tungstenite::Message;

/// Who is on the other end, for logs.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    pub origin: String,
    pub user_agent: String,
}

/// What the session serves.
#[derive(Debug)]
pub struct SessionSpec {
    pub channel: ChannelId,
    /// Which frames it is sent (`channel=` or today's `canvas=`).
    pub style: FrameStyle,
    pub partition: i32,
    pub since: u64,
    /// The epoch the client's versions belong to (`epoch=`; `None` when it sent none).
    pub epoch: Option<shared::epoch::Epoch>,
    pub queue: usize,
    pub write_timeout: Duration,
    /// Interval of WebSocket pings to the client (liveness both ways; a client silent for three
    /// intervals is dropped).
    pub ping_interval: Duration,
    pub peer: Peer,
    /// This node's id, named in the session's `welcome` frame.
    pub node_id: String,
    /// When the client's token expires (`None`: no token needed): the session is then closed
    /// with 1008 Policy Violation, reason `token expired`, and the client reconnects with a
    /// fresh token.
    pub expires: Option<Instant>,
    /// The session's seat ([`crate::admission`]), released when the session ends.
    pub seat: Option<crate::admission::Seat>,
}

/// Admits the session a `subscribe` frame asks for (the handshake's checks), or refuses it.
pub type Admit = Box<dyn FnOnce(WsQuery) -> futures::future::BoxFuture<'static, Result<SessionSpec, ApiError>> + Send>;

/// How a session starts.
pub enum Opening {
    /// Its query named the channel and the handshake admitted it.
    Admitted(SessionSpec),
    /// Its query named none: the client's first frame, `subscribe`, does (within
    /// [`SUBSCRIBE_WAIT`]), and `admit` decides. A refusal is an `error` frame naming the channel,
    /// then 1013 Try Again Later for a refusal for now (with `retry_after_ms`) or 1008 Policy
    /// Violation for good.
    Subscribing { admit: Admit, peer: Peer },
}

/// Why the session ended (for the log line at its end).
#[derive(Debug)]
enum End {
    /// With the client's close code, if its close frame had one.
    ClientClosed(Option<u16>),
    Ordered(u16, String),
    Protocol(u16, String),
    WriteFailed(String),
    /// Nothing (not even a pong) came from the client for three ping intervals.
    Unresponsive,
    /// A socket error that is neither the peer's protocol error nor the connection going away.
    SocketError(String),
}

impl End {
    /// The close code the session ended with (`None`: the connection ended without one).
    fn close_code(&self) -> Option<u16> {
        match self {
            End::ClientClosed(code) => Some(code.unwrap_or(close::NO_STATUS)),
            End::Ordered(code, _) | End::Protocol(code, _) => Some(*code),
            End::WriteFailed(_) | End::Unresponsive | End::SocketError(_) => None,
        }
    }
}

/// The upgraded connection a session runs on.
pub type WebSocket = tokio_tungstenite::WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

/// tungstenite's view of the socket: reads without blocking; what it writes (pong and close
/// replies) is collected for the outbox.
struct ReadSide<'a> {
    sock: &'a TcpStream,
    replies: &'a mut Vec<u8>,
}

impl io::Read for ReadSide<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.try_read(buf)
    }
}

impl io::Write for ReadSide<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.replies.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs the session on `socket` until it ends.
pub async fn run(socket: WebSocket, hub: &Hub, opening: Opening) {
    let _open = hub.session_guard();
    let id = hub.next_session_id();
    let cfg = *socket.get_config();
    // The session writes to the TCP socket itself (non-blocking, from the fan-out), so it takes
    // the socket out of hyper's upgrade, with the bytes hyper read past the handshake.
    let upgraded = socket.into_inner().into_inner();
    let parts = match upgraded.downcast::<hyper_util::rt::TokioIo<shared::serve::Conn>>() {
        Ok(parts) => parts,
        Err(_) => {
            tracing::error!(session = id, "the upgraded connection is not a TCP stream; dropping it");
            return;
        }
    };
    let hyper::upgrade::Parts { io, read_buf, .. } = parts;
    // The slot of the server's connection cap stays taken while the session runs.
    let (sock, _slot) = io.into_inner().into_parts();
    let sock = Arc::new(sock);
    let mut ctx = if read_buf.is_empty() {
        WebSocketContext::new(Role::Server, Some(cfg))
    } else {
        WebSocketContext::from_partially_read(read_buf.to_vec(), Role::Server, Some(cfg))
    };
    // Even empty, `read_buf` may be a slice of hyper's read buffer: holding it would pin that
    // buffer (8 KiB and more) for the connection's life.
    drop(read_buf);
    let spec = match opening {
        Opening::Admitted(spec) => spec,
        Opening::Subscribing { admit, peer } => match subscribed(&mut ctx, &sock).await {
            Ok(q) => {
                let channel = q.id().to_string();
                match admit(q).await {
                    Ok(spec) => spec,
                    Err(e) => return refuse(&mut ctx, &sock, hub, id, Some(channel), e, &peer).await,
                }
            }
            Err(NotSubscribed::Refused(e)) => return refuse(&mut ctx, &sock, hub, id, None, e, &peer).await,
            Err(NotSubscribed::Protocol(code, reason)) => {
                // As in a session: the close code the WebSocket layer's refusal calls for.
                tracing::info!(session = id, code, reason, origin = %peer.origin, "session refused: its first frame broke the protocol");
                write_all(&sock, &encode_close(code, reason), Instant::now() + Duration::from_secs(5)).await;
                linger(&mut ctx, &sock).await;
                hub.counters.closed(Some(code));
                return;
            }
            Err(NotSubscribed::Lost) => {
                hub.counters.closed(None);
                return;
            }
        },
    };
    let (handle, rx) = SessionHandle::of_style(id, spec.channel.clone(), spec.partition, spec.queue, spec.style);
    let out = rx.out.clone();
    let start = match hub.subscribe_at(handle, spec.since, spec.epoch.as_ref()) {
        Ok(start) => start,
        Err(refusal) => {
            // The handshake checks passed but ownership moved in between: tell the client to retry.
            let channel = (spec.style == FrameStyle::Channel).then(|| spec.channel.to_string());
            let msg: Frame = ServerMessage::Error { code: "not_served_here".into(), message: refusal.to_string(), retry_after_ms: Some(1000), channel }
                .to_json()
                .into();
            out.start(sock.clone(), vec![msg.wire().clone(), encode_close(close::TRY_AGAIN_LATER, &refusal.to_string())]);
            flush_until(&out, &sock, Instant::now() + spec.write_timeout).await;
            tracing::info!(session = id, channel = %spec.channel, reason = %refusal, "session refused after upgrade");
            hub.counters.closed(Some(close::TRY_AGAIN_LATER));
            return;
        }
    };
    if start.since != spec.since {
        tracing::debug!(session = id, channel = %spec.channel, since = spec.since, client_epoch = ?spec.epoch.as_ref().map(|e| e.as_str()),
            epoch = %start.epoch, "the client's epoch is not the channel's current one: it gets the state");
    }
    let (canvas, channel, model) = match spec.style {
        FrameStyle::Canvas => (Some(spec.channel.to_string()), None, None),
        FrameStyle::Channel => (None, Some(spec.channel.to_string()), Some(hub.model_of(&spec.channel).kind())),
    };
    let welcome: Frame = ServerMessage::Welcome { node: spec.node_id.clone(), canvas, channel, model, since: start.since, epoch: Some(start.epoch) }
        .to_json()
        .into();
    let (first, kind) = match start.backlog {
        Backlog::Events(fs) => (std::iter::once(welcome).chain(fs).map(|f| f.wire().clone()).collect::<Vec<_>>(), "events"),
        Backlog::Snapshot { frame, .. } => (vec![welcome.wire().clone(), frame.wire().clone()], "snapshot"),
        Backlog::Reset { frame, .. } => (vec![welcome.wire().clone(), frame.wire().clone()], "reset"),
        Backlog::Behind { .. } => (vec![welcome.wire().clone()], "none"),
    };
    tracing::debug!(session = id, channel = %spec.channel, since = spec.since, backlog = kind, frames = first.len(), "session started");
    // From here the fan-out writes to the socket directly once the backlog is out.
    hub.counters.backlog(kind == "snapshot", first.len() - 1, first.iter().skip(1).map(Bytes::len).sum());
    out.start(sock.clone(), first);

    let mut replies = Vec::new();
    let mut close_reply = Bytes::new();
    let mut ping = tokio::time::interval_at(Instant::now() + spec.ping_interval, spec.ping_interval);
    let mut last_heard = Instant::now();
    let expires = spec.expires;
    let end = loop {
        let status = out.status();
        if let Some(o) = status.order {
            break End::Ordered(o.code, o.reason);
        }
        if status.handle_gone {
            break End::Ordered(close::SERVICE_RESTART, "session handed over".into());
        }
        if let Some(e) = status.failed {
            break End::WriteFailed(e);
        }
        let waiting = status.waiting_since.is_some();
        let deadline = status.waiting_since.map_or_else(Instant::now, |t| t + spec.write_timeout);
        tokio::select! {
            // Orders and failures first; then the client (its close frames and pongs); then
            // writing what waits; then the deadline and the ping timer.
            biased;
            () = out.wake.notified() => {}
            ready = sock.readable() => {
                if let Err(e) = ready {
                    break End::SocketError(e.to_string());
                }
                let read = read_ready(&mut ctx, &sock, &mut replies, &mut last_heard);
                let made = Bytes::from(std::mem::take(&mut replies));
                match read {
                    Ok(()) => {
                        out.push_raw(made);
                        // The client may have more to read: let other tasks run first.
                        tokio::task::yield_now().await;
                    }
                    Err(End::ClientClosed(code)) => {
                        close_reply = made;
                        break End::ClientClosed(code);
                    }
                    Err(end) => break end,
                }
            }
            ready = sock.writable(), if waiting => {
                if let Err(e) = ready {
                    break End::WriteFailed(e.to_string());
                }
                if let Err(e) = out.flush() {
                    break End::WriteFailed(e);
                }
            }
            () = tokio::time::sleep_until(deadline), if waiting => {
                // Progress is checked again: the write may have moved just now.
                if out.status().waiting_since.is_some_and(|t| t.elapsed() >= spec.write_timeout) {
                    break End::WriteFailed(format!("write blocked for more than {:?}", spec.write_timeout));
                }
            }
            () = sleep_until_some(expires), if expires.is_some() => {
                break End::Ordered(close::POLICY_VIOLATION, shared::client_token::TokenError::Expired.close_reason());
            }
            _ = ping.tick() => {
                if last_heard.elapsed() > spec.ping_interval * 3 {
                    break End::Unresponsive;
                }
                out.push_raw(encode_ping());
            }
        }
    };
    hub.unsubscribe(&spec.channel, id);
    hub.counters.closed(end.close_code());
    let deadline = Instant::now() + spec.write_timeout;
    match end {
        End::ClientClosed(_) => {
            // Completes the closing handshake: sends the close reply tungstenite made.
            out.begin_close(close_reply);
            flush_until(&out, &sock, deadline).await;
            tracing::debug!(session = id, channel = %spec.channel, "client closed the session");
        }
        End::Unresponsive => tracing::info!(session = id, channel = %spec.channel, "client answered no ping; dropping the session"),
        End::Ordered(code, reason) => {
            out.begin_close(encode_close(code, &reason));
            flush_until(&out, &sock, deadline).await;
            linger(&mut ctx, &sock).await;
            tracing::debug!(session = id, channel = %spec.channel, code, reason = %reason, "session closed by the node");
        }
        End::Protocol(code, reason) => {
            out.begin_close(encode_close(code, &reason));
            flush_until(&out, &sock, deadline).await;
            linger(&mut ctx, &sock).await;
            shared::ws::log_protocol_error(code, &reason, &spec.peer.origin, &spec.peer.user_agent);
        }
        End::WriteFailed(e) => tracing::debug!(session = id, channel = %spec.channel, error = %e, "session connection lost"),
        End::SocketError(e) => tracing::error!(session = id, channel = %spec.channel, error = %e, "websocket error; session ended"),
    }
    // Dropping `rx` releases the outbox's socket; the last reference closes it.
    drop(rx);
}

/// Reads the client's first message, which must be a `subscribe` frame, within [`SUBSCRIBE_WAIT`]
/// (pings before it are answered by the client's next read, not here).
///
/// # Errors
/// [`NotSubscribed`]: 400 naming the frame's bad field, or `subscribe_expected` (a refusal for
/// good) when none came; a frame the WebSocket layer refuses; the client gone.
async fn subscribed(ctx: &mut WebSocketContext, sock: &TcpStream) -> Result<WsQuery, NotSubscribed> {
    let deadline = Instant::now() + SUBSCRIBE_WAIT;
    let mut ignored = Vec::new();
    loop {
        if !matches!(tokio::time::timeout_at(deadline, sock.readable()).await, Ok(Ok(()))) {
            return Err(NotSubscribed::Refused(ApiError::bad_request("subscribe_expected", format!("no subscribe frame within {} s of the handshake", SUBSCRIBE_WAIT.as_secs()))));
        }
        loop {
            ignored.clear();
            match ctx.read(&mut ReadSide { sock, replies: &mut ignored }) {
                Ok(Message::Text(t)) => return shared::http::parse_subscribe(t.as_str()).map_err(NotSubscribed::Refused),
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => {}
                Ok(Message::Binary(_)) => return Err(NotSubscribed::Refused(ApiError::bad_request("subscribe_expected", "the first frame must be a subscribe text frame"))),
                Ok(Message::Close(_)) => return Err(NotSubscribed::Lost),
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    return Err(match shared::ws::classify_ws(&e) {
                        Some((code, reason)) => NotSubscribed::Protocol(code, reason),
                        None => NotSubscribed::Lost,
                    })
                }
            }
        }
    }
}

/// Why a connection opened without a channel has no subscription.
enum NotSubscribed {
    /// Its subscribe frame is refused (or none came): an `error` frame and a close code.
    Refused(ApiError),
    /// Its first frame broke the WebSocket protocol (too big, bad UTF-8): that close code, as in
    /// a session ([`shared::ws::classify_ws`]).
    Protocol(u16, &'static str),
    /// The client went away, or closed, before subscribing.
    Lost,
}

/// Refuses a session after its upgrade: the `error` frame (naming `channel` when known; with
/// `retry_after_ms` for a 503), then the close code (1013 Try Again Later for a 503, 1008 Policy
/// Violation otherwise), written straight to the socket.
async fn refuse(ctx: &mut WebSocketContext, sock: &TcpStream, hub: &Hub, id: u64, channel: Option<String>, e: ApiError, peer: &Peer) {
    let (code, retry_after_ms) = match e.retry_after_secs {
        Some(secs) if e.status.as_u16() == 503 => (close::TRY_AGAIN_LATER, Some(secs * 1000)),
        _ => (close::POLICY_VIOLATION, None),
    };
    tracing::info!(session = id, channel = ?channel, code = %e.body.error, origin = %peer.origin, "session refused after its subscribe frame");
    let frame: Frame = ServerMessage::Error { code: e.body.error.clone(), message: e.body.message.clone(), retry_after_ms, channel }.to_json().into();
    let reason = format!("{}: not served", e.body.error);
    let mut bytes = frame.wire().to_vec();
    bytes.extend_from_slice(&encode_close(code, &reason));
    write_all(sock, &bytes, Instant::now() + Duration::from_secs(5)).await;
    linger(ctx, sock).await;
    hub.counters.closed(Some(code));
}

/// Writes `bytes` to `sock` until done, the socket fails, or `deadline`.
async fn write_all(sock: &TcpStream, mut bytes: &[u8], deadline: Instant) {
    while !bytes.is_empty() {
        if !matches!(tokio::time::timeout_at(deadline, sock.writable()).await, Ok(Ok(()))) {
            return;
        }
        match sock.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Sleeps until `at` (forever when `None`; the caller guards the branch).
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Messages read from a client per wake-up at most; then the task yields, so a client that never
/// stops sending cannot hold a runtime worker.
const READ_BATCH: usize = 64;

/// Reads and handles what the client sent until reading would block, or [`READ_BATCH`] messages.
/// Pong and close replies that tungstenite makes are appended to `replies`.
fn read_ready(ctx: &mut WebSocketContext, sock: &TcpStream, replies: &mut Vec<u8>, last_heard: &mut Instant) -> Result<(), End> {
    for _ in 0..READ_BATCH {
        let mut io = ReadSide { sock, replies };
        let msg = match ctx.read(&mut io) {
            Ok(msg) => msg,
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => {
                return Err(match classify(&e) {
                    Some((code, reason)) => End::Protocol(code, reason.into()),
                    None if is_connection_loss_ws(&e) => End::WriteFailed(format!("read: {e}")),
                    None => End::SocketError(e.to_string()),
                })
            }
        };
        match msg {
            Message::Close(frame) => {
                // tungstenite queued the close reply; have it written into `replies`.
                let _ = ctx.flush(&mut io);
                return Err(End::ClientClosed(frame.map(|f| u16::from(f.code))));
            }
            Message::Ping(_) | Message::Pong(_) => *last_heard = Instant::now(),
            Message::Text(t) => {
                *last_heard = Instant::now();
                if serde_json::from_str::<serde::de::IgnoredAny>(t.as_str()).is_err() {
                    return Err(End::Protocol(close::INVALID_PAYLOAD, "text frame is not JSON".into()));
                }
            }
            Message::Binary(_) => return Err(End::Protocol(close::UNSUPPORTED_DATA, "binary frames are not accepted".into())),
            // Reading yields whole messages, never raw frames.
            Message::Frame(_) => {}
        }
    }
    Ok(())
}

/// Writes what waits in `out` until nothing does, the socket fails, or `deadline`.
async fn flush_until(out: &Outbox, sock: &TcpStream, deadline: Instant) {
    loop {
        match out.flush() {
            Ok(false) => {}
            Ok(true) | Err(_) => return,
        }
        if !matches!(tokio::time::timeout_at(deadline, sock.writable()).await, Ok(Ok(()))) {
            return;
        }
    }
}

/// After our close frame: reads (and drops) what the client still sends, until its close reply or
/// 1 s, instead of dropping the socket at once. A socket closed with unread data is reset by the
/// kernel, and a reset can destroy our close frame before the peer reads it.
async fn linger(ctx: &mut WebSocketContext, sock: &TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut discard = Vec::new();
        loop {
            if sock.readable().await.is_err() {
                return;
            }
            loop {
                discard.clear();
                match ctx.read(&mut ReadSide { sock, replies: &mut discard }) {
                    Ok(Message::Close(_)) => return,
                    Ok(_) => {}
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return,
                }
            }
        }
    })
    .await;
}
