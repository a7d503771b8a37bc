//! The decision log (`GET /api/fleet` → `decisions`).
//!
//! Two kinds of entries, told apart by `source`:
//! - `control_topic`: the leader's decisions and their outcomes, read back from the control topic
//!   ([`shared::control`]), in the topic's order: the same on every replica.
//! - `local`: what this replica saw by itself (a node's status changing in its polls, a node back
//!   HEALTHY with nothing to fail back, sessions it moved, its circuit breakers), and, on a
//!   gateway without Kafka, every decision.
//!
//! It also tracks the failbacks that were started and not finished, so a new leader finishes
//! them ([`Decisions::open_failbacks`]), and holds the control topic's writer ([`ControlWriter`])
//! and the reading of its records ([`read`]).

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// What a decision-log entry is about. Written as its snake-case name (`action` in the control
/// topic and in `/api/fleet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Transition,
    StartRecovery,
    StartRecoverySent,
    StartRecoveryFailed,
    FailbackStarted,
    FailbackResumed,
    FailbackPaced,
    FailbackPaused,
    FailbackCompleted,
    FailbackFailed,
    FailbackNotNeeded,
    Drain,
    DrainCompleted,
    DrainFailed,
    Eject,
    EjectCompleted,
    EjectFailed,
    HeldDown,
    SessionsMoved,
    CircuitOpened,
    CircuitClosed,
    PromotePublisher,
    PromotePublisherCompleted,
    PromotePublisherFailed,
}

impl Action {
    /// Every action, for the tests and the docs.
    pub const ALL: [Action; 24] = [
        Action::Transition,
        Action::StartRecovery,
        Action::StartRecoverySent,
        Action::StartRecoveryFailed,
        Action::FailbackStarted,
        Action::FailbackResumed,
        Action::FailbackPaced,
        Action::FailbackPaused,
        Action::FailbackCompleted,
        Action::FailbackFailed,
        Action::FailbackNotNeeded,
        Action::Drain,
        Action::DrainCompleted,
        Action::DrainFailed,
        Action::Eject,
        Action::EjectCompleted,
        Action::EjectFailed,
        Action::HeldDown,
        Action::SessionsMoved,
        Action::CircuitOpened,
        Action::CircuitClosed,
        Action::PromotePublisher,
        Action::PromotePublisherCompleted,
        Action::PromotePublisherFailed,
    ];

    /// Its name in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Transition => "transition",
            Action::StartRecovery => "start_recovery",
            Action::StartRecoverySent => "start_recovery_sent",
            Action::StartRecoveryFailed => "start_recovery_failed",
            Action::FailbackStarted => "failback_started",
            Action::FailbackResumed => "failback_resumed",
            Action::FailbackPaced => "failback_paced",
            Action::FailbackPaused => "failback_paused",
            Action::FailbackCompleted => "failback_completed",
            Action::FailbackFailed => "failback_failed",
            Action::FailbackNotNeeded => "failback_not_needed",
            Action::Drain => "drain",
            Action::DrainCompleted => "drain_completed",
            Action::DrainFailed => "drain_failed",
            Action::Eject => "eject",
            Action::EjectCompleted => "eject_completed",
            Action::EjectFailed => "eject_failed",
            Action::HeldDown => "held_down",
            Action::SessionsMoved => "sessions_moved",
            Action::CircuitOpened => "circuit_opened",
            Action::CircuitClosed => "circuit_closed",
            Action::PromotePublisher => "promote_publisher",
            Action::PromotePublisherCompleted => "promote_publisher_completed",
            Action::PromotePublisherFailed => "promote_publisher_failed",
        }
    }

    /// The action named `name` (`None`: one this version does not know, e.g. a newer replica's).
    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a decision was not written, so nothing may be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// This replica may not act (a follower; leadership not confirmed).
    #[error("{0}")]
    NoAuthority(String),
    /// The control topic did not take the record.
    #[error("control topic {topic}: {cause}")]
    NotWritten { topic: String, cause: String },
    /// The record could not be encoded.
    #[error("cannot encode the decision: {0}")]
    Encode(String),
}

/// Where decisions are written before they are carried out: partition 0 of the control topic.
pub struct ControlWriter {
    producer: rdkafka::producer::FutureProducer<shared::kafka::FleetContext>,
    topic: String,
}

impl ControlWriter {
    /// A writer to `topic` through `producer`.
    pub fn new(producer: rdkafka::producer::FutureProducer<shared::kafka::FleetContext>, topic: String) -> Self {
        Self { producer, topic }
    }

    /// Writes `record` and waits until the broker has it (at most 10 s).
    ///
    /// # Errors
    /// [`DecideError::Encode`] or [`DecideError::NotWritten`].
    pub async fn write(&self, record: &shared::control::ControlRecord) -> Result<(), DecideError> {
        let value = serde_json::to_vec(record).map_err(|e| DecideError::Encode(e.to_string()))?;
        let key = shared::control::record_key(record);
        let sent = self
            .producer
            .send(rdkafka::producer::FutureRecord::to(&self.topic).partition(0).key(&key).payload(&value), std::time::Duration::from_secs(10))
            .await;
        sent.map(|_| ()).map_err(|(e, _)| DecideError::NotWritten { topic: self.topic.clone(), cause: e.to_string() })
    }
}

/// A control record as this replica reads it.
#[derive(Debug, Clone)]
pub enum Read {
    /// A gateway claimed leadership: the claim's offset is its fencing token; `url`: its public
    /// port, where operator requests are forwarded.
    Claim { gateway: String, url: Option<String> },
    /// A decision or an outcome, as a log entry.
    Decision(Box<DecisionRecord>),
}

/// The entry of control record `record` read at `offset`.
pub fn read(offset: i64, record: shared::control::ControlRecord) -> Read {
    use shared::control::ControlRecord;
    match record {
        ControlRecord::Claim { gateway, url, .. } => Read::Claim { gateway, url },
        ControlRecord::Decision { id, token, gateway, at_ms, node, action, reason, detail, of } => Read::Decision(Box::new(DecisionRecord {
            at_ms,
            node,
            action,
            reason,
            detail,
            source: "control_topic",
            id: Some(id),
            gateway: Some(gateway),
            token,
            of,
            offset: Some(offset),
            superseded: false,
        })),
    }
}

/// A decision's id: `<gateway>/<token>/<seq>` under a leader's token (unique: every new leader has
/// a new token), `<gateway>/-<start nonce>/<seq>` without one (unique across restarts).
pub fn decision_id(gateway: &str, token: Option<u64>, start_nonce: &str, seq: u64) -> String {
    match token {
        Some(t) => format!("{gateway}/{t}/{seq}"),
        None => format!("{gateway}/-{start_nonce}/{seq}"),
    }
}

/// The id of round `round` of failback `failback` under fencing `token`: a leader that resumes
/// a failback numbers its rounds under its own token, so no round id names two requests (a node
/// refuses a known id with another body).
pub fn round_id(failback: &str, token: Option<u64>, round: u32) -> String {
    let under = token.map_or_else(|| "-".to_owned(), |t| t.to_string());
    format!("{failback}/drain/{under}/{round}")
}

/// A decision written (or, standalone, recorded): what the node calls that carry it out send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub id: String,
    /// The fencing token it was decided under (`None`: standalone, or an operator's request).
    pub token: Option<u64>,
}

/// One entry of the decision log.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    /// Unix epoch, ms.
    pub at_ms: u64,
    pub node: String,
    /// `transition`, `start_recovery`, `start_recovery_sent`, `start_recovery_failed`,
    /// `failback_started`, `failback_resumed`, `failback_paced`, `failback_paused`, `failback_completed`,
    /// `failback_failed`, `failback_not_needed` (local: a node back HEALTHY owning the same
    /// partitions), `drain`, `drain_completed`, `drain_failed`, `eject`, `eject_completed`,
    /// `eject_failed`, `held_down` (after an ejection: no start-recovery until `detail.until_ms`),
    /// `sessions_moved`, `circuit_opened`, `circuit_closed`, `promote_publisher` (a standby
    /// publisher promoted when none accepted writes; `node` is the publisher's URL),
    /// `promote_publisher_completed` (it answered 200, or 202 while it finishes by itself),
    /// `promote_publisher_failed`.
    pub action: String,
    pub reason: String,
    /// Extra facts (states, partitions, counts).
    pub detail: serde_json::Value,
    /// `control_topic` or `local`.
    pub source: &'static str,
    /// The decision's id (node actions are idempotent by it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The gateway that decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// The deciding leader's fencing token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// For an outcome or a later step: the decision it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of: Option<String>,
    /// The record's offset in the control topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    /// A decision written under a token older than a claim read before it (a deposed leader's
    /// late write): shown, but no replica takes it in ([`superseded`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub superseded: bool,
}

/// Whether `rec`, read after the claim at `latest_claim`, is a deposed leader's late decision: a
/// decision (not an outcome, which records what was done) under an older token. Pure.
pub fn superseded(rec: &DecisionRecord, latest_claim: Option<u64>) -> bool {
    rec.of.is_none() && matches!((rec.token, latest_claim), (Some(t), Some(c)) if t < c)
}

impl DecisionRecord {
    /// A local entry.
    pub fn local(node: &str, action: Action, reason: String, detail: serde_json::Value) -> Self {
        Self {
            at_ms: shared::event::now_ms(),
            node: node.to_owned(),
            action: action.as_str().to_owned(),
            reason,
            detail,
            source: "local",
            id: None,
            gateway: None,
            token: None,
            of: None,
            offset: None,
            superseded: false,
        }
    }
}

/// A failback started and not finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFailback {
    pub id: String,
    pub node: String,
    pub partitions: Vec<i32>,
    pub gateway: String,
}

/// How a decision read from the control topic changes the failbacks in flight: a pure rule.
pub fn track_failbacks(open: &mut BTreeMap<String, OpenFailback>, rec: &DecisionRecord) {
    if rec.superseded {
        return;
    }
    match Action::parse(&rec.action) {
        Some(Action::FailbackStarted) => {
            if let Some(id) = &rec.id {
                // A newer failback to a node supersedes an older one still open.
                open.retain(|_, f| f.node != rec.node);
                let partitions = rec.detail["partitions"].as_array().into_iter().flatten().filter_map(|p| p.as_i64()).map(|p| p as i32).collect();
                open.insert(
                    id.clone(),
                    OpenFailback { id: id.clone(), node: rec.node.clone(), partitions, gateway: rec.gateway.clone().unwrap_or_default() },
                );
            }
        }
        Some(Action::FailbackCompleted | Action::FailbackFailed) => {
            if let Some(of) = &rec.of {
                open.remove(of);
            }
        }
        _ => {}
    }
}

/// The log, and the failbacks in flight.
#[derive(Debug)]
pub struct Decisions {
    cap: usize,
    log: Mutex<VecDeque<DecisionRecord>>,
    open: Mutex<BTreeMap<String, OpenFailback>>,
}

impl Decisions {
    /// A log keeping the last `cap` entries.
    pub fn new(cap: usize) -> Self {
        Self { cap: cap.max(1), log: Mutex::new(VecDeque::new()), open: Mutex::new(BTreeMap::new()) }
    }

    /// Appends an entry (a decision read back, or a local one).
    pub fn push(&self, rec: DecisionRecord) {
        track_failbacks(&mut self.open.lock().expect("open failbacks lock"), &rec);
        let mut log = self.log.lock().expect("decision log lock");
        if log.len() >= self.cap {
            log.pop_front();
        }
        log.push_back(rec);
    }

    /// Every entry, oldest first.
    pub fn list(&self) -> Vec<DecisionRecord> {
        self.log.lock().expect("decision log lock").iter().cloned().collect()
    }

    /// The failbacks started and not finished (at most one per node: the newest).
    pub fn open_failbacks(&self) -> Vec<OpenFailback> {
        self.open.lock().expect("open failbacks lock").values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(action: Action, id: Option<&str>, of: Option<&str>, partitions: &[i32]) -> DecisionRecord {
        DecisionRecord {
            id: id.map(str::to_owned),
            of: of.map(str::to_owned),
            gateway: Some("gw-a".into()),
            source: "control_topic",
            ..DecisionRecord::local("ws-1", action, String::new(), serde_json::json!({"partitions": partitions}))
        }
    }

    #[test]
    fn failbacks_open_and_close() {
        let d = Decisions::new(10);
        d.push(rec(Action::FailbackStarted, Some("a/1/1"), None, &[0, 2]));
        assert_eq!(d.open_failbacks(), vec![OpenFailback { id: "a/1/1".into(), node: "ws-1".into(), partitions: vec![0, 2], gateway: "gw-a".into() }]);
        d.push(rec(Action::FailbackResumed, Some("b/4/1"), Some("a/1/1"), &[]));
        d.push(rec(Action::FailbackPaced, Some("b/4/2"), Some("a/1/1"), &[]));
        assert_eq!(d.open_failbacks().len(), 1, "resumed and paced do not finish it");
        d.push(rec(Action::FailbackCompleted, Some("b/4/3"), Some("a/1/1"), &[]));
        assert!(d.open_failbacks().is_empty());
        d.push(rec(Action::FailbackStarted, Some("b/4/4"), None, &[1]));
        d.push(rec(Action::FailbackFailed, Some("b/4/5"), Some("b/4/4"), &[]));
        assert!(d.open_failbacks().is_empty(), "a failed failback is finished too");
    }

    #[test]
    fn the_newest_open_failback_of_a_node_counts() {
        let d = Decisions::new(10);
        d.push(rec(Action::FailbackStarted, Some("a/1/1"), None, &[0]));
        d.push(rec(Action::FailbackStarted, Some("a/1/2"), None, &[0, 1]));
        assert_eq!(d.open_failbacks().iter().map(|f| f.id.as_str()).collect::<Vec<_>>(), ["a/1/2"]);
        d.push(rec(Action::FailbackCompleted, Some("a/1/3"), Some("a/1/2"), &[]));
        assert!(d.open_failbacks().is_empty(), "the superseded one does not come back");
    }

    #[test]
    fn a_deposed_leaders_late_decision_is_superseded_and_not_tracked() {
        let at = |token: Option<u64>, of: Option<&str>| DecisionRecord { token, ..rec(Action::FailbackStarted, Some("a/3/1"), of, &[0]) };
        // (record's token, an outcome?, latest claim read) -> superseded
        let cases = [
            (Some(3), None, Some(3), false),
            (Some(3), None, Some(7), true),
            (Some(3), Some("a/3/0"), Some(7), false),
            (None, None, Some(7), false),
            (Some(3), None, None, false),
        ];
        for (token, of, latest, want) in cases {
            assert_eq!(superseded(&at(token, of), latest), want, "{token:?} {of:?} {latest:?}");
        }
        let d = Decisions::new(10);
        d.push(DecisionRecord { superseded: true, ..at(Some(3), None) });
        assert!(d.open_failbacks().is_empty(), "a superseded failback is not resumed");
        assert_eq!(d.list().len(), 1, "but it is shown");
    }

    #[test]
    fn the_log_keeps_its_cap() {
        let d = Decisions::new(2);
        for a in [Action::Drain, Action::Eject, Action::Transition] {
            d.push(DecisionRecord::local("ws-1", a, String::new(), serde_json::Value::Null));
        }
        assert_eq!(d.list().iter().map(|r| r.action.as_str()).collect::<Vec<_>>(), ["eject", "transition"]);
    }

    #[test]
    fn a_resumed_failbacks_rounds_have_ids_of_their_own() {
        assert_eq!(round_id("gw-a/3/7", Some(3), 1), "gw-a/3/7/drain/3/1");
        assert_ne!(round_id("gw-a/3/7", Some(3), 1), round_id("gw-a/3/7", Some(9), 1), "the next leader's round 1");
        assert_eq!(decision_id("gw", None, "ab12", 4), "gw/-ab12/4");
    }

    #[test]
    fn every_action_reads_back_by_its_name() {
        for a in Action::ALL {
            assert_eq!(Action::parse(a.as_str()), Some(a));
        }
        assert_eq!(Action::parse("a_newer_action"), None);
        let names: std::collections::BTreeSet<_> = Action::ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(names.len(), Action::ALL.len(), "names are distinct");
    }
}
