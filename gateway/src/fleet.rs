//! The fleet as the gateway sees it: each node's view and last health answer, the decision log,
//! and the actions (start-recovery, failback drains, maintenance drains).
//!
//! Every replica polls and keeps its own views; only the leader ([`crate::leader`]) carries out
//! start-recovery, failback and ejection, and it writes each decision to the control topic
//! ([`Fleet::decide`]) before acting. The other replicas read those decisions back
//! ([`Fleet::read_control`]) into their logs and views, so they do not decide the same thing again
//! when they lead, and a new leader finishes a failback its predecessor started.
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
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Margin of a hold extension over the longest wait of a paced failback round (the drained
/// sessions' arrival, then a fresh poll): the next round extends it again before it runs out.
const HOLD_EXTENSION_MARGIN: Duration = Duration::from_secs(10);

pub use crate::decisions::DecisionRecord;

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
    decisions: crate::decisions::Decisions,
    /// This replica's part in the election (standalone without Kafka).
    pub leadership: Arc<crate::leader::Leadership>,
    /// The control topic's writer, when the gateways elect their leader through Kafka.
    control: Option<Control>,
    /// Numbers this replica's decisions (with its id and token, a decision id).
    decision_seq: std::sync::atomic::AtomicU64,
    /// Failbacks this replica is carrying out now, by decision id (not resumed twice).
    running_failbacks: Mutex<BTreeSet<String>>,
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

/// Where decisions are written before they are carried out.
struct Control {
    producer: rdkafka::producer::FutureProducer<shared::kafka::FleetContext>,
    topic: String,
}

/// A decision written (or, standalone, recorded): what the node calls that carry it out send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub id: String,
    /// The fencing token it was decided under (`None`: standalone, or an operator's request).
    pub token: Option<u64>,
}

/// Removes a failback from [`Fleet::running_failbacks`] when it ends, however it ends.
struct Running<'a> {
    fleet: &'a Fleet,
    id: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.fleet.running_failbacks.lock().expect("failbacks lock").remove(&self.id);
    }
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
        let (leadership, control) = match &config.kafka_bootstrap {
            Some(bootstrap) => {
                let producer = config
                    .kafka_settings(bootstrap)
                    .producer(&config.id(), Duration::from_secs(10))
                    .create_with_context(shared::kafka::FleetContext::default())
                    .expect("build the control topic's producer");
                (
                    crate::leader::Leadership::elected(config.id(), config.leader_session_timeout_ms),
                    Some(Control { producer, topic: config.control_topic.clone() }),
                )
            }
            None => (crate::leader::Leadership::standalone(config.id()), None),
        };
        Arc::new(Self {
            decisions: crate::decisions::Decisions::new(config.decision_log as usize),
            leadership,
            control,
            decision_seq: std::sync::atomic::AtomicU64::new(0),
            running_failbacks: Mutex::new(BTreeSet::new()),
            admin_token: config.admin_token(),
            client_tokens,
            config,
            limiter,
            nodes,
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

    /// Records what this replica saw by itself (a local entry of the log).
    fn record(&self, node: &str, action: &str, reason: impl Into<String>, detail: serde_json::Value) {
        self.metrics.decided(action, node);
        self.decisions.push(DecisionRecord::local(node, action, reason.into(), detail));
    }

    /// Decides `action` on `node`: with the authority to act, writes it to the control topic and
    /// waits until the broker has it (standalone: records it), before the caller carries it out.
    /// `of`: the decision this one continues (a resumed failback).
    ///
    /// # Errors
    /// Why this replica may not act (a follower; leadership not confirmed), or why the decision
    /// could not be written; nothing may be carried out then.
    pub async fn decide(&self, node: &str, action: &str, reason: &str, detail: serde_json::Value, of: Option<&str>) -> Result<Decided, String> {
        let token = self.leadership.authority()?;
        self.write(node, action, reason, detail, of, token).await
    }

    /// Writes an outcome (or a step) of decision `of` under the token it was decided with: also
    /// when this replica lost its leadership meanwhile, since what was done is a fact the next
    /// leader needs.
    async fn report(&self, node: &str, action: &str, reason: &str, detail: serde_json::Value, of: &Decided) {
        if let Err(e) = self.write(node, action, reason, detail.clone(), Some(&of.id), of.token).await {
            tracing::warn!("[GATEWAY] could not write {} of {} to the control topic: {}", action, of.id, e);
            self.record(node, action, format!("{reason} (not written to the control topic: {e})"), detail);
        }
    }

    async fn write(&self, node: &str, action: &str, reason: &str, detail: serde_json::Value, of: Option<&str>, token: Option<u64>) -> Result<Decided, String> {
        let seq = self.decision_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("{}/{}/{}", self.leadership.gateway, token.map_or_else(|| "-".to_owned(), |t| t.to_string()), seq);
        let Some(control) = &self.control else {
            self.metrics.decided(action, node);
            self.decisions.push(DecisionRecord {
                id: Some(id.clone()),
                of: of.map(str::to_owned),
                token,
                ..DecisionRecord::local(node, action, reason.to_owned(), detail)
            });
            return Ok(Decided { id, token });
        };
        let record = shared::control::ControlRecord::Decision {
            id: id.clone(),
            token,
            gateway: self.leadership.gateway.clone(),
            at_ms: shared::event::now_ms(),
            node: node.to_owned(),
            action: action.to_owned(),
            reason: reason.to_owned(),
            detail,
            of: of.map(str::to_owned),
        };
        let value = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
        let sent = control
            .producer
            .send(rdkafka::producer::FutureRecord::<(), _>::to(&control.topic).partition(0).payload(&value), Duration::from_secs(10))
            .await;
        sent.map_err(|(e, _)| format!("control topic {}: {e}", control.topic))?;
        Ok(Decided { id, token })
    }

    /// A record read from the control topic at `offset` (every replica, the writer included).
    pub fn read_control(&self, offset: i64, record: Result<shared::control::ControlRecord, String>) {
        use shared::control::ControlRecord;
        match record {
            Err(e) => tracing::warn!(offset, "[GATEWAY] skipping control record: {e}"),
            Ok(ControlRecord::Claim { gateway, .. }) => {
                tracing::info!("[GATEWAY] {} claimed leadership (fencing token {})", gateway, offset);
                self.leadership.read_claim(offset, &gateway);
            }
            Ok(ControlRecord::Decision { id, token, gateway, at_ms, node, action, reason, detail, of }) => {
                self.metrics.decided(&action, &node);
                if gateway != self.leadership.gateway {
                    self.apply_decision(&node, &action);
                }
                self.decisions.push(DecisionRecord {
                    at_ms,
                    node,
                    action,
                    reason,
                    detail,
                    source: "control_topic",
                    id: Some(id),
                    gateway: Some(gateway),
                    token,
                    of,
                    offset: Some(offset),
                });
            }
        }
    }

    /// Another replica's decision on `node`: this replica's view takes it in, so it does not
    /// decide the same again when it leads.
    fn apply_decision(&self, node: &str, action: &str) {
        let Some(entry) = self.entry(node) else { return };
        let now = self.now_ms();
        let mut slot = entry.slot.lock().expect("slot lock");
        match action {
            "start_recovery_sent" => slot.view = lifecycle::recovery_sent(&slot.view),
            "failback_started" => {
                slot.view.awaiting_failback = false;
            }
            "eject" => {
                slot.view = lifecycle::ejected(&slot.view, now);
                drop(slot);
                *self.last_ejection_ms.lock().expect("ejection lock") = Some(now);
            }
            _ => {}
        }
    }

    /// This replica just became the leader: finishes the failbacks its predecessors started.
    pub fn resume_open_failbacks(self: &Arc<Self>) {
        for f in self.decisions.open_failbacks() {
            if self.running_failbacks.lock().expect("failbacks lock").contains(&f.id) {
                continue;
            }
            let fleet = self.clone();
            tracing::info!("[GATEWAY] resuming failback {} to {} (started by {}) partitions={:?}", f.id, f.node, f.gateway, f.partitions);
            tokio::spawn(async move {
                let reason = format!("resuming failback {} that {} started and did not finish", f.id, f.gateway);
                fleet.failback(&f.node, f.partitions, reason, Some(f.id)).await;
            });
        }
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
        if self.leadership.authority().is_err() {
            return; // the leader ejects; its decision reaches this replica's views
        }
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
                if let Err(why) = self.leadership.authority() {
                    // The leader sends it; this replica asks again on a later UP poll, when it leads.
                    tracing::debug!("[GATEWAY] {} due for start-recovery; not sent here: {}", id, why);
                    let mut slot = node.slot.lock().expect("slot lock");
                    slot.view = lifecycle::recovery_call_failed(&slot.view);
                    return;
                }
                let fleet = self.clone();
                tokio::spawn(async move { fleet.start_recovery(&id, reason).await });
            }
            Decision::Failback { partitions, reason } => {
                if let Err(why) = self.leadership.authority() {
                    // The leader fails back (its failback_started clears this); until then this
                    // replica keeps it due, for when it leads.
                    tracing::debug!("[GATEWAY] {} due for failback; not started here: {}", id, why);
                    node.slot.lock().expect("slot lock").view.awaiting_failback = true;
                    return;
                }
                let fleet = self.clone();
                tokio::spawn(async move { fleet.failback(&id, partitions, reason, None).await });
            }
            Decision::Eject { reason } => {
                let fleet = self.clone();
                tokio::spawn(async move { fleet.eject(&id, reason).await });
            }
        }
    }

    /// A POST to a node's admin route, with the admin token when one is set, and the decision it
    /// carries out: its id (the node does it once per id) and fencing token (refused by a node
    /// that saw a newer leader's claim).
    fn admin_post(&self, url: &str, decided: Option<&Decided>) -> reqwest::RequestBuilder {
        let mut req = self.http.post(url);
        if let Some(t) = &self.admin_token {
            req = req.bearer_auth(t.expose());
        }
        if let Some(d) = decided {
            req = req.header(shared::control::DECISION_HEADER, &d.id);
            if let Some(t) = d.token {
                req = req.header(shared::control::FENCING_HEADER, t.to_string());
            }
        }
        req
    }

    async fn start_recovery(&self, id: &str, reason: String) {
        let Some(node) = self.entry(id) else { return };
        let decided = match self.decide(id, "start_recovery", &reason, serde_json::Value::Null, None).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("[GATEWAY] {} start-recovery not sent: {}; will retry on the next UP poll", id, e);
                let mut slot = node.slot.lock().expect("slot lock");
                slot.view = lifecycle::recovery_call_failed(&slot.view);
                return;
            }
        };
        let url = format!("{}/admin/start-recovery", self.config.admin_url_of(&node.addr));
        let result = async {
            let resp = self.admin_post(&url, Some(&decided)).timeout(Duration::from_secs(5)).send().await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
            if status.is_success() { Ok(body) } else { Err(format!("{status}: {body}")) }
        }
        .await;
        match result {
            Ok(body) => {
                tracing::info!("[GATEWAY] {} start-recovery sent reason=\"{}\" outcome={}", id, reason, body["outcome"]);
                self.report(id, "start_recovery_sent", "the node accepted it", body, &decided).await;
            }
            Err(e) => {
                tracing::warn!("[GATEWAY] {} start-recovery failed error=\"{}\"; will retry on the next UP poll", id, e);
                {
                    let mut slot = node.slot.lock().expect("slot lock");
                    slot.view = lifecycle::recovery_call_failed(&slot.view);
                }
                self.report(id, "start_recovery_failed", &e, serde_json::Value::Null, &decided).await;
            }
        }
    }

    async fn drain_node(&self, target: &NodeEntry, req: &DrainRequest, decided: Option<&Decided>) -> Result<DrainReport, shared::http::ApiError> {
        let timeout = Duration::from_millis(req.grace_ms) + Duration::from_secs(15);
        self.node_admin(target, "drain", req, timeout, decided).await
    }

    /// `POST /admin/hold` on `target`.
    async fn hold_on_node(&self, target: &NodeEntry, req: &HoldRequest, token: Option<u64>) -> Result<HoldReport, shared::http::ApiError> {
        // No decision id: each round's extension is a new one, which the node must not take for
        // a repeat.
        let timeout = self.config.poll_interval() + Duration::from_secs(2);
        let url = format!("{}/admin/hold", self.config.admin_url_of(&target.addr));
        let mut req_b = self.admin_post(&url, None);
        if let Some(t) = token {
            req_b = req_b.header(shared::control::FENCING_HEADER, t.to_string());
        }
        self.send_admin(target, "hold", req_b.json(req).timeout(timeout)).await
    }

    /// `POST /admin/<action>` on `target` with `body`, and its JSON answer. The node's own refusal
    /// (409 conflict, 400 ...) is passed through, naming the node.
    async fn node_admin<B: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        target: &NodeEntry,
        action: &str,
        body: &B,
        timeout: Duration,
        decided: Option<&Decided>,
    ) -> Result<R, shared::http::ApiError> {
        let url = format!("{}/admin/{action}", self.config.admin_url_of(&target.addr));
        self.send_admin(target, action, self.admin_post(&url, decided).json(body).timeout(timeout)).await
    }

    async fn send_admin<R: serde::de::DeserializeOwned>(&self, target: &NodeEntry, action: &str, req: reqwest::RequestBuilder) -> Result<R, shared::http::ApiError> {
        let resp = req
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

    /// Drains the sessions of `partitions` from the nodes that stood in for `id`. `resume`: the id
    /// of a failback a previous leader started and did not finish, which this one finishes (its
    /// drains carry the same decision ids, so a node does each once).
    async fn failback(&self, id: &str, partitions: Vec<i32>, reason: String, resume: Option<String>) {
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
        let inputs = serde_json::json!({"from": names, "partitions": partitions, "assignment_at_ms": assignment_at_ms});
        let decided = match &resume {
            None => self.decide(id, "failback_started", &reason, inputs, None).await,
            Some(of) => self.decide(id, "failback_resumed", &reason, inputs, Some(of)).await,
        };
        let fid = match (decided, resume) {
            (Ok(d), None) => d,
            (Ok(d), Some(of)) => Decided { id: of, token: d.token },
            (Err(e), _) => {
                tracing::warn!("[GATEWAY] failback to {} not started: {}", id, e);
                if let Some(n) = self.entry(id) {
                    n.slot.lock().expect("slot lock").view.awaiting_failback = true;
                }
                return;
            }
        };
        tracing::info!("[GATEWAY] failback to {}: drain {:?} reason={} partitions={:?} decision={}", id, names, drain_reason, partitions, fid.id);
        self.running_failbacks.lock().expect("failbacks lock").insert(fid.id.clone());
        let _running = Running { fleet: self, id: fid.id.clone() };
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
            if let Err(e) = self.leadership.authority() {
                tracing::warn!("[GATEWAY] failback {} to {} stops here: {} (the next leader finishes it)", fid.id, id, e);
                return;
            }
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
                let results = futures::future::join_all(stand_ins.iter().map(|n| self.hold_on_node(n, &hold, fid.token))).await;
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
                let step = Decided { id: format!("{}/drain/{}", fid.id, round + 1), token: fid.token };
                let results = futures::future::join_all(stand_ins.iter().map(|n| self.drain_node(n, &req, Some(&step)))).await;
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
                // The failback is complete when the drained sessions are on the recovered node
                // (their notices are spread over RECONNECT_SPREAD_MS), not when the drain call
                // returns: until then a new leader resumes it.
                self.await_arrivals(id, arrived_before, moving).await;
                break;
            }
            if out_of_time {
                tracing::warn!("[GATEWAY] failback to {}: no room for partitions={:?} within {}s (FAILBACK_PACE_LIMIT_MS); their holds run out and their sessions wait for room in the admission queue", id, later, limit.as_secs());
                detail.insert("left".into(), serde_json::json!({"partitions": later}));
                break;
            }
            if round == 0 || !now.is_empty() {
                tracing::info!("[GATEWAY] failback to {} paced: partitions={:?} wait for room (moving {} sessions now)", id, later, moving);
                self.report(id, "failback_paced", "the recovered node has no room for these partitions' sessions yet", serde_json::json!({"waiting": later, "moving": moving}), &fid).await;
            }
            left = later;
            round += 1;
            // The drained sessions reconnect to the recovered node: wait until they are there
            // before the room is measured again.
            self.await_arrivals(id, arrived_before, moving).await;
            self.refreshed(self.config.poll_interval()).await;
        }
        if let Err(e) = self.leadership.authority() {
            tracing::warn!("[GATEWAY] failback {} to {} stops here: {} (the next leader finishes it)", fid.id, id, e);
            return;
        }
        let action = if failed { "failback_failed" } else { "failback_completed" };
        self.report(id, action, &format!("took {}ms", started.elapsed().as_millis()), serde_json::to_value(detail).unwrap_or_default(), &fid).await;
        tracing::info!("[GATEWAY] failback to {} {} tookMs={}", id, if failed { "finished with errors" } else { "completed" }, started.elapsed().as_millis());
    }

    /// Waits until this gateway proxies `moving` more sessions to `id` than `before` (drained
    /// sessions arrived at the recovered node), or the grace period and a little more passed
    /// (some reconnect through another replica, or went away).
    async fn await_arrivals(&self, id: &str, before: usize, moving: usize) {
        let settle = Instant::now() + Duration::from_millis(self.config.failback_grace_ms) + Duration::from_secs(5);
        while moving > 0 && self.proxied_on(id) < before + moving && Instant::now() < settle {
            if self.leadership.authority().is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Drains DEGRADED node `id` out of the broadcast group (reason NODE_DEGRADED): its
    /// partitions move to the nodes that serve, its sessions reconnect to them. Afterwards it is
    /// UP and recovers like any node (hysteresis counts the ejection as a flap).
    async fn eject(&self, id: &str, reason: String) {
        let Some(node) = self.entry(id) else { return };
        let req = DrainRequest { reason: DrainReason::NodeDegraded, grace_ms: self.config.failback_grace_ms, partitions: None };
        let decided = match self.decide(id, "eject", &reason, serde_json::json!({"grace_ms": req.grace_ms}), None).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("[GATEWAY] {} not ejected: {}", id, e);
                return;
            }
        };
        tracing::warn!("[GATEWAY] ejecting {}: drain it out of the broadcast group reason=\"{}\"", id, reason);
        match self.drain_node(node, &req, Some(&decided)).await {
            Ok(rep) => {
                tracing::info!("[GATEWAY] ejected {} notified={} forceClosed={} tookMs={}", id, rep.notified_sessions, rep.force_closed_sessions, rep.duration_ms);
                self.report(id, "eject_completed", "drained out of the broadcast group", serde_json::to_value(rep).unwrap_or_default(), &decided).await;
            }
            Err(e) => {
                tracing::warn!("[GATEWAY] ejecting {} failed error=\"{}\"", id, e.body.message);
                self.report(id, "eject_failed", &e.body.message, serde_json::to_value(&e.body).unwrap_or_default(), &decided).await;
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
        // An operator's request, carried out by whichever replica received it: written with no
        // fencing token (the leader's authority is not what it rests on).
        let inputs = serde_json::json!({"reason": req.reason, "grace_ms": grace_ms});
        let decided = match self.write(id, "drain", "operator request", inputs, None, None).await {
            Ok(d) => d,
            Err(e) => return Some(Err(shared::http::ApiError::unavailable("control_topic_unavailable", format!("the drain was not recorded, so not carried out: {e}"), 1))),
        };
        let r = self.drain_node(node, &req, Some(&decided)).await;
        match &r {
            Ok(rep) => self.report(id, "drain_completed", "operator request", serde_json::to_value(rep).unwrap_or_default(), &decided).await,
            Err(e) => self.report(id, "drain_failed", &e.body.message, serde_json::to_value(&e.body).unwrap_or_default(), &decided).await,
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
        let decisions: Vec<DecisionRecord> = self.decisions.list().into_iter().rev().collect();
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
            "leadership": self.leadership.snapshot(),
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
