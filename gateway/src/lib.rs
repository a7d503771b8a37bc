//! `gateway`: the single entry point for clients and the lifecycle orchestrator of the nodes.
//!
//! It polls every node's `/health`, decides by fixed rules (a streak of consecutive UP polls
//! before start-recovery, longer after flaps; failback when a recovered node owns partitions
//! again; ejection of a node whose consumer stalled) and acts (start-recovery, scoped failback
//! drains, maintenance and ejection drains), recording every decision with its reason. It proxies each client's WebSocket to the node that owns the client's channel.
//!
//! It forwards the pages' publishes and channel reads to the publisher that accepts writes, and
//! promotes a standby publisher when none has accepted writes for three probes in a row.
//!
//! Modules: [`config`], [`lifecycle`] (the rules, pure), [`breaker`] (a circuit breaker per node
//! on the proxy path, pure) under [`handshakes`] (the handshake rate bound and breaker of every
//! node), [`admission`] (wait queues for full nodes, failback pacing), [`refusal`] (why a
//! handshake got no upstream), [`sessions`] (the proxied sessions), [`fleet`] (views, polling,
//! actions, routing), [`decisions`] (the decision log, the control topic's writer and reader),
//! [`leader`] (the election), [`node_admin`] (calls to the nodes' admin routes),
//! [`publisher_admin`] (a standby publisher's promotion), [`health`]
//! (whether the gateway's view of the fleet is fresh), [`history`] (the last minutes, for the
//! charts), [`proxy`] (WebSocket pass-through), [`publishers`] (which publisher gets a forwarded
//! request), [`promotion`] (when a standby publisher is promoted, pure), [`redaction`] (what `/api/fleet` hides without the admin token), [`api`] (routes),
//! [`assets`] (the pages and the browser client, built in), [`metrics`] (`GET /metrics`).

pub mod admission;
pub mod api;
pub mod assets;
pub mod breaker;
pub mod config;
pub mod decisions;
pub mod fleet;
pub mod fuzzing;
pub mod handshakes;
pub mod health;
pub mod history;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
pub mod node_admin;
pub mod promotion;
pub mod proxy;
pub mod publisher_admin;
pub mod publishers;
pub mod redaction;
pub mod refusal;
pub mod sessions;
pub mod to_leader;
pub mod unique_id;

use crate::config::Config;
use crate::fleet::Fleet;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long shutdown waits for the gateway's tasks (proxied sessions' closing handshakes, requests
/// in flight, the election leaving its group) before the process exits anyway.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs the gateway on `listener` until `shutdown` is cancelled. Every task it starts is tracked
/// by the fleet's [`tokio_util::task::TaskTracker`] and ends on that one signal; shutdown waits for
/// them, at most [`SHUTDOWN_WAIT`].
///
/// # Errors
/// When the HTTP server fails.
pub async fn run(config: Config, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    let fleet = Fleet::new(config, shutdown.clone());
    tracing::info!(
        addr = %listener.local_addr()?,
        nodes = ?fleet.nodes.iter().map(|n| format!("{}={}", n.addr.id, n.addr.url)).collect::<Vec<_>>(),
        poll_interval_ms = fleet.config.poll_interval_ms,
        up_threshold = fleet.config.up_threshold,
        publishers = ?fleet.publishers.urls(),
        "[GATEWAY] listening; polling nodes"
    );
    let tasks = fleet.tasks.clone();
    if fleet.config.kafka_bootstrap.is_none() {
        tracing::warn!(
            "[GATEWAY] standalone (no KAFKA_BOOTSTRAP): no control topic and no leader election; this gateway decides alone and sends no fencing token. \
             Run exactly one gateway this way; for replicas, set KAFKA_BOOTSTRAP on each"
        );
    }
    if let Some(bootstrap) = fleet.config.kafka_bootstrap.clone() {
        // Before joining the election: no other live replica under this GATEWAY_ID.
        let (settings, group, id) = (fleet.config.kafka_settings(&bootstrap), fleet.config.gateway_group.clone(), fleet.config.id());
        let timeout = std::time::Duration::from_millis(fleet.config.leader_session_timeout_ms);
        if let Err(why) = tokio::task::spawn_blocking(move || unique_id::check(&settings, &group, &id, timeout)).await? {
            tracing::error!("[GATEWAY] refusing to start: {}", why);
            eprintln!("error: {why}");
            std::process::exit(shared::control::EXIT_DUPLICATE_ID);
        }
    }
    start_election(&fleet, &shutdown);
    tasks.spawn(fleet.clone().run_poller(shutdown.clone()));
    tasks.spawn(fleet.clone().run_publisher_probe(shutdown.clone()));
    tasks.spawn(fleet.limiter.clone().run_cleanup(shutdown.clone()));
    let limits = fleet.config.serve.limits();
    if fleet.admin_token.is_none() {
        // No credential: the drain and the full `/api/fleet` are served on loopback only.
        let admin = shared::shutdown::listen(fleet.config.admin_listen)?;
        tracing::info!(addr = %admin.local_addr()?, "admin routes on the loopback listener (no ADMIN_TOKEN)");
        let (routes, stop) = (api::admin_router(fleet.clone()), shutdown.clone());
        tasks.spawn(async move {
            // The same server as the public one: header-read timeout and connection cap.
            if let Err(e) = shared::serve::serve(admin, routes, limits, stop.cancelled_owned()).await {
                tracing::error!(error = %e, "admin listener failed");
            }
        });
    }
    let mut served = tasks.spawn(shared::serve::serve(listener, api::router(fleet.clone()), limits, shutdown.clone().cancelled_owned()));
    tokio::select! {
        r = &mut served => {
            // The server ended by itself: a failure (it ends on the signal otherwise).
            r??;
        }
        _ = shutdown.cancelled() => {}
    }
    tracing::info!("[GATEWAY] shutting down: proxied sessions close with 1001, the election leaves the gateways' group");
    tasks.close();
    if tokio::time::timeout(SHUTDOWN_WAIT, tasks.wait()).await.is_err() {
        tracing::warn!(
            tasks = tasks.len(),
            proxied_sessions = fleet.sessions.count(),
            "[GATEWAY] tasks still running {} s after shutdown; exiting anyway",
            SHUTDOWN_WAIT.as_secs()
        );
    }
    tracing::info!("[GATEWAY] stopped");
    Ok(())
}

/// With Kafka configured: creates the control topic when missing, reads it into the fleet, joins
/// the election, and resumes open failbacks whenever this replica becomes the leader; all of it
/// tracked by the fleet's tasks, until `shutdown`.
fn start_election(fleet: &std::sync::Arc<Fleet>, shutdown: &CancellationToken) {
    let c = &fleet.config;
    let Some(bootstrap) = c.kafka_bootstrap.clone() else { return };
    let settings = c.kafka_settings(&bootstrap);
    let topic = c.control_topic.clone();
    let tasks = fleet.tasks.clone();
    let (fleet, shutdown) = (fleet.clone(), shutdown.clone());
    tasks.clone().spawn(async move {
        match shared::kafka::ensure_topic(&settings, &fleet.config.id(), &topic, 1, fleet.config.replication_factor, &shared::control::TOPIC_CONFIGS).await {
            Ok(1) => {
                // In the background: a broker that answers no DescribeConfigs takes its timeout,
                // and the election must not wait for that.
                let (settings, id, topic, stop) = (settings.clone(), fleet.config.id(), topic.clone(), shutdown.clone());
                tasks.spawn(async move {
                    tokio::select! {
                        () = shared::control::check_topic(&settings, &id, &topic) => {}
                        () = stop.cancelled() => {}
                    }
                });
            }
            Ok(n) => tracing::warn!(topic, partitions = n, "[GATEWAY] the control topic has {n} partitions; only partition 0 is used"),
            Err(e) => tracing::warn!(topic, error = %e, "[GATEWAY] could not check or create the control topic; the election waits for it"),
        }
        if shutdown.is_cancelled() {
            return;
        }
        {
            let (reader, caught_up) = (fleet.clone(), fleet.clone());
            let (settings, topic, stop) = (settings.clone(), topic.clone(), shutdown.clone());
            let client_id = format!("{}-control", fleet.config.id());
            tasks.spawn_blocking(move || {
                let on = move |offset, record| {
                    reader.read_control(offset, record);
                    reader.leadership.read_to(offset + 1);
                };
                if let Err(e) = shared::control::follow(&settings, &client_id, &topic, &stop, on, move |next| caught_up.leadership.read_to(next)) {
                    tracing::error!(topic, error = %e, "cannot read the control topic");
                }
            });
        }
        let producer = match settings
            .producer(&format!("{}-claims", fleet.config.id()), std::time::Duration::from_secs(10))
            .create_with_context(shared::kafka::FleetContext::default())
        {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "[GATEWAY] cannot build the claim producer: this replica stays a follower");
                return;
            }
        };
        let election = leader::Election {
            kafka: settings,
            topic,
            group: fleet.config.gateway_group.clone(),
            session_timeout: std::time::Duration::from_millis(fleet.config.leader_session_timeout_ms),
            heartbeat: std::time::Duration::from_millis(fleet.config.leader_heartbeat_ms),
        };
        {
            let (leadership, stop) = (fleet.leadership.clone(), shutdown.clone());
            tasks.spawn_blocking(move || leader::run_until(&leadership, &election, &producer, &stop));
        }
        let mut became = fleet.leadership.became_leader.subscribe();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                r = became.changed() => {
                    if r.is_err() { break; }
                    fleet.resume_open_failbacks();
                }
            }
        }
    });
}
