//! The idempotency keys a partition's checkpoint moves past, carried into the snapshot topic.
//!
//! A rebuild reads the events log from each partition's checkpoint on. The idempotency keys of
//! the records below it, within the key window, would otherwise have to be read back from the log
//! (the whole window: minutes of events at any write rate). So every transaction that moves a
//! partition's checkpoint also writes the keys of the records it moves past as key records
//! ([`shared::snapshot::KeyRecord`]), and a rebuild learns them from the snapshot topic.
//!
//! [`KeyBook`] is one partition's side of it: the keyed records at or after the checkpoint
//! (pending), the key records in the topic and their newest key's time (live: tombstoned once
//! that is older than the window), and whether the partition's "complete from" record is still to
//! be written. [`KeyBook::plan`] is pure: the writes for a checkpoint move; [`KeyBook::applied`]
//! takes a committed plan in.

use crate::log::SnapshotWrite;
use shared::snapshot::{encode_keys_from, KeyEntry, KeyRecord, KEYS_FROM_KEY};
use std::collections::BTreeMap;

/// Most keys one key record carries (about 150 bytes each: far below the topic's record limit).
pub const KEYS_PER_RECORD: usize = 5_000;

/// Most bytes of keys one checkpoint move writes (always at least one keyed record's): a move
/// that would carry more stops at the first keyed record past the budget and the rest go with the
/// next, so a transaction's key records stay about as large as its snapshots may be
/// ([`crate::snapshots::SnapshotPolicy::max_bytes_per_txn`]) instead of the whole window's keys
/// (up to `KEYS_REMEMBERED` of them, about 15 MB) at once.
pub const KEY_BYTES_PER_MOVE: usize = 1 << 20;

/// About what a key takes in a key record (its JSON).
fn entry_bytes(e: &KeyEntry) -> usize {
    e.key.len() + e.canvas.len() + 120
}

/// One partition's keys on their way into the snapshot topic.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KeyBook {
    /// Keyed records at or after the last checkpoint: offset → their keys.
    pending: BTreeMap<i64, Vec<KeyEntry>>,
    /// Key records in the topic: name → its newest key's time.
    live: BTreeMap<String, u64>,
    /// The offset to write as the partition's "key records complete from", once: set when the
    /// topic had none (a fresh partition, or one a publisher without key records wrote).
    from_to_write: Option<i64>,
}

/// The key-record writes of one checkpoint move: the "complete from" record, tombstones, then
/// key records, in that order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KeyWrites {
    /// The checkpoint they go with: pending keys below it are written.
    pub below: i64,
    /// Key records written: name and newest key's time.
    pub records: Vec<(String, u64)>,
    /// Key records tombstoned (every key in them older than the window).
    pub tombstones: Vec<String>,
    /// Whether the "complete from" record is written.
    pub wrote_from: bool,
    /// The snapshot-topic records, in order.
    pub writes: Vec<SnapshotWrite>,
}

impl KeyBook {
    /// A partition's book after a rebuild: the key records read (`live`: name and newest time),
    /// and `complete_from` (the partition's "complete from" record), or `None` when it has none,
    /// in which case `checkpoint` (where this publisher's reads start) is written as one with
    /// the first checkpoint move.
    pub fn restored(live: impl IntoIterator<Item = (String, u64)>, complete_from: Option<i64>, checkpoint: i64) -> Self {
        Self { pending: BTreeMap::new(), live: live.into_iter().collect(), from_to_write: complete_from.is_none().then_some(checkpoint) }
    }

    /// The keys of a committed record at `offset` (at or after the checkpoint).
    pub fn record(&mut self, offset: i64, entries: Vec<KeyEntry>) {
        if !entries.is_empty() {
            self.pending.entry(offset).or_default().extend(entries);
        }
    }

    /// Keyed records waiting for a checkpoint move.
    pub fn pending_records(&self) -> usize {
        self.pending.len()
    }

    /// Whether keyed records wait below `checkpoint` (where the partition's snapshots would let
    /// its checkpoint move): a move was cut short by [`KEY_BYTES_PER_MOVE`], or a rebuild read
    /// them from a checkpoint the snapshots have passed. A move without snapshots writes them.
    pub fn held_back(&self, checkpoint: i64) -> bool {
        self.pending.range(..checkpoint).next().is_some()
    }

    /// The writes that go with moving partition `partition`'s checkpoint towards `checkpoint` at
    /// `now_ms`: the pending keys below it within `window_ms` (in records of at most
    /// [`KEYS_PER_RECORD`]) up to `max_bytes` (then [`KeyWrites::below`], where the checkpoint
    /// moves, is the first keyed record left for the next move), tombstones of the key records
    /// whose keys are all older than the window, and the "complete from" record if it is due. Pure.
    pub fn plan(&self, partition: i32, checkpoint: i64, now_ms: u64, window_ms: u64, max_bytes: usize) -> KeyWrites {
        let oldest_kept = now_ms.saturating_sub(window_ms);
        let mut out = KeyWrites { below: checkpoint, ..KeyWrites::default() };
        if let Some(from) = self.from_to_write {
            out.wrote_from = true;
            out.writes.push(SnapshotWrite { partition, key: KEYS_FROM_KEY.to_owned(), value: encode_keys_from(from) });
        }
        // Tombstones first: a key record of an older history (the events topic recreated) can
        // have the name of one written now, which must outlive it.
        for (name, newest) in &self.live {
            if *newest < oldest_kept {
                out.tombstones.push(name.clone());
                out.writes.push(SnapshotWrite { partition, key: name.clone(), value: Vec::new() });
            }
        }
        let mut moving: Vec<(i64, &KeyEntry)> = Vec::new();
        let mut bytes = 0;
        for (o, es) in self.pending.range(..checkpoint) {
            let kept: Vec<&KeyEntry> = es.iter().filter(|e| e.at_ms >= oldest_kept).collect();
            let size: usize = kept.iter().map(|e| entry_bytes(e)).sum();
            if !moving.is_empty() && bytes + size > max_bytes {
                out.below = *o;
                break;
            }
            bytes += size;
            moving.extend(kept.into_iter().map(|e| (*o, e)));
        }
        if let Some(&(first, _)) = moving.first() {
            for (n, chunk) in moving.chunks(KEYS_PER_RECORD).enumerate() {
                let rec = KeyRecord { name: KeyRecord::name_of(first, n), entries: chunk.iter().map(|(_, e)| (*e).clone()).collect() };
                out.records.push((rec.name.clone(), rec.newest_ms()));
                out.writes.push(SnapshotWrite { partition, key: rec.name.clone(), value: rec.encode() });
            }
        }
        out
    }

    /// What a standby read of another publisher's writes to the snapshot topic
    /// ([`crate::follow`]): its checkpoint moved to `checkpoint` (the keys below it are in key
    /// records now), key records `records` written and `tombstones` removed, and whether the
    /// partition's "complete from" record exists (`from_written`).
    pub fn followed(&mut self, checkpoint: Option<i64>, records: &[(String, u64)], tombstones: &[String], from_written: bool) {
        if let Some(c) = checkpoint {
            self.pending = self.pending.split_off(&c);
        }
        for name in tombstones {
            self.live.remove(name);
        }
        for (name, newest) in records {
            self.live.insert(name.clone(), *newest);
        }
        if from_written {
            self.from_to_write = None;
        }
    }

    /// `writes` committed.
    pub fn applied(&mut self, writes: &KeyWrites) {
        self.pending = self.pending.split_off(&writes.below);
        for name in &writes.tombstones {
            self.live.remove(name);
        }
        for (name, newest) in &writes.records {
            self.live.insert(name.clone(), *newest);
        }
        if writes.wrote_from {
            self.from_to_write = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str, offset: i64, at_ms: u64) -> KeyEntry {
        KeyEntry { key: k.into(), canvas: "c1".into(), x: 0, y: 0, color: [1, 2, 3], data: None, version: 1, offset, at_ms }
    }

    fn keys_of(w: &KeyWrites) -> Vec<String> {
        w.writes
            .iter()
            .filter(|s| s.key.starts_with(shared::snapshot::KEYS_PREFIX) && s.key != KEYS_FROM_KEY && !s.value.is_empty())
            .flat_map(|s| match shared::snapshot::decode(Some(s.key.as_bytes()), Some(&s.value)) {
                Ok(Some(shared::snapshot::Entry::Keys(r))) => r.entries.into_iter().map(|e| e.key).collect::<Vec<_>>(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_checkpoint_move_writes_the_keys_it_moves_past_within_the_window() {
        let mut b = KeyBook::restored([], Some(0), 0);
        b.record(3, vec![key("old", 3, 1_000)]);
        b.record(5, vec![key("a", 5, 9_000), key("b", 5, 9_000)]);
        b.record(9, vec![key("later", 9, 9_500)]);
        // Window 5 s at 10 s: "old" (1 s) is past it; "later" is at the new checkpoint.
        let w = b.plan(2, 9, 10_000, 5_000, KEY_BYTES_PER_MOVE);
        assert_eq!(keys_of(&w), vec!["a", "b"]);
        assert_eq!(w.records, vec![("#keys-5-0".to_owned(), 9_000)]);
        assert!(!w.wrote_from && w.tombstones.is_empty());
        assert!(w.writes.iter().all(|s| s.partition == 2));
        b.applied(&w);
        assert_eq!(b.pending_records(), 1, "the record at the checkpoint waits for the next move");
        // Once every key in it is older than the window, the key record is tombstoned.
        let w2 = b.plan(2, 9, 14_001, 5_000, KEY_BYTES_PER_MOVE);
        assert_eq!(w2.tombstones, vec!["#keys-5-0".to_owned()]);
        assert!(w2.writes.iter().any(|s| s.key == "#keys-5-0" && s.value.is_empty()));
        b.applied(&w2);
        assert!(b.plan(2, 9, 20_000, 5_000, KEY_BYTES_PER_MOVE).writes.is_empty());
    }

    #[test]
    fn the_complete_from_record_is_written_once_where_the_topic_had_none() {
        let mut b = KeyBook::restored([("#keys-1-0".to_owned(), 50_000)], None, 42);
        let w = b.plan(0, 42, 60_000, 600_000, KEY_BYTES_PER_MOVE);
        assert!(w.wrote_from);
        assert_eq!(shared::snapshot::decode(Some(KEYS_FROM_KEY.as_bytes()), Some(&w.writes[0].value)).unwrap(), Some(shared::snapshot::Entry::KeysFrom(42)));
        b.applied(&w);
        assert!(!b.plan(0, 42, 60_000, 600_000, KEY_BYTES_PER_MOVE).wrote_from);
        assert!(!KeyBook::restored([], Some(7), 42).plan(0, 42, 0, 1, KEY_BYTES_PER_MOVE).wrote_from, "a topic that has one gets none");
    }

    #[test]
    fn a_tombstone_of_an_old_record_comes_before_a_new_record_of_the_same_name() {
        // An old history's record, to be tombstoned (its time forced out of the window).
        let mut b = KeyBook::restored([("#keys-0-0".to_owned(), 0)], None, 0);
        b.record(0, vec![key("new", 0, 9_000)]);
        let w = b.plan(0, 5, 10_000, 5_000, KEY_BYTES_PER_MOVE);
        let order: Vec<(&str, bool)> = w.writes.iter().map(|s| (s.key.as_str(), s.value.is_empty())).collect();
        assert_eq!(order, vec![(KEYS_FROM_KEY, false), ("#keys-0-0", true), ("#keys-0-0", false)]);
        b.applied(&w);
        assert_eq!(b.live.get("#keys-0-0"), Some(&9_000), "the new record is live");
    }

    #[test]
    fn many_keys_are_split_into_records_of_a_bounded_size() {
        let mut b = KeyBook::restored([], Some(0), 0);
        for o in 0..(KEYS_PER_RECORD as i64 + 10) {
            b.record(o, vec![key(&format!("k{o}"), o, 1_000)]);
        }
        let w = b.plan(0, i64::MAX, 1_000, 600_000, usize::MAX);
        assert_eq!(w.records.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), vec!["#keys-0-0", "#keys-0-1"]);
        assert_eq!(keys_of(&w).len(), KEYS_PER_RECORD + 10);
        assert!(w.writes.iter().all(|s| s.value.len() < shared::snapshot::MAX_RECORD_BYTES));
    }

    /// A move carries at most the byte budget of keys (whole records, at least one): the
    /// checkpoint then stops at the first keyed record left, which the next move writes.
    #[test]
    fn a_move_with_more_keys_than_its_budget_stops_at_the_first_record_left() {
        let mut b = KeyBook::restored([], Some(0), 0);
        for o in 0..10i64 {
            b.record(o * 2, vec![key(&format!("a{o}"), o * 2, 1_000), key(&format!("b{o}"), o * 2, 1_000)]);
        }
        let per_record = 2 * entry_bytes(&key("a0", 0, 1_000));
        // (budget, keys written, where the checkpoint moves)
        let table = [(usize::MAX, 20, 25), (per_record * 3, 6, 6), (per_record * 3 + 1, 6, 6), (1, 2, 2), (0, 2, 2)];
        for (budget, written, below) in table {
            let w = b.plan(0, 25, 1_000, 600_000, budget);
            assert_eq!((keys_of(&w).len(), w.below), (written, below), "budget {budget}");
        }
        assert!(b.held_back(25));
        let mut moves = 0;
        while b.held_back(25) {
            let w = b.plan(0, 25, 1_000, 600_000, per_record * 3);
            assert!(w.below > 0 && keys_of(&w).len() <= 6);
            b.applied(&w);
            moves += 1;
        }
        assert_eq!(moves, 4, "20 keys, 6 a move");
        // Expired keys take no budget and are passed over.
        let mut old = KeyBook::restored([], Some(0), 0);
        old.record(1, vec![key("gone", 1, 0)]);
        old.record(3, vec![key("kept", 3, 1_000)]);
        let w = old.plan(0, 9, 1_000, 500, 1);
        assert_eq!((keys_of(&w), w.below), (vec!["kept".to_owned()], 9));
    }
}
