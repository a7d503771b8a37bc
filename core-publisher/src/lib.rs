//! `core-publisher`: the fleet's only writer.
//!
//! It takes channel edits over HTTP, gives each channel a contiguous version (1, 2, 3, ...), writes
//! the versioned event to Kafka keyed by channel id inside a Kafka transaction, and answers only
//! after the transaction committed. On start it creates the topic when missing, initialises its
//! transactional producers (fencing any older publisher on the topic) and rebuilds
//! every channel's head from the committed log before it accepts writes (503 until then). It
//! refuses to start on a broker without transaction partition verification ([`verification`]),
//! and does not rebuild while another producer's transaction holds the log
//! ([`rebuild::refuse_open_transactions`]). When a newer publisher fences it, it answers 503
//! `fenced` and exits. Started with `--standby` it follows the log instead of writing
//! ([`follow`], [`standby`], [`role`]) until the gateway leader promotes it ([`admin`]).
//!
//! Modules: [`config`] (flags and environment), [`api`] (HTTP routes and errors), [`types`]
//! (answers and errors), [`verification`] (the broker setting checked at start), [`versions`] (the
//! version authority: start-up, publish, truth),
//! [`partition`] (a partition's queue, heads and isolation policy), [`committer`] (the shared
//! committer and the isolated partitions' ones), [`idempotency`] (`Idempotency-Key`), [`input`]
//! (records of the users' own Kafka topics, versioned exactly once), [`log`] (the
//! Kafka side as the version logic sees it), [`txn`] (one transactional producer), [`metrics`]
//! (`GET /metrics`).

pub mod admin;
pub mod answers;
pub mod api;
pub mod channels_api;
pub mod committer;
pub mod config;
pub mod follow;
pub mod heads;
pub mod fuzzing;
pub mod idempotency;
pub mod input;
pub mod keylog;
pub mod log;
pub mod metrics;
pub mod partition;
pub mod rebuild;
pub mod role;
pub mod snapshots;
pub mod standby;
pub mod txn;
pub mod types;
pub mod verification;
pub mod versions;

use crate::config::Config;
use crate::log::kafka::{ensure_topics, KafkaLog};
use crate::txn::ProducerSettings;
use crate::versions::{RebuildError, Versions};
use backon::{ExponentialBuilder, Retryable};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long a fenced publisher keeps answering (503 `fenced`) before it exits, so callers and the
/// gateway learn where to go instead of meeting a closed port.
pub const FENCED_EXIT_AFTER: Duration = Duration::from_secs(2);

/// Runs the publisher on `listener` until `shutdown` is cancelled, or until another publisher
/// fences it (then it stops after [`FENCED_EXIT_AFTER`]). A producer that fails for good makes it
/// start over (new producers, the log read again), as a restart would.
///
/// The HTTP server starts at once (answering 503 until ready); creating the topic, initialising
/// the transactional producers and rebuilding the heads retry with backoff until the broker
/// answers, and until no other producer's transaction holds the log
/// ([`rebuild::refuse_open_transactions`]).
///
/// # Errors
/// When the server cannot run (the listener failed), or a broker has partition verification off
/// ([`verification`]): the process then stops at once instead of retrying.
pub async fn run(config: Config, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    let settings = config.kafka();
    let retry = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times();
    // The namespaces every record is written under (its fingerprint goes in a record header).
    let namespaces = config.namespaces();
    let kafka_log = KafkaLog::new(ProducerSettings {
        kafka: settings.clone(),
        topic: config.topic.clone(),
        snapshot_topic: config.snapshot_topic(),
        transactional_id: config.transactional_id(),
        message_timeout: config.produce_timeout(),
        transaction_timeout: config.transaction_timeout(),
        namespaces_fingerprint: namespaces.fingerprint().to_owned(),
    });
    let timings = crate::versions::Timings {
        answer_timeout: config.answer_timeout(),
        stall_after: config.partition_stall(),
        snapshots: config.snapshot_policy(),
        key_window: Duration::from_millis(config.idempotency_window_ms),
    };
    let input = config.input();
    let mut versions = Versions::new(kafka_log, namespaces, 0, timings)
        .with_max_channels(config.max_channels as usize)
        .with_idempotency_keys(config.idempotency_keys_max as usize);
    if let Some(input) = &input {
        versions = versions.with_input(input.topics.iter().map(|t| (t.topic.clone(), t.namespace.clone())).collect());
    }
    let versions = Arc::new(if config.standby { versions.as_standby() } else { versions });

    // Set when the start is refused for good (a broker setting): the process then stops with it.
    let refused: Arc<std::sync::Mutex<Option<String>>> = Arc::default();

    // The server answers at once (503 until ready); the topic and the heads come from Kafka.
    let prepare = {
        let (versions, shutdown, config, refused) = (versions.clone(), shutdown.clone(), config.clone(), refused.clone());
        async move {
            let snapshot_topic = config.snapshot_topic();
            let ensure = || {
                ensure_topics(&settings, &config.topic, &snapshot_topic, config.partitions, config.replication_factor, config.retention_ms)
            };
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
            // Once the broker answers: refuse to start on a broker without partition
            // verification, for good (no retry changes a setting; see `verification`).
            if let Err(e) = crate::verification::check(&settings).await {
                tracing::error!(error = %e, "refusing to start");
                *refused.lock().expect("refusal lock") = Some(e.to_string());
                shutdown.cancel();
                return;
            }
            versions.set_partitions(partitions);
            if config.standby {
                tracing::info!(topic = %config.topic, partitions, transactional_id = %config.transactional_id(),
                    "standby: following the log without writing (writes and /ready get 503 standby) until the gateway leader promotes it");
                versions.follow(&shutdown).await;
                if shutdown.is_cancelled() {
                    return;
                }
            }
            tracing::info!(topic = %config.topic, partitions, transactional_id = %config.transactional_id(),
                "initialising the transactional producers (this fences an older publisher), then rebuilding channel \
                 versions from the committed log; writes get 503 until done");
            loop {
                let started = std::time::Instant::now();
                let rebuild = || versions.rebuild();
                let r = tokio::select! {
                    r = rebuild
                        .retry(retry)
                        .when(|e| !matches!(e, RebuildError::Fenced))
                        .notify(|e, d| tracing::warn!(error = %e, retry_in = ?d, "start-up failed; retrying")) => r,
                    _ = shutdown.cancelled() => return,
                };
                match r {
                    Ok(n) => {
                        versions.counters().metrics.rebuilt(started.elapsed());
                        tracing::info!(events = n, channels = versions.channel_count(), took_ms = started.elapsed().as_millis() as u64,
                            "channel versions rebuilt; accepting writes")
                    }
                    Err(e) => return tracing::error!(error = %e, "start-up gave up"),
                }
                // The input is read only now, by the publisher that writes: its producers fenced
                // any older one, so what it reads from the committed offsets is final.
                if let (Some(input), Some(queue)) = (&input, versions.input_queue()) {
                    let (v, stop) = (versions.clone(), shutdown.clone());
                    let keep_going = move || !stop.is_cancelled() && !v.is_fenced() && !v.failed();
                    if let Err(e) = crate::input::consumer::spawn(settings.clone(), input.clone(), queue, keep_going) {
                        tracing::error!(error = %e, "no thread for the input consumer; the input topics are not read");
                    }
                }
                tokio::select! {
                    _ = versions.stopped_for_good() => {}
                    _ = shutdown.cancelled() => return,
                }
                if !versions.failed() {
                    return; // fenced: see below
                }
                // A producer failed for good (librdkafka's fatal errors other than fencing): start
                // over as a restarted process would, fencing and reading the log again.
                tracing::warn!(reason = %versions.stopped().unwrap_or_default(),
                    "a transactional producer failed for good; starting over: new producers, then the log read again (writes get 503 meanwhile)");
                versions.start_over();
            }
        }
    };
    tokio::spawn(prepare);

    // Fenced: keep answering 503 `fenced` for a moment, then stop (exit status 0: another
    // publisher serves the topic now).
    {
        let (versions, shutdown) = (versions.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = versions.stopped_for_good() => {}
                    _ = shutdown.cancelled() => return,
                }
                if versions.is_fenced() {
                    break;
                }
                // Failed: the start-up task starts over; wait for the next stop.
                tokio::select! {
                    _ = async { while versions.failed() { tokio::time::sleep(Duration::from_millis(50)).await } } => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            tracing::warn!(exit_in_ms = FENCED_EXIT_AFTER.as_millis() as u64,
                "another publisher took over this topic (same transactional ids); answering 503 fenced, then exiting");
            tokio::time::sleep(FENCED_EXIT_AFTER).await;
            shutdown.cancel();
        });
    }

    tracing::info!(addr = %listener.local_addr()?, topic = %config.topic, standby = config.standby, "publisher listening");
    let tokens = config.client_tokens.load().map_err(anyhow::Error::msg)?;
    let limiter = Arc::new(config.rate.limiter());
    tokio::spawn(limiter.clone().run_cleanup(shutdown.clone()));
    // The admin route (a standby's promotion) checks the gateway leader's fencing token against
    // the claims a standby reads from the control topic itself (an active publisher refuses a
    // promotion anyway: it reads none).
    let reads_claims = config.standby && !config.control_topic.is_empty();
    let guard = Arc::new(shared::fence::Guard::new(reads_claims, "PUBLISHER"));
    let claims = CancellationToken::new();
    if reads_claims {
        shared::fence::spawn_claim_reader(config.kafka(), "core-publisher", config.control_topic.clone(), guard.fence.clone(), claims.clone(), "PUBLISHER");
    }
    let limits = config.serve.limits();
    let mut app = api::router_with(versions.clone(), tokens, limiter, config.admin_token());
    match config.admin_token() {
        Some(token) => {
            app = app.merge(
                admin::routes(versions.clone(), guard.clone(), shared::control::Listener::Public, shared::admin_guard::AdminGuard::Token)
                    .route_layer(axum::middleware::from_fn_with_state(token, shared::auth::require_admin)),
            );
        }
        // Without a token, only a standby serves the route (on loopback): an active publisher has
        // nothing to be promoted to, and two publishers on one host would want the same port.
        None if !config.standby => {}
        None => {
            let admin = shared::shutdown::listen(config.admin_listen)?;
            tracing::info!(addr = %admin.local_addr()?, "admin route (POST /admin/promote) on the loopback listener (no ADMIN_TOKEN)");
            let (routes, stop) = (admin::loopback_router(versions.clone(), guard.clone()), shutdown.clone());
            tokio::spawn(async move {
                if let Err(e) = shared::serve::serve(admin, routes, limits, stop.cancelled_owned()).await {
                    tracing::error!(error = %e, "admin listener failed");
                }
            });
        }
    }
    shared::serve::serve(listener, app, limits, shutdown.cancelled_owned()).await?;
    claims.cancel();
    if let Some(why) = refused.lock().expect("refusal lock").take() {
        anyhow::bail!("refused to start: {why}");
    }
    tracing::info!("publisher stopped");
    Ok(())
}
