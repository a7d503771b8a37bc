//! Per-canvas versions: contiguous from 1, never burned by a failed publish, rebuilt from the log.
//!
//! Each canvas has a head (its canvas state and version) behind its own async mutex, held across
//! the append: version `v + 1` is only handed out after the broker acknowledged the record with
//! `v`, or after its append failed and was accounted for. Canvases do not wait for each other.
//!
//! Group commit: publishes to a canvas queue up while its previous record is in flight; the next
//! request to take the head appends *all* of them (up to [`MAX_EVENTS_PER_RECORD`]) as one record
//! with consecutive versions, in arrival order, and answers each. A record lands whole or not at
//! all, so a group cannot leave a gap either; and a canvas takes as many publishes per second as
//! arrive, not one per Kafka round trip. (Several records of one canvas in flight at once would
//! also lift that ceiling, but one of them failing while a later one lands leaves a version gap no
//! consumer can close; librdkafka's idempotent producer does not rule that out for timeouts.)
//!
//! When a publish fails with an unknown outcome (the ack timed out after the request was sent) the
//! record may be in the log. The head is marked *uncertain*; the next publish to that canvas first
//! reads its partition from just after the canvas's last known record and applies what it finds, so
//! the version it hands out is always the log's head + 1 (no version twice, none skipped).

use crate::idempotency::{Applied, Fingerprint, KeyStore, Lookup};
use crate::log::{AppendError, EventLog, LoggedEvent, ReadError};
use shared::partitioner::partition_for;
use shared::replay::Offsets;
use shared::event::MAX_EVENTS_PER_RECORD;
use shared::{Canvas, CanvasDims, CanvasId, Color, PixelEvent};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The answer to an accepted publish: `201 {"canvas","version","partition","offset"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Published {
    pub canvas: CanvasId,
    pub version: u64,
    pub partition: i32,
    pub offset: i64,
}

/// A canvas as the publisher knows it: `{"canvas","version","hash"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CanvasTruth {
    pub canvas: CanvasId,
    pub version: u64,
    /// Hex SHA-256 of the canonical bytes.
    pub hash: String,
}

/// Why a publish was not accepted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PublishError {
    /// The head was not rebuilt from the log yet: retry later.
    #[error("the publisher is rebuilding canvas versions from the log")]
    NotReady,
    /// Kafka certainly did not write the record: nothing was applied; retry.
    #[error("kafka did not write the event: {0}")]
    NotWritten(String),
    /// Kafka did not acknowledge in time: the record may or may not be in the log. A retry with
    /// the same `Idempotency-Key` applies it exactly once.
    #[error("kafka did not acknowledge the event in time: {0}")]
    Unknown(String),
    /// The `Idempotency-Key` was used before with another request.
    #[error("the Idempotency-Key was already used with a different request")]
    KeyConflict,
    /// The first request with this `Idempotency-Key` is still running.
    #[error("a request with this Idempotency-Key is still running")]
    KeyInFlight,
    /// The pixel is outside the canvas.
    #[error("{field} must be below {limit}")]
    OutOfBounds { field: &'static str, limit: u32 },
}

/// A publish waiting for its canvas's next record.
struct Waiting {
    fp: Fingerprint,
    key: Option<String>,
    done: tokio::sync::oneshot::Sender<Result<(Published, bool), PublishError>>,
}

/// One canvas: its head, and the publishes waiting to go out in its next record.
struct Slot {
    head: tokio::sync::Mutex<Head>,
    waiting: Mutex<VecDeque<Waiting>>,
}

impl Slot {
    fn new(head: Head) -> Self {
        Self { head: tokio::sync::Mutex::new(head), waiting: Mutex::new(VecDeque::new()) }
    }

    /// Takes the oldest waiting publishes, at most a record's worth.
    fn take_group(&self) -> Vec<Waiting> {
        let mut w = self.waiting.lock().expect("waiting lock is never poisoned: no panics while held");
        let n = w.len().min(MAX_EVENTS_PER_RECORD);
        w.drain(..n).collect()
    }
}

#[derive(Debug)]
struct Head {
    canvas: Canvas,
    /// Offset of the canvas's last record in the log, when known.
    last_offset: Option<i64>,
    /// A publish failed with an unknown outcome: read the log before the next one.
    uncertain: bool,
}

/// The version authority for every canvas.
pub struct Versions<L> {
    pub(crate) log: L,
    dims: CanvasDims,
    /// Partition count of the topic; 0 until known (then the publisher is not ready anyway).
    partitions: std::sync::atomic::AtomicU32,
    heads: Mutex<HashMap<CanvasId, Arc<Slot>>>,
    /// High watermark of each partition when the heads were rebuilt: every record below it is
    /// already accounted for, so reconciliation of a canvas never reads before it.
    floors: Mutex<Offsets>,
    keys: Mutex<KeyStore>,
    ready: AtomicBool,
}

/// Idempotency keys remembered (the most recent ones).
pub const KEYS_REMEMBERED: usize = 100_000;

impl<L: EventLog> Versions<L> {
    /// An authority over `log` for a topic of `partitions` partitions (0: not known yet, see
    /// [`Versions::set_partitions`]). Not ready until [`Versions::rebuild`] ran.
    pub fn new(log: L, dims: CanvasDims, partitions: u32) -> Self {
        Self {
            log,
            dims,
            partitions: std::sync::atomic::AtomicU32::new(partitions),
            heads: Mutex::new(HashMap::new()),
            floors: Mutex::new(Offsets::new()),
            keys: Mutex::new(KeyStore::new(KEYS_REMEMBERED)),
            ready: AtomicBool::new(false),
        }
    }

    /// Whether writes are accepted (the heads were rebuilt from the log).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The canvas size.
    pub fn dims(&self) -> CanvasDims {
        self.dims
    }

    /// Partition count of the topic (0 until known).
    pub fn partitions(&self) -> u32 {
        self.partitions.load(Ordering::Acquire)
    }

    /// Sets the topic's partition count, once it is known (before [`Versions::rebuild`]).
    pub fn set_partitions(&self, n: u32) {
        self.partitions.store(n, Ordering::Release);
    }

    /// Reads the whole topic and sets every canvas's head to the last version in the log, then
    /// accepts writes. Returns the number of records read.
    ///
    /// # Errors
    /// [`ReadError`] when the log cannot be read; the publisher stays not ready.
    pub async fn rebuild(&self) -> Result<usize, ReadError> {
        let (records, high) = self.log.read_all().await?;
        let n = records.len();
        {
            let mut heads = self.lock_heads();
            heads.clear();
            let mut by_canvas: HashMap<CanvasId, Head> = HashMap::new();
            let mut keys = self.lock_keys();
            for rec in &records {
                let head = by_canvas.entry(rec.event.canvas.clone()).or_insert_with(|| Head {
                    canvas: Canvas::new(self.dims),
                    last_offset: None,
                    uncertain: false,
                });
                apply_logged(head, rec.offset, &rec.event);
                learn_key(&mut keys, rec);
            }
            drop(keys);
            for (id, head) in by_canvas {
                heads.insert(id, Arc::new(Slot::new(head)));
            }
        }
        *self.floors.lock().expect("floors lock") = high;
        self.ready.store(true, Ordering::Release);
        Ok(n)
    }

    fn lock_heads(&self) -> std::sync::MutexGuard<'_, HashMap<CanvasId, Arc<Slot>>> {
        self.heads.lock().expect("heads lock is never poisoned: no panics while held")
    }

    fn lock_keys(&self) -> std::sync::MutexGuard<'_, KeyStore> {
        self.keys.lock().expect("key store lock is never poisoned: no panics while held")
    }

    fn slot(&self, canvas: &CanvasId) -> Arc<Slot> {
        self.lock_heads()
            .entry(canvas.clone())
            .or_insert_with(|| Arc::new(Slot::new(Head { canvas: Canvas::new(self.dims), last_offset: None, uncertain: false })))
            .clone()
    }

    /// The partition of `canvas`.
    pub fn partition_of(&self, canvas: &CanvasId) -> i32 {
        partition_for(canvas.as_str().as_bytes(), self.partitions().max(1)) as i32
    }

    /// Publishes one pixel change: hands out the canvas's next version, appends it to the log
    /// (alone, or in one record with other publishes to the canvas that waited for the same
    /// round trip) and returns once the broker acknowledged it.
    ///
    /// # Errors
    /// See [`Versions::publish_with_key`].
    pub async fn publish(&self, canvas: &CanvasId, x: u32, y: u32, color: Color) -> Result<Published, PublishError> {
        self.publish_with_key(canvas, x, y, color, None).await.map(|(p, _)| p)
    }

    /// Publishes one pixel change, at most once per `idempotency_key`: returns the result and
    /// whether it is the replay of an earlier request with the same key.
    ///
    /// # Errors
    /// [`PublishError::NotReady`] before the rebuild, [`PublishError::OutOfBounds`] for a pixel
    /// outside the canvas (nothing is published), [`PublishError::NotWritten`] /
    /// [`PublishError::Unknown`] when Kafka did not acknowledge (the version is not burned: the
    /// next publish gets it, or the version after it when reconciliation finds the record did
    /// land), [`PublishError::KeyConflict`] / [`PublishError::KeyInFlight`] for a reused key.
    pub async fn publish_with_key(
        &self,
        canvas: &CanvasId,
        x: u32,
        y: u32,
        color: Color,
        idempotency_key: Option<&str>,
    ) -> Result<(Published, bool), PublishError> {
        if !self.is_ready() {
            return Err(PublishError::NotReady);
        }
        if x >= self.dims.width {
            return Err(PublishError::OutOfBounds { field: "x", limit: self.dims.width });
        }
        if y >= self.dims.height {
            return Err(PublishError::OutOfBounds { field: "y", limit: self.dims.height });
        }
        let fp = Fingerprint { canvas: canvas.clone(), x, y, color };
        let Some(key) = idempotency_key else {
            return self.publish_once(&fp, None).await;
        };
        match self.lock_keys().begin(key, &fp) {
            Lookup::New => {}
            Lookup::Replay(p) => return Ok((p, true)),
            Lookup::Conflict => return Err(PublishError::KeyConflict),
            Lookup::InFlight => return Err(PublishError::KeyInFlight),
        }
        let result = self.publish_once(&fp, Some(key)).await;
        let applied = result.as_ref().ok().map(|(p, _)| p.clone());
        self.lock_keys().finish(key, &fp, applied);
        result
    }

    /// Queues the publish for its canvas's next record and waits for its answer. Whoever takes
    /// the head appends every publish waiting then (see the module docs). Callers run it in a task
    /// of its own: a publish that stops waiting may still be written by another request's append.
    async fn publish_once(&self, fp: &Fingerprint, key: Option<&str>) -> Result<(Published, bool), PublishError> {
        let slot = self.slot(&fp.canvas);
        let (done, mut answer) = tokio::sync::oneshot::channel();
        slot.waiting
            .lock()
            .expect("waiting lock is never poisoned: no panics while held")
            .push_back(Waiting { fp: fp.clone(), key: key.map(str::to_owned), done });
        loop {
            // The answer comes from whichever request appends this publish; waiting for the head
            // only to read it would queue behind the next append (a whole extra round trip).
            let mut head = tokio::select! {
                biased;
                r = &mut answer => return r.unwrap_or_else(|_| Err(PublishError::Unknown("the append carrying this publish ended without an answer".into()))),
                head = slot.head.lock() => head,
            };
            if let Ok(r) = answer.try_recv() {
                return r;
            }
            // This publish is still waiting (no earlier append took it): append what waits.
            let group = slot.take_group();
            self.commit(&fp.canvas, &mut head, group).await;
        }
    }

    /// Appends `group` (publishes to `canvas`, in arrival order) as one record with the next
    /// versions, and answers each of them.
    async fn commit(&self, canvas: &CanvasId, head: &mut Head, group: Vec<Waiting>) {
        let partition = self.partition_of(canvas);
        let mut group = group;
        if head.uncertain {
            if let Err(e) = self.reconcile(canvas, partition, head).await {
                for w in group {
                    let _ = w.done.send(Err(e.clone()));
                }
                return;
            }
            // An earlier attempt with one of these keys may be what landed (with this request, or
            // with another one: then the key is taken).
            let mut rest = Vec::with_capacity(group.len());
            for w in group {
                let found = w.key.as_deref().map_or(Applied::No, |k| self.lock_keys().applied_as(k, &w.fp));
                match found {
                    Applied::Same(p) => {
                        let _ = w.done.send(Ok((p, true)));
                    }
                    Applied::Other => {
                        let _ = w.done.send(Err(PublishError::KeyConflict));
                    }
                    Applied::No => rest.push(w),
                }
            }
            group = rest;
        }
        if group.is_empty() {
            return;
        }
        let now = shared::event::now_ms();
        let base = head.canvas.version();
        let events: Vec<PixelEvent> = group
            .iter()
            .zip(1..)
            .map(|(w, i)| PixelEvent { canvas: canvas.clone(), version: base + i, x: w.fp.x, y: w.fp.y, color: w.fp.color, published_at_ms: now })
            .collect();
        let keys: Vec<Option<&str>> = group.iter().map(|w| w.key.as_deref()).collect();
        let appended = self.log.append(partition, &events, &keys).await;
        drop(keys);
        let (first, last) = (base + 1, base + events.len() as u64);
        let error = match appended {
            Ok(offset) => {
                for (ev, w) in events.iter().zip(group) {
                    apply_logged(head, offset, ev);
                    let _ = w.done.send(Ok((Published { canvas: canvas.clone(), version: ev.version, partition, offset }, false)));
                }
                return;
            }
            Err(AppendError::NotWritten(e)) => {
                tracing::warn!(canvas = %canvas, versions = %format!("{first}..={last}"), error = %e, "publish failed; versions not used");
                PublishError::NotWritten(e)
            }
            Err(AppendError::Unknown(e)) => {
                tracing::warn!(canvas = %canvas, versions = %format!("{first}..={last}"), error = %e,
                    "publish outcome unknown; the next publish to this canvas reads the log first");
                head.uncertain = true;
                PublishError::Unknown(e)
            }
        };
        for w in group {
            let _ = w.done.send(Err(error.clone()));
        }
    }

    async fn reconcile(&self, canvas: &CanvasId, partition: i32, head: &mut Head) -> Result<(), PublishError> {
        let floor = self.floors.lock().expect("floors lock").get(&partition).copied().unwrap_or(0);
        let from = head.last_offset.map_or(floor, |o| (o + 1).max(floor));
        let records = self.log.read_partition(partition, from).await.map_err(|e| PublishError::Unknown(e.0))?;
        let before = head.canvas.version();
        let mut keys = self.lock_keys();
        for rec in records.iter().filter(|r| &r.event.canvas == canvas) {
            apply_logged(head, rec.offset, &rec.event);
            learn_key(&mut keys, rec);
        }
        drop(keys);
        tracing::info!(canvas = %canvas, partition, from_offset = from, before, after = head.canvas.version(),
            "reconciled canvas head with the log");
        head.uncertain = false;
        Ok(())
    }

    /// The publisher's truth for `canvas` (version 0 and the all-white hash when it has no events).
    pub async fn truth(&self, canvas: &CanvasId) -> Result<CanvasTruth, PublishError> {
        if !self.is_ready() {
            return Err(PublishError::NotReady);
        }
        let slot = self.lock_heads().get(canvas).cloned();
        Ok(match slot {
            Some(slot) => {
                let h = slot.head.lock().await;
                CanvasTruth { canvas: canvas.clone(), version: h.canvas.version(), hash: h.canvas.hash() }
            }
            None => CanvasTruth { canvas: canvas.clone(), version: 0, hash: Canvas::new(self.dims).hash() },
        })
    }

    /// Number of canvases with at least one event.
    pub fn canvas_count(&self) -> usize {
        self.lock_heads().len()
    }
}

/// Remembers the idempotency key a logged record carried.
fn learn_key(keys: &mut KeyStore, rec: &LoggedEvent) {
    if let Some(k) = &rec.idempotency_key {
        let ev = &rec.event;
        let fp = Fingerprint { canvas: ev.canvas.clone(), x: ev.x, y: ev.y, color: ev.color };
        let published = Published { canvas: ev.canvas.clone(), version: ev.version, partition: rec.partition, offset: rec.offset };
        keys.learn(k, fp, published);
    }
}

fn apply_logged(head: &mut Head, offset: i64, ev: &PixelEvent) {
    if let shared::canvas::Applied::Gap { expected } = head.canvas.apply(ev) {
        tracing::error!(canvas = %ev.canvas, expected, got = ev.version, offset,
            "the log skips versions of this canvas");
    }
    head.last_offset = Some(head.last_offset.map_or(offset, |o| o.max(offset)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::fake::{Fate, FakeLog};

    fn id(s: &str) -> CanvasId {
        CanvasId::parse(s).unwrap()
    }

    async fn ready(log: FakeLog) -> Arc<Versions<FakeLog>> {
        let v = Arc::new(Versions::new(log, CanvasDims { width: 8, height: 8 }, 3));
        v.rebuild().await.unwrap();
        v
    }

    fn assert_contiguous(versions: &[u64], canvas: &str) {
        let want: Vec<u64> = (1..=versions.len() as u64).collect();
        assert_eq!(versions, want.as_slice(), "versions of {canvas} in the log are not 1..=n in order");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn versions_stay_contiguous_under_concurrent_publishes() {
        let v = ready(FakeLog::new(3, |_| Fate::Ok)).await;
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let v = v.clone();
            tasks.push(tokio::spawn(async move {
                let canvas = id(["a", "b", "c", "d"][(i % 4) as usize]);
                v.publish(&canvas, i % 8, 0, Color([1, 2, 3])).await.unwrap()
            }));
        }
        let mut got: HashMap<String, Vec<u64>> = HashMap::new();
        for t in tasks {
            let p = t.await.unwrap();
            got.entry(p.canvas.to_string()).or_default().push(p.version);
        }
        for c in ["a", "b", "c", "d"] {
            let mut answered = got[c].clone();
            answered.sort();
            assert_contiguous(&answered, c);
            assert_contiguous(&v.log.events_of(c), c);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn publishes_waiting_for_a_round_trip_go_out_together_as_one_record() {
        let v = ready(FakeLog::new(3, |_| Fate::Ok)).await;
        let c = id("hot");
        let mut tasks = Vec::new();
        for i in 0..300u32 {
            let (v, c) = (v.clone(), c.clone());
            tasks.push(tokio::spawn(async move { v.publish_with_key(&c, i % 8, i / 8 % 8, Color([1, 1, 1]), Some(&format!("k{i}"))).await.unwrap().0 }));
        }
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        let in_log = v.log.events_of("hot");
        assert_contiguous(&in_log, "hot");
        let records = v.log.record_count();
        assert!(records < 300, "300 concurrent publishes to one canvas took {records} records: nothing was grouped");
        // Each answer names its version and the offset of the record that carries it.
        let recs = v.log.records.lock().unwrap();
        let part = &recs[&v.partition_of(&c)];
        let mut versions: Vec<u64> = answers.iter().map(|p| p.version).collect();
        versions.sort_unstable();
        assert_contiguous(&versions, "hot (answers)");
        for p in &answers {
            let rec = &part[p.offset as usize];
            assert!(rec.iter().any(|(e, _)| e.version == p.version), "version {} is not in the record at offset {}", p.version, p.offset);
        }
        // Inside a record the versions are consecutive and each event keeps its own key.
        for rec in part {
            assert!(rec.windows(2).all(|w| w[1].0.version == w[0].0.version + 1));
            assert!(rec.iter().all(|(_, k)| k.is_some()));
        }
        drop(recs);
        // A restarted publisher learns every key of every group from the log.
        let v = Arc::try_unwrap(v).ok().expect("the tasks ended");
        let restarted = Versions::new(v.log, CanvasDims { width: 8, height: 8 }, 3);
        restarted.rebuild().await.unwrap();
        for (i, p) in answers.iter().enumerate() {
            let i = i as u32;
            let again = restarted.publish_with_key(&c, i % 8, i / 8 % 8, Color([1, 1, 1]), Some(&format!("k{i}"))).await.unwrap();
            assert_eq!(again, (p.clone(), true));
        }
        assert_eq!(restarted.log.events_of("hot").len(), 300, "the replays wrote nothing");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_acknowledged_publish_is_answered_without_waiting_for_the_next_record() {
        let log = FakeLog::new(3, |_| Fate::Ok);
        let (first_ack, second_ack) = (log.gate(0), log.gate(1));
        let v = ready(log).await;
        let c = id("c1");
        let spawn = |x: u32| {
            let (v, c) = (v.clone(), c.clone());
            tokio::spawn(async move { v.publish(&c, x, 0, Color([4, 4, 4])).await })
        };
        let first = spawn(0);
        while v.log.attempts() < 1 {
            tokio::task::yield_now().await;
        }
        // A second publish arrives while the first's record is in flight: it waits for the head.
        let second = spawn(1);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        first_ack.notify_one();
        // The second's record is now in flight and not acknowledged: the first is answered anyway.
        let answered = tokio::time::timeout(std::time::Duration::from_secs(2), first).await;
        assert_eq!(answered.expect("the first publish waited for the next record's ack").unwrap().unwrap().version, 1);
        assert!(!second.is_finished());
        second_ack.notify_one();
        assert_eq!(second.await.unwrap().unwrap().version, 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failed_group_fails_every_publish_in_it_and_burns_no_version() {
        // Every other record fails; concurrent publishes to one canvas make multi-event records.
        let v = ready(FakeLog::new(3, |n| if n % 2 == 1 { Fate::FailNotWritten } else { Fate::Ok })).await;
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let v = v.clone();
            tasks.push(tokio::spawn(async move { v.publish(&id("hot"), i % 8, 0, Color([2, 2, 2])).await.ok() }));
        }
        let mut answered = Vec::new();
        for t in tasks {
            answered.extend(t.await.unwrap().map(|p| p.version));
        }
        assert!(answered.len() < 200, "half the records failed: some publishes must have been refused");
        answered.sort_unstable();
        let in_log = v.log.events_of("hot");
        assert_eq!(answered, in_log, "exactly the accepted publishes are in the log");
        assert_contiguous(&in_log, "hot");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn failed_publishes_do_not_burn_versions() {
        // Every third attempt fails, in each of the three ways a publish can fail.
        let v = ready(FakeLog::new(3, |n| match n % 9 {
            2 => Fate::FailNotWritten,
            5 => Fate::FailButWritten,
            8 => Fate::FailUnknownNotWritten,
            _ => Fate::Ok,
        }))
        .await;
        let mut tasks = Vec::new();
        for i in 0..150u32 {
            let v = v.clone();
            tasks.push(tokio::spawn(async move {
                let canvas = id(if i % 2 == 0 { "even" } else { "odd" });
                v.publish(&canvas, 0, 0, Color([0, 0, 0])).await.ok()
            }));
        }
        let mut accepted = 0;
        for t in tasks {
            accepted += t.await.unwrap().is_some() as usize;
        }
        assert!(accepted < 150, "the schedule must have failed some publishes");
        for c in ["even", "odd"] {
            assert_contiguous(&v.log.events_of(c), c);
        }
        // The publisher's head equals the log's head after one more (successful) publish per canvas.
        for c in ["even", "odd"] {
            let canvas = id(c);
            let mut p = None;
            for _ in 0..5 {
                if let Ok(ok) = v.publish(&canvas, 1, 1, Color([9, 9, 9])).await {
                    p = Some(ok);
                    break;
                }
            }
            let p = p.expect("a publish eventually succeeds");
            let in_log = v.log.events_of(c);
            assert_eq!(p.version, *in_log.last().unwrap());
            assert_contiguous(&in_log, c);
        }
    }

    #[tokio::test]
    async fn a_failure_that_landed_is_found_before_the_next_version() {
        let v = ready(FakeLog::new(3, |n| if n == 1 { Fate::FailButWritten } else { Fate::Ok })).await;
        let c = id("c1");
        assert_eq!(v.publish(&c, 0, 0, Color([1, 1, 1])).await.unwrap().version, 1);
        assert!(v.publish(&c, 1, 0, Color([2, 2, 2])).await.is_err());
        // Version 2 is in the log although the caller got an error: the next publish is version 3.
        assert_eq!(v.publish(&c, 2, 0, Color([3, 3, 3])).await.unwrap().version, 3);
        assert_eq!(v.log.events_of("c1"), vec![1, 2, 3]);
        // And the truth includes the landed pixel.
        let mut want = Canvas::new(v.dims());
        for (ev, _) in v.log.records.lock().unwrap().values().flatten().flatten() {
            want.apply(ev);
        }
        assert_eq!(v.truth(&c).await.unwrap().hash, want.hash());
    }

    #[tokio::test]
    async fn rebuild_restores_heads_from_the_log() {
        let log = FakeLog::new(3, |_| Fate::Ok);
        let first = Versions::new(log, CanvasDims { width: 8, height: 8 }, 3);
        first.rebuild().await.unwrap();
        for i in 0..5 {
            first.publish(&id("c1"), i, 0, Color([i as u8, 0, 0])).await.unwrap();
        }
        let truth = first.truth(&id("c1")).await.unwrap();
        // A new publisher over the same log (a restart).
        let restarted = Versions::new(first.log, CanvasDims { width: 8, height: 8 }, 3);
        assert!(matches!(restarted.publish(&id("c1"), 0, 0, Color([0, 0, 0])).await, Err(PublishError::NotReady)));
        assert_eq!(restarted.rebuild().await.unwrap(), 5);
        assert_eq!(restarted.truth(&id("c1")).await.unwrap(), truth);
        assert_eq!(restarted.publish(&id("c1"), 0, 0, Color([0, 0, 0])).await.unwrap().version, 6);
    }

    #[tokio::test]
    async fn a_retry_with_the_same_key_after_an_unknown_outcome_applies_once() {
        // Attempt 1 times out but lands; the client retries with the same key.
        let v = ready(FakeLog::new(3, |n| if n == 0 { Fate::FailButWritten } else { Fate::Ok })).await;
        let c = id("c1");
        let first = v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("key-1")).await;
        assert!(matches!(first, Err(PublishError::Unknown(_))));
        let (p, replayed) = v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("key-1")).await.unwrap();
        assert_eq!((p.version, replayed), (1, true));
        assert_eq!(v.log.events_of("c1"), vec![1], "applied exactly once");
        // Again: the same answer, still one record.
        assert_eq!(v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("key-1")).await.unwrap(), (p.clone(), true));
        // The same key with another pixel is a conflict, and writes nothing.
        assert!(matches!(v.publish_with_key(&c, 2, 2, Color([5, 5, 5]), Some("key-1")).await, Err(PublishError::KeyConflict)));
        assert_eq!(v.log.events_of("c1"), vec![1]);
    }

    #[tokio::test]
    async fn a_key_that_landed_with_another_request_is_a_conflict_after_reconciliation() {
        // Attempt 1 times out but lands; the same key then comes with another pixel.
        let v = ready(FakeLog::new(3, |n| if n == 0 { Fate::FailButWritten } else { Fate::Ok })).await;
        let c = id("c1");
        assert!(matches!(v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await, Err(PublishError::Unknown(_))));
        assert!(matches!(v.publish_with_key(&c, 2, 2, Color([6, 6, 6]), Some("k")).await, Err(PublishError::KeyConflict)));
        assert_eq!(v.log.events_of("c1"), vec![1], "the second request wrote nothing");
        let (p, replayed) = v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await.unwrap();
        assert_eq!((p.version, replayed), (1, true));
    }

    #[tokio::test]
    async fn a_retry_after_a_failure_that_did_not_land_writes_once() {
        let v = ready(FakeLog::new(3, |n| match n {
            0 => Fate::FailUnknownNotWritten,
            1 => Fate::FailNotWritten,
            _ => Fate::Ok,
        }))
        .await;
        let c = id("c1");
        for _ in 0..2 {
            assert!(v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await.is_err());
        }
        let (p, replayed) = v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await.unwrap();
        assert_eq!((p.version, replayed), (1, false));
        assert_eq!(v.log.events_of("c1"), vec![1]);
    }

    #[tokio::test]
    async fn a_restarted_publisher_remembers_keys_from_the_log() {
        let first = Versions::new(FakeLog::new(3, |_| Fate::Ok), CanvasDims { width: 8, height: 8 }, 3);
        first.rebuild().await.unwrap();
        let (p, _) = first.publish_with_key(&id("c1"), 1, 1, Color([1, 1, 1]), Some("once")).await.unwrap();
        let restarted = Versions::new(first.log, CanvasDims { width: 8, height: 8 }, 3);
        restarted.rebuild().await.unwrap();
        assert_eq!(restarted.publish_with_key(&id("c1"), 1, 1, Color([1, 1, 1]), Some("once")).await.unwrap(), (p, true));
        assert_eq!(restarted.log.events_of("c1"), vec![1]);
    }

    #[tokio::test]
    async fn out_of_bounds_pixels_publish_nothing() {
        let v = ready(FakeLog::new(3, |_| Fate::Ok)).await;
        assert!(matches!(
            v.publish(&id("c1"), 8, 0, Color([0, 0, 0])).await,
            Err(PublishError::OutOfBounds { field: "x", limit: 8 })
        ));
        assert!(matches!(
            v.publish(&id("c1"), 0, 8, Color([0, 0, 0])).await,
            Err(PublishError::OutOfBounds { field: "y", limit: 8 })
        ));
        assert!(v.log.events_of("c1").is_empty());
    }
}
