//! A three-node Apache Kafka cluster on loopback: each node a combined broker+controller of one
//! static 3-voter KRaft quorum, started by `scripts/kafka/start.sh` as its own JVM (the pid the
//! harness holds is the JVM's), with replication factor 3 and `min.insync.replicas=2` by default.
//!
//! Every node can be killed (SIGKILL), paused (SIGSTOP), resumed (SIGCONT) and restarted on its
//! own data dir and ports while the other two keep running.
//!
//! The nodes are spawned by one thread, `kafka-cluster`, that lives as long as the cluster:
//! [`crate::procs::die_with_parent_by`] (Linux `PR_SET_PDEATHSIG`) signals a child when the
//! *thread* that spawned it ends, so a node spawned from a tokio worker or a test's thread would
//! be killed when that thread goes away. With the spawning thread tied to the cluster, a node dies
//! when the cluster is dropped (SIGTERM, SIGKILL after 10 s) or when the harness process dies
//! (SIGKILL from the kernel).

use super::repo_root;
use anyhow::{anyhow, bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use shared::kafka::KafkaSettings;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Nodes in the cluster (ids 1, 2, 3); every one is a broker and a controller (voter).
pub const NODES: i32 = 3;
/// The cluster's `default.replication.factor` and the internal topics' replication factor.
pub const REPLICATION_FACTOR: i32 = 3;
/// The cluster's `min.insync.replicas` (and `transaction.state.log.min.isr`).
pub const MIN_INSYNC_REPLICAS: i32 = 2;
/// The topic created at start-up to check that replication works (1 partition, RF 3).
pub const READY_TOPIC: &str = "e2e-cluster-ready";

/// How long all three JVMs may take to listen at start-up (about 17 s on 2 busy cores).
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a restarted node may take to listen again.
const RESTART_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the nodes get to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// One node of the cluster, as [`super::Broker::cluster_nodes`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// `node.id`, also its broker id in metadata (1, 2 or 3).
    pub id: i32,
    /// Client port, on 127.0.0.1.
    pub port: u16,
    /// KRaft controller port, on 127.0.0.1.
    pub controller_port: u16,
    /// The JVM's pid while the process exists (a paused node included).
    pub pid: Option<u32>,
    /// Stopped with SIGSTOP and not resumed yet.
    pub paused: bool,
    /// Its data dir: `server.log`, `server.properties`, `data/`.
    pub dir: PathBuf,
}

impl ClusterNode {
    /// `127.0.0.1:<client port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// A node and its process.
struct Node {
    id: i32,
    port: u16,
    controller_port: u16,
    dir: PathBuf,
    proc: Mutex<Proc>,
}

#[derive(Default)]
struct Proc {
    child: Option<Child>,
    paused: bool,
}

impl Node {
    fn lock(&self) -> MutexGuard<'_, Proc> {
        self.proc.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The running child's pid, forgetting a child that has exited on its own.
    fn pid(&self) -> Option<u32> {
        let mut p = self.lock();
        if let Some(c) = p.child.as_mut() {
            if !matches!(c.try_wait(), Ok(None)) {
                p.child = None;
                p.paused = false;
            }
        }
        p.child.as_ref().map(Child::id)
    }

    /// Why the node's process is gone, when it is: its exit status and the first ERROR lines of
    /// its log.
    fn exited(&self) -> Option<String> {
        let mut p = self.lock();
        let status: ExitStatus = match p.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(s))) => s,
            Some(Ok(None)) => return None,
            Some(Err(e)) => return Some(format!("node {}: cannot wait for it: {e}", self.id)),
            None => return Some(format!("node {} is not running", self.id)),
        };
        p.child = None;
        p.paused = false;
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let why = log.lines().filter(|l| l.contains("ERROR") || l.contains("Exception")).take(3).collect::<Vec<_>>().join(" | ");
        Some(format!("node {} exited ({status}): {why}", self.id))
    }
}

/// A request to the spawning thread.
struct SpawnRequest {
    cmd: Command,
    reply: tokio::sync::oneshot::Sender<std::io::Result<Child>>,
}

/// The running cluster; its nodes are stopped when it is dropped.
pub(super) struct Cluster {
    nodes: Vec<Node>,
    cluster_id: String,
    voters: String,
    spawner: Option<mpsc::Sender<SpawnRequest>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Removed after the nodes have stopped (fields drop after `Drop::drop`).
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the three nodes on fresh ports from the kernel and waits until they listen, the
    /// metadata lists three brokers and a topic with three in-sync replicas can be created.
    ///
    /// # Errors
    /// When a node exits during start-up (a port taken between the check and the JVM's bind, say:
    /// the caller retries on fresh ports) or the cluster is not ready in time.
    pub(super) async fn start() -> anyhow::Result<Self> {
        let ports = free_ports(2 * NODES as usize)?;
        let dir = tempfile::Builder::new().prefix("e2e-kafka-cluster-").tempdir()?;
        let nodes: Vec<Node> = (1..=NODES)
            .zip(ports.chunks(2))
            .map(|(id, p)| Node {
                id,
                port: p[0],
                controller_port: p[1],
                dir: dir.path().join(format!("node-{id}")),
                proc: Mutex::default(),
            })
            .collect();
        let voters = nodes.iter().map(|n| format!("{}@127.0.0.1:{}", n.id, n.controller_port)).collect::<Vec<_>>().join(",");
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        // Ends when the cluster drops its sender, after it has stopped the nodes.
        let thread = std::thread::Builder::new().name("kafka-cluster".into()).spawn(move || {
            while let Ok(SpawnRequest { mut cmd, reply }) = rx.recv() {
                let _ = reply.send(cmd.spawn());
            }
        })?;
        let cluster = Self { nodes, cluster_id: new_cluster_id(), voters, spawner: Some(tx), thread: Some(thread), dir };
        println!(
            "[harness] starting a three-node Apache Kafka cluster on {} (cluster id {}, logs: {}/node-<id>/server.log)",
            cluster.bootstrap(),
            cluster.cluster_id,
            cluster.dir.path().display()
        );
        let started = Instant::now();
        for n in &cluster.nodes {
            cluster.spawn_node(n).await?;
        }
        let ids: Vec<i32> = cluster.nodes.iter().map(|n| n.id).collect();
        cluster.wait_listening(&ids, START_TIMEOUT, started).await?;
        println!("[harness] all three Kafka nodes listen after {:.1} s", started.elapsed().as_secs_f64());
        cluster.wait_replicating(started).await?;
        println!(
            "[harness] Kafka cluster ready after {:.1} s: 3 brokers in the metadata, topic {READY_TOPIC} has 3 in-sync replicas",
            started.elapsed().as_secs_f64()
        );
        Ok(cluster)
    }

    /// Every node's client address, comma-separated.
    pub(super) fn bootstrap(&self) -> String {
        self.nodes.iter().map(Node::addr).collect::<Vec<_>>().join(",")
    }

    /// The client addresses of the nodes that run and are not paused (all of them when none is):
    /// a metadata request sent to a paused node would wait for its whole timeout.
    pub(super) fn live_bootstrap(&self) -> String {
        let live: Vec<String> = self.nodes.iter().filter(|n| n.pid().is_some() && !n.lock().paused).map(Node::addr).collect();
        if live.is_empty() { self.bootstrap() } else { live.join(",") }
    }

    /// Every node's id, ports, pid and state.
    pub(super) fn nodes(&self) -> Vec<ClusterNode> {
        self.nodes
            .iter()
            .map(|n| {
                let pid = n.pid();
                ClusterNode { id: n.id, port: n.port, controller_port: n.controller_port, pid, paused: pid.is_some() && n.lock().paused, dir: n.dir.clone() }
            })
            .collect()
    }

    fn node(&self, id: i32) -> anyhow::Result<&Node> {
        self.nodes.iter().find(|n| n.id == id).ok_or_else(|| anyhow!("no Kafka node {id} (the cluster's nodes are 1..={NODES})"))
    }

    /// SIGKILL to node `id`, and waits until its process is gone.
    pub(super) async fn kill(&self, id: i32) -> anyhow::Result<()> {
        let node = self.node(id)?;
        let child = node.lock().child.take();
        let Some(mut child) = child else { bail!("Kafka node {id} is not running") };
        let pid = child.id();
        // An error here means it has exited already; the wait below reaps it either way.
        let _ = child.kill();
        let status = tokio::task::spawn_blocking(move || child.wait()).await?.with_context(|| format!("wait for Kafka node {id}"))?;
        node.lock().paused = false;
        println!("[harness] kill -9 Kafka node {id} (pid {pid}): {status}");
        Ok(())
    }

    /// Starts node `id` again on its data dir and ports, and waits until it listens.
    pub(super) async fn restart(&self, id: i32) -> anyhow::Result<()> {
        let node = self.node(id)?;
        if let Some(pid) = node.pid() {
            bail!("Kafka node {id} is still running (pid {pid}); kill it first");
        }
        println!("[harness] restarting Kafka node {id} on {} (same data dir and ports)", node.addr());
        let started = Instant::now();
        let pid = self.spawn_node(node).await?;
        self.wait_listening(&[id], RESTART_TIMEOUT, started).await?;
        println!("[harness] Kafka node {id} (pid {pid}) listens again after {:.1} s", started.elapsed().as_secs_f64());
        Ok(())
    }

    /// SIGSTOP (`pause`) or SIGCONT to node `id`.
    pub(super) fn signal(&self, id: i32, pause: bool) -> anyhow::Result<()> {
        use nix::sys::signal::{kill, Signal};
        let node = self.node(id)?;
        let Some(pid) = node.pid() else { bail!("Kafka node {id} is not running") };
        let (signal, verb) = if pause { (Signal::SIGSTOP, "paused") } else { (Signal::SIGCONT, "resumed") };
        kill(nix::unistd::Pid::from_raw(pid as i32), signal).with_context(|| format!("{signal} to Kafka node {id} (pid {pid})"))?;
        node.lock().paused = pause;
        println!("[harness] {verb} Kafka node {id} (pid {pid}, {signal})");
        Ok(())
    }

    /// Spawns `node`'s `start.sh` from the cluster's thread; returns the pid (the JVM's: the
    /// script ends in `exec java`).
    async fn spawn_node(&self, node: &Node) -> anyhow::Result<u32> {
        let script = repo_root().join("scripts/kafka/start.sh");
        let mut cmd = Command::new("bash");
        cmd.arg(&script)
            .arg(node.port.to_string())
            .arg(&node.dir)
            .env("KAFKA_NODE_ID", node.id.to_string())
            .env("KAFKA_CONTROLLER_PORT", node.controller_port.to_string())
            .env("KAFKA_QUORUM_VOTERS", &self.voters)
            .env("KAFKA_CLUSTER_ID", &self.cluster_id)
            .env("KAFKA_REPLICATION_FACTOR", REPLICATION_FACTOR.to_string())
            .env("KAFKA_MIN_INSYNC_REPLICAS", MIN_INSYNC_REPLICAS.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        crate::procs::die_with_parent_by(&mut cmd, nix::sys::signal::Signal::SIGKILL);
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.spawner
            .as_ref()
            .context("the cluster is stopping")?
            .send(SpawnRequest { cmd, reply })
            .map_err(|_| anyhow!("the cluster's spawning thread is gone"))?;
        let child = answer.await.context("the cluster's spawning thread is gone")?.with_context(|| format!("run {}", script.display()))?;
        let pid = child.id();
        let mut p = node.lock();
        p.child = Some(child);
        p.paused = false;
        Ok(pid)
    }

    /// Waits until every node of `ids` accepts TCP connections on its client port (a broker opens
    /// it once it is registered with the active controller and unfenced), printing progress every
    /// 5 s.
    ///
    /// # Errors
    /// When one of them exits first, or `timeout` passes (counted from `since`).
    async fn wait_listening(&self, ids: &[i32], timeout: Duration, since: Instant) -> anyhow::Result<()> {
        let mut last_report = Instant::now();
        loop {
            let mut listening = Vec::new();
            for &id in ids {
                let node = self.node(id)?;
                if let Some(why) = node.exited() {
                    bail!("Kafka {why}");
                }
                if tokio::net::TcpStream::connect(node.addr()).await.is_ok() {
                    listening.push(id);
                }
            }
            if listening.len() == ids.len() {
                return Ok(());
            }
            if since.elapsed() > timeout {
                bail!("Kafka nodes {ids:?}: only {listening:?} listen after {} s", timeout.as_secs());
            }
            if last_report.elapsed() >= Duration::from_secs(5) {
                println!(
                    "[harness] waiting for Kafka nodes {ids:?} to listen: {}/{} do ({} s)",
                    listening.len(),
                    ids.len(),
                    since.elapsed().as_secs()
                );
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the metadata lists every broker, then creates [`READY_TOPIC`] with
    /// replication factor 3 and waits until its partition has three in-sync replicas.
    async fn wait_replicating(&self, since: Instant) -> anyhow::Result<()> {
        let bootstrap = self.bootstrap();
        let b = bootstrap.clone();
        crate::procs::eventually("the cluster's metadata to list 3 brokers", Duration::from_secs(60), || {
            let b = b.clone();
            async move {
                let n = tokio::task::spawn_blocking(move || broker_count(&b)).await.map_err(|e| e.to_string())??;
                if n >= NODES as usize { Ok(Some(())) } else { Err(format!("{n} brokers")) }
            }
        })
        .await?;
        println!("[harness] the metadata lists 3 brokers after {:.1} s; creating {READY_TOPIC} (replication factor {REPLICATION_FACTOR})", since.elapsed().as_secs_f64());
        let b = bootstrap.clone();
        crate::procs::eventually(&format!("topic {READY_TOPIC} to be created with 3 replicas"), Duration::from_secs(60), || {
            let b = b.clone();
            async move { super::create_topic(&b, READY_TOPIC, 1, REPLICATION_FACTOR).await.map(Some).map_err(|e| format!("{e:#}")) }
        })
        .await?;
        super::metadata::wait_partition_on(|| bootstrap.clone(), READY_TOPIC, 0, &format!("{READY_TOPIC}/0 to have 3 in-sync replicas"), Duration::from_secs(60), |_, _, isr| {
            isr.len() >= NODES as usize
        })
        .await?;
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        let started = Instant::now();
        let mut children: Vec<(i32, Child)> = self.nodes.iter().filter_map(|n| n.lock().child.take().map(|c| (n.id, c))).collect();
        if !children.is_empty() {
            println!("[harness] stopping the Kafka cluster (SIGTERM to {} node(s), SIGKILL after {} s)", children.len(), STOP_TIMEOUT.as_secs());
        }
        for (_, c) in &children {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = kill(pid, Signal::SIGTERM);
            // A paused node handles the SIGTERM only once it runs again.
            let _ = kill(pid, Signal::SIGCONT);
        }
        while !children.is_empty() && started.elapsed() < STOP_TIMEOUT {
            children.retain_mut(|(_, c)| matches!(c.try_wait(), Ok(None)));
            std::thread::sleep(Duration::from_millis(100));
        }
        for (id, c) in &mut children {
            println!("[harness] Kafka node {id} still runs {} s after SIGTERM: SIGKILL", STOP_TIMEOUT.as_secs());
            let _ = c.kill();
            let _ = c.wait();
        }
        if started.elapsed() > Duration::from_millis(200) {
            println!("[harness] Kafka cluster stopped in {:.1} s", started.elapsed().as_secs_f64());
        }
        // The spawning thread ends once its channel closes.
        self.spawner.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `n` distinct TCP ports free on loopback right now (all bound at once, so none repeats).
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>()?;
    listeners.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// A fresh cluster id of the shape of Kafka's `Uuid.randomUuid()`: 16 random bytes in URL-safe
/// base64 without padding (22 characters), never starting with `-` and never one of the two ids
/// Kafka reserves (all zeros, and 1).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    loop {
        let bytes: [u8; 16] = rand::random();
        if u128::from_be_bytes(bytes) <= 1 {
            continue;
        }
        let mut id = String::with_capacity(22);
        for chunk in bytes.chunks(3) {
            let at = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
            let v = (at(0) << 16) | (at(1) << 8) | at(2);
            // 3 bytes make 4 characters; the last, single byte makes 2 (no padding).
            for i in 0..=chunk.len() {
                id.push(char::from(ALPHABET[((v >> (18 - 6 * i)) & 0x3f) as usize]));
            }
        }
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// How many brokers the metadata lists (blocking).
fn broker_count(bootstrap: &str) -> Result<usize, String> {
    let consumer: BaseConsumer = KafkaSettings::new(bootstrap).reader("e2e-cluster-metadata").create().map_err(|e| e.to_string())?;
    let md = consumer.fetch_metadata(None, Duration::from_secs(3)).map_err(|e| e.to_string())?;
    Ok(md.brokers().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_look_like_kafka_uuids() {
        for _ in 0..200 {
            let id = new_cluster_id();
            assert_eq!(id.len(), 22, "{id}");
            assert!(!id.starts_with('-'), "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{id}");
            // The 4 padding bits of the last character are zero: it is one of A, Q, g, w.
            assert!(matches!(id.as_bytes()[21], b'A' | b'Q' | b'g' | b'w'), "{id}");
        }
    }
}
