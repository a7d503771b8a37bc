//! The decision log (`GET /api/fleet` → `decisions`).
//!
//! Two kinds of entries, told apart by `source`:
//! - `control_topic`: the leader's decisions and their outcomes, read back from the control topic
//!   ([`shared::control`]), in the topic's order: the same on every replica.
//! - `local`: what this replica saw by itself (a node's status changing in its polls, sessions it
//!   moved, its circuit breakers), and, on a gateway without Kafka, every decision.
//!
//! It also tracks the failbacks that were started and not finished, so a new leader finishes
//! them ([`Decisions::open_failbacks`]).

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// One entry of the decision log.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    /// Unix epoch, ms.
    pub at_ms: u64,
    pub node: String,
    /// `transition`, `start_recovery`, `start_recovery_sent`, `start_recovery_failed`,
    /// `failback_started`, `failback_resumed`, `failback_paced`, `failback_completed`,
    /// `failback_failed`, `drain`, `drain_completed`, `drain_failed`, `eject`, `eject_completed`,
    /// `eject_failed`, `sessions_moved`, `circuit_opened`, `circuit_closed`.
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
}

impl DecisionRecord {
    /// A local entry.
    pub fn local(node: &str, action: &str, reason: String, detail: serde_json::Value) -> Self {
        Self {
            at_ms: shared::event::now_ms(),
            node: node.to_owned(),
            action: action.to_owned(),
            reason,
            detail,
            source: "local",
            id: None,
            gateway: None,
            token: None,
            of: None,
            offset: None,
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
    match rec.action.as_str() {
        "failback_started" => {
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
        "failback_completed" | "failback_failed" => {
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

    fn rec(action: &str, id: Option<&str>, of: Option<&str>, partitions: &[i32]) -> DecisionRecord {
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
        d.push(rec("failback_started", Some("a/1/1"), None, &[0, 2]));
        assert_eq!(d.open_failbacks(), vec![OpenFailback { id: "a/1/1".into(), node: "ws-1".into(), partitions: vec![0, 2], gateway: "gw-a".into() }]);
        d.push(rec("failback_resumed", Some("b/4/1"), Some("a/1/1"), &[]));
        d.push(rec("failback_paced", Some("b/4/2"), Some("a/1/1"), &[]));
        assert_eq!(d.open_failbacks().len(), 1, "resumed and paced do not finish it");
        d.push(rec("failback_completed", Some("b/4/3"), Some("a/1/1"), &[]));
        assert!(d.open_failbacks().is_empty());
        d.push(rec("failback_started", Some("b/4/4"), None, &[1]));
        d.push(rec("failback_failed", Some("b/4/5"), Some("b/4/4"), &[]));
        assert!(d.open_failbacks().is_empty(), "a failed failback is finished too");
    }

    #[test]
    fn the_newest_open_failback_of_a_node_counts() {
        let d = Decisions::new(10);
        d.push(rec("failback_started", Some("a/1/1"), None, &[0]));
        d.push(rec("failback_started", Some("a/1/2"), None, &[0, 1]));
        assert_eq!(d.open_failbacks().iter().map(|f| f.id.as_str()).collect::<Vec<_>>(), ["a/1/2"]);
        d.push(rec("failback_completed", Some("a/1/3"), Some("a/1/2"), &[]));
        assert!(d.open_failbacks().is_empty(), "the superseded one does not come back");
    }

    #[test]
    fn the_log_keeps_its_cap() {
        let d = Decisions::new(2);
        for a in ["x", "y", "z"] {
            d.push(DecisionRecord::local("ws-1", a, String::new(), serde_json::Value::Null));
        }
        assert_eq!(d.list().iter().map(|r| r.action.as_str()).collect::<Vec<_>>(), ["y", "z"]);
    }
}
