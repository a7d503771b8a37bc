//! The fleet as the gateway sees it: each node's view and last health answer, the decision log,
//! and the actions (start-recovery, failback drains, maintenance drains).
//!
//! Scheduled polls feed the lifecycle rules ([`crate::lifecycle`]); extra polls triggered by the
//! proxy (a handshake refused or a node unreachable) only refresh routing information, so they
//! cannot shorten the UP streak a node must show before it is trusted.

use crate::config::{Config, NodeAddr};
use crate::lifecycle::{self, Decision, NodeView, Observed, Rules, Status};
use crate::publishers::Publishers;
use serde::Serialize;
use shared::api::{DrainReport, DrainRequest, NodeHealth};
use shared::partitioner::partition_for;
use shared::protocol::DrainReason;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One entry of the decision log (`GET /api/fleet` → `decisions`).
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    /// Unix epoch, ms.
    pub at_ms: u64,
    pub node: String,
    /// `transition`, `start_recovery`, `start_recovery_failed`, `failback_started`,
    /// `failback_completed`, `failback_failed`, `drain`, `drain_completed`, `drain_failed`.
    pub action: String,
    pub reason: String,
    /// Extra facts (states, partitions, counts).
    pub detail: serde_json::Value,
}

#[derive(Debug, Default)]
struct Slot {
    view: NodeView,
    /// Last health answer and when it came; `None` after a failed poll.
    health: Option<(Instant, NodeHealth)>,
    last_error: Option<String>,
    /// Partitions the node owned when it went DOWN (to find who stands in for it).
    lost: Vec<i32>,
    /// Nodes seen owning any of `lost` while this node was away.
    stand_ins: BTreeSet<String>,
}

/// A node of the fleet.
pub struct NodeEntry {
    pub addr: NodeAddr,
    slot: Mutex<Slot>,
}

/// A node to route to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub id: String,
    pub url: String,
    /// The partition of the canvas being routed.
    pub partition: i32,
}

/// An upstream's error answer (status and `{"error","message"}` body) as our own.
pub fn relay_error(status: u16, body: &str) -> shared::http::ApiError {
    let status = axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_GATEWAY);
    match serde_json::from_str::<shared::api::ErrorBody>(body) {
        Ok(b) => shared::http::ApiError { status, body: b, retry_after_secs: None },
        Err(_) => shared::http::ApiError::new(status, "upstream_error", body.chars().take(200).collect::<String>()),
    }
}

/// The fleet state shared by the poller, the proxy and the API.
pub struct Fleet {
    pub config: Config,
    pub nodes: Vec<NodeEntry>,
    decisions: Mutex<VecDeque<DecisionRecord>>,
    http: reqwest::Client,
    refresh: Notify,
    /// Counts completed polls (scheduled or refresh): the proxy waits for the next one to re-route.
    polled: tokio::sync::watch::Sender<u64>,
    partition_count: AtomicU32,
    /// The publishers requests are forwarded to.
    pub publishers: Publishers,
    /// The publish rate limit on the forwarded publish routes.
    pub limiter: Arc<shared::rate_limit::PublishLimiter>,
    /// Cancelled when the gateway shuts down: proxied sessions close with 1001.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Proxied sessions: which node and partition each is on, and its close switch.
    sessions: Mutex<std::collections::HashMap<u64, Proxied>>,
    next_session: std::sync::atomic::AtomicU64,
}

/// One proxied session as the fleet tracks it.
struct Proxied {
    node: String,
    partition: i32,
    close: tokio_util::sync::CancellationToken,
}

/// Unregisters a proxied session when dropped.
pub struct SessionTicket<'a> {
    fleet: &'a Fleet,
    id: u64,
    /// Cancelled when the gateway decides the session must move (its node is down and its
    /// partition is served elsewhere).
    pub moved: tokio_util::sync::CancellationToken,
}

impl Drop for SessionTicket<'_> {
    fn drop(&mut self) {
        self.fleet.sessions.lock().expect("sessions lock").remove(&self.id);
    }
}

impl Fleet {
    /// A fleet of the configured nodes, all DOWN until polled.
    pub fn new(config: Config, shutdown: tokio_util::sync::CancellationToken) -> Arc<Self> {
        let nodes = config
            .nodes
            .0
            .iter()
            .map(|a| NodeEntry { addr: a.clone(), slot: Mutex::new(Slot::default()) })
            .collect();
        let partitions = config.partitions;
        let publishers = Publishers::new(&config).expect("build the publishers' HTTP client");
        let limiter = Arc::new(config.rate.limiter());
        Arc::new(Self {
            config,
            limiter,
            nodes,
            decisions: Mutex::new(VecDeque::new()),
            http: reqwest::Client::builder().pool_idle_timeout(shared::serve::CLIENT_POOL_IDLE).build().expect("build the HTTP client"),
            refresh: Notify::new(),
            polled: tokio::sync::watch::Sender::new(0),
            partition_count: AtomicU32::new(partitions),
            publishers,
            shutdown,
            sessions: Mutex::new(std::collections::HashMap::new()),
            next_session: std::sync::atomic::AtomicU64::new(1),
        })
    }

    fn rules(&self) -> Rules {
        Rules { up_threshold: self.config.up_threshold }
    }

    fn entry(&self, id: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.addr.id == id)
    }

    fn record(&self, node: &str, action: &str, reason: impl Into<String>, detail: serde_json::Value) {
        let rec = DecisionRecord {
            at_ms: shared::event::now_ms(),
            node: node.to_owned(),
            action: action.to_owned(),
            reason: reason.into(),
            detail,
        };
        let mut log = self.decisions.lock().expect("decision log lock");
        if log.len() >= self.config.decision_log as usize {
            log.pop_front();
        }
        log.push_back(rec);
    }

    /// The HTTP client shared by polls and admin calls (the publishers have their own).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Registers a proxied session on `node` for a canvas of `partition`.
    pub fn register_session(&self, node: &str, partition: i32) -> SessionTicket<'_> {
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        let moved = tokio_util::sync::CancellationToken::new();
        self.sessions
            .lock()
            .expect("sessions lock")
            .insert(id, Proxied { node: node.to_owned(), partition, close: moved.clone() });
        SessionTicket { fleet: self, id, moved }
    }

    /// Proxied sessions open now.
    pub fn proxied_sessions(&self) -> usize {
        self.sessions.lock().expect("sessions lock").len()
    }

    /// Closes the proxied sessions of nodes seen DOWN whose partitions another ready node now
    /// serves: a frozen or half-dead node does not close them itself, and its clients must move.
    fn move_sessions_off_down_nodes(&self) {
        let mut owners: BTreeMap<i32, String> = BTreeMap::new();
        let mut down: BTreeSet<String> = BTreeSet::new();
        for n in &self.nodes {
            let slot = n.slot.lock().expect("slot lock");
            if slot.view.status == Status::Down {
                down.insert(n.addr.id.clone());
            }
            if let Some((_, h)) = slot.health.as_ref().filter(|(_, h)| h.ready && !h.draining) {
                for p in &h.assigned_partitions {
                    owners.insert(*p, n.addr.id.clone());
                }
            }
        }
        if down.is_empty() {
            return;
        }
        let mut moved: BTreeMap<String, usize> = BTreeMap::new();
        for s in self.sessions.lock().expect("sessions lock").values() {
            if down.contains(&s.node) && owners.get(&s.partition).is_some_and(|o| *o != s.node) && !s.close.is_cancelled() {
                s.close.cancel();
                *moved.entry(s.node.clone()).or_default() += 1;
            }
        }
        for (node, n) in moved {
            tracing::info!("[GATEWAY] closing {} sessions of {} (DOWN): their partitions are served by other nodes now", n, node);
            self.record(&node, "sessions_moved", "node DOWN and its partitions moved", serde_json::json!({"sessions": n}));
        }
    }

    /// Asks the poller for an immediate routing refresh (rate-limited by the poller).
    pub fn request_refresh(&self) {
        self.refresh.notify_one();
    }

    /// Asks for a routing refresh and waits until it completed (at most `max`): the proxy's one
    /// re-route after a refused or unroutable handshake, so a partition that just moved is found
    /// at its new owner within one refresh instead of after the client's retry.
    pub async fn refreshed(&self, max: Duration) {
        let mut rx = self.polled.subscribe();
        rx.borrow_and_update();
        self.request_refresh();
        let _ = tokio::time::timeout(max, rx.changed()).await;
    }

    /// Partition count used for routing (the topic's, once a node reported it).
    pub fn partition_count(&self) -> u32 {
        self.partition_count.load(Ordering::Relaxed)
    }

    async fn fetch_health(&self, node: &NodeEntry) -> Result<NodeHealth, String> {
        let url = format!("{}/health", node.addr.url);
        let resp = self
            .http
            .get(&url)
            .timeout(self.config.poll_timeout())
            .send()
            .await
            .map_err(|e| if e.is_timeout() { format!("timed out after {}ms", self.config.poll_timeout_ms) } else { e.to_string() })?;
        if !resp.status().is_success() {
            return Err(format!("/health answered {}", resp.status()));
        }
        resp.json::<NodeHealth>().await.map_err(|e| format!("bad /health body: {e}"))
    }

    /// Polls every node once. `scheduled` polls feed the lifecycle rules; others only refresh
    /// routing information.
    pub async fn poll(self: &Arc<Self>, scheduled: bool) {
        let answers = futures::future::join_all(self.nodes.iter().map(|n| self.fetch_health(n))).await;
        for (node, answer) in self.nodes.iter().zip(answers) {
            let decisions = {
                let mut slot = node.slot.lock().expect("slot lock");
                let obs = match &answer {
                    Ok(h) => Observed::Answer { state: h.state, assigned: h.assigned_partitions.clone(), catchup: h.catchup.status },
                    Err(e) => Observed::Down { error: e.clone() },
                };
                match answer {
                    Ok(h) => {
                        if h.partition_count > 0 {
                            self.partition_count.store(h.partition_count, Ordering::Relaxed);
                        }
                        slot.health = Some((Instant::now(), h));
                        slot.last_error = None;
                    }
                    Err(e) => {
                        slot.health = None;
                        slot.last_error = Some(e);
                    }
                }
                if !scheduled {
                    continue;
                }
                let (next, decisions) = lifecycle::observe(&slot.view, &obs, self.rules());
                if next.status == Status::Down && slot.view.status != Status::Down {
                    slot.lost = slot.view.assigned.clone();
                    slot.stand_ins.clear();
                }
                slot.view = next;
                decisions
            };
            for d in decisions {
                self.act(node, d);
            }
        }
        if scheduled {
            self.note_stand_ins();
        }
        self.move_sessions_off_down_nodes();
        self.polled.send_modify(|n| *n += 1);
    }

    /// While a node is away, remembers which nodes own its partitions (they stand in for it).
    fn note_stand_ins(&self) {
        let owners: Vec<(String, Vec<i32>)> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let slot = n.slot.lock().expect("slot lock");
                slot.health.as_ref().map(|(_, h)| (n.addr.id.clone(), h.assigned_partitions.clone()))
            })
            .collect();
        for n in &self.nodes {
            let mut slot = n.slot.lock().expect("slot lock");
            if !slot.view.awaiting_failback || slot.lost.is_empty() {
                continue;
            }
            for (id, assigned) in &owners {
                if *id != n.addr.id && assigned.iter().any(|p| slot.lost.contains(p)) {
                    slot.stand_ins.insert(id.clone());
                }
            }
        }
    }

    fn act(self: &Arc<Self>, node: &NodeEntry, decision: Decision) {
        let id = node.addr.id.clone();
        match decision {
            Decision::Transition { from, to, reason } => {
                tracing::info!("[GATEWAY] {} {} -> {} reason=\"{}\"", id, from, to, reason);
                self.record(&id, "transition", reason, serde_json::json!({"from": from, "to": to}));
            }
            Decision::StartRecovery { reason } => {
                let fleet = self.clone();
                tokio::spawn(async move { fleet.start_recovery(&id, reason).await });
            }
            Decision::Failback { partitions, reason } => {
                let fleet = self.clone();
                tokio::spawn(async move { fleet.failback(&id, partitions, reason).await });
            }
        }
    }

    async fn start_recovery(&self, id: &str, reason: String) {
        let Some(node) = self.entry(id) else { return };
        let url = format!("{}/admin/start-recovery", node.addr.url);
        let result = async {
            let resp = self.http.post(&url).timeout(Duration::from_secs(5)).send().await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
            if status.is_success() { Ok(body) } else { Err(format!("{status}: {body}")) }
        }
        .await;
        match result {
            Ok(body) => {
                tracing::info!("[GATEWAY] {} start-recovery sent reason=\"{}\" outcome={}", id, reason, body["outcome"]);
                self.record(id, "start_recovery", reason, body);
            }
            Err(e) => {
                tracing::warn!("[GATEWAY] {} start-recovery failed error=\"{}\"; will retry on the next UP poll", id, e);
                let mut slot = node.slot.lock().expect("slot lock");
                slot.view = lifecycle::recovery_call_failed(&slot.view);
                drop(slot);
                self.record(id, "start_recovery_failed", e, serde_json::Value::Null);
            }
        }
    }

    async fn drain_node(&self, target: &NodeEntry, req: &DrainRequest) -> Result<DrainReport, shared::http::ApiError> {
        let url = format!("{}/admin/drain", target.addr.url);
        let resp = self
            .http
            .post(&url)
            .json(req)
            .timeout(Duration::from_millis(req.grace_ms) + Duration::from_secs(15))
            .send()
            .await
            .map_err(|e| shared::http::ApiError::unavailable("node_unreachable", format!("node {}: {e}", target.addr.id), 1))?;
        let status = resp.status();
        if !status.is_success() {
            // Pass the node's own answer through (409 conflict, 400 ...), naming the node.
            let text = resp.text().await.unwrap_or_default();
            let mut e = relay_error(status.as_u16(), &text);
            e.body.message = format!("node {}: {}", target.addr.id, e.body.message);
            return Err(e);
        }
        resp.json::<DrainReport>().await.map_err(|e| shared::http::ApiError::bad_gateway(format!("node {}: bad drain report: {e}", target.addr.id)))
    }

    /// Drains the sessions of `partitions` from the nodes that stood in for `id`.
    async fn failback(&self, id: &str, partitions: Vec<i32>, reason: String) {
        let Some(node) = self.entry(id) else { return };
        let stand_ins: Vec<&NodeEntry> = {
            let mut slot = node.slot.lock().expect("slot lock");
            let named = std::mem::take(&mut slot.stand_ins);
            slot.lost.clear();
            drop(slot);
            let mut v: Vec<&NodeEntry> = self.nodes.iter().filter(|n| named.contains(&n.addr.id)).collect();
            if v.is_empty() {
                // Nobody was seen standing in (it happened between polls): ask every other node
                // that answers; the drain is scoped, so a node without such sessions does nothing.
                v = self.nodes.iter().filter(|n| n.addr.id != id && n.slot.lock().expect("slot lock").health.is_some()).collect();
            }
            v
        };
        let names: Vec<&str> = stand_ins.iter().map(|n| n.addr.id.as_str()).collect();
        let drain_reason = DrainReason::FailbackToRecoveredServer;
        tracing::info!("[GATEWAY] failback to {}: drain {:?} reason={} partitions={:?}", id, names, drain_reason, partitions);
        self.record(id, "failback_started", reason, serde_json::json!({"from": names, "partitions": partitions}));
        let req = DrainRequest { reason: drain_reason, grace_ms: self.config.failback_grace_ms, partitions: Some(partitions.clone()) };
        let started = Instant::now();
        let results = futures::future::join_all(stand_ins.iter().map(|n| self.drain_node(n, &req))).await;
        let mut detail = BTreeMap::new();
        let mut failed = false;
        for (n, r) in stand_ins.iter().zip(results) {
            match r {
                Ok(rep) => {
                    tracing::info!("[GATEWAY] failback drain of {} done notified={} forceClosed={} tookMs={}", n.addr.id, rep.notified_sessions, rep.force_closed_sessions, rep.duration_ms);
                    detail.insert(n.addr.id.clone(), serde_json::to_value(rep).unwrap_or_default());
                }
                Err(e) => {
                    failed = true;
                    tracing::warn!("[GATEWAY] failback drain of {} failed error=\"{}\"", n.addr.id, e.body.message);
                    detail.insert(n.addr.id.clone(), serde_json::json!({"error": e.body}));
                }
            }
        }
        let action = if failed { "failback_failed" } else { "failback_completed" };
        self.record(id, action, format!("took {}ms", started.elapsed().as_millis()), serde_json::to_value(detail).unwrap_or_default());
        tracing::info!("[GATEWAY] failback to {} {} tookMs={}", id, if failed { "finished with errors" } else { "completed" }, started.elapsed().as_millis());
    }

    /// `POST /api/fleet/nodes/{id}/drain`: drains a whole node for maintenance.
    ///
    /// # Errors
    /// `None` when the node is unknown; `Err` with the node's answer when the drain failed.
    pub async fn maintenance_drain(&self, id: &str, grace_ms: u64) -> Option<Result<DrainReport, shared::http::ApiError>> {
        let node = self.entry(id)?;
        let req = DrainRequest { reason: DrainReason::Maintenance, grace_ms, partitions: None };
        tracing::info!("[GATEWAY] drain {} reason={} grace={}ms (operator request)", id, req.reason, grace_ms);
        self.record(id, "drain", "operator request", serde_json::json!({"reason": req.reason, "grace_ms": grace_ms}));
        let r = self.drain_node(node, &req).await;
        match &r {
            Ok(rep) => self.record(id, "drain_completed", "operator request", serde_json::to_value(rep).unwrap_or_default()),
            Err(e) => self.record(id, "drain_failed", e.body.message.clone(), serde_json::to_value(&e.body).unwrap_or_default()),
        }
        self.request_refresh();
        Some(r)
    }

    /// Nodes that may serve `canvas` now: last answer says ready, not draining, and owning the
    /// canvas's partition. Returns the partition too.
    pub fn route(&self, canvas: &str) -> (i32, Vec<Target>) {
        let p = partition_for(canvas.as_bytes(), self.partition_count()) as i32;
        let targets = self
            .nodes
            .iter()
            .filter(|n| {
                let slot = n.slot.lock().expect("slot lock");
                slot.health.as_ref().is_some_and(|(_, h)| h.ready && !h.draining && h.assigned_partitions.contains(&p))
            })
            .map(|n| Target { id: n.addr.id.clone(), url: n.addr.url.clone(), partition: p })
            .collect();
        (p, targets)
    }

    /// The `/api/fleet` body.
    pub fn snapshot(&self) -> serde_json::Value {
        let nodes: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .map(|n| {
                let slot = n.slot.lock().expect("slot lock");
                let h = slot.health.as_ref();
                serde_json::json!({
                    "id": n.addr.id,
                    "url": n.addr.url,
                    "state": slot.view.status,
                    "up_streak": slot.view.up_streak,
                    // Only meaningful while UP: whether this UP episode's start-recovery went out.
                    "start_recovery": (slot.view.status == Status::Up).then_some(slot.view.recovery),
                    "awaiting_failback": slot.view.awaiting_failback,
                    "ready": h.is_some_and(|(_, h)| h.ready),
                    "draining": h.is_some_and(|(_, h)| h.draining),
                    "assigned_partitions": h.map(|(_, h)| h.assigned_partitions.clone()).unwrap_or_default(),
                    "sessions": h.map_or(0, |(_, h)| h.sessions),
                    "catchup": h.map(|(_, h)| serde_json::to_value(&h.catchup).unwrap_or_default()),
                    "last_answer_ms_ago": h.map(|(t, _)| t.elapsed().as_millis() as u64),
                    "last_error": slot.last_error,
                })
            })
            .collect();
        let decisions: Vec<DecisionRecord> = self.decisions.lock().expect("decision log lock").iter().rev().cloned().collect();
        serde_json::json!({
            "partition_count": self.partition_count(),
            "proxied_sessions": self.proxied_sessions(),
            "poll_interval_ms": self.config.poll_interval_ms,
            "up_threshold": self.config.up_threshold,
            "nodes": nodes,
            "publishers": self.publishers.snapshot(),
            "decisions": decisions,
        })
    }

    /// Polls on schedule until `shutdown`, and refreshes routing on request (at most every 200 ms).
    pub async fn run_poller(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut ticker = tokio::time::interval(self.config.poll_interval());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_refresh = Instant::now() - Duration::from_secs(1);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => self.poll(true).await,
                _ = self.refresh.notified() => {
                    let wait = Duration::from_millis(200).saturating_sub(last_refresh.elapsed());
                    tokio::time::sleep(wait).await;
                    last_refresh = Instant::now();
                    self.poll(false).await;
                }
            }
        }
    }
}
