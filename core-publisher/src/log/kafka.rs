//! [`EventLog`] on a real Kafka-protocol broker ([`KafkaLog`]), and the topics it needs
//! ([`ensure_topics`]).

use super::{EventLog, InputOffsets, Logged, LoggedEvent, LoggedOp, OpenTxn, PrepareError, ReadError, Record, Resolution, SnapshotWrite, Tail, TailEnd, TxnOutcome, Writer};
use crate::txn::{Polling, ProducerSettings, TxnWriter};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use shared::event::IDEMPOTENCY_HEADER;
use shared::kafka::{FleetContext, KafkaSettings};
use shared::replay::{self, Offsets};
use shared::snapshot::Loaded;
use shared::record::{Decoded, RecordHeaders};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Transactional producers of the shared writer, taking turns.
///
/// After a commit the transaction coordinator writes the commit markers to the partitions, and
/// until it has, the same producer's next transaction cannot register its partitions: the broker
/// answers `CONCURRENT_TRANSACTIONS` and librdkafka retries 20 ms later. Back-to-back transactions
/// of one producer therefore took about 30 ms each (measured on a single broker: 13 such retries
/// in 28 transactions under concurrent publishes). With two producers taking turns, one commits
/// while the other's markers are written. An isolated partition's writer has one producer.
pub const SHARED_PRODUCERS: usize = 2;

/// A writer's producers and whose turn it is.
struct Producers {
    slots: Vec<Arc<TxnWriter>>,
    /// The slot of the next transaction.
    next: usize,
    /// The slot whose commit is in doubt, if any.
    in_doubt: Option<usize>,
}

/// [`EventLog`] on a real Kafka-protocol broker: the shared writer's [`SHARED_PRODUCERS`]
/// [`TxnWriter`]s and one per partition (all created by [`EventLog::prepare`]); reads with
/// `read_committed` consumers.
pub struct KafkaLog {
    settings: Arc<ProducerSettings>,
    writers: Mutex<HashMap<Writer, Producers>>,
}

impl KafkaLog {
    /// A log on `topic`, with its snapshots on `snapshot_topic`; see
    /// [`KafkaLog::transactional_id_of`] for its producers' ids.
    pub fn new(settings: ProducerSettings) -> Self {
        Self { settings: Arc::new(settings), writers: Mutex::new(HashMap::new()) }
    }

    /// The `transactional.id` of `writer`'s producer number `slot`: `<base>-shared-<slot>`, or
    /// `<base>-p<partition>`. Derived from the base and numbers only, so every publisher process
    /// of a deployment uses the same ids and the newest fences the others.
    pub fn transactional_id_of(base: &str, writer: Writer, slot: usize) -> String {
        match writer {
            Writer::Shared => format!("{base}-shared-{slot}"),
            Writer::Partition(p) => format!("{base}-p{p}"),
        }
    }

    fn lock_writers(&self) -> std::sync::MutexGuard<'_, HashMap<Writer, Producers>> {
        self.writers.lock().expect("writers lock is never poisoned: no panics while held")
    }

    /// Starts `writer`'s producers' threads (not initialised yet).
    fn start_writer(&self, writer: Writer) -> Producers {
        let n = if writer == Writer::Shared { SHARED_PRODUCERS } else { 1 };
        Producers {
            slots: (0..n)
                .map(|slot| {
                    Arc::new(TxnWriter::start(
                        self.settings.clone(),
                        Self::transactional_id_of(&self.settings.transactional_id, writer, slot),
                        if writer == Writer::Shared { Polling::Thread } else { Polling::Own },
                    ))
                })
                .collect(),
            next: 0,
            in_doubt: None,
        }
    }

    /// The producer whose turn it is (the next that is not still busy, e.g. aborting a stalled
    /// transaction; the next in turn when all are), and its slot.
    fn turn(&self, writer: Writer) -> Option<(usize, Arc<TxnWriter>)> {
        let mut w = self.lock_writers();
        let ws = w.get_mut(&writer)?;
        let n = ws.slots.len();
        let slot = (0..n).map(|i| (ws.next + i) % n).find(|s| !ws.slots[*s].is_busy()).unwrap_or(ws.next % n);
        ws.next = slot.wrapping_add(1);
        Some((slot, ws.slots[slot].clone()))
    }

    /// Drops every producer (their threads end once no transaction uses them); the next
    /// [`EventLog::prepare`] starts and initialises new ones.
    pub fn reset(&self) {
        self.lock_writers().clear();
    }

    /// Runs `read` with a new `read_committed` reader on a blocking thread.
    async fn with_reader<T: Send + 'static>(
        &self,
        read: impl FnOnce(&BaseConsumer<FleetContext>) -> Result<T, ReadError> + Send + 'static,
    ) -> Result<T, ReadError> {
        let settings = self.settings.kafka.clone();
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer<FleetContext> =
                settings.reader("core-publisher").create_with_context(FleetContext::default()).map_err(|e| ReadError(e.to_string()))?;
            let read = read(&consumer);
            shared::consumer::close_in_background(consumer);
            read
        })
        .await
        .map_err(|e| ReadError(e.to_string()))?
    }
}

/// What one record holds: its events, each with its idempotency key (record headers, one per
/// event), or its op.
fn logged_events(msg: &rdkafka::message::BorrowedMessage<'_>) -> Vec<Logged> {
    match shared::record::decode(RecordHeaders::of(msg), msg.payload()) {
        Ok(Decoded::Publications(events)) => {
            let mut keys = header_values(msg, IDEMPOTENCY_HEADER);
            if keys.len() != events.len() {
                if !keys.is_empty() {
                    tracing::warn!(partition = msg.partition(), offset = msg.offset(), events = events.len(), headers = keys.len(),
                        "a record's idempotency-key headers do not match its events one to one; its keys are not remembered");
                }
                keys = vec![None; events.len()];
            }
            events
                .into_iter()
                .zip(keys)
                .map(|(event, idempotency_key)| Logged::Event(LoggedEvent { partition: msg.partition(), offset: msg.offset(), event, idempotency_key }))
                .collect()
        }
        Ok(Decoded::Op(op)) => vec![Logged::Op(LoggedOp { partition: msg.partition(), offset: msg.offset(), op })],
        Err(e) => {
            tracing::warn!(partition = msg.partition(), offset = msg.offset(), error = %e, "skipping a record that is not a publication");
            Vec::new()
        }
    }
}

impl EventLog for KafkaLog {
    async fn prepare(&self, partitions: u32) -> Result<(), PrepareError> {
        let all: Vec<Arc<TxnWriter>> = {
            let mut w = self.lock_writers();
            for writer in std::iter::once(Writer::Shared).chain((0..partitions as i32).map(Writer::Partition)) {
                w.entry(writer).or_insert_with(|| self.start_writer(writer));
            }
            w.values().flat_map(|p| p.slots.iter().cloned()).collect()
        };
        let results = futures::future::join_all(all.iter().map(|w| w.prepare())).await;
        results.into_iter().collect()
    }

    async fn transact(&self, writer: Writer, records: Vec<Record>, snapshots: Vec<SnapshotWrite>, input: Option<InputOffsets>, stall_after: Option<Duration>) -> TxnOutcome {
        let Some((slot, producer)) = self.turn(writer) else {
            return TxnOutcome::NotCommitted { why: format!("{writer:?} was not prepared"), stalled: Vec::new() };
        };
        let outcome = producer.transact(records, snapshots, input, stall_after).await;
        if matches!(outcome, TxnOutcome::InDoubt(_)) {
            if let Some(ws) = self.lock_writers().get_mut(&writer) {
                ws.in_doubt = Some(slot);
            }
        }
        outcome
    }

    async fn available(&self, writer: Writer) {
        loop {
            let free = self
                .lock_writers()
                .get(&writer)
                .is_none_or(|ws| ws.slots.iter().any(|s| !s.is_busy()));
            if free {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn resolve(&self, writer: Writer) -> Result<Resolution, String> {
        let found = self.lock_writers().get(&writer).and_then(|ws| ws.in_doubt.map(|s| ws.slots[s].clone()));
        let Some(producer) = found else { return Ok(Resolution::NotCommitted) };
        let r = producer.resolve().await;
        if r.is_ok() {
            if let Some(ws) = self.lock_writers().get_mut(&writer) {
                ws.in_doubt = None;
            }
        }
        r
    }

    async fn open_transactions(&self) -> Result<Vec<OpenTxn>, ReadError> {
        let (settings, topic) = (self.settings.kafka.clone(), self.settings.topic.clone());
        let timeout = Duration::from_secs(10);
        tokio::task::spawn_blocking(move || {
            let err = |e: &dyn std::fmt::Display| ReadError(e.to_string());
            let committed: BaseConsumer<FleetContext> =
                settings.reader("core-publisher").create_with_context(FleetContext::default()).map_err(|e| err(&e))?;
            let uncommitted: BaseConsumer<FleetContext> =
                settings.high_watermark_reader("core-publisher").create_with_context(FleetContext::default()).map_err(|e| err(&e))?;
            let n = replay::partition_count(&committed, &topic, timeout).map_err(|e| err(&e))?;
            // High watermarks first: a transaction that ends between the two reads moves the
            // stable offset up to (or past) its high watermark, and is not named.
            let highs = replay::all_watermarks(&uncommitted, &topic, n, timeout).map_err(|e| err(&e))?;
            let stables = replay::all_watermarks(&committed, &topic, n, timeout).map_err(|e| err(&e))?;
            let open = (0..n as i32)
                .zip(highs.into_iter().zip(stables))
                .filter(|(_, ((_, high), (_, stable)))| stable < high)
                .map(|(partition, ((_, high), (_, stable)))| OpenTxn { topic: topic.clone(), partition, stable, high })
                .collect();
            shared::consumer::close_in_background(committed);
            shared::consumer::close_in_background(uncommitted);
            Ok(open)
        })
        .await
        .map_err(|e| ReadError(e.to_string()))?
    }

    async fn read_snapshots_from(&self, from: Offsets) -> Result<(Loaded, Offsets), ReadError> {
        let topic = self.settings.snapshot_topic.clone();
        self.with_reader(move |consumer| {
            shared::snapshot::load_from(consumer, &topic, None, &from, Duration::from_secs(30), &|| false).map_err(|e| ReadError(e.to_string()))
        })
        .await
    }

    async fn offsets_for_time(&self, ms: i64) -> Result<Offsets, ReadError> {
        let topic = self.settings.topic.clone();
        self.with_reader(move |consumer| {
            let n = replay::partition_count(consumer, &topic, Duration::from_secs(10)).map_err(|e| ReadError(e.to_string()))?;
            let mut tpl = rdkafka::TopicPartitionList::new();
            for p in 0..n as i32 {
                tpl.add_partition_offset(&topic, p, rdkafka::Offset::Offset(ms)).map_err(|e| ReadError(e.to_string()))?;
            }
            let found = consumer.offsets_for_times(tpl, Duration::from_secs(10)).map_err(|e| ReadError(e.to_string()))?;
            let mut out = Offsets::new();
            for e in found.elements_for_topic(&topic) {
                // `End`: no record that recent; nothing is wanted before the checkpoint.
                if let rdkafka::Offset::Offset(o) = e.offset() {
                    out.insert(e.partition(), o);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn read_tail<F: FnMut(Logged) + Send + 'static>(&self, tail: Tail, mut sink: F) -> Result<(F, TailEnd), ReadError> {
        let topic = self.settings.topic.clone();
        self.with_reader(move |consumer| {
            let (plan, gaps) = replay::plan_wanting(consumer, &topic, &tail.needed, &tail.wanted, Duration::from_secs(10))
                .map_err(|e| ReadError(e.to_string()))?;
            let truncated = gaps.truncated;
            let total = replay::Progress::new(&plan).remaining();
            if tail.following {
                tracing::debug!(starts = %replay::fmt_offsets(&plan.starts), targets = %replay::fmt_offsets(&plan.targets), records = total,
                    "standby: reading on");
            } else {
                tracing::info!(starts = %replay::fmt_offsets(&plan.starts), targets = %replay::fmt_offsets(&plan.targets), records = total,
                    "reading the log after the snapshots");
            }
            let mut last = std::time::Instant::now();
            let progress = replay::run(
                consumer,
                &topic,
                &plan,
                Duration::from_secs(30),
                &|| false,
                |msg| {
                    for e in logged_events(msg) {
                        sink(e);
                    }
                },
                |pr| {
                    if !tail.following && last.elapsed() >= Duration::from_secs(1) && !pr.is_complete() {
                        tracing::info!(read = pr.count, total, "reading the log");
                        last = std::time::Instant::now();
                    }
                },
            )
            .map_err(|e| ReadError(e.to_string()))?;
            Ok((sink, TailEnd { positions: progress.positions, truncated, starts: plan.starts.clone(), records: progress.count }))
        })
        .await
    }

    async fn topic_id(&self) -> Result<String, ReadError> {
        let topic = self.settings.topic.clone();
        self.with_reader(move |consumer| {
            shared::topic_id::describe(consumer.client(), &topic, Duration::from_secs(10)).map_err(|e| ReadError(e.to_string()))
        })
        .await
    }

    fn reset(&self) {
        KafkaLog::reset(self);
    }
}

/// The values of every header `name` of `msg`, in order, as text (`None` for a null value).
fn header_values(msg: &impl Message, name: &str) -> Vec<Option<String>> {
    msg.headers().map_or_else(Vec::new, |hs| {
        hs.iter().filter(|h| h.key == name).map(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned())).collect()
    })
}

/// The snapshot topic's `segment.ms`: compaction never touches the active segment, so a short
/// segment lets superseded snapshots go within about an hour.
pub const SNAPSHOT_SEGMENT_MS: u64 = 3_600_000;

/// The snapshot topic's `min.compaction.lag.ms`: a record stays at least this long before the
/// cleaner may remove it, far above the longest load of the topic (seconds), so a cleaner pass
/// during a load cannot remove a channel's older snapshot and the old checkpoint before the reader
/// reaches the newer ones.
pub const SNAPSHOT_MIN_COMPACTION_LAG_MS: u64 = 600_000;

/// Ensures the events topic exists (creating it with `partitions` × `replication` and
/// `retention.ms` = `retention_ms` when it does not), then the snapshot topic with the events
/// topic's real partition count (`cleanup.policy=compact`, [`SNAPSHOT_SEGMENT_MS`],
/// `max.message.bytes` for the largest channel). Returns the events topic's partition count.
///
/// # Errors
/// When the broker cannot be reached or refuses, or the snapshot topic exists with another
/// partition count (a channel's snapshot must live on its events' partition number).
pub async fn ensure_topics(
    settings: &KafkaSettings,
    topic: &str,
    snapshot_topic: &str,
    partitions: u32,
    replication: i32,
    retention_ms: i64,
) -> Result<u32, String> {
    let (retention, max_record) = (retention_ms.to_string(), shared::record::MAX_RECORD_BYTES.to_string());
    let events = [("retention.ms", retention.as_str()), ("retention.bytes", "-1"), ("max.message.bytes", max_record.as_str())];
    let n = shared::kafka::ensure_topic(settings, "core-publisher", topic, partitions, replication, &events).await?;
    let (segment, max_bytes, lag) =
        (SNAPSHOT_SEGMENT_MS.to_string(), shared::snapshot::MAX_RECORD_BYTES.to_string(), SNAPSHOT_MIN_COMPACTION_LAG_MS.to_string());
    let snapshots = [
        ("cleanup.policy", "compact"),
        ("segment.ms", segment.as_str()),
        ("max.message.bytes", max_bytes.as_str()),
        ("min.cleanable.dirty.ratio", "0.1"),
        ("min.compaction.lag.ms", lag.as_str()),
    ];
    let m = shared::kafka::ensure_topic(settings, "core-publisher", snapshot_topic, n, replication, &snapshots).await?;
    // In the background: a broker that answers no DescribeConfigs must not delay the start.
    let (settings_c, topic_c) = (settings.clone(), snapshot_topic.to_owned());
    tokio::spawn(async move { check_compaction_lag(&settings_c, &topic_c).await });
    if m != n {
        return Err(format!(
            "snapshot topic {snapshot_topic} has {m} partitions and {topic} has {n}: they must have the same count (delete the snapshot topic, or set SNAPSHOT_TOPIC to a new one)"
        ));
    }
    Ok(n)
}

/// Whether a snapshot topic's `min.compaction.lag.ms` (`None`: not reported) keeps records long
/// enough for a load ([`SNAPSHOT_MIN_COMPACTION_LAG_MS`]). Pure.
pub fn compaction_lag_ok(value: Option<&str>) -> bool {
    value.and_then(|v| v.trim().parse::<u64>().ok()).is_some_and(|ms| ms >= SNAPSHOT_MIN_COMPACTION_LAG_MS)
}

#[cfg(test)]
mod compaction_lag_tests {
    #[test]
    fn compaction_lag_table() {
        for (v, want) in [(None, false), (Some("0"), false), (Some("599999"), false), (Some("600000"), true), (Some("86400000"), true), (Some("x"), false)] {
            assert_eq!(super::compaction_lag_ok(v), want, "{v:?}");
        }
    }
}

/// Checks that the snapshot topic (perhaps created before this setting, or by hand) has a
/// `min.compaction.lag.ms` of at least [`SNAPSHOT_MIN_COMPACTION_LAG_MS`], and says how to set it
/// when it does not. A broker that answers no DescribeConfigs (the embedded mock cluster) is
/// warned about once.
async fn check_compaction_lag(settings: &KafkaSettings, snapshot_topic: &str) {
    match shared::kafka::topic_config(settings, "core-publisher", snapshot_topic, "min.compaction.lag.ms").await {
        Ok(v) if compaction_lag_ok(v.as_deref()) => {}
        Ok(v) => tracing::error!(topic = snapshot_topic, min_compaction_lag_ms = v.as_deref().unwrap_or("unset"), want = SNAPSHOT_MIN_COMPACTION_LAG_MS,
            "the snapshot topic's min.compaction.lag.ms is too short: a cleaner pass during a node's load can remove snapshots it has not read yet; \
             set it with kafka-configs.sh --alter --entity-type topics --entity-name <topic> --add-config min.compaction.lag.ms=600000"),
        Err(e) => tracing::warn!(topic = snapshot_topic, error = %e, "cannot read the snapshot topic's min.compaction.lag.ms (the broker answers no DescribeConfigs); not checked"),
    }
}
