//! Capacity-aware admission with real processes, on the embedded broker: a node with
//! `MAX_SESSIONS=50` and 80 clients for its canvases through the gateway. 50 are served; of the
//! 30 others, 25 wait in the gateway's queue (`ADMISSION_QUEUE=25`) and 5 are told at once when to
//! retry (503 `full`, jittered Retry-After); none of the 50 is ever disconnected, and their event
//! histories are complete; when 20 leave, the 20 oldest waiters are admitted, in order of
//! arrival; the last 5 waiters run out of time and get 503 `full`. Straight to the node, a
//! handshake beyond its capacity gets 503 `full` too.
//!
//! And a failback paced to the recovered node's room: ws-1 comes back with `MAX_SESSIONS=10`
//! while ws-2 serves 5 clients on each partition; the gateway drains only the partitions whose
//! sessions fit (two), the others' clients stay on ws-2 and keep being served past the nodes'
//! own hold (`REVOKE_HOLD_MS`: the gateway extends it with `POST /admin/hold`), and move once
//! room frees on ws-1.

use crate::block_on;
use e2e::broker::{Broker, BrokerKind};
use e2e::checker::check;
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::{eventually, get_json, Timeline};
use e2e::scenario::{finish, pick_canvases, spawn_clients, wait_for_heads};
use futures::StreamExt;
use shared::CanvasDims;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self, Message};

const CAPACITY: usize = 50;
const QUEUE: usize = 25;
const WAIT_MS: u64 = 20_000;

fn node<'a>(f: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    f["nodes"].as_array().and_then(|n| n.iter().find(|n| n["id"] == id)).unwrap_or(&serde_json::Value::Null)
}

/// A refused handshake: status, `error` code, Retry-After (s).
type Refusal = (u16, String, Option<u64>);

fn refusal(e: &tungstenite::Error) -> Option<Refusal> {
    let tungstenite::Error::Http(resp) = e else { return None };
    let retry = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let body: serde_json::Value = resp.body().as_ref().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or_default();
    Some((resp.status().as_u16(), body["error"].as_str().unwrap_or_default().to_owned(), retry))
}

/// How a waiting client's handshake ended.
#[derive(Debug)]
enum Outcome {
    /// Admitted; the first frame the node sent (its `welcome`) was read.
    Admitted(Box<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>>),
    Refused(Refusal),
}

async fn capacity_is_respected_and_waiters_go_in_order() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    let env = |kv: &[(&str, String)]| kv.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect::<Vec<_>>();
    let spec = FleetSpec {
        nodes: 1,
        node_env: env(&[("MAX_SESSIONS", CAPACITY.to_string())]),
        gateway_env: env(&[
            ("ADMISSION_QUEUE", QUEUE.to_string()),
            ("ADMISSION_WAIT_MS", WAIT_MS.to_string()),
            ("ADMISSION_RETRY_AFTER_S", "2".into()),
            ("ADMISSION_RETRY_JITTER_S", "3".into()),
        ]),
        ..FleetSpec::default()
    };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let state = fleet.fleet_state().await.unwrap();
    let canvases = pick_canvases(&state, fleet.spec.partitions, 4, &["ws-1".to_owned()]);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let http = reqwest::Client::new();
    let ws1 = fleet.nodes[0].url();

    // 50 clients: the node's capacity.
    let mut served = spawn_clients(&fleet, &canvases, CAPACITY, dims).await.expect("50 clients served");
    let load = Load::start(&fleet.publisher.url(), canvases.clone(), 20.0, dims.width, dims.height);
    let h = get_json(&http, &format!("{ws1}/health")).await.unwrap();
    assert_eq!((h["sessions"].as_u64(), h["max_sessions"].as_u64(), h["session_seats"].as_u64()), (Some(50), Some(50), Some(50)), "{h}");

    // Straight to the node: the 51st handshake gets 503 `full` with a Retry-After (a few at once:
    // the seats are taken before the answer, so none slips through).
    let direct = format!("{}/ws?canvas={}&since=0", ws1.replacen("http", "ws", 1), canvases[0]);
    let tries = futures::future::join_all((0..5).map(|_| tokio_tungstenite::connect_async(direct.clone()))).await;
    for t in &tries {
        let r = t.as_ref().err().and_then(refusal);
        assert!(matches!(&r, Some((503, code, Some(_))) if code == "full"), "{:?}", t.as_ref().map(|_| "admitted").map_err(|e| e.to_string()));
    }
    let h = get_json(&http, &format!("{ws1}/health")).await.unwrap();
    assert_eq!(h["sessions"].as_u64(), Some(50), "refused handshakes take no seat: {h}");

    // 30 more clients through the gateway, one after the other (so their arrival order is known):
    // the first 25 wait in ws-1's queue, the last 5 are told when to retry.
    let admitted_order: Arc<Mutex<Vec<usize>>> = Arc::default();
    let mut waiters = Vec::new();
    let mut refused_at_once = Vec::new();
    for i in 0..30 {
        let url = format!("{}/ws?canvas={}&since=0", fleet.gateway_ws(), canvases[i % canvases.len()]);
        let order = admitted_order.clone();
        let task = tokio::spawn(async move {
            match tokio_tungstenite::connect_async(url).await {
                Ok((mut ws, _)) => {
                    order.lock().unwrap().push(i);
                    let first = tokio::time::timeout(Duration::from_secs(10), ws.next()).await;
                    assert!(matches!(first, Ok(Some(Ok(Message::Text(_))))), "an admitted client is served: {first:?}");
                    Outcome::Admitted(Box::new(ws))
                }
                Err(e) => Outcome::Refused(refusal(&e).unwrap_or_else(|| panic!("client {i}: {e}"))),
            }
        });
        if i < QUEUE {
            let want = i + 1;
            fleet
                .wait_fleet(&format!("{want} handshakes waiting for ws-1"), Duration::from_secs(10), |f| {
                    let w = node(f, "ws-1")["admission_waiting"].as_u64().unwrap_or(0) as usize;
                    (w == want).then_some(()).ok_or(format!("{w} waiting"))
                })
                .await
                .unwrap();
            waiters.push(task);
        } else {
            let out = tokio::time::timeout(Duration::from_secs(5), task).await.expect("a full queue answers at once").unwrap();
            match out {
                Outcome::Refused(r) => refused_at_once.push(r),
                Outcome::Admitted(_) => panic!("client {i} was admitted past the capacity"),
            }
        }
    }
    tl.mark("50 served, 25 waiting, 5 told when to retry");
    for (status, code, retry) in &refused_at_once {
        assert_eq!((*status, code.as_str()), (503, "full"));
        assert!(retry.is_some_and(|r| (2..=5).contains(&r)), "Retry-After within 2..=5 s: {retry:?}");
    }
    // A browser-style client (refusal=frame) is told the same in an error frame, then 1013.
    let (mut framed, _) =
        tokio_tungstenite::connect_async(format!("{}/ws?canvas={}&since=0&refusal=frame", fleet.gateway_ws(), canvases[0])).await.unwrap();
    let frame = framed.next().await.unwrap().unwrap();
    let frame: serde_json::Value = serde_json::from_str(frame.to_text().unwrap()).unwrap();
    assert_eq!(frame["code"], "full", "{frame}");
    assert!(frame["retry_after_ms"].as_u64().is_some_and(|ms| (2000..=5000).contains(&ms)), "{frame}");
    let close = framed.next().await.unwrap().unwrap();
    assert!(matches!(&close, Message::Close(Some(c)) if u16::from(c.code) == 1013), "{close:?}");
    assert!(admitted_order.lock().unwrap().is_empty(), "nobody was admitted while the node was full");
    let h = get_json(&http, &format!("{ws1}/health")).await.unwrap();
    assert_eq!(h["sessions"].as_u64(), Some(50), "{h}");

    // 20 of the served clients leave: the 20 oldest waiters take their places, in order.
    tl.mark("20 served clients leave");
    let leaving: Vec<_> = served.drain(..20).collect();
    let mut left_reports = Vec::new();
    for c in leaving {
        left_reports.push(c.stop().await);
    }
    eventually("20 waiters admitted", Duration::from_secs(15), || {
        let n = admitted_order.lock().unwrap().len();
        async move { if n >= 20 { Ok(Some(())) } else { Err(format!("{n} admitted")) } }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let order = admitted_order.lock().unwrap().clone();
    assert_eq!(order.len(), 20, "exactly the freed places were filled: {order:?}");
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..20).collect::<Vec<_>>(), "the 20 oldest waiters were admitted (in the order they connected: {order:?})");
    let h = get_json(&http, &format!("{ws1}/health")).await.unwrap();
    assert_eq!((h["sessions"].as_u64(), h["session_seats"].as_u64()), (Some(50), Some(50)), "{h}");
    let f = fleet.fleet_state().await.unwrap();
    assert_eq!(node(&f, "ws-1")["admission_waiting"].as_u64(), Some(5), "the 5 youngest still wait: {f}");

    // The last 5 waiters run out of time: 503 full with a jittered Retry-After.
    let mut admitted = Vec::new();
    let mut timed_out = Vec::new();
    for (i, w) in waiters.into_iter().enumerate() {
        match tokio::time::timeout(Duration::from_millis(WAIT_MS + 10_000), w).await.expect("every wait ends").unwrap() {
            Outcome::Admitted(ws) => admitted.push((i, ws)),
            Outcome::Refused(r) => timed_out.push((i, r)),
        }
    }
    assert_eq!(admitted.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (0..20).collect::<Vec<_>>());
    assert_eq!(timed_out.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (20..25).collect::<Vec<_>>());
    for (_, (status, code, retry)) in &timed_out {
        assert_eq!((*status, code.as_str()), (503, "full"));
        assert!(retry.is_some_and(|r| (2..=5).contains(&r)), "{retry:?}");
    }
    let retries: std::collections::BTreeSet<u64> =
        refused_at_once.iter().chain(timed_out.iter().map(|(_, r)| r)).filter_map(|(_, _, r)| *r).collect();
    assert!(retries.len() > 1, "Retry-After is jittered over 10 refusals: {retries:?}");

    // None of the served clients was ever disconnected, and each got every version.
    for r in &left_reports {
        let v = check(r, r.version, &r.hash);
        assert!(v.ok() && r.sessions.len() == 1 && r.refused == 0, "{} (left): {v:?}, sessions {:?}", r.name, r.sessions);
    }
    load.stop().await;
    let truths = wait_for_heads(&fleet, &served, &canvases).await.unwrap();
    let (reports, verdicts) = finish(served, &truths).await;
    for (r, v) in reports.iter().zip(&verdicts) {
        assert!(v.ok(), "{v:?}");
        assert_eq!((r.sessions.len(), r.refused), (1, 0), "{} was never disconnected: {:?}", r.name, r.sessions);
    }
    drop(admitted);
    fleet.stop().await;
}

/// One canvas on each partition: `canvas-<i>` with the smallest `i`.
fn one_canvas_per_partition(partitions: u32) -> Vec<String> {
    (0..partitions)
        .map(|p| {
            (0..10_000)
                .map(|i| format!("canvas-{i}"))
                .find(|c| shared::partitioner::partition_for(c.as_bytes(), partitions) == p)
                .expect("a canvas on every partition")
        })
        .collect()
}

/// The nodes' `REVOKE_HOLD_MS` in the paced failback case.
const HOLD_MS: u64 = 12_000;

async fn failback_paced_to_the_recovered_node_s_room() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    // A hold of 12 s: the embedded broker's rebalance rounds come about 5 s apart (real Kafka's
    // in about 1 s), so the default 5 s can run out before the new owner is assigned at all.
    // The gateway extends the holds while the failback waits for room.
    let spec = FleetSpec { node_env: vec![("REVOKE_HOLD_MS".into(), HOLD_MS.to_string())], ..FleetSpec::default() };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let partitions = fleet.spec.partitions;
    let canvases = one_canvas_per_partition(partitions);
    let partition_of = |c: &str| shared::partitioner::partition_for(c.as_bytes(), partitions) as i64;
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let http = reqwest::Client::new();
    let mut clients = spawn_clients(&fleet, &canvases, canvases.len(), dims).await.expect("clients");
    let load = Load::start(&fleet.publisher.url(), canvases.clone(), 20.0, dims.width, dims.height);
    // Every client has events before the kill (a client at version 0 resumes with a snapshot).
    eventually("every client to have an event", Duration::from_secs(30), || {
        let at_zero = clients.iter().filter(|c| c.version() == 0).count();
        async move { if at_zero == 0 { Ok(Some(())) } else { Err(format!("{at_zero} at version 0")) } }
    })
    .await
    .unwrap();

    // ws-1 dies; ws-2 takes every partition, and more clients come: 5 on each partition, on ws-2.
    fleet.nodes[0].kill9().await;
    fleet
        .wait_fleet("ws-1 DOWN and ws-2 owning every partition", Duration::from_secs(60), |f| {
            let n2 = node(f, "ws-2")["assigned_partitions"].as_array().map_or(0, |a| a.len());
            (node(f, "ws-1")["state"] == "DOWN" && n2 == partitions as usize).then_some(()).ok_or(format!("ws-2 owns {n2}"))
        })
        .await
        .unwrap();
    clients.extend(spawn_clients(&fleet, &canvases, 4 * canvases.len(), dims).await.expect("more clients"));
    let ws2 = fleet.nodes[1].url();
    eventually("ws-2 to serve all 30 clients", Duration::from_secs(30), || {
        let (http, ws2) = (http.clone(), ws2.clone());
        async move {
            let n = get_json(&http, &format!("{ws2}/health")).await?["sessions"].as_u64().unwrap_or(0);
            if n == 30 { Ok(Some(())) } else { Err(format!("{n} sessions")) }
        }
    })
    .await
    .unwrap();
    assert!(clients.iter().all(|c| c.connected()));

    // ws-1 comes back with room for 10 sessions: two partitions' worth.
    tl.mark("ws-1 restarts with MAX_SESSIONS=10");
    let restart_at = shared::event::now_ms();
    fleet.nodes[0].env.insert("MAX_SESSIONS".into(), "10".into());
    fleet.nodes[0].start().unwrap();
    let decided = |f: &serde_json::Value, action: &str| -> Option<serde_json::Value> {
        f["decisions"].as_array()?.iter().find(|d| d["node"] == "ws-1" && d["action"] == action && d["at_ms"].as_u64().unwrap_or(0) > restart_at).cloned()
    };
    let paced = fleet
        .wait_fleet("the failback to ws-1 to be paced", Duration::from_secs(120), |f| {
            decided(f, "failback_paced").ok_or(format!("ws-1 {} partitions {}", node(f, "ws-1")["state"], node(f, "ws-1")["assigned_partitions"]))
        })
        .await
        .unwrap();
    let f = fleet.fleet_state().await.unwrap();
    let assigned: Vec<i64> = node(&f, "ws-1")["assigned_partitions"].as_array().unwrap().iter().filter_map(|p| p.as_i64()).collect();
    let waiting: Vec<i64> = paced["detail"]["waiting"].as_array().unwrap().iter().filter_map(|p| p.as_i64()).collect();
    assert_eq!(waiting.len(), assigned.len() - 2, "two partitions of 5 sessions fit in 10 seats: {paced}, ws-1 owns {assigned:?}");
    let ws1 = fleet.nodes[0].url();
    eventually("ws-1 to serve 10 sessions", Duration::from_secs(30), || {
        let (http, ws1) = (http.clone(), ws1.clone());
        async move {
            let h = get_json(&http, &format!("{ws1}/health")).await?;
            let n = h["sessions"].as_u64().unwrap_or(0);
            if n == 10 { Ok(Some(())) } else { Err(format!("{n} sessions")) }
        }
    })
    .await
    .unwrap();
    // The waiting partitions' clients were not touched, and ws-2 keeps serving them.
    let held: Vec<&e2e::client::Client> = clients.iter().filter(|c| waiting.contains(&partition_of(&c.report().channel))).collect();
    assert_eq!(held.len(), 5 * waiting.len());
    let before: Vec<(u64, usize)> = held.iter().map(|c| (c.version(), c.report().sessions.len())).collect();
    // (Clients are told apart by their index: the two batches' names repeat.)
    let sessions_then: Vec<usize> = clients.iter().map(|c| c.report().sessions.len()).collect();
    // Past the nodes' own hold (REVOKE_HOLD_MS from the revocation, which came before the
    // failback began): ws-2 still holds the waiting partitions and serves their sessions.
    let paced_at = paced["at_ms"].as_u64().unwrap();
    let past_hold = (paced_at + HOLD_MS + 2_000).saturating_sub(shared::event::now_ms()).max(2_000);
    tokio::time::sleep(Duration::from_millis(past_hold)).await;
    let h2 = get_json(&http, &format!("{ws2}/health")).await.unwrap();
    let held_on_ws2: Vec<i64> = h2["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["role"] == "held")
        .filter_map(|p| p["partition"].as_i64())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut waiting_sorted = waiting.clone();
    waiting_sorted.sort_unstable();
    assert_eq!(held_on_ws2, waiting_sorted, "ws-2 keeps holding the waiting partitions past REVOKE_HOLD_MS: {h2}");
    for (c, (v, n)) in held.iter().zip(&before) {
        let r = c.report();
        assert!(c.connected() && r.sessions.len() == *n, "{} stayed on ws-2: {:?}", r.name, r.sessions);
        assert!(c.version() > *v, "{} keeps receiving events on ws-2", r.name);
    }
    assert!(decided(&fleet.fleet_state().await.unwrap(), "failback_completed").is_none(), "the failback waits for room");

    // Five of ws-1's clients leave: room for the next partition, which moves.
    tl.mark("five clients of ws-1 leave");
    let moved_partition = assigned.iter().copied().find(|p| !waiting.contains(p)).unwrap();
    let mut left = Vec::new();
    let mut kept = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        if left.len() < 5 && partition_of(&c.report().channel) == moved_partition {
            left.push(c.stop().await);
        } else {
            kept.push((i, c));
        }
    }
    if waiting.len() == 1 {
        fleet
            .wait_fleet("the failback to ws-1 to complete", Duration::from_secs(60), |f| decided(f, "failback_completed").ok_or("not yet".to_owned()))
            .await
            .unwrap();
    }
    let held: Vec<usize> = kept.iter().filter(|(_, c)| partition_of(&c.report().channel) == waiting[0]).map(|(i, _)| *i).collect();
    eventually("the next partition's clients on ws-1", Duration::from_secs(30), || {
        let moved = kept.iter().filter(|(i, c)| held.contains(i) && c.connected() && c.report().sessions.len() == sessions_then[*i] + 1).count();
        let seen: Vec<String> = kept
            .iter()
            .filter(|(i, _)| held.contains(i))
            .map(|(i, c)| {
                let r = c.report();
                let ends: Vec<String> = r.sessions.iter().map(|s| s.end.clone().unwrap_or_else(|| "open".into())).collect();
                format!("{} ({} then): {ends:?}", r.name, sessions_then[*i])
            })
            .collect();
        async move { if moved == 5 { Ok(Some(())) } else { Err(format!("{moved}/5 moved: {seen:?}")) } }
    })
    .await
    .unwrap();
    let h = get_json(&http, &format!("{ws1}/health")).await.unwrap();
    assert_eq!((h["sessions"].as_u64(), h["max_sessions"].as_u64()), (Some(10), Some(10)), "{h}");

    for r in &left {
        let v = check(r, r.version, &r.hash);
        assert!(v.ok(), "{v:?}");
    }
    load.stop().await;
    let kept: Vec<e2e::client::Client> = kept.into_iter().map(|(_, c)| c).collect();
    let truths = wait_for_heads(&fleet, &kept, &canvases).await.unwrap();
    let (_reports, verdicts) = finish(kept, &truths).await;
    for v in &verdicts {
        assert!(v.ok(), "{v:?}");
    }
    fleet.stop().await;
}

#[test]
fn a_failback_moves_only_what_the_recovered_node_admits_and_the_rest_stays_served() {
    block_on(failback_paced_to_the_recovered_node_s_room());
}

#[test]
fn a_full_node_queues_newcomers_in_order_and_never_drops_a_session() {
    block_on(capacity_is_respected_and_waiters_go_in_order());
}
