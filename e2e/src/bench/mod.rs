//! The benchmarks (`cargo run --release -p e2e --bin bench`): fan-out, latency, replay, memory,
//! failover — the fleet side by side with Centrifugo and Socket.IO, on the same broker and machine,
//! in one run — the publisher's own throughput (publish), how recovery grows with the length
//! of the log (age), and the publisher's failover on a log it has just written (writer).
//!
//! Every system consumes the same kind of topic (6 partitions, key = channel id, a
//! `centrifugo-channels` header) written by the bench's own producer, with the same record values:
//! the fleet's JSON pixel event, or a format-2 publication of a `stream` channel with data of a
//! given size ([`payload`]); and serves the same light WebSocket subscribers ([`subs`]). Each measure starts the system it
//! measures on a fresh topic and stops it afterwards, so runs do not disturb each other.

pub mod age;
pub mod failover;
pub mod fanout;
pub mod floor;
pub mod http;
pub mod kafka;
pub mod latency;
pub mod memory;
pub mod payload;
pub mod peers;
pub mod publish;
pub mod replay;
pub mod report;
pub mod servers;
pub mod subs;
pub mod sys;
pub mod writer;

use crate::broker::Broker;
use std::sync::Mutex;
use std::time::Duration;

/// The sizes of a run.
#[derive(Debug, Clone)]
pub struct Size {
    pub name: &'static str,
    /// Traffic time of each fan-out and latency run.
    pub duration: Duration,
    pub fanout: Vec<fanout::Case>,
    /// Offered loads of the latency runs, events/s.
    pub latency_rates: Vec<f64>,
    /// The `stream` payloads the latency measure runs beside the pixel events, each at the loads
    /// it fits ([`payload::Payload::fits_rate`]), produced straight to Kafka like the peers' path.
    pub latency_stream: Vec<payload::Payload>,
    pub latency_canvases: usize,
    /// Load at the offered rate before each latency window, not measured: every path (bare,
    /// through the publisher, straight to Kafka, the peers) gets the same, so none is measured
    /// while its connections, caches and JIT are still cold.
    pub latency_warmup: Duration,
    pub replay_events: u64,
    pub replay_canvases: usize,
    /// Rounds of the replay measure, each a bare read then a node's replay of the same log: the
    /// rows are the medians (one read of each swings by up to a third on two cores).
    pub replay_rounds: usize,
    /// Idle connection counts of the memory measure, ascending.
    pub memory_levels: Vec<usize>,
    pub failover_clients: usize,
    pub failover_canvases: usize,
    pub failover_rate: f64,
    /// Load on the broker before anything is measured (see [`warm_broker`]); zero skips it.
    pub broker_warmup: Duration,
    /// Log sizes of the age measure, events (the first is the baseline: one per canvas).
    pub age_events: Vec<u64>,
    /// Canvases the age measure's logs are spread over.
    pub age_canvases: usize,
    /// How much the age measure's log grows before its second kill, events.
    pub age_growth: u64,
    /// Log sizes of the writer measure, events published before each kill of the publisher (the
    /// first is the baseline of its memory target).
    pub writer_events: Vec<u64>,
    /// Canvases the writer measure's events are spread over.
    pub writer_canvases: usize,
}

impl Size {
    /// The published sizes: about 23 minutes on 2 cores (plus the peers' first install).
    pub fn full() -> Self {
        Self {
            name: "full",
            duration: Duration::from_secs(10),
            fanout: {
                use payload::Payload::{self as P, Pixels};
                let case = |payload: P, name: &str, active_canvases, active_clients, idle_clients, rate| fanout::Case {
                    name: match payload {
                        Pixels => name.to_owned(),
                        _ => format!("{}: {}", payload.label(), name.replace("canvases", "channels").replace("canvas", "channel")),
                    },
                    payload,
                    active_canvases,
                    active_clients,
                    idle_clients,
                    rate,
                };
                let mut cases = Vec::new();
                for p in [Pixels, P::STREAM_100_B] {
                    cases.push(case(p, "1,000 clients over 10 canvases", 10, 1000, 0, 500.0));
                    cases.push(case(p, "100 clients on 1 canvas", 1, 100, 0, 500.0));
                    cases.push(case(p, "5,000 idle + 100 active over 10 canvases", 10, 100, 5000, 5000.0));
                }
                cases.push(case(P::STREAM_1_KIB, "1,000 clients over 10 canvases", 10, 1000, 0, 500.0));
                // A tenth of the rate: at 500 events/s, 16 KiB to 1,000 clients is 800 MB/s of
                // WebSocket data, more than the bench's own clients read on two shared cores.
                cases.push(case(P::STREAM_16_KIB, "1,000 clients over 10 canvases at 50 events/s", 10, 1000, 0, 50.0));
                cases
            },
            latency_rates: vec![1000.0, 10_000.0, 50_000.0],
            latency_stream: vec![payload::Payload::STREAM_100_B, payload::Payload::STREAM_1_KIB, payload::Payload::STREAM_16_KIB],
            latency_canvases: 100,
            latency_warmup: Duration::from_secs(3),
            replay_events: 1_000_000,
            replay_canvases: 1000,
            replay_rounds: 3,
            memory_levels: vec![1000, 5000, 10_000],
            failover_clients: 1000,
            failover_canvases: 10,
            failover_rate: 100.0,
            broker_warmup: Duration::from_secs(30),
            age_events: vec![10_000, 1_000_000, 5_000_000],
            age_canvases: 10_000,
            age_growth: 3_000_000,
            writer_events: vec![10_000, 2_000_000],
            writer_canvases: 10_000,
        }
    }

    /// A few seconds of everything, so the tool cannot rot (what CI runs).
    pub fn tiny() -> Self {
        Self {
            name: "tiny",
            duration: Duration::from_secs(2),
            fanout: vec![
                fanout::Case { name: "20 clients over 2 canvases, 20 idle".into(), payload: payload::Payload::Pixels, active_canvases: 2, active_clients: 20, idle_clients: 20, rate: 100.0 },
                fanout::Case { name: "stream 16 KiB: 20 clients over 2 channels, 20 idle".into(), payload: payload::Payload::STREAM_16_KIB, active_canvases: 2, active_clients: 20, idle_clients: 20, rate: 100.0 },
            ],
            latency_rates: vec![200.0],
            latency_stream: vec![payload::Payload::STREAM_100_B],
            latency_canvases: 5,
            latency_warmup: Duration::from_millis(500),
            replay_events: 20_000,
            replay_canvases: 50,
            replay_rounds: 1,
            memory_levels: vec![50, 100],
            failover_clients: 20,
            failover_canvases: 4,
            failover_rate: 40.0,
            broker_warmup: Duration::ZERO,
            age_events: vec![200, 20_000],
            age_canvases: 200,
            age_growth: 20_000,
            writer_events: vec![2_000, 20_000],
            writer_canvases: 200,
        }
    }
}

/// Which measures to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, serde::Serialize)]
pub enum Measure {
    Fanout,
    Latency,
    Replay,
    Memory,
    Failover,
    /// The publisher's throughput (ours only).
    Publish,
    /// Recovery vs log age: publisher and node recovery, memory and failover as the log grows
    /// (ours only; not in the default set: it takes about 15 minutes at full size).
    Age,
    /// The publisher's failover on a log it has just written: kill -9 → first write accepted,
    /// memory and versions after 10,000 and 2,000,000 events (ours only; not in the default set).
    Writer,
}

/// What every measure needs.
pub struct Ctx {
    pub broker: Broker,
    pub broker_label: String,
    pub size: Size,
    /// Measure Centrifugo and Socket.IO too.
    pub peers: bool,
    /// Canvas width = height, pixels (64 by default: a 16 KiB snapshot frame).
    pub canvas_side: u32,
    /// An earlier build's binaries, measured beside this one's (the age and writer measures).
    pub before: Option<std::path::PathBuf>,
    errors: Mutex<Vec<String>>,
}

impl Ctx {
    /// A context over a started broker.
    pub fn new(broker: Broker, size: Size, peers: bool, canvas_side: u32) -> Self {
        let broker_label = format!("broker: {}", broker.kind.label());
        Self { broker, broker_label, size, peers, canvas_side, before: None, errors: Mutex::new(Vec::new()) }
    }

    /// The systems measured: the fleet, then the peers (unless `--no-peers`).
    pub fn systems(&self) -> Vec<subs::System> {
        let mut v = vec![subs::System::Fleet];
        if self.peers {
            v.push(subs::System::Peer(peers::Peer::Centrifugo));
            v.push(subs::System::Peer(peers::Peer::SocketIo));
        }
        v
    }

    /// Records a measure that failed (the run goes on; the tool exits non-zero at the end).
    pub fn error(&self, e: String) {
        eprintln!("[bench] ERROR {e}");
        self.errors.lock().expect("errors lock").push(e);
    }

    /// The failures so far.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().expect("errors lock").clone()
    }
}

/// Events/s the broker is warmed at.
const WARMUP_RATE: f64 = 20_000.0;

/// Produces and consumes at [`WARMUP_RATE`] for the size's `broker_warmup`, and commits
/// transactions of a few records back to back alongside, nothing measured.
///
/// A fresh broker JVM compiles its hot paths for about the first minute under load: its C2 compiler
/// thread alone took 12 s of CPU in the first 40 s of a latency run at 10k events/s (about a
/// quarter of the two cores), and the same run's bare produce → consume p99 fell from 17 ms (first
/// pass) to 6 ms (third pass) once it was done. Without this every figure of the first measure
/// would depend on where in the JIT's warm-up it fell.
///
/// # Errors
/// When the broker does not answer.
pub async fn warm_broker(ctx: &Ctx) -> anyhow::Result<()> {
    let total = ctx.size.broker_warmup;
    if total.is_zero() {
        return Ok(());
    }
    let topic = format!("bench-warmup-{:08x}", rand::random::<u32>());
    kafka::create_topic(&ctx.broker.bootstrap, &topic, servers::PARTITIONS as i32).await?;
    let canvases: Vec<String> = (0..100).map(|i| format!("wu-{i}")).collect();
    let mut producer = kafka::DirectProducer::new(&ctx.broker.bootstrap, &topic, servers::PARTITIONS, ctx.canvas_side, canvases.clone(), false)?;
    let tail = kafka::BareTail::start(&ctx.broker.bootstrap, &topic, servers::PARTITIONS, &canvases)?;
    // The publisher's path too: transactions (AddPartitionsToTxn, EndTxn, the coordinator's
    // markers) are code the plain produce above never runs.
    let txn_topic = format!("bench-warmup-txn-{:08x}", rand::random::<u32>());
    kafka::create_topic(&ctx.broker.bootstrap, &txn_topic, servers::PARTITIONS as i32).await?;
    let transactions = {
        let (bootstrap, topic) = (ctx.broker.bootstrap.clone(), txn_topic.clone());
        tokio::task::spawn_blocking(move || kafka::transactions_for(&bootstrap, &topic, servers::PARTITIONS, total))
    };
    let started = std::time::Instant::now();
    while started.elapsed() < total {
        let step = (total - started.elapsed()).min(Duration::from_secs(5));
        producer.run_at(WARMUP_RATE, step).await?;
        println!(
            "[bench] warming the broker's JIT: {} events produced ({WARMUP_RATE:.0}/s), {:.0} of {} s",
            producer.sent,
            started.elapsed().as_secs_f64(),
            total.as_secs()
        );
    }
    producer.flush()?;
    let consumed = tail.stop()?.len();
    let committed = transactions.await??;
    println!("[bench] broker warm: {} events produced, {consumed} consumed; {committed} transactions committed", producer.sent);
    Ok(())
}

/// Runs `measures` in order; returns every row.
pub async fn run(ctx: &Ctx, measures: &[Measure]) -> Vec<report::Row> {
    let mut rows = Vec::new();
    if let Err(e) = warm_broker(ctx).await {
        ctx.error(format!("warming the broker: {e:#}"));
    }
    for m in measures {
        let started = std::time::Instant::now();
        rows.extend(match m {
            Measure::Fanout => fanout::run(ctx, &ctx.size.fanout).await,
            Measure::Latency => latency::run(ctx, &ctx.size.latency_rates).await,
            Measure::Replay => replay::run(ctx).await,
            Measure::Memory => memory::run(ctx, &ctx.size.memory_levels).await,
            Measure::Failover => failover::run(ctx).await,
            Measure::Publish => publish::run(ctx).await,
            Measure::Age => age::run(ctx, ctx.before.as_ref()).await,
            Measure::Writer => writer::run(ctx, ctx.before.as_ref()).await,
        });
        println!("[bench] {m:?} done in {:.0} s", started.elapsed().as_secs_f64());
    }
    rows
}
