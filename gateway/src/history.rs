//! The last minutes of the fleet as the gateway's scheduled polls saw it, for the `/fleet` page's
//! charts (`GET /api/fleet/history`): per node, its state, sessions, records applied per second
//! and the partitions it owned, one sample per poll.
//!
//! Records per second is how fast a node's state advanced over the partitions it owned at both
//! ends of a poll interval (the sum of their position deltas over the time between the two
//! answers); a partition that moved in between is left out rather than counted as a jump.

use crate::lifecycle::Status;
use serde::Serialize;
use shared::api::{NodeHealth, PartitionRole};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// How far back the history goes, ms.
pub const HISTORY_MS: u64 = 10 * 60 * 1000;
/// Most samples kept, whatever the poll interval.
pub const MAX_SAMPLES: usize = 1200;

/// One node in one sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSample {
    pub id: String,
    pub state: Status,
    pub sessions: usize,
    /// Partitions it owned (assigned by the broadcast group), sorted; empty when it did not answer.
    pub partitions: Vec<i32>,
    /// Records applied per second over its owned partitions; `None` without two answers in a row.
    pub records_per_sec: Option<f64>,
}

/// The fleet at one scheduled poll.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Unix epoch, ms.
    pub at_ms: u64,
    pub nodes: Vec<NodeSample>,
}

/// A node's owned positions at one answer: (unix ms, partition → position).
type Positions = (u64, BTreeMap<i32, i64>);

/// The rolling history.
#[derive(Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
    last: HashMap<String, Positions>,
}

/// The owned partitions' positions in a health answer.
pub fn owned_positions(h: &NodeHealth) -> BTreeMap<i32, i64> {
    h.partitions.iter().filter(|p| p.role == PartitionRole::Owned).map(|p| (p.partition, p.position)).collect()
}

/// Records per second between two answers, over the partitions owned in both (pure).
pub fn rate(prev: &Positions, now: &Positions) -> Option<f64> {
    let dt_ms = now.0.checked_sub(prev.0).filter(|d| *d > 0)?;
    let moved: i64 = now.1.iter().filter_map(|(p, pos)| prev.1.get(p).map(|before| (pos - before).max(0))).sum();
    Some(moved as f64 * 1000.0 / dt_ms as f64)
}

impl History {
    /// Adds the sample of a scheduled poll: each node's id, state and last answer (`None` when the
    /// poll failed), at `at_ms`; drops samples older than [`HISTORY_MS`] or past [`MAX_SAMPLES`].
    pub fn record(&mut self, at_ms: u64, nodes: Vec<(String, Status, Option<NodeHealth>)>) {
        let nodes = nodes
            .into_iter()
            .map(|(id, state, health)| match health {
                Some(h) => {
                    let now = (at_ms, owned_positions(&h));
                    let records_per_sec = self.last.get(&id).and_then(|prev| rate(prev, &now));
                    self.last.insert(id.clone(), now);
                    NodeSample { id, state, sessions: h.sessions, partitions: h.assigned_partitions, records_per_sec }
                }
                None => {
                    self.last.remove(&id);
                    NodeSample { id, state, sessions: 0, partitions: Vec::new(), records_per_sec: None }
                }
            })
            .collect();
        self.samples.push_back(Sample { at_ms, nodes });
        while self.samples.len() > MAX_SAMPLES || self.samples.front().is_some_and(|s| s.at_ms + HISTORY_MS < at_ms) {
            self.samples.pop_front();
        }
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::api::PartitionHealth;

    fn health(owned: &[(i32, i64)], standby: &[(i32, i64)], sessions: usize) -> NodeHealth {
        let part = |role| move |&(partition, position): &(i32, i64)| PartitionHealth { partition, role, position, end: None, lag: None, since_moved_ms: 0, sessions: 0 };
        let mut h: NodeHealth = serde_json::from_value(serde_json::json!({
            "node_id": "n", "state": "HEALTHY", "up": true, "ready": true, "draining": false,
            "assigned_partitions": owned.iter().map(|p| p.0).collect::<Vec<_>>(), "partition_count": 6,
            "sessions": sessions,
            "catchup": {"status": "completed", "target_offsets": {}, "last_consumed_offsets": {}, "replay_count": 0}
        }))
        .unwrap();
        h.partitions = owned.iter().map(part(PartitionRole::Owned)).chain(standby.iter().map(part(PartitionRole::Standby))).collect();
        h
    }

    #[test]
    fn rate_counts_only_partitions_owned_at_both_answers() {
        let p = |at, ps: &[(i32, i64)]| (at, ps.iter().copied().collect::<BTreeMap<_, _>>());
        // (previous, now, records/s)
        let cases = [
            (p(0, &[(0, 10), (1, 20)]), p(1000, &[(0, 30), (1, 25)]), Some(25.0)),
            // Partition 2 arrived (a takeover): its position is not a jump of this node's.
            (p(0, &[(0, 10)]), p(500, &[(0, 20), (2, 9000)]), Some(20.0)),
            // Partition 1 left.
            (p(0, &[(0, 10), (1, 20)]), p(2000, &[(0, 10)]), Some(0.0)),
            // No time passed, or time went backwards: no rate.
            (p(1000, &[(0, 10)]), p(1000, &[(0, 20)]), None),
            (p(2000, &[(0, 10)]), p(1000, &[(0, 20)]), None),
        ];
        for (prev, now, want) in cases {
            assert_eq!(rate(&prev, &now), want, "{prev:?} → {now:?}");
        }
    }

    #[test]
    fn history_samples_nodes_and_forgets_the_old() {
        let mut h = History::default();
        let t0 = 1_000_000;
        h.record(t0, vec![("ws-1".into(), Status::Healthy, Some(health(&[(0, 100), (1, 0)], &[(2, 5)], 3)))]);
        h.record(t0 + 1000, vec![("ws-1".into(), Status::Healthy, Some(health(&[(0, 150), (1, 10)], &[(2, 500)], 4)))]);
        h.record(t0 + 2000, vec![("ws-1".into(), Status::Down, None)]);
        h.record(t0 + 3000, vec![("ws-1".into(), Status::Up, Some(health(&[], &[], 0)))]);
        let s = h.samples();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].nodes[0].records_per_sec, None, "one answer gives no rate");
        assert_eq!(s[1].nodes[0].records_per_sec, Some(60.0), "standby progress is not counted");
        assert_eq!((s[1].nodes[0].sessions, s[1].nodes[0].partitions.clone()), (4, vec![0, 1]));
        assert_eq!((s[2].nodes[0].state, s[2].nodes[0].partitions.len()), (Status::Down, 0));
        assert_eq!(s[3].nodes[0].records_per_sec, None, "no rate across a failed poll");

        h.record(t0 + HISTORY_MS + 1500, vec![("ws-1".into(), Status::Up, None)]);
        assert_eq!(h.samples().first().unwrap().at_ms, t0 + 2000, "samples older than the window are dropped");
        for i in 0..(MAX_SAMPLES as u64 + 10) {
            h.record(t0 + HISTORY_MS + 2000 + i, vec![]);
        }
        assert_eq!(h.samples().len(), MAX_SAMPLES);
    }
}
