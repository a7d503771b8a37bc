//! The node's `GET /metrics` (Prometheus; see `docs/metrics.md` for the table).
//!
//! [`Metrics`] is the node's [`Registry`] (every series labelled `node`): the event counts and
//! durations of [`Counters`], and gauges of the figures that are state already (sessions,
//! per-partition position, end and lag, catch-up target and position, the lifecycle state), set
//! at each scrape from the `/health` body the node answers then ([`NodeHealth`]), so they cannot
//! drift from what `/health` says. The HTTP routes hold it, beside the node.

use crate::counters::Counters;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use shared::api::{CatchupStatus, NodeHealth, NodeState, PartitionRole};
use shared::metrics::{label, Labels, StateGauge};
use std::sync::Mutex;

/// Figures of the fan-out read at a scrape, beside the `/health` body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    /// Frames waiting in the sessions' outboxes, over every session.
    pub outbox_frames: usize,
    /// Events applied and not yet handed to the fan-out writer.
    pub fanout_queue: usize,
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
    channels: Gauge,
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
    log_start_recoveries: Gauge,
    log_moved_back: Gauge,
    healed_channels: Gauge,
    history_changes: Gauge,
    incomplete_channels: Gauge,
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
    pub fn new(node_id: &str, counters: &Counters, formats: &crate::counters::Formats, guard: &shared::fence::Guard) -> Self {
        let mut r = Registry::with_prefix_and_labels("ws_node", [("node".into(), node_id.to_owned().into())].into_iter());
        let s = Scraped::default();
        r.register("up", "1 while the node answers (its /health is always 200)", s.up.clone());
        r.register("ready", "1 while the node accepts sessions (caught up, broadcasting, not draining)", s.ready.clone());
        r.register("state", "1 for the node's lifecycle state as /health reports it (UP, HEALTHY, DRAINING, DEGRADED)", s.state.clone());
        r.register("sessions", "Open WebSocket sessions", s.sessions.clone());
        r.register("max_sessions", "Session capacity (MAX_SESSIONS): a full node refuses new handshakes with 503 full", s.max_sessions.clone());
        r.register("session_seats", "Seats taken: open sessions plus handshakes being answered (at most max_sessions)", s.session_seats.clone());
        r.register("channels", "Channels held in memory (was ws_node_canvases)", s.channels.clone());
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
        r.register("log_start_recoveries", "Times a reader's position was below its partition's log start and the partition was restored from the snapshots", s.log_start_recoveries.clone());
        r.register("log_moved_back", "Times a reader's position was past its partition's readable end (the topic recreated, or truncated) and the partition was rebuilt as a new history", s.log_moved_back.clone());
        r.register("history_changes", "Times the events topic's ID changed under the serving node, which left service and caught up on the new topic", s.history_changes.clone());
        r.register("incomplete_channels", "Channels whose versions skipped (records deleted with no snapshot covering them) until a snapshot restores them (was ws_node_incomplete_canvases)", s.incomplete_channels.clone());
        r.register("healed_channels", "Incomplete channels healed from a newer snapshot while the node served (was ws_node_healed_canvases)", s.healed_channels.clone());
        r.register("deliveries", "Event frames handed to sessions (live and backlog)", counters.deliveries.clone());
        r.register("records_other_namespaces", "Records written under other namespaces than this node's (their fleet-namespaces header names another fingerprint)", formats.other.clone());
        r.register("sent_bytes", "Bytes of the event frames handed to sessions", counters.sent_bytes.clone());
        r.register("session_closes", "Sessions ended, by close code (1006: connection lost without a close frame)", counters.closes.clone());
        r.register("snapshots_sent", "Sessions started with a snapshot of the channel's state instead of events", counters.snapshots_sent.clone());
        r.register("rebalances", "Broadcast-group rebalance callbacks, by kind (assign, revoke, error)", counters.rebalances.clone());
        r.register("rebalanced_partitions", "Partitions moved by rebalance callbacks, by kind", counters.rebalanced_partitions.clone());
        r.register("hold_seconds", "How long revoked partitions were held before handed over, drained or assigned back", counters.hold_seconds.clone());
        r.register(
            "fencing_refusals",
            "Admin requests the fence refused, by error (stale_leader: a deposed gateway leader's token; unknown_claim; fencing_token_required; control_topic_catching_up)",
            guard.refusals.clone(),
        );
        Self { registry: r, scraped: s, scrape: Mutex::new(()) }
    }

    /// Sets the gauges from the node's `/health` body `h` and `figures` and encodes the registry
    /// (see [`shared::metrics::respond`]).
    pub fn render(&self, h: &NodeHealth, figures: Figures, accept: Option<&axum::http::HeaderValue>) -> axum::response::Response {
        let _one = self.scrape.lock().expect("scrape lock");
        self.set(h, figures);
        shared::metrics::respond(&self.registry, accept)
    }

    fn set(&self, h: &NodeHealth, figures: Figures) {
        let s = &self.scraped;
        s.up.set(1);
        s.ready.set(i64::from(h.ready));
        s.state.clear();
        for state in [NodeState::Up, NodeState::Healthy, NodeState::Draining, NodeState::Degraded] {
            s.state.get_or_create(&label("state", state)).set(i64::from(state == h.state));
        }
        s.sessions.set(h.sessions as i64);
        s.log_start_recoveries.set(h.log_start_recoveries as i64);
        s.log_moved_back.set(h.log_moved_back as i64);
        s.healed_channels.set(h.per_channel.healed_channels as i64);
        s.history_changes.set(h.history_changes as i64);
        s.incomplete_channels.set(h.per_channel.incomplete_channel_count as i64);
        s.max_sessions.set(h.max_sessions as i64);
        s.session_seats.set(h.session_seats as i64);
        s.channels.set(h.per_channel.channels as i64);
        s.recent_window_bytes.set(h.recent_window_bytes as i64);
        s.outbox_frames.set(figures.outbox_frames as i64);
        s.fanout_queue.set(figures.fanout_queue as i64);
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
}
