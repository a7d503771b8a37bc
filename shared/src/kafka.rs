//! Every Kafka client setting the fleet uses, built in one place.
//!
//! Setting names and meanings are librdkafka's (`CONFIGURATION.md` of librdkafka 2.12, bundled by
//! `rdkafka` 0.39); where they mirror the Java client the Kafka documentation applies.

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{ClientConfig, ClientContext};
use std::sync::Mutex;
use std::time::{Duration, Instant};
pub use crate::consumer::{out_of_range, serve_queued_events};

/// Default topic of pixel events.
pub const DEFAULT_TOPIC: &str = "canvas-events";
/// Default consumer group of the live (broadcast) consumers, shared by all nodes.
pub const DEFAULT_BROADCAST_GROUP: &str = "ws-broadcast";

/// `isolation.level` of every reader of the events topic: records of a transaction are delivered
/// only once it committed, records of an aborted one never (librdkafka's default too; set
/// explicitly because the fleet's correctness depends on it). Under it a partition's readable end
/// is its *last stable offset* (LSO: the first offset of the oldest open transaction, else the
/// high watermark), and `fetch_watermarks` (librdkafka's `query_watermark_offsets`, a ListOffsets
/// request with the client's isolation level) returns the LSO as its "high" value.
pub const READ_COMMITTED: &str = "read_committed";

/// How often a repeating broker-connection problem is logged (the rest are counted).
const REPEAT_EVERY: Duration = Duration::from_secs(10);

/// The client context of every Kafka client of the fleet: librdkafka's own logs and errors become
/// `tracing` events an operator can read. An unreachable broker is a warning, logged once per
/// 10 s with a count of the repeats (librdkafka reports it on every reconnect attempt, from
/// several threads), not an error line every 500 ms.
#[derive(Debug, Default)]
pub struct FleetContext {
    last_unreachable: Mutex<Option<(Instant, u64)>>,
}

impl FleetContext {
    /// Whether to log this occurrence of the broker being unreachable; returns the repeats since
    /// the last logged one.
    fn should_log_unreachable(&self) -> Option<u64> {
        let mut last = self.last_unreachable.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *last {
            Some((at, repeats)) if at.elapsed() < REPEAT_EVERY => {
                *repeats += 1;
                None
            }
            slot => {
                let repeats = slot.map_or(0, |(_, r)| r);
                *slot = Some((Instant::now(), 0));
                Some(repeats)
            }
        }
    }
}

/// The last error of this process's Kafka clients that is not the broker being unreachable (a
/// refused SASL login, a TLS handshake that failed, an authorization error ...), and when.
static LAST_CLIENT_ERROR: Mutex<Option<(Instant, String)>> = Mutex::new(None);

/// The last error this process's Kafka clients reported in the past `within`, other than the
/// broker being unreachable: the cause behind a generic "broker transport failure" that an
/// operator needs to see in `/health` (`SASL authentication error: ...`, `SSL handshake failed:
/// ... certificate verify failed ...`).
pub fn recent_client_error(within: Duration) -> Option<String> {
    let last = LAST_CLIENT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
    last.as_ref().filter(|(at, _)| at.elapsed() <= within).map(|(_, e)| e.clone())
}

/// `what` with the Kafka clients' recent error ([`recent_client_error`], last minute) appended
/// when there is one.
pub fn with_recent_client_error(what: impl std::fmt::Display) -> String {
    match recent_client_error(Duration::from_secs(60)) {
        Some(e) => format!("{what} (the Kafka client's last error: {e})"),
        None => what.to_string(),
    }
}

fn record_client_error(reason: &str) {
    *LAST_CLIENT_ERROR.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), reason.to_owned()));
}

/// Whether a librdkafka log line or error is about reaching the broker.
fn is_unreachable(text: &str) -> bool {
    ["Connection refused", "Connect to", "brokers are down", "Broker transport failure", "Disconnected", "timed out"]
        .iter()
        .any(|n| text.contains(n))
}

/// Whether a librdkafka warning is a transactional producer retrying while the transaction
/// coordinator is elected or loads its state (`Not coordinator`, `Coordinator load in progress`):
/// normal right after a broker starts or `__transaction_state` is created, and retried by
/// librdkafka; an operator needs no warning for it.
fn is_transient_coordinator_retry(facility: &str, msg: &str) -> bool {
    facility == "GETPID" && msg.contains("retrying") && (msg.contains("Not coordinator") || msg.contains("load in progress"))
}

impl ClientContext for FleetContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => {
                if is_transient_coordinator_retry(fac, msg) {
                    tracing::info!(target: "kafka", facility = fac, "librdkafka: {msg}");
                } else if is_unreachable(msg) {
                    if let Some(repeats) = self.should_log_unreachable() {
                        tracing::warn!(target: "kafka", facility = fac, repeats, "kafka broker unreachable: {msg}");
                    }
                } else {
                    // A broker connection that failed for another reason than reachability (a
                    // refused SASL login, a TLS handshake): named by this line (facility FAIL)
                    // even when no error event follows. Like error events, log lines reach the
                    // context only when the client is polled (see `serve_queued_events`).
                    if fac == "FAIL" {
                        record_client_error(msg);
                    }
                    tracing::warn!(target: "kafka", facility = fac, "librdkafka: {msg}");
                }
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => tracing::info!(target: "kafka", facility = fac, "librdkafka: {msg}"),
            RDKafkaLogLevel::Debug => tracing::debug!(target: "kafka", facility = fac, "librdkafka: {msg}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // A reader that asked for end-of-partition events (the control topic's followers) gets
        // them here too; reaching the end is news, not an error.
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::trace!(target: "kafka", "{reason}");
            return;
        }
        let transport = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
        );
        if transport || is_unreachable(reason) {
            if let Some(repeats) = self.should_log_unreachable() {
                tracing::warn!(target: "kafka", repeats, "kafka broker unreachable: {reason}");
            }
        } else {
            record_client_error(reason);
            tracing::error!(target: "kafka", error = %error, "kafka client error: {reason}");
        }
    }
}

impl ConsumerContext for FleetContext {}

/// Why `name` is not a legal Kafka topic name (1–249 characters of `[a-zA-Z0-9._-]`, not `.` or
/// `..`, per Kafka's `Topic.validate`), or `None` when it is.
pub fn topic_name_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > 249 || name == "." || name == ".." {
        return Some(format!("topic {name:?} must be 1 to 249 characters, and not \".\" or \"..\""));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return Some(format!("topic {name:?} may only contain a-z, A-Z, 0-9, '.', '_' and '-'"));
    }
    None
}

/// Where the broker is and how fast group membership reacts.
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    /// `bootstrap.servers`: `host:port[,host:port...]`.
    pub bootstrap: String,
    /// `session.timeout.ms`: how long the group coordinator waits for a silent member (a killed
    /// node) before its partitions move. Kafka's default is 45 s (KIP-735); brokers accept down to
    /// `group.min.session.timeout.ms` = 6 s, which is our default so failover is quick.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`: must be well below the session timeout (Kafka suggests ≤ 1/3).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms` of the broadcast consumer: librdkafka heartbeats from its own
    /// thread, so a member whose application stopped polling keeps its partitions this long
    /// before librdkafka leaves the group for it. Kafka's default is 300 s; ours is 30 s, to fit
    /// the failover targets (at least the session timeout, as librdkafka requires).
    pub max_poll_interval: Duration,
    /// librdkafka's `debug` contexts (`eos,broker,protocol`, ...), for diagnosing a client: its
    /// debug lines become `tracing` debug events of target `kafka` (see `RUST_LOG`). None: off.
    pub debug: Option<String>,
    /// Settings passed through to every client as they are (Kafka's security settings: SASL,
    /// TLS...), from the `KAFKA_CLIENT_<NAME>` variables ([`client_overrides`]). They are applied
    /// first: the settings the fleet's guarantees rest on (`isolation.level`, idempotence,
    /// transactions, groups, offsets) are set after them and win.
    pub overrides: Vec<(String, String)>,
}

/// Prefix of the environment variables passed through to every Kafka client.
pub const CLIENT_ENV_PREFIX: &str = "KAFKA_CLIENT_";

/// The librdkafka settings of `KAFKA_CLIENT_<NAME>=<value>` variables among `vars`: `<NAME>`
/// lowercased with `_` → `.` (`KAFKA_CLIENT_SECURITY_PROTOCOL=SASL_SSL` → `security.protocol`,
/// `KAFKA_CLIENT_SASL_MECHANISMS=PLAIN` → `sasl.mechanisms`, `KAFKA_CLIENT_SSL_CA_LOCATION` →
/// `ssl.ca.location`; librdkafka's names have no `_`). Sorted by name; an empty `<NAME>` is
/// skipped.
pub fn client_overrides(vars: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vars
        .into_iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix(CLIENT_ENV_PREFIX)?;
            (!name.is_empty()).then(|| (name.to_ascii_lowercase().replace('_', "."), v))
        })
        .collect();
    out.sort();
    out
}

/// [`client_overrides`] of this process's environment.
pub fn client_overrides_from_env() -> Vec<(String, String)> {
    client_overrides(std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))))
}

/// `name=value` of each override for a configuration listing, the values of names that look
/// secret (`password`, `secret`, `key`, `jaas`) hidden.
pub fn describe_overrides(overrides: &[(String, String)]) -> String {
    overrides
        .iter()
        .map(|(k, v)| {
            let secret = ["password", "secret", "key", "jaas", "token"].iter().any(|s| k.contains(s));
            format!("{k}={}", if secret { "<set>" } else { v.as_str() })
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl KafkaSettings {
    /// Settings with the fleet's default timings (6 s session, 250 ms heartbeat).
    pub fn new(bootstrap: impl Into<String>) -> Self {
        Self {
            bootstrap: bootstrap.into(),
            session_timeout: Duration::from_secs(6),
            heartbeat_interval: Duration::from_millis(250),
            max_poll_interval: Duration::from_secs(30),
            debug: None,
            overrides: Vec::new(),
        }
    }

    /// These settings with the `KAFKA_CLIENT_<NAME>` pass-through of this process's environment.
    pub fn with_env_overrides(mut self) -> Self {
        self.overrides = client_overrides_from_env();
        self
    }

    fn base(&self, client_id: &str) -> ClientConfig {
        let mut c = ClientConfig::new();
        for (k, v) in &self.overrides {
            c.set(k, v);
        }
        c.set("bootstrap.servers", &self.bootstrap)
            .set("client.id", client_id)
            // Loopback brokers and the mock cluster answer fast; do not wait long to notice a
            // broker that went away.
            .set("socket.connection.setup.timeout.ms", "10000")
            .set("reconnect.backoff.max.ms", "2000");
        if let Some(d) = self.debug.as_deref().filter(|d| !d.is_empty()) {
            // rdkafka derives librdkafka's `log_level` from the `log` crate's level (info here):
            // ask for debug lines explicitly.
            c.set("debug", d).set_log_level(RDKafkaLogLevel::Debug);
        }
        c
    }

    /// A plain producer: `acks=all` and `enable.idempotence=true`, so an acknowledged record is on
    /// every in-sync replica exactly once and records of a partition stay in order across retries.
    /// `partitioner=murmur2_random` matches the Java client for keyed records (callers also pass
    /// the partition explicitly, computed by [`crate::partitioner`]). `message.timeout.ms` bounds
    /// how long a record may wait for its acknowledgement. The benchmark's direct producer and
    /// tools use it; the publisher writes with [`KafkaSettings::transactional_producer`].
    pub fn producer(&self, client_id: &str, message_timeout: Duration) -> ClientConfig {
        let mut c = self.base(client_id);
        c.set("acks", "all")
            .set("enable.idempotence", "true")
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "1")
            .set("message.timeout.ms", message_timeout.as_millis().to_string());
        c
    }

    /// The publisher's producer for one partition: transactional (`transactional.id`, KIP-98), so
    /// its records become visible to `read_committed` readers only when their transaction commits,
    /// an aborted transaction is never visible, and a newer producer with the same id (another
    /// publisher process calling `init_transactions`) fences this one.
    ///
    /// - `acks=all` and idempotence (implied by `transactional.id`);
    /// - `message.timeout.ms`: how long a record of a transaction may wait for its acknowledgement
    ///   before the transaction has to be aborted;
    /// - `transaction.timeout.ms`: how long the transaction coordinator lets a transaction stay open
    ///   before it aborts it on its own (a publisher killed mid-transaction; a restarted one aborts
    ///   it at once with `init_transactions`). librdkafka requires it to be at least
    ///   `message.timeout.ms`; it must not exceed the broker's `transaction.max.timeout.ms`
    ///   (15 min by default);
    /// - `linger.ms=0`: the records of a transaction are queued together and sent at once; waiting
    ///   would only delay the commit.
    pub fn transactional_producer(
        &self,
        client_id: &str,
        transactional_id: &str,
        message_timeout: Duration,
        transaction_timeout: Duration,
    ) -> ClientConfig {
        let mut c = self.base(client_id);
        c.set("transactional.id", transactional_id)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "0")
            // A snapshot of the largest canvas ([`crate::snapshot::MAX_RECORD_BYTES`]) plus headroom.
            .set("message.max.bytes", (crate::snapshot::MAX_RECORD_BYTES + 65_536).to_string())
            .set("message.timeout.ms", message_timeout.as_millis().to_string())
            .set("transaction.timeout.ms", transaction_timeout.as_millis().to_string());
        c
    }

    /// A node's broadcast consumer in the shared group `group`.
    ///
    /// - `partition.assignment.strategy=cooperative-sticky` (KIP-429): a rebalance only revokes the
    ///   partitions that move, so sessions of the others are not disturbed.
    /// - `enable.auto.commit=false`: a node never starts from the group's committed offset; on every
    ///   assignment it continues from its own state's position (see `ws-node`'s broadcast module).
    /// - `enable.auto.offset.store=false`: nothing is committed behind our back.
    /// - `fetch.wait.max.ms=100`: a broker answers a fetch as soon as a record arrives
    ///   (`fetch.min.bytes=1`), but librdkafka's mock cluster waits the whole `fetch.wait.max.ms`
    ///   (default 500 ms) before answering; 100 ms keeps live latency low there too, at the cost of
    ///   ten empty fetches a second per idle broker connection.
    ///
    /// Every reader of the fleet has `auto.offset.reset=error`: a position below the log start
    /// (records deleted by retention) is reported ([`out_of_range`]) and the partition stops, never
    /// silently moved to the log start; the reader's owner goes to the snapshots.
    pub fn broadcast_consumer(&self, group: &str, client_id: &str) -> ClientConfig {
        let mut c = self.base(client_id);
        prefetch(&mut c);
        c.set("group.id", group)
            .set("fetch.wait.max.ms", "100")
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", self.session_timeout.as_millis().to_string())
            .set("heartbeat.interval.ms", self.heartbeat_interval.as_millis().to_string())
            .set("max.poll.interval.ms", self.max_poll_interval.as_millis().to_string())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set("enable.partition.eof", "false")
            .set("isolation.level", READ_COMMITTED);
        c
    }

    /// A node's catch-up consumer: its own group id (so replay never joins or disturbs the
    /// broadcast group), partitions assigned by hand with explicit start offsets.
    pub fn catchup_consumer(&self, group: &str, client_id: &str) -> ClientConfig {
        let mut c = self.base(client_id);
        prefetch(&mut c);
        c.set("fetch.wait.max.ms", READER_FETCH_WAIT_MS);
        c.set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set("enable.partition.eof", "false")
            .set("isolation.level", READ_COMMITTED)
            // Replay reads whole batches; fetch more per request than live consumption needs.
            .set("fetch.max.bytes", "52428800")
            .set("max.partition.fetch.bytes", "10485760");
        c
    }

    /// The publisher's consumer of the input topics (users' own topics, read exactly once):
    ///
    /// - `group.id` `group`, `group.instance.id` `instance` (static membership, KIP-345): a
    ///   restarted publisher takes the killed one's place at once instead of waiting for its
    ///   session to time out, and an older process with the same instance is fenced out of the
    ///   group;
    /// - `enable.auto.commit=false`, `enable.auto.offset.store=false`: offsets are committed only
    ///   inside the publisher's transactions (`send_offsets_to_transaction`);
    /// - `isolation.level=read_committed`: records of the users' own transactions once they
    ///   commit; librdkafka then asks for *stable* committed offsets on assignment, waiting for a
    ///   transaction that carries offsets to end;
    /// - `auto.offset.reset` `offset_reset` (`earliest` by default) for a partition the group has
    ///   no offset of;
    /// - `partition.assignment.strategy=roundrobin` (eager: a rebalance revokes everything, and
    ///   the publisher drops what it had read of it).
    pub fn input_consumer(&self, client_id: &str, group: &str, instance: &str, offset_reset: &str) -> ClientConfig {
        let mut c = self.base(client_id);
        prefetch(&mut c);
        c.set("group.id", group)
            .set("group.instance.id", instance)
            .set("fetch.wait.max.ms", "100")
            .set("partition.assignment.strategy", "roundrobin")
            .set("session.timeout.ms", self.session_timeout.as_millis().to_string())
            .set("heartbeat.interval.ms", self.heartbeat_interval.as_millis().to_string())
            .set("max.poll.interval.ms", self.max_poll_interval.as_millis().to_string())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", offset_reset)
            .set("enable.partition.eof", "false")
            .set("isolation.level", READ_COMMITTED);
        c
    }

    /// A plain reader (manual assignment, no commits): the publisher's head rebuild, the node's
    /// release and standby readers, and tools.
    pub fn reader(&self, client_id: &str) -> ClientConfig {
        let mut c = self.base(client_id);
        prefetch(&mut c);
        c.set("fetch.wait.max.ms", READER_FETCH_WAIT_MS);
        c.set("group.id", format!("{client_id}-reader"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set("enable.partition.eof", "false")
            .set("isolation.level", READ_COMMITTED);
        c
    }

    /// A client that reads a partition's high watermark only (`isolation.level=read_uncommitted`:
    /// `fetch_watermarks` returns the high watermark instead of the last stable offset). Never use
    /// it to read records: it would deliver those of open and aborted transactions.
    pub fn high_watermark_reader(&self, client_id: &str) -> ClientConfig {
        let mut c = self.reader(client_id);
        c.set("isolation.level", "read_uncommitted");
        c
    }

    /// An admin client (topic creation, metadata).
    pub fn admin(&self, client_id: &str) -> ClientConfig {
        self.base(client_id)
    }
}

/// How a consumer prefetches: librdkafka stops fetching a partition for `fetch.queue.backoff.ms`
/// (default 1 s) once the prefetched records pass `queued.min.messages` or
/// `queued.max.messages.kbytes`, however fast the application drains them; a reader of a long log
/// then sits idle for most of that second (a publisher's read of 191,000 records paused 0.8 s of
/// its 1.3 s). 10 ms resumes fetching as soon as the queue has room. The prefetch is capped at
/// 10,000 records per partition and 16 MiB (defaults 100,000 and 64 MiB): at the rate a reader
/// drains it more only costs memory, up to 65 MB more in that publisher's read.
fn prefetch(c: &mut ClientConfig) {
    c.set("fetch.queue.backoff.ms", "10").set("queued.min.messages", "10000").set("queued.max.messages.kbytes", "16384");
}

/// How long the broker holds a reader's fetch at a partition's end waiting for new records
/// (`fetch.wait.max.ms`, default 500 ms). A broker answers one request of a connection at a time,
/// so a reader's next metadata or ListOffsets request, and its close, wait behind that fetch: with
/// the default, a finite read's last look at the watermarks took up to half a second. 50 ms bounds
/// that wait at the cost of up to 20 empty fetches a second while a reader follows an idle log.
const READER_FETCH_WAIT_MS: &str = "50";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_error_is_named_for_a_minute_but_not_the_broker_being_unreachable() {
        let ctx = FleetContext::default();
        ctx.error(KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused");
        assert_eq!(recent_client_error(Duration::from_secs(60)), None, "unreachable is not a client error");
        ctx.log(RDKafkaLogLevel::Warning, "FAIL", "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused (after 0ms in state CONNECT)");
        assert_eq!(recent_client_error(Duration::from_secs(60)), None, "unreachable is not a client error");
        ctx.log(RDKafkaLogLevel::Warning, "FAIL", "sasl_ssl://127.0.0.1:9/bootstrap: SSL handshake failed: certificate verify failed");
        assert!(recent_client_error(Duration::from_secs(60)).is_some_and(|e| e.contains("certificate verify failed")), "a log line names it at once");
        ctx.error(KafkaError::Global(RDKafkaErrorCode::Authentication), "SASL authentication error: Authentication failed: Invalid username or password");
        let e = recent_client_error(Duration::from_secs(60)).expect("recorded");
        assert!(e.starts_with("SASL authentication error"), "{e}");
        assert_eq!(with_recent_client_error("metadata: Broker transport failure"), format!("metadata: Broker transport failure (the Kafka client's last error: {e})"));
    }

    #[test]
    fn every_reader_is_read_committed() {
        let s = KafkaSettings::new("localhost:9092");
        for (name, c) in [
            ("broadcast", s.broadcast_consumer("g", "c")),
            ("catch-up", s.catchup_consumer("g", "c")),
            ("reader", s.reader("c")),
        ] {
            assert_eq!(c.get("isolation.level"), Some(READ_COMMITTED), "{name}");
            assert_eq!(c.get("auto.offset.reset"), Some("error"), "{name}: a deleted record is never skipped silently");
            assert_eq!(c.get("fetch.queue.backoff.ms"), Some("10"), "{name}: no second-long pause once the prefetch is full");
        }
        let t = s.transactional_producer("c", "tx-0", Duration::from_secs(5), Duration::from_secs(60));
        assert_eq!((t.get("transactional.id"), t.get("acks"), t.get("transaction.timeout.ms")), (Some("tx-0"), Some("all"), Some("60000")));
    }

    #[test]
    fn kafka_client_variables_become_librdkafka_settings_of_every_client() {
        let vars = [
            ("KAFKA_CLIENT_SECURITY_PROTOCOL", "SASL_SSL"),
            ("KAFKA_CLIENT_SASL_MECHANISMS", "PLAIN"),
            ("KAFKA_CLIENT_SASL_USERNAME", "fleet"),
            ("KAFKA_CLIENT_SASL_PASSWORD", "pw"),
            ("KAFKA_CLIENT_SSL_CA_LOCATION", "/etc/ca.pem"),
            ("KAFKA_CLIENT_", "ignored"),
            ("KAFKA_BOOTSTRAP", "not a client setting"),
            ("OTHER_KAFKA_CLIENT_X", "no"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let o = client_overrides(vars);
        let names: Vec<&str> = o.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["sasl.mechanisms", "sasl.password", "sasl.username", "security.protocol", "ssl.ca.location"]);
        assert_eq!(describe_overrides(&o), "sasl.mechanisms=PLAIN,sasl.password=<set>,sasl.username=fleet,security.protocol=SASL_SSL,ssl.ca.location=/etc/ca.pem");
        let s = KafkaSettings { overrides: o, ..KafkaSettings::new("b:9092") };
        let every = [
            ("producer", s.producer("c", Duration::from_secs(5))),
            ("transactional", s.transactional_producer("c", "tx", Duration::from_secs(5), Duration::from_secs(60))),
            ("broadcast", s.broadcast_consumer("g", "c")),
            ("catch-up", s.catchup_consumer("g", "c")),
            ("reader", s.reader("c")),
            ("admin", s.admin("c")),
        ];
        for (name, c) in every {
            assert_eq!((c.get("security.protocol"), c.get("sasl.username")), (Some("SASL_SSL"), Some("fleet")), "{name}");
            assert_eq!(c.get("bootstrap.servers"), Some("b:9092"), "{name}");
        }
        // The fleet's own guarantees win over a pass-through of the same name.
        let s = KafkaSettings { overrides: vec![("isolation.level".into(), "read_uncommitted".into())], ..KafkaSettings::new("b:9092") };
        assert_eq!(s.broadcast_consumer("g", "c").get("isolation.level"), Some(READ_COMMITTED));
    }

    #[test]
    fn coordinator_start_up_retries_are_not_warnings() {
        assert!(is_transient_coordinator_retry(
            "GETPID",
            "[thrd:main]: Failed to acquire transactional PID from broker TxnCoordinator/1: Broker: Not coordinator: retrying"
        ));
        assert!(is_transient_coordinator_retry("GETPID", "Failed to acquire transactional PID: Broker: Coordinator load in progress: retrying"));
        assert!(!is_transient_coordinator_retry("GETPID", "Failed to acquire transactional PID: Broker: Transactional Id authorization failed"));
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert_eq!(topic_name_problem("canvas-events"), None);
        assert_eq!(topic_name_problem("a.b_c-1"), None);
        for bad in ["", ".", "..", "has space", "slash/no", &"x".repeat(250)] {
            assert!(topic_name_problem(bad).is_some(), "{bad:?}");
        }
    }
}

/// The value of `key` in `topic`'s configuration (DescribeConfigs; `None` when the broker reports
/// no such entry).
///
/// # Errors
/// When the broker cannot be reached or does not answer DescribeConfigs.
pub async fn topic_config(settings: &KafkaSettings, client_id: &str, topic: &str, key: &str) -> Result<Option<String>, String> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    let admin: AdminClient<FleetContext> =
        settings.admin(&format!("{client_id}-admin")).create_with_context(FleetContext::default()).map_err(|e| e.to_string())?;
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin.describe_configs([&ResourceSpecifier::Topic(topic)], &opts).await.map_err(|e| e.to_string())?;
    let resource = results.into_iter().next().ok_or("no answer")?.map_err(|e| e.to_string())?;
    Ok(resource.get(key).and_then(|e| e.value.clone()))
}

/// The value of `key` in each broker's configuration (DescribeConfigs on every broker of the
/// cluster's metadata): per broker id, `Ok(None)` when the broker reports no such entry, `Err` when
/// it did not answer (librdkafka's mock cluster has no DescribeConfigs).
///
/// # Errors
/// When the brokers cannot be listed.
pub async fn broker_config(settings: &KafkaSettings, client_id: &str, key: &str) -> Result<Vec<(i32, Result<Option<String>, String>)>, String> {
    use rdkafka::admin::{AdminClient, AdminOptions, OwnedResourceSpecifier, ResourceSpecifier};
    let admin: std::sync::Arc<AdminClient<FleetContext>> = std::sync::Arc::new(
        settings.admin(&format!("{client_id}-admin")).create_with_context(FleetContext::default()).map_err(|e| e.to_string())?,
    );
    let lister = admin.clone();
    let ids: Vec<i32> = tokio::task::spawn_blocking(move || {
        let md = lister.inner().fetch_metadata(None, Duration::from_secs(10)).map_err(|e| e.to_string())?;
        Ok::<_, String>(md.brokers().iter().map(|b| b.id()).collect())
    })
    .await
    .map_err(|e| e.to_string())??;
    // librdkafka sends a broker's resource to that broker: one broker per request.
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let results = admin.describe_configs([&ResourceSpecifier::Broker(id)], &opts).await.map_err(|e| e.to_string());
        let value = match results.map(|r| r.into_iter().next()) {
            Err(e) => Err(e),
            Ok(None) => Err("no answer".to_owned()),
            Ok(Some(Err(e))) => Err(e.to_string()),
            Ok(Some(Ok(res))) if matches!(res.specifier, OwnedResourceSpecifier::Broker(b) if b == id) => Ok(res.get(key).and_then(|e| e.value.clone())),
            Ok(Some(Ok(res))) => Err(format!("answered for {:?}, asked for broker {id}", res.specifier)),
        };
        out.push((id, value));
    }
    Ok(out)
}

/// Ensures `topic` exists (creating it with `partitions` × `replication` and `configs` when it
/// does not) and returns its real partition count.
///
/// # Errors
/// When the broker cannot be asked, or refuses to create it.
pub async fn ensure_topic(settings: &KafkaSettings, client_id: &str, topic: &str, partitions: u32, replication: i32, configs: &[(&str, &str)]) -> Result<u32, String> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let count = || {
        let (settings, topic, client_id) = (settings.clone(), topic.to_owned(), client_id.to_owned());
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer<FleetContext> =
                settings.reader(&client_id).create_with_context(FleetContext::default()).map_err(crate::replay::ReplayError::Client)?;
            crate::replay::partition_count(&consumer, &topic, Duration::from_secs(10))
        })
    };
    match count().await.map_err(|e| e.to_string())? {
        Ok(n) => return Ok(n),
        Err(crate::replay::ReplayError::NoTopic { .. }) => {}
        Err(e) => return Err(e.to_string()),
    }
    let admin: AdminClient<FleetContext> =
        settings.admin(&format!("{client_id}-admin")).create_with_context(FleetContext::default()).map_err(|e| e.to_string())?;
    let mut new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(replication));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    // A broker that never answers (librdkafka's mock cluster has no CreateTopics) is retried with
    // a warning rather than waited for.
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))).request_timeout(Some(Duration::from_secs(15)));
    let results = admin.create_topics([&new], &opts).await.map_err(|e| e.to_string())?;
    for r in results {
        match r {
            Ok(_) => tracing::info!(topic, partitions, replication, configs = ?configs, "created topic"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(format!("create topic {name}: {code}")),
        }
    }
    count().await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())
}
