//! The control topic: where the gateways' leader writes its claim and every lifecycle decision
//! before carrying it out, and what every gateway replica and every node reads back.
//!
//! One partition, so one order for everyone. A leader's first record is a [`ControlRecord::Claim`];
//! the claim's offset is the leader's *fencing token*: it grows with every new leader (offsets
//! only grow), unlike a member's group generation, which the new consumer protocol (KIP-848)
//! counts per member. Admin requests from a leader carry the token ([`FENCING_HEADER`]) and the
//! decision's id ([`DECISION_HEADER`]); a node refuses a token lower than the latest claim it has
//! seen in a request or read from this topic, and does a decision's action once per id.

use crate::kafka::{FleetContext, KafkaSettings};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Default name of the control topic.
pub const DEFAULT_CONTROL_TOPIC: &str = "fleet-control";
/// Header of a leader's admin request: its fencing token (the offset of its claim), decimal.
pub const FENCING_HEADER: &str = "x-fencing-token";
/// Header of a leader's admin request: the id of the decision it carries out.
pub const DECISION_HEADER: &str = "x-decision-id";
/// Largest control record accepted (a decision's detail is small; anything bigger is not ours).
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// How long the control topic keeps its records (`retention.ms` when a gateway creates it).
pub const RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

/// One record of the control topic (JSON, tagged by `kind`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlRecord {
    /// A gateway became leader; this record's offset is its fencing token.
    Claim {
        gateway: String,
        /// Unix epoch, ms.
        at_ms: u64,
    },
    /// A decision, written before it is carried out (or an outcome of one, written after).
    Decision {
        /// Unique; node actions are idempotent by it.
        id: String,
        /// The fencing token of the leader that wrote it (`None`: an operator's request, carried
        /// out by whichever replica received it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<u64>,
        gateway: String,
        /// Unix epoch, ms.
        at_ms: u64,
        node: String,
        action: String,
        reason: String,
        /// The decision's inputs, or its outcome.
        #[serde(default)]
        detail: serde_json::Value,
        /// For an outcome or a later step, the id of the decision it belongs to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        of: Option<String>,
    },
}

/// Parses a control record's value.
///
/// # Errors
/// When it is too large or not a control record.
pub fn parse(value: &[u8]) -> Result<ControlRecord, String> {
    if value.len() > MAX_RECORD_BYTES {
        return Err(format!("control record of {} bytes, larger than {MAX_RECORD_BYTES}", value.len()));
    }
    serde_json::from_slice(value).map_err(|e| format!("not a control record: {e}"))
}

/// Whether a request's fencing token may act, given the latest claim seen: a pure rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// Accepted; the token becomes the latest seen when it is higher.
    Accept,
    /// A newer leader claimed since: 409.
    Stale { latest: u64 },
}

/// The rule: a token at least as high as the latest claim seen acts; a lower one is stale.
pub fn fencing(latest_seen: Option<u64>, token: u64) -> Fencing {
    match latest_seen {
        Some(latest) if token < latest => Fencing::Stale { latest },
        _ => Fencing::Accept,
    }
}

/// The latest claim a process has seen (from requests or from the topic), shared between them.
#[derive(Debug, Default)]
pub struct Fence {
    /// Latest token + 1; 0 when none was seen.
    latest_plus_one: AtomicU64,
}

impl Fence {
    /// The latest token seen.
    pub fn latest(&self) -> Option<u64> {
        self.latest_plus_one.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Records that `token` was claimed (seen in a request or read from the topic).
    pub fn saw(&self, token: u64) {
        self.latest_plus_one.fetch_max(token.saturating_add(1), Ordering::Relaxed);
    }

    /// Applies [`fencing`] to a request's token, recording it when accepted.
    pub fn admit(&self, token: u64) -> Fencing {
        let verdict = fencing(self.latest(), token);
        if verdict == Fencing::Accept {
            self.saw(token);
        }
        verdict
    }
}

/// Reads partition 0 of `topic` from its beginning on this thread until `stop` is cancelled, calling
/// `on` with each record's offset and parsed value, and `at_end` with the next offset to read
/// whenever the reader has nothing more for now (it has read the partition to its end).
pub fn follow(
    settings: &KafkaSettings,
    client_id: &str,
    topic: &str,
    stop: &tokio_util::sync::CancellationToken,
    mut on: impl FnMut(i64, Result<ControlRecord, String>),
    mut at_end: impl FnMut(i64),
) -> Result<(), String> {
    let mut config = settings.reader(client_id);
    config.set("enable.partition.eof", "true").set("fetch.wait.max.ms", "100");
    let consumer: BaseConsumer<FleetContext> = config.create_with_context(FleetContext::default()).map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut next = 0i64;
    let mut warned = false;
    while !stop.is_cancelled() {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                next = m.offset() + 1;
                on(m.offset(), parse(m.payload().unwrap_or_default()));
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => at_end(next),
            Some(Err(e)) => {
                if !warned {
                    tracing::warn!(topic, error = %e, "cannot read the control topic yet; retrying");
                    warned = true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            None => {}
        }
    }
    Ok(())
}

/// Starts [`follow`] on a thread of its own, until `stop` is cancelled.
pub fn spawn_follower(
    settings: KafkaSettings,
    client_id: String,
    topic: String,
    stop: tokio_util::sync::CancellationToken,
    on: impl FnMut(i64, Result<ControlRecord, String>) + Send + 'static,
    at_end: impl FnMut(i64) + Send + 'static,
) {
    std::thread::Builder::new()
        .name("control-reader".into())
        .spawn(move || {
            if let Err(e) = follow(&settings, &client_id, &topic, &stop, on, at_end) {
                tracing::error!(topic, error = %e, "cannot read the control topic");
            }
        })
        .expect("spawn the control topic reader");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_table() {
        // (latest seen, token) → verdict
        let cases = [
            (None, 0, Fencing::Accept),
            (None, 7, Fencing::Accept),
            (Some(7), 7, Fencing::Accept),
            (Some(7), 9, Fencing::Accept),
            (Some(7), 6, Fencing::Stale { latest: 7 }),
            (Some(0), 0, Fencing::Accept),
        ];
        for (latest, token, want) in cases {
            assert_eq!(fencing(latest, token), want, "latest {latest:?}, token {token}");
        }
    }

    #[test]
    fn fence_keeps_the_highest() {
        let f = Fence::default();
        assert_eq!(f.latest(), None);
        assert_eq!(f.admit(0), Fencing::Accept);
        assert_eq!(f.latest(), Some(0));
        f.saw(12);
        assert_eq!(f.admit(5), Fencing::Stale { latest: 12 });
        assert_eq!(f.admit(12), Fencing::Accept);
        f.saw(3);
        assert_eq!(f.latest(), Some(12));
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_named() {
        let claim = ControlRecord::Claim { gateway: "gw-a".into(), at_ms: 5 };
        let text = serde_json::to_vec(&claim).unwrap();
        assert_eq!(String::from_utf8_lossy(&text), r#"{"kind":"claim","gateway":"gw-a","at_ms":5}"#);
        assert_eq!(parse(&text).unwrap(), claim);
        let d = ControlRecord::Decision {
            id: "gw-a/3/1".into(),
            token: Some(3),
            gateway: "gw-a".into(),
            at_ms: 9,
            node: "ws-1".into(),
            action: "failback_started".into(),
            reason: "r".into(),
            detail: serde_json::json!({"partitions": [1]}),
            of: None,
        };
        assert_eq!(parse(&serde_json::to_vec(&d).unwrap()).unwrap(), d);
        assert!(parse(b"{\"kind\":\"nope\"}").unwrap_err().contains("not a control record"));
        assert!(parse(b"").is_err());
        assert!(parse(&vec![b' '; MAX_RECORD_BYTES + 1]).unwrap_err().contains("larger"));
    }
}
