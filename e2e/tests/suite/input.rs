//! Issue 33 §6 on real Apache Kafka: data that is already in Kafka. A producer of the test's own
//! writes 10,000 records to two input topics of 3 partitions each (`scores`, a `json` namespace,
//! and `chat`, a `stream` one; eight channels, keys on every input partition) while the publisher
//! is killed with kill -9 twice and restarted, and HTTP publishes go to two of the same channels.
//! Then it checks, from the events log read `read_committed`: every input record is exactly one
//! publication, in its input partition's order per channel, with every channel's versions
//! contiguous from 1; the input group's committed offsets are at the topics' ends (the skipped
//! records after the last restart included, counted in `/health`); and every client subscribed
//! through the gateway saw each version once, in order, ending with `GET /channels/{id}`'s hash.
//!
//! Needs `scripts/kafka/fetch.sh` (the README's test command runs it).

use crate::block_on;
use e2e::broker::{Broker, BrokerKind};
use e2e::checker::check;
use e2e::client::{Client, ClientTiming};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::procs::{eventually, get_json, wait_ready, Timeline};
use e2e::scenario::{wait_connected, ModelLoad, MODEL_FLEET_TOML};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use shared::kafka::KafkaSettings;
use shared::partitioner::partition_for;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Good records the test's producer writes, over both topics.
const RECORDS: usize = 10_000;
/// Partitions of each input topic.
const INPUT_PARTITIONS: u32 = 3;

/// Four channels of `namespace` whose keys cover every input partition.
fn channels(namespace: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for want in 0..INPUT_PARTITIONS {
        let c = (0..).map(|i| format!("{namespace}:in-{i}")).find(|c| partition_for(c.as_bytes(), INPUT_PARTITIONS) == want && !out.contains(c)).unwrap();
        out.push(c);
    }
    out.push((0..).map(|i| format!("{namespace}:in-{i}")).find(|c| !out.contains(c)).unwrap());
    out
}

/// `(version, data)` of every publication of the events topic, per channel, read read_committed.
fn events_log(bootstrap: &str, topic: &str) -> BTreeMap<String, Vec<(u64, String)>> {
    let consumer: BaseConsumer = KafkaSettings::new(bootstrap).reader(&format!("e2e-input-{:08x}", rand::random::<u32>())).create().expect("a reader");
    let (plan, _) = shared::replay::plan(&consumer, topic, &shared::replay::Offsets::new(), Duration::from_secs(10)).expect("a plan");
    let mut out: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    shared::replay::run(
        &consumer,
        topic,
        &plan,
        Duration::from_secs(30),
        &|| false,
        |m| {
            let format = shared::record::RecordHeaders::of(m).format;
            for p in shared::record::Publication::decode_record(format, m.payload()).expect("publications") {
                out.entry(p.channel.to_string()).or_default().push((p.version, p.data.get().to_owned()));
            }
        },
        |_| {},
    )
    .expect("the events topic read to its end");
    out
}

/// Per input partition: (the input group's committed offset, the partition's end).
fn input_progress(bootstrap: &str, group: &str, topics: &[String]) -> Vec<(String, i32, i64, i64)> {
    let mut config = KafkaSettings::new(bootstrap).reader("e2e-input-offsets");
    config.set("group.id", group);
    let consumer: BaseConsumer = config.create().expect("a reader in the input group (it does not join)");
    let mut tpl = TopicPartitionList::new();
    for t in topics {
        for p in 0..INPUT_PARTITIONS as i32 {
            tpl.add_partition(t, p);
        }
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10)).expect("the group's offsets");
    committed
        .elements()
        .iter()
        .map(|e| {
            let at = if let Offset::Offset(o) = e.offset() { o } else { -1 };
            let (_, end) = consumer.fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(10)).expect("watermarks");
            (e.topic().to_owned(), e.partition(), at, end)
        })
        .collect()
}

/// The `i`th input record's data for `channel` (its `n`th on that channel).
fn data(channel: &str, n: usize) -> String {
    if channel.starts_with("scores:") {
        format!("{{\"in\":{n},\"score\":{{\"home\":{},\"away\":{}}}}}", n / 3, n / 7)
    } else {
        format!("{{\"in\":{n},\"text\":\"message {n}\"}}")
    }
}

#[test]
fn input_records_become_one_publication_each_through_two_kill_9s() {
    block_on(async {
        let started = Instant::now();
        let tl = Timeline::new(true);
        let broker = Broker::start(BrokerKind::Real).await.expect("a real Kafka broker (scripts/kafka/fetch.sh must have run)");
        let suffix = format!("{:08x}", rand::random::<u32>());
        let (orders, chat_in) = (format!("orders-{suffix}"), format!("chat-in-{suffix}"));
        let settings = KafkaSettings::new(&broker.bootstrap);
        for t in [&orders, &chat_in] {
            // Created, then retried until the broker's metadata names its partitions.
            eventually("an input topic with its partitions", Duration::from_secs(30), || async {
                shared::kafka::ensure_topic(&settings, "e2e-input", t, INPUT_PARTITIONS, 1, &[]).await.map(Some)
            })
            .await
            .expect("an input topic");
        }
        let toml = tempfile::Builder::new().prefix("fleet-").suffix(".toml").tempfile().expect("a fleet.toml");
        std::fs::write(toml.path(), MODEL_FLEET_TOML).expect("write fleet.toml");
        let spec = FleetSpec {
            env: vec![("FLEET_CONFIG".into(), toml.path().display().to_string())],
            publisher_env: vec![("INPUT_TOPICS".into(), format!("{orders}=scores,{chat_in}=chat"))],
            ..FleetSpec::default()
        };
        let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("the fleet");
        let group = format!("core-publisher-{}-input", fleet.topic);

        let scores = channels("scores");
        let chats = channels("chat");
        let all: Vec<String> = scores.iter().chain(&chats).cloned().collect();
        tl.mark(format!("input channels: {}", all.iter().map(|c| format!("{c}→in{}", partition_for(c.as_bytes(), INPUT_PARTITIONS))).collect::<Vec<_>>().join(", ")));
        let spaces = shared::namespaces::Namespaces::from_toml(MODEL_FLEET_TOML, shared::CanvasDims { width: 64, height: 64 }).unwrap();
        let clients: Vec<Client> = all
            .iter()
            .map(|c| {
                let model = spaces.of(&shared::ChannelId::parse(c).unwrap()).unwrap().model.clone();
                Client::spawn_channel(&format!("{c}-client"), &[fleet.gateway_ws()], c, model, ClientTiming::default(), None)
            })
            .collect();
        wait_connected(&clients).await.expect("clients");
        // HTTP publishes to two of the input's channels at the same time.
        let http = ModelLoad::start(&fleet.publisher.url(), vec![scores[0].clone(), chats[0].clone()]);

        // The test's producer: RECORDS records over ~20 s, 3/5 to the scores topic.
        let producer: FutureProducer = settings.producer("e2e-input-producer", Duration::from_secs(30)).create().expect("a producer");
        let produce = {
            let (producer, orders, chat_in, scores, chats) = (producer.clone(), orders.clone(), chat_in.clone(), scores.clone(), chats.clone());
            tokio::spawn(async move {
                let mut produced: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for batch in 0..RECORDS / 50 {
                    let mut sends = Vec::new();
                    for j in 0..50 {
                        let i = batch * 50 + j;
                        let (topic, channel) = if i % 5 < 3 { (&orders, &scores[i % 4]) } else { (&chat_in, &chats[i % 4]) };
                        let list = produced.entry(channel.clone()).or_default();
                        let value = data(channel, list.len());
                        list.push(value.clone());
                        let partition = partition_for(channel.as_bytes(), INPUT_PARTITIONS) as i32;
                        let (topic, channel) = (topic.clone(), channel.clone());
                        let p = producer.clone();
                        sends.push(async move {
                            p.send(FutureRecord::to(&topic).partition(partition).key(&channel).payload(&value), Duration::from_secs(30)).await.map_err(|(e, _)| e)
                        });
                    }
                    // In order per partition: the producer is idempotent (enable.idempotence).
                    for r in futures::future::join_all(sends).await {
                        r.expect("the input record is acknowledged");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                produced
            })
        };

        // Two kill -9s of the publisher while the records are written.
        for (at, pause) in [(Duration::from_secs(5), Duration::from_millis(1000)), (Duration::from_secs(6), Duration::from_millis(300))] {
            tokio::time::sleep(at).await;
            fleet.publisher.kill9().await;
            tokio::time::sleep(pause).await;
            fleet.publisher.start().expect("restart the publisher");
            wait_ready(&fleet.http, &fleet.publisher.url(), "the restarted publisher to accept writes", Duration::from_secs(60)).await.expect("ready");
            tl.mark("the restarted publisher accepts writes");
        }
        let produced = produce.await.expect("the producer");
        tl.mark(format!("{RECORDS} input records written and acknowledged"));
        // After the last restart: records to skip (their offsets are committed all the same).
        let bad: [(&str, Option<&str>, &str); 4] =
            [(&orders, Some(scores[1].as_str()), "not json"), (&orders, Some(chats[1].as_str()), "{}"), (&chat_in, Some("no spaces allowed"), "{}"), (&chat_in, None, "{}")];
        for (topic, key, value) in bad {
            let mut r = FutureRecord::to(topic).partition(0).payload(value);
            if let Some(k) = key {
                r = r.key(k);
            }
            producer.send(r, Duration::from_secs(30)).await.map_err(|(e, _)| e).expect("a bad record is acknowledged");
        }

        let (b, g, topics) = (broker.bootstrap.clone(), group.clone(), vec![orders.clone(), chat_in.clone()]);
        eventually("the input group's committed offsets at every input partition's end", Duration::from_secs(60), || {
            let (b, g, topics) = (b.clone(), g.clone(), topics.clone());
            async move {
                let progress = tokio::task::spawn_blocking(move || input_progress(&b, &g, &topics)).await.map_err(|e| e.to_string())?;
                let behind: Vec<String> = progress.iter().filter(|(_, _, at, end)| at != end).map(|(t, p, at, end)| format!("{t}/{p} at {at} of {end}")).collect();
                if behind.is_empty() { Ok(Some(())) } else { Err(behind.join(", ")) }
            }
        })
        .await
        .expect("the input read to its end");
        let h = get_json(&fleet.http, &format!("{}/health", fleet.publisher.url())).await.expect("the publisher's /health");
        let by = &h["input"]["skipped_by_reason"];
        assert_eq!(h["input"]["skipped"], 4, "the records written after the last restart to be skipped: {}", h["input"]);
        assert_eq!((by["not_json"].as_u64(), by["wrong_namespace"].as_u64(), by["not_a_channel"].as_u64()), (Some(1), Some(1), Some(2)), "{}", h["input"]);
        let http_accepted = http.stop().await;

        // The events log: every input record once, in order per channel; versions contiguous.
        let (b, t) = (broker.bootstrap.clone(), fleet.topic.clone());
        let log = tokio::task::spawn_blocking(move || events_log(&b, &t)).await.unwrap();
        let mut from_input = 0;
        for c in &all {
            let list = log.get(c).cloned().unwrap_or_default();
            let versions: Vec<u64> = list.iter().map(|(v, _)| *v).collect();
            assert_eq!(versions, (1..=list.len() as u64).collect::<Vec<_>>(), "{c}: each version once, contiguous from 1, in log order");
            let inputs: Vec<&String> = list.iter().map(|(_, d)| d).filter(|d| d.starts_with("{\"in\":")).collect();
            let want: Vec<&String> = produced[c].iter().collect();
            assert_eq!(inputs.len(), want.len(), "{c}: {} input records became {} publications", want.len(), inputs.len());
            assert_eq!(inputs, want, "{c}: the publications are the records, in their input partition's order");
            from_input += inputs.len();
        }
        assert_eq!(from_input, RECORDS, "every record exactly one publication");
        let http_in_log = log.values().flatten().filter(|(_, d)| !d.starts_with("{\"in\":")).count() as u64;
        assert!(http_in_log >= http_accepted, "{http_accepted} HTTP publishes answered 201, {http_in_log} in the log");

        // The clients: each version once, in order, ending with the publisher's state.
        let mut truths = BTreeMap::new();
        for c in &all {
            let t = get_json(&fleet.http, &format!("{}/channels/{c}", fleet.publisher.url())).await.expect("GET /channels/{id}");
            assert_eq!(t["version"].as_u64(), Some(log[c].len() as u64), "{c}: the publisher's head is the log's: {t}");
            truths.insert(c.clone(), (t["version"].as_u64().unwrap(), t["hash"].as_str().unwrap_or_default().to_owned()));
        }
        let truths_ref = &truths;
        let clients_ref = &clients;
        eventually("every client at its channel's head", Duration::from_secs(30), || async move {
            let behind: Vec<String> = clients_ref
                .iter()
                .map(Client::report)
                .filter(|r| r.version != truths_ref[&r.channel].0)
                .map(|r| format!("{} at {} of {}", r.name, r.version, truths_ref[&r.channel].0))
                .collect();
            if behind.is_empty() { Ok(Some(())) } else { Err(behind.join(", ")) }
        })
        .await
        .expect("clients at the heads");
        for c in clients {
            let r = c.stop().await;
            let (head, hash) = &truths[&r.channel];
            let v = check(&r, *head, hash);
            assert!(v.ok(), "{}: {v:?}", r.name);
        }
        // How each publisher process took up the input (its group assignment, after its rebuild).
        for line in tl.grep("publisher", "accepting writes").iter().chain(&tl.grep("publisher", "input partitions assigned")) {
            println!("[input] publisher: {}", line.split_once("Z ").map_or(line.as_str(), |(at, rest)| if rest.len() > 90 { &line[..at.len() + 91] } else { line.as_str() }));
        }
        fleet.stop().await;
        let took = started.elapsed();
        println!("[input] {RECORDS} input records through two kill -9s of the publisher: exactly once, in order; {http_accepted} HTTP publishes beside them; took {:.1} s", took.as_secs_f64());
    });
}
