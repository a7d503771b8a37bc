//! Broker and publisher faults on a real three-node Kafka cluster, each with the whole fleet,
//! clients through the gateway and a careful writer ([`crate::writer`]) publishing throughout:
//!
//! | case | fault |
//! |---|---|
//! | [`Case::LeaderKill`] | kill -9 of the leader broker of the busiest partition mid-stream; restarted 5 s later |
//! | [`Case::FollowerPause`] | SIGSTOP of one follower of the busiest partition for 6 s (longer than the publisher's 3 s produce timeout, shorter than KRaft's 9 s broker session timeout, so it stays in the ISR and `acks=all` waits for it), then SIGCONT |
//! | [`Case::SecondPublisher`] | a second publisher started on the topic while the writer publishes: it fences the first, which must stop, and the gateway moves to it |
//! | [`Case::PublisherKill`] | kill -9 of the publisher with requests in flight; restarted 2 s later |
//!
//! Each ends with the promise checked three ways: every client saw every version of its canvas
//! once and in order and ends with the publisher's hash ([`crate::checker`]); the log holds every
//! canvas's versions 1..n once each and every acknowledged publish at its version with its key
//! ([`crate::audit`]); and the writer gave up on nothing. The report says what the fault was and
//! what each client saw (events, reconnects, longest wait between two events).

use crate::audit::{self, Audit};
use crate::broker::Broker;
use crate::checker::{Summary, Verdict};
use crate::client::{Client, ClientReport, Kind};
use crate::fleet::{Fleet, FleetSpec};
use crate::procs::{eventually, Timeline};
use crate::scenario::{finish, pick_canvases, spawn_clients, wait_for_heads};
use crate::writer::{Writer, WriterStats};
use anyhow::Context;
use shared::partitioner::partition_for;
use shared::CanvasDims;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A fault case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    LeaderKill,
    FollowerPause,
    SecondPublisher,
    PublisherKill,
}

/// Clients, canvases and the writer's rate of every case.
pub const CLIENTS: usize = 8;
pub const CANVASES: usize = 4;
pub const RATE: f64 = 40.0;
/// The publisher's produce timeout in [`Case::FollowerPause`], and the pause.
pub const PAUSE_PRODUCE_TIMEOUT: Duration = Duration::from_secs(3);
pub const PAUSE: Duration = Duration::from_secs(6);

/// What one client saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub name: String,
    pub channel: String,
    pub events: usize,
    pub reconnects: usize,
    /// Longest time between two events it received after the fault began, ms.
    pub longest_wait_ms: u64,
}

/// What a case did and found.
#[derive(Debug, Clone)]
pub struct FaultReport {
    pub case: Case,
    /// The fault, in words, with the brokers or processes it hit.
    pub fault: String,
    pub verdicts: Vec<Verdict>,
    pub seen: Vec<Seen>,
    pub audit: Audit,
    pub acked: usize,
    pub attempts: u64,
    pub retried_not_applied: u64,
    pub retried_unknown: u64,
    pub retried_in_flight: u64,
    /// Publishes the writer gave up on, or answers it must never get.
    pub writer_failed: Vec<(String, String)>,
    /// Longest time one publish took to be acknowledged (retries included), ms.
    pub longest_publish_ms: u64,
    /// Case-specific checks that failed.
    pub problems: Vec<String>,
}

impl FaultReport {
    /// The promise over the clients.
    pub fn promise(&self) -> Summary {
        Summary::of(&self.verdicts)
    }

    /// Whether the promise held on every side and the case's own checks passed.
    pub fn ok(&self) -> bool {
        self.promise().ok() && self.audit.ok() && self.writer_failed.is_empty() && self.acked > 0 && self.problems.is_empty()
    }

    /// The report for the test log.
    pub fn text(&self) -> String {
        let p = self.promise();
        let mut s = format!("== {:?}: {}\n", self.case, self.fault);
        s += &format!(
            "   clients: lost {} / duplicated {} / out of order {} / extra snapshots {} / hash mismatches {} over {} clients\n",
            p.lost, p.duplicated, p.out_of_order, p.extra_snapshots, p.hash_mismatches, p.clients
        );
        s += &format!("   {}\n", self.audit.summary());
        s += &format!(
            "   writer: {} publishes acknowledged in {} attempts (retried: {} nothing applied, {} outcome unknown, {} key in flight); longest publish {} ms; given up {}\n",
            self.acked, self.attempts, self.retried_not_applied, self.retried_unknown, self.retried_in_flight, self.longest_publish_ms, self.writer_failed.len()
        );
        for c in &self.seen {
            s += &format!("   {} ({}): {} events, {} reconnects, longest wait {} ms\n", c.name, c.channel, c.events, c.reconnects, c.longest_wait_ms);
        }
        for pr in &self.problems {
            s += &format!("   PROBLEM: {pr}\n");
        }
        s
    }
}

/// A fleet on the cluster with clients and a writer running.
struct Stage {
    fleet: Fleet,
    canvases: Vec<String>,
    clients: Vec<Client>,
    writer: Writer,
    /// The partition with the most of the stage's canvases, and its canvas count.
    busiest: i32,
}

async fn stage(broker: &Broker, spec: FleetSpec, tl: Arc<Timeline>) -> anyhow::Result<Stage> {
    let dims = CanvasDims { width: spec.width, height: spec.height };
    let partitions = spec.partitions;
    let fleet = Fleet::start(broker, spec, tl.clone()).await.context("start the fleet")?;
    let node_ids: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let state = fleet.fleet_state().await.map_err(anyhow::Error::msg)?;
    let canvases = pick_canvases(&state, partitions, CANVASES, &node_ids);
    let mut count = std::collections::BTreeMap::<i32, usize>::new();
    for c in &canvases {
        *count.entry(partition_for(c.as_bytes(), partitions) as i32).or_default() += 1;
    }
    let busiest = count.iter().max_by_key(|(p, n)| (**n, -**p)).map(|(p, _)| *p).unwrap_or(0);
    let clients = spawn_clients(&fleet, &canvases, CLIENTS, dims).await?;
    let writer = Writer::start(&fleet.gateway.url(), canvases.clone(), RATE, dims.width, dims.height);
    tl.mark(format!("writer: {RATE} events/s through the gateway with idempotency keys over {}", canvases.join(", ")));
    Ok(Stage { fleet, canvases, clients, writer, busiest })
}

/// Stops the writer, waits for every client to reach its canvas's head and checks everything.
async fn conclude(stage: Stage, broker: &Broker, case: Case, fault: String, fault_at_ms: u64, problems: Vec<String>) -> anyhow::Result<FaultReport> {
    let Stage { mut fleet, canvases, clients, writer, .. } = stage;
    let stats: Arc<WriterStats> = writer.stop().await;
    fleet.timeline.mark(format!("writer stopped: {} acknowledged", stats.acked_count()));
    let truths = wait_for_heads(&fleet, &clients, &canvases).await?;
    let (reports, verdicts) = finish(clients, &truths).await;
    let acked = stats.acked.lock().expect("acked lock").clone();
    let audit = audit::audit(&broker.bootstrap, &fleet.topic, acked.clone()).await?;
    let mut problems = problems;
    for (c, (head, _)) in &truths {
        let logged = audit.heads.get(c).copied().unwrap_or(0);
        if logged != *head {
            problems.push(format!("{c}: the publisher's head is {head}, the log's {logged}"));
        }
    }
    fleet.stop().await;
    let seen = reports.iter().map(|r| seen(r, fault_at_ms)).collect();
    let writer_failed = stats.failed.lock().expect("failed lock").clone();
    Ok(FaultReport {
        case,
        fault,
        verdicts,
        seen,
        audit,
        acked: acked.len(),
        attempts: stats.attempts.load(Ordering::Relaxed),
        retried_not_applied: stats.retried_not_applied.load(Ordering::Relaxed),
        retried_unknown: stats.retried_unknown.load(Ordering::Relaxed),
        retried_in_flight: stats.retried_in_flight.load(Ordering::Relaxed),
        writer_failed,
        longest_publish_ms: stats.longest_ms.load(Ordering::Relaxed),
        problems,
    })
}

/// What `r` saw from `from_ms` on: its events, reconnects and longest wait between two events.
pub fn seen(r: &ClientReport, from_ms: u64) -> Seen {
    let times: Vec<u64> = r.got.iter().filter(|g| g.kind == Kind::Event).map(|g| g.at_ms).collect();
    let longest = times.windows(2).filter(|w| w[1] >= from_ms).map(|w| w[1] - w[0].max(from_ms)).max().unwrap_or(0);
    Seen { name: r.name.clone(), channel: r.channel.clone(), events: times.len(), reconnects: r.sessions.len().saturating_sub(1), longest_wait_ms: longest }
}

/// Restarts any node that is down and resumes any that is paused (a case that failed half way
/// must not leave the next one a broken cluster), then waits until the cluster is whole.
///
/// # Errors
/// When a node does not come back.
pub async fn heal(broker: &Broker) -> anyhow::Result<()> {
    for n in broker.cluster_nodes()? {
        if n.paused {
            broker.resume_node(n.id)?;
        }
        if n.pid.is_none() {
            broker.restart_node(n.id).await?;
        }
    }
    Ok(())
}

/// Runs `case` on `broker` (a three-node cluster: [`crate::broker::BrokerKind::Cluster`]).
///
/// # Errors
/// When a step does not happen in time; a run that completes returns its report whether or not
/// the promise held (see [`FaultReport::ok`]).
pub async fn run(broker: &Broker, case: Case, echo: bool) -> anyhow::Result<FaultReport> {
    heal(broker).await?;
    let tl = Timeline::new(echo);
    let result = run_case(broker, case, tl.clone()).await;
    if let Err(e) = &result {
        eprintln!("[harness] {case:?} failed: {e:#}\n[harness] timeline so far:");
        for e in tl.entries() {
            eprintln!("{:>7.2}s {:<10} {}", e.at.as_secs_f64(), e.source, e.text);
        }
    }
    // Every process's log lines, for diagnosis: E2E_LOG_DIR=<dir> writes <dir>/<case>-<process>.log.
    if let Some(dir) = std::env::var_os("E2E_LOG_DIR") {
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        for source in ["publisher", "publisher-2", "ws-1", "ws-2", "gateway"] {
            let lines = tl.logs_of(source);
            if !lines.is_empty() {
                let _ = std::fs::write(dir.join(format!("{case:?}-{source}.log")), lines.join("\n"));
            }
        }
    }
    // Whatever happened, leave the cluster whole for the next case.
    heal(broker).await?;
    result
}

async fn run_case(broker: &Broker, case: Case, tl: Arc<Timeline>) -> anyhow::Result<FaultReport> {
    let mut spec = FleetSpec::default();
    match case {
        Case::FollowerPause => spec.publisher_env.push(("PRODUCE_TIMEOUT_MS".into(), PAUSE_PRODUCE_TIMEOUT.as_millis().to_string())),
        Case::SecondPublisher => spec.publishers = 2,
        Case::LeaderKill | Case::PublisherKill => {}
    }
    let mut st = stage(broker, spec, tl.clone()).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fault_at = shared::event::now_ms();
    let topic = st.fleet.topic.clone();
    let busiest = st.busiest;
    let mut problems = Vec::new();
    let fault = match case {
        Case::LeaderKill => {
            let (leader, replicas, isr) = broker.partition_replicas(&topic, busiest).await?;
            tl.mark(format!("kill -9 of broker {leader}, the leader of the busiest partition {busiest} (replicas {replicas:?}, ISR {isr:?})"));
            broker.kill_node(leader).await?;
            let (new_leader, _, isr_after) =
                broker.wait_partition(&topic, busiest, "a new leader", Duration::from_secs(60), |l, _, _| l >= 0 && l != leader).await?;
            tl.mark(format!("partition {busiest}: broker {new_leader} leads, ISR {isr_after:?}"));
            tokio::time::sleep(Duration::from_secs(5)).await;
            broker.restart_node(leader).await?;
            broker.wait_isr(&topic, busiest, 3, Duration::from_secs(90)).await?;
            tl.mark(format!("broker {leader} restarted and back in the ISR of partition {busiest}"));
            format!("kill -9 of broker {leader}, leader of partition {busiest} (the busiest), mid-stream; broker {new_leader} took over; restarted 5 s later")
        }
        Case::FollowerPause => {
            let (leader, replicas, isr) = broker.partition_replicas(&topic, busiest).await?;
            let follower = *replicas.iter().find(|r| **r != leader).context("a follower")?;
            tl.mark(format!("SIGSTOP of broker {follower}, a follower of the busiest partition {busiest} (leader {leader}, ISR {isr:?}) for {} s", PAUSE.as_secs()));
            broker.pause_node(follower)?;
            tokio::time::sleep(PAUSE).await;
            broker.resume_node(follower)?;
            tl.mark(format!("SIGCONT of broker {follower}"));
            broker.wait_isr(&topic, busiest, 3, Duration::from_secs(90)).await?;
            format!(
                "SIGSTOP of broker {follower}, follower of partition {busiest} (leader {leader}), for {} s with a {} s produce timeout, then SIGCONT",
                PAUSE.as_secs(),
                PAUSE_PRODUCE_TIMEOUT.as_secs()
            )
        }
        Case::SecondPublisher => {
            tl.mark("starting a second publisher on the same topic");
            st.fleet.start_publisher(1).await?;
            tl.mark("the second publisher accepts writes");
            let first = &mut st.fleet.publisher;
            let exited = eventually("the fenced first publisher to exit", Duration::from_secs(20), || {
                let running = first.running();
                async move { Ok((!running).then_some(())) }
            })
            .await;
            if exited.is_err() {
                problems.push("the first publisher was still running 20 s after the second took over".into());
            }
            "a second publisher started on the topic while the writer published through the gateway; it fenced the first, which exited".into()
        }
        Case::PublisherKill => {
            tl.mark("kill -9 of the publisher with requests in flight");
            st.fleet.publisher.kill9().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            st.fleet.publisher.start()?;
            crate::procs::wait_ready(&st.fleet.http, &st.fleet.publisher.url(), "the restarted publisher to accept writes", Duration::from_secs(60)).await?;
            tl.mark("the restarted publisher accepts writes");
            "kill -9 of the publisher with requests in flight; restarted 2 s later".into()
        }
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    conclude(st, broker, case, fault, fault_at, problems).await
}
