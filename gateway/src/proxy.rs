//! `GET /ws?canvas=&since=&epoch=`: the WebSocket proxy.
//!
//! The upstream handshake carries the client's resume position as it came: `canvas`, `since` and,
//! when the client sent one, `epoch` ([`WsQuery::resume_query`]); `refusal` is the gateway's own
//! business (nodes always refuse with HTTP, which the gateway relays as the client asked).
//!
//! The gateway opens the upstream WebSocket to the node that owns the channel's partition *before*
//! it accepts the client's upgrade, so a node's refusal (503 + Retry-After: not ready, draining,
//! not the owner, behind the client) reaches the client as the same 503. It tries the owners it
//! knows, then once more after fresh polls of the nodes, holding the handshake up to 2 s until the
//! partition has an owner (a partition in the middle of moving is found at its new owner): at most
//! four upstream handshakes, no loop. Each handshake first passes the node's handshake rate bound
//! (slow start: the excess is refused with a jittered Retry-After) and its circuit breaker
//! ([`crate::breaker`]: a node that stopped answering handshakes is not sent more until trials
//! succeed). Once both sides are open, frames pass through unchanged in
//! both directions; a close on either side is forwarded and ends both. The gateway pings the
//! client every `CLIENT_PING_INTERVAL_MS` and drops one silent for three intervals, closing its
//! upstream (the node cannot see a dead client behind the gateway, which answers its pings). When the upstream drops without a close frame (its process died) the client gets
//! 1012 Service Restart, and reconnects; when the gateway shuts down, 1001 Going Away.

use crate::fleet::{Fleet, Target};
use crate::refusal::{Refused, FULL, TIMEOUT, UNREACHABLE};
use axum::extract::ws::{self as aws, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use futures::{SinkExt, StreamExt};
use shared::protocol::{close, WsQuery, SUBSCRIBE_WAIT};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self as ts, client::IntoClientRequest};

/// The upstream side of a proxied session.
pub type Upstream = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the upstream for `q` through the admission queue of the channel's node
/// ([`crate::admission`]): as [`connect_upstream`], but a node's `full` answer makes the handshake
/// wait for a place instead of failing at once.
///
/// # Errors
/// [`Refused`]: the node's own refusal other than `full`, or `full` when the handshake could not
/// wait or its wait ran out.
pub async fn connect(fleet: &Arc<Fleet>, q: &WsQuery, headers: &HeaderMap) -> Result<(Upstream, Target), Refused> {
    let owner = || fleet.route(q.id().as_str()).1.into_iter().next().map(|t| t.id);
    fleet.admission.admit(q.id().as_str(), owner, || connect_upstream(fleet, q, headers), || fleet.request_refresh()).await
}

/// Opens the upstream WebSocket for the client's query `q` (its channel, `since` and `epoch`),
/// trying at most two owners.
///
/// # Errors
/// [`Refused`] when no node owns the channel's partition or the owners refused.
pub async fn connect_upstream(fleet: &Arc<Fleet>, q: &WsQuery, headers: &HeaderMap) -> Result<(Upstream, Target), Refused> {
    let channel = q.id().as_str();
    // Two rounds at most: the routing as polled; then, if that failed, the routing after fresh
    // polls of every node, waiting (at most REROUTE_WAIT) until some node owns the partition — a
    // partition in the middle of moving (a drain, a cooperative rebalance) has no owner for a
    // moment, and holding the handshake is better than sending the client away for a second.
    let started = tokio::time::Instant::now();
    let deadline = started + REROUTE_WAIT;
    let mut last = None;
    for round in 0..2 {
        let targets = loop {
            let (partition, targets) = fleet.route(channel);
            if !targets.is_empty() {
                break targets;
            }
            last = Some(Refused {
                code: "no_owner".into(),
                message: format!("no healthy node owns partition {partition} of channel {channel} right now"),
                retry_after_secs: 1,
            });
            let now = tokio::time::Instant::now();
            if round == 0 || now >= deadline {
                break Vec::new();
            }
            fleet.refreshed(deadline - now).await;
        };
        for target in targets.into_iter().take(2) {
            if let Err(refused) = fleet.admit_handshake(&target.id) {
                last = Some(refused);
                continue;
            }
            let result = open(fleet, &target, q, headers).await;
            let answered = !matches!(&result, Err(r) if r.code == UNREACHABLE || r.code == TIMEOUT);
            fleet.handshake_done(&target.id, answered);
            match result {
                Ok(ws) => {
                    if round > 0 {
                        tracing::info!(node = %target.id, channel = channel, held_ms = started.elapsed().as_millis() as u64,
                            "handshake held until the channel's partition had a serving owner");
                    }
                    return Ok((ws, target));
                }
                Err(refused) => {
                    tracing::info!(node = %target.id, channel = channel, code = %refused.code, reason = %refused.message, round, "upstream refused the handshake");
                    last = Some(refused);
                }
            }
        }
        if last.as_ref().is_some_and(|r| r.code == FULL) {
            // A full node stays full after a re-poll: admission (the caller) waits for a place.
            break;
        }
        if round == 0 {
            fleet.refreshed(deadline - tokio::time::Instant::now()).await;
        }
    }
    fleet.request_refresh();
    let refused = last.expect("a round either routes or records why not");
    fleet.metrics.refused(&refused.code);
    Err(refused)
}

/// How long the proxy may hold a handshake waiting for the partition's owner (fresh polls come at
/// most every 200 ms; a cooperative rebalance's hand-over takes about a second).
const REROUTE_WAIT: Duration = Duration::from_millis(2000);

/// An upstream handshake slower than this is logged.
const SLOW_UPSTREAM: Duration = Duration::from_millis(250);

/// The upstream node's handshake URL for the client's query `q`.
fn upstream_url(node_url: &str, q: &WsQuery) -> String {
    format!("{}/ws?{}", node_url.replacen("http", "ws", 1), q.resume_query())
}

async fn open(fleet: &Fleet, target: &Target, q: &WsQuery, headers: &HeaderMap) -> Result<Upstream, Refused> {
    let channel = q.id().as_str();
    let ws_url = upstream_url(&target.url, q);
    let mut req = ws_url.as_str().into_client_request().map_err(|e| Refused {
        code: "bad_upstream_url".into(),
        message: e.to_string(),
        retry_after_secs: 5,
    })?;
    // The client's `Origin` was checked here; the upstream handshake carries none (a node
    // accepts handshakes without one), only `X-Forwarded-Origin` for the node's logs.
    if let Some(v) = headers.get(axum::http::header::ORIGIN) {
        req.headers_mut().insert(shared::origin::FORWARDED_ORIGIN, v.clone());
    }
    if let Some(v) = headers.get(axum::http::header::USER_AGENT) {
        req.headers_mut().insert(axum::http::header::USER_AGENT, v.clone());
    }
    let cfg = ts::protocol::WebSocketConfig::default()
        .read_buffer_size(fleet.config.ws_read_buffer as usize)
        .write_buffer_size(0)
        .max_message_size(Some(fleet.config.upstream_max_message as usize))
        .max_frame_size(Some(fleet.config.upstream_max_message as usize));
    let connect = tokio_tungstenite::connect_async_with_config(req, Some(cfg), true);
    let started = tokio::time::Instant::now();
    let answer = tokio::time::timeout(fleet.config.upstream_connect_timeout(), connect).await;
    fleet.metrics.handshake_seconds.observe(started.elapsed().as_secs_f64());
    if started.elapsed() > SLOW_UPSTREAM {
        tracing::info!(node = %target.id, channel = channel, took_ms = started.elapsed().as_millis() as u64, "slow upstream handshake");
    }
    match answer {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(ts::Error::Http(resp))) => {
            let retry = resp
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let body = resp.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
            // The node's own refusal (not_ready, draining, not_owner, behind), naming the node.
            let e = crate::refusal::relay_error(resp.status().as_u16(), &body);
            Err(Refused { code: e.body.error, message: format!("node {}: {}", target.id, e.body.message), retry_after_secs: retry })
        }
        Ok(Err(e)) => Err(Refused { code: UNREACHABLE.into(), message: format!("node {}: {e}", target.id), retry_after_secs: 1 }),
        Err(_) => Err(Refused {
            code: TIMEOUT.into(),
            message: format!("node {} did not accept within {}ms", target.id, fleet.config.upstream_connect_timeout_ms),
            retry_after_secs: 1,
        }),
    }
}

/// Answers a refused session the way browsers can read: accept the WebSocket, send an `error`
/// frame with `retry_after_ms`, close with 1013 Try Again Later, and wait briefly for the reply.
pub fn refuse_with_frame(upgrade: WebSocketUpgrade, refused: Refused) -> axum::response::Response {
    let reason = format!("{}: try again later", refused.code);
    let frame = shared::protocol::ServerMessage::Error {
        code: refused.code,
        message: refused.message,
        retry_after_ms: Some(refused.retry_after_secs * 1000),
        channel: None,
    };
    refuse_frame(upgrade, frame, close::TRY_AGAIN_LATER, reason)
}

/// Answers a handshake that will never be served as asked (an unknown namespace, today's frames of
/// a channel that is not pixels) the way browsers can read: an `error` frame with `code` (no
/// `retry_after_ms`) and close 1008 Policy Violation.
pub fn refuse_for_good_with_frame(upgrade: WebSocketUpgrade, e: shared::http::ApiError) -> axum::response::Response {
    let reason = format!("{}: not served", e.body.error);
    let frame = shared::protocol::ServerMessage::Error { code: e.body.error, message: e.body.message, retry_after_ms: None, channel: None };
    refuse_frame(upgrade, frame, close::POLICY_VIOLATION, reason)
}

/// Answers a handshake from a page of a foreign origin the way browsers can read: an `error`
/// frame `origin_not_allowed` (no `retry_after_ms`: trying again will not help) and close 1008
/// Policy Violation.
pub fn refuse_origin_with_frame(upgrade: WebSocketUpgrade, message: String) -> axum::response::Response {
    let frame = shared::protocol::ServerMessage::Error { code: "origin_not_allowed".into(), message, retry_after_ms: None, channel: None };
    refuse_frame(upgrade, frame, close::POLICY_VIOLATION, "origin_not_allowed: this page's origin may not open sessions".into())
}

fn refuse_frame(upgrade: WebSocketUpgrade, frame: shared::protocol::ServerMessage, code: u16, reason: String) -> axum::response::Response {
    upgrade.on_upgrade(move |mut ws| async move {
        let _ = ws.send(aws::Message::Text(frame.to_json().into())).await;
        let _ = ws.send(shared::ws::close_message(code, &reason)).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = ws.recv().await {} }).await;
    })
}

/// Accepts the upgrade of a client whose token was refused (`refusal=frame`): an `error` frame
/// naming the refusal (no `retry_after_ms`: the same token will not do), then close 1008 Policy
/// Violation with the reason (RFC 6455 §7.4.1).
pub fn refuse_token_with_frame(upgrade: WebSocketUpgrade, refused: shared::client_token::TokenError) -> axum::response::Response {
    upgrade.on_upgrade(move |mut ws| async move {
        let frame = shared::protocol::ServerMessage::Error { code: refused.code().into(), message: refused.to_string(), retry_after_ms: None, channel: None };
        let _ = ws.send(aws::Message::Text(frame.to_json().into())).await;
        let _ = ws.send(shared::ws::close_message(close::POLICY_VIOLATION, &refused.close_reason())).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = ws.recv().await {} }).await;
    })
}

/// Most bytes waiting to be written to one client, bytes (a 64 × 64 snapshot is 16 KiB).
pub const MAX_CLIENT_WRITE_BUFFER: usize = 1 << 20;

/// The client's upgrade, answered once the upstream is open.
pub fn upgrade(fleet: Arc<Fleet>, upgrade: WebSocketUpgrade, upstream: Upstream, target: Target, peer: Peer) -> axum::response::Response {
    configured(&fleet, upgrade).on_upgrade(move |client| {
        // Tracked: the gateway's shutdown waits for its sessions' closing handshakes.
        let tasks = fleet.tasks.clone();
        tasks.track_future(pipe(fleet, client, upstream, target, peer))
    })
}

/// The upgrade of a client whose query named no channel, answered at once: its first frame,
/// `subscribe`, names the channel (within [`SUBSCRIBE_WAIT`]), which `admit` checks as a
/// handshake's query is checked (its namespace, its token); then the upstream is opened as for
/// a handshake, and the session proxied. Every refusal is an `error` frame naming the channel,
/// then 1013 Try Again Later (with `retry_after_ms`) for a refusal for now, 1008 Policy
/// Violation for good.
pub fn upgrade_subscribing(
    fleet: Arc<Fleet>,
    upgrade: WebSocketUpgrade,
    headers: HeaderMap,
    peer: Peer,
    admit: impl FnOnce(&mut WsQuery) -> Result<(), shared::http::ApiError> + Send + 'static,
) -> axum::response::Response {
    configured(&fleet, upgrade).on_upgrade(move |mut client| {
        let tasks = fleet.tasks.clone();
        tasks.track_future(async move {
            let mut q = match first_subscribe(&mut client).await {
                Ok(q) => q,
                Err(NotSubscribed::Refused(e)) => return refuse_open(client, None, e.body.error, e.body.message, None).await,
                Err(NotSubscribed::Protocol(code, reason)) => {
                    // As in a proxied session: the close code the WebSocket layer's refusal calls for.
                    tracing::info!(code, reason, "connection refused: its first frame broke the protocol");
                    let _ = client.send(shared::ws::close_message(code, reason)).await;
                    let _ = tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = client.recv().await {} }).await;
                    return;
                }
                Err(NotSubscribed::Lost) => return,
            };
            if let Err(e) = admit(&mut q) {
                tracing::info!(channel = %q.id(), code = %e.body.error, "subscribe refused");
                return refuse_open(client, Some(q.id().to_string()), e.body.error, e.body.message, None).await;
            }
            match connect(&fleet, &q, &headers).await {
                Ok((upstream, target)) => pipe(fleet, client, upstream, target, peer).await,
                Err(r) => refuse_open(client, Some(q.id().to_string()), r.code, r.message, Some(r.retry_after_secs * 1000)).await,
            }
        })
    })
}

/// Why a connection opened without a channel has no subscription.
enum NotSubscribed {
    /// Its subscribe frame is refused (or none came): an `error` frame and a close code.
    Refused(shared::http::ApiError),
    /// Its first frame broke the WebSocket protocol (too big, bad UTF-8): that close code, as in
    /// a proxied session ([`shared::ws::classify`]).
    Protocol(u16, &'static str),
    /// The client went away, or closed, before subscribing.
    Lost,
}

/// The client's first message, a `subscribe` frame, within [`SUBSCRIBE_WAIT`] (pings before it
/// are answered by axum).
async fn first_subscribe(client: &mut WebSocket) -> Result<WsQuery, NotSubscribed> {
    let expected = |why: &str| NotSubscribed::Refused(shared::http::ApiError::bad_request("subscribe_expected", why.to_owned()));
    let deadline = tokio::time::Instant::now() + SUBSCRIBE_WAIT;
    loop {
        match tokio::time::timeout_at(deadline, client.recv()).await {
            Err(_) => return Err(expected(&format!("no subscribe frame within {} s of the handshake", SUBSCRIBE_WAIT.as_secs()))),
            Ok(Some(Ok(aws::Message::Text(t)))) => return shared::http::parse_subscribe(t.as_str()).map_err(NotSubscribed::Refused),
            Ok(Some(Ok(aws::Message::Ping(_) | aws::Message::Pong(_)))) => {}
            Ok(Some(Ok(aws::Message::Binary(_)))) => return Err(expected("the first frame must be a subscribe text frame")),
            Ok(Some(Err(e))) => return Err(shared::ws::classify(&e).map_or(NotSubscribed::Lost, |(code, reason)| NotSubscribed::Protocol(code, reason))),
            Ok(Some(Ok(aws::Message::Close(_))) | None) => return Err(NotSubscribed::Lost),
        }
    }
}

/// Refuses an open client connection: the `error` frame, then 1013 (with `retry_after_ms`) or
/// 1008, and a short wait for the client's close reply.
async fn refuse_open(mut ws: WebSocket, channel: Option<String>, code: String, message: String, retry_after_ms: Option<u64>) {
    let (close_code, reason) = match retry_after_ms {
        Some(_) => (close::TRY_AGAIN_LATER, format!("{code}: try again later")),
        None => (close::POLICY_VIOLATION, format!("{code}: not served")),
    };
    let frame = shared::protocol::ServerMessage::Error { code, message, retry_after_ms, channel };
    let _ = ws.send(aws::Message::Text(frame.to_json().into())).await;
    let _ = ws.send(shared::ws::close_message(close_code, &reason)).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = ws.recv().await {} }).await;
}

/// The client-side WebSocket settings of a proxied session.
fn configured(fleet: &Fleet, upgrade: WebSocketUpgrade) -> WebSocketUpgrade {
    let c = &fleet.config;
    upgrade
        .read_buffer_size(c.ws_read_buffer as usize)
        .write_buffer_size(CLIENT_WRITE_BUFFER)
        // Bytes a client leaves unread (its frames, or pongs to a ping flood) may wait up to this
        // much; beyond it the write fails and the session ends, so one client cannot grow the
        // gateway's memory without bound.
        .max_write_buffer_size(MAX_CLIENT_WRITE_BUFFER)
        .max_message_size(c.ws_max_message as usize)
        // A frame a little over the message limit is read whole and refused with 1009 (a clean
        // close), as a node does; only a much larger one is cut off at its header.
        .max_frame_size((c.ws_max_message as usize * 16).max(64 * 1024))
}

/// Who is on the client side, for logs.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    pub origin: String,
    pub user_agent: String,
}

/// How the client side of a proxied session ended.
enum ClientEnd {
    /// The client sent a close frame (forwarded): wait for the node's reply.
    Closed,
    /// The client broke the protocol: it gets the close code naming it.
    Protocol(u16, &'static str),
    /// The client vanished: the upstream was closed.
    Gone,
}

/// Most frames already read from the node (pings and pongs included) that go to the client in
/// one write.
const MAX_FRAMES_PER_WRITE: usize = 64;
/// Bytes a client's frames may gather before they are written: above it a frame is written at
/// once; below it, at the end of its batch (every batch ends with a flush). Small, because the
/// buffer keeps the capacity it once needed for the connection's life (64 event frames are about
/// 6 KiB).
const CLIENT_WRITE_BUFFER: usize = 8 * 1024;
/// How long a write to either side may block before the session is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A client silent (no pong, no frame) for this many ping intervals is dropped, as a node drops
/// its own silent clients.
const SILENT_PINGS: u32 = 3;

/// Copies data frames both ways until either side closes. Control frames are per hop: each side's
/// pings are answered here, not forwarded. A close from either side is forwarded and the other
/// side's close reply passed back (bounded wait), so both closing handshakes finish.
async fn pipe(fleet: Arc<Fleet>, client: WebSocket, upstream: Upstream, target: Target, peer: Peer) {
    let ticket = fleet.register_session(&target.id, target.partition);
    let moved = ticket.moved.clone();
    let refresh = fleet.clone();
    let shutdown = fleet.shutdown.clone();
    // Pings to the client (`CLIENT_PING_INTERVAL_MS`) keep intermediaries from timing the
    // connection out and find dead peers: whatever the client sends counts as heard.
    let ping_interval = Duration::from_millis(fleet.config.client_ping_interval_ms);
    let started = tokio::time::Instant::now();
    let heard_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let heard = heard_ms.clone();
    let (mut c_tx, mut c_rx) = client.split();
    let (mut u_tx, mut u_rx) = upstream.split();
    // The client side's protocol error, for the side that writes to the client.
    let (protocol_tx, protocol_rx) = tokio::sync::oneshot::channel::<(u16, &'static str)>();
    let client_to_upstream = async move {
        loop {
            let next = c_rx.next().await;
            heard.store(started.elapsed().as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
            match next {
                Some(Ok(aws::Message::Ping(_) | aws::Message::Pong(_))) => continue,
                Some(Ok(msg)) => {
                    let closing = matches!(msg, aws::Message::Close(_));
                    let Some(out) = to_upstream(msg) else { continue };
                    if !matches!(tokio::time::timeout(WRITE_TIMEOUT, u_tx.send(out)).await, Ok(Ok(()))) {
                        break;
                    }
                    if closing {
                        return ClientEnd::Closed;
                    }
                }
                Some(Err(e)) => {
                    // Tell the writer first, so the client gets this code, not the node's reply.
                    let end = match shared::ws::classify(&e) {
                        Some((code, reason)) => {
                            let _ = protocol_tx.send((code, reason));
                            ClientEnd::Protocol(code, reason)
                        }
                        None => ClientEnd::Gone,
                    };
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, u_tx.send(ts::Message::Close(None))).await;
                    return end;
                }
                None => break,
            }
        }
        let _ = tokio::time::timeout(WRITE_TIMEOUT, u_tx.close()).await;
        ClientEnd::Gone
    };
    let upstream_to_client = async move {
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + ping_interval, ping_interval);
        let mut protocol_rx = protocol_rx;
        // What the last batch read past its end (an error or the end of the stream).
        let mut pending = None;
        let end: Option<(u16, &str)> = loop {
            let msg = match pending.take() {
                Some(m) => m,
                None => tokio::select! {
                    biased;
                    Ok(err) = &mut protocol_rx => break Some(err),
                    m = u_rx.next() => m,
                    _ = ping.tick() => {
                        let silent = started.elapsed().saturating_sub(Duration::from_millis(heard_ms.load(std::sync::atomic::Ordering::Relaxed)));
                        if silent > ping_interval * SILENT_PINGS {
                            // Dead or not reading: drop it, and its upstream with it.
                            tracing::info!(node = %target.id, silent_ms = silent.as_millis() as u64, "client silent for {} pings; dropping it and its upstream", SILENT_PINGS);
                            return;
                        }
                        if !matches!(tokio::time::timeout(WRITE_TIMEOUT, c_tx.send(aws::Message::Ping(Default::default()))).await, Ok(Ok(()))) {
                            return;
                        }
                        continue;
                    }
                    _ = moved.cancelled() => break Some((close::SERVICE_RESTART, "your node is down and your channel moved; reconnect with since")),
                    _ = shutdown.cancelled() => break Some((close::GOING_AWAY, "gateway shutting down")),
                },
            };
            match msg {
                Some(Ok(ts::Message::Ping(_) | ts::Message::Pong(_))) => {}
                Some(Ok(msg)) => {
                    let mut closing = matches!(msg, ts::Message::Close(_));
                    let Some(out) = to_client(msg) else { continue };
                    // The frame is written at once; the frames already read behind it (one read
                    // often holds several: the node writes a session's queued frames together)
                    // then go to the client in one write. (Reading ahead before the first write
                    // made every proxied connection 4 KiB larger: measured with the bench's
                    // memory measure, 37.3 against 33.5 KiB at 9,744 connections.)
                    let mut client_error = None;
                    let batch = async {
                        c_tx.send(out).await?;
                        let mut frames = 1;
                        while !closing && frames < MAX_FRAMES_PER_WRITE {
                            // The client broke the protocol while we wrote: its close code goes
                            // out next, not the node's reply to the close we forwarded.
                            if let Ok(err) = protocol_rx.try_recv() {
                                client_error = Some(err);
                                break;
                            }
                            frames += 1;
                            match futures::FutureExt::now_or_never(u_rx.next()) {
                                None => break,
                                Some(Some(Ok(ts::Message::Ping(_) | ts::Message::Pong(_)))) => {}
                                Some(Some(Ok(m))) => {
                                    closing = matches!(m, ts::Message::Close(_));
                                    if let Some(out) = to_client(m) {
                                        c_tx.feed(out).await?;
                                    }
                                }
                                Some(other) => {
                                    pending = Some(other);
                                    break;
                                }
                            }
                        }
                        c_tx.flush().await
                    };
                    if !matches!(tokio::time::timeout(WRITE_TIMEOUT, batch).await, Ok(Ok(()))) {
                        // The client does not read: drop it (it resumes by version).
                        return;
                    }
                    if let Some(err) = client_error {
                        break Some(err);
                    }
                    if closing {
                        break None;
                    }
                }
                // The node vanished without a close frame (killed): tell the client to reconnect.
                Some(Err(_)) | None => {
                    tracing::info!(node = %target.id, "upstream dropped without a close; closing the client with 1012");
                    refresh.request_refresh();
                    break Some((close::SERVICE_RESTART, "upstream node went away; reconnect with since"));
                }
            }
        };
        if let Some((code, reason)) = end {
            let _ = tokio::time::timeout(WRITE_TIMEOUT, c_tx.send(shared::ws::close_message(code, reason))).await;
        }
        let _ = tokio::time::timeout(WRITE_TIMEOUT, c_tx.close()).await;
    };
    tokio::pin!(client_to_upstream, upstream_to_client);
    tokio::select! {
        end = &mut client_to_upstream => match end {
            ClientEnd::Closed => {
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut upstream_to_client).await;
            }
            ClientEnd::Protocol(code, reason) => {
                shared::ws::log_protocol_error(code, reason, &peer.origin, &peer.user_agent);
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut upstream_to_client).await;
            }
            ClientEnd::Gone => {}
        },
        _ = &mut upstream_to_client => {}
    }
    drop(ticket);
}

fn to_upstream(msg: aws::Message) -> Option<ts::Message> {
    Some(match msg {
        aws::Message::Text(t) => ts::Message::Text(ts::Utf8Bytes::try_from(bytes::Bytes::from(t)).ok()?),
        aws::Message::Binary(b) => ts::Message::Binary(b),
        aws::Message::Ping(b) => ts::Message::Ping(b),
        aws::Message::Pong(b) => ts::Message::Pong(b),
        aws::Message::Close(c) => ts::Message::Close(c.map(|c| ts::protocol::CloseFrame {
            code: c.code.into(),
            reason: ts::Utf8Bytes::try_from(bytes::Bytes::from(c.reason)).unwrap_or_default(),
        })),
    })
}

fn to_client(msg: ts::Message) -> Option<aws::Message> {
    Some(match msg {
        ts::Message::Text(t) => aws::Message::Text(aws::Utf8Bytes::try_from(bytes::Bytes::from(t)).ok()?),
        ts::Message::Binary(b) => aws::Message::Binary(b),
        ts::Message::Ping(b) => aws::Message::Ping(b),
        ts::Message::Pong(b) => aws::Message::Pong(b),
        ts::Message::Close(c) => aws::Message::Close(c.map(|c| aws::CloseFrame {
            code: c.code.into(),
            reason: aws::Utf8Bytes::try_from(bytes::Bytes::from(c.reason)).unwrap_or_default(),
        })),
        ts::Message::Frame(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_handshake_carries_the_client_s_resume_position() {
        let q = |raw: &str| shared::http::parse_ws_query(raw).unwrap();
        let node = "http://127.0.0.1:9001";
        let cases = [
            ("canvas=c1&since=40&epoch=q5XGvJ9mR2yqH7Y1cjTQfA-0&refusal=frame", "ws://127.0.0.1:9001/ws?canvas=c1&since=40&epoch=q5XGvJ9mR2yqH7Y1cjTQfA-0"),
            ("epoch=x-_1&since=3&canvas=a%2Db", "ws://127.0.0.1:9001/ws?canvas=a-b&since=3&epoch=x-_1"),
            // An older client: no epoch, served by since alone.
            ("canvas=c1&since=12", "ws://127.0.0.1:9001/ws?canvas=c1&since=12"),
            ("canvas=c1", "ws://127.0.0.1:9001/ws?canvas=c1&since=0"),
            ("channel=scores:m1&since=2", "ws://127.0.0.1:9001/ws?channel=scores:m1&since=2"),
        ];
        for (client, upstream) in cases {
            assert_eq!(upstream_url(node, &q(client)), upstream, "{client}");
        }
    }
}
