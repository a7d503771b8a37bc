//! The log's side of the promise: reads the whole events topic as a node would
//! (`read_committed`, to each partition's last stable offset) and checks that every canvas's
//! versions are 1..=n, each exactly once, and that every publish a writer was answered 201 for is
//! in the log at the version it was answered, carrying its idempotency key.
//! No acknowledged write lost, no version used twice.

use crate::writer::Acked;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::{Headers, Message};
use shared::kafka::KafkaSettings;
use shared::replay::{self, Offsets};
use shared::record::{Publication, RecordHeaders};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the log holds of one canvas: version → the idempotency key its event carried.
pub type CanvasLog = BTreeMap<u64, Option<String>>;

/// Every canvas's events in log order: `(version, idempotency key)`.
pub type TopicLog = BTreeMap<String, Vec<(u64, Option<String>)>>;

/// The verdict of an audit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    /// Committed events read.
    pub events: usize,
    /// Canvases seen.
    pub canvases: usize,
    /// `(canvas, version)` present more than once.
    pub duplicated: Vec<(String, u64)>,
    /// `(canvas, version)` missing below the canvas's highest version.
    pub gaps: Vec<(String, u64)>,
    /// Acknowledged publishes not in the log at their version with their key.
    pub acked_missing: Vec<Acked>,
    /// Acknowledged more than once at different versions (the same key).
    pub acked_twice: Vec<String>,
    /// Idempotency keys the log carries at more than one version: one publish applied twice.
    pub written_twice: Vec<String>,
    /// Each canvas's highest version in the log.
    pub heads: BTreeMap<String, u64>,
}

impl Audit {
    /// Whether the log keeps the promise.
    pub fn ok(&self) -> bool {
        self.duplicated.is_empty()
            && self.gaps.is_empty()
            && self.acked_missing.is_empty()
            && self.acked_twice.is_empty()
            && self.written_twice.is_empty()
    }

    /// One line for the test log.
    pub fn summary(&self) -> String {
        format!(
            "log: {} events of {} canvases; versions used twice {}, gaps {}, acknowledged publishes missing {}, keys acknowledged \
             at two versions {}, keys written twice {}",
            self.events,
            self.canvases,
            self.duplicated.len(),
            self.gaps.len(),
            self.acked_missing.len(),
            self.acked_twice.len(),
            self.written_twice.len()
        )
    }
}

/// Checks `logs` (every canvas's events, in log order: `(version, key)`) against `acked`.
pub fn check(logs: &TopicLog, acked: &[Acked]) -> Audit {
    let mut audit = Audit { canvases: logs.len(), ..Audit::default() };
    let mut by_canvas: BTreeMap<&str, CanvasLog> = BTreeMap::new();
    let mut keys_seen: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for (canvas, events) in logs {
        let log = by_canvas.entry(canvas).or_default();
        for (v, k) in events {
            audit.events += 1;
            if log.insert(*v, k.clone()).is_some() {
                audit.duplicated.push((canvas.clone(), *v));
            }
            if let Some(k) = k {
                if !keys_seen.insert(k) {
                    audit.written_twice.push(k.clone());
                }
            }
        }
        let head = log.keys().next_back().copied().unwrap_or(0);
        audit.gaps.extend((1..=head).filter(|v| !log.contains_key(v)).map(|v| (canvas.clone(), v)));
        audit.heads.insert(canvas.clone(), head);
    }
    let mut first: BTreeMap<&str, u64> = BTreeMap::new();
    for a in acked {
        if let Some(v) = first.insert(&a.key, a.version) {
            if v != a.version {
                audit.acked_twice.push(a.key.clone());
            }
        }
        let present = by_canvas.get(a.canvas.as_str()).and_then(|l| l.get(&a.version)).is_some_and(|k| k.as_deref() == Some(a.key.as_str()));
        if !present {
            audit.acked_missing.push(a.clone());
        }
    }
    audit
}

/// Reads every committed event of `topic` (blocking: call from a blocking thread): each canvas's
/// `(version, idempotency key)` in log order.
///
/// # Errors
/// When the topic cannot be read.
pub fn read_topic(bootstrap: &str, topic: &str) -> anyhow::Result<TopicLog> {
    let consumer: BaseConsumer = KafkaSettings::new(bootstrap).reader(&format!("e2e-audit-{:08x}", rand::random::<u32>())).create()?;
    let (plan, _) = replay::plan(&consumer, topic, &Offsets::new(), Duration::from_secs(10))?;
    let mut out = TopicLog::new();
    replay::run(
        &consumer,
        topic,
        &plan,
        Duration::from_secs(30),
        &|| false,
        |msg| {
            let Ok(events) = Publication::decode_record(RecordHeaders::of(msg).format, msg.payload()) else { return };
            let keys: Vec<Option<String>> = msg.headers().map_or_else(Vec::new, |hs| {
                hs.iter()
                    .filter(|h| h.key == shared::event::IDEMPOTENCY_HEADER)
                    .map(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned()))
                    .collect()
            });
            for (i, e) in events.into_iter().enumerate() {
                out.entry(e.channel.to_string()).or_default().push((e.version, keys.get(i).cloned().flatten()));
            }
        },
        |_| {},
    )?;
    Ok(out)
}

/// Reads `topic` and checks it against `acked`.
///
/// # Errors
/// When the topic cannot be read.
pub async fn audit(bootstrap: &str, topic: &str, acked: Vec<Acked>) -> anyhow::Result<Audit> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || Ok(check(&read_topic(&bootstrap, &topic)?, &acked))).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked(key: &str, canvas: &str, version: u64) -> Acked {
        Acked { key: key.into(), canvas: canvas.into(), version, replayed: false }
    }

    /// (log of canvas "c" as (version, key), acknowledgements) → what the audit finds.
    #[test]
    fn audit_table() {
        type Case = (&'static str, Vec<(u64, Option<&'static str>)>, Vec<Acked>, (usize, usize, usize, usize, usize));
        let cases: Vec<Case> = vec![
            ("clean", vec![(1, Some("a")), (2, Some("b")), (3, None)], vec![acked("a", "c", 1), acked("b", "c", 2)], (0, 0, 0, 0, 0)),
            ("a version used twice", vec![(1, Some("a")), (2, Some("b")), (2, Some("x"))], vec![acked("a", "c", 1)], (1, 0, 0, 0, 0)),
            ("a gap", vec![(1, None), (3, None)], vec![], (0, 1, 0, 0, 0)),
            ("an acknowledged write lost", vec![(1, Some("a"))], vec![acked("a", "c", 1), acked("b", "c", 2)], (0, 0, 1, 0, 0)),
            ("acknowledged at a version another key holds", vec![(1, Some("a")), (2, Some("x"))], vec![acked("b", "c", 2)], (0, 0, 1, 0, 0)),
            ("one publish written twice", vec![(1, Some("a")), (2, Some("a"))], vec![acked("a", "c", 1), acked("a", "c", 2)], (0, 0, 0, 1, 1)),
            ("a replay of the same answer is fine", vec![(1, Some("a"))], vec![acked("a", "c", 1), acked("a", "c", 1)], (0, 0, 0, 0, 0)),
        ];
        for (name, log, acks, want) in cases {
            let logs = BTreeMap::from([("c".to_owned(), log.into_iter().map(|(v, k)| (v, k.map(str::to_owned))).collect())]);
            let a = check(&logs, &acks);
            let got = (a.duplicated.len(), a.gaps.len(), a.acked_missing.len(), a.acked_twice.len(), a.written_twice.len());
            assert_eq!(got, want, "{name}: {a:?}");
            assert_eq!(a.ok(), want == (0, 0, 0, 0, 0), "{name}");
        }
    }
}
