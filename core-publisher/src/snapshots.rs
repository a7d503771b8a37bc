//! When the publisher snapshots a channel, and where a partition's checkpoint is.
//!
//! The publisher holds every channel's committed head, so it writes the snapshots
//! ([`shared::snapshot`]) itself, inside the transactions that write events: a snapshot and a
//! checkpoint commit or abort with them and are fenced with the publisher. A snapshot is of the
//! head *before* the transaction that carries it (whose records' offsets are not known until it
//! commits), so it covers every record of the channel committed so far.
//!
//! [`due`] is the policy, a pure function: a channel is snapshotted once `every_versions` versions
//! passed since its last snapshot, or once its oldest record not covered by one is `every` old or
//! `every_records` offsets behind its partition's end, whichever comes first (the count bounds how
//! many events a reader replays for a busy channel; the time bounds how far back any partition's
//! replay starts, idle channels included; the records bound it on a partition written fast).
//!
//! [`Coverage`] keeps, per partition, each channel's last snapshot and its oldest uncovered record:
//! the checkpoint is the oldest uncovered record's offset (or the partition's end when every
//! channel is covered).

use shared::ChannelId;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// When channels are snapshotted (`SNAPSHOT_EVERY_VERSIONS`, `SNAPSHOT_EVERY_MS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Versions since the last snapshot that make one due.
    pub every_versions: u64,
    /// Age of the oldest uncovered record that makes one due.
    pub every: Duration,
    /// Offsets of the partition's log after a channel's oldest uncovered record (its records and
    /// transaction markers) that make one due: bounds a rebuild's read by records too, not only
    /// by time, however fast the partition is written.
    pub every_records: u64,
    /// Most snapshots one transaction carries (the rest wait for the next)...
    pub max_per_txn: usize,
    /// ...and their most bytes, encoded (at least one is always taken), so that large channels
    /// do not make a transaction's records slow to acknowledge.
    pub max_bytes_per_txn: usize,
    /// The idempotency-key window: a checkpoint move carries the keys it moves past that are
    /// younger than this into the snapshot topic ([`crate::keylog`]).
    pub key_window: Duration,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        Self { every_versions: 1_000, every: Duration::from_secs(60), every_records: 100_000, max_per_txn: 64, max_bytes_per_txn: 1 << 20, key_window: Duration::from_secs(600) }
    }
}

/// How far behind a channel's oldest record not covered by its snapshot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behind {
    /// How long ago it was committed.
    pub age: Duration,
    /// Offsets of its partition's log from it to the end.
    pub offsets: u64,
}

/// Whether a channel at `version`, last snapshotted at `snapshot_version`, whose oldest record not
/// covered by that snapshot is `uncovered` behind (`None`: every record is covered), needs a
/// snapshot now: by versions, by the record's age, or by the records after it.
pub fn due(policy: &SnapshotPolicy, version: u64, snapshot_version: u64, uncovered: Option<Behind>) -> bool {
    version > snapshot_version
        && (version - snapshot_version >= policy.every_versions
            || uncovered.is_some_and(|b| b.age >= policy.every || b.offsets >= policy.every_records))
}

/// What the publisher knows of one channel's snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    /// The version of its latest committed snapshot (0: none).
    snapshot_version: u64,
    /// Its reset counter, from the snapshot it was restored from (0: none), written back into
    /// every snapshot of it (the channel's half of its stream's epoch, [`shared::epoch`]).
    resets: u64,
    /// Offset of its last committed record (-1: none read or written).
    last_offset: i64,
    /// Its oldest committed record not covered by the snapshot: offset, and when it was learned.
    first_uncovered: Option<(i64, Instant)>,
}

/// One partition's channels: their snapshots and what they do not cover.
#[derive(Debug, Default)]
pub struct Coverage {
    marks: HashMap<ChannelId, Mark>,
    /// Oldest uncovered record's offset → its channel.
    uncovered: BTreeMap<i64, ChannelId>,
    /// Channels reset since their latest snapshot: their snapshot is of an earlier reset, so one
    /// is due at once, whatever the versions (its state is at version 0 again).
    reset: std::collections::BTreeSet<ChannelId>,
}

impl Coverage {
    /// A channel read from its snapshot (version `version` of reset `resets`, covering records
    /// before `offset`).
    pub fn restored(&mut self, channel: &ChannelId, version: u64, resets: u64, offset: i64) {
        self.marks.insert(channel.clone(), Mark { snapshot_version: version, resets, last_offset: offset.saturating_sub(1), first_uncovered: None });
    }

    /// The partition's log ends at `end` (the offset after its last record): a snapshot read with
    /// an offset past it (the topic recreated with the snapshot topic kept, or truncated) covers
    /// nothing of this log, and its channel's next snapshot must not name that offset.
    pub fn clamp_to(&mut self, end: i64) {
        for mark in self.marks.values_mut() {
            mark.last_offset = mark.last_offset.min(end - 1);
        }
    }

    /// A committed record of `channel` at `offset` that its snapshot does not cover.
    pub fn recorded(&mut self, channel: &ChannelId, offset: i64, now: Instant) {
        let mark = self.marks.entry(channel.clone()).or_insert(Mark { snapshot_version: 0, resets: 0, last_offset: -1, first_uncovered: None });
        mark.last_offset = mark.last_offset.max(offset);
        if mark.first_uncovered.is_none() {
            mark.first_uncovered = Some((offset, now));
            self.uncovered.insert(offset, channel.clone());
        }
    }

    /// The op record at `offset` reset `channel` to version 0 of reset count `resets`: its
    /// snapshot is of an earlier history now, and one of the new state is due at once
    /// ([`Coverage::reset_pending`]).
    pub fn reset_at(&mut self, channel: &ChannelId, resets: u64, offset: i64, now: Instant) {
        self.recorded(channel, offset, now);
        let mark = self.marks.get_mut(channel).expect("recorded above");
        mark.snapshot_version = 0;
        mark.resets = resets;
        self.reset.insert(channel.clone());
    }

    /// The op record at `offset` deleted `channel`: it needs nothing replayed any more (its
    /// snapshot was tombstoned with the op), so it no longer holds the checkpoint back.
    pub fn forget(&mut self, channel: &ChannelId) {
        if let Some(mark) = self.marks.remove(channel) {
            if let Some((offset, _)) = mark.first_uncovered {
                self.uncovered.remove(&offset);
            }
        }
        self.reset.remove(channel);
    }

    /// Channels reset since their latest snapshot (a snapshot of each is due now), at most `limit`.
    pub fn reset_pending(&self, limit: usize) -> Vec<ChannelId> {
        self.reset.iter().take(limit).cloned().collect()
    }

    /// Whether `channel` was reset since its latest snapshot.
    pub fn is_reset_pending(&self, channel: &ChannelId) -> bool {
        self.reset.contains(channel)
    }

    /// A committed snapshot of `channel` at `version`, covering every record committed before it.
    pub fn snapshotted(&mut self, channel: &ChannelId, version: u64) {
        self.reset.remove(channel);
        if let Some(mark) = self.marks.get_mut(channel) {
            mark.snapshot_version = mark.snapshot_version.max(version);
            if let Some((offset, _)) = mark.first_uncovered.take() {
                self.uncovered.remove(&offset);
            }
        }
    }

    /// A snapshot of `channel` at `version` of reset `resets` that another publisher committed,
    /// read by a standby ([`crate::follow`]): `first` is the oldest record of the channel it does
    /// not cover, with when it was read (`None`: it covers every record read).
    pub fn followed(&mut self, channel: &ChannelId, version: u64, resets: u64, first: Option<(i64, Instant)>) {
        let mark = self.marks.entry(channel.clone()).or_insert(Mark { snapshot_version: 0, resets, last_offset: -1, first_uncovered: None });
        if resets < mark.resets {
            // A snapshot of a history a reset ended: it covers nothing of the new one.
            return;
        }
        self.reset.remove(channel);
        mark.snapshot_version = mark.snapshot_version.max(version);
        mark.resets = resets;
        if let Some((offset, _)) = mark.first_uncovered.take() {
            self.uncovered.remove(&offset);
        }
        if let Some((offset, at)) = first {
            mark.first_uncovered = Some((offset, at));
            mark.last_offset = mark.last_offset.max(offset);
            self.uncovered.insert(offset, channel.clone());
        }
    }

    /// Each channel with a record no snapshot covers, and the offset of its last record.
    pub fn uncovered_last(&self) -> Vec<(ChannelId, i64)> {
        self.uncovered.values().filter_map(|c| Some((c.clone(), self.marks.get(c)?.last_offset))).collect()
    }

    /// The oldest record of `channel` its snapshot does not cover, with when it was learned.
    pub fn first_uncovered(&self, channel: &ChannelId) -> Option<(i64, Instant)> {
        self.marks.get(channel).and_then(|m| m.first_uncovered)
    }

    /// The version of `channel`'s latest snapshot (0: none).
    pub fn snapshot_version(&self, channel: &ChannelId) -> u64 {
        self.marks.get(channel).map_or(0, |m| m.snapshot_version)
    }

    /// The reset counter of `channel` (0 unless its snapshot said otherwise).
    pub fn resets(&self, channel: &ChannelId) -> u64 {
        self.marks.get(channel).map_or(0, |m| m.resets)
    }

    /// The offset after `channel`'s last committed record (what a snapshot of it now reflects).
    pub fn position(&self, channel: &ChannelId) -> i64 {
        self.marks.get(channel).map_or(0, |m| m.last_offset + 1)
    }

    /// How far behind `channel`'s oldest uncovered record is at `now`, in a partition ending at
    /// `end`.
    pub fn behind(&self, channel: &ChannelId, now: Instant, end: i64) -> Option<Behind> {
        self.marks.get(channel)?.first_uncovered.map(|(offset, at)| Behind {
            age: now.saturating_duration_since(at),
            offsets: end.saturating_sub(offset).max(0) as u64,
        })
    }

    /// Channels whose oldest uncovered record is at least `policy.every` old at `now`, or at
    /// least `policy.every_records` offsets behind `end`, oldest first, at most `limit`: the ones
    /// holding the checkpoint back.
    pub fn due_oldest(&self, now: Instant, end: i64, policy: &SnapshotPolicy, limit: usize) -> Vec<ChannelId> {
        self.uncovered
            .values()
            .take_while(|c| self.behind(c, now, end).is_some_and(|b| b.age >= policy.every || b.offsets >= policy.every_records))
            .take(limit)
            .cloned()
            .collect()
    }

    /// The checkpoint once `snapshotting` are covered: the oldest offset a channel still needs
    /// replayed, or `end` (the position after the partition's last known record) when none does.
    pub fn checkpoint_after(&self, snapshotting: &[&ChannelId], end: i64) -> i64 {
        self.uncovered.iter().find(|(_, c)| !snapshotting.contains(c)).map_or(end, |(o, _)| (*o).min(end))
    }

    /// Channels with an uncovered record.
    pub fn uncovered_count(&self) -> usize {
        self.uncovered.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ChannelId {
        ChannelId::parse(s).unwrap()
    }

    #[test]
    fn due_table() {
        let p = SnapshotPolicy { every_versions: 100, every: Duration::from_secs(60), every_records: 1_000, max_per_txn: 8, max_bytes_per_txn: 1 << 20, key_window: Duration::from_secs(600) };
        let s = Duration::from_secs;
        let b = |secs, offsets| Some(Behind { age: s(secs), offsets });
        // (version, snapshot version, oldest uncovered record behind) → due
        let table = [
            (0, 0, None, false),
            (5, 5, None, false),
            (99, 0, b(1, 10), false),
            (100, 0, b(1, 10), true),
            (150, 50, b(0, 0), true),
            (51, 50, b(59, 999), false),
            (51, 50, b(60, 10), true),
            // By records: a partition written fast moves its checkpoint before the time is up.
            (51, 50, b(1, 1_000), true),
            // A channel whose every record is covered is never due, however old or far behind.
            (50, 50, b(600, 100_000), false),
        ];
        for (version, snap, behind, want) in table {
            assert_eq!(due(&p, version, snap, behind), want, "version {version}, snapshot {snap}, {behind:?}");
        }
    }

    #[test]
    fn the_checkpoint_is_the_oldest_uncovered_record() {
        let t0 = Instant::now();
        let mut c = Coverage::default();
        assert_eq!(c.checkpoint_after(&[], 0), 0);
        c.recorded(&id("a"), 3, t0);
        c.recorded(&id("b"), 5, t0);
        c.recorded(&id("a"), 7, t0);
        assert_eq!(c.checkpoint_after(&[], 10), 3);
        // Snapshotting a moves the checkpoint to b's oldest uncovered record.
        assert_eq!(c.checkpoint_after(&[&id("a")], 10), 5);
        c.snapshotted(&id("a"), 2);
        assert_eq!(c.checkpoint_after(&[], 10), 5);
        assert_eq!(c.position(&id("a")), 8);
        c.snapshotted(&id("b"), 1);
        assert_eq!(c.checkpoint_after(&[], 10), 10);
        // A new record of a after its snapshot is uncovered again.
        c.recorded(&id("a"), 11, t0);
        assert_eq!(c.checkpoint_after(&[], 12), 11);
        assert_eq!(c.snapshot_version(&id("a")), 2);
    }

    #[test]
    fn channels_are_due_by_age_or_records_oldest_first() {
        let t0 = Instant::now();
        let mut c = Coverage::default();
        c.recorded(&id("old"), 1, t0);
        c.recorded(&id("mid"), 2, t0 + Duration::from_secs(30));
        c.recorded(&id("new"), 3, t0 + Duration::from_secs(59));
        let at = t0 + Duration::from_secs(90);
        let policy = SnapshotPolicy { every: Duration::from_secs(60), every_records: 100, ..SnapshotPolicy::default() };
        assert_eq!(c.due_oldest(at, 10, &policy, 10), vec![id("old"), id("mid")]);
        assert_eq!(c.due_oldest(at, 10, &policy, 1), vec![id("old")]);
        // By records: 100 offsets behind the end at 102 are old and mid, whatever their age.
        assert_eq!(c.due_oldest(t0, 102, &policy, 10), vec![id("old"), id("mid")]);
        assert_eq!(c.due_oldest(t0, 101, &policy, 10), vec![id("old")]);
        c.restored(&id("r"), 4, 2, 9);
        assert_eq!(c.position(&id("r")), 9);
        assert_eq!((c.snapshot_version(&id("r")), c.resets(&id("r")), c.resets(&id("old"))), (4, 2, 0));
    }
}
