//! The gateway's `GET /metrics` (Prometheus; see `docs/metrics.md` for the table).
//!
//! Counters (handshake refusals by code, decisions by kind, the proxy's upstream handshake time)
//! are bumped where they happen; the nodes' states, UP streaks, partitions and the proxied
//! sessions are set at each scrape from plain [`Figures`] that the fleet reads from the same view
//! as `/api/fleet`, so they say what it says.

use crate::lifecycle::Status;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use shared::metrics::{label, Labels, StateGauge};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The states a node can be in, in the gateway's view (`gateway_node_state{state}`).
const STATES: [Status; 5] = [Status::Down, Status::Up, Status::Healthy, Status::Draining, Status::Degraded];

/// One node's figures at a scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFigures {
    pub id: String,
    pub state: Status,
    pub up_streak: u32,
    /// Its last health answer said ready.
    pub ready: bool,
    /// Its last health answer said draining.
    pub draining: bool,
    /// The partitions its last health answer said it owns.
    pub assigned: Vec<i32>,
    /// The sessions its last health answer counted.
    pub sessions: usize,
}

/// What a scrape sets the gauges from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    pub nodes: Vec<NodeFigures>,
    /// Sessions this gateway proxies now, per node.
    pub proxied: BTreeMap<String, usize>,
    pub partition_count: u32,
}

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
        for code in ["no_owner", "not_ready", "draining", "not_owner", "behind", "channel_incomplete", "canvas_incomplete", "upstream_unreachable", "upstream_timeout"] {
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

    /// Sets the gauges from `figures` and encodes the registry.
    pub fn render(&self, figures: &Figures, accept: Option<&axum::http::HeaderValue>) -> axum::response::Response {
        let _one = self.scrape.lock().expect("scrape lock");
        self.set(figures);
        shared::metrics::respond(&self.registry, accept)
    }

    /// Sets the gauges from `figures`.
    fn set(&self, figures: &Figures) {
        for f in [&self.state, &self.up_streak, &self.ready, &self.partitions, &self.node_sessions, &self.proxied, &self.owners] {
            f.clear();
        }
        let Figures { nodes, proxied, partition_count } = figures;
        let mut owners: BTreeMap<i64, i64> = (0..i64::from(*partition_count)).map(|p| (p, 0)).collect();
        for n in nodes {
            let node = label("node", &n.id);
            for s in STATES {
                self.state.get_or_create(&vec![("node", n.id.clone()), ("state", s.to_string())]).set(i64::from(s == n.state));
            }
            self.up_streak.get_or_create(&node).set(i64::from(n.up_streak));
            self.ready.get_or_create(&node).set(i64::from(n.ready));
            self.partitions.get_or_create(&node).set(n.assigned.len() as i64);
            self.node_sessions.get_or_create(&node).set(n.sessions as i64);
            self.proxied.get_or_create(&node).set(proxied.get(&n.id).copied().unwrap_or(0) as i64);
            if n.ready && !n.draining {
                for p in &n.assigned {
                    *owners.entry(i64::from(*p)).or_insert(0) += 1;
                }
            }
        }
        self.proxied_total.set(proxied.values().sum::<usize>() as i64);
        for (p, n) in owners {
            self.owners.get_or_create(&label("partition", p)).set(n);
        }
        self.partition_count.set(i64::from(*partition_count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_reads_states_streaks_and_owners_from_the_figures() {
        let m = Metrics::new();
        let node = |id: &str, state, up_streak, ready, assigned: Vec<i32>, sessions| NodeFigures { id: id.into(), state, up_streak, ready, draining: false, assigned, sessions };
        m.set(&Figures {
            nodes: vec![node("ws-1", Status::Up, 3, false, vec![], 0), node("ws-2", Status::Healthy, 9, true, vec![0, 1], 4)],
            proxied: BTreeMap::from([("ws-2".to_owned(), 4)]),
            partition_count: 3,
        });
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
