//! Recovery vs log age: how recovery times and memory grow with the length of the log.
//!
//! For each log size (a baseline of one event per canvas, then more events over the same
//! canvases), a fresh topic is pre-filled straight to Kafka with records timestamped an hour ago
//! (older than the publisher's idempotency-key window), and the snapshot topic gets what the fleet
//! would have written by then: every canvas's snapshot at its head and every partition's
//! checkpoint at its end. On that topic the measure takes:
//!
//! - the publisher: start → accepting writes (`/health` ready), and its peak resident memory;
//! - a fresh ws-node: `POST /admin/start-recovery` → ready, and its peak resident memory.
//!
//! Then, on a running two-node fleet with clients through the gateway: kill -9 of a node on a
//! current fleet (every client receiving again), and the same kill after the log grew by the
//! size's growth straight to Kafka while the fleet served it.
//!
//! With `--before <dir>` every figure is also taken with the binaries in `<dir>` (an earlier
//! build), on the same topics, so a change is measured against what it replaces in one run.

use super::kafka::{create_topic, create_topic_with, event, DirectProducer};
use super::report::{Better, Row};
use super::servers::PARTITIONS;
use super::Ctx;
use crate::broker::free_port;
use crate::client::Client;
use crate::fleet::{Fleet, FleetSpec};
use crate::load::Load;
use crate::procs::{eventually, get_json, Service, Timeline};
use crate::scenario::{all_receiving, finish, pick_canvases, spawn_clients, wait_failback, wait_for_heads};
use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use shared::kafka::KafkaSettings;
use shared::partitioner::partition_for;
use shared::snapshot::{Checkpoint, Snapshot, CHECKPOINT_KEY};
use shared::{Canvas, CanvasDims, ChannelId};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which binaries a figure was taken with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Build {
    /// The harness's own build (this change).
    After,
    /// The binaries of `--before`.
    Before,
}

impl Build {
    /// The builds a run measures: the binaries in `before` first, when given, then this one's
    /// (no directory: the harness's own).
    pub fn all(before: Option<&PathBuf>) -> Vec<(Build, Option<&Path>)> {
        before.map(|d| (Build::Before, Some(d.as_path()))).into_iter().chain(std::iter::once((Build::After, None))).collect()
    }

    /// `after` or `before`, as the rows and the progress say it.
    pub fn label(self) -> &'static str {
        match self {
            Build::After => "after",
            Build::Before => "before",
        }
    }
}

/// The figures of one build on one log size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Recovery {
    pub build: Build,
    pub events: u64,
    pub publisher_ready_ms: u64,
    pub publisher_peak_rss_mb: f64,
    pub node_ready_ms: u64,
    pub node_peak_rss_mb: f64,
}

/// The failover figures of one build.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failover {
    pub build: Build,
    /// kill -9 on a current fleet → every client receiving again, ms.
    pub current_ms: u64,
    /// The same after the log grew by `grown` events, ms.
    pub grown_ms: u64,
    pub grown: u64,
    pub violations: usize,
}

fn bin(dir: Option<&Path>, name: &str) -> String {
    dir.map_or_else(|| name.to_owned(), |d| d.join(name).display().to_string())
}

/// Fills a fresh topic with `events` events over `canvases` (round robin, one an hour old each),
/// and its snapshot topic with every canvas's head and every partition's checkpoint at its end.
/// Returns the topic.
async fn prefill(ctx: &Ctx, canvases: &[String], events: u64) -> anyhow::Result<String> {
    let topic = format!("bench-age-{:08x}", rand::random::<u32>());
    let snapshot_topic = shared::snapshot::topic_for(&topic);
    create_topic(&ctx.broker.bootstrap, &topic, PARTITIONS as i32).await?;
    let max_bytes = (shared::snapshot::MAX_RECORD_BYTES + 65_536).to_string();
    create_topic_with(
        &ctx.broker.bootstrap,
        &snapshot_topic,
        PARTITIONS as i32,
        &[("cleanup.policy", "compact"), ("segment.ms", "3600000"), ("max.message.bytes", &max_bytes)],
    )
    .await?;
    let mut p = DirectProducer::new(&ctx.broker.bootstrap, &topic, PARTITIONS, ctx.canvas_side, canvases.to_vec(), false)?;
    p.timestamp_ms = Some(shared::event::now_ms() as i64 - 3_600_000);
    let started = Instant::now();
    p.send_round_robin(events, "events").await?;
    println!("[bench]     {events} events written in {:.1} s; writing the snapshots", started.elapsed().as_secs_f64());
    let (bootstrap, topic2, side, canvases) = (ctx.broker.bootstrap.clone(), topic.clone(), ctx.canvas_side, canvases.to_vec());
    tokio::task::spawn_blocking(move || write_snapshots(&bootstrap, &topic2, side, &canvases, events)).await??;
    Ok(topic)
}

/// What the publisher would have written by now: each canvas's snapshot at its head (the version
/// count the round robin gave it) and each partition's checkpoint at its end.
fn write_snapshots(bootstrap: &str, topic: &str, side: u32, canvases: &[String], events: u64) -> anyhow::Result<()> {
    let reader: BaseConsumer = KafkaSettings::new(bootstrap).reader("bench-age-ends").create()?;
    let ends: BTreeMap<i32, i64> =
        (0..PARTITIONS as i32).map(|p| Ok((p, reader.fetch_watermarks(topic, p, Duration::from_secs(10))?.1))).collect::<anyhow::Result<_>>()?;
    let mut cfg = KafkaSettings::new(bootstrap).producer("bench-age-snapshots", Duration::from_secs(30));
    cfg.set("message.max.bytes", (shared::snapshot::MAX_RECORD_BYTES + 65_536).to_string()).set("queue.buffering.max.messages", "1000000");
    let producer: ThreadedProducer<DefaultProducerContext> = cfg.create()?;
    let snapshot_topic = shared::snapshot::topic_for(topic);
    let dims = CanvasDims { width: side, height: side };
    let n = canvases.len() as u64;
    for (i, c) in canvases.iter().enumerate() {
        let versions = events / n + u64::from((i as u64) < events % n);
        let mut canvas = Canvas::new(dims);
        for v in 1..=versions {
            canvas.apply(&event(c, v, side));
        }
        let partition = partition_for(c.as_bytes(), PARTITIONS) as i32;
        let id = ChannelId::parse(c).context("a bench canvas id")?;
        let value = Snapshot::of(&id, &canvas, 0, ends[&partition]).encode();
        send_blocking(&producer, BaseRecord::to(&snapshot_topic).key(c.as_bytes()).payload(&value).partition(partition))?;
    }
    for (p, end) in &ends {
        let value = Checkpoint { offset: *end, floor: 0 }.encode();
        send_blocking(&producer, BaseRecord::to(&snapshot_topic).key(CHECKPOINT_KEY.as_bytes()).payload(&value).partition(*p))?;
    }
    producer.flush(Duration::from_secs(60)).context("flush the snapshots")?;
    Ok(())
}

fn send_blocking(producer: &ThreadedProducer<DefaultProducerContext>, mut record: BaseRecord<'_, [u8], Vec<u8>>) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((e, r)) if started.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                record = r;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((e, _)) => anyhow::bail!("produce a snapshot: {e}"),
        }
    }
}

fn env_of(ctx: &Ctx, topic: &str, port: u16, extra: &[(&str, String)]) -> BTreeMap<String, String> {
    [
        ("KAFKA_BOOTSTRAP", ctx.broker.bootstrap.clone()),
        ("KAFKA_TOPIC", topic.to_owned()),
        ("TOPIC_PARTITIONS", PARTITIONS.to_string()),
        ("CANVAS_WIDTH", ctx.canvas_side.to_string()),
        ("CANVAS_HEIGHT", ctx.canvas_side.to_string()),
        ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
        // The admin routes on the node's own port, behind the harness's token.
        ("ADMIN_TOKEN", crate::fleet::ADMIN_TOKEN.to_owned()),
        // No gateway leads this node: no control topic to read (the bench calls its admin
        // routes without a leader's token).
        ("CONTROL_TOPIC", String::new()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .chain(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())))
    .collect()
}

/// Waits for `url`/health to say `ready`, showing what it says meanwhile.
async fn wait_ready(http: &reqwest::Client, url: &str, what: &str) -> anyhow::Result<()> {
    eventually(what, Duration::from_secs(900), || async {
        let h = get_json(http, &format!("{url}/health")).await?;
        if h["ready"] == true { Ok(Some(())) } else { Err(format!("state {}, replayed {}", h["state"], h["catchup"]["replay_count"])) }
    })
    .await
    .map(|_| ())
}

async fn measure_recovery(ctx: &Ctx, topic: &str, events: u64, build: Build, dir: Option<&Path>) -> anyhow::Result<Recovery> {
    let http = reqwest::Client::new();
    let tl = Timeline::new(false);
    // The publisher: start → ready.
    let port = free_port()?;
    let mut publisher = Service::new("age-publisher", &bin(dir, "core-publisher"), port, env_of(ctx, topic, port, &[]), tl.clone());
    let t0 = Instant::now();
    publisher.start()?;
    let pid = publisher.pid().context("the publisher runs")?;
    let ready = wait_ready(&http, &publisher.url(), "the publisher to accept writes").await;
    let publisher_ready_ms = t0.elapsed().as_millis() as u64;
    let publisher_peak = super::sys::peak_rss_bytes(pid);
    publisher.terminate(Duration::from_secs(10)).await;
    ready?;
    let publisher_peak_rss_mb = publisher_peak? as f64 / 1e6;
    println!("[bench]     {}: publisher ready in {publisher_ready_ms} ms, peak RSS {publisher_peak_rss_mb:.0} MB", build.label());

    // A fresh ws-node: start-recovery → ready.
    let port = free_port()?;
    let tag = format!("{:08x}", rand::random::<u32>());
    let env = env_of(
        ctx,
        topic,
        port,
        &[("NODE_ID", "ws-age".into()), ("BROADCAST_GROUP", format!("bench-age-{tag}")), ("CATCHUP_GROUP", format!("bench-age-catchup-{tag}"))],
    );
    let mut node = Service::new("ws-age", &bin(dir, "ws-node"), port, env, tl.clone());
    node.start()?;
    let pid = node.pid().context("the node runs")?;
    let url = node.url();
    let result = async {
        eventually("the node to answer /health", Duration::from_secs(30), || async { Ok(get_json(&http, &format!("{url}/health")).await.ok().map(|_| ())) }).await?;
        let t0 = Instant::now();
        let r = http.post(format!("{url}/admin/start-recovery")).bearer_auth(crate::fleet::ADMIN_TOKEN).json(&serde_json::json!({})).send().await?;
        anyhow::ensure!(r.status().is_success(), "start-recovery answered {}", r.status());
        wait_ready(&http, &url, "the node to be ready").await?;
        Ok(t0.elapsed().as_millis() as u64)
    }
    .await;
    let node_peak = super::sys::peak_rss_bytes(pid);
    node.terminate(Duration::from_secs(10)).await;
    let node_ready_ms = result?;
    let node_peak_rss_mb = node_peak? as f64 / 1e6;
    println!("[bench]     {}: node ready {node_ready_ms} ms after start-recovery, peak RSS {node_peak_rss_mb:.0} MB", build.label());
    Ok(Recovery { build, events, publisher_ready_ms, publisher_peak_rss_mb, node_ready_ms, node_peak_rss_mb })
}

/// Waits until the processes `pids` are idle (below 10 % of a core over a second): the fleet has
/// applied what was produced. At most `longest`.
async fn settle(pids: &[u32], longest: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let before = super::sys::cpu_seconds_all(pids)?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let used = super::sys::cpu_seconds_all(pids)? - before;
        if used < 0.1 * pids.len() as f64 || started.elapsed() > longest {
            return Ok(());
        }
        println!("[bench]     the nodes are still applying ({:.0}% of a core each)", 100.0 * used / pids.len() as f64);
    }
}

async fn measure_failover(ctx: &Ctx, build: Build, dir: Option<&Path>) -> anyhow::Result<Failover> {
    let spec = FleetSpec { bin_dir: dir.map(Path::to_path_buf), width: ctx.canvas_side, height: ctx.canvas_side, ..FleetSpec::default() };
    let dims = CanvasDims { width: spec.width, height: spec.height };
    let mut fleet = Fleet::start(&ctx.broker, spec.clone(), Timeline::new(false)).await?;
    let result = async {
        let state = fleet.fleet_state().await.map_err(anyhow::Error::msg)?;
        let canvases = pick_canvases(&state, spec.partitions, ctx.size.failover_canvases, &["ws-1".into(), "ws-2".into()]);
        let clients: Vec<Client> = spawn_clients(&fleet, &canvases, ctx.size.failover_clients, dims).await?;
        let load = Load::start(&fleet.publisher.url(), canvases.clone(), ctx.size.failover_rate, dims.width, dims.height);
        tokio::time::sleep(Duration::from_secs(3)).await;

        let at = shared::event::now_ms();
        fleet.nodes[0].kill9().await;
        let current_ms = all_receiving(&clients, at, "every client receiving again after kill -9 of ws-1", Duration::from_secs(120)).await?;
        println!("[bench]     {}: kill -9 on a current fleet: every client receiving again after {current_ms} ms", build.label());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let restart = shared::event::now_ms();
        fleet.nodes[0].start()?;
        wait_failback(&fleet, "ws-1", restart).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;

        // The log grows while the fleet serves it (other canvases, straight to Kafka).
        let grown = ctx.size.age_growth;
        let others: Vec<String> = (0..ctx.size.age_canvases).map(|i| format!("age-{i}")).collect();
        let mut p = DirectProducer::new(&ctx.broker.bootstrap, &fleet.topic, PARTITIONS, ctx.canvas_side, others, false)?;
        let started = Instant::now();
        p.send_round_robin(grown, "the log grows").await?;
        let pids: Vec<u32> = fleet.nodes.iter().filter_map(Service::pid).collect();
        settle(&pids, Duration::from_secs(300)).await?;
        println!("[bench]     the log grew by {grown} events in {:.0} s and the nodes applied them", started.elapsed().as_secs_f64());

        let at = shared::event::now_ms();
        fleet.nodes[0].kill9().await;
        let grown_ms = all_receiving(&clients, at, "every client receiving again after kill -9 of ws-1 on the grown log", Duration::from_secs(300)).await?;
        println!("[bench]     {}: kill -9 after the log grew by {grown}: every client receiving again after {grown_ms} ms", build.label());
        tokio::time::sleep(Duration::from_secs(2)).await;
        load.stop().await;
        let truths = wait_for_heads(&fleet, &clients, &canvases).await?;
        let (_, verdicts) = finish(clients, &truths).await;
        let violations = crate::checker::Summary::of(&verdicts).violations();
        Ok(Failover { build, current_ms, grown_ms, grown, violations })
    }
    .await;
    fleet.stop().await;
    result
}

/// Runs the measure for this build and, with `before`, for the binaries there; returns the rows.
pub async fn run(ctx: &Ctx, before: Option<&PathBuf>) -> Vec<Row> {
    let builds = Build::all(before);
    let n = ctx.size.age_canvases;
    let canvases: Vec<String> = (0..n).map(|i| format!("canvas-{i}")).collect();
    let mut recoveries = Vec::new();
    for events in ctx.size.age_events.iter().copied() {
        println!("[bench]   a log of {events} events over {n} canvases");
        let topic = match prefill(ctx, &canvases, events).await {
            Ok(t) => t,
            Err(e) => {
                ctx.error(format!("age: pre-fill of {events} events: {e:#}"));
                continue;
            }
        };
        for (build, dir) in &builds {
            match measure_recovery(ctx, &topic, events, *build, *dir).await {
                Ok(r) => recoveries.push(r),
                Err(e) => ctx.error(format!("age: {} recovery on {events} events: {e:#}", build.label())),
            }
        }
    }
    let mut failovers = Vec::new();
    for (build, dir) in &builds {
        println!("[bench]   failover, {}", build.label());
        match measure_failover(ctx, *build, *dir).await {
            Ok(f) => failovers.push(f),
            Err(e) => ctx.error(format!("age: {} failover: {e:#}", build.label())),
        }
    }
    rows(ctx, &recoveries, &failovers)
}

fn rows(ctx: &Ctx, recoveries: &[Recovery], failovers: &[Failover]) -> Vec<Row> {
    let why = "not compared: recovery from their own history is not what they do";
    let setup = |events: u64| {
        format!(
            "{events} events over {} canvases ({}×{}) and {PARTITIONS} partitions, written straight to Kafka an hour old, each canvas's snapshot at \
             its head and each partition's checkpoint at its end; {}",
            ctx.size.age_canvases, ctx.canvas_side, ctx.canvas_side, ctx.broker_label
        )
    };
    let baseline = |build: Build| recoveries.iter().find(|r| r.build == build && r.events == ctx.size.age_events[0]);
    let mut out = Vec::new();
    for r in recoveries {
        let b = format!("{}, {} events", r.build.label(), super::report::fmt_num(r.events as f64));
        let base = baseline(r.build).filter(|_| r.build == Build::After && r.events != ctx.size.age_events[0]);
        let times = |figure: &str, v: u64, of_base: Option<u64>| {
            let row = Row::ours_only("age", &format!("{b}: {figure}, ms"), setup(r.events), Better::Lower, v as f64, why);
            match of_base {
                Some(x) => row.with_target("≤ 1.5× the baseline", v as f64 <= 1.5 * x.max(1) as f64),
                None => row,
            }
        };
        out.push(times("publisher start → accepting writes", r.publisher_ready_ms, base.map(|x| x.publisher_ready_ms)));
        let mut mem = Row::ours_only("age", &format!("{b}: publisher peak RSS, MB"), setup(r.events), Better::Lower, r.publisher_peak_rss_mb, why);
        if let Some(x) = base {
            mem = mem.with_target("≤ 1.25× the baseline", r.publisher_peak_rss_mb <= 1.25 * x.publisher_peak_rss_mb);
        }
        out.push(mem);
        out.push(times("fresh ws-node start-recovery → ready", r.node_ready_ms, base.map(|x| x.node_ready_ms)));
        let mut mem = Row::ours_only("age", &format!("{b}: ws-node peak RSS, MB"), setup(r.events), Better::Lower, r.node_peak_rss_mb, why);
        if r.build == Build::After && r.events >= 5_000_000 {
            mem = mem.with_target("≤ 1,400 MB (half of 2.8 GB)", r.node_peak_rss_mb <= 1400.0);
        }
        out.push(mem);
    }
    for f in failovers {
        let b = f.build.label();
        let setup = format!(
            "two ws-nodes, {} clients over {} canvases through the gateway, {} events/s through the publisher; the log then grows by {} events over \
             {} other canvases straight to Kafka; {}",
            ctx.size.failover_clients, ctx.size.failover_canvases, ctx.size.failover_rate, f.grown, ctx.size.age_canvases, ctx.broker_label
        );
        out.push(Row::ours_only("age", &format!("{b}: kill -9 on a current fleet → every client receiving, ms"), setup.clone(), Better::Lower, f.current_ms as f64, why));
        let mut grown = Row::ours_only("age", &format!("{b}: kill -9 after the log grew → every client receiving, ms"), setup.clone(), Better::Lower, f.grown_ms as f64, why);
        if f.build == Build::After {
            grown = grown.with_target("≤ 1.2× on a current fleet", f.grown_ms as f64 <= 1.2 * f.current_ms.max(1) as f64);
        }
        out.push(grown);
        out.push(
            Row::ours_only("age", &format!("{b}: promise violations in the failover runs"), setup, Better::Lower, f.violations as f64, why)
                .with_target("0", f.violations == 0),
        );
    }
    out
}
