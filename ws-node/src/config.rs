//! Configuration of a `ws-node`: flags with environment-variable fallbacks.

use clap::Parser;
use shared::fleet_config::FleetFile;
use shared::kafka::KafkaSettings;
use shared::namespaces::Namespaces;
use shared::CanvasDims;
use std::net::SocketAddr;
use std::time::Duration;

/// `ws-node` settings. Every flag can also be given by the environment variable named in its help,
/// or in `fleet.toml` ([`Config::load`]).
#[derive(Debug, Clone, Parser)]
#[command(name = "ws-node", version, about = "WebSocket server of the channel fleet")]
pub struct Config {
    /// The fleet's file: its namespaces, and settings (`[fleet]`, `[node]`) for what no flag or
    /// environment variable sets (docs/configuration.md).
    #[arg(long = "config", env = "FLEET_CONFIG", value_name = "FILE")]
    pub fleet_config: Option<std::path::PathBuf>,
    /// What `fleet.toml` said ([`Config::load`]; empty otherwise).
    #[arg(skip)]
    pub fleet: FleetFile,
    /// This node's id, as the gateway knows it (e.g. `ws-1`).
    #[arg(long, env = "NODE_ID")]
    pub node_id: String,
    /// Address to serve HTTP and WebSocket on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8081")]
    pub listen: SocketAddr,
    /// Token the admin routes (`POST /admin/start-recovery`, `/admin/drain`) require as
    /// `Authorization: Bearer <token>`; the gateway sends its own `ADMIN_TOKEN`, so set the same.
    /// Unset or empty: the admin routes are not on `LISTEN_ADDR` but on `ADMIN_LISTEN_ADDR`.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Loopback address of the admin listener, served only when no `ADMIN_TOKEN` is set.
    #[arg(long = "admin-listen", env = "ADMIN_LISTEN_ADDR", default_value = "127.0.0.1:9081")]
    pub admin_listen: SocketAddr,
    /// Client tokens for `/ws` (`token=` query parameter).
    #[command(flatten)]
    pub client_tokens: shared::client_token::ClientTokenSettings,
    /// Kafka `bootstrap.servers`.
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "localhost:9092")]
    pub kafka_bootstrap: String,
    /// Topic of pixel events.
    #[arg(long, env = "KAFKA_TOPIC", default_value = shared::kafka::DEFAULT_TOPIC)]
    pub topic: String,
    /// The gateways' control topic: the node reads the leaders' claims from it, acts only on the
    /// latest leader's fencing token, and once a leader has claimed refuses admin requests
    /// without one on its public port (empty: not read; a token cannot be checked then, and
    /// requests without one act).
    #[arg(long, env = "CONTROL_TOPIC", default_value = shared::control::DEFAULT_CONTROL_TOPIC)]
    pub control_topic: String,
    /// Topic of channel snapshots and checkpoints the publisher writes (default
    /// `<KAFKA_TOPIC>-snapshots`): recovery starts from them.
    #[arg(long, env = "SNAPSHOT_TOPIC")]
    pub snapshot_topic: Option<String>,
    /// Consumer group of the live consumers, shared by every node.
    #[arg(long, env = "BROADCAST_GROUP", default_value = shared::kafka::DEFAULT_BROADCAST_GROUP)]
    pub broadcast_group: String,
    /// Consumer group of this node's catch-up consumer (default `ws-catchup-<node id>`).
    #[arg(long, env = "CATCHUP_GROUP")]
    pub catchup_group: Option<String>,
    /// Kafka `session.timeout.ms` of the broadcast consumer, ms (broker minimum is 6000 by default).
    #[arg(long, env = "KAFKA_SESSION_TIMEOUT_MS", default_value_t = 6000, value_parser = clap::value_parser!(u64).range(1000..=300_000))]
    pub session_timeout_ms: u64,
    /// Kafka `heartbeat.interval.ms` of the broadcast consumer, ms. A member learns that the group
    /// rebalances (another node joined or left) with its next heartbeat, so this bounds how long
    /// partitions wait for their new owner after a graceful stop or a failback (measured with 1,000
    /// clients: SIGTERM → every client receiving 0.8–2.1 s with 1000, 0.4–1.9 s with 250).
    #[arg(long, env = "KAFKA_HEARTBEAT_INTERVAL_MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub heartbeat_interval_ms: u64,
    /// Kafka `max.poll.interval.ms` of the broadcast consumer, ms: how long a node whose consumer
    /// stopped polling keeps its partitions before librdkafka leaves the group for it (librdkafka
    /// heartbeats from its own thread, so the session timeout does not see a stuck poll). At
    /// least `KAFKA_SESSION_TIMEOUT_MS`.
    #[arg(long, env = "KAFKA_MAX_POLL_INTERVAL_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1000..=3_600_000))]
    pub max_poll_interval_ms: u64,
    /// A ready node whose broadcast consumer has not returned from a poll for this long, or one
    /// of whose owned partitions has records waiting and a position that has not moved for this
    /// long, reports DEGRADED in `/health` (and is not ready), ms.
    #[arg(long, env = "STALL_AFTER_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1000..=600_000))]
    pub stall_after_ms: u64,
    /// Canvas width in pixels of a `pixels` namespace that sets none (the default namespace,
    /// without `fleet.toml`); must match the publisher's.
    #[arg(long, env = "CANVAS_WIDTH", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub canvas_width: u32,
    /// Canvas height in pixels (must match the publisher's).
    #[arg(long, env = "CANVAS_HEIGHT", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub canvas_height: u32,
    /// Recent publications kept per channel, so resumes are served as publications (publications).
    #[arg(long, env = "RECENT_EVENTS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub recent_events: u64,
    /// Bytes of recent publication frames kept per channel, besides `RECENT_EVENTS` (whichever is
    /// reached first bounds the window; the newest publication is always kept). A node's memory
    /// for windows is at most channels × this.
    #[arg(long, env = "RECENT_BYTES", default_value_t = 262_144, value_parser = clap::value_parser!(u64).range(1..=1_073_741_824))]
    pub recent_bytes: u64,
    /// Frames a session may have queued before it is closed as too slow (1013) (frames).
    #[arg(long, env = "SESSION_QUEUE", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(8..=1_000_000))]
    pub session_queue: u64,
    /// How long a handshake whose `since` is ahead of this node's state waits for the state to
    /// catch up before it is refused with 503, ms.
    #[arg(long, env = "BEHIND_WAIT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub behind_wait_ms: u64,
    /// Grace period of the hand-over when Kafka revokes partitions from this node, ms.
    #[arg(long, env = "REVOKE_GRACE_MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub revoke_grace_ms: u64,
    /// The ceiling of how long this node keeps serving the sessions of partitions a cooperative
    /// rebalance moved to another node (reading them from the log) while the new owner starts, ms.
    /// They are handed over when a scoped drain asks (the gateway's failback, once the new owner
    /// serves) or at this ceiling, which must stay well above a rebalance's rounds (about 5 s
    /// apart on the embedded broker): a hold that runs out first leaves the clients with no owner.
    /// 0 hands them over at once, in the rebalance callback.
    #[arg(long, env = "REVOKE_HOLD_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub revoke_hold_ms: u64,
    /// How often a serving node checks the events topic's ID (besides whenever a reader sees an
    /// offset out of range): a changed ID is a topic deleted and created again, whose history the
    /// node must recover before it serves again, ms.
    #[arg(long, env = "HISTORY_CHECK_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub history_check_ms: u64,
    /// How often a node with incomplete channels (versions skipped: their records deleted with no
    /// snapshot covering them) reads their newest snapshots to heal them, ms.
    #[arg(long, env = "HEAL_EVERY_MS", default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub heal_every_ms: u64,
    /// Keep every partition's state current, not only the owned ones (a group-less standby reader;
    /// see the `standby` module): a takeover then starts at the partitions' head. With it every
    /// node reads the whole topic; `false` reads only what the node owns, and a takeover far
    /// behind starts from the snapshots.
    #[arg(long, env = "STANDBY", default_value_t = true, action = clap::ArgAction::Set)]
    pub standby: bool,
    /// `retry_after_ms` of the reconnect notices this node sends, ms.
    #[arg(long, env = "RECONNECT_AFTER_MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub reconnect_after_ms: u64,
    /// Slow start: a hand-over spreads its reconnect notices' `retry_after_ms` over this much
    /// (at most half its grace period), so the node the sessions move to is not hit by all of them
    /// in the same instant, ms. 0: every notice says `RECONNECT_AFTER_MS`.
    #[arg(long, env = "RECONNECT_SPREAD_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub reconnect_spread_ms: u64,
    /// Interval of WebSocket pings to each client, ms; a client silent for three intervals is dropped.
    #[arg(long, env = "PING_INTERVAL_MS", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub ping_interval_ms: u64,
    /// How long a write to a client may block before the connection is dropped, ms.
    #[arg(long, env = "WRITE_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub write_timeout_ms: u64,
    /// Read buffer per WebSocket connection (bytes). tungstenite's default is 128 KiB, allocated up
    /// front, which costs over 1 GB at 10k connections.
    #[arg(long, env = "WS_READ_BUFFER", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(256..=1_048_576))]
    pub ws_read_buffer: u64,
    /// Write buffer per WebSocket connection before a flush (bytes).
    #[arg(long, env = "WS_WRITE_BUFFER", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    pub ws_write_buffer: u64,
    /// Largest message a client may send (bytes); larger is closed with 1009.
    #[arg(long, env = "WS_MAX_MESSAGE", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(128..=16_777_216))]
    pub ws_max_message: u64,
    /// Grace period of the drain done on SIGTERM before sessions are closed with 1001, ms.
    #[arg(long, env = "SHUTDOWN_GRACE_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub shutdown_grace_ms: u64,
    /// Most sessions this node serves at once (open sessions plus handshakes in progress). A full
    /// node refuses new handshakes with 503 `full` + Retry-After and never closes an open session
    /// to make room. The default is above the benchmark's largest level (10,000 connections to one
    /// node); a node needs one file descriptor per session, so keep it below the open-file limit.
    #[arg(long, env = "MAX_SESSIONS", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_sessions: u64,
    /// Origins (`scheme://host[:port]`, comma-separated; `*` for any) whose pages may open
    /// sessions on `/ws` straight to this node. A handshake without `Origin` (the gateway's
    /// upstream handshake, tools) is always accepted; a browser's with another origin gets 403
    /// `origin_not_allowed`. Default: none (browsers reach the fleet through the gateway, which
    /// checks their origin itself).
    #[arg(long, env = "ALLOWED_ORIGINS", default_value = "", value_parser = shared::origin::parse_allowed_origins)]
    pub allowed_origins: shared::origin::AllowedOrigins,
    #[command(flatten)]
    pub serve: shared::serve::ServeArgs,
    /// Load and print the configuration, then exit 0 (exit 2 on a bad value).
    #[arg(long)]
    pub check_config: bool,
}

impl Config {
    /// This process's configuration: flags over environment variables over `fleet.toml`
    /// (`--config`, `FLEET_CONFIG`) over the defaults. Call it first in `main`: it may set
    /// environment variables.
    pub fn load() -> Self {
        let (mut config, fleet) = shared::fleet_config::load::<Self>("ws-node", "node", &[]);
        config.fleet = fleet;
        config
    }

    /// A configuration with every default, for tests and the harness.
    pub fn for_node(node_id: &str, kafka_bootstrap: &str) -> Self {
        Config::parse_from(["ws-node", "--node-id", node_id, "--kafka-bootstrap", kafka_bootstrap])
    }

    /// Every problem of this configuration that clap's per-value checks cannot see (empty when
    /// it is valid), so all of them are reported at once.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.node_id.is_empty()
            || self.node_id.len() > 64
            || !self.node_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            p.push(format!("NODE_ID (--node-id) {:?} must be 1 to 64 characters of A-Z a-z 0-9 - _ .", self.node_id));
        }
        if self.kafka_bootstrap.trim().is_empty() {
            p.push("KAFKA_BOOTSTRAP (--kafka-bootstrap) is empty".to_owned());
        }
        p.extend(shared::kafka::topic_name_problem(&self.topic).map(|e| format!("KAFKA_TOPIC (--topic): {e}")));
        if self.broadcast_group.trim().is_empty() {
            p.push("BROADCAST_GROUP (--broadcast-group) is empty".to_owned());
        }
        if self.catchup_group() == self.broadcast_group {
            p.push("CATCHUP_GROUP must differ from BROADCAST_GROUP: replay must not join the live group".to_owned());
        }
        if self.heartbeat_interval_ms >= self.session_timeout_ms {
            p.push(format!(
                "KAFKA_HEARTBEAT_INTERVAL_MS ({}) must be below KAFKA_SESSION_TIMEOUT_MS ({}); Kafka suggests at most a third",
                self.heartbeat_interval_ms, self.session_timeout_ms
            ));
        }
        if self.max_poll_interval_ms < self.session_timeout_ms {
            p.push(format!(
                "KAFKA_MAX_POLL_INTERVAL_MS ({}) must be at least KAFKA_SESSION_TIMEOUT_MS ({})",
                self.max_poll_interval_ms, self.session_timeout_ms
            ));
        }
        if self.ws_write_buffer as usize >= 64 * 1024 + self.session_queue as usize * 256 {
            p.push("WS_WRITE_BUFFER must be smaller than the session's maximum write buffer".to_owned());
        }
        if self.admin_token().is_none() {
            p.extend(shared::auth::admin_listen_problem(&self.admin_listen));
        }
        p.extend(shared::auth::demo_token_problem(self.admin_token.as_deref(), &self.listen));
        p.extend(self.client_tokens.problems());
        p.extend(self.fleet.problems(self.canvas_dims()));
        p
    }

    /// The effective configuration, one `VARIABLE=value` per line (defaults resolved).
    pub fn describe(&self) -> String {
        let mut pairs = vec![
            ("NODE_ID", self.node_id.clone()),
            ("LISTEN_ADDR", self.listen.to_string()),
            ("ADMIN_TOKEN", if self.admin_token().is_some() { "<set>".to_owned() } else { String::new() }),
            ("ADMIN_LISTEN_ADDR", if self.admin_token().is_some() { "(not used: ADMIN_TOKEN is set)".to_owned() } else { self.admin_listen.to_string() }),
            ("KAFKA_BOOTSTRAP", self.kafka_bootstrap.clone()),
            ("KAFKA_TOPIC", self.topic.clone()),
            ("SNAPSHOT_TOPIC", self.snapshot_topic()),
            ("CONTROL_TOPIC", self.control_topic.clone()),
            ("BROADCAST_GROUP", self.broadcast_group.clone()),
            ("CATCHUP_GROUP", self.catchup_group()),
            ("KAFKA_SESSION_TIMEOUT_MS", self.session_timeout_ms.to_string()),
            ("KAFKA_HEARTBEAT_INTERVAL_MS", self.heartbeat_interval_ms.to_string()),
            ("KAFKA_MAX_POLL_INTERVAL_MS", self.max_poll_interval_ms.to_string()),
            ("STALL_AFTER_MS", self.stall_after_ms.to_string()),
            ("CANVAS_WIDTH", self.canvas_width.to_string()),
            ("CANVAS_HEIGHT", self.canvas_height.to_string()),
            ("RECENT_EVENTS", self.recent_events.to_string()),
            ("RECENT_BYTES", self.recent_bytes.to_string()),
            ("SESSION_QUEUE", self.session_queue.to_string()),
            ("MAX_SESSIONS", self.max_sessions.to_string()),
            ("BEHIND_WAIT_MS", self.behind_wait_ms.to_string()),
            ("REVOKE_GRACE_MS", self.revoke_grace_ms.to_string()),
            ("REVOKE_HOLD_MS", self.revoke_hold_ms.to_string()),
            ("HISTORY_CHECK_MS", self.history_check_ms.to_string()),
            ("HEAL_EVERY_MS", self.heal_every_ms.to_string()),
            ("STANDBY", self.standby.to_string()),
            ("RECONNECT_AFTER_MS", self.reconnect_after_ms.to_string()),
            ("RECONNECT_SPREAD_MS", self.reconnect_spread_ms.to_string()),
            ("WRITE_TIMEOUT_MS", self.write_timeout_ms.to_string()),
            ("PING_INTERVAL_MS", self.ping_interval_ms.to_string()),
            ("WS_READ_BUFFER", self.ws_read_buffer.to_string()),
            ("WS_WRITE_BUFFER", self.ws_write_buffer.to_string()),
            ("WS_MAX_MESSAGE", self.ws_max_message.to_string()),
            ("SHUTDOWN_GRACE_MS", self.shutdown_grace_ms.to_string()),
            ("KAFKA_CLIENT_*", shared::kafka::describe_overrides(&shared::kafka::client_overrides_from_env())),
            ("ALLOWED_ORIGINS", self.allowed_origins.to_string()),
            ("HEADER_READ_TIMEOUT_MS", self.serve.header_read_timeout_ms.to_string()),
            ("BODY_READ_TIMEOUT_MS", self.serve.body_read_timeout_ms.to_string()),
            ("MAX_CONNECTIONS", self.serve.max_connections.to_string()),
        ];
        pairs.extend(self.client_tokens.describe());
        format!("{}\n{}", shared::telemetry::env_lines(&pairs), self.fleet.describe(self.canvas_dims()))
    }

    /// The admin token, when one is set (non-empty).
    pub fn admin_token(&self) -> Option<shared::auth::AdminToken> {
        shared::auth::AdminToken::from_setting(self.admin_token.as_deref())
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

    /// How much of each channel's recent publications is kept.
    pub fn window(&self) -> crate::state::Window {
        crate::state::Window { events: self.recent_events as usize, bytes: self.recent_bytes as usize }
    }

    /// Kafka client settings.
    pub fn kafka(&self) -> KafkaSettings {
        let mut k = KafkaSettings::new(&self.kafka_bootstrap).with_env_overrides();
        k.session_timeout = Duration::from_millis(self.session_timeout_ms);
        k.heartbeat_interval = Duration::from_millis(self.heartbeat_interval_ms);
        k.max_poll_interval = Duration::from_millis(self.max_poll_interval_ms);
        k
    }

    /// The thresholds of the progress assessment (`/health`'s DEGRADED).
    pub fn progress(&self) -> crate::progress::Settings {
        crate::progress::Settings {
            stall_after: Duration::from_millis(self.stall_after_ms),
            session_timeout: Duration::from_millis(self.session_timeout_ms),
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms),
        }
    }

    /// The snapshot topic.
    pub fn snapshot_topic(&self) -> String {
        self.snapshot_topic.clone().unwrap_or_else(|| shared::snapshot::topic_for(&self.topic))
    }

    /// The catch-up consumer's group id.
    pub fn catchup_group(&self) -> String {
        self.catchup_group.clone().unwrap_or_else(|| format!("ws-catchup-{}", self.node_id))
    }

    /// `behind_wait_ms` as a duration.
    pub fn behind_wait(&self) -> Duration {
        Duration::from_millis(self.behind_wait_ms)
    }

    /// `revoke_grace_ms` as a duration.
    pub fn revoke_grace(&self) -> Duration {
        Duration::from_millis(self.revoke_grace_ms)
    }

    /// `revoke_hold_ms` as a duration.
    pub fn revoke_hold(&self) -> Duration {
        Duration::from_millis(self.revoke_hold_ms)
    }

    /// `write_timeout_ms` as a duration.
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms)
    }
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

    #[test]
    fn every_problem_is_reported_at_once() {
        let mut c = Config::for_node("ws-1", "localhost:9092");
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        c.node_id = "bad id!".into();
        c.heartbeat_interval_ms = 6000;
        c.topic = "no spaces".into();
        c.catchup_group = Some(c.broadcast_group.clone());
        let p = c.problems();
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p.iter().any(|m| m.contains("NODE_ID")));
        assert!(p.iter().any(|m| m.contains("HEARTBEAT")));
        assert!(p.iter().any(|m| m.contains("KAFKA_TOPIC")));
        assert!(p.iter().any(|m| m.contains("CATCHUP_GROUP")));
    }

    #[test]
    fn the_fleet_file_sets_the_namespaces_and_joins_the_problems() {
        use clap::CommandFactory;
        let reader = shared::fleet_config::Reader::new("ws-node", "node", &Config::command(), &[]);
        let file = |text: &str| FleetFile::parse(text, std::path::Path::new("fleet.toml"), &reader);
        let mut c = Config::for_node("ws-1", "k:9092");
        c.canvas_height = 8;
        assert_eq!(c.dims(), CanvasDims { width: 64, height: 8 }, "without a file: CANVAS_WIDTH x CANVAS_HEIGHT");
        c.fleet = file("[default]\nmodel = \"pixels\"\nwidth = 16\n[namespaces.chat]\nmodel = \"stream\"\n[node]\nrecent_events = 5\n");
        assert_eq!(c.dims(), CanvasDims { width: 16, height: 8 }, "the default namespace's size, CANVAS_HEIGHT where it sets none");
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        assert!(c.describe().lines().any(|l| l == format!("NAMESPACES_FINGERPRINT={}", c.namespaces().fingerprint())), "{}", c.describe());
        c.fleet = file("[namespaces.c]\nmodel = \"pixels\"\nwidth = 0\n[node]\nmax_channels = 3\n[publisher]\nmax_channels = 3\n");
        let p = c.problems();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("fleet.toml:5 [node]: max_channels is not a setting of ws-node"), "{p:?}");
        assert!(p[1].starts_with("fleet.toml: [namespaces.c] canvas size 0x8"), "{p:?}");
    }

    #[test]
    fn describe_resolves_the_catchup_group() {
        let c = Config::for_node("ws-7", "k:9092");
        assert!(c.describe().lines().any(|l| l == "CATCHUP_GROUP=ws-catchup-ws-7"));
    }
}
