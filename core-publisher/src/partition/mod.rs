//! One partition as the publisher sees it: the publishes waiting for its next transaction (as
//! *units*: one publish, or one channel's events of a batch, which commit together and in order),
//! its channels' committed heads, and which committer writes it.
//!
//! A partition is written by the *shared* committer, in one transaction with every other shared
//! partition, or — after its records stalled a shared transaction — by a committer of its own
//! ([`Mode::Isolated`]) until it is fast again. [`next_mode`] is that policy, a pure function.
//! A partition is in at most one transaction at a time: only its current committer takes its
//! units, and its mode changes only while it is in none.

use crate::keylog::{KeyBook, KeyWrites};
use crate::log::{Record, SnapshotWrite};
use crate::snapshots::{self, Coverage, SnapshotPolicy};
use crate::heads::{self, Head};
use crate::types::{Fingerprint, PublishError, Published};
use shared::namespaces::Namespaces;
use shared::record::{ChannelOp, OpKind};
use shared::ChannelId;
use std::sync::Arc;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

mod plan;
pub use plan::{plan, HeadAt, Placement, PlanInput};

/// Most events one transaction carries (whole units: a unit is at most a batch's 1,000 events, so
/// one always fits).
pub const MAX_TXN_EVENTS: usize = 2_000;

/// One publish waiting in a unit.
#[derive(Debug, Clone)]
pub struct Pending {
    pub fp: Fingerprint,
    /// The publication's data.
    pub data: Box<shared::model::Data>,
    /// Its `Idempotency-Key` (already marked in flight in the key store).
    pub key: Option<String>,
}

/// The answer to a unit: one [`Published`] per event, in order.
pub type UnitAnswer = Result<Vec<Published>, PublishError>;

/// Events of one channel that commit together, in order; or, with `op`, the channel's reset or
/// delete (no events), in order with the publishes around it.
pub struct Unit {
    pub id: u64,
    pub channel: ChannelId,
    pub events: Vec<Pending>,
    pub done: oneshot::Sender<UnitAnswer>,
    /// When it was queued.
    pub queued_at: Instant,
    /// A reset or a delete (answered with one [`Published`] at version 0 naming the op record, or
    /// none when the channel was deleted already).
    pub op: Option<OpKind>,
}

/// Which committer writes a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In the shared transaction with the other shared partitions.
    Shared,
    /// In transactions of its own, since `since`, because its records stalled a shared one.
    Isolated { since: Instant },
}

/// What happened to a partition's records, as [`next_mode`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeEvent {
    /// Its records were not acknowledged within the stall bound, or failed, in a shared
    /// transaction (which was aborted).
    StalledInShared,
    /// A transaction of its own committed, its records acknowledged after `delivered`.
    IsolatedCommitted { delivered: Duration },
}

/// When an isolated partition may rejoin the shared transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsolationPolicy {
    /// A shared transaction whose records are not all acknowledged after this is aborted and the
    /// partitions still waiting are isolated (`PARTITION_STALL_MS`).
    pub stall_after: Duration,
    /// An isolated partition stays so at least this long...
    pub isolated_at_least: Duration,
    /// ...and rejoins on a commit whose records were acknowledged within this (hysteresis: well
    /// under `stall_after`).
    pub rejoin_below: Duration,
}

impl IsolationPolicy {
    /// The policy for a stall bound: isolated at least 10 s, rejoining on deliveries under a
    /// quarter of the bound.
    pub fn with_stall_after(stall_after: Duration) -> Self {
        Self { stall_after, isolated_at_least: Duration::from_secs(10), rejoin_below: stall_after / 4 }
    }
}

/// The mode after `event` at `now`.
pub fn next_mode(mode: Mode, event: ModeEvent, now: Instant, policy: &IsolationPolicy) -> Mode {
    match (mode, event) {
        (_, ModeEvent::StalledInShared) => Mode::Isolated { since: now },
        (Mode::Isolated { since }, ModeEvent::IsolatedCommitted { delivered }) => {
            if now.duration_since(since) >= policy.isolated_at_least && delivered < policy.rejoin_below {
                Mode::Shared
            } else {
                mode
            }
        }
        (Mode::Shared, ModeEvent::IsolatedCommitted { .. }) => Mode::Shared,
    }
}

/// What a partition is doing, for `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activity {
    Idle,
    Committing,
    /// A commit was not confirmed; its committer is asking until it knows.
    InDoubt,
}

/// The committed state of a partition's channels.
pub(crate) struct Book {
    pub(crate) heads: HashMap<ChannelId, Head>,
    /// Their snapshots, and what those do not cover yet.
    pub(crate) coverage: Coverage,
    /// The position after the last record known to be in the log.
    pub(crate) end: i64,
    /// The idempotency keys of its records on their way into the snapshot topic.
    pub(crate) keys: KeyBook,
    /// The reset count a channel with no head here (never published, or deleted) starts its next
    /// history at: one more than the highest reset count of any channel of the partition deleted
    /// so far (0: none was), from the checkpoint it was restored from and the deletes since
    /// ([`shared::snapshot::Checkpoint::floor`]). A publish to such a channel writes a reset to it
    /// first, so a client that held a position in a deleted history is never resumed in the new
    /// one, even after the delete's record went below the checkpoint; and the memory of deletes
    /// is one number per partition, not one entry per deleted channel.
    pub(crate) floor: u64,
}

/// Snapshots planned for one transaction on one partition: (channel, version) of each, and the
/// records to write (each snapshot, then the partition's checkpoint).
#[derive(Debug, Clone, Default)]
pub struct PlannedSnapshots {
    pub partition: i32,
    pub channels: Vec<(ChannelId, u64)>,
    pub writes: Vec<SnapshotWrite>,
    /// The key records that go with the checkpoint move (also in `writes`).
    pub keys: KeyWrites,
}

/// One partition: its queue of units, its committed heads, its mode.
pub struct Partition {
    pub id: i32,
    /// The namespaces: each channel's model.
    namespaces: Arc<Namespaces>,
    queue: Mutex<Queue>,
    book: Mutex<Book>,
    mode: Mutex<Mode>,
    activity: Mutex<Activity>,
    /// Wakes this partition's own committer (while isolated).
    pub isolated_wake: Notify,
}

#[derive(Default)]
struct Queue {
    units: VecDeque<Unit>,
    next_id: u64,
    /// Set by [`Partition::close`]: its committers are gone, nothing more is queued.
    closed: bool,
}

impl Partition {
    /// Partition `id`, whose channels (of `namespaces`) are at `heads`, its log read up to `end`.
    pub fn new(id: i32, namespaces: Arc<Namespaces>, heads: HashMap<ChannelId, Head>, end: i64) -> Self {
        Self::restored(id, namespaces, heads, Coverage::default(), end, KeyBook::default())
    }

    /// As [`Partition::new`], with what the snapshots cover (from the rebuild).
    pub fn restored(id: i32, namespaces: Arc<Namespaces>, heads: HashMap<ChannelId, Head>, coverage: Coverage, end: i64, keys: KeyBook) -> Self {
        Self {
            id,
            namespaces,
            queue: Mutex::new(Queue::default()),
            book: Mutex::new(Book { heads, coverage, end, keys, floor: 0 }),
            mode: Mutex::new(Mode::Shared),
            activity: Mutex::new(Activity::Idle),
            isolated_wake: Notify::new(),
        }
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().expect("queue lock is never poisoned: no panics while held")
    }

    fn lock_book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().expect("book lock is never poisoned: no panics while held")
    }

    /// Queues `events` of `channel` as one unit; returns its id and where its answer comes.
    pub fn push(&self, channel: ChannelId, events: Vec<Pending>) -> (u64, oneshot::Receiver<UnitAnswer>) {
        let (done, answer) = oneshot::channel();
        let mut q = self.lock_queue();
        q.next_id += 1;
        let id = q.next_id;
        if q.closed {
            // The publisher started over: no committer of this state will take it.
            let _ = done.send(Err(PublishError::NotReady));
        } else {
            q.units.push_back(Unit { id, channel, events, done, queued_at: Instant::now(), op: None });
        }
        (id, answer)
    }

    /// Queues `op` of `channel` as a unit of its own (after what is queued for it).
    pub fn push_op(&self, channel: ChannelId, op: OpKind) -> (u64, oneshot::Receiver<UnitAnswer>) {
        let (id, answer) = self.push(channel, Vec::new());
        if let Some(u) = self.lock_queue().units.iter_mut().find(|u| u.id == id) {
            u.op = Some(op);
        }
        (id, answer)
    }

    /// Once its committers are stopped (the publisher starts over): answers every queued unit
    /// `NotReady` (certainly not written) and refuses what is pushed later, so no caller waits
    /// for a committer that is gone. Their keys are the caller's to release.
    pub fn close(&self) -> Vec<Pending> {
        let units: Vec<Unit> = {
            let mut q = self.lock_queue();
            q.closed = true;
            q.units.drain(..).collect()
        };
        let mut events = Vec::new();
        for u in units {
            let _ = u.done.send(Err(PublishError::NotReady));
            events.extend(u.events);
        }
        events
    }

    /// Takes unit `id` back out of the queue if no transaction took it yet (its events are then
    /// certainly not written).
    pub fn withdraw(&self, id: u64) -> Option<Vec<Pending>> {
        let mut q = self.lock_queue();
        let i = q.units.iter().position(|u| u.id == id)?;
        q.units.remove(i).map(|u| u.events)
    }

    /// Takes the oldest whole units while the transaction stays within `room` events (the first
    /// unit goes whatever its size when `room` is [`MAX_TXN_EVENTS`]).
    pub fn take(&self, room: usize) -> Vec<Unit> {
        let mut q = self.lock_queue();
        let mut out = Vec::new();
        let mut events = 0;
        while let Some(u) = q.units.front() {
            let first_of_txn = room == MAX_TXN_EVENTS && out.is_empty();
            if !first_of_txn && events + u.events.len() > room {
                break;
            }
            events += u.events.len();
            out.extend(q.units.pop_front());
        }
        out
    }

    /// Puts units a transaction took back at the front, in their order (the transaction was
    /// aborted for another partition's sake; they go in the next one).
    pub fn requeue(&self, units: Vec<Unit>) {
        let mut q = self.lock_queue();
        for u in units.into_iter().rev() {
            q.units.push_front(u);
        }
    }

    /// Whether units wait.
    pub fn has_work(&self) -> bool {
        !self.lock_queue().units.is_empty()
    }

    /// Which committer writes it.
    pub fn mode(&self) -> Mode {
        *self.mode.lock().expect("mode lock")
    }

    /// Applies `event` to the mode; returns the new mode when it changed.
    pub fn apply_mode(&self, event: ModeEvent, policy: &IsolationPolicy) -> Option<Mode> {
        let mut m = self.mode.lock().expect("mode lock");
        let next = next_mode(*m, event, Instant::now(), policy);
        let changed = std::mem::discriminant(&next) != std::mem::discriminant(&*m);
        *m = next;
        changed.then_some(next)
    }

    /// What it is doing.
    pub fn activity(&self) -> Activity {
        *self.activity.lock().expect("activity lock")
    }

    pub fn set_activity(&self, a: Activity) {
        *self.activity.lock().expect("activity lock") = a;
    }

    /// The committed version of `channel` (0 when it has none).
    pub fn version_of(&self, channel: &ChannelId) -> u64 {
        self.lock_book().heads.get(channel).map_or(0, |h| h.version)
    }

    /// What [`plan`] continues `channel` from.
    pub fn head_at(&self, channel: &ChannelId) -> HeadAt {
        let book = self.lock_book();
        match book.heads.get(channel) {
            Some(h) => HeadAt { version: h.version, resets: book.coverage.resets(channel), headless: false, floor: book.floor },
            None => HeadAt { version: 0, resets: 0, headless: true, floor: book.floor },
        }
    }

    /// The reset count of `channel`'s current history: its head's; for a channel with no head,
    /// the partition's reset floor, where its next history starts (after a delete: what nodes
    /// told its clients).
    pub fn resets_of(&self, channel: &ChannelId) -> u64 {
        let book = self.lock_book();
        if book.heads.contains_key(channel) {
            book.coverage.resets(channel)
        } else {
            book.floor
        }
    }

    /// The partition's reset floor ([`Book::floor`]).
    pub fn floor(&self) -> u64 {
        self.lock_book().floor
    }

    /// The committed version and hash of `channel`, if it has events.
    pub fn truth(&self, channel: &ChannelId) -> Option<(u64, String)> {
        self.lock_book().heads.get(channel).map(|c| (c.version, c.hash()))
    }

    /// The committed version, hash and state (its JSON form) of `channel`, if it has events.
    pub fn view(&self, channel: &ChannelId) -> Option<(u64, String, Vec<u8>)> {
        self.lock_book().heads.get(channel).map(|h| {
            let mut json = Vec::new();
            h.state.write_json(&mut json);
            (h.version, h.hash(), json)
        })
    }

    /// Whether `channel` has a committed event.
    pub fn has(&self, channel: &ChannelId) -> bool {
        self.lock_book().heads.contains_key(channel)
    }

    /// Checks that `datas`, published to `channel` in order after its committed head, keep its
    /// state within `max_state_bytes`. (Publications to the channel already queued are not
    /// counted: concurrent publishes may together pass the limit by what is in flight.)
    ///
    /// # Errors
    /// The index of the first that would pass it, and why.
    pub fn check_states(&self, channel: &ChannelId, datas: &[&shared::model::Data], max_state_bytes: usize) -> Result<(), (usize, shared::model::Invalid)> {
        let model = heads::model_of(&self.namespaces, channel);
        match model.kind() {
            shared::model::ModelKind::Latest => {
                for (i, d) in datas.iter().enumerate() {
                    if d.get().len() > max_state_bytes {
                        return Err((i, shared::model::Invalid::StateTooLarge { size: d.get().len(), limit: max_state_bytes }));
                    }
                }
                Ok(())
            }
            shared::model::ModelKind::Json => {
                let mut state = self.lock_book().heads.get(channel).map_or_else(|| model.empty(), |h| h.state.clone());
                for (i, d) in datas.iter().enumerate() {
                    state.try_apply(d, max_state_bytes).map_err(|e| (i, e))?;
                }
                Ok(())
            }
            shared::model::ModelKind::Stream | shared::model::ModelKind::Pixels => Ok(()),
        }
    }

    /// Channels with at least one committed event.
    pub fn channel_count(&self) -> usize {
        self.lock_book().heads.len()
    }

    /// Runs `f` on the committed state: a standby applies what it reads there ([`crate::follow`]).
    pub(crate) fn with_book<R>(&self, f: impl FnOnce(&mut Book) -> R) -> R {
        f(&mut self.lock_book())
    }

    /// Where a read of what is not known yet starts.
    pub fn end(&self) -> i64 {
        self.lock_book().end
    }

    /// Applies committed `record` (at `offset`) to the heads.
    pub fn apply_committed(&self, record: &Record, offset: i64) {
        let mut book = self.lock_book();
        if let Some(op) = &record.op {
            apply_op(&mut book, &self.namespaces, op, offset, Instant::now());
            return;
        }
        for ev in &record.events {
            heads::apply(&mut book.heads, &self.namespaces, ev, offset);
        }
        if let Some(first) = record.events.first() {
            book.coverage.recorded(&first.channel, offset, Instant::now());
        }
        book.keys.record(offset, heads::key_entries(record.events.iter().zip(record.keys.iter().map(Option::as_deref)), offset));
        book.end = book.end.max(offset + 1);
    }

    /// The snapshots a transaction on this partition should carry at `now`: the channels of
    /// `writing` (the channels it writes events of) that are due by count, and the oldest ones
    /// due by age or records, at most `policy.max_per_txn`; then the checkpoint they lead to. Empty when
    /// none is due. Each is of the committed head, which covers every committed record.
    pub fn plan_snapshots(&self, writing: &[&ChannelId], policy: &SnapshotPolicy, now: Instant) -> PlannedSnapshots {
        let book = self.lock_book();
        let mut chosen: Vec<&ChannelId> = Vec::new();
        let is_due = |c: &ChannelId| {
            book.heads.get(c).is_some_and(|h| {
                snapshots::due(policy, h.version, book.coverage.snapshot_version(c), book.coverage.behind(c, now, book.end))
            })
        };
        // A channel reset since its snapshot first: its snapshot is of the history before.
        let reset = book.coverage.reset_pending(policy.max_per_txn);
        for c in &reset {
            if book.heads.contains_key(c) {
                chosen.push(c);
            }
        }
        for c in writing {
            if chosen.len() < policy.max_per_txn && !chosen.contains(c) && is_due(c) {
                chosen.push(c);
            }
        }
        let by_age = book.coverage.due_oldest(now, book.end, policy, policy.max_per_txn);
        for c in &by_age {
            if chosen.len() < policy.max_per_txn && !chosen.contains(&c) && is_due(c) {
                chosen.push(c);
            }
        }
        let mut planned = PlannedSnapshots { partition: self.id, ..Default::default() };
        if chosen.is_empty() && !book.keys.held_back(book.coverage.checkpoint_after(&[], book.end)) {
            return planned;
        }
        let mut bytes = 0;
        let mut taken: Vec<&ChannelId> = Vec::new();
        for c in &chosen {
            if !taken.is_empty() && bytes >= policy.max_bytes_per_txn {
                break;
            }
            let head = &book.heads[*c];
            let value = head.snapshot_value(c, book.coverage.resets(c), book.coverage.position(c));
            bytes += value.len();
            taken.push(c);
            planned.channels.push(((*c).clone(), head.version));
            planned.writes.push(SnapshotWrite { partition: self.id, key: c.as_str().to_owned(), value });
        }
        // The checkpoint the snapshots allow, or short of it where the keys it moves past are
        // more than one move carries (the rest go with the next).
        let covered = book.coverage.checkpoint_after(&taken, book.end);
        planned.keys = book.keys.plan(self.id, covered, shared::event::now_ms(), policy.key_window.as_millis() as u64, crate::keylog::KEY_BYTES_PER_MOVE);
        planned.writes.extend(planned.keys.writes.iter().cloned());
        planned.writes.push(SnapshotWrite {
            partition: self.id,
            key: shared::snapshot::CHECKPOINT_KEY.to_owned(),
            // The floor of the deletes committed so far: a checkpoint never passes a record of the
            // transaction it is written in (it stops at the committed end).
            value: shared::snapshot::Checkpoint { offset: planned.keys.below, floor: book.floor }.encode(),
        });
        planned
    }

    /// Records that `planned` committed (call before applying the same transaction's records).
    pub fn apply_snapshots(&self, planned: &PlannedSnapshots) {
        let mut book = self.lock_book();
        for (c, v) in &planned.channels {
            book.coverage.snapshotted(c, *v);
        }
        book.keys.applied(&planned.keys);
    }

    /// Whether a channel waits for a snapshot by age or records at `now` (the committer then
    /// writes a transaction of snapshots alone, so an idle partition's checkpoint moves too).
    pub fn snapshots_due(&self, policy: &SnapshotPolicy, now: Instant) -> bool {
        let book = self.lock_book();
        // Due as `plan_snapshots` judges it (a newer version than the snapshot's too), so a wake
        // always finds something to write; or keys held back below where the checkpoint may go.
        book.coverage.due_oldest(now, book.end, policy, policy.max_per_txn).iter().any(|c| {
            book.heads.get(c).is_some_and(|h| snapshots::due(policy, h.version, book.coverage.snapshot_version(c), book.coverage.behind(c, now, book.end)))
        }) || book.keys.held_back(book.coverage.checkpoint_after(&[], book.end))
            || book.coverage.reset_pending(1).iter().any(|c| book.heads.contains_key(c))
    }

    /// Channels with records no snapshot covers yet.
    pub fn uncovered_count(&self) -> usize {
        self.lock_book().coverage.uncovered_count()
    }
}

/// Applies a committed op record at `offset` to `book`.
pub(crate) fn apply_op(book: &mut Book, namespaces: &Namespaces, op: &ChannelOp, offset: i64, now: Instant) {
    BookParts { heads: &mut book.heads, coverage: &mut book.coverage, floor: &mut book.floor }.apply_op(namespaces, op, offset, now);
    book.end = book.end.max(offset + 1);
}

/// The parts of a partition's committed state an op changes (a [`Book`]'s, or a rebuild's).
pub(crate) struct BookParts<'a> {
    pub(crate) heads: &'a mut HashMap<ChannelId, Head>,
    pub(crate) coverage: &'a mut Coverage,
    pub(crate) floor: &'a mut u64,
}

impl BookParts<'_> {
    /// Applies the op record at `offset`: a reset gives the channel its model's empty head at
    /// version 0 (a snapshot of it due at once); a delete drops its head and raises the
    /// partition's reset floor past the deleted history's count ([`Book::floor`]).
    pub(crate) fn apply_op(&mut self, namespaces: &Namespaces, op: &ChannelOp, offset: i64, now: Instant) {
        let c = &op.channel;
        match op.op {
            OpKind::Reset => {
                self.heads.insert(c.clone(), Head::of(namespaces, c));
                self.coverage.reset_at(c, op.resets, offset, now);
            }
            OpKind::Delete => {
                self.heads.remove(c);
                *self.floor = (*self.floor).max(op.resets + 1);
                self.coverage.forget(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::Color;

    pub(super) fn id(s: &str) -> ChannelId {
        ChannelId::parse(s).unwrap()
    }

    pub(super) fn pending(channel: &str, x: u32, key: Option<&str>) -> Pending {
        let data = shared::model::pixels::Paint { x, y: 0, color: Color([1, 2, 3]) }.to_data();
        Pending { fp: Fingerprint::of(&id(channel), &data), data, key: key.map(str::to_owned) }
    }

    /// Keys below where the snapshots let the checkpoint go (a move cut short by the key budget,
    /// or a rebuild's read from an older checkpoint) make a move due without any snapshot, which
    /// writes them in budget-sized moves and then stops.
    #[test]
    fn keys_held_back_below_the_covered_checkpoint_are_written_without_snapshots() {
        let mut keys = KeyBook::restored([], Some(0), 0);
        let now_ms = shared::event::now_ms();
        let n = 2 * crate::keylog::KEYS_PER_RECORD as i64;
        for o in 0..n {
            keys.record(o, vec![shared::snapshot::KeyEntry { key: format!("key-{o:0>40}"), canvas: "a".into(), x: 0, y: 0, color: [1, 2, 3], data: None, version: 1, offset: o, at_ms: now_ms }]);
        }
        // Every channel covered: the checkpoint may go to the end.
        let spaces = Arc::new(Namespaces::pixels_only(shared::CanvasDims { width: 4, height: 4 }));
        let p = Partition::restored(0, spaces, HashMap::new(), Coverage::default(), n + 1, keys);
        let policy = SnapshotPolicy::default();
        let mut moves = Vec::new();
        while p.snapshots_due(&policy, Instant::now()) {
            let planned = p.plan_snapshots(&[], &policy, Instant::now());
            assert!(planned.channels.is_empty() && !planned.writes.is_empty());
            let bytes: usize = planned.keys.writes.iter().map(|w| w.value.len()).sum();
            assert!(bytes <= crate::keylog::KEY_BYTES_PER_MOVE + 4096, "{bytes} bytes in one move");
            moves.push(planned.keys.below);
            p.apply_snapshots(&planned);
            assert!(moves.len() < 100, "the moves end");
        }
        assert!(moves.len() > 1, "more than one move's budget of keys: {moves:?}");
        assert_eq!(moves.last(), Some(&(n + 1)), "the last move reaches the covered checkpoint");
        assert!(moves.windows(2).all(|w| w[0] < w[1]));
    }

    /// The isolation policy as a table: (mode, event, seconds since isolated, delivery ms) → mode.
    #[test]
    fn isolation_policy_table() {
        let policy = IsolationPolicy::with_stall_after(Duration::from_millis(1000));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        type Case = (&'static str, Mode, ModeEvent, u64, &'static str);
        let iso = Mode::Isolated { since: t0 };
        let fast = ModeEvent::IsolatedCommitted { delivered: Duration::from_millis(20) };
        let slow = ModeEvent::IsolatedCommitted { delivered: Duration::from_millis(400) };
        let cases: Vec<Case> = vec![
            ("a stall in the shared transaction isolates", Mode::Shared, ModeEvent::StalledInShared, 0, "isolated"),
            ("a stall while isolated restarts the clock", iso, ModeEvent::StalledInShared, 30, "isolated since 30"),
            ("fast, but not isolated long enough", iso, fast, 5, "isolated"),
            ("isolated long enough, but not fast enough", iso, slow, 30, "isolated"),
            ("isolated long enough and fast: rejoins", iso, fast, 10, "shared"),
            ("a shared partition stays shared", Mode::Shared, fast, 30, "shared"),
        ];
        for (name, mode, event, secs, want) in cases {
            let got = match next_mode(mode, event, at(secs), &policy) {
                Mode::Shared => "shared".to_owned(),
                Mode::Isolated { since } if since == t0 => "isolated".to_owned(),
                Mode::Isolated { since } => format!("isolated since {}", since.duration_since(t0).as_secs()),
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_unit_still_queued_can_be_withdrawn_once() {
        let p = Partition::new(0, Arc::new(Namespaces::pixels_only(Default::default())), HashMap::new(), 0);
        let (first, _a) = p.push(id("a"), vec![pending("a", 0, Some("k"))]);
        let (second, _b) = p.push(id("a"), vec![pending("a", 1, None)]);
        let back = p.withdraw(first).expect("still queued");
        assert_eq!(back[0].key.as_deref(), Some("k"));
        assert!(p.withdraw(first).is_none());
        assert!(p.withdraw(second).is_some());
    }

    #[test]
    fn a_transaction_takes_whole_units_up_to_its_room_and_requeued_units_keep_their_place() {
        let p = Partition::new(0, Arc::new(Namespaces::pixels_only(Default::default())), HashMap::new(), 0);
        let many = |n: usize| (0..n).map(|i| pending("a", i as u32 % 8, None)).collect::<Vec<_>>();
        let _keep: Vec<_> = [1_000, 900, 200, 5].iter().map(|n| p.push(id("a"), many(*n)).1).collect();
        let sizes = |units: &[Unit]| units.iter().map(|u| u.events.len()).collect::<Vec<_>>();
        let first = p.take(MAX_TXN_EVENTS);
        assert_eq!(sizes(&first), vec![1_000, 900], "1,900 fit; 2,100 would not");
        assert_eq!(sizes(&p.take(50)), Vec::<usize>::new(), "a partition's turn with less room than its next unit takes nothing");
        p.requeue(first);
        assert_eq!(sizes(&p.take(MAX_TXN_EVENTS)), vec![1_000, 900], "requeued units come first, in order");
        assert_eq!(sizes(&p.take(MAX_TXN_EVENTS)), vec![200, 5]);
        let _big = p.push(id("a"), many(MAX_TXN_EVENTS + 1)).1;
        assert_eq!(sizes(&p.take(MAX_TXN_EVENTS)), vec![MAX_TXN_EVENTS + 1], "a unit over the bound still goes, alone");
    }
}
