//! One partition's committer: it alone hands out the versions of the partition's canvases.
//!
//! Publishes for a partition queue up as *units* (one publish, or one canvas's events of a batch,
//! which must commit together and in order). The committer takes everything waiting (up to
//! [`MAX_TXN_EVENTS`], whole units), gives each canvas's events the next versions after its
//! committed head, writes them as records (a canvas's consecutive events share a record, up to
//! [`MAX_EVENTS_PER_RECORD`]) in **one Kafka transaction**, and only once it committed applies
//! them to the heads and answers 201. So a transaction takes whatever arrived while the previous
//! one was committing: there is no commit interval to tune, one transaction is in flight per
//! partition, and under load each carries more events (Kafka Streams under exactly-once commits
//! every `commit.interval.ms`, 100 ms by default; that would be the latency floor here).
//!
//! - Aborted / never begun ([`TxnOutcome::NotCommitted`]): nothing is applied, no version used,
//!   every caller gets 503 `kafka_unavailable`; their idempotency keys are released.
//! - Commit not confirmed ([`TxnOutcome::InDoubt`]): callers get 503 `kafka_outcome_unknown`; the
//!   committer then asks the transaction coordinator again ([`EventLog::resolve`], with backoff)
//!   until it knows, and hands out no version of this partition meanwhile (new publishes wait, then
//!   time out in the queue with a definite "not written"). Their keys stay in flight until then, so
//!   a retry with the same key is refused (409) until the outcome is known, then replayed or run.
//! - Fenced: the whole publisher stops accepting writes ([`Status`]).
//!
//! A stalled partition (its leader gone, its follower stuck) stalls only its own committer.

use crate::idempotency::KeyStore;
use crate::log::{EventLog, Record, Resolution, TxnOutcome};
use crate::types::{Fingerprint, PublishError, Published};
use shared::event::MAX_EVENTS_PER_RECORD;
use shared::{Canvas, CanvasDims, CanvasId, PixelEvent};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

/// Most events one transaction carries (whole units: a unit is at most a batch's 1,000 events, so
/// one always fits).
pub const MAX_TXN_EVENTS: usize = 2_000;

/// One publish waiting in a unit.
#[derive(Debug, Clone)]
pub struct Pending {
    pub fp: Fingerprint,
    /// Its `Idempotency-Key` (already marked in flight in the key store).
    pub key: Option<String>,
}

/// The answer to a unit: one [`Published`] per event, in order.
pub type UnitAnswer = Result<Vec<Published>, PublishError>;

/// Events of one canvas that commit together, in order.
struct Unit {
    id: u64,
    canvas: CanvasId,
    events: Vec<Pending>,
    done: oneshot::Sender<UnitAnswer>,
}

#[derive(Default)]
struct Queue {
    units: VecDeque<Unit>,
    next_id: u64,
}

/// The committed state of the partition's canvases.
struct Book {
    dims: CanvasDims,
    heads: HashMap<CanvasId, Canvas>,
    /// The position after the last record known to be in the log (where a read for what is not
    /// known yet starts).
    end: i64,
}

/// What a lane is doing, for `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneState {
    Idle,
    Committing,
    /// A commit was not confirmed; the committer is asking until it knows.
    InDoubt,
}

/// The publisher's write state, shared by every lane.
#[derive(Debug, Default)]
pub struct Status {
    /// 0: preparing, 1: accepting writes, 2: fenced.
    state: AtomicU8,
    /// Notified once when fenced.
    pub fenced_now: Notify,
}

impl Status {
    /// Accepting writes.
    pub fn set_ready(&self) {
        let _ = self.state.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Another publisher took over: no more writes, ever.
    pub fn set_fenced(&self) {
        if self.state.swap(2, Ordering::AcqRel) != 2 {
            tracing::warn!("fenced: another publisher started on this topic (same transactional.id); this one accepts no more writes");
            self.fenced_now.notify_waiters();
            self.fenced_now.notify_one();
        }
    }

    /// Whether writes are accepted.
    pub fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == 1
    }

    /// Whether another publisher took over.
    pub fn is_fenced(&self) -> bool {
        self.state.load(Ordering::Acquire) == 2
    }
}

/// What the committers did since start, for `/health`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Transactions committed.
    pub committed: std::sync::atomic::AtomicU64,
    /// Events and records in them.
    pub events: std::sync::atomic::AtomicU64,
    pub records: std::sync::atomic::AtomicU64,
    /// Transactions that certainly did not commit (aborted, or never began).
    pub not_committed: std::sync::atomic::AtomicU64,
    /// Commits that were not confirmed in time (each then resolved by asking again).
    pub in_doubt: std::sync::atomic::AtomicU64,
}

impl Counters {
    fn add(n: &std::sync::atomic::AtomicU64, by: usize) {
        n.fetch_add(by as u64, Ordering::Relaxed);
    }

    fn committed(&self, records: &[Record]) {
        Self::add(&self.committed, 1);
        Self::add(&self.records, records.len());
        Self::add(&self.events, records.iter().map(|r| r.events.len()).sum());
    }

    /// `{"committed","events","records","not_committed","in_doubt"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let get = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
        serde_json::json!({
            "committed": get(&self.committed),
            "events": get(&self.events),
            "records": get(&self.records),
            "not_committed": get(&self.not_committed),
            "in_doubt": get(&self.in_doubt),
        })
    }
}

/// One partition: its queue of units, its committed heads, its state.
pub struct Lane {
    pub partition: i32,
    queue: Mutex<Queue>,
    wake: Notify,
    book: Mutex<Book>,
    state: Mutex<LaneState>,
}

impl Lane {
    /// A lane whose canvases (of size `dims`) are at `heads` and whose log position is `end`.
    pub fn new(partition: i32, dims: CanvasDims, heads: HashMap<CanvasId, Canvas>, end: i64) -> Self {
        Self {
            partition,
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            book: Mutex::new(Book { dims, heads, end }),
            state: Mutex::new(LaneState::Idle),
        }
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().expect("queue lock is never poisoned: no panics while held")
    }

    fn lock_book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().expect("book lock is never poisoned: no panics while held")
    }

    /// Queues `events` of `canvas` as one unit; returns its id and where its answer comes.
    pub fn push(&self, canvas: CanvasId, events: Vec<Pending>) -> (u64, oneshot::Receiver<UnitAnswer>) {
        let (done, answer) = oneshot::channel();
        let id = {
            let mut q = self.lock_queue();
            q.next_id += 1;
            let id = q.next_id;
            q.units.push_back(Unit { id, canvas, events, done });
            id
        };
        self.wake.notify_one();
        (id, answer)
    }

    /// Takes unit `id` back out of the queue if no transaction took it yet (its events are then
    /// certainly not written).
    pub fn withdraw(&self, id: u64) -> Option<Vec<Pending>> {
        let mut q = self.lock_queue();
        let i = q.units.iter().position(|u| u.id == id)?;
        q.units.remove(i).map(|u| u.events)
    }

    /// Waits for units and takes the oldest ones, at most [`MAX_TXN_EVENTS`] events (at least one
    /// unit).
    async fn take(&self) -> Vec<Unit> {
        loop {
            {
                let mut q = self.lock_queue();
                if !q.units.is_empty() {
                    let mut out = Vec::new();
                    let mut events = 0;
                    while let Some(u) = q.units.front() {
                        if !out.is_empty() && events + u.events.len() > MAX_TXN_EVENTS {
                            break;
                        }
                        events += u.events.len();
                        out.extend(q.units.pop_front());
                    }
                    return out;
                }
            }
            self.wake.notified().await;
        }
    }

    /// The committed version and hash of `canvas`, if it has events.
    pub fn truth(&self, canvas: &CanvasId) -> Option<(u64, String)> {
        self.lock_book().heads.get(canvas).map(|c| (c.version(), c.hash()))
    }

    /// Canvases with at least one committed event.
    pub fn canvas_count(&self) -> usize {
        self.lock_book().heads.len()
    }

    /// What the lane is doing.
    pub fn state(&self) -> LaneState {
        *self.state.lock().expect("state lock")
    }

    fn set_state(&self, s: LaneState) {
        *self.state.lock().expect("state lock") = s;
    }

    /// Applies committed records (at `offsets`) to the heads.
    fn apply_committed(&self, records: &[Record], offsets: &[i64]) {
        let mut book = self.lock_book();
        for (r, offset) in records.iter().zip(offsets) {
            for ev in &r.events {
                book.apply(ev, *offset);
            }
            book.end = book.end.max(offset + 1);
        }
    }
}

impl Book {
    /// Applies one event read from or written to the log (at `offset`) to its canvas's head.
    fn apply(&mut self, ev: &PixelEvent, offset: i64) {
        apply(&mut self.heads, self.dims, ev, offset);
    }
}

/// Applies one event read from or written to the log (at `offset`) to its canvas's head in
/// `heads` (a new canvas of size `dims` when it has none).
pub fn apply(heads: &mut HashMap<CanvasId, Canvas>, dims: CanvasDims, ev: &PixelEvent, offset: i64) {
    let head = heads.entry(ev.canvas.clone()).or_insert_with(|| Canvas::new(dims));
    if let shared::canvas::Applied::Gap { expected } = head.apply(ev) {
        tracing::error!(canvas = %ev.canvas, expected, got = ev.version, offset, "the log skips versions of this canvas");
    }
}

/// Where each event of each unit went: (record index, its event).
type Placement = Vec<Vec<(usize, PixelEvent)>>;

/// Gives the units' events their versions (each canvas continues from its committed head, in
/// queue order) and groups each canvas's events into records of at most
/// [`MAX_EVENTS_PER_RECORD`]. Pure: `heads` are not changed.
fn plan(heads: &HashMap<CanvasId, Canvas>, units: &[(CanvasId, Vec<Pending>)], now_ms: u64) -> (Vec<Record>, Placement) {
    // Each canvas's events in queue order: (unit, event index).
    let mut order: Vec<CanvasId> = Vec::new();
    let mut of_canvas: HashMap<&CanvasId, Vec<(usize, usize)>> = HashMap::new();
    for (u, (canvas, events)) in units.iter().enumerate() {
        let list = of_canvas.entry(canvas).or_insert_with(|| {
            order.push(canvas.clone());
            Vec::new()
        });
        list.extend((0..events.len()).map(|i| (u, i)));
    }
    let mut records: Vec<Record> = Vec::new();
    let mut placed: Placement = units.iter().map(|(_, e)| Vec::with_capacity(e.len())).collect();
    let mut slots: Vec<Vec<Option<(usize, PixelEvent)>>> = units.iter().map(|(_, e)| vec![None; e.len()]).collect();
    for canvas in &order {
        let base = heads.get(canvas).map_or(0, Canvas::version);
        for (chunk_no, chunk) in of_canvas[canvas].chunks(MAX_EVENTS_PER_RECORD).enumerate() {
            let record = records.len();
            let mut r = Record { events: Vec::with_capacity(chunk.len()), keys: Vec::with_capacity(chunk.len()) };
            for (i, &(u, e)) in chunk.iter().enumerate() {
                let p = &units[u].1[e];
                let ev = PixelEvent {
                    canvas: canvas.clone(),
                    version: base + (chunk_no * MAX_EVENTS_PER_RECORD + i) as u64 + 1,
                    x: p.fp.x,
                    y: p.fp.y,
                    color: p.fp.color,
                    published_at_ms: now_ms,
                };
                r.events.push(ev.clone());
                r.keys.push(p.key.clone());
                slots[u][e] = Some((record, ev));
            }
            records.push(r);
        }
    }
    for (u, s) in slots.into_iter().enumerate() {
        placed[u] = s.into_iter().map(|x| x.expect("every event was placed")).collect();
    }
    (records, placed)
}

/// What a lane's task needs besides the lane.
pub struct Ctx<L> {
    pub log: Arc<L>,
    pub keys: Arc<Mutex<KeyStore>>,
    pub status: Arc<Status>,
    pub counters: Arc<Counters>,
    pub stop: CancellationToken,
}

impl<L> Ctx<L> {
    fn keys(&self) -> std::sync::MutexGuard<'_, KeyStore> {
        self.keys.lock().expect("key store lock is never poisoned: no panics while held")
    }

    /// Releases the keys of `events` (certainly not applied).
    fn release(&self, events: impl IntoIterator<Item = Pending>) {
        let mut keys = self.keys();
        for p in events {
            if let Some(k) = &p.key {
                keys.finish(k, &p.fp, None);
            }
        }
    }
}

/// The committer of `lane` (runs until `ctx.stop`).
pub async fn run<L: EventLog>(lane: Arc<Lane>, ctx: Ctx<L>) {
    loop {
        let units = tokio::select! {
            _ = ctx.stop.cancelled() => return,
            u = lane.take() => u,
        };
        if ctx.status.is_fenced() {
            for u in units {
                ctx.release(u.events);
                let _ = u.done.send(Err(PublishError::Fenced));
            }
            continue;
        }
        let (records, placed) = {
            let book = lane.lock_book();
            let view: Vec<(CanvasId, Vec<Pending>)> = units.iter().map(|u| (u.canvas.clone(), u.events.clone())).collect();
            plan(&book.heads, &view, shared::event::now_ms())
        };
        lane.set_state(LaneState::Committing);
        let outcome = tokio::select! {
            _ = ctx.stop.cancelled() => return,
            o = ctx.log.transact(lane.partition, records.clone()) => o,
        };
        match outcome {
            TxnOutcome::Committed(offsets) => {
                ctx.counters.committed(&records);
                lane.apply_committed(&records, &offsets);
                answer_committed(&ctx, lane.partition, units, &placed, &offsets);
            }
            TxnOutcome::NotCommitted(why) => {
                Counters::add(&ctx.counters.not_committed, 1);
                let versions = records.iter().map(|r| r.events.len()).sum::<usize>();
                tracing::warn!(partition = lane.partition, events = versions, reason = %why, "transaction not committed; no version used");
                for u in units {
                    ctx.release(u.events);
                    let _ = u.done.send(Err(PublishError::NotWritten(why.clone())));
                }
            }
            TxnOutcome::Fenced { commit_sent } => {
                ctx.status.set_fenced();
                for u in units {
                    if commit_sent {
                        let _ = u.done.send(Err(PublishError::Unknown("fenced by another publisher while committing".into())));
                    } else {
                        ctx.release(u.events);
                        let _ = u.done.send(Err(PublishError::Fenced));
                    }
                }
            }
            TxnOutcome::InDoubt(why) => {
                Counters::add(&ctx.counters.in_doubt, 1);
                lane.set_state(LaneState::InDoubt);
                tracing::warn!(partition = lane.partition, reason = %why,
                    "transaction outcome unknown; asking the coordinator until it is known (no version of this partition is handed out meanwhile)");
                let mut in_doubt = Vec::new();
                for u in units {
                    in_doubt.push(u.events);
                    let _ = u.done.send(Err(PublishError::Unknown(why.clone())));
                }
                if !resolve(&lane, &ctx, &records, in_doubt).await {
                    return;
                }
            }
        }
        lane.set_state(LaneState::Idle);
    }
}

fn answer_committed<L>(ctx: &Ctx<L>, partition: i32, units: Vec<Unit>, placed: &Placement, offsets: &[i64]) {
    let mut keys = ctx.keys();
    for (u, slots) in units.into_iter().zip(placed) {
        let published: Vec<Published> = slots
            .iter()
            .map(|(record, ev)| Published { canvas: ev.canvas.clone(), version: ev.version, partition, offset: offsets[*record] })
            .collect();
        for (p, pb) in u.events.iter().zip(&published) {
            if let Some(k) = &p.key {
                keys.finish(k, &p.fp, Some(pb.clone()));
            }
        }
        let _ = u.done.send(Ok(published));
    }
}

/// Asks until the in-doubt transaction's outcome is known, then applies it. Returns `false` when
/// the lane must stop.
async fn resolve<L: EventLog>(lane: &Lane, ctx: &Ctx<L>, records: &[Record], in_doubt: Vec<Vec<Pending>>) -> bool {
    let mut delay = Duration::from_millis(100);
    let started = std::time::Instant::now();
    loop {
        let r = tokio::select! {
            _ = ctx.stop.cancelled() => return false,
            r = ctx.log.resolve(lane.partition) => r,
        };
        match r {
            Ok(Resolution::Committed(offsets)) => {
                ctx.counters.committed(records);
                lane.apply_committed(records, &offsets);
                let mut keys = ctx.keys();
                for (r, o) in records.iter().zip(&offsets) {
                    for (e, k) in r.events.iter().zip(&r.keys) {
                        if let Some(k) = k {
                            let fp = Fingerprint { canvas: e.canvas.clone(), x: e.x, y: e.y, color: e.color };
                            keys.learn(k, fp, Published { canvas: e.canvas.clone(), version: e.version, partition: lane.partition, offset: *o });
                        }
                    }
                }
                drop(keys);
                drop(in_doubt);
                tracing::info!(partition = lane.partition, waited_ms = started.elapsed().as_millis() as u64, "the in-doubt transaction committed");
                return true;
            }
            Ok(Resolution::NotCommitted) => {
                Counters::add(&ctx.counters.not_committed, 1);
                ctx.release(in_doubt.into_iter().flatten());
                tracing::info!(partition = lane.partition, waited_ms = started.elapsed().as_millis() as u64,
                    "the in-doubt transaction did not commit; no version used");
                return true;
            }
            Ok(Resolution::Reinitialised) => {
                let from = lane.lock_book().end;
                let read = loop {
                    match ctx.log.read_partition(lane.partition, from).await {
                        Ok(r) => break r,
                        Err(e) => {
                            tracing::warn!(partition = lane.partition, error = %e, "reading the partition after the in-doubt transaction failed; retrying");
                            tokio::select! {
                                _ = ctx.stop.cancelled() => return false,
                                _ = tokio::time::sleep(delay) => {}
                            }
                        }
                    }
                };
                let (events, end) = read;
                {
                    let mut book = lane.lock_book();
                    for le in &events {
                        book.apply(&le.event, le.offset);
                    }
                    book.end = book.end.max(end);
                }
                let mut keys = ctx.keys();
                for le in &events {
                    if let Some(k) = &le.idempotency_key {
                        let ev = &le.event;
                        let fp = Fingerprint { canvas: ev.canvas.clone(), x: ev.x, y: ev.y, color: ev.color };
                        keys.learn(k, fp, Published { canvas: ev.canvas.clone(), version: ev.version, partition: le.partition, offset: le.offset });
                    }
                }
                drop(keys);
                // Keys of the in-doubt events that are not in the log: certainly not applied.
                ctx.release(in_doubt.into_iter().flatten());
                tracing::info!(partition = lane.partition, found = events.len(), from_offset = from, end,
                    "the in-doubt transaction is finished; read its partition to learn what committed");
                return true;
            }
            Ok(Resolution::Fenced) => {
                ctx.status.set_fenced();
                return true;
            }
            Err(e) => {
                tracing::warn!(partition = lane.partition, error = %e, waited_ms = started.elapsed().as_millis() as u64,
                    "transaction outcome still unknown; asking again");
                tokio::select! {
                    _ = ctx.stop.cancelled() => return false,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::Color;

    fn id(s: &str) -> CanvasId {
        CanvasId::parse(s).unwrap()
    }

    fn pending(canvas: &str, x: u32, key: Option<&str>) -> Pending {
        Pending { fp: Fingerprint { canvas: id(canvas), x, y: 0, color: Color([1, 2, 3]) }, key: key.map(str::to_owned) }
    }

    /// (units as (canvas, events), committed heads) → versions per unit and records (canvas,
    /// first version, events).
    #[test]
    fn plan_table() {
        let mut heads = HashMap::new();
        let mut c = Canvas::new(CanvasDims { width: 8, height: 8 });
        for v in 1..=4 {
            c.apply(&PixelEvent { canvas: id("a"), version: v, x: 0, y: 0, color: Color([0, 0, 0]), published_at_ms: 0 });
        }
        heads.insert(id("a"), c);
        type Case = (&'static str, Vec<(&'static str, usize)>, Vec<Vec<u64>>, Vec<(&'static str, u64, usize)>);
        let cases: Vec<Case> = vec![
            ("one publish continues the head", vec![("a", 1)], vec![vec![5]], vec![("a", 5, 1)]),
            ("a new canvas starts at 1", vec![("b", 1)], vec![vec![1]], vec![("b", 1, 1)]),
            (
                "units of one canvas share a record, in queue order",
                vec![("a", 1), ("b", 2), ("a", 2)],
                vec![vec![5], vec![1, 2], vec![6, 7]],
                vec![("a", 5, 3), ("b", 1, 2)],
            ),
            ("a batch of 600 for one canvas: records of 256, 256, 88", vec![("b", 600)], vec![(1..=600).collect()], vec![("b", 1, 256), ("b", 257, 256), ("b", 513, 88)]),
        ];
        for (name, units, want_versions, want_records) in cases {
            let units: Vec<(CanvasId, Vec<Pending>)> =
                units.iter().map(|(c, n)| (id(c), (0..*n).map(|i| pending(c, i as u32 % 8, None)).collect())).collect();
            let (records, placed) = plan(&heads, &units, 7);
            let versions: Vec<Vec<u64>> = placed.iter().map(|u| u.iter().map(|(_, e)| e.version).collect()).collect();
            assert_eq!(versions, want_versions, "{name}");
            let shape: Vec<(&str, u64, usize)> = records.iter().map(|r| (r.events[0].canvas.as_str(), r.events[0].version, r.events.len())).collect();
            let want: Vec<(&str, u64, usize)> = want_records;
            assert_eq!(shape, want, "{name}");
            for (u, slots) in placed.iter().enumerate() {
                for (e, (rec, ev)) in slots.iter().enumerate() {
                    assert!(records[*rec].events.contains(ev), "{name}: unit {u} event {e} is not in record {rec}");
                    assert_eq!(ev.x, units[u].1[e].fp.x, "{name}: the event carries its own pixel");
                }
            }
        }
        assert_eq!(heads[&id("a")].version(), 4, "planning changes no head");
    }

    #[test]
    fn a_unit_still_queued_can_be_withdrawn_once() {
        let lane = Lane::new(0, CanvasDims::default(), HashMap::new(), 0);
        let (first, _a) = lane.push(id("a"), vec![pending("a", 0, Some("k"))]);
        let (second, _b) = lane.push(id("a"), vec![pending("a", 1, None)]);
        let back = lane.withdraw(first).expect("still queued");
        assert_eq!(back[0].key.as_deref(), Some("k"));
        assert!(lane.withdraw(first).is_none());
        assert!(lane.withdraw(second).is_some());
    }

    #[tokio::test]
    async fn a_transaction_takes_whole_units_up_to_the_bound() {
        let lane = Lane::new(0, CanvasDims::default(), HashMap::new(), 0);
        let many = |n: usize| (0..n).map(|i| pending("a", i as u32 % 8, None)).collect::<Vec<_>>();
        let _keep: Vec<_> = [1_000, 900, 200, 5].iter().map(|n| lane.push(id("a"), many(*n)).1).collect();
        let sizes = |units: Vec<Unit>| units.iter().map(|u| u.events.len()).collect::<Vec<_>>();
        assert_eq!(sizes(lane.take().await), vec![1_000, 900], "1,900 fit; 2,100 would not");
        assert_eq!(sizes(lane.take().await), vec![200, 5]);
        let _big = lane.push(id("a"), many(MAX_TXN_EVENTS + 1)).1;
        assert_eq!(sizes(lane.take().await), vec![MAX_TXN_EVENTS + 1], "a unit over the bound still goes, alone");
    }
}
