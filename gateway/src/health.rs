//! The gateway's own health: whether its view of the fleet is fresh enough to route and decide by.
//!
//! `GET /health` is 200 only while every node was polled (answered or failed) within
//! [`stale_after`] — a few poll intervals — and 503 + `Retry-After` otherwise: a gateway whose
//! poller stalled routes by a picture of the fleet that may be wrong. `GET /ready` (for container
//! and load-balancer health checks) is 200 when the view is fresh *and* some node serves, so a
//! gateway that can only refuse clients is not sent traffic.

use crate::lifecycle::Status;
use serde::Serialize;
use std::time::Duration;

/// How many poll intervals may pass without a finished poll of a node before the view is stale.
pub const STALE_AFTER_POLLS: u32 = 3;

/// A view older than this is stale: [`STALE_AFTER_POLLS`] intervals (a poll's timeout is at most
/// one interval, so a node that does not answer still gets a finished poll in time).
pub fn stale_after(poll_interval: Duration) -> Duration {
    poll_interval * STALE_AFTER_POLLS
}

/// What the gateway knows of one node's polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePoll {
    pub id: String,
    pub state: Status,
    /// Since the last poll of the node ended; `None` when it was never polled.
    pub polled_ago: Option<Duration>,
    /// Its last answer said it serves sessions (ready, not draining).
    pub serving: bool,
}

/// The verdict of `/health` and `/ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Every node was polled within the staleness bound.
    pub fresh: bool,
    /// Fresh, and at least one node serves.
    pub ready: bool,
    /// Nodes whose last poll is too old or never happened.
    pub stale_nodes: Vec<String>,
}

/// Judges the view (pure: the table test below is the specification).
pub fn judge(polls: &[NodePoll], stale_after: Duration) -> Verdict {
    let stale_nodes: Vec<String> =
        polls.iter().filter(|p| p.polled_ago.is_none_or(|a| a > stale_after)).map(|p| p.id.clone()).collect();
    let fresh = stale_nodes.is_empty();
    Verdict { fresh, ready: fresh && polls.iter().any(|p| p.serving), stale_nodes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(id: &str, ago_ms: Option<u64>, serving: bool) -> NodePoll {
        NodePoll {
            id: id.into(),
            state: if serving { Status::Healthy } else { Status::Down },
            polled_ago: ago_ms.map(Duration::from_millis),
            serving,
        }
    }

    #[test]
    fn fresh_only_while_every_node_was_polled_within_the_bound() {
        let bound = stale_after(Duration::from_millis(1000));
        assert_eq!(bound, Duration::from_millis(3000));
        // (polls, fresh, ready, stale nodes)
        let cases: Vec<(Vec<NodePoll>, bool, bool, Vec<&str>)> = vec![
            (vec![poll("a", Some(100), true), poll("b", Some(900), false)], true, true, vec![]),
            // A node that is DOWN but was polled just now is known, not stale.
            (vec![poll("a", Some(100), false), poll("b", Some(100), false)], true, false, vec![]),
            (vec![poll("a", None, false), poll("b", Some(100), true)], false, false, vec!["a"]),
            (vec![poll("a", Some(3000), true)], true, true, vec![]),
            (vec![poll("a", Some(3001), true), poll("b", Some(5000), true)], false, false, vec!["a", "b"]),
            (vec![], true, false, vec![]),
        ];
        for (polls, fresh, ready, stale) in cases {
            let v = judge(&polls, bound);
            assert_eq!((v.fresh, v.ready), (fresh, ready), "{polls:?}");
            assert_eq!(v.stale_nodes, stale, "{polls:?}");
        }
    }
}
