//! `core-publisher`: the fleet's only writer.
//!
//! It takes canvas edits over HTTP, gives each canvas a contiguous version (1, 2, 3, ...), appends
//! the versioned event to Kafka keyed by canvas id and answers only after Kafka acknowledged it.
//! On start it creates the topic when missing and rebuilds every canvas's head from the log before
//! it accepts writes (503 until then).
//!
//! Modules: [`config`] (flags and environment), [`api`] (HTTP routes and errors), [`versions`]
//! (version authority, reconciliation, rebuild), [`idempotency`] (`Idempotency-Key`),
//! [`log`] (the Kafka side).

pub mod api;
pub mod config;
pub mod idempotency;
pub mod log;
pub mod versions;

use crate::config::Config;
use crate::log::KafkaLog;
use crate::versions::Versions;
use backon::{ExponentialBuilder, Retryable};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Runs the publisher on `listener` until `shutdown` is cancelled.
///
/// The HTTP server starts at once (answering 503 until ready); creating the topic when it is
/// missing and rebuilding the heads retry with backoff until the broker answers.
///
/// # Errors
/// When the server cannot run (the listener failed) or Kafka's client configuration is invalid.
pub async fn run(config: Config, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    let settings = config.kafka();
    let retry = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times();
    let kafka_log = KafkaLog::new(settings.clone(), config.topic.clone(), config.produce_timeout())?;
    let versions = Arc::new(Versions::new(kafka_log, config.dims(), 0));

    // The server answers at once (503 until ready); the topic and the heads come from Kafka.
    let prepare = {
        let (versions, shutdown, config) = (versions.clone(), shutdown.clone(), config.clone());
        async move {
            let ensure = || log::ensure_topic(&settings, &config.topic, config.partitions, config.replication_factor);
            let partitions = tokio::select! {
                r = ensure.retry(retry).notify(|e, d| tracing::warn!(error = %e, retry_in = ?d, "topic not ready; retrying")) => r,
                _ = shutdown.cancelled() => return,
            };
            let partitions = match partitions {
                Ok(n) => n,
                Err(e) => return tracing::error!(error = %e, "topic set-up gave up"),
            };
            if partitions != config.partitions {
                tracing::warn!(topic = %config.topic, configured = config.partitions, actual = partitions,
                    "topic exists with another partition count; using the topic's");
            }
            versions.set_partitions(partitions);
            tracing::info!(topic = %config.topic, partitions, "rebuilding canvas versions from the log; writes get 503 until done");
            let started = std::time::Instant::now();
            let r = tokio::select! {
                r = (|| versions.rebuild()).retry(retry).notify(|e, d| tracing::warn!(error = %e, retry_in = ?d, "rebuild failed; retrying")) => r,
                _ = shutdown.cancelled() => return,
            };
            match r {
                Ok(n) => tracing::info!(records = n, canvases = versions.canvas_count(), took_ms = started.elapsed().as_millis() as u64,
                    "canvas versions rebuilt; accepting writes"),
                Err(e) => tracing::error!(error = %e, "rebuild gave up"),
            }
        }
    };
    tokio::spawn(prepare);

    tracing::info!(addr = %listener.local_addr()?, topic = %config.topic, "publisher listening");
    axum::serve(shared::http::no_delay(listener), api::router(versions))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    tracing::info!("publisher stopped");
    Ok(())
}
