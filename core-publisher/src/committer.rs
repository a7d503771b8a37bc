//! The committers: they alone hand out versions, each for the partitions it writes.
//!
//! The *shared* committer takes everything waiting on every shared partition (whole units, up to
//! [`MAX_TXN_EVENTS`], the partitions in turn), gives each channel's events the next versions after
//! its committed head, writes them as records (a channel's consecutive events share a record, up
//! to 256) in **one Kafka transaction**, and only once it committed applies them to the heads and
//! answers 201. So a transaction carries whatever arrived while the previous one was committing:
//! there is no commit interval to tune (Kafka Streams under exactly-once commits every
//! `commit.interval.ms`, 100 ms by default, which would be the latency floor here), and under
//! load each transaction carries more events, while the transactions per second stay about one
//! per commit round trip whatever the number of partitions.
//!
//! A stalled partition (its leader gone, a follower stuck in the ISR) would hold every channel's
//! transaction: the shared writer aborts a transaction whose records are not all acknowledged
//! within `PARTITION_STALL_MS` (1 s by default), puts the other partitions' units back in their
//! queues for the next shared transaction (their callers only waited), and *isolates* the
//! partitions still waiting: each gets a committer of its own with a producer of its own, so its
//! trouble delays only its channels, until it is fast again ([`crate::partition::next_mode`]).
//!
//! Outcomes, for every unit of a transaction:
//! - aborted or never begun (not for a partition's sake): nothing is applied, no version used,
//!   callers get 503 `kafka_unavailable`, their idempotency keys are released;
//! - commit not confirmed ([`TxnOutcome::InDoubt`]): callers get 503 `kafka_outcome_unknown`; the
//!   committer asks the transaction coordinator again ([`EventLog::resolve`], with backoff) until
//!   it knows, and hands out no version of its partitions meanwhile (new publishes wait, then time
//!   out in the queue with a definite "not written"). Their keys stay in flight until then, so a
//!   retry with the same key is refused (409) until the outcome is known, then replayed or run;
//! - fenced, or a fatal producer error: the whole publisher stops accepting writes ([`Status`]).

use crate::idempotency::KeyStore;
use crate::input::{Ended, InputQueue, Take};
use crate::log::{EventLog, Record, Resolution, SnapshotWrite, TxnOutcome, Writer};
use crate::partition::{Activity, IsolationPolicy, Mode, ModeEvent, Partition, Pending, Placement, PlannedSnapshots, Unit, MAX_TXN_EVENTS};
use crate::snapshots::SnapshotPolicy;
use crate::types::{Fingerprint, PublishError, Published};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The publisher's write state, shared by every committer.
#[derive(Debug, Default)]
pub struct Status {
    /// 0: preparing, 1: accepting writes, 2: fenced, 3: failed.
    state: AtomicU8,
    /// Notified once when writes stop for good (fenced or failed).
    pub stopped_now: Notify,
    /// Why writes stopped, once they did.
    why: Mutex<Option<String>>,
}

impl Status {
    /// Accepting writes.
    pub fn set_ready(&self) {
        let _ = self.state.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
    }

    fn stop(&self, state: u8, why: String) {
        if self.state.fetch_max(state, Ordering::AcqRel) < 2 {
            tracing::warn!(reason = %why, "this publisher accepts no more writes");
            *self.why.lock().expect("why lock") = Some(why);
            self.stopped_now.notify_waiters();
            self.stopped_now.notify_one();
        }
    }

    /// Another publisher took over: no more writes, ever.
    pub fn set_fenced(&self) {
        self.stop(2, "fenced: another publisher started on this topic (same transactional ids)".into());
    }

    /// A producer failed for good: no more writes until the publisher started over (prepares and
    /// reads the log anew, see [`crate::versions::Versions::start_over`]).
    pub fn set_failed(&self, why: &str) {
        self.stop(3, format!("a transactional producer failed for good: {why}"));
    }

    /// Starting over after a failure (not after fencing): writes get 503 until ready again.
    pub fn set_preparing(&self) {
        if self.state.compare_exchange(3, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            *self.why.lock().expect("why lock") = None;
        }
    }

    /// Whether a producer failed for good (and the publisher has not started over yet).
    pub fn is_failed(&self) -> bool {
        self.state.load(Ordering::Acquire) == 3
    }

    /// Whether writes are accepted.
    pub fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == 1
    }

    /// Whether another publisher took over.
    pub fn is_fenced(&self) -> bool {
        self.state.load(Ordering::Acquire) == 2
    }

    /// Whether writes stopped for good (fenced or failed).
    pub fn is_stopped(&self) -> bool {
        self.state.load(Ordering::Acquire) >= 2
    }

    /// Why writes stopped, once they did.
    pub fn why(&self) -> Option<String> {
        self.why.lock().expect("why lock").clone()
    }
}

/// What the committers did since start, for `/health`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Transactions committed, and the events and records in them.
    pub committed: AtomicU64,
    pub events: AtomicU64,
    pub records: AtomicU64,
    /// Transactions that certainly did not commit (aborted, or never began).
    pub not_committed: AtomicU64,
    /// Commits that were not confirmed in time (each then resolved by asking again).
    pub in_doubt: AtomicU64,
    /// Times a partition was isolated after stalling a shared transaction.
    pub isolations: AtomicU64,
    /// Channel snapshots committed.
    pub snapshots: AtomicU64,
    /// `GET /metrics` ([`crate::metrics`]).
    pub metrics: crate::metrics::PublisherMetrics,
}

impl Counters {
    fn add(n: &AtomicU64, by: impl TryInto<u64>) {
        n.fetch_add(by.try_into().unwrap_or(0), Ordering::Relaxed);
    }

    fn committed(&self, records: &[Record]) {
        Self::add(&self.committed, 1);
        Self::add(&self.records, records.len());
        Self::add(&self.events, records.iter().map(|r| r.events.len()).sum::<usize>());
        self.metrics.committed(records.len(), records.iter().map(|r| r.events.len()).sum());
    }

    /// `{"committed","events","records","not_committed","in_doubt","isolations","snapshots"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        serde_json::json!({
            "committed": get(&self.committed),
            "events": get(&self.events),
            "records": get(&self.records),
            "not_committed": get(&self.not_committed),
            "in_doubt": get(&self.in_doubt),
            "isolations": get(&self.isolations),
            "snapshots": get(&self.snapshots),
        })
    }
}

/// What every committer shares.
pub struct Ctx<L> {
    /// The input topics' records not committed yet ([`crate::input`]), when there are input
    /// topics: each transaction may carry a take of them with its offsets.
    pub input: Option<Arc<InputQueue>>,
    pub log: Arc<L>,
    pub partitions: Vec<Arc<Partition>>,
    pub keys: Arc<Mutex<KeyStore>>,
    pub status: Arc<Status>,
    pub counters: Arc<Counters>,
    pub policy: IsolationPolicy,
    /// When channels are snapshotted ([`crate::snapshots`]).
    pub snapshots: SnapshotPolicy,
    /// Wakes the shared committer.
    pub shared_wake: Notify,
    pub stop: CancellationToken,
}

impl<L> Ctx<L> {
    fn keys(&self) -> std::sync::MutexGuard<'_, KeyStore> {
        self.keys.lock().expect("key store lock is never poisoned: no panics while held")
    }

    /// Releases the keys of `events` (certainly not applied). Nothing once this state is stopped:
    /// [`crate::versions::Versions::start_over`] released every key in flight then, and a key
    /// taken since belongs to a request of the new state (checked under the store's lock, which
    /// the start-over takes after cancelling `stop`).
    pub fn release<'a>(&self, events: impl IntoIterator<Item = &'a Pending>) {
        let mut keys = self.keys();
        if self.stop.is_cancelled() {
            return;
        }
        let now_ms = shared::event::now_ms();
        for p in events {
            if let Some(k) = &p.key {
                keys.finish(k, &p.fp, None, now_ms);
            }
        }
    }

    /// Wakes whichever committer writes `p` now.
    pub fn wake(&self, p: &Partition) {
        match p.mode() {
            Mode::Shared => self.shared_wake.notify_one(),
            Mode::Isolated { .. } => p.isolated_wake.notify_one(),
        }
    }
}

/// Units taken for one transaction, with their partitions, and the input records it carries.
struct Batch {
    units: Vec<(i32, Unit)>,
    input: Option<Take>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.units.is_empty() && self.input.is_none()
    }
}

/// The input records a transaction of `writer` takes ([`crate::input::take`]).
fn take_input<L>(ctx: &Ctx<L>, writer: Writer) -> Option<Take> {
    crate::input::take(ctx.input.as_ref(), ctx.status.is_stopped(), writer, &ctx.partitions)
}

/// Takes the input's records ([`take_input`], at most [`crate::input::INPUT_ROOM`]), then whole
/// units from the shared partitions, the partitions in turn from `start`, within
/// [`MAX_TXN_EVENTS`] in all: the HTTP publishes always have half a transaction.
fn take_shared<L>(ctx: &Ctx<L>, start: usize) -> Batch {
    let n = ctx.partitions.len();
    let mut units = Vec::new();
    let input = take_input(ctx, Writer::Shared);
    let mut room = MAX_TXN_EVENTS - input.as_ref().map_or(0, Take::len);
    for i in 0..n {
        let p = &ctx.partitions[(start + i) % n];
        if !matches!(p.mode(), Mode::Shared) {
            continue;
        }
        let taken = p.take(room);
        room = room.saturating_sub(taken.iter().map(|u| u.events.len()).sum());
        units.extend(taken.into_iter().map(|u| (p.id, u)));
        if room == 0 {
            break;
        }
    }
    Batch { units, input }
}

/// The shared committer (runs until `ctx.stop`).
pub async fn run_shared<L: EventLog>(ctx: Arc<Ctx<L>>) {
    let mut start = 0;
    let mut input = ctx.input.as_ref().map(|q| q.watch());
    loop {
        tokio::select! {
            _ = ctx.stop.cancelled() => return,
            _ = ctx.log.available(Writer::Shared) => {}
        }
        crate::input::seen(&mut input);
        let batch = take_shared(&ctx, start);
        start = start.wrapping_add(1);
        if batch.is_empty() && !snapshots_due(&ctx, Writer::Shared) {
            tokio::select! {
                _ = ctx.stop.cancelled() => return,
                _ = ctx.shared_wake.notified() => {}
                _ = crate::input::changed(&mut input) => {}
                _ = tokio::time::sleep(SNAPSHOT_TICK) => {}
            }
            continue;
        }
        if !commit(&ctx, Writer::Shared, batch, Some(ctx.policy.stall_after)).await {
            return;
        }
    }
}

/// The committer of partition `p` while it is isolated (runs until `ctx.stop`).
pub async fn run_isolated<L: EventLog>(ctx: Arc<Ctx<L>>, p: Arc<Partition>) {
    let mut input = ctx.input.as_ref().map(|q| q.watch());
    loop {
        let isolated = matches!(p.mode(), Mode::Isolated { .. });
        if isolated && (p.has_work() || ctx.input.is_some()) {
            tokio::select! {
                _ = ctx.stop.cancelled() => return,
                _ = ctx.log.available(Writer::Partition(p.id)) => {}
            }
        }
        crate::input::seen(&mut input);
        let taken = if isolated { take_input(&ctx, Writer::Partition(p.id)) } else { None };
        let room = MAX_TXN_EVENTS - taken.as_ref().map_or(0, Take::len);
        let units = if isolated { p.take(room) } else { Vec::new() };
        if units.is_empty() && taken.is_none() && !(isolated && snapshots_due(&ctx, Writer::Partition(p.id))) {
            tokio::select! {
                _ = ctx.stop.cancelled() => return,
                _ = p.isolated_wake.notified() => {}
                // Only an isolated partition's committer takes input records.
                _ = crate::input::changed(&mut input), if isolated => {}
                _ = tokio::time::sleep(SNAPSHOT_TICK) => {}
            }
            continue;
        }
        let batch = Batch { units: units.into_iter().map(|u| (p.id, u)).collect(), input: taken };
        if !commit(&ctx, Writer::Partition(p.id), batch, None).await {
            return;
        }
    }
}

fn partition<L>(ctx: &Ctx<L>, id: i32) -> &Arc<Partition> {
    &ctx.partitions[id as usize]
}

/// How often an idle committer looks for channels due a snapshot by age.
const SNAPSHOT_TICK: Duration = Duration::from_secs(1);

/// The partitions `writer` writes now.
fn written_by<L>(ctx: &Ctx<L>, writer: Writer) -> Vec<&Arc<Partition>> {
    match writer {
        Writer::Shared => ctx.partitions.iter().filter(|p| matches!(p.mode(), Mode::Shared)).collect(),
        Writer::Partition(id) => vec![partition(ctx, id)],
    }
}

/// Whether a partition `writer` writes has a channel due a snapshot by age, and writes go on. Once
/// they stopped (fenced, or failed until the start-over) [`commit`] writes nothing and returns at
/// once, so a due snapshot must not count as work: the committer's loop would go round without
/// ever awaiting, pinning its worker thread.
fn snapshots_due<L>(ctx: &Ctx<L>, writer: Writer) -> bool {
    if ctx.status.is_stopped() {
        return false;
    }
    let now = Instant::now();
    written_by(ctx, writer).iter().any(|p| p.snapshots_due(&ctx.snapshots, now))
}

/// The snapshots the next transaction of `writer` carries, per partition: the channels it writes
/// events of when due by count, and any due by age (see [`crate::snapshots`]).
fn plan_snapshots<L>(ctx: &Ctx<L>, writer: Writer, batch: &Batch, input: Option<&Take>) -> Vec<PlannedSnapshots> {
    let now = Instant::now();
    written_by(ctx, writer)
        .into_iter()
        .map(|p| {
            let inputs = input.into_iter().flat_map(|t| t.pendings.iter().filter(|(id, _, _)| *id == p.id).map(|(_, c, _)| c));
            let writing: Vec<&shared::ChannelId> = batch.units.iter().filter(|(id, _)| *id == p.id).map(|(_, u)| &u.channel).chain(inputs).collect();
            p.plan_snapshots(&writing, &ctx.snapshots, now)
        })
        .filter(|s| !s.writes.is_empty())
        .collect()
}

/// Records committed snapshots (before the same transaction's records are applied).
fn apply_snapshots<L>(ctx: &Ctx<L>, planned: &[PlannedSnapshots]) {
    for s in planned {
        partition(ctx, s.partition).apply_snapshots(s);
        Counters::add(&ctx.counters.snapshots, s.channels.len() as u64);
        ctx.counters.metrics.snapshots_written.inc_by(s.channels.len() as u64);
    }
}

/// Runs one transaction of `writer` for `batch` and answers its units. Returns `false` when the
/// committer must stop.
async fn commit<L: EventLog>(ctx: &Ctx<L>, writer: Writer, mut batch: Batch, stall_after: Option<Duration>) -> bool {
    // The input records it carries: their outcome is the queue's (nobody waits for an answer).
    let input = batch.input.take();
    if ctx.status.is_stopped() {
        for (_, u) in batch.units {
            ctx.release(&u.events);
            let _ = u.done.send(Err(if ctx.status.is_fenced() { PublishError::Fenced } else { PublishError::NotReady }));
        }
        crate::input::ended(ctx.input.as_ref(), input, Ended::Retry);
        return true;
    }
    let touched: Vec<i32> = {
        let mut t: Vec<i32> = batch.units.iter().map(|(p, _)| *p).collect();
        t.extend(input.iter().flat_map(|i| i.pendings.iter().map(|(p, _, _)| *p)));
        t.sort_unstable();
        t.dedup();
        t
    };
    // The input's publications are planned after the units (each a unit of one event), so each
    // channel's versions continue from its head whichever way its publications came.
    let (records, placed) = {
        let mut plan: Vec<(i32, &shared::ChannelId, &[Pending], Option<shared::record::OpKind>)> =
            batch.units.iter().map(|(p, u)| (*p, &u.channel, u.events.as_slice(), u.op)).collect();
        plan.extend(input.iter().flat_map(|i| i.pendings.iter().map(|(p, c, e)| (*p, c, std::slice::from_ref(e), None))));
        crate::partition::plan(&plan, |p, c| partition(ctx, p).head_at(c), shared::event::now_ms())
    };
    let planned = plan_snapshots(ctx, writer, &batch, input.as_ref());
    if records.is_empty() && planned.is_empty() && input.is_none() {
        // Nothing to write (a delete of a channel deleted already): answered as done.
        answer_committed(ctx, batch, &placed, &records, &[]);
        return true;
    }
    let offsets = input.as_ref().map(Take::offsets);
    let mut writes: Vec<SnapshotWrite> = planned.iter().flat_map(|s| s.writes.iter().cloned()).collect();
    // A deleted channel's snapshot is tombstoned in the same transaction, after any written above.
    writes.extend(records.iter().filter_map(|r| match &r.op {
        Some(op) if op.op == shared::record::OpKind::Delete => Some(SnapshotWrite { partition: r.partition, key: op.channel.as_str().to_owned(), value: Vec::new() }),
        _ => None,
    }));
    let touched: Vec<i32> = {
        let mut t = touched;
        t.extend(planned.iter().map(|s| s.partition));
        t.sort_unstable();
        t.dedup();
        t
    };
    for p in &touched {
        partition(ctx, *p).set_activity(Activity::Committing);
    }
    let began = Instant::now();
    let oldest = batch.units.iter().map(|(_, u)| u.queued_at).min().map_or(Duration::ZERO, |t| began.duration_since(t));
    if ctx.stop.is_cancelled() {
        return false;
    }
    let outcome = tokio::select! {
        biased;
        _ = ctx.stop.cancelled() => return false,
        o = ctx.log.transact(writer, records.clone(), writes, offsets, stall_after) => o,
    };
    let took = began.elapsed();
    ctx.counters.metrics.commit_seconds.observe(took.as_secs_f64());
    tracing::debug!(writer = ?writer, units = batch.units.len(), records = records.len(), partitions = touched.len(),
        oldest_wait_us = oldest.as_micros() as u64, took_us = took.as_micros() as u64, "transaction ended");
    let idle = |ctx: &Ctx<L>| {
        for p in &touched {
            partition(ctx, *p).set_activity(Activity::Idle);
        }
    };
    match outcome {
        TxnOutcome::Committed(offsets) => {
            apply_snapshots(ctx, &planned);
            apply_committed(ctx, &records, &offsets);
            answer_committed(ctx, batch, &placed, &records, &offsets);
            crate::input::ended(ctx.input.as_ref(), input, Ended::Committed);
            if let Writer::Partition(id) = writer {
                let p = partition(ctx, id);
                if p.apply_mode(ModeEvent::IsolatedCommitted { delivered: took }, &ctx.policy) == Some(Mode::Shared) {
                    tracing::info!(partition = id, "partition is fast again; it rejoins the shared transaction");
                    ctx.wake(p);
                }
            }
        }
        TxnOutcome::NotCommitted { why, stalled } if writer == Writer::Shared && !stalled.is_empty() => {
            Counters::add(&ctx.counters.not_committed, 1);
            // Isolate the stalled partitions; every unit goes back to its partition's queue, in
            // order, for its committer's next transaction (nothing was written: the callers just
            // waited).
            let mut back: std::collections::BTreeMap<i32, Vec<Unit>> = std::collections::BTreeMap::new();
            for (p, u) in batch.units {
                back.entry(p).or_default().push(u);
            }
            for id in &stalled {
                let p = partition(ctx, *id);
                p.apply_mode(ModeEvent::StalledInShared, &ctx.policy);
                Counters::add(&ctx.counters.isolations, 1);
                tracing::warn!(partition = id, reason = %why, stall_ms = ctx.policy.stall_after.as_millis() as u64,
                    "partition stalled the shared transaction (aborted; nothing was written); writing it in transactions of its own until it is fast again");
            }
            for (id, units) in back {
                let p = partition(ctx, id);
                p.requeue(units);
                ctx.wake(p);
            }
            // The input's records too, at once: the next take sends those of the isolated
            // partitions to their own writers.
            crate::input::ended(ctx.input.as_ref(), input, Ended::Retry);
        }
        TxnOutcome::NotCommitted { why, .. } => {
            Counters::add(&ctx.counters.not_committed, 1);
            let events = records.iter().map(|r| r.events.len()).sum::<usize>();
            tracing::warn!(writer = ?writer, events, reason = %why, "transaction not committed; no version used");
            if let Writer::Partition(id) = writer {
                // Still in trouble: the clock before it may rejoin starts again.
                partition(ctx, id).apply_mode(ModeEvent::StalledInShared, &ctx.policy);
            }
            for (_, u) in batch.units {
                ctx.release(&u.events);
                let _ = u.done.send(Err(PublishError::NotWritten(why.clone())));
            }
            // Retried after a backoff, from where the committed offset says (nothing is lost).
            crate::input::ended(ctx.input.as_ref(), input, Ended::RetryLater);
        }
        TxnOutcome::Fenced { commit_sent } => {
            ctx.status.set_fenced();
            stopped(ctx, batch, commit_sent, PublishError::Fenced);
        }
        TxnOutcome::Fatal { why, commit_sent } => {
            ctx.status.set_failed(&why);
            stopped(ctx, batch, commit_sent, PublishError::NotReady);
        }
        TxnOutcome::InDoubt(why) => {
            Counters::add(&ctx.counters.in_doubt, 1);
            for p in &touched {
                partition(ctx, *p).set_activity(Activity::InDoubt);
            }
            tracing::warn!(writer = ?writer, partitions = ?touched, reason = %why,
                "transaction outcome unknown; asking the coordinator until it is known (no version of these partitions is handed out meanwhile)");
            let mut in_doubt = Vec::new();
            for (_, u) in batch.units {
                let _ = u.done.send(Err(PublishError::Unknown(why.clone())));
                in_doubt.extend(u.events);
            }
            if !resolve(ctx, writer, &records, &planned, &in_doubt, input).await {
                return false;
            }
        }
    }
    idle(ctx);
    true
}

/// Answers the units of a transaction that ended with writes stopped: `error` (nothing applied)
/// when the commit was not sent, "outcome unknown" when it was.
fn stopped<L>(ctx: &Ctx<L>, batch: Batch, commit_sent: bool, error: PublishError) {
    for (_, u) in batch.units {
        if commit_sent {
            let _ = u.done.send(Err(PublishError::Unknown("this publisher stopped while committing".into())));
        } else {
            ctx.release(&u.events);
            let _ = u.done.send(Err(error.clone()));
        }
    }
}

fn apply_committed<L>(ctx: &Ctx<L>, records: &[Record], offsets: &[i64]) {
    ctx.counters.committed(records);
    for (r, o) in records.iter().zip(offsets) {
        partition(ctx, r.partition).apply_committed(r, *o);
    }
}

fn answer_committed<L>(ctx: &Ctx<L>, batch: Batch, placed: &Placement, records: &[Record], offsets: &[i64]) {
    let (mut keys, now_ms) = (ctx.keys(), shared::event::now_ms());
    for ((_, u), slots) in batch.units.into_iter().zip(placed) {
        let published: Vec<Published> = slots
            .iter()
            .map(|(record, ev)| Published { channel: ev.channel.clone(), version: ev.version, partition: records[*record].partition, offset: offsets[*record] })
            .collect();
        for ((p, pb), (_, ev)) in u.events.iter().zip(&published).zip(slots) {
            if let Some(k) = &p.key {
                keys.finish(k, &p.fp, Some((pb.clone(), ev.published_at_ms)), now_ms);
            }
        }
        let _ = u.done.send(Ok(published));
    }
}

/// Asks until `writer`'s in-doubt transaction's outcome is known, then applies it. Returns `false`
/// when the committer must stop.
async fn resolve<L: EventLog>(ctx: &Ctx<L>, writer: Writer, records: &[Record], planned: &[PlannedSnapshots], in_doubt: &[Pending], input: Option<Take>) -> bool {
    let mut delay = Duration::from_millis(100);
    let started = Instant::now();
    loop {
        let r = tokio::select! {
            _ = ctx.stop.cancelled() => return false,
            r = ctx.log.resolve(writer) => r,
        };
        let waited_ms = started.elapsed().as_millis() as u64;
        match r {
            Ok(Resolution::Committed(offsets)) => {
                apply_snapshots(ctx, planned);
                apply_committed(ctx, records, &offsets);
                // Finished here (as `answer_committed` would have), kept from publish time.
                let (mut keys, now_ms) = (ctx.keys(), shared::event::now_ms());
                for (r, o) in records.iter().zip(&offsets) {
                    for (e, k) in r.events.iter().zip(&r.keys) {
                        if let Some(k) = k {
                            let fp = Fingerprint::of(&e.channel, &e.data);
                            keys.learn(k, fp, Published { channel: e.channel.clone(), version: e.version, partition: r.partition, offset: *o }, e.published_at_ms, now_ms);
                        }
                    }
                }
                tracing::info!(writer = ?writer, waited_ms, "the in-doubt transaction committed");
                crate::input::ended(ctx.input.as_ref(), input, Ended::Committed);
                return true;
            }
            Ok(Resolution::NotCommitted) => {
                Counters::add(&ctx.counters.not_committed, 1);
                ctx.release(in_doubt);
                tracing::info!(writer = ?writer, waited_ms, "the in-doubt transaction did not commit; no version used");
                crate::input::ended(ctx.input.as_ref(), input, Ended::RetryLater);
                return true;
            }
            Ok(Resolution::Fenced) => {
                ctx.status.set_fenced();
                return true;
            }
            Ok(Resolution::Fatal(why)) => {
                ctx.status.set_failed(&why);
                return true;
            }
            Err(e) => {
                tracing::warn!(writer = ?writer, error = %e, waited_ms, "transaction outcome still unknown; asking again");
                tokio::select! {
                    _ = ctx.stop.cancelled() => return false,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
