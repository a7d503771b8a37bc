//! Failover and failback of the fleet under load: kill -9 of a node with clients → time until
//! every client receives live events again; the same after a graceful stop (SIGTERM); during each
//! failback to the restarted node, the longest any client waited for an event; and the promise
//! over every client ([`crate::checker::Summary`]: events lost, duplicated, out of order, extra
//! snapshots, hash mismatches).

use super::report::{Better, Row};
use super::Ctx;
use crate::checker::Summary;
use crate::client::Kind;
use crate::fleet::{Fleet, FleetSpec};
use crate::load::Load;
use crate::procs::Timeline;
use crate::scenario::{all_receiving, finish, pick_canvases, spawn_clients, wait_failback, wait_for_heads};
use shared::CanvasDims;
use std::time::Duration;

/// What one failover run measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Outcome {
    pub clients: usize,
    pub canvases: usize,
    pub rate: f64,
    /// kill -9 → every client received an event published after the kill, ms.
    pub kill_ms: u64,
    /// SIGTERM → the same, ms.
    pub graceful_ms: u64,
    /// Longest publish → receive delay of any event published from a restart until the failback
    /// completed and settled, ms (the longest any client went without an event it should have had).
    pub failback_gap_ms: u64,
    pub published: u64,
    /// The promise over every client, whole run.
    pub promise: Summary,
}

async fn measure(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let spec = FleetSpec::default();
    let dims = CanvasDims { width: spec.width, height: spec.height };
    let tl = Timeline::new(false);
    let mut fleet = Fleet::start(&ctx.broker, spec.clone(), tl.clone()).await?;
    let result = async {
        let state = fleet.fleet_state().await.map_err(anyhow::Error::msg)?;
        let canvases = pick_canvases(&state, spec.partitions, ctx.size.failover_canvases, &["ws-1".into(), "ws-2".into()]);
        let n = ctx.size.failover_clients;
        println!("[bench]   {n} clients over {} canvases through the gateway", canvases.len());
        let clients = spawn_clients(&fleet, &canvases, n, dims).await?;
        let load = Load::start(&fleet.publisher.url(), canvases.clone(), ctx.size.failover_rate, dims.width, dims.height);
        tokio::time::sleep(Duration::from_secs(3)).await;

        let mut o = Outcome { clients: n, canvases: canvases.len(), rate: ctx.size.failover_rate, ..Outcome::default() };
        let mut windows = Vec::new();

        // kill -9 ws-1.
        let at = shared::event::now_ms();
        fleet.nodes[0].kill9().await;
        println!("[bench]   kill -9 ws-1");
        o.kill_ms = all_receiving(&clients, at, "every client receiving again after kill -9 of ws-1", Duration::from_secs(120)).await?;
        println!("[bench]   every client receiving again {} ms after the kill", o.kill_ms);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let restart = shared::event::now_ms();
        fleet.nodes[0].start()?;
        println!("[bench]   ws-1 restarted; waiting for its recovery and the failback");
        wait_failback(&fleet, "ws-1", restart).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        windows.push((restart, shared::event::now_ms()));
        println!("[bench]   failback to ws-1 completed");
        // Events published from here on belong to the next disruption, not to this failback.
        tokio::time::sleep(Duration::from_secs(2)).await;

        // Graceful stop of ws-1 (SIGTERM: it drains its sessions and leaves the group).
        let at = shared::event::now_ms();
        fleet.nodes[0].terminate(Duration::from_secs(15)).await;
        println!("[bench]   SIGTERM ws-1");
        o.graceful_ms = all_receiving(&clients, at, "every client receiving again after SIGTERM of ws-1", Duration::from_secs(120)).await?;
        println!("[bench]   every client receiving again {} ms after the SIGTERM", o.graceful_ms);
        if std::env::var_os("BENCH_TIMELINE").is_some() {
            // The client that waited longest, and why.
            let slowest = clients
                .iter()
                .map(|c| c.report())
                .max_by_key(|r| r.got.iter().find(|g| g.kind == Kind::Event && g.at_ms > at && g.published_at_ms > at).map_or(u64::MAX, |g| g.at_ms));
            let refusals = tl.grep("gateway", "refused");
            println!("[bench] gateway refusals so far: {} (last 5: {:?})", refusals.len(), refusals.iter().rev().take(5).collect::<Vec<_>>());
            let held = tl.grep("gateway", "handshake held");
            println!("[bench] handshakes held by the gateway: {} (last 3: {:?})", held.len(), held.iter().rev().take(3).collect::<Vec<_>>());
            if let Some(r) = slowest {
                let t0 = shared::event::now_ms() - tl.start.elapsed().as_millis() as u64;
                println!("[bench] slowest after SIGTERM: {} {} causes {:?} sessions {:?}", r.name, r.channel, r.causes,
                    r.sessions.iter().map(|s| format!("#{} dialed {:.2} open {:.2}-{:.2} {:?}", s.n, (s.dialed_ms.saturating_sub(t0)) as f64 / 1000.0, (s.opened_ms.saturating_sub(t0)) as f64 / 1000.0, s.closed_ms.map_or(0.0, |c| (c.saturating_sub(t0)) as f64 / 1000.0), s.end)).collect::<Vec<_>>());
            }
            let slow = tl.grep("gateway", "slow upstream");
            println!("[bench] slow upstream handshakes: {} (last 3: {:?})", slow.len(), slow.iter().rev().take(3).collect::<Vec<_>>());
            let waited = tl.grep("ws-2", "waited for its state");
            println!("[bench] ws-2 handshakes that waited for the state: {} (last 3: {:?})", waited.len(), waited.iter().rev().take(3).collect::<Vec<_>>());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let restart = shared::event::now_ms();
        fleet.nodes[0].start()?;
        wait_failback(&fleet, "ws-1", restart).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        windows.push((restart, shared::event::now_ms()));
        println!("[bench]   second failback to ws-1 completed");

        let stats = load.stop().await;
        o.published = stats.accepted.load(std::sync::atomic::Ordering::Relaxed);
        let truths = wait_for_heads(&fleet, &clients, &canvases).await?;
        let (reports, verdicts) = finish(clients, &truths).await;
        o.promise = Summary::of(&verdicts);
        println!("[bench]   promise: {}", o.promise);
        o.failback_gap_ms = reports
            .iter()
            .flat_map(|r| r.got.iter())
            .filter(|g| g.kind == Kind::Event && windows.iter().any(|(a, b)| g.published_at_ms >= *a && g.published_at_ms <= *b))
            .map(|g| g.at_ms.saturating_sub(g.published_at_ms))
            .max()
            .unwrap_or(0);
        if std::env::var_os("BENCH_TIMELINE").is_some() {
            let worst = reports
                .iter()
                .flat_map(|r| r.got.iter().map(move |g| (r, g)))
                .filter(|(_, g)| g.kind == Kind::Event && windows.iter().any(|(a, b)| g.published_at_ms >= *a && g.published_at_ms <= *b))
                .max_by_key(|(_, g)| g.at_ms.saturating_sub(g.published_at_ms));
            if let Some((r, g)) = worst {
                let t0 = shared::event::now_ms() - tl.start.elapsed().as_millis() as u64;
                println!("[bench] worst: {} {} v{} published at {:.2}s received at {:.2}s; sessions {:?}", r.name, r.channel, g.version,
                    (g.published_at_ms - t0) as f64 / 1000.0, (g.at_ms - t0) as f64 / 1000.0,
                    r.sessions.iter().map(|s| format!("#{} {:.2}-{:.2} {:?}", s.n, (s.opened_ms.saturating_sub(t0)) as f64 / 1000.0, s.closed_ms.map_or(0.0, |c| (c.saturating_sub(t0)) as f64 / 1000.0), s.end)).collect::<Vec<_>>());
            }
            for e in tl.entries() {
                println!("{:>7.2}s {:<10} {}", e.at.as_secs_f64(), e.source, e.text);
            }
        }
        Ok(o)
    }
    .await;
    fleet.stop().await;
    result
}

/// Runs the failover measure; returns the rows.
pub async fn run(ctx: &Ctx) -> Vec<Row> {
    println!("[bench] failover and failback with {} clients", ctx.size.failover_clients);
    let o = match measure(ctx).await {
        Ok(o) => o,
        Err(e) => {
            ctx.error(format!("failover: {e:#}"));
            return Vec::new();
        }
    };
    println!("[bench]   {o:?}");
    let setup = format!(
        "two ws-nodes, 6 partitions, the gateway polling every 500 ms; {} reconnecting clients (resume by version) over {} canvases \
         through the gateway; {} events/s through the HTTP publisher; session.timeout.ms 6000; {} events published; {}",
        o.clients, o.canvases, o.rate, o.published, ctx.broker_label
    );
    let why = "a single server: a fleet needs their Redis/NATS broker and a load balancer, outside this comparison";
    vec![
        Row::ours_only("failover", "kill -9 of a node → every client receiving live events again, ms", setup.clone(), Better::Lower, o.kill_ms as f64, why)
            .with_target("≤ 10,000 ms", o.kill_ms <= 10_000),
        Row::ours_only("failover", "graceful stop (SIGTERM) → every client receiving again, ms", setup.clone(), Better::Lower, o.graceful_ms as f64, why)
            .with_target("≤ 2,000 ms", o.graceful_ms <= 2_000),
        Row::ours_only("failover", "failback: longest any client waited for an event, ms", setup.clone(), Better::Lower, o.failback_gap_ms as f64, why)
            .with_target("≤ 1,000 ms", o.failback_gap_ms <= 1_000),
        Row::ours_only(
            "failover",
            "promise violations (all clients, whole run): events lost + duplicated + out of order + extra snapshots + hash mismatches",
            format!("{setup}; {}", o.promise),
            Better::Lower,
            o.promise.violations() as f64,
            why,
        )
        .with_target("0 violations", o.promise.ok()),
    ]
}
