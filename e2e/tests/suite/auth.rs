//! Admin access and client tokens with the real processes on the embedded broker: the admin
//! routes of the nodes and the gateway refuse a call without the admin token (401) and serve it
//! with the token; without a token they are on loopback listeners only; `/api/fleet` shows
//! addresses and errors only to an admin; with client tokens on, publishing and subscribing need
//! a valid JWT for the canvas (401 / close 1008) and a session ends with 1008 when its token
//! expires.

use e2e::broker::{Broker, BrokerKind};
use e2e::client::{Client, ClientTiming};
use e2e::fleet::{Fleet, FleetSpec, ADMIN_TOKEN};
use e2e::procs::Timeline;
use e2e::tokens;
use futures::StreamExt;
use shared::protocol::ServerMessage;
use shared::CanvasDims;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

// At least 32 bytes: the fleet refuses a shorter HS256 secret (RFC 7518 §3.2).
const SECRET: &str = "e2e-client-token-secret-0123456789";

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `/ws?<query>` on `base`: the socket, or the refusal's status and JSON body.
async fn dial(base: &str, query: &str) -> Result<Ws, (u16, serde_json::Value)> {
    match tokio_tungstenite::connect_async(format!("{base}/ws?{query}")).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body = resp.body().as_ref().map(|b| serde_json::from_slice(b).unwrap_or_default()).unwrap_or_default();
            Err((resp.status().as_u16(), body))
        }
        Err(e) => panic!("connect {base}: {e}"),
    }
}

/// The frames of a session until it closes: the server messages and the close code and reason.
async fn until_close(ws: &mut Ws, within: Duration) -> (Vec<ServerMessage>, Option<(u16, String)>) {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => panic!("no close within {within:?}; got {got:?}"),
            Ok(Some(Ok(Message::Text(t)))) => got.push(serde_json::from_str(t.as_str()).expect("a server message")),
            Ok(Some(Ok(Message::Close(f)))) => return (got, f.map(|f| (u16::from(f.code), f.reason.to_string()))),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(_)) | None) => return (got, None),
        }
    }
}

async fn status_and_error(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    (status, body["error"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_token_and_client_tokens_guard_the_fleet() {
    let _turn = crate::one_at_a_time();
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    let spec = FleetSpec { env: vec![("CLIENT_TOKEN_HS256_SECRET".into(), SECRET.into())], ..FleetSpec::default() };
    // The fleet came up: the gateway's start-recovery calls to the nodes carried the token.
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let http = reqwest::Client::new();
    let gw = fleet.gateway.url();
    let node = fleet.nodes[0].url();

    // Admin routes: 401 without the token or with a wrong one, on the nodes and the gateway.
    for url in [format!("{node}/admin/start-recovery"), format!("{node}/admin/drain"), format!("{gw}/api/fleet/nodes/ws-1/drain")] {
        let r = http.post(&url).json(&serde_json::json!({"reason": "MAINTENANCE"})).send().await.unwrap();
        assert!(r.headers().get("www-authenticate").is_some_and(|v| v.to_str().unwrap().starts_with("Bearer")), "{url}");
        assert_eq!(status_and_error(r).await, (401, "missing_token".to_owned()), "{url}");
        let r = http.post(&url).bearer_auth("wrong").json(&serde_json::json!({"reason": "MAINTENANCE"})).send().await.unwrap();
        assert_eq!(status_and_error(r).await, (401, "invalid_token".to_owned()), "{url}");
    }
    // With the token but without the leader's fencing token: the gateway leads this fleet, so a
    // node takes admin requests on its public port only from the leader (the admin token passed:
    // not 401).
    let r = http.post(format!("{node}/admin/start-recovery")).bearer_auth(ADMIN_TOKEN).json(&serde_json::json!({})).send().await.unwrap();
    assert_eq!(status_and_error(r).await, (409, "fencing_token_required".to_owned()));
    // Nothing was drained by the refused calls.
    let f = fleet.fleet_state().await.unwrap();
    assert!(f["nodes"].as_array().unwrap().iter().all(|n| n["state"] == "HEALTHY"), "{f}");

    // /api/fleet: addresses only with the token.
    let public: serde_json::Value = http.get(format!("{gw}/api/fleet")).send().await.unwrap().json().await.unwrap();
    assert!(public["nodes"].as_array().unwrap().iter().all(|n| n.get("url").is_none() && n["state"] == "HEALTHY"), "{public}");
    assert!(!public.to_string().contains("127.0.0.1"), "{public}");
    assert_eq!(f["nodes"][0]["url"].as_str(), Some(node.as_str()), "{f}");

    // Publishing: a JWT for the canvas, at the publisher and through the gateway.
    let canvas = "team-a";
    let good = tokens::hs256(SECRET, &["team-*"], 600);
    let other_canvas = tokens::hs256(SECRET, &["c1"], 600);
    let wrong_key = tokens::hs256("not-the-client-token-secret-0123456789", &["team-*"], 600);
    let px = serde_json::json!({"x": 1, "y": 2, "color": "#123456"});
    for base in [fleet.publisher.url(), format!("{gw}/api")] {
        let url = format!("{base}/canvases/{canvas}/pixels");
        for (token, want) in [
            (None, (401, "missing_token")),
            (Some(wrong_key.as_str()), (401, "invalid_token")),
            (Some(other_canvas.as_str()), (403, "token_not_allowed")),
        ] {
            let mut req = http.post(&url).json(&px);
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            assert_eq!(status_and_error(req.send().await.unwrap()).await, (want.0, want.1.to_owned()), "{url} {token:?}");
        }
        let r = http.post(&url).bearer_auth(&good).json(&px).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 201, "{url}: {}", r.text().await.unwrap_or_default());
    }
    let batch = serde_json::json!({"events": [{"canvas": canvas, "x": 3, "y": 3, "color": "#654321"}]});
    let r = http.post(format!("{gw}/api/pixels")).json(&batch).send().await.unwrap();
    assert_eq!(status_and_error(r).await, (401, "missing_token".to_owned()));
    let r = http.post(format!("{gw}/api/pixels")).bearer_auth(&good).json(&batch).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (head, _) = fleet.truth(canvas).await.unwrap();
    assert_eq!(head, 3, "two single publishes and one batch event were accepted, nothing else");

    // Subscribing through the gateway and on a node directly: 401/403 with the JSON body.
    let gw_ws = fleet.gateway_ws();
    let node_ws = format!("ws://127.0.0.1:{}", fleet.nodes[0].port);
    for base in [&gw_ws, &node_ws] {
        for (query, want) in [
            (format!("canvas={canvas}"), (401, "missing_token")),
            (format!("canvas={canvas}&token=garbage"), (401, "invalid_token")),
            (format!("canvas={canvas}&token={wrong_key}"), (401, "invalid_token")),
            (format!("canvas={canvas}&token={other_canvas}"), (403, "token_not_allowed")),
        ] {
            let (status, body) = dial(base, &query).await.expect_err("refused");
            assert_eq!((status, body["error"].as_str().unwrap_or_default()), want, "{base} {query}: {body}");
        }
    }
    // With refusal=frame (browsers): an error frame, then close 1008 Policy Violation.
    let mut ws = dial(&gw_ws, &format!("canvas={canvas}&refusal=frame")).await.expect("accepted to be told why");
    let (frames, close) = until_close(&mut ws, Duration::from_secs(5)).await;
    assert!(matches!(frames.as_slice(), [ServerMessage::Error { code, .. }] if code == "missing_token"), "{frames:?}");
    assert_eq!(close.map(|c| c.0), Some(1008));

    // A good token: served through the gateway (the node checked it too), with the state so far.
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let client = Client::spawn_with_token("tok-client", &gw_ws, canvas, dims, ClientTiming::default(), Some(good.clone()));
    let started = Instant::now();
    while client.version() < 3 {
        assert!(started.elapsed() < Duration::from_secs(20), "the client with a good token reached version {}", client.version());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = http.post(format!("{gw}/api/canvases/{canvas}/pixels")).bearer_auth(&good).json(&px).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 201);
    while client.version() < 4 {
        assert!(started.elapsed() < Duration::from_secs(20), "live event with a good token");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = client.stop().await;
    assert_eq!(report.refused, 0, "{:?}", report.causes);

    // A token that expires in 2 s: served, then closed by the node with 1008 "token expired",
    // relayed by the gateway.
    let short = tokens::hs256(SECRET, &[canvas], 2);
    let mut ws = dial(&gw_ws, &format!("canvas={canvas}&token={short}")).await.expect("served");
    let opened = Instant::now();
    let (frames, close) = until_close(&mut ws, Duration::from_secs(6)).await;
    assert!(matches!(frames.first(), Some(ServerMessage::Welcome { .. })), "{frames:?}");
    assert_eq!(close, Some((1008, "token expired".to_owned())));
    assert!(opened.elapsed() < Duration::from_secs(4), "closed {:?} after opening", opened.elapsed());
    let _ = ws.close(None).await;

    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_an_admin_token_the_admin_routes_are_on_loopback_listeners() {
    let _turn = crate::one_at_a_time();
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    let spec = FleetSpec { admin_token: None, ..FleetSpec::default() };
    // The fleet came up: the gateway reached the nodes' loopback admin listeners (NODE_ADMIN_URLS).
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let http = reqwest::Client::new();
    let gw = fleet.gateway.url();
    let node = fleet.nodes[1].url();
    // Not on the public listeners: 404 (even with a token: there is none to check).
    for url in [format!("{node}/admin/start-recovery"), format!("{node}/admin/drain"), format!("{gw}/api/fleet/nodes/ws-2/drain")] {
        let r = http.post(&url).json(&serde_json::json!({"reason": "MAINTENANCE"})).send().await.unwrap();
        assert_eq!(status_and_error(r).await, (404, "not_found".to_owned()), "{url}");
    }
    // The public /api/fleet is the redacted one; the admin listener's is whole.
    let public: serde_json::Value = http.get(format!("{gw}/api/fleet")).bearer_auth("anything").send().await.unwrap().json().await.unwrap();
    assert!(public["nodes"].as_array().unwrap().iter().all(|n| n.get("url").is_none()), "{public}");
    let full = fleet.fleet_state().await.unwrap();
    assert_eq!(full["nodes"][1]["url"].as_str(), Some(node.as_str()), "{full}");
    // The drain on the gateway's admin listener: the gateway calls ws-2's admin listener.
    let r = http
        .post(format!("{}/api/fleet/nodes/ws-2/drain", fleet.admin_base(&fleet.gateway)))
        .json(&serde_json::json!({"grace_ms": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["reason"], "MAINTENANCE");
    let h: serde_json::Value = http.get(format!("{node}/health")).send().await.unwrap().json().await.unwrap();
    assert_eq!((h["state"].as_str(), h["ready"].as_bool()), (Some("UP"), Some(false)), "{h}");
    // And the gateway brings it back through ws-2's admin listener (start-recovery).
    fleet
        .wait_fleet("ws-2 HEALTHY again after the drain", Duration::from_secs(60), |f| {
            let n = &f["nodes"][1];
            (n["state"] == "HEALTHY" && n["ready"] == true).then_some(()).ok_or(format!("ws-2 {}", n["state"]))
        })
        .await
        .unwrap();
    fleet.stop().await;
}
