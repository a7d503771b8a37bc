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
//! - Failback: a node that was HEALTHY, then DOWN or DRAINING (a whole-node drain leaves the
//!   broadcast group), and is HEALTHY again with partitions assigned,
//!   gets its partitions' sessions back (the gateway drains them from the nodes that stood in),
//!   but only when its ownership actually moved away during that episode: it answered owning
//!   fewer of the partitions it owned when it went DOWN (or none: a restart), or another node was
//!   seen owning one of them while it was out ([`owned_elsewhere`]: a freeze longer than the
//!   group's session timeout). A node that missed a poll or two and is back owning the same
//!   partitions has nobody standing in for it: nothing to fail back. A node reports DEGRADED, not
//!   HEALTHY, while its ownership is unconfirmed after a freeze, so stale ownership never starts a
//!   failback.
//!
//! Guardrails, each a setting (see [`Rules`]):
//! - Hysteresis: a node that flapped recently (went DOWN from HEALTHY or DEGRADED, or was
//!   ejected, within `flap_window`) needs a longer UP streak: `up_threshold × (1 + flaps)`, at
//!   most `max_up_threshold`.
//! - Ejection ([`eject`], over the whole fleet): a node DEGRADED for a stalled consumer on
//!   `degraded_checks` consecutive polls, after at least `min_samples` answers seen by this gateway, is drained out of the
//!   broadcast group (its partitions move) — at most one node ejected at a time (Envoy's
//!   `max_ejection_percent`, here one node), none within `eject_cooldown` of the last, and never
//!   the last node serving: another node must be HEALTHY, with free seats for its sessions where
//!   the nodes report capacity. A failed ejection is undone ([`eject_failed`]).
//! - Hold-down ([`hold_down`]): a node ejected twice or more within `hold_down_window` is held
//!   down, as Envoy's outlier detection grows its ejection time: start-recovery is not sent until
//!   `hold_down_base × (ejections − 1)`, at most `hold_down_max`, has passed since the ejection
//!   (the first ejection in the window has no hold; the second holds for the base, the third for
//!   twice it, ...). Meanwhile the node stays UP, drained and not serving; then it recovers as
//!   usual. A persistently stalled node no longer loops eject → recover every few minutes.

use shared::api::{CatchupStatus, NodeState};

/// One poll's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// No answer within the timeout, or an error (connection refused, bad body, 5xx).
    Down { error: String },
    /// The node answered. `stalled`: it is DEGRADED because its consumer stalled (not only
    /// because its ownership is unconfirmed after a freeze, which the group settles by itself).
    Answer { state: NodeState, assigned: Vec<i32>, catchup: CatchupStatus, stalled: bool },
}

/// The gateway's status of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Down,
    Up,
    Healthy,
    Draining,
    /// Answers, but its consumer has stalled or its ownership is unconfirmed (see the node's
    /// `progress.degraded`).
    Degraded,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Down => "DOWN",
            Status::Up => "UP",
            Status::Healthy => "HEALTHY",
            Status::Draining => "DRAINING",
            Status::Degraded => "DEGRADED",
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
    /// Went DOWN after having been HEALTHY, and has not been HEALTHY since (or is HEALTHY owning
    /// nothing yet after its ownership moved away): an episode whose end may be a failback.
    pub awaiting_failback: bool,
    /// The partitions the node owned when the episode began (its last answer before DOWN); empty
    /// out of an episode.
    pub lost: Vec<i32>,
    /// How the node's ownership moved away during the episode (`None`: it did not, so far): the
    /// failback's reason. Kept once a failback is decided, until the next episode begins, so a
    /// failback that was not started stays due with it ([`failback_not_started`]).
    pub ownership_moved: Option<String>,
    /// Partitions the node reported in its last answer.
    pub assigned: Vec<i32>,
    /// Answers this gateway has seen from the node.
    pub samples: u32,
    /// Consecutive DEGRADED polls for a stalled consumer.
    pub degraded_streak: u32,
    /// When the node flapped (went DOWN from HEALTHY or DEGRADED, or was ejected), ms on the
    /// caller's clock; only those within `flap_window` are kept.
    pub flaps: Vec<u64>,
    /// Ejected and not HEALTHY since.
    pub ejected: bool,
    /// When the node was ejected, ms on the caller's clock; only those within
    /// `hold_down_window` are kept.
    pub ejections: Vec<u64>,
    /// Held down ([`hold_down`]): no start-recovery before this time, ms on the caller's clock.
    pub held_until: Option<u64>,
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
            lost: Vec::new(),
            ownership_moved: None,
            assigned: Vec::new(),
            samples: 0,
            degraded_streak: 0,
            flaps: Vec::new(),
            ejected: false,
            ejections: Vec::new(),
            held_until: None,
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
    /// Back HEALTHY owning what it owned before it went DOWN: nobody stood in, nothing to drain
    /// (logged, and a local entry of the decision log).
    NoFailback { reason: String },
    /// Drain the whole node out of the broadcast group (reason NODE_DEGRADED), decided at `at_ms`;
    /// `hold`: the hold-down that starts with it, if any.
    Eject { reason: String, at_ms: u64, hold: Option<HoldDown> },
}

/// Configuration of the rules.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Consecutive UP polls before start-recovery (default 5), for a node that did not flap.
    pub up_threshold: u32,
    /// The longest UP streak hysteresis asks for.
    pub max_up_threshold: u32,
    /// How long a flap counts towards hysteresis, ms.
    pub flap_window_ms: u64,
    /// Consecutive DEGRADED polls before the node is ejected.
    pub degraded_checks: u32,
    /// Answers seen from a node before it may be ejected (a gateway that just started does not
    /// eject on its first looks).
    pub min_samples: u32,
    /// No ejection within this long of the last one, ms.
    pub eject_cooldown_ms: u64,
    /// The hold-down after the second ejection within `hold_down_window_ms`, ms; each further
    /// ejection adds as much (0: no hold-down).
    pub hold_down_base_ms: u64,
    /// The longest hold-down, ms.
    pub hold_down_max_ms: u64,
    /// How long an ejection counts towards the hold-down, ms.
    pub hold_down_window_ms: u64,
}

/// A hold-down that starts with an ejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldDown {
    /// How long start-recovery is withheld, from the ejection, ms.
    pub for_ms: u64,
    /// Ejections of the node within the window, this one included.
    pub ejections: u32,
}

/// The hold-down length after a node's `ejections`-th ejection within the window:
/// `hold_down_base × (ejections − 1)`, at most `hold_down_max`; `None` for the first (or with a
/// base of 0).
pub fn hold_down_for(ejections: u32, rules: &Rules) -> Option<u64> {
    if ejections < 2 || rules.hold_down_base_ms == 0 {
        return None;
    }
    Some(rules.hold_down_base_ms.saturating_mul(u64::from(ejections - 1)).min(rules.hold_down_max_ms.max(rules.hold_down_base_ms)))
}

/// The ejections of `view` within the window at `now_ms`.
pub fn recent_ejections(view: &NodeView, now_ms: u64, rules: &Rules) -> u32 {
    view.ejections.iter().filter(|t| now_ms.saturating_sub(**t) < rules.hold_down_window_ms).count() as u32
}

/// Whether start-recovery is withheld from `view` at `now_ms`, and for how much longer, ms.
pub fn held_for(view: &NodeView, now_ms: u64) -> Option<u64> {
    view.held_until.filter(|u| now_ms < *u).map(|u| u - now_ms)
}

/// The UP streak `view` must show before start-recovery at `now_ms`: longer for each recent flap.
pub fn required_up_streak(view: &NodeView, now_ms: u64, rules: &Rules) -> u32 {
    let flaps = view.flaps.iter().filter(|t| now_ms.saturating_sub(**t) < rules.flap_window_ms).count() as u32;
    rules.up_threshold.saturating_mul(1 + flaps).min(rules.max_up_threshold.max(rules.up_threshold))
}

/// Applies one poll result, at `now_ms` (a monotonic clock in ms).
pub fn observe(view: &NodeView, obs: &Observed, now_ms: u64, rules: &Rules) -> (NodeView, Vec<Decision>) {
    let mut next = view.clone();
    next.flaps.retain(|t| now_ms.saturating_sub(*t) < rules.flap_window_ms);
    next.ejections.retain(|t| now_ms.saturating_sub(*t) < rules.hold_down_window_ms);
    let mut decisions = Vec::new();
    let (to, reason) = match obs {
        Observed::Down { error } => (Status::Down, format!("no answer: {error}")),
        Observed::Answer { state, .. } => (
            match state {
                NodeState::Up => Status::Up,
                NodeState::Healthy => Status::Healthy,
                NodeState::Draining => Status::Draining,
                NodeState::Degraded => Status::Degraded,
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
    let stalled = matches!(obs, Observed::Answer { stalled: true, .. });
    next.degraded_streak = if to == Status::Degraded && stalled { view.degraded_streak.saturating_add(1) } else { 0 };
    if to == Status::Down && matches!(view.status, Status::Healthy | Status::Degraded) {
        next.flaps.push(now_ms);
    }
    let out = |s: Status| matches!(s, Status::Down | Status::Draining);
    if out(to) && view.ever_healthy && !out(view.status) && !view.awaiting_failback {
        // An episode begins (the node stopped answering, or a whole-node drain makes it leave
        // the broadcast group): what the node owns now is what may move away from it.
        next.awaiting_failback = true;
        next.lost = view.assigned.clone();
        next.ownership_moved = None;
    }
    if let Observed::Answer { state, assigned, catchup, .. } = obs {
        next.samples = view.samples.saturating_add(1);
        next.assigned = assigned.clone();
        if to == Status::Up && next.recovery == Recovery::Sent && *catchup == CatchupStatus::Failed {
            // The node's replay failed: the episode's recovery is to be sent again.
            next.recovery = Recovery::NotSent;
        }
        let kept = next.lost.iter().filter(|p| assigned.contains(p)).count();
        if next.awaiting_failback && next.ownership_moved.is_none() && kept < next.lost.len() {
            next.ownership_moved = Some(format!("it owned partitions {:?} when it went DOWN and answered {state} owning {assigned:?}", next.lost));
        }
    }
    let required = required_up_streak(&next, now_ms, rules);
    let held = held_for(&next, now_ms).is_some();
    if to == Status::Up && next.up_streak >= required && next.recovery == Recovery::NotSent && !held {
        next.recovery = Recovery::Sent;
        let flapped = if required > rules.up_threshold { format!(", raised from {} by {} recent flaps", rules.up_threshold, next.flaps.len()) } else { String::new() };
        let after_hold = if next.held_until.take().is_some() { "; its hold-down has ended" } else { "" };
        decisions.push(Decision::StartRecovery {
            reason: format!("UP on {} consecutive polls (threshold {required}{flapped}){after_hold}", next.up_streak),
        });
    }
    if to == Status::Healthy {
        next.ever_healthy = true;
        next.ejected = false;
        next.held_until = None;
        if next.awaiting_failback {
            match next.ownership_moved.clone() {
                // HEALTHY owning nothing yet: the failback waits for its partitions.
                Some(_) if next.assigned.is_empty() => {}
                Some(why) => {
                    decisions.push(Decision::Failback {
                        partitions: next.assigned.clone(),
                        reason: format!("recovered node is HEALTHY and owns partitions again; its ownership had moved away: {why}"),
                    });
                    next.awaiting_failback = false;
                    next.lost.clear();
                }
                None => {
                    decisions.push(Decision::NoFailback {
                        reason: format!("back HEALTHY owning the same partitions {:?}: nothing to fail back", next.assigned),
                    });
                    next.awaiting_failback = false;
                    next.lost.clear();
                }
            }
        }
    }
    (next, decisions)
}

/// What the other nodes own now (`others`: each one's id and partitions by its last answer), told
/// to the view of a node in an episode: another node seen owning one of the partitions it lost
/// while it is out means its ownership moved away, even if it gets them back before it answers
/// (a freeze longer than the group's session timeout). Pure; the poller calls it after each
/// scheduled poll.
pub fn owned_elsewhere(view: &NodeView, others: &[(String, Vec<i32>)]) -> NodeView {
    let mut next = view.clone();
    if !view.awaiting_failback || view.status == Status::Healthy || view.ownership_moved.is_some() {
        return next;
    }
    for (id, owned) in others {
        let common: Vec<i32> = view.lost.iter().copied().filter(|p| owned.contains(p)).collect();
        if !common.is_empty() {
            next.ownership_moved = Some(format!("{id} was seen owning partitions {common:?} while it was out"));
            break;
        }
    }
    next
}

/// A failback decided on the view was not started (this replica does not lead, or the decision
/// was not written): it stays due, for the next HEALTHY poll.
pub fn failback_not_started(view: &NodeView) -> NodeView {
    let mut next = view.clone();
    next.awaiting_failback = true;
    if next.ownership_moved.is_none() {
        next.ownership_moved = Some("a failback was decided and not started".into());
    }
    next
}

/// One node as [`eject`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub id: &'a str,
    pub view: &'a NodeView,
    /// Sessions on the node by its last answer (they move when it is ejected).
    pub sessions: usize,
    /// Its free seats by its last answer (`None`: it reports no capacity).
    pub room: Option<usize>,
}

/// The fleet-wide ejection rule: which DEGRADED node (if any) to drain out of the broadcast group
/// now, with the reason. `last_ejection_ms` is when the last ejection was decided (same clock as
/// `now_ms`).
pub fn eject(nodes: &[Candidate<'_>], last_ejection_ms: Option<u64>, now_ms: u64, rules: &Rules) -> Option<(String, String)> {
    if nodes.iter().any(|n| n.view.ejected) {
        return None; // at most one node ejected at a time
    }
    if last_ejection_ms.is_some_and(|t| now_ms.saturating_sub(t) < rules.eject_cooldown_ms) {
        return None;
    }
    let due = nodes
        .iter()
        .filter(|n| n.view.status == Status::Degraded && n.view.degraded_streak >= rules.degraded_checks && n.view.samples >= rules.min_samples)
        .max_by(|a, b| a.view.degraded_streak.cmp(&b.view.degraded_streak).then(b.id.cmp(a.id)))?;
    let others: Vec<&Candidate<'_>> = nodes.iter().filter(|n| n.id != due.id && n.view.status == Status::Healthy).collect();
    let serving = others.len();
    if serving == 0 {
        return None; // the last node serving its partitions stays, DEGRADED or not
    }
    // Its sessions must fit in the others' free seats (a node that reports no capacity: no bound).
    let room = others.iter().try_fold(0usize, |sum, n| n.room.map(|r| sum.saturating_add(r)));
    if room.is_some_and(|r| r < due.sessions) {
        return None;
    }
    Some((
        due.id.to_owned(),
        format!(
            "DEGRADED on {} consecutive polls (threshold {}); {} other node(s) HEALTHY take its partitions",
            due.view.degraded_streak, rules.degraded_checks, serving
        ),
    ))
}

/// The node was ejected `age_ms` before `now_ms` (0: just now, by this replica; more: a
/// decision read back from the control topic): it counts as a flap, blocks other ejections until
/// HEALTHY, and counts towards the hold-down if it is within the window (a replica reading the
/// topic from its start does not count ejections long past).
pub fn ejected(view: &NodeView, now_ms: u64, age_ms: u64, rules: &Rules) -> NodeView {
    let mut next = view.clone();
    next.ejected = true;
    next.flaps.push(now_ms);
    if age_ms < rules.hold_down_window_ms {
        next.ejections.retain(|t| now_ms.saturating_sub(*t) < rules.hold_down_window_ms);
        next.ejections.push(now_ms.saturating_sub(age_ms));
    }
    next
}

/// The hold-down rule, right after this replica ejected the node at `now_ms` ([`ejected`]):
/// counting that ejection, is the node ejected twice or more within the window? Then it is held
/// down for [`hold_down_for`] from `now_ms`.
pub fn hold_down(view: &NodeView, now_ms: u64, rules: &Rules) -> (NodeView, Option<HoldDown>) {
    let ejections = recent_ejections(view, now_ms, rules);
    match hold_down_for(ejections, rules) {
        Some(for_ms) => (hold_until(view, now_ms.saturating_add(for_ms)), Some(HoldDown { for_ms, ejections })),
        None => (view.clone(), None),
    }
}

/// The node is held down until `until_ms` (the leader's `held_down` decision, read back).
pub fn hold_until(view: &NodeView, until_ms: u64) -> NodeView {
    NodeView { held_until: Some(until_ms), ..view.clone() }
}

/// The ejection decided at `at_ms` failed (not written, or the drain failed): the node is not
/// ejected after all, that attempt is no flap, and it does not count towards the hold-down (the
/// last ejection counted is this one: one node is ejected at a time, and none while it is held
/// down). The cooldown still runs from `at_ms`, so the next attempt waits for it.
pub fn eject_failed(view: &NodeView, at_ms: u64) -> NodeView {
    let mut next = view.clone();
    next.ejected = false;
    if let Some(i) = next.flaps.iter().rposition(|t| *t == at_ms) {
        next.flaps.remove(i);
    }
    next.ejections.pop();
    next.held_until = None;
    next
}

/// Whether a failback round may drain towards its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailbackTarget {
    /// HEALTHY, ready and owning every partition the round would hand it.
    Serves,
    /// Not now: the failback pauses (`down`: the node does not answer at all).
    Not { why: String, down: bool },
}

/// The check at the start of every failback round, over the target's `status` in this gateway's
/// view, whether its last answer said `ready` (and not draining), and the partitions it said it
/// owns (`assigned`), for the failback's remaining `partitions`. Pure.
pub fn failback_target(status: Status, ready: bool, assigned: &[i32], partitions: &[i32]) -> FailbackTarget {
    let missing: Vec<i32> = partitions.iter().copied().filter(|p| !assigned.contains(p)).collect();
    match status {
        Status::Down => FailbackTarget::Not { why: "the recovered node stopped answering".into(), down: true },
        Status::Healthy if ready && missing.is_empty() => FailbackTarget::Serves,
        Status::Healthy if ready => FailbackTarget::Not { why: format!("the recovered node no longer owns partitions {missing:?}"), down: false },
        s => FailbackTarget::Not { why: format!("the recovered node is {s}, not serving"), down: false },
    }
}

/// The leader's start-recovery reached the node (read from the control topic): this replica does
/// not send it again in this UP episode.
pub fn recovery_sent(view: &NodeView) -> NodeView {
    if view.status == Status::Up {
        NodeView { recovery: Recovery::Sent, ..view.clone() }
    } else {
        view.clone()
    }
}

/// The start-recovery call failed: allow it again on a later UP poll.
pub fn recovery_call_failed(view: &NodeView) -> NodeView {
    NodeView { recovery: Recovery::NotSent, ..view.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        up_threshold: 5,
        max_up_threshold: 20,
        flap_window_ms: 300_000,
        degraded_checks: 3,
        min_samples: 5,
        eject_cooldown_ms: 60_000,
        hold_down_base_ms: 60_000,
        hold_down_max_ms: 150_000,
        hold_down_window_ms: 1_800_000,
    };
    /// Polls in the tables are a second apart.
    const POLL_MS: u64 = 1000;

    fn up() -> Observed {
        Observed::Answer { state: NodeState::Up, assigned: vec![], catchup: CatchupStatus::Idle, stalled: false }
    }
    fn healthy(assigned: &[i32]) -> Observed {
        Observed::Answer { state: NodeState::Healthy, assigned: assigned.to_vec(), catchup: CatchupStatus::Completed, stalled: false }
    }
    fn down() -> Observed {
        Observed::Down { error: "connection refused".into() }
    }
    fn timeout() -> Observed {
        Observed::Down { error: "timed out after 1s".into() }
    }
    fn draining() -> Observed {
        Observed::Answer { state: NodeState::Draining, assigned: vec![], catchup: CatchupStatus::Completed, stalled: false }
    }

    /// Runs `polls` from `start`; returns the number of StartRecovery and Failback decisions and
    /// the final view.
    fn run(start: NodeView, polls: &[Observed]) -> (usize, usize, NodeView) {
        let mut v = start;
        let (mut rec, mut fb) = (0, 0);
        for (i, o) in polls.iter().enumerate() {
            let (n, ds) = observe(&v, o, i as u64 * POLL_MS, &RULES);
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
            let (n, ds) = observe(&v, &up(), 0, &RULES);
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
        let failed = Observed::Answer { state: NodeState::Up, assigned: vec![], catchup: CatchupStatus::Failed, stalled: false };
        let (rec, _, _) = run(v, &[failed]);
        assert_eq!(rec, 1);
    }

    #[test]
    fn failback_after_down_then_healthy_with_partitions_once() {
        let polls = [
            vec![up(); 5],
            vec![healthy(&[0, 1, 2])], // first time healthy: not a failback
            vec![down(), down()],
            vec![up(); 10], // it flapped: twice the UP streak
            vec![healthy(&[])], // healthy but no partitions yet: wait
            vec![healthy(&[1, 2]), healthy(&[1, 2])],
        ]
        .concat();
        let (rec, fb, v) = run(NodeView::default(), &polls);
        assert_eq!((rec, fb), (2, 1));
        assert!(!v.awaiting_failback);
    }

    #[test]
    fn one_down_poll_then_healthy_with_the_same_partitions_is_no_failback() {
        // A HEALTHY node whose /health timed out once kept its partitions: nothing moved away,
        // so nothing is drained from the other nodes.
        let polls = [vec![up(); 5], vec![healthy(&[0, 1, 2])], vec![timeout()], vec![healthy(&[0, 1, 2]), healthy(&[0, 1, 2])]].concat();
        let (_, fb, v) = run(NodeView::default(), &polls);
        assert_eq!(fb, 0);
        assert!(!v.awaiting_failback, "the episode is over");
    }

    /// Failbacks decided over `polls` (a second apart from HEALTHY owning 0, 1, 2), with what the
    /// other nodes own by poll index (`elsewhere`: after the poll at that index), and their
    /// partitions.
    fn failbacks(polls: &[Observed], elsewhere: &[(usize, Vec<i32>)]) -> (Vec<Vec<i32>>, NodeView) {
        let (_, _, mut v) = run(NodeView::default(), &[vec![up(); 5], vec![healthy(&[0, 1, 2])]].concat());
        let mut out = Vec::new();
        for (i, o) in polls.iter().enumerate() {
            let (n, ds) = observe(&v, o, (10 + i as u64) * POLL_MS, &RULES);
            v = n;
            for d in ds {
                if let Decision::Failback { partitions, .. } = d {
                    out.push(partitions);
                }
            }
            for (_, owned) in elsewhere.iter().filter(|(at, _)| *at == i) {
                v = owned_elsewhere(&v, &[("ws-2".to_owned(), owned.clone())]);
            }
        }
        (out, v)
    }

    #[test]
    fn a_failback_only_when_ownership_moved_away_table() {
        let same = || healthy(&[0, 1, 2]);
        // DEGRADED after a freeze, its ownership unconfirmed: it still names its old partitions.
        let stale = || Observed::Answer { state: NodeState::Degraded, assigned: vec![0, 1, 2], catchup: CatchupStatus::Completed, stalled: false };
        // (name, polls after HEALTHY owning 0, 1, 2, other nodes' ownership seen after poll i, failbacks)
        type Case = (&'static str, Vec<Observed>, Vec<(usize, Vec<i32>)>, Vec<Vec<i32>>);
        let cases: Vec<Case> = vec![
            ("one DOWN poll, back with the same set: none", vec![timeout(), same()], vec![], vec![]),
            ("three DOWN polls, back with the same set: none", vec![timeout(), timeout(), timeout(), same()], vec![], vec![]),
            ("others own their own partitions: none", vec![timeout(), same()], vec![(0, vec![3, 4, 5])], vec![]),
            ("restart: UP owning none, then HEALTHY", [vec![down()], vec![up(); 10], vec![same()]].concat(), vec![], vec![vec![0, 1, 2]]),
            ("freeze: another node seen owning 1, then back with the same set", vec![timeout(), timeout(), same()], vec![(1, vec![1, 3])], vec![vec![0, 1, 2]]),
            ("freeze seen while DEGRADED (ownership unconfirmed)", vec![timeout(), stale(), same()], vec![(1, vec![0, 1, 2, 3])], vec![vec![0, 1, 2]]),
            ("back HEALTHY with fewer: failback of what it owns", vec![timeout(), healthy(&[1, 2])], vec![], vec![vec![1, 2]]),
            ("back HEALTHY with none: wait, then fail back", vec![timeout(), healthy(&[]), same()], vec![], vec![vec![0, 1, 2]]),
            ("DOWN, DEGRADED owning the same set, HEALTHY: none", vec![timeout(), stale(), same()], vec![], vec![]),
            ("once per episode", vec![timeout(), healthy(&[1]), healthy(&[1]), same()], vec![], vec![vec![1]]),
            // A whole-node drain (maintenance, an ejection, SIGTERM) leaves the group: its
            // partitions move even if no poll finds the node DOWN.
            ("drained, restarted between two polls: UP owning none, then HEALTHY", [vec![draining()], vec![up(); 10], vec![same()]].concat(), vec![], vec![vec![0, 1, 2]]),
            ("drained, then DOWN, then back", [vec![draining(), down()], vec![up(); 10], vec![same()]].concat(), vec![], vec![vec![0, 1, 2]]),
        ];
        for (name, polls, elsewhere, want) in cases {
            let (got, v) = failbacks(&polls, &elsewhere);
            assert_eq!(got, want, "{name}");
            assert!(!v.awaiting_failback, "{name}: the episode is over");
            assert!(v.lost.is_empty(), "{name}");
        }
    }

    #[test]
    fn nothing_to_fail_back_is_said() {
        let (_, _, v) = run(NodeView::default(), &[vec![up(); 5], vec![healthy(&[0, 1, 2]), timeout()]].concat());
        let (_, ds) = observe(&v, &healthy(&[0, 1, 2]), 7 * POLL_MS, &RULES);
        assert!(ds.iter().any(|d| matches!(d, Decision::NoFailback { reason } if reason.contains("nothing to fail back"))), "{ds:?}");
    }

    #[test]
    fn others_owning_the_partitions_counts_only_while_the_node_is_out() {
        let (_, _, v) = run(NodeView::default(), &[vec![up(); 5], vec![healthy(&[0, 1, 2])]].concat());
        assert_eq!(owned_elsewhere(&v, &[("ws-2".into(), vec![0])]), v, "not in an episode");
        let (_, _, v) = run(v, &[timeout()]);
        assert_eq!(v.lost, vec![0, 1, 2]);
        let moved = owned_elsewhere(&v, &[("ws-2".into(), vec![5]), ("ws-3".into(), vec![2, 4])]);
        assert!(moved.ownership_moved.as_deref().is_some_and(|w| w.contains("ws-3") && w.contains("[2]")), "{moved:?}");
    }

    #[test]
    fn a_failback_not_started_stays_due() {
        let (_, _, v) = run(NodeView::default(), &[vec![up(); 5], vec![healthy(&[0, 1, 2]), down()], vec![up(); 10], vec![healthy(&[0, 1, 2])]].concat());
        assert!(!v.awaiting_failback);
        let v = failback_not_started(&v);
        let (_, fb, v) = run(v, &[healthy(&[0, 1, 2])]);
        assert_eq!(fb, 1, "decided again on the next HEALTHY poll");
        assert!(!v.awaiting_failback);
    }

    #[test]
    fn a_node_that_never_served_has_no_failback() {
        let polls = [vec![down()], vec![up(); 5], vec![healthy(&[0])]].concat();
        assert_eq!(run(NodeView::default(), &polls).1, 0);
    }

    #[test]
    fn transitions_are_reported_with_reasons() {
        let (_, ds) = observe(&NodeView::default(), &up(), 0, &RULES);
        assert!(matches!(&ds[0], Decision::Transition { from: Status::Down, to: Status::Up, reason } if reason.contains("UP")));
        let (v, _) = observe(&NodeView::default(), &up(), 0, &RULES);
        let (_, ds) = observe(&v, &timeout(), POLL_MS, &RULES);
        assert!(matches!(&ds[0], Decision::Transition { from: Status::Up, to: Status::Down, reason } if reason.contains("timed out")));
    }

    fn degraded() -> Observed {
        Observed::Answer { state: NodeState::Degraded, assigned: vec![0, 1], catchup: CatchupStatus::Completed, stalled: true }
    }
    fn unconfirmed() -> Observed {
        Observed::Answer { state: NodeState::Degraded, assigned: vec![0, 1], catchup: CatchupStatus::Completed, stalled: false }
    }

    #[test]
    fn hysteresis_table() {
        // (name, polls, recoveries) — each flap (HEALTHY or DEGRADED → DOWN) within the window
        // adds one up_threshold to the streak the next recovery needs, up to max_up_threshold.
        let served = || [vec![up(); 5], vec![healthy(&[0])]].concat();
        let cases: Vec<(&str, Vec<Observed>, usize)> = vec![
            ("one flap: 9 UP polls are not enough", [served(), vec![down()], vec![up(); 9]].concat(), 1),
            ("one flap: 10 UP polls are", [served(), vec![down()], vec![up(); 10]].concat(), 2),
            ("a DEGRADED node that dies flapped too", [served(), vec![degraded(), down()], vec![up(); 9]].concat(), 1),
            ("UP then DOWN is not a flap", [vec![up(); 3], vec![down()], vec![up(); 5]].concat(), 1),
            (
                "two flaps: 15",
                [served(), vec![down()], vec![up(); 10], vec![healthy(&[0]), down()], vec![up(); 14]].concat(),
                2,
            ),
        ];
        for (name, polls, want) in cases {
            assert_eq!(run(NodeView::default(), &polls).0, want, "{name}");
        }
    }

    #[test]
    fn flaps_age_out_and_the_streak_is_capped() {
        let v = NodeView { flaps: vec![0, 1000, 2000, 3000, 4000, 5000], ..NodeView::default() };
        assert_eq!(required_up_streak(&v, 10_000, &RULES), 20, "capped at max_up_threshold");
        assert_eq!(required_up_streak(&v, 302_500, &RULES), 5 * 4, "three flaps still in the window");
        assert_eq!(required_up_streak(&v, 400_000, &RULES), 5, "all aged out");
    }

    fn node(status: Status, degraded_streak: u32, samples: u32) -> NodeView {
        NodeView { status, degraded_streak, samples, ..NodeView::default() }
    }

    #[test]
    fn ejection_table() {
        let healthy = node(Status::Healthy, 0, 50);
        let due = node(Status::Degraded, 3, 50);
        let ejected = NodeView { ejected: true, ..node(Status::Up, 0, 50) };
        // (name, nodes, last ejection, now, ejected)
        let cases: Vec<(&str, Vec<(&str, NodeView)>, Option<u64>, u64, Option<&str>)> = vec![
            ("DEGRADED for the checks, others serve", vec![("a", due.clone()), ("b", healthy.clone())], None, 0, Some("a")),
            ("not for enough checks", vec![("a", node(Status::Degraded, 2, 50)), ("b", healthy.clone())], None, 0, None),
            ("too few samples seen", vec![("a", node(Status::Degraded, 3, 4)), ("b", healthy.clone())], None, 0, None),
            ("the last node serving stays", vec![("a", due.clone()), ("b", node(Status::Down, 0, 50))], None, 0, None),
            ("two DEGRADED, no HEALTHY: neither", vec![("a", due.clone()), ("b", node(Status::Degraded, 9, 50))], None, 0, None),
            ("one at a time", vec![("a", due.clone()), ("b", healthy.clone()), ("c", ejected.clone())], None, 0, None),
            ("within the cooldown", vec![("a", due.clone()), ("b", healthy.clone())], Some(10_000), 69_999, None),
            ("after the cooldown", vec![("a", due.clone()), ("b", healthy.clone())], Some(10_000), 70_000, Some("a")),
            (
                "the longest streak first",
                vec![("a", due.clone()), ("b", node(Status::Degraded, 7, 50)), ("c", healthy.clone())],
                None,
                0,
                Some("b"),
            ),
        ];
        for (name, nodes, last, now, want) in cases {
            let cands: Vec<Candidate<'_>> = nodes.iter().map(|(id, view)| Candidate { id, view, sessions: 0, room: None }).collect();
            let got = eject(&cands, last, now, &RULES);
            assert_eq!(got.as_ref().map(|(id, _)| id.as_str()), want, "{name}: {got:?}");
        }
    }

    #[test]
    fn an_ejection_needs_room_for_the_sessions_it_moves() {
        let (due, healthy) = (node(Status::Degraded, 3, 50), node(Status::Healthy, 0, 50));
        // (case, sessions on the DEGRADED node, the HEALTHY nodes' free seats) -> ejected?
        let cases: Vec<(&str, usize, Vec<Option<usize>>, bool)> = vec![
            ("room for all", 100, vec![Some(100)], true),
            ("too little room", 100, vec![Some(99)], false),
            ("room over two nodes", 100, vec![Some(60), Some(40)], true),
            ("capacity not reported: no bound", 100, vec![None], true),
            ("one reports none: no bound", 100, vec![Some(0), None], true),
            ("no sessions to move", 0, vec![Some(0)], true),
        ];
        for (name, sessions, rooms, want) in cases {
            let ids: Vec<String> = (0..rooms.len()).map(|i| format!("h{i}")).collect();
            let mut cands = vec![Candidate { id: "a", view: &due, sessions, room: Some(0) }];
            cands.extend(rooms.iter().zip(&ids).map(|(room, id)| Candidate { id, view: &healthy, sessions: 0, room: *room }));
            assert_eq!(eject(&cands, None, 0, &RULES).is_some(), want, "{name}");
        }
    }

    #[test]
    fn an_ejected_node_is_counted_until_healthy_and_its_return_is_slower() {
        let v = ejected(&node(Status::Degraded, 3, 50), 0, 0, &RULES);
        assert!(v.ejected);
        // Drained out, it is UP: hysteresis asks for twice the streak.
        let (rec, _, v) = run(v, &vec![up(); 9]);
        assert_eq!(rec, 0);
        let (rec, _, v) = run(v, &[up(), up(), up(), up(), up(), up(), up(), up(), up(), up()]);
        assert_eq!(rec, 1);
        assert!(v.ejected, "still ejected while UP");
        let (_, _, v) = run(v, &[healthy(&[0])]);
        assert!(!v.ejected, "HEALTHY again ends the ejection");
    }

    #[test]
    fn a_failback_round_drains_only_towards_a_node_that_serves_its_partitions() {
        use FailbackTarget as T;
        let not = |down| move |t: T| matches!(t, T::Not { down: d, .. } if d == down);
        assert_eq!(failback_target(Status::Healthy, true, &[0, 1, 2], &[1, 2]), T::Serves);
        assert!(not(true)(failback_target(Status::Down, false, &[], &[1])), "dead: pause, and end if it stays so");
        assert!(not(false)(failback_target(Status::Healthy, true, &[0], &[1, 2])), "lost a partition");
        assert!(not(false)(failback_target(Status::Healthy, false, &[1, 2], &[1, 2])), "not ready");
        assert!(not(false)(failback_target(Status::Degraded, true, &[1, 2], &[1, 2])));
        assert!(not(false)(failback_target(Status::Up, false, &[], &[1])), "restarted, not recovered yet");
        assert_eq!(failback_target(Status::Healthy, true, &[], &[]), T::Serves, "nothing left to hand over");
    }

    #[test]
    fn a_failed_ejection_is_undone_and_is_no_flap() {
        let before = NodeView { flaps: vec![5], ..node(Status::Degraded, 3, 50) };
        let v = eject_failed(&ejected(&before, 9, 0, &RULES), 9);
        assert!(!v.ejected);
        assert_eq!(v.flaps, vec![5]);
        assert!(v.ejections.is_empty(), "no ejection counted");
        // Nothing else ejected: the rule may choose it again (after the cooldown).
        let b = node(Status::Healthy, 0, 50);
        let cands = [Candidate { id: "a", view: &v, sessions: 0, room: None }, Candidate { id: "b", view: &b, sessions: 0, room: None }];
        assert_eq!(eject(&cands, Some(9), 9 + RULES.eject_cooldown_ms, &RULES).map(|(id, _)| id), Some("a".to_owned()));
        assert_eq!(eject(&cands, Some(9), 10, &RULES), None, "within the cooldown");
    }

    #[test]
    fn degraded_polls_are_counted_in_a_streak() {
        let (_, _, v) = run(NodeView::default(), &[degraded(), degraded(), healthy(&[0]), degraded(), degraded()]);
        assert_eq!(v.degraded_streak, 2);
        assert_eq!(v.samples, 5);
        let (_, _, v) = run(v, &[timeout()]);
        assert_eq!((v.degraded_streak, v.samples), (0, 5), "a failed poll is no sample");
        let (_, _, v) = run(v, &[unconfirmed(), unconfirmed(), unconfirmed(), unconfirmed()]);
        assert_eq!(v.degraded_streak, 0, "unconfirmed ownership after a freeze is not a stall");
        assert_eq!(v.status, Status::Degraded);
    }

    #[test]
    fn hold_down_table() {
        const MIN: u64 = 60_000;
        // (name, ejection times in minutes, the hold after the last one, ms) — RULES: base 1 min,
        // at most 2.5 min, window 30 min.
        let cases: Vec<(&str, Vec<u64>, Option<u64>)> = vec![
            ("first ejection: no hold", vec![0], None),
            ("second within the window: the base", vec![0, 3], Some(MIN)),
            ("third: twice the base", vec![0, 3, 7], Some(2 * MIN)),
            ("fourth: capped at the max", vec![0, 3, 7, 12], Some(150_000)),
            ("the first aged out: the count restarts", vec![0, 31], None),
            ("two of three within the window", vec![0, 20, 40], Some(MIN)),
            ("exactly one window apart: outside", vec![0, 30], None),
        ];
        for (name, times, want) in cases {
            let mut v = node(Status::Degraded, 3, 50);
            let mut hold = None;
            for t in &times {
                v = ejected(&v, t * MIN, 0, &RULES);
                (v, hold) = hold_down(&v, t * MIN, &RULES);
            }
            assert_eq!(hold.map(|h| h.for_ms), want, "{name}");
            let last = times.last().unwrap() * MIN;
            assert_eq!(v.held_until, want.map(|f| last + f), "{name}");
        }
        assert_eq!(hold_down_for(3, &Rules { hold_down_base_ms: 0, ..RULES }), None, "a base of 0: no hold-down");
        assert_eq!(hold_down_for(2, &Rules { hold_down_max_ms: 0, ..RULES }), Some(MIN), "a max below the base: the base");
    }

    #[test]
    fn a_held_down_node_gets_start_recovery_only_after_the_hold() {
        // Ejected at 0 and at 100 s: held down for 60 s from 100 s.
        let mut v = node(Status::Degraded, 3, 50);
        v = ejected(&v, 0, 0, &RULES);
        v = ejected(&v, 100_000, 0, &RULES);
        let (mut v, hold) = hold_down(&v, 100_000, &RULES);
        assert_eq!(hold, Some(HoldDown { for_ms: 60_000, ejections: 2 }));
        // Drained, it answers UP every second: far past the UP streak (hysteresis: two flaps,
        // 15 polls), no start-recovery before 160 s.
        let mut sent_at = Vec::new();
        for s in 101..=170u64 {
            let (n, ds) = observe(&v, &up(), s * 1000, &RULES);
            v = n;
            if let Some(Decision::StartRecovery { reason }) = ds.iter().find(|d| matches!(d, Decision::StartRecovery { .. })) {
                assert!(reason.contains("hold-down has ended"), "{reason}");
                sent_at.push(s);
            }
            if s < 160 {
                assert_eq!(held_for(&v, s * 1000), Some(160_000 - s * 1000), "held at {s}s");
            }
        }
        assert_eq!(sent_at, vec![160], "withheld while held down, given once it ended");
        assert_eq!(v.held_until, None);
        assert!(v.ejected, "still ejected until HEALTHY");
    }

    #[test]
    fn ejections_read_back_count_only_within_the_window() {
        let v = node(Status::Degraded, 3, 50);
        let old = ejected(&v, 5_000, RULES.hold_down_window_ms, &RULES);
        assert!(old.ejected && old.ejections.is_empty(), "an ejection long past is no count");
        let recent = ejected(&v, 5_000, 2_000, &RULES);
        assert_eq!(recent.ejections, vec![3_000]);
        let (held, _) = hold_down(&ejected(&recent, 9_000, 0, &RULES), 9_000, &RULES);
        assert_eq!(held.held_until, Some(69_000));
        assert_eq!(eject_failed(&held, 9_000).held_until, None, "a failed ejection starts no hold");
    }
}
