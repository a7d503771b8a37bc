//! The gateway's view of one node, as a state machine: one pure function from (view, poll result)
//! to (view, decisions). Detection (the poller), decision (here) and action (the fleet executor)
//! are kept apart, and every decision carries its reason.
//!
//! Rules:
//! - Each poll is DOWN (no answer within the timeout, or an error), UP, HEALTHY or DRAINING.
//! - UP results are counted in a streak of *consecutive* polls; any other result resets it.
//! - On the `threshold`-th consecutive UP (default 5), start-recovery is sent, once per episode;
//!   it is sent again on a later UP poll only if the call failed or the node reports its catch-up
//!   failed. A process that restarts and dies again is not trusted after one good answer.
//! - Failback: a node that was HEALTHY, then DOWN, and is HEALTHY again with partitions assigned,
//!   gets its partitions' sessions back: the gateway drains them from the nodes that stood in.

use shared::api::{CatchupStatus, NodeState};

/// One poll's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// No answer within the timeout, or an error (connection refused, bad body, 5xx).
    Down { error: String },
    /// The node answered.
    Answer { state: NodeState, assigned: Vec<i32>, catchup: CatchupStatus },
}

/// The gateway's status of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Down,
    Up,
    Healthy,
    Draining,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Down => "DOWN",
            Status::Up => "UP",
            Status::Healthy => "HEALTHY",
            Status::Draining => "DRAINING",
        })
    }
}

/// Where the start-recovery call of the current UP episode stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// Not sent in this episode.
    NotSent,
    /// Sent and accepted (the node is catching up).
    Sent,
}

/// The gateway's view of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub status: Status,
    /// Consecutive UP polls.
    pub up_streak: u32,
    pub recovery: Recovery,
    /// Was HEALTHY at least once (a node that never served has nothing to fail back).
    pub ever_healthy: bool,
    /// Went DOWN after having been HEALTHY, and has not failed back yet.
    pub awaiting_failback: bool,
    /// Partitions the node reported in its last answer.
    pub assigned: Vec<i32>,
}

impl Default for NodeView {
    fn default() -> Self {
        // Until the first poll a node is not trusted: DOWN.
        Self {
            status: Status::Down,
            up_streak: 0,
            recovery: Recovery::NotSent,
            ever_healthy: false,
            awaiting_failback: false,
            assigned: Vec::new(),
        }
    }
}

/// What the gateway decided, to act on and to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The status changed.
    Transition { from: Status, to: Status, reason: String },
    /// Send `POST /admin/start-recovery`.
    StartRecovery { reason: String },
    /// Drain the sessions of `partitions` from the nodes that stood in for this one.
    Failback { partitions: Vec<i32>, reason: String },
}

/// Configuration of the rules.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Consecutive UP polls before start-recovery (default 5).
    pub up_threshold: u32,
}

/// Applies one poll result.
pub fn observe(view: &NodeView, obs: &Observed, rules: Rules) -> (NodeView, Vec<Decision>) {
    let mut next = view.clone();
    let mut decisions = Vec::new();
    let (to, reason) = match obs {
        Observed::Down { error } => (Status::Down, format!("no answer: {error}")),
        Observed::Answer { state, .. } => (
            match state {
                NodeState::Up => Status::Up,
                NodeState::Healthy => Status::Healthy,
                NodeState::Draining => Status::Draining,
            },
            format!("/health says {state}"),
        ),
    };
    if to != view.status {
        decisions.push(Decision::Transition { from: view.status, to, reason });
        // A new episode: whatever was sent before belongs to the old one.
        next.recovery = Recovery::NotSent;
    }
    next.status = to;
    next.up_streak = if to == Status::Up { view.up_streak.saturating_add(1) } else { 0 };
    if let Observed::Answer { assigned, catchup, .. } = obs {
        next.assigned = assigned.clone();
        if to == Status::Up && next.recovery == Recovery::Sent && *catchup == CatchupStatus::Failed {
            // The node's replay failed: the episode's recovery is to be sent again.
            next.recovery = Recovery::NotSent;
        }
    }
    if to == Status::Down && view.ever_healthy && view.status != Status::Down {
        next.awaiting_failback = true;
    }
    if to == Status::Up && next.up_streak >= rules.up_threshold && next.recovery == Recovery::NotSent {
        next.recovery = Recovery::Sent;
        decisions.push(Decision::StartRecovery {
            reason: format!("UP on {} consecutive polls (threshold {})", next.up_streak, rules.up_threshold),
        });
    }
    if to == Status::Healthy {
        next.ever_healthy = true;
        if next.awaiting_failback && !next.assigned.is_empty() {
            next.awaiting_failback = false;
            decisions.push(Decision::Failback {
                partitions: next.assigned.clone(),
                reason: "recovered node is HEALTHY and owns partitions again".into(),
            });
        }
    }
    (next, decisions)
}

/// The start-recovery call failed: allow it again on a later UP poll.
pub fn recovery_call_failed(view: &NodeView) -> NodeView {
    NodeView { recovery: Recovery::NotSent, ..view.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules { up_threshold: 5 };

    fn up() -> Observed {
        Observed::Answer { state: NodeState::Up, assigned: vec![], catchup: CatchupStatus::Idle }
    }
    fn healthy(assigned: &[i32]) -> Observed {
        Observed::Answer { state: NodeState::Healthy, assigned: assigned.to_vec(), catchup: CatchupStatus::Completed }
    }
    fn down() -> Observed {
        Observed::Down { error: "connection refused".into() }
    }
    fn timeout() -> Observed {
        Observed::Down { error: "timed out after 1s".into() }
    }
    fn draining() -> Observed {
        Observed::Answer { state: NodeState::Draining, assigned: vec![], catchup: CatchupStatus::Completed }
    }

    /// Runs `polls` from `start`; returns the number of StartRecovery and Failback decisions and
    /// the final view.
    fn run(start: NodeView, polls: &[Observed]) -> (usize, usize, NodeView) {
        let mut v = start;
        let (mut rec, mut fb) = (0, 0);
        for o in polls {
            let (n, ds) = observe(&v, o, RULES);
            v = n;
            rec += ds.iter().filter(|d| matches!(d, Decision::StartRecovery { .. })).count();
            fb += ds.iter().filter(|d| matches!(d, Decision::Failback { .. })).count();
        }
        (rec, fb, v)
    }

    #[test]
    fn streak_table() {
        let cases: Vec<(&str, Vec<Observed>, usize)> = vec![
            ("UP x4 -> no recovery", vec![up(), up(), up(), up()], 0),
            ("UP x5 -> recovery on the 5th", vec![up(), up(), up(), up(), up()], 1),
            ("UP x9 -> recovery exactly once", vec![up(); 9], 1),
            ("UP x4, DOWN, UP -> no recovery", vec![up(), up(), up(), up(), down(), up()], 0),
            ("UP x4, timeout, UP -> no recovery", vec![up(), up(), up(), up(), timeout(), up()], 0),
            ("UP x4, DRAINING, UP -> no recovery", vec![up(), up(), up(), up(), draining(), up()], 0),
            ("UP x4, HEALTHY, UP -> no recovery", vec![up(), up(), up(), up(), healthy(&[]), up()], 0),
            ("UP x4, DOWN, UP x5 -> one recovery", vec![up(), up(), up(), up(), down(), up(), up(), up(), up(), up()], 1),
            ("two episodes -> two recoveries", [vec![up(); 5], vec![down()], vec![up(); 5]].concat(), 2),
        ];
        for (name, polls, want) in cases {
            assert_eq!(run(NodeView::default(), &polls).0, want, "{name}");
        }
    }

    #[test]
    fn recovery_is_sent_on_the_fifth_poll_exactly() {
        let mut v = NodeView::default();
        for i in 1..=5 {
            let (n, ds) = observe(&v, &up(), RULES);
            v = n;
            let sent = ds.iter().any(|d| matches!(d, Decision::StartRecovery { .. }));
            assert_eq!(sent, i == 5, "poll {i}");
        }
    }

    #[test]
    fn a_failed_call_is_retried_on_the_next_up_poll_only() {
        let (_, _, v) = run(NodeView::default(), &vec![up(); 5]);
        let v = recovery_call_failed(&v);
        let (rec, _, v) = run(v, &[up()]);
        assert_eq!(rec, 1);
        let (rec, _, _) = run(v, &[up(), up()]);
        assert_eq!(rec, 0, "an accepted call is not repeated");
    }

    #[test]
    fn a_failed_catchup_is_recovered_again() {
        let (_, _, v) = run(NodeView::default(), &vec![up(); 5]);
        let failed = Observed::Answer { state: NodeState::Up, assigned: vec![], catchup: CatchupStatus::Failed };
        let (rec, _, _) = run(v, &[failed]);
        assert_eq!(rec, 1);
    }

    #[test]
    fn failback_after_down_then_healthy_with_partitions_once() {
        let polls = [
            vec![up(); 5],
            vec![healthy(&[0, 1, 2])], // first time healthy: not a failback
            vec![down(), down()],
            vec![up(); 5],
            vec![healthy(&[])], // healthy but no partitions yet: wait
            vec![healthy(&[1, 2]), healthy(&[1, 2])],
        ]
        .concat();
        let (rec, fb, v) = run(NodeView::default(), &polls);
        assert_eq!((rec, fb), (2, 1));
        assert!(!v.awaiting_failback);
    }

    #[test]
    fn a_node_that_never_served_has_no_failback() {
        let polls = [vec![down()], vec![up(); 5], vec![healthy(&[0])]].concat();
        assert_eq!(run(NodeView::default(), &polls).1, 0);
    }

    #[test]
    fn transitions_are_reported_with_reasons() {
        let (_, ds) = observe(&NodeView::default(), &up(), RULES);
        assert!(matches!(&ds[0], Decision::Transition { from: Status::Down, to: Status::Up, reason } if reason.contains("UP")));
        let (v, _) = observe(&NodeView::default(), &up(), RULES);
        let (_, ds) = observe(&v, &timeout(), RULES);
        assert!(matches!(&ds[0], Decision::Transition { from: Status::Up, to: Status::Down, reason } if reason.contains("timed out")));
    }
}
