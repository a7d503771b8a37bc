//! `gateway`: the single entry point for clients and the lifecycle orchestrator of the nodes.
//!
//! It polls every node's `/health`, decides by fixed rules (a streak of consecutive UP polls
//! before start-recovery; failback when a recovered node owns partitions again) and acts
//! (start-recovery, scoped failback drains, maintenance drains), recording every decision with its
//! reason. It proxies each client's WebSocket to the node that owns the client's canvas.
//!
//! It forwards the pages' publishes and canvas reads to the publisher that accepts writes.
//!
//! Modules: [`config`], [`lifecycle`] (the rules, pure), [`fleet`] (views, polling, actions,
//! routing), [`proxy`] (WebSocket pass-through), [`publishers`] (which publisher gets a forwarded
//! request), [`api`] (routes), [`assets`] (the pages and the browser client, built in).

pub mod api;
pub mod assets;
pub mod config;
pub mod fleet;
pub mod lifecycle;
pub mod proxy;
pub mod publishers;

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
