//! The publisher's side of the Kafka log: append one record (one event, or a canvas's group of
//! consecutive versions) and wait for the acknowledgement, and read records back (head rebuild at
//! start, reconciliation after an uncertain failure).
//!
//! [`EventLog`] is the seam the version logic is written against, so its contiguity rules are
//! unit-tested with a fake log; [`KafkaLog`] is the real one.

use rdkafka::consumer::BaseConsumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use shared::kafka::{FleetContext, KafkaSettings};
use shared::replay::{self, Offsets, ReplayPlan};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use shared::event::IDEMPOTENCY_HEADER;
use shared::PixelEvent;
use std::future::Future;
use std::time::Duration;

/// A publish that failed.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The record was certainly not written (e.g. the producer queue was full).
    #[error("not written: {0}")]
    NotWritten(String),
    /// The outcome is unknown: the record may or may not be in the log (e.g. the ack timed out
    /// after the request was sent). The next publish to the canvas first reads the log to find out.
    #[error("outcome unknown: {0}")]
    Unknown(String),
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
    /// Appends one record carrying `events` (1..=[`shared::event::MAX_EVENTS_PER_RECORD`] of one
    /// canvas, consecutive versions) to `partition` (key = canvas id; `keys[i]` is the
    /// idempotency key of `events[i]`, as headers) and resolves with the record's offset once the
    /// broker acknowledged it (`acks=all`). The record lands whole or not at all.
    fn append(&self, partition: i32, events: &[PixelEvent], keys: &[Option<&str>])
        -> impl Future<Output = Result<i64, AppendError>> + Send;

    /// Every event of `partition` from offset `from` up to the current high watermark (one entry per
    /// event of each record, every canvas; records that are not pixel events are skipped).
    fn read_partition(&self, partition: i32, from: i64) -> impl Future<Output = Result<Vec<LoggedEvent>, ReadError>> + Send;

    /// Every record of the topic, and the high watermark of each partition when reading started.
    fn read_all(&self) -> impl Future<Output = Result<(Vec<LoggedEvent>, Offsets), ReadError>> + Send;
}

/// [`EventLog`] on a real Kafka-protocol broker.
pub struct KafkaLog {
    producer: FutureProducer<FleetContext>,
    settings: KafkaSettings,
    topic: String,
}

impl KafkaLog {
    /// A log on `topic`.
    ///
    /// # Errors
    /// When librdkafka rejects the producer configuration.
    pub fn new(settings: KafkaSettings, topic: String, produce_timeout: Duration) -> Result<Self, KafkaError> {
        let producer = settings.producer("core-publisher", produce_timeout).create_with_context(FleetContext::default())?;
        Ok(Self { producer, settings, topic })
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
            let targets = plan.targets.clone();
            let total = replay::Progress::new(&plan).remaining();
            let mut out = Vec::new();
            replay::run(
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
            Ok((out, targets))
        })
        .await
        .map_err(|e| ReadError(e.to_string()))?
    }
}

impl EventLog for KafkaLog {
    async fn append(&self, partition: i32, events: &[PixelEvent], keys: &[Option<&str>]) -> Result<i64, AppendError> {
        let first = events.first().ok_or_else(|| AppendError::NotWritten("a record needs at least one event".into()))?;
        let payload = PixelEvent::record_value(events);
        let mut record = FutureRecord::to(&self.topic)
            .partition(partition)
            .key(first.canvas.as_str())
            .payload(&payload)
            .timestamp(first.published_at_ms as i64);
        // One header per event, in order (a null value: that event has no key), or none at all.
        if keys.iter().any(Option::is_some) {
            let mut headers = OwnedHeaders::new_with_capacity(keys.len());
            for k in keys {
                headers = headers.insert(Header { key: IDEMPOTENCY_HEADER, value: *k });
            }
            record = record.headers(headers);
        }
        match self.producer.send(record, Timeout::After(Duration::from_secs(1))).await {
            Ok(delivery) => Ok(delivery.offset),
            Err((e, _)) => Err(classify(e)),
        }
    }

    async fn read_partition(&self, partition: i32, from: i64) -> Result<Vec<LoggedEvent>, ReadError> {
        Ok(self.read(Offsets::from([(partition, from)]), Some(partition)).await?.0)
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

/// Sorts a produce failure into "certainly not written" and "unknown".
fn classify(e: KafkaError) -> AppendError {
    match &e {
        KafkaError::MessageProduction(
            RDKafkaErrorCode::QueueFull
            | RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::UnknownPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownTopicOrPartition,
        ) => AppendError::NotWritten(e.to_string()),
        _ => AppendError::Unknown(e.to_string()),
    }
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

/// An in-memory [`EventLog`] for unit tests, whose appends fail on a schedule.
#[cfg(test)]
pub mod fake {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    /// What the fake log does with an append.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub enum Fate {
        Ok,
        /// Fails and the record is not in the log.
        FailNotWritten,
        /// Fails with an unknown outcome, but the record did land.
        FailButWritten,
        /// Fails with an unknown outcome and the record is not in the log.
        FailUnknownNotWritten,
    }

    /// A record of the fake log: its events with their idempotency keys.
    pub type FakeRecord = Vec<(PixelEvent, Option<String>)>;

    /// An in-memory log whose appends fail on a schedule (by append attempt number). Records are
    /// kept per partition; the offset is the index.
    pub struct FakeLog {
        partitions: u32,
        pub records: Mutex<BTreeMap<i32, Vec<FakeRecord>>>,
        attempts: AtomicU64,
        fate: Box<dyn Fn(u64) -> Fate + Send + Sync>,
        /// Appends (by attempt number) that wait for their gate to be opened before answering.
        gates: Mutex<std::collections::HashMap<u64, Arc<tokio::sync::Notify>>>,
    }

    impl FakeLog {
        pub fn new(partitions: u32, fate: impl Fn(u64) -> Fate + Send + Sync + 'static) -> Self {
            Self {
                partitions,
                records: Mutex::new(BTreeMap::new()),
                attempts: AtomicU64::new(0),
                fate: Box::new(fate),
                gates: Mutex::new(std::collections::HashMap::new()),
            }
        }
        /// Makes append attempt `n` (0-based) wait until the returned gate is opened
        /// (`notify_one`), as a slow broker acknowledgement would.
        pub fn gate(&self, n: u64) -> Arc<tokio::sync::Notify> {
            self.gates.lock().unwrap().entry(n).or_default().clone()
        }
        /// Append attempts so far.
        pub fn attempts(&self) -> u64 {
            self.attempts.load(Ordering::SeqCst)
        }
        pub fn events_of(&self, canvas: &str) -> Vec<u64> {
            let recs = self.records.lock().unwrap();
            recs.values().flatten().flatten().filter(|e| e.0.canvas.as_str() == canvas).map(|e| e.0.version).collect()
        }
        /// Records appended, over all partitions.
        pub fn record_count(&self) -> usize {
            self.records.lock().unwrap().values().map(Vec::len).sum()
        }
        fn logged(partition: i32, from: usize, v: &[FakeRecord]) -> Vec<LoggedEvent> {
            v.iter()
                .enumerate()
                .skip(from)
                .flat_map(|(o, rec)| {
                    rec.iter().map(move |(e, k)| LoggedEvent { partition, offset: o as i64, event: e.clone(), idempotency_key: k.clone() })
                })
                .collect()
        }
    }

    impl EventLog for FakeLog {
        async fn append(&self, partition: i32, events: &[PixelEvent], keys: &[Option<&str>]) -> Result<i64, AppendError> {
            assert_eq!(events.len(), keys.len(), "one key slot per event");
            assert!((1..=shared::event::MAX_EVENTS_PER_RECORD).contains(&events.len()), "a record carries 1..=MAX events");
            let n = self.attempts.fetch_add(1, Ordering::SeqCst);
            // Let other requests interleave, as a real network round trip would.
            tokio::task::yield_now().await;
            let gate = self.gates.lock().unwrap().get(&n).cloned();
            if let Some(g) = gate {
                g.notified().await;
            }
            let fate = (self.fate)(n);
            let mut recs = self.records.lock().unwrap();
            let part = recs.entry(partition).or_default();
            let record: FakeRecord = events.iter().cloned().zip(keys.iter().map(|k| k.map(str::to_owned))).collect();
            match fate {
                Fate::Ok => {
                    part.push(record);
                    Ok(part.len() as i64 - 1)
                }
                Fate::FailNotWritten => Err(AppendError::NotWritten("queue full".into())),
                Fate::FailButWritten => {
                    part.push(record);
                    Err(AppendError::Unknown("timed out".into()))
                }
                Fate::FailUnknownNotWritten => Err(AppendError::Unknown("timed out".into())),
            }
        }
        async fn read_partition(&self, partition: i32, from: i64) -> Result<Vec<LoggedEvent>, ReadError> {
            let recs = self.records.lock().unwrap();
            Ok(recs.get(&partition).map(|v| Self::logged(partition, from.max(0) as usize, v)).unwrap_or_default())
        }
        async fn read_all(&self) -> Result<(Vec<LoggedEvent>, Offsets), ReadError> {
            let recs = self.records.lock().unwrap();
            let mut out = Vec::new();
            let mut high = Offsets::new();
            for p in 0..self.partitions as i32 {
                let v = recs.get(&p).cloned().unwrap_or_default();
                high.insert(p, v.len() as i64);
                out.extend(Self::logged(p, 0, &v));
            }
            Ok((out, high))
        }
    }
}
