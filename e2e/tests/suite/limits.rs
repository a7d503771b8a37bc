//! Limits that hold under bad input, with real clients against the real processes (embedded
//! broker): a slowloris connection is closed after the header-read timeout, and a body that never arrives whole is answered 408 after the body-read deadline; the connection cap
//! refuses the excess with 503 + Retry-After and serves the rest; a foreign `Origin` is refused
//! at the gateway and at a node; a client message over the limit gets 1009 through the gateway;
//! the publish rate limit answers 429 past its burst and serves another client address. In each,
//! a well-behaved client keeps being served.

use crate::block_on;
use e2e::broker::{Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::{eventually, Timeline};
use e2e::scenario::{pick_canvases, spawn_clients};
use futures::{SinkExt, StreamExt};
use shared::CanvasDims;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// Sends part of a request head on a fresh connection to `port`, then nothing, and returns how
/// long the server took to close the connection (`None`: still open after `wait`).
async fn slowloris(port: u16, wait: Duration) -> Option<Duration> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow").await.expect("write part of the head");
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((started + wait).into(), s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            // An answer (hyper may say 408) is fine; the close is what counts.
            Ok(Ok(_)) => continue,
        }
    }
}

/// A POST to `path` on `port` that declares a 100-byte JSON body and sends one byte of it: the
/// answer (head and body) and how long it took.
async fn slow_body(port: u16, path: &str) -> (String, Duration) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let head = format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{");
    let started = Instant::now();
    s.write_all(head.as_bytes()).await.expect("write the head and one byte");
    let answer = read_answer(&mut s).await.unwrap_or_else(|e| format!("(no answer: {e})"));
    (answer, started.elapsed())
}

/// Sends one `GET /health` on `s` (kept alive) and returns the answer's head and body.
async fn get_health(s: &mut TcpStream) -> std::io::Result<String> {
    s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await?;
    read_answer(s).await
}

/// Reads one HTTP/1.1 answer with a `content-length` (or until the close).
async fn read_answer(s: &mut TcpStream) -> std::io::Result<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer"))??;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)));
            if len.is_some_and(|len| body.len() >= len) {
                return Ok(text);
            }
        }
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

/// Opens a WebSocket to `url` with `origin` (if any): `Ok(first text frame)` when served,
/// `Err((status, body))` when the handshake is refused.
async fn ws_with_origin(url: &str, origin: Option<&str>) -> Result<String, (u16, String)> {
    let mut req = url.into_client_request().unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("origin", o.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((mut ws, _)) => loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("a frame within 10 s") {
                Some(Ok(Message::Text(t))) => return Ok(t.to_string()),
                Some(Ok(_)) => continue,
                other => panic!("{url}: the session ended before its first frame: {other:?}"),
            }
        },
        Err(tungstenite::Error::Http(resp)) => {
            let body = resp.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
            Err((resp.status().as_u16(), body))
        }
        Err(e) => panic!("{url}: {e}"),
    }
}

fn error_code(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body).ok().and_then(|v| v["error"].as_str().map(str::to_owned)).unwrap_or_default()
}

/// Waits until `client` has received more versions than it had.
async fn keeps_receiving(client: &e2e::client::Client, what: &str) {
    let before = client.version();
    eventually(what, Duration::from_secs(10), || async {
        let now = client.version();
        if now > before {
            Ok(Some(()))
        } else {
            Err(format!("version {now}, was {before}"))
        }
    })
    .await
    .expect("the well-behaved client keeps receiving events");
}

/// Slowloris on every service, Origin at the gateway and a node, 1009 through the gateway.
async fn bad_clients() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    // The gateway's own timeout short (nobody pools connections to it here); the nodes' and the
    // publisher's above the gateway's idle-pool time (shared::serve::CLIENT_POOL_IDLE).
    let origins = "http://allowed.example";
    let spec = FleetSpec {
        gateway_env: env(&[("HEADER_READ_TIMEOUT_MS", "1500"), ("BODY_READ_TIMEOUT_MS", "1500"), ("ALLOWED_ORIGINS", origins)]),
        node_env: env(&[("HEADER_READ_TIMEOUT_MS", "5000"), ("ALLOWED_ORIGINS", origins)]),
        publisher_env: env(&[("HEADER_READ_TIMEOUT_MS", "5000"), ("BODY_READ_TIMEOUT_MS", "1500")]),
        ..FleetSpec::default()
    };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let state = fleet.fleet_state().await.unwrap();
    let canvas = pick_canvases(&state, fleet.spec.partitions, 1, &["ws-1".to_owned()]).remove(0);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let good = spawn_clients(&fleet, std::slice::from_ref(&canvas), 1, dims).await.unwrap();
    let load = Load::start(&fleet.publisher.url(), vec![canvas.clone()], 20.0, dims.width, dims.height);

    // Slowloris: part of a head, then nothing. Closed after the timeout (not before half of it),
    // while normal requests are served meanwhile.
    tl.mark("slowloris connections to the gateway, ws-1 and the publisher");
    let cases = [("gateway", fleet.gateway.port, 1500u64), ("ws-1", fleet.nodes[0].port, 5000), ("publisher", fleet.publisher.port, 5000)];
    let slow = futures::future::join_all(cases.iter().map(|(_, port, ms)| slowloris(*port, Duration::from_millis(ms + 4000))));
    let http = reqwest::Client::new();
    let served = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for url in [fleet.gateway.url(), fleet.nodes[0].url(), fleet.publisher.url()] {
            let r = http.get(format!("{url}/health")).send().await.expect("health answers during the slowloris");
            assert_eq!(r.status().as_u16(), 200, "{url}");
        }
    };
    let (closed, ()) = tokio::join!(slow, served);
    for ((name, _, ms), closed) in cases.iter().zip(closed) {
        let took = closed.unwrap_or_else(|| panic!("{name}: a slowloris connection was still open {} ms after its timeout", 4000));
        assert!(took >= Duration::from_millis(ms / 2) && took <= Duration::from_millis(ms + 4000), "{name}: closed after {took:?}, timeout {ms} ms");
    }

    // A body that never arrives whole (Content-Length: 100, one byte sent): 408 body_timeout
    // after BODY_READ_TIMEOUT_MS, at the gateway and the publisher, instead of a slot held for ever.
    tl.mark("publishes whose bodies never arrive whole, to the gateway and the publisher");
    for (name, port, path) in [("gateway", fleet.gateway.port, format!("/api/canvases/{canvas}/pixels")), ("publisher", fleet.publisher.port, format!("/canvases/{canvas}/pixels"))] {
        let (answer, took) = slow_body(port, &path).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{name}: {answer}");
        assert!(answer.contains("\"body_timeout\""), "{name}: {answer}");
        assert!(took >= Duration::from_millis(1000) && took < Duration::from_secs(6), "{name}: answered after {took:?}, deadline 1500 ms");
    }

    // Origin at the gateway: its own page's origin and the listed one are served; a foreign one
    // gets 403 origin_not_allowed (or, with refusal=frame, an error frame and 1008).
    tl.mark("handshakes with foreign and allowed origins");
    let gw = format!("{}/ws?canvas={canvas}&since=0", fleet.gateway_ws());
    let own = format!("http://127.0.0.1:{}", fleet.gateway.port);
    for origin in [Some(own.as_str()), Some(origins), None] {
        let first = ws_with_origin(&gw, origin).await.unwrap_or_else(|e| panic!("gateway, origin {origin:?}: refused {e:?}"));
        assert!(first.contains("\"welcome\""), "gateway, origin {origin:?}: {first}");
    }
    for origin in ["http://evil.example", "http://127.0.0.1:1", "null"] {
        let (status, body) = ws_with_origin(&gw, Some(origin)).await.expect_err("a foreign origin is refused");
        assert_eq!((status, error_code(&body).as_str()), (403, "origin_not_allowed"), "gateway, origin {origin}: {body}");
    }
    let mut req = format!("{gw}&refusal=frame").into_client_request().unwrap();
    req.headers_mut().insert("origin", "http://evil.example".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.expect("refusal=frame accepts, then refuses in frames");
    let mut saw_error = false;
    let code = loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await.expect("frames within 5 s") {
            Some(Ok(Message::Text(t))) => saw_error |= t.contains("\"origin_not_allowed\""),
            Some(Ok(Message::Close(f))) => break f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => {}
            other => panic!("refusal=frame ended without a close: {other:?}"),
        }
    };
    assert!(saw_error, "refusal=frame sends the error frame");
    assert_eq!(code, Some(1008), "refusal=frame closes with 1008 Policy Violation");
    // At a node: the listed origin and none are served; a foreign one, and the gateway's own page
    // (not listed on the node), get 403.
    let node = format!("ws://127.0.0.1:{}/ws?canvas={canvas}&since=0", fleet.nodes[0].port);
    for origin in [Some(origins), None] {
        let first = ws_with_origin(&node, origin).await.unwrap_or_else(|e| panic!("ws-1, origin {origin:?}: refused {e:?}"));
        assert!(first.contains("\"welcome\""), "ws-1, origin {origin:?}: {first}");
    }
    for origin in ["http://evil.example", own.as_str()] {
        let (status, body) = ws_with_origin(&node, Some(origin)).await.expect_err("a foreign origin is refused");
        assert_eq!((status, error_code(&body).as_str()), (403, "origin_not_allowed"), "ws-1, origin {origin}: {body}");
    }

    // A client message over the limit (4096 bytes, the node's) through the gateway: 1009; the
    // other client of the same canvas keeps receiving events.
    tl.mark("an oversized client message through the gateway");
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.as_str()).await.expect("session opens");
    ws.send(Message::Text("x".repeat(5000).into())).await.expect("sent");
    let code = loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("an answer within 10 s") {
            Some(Ok(Message::Close(f))) => break f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            other => panic!("the oversized session ended without a close: {other:?}"),
        }
    };
    assert_eq!(code, Some(1009), "an oversized client message closes with 1009 Message Too Big");
    keeps_receiving(&good[0], "the other client of the canvas to keep receiving events").await;
    assert!(good[0].connected() && good[0].report().sessions.len() == 1, "the well-behaved client kept its one session");
    load.stop().await;
    for c in good {
        c.stop().await;
    }
    fleet.stop().await;
}

/// The gateway with a small connection cap: the excess gets 503 + Retry-After at once, the rest
/// (a WebSocket session included) keep being served, and a freed slot is served again.
async fn connection_cap() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    const CAP: usize = 4;
    let spec = FleetSpec { gateway_env: env(&[("MAX_CONNECTIONS", &CAP.to_string()), ("HEADER_READ_TIMEOUT_MS", "30000")]), ..FleetSpec::default() };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let state = fleet.fleet_state().await.unwrap();
    let canvas = pick_canvases(&state, fleet.spec.partitions, 1, &["ws-1".to_owned()]).remove(0);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let good = spawn_clients(&fleet, std::slice::from_ref(&canvas), 1, dims).await.unwrap();
    let load = Load::start(&fleet.publisher.url(), vec![canvas.clone()], 20.0, dims.width, dims.height);

    // Only this test's connections from here: the harness's pooled idle ones are closed (a
    // client without a pool takes their place), so none of them frees a slot mid-test.
    fleet.http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Open kept-alive connections (each served once) until one is refused. The WebSocket holds
    // one slot. A served answer is any answer but the refusal: the gateway's `/health` itself
    // may say 503 `stale_view` on a loaded machine, and that is not what is tested here.
    tl.mark("connections to the gateway up to its cap");
    let refusal = |answer: &str| answer.starts_with("HTTP/1.1 503") && answer.contains("too_many_connections");
    let served = |answer: &str| answer.starts_with("HTTP/1.1 ") && !refusal(answer);
    let mut held = Vec::new();
    let refused = loop {
        assert!(held.len() <= CAP, "the cap of {CAP} connections was never enforced");
        let mut s = TcpStream::connect(("127.0.0.1", fleet.gateway.port)).await.expect("connect");
        let answer = get_health(&mut s).await.expect("an answer");
        if served(&answer) {
            held.push(s);
            continue;
        }
        break answer;
    };
    assert_eq!(held.len(), CAP - 1, "connections served besides the WebSocket, cap {CAP}");
    let (head, body) = refused.split_once("\r\n\r\n").expect("a whole answer");
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(head.to_ascii_lowercase().contains("\r\nretry-after: 1"), "{head}");
    assert_eq!(error_code(body), "too_many_connections", "{body}");
    // An HTTP client sees the same.
    let r = reqwest::Client::new().get(format!("{}/health", fleet.gateway.url())).send().await.expect("an answer");
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "too_many_connections");
    // The rest keep being served: each held connection answers again, the session gets events.
    for s in &mut held {
        let answer = get_health(s).await.expect("answer");
        assert!(served(&answer), "a held connection is still served: {answer}");
    }
    keeps_receiving(&good[0], "the WebSocket client to keep receiving events at the cap").await;
    // A freed slot is served again.
    drop(held.pop());
    eventually("a connection to be served once a slot is free", Duration::from_secs(5), || async {
        let mut s = TcpStream::connect(("127.0.0.1", fleet.gateway.port)).await.map_err(|e| e.to_string())?;
        let answer = get_health(&mut s).await.map_err(|e| e.to_string())?;
        if served(&answer) {
            Ok(Some(()))
        } else {
            Err(answer.lines().next().unwrap_or_default().to_owned())
        }
    })
    .await
    .expect("served after a slot was freed");
    assert!(good[0].report().sessions.len() == 1, "the WebSocket client kept its one session");
    drop(held);
    load.stop().await;
    for c in good {
        c.stop().await;
    }
    fleet.stop().await;
}

/// The publish rate limit per client address, at the publisher and through the gateway, two
/// clients from loopback told apart by `X-Forwarded-For` (loopback is a trusted proxy).
async fn publish_rate_limit() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    let limited = env(&[("PUBLISH_RATE_PER_SEC", "1"), ("PUBLISH_BURST", "3"), ("TRUSTED_PROXIES", "127.0.0.1,::1")]);
    let spec = FleetSpec { publisher_env: limited.clone(), gateway_env: limited, ..FleetSpec::default() };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let http = reqwest::Client::new();
    let publish = |base: String, client: &'static str| {
        let http = http.clone();
        async move {
            http.post(format!("{base}/canvases/rate-c1/pixels"))
                .header("x-forwarded-for", client)
                .json(&serde_json::json!({"x": 1, "y": 1, "color": "#102030"}))
                .send()
                .await
                .expect("an answer")
        }
    };
    for (name, base, a, b) in [
        ("publisher", fleet.publisher.url(), "198.51.100.1", "198.51.100.2"),
        ("gateway", format!("{}/api", fleet.gateway.url()), "198.51.100.3", "198.51.100.4"),
    ] {
        tl.mark(format!("publishes past the burst through the {name}"));
        for i in 0..3 {
            let r = publish(base.clone(), a).await;
            assert_eq!(r.status().as_u16(), 201, "{name}: publish {i} of the burst");
        }
        let r = publish(base.clone(), a).await;
        assert_eq!(r.status().as_u16(), 429, "{name}: past the burst");
        let retry: u64 = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).expect("Retry-After");
        assert!((1..=2).contains(&retry), "{name}: Retry-After {retry}");
        assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "rate_limited");
        // Another client address is served.
        let r = publish(base.clone(), b).await;
        assert_eq!(r.status().as_u16(), 201, "{name}: another client address is served");
        // Reads are not limited.
        let r = http.get(format!("{base}/canvases/rate-c1")).header("x-forwarded-for", a).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{name}: a read is not rate limited");
    }
    // The first client is served again after its wait.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(publish(fleet.publisher.url(), "198.51.100.1").await.status().as_u16(), 201, "served again after Retry-After");
    fleet.stop().await;
}

#[test]
fn slowloris_foreign_origins_and_oversized_messages_are_refused_and_others_are_served() {
    block_on(bad_clients());
}

#[test]
fn the_connection_cap_refuses_the_excess_with_503_and_serves_the_rest() {
    block_on(connection_cap());
}

#[test]
fn the_publish_rate_limit_answers_429_past_the_burst_and_serves_other_clients() {
    block_on(publish_rate_limit());
}
