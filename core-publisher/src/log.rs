//! The publisher's side of the Kafka log, as the version logic sees it: per partition, one
//! transactional writer, and `read_committed` readers.
//!
//! - [`EventLog::prepare`] initialises a partition's transactional producer (`init_transactions`):
//!   it fences every older producer with the same `transactional.id` (another publisher process)
//!   and finishes whatever transaction such a producer left open, so what a reader sees of the
//!   partition afterwards is final until this process writes again.
//! - [`EventLog::transact`] writes records in one transaction and commits it; the answer is
//!   definite ([`TxnOutcome::Committed`], [`TxnOutcome::NotCommitted`], [`TxnOutcome::Fenced`])
//!   except when the commit was sent and not confirmed in time ([`TxnOutcome::InDoubt`]).
//! - [`EventLog::resolve`] asks again about an in-doubt commit until the answer is definite.
//! - The reads return committed records only, and the *position* each read ended at (past the
//!   last commit marker, see [`shared::replay`]).
//!
//! [`EventLog`] is the seam the version logic is written against, so its rules are unit-tested
//! with [`fake::FakeLog`]; [`KafkaLog`] is the real one (its transactions are in [`crate::txn`]).
//! A partition has one transaction in flight at a time, whichever of its producers runs it.

use crate::txn::TxnWriter;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Headers, Message};
use shared::event::IDEMPOTENCY_HEADER;
use shared::kafka::{FleetContext, KafkaSettings};
use shared::replay::{self, Offsets, ReplayPlan};
use shared::PixelEvent;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One record of a transaction: 1..=[`shared::event::MAX_EVENTS_PER_RECORD`] events of one canvas
/// with consecutive versions, and the idempotency key of each (record headers, one per event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub events: Vec<PixelEvent>,
    pub keys: Vec<Option<String>>,
}

/// How a transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Committed: the offset of each record, in order.
    Committed(Vec<i64>),
    /// Certainly not committed (aborted, or it never began): nothing of it is or ever becomes
    /// visible to a `read_committed` reader.
    NotCommitted(String),
    /// The commit was sent and not confirmed in time. The writer keeps the transaction; ask
    /// [`EventLog::resolve`] until the answer is definite, and write nothing else on the partition
    /// meanwhile.
    InDoubt(String),
    /// Another producer with this partition's `transactional.id` took over. `commit_sent`: the
    /// commit had been sent, so this transaction may have committed (the new producer finished it
    /// one way or the other); otherwise it certainly did not.
    Fenced { commit_sent: bool },
}

/// The definite end of an in-doubt transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// It committed: the offset of each record.
    Committed(Vec<i64>),
    /// It did not commit.
    NotCommitted,
    /// The producer had to be created anew (`init_transactions` finished the transaction one way
    /// or the other): read the partition from the last known position to learn which.
    Reinitialised,
    /// Another producer took over; this process cannot learn the outcome any more.
    Fenced,
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

/// What the version logic needs from the log.
pub trait EventLog: Send + Sync + 'static {
    /// Initialises the transactional producer of `partition` (`init_transactions`), fencing older
    /// producers of the same `transactional.id` and finishing their open transaction. Call it for
    /// every partition before reading the log at start-up.
    fn prepare(&self, partition: i32) -> impl Future<Output = Result<(), PrepareError>> + Send;

    /// Writes `records` to `partition` in one transaction (key = canvas id, one idempotency-key
    /// header per event) and commits it.
    fn transact(&self, partition: i32, records: Vec<Record>) -> impl Future<Output = TxnOutcome> + Send;

    /// One more attempt to learn how the in-doubt transaction of `partition` ended; `Err` while
    /// it is still not known.
    fn resolve(&self, partition: i32) -> impl Future<Output = Result<Resolution, String>> + Send;

    /// Every committed event of `partition` from offset `from` up to its last stable offset, and
    /// the position the read ended at.
    fn read_partition(&self, partition: i32, from: i64) -> impl Future<Output = Result<(Vec<LoggedEvent>, i64), ReadError>> + Send;

    /// Every committed event of the topic, and the position each partition's read ended at.
    fn read_all(&self) -> impl Future<Output = Result<(Vec<LoggedEvent>, Offsets), ReadError>> + Send;
}

/// Transactional producers per partition, taking turns.
///
/// After a commit the transaction coordinator writes the commit markers to the partitions, and
/// until it has, the same producer's next transaction cannot register its partition: the broker
/// answers `CONCURRENT_TRANSACTIONS` and librdkafka retries 20 ms later. Back-to-back transactions
/// of one producer therefore took about 30 ms each (measured on a single broker: 13 such retries
/// in 28 transactions under concurrent publishes). With two producers taking turns, one commits
/// while the other's markers are written.
pub const PRODUCERS_PER_PARTITION: usize = 2;

/// One partition's producers and whose turn it is.
struct Writers {
    slots: Vec<Arc<TxnWriter>>,
    /// The slot of the next transaction.
    next: usize,
    /// The slot whose commit is in doubt, if any.
    in_doubt: Option<usize>,
}

/// [`EventLog`] on a real Kafka-protocol broker: [`PRODUCERS_PER_PARTITION`] [`TxnWriter`]s per
/// partition (created by [`EventLog::prepare`]), reads with `read_committed` consumers.
pub struct KafkaLog {
    settings: KafkaSettings,
    topic: String,
    transactional_id: String,
    message_timeout: Duration,
    transaction_timeout: Duration,
    writers: Mutex<HashMap<i32, Writers>>,
}

impl KafkaLog {
    /// A log on `topic` whose partition `p` is written by the producers with `transactional.id`
    /// `<transactional_id>-<p>-<slot>`.
    pub fn new(settings: KafkaSettings, topic: String, transactional_id: String, message_timeout: Duration, transaction_timeout: Duration) -> Self {
        Self { settings, topic, transactional_id, message_timeout, transaction_timeout, writers: Mutex::new(HashMap::new()) }
    }

    /// The `transactional.id` of `partition`'s producer number `slot`: derived from the base and
    /// numbers only, so every publisher process of a deployment uses the same ids and the newest
    /// fences the others.
    pub fn transactional_id_of(base: &str, partition: i32, slot: usize) -> String {
        format!("{base}-{partition}-{slot}")
    }

    fn lock_writers(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Writers>> {
        self.writers.lock().expect("writers lock is never poisoned: no panics while held")
    }

    /// Every producer of `partition` (started when there are none).
    fn slots(&self, partition: i32) -> Vec<Arc<TxnWriter>> {
        let mut w = self.lock_writers();
        w.entry(partition)
            .or_insert_with(|| Writers {
                slots: (0..PRODUCERS_PER_PARTITION)
                    .map(|slot| {
                        Arc::new(TxnWriter::start(
                            self.settings.clone(),
                            self.topic.clone(),
                            partition,
                            Self::transactional_id_of(&self.transactional_id, partition, slot),
                            self.message_timeout,
                            self.transaction_timeout,
                        ))
                    })
                    .collect(),
                next: 0,
                in_doubt: None,
            })
            .slots
            .clone()
    }

    /// The producer whose turn it is, and its slot.
    fn turn(&self, partition: i32) -> (usize, Arc<TxnWriter>) {
        let slots = self.slots(partition);
        let mut w = self.lock_writers();
        let ws = w.get_mut(&partition).expect("slots() created them");
        let slot = ws.next % slots.len();
        ws.next = ws.next.wrapping_add(1);
        (slot, slots[slot].clone())
    }

    async fn read(&self, from: Offsets, only: Option<i32>) -> Result<(Vec<LoggedEvent>, Offsets), ReadError> {
        let settings = self.settings.clone();
        let topic = self.topic.clone();
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer<FleetContext> = settings
                .reader("core-publisher")
                .create_with_context(FleetContext::default())
                .map_err(|e| ReadError(e.to_string()))?;
            let (mut plan, truncated) = replay::plan(&consumer, &topic, &from, Duration::from_secs(10))
                .map_err(|e| ReadError(e.to_string()))?;
            if only.is_none() && !truncated.is_empty() {
                tracing::error!(partitions = ?truncated,
                    "the log no longer starts at offset 0 on these partitions (records deleted by retention): canvases there \
                     miss their first versions; their hashes cannot match clients that saw them. Keep the topic's retention infinite");
            }
            if let Some(p) = only {
                plan = ReplayPlan {
                    starts: plan.starts.into_iter().filter(|(q, _)| *q == p).collect(),
                    targets: plan.targets.into_iter().filter(|(q, _)| *q == p).collect(),
                };
            }
            let total = replay::Progress::new(&plan).remaining();
            let mut out = Vec::new();
            let progress = replay::run(
                &consumer,
                &topic,
                &plan,
                Duration::from_secs(30),
                &|| false,
                |msg| match PixelEvent::decode_record(msg.payload()) {
                    Ok(events) => {
                        let mut keys = header_values(msg, IDEMPOTENCY_HEADER);
                        if keys.len() != events.len() {
                            if !keys.is_empty() {
                                tracing::warn!(partition = msg.partition(), offset = msg.offset(), events = events.len(), headers = keys.len(),
                                    "a record's idempotency-key headers do not match its events one to one; its keys are not remembered");
                            }
                            keys = vec![None; events.len()];
                        }
                        out.extend(events.into_iter().zip(keys).map(|(event, idempotency_key)| LoggedEvent {
                            partition: msg.partition(),
                            offset: msg.offset(),
                            event,
                            idempotency_key,
                        }));
                    }
                    Err(e) => tracing::warn!(partition = msg.partition(), offset = msg.offset(), error = %e,
                        "skipping a record that is not a pixel event"),
                },
                |pr| {
                    if total > 10_000 {
                        tracing::info!(read = pr.count, total, "reading the log");
                    }
                },
            )
            .map_err(|e| ReadError(e.to_string()))?;
            Ok((out, progress.positions))
        })
        .await
        .map_err(|e| ReadError(e.to_string()))?
    }
}

impl EventLog for KafkaLog {
    async fn prepare(&self, partition: i32) -> Result<(), PrepareError> {
        let results = futures::future::join_all(self.slots(partition).iter().map(|w| w.prepare())).await;
        results.into_iter().collect()
    }

    async fn transact(&self, partition: i32, records: Vec<Record>) -> TxnOutcome {
        let (slot, writer) = self.turn(partition);
        let outcome = writer.transact(records).await;
        if matches!(outcome, TxnOutcome::InDoubt(_)) {
            if let Some(ws) = self.lock_writers().get_mut(&partition) {
                ws.in_doubt = Some(slot);
            }
        }
        outcome
    }

    async fn resolve(&self, partition: i32) -> Result<Resolution, String> {
        let slot = self.lock_writers().get(&partition).and_then(|ws| ws.in_doubt);
        let Some(slot) = slot else { return Ok(Resolution::NotCommitted) };
        let r = self.slots(partition)[slot].resolve().await;
        if r.is_ok() {
            if let Some(ws) = self.lock_writers().get_mut(&partition) {
                ws.in_doubt = None;
            }
        }
        r
    }

    async fn read_partition(&self, partition: i32, from: i64) -> Result<(Vec<LoggedEvent>, i64), ReadError> {
        let (events, ends) = self.read(Offsets::from([(partition, from)]), Some(partition)).await?;
        Ok((events, ends.get(&partition).copied().unwrap_or(from)))
    }

    async fn read_all(&self) -> Result<(Vec<LoggedEvent>, Offsets), ReadError> {
        self.read(Offsets::new(), None).await
    }
}

/// The values of every header `name` of `msg`, in order, as text (`None` for a null value).
fn header_values(msg: &impl Message, name: &str) -> Vec<Option<String>> {
    msg.headers().map_or_else(Vec::new, |hs| {
        hs.iter().filter(|h| h.key == name).map(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned())).collect()
    })
}

/// Ensures `topic` exists (creating it with `partitions` × `replication` when it does not) and
/// returns its real partition count.
///
/// # Errors
/// When the broker cannot be reached or refuses to create the topic.
pub async fn ensure_topic(
    settings: &KafkaSettings,
    topic: &str,
    partitions: u32,
    replication: i32,
) -> Result<u32, String> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let count = || {
        let (settings, topic) = (settings.clone(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer<FleetContext> =
                settings.reader("core-publisher").create_with_context(FleetContext::default()).map_err(replay::ReplayError::Client)?;
            replay::partition_count(&consumer, &topic, Duration::from_secs(10))
        })
    };
    match count().await.map_err(|e| e.to_string())? {
        Ok(n) => return Ok(n),
        Err(replay::ReplayError::NoTopic { .. }) => {}
        Err(e) => return Err(e.to_string()),
    }
    let admin: AdminClient<FleetContext> =
        settings.admin("core-publisher-admin").create_with_context(FleetContext::default()).map_err(|e| e.to_string())?;
    // The log is the canvases' only state: keep every record (Kafka's `retention.ms` and
    // `retention.bytes`, -1 = unlimited).
    let new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(replication))
        .set("retention.ms", "-1")
        .set("retention.bytes", "-1");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin.create_topics([&new], &opts).await.map_err(|e| e.to_string())?;
    for r in results {
        match r {
            Ok(_) => tracing::info!(topic, partitions, replication, "created topic (retention unlimited)"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(format!("create topic {name}: {code}")),
        }
    }
    count().await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())
}

/// An in-memory [`EventLog`] for unit tests, whose transactions end on a schedule.
#[cfg(test)]
pub mod fake {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    /// How the fake log ends a transaction (by attempt number, over every partition).
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub enum Fate {
        Commit,
        /// Aborted: its records take offsets but are never read.
        Abort,
        /// The commit is sent but not confirmed: in doubt, then committed when resolved. Until
        /// then nothing of it can be read, and if nobody resolves it before the partition's next
        /// transaction it commits then ("lands late"), as a slow broker's would.
        InDoubtThenCommit,
        /// In doubt, then not committed.
        InDoubtThenAbort,
        /// Fenced while committing, and it did commit (the worst case for the fenced process).
        FencedCommitted,
    }

    /// A record of the fake log: its events with their idempotency keys.
    pub type FakeRecord = Vec<(PixelEvent, Option<String>)>;

    #[derive(Clone, Debug)]
    enum Entry {
        Record(FakeRecord),
        Aborted,
        Marker,
    }

    struct Shared {
        partitions: u32,
        entries: Mutex<BTreeMap<i32, Vec<Entry>>>,
        /// The current producer epoch of each partition (bumped by every `prepare`).
        epochs: Mutex<HashMap<i32, u64>>,
        /// The in-doubt transaction of each partition: its records, and whether it commits.
        pending: Mutex<HashMap<i32, (Vec<Record>, bool)>>,
        attempts: AtomicU64,
        fate: Box<dyn Fn(u64) -> Fate + Send + Sync>,
        /// Resolve attempts that still answer "in doubt" before one resolves.
        stay_in_doubt: AtomicU32,
        gates: Mutex<HashMap<u64, Arc<tokio::sync::Notify>>>,
    }

    /// An in-memory log. Offsets are indexes in a partition's entries: records, aborted records
    /// and one commit marker after each transaction (so a partition ends in a marker, as a real
    /// one does). Each [`FakeLog`] is one publisher process's view; [`FakeLog::another_publisher`]
    /// gives a second one on the same log, with producers of its own.
    pub struct FakeLog {
        shared: Arc<Shared>,
        /// The epoch this process's producer of each partition got from `prepare`.
        mine: Mutex<HashMap<i32, u64>>,
    }

    impl FakeLog {
        pub fn new(partitions: u32, fate: impl Fn(u64) -> Fate + Send + Sync + 'static) -> Self {
            Self {
                shared: Arc::new(Shared {
                    partitions,
                    entries: Mutex::new(BTreeMap::new()),
                    epochs: Mutex::new(HashMap::new()),
                    pending: Mutex::new(HashMap::new()),
                    attempts: AtomicU64::new(0),
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

        fn append(entries: &mut Vec<Entry>, records: &[Record], commit: bool) -> Vec<i64> {
            let mut offsets = Vec::new();
            for r in records {
                offsets.push(entries.len() as i64);
                entries.push(if commit { Entry::Record(r.events.iter().cloned().zip(r.keys.iter().cloned()).collect()) } else { Entry::Aborted });
            }
            entries.push(Entry::Marker);
            offsets
        }

        fn logged(partition: i32, from: usize, v: &[Entry]) -> Vec<LoggedEvent> {
            v.iter()
                .enumerate()
                .skip(from)
                .filter_map(|(o, e)| if let Entry::Record(r) = e { Some((o, r)) } else { None })
                .flat_map(|(o, rec)| {
                    rec.iter().map(move |(e, k)| LoggedEvent { partition, offset: o as i64, event: e.clone(), idempotency_key: k.clone() })
                })
                .collect()
        }

        fn fenced(&self, partition: i32) -> bool {
            let current = self.shared.epochs.lock().unwrap().get(&partition).copied();
            current.is_none() || self.mine.lock().unwrap().get(&partition).copied() != current
        }
    }

    impl EventLog for FakeLog {
        async fn prepare(&self, partition: i32) -> Result<(), PrepareError> {
            // init_transactions finishes what an older producer left in doubt.
            let left = self.shared.pending.lock().unwrap().remove(&partition);
            if let Some((records, commit)) = left {
                Self::append(self.shared.entries.lock().unwrap().entry(partition).or_default(), &records, commit);
            }
            let mut epochs = self.shared.epochs.lock().unwrap();
            let e = epochs.entry(partition).or_insert(0);
            *e += 1;
            self.mine.lock().unwrap().insert(partition, *e);
            Ok(())
        }

        async fn transact(&self, partition: i32, records: Vec<Record>) -> TxnOutcome {
            assert!(!records.is_empty(), "a transaction writes at least one record");
            for r in &records {
                assert_eq!(r.events.len(), r.keys.len(), "one key slot per event");
                assert!((1..=shared::event::MAX_EVENTS_PER_RECORD).contains(&r.events.len()), "a record carries 1..=MAX events");
                assert!(r.events.windows(2).all(|w| w[0].canvas == w[1].canvas && w[1].version == w[0].version + 1));
            }
            let n = self.shared.attempts.fetch_add(1, Ordering::SeqCst);
            // Let other requests interleave, as a real network round trip would.
            tokio::task::yield_now().await;
            let gate = self.shared.gates.lock().unwrap().get(&n).cloned();
            if let Some(g) = gate {
                g.notified().await;
            }
            if self.fenced(partition) {
                return TxnOutcome::Fenced { commit_sent: false };
            }
            let late = self.shared.pending.lock().unwrap().remove(&partition);
            let mut entries = self.shared.entries.lock().unwrap();
            let part = entries.entry(partition).or_default();
            // An in-doubt transaction nobody resolved lands now, before this one.
            if let Some((late, commit)) = late {
                Self::append(part, &late, commit);
            }
            match (self.shared.fate)(n) {
                Fate::Commit => TxnOutcome::Committed(Self::append(part, &records, true)),
                Fate::Abort => {
                    Self::append(part, &records, false);
                    TxnOutcome::NotCommitted("aborted".into())
                }
                Fate::InDoubtThenCommit | Fate::InDoubtThenAbort => {
                    let commit = (self.shared.fate)(n) == Fate::InDoubtThenCommit;
                    self.shared.pending.lock().unwrap().insert(partition, (records, commit));
                    TxnOutcome::InDoubt("commit not confirmed".into())
                }
                Fate::FencedCommitted => {
                    Self::append(part, &records, true);
                    *self.shared.epochs.lock().unwrap().entry(partition).or_default() += 1;
                    TxnOutcome::Fenced { commit_sent: true }
                }
            }
        }

        async fn resolve(&self, partition: i32) -> Result<Resolution, String> {
            tokio::task::yield_now().await;
            if self.shared.stay_in_doubt.load(Ordering::SeqCst) > 0 {
                self.shared.stay_in_doubt.fetch_sub(1, Ordering::SeqCst);
                return Err("still in doubt".into());
            }
            let pending = self.shared.pending.lock().unwrap().remove(&partition);
            let Some((records, commit)) = pending else {
                return Ok(Resolution::NotCommitted);
            };
            let offsets = Self::append(self.shared.entries.lock().unwrap().entry(partition).or_default(), &records, commit);
            Ok(if commit { Resolution::Committed(offsets) } else { Resolution::NotCommitted })
        }

        async fn read_partition(&self, partition: i32, from: i64) -> Result<(Vec<LoggedEvent>, i64), ReadError> {
            let entries = self.shared.entries.lock().unwrap();
            let v = entries.get(&partition).cloned().unwrap_or_default();
            Ok((Self::logged(partition, from.max(0) as usize, &v), (v.len() as i64).max(from)))
        }

        async fn read_all(&self) -> Result<(Vec<LoggedEvent>, Offsets), ReadError> {
            let entries = self.shared.entries.lock().unwrap();
            let mut out = Vec::new();
            let mut ends = Offsets::new();
            for p in 0..self.shared.partitions as i32 {
                let v = entries.get(&p).cloned().unwrap_or_default();
                ends.insert(p, v.len() as i64);
                out.extend(Self::logged(p, 0, &v));
            }
            Ok((out, ends))
        }
    }
}
