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
//!
//! Files: this one holds the state and the decision log's writing and reading; [`poll`] the polls
//! and what they feed (lifecycle rules, ejection, stand-ins, breakers, wake-ups); [`act`] the
//! actions (start-recovery, failback, ejection, maintenance drain); [`promote`] the publishers'
//! probe and the promotion of a standby publisher when none accepts writes; [`view`] the
//! `/api/fleet` body, the health verdict's inputs and the metrics' figures.

mod act;
mod poll;
mod promote;
mod view;

use crate::config::{Config, NodeAddr};
use crate::lifecycle::{self, NodeView, Rules};
use crate::publishers::Publishers;
use shared::api::NodeHealth;
use shared::partitioner::partition_for;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub use crate::decisions::{Action, DecideError, Decided, DecisionRecord, Read};

#[derive(Debug, Default)]
struct Slot {
    view: NodeView,
    /// Last health answer and when it came; `None` after a failed poll.
    health: Option<(Instant, NodeHealth)>,
    last_error: Option<String>,
    /// When the last poll of the node ended (answered or failed): how fresh the gateway's view is.
    polled_at: Option<Instant>,
    /// Nodes seen owning any of the partitions it lost (`view.lost`) while this node was away.
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
    /// The partition of the channel being routed.
    pub partition: i32,
}

/// The fleet state shared by the poller, the proxy and the API.
pub struct Fleet {
    pub config: Config,
    /// The namespaces (`fleet.toml`), resolved once: a handshake to an unknown one is refused here.
    pub namespaces: shared::namespaces::Namespaces,
    pub nodes: Vec<NodeEntry>,
    decisions: crate::decisions::Decisions,
    /// This replica's part in the election (standalone without Kafka).
    pub leadership: Arc<crate::leader::Leadership>,
    /// The control topic's writer, when the gateways elect their leader through Kafka.
    control: Option<crate::decisions::ControlWriter>,
    /// Numbers this replica's decisions (with its id and token, a decision id).
    decision_seq: std::sync::atomic::AtomicU64,
    /// Random per process start: stands in the ids of decisions without a token (an operator's
    /// request, a standalone gateway), whose sequence starts again at 1 after a restart.
    start_nonce: String,
    /// Failbacks this replica is carrying out now: target node → decision id (one per node; not
    /// resumed twice).
    running_failbacks: Mutex<BTreeMap<String, String>>,
    http: reqwest::Client,
    /// Calls to the nodes' admin routes.
    admin: crate::node_admin::NodeAdmin,
    /// Calls to the publishers' admin route (a standby's promotion).
    publisher_admin: crate::publisher_admin::PublisherAdmin,
    refresh: Notify,
    /// Counts completed polls (scheduled or refresh): the proxy waits for the next one to re-route.
    polled: tokio::sync::watch::Sender<u64>,
    partition_count: AtomicU32,
    /// The publishers requests are forwarded to.
    pub publishers: Publishers,
    /// The publish rate limit on the forwarded publish routes.
    pub limiter: Arc<shared::rate_limit::PublishLimiter>,
    /// Cancelled when the gateway shuts down: proxied sessions close with 1001, every background
    /// task ends.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The gateway's tasks (polls, actions, proxied sessions, the election): shutdown waits for
    /// them.
    pub tasks: tokio_util::task::TaskTracker,
    /// Proxied sessions: which node and partition each is on, and its close switch.
    pub sessions: crate::sessions::Sessions,
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
    /// Each node's handshake rate bound and circuit breaker on the proxy path.
    handshakes: crate::handshakes::Handshakes,
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
        let breaker = crate::breaker::Settings {
            failures: config.breaker_failures,
            open_ms: config.breaker_open_ms,
            trials: config.breaker_trials,
            trial_timeout_ms: config.upstream_connect_timeout_ms + 2_000,
        };
        let handshakes = crate::handshakes::Handshakes::new(config.handshake_rate_per_node, config.handshake_burst_per_node, breaker);
        let (leadership, control) = match &config.kafka_bootstrap {
            Some(bootstrap) => {
                let producer = config
                    .kafka_settings(bootstrap)
                    .producer(&config.id(), Duration::from_secs(10))
                    .create_with_context(shared::kafka::FleetContext::default())
                    .expect("build the control topic's producer");
                (
                    crate::leader::Leadership::elected(config.id(), Some(config.advertised_url()), config.leader_session_timeout_ms),
                    Some(crate::decisions::ControlWriter::new(producer, config.control_topic.clone())),
                )
            }
            None => (crate::leader::Leadership::standalone(config.id()), None),
        };
        let http = reqwest::Client::builder().pool_idle_timeout(shared::serve::CLIENT_POOL_IDLE).build().expect("build the HTTP client");
        let admin = crate::node_admin::NodeAdmin::new(http.clone(), config.admin_token());
        let publisher_admin = crate::publisher_admin::PublisherAdmin::new(http.clone(), config.admin_token());
        Arc::new(Self {
            namespaces: config.namespaces(),
            decisions: crate::decisions::Decisions::new(config.decision_log as usize),
            leadership,
            control,
            decision_seq: std::sync::atomic::AtomicU64::new(0),
            start_nonce: format!("{:08x}", rand::random::<u32>()),
            running_failbacks: Mutex::new(BTreeMap::new()),
            admin_token: config.admin_token(),
            client_tokens,
            config,
            limiter,
            nodes,
            admin,
            publisher_admin,
            http,
            refresh: Notify::new(),
            polled: tokio::sync::watch::Sender::new(0),
            partition_count: AtomicU32::new(partitions),
            publishers,
            shutdown,
            tasks: tokio_util::task::TaskTracker::new(),
            sessions: crate::sessions::Sessions::default(),
            history: Mutex::new(crate::history::History::default()),
            metrics: crate::metrics::Metrics::new(),
            admission: crate::admission::Admission::new(admission),
            started: Instant::now(),
            last_ejection_ms: Mutex::new(None),
            handshakes,
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
            hold_down_base_ms: c.hold_down_base_ms,
            hold_down_max_ms: c.hold_down_max_ms,
            hold_down_window_ms: c.hold_down_window_ms,
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
    fn record(&self, node: &str, action: Action, reason: impl Into<String>, detail: serde_json::Value) {
        self.metrics.decided(action.as_str(), node);
        self.decisions.push(DecisionRecord::local(node, action, reason.into(), detail));
    }

    /// The HTTP client of the fleet's own calls (polls, forwarded operator requests).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Decides `action` on `node`: with the authority to act, writes it to the control topic and
    /// waits until the broker has it (standalone: records it), before the caller carries it out.
    /// `of`: the decision this one continues (a resumed failback).
    ///
    /// # Errors
    /// Why this replica may not act (a follower; leadership not confirmed), or why the decision
    /// could not be written; nothing may be carried out then.
    pub async fn decide(&self, node: &str, action: Action, reason: &str, detail: serde_json::Value, of: Option<&str>) -> Result<Decided, DecideError> {
        let token = self.leadership.authority().map_err(DecideError::NoAuthority)?;
        self.write(node, action, reason, detail, of, token).await
    }

    /// Writes an outcome (or a step) of decision `of` under the token it was decided with: also
    /// when this replica lost its leadership meanwhile, since what was done is a fact the next
    /// leader needs.
    async fn report(&self, node: &str, action: Action, reason: &str, detail: serde_json::Value, of: &Decided) {
        if let Err(e) = self.write(node, action, reason, detail.clone(), Some(&of.id), of.token).await {
            tracing::warn!("[GATEWAY] could not write {} of {} to the control topic: {}", action, of.id, e);
            self.record(node, action, format!("{reason} (not written to the control topic: {e})"), detail);
        }
    }

    async fn write(&self, node: &str, action: Action, reason: &str, detail: serde_json::Value, of: Option<&str>, token: Option<u64>) -> Result<Decided, DecideError> {
        let seq = self.decision_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let id = crate::decisions::decision_id(&self.leadership.gateway, token, &self.start_nonce, seq);
        let Some(control) = &self.control else {
            self.metrics.decided(action.as_str(), node);
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
            action: action.as_str().to_owned(),
            reason: reason.to_owned(),
            detail,
            of: of.map(str::to_owned),
        };
        control.write(&record).await?;
        Ok(Decided { id, token })
    }

    /// A record read from the control topic at `offset` (every replica, the writer included).
    pub fn read_control(&self, offset: i64, record: Result<shared::control::ControlRecord, String>) {
        match record.map(|r| crate::decisions::read(offset, r)) {
            Err(e) => tracing::warn!(offset, "[GATEWAY] skipping control record: {e}"),
            Ok(Read::Claim { gateway, url }) => {
                tracing::info!("[GATEWAY] {} claimed leadership (fencing token {})", gateway, offset);
                self.leadership.read_claim(offset, &gateway, url.as_deref());
            }
            Ok(Read::Decision(mut rec)) => {
                self.metrics.decided(&rec.action, &rec.node);
                rec.superseded = crate::decisions::superseded(&rec, self.leadership.latest_claim());
                if rec.superseded {
                    tracing::warn!("[GATEWAY] ignoring {} of {} on {}: written under fencing token {:?}, older than the latest claim (a deposed leader's late write)",
                        rec.action, rec.gateway.as_deref().unwrap_or("?"), rec.node, rec.token);
                } else if rec.gateway.as_deref() != Some(self.leadership.gateway.as_str()) {
                    if let Some(action) = Action::parse(&rec.action) {
                        self.apply_decision(&rec, action);
                    }
                }
                self.decisions.push(*rec);
            }
        }
    }

    /// Another replica's decision `rec`: this replica's view takes it in, so it does not decide
    /// the same again when it leads.
    fn apply_decision(&self, rec: &DecisionRecord, action: Action) {
        let Some(entry) = self.entry(&rec.node) else { return };
        let now = self.now_ms();
        // How long ago it was decided, by the wall clocks (the views' clock is this process's).
        let wall_now = shared::event::now_ms();
        let age = wall_now.saturating_sub(rec.at_ms);
        let mut slot = entry.slot.lock().expect("slot lock");
        match action {
            Action::StartRecoverySent => slot.view = lifecycle::recovery_sent(&slot.view),
            Action::FailbackStarted => {
                // The leader's failback ends the episode here too.
                slot.view.awaiting_failback = false;
                slot.view.lost.clear();
            }
            Action::Eject => {
                slot.view = lifecycle::ejected(&slot.view, now, age, &self.rules());
                drop(slot);
                *self.last_ejection_ms.lock().expect("ejection lock") = Some(now);
            }
            Action::EjectFailed if slot.view.ejected => {
                // Undone as the leader undid it: the flap this replica counted when it read the
                // ejection is its last.
                let at = slot.view.flaps.last().copied().unwrap_or(now);
                slot.view = lifecycle::eject_failed(&slot.view, at);
            }
            Action::HeldDown => {
                // Held until the same moment as on the leader (a hold long over holds nothing).
                let until = rec.detail["until_ms"].as_u64().unwrap_or(0);
                if until > wall_now {
                    slot.view = lifecycle::hold_until(&slot.view, now + (until - wall_now));
                }
            }
            _ => {}
        }
    }

    /// Registers a proxied session on `node` for a channel of `partition`.
    pub fn register_session(&self, node: &str, partition: i32) -> crate::sessions::SessionTicket<'_> {
        self.sessions.register(&self.admission, node, partition)
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

    /// The history's samples, oldest first (`GET /api/fleet/history`).
    pub fn history(&self) -> Vec<crate::history::Sample> {
        self.history.lock().expect("history lock").samples()
    }

    /// Free seats of node `id` by its last `/health` (`max_sessions − session_seats`): the
    /// capacity hint. `None` when unknown (no answer, or a node that reports no capacity).
    pub fn room(&self, id: &str) -> Option<usize> {
        let slot = self.entry(id)?.slot.lock().expect("slot lock");
        slot.health.as_ref().and_then(|(_, h)| (h.max_sessions > 0).then(|| h.max_sessions.saturating_sub(h.session_seats)))
    }

    /// Nodes that may serve `channel` now: last answer says ready, not draining, and owning the
    /// channel's partition. Returns the partition too.
    pub fn route(&self, channel: &str) -> (i32, Vec<Target>) {
        let p = partition_for(channel.as_bytes(), self.partition_count()) as i32;
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
}
