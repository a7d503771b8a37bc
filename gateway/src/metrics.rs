//! The gateway's `GET /metrics` (Prometheus; see `docs/metrics.md` for the table).
//!
//! Counters (handshake refusals by code, decisions by kind, the proxy's upstream handshake time)
//! are bumped where they happen; the nodes' states, UP streaks, partitions and the proxied
//! sessions are set from the fleet's own view ([`Fleet::snapshot`]) at each scrape, so they say
//! what `/api/fleet` says.

use crate::fleet::Fleet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use shared::metrics::{label, Labels, StateGauge};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The states a node can be in, in the gateway's view (`gateway_node_state{state}`).
const STATES: [&str; 5] = ["DOWN", "UP", "HEALTHY", "DRAINING", "DEGRADED"];

/// The gateway's registry, counters and scrape-time gauges.
pub struct Metrics {
    registry: Registry,
    /// Client handshakes refused (no upstream could be opened), by the refusal's code.
    pub refusals: Family<Labels, Counter>,
    /// Decisions recorded in the decision log, by kind (the record's `action`) and node.
    pub decisions: Family<Labels, Counter>,
    /// Upstream WebSocket handshakes (gateway → node), seconds, every attempt.
    pub handshake_seconds: Histogram,
    state: StateGauge,
    up_streak: StateGauge,
    ready: StateGauge,
    partitions: StateGauge,
    node_sessions: StateGauge,
    proxied: StateGauge,
    proxied_total: Gauge,
    owners: StateGauge,
    partition_count: Gauge,
    /// One scrape at a time sets the gauges and encodes them.
    scrape: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty registry of the gateway's series (prefix `gateway`).
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("gateway");
        let m = Self {
            registry: Registry::default(),
            refusals: Family::default(),
            decisions: Family::default(),
            handshake_seconds: shared::metrics::seconds_histogram(),
            state: StateGauge::default(),
            up_streak: StateGauge::default(),
            ready: StateGauge::default(),
            partitions: StateGauge::default(),
            node_sessions: StateGauge::default(),
            proxied: StateGauge::default(),
            proxied_total: Gauge::default(),
            owners: StateGauge::default(),
            partition_count: Gauge::default(),
            scrape: Mutex::new(()),
        };
        r.register("node_state", "1 for each node's state in the gateway's view (DOWN, UP, HEALTHY, DRAINING, DEGRADED), 0 for the others", m.state.clone());
        r.register("node_up_streak", "Consecutive UP polls of each node (start-recovery goes out at the threshold)", m.up_streak.clone());
        r.register("node_ready", "1 when the node's last health answer said ready", m.ready.clone());
        r.register("node_partitions", "Partitions each node reported owning in its last health answer", m.partitions.clone());
        r.register("node_sessions", "Sessions each node reported in its last health answer", m.node_sessions.clone());
        r.register("proxied_sessions", "WebSocket sessions the gateway proxies now, by node", m.proxied.clone());
        r.register("proxied_sessions_all", "WebSocket sessions the gateway proxies now, over every node", m.proxied_total.clone());
        r.register("partition_owners", "Ready, not draining nodes that own each partition (0: the partition has no owner)", m.owners.clone());
        r.register("topic_partitions", "Partitions of the events topic as the gateway knows it", m.partition_count.clone());
        r.register("handshake_refusals", "Client handshakes refused because no node could serve them, by code", m.refusals.clone());
        r.register("decisions", "Decisions recorded in the decision log, by kind and node", m.decisions.clone());
        r.register("proxy_handshake_seconds", "Time of each upstream WebSocket handshake to a node", m.handshake_seconds.clone());
        // The usual refusal codes exist from the start (at 0), so a dashboard's rate() has a
        // series before the first refusal.
        for code in ["no_owner", "not_ready", "draining", "not_owner", "behind", "canvas_incomplete", "upstream_unreachable", "upstream_timeout"] {
            m.refusals.get_or_create(&label("code", code)).inc_by(0);
        }
        Self { registry: r, ..m }
    }

    /// A client handshake was refused with `code`.
    pub fn refused(&self, code: &str) {
        self.refusals.get_or_create(&label("code", code)).inc();
    }

    /// A decision of `kind` about `node` was recorded.
    pub fn decided(&self, kind: &str, node: &str) {
        self.decisions.get_or_create(&vec![("kind", kind.to_owned()), ("node", node.to_owned())]).inc();
    }

    /// Sets the gauges from `fleet`'s view and encodes the registry.
    pub fn render(&self, fleet: &Fleet, accept: Option<&axum::http::HeaderValue>) -> axum::response::Response {
        let _one = self.scrape.lock().expect("scrape lock");
        self.set(&fleet.snapshot(), &fleet.proxied_by_node(), fleet.partition_count());
        shared::metrics::respond(&self.registry, accept)
    }

    /// Sets the gauges from an `/api/fleet` body, the proxied sessions per node and the
    /// partition count.
    fn set(&self, snap: &serde_json::Value, proxied: &BTreeMap<String, usize>, partition_count: u32) {
        for f in [&self.state, &self.up_streak, &self.ready, &self.partitions, &self.node_sessions, &self.proxied, &self.owners] {
            f.clear();
        }
        let mut owners: BTreeMap<i64, i64> = (0..i64::from(partition_count)).map(|p| (p, 0)).collect();
        for n in snap["nodes"].as_array().into_iter().flatten() {
            let id = n["id"].as_str().unwrap_or_default();
            let node = label("node", id);
            let state = n["state"].as_str().unwrap_or_default();
            for s in STATES {
                self.state.get_or_create(&vec![("node", id.to_owned()), ("state", s.to_owned())]).set(i64::from(s == state));
            }
            self.up_streak.get_or_create(&node).set(n["up_streak"].as_i64().unwrap_or(0));
            let ready = n["ready"].as_bool().unwrap_or(false);
            self.ready.get_or_create(&node).set(i64::from(ready));
            let assigned: Vec<i64> = n["assigned_partitions"].as_array().into_iter().flatten().filter_map(|p| p.as_i64()).collect();
            self.partitions.get_or_create(&node).set(assigned.len() as i64);
            self.node_sessions.get_or_create(&node).set(n["sessions"].as_i64().unwrap_or(0));
            self.proxied.get_or_create(&node).set(proxied.get(id).copied().unwrap_or(0) as i64);
            if ready && !n["draining"].as_bool().unwrap_or(false) {
                for p in assigned {
                    *owners.entry(p).or_insert(0) += 1;
                }
            }
        }
        self.proxied_total.set(proxied.values().sum::<usize>() as i64);
        for (p, n) in owners {
            self.owners.get_or_create(&label("partition", p)).set(n);
        }
        self.partition_count.set(i64::from(partition_count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_reads_states_streaks_and_owners_from_the_fleet_view() {
        let m = Metrics::new();
        let snap = serde_json::json!({"nodes": [
            {"id": "ws-1", "state": "UP", "up_streak": 3, "ready": false, "draining": false, "assigned_partitions": [], "sessions": 0},
            {"id": "ws-2", "state": "HEALTHY", "up_streak": 9, "ready": true, "draining": false, "assigned_partitions": [0, 1], "sessions": 4},
        ]});
        m.set(&snap, &BTreeMap::from([("ws-2".to_owned(), 4)]), 3);
        let t = shared::metrics::text(&m.registry);
        for line in [
            "gateway_node_state{node=\"ws-1\",state=\"UP\"} 1",
            "gateway_node_state{node=\"ws-1\",state=\"DOWN\"} 0",
            "gateway_node_state{node=\"ws-2\",state=\"HEALTHY\"} 1",
            "gateway_node_up_streak{node=\"ws-1\"} 3",
            "gateway_proxied_sessions{node=\"ws-2\"} 4",
            "gateway_proxied_sessions{node=\"ws-1\"} 0",
            "gateway_partition_owners{partition=\"1\"} 1",
            // Partition 2 is owned by no ready node.
            "gateway_partition_owners{partition=\"2\"} 0",
        ] {
            assert!(t.contains(line), "{line} in\n{t}");
        }
    }
}
