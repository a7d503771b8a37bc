//! Per-canvas versions: contiguous from 1, never burned by a failed publish, rebuilt from the log.
//!
//! Each canvas has a head (its canvas state and version) behind its own async mutex, held across
//! the publish: version `v + 1` is only handed to the next request after the broker acknowledged
//! `v`, or after `v`'s publish failed and was accounted for. Canvases do not wait for each other.
//!
//! When a publish fails with an unknown outcome (the ack timed out after the request was sent) the
//! record may be in the log. The head is marked *uncertain*; the next publish to that canvas first
//! reads its partition from just after the canvas's last known record and applies what it finds, so
//! the version it hands out is always the log's head + 1 (no version twice, none skipped).

use crate::idempotency::{Fingerprint, KeyStore, Lookup};
use crate::log::{AppendError, EventLog, LoggedEvent, ReadError};
use shared::partitioner::partition_for;
use shared::replay::Offsets;
use shared::{Canvas, CanvasDims, CanvasId, Color, PixelEvent};
use std::collections::HashMap;
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
#[derive(Debug, thiserror::Error)]
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
    heads: Mutex<HashMap<CanvasId, Arc<tokio::sync::Mutex<Head>>>>,
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
                heads.insert(id, Arc::new(tokio::sync::Mutex::new(head)));
            }
        }
        *self.floors.lock().expect("floors lock") = high;
        self.ready.store(true, Ordering::Release);
        Ok(n)
    }

    fn lock_heads(&self) -> std::sync::MutexGuard<'_, HashMap<CanvasId, Arc<tokio::sync::Mutex<Head>>>> {
        self.heads.lock().expect("heads lock is never poisoned: no panics while held")
    }

    fn lock_keys(&self) -> std::sync::MutexGuard<'_, KeyStore> {
        self.keys.lock().expect("key store lock is never poisoned: no panics while held")
    }

    fn head(&self, canvas: &CanvasId) -> Arc<tokio::sync::Mutex<Head>> {
        self.lock_heads()
            .entry(canvas.clone())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Head {
                    canvas: Canvas::new(self.dims),
                    last_offset: None,
                    uncertain: false,
                }))
            })
            .clone()
    }

    /// The partition of `canvas`.
    pub fn partition_of(&self, canvas: &CanvasId) -> i32 {
        partition_for(canvas.as_str().as_bytes(), self.partitions().max(1)) as i32
    }

    /// Publishes one pixel change: hands out the canvas's next version, appends it to the log and
    /// returns once the broker acknowledged it.
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

    async fn publish_once(&self, fp: &Fingerprint, key: Option<&str>) -> Result<(Published, bool), PublishError> {
        let canvas = &fp.canvas;
        let partition = self.partition_of(canvas);
        let head = self.head(canvas);
        let mut head = head.lock().await;
        if head.uncertain {
            self.reconcile(canvas, partition, &mut head).await?;
            // The earlier attempt with this key may be what landed.
            if let Some(p) = key.and_then(|k| self.lock_keys().applied(k, fp)) {
                return Ok((p, true));
            }
        }
        let event = PixelEvent {
            canvas: canvas.clone(),
            version: head.canvas.version() + 1,
            x: fp.x,
            y: fp.y,
            color: fp.color,
            published_at_ms: shared::event::now_ms(),
        };
        match self.log.append(partition, &event, key).await {
            Ok(offset) => {
                apply_logged(&mut head, offset, &event);
                Ok((Published { canvas: canvas.clone(), version: event.version, partition, offset }, false))
            }
            Err(AppendError::NotWritten(e)) => {
                tracing::warn!(canvas = %canvas, version = event.version, error = %e, "publish failed; version not used");
                Err(PublishError::NotWritten(e))
            }
            Err(AppendError::Unknown(e)) => {
                tracing::warn!(canvas = %canvas, version = event.version, error = %e,
                    "publish outcome unknown; the next publish to this canvas reads the log first");
                head.uncertain = true;
                Err(PublishError::Unknown(e))
            }
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
        let head = self.lock_heads().get(canvas).cloned();
        Ok(match head {
            Some(h) => {
                let h = h.lock().await;
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
        for (ev, _) in v.log.records.lock().unwrap().values().flatten() {
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
