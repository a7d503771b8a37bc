//! The HTTP server every service runs its router with (instead of `axum::serve`), with the
//! limits that hold under bad input:
//!
//! - a **header-read timeout**: a connection that has not sent a whole request head within
//!   [`ServeLimits::header_read_timeout`] of the moment the server started waiting for one (on
//!   connect, and again after each answer on a kept-alive connection) is closed — a slowloris
//!   (headers sent a byte at a time, or not at all) holds a socket that long at most;
//! - a **cap on concurrent connections** ([`ServeLimits::max_connections`]): a connection over it
//!   is answered at once with a minimal `HTTP/1.1 503` + `Retry-After` and the JSON error body
//!   `too_many_connections`, and closed — never queued. A WebSocket counts for as long as it lives:
//!   the permit is held by the connection's IO, which the upgraded connection keeps;
//! - a **body-read deadline**: a request's body must arrive whole within
//!   [`ServeLimits::body_read_timeout`] of its head (a total, not a per-read timeout, so a body
//!   sent a byte at a time is bounded too); past it the handler's read fails and the answer is
//!   `408 body_timeout` ([`crate::http::ApiError::from_body_rejection`]), so `Content-Length: 100`
//!   and one byte hold a connection no longer than that;
//! - `TCP_NODELAY` on every accepted socket (see [`crate::http::no_delay`] for why).
//!
//! Handlers can extract `ConnectInfo<SocketAddr>` (the peer's address), as with axum's
//! `into_make_service_with_connect_info`.
//!
//! Connections are served with hyper's HTTP/1 server (`with_upgrades`, for WebSockets). HTTP/2
//! is not offered: every client of the fleet speaks HTTP/1.1, and hyper's version detection (the
//! "auto" server) waits for the first bytes before any header timeout starts, so a peer that
//! sends nothing would hold its socket for ever.
//!
//! Shutdown: when the `shutdown` future completes the listener stops accepting, every connection
//! is asked to finish (in-flight requests are answered, idle keep-alive connections close), and
//! [`serve`] returns when they have all ended — the semantics of axum's
//! `with_graceful_shutdown`. Upgraded connections (WebSockets) are the handlers' own business
//! from the upgrade on, as with axum.

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Default of `HEADER_READ_TIMEOUT_MS`: long enough for a slow mobile link to send a request
/// head (a few hundred bytes), short enough that idle sockets do not pile up.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;

/// Default of `BODY_READ_TIMEOUT_MS`: a publish batch of a few MB over a slow link arrives in
/// well under this.
pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 30_000;

/// How long the fleet's own HTTP clients (the gateway's, to nodes and publishers) keep an idle
/// connection: below the servers' header-read timeout, which also closes idle kept-alive
/// connections, so a client never reuses a connection the server is closing at that moment (a
/// request lost in that race would have an unknown outcome). Keep `HEADER_READ_TIMEOUT_MS` of
/// nodes and publishers above it.
pub const CLIENT_POOL_IDLE: Duration = Duration::from_secs(4);

/// `Retry-After` of the answer to a connection over the cap, seconds.
pub const REFUSED_RETRY_AFTER_SECS: u64 = 1;

/// Connections over the cap being answered at once (each for at most [`REFUSAL_LINGER`]); beyond
/// this the socket is closed without an answer, so a flood costs no more than this many sockets.
const MAX_REFUSING: usize = 256;
/// How long a refused connection's request head is waited for before the 503 is written anyway.
const REFUSAL_HEAD_WAIT: Duration = Duration::from_millis(300);

/// How long a refused connection is answered and then read (and discarded) at most, its request
/// head wait included, so the peer's request
/// bytes do not make the close a reset that could destroy the answer before the peer reads it.
const REFUSAL_LINGER: Duration = Duration::from_millis(1000);

/// Default of `MAX_CONNECTIONS`: room for a node's 10k+ sessions with headroom (each connection
/// is one file descriptor; the gateway holds one more per session, upstream, so its `ulimit -n`
/// must be at least twice this plus a few hundred).
pub const DEFAULT_MAX_CONNECTIONS: usize = 20_000;

/// The server settings of a service (clap flags with environment fallbacks, flattened into its
/// `Config`).
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// How long a connection may take to send a whole request head (on connect, and after each
    /// answer on a kept-alive connection) before it is closed, ms.
    #[arg(long, env = "HEADER_READ_TIMEOUT_MS", default_value_t = DEFAULT_HEADER_READ_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub header_read_timeout_ms: u64,
    /// How long a request's body may take to arrive whole after its head, ms; past it the
    /// request is answered `408 body_timeout`.
    #[arg(long, env = "BODY_READ_TIMEOUT_MS", default_value_t = DEFAULT_BODY_READ_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub body_read_timeout_ms: u64,
    /// Concurrent connections (WebSockets included) served at most; the excess is answered 503
    /// `too_many_connections` + `Retry-After` and closed. Mind `ulimit -n`.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
    pub max_connections: usize,
}

impl ServeArgs {
    /// The limits these settings describe.
    pub fn limits(&self) -> ServeLimits {
        ServeLimits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            max_connections: self.max_connections,
        }
    }

    /// `VARIABLE=value` pairs for a `describe`.
    pub fn env_pairs(&self) -> [(&'static str, String); 3] {
        [
            ("HEADER_READ_TIMEOUT_MS", self.header_read_timeout_ms.to_string()),
            ("BODY_READ_TIMEOUT_MS", self.body_read_timeout_ms.to_string()),
            ("MAX_CONNECTIONS", self.max_connections.to_string()),
        ]
    }
}

/// The limits of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// How long a connection may take to send a whole request head (hyper's HTTP/1
    /// `header_read_timeout`).
    pub header_read_timeout: Duration,
    /// How long a request's body may take to arrive whole after its head.
    pub body_read_timeout: Duration,
    /// Concurrent connections served at most (WebSockets included); the excess gets 503.
    pub max_connections: usize,
}

/// The answer to a connection over the cap: a complete HTTP/1.1 response that closes the
/// connection, with the fleet's JSON error body ([`crate::api::ErrorBody`]).
pub fn refusal_response(max_connections: usize) -> Vec<u8> {
    let body = crate::api::ErrorBody {
        error: "too_many_connections".into(),
        message: format!("this server already serves {max_connections} connections; try again later"),
        field: None,
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {REFUSED_RETRY_AFTER_SECS}\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Serves `router` on `listener` under `limits` until `shutdown` completes, then finishes the
/// open connections (see the module doc) and returns.
///
/// # Errors
/// None today (accept errors are logged and retried); the `Result` keeps `run`'s `?`.
pub async fn serve<F>(listener: TcpListener, router: Router, limits: ServeLimits, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    warn_if_over_fd_limit(limits.max_connections);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let refusal: Arc<[u8]> = refusal_response(limits.max_connections).into();
    let connections = TaskTracker::new();
    let stop = CancellationToken::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted connection");
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refuse(stream, peer, &refusing, &refusal, limits.max_connections);
            continue;
        };
        let io = TokioIo::new(Conn { io: stream, permit: Slot(permit) });
        let router = router.clone();
        let body_timeout = limits.body_read_timeout;
        let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let mut req = req.map(|body| DeadlineBody::new(body, body_timeout));
            req.extensions_mut().insert(ConnectInfo(peer));
            let mut router = router.clone();
            async move { tower::Service::call(&mut router, req).await }
        });
        let conn = http.serve_connection(io, service).with_upgrades();
        let stop = stop.clone();
        connections.spawn(async move {
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                // Timeouts, resets and malformed requests of one peer: that connection ends.
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// A request body's read failed because it did not arrive whole within the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body did not arrive within {} ms", .0.as_millis())]
pub struct BodyTimeout(pub Duration);

/// A request body that must arrive whole within a deadline from its head: a total bound, where
/// tower-http's `RequestBodyTimeout` resets on each frame (a body sent a byte a second would
/// last as long as its length).
pub struct DeadlineBody<B> {
    inner: B,
    timeout: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<B> DeadlineBody<B> {
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self { inner, timeout, deadline: Box::pin(tokio::time::sleep(timeout)) }
    }
}

impl<B> hyper::body::Body for DeadlineBody<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = B::Data;
    type Error = axum::BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        // A frame that is there is taken first; the deadline only ends a wait.
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => Poll::Ready(r.map(|f| f.map_err(Into::into))),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Answers a connection over the cap with [`refusal_response`] and closes it, in a task of its
/// own so the accept loop goes on at once.
fn refuse(mut stream: TcpStream, peer: SocketAddr, refusing: &Arc<Semaphore>, refusal: &Arc<[u8]>, max: usize) {
    let Ok(slot) = refusing.clone().try_acquire_owned() else {
        return; // a flood: dropping the socket closes it
    };
    tracing::warn!(%peer, max_connections = max, "connection refused: too many connections");
    let refusal = refusal.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let answer = async {
            // The request head first (briefly, bounded): an HTTP client answered before it sent
            // its request reads the answer as an unexpected message, not as this 503.
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            let _ = tokio::time::timeout(REFUSAL_HEAD_WAIT, async {
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
            })
            .await;
            stream.write_all(&refusal).await?;
            stream.shutdown().await?;
            // Read what the peer sent until it closes (or the linger ends), so our close is a FIN.
            let mut sink = [0u8; 4096];
            while stream.read(&mut sink).await? > 0 {}
            std::io::Result::Ok(())
        };
        let _ = tokio::time::timeout(REFUSAL_LINGER, answer).await;
    });
}

/// An accept error: per-connection ones (the peer reset before we accepted) are skipped; others
/// (out of file descriptors) are logged and retried after a pause, as axum::serve does.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(e.kind(), ConnectionAborted | ConnectionReset | ConnectionRefused) {
        return;
    }
    tracing::error!(error = %e, "accept failed (out of file descriptors? raise `ulimit -n` or lower MAX_CONNECTIONS); retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Warns when the cap cannot be reached because the process may not open that many files: the
/// excess would then fail in `accept` (EMFILE) instead of getting its 503.
fn warn_if_over_fd_limit(max_connections: usize) {
    if let Ok((soft, _hard)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        if (max_connections as u64).saturating_add(64) > soft {
            tracing::warn!(max_connections, nofile_soft_limit = soft,
                "MAX_CONNECTIONS is above the open-file limit (ulimit -n): raise the limit or lower MAX_CONNECTIONS");
        }
    }
}

/// A connection's IO holding its slot of the connection cap: the slot is freed when the IO is
/// dropped, which for an upgraded connection (a WebSocket) is when the session ends.
///
/// A handler that takes the socket out of an upgrade (the node's sessions write to the
/// `TcpStream` themselves) downcasts the upgraded IO to `TokioIo<Conn>` with
/// `hyper::upgrade::Upgraded::downcast` and keeps the [`Slot`] of [`Conn::into_parts`] for as long
/// as it uses the socket.
pub struct Conn {
    io: TcpStream,
    permit: Slot,
}

/// A connection's slot of the connection cap, freed when dropped.
pub struct Slot(#[allow(dead_code)] OwnedSemaphorePermit);

impl Conn {
    /// The socket and its slot.
    pub fn into_parts(self) -> (TcpStream, Slot) {
        (self.io, self.permit)
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_response_with_the_json_body() {
        let raw = String::from_utf8(refusal_response(7)).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains("\r\nretry-after: 1"), "{head}");
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"], "too_many_connections");
        assert!(v["message"].as_str().unwrap().contains('7'));
    }

    /// A server whose one route reads a JSON body and answers its length, with a 300 ms body
    /// deadline; its address.
    async fn server() -> SocketAddr {
        let router = Router::new().route(
            "/echo",
            axum::routing::post(|crate::http::JsonBody(body): crate::http::JsonBody| async move { body.len().to_string() }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = ServeLimits { header_read_timeout: Duration::from_secs(5), body_read_timeout: Duration::from_millis(300), max_connections: 10 };
        tokio::spawn(serve(listener, router, limits, std::future::pending()));
        addr
    }

    /// Sends `parts` with `gap` between them, then reads the answer until the server closes
    /// (at most 5 s): the answer, and how long from the first byte.
    async fn exchange(addr: SocketAddr, parts: &[&[u8]], gap: Duration) -> (String, Duration) {
        let started = std::time::Instant::now();
        let mut s = TcpStream::connect(addr).await.unwrap();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(gap).await;
            }
            if s.write_all(p).await.is_err() {
                break; // the server answered and closed already
            }
        }
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        answer.extend_from_slice(&buf[..n]);
                        if String::from_utf8_lossy(&answer).contains("\r\n\r\n") && answer.ends_with(b"}") || answer.ends_with(b"\r\n\r\n5") {
                            break;
                        }
                    }
                }
            }
        })
        .await;
        (String::from_utf8_lossy(&answer).into_owned(), started.elapsed())
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_is_answered_408() {
        let addr = server().await;
        let head = b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
        // One byte of a hundred, then nothing: 408 body_timeout after the deadline.
        let (answer, took) = exchange(addr, &[head, b"{"], Duration::ZERO).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"body_timeout\""), "{answer}");
        assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(3), "{took:?}");
        // A body sent a byte at a time is bounded in total, not per byte.
        let drip: Vec<&[u8]> = std::iter::once(&head[..]).chain(std::iter::repeat_n(&b" "[..], 20)).collect();
        let (answer, took) = exchange(addr, &drip, Duration::from_millis(50)).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        // A whole body in time, even in pieces, is served.
        let head5 = b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\n";
        let (answer, _) = exchange(addr, &[head5, b"[1,", b"2]"], Duration::from_millis(50)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n5"), "{answer}");
    }
}
