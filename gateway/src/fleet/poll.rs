//! Polling the nodes and what each scheduled poll feeds: the lifecycle rules, the ejection rule,
//! the stand-ins of nodes that are away, the admission queues' wake-ups, and the sessions that
//! must move off a node seen DOWN. The handshake bounds and breakers are fed by the proxy.

use super::{Fleet, NodeEntry};
use crate::decisions::Action;
use crate::handshakes::Change;
use crate::lifecycle::{self, Decision, NodeView, Observed, Status};
use shared::api::NodeHealth;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Fleet {
    /// Closes the proxied sessions of nodes seen DOWN whose partitions another ready node now
    /// serves: a frozen or half-dead node does not close them itself, and its clients must move.
    pub(super) fn move_sessions_off_down_nodes(&self) {
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
        for (node, n) in self.sessions.move_off(&down, &owners) {
            tracing::info!("[GATEWAY] closing {} sessions of {} (DOWN): their partitions are served by other nodes now", n, node);
            self.record(&node, Action::SessionsMoved, "node DOWN and its partitions moved", serde_json::json!({"sessions": n}));
        }
    }

    pub(super) async fn fetch_health(&self, node: &NodeEntry) -> Result<NodeHealth, String> {
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
                if next.awaiting_failback && !slot.view.awaiting_failback {
                    // A new episode: nobody has stood in for the node in it yet.
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

    /// May a handshake go to node `id` now ([`crate::handshakes`]).
    ///
    /// # Errors
    /// The refusal for the client: 503 `node_busy` or `node_circuit_open`.
    pub fn admit_handshake(&self, id: &str) -> Result<(), crate::refusal::Refused> {
        match self.handshakes.admit(id, self.now_ms()) {
            Ok(change) => {
                if change == Some(Change::HalfOpen) {
                    tracing::info!("[GATEWAY] {} circuit half-open: letting {} trial handshakes through", id, self.config.breaker_trials);
                }
                Ok(())
            }
            Err(refused) => {
                if refused.code == "node_busy" {
                    self.metrics.refused("node_busy");
                }
                Err(refused)
            }
        }
    }

    /// A handshake to node `id` ended: `answered` when the node answered it (accepted or refused).
    pub fn handshake_done(&self, id: &str, answered: bool) {
        match self.handshakes.done(id, answered, self.now_ms()) {
            Some(Change::Opened { from }) => {
                tracing::warn!("[GATEWAY] {} circuit open: handshakes failed without an answer; none sent for {}ms", id, self.config.breaker_open_ms);
                self.record(id, Action::CircuitOpened, "handshakes failed without an answer", serde_json::json!({"from": from}));
            }
            Some(Change::Closed) => {
                tracing::info!("[GATEWAY] {} circuit closed: trial handshakes answered", id);
                self.record(id, Action::CircuitClosed, "trial handshakes answered", serde_json::Value::Null);
            }
            Some(Change::HalfOpen) | None => {}
        }
    }

    /// Applies the fleet-wide ejection rule ([`lifecycle::eject`]) after a scheduled poll.
    pub(super) fn consider_ejection(self: &Arc<Self>) {
        if self.leadership.authority().is_err() {
            return; // the leader ejects; its decision reaches this replica's views
        }
        let now = self.now_ms();
        let views: Vec<(String, NodeView, usize)> = self
            .nodes
            .iter()
            .map(|n| {
                let slot = n.slot.lock().expect("slot lock");
                (n.addr.id.clone(), slot.view.clone(), slot.health.as_ref().map_or(0, |(_, h)| h.sessions))
            })
            .collect();
        let candidates: Vec<lifecycle::Candidate<'_>> =
            views.iter().map(|(id, view, sessions)| lifecycle::Candidate { id, view, sessions: *sessions, room: self.room(id) }).collect();
        let rules = self.rules();
        let mut last = self.last_ejection_ms.lock().expect("ejection lock");
        let Some((id, reason)) = lifecycle::eject(&candidates, *last, now, &rules) else { return };
        *last = Some(now);
        drop(last);
        let Some(node) = self.entry(&id) else { return };
        let hold = {
            let mut slot = node.slot.lock().expect("slot lock");
            let (view, hold) = lifecycle::hold_down(&lifecycle::ejected(&slot.view, now, 0, &rules), now, &rules);
            slot.view = view;
            hold
        };
        self.act(node, Decision::Eject { reason, at_ms: now, hold });
    }

    /// Adds this scheduled poll's picture of every node to the history.
    pub(super) fn sample_history(&self) {
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

    /// The second source of freed places: a node whose `/health` shows free seats gets that many
    /// of its waiting handshakes woken (sessions that do not go through this gateway end too).
    pub(super) fn wake_waiters(&self) {
        for n in &self.nodes {
            if let Some(free) = self.room(&n.addr.id).filter(|f| *f > 0) {
                self.admission.polled(&n.addr.id, free);
            }
        }
    }

    /// While a node is away, remembers which nodes own its partitions (they stand in for it), and
    /// tells its view ([`lifecycle::owned_elsewhere`]: its ownership moved away).
    pub(super) fn note_stand_ins(&self) {
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
            if !slot.view.awaiting_failback || slot.view.lost.is_empty() {
                continue;
            }
            let others: Vec<(String, Vec<i32>)> = owners.iter().filter(|(id, _)| *id != n.addr.id).cloned().collect();
            let next = lifecycle::owned_elsewhere(&slot.view, &others);
            if next.ownership_moved.is_some() && slot.view.ownership_moved.is_none() {
                tracing::info!("[GATEWAY] {} ownership moved away: {}", n.addr.id, next.ownership_moved.as_deref().unwrap_or_default());
            }
            slot.view = next;
            for (id, assigned) in &others {
                if assigned.iter().any(|p| slot.view.lost.contains(p)) {
                    slot.stand_ins.insert(id.clone());
                }
            }
        }
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
