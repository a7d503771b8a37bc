//! A real three-node Apache Kafka cluster (`BrokerKind::Cluster`: three JVMs from
//! `scripts/kafka/start.sh`, one static 3-voter KRaft quorum, replication factor 3, min ISR 2)
//! through the harness's fault API: kill -9 of a partition's leader, restart, SIGSTOP of a
//! follower, SIGCONT. Every state asserted on is read from the brokers' metadata (leader,
//! replicas, ISR) or from the records themselves, not from log text.
//!
//! Needs `scripts/kafka/fetch.sh` to have run (the harness runs it; the README's test command
//! does too). Each test starts its own cluster (about 20 s on 2 cores) so one test's faults
//! cannot leak into the next; they take turns, as three JVMs are all 2 cores can hold.

use crate::block_on;
use e2e::broker::{create_topic, Broker, BrokerKind, CLUSTER_NODES, MIN_INSYNC_REPLICAS};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use shared::kafka::KafkaSettings;
use std::time::{Duration, Instant};

/// Produces `values` to `topic`/`partition` with the publisher's settings (`acks=all`,
/// idempotent), each acknowledged before the next is sent.
async fn produce(producer: &FutureProducer, topic: &str, partition: i32, values: std::ops::Range<u32>) {
    let started = Instant::now();
    let n = values.len();
    for i in values {
        let (key, payload) = (format!("k{i}"), format!("v{i}"));
        let record = FutureRecord::to(topic).partition(partition).key(&key).payload(&payload);
        producer.send(record, Duration::from_secs(60)).await.map_err(|(e, _)| e).unwrap_or_else(|e| panic!("produce v{i} to {topic}/{partition}: {e}"));
    }
    println!("[test] produced {n} records to {topic}/{partition} with acks=all in {} ms", started.elapsed().as_millis());
}

/// Every record of `topic`/`partition` from the log start, until `n` arrived (at most 30 s).
async fn consume(bootstrap: &str, topic: &str, partition: i32, n: usize) -> Vec<String> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = KafkaSettings::new(&bootstrap).reader("cluster-test").create().expect("a consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, partition, Offset::Beginning).expect("an assignment");
        consumer.assign(&tpl).expect("assign");
        let started = Instant::now();
        let mut values = Vec::new();
        while values.len() < n {
            assert!(started.elapsed() < Duration::from_secs(30), "{topic}/{partition}: only {} of {n} records in 30 s", values.len());
            match consumer.poll(Duration::from_millis(500)) {
                Some(Ok(m)) => values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()),
                Some(Err(e)) => println!("[test] consume {topic}/{partition}: {e} (retrying)"),
                None => {}
            }
        }
        values
    })
    .await
    .expect("the consumer thread")
}

fn expected(values: std::ops::Range<u32>) -> Vec<String> {
    values.map(|i| format!("v{i}")).collect()
}

#[test]
fn replicas_survive_a_killed_leader_and_a_paused_follower() {
    block_on(async {
        let started = Instant::now();
        let broker = Broker::start(BrokerKind::Cluster).await.expect("the cluster starts");
        println!("[test] cluster ready after {:.1} s: {}", started.elapsed().as_secs_f64(), broker.bootstrap);
        let nodes = broker.cluster_nodes().expect("cluster nodes");
        assert_eq!(nodes.len(), CLUSTER_NODES as usize);
        assert!(nodes.iter().all(|n| n.pid.is_some() && !n.paused), "every node runs: {nodes:?}");
        assert_eq!(broker.bootstrap.split(',').count(), nodes.len(), "the bootstrap lists every node");
        assert_eq!(broker.kind.replication_factor(), 3);

        // A topic with every partition on all three nodes.
        let topic = format!("cluster-smoke-{:08x}", rand::random::<u32>());
        create_topic(&broker.bootstrap, &topic, 6, 3).await.expect("create the topic");
        for p in 0..6 {
            let (leader, replicas, isr) = broker.wait_isr(&topic, p, 3, Duration::from_secs(60)).await.expect("3 in-sync replicas");
            let mut sorted = replicas.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![1, 2, 3], "{topic}/{p} has a replica on every node");
            assert!(replicas.contains(&leader) && isr.contains(&leader), "{topic}/{p}: leader {leader} is a replica in sync");
        }
        let producer: FutureProducer =
            KafkaSettings::new(&broker.bootstrap).producer("cluster-smoke", Duration::from_secs(60)).create().expect("a producer");
        produce(&producer, &topic, 0, 0..20).await;

        // kill -9 the leader of partition 0: another replica takes over, and with two in sync
        // (min.insync.replicas=2) acks=all still succeeds.
        let (leader, _, isr) = broker.partition_replicas(&topic, 0).await.expect("partition 0's replicas");
        assert_eq!(isr.len(), 3);
        let killed_at = Instant::now();
        broker.kill_node(leader).await.expect("kill -9 the leader");
        let gone = broker.cluster_nodes().expect("cluster nodes").into_iter().find(|n| n.id == leader).expect("the killed node");
        assert_eq!(gone.pid, None, "the killed node has no process");
        let (new_leader, replicas, isr) = broker
            .wait_partition(&topic, 0, &format!("a new leader of {topic}/0 and node {leader} out of its ISR"), Duration::from_secs(60), |l, _, isr| {
                l >= 0 && l != leader && !isr.contains(&leader)
            })
            .await
            .expect("a new leader");
        println!("[test] node {new_leader} leads {topic}/0 {:.1} s after node {leader} was killed; isr {isr:?}", killed_at.elapsed().as_secs_f64());
        assert_eq!(replicas.len(), 3, "the killed node is still a replica: {replicas:?}");
        assert_eq!(isr.len(), MIN_INSYNC_REPLICAS as usize, "two replicas in sync: {isr:?}");
        produce(&producer, &topic, 0, 20..40).await;
        assert_eq!(consume(&broker.bootstrap, &topic, 0, 40).await, expected(0..40), "every record, once, in order");

        // Restarted on its data dir and ports, it catches up and rejoins the ISR.
        broker.restart_node(leader).await.expect("restart the killed node");
        let (_, _, isr) = broker.wait_isr(&topic, 0, 3, Duration::from_secs(60)).await.expect("the ISR is whole again");
        assert!(isr.contains(&leader), "node {leader} is back in sync: {isr:?}");
        assert!(broker.cluster_nodes().expect("cluster nodes").iter().all(|n| n.pid.is_some()), "every node runs again");

        // SIGSTOP a follower: its broker session expires, it leaves the ISR; acks=all goes on with
        // two. SIGCONT: it comes back in sync.
        let (leader, replicas, _) = broker.partition_replicas(&topic, 0).await.expect("partition 0's replicas");
        let follower = *replicas.iter().find(|&&r| r != leader).expect("a follower");
        broker.pause_node(follower).expect("pause the follower");
        let paused = broker.cluster_nodes().expect("cluster nodes").into_iter().find(|n| n.id == follower).expect("the paused node");
        assert!(paused.paused && paused.pid.is_some(), "the paused node's process stays: {paused:?}");
        let paused_at = Instant::now();
        let (_, _, isr) = broker
            .wait_partition(&topic, 0, &format!("paused node {follower} out of {topic}/0's ISR"), Duration::from_secs(60), |l, _, isr| {
                l >= 0 && !isr.contains(&follower)
            })
            .await
            .expect("the paused follower leaves the ISR");
        println!("[test] paused node {follower} left the ISR after {:.1} s; isr {isr:?}", paused_at.elapsed().as_secs_f64());
        assert_eq!(isr.len(), 2);
        produce(&producer, &topic, 0, 40..60).await;
        broker.resume_node(follower).expect("resume the follower");
        let (_, _, isr) = broker.wait_isr(&topic, 0, 3, Duration::from_secs(60)).await.expect("the resumed follower rejoins the ISR");
        assert!(isr.contains(&follower), "node {follower} is back in sync: {isr:?}");
        assert_eq!(consume(&broker.bootstrap, &topic, 0, 60).await, expected(0..60), "every record, once, in order");

        an_isolated_partition_s_abort_finishes_before_the_coordinator_would(&broker).await;
        println!("[test] passed in {:.1} s (cluster start included)", started.elapsed().as_secs_f64());
    });
}

/// The transaction timeout of the publisher in [`an_isolated_partition_s_abort_finishes_before_the_coordinator_would`].
const TXN_TIMEOUT: Duration = Duration::from_secs(15);
/// Its `PRODUCE_TIMEOUT_MS` (`message.timeout.ms`).
const PRODUCE_TIMEOUT: Duration = Duration::from_secs(3);
/// Its `PARTITION_STALL_MS` (the default).
const PARTITION_STALL: Duration = Duration::from_secs(1);

/// A publish answered by the publisher at `url`: (status, body).
async fn publish(http: &reqwest::Client, url: &str, canvas: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"x": 1, "y": 1, "color": "#ff0000"});
    match http.post(format!("{url}/canvases/{canvas}/pixels")).json(&body).timeout(Duration::from_secs(30)).send().await {
        Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(serde_json::Value::Null)),
        Err(e) => (0, serde_json::json!({ "error": e.to_string() })),
    }
}

/// A batch (`POST /pixels`) of one event on each of `canvases`, answered by the publisher at
/// `url`: (status, the per-event results in order).
async fn publish_batch(http: reqwest::Client, url: String, canvases: Vec<String>) -> (u16, Vec<serde_json::Value>) {
    let events: Vec<serde_json::Value> = canvases.iter().map(|c| serde_json::json!({"canvas": c, "x": 2, "y": 2, "color": "#00ff00"})).collect();
    match http.post(format!("{url}/pixels")).json(&serde_json::json!({ "events": events })).timeout(Duration::from_secs(30)).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or(serde_json::Value::Null);
            (status, body["results"].as_array().cloned().unwrap_or_else(|| vec![body]))
        }
        Err(e) => (0, vec![serde_json::json!({ "error": e.to_string() })]),
    }
}

/// The node that coordinates the transactions of `transactional_id`: the leader of its partition
/// of `__transaction_state` (Kafka's `partitionFor`: the id's Java `String.hashCode`, made
/// non-negative, modulo the partition count).
async fn coordinator(broker: &Broker, reader: &BaseConsumer, transactional_id: &str) -> i32 {
    let tp = coordinator_partition(reader, transactional_id);
    broker.partition_replicas("__transaction_state", tp).await.expect("a coordinator").0
}

/// The partition of `__transaction_state` that holds `transactional_id`'s transactions.
fn coordinator_partition(reader: &BaseConsumer, transactional_id: &str) -> i32 {
    let hash = transactional_id.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    let hash = if hash == i32::MIN { 0 } else { hash.abs() };
    let metadata = reader.fetch_metadata(Some("__transaction_state"), Duration::from_secs(10)).expect("__transaction_state's metadata");
    let partitions = metadata.topics().first().map_or(0, |t| t.partitions().len()) as i32;
    assert!(partitions > 0, "__transaction_state has partitions");
    hash % partitions
}

/// Polls `topic`/`partition`'s last stable offset (the high watermark a `read_committed` reader
/// is given) until it is past `offset`, for at most `timeout`: (the LSO first read, when it was
/// first past `offset`).
async fn lso_past(reader: std::sync::Arc<BaseConsumer>, topic: &str, partition: i32, offset: i64, timeout: Duration) -> (i64, Instant) {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut first = None;
        loop {
            assert!(started.elapsed() < timeout, "{topic}/{partition}: the LSO is not past {offset} after {timeout:?} (first read {first:?})");
            match reader.fetch_watermarks(&topic, partition, Duration::from_secs(5)) {
                Ok((_, lso)) => {
                    first.get_or_insert(lso);
                    if lso > offset {
                        return (first.unwrap_or(lso), Instant::now());
                    }
                }
                Err(e) => println!("[test] watermarks of {topic}/{partition}: {e} (retrying)"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("the reader thread")
}

/// A partition whose leader is gone (a topic of one replica) fails its transaction before the
/// commit; that transaction's abort must finish (from the writer's idle loop once it can), not
/// stay open until the coordinator aborts it at `transaction.timeout.ms` with an epoch bump,
/// which the next publish to that partition would meet as fencing (the process would exit).
/// Nothing is sent to the partition for longer than the transaction timeout; then its leader
/// comes back and a publish to it is 201, by the same process.
///
/// On the way it measures what a stalled shared transaction costs the other partitions: their
/// callers wait at most about `PARTITION_STALL_MS`, but what they commit after the stall is
/// hidden from `read_committed` readers until the stalled transaction's abort markers are written
/// (its records on the healthy partition hold that partition's last stable offset), which waits
/// for the stalled records' delivery reports (`PRODUCE_TIMEOUT_MS`); the test prints that time.
async fn an_isolated_partition_s_abort_finishes_before_the_coordinator_would(broker: &Broker) {
    let started = Instant::now();
    let topic = format!("isolated-{:08x}", rand::random::<u32>());
    create_topic(&broker.bootstrap, &topic, 3, 1).await.expect("a topic of one replica per partition");
    let tl = e2e::procs::Timeline::new(true);
    let port = e2e::broker::free_port().expect("a port");
    let env = [
        ("KAFKA_BOOTSTRAP", broker.bootstrap.clone()),
        ("KAFKA_TOPIC", topic.clone()),
        ("TOPIC_PARTITIONS", "3".to_owned()),
        ("TOPIC_REPLICATION_FACTOR", "1".to_owned()),
        ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
        ("CANVAS_WIDTH", "8".to_owned()),
        ("CANVAS_HEIGHT", "8".to_owned()),
        ("PRODUCE_TIMEOUT_MS", PRODUCE_TIMEOUT.as_millis().to_string()),
        ("PARTITION_STALL_MS", PARTITION_STALL.as_millis().to_string()),
        ("TRANSACTION_TIMEOUT_MS", TXN_TIMEOUT.as_millis().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut publisher = e2e::procs::Service::new("publisher-isolated", "core-publisher", port, env, tl.clone());
    publisher.start().expect("the publisher starts");
    let (http, url) = (reqwest::Client::new(), publisher.url());
    e2e::procs::wait_ready(&http, &url, "the publisher to accept writes", Duration::from_secs(60)).await.expect("ready");
    // A canvas on each partition, and the partitions' leaders.
    let mut on: std::collections::BTreeMap<i32, String> = std::collections::BTreeMap::new();
    for i in 0..100 {
        let c = format!("c{i}");
        on.entry(shared::partitioner::partition_for(c.as_bytes(), 3) as i32).or_insert(c);
    }
    for c in on.values() {
        assert_eq!(publish(&http, &url, c).await.0, 201, "a first publish to {c}");
    }
    // A `read_committed` reader: the high watermark it reads is the last stable offset (LSO).
    let reader: std::sync::Arc<BaseConsumer> =
        std::sync::Arc::new(KafkaSettings::new(&broker.bootstrap).reader("cluster-lso").create().expect("a reader"));
    // The victim: a partition whose node coordinates neither shared producer's transactions, so
    // that once the node is fenced only the victim partition is without a leader and the shared
    // producers' coordinators have not moved; the lowest such partition, preferably one whose
    // node does not coordinate its own isolated producer either.
    let mut leaders = std::collections::BTreeMap::new();
    for p in on.keys() {
        leaders.insert(*p, broker.partition_replicas(&topic, *p).await.expect("a partition's leader").0);
    }
    let base = format!("core-publisher-{topic}");
    let shared_coordinators = [
        coordinator(broker, &reader, &format!("{base}-shared-0")).await,
        coordinator(broker, &reader, &format!("{base}-shared-1")).await,
    ];
    let mut candidates = Vec::new();
    for (p, l) in &leaders {
        if !shared_coordinators.contains(l) {
            let own = coordinator(broker, &reader, &format!("{base}-p{p}")).await;
            candidates.push((own == *l, *p));
        }
    }
    candidates.sort_unstable();
    let &(_, victim_p) = candidates.first().unwrap_or_else(|| panic!("no partition off the coordinators {shared_coordinators:?}: {leaders:?}"));
    let (victim_c, leader) = (on[&victim_p].clone(), leaders[&victim_p]);
    // A healthy partition: one whose only replica is on another node.
    let (healthy_p, other) =
        on.iter().find(|(p, _)| leaders[p] != leader).map(|(p, c)| (*p, c.clone())).expect("a partition led by another node");
    println!(
        "[test] victim {topic}/{victim_p} (node {leader}), healthy {topic}/{healthy_p} (node {}); leaders {leaders:?}; the shared producers' coordinators: nodes {shared_coordinators:?}",
        leaders[&healthy_p]
    );
    reader.fetch_watermarks(&topic, healthy_p, Duration::from_secs(10)).expect("the healthy partition's LSO");

    // The victim partition's only replica dies. Until the controller fences the node (the broker
    // session timeout), it stays in every in-sync replica set it was in, `__transaction_state`'s
    // too, and every transaction waits on it, not only the victim's (its partitions cannot be
    // added to the transaction); once it is fenced, only the victim partition is without a leader.
    tl.mark(&format!("kill -9 of node {leader}, the only replica of {topic}/{victim_p}"));
    let killed = Instant::now();
    broker.kill_node(leader).await.expect("kill the leader");
    for id in ["shared-0", "shared-1"] {
        let tp = coordinator_partition(&reader, &format!("{base}-{id}"));
        broker
            .wait_partition("__transaction_state", tp, &format!("node {leader} out of the ISR of {id}'s coordinator"), Duration::from_secs(60), |l, _, isr| {
                l >= 0 && !isr.contains(&leader)
            })
            .await
            .expect("the killed node fenced");
    }
    tl.mark(format!("node {leader} fenced: out of the shared producers' coordinators' ISRs {:.1} s after the kill", killed.elapsed().as_secs_f64()));
    // Then, at once, one batch with an event on the victim's canvas and one on the healthy
    // partition's (queued side by side, so in one shared transaction): the victim's record is not
    // acknowledged, the transaction is answered "not committed" after PARTITION_STALL_MS, the
    // healthy event goes into the next shared transaction (the other shared producer) and the
    // victim partition is isolated; its publish fails before any commit.
    let batch_sent = Instant::now();
    let batch = tokio::spawn(publish_batch(http.clone(), url.clone(), vec![other.clone(), victim_c.clone()]));
    // A publish to the healthy partition while that transaction stalls: its caller waits at most
    // about PARTITION_STALL_MS, and is answered 201.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let asked = Instant::now();
    let (status, body) = publish(&http, &url, &other).await;
    let (answered, waited) = (Instant::now(), asked.elapsed());
    assert_eq!(status, 201, "a publish to healthy {topic}/{healthy_p} during the stall: {body}");
    assert_eq!(body["partition"].as_i64(), Some(i64::from(healthy_p)), "{body}");
    let offset = body["offset"].as_i64().expect("the 201's offset");
    println!("[test] a publish to healthy {topic}/{healthy_p} sent during the stall was answered 201 after {} ms (offset {offset})", waited.as_millis());
    assert!(waited < PARTITION_STALL + Duration::from_millis(1500), "the callers' bound: {} ms", waited.as_millis());
    // Readers see it only once the stalled transaction's abort markers are written: the aborted
    // records sit on the healthy partition before it, holding its LSO.
    let (held_at, visible) = lso_past(reader.clone(), &topic, healthy_p, offset, Duration::from_secs(30)).await;
    let hidden = visible.duration_since(answered);
    println!(
        "[test] the 201 at offset {offset} of {topic}/{healthy_p} became visible to read_committed readers {} ms after it was answered, \
         {} ms after the stalled transaction's batch was sent (LSO held at {held_at}; PRODUCE_TIMEOUT_MS {}, PARTITION_STALL_MS {})",
        hidden.as_millis(),
        visible.duration_since(batch_sent).as_millis(),
        PRODUCE_TIMEOUT.as_millis(),
        PARTITION_STALL.as_millis()
    );
    assert!(held_at <= offset, "the stalled transaction's record on {topic}/{healthy_p} held its LSO ({held_at}) below the 201's offset {offset}");
    assert!(hidden < PRODUCE_TIMEOUT + Duration::from_secs(3), "hidden from readers for {} ms", hidden.as_millis());
    let (status, results) = batch.await.expect("the batch task");
    let batch_took = batch_sent.elapsed();
    println!("[test] the batch was answered {status} after {} ms: {results:?}", batch_took.as_millis());
    assert_eq!(status, 200, "{results:?}");
    assert_eq!(results[0]["status"].as_u64(), Some(201), "the batch's healthy event is committed: {results:?}");
    assert_eq!(results[1]["status"].as_u64(), Some(503), "a publish to the partition without a leader is refused: {results:?}");
    // Nothing more to the victim for longer than the transaction timeout; the publisher keeps
    // serving other partitions whose leaders live.
    let quiet = Instant::now();
    while quiet.elapsed() < TXN_TIMEOUT + Duration::from_secs(5) {
        let (s, b) = publish(&http, &url, &other).await;
        assert!(s == 201 || s == 503, "{s} {b}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tl.mark(&format!("restart of node {leader}"));
    broker.restart_node(leader).await.expect("restart the node");
    broker
        .wait_partition(&topic, victim_p, "the victim partition's leader back", Duration::from_secs(60), |l, _, _| l >= 0)
        .await
        .expect("a leader again");
    // The same process writes to it again: no fencing, no exit.
    let answered = e2e::procs::eventually("a publish to the partition to be 201 again", Duration::from_secs(60), || {
        let (http, url, c) = (http.clone(), url.clone(), victim_c.clone());
        async move {
            let (s, b) = publish(&http, &url, &c).await;
            println!("[test] publish to {c}: {s} {b}");
            Ok((s == 201).then_some(b))
        }
    })
    .await
    .expect("201 again");
    assert!(publisher.exited_within(Duration::from_millis(10)).await.is_none(), "the publisher still runs");
    let health = e2e::procs::get_json(&http, &format!("{url}/health")).await.expect("/health");
    assert_eq!(health["state"].as_str(), Some("ready"), "{health}");
    println!("[test] isolated partition: 201 again ({answered}) after {:.1} s, no fencing", started.elapsed().as_secs_f64());
    publisher.terminate(Duration::from_secs(5)).await;
}
