//! The control topic's side of leadership: reads the gateways' whole control topic (every claim
//! and decision, in offset order) and checks that no deposed leader acted.
//!
//! Walking the records in order with the latest claim read so far (a claim's offset is its
//! leader's fencing token), a record written under a token below that claim was written by a
//! deposed leader ([`ControlAudit::stale_written`]). That alone is allowed: an outcome is a fact
//! the next leader needs, written under the token its decision was made with, even when it
//! arrives late (a leader frozen mid-drain reports the drain after its SIGCONT). What must never
//! happen is a deposed leader *deciding* and then carrying the decision out: a decision
//! (`start_recovery`, `failback_started`, `failback_resumed`, `drain`, `eject`) written under a
//! superseded token, with an outcome that says it was done ([`ControlAudit::stale_acted`]; the
//! node would have had to accept the stale token, or the gateway to skip its authority check).
//! Outcomes that report one decision done by two gateways under two tokens (a failback completed
//! twice, a drain done twice) are listed too ([`ControlAudit::done_twice`]), as information: a
//! failback resumed by the next leader while its first leader was still finishing it completes
//! twice, harmlessly (the drains are scoped and idempotent).

use shared::control::ControlRecord;
use std::collections::BTreeMap;
use std::time::Duration;

/// Actions a leader writes with `decide` before carrying them out (the others are outcomes).
pub const DECISIONS: [&str; 5] = ["start_recovery", "failback_started", "failback_resumed", "drain", "eject"];

/// Whether an outcome record says its decision was carried out on a node: a completion, a sent
/// start-recovery, or a failback round that moved sessions (`failback_paced` with `moving` > 0).
pub fn carried_out(action: &str, detail: &serde_json::Value) -> bool {
    match action {
        "start_recovery_sent" | "failback_completed" | "drain_completed" | "eject_completed" => true,
        "failback_paced" => detail["moving"].as_u64().unwrap_or(0) > 0,
        _ => false,
    }
}

/// What the audit found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlAudit {
    /// Claims read (leaders elected).
    pub claims: usize,
    /// Decision and outcome records read.
    pub decisions: usize,
    /// Records that are not control records.
    pub unreadable: usize,
    /// Records written under a token below the latest claim before them (information), each as
    /// `offset action by gateway under token T (claim C before it)`.
    pub stale_written: Vec<String>,
    /// Outcomes saying that a decision written by a deposed leader was carried out (the failure).
    pub stale_acted: Vec<String>,
    /// Decisions with outcomes saying they were done from two gateways or tokens (information).
    pub done_twice: Vec<String>,
}

impl ControlAudit {
    /// No deposed leader acted.
    pub fn ok(&self) -> bool {
        self.stale_acted.is_empty()
    }

    /// One line for a summary.
    pub fn summary(&self) -> String {
        format!(
            "control topic: {} claims, {} decisions and outcomes; written under a superseded token {}, acted on by a deposed leader {}, done by two leaders {}",
            self.claims,
            self.decisions,
            self.stale_written.len(),
            self.stale_acted.len(),
            self.done_twice.len()
        )
    }
}

/// Checks the control topic's records, `(offset, record)` in any order (sorted here). Pure.
pub fn check(records: &[(i64, Result<ControlRecord, String>)]) -> ControlAudit {
    let mut sorted: Vec<&(i64, Result<ControlRecord, String>)> = records.iter().collect();
    sorted.sort_by_key(|(o, _)| *o);
    let mut audit = ControlAudit::default();
    let mut latest: Option<u64> = None;
    // Decisions written by a deposed leader: id → what to say about it.
    let mut stale_decisions: BTreeMap<String, String> = BTreeMap::new();
    // For each decision (the failback's first id for its resumptions): who reported it done.
    let mut done_by: BTreeMap<String, Vec<(String, Option<u64>, String)>> = BTreeMap::new();
    for (offset, record) in sorted {
        let Ok(record) = record else {
            audit.unreadable += 1;
            continue;
        };
        match record {
            ControlRecord::Claim { .. } => {
                audit.claims += 1;
                let o = (*offset).max(0) as u64;
                latest = Some(latest.map_or(o, |l| l.max(o)));
            }
            ControlRecord::Decision { id, token, gateway, action, detail, of, .. } => {
                audit.decisions += 1;
                let stale = matches!((token, latest), (Some(t), Some(c)) if *t < c);
                let t = token.map_or_else(|| "no token".to_owned(), |t| format!("token {t}"));
                if stale {
                    audit.stale_written.push(format!("{offset} {action} {id} by {gateway} under {t} (claim {} before it)", latest.unwrap_or(0)));
                    if DECISIONS.contains(&action.as_str()) {
                        // A resumed failback's steps are reported under the failback's first id.
                        let key = if action == "failback_resumed" { of.clone().unwrap_or_else(|| id.clone()) } else { id.clone() };
                        stale_decisions.insert(stale_key(&key, gateway, *token), format!("{action} {id} by {gateway} under {t} at offset {offset}"));
                    }
                }
                if let Some(of) = of {
                    if carried_out(action, detail) {
                        if let Some(what) = stale_decisions.get(&stale_key(of, gateway, *token)) {
                            audit.stale_acted.push(format!("{offset} {action} of {what}"));
                        }
                        if action != "failback_paced" {
                            done_by.entry(of.clone()).or_default().push((gateway.clone(), *token, format!("{offset} {action}")));
                        }
                    }
                }
            }
        }
    }
    for (id, by) in done_by {
        let leaders: std::collections::BTreeSet<(&String, Option<u64>)> = by.iter().map(|(g, t, _)| (g, *t)).collect();
        if leaders.len() > 1 {
            let list: Vec<String> = by.iter().map(|(g, t, what)| format!("{what} by {g} under {t:?}")).collect();
            audit.done_twice.push(format!("{id}: {}", list.join(", ")));
        }
    }
    audit
}

fn stale_key(id: &str, gateway: &str, token: Option<u64>) -> String {
    format!("{id}\u{0}{gateway}\u{0}{token:?}")
}

/// Reads the whole control `topic` from its beginning to its end (blocking: call from a blocking
/// thread): every record with its offset.
///
/// # Errors
/// When the topic cannot be read within 30 s.
pub fn read_topic(bootstrap: &str, topic: &str) -> anyhow::Result<Vec<(i64, Result<ControlRecord, String>)>> {
    let settings = shared::kafka::KafkaSettings::new(bootstrap);
    let stop = tokio_util::sync::CancellationToken::new();
    let (done, timer) = (stop.clone(), stop.clone());
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let at_end = reached.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(30));
        timer.cancel();
    });
    let mut out = Vec::new();
    shared::control::follow(
        &settings,
        &format!("e2e-control-audit-{:08x}", rand::random::<u32>()),
        topic,
        &stop,
        |offset, record| out.push((offset, record)),
        |_| {
            at_end.store(true, std::sync::atomic::Ordering::SeqCst);
            done.cancel();
        },
    )
    .map_err(anyhow::Error::msg)?;
    if !reached.load(std::sync::atomic::Ordering::SeqCst) {
        anyhow::bail!("the control topic {topic} was not read to its end within 30 s ({} records read)", out.len());
    }
    Ok(out)
}

/// Reads the control `topic` and checks it.
///
/// # Errors
/// When the topic cannot be read.
pub async fn audit(bootstrap: &str, topic: &str) -> anyhow::Result<ControlAudit> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || Ok(check(&read_topic(&bootstrap, &topic)?))).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(gateway: &str) -> ControlRecord {
        ControlRecord::Claim { gateway: gateway.into(), at_ms: 0, url: None }
    }

    fn rec(id: &str, token: u64, gateway: &str, action: &str, of: Option<&str>, detail: serde_json::Value) -> ControlRecord {
        ControlRecord::Decision {
            id: id.into(),
            token: Some(token),
            gateway: gateway.into(),
            at_ms: 0,
            node: "ws-1".into(),
            action: action.into(),
            reason: String::new(),
            detail,
            of: of.map(str::to_owned),
        }
    }

    fn d(id: &str, token: u64, gateway: &str, action: &str, of: Option<&str>) -> ControlRecord {
        rec(id, token, gateway, action, of, serde_json::Value::Null)
    }

    /// (records in offset order from 0) → (stale written, stale acted, done twice).
    #[test]
    fn audit_table() {
        let cases: Vec<(&str, Vec<ControlRecord>, (usize, usize, usize))> = vec![
            ("one leader, a failback done", vec![claim("a"), d("a1", 0, "a", "failback_started", None), d("a2", 0, "a", "failback_completed", Some("a1"))], (0, 0, 0)),
            (
                "a late outcome of a decision made before the new claim: information only",
                vec![claim("a"), d("a1", 0, "a", "drain", None), claim("b"), d("a2", 0, "a", "drain_completed", Some("a1"))],
                (1, 0, 0),
            ),
            (
                "a deposed leader decides after the new claim and drains: acted",
                vec![claim("a"), claim("b"), d("a1", 0, "a", "drain", None), d("a2", 0, "a", "drain_completed", Some("a1"))],
                (2, 1, 0),
            ),
            (
                "a deposed leader decides, the node refuses: written, not acted",
                vec![claim("a"), claim("b"), d("a1", 0, "a", "eject", None), d("a2", 0, "a", "eject_failed", Some("a1"))],
                (2, 0, 0),
            ),
            (
                "a stale failback round that moved sessions: acted",
                vec![
                    claim("a"),
                    claim("b"),
                    d("a1", 0, "a", "failback_started", None),
                    rec("a2", 0, "a", "failback_paced", Some("a1"), serde_json::json!({"moving": 3, "waiting": [2]})),
                ],
                (2, 1, 0),
            ),
            (
                "a stale round that moved nothing: not acted",
                vec![
                    claim("a"),
                    claim("b"),
                    d("a1", 0, "a", "failback_started", None),
                    rec("a2", 0, "a", "failback_paced", Some("a1"), serde_json::json!({"moving": 0})),
                ],
                (2, 0, 0),
            ),
            (
                "the next leader resumes and completes a failback: fine",
                vec![
                    claim("a"),
                    d("a1", 0, "a", "failback_started", None),
                    claim("b"),
                    d("b1", 2, "b", "failback_resumed", Some("a1")),
                    d("b2", 2, "b", "failback_completed", Some("a1")),
                ],
                (0, 0, 0),
            ),
            (
                "the old leader completes it late as the new one resumes and completes it: done twice",
                vec![
                    claim("a"),
                    d("a1", 0, "a", "failback_started", None),
                    claim("b"),
                    d("b1", 2, "b", "failback_resumed", Some("a1")),
                    d("a2", 0, "a", "failback_completed", Some("a1")),
                    d("b2", 2, "b", "failback_completed", Some("a1")),
                ],
                (1, 0, 1),
            ),
            (
                "a deposed leader resumes a failback after the newer claim and completes it: acted",
                vec![
                    claim("a"),
                    d("a1", 0, "a", "failback_started", None),
                    claim("b"),
                    claim("c"),
                    d("b1", 2, "b", "failback_resumed", Some("a1")),
                    d("b2", 2, "b", "failback_completed", Some("a1")),
                ],
                (2, 1, 0),
            ),
            (
                "an operator's request without a token is never stale",
                vec![
                    claim("a"),
                    claim("b"),
                    ControlRecord::Decision {
                        id: "o1".into(),
                        token: None,
                        gateway: "a".into(),
                        at_ms: 0,
                        node: "ws-1".into(),
                        action: "drain".into(),
                        reason: String::new(),
                        detail: serde_json::Value::Null,
                        of: None,
                    },
                ],
                (0, 0, 0),
            ),
        ];
        for (name, records, want) in cases {
            let records: Vec<(i64, Result<ControlRecord, String>)> = records.into_iter().enumerate().map(|(i, r)| (i as i64, Ok(r))).collect();
            let a = check(&records);
            assert_eq!((a.stale_written.len(), a.stale_acted.len(), a.done_twice.len()), want, "{name}: {a:#?}");
            assert_eq!(a.ok(), want.1 == 0, "{name}");
            // The order of the input does not matter: the audit sorts by offset.
            let mut reversed = records.clone();
            reversed.reverse();
            assert_eq!(check(&reversed), a, "{name}: reversed input");
        }
    }

    #[test]
    fn unreadable_records_are_counted_and_the_summary_names_everything() {
        let a = check(&[(0, Ok(claim("a"))), (1, Err("not a control record".into()))]);
        assert_eq!((a.claims, a.decisions, a.unreadable), (1, 0, 1));
        assert_eq!(
            a.summary(),
            "control topic: 1 claims, 0 decisions and outcomes; written under a superseded token 0, acted on by a deposed leader 0, done by two leaders 0"
        );
    }
}
