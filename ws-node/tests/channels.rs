//! A node in-process against librdkafka's mock cluster: channels of every model, served in the
//! channel frames, by query or by a `subscribe` first frame, and the refusals of a first frame.

use futures::{SinkExt, StreamExt};
use shared::protocol::ServerMessage;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;
use ws_node::config::Config;

// Not every helper of the shared harness is used here.
#[path = "support/harness.rs"]
#[allow(dead_code)]
mod harness;
use harness::*;

/// The namespaces of the channel tests: a json, a stream and a latest namespace beside the
/// default pixels one.
const FLEET: &str = "[namespaces.scores]\nmodel = \"json\"\n[namespaces.chat]\nmodel = \"stream\"\n[namespaces.prices]\nmodel = \"latest\"\n";

fn with_namespaces(c: &mut Config) {
    c.fleet.namespaces = toml_spec(FLEET);
    c.recent_events = 3;
}

fn toml_spec(text: &str) -> shared::namespaces::NamespacesSpec {
    let ns = shared::namespaces::Namespaces::from_toml(text, shared::CanvasDims::default()).unwrap();
    ns.to_spec()
}

/// The frames of a session up to `n` after its welcome, as (kind, version, payload).
async fn frames(ws: &mut Ws, n: usize) -> Vec<(String, u64, serde_json::Value)> {
    let mut out = Vec::new();
    while out.len() < n {
        match next_frame(ws).await.expect("a frame") {
            ServerMessage::Welcome { channel, model, .. } => out.push(("welcome".into(), 0, serde_json::json!({"channel": channel, "model": model}))),
            ServerMessage::State { version, state, .. } => out.push(("state".into(), version, state)),
            ServerMessage::Publication { version, data, .. } => out.push(("publication".into(), version, data)),
            ServerMessage::Reset { version, epoch, .. } => out.push(("reset".into(), version, serde_json::json!(epoch))),
            ServerMessage::Error { code, channel, retry_after_ms, .. } => {
                out.push(("error".into(), 0, serde_json::json!({"code": code, "channel": channel, "retry_after_ms": retry_after_ms})))
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_of_each_model_are_served_in_the_channel_frames() {
    let mut h = Harness::start(with_namespaces).await;
    let fp = h.config.namespaces().fingerprint().to_owned();
    for i in 1..=5 {
        h.publish_data("scores:final", serde_json::json!({ "home": i, format!("k{i}"): i }), "2", &fp).await;
        h.publish_data("chat:lobby", serde_json::json!({ "text": format!("m{i}") }), "2", &fp).await;
        h.publish_data("prices:eur", serde_json::json!(i as f64 / 2.0), "2", &fp).await;
    }
    h.recover().await;
    // A client with nothing gets the welcome naming the model, then the state.
    let mut ws = h.connect_with("channel=scores:final&since=0").await.unwrap();
    let got = frames(&mut ws, 2).await;
    assert_eq!(got[0].2, serde_json::json!({"channel": "scores:final", "model": "json"}));
    assert_eq!((got[1].0.as_str(), got[1].1), ("state", 5));
    assert_eq!(got[1].2, serde_json::json!({"home": 5, "k1": 1, "k2": 2, "k3": 3, "k4": 4, "k5": 5}));
    // Live publications follow, data as published.
    h.publish_data("scores:final", serde_json::json!({"away": 1}), "2", &fp).await;
    assert_eq!(frames(&mut ws, 1).await, vec![("publication".into(), 6, serde_json::json!({"away": 1}))]);
    // A resume within the window (the last 3) gets publications; a stream's from before it a reset.
    let mut ws = h.connect_with("channel=chat:lobby&since=3").await.unwrap();
    let got = frames(&mut ws, 3).await;
    assert_eq!(got[1..].iter().map(|f| (f.0.as_str(), f.1)).collect::<Vec<_>>(), [("publication", 4), ("publication", 5)]);
    let mut ws = h.connect_with("channel=chat:lobby&since=1").await.unwrap();
    assert_eq!(frames(&mut ws, 2).await[1].0, "reset", "what the node no longer holds is not coming");
    let mut ws = h.connect_with("channel=prices:eur&since=1").await.unwrap();
    assert_eq!(frames(&mut ws, 2).await[1], ("state".into(), 5, serde_json::json!(2.5)), "a latest's resume from before the window gets the state");
    // Refusals: an unknown namespace, and today's frames of a channel that is not pixels.
    let (status, body, _) = h.connect_with("channel=nope:a").await.expect_err("refused");
    assert_eq!((status, body["error"].as_str()), (400, Some("unknown_namespace")));
    let (status, body, _) = h.connect_with("canvas=chat:lobby").await.expect_err("refused");
    assert_eq!((status, body["field"].as_str()), (400, Some("canvas")));
    assert!(h.health().await.get("namespaces_mismatch").is_none(), "every record was written under the node's namespaces");
    // A connection opened without a channel names it in its first frame, `subscribe`.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/ws", h.ws)).await.unwrap();
    let subscribe = shared::protocol::ClientMessage::Subscribe { channel: shared::ChannelId::parse("scores:final").unwrap(), since: 4, epoch: None, token: None };
    ws.send(Message::Text(subscribe.to_json().into())).await.unwrap();
    let got = frames(&mut ws, 3).await;
    assert_eq!(got.iter().map(|f| (f.0.as_str(), f.1)).collect::<Vec<_>>(), [("welcome", 0), ("publication", 5), ("publication", 6)]);
    // A reset: the subscriber gets a reset to version 0 of the next epoch, then the empty state.
    h.publish_op("scores:final", shared::record::OpKind::Reset, 1, &fp).await;
    let got = frames(&mut ws, 2).await;
    assert_eq!(got[0].0, "reset");
    assert!(got[0].2.as_str().is_some_and(|e| e.ends_with("-1")), "the new epoch is the topic id and reset count 1: {}", got[0].2);
    assert_eq!(got[1], ("state".into(), 0, serde_json::json!({})));
    h.publish_data("scores:final", serde_json::json!({"again": 1}), "2", &fp).await;
    assert_eq!(frames(&mut ws, 1).await, vec![("publication".into(), 1, serde_json::json!({"again": 1}))]);
    // A delete frees the channel: its subscriber is reset to the blank channel's epoch.
    h.publish_op("scores:final", shared::record::OpKind::Delete, 1, &fp).await;
    let got = frames(&mut ws, 2).await;
    assert_eq!((got[0].0.as_str(), got[1].0.as_str(), got[1].1), ("reset", "state", 0));
    assert!(got[0].2.as_str().is_some_and(|e| e.ends_with("-2")), "the next history's epoch (the deleted one's + 1): {}", got[0].2);
    // Subscribe frames the node refuses: an `error` naming the channel, then 1008 for good.
    for (text, code) in [
        (r#"{"type":"subscribe","channel":"nope:a"}"#.to_owned(), "unknown_namespace"),
        (r#"{"type":"subscribe","channel":"a b"}"#.to_owned(), "invalid_field"),
    ] {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/ws", h.ws)).await.unwrap();
        ws.send(Message::Text(text.clone().into())).await.unwrap();
        let got = frames(&mut ws, 1).await;
        assert_eq!(got[0].2["code"], code, "{text}");
        match ws.next().await {
            Some(Ok(Message::Close(Some(c)))) => assert_eq!(u16::from(c.code), 1008, "{text}"),
            other => panic!("{text}: expected a close, got {other:?}"),
        }
    }
    // A record of other namespaces is applied, counted and shown.
    h.publish_data("prices:eur", serde_json::json!(9), "2", "0000000000000000").await;
    h.wait_health("the other fingerprint shown", |h| h["namespaces_mismatch"] == "0000000000000000").await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_a_later_format_stops_the_node_instead_of_skipping_it() {
    let mut h = Harness::start(with_namespaces).await;
    let fp = h.config.namespaces().fingerprint().to_owned();
    h.publish_data("chat:lobby", serde_json::json!("one"), "2", &fp).await;
    h.recover().await;
    h.publish_data("chat:lobby", serde_json::json!("from the future"), "3", &fp).await;
    let task = h.task.take().expect("the node runs");
    let ended = tokio::time::timeout(Duration::from_secs(20), task).await.expect("the node stops").expect("joins");
    let e = ended.expect_err("stopped with an error");
    assert!(format!("{e:#}").contains("format 3"), "{e:#}");
}

/// A first frame the WebSocket layer itself refuses, here one over `WS_MAX_MESSAGE` (4 KiB), is
/// the same protocol problem as in a session opened by query, which gets 1009 Message Too Big
/// (RFC 6455 §7.4.1). Before its `subscribe` it is taken for a lost connection instead
/// (`session::subscribed` maps every read error to `connection_lost`, and `refuse` sends nothing
/// for that code): the socket is dropped with no close frame and no reason. Bad UTF-8 and other
/// protocol errors take the same path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_frame_the_websocket_layer_refuses_gets_its_close_code() {
    let mut h = Harness::start(with_namespaces).await;
    let fp = h.config.namespaces().fingerprint().to_owned();
    h.publish_data("chat:lobby", serde_json::json!("one"), "2", &fp).await;
    h.recover().await;
    let big = format!(r#"{{"type":"subscribe","channel":"chat:lobby","token":"{}"}}"#, "x".repeat(8 * 1024));
    let mut ws = h.connect_with("channel=chat:lobby").await.unwrap();
    assert_eq!(frames(&mut ws, 2).await[1].0, "state");
    ws.send(Message::Text(big.clone().into())).await.unwrap();
    assert_eq!(next_frame(&mut ws).await.unwrap_err(), Some(1009), "in a session");
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/ws", h.ws)).await.unwrap();
    ws.send(Message::Text(big.into())).await.unwrap();
    assert_eq!(next_frame(&mut ws).await.unwrap_err(), Some(1009), "as the first frame");
    h.stop().await;
}

/// docs/protocol.md: a connection that subscribes by frame may still carry `token` in its query
/// ("`token` and `refusal` are allowed"), and the gateway takes the query's token when the frame
/// has none. The node drops the query once it names no channel (`http::ws` keeps only the
/// frame's fields), so the same connection made to a node is refused `missing_token`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_frame_without_a_token_uses_the_query_s() {
    let mut h = Harness::start(|c| {
        with_namespaces(c);
        c.client_tokens.hs256_secret = Some(NODE_SECRET.into());
    })
    .await;
    let fp = h.config.namespaces().fingerprint().to_owned();
    h.publish_data("chat:lobby", serde_json::json!("one"), "2", &fp).await;
    h.recover().await;
    let token = client_token(NODE_SECRET, &["chat:*"], 600);
    let subscribe = |token: Option<String>| shared::protocol::ClientMessage::Subscribe { channel: shared::ChannelId::parse("chat:lobby").unwrap(), since: 0, epoch: None, token }.to_json();
    // The token in the frame: served.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/ws", h.ws)).await.unwrap();
    ws.send(Message::Text(subscribe(Some(token.clone())).into())).await.unwrap();
    assert_eq!(frames(&mut ws, 2).await.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), ["welcome", "state"]);
    // The token in the query, none in the frame: refused.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/ws?token={token}", h.ws)).await.unwrap();
    ws.send(Message::Text(subscribe(None).into())).await.unwrap();
    let got = frames(&mut ws, 1).await;
    assert_eq!(got[0].0, "welcome", "the query's token: {:?}", got[0]);
    h.stop().await;
}
