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

/// A publish answered by the publisher at `url`: (status, body).
async fn publish(http: &reqwest::Client, url: &str, canvas: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"x": 1, "y": 1, "color": "#ff0000"});
    match http.post(format!("{url}/canvases/{canvas}/pixels")).json(&body).timeout(Duration::from_secs(30)).send().await {
        Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(serde_json::Value::Null)),
        Err(e) => (0, serde_json::json!({ "error": e.to_string() })),
    }
}

/// A partition whose leader is gone (a topic of one replica) fails its transaction before the
/// commit; that transaction's abort must finish (from the writer's idle loop once it can), not
/// stay open until the coordinator aborts it at `transaction.timeout.ms` with an epoch bump,
/// which the next publish to that partition would meet as fencing (the process would exit).
/// Nothing is sent to the partition for longer than the transaction timeout; then its leader
/// comes back and a publish to it is 201, by the same process.
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
        ("PRODUCE_TIMEOUT_MS", "3000".to_owned()),
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
    let (victim_p, victim_c) = (0, on[&0].clone());
    for c in on.values() {
        assert_eq!(publish(&http, &url, c).await.0, 201, "a first publish to {c}");
    }
    let (leader, _, _) = broker.partition_replicas(&topic, victim_p).await.expect("the victim partition's leader");
    let other = on.iter().find(|(p, _)| **p != victim_p).map(|(_, c)| c.clone()).expect("a canvas on another partition");

    // The victim partition's only replica dies: its publish fails before any commit.
    tl.mark(&format!("kill -9 of node {leader}, the only replica of {topic}/{victim_p}"));
    broker.kill_node(leader).await.expect("kill the leader");
    let (status, body) = publish(&http, &url, &victim_c).await;
    assert_eq!(status, 503, "a publish to the partition without a leader is refused: {body}");
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
