//! Idempotency keys: a publish retried with the same `Idempotency-Key` is applied once.
//!
//! - The same key with the same request (channel, x, y, colour) returns the first result.
//! - The same key with a different request is a conflict (409), never a second write.
//! - A key whose request is still running is refused (409) rather than run twice.
//!
//! The key travels with the event as a Kafka record header, so a restarted publisher (or the one
//! that fenced it) relearns the keys of the records it reads. A key stays in flight until its
//! transaction's outcome is known, also when the caller was answered "outcome unknown" first: a
//! retry meanwhile is refused (409 in flight), then replayed or run once the outcome is known.
//! Every key with an outcome carries a time (ms): its event's `published_at_ms` (when the
//! publisher placed it in a transaction), whether the key was learnt from the log or its request
//! finished here, so a key's window ends at the same moment before and after a restart. A key is
//! kept for the whole
//! idempotency window after that time and forgotten once older (oldest by time first), so
//! within the window a key is never applied twice. Memory is bounded by refusing new keys, not
//! by forgetting: once `capacity` keys with an outcome are all within the window, a request with
//! a new key is refused ([`Lookup::Full`]) until the oldest leaves the window.

use crate::types::{Fingerprint, Published};
use std::collections::{BTreeMap, HashMap};

/// What [`KeyStore::applied_as`] knows of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Not applied (unknown, or still running).
    No,
    /// Applied with this request: its first result.
    Same(Published),
    /// Applied with another request.
    Other,
}

/// What to do with a request carrying a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// First use: run it (the key is now marked in flight).
    New,
    /// Already applied: answer with the first result.
    Replay(Published),
    /// Used before with another request.
    Conflict,
    /// The first request with this key has not finished.
    InFlight,
    /// A new key, refused: the store holds its capacity of keys with an outcome, all within the
    /// window. Retry after `retry_after_ms` (until the oldest leaves the window; at least 1 s).
    Full { retry_after_ms: u64 },
}

#[derive(Debug, Clone)]
enum Slot {
    InFlight,
    Done(Fingerprint, Published),
}

/// Least `retry_after_ms` of [`Lookup::Full`].
pub const MIN_RETRY_AFTER_MS: u64 = 1_000;

/// The keys within the idempotency window and their outcomes.
///
/// Keys with an outcome are indexed by their time (ms, then arrival), so the oldest are found
/// and forgotten first whatever order they arrived in (a rebuild interleaves partitions): every
/// operation is O(log n). A key is forgotten only once older than the window, i.e. its time is
/// below `now_ms - window_ms`. Keys in flight are not in that index at all: they are bounded by
/// the requests running (each holds one until its outcome is known), and forgetting one under
/// its request would let a retry run it twice.
///
/// The clock is a parameter (`now_ms`) of every method, so the store is pure.
#[derive(Debug)]
pub struct KeyStore {
    capacity: usize,
    window_ms: u64,
    slots: HashMap<String, Slot>,
    /// Keys with an outcome by (time in ms, arrival), oldest first.
    by_time: BTreeMap<(u64, u64), String>,
    /// Arrival counter: orders keys of the same ms.
    seq: u64,
}

impl KeyStore {
    /// A store keeping each key with an outcome for `window_ms` after its time. [`KeyStore::begin`]
    /// refuses new keys while `capacity` keys with an outcome are within the window.
    pub fn new(capacity: usize, window_ms: u64) -> Self {
        Self { capacity: capacity.max(1), window_ms, slots: HashMap::new(), by_time: BTreeMap::new(), seq: 0 }
    }

    /// The most keys with an outcome [`KeyStore::begin`] takes new ones at.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether a key of time `at_ms` is older than the window at `now_ms`.
    fn expired(&self, at_ms: u64, now_ms: u64) -> bool {
        at_ms < now_ms.saturating_sub(self.window_ms)
    }

    /// Forgets the keys older than the window at `now_ms`, oldest first.
    fn evict(&mut self, now_ms: u64) {
        let from = now_ms.saturating_sub(self.window_ms);
        while let Some(entry) = self.by_time.first_entry() {
            if entry.key().0 >= from {
                break;
            }
            let key = entry.remove();
            self.slots.remove(&key);
        }
    }

    /// Records `key`'s outcome at `at_ms` (unless it has one already).
    fn set_done(&mut self, key: &str, fp: Fingerprint, published: Published, at_ms: u64) {
        if let Some(Slot::Done(..)) = self.slots.get(key) {
            return; // already indexed: the first outcome stands
        }
        self.slots.insert(key.to_owned(), Slot::Done(fp, published));
        self.seq += 1;
        self.by_time.insert((at_ms, self.seq), key.to_owned());
    }

    /// Looks `key` up for a request `fp` at `now_ms`, marking it in flight when it is new and
    /// the store is not full.
    pub fn begin(&mut self, key: &str, fp: &Fingerprint, now_ms: u64) -> Lookup {
        self.evict(now_ms);
        match self.slots.get(key) {
            None => {
                if self.by_time.len() >= self.capacity {
                    return Lookup::Full { retry_after_ms: self.retry_after_ms(now_ms) };
                }
                self.slots.insert(key.to_owned(), Slot::InFlight);
                Lookup::New
            }
            Some(Slot::InFlight) => Lookup::InFlight,
            Some(Slot::Done(first, published)) if first == fp => Lookup::Replay(published.clone()),
            Some(Slot::Done(..)) => Lookup::Conflict,
        }
    }

    /// Time until the oldest key leaves the window (at least [`MIN_RETRY_AFTER_MS`]).
    fn retry_after_ms(&self, now_ms: u64) -> u64 {
        let oldest = self.by_time.keys().next().map_or(now_ms, |(at, _)| *at);
        // Expired once `at < now - window`: at `at + window + 1`.
        oldest.saturating_add(self.window_ms + 1).saturating_sub(now_ms).max(MIN_RETRY_AFTER_MS)
    }

    /// The outcome at `now_ms` of a request begun with [`KeyStore::begin`]: applied (`Some`, with
    /// the event's `published_at_ms`, from which the key is kept for the window, as a rebuild that
    /// learns it from the log keeps it) or certainly not (`None`: the key is released and a retry
    /// runs again). Never refused, even past the capacity.
    pub fn finish(&mut self, key: &str, fp: &Fingerprint, outcome: Option<(Published, u64)>, now_ms: u64) {
        match outcome {
            Some((p, at_ms)) => self.set_done(key, fp.clone(), p, at_ms),
            None => {
                if matches!(self.slots.get(key), Some(Slot::InFlight)) {
                    self.slots.remove(key);
                }
            }
        }
        self.evict(now_ms);
    }

    /// A key found in the log with the request it applied, at `at_ms` (the event's
    /// `published_at_ms`), read at `now_ms`. Never refused and never forgets a key within the
    /// window, so during a rebuild the store may hold more than its capacity: new keys are then
    /// refused ([`Lookup::Full`]) until enough have left the window. A key already older than the
    /// window is not kept.
    pub fn learn(&mut self, key: &str, fp: Fingerprint, published: Published, at_ms: u64, now_ms: u64) {
        if !self.expired(at_ms, now_ms) {
            self.set_done(key, fp, published, at_ms);
        }
        self.evict(now_ms);
    }

    /// The time a key's window counts from (its event's `published_at_ms`), once it has an outcome.
    #[cfg(test)]
    pub fn window_start_of(&self, key: &str) -> Option<u64> {
        self.by_time.iter().find(|(_, k)| k.as_str() == key).map(|((at, _), _)| *at)
    }

    /// Whether `key` was applied, and with `fp` or another request.
    pub fn applied_as(&self, key: &str, fp: &Fingerprint) -> Applied {
        match self.slots.get(key) {
            Some(Slot::Done(first, p)) if first == fp => Applied::Same(p.clone()),
            Some(Slot::Done(..)) => Applied::Other,
            _ => Applied::No,
        }
    }

    /// Keys held (with an outcome, and in flight).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Keys in flight.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.by_time.len()
    }

    /// Forgets every key in flight (their requests were all answered: the publisher starts over
    /// and learns from the log which of them were applied).
    pub fn release_in_flight(&mut self) {
        self.slots.retain(|_, s| matches!(s, Slot::Done(..)));
    }
}

/// Why an `Idempotency-Key` header value is not acceptable, or `None`.
pub fn key_problem(raw: &str) -> Option<&'static str> {
    if raw.is_empty() || raw.len() > 128 {
        return Some("Idempotency-Key must be 1 to 128 characters");
    }
    if !raw.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Some("Idempotency-Key may only contain visible ASCII characters");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{ChannelId, Color};

    fn fp(x: u32) -> Fingerprint {
        Fingerprint::of_paint(&ChannelId::parse("c1").unwrap(), x, 0, Color([0, 0, 0]))
    }

    fn published(v: u64) -> Published {
        Published { channel: ChannelId::parse("c1").unwrap(), version: v, partition: 0, offset: v as i64 }
    }

    /// The window of the tests' stores, ms.
    const W: u64 = 10_000;
    /// A wall clock well past 0.
    const T: u64 = 1_000_000;

    fn done(s: &mut KeyStore, key: &str, x: u32, now_ms: u64) {
        assert_eq!(s.begin(key, &fp(x), now_ms), Lookup::New, "{key}");
        s.finish(key, &fp(x), Some((published(u64::from(x)), now_ms)), now_ms);
    }

    #[test]
    fn key_lifecycle_table() {
        let mut s = KeyStore::new(10, W);
        assert_eq!(s.begin("k", &fp(1), T), Lookup::New);
        assert_eq!(s.begin("k", &fp(1), T), Lookup::InFlight, "a second request while the first runs");
        s.finish("k", &fp(1), Some((published(7), T)), T);
        assert_eq!(s.begin("k", &fp(1), T), Lookup::Replay(published(7)));
        assert_eq!(s.begin("k", &fp(2), T), Lookup::Conflict, "same key, other request");
        // Released (not applied), then learned from the log (a restart read it).
        assert_eq!(s.begin("u", &fp(3), T), Lookup::New);
        s.finish("u", &fp(3), None, T);
        assert_eq!(s.applied_as("u", &fp(3)), Applied::No);
        s.learn("u", fp(3), published(8), T, T);
        assert_eq!(s.begin("u", &fp(3), T), Lookup::Replay(published(8)));
        // Not written: released, and a retry runs again.
        assert_eq!(s.begin("n", &fp(4), T), Lookup::New);
        s.finish("n", &fp(4), None, T);
        assert_eq!(s.begin("n", &fp(4), T), Lookup::New);
    }

    /// Issue 32: more keys than the capacity within the window. Every one of them must still be
    /// known: a retry of a forgotten key would be applied a second time (the store used to forget
    /// the oldest past the capacity).
    #[test]
    fn a_key_within_the_window_is_never_forgotten_past_the_capacity() {
        let mut s = KeyStore::new(3, W);
        for i in 0..10 {
            let key = format!("k{i}");
            // Live: the fourth new key is refused, nothing is forgotten.
            if i < 3 {
                done(&mut s, &key, i, T + u64::from(i));
            } else {
                assert!(matches!(s.begin(&key, &fp(i), T + u64::from(i)), Lookup::Full { .. }), "{key}");
                // From the log (a rebuild, or an in-doubt commit resolved): kept past the capacity.
                s.learn(&key, fp(i), published(u64::from(i)), T + u64::from(i), T + u64::from(i));
            }
        }
        assert_eq!(s.len(), 10, "every key within the window is kept");
        for i in 0..10 {
            assert_eq!(s.begin(&format!("k{i}"), &fp(i), T + W), Lookup::Replay(published(u64::from(i))), "k{i} was forgotten within its window: a retry runs twice");
        }
    }

    /// (time of each key, when it is looked up, which keys are still known): keys leave by time,
    /// whatever order they arrived in (a rebuild reads partitions interleaved).
    #[test]
    fn keys_older_than_the_window_are_forgotten_by_time_whatever_the_arrival_order() {
        let arrivals: [(&str, u64); 5] = [("c", T + 300), ("a", T + 100), ("e", T + 500), ("b", T + 200), ("d", T + 400)];
        let table: [(u64, &str); 7] = [
            (T + 100, "abcde"),
            (T + W + 100, "abcde"), // exactly at the window's edge: still within
            (T + W + 101, "bcde"),
            (T + W + 250, "cde"),
            (T + W + 400, "de"),
            (T + W + 401, "e"),
            (T + W + 501, ""),
        ];
        for (now, known) in table {
            let mut s = KeyStore::new(100, W);
            for (i, (k, at)) in arrivals.iter().enumerate() {
                s.learn(k, fp(i as u32), published(i as u64), *at, T + 500);
            }
            // `finish` of another key moves the clock too.
            assert_eq!(s.begin("other", &fp(99), T + 500), Lookup::New);
            s.finish("other", &fp(99), None, now);
            let mut still: Vec<&str> = arrivals
                .iter()
                .enumerate()
                .filter(|(i, (k, _))| matches!(s.applied_as(k, &fp(*i as u32)), Applied::Same(_)))
                .map(|(_, (k, _))| *k)
                .collect();
            still.sort_unstable();
            assert_eq!(still.concat(), known, "at now = T + {}", now - T);
            assert_eq!(s.len(), known.len());
        }
    }

    /// (capacity, times of the keys held, now, the answer to a new key).
    #[test]
    fn a_full_store_refuses_new_keys_until_the_oldest_leaves_the_window() {
        let table: [(usize, &[u64], u64, Lookup); 6] = [
            (3, &[T, T + 10, T + 20], T + 20, Lookup::Full { retry_after_ms: W - 20 + 1 }),
            (3, &[T + 20, T, T + 10], T + 20, Lookup::Full { retry_after_ms: W - 20 + 1 }), // oldest by time, not arrival
            (3, &[T, T + 10, T + 20], T + W - 500, Lookup::Full { retry_after_ms: MIN_RETRY_AFTER_MS }), // at least 1 s
            (3, &[T, T + 10, T + 20], T + W, Lookup::Full { retry_after_ms: MIN_RETRY_AFTER_MS }),
            (3, &[T, T + 10, T + 20], T + W + 1, Lookup::New), // the oldest left: room again
            (4, &[T, T + 10, T + 20], T + 20, Lookup::New),
        ];
        for (capacity, times, now, want) in table {
            let mut s = KeyStore::new(capacity, W);
            for (i, at) in times.iter().enumerate() {
                s.learn(&format!("k{i}"), fp(i as u32), published(i as u64), *at, *at);
            }
            assert_eq!(s.begin("new", &fp(50), now), want, "capacity {capacity}, keys at {times:?}, now T + {}", now - T);
            if let Lookup::Full { .. } = want {
                assert_eq!(s.in_flight(), 0, "a refused key is not marked in flight");
                // Known keys are answered as ever.
                assert_eq!(s.begin("k0", &fp(0), now), Lookup::Replay(published(0)));
                assert_eq!(s.begin("k1", &fp(7), now), Lookup::Conflict);
            }
        }
    }

    #[test]
    fn in_flight_keys_are_answered_when_full_and_their_outcome_is_kept_past_the_capacity() {
        let mut s = KeyStore::new(2, W);
        assert_eq!(s.begin("busy", &fp(0), T), Lookup::New);
        done(&mut s, "a", 1, T);
        done(&mut s, "b", 2, T);
        assert!(matches!(s.begin("c", &fp(3), T), Lookup::Full { .. }));
        assert_eq!(s.begin("busy", &fp(0), T), Lookup::InFlight);
        s.finish("busy", &fp(0), Some((published(9), T + 1)), T + 1);
        assert_eq!((s.len(), s.in_flight()), (3, 0));
        assert_eq!(s.begin("busy", &fp(0), T + 2), Lookup::Replay(published(9)));
    }

    #[test]
    fn learning_past_the_capacity_keeps_every_key_and_refuses_new_ones_until_they_expire() {
        let mut s = KeyStore::new(3, W);
        assert_eq!(s.begin("busy", &fp(0), T), Lookup::New);
        // A rebuild reads 10 keys of the window (and one older than it, not kept).
        s.learn("ancient", fp(100), published(100), T - W - 1, T);
        for i in 0..10 {
            s.learn(&format!("k{i}"), fp(i), published(u64::from(i)), T - 1_000 + u64::from(i) * 100, T);
        }
        assert_eq!((s.len(), s.in_flight()), (11, 1));
        assert_eq!(s.applied_as("ancient", &fp(100)), Applied::No);
        assert_eq!(s.begin("busy", &fp(0), T), Lookup::InFlight);
        assert_eq!(s.begin("new", &fp(50), T), Lookup::Full { retry_after_ms: W - 1_000 + 1 });
        // k0 .. k6 leave the window (k6 at T - 400, so at T - 400 + W + 1): 3 remain, still full.
        let after_k6 = T - 400 + W + 1;
        assert!(matches!(s.begin("new", &fp(50), after_k6), Lookup::Full { .. }));
        assert_eq!(s.applied_as("k6", &fp(6)), Applied::No);
        assert!(matches!(s.applied_as("k7", &fp(7)), Applied::Same(_)));
        // k7 leaves too: room for a new key.
        assert_eq!(s.begin("new", &fp(50), after_k6 + 100), Lookup::New);
        assert!(matches!(s.applied_as("k8", &fp(8)), Applied::Same(_)));
    }

    /// More keys in flight than the capacity: `begin` used to spin forever here (the eviction
    /// loop put every in-flight key back and tried again), holding the store's mutex.
    #[test]
    fn more_keys_in_flight_than_the_capacity_neither_hang_nor_evict_them() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = KeyStore::new(3, W);
            let looked: Vec<Lookup> = (0..5).map(|i| s.begin(&format!("f{i}"), &fp(i), T)).collect();
            let _ = tx.send((looked, s));
        });
        let (looked, mut s) = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("begin() returned (it hung before the fix)");
        assert!(looked.iter().all(|l| *l == Lookup::New));
        assert_eq!((s.len(), s.in_flight()), (5, 5));
        for i in 0..5 {
            assert_eq!(s.begin(&format!("f{i}"), &fp(i), T), Lookup::InFlight, "an in-flight key was forgotten");
        }
        // Their outcomes arrive: all kept (within the window), past the capacity.
        for i in 0..5 {
            s.finish(&format!("f{i}"), &fp(i), Some((published(u64::from(i)), T + u64::from(i))), T + u64::from(i));
        }
        assert_eq!((s.len(), s.in_flight()), (5, 0));
        assert!(matches!(s.applied_as("f0", &fp(0)), Applied::Same(_)));
        // A released key leaves nothing behind.
        assert!(matches!(s.begin("r", &fp(9), T + W + 1), Lookup::Full { .. }), "only f0 left the window");
        assert_eq!(s.begin("r", &fp(9), T + W + 3), Lookup::New, "f0 .. f2 left the window: room again");
        s.finish("r", &fp(9), None, T + W + 3);
        assert_eq!((s.len(), s.in_flight()), (2, 0));
    }

    #[test]
    fn key_syntax() {
        assert_eq!(key_problem("abc-123_X"), None);
        assert!(key_problem("").is_some());
        assert!(key_problem(&"a".repeat(129)).is_some());
        assert!(key_problem("has space").is_some());
        assert!(key_problem("é").is_some());
    }
}
