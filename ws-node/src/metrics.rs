//! The node's `GET /metrics` (Prometheus; see `docs/metrics.md` for the table).
//!
//! Two halves:
//! - [`Counters`]: event counts and durations, bumped where they happen (the hub's fan-out, the
//!   session task, the rebalance callback, the hand-over task). The hub holds them, so every part
//!   that has the hub can count.
//! - [`Metrics`]: the node's [`Registry`] (every series labelled `node`), with the figures that are
//!   state already (sessions, per-partition position, end and lag, catch-up target and position,
//!   the lifecycle state) set from [`Node::health`] at each scrape, so they cannot drift from
//!   what `/health` says.

use crate::hub::Hub;
use crate::node::Node;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use shared::api::{CatchupStatus, NodeState, PartitionRole};
use shared::metrics::{label, Labels, StateGauge};
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

/// Gauges set from the node's state at each scrape.
#[derive(Default)]
struct Scraped {
    up: Gauge,
    ready: Gauge,
    state: StateGauge,
    sessions: Gauge,
    max_sessions: Gauge,
    session_seats: Gauge,
    canvases: Gauge,
    recent_window_bytes: Gauge,
    outbox_frames: Gauge,
    fanout_queue: Gauge,
    partition_count: Gauge,
    owned: Gauge,
    position: StateGauge,
    end: StateGauge,
    lag: StateGauge,
    catchup_running: Gauge,
    catchup_target: StateGauge,
    catchup_position: StateGauge,
    catchup_remaining: StateGauge,
    catchup_replayed: Gauge,
}

/// The node's registry and its scrape-time gauges.
pub struct Metrics {
    registry: Registry,
    scraped: Scraped,
    /// One scrape at a time sets the gauges and encodes them.
    scrape: Mutex<()>,
}

impl Metrics {
    /// A registry of `node_id`'s series (prefix `ws_node`, label `node`), with `counters`.
    pub fn new(node_id: &str, counters: &Counters) -> Self {
        let mut r = Registry::with_prefix_and_labels("ws_node", [("node".into(), node_id.to_owned().into())].into_iter());
        let s = Scraped::default();
        r.register("up", "1 while the node answers (its /health is always 200)", s.up.clone());
        r.register("ready", "1 while the node accepts sessions (caught up, broadcasting, not draining)", s.ready.clone());
        r.register("state", "1 for the node's lifecycle state as /health reports it (UP, HEALTHY, DRAINING, DEGRADED)", s.state.clone());
        r.register("sessions", "Open WebSocket sessions", s.sessions.clone());
        r.register("max_sessions", "Session capacity (MAX_SESSIONS): a full node refuses new handshakes with 503 full", s.max_sessions.clone());
        r.register("session_seats", "Seats taken: open sessions plus handshakes being answered (at most max_sessions)", s.session_seats.clone());
        r.register("canvases", "Canvases held in memory", s.canvases.clone());
        r.register("recent_window_bytes", "Bytes of recent event frames held for resumes", s.recent_window_bytes.clone());
        r.register("outbox_frames", "Frames waiting in session outboxes (not yet taken by the kernel)", s.outbox_frames.clone());
        r.register("fanout_queue_events", "Events applied and not yet handed to the fan-out writer", s.fanout_queue.clone());
        r.register("topic_partitions", "Partitions of the events topic (0 until the first catch-up)", s.partition_count.clone());
        r.register("owned_partitions", "Partitions assigned to this node by the broadcast group", s.owned.clone());
        r.register("partition_position", "Next offset this node reads, per partition and role (owned, held, standby, not_read)", s.position.clone());
        r.register("partition_end", "Readable end (last stable offset) of each partition as last read", s.end.clone());
        r.register("consumer_lag", "Records behind the partition's end (end - position), per partition and role", s.lag.clone());
        r.register("catchup_running", "1 while a catch-up replay runs", s.catchup_running.clone());
        r.register("catchup_target", "Offset the current (or last) catch-up must reach, per partition", s.catchup_target.clone());
        r.register("catchup_position", "Catch-up consumer's position, per partition (caught up when it reaches the target)", s.catchup_position.clone());
        r.register("catchup_remaining", "Records the catch-up still has to read (target - position), per partition", s.catchup_remaining.clone());
        r.register("catchup_replayed_records", "Records replayed by the current (or last) catch-up", s.catchup_replayed.clone());
        r.register("deliveries", "Event frames handed to sessions (live and backlog)", counters.deliveries.clone());
        r.register("sent_bytes", "Bytes of the event frames handed to sessions", counters.sent_bytes.clone());
        r.register("session_closes", "Sessions ended, by close code (1006: connection lost without a close frame)", counters.closes.clone());
        r.register("snapshots_sent", "Sessions started with a canvas snapshot instead of events", counters.snapshots_sent.clone());
        r.register("rebalances", "Broadcast-group rebalance callbacks, by kind (assign, revoke, error)", counters.rebalances.clone());
        r.register("rebalanced_partitions", "Partitions moved by rebalance callbacks, by kind", counters.rebalanced_partitions.clone());
        r.register("hold_seconds", "How long revoked partitions were held before handed over, drained or assigned back", counters.hold_seconds.clone());
        Self { registry: r, scraped: s, scrape: Mutex::new(()) }
    }

    /// Sets the gauges from `node`'s state and encodes the registry (see
    /// [`shared::metrics::respond`]).
    pub fn render(&self, node: &Node, accept: Option<&axum::http::HeaderValue>) -> axum::response::Response {
        let _one = self.scrape.lock().expect("scrape lock");
        self.set(node, &node.hub);
        shared::metrics::respond(&self.registry, accept)
    }

    fn set(&self, node: &Node, hub: &Hub) {
        let h = node.health();
        let s = &self.scraped;
        s.up.set(1);
        s.ready.set(i64::from(h.ready));
        s.state.clear();
        for state in [NodeState::Up, NodeState::Healthy, NodeState::Draining, NodeState::Degraded] {
            s.state.get_or_create(&label("state", state)).set(i64::from(state == h.state));
        }
        s.sessions.set(h.sessions as i64);
        s.max_sessions.set(h.max_sessions as i64);
        s.session_seats.set(h.session_seats as i64);
        s.canvases.set(h.canvases as i64);
        s.recent_window_bytes.set(h.recent_window_bytes as i64);
        s.outbox_frames.set(hub.outbox_frames() as i64);
        s.fanout_queue.set(hub.queued_events() as i64);
        s.partition_count.set(i64::from(h.partition_count));
        s.owned.set(h.assigned_partitions.len() as i64);
        for f in [&s.position, &s.end, &s.lag, &s.catchup_target, &s.catchup_position, &s.catchup_remaining] {
            f.clear();
        }
        for p in &h.partitions {
            let l = partition_labels(p.partition, Some(p.role));
            s.position.get_or_create(&l).set(p.position);
            if let (Some(end), Some(lag)) = (p.end, p.lag) {
                s.end.get_or_create(&l).set(end);
                s.lag.get_or_create(&l).set(lag);
            }
        }
        let c = &h.catchup;
        s.catchup_running.set(i64::from(c.status == CatchupStatus::Running));
        s.catchup_replayed.set(c.replay_count as i64);
        for (p, target) in &c.target_offsets {
            let l = partition_labels(*p, None);
            let position = c.positions.get(p).copied().unwrap_or(0);
            s.catchup_target.get_or_create(&l).set(*target);
            s.catchup_position.get_or_create(&l).set(position);
            s.catchup_remaining.get_or_create(&l).set((target - position).max(0));
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

/// `partition` (and `role`) as labels.
fn partition_labels(partition: i32, role: Option<PartitionRole>) -> Labels {
    let mut l = label("partition", partition);
    if let Some(role) = role {
        l.push(("role", role_name(role).to_owned()));
    }
    l
}

/// A partition role as a label value (as `/health` spells it).
pub fn role_name(role: PartitionRole) -> &'static str {
    match role {
        PartitionRole::Owned => "owned",
        PartitionRole::Held => "held",
        PartitionRole::Standby => "standby",
        PartitionRole::NotRead => "not_read",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_are_the_health_spelling() {
        for role in [PartitionRole::Owned, PartitionRole::Held, PartitionRole::Standby, PartitionRole::NotRead] {
            assert_eq!(serde_json::to_value(role).unwrap(), serde_json::json!(role_name(role)));
        }
    }

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
