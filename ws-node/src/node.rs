//! The node: lifecycle, catch-up, broadcast consumer and drains, tied together.
//!
//! Every lifecycle input goes through [`crate::lifecycle::transition`]; this module performs the
//! effects (start the replay, start or stop the broadcast consumer, hand sessions over) and logs
//! each transition.

use crate::broadcast::{Broadcast, Revoked};
use crate::catchup;
use crate::config::Config;
use crate::drain::{self, HandOverOutcome};
use crate::hub::Hub;
use crate::lifecycle::{transition, Effect, Input, Phase};
use shared::api::{CatchupReport, CatchupStatus, DrainReport, HoldReport, NodeHealth, NodeState, PartitionHealth, PartitionRole, PerChannel, Progress, RecoveryAck};
use shared::protocol::{close, DrainReason};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Why a drain was refused.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("{0}")]
    Conflict(&'static str),
}

/// One ws-node.
pub struct Node {
    pub config: Config,
    pub hub: Arc<Hub>,
    phase: Mutex<Phase>,
    catchup: Arc<Mutex<CatchupReport>>,
    broadcast: tokio::sync::Mutex<Option<Broadcast>>,
    partition_count: AtomicU32,
    handover_tx: mpsc::UnboundedSender<Revoked>,
    /// Session tasks, awaited on the way out.
    pub sessions: TaskTracker,
    /// Session capacity (`MAX_SESSIONS`): a handshake takes a seat before it is answered.
    pub seats: crate::admission::Seats,
    pub shutdown: CancellationToken,
    /// The verifier of clients' tokens (`None`: no token needed), from `CLIENT_TOKEN_*`.
    pub client_tokens: Option<shared::client_token::ClientTokens>,
    /// Sees the process's pauses (SIGSTOP, starvation) by its own clock ([`crate::progress`]).
    watch: Arc<crate::progress::Watch>,
    /// The admin routes' fence and decision answers ([`shared::fence`]).
    pub guard: Arc<shared::fence::Guard>,
}

impl Node {
    /// A node in phase `Up`, with its hand-over task running until `shutdown`.
    pub fn new(config: Config, shutdown: CancellationToken) -> Arc<Self> {
        let hub = Arc::new(Hub::new(Arc::new(config.namespaces()), config.window()));
        let (handover_tx, mut handover_rx) = mpsc::unbounded_channel::<Revoked>();
        let seats = crate::admission::Seats::new(usize::try_from(config.max_sessions).unwrap_or(usize::MAX));
        let client_tokens = config.client_tokens.load().expect("client token settings are checked by Config::problems at startup");
        let reads_control = !config.control_topic.is_empty();
        let node = Arc::new(Self {
            client_tokens,
            config,
            hub,
            phase: Mutex::new(Phase::Up),
            catchup: Arc::new(Mutex::new(catchup::idle_report())),
            broadcast: tokio::sync::Mutex::new(None),
            partition_count: AtomicU32::new(0),
            handover_tx,
            sessions: TaskTracker::new(),
            seats,
            shutdown,
            watch: crate::progress::Watch::start(),
            guard: Arc::new(shared::fence::Guard::new(reads_control, "NODE")),
        });
        tokio::spawn(Self::watch_history(Arc::downgrade(&node), Duration::from_millis(node.config.history_check_ms), node.shutdown.clone()));
        tokio::spawn(Self::heal_incomplete(Arc::downgrade(&node), Duration::from_millis(node.config.heal_every_ms), node.shutdown.clone()));
        // Sessions of revoked partitions are handed over here, each revocation on its own; held
        // partitions when their hold runs out (unless a drain took them or they came back).
        let weak = Arc::downgrade(&node);
        tokio::spawn(async move {
            while let Some(revoked) = handover_rx.recv().await {
                let Some(node) = weak.upgrade() else { break };
                let (grace, after, hold, spread_ms) =
                    (node.config.revoke_grace(), node.config.reconnect_after_ms, node.config.revoke_hold(), node.config.reconnect_spread_ms);
                let hub = node.hub.clone();
                drop(node);
                tokio::spawn(async move {
                    let (partitions, sessions) = match revoked {
                        Revoked::HandOver(partitions, sessions) => (partitions, sessions),
                        Revoked::Held(number, partitions) => {
                            // REVOKE_HOLD_MS, or longer while the gateway extends it (`POST
                            // /admin/hold`: a failback waiting for room on the new owner).
                            let held_for = tokio::time::Instant::now();
                            let mut until = held_for + hold;
                            loop {
                                tokio::time::sleep_until(until).await;
                                match hub.hold_deadline(number) {
                                    Some(later) if later > until.into_std() => until = later.into(),
                                    _ => break,
                                }
                            }
                            let sessions = hub.end_hold(number, &partitions);
                            hub.counters.hold_ended(&partitions);
                            if sessions.is_empty() {
                                tracing::info!("[DRAIN] hold of partitions={:?} ended: nothing left to hand over (drained, assigned back, or held again)", partitions);
                                return;
                            }
                            tracing::info!("[DRAIN] hold of partitions={:?} ran out after {}ms with {} sessions; handing them over", partitions, held_for.elapsed().as_millis(), sessions.len());
                            (partitions, sessions)
                        }
                    };
                    tracing::info!("[DRAIN] started reason={} grace={}ms partitions={:?}", DrainReason::PartitionsRevoked, grace.as_millis(), partitions);
                    let out = drain::hand_over(sessions, DrainReason::PartitionsRevoked, grace, (after, drain::spread_for(grace, spread_ms)), close::SERVICE_RESTART).await;
                    tracing::info!("[DRAIN] completed reason={} notified={} forceClosed={} tookMs={}", DrainReason::PartitionsRevoked, out.notified, out.force_closed, out.took.as_millis());
                });
            }
        });
        node
    }

    /// Feeds `input` to the lifecycle and returns the effect to perform.
    fn step(&self, input: Input) -> Effect {
        let mut phase = self.phase.lock().expect("phase lock");
        let from = *phase;
        let (to, effect) = transition(from, input);
        *phase = to;
        drop(phase);
        match effect {
            Effect::Reject(why) => tracing::info!(node = %self.config.node_id, ?input, phase = ?from, why, "lifecycle input refused"),
            _ if from != to => tracing::info!(
                "[NODE] {} {:?} -> {:?} ({:?}) health={}",
                self.config.node_id,
                from,
                to,
                input,
                to.reported()
            ),
            _ => {}
        }
        effect
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.phase.lock().expect("phase lock")
    }

    /// Partition count of the topic (0 until the first catch-up read the metadata).
    pub fn partition_count(&self) -> u32 {
        self.partition_count.load(Ordering::Acquire)
    }

    /// The reconnect notices' `retry_after_ms` and spread for a hand-over of `grace`.
    fn notice_timing(&self, grace: Duration) -> (u64, Duration) {
        (self.config.reconnect_after_ms, drain::spread_for(grace, self.config.reconnect_spread_ms))
    }

    /// The progress assessment now ([`crate::progress::assess`]).
    fn assessment(&self) -> crate::progress::Assessment {
        let now = std::time::Instant::now();
        let (since_poll, since_rebalance, owned) = self.hub.progress_facts(now);
        let facts = crate::progress::Facts {
            since_poll,
            since_tick: self.watch.since_tick(now),
            last_pause: self.watch.last_pause(now),
            since_rebalance,
            owned,
        };
        crate::progress::assess(&facts, &self.config.progress())
    }

    /// Whether new sessions are accepted: caught up, broadcasting, not draining, not DEGRADED.
    pub fn is_ready(&self) -> bool {
        self.phase() == Phase::Ready && self.assessment().degraded.is_none()
    }

    /// [`Node::is_ready`], with why not in an operator's words (`/readyz`'s 503 message).
    ///
    /// # Errors
    /// Why the node does not serve now: its phase, or its DEGRADED reason.
    pub fn readiness(&self) -> Result<(), String> {
        let id = &self.config.node_id;
        match self.phase() {
            Phase::Up => Err(format!("node {id} is UP: waiting for start-recovery")),
            Phase::CatchingUp => Err(format!("node {id} is UP: catching up with the log")),
            Phase::Draining => Err(format!("node {id} is DRAINING")),
            Phase::Ready => match self.assessment().degraded {
                None => Ok(()),
                Some(why) => Err(format!("node {id} is DEGRADED: {why}")),
            },
        }
    }

    /// The `/health` body.
    pub fn health(&self) -> NodeHealth {
        let phase = self.phase();
        self.hub.sample_progress();
        let assessment = self.assessment();
        let ready = phase == Phase::Ready && assessment.degraded.is_none();
        let standby = if self.config.standby && phase == Phase::Ready { crate::standby::partitions(&self.hub) } else { Vec::new() };
        let (incomplete_channels, incomplete_channel_count) = self.hub.incomplete_channels(100);
        NodeHealth {
            node_id: self.config.node_id.clone(),
            state: if phase == Phase::Ready && !ready { NodeState::Degraded } else { phase.reported() },
            up: true,
            ready,
            draining: phase == Phase::Draining,
            assigned_partitions: self.hub.owned(),
            partition_count: self.partition_count(),
            sessions: self.hub.open_sessions(),
            max_sessions: self.seats.max(),
            session_seats: self.seats.taken(),
            catchup: self.catchup.lock().expect("catch-up report lock").clone(),
            standby_partitions: standby.clone(),
            partitions: partition_health(
                &self.hub.positions(),
                &self.hub.sampler.ends(),
                &self.hub.sampler.standing_since(),
                &self.hub.sessions_by_partition(),
                &self.hub.owned(),
                &self.hub.held(),
                &standby,
            ),
            log_start_recoveries: self.hub.log_start_recoveries(),
            log_moved_back: self.hub.log_moved_back(),
            history_changes: self.hub.history_changes.load(Ordering::Relaxed),
            per_channel: PerChannel {
                channels: self.hub.channel_count(),
                incomplete_channels,
                incomplete_channel_count,
                healed_channels: self.hub.healed_channels(),
            },
            recent_window_bytes: self.hub.recent_bytes(),
            progress: Progress {
                since_poll_ms: self.hub.sampler.since_broadcast_poll().map(|d| d.as_millis() as u64),
                assignment_at_ms: self.hub.sampler.last_rebalance().map(|(_, ms)| ms),
                paused: self.watch.reported_pause(),
                ownership_confirmed: assessment.ownership_confirmed,
                stalled_partitions: assessment.stalled_partitions,
                // Only a serving node is judged: one that is UP or draining is not serving anyway.
                degraded: assessment.degraded.filter(|_| phase == Phase::Ready),
            },
            namespaces_fingerprint: self.hub.namespaces().fingerprint().to_owned(),
            namespaces_mismatch: self.hub.formats.other_seen(),
        }
    }

    /// `POST /admin/start-recovery`: starts catch-up once; repeated calls report progress.
    ///
    /// # Errors
    /// [`DrainError::Conflict`] while a full drain runs.
    pub fn start_recovery(self: &Arc<Self>) -> Result<RecoveryAck, DrainError> {
        let outcome = match self.step(Input::StartRecovery) {
            Effect::StartCatchup => {
                tracing::info!(node = %self.config.node_id, "start-recovery received: catching up before serving");
                let mut report = self.catchup.lock().expect("catch-up report lock");
                *report = CatchupReport { status: CatchupStatus::Running, completed: report.completed, ..catchup::idle_report() };
                drop(report);
                let node = self.clone();
                tokio::spawn(async move { node.run_catchup().await });
                "started"
            }
            Effect::Reject(why) => return Err(DrainError::Conflict(why)),
            _ if self.phase() == Phase::Ready => "already_ready",
            _ => "already_running",
        };
        Ok(RecoveryAck { outcome: outcome.into(), catchup: self.catchup.lock().expect("catch-up report lock").clone() })
    }

    /// Reads the events topic's ID, the topic half of every channel's epoch, before the node
    /// serves (on every recovery, so a topic recreated while the node ran is noticed). A changed
    /// ID means the hub's state is of another history: it is forgotten (catch-up rebuilds it).
    async fn learn_topic_id(&self) -> Result<(), String> {
        let id = self.read_topic_id().await?;
        if id == shared::epoch::ZERO_TOPIC_ID {
            tracing::warn!(topic = %self.config.topic, "the broker reports no topic ID (Kafka before 2.8): clients' epochs cannot tell a recreated topic");
        }
        match self.hub.set_topic_id(&id) {
            Some(old) if old != shared::epoch::ZERO_TOPIC_ID => {
                tracing::warn!(topic = %self.config.topic, old = %old, new = %id,
                    "the events topic was deleted and created again: forgetting the old history's state; catch-up rebuilds the new one");
                for s in self.hub.forget_all() {
                    s.close(close::SERVICE_RESTART, "the events topic was recreated: reconnect");
                }
            }
            _ => tracing::info!(topic = %self.config.topic, topic_id = %id, "events topic id (channel epochs are <topic id>-<resets>)"),
        }
        Ok(())
    }

    /// The events topic's ID as the broker describes it now.
    async fn read_topic_id(&self) -> Result<String, String> {
        let (kafka, topic, client_id) = (self.config.kafka(), self.config.topic.clone(), format!("{}-topic-id", self.config.node_id));
        let id = tokio::task::spawn_blocking(move || {
            let consumer: rdkafka::consumer::BaseConsumer<shared::kafka::FleetContext> = kafka
                .reader(&client_id)
                .create_with_context(shared::kafka::FleetContext::default())
                .map_err(|source| shared::topic_id::TopicIdError::Metadata { topic: topic.clone(), source })?;
            let described = shared::topic_id::describe(rdkafka::consumer::Consumer::client(&consumer), &topic, Duration::from_secs(10));
            if described.is_err() {
                shared::kafka::serve_queued_events(&consumer); // the cause behind the failure, for /health
            }
            described
        })
        .await
        .map_err(|join| format!("topic id lookup panicked: {join}"))?
        .map_err(|e| e.to_string())?;
        Ok(id)
    }

    /// Checks the events topic's ID every `HISTORY_CHECK_MS` and whenever a reader saw an offset
    /// out of range ([`Hub::suspect_history`]); a serving node whose topic ID changed rebuilds
    /// ([`Node::rebuild_history`]).
    async fn watch_history(weak: std::sync::Weak<Self>, every: Duration, shutdown: CancellationToken) {
        let mut failed_before = false;
        loop {
            let Some(hub) = weak.upgrade().map(|n| n.hub.clone()) else { return };
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = hub.history_suspect.notified() => {}
                _ = shutdown.cancelled() => return,
            }
            drop(hub);
            let Some(node) = weak.upgrade() else { return };
            if node.phase() != Phase::Ready {
                continue;
            }
            match node.read_topic_id().await {
                Ok(id) => {
                    failed_before = false;
                    let have = node.hub.topic_id();
                    if id != have && have != shared::epoch::ZERO_TOPIC_ID && id != shared::epoch::ZERO_TOPIC_ID {
                        node.rebuild_history(&have, &id).await;
                    }
                }
                // Deleted and not created again yet, or the broker unreachable: look again later.
                Err(e) if !failed_before => {
                    failed_before = true;
                    tracing::warn!(error = %e, "cannot read the events topic's ID to check its history; checking again later");
                }
                Err(_) => {}
            }
        }
    }

    /// Every `HEAL_EVERY_MS`, while the hub has incomplete channels, reads their newest snapshots
    /// and heals the ones a snapshot covers ([`crate::heal`]).
    async fn heal_incomplete(weak: std::sync::Weak<Self>, every: Duration, shutdown: CancellationToken) {
        let mut failed_before = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return,
            }
            let Some(node) = weak.upgrade() else { return };
            if node.hub.incomplete().is_empty() {
                continue;
            }
            let n = node.clone();
            match tokio::task::spawn_blocking(move || crate::heal::heal_once(&n.config, &n.hub)).await {
                Ok(Ok(_)) => failed_before = false,
                Ok(Err(e)) if !failed_before => {
                    failed_before = true;
                    tracing::warn!(error = %e, "[HEAL] cannot heal the incomplete channels now; trying again every HEAL_EVERY_MS");
                }
                Ok(Err(_)) => {}
                Err(e) => tracing::error!(error = %e, "[HEAL] the heal round panicked"),
            }
        }
    }

    /// The events topic was deleted and created again under a serving node: it stops serving the
    /// old history's state (a full drain: every session gets the reconnect notice, the broadcast
    /// group is left), then forgets it and catches up on the new topic before it serves again.
    /// Clients come back with their old epoch and get the new history's state.
    pub async fn rebuild_history(self: &Arc<Self>, old: &str, new: &str) {
        if self.step(Input::HistoryChanged) != Effect::Rebuild {
            return;
        }
        tracing::error!(topic = %self.config.topic, old = %old, new = %new,
            "[NODE] the events topic was deleted and created again while this node served: no longer serving the old history; rebuilding from the new topic");
        let grace = self.config.revoke_grace();
        let out = self.leave_and_hand_over(DrainReason::NodeDegraded, grace, close::SERVICE_RESTART).await;
        tracing::info!("[DRAIN] completed reason={} notified={} forceClosed={} tookMs={} (history changed)", DrainReason::NodeDegraded, out.notified, out.force_closed, out.took.as_millis());
        self.hub.history_changes.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.start_recovery() {
            tracing::error!(error = %e, "[NODE] cannot start the catch-up after the history changed; waiting for start-recovery");
        }
    }

    async fn run_catchup(self: Arc<Self>) {
        if let Err(e) = self.learn_topic_id().await {
            tracing::error!(error = %e, "[CATCHUP] cannot read the events topic's ID (the epoch clients resume with); the node stays UP (not ready) until the next start-recovery");
            catchup::mark_failed(&self.catchup, &e.to_string());
            self.step(Input::CatchupFailed);
            return;
        }
        let node = self.clone();
        let cancel = self.shutdown.clone();
        let result = tokio::task::spawn_blocking(move || {
            catchup::run(&node.config, &node.hub, &node.catchup, &|| cancel.is_cancelled())
        })
        .await;
        match result {
            Ok(Ok((partitions, _))) => {
                self.partition_count.store(partitions, Ordering::Release);
                if self.step(Input::CatchupCompleted) == Effect::StartBroadcast {
                    match Broadcast::start(&self.config, self.hub.clone(), self.handover_tx.clone()) {
                        Ok(b) => *self.broadcast.lock().await = Some(b),
                        Err(e) => {
                            tracing::error!(error = %e, "[BROADCAST] cannot start the broadcast consumer; node stays not ready");
                            catchup::mark_failed(&self.catchup, &format!("broadcast consumer: {e}"));
                            self.step(Input::BroadcastFailed);
                        }
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "[CATCHUP] failed; the node stays UP (not ready) until the next start-recovery");
                catchup::mark_failed(&self.catchup, &e.to_string());
                self.step(Input::CatchupFailed);
            }
            Err(join) => {
                tracing::error!(error = %join, "[CATCHUP] task panicked");
                catchup::mark_failed(&self.catchup, &format!("catch-up task panicked: {join}"));
                self.step(Input::CatchupFailed);
            }
        }
    }

    /// `POST /admin/hold`: keeps holding those of `partitions` held now for `for_ms` more (see
    /// [`Hub::extend_holds`]); their sessions stay here, served from the log.
    pub fn extend_hold(&self, partitions: &[i32], for_ms: u64) -> HoldReport {
        let until = std::time::Instant::now() + Duration::from_millis(for_ms);
        let held = self.hub.extend_holds(partitions, until);
        if !held.is_empty() {
            tracing::info!("[DRAIN] hold of partitions={:?} extended by {}ms (a failback waits for room on their new owner)", held, for_ms);
        }
        HoldReport { held, until_ms: shared::event::now_ms() + for_ms }
    }

    /// `POST /admin/drain`: hands the sessions in scope over and answers when done.
    ///
    /// Without `partitions` it drains the whole node: DRAINING, new handshakes 503, the broadcast
    /// group is left (its partitions move to the other nodes at once), every session gets the
    /// reconnect notice, the rest are closed with `final_code` after the grace period, and the
    /// node ends UP (not ready), ready for start-recovery. With `partitions` only the sessions of
    /// those of them this node holds are handed over (the others are named in the report's
    /// `refused_partitions`); the node's phase does not change.
    ///
    /// # Errors
    /// [`DrainError::Conflict`] when a full drain is not possible in the current phase.
    pub async fn drain(
        self: &Arc<Self>,
        reason: DrainReason,
        grace: Duration,
        partitions: Option<Vec<i32>>,
        final_code: u16,
    ) -> Result<DrainReport, DrainError> {
        let scope = partitions.as_ref().map(|ps| ps.iter().copied().collect::<BTreeSet<i32>>());
        let mut refused = Vec::new();
        let outcome: HandOverOutcome = match &scope {
            Some(scope) => {
                // Only the partitions this node holds (moved to another node, their sessions
                // still served here) are handed over: an owned one's sessions would reconnect to
                // this node again.
                let (held, sessions, not_held) = self.hub.pause_held(scope);
                refused = not_held;
                if !refused.is_empty() {
                    tracing::warn!("[DRAIN] partitions={:?} are not held here (owned, or not served): their sessions stay", refused);
                }
                tracing::info!("[DRAIN] started reason={} grace={}ms partitions={:?}", reason, grace.as_millis(), held);
                // Each session keeps its events until its own notice (see drain::hand_over_paced).
                let out = drain::hand_over_paced(&self.hub, sessions, reason, grace, self.notice_timing(grace).1, final_code).await;
                self.hub.resume(&held);
                self.hub.counters.hold_ended(&held.iter().copied().collect::<Vec<_>>());
                out
            }
            None => {
                if let Effect::Reject(why) = self.step(Input::DrainRequested) {
                    return Err(DrainError::Conflict(why));
                }
                self.leave_and_hand_over(reason, grace, final_code).await
            }
        };
        tracing::info!(
            "[DRAIN] completed reason={} notified={} forceClosed={} tookMs={}",
            reason,
            outcome.notified,
            outcome.force_closed,
            outcome.took.as_millis()
        );
        Ok(DrainReport {
            reason,
            partitions,
            notified_sessions: outcome.notified,
            force_closed_sessions: outcome.force_closed,
            duration_ms: outcome.took.as_millis() as u64,
            refused_partitions: refused,
        })
    }

    /// The body of a full drain already entered (phase `Draining`): hands every session over
    /// while leaving the broadcast group, and ends `Up`.
    async fn leave_and_hand_over(self: &Arc<Self>, reason: DrainReason, grace: Duration, final_code: u16) -> HandOverOutcome {
        tracing::info!("[DRAIN] started reason={} grace={}ms scope=node", reason, grace.as_millis());
        let sessions = self.hub.take_all();
        let broadcast = self.broadcast.lock().await.take();
        let leave = async {
            if let Some(b) = broadcast {
                b.stop().await;
            }
        };
        let (out, ()) = tokio::join!(drain::hand_over(sessions, reason, grace, self.notice_timing(grace), final_code), leave);
        // The node must catch up again before it serves; the count of catch-ups completed
        // over the process's life is kept.
        let mut report = self.catchup.lock().expect("catch-up report lock");
        *report = CatchupReport { completed: report.completed, ..catchup::idle_report() };
        drop(report);
        self.step(Input::DrainFinished);
        out
    }

    /// On SIGTERM: a full drain with reason SHUTDOWN (sessions closed with 1001 Going Away after
    /// the shutdown grace), then waits for session tasks to end.
    pub async fn shut_down(self: &Arc<Self>) {
        let grace = Duration::from_millis(self.config.shutdown_grace_ms);
        match self.drain(DrainReason::Shutdown, grace, None, close::GOING_AWAY).await {
            Ok(_) => {}
            Err(_) => {
                // Catching up or already draining: close whatever is open and leave the group.
                for s in self.hub.take_all() {
                    s.close(close::GOING_AWAY, "server shutting down");
                }
                if let Some(b) = self.broadcast.lock().await.take() {
                    b.stop().await;
                }
            }
        }
        self.sessions.close();
        if tokio::time::timeout(Duration::from_secs(5), self.sessions.wait()).await.is_err() {
            tracing::warn!(open = self.hub.open_sessions(), "sessions still open 5 s after shutdown; exiting anyway");
        }
    }
}

/// Each partition the node has a position or sessions for: its role, its lag behind the end read
/// last and its sessions (`sessions`, per partition). A partition with sessions but no position
/// (no record of it applied here yet) shows position 0 and no lag: how far behind it is is not
/// known (its log need not start at 0), and a made-up lag would feed the lag metrics. Pure.
pub fn partition_health(
    positions: &shared::replay::Offsets,
    ends: &shared::replay::Offsets,
    standing_since: &std::collections::HashMap<i32, std::time::Instant>,
    sessions: &std::collections::BTreeMap<i32, usize>,
    owned: &[i32],
    held: &[i32],
    standby: &[i32],
) -> Vec<PartitionHealth> {
    let known: BTreeSet<i32> = positions.keys().chain(sessions.keys()).copied().collect();
    known
        .into_iter()
        .map(|p| {
            let role = if owned.contains(&p) {
                PartitionRole::Owned
            } else if held.contains(&p) {
                PartitionRole::Held
            } else if standby.contains(&p) {
                PartitionRole::Standby
            } else {
                PartitionRole::NotRead
            };
            let position = positions.get(&p).copied();
            let end = ends.get(&p).copied();
            let lag = end.zip(position).map(|(e, at)| (e - at).max(0));
            let since_moved_ms = standing_since.get(&p).map_or(0, |t| t.elapsed().as_millis() as u64);
            let sessions = sessions.get(&p).copied().unwrap_or(0);
            PartitionHealth { partition: p, role, position: position.unwrap_or(0), end, lag, since_moved_ms, sessions }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_health_names_roles_and_lags() {
        let positions = shared::replay::Offsets::from([(0, 10), (1, 4), (2, 7), (3, 9)]);
        let ends = shared::replay::Offsets::from([(0, 12), (1, 4), (2, 5), (4, 6)]);
        // Partition 4 is held with sessions on channels without a record applied here yet.
        let sessions = std::collections::BTreeMap::from([(0, 3), (1, 5), (4, 2)]);
        let got: Vec<(i32, PartitionRole, i64, Option<i64>, usize)> = partition_health(&positions, &ends, &Default::default(), &sessions, &[0], &[1, 4], &[2])
            .into_iter()
            .map(|h| (h.partition, h.role, h.position, h.lag, h.sessions))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, PartitionRole::Owned, 10, Some(2), 3),
                (1, PartitionRole::Held, 4, Some(0), 5),
                // An end read before the position moved on is no lag.
                (2, PartitionRole::Standby, 7, Some(0), 0),
                (3, PartitionRole::NotRead, 9, None, 0),
                // No position (nothing applied here yet): listed for its sessions, lag unknown.
                (4, PartitionRole::Held, 0, None, 2),
            ]
        );
    }
}
