//! `ws-node`: a WebSocket server of the fleet.
//!
//! It keeps every channel's state in memory, built from the Kafka log; when started (or after a
//! full drain) it is UP but not ready until the gateway sends start-recovery, which replays what it
//! missed (catch-up), after which it joins the broadcast group and serves sessions of the channels
//! whose partitions it owns.
//!
//! Modules, each importing only those above it: [`config`], [`state`] (one channel and its recent
//! events), [`counters`] (event counts), [`outbox`] (a session's ordered writer), [`ownership`]
//! (each partition's role: owned, held, paused, bridged), [`progress`] (DEGRADED: stalls and
//! pauses), [`lifecycle`] (the node's state machine), [`admission`] (session capacity: seats);
//! [`fanout`] (the node-wide writer); [`hub`] (channels, sessions, positions); [`session`] (one
//! WebSocket), [`drain`] (hand-over steps), [`catchup`] (replay up to the targets), [`snapshot`]
//! (a takeover's start from the snapshots), [`readers`] (the group-less readers' assignment);
//! [`standby`] (the other partitions kept current); [`broadcast`] (live consumer and rebalances);
//! [`node`] (ties them together); [`metrics`] (`GET /metrics`) and [`http`] (routes). The admin
//! routes' guard against a deposed gateway leader is [`shared::fence`].

pub mod admission;
pub mod broadcast;
pub mod catchup;
pub mod config;
pub mod counters;
pub mod drain;
pub mod fanout;
pub mod http;
pub mod fuzzing;
pub mod heal;
pub mod hub;
pub mod lifecycle;
pub mod metrics;
pub mod node;
pub mod outbox;
pub mod ownership;
pub mod progress;
pub mod readers;
pub mod session;
pub mod snapshot;
pub mod standby;
pub mod state;

use crate::config::Config;
use crate::node::Node;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Runs a node on `listener` until `shutdown` is cancelled; then drains (reason SHUTDOWN), leaves
/// the broadcast group and returns.
///
/// With no `ADMIN_TOKEN` it also serves the admin routes on `ADMIN_LISTEN_ADDR` (loopback).
///
/// # Errors
/// When the HTTP server fails, or the admin listener cannot be bound.
pub async fn run(config: Config, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    let node = Node::new(config, shutdown.clone());
    tracing::info!(
        node = %node.config.node_id,
        addr = %listener.local_addr()?,
        topic = %node.config.topic,
        group = %node.config.broadcast_group,
        "[NODE] {} is UP (not ready): waiting for start-recovery",
        node.config.node_id
    );
    // The claim reader runs until the HTTP server has stopped (admin routes check its fence).
    let claims = CancellationToken::new();
    if !node.config.control_topic.is_empty() {
        shared::fence::spawn_claim_reader(
            node.config.kafka(),
            &node.config.node_id,
            node.config.control_topic.clone(),
            node.guard.fence.clone(),
            claims.clone(),
            "NODE",
        );
    }
    let app = http::router(node.clone());
    let limits = node.config.serve.limits();
    if node.config.admin_token().is_none() {
        // No credential: the admin routes are served on loopback only.
        let admin = shared::shutdown::listen(node.config.admin_listen)?;
        tracing::info!(addr = %admin.local_addr()?, "admin routes on the loopback listener (no ADMIN_TOKEN)");
        let (routes, stop) = (http::admin_router(node.clone()), shutdown.clone());
        tokio::spawn(async move {
            // The same server as the public one: header-read timeout and connection cap.
            if let Err(e) = shared::serve::serve(admin, routes, limits, stop.cancelled_owned()).await {
                tracing::error!(error = %e, "admin listener failed");
            }
        });
    }
    // A record the node must not skip (a later format) stops it, with the reason as its error.
    let (hub, stop) = (node.hub.clone(), shutdown.clone());
    tokio::spawn(async move {
        loop {
            let woken = hub.stopping.notified();
            if hub.fatal().is_some() {
                break;
            }
            woken.await;
        }
        stop.cancel();
    });
    let n = node.clone();
    shared::serve::serve(listener, app, limits, async move {
        shutdown.cancelled().await;
        tracing::info!("[NODE] {} shutting down: draining sessions and leaving the group", n.config.node_id);
        n.shut_down().await;
    })
    .await?;
    claims.cancel();
    if let Some(why) = node.hub.fatal() {
        tracing::error!("[NODE] {} stopped: {why}", node.config.node_id);
        anyhow::bail!("stopped: {why}");
    }
    tracing::info!("[NODE] {} stopped", node.config.node_id);
    Ok(())
}
