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
use shared::api::{DrainReport, DrainRequest, HoldReport, HoldRequest, NodeHealth};
use shared::partitioner::partition_for;
use shared::protocol::DrainReason;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Margin of a hold extension over the longest wait of a paced failback round (the drained
/// sessions' arrival, then a fresh poll): the next round extends it again before it runs out.
const HOLD_EXTENSION_MARGIN: Duration = Duration::from_secs(10);

/// One entry of the decision log (`GET /api/fleet` → `decisions`).
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    /// Unix epoch, ms.
    pub at_ms: u64,
    pub node: String,
    /// `transition`, `start_recovery`, `start_recovery_failed`, `failback_started`,
    /// `failback_paced`, `failback_completed`, `failback_failed`, `drain`, `drain_completed`,
    /// `drain_failed`, `eject`, `eject_completed`, `eject_failed`, `sessions_moved`,
    /// `circuit_opened`, `circuit_closed`.
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
    /// When the last poll of the node ended (answered or failed): how fresh the gateway's view is.
    polled_at: Option<Instant>,
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
    /// The last minutes of scheduled polls, for the `/fleet` charts.
    history: Mutex<crate::history::History>,
    /// `GET /metrics` ([`crate::metrics`]).
    pub metrics: crate::metrics::Metrics,
    /// The wait queues of full nodes.
    pub admission: crate::admission::Admission,
    /// `ADMIN_TOKEN`: required by the admin API, and sent to the nodes' admin routes.
    pub admin_token: Option<shared::auth::AdminToken>,
    /// The verifier of clients' tokens on `/ws` (`None`: no token needed).
    pub client_tokens: Option<shared::client_token::ClientTokens>,
    /// When the gateway started: the lifecycle rules' clock ([`Fleet::now_ms`]).
    started: Instant,
    /// When the last ejection was decided, on that clock.
    last_ejection_ms: Mutex<Option<u64>>,
    /// Each node's circuit breaker on the proxy path ([`crate::breaker`]).
    breakers: Mutex<BTreeMap<String, crate::breaker::State>>,
    /// Each node's handshake rate bound (slow start; `None`: unbounded).
    handshake_rate: Option<governor::DefaultKeyedRateLimiter<String>>,
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
        let gone = self.fleet.sessions.lock().expect("sessions lock").remove(&self.id);
        // A place freed at that node: its oldest waiting handshake goes next.
        if let Some(p) = gone {
            self.fleet.admission.freed(&p.node);
        }
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
        let admission = config.admission();
        let publishers = Publishers::new(&config).expect("build the publishers' HTTP client");
        let client_tokens = config.client_tokens.load().expect("client token settings are checked by Config::problems at startup");
        let limiter = Arc::new(config.rate.limiter());
        let handshake_rate = std::num::NonZeroU32::new(config.handshake_rate_per_node).map(|r| {
            let burst = std::num::NonZeroU32::new(config.handshake_burst_per_node).unwrap_or(r);
            governor::RateLimiter::keyed(governor::Quota::per_second(r).allow_burst(burst))
        });
        Arc::new(Self {
            admin_token: config.admin_token(),
            client_tokens,
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
            history: Mutex::new(crate::history::History::default()),
            metrics: crate::metrics::Metrics::new(),
            admission: crate::admission::Admission::new(admission),
            started: Instant::now(),
            last_ejection_ms: Mutex::new(None),
            breakers: Mutex::new(BTreeMap::new()),
            handshake_rate,
        })
    }

    fn rules(&self) -> Rules {
        let c = &self.config;
        Rules {
            up_threshold: c.up_threshold,
            max_up_threshold: c.max_up_threshold,
            flap_window_ms: c.flap_window_ms,
            degraded_checks: c.degraded_checks,
            min_samples: c.min_samples,
            eject_cooldown_ms: c.eject_cooldown_ms,
        }
    }

    /// The lifecycle rules' clock: ms since this gateway started (monotonic).
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn entry(&self, id: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.addr.id == id)
    }

    fn record(&self, node: &str, action: &str, reason: impl Into<String>, detail: serde_json::Value) {
        self.metrics.decided(action, node);
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

    /// Proxied sessions open now, per node.
    pub fn proxied_by_node(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for s in self.sessions.lock().expect("sessions lock").values() {
            *by.entry(s.node.clone()).or_insert(0) += 1;
        }
        by
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
                    Ok(h) => Observed::Answer {
                        state: h.state,
                        assigned: h.assigned_partitions.clone(),
                        catchup: h.catchup.status,
                        stalled: h.progress.degraded.is_some() && h.progress.ownership_confirmed,
                    },
                    Err(e) => Observed::Down { error: e.clone() },
                };
                slot.polled_at = Some(Instant::now());
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
                let (next, decisions) = lifecycle::observe(&slot.view, &obs, self.now_ms(), &self.rules());
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
            self.consider_ejection();
            self.sample_history();
        }
        self.move_sessions_off_down_nodes();
        self.wake_waiters();
        self.polled.send_modify(|n| *n += 1);
    }

    fn breaker_settings(&self) -> crate::breaker::Settings {
        let c = &self.config;
        crate::breaker::Settings {
            failures: c.breaker_failures,
            open_ms: c.breaker_open_ms,
            trials: c.breaker_trials,
            trial_timeout_ms: c.upstream_connect_timeout_ms + 2_000,
        }
    }

    /// May a handshake go to node `id` now: within its handshake rate (slow start) and its circuit
    /// breaker closed or letting a trial through.
    ///
    /// # Errors
    /// The refusal for the client: 503 `node_busy` with a jittered Retry-After (1–3 s, so the
    /// excess does not come back in one wave), or `node_circuit_open`.
    pub fn admit_handshake(&self, id: &str) -> Result<(), crate::proxy::Refused> {
        if let Some(limiter) = &self.handshake_rate {
            if limiter.check_key(&id.to_owned()).is_err() {
                self.metrics.refused("node_busy");
                return Err(crate::proxy::Refused {
                    code: "node_busy".into(),
                    message: format!("node {id} takes more than {} handshakes a second (HANDSHAKE_RATE_PER_NODE); try again shortly", self.config.handshake_rate_per_node),
                    retry_after_secs: 1 + rand::random::<u64>() % 3,
                });
            }
        }
        let now = self.now_ms();
        let mut breakers = self.breakers.lock().expect("breaker lock");
        let state = breakers.entry(id.to_owned()).or_default();
        let (next, allowed) = crate::breaker::allow(*state, now, &self.breaker_settings());
        if matches!((*state, next), (crate::breaker::State::Open { .. }, crate::breaker::State::HalfOpen { .. })) {
            tracing::info!("[GATEWAY] {} circuit half-open: letting {} trial handshakes through", id, self.config.breaker_trials);
        }
        *state = next;
        if allowed {
            Ok(())
        } else {
            Err(crate::proxy::Refused {
                code: "node_circuit_open".into(),
                message: format!("node {id} stopped answering handshakes; it gets none until trials succeed"),
                retry_after_secs: 1,
            })
        }
    }

    /// A handshake to node `id` ended: `answered` when the node answered it (accepted or refused).
    pub fn handshake_done(&self, id: &str, answered: bool) {
        let now = self.now_ms();
        let (before, after) = {
            let mut breakers = self.breakers.lock().expect("breaker lock");
            let state = breakers.entry(id.to_owned()).or_default();
            let before = *state;
            *state = crate::breaker::record(before, answered, now, &self.breaker_settings());
            (before, *state)
        };
        use crate::breaker::State as B;
        match (before, after) {
            (B::Closed { .. } | B::HalfOpen { .. }, B::Open { .. }) => {
                tracing::warn!("[GATEWAY] {} circuit open: handshakes failed without an answer; none sent for {}ms", id, self.config.breaker_open_ms);
                self.record(id, "circuit_opened", "handshakes failed without an answer", serde_json::json!({"from": before.name()}));
            }
            (B::HalfOpen { .. }, B::Closed { .. }) => {
                tracing::info!("[GATEWAY] {} circuit closed: trial handshakes answered", id);
                self.record(id, "circuit_closed", "trial handshakes answered", serde_json::Value::Null);
            }
            _ => {}
        }
    }

    /// Applies the fleet-wide ejection rule ([`lifecycle::eject`]) after a scheduled poll.
    fn consider_ejection(self: &Arc<Self>) {
        let now = self.now_ms();
        let views: Vec<(String, NodeView)> =
            self.nodes.iter().map(|n| (n.addr.id.clone(), n.slot.lock().expect("slot lock").view.clone())).collect();
        let candidates: Vec<lifecycle::Candidate<'_>> = views.iter().map(|(id, view)| lifecycle::Candidate { id, view }).collect();
        let mut last = self.last_ejection_ms.lock().expect("ejection lock");
        let Some((id, reason)) = lifecycle::eject(&candidates, *last, now, &self.rules()) else { return };
        *last = Some(now);
        drop(last);
        let Some(node) = self.entry(&id) else { return };
        {
            let mut slot = node.slot.lock().expect("slot lock");
            slot.view = lifecycle::ejected(&slot.view, now);
        }
        self.act(node, Decision::Eject { reason });
    }

    /// Adds this scheduled poll's picture of every node to the history.
    fn sample_history(&self) {
        let nodes = self
            .nodes
            .iter()
            .map(|n| {
                let slot = n.slot.lock().expect("slot lock");
                (n.addr.id.clone(), slot.view.status, slot.health.as_ref().map(|(_, h)| h.clone()))
            })
            .collect();
        self.history.lock().expect("history lock").record(shared::event::now_ms(), nodes);
    }

    /// The history's samples, oldest first (`GET /api/fleet/history`).
    pub fn history(&self) -> Vec<crate::history::Sample> {
        self.history.lock().expect("history lock").samples()
    }

    /// The second source of freed places: a node whose `/health` shows free seats gets that many
    /// of its waiting handshakes woken (sessions that do not go through this gateway end too).
    fn wake_waiters(&self) {
        for n in &self.nodes {
            if let Some(free) = self.room(&n.addr.id).filter(|f| *f > 0) {
                self.admission.polled(&n.addr.id, free);
            }
        }
    }

    /// Free seats of node `id` by its last `/health` (`max_sessions − session_seats`): the
    /// capacity hint. `None` when unknown (no answer, or a node that reports no capacity).
    pub fn room(&self, id: &str) -> Option<usize> {
        let slot = self.entry(id)?.slot.lock().expect("slot lock");
        slot.health.as_ref().and_then(|(_, h)| (h.max_sessions > 0).then(|| h.max_sessions.saturating_sub(h.session_seats)))
    }

    /// The recovered node's room for a failback round: free seats by its last poll, counting the
    /// sessions this gateway proxies to it now if that is more (the poll may be older than their
    /// arrival), less the handshakes already waiting for it (they go first).
    fn failback_room(&self, id: &str) -> Option<usize> {
        let max = {
            let slot = self.entry(id)?.slot.lock().expect("slot lock");
            slot.health.as_ref().map(|(_, h)| (h.max_sessions, h.session_seats))
        };
        let (max, seats) = max.filter(|(m, _)| *m > 0)?;
        let waiting = self.admission.waiting().get(id).copied().unwrap_or(0);
        Some(max.saturating_sub(seats.max(self.proxied_on(id))).saturating_sub(waiting))
    }

    /// Proxied sessions on node `id` now.
    fn proxied_on(&self, id: &str) -> usize {
        self.sessions.lock().expect("sessions lock").values().filter(|s| s.node == id).count()
    }

    /// Proxied sessions on `nodes`, per partition.
    fn proxied_by_partition(&self, nodes: &[&str]) -> BTreeMap<i32, usize> {
        let mut by = BTreeMap::new();
        for s in self.sessions.lock().expect("sessions lock").values() {
            if nodes.contains(&s.node.as_str()) {
                *by.entry(s.partition).or_default() += 1;
            }
        }
        by
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
            Decision::Eject { reason } => {
                let fleet = self.clone();
                tokio::spawn(async move { fleet.eject(&id, reason).await });
            }
        }
    }

    /// A POST to a node's admin route, with the admin token when one is set.
    fn admin_post(&self, url: &str) -> reqwest::RequestBuilder {
        let req = self.http.post(url);
        match &self.admin_token {
            Some(t) => req.bearer_auth(t.expose()),
            None => req,
        }
    }

    async fn start_recovery(&self, id: &str, reason: String) {
        let Some(node) = self.entry(id) else { return };
        let url = format!("{}/admin/start-recovery", self.config.admin_url_of(&node.addr));
        let result = async {
            let resp = self.admin_post(&url).timeout(Duration::from_secs(5)).send().await.map_err(|e| e.to_string())?;
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
        let timeout = Duration::from_millis(req.grace_ms) + Duration::from_secs(15);
        self.node_admin(target, "drain", req, timeout).await
    }

    /// `POST /admin/hold` on `target`.
    async fn hold_on_node(&self, target: &NodeEntry, req: &HoldRequest) -> Result<HoldReport, shared::http::ApiError> {
        self.node_admin(target, "hold", req, self.config.poll_interval() + Duration::from_secs(2)).await
    }

    /// `POST /admin/<action>` on `target` with `body`, and its JSON answer. The node's own refusal
    /// (409 conflict, 400 ...) is passed through, naming the node.
    async fn node_admin<B: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        target: &NodeEntry,
        action: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<R, shared::http::ApiError> {
        let url = format!("{}/admin/{action}", self.config.admin_url_of(&target.addr));
        let resp = self
            .admin_post(&url)
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| shared::http::ApiError::unavailable("node_unreachable", format!("node {}: {e}", target.addr.id), 1))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            let mut e = relay_error(status.as_u16(), &text);
            e.body.message = format!("node {}: {}", target.addr.id, e.body.message);
            return Err(e);
        }
        resp.json::<R>().await.map_err(|e| shared::http::ApiError::bad_gateway(format!("node {}: bad {action} report: {e}", target.addr.id)))
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
        // The input the decision rests on: the recovered node's assignment, and when it got it.
        let assignment_at_ms = node.slot.lock().expect("slot lock").health.as_ref().and_then(|(_, h)| h.progress.assignment_at_ms);
        tracing::info!("[GATEWAY] failback to {}: drain {:?} reason={} partitions={:?}", id, names, drain_reason, partitions);
        self.record(
            id,
            "failback_started",
            reason,
            serde_json::json!({"from": names, "partitions": partitions, "assignment_at_ms": assignment_at_ms}),
        );
        let started = Instant::now();
        let mut detail = BTreeMap::new();
        let mut failed = false;
        // Paced to the recovered node's room: each round drains the partitions whose proxied
        // sessions fit in its room (`failback_room`), waits until those sessions arrived there,
        // then for a fresh poll; the sessions of the others stay where they are (the stand-in
        // holds those partitions: its REVOKE_HOLD_MS, extended each round by `POST /admin/hold`
        // up to FAILBACK_PACE_LIMIT_MS) until room frees. A round that finds them gone (a hold
        // ran out and they moved by themselves) drains nothing for them.
        let mut left = partitions;
        let mut round = 0u32;
        loop {
            let by_partition = self.proxied_by_partition(&names);
            let (now, later) = crate::admission::pace_failback(&left, &by_partition, self.failback_room(id));
            let moving: usize = now.iter().filter_map(|p| by_partition.get(p)).sum();
            let arrived_before = self.proxied_on(id);
            let limit = Duration::from_millis(self.config.failback_pace_limit_ms);
            let out_of_time = started.elapsed() > limit;
            if !later.is_empty() && !out_of_time {
                // The waiting partitions' sessions stay on the stand-ins: keep their holds for
                // this round (its drain, the drained sessions' arrival, a fresh poll) and a
                // margin. Each round renews them; if this gateway dies they run out by themselves.
                let round_wait = 2 * Duration::from_millis(self.config.failback_grace_ms) + Duration::from_secs(5) + 2 * self.config.poll_interval();
                let for_ms = (round_wait + HOLD_EXTENSION_MARGIN).as_millis().min(u128::from(shared::api::MAX_HOLD_EXTENSION_MS)) as u64;
                let hold = HoldRequest { partitions: later.clone(), for_ms };
                let results = futures::future::join_all(stand_ins.iter().map(|n| self.hold_on_node(n, &hold))).await;
                for (n, r) in stand_ins.iter().zip(results) {
                    match r {
                        Ok(rep) if !rep.held.is_empty() => tracing::debug!("[GATEWAY] {} keeps holding partitions={:?} for {}ms", n.addr.id, rep.held, for_ms),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(
                            "[GATEWAY] could not extend {}'s hold of partitions={:?}: {} (its sessions are handed over when its REVOKE_HOLD_MS runs out)",
                            n.addr.id, later, e.body.message
                        ),
                    }
                }
            }
            if !now.is_empty() {
                let req = DrainRequest { reason: drain_reason, grace_ms: self.config.failback_grace_ms, partitions: Some(now.clone()) };
                let results = futures::future::join_all(stand_ins.iter().map(|n| self.drain_node(n, &req))).await;
                for (n, r) in stand_ins.iter().zip(results) {
                    let key = if round == 0 { n.addr.id.clone() } else { format!("{} round {}", n.addr.id, round + 1) };
                    match r {
                        Ok(rep) => {
                            tracing::info!("[GATEWAY] failback drain of {} done partitions={:?} notified={} forceClosed={} tookMs={}", n.addr.id, now, rep.notified_sessions, rep.force_closed_sessions, rep.duration_ms);
                            detail.insert(key, serde_json::to_value(rep).unwrap_or_default());
                        }
                        Err(e) => {
                            failed = true;
                            tracing::warn!("[GATEWAY] failback drain of {} failed error=\"{}\"", n.addr.id, e.body.message);
                            detail.insert(key, serde_json::json!({"error": e.body}));
                        }
                    }
                }
            }
            if later.is_empty() {
                break;
            }
            if out_of_time {
                tracing::warn!("[GATEWAY] failback to {}: no room for partitions={:?} within {}s (FAILBACK_PACE_LIMIT_MS); their holds run out and their sessions wait for room in the admission queue", id, later, limit.as_secs());
                detail.insert("left".into(), serde_json::json!({"partitions": later}));
                break;
            }
            if round == 0 || !now.is_empty() {
                tracing::info!("[GATEWAY] failback to {} paced: partitions={:?} wait for room (moving {} sessions now)", id, later, moving);
                self.record(id, "failback_paced", "the recovered node has no room for these partitions' sessions yet", serde_json::json!({"waiting": later, "moving": moving}));
            }
            left = later;
            round += 1;
            // The drained sessions reconnect to the recovered node: wait until they are there (or
            // the grace period and a little more passed) before the room is measured again.
            let settle = Instant::now() + Duration::from_millis(self.config.failback_grace_ms) + Duration::from_secs(5);
            while moving > 0 && self.proxied_on(id) < arrived_before + moving && Instant::now() < settle {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            self.refreshed(self.config.poll_interval()).await;
        }
        let action = if failed { "failback_failed" } else { "failback_completed" };
        self.record(id, action, format!("took {}ms", started.elapsed().as_millis()), serde_json::to_value(detail).unwrap_or_default());
        tracing::info!("[GATEWAY] failback to {} {} tookMs={}", id, if failed { "finished with errors" } else { "completed" }, started.elapsed().as_millis());
    }

    /// Drains DEGRADED node `id` out of the broadcast group (reason NODE_DEGRADED): its
    /// partitions move to the nodes that serve, its sessions reconnect to them. Afterwards it is
    /// UP and recovers like any node (hysteresis counts the ejection as a flap).
    async fn eject(&self, id: &str, reason: String) {
        let Some(node) = self.entry(id) else { return };
        let req = DrainRequest { reason: DrainReason::NodeDegraded, grace_ms: self.config.failback_grace_ms, partitions: None };
        tracing::warn!("[GATEWAY] ejecting {}: drain it out of the broadcast group reason=\"{}\"", id, reason);
        self.record(id, "eject", reason, serde_json::json!({"grace_ms": req.grace_ms}));
        match self.drain_node(node, &req).await {
            Ok(rep) => {
                tracing::info!("[GATEWAY] ejected {} notified={} forceClosed={} tookMs={}", id, rep.notified_sessions, rep.force_closed_sessions, rep.duration_ms);
                self.record(id, "eject_completed", "drained out of the broadcast group", serde_json::to_value(rep).unwrap_or_default());
            }
            Err(e) => {
                tracing::warn!("[GATEWAY] ejecting {} failed error=\"{}\"", id, e.body.message);
                self.record(id, "eject_failed", e.body.message.clone(), serde_json::to_value(&e.body).unwrap_or_default());
            }
        }
        self.request_refresh();
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
        let waiting = self.admission.waiting();
        let (now, rules) = (self.now_ms(), self.rules());
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
                    // Hysteresis: the UP streak this node needs now (longer after recent flaps).
                    "required_up_streak": lifecycle::required_up_streak(&slot.view, now, &rules),
                    "recent_flaps": slot.view.flaps.iter().filter(|t| now.saturating_sub(**t) < rules.flap_window_ms).count(),
                    "degraded_streak": slot.view.degraded_streak,
                    "ejected": slot.view.ejected,
                    "circuit": self.breakers.lock().expect("breaker lock").get(&n.addr.id).copied().unwrap_or_default().name(),
                    // Why the node says it is DEGRADED, from its last answer.
                    "degraded": h.and_then(|(_, h)| h.progress.degraded.clone()),
                    // Only meaningful while UP: whether this UP episode's start-recovery went out.
                    "start_recovery": (slot.view.status == Status::Up).then_some(slot.view.recovery),
                    "awaiting_failback": slot.view.awaiting_failback,
                    "ready": h.is_some_and(|(_, h)| h.ready),
                    "draining": h.is_some_and(|(_, h)| h.draining),
                    "assigned_partitions": h.map(|(_, h)| h.assigned_partitions.clone()).unwrap_or_default(),
                    "sessions": h.map_or(0, |(_, h)| h.sessions),
                    // The capacity hint: the node's MAX_SESSIONS and seats taken (0: unknown).
                    "max_sessions": h.map_or(0, |(_, h)| h.max_sessions),
                    "session_seats": h.map_or(0, |(_, h)| h.session_seats),
                    "admission_waiting": waiting.get(&n.addr.id).copied().unwrap_or(0),
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
            "policy": {
                "up_threshold": rules.up_threshold,
                "max_up_threshold": rules.max_up_threshold,
                "flap_window_ms": rules.flap_window_ms,
                "degraded_checks": rules.degraded_checks,
                "min_samples": rules.min_samples,
                "eject_cooldown_ms": rules.eject_cooldown_ms,
            },
            "nodes": nodes,
            "publishers": self.publishers.snapshot(),
            "decisions": decisions,
        })
    }

    /// Each node's id, how long ago its last poll ended (`None`: never polled) and whether its last
    /// answer said it serves (ready, not draining): what the gateway's `/health` and `/ready` judge.
    pub fn poll_ages(&self) -> Vec<crate::health::NodePoll> {
        self.nodes
            .iter()
            .map(|n| {
                let slot = n.slot.lock().expect("slot lock");
                crate::health::NodePoll {
                    id: n.addr.id.clone(),
                    state: slot.view.status,
                    polled_ago: slot.polled_at.map(|t| t.elapsed()),
                    serving: slot.health.as_ref().is_some_and(|(_, h)| h.ready && !h.draining),
                }
            })
            .collect()
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
