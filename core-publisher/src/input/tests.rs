//! The input against the fake log: the offsets commit in the transaction that carries the
//! records' outputs, and only then; an aborted or in-doubt transaction neither loses a record nor
//! versions it twice; a bad record is skipped with its offset committed; an isolated partition's
//! records go through its own writer with their offsets; HTTP publishes to the same channels keep
//! their versions contiguous.

use super::queue::{Incoming, Source, MAX_HELD_RECORDS};
use super::InputQueue;
use crate::log::fake::{Fate, FakeLog};
use crate::log::Writer;
use crate::versions::{Timings, Versions};
use shared::namespaces::Namespaces;
use shared::ChannelId;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

const TOML: &str = "[namespaces.scores]\nmodel = \"json\"\nmax_state_bytes = 200\n\n[namespaces.chat]\nmodel = \"stream\"\n";
const PARTITIONS: u32 = 3;

fn namespaces() -> Namespaces {
    Namespaces::from_toml(TOML, shared::CanvasDims { width: 8, height: 8 }).unwrap()
}

fn topics() -> HashMap<String, String> {
    [("orders".to_owned(), "scores".to_owned()), ("chat-in".to_owned(), "chat".to_owned())].into_iter().collect()
}

async fn ready(log: FakeLog) -> Arc<Versions<FakeLog>> {
    let timings = Timings { answer_timeout: Duration::from_secs(5), ..Timings::default() };
    let v = Arc::new(Versions::new(log, namespaces(), PARTITIONS, timings).with_input(topics()));
    v.rebuild().await.unwrap();
    v
}

fn src(topic: &str, partition: i32) -> Source {
    Source { topic: topic.into(), partition }
}

fn record(topic: &str, partition: i32, offset: i64, key: &str, value: &str) -> Incoming {
    Incoming { topic: topic.into(), partition, offset, channel: Some(key.as_bytes().to_vec()), value: Some(value.as_bytes().to_vec()) }
}

/// The queue of `v`, with `sources` assigned.
fn queue(v: &Versions<FakeLog>, sources: &[Source]) -> Arc<InputQueue> {
    let q = v.input_queue().expect("an input queue once rebuilt");
    q.assigned(sources, None);
    q
}

async fn until(what: &str, cond: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !cond() {
        assert!(started.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Each channel's committed (version, data), in version order.
fn log_of(v: &Versions<FakeLog>) -> BTreeMap<String, Vec<(u64, String)>> {
    let mut out: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for (e, _) in v.log.committed().into_iter().flatten() {
        out.entry(e.channel.to_string()).or_default().push((e.version, e.data.get().to_owned()));
    }
    for list in out.values_mut() {
        list.sort();
    }
    out
}

/// Asserts each channel's versions are 1..=n and returns its data in version order.
fn contiguous(v: &Versions<FakeLog>) -> BTreeMap<String, Vec<String>> {
    log_of(v)
        .into_iter()
        .map(|(c, list)| {
            let versions: Vec<u64> = list.iter().map(|(n, _)| *n).collect();
            assert_eq!(versions, (1..=list.len() as u64).collect::<Vec<_>>(), "{c}: versions contiguous from 1");
            (c, list.into_iter().map(|(_, d)| d).collect())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_offsets_commit_in_the_transaction_of_their_outputs() {
    let log = FakeLog::new(PARTITIONS, |_| Fate::Commit);
    let first = log.gate(0);
    let v = ready(log).await;
    let q = queue(&v, &[src("orders", 0), src("chat-in", 0)]);
    q.offer(vec![
        record("orders", 0, 10, "scores:a", r#"{"n":1}"#),
        record("orders", 0, 11, "scores:b", r#"{"n":2}"#),
        record("chat-in", 0, 5, "chat:lobby", r#""hi""#),
    ]);
    until("the first transaction began", || v.log.attempts() >= 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Until it commits, neither the outputs nor the offsets are there.
    assert!(v.log.committed().is_empty());
    assert_eq!((v.log.input_offset("orders", 0), v.log.input_offset("chat-in", 0)), (None, None));
    first.notify_one();
    until("the offsets committed", || v.log.input_offset("orders", 0) == Some(12) && v.log.input_offset("chat-in", 0) == Some(6)).await;
    let txns = v.log.transactions();
    assert_eq!(txns.len(), 1, "one transaction: {txns:?}");
    let channels: Vec<&str> = txns[0].events.iter().map(|e| e.channel.as_str()).collect();
    assert_eq!(channels.len(), 3, "the records' three outputs, in the transaction with their offsets: {channels:?}");
    assert_eq!(txns[0].input.len(), 2);
    let data = contiguous(&v);
    assert_eq!(data["scores:a"], vec![r#"{"n":1}"#]);
    assert_eq!(data["chat:lobby"], vec![r#""hi""#], "the value is the data");
    assert_eq!(q.stats().published(), 3);
    assert_eq!(v.input_report()["published"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_transaction_moves_no_offset_and_its_records_are_written_once_after() {
    // The first two transactions abort, then every one commits.
    let v = ready(FakeLog::new(PARTITIONS, |n| if n < 2 { Fate::Abort } else { Fate::Commit })).await;
    let q = queue(&v, &[src("orders", 0)]);
    let records: Vec<Incoming> = (0..50).map(|i| record("orders", 0, i, &format!("scores:c{}", i % 3), &format!("{{\"i\":{i}}}"))).collect();
    q.offer(records);
    until("the first abort", || v.log.attempts() >= 1).await;
    assert_eq!(v.log.input_offset("orders", 0), None, "an aborted transaction commits no offset");
    until("every record committed", || v.log.input_offset("orders", 0) == Some(50)).await;
    assert!(v.log.attempts() >= 3, "the records were retried after the aborts");
    let data = contiguous(&v);
    for c in 0..3 {
        let want: Vec<String> = (0..50).filter(|i| i % 3 == c).map(|i| format!("{{\"i\":{i}}}")).collect();
        assert_eq!(data[&format!("scores:c{c}")], want, "c{c}: every record once, in the input's order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_doubt_commit_that_landed_is_not_written_again() {
    let log = FakeLog::new(PARTITIONS, |n| if n == 0 { Fate::InDoubtThenCommit } else { Fate::Commit });
    log.stay_in_doubt(2);
    let v = ready(log).await;
    let q = queue(&v, &[src("orders", 0)]);
    q.offer((0..5).map(|i| record("orders", 0, i, "scores:x", &format!("{{\"i\":{i}}}"))).collect());
    until("the in-doubt transaction resolved", || v.log.input_offset("orders", 0) == Some(5)).await;
    q.offer((5..8).map(|i| record("orders", 0, i, "scores:x", &format!("{{\"i\":{i}}}"))).collect());
    until("the next records", || v.log.input_offset("orders", 0) == Some(8)).await;
    let data = contiguous(&v);
    assert_eq!(data["scores:x"], (0..8).map(|i| format!("{{\"i\":{i}}}")).collect::<Vec<_>>(), "once each, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_record_is_skipped_and_its_offset_committed() {
    let v = ready(FakeLog::new(PARTITIONS, |_| Fate::Commit)).await;
    let q = queue(&v, &[src("orders", 1)]);
    let big = format!("{{\"s\":\"{}\"}}", "x".repeat(300));
    q.offer(vec![
        record("orders", 1, 0, "scores:ok", r#"{"a":1}"#),
        record("orders", 1, 1, "scores:ok", "not json"),
        record("orders", 1, 2, "chat:lobby", "{}"),
        record("orders", 1, 3, "bad id!", "{}"),
        record("orders", 1, 4, "scores:ok", &big),
        Incoming { topic: "orders".into(), partition: 1, offset: 5, channel: None, value: Some(b"{}".to_vec()) },
        record("orders", 1, 6, "scores:ok", r#"{"a":2}"#),
    ]);
    until("every offset committed", || v.log.input_offset("orders", 1) == Some(7)).await;
    let data = contiguous(&v);
    assert_eq!(data["scores:ok"], vec![r#"{"a":1}"#, r#"{"a":2}"#], "only the good records are publications");
    assert_eq!(data.len(), 1);
    let h = v.input_report();
    assert_eq!(h["skipped"], 5, "{h}");
    let by = &h["skipped_by_reason"];
    assert_eq!((by["not_json"].as_u64(), by["wrong_namespace"].as_u64(), by["not_a_channel"].as_u64(), by["refused"].as_u64()), (Some(1), Some(1), Some(2), Some(1)), "{h}");
    assert_eq!(h["last_skipped"]["offset"], 5, "{h}");
    assert_eq!(h["last_skipped"]["topic"], "orders", "{h}");
    // A skipped record alone still moves the offset (a transaction with offsets and no record).
    q.offer(vec![record("orders", 1, 7, "scores:ok", "[")]);
    until("the lone skip's offset committed", || v.log.input_offset("orders", 1) == Some(8)).await;
    assert_eq!(v.counters().metrics.input_records.get_or_create(&vec![("outcome", "skipped".to_owned()), ("reason", "not_json".to_owned())]).get(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_publishes_to_the_same_channels_keep_versions_contiguous() {
    let v = ready(FakeLog::new(PARTITIONS, |_| Fate::Commit)).await;
    let q = queue(&v, &[src("chat-in", 0), src("chat-in", 1)]);
    let http = {
        let v = v.clone();
        tokio::spawn(async move {
            let data = serde_json::value::RawValue::from_string(r#"{"http":true}"#.into()).unwrap();
            let mut ok = 0;
            for i in 0..200 {
                let c = ChannelId::parse(if i % 2 == 0 { "chat:a" } else { "chat:b" }).unwrap();
                ok += v.publish_data(&c, &[(&data, None)]).await.iter().filter(|r| r.is_ok()).count();
            }
            ok
        })
    };
    for batch in 0..20 {
        let records = (0..50).map(|i| {
            let n = batch * 50 + i;
            let key = if n % 2 == 0 { "chat:a" } else { "chat:b" };
            record("chat-in", (n % 2) as i32, n / 2, key, &format!("{{\"in\":{n}}}"))
        });
        q.offer(records.collect());
        tokio::task::yield_now().await;
    }
    let accepted = http.await.unwrap();
    until("the input committed", || v.log.input_offset("chat-in", 0) == Some(500) && v.log.input_offset("chat-in", 1) == Some(500)).await;
    let data = contiguous(&v);
    for (c, parity) in [("chat:a", 0), ("chat:b", 1)] {
        let from_input: Vec<&String> = data[c].iter().filter(|d| d.contains("\"in\"")).collect();
        let want: Vec<String> = (0..1000).filter(|n| n % 2 == parity).map(|n| format!("{{\"in\":{n}}}")).collect();
        assert_eq!(from_input, want.iter().collect::<Vec<_>>(), "{c}: the input's records once each, in its order");
    }
    let http_in_log = data.values().flatten().filter(|d| d.contains("http")).count();
    assert_eq!(http_in_log, accepted, "every accepted HTTP publish is in the log once");
}

/// A partition isolated after stalling the shared transaction gets the input records bound for
/// it through its own writer, with their offsets: no transaction commits an input offset without
/// all of its records' outputs, nor an output without its offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_isolated_partition_s_records_go_through_its_writer_with_their_offsets() {
    let v = ready(FakeLog::new(PARTITIONS, |n| if n == 0 { Fate::StallLowest } else { Fate::Commit })).await;
    // A channel on each events partition.
    let on = |want: i32| (0..).map(|i| format!("chat:k{i}")).find(|c| shared::partitioner::partition_for(c.as_bytes(), PARTITIONS) as i32 == want).unwrap();
    let keys: Vec<String> = (0..PARTITIONS as i32).map(on).collect();
    // Isolate partition 0 with an HTTP publish that stalls the first shared transaction.
    let data = serde_json::value::RawValue::from_string("1".into()).unwrap();
    let c0 = ChannelId::parse(&keys[0]).unwrap();
    assert!(v.publish_data(&c0, &[(&data, None)]).await[0].is_ok());
    assert_eq!(v.partition_reports()[0].mode, "isolated");
    // Input partition 0 alternates between the channels: its prefixes end where the writer changes.
    let q = queue(&v, &[src("chat-in", 0), src("chat-in", 1)]);
    let mut records = Vec::new();
    for n in 0..60i64 {
        records.push(record("chat-in", 0, n, &keys[(n / 5 % 3) as usize], &format!("{{\"in\":{n}}}")));
        records.push(record("chat-in", 1, n, &keys[1], &format!("{{\"other\":{n}}}")));
    }
    q.offer(records);
    until("the input committed", || v.log.input_offset("chat-in", 0) == Some(60) && v.log.input_offset("chat-in", 1) == Some(60)).await;
    let txns = v.log.transactions();
    assert!(txns.iter().any(|t| t.writer == Some(Writer::Partition(0)) && !t.input.is_empty()), "the isolated writer committed input offsets");
    let mut last = 0;
    for t in txns.iter().filter(|t| t.input.iter().any(|(topic, p, _)| topic == "chat-in" && *p == 0)) {
        let (_, _, next) = t.input.iter().find(|(_, p, _)| *p == 0).unwrap().clone();
        // The outputs of input partition 0's records [last, next) are all in this transaction.
        let mut got: Vec<i64> = t.events.iter().filter_map(|e| e.data.get().strip_prefix("{\"in\":")?.strip_suffix('}')?.parse().ok()).collect();
        got.sort_unstable();
        assert_eq!(got, (last..next).collect::<Vec<_>>(), "{:?}: the outputs of exactly the records its offset passes", t.writer);
        if t.writer == Some(Writer::Partition(0)) {
            assert!(t.events.iter().all(|e| e.channel.as_str() == keys[0]), "the isolated writer writes its partition only");
        }
        last = next;
    }
    assert_eq!(last, 60);
    let data = contiguous(&v);
    for (i, k) in keys.iter().enumerate() {
        let mine: Vec<String> = data[k].iter().filter(|d| d.contains("\"in\"")).cloned().collect();
        let want: Vec<String> = (0..60).filter(|n| (n / 5 % 3) as usize == i).map(|n| format!("{{\"in\":{n}}}")).collect();
        assert_eq!(mine, want, "{k}: in input order, once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_state_past_its_limit_is_refused_at_the_head_and_its_offset_committed() {
    let v = ready(FakeLog::new(PARTITIONS, |_| Fate::Commit)).await;
    let q = queue(&v, &[src("orders", 2)]);
    let chunk = |k: &str| format!("{{\"{k}\":\"{}\"}}", "y".repeat(80));
    // 200 bytes of state at most: the third key would pass it.
    q.offer(vec![record("orders", 2, 0, "scores:s", &chunk("a")), record("orders", 2, 1, "scores:s", &chunk("b")), record("orders", 2, 2, "scores:s", &chunk("c"))]);
    until("the offsets committed", || v.log.input_offset("orders", 2) == Some(3)).await;
    assert_eq!(contiguous(&v)["scores:s"].len(), 2);
    assert_eq!(v.input_report()["skipped_by_reason"]["refused"], 1);
}

#[test]
fn a_revoked_assignment_s_take_does_not_come_back_into_the_next_one() {
    let spaces = Arc::new(namespaces());
    let stats = Arc::new(super::stats::Stats::default());
    let q = InputQueue::new(topics(), spaces.clone(), PARTITIONS, usize::MAX, stats);
    let parts: Vec<Arc<crate::partition::Partition>> =
        (0..PARTITIONS as i32).map(|p| Arc::new(crate::partition::Partition::new(p, spaces.clone(), HashMap::new(), 0))).collect();
    q.assigned(&[src("chat-in", 0)], None);
    q.offer((0..10).map(|i| record("chat-in", 0, i, "chat:a", "1")).collect());
    let old = q.take(|_| true, &parts).expect("a take");
    assert_eq!(old.len(), 10);
    assert!(q.take(|_| true, &parts).is_none(), "an input partition is in one transaction at a time");
    // A rebalance: the new assignment reads from the committed offset again.
    q.assigned(&[src("chat-in", 0)], None);
    q.offer((0..3).map(|i| record("chat-in", 0, i, "chat:a", "2")).collect());
    q.requeue(old, false);
    let new = q.take(|_| true, &parts).expect("the new assignment's records");
    assert_eq!(new.len(), 3, "the old take was dropped, not put back into the new assignment");
    assert!(new.pendings.iter().all(|(_, _, p)| p.data.get() == "2"));
}

#[test]
fn the_queue_is_full_at_its_bound_and_has_room_again_below_half() {
    let spaces = Arc::new(namespaces());
    let q = InputQueue::new(topics(), spaces.clone(), PARTITIONS, usize::MAX, Arc::default());
    let parts: Vec<Arc<crate::partition::Partition>> =
        (0..PARTITIONS as i32).map(|p| Arc::new(crate::partition::Partition::new(p, spaces.clone(), HashMap::new(), 0))).collect();
    q.assigned(&[src("chat-in", 0)], None);
    q.offer((0..MAX_HELD_RECORDS as i64).map(|i| record("chat-in", 0, i, "chat:a", "1")).collect());
    assert!(q.is_full() && !q.has_room());
    // Records offered twice (a fetch after a pause) are not queued twice.
    q.offer(vec![record("chat-in", 0, 5, "chat:a", "1")]);
    assert_eq!(q.report()["held_records"], MAX_HELD_RECORDS);
    let mut taken = 0;
    while !q.has_room() {
        let t = q.take(|_| true, &parts).unwrap();
        assert!(t.len() <= super::INPUT_ROOM);
        taken += t.len();
        q.committed(t);
    }
    assert!(!q.is_full());
    assert!(taken >= MAX_HELD_RECORDS / 2);
}
