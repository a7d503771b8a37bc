//! A standby publisher's reading of the log ([`Follower`]): every channel's head, what the
//! snapshots cover and the idempotency keys, kept current while another publisher writes, with no
//! transactional producer, so that a promotion reads only the last moments of the log instead of
//! everything after the checkpoints.
//!
//! [`Follower::start`] reads as a rebuild does ([`crate::rebuild::read_heads_now`]). Each
//! [`Follower::read_on`] then reads the snapshot topic, then the events topic, from where the last
//! read ended (`read_committed`: what the active publisher committed). What the snapshot topic
//! says is kept exact:
//! - a snapshot of a channel covers its records before the snapshot's offset. The follower keeps
//!   the offsets of the records it read after its start, per channel, until a snapshot covers them,
//!   so the oldest record a snapshot leaves uncovered is known, as the active publisher knows it;
//! - the two topics are read one after the other, so a snapshot or a checkpoint read is applied
//!   only once the events read has passed the offset it covers (until then it waits, in order);
//! - a checkpoint moves the keys below it out of the partition's key book (the active publisher
//!   wrote them as key records, which the book now lists for their tombstones).
//!
//! A read that finds records after its position deleted (a standby paused past the retention) or
//! the log moved back (the topic recreated) is an error: the standby starts again from the
//! snapshots. [`Follower::into_restored`] hands the partitions to the committers after a
//! promotion's last read.

use crate::idempotency::KeyStore;
use crate::log::{EventLog, Logged, LoggedEvent, LoggedOp, ReadError, Tail};
use crate::heads;
use crate::partition::Partition;
use crate::rebuild::{read_heads_now, RebuildError, Restored};
use crate::types::{Fingerprint, Published};
use shared::namespaces::Namespaces;
use shared::replay::Offsets;
use shared::snapshot::Loaded;
use shared::ChannelId;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a standby waits before it reads on after a round that found nothing new (after one
/// that found events it reads on at once).
pub const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// A snapshot-topic entry read, waiting until the events read has passed what it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Waiting {
    /// A channel's snapshot at `version` of reset `resets`, covering its records before `offset`.
    Snapshot { channel: ChannelId, version: u64, resets: u64, offset: i64 },
    /// The partition's checkpoint.
    Checkpoint(i64),
}

impl Waiting {
    /// The events position it needs read first.
    fn needs(&self) -> i64 {
        match self {
            Waiting::Snapshot { offset, .. } | Waiting::Checkpoint(offset) => *offset,
        }
    }
}

/// What the follower keeps of one partition besides its [`Partition`].
#[derive(Debug, Default)]
struct Track {
    /// Where the events read ends (the next offset to read).
    position: i64,
    /// Where the start's read ended: the offsets of the records read then are not kept.
    start_end: i64,
    /// The channels the start's read left with records no snapshot covers, and the offset of
    /// each one's last record then: a later snapshot past it covers all of them.
    start_last: HashMap<ChannelId, i64>,
    /// The records read after the start that no applied snapshot covers, per channel: (offset,
    /// when read), oldest first.
    recent: HashMap<ChannelId, VecDeque<(i64, Instant)>>,
    /// Snapshot-topic entries read, in order, waiting for the events read.
    waiting: VecDeque<Waiting>,
    /// The latest checkpoint applied: keys of the records below it are in key records.
    checkpoint: i64,
}

/// The standby's reading of the log.
pub struct Follower {
    namespaces: Arc<Namespaces>,
    pub(crate) partitions: Vec<Arc<Partition>>,
    tracks: Vec<Track>,
    snapshot_positions: Offsets,
    incomplete: Vec<ChannelId>,
    /// Events read since the start (the start's read included).
    pub events: u64,
}

/// The events of one read on, applied as they stream in.
struct Applier {
    namespaces: Arc<Namespaces>,
    partitions: Vec<Arc<Partition>>,
    tracks: Vec<Track>,
    incomplete: Vec<ChannelId>,
    keys: Arc<Mutex<KeyStore>>,
    now: Instant,
    events: u64,
}

impl Applier {
    fn apply(&mut self, le: &LoggedEvent) {
        let p = le.partition as usize;
        let (Some(part), Some(track)) = (self.partitions.get(p), self.tracks.get_mut(p)) else { return };
        let ev = &le.event;
        if let Some(k) = &le.idempotency_key {
            let fp = Fingerprint::of(&ev.channel, &ev.data);
            let published = Published { channel: ev.channel.clone(), version: ev.version, partition: le.partition, offset: le.offset };
            self.keys.lock().expect("key store lock").learn(k, fp, published, ev.published_at_ms, shared::event::now_ms());
        }
        let (namespaces, now) = (self.namespaces.clone(), self.now);
        let gap = part.with_book(|book| {
            let before = book.heads.get(&ev.channel).map_or(0, |h| h.version);
            if ev.version <= before {
                return None;
            }
            heads::apply(&mut book.heads, &namespaces, ev, le.offset);
            let recent = track.recent.entry(ev.channel.clone()).or_default();
            if recent.back().is_none_or(|(o, _)| *o != le.offset) {
                recent.push_back((le.offset, now));
                book.coverage.recorded(&ev.channel, le.offset, now);
            }
            if let Some(k) = &le.idempotency_key {
                if le.offset >= track.checkpoint {
                    book.keys.record(le.offset, heads::key_entries(std::iter::once((ev, Some(k.as_str()))), le.offset));
                }
            }
            book.end = book.end.max(le.offset + 1);
            (ev.version > before + 1).then_some(before + 1)
        });
        self.events += 1;
        if let Some(expected) = gap {
            tracing::error!(channel = %ev.channel, expected, got = ev.version, partition = le.partition, offset = le.offset,
                "standby: this channel's versions skip in the log (records deleted?): its state before version {} is lost", ev.version);
            if !self.incomplete.contains(&ev.channel) {
                self.incomplete.push(ev.channel.clone());
            }
        }
    }
}

impl Applier {
    /// Applies one op read: the channel's head starts again (reset) or is gone (delete), as the
    /// active publisher's did; what was kept of its records goes with its history.
    fn apply_op(&mut self, lo: &LoggedOp) {
        let p = lo.partition as usize;
        let (Some(part), Some(track)) = (self.partitions.get(p), self.tracks.get_mut(p)) else { return };
        let (namespaces, now) = (self.namespaces.clone(), self.now);
        part.with_book(|book| crate::partition::apply_op(book, &namespaces, &lo.op, lo.offset, now));
        track.recent.remove(&lo.op.channel);
        track.start_last.remove(&lo.op.channel);
        if lo.op.op == shared::record::OpKind::Reset {
            track.recent.entry(lo.op.channel.clone()).or_default().push_back((lo.offset, now));
        }
        self.incomplete.retain(|c| *c != lo.op.channel);
    }
}

impl Follower {
    /// Reads the snapshots and the log after them, as a rebuild does, without waiting for the
    /// active publisher's open transactions, teaching `keys` the keys within `key_window`.
    ///
    /// # Errors
    /// As [`read_heads_now`].
    pub async fn start<L: EventLog>(log: &L, namespaces: &Arc<Namespaces>, n: u32, key_window: Duration, keys: &Arc<Mutex<KeyStore>>) -> Result<Self, RebuildError> {
        let restored = read_heads_now(log, namespaces, n, key_window, keys).await?;
        let tracks = (0..n as i32)
            .map(|p| {
                let position = restored.positions.get(&p).copied().unwrap_or(0);
                let start_last = restored.partitions.get(p as usize).map_or_else(HashMap::new, |part| {
                    part.with_book(|book| book.coverage.uncovered_last().into_iter().collect())
                });
                Track {
                    position,
                    start_end: position,
                    start_last,
                    checkpoint: restored.checkpoints.get(&p).copied().unwrap_or(0),
                    ..Track::default()
                }
            })
            .collect();
        Ok(Self {
            namespaces: namespaces.clone(),
            partitions: restored.partitions,
            tracks,
            snapshot_positions: restored.snapshot_positions,
            incomplete: restored.incomplete,
            events: restored.events_read as u64,
        })
    }

    /// Reads the snapshot topic, then the events topic, from where the last read ended, to their
    /// ends; returns the events read.
    ///
    /// # Errors
    /// [`RebuildError::Read`] when a topic cannot be read, or when the events after the position
    /// were deleted or the log moved back under it: start again then.
    pub async fn read_on<L: EventLog>(&mut self, log: &L, keys: &Arc<Mutex<KeyStore>>) -> Result<u64, RebuildError> {
        let (loaded, ended) = log.read_snapshots_from(self.snapshot_positions.clone()).await?;
        self.learn_snapshots(loaded);
        self.snapshot_positions = ended;

        let needed: Offsets = self.tracks.iter().enumerate().map(|(p, t)| (p as i32, t.position)).collect();
        let applier = Arc::new(Mutex::new(Applier {
            namespaces: self.namespaces.clone(),
            partitions: self.partitions.clone(),
            tracks: std::mem::take(&mut self.tracks),
            incomplete: std::mem::take(&mut self.incomplete),
            keys: keys.clone(),
            now: Instant::now(),
            events: 0,
        }));
        let sink = applier.clone();
        let read = log.read_tail(Tail { needed: needed.clone(), wanted: Offsets::new(), following: true }, move |logged: Logged| {
            let mut applier = sink.lock().expect("applier lock");
            match logged {
                Logged::Event(le) => applier.apply(&le),
                Logged::Op(lo) => applier.apply_op(&lo),
            }
        });
        let result = read.await;
        let back = std::mem::replace(
            &mut *applier.lock().expect("applier lock"),
            Applier { namespaces: self.namespaces.clone(), partitions: Vec::new(), tracks: Vec::new(), incomplete: Vec::new(), keys: keys.clone(), now: Instant::now(), events: 0 },
        );
        self.tracks = back.tracks;
        self.incomplete = back.incomplete;
        self.events += back.events;
        let (_, end) = result?;
        if !end.truncated.is_empty() {
            return Err(RebuildError::Read(ReadError(format!(
                "records after the standby's position were deleted on partitions {:?} (it was paused longer than the retention?): reading again from the snapshots",
                end.truncated
            ))));
        }
        let moved: Vec<i32> = needed.iter().filter(|(p, at)| end.starts.get(p).is_some_and(|s| s < at)).map(|(p, _)| *p).collect();
        if !moved.is_empty() {
            return Err(RebuildError::Read(ReadError(format!(
                "the log of partitions {moved:?} ends before the standby's position (the topic was recreated?): reading again from the snapshots"
            ))));
        }
        for (p, track) in self.tracks.iter_mut().enumerate() {
            if let Some(&at) = end.positions.get(&(p as i32)) {
                track.position = track.position.max(at);
            }
            if let Some(part) = self.partitions.get(p) {
                let position = track.position;
                part.with_book(|book| book.end = book.end.max(position));
            }
        }
        self.settle();
        Ok(back.events)
    }

    /// Takes in what a read of the snapshot topic found: key records at once, snapshots and
    /// checkpoints in order behind the events read.
    fn learn_snapshots(&mut self, loaded: Loaded) {
        if loaded.skipped > 0 {
            tracing::warn!(records = loaded.skipped, "standby: snapshot records it cannot read were skipped (their channels count as not covered)");
        }
        for (p, (track, part)) in self.tracks.iter_mut().zip(&self.partitions).enumerate() {
            let p = p as i32;
            let records: Vec<(String, u64)> = loaded.keys.iter().filter(|(q, _)| *q == p).map(|(_, k)| (k.name.clone(), k.newest_ms())).collect();
            let tombstones: Vec<String> = loaded.tombstoned.iter().filter(|(q, _)| *q == p).map(|(_, name)| name.clone()).collect();
            let from_written = loaded.keys_from.contains_key(&p);
            if !records.is_empty() || !tombstones.is_empty() || from_written {
                part.with_book(|book| book.keys.followed(None, &records, &tombstones, from_written));
            }
            for (channel, (q, snap)) in &loaded.canvases {
                if *q == p && heads::from_canvas(&self.namespaces, snap).is_ok() {
                    track.waiting.push_back(Waiting::Snapshot { channel: channel.clone(), version: snap.version, resets: snap.epoch, offset: snap.offset });
                }
            }
            for (channel, (q, snap)) in &loaded.channels {
                if *q == p && heads::from_channel(&self.namespaces, snap).is_ok() {
                    track.waiting.push_back(Waiting::Snapshot { channel: channel.clone(), version: snap.version, resets: snap.epoch, offset: snap.offset });
                }
            }
            if let Some(&c) = loaded.checkpoints.get(&p) {
                track.waiting.push_back(Waiting::Checkpoint(c));
            }
        }
    }

    /// Applies the waiting snapshot-topic entries the events read has passed.
    fn settle(&mut self) {
        for (track, part) in self.tracks.iter_mut().zip(&self.partitions) {
            while track.waiting.front().is_some_and(|w| w.needs() <= track.position) {
                let Some(w) = track.waiting.pop_front() else { break };
                match w {
                    Waiting::Snapshot { channel, version, resets, offset } => part.with_book(|book| {
                        let recent = track.recent.entry(channel.clone()).or_default();
                        while recent.front().is_some_and(|(o, _)| *o < offset) {
                            recent.pop_front();
                        }
                        // A record the start's read found uncovered (its offset not kept) may still
                        // be the first one not covered, while the snapshot does not reach past the
                        // channel's last record of that read; past it, every one of them is covered.
                        let start_last = track.start_last.get(&channel).copied();
                        let from_start = book.coverage.first_uncovered(&channel).filter(|(o, _)| *o < track.start_end);
                        let first = match (from_start, start_last) {
                            (Some(f), Some(last)) if offset <= last => Some(f),
                            _ => recent.front().copied(),
                        };
                        if start_last.is_some_and(|last| offset > last) {
                            track.start_last.remove(&channel);
                        }
                        if recent.is_empty() {
                            track.recent.remove(&channel);
                        }
                        book.coverage.followed(&channel, version, resets, first);
                    }),
                    Waiting::Checkpoint(c) => {
                        track.checkpoint = c;
                        part.with_book(|book| book.keys.followed(Some(c), &[], &[], false));
                    }
                }
            }
        }
    }

    /// Where the events read ended, per partition.
    pub fn positions(&self) -> Offsets {
        self.tracks.iter().enumerate().map(|(p, t)| (p as i32, t.position)).collect()
    }

    /// The partitions the committers start from, after a promotion's last read on.
    pub fn into_restored(self) -> Restored {
        let positions = self.positions();
        let checkpoints = self.tracks.iter().enumerate().map(|(p, t)| (p as i32, t.checkpoint)).collect();
        Restored {
            partitions: self.partitions,
            incomplete: self.incomplete,
            events_read: self.events as usize,
            positions,
            snapshot_positions: self.snapshot_positions,
            checkpoints,
        }
    }
}
