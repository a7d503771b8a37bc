//! Random fault schedules (`cargo run --release -p e2e --bin chaos`): a seed draws a list of
//! overlapping faults ([`schedule`], pure), a fleet runs under steady publishing through the
//! gateway while they happen ([`run`]), and afterwards, once the fleet is quiet again, every
//! client's history is checked: zero lost, duplicated or out of order, the final hash equal to the
//! publisher's, and the longest time each client waited for an event.
//!
//! Faults, on any node, the gateway or the publisher: kill -9 and a restart 1–10 s later; SIGSTOP
//! for 1–20 s then SIGCONT; SIGTERM and a restart 1–10 s later; and, on a node, a maintenance
//! drain through the gateway. They start at random times within the schedule and overlap. The
//! same seed gives the same fault list (not the same interleaving: processes and the broker keep
//! their own timing).

use crate::broker::Broker;
use crate::checker::Verdict;
use crate::faults::{seen, Seen};
use crate::fleet::{Fleet, FleetSpec};
use crate::procs::Timeline;
use crate::scenario::{finish, pick_canvases, spawn_clients, wait_for_heads};
use crate::writer::Writer;
use anyhow::Context;
use rand::{Rng, SeedableRng};
use shared::CanvasDims;
use std::sync::Arc;
use std::time::Duration;

/// What a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Node `ws-<n + 1>`.
    Node(usize),
    Gateway,
    Publisher,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Node(i) => write!(f, "ws-{}", i + 1),
            Target::Gateway => f.write_str("gateway"),
            Target::Publisher => f.write_str("publisher"),
        }
    }
}

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL, then a restart after `down`.
    Kill { down: Duration },
    /// SIGSTOP, then SIGCONT after `for_`.
    Freeze { for_: Duration },
    /// SIGTERM (a graceful stop), then a restart after `down`.
    Term { down: Duration },
    /// `POST /api/fleet/nodes/{id}/drain` (a node only): the gateway recovers it afterwards.
    Drain,
}

/// One fault of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// From the start of the schedule.
    pub at: Duration,
    pub target: Target,
    pub action: Action,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = self.at.as_secs_f64();
        match self.action {
            Action::Kill { down } => write!(f, "t={at:.1}s kill -9 {} (restart after {:.1}s)", self.target, down.as_secs_f64()),
            Action::Freeze { for_ } => write!(f, "t={at:.1}s SIGSTOP {} for {:.1}s", self.target, for_.as_secs_f64()),
            Action::Term { down } => write!(f, "t={at:.1}s SIGTERM {} (restart after {:.1}s)", self.target, down.as_secs_f64()),
            Action::Drain => write!(f, "t={at:.1}s maintenance drain of {}", self.target),
        }
    }
}

/// How a schedule is drawn.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub nodes: usize,
    /// Faults start within this long.
    pub span: Duration,
    pub faults: usize,
}

/// The fault list of `seed`: `faults` faults at random times within `span`, sorted by time. Most
/// hit nodes (each node as likely as the gateway and the publisher together).
pub fn schedule(seed: u64, sizes: &Sizes) -> Vec<Fault> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let ms = |rng: &mut rand::rngs::StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..=hi));
    let mut faults: Vec<Fault> = (0..sizes.faults)
        .map(|_| {
            let at = ms(&mut rng, 0, sizes.span.as_millis() as u64);
            let pick = rng.random_range(0..sizes.nodes + 2);
            let target = match pick {
                n if n < sizes.nodes => Target::Node(n),
                n if n == sizes.nodes => Target::Gateway,
                _ => Target::Publisher,
            };
            let kinds = if matches!(target, Target::Node(_)) { 4 } else { 3 };
            let action = match rng.random_range(0..kinds) {
                0 => Action::Kill { down: ms(&mut rng, 1_000, 10_000) },
                1 => Action::Freeze { for_: ms(&mut rng, 1_000, 20_000) },
                2 => Action::Term { down: ms(&mut rng, 1_000, 10_000) },
                _ => Action::Drain,
            };
            Fault { at, target, action }
        })
        .collect();
    faults.sort_by_key(|f| f.at);
    faults
}

/// Sizes of a run's fleet and load.
#[derive(Debug, Clone)]
pub struct Load {
    pub clients: usize,
    pub canvases: usize,
    /// Publishes per second through the gateway.
    pub rate: f64,
}

/// What one schedule did and found.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub seed: u64,
    pub faults: Vec<Fault>,
    pub verdicts: Vec<Verdict>,
    pub seen: Vec<Seen>,
    /// Publishes the gateway acknowledged.
    pub acked: usize,
    /// What went wrong besides the clients' verdicts (the fleet did not settle, ...).
    pub problems: Vec<String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.problems.is_empty() && !self.verdicts.is_empty() && self.verdicts.iter().all(Verdict::ok)
    }

    /// The longest any client waited for an event.
    pub fn longest_wait_ms(&self) -> u64 {
        self.seen.iter().map(|s| s.longest_wait_ms).max().unwrap_or(0)
    }

    /// A report for people: the faults, each client's result, the verdict.
    pub fn summary(&self) -> String {
        let mut s = format!("schedule seed={} — {}\n", self.seed, if self.passed() { "PASSED" } else { "FAILED" });
        for f in &self.faults {
            s += &format!("   fault: {f}\n");
        }
        let lost: usize = self.verdicts.iter().map(|v| v.lost.len()).sum();
        let dup: usize = self.verdicts.iter().map(|v| v.duplicated).sum();
        let ooo: usize = self.verdicts.iter().map(|v| v.out_of_order).sum();
        let hash = self.verdicts.iter().filter(|v| v.hash_matches).count();
        s += &format!(
            "   {} publishes acknowledged; {} clients: lost {lost}, duplicated {dup}, out of order {ooo}, hash equal {hash}/{}; longest wait {} ms\n",
            self.acked,
            self.verdicts.len(),
            self.verdicts.len(),
            self.longest_wait_ms()
        );
        for v in self.verdicts.iter().filter(|v| !v.ok()) {
            s += &format!("   client {} ({}): {v:?}\n", v.name, v.canvas);
        }
        for p in &self.problems {
            s += &format!("   problem: {p}\n");
        }
        if !self.passed() {
            s += &format!("   replay: cargo run --release -p e2e --bin chaos -- --replay {}\n", self.seed);
        }
        s
    }
}

/// The process a target names.
fn service(fleet: &mut Fleet, t: Target) -> &mut crate::procs::Service {
    match t {
        Target::Node(i) => &mut fleet.nodes[i],
        Target::Gateway => &mut fleet.gateway,
        Target::Publisher => &mut fleet.publisher,
    }
}

fn signal(fleet: &mut Fleet, t: Target, sig: nix::sys::signal::Signal) -> Option<i32> {
    let pid = service(fleet, t).pid()? as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).ok()?;
    Some(pid)
}

/// Carries `f` out (and undoes it: restart, SIGCONT) on the shared fleet.
async fn perform(fleet: Arc<tokio::sync::Mutex<Fleet>>, f: Fault, tl: Arc<Timeline>) {
    use nix::sys::signal::Signal;
    match f.action {
        Action::Kill { down } | Action::Term { down } => {
            {
                let mut fl = fleet.lock().await;
                let s = service(&mut fl, f.target);
                if !s.running() {
                    tl.mark(format!("[CHAOS] {f}: already down"));
                    return;
                }
                tl.mark(format!("[CHAOS] {f}"));
                if matches!(f.action, Action::Kill { .. }) {
                    s.kill9().await;
                } else {
                    // A frozen process gets the SIGTERM on its SIGCONT; the harness waits a while.
                    s.terminate(Duration::from_secs(15)).await;
                }
            }
            tokio::time::sleep(down).await;
            let mut fl = fleet.lock().await;
            let s = service(&mut fl, f.target);
            if !s.running() {
                tl.mark(format!("[CHAOS] restart {}", f.target));
                if let Err(e) = s.start() {
                    tl.mark(format!("[CHAOS] restart of {} failed: {e}", f.target));
                }
            }
        }
        Action::Freeze { for_ } => {
            let pid = signal(&mut *fleet.lock().await, f.target, Signal::SIGSTOP);
            tl.mark(format!("[CHAOS] {f}{}", if pid.is_none() { ": not running" } else { "" }));
            tokio::time::sleep(for_).await;
            if let Some(pid) = pid {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGCONT);
                tl.mark(format!("[CHAOS] SIGCONT {}", f.target));
            }
        }
        Action::Drain => {
            let (url, req) = {
                let fl = fleet.lock().await;
                let url = format!("{}/api/fleet/nodes/{}/drain", fl.admin_base(&fl.gateway), f.target);
                let req = fl.admin(fl.http.post(&url).json(&serde_json::json!({})).timeout(Duration::from_secs(30)));
                (url, req)
            };
            tl.mark(format!("[CHAOS] {f}"));
            match req.send().await {
                Ok(r) => tl.mark(format!("[CHAOS] drain of {}: {}", f.target, r.status())),
                Err(e) => tl.mark(format!("[CHAOS] drain of {} not done ({url}): {e}", f.target)),
            }
        }
    }
}

/// Runs `faults` on a fresh fleet on `broker` under `load`, waits for quiescence and judges every
/// client.
///
/// # Errors
/// When the fleet cannot start.
pub async fn run(broker: &Broker, spec: FleetSpec, load: &Load, seed: u64, faults: Vec<Fault>, tl: Arc<Timeline>) -> anyhow::Result<Outcome> {
    let dims = CanvasDims { width: spec.width, height: spec.height };
    let partitions = spec.partitions;
    let fleet = Fleet::start(broker, spec, tl.clone()).await.context("start the fleet")?;
    let node_ids: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let state = fleet.fleet_state().await.map_err(anyhow::Error::msg)?;
    let canvases = pick_canvases(&state, partitions, load.canvases, &node_ids);
    let clients = spawn_clients(&fleet, &canvases, load.clients, dims).await?;
    let writer = Writer::start(&fleet.gateway.url(), canvases.clone(), load.rate, dims.width, dims.height);
    tl.mark(format!("[CHAOS] schedule seed={seed}: {} faults; {} clients over {} canvases, {} events/s through the gateway", faults.len(), load.clients, canvases.len(), load.rate));
    let started_ms = shared::event::now_ms();
    let fleet = Arc::new(tokio::sync::Mutex::new(fleet));
    let tasks: Vec<_> = faults
        .iter()
        .map(|f| {
            let (fleet, tl, f) = (fleet.clone(), tl.clone(), *f);
            tokio::spawn(async move {
                tokio::time::sleep(f.at).await;
                perform(fleet, f, tl).await;
            })
        })
        .collect();
    futures::future::join_all(tasks).await;
    tl.mark("[CHAOS] every fault done and undone; waiting for the fleet to settle");
    let mut fleet = Arc::try_unwrap(fleet).map_err(|_| anyhow::anyhow!("a fault task kept the fleet")).context("fault tasks")?.into_inner();
    let mut problems = Vec::new();
    let nodes = fleet.nodes.len();
    let settled = fleet
        .wait_fleet("every node HEALTHY and every partition owned", Duration::from_secs(180), |f| {
            let list = f["nodes"].as_array().cloned().unwrap_or_default();
            let healthy = list.iter().filter(|n| n["state"] == "HEALTHY").count();
            let owned: std::collections::BTreeSet<i64> =
                list.iter().flat_map(|n| n["assigned_partitions"].as_array().cloned().unwrap_or_default()).filter_map(|p| p.as_i64()).collect();
            (healthy == nodes && owned.len() == partitions as usize)
                .then_some(())
                .ok_or(format!("{healthy}/{nodes} HEALTHY, {}/{partitions} partitions owned", owned.len()))
        })
        .await;
    if let Err(e) = settled {
        problems.push(format!("the fleet did not settle: {e:#}"));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = writer.stop().await;
    let acked = stats.acked_count();
    let (verdicts, seen) = match wait_for_heads(&fleet, &clients, &canvases).await {
        Ok(truths) => {
            let (reports, verdicts) = finish(clients, &truths).await;
            (verdicts, reports.iter().map(|r| seen(r, started_ms)).collect())
        }
        Err(e) => {
            problems.push(format!("clients did not reach their heads: {e:#}"));
            (Vec::new(), Vec::new())
        }
    };
    fleet.stop().await;
    Ok(Outcome { seed, faults, verdicts, seen, acked, problems })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: Sizes = Sizes { nodes: 2, span: Duration::from_secs(30), faults: 5 };

    #[test]
    fn a_seed_draws_the_same_list_and_another_seed_another() {
        assert_eq!(schedule(7, &SIZES), schedule(7, &SIZES));
        assert_ne!(schedule(7, &SIZES), schedule(8, &SIZES));
    }

    #[test]
    fn faults_are_sorted_within_the_span_and_bounded() {
        for seed in 0..200 {
            let s = schedule(seed, &SIZES);
            assert_eq!(s.len(), 5);
            assert!(s.windows(2).all(|w| w[0].at <= w[1].at), "seed {seed}: sorted");
            for f in &s {
                assert!(f.at <= SIZES.span);
                match f.action {
                    Action::Kill { down } | Action::Term { down } => assert!(down >= Duration::from_secs(1) && down <= Duration::from_secs(10)),
                    Action::Freeze { for_ } => assert!(for_ >= Duration::from_secs(1) && for_ <= Duration::from_secs(20)),
                    Action::Drain => assert!(matches!(f.target, Target::Node(_)), "seed {seed}: only nodes are drained"),
                }
                if let Target::Node(i) = f.target {
                    assert!(i < SIZES.nodes);
                }
            }
        }
    }

    #[test]
    fn every_kind_of_fault_and_target_is_drawn() {
        let all: Vec<Fault> = (0..100).flat_map(|s| schedule(s, &SIZES)).collect();
        for t in [Target::Node(0), Target::Node(1), Target::Gateway, Target::Publisher] {
            assert!(all.iter().any(|f| f.target == t), "{t} is hit");
        }
        assert!(all.iter().any(|f| matches!(f.action, Action::Kill { .. })));
        assert!(all.iter().any(|f| matches!(f.action, Action::Freeze { .. })));
        assert!(all.iter().any(|f| matches!(f.action, Action::Term { .. })));
        assert!(all.iter().any(|f| matches!(f.action, Action::Drain)));
    }

    #[test]
    fn faults_are_written_for_people() {
        let f = Fault { at: Duration::from_millis(2500), target: Target::Node(1), action: Action::Freeze { for_: Duration::from_secs(4) } };
        assert_eq!(f.to_string(), "t=2.5s SIGSTOP ws-2 for 4.0s");
    }
}
