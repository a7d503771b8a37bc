//! `gateway`: the single entry point for clients and the lifecycle orchestrator of the nodes.
//!
//! It polls every node's `/health`, decides by fixed rules (a streak of consecutive UP polls
//! before start-recovery, longer after flaps; failback when a recovered node owns partitions
//! again; ejection of a node whose consumer stalled) and acts (start-recovery, scoped failback
//! drains, maintenance and ejection drains), recording every decision with its reason. It proxies each client's WebSocket to the node that owns the client's canvas.
//!
//! It forwards the pages' publishes and canvas reads to the publisher that accepts writes.
//!
//! Modules: [`config`], [`lifecycle`] (the rules, pure), [`breaker`] (a circuit breaker per node
//! on the proxy path, pure), [`admission`] (wait queues for full
//! nodes, failback pacing), [`fleet`] (views, polling, actions, routing), [`health`] (whether the
//! gateway's view of the fleet is fresh), [`history`] (the last minutes, for the charts),
//! [`proxy`] (WebSocket pass-through), [`publishers`] (which publisher gets a forwarded request),
//! [`redaction`] (what `/api/fleet` hides without the admin token), [`api`] (routes), [`assets`] (the pages and the browser client, built in), [`metrics`]
//! (`GET /metrics`).

pub mod admission;
pub mod api;
pub mod assets;
pub mod breaker;
pub mod config;
pub mod fleet;
pub mod fuzzing;
pub mod health;
pub mod history;
pub mod lifecycle;
pub mod metrics;
pub mod proxy;
pub mod publishers;
pub mod redaction;

use crate::config::Config;
use crate::fleet::Fleet;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Runs the gateway on `listener` until `shutdown` is cancelled.
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
    tokio::spawn(fleet.clone().run_poller(shutdown.clone()));
    let probed = fleet.clone();
    let probe_shutdown = shutdown.clone();
    tokio::spawn(async move { probed.publishers.run_prober(probe_shutdown).await });
    tokio::spawn(fleet.limiter.clone().run_cleanup(shutdown.clone()));
    let limits = fleet.config.serve.limits();
    if fleet.admin_token.is_none() {
        // No credential: the drain and the full `/api/fleet` are served on loopback only.
        let admin = shared::shutdown::listen(fleet.config.admin_listen)?;
        tracing::info!(addr = %admin.local_addr()?, "admin routes on the loopback listener (no ADMIN_TOKEN)");
        let (routes, stop) = (api::admin_router(fleet.clone()), shutdown.clone());
        tokio::spawn(async move {
            // The same server as the public one: header-read timeout and connection cap.
            if let Err(e) = shared::serve::serve(admin, routes, limits, stop.cancelled_owned()).await {
                tracing::error!(error = %e, "admin listener failed");
            }
        });
    }
    let serve = shared::serve::serve(listener, api::router(fleet), limits, shutdown.clone().cancelled_owned());
    // Proxied sessions close with 1001 on shutdown; do not wait for stragglers forever.
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    };
    tokio::select! {
        r = serve => r?,
        _ = deadline => tracing::warn!("[GATEWAY] connections still open 5 s after shutdown; exiting anyway"),
    }
    tracing::info!("[GATEWAY] stopped");
    Ok(())
}
