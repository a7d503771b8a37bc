//! Random fault schedules (`cargo run --release -p e2e --bin chaos`): a seed draws a list of
//! overlapping faults ([`schedule`], pure), a fleet runs under steady publishing through the
//! gateway while they happen ([`run`]), and afterwards, once the fleet is quiet again, every
//! client's history is checked: zero lost, duplicated or out of order, the final hash equal to the
//! publisher's, and the longest time each client waited for an event.
//!
//! Faults, on any node, gateway replica or the publisher: kill -9 and a restart 1–10 s later;
//! SIGSTOP for 1–20 s then SIGCONT; SIGTERM and a restart 1–10 s later. On a node: a maintenance
//! drain through a gateway, and, on a broker with links ([`Broker::start_with_links`]), its link
//! to Kafka frozen, slowed or cut for 1–20 s ([`crate::link`]). On the three-node cluster: a Kafka
//! node killed (restarted 1–10 s later) or frozen for 1–20 s. On the clients: one in three stops
//! reading for 1–20 s, or every client drops its connection and reconnects at once (a reconnect
//! storm). They start at random times within the schedule and overlap. The same seed and sizes
//! give the same fault list (not the same interleaving: processes and the broker keep their own
//! timing).
//!
//! With [`Sizes::leader_faults`] (`--leader-faults`) the gateway leader is a target of its own
//! ([`Target::Leader`]: whichever replica leads when the fault starts): kill -9, SIGTERM, or
//! SIGSTOP for 7–20 s, past the group's session timeout, so it wakes up deposed. After every
//! schedule the gateways' control topic is audited ([`crate::control_audit`]): a decision that a
//! deposed leader wrote and carried out fails the schedule.

use crate::broker::Broker;
use crate::checker::Verdict;
use crate::client::{Client, ClientTiming};
use crate::faults::{seen, Seen};
use crate::fleet::{Fleet, FleetSpec};
use crate::link::LinkMode;
use crate::procs::Timeline;
use crate::scenario::{finish, pick_canvases, wait_connected, wait_for_heads};
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
    /// Gateway replica `n` (`gateway`, `gateway-2`, ...).
    Gateway(usize),
    /// Whichever gateway replica leads when the fault starts (a running replica's `/api/fleet`
    /// names it; gateway 0 when none does). Drawn only with [`Sizes::leader_faults`].
    Leader,
    Publisher,
    /// Kafka node `n + 1` of the three-node cluster.
    Broker(usize),
    /// The clients `from`, `from + every`, `from + 2 × every`, ...
    Clients { from: usize, every: usize },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Node(i) => write!(f, "ws-{}", i + 1),
            Target::Gateway(0) => f.write_str("gateway"),
            Target::Gateway(i) => write!(f, "gateway-{}", i + 1),
            Target::Leader => f.write_str("the gateway leader"),
            Target::Publisher => f.write_str("publisher"),
            Target::Broker(i) => write!(f, "kafka-{}", i + 1),
            Target::Clients { every: 1, .. } => f.write_str("every client"),
            Target::Clients { from, every } => write!(f, "one client in {every} (client-{from}, client-{}, ...)", from + every),
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
    /// The node's link to Kafka frozen, slowed or cut for `for_`, then passing again.
    Link { mode: LinkMode, for_: Duration },
    /// The clients stop reading for `for_`, then read again.
    StopReading { for_: Duration },
    /// Every client closes its connection and reconnects at once, without backoff.
    Storm,
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
            Action::Link { mode: LinkMode::Slow(d), for_ } => {
                write!(f, "t={at:.1}s link of {} to Kafka slowed by {} ms per chunk for {:.1}s", self.target, d.as_millis(), for_.as_secs_f64())
            }
            Action::Link { mode, for_ } => write!(f, "t={at:.1}s link of {} to Kafka {mode} for {:.1}s", self.target, for_.as_secs_f64()),
            Action::StopReading { for_ } => write!(f, "t={at:.1}s {} stops reading for {:.1}s", self.target, for_.as_secs_f64()),
            Action::Storm => write!(f, "t={at:.1}s reconnect storm: {} drops its connection and reconnects at once", self.target),
        }
    }
}

/// How a schedule is drawn (a replay needs the same sizes as the run it repeats).
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub nodes: usize,
    /// Gateway replicas.
    pub gateways: usize,
    /// Faults start within this long.
    pub span: Duration,
    pub faults: usize,
    /// Each node reaches Kafka through a link proxy, so links can fail.
    pub links: bool,
    /// Kafka nodes that can be killed and frozen (3 on the cluster, else 0).
    pub brokers: usize,
    /// Clients (for the one-in-three pick of [`Action::StopReading`]).
    pub clients: usize,
    /// The gateway leader is a target of its own ([`Target::Leader`], weight 2), frozen for 7–20 s
    /// (longer than the 6 s `LEADER_SESSION_TIMEOUT_MS`, so the group replaces it), killed or
    /// stopped. Off, the draw is the one of the seeds before the flag existed.
    pub leader_faults: bool,
}

/// The fault list of `seed`: `faults` faults at random times within `span`, sorted by time.
/// The target is drawn first, by weight: each node 2, each gateway 1, the publisher 1, each
/// Kafka node 1, the clients 2, and with [`Sizes::leader_faults`] the gateway leader 2 (after the
/// others, so the draws without it are unchanged); then one of the actions that target can take,
/// each as likely.
pub fn schedule(seed: u64, sizes: &Sizes) -> Vec<Fault> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let ms = |rng: &mut rand::rngs::StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..=hi));
    let mut targets: Vec<(Target, u32)> = (0..sizes.nodes).map(|i| (Target::Node(i), 2)).collect();
    targets.extend((0..sizes.gateways.max(1)).map(|i| (Target::Gateway(i), 1)));
    targets.push((Target::Publisher, 1));
    targets.extend((0..sizes.brokers).map(|i| (Target::Broker(i), 1)));
    targets.push((Target::Clients { from: 0, every: 1 }, 2));
    if sizes.leader_faults {
        targets.push((Target::Leader, 2));
    }
    let total: u32 = targets.iter().map(|t| t.1).sum();
    let mut faults: Vec<Fault> = (0..sizes.faults)
        .map(|_| {
            let at = ms(&mut rng, 0, sizes.span.as_millis() as u64);
            let mut pick = rng.random_range(0..total);
            let mut target = targets[0].0;
            for (t, w) in &targets {
                if pick < *w {
                    target = *t;
                    break;
                }
                pick -= w;
            }
            let kill = |rng: &mut rand::rngs::StdRng| Action::Kill { down: ms(rng, 1_000, 10_000) };
            let freeze = |rng: &mut rand::rngs::StdRng| Action::Freeze { for_: ms(rng, 1_000, 20_000) };
            let term = |rng: &mut rand::rngs::StdRng| Action::Term { down: ms(rng, 1_000, 10_000) };
            let action = match target {
                Target::Node(_) => match rng.random_range(0..if sizes.links { 5 } else { 4 }) {
                    0 => kill(&mut rng),
                    1 => freeze(&mut rng),
                    2 => term(&mut rng),
                    3 => Action::Drain,
                    _ => {
                        let mode = match rng.random_range(0..3) {
                            0 => LinkMode::Freeze,
                            1 => LinkMode::Slow(ms(&mut rng, 50, 1_000)),
                            _ => LinkMode::Cut,
                        };
                        Action::Link { mode, for_: ms(&mut rng, 1_000, 20_000) }
                    }
                },
                Target::Gateway(_) | Target::Publisher => match rng.random_range(0..3) {
                    0 => kill(&mut rng),
                    1 => freeze(&mut rng),
                    _ => term(&mut rng),
                },
                // Frozen longer than the group's session timeout: the other replica takes over
                // while it sleeps, and it wakes up deposed.
                Target::Leader => match rng.random_range(0..3) {
                    0 => kill(&mut rng),
                    1 => Action::Freeze { for_: ms(&mut rng, 7_000, 20_000) },
                    _ => term(&mut rng),
                },
                Target::Broker(_) => match rng.random_range(0..2) {
                    0 => kill(&mut rng),
                    _ => freeze(&mut rng),
                },
                Target::Clients { .. } => {
                    if rng.random_bool(0.5) {
                        target = Target::Clients { from: rng.random_range(0..3usize.min(sizes.clients.max(1))), every: 3 };
                        Action::StopReading { for_: ms(&mut rng, 1_000, 20_000) }
                    } else {
                        Action::Storm
                    }
                }
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
    /// The audit of the gateways' control topic (`None` when it could not be read: see `problems`).
    pub control: Option<crate::control_audit::ControlAudit>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
            && !self.verdicts.is_empty()
            && self.verdicts.iter().all(Verdict::ok)
            && self.control.as_ref().is_none_or(crate::control_audit::ControlAudit::ok)
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
        if let Some(c) = &self.control {
            s += &format!("   {}\n", c.summary());
            for w in &c.stale_written {
                s += &format!("   written under a superseded token: {w}\n");
            }
            for w in &c.stale_acted {
                s += &format!("   ACTED ON BY A DEPOSED LEADER: {w}\n");
            }
            for w in &c.done_twice {
                s += &format!("   done by two leaders: {w}\n");
            }
        }
        for v in self.verdicts.iter().filter(|v| !v.ok()) {
            s += &format!("   client {} ({}): {v:?}\n", v.name, v.channel);
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

/// The process a target names (a node, a gateway or the publisher).
fn service(fleet: &mut Fleet, t: Target) -> &mut crate::procs::Service {
    match t {
        Target::Node(i) => &mut fleet.nodes[i],
        Target::Gateway(0) | Target::Leader => &mut fleet.gateway,
        Target::Gateway(i) => &mut fleet.more_gateways[i - 1],
        _ => &mut fleet.publisher,
    }
}

fn signal(fleet: &mut Fleet, t: Target, sig: nix::sys::signal::Signal) -> Option<i32> {
    let pid = service(fleet, t).pid()? as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).ok()?;
    Some(pid)
}

/// Carries out a fault on the broker or the clients (and undoes it); `false` for the others.
async fn perform_outside(broker: &Broker, clients: &[Client], f: Fault, tl: &Timeline) -> bool {
    match (f.target, f.action) {
        (Target::Node(i), Action::Link { mode, for_ }) => {
            let Some(link) = broker.link(i) else {
                tl.mark(format!("[CHAOS] {f}: this broker has no links"));
                return true;
            };
            tl.mark(format!("[CHAOS] {f}"));
            link.set(mode);
            tokio::time::sleep(for_).await;
            link.set(LinkMode::Pass);
            tl.mark(format!("[CHAOS] link of {} to Kafka passes again", f.target));
        }
        (Target::Broker(i), Action::Kill { down }) => {
            let id = i as i32 + 1;
            tl.mark(format!("[CHAOS] {f}"));
            if let Err(e) = broker.kill_node(id).await {
                tl.mark(format!("[CHAOS] kill of kafka-{id} not done: {e:#}"));
                return true;
            }
            tokio::time::sleep(down).await;
            tl.mark(format!("[CHAOS] restart kafka-{id}"));
            if let Err(e) = broker.restart_node(id).await {
                tl.mark(format!("[CHAOS] restart of kafka-{id} failed: {e:#}"));
            }
        }
        (Target::Broker(i), Action::Freeze { for_ }) => {
            let id = i as i32 + 1;
            tl.mark(format!("[CHAOS] {f}"));
            if let Err(e) = broker.pause_node(id) {
                tl.mark(format!("[CHAOS] SIGSTOP of kafka-{id} not done: {e:#}"));
                return true;
            }
            tokio::time::sleep(for_).await;
            let _ = broker.resume_node(id);
            tl.mark(format!("[CHAOS] SIGCONT kafka-{id}"));
        }
        (Target::Clients { from, every }, Action::StopReading { for_ }) => {
            let picked: Vec<&Client> = clients.iter().skip(from).step_by(every.max(1)).collect();
            tl.mark(format!("[CHAOS] {f}: {} clients", picked.len()));
            for c in &picked {
                c.pause_reading(true);
            }
            tokio::time::sleep(for_).await;
            for c in &picked {
                c.pause_reading(false);
            }
            tl.mark(format!("[CHAOS] {} reads again", f.target));
        }
        (Target::Clients { from, every }, Action::Storm) => {
            let connected = clients.iter().filter(|c| c.connected()).count();
            tl.mark(format!("[CHAOS] {f}: {connected} connected"));
            for c in clients.iter().skip(from).step_by(every.max(1)) {
                c.kick();
            }
        }
        _ => return false,
    }
    true
}

/// The gateway replica that leads now, by the first running replica that names a leader in its
/// `/api/fleet` (`leadership.leader.gateway`); `None` when none does.
async fn leader_now(fleet: &Arc<tokio::sync::Mutex<Fleet>>) -> Option<usize> {
    let (asks, names) = {
        let mut fl = fleet.lock().await;
        let fl = &mut *fl;
        let running: Vec<bool> = std::iter::once(&mut fl.gateway).chain(fl.more_gateways.iter_mut()).map(|g| g.running()).collect();
        let names: Vec<String> = fl.gateways().map(|g| g.name.clone()).collect();
        let asks: Vec<reqwest::RequestBuilder> = fl
            .gateways()
            .zip(running)
            .filter(|(_, r)| *r)
            .map(|(g, _)| fl.admin(fl.http.get(format!("{}/api/fleet", fl.admin_base(g)))).timeout(Duration::from_secs(2)))
            .collect();
        (asks, names)
    };
    for ask in asks {
        let Ok(resp) = ask.send().await else { continue };
        let Ok(f) = resp.json::<serde_json::Value>().await else { continue };
        if let Some(name) = f["leadership"]["leader"]["gateway"].as_str() {
            return names.iter().position(|n| n == name);
        }
    }
    None
}

/// Carries `f` out (and undoes it: restart, SIGCONT) on the shared fleet.
async fn perform(fleet: Arc<tokio::sync::Mutex<Fleet>>, broker: &Broker, clients: &[Client], f: Fault, tl: Arc<Timeline>) {
    use nix::sys::signal::Signal;
    if perform_outside(broker, clients, f, &tl).await {
        return;
    }
    // The leader is whichever replica leads now: the fault hits that one.
    let f = if f.target == Target::Leader {
        let (i, known) = leader_now(&fleet).await.map_or((0, false), |i| (i, true));
        let hit = Fault { target: Target::Gateway(i), ..f };
        tl.mark(format!("[CHAOS] {f}: {} {}", hit.target, if known { "leads now" } else { "(no replica names a leader: gateway 0)" }));
        hit
    } else {
        f
    };
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
                let mut fl = fleet.lock().await;
                // Through a gateway that runs (any replica takes an operator's drain).
                let fl = &mut *fl;
                let gw = std::iter::once(&mut fl.gateway).chain(fl.more_gateways.iter_mut()).position(|g| g.running()).unwrap_or(0);
                let via = if gw == 0 { &fl.gateway } else { &fl.more_gateways[gw - 1] };
                let url = format!("{}/api/fleet/nodes/{}/drain", fl.admin_base(via), f.target);
                let req = fl.admin(fl.http.post(&url).json(&serde_json::json!({})).timeout(Duration::from_secs(30)));
                (url, req)
            };
            tl.mark(format!("[CHAOS] {f}"));
            match req.send().await {
                Ok(r) => tl.mark(format!("[CHAOS] drain of {}: {}", f.target, r.status())),
                Err(e) => tl.mark(format!("[CHAOS] drain of {} not done ({url}): {e}", f.target)),
            }
        }
        Action::Link { .. } | Action::StopReading { .. } | Action::Storm => tl.mark(format!("[CHAOS] {f}: not a fault of {}", f.target)),
    }
}

/// The clients of a run: with one gateway, all through it; with several, the even ones through
/// HAProxy in front of them all, the odd ones with every gateway's URL (starting at a different
/// one each), moving to the next on failure.
async fn spawn_clients(fleet: &Fleet, proxy: Option<&crate::haproxy::Haproxy>, canvases: &[String], n: usize, dims: CanvasDims) -> anyhow::Result<Vec<Client>> {
    let gateways: Vec<String> =
        std::iter::once(&fleet.gateway).chain(&fleet.more_gateways).map(|g| format!("ws://127.0.0.1:{}", g.port)).collect();
    let clients: Vec<Client> = (0..n)
        .map(|i| {
            let name = format!("client-{i}");
            let canvas = &canvases[i % canvases.len()];
            match proxy {
                Some(p) if i % 2 == 0 => Client::spawn(&name, &p.ws(), canvas, dims, ClientTiming::default()),
                Some(_) => {
                    let mut urls = gateways.clone();
                    urls.rotate_left((i / 2) % gateways.len());
                    Client::spawn_with_gateways(&name, &urls, canvas, dims, ClientTiming::default(), None)
                }
                None => Client::spawn(&name, &gateways[0], canvas, dims, ClientTiming::default()),
            }
        })
        .collect();
    wait_connected(&clients).await?;
    fleet.timeline.mark(format!("{} clients connected", clients.len()));
    Ok(clients)
}

/// Runs `faults` on a fresh fleet on `broker` under `load`, waits for quiescence and judges every
/// client.
///
/// # Errors
/// When the fleet cannot start.
pub async fn run(broker: &Broker, mut spec: FleetSpec, load: &Load, seed: u64, faults: Vec<Fault>, tl: Arc<Timeline>) -> anyhow::Result<Outcome> {
    let dims = CanvasDims { width: spec.width, height: spec.height };
    let partitions = spec.partitions;
    // Channels of every model beside the canvases: every binary reads their namespaces.
    let toml = crate::scenario::model_fleet_toml()?;
    spec.env.push(("FLEET_CONFIG".into(), toml.path().display().to_string()));
    let fleet = Fleet::start(broker, spec, tl.clone()).await.context("start the fleet")?;
    let proxy = if fleet.more_gateways.is_empty() {
        None
    } else {
        let backends: Vec<(String, String)> = fleet.gateways().map(|g| (g.name.clone(), format!("127.0.0.1:{}", g.port))).collect();
        Some(crate::haproxy::Haproxy::start(&backends, tl.clone()).await.context("haproxy in front of the gateways (scripts/setup-haproxy.sh)")?)
    };
    // Every replica polls the nodes itself: the first one's picture serves to pick the canvases.
    let node_ids: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let state = fleet.fleet_state().await.map_err(anyhow::Error::msg)?;
    let canvases = pick_canvases(&state, partitions, load.canvases, &node_ids);
    let mut clients = spawn_clients(&fleet, proxy.as_ref(), &canvases, load.clients, dims).await?;
    let write_url = proxy.as_ref().map_or_else(|| fleet.gateway.url(), crate::haproxy::Haproxy::url);
    let writer = Writer::start(&write_url, canvases.clone(), load.rate, dims.width, dims.height);
    // Two clients of each model's channel, through HAProxy when there is one; publications to
    // them through the same door (a publish that fails is not retried: the heads are read back).
    let channels: Vec<String> = crate::scenario::MODEL_CHANNELS.iter().map(|c| (*c).to_owned()).collect();
    let door = proxy.as_ref().map_or_else(|| fleet.gateway_ws(), crate::haproxy::Haproxy::ws);
    clients.extend(crate::scenario::spawn_model_clients_at(&[door], &channels, 2).await?);
    let model_load = crate::scenario::ModelLoad::start(&format!("{write_url}/api"), channels.clone());
    tl.mark(format!(
        "[CHAOS] schedule seed={seed}: {} faults; {} clients over {} canvases, {} events/s through {}; {} channels of the other models",
        faults.len(),
        load.clients,
        canvases.len(),
        load.rate,
        if proxy.is_some() { "haproxy" } else { "the gateway" },
        channels.len()
    ));
    let started_ms = shared::event::now_ms();
    let fleet = Arc::new(tokio::sync::Mutex::new(fleet));
    let tasks: Vec<_> = faults
        .iter()
        .map(|f| {
            let (fleet, tl, f, clients) = (fleet.clone(), tl.clone(), *f, &clients);
            async move {
                tokio::time::sleep(f.at).await;
                perform(fleet, broker, clients, f, tl).await;
            }
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
    let model_published = model_load.stop().await;
    tl.mark(format!("[CHAOS] {model_published} publications to the other models' channels accepted"));
    let acked = stats.acked_count();
    let all: Vec<String> = canvases.iter().chain(&channels).cloned().collect();
    let (verdicts, seen) = match wait_for_heads(&fleet, &clients, &all).await {
        Ok(truths) => {
            let (reports, verdicts) = finish(clients, &truths).await;
            (verdicts, reports.iter().map(|r| seen(r, started_ms)).collect())
        }
        Err(e) => {
            problems.push(format!("clients did not reach their heads: {e:#}"));
            (Vec::new(), Vec::new())
        }
    };
    drop(proxy);
    fleet.stop().await;
    // Every claim and decision the gateways wrote, read back once they are stopped.
    let control = match crate::control_audit::audit(&broker.bootstrap, &fleet.control_topic).await {
        Ok(a) => Some(a),
        Err(e) => {
            problems.push(format!("the control topic could not be audited: {e:#}"));
            None
        }
    };
    drop(toml);
    Ok(Outcome { seed, faults, verdicts, seen, acked, problems, control })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: Sizes = Sizes { nodes: 2, gateways: 2, span: Duration::from_secs(30), faults: 5, links: true, brokers: 3, clients: 16, leader_faults: false };
    const PLAIN: Sizes = Sizes { nodes: 2, gateways: 1, span: Duration::from_secs(30), faults: 5, links: false, brokers: 0, clients: 16, leader_faults: false };
    const LEADER: Sizes = Sizes { leader_faults: true, ..SIZES };

    #[test]
    fn a_seed_draws_the_same_list_and_another_seed_another() {
        assert_eq!(schedule(7, &SIZES), schedule(7, &SIZES));
        assert_ne!(schedule(7, &SIZES), schedule(8, &SIZES));
    }

    #[test]
    fn faults_are_sorted_within_the_span_and_bounded() {
        let secs = |d: Duration, lo: u64, hi: u64| d >= Duration::from_secs(lo) && d <= Duration::from_secs(hi);
        for sizes in [SIZES, PLAIN, LEADER] {
            for seed in 0..200 {
                let s = schedule(seed, &sizes);
                assert_eq!(s.len(), 5);
                assert!(s.windows(2).all(|w| w[0].at <= w[1].at), "seed {seed}: sorted");
                for f in &s {
                    assert!(f.at <= sizes.span);
                    let fits = match (f.target, f.action) {
                        (Target::Clients { .. }, Action::StopReading { for_ }) => secs(for_, 1, 20),
                        (Target::Clients { every: 1, from: 0 }, Action::Storm) => true,
                        (Target::Clients { .. }, _) => false,
                        (Target::Leader, Action::Freeze { for_ }) => secs(for_, 7, 20),
                        (Target::Leader, Action::Kill { down } | Action::Term { down }) => secs(down, 1, 10),
                        (Target::Leader, _) => false,
                        (_, Action::Kill { down } | Action::Term { down }) => secs(down, 1, 10),
                        (_, Action::Freeze { for_ }) => secs(for_, 1, 20),
                        (Target::Node(_), Action::Drain) => true,
                        (Target::Node(_), Action::Link { for_, mode }) => {
                            sizes.links && secs(for_, 1, 20) && !matches!(mode, LinkMode::Pass | LinkMode::Slow(Duration::ZERO))
                        }
                        _ => false,
                    };
                    assert!(fits, "seed {seed}: {f} is not a fault of its target, or out of bounds");
                    assert!(!matches!(f.action, Action::Term { .. }) || !matches!(f.target, Target::Broker(_)), "{f}");
                    match f.target {
                        Target::Node(i) => assert!(i < sizes.nodes),
                        Target::Gateway(i) => assert!(i < sizes.gateways),
                        Target::Broker(i) => assert!(i < sizes.brokers, "seed {seed}: {f} without a cluster"),
                        Target::Clients { from, every } => assert!(every == 1 || (every == 3 && from < 3)),
                        Target::Publisher => {}
                        Target::Leader => assert!(sizes.leader_faults, "seed {seed}: {f} without --leader-faults"),
                    }
                }
            }
        }
    }

    #[test]
    fn every_kind_of_fault_and_target_is_drawn() {
        let all: Vec<Fault> = (0..200).flat_map(|s| schedule(s, &SIZES)).collect();
        for t in [Target::Node(0), Target::Node(1), Target::Gateway(0), Target::Gateway(1), Target::Publisher, Target::Broker(0), Target::Broker(2)] {
            assert!(all.iter().any(|f| f.target == t), "{t} is hit");
        }
        let drawn = |p: &dyn Fn(&Fault) -> bool| all.iter().any(p);
        assert!(drawn(&|f| matches!(f.action, Action::Kill { .. }) && matches!(f.target, Target::Broker(_))));
        assert!(drawn(&|f| matches!(f.action, Action::Freeze { .. }) && matches!(f.target, Target::Broker(_))));
        assert!(drawn(&|f| matches!(f.action, Action::Term { .. })));
        assert!(drawn(&|f| matches!(f.action, Action::Drain)));
        for mode in [LinkMode::Freeze, LinkMode::Cut] {
            assert!(drawn(&|f| matches!(f.action, Action::Link { mode: m, .. } if m == mode)), "link {mode}");
        }
        assert!(drawn(&|f| matches!(f.action, Action::Link { mode: LinkMode::Slow(_), .. })));
        assert!(drawn(&|f| matches!(f.action, Action::StopReading { .. })));
        assert!(drawn(&|f| matches!(f.action, Action::Storm)));
        // Without links or a cluster, neither is drawn.
        let plain: Vec<Fault> = (0..200).flat_map(|s| schedule(s, &PLAIN)).collect();
        assert!(!plain.iter().any(|f| matches!(f.action, Action::Link { .. }) || matches!(f.target, Target::Broker(_) | Target::Gateway(1))));
    }

    /// The draw of a documented run (docs/reliability.md, "Fault schedules": seed 1 on Apache
    /// Kafka with links, 4 faults) stays what it was: flags added later leave it alone.
    #[test]
    fn a_documented_draw_is_unchanged() {
        let sizes = Sizes { faults: 4, brokers: 0, ..SIZES };
        let got: Vec<String> = schedule(1, &sizes).iter().map(|f| f.to_string().split_once(' ').map(|(_, rest)| rest.to_owned()).unwrap_or_default()).collect();
        assert_eq!(
            got,
            [
                "kill -9 ws-2 (restart after 9.4s)",
                "SIGTERM gateway (restart after 4.5s)",
                "SIGTERM ws-1 (restart after 4.5s)",
                "one client in 3 (client-1, client-4, ...) stops reading for 4.3s"
            ],
            "{got:#?}"
        );
    }

    #[test]
    fn the_leader_is_a_target_only_with_its_flag_and_is_frozen_past_the_session_timeout() {
        let plain: Vec<Fault> = (0..200).flat_map(|s| schedule(s, &SIZES)).collect();
        assert!(!plain.iter().any(|f| f.target == Target::Leader), "not drawn without --leader-faults");
        let with: Vec<Fault> = (0..200).flat_map(|s| schedule(s, &LEADER)).collect();
        let leader: Vec<&Fault> = with.iter().filter(|f| f.target == Target::Leader).collect();
        // Weight 2 of 2 + 2 + 1 + 1 + 3 + 2 + 2 = 13: about 150 of 1000 faults.
        assert!(leader.len() > 100 && leader.len() < 220, "{} leader faults of {}", leader.len(), with.len());
        for kind in [0, 1, 2] {
            assert!(
                leader.iter().any(|f| match (kind, f.action) {
                    (0, Action::Kill { .. }) | (2, Action::Term { .. }) => true,
                    (1, Action::Freeze { for_ }) => for_ >= Duration::from_secs(7),
                    _ => false,
                }),
                "leader action {kind} drawn"
            );
        }
        assert!(leader.iter().all(|f| !matches!(f.action, Action::Freeze { for_ } if for_ < Duration::from_secs(7))), "every leader freeze outlasts the session timeout");
        let f = Fault { at: Duration::from_millis(2500), target: Target::Leader, action: Action::Freeze { for_: Duration::from_secs(12) } };
        assert_eq!(f.to_string(), "t=2.5s SIGSTOP the gateway leader for 12.0s");
    }

    #[test]
    fn faults_are_written_for_people() {
        let at = Duration::from_millis(2500);
        let table = [
            (Target::Node(1), Action::Freeze { for_: Duration::from_secs(4) }, "t=2.5s SIGSTOP ws-2 for 4.0s"),
            (Target::Gateway(1), Action::Kill { down: Duration::from_secs(2) }, "t=2.5s kill -9 gateway-2 (restart after 2.0s)"),
            (Target::Broker(0), Action::Freeze { for_: Duration::from_secs(3) }, "t=2.5s SIGSTOP kafka-1 for 3.0s"),
            (Target::Node(0), Action::Link { mode: LinkMode::Cut, for_: Duration::from_secs(5) }, "t=2.5s link of ws-1 to Kafka cut for 5.0s"),
            (
                Target::Node(0),
                Action::Link { mode: LinkMode::Slow(Duration::from_millis(300)), for_: Duration::from_secs(5) },
                "t=2.5s link of ws-1 to Kafka slowed by 300 ms per chunk for 5.0s",
            ),
            (
                Target::Clients { from: 1, every: 3 },
                Action::StopReading { for_: Duration::from_secs(6) },
                "t=2.5s one client in 3 (client-1, client-4, ...) stops reading for 6.0s",
            ),
            (Target::Clients { from: 0, every: 1 }, Action::Storm, "t=2.5s reconnect storm: every client drops its connection and reconnects at once"),
        ];
        for (target, action, want) in table {
            assert_eq!(Fault { at, target, action }.to_string(), want);
        }
    }
}
