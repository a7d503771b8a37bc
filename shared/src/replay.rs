//! Reading a stretch of the log by offset: the node's catch-up and the publisher's head rebuild.
//!
//! A replay has a *plan*: per partition, the offset to start from and the *target*, the readable
//! end of the partition when the replay was planned. Every reader of the fleet is `read_committed`
//! ([`crate::kafka::READ_COMMITTED`]), so that end is the partition's *last stable offset* (LSO):
//! the high watermark when no transaction is open, else the first offset of the oldest open one.
//! The replay is complete when the consumer's *position* (the next offset it will read, as
//! librdkafka's `position()` reports it) has reached the target on every partition; a partition
//! with nothing to read (`start >= target`, which includes an empty partition where the low and
//! high watermarks are equal) is complete at once.
//!
//! The position, not "last record delivered + 1": under transactions a partition can end in a
//! commit or abort *marker* (a control record the consumer reads but never delivers), or in the
//! records of an aborted transaction, so there may be no record at `target - 1` at all. librdkafka
//! moves the position past markers and aborted records as `poll` reads them.
//!
//! Records past a target are applied too (they are in order, and skipping them would open a gap);
//! the replay simply stops once every target is reached.

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Per-partition offsets (partition number → offset).
pub type Offsets = BTreeMap<i32, i64>;

/// Where a replay starts and where it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayPlan {
    /// Next offset to read per partition.
    pub starts: Offsets,
    /// High watermark per partition when the plan was made.
    pub targets: Offsets,
}

/// How far a replay got.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    /// Copied from the plan.
    pub targets: Offsets,
    /// Next offset to read per partition (starts at the plan's start).
    pub positions: Offsets,
    /// Offset of the last record consumed per partition, in this replay.
    pub last_consumed: Offsets,
    /// Records consumed in this replay.
    pub count: u64,
}

impl Progress {
    /// Progress at the start of `plan`.
    pub fn new(plan: &ReplayPlan) -> Self {
        Self {
            targets: plan.targets.clone(),
            positions: plan.starts.clone(),
            last_consumed: Offsets::new(),
            count: 0,
        }
    }

    /// Notes that the record at `offset` of `partition` was consumed.
    pub fn record(&mut self, partition: i32, offset: i64) {
        self.last_consumed.insert(partition, offset);
        self.advance(partition, offset + 1);
        self.count += 1;
    }

    /// Raises the position of `partition` to `position` (the consumer's position, which moves past
    /// transaction markers and aborted records without delivering them). Returns whether it moved.
    pub fn advance(&mut self, partition: i32, position: i64) -> bool {
        let pos = self.positions.entry(partition).or_insert(position);
        if position > *pos {
            *pos = position;
            return true;
        }
        false
    }

    /// Whether `partition` has reached its target (a partition without a target is complete).
    pub fn partition_complete(&self, partition: i32) -> bool {
        match self.targets.get(&partition) {
            None => true,
            Some(target) => self.positions.get(&partition).is_some_and(|pos| pos >= target),
        }
    }

    /// The completion rule: every partition's position has reached its target.
    pub fn is_complete(&self) -> bool {
        self.targets.keys().all(|p| self.partition_complete(*p))
    }

    /// Records still to read before every target is reached.
    pub fn remaining(&self) -> u64 {
        self.targets
            .iter()
            .map(|(p, t)| (t - self.positions.get(p).copied().unwrap_or(0)).max(0) as u64)
            .sum()
    }
}

/// Why a replay could not be planned or finished.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("kafka client: {0}")]
    Client(rdkafka::error::KafkaError),
    #[error("topic {topic}: metadata: {source}")]
    Metadata { topic: String, source: rdkafka::error::KafkaError },
    #[error("topic {topic} does not exist (or has no partitions)")]
    NoTopic { topic: String },
    #[error("topic {topic} partition {partition}: watermarks: {source}")]
    Watermarks { topic: String, partition: i32, source: rdkafka::error::KafkaError },
    #[error("topic {topic}: watermarks of every partition: {source}")]
    AllWatermarks { topic: String, source: rdkafka::error::KafkaError },
    #[error("assign: {0}")]
    Assign(rdkafka::error::KafkaError),
    #[error("no progress for {idle:?} with {remaining} records still to read")]
    Stalled { idle: Duration, remaining: u64 },
    #[error("cancelled")]
    Cancelled,
    /// A partition's position fell below its log start while it was read: retention (or
    /// DeleteRecords) deleted records still to be read. Nothing was skipped; plan again (from
    /// the snapshots, whose checkpoints cover what was deleted).
    #[error("records still to read were deleted while reading ({0}); start again from the snapshots")]
    LogStartMoved(String),
    /// The snapshots cannot be used (a canvas of another size): replaying from their checkpoints
    /// would skip that canvas's records, so the reader refuses to go on.
    #[error("the snapshots cannot be used: {0}")]
    Refused(String),
}

/// Number of partitions of `topic`.
///
/// # Errors
/// [`ReplayError::Metadata`] when the broker does not answer within `timeout`,
/// [`ReplayError::NoTopic`] when the topic is unknown.
pub fn partition_count<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> Result<u32, ReplayError> {
    let md = consumer.fetch_metadata(Some(topic), timeout).map_err(|source| {
        crate::consumer::serve_queued_events(consumer); // the cause behind the failure, for /health
        ReplayError::Metadata { topic: topic.into(), source }
    })?;
    let n = md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len() as u32)
        .unwrap_or(0);
    if n == 0 {
        return Err(ReplayError::NoTopic { topic: topic.into() });
    }
    Ok(n)
}

/// The low and high watermarks of partitions `0..n` of `topic` (the high one is the last stable
/// offset on a `read_committed` consumer), in two ListOffsets requests for all partitions (the
/// earliest and the latest offsets, as `offsets_for_times` with librdkafka's special times),
/// instead of two per partition as `fetch_watermarks` makes: on a broker busy serving others, each
/// request costs milliseconds.
///
/// # Errors
/// [`ReplayError::AllWatermarks`] when a request fails, [`ReplayError::Watermarks`] when a
/// partition's answer carries an error or is missing.
pub fn all_watermarks<C: ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str, n: u32, timeout: Duration) -> Result<Vec<(i64, i64)>, ReplayError> {
    let ask = |at: Offset| -> Result<Vec<i64>, ReplayError> {
        let failed = |partition: i32, source: rdkafka::error::KafkaError| {
            crate::consumer::serve_queued_events(consumer);
            ReplayError::Watermarks { topic: topic.into(), partition, source }
        };
        let mut tpl = TopicPartitionList::new();
        for p in 0..n as i32 {
            tpl.add_partition_offset(topic, p, at).map_err(|e| failed(p, e))?;
        }
        let found = consumer.offsets_for_times(tpl, timeout).map_err(|source| {
            crate::consumer::serve_queued_events(consumer);
            ReplayError::AllWatermarks { topic: topic.into(), source }
        })?;
        let mut out = vec![None; n as usize];
        for e in found.elements_for_topic(topic) {
            if let Err(err) = e.error() {
                return Err(failed(e.partition(), err));
            }
            if let (Offset::Offset(o), Some(slot)) = (e.offset(), out.get_mut(e.partition() as usize)) {
                *slot = Some(o);
            }
        }
        out.into_iter()
            .enumerate()
            .map(|(p, o)| o.ok_or_else(|| failed(p as i32, rdkafka::error::KafkaError::OffsetFetch(rdkafka::types::RDKafkaErrorCode::UnknownPartition))))
            .collect()
    };
    let lows = ask(Offset::Beginning)?;
    let highs = ask(Offset::End)?;
    Ok(lows.into_iter().zip(highs).collect())
}

/// Plans a replay of every partition of `topic`: the target is each partition's readable end now
/// (`fetch_watermarks`' high value: the LSO on a `read_committed` consumer, the high watermark on
/// another);
/// the start is `from[p]` when the reader's state already reaches offset `from[p]`, else the log
/// start (low watermark). Partitions whose needed records were deleted by retention (a start
/// below the low watermark, or a log start past offset 0 for a reader with no state) are read from
/// the low watermark and reported in [`Gaps::truncated`]: the state built from them may miss
/// pixels. Partitions whose start lies past their readable end (the topic deleted and created
/// again, or the log truncated by an unclean leader election) are read from the low watermark too
/// and reported in [`Gaps::moved_back`]: a position past the end is never trusted.
///
/// # Errors
/// [`ReplayError`] when metadata or watermarks cannot be read within `timeout`.
pub fn plan<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    from: &Offsets,
    timeout: Duration,
) -> Result<(ReplayPlan, Gaps), ReplayError> {
    plan_wanting(consumer, topic, from, &Offsets::new(), timeout)
}

/// As [`plan`], where `needed[p]` is the offset from which the reader needs every record (absent:
/// the log start, 0) and `wanted[p]` an earlier offset it would also like to read when the log
/// still has it (the publisher's idempotency keys): the start is `min(needed, wanted)`, raised to
/// the low watermark; only a needed offset below the low watermark is reported as truncated, and
/// one past the readable end as moved back ([`start_of`]).
///
/// # Errors
/// [`ReplayError`] when metadata or watermarks cannot be read within `timeout`.
pub fn plan_wanting<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    needed: &Offsets,
    wanted: &Offsets,
    timeout: Duration,
) -> Result<(ReplayPlan, Gaps), ReplayError> {
    let n = partition_count(consumer, topic, timeout)?;
    let mut plan = ReplayPlan { starts: Offsets::new(), targets: Offsets::new() };
    let mut gaps = Gaps::default();
    let watermarks = |p: i32| {
        consumer.fetch_watermarks(topic, p, timeout).map_err(|source| {
            crate::consumer::serve_queued_events(consumer);
            ReplayError::Watermarks { topic: topic.into(), partition: p, source }
        })
    };
    let all = all_watermarks(consumer, topic, n, timeout)?;
    for p in 0..n as i32 {
        let (need, want) = (needed.get(&p).copied(), wanted.get(&p).copied());
        let (mut low, mut high) = all[p as usize];
        if matches!(start_of(need, want, low, high).1, Gap::MovedBack) {
            // A transaction's commit markers reach its partitions one by one: a checkpoint read
            // on the snapshot topic can be ahead of this partition's last stable offset for a
            // moment. Look again before calling it a log that moved backwards.
            std::thread::sleep(Duration::from_millis(500));
            (low, high) = watermarks(p)?;
        }
        let (start, gap) = start_of(need, want, low, high);
        match gap {
            Gap::None => {}
            Gap::Deleted => gaps.truncated.push(p),
            Gap::MovedBack => {
                let position = need.unwrap_or(0);
                tracing::warn!(topic, partition = p, position, end = high,
                    "a position past the partition's readable end: the log moved backwards (the topic recreated, or truncated by an unclean leader election); reading it from its start");
                gaps.moved_back.push(MovedBack { partition: p, position, end: high });
            }
        }
        plan.starts.insert(p, start);
        plan.targets.insert(p, high);
    }
    Ok((plan, gaps))
}

/// What a plan found missing from the log, per partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gaps {
    /// Partitions whose needed records were deleted (the log starts after the needed offset).
    pub truncated: Vec<i32>,
    /// Partitions whose needed offset lies past their readable end.
    pub moved_back: Vec<MovedBack>,
}

/// A partition whose log moved backwards: the reader needed it from `position`, its readable end
/// is `end` (< `position`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovedBack {
    pub partition: i32,
    pub position: i64,
    pub end: i64,
}

/// What is missing at a partition's start ([`start_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// Every needed record is readable.
    None,
    /// Needed records were deleted (the log start is past the needed offset).
    Deleted,
    /// The needed offset is past the readable end: not this log's history.
    MovedBack,
}

/// Where a partition's read starts, and what is missing: `needed` absent means from offset 0; the
/// log spans `low..high`. A needed offset past `high` belongs to another history (the topic
/// recreated, or truncated): the read starts at the log start, never past the end. Pure.
pub fn start_of(needed: Option<i64>, wanted: Option<i64>, low: i64, high: i64) -> (i64, Gap) {
    let need = needed.unwrap_or(0);
    if need > high {
        return (low, Gap::MovedBack);
    }
    let from = wanted.map_or(need, |w| w.min(need));
    (from.max(low), if need < low { Gap::Deleted } else { Gap::None })
}

/// How often a replay looks at its timers while records keep coming, on the coarse clock.
const CHECK_EVERY_MS: u64 = 10;

/// The kernel's coarse monotonic clock in ms (its resolution is the scheduler tick, a few ms): a
/// fraction of what a precise reading costs, so the replay reads it for every record.
fn coarse_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_COARSE).map_or(0, |t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
}

/// Runs `plan` on `consumer` (manual assignment, blocking: call it from a blocking thread).
///
/// `on_record(message)` is called for every record in log order per partition (partition, offset,
/// key, value and headers through [`rdkafka::Message`]);
/// `on_progress` about once a second and at the end; `cancelled` is checked between polls.
///
/// # Errors
/// [`ReplayError::Stalled`] when no record arrives for `stall_timeout` while records remain,
/// [`ReplayError::Cancelled`], [`ReplayError::Assign`], or [`ReplayError::LogStartMoved`] when a
/// position falls below its partition's log start (never skipped silently).
pub fn run<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    plan: &ReplayPlan,
    stall_timeout: Duration,
    cancelled: &dyn Fn() -> bool,
    mut on_record: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
    mut on_progress: impl FnMut(&Progress),
) -> Result<Progress, ReplayError> {
    let mut progress = Progress::new(plan);
    if progress.is_complete() {
        on_progress(&progress);
        return Ok(progress);
    }
    let mut tpl = TopicPartitionList::new();
    for (p, start) in &plan.starts {
        if !progress.partition_complete(*p) {
            tpl.add_partition_offset(topic, *p, Offset::Offset(*start)).map_err(ReplayError::Assign)?;
        }
    }
    consumer.assign(&tpl).map_err(ReplayError::Assign)?;
    let result = (|| {
        let mut last_progress_report = Instant::now();
        let mut last_record = Instant::now();
        let mut last_position_check = Instant::now();
        // While records keep coming the timers below are looked at every [`CHECK_EVERY_MS`] of
        // the coarse clock, not for each record (reading the precise clock four times a record
        // took 7 % of a catch-up's thread); an empty poll or an error looks at them at once.
        let mut recorded_since_check = false;
        let mut last_check_ms = coarse_ms();
        loop {
            if cancelled() {
                return Err(ReplayError::Cancelled);
            }
            let mut polled = consumer.poll(Duration::ZERO);
            if polled.is_none() {
                // Nothing queued: the last records may be delivered already, with only the
                // transaction markers after them left, which move the position without a
                // delivery. Look before waiting on the next poll, so a read that has everything
                // ends now instead of a poll timeout later.
                if sync_positions(consumer, topic, &mut progress) {
                    last_record = Instant::now();
                }
                if progress.is_complete() {
                    return Ok(());
                }
                polled = consumer.poll(Duration::from_millis(100));
            }
            let idle = polled.is_none();
            let record = matches!(polled, Some(Ok(_)));
            match polled {
                Some(Ok(msg)) => {
                    let (p, off) = (msg.partition(), msg.offset());
                    // A record below the position was already read (a fetch retried after a
                    // broker hiccup): replaying it again would be harmless but is skipped.
                    if progress.positions.get(&p).is_some_and(|pos| off < *pos) {
                        continue;
                    }
                    on_record(&msg);
                    progress.record(p, off);
                    recorded_since_check = true;
                    if progress.partition_complete(p) && progress.is_complete() {
                        return Ok(());
                    }
                }
                Some(Err(e)) if crate::consumer::out_of_range(&e) => return Err(ReplayError::LogStartMoved(e.to_string())),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "replay: consumer reported an error (librdkafka retries)");
                }
                None => {}
            }
            if record {
                let ms = coarse_ms();
                if ms.saturating_sub(last_check_ms) < CHECK_EVERY_MS {
                    continue;
                }
                last_check_ms = ms;
            }
            let now = Instant::now();
            if recorded_since_check {
                last_record = now;
                recorded_since_check = false;
            }
            // Markers and aborted records move the position without a delivery: read it when the
            // poll came back empty, and at least every 100 ms while records keep coming.
            if idle || now - last_position_check >= Duration::from_millis(100) {
                last_position_check = now;
                if sync_positions(consumer, topic, &mut progress) {
                    last_record = now;
                }
                if progress.is_complete() {
                    return Ok(());
                }
            }
            if now - last_progress_report >= Duration::from_secs(1) {
                on_progress(&progress);
                last_progress_report = now;
            }
            if now - last_record >= stall_timeout {
                return Err(ReplayError::Stalled { idle: stall_timeout, remaining: progress.remaining() });
            }
        }
    })();
    let _ = consumer.unassign();
    result?;
    on_progress(&progress);
    Ok(progress)
}

/// Raises `progress`' positions to the consumer's positions (librdkafka's `position()`: the offset
/// after the last record *or marker* the application's polls went through). Returns whether any
/// position moved.
fn sync_positions<C: ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str, progress: &mut Progress) -> bool {
    let Ok(tpl) = consumer.position() else { return false };
    let mut moved = false;
    for e in tpl.elements_for_topic(topic) {
        if let Offset::Offset(pos) = e.offset() {
            moved |= progress.advance(e.partition(), pos);
        }
    }
    moved
}

/// Formats offsets the way the catch-up log line shows them: `{0=2, 1=5}`.
pub fn fmt_offsets(offsets: &Offsets) -> String {
    let inner: Vec<String> = offsets.iter().map(|(p, o)| format!("{p}={o}")).collect();
    format!("{{{}}}", inner.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-request watermarks equal librdkafka's per-partition ones, on partitions holding
    /// different numbers of records (and an empty one).
    #[test]
    fn all_watermarks_equal_the_per_partition_ones() {
        use rdkafka::consumer::DefaultConsumerContext;
        use rdkafka::mocking::MockCluster;
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        use rdkafka::ClientConfig;

        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("t", 3, 1).expect("topic");
        let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", cluster.bootstrap_servers()).create().expect("producer");
        for (partition, records) in [(0, 5), (2, 2)] {
            for i in 0..records {
                producer.send(BaseRecord::<(), _>::to("t").payload(&format!("{i}")).partition(partition)).expect("queued");
            }
        }
        producer.flush(Duration::from_secs(10)).expect("written");
        let consumer: BaseConsumer<DefaultConsumerContext> =
            ClientConfig::new().set("bootstrap.servers", cluster.bootstrap_servers()).set("group.id", "w").create().expect("consumer");
        let t = Duration::from_secs(10);
        let each: Vec<(i64, i64)> = (0..3).map(|p| consumer.fetch_watermarks("t", p, t).expect("watermarks")).collect();
        assert_eq!(each, vec![(0, 5), (0, 0), (0, 2)]);
        assert_eq!(all_watermarks(&consumer, "t", 3, t).expect("all watermarks"), each);
    }

    fn plan(starts: &[(i32, i64)], targets: &[(i32, i64)]) -> ReplayPlan {
        ReplayPlan { starts: starts.iter().copied().collect(), targets: targets.iter().copied().collect() }
    }

    /// The completion rule as a table: (starts, targets, records consumed, complete?).
    #[test]
    fn completion_rule_table() {
        type Case = (&'static str, &'static [(i32, i64)], &'static [(i32, i64)], &'static [(i32, i64)], bool);
        let cases: &[Case] = &[
            ("empty partition (low == high) is complete at once", &[(0, 0)], &[(0, 0)], &[], true),
            ("truncated empty partition (low == high == 7)", &[(0, 7)], &[(0, 7)], &[], true),
            ("state already at the target", &[(0, 5)], &[(0, 5)], &[], true),
            ("one record to read, not read yet", &[(0, 0)], &[(0, 1)], &[], false),
            ("last offset == target - 1 means position == target", &[(0, 0)], &[(0, 3)], &[(0, 0), (0, 1), (0, 2)], true),
            ("last offset == target - 2 is one short", &[(0, 0)], &[(0, 3)], &[(0, 0), (0, 1)], false),
            ("one partition done, one not", &[(0, 0), (1, 0)], &[(0, 1), (1, 1)], &[(0, 0)], false),
            ("mixed empty and non-empty, all read", &[(0, 0), (1, 4), (2, 9)], &[(0, 1), (1, 4), (2, 10)], &[(0, 0), (2, 9)], true),
            ("records past the target still complete", &[(0, 0)], &[(0, 1)], &[(0, 0), (0, 1)], true),
            ("a partition that ends in a commit marker: the last record is target - 2", &[(0, 0)], &[(0, 3)], &[(0, 0), (0, 1)], false),
        ];
        for (name, starts, targets, consumed, want) in cases {
            let mut pr = Progress::new(&plan(starts, targets));
            for (p, o) in *consumed {
                pr.record(*p, *o);
            }
            assert_eq!(pr.is_complete(), *want, "{name}");
        }
    }

    #[test]
    fn the_consumer_position_completes_a_partition_that_ends_in_a_marker() {
        // Records at 0 and 1, the commit marker at 2: the target (LSO) is 3 and no record has
        // offset 2. The consumer's position after the marker is 3.
        let mut pr = Progress::new(&plan(&[(0, 0)], &[(0, 3)]));
        pr.record(0, 0);
        pr.record(0, 1);
        assert!(!pr.is_complete());
        assert!(pr.advance(0, 3));
        assert!(pr.is_complete());
        assert_eq!(pr.count, 2, "a marker is not a record");
        assert!(!pr.advance(0, 2), "a position never moves back");
        assert_eq!(pr.positions[&0], 3);
        // Only aborted records and their marker between start and target: no record at all.
        let mut aborted = Progress::new(&plan(&[(1, 10)], &[(1, 14)]));
        assert!(aborted.advance(1, 14));
        assert!(aborted.is_complete() && aborted.last_consumed.is_empty());
    }

    #[test]
    fn resume_starts_exactly_at_the_next_offset() {
        // A state whose last applied record was offset 4 has position 5: the replay's first record
        // must be offset 5, and the target is the high watermark.
        let pr = Progress::new(&plan(&[(0, 5)], &[(0, 8)]));
        assert_eq!(pr.remaining(), 3);
        let mut pr2 = pr.clone();
        pr2.record(0, 5);
        assert_eq!(pr2.positions[&0], 6);
        assert_eq!(pr2.last_consumed[&0], 5);
        assert_eq!(pr2.remaining(), 2);
    }

    #[test]
    fn offsets_format_like_the_catchup_line() {
        assert_eq!(fmt_offsets(&Offsets::from([(0, 2), (3, 10)])), "{0=2, 3=10}");
        assert_eq!(fmt_offsets(&Offsets::new()), "{}");
    }

    #[test]
    fn start_of_table() {
        // (needed, wanted, low watermark, readable end) → (start, what is missing)
        let table = [
            (None, None, 0, 0, (0, Gap::None)),
            (None, None, 5, 9, (5, Gap::Deleted)),
            (Some(10), None, 0, 20, (10, Gap::None)),
            (Some(10), Some(4), 0, 20, (4, Gap::None)),
            // Keys wanted from 4, but retention deleted up to 7: start there, nothing needed lost.
            (Some(10), Some(4), 7, 20, (7, Gap::None)),
            (Some(10), Some(12), 0, 20, (10, Gap::None)),
            (Some(10), None, 12, 20, (12, Gap::Deleted)),
            // At the end exactly: nothing to read, nothing missing.
            (Some(20), None, 0, 20, (20, Gap::None)),
            // Past the end: the topic was recreated (end 0) or truncated (end 15): from the start.
            (Some(5000), None, 0, 0, (0, Gap::MovedBack)),
            (Some(5000), Some(4000), 0, 0, (0, Gap::MovedBack)),
            (Some(21), None, 3, 15, (3, Gap::MovedBack)),
        ];
        for (needed, wanted, low, high, want) in table {
            assert_eq!(start_of(needed, wanted, low, high), want, "needed {needed:?}, wanted {wanted:?}, log {low}..{high}");
        }
    }
}
