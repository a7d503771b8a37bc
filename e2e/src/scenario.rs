//! The scenario of the brief, end to end: normal (with a burst of concurrent publishes to one
//! canvas: group records) → kill -9 ws-1 → ws-2 takes over → ws-1 restarts, is seen UP 5 times,
//! recovers by replay → failback drain of ws-2 → clients back — under steady publishing, with
//! every client checked at the end. Beside the canvases, channels of the other three models
//! (`json`, `stream`, `latest`, from a `fleet.toml` every binary reads) are published to and
//! followed by clients of the channel frames, checked the same way.

use crate::broker::{Broker, BrokerKind};
use crate::checker::{check_history, Summary, Verdict};
use crate::client::{Client, ClientReport, ClientTiming, Kind};
use crate::fleet::{Fleet, FleetSpec};
use crate::load::Load;
use crate::procs::{eventually, get_json, Timeline};
use anyhow::Context;
use shared::partitioner::partition_for;
use shared::CanvasDims;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub use crate::models::{delete_channel, model_data, model_fleet_toml, reset_channel, ModelLoad, Published, MODEL_CHANNELS, MODEL_FLEET_TOML, RESET_CHANNEL};

/// Sizes and timings of a scenario run.
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    pub broker: BrokerKind,
    pub clients: usize,
    pub canvases: usize,
    /// Publish rate, events/s.
    pub rate: f64,
    pub fleet: FleetSpec,
    /// Time in each calm phase (normal, outage, settle).
    pub phase: Duration,
    /// Print the timeline as it happens.
    pub echo: bool,
    /// Clients of each channel of the other models ([`MODEL_CHANNELS`]); 0 runs canvases only.
    pub model_clients: usize,
}

impl Default for ScenarioConfig {
    fn default() -> Self {
        Self {
            broker: BrokerKind::from_env(),
            clients: 20,
            canvases: 4,
            rate: 60.0,
            fleet: FleetSpec::default(),
            phase: Duration::from_secs(3),
            echo: false,
            model_clients: 2,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub broker: String,
    pub published: u64,
    pub publish_503: u64,
    pub verdicts: Vec<Verdict>,
    pub reports: Vec<ClientReport>,
    /// kill -9 → every client receiving events again, ms.
    pub failover_ms: u64,
    /// Longest publish → receive delay of any event during recovery and failback, ms.
    pub failback_gap_ms: u64,
    /// Longest publish → receive delay outside the failure windows, ms.
    pub steady_max_latency_ms: u64,
    /// The catch-up line of the recovered node.
    /// ws-1's catch-up report (its `/health` `catchup`) once the restarted process completed it.
    pub catchup_report: serde_json::Value,
    pub replay_count: u64,
    /// The lifecycle steps seen for ws-1, in order, from `/api/fleet`.
    pub lifecycle: Vec<String>,
    /// The lifecycle steps the scenario requires that were not seen, in order.
    pub lifecycle_missing: Vec<String>,
    /// Sessions on ws-1 after the failback.
    pub ws1_sessions_after: u64,
    /// The burst of concurrent publishes to one canvas: accepted, and the distinct records
    /// (offsets) they went out in (fewer records than events: the publisher's group commit).
    pub burst_events: usize,
    pub burst_records: usize,
    /// Publications accepted to the channels of the other models.
    pub model_published: u64,
    /// The channel reset during the normal phase ([`RESET_CHANNEL`], through the gateway's admin
    /// route) and the epoch its answer named (`None` when the run has no model channels).
    pub reset: Option<(String, String)>,
}

impl Report {
    /// The promise over all clients: each kind of violation and their total.
    pub fn promise(&self) -> Summary {
        Summary::of(&self.verdicts)
    }
    /// Events lost over all clients.
    pub fn lost(&self) -> usize {
        self.promise().lost
    }
    /// Duplicated event frames over all clients.
    pub fn duplicated(&self) -> usize {
        self.promise().duplicated
    }
    /// Out-of-order event frames over all clients.
    pub fn out_of_order(&self) -> usize {
        self.promise().out_of_order
    }

    /// The promise per model (the channel's namespace says which: [`MODEL_CHANNELS`], the
    /// canvases `pixels`), with the publications and states received, in the docs' order.
    pub fn by_model(&self) -> Vec<(&'static str, Summary, usize)> {
        let model = |channel: &str| match channel.split_once(':').map(|(ns, _)| ns) {
            Some("scores") => "json",
            Some("chat") => "stream",
            Some("prices") => "latest",
            _ => "pixels",
        };
        ["stream", "latest", "json", "pixels"]
            .into_iter()
            .filter_map(|m| {
                let verdicts: Vec<Verdict> = self.verdicts.iter().filter(|v| model(&v.channel) == m).cloned().collect();
                let frames = self.reports.iter().filter(|r| model(&r.channel) == m).map(|r| r.got.len()).sum();
                (!verdicts.is_empty()).then(|| (m, Summary::of(&verdicts), frames))
            })
            .collect()
    }

    /// Whether the promise held and the lifecycle went as it must.
    pub fn passed(&self) -> bool {
        self.promise().ok() && self.lifecycle_missing.is_empty() && self.replay_count > 0 && self.ws1_sessions_after > 0
    }

    /// The summary table (markdown).
    pub fn table(&self) -> String {
        let mut s = String::new();
        s += &format!("| broker | {} |\n|---|---|\n", self.broker);
        s += &format!("| events published (201) | {} |\n", self.published);
        s += &format!("| publishes answered 503 (retryable, no version used) | {} |\n", self.publish_503);
        let delivered: Vec<String> = self.verdicts.iter().map(|v| v.events.to_string()).collect();
        let (min, max) = (
            self.verdicts.iter().map(|v| v.events).min().unwrap_or(0),
            self.verdicts.iter().map(|v| v.events).max().unwrap_or(0),
        );
        s += &format!("| clients / canvases | {} / {} |\n", self.verdicts.len(), self.verdicts.iter().map(|v| &v.channel).collect::<std::collections::BTreeSet<_>>().len());
        s += &format!("| events delivered per client | min {min}, max {max} ({}) |\n", delivered.join(" "));
        let promise = self.promise();
        s += &format!("| lost | {} |\n", promise.lost);
        s += &format!("| duplicated | {} |\n", promise.duplicated);
        s += &format!("| out of order | {} |\n", promise.out_of_order);
        s += &format!("| extra snapshots (resumes not served as events) | {} |\n", promise.extra_snapshots);
        s += &format!("| final canvas hash = publisher's | {}/{} clients |\n", promise.clients - promise.hash_mismatches, promise.clients);
        s += &format!("| promise violations (all five kinds) / clients not ok | {} / {} |\n", promise.violations(), promise.clients_not_ok);
        s += &format!("| burst: concurrent publishes to one canvas accepted / records they took | {} / {} |\n", self.burst_events, self.burst_records);
        s += &format!("| publications to json / stream / latest channels (checked like the canvases) | {} |\n", self.model_published);
        for (model, summary, frames) in self.by_model() {
            s += &format!(
                "| {model}: clients / frames received / lost, duplicated, out of order / hashes equal | {} / {frames} / {}, {}, {} / {}/{} |\n",
                summary.clients,
                summary.lost,
                summary.duplicated,
                summary.out_of_order,
                summary.clients - summary.hash_mismatches,
                summary.clients
            );
        }
        s += &format!("| failover (kill -9 → all clients receiving again) | {} ms |\n", self.failover_ms);
        s += &format!("| failback gap (longest publish → receive during recovery and failback) | {} ms |\n", self.failback_gap_ms);
        s += &format!("| steady publish → receive, max | {} ms |\n", self.steady_max_latency_ms);
        s += &format!("| catch-up replayCount | {} |\n", self.replay_count);
        s += &format!("| reconnects | {} |\n", self.reports.iter().map(|r| r.sessions.len().saturating_sub(1)).sum::<usize>());
        s += &format!("| ws-1 lifecycle | {} |\n", self.lifecycle.join(" → "));
        s
    }
}

/// Picks `n` canvas ids spread over the nodes' partitions (half on the first node, so the kill
/// has clients to move).
pub fn pick_canvases(fleet_state: &serde_json::Value, partitions: u32, n: usize, nodes: &[String]) -> Vec<String> {
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..10_000 {
        let id = format!("canvas-{i}");
        let p = partition_for(id.as_bytes(), partitions) as i64;
        if let Some(owner) = Fleet::owner(fleet_state, p) {
            by_node.entry(owner).or_default().push(id);
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while out.len() < n && i < 10_000 {
        let node = &nodes[i % nodes.len()];
        if let Some(c) = by_node.get_mut(node).and_then(|v| if v.is_empty() { None } else { Some(v.remove(0)) }) {
            out.push(c);
        }
        i += 1;
    }
    out
}

/// Starts `n` clients through the gateway, round-robin over `canvases`, and waits until each has
/// its first snapshot.
///
/// # Errors
/// When they do not all connect within 30 s.
pub async fn spawn_clients(fleet: &Fleet, canvases: &[String], n: usize, dims: CanvasDims) -> anyhow::Result<Vec<Client>> {
    let clients: Vec<Client> = (0..n)
        .map(|i| Client::spawn(&format!("client-{i}"), &fleet.gateway_ws(), &canvases[i % canvases.len()], dims, ClientTiming::default()))
        .collect();
    wait_connected(&clients).await?;
    fleet.timeline.mark(format!("{} clients connected through the gateway", clients.len()));
    Ok(clients)
}

/// Waits until every client is connected and has its first frame (the snapshot).
///
/// # Errors
/// When they do not all connect within 30 s.
pub async fn wait_connected(clients: &[Client]) -> anyhow::Result<()> {
    eventually("every client connected with a snapshot", Duration::from_secs(30), || async {
        let ready = clients.iter().filter(|c| c.connected() && !c.report().got.is_empty()).count();
        if ready == clients.len() { Ok(Some(())) } else { Err(format!("{ready}/{} connected", clients.len())) }
    })
    .await
}

/// The publisher's (version, hash) of each canvas, once publishing stopped, after every client
/// reached its canvas's head.
///
/// # Errors
/// When the publisher does not answer or a client does not reach the head within 30 s.
pub async fn wait_for_heads(fleet: &Fleet, clients: &[Client], canvases: &[String]) -> anyhow::Result<BTreeMap<String, (u64, String)>> {
    let mut truths = BTreeMap::new();
    for c in canvases {
        truths.insert(c.clone(), fleet.truth(c).await.map_err(anyhow::Error::msg)?);
    }
    let truths_ref = &truths;
    eventually("every client to reach its canvas's head version", Duration::from_secs(30), || async move {
        let behind: Vec<String> = clients
            .iter()
            .filter_map(|c| {
                let r = c.report();
                let head = truths_ref[&r.channel].0;
                (r.version != head).then(|| format!("{} at {} of {}", r.name, r.version, head))
            })
            .collect();
        if behind.is_empty() { Ok(Some(())) } else { Err(behind.join(", ")) }
    })
    .await?;
    Ok(truths)
}

/// Stops the clients and checks each against its canvas's truth.
pub async fn finish(clients: Vec<Client>, truths: &BTreeMap<String, (u64, String)>) -> (Vec<ClientReport>, Vec<Verdict>) {
    let mut reports = Vec::new();
    for c in clients {
        reports.push(c.stop().await);
    }
    let verdicts = reports
        .iter()
        .map(|r| {
            let (head, hash) = &truths[&r.channel];
            // From the client's last epoch change: a reset channel is judged in its new history.
            check_history(r, *head, hash)
        })
        .collect();
    (reports, verdicts)
}

/// Waits until every client received an event published after `from_ms` (epoch ms); returns the
/// latest first receipt over the clients minus `from_ms`, ms: how long until every client was
/// receiving live events again.
///
/// # Errors
/// When some client receives nothing new within `timeout`.
pub async fn all_receiving(clients: &[Client], from_ms: u64, what: &str, timeout: Duration) -> anyhow::Result<u64> {
    eventually(what, timeout, || async {
        let firsts: Vec<Option<u64>> = clients
            .iter()
            .map(|c| c.report().got.iter().find(|g| g.kind == Kind::Event && g.at_ms > from_ms && g.published_at_ms > from_ms).map(|g| g.at_ms))
            .collect();
        let waiting = firsts.iter().filter(|f| f.is_none()).count();
        if waiting == 0 {
            Ok(Some(firsts.iter().flatten().max().copied().unwrap_or(from_ms) - from_ms))
        } else {
            Err(format!("{waiting}/{} clients not receiving yet", clients.len()))
        }
    })
    .await
}

/// Waits until the gateway recorded `failback_completed` for `node` after `since_ms` (epoch ms).
///
/// # Errors
/// When it does not within 120 s (the error shows the node's state, streak and partitions).
pub async fn wait_failback(fleet: &Fleet, node: &str, since_ms: u64) -> anyhow::Result<()> {
    fleet
        .wait_fleet(&format!("the failback to {node} to complete"), Duration::from_secs(120), |f| {
            let done = f["decisions"].as_array().into_iter().flatten().any(|d| {
                d["node"] == node && d["action"] == "failback_completed" && d["at_ms"].as_u64().unwrap_or(0) > since_ms
            });
            done.then_some(()).ok_or_else(|| {
                let n = f["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["id"] == node).cloned()).unwrap_or_default();
                format!("{node} {} streak {} partitions {}", n["state"], n["up_streak"], n["assigned_partitions"])
            })
        })
        .await
}

/// A fleet left running after the scenario (`--keep-running`).
pub struct Running {
    pub fleet: Fleet,
    pub broker: Broker,
    /// The canvases the scenario painted.
    pub canvases: Vec<String>,
    /// The channels of the other models it published to ([`MODEL_CHANNELS`], or none).
    pub channels: Vec<String>,
}

/// Runs the scenario and stops the fleet.
///
/// # Errors
/// When a step does not happen in time (the error names it); a run that completes returns its
/// [`Report`] whether or not the promise held (see [`Report::passed`]).
pub async fn run(cfg: ScenarioConfig) -> anyhow::Result<Report> {
    Ok(run_keeping(cfg, false).await?.0)
}

/// Runs the scenario; with `keep`, leaves the fleet and broker running and returns them.
///
/// # Errors
/// As [`run`].
pub async fn run_keeping(cfg: ScenarioConfig, keep: bool) -> anyhow::Result<(Report, Option<Running>)> {
    let tl = Timeline::new(cfg.echo);
    let result = run_inner(&cfg, tl.clone(), keep).await;
    if let Err(e) = &result {
        eprintln!("[harness] scenario failed: {e:#}\n[harness] timeline so far:");
        for e in tl.entries() {
            eprintln!("{:>7.2}s {:<10} {}", e.at.as_secs_f64(), e.source, e.text);
        }
    }
    result
}

async fn run_inner(cfg: &ScenarioConfig, tl: Arc<Timeline>, keep: bool) -> anyhow::Result<(Report, Option<Running>)> {
    tl.mark(format!("starting broker: {}", cfg.broker.label()));
    let broker = Broker::start(cfg.broker.clone()).await.context("start the broker")?;
    // Every binary reads the same namespaces.
    let toml = model_fleet_toml()?;
    let mut spec = cfg.fleet.clone();
    if cfg.model_clients > 0 {
        spec.env.push(("FLEET_CONFIG".into(), toml.path().display().to_string()));
    }
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.context("start the fleet")?;
    let rf = cfg.broker.replication_factor();
    if rf > 1 {
        // The publisher created the topic; on a cluster every partition must be on `rf` nodes.
        for p in 0..cfg.fleet.partitions as i32 {
            let (_, replicas, isr) = broker
                .wait_isr(&fleet.topic, p, rf as usize, Duration::from_secs(30))
                .await
                .with_context(|| format!("{}/{p} should have {rf} in-sync replicas", fleet.topic))?;
            if replicas.len() != rf as usize {
                anyhow::bail!("{}/{p} has replicas {replicas:?}, not {rf} (isr {isr:?})", fleet.topic);
            }
        }
        tl.mark(format!("topic {}: every partition has {rf} replicas, all in sync", fleet.topic));
    }
    let node_ids: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let state = fleet.fleet_state().await.map_err(anyhow::Error::msg)?;
    let canvases = pick_canvases(&state, cfg.fleet.partitions, cfg.canvases, &node_ids);
    let dims = CanvasDims { width: cfg.fleet.width, height: cfg.fleet.height };
    let placement: Vec<String> = canvases
        .iter()
        .map(|c| format!("{c}→p{}→{}", partition_for(c.as_bytes(), cfg.fleet.partitions), Fleet::owner(&state, partition_for(c.as_bytes(), cfg.fleet.partitions) as i64).unwrap_or_default()))
        .collect();
    tl.mark(format!("canvases: {}", placement.join(", ")));

    // ---- normal
    let mut clients = spawn_clients(&fleet, &canvases, cfg.clients, dims).await?;
    let model_channels: Vec<String> = if cfg.model_clients > 0 { MODEL_CHANNELS.iter().map(|c| (*c).to_owned()).collect() } else { Vec::new() };
    let model_clients = spawn_model_clients(&fleet, &model_channels, cfg.model_clients).await?;
    let model_load = ModelLoad::start(&fleet.publisher.url(), model_channels.clone());
    clients.extend(model_clients);
    let load = Load::start(&fleet.publisher.url(), canvases.clone(), cfg.rate, dims.width, dims.height);
    tl.mark(format!("publishing {} events/s over {} canvases", cfg.rate, canvases.len()));
    tokio::time::sleep(cfg.phase).await;
    // A burst: publishes to one canvas that arrive while its record is in flight go out together
    // (the publisher's group commit); the clients check that each version still arrives once and
    // in order, through the kill, the catch-up (which replays the group records) and the failback.
    let (burst_events, burst_records) = publish_burst(&fleet.publisher.url(), &canvases[0], BURST, dims).await?;
    tl.mark(format!("burst: {burst_events} concurrent publishes to {} went out in {burst_records} records", canvases[0]));
    let reset = if model_channels.is_empty() { None } else { Some((RESET_CHANNEL.to_owned(), reset_channel(&fleet, RESET_CHANNEL).await?)) };
    if let Some((c, epoch)) = &reset {
        tl.mark(format!("reset {c} through the gateway: its clients go on in epoch {epoch}"));
    }
    tl.mark(format!("normal: {} events published", load.accepted()));

    // ---- failure
    let kill_at = shared::event::now_ms();
    fleet.nodes[0].kill9().await;
    fleet
        .wait_fleet("the gateway to see ws-1 DOWN and ws-2 own every partition", Duration::from_secs(60), |f| {
            let nodes = f["nodes"].as_array().cloned().unwrap_or_default();
            let ws1 = nodes.iter().find(|n| n["id"] == "ws-1").cloned().unwrap_or_default();
            let ws2 = nodes.iter().find(|n| n["id"] == "ws-2").cloned().unwrap_or_default();
            let n2 = ws2["assigned_partitions"].as_array().map_or(0, |a| a.len());
            let total = f["partition_count"].as_u64().unwrap_or(0) as usize;
            (ws1["state"] == "DOWN" && n2 == total).then_some(()).ok_or(format!("ws-1 {}, ws-2 owns {n2}/{total}", ws1["state"]))
        })
        .await?;
    tl.mark("ws-2 owns every partition");
    let failover_ms = all_receiving(&clients, kill_at, "every client to receive events again after the kill", Duration::from_secs(60)).await?;
    tl.mark(format!("failover: every client receiving again {failover_ms} ms after the kill"));
    tokio::time::sleep(cfg.phase).await;

    // ---- recovery
    let restart_at = shared::event::now_ms();
    fleet.nodes[0].start()?;
    // The restarted process's catch-up, read from its /health (a new process: its first).
    let ws1_url = fleet.nodes[0].url();
    let catchup_report = eventually("the restarted ws-1 to complete catch-up", Duration::from_secs(90), || async {
        let h = get_json(&fleet.http, &format!("{ws1_url}/health")).await?;
        let c = h["catchup"].clone();
        if c["status"] == "completed" { Ok(Some(c)) } else { Err(format!("catch-up {}", c["status"])) }
    })
    .await?;
    let replay_count = catchup_report["replay_count"].as_u64().context("replay_count in ws-1's catch-up report")?;
    wait_failback(&fleet, "ws-1", restart_at).await?;
    tl.mark("failback completed");

    // ---- settle
    tokio::time::sleep(cfg.phase).await;
    let stats = load.stop().await;
    let model_published = model_load.stop().await;
    tl.mark(format!("publishing stopped: {} events accepted, {model_published} publications to {} channels of other models", stats.accepted.load(Ordering::Relaxed), model_channels.len()));
    let all: Vec<String> = canvases.iter().chain(&model_channels).cloned().collect();
    let truths = wait_for_heads(&fleet, &clients, &all).await?;
    let settled_at = shared::event::now_ms();
    let ws1_sessions_after = get_json(&fleet.http, &format!("{}/health", fleet.nodes[0].url())).await.ok().and_then(|h| h["sessions"].as_u64()).unwrap_or(0);
    let ws1_health = get_json(&fleet.http, &format!("{}/health", fleet.nodes[0].url())).await.unwrap_or_default();

    let (reports, verdicts) = finish(clients, &truths).await;

    let lat = |from: u64, to: u64| -> u64 {
        reports
            .iter()
            .flat_map(|r| r.got.iter())
            .filter(|g| g.kind == Kind::Event && g.published_at_ms >= from && g.published_at_ms <= to)
            .map(|g| g.at_ms.saturating_sub(g.published_at_ms))
            .max()
            .unwrap_or(0)
    };
    let failback_gap_ms = lat(restart_at, settled_at);
    let steady_max_latency_ms = lat(0, kill_at.saturating_sub(1000));

    let state = fleet.fleet_state().await.map_err(anyhow::Error::msg)?;
    let mut lifecycle: Vec<String> = state["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .filter(|d| d["node"] == "ws-1" && d["at_ms"].as_u64().unwrap_or(0) >= kill_at)
        .map(|d| match d["action"].as_str().unwrap_or_default() {
            "transition" => d["detail"]["to"].as_str().unwrap_or_default().to_string(),
            other => other.to_owned(),
        })
        .collect();
    lifecycle.dedup();
    let required = ["DOWN", "UP", "start_recovery", "HEALTHY", "failback_started", "failback_completed"];
    let mut missing = Vec::new();
    let mut it = lifecycle.iter();
    for step in required {
        if !it.any(|s| s == step) {
            missing.push(step.to_owned());
        }
    }
    if ws1_health["catchup"]["status"] != "completed" {
        missing.push(format!("ws-1 /health catchup.status completed (saw {})", ws1_health["catchup"]["status"]));
    }

    let running = if keep {
        Some(Running { fleet, broker, canvases: canvases.clone(), channels: model_channels.clone() })
    } else {
        fleet.stop().await;
        drop(broker);
        None
    };
    let report = Report {
        broker: cfg.broker.label(),
        published: stats.accepted.load(Ordering::Relaxed),
        publish_503: stats.unavailable.load(Ordering::Relaxed),
        verdicts,
        reports,
        failover_ms,
        failback_gap_ms,
        steady_max_latency_ms,
        catchup_report,
        replay_count,
        lifecycle,
        lifecycle_missing: missing,
        ws1_sessions_after,
        burst_events,
        burst_records,
        model_published,
        reset,
    };
    drop(toml);
    Ok((report, running))
}

/// `per_channel` clients of each of `channels` (of [`MODEL_FLEET_TOML`]'s namespaces) through the
/// fleet's gateway, connected; every other one names its channel in a `subscribe` first frame.
///
/// # Errors
/// When a channel is not of those namespaces, or the clients do not connect.
pub async fn spawn_model_clients(fleet: &Fleet, channels: &[String], per_channel: usize) -> anyhow::Result<Vec<Client>> {
    spawn_model_clients_at(&[fleet.gateway_ws()], channels, per_channel).await
}

/// [`spawn_model_clients`] through `bases` (`ws://host:port` each, tried in turn).
///
/// # Errors
/// As [`spawn_model_clients`].
pub async fn spawn_model_clients_at(bases: &[String], channels: &[String], per_channel: usize) -> anyhow::Result<Vec<Client>> {
    let models = shared::namespaces::Namespaces::from_toml(MODEL_FLEET_TOML, CanvasDims::default()).map_err(anyhow::Error::msg)?;
    let mut clients = Vec::new();
    for c in channels {
        let model = models.of(&shared::ChannelId::parse(c)?).map_err(|e| anyhow::anyhow!("{e}"))?.model.clone();
        for i in 0..per_channel {
            let spawn = if i % 2 == 1 { Client::spawn_subscribing } else { Client::spawn_channel };
            clients.push(spawn(&format!("{c}-{i}"), bases, c, model.clone(), ClientTiming::default(), None));
        }
    }
    wait_connected(&clients).await?;
    Ok(clients)
}

/// Concurrent publishes of the scenario's burst.
pub const BURST: usize = 60;

/// Sends `n` publishes to `canvas` at once; returns how many were accepted and the number of
/// distinct records (offsets) they landed in.
///
/// # Errors
/// When a publish is not accepted (201): the publisher and broker are up, nothing should refuse.
pub async fn publish_burst(publisher: &str, canvas: &str, n: usize, dims: CanvasDims) -> anyhow::Result<(usize, usize)> {
    let http = reqwest::Client::new();
    let url = format!("{publisher}/canvases/{canvas}/pixels");
    let answers = futures::future::join_all((0..n).map(|i| {
        let body = serde_json::json!({"x": i as u32 % dims.width, "y": (i as u32 / dims.width) % dims.height, "color": "#3366ff"});
        let req = http.post(&url).json(&body).timeout(Duration::from_secs(15)).send();
        async move {
            let r = req.await?;
            let status = r.status();
            let body: serde_json::Value = r.json().await?;
            anyhow::ensure!(status.as_u16() == 201, "burst publish answered {status}: {body}");
            Ok::<_, anyhow::Error>((body["partition"].as_i64(), body["offset"].as_i64()))
        }
    }))
    .await;
    let mut records = std::collections::BTreeSet::new();
    for a in answers {
        records.insert(a?);
    }
    Ok((n, records.len()))
}
