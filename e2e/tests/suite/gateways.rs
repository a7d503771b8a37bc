//! Two gateway replicas behind HAProxy (Debian's `haproxy`, installed by
//! scripts/setup-haproxy.sh), their leader elected through a real Kafka broker:
//!
//! 1. both replicas show the same decisions (read back from the control topic);
//! 2. ws-1 is killed and restarted; when the leader has written `failback_started` and its drain
//!    is in progress, the leader gets kill -9;
//! 3. the other replica becomes the leader after the group's session timeout and a rebalance,
//!    with a higher fencing token, and finishes the failback (once);
//! 4. a node refuses the dead leader's token (409 `stale_leader`) and a forged one (409
//!    `unknown_claim`), and the new leader's token still acts;
//!    A node refuses an admin request without a token once a leader has claimed (409
//!    `fencing_token_required`);
//! 5. every client, connected through HAProxy (so some through the dead gateway), ends with every
//!    version of its canvas, once, in order, and the publisher's hash; and so does every client
//!    given both gateways' URLs (no HAProxy), the leader's first: each moves to the survivor;
//! 6. the killed replica comes back as a follower; an operator's drain sent to it is forwarded to
//!    the leader and carried out under its token; a replica started under the leader's
//!    `GATEWAY_ID` exits with `EXIT_DUPLICATE_ID`;
//! 7. HAProxy answers a request whose headers never end with 408 within `timeout http-request`;
//! 8. ws-1 comes back with `MAX_SESSIONS=1` while a client of every partition is connected through
//!    the leader: the failback is paced (`failback_paced`: one partition's session now, the
//!    others' when room frees). Between that decision and the next round, the leader gets
//!    SIGSTOP for longer than the group's session timeout; the other replica leads with a higher
//!    token and resumes the failback; then SIGCONT. Read back from the control topic: the old
//!    leader writes nothing under its old token after the new claim, the failback is started once,
//!    resumed once and, once the clients are gone and ws-1 has room, completed once (by the new
//!    leader), and no node refused (or was sent) a
//!    request under the old token (`ws_node_fencing_refusals_total{error="stale_leader"}`
//!    unchanged); every client of this step ends with every version of its canvas, once, in order.

use e2e::broker::{Broker, BrokerKind};
use e2e::client::{Client, ClientTiming};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::procs::{eventually, Service, Timeline};
use e2e::scenario::{finish, pick_canvases, wait_for_heads};
use e2e::writer::Writer;
use shared::partitioner::partition_for;
use shared::CanvasDims;
use std::time::{Duration, Instant};

const CLIENTS: usize = 8;
/// Clients that know both gateways' URLs, the leader's first, and no HAProxy.
const LISTED: usize = 4;
const CANVASES: usize = 4;

fn leader_of(f: &serde_json::Value) -> Option<String> {
    f["leadership"]["leader"]["gateway"].as_str().map(str::to_owned)
}

fn acting(f: &serde_json::Value) -> bool {
    f["leadership"]["acting"] == true && f["leadership"]["role"]["role"] == "leader"
}

/// The ids of the control topic's decisions in `f`, oldest first.
fn topic_decisions(f: &serde_json::Value) -> Vec<String> {
    let mut ids: Vec<String> = f["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["source"] == "control_topic")
        .filter_map(|d| d["id"].as_str().map(str::to_owned))
        .collect();
    ids.reverse();
    ids
}

fn find<'a>(f: &'a serde_json::Value, pred: impl Fn(&serde_json::Value) -> bool) -> Vec<&'a serde_json::Value> {
    f["decisions"].as_array().into_iter().flatten().filter(|d| pred(d)).collect()
}

/// Gateway replica `i` (0: `gateway`, 1: `gateway-2`).
fn replica(fleet: &Fleet, i: usize) -> &Service {
    if i == 0 { &fleet.gateway } else { &fleet.more_gateways[i - 1] }
}

fn replica_mut(fleet: &mut Fleet, i: usize) -> &mut Service {
    if i == 0 { &mut fleet.gateway } else { &mut fleet.more_gateways[i - 1] }
}

/// The failbacks in `f`'s decisions that were started and have neither completed nor failed.
fn open_failbacks(f: &serde_json::Value) -> Vec<String> {
    let ended: Vec<&str> = find(f, |d| matches!(d["action"].as_str(), Some("failback_completed" | "failback_failed")))
        .iter()
        .filter_map(|d| d["of"].as_str())
        .collect();
    find(f, |d| d["action"] == "failback_started")
        .iter()
        .filter_map(|d| d["id"].as_str())
        .filter(|id| !ended.contains(id))
        .map(str::to_owned)
        .collect()
}

/// Each node's `ws_node_fencing_refusals_total{error="stale_leader"}`: admin requests it refused
/// because they carried a deposed leader's token.
async fn stale_refusals(fleet: &Fleet) -> Vec<u64> {
    let mut out = Vec::new();
    for n in &fleet.nodes {
        let text = fleet.http.get(format!("{}/metrics", n.url())).timeout(Duration::from_secs(3)).send().await.unwrap().text().await.unwrap();
        let count = text
            .lines()
            .find(|l| l.starts_with("ws_node_fencing_refusals_total{") && l.contains("error=\"stale_leader\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{} has no stale_leader refusal count in /metrics", n.name));
        out.push(count as u64);
    }
    out
}

#[test]
fn leader_killed_mid_failback() {
    crate::block_on(run());
}

async fn run() {
    let kind = BrokerKind::real_from_env();
    let broker = Broker::start(kind).await.expect("a Kafka broker");
    let tl = Timeline::new(true);
    // A failback long enough to kill the leader in the middle of it: the drained sessions'
    // reconnect notices are spread over 3 s, and a failback is open until they arrived.
    let spec = FleetSpec {
        gateways: 2,
        grace_ms: 6000,
        node_env: vec![("RECONNECT_SPREAD_MS".into(), "3000".into())],
        ..FleetSpec::default()
    };
    let dims = CanvasDims { width: spec.width, height: spec.height };
    let partitions = spec.partitions;
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("the fleet with two gateways");
    let proxy = e2e::haproxy::Haproxy::start(
        &fleet.gateways().map(|g| (g.name.clone(), format!("127.0.0.1:{}", g.port))).collect::<Vec<_>>(),
        tl.clone(),
    )
    .await
    .expect("haproxy in front of the gateways (scripts/setup-haproxy.sh installs it)");

    // 1. One leader, known to both; the same decisions on both.
    let leader = fleet
        .wait_fleet("a leader", Duration::from_secs(60), |f| leader_of(f).ok_or("no claim yet".to_owned()))
        .await
        .unwrap();
    let (first, second) = (fleet.fleet_state_of(&fleet.gateway).await.unwrap(), fleet.fleet_state_of(&fleet.more_gateways[0]).await.unwrap());
    assert_eq!(leader_of(&first), leader_of(&second), "both replicas name the same leader");
    let old_token = first["leadership"]["leader"]["token"].as_u64().expect("the leader's token");
    eventually("both replicas to show the same decisions", Duration::from_secs(10), || async {
        let a = topic_decisions(&fleet.fleet_state_of(&fleet.gateway).await?);
        let b = topic_decisions(&fleet.fleet_state_of(&fleet.more_gateways[0]).await?);
        if !a.is_empty() && a == b { Ok(Some(())) } else { Err(format!("{a:?} vs {b:?}")) }
    })
    .await
    .unwrap();
    tl.mark(format!("{leader} leads with fencing token {old_token}; both replicas show the same decisions"));

    // Clients and a writer through HAProxy: they land on both gateways.
    let node_ids: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let canvases = pick_canvases(&first, partitions, CANVASES, &node_ids);
    let mut clients: Vec<Client> = (0..CLIENTS)
        .map(|i| Client::spawn(&format!("client-{i}"), &proxy.ws(), &canvases[i % canvases.len()], dims, ClientTiming::default()))
        .collect();
    let leader_first = leader == fleet.gateway.name;
    let direct = |g: &e2e::procs::Service| format!("ws://127.0.0.1:{}", g.port);
    let listed_urls = if leader_first {
        vec![direct(&fleet.gateway), direct(&fleet.more_gateways[0])]
    } else {
        vec![direct(&fleet.more_gateways[0]), direct(&fleet.gateway)]
    };
    clients.extend((0..LISTED).map(|i| {
        Client::spawn_with_gateways(&format!("listed-{i}"), &listed_urls, &canvases[i % canvases.len()], dims, ClientTiming::default(), None)
    }));
    eventually("every client connected", Duration::from_secs(30), || async {
        let ready = clients.iter().filter(|c| c.connected() && !c.report().got.is_empty()).count();
        if ready == clients.len() { Ok(Some(())) } else { Err(format!("{ready}/{}", clients.len())) }
    })
    .await
    .unwrap();
    let writer = Writer::start(&proxy.url(), canvases.clone(), 40.0, dims.width, dims.height);
    tokio::time::sleep(Duration::from_secs(3)).await;

    // 2. ws-1 dies and comes back; the leader starts the failback; kill -9 of the leader mid-drain.
    tl.mark("kill -9 of ws-1");
    fleet.nodes[0].kill9().await;
    fleet
        .wait_fleet("ws-2 to own every partition", Duration::from_secs(60), |f| {
            let owned = f["nodes"][1]["assigned_partitions"].as_array().map_or(0, Vec::len);
            (owned == partitions as usize).then_some(()).ok_or(format!("ws-2 owns {owned}"))
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restart_at = shared::event::now_ms();
    fleet.nodes[0].start().unwrap();
    tl.mark("ws-1 restarted");
    let started = {
        let svc = if leader_first { &fleet.gateway } else { &fleet.more_gateways[0] };
        let mut found = None;
        let deadline = Instant::now() + Duration::from_secs(90);
        while found.is_none() && Instant::now() < deadline {
            if let Ok(f) = fleet.fleet_state_of(svc).await {
                found = find(&f, |d| d["node"] == "ws-1" && d["action"] == "failback_started" && d["at_ms"].as_u64().unwrap_or(0) > restart_at)
                    .first()
                    .map(|d| d["id"].as_str().unwrap_or_default().to_owned());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        found.expect("the leader started the failback to ws-1")
    };
    // The drained sessions arrive at ws-1 over 3 s: kill the leader a second into it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    tl.mark(format!("kill -9 of the leader {leader} during failback {started}"));
    let killed_at = Instant::now();
    if leader_first { fleet.gateway.kill9().await } else { fleet.more_gateways[0].kill9().await }

    // 3. The survivor leads with a higher token and finishes the failback once.
    let survivor = if leader_first { &fleet.more_gateways[0] } else { &fleet.gateway };
    let new_token = eventually("the surviving gateway to become the leader", Duration::from_secs(60), || async {
        let f = fleet.fleet_state_of(survivor).await?;
        let token = f["leadership"]["leader"]["token"].as_u64().unwrap_or(0);
        if acting(&f) { Ok(Some(token)) } else { Err(format!("{}", f["leadership"])) }
    })
    .await
    .unwrap();
    let takeover = killed_at.elapsed();
    tl.mark(format!("{} leads after {} ms with fencing token {new_token}", survivor.name, takeover.as_millis()));
    assert!(new_token > old_token, "the new leader's token {new_token} is above the old one's {old_token}");
    let f = fleet
        .wait_fleet_of(survivor, "the failback to complete", Duration::from_secs(90), |f| {
            let done = find(f, |d| d["action"] == "failback_completed" && d["of"] == started.as_str()).len();
            (done >= 1).then(|| f.clone()).ok_or(format!("{} completions", done))
        })
        .await
        .unwrap();
    assert_eq!(find(&f, |d| d["action"] == "failback_completed" && d["of"] == started.as_str()).len(), 1, "the failback completed once");
    assert_eq!(
        find(&f, |d| d["node"] == "ws-1" && d["action"] == "failback_started" && d["at_ms"].as_u64().unwrap_or(0) > restart_at).len(),
        1,
        "no second failback was started: the new leader resumed the first"
    );
    assert_eq!(find(&f, |d| d["action"] == "failback_resumed" && d["of"] == started.as_str()).len(), 1, "the new leader resumed it");

    // 4. A node refuses the dead leader's token.
    let ws2 = &fleet.nodes[1];
    let resp = fleet
        .admin(fleet.http.post(format!("{}/admin/hold", fleet.admin_base(ws2))))
        .header(shared::control::FENCING_HEADER, old_token.to_string())
        .json(&serde_json::json!({"partitions": [0], "for_ms": 1000}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409, "a deposed leader's token is refused");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "stale_leader", "{body}");
    // A token no claim backs (anyone with the admin secret could send one) is refused, and does
    // not lock the real leader out.
    let hold = |token: u64| {
        fleet
            .admin(fleet.http.post(format!("{}/admin/hold", fleet.admin_base(ws2))))
            .header(shared::control::FENCING_HEADER, token.to_string())
            .json(&serde_json::json!({"partitions": [0], "for_ms": 1000}))
            .send()
    };
    let resp = hold(u64::MAX).await.unwrap();
    assert_eq!(resp.status(), 409, "a forged token is refused");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "unknown_claim", "{body}");
    let resp = hold(new_token).await.unwrap();
    assert_eq!(resp.status(), 200, "the leader's own token still acts after a forged one");
    // Without a token (a follower acting alone, a script with the admin secret): refused.
    let resp = fleet
        .admin(fleet.http.post(format!("{}/admin/hold", fleet.admin_base(ws2))))
        .json(&serde_json::json!({"partitions": [0], "for_ms": 1000}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409, "an admin request without a token after a claim is refused");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "fencing_token_required", "{body}");
    let survivor_name = survivor.name.clone();

    // 5. Every client: every version once, in order, the publisher's hash.
    let stats = writer.stop().await;
    tl.mark(format!("writer stopped: {} acknowledged", stats.acked_count()));
    let truths = wait_for_heads(&fleet, &clients, &canvases).await.unwrap();
    let (reports, verdicts) = finish(clients, &truths).await;
    let moved = reports.iter().filter(|r| r.sessions.len() > 1).count();
    for v in &verdicts {
        assert!(v.ok(), "client {} did not get exactly its canvas's versions: {v:?}", v.name);
    }
    // The clients with the URL list began on the leader and went on through the survivor.
    for r in reports.iter().filter(|r| r.name.starts_with("listed-")) {
        let gateways: Vec<usize> = r.sessions.iter().map(|s| s.gateway).collect();
        assert_eq!(gateways.first(), Some(&0), "{} began on the first URL (the leader): {gateways:?}", r.name);
        assert_eq!(gateways.last(), Some(&1), "{} ended on the second URL (the survivor): {gateways:?}", r.name);
    }
    assert!(stats.failed.lock().unwrap().is_empty(), "the writer gave up on publishes");
    println!("takeover after the leader's kill -9: {} ms; clients that reconnected: {moved}/{}", takeover.as_millis(), CLIENTS + LISTED);

    // 6. The killed replica comes back as a follower. An operator's drain sent to it is carried
    //    out by the leader, under its token; a third replica under the leader's GATEWAY_ID is
    //    refused at start.
    let back = if leader_first { &mut fleet.gateway } else { &mut fleet.more_gateways[0] };
    back.start().unwrap();
    let back = if leader_first { &fleet.gateway } else { &fleet.more_gateways[0] };
    eventually("the restarted replica to follow the leader", Duration::from_secs(60), || async {
        let f = fleet.fleet_state_of(back).await?;
        let l = &f["leadership"];
        if l["role"]["role"] == "follower" && l["leader"]["gateway"] == survivor_name.as_str() && l["leader"]["url"].is_string() { Ok(Some(())) } else { Err(format!("{l}")) }
    })
    .await
    .unwrap();
    let resp = fleet
        .admin(fleet.http.post(format!("{}/api/fleet/nodes/ws-2/drain", back.url())))
        .json(&serde_json::json!({"grace_ms": 500}))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let report: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(status, 200, "the follower forwarded the drain and the leader carried it out: {report}");
    assert_eq!(report["reason"], "MAINTENANCE", "{report}");
    let f = fleet
        .wait_fleet_of(back, "the drain in the control topic", Duration::from_secs(10), |f| {
            let d = find(f, |d| d["action"] == "drain" && d["node"] == "ws-2").into_iter().cloned().collect::<Vec<_>>();
            (!d.is_empty()).then(|| d).ok_or("no drain yet".to_owned())
        })
        .await
        .unwrap();
    assert_eq!(f.len(), 1, "one drain decision: {f:?}");
    assert_eq!(f[0]["gateway"], survivor_name.as_str(), "decided by the leader: {f:?}");
    assert_eq!(f[0]["token"].as_u64(), Some(new_token), "under the leader's token: {f:?}");
    let mut twin = e2e::procs::Service::new("gateway-twin", &fleet.gateway.bin, e2e::broker::free_port().unwrap(), fleet.gateway.env.clone(), tl.clone());
    let twin_port = twin.port;
    twin.env.insert("LISTEN_ADDR".into(), format!("127.0.0.1:{twin_port}"));
    twin.env.insert("GATEWAY_ID".into(), survivor_name.clone());
    twin.env.remove("ADMIN_LISTEN_ADDR");
    twin.env.insert("ADMIN_LISTEN_ADDR".into(), format!("127.0.0.1:{}", e2e::broker::free_port().unwrap()));
    twin.start().unwrap();
    let ended = twin.exited_within(Duration::from_secs(60)).await;
    assert_eq!(
        ended.and_then(|s| s.code()),
        Some(shared::control::EXIT_DUPLICATE_ID),
        "a replica under a live replica's GATEWAY_ID is refused at start: {ended:?}"
    );

    // 7. HAProxy bounds the time a request's headers may take (`timeout http-request`): a
    //    slowloris gets 408 and its connection is closed, instead of holding it for an hour.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let started = Instant::now();
        let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        slow.write_all(b"GET /readyz HTTP/1.1\r\nHost: fleet\r\n").await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut answer)).await.expect("HAProxy closes a slow request").unwrap();
        let answer = String::from_utf8_lossy(&answer);
        tl.mark(format!("a request whose headers never end: closed after {} ms", started.elapsed().as_millis()));
        assert!(answer.starts_with("HTTP/1.1 408"), "408 Request Timeout: {answer}");
        assert!(started.elapsed() < Duration::from_secs(20), "within the configured 10 s: {:?}", started.elapsed());
    }

    // 8. A leader frozen (SIGSTOP) between a decision and the drain that follows it, longer than
    //    the group's session timeout: ws-1 comes back with room for only some of its partitions'
    //    sessions, so the leader's failback is paced (`failback_paced`, then a wait for room
    //    before the next round's drain). Frozen there, it is replaced; the new leader resumes the
    //    failback; after its SIGCONT the old leader writes nothing under its old token, sends no
    //    node a request with it, and no second failback starts.
    let step8 = Instant::now();
    // The replicas by index (0: `gateway`, 1: `gateway-2`): the leader now, and the follower.
    let (li, fi) = if leader_first { (1, 0) } else { (0, 1) };
    let leader_name = survivor_name.clone();
    let follower_name = if fi == 0 { fleet.gateway.name.clone() } else { fleet.more_gateways[0].name.clone() };
    fleet
        .wait_fleet_of(replica(&fleet, fi), "the fleet to settle after the maintenance drain", Duration::from_secs(90), |f| {
            let nodes = f["nodes"].as_array().cloned().unwrap_or_default();
            let healthy = nodes
                .iter()
                .filter(|n| n["state"] == "HEALTHY" && n["ready"] == true && n["assigned_partitions"].as_array().is_some_and(|a| !a.is_empty()))
                .count();
            let open = open_failbacks(f);
            (healthy == nodes.len() && open.is_empty()).then_some(()).ok_or(format!("{healthy}/{} healthy with partitions, open failbacks {open:?}", nodes.len()))
        })
        .await
        .unwrap();
    // A canvas of every partition (which ones ws-1 gets back is the group's choice), a client
    // each, through the leader (a failback is paced by the sessions the leader proxies), the
    // follower's URL second.
    let paced_canvases: Vec<String> = (0..partitions)
        .map(|p| (0..10_000).map(|i| format!("paced-{i}")).find(|c| partition_for(c.as_bytes(), partitions) == p).unwrap())
        .collect();
    let urls = [direct(replica(&fleet, li)), direct(replica(&fleet, fi))];
    let paced: Vec<Client> = paced_canvases
        .iter()
        .enumerate()
        .map(|(i, c)| Client::spawn_with_gateways(&format!("paced-{i}"), &urls, c, dims, ClientTiming::default(), None))
        .collect();
    e2e::scenario::wait_connected(&paced).await.unwrap();
    let writer = Writer::start(&replica(&fleet, fi).url(), paced_canvases.clone(), 10.0, dims.width, dims.height);
    // ws-1 leaves (SIGTERM: its sessions move to ws-2 at once) and comes back with one seat.
    fleet.nodes[0].terminate(Duration::from_secs(15)).await;
    fleet
        .wait_fleet_of(replica(&fleet, fi), "ws-2 to own every partition", Duration::from_secs(60), |f| {
            let owned = f["nodes"][1]["assigned_partitions"].as_array().map_or(0, Vec::len);
            (owned == partitions as usize).then_some(()).ok_or(format!("ws-2 owns {owned}"))
        })
        .await
        .unwrap();
    e2e::scenario::wait_connected(&paced).await.unwrap();
    // ws-1 is restarted once the leader has seen it gone, so the restart is seen as one.
    fleet
        .wait_fleet_of(replica(&fleet, li), "the leader to see ws-1 DOWN", Duration::from_secs(30), |f| {
            (f["nodes"][0]["state"] == "DOWN").then_some(()).ok_or(format!("ws-1 {}", f["nodes"][0]["state"]))
        })
        .await
        .unwrap();
    fleet.nodes[0].env.insert("MAX_SESSIONS".into(), "1".into());
    let restart_at = shared::event::now_ms();
    fleet.nodes[0].start().unwrap();
    tl.mark("ws-1 restarted with MAX_SESSIONS=1: room for the session of one of its partitions at a time");
    let started = fleet
        .wait_fleet_of(replica(&fleet, fi), "the leader to pace the failback to ws-1", Duration::from_secs(90), |f| {
            let after = |d: &serde_json::Value| d["node"] == "ws-1" && d["at_ms"].as_u64().unwrap_or(0) > restart_at;
            let started = find(f, |d| after(d) && d["action"] == "failback_started").first().and_then(|d| d["id"].as_str()).map(str::to_owned);
            let paced = started.as_deref().is_some_and(|s| !find(f, |d| d["action"] == "failback_paced" && d["of"] == s).is_empty());
            match started {
                Some(s) if paced => Ok(s),
                s => Err(format!("failback started: {s:?}, paced: no")),
            }
        })
        .await
        .unwrap();
    let refusals_before = stale_refusals(&fleet).await;
    tl.mark(format!("failback {started} paced: SIGSTOP of the leader {leader_name} before its next round"));
    let stopped_at = Instant::now();
    replica_mut(&mut fleet, li).freeze();
    let third_token = fleet
        .wait_fleet_of(replica(&fleet, fi), "the other replica to lead and resume the failback", Duration::from_secs(60), |f| {
            let token = f["leadership"]["leader"]["token"].as_u64().unwrap_or(0);
            let resumed = find(f, |d| d["action"] == "failback_resumed" && d["of"] == started.as_str() && d["gateway"] == follower_name.as_str()).len();
            (acting(f) && token > new_token && resumed == 1).then_some(token).ok_or(format!("token {token}, resumed {resumed}, {}", f["leadership"]))
        })
        .await
        .unwrap();
    // Longer than the session timeout (LEADER_SESSION_TIMEOUT_MS, 6 s, counted from its last
    // heartbeat, which may be 2 s before the SIGSTOP): 8 s at least.
    if let Some(rest) = Duration::from_secs(8).checked_sub(stopped_at.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let frozen = stopped_at.elapsed();
    assert!(frozen > Duration::from_millis(6000), "frozen for {frozen:?}, longer than the 6 s session timeout");
    tl.mark(format!("{follower_name} leads with fencing token {third_token} and resumed failback {started}: SIGCONT of {leader_name} after {} ms", frozen.as_millis()));
    replica_mut(&mut fleet, li).thaw();
    // The old leader wakes up a follower of the new one; its failback task finds its authority
    // stale at its next check and stops. It has a few of its rounds' time to misbehave.
    fleet
        .wait_fleet_of(replica(&fleet, li), "the woken replica to follow the new leader", Duration::from_secs(30), |f| {
            let l = &f["leadership"];
            (l["role"]["role"] == "follower" && l["leader"]["token"].as_u64() == Some(third_token)).then_some(()).ok_or(format!("{l}"))
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The new leader goes on with the failback under its own token: paced (ws-1 has one seat, so
    // it waits for room) or completed.
    let going_on = |f: &serde_json::Value| {
        find(f, |d| {
            d["of"] == started.as_str()
                && d["gateway"] == follower_name.as_str()
                && d["token"].as_u64() == Some(third_token)
                && matches!(d["action"].as_str(), Some("failback_paced" | "failback_completed"))
        })
        .len()
    };
    let f = fleet
        .wait_fleet_of(replica(&fleet, fi), "the new leader to go on with the resumed failback", Duration::from_secs(60), |f| {
            (going_on(f) >= 1).then(|| f.clone()).ok_or("no round of the new leader yet".to_owned())
        })
        .await
        .unwrap();
    let outcomes = |f: &serde_json::Value| -> Vec<String> {
        find(f, |d| d["of"] == started.as_str() || d["id"] == started.as_str())
            .iter()
            .rev()
            .map(|d| format!("{}@{} {} token {}", d["action"], d["offset"], d["gateway"], d["token"]))
            .collect()
    };
    // Read back from the control topic: nothing under the old token after the new claim, one
    // failback to ws-1 (resumed once, not failed), and no node sent a request under the old token
    // (it would have refused it as stale_leader: the counts stay where they were at the freeze).
    let deposed_quiet = |f: &serde_json::Value| {
        let late = find(f, |d| d["gateway"] == leader_name.as_str() && d["token"].as_u64() == Some(new_token) && d["offset"].as_u64().unwrap_or(0) > third_token);
        assert!(late.is_empty(), "the deposed leader wrote under its old token {new_token} after the claim at {third_token}: {late:?}");
        let count = |action: &str| find(f, |d| d["action"] == action && d["of"] == started.as_str()).len();
        assert_eq!(
            find(f, |d| d["node"] == "ws-1" && d["action"] == "failback_started" && d["at_ms"].as_u64().unwrap_or(0) > restart_at).len(),
            1,
            "one failback to ws-1, no second one: {:?}",
            outcomes(f)
        );
        assert_eq!((count("failback_resumed"), count("failback_failed")), (1, 0), "{:?}", outcomes(f));
    };
    deposed_quiet(&f);
    let refusals_after = stale_refusals(&fleet).await;
    assert_eq!(refusals_after, refusals_before, "a node refused a request under the deposed leader's token: {:?}", outcomes(&f));
    tl.mark(format!("failback {started}: {:?}; stale_leader refusals by node: {refusals_after:?}", outcomes(&f)));
    // Every paced client: those that are connected (on ws-2, and one on ws-1, which has one
    // seat), then the others as each finds the seat free.
    let stats = writer.stop().await;
    assert!(stats.failed.lock().unwrap().is_empty(), "the writer gave up on publishes");
    let mut rest = paced;
    for round in 1.. {
        if rest.is_empty() {
            break;
        }
        assert!(round <= partitions, "paced clients left without room: {:?}", rest.iter().map(|c| c.report().name).collect::<Vec<_>>());
        let want = 1;
        eventually("paced clients connected", Duration::from_secs(30), || async {
            let n = rest.iter().filter(|c| c.connected()).count();
            if n >= want { Ok(Some(())) } else { Err(format!("{n} connected")) }
        })
        .await
        .unwrap();
        let (now, later): (Vec<Client>, Vec<Client>) = rest.into_iter().partition(Client::connected);
        let truths = wait_for_heads(&fleet, &now, &paced_canvases).await.unwrap();
        let (_, verdicts) = finish(now, &truths).await;
        for v in &verdicts {
            assert!(v.ok(), "paced client {} did not get exactly its canvas's versions: {v:?}", v.name);
        }
        rest = later;
    }
    // With the clients gone ws-1 has room again: the new leader completes the failback, once,
    // and the deposed one still acted on nothing.
    let f = fleet
        .wait_fleet_of(replica(&fleet, fi), "the resumed failback to complete", Duration::from_secs(90), |f| {
            let done = find(f, |d| d["action"] == "failback_completed" && d["of"] == started.as_str()).len();
            (done >= 1).then(|| f.clone()).ok_or(format!("{done} completions"))
        })
        .await
        .unwrap();
    deposed_quiet(&f);
    let completed = find(&f, |d| d["action"] == "failback_completed" && d["of"] == started.as_str());
    assert_eq!(completed.len(), 1, "completed once: {:?}", outcomes(&f));
    assert_eq!((completed[0]["gateway"].as_str(), completed[0]["token"].as_u64()), (Some(follower_name.as_str()), Some(third_token)), "{:?}", outcomes(&f));
    assert_eq!(stale_refusals(&fleet).await, refusals_before, "a node refused a request under the deposed leader's token");
    tl.mark(format!("failback {started} completed by {follower_name}: {:?}", outcomes(&f)));
    tl.mark(format!("step 8 took {} ms", step8.elapsed().as_millis()));
    drop(proxy);
    fleet.stop().await;
}
