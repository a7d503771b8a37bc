//! Configuration of the gateway: flags with environment-variable fallbacks.

use clap::Parser;
use shared::fleet_config::FleetFile;
use shared::namespaces::Namespaces;
use shared::CanvasDims;
use std::net::SocketAddr;
use std::time::Duration;

/// One node as configured: `id=http://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddr {
    pub id: String,
    /// Base URL of the node's HTTP API, without a trailing slash.
    pub url: String,
}

/// The configured nodes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nodes(pub Vec<NodeAddr>);

/// Parses `ws-1=http://127.0.0.1:8081,ws-2=http://127.0.0.1:8082`.
///
/// # Errors
/// A message naming the entry at fault (missing `=`, empty id, non-http URL, duplicate id).
pub fn parse_nodes(raw: &str) -> Result<Nodes, String> {
    let mut nodes: Vec<NodeAddr> = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, url) = entry.split_once('=').ok_or_else(|| format!("node entry {entry:?} is not id=url"))?;
        let (id, url) = (id.trim(), url.trim().trim_end_matches('/'));
        if id.is_empty() {
            return Err(format!("node entry {entry:?} has an empty id"));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= "http://".len() {
            return Err(format!("node {id}: url {url:?} must start with http:// or https://"));
        }
        if nodes.iter().any(|n| n.id == id) {
            return Err(format!("node {id} is listed twice"));
        }
        nodes.push(NodeAddr { id: id.to_owned(), url: url.to_owned() });
    }
    if nodes.is_empty() {
        return Err("no nodes configured".into());
    }
    Ok(Nodes(nodes))
}

/// The publishers as configured, in order: base URLs without a trailing slash.
///
/// A deployment runs one publisher, or several on one topic while a newer one takes over (it
/// fences the older, which then refuses every write): the gateway sends each request to the one
/// that accepts writes ([`crate::publishers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherUrls(pub Vec<String>);

/// Splits `http://a:8080,http://b:8080` (blank entries skipped, trailing slashes dropped). The
/// URLs are checked by [`Config::problems`], so every bad one is reported at once.
///
/// # Errors
/// None: the signature is clap's.
pub fn parse_publishers(raw: &str) -> Result<PublisherUrls, String> {
    let strip = |e: &str| {
        // `http://` alone keeps its slashes, so the problem names what was written.
        let t = e.trim_end_matches('/');
        if t.ends_with(':') { e.to_owned() } else { t.to_owned() }
    };
    Ok(PublisherUrls(raw.split(',').map(str::trim).filter(|e| !e.is_empty()).map(strip).collect()))
}

/// Whether `url` is `http://` or `https://` followed by something (a host, at least).
fn is_http_url(url: &str) -> bool {
    url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).is_some_and(|rest| !rest.is_empty())
}

/// Gateway settings. Every flag can also be given by the environment variable named in its help,
/// or in `fleet.toml` ([`Config::load`]).
#[derive(Debug, Clone, Parser)]
#[command(name = "gateway", version, about = "Entry point and lifecycle orchestrator of the channel fleet")]
pub struct Config {
    /// The fleet's file: its namespaces, and settings (`[fleet]`, `[gateway]`) for what no flag or
    /// environment variable sets (docs/configuration.md).
    #[arg(long = "config", env = "FLEET_CONFIG", value_name = "FILE")]
    pub fleet_config: Option<std::path::PathBuf>,
    /// What `fleet.toml` said ([`Config::load`]; empty otherwise).
    #[arg(skip)]
    pub fleet: FleetFile,
    /// Canvas width in pixels of a `pixels` namespace that sets none (the default namespace,
    /// without `fleet.toml`): the same as the publisher's and the nodes', for the namespaces'
    /// fingerprint.
    #[arg(long, env = "CANVAS_WIDTH", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub canvas_width: u32,
    /// Canvas height in pixels (see `CANVAS_WIDTH`).
    #[arg(long, env = "CANVAS_HEIGHT", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub canvas_height: u32,
    /// Address to serve HTTP and WebSocket on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8000")]
    pub listen: SocketAddr,
    /// The nodes: `ws-1=http://host:port,ws-2=http://host:port`.
    #[arg(long, env = "NODES", value_parser = parse_nodes)]
    pub nodes: Nodes,
    /// Where to reach the nodes' admin routes when not at their `NODES` URL, in the same
    /// `id=url` form: a node without `ADMIN_TOKEN` serves them on a loopback listener
    /// (`ws-1=http://127.0.0.1:9081`), so this gateway must run on the same host.
    #[arg(long, env = "NODE_ADMIN_URLS", value_parser = parse_nodes)]
    pub node_admin_urls: Option<Nodes>,
    /// Token of the admin API: required as `Authorization: Bearer <token>` on
    /// `POST /api/fleet/nodes/{id}/drain` and for the full `/api/fleet`, and sent to the nodes'
    /// admin routes (so the nodes get the same `ADMIN_TOKEN`). Unset or empty: the drain route
    /// and the full `/api/fleet` are served on `ADMIN_LISTEN_ADDR` only.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Loopback address of the admin listener, served only when no `ADMIN_TOKEN` is set.
    #[arg(long = "admin-listen", env = "ADMIN_LISTEN_ADDR", default_value = "127.0.0.1:9000")]
    pub admin_listen: SocketAddr,
    /// Client tokens for `/ws` (`token=`); publishes are checked by the publisher, which gets the
    /// client's `Authorization` header.
    #[command(flatten)]
    pub client_tokens: shared::client_token::ClientTokenSettings,
    /// Base URLs of the publishers, comma-separated (for `/api/channels/...`, `/api/publications` and the pixels routes):
    /// each request goes to the one that accepts writes.
    #[arg(long, env = "PUBLISHER_URL", default_value = "http://localhost:8080", value_parser = parse_publishers)]
    pub publisher_url: PublisherUrls,
    /// Where to reach the publishers' admin routes (`POST /admin/promote`), comma-separated, one
    /// per `PUBLISHER_URL` entry in the same order: a publisher without `ADMIN_TOKEN` serves them
    /// on a loopback listener (`http://127.0.0.1:9080`), so this gateway must run on the same
    /// host. Unset or empty: each publisher's own URL.
    #[arg(long, env = "PUBLISHER_ADMIN_URLS", value_parser = parse_publishers)]
    pub publisher_admin_urls: Option<PublisherUrls>,
    /// How long a forwarded single publish or channel read may take before the client gets 504
    /// `publisher_outcome_unknown`, ms.
    #[arg(long, env = "PUBLISHER_TIMEOUT_MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub publisher_timeout_ms: u64,
    /// How long a forwarded batch (`POST /api/publications`, `POST /api/pixels`) may take, ms: the
    /// publisher writes each channel's publications in a Kafka transaction, channels side by side,
    /// and a Kafka outage fails a channel's transaction only after the publisher's produce timeout.
    #[arg(long, env = "PUBLISHER_BATCH_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub publisher_batch_timeout_ms: u64,
    /// How often each node's `/health` is polled, ms.
    #[arg(long, env = "POLL_INTERVAL_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(50..=600_000))]
    pub poll_interval_ms: u64,
    /// How long a poll waits for an answer before the node counts as DOWN, ms.
    #[arg(long, env = "POLL_TIMEOUT_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub poll_timeout_ms: u64,
    /// Consecutive UP polls before start-recovery is sent.
    #[arg(long, env = "UP_THRESHOLD", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub up_threshold: u32,
    /// Hysteresis: the longest UP streak a node that flapped recently must show (each flap within
    /// `FLAP_WINDOW_MS` adds `UP_THRESHOLD` polls, up to this).
    #[arg(long, env = "MAX_UP_THRESHOLD", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_up_threshold: u32,
    /// How long a flap (a node going DOWN from HEALTHY or DEGRADED, or ejected) counts towards
    /// hysteresis, ms.
    #[arg(long, env = "FLAP_WINDOW_MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub flap_window_ms: u64,
    /// Consecutive DEGRADED polls before the node is ejected: drained out of the broadcast group
    /// so its partitions move (never the last node serving, at most one at a time).
    #[arg(long, env = "DEGRADED_CHECKS", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub degraded_checks: u32,
    /// Answers this gateway must have seen from a node before it may eject it.
    #[arg(long, env = "MIN_SAMPLES", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub min_samples: u32,
    /// No ejection within this long of the last one, ms.
    #[arg(long, env = "EJECT_COOLDOWN_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub eject_cooldown_ms: u64,
    /// Hold-down: a node ejected twice or more within `HOLD_DOWN_WINDOW_MS` gets no start-recovery
    /// for `HOLD_DOWN_BASE_MS × (ejections − 1)` after the ejection, at most `HOLD_DOWN_MAX_MS`
    /// (it stays UP, drained), ms. 0: no hold-down.
    #[arg(long, env = "HOLD_DOWN_BASE_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub hold_down_base_ms: u64,
    /// The longest hold-down, ms (at least `HOLD_DOWN_BASE_MS`).
    #[arg(long, env = "HOLD_DOWN_MAX_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub hold_down_max_ms: u64,
    /// How long an ejection counts towards the hold-down, ms.
    #[arg(long, env = "HOLD_DOWN_WINDOW_MS", default_value_t = 1_800_000, value_parser = clap::value_parser!(u64).range(0..=604_800_000))]
    pub hold_down_window_ms: u64,
    /// Consecutive proxied handshakes a node fails to answer (refused connection, reset, timeout)
    /// that open its circuit breaker: it gets no handshakes for `BREAKER_OPEN_MS`.
    #[arg(long, env = "BREAKER_FAILURES", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub breaker_failures: u32,
    /// How long an open breaker sends the node no handshakes, ms.
    #[arg(long, env = "BREAKER_OPEN_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub breaker_open_ms: u64,
    /// Trial handshakes a half-open breaker lets through at a time; when as many succeed it closes.
    #[arg(long, env = "BREAKER_TRIALS", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub breaker_trials: u32,
    /// Slow start: proxied handshakes per second one node is sent (a failback's or a recovery's
    /// reconnect wave is spread); the excess is refused with 503 `node_busy` and a jittered
    /// Retry-After of 1–3 s. 0: unbounded.
    #[arg(long, env = "HANDSHAKE_RATE_PER_NODE", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub handshake_rate_per_node: u32,
    /// Handshakes one node may be sent at once before the rate applies (0: one second's worth).
    #[arg(long, env = "HANDSHAKE_BURST_PER_NODE", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub handshake_burst_per_node: u32,
    /// Grace period of the failback drain, ms.
    #[arg(long, env = "FAILBACK_GRACE_MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub failback_grace_ms: u64,
    /// How long a failback paced to the recovered node's room waits for room, ms: meanwhile the
    /// stand-ins keep holding the waiting partitions (`POST /admin/hold`) and serving their
    /// sessions; after it those sessions are handed over and wait in the admission queue.
    #[arg(long, env = "FAILBACK_PACE_LIMIT_MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub failback_pace_limit_ms: u64,
    /// Partition count to route with until a node reports the topic's (must match the topic).
    #[arg(long, env = "TOPIC_PARTITIONS", default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub partitions: u32,
    /// How long the gateway waits for a node to accept a proxied WebSocket handshake, ms (a node
    /// may hold a handshake while its state catches up with the client).
    #[arg(long, env = "UPSTREAM_CONNECT_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=120_000))]
    pub upstream_connect_timeout_ms: u64,
    /// Interval of WebSocket pings to each proxied client, ms; a client silent for three
    /// intervals (no pong, no frame) is dropped and its upstream closed, so its node seat frees
    /// (the node's own check sees the gateway, which answers the node's pings itself).
    #[arg(long, env = "CLIENT_PING_INTERVAL_MS", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub client_ping_interval_ms: u64,
    /// Recent lifecycle decisions kept for `/api/fleet`.
    #[arg(long, env = "DECISION_LOG", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub decision_log: u64,
    /// This replica's name in the gateways' group and in the decisions it writes (default:
    /// `gateway-<host name>-<listen port>-<6 random hex digits>`, unique to the process, so two
    /// replicas never take each other's decisions for their own).
    #[arg(long, env = "GATEWAY_ID")]
    pub gateway_id: Option<String>,
    /// The URL the other replicas reach this one's public port at, written in its claim when it
    /// leads: a follower forwards operator requests there (default: `http://<listen address>`,
    /// or `http://<host name>:<port>` when it listens on every interface).
    #[arg(long, env = "GATEWAY_ADVERTISED_URL")]
    pub advertised_url: Option<String>,
    /// Kafka bootstrap servers. When set, the gateways elect their leader through Kafka (a
    /// consumer group on the control topic) and write every decision there before acting; when
    /// unset the gateway runs alone and decides by itself.
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    pub kafka_bootstrap: Option<String>,
    /// The one-partition topic of the leader's claims and decisions (created when missing).
    #[arg(long, env = "CONTROL_TOPIC", default_value = shared::control::DEFAULT_CONTROL_TOPIC)]
    pub control_topic: String,
    /// The consumer group the gateways elect their leader in.
    #[arg(long, env = "GATEWAY_GROUP", default_value = "fleet-gateways")]
    pub gateway_group: String,
    /// Session timeout of the gateways' group, ms: a leader that dies is replaced after about
    /// this long; a leader that has not heard from the group coordinator for two thirds of it
    /// stops acting by itself.
    #[arg(long, env = "LEADER_SESSION_TIMEOUT_MS", default_value_t = 6000, value_parser = clap::value_parser!(u64).range(1000..=300_000))]
    pub leader_session_timeout_ms: u64,
    /// Heartbeat interval in the gateways' group, and how often the leader confirms its
    /// membership with the coordinator (an offset commit, refused once it is no longer the
    /// member of the current generation), ms.
    #[arg(long, env = "LEADER_HEARTBEAT_MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub leader_heartbeat_ms: u64,
    /// Replication factor of the control topic when this gateway creates it.
    #[arg(long, env = "TOPIC_REPLICATION_FACTOR", default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=32))]
    pub replication_factor: i32,
    /// Read buffer per proxied WebSocket, each side (bytes).
    #[arg(long, env = "WS_READ_BUFFER", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(256..=1_048_576))]
    pub ws_read_buffer: u64,
    /// Largest message a client may send (bytes); a larger one closes that client's session with
    /// 1009 Message Too Big. The same default as a node's `WS_MAX_MESSAGE`: clients send only
    /// small control messages.
    #[arg(long, env = "WS_MAX_MESSAGE", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(128..=16_777_216))]
    pub ws_max_message: u64,
    /// Most WebSocket handshakes held per node while that node is full (`503 full`), waiting for a
    /// place (0: no queue, a full node's refusal goes to the client at once).
    #[arg(long, env = "ADMISSION_QUEUE", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub admission_queue: u64,
    /// Longest a handshake waits in a full node's queue, from its arrival, ms; then it gets 503
    /// `full` with a jittered Retry-After.
    #[arg(long, env = "ADMISSION_WAIT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub admission_wait_ms: u64,
    /// Least Retry-After of a `full` refusal, seconds.
    #[arg(long, env = "ADMISSION_RETRY_AFTER_S", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub admission_retry_after_s: u64,
    /// Random seconds (0 ..= this) added to each `full` refusal's Retry-After, so the clients
    /// sent away together do not return together.
    #[arg(long, env = "ADMISSION_RETRY_JITTER_S", default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub admission_retry_jitter_s: u64,
    /// Largest message a node may send through the gateway (bytes): publications and states (a
    /// 64 × 64 pixels channel's snapshot is about 16 KiB).
    #[arg(long, env = "UPSTREAM_MAX_MESSAGE", default_value_t = 1_048_576, value_parser = clap::value_parser!(u64).range(128..=67_108_864))]
    pub upstream_max_message: u64,
    /// Origins (`scheme://host[:port]`, comma-separated; `*` for any) whose pages may open
    /// sessions on `/ws`, besides the gateway's own (the page it serves: an `Origin` whose host
    /// and port are the request's `Host`). Several gateways serving one fleet list each other's
    /// here. A handshake without `Origin` (tools) is accepted; another origin gets 403
    /// `origin_not_allowed`.
    #[arg(long, env = "ALLOWED_ORIGINS", default_value = "", value_parser = shared::origin::parse_allowed_origins)]
    pub allowed_origins: shared::origin::AllowedOrigins,
    #[command(flatten)]
    pub serve: shared::serve::ServeArgs,
    #[command(flatten)]
    pub rate: shared::rate_limit::RateArgs,
    /// Load and print the configuration, then exit 0 (exit 2 on a bad value).
    #[arg(long)]
    pub check_config: bool,
}

impl Config {
    /// This process's configuration: flags over environment variables over `fleet.toml`
    /// (`--config`, `FLEET_CONFIG`) over the defaults. Call it first in `main`: it may set
    /// environment variables.
    pub fn load() -> Self {
        let (mut config, fleet) = shared::fleet_config::load::<Self>("gateway", "gateway", &[]);
        config.fleet = fleet;
        config
    }

    /// `CANVAS_WIDTH` × `CANVAS_HEIGHT`: the size of a `pixels` namespace that sets none.
    pub fn canvas_dims(&self) -> CanvasDims {
        CanvasDims { width: self.canvas_width, height: self.canvas_height }
    }

    /// The namespaces (`fleet.toml`'s, or the default namespace alone as `pixels`).
    pub fn namespaces(&self) -> Namespaces {
        self.fleet.namespaces_or_pixels(self.canvas_dims())
    }

    /// Every problem of this configuration that clap's per-value checks cannot see (empty when
    /// it is valid), so all of them are reported at once.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let urls = &self.publisher_url.0;
        if urls.is_empty() {
            p.push("PUBLISHER_URL (--publisher-url) names no publisher".to_owned());
        }
        for (i, url) in urls.iter().enumerate() {
            if !is_http_url(url) {
                p.push(format!("PUBLISHER_URL (--publisher-url) {url:?} must start with http:// or https:// and name a host"));
            } else if urls[..i].contains(url) {
                p.push(format!("PUBLISHER_URL (--publisher-url) lists {url} twice"));
            }
        }
        let admin = self.publisher_admin_urls.iter().flat_map(|a| &a.0).collect::<Vec<_>>();
        if !admin.is_empty() && admin.len() != urls.len() {
            p.push(format!(
                "PUBLISHER_ADMIN_URLS (--publisher-admin-urls) must list one URL per PUBLISHER_URL entry, in the same order (it lists {}, PUBLISHER_URL {})",
                admin.len(),
                urls.len()
            ));
        }
        for url in admin.iter().filter(|u| !is_http_url(u)) {
            p.push(format!("PUBLISHER_ADMIN_URLS (--publisher-admin-urls) {url:?} must start with http:// or https:// and name a host"));
        }
        if self.poll_timeout_ms > self.poll_interval_ms {
            p.push(format!(
                "POLL_TIMEOUT_MS ({}) must not exceed POLL_INTERVAL_MS ({}): polls would overlap",
                self.poll_timeout_ms, self.poll_interval_ms
            ));
        }
        for a in self.node_admin_urls.iter().flat_map(|n| &n.0) {
            if !self.nodes.0.iter().any(|n| n.id == a.id) {
                p.push(format!("NODE_ADMIN_URLS names node {}, which is not in NODES", a.id));
            }
        }
        if self.admin_token().is_none() {
            p.extend(shared::auth::admin_listen_problem(&self.admin_listen));
        }
        p.extend(shared::auth::demo_token_problem(self.admin_token.as_deref(), &self.listen));
        p.extend(self.client_tokens.problems());
        if let Some(url) = self.advertised_url.as_deref().filter(|u| !u.is_empty()) {
            if !is_http_url(url) {
                p.push(format!("GATEWAY_ADVERTISED_URL (--advertised-url) {url:?} must start with http:// or https:// and name a host"));
            }
        }
        if let Some(why) = shared::kafka::topic_name_problem(&self.control_topic) {
            p.push(format!("CONTROL_TOPIC (--control-topic): {why}"));
        }
        if self.hold_down_max_ms < self.hold_down_base_ms {
            p.push(format!("HOLD_DOWN_MAX_MS ({}) must not be below HOLD_DOWN_BASE_MS ({})", self.hold_down_max_ms, self.hold_down_base_ms));
        }
        if self.leader_heartbeat_ms * 3 > self.leader_session_timeout_ms {
            p.push(format!(
                "LEADER_HEARTBEAT_MS ({}) must be at most a third of LEADER_SESSION_TIMEOUT_MS ({})",
                self.leader_heartbeat_ms, self.leader_session_timeout_ms
            ));
        }
        p.extend(self.fleet.problems(self.canvas_dims()));
        p
    }

    /// The Kafka client settings of the election and the control topic (`KAFKA_CLIENT_*`
    /// overrides included).
    pub fn kafka_settings(&self, bootstrap: &str) -> shared::kafka::KafkaSettings {
        let mut k = shared::kafka::KafkaSettings::new(bootstrap).with_env_overrides();
        k.session_timeout = Duration::from_millis(self.leader_session_timeout_ms);
        k.heartbeat_interval = Duration::from_millis(self.leader_heartbeat_ms);
        k
    }

    /// This replica's name: `GATEWAY_ID`, else [`default_id`].
    pub fn id(&self) -> String {
        self.gateway_id.clone().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| default_id(self.listen.port()))
    }

    /// Where the other replicas reach this one's public port: `GATEWAY_ADVERTISED_URL`, else
    /// the listen address (the host name when that is every interface).
    pub fn advertised_url(&self) -> String {
        if let Some(url) = self.advertised_url.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
            return url.trim_end_matches('/').to_owned();
        }
        if self.listen.ip().is_unspecified() {
            let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).filter(|h| !h.is_empty()).unwrap_or_else(|| "localhost".into());
            format!("http://{host}:{}", self.listen.port())
        } else {
            format!("http://{}", self.listen)
        }
    }

    /// The admin token, when one is set (non-empty).
    pub fn admin_token(&self) -> Option<shared::auth::AdminToken> {
        shared::auth::AdminToken::from_setting(self.admin_token.as_deref())
    }

    /// The base URL of node `id`'s admin routes: its `NODE_ADMIN_URLS` entry, else its URL.
    pub fn admin_url_of<'a>(&'a self, node: &'a NodeAddr) -> &'a str {
        self.node_admin_urls.iter().flat_map(|n| &n.0).find(|a| a.id == node.id).map_or(node.url.as_str(), |a| a.url.as_str())
    }

    /// The base URL of the admin routes of publisher `i` (in `PUBLISHER_URL` order): its
    /// `PUBLISHER_ADMIN_URLS` entry, else its URL; `None` for an index past the list.
    pub fn publisher_admin_url(&self, i: usize) -> Option<&str> {
        let admin = self.publisher_admin_urls.as_ref().map(|a| &a.0).filter(|a| !a.is_empty());
        admin.map_or(self.publisher_url.0.get(i), |a| a.get(i)).map(String::as_str)
    }

    /// The effective configuration, one `VARIABLE=value` per line.
    pub fn describe(&self) -> String {
        let nodes: Vec<String> = self.nodes.0.iter().map(|n| format!("{}={}", n.id, n.url)).collect();
        let admin: Vec<String> = self.node_admin_urls.iter().flat_map(|n| &n.0).map(|n| format!("{}={}", n.id, n.url)).collect();
        let mut pairs = vec![
            ("LISTEN_ADDR", self.listen.to_string()),
            ("NODES", nodes.join(",")),
            ("CANVAS_WIDTH", self.canvas_width.to_string()),
            ("CANVAS_HEIGHT", self.canvas_height.to_string()),
            ("NODE_ADMIN_URLS", admin.join(",")),
            ("ADMIN_TOKEN", if self.admin_token().is_some() { "<set>".to_owned() } else { String::new() }),
            ("ADMIN_LISTEN_ADDR", if self.admin_token().is_some() { "(not used: ADMIN_TOKEN is set)".to_owned() } else { self.admin_listen.to_string() }),
            ("PUBLISHER_URL", self.publisher_url.0.join(",")),
            ("PUBLISHER_ADMIN_URLS", self.publisher_admin_urls.as_ref().map(|a| a.0.join(",")).unwrap_or_default()),
            ("PUBLISHER_TIMEOUT_MS", self.publisher_timeout_ms.to_string()),
            ("PUBLISHER_BATCH_TIMEOUT_MS", self.publisher_batch_timeout_ms.to_string()),
            ("POLL_INTERVAL_MS", self.poll_interval_ms.to_string()),
            ("POLL_TIMEOUT_MS", self.poll_timeout_ms.to_string()),
            ("UP_THRESHOLD", self.up_threshold.to_string()),
            ("MAX_UP_THRESHOLD", self.max_up_threshold.to_string()),
            ("FLAP_WINDOW_MS", self.flap_window_ms.to_string()),
            ("DEGRADED_CHECKS", self.degraded_checks.to_string()),
            ("MIN_SAMPLES", self.min_samples.to_string()),
            ("EJECT_COOLDOWN_MS", self.eject_cooldown_ms.to_string()),
            ("HOLD_DOWN_BASE_MS", self.hold_down_base_ms.to_string()),
            ("HOLD_DOWN_MAX_MS", self.hold_down_max_ms.to_string()),
            ("HOLD_DOWN_WINDOW_MS", self.hold_down_window_ms.to_string()),
            ("BREAKER_FAILURES", self.breaker_failures.to_string()),
            ("BREAKER_OPEN_MS", self.breaker_open_ms.to_string()),
            ("BREAKER_TRIALS", self.breaker_trials.to_string()),
            ("HANDSHAKE_RATE_PER_NODE", self.handshake_rate_per_node.to_string()),
            ("HANDSHAKE_BURST_PER_NODE", self.handshake_burst_per_node.to_string()),
            ("FAILBACK_GRACE_MS", self.failback_grace_ms.to_string()),
            ("FAILBACK_PACE_LIMIT_MS", self.failback_pace_limit_ms.to_string()),
            ("TOPIC_PARTITIONS", self.partitions.to_string()),
            ("UPSTREAM_CONNECT_TIMEOUT_MS", self.upstream_connect_timeout_ms.to_string()),
            ("CLIENT_PING_INTERVAL_MS", self.client_ping_interval_ms.to_string()),
            ("DECISION_LOG", self.decision_log.to_string()),
            ("GATEWAY_ID", self.id()),
            ("GATEWAY_ADVERTISED_URL", self.advertised_url()),
            ("KAFKA_BOOTSTRAP", self.kafka_bootstrap.clone().unwrap_or_default()),
            ("CONTROL_TOPIC", self.control_topic.clone()),
            ("GATEWAY_GROUP", self.gateway_group.clone()),
            ("LEADER_SESSION_TIMEOUT_MS", self.leader_session_timeout_ms.to_string()),
            ("LEADER_HEARTBEAT_MS", self.leader_heartbeat_ms.to_string()),
            ("TOPIC_REPLICATION_FACTOR", self.replication_factor.to_string()),
            ("WS_READ_BUFFER", self.ws_read_buffer.to_string()),
            ("WS_MAX_MESSAGE", self.ws_max_message.to_string()),
            ("ADMISSION_QUEUE", self.admission_queue.to_string()),
            ("ADMISSION_WAIT_MS", self.admission_wait_ms.to_string()),
            ("ADMISSION_RETRY_AFTER_S", self.admission_retry_after_s.to_string()),
            ("ADMISSION_RETRY_JITTER_S", self.admission_retry_jitter_s.to_string()),
            ("UPSTREAM_MAX_MESSAGE", self.upstream_max_message.to_string()),
            ("ALLOWED_ORIGINS", self.allowed_origins.to_string()),
            ("HEADER_READ_TIMEOUT_MS", self.serve.header_read_timeout_ms.to_string()),
            ("BODY_READ_TIMEOUT_MS", self.serve.body_read_timeout_ms.to_string()),
            ("MAX_CONNECTIONS", self.serve.max_connections.to_string()),
        ];
        pairs.extend(self.rate.env_pairs());
        pairs.extend(self.client_tokens.describe());
        format!("{}\n{}", shared::telemetry::env_lines(&pairs), self.fleet.describe(self.canvas_dims()))
    }

    /// `poll_interval_ms` as a duration.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }
    /// `poll_timeout_ms` as a duration.
    pub fn poll_timeout(&self) -> Duration {
        Duration::from_millis(self.poll_timeout_ms)
    }
    /// `publisher_timeout_ms` as a duration.
    pub fn publisher_timeout(&self) -> Duration {
        Duration::from_millis(self.publisher_timeout_ms)
    }
    /// `publisher_batch_timeout_ms` as a duration.
    pub fn publisher_batch_timeout(&self) -> Duration {
        Duration::from_millis(self.publisher_batch_timeout_ms)
    }
    /// The admission queue's settings.
    pub fn admission(&self) -> crate::admission::Settings {
        crate::admission::Settings {
            queue: usize::try_from(self.admission_queue).unwrap_or(usize::MAX),
            wait: Duration::from_millis(self.admission_wait_ms),
            retry_after_s: self.admission_retry_after_s,
            retry_jitter_s: self.admission_retry_jitter_s,
        }
    }
    /// `upstream_connect_timeout_ms` as a duration.
    pub fn upstream_connect_timeout(&self) -> Duration {
        Duration::from_millis(self.upstream_connect_timeout_ms)
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

/// A name unique to this process: `gateway-<host name>-<port>-<6 random hex digits>`, the same
/// for the process's life.
pub fn default_id(port: u16) -> String {
    static SUFFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let suffix = SUFFIX.get_or_init(|| format!("{:06x}", rand::random::<u32>() & 0x00ff_ffff));
    let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).filter(|h| !h.is_empty()).unwrap_or_else(|| "host".into());
    format!("gateway-{host}-{port}-{suffix}")
}

#[cfg(test)]
mod tests;
