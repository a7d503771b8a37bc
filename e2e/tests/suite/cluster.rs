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
        println!("[test] passed in {:.1} s (cluster start included)", started.elapsed().as_secs_f64());
    });
}
