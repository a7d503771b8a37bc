//! What the fleet shows: the `/api/fleet` body, each node's poll age for the gateway's `/health`,
//! and the figures of `GET /metrics`.

use super::Fleet;
use crate::decisions::DecisionRecord;
use crate::lifecycle::{self, Status};

impl Fleet {
    /// The `/api/fleet` body.
    pub fn snapshot(&self) -> serde_json::Value {
        let waiting = self.admission.waiting();
        let (now, rules) = (self.now_ms(), self.rules());
        let nodes: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .map(|n| {
                let slot = n.slot.lock().expect("slot lock");
                let h = slot.health.as_ref();
                serde_json::json!({
                    "id": n.addr.id,
                    "url": n.addr.url,
                    "state": slot.view.status,
                    "up_streak": slot.view.up_streak,
                    // Hysteresis: the UP streak this node needs now (longer after recent flaps).
                    "required_up_streak": lifecycle::required_up_streak(&slot.view, now, &rules),
                    "recent_flaps": slot.view.flaps.iter().filter(|t| now.saturating_sub(**t) < rules.flap_window_ms).count(),
                    "degraded_streak": slot.view.degraded_streak,
                    "ejected": slot.view.ejected,
                    // Ejections within HOLD_DOWN_WINDOW_MS, and while held down, how much longer
                    // start-recovery is withheld (null: not held down).
                    "recent_ejections": lifecycle::recent_ejections(&slot.view, now, &rules),
                    "held_down_for_ms": lifecycle::held_for(&slot.view, now),
                    "circuit": self.handshakes.circuit(&n.addr.id),
                    // Why the node says it is DEGRADED, from its last answer.
                    "degraded": h.and_then(|(_, h)| h.progress.degraded.clone()),
                    // Only meaningful while UP: whether this UP episode's start-recovery went out.
                    "start_recovery": (slot.view.status == Status::Up).then_some(slot.view.recovery),
                    "awaiting_failback": slot.view.awaiting_failback,
                    // While awaiting: how its ownership moved away (null: it did not, so far; a
                    // node back HEALTHY owning the same partitions gets no failback).
                    "ownership_moved": slot.view.awaiting_failback.then(|| slot.view.ownership_moved.clone()).flatten(),
                    "ready": h.is_some_and(|(_, h)| h.ready),
                    "draining": h.is_some_and(|(_, h)| h.draining),
                    "assigned_partitions": h.map(|(_, h)| h.assigned_partitions.clone()).unwrap_or_default(),
                    "sessions": h.map_or(0, |(_, h)| h.sessions),
                    // The capacity hint: the node's MAX_SESSIONS and seats taken (0: unknown).
                    "max_sessions": h.map_or(0, |(_, h)| h.max_sessions),
                    "session_seats": h.map_or(0, |(_, h)| h.session_seats),
                    "admission_waiting": waiting.get(&n.addr.id).copied().unwrap_or(0),
                    "catchup": h.map(|(_, h)| serde_json::to_value(&h.catchup).unwrap_or_default()),
                    "last_answer_ms_ago": h.map(|(t, _)| t.elapsed().as_millis() as u64),
                    "last_error": slot.last_error,
                })
            })
            .collect();
        let decisions: Vec<DecisionRecord> = self.decisions.list().into_iter().rev().collect();
        serde_json::json!({
            "partition_count": self.partition_count(),
            "proxied_sessions": self.sessions.count(),
            "poll_interval_ms": self.config.poll_interval_ms,
            "up_threshold": self.config.up_threshold,
            "policy": {
                "up_threshold": rules.up_threshold,
                "max_up_threshold": rules.max_up_threshold,
                "flap_window_ms": rules.flap_window_ms,
                "degraded_checks": rules.degraded_checks,
                "min_samples": rules.min_samples,
                "eject_cooldown_ms": rules.eject_cooldown_ms,
                "hold_down_base_ms": rules.hold_down_base_ms,
                "hold_down_max_ms": rules.hold_down_max_ms,
                "hold_down_window_ms": rules.hold_down_window_ms,
            },
            "nodes": nodes,
            "publishers": self.publishers.snapshot(),
            "leadership": self.leadership.snapshot(),
            "decisions": decisions,
        })
    }

    /// Each node's id, how long ago its last poll ended (`None`: never polled) and whether its last
    /// answer said it serves (ready, not draining): what the gateway's `/health` and `/ready` judge.
    pub fn poll_ages(&self) -> Vec<crate::health::NodePoll> {
        self.nodes
            .iter()
            .map(|n| {
                let slot = n.slot.lock().expect("slot lock");
                crate::health::NodePoll {
                    id: n.addr.id.clone(),
                    state: slot.view.status,
                    polled_ago: slot.polled_at.map(|t| t.elapsed()),
                    serving: slot.health.as_ref().is_some_and(|(_, h)| h.ready && !h.draining),
                }
            })
            .collect()
    }

    /// The figures `GET /metrics` sets its gauges from: the same view as [`Fleet::snapshot`].
    pub fn figures(&self) -> crate::metrics::Figures {
        let nodes = self
            .nodes
            .iter()
            .map(|n| {
                let slot = n.slot.lock().expect("slot lock");
                let h = slot.health.as_ref().map(|(_, h)| h);
                crate::metrics::NodeFigures {
                    id: n.addr.id.clone(),
                    state: slot.view.status,
                    up_streak: slot.view.up_streak,
                    ready: h.is_some_and(|h| h.ready),
                    draining: h.is_some_and(|h| h.draining),
                    assigned: h.map(|h| h.assigned_partitions.clone()).unwrap_or_default(),
                    sessions: h.map_or(0, |h| h.sessions),
                }
            })
            .collect();
        crate::metrics::Figures { nodes, proxied: self.sessions.by_node(), partition_count: self.partition_count() }
    }
}
