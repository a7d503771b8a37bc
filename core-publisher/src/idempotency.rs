//! Idempotency keys: a publish retried with the same `Idempotency-Key` is applied once.
//!
//! - The same key with the same request (canvas, x, y, colour) returns the first result.
//! - The same key with a different request is a conflict (409), never a second write.
//! - A key whose request is still running is refused (409) rather than run twice.
//!
//! The key travels with the event as a Kafka record header, so when a publish ended with an
//! unknown outcome, the log itself says whether that key landed (reconciliation reads it back),
//! and a restarted publisher relearns the keys of the records it reads. Memory is bounded: the
//! store keeps the most recent `capacity` keys.

use crate::versions::Published;
use shared::{CanvasId, Color};
use std::collections::{HashMap, VecDeque};

/// What a key stands for: the request it was first used with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub canvas: CanvasId,
    pub x: u32,
    pub y: u32,
    pub color: Color,
}

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
#[derive(Debug)]
pub struct KeyStore {
    capacity: usize,
    slots: HashMap<String, Slot>,
    /// Keys in insertion order, for eviction.
    order: VecDeque<String>,
}

impl KeyStore {
    /// A store keeping at most `capacity` keys (the oldest are forgotten first).
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), slots: HashMap::new(), order: VecDeque::new() }
    }

    fn insert(&mut self, key: &str, slot: Slot) {
        if self.slots.insert(key.to_owned(), slot).is_none() {
            self.order.push_back(key.to_owned());
            while self.order.len() > self.capacity {
                if let Some(old) = self.order.pop_front() {
                    // An in-flight key is never evicted under its request.
                    match self.slots.get(&old) {
                        Some(Slot::InFlight) => self.order.push_back(old),
                        _ => {
                            self.slots.remove(&old);
                        }
                    }
                }
            }
        }
    }

    /// Looks `key` up for a request `fp`, marking it in flight when it is new.
    pub fn begin(&mut self, key: &str, fp: &Fingerprint) -> Lookup {
        match self.slots.get(key) {
            None => {
                self.insert(key, Slot::InFlight);
                Lookup::New
            }
            Some(Slot::InFlight) => Lookup::InFlight,
            Some(Slot::Done(first, published)) if first == fp => Lookup::Replay(published.clone()),
            Some(Slot::Done(..)) => Lookup::Conflict,
        }
    }

    /// The outcome of a request begun with [`KeyStore::begin`]: applied (`Some`) or not, or not
    /// known (`None`: the key is released; if the record did land, reconciliation will find it).
    pub fn finish(&mut self, key: &str, fp: &Fingerprint, outcome: Option<Published>) {
        match outcome {
            Some(p) => {
                self.slots.insert(key.to_owned(), Slot::Done(fp.clone(), p));
            }
            None => {
                if matches!(self.slots.get(key), Some(Slot::InFlight)) {
                    self.slots.remove(key);
                    self.order.retain(|k| k != key);
                }
            }
        }
    }

    /// A key found in the log with the request it applied.
    pub fn learn(&mut self, key: &str, fp: Fingerprint, published: Published) {
        match self.slots.get(key) {
            Some(Slot::Done(..)) => {}
            Some(Slot::InFlight) => {
                self.slots.insert(key.to_owned(), Slot::Done(fp, published));
            }
            None => self.insert(key, Slot::Done(fp, published)),
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

    /// Keys held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
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
        // Unknown outcome: released, then learned from the log.
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

    #[test]
    fn key_syntax() {
        assert_eq!(key_problem("abc-123_X"), None);
        assert!(key_problem("").is_some());
        assert!(key_problem(&"a".repeat(129)).is_some());
        assert!(key_problem("has space").is_some());
        assert!(key_problem("é").is_some());
    }
}
