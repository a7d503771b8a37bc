//! Steady publishing through the publisher's HTTP API: random pixels and colours, round-robin over
//! a few canvases, at a fixed rate. Used by the `load` binary (the `load` service of
//! `docker-compose.yml`) and by the end-to-end harness.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Counters of a load run.
#[derive(Debug, Default)]
pub struct LoadStats {
    /// 201 answers.
    pub accepted: AtomicU64,
    /// 503 answers (retryable; the version was not used).
    pub unavailable: AtomicU64,
    /// Anything else (connection errors, 4xx).
    pub failed: AtomicU64,
    /// Highest version accepted per canvas.
    pub heads: Mutex<BTreeMap<String, u64>>,
}

/// A running load generator.
pub struct Load {
    pub stats: Arc<LoadStats>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    /// Publishes `rate` events/s spread round-robin over `canvases`, random pixels and colours,
    /// with at most 32 requests in flight.
    pub fn start(publisher: &str, canvases: Vec<String>, rate: f64, width: u32, height: u32) -> Self {
        let stats = Arc::new(LoadStats::default());
        let cancel = CancellationToken::new();
        let (s, c, url) = (stats.clone(), cancel.clone(), publisher.to_owned());
        let task = tokio::spawn(async move {
            let http = reqwest::Client::new();
            let permits = Arc::new(tokio::sync::Semaphore::new(32));
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut i = 0usize;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = c.cancelled() => break,
                }
                let Ok(permit) = permits.clone().acquire_owned().await else { break };
                let canvas = canvases[i % canvases.len()].clone();
                i += 1;
                let body = serde_json::json!({
                    "x": rand::random::<u32>() % width,
                    "y": rand::random::<u32>() % height,
                    "color": format!("#{:06x}", rand::random::<u32>() & 0xff_ffff),
                });
                let (http, s, url) = (http.clone(), s.clone(), format!("{url}/canvases/{canvas}/pixels"));
                tokio::spawn(async move {
                    let _permit = permit;
                    match http.post(&url).json(&body).timeout(Duration::from_secs(15)).send().await {
                        Ok(r) if r.status().as_u16() == 201 => {
                            s.accepted.fetch_add(1, Ordering::Relaxed);
                            if let Ok(v) = r.json::<serde_json::Value>().await {
                                let version = v["version"].as_u64().unwrap_or(0);
                                let mut heads = s.heads.lock().expect("heads lock");
                                let h = heads.entry(canvas).or_default();
                                *h = (*h).max(version);
                            }
                        }
                        Ok(r) if r.status().as_u16() == 503 => {
                            s.unavailable.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            s.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            // Let requests in flight finish.
            let _ = permits.acquire_many(32).await;
        });
        Self { stats, cancel, task }
    }

    /// Stops publishing and waits for requests in flight.
    pub async fn stop(self) -> Arc<LoadStats> {
        self.cancel.cancel();
        let _ = self.task.await;
        self.stats
    }

    /// Accepted so far.
    pub fn accepted(&self) -> u64 {
        self.stats.accepted.load(Ordering::Relaxed)
    }
}
