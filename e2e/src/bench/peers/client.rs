//! The client side of the peers' protocols: subscribing to a channel/room and reading the
//! frames their servers send (see the table in [`super`]).

use super::Peer;
use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use std::time::Duration;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// A client WebSocket to a peer.
pub type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long each step of [`subscribe`] (connect, handshake, subscribe) may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// The WebSocket settings of benchmark clients: a 4 KiB read buffer (tungstenite allocates it
/// eagerly per connection; the default is 128 KiB) and no write buffering (each message is
/// written at once), since a benchmark opens up to 10,000 of them. See tungstenite 0.29's
/// `WebSocketConfig` (<https://docs.rs/tungstenite/0.29/tungstenite/protocol/struct.WebSocketConfig.html>).
pub fn client_ws_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0)
}

/// Opens a WebSocket to the peer at `ws_url` (see [`super::PeerServer::ws_url`]) and subscribes to
/// channel/room `canvas`; returns once the server has confirmed the subscription.
///
/// - Centrifugo (<https://centrifugal.dev/docs/transports/client_protocol>): sends
///   `{"id":1,"connect":{}}` and waits for the reply with id 1, then
///   `{"id":2,"subscribe":{"channel":"<canvas>"}}` and waits for the reply with id 2 (an `error`
///   in either reply fails the call).
/// - Socket.IO (<https://socket.io/docs/v4/socket-io-protocol/>): waits for the Engine.IO open
///   packet `0{...}`, sends `40` and waits for the namespace connect reply `40{...}`, then sends
///   `421["join","<canvas>"]` and waits for its acknowledgement `431[{"joined":"<canvas>"}]`
///   (sent by `server.mjs` once the socket is in the room).
///
/// Pings arriving meanwhile are answered. The socket uses [`client_ws_config`] and TCP_NODELAY.
///
/// Events of `canvas` cannot arrive before the confirmation, but Centrifugo may batch the first
/// publications into the same frame as its subscribe reply; this function fails rather than drop
/// them: use [`subscribe_collecting`] when subscribing while the topic is being produced to.
///
/// # Errors
/// When the connection fails or closes, the server refuses, or a step takes over 30 s.
pub async fn subscribe(peer: Peer, ws_url: &str, canvas: &str) -> anyhow::Result<Ws> {
    let mut early = Vec::new();
    let ws = subscribe_collecting(peer, ws_url, canvas, &mut early).await?;
    if !early.is_empty() {
        bail!("{} sent events of {canvas} (versions {early:?}) in the frame of its subscribe reply; \
               use subscribe_collecting to keep them", peer.label());
    }
    Ok(ws)
}

/// [`subscribe`], pushing to `versions` the version of every event that arrives with the
/// confirmation (Centrifugo may batch publications after the subscribe reply in one frame).
///
/// # Errors
/// As [`subscribe`].
pub async fn subscribe_collecting(peer: Peer, ws_url: &str, canvas: &str, versions: &mut Vec<u64>) -> anyhow::Result<Ws> {
    let (mut ws, _) = tokio::time::timeout(
        STEP_TIMEOUT,
        tokio_tungstenite::connect_async_with_config(ws_url, Some(client_ws_config()), true),
    )
    .await
    .with_context(|| format!("connect to {ws_url}: timed out after {} s", STEP_TIMEOUT.as_secs()))?
    .with_context(|| format!("connect to {ws_url}"))?;
    match peer {
        Peer::Centrifugo => {
            send(&mut ws, r#"{"id":1,"connect":{}}"#.to_owned()).await?;
            centrifugo_await_reply(&mut ws, 1, "connect", versions).await?;
            let cmd = serde_json::json!({ "id": 2, "subscribe": { "channel": canvas } });
            send(&mut ws, cmd.to_string()).await?;
            centrifugo_await_reply(&mut ws, 2, &format!("subscribe to {canvas}"), versions).await?;
        }
        Peer::SocketIo => {
            // Engine.IO open packet: `0{"sid":..,"pingInterval":..,..}`.
            loop {
                let text = next_text(&mut ws, "the Engine.IO open packet").await?;
                if text.starts_with('0') {
                    break;
                }
                reply_if_needed(&mut ws, peer, &text, versions).await?;
            }
            send(&mut ws, "40".to_owned()).await?;
            loop {
                let text = next_text(&mut ws, "the Socket.IO connect reply").await?;
                if text.starts_with("40") {
                    break;
                }
                if let Some(err) = text.strip_prefix("44") {
                    bail!("Socket.IO refused the connection: {err}");
                }
                reply_if_needed(&mut ws, peer, &text, versions).await?;
            }
            send(&mut ws, format!("421[\"join\",{}]", serde_json::Value::from(canvas))).await?;
            loop {
                let text = next_text(&mut ws, "the join acknowledgement").await?;
                if let Some(ack) = text.strip_prefix("431") {
                    let ack: serde_json::Value = serde_json::from_str(ack).with_context(|| format!("join ack {text:?}"))?;
                    if ack[0]["joined"].as_str() != Some(canvas) {
                        bail!("Socket.IO did not join {canvas}: {text}");
                    }
                    break;
                }
                reply_if_needed(&mut ws, peer, &text, versions).await?;
            }
        }
    }
    Ok(ws)
}

async fn send(ws: &mut Ws, text: String) -> anyhow::Result<()> {
    ws.send(Message::text(text)).await.context("send on the WebSocket")
}

/// The next text frame (pings and pongs are handled by tungstenite), within [`STEP_TIMEOUT`].
async fn next_text(ws: &mut Ws, what: &str) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .with_context(|| format!("timed out after {} s waiting for {what}", STEP_TIMEOUT.as_secs()))?;
        match msg {
            Some(Ok(Message::Text(t))) => return Ok(t.to_string()),
            Some(Ok(Message::Close(frame))) => bail!("the server closed the WebSocket while waiting for {what}: {frame:?}"),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e).with_context(|| format!("WebSocket error while waiting for {what}")),
            None => bail!("the WebSocket ended while waiting for {what}"),
        }
    }
}

/// Handles a frame that is not the awaited one: collects versions, answers pings.
async fn reply_if_needed(ws: &mut Ws, peer: Peer, text: &str, versions: &mut Vec<u64>) -> anyhow::Result<()> {
    if let Some(reply) = on_text(peer, text, versions) {
        send(ws, reply).await?;
    }
    Ok(())
}

/// Reads Centrifugo frames until the reply with `id`; fails on an error reply.
async fn centrifugo_await_reply(ws: &mut Ws, id: u64, what: &str, versions: &mut Vec<u64>) -> anyhow::Result<()> {
    loop {
        let text = next_text(ws, &format!("Centrifugo's reply to {what}")).await?;
        let mut found = false;
        let mut pong = false;
        for line in text.split('\n').filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).with_context(|| format!("Centrifugo sent {line:?}"))?;
            if v.get("id").and_then(serde_json::Value::as_u64) == Some(id) {
                if let Some(err) = v.get("error") {
                    bail!("Centrifugo refused to {what}: {err}");
                }
                found = true;
            } else if on_text(Peer::Centrifugo, line, versions).is_some() {
                pong = true;
            }
        }
        if pong {
            send(ws, "{}".to_owned()).await?;
        }
        if found {
            return Ok(());
        }
    }
}

/// The fields of a benchmark event the clients read.
#[derive(Deserialize)]
struct Event {
    version: u64,
}

/// One line of Centrifugo's JSON protocol, as far as clients of the benchmark care: a push with a
/// publication (`{"push":{"channel":..,"pub":{"data":..,"offset":..}}}`). Replies, other pushes
/// (join/leave/unsubscribe/disconnect) and pings (`{}`) have no `push.pub`.
#[derive(Deserialize)]
struct CentrifugoLine {
    push: Option<CentrifugoPush>,
}

#[derive(Deserialize)]
struct CentrifugoPush {
    #[serde(rename = "pub")]
    publication: Option<CentrifugoPub>,
}

#[derive(Deserialize)]
struct CentrifugoPub {
    data: Event,
}

/// The version of an event given as JSON text: an object, or a string holding one.
fn event_version(json: &str) -> Option<u64> {
    if let Ok(e) = serde_json::from_str::<Event>(json) {
        return Some(e.version);
    }
    let inner: String = serde_json::from_str(json).ok()?;
    serde_json::from_str::<Event>(&inner).ok().map(|e| e.version)
}

/// The version of the first JSON value at the start of `json` (an event object, or a string
/// holding one), ignoring what follows it. An object is read as an [`Event`] straight from the
/// text (its other fields skipped, nothing of them kept), as the other systems' frames are.
fn leading_event_version(json: &str) -> Option<u64> {
    use serde::Deserialize as _;
    let mut de = serde_json::Deserializer::from_str(json);
    if json.starts_with('"') {
        let inner = String::deserialize(&mut de).ok()?;
        return serde_json::from_str::<Event>(&inner).ok().map(|e| e.version);
    }
    Event::deserialize(&mut de).ok().map(|e| e.version)
}

/// Handles one text frame received on a subscribed socket: pushes the `version` of every event
/// it carries to `versions` (in the order they appear), and returns the reply the client must
/// send, if any.
///
/// - Centrifugo (<https://centrifugal.dev/docs/transports/client_protocol>): a frame holds one or
///   more newline-separated JSON lines (the server batches). A publication is
///   `{"push":{"channel":..,"pub":{"data":{...event...},"offset":..}}}`; the server's ping is an
///   empty object `{}`, answered by a pong `{}` (within `client.pong_timeout`, 8 s by default;
///   pings come every 25 s). Everything else is ignored.
/// - Socket.IO (<https://socket.io/docs/v4/socket-io-protocol/>): one Engine.IO packet per frame.
///   An event is `42["event",<the record value as JSON>,<recovery offset>]` (a JSON string
///   holding the value is read too); the
///   Engine.IO ping `2` is answered by the pong `3` (within `pingTimeout`, 20 s; pings come every
///   `pingInterval`, 25 s). Everything else is ignored.
pub fn on_text(peer: Peer, text: &str, versions: &mut Vec<u64>) -> Option<String> {
    match peer {
        Peer::Centrifugo => {
            let mut reply = None;
            for line in text.split('\n') {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                if line == "{}" {
                    reply = Some("{}".to_owned());
                    continue;
                }
                match serde_json::from_str::<CentrifugoLine>(line) {
                    Ok(CentrifugoLine { push: Some(CentrifugoPush { publication: Some(p) }) }) => versions.push(p.data.version),
                    Ok(_) => {}
                    // `data` that is not an event object (e.g. a JSON string holding one).
                    Err(_) => {
                        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
                            if let Some(data) = v.pointer("/push/pub/data") {
                                if let Some(version) = event_version(&data.to_string()) {
                                    versions.push(version);
                                }
                            }
                        }
                    }
                }
            }
            reply
        }
        Peer::SocketIo => {
            if text == "2" {
                return Some("3".to_owned());
            }
            // An `event` to the main namespace without ack id: `42["event",<value>,<offset>]`.
            let rest = text.strip_prefix(r#"42["event","#)?;
            if let Some(v) = leading_event_version(rest) {
                versions.push(v);
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centrifugo_frames() {
        let mut v = Vec::new();
        let frame = concat!(
            r##"{"push":{"channel":"bench-c3","pub":{"data":{"canvas":"bench-c3","version":3,"x":1,"y":2,"color":"#ff0000","published_at_ms":1},"offset":8}}}"##,
            "\n",
            r#"{"push":{"channel":"bench-c3","pub":{"data":{"canvas":"bench-c3","version":4,"published_at_ms":1},"offset":9}}}"#
        );
        assert_eq!(on_text(Peer::Centrifugo, frame, &mut v), None);
        assert_eq!(v, [3, 4]);
        assert_eq!(on_text(Peer::Centrifugo, "{}", &mut v).as_deref(), Some("{}"));
        assert_eq!(on_text(Peer::Centrifugo, r#"{"id":2,"subscribe":{"recoverable":true,"epoch":"x","positioned":true}}"#, &mut v), None);
        assert_eq!(on_text(Peer::Centrifugo, r#"{"push":{"channel":"c","join":{"info":{"client":"x"}}}}"#, &mut v), None);
        assert_eq!(v, [3, 4]);
    }

    #[test]
    fn socketio_frames() {
        let mut v = Vec::new();
        let frame = r#"42["event",{"canvas":"bench-c3","version":7,"published_at_ms":1},"Q8fcF8V"]"#;
        assert_eq!(on_text(Peer::SocketIo, frame, &mut v), None);
        assert_eq!(v, [7]);
        // A stream publication: the version is the record's, not the data's `n`.
        let frame = r#"42["event",{"channel":"bench:c3","version":8,"data":{"n":1,"text":"ab\"c"},"published_at_ms":1},"Q8fcF8W"]"#;
        assert_eq!(on_text(Peer::SocketIo, frame, &mut v), None);
        // A value emitted as a string holding it is read as well.
        let frame = r#"42["event","{\"canvas\":\"bench-c3\",\"version\":9,\"published_at_ms\":1}","Q8fcF8X"]"#;
        assert_eq!(on_text(Peer::SocketIo, frame, &mut v), None);
        assert_eq!(v, [7, 8, 9]);
        assert_eq!(on_text(Peer::SocketIo, "2", &mut v).as_deref(), Some("3"));
        assert_eq!(on_text(Peer::SocketIo, r#"431[{"joined":"c"}]"#, &mut v), None);
        assert_eq!(on_text(Peer::SocketIo, r#"42["other","{\"version\":9}"]"#, &mut v), None);
        assert_eq!(v, [7, 8, 9]);
    }
}
