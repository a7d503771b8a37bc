//! The control topic: where the gateways' leader writes its claim and every lifecycle decision
//! before carrying it out, and what every gateway replica and every node reads back.
//!
//! One partition, so one order for everyone. A leader's first record is a [`ControlRecord::Claim`];
//! the claim's offset is the leader's *fencing token*: it grows with every new leader (offsets
//! only grow), unlike a member's group generation, which the new consumer protocol (KIP-848)
//! counts per member. Admin requests from a leader carry the token ([`FENCING_HEADER`]) and the
//! decision's id ([`DECISION_HEADER`]); a node accepts only the latest claim it has read from this
//! topic itself ([`fencing`]), and does a decision's action once per id.

use crate::kafka::{FleetContext, KafkaSettings};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Default name of the control topic.
pub const DEFAULT_CONTROL_TOPIC: &str = "fleet-control";
/// Header of a leader's admin request: its fencing token (the offset of its claim), decimal.
pub const FENCING_HEADER: &str = "x-fencing-token";
/// Header of a leader's admin request: the id of the decision it carries out.
pub const DECISION_HEADER: &str = "x-decision-id";
/// Largest control record accepted (a decision's detail is small; anything bigger is not ours).
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// The control topic's settings when a gateway creates it: compacted, so the latest claim (key
/// `claim`) stays however long its leader leads, and a node that starts a year later still
/// rebuilds its fence from it, as Kafka Connect keeps its config topic.
pub const TOPIC_CONFIGS: [(&str, &str); 1] = [("cleanup.policy", "compact")];

/// The key of a control record: `claim` for every claim (compaction keeps the latest), and
/// `decision/<id>` for a decision or an outcome (each kept).
pub fn record_key(record: &ControlRecord) -> String {
    match record {
        ControlRecord::Claim { .. } => "claim".to_owned(),
        ControlRecord::Decision { id, .. } => format!("decision/{id}"),
    }
}

/// Whether a control topic with `cleanup.policy` `policy` and `retention.ms` `retention_ms` (as the
/// broker reports them; `None`: not reported) keeps the latest claim for good: compacted, or never
/// deleting. Pure.
pub fn keeps_claims(policy: Option<&str>, retention_ms: Option<&str>) -> bool {
    let compacted = policy.is_some_and(|p| p.split(',').any(|x| x.trim() == "compact"));
    let deletes = policy.is_none_or(|p| p.split(',').any(|x| x.trim() == "delete"));
    retention_ms.is_some_and(|r| r.trim() == "-1") || (compacted && !deletes)
}

/// Checks at start that `topic` keeps the latest claim ([`keeps_claims`]): an error line with the
/// fix when it does not (a node restarted after the claim was deleted would take any token for
/// unknown and refuse the leader), a warning where the broker answers no DescribeConfigs.
pub async fn check_topic(settings: &KafkaSettings, client_id: &str, topic: &str) {
    let policy = crate::kafka::topic_config(settings, client_id, topic, "cleanup.policy").await;
    let retention = crate::kafka::topic_config(settings, client_id, topic, "retention.ms").await;
    match (policy, retention) {
        (Ok(p), Ok(r)) if keeps_claims(p.as_deref(), r.as_deref()) => {}
        (Ok(p), Ok(r)) => tracing::error!(topic, cleanup_policy = p.as_deref().unwrap_or("unset"), retention_ms = r.as_deref().unwrap_or("unset"),
            "the control topic deletes old records, so the leader's claim goes away while it leads and a node restarted then refuses its token; \
             make it compacted: kafka-configs.sh --alter --entity-type topics --entity-name <topic> --add-config cleanup.policy=compact"),
        (Err(e), _) | (_, Err(e)) => tracing::warn!(topic, error = %e, "cannot read the control topic's cleanup.policy (the broker answers no DescribeConfigs); not checked"),
    }
}

/// The exit status of a gateway that refuses to start because a live replica has its
/// `GATEWAY_ID` (2 is a configuration problem, 1 any other failure).
pub const EXIT_DUPLICATE_ID: i32 = 3;

/// One record of the control topic (JSON, tagged by `kind`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlRecord {
    /// A gateway became leader; this record's offset is its fencing token.
    Claim {
        gateway: String,
        /// Unix epoch, ms.
        at_ms: u64,
        /// The URL of the leader's public port (`GATEWAY_ADVERTISED_URL`), where the other
        /// replicas forward operator requests.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
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

/// What a process has read of the control topic, as its fencing rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FenceView {
    /// The process reads a control topic (a node with none configured cannot check a token).
    pub reading: bool,
    /// The reader reached the topic's end at least once (or found no topic: no claim exists).
    pub caught_up: bool,
    /// The offset the reader reads next: every claim below it has been read.
    pub read_to: u64,
    /// The latest claim read: its offset, the leader's token.
    pub latest: Option<u64>,
}

/// Whether an admin request may act: a pure rule over a [`FenceView`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// It may act.
    Accept,
    /// A newer leader claimed since: 409 `stale_leader`.
    Stale { latest: u64 },
    /// The reader has not reached the token's offset yet: wait for it (briefly).
    NotYet,
    /// No claim was read at that offset (the reader is past it): 409 `unknown_claim`.
    UnknownClaim,
    /// The reader has not reached the topic's end yet: 503, try again shortly.
    CatchingUp,
    /// No token on the public listener of a process that has read a leader's claim: 409
    /// `fencing_token_required` (a leader carries such requests out under its token).
    TokenRequired { latest: u64 },
}

/// Where an admin request arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The public port (behind the admin token): reachable from other hosts.
    Public,
    /// The loopback admin listener: an operator on the host itself.
    Loopback,
}

/// The rule. A token acts only when it is the latest claim the process has read from the topic
/// itself: a token in a request is never taken on trust, so a forged one cannot lock the real
/// leader out, and none is judged before the reader has reached the topic's end. A request
/// without a token acts on the loopback listener (an operator on the host), and on the public
/// one only while no leader has claimed (a fleet with a standalone gateway): once a leader has,
/// a request from another host must carry its token, so a replica that is not the leader (or a
/// script with the admin secret) cannot act beside it.
pub fn fencing(v: &FenceView, token: Option<u64>, listener: Listener) -> Fencing {
    let Some(t) = token else {
        return match (listener, v.latest) {
            (Listener::Loopback, _) => Fencing::Accept,
            _ if v.reading && !v.caught_up => Fencing::CatchingUp,
            (Listener::Public, Some(latest)) => Fencing::TokenRequired { latest },
            (Listener::Public, None) => Fencing::Accept,
        };
    };
    if v.reading && !v.caught_up {
        return Fencing::CatchingUp;
    }
    match v.latest {
        Some(latest) if t < latest => Fencing::Stale { latest },
        Some(latest) if t == latest => Fencing::Accept,
        _ if v.reading && t >= v.read_to => Fencing::NotYet,
        _ => Fencing::UnknownClaim,
    }
}

/// The claims a process has read from the control topic, shared between its reader and its
/// request handlers.
#[derive(Debug)]
pub struct Fence {
    view: std::sync::Mutex<FenceView>,
    moved: tokio::sync::Notify,
}

impl Fence {
    /// A fence fed by a reader of the control topic.
    pub fn reading() -> Self {
        Self { view: std::sync::Mutex::new(FenceView { reading: true, ..FenceView::default() }), moved: tokio::sync::Notify::new() }
    }

    /// A fence with no control topic to read: requests without a token act, tokens are unknown.
    pub fn without_topic() -> Self {
        Self { view: std::sync::Mutex::new(FenceView { caught_up: true, ..FenceView::default() }), moved: tokio::sync::Notify::new() }
    }

    /// What it has read.
    pub fn view(&self) -> FenceView {
        *self.view.lock().expect("fence lock")
    }

    /// The latest claim read.
    pub fn latest(&self) -> Option<u64> {
        self.view().latest
    }

    fn update(&self, f: impl FnOnce(&mut FenceView)) {
        f(&mut self.view.lock().expect("fence lock"));
        self.moved.notify_waiters();
    }

    /// The reader read a claim at `offset`.
    pub fn claimed(&self, offset: u64) {
        self.update(|v| {
            v.latest = Some(v.latest.map_or(offset, |l| l.max(offset)));
            v.read_to = v.read_to.max(offset + 1);
        });
    }

    /// The reader reads `next` next.
    pub fn read_to(&self, next: u64) {
        self.update(|v| v.read_to = v.read_to.max(next));
    }

    /// The reader reached the topic's end (`next` is the end), or found that the topic does not
    /// exist (`next` 0: no claim exists).
    pub fn reached_end(&self, next: u64) {
        self.update(|v| {
            v.read_to = v.read_to.max(next);
            v.caught_up = true;
        });
    }

    /// Applies [`fencing`] to a request's `token`, waiting up to `wait` while the reader has not
    /// reached the token's offset or the topic's end. A token still not read then is
    /// [`Fencing::UnknownClaim`].
    pub async fn admit(&self, token: Option<u64>, listener: Listener, wait: Duration) -> Fencing {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            let verdict = fencing(&self.view(), token, listener);
            if !matches!(verdict, Fencing::NotYet | Fencing::CatchingUp) {
                return verdict;
            }
            if tokio::time::timeout_at(deadline, moved).await.is_err() {
                return match fencing(&self.view(), token, listener) {
                    Fencing::NotYet => Fencing::UnknownClaim,
                    v => v,
                };
            }
        }
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
    // A topic that does not exist holds no claim: the reader is at its end (0) until it exists.
    let mut absent_said = false;
    while !stop.is_cancelled() {
        match topic_exists(&consumer, topic) {
            Ok(true) => break,
            Ok(false) => {
                if !absent_said {
                    tracing::info!(topic, "the control topic does not exist (yet): no leader has claimed; reading it once it exists");
                    absent_said = true;
                }
                at_end(0);
            }
            Err(e) => tracing::debug!(topic, error = %e, "cannot read the control topic's metadata yet"),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
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

/// Whether `topic` exists, by the cluster's metadata.
fn topic_exists(consumer: &BaseConsumer<FleetContext>, topic: &str) -> Result<bool, String> {
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)).map_err(|e| e.to_string())?;
    Ok(md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
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
        let view = |reading, caught_up, read_to, latest| FenceView { reading, caught_up, read_to, latest };
        let reader_at_end = view(true, true, 8, Some(7));
        let cases: Vec<(&str, FenceView, Option<u64>, Fencing)> = vec![
            ("the latest claim read", reader_at_end, Some(7), Fencing::Accept),
            ("an older claim", reader_at_end, Some(6), Fencing::Stale { latest: 7 }),
            ("a forged token past the reader", reader_at_end, Some(u64::MAX), Fencing::NotYet),
            ("a token the reader read past: no claim there", view(true, true, 9, Some(7)), Some(8), Fencing::UnknownClaim),
            ("no token after a claim: refused", reader_at_end, None, Fencing::TokenRequired { latest: 7 }),
            ("reader not at the end yet: not now", view(true, false, 3, Some(2)), Some(2), Fencing::CatchingUp),
            ("reader not at the end yet, no token: not known whether a leader claimed", view(true, false, 0, None), None, Fencing::CatchingUp),
            ("no claim at all, a token", view(true, true, 0, None), Some(0), Fencing::NotYet),
            ("no claim at all, no token: acts (a standalone gateway's fleet)", view(true, true, 4, None), None, Fencing::Accept),
            ("no control topic: a token cannot be checked", view(false, true, 0, None), Some(0), Fencing::UnknownClaim),
            ("no control topic, no token: acts", view(false, true, 0, None), None, Fencing::Accept),
        ];
        for (name, v, token, want) in cases {
            assert_eq!(fencing(&v, token, Listener::Public), want, "{name}");
        }
        // The loopback listener: an operator on the host acts without a token; tokens are judged
        // as on the public one.
        let loopback: Vec<(&str, FenceView, Option<u64>, Fencing)> = vec![
            ("no token after a claim", reader_at_end, None, Fencing::Accept),
            ("no token, reader not at the end yet", view(true, false, 0, None), None, Fencing::Accept),
            ("an older claim", reader_at_end, Some(6), Fencing::Stale { latest: 7 }),
        ];
        for (name, v, token, want) in loopback {
            assert_eq!(fencing(&v, token, Listener::Loopback), want, "loopback: {name}");
        }
    }

    #[tokio::test]
    async fn a_token_is_admitted_once_its_claim_is_read() {
        let f = std::sync::Arc::new(Fence::reading());
        let public = Listener::Public;
        assert_eq!(f.admit(Some(0), public, Duration::ZERO).await, Fencing::CatchingUp);
        assert_eq!(f.admit(None, public, Duration::ZERO).await, Fencing::CatchingUp);
        assert_eq!(f.admit(None, Listener::Loopback, Duration::ZERO).await, Fencing::Accept);
        f.reached_end(0);
        assert_eq!(f.admit(None, public, Duration::ZERO).await, Fencing::Accept, "no leader has claimed");
        assert_eq!(f.admit(Some(u64::MAX), public, Duration::from_millis(50)).await, Fencing::UnknownClaim, "a forged token");
        // The claim at 4 arrives while a request with token 4 waits for it.
        let reader = f.clone();
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            reader.read_to(3);
            reader.claimed(4);
        });
        assert_eq!(f.admit(Some(4), public, Duration::from_secs(5)).await, Fencing::Accept);
        late.await.unwrap();
        assert_eq!(f.admit(Some(3), public, Duration::ZERO).await, Fencing::Stale { latest: 4 });
        assert_eq!(f.admit(None, public, Duration::ZERO).await, Fencing::TokenRequired { latest: 4 });
        assert_eq!(f.latest(), Some(4));
        let none = Fence::without_topic();
        assert_eq!(none.admit(Some(0), public, Duration::ZERO).await, Fencing::UnknownClaim);
        assert_eq!(none.admit(None, public, Duration::ZERO).await, Fencing::Accept);
    }

    #[test]
    fn the_topic_must_keep_the_latest_claim() {
        let cases = [
            (Some("compact"), Some("604800000"), true),
            (Some("compact,delete"), Some("604800000"), false),
            (Some("compact,delete"), Some("-1"), true),
            (Some("delete"), Some("604800000"), false),
            (Some("delete"), Some("-1"), true),
            (None, None, false),
        ];
        for (policy, retention, want) in cases {
            assert_eq!(keeps_claims(policy, retention), want, "{policy:?} {retention:?}");
        }
        assert_eq!(record_key(&ControlRecord::Claim { gateway: "g".into(), at_ms: 1, url: None }), "claim");
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_named() {
        let claim = ControlRecord::Claim { gateway: "gw-a".into(), at_ms: 5, url: None };
        let text = serde_json::to_vec(&claim).unwrap();
        assert_eq!(String::from_utf8_lossy(&text), r#"{"kind":"claim","gateway":"gw-a","at_ms":5}"#);
        assert_eq!(parse(&text).unwrap(), claim);
        let claim = ControlRecord::Claim { gateway: "gw-a".into(), at_ms: 5, url: Some("http://gw-a:8000".into()) };
        assert_eq!(parse(&serde_json::to_vec(&claim).unwrap()).unwrap(), claim);
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
