//! Publish throughput of the fleet's HTTP publisher (ours only: the peers have no publisher).
//!
//! Three ways to write, each against a fresh fleet topic:
//! - batches of 1,000 events for **one canvas**, one request after the other (a canvas's events
//!   go out as group records in one transaction: the bar is 10,000 events/s);
//! - the same batches spread over 100 canvases (six partitions' transactions side by side);
//! - single publishes to one canvas from 64 concurrent connections (each partition's committer
//!   takes every publish that waited for the previous transaction).
//!
//! Each case reports events per second, the transactions and records they took (from the
//! publisher's `/health` counters) and the publisher's CPU per event: what a transaction costs.

use super::http::LeanHttp;
use super::report::{Better, Row};
use super::servers::Server;
use super::subs::System;
use super::Ctx;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WHY: &str = "no HTTP publisher: the peers take events from Kafka only";

/// The bar of the one-canvas batch case, events/s.
pub const ONE_CANVAS_TARGET: f64 = 10_000.0;

/// Events per batch request.
const BATCH: usize = 1_000;

/// One case's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    events: u64,
    seconds: f64,
    transactions: u64,
    records: u64,
    publisher_cpu_s: f64,
}

impl Figures {
    fn per_second(&self) -> f64 {
        self.events as f64 / self.seconds.max(1e-9)
    }

    fn describe(&self) -> String {
        format!(
            "{} events in {:.2} s; {} transactions ({:.1} events each), {} records; publisher CPU {:.1} µs per event",
            self.events,
            self.seconds,
            self.transactions,
            self.events as f64 / self.transactions.max(1) as f64,
            self.records,
            self.publisher_cpu_s * 1e6 / self.events.max(1) as f64
        )
    }
}

/// The publisher's transaction counters: (committed, events, records).
async fn counters(http: &reqwest::Client, publisher: &str) -> anyhow::Result<(u64, u64, u64)> {
    let h: serde_json::Value = http.get(format!("{publisher}/health")).send().await?.json().await?;
    let t = &h["transactions"];
    let get = |k: &str| t[k].as_u64().unwrap_or(0);
    Ok((get("committed"), get("events"), get("records")))
}

/// Runs `work` (which returns the events it got accepted) and measures it.
async fn measured<F, Fut>(http: &reqwest::Client, server: &Server, work: F) -> anyhow::Result<Figures>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<u64>>,
{
    let publisher = server.publisher.clone().expect("the fleet has a publisher");
    let pid = server.publisher_pid.unwrap_or(0);
    let (t0, _, r0) = counters(http, &publisher).await?;
    let cpu0 = super::sys::cpu_seconds(pid).unwrap_or(0.0);
    let started = Instant::now();
    let events = work().await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu1 = super::sys::cpu_seconds(pid).unwrap_or(0.0);
    let (t1, _, r1) = counters(http, &publisher).await?;
    Ok(Figures { events, seconds, transactions: t1 - t0, records: r1 - r0, publisher_cpu_s: cpu1 - cpu0 })
}

/// `batches` requests of [`BATCH`] events, one after the other, over `canvases` (round-robin).
async fn batches(lean: &LeanHttp, canvases: &[String], batches: usize, side: u32) -> anyhow::Result<u64> {
    let mut accepted = 0;
    for b in 0..batches {
        let events: Vec<serde_json::Value> = (0..BATCH)
            .map(|i| {
                let n = (b * BATCH + i) as u32;
                serde_json::json!({"canvas": canvases[i % canvases.len()], "x": n % side, "y": (n / side) % side, "color": "#2060a0"})
            })
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({ "events": events }))?;
        let (status, answer) = lean.post_json("/pixels", body.into(), Duration::from_secs(60)).await?;
        anyhow::ensure!(status == 200, "a batch was answered {status}");
        let answer: serde_json::Value = serde_json::from_slice(&answer)?;
        let ok = answer["results"].as_array().into_iter().flatten().filter(|r| r["status"] == 201).count();
        anyhow::ensure!(ok == BATCH, "only {ok} of {BATCH} events of a batch were accepted: {}", answer["results"][0]);
        accepted += ok as u64;
    }
    Ok(accepted)
}

/// Single publishes to `canvas` from `connections` concurrent loops for `duration`.
async fn concurrent(lean: Arc<LeanHttp>, canvas: &str, connections: usize, duration: Duration, side: u32) -> anyhow::Result<u64> {
    let accepted = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + duration;
    let loops = (0..connections).map(|c| {
        let (lean, accepted, path) = (lean.clone(), accepted.clone(), format!("/canvases/{canvas}/pixels"));
        async move {
            let mut n = c as u32;
            while Instant::now() < until {
                let body = format!(r##"{{"x":{},"y":{},"color":"#a02060"}}"##, n % side, (n / side) % side);
                n += connections as u32;
                if let Ok((201, _)) = lean.post_json(&path, body.into(), Duration::from_secs(30)).await {
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    futures::future::join_all(loops).await;
    Ok(accepted.load(Ordering::Relaxed))
}

/// The publish measure's rows.
pub async fn run(ctx: &Ctx) -> Vec<Row> {
    match measure(ctx).await {
        Ok(rows) => rows,
        Err(e) => {
            ctx.error(format!("publish: {e:#}"));
            Vec::new()
        }
    }
}

async fn measure(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let (n_batches, concurrent_for) = if ctx.size.name == "tiny" { (2, Duration::from_secs(1)) } else { (10, Duration::from_secs(5)) };
    let http = reqwest::Client::new();
    let side = ctx.canvas_side;
    let mut rows = Vec::new();
    let server = Server::start(System::Fleet, ctx).await?;
    let publisher = server.publisher.clone().expect("the fleet has a publisher");
    let lean = Arc::new(LeanHttp::new(&publisher)?);
    let tag = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let result = async {
        // Connections and the producers' first transactions, not measured.
        batches(&lean, &[format!("pw{tag}")], 1, side).await?;

        println!("[bench]   publish: {n_batches} batches of {BATCH} events for one canvas, one after the other");
        let one = [format!("p1{tag}")];
        let f = measured(&http, &server, || batches(&lean, &one, n_batches, side)).await?;
        println!("[bench]   publish: one canvas: {:.0} events/s — {}", f.per_second(), f.describe());
        let setup = format!("{n_batches} × POST /pixels of {BATCH} events for one canvas, sequential; {}; {}", f.describe(), ctx.broker_label);
        rows.push(
            Row::ours_only("publish", "a batch for one canvas: events/s", setup, Better::Higher, f.per_second(), WHY)
                .with_target(format!("≥ {ONE_CANVAS_TARGET:.0}"), f.per_second() >= ONE_CANVAS_TARGET),
        );

        println!("[bench]   publish: {n_batches} batches of {BATCH} events over 100 canvases");
        let spread: Vec<String> = (0..100).map(|i| format!("ps{tag}-{i}")).collect();
        let f = measured(&http, &server, || batches(&lean, &spread, n_batches, side)).await?;
        println!("[bench]   publish: 100 canvases: {:.0} events/s — {}", f.per_second(), f.describe());
        let setup = format!("{n_batches} × POST /pixels of {BATCH} events over 100 canvases, sequential; {}; {}", f.describe(), ctx.broker_label);
        rows.push(Row::ours_only("publish", "a batch over 100 canvases: events/s", setup, Better::Higher, f.per_second(), WHY));

        println!("[bench]   publish: single publishes to one canvas from 64 connections for {} s", concurrent_for.as_secs());
        let hot = format!("pc{tag}");
        let f = measured(&http, &server, || concurrent(lean.clone(), &hot, 64, concurrent_for, side)).await?;
        println!("[bench]   publish: concurrent to one canvas: {:.0} events/s — {}", f.per_second(), f.describe());
        let setup = format!("POST /canvases/{{id}}/pixels, one event each, 64 connections, one canvas, {} s; {}; {}", concurrent_for.as_secs(), f.describe(), ctx.broker_label);
        rows.push(Row::ours_only("publish", "concurrent single publishes to one canvas: events/s", setup, Better::Higher, f.per_second(), WHY));
        anyhow::Ok(())
    }
    .await;
    server.stop().await;
    result?;
    Ok(rows)
}
