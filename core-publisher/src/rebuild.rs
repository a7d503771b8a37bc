//! The start-up read behind [`crate::versions::Versions::rebuild`]: every canvas's head from the
//! snapshot topic, then the events log after each partition's checkpoint (and back to the
//! idempotency-key window for the keys), into the partitions the committers start from.

use crate::idempotency::KeyStore;
use crate::log::{EventLog, LoggedEvent, PrepareError, ReadError, Tail};
use crate::partition::Partition;
use crate::snapshots::Coverage;
use crate::types::{Fingerprint, Published};
use shared::canvas::Applied;
use shared::{Canvas, CanvasDims, CanvasId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why the rebuild did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// The transactional producers could not be initialised (retry).
    #[error(transparent)]
    Prepare(PrepareError),
    /// The log could not be read (retry).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Another publisher took over while this one was starting: it must not write.
    #[error("fenced by another publisher while starting")]
    Fenced,
}


/// What a rebuild builds while it streams the log's tail.
struct Rebuilt {
    dims: CanvasDims,
    heads: Vec<HashMap<CanvasId, Canvas>>,
    coverage: Vec<Coverage>,
    /// Canvases whose versions skip (records deleted that no snapshot covers).
    incomplete: Vec<CanvasId>,
    events: usize,
}

impl Rebuilt {
    /// Applies one event of the tail; returns whether it was new to the heads.
    fn apply(&mut self, le: &LoggedEvent, now: std::time::Instant) -> bool {
        let p = le.partition as usize;
        let (Some(heads), Some(cover)) = (self.heads.get_mut(p), self.coverage.get_mut(p)) else { return false };
        let head = heads.entry(le.event.canvas.clone()).or_insert_with(|| Canvas::new(self.dims));
        match head.apply(&le.event) {
            Applied::Duplicate => false,
            applied => {
                if let Applied::Gap { expected } = applied {
                    tracing::error!(canvas = %le.event.canvas, expected, got = le.event.version, partition = le.partition, offset = le.offset,
                        "this canvas's versions skip in the log and no snapshot covers them (records deleted by retention?): its pixels before version {} are lost",
                        le.event.version);
                    if !self.incomplete.contains(&le.event.canvas) {
                        self.incomplete.push(le.event.canvas.clone());
                    }
                }
                cover.recorded(&le.event.canvas, le.offset, now);
                self.events += 1;
                true
            }
        }
    }
}

/// What the read found: the partitions the committers start from.
pub struct Restored {
    /// Each partition's heads, coverage and end position, numbered from 0.
    pub partitions: Vec<Arc<Partition>>,
    /// Canvases found with versions missing from the log and no snapshot covering them.
    pub incomplete: Vec<CanvasId>,
    /// Events read from the log.
    pub events_read: usize,
}

/// Reads the heads of a topic of `n` partitions and canvases of `dims`: the snapshots, then the
/// log's tail after each checkpoint, teaching `keys` the idempotency keys within `key_window`.
///
/// # Errors
/// [`RebuildError::Read`] when the log cannot be read, or a snapshot cannot be used.
pub async fn read_heads<L: EventLog>(log: &L, dims: CanvasDims, n: u32, key_window: Duration, keys: &Arc<Mutex<KeyStore>>) -> Result<Restored, RebuildError> {
    // Heads from the snapshots, then the log's tail after each partition's checkpoint,
    // streamed (never the whole topic in memory); the tail starts earlier where the log
    // still has records within the idempotency-key window.
    let loaded = log.read_snapshots().await?;
    let key_from_ms = shared::event::now_ms().saturating_sub(key_window.as_millis() as u64) as i64;
    let wanted = log.offsets_for_time(key_from_ms).await?;
    let mut rebuilt = Rebuilt {
        dims,
        heads: (0..n).map(|_| HashMap::new()).collect(),
        coverage: (0..n).map(|_| Coverage::default()).collect(),
        incomplete: Vec::new(),
        events: 0,
    };
    // A snapshot this process cannot use (unreadable: a newer format after a rollback, or
    // corrupt; or of another canvas size) may be the only record of its canvas's head: going
    // on without it would hand that canvas's versions out again. Refuse until fixed.
    if loaded.skipped > 0 {
        return Err(RebuildError::Read(ReadError(format!(
            "{} snapshot record(s) could not be read (see the warnings; a newer format needs a newer publisher): refusing to start \
             without them, as their canvases' versions would be reused",
            loaded.skipped
        ))));
    }
    if let Some((canvas, (_, snap))) = loaded.canvases.iter().find(|(_, (_, s))| s.dims != dims) {
        return Err(RebuildError::Read(ReadError(format!(
            "the snapshot of {canvas} is {}x{}, not CANVAS_WIDTH x CANVAS_HEIGHT {}x{}: refusing to start with another canvas size",
            snap.dims.width, snap.dims.height, dims.width, dims.height
        ))));
    }
    let from_snapshots = loaded.canvases.len();
    for (canvas, (p, snap)) in loaded.canvases {
        let (Some(heads), Some(cover)) = (rebuilt.heads.get_mut(p as usize), rebuilt.coverage.get_mut(p as usize)) else { continue };
        cover.restored(&canvas, snap.version, snap.epoch, snap.offset);
        heads.insert(canvas, snap.to_canvas());
    }
    let needed: shared::replay::Offsets = loaded.checkpoints.into_iter().filter(|(p, _)| (*p as u32) < n).collect();
    let state = Arc::new(Mutex::new(rebuilt));
    let (keys, sink_state) = (keys.clone(), state.clone());
    let now = std::time::Instant::now();
    let (_, end) = log
        .read_tail(Tail { needed, wanted }, move |le: LoggedEvent| {
            sink_state.lock().expect("rebuild state lock").apply(&le, now);
            if let Some(k) = &le.idempotency_key {
                let ev = &le.event;
                let fp = Fingerprint { canvas: ev.canvas.clone(), x: ev.x, y: ev.y, color: ev.color };
                let published = Published { canvas: ev.canvas.clone(), version: ev.version, partition: le.partition, offset: le.offset };
                keys.lock().expect("key store lock").learn(k, fp, published);
            }
        })
        .await?;
    if !end.truncated.is_empty() {
        tracing::error!(partitions = ?end.truncated,
            "records after these partitions' checkpoints were deleted (retention shorter than the snapshot interval?): canvases with versions there may have lost pixels");
    }
    let rebuilt = std::mem::replace(
        &mut *state.lock().expect("rebuild state lock"),
        Rebuilt { dims, heads: Vec::new(), coverage: Vec::new(), incomplete: Vec::new(), events: 0 },
    );
    tracing::info!(canvases_from_snapshots = from_snapshots, records_read = end.records, events_applied = rebuilt.events,
        incomplete = rebuilt.incomplete.len(), "heads rebuilt from the snapshots and the log after them");
    let events_read = end.records as usize;
    let ends = end.positions;
    let partitions: Vec<Arc<Partition>> = rebuilt
        .heads
        .into_iter()
        .zip(rebuilt.coverage)
        .enumerate()
        .map(|(p, (h, mut c))| {
            let end = ends.get(&(p as i32)).copied().unwrap_or(0);
            c.clamp_to(end);
            Arc::new(Partition::restored(p as i32, dims, h, c, end))
        })
        .collect();
    Ok(Restored { partitions, incomplete: rebuilt.incomplete, events_read })
}
