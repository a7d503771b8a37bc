//! The benchmark's own Kafka clients: topic creation, a rate-controlled producer writing fleet
//! events or `stream` publications straight to the topic (what the peers consume: they have no
//! publisher), and a bare librdkafka consumer (the ceiling and the baseline the fleet is compared
//! with).

use anyhow::{bail, Context};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use super::payload::{Payload, StreamRecords};
use shared::kafka::KafkaSettings;
use shared::partitioner::partition_for;
use shared::{ChannelId, Color, PixelEvent};
use std::time::{Duration, Instant};

/// The record header Centrifugo's Kafka consumer reads the target channels from, in its
/// publication data mode (`consumers[].kafka.publication_data_mode.channels_header`).
pub const CHANNELS_HEADER: &str = "centrifugo-channels";

/// Creates `topic` with `partitions` partitions (replication factor 1).
///
/// # Errors
/// When the broker refuses or does not answer.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = KafkaSettings::new(bootstrap).admin("bench-admin").create()?;
    let res = admin
        .create_topics(&[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))))
        .await?;
    for r in res {
        if let Err((t, e)) = r {
            bail!("create topic {t}: {e}");
        }
    }
    wait_for_leaders(bootstrap, topic, partitions).await
}

/// Creates `topic` with `partitions` partitions and the topic `configs`, and waits for its leaders.
///
/// # Errors
/// When the broker refuses or does not answer.
pub async fn create_topic_with(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = KafkaSettings::new(bootstrap).admin("bench-admin").create()?;
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    for r in admin.create_topics(&[new], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))).await? {
        if let Err((t, e)) = r {
            bail!("create topic {t}: {e}");
        }
    }
    wait_for_leaders(bootstrap, topic, partitions).await
}

/// Waits until every partition of a new `topic` has a leader in the broker's metadata (at most
/// 30 s). `CreateTopics` answers before the controller has elected them; a watermark request in
/// that window fails with `NotLeaderForPartition` (seen once, at the broker warm-up).
///
/// # Errors
/// When the partitions still have no leader after 30 s, or the broker does not answer.
async fn wait_for_leaders(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = KafkaSettings::new(&bootstrap).reader("bench-admin").create()?;
        let started = Instant::now();
        loop {
            // A metadata request that fails or times out counts as "no leader yet": retried.
            let led = match consumer.fetch_metadata(Some(&topic), Duration::from_secs(5)) {
                Ok(md) => md
                    .topics()
                    .iter()
                    .find(|t| t.name() == topic && t.error().is_none())
                    .map_or(0, |t| t.partitions().iter().filter(|p| p.error().is_none() && p.leader() >= 0).count()),
                Err(e) => {
                    tracing::debug!(topic, error = %e, "metadata request failed; retrying");
                    0
                }
            };
            if led == partitions as usize {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("topic {topic}: {led} of {partitions} partitions have a leader 30 s after it was created");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await?
}

/// (low, high) watermarks of `topic`/`partition`, retried while the partition's leadership is
/// still settling after the topic was created (`NotLeaderForPartition`, `LeaderNotAvailable`,
/// `UnknownTopicOrPartition`); 10 s in all, each request bounded by what is left of them.
///
/// # Errors
/// Any other error, or still no leader after 10 s.
pub fn watermarks<C: rdkafka::consumer::ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str, partition: i32) -> anyhow::Result<(i64, i64)> {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(500));
        match consumer.fetch_watermarks(topic, partition, left) {
            Err(KafkaError::MetadataFetch(Code::NotLeaderForPartition | Code::LeaderNotAvailable | Code::UnknownTopicOrPartition))
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r.with_context(|| format!("watermarks of {topic}/{partition}")),
        }
    }
}

/// One pixel event of `canvas` (`side` × `side` pixels) at `version`, as the publisher would
/// write it. Its JSON is about 90 bytes.
pub fn event(canvas: &str, version: u64, side: u32) -> PixelEvent {
    PixelEvent {
        canvas: ChannelId::parse(canvas).expect("bench canvas ids are valid"),
        version,
        x: (version % u64::from(side)) as u32,
        y: ((version / u64::from(side)) % u64::from(side)) as u32,
        color: Color([(version % 251) as u8, 0x40, 0x80]),
        published_at_ms: shared::event::now_ms(),
    }
}

/// Writes fleet events straight to a topic: key = canvas id, explicit partition from
/// [`partition_for`] (the fleet's murmur2), the [`CHANNELS_HEADER`] header, contiguous versions per
/// canvas from 1. Uses the publisher's producer settings (`acks=all`, idempotent, `linger.ms=1`).
/// Pixel events (format 1) unless [`DirectProducer::carrying`] says otherwise.
pub struct DirectProducer {
    producer: FutureProducer,
    topic: String,
    partitions: u32,
    side: u32,
    /// The writer of `stream` records, when it carries them ([`DirectProducer::carrying`]).
    stream: Option<StreamRecords>,
    canvases: Vec<String>,
    next_version: Vec<u64>,
    /// (canvas index, version, enqueue time) of each event sent while `record` is on.
    pub log: Vec<(usize, u64, Instant)>,
    /// Whether [`DirectProducer::send`] appends to `log`.
    pub record: bool,
    /// Events enqueued.
    pub sent: u64,
    /// Bytes of the last record value.
    pub value_bytes: usize,
    /// The records' timestamp (ms since the epoch) when set; now otherwise.
    pub timestamp_ms: Option<i64>,
}

impl DirectProducer {
    /// A producer for `canvases` (`side` × `side` pixels) of `topic`; with `record`, the enqueue time of every event is kept
    /// (see [`DirectProducer::log`]).
    ///
    /// # Errors
    /// When the client cannot be created.
    pub fn new(bootstrap: &str, topic: &str, partitions: u32, side: u32, canvases: Vec<String>, record: bool) -> anyhow::Result<Self> {
        let mut cfg = KafkaSettings::new(bootstrap).producer("bench-producer", Duration::from_secs(30));
        cfg.set("queue.buffering.max.messages", "2000000").set("queue.buffering.max.kbytes", "1048576");
        let producer: FutureProducer = cfg.create()?;
        let n = canvases.len();
        Ok(Self { producer, topic: topic.into(), partitions, side, stream: None, canvases, next_version: vec![1; n], log: Vec::new(), record, sent: 0, value_bytes: 0, timestamp_ms: None })
    }

    /// The same producer writing `payload`'s records: for a `stream` payload, format-2
    /// publications of that size ([`StreamRecords`]) to channels that must be of
    /// [`super::payload::NAMESPACE`].
    pub fn carrying(mut self, payload: Payload) -> Self {
        self.stream = match payload {
            Payload::Pixels => None,
            Payload::Stream { data_bytes } => Some(StreamRecords::new(data_bytes, self.side)),
        };
        self
    }

    /// Enqueues the next event of canvas number `i` (without waiting for the broker).
    ///
    /// # Errors
    /// When librdkafka's queue is full for longer than 10 s.
    pub async fn send(&mut self, i: usize) -> anyhow::Result<()> {
        let canvas = &self.canvases[i];
        let version = self.next_version[i];
        let mut headers = OwnedHeaders::new().insert(Header { key: CHANNELS_HEADER, value: Some(canvas.as_bytes()) });
        let value = match &self.stream {
            None => event(canvas, version, self.side).to_json(),
            Some(records) => {
                for (key, value) in records.headers() {
                    headers = headers.insert(Header { key, value: Some(value) });
                }
                records.value(canvas, version, shared::event::now_ms())
            }
        };
        self.value_bytes = value.len();
        let partition = partition_for(canvas.as_bytes(), self.partitions) as i32;
        let t0 = Instant::now();
        let mut record = FutureRecord::to(&self.topic).key(canvas.as_bytes()).payload(value.as_bytes()).partition(partition).headers(headers);
        if let Some(ts) = self.timestamp_ms {
            record = record.timestamp(ts);
        }
        let started = Instant::now();
        loop {
            match self.producer.send_result(record) {
                Ok(_delivery) => break,
                Err((e, r)) => {
                    if started.elapsed() > Duration::from_secs(10) {
                        bail!("produce to {}: {e}", self.topic);
                    }
                    record = r;
                    self.producer.poll(Duration::from_millis(1));
                    tokio::task::yield_now().await;
                }
            }
        }
        if self.record {
            self.log.push((i, version, t0));
        }
        self.next_version[i] += 1;
        self.sent += 1;
        Ok(())
    }

    /// Sends `rate` events/s round-robin over the canvases for `duration` (in 1 ms slices).
    /// Returns the events sent.
    ///
    /// # Errors
    /// As [`DirectProducer::send`].
    pub async fn run_at(&mut self, rate: f64, duration: Duration) -> anyhow::Result<u64> {
        let start = Instant::now();
        let before = self.sent;
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut i = 0usize;
        while start.elapsed() < duration {
            tick.tick().await;
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            while self.sent - before < due {
                self.send(i % self.canvases.len()).await?;
                i += 1;
            }
        }
        Ok(self.sent - before)
    }

    /// Enqueues `events` events, one canvas after the other (round robin), as fast as librdkafka
    /// takes them, saying every 5 s how far it got (`what`: what the progress line calls them),
    /// then flushes.
    ///
    /// # Errors
    /// As [`DirectProducer::send`] and [`DirectProducer::flush`].
    pub async fn send_round_robin(&mut self, events: u64, what: &str) -> anyhow::Result<()> {
        let n = self.canvases.len();
        let started = Instant::now();
        let mut last = Instant::now();
        for k in 0..events {
            self.send((k as usize) % n).await?;
            if last.elapsed() > Duration::from_secs(5) {
                println!("[bench]     {what}: {k}/{events} written ({:.0} s)", started.elapsed().as_secs_f64());
                last = Instant::now();
            }
        }
        self.flush()
    }

    /// Waits until every enqueued event was acknowledged.
    ///
    /// # Errors
    /// When the broker does not acknowledge within 60 s.
    pub fn flush(&self) -> anyhow::Result<()> {
        self.producer.flush(Duration::from_secs(60)).context("flush the bench producer")
    }

    /// Versions sent so far per canvas (the head of each).
    pub fn heads(&self) -> Vec<u64> {
        self.next_version.iter().map(|v| v - 1).collect()
    }
}

/// A bare librdkafka consumer reading every partition of `topic` from the log start until it
/// reaches the high watermarks taken at the start: the replay ceiling. Returns (records, seconds),
/// timed from the consumer's creation as the node's catch-up is.
///
/// # Errors
/// When the broker does not answer.
pub fn bare_read_all(bootstrap: &str, topic: &str, partitions: u32) -> anyhow::Result<(u64, f64)> {
    // Timed like the node's catch-up (its tookMs): from creating the consumer, watermarks included.
    let start = Instant::now();
    let mut cfg = KafkaSettings::new(bootstrap).catchup_consumer(&format!("bench-bare-{:08x}", rand::random::<u32>()), "bench-bare");
    cfg.set("enable.partition.eof", "false");
    let consumer: BaseConsumer = cfg.create()?;
    let mut targets = Vec::new();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        let (_, high) = watermarks(&consumer, topic, p)?;
        targets.push(high);
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut done: Vec<bool> = targets.iter().map(|t| *t == 0).collect();
    let mut n = 0u64;
    let mut last_progress = Instant::now();
    while done.iter().any(|d| !d) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                // Touch the payload as a reader would (decode nothing: this is the ceiling).
                std::hint::black_box(m.payload().map(<[u8]>::len));
                n += 1;
                if m.offset() + 1 >= targets[m.partition() as usize] {
                    done[m.partition() as usize] = true;
                }
            }
            Some(Err(e)) => bail!("bare consumer: {e}"),
            None => {}
        }
        if last_progress.elapsed() > Duration::from_secs(5) {
            println!("[bench]   bare consumer: {n} records read ({:.0} s)", start.elapsed().as_secs_f64());
            last_progress = Instant::now();
        }
        if start.elapsed() > Duration::from_secs(600) {
            bail!("bare consumer did not reach the high watermarks in 600 s ({n} read)");
        }
    }
    Ok((n, start.elapsed().as_secs_f64()))
}

/// A bare consumer at the end of every partition of `topic`, recording the receive time of each
/// event by (canvas index, version): the baseline "produce → consume" round trip.
pub struct BareTail {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Events read so far.
    pub received: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<Vec<(usize, u64, Instant)>>>>,
}

impl BareTail {
    /// Starts tailing; returns once the consumer is assigned at the high watermarks.
    ///
    /// # Errors
    /// When the broker does not answer.
    pub fn start(bootstrap: &str, topic: &str, partitions: u32, canvases: &[String]) -> anyhow::Result<Self> {
        let cfg = KafkaSettings::new(bootstrap).reader(&format!("bench-tail-{:08x}", rand::random::<u32>()));
        let consumer: BaseConsumer = cfg.create()?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions as i32 {
            let (_, high) = watermarks(&consumer, topic, p)?;
            tpl.add_partition_offset(topic, p, Offset::Offset(high))?;
        }
        consumer.assign(&tpl)?;
        let index: std::collections::HashMap<String, usize> = canvases.iter().enumerate().map(|(i, c)| (c.clone(), i)).collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let r = received.clone();
        let thread = std::thread::Builder::new().name("bench-tail".into()).spawn(move || {
            let mut out = Vec::new();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                match consumer.poll(Duration::from_millis(50)) {
                    Some(Ok(m)) => {
                        let at = Instant::now();
                        for ev in shared::record::Publication::decode_record(shared::record::RecordHeaders::of(&m).format, m.payload()).unwrap_or_default() {
                            if let Some(i) = index.get(ev.channel.as_str()) {
                                out.push((*i, ev.version, at));
                                r.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                    Some(Err(e)) => return Err(anyhow::anyhow!("tail consumer: {e}")),
                    None => {}
                }
            }
            Ok(out)
        })?;
        Ok(Self { stop, received, thread: Some(thread) })
    }

    /// Stops and returns what was received.
    ///
    /// # Errors
    /// When the consumer failed.
    pub fn stop(mut self) -> anyhow::Result<Vec<(usize, u64, Instant)>> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().expect("joined once").join().map_err(|_| anyhow::anyhow!("tail thread panicked"))?
    }
}

/// Commits transactions back to back on `topic` for `duration` (blocking), each with one small
/// record on each of `partitions` partitions, as the publisher's shared writer does; returns how
/// many committed. Warms the broker's transaction paths.
///
/// # Errors
/// When the producer cannot be created or a transaction fails.
pub fn transactions_for(bootstrap: &str, topic: &str, partitions: u32, duration: Duration) -> anyhow::Result<u64> {
    use rdkafka::producer::{BaseRecord, ThreadedProducer};
    let id = format!("bench-warmup-{:08x}", rand::random::<u32>());
    let cfg = KafkaSettings::new(bootstrap).transactional_producer("bench-warmup-txn", &id, Duration::from_secs(10), Duration::from_secs(60));
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = cfg.create()?;
    producer.init_transactions(Duration::from_secs(30))?;
    let started = Instant::now();
    let mut committed = 0u64;
    while started.elapsed() < duration {
        producer.begin_transaction()?;
        for p in 0..partitions as i32 {
            let value = format!("warm-up {committed}");
            producer.send(BaseRecord::<str, String>::to(topic).partition(p).key("warm-up").payload(&value)).map_err(|(e, _)| e)?;
        }
        // Commit once delivered (rdkafka's commit flushes in 100 ms steps while anything is out).
        while producer.in_flight_count() > 0 && started.elapsed() < duration + Duration::from_secs(10) {
            std::thread::sleep(Duration::from_micros(200));
        }
        producer.commit_transaction(Duration::from_secs(10))?;
        committed += 1;
    }
    Ok(committed)
}

/// Writes fleet events straight to a topic in Kafka transactions, as the publisher's shared
/// writer does: each transaction carries every event that came due while the previous one was
/// committing (no HTTP, no fleet): the bare cost of the transactional protocol. One producer,
/// blocking: call [`TxnDirect::run_at`] from a blocking thread.
pub struct TxnDirect {
    producer: rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    topic: String,
    partitions: u32,
    side: u32,
    canvases: Vec<String>,
    next_version: Vec<u64>,
    /// Transactions committed.
    pub transactions: u64,
}

impl TxnDirect {
    /// A transactional producer (initialised) for `canvases` of `topic`.
    ///
    /// # Errors
    /// When the producer cannot be created or initialised.
    pub fn new(
        bootstrap: &str,
        topic: &str,
        partitions: u32,
        side: u32,
        canvases: Vec<String>,
    ) -> anyhow::Result<Self> {
        let id = format!("bench-txn-{:08x}", rand::random::<u32>());
        let producer: rdkafka::producer::ThreadedProducer<
            rdkafka::producer::DefaultProducerContext,
        > = KafkaSettings::new(bootstrap)
            .transactional_producer(
                "bench-txn",
                &id,
                Duration::from_secs(10),
                Duration::from_secs(60),
            )
            .create()?;
        producer.init_transactions(Duration::from_secs(30))?;
        let n = canvases.len();
        Ok(Self {
            producer,
            topic: topic.into(),
            partitions,
            side,
            canvases,
            next_version: vec![1; n],
            transactions: 0,
        })
    }

    /// Offers `rate` events/s round-robin over the canvases for `duration`; each event is timed
    /// from the moment it came due (as a publish is timed from its request). Returns
    /// (canvas index, version, due time) of every event sent.
    ///
    /// # Errors
    /// When a transaction fails.
    pub fn run_at(
        &mut self,
        rate: f64,
        duration: Duration,
    ) -> anyhow::Result<Vec<(usize, u64, Instant)>> {
        use rdkafka::producer::BaseRecord;
        let start = Instant::now();
        let mut log = Vec::new();
        let mut sent = 0u64;
        let mut i = 0usize;
        while start.elapsed() < duration {
            let due = ((start.elapsed().as_secs_f64() * rate) as u64).max(sent);
            if due == sent {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            self.producer.begin_transaction()?;
            while sent < due {
                let c = i % self.canvases.len();
                let version = self.next_version[c];
                let value = event(&self.canvases[c], version, self.side).to_json();
                let partition = partition_for(self.canvases[c].as_bytes(), self.partitions) as i32;
                let due_at = start + Duration::from_secs_f64(sent as f64 / rate);
                self.producer
                    .send(
                        BaseRecord::<str, String>::to(&self.topic)
                            .partition(partition)
                            .key(&self.canvases[c])
                            .payload(&value),
                    )
                    .map_err(|(e, _)| e)?;
                log.push((c, version, due_at));
                self.next_version[c] += 1;
                sent += 1;
                i += 1;
            }
            // Commit once delivered (rdkafka's commit flushes in 100 ms steps while anything is out).
            while self.producer.in_flight_count() > 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
            self.producer.commit_transaction(Duration::from_secs(10))?;
            self.transactions += 1;
        }
        Ok(log)
    }
}
