//! Kafka-protocol brokers for the harness.
//!
//! | kind | what | selected by |
//! |---|---|---|
//! | embedded | librdkafka's mock cluster (`rdkafka::mocking`), hosted by the harness process on loopback | default |
//! | real | Apache Kafka 4.x (KRaft, single node) from Maven Central, run with the machine's Java by `scripts/kafka/start.sh` | `E2E_BROKER=real` / `--kafka real` |
//! | cluster | three such nodes, one static 3-voter quorum, replication factor 3 and min ISR 2; each node can be killed, paused and restarted ([`Broker::kill_node`] and the methods after it) | `E2E_BROKER=cluster` / `--kafka cluster` |
//! | container | the official `apache/kafka` image in Docker, through testcontainers | `E2E_BROKER=container` |
//! | external | any broker you run | `KAFKA_BOOTSTRAP=host:port` |

mod cluster;
mod metadata;
pub mod security;

pub use metadata::create_topic;
use metadata::{fetch_partition_async, wait_partition_on};

pub use cluster::{ClusterNode, MIN_INSYNC_REPLICAS, NODES as CLUSTER_NODES, READY_TOPIC};

use anyhow::{anyhow, bail, Context};
use std::process::Stdio;
use std::time::{Duration, Instant};

pub use crate::procs::repo_root;

/// Which broker to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerKind {
    Embedded,
    Real,
    /// Three Apache Kafka nodes on the JVM (KRaft, each a broker and a controller), replication
    /// factor 3, min ISR 2; its nodes can be killed, paused and restarted one by one.
    Cluster,
    /// `apache/kafka` in a container started with testcontainers (needs a Docker engine).
    Container,
    External(String),
}

impl BrokerKind {
    /// `KAFKA_BOOTSTRAP` wins, then `E2E_BROKER` (`embedded` | `real` | `cluster` | `container`),
    /// else embedded.
    pub fn from_env() -> Self {
        if let Some(b) = Self::external() {
            return b;
        }
        match std::env::var("E2E_BROKER").as_deref() {
            Ok("real") => BrokerKind::Real,
            Ok("cluster") => BrokerKind::Cluster,
            Ok("container") => BrokerKind::Container,
            _ => BrokerKind::Embedded,
        }
    }

    /// `KAFKA_BOOTSTRAP` when set, else a real single-node broker: for the tests that need real
    /// Kafka.
    pub fn real_from_env() -> Self {
        Self::external().unwrap_or(BrokerKind::Real)
    }

    /// The broker at `KAFKA_BOOTSTRAP`, when it is set.
    pub fn external() -> Option<Self> {
        std::env::var("KAFKA_BOOTSTRAP").ok().filter(|b| !b.trim().is_empty()).map(BrokerKind::External)
    }

    /// A short name for reports.
    pub fn label(&self) -> String {
        match self {
            BrokerKind::Embedded => "embedded: librdkafka mock cluster".into(),
            BrokerKind::Real => "Apache Kafka 4.4.0, KRaft, single node, on the JVM".into(),
            BrokerKind::Cluster => "Apache Kafka 4.4.0, KRaft, three nodes (replication factor 3, min ISR 2), on the JVM".into(),
            BrokerKind::Container => format!("Apache Kafka in Docker ({KAFKA_IMAGE}:{KAFKA_TAG}), via testcontainers"),
            BrokerKind::External(b) => format!("external broker at {b}"),
        }
    }

    /// The replication factor the fleet's topic gets on this broker (the publisher's
    /// `TOPIC_REPLICATION_FACTOR`): 3 on the cluster, 1 elsewhere (an external broker's size is
    /// not known).
    pub fn replication_factor(&self) -> i32 {
        match self {
            BrokerKind::Cluster => cluster::REPLICATION_FACTOR,
            _ => 1,
        }
    }
}

/// The official Apache Kafka image the container broker runs (the same version as the JVM broker
/// from Maven Central and as `docker-compose.yml`).
pub const KAFKA_IMAGE: &str = "apache/kafka";
/// Its tag.
pub const KAFKA_TAG: &str = "4.4.0";

/// Why no Docker engine can be used here, or `None` when one answers: `DOCKER_HOST` when set
/// (`unix://` or `tcp://`), else the usual sockets.
pub async fn docker_unreachable() -> Option<String> {
    let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
    let candidates: Vec<String> = match &host {
        Some(h) => vec![h.clone()],
        None => {
            let mut v = vec!["unix:///var/run/docker.sock".to_owned()];
            if let Some(home) = std::env::var_os("HOME") {
                v.push(format!("unix://{}/.docker/run/docker.sock", std::path::Path::new(&home).display()));
            }
            v
        }
    };
    for c in &candidates {
        let ok = if let Some(path) = c.strip_prefix("unix://") {
            tokio::net::UnixStream::connect(path).await.is_ok()
        } else if let Some(addr) = c.strip_prefix("tcp://") {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        } else {
            false
        };
        if ok {
            return None;
        }
    }
    Some(format!("no Docker engine reachable at {}", candidates.join(" or ")))
}

/// A running broker; stopped when dropped.
pub struct Broker {
    pub kind: BrokerKind,
    pub bootstrap: String,
    inner: Inner,
    /// The proxies of [`Broker::start_with_links`], one per link.
    links: Vec<crate::link::LinkProxy>,
}

enum Inner {
    Embedded { stop: Option<std::sync::mpsc::Sender<MockCommand>>, thread: Option<std::thread::JoinHandle<()>> },
    Real { child: std::process::Child, _dir: tempfile::TempDir },
    Cluster(Box<cluster::Cluster>),
    Container { _container: Box<testcontainers::ContainerAsync<testcontainers::GenericImage>> },
    External,
}

enum MockCommand {
    CreateTopic { name: String, partitions: i32, done: std::sync::mpsc::Sender<Result<(), String>> },
    Stop,
}

impl Broker {
    /// Starts (or connects to) a broker of `kind`.
    ///
    /// # Errors
    /// When the broker cannot be started or does not become reachable in time.
    pub async fn start(kind: BrokerKind) -> anyhow::Result<Self> {
        match &kind {
            BrokerKind::Embedded => {
                let (boot_tx, boot_rx) = std::sync::mpsc::channel();
                let (cmd_tx, cmd_rx) = std::sync::mpsc::channel::<MockCommand>();
                let thread = std::thread::Builder::new().name("mock-kafka".into()).spawn(move || {
                    let cluster = match rdkafka::mocking::MockCluster::new(1) {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = boot_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let _ = boot_tx.send(Ok(cluster.bootstrap_servers()));
                    while let Ok(cmd) = cmd_rx.recv() {
                        match cmd {
                            MockCommand::CreateTopic { name, partitions, done } => {
                                let _ = done.send(cluster.create_topic(&name, partitions, 1).map_err(|e| e.to_string()));
                            }
                            MockCommand::Stop => break,
                        }
                    }
                })?;
                let bootstrap = boot_rx.recv().context("mock cluster thread")?.map_err(anyhow::Error::msg)?;
                Ok(Self { kind, bootstrap, inner: Inner::Embedded { stop: Some(cmd_tx), thread: Some(thread) }, links: Vec::new() })
            }
            BrokerKind::Real => {
                ensure_kafka_jars()?;
                // Both ports come from the kernel's free ports; one can still be taken between
                // the check and the JVM's bind (an outgoing connection's local port, say), so a
                // broker that exits during start-up is retried on fresh ports.
                let mut last = None;
                for attempt in 1..=3 {
                    match Self::start_jvm(kind.clone(), None, 0).await {
                        Ok(b) => return Ok(b),
                        Err(e) => {
                            println!("[harness] Kafka start attempt {attempt} failed: {e:#}");
                            last = Some(e);
                        }
                    }
                }
                Err(last.expect("three attempts were made"))
            }
            BrokerKind::Cluster => {
                ensure_kafka_jars()?;
                // As for the single node: a port can be taken between the kernel handing it out
                // and a JVM binding it; a node that exits during start-up means fresh ports.
                let mut last = None;
                for attempt in 1..=3 {
                    match cluster::Cluster::start().await {
                        Ok(c) => return Ok(Self { kind, bootstrap: c.bootstrap(), inner: Inner::Cluster(Box::new(c)), links: Vec::new() }),
                        Err(e) => {
                            println!("[harness] Kafka cluster start attempt {attempt} failed: {e:#}");
                            last = Some(e);
                        }
                    }
                }
                Err(last.expect("three attempts were made"))
            }
            BrokerKind::Container => {
                use testcontainers::core::{IntoContainerPort, WaitFor};
                use testcontainers::runners::AsyncRunner;
                use testcontainers::{GenericImage, ImageExt};
                if let Some(why) = docker_unreachable().await {
                    bail!("the container broker needs a Docker engine: {why}");
                }
                // The advertised listener must be the address the host reaches: a fixed mapping.
                let port = free_port()?;
                println!("[harness] starting {KAFKA_IMAGE}:{KAFKA_TAG} in Docker on 127.0.0.1:{port}");
                let container = GenericImage::new(KAFKA_IMAGE, KAFKA_TAG)
                    .with_wait_for(WaitFor::message_on_stdout("Kafka Server started"))
                    .with_mapped_port(port, 9092.tcp())
                    .with_env_var("KAFKA_NODE_ID", "1")
                    .with_env_var("KAFKA_PROCESS_ROLES", "broker,controller")
                    .with_env_var("KAFKA_LISTENERS", "PLAINTEXT://:9092,CONTROLLER://:9093")
                    .with_env_var("KAFKA_ADVERTISED_LISTENERS", format!("PLAINTEXT://127.0.0.1:{port}"))
                    .with_env_var("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
                    .with_env_var("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT")
                    .with_env_var("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
                    .with_env_var("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
                    .with_env_var("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
                    .with_env_var("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
                    .with_env_var("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
                    .with_env_var("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
                    .with_startup_timeout(Duration::from_secs(180))
                    .start()
                    .await
                    .context("start the Kafka container")?;
                Ok(Self {
                    kind,
                    bootstrap: format!("127.0.0.1:{port}"),
                    inner: Inner::Container { _container: Box::new(container) },
                    links: Vec::new(),
                })
            }
            BrokerKind::External(b) => Ok(Self { bootstrap: b.clone(), kind, inner: Inner::External, links: Vec::new() }),
        }
    }

    /// Starts the single JVM broker (as [`BrokerKind::Real`]) with a `SASL_SSL` listener beside
    /// its plaintext one ([`security::SaslSsl`]). [`Broker::bootstrap`] stays the plaintext
    /// listener, for the harness; give the services under test [`security::SaslSsl::client_env`].
    ///
    /// # Errors
    /// As [`Broker::start`], and when `keytool` cannot make the certificate.
    pub async fn start_sasl_ssl() -> anyhow::Result<(Self, security::SaslSsl)> {
        ensure_kafka_jars()?;
        let mut last = None;
        for attempt in 1..=3 {
            let secured = security::SaslSsl::new(free_port()?)?;
            match Self::start_jvm(BrokerKind::Real, Some(&secured), 0).await {
                Ok(b) => return Ok((b, secured)),
                Err(e) => {
                    println!("[harness] Kafka (SASL_SSL) start attempt {attempt} failed: {e:#}");
                    last = Some(e);
                }
            }
        }
        Err(last.expect("three attempts were made"))
    }

    /// The single JVM broker (as [`BrokerKind::Real`]) with `links` more listeners, each
    /// advertised at the port of a [`crate::link::LinkProxy`] in front of it: a client bootstrapped
    /// at [`Broker::link_bootstrap`] sends all its broker traffic through that proxy, which a test
    /// can freeze, slow or cut ([`Broker::link`]). [`Broker::bootstrap`] stays direct.
    ///
    /// # Errors
    /// As [`Broker::start`].
    pub async fn start_with_links(links: usize) -> anyhow::Result<Self> {
        ensure_kafka_jars()?;
        let mut last = None;
        for attempt in 1..=3 {
            match Self::start_jvm(BrokerKind::Real, None, links).await {
                Ok(b) => return Ok(b),
                Err(e) => {
                    println!("[harness] Kafka start attempt {attempt} failed: {e:#}");
                    last = Some(e);
                }
            }
        }
        Err(last.expect("three attempts were made"))
    }

    /// How many links [`Broker::start_with_links`] made.
    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// The proxy of link `i`.
    pub fn link(&self, i: usize) -> Option<&crate::link::LinkProxy> {
        self.links.get(i)
    }

    /// The bootstrap address of link `i` (its proxy).
    pub fn link_bootstrap(&self, i: usize) -> Option<String> {
        self.links.get(i).map(|l| format!("127.0.0.1:{}", l.port))
    }

    /// Starts the JVM broker once on fresh ports (plus `secured`'s listener, or `links` proxied
    /// listeners) and waits until it listens.
    async fn start_jvm(kind: BrokerKind, secured: Option<&security::SaslSsl>, links: usize) -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut controller = free_port()?;
        while controller == port {
            controller = free_port()?;
        }
        // Each link: a listener on a port of its own, advertised at its proxy's port.
        let mut proxies = Vec::new();
        let mut link_listeners = Vec::new();
        for _ in 0..links {
            let mut listen = free_port()?;
            while [port, controller].contains(&listen) || link_listeners.contains(&listen) {
                listen = free_port()?;
            }
            proxies.push(crate::link::LinkProxy::start(0, format!("127.0.0.1:{listen}")).await?);
            link_listeners.push(listen);
        }
        let dir = tempfile::Builder::new().prefix("e2e-kafka-").tempdir()?;
        let script = repo_root().join("scripts/kafka/start.sh");
        println!("[harness] starting Apache Kafka on 127.0.0.1:{port} (logs: {}/server.log)", dir.path().display());
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(&script)
            .arg(port.to_string())
            .arg(dir.path())
            .env("KAFKA_CONTROLLER_PORT", controller.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(s) = secured {
            cmd.env("KAFKA_EXTRA_PROPERTIES", s.server_properties(port, controller));
        } else if links > 0 {
            let names: Vec<String> = (1..=links).map(|i| format!("LINK{i}")).collect();
            let listeners: String = names.iter().zip(&link_listeners).map(|(n, l)| format!(",{n}://127.0.0.1:{l}")).collect();
            let advertised: String = names.iter().zip(&proxies).map(|(n, p)| format!(",{n}://127.0.0.1:{}", p.port)).collect();
            let map: String = names.iter().map(|n| format!(",{n}:PLAINTEXT")).collect();
            cmd.env(
                "KAFKA_EXTRA_PROPERTIES",
                format!(
                    "listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}{listeners}\n\
                     advertised.listeners=PLAINTEXT://127.0.0.1:{port}{advertised}\n\
                     listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT{map}\n"
                ),
            );
        }
        let links = proxies;
        crate::procs::die_with_parent(&mut cmd);
        let child = cmd.spawn().with_context(|| format!("run {}", script.display()))?;
        let bootstrap = format!("127.0.0.1:{port}");
        let started = Instant::now();
        let mut broker = Self { kind, bootstrap: bootstrap.clone(), inner: Inner::Real { child, _dir: dir }, links };
        loop {
            if tokio::net::TcpStream::connect(&bootstrap).await.is_ok() {
                break;
            }
            if let Inner::Real { child, _dir: dir } = &mut broker.inner {
                if let Some(status) = child.try_wait()? {
                    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
                    let why = log.lines().filter(|l| l.contains("ERROR") || l.contains("Exception")).take(3).collect::<Vec<_>>().join(" | ");
                    bail!("Kafka exited during start-up ({status}): {why}");
                }
            }
            if started.elapsed() > Duration::from_secs(90) {
                bail!("Kafka did not open {bootstrap} within 90 s");
            }
            if started.elapsed().as_secs().is_multiple_of(5) && started.elapsed().subsec_millis() < 250 {
                println!("[harness] waiting for Kafka to listen on {bootstrap} ({} s)", started.elapsed().as_secs());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        println!("[harness] Kafka is listening on {bootstrap} after {:.1} s", started.elapsed().as_secs_f64());
        Ok(broker)
    }

    /// The broker's pid when the harness runs it as a process (the real Kafka JVM).
    pub fn pid(&self) -> Option<u32> {
        match &self.inner {
            Inner::Real { child, .. } => Some(child.id()),
            _ => None,
        }
    }

    /// The cluster's nodes: id, ports, pid while running, whether paused.
    ///
    /// # Errors
    /// When this broker is not a [`BrokerKind::Cluster`].
    pub fn cluster_nodes(&self) -> anyhow::Result<Vec<ClusterNode>> {
        Ok(self.cluster()?.nodes())
    }

    /// SIGKILL to cluster node `id` (1, 2 or 3); returns once its process is gone.
    ///
    /// # Errors
    /// When this is not a cluster, or the node is not running.
    pub async fn kill_node(&self, id: i32) -> anyhow::Result<()> {
        self.cluster()?.kill(id).await
    }

    /// Starts cluster node `id` again on its data dir and ports, and waits (printing progress)
    /// until it listens: then it is registered with the controller and unfenced. Its replicas
    /// rejoin the ISR shortly after; [`Broker::wait_isr`] waits for that.
    ///
    /// # Errors
    /// When this is not a cluster, the node still runs, or it does not listen within 120 s.
    pub async fn restart_node(&self, id: i32) -> anyhow::Result<()> {
        self.cluster()?.restart(id).await
    }

    /// SIGSTOP to cluster node `id`: the process stays, its sockets stay open, it answers nothing.
    /// The controller fences it once `broker.session.timeout.ms` (9 s) passes without a heartbeat.
    ///
    /// # Errors
    /// When this is not a cluster, or the node is not running.
    pub fn pause_node(&self, id: i32) -> anyhow::Result<()> {
        self.cluster()?.signal(id, true)
    }

    /// SIGCONT to cluster node `id` (paused by [`Broker::pause_node`]).
    ///
    /// # Errors
    /// When this is not a cluster, or the node is not running.
    pub fn resume_node(&self, id: i32) -> anyhow::Result<()> {
        self.cluster()?.signal(id, false)
    }

    /// `(leader, replicas, isr)` of `topic`/`partition`, from the brokers' metadata (a
    /// librdkafka metadata request to a running, unpaused node). Retried for up to 15 s while
    /// the partition has no leader or the topic is not known yet; the leader is what the
    /// controller last decided: a node killed a moment ago stays leader until it is fenced.
    ///
    /// # Errors
    /// When the partition still has no leader after 15 s, or no broker answers.
    pub async fn partition_replicas(&self, topic: &str, partition: i32) -> anyhow::Result<(i32, Vec<i32>, Vec<i32>)> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < Duration::from_secs(15) {
            match fetch_partition_async(&self.metadata_bootstrap(), topic, partition).await {
                Ok(state) => return Ok(state),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("{topic}/{partition}: no settled metadata after 15 s: {last}")
    }

    /// Waits until `topic`/`partition` has at least `n` in-sync replicas, printing progress
    /// every 5 s; returns the `(leader, replicas, isr)` it then has.
    ///
    /// # Errors
    /// When `timeout` passes first.
    pub async fn wait_isr(&self, topic: &str, partition: i32, n: usize, timeout: Duration) -> anyhow::Result<(i32, Vec<i32>, Vec<i32>)> {
        self.wait_partition(topic, partition, &format!("{topic}/{partition} to have {n} in-sync replicas"), timeout, |_, _, isr| isr.len() >= n).await
    }

    /// Waits until `pred(leader, replicas, isr)` holds for `topic`/`partition`, printing what
    /// it sees every 5 s; returns that state.
    ///
    /// # Errors
    /// When `timeout` passes first.
    pub async fn wait_partition(
        &self,
        topic: &str,
        partition: i32,
        what: &str,
        timeout: Duration,
        pred: impl Fn(i32, &[i32], &[i32]) -> bool,
    ) -> anyhow::Result<(i32, Vec<i32>, Vec<i32>)> {
        wait_partition_on(|| self.metadata_bootstrap(), topic, partition, what, timeout, pred).await
    }

    /// Where metadata requests go: the cluster's running, unpaused nodes, else the bootstrap.
    fn metadata_bootstrap(&self) -> String {
        match &self.inner {
            Inner::Cluster(c) => c.live_bootstrap(),
            _ => self.bootstrap.clone(),
        }
    }

    fn cluster(&self) -> anyhow::Result<&cluster::Cluster> {
        match &self.inner {
            Inner::Cluster(c) => Ok(c),
            _ => Err(anyhow!("this broker ({}) is not a Kafka cluster; start one with BrokerKind::Cluster", self.kind.label())),
        }
    }

    /// Creates `topic` alone on the embedded broker (the gateways' control topic; on the other
    /// brokers a gateway creates it).
    ///
    /// # Errors
    /// When the mock cluster refuses.
    pub fn precreate_one_topic(&self, topic: &str, partitions: i32) -> anyhow::Result<()> {
        if let Inner::Embedded { stop: Some(tx), .. } = &self.inner {
            let (done, rx) = std::sync::mpsc::channel();
            tx.send(MockCommand::CreateTopic { name: topic.to_owned(), partitions, done })?;
            rx.recv()?.map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// Creates `topic` and its snapshot topic ([`shared::snapshot::topic_for`]) on the embedded
    /// broker: librdkafka's mock cluster does not answer CreateTopics, so the publisher cannot
    /// (the other brokers get them from the publisher's admin call).
    ///
    /// # Errors
    /// When the mock cluster refuses.
    pub fn precreate_topic(&self, topic: &str, partitions: i32) -> anyhow::Result<()> {
        if let Inner::Embedded { stop: Some(tx), .. } = &self.inner {
            for name in [topic.to_owned(), shared::snapshot::topic_for(topic)] {
                let (done, rx) = std::sync::mpsc::channel();
                tx.send(MockCommand::CreateTopic { name, partitions, done })?;
                rx.recv()?.map_err(anyhow::Error::msg)?;
            }
        }
        Ok(())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        match &mut self.inner {
            Inner::Embedded { stop, thread } => {
                if let Some(tx) = stop.take() {
                    let _ = tx.send(MockCommand::Stop);
                }
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
            Inner::Real { child, .. } => {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
            // Stops its nodes itself (SIGTERM, then SIGKILL after 10 s).
            Inner::Cluster(_) | Inner::Container { .. } | Inner::External => {}
        }
    }
}

/// Makes sure Apache Kafka's jars are in `target/kafka` (`scripts/kafka/fetch.sh` resolves them
/// from Maven Central on first use; a no-op taking a few ms otherwise).
///
/// # Errors
/// When the script fails.
fn ensure_kafka_jars() -> anyhow::Result<()> {
    let fetch = repo_root().join("scripts/kafka/fetch.sh");
    println!("[harness] making sure Apache Kafka's jars are present ({})", fetch.display());
    let status = std::process::Command::new("bash").arg(&fetch).stdin(Stdio::null()).status()
        .with_context(|| format!("run {}", fetch.display()))?;
    if !status.success() {
        bail!("{} failed ({status}): Kafka's jars could not be resolved from Maven Central", fetch.display());
    }
    Ok(())
}

/// A TCP port free on loopback right now, and not handed out before by this process: the kernel
/// may give a port back as soon as its listener here closes, and two services of one fleet
/// started on the same port is a start that fails (seen: a gateway on the port of a node that
/// had not bound it yet).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> anyhow::Result<u16> {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> = std::sync::Mutex::new(std::collections::BTreeSet::new());
    for _ in 0..100 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if GIVEN.lock().expect("port set lock").insert(port) {
            return Ok(port);
        }
    }
    bail!("100 free ports in a row were ports this process had handed out already")
}
