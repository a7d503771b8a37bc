//! Operations with real processes and clients under steady publishing, on the embedded broker:
//! a maintenance drain through the gateway and a graceful stop (SIGTERM); a node frozen with
//! SIGSTOP. Sessions are handed over, nodes come back through the gateway's recovery path, and
//! no client loses, repeats or reorders a version.

use crate::block_on;
use e2e::broker::{Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::Timeline;
use e2e::scenario::{finish, pick_canvases, spawn_clients, wait_for_heads};
use shared::CanvasDims;
use std::time::Duration;

fn node<'a>(f: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    f["nodes"].as_array().and_then(|n| n.iter().find(|n| n["id"] == id)).unwrap_or(&serde_json::Value::Null)
}

fn partitions(n: &serde_json::Value) -> usize {
    n["assigned_partitions"].as_array().map_or(0, |a| a.len())
}

async fn drain_and_graceful_stop() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    let mut fleet = Fleet::start(&broker, FleetSpec { grace_ms: 2000, ..FleetSpec::default() }, tl.clone()).await.expect("fleet");
    let state = fleet.fleet_state().await.unwrap();
    let nodes = vec!["ws-1".to_owned(), "ws-2".to_owned()];
    let canvases = pick_canvases(&state, fleet.spec.partitions, 4, &nodes);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let clients = spawn_clients(&fleet, &canvases, 8, dims).await.expect("clients");
    let load = Load::start(&fleet.publisher.url(), canvases.clone(), 40.0, dims.width, dims.height);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The gateway forwards canvas requests to the publisher (one origin for pages).
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/api/canvases/{}/pixels", fleet.gateway.url(), canvases[0]))
        .json(&serde_json::json!({"x": 1, "y": 1, "color": "#123456"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let published: serde_json::Value = r.json().await.unwrap();
    // The Idempotency-Key goes through the gateway: the same request again is the first answer.
    let keyed = || {
        http.post(format!("{}/api/canvases/{}/pixels", fleet.gateway.url(), canvases[0]))
            .header("idempotency-key", "operations-test-key")
            .json(&serde_json::json!({"x": 2, "y": 2, "color": "#654321"}))
    };
    let first = keyed().send().await.unwrap();
    assert_eq!(first.status().as_u16(), 201);
    let first: serde_json::Value = first.json().await.unwrap();
    let again = keyed().send().await.unwrap();
    assert_eq!(again.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap().to_owned()), Some("true".into()));
    assert_eq!(again.json::<serde_json::Value>().await.unwrap()["version"], first["version"], "one write for one key");
    let r = http.get(format!("{}/api/canvases/{}", fleet.gateway.url(), canvases[0])).send().await.unwrap();
    let truth: serde_json::Value = r.json().await.unwrap();
    assert!(truth["version"].as_u64() >= published["version"].as_u64(), "{truth} vs {published}");
    let r = http.post(format!("{}/api/canvases/{}/pixels", fleet.gateway.url(), canvases[0])).body("{\"x\":1}").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["field"], "y");
    // A batch publish through the gateway: each canvas's events in order, answered in request order.
    let ev = |c: &str, x: u32| serde_json::json!({"canvas": c, "x": x, "y": 3, "color": "#0a0b0c"});
    let r = http
        .post(format!("{}/api/pixels", fleet.gateway.url()))
        .json(&serde_json::json!({"events": [ev(&canvases[0], 1), ev(&canvases[1], 2), ev(&canvases[0], 3)]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let batch: serde_json::Value = r.json().await.unwrap();
    let results = batch["results"].as_array().expect("results");
    assert!(results.iter().all(|r| r["status"] == 201), "{batch}");
    assert_eq!(results[0]["canvas"], canvases[0].as_str());
    assert!(results[2]["version"].as_u64() > results[0]["version"].as_u64(), "{batch}");
    let r = http.post(format!("{}/api/pixels", fleet.gateway.url())).json(&serde_json::json!({"events": [{"canvas": canvases[0], "x": 9999, "y": 0, "color": "#000000"}]})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["field"], "events[0].x");

    // Bad requests are refused with JSON and change nothing.
    let r = http.post(format!("{}/api/fleet/nodes/ws-2/drain", fleet.gateway.url())).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401, "the drain needs the admin token");
    let r = fleet.admin(http.post(format!("{}/api/fleet/nodes/ws-9/drain", fleet.gateway.url()))).json(&serde_json::json!({})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "not_found");
    let r = fleet
        .admin(http.post(format!("{}/api/fleet/nodes/ws-2/drain", fleet.gateway.url())))
        .header("content-type", "application/json")
        .body("{\"grace\":1}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["field"], "grace");

    // Maintenance drain of ws-2 through the gateway.
    tl.mark("operator drains ws-2 through the gateway");
    let r = fleet
        .admin(http.post(format!("{}/api/fleet/nodes/ws-2/drain", fleet.gateway.url())))
        .json(&serde_json::json!({"grace_ms": 2000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let report: serde_json::Value = r.json().await.unwrap();
    assert_eq!(report["reason"], "MAINTENANCE");
    assert!(report["notified_sessions"].as_u64().unwrap() > 0, "ws-2 had sessions to hand over: {report}");
    // The drain answered when it was over: ws-2 is UP (not ready) and out of the group.
    let h: serde_json::Value = http.get(format!("{}/health", fleet.nodes[1].url())).send().await.unwrap().json().await.unwrap();
    assert_eq!((h["state"].as_str(), h["ready"].as_bool()), (Some("UP"), Some(false)), "{h}");
    assert_eq!(partitions(&h), 0, "ws-2 left the broadcast group: {h}");
    fleet
        .wait_fleet("the gateway to see ws-2 UP after the drain", Duration::from_secs(30), |f| {
            let ws2 = node(f, "ws-2");
            (ws2["state"] == "UP").then_some(()).ok_or(format!("ws-2 {}", ws2["state"]))
        })
        .await
        .unwrap();
    // The gateway's recovery path brings ws-2 back: UP×5, start-recovery, catch-up, HEALTHY,
    // and the group gives it partitions again.
    fleet
        .wait_fleet("ws-2 back: HEALTHY with partitions", Duration::from_secs(90), |f| {
            let ws2 = node(f, "ws-2");
            (ws2["state"] == "HEALTHY" && partitions(ws2) > 0 && partitions(node(f, "ws-1")) > 0)
                .then_some(())
                .ok_or(format!("ws-2 {} streak {} partitions {}", ws2["state"], ws2["up_streak"], ws2["assigned_partitions"]))
        })
        .await
        .unwrap();
    let f = fleet.fleet_state().await.unwrap();
    let actions: Vec<(String, String)> = f["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|d| (d["node"].as_str().unwrap().to_owned(), d["action"].as_str().unwrap().to_owned()))
        .collect();
    let pos = |node: &str, action: &str| actions.iter().rposition(|(n, a)| n == node && a == action);
    let (drained, recovered) = (pos("ws-2", "drain_completed"), pos("ws-2", "start_recovery"));
    assert!(drained.is_some() && recovered > drained, "drain, then recovery: {actions:?}");
    let ws2 = e2e::procs::get_json(&fleet.http, &format!("{}/health", fleet.nodes[1].url())).await.unwrap();
    assert_eq!(ws2["catchup"]["status"], "completed", "{}", ws2["catchup"]);
    assert_eq!(ws2["catchup"]["completed"], 2, "ws-2 caught up again after the drain: {}", ws2["catchup"]);

    // Graceful stop of ws-1: it drains (SHUTDOWN), leaves the group, exits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let term_at = shared::event::now_ms();
    let exit = fleet.nodes[0].terminate(Duration::from_secs(10)).await;
    assert!(exit.is_some_and(|s| s.success()), "ws-1 exited cleanly (status 0) within 10 s of SIGTERM: {exit:?}");
    fleet
        .wait_fleet("ws-2 to own every partition after ws-1 stopped", Duration::from_secs(60), |f| {
            let n = partitions(node(f, "ws-2"));
            (n == 6).then_some(()).ok_or(format!("ws-2 owns {n}"))
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let stats = load.stop().await;
    let truths = wait_for_heads(&fleet, &clients, &canvases).await.expect("clients settle");
    let (reports, verdicts) = finish(clients, &truths).await;
    // ws-1 drained on SIGTERM: its clients were told to reconnect (not cut off).
    let noticed = reports
        .iter()
        .flat_map(|r| &r.sessions)
        .filter(|s| s.closed_ms.is_some_and(|c| c >= term_at) && s.end.as_deref() == Some("reconnect_notice"))
        .count();
    assert!(noticed > 0, "ws-1's clients got a reconnect notice when it drained on SIGTERM");
    // The clients' close frames went through the gateway: the node's sessions end too.
    fleet
        .wait_fleet("the node's sessions to close after the clients closed", Duration::from_secs(20), |f| {
            let n = node(f, "ws-2")["sessions"].as_u64().unwrap_or(99);
            (n == 0).then_some(()).ok_or(format!("ws-2 has {n} sessions"))
        })
        .await
        .unwrap();
    fleet.stop().await;
    let published = stats.accepted.load(std::sync::atomic::Ordering::Relaxed);
    println!("published {published}");
    assert!(published > 100);
    for v in &verdicts {
        println!("{} {}: events {} lost {:?} dup {} ooo {} snaps {} hash {}", v.name, v.channel, v.events, v.lost, v.duplicated, v.out_of_order, v.extra_snapshots, v.hash_matches);
    }
    for v in &verdicts {
        assert!(v.ok(), "client {} did not get exactly its canvas's versions: {v:?}", v.name);
    }
}

async fn frozen_node() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    let mut fleet = Fleet::start(&broker, FleetSpec::default(), tl.clone()).await.expect("fleet");
    let state = fleet.fleet_state().await.unwrap();
    let canvases = pick_canvases(&state, fleet.spec.partitions, 4, &["ws-1".to_owned(), "ws-2".to_owned()]);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let clients = spawn_clients(&fleet, &canvases, 8, dims).await.expect("clients");
    let load = Load::start(&fleet.publisher.url(), canvases.clone(), 30.0, dims.width, dims.height);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Freeze ws-1: its sockets stay open but nothing comes through them.
    let pid = nix::unistd::Pid::from_raw(fleet.nodes[0].pid().expect("ws-1 runs") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let frozen_at = shared::event::now_ms();
    tl.mark("SIGSTOP ws-1: frozen, its connections stay open");
    fleet
        .wait_fleet("ws-2 to own every partition", Duration::from_secs(60), |f| {
            let n = partitions(node(f, "ws-2"));
            (n == 6 && node(f, "ws-1")["state"] == "DOWN").then_some(()).ok_or(format!("ws-2 owns {n}, ws-1 {}", node(f, "ws-1")["state"]))
        })
        .await
        .unwrap();
    // The gateway moves the frozen node's clients: every client receives live events again.
    e2e::procs::eventually("every client to receive events published after the freeze", Duration::from_secs(30), || async {
        let waiting = clients
            .iter()
            .filter(|c| !c.report().got.iter().any(|g| g.published_at_ms > frozen_at && g.at_ms > frozen_at))
            .count();
        if waiting == 0 { Ok(Some(())) } else { Err(format!("{waiting} clients still waiting")) }
    })
    .await
    .unwrap();
    let f = fleet.fleet_state().await.unwrap();
    assert!(
        f["decisions"].as_array().unwrap().iter().any(|d| d["node"] == "ws-1" && d["action"] == "sessions_moved"),
        "the gateway recorded moving the frozen node's sessions"
    );
    // Frozen past its session timeout, ws-1 lost its partitions to ws-2. The first answer after
    // SIGCONT must not report that stale ownership as current: it is DEGRADED (ownership not
    // confirmed) until the group's rebalance reaches it, or HEALTHY only with an assignment it got
    // after the resume.
    let ws1_url = fleet.nodes[0].url();
    let cont_at = shared::event::now_ms();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    tl.mark("SIGCONT ws-1");
    let first: serde_json::Value = reqwest::get(format!("{ws1_url}/health")).await.unwrap().json().await.unwrap();
    tl.mark(format!("ws-1's first answer: {} ownership_confirmed={} paused={}", first["state"], first["progress"]["ownership_confirmed"], first["progress"]["paused"]));
    assert!(first["progress"]["paused"]["for_ms"].as_u64().unwrap_or(0) >= 5_000, "ws-1 saw its own freeze: {}", first["progress"]);
    let fresh = first["progress"]["assignment_at_ms"].as_u64().is_some_and(|t| t >= cont_at);
    assert!(
        first["state"] == "DEGRADED" && first["progress"]["ownership_confirmed"] == false || first["state"] == "HEALTHY" && fresh,
        "ws-1's first answer after the freeze reported its old ownership as current: {first}"
    );
    fleet
        .wait_fleet("ws-1 HEALTHY with partitions again", Duration::from_secs(90), |f| {
            let ws1 = node(f, "ws-1");
            (ws1["state"] == "HEALTHY" && partitions(ws1) > 0).then_some(()).ok_or(format!("ws-1 {} owns {}", ws1["state"], partitions(ws1)))
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Every failback toward ws-1 rested on an assignment it got after the resume, not on the one
    // it reported stale.
    let f = fleet.fleet_state().await.unwrap();
    for d in f["decisions"].as_array().unwrap().iter().filter(|d| d["node"] == "ws-1" && d["action"] == "failback_started") {
        let at = d["detail"]["assignment_at_ms"].as_u64().unwrap_or(0);
        assert!(at >= cont_at, "a failback to ws-1 rested on its assignment from before the freeze: {d}");
    }
    load.stop().await;
    let truths = wait_for_heads(&fleet, &clients, &canvases).await.expect("clients settle");
    let (_reports, verdicts) = finish(clients, &truths).await;
    fleet.stop().await;
    for v in &verdicts {
        assert!(v.ok(), "client {} did not get exactly its canvas's versions: {v:?}", v.name);
    }
}

/// Sends one raw frame on a fresh session of `url` and returns the close code the server answered.
async fn close_code_for(url: &str, frame: tokio_tungstenite::tungstenite::Message) -> Option<u16> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("origin", "http://bad-client.example".parse().unwrap());
    req.headers_mut().insert("user-agent", "e2e-bad-client/1".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.expect("session opens");
    ws.send(frame).await.expect("frame sent");
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("an answer within 10 s") {
            Some(Ok(Message::Close(f))) => return f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

async fn malformed_frames() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::Message;
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    // The bad client's pages are of an allowed origin: the frames, not the origin, are at fault.
    let origin = vec![("ALLOWED_ORIGINS".to_owned(), "http://bad-client.example".to_owned())];
    let spec = FleetSpec { node_env: origin.clone(), gateway_env: origin, ..FleetSpec::default() };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let state = fleet.fleet_state().await.unwrap();
    let canvas = pick_canvases(&state, fleet.spec.partitions, 1, &["ws-1".to_owned()]).remove(0);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    // A well-behaved client that must keep being served throughout.
    let good = spawn_clients(&fleet, std::slice::from_ref(&canvas), 1, dims).await.unwrap();
    let load = Load::start(&fleet.publisher.url(), vec![canvas.clone()], 20.0, dims.width, dims.height);
    const SECRET: &str = "PAYLOAD-MUST-NOT-BE-LOGGED";
    let bad_utf8 = || Message::Frame(Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true));
    let rsv1 = || {
        let mut f = Frame::message(b"{}".to_vec(), OpCode::Data(Data::Text), true);
        f.header_mut().rsv1 = true;
        Message::Frame(f)
    };
    let cases: Vec<(&str, Box<dyn Fn() -> Message>, u16)> = vec![
        ("not JSON", Box::new(|| Message::Text(format!("{SECRET} not json").into())), 1007),
        ("invalid UTF-8", Box::new(bad_utf8), 1007),
        ("oversized", Box::new(|| Message::Text(format!("\"{}\"", SECRET.repeat(200)).into())), 1009),
        ("reserved bit set", Box::new(rsv1), 1002),
        ("binary", Box::new(|| Message::Binary(SECRET.as_bytes().to_vec().into())), 1003),
    ];
    let direct = format!("ws://127.0.0.1:{}/ws?canvas={canvas}&since=0", fleet.nodes[0].port);
    let through_gateway = format!("{}/ws?canvas={canvas}&since=0", fleet.gateway_ws());
    for (name, frame, want) in &cases {
        assert_eq!(close_code_for(&direct, frame()).await, Some(*want), "{name}, straight to the node");
        assert_eq!(close_code_for(&through_gateway, frame()).await, Some(*want), "{name}, through the gateway");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The node sees every case (the gateway forwards well-formed frames to it); the gateway's own
    // WebSocket layer sees the frames that break the protocol itself (UTF-8, reserved bits) or its
    // message limit (the node's).
    for (source, at_least) in [("ws-1", 2 * cases.len() - 3), ("gateway", 3)] {
        let warnings = tl.grep(source, "ws.protocol_error");
        assert!(warnings.len() >= at_least, "{source} logs protocol errors as ws.protocol_error warnings: {warnings:?}");
        for w in &warnings {
            assert!(w.contains(" WARN ") && w.contains("close_code=") && w.contains("reason="), "{w}");
            assert!(w.contains("origin=http://bad-client.example") && w.contains("user_agent=e2e-bad-client/1"), "{w}");
        }
        assert!(tl.logs_of(source).iter().all(|l| !l.contains(SECRET)), "{source} logged a payload");
    }
    // Everyone else kept being served.
    let before = good[0].version();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(good[0].version() > before, "the well-behaved client kept receiving events");
    load.stop().await;
    let truths = wait_for_heads(&fleet, &good, std::slice::from_ref(&canvas)).await.unwrap();
    let (_r, verdicts) = finish(good, &truths).await;
    fleet.stop().await;
    assert!(verdicts[0].ok(), "{:?}", verdicts[0]);
}

#[test]
fn maintenance_drain_and_graceful_stop_lose_nothing() {
    block_on(drain_and_graceful_stop());
}

#[test]
fn malformed_frames_get_their_close_codes_and_warnings_and_others_keep_being_served() {
    block_on(malformed_frames());
}

#[test]
fn a_frozen_node_loses_its_clients_to_the_new_owner_and_nothing_is_lost() {
    block_on(frozen_node());
}
