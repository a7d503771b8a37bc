//! End-to-end latency at fixed offered loads: publish → client receive, p50/p99/p99.9, for the
//! fleet (through its HTTP publisher, and produced straight to Kafka like the peers), the peers,
//! and a bare librdkafka produce → consume round trip; plus what the gateway proxy adds. The
//! Kafka-in path of every system runs on pixel events and on `stream` publications of each size
//! that fits the load ([`super::payload`]).

mod http_paths;
mod rows;

use http_paths::{http_phase, Publish};
use rows::rows;

use super::kafka::{BareTail, DirectProducer};
use super::payload::Payload;
use super::peers::Peer;
use super::report::Row;
use super::servers::{Server, PARTITIONS};
use super::subs::{self, Sub, System};
use super::sys::MachineCpu;
use super::Ctx;
use anyhow::bail;
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Latencies of one path at one load, ms.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Dist {
    pub samples: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// Events sent in the window that a subscriber of their canvas had not received 2 s after
    /// the last was sent (late or lost).
    pub missing: u64,
    /// Events/s actually sent (accepted, for HTTP).
    pub achieved_rate: f64,
    /// Share of all the machine's cores that was busy during the window, percent (`/proc/stat`):
    /// near 100 the processes on the path queue for a core and the tail grows with it.
    pub cores_busy_pct: Option<f64>,
}

/// The machine's busy share since `start` (see [`MachineCpu`]), when both reads worked.
fn busy_since(start: Option<MachineCpu>) -> Option<f64> {
    MachineCpu::now().ok()?.busy_percent_since(&start?)
}

/// Waits, at most `cap`, until `behind()` (what the clients have not yet received of the
/// warm-up: subscribers or events) is zero, printing progress every 2 s, so that a system that
/// fell behind during the warm-up does not start its window with that backlog. Returns what was
/// still behind when it gave up (0 when it caught up).
async fn settle(label: &str, cap: Duration, mut behind: impl FnMut() -> u64) -> u64 {
    let start = Instant::now();
    let mut said = Instant::now();
    loop {
        let b = behind();
        if b == 0 {
            return 0;
        }
        if start.elapsed() >= cap {
            println!("[bench]   {label}: {b} still behind the warm-up after {} s; measuring anyway", cap.as_secs());
            return b;
        }
        if said.elapsed() >= Duration::from_secs(2) {
            println!("[bench]   {label}: waiting for the clients to catch up with the warm-up ({b} behind)");
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long [`settle`] waits for a backlog left by the warm-up.
const SETTLE_CAP: Duration = Duration::from_secs(30);

/// Subscribers that have not yet received version `last[canvas]` of their canvas.
fn subs_behind(subs: &[&Sub], last: &[u64]) -> u64 {
    subs.iter()
        .filter(|s| {
            let got = s.seen.times.lock().expect("times lock").last().map_or(0, |(v, _)| *v);
            got < last.get(s.canvas).copied().unwrap_or(0)
        })
        .count() as u64
}

/// "N %" or "unknown".
fn pct(p: Option<f64>) -> String {
    p.map_or_else(|| "unknown".into(), |p| format!("{p:.0} %"))
}

fn dist(h: &Histogram<u64>, missing: u64, achieved_rate: f64) -> Dist {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    Dist { samples: h.len(), p50_ms: ms(0.5), p99_ms: ms(0.99), p999_ms: ms(0.999), missing, achieved_rate, cores_busy_pct: None }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Joins send times with receive times: latency of every (canvas, version) each subscriber got.
fn join(sent: &[(usize, u64, Instant)], subs: &[&Sub]) -> (Histogram<u64>, u64) {
    let by_key: HashMap<(usize, u64), Instant> = sent.iter().map(|(c, v, t)| ((*c, *v), *t)).collect();
    let mut h = histogram();
    let mut got = 0u64;
    let mut expected = 0u64;
    for s in subs {
        expected += sent.iter().filter(|(c, _, _)| *c == s.canvas).count() as u64;
        for (v, at) in s.seen.times.lock().expect("times lock").iter() {
            if let Some(t0) = by_key.get(&(s.canvas, *v)) {
                let _ = h.record(at.saturating_duration_since(*t0).as_micros().max(1) as u64);
                got += 1;
            }
        }
    }
    (h, expected.saturating_sub(got))
}

/// Latency above which [`slow_events`] counts an event (a tail worth a look).
const SLOW: Duration = Duration::from_millis(50);

/// Where a tail came from, in words for the progress line: the events slower than [`SLOW`], on
/// how many of the clients, sent when in the window. One client's stall and a stall of the whole
/// server (or machine) give the same p99 and need different explanations.
fn slow_events(sent: &[(usize, u64, Instant)], subs: &[&Sub]) -> String {
    let by_key: HashMap<(usize, u64), Instant> = sent.iter().map(|(c, v, t)| ((*c, *v), *t)).collect();
    let Some(start) = sent.iter().map(|(_, _, t)| *t).min() else { return "nothing sent".into() };
    let (mut n, mut clients, mut worst) = (0usize, 0usize, Duration::ZERO);
    let (mut first, mut last) = (f64::MAX, 0.0f64);
    for s in subs {
        let mut slow_here = false;
        for (v, at) in s.seen.times.lock().expect("times lock").iter() {
            let Some(t0) = by_key.get(&(s.canvas, *v)) else { continue };
            let took = at.saturating_duration_since(*t0);
            if took > SLOW {
                n += 1;
                slow_here = true;
                worst = worst.max(took);
                let when = t0.duration_since(start).as_secs_f64();
                (first, last) = (first.min(when), last.max(when));
            }
        }
        clients += usize::from(slow_here);
    }
    if n == 0 {
        return format!("no event took over {} ms", SLOW.as_millis());
    }
    format!(
        "{n} events took over {} ms (the slowest {:.0} ms), on {clients} of {} clients, sent {first:.2}–{last:.2} s into the window",
        SLOW.as_millis(),
        worst.as_secs_f64() * 1e3,
        subs.len()
    )
}

/// Waits until every subscriber got at least one event (the server's consumer is live), sending
/// one event per canvas with `poke` every 300 ms.
async fn warm_up<F, Fut>(label: &str, subs: &[&Sub], mut poke: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    loop {
        poke().await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let waiting = subs.iter().filter(|s| s.seen.events.load(Ordering::Relaxed) == 0).count();
        if waiting == 0 {
            // Let the warm-up's tail arrive, then forget it.
            tokio::time::sleep(Duration::from_millis(500)).await;
            for s in subs {
                s.seen.times.lock().expect("times lock").clear();
            }
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(90) {
            bail!("{label}: {waiting}/{} subscribers received nothing in 90 s of warm-up", subs.len());
        }
    }
}

/// Results of one load level.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Level {
    pub rate: f64,
    pub fleet_http_direct: Option<Dist>,
    pub fleet_http_gateway: Option<Dist>,
    pub fleet_batch_direct: Option<Dist>,
    pub fleet_batch_gateway: Option<Dist>,
    /// Request sent → the publisher's answer read, of the accepted requests (one per event).
    pub fleet_http_answer: Option<Dist>,
    /// The same for the batch requests.
    pub fleet_batch_answer: Option<Dist>,
    pub fleet_kafka: Option<Dist>,
    pub centrifugo: Option<Dist>,
    pub socketio: Option<Dist>,
    pub bare: Option<Dist>,
    /// The same producer → consumer round trip in Kafka transactions, one per commit cycle (what
    /// the publisher's protocol costs by itself), and the events per transaction.
    pub bare_txn: Option<Dist>,
    pub bare_txn_events_per_txn: Option<f64>,
    /// Produced straight to Kafka on `stream` channels, one entry per payload that fits the rate.
    pub stream: Vec<StreamLevel>,
}

/// The Kafka-in path of every system at one load, on `stream` channels of one payload size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StreamLevel {
    pub payload: Payload,
    pub fleet: Option<Dist>,
    pub centrifugo: Option<Dist>,
    pub socketio: Option<Dist>,
}

impl StreamLevel {
    /// `system`'s figures.
    pub fn of(&self, system: System) -> &Option<Dist> {
        match system {
            System::Fleet => &self.fleet,
            System::Peer(Peer::Centrifugo) => &self.centrifugo,
            System::Peer(Peer::SocketIo) => &self.socketio,
        }
    }

    fn of_mut(&mut self, system: System) -> &mut Option<Dist> {
        match system {
            System::Fleet => &mut self.fleet,
            System::Peer(Peer::Centrifugo) => &mut self.centrifugo,
            System::Peer(Peer::SocketIo) => &mut self.socketio,
        }
    }
}

async fn fleet_level(ctx: &Ctx, server: &Server, rate: f64, level: &mut Level) -> anyhow::Result<()> {
    let n = ctx.size.latency_canvases;
    let tag = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let (gw_base, _) = server.gateway.clone().expect("the fleet has a gateway");
    let publisher = server.publisher.clone().expect("the fleet has a publisher");
    // Through the HTTP publisher, one event per request and as batches.
    (level.fleet_http_direct, level.fleet_http_gateway, level.fleet_http_answer) =
        http_phase(ctx, server, &publisher, &gw_base, &tag, Publish::OnePerRequest, rate).await?;
    (level.fleet_batch_direct, level.fleet_batch_gateway, level.fleet_batch_answer) =
        http_phase(ctx, server, &publisher, &gw_base, &tag, Publish::Batch, rate).await?;

    // Produced straight to Kafka, like the peers.
    let canvases: Vec<String> = (0..n).map(|i| format!("lk{tag}-{i}")).collect();
    level.fleet_kafka = Some(kafka_in(ctx, server, &canvases, rate, Payload::Pixels).await?);
    Ok(())
}

/// Produces `payload`'s records straight to Kafka at `rate` to `channels` of the server's topic
/// with one subscriber per channel.
async fn kafka_in(ctx: &Ctx, server: &Server, channels: &[String], rate: f64, payload: Payload) -> anyhow::Result<Dist> {
    let label = &match payload {
        Payload::Pixels => server.system.label().to_owned(),
        _ => format!("{} ({})", server.system.label(), payload.label()),
    };
    let subs = subs::subscribe_many(server.system, &server.ws_base, channels, channels.len(), true).await?;
    let refs: Vec<&Sub> = subs.iter().collect();
    let producer = DirectProducer::new(&ctx.broker.bootstrap, &server.topic, PARTITIONS, ctx.canvas_side, channels.to_vec(), false)?.carrying(payload);
    let producer = Arc::new(tokio::sync::Mutex::new(producer));
    warm_up(label, &refs, || {
        let p = producer.clone();
        async move {
            let mut p = p.lock().await;
            for i in 0..p.heads().len() {
                p.send(i).await?;
            }
            p.flush()
        }
    })
    .await?;
    let mut p = producer.lock().await;
    println!("[bench]   {label}: warming up at {rate} events/s straight to Kafka for {:.1} s (not measured)", ctx.size.latency_warmup.as_secs_f64());
    p.run_at(rate, ctx.size.latency_warmup).await?;
    p.flush()?;
    let last = p.heads();
    settle(label, SETTLE_CAP, || subs_behind(&refs, &last)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    p.record = true;
    println!("[bench]   {label}: producing {rate} events/s straight to Kafka for {} s", ctx.size.duration.as_secs());
    let cpu0 = MachineCpu::now().ok();
    let sent = p.run_at(rate, ctx.size.duration).await?;
    let busy = busy_since(cpu0);
    p.flush()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (h, m) = join(&p.log, &refs);
    let d = Dist { cores_busy_pct: busy, ..dist(&h, m, sent as f64 / ctx.size.duration.as_secs_f64()) };
    println!("[bench]   {label}: {d:?}; {}", slow_events(&p.log, &refs));
    Ok(d)
}

async fn bare_level(ctx: &Ctx, rate: f64) -> anyhow::Result<Dist> {
    let topic = format!("bench-bare-{:08x}", rand::random::<u32>());
    super::kafka::create_topic(&ctx.broker.bootstrap, &topic, PARTITIONS as i32).await?;
    let canvases: Vec<String> = (0..ctx.size.latency_canvases).map(|i| format!("lb-{i}")).collect();
    let mut p = DirectProducer::new(&ctx.broker.bootstrap, &topic, PARTITIONS, ctx.canvas_side, canvases.clone(), false)?;
    let tail = BareTail::start(&ctx.broker.bootstrap, &topic, PARTITIONS, &canvases)?;
    // Warm-up: let the consumer start fetching, and give the broker's JIT the same load first (a
    // run that starts with this measure otherwise meets a cold JVM: p99 ~2× higher at 10k/s).
    p.run_at(50.0, Duration::from_secs(1)).await?;
    println!("[bench]   bare librdkafka: warming up at {rate} events/s for {:.1} s (not measured)", ctx.size.latency_warmup.as_secs_f64());
    p.run_at(rate, ctx.size.latency_warmup).await?;
    p.flush()?;
    let sent = p.sent;
    settle("bare librdkafka", SETTLE_CAP, || sent.saturating_sub(tail.received.load(Ordering::Relaxed))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    p.record = true;
    println!("[bench]   bare librdkafka: producing {rate} events/s for {} s", ctx.size.duration.as_secs());
    let cpu0 = MachineCpu::now().ok();
    let sent = p.run_at(rate, ctx.size.duration).await?;
    let busy = busy_since(cpu0);
    p.flush()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = tail.stop()?;
    let by_key: HashMap<(usize, u64), Instant> = p.log.iter().map(|(c, v, t)| ((*c, *v), *t)).collect();
    let mut h = histogram();
    for (c, v, at) in &got {
        if let Some(t0) = by_key.get(&(*c, *v)) {
            let _ = h.record(at.saturating_duration_since(*t0).as_micros().max(1) as u64);
        }
    }
    let d = Dist { cores_busy_pct: busy, ..dist(&h, (p.log.len() as u64).saturating_sub(h.len()), sent as f64 / ctx.size.duration.as_secs_f64()) };
    println!("[bench]   bare librdkafka: {d:?}");
    Ok(d)
}

/// The bare baseline in transactions: [`super::kafka::TxnDirect`] at `rate` → a `read_committed`
/// consumer; (latency from each event's due time to its receipt, events per transaction).
async fn bare_txn_level(ctx: &Ctx, rate: f64) -> anyhow::Result<(Dist, f64)> {
    let topic = format!("bench-bare-txn-{:08x}", rand::random::<u32>());
    super::kafka::create_topic(&ctx.broker.bootstrap, &topic, PARTITIONS as i32).await?;
    let canvases: Vec<String> = (0..ctx.size.latency_canvases)
        .map(|i| format!("lt-{i}"))
        .collect();
    let tail = BareTail::start(&ctx.broker.bootstrap, &topic, PARTITIONS, &canvases)?;
    let (bootstrap, side, warm, window) = (
        ctx.broker.bootstrap.clone(),
        ctx.canvas_side,
        ctx.size.latency_warmup,
        ctx.size.duration,
    );
    println!("[bench]   bare librdkafka in transactions: warming up at {rate} events/s for {:.1} s (not measured), then {} s measured", warm.as_secs_f64(), window.as_secs());
    let cpu = std::sync::Arc::new(std::sync::Mutex::new(None));
    let cpu2 = cpu.clone();
    let (log, per_txn) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let mut p = super::kafka::TxnDirect::new(&bootstrap, &topic, PARTITIONS, side, canvases)?;
        p.run_at(rate, warm)?;
        std::thread::sleep(Duration::from_millis(500));
        let before = p.transactions;
        let cpu0 = MachineCpu::now().ok();
        let log = p.run_at(rate, window)?;
        *cpu2.lock().expect("cpu lock") = Some(busy_since(cpu0));
        let per_txn = log.len() as f64 / (p.transactions - before).max(1) as f64;
        Ok((log, per_txn))
    })
    .await??;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = tail.stop()?;
    let by_key: HashMap<(usize, u64), Instant> =
        log.iter().map(|(c, v, t)| ((*c, *v), *t)).collect();
    let mut h = histogram();
    for (c, v, at) in &got {
        if let Some(t0) = by_key.get(&(*c, *v)) {
            let _ = h.record(at.saturating_duration_since(*t0).as_micros().max(1) as u64);
        }
    }
    let busy = cpu.lock().expect("cpu lock").take().flatten();
    let d = Dist {
        cores_busy_pct: busy,
        ..dist(
            &h,
            (log.len() as u64).saturating_sub(h.len()),
            log.len() as f64 / window.as_secs_f64(),
        )
    };
    println!(
        "[bench]   bare librdkafka in transactions: {d:?}, {per_txn:.1} events per transaction"
    );
    Ok((d, per_txn))
}

/// Runs every load level; returns the rows.
pub async fn run(ctx: &Ctx, rates: &[f64]) -> Vec<Row> {
    let mut levels = Vec::new();
    for &rate in rates {
        println!("[bench] latency at {rate} events/s");
        let stream = ctx.size.latency_stream.iter().filter(|p| p.fits_rate(rate));
        let mut level = Level { rate, stream: stream.map(|&payload| StreamLevel { payload, fleet: None, centrifugo: None, socketio: None }).collect(), ..Level::default() };
        match bare_level(ctx, rate).await {
            Ok(d) => level.bare = Some(d),
            Err(e) => ctx.error(format!("latency {rate}/s, bare librdkafka: {e:#}")),
        }
        match bare_txn_level(ctx, rate).await {
            Ok((d, per_txn)) => {
                level.bare_txn = Some(d);
                level.bare_txn_events_per_txn = Some(per_txn);
            }
            Err(e) => ctx.error(format!(
                "latency {rate}/s, bare librdkafka in transactions: {e:#}"
            )),
        }
        for system in ctx.systems() {
            let server = match Server::start(system, ctx).await {
                Ok(s) => s,
                Err(e) => {
                    ctx.error(format!("latency {rate}/s, start {}: {e:#}", system.label()));
                    continue;
                }
            };
            let r = match system {
                System::Fleet => fleet_level(ctx, &server, rate, &mut level).await,
                System::Peer(p) => {
                    let canvases: Vec<String> = (0..ctx.size.latency_canvases).map(|i| format!("lp-{i}")).collect();
                    kafka_in(ctx, &server, &canvases, rate, Payload::Pixels).await.map(|d| match p {
                        Peer::Centrifugo => level.centrifugo = Some(d),
                        Peer::SocketIo => level.socketio = Some(d),
                    })
                }
            };
            if let Err(e) = r {
                ctx.error(format!("latency {rate}/s on {}: {e:#}", system.label()));
            }
            // The same path on `stream` channels, on the same server after the pixel paths (every
            // system alike), fresh channels for each size.
            for (k, sl) in level.stream.iter_mut().enumerate() {
                let channels: Vec<String> = (0..ctx.size.latency_canvases).map(|i| sl.payload.channel(&format!("ls{k}-{i}"))).collect();
                match kafka_in(ctx, &server, &channels, rate, sl.payload).await {
                    Ok(d) => *sl.of_mut(system) = Some(d),
                    Err(e) => ctx.error(format!("latency {rate}/s, {} on {}: {e:#}", sl.payload.label(), system.label())),
                }
            }
            server.stop().await;
        }
        levels.push(level);
    }
    rows(ctx, &levels)
}

