//! Canvas snapshots and checkpoints: the compacted *snapshot topic* beside the events topic.
//!
//! The snapshot topic (default `<events topic>-snapshots`, `cleanup.policy=compact`, as many
//! partitions as the events topic: a canvas's snapshot lives on the same partition number as its
//! events) holds, per key, the latest write:
//!
//! - key = a canvas id: that canvas's latest [`Snapshot`] (its version, pixels, and the
//!   events-topic offset after the last record it reflects);
//! - key = [`CHECKPOINT_KEY`]: the partition's [`Checkpoint`], the events-topic offset below which
//!   every canvas of that partition is covered by its snapshot. Replay of the partition starts
//!   there, even when some of its canvases have been idle for a month.
//!
//! The publisher writes both inside its Kafka transactions, with the events (Kafka Streams keeps
//! state and offsets atomic the same way): they are fenced with it, a `read_committed` reader never
//! sees a snapshot of an aborted write, and since the publisher is the only writer and a canvas's
//! head only grows, the last write of a key is also its highest version. A reader still keeps the
//! highest version per canvas ([`Loaded::add`]), so a record that compaction has not merged yet,
//! or any late writer, cannot make a snapshot go back.
//!
//! - key = [`KEYS_PREFIX`]`<from>-<n>`: a [`KeyRecord`], the idempotency keys of the partition's
//!   records from offset `from` up to the checkpoint written with it (the keys the checkpoint's
//!   move took out of a rebuild's read), so a restarted publisher learns the keys of its window
//!   without reading the window's events; tombstoned once every key in it is older than the
//!   window;
//! - key = [`KEYS_FROM_KEY`]: the offset from which the partition's key records are complete
//!   (written once, by the first publisher that wrote key records): a rebuild reads the log for
//!   keys only below it.
//!
//! Value format, version [`FORMAT_VERSION`] (readers accept every version up to theirs and refuse
//! later ones, so a rolling deploy upgrades readers first). Canvas snapshots (the `pixels` model's)
//! and checkpoints are written as version 1, which every reader reads; key records as version 2,
//! and snapshots of the other models ([`ChannelSnapshot`]) as version 3, which readers older than
//! them refuse by their version instead of misreading them:
//!
//! ```text
//! byte 0        format version (1; 2 for key records)
//! bytes 1..5    header length n, u32 big-endian
//! bytes 5..5+n  header, JSON:
//!               canvas:  {"canvas","version","epoch","width","height","offset","compression":"lz4"}
//!               checkpoint: {"checkpoint": <offset>, "resets_floor": <count>} (the floor only
//!               when above 0; readers before it ignore it)
//!               keys: {"keys": [{"key","canvas","x","y","color":[r,g,b],"version","offset","at_ms"}]}
//!               keys from: {"keys_from": <offset>}
//!               channel (3): {"channel","version","epoch","offset","model","encoding"}
//! bytes 5+n..   channel only: the state as its model encodes it ([`crate::model::State::encode`])
//! bytes 5+n..   canvas only: the canonical pixel bytes (see [`crate::canvas`]), LZ4 block format
//!               with the uncompressed length prepended (u32 little-endian; lz4_flex's
//!               `compress_prepend_size`)
//! ```

use crate::canvas::{Canvas, CanvasDims};
use crate::event::ChannelId;
use crate::model::ModelKind;
use crate::replay::{self, Offsets, ReplayError};
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::message::Message;
use std::collections::HashMap;
use std::time::Duration;

/// The newest value format this build reads (and writes, for the other models' snapshots).
pub const FORMAT_VERSION: u8 = 3;

/// The format of key records.
const KEYS_FORMAT: u8 = 2;

/// The format of canvas snapshots and checkpoints, which every reader since the first reads.
const BASE_FORMAT: u8 = 1;

/// The key of a partition's checkpoint record (not a valid canvas id, so it never collides).
pub const CHECKPOINT_KEY: &str = "#checkpoint";

/// The prefix of a key record's key (not a valid canvas id).
pub const KEYS_PREFIX: &str = "#keys-";

/// The key of a partition's "key records complete from" record.
pub const KEYS_FROM_KEY: &str = "#keys-from";

/// One idempotency key as a key record carries it: the request it applied and its answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyEntry {
    pub key: String,
    pub canvas: String,
    pub x: u32,
    pub y: u32,
    pub color: [u8; 3],
    /// The publication's data when it is not a pixel (JSON text); `x`, `y`, `color` are then 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    pub version: u64,
    /// Offset of the events-topic record that carried it.
    pub offset: i64,
    /// Its time (the event's `published_at_ms`): it is kept for the window after it.
    pub at_ms: u64,
}

/// A key record: the idempotency keys of a stretch of one partition's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// Its key in the topic ([`KEYS_PREFIX`]`<from>-<n>`).
    pub name: String,
    pub entries: Vec<KeyEntry>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct KeysHeader {
    keys: Vec<KeyEntry>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct KeysFromHeader {
    keys_from: i64,
}

impl KeyRecord {
    /// The name of the `n`th key record of the stretch starting at `from`.
    pub fn name_of(from: i64, n: usize) -> String {
        format!("{KEYS_PREFIX}{from}-{n}")
    }

    /// The record value.
    pub fn encode(&self) -> Vec<u8> {
        frame_as(KEYS_FORMAT, &serde_json::to_vec(&KeysHeader { keys: self.entries.clone() }).expect("serialises"), &[])
    }

    /// The time of its newest key (0 when empty).
    pub fn newest_ms(&self) -> u64 {
        self.entries.iter().map(|e| e.at_ms).max().unwrap_or(0)
    }
}

/// The value of a [`KEYS_FROM_KEY`] record.
pub fn encode_keys_from(offset: i64) -> Vec<u8> {
    frame_as(KEYS_FORMAT, &serde_json::to_vec(&KeysFromHeader { keys_from: offset }).expect("serialises"), &[])
}

/// Largest side of a canvas whose snapshot the topic accepts: 1024 × 1024 × 3 bytes is 3 MiB,
/// which LZ4 can only grow by a few bytes per KiB.
pub const MAX_SIDE: u32 = 1024;

/// The snapshot topic's `max.message.bytes` (and the producers' `message.max.bytes`): a snapshot
/// of the largest canvas, incompressible, with its header.
pub const MAX_RECORD_BYTES: usize = 4 * 1024 * 1024;

/// The default snapshot topic of `events_topic`.
pub fn topic_for(events_topic: &str) -> String {
    format!("{events_topic}-snapshots")
}

/// The latest state of one canvas as the publisher committed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub canvas: ChannelId,
    /// The version the pixels reflect.
    pub version: u64,
    /// The canvas's reset counter (0: no operation resets a canvas yet), the canvas's half of its
    /// stream's epoch ([`crate::epoch`]; the other half is the events topic's ID). A snapshot of a
    /// later reset replaces any of an earlier one, whatever the versions.
    pub epoch: u64,
    pub dims: CanvasDims,
    /// The events-topic offset after the last record this snapshot reflects, on the canvas's
    /// partition: records of this canvas below it are covered.
    pub offset: i64,
    /// The canonical bytes.
    pub pixels: Vec<u8>,
}

/// Per partition: every channel's records below `offset` are covered by its snapshot, and a
/// channel with no history there (never published, or deleted) starts its next one at reset count
/// `floor`: one more than the highest reset count of any channel of the partition deleted so far
/// (0 when none was). A deleted channel's snapshot is tombstoned and its delete record may go
/// below the checkpoint, so the floor is what keeps a later history of it from reusing an epoch a
/// client may still hold ([`crate::epoch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub offset: i64,
    pub floor: u64,
}

/// The latest state of one channel of a model other than `pixels`, as the publisher committed it
/// (format 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSnapshot {
    pub channel: ChannelId,
    /// The version the state reflects.
    pub version: u64,
    /// The channel's reset counter (as [`Snapshot::epoch`]).
    pub epoch: u64,
    /// The events-topic offset after the last record it reflects (as [`Snapshot::offset`]).
    pub offset: i64,
    /// The model it was written under.
    pub model: ModelKind,
    /// The state's encoding ([`crate::model::State::encode`]) and bytes.
    pub encoding: String,
    pub body: Vec<u8>,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelHeader {
    channel: String,
    version: u64,
    epoch: u64,
    offset: i64,
    model: ModelKind,
    encoding: String,
}

impl ChannelSnapshot {
    /// The snapshot of `state` (of `model`) of `channel` at `version`, whose last record ends
    /// before `offset`.
    pub fn of(channel: &ChannelId, model: ModelKind, state: &dyn crate::model::State, version: u64, epoch: u64, offset: i64) -> Self {
        let (encoding, body) = state.encode();
        Self { channel: channel.clone(), version, epoch, offset, model, encoding: encoding.to_owned(), body }
    }

    /// The record value.
    pub fn encode(&self) -> Vec<u8> {
        let header = ChannelHeader {
            channel: self.channel.as_str().to_owned(),
            version: self.version,
            epoch: self.epoch,
            offset: self.offset,
            model: self.model,
            encoding: self.encoding.clone(),
        };
        frame_as(CHANNEL_FORMAT, &serde_json::to_vec(&header).expect("a header always serialises"), &self.body)
    }

    /// The state it holds, under `model` (the model the reader's namespace names).
    ///
    /// # Errors
    /// [`crate::model::Invalid::Snapshot`] when it was written under another model or its body
    /// does not decode.
    pub fn state(&self, model: &dyn crate::model::Model) -> Result<Box<dyn crate::model::State>, crate::model::Invalid> {
        if model.kind() != self.model {
            return Err(crate::model::Invalid::Snapshot(format!("written as {}, read as {}", self.model, model.kind())));
        }
        model.decode(&self.encoding, &self.body)
    }
}

/// The format of [`ChannelSnapshot`]s.
const CHANNEL_FORMAT: u8 = 3;

/// One decoded record of the snapshot topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Canvas(Snapshot),
    /// A snapshot of another model than `pixels`.
    Channel(ChannelSnapshot),
    Checkpoint(Checkpoint),
    Keys(KeyRecord),
    /// The offset from which the partition's key records are complete.
    KeysFrom(i64),
}

/// Why a snapshot-topic record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("record has no key")]
    NoKey,
    #[error("key is not a canvas id: {0}")]
    BadKey(String),
    #[error("value is shorter than its header says")]
    Truncated,
    #[error("format version {0} is newer than this build reads ({FORMAT_VERSION}); upgrade readers first")]
    NewerFormat(u8),
    #[error("header: {0}")]
    Header(String),
    #[error("header names canvas {header} but the key is {key}")]
    KeyMismatch { key: String, header: String },
    #[error("canvas size {width}x{height} is outside 1..={MAX_SIDE}")]
    BadSize { width: u32, height: u32 },
    #[error("unknown compression {0:?}")]
    Compression(String),
    #[error("pixels do not decompress to {expected} bytes: {why}")]
    Pixels { expected: usize, why: String },
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CanvasHeader {
    canvas: String,
    version: u64,
    #[serde(default)]
    epoch: u64,
    width: u32,
    height: u32,
    offset: i64,
    compression: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CheckpointHeader {
    checkpoint: i64,
    /// Absent (0) in the checkpoints of a partition where nothing was deleted, and in those of
    /// publishers before deletes: such a value is byte for byte what they wrote.
    #[serde(default, skip_serializing_if = "is_zero")]
    resets_floor: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn frame(header: &[u8], body: &[u8]) -> Vec<u8> {
    frame_as(BASE_FORMAT, header, body)
}

fn frame_as(format: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + header.len() + body.len());
    out.push(format);
    out.extend_from_slice(&(header.len() as u32).to_be_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(body);
    out
}

impl Snapshot {
    /// The snapshot of `canvas` (id `id`) whose last record ends before `offset`.
    pub fn of(id: &ChannelId, canvas: &Canvas, epoch: u64, offset: i64) -> Self {
        Self { canvas: id.clone(), version: canvas.version(), epoch, dims: canvas.dims(), offset, pixels: canvas.bytes().to_vec() }
    }

    /// The record value.
    pub fn encode(&self) -> Vec<u8> {
        let header = CanvasHeader {
            canvas: self.canvas.as_str().to_owned(),
            version: self.version,
            epoch: self.epoch,
            width: self.dims.width,
            height: self.dims.height,
            offset: self.offset,
            compression: "lz4".into(),
        };
        let header = serde_json::to_vec(&header).expect("a header always serialises");
        frame(&header, &lz4_flex::compress_prepend_size(&self.pixels))
    }

    /// The canvas it holds.
    pub fn to_canvas(&self) -> Canvas {
        Canvas::from_bytes(self.dims, self.version, self.pixels.clone()).expect("decode checked the pixel length")
    }
}

impl Checkpoint {
    /// The record value.
    pub fn encode(&self) -> Vec<u8> {
        frame(&serde_json::to_vec(&CheckpointHeader { checkpoint: self.offset, resets_floor: self.floor }).expect("serialises"), &[])
    }
}

/// Decodes one record of the snapshot topic; `Ok(None)` for a tombstone (no value).
///
/// # Errors
/// [`SnapshotError`] naming what is wrong; the reader skips such a record.
pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Option<Entry>, SnapshotError> {
    let key = std::str::from_utf8(key.ok_or(SnapshotError::NoKey)?).map_err(|_| SnapshotError::BadKey("(not UTF-8)".into()))?;
    let Some(value) = value else { return Ok(None) };
    let (&format, rest) = value.split_first().ok_or(SnapshotError::Truncated)?;
    if format > FORMAT_VERSION {
        return Err(SnapshotError::NewerFormat(format));
    }
    let len_bytes: [u8; 4] = rest.get(..4).ok_or(SnapshotError::Truncated)?.try_into().expect("4 bytes");
    let len = u32::from_be_bytes(len_bytes) as usize;
    let header = rest.get(4..4 + len).ok_or(SnapshotError::Truncated)?;
    let body = &rest[4 + len..];
    if key == CHECKPOINT_KEY {
        let h: CheckpointHeader = serde_json::from_slice(header).map_err(|e| SnapshotError::Header(e.to_string()))?;
        return Ok(Some(Entry::Checkpoint(Checkpoint { offset: h.checkpoint, floor: h.resets_floor })));
    }
    if key == KEYS_FROM_KEY {
        let h: KeysFromHeader = serde_json::from_slice(header).map_err(|e| SnapshotError::Header(e.to_string()))?;
        return Ok(Some(Entry::KeysFrom(h.keys_from)));
    }
    if key.starts_with(KEYS_PREFIX) {
        let h: KeysHeader = serde_json::from_slice(header).map_err(|e| SnapshotError::Header(e.to_string()))?;
        return Ok(Some(Entry::Keys(KeyRecord { name: key.to_owned(), entries: h.keys })));
    }
    let canvas = ChannelId::parse(key).map_err(|_| SnapshotError::BadKey(key.into()))?;
    if format == CHANNEL_FORMAT {
        let h: ChannelHeader = serde_json::from_slice(header).map_err(|e| SnapshotError::Header(e.to_string()))?;
        if h.channel != key {
            return Err(SnapshotError::KeyMismatch { key: key.into(), header: h.channel });
        }
        let ChannelHeader { version, epoch, offset, model, encoding, .. } = h;
        return Ok(Some(Entry::Channel(ChannelSnapshot { channel: canvas, version, epoch, offset, model, encoding, body: body.to_vec() })));
    }
    let h: CanvasHeader = serde_json::from_slice(header).map_err(|e| SnapshotError::Header(e.to_string()))?;
    if h.canvas != key {
        return Err(SnapshotError::KeyMismatch { key: key.into(), header: h.canvas });
    }
    if !(1..=MAX_SIDE).contains(&h.width) || !(1..=MAX_SIDE).contains(&h.height) {
        return Err(SnapshotError::BadSize { width: h.width, height: h.height });
    }
    if h.compression != "lz4" {
        return Err(SnapshotError::Compression(h.compression));
    }
    let dims = CanvasDims { width: h.width, height: h.height };
    let expected = dims.byte_len();
    // The prepended length is checked against the canvas size before anything is allocated.
    let prepended = body.get(..4).ok_or(SnapshotError::Truncated)?;
    let declared = u32::from_le_bytes(prepended.try_into().expect("4 bytes")) as usize;
    if declared != expected {
        return Err(SnapshotError::Pixels { expected, why: format!("the record says {declared} bytes") });
    }
    let pixels = lz4_flex::block::decompress(&body[4..], expected).map_err(|e| SnapshotError::Pixels { expected, why: e.to_string() })?;
    if pixels.len() != expected {
        return Err(SnapshotError::Pixels { expected, why: format!("got {} bytes", pixels.len()) });
    }
    Ok(Some(Entry::Canvas(Snapshot { canvas, version: h.version, epoch: h.epoch, dims, offset: h.offset, pixels })))
}

/// What a reader learned from the snapshot topic.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The highest-version snapshot of each canvas, with its partition.
    pub canvases: HashMap<ChannelId, (i32, Snapshot)>,
    /// The highest-version snapshot of each channel of another model, with its partition.
    pub channels: HashMap<ChannelId, (i32, ChannelSnapshot)>,
    /// The latest checkpoint per partition (partitions without one: replay from the log start).
    pub checkpoints: Offsets,
    /// The reset floor of each partition's latest checkpoint ([`Checkpoint::floor`]; absent: 0).
    pub floors: HashMap<i32, u64>,
    /// The key records not tombstoned, with their partition.
    pub keys: Vec<(i32, KeyRecord)>,
    /// Per partition, the offset from which its key records are complete.
    pub keys_from: Offsets,
    /// Records read (including the ones a later record replaced).
    pub records: u64,
    /// Records skipped as unreadable.
    pub skipped: u64,
    /// The key records tombstoned, with their partition, in the order read (a reader that reads
    /// on from where an earlier load ended removes them from what it learned then).
    pub tombstoned: Vec<(i32, String)>,
}

impl Loaded {
    /// Adds one entry read on `partition`: a canvas's snapshot replaces one of an earlier reset,
    /// or a lower version of the same reset, only; a checkpoint replaces the partition's earlier
    /// one, whatever its value (the topic is read in order, so the last one read is the latest
    /// written: a lower one means the events log moved backwards under a kept snapshot topic).
    pub fn add(&mut self, partition: i32, entry: Entry) {
        self.records += 1;
        match entry {
            Entry::Canvas(s) => match self.canvases.get(&s.canvas) {
                Some((_, have)) if (have.epoch, have.version) > (s.epoch, s.version) => {}
                _ => {
                    self.canvases.insert(s.canvas.clone(), (partition, s));
                }
            },
            Entry::Channel(s) => match self.channels.get(&s.channel) {
                Some((_, have)) if (have.epoch, have.version) > (s.epoch, s.version) => {}
                _ => {
                    self.channels.insert(s.channel.clone(), (partition, s));
                }
            },
            Entry::Checkpoint(c) => {
                self.checkpoints.insert(partition, c.offset);
                // The floor only rises: a checkpoint read later of a lower one is of a log that
                // moved backwards, and an epoch handed out before must still not come back.
                let floor = self.floors.entry(partition).or_insert(0);
                *floor = (*floor).max(c.floor);
            }
            Entry::Keys(k) => {
                self.keys.retain(|(p, have)| !(*p == partition && have.name == k.name));
                self.keys.push((partition, k));
            }
            Entry::KeysFrom(o) => {
                self.keys_from.insert(partition, o);
            }
        }
    }
}

impl Loaded {
    /// A tombstone of `key` read on `partition`: a key record it names is gone; a channel's
    /// snapshot it names is gone (the channel was deleted: a snapshot of its next history, read
    /// later, is kept again). (A checkpoint's tombstone changes nothing: the publisher writes none.)
    pub fn tombstone(&mut self, partition: i32, key: &str) {
        if key.starts_with(KEYS_PREFIX) {
            self.keys.retain(|(p, k)| !(*p == partition && k.name == key));
            self.tombstoned.push((partition, key.to_owned()));
        } else if let Ok(channel) = ChannelId::parse(key) {
            self.canvases.remove(&channel);
            self.channels.remove(&channel);
        }
    }
}

/// How many times at most a load reads on to the topic's new end (records written while it read);
/// each round reads only what came during the one before, so a load normally ends after one or
/// two.
const MAX_LOAD_ROUNDS: usize = 50;

/// Reads the whole snapshot topic `topic` with `consumer` (manual assignment, blocking), to its
/// readable end (the last stable offset under `read_committed`) as it is when the load ends: a
/// round that finds nothing past the end it reached ends it. So a record the cleaner removed
/// before the load reached it was superseded by a newer one of its key, which the load read. A
/// topic that does not exist yet reads as empty (a fleet that has not written snapshots yet).
///
/// # Errors
/// [`ReplayError`] when the broker cannot be read or the read stalls for `stall_timeout`.
pub fn load<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    stall_timeout: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<Loaded, ReplayError> {
    load_partitions(consumer, topic, None, stall_timeout, cancelled)
}

/// As [`load`], of `partitions` only (all when `None`).
///
/// # Errors
/// As [`load`].
pub fn load_partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: Option<&[i32]>,
    stall_timeout: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<Loaded, ReplayError> {
    load_from(consumer, topic, partitions, &Offsets::new(), stall_timeout, cancelled).map(|(loaded, _)| loaded)
}

/// As [`load_partitions`], from offset `from[p]` of each partition (absent: its start), and where
/// the read ended (the offset to read on from next time). A reader that keeps up with the topic
/// (a standby publisher) calls it again from there.
///
/// # Errors
/// As [`load`].
pub fn load_from<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: Option<&[i32]>,
    from: &Offsets,
    stall_timeout: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<(Loaded, Offsets), ReplayError> {
    let (mut plan, _) = match replay::plan(consumer, topic, from, Duration::from_secs(10)) {
        Ok(p) => p,
        Err(ReplayError::NoTopic { .. }) => return Ok((Loaded::default(), from.clone())),
        Err(e) => return Err(e),
    };
    if let Some(only) = partitions {
        plan.starts.retain(|p, _| only.contains(p));
        plan.targets.retain(|p, _| only.contains(p));
    }
    let mut loaded = Loaded::default();
    let mut on_record = |msg: &rdkafka::message::BorrowedMessage<'_>| match decode(msg.key(), msg.payload()) {
        Ok(Some(entry)) => loaded.add(msg.partition(), entry),
        Ok(None) => loaded.tombstone(msg.partition(), msg.key().and_then(|k| std::str::from_utf8(k).ok()).unwrap_or_default()),
        Err(e) => {
            loaded.skipped += 1;
            tracing::warn!(topic, partition = msg.partition(), offset = msg.offset(), error = %e, "skipping an unreadable snapshot record");
        }
    };
    let mut progress = replay::run(consumer, topic, &plan, stall_timeout, cancelled, &mut on_record, |_| {})?;
    // Then to the end as it is now, not only as it was planned: records written during the load
    // are read too, so a cleaner pass meanwhile (which may remove an older snapshot the load has
    // not reached yet, once a newer one exists) never leaves a canvas without both.
    for round in 1..=MAX_LOAD_ROUNDS {
        let (mut next, _) = replay::plan(consumer, topic, &progress.positions, Duration::from_secs(10))?;
        next.starts.retain(|p, _| plan.starts.contains_key(p));
        next.targets.retain(|p, _| plan.targets.contains_key(p));
        if next.starts.iter().all(|(p, s)| next.targets.get(p).is_none_or(|t| s >= t)) {
            break;
        }
        if round == MAX_LOAD_ROUNDS {
            tracing::warn!(topic, rounds = MAX_LOAD_ROUNDS,
                "snapshots keep coming faster than this load reads them: it ends after this round, and a cleaner pass meanwhile may have removed a snapshot it did not reach");
        }
        progress = replay::run(consumer, topic, &next, stall_timeout, cancelled, &mut on_record, |_| {})?;
    }
    let mut ended = plan.starts;
    ended.extend(progress.positions);
    Ok((loaded, ended))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Color, PixelEvent};

    fn id(s: &str) -> ChannelId {
        ChannelId::parse(s).unwrap()
    }

    fn painted(version: u64) -> Canvas {
        let mut c = Canvas::new(CanvasDims { width: 8, height: 4 });
        for v in 1..=version {
            let ev = PixelEvent { canvas: id("a"), version: v, x: (v % 8) as u32, y: 1, color: Color([v as u8, 2, 3]), published_at_ms: 0 };
            c.apply(&ev);
        }
        c
    }

    #[test]
    fn a_canvas_snapshot_round_trips() {
        let s = Snapshot::of(&id("a"), &painted(5), 0, 42);
        let got = decode(Some(b"a"), Some(&s.encode())).unwrap().unwrap();
        assert_eq!(got, Entry::Canvas(s.clone()));
        assert_eq!(s.to_canvas().hash(), painted(5).hash());
        let reset = Snapshot::of(&id("a"), &painted(1), 3, 42);
        assert_eq!(decode(Some(b"a"), Some(&reset.encode())).unwrap(), Some(Entry::Canvas(reset)), "the reset counter is carried");
    }

    #[test]
    fn a_channel_snapshot_round_trips_as_format_3_and_is_read_under_its_model_only() {
        use crate::model::{json::Json, stream::Stream, Model as _};
        let mut doc = Json::default().empty();
        doc.apply(&serde_json::value::RawValue::from_string(r#"{"home":2}"#.into()).unwrap()).unwrap();
        let s = ChannelSnapshot::of(&id("scores:m1"), ModelKind::Json, doc.as_ref(), 9, 1, 77);
        let value = s.encode();
        assert_eq!(value[0], 3);
        let got = decode(Some(b"scores:m1"), Some(&value)).unwrap().unwrap();
        assert_eq!(got, Entry::Channel(s.clone()));
        assert_eq!(s.state(&Json::default()).unwrap().hash(), doc.hash());
        assert!(s.state(&Stream).is_err(), "a json snapshot is not read as a stream's");
        assert!(matches!(decode(Some(b"scores:m2"), Some(&value)), Err(SnapshotError::KeyMismatch { .. })));
        let mut l = Loaded::default();
        l.add(0, got);
        l.add(0, Entry::Channel(ChannelSnapshot { version: 5, ..s.clone() }));
        assert_eq!(l.channels[&id("scores:m1")].1.version, 9, "the highest version wins");
    }

    #[test]
    fn a_checkpoint_round_trips_and_a_tombstone_is_nothing() {
        let v = Checkpoint { offset: 77, floor: 0 }.encode();
        assert_eq!(decode(Some(CHECKPOINT_KEY.as_bytes()), Some(&v)).unwrap(), Some(Entry::Checkpoint(Checkpoint { offset: 77, floor: 0 })));
        assert!(!String::from_utf8_lossy(&v).contains("resets_floor"), "no floor: the value of the publishers before deletes");
        let v = Checkpoint { offset: 77, floor: 4 }.encode();
        assert_eq!(decode(Some(CHECKPOINT_KEY.as_bytes()), Some(&v)).unwrap(), Some(Entry::Checkpoint(Checkpoint { offset: 77, floor: 4 })));
        let mut l = Loaded::default();
        l.add(1, Entry::Checkpoint(Checkpoint { offset: 9, floor: 4 }));
        l.add(1, Entry::Checkpoint(Checkpoint { offset: 12, floor: 0 }));
        assert_eq!((l.checkpoints[&1], l.floors[&1]), (12, 4), "the floor never goes down");
        assert_eq!(decode(Some(b"a"), None).unwrap(), None);
    }

    #[test]
    fn bad_records_are_refused_with_the_reason() {
        let good = Snapshot::of(&id("a"), &painted(2), 0, 3).encode();
        let mut newer = good.clone();
        newer[0] = FORMAT_VERSION + 1;
        let mut lying = good.clone();
        let n = lying.len();
        lying.truncate(n - 1);
        type Case<'a> = (Option<&'a [u8]>, Vec<u8>, fn(&SnapshotError) -> bool);
        let cases: Vec<Case> = vec![
            (None, good.clone(), |e| matches!(e, SnapshotError::NoKey)),
            (Some(b"b"), good.clone(), |e| matches!(e, SnapshotError::KeyMismatch { .. })),
            (Some(b"no spaces"), good.clone(), |e| matches!(e, SnapshotError::BadKey(_))),
            (Some(b"a"), newer, |e| matches!(e, SnapshotError::NewerFormat(_))),
            (Some(b"a"), vec![1, 0, 0], |e| matches!(e, SnapshotError::Truncated)),
            (Some(b"a"), lying, |e| matches!(e, SnapshotError::Pixels { .. })),
        ];
        for (key, value, want) in cases {
            let e = decode(key, Some(&value)).unwrap_err();
            assert!(want(&e), "{key:?}: {e}");
        }
    }

    #[test]
    fn a_huge_declared_length_is_refused_before_allocating() {
        let mut v = Snapshot::of(&id("a"), &painted(1), 0, 1).encode();
        let len = u32::from_be_bytes(v[1..5].try_into().unwrap()) as usize;
        v[5 + len..5 + len + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(Some(b"a"), Some(&v)), Err(SnapshotError::Pixels { .. })));
    }

    #[test]
    fn the_highest_version_and_the_latest_checkpoint_win() {
        let mut l = Loaded::default();
        l.add(0, Entry::Canvas(Snapshot::of(&id("a"), &painted(5), 0, 10)));
        l.add(0, Entry::Canvas(Snapshot::of(&id("a"), &painted(3), 0, 6)));
        l.add(0, Entry::Checkpoint(Checkpoint { offset: 9, floor: 0 }));
        l.add(0, Entry::Checkpoint(Checkpoint { offset: 4, floor: 0 }));
        assert_eq!(l.canvases[&id("a")].1.version, 5);
        // The latest checkpoint wins, not the largest: a lower one written later is a log that
        // moved backwards (the events topic recreated with this topic kept), and the old value
        // would point past its end.
        assert_eq!(l.checkpoints[&0], 4);
        assert_eq!(l.records, 4);
        // A later reset wins at a lower version; an earlier one never comes back.
        l.add(0, Entry::Canvas(Snapshot::of(&id("a"), &painted(2), 1, 12)));
        l.add(0, Entry::Canvas(Snapshot::of(&id("a"), &painted(7), 0, 14)));
        assert_eq!((l.canvases[&id("a")].1.epoch, l.canvases[&id("a")].1.version), (1, 2));
    }

    /// A load reads to the topic's end as it is when the load ends, not only as it was planned:
    /// a snapshot written while it reads (here, at the load's first look at `cancelled`) is in
    /// what it returns. Without that, a cleaner pass during the load could remove the older
    /// snapshot it had not reached yet, and the canvas would be in neither.
    #[test]
    fn a_load_reads_the_snapshots_written_while_it_reads() {
        use rdkafka::consumer::{BaseConsumer, DefaultConsumerContext};
        use rdkafka::mocking::MockCluster;
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        use rdkafka::ClientConfig;
        use std::cell::Cell;

        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("snaps", 2, 1).expect("topic");
        let producer: BaseProducer =
            ClientConfig::new().set("bootstrap.servers", cluster.bootstrap_servers()).create().expect("producer");
        let write = |canvas: &str, partition: i32, version: u64| {
            let value = Snapshot::of(&id(canvas), &painted(version), 0, version as i64).encode();
            producer.send(BaseRecord::to("snaps").key(canvas).payload(&value).partition(partition)).expect("queued");
            producer.flush(Duration::from_secs(10)).expect("written");
        };
        write("a", 0, 2);
        write("b", 1, 3);
        let consumer: BaseConsumer<DefaultConsumerContext> = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("group.id", "load-test")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let written_during = Cell::new(false);
        let cancelled = || {
            if !written_during.replace(true) {
                write("a", 0, 4);
                write("c", 1, 1);
            }
            false
        };
        let loaded = load(&consumer, "snaps", Duration::from_secs(10), &cancelled).expect("load");
        assert!(written_during.get());
        let versions: std::collections::BTreeMap<&str, u64> =
            loaded.canvases.iter().map(|(k, (_, s))| (k.as_str(), s.version)).collect();
        assert_eq!(versions, [("a", 4), ("b", 3), ("c", 1)].into_iter().collect(), "{} records read", loaded.records);
        assert_eq!(loaded.records, 4);
    }

    #[test]
    fn key_records_round_trip_as_format_2_and_a_tombstone_removes_them() {
        let entry = KeyEntry { key: "k-1".into(), canvas: "c1".into(), x: 1, y: 2, color: [3, 4, 5], data: None, version: 7, offset: 40, at_ms: 1_000 };
        let rec = KeyRecord { name: KeyRecord::name_of(40, 0), entries: vec![entry.clone()] };
        let value = rec.encode();
        assert_eq!(value[0], 2, "key records are format 2");
        assert_eq!(Snapshot::of(&id("a"), &painted(1), 0, 1).encode()[0], 1, "canvas snapshots stay format 1");
        assert_eq!(decode(Some(rec.name.as_bytes()), Some(&value)).unwrap(), Some(Entry::Keys(rec.clone())));
        assert_eq!(decode(Some(KEYS_FROM_KEY.as_bytes()), Some(&encode_keys_from(12))).unwrap(), Some(Entry::KeysFrom(12)));
        assert_eq!(rec.newest_ms(), 1_000);
        let mut l = Loaded::default();
        l.add(3, Entry::Keys(rec.clone()));
        l.add(3, Entry::KeysFrom(12));
        l.add(4, Entry::Keys(rec.clone()));
        assert_eq!((l.keys.len(), l.keys_from[&3]), (2, 12));
        l.tombstone(3, &rec.name);
        assert_eq!(l.keys, vec![(4, rec)], "only partition 3's record is gone");
        // A reader of format 1 refuses a key record by its version, not as a bad canvas id.
        let mut old = value.clone();
        old[0] = FORMAT_VERSION + 1;
        assert!(matches!(decode(Some(b"#keys-40-0"), Some(&old)), Err(SnapshotError::NewerFormat(_))));
        assert_eq!(KEYS_FORMAT, 2);
    }

    #[test]
    fn a_channel_s_tombstone_removes_its_snapshot_and_a_later_one_is_kept_again() {
        let mut l = Loaded::default();
        l.add(0, Entry::Canvas(Snapshot::of(&id("a"), &painted(3), 0, 9)));
        l.add(0, Entry::Canvas(Snapshot::of(&id("b"), &painted(2), 0, 9)));
        let doc = |version: u64, epoch: u64| ChannelSnapshot { channel: id("docs:x"), version, epoch, offset: 9, model: ModelKind::Json, encoding: "json".into(), body: b"{}".to_vec() };
        l.add(1, Entry::Channel(doc(5, 0)));
        l.tombstone(0, "a");
        l.tombstone(1, "docs:x");
        assert!(!l.canvases.contains_key(&id("a")) && l.canvases.contains_key(&id("b")));
        assert!(l.channels.is_empty());
        // The channel's next history (a reset to 1 before its first publication) is kept.
        l.add(1, Entry::Channel(doc(1, 1)));
        assert_eq!(l.channels[&id("docs:x")].1.version, 1);
    }

    #[test]
    fn the_largest_canvas_fits_the_topic_even_incompressible() {
        let dims = CanvasDims { width: MAX_SIDE, height: MAX_SIDE };
        let noise: Vec<u8> = (0..dims.byte_len()).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let s = Snapshot { canvas: id("big"), version: 1, epoch: 0, dims, offset: 0, pixels: noise };
        assert!(s.encode().len() < MAX_RECORD_BYTES);
    }
}
