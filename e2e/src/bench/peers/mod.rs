//! The peers of the benchmarks: Centrifugo v6 and Socket.IO 4, each fed by the same Kafka topic as
//! the fleet, and the client side of their protocols.
//!
//! | peer | server | fed by | client protocol |
//! |---|---|---|---|
//! | [`Peer::Centrifugo`] | Centrifugo v6.9.1 built by `bench/peers/centrifugo/install.sh` | its built-in Kafka consumer in publication data mode: a record's value is published as is to the channels named by its `centrifugo-channels` header | Centrifugo's bidirectional JSON protocol over WebSocket at `/connection/websocket` |
//! | [`Peer::SocketIo`] | `bench/peers/socketio/server.mjs` on Node.js, socket.io 4.8.1 (installed by `bench/peers/socketio/install.sh`) | `@platformatic/kafka`: every record's value, parsed as JSON, is emitted to the room named after its key | Engine.IO 4 / Socket.IO 5 packets over WebSocket at `/socket.io/?EIO=4&transport=websocket` |
//!
//! Both serve loopback only, each on a fresh port, with a fresh consumer group per start.
//!
//! External references:
//! - Centrifugo configuration (v6): <https://centrifugal.dev/docs/server/configuration>; every key
//!   used here is also listed by the binary itself (`centrifugo defaultconfig -d`,
//!   `centrifugo configdoc -m`), and the server logs `unknown key in configuration file` for any
//!   other.
//! - Centrifugo's Kafka consumer: <https://centrifugal.dev/docs/server/consumers#kafka-consumer>
//!   (publication data mode: <https://centrifugal.dev/docs/server/consumers#publication-data-mode>).
//! - Centrifugo's client protocol: <https://centrifugal.dev/docs/transports/client_protocol>.
//! - Socket.IO protocol: <https://socket.io/docs/v4/socket-io-protocol/>, Engine.IO protocol:
//!   <https://socket.io/docs/v4/engine-io-protocol/>.

mod client;

pub use client::{client_ws_config, on_text, subscribe, subscribe_collecting, Ws};

use anyhow::{bail, Context};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A peer server of the benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Peer {
    /// Centrifugo v6.9.1 (Go), with its built-in Kafka consumer.
    Centrifugo,
    /// Socket.IO 4.8.1 on Node.js, with a `@platformatic/kafka` consumer.
    SocketIo,
}

impl Peer {
    /// Both peers, in the order the benchmarks report them.
    pub const ALL: [Peer; 2] = [Peer::Centrifugo, Peer::SocketIo];

    /// The name shown in reports.
    pub fn label(&self) -> &'static str {
        match self {
            Peer::Centrifugo => "Centrifugo v6.9.1",
            Peer::SocketIo => "Socket.IO 4.8.1 (Node.js)",
        }
    }

    /// A short lowercase name: its folder under `bench/peers/` and the prefix of its log lines.
    pub fn slug(&self) -> &'static str {
        match self {
            Peer::Centrifugo => "centrifugo",
            Peer::SocketIo => "socketio",
        }
    }

    /// The path of its WebSocket endpoint (with the query Socket.IO needs).
    fn ws_path(&self) -> &'static str {
        match self {
            // https://centrifugal.dev/docs/transports/websocket
            Peer::Centrifugo => "/connection/websocket",
            // Engine.IO v4, WebSocket only (the server is configured with `transports: ['websocket']`).
            Peer::SocketIo => "/socket.io/?EIO=4&transport=websocket",
        }
    }
}

/// How long [`PeerServer::start`] waits for a started peer to serve and to have its Kafka
/// partitions assigned. The first consumer group on a fresh broker makes Kafka create
/// `__consumer_offsets` (50 partitions), which takes a few seconds on a small machine.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long [`PeerServer::stop`] waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How many of a peer's last output lines are kept for error messages.
const LOG_TAIL: usize = 60;

/// A running peer process, killed (SIGKILL) on drop; [`PeerServer::stop`] ends it cleanly.
pub struct PeerServer {
    pub peer: Peer,
    /// Its HTTP/WebSocket port on 127.0.0.1.
    pub port: u16,
    /// The Kafka consumer group it consumes with (fresh per start).
    pub group: String,
    child: Option<Child>,
    logs: Arc<Mutex<VecDeque<String>>>,
    /// Holds Centrifugo's config file; removed on drop.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for PeerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerServer").field("peer", &self.peer).field("port", &self.port).field("pid", &self.pid()).finish()
    }
}

/// The install script of `peer`: `bench/peers/<slug>/install.sh`.
fn install_script(peer: Peer) -> PathBuf {
    crate::broker::repo_root().join("bench/peers").join(peer.slug()).join("install.sh")
}

/// Runs `peer`'s install script once per process (it is idempotent, and prints what it does).
async fn ensure_installed(peer: Peer) -> anyhow::Result<()> {
    static CENTRIFUGO: tokio::sync::OnceCell<Result<(), String>> = tokio::sync::OnceCell::const_new();
    static SOCKETIO: tokio::sync::OnceCell<Result<(), String>> = tokio::sync::OnceCell::const_new();
    let cell = match peer {
        Peer::Centrifugo => &CENTRIFUGO,
        Peer::SocketIo => &SOCKETIO,
    };
    cell.get_or_init(|| async move {
        let script = install_script(peer);
        println!("[peers] installing {} ({})", peer.label(), script.display());
        let started = Instant::now();
        let status = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .status()
            .await
            .map_err(|e| format!("run {}: {e}", script.display()))?;
        if !status.success() {
            let needs = match peer {
                Peer::Centrifugo => "Go 1.26+ (go.mod of Centrifugo v6.9.1) and the Go module proxy",
                Peer::SocketIo => "Node.js 20.19+ with npm and the npm registry",
            };
            return Err(format!("{} failed ({status}); it needs {needs}", script.display()));
        }
        println!("[peers] {} installed ({:.1} s)", peer.label(), started.elapsed().as_secs_f64());
        Ok(())
    })
    .await
    .clone()
    .map_err(anyhow::Error::msg)
}

/// Centrifugo v6's configuration for one benchmark run (the JSON file given with `--config`).
///
/// Keys (all checked against v6.9.1: `centrifugo defaultconfig -d` lists them, and the server
/// warns `unknown key in configuration file` for anything else; documented at
/// <https://centrifugal.dev/docs/server/configuration> and the pages linked below):
/// - `log.level`: `warn`, so only warnings and errors are printed.
/// - `http_server.address`/`port`: WebSocket and health endpoints on 127.0.0.1:`port`.
/// - `client.insecure`: clients connect and subscribe without tokens
///   (<https://centrifugal.dev/docs/server/configuration#clientinsecure>).
/// - `health.enabled`: `GET /health` answers 200 `{}` once the server serves
///   (<https://centrifugal.dev/docs/server/observability#health-check>).
/// - `usage_stats.disabled`: no anonymous usage reports from benchmark runs.
/// - `channel.without_namespace.history_size` (publications kept per channel), `history_ttl`
///   (how long), `force_recovery` (every subscription is recoverable: a reconnecting client gets
///   what it missed), i.e. the fleet's catch-up, turned on the Centrifugo way
///   (<https://centrifugal.dev/docs/server/history_and_recovery>).
/// - `channel.namespaces[]`: the same options for the `bench` namespace, whose channels
///   (`bench:<name>`) carry the `stream` payloads: in Centrifugo, too, the part of a channel name
///   before `:` names a namespace, and a channel of one that is not configured is refused
///   (<https://centrifugal.dev/docs/server/channels#channel-namespaces>).
/// - `consumers[]`: one consumer, `type: kafka`, `enabled: true` (without it the consumer is
///   skipped), with `kafka.brokers`, `kafka.topics`, `kafka.consumer_group` and
///   `kafka.publication_data_mode.{enabled, channels_header}`: each record's value is published
///   as is to the channels listed in its `centrifugo-channels` header
///   (<https://centrifugal.dev/docs/server/consumers#kafka-consumer>).
///
/// Where a fresh group starts is not configurable: Centrifugo's Kafka client (franz-go) resets to
/// the earliest offset of each partition (`kgo.ConsumeResetOffset` default), so records produced
/// before the group's first assignment are not lost either.
fn centrifugo_config(port: u16, bootstrap: &str, topic: &str, group: &str) -> serde_json::Value {
    serde_json::json!({
        "log": { "level": "warn" },
        "http_server": { "address": "127.0.0.1", "port": port },
        "client": { "insecure": true },
        "health": { "enabled": true },
        "usage_stats": { "disabled": true },
        "channel": {
            "without_namespace": { "history_size": 1000, "history_ttl": "300s", "force_recovery": true },
            "namespaces": [
                { "name": super::payload::NAMESPACE, "history_size": 1000, "history_ttl": "300s", "force_recovery": true }
            ]
        },
        "consumers": [{
            "name": "kafka",
            "enabled": true,
            "type": "kafka",
            "kafka": {
                "brokers": bootstrap.split(',').map(str::trim).collect::<Vec<_>>(),
                "topics": [topic],
                "consumer_group": group,
                "publication_data_mode": { "enabled": true, "channels_header": "centrifugo-channels" }
            }
        }]
    })
}

impl PeerServer {
    /// Runs the peer's install script (idempotent; prints progress), writes its config, starts it
    /// consuming `topic` at `bootstrap` (comma-separated `host:port` list) with a fresh consumer
    /// group, and waits until it serves WebSocket clients with its Kafka partitions assigned.
    ///
    /// Where the fresh group starts: Socket.IO at the latest offsets (it reports ready only once
    /// it knows them), Centrifugo at the earliest (franz-go's default, not configurable in
    /// Centrifugo); with a fresh topic per measurement and producing only after `start`, both
    /// deliver exactly the records produced after `start` returns.
    ///
    /// Ready means: Centrifugo's `GET /health` answers 200 and its consumer group is `Stable` with
    /// partitions assigned (asked from the broker: Kafka's DescribeGroups, through librdkafka);
    /// Socket.IO's `GET /health` answers 200, which `server.mjs` does once its consumer has its
    /// partitions and their offsets. Progress is printed every 5 s; waits up to 90 s.
    ///
    /// # Errors
    /// When the install script fails, the peer cannot be spawned, exits during start-up, or is not
    /// ready in time; the error carries the last lines it printed.
    pub async fn start(peer: Peer, bootstrap: &str, topic: &str) -> anyhow::Result<Self> {
        ensure_installed(peer).await?;
        let port = crate::broker::free_port()?;
        let group = format!("{}-bench-{}-{:08x}", peer.slug(), std::process::id(), rand::random::<u32>());
        let dir = tempfile::Builder::new().prefix(&format!("bench-{}-", peer.slug())).tempdir()?;
        let root = crate::broker::repo_root();
        let mut cmd = match peer {
            Peer::Centrifugo => {
                let config = dir.path().join("config.json");
                std::fs::write(&config, serde_json::to_vec_pretty(&centrifugo_config(port, bootstrap, topic, &group))?)
                    .with_context(|| format!("write {}", config.display()))?;
                let bin = root.join("target/peers/bin/centrifugo");
                let mut cmd = Command::new(&bin);
                cmd.arg("--config").arg(&config).current_dir(dir.path());
                cmd
            }
            Peer::SocketIo => {
                let dir = root.join("bench/peers/socketio");
                let mut cmd = Command::new("node");
                cmd.arg(dir.join("server.mjs"))
                    .current_dir(&dir)
                    .env("PORT", port.to_string())
                    .env("HOST", "127.0.0.1")
                    .env("KAFKA_BOOTSTRAP", bootstrap)
                    .env("KAFKA_TOPIC", topic)
                    .env("GROUP", &group);
                cmd
            }
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        crate::procs::die_with_parent(cmd.as_std_mut());
        let mut child = cmd.spawn().with_context(|| format!("spawn {}", peer.label()))?;
        let logs = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_TAIL)));
        for stream in [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let logs = logs.clone();
            let slug = peer.slug();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    eprintln!("[{slug}] {line}");
                    let mut logs = logs.lock().unwrap_or_else(|p| p.into_inner());
                    if logs.len() == LOG_TAIL {
                        logs.pop_front();
                    }
                    logs.push_back(line);
                }
            });
        }
        println!("[peers] started {} (pid {}) on 127.0.0.1:{port}, consuming {topic} at {bootstrap} as group {group}",
            peer.label(), child.id().unwrap_or(0));
        let mut server = Self { peer, port, group, child: Some(child), logs, _dir: dir };
        server.wait_ready(bootstrap).await?;
        Ok(server)
    }

    /// Polls until the peer is ready (see [`PeerServer::start`]).
    async fn wait_ready(&mut self, bootstrap: &str) -> anyhow::Result<()> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        let health = format!("http://127.0.0.1:{}/health", self.port);
        let started = Instant::now();
        let mut last_report = Instant::now();
        let mut state;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    // Let the log readers drain what it printed before it died.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    bail!("{} exited during start-up ({status}); its last output:\n{}", self.peer.label(), self.log_tail());
                }
            }
            let http_ok = match http.get(&health).send().await {
                Ok(resp) => {
                    let code = resp.status();
                    let body = resp.text().await.unwrap_or_default();
                    state = format!("GET /health: {code} {body}");
                    code.is_success()
                }
                Err(e) => {
                    state = format!("GET /health: {e}");
                    false
                }
            };
            if http_ok {
                match self.peer {
                    Peer::SocketIo => break,
                    Peer::Centrifugo => {
                        let (b, g) = (bootstrap.to_owned(), self.group.clone());
                        match tokio::task::spawn_blocking(move || group_assigned_partitions(&b, &g)).await? {
                            Ok(n) if n > 0 => {
                                state = format!("group {} stable with {n} partitions assigned", self.group);
                                break;
                            }
                            Ok(_) => state = format!("serving; group {} has no partitions assigned yet", self.group),
                            Err(e) => state = format!("serving; group {}: {e}", self.group),
                        }
                    }
                }
            }
            if started.elapsed() > START_TIMEOUT {
                bail!("{} was not ready within {} s (last seen: {state}); its last output:\n{}",
                    self.peer.label(), START_TIMEOUT.as_secs(), self.log_tail());
            }
            if last_report.elapsed() >= Duration::from_secs(5) {
                println!("[peers] waiting for {} to be ready ({} s): {state}", self.peer.label(), started.elapsed().as_secs());
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("[peers] {} ready after {:.1} s ({state})", self.peer.label(), started.elapsed().as_secs_f64());
        Ok(())
    }

    /// The last lines the peer printed (stdout and stderr).
    fn log_tail(&self) -> String {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        if logs.is_empty() {
            return "  (nothing)".into();
        }
        logs.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
    }

    /// The peer's process id (0 once stopped). For Socket.IO it is the `node` process itself.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().and_then(Child::id).unwrap_or(0)
    }

    /// The WebSocket URL clients connect to: `ws://127.0.0.1:<port><path>`, with
    /// `/connection/websocket` for Centrifugo and `/socket.io/?EIO=4&transport=websocket` for
    /// Socket.IO. Pass it to [`subscribe`] as is.
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}{}", self.port, self.peer.ws_path())
    }

    /// Stops the peer: SIGTERM (both shut down cleanly: Centrifugo disconnects its clients and
    /// leaves the group; `server.mjs` closes its consumer and exits), then SIGKILL if it is still
    /// running after 5 s.
    pub async fn stop(mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Some(pid) = child.id() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        }
        if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_err() {
            println!("[peers] {} did not exit within {} s of SIGTERM; killing it", self.peer.label(), STOP_GRACE.as_secs());
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// How many partitions the members of consumer group `group` have assigned, once the group is
/// `Stable` (0 before). Asks the broker with librdkafka's `rd_kafka_list_groups` (Kafka's
/// ListGroups/DescribeGroups; classic-protocol groups, which franz-go's is) and decodes each
/// member's assignment (Kafka's `ConsumerProtocolAssignment`: i16 version, then an i32-counted
/// array of topics, each an i16-length name and an i32-counted array of i32 partitions).
/// Blocking.
fn group_assigned_partitions(bootstrap: &str, group: &str) -> Result<usize, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("log_level", "3")
        .create()
        .map_err(|e| e.to_string())?;
    let list = consumer.fetch_group_list(Some(group), Duration::from_secs(3)).map_err(|e| e.to_string())?;
    let Some(info) = list.groups().iter().find(|g| g.name() == group) else { return Ok(0) };
    if info.state() != "Stable" {
        return Err(format!("state {}", info.state()));
    }
    Ok(info.members().iter().filter_map(|m| m.assignment()).map(assignment_partitions).sum())
}

/// The number of partitions in a serialized `ConsumerProtocolAssignment` (0 when malformed).
fn assignment_partitions(bytes: &[u8]) -> usize {
    fn take<const N: usize>(b: &mut &[u8]) -> Option<[u8; N]> {
        let (head, rest) = b.split_first_chunk::<N>()?;
        *b = rest;
        Some(*head)
    }
    let mut b = bytes;
    let parse = |b: &mut &[u8]| -> Option<usize> {
        take::<2>(b)?; // version
        let topics = i32::from_be_bytes(take::<4>(b)?);
        let mut total = 0;
        for _ in 0..topics.max(0) {
            let len = i16::from_be_bytes(take::<2>(b)?).max(0) as usize;
            *b = b.get(len..)?;
            let partitions = i32::from_be_bytes(take::<4>(b)?).max(0) as usize;
            *b = b.get(partitions * 4..)?;
            total += partitions;
        }
        Some(total)
    };
    parse(&mut b).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_decoding() {
        // version 0, 1 topic "t2" with partitions [0, 1, 2], empty user data.
        let mut b = vec![0, 0, 0, 0, 0, 1, 0, 2, b't', b'2', 0, 0, 0, 3];
        for p in 0..3i32 {
            b.extend_from_slice(&p.to_be_bytes());
        }
        b.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(assignment_partitions(&b), 3);
        assert_eq!(assignment_partitions(&[0, 0, 0, 0, 0, 0]), 0);
        assert_eq!(assignment_partitions(&[0]), 0);
    }
}
