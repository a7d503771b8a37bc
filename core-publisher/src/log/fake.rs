//! An in-memory [`EventLog`] for unit tests, whose transactions end on a schedule.

use super::*;
use shared::replay;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
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
pub type FakeRecord = Vec<(Publication, Option<String>)>;

/// A committed snapshot-topic record: key, value.
type SnapshotEntry = (String, Vec<u8>);

/// An in-doubt transaction: its records, its snapshots, its input offsets, and whether it commits.
type InDoubtTxn = (Vec<Record>, Vec<SnapshotWrite>, Option<InputOffsets>, bool);

/// A committed transaction as the fake log keeps it: its writer, its events, and the input
/// offsets it committed.
#[derive(Debug, Clone)]
pub struct FakeTxn {
    pub writer: Option<Writer>,
    pub events: Vec<Publication>,
    pub input: Vec<(String, i32, i64)>,
}

#[derive(Clone, Debug)]
enum Entry {
    Record(FakeRecord),
    /// An op record.
    Op(shared::record::ChannelOp),
    Aborted,
    Marker,
    /// A record of another producer's transaction, still open.
    Open(FakeRecord),
}

/// The last stable offset of a partition's `entries`: the first record of an open transaction,
/// else the end.
fn stable_of(entries: &[Entry]) -> i64 {
    entries.iter().position(|e| matches!(e, Entry::Open(_))).unwrap_or(entries.len()) as i64
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
    /// Reads of the snapshot topic so far, by any process.
    snapshot_reads: AtomicU64,
    /// The input consumer group's committed offsets: (topic, partition) → next offset.
    input_offsets: Mutex<BTreeMap<(String, i32), i64>>,
    /// Every committed transaction, in commit order.
    transactions: Mutex<Vec<FakeTxn>>,
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
    /// A gate this process's next `prepare` waits at ([`FakeLog::hold_prepare`]).
    prepare_gate: Mutex<Option<Arc<tokio::sync::Notify>>>,
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
                snapshot_reads: AtomicU64::new(0),
                input_offsets: Mutex::new(BTreeMap::new()),
                transactions: Mutex::new(Vec::new()),
            }),
            mine: Mutex::new(HashMap::new()),
            prepare_gate: Mutex::new(None),
        }
    }

    /// A second publisher process on the same log (its own producers, not prepared yet).
    pub fn another_publisher(&self) -> Self {
        Self { shared: self.shared.clone(), mine: Mutex::new(HashMap::new()), prepare_gate: Mutex::new(None) }
    }

    /// Makes this process's next `prepare` wait, before it fences anyone, until the returned gate
    /// is opened (`notify_one`), as producers still being initialised would.
    pub fn hold_prepare(&self) -> Arc<tokio::sync::Notify> {
        self.prepare_gate.lock().unwrap().get_or_insert_with(Default::default).clone()
    }

    /// Every checkpoint committed to partition `partition` of the snapshot topic, in order.
    pub fn checkpoints(&self, partition: i32) -> Vec<i64> {
        self.snapshot_entries(partition)
            .into_iter()
            .filter_map(|e| if let shared::snapshot::Entry::Checkpoint(c) = e { Some(c.offset) } else { None })
            .collect()
    }

    /// Reads of the snapshot topic so far, by any process on this log.
    pub fn snapshot_reads(&self) -> u64 {
        self.shared.snapshot_reads.load(Ordering::SeqCst)
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

    /// Committed versions of `channel`, in log order.
    pub fn events_of(&self, channel: &str) -> Vec<u64> {
        self.committed().into_iter().flatten().filter(|e| e.0.channel.as_str() == channel).map(|e| e.0.version).collect()
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

    /// The events topic deleted and created again, the snapshot topic kept: every partition's
    /// log starts over at offset 0.
    pub fn recreate_events_topic(&self) {
        self.shared.entries.lock().unwrap().clear();
        self.shared.low.lock().unwrap().clear();
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

    /// The committed op records of `partition` (resets and deletes), with their offsets, in order.
    pub fn ops_of(&self, partition: i32) -> Vec<(i64, shared::record::ChannelOp)> {
        let entries = self.shared.entries.lock().unwrap();
        entries
            .get(&partition)
            .map(|v| v.iter().enumerate().filter_map(|(o, e)| if let Entry::Op(op) = e { Some((o as i64, op.clone())) } else { None }).collect())
            .unwrap_or_default()
    }

    /// The keys of `partition`'s snapshot-topic records, in order, `None` value for a tombstone.
    pub fn snapshot_keys(&self, partition: i32) -> Vec<(String, bool)> {
        self.shared.snapshots.lock().unwrap().get(&partition).map(|v| v.iter().map(|(k, v)| (k.clone(), v.is_empty())).collect()).unwrap_or_default()
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

    /// Another producer (not a publisher) begins a transaction on `partition` and writes
    /// `record` in it, leaving it open: `read_committed` readers stop before it (the partition's
    /// last stable offset) until [`FakeLog::end_foreign`].
    pub fn open_foreign(&self, partition: i32, record: FakeRecord) {
        self.shared.entries.lock().unwrap().entry(partition).or_default().push(Entry::Open(record));
    }

    /// Ends the other producer's open transaction on `partition`: committed or aborted, with its
    /// marker.
    pub fn end_foreign(&self, partition: i32, commit: bool) {
        let mut entries = self.shared.entries.lock().unwrap();
        let part = entries.entry(partition).or_default();
        for e in part.iter_mut() {
            if let Entry::Open(r) = e {
                *e = if commit { Entry::Record(std::mem::take(r)) } else { Entry::Aborted };
            }
        }
        part.push(Entry::Marker);
    }

    /// Appends a transaction: its records (committed or aborted) and a marker on each of
    /// their partitions, and, when it commits, its snapshots and input offsets (under the entries'
    /// lock, so a reader sees the records and the offsets together or neither); returns the
    /// records' offsets.
    fn append_txn(&self, writer: Option<Writer>, records: &[Record], snapshots: &[SnapshotWrite], input: Option<&InputOffsets>, commit: bool) -> Vec<i64> {
        let mut entries = self.shared.entries.lock().unwrap();
        if commit {
            let mut snaps = self.shared.snapshots.lock().unwrap();
            for w in snapshots {
                snaps.entry(w.partition).or_default().push((w.key.clone(), w.value.clone()));
            }
            let offsets = input.map(|i| i.offsets.clone()).unwrap_or_default();
            let mut committed = self.shared.input_offsets.lock().unwrap();
            for (t, p, o) in &offsets {
                committed.insert((t.clone(), *p), *o);
            }
            let events = records.iter().flat_map(|r| r.events.iter().cloned()).collect();
            self.shared.transactions.lock().unwrap().push(FakeTxn { writer, events, input: offsets });
        }
        Self::append(&mut entries, records, commit)
    }

    /// The input group's committed offset of `topic`'s `partition` (the next record to read).
    pub fn input_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.shared.input_offsets.lock().unwrap().get(&(topic.to_owned(), partition)).copied()
    }

    /// Every committed transaction, in commit order.
    pub fn transactions(&self) -> Vec<FakeTxn> {
        self.shared.transactions.lock().unwrap().clone()
    }

    /// Appends a transaction's records (committed or aborted) and a marker on each of its
    /// partitions; returns the records' offsets.
    fn append(entries: &mut BTreeMap<i32, Vec<Entry>>, records: &[Record], commit: bool) -> Vec<i64> {
        let mut offsets = Vec::new();
        for r in records {
            let part = entries.entry(r.partition).or_default();
            offsets.push(part.len() as i64);
            part.push(match (&r.op, commit) {
                (_, false) => Entry::Aborted,
                (Some(op), true) => Entry::Op(op.clone()),
                (None, true) => Entry::Record(r.events.iter().cloned().zip(r.keys.iter().cloned()).collect()),
            });
        }
        let touched: std::collections::BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
        for p in touched {
            entries.entry(p).or_default().push(Entry::Marker);
        }
        offsets
    }

    fn logged(partition: i32, v: &[Entry]) -> Vec<Logged> {
        v.iter()
            .enumerate()
            .flat_map(|(o, e)| match e {
                Entry::Record(rec) => rec
                    .iter()
                    .map(|(e, k)| Logged::Event(LoggedEvent { partition, offset: o as i64, event: e.clone(), idempotency_key: k.clone() }))
                    .collect(),
                Entry::Op(op) => vec![Logged::Op(LoggedOp { partition, offset: o as i64, op: op.clone() })],
                _ => Vec::new(),
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
        let gate = self.prepare_gate.lock().unwrap().take();
        if let Some(gate) = gate {
            gate.notified().await;
        }
        let writers: Vec<Writer> = std::iter::once(Writer::Shared).chain((0..partitions as i32).map(Writer::Partition)).collect();
        for w in writers {
            // init_transactions finishes what an older producer left in doubt.
            let left = self.shared.pending.lock().unwrap().remove(&w);
            if let Some((records, snapshots, input, commit)) = left {
                self.append_txn(Some(w), &records, &snapshots, input.as_ref(), commit);
            }
            let mut epochs = self.shared.epochs.lock().unwrap();
            let e = epochs.entry(w).or_insert(0);
            *e += 1;
            self.mine.lock().unwrap().insert(w, *e);
        }
        Ok(())
    }

    async fn transact(&self, writer: Writer, records: Vec<Record>, snapshots: Vec<SnapshotWrite>, input: Option<InputOffsets>, _stall_after: Option<Duration>) -> TxnOutcome {
        assert!(!records.is_empty() || !snapshots.is_empty() || input.is_some(), "a transaction writes at least one record or offset");
        for w in &snapshots {
            if let Writer::Partition(p) = writer {
                assert_eq!(w.partition, p, "an isolated partition's writer writes only that partition's snapshots");
            }
        }
        for r in &records {
            assert_eq!(r.events.len(), r.keys.len(), "one key slot per event");
            match &r.op {
                Some(_) => assert!(r.events.is_empty(), "an op record carries no event"),
                None => assert!((1..=shared::event::MAX_EVENTS_PER_RECORD).contains(&r.events.len()), "a record carries 1..=MAX events"),
            }
            assert!(r.events.windows(2).all(|w| w[0].channel == w[1].channel && w[1].version == w[0].version + 1));
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
        if let Some((late, late_snaps, late_input, commit)) = late {
            self.append_txn(Some(writer), &late, &late_snaps, late_input.as_ref(), commit);
        }
        let fate = (self.shared.fate)(n);
        let w = Some(writer);
        match fate {
            Fate::Commit => TxnOutcome::Committed(self.append_txn(w, &records, &snapshots, input.as_ref(), true)),
            Fate::Abort => {
                self.append_txn(w, &records, &snapshots, input.as_ref(), false);
                TxnOutcome::NotCommitted { why: "aborted".into(), stalled: Vec::new() }
            }
            Fate::StallLowest => {
                self.append_txn(w, &records, &snapshots, input.as_ref(), false);
                let lowest = records.iter().map(|r| r.partition).chain(snapshots.iter().map(|w| w.partition)).min().unwrap_or(0);
                TxnOutcome::NotCommitted { why: format!("partition {lowest} stalled"), stalled: vec![lowest] }
            }
            Fate::InDoubtThenCommit | Fate::InDoubtThenAbort => {
                self.shared.pending.lock().unwrap().insert(writer, (records, snapshots, input, fate == Fate::InDoubtThenCommit));
                TxnOutcome::InDoubt("commit not confirmed".into())
            }
            Fate::FencedCommitted => {
                self.append_txn(w, &records, &snapshots, input.as_ref(), true);
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
        let Some((records, snapshots, input, commit)) = pending else {
            return Ok(Resolution::NotCommitted);
        };
        let offsets = self.append_txn(Some(writer), &records, &snapshots, input.as_ref(), commit);
        Ok(if commit { Resolution::Committed(offsets) } else { Resolution::NotCommitted })
    }

    async fn open_transactions(&self) -> Result<Vec<OpenTxn>, ReadError> {
        let entries = self.shared.entries.lock().unwrap();
        Ok(entries
            .iter()
            .map(|(p, v)| OpenTxn { topic: "fake".into(), partition: *p, stable: stable_of(v), high: v.len() as i64 })
            .filter(|o| o.stable < o.high)
            .collect())
    }

    async fn read_snapshots_from(&self, from: Offsets) -> Result<(Loaded, Offsets), ReadError> {
        self.shared.snapshot_reads.fetch_add(1, Ordering::SeqCst);
        let mut loaded = Loaded::default();
        let mut ended = Offsets::new();
        let snaps = self.shared.snapshots.lock().unwrap().clone();
        for p in 0..self.shared.partitions as i32 {
            let records = snaps.get(&p).map_or(&[][..], Vec::as_slice);
            let start = from.get(&p).copied().unwrap_or(0).clamp(0, records.len() as i64) as usize;
            for (k, v) in &records[start..] {
                if v.is_empty() {
                    loaded.tombstone(p, k);
                } else if let Ok(Some(e)) = shared::snapshot::decode(Some(k.as_bytes()), Some(v)) {
                    loaded.add(p, e);
                }
            }
            ended.insert(p, records.len() as i64);
        }
        Ok((loaded, ended))
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

    async fn read_tail<F: FnMut(Logged) + Send + 'static>(&self, tail: Tail, mut sink: F) -> Result<(F, TailEnd), ReadError> {
        let entries = self.shared.entries.lock().unwrap().clone();
        let low = self.shared.low.lock().unwrap().clone();
        let mut end = TailEnd::default();
        for p in 0..self.shared.partitions as i32 {
            let mut v = entries.get(&p).cloned().unwrap_or_default();
            // A read_committed reader ends at the last stable offset.
            v.truncate(stable_of(&v) as usize);
            let (start, gap) =
                replay::start_of(tail.needed.get(&p).copied(), tail.wanted.get(&p).copied(), low.get(&p).copied().unwrap_or(0), v.len() as i64);
            if gap == replay::Gap::Deleted {
                end.truncated.push(p);
            }
            end.starts.insert(p, start);
            for e in Self::logged(p, &v).into_iter().filter(|e| e.offset() >= start) {
                sink(e);
            }
            end.records += v.iter().skip(start as usize).filter(|e| matches!(e, Entry::Record(_) | Entry::Op(_))).count() as u64;
            end.positions.insert(p, v.len() as i64);
        }
        Ok((sink, end))
    }

    async fn topic_id(&self) -> Result<String, ReadError> {
        Ok(FAKE_TOPIC_ID.to_owned())
    }

    fn reset(&self) {
        self.mine.lock().unwrap().clear();
    }
}

/// The topic ID the fake log's topic has.
pub const FAKE_TOPIC_ID: &str = "FakeTopicIdOfTheTests0";
