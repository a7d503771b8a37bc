//! The latency measure's paths through the fleet's HTTP publisher: one event per request and
//! the batch endpoint, each with one subscriber on the node and one through the gateway.

use super::{busy_since, dist, histogram, join, pct, settle, subs_behind, warm_up, Dist, SETTLE_CAP};
use crate::bench::http::LeanHttp;
use crate::bench::servers::Server;
use crate::bench::subs::{self, Sub, System};
use crate::bench::sys::MachineCpu;
use crate::bench::Ctx;
use hdrhistogram::Histogram;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Publishes through the fleet's HTTP publisher with `http` at `rate` for `duration`, open loop
/// (at most 512 requests in flight): (canvas index, version, time the request was sent) of each
/// accepted, and the request → answer times.
async fn http_load(http: &Arc<LeanHttp>, canvases: &[String], side: u32, rate: f64, duration: Duration) -> (Vec<(usize, u64, Instant)>, Histogram<u64>) {
    let answers = Arc::new(Mutex::new(histogram()));
    let log = Arc::new(Mutex::new(Vec::new()));
    let permits = Arc::new(tokio::sync::Semaphore::new(512));
    let start = Instant::now();
    // Nothing is sent after the window: a publisher that fell behind has the events it did not
    // take counted as not accepted, instead of the window stretching until they all went out.
    let end = tokio::time::Instant::from_std(start + duration);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut n = 0u64;
    'window: while start.elapsed() < duration {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        while n < due {
            let Ok(Ok(permit)) = tokio::time::timeout_at(end, permits.clone().acquire_owned()).await else { break 'window };
            let i = (n as usize) % canvases.len();
            n += 1;
            let path = format!("/canvases/{}/pixels", canvases[i]);
            let body = format!(r##"{{"x":{},"y":{},"color":"#336699"}}"##, rand::random::<u32>() % side, rand::random::<u32>() % side);
            let (http, log, answers) = (http.clone(), log.clone(), answers.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let t0 = Instant::now();
                if let Ok((201, answer)) = http.post_json(&path, body.into(), Duration::from_secs(30)).await {
                    let _ = answers.lock().expect("answers lock").record(t0.elapsed().as_micros().max(1) as u64);
                    if let Ok(a) = serde_json::from_slice::<Accepted>(&answer) {
                        log.lock().expect("log lock").push((i, a.version, t0));
                    }
                }
            });
        }
    }
    let _ = permits.acquire_many(512).await;
    let out = std::mem::take(&mut *log.lock().expect("log lock"));
    let answers = std::mem::replace(&mut *answers.lock().expect("answers lock"), histogram());
    (out, answers)
}

/// The part of a publish answer the load generator reads.
#[derive(serde::Deserialize)]
struct Accepted {
    version: u64,
}

/// The batch answer: one result per event, in request order.
#[derive(serde::Deserialize)]
struct BatchAnswer {
    results: Vec<BatchResult>,
}

#[derive(serde::Deserialize)]
struct BatchResult {
    status: u16,
    #[serde(default)]
    version: u64,
}

/// Publishes through the fleet's batch endpoint (`POST /pixels`) at `rate` for `duration`, open
/// loop: every millisecond the events due are sent as one request (at most 64 requests in
/// flight), as a publishing service would send what it has. (canvas index, version, time the
/// request was sent) of each event answered 201.
async fn http_batch_load(http: &Arc<LeanHttp>, canvases: &[String], side: u32, rate: f64, duration: Duration) -> (Vec<(usize, u64, Instant)>, Histogram<u64>) {
    const IN_FLIGHT: u32 = 64;
    let answers = Arc::new(Mutex::new(histogram()));
    let log = Arc::new(Mutex::new(Vec::new()));
    let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT as usize));
    let start = Instant::now();
    // As in `http_load`: nothing is sent after the window.
    let end = tokio::time::Instant::from_std(start + duration);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut n = 0u64;
    while start.elapsed() < duration {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        if n >= due {
            continue;
        }
        let Ok(Ok(permit)) = tokio::time::timeout_at(end, permits.clone().acquire_owned()).await else { break };
        let mut idx = Vec::with_capacity((due - n) as usize);
        let mut body = String::from(r#"{"events":["#);
        while n < due && idx.len() < 1000 {
            let i = (n as usize) % canvases.len();
            n += 1;
            if !idx.is_empty() {
                body.push(',');
            }
            idx.push(i);
            body.push_str(&format!(r##"{{"canvas":"{}","x":{},"y":{},"color":"#336699"}}"##, canvases[i], rand::random::<u32>() % side, rand::random::<u32>() % side));
        }
        body.push_str("]}");
        let (http, log, answers) = (http.clone(), log.clone(), answers.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let t0 = Instant::now();
            let Ok((200, answer)) = http.post_json("/pixels", body.into(), Duration::from_secs(30)).await else { return };
            let _ = answers.lock().expect("answers lock").record(t0.elapsed().as_micros().max(1) as u64);
            let Ok(a) = serde_json::from_slice::<BatchAnswer>(&answer) else { return };
            let mut log = log.lock().expect("log lock");
            for (k, res) in a.results.iter().enumerate() {
                if res.status == 201 {
                    log.push((idx[k], res.version, t0));
                }
            }
        });
    }
    let _ = permits.acquire_many(IN_FLIGHT).await;
    let out = std::mem::take(&mut *log.lock().expect("log lock"));
    let answers = std::mem::replace(&mut *answers.lock().expect("answers lock"), histogram());
    (out, answers)
}

/// How the bench publishes through the HTTP publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Publish {
    /// `POST /canvases/{id}/pixels`, one event per request.
    OnePerRequest,
    /// `POST /pixels`, the events due each millisecond in one request.
    Batch,
}

/// Publishes `rate` events/s through the HTTP publisher the `how` way to fresh canvases, each with
/// one subscriber directly on the node and one through the gateway: (direct, via gateway, request
/// → answer).
pub(super) async fn http_phase(
    ctx: &Ctx,
    server: &Server,
    publisher: &str,
    gw_base: &str,
    tag: &str,
    how: Publish,
    rate: f64,
) -> anyhow::Result<(Option<Dist>, Option<Dist>, Option<Dist>)> {
    let n = ctx.size.latency_canvases;
    let (prefix, label) = match how {
        Publish::OnePerRequest => ("lh", "HTTP"),
        Publish::Batch => ("lhb", "HTTP batch"),
    };
    let canvases: Vec<String> = (0..n).map(|i| format!("{prefix}{tag}-{i}")).collect();
    let direct = subs::subscribe_many(System::Fleet, &server.ws_base, &canvases, n, true).await?;
    let via_gw = subs::subscribe_many(System::Fleet, gw_base, &canvases, n, true).await?;
    let all: Vec<&Sub> = direct.iter().chain(via_gw.iter()).collect();
    let http = reqwest::Client::new();
    warm_up(&format!("fleet ({label})"), &all, || {
        let (http, publisher, canvases) = (http.clone(), publisher.to_owned(), canvases.clone());
        async move {
            match how {
                Publish::OnePerRequest => {
                    for c in &canvases {
                        http.post(format!("{publisher}/canvases/{c}/pixels")).json(&serde_json::json!({"x":0,"y":0,"color":"#000000"})).send().await?;
                    }
                }
                Publish::Batch => {
                    let events: Vec<serde_json::Value> = canvases.iter().map(|c| serde_json::json!({"canvas": c, "x": 0, "y": 0, "color": "#000000"})).collect();
                    http.post(format!("{publisher}/pixels")).json(&serde_json::json!({ "events": events })).send().await?;
                }
            }
            Ok(())
        }
    })
    .await?;
    // The same client (and so the same kept-alive connections) for the warm-up and the window.
    let lean = Arc::new(LeanHttp::new(publisher)?);
    let load = |duration: Duration| {
        let (lean, canvases) = (lean.clone(), canvases.clone());
        async move {
            match how {
                Publish::OnePerRequest => http_load(&lean, &canvases, ctx.canvas_side, rate, duration).await,
                Publish::Batch => http_batch_load(&lean, &canvases, ctx.canvas_side, rate, duration).await,
            }
        }
    };
    println!("[bench]   fleet: warming up at {rate} events/s through the {label} endpoint for {:.1} s (not measured)", ctx.size.latency_warmup.as_secs_f64());
    let (warm, _) = load(ctx.size.latency_warmup).await;
    let mut last = vec![0u64; canvases.len()];
    for (i, v, _) in &warm {
        last[*i] = last[*i].max(*v);
    }
    settle(&format!("fleet ({label})"), SETTLE_CAP, || subs_behind(&all, &last)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("[bench]   fleet: publishing {rate} events/s through the {label} endpoint for {} s", ctx.size.duration.as_secs());
    let cpu0 = MachineCpu::now().ok();
    let (sent, answers) = load(ctx.size.duration).await;
    let busy = busy_since(cpu0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let achieved = sent.len() as f64 / ctx.size.duration.as_secs_f64();
    let (h, m) = join(&sent, &direct.iter().collect::<Vec<_>>());
    let d = Dist { cores_busy_pct: busy, ..dist(&h, m, achieved) };
    let (h, m) = join(&sent, &via_gw.iter().collect::<Vec<_>>());
    let g = Dist { cores_busy_pct: busy, ..dist(&h, m, achieved) };
    println!("[bench]   fleet ({label}): {} accepted ({achieved:.0}/s, cores {} busy); direct {d:?}; via gateway {g:?}", sent.len(), pct(busy));
    let a = Dist { cores_busy_pct: busy, ..dist(&answers, 0, achieved) };
    println!("[bench]   fleet ({label}): request → HTTP answer p50 {:.2} ms, p99 {:.2} ms", a.p50_ms, a.p99_ms);
    Ok((Some(d), Some(g), Some(a)))
}
