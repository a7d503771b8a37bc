//! Memory per idle connection: resident memory of the server with 1k, 5k and 10k idle subscribed
//! WebSocket connections, minus its resident memory with none, per connection; for the fleet also
//! the gateway proxying them.

use super::report::{Better, Cell, Row};
use super::servers::Server;
use super::subs::{self, System};
use super::sys;
use super::Ctx;
use std::time::Duration;

/// RSS growth per connection at each level, bytes.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Growth {
    pub levels: Vec<(usize, f64)>,
    /// For the fleet: the gateway's growth.
    pub gateway: Vec<(usize, f64)>,
}

async fn settle_rss(pid: u32) -> anyhow::Result<u64> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    sys::rss_bytes(pid)
}

/// Opens idle connections to `base` level by level and reports `pid`'s RSS growth per connection.
async fn grow(system: System, base: &str, pid: u32, levels: &[usize], what: &str) -> anyhow::Result<Vec<(usize, f64)>> {
    let tag = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let canvases: Vec<String> = (0..100).map(|i| format!("mem{tag}-{i}")).collect();
    let base_rss = settle_rss(pid).await?;
    let mut held = Vec::new();
    let mut out = Vec::new();
    for &n in levels {
        let more = subs::subscribe_many(system, base, &canvases, n - held.len(), false).await?;
        held.extend(more);
        let rss = settle_rss(pid).await?;
        let per = (rss.saturating_sub(base_rss)) as f64 / n as f64;
        out.push((n, per));
        println!("[bench]   {what}: {n} idle connections, RSS {} MiB (+{:.1} KiB per connection)", rss >> 20, per / 1024.0);
        let closed = subs::ended(&held);
        if closed > 0 {
            anyhow::bail!("{what}: {closed} idle connections were closed by the server");
        }
    }
    Ok(out)
}

/// The most connections a proxy can hold under this process's open-file limit (children
/// inherit it): two descriptors per proxied connection, and some to spare.
fn proxy_cap() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(s, _)| s);
    (soft.saturating_sub(512) / 2) as usize
}

async fn one(ctx: &Ctx, system: System, levels: &[usize]) -> anyhow::Result<Growth> {
    let server = Server::start(system, ctx).await?;
    let result = async {
        let mut g = Growth { levels: grow(system, &server.ws_base, server.pid, levels, system.label()).await?, gateway: Vec::new() };
        if let Some((gw_base, gw_pid)) = &server.gateway {
            // A second pass through the gateway (the first pass's connections are closed).
            tokio::time::sleep(Duration::from_secs(1)).await;
            let cap = proxy_cap();
            let gw_levels: Vec<usize> = levels.iter().map(|n| (*n).min(cap)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
            g.gateway = grow(system, gw_base, *gw_pid, &gw_levels, "gateway").await?;
        }
        Ok(g)
    }
    .await;
    server.stop().await;
    result
}

/// Measures every system at `levels` (ascending connection counts); returns the rows.
pub async fn run(ctx: &Ctx, levels: &[usize]) -> Vec<Row> {
    println!("[bench] memory per idle connection at {levels:?} connections");
    let mut by_system = Vec::new();
    for system in ctx.systems() {
        match one(ctx, system, levels).await {
            Ok(g) => by_system.push((system, Some(g))),
            Err(e) => {
                ctx.error(format!("memory on {}: {e:#}", system.label()));
                by_system.push((system, None));
            }
        }
    }
    let setup = format!(
        "idle WebSocket connections, each subscribed to one of 100 canvases that receive nothing, opened 100 at a time; \
         (RSS with N connections − RSS with none) / N, VmRSS from /proc 2 s after the last connection opened; the ws-node is measured \
         with clients connected to it directly, the gateway in a second pass with clients connected through it (a proxied connection \
         needs two descriptors there, so its largest level is capped by the open-file limit, {} here); {}", proxy_cap(), ctx.broker_label);
    let mut rows = Vec::new();
    for (k, &n) in levels.iter().enumerate() {
        let cell = |s: System| -> Cell {
            match by_system.iter().find(|(x, _)| *x == s) {
                Some((_, Some(g))) => g.levels.get(k).map_or(Cell::na("not measured"), |(_, b)| Cell::Value(b / 1024.0)),
                Some((_, None)) => Cell::na("failed: see errors"),
                None => Cell::na("not run (--no-peers)"),
            }
        };
        let ours = cell(System::Fleet);
        let met = match ours { Cell::Value(v) => Some(v < 16.0), _ => None };
        let mut r = Row {
            section: "memory".into(),
            figure: format!("KiB per idle connection, {n} connections (server process)"),
            setup: setup.clone(),
            better: Better::Lower,
            ours,
            centrifugo: cell(System::Peer(super::peers::Peer::Centrifugo)),
            socketio: cell(System::Peer(super::peers::Peer::SocketIo)),
            target: None,
            met: None,
        };
        if let Some(m) = met {
            r = r.with_target("< 16 KiB on a ws-node", m);
        }
        rows.push(r);
    }
    if let Some((_, Some(g))) = by_system.iter().find(|(x, _)| *x == System::Fleet) {
        for (n, b) in &g.gateway {
            rows.push(Row::ours_only("memory", &format!("KiB per idle connection, {n} connections (the gateway proxying them)"), setup.clone(), Better::Lower, b / 1024.0, "no proxy of theirs"));
        }
    }
    rows
}
