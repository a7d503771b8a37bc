//! Idempotency keys: a publish retried with the same `Idempotency-Key` is applied once.
//!
//! - The same key with the same request (canvas, x, y, colour) returns the first result.
//! - The same key with a different request is a conflict (409), never a second write.
//! - A key whose request is still running is refused (409) rather than run twice.
//!
//! The key travels with the event as a Kafka record header, so a restarted publisher (or the one
//! that fenced it) relearns the keys of the records it reads. A key stays in flight until its
//! transaction's outcome is known, also when the caller was answered "outcome unknown" first: a
//! retry meanwhile is refused (409 in flight), then replayed or run once the outcome is known.
//! Memory is bounded: the store keeps the most recent `capacity` keys with an outcome.

use crate::types::{Fingerprint, Published};
use std::collections::{HashMap, VecDeque};

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
}

#[derive(Debug, Clone)]
enum Slot {
    InFlight,
    Done(Fingerprint, Published),
}

/// The most recent keys and their outcomes.
///
/// Keys with an outcome are kept in arrival order and the oldest are forgotten past `capacity`.
/// Keys in flight are not in that order at all: they are bounded by the requests running (each
/// holds one until its outcome is known), and forgetting one under its request would let a retry
/// run it twice. So every operation is O(1), whatever is in flight.
#[derive(Debug)]
pub struct KeyStore {
    capacity: usize,
    slots: HashMap<String, Slot>,
    /// Keys with an outcome, oldest first.
    done: VecDeque<String>,
}

impl KeyStore {
    /// A store keeping at most `capacity` keys with an outcome (the oldest are forgotten first),
    /// plus those in flight.
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), slots: HashMap::new(), done: VecDeque::new() }
    }

    /// Records `key`'s outcome and forgets the oldest outcomes past the capacity.
    fn set_done(&mut self, key: &str, fp: Fingerprint, published: Published) {
        if let Some(Slot::Done(..)) = self.slots.insert(key.to_owned(), Slot::Done(fp, published)) {
            return; // already in the order
        }
        self.done.push_back(key.to_owned());
        while self.done.len() > self.capacity {
            if let Some(old) = self.done.pop_front() {
                self.slots.remove(&old);
            }
        }
    }

    /// Looks `key` up for a request `fp`, marking it in flight when it is new.
    pub fn begin(&mut self, key: &str, fp: &Fingerprint) -> Lookup {
        match self.slots.get(key) {
            None => {
                self.slots.insert(key.to_owned(), Slot::InFlight);
                Lookup::New
            }
            Some(Slot::InFlight) => Lookup::InFlight,
            Some(Slot::Done(first, published)) if first == fp => Lookup::Replay(published.clone()),
            Some(Slot::Done(..)) => Lookup::Conflict,
        }
    }

    /// The outcome of a request begun with [`KeyStore::begin`]: applied (`Some`) or certainly not
    /// (`None`: the key is released and a retry runs again).
    pub fn finish(&mut self, key: &str, fp: &Fingerprint, outcome: Option<Published>) {
        match outcome {
            Some(p) => self.set_done(key, fp.clone(), p),
            None => {
                if matches!(self.slots.get(key), Some(Slot::InFlight)) {
                    self.slots.remove(key);
                }
            }
        }
    }

    /// A key found in the log with the request it applied.
    pub fn learn(&mut self, key: &str, fp: Fingerprint, published: Published) {
        if !matches!(self.slots.get(key), Some(Slot::Done(..))) {
            self.set_done(key, fp, published);
        }
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
        self.slots.len() - self.done.len()
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
    use shared::{CanvasId, Color};

    fn fp(x: u32) -> Fingerprint {
        Fingerprint { canvas: CanvasId::parse("c1").unwrap(), x, y: 0, color: Color([0, 0, 0]) }
    }

    fn published(v: u64) -> Published {
        Published { canvas: CanvasId::parse("c1").unwrap(), version: v, partition: 0, offset: v as i64 }
    }

    #[test]
    fn key_lifecycle_table() {
        let mut s = KeyStore::new(10);
        assert_eq!(s.begin("k", &fp(1)), Lookup::New);
        assert_eq!(s.begin("k", &fp(1)), Lookup::InFlight, "a second request while the first runs");
        s.finish("k", &fp(1), Some(published(7)));
        assert_eq!(s.begin("k", &fp(1)), Lookup::Replay(published(7)));
        assert_eq!(s.begin("k", &fp(2)), Lookup::Conflict, "same key, other request");
        // Released (not applied), then learned from the log (a restart read it).
        assert_eq!(s.begin("u", &fp(3)), Lookup::New);
        s.finish("u", &fp(3), None);
        assert_eq!(s.applied_as("u", &fp(3)), Applied::No);
        s.learn("u", fp(3), published(8));
        assert_eq!(s.begin("u", &fp(3)), Lookup::Replay(published(8)));
        // Not written: released, and a retry runs again.
        assert_eq!(s.begin("n", &fp(4)), Lookup::New);
        s.finish("n", &fp(4), None);
        assert_eq!(s.begin("n", &fp(4)), Lookup::New);
    }

    #[test]
    fn the_store_is_bounded_and_keeps_in_flight_keys() {
        let mut s = KeyStore::new(3);
        assert_eq!(s.begin("busy", &fp(0)), Lookup::New);
        for i in 0..10 {
            s.learn(&format!("k{i}"), fp(i), published(i as u64));
        }
        assert!(s.len() <= 4, "{}", s.len());
        assert_eq!(s.begin("busy", &fp(0)), Lookup::InFlight);
        assert!(matches!(s.applied_as("k9", &fp(9)), Applied::Same(_)));
        assert_eq!(s.applied_as("k0", &fp(0)), Applied::No, "the oldest keys are forgotten");
    }

    /// More keys in flight than the capacity: `begin` used to spin forever here (the eviction
    /// loop put every in-flight key back and tried again), holding the store's mutex.
    #[test]
    fn more_keys_in_flight_than_the_capacity_neither_hang_nor_evict_them() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = KeyStore::new(3);
            let looked: Vec<Lookup> = (0..5).map(|i| s.begin(&format!("f{i}"), &fp(i))).collect();
            let _ = tx.send((looked, s));
        });
        let (looked, mut s) = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("begin() returned (it hung before the fix)");
        assert!(looked.iter().all(|l| *l == Lookup::New));
        assert_eq!((s.len(), s.in_flight()), (5, 5));
        for i in 0..5 {
            assert_eq!(s.begin(&format!("f{i}"), &fp(i)), Lookup::InFlight, "an in-flight key was forgotten");
        }
        // Their outcomes arrive: the capacity applies to keys with an outcome.
        for i in 0..5 {
            s.finish(&format!("f{i}"), &fp(i), Some(published(u64::from(i))));
        }
        assert_eq!((s.len(), s.in_flight()), (3, 0));
        assert_eq!(s.applied_as("f0", &fp(0)), Applied::No, "the oldest outcome is forgotten");
        assert!(matches!(s.applied_as("f4", &fp(4)), Applied::Same(_)));
        // A released key leaves nothing behind.
        assert_eq!(s.begin("r", &fp(9)), Lookup::New);
        s.finish("r", &fp(9), None);
        assert_eq!((s.len(), s.in_flight()), (3, 0));
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
