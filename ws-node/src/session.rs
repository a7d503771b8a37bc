//! One WebSocket session: backlog, then live frames from the hub, until a close.
//!
//! Writing: every frame is encoded once (see [`crate::state::Frame`]) and the fan-out writes its
//! bytes straight to the session's socket with a non-blocking write, from the thread that applied
//! the event ([`Fanout`]: `Hub::apply` hands it each event with the sessions registered at that
//! moment); no task and no thread is woken for a delivery. Only when the kernel's send buffer is full (or the
//! session has not written its backlog yet) do bytes wait in the session's [`Outbox`], in order,
//! for the session task to write them when the socket is writable, several frames per system call.
//! All writes to a socket (frames, pings, pongs, close frames) go through its outbox, under its
//! lock, so they leave in order. Frames waiting beyond the session's bound close it with 1013,
//! and waiting bytes that make no progress for `write_timeout` drop it.
//!
//! Reading: tungstenite parses what the client sends (its pong and close replies are routed to
//! the outbox). Clients send only control frames. Anything else is a protocol problem, answered
//! with the RFC 6455 §7.4.1 close code that names it and logged as a warning labelled
//! `ws.protocol_error` (close code, a bounded reason, origin, user agent; never the payload).

use crate::hub::{CloseOrder, Hub, SessionHandle};
use crate::state::{Backlog, Frame};
use bytes::{Buf, Bytes};
use shared::protocol::{close, ServerMessage};
use shared::ws::{classify_ws as classify, encode_close, encode_ping, is_connection_loss_ws};
use shared::CanvasId;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tungstenite::protocol::{Role, WebSocketContext};
use tungstenite::Message;

/// Waiting chunks written per system call at most.
const IOV: usize = 64;

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

/// What [`Outbox::offer`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Written, or queued behind bytes that wait.
    Taken,
    /// The session already has its bound of frames waiting.
    Full,
    /// The session ended or is closing.
    Closed,
}

/// A session's ordered writer, shared by the hub's fan-out (through the [`SessionHandle`]) and the
/// session task.
#[derive(Debug)]
pub struct Outbox {
    st: Mutex<OutState>,
    /// Frames (not control frames) that may wait at most.
    limit: usize,
    /// Wakes the session task: bytes wait, a close order, a failed write, the handle dropped.
    wake: Notify,
    ended: AtomicBool,
    ended_notify: Notify,
}

#[derive(Debug, Default)]
struct OutState {
    /// The socket; `None` before the session starts writing (and in tests) and after it ended.
    sock: Option<Arc<TcpStream>>,
    /// The backlog is in `pending`: frames may be written directly when nothing waits.
    started: bool,
    /// The session is sending its close frame: no more frames.
    closing: bool,
    /// Bytes to write, in order; the flag tells a frame counted against `limit`.
    pending: VecDeque<(Bytes, bool)>,
    /// Counted frames in `pending`.
    queued: usize,
    /// The first chunk of `pending` is partly written (it must be finished before anything else).
    front_partial: bool,
    /// When bytes started waiting or last made progress.
    progress: Option<Instant>,
    order: Option<CloseOrder>,
    handle_gone: bool,
    failed: Option<String>,
}

/// What the session task acts on, read under the outbox lock.
struct Status {
    order: Option<CloseOrder>,
    handle_gone: bool,
    failed: Option<String>,
    /// When waiting bytes last made progress (`None` when nothing waits).
    waiting_since: Option<Instant>,
}

impl Outbox {
    /// An outbox that lets at most `limit` frames wait.
    pub fn new(limit: usize) -> Self {
        Self { st: Mutex::new(OutState::default()), limit: limit.max(1), wake: Notify::new(), ended: AtomicBool::new(false), ended_notify: Notify::new() }
    }

    fn lock(&self) -> MutexGuard<'_, OutState> {
        // Nothing panics while the lock is held.
        self.st.lock().expect("outbox lock poisoned")
    }

    /// Whether frames are no longer taken: the session is closing, ordered closed, failed or ended.
    fn refuses(&self, st: &OutState) -> bool {
        st.closing || st.order.is_some() || st.failed.is_some() || self.ended.load(Ordering::Relaxed)
    }

    /// Writes `frame` to the socket now when nothing waits before it and the kernel takes it,
    /// else queues it (or what the kernel did not take) for the session task. Never blocks.
    pub fn offer(&self, frame: &Frame) -> Offer {
        let mut st = self.lock();
        if self.refuses(&st) {
            return Offer::Closed;
        }
        if !st.pending.is_empty() || !st.started || st.sock.is_none() {
            if st.queued >= self.limit {
                return Offer::Full;
            }
            self.enqueue(&mut st, frame.wire().clone(), true);
            return Offer::Taken;
        }
        if self.write_direct(&mut st, frame.wire(), true) {
            Offer::Taken
        } else {
            Offer::Closed
        }
    }

    /// [`Outbox::offer`] for several frames, written with one system call when nothing waits.
    pub fn offer_many(&self, frames: Vec<Bytes>) -> Offer {
        let mut st = self.lock();
        if self.refuses(&st) {
            return Offer::Closed;
        }
        let direct = st.pending.is_empty() && st.started && st.sock.is_some();
        if !direct {
            for f in frames {
                if st.queued >= self.limit {
                    return Offer::Full;
                }
                self.enqueue(&mut st, f, true);
            }
            return Offer::Taken;
        }
        st.queued += frames.len();
        st.pending.extend(frames.into_iter().map(|f| (f, true)));
        match Self::flush_locked(&mut st) {
            Ok(true) => Offer::Taken,
            Ok(false) => {
                // The kernel took part: the session task writes the rest.
                st.progress = Some(Instant::now());
                self.wake.notify_one();
                if st.queued > self.limit {
                    Offer::Full
                } else {
                    Offer::Taken
                }
            }
            Err(_) => {
                self.wake.notify_one();
                Offer::Closed
            }
        }
    }

    /// Writes a control frame (ping, pong, close reply) in order with the frames. Waiting control
    /// frames count against the same bound as frames: a client that sends pings faster than it
    /// reads the pongs ends its session instead of growing the node's memory.
    fn push_raw(&self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        let mut st = self.lock();
        if st.failed.is_some() {
            return;
        }
        if !st.pending.is_empty() || !st.started || st.sock.is_none() {
            if st.queued >= self.limit {
                st.failed = Some("the client sends control frames faster than it reads the replies".into());
                self.wake.notify_one();
                return;
            }
            self.enqueue(&mut st, bytes, true);
        } else {
            self.write_direct(&mut st, &bytes, false);
        }
    }

    fn enqueue(&self, st: &mut OutState, bytes: Bytes, counted: bool) {
        if st.pending.is_empty() {
            st.progress = Some(Instant::now());
            self.wake.notify_one();
        }
        st.queued += usize::from(counted);
        st.pending.push_back((bytes, counted));
    }

    /// Writes `bytes` with nothing waiting; queues the rest when the kernel takes only part.
    /// Returns false when the socket failed.
    fn write_direct(&self, st: &mut OutState, bytes: &Bytes, counted: bool) -> bool {
        let sock = st.sock.as_ref().expect("direct writes need a socket");
        match sock.try_write(bytes) {
            Ok(n) if n == bytes.len() => true,
            Ok(n) => {
                st.front_partial = n > 0;
                self.enqueue(st, bytes.slice(n..), counted);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.enqueue(st, bytes.clone(), counted);
                true
            }
            Err(e) => {
                st.failed = Some(e.to_string());
                self.wake.notify_one();
                false
            }
        }
    }

    /// Writes what waits, as much as the kernel takes. Returns whether nothing waits any more.
    fn flush_locked(st: &mut OutState) -> Result<bool, String> {
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        let Some(sock) = st.sock.clone() else { return Ok(st.pending.is_empty()) };
        while !st.pending.is_empty() {
            let slices: Vec<IoSlice<'_>> = st.pending.iter().take(IOV).map(|(b, _)| IoSlice::new(b)).collect();
            let written = match sock.try_write_vectored(&slices) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => {
                    st.failed = Some(e.to_string());
                    return Err(e.to_string());
                }
            };
            drop(slices);
            st.progress = Some(Instant::now());
            let mut left = written;
            while left > 0 {
                let (front, counted) = st.pending.front_mut().expect("written bytes were queued");
                if front.len() <= left {
                    left -= front.len();
                    let counted = *counted;
                    st.pending.pop_front();
                    st.queued -= usize::from(counted);
                    st.front_partial = false;
                } else {
                    front.advance(left);
                    st.front_partial = true;
                    left = 0;
                }
            }
        }
        st.progress = None;
        Ok(true)
    }

    /// Writes what waits, as much as the kernel takes. Returns whether nothing waits any more.
    fn flush(&self) -> Result<bool, String> {
        Self::flush_locked(&mut self.lock())
    }

    /// Starts writing on `sock`: `first` (welcome and backlog) before any frame queued since the
    /// session was registered.
    fn start(&self, sock: Arc<TcpStream>, first: Vec<Bytes>) {
        let mut st = self.lock();
        for b in first.into_iter().rev() {
            st.pending.push_front((b, false));
        }
        st.sock = Some(sock);
        st.started = true;
        if !st.pending.is_empty() {
            st.progress = Some(Instant::now());
            let _ = Self::flush_locked(&mut st);
        }
    }

    /// Stops taking frames and queues `close` after what is being written (whole frames that
    /// did not start are dropped: the client resumes by version).
    fn begin_close(&self, close: Bytes) {
        let mut st = self.lock();
        st.closing = true;
        let keep = usize::from(st.front_partial);
        st.pending.truncate(keep);
        st.queued = st.pending.iter().filter(|(_, c)| *c).count();
        if !close.is_empty() {
            st.pending.push_back((close, false));
        }
        st.progress = Some(Instant::now());
        let _ = Self::flush_locked(&mut st);
    }

    fn status(&self) -> Status {
        let st = self.lock();
        Status {
            order: st.order.clone(),
            handle_gone: st.handle_gone,
            failed: st.failed.clone(),
            waiting_since: if st.pending.is_empty() { None } else { st.progress },
        }
    }

    /// Orders the session closed with `order` (the latest order wins).
    pub fn order_close(&self, order: CloseOrder) {
        self.lock().order = Some(order);
        self.wake.notify_one();
    }

    /// The hub's handle is gone: the session was handed over without an order.
    pub fn handle_dropped(&self) {
        self.lock().handle_gone = true;
        self.wake.notify_one();
    }

    /// The session task ended: releases the socket and wakes [`Outbox::closed`].
    pub fn finish(&self) {
        {
            let mut st = self.lock();
            st.sock = None;
            st.pending.clear();
            st.queued = 0;
        }
        self.ended.store(true, Ordering::SeqCst);
        self.ended_notify.notify_waiters();
    }

    /// Whether the session task has ended.
    pub fn is_closed(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Resolves when the session task has ended.
    pub async fn closed(&self) {
        loop {
            let notified = self.ended_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    /// The close order given, if any.
    pub fn order(&self) -> Option<CloseOrder> {
        self.lock().order.clone()
    }

    /// Frames (and control frames) waiting to be written.
    pub fn waiting(&self) -> usize {
        self.lock().queued
    }

    /// Takes the bytes waiting (for tests without a socket).
    pub fn take_waiting(&self) -> Vec<Bytes> {
        let mut st = self.lock();
        st.queued = 0;
        st.pending.drain(..).map(|(b, _)| b).collect()
    }
}

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
pub async fn run(socket: WebSocket, hub: &Hub, spec: SessionSpec) {
    let _open = hub.session_guard();
    let id = hub.next_session_id();
    let cfg = *socket.get_config();
    // The session writes to the TCP socket itself (non-blocking, from the fan-out), so it takes
    // the socket out of hyper's upgrade, with the bytes hyper read past the handshake.
    let upgraded = socket.into_inner().into_inner();
    let parts = match upgraded.downcast::<hyper_util::rt::TokioIo<shared::serve::Conn>>() {
        Ok(parts) => parts,
        Err(_) => {
            tracing::error!(session = id, canvas = %spec.canvas, "the upgraded connection is not a TCP stream; dropping it");
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
    let (handle, rx) = SessionHandle::new(id, spec.canvas.clone(), spec.partition, spec.queue);
    let out = rx.out.clone();
    let start = match hub.subscribe_at(handle, spec.since, spec.epoch.as_ref()) {
        Ok(start) => start,
        Err(refusal) => {
            // The handshake checks passed but ownership moved in between: tell the client to retry.
            let msg: Frame = ServerMessage::Error { code: "not_served_here".into(), message: refusal.to_string(), retry_after_ms: Some(1000) }
                .to_json()
                .into();
            out.start(sock.clone(), vec![msg.wire().clone(), encode_close(close::TRY_AGAIN_LATER, &refusal.to_string())]);
            flush_until(&out, &sock, Instant::now() + spec.write_timeout).await;
            tracing::info!(session = id, canvas = %spec.canvas, reason = %refusal, "session refused after upgrade");
            hub.counters.closed(Some(close::TRY_AGAIN_LATER));
            return;
        }
    };
    if start.since != spec.since {
        tracing::debug!(session = id, canvas = %spec.canvas, since = spec.since, client_epoch = ?spec.epoch.as_ref().map(|e| e.as_str()),
            epoch = %start.epoch, "the client's epoch is not the canvas's current one: it gets a snapshot");
    }
    let welcome: Frame = ServerMessage::Welcome { node: spec.node_id.clone(), canvas: spec.canvas.to_string(), since: start.since, epoch: Some(start.epoch) }
        .to_json()
        .into();
    let (first, kind) = match start.backlog {
        Backlog::Events(fs) => (std::iter::once(welcome).chain(fs).map(|f| f.wire().clone()).collect::<Vec<_>>(), "events"),
        Backlog::Snapshot { frame, .. } => (vec![welcome.wire().clone(), frame.wire().clone()], "snapshot"),
        Backlog::Behind { .. } => (vec![welcome.wire().clone()], "none"),
    };
    tracing::debug!(session = id, canvas = %spec.canvas, since = spec.since, backlog = kind, frames = first.len(), "session started");
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
    hub.unsubscribe(&spec.canvas, id);
    hub.counters.closed(end.close_code());
    let deadline = Instant::now() + spec.write_timeout;
    match end {
        End::ClientClosed(_) => {
            // Completes the closing handshake: sends the close reply tungstenite made.
            out.begin_close(close_reply);
            flush_until(&out, &sock, deadline).await;
            tracing::debug!(session = id, canvas = %spec.canvas, "client closed the session");
        }
        End::Unresponsive => tracing::info!(session = id, canvas = %spec.canvas, "client answered no ping; dropping the session"),
        End::Ordered(code, reason) => {
            out.begin_close(encode_close(code, &reason));
            flush_until(&out, &sock, deadline).await;
            linger(&mut ctx, &sock).await;
            tracing::debug!(session = id, canvas = %spec.canvas, code, reason = %reason, "session closed by the node");
        }
        End::Protocol(code, reason) => {
            out.begin_close(encode_close(code, &reason));
            flush_until(&out, &sock, deadline).await;
            linger(&mut ctx, &sock).await;
            shared::ws::log_protocol_error(code, &reason, &spec.peer.origin, &spec.peer.user_agent);
        }
        End::WriteFailed(e) => tracing::debug!(session = id, canvas = %spec.canvas, error = %e, "session connection lost"),
        End::SocketError(e) => tracing::error!(session = id, canvas = %spec.canvas, error = %e, "websocket error; session ended"),
    }
    // Dropping `rx` releases the outbox's socket; the last reference closes it.
    drop(rx);
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

/// The fan-out writer: writes each event's frame to the sessions registered when it was applied.
///
/// [`Hub::apply`] hands it (sessions, frame) under the hub lock, in apply order
/// ([`Fanout::send`]), and after releasing the lock calls [`Fanout::write_pending`]: the first
/// thread to get there writes everything handed over so far, and keeps writing what other threads
/// (the broadcast consumer, the release reader) hand over meanwhile; the others return at once.
/// One writer at a time and a FIFO queue keep every session's frames in apply order, and the
/// applying thread writes itself: no thread is woken per event (a dedicated writer thread cost a
/// wake-up and a context switch per handed-over batch: 7–9 % of the node's CPU at 5,000 events/s).
/// To each session, all of its frames of a batch leave in one system call; nothing waits to fill
/// a batch. A session gets only the events applied after it registered (the list of sessions is
/// taken under the hub lock).
pub struct Fanout {
    shared: Arc<FanoutShared>,
}

struct FanoutShared {
    jobs: Mutex<Jobs>,
    idle: std::sync::Condvar,
    slow_closed: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Jobs {
    queue: Vec<(Vec<Arc<Outbox>>, Frame)>,
    /// A thread is writing (it takes what is queued before it stops).
    busy: bool,
}

impl Fanout {
    /// A writer with nothing queued.
    pub fn new() -> Self {
        let shared = Arc::new(FanoutShared {
            jobs: Mutex::new(Jobs::default()),
            idle: std::sync::Condvar::new(),
            slow_closed: std::sync::atomic::AtomicU64::new(0),
        });
        Self { shared }
    }

    /// Queues `frame` for `sessions` (called under the hub lock, in apply order); written by the
    /// next [`Fanout::write_pending`].
    pub fn send(&self, sessions: Vec<Arc<Outbox>>, frame: Frame) {
        self.shared.jobs.lock().expect("fan-out lock poisoned").queue.push((sessions, frame));
    }

    /// Writes what is queued, unless another thread is writing (it takes it). Call without the
    /// hub lock. Never blocks on a socket: what the kernel does not take waits in the session's
    /// outbox for its task.
    pub fn write_pending(&self) {
        self.shared.write_pending();
    }

    /// Events queued and not yet being written.
    pub fn queued(&self) -> usize {
        self.shared.jobs.lock().expect("fan-out lock poisoned").queue.len()
    }

    /// Writes what is queued and waits until everything handed over was written or queued in
    /// outboxes (tests).
    pub fn settle(&self) {
        self.write_pending();
        let mut jobs = self.shared.jobs.lock().expect("fan-out lock poisoned");
        while !jobs.queue.is_empty() || jobs.busy {
            jobs = self.shared.idle.wait(jobs).expect("fan-out lock poisoned");
        }
    }

    /// Sessions closed so far because too many of their frames waited.
    pub fn slow_closed(&self) -> u64 {
        self.shared.slow_closed.load(Ordering::Relaxed)
    }
}

impl Default for Fanout {
    fn default() -> Self {
        Self::new()
    }
}

/// Clears the writer's `busy` flag if its turn ends in a panic (a panic while writing must not stop
/// every later fan-out of the node); a normal turn clears it itself, under the same lock as its
/// last look at the queue, so a frame queued after that look is written by whoever queued it.
struct WriterTurn<'a>(&'a FanoutShared);

impl Drop for WriterTurn<'_> {
    fn drop(&mut self) {
        self.0.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).busy = false;
        self.0.idle.notify_all();
    }
}

impl FanoutShared {
    fn write_pending(&self) {
        let mut batch = Vec::new();
        let mut jobs = self.jobs.lock().expect("fan-out lock poisoned");
        if jobs.busy {
            return;
        }
        jobs.busy = true;
        let turn = WriterTurn(self);
        loop {
            if jobs.queue.is_empty() {
                jobs.busy = false;
                drop(jobs);
                std::mem::forget(turn);
                self.idle.notify_all();
                return;
            }
            std::mem::swap(&mut batch, &mut jobs.queue);
            drop(jobs);
            self.write(&mut batch);
            batch.clear();
            jobs = self.jobs.lock().expect("fan-out lock poisoned");
        }
    }

    fn write(&self, batch: &mut [(Vec<Arc<Outbox>>, Frame)]) {
        let mut slow = Vec::new();
        if let [(sessions, frame)] = batch {
            for s in sessions.iter() {
                if s.offer(frame) == Offer::Full {
                    slow.push(s.clone());
                }
            }
        } else {
            // Each session's frames, in order, for one write each.
            let mut index: std::collections::HashMap<*const Outbox, usize> = std::collections::HashMap::new();
            let mut per: Vec<(Arc<Outbox>, Vec<Bytes>)> = Vec::new();
            for (sessions, frame) in batch.iter_mut() {
                for s in sessions.drain(..) {
                    let i = *index.entry(Arc::as_ptr(&s)).or_insert_with(|| {
                        per.push((s.clone(), Vec::new()));
                        per.len() - 1
                    });
                    per[i].1.push(frame.wire().clone());
                }
            }
            for (s, frames) in per {
                if s.offer_many(frames) == Offer::Full {
                    slow.push(s);
                }
            }
        }
        if !slow.is_empty() {
            for s in &slow {
                s.order_close(CloseOrder { code: close::TRY_AGAIN_LATER, reason: "slow consumer: outbound queue full; resume with since".into() });
            }
            self.slow_closed.fetch_add(slow.len() as u64, Ordering::Relaxed);
            tracing::warn!(sessions = slow.len(), "closing sessions too slow to keep up (1013)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_frames_waiting_beyond_the_bound_end_the_session() {
        // No socket yet: everything waits, as for a client that does not read.
        let out = Outbox::new(4);
        for _ in 0..4 {
            out.push_raw(encode_ping());
        }
        assert!(out.status().failed.is_none(), "within the bound nothing fails");
        assert_eq!(out.take_waiting().len(), 4);
        for _ in 0..5 {
            out.push_raw(encode_ping());
        }
        assert!(out.status().failed.is_some(), "a fifth waiting control frame ends the session");
        assert_eq!(out.take_waiting().len(), 4, "nothing is queued past the bound");
    }
}
