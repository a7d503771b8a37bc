//! The node's event counts and durations ([`Counters`]), bumped where they happen (the hub's
//! fan-out, the session task, the rebalance callback, the hand-over task). The hub holds them, so
//! every part that has the hub can count; [`crate::metrics`] registers them for `GET /metrics`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use shared::metrics::{label, Labels};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Event counts and durations of one node.
pub struct Counters {
    /// Event frames handed to sessions (live fan-out and resume backlogs).
    pub deliveries: Counter,
    /// Bytes of those frames (WebSocket framing included).
    pub sent_bytes: Counter,
    /// Sessions ended, by the close code sent or received (`1006`: the connection was lost
    /// without a close frame, RFC 6455 §7.1.5).
    pub closes: Family<Labels, Counter>,
    /// Sessions started with a snapshot instead of events (since 0, another epoch, or a resume
    /// from before the window).
    pub snapshots_sent: Counter,
    /// Broadcast-group rebalance callbacks, by kind (`assign`, `revoke`, `error`).
    pub rebalances: Family<Labels, Counter>,
    /// Partitions moved by those callbacks, by kind.
    pub rebalanced_partitions: Family<Labels, Counter>,
    /// How long a revoked partition was held (its sessions served from the log) before its hold
    /// ended: handed over, drained, or assigned back.
    pub hold_seconds: Histogram,
    /// When each held partition's hold started.
    holds: Mutex<HashMap<i32, Instant>>,
}

impl Default for Counters {
    fn default() -> Self {
        let c = Self {
            deliveries: Counter::default(),
            sent_bytes: Counter::default(),
            closes: Family::default(),
            snapshots_sent: Counter::default(),
            rebalances: Family::default(),
            rebalanced_partitions: Family::default(),
            hold_seconds: shared::metrics::seconds_histogram(),
            holds: Mutex::new(HashMap::new()),
        };
        // The usual label values exist from the start (at 0), so a dashboard's rate() has a
        // series before the first close or rebalance.
        use shared::protocol::close;
        for code in [close::NORMAL, close::GOING_AWAY, close::NO_STATUS, close::ABNORMAL, close::SERVICE_RESTART, close::TRY_AGAIN_LATER] {
            c.closes.get_or_create(&label("code", code)).inc_by(0);
        }
        for kind in ["assign", "revoke"] {
            c.rebalances.get_or_create(&label("kind", kind)).inc_by(0);
            c.rebalanced_partitions.get_or_create(&label("kind", kind)).inc_by(0);
        }
        c
    }
}

impl Counters {
    /// `frames` frames of `bytes` bytes in all were handed to sessions.
    pub fn delivered(&self, frames: usize, bytes: usize) {
        self.deliveries.inc_by(frames as u64);
        self.sent_bytes.inc_by(bytes as u64);
    }

    /// A session started with a backlog of `frames` event frames of `bytes` bytes (`snapshot`:
    /// the backlog is a snapshot).
    pub fn backlog(&self, snapshot: bool, frames: usize, bytes: usize) {
        self.delivered(frames, bytes);
        if snapshot {
            self.snapshots_sent.inc();
        }
    }

    /// A session ended with close `code` (`None`: no close frame, counted as 1006).
    pub fn closed(&self, code: Option<u16>) {
        self.closes.get_or_create(&label("code", code.unwrap_or(shared::protocol::close::ABNORMAL))).inc();
    }

    /// A rebalance callback of `kind` moved `partitions` partitions.
    pub fn rebalanced(&self, kind: &'static str, partitions: usize) {
        self.rebalances.get_or_create(&label("kind", kind)).inc();
        self.rebalanced_partitions.get_or_create(&label("kind", kind)).inc_by(partitions as u64);
    }

    /// `partitions` are held from now.
    pub fn hold_started(&self, partitions: &[i32]) {
        let now = Instant::now();
        let mut holds = self.holds.lock().expect("holds lock");
        for p in partitions {
            holds.entry(*p).or_insert(now);
        }
    }

    /// The holds of `partitions` (those held) ended now.
    pub fn hold_ended(&self, partitions: &[i32]) {
        let mut holds = self.holds.lock().expect("holds lock");
        for p in partitions {
            if let Some(t) = holds.remove(p) {
                self.hold_seconds.observe(t.elapsed().as_secs_f64());
            }
        }
    }
}

/// The `kind` label of a rebalance callback's `err` (librdkafka passes assign and revoke as
/// errors).
pub fn rebalance_kind(err: rdkafka::types::RDKafkaRespErr) -> &'static str {
    match err {
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => "assign",
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => "revoke",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn a_hold_is_timed_from_its_start_to_its_end_once() {
        let c = Counters::default();
        c.hold_started(&[1, 2]);
        c.hold_ended(&[1]);
        c.hold_ended(&[1, 3]);
        let mut r = Registry::default();
        r.register("hold_seconds", "h", c.hold_seconds.clone());
        assert!(shared::metrics::text(&r).contains("hold_seconds_count 1\n"), "partition 1's hold ended once; 3 was never held");
        c.hold_ended(&[2]);
        assert!(shared::metrics::text(&r).contains("hold_seconds_count 2\n"));
    }

    #[test]
    fn closes_without_a_close_frame_count_as_1006() {
        let c = Counters::default();
        c.closed(Some(1012));
        c.closed(None);
        c.closed(None);
        assert_eq!(c.closes.get_or_create(&label("code", 1006)).get(), 2);
        assert_eq!(c.closes.get_or_create(&label("code", 1012)).get(), 1);
    }
}

/// What the records read say of the publisher's namespaces: a node configured with other
/// namespaces than the publisher's may misread their data, so it says so (a warning at most once a
/// minute, `records_other_namespaces_total`, and `/health`'s `namespaces_mismatch`).
pub struct Formats {
    /// This node's fingerprint.
    mine: String,
    /// Records whose fingerprint is another one.
    pub other: Counter,
    /// The last other fingerprint read, and when it was last warned of.
    last_other: Mutex<Option<(String, Instant)>>,
}

impl Formats {
    /// Counts against `mine`, this node's namespaces fingerprint.
    pub fn new(mine: &str) -> Self {
        Self { mine: mine.to_owned(), other: Counter::default(), last_other: Mutex::new(None) }
    }

    /// A record read with `fingerprint` (`None`: a record of before namespaces, read as pixels).
    pub fn read(&self, fingerprint: Option<&[u8]>) {
        let Some(fp) = fingerprint else { return };
        if fp == self.mine.as_bytes() {
            return;
        }
        self.other.inc();
        let fp = String::from_utf8_lossy(fp).into_owned();
        let mut last = self.last_other.lock().expect("formats lock");
        let warn = match last.as_ref() {
            Some((seen, at)) => *seen != fp || at.elapsed() >= std::time::Duration::from_secs(60),
            None => true,
        };
        if warn {
            tracing::warn!(publisher = %fp, node = %self.mine,
                "records were written under other namespaces than this node's (fleet.toml differs): their data may be misread; give every binary the same fleet.toml");
            *last = Some((fp, Instant::now()));
        }
    }

    /// The other fingerprint read last, if any was.
    pub fn other_seen(&self) -> Option<String> {
        self.last_other.lock().expect("formats lock").as_ref().map(|(fp, _)| fp.clone())
    }
}

#[cfg(test)]
mod formats_tests {
    use super::*;

    #[test]
    fn only_another_fingerprint_is_counted() {
        let f = Formats::new("aaaa");
        for fp in [None, Some(&b"aaaa"[..])] {
            f.read(fp);
        }
        assert_eq!((f.other.get(), f.other_seen()), (0, None));
        f.read(Some(b"bbbb"));
        f.read(Some(b"bbbb"));
        assert_eq!((f.other.get(), f.other_seen().as_deref()), (2, Some("bbbb")));
    }
}
