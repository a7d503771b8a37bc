//! The publisher's side of the Kafka log, as the version logic sees it: transactional writers,
//! and `read_committed` readers.
//!
//! Writers ([`Writer`]): the *shared* one writes every healthy partition in one transaction per
//! commit cycle; each partition also has a writer of its own, used while that partition is
//! isolated (its records stalled a shared transaction, see [`crate::partition`]).
//!
//! - [`EventLog::prepare`] initialises every writer's transactional producers
//!   (`init_transactions`): it fences every older producer with the same `transactional.id`
//!   (another publisher process) and finishes whatever transaction such a producer left open, so
//!   what a reader sees afterwards is final until this process writes again. Producers are
//!   initialised only there, before the log is read: a process that initialised one later could
//!   fence a newer publisher and write from stale heads, so any fatal producer error stops the
//!   process instead (a restart prepares and reads again).
//! - [`EventLog::transact`] writes records in one transaction and commits it; the answer is
//!   definite ([`TxnOutcome::Committed`], [`TxnOutcome::NotCommitted`], [`TxnOutcome::Fenced`],
//!   [`TxnOutcome::Fatal`] before the commit) except when the commit was sent and not confirmed in
//!   time ([`TxnOutcome::InDoubt`]).
//! - [`EventLog::resolve`] asks again about an in-doubt commit until the answer is definite.
//! - The reads return committed records only, and the *position* each read ended at (past the
//!   last commit marker, see [`shared::replay`]).
//!
//! [`EventLog`] is the seam the version logic is written against, so its rules are unit-tested
//! with [`fake::FakeLog`]; [`KafkaLog`] is the real one (its transactions are in [`crate::txn`]).

use crate::txn::{Polling, TxnWriter};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use shared::event::IDEMPOTENCY_HEADER;
use shared::kafka::{FleetContext, KafkaSettings};
use shared::replay::{self, Offsets};
use shared::snapshot::Loaded;
use shared::PixelEvent;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One record of a transaction: 1..=[`shared::event::MAX_EVENTS_PER_RECORD`] events of one canvas
/// with consecutive versions, on the canvas's partition, and the idempotency key of each (record
/// headers, one per event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub partition: i32,
    pub events: Vec<PixelEvent>,
    pub keys: Vec<Option<String>>,
}

/// One record of the snapshot topic written in a transaction ([`shared::snapshot`]): a canvas's
/// snapshot or a partition's checkpoint, on the same partition number as the canvas's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotWrite {
    pub partition: i32,
    pub key: String,
    pub value: Vec<u8>,
}

/// How a transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Committed: the offset of each record, in order.
    Committed(Vec<i64>),
    /// Certainly not committed (aborted, or it never began): nothing of it is or ever becomes
    /// visible to a `read_committed` reader. `stalled`: the partitions whose records were not
    /// acknowledged within the stall bound, or failed (empty when the failure was not theirs).
    NotCommitted { why: String, stalled: Vec<i32> },
    /// The commit was sent and not confirmed in time. The writer keeps the transaction; ask
    /// [`EventLog::resolve`] until the answer is definite, and write nothing else on the partition
    /// meanwhile.
    InDoubt(String),
    /// Another producer with the writer's `transactional.id` took over. `commit_sent`: the commit
    /// had been sent, so this transaction may have committed (the new producer finished it one
    /// way or the other); otherwise it certainly did not.
    Fenced { commit_sent: bool },
    /// The producer failed for good (librdkafka's fatal errors other than fencing). `commit_sent`
    /// as for [`TxnOutcome::Fenced`]; the process must stop (see the module docs).
    Fatal { why: String, commit_sent: bool },
}

/// Which writer runs a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Writer {
    /// The shared writer (every partition not isolated).
    Shared,
    /// The writer of one isolated partition.
    Partition(i32),
}

/// The definite end of an in-doubt transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// It committed: the offset of each record.
    Committed(Vec<i64>),
    /// It did not commit.
    NotCommitted,
    /// Another producer took over; this process cannot learn the outcome any more.
    Fenced,
    /// The producer failed for good; the process must stop.
    Fatal(String),
}

/// Initialising a partition's transactional producer failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    /// Another producer with the same `transactional.id` fenced this one meanwhile.
    #[error("fenced by a newer producer with the same transactional.id")]
    Fenced,
    /// The broker did not answer in time, or refused (retry).
    #[error("initialising the transactional producer: {0}")]
    Failed(String),
}

/// Reading the log failed.
#[derive(Debug, thiserror::Error)]
#[error("reading the log: {0}")]
pub struct ReadError(pub String);

/// One event read back (a group record gives one per event, all with the record's offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    pub partition: i32,
    /// Offset of the record that carried the event.
    pub offset: i64,
    pub event: PixelEvent,
    /// The `Idempotency-Key` the publish carried, if any (record header [`IDEMPOTENCY_HEADER`]).
    pub idempotency_key: Option<String>,
}

/// Where a rebuild reads the events topic from, per partition: `needed` (the checkpoint: every
/// record at or after it may be needed; absent = the log start) and `wanted` (earlier, for
/// idempotency keys only: records there are not needed if retention deleted them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tail {
    pub needed: Offsets,
    pub wanted: Offsets,
}

/// How a tail read ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TailEnd {
    /// The position each partition's read ended at.
    pub positions: Offsets,
    /// Partitions whose needed records had been deleted (the log starts after the checkpoint).
    pub truncated: Vec<i32>,
    /// Records read.
    pub records: u64,
}

/// What the version logic needs from the log.
pub trait EventLog: Send + Sync + 'static {
    /// Initialises the transactional producers of every writer of a topic of `partitions`
    /// partitions (`init_transactions`), fencing older producers of the same ids and finishing
    /// their open transactions. Call it before reading the log at start-up, and only then.
    fn prepare(&self, partitions: u32) -> impl Future<Output = Result<(), PrepareError>> + Send;

    /// Writes `records` (events topic) and `snapshots` (snapshot topic) in one transaction of
    /// `writer` and commits it; the offsets of a commit are the records'. With `stall_after`, a
    /// transaction whose records are not all acknowledged by then is aborted
    /// ([`TxnOutcome::NotCommitted`] naming the partitions still waiting).
    fn transact(
        &self,
        writer: Writer,
        records: Vec<Record>,
        snapshots: Vec<SnapshotWrite>,
        stall_after: Option<Duration>,
    ) -> impl Future<Output = TxnOutcome> + Send;

    /// Resolves once `writer` has a producer free for a transaction (not still aborting a stalled
    /// one). A committer waits for it before it takes units, so units wait in their queues, where a
    /// caller's deadline can still withdraw them as certainly not written.
    fn available(&self, writer: Writer) -> impl Future<Output = ()> + Send;

    /// One more attempt to learn how `writer`'s in-doubt transaction ended; `Err` while it is
    /// still not known.
    fn resolve(&self, writer: Writer) -> impl Future<Output = Result<Resolution, String>> + Send;

    /// The snapshot topic's committed snapshots and checkpoints (empty when it does not exist).
    fn read_snapshots(&self) -> impl Future<Output = Result<Loaded, ReadError>> + Send;

    /// Per partition, the first offset whose record timestamp is at or after `ms` (Kafka's
    /// offsets-for-times; the partition's end when there is none).
    fn offsets_for_time(&self, ms: i64) -> impl Future<Output = Result<Offsets, ReadError>> + Send;

    /// Streams the committed events of every partition from `plan`'s start ([`Tail`]) to its
    /// end into `sink`, in log order per partition; returns the sink and where each partition's
    /// read ended.
    fn read_tail<F: FnMut(LoggedEvent) + Send + 'static>(
        &self,
        plan: Tail,
        sink: F,
    ) -> impl Future<Output = Result<(F, TailEnd), ReadError>> + Send;

    /// Drops every producer after one failed for good, before the publisher starts over with
    /// [`EventLog::prepare`] (as a restarted process would).
    fn reset(&self);
}

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
    settings: KafkaSettings,
    topic: String,
    snapshot_topic: String,
    transactional_id: String,
    message_timeout: Duration,
    transaction_timeout: Duration,
    writers: Mutex<HashMap<Writer, Producers>>,
}

impl KafkaLog {
    /// A log on `topic`, with its snapshots on `snapshot_topic`; see
    /// [`KafkaLog::transactional_id_of`] for its producers' ids.
    pub fn new(
        settings: KafkaSettings,
        topic: String,
        snapshot_topic: String,
        transactional_id: String,
        message_timeout: Duration,
        transaction_timeout: Duration,
    ) -> Self {
        Self { settings, topic, snapshot_topic, transactional_id, message_timeout, transaction_timeout, writers: Mutex::new(HashMap::new()) }
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
                        self.topic.clone(),
                        self.snapshot_topic.clone(),
                        Self::transactional_id_of(&self.transactional_id, writer, slot),
                        if writer == Writer::Shared { Polling::Thread } else { Polling::Own },
                        self.message_timeout,
                        self.transaction_timeout,
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
        let settings = self.settings.clone();
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer<FleetContext> =
                settings.reader("core-publisher").create_with_context(FleetContext::default()).map_err(|e| ReadError(e.to_string()))?;
            read(&consumer)
        })
        .await
        .map_err(|e| ReadError(e.to_string()))?
    }
}

/// The events of one record, each with its idempotency key (record headers, one per event).
fn logged_events(msg: &rdkafka::message::BorrowedMessage<'_>) -> Vec<LoggedEvent> {
    match PixelEvent::decode_record(msg.payload()) {
        Ok(events) => {
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
                .map(|(event, idempotency_key)| LoggedEvent { partition: msg.partition(), offset: msg.offset(), event, idempotency_key })
                .collect()
        }
        Err(e) => {
            tracing::warn!(partition = msg.partition(), offset = msg.offset(), error = %e, "skipping a record that is not a pixel event");
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

    async fn transact(&self, writer: Writer, records: Vec<Record>, snapshots: Vec<SnapshotWrite>, stall_after: Option<Duration>) -> TxnOutcome {
        let Some((slot, producer)) = self.turn(writer) else {
            return TxnOutcome::NotCommitted { why: format!("{writer:?} was not prepared"), stalled: Vec::new() };
        };
        let outcome = producer.transact(records, snapshots, stall_after).await;
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

    async fn read_snapshots(&self) -> Result<Loaded, ReadError> {
        let topic = self.snapshot_topic.clone();
        self.with_reader(move |consumer| {
            shared::snapshot::load(consumer, &topic, Duration::from_secs(30), &|| false).map_err(|e| ReadError(e.to_string()))
        })
        .await
    }

    async fn offsets_for_time(&self, ms: i64) -> Result<Offsets, ReadError> {
        let topic = self.topic.clone();
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

    async fn read_tail<F: FnMut(LoggedEvent) + Send + 'static>(&self, tail: Tail, mut sink: F) -> Result<(F, TailEnd), ReadError> {
        let topic = self.topic.clone();
        self.with_reader(move |consumer| {
            let (plan, gaps) = replay::plan_wanting(consumer, &topic, &tail.needed, &tail.wanted, Duration::from_secs(10))
                .map_err(|e| ReadError(e.to_string()))?;
            let truncated = gaps.truncated;
            let total = replay::Progress::new(&plan).remaining();
            tracing::info!(starts = %replay::fmt_offsets(&plan.starts), targets = %replay::fmt_offsets(&plan.targets), records = total,
                "reading the log after the snapshots");
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
                    if last.elapsed() >= Duration::from_secs(1) && !pr.is_complete() {
                        tracing::info!(read = pr.count, total, "reading the log");
                        last = std::time::Instant::now();
                    }
                },
            )
            .map_err(|e| ReadError(e.to_string()))?;
            Ok((sink, TailEnd { positions: progress.positions, truncated, records: progress.count }))
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
/// during a load cannot remove a canvas's older snapshot and the old checkpoint before the reader
/// reaches the newer ones.
pub const SNAPSHOT_MIN_COMPACTION_LAG_MS: u64 = 600_000;

/// Ensures the events topic exists (creating it with `partitions` × `replication` and
/// `retention.ms` = `retention_ms` when it does not), then the snapshot topic with the events
/// topic's real partition count (`cleanup.policy=compact`, [`SNAPSHOT_SEGMENT_MS`],
/// `max.message.bytes` for the largest canvas). Returns the events topic's partition count.
///
/// # Errors
/// When the broker cannot be reached or refuses, or the snapshot topic exists with another
/// partition count (a canvas's snapshot must live on its events' partition number).
pub async fn ensure_topics(
    settings: &KafkaSettings,
    topic: &str,
    snapshot_topic: &str,
    partitions: u32,
    replication: i32,
    retention_ms: i64,
) -> Result<u32, String> {
    let retention = retention_ms.to_string();
    let events = [("retention.ms", retention.as_str()), ("retention.bytes", "-1")];
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

/// An in-memory [`EventLog`] for unit tests, whose transactions end on a schedule.
#[cfg(test)]
pub mod fake {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    /// How the fake log ends a transaction (by attempt number, over every writer).
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub enum Fate {
        Commit,
        /// Aborted (not for any partition's sake): its records take offsets but are never read.
        Abort,
        /// The records of the transaction's lowest partition are not acknowledged in time: aborted,
        /// naming that partition as stalled.
        StallLowest,
        /// The commit is sent but not confirmed: in doubt, then committed when resolved. Until
        /// then nothing of it can be read, and if nobody resolves it before the writer's next
        /// transaction it commits then ("lands late"), as a slow broker's would.
        InDoubtThenCommit,
        /// In doubt, then not committed.
        InDoubtThenAbort,
        /// Fenced while committing, and it did commit (the worst case for the fenced process).
        FencedCommitted,
        /// A fatal producer error before the commit was sent.
        FatalBeforeCommit,
    }

    /// A record of the fake log: its events with their idempotency keys.
    pub type FakeRecord = Vec<(PixelEvent, Option<String>)>;

    /// A committed snapshot-topic record: key, value.
    type SnapshotEntry = (String, Vec<u8>);

    /// An in-doubt transaction: its records, its snapshots, and whether it commits.
    type InDoubtTxn = (Vec<Record>, Vec<SnapshotWrite>, bool);

    #[derive(Clone, Debug)]
    enum Entry {
        Record(FakeRecord),
        Aborted,
        Marker,
    }

    struct Shared {
        partitions: u32,
        entries: Mutex<BTreeMap<i32, Vec<Entry>>>,
        /// Per partition, the log start (records below it were deleted, as retention would).
        low: Mutex<BTreeMap<i32, i64>>,
        /// The snapshot topic's committed records, per partition, in order.
        snapshots: Mutex<BTreeMap<i32, Vec<SnapshotEntry>>>,
        /// The current producer epoch of each writer (bumped by every `prepare`).
        epochs: Mutex<HashMap<Writer, u64>>,
        /// The in-doubt transaction of each writer: its records and snapshots, and whether it
        /// commits.
        pending: Mutex<HashMap<Writer, InDoubtTxn>>,
        attempts: AtomicU64,
        /// The writer of each transaction attempt, in order.
        writers: Mutex<Vec<Writer>>,
        fate: Box<dyn Fn(u64) -> Fate + Send + Sync>,
        /// Resolve attempts that still answer "in doubt" before one resolves.
        stay_in_doubt: AtomicU32,
        gates: Mutex<HashMap<u64, Arc<tokio::sync::Notify>>>,
    }

    /// An in-memory log. Offsets are indexes in a partition's entries: records, aborted records
    /// and one commit marker per partition after each transaction (so a partition ends in a
    /// marker, as a real one does). Each [`FakeLog`] is one publisher process's view;
    /// [`FakeLog::another_publisher`] gives a second one on the same log, with producers of its
    /// own.
    pub struct FakeLog {
        shared: Arc<Shared>,
        /// The epoch this process's producers got from `prepare`.
        mine: Mutex<HashMap<Writer, u64>>,
    }

    impl FakeLog {
        pub fn new(partitions: u32, fate: impl Fn(u64) -> Fate + Send + Sync + 'static) -> Self {
            Self {
                shared: Arc::new(Shared {
                    partitions,
                    entries: Mutex::new(BTreeMap::new()),
                    low: Mutex::new(BTreeMap::new()),
                    snapshots: Mutex::new(BTreeMap::new()),
                    epochs: Mutex::new(HashMap::new()),
                    pending: Mutex::new(HashMap::new()),
                    attempts: AtomicU64::new(0),
                    writers: Mutex::new(Vec::new()),
                    fate: Box::new(fate),
                    stay_in_doubt: AtomicU32::new(0),
                    gates: Mutex::new(HashMap::new()),
                }),
                mine: Mutex::new(HashMap::new()),
            }
        }

        /// A second publisher process on the same log (its own producers, not prepared yet).
        pub fn another_publisher(&self) -> Self {
            Self { shared: self.shared.clone(), mine: Mutex::new(HashMap::new()) }
        }

        /// Makes transaction attempt `n` (0-based) wait until the returned gate is opened
        /// (`notify_one`), as a slow broker would.
        pub fn gate(&self, n: u64) -> Arc<tokio::sync::Notify> {
            self.shared.gates.lock().unwrap().entry(n).or_default().clone()
        }

        /// The next `n` resolve attempts answer "still in doubt".
        pub fn stay_in_doubt(&self, n: u32) {
            self.shared.stay_in_doubt.store(n, Ordering::SeqCst);
        }

        /// Transaction attempts so far.
        pub fn attempts(&self) -> u64 {
            self.shared.attempts.load(Ordering::SeqCst)
        }

        /// The writer of each transaction attempt so far.
        pub fn writers(&self) -> Vec<Writer> {
            self.shared.writers.lock().unwrap().clone()
        }

        /// Committed versions of `canvas`, in log order.
        pub fn events_of(&self, canvas: &str) -> Vec<u64> {
            self.committed().into_iter().flatten().filter(|e| e.0.canvas.as_str() == canvas).map(|e| e.0.version).collect()
        }

        /// Every committed record, partition by partition.
        pub fn committed(&self) -> Vec<FakeRecord> {
            let entries = self.shared.entries.lock().unwrap();
            entries.values().flatten().filter_map(|e| if let Entry::Record(r) = e { Some(r.clone()) } else { None }).collect()
        }

        /// The committed record at `offset` of `partition`.
        pub fn record_at(&self, partition: i32, offset: i64) -> Option<FakeRecord> {
            match self.shared.entries.lock().unwrap().get(&partition)?.get(offset as usize)? {
                Entry::Record(r) => Some(r.clone()),
                _ => None,
            }
        }

        /// Committed records, over all partitions.
        pub fn record_count(&self) -> usize {
            self.committed().len()
        }

        /// Deletes the records of `partition` below `before` (Kafka's DeleteRecords).
        pub fn delete_records(&self, partition: i32, before: i64) {
            let mut low = self.shared.low.lock().unwrap();
            let at = low.entry(partition).or_insert(0);
            *at = (*at).max(before);
        }

        /// The committed snapshot-topic records of `partition`, decoded, in order.
        pub fn snapshot_entries(&self, partition: i32) -> Vec<shared::snapshot::Entry> {
            let snaps = self.shared.snapshots.lock().unwrap();
            snaps
                .get(&partition)
                .map(|v| v.iter().filter_map(|(k, v)| shared::snapshot::decode(Some(k.as_bytes()), Some(v)).ok().flatten()).collect())
                .unwrap_or_default()
        }

        /// Writes `snapshot` to `partition`'s snapshot topic as if a publisher had committed it.
        pub fn put_snapshot(&self, partition: i32, snapshot: &shared::snapshot::Snapshot) {
            let mut snaps = self.shared.snapshots.lock().unwrap();
            snaps.entry(partition).or_default().push((snapshot.canvas.as_str().to_owned(), snapshot.encode()));
        }

        /// Where `partition`'s log ends (the offset the next entry takes).
        pub fn end_of(&self, partition: i32) -> i64 {
            self.shared.entries.lock().unwrap().get(&partition).map_or(0, |v| v.len() as i64)
        }

        /// Appends a transaction: its records (committed or aborted) and a marker on each of
        /// their partitions, and, when it commits, its snapshots; returns the records' offsets.
        fn append_txn(&self, records: &[Record], snapshots: &[SnapshotWrite], commit: bool) -> Vec<i64> {
            if commit {
                let mut snaps = self.shared.snapshots.lock().unwrap();
                for w in snapshots {
                    snaps.entry(w.partition).or_default().push((w.key.clone(), w.value.clone()));
                }
            }
            Self::append(&mut self.shared.entries.lock().unwrap(), records, commit)
        }

        /// Appends a transaction's records (committed or aborted) and a marker on each of its
        /// partitions; returns the records' offsets.
        fn append(entries: &mut BTreeMap<i32, Vec<Entry>>, records: &[Record], commit: bool) -> Vec<i64> {
            let mut offsets = Vec::new();
            for r in records {
                let part = entries.entry(r.partition).or_default();
                offsets.push(part.len() as i64);
                part.push(if commit { Entry::Record(r.events.iter().cloned().zip(r.keys.iter().cloned()).collect()) } else { Entry::Aborted });
            }
            let touched: std::collections::BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
            for p in touched {
                entries.entry(p).or_default().push(Entry::Marker);
            }
            offsets
        }

        fn logged(partition: i32, v: &[Entry]) -> Vec<LoggedEvent> {
            v.iter()
                .enumerate()
                .filter_map(|(o, e)| if let Entry::Record(r) = e { Some((o, r)) } else { None })
                .flat_map(|(o, rec)| {
                    rec.iter().map(move |(e, k)| LoggedEvent { partition, offset: o as i64, event: e.clone(), idempotency_key: k.clone() })
                })
                .collect()
        }

        fn fenced(&self, writer: Writer) -> bool {
            let current = self.shared.epochs.lock().unwrap().get(&writer).copied();
            current.is_none() || self.mine.lock().unwrap().get(&writer).copied() != current
        }
    }

    impl EventLog for FakeLog {
        async fn prepare(&self, partitions: u32) -> Result<(), PrepareError> {
            let writers: Vec<Writer> = std::iter::once(Writer::Shared).chain((0..partitions as i32).map(Writer::Partition)).collect();
            for w in writers {
                // init_transactions finishes what an older producer left in doubt.
                let left = self.shared.pending.lock().unwrap().remove(&w);
                if let Some((records, snapshots, commit)) = left {
                    self.append_txn(&records, &snapshots, commit);
                }
                let mut epochs = self.shared.epochs.lock().unwrap();
                let e = epochs.entry(w).or_insert(0);
                *e += 1;
                self.mine.lock().unwrap().insert(w, *e);
            }
            Ok(())
        }

        async fn transact(&self, writer: Writer, records: Vec<Record>, snapshots: Vec<SnapshotWrite>, _stall_after: Option<Duration>) -> TxnOutcome {
            assert!(!records.is_empty() || !snapshots.is_empty(), "a transaction writes at least one record");
            for w in &snapshots {
                if let Writer::Partition(p) = writer {
                    assert_eq!(w.partition, p, "an isolated partition's writer writes only that partition's snapshots");
                }
            }
            for r in &records {
                assert_eq!(r.events.len(), r.keys.len(), "one key slot per event");
                assert!((1..=shared::event::MAX_EVENTS_PER_RECORD).contains(&r.events.len()), "a record carries 1..=MAX events");
                assert!(r.events.windows(2).all(|w| w[0].canvas == w[1].canvas && w[1].version == w[0].version + 1));
                if let Writer::Partition(p) = writer {
                    assert_eq!(r.partition, p, "an isolated partition's writer writes only that partition");
                }
            }
            let n = self.shared.attempts.fetch_add(1, Ordering::SeqCst);
            self.shared.writers.lock().unwrap().push(writer);
            // Let other requests interleave, as a real network round trip would.
            tokio::task::yield_now().await;
            let gate = self.shared.gates.lock().unwrap().get(&n).cloned();
            if let Some(g) = gate {
                g.notified().await;
            }
            if self.fenced(writer) {
                return TxnOutcome::Fenced { commit_sent: false };
            }
            let late = self.shared.pending.lock().unwrap().remove(&writer);
            // An in-doubt transaction nobody resolved lands now, before this one.
            if let Some((late, late_snaps, commit)) = late {
                self.append_txn(&late, &late_snaps, commit);
            }
            let fate = (self.shared.fate)(n);
            match fate {
                Fate::Commit => TxnOutcome::Committed(self.append_txn(&records, &snapshots, true)),
                Fate::Abort => {
                    self.append_txn(&records, &snapshots, false);
                    TxnOutcome::NotCommitted { why: "aborted".into(), stalled: Vec::new() }
                }
                Fate::StallLowest => {
                    self.append_txn(&records, &snapshots, false);
                    let lowest = records.iter().map(|r| r.partition).chain(snapshots.iter().map(|w| w.partition)).min().expect("records");
                    TxnOutcome::NotCommitted { why: format!("partition {lowest} stalled"), stalled: vec![lowest] }
                }
                Fate::InDoubtThenCommit | Fate::InDoubtThenAbort => {
                    self.shared.pending.lock().unwrap().insert(writer, (records, snapshots, fate == Fate::InDoubtThenCommit));
                    TxnOutcome::InDoubt("commit not confirmed".into())
                }
                Fate::FencedCommitted => {
                    self.append_txn(&records, &snapshots, true);
                    *self.shared.epochs.lock().unwrap().entry(writer).or_default() += 1;
                    TxnOutcome::Fenced { commit_sent: true }
                }
                Fate::FatalBeforeCommit => TxnOutcome::Fatal { why: "fatal idempotence error".into(), commit_sent: false },
            }
        }

        async fn available(&self, _writer: Writer) {}

        async fn resolve(&self, writer: Writer) -> Result<Resolution, String> {
            tokio::task::yield_now().await;
            if self.shared.stay_in_doubt.load(Ordering::SeqCst) > 0 {
                self.shared.stay_in_doubt.fetch_sub(1, Ordering::SeqCst);
                return Err("still in doubt".into());
            }
            let pending = self.shared.pending.lock().unwrap().remove(&writer);
            let Some((records, snapshots, commit)) = pending else {
                return Ok(Resolution::NotCommitted);
            };
            let offsets = self.append_txn(&records, &snapshots, commit);
            Ok(if commit { Resolution::Committed(offsets) } else { Resolution::NotCommitted })
        }

        async fn read_snapshots(&self) -> Result<Loaded, ReadError> {
            let mut loaded = Loaded::default();
            for p in 0..self.shared.partitions as i32 {
                for e in self.snapshot_entries(p) {
                    loaded.add(p, e);
                }
            }
            Ok(loaded)
        }

        async fn offsets_for_time(&self, ms: i64) -> Result<Offsets, ReadError> {
            let entries = self.shared.entries.lock().unwrap();
            let mut out = Offsets::new();
            for (p, v) in entries.iter() {
                let found = v.iter().position(|e| matches!(e, Entry::Record(r) if r.first().is_some_and(|(ev, _)| ev.published_at_ms as i64 >= ms)));
                if let Some(o) = found {
                    out.insert(*p, o as i64);
                }
            }
            Ok(out)
        }

        async fn read_tail<F: FnMut(LoggedEvent) + Send + 'static>(&self, tail: Tail, mut sink: F) -> Result<(F, TailEnd), ReadError> {
            let entries = self.shared.entries.lock().unwrap().clone();
            let low = self.shared.low.lock().unwrap().clone();
            let mut end = TailEnd::default();
            for p in 0..self.shared.partitions as i32 {
                let v = entries.get(&p).cloned().unwrap_or_default();
                let (start, gap) =
                    replay::start_of(tail.needed.get(&p).copied(), tail.wanted.get(&p).copied(), low.get(&p).copied().unwrap_or(0), v.len() as i64);
                if gap == replay::Gap::Deleted {
                    end.truncated.push(p);
                }
                for e in Self::logged(p, &v).into_iter().filter(|e| e.offset >= start) {
                    sink(e);
                }
                end.records += v.iter().skip(start as usize).filter(|e| matches!(e, Entry::Record(_))).count() as u64;
                end.positions.insert(p, v.len() as i64);
            }
            Ok((sink, end))
        }

        fn reset(&self) {
            self.mine.lock().unwrap().clear();
        }
    }
}
