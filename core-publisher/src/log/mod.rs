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
//!   last commit marker, see [`shared::replay`]). [`EventLog::open_transactions`] names the
//!   partitions where an open transaction holds that readable end below the log's end.
//!
//! [`EventLog`] is the seam the version logic is written against, so its rules are unit-tested
//! with [`fake::FakeLog`]; [`kafka::KafkaLog`] is the real one (its transactions are in
//! [`crate::txn`]).

pub mod kafka;
#[cfg(test)]
pub mod fake;

use shared::replay::Offsets;
use shared::snapshot::Loaded;
use shared::record::{ChannelOp, Publication};
use std::future::Future;
use std::time::Duration;

/// One record of a transaction: 1..=[`shared::event::MAX_EVENTS_PER_RECORD`] events of one channel
/// with consecutive versions, on the channel's partition, and the idempotency key of each (record
/// headers, one per event); or, with `op`, a channel's reset or delete ([`ChannelOp`]; no events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub partition: i32,
    pub events: Vec<Publication>,
    pub keys: Vec<Option<String>>,
    pub op: Option<ChannelOp>,
}

impl Record {
    /// A record of `events` (with their `keys`) on `partition`.
    pub fn of_events(partition: i32, events: Vec<Publication>, keys: Vec<Option<String>>) -> Self {
        Self { partition, events, keys, op: None }
    }

    /// The op record of `op` on `partition`.
    pub fn of_op(partition: i32, op: ChannelOp) -> Self {
        Self { partition, events: Vec::new(), keys: Vec::new(), op: Some(op) }
    }
}

/// One record of the snapshot topic written in a transaction ([`shared::snapshot`]): a channel's
/// snapshot, a partition's checkpoint or a key record, on the same partition number as the
/// channel's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotWrite {
    pub partition: i32,
    pub key: String,
    /// The value; empty for a tombstone (no value: no record of the topic is empty).
    pub value: Vec<u8>,
}

/// The input offsets a transaction commits with its records (Kafka Streams' exactly-once:
/// `send_offsets_to_transaction`, KIP-447): they become the consumer group's committed offsets
/// exactly when the transaction commits ([`crate::input`]).
#[derive(Clone, Default)]
pub struct InputOffsets {
    /// (topic, partition, the offset of the next record to read) of each input partition whose
    /// records the transaction carries.
    pub offsets: Vec<(String, i32, i64)>,
    /// The consumer group's metadata of the assignment the records were read under: the group
    /// coordinator refuses the offsets of a generation that is not the group's any more (a
    /// rebalance since), which aborts the transaction. None in unit tests.
    pub group: Option<std::sync::Arc<rdkafka::consumer::ConsumerGroupMetadata>>,
    /// Which of the input queue's assignments that was (the fake log's stand-in for the
    /// generation).
    pub assignment: u64,
}

impl std::fmt::Debug for InputOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputOffsets").field("offsets", &self.offsets).field("assignment", &self.assignment).finish_non_exhaustive()
    }
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
    pub event: Publication,
    /// The `Idempotency-Key` the publish carried, if any (record header [`IDEMPOTENCY_HEADER`]).
    pub idempotency_key: Option<String>,
}

/// An op record read back ([`ChannelOp`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedOp {
    pub partition: i32,
    pub offset: i64,
    pub op: ChannelOp,
}

/// What a read of the events topic gives, in log order per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logged {
    Event(LoggedEvent),
    Op(LoggedOp),
}

impl Logged {
    /// The offset of the record it came from.
    pub fn offset(&self) -> i64 {
        match self {
            Logged::Event(e) => e.offset,
            Logged::Op(o) => o.offset,
        }
    }
}

/// Where a rebuild reads the events topic from, per partition: `needed` (the checkpoint: every
/// record at or after it may be needed; absent = the log start) and `wanted` (earlier, for
/// idempotency keys only: records there are not needed if retention deleted them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tail {
    pub needed: Offsets,
    pub wanted: Offsets,
    /// A standby's read on from where the last one ended ([`crate::follow`]): logged at debug
    /// level (it runs several times a second).
    pub following: bool,
}

/// How a tail read ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TailEnd {
    /// The position each partition's read ended at.
    pub positions: Offsets,
    /// Partitions whose needed records had been deleted (the log starts after the checkpoint).
    pub truncated: Vec<i32>,
    /// Where each partition's read started (for a truncated one: its log start).
    pub starts: Offsets,
    /// Records read.
    pub records: u64,
}

/// A partition of the events topic with a transaction open: its last stable offset (`stable`,
/// the first offset of the oldest open transaction, where `read_committed` readers stop) is below
/// its high watermark (`high`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTxn {
    pub topic: String,
    pub partition: i32,
    pub stable: i64,
    pub high: i64,
}

/// What the version logic needs from the log.
pub trait EventLog: Send + Sync + 'static {
    /// Initialises the transactional producers of every writer of a topic of `partitions`
    /// partitions (`init_transactions`), fencing older producers of the same ids and finishing
    /// their open transactions. Call it before reading the log at start-up, and only then.
    fn prepare(&self, partitions: u32) -> impl Future<Output = Result<(), PrepareError>> + Send;

    /// Writes `records` (events topic) and `snapshots` (snapshot topic) in one transaction of
    /// `writer`, with `input`'s offsets when given, and commits it; the offsets of a commit are
    /// the records'. With `stall_after`, a transaction whose records are not all acknowledged by
    /// then is aborted ([`TxnOutcome::NotCommitted`] naming the partitions still waiting).
    fn transact(
        &self,
        writer: Writer,
        records: Vec<Record>,
        snapshots: Vec<SnapshotWrite>,
        input: Option<InputOffsets>,
        stall_after: Option<Duration>,
    ) -> impl Future<Output = TxnOutcome> + Send;

    /// Resolves once `writer` has a producer free for a transaction (not still aborting a stalled
    /// one). A committer waits for it before it takes units, so units wait in their queues, where a
    /// caller's deadline can still withdraw them as certainly not written.
    fn available(&self, writer: Writer) -> impl Future<Output = ()> + Send;

    /// One more attempt to learn how `writer`'s in-doubt transaction ended; `Err` while it is
    /// still not known.
    fn resolve(&self, writer: Writer) -> impl Future<Output = Result<Resolution, String>> + Send;

    /// The partitions of the events topic whose last stable offset is below their high watermark
    /// (a transaction is open there), in partition order; empty when none is. The high watermark
    /// is read before the last stable offset, so a transaction that ends meanwhile is not named.
    fn open_transactions(&self) -> impl Future<Output = Result<Vec<OpenTxn>, ReadError>> + Send;

    /// The snapshot topic's committed records (snapshots, checkpoints, key records) from offset
    /// `from[p]` of each partition (absent: its start) to its end (empty when the topic does not
    /// exist), and where that read ended: a standby publisher reads on from there
    /// ([`crate::follow`]).
    fn read_snapshots_from(&self, from: Offsets) -> impl Future<Output = Result<(Loaded, Offsets), ReadError>> + Send;

    /// Per partition, the first offset whose record timestamp is at or after `ms` (Kafka's
    /// offsets-for-times; the partition's end when there is none).
    fn offsets_for_time(&self, ms: i64) -> impl Future<Output = Result<Offsets, ReadError>> + Send;

    /// Streams the committed events and ops of every partition from `plan`'s start ([`Tail`]) to
    /// its end into `sink`, in log order per partition; returns the sink and where each
    /// partition's read ended.
    fn read_tail<F: FnMut(Logged) + Send + 'static>(
        &self,
        plan: Tail,
        sink: F,
    ) -> impl Future<Output = Result<(F, TailEnd), ReadError>> + Send;

    /// The events topic's Kafka topic ID (KIP-516): the topic half of every channel's epoch
    /// ([`shared::epoch`]); [`shared::epoch::ZERO_TOPIC_ID`] from a broker without topic IDs.
    fn topic_id(&self) -> impl Future<Output = Result<String, ReadError>> + Send;

    /// Drops every producer after one failed for good, before the publisher starts over with
    /// [`EventLog::prepare`] (as a restarted process would).
    fn reset(&self);
}
