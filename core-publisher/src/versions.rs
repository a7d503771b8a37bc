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

use crate::log::{AppendError, EventLog, ReadError};
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
    /// Kafka did not acknowledge the record (or its outcome is being reconciled): retry later.
    #[error("kafka did not acknowledge the event: {0}")]
    Kafka(String),
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
    ready: AtomicBool,
}

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
            for (_p, off, ev) in records {
                let head = by_canvas.entry(ev.canvas.clone()).or_insert_with(|| Head {
                    canvas: Canvas::new(self.dims),
                    last_offset: None,
                    uncertain: false,
                });
                apply_logged(head, off, &ev);
            }
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
    /// [`PublishError::NotReady`] before the rebuild, [`PublishError::OutOfBounds`] for a pixel
    /// outside the canvas (nothing is published), [`PublishError::Kafka`] when the record was not
    /// acknowledged (the version is not burned: the next publish gets it, or the version after it
    /// when reconciliation finds the record did land).
    pub async fn publish(&self, canvas: &CanvasId, x: u32, y: u32, color: Color) -> Result<Published, PublishError> {
        if !self.is_ready() {
            return Err(PublishError::NotReady);
        }
        if x >= self.dims.width {
            return Err(PublishError::OutOfBounds { field: "x", limit: self.dims.width });
        }
        if y >= self.dims.height {
            return Err(PublishError::OutOfBounds { field: "y", limit: self.dims.height });
        }
        let partition = self.partition_of(canvas);
        let head = self.head(canvas);
        let mut head = head.lock().await;
        if head.uncertain {
            self.reconcile(canvas, partition, &mut head).await?;
        }
        let event = PixelEvent {
            canvas: canvas.clone(),
            version: head.canvas.version() + 1,
            x,
            y,
            color,
            published_at_ms: shared::event::now_ms(),
        };
        match self.log.append(partition, &event).await {
            Ok(offset) => {
                apply_logged(&mut head, offset, &event);
                Ok(Published { canvas: canvas.clone(), version: event.version, partition, offset })
            }
            Err(AppendError::NotWritten(e)) => {
                tracing::warn!(canvas = %canvas, version = event.version, error = %e, "publish failed; version not used");
                Err(PublishError::Kafka(e))
            }
            Err(AppendError::Unknown(e)) => {
                tracing::warn!(canvas = %canvas, version = event.version, error = %e,
                    "publish outcome unknown; the next publish to this canvas reads the log first");
                head.uncertain = true;
                Err(PublishError::Kafka(e))
            }
        }
    }

    async fn reconcile(&self, canvas: &CanvasId, partition: i32, head: &mut Head) -> Result<(), PublishError> {
        let floor = self.floors.lock().expect("floors lock").get(&partition).copied().unwrap_or(0);
        let from = head.last_offset.map_or(floor, |o| (o + 1).max(floor));
        let records = self.log.read_partition(partition, from).await.map_err(|e| PublishError::Kafka(e.0))?;
        let before = head.canvas.version();
        for (_p, off, ev) in records.iter().filter(|(_, _, ev)| &ev.canvas == canvas) {
            apply_logged(head, *off, ev);
        }
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
        for ev in v.log.records.lock().unwrap().values().flatten() {
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
