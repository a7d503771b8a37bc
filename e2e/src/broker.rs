//! Kafka-protocol brokers for the harness.
//!
//! | kind | what | selected by |
//! |---|---|---|
//! | embedded | librdkafka's mock cluster (`rdkafka::mocking`), hosted by the harness process on loopback | default |
//! | real | Apache Kafka 4.x (KRaft, single node) from Maven Central, run with the machine's Java by `scripts/kafka/start.sh` | `E2E_BROKER=real` / `--kafka real` |
//! | container | the official `apache/kafka` image in Docker, through testcontainers | `E2E_BROKER=container` |
//! | external | any broker you run | `KAFKA_BOOTSTRAP=host:port` |

use anyhow::{bail, Context};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Which broker to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerKind {
    Embedded,
    Real,
    /// `apache/kafka` in a container started with testcontainers (needs a Docker engine).
    Container,
    External(String),
}

impl BrokerKind {
    /// `KAFKA_BOOTSTRAP` wins, then `E2E_BROKER` (`embedded` | `real`), else embedded.
    pub fn from_env() -> Self {
        if let Ok(b) = std::env::var("KAFKA_BOOTSTRAP") {
            if !b.trim().is_empty() {
                return BrokerKind::External(b);
            }
        }
        match std::env::var("E2E_BROKER").as_deref() {
            Ok("real") => BrokerKind::Real,
            Ok("container") => BrokerKind::Container,
            _ => BrokerKind::Embedded,
        }
    }

    /// A short name for reports.
    pub fn label(&self) -> String {
        match self {
            BrokerKind::Embedded => "embedded: librdkafka mock cluster".into(),
            BrokerKind::Real => "Apache Kafka 4.4.0, KRaft, single node, on the JVM".into(),
            BrokerKind::Container => format!("Apache Kafka in Docker ({KAFKA_IMAGE}:{KAFKA_TAG}), via testcontainers"),
            BrokerKind::External(b) => format!("external broker at {b}"),
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
}

enum Inner {
    Embedded { stop: Option<std::sync::mpsc::Sender<MockCommand>>, thread: Option<std::thread::JoinHandle<()>> },
    Real { child: std::process::Child, _dir: tempfile::TempDir },
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
                Ok(Self { kind, bootstrap, inner: Inner::Embedded { stop: Some(cmd_tx), thread: Some(thread) } })
            }
            BrokerKind::Real => {
                // Resolve the jars from Maven Central when they are not there yet (a no-op otherwise).
                let fetch = repo_root().join("scripts/kafka/fetch.sh");
                println!("[harness] making sure Apache Kafka's jars are present ({})", fetch.display());
                let status = std::process::Command::new("bash").arg(&fetch).stdin(Stdio::null()).status()
                    .with_context(|| format!("run {}", fetch.display()))?;
                if !status.success() {
                    bail!("{} failed ({status}): Kafka's jars could not be resolved from Maven Central", fetch.display());
                }
                // Both ports come from the kernel's free ports; one can still be taken between
                // the check and the JVM's bind (an outgoing connection's local port, say), so a
                // broker that exits during start-up is retried on fresh ports.
                let mut last = None;
                for attempt in 1..=3 {
                    match Self::start_jvm(kind.clone()).await {
                        Ok(b) => return Ok(b),
                        Err(e) => {
                            println!("[harness] Kafka start attempt {attempt} failed: {e:#}");
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
                })
            }
            BrokerKind::External(b) => Ok(Self { bootstrap: b.clone(), kind, inner: Inner::External }),
        }
    }

    /// Starts the JVM broker once on fresh ports and waits until it listens.
    async fn start_jvm(kind: BrokerKind) -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut controller = free_port()?;
        while controller == port {
            controller = free_port()?;
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
        crate::procs::die_with_parent(&mut cmd);
        let child = cmd.spawn().with_context(|| format!("run {}", script.display()))?;
        let bootstrap = format!("127.0.0.1:{port}");
        let started = Instant::now();
        let mut broker = Self { kind, bootstrap: bootstrap.clone(), inner: Inner::Real { child, _dir: dir } };
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

    /// Creates `topic` on the embedded broker (the others get it from the publisher's admin call).
    ///
    /// # Errors
    /// When the mock cluster refuses.
    pub fn precreate_topic(&self, topic: &str, partitions: i32) -> anyhow::Result<()> {
        if let Inner::Embedded { stop: Some(tx), .. } = &self.inner {
            let (done, rx) = std::sync::mpsc::channel();
            tx.send(MockCommand::CreateTopic { name: topic.into(), partitions, done })?;
            rx.recv()?.map_err(anyhow::Error::msg)?;
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
            Inner::Container { .. } | Inner::External => {}
        }
    }
}

/// The repository root (where `Cargo.toml` of the workspace is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("e2e is one level below the root").to_path_buf()
}

/// A TCP port free on loopback right now.
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
