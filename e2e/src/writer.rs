//! A careful writer: publishes through the gateway with an `Idempotency-Key` on every event and
//! retries, with the same key, whatever may be retried — 503 (nothing applied, or outcome unknown),
//! 504 (the gateway's "outcome unknown"), 409 `idempotency_key_in_flight`, a connection that failed —
//! until the publish is answered 201 (or a give-up bound passes). What a user of the fleet who
//! must not lose or double a write would run; the fault tests check its acknowledgements against
//! the log ([`crate::audit`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One acknowledged publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub key: String,
    pub canvas: String,
    pub version: u64,
    /// Answered as the replay of an earlier attempt (`Idempotent-Replayed: true`).
    pub replayed: bool,
}

/// Counters and acknowledgements of a writer run.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Every publish acknowledged with 201, in the order the answers came.
    pub acked: Mutex<Vec<Acked>>,
    /// Requests sent (first attempts and retries).
    pub attempts: AtomicU64,
    /// Retries by the answer that caused them: 503 nothing applied (`kafka_unavailable`,
    /// `fenced`, `not_ready`, `publisher_unavailable`, ...).
    pub retried_not_applied: AtomicU64,
    /// ... 503 `kafka_outcome_unknown`, 504, a broken connection: may have been applied.
    pub retried_unknown: AtomicU64,
    /// ... 409 `idempotency_key_in_flight`.
    pub retried_in_flight: AtomicU64,
    /// Publishes given up on (never acknowledged within the bound), and answers that must not
    /// happen to this writer (409 conflict, 4xx): `(key, what)`.
    pub failed: Mutex<Vec<(String, String)>>,
    /// Longest time one publish took from its first attempt to its 201, ms.
    pub longest_ms: AtomicU64,
}

impl WriterStats {
    /// Acknowledged publishes so far.
    pub fn acked_count(&self) -> usize {
        self.acked.lock().expect("acked lock").len()
    }
}

/// A running writer.
pub struct Writer {
    pub stats: Arc<WriterStats>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// How long one publish is retried before the writer gives up on it.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(90);

impl Writer {
    /// Publishes `rate` events/s round-robin over `canvases` through the gateway at `gateway`
    /// (`http://host:port`), random pixels of a `width` × `height` canvas, at most 32 publishes in
    /// flight; keys are `<run>-<n>`.
    pub fn start(gateway: &str, canvases: Vec<String>, rate: f64, width: u32, height: u32) -> Self {
        let stats = Arc::new(WriterStats::default());
        let cancel = CancellationToken::new();
        let (s, c, base) = (stats.clone(), cancel.clone(), gateway.trim_end_matches('/').to_owned());
        let run = format!("{:08x}", rand::random::<u32>());
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
                let key = format!("{run}-{i}");
                i += 1;
                let body = serde_json::json!({
                    "x": rand::random::<u32>() % width,
                    "y": rand::random::<u32>() % height,
                    "color": format!("#{:06x}", rand::random::<u32>() & 0xff_ffff),
                });
                let (http, s, url) = (http.clone(), s.clone(), format!("{base}/api/canvases/{canvas}/pixels"));
                tokio::spawn(async move {
                    let _permit = permit;
                    publish(&http, &url, &canvas, &key, &body, &s).await;
                });
            }
            // Let publishes in flight finish (each bounded by GIVE_UP_AFTER).
            let _ = permits.acquire_many(32).await;
        });
        Self { stats, cancel, task }
    }

    /// Stops starting publishes and waits for those in flight to be acknowledged or given up.
    pub async fn stop(self) -> Arc<WriterStats> {
        self.cancel.cancel();
        let _ = self.task.await;
        self.stats
    }
}

/// One publish, retried with its key until 201 or [`GIVE_UP_AFTER`].
async fn publish(http: &reqwest::Client, url: &str, canvas: &str, key: &str, body: &serde_json::Value, s: &WriterStats) {
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        s.attempts.fetch_add(1, Ordering::Relaxed);
        let sent = http.post(url).header("idempotency-key", key).json(body).timeout(Duration::from_secs(20)).send().await;
        let retry = match sent {
            Ok(r) => {
                let status = r.status().as_u16();
                let replayed = r.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
                let json: serde_json::Value = r.json().await.unwrap_or_default();
                let code = json["error"].as_str().unwrap_or_default().to_owned();
                match status {
                    201 => {
                        let version = json["version"].as_u64().unwrap_or(0);
                        s.acked.lock().expect("acked lock").push(Acked { key: key.into(), canvas: canvas.into(), version, replayed });
                        s.longest_ms.fetch_max(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                        return;
                    }
                    503 if code == "kafka_outcome_unknown" => &s.retried_unknown,
                    503 => &s.retried_not_applied,
                    504 => &s.retried_unknown,
                    409 if code == "idempotency_key_in_flight" => &s.retried_in_flight,
                    other => {
                        s.failed.lock().expect("failed lock").push((key.into(), format!("{other} {json}")));
                        return;
                    }
                }
            }
            // The gateway did not answer: as ambiguous as a 504.
            Err(_) => &s.retried_unknown,
        };
        retry.fetch_add(1, Ordering::Relaxed);
        if started.elapsed() > GIVE_UP_AFTER {
            s.failed.lock().expect("failed lock").push((key.into(), format!("not acknowledged within {GIVE_UP_AFTER:?}")));
            return;
        }
        tokio::time::sleep(delay.mul_f64(0.5 + rand::random::<f64>())).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}
