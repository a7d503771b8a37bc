//! Configuration of `core-publisher`: flags with environment-variable fallbacks.

use clap::Parser;
use shared::fleet_config::{FleetFile, Renamed};
use shared::kafka::KafkaSettings;
use shared::namespaces::Namespaces;
use shared::CanvasDims;
use std::net::SocketAddr;
use std::time::Duration;

/// Settings under a new name whose old one still works (with a note), in the environment and in
/// `fleet.toml`.
pub const RENAMED: &[Renamed] = &[Renamed { old: "MAX_CANVASES", new: "MAX_CHANNELS" }];

/// `core-publisher` settings. Every flag can also be given by the environment variable named in
/// its help, or in `fleet.toml` ([`Config::load`]).
#[derive(Debug, Clone, Parser)]
#[command(name = "core-publisher", version, about = "Versions channel publications and publishes them to Kafka")]
pub struct Config {
    /// The fleet's file: its namespaces, and settings (`[fleet]`, `[publisher]`) for what no flag
    /// or environment variable sets (docs/configuration.md).
    #[arg(long = "config", env = "FLEET_CONFIG", value_name = "FILE")]
    pub fleet_config: Option<std::path::PathBuf>,
    /// What `fleet.toml` said ([`Config::load`]; empty otherwise).
    #[arg(skip)]
    pub fleet: FleetFile,
    /// Address to serve HTTP on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Client tokens for publishing (`Authorization: Bearer <jwt>`).
    #[command(flatten)]
    pub client_tokens: shared::client_token::ClientTokenSettings,
    /// Kafka `bootstrap.servers`.
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "localhost:9092")]
    pub kafka_bootstrap: String,
    /// Topic of pixel events.
    #[arg(long, env = "KAFKA_TOPIC", default_value = shared::kafka::DEFAULT_TOPIC)]
    pub topic: String,
    /// Partitions to create the topic with when it does not exist (an existing topic keeps its own
    /// count, which is then what the partitioner divides by).
    #[arg(long, env = "TOPIC_PARTITIONS", default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub partitions: u32,
    /// Replication factor for a topic this process creates.
    #[arg(long, env = "TOPIC_REPLICATION_FACTOR", default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=32))]
    pub replication_factor: i32,
    /// Canvas width in pixels of a `pixels` namespace that sets none (the default namespace,
    /// without `fleet.toml`); at most 1024: a snapshot of the largest canvas must fit the snapshot
    /// topic's `max.message.bytes`.
    #[arg(long, env = "CANVAS_WIDTH", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub canvas_width: u32,
    /// Canvas height in pixels.
    #[arg(long, env = "CANVAS_HEIGHT", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub canvas_height: u32,
    /// How long a transaction's records may wait for their acknowledgement
    /// (`message.timeout.ms`; the transaction is aborted after it), and how long its commit is
    /// retried before the outcome is reported unknown, ms. A publish is answered within about
    /// twice this (plus a second).
    #[arg(long, env = "PRODUCE_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(100..=300_000))]
    pub produce_timeout_ms: u64,
    /// Base of the transactional ids: the shared writer's producers are `<this>-shared-0` and
    /// `-1`, an isolated partition `p`'s is `<this>-p<p>`. Every publisher process of a deployment
    /// must use the same one, so that a new process fences the old one. Default:
    /// `core-publisher-<KAFKA_TOPIC>`.
    #[arg(long, env = "TRANSACTIONAL_ID")]
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`: how long the transaction coordinator lets a transaction stay open
    /// before aborting it on its own (a publisher killed or paused mid-transaction), ms. Must be
    /// above the longest a transaction stays open (twice `PRODUCE_TIMEOUT_MS` + 1,120 ms) and at
    /// most the brokers' `transaction.max.timeout.ms` (900000 by default).
    #[arg(long, env = "TRANSACTION_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1_000..=900_000))]
    pub transaction_timeout_ms: u64,
    /// A shared transaction whose records are not all acknowledged after this many ms is aborted,
    /// and the partitions still waiting are written in transactions of their own until they are
    /// fast again (so one stalled partition holds the others back at most this long).
    #[arg(long, env = "PARTITION_STALL_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(10..=300_000))]
    pub partition_stall_ms: u64,
    /// How long the events topic keeps records when this process creates it (`retention.ms`),
    /// ms; -1 keeps them for ever. Readers never need a record older than the snapshots'
    /// checkpoints, so it must be far above `SNAPSHOT_EVERY_MS` (at least ten times).
    #[arg(long, env = "RETENTION_MS", default_value_t = 604_800_000, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    pub retention_ms: i64,
    /// Topic of channel snapshots and checkpoints (compacted, created beside the events topic).
    /// Default: `<KAFKA_TOPIC>-snapshots`.
    #[arg(long, env = "SNAPSHOT_TOPIC")]
    pub snapshot_topic: Option<String>,
    /// Channels the publisher holds at most: a publish that would create one more is refused
    /// (409 `channel_limit`). Every node holds every channel too (standby), so this bounds the
    /// fleet's memory: about channels × (width × height × 3 + the nodes' `RECENT_BYTES`). Its old
    /// name, `MAX_CANVASES` (`--max-canvases`), still works.
    #[arg(long, alias = "max-canvases", env = "MAX_CHANNELS", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub max_channels: u64,
    /// A channel is snapshotted once this many versions passed since its last snapshot...
    #[arg(long, env = "SNAPSHOT_EVERY_VERSIONS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_every_versions: u64,
    /// ...or once its oldest event not in a snapshot is this old, ms...
    #[arg(long, env = "SNAPSHOT_EVERY_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    pub snapshot_every_ms: u64,
    /// ...or once this many offsets of its partition (records and transaction markers) follow
    /// that event, whichever comes first: a recovering reader replays at most about this much of
    /// any partition, however fast it is written.
    #[arg(long, env = "SNAPSHOT_EVERY_RECORDS", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_every_records: u64,
    /// How far back, ms, a restarted publisher reads the log for `Idempotency-Key`s: a retry
    /// within this window after a restart is still applied once.
    #[arg(long, env = "IDEMPOTENCY_WINDOW_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(0..=604_800_000))]
    pub idempotency_window_ms: u64,
    /// Idempotency keys with an outcome the publisher holds at most: each is kept for
    /// `IDEMPOTENCY_WINDOW_MS`, and while this many are all younger than it, a publish with a new
    /// key is refused (503 `idempotency_store_full`) rather than a key forgotten: keep it above the
    /// keyed publishes per second times the window in seconds.
    #[arg(long, env = "IDEMPOTENCY_KEYS_MAX", default_value_t = crate::versions::KEYS_REMEMBERED as u64, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub idempotency_keys_max: u64,
    /// librdkafka `debug` contexts for the publisher's Kafka clients (e.g. `eos,broker`), to
    /// diagnose them: their lines are `tracing` debug events of target `kafka`, so also set
    /// `RUST_LOG=info,kafka=debug`. Empty: off.
    #[arg(long, env = "KAFKA_DEBUG", default_value = "")]
    pub kafka_debug: String,
    #[command(flatten)]
    pub serve: shared::serve::ServeArgs,
    #[command(flatten)]
    pub rate: shared::rate_limit::RateArgs,
    /// Start as a standby: follow the log without writing (writes and `/ready` get 503
    /// `standby`) until the gateway leader promotes it (`POST /admin/promote`), then fence the
    /// active publisher and take over. Give every publisher of a deployment the same topic and
    /// transactional id.
    #[arg(long, env = "PUBLISHER_STANDBY")]
    pub standby: bool,
    /// Token `POST /admin/promote` requires as `Authorization: Bearer <token>`; the gateway sends
    /// its own `ADMIN_TOKEN`, so set the same. Unset or empty: the admin route is not on
    /// `LISTEN_ADDR` but on `ADMIN_LISTEN_ADDR`.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Loopback address of the admin listener, served only by a standby when no `ADMIN_TOKEN` is
    /// set.
    #[arg(long = "admin-listen", env = "ADMIN_LISTEN_ADDR", default_value = "127.0.0.1:9080")]
    pub admin_listen: SocketAddr,
    /// The gateways' control topic: a standby reads the leaders' claims from it and takes a
    /// promotion only under the latest leader's fencing token (empty: not read; then only a
    /// request without a token promotes, as from a standalone gateway).
    #[arg(long, env = "CONTROL_TOPIC", default_value = shared::control::DEFAULT_CONTROL_TOPIC)]
    pub control_topic: String,
    /// Kafka topics of your own whose records the publisher publishes, exactly once, each to a
    /// namespace: `topic=namespace` pairs, comma-separated (`orders=scores,chat-in=chat`; `topic`
    /// alone: the default namespace). A record's key (or `INPUT_CHANNEL_HEADER`) is its channel
    /// id, in the topic's namespace; its value, JSON, the data. Empty: none.
    #[arg(long, env = "INPUT_TOPICS", default_value = "")]
    pub input_topics: String,
    /// Take an input record's channel id from this header instead of its key.
    #[arg(long, env = "INPUT_CHANNEL_HEADER")]
    pub input_channel_header: Option<String>,
    /// The consumer group of the input topics, whose offsets the publisher's transactions commit
    /// (the same in every publisher process of a deployment). Default: `<TRANSACTIONAL_ID>-input`.
    #[arg(long, env = "INPUT_GROUP")]
    pub input_group: Option<String>,
    /// Where the input group starts a partition it has no committed offset for: `earliest` (the
    /// topic's whole history becomes publications) or `latest` (what is written from now on).
    #[arg(long, env = "INPUT_OFFSET_RESET", default_value = "earliest", value_parser = ["earliest", "latest"])]
    pub input_offset_reset: String,
    /// Load and print the configuration, then exit 0 (exit 2 on a bad value).
    #[arg(long)]
    pub check_config: bool,
}

impl Config {
    /// This process's configuration: flags over environment variables over `fleet.toml`
    /// (`--config`, `FLEET_CONFIG`) over the defaults. Call it first in `main`: it may set
    /// environment variables.
    pub fn load() -> Self {
        let (mut config, fleet) = shared::fleet_config::load::<Self>("core-publisher", "publisher", RENAMED);
        config.fleet = fleet;
        config
    }

    /// The canvas size of the default namespace when it is `pixels`, else `CANVAS_WIDTH` ×
    /// `CANVAS_HEIGHT`.
    pub fn dims(&self) -> CanvasDims {
        self.namespaces().default_namespace().dims().unwrap_or_else(|| self.canvas_dims())
    }

    /// `CANVAS_WIDTH` × `CANVAS_HEIGHT`: the size of a `pixels` namespace that sets none.
    pub fn canvas_dims(&self) -> CanvasDims {
        CanvasDims { width: self.canvas_width, height: self.canvas_height }
    }

    /// The namespaces (`fleet.toml`'s, or the default namespace alone as `pixels`).
    pub fn namespaces(&self) -> Namespaces {
        self.fleet.namespaces_or_pixels(self.canvas_dims())
    }

    /// Kafka client settings.
    pub fn kafka(&self) -> KafkaSettings {
        KafkaSettings { debug: Some(self.kafka_debug.clone()), ..KafkaSettings::new(&self.kafka_bootstrap).with_env_overrides() }
    }

    /// Every problem of this configuration that clap's per-value checks cannot see (empty).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.kafka_bootstrap.trim().is_empty() {
            p.push("KAFKA_BOOTSTRAP (--kafka-bootstrap) is empty".to_owned());
        }
        p.extend(shared::kafka::topic_name_problem(&self.topic).map(|e| format!("KAFKA_TOPIC (--topic): {e}")));
        if let Some(problem) = transactional_id_problem(&self.transactional_id()) {
            p.push(format!("TRANSACTIONAL_ID (--transactional-id): {problem}"));
        }
        if self.partition_stall_ms >= self.produce_timeout_ms {
            p.push(format!(
                "PARTITION_STALL_MS (--partition-stall-ms) {} must be below PRODUCE_TIMEOUT_MS ({}): a stalled partition is \
                 isolated before its records time out",
                self.partition_stall_ms, self.produce_timeout_ms
            ));
        }
        let longest = crate::txn::longest_open(self.produce_timeout()).as_millis() as u64;
        if self.transaction_timeout_ms <= longest {
            p.push(format!(
                "TRANSACTION_TIMEOUT_MS (--transaction-timeout-ms) {} must be above {longest} ms, the longest a transaction stays \
                 open with PRODUCE_TIMEOUT_MS {} (its deliveries until PRODUCE_TIMEOUT_MS + 1 s, then a commit or abort for up to \
                 PRODUCE_TIMEOUT_MS more): the coordinator would abort it first",
                self.transaction_timeout_ms, self.produce_timeout_ms
            ));
        }
        if self.retention_ms >= 0 && (self.retention_ms as u64) < 10 * self.snapshot_every_ms {
            p.push(format!(
                "RETENTION_MS (--retention-ms) {} must be at least ten times SNAPSHOT_EVERY_MS ({}): records retention deletes \
                 must already be covered by snapshots",
                self.retention_ms, self.snapshot_every_ms
            ));
        }
        if let Some(t) = &self.snapshot_topic {
            p.extend(shared::kafka::topic_name_problem(t).map(|e| format!("SNAPSHOT_TOPIC (--snapshot-topic): {e}")));
        }
        p.extend(self.client_tokens.problems());
        if self.admin_token().is_none() {
            p.extend(shared::auth::admin_listen_problem(&self.admin_listen));
        }
        p.extend(shared::auth::demo_token_problem(self.admin_token.as_deref(), &self.listen));
        p.extend(self.fleet.problems(self.canvas_dims()));
        match crate::input::config::parse_topics(&self.input_topics) {
            Ok(topics) => {
                let own = [self.topic.as_str(), &self.snapshot_topic(), self.control_topic.as_str()];
                p.extend(crate::input::config::problems(&topics, &self.namespaces(), &own));
            }
            Err(e) => p.push(format!("INPUT_TOPICS (--input-topics): {e}")),
        }
        if self.input_channel_header.as_deref().is_some_and(|h| h.trim().is_empty()) {
            p.push("INPUT_CHANNEL_HEADER (--input-channel-header) is empty: unset it to take the channel from the key".to_owned());
        }
        if self.input_group.as_deref().is_some_and(|g| g.trim().is_empty()) {
            p.push("INPUT_GROUP (--input-group) is empty".to_owned());
        }
        p
    }

    /// The input's settings, when `INPUT_TOPICS` names any (and parses: see [`Config::problems`]).
    pub fn input(&self) -> Option<crate::input::config::InputSettings> {
        use crate::input::config::{InputSettings, OffsetReset};
        let topics = crate::input::config::parse_topics(&self.input_topics).ok().filter(|t| !t.is_empty())?;
        let group = self.input_group();
        Some(InputSettings {
            topics,
            channel_header: self.input_channel_header.clone(),
            instance: format!("{group}-publisher"),
            group,
            offset_reset: if self.input_offset_reset == "latest" { OffsetReset::Latest } else { OffsetReset::Earliest },
        })
    }

    /// The input's consumer group ([`Config::input_group`]'s default: `<TRANSACTIONAL_ID>-input`).
    pub fn input_group(&self) -> String {
        self.input_group.clone().unwrap_or_else(|| format!("{}-input", self.transactional_id()))
    }

    /// The admin token, when one is set (not empty).
    pub fn admin_token(&self) -> Option<shared::auth::AdminToken> {
        shared::auth::AdminToken::from_setting(self.admin_token.as_deref())
    }

    /// The snapshot topic.
    pub fn snapshot_topic(&self) -> String {
        self.snapshot_topic.clone().unwrap_or_else(|| shared::snapshot::topic_for(&self.topic))
    }

    /// When channels are snapshotted.
    pub fn snapshot_policy(&self) -> crate::snapshots::SnapshotPolicy {
        crate::snapshots::SnapshotPolicy {
            every_versions: self.snapshot_every_versions,
            every: Duration::from_millis(self.snapshot_every_ms),
            every_records: self.snapshot_every_records,
            ..Default::default()
        }
    }

    /// The base of the transactional ids (see [`Config::transactional_id`]).
    pub fn transactional_id(&self) -> String {
        self.transactional_id.clone().unwrap_or_else(|| format!("core-publisher-{}", self.topic))
    }

    /// `partition_stall_ms` as a duration.
    pub fn partition_stall(&self) -> Duration {
        Duration::from_millis(self.partition_stall_ms)
    }

    /// `transaction_timeout_ms` as a duration.
    pub fn transaction_timeout(&self) -> Duration {
        Duration::from_millis(self.transaction_timeout_ms)
    }

    /// How long a caller waits for its transaction's answer: the transaction's deliveries and its
    /// commit are each bounded by the produce timeout; one more second for the queue.
    pub fn answer_timeout(&self) -> Duration {
        2 * self.produce_timeout() + Duration::from_secs(1)
    }

    /// The effective configuration, one `VARIABLE=value` per line.
    pub fn describe(&self) -> String {
        let mut pairs = vec![
            ("LISTEN_ADDR", self.listen.to_string()),
            ("KAFKA_BOOTSTRAP", self.kafka_bootstrap.clone()),
            ("KAFKA_TOPIC", self.topic.clone()),
            ("TOPIC_PARTITIONS", self.partitions.to_string()),
            ("TOPIC_REPLICATION_FACTOR", self.replication_factor.to_string()),
            ("CANVAS_WIDTH", self.canvas_width.to_string()),
            ("CANVAS_HEIGHT", self.canvas_height.to_string()),
            ("PRODUCE_TIMEOUT_MS", self.produce_timeout_ms.to_string()),
            ("TRANSACTIONAL_ID", self.transactional_id()),
            ("TRANSACTION_TIMEOUT_MS", self.transaction_timeout_ms.to_string()),
            ("PARTITION_STALL_MS", self.partition_stall_ms.to_string()),
            ("RETENTION_MS", self.retention_ms.to_string()),
            ("SNAPSHOT_TOPIC", self.snapshot_topic()),
            ("MAX_CHANNELS", self.max_channels.to_string()),
            ("SNAPSHOT_EVERY_VERSIONS", self.snapshot_every_versions.to_string()),
            ("SNAPSHOT_EVERY_MS", self.snapshot_every_ms.to_string()),
            ("SNAPSHOT_EVERY_RECORDS", self.snapshot_every_records.to_string()),
            ("IDEMPOTENCY_WINDOW_MS", self.idempotency_window_ms.to_string()),
            ("IDEMPOTENCY_KEYS_MAX", self.idempotency_keys_max.to_string()),
            ("KAFKA_DEBUG", self.kafka_debug.clone()),
            ("PUBLISHER_STANDBY", self.standby.to_string()),
            ("ADMIN_TOKEN", if self.admin_token().is_some() { "<set>".to_owned() } else { String::new() }),
            ("ADMIN_LISTEN_ADDR", if self.admin_token().is_some() { "(not used: ADMIN_TOKEN is set)".to_owned() } else { self.admin_listen.to_string() }),
            ("CONTROL_TOPIC", self.control_topic.clone()),
            ("INPUT_TOPICS", crate::input::config::parse_topics(&self.input_topics).map_or_else(|e| e, |t| crate::input::config::describe_topics(&t))),
            ("INPUT_CHANNEL_HEADER", self.input_channel_header.clone().unwrap_or_default()),
            ("INPUT_GROUP", self.input_group()),
            ("INPUT_GROUP_INSTANCE_ID", format!("{}-publisher", self.input_group())),
            ("INPUT_OFFSET_RESET", self.input_offset_reset.clone()),
            ("KAFKA_CLIENT_*", shared::kafka::describe_overrides(&shared::kafka::client_overrides_from_env())),
            ("HEADER_READ_TIMEOUT_MS", self.serve.header_read_timeout_ms.to_string()),
            ("BODY_READ_TIMEOUT_MS", self.serve.body_read_timeout_ms.to_string()),
            ("MAX_CONNECTIONS", self.serve.max_connections.to_string()),
        ];
        pairs.extend(self.rate.env_pairs());
        pairs.extend(self.client_tokens.describe());
        format!("{}\n{}", shared::telemetry::env_lines(&pairs), self.fleet.describe(self.canvas_dims()))
    }

    /// `produce_timeout_ms` as a duration.
    pub fn produce_timeout(&self) -> Duration {
        Duration::from_millis(self.produce_timeout_ms)
    }
}

/// Why `id` cannot be a transactional id base (non-empty, at most 200 characters of visible ASCII:
/// Kafka stores it as a string key of `__transaction_state`), or `None`.
fn transactional_id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() || id.len() > 200 {
        return Some("must be 1 to 200 characters");
    }
    if !id.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Some("may only contain visible ASCII characters");
    }
    None
}

impl shared::shutdown::ServiceConfig for Config {
    fn problems(&self) -> Vec<String> {
        Config::problems(self)
    }
    fn describe(&self) -> String {
        Config::describe(self)
    }
    fn check_only(&self) -> bool {
        self.check_config
    }
    fn listen(&self) -> std::net::SocketAddr {
        self.listen
    }
    fn notes(&self) -> Vec<String> {
        self.fleet.notes.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Config {
        Config::try_parse_from(std::iter::once("core-publisher").chain(args.iter().copied())).expect("parses")
    }

    #[test]
    fn the_transactional_id_comes_from_the_topic_unless_set() {
        assert_eq!(parse(&["--topic", "t1"]).transactional_id(), "core-publisher-t1");
        assert_eq!(parse(&["--topic", "t1", "--transactional-id", "fleet-a"]).transactional_id(), "fleet-a");
        assert!(parse(&[]).problems().is_empty());
    }

    #[test]
    fn a_transaction_timeout_not_above_the_longest_transaction_is_refused() {
        let p = parse(&["--produce-timeout-ms", "5000", "--transaction-timeout-ms", "10000"]).problems();
        assert!(p.iter().any(|m| m.contains("TRANSACTION_TIMEOUT_MS")), "{p:?}");
        assert!(parse(&["--produce-timeout-ms", "3000", "--transaction-timeout-ms", "10000"]).problems().is_empty());
        // The real bound: deliveries until the produce timeout + 1 s, then a commit (or abort)
        // retried for up to one more produce timeout, its last call at least 100 ms, after at
        // most 20 ms of settling the reports: 2 x 5000 + 1120 ms.
        for (txn, ok) in [(10_001, false), (11_120, false), (11_121, true)] {
            let p = parse(&["--produce-timeout-ms", "5000", "--transaction-timeout-ms", &txn.to_string()]).problems();
            assert_eq!(p.is_empty(), ok, "{txn}: {p:?}");
        }
        let p = parse(&["--transactional-id", "has space"]).problems();
        assert!(p.iter().any(|m| m.contains("TRANSACTIONAL_ID")), "{p:?}");
    }

    #[test]
    fn a_retention_not_far_above_the_snapshot_interval_is_refused() {
        let p = parse(&["--retention-ms", "300000", "--snapshot-every-ms", "60000"]).problems();
        assert!(p.iter().any(|m| m.contains("RETENTION_MS")), "{p:?}");
        assert!(parse(&["--retention-ms", "-1"]).problems().is_empty());
        assert_eq!(parse(&["--topic", "t"]).snapshot_topic(), "t-snapshots");
        assert_eq!(parse(&[]).snapshot_policy().every_records, 100_000);
        assert_eq!(parse(&["--snapshot-every-records", "5000"]).snapshot_policy().every_records, 5_000);
    }

    #[test]
    fn the_fleet_file_sets_the_namespaces_and_joins_the_problems() {
        use clap::CommandFactory;
        let reader = shared::fleet_config::Reader::new("core-publisher", "publisher", &Config::command(), RENAMED);
        let file = |text: &str| FleetFile::parse(text, std::path::Path::new("fleet.toml"), &reader);
        let mut c = parse(&["--canvas-width", "32"]);
        assert_eq!(c.dims(), CanvasDims { width: 32, height: 64 }, "without a file: CANVAS_WIDTH x CANVAS_HEIGHT");
        assert_eq!(c.namespaces().fingerprint(), Namespaces::pixels_only(c.dims()).fingerprint());
        c.fleet = file("[default]\nmodel = \"pixels\"\nwidth = 16\n[namespaces.s]\nmodel = \"json\"\n");
        assert_eq!(c.dims(), CanvasDims { width: 16, height: 64 }, "the default namespace's size, CANVAS_HEIGHT where it sets none");
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        let text = c.describe();
        assert!(text.lines().any(|l| l == format!("NAMESPACES_FINGERPRINT={}", c.namespaces().fingerprint())), "{text}");
        assert!(text.contains("[namespaces.s]\nmodel = \"json\"\npatch = \"merge\"\n"), "{text}");
        c.fleet = file("[namespaces.s]\nmodel = \"json\"\nmax_data_bytes = 0\n[publisher]\nkafka_topicc = \"t\"\n");
        let p = c.problems();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("fleet.toml:5 [publisher]: kafka_topicc is not a setting of core-publisher"), "{p:?}");
        assert!(p[1].starts_with("fleet.toml: [namespaces.s] max_data_bytes 0"), "{p:?}");
    }

    #[test]
    fn the_input_settings_are_checked_and_printed() {
        assert!(parse(&[]).input().is_none(), "no INPUT_TOPICS: no input");
        let c = parse(&["--topic", "ev", "--input-topics", "orders,clicks="]);
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        let input = c.input().expect("an input");
        assert_eq!(input.topic_names(), vec!["orders", "clicks"]);
        assert_eq!((input.group.as_str(), input.instance.as_str()), ("core-publisher-ev-input", "core-publisher-ev-input-publisher"));
        assert_eq!(input.offset_reset, crate::input::config::OffsetReset::Earliest, "a connector's users expect the topic's history");
        let text = c.describe();
        for line in ["INPUT_TOPICS=orders=,clicks=", "INPUT_GROUP=core-publisher-ev-input", "INPUT_OFFSET_RESET=earliest", "INPUT_CHANNEL_HEADER="] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        let c = parse(&["--input-topics", "o=scores", "--input-group", "g", "--input-offset-reset", "latest", "--input-channel-header", "channel"]);
        let p = c.problems();
        assert!(p.len() == 1 && p[0].contains("o=scores") && p[0].contains("not configured"), "a namespace fleet.toml does not have: {p:?}");
        assert_eq!(c.input().unwrap().channel_header.as_deref(), Some("channel"));
        assert_eq!(c.input().unwrap().offset_reset, crate::input::config::OffsetReset::Latest);
        let p = parse(&["--topic", "ev", "--input-topics", "ev"]).problems();
        assert!(p.iter().any(|m| m.contains("read back what it writes")), "{p:?}");
        assert!(Config::try_parse_from(["core-publisher", "--input-offset-reset", "none"]).is_err());
    }

    #[test]
    fn max_channels_was_max_canvases() {
        assert_eq!(parse(&[]).max_channels, 100_000);
        assert_eq!(parse(&["--max-canvases", "7"]).max_channels, 7, "the old flag");
        assert!(parse(&["--max-channels", "9"]).describe().lines().any(|l| l == "MAX_CHANNELS=9"));
    }

    #[test]
    fn the_idempotency_key_capacity_is_a_setting() {
        assert_eq!(parse(&[]).idempotency_keys_max, 100_000);
        assert_eq!(parse(&["--idempotency-keys-max", "5000"]).idempotency_keys_max, 5000);
        assert!(parse(&["--idempotency-keys-max", "5000"]).describe().contains("IDEMPOTENCY_KEYS_MAX=5000"));
        let refused = |v: &str| Config::try_parse_from(["core-publisher", "--idempotency-keys-max", v]).is_err();
        assert!(refused("0") && refused("100000001") && refused("-1"));
    }
}
