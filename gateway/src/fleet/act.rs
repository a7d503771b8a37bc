//! The fleet's actions: start-recovery, the paced failback, ejection and the operator's
//! maintenance drain, each decided ([`Fleet::decide`]) before it is carried out.

use super::{Fleet, NodeEntry};
use crate::admission::Arrivals;
use crate::decisions::{Action, DecideError, Decided};
use crate::lifecycle::{self, Decision};
use shared::api::{DrainReport, DrainRequest, HoldReport, HoldRequest};
use shared::protocol::DrainReason;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Margin of a hold extension over the longest wait of a paced failback round (the drained
/// sessions' arrival, then a fresh poll): the next round extends it again before it runs out.
const HOLD_EXTENSION_MARGIN: Duration = Duration::from_secs(10);

/// Removes a failback from [`Fleet::running_failbacks`] when it ends, however it ends.
struct Running<'a> {
    fleet: &'a Fleet,
    node: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.fleet.running_failbacks.lock().expect("failbacks lock").remove(&self.node);
    }
}

impl Fleet {
    /// This replica just became the leader: finishes the failbacks its predecessors started.
    pub fn resume_open_failbacks(self: &Arc<Self>) {
        for f in self.decisions.open_failbacks() {
            let running = self.running_failbacks.lock().expect("failbacks lock").get(&f.node).cloned();
            if let Some(other) = running {
                tracing::info!("[GATEWAY] failback {} to {} not resumed: failback {} to it is running", f.id, f.node, other);
                continue;
            }
            let fleet = self.clone();
            tracing::info!("[GATEWAY] resuming failback {} to {} (started by {}) partitions={:?}", f.id, f.node, f.gateway, f.partitions);
            self.tasks.spawn(async move {
                let reason = format!("resuming failback {} that {} started and did not finish", f.id, f.gateway);
                fleet.failback(&f.node, f.partitions, reason, Some(f.id)).await;
            });
        }
    }

    pub(super) fn act(self: &Arc<Self>, node: &NodeEntry, decision: Decision) {
        let id = node.addr.id.clone();
        match decision {
            Decision::Transition { from, to, reason } => {
                tracing::info!("[GATEWAY] {} {} -> {} reason=\"{}\"", id, from, to, reason);
                self.record(&id, Action::Transition, reason, serde_json::json!({"from": from, "to": to}));
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
                self.tasks.spawn(async move { fleet.start_recovery(&id, reason).await });
            }
            Decision::Failback { partitions, reason } => {
                if let Err(why) = self.leadership.authority() {
                    // The leader fails back (its failback_started clears this); until then this
                    // replica keeps it due, for when it leads.
                    tracing::debug!("[GATEWAY] {} due for failback; not started here: {}", id, why);
                    let mut slot = node.slot.lock().expect("slot lock");
                    slot.view = lifecycle::failback_not_started(&slot.view);
                    return;
                }
                let fleet = self.clone();
                self.tasks.spawn(async move { fleet.failback(&id, partitions, reason, None).await });
            }
            Decision::NoFailback { reason } => {
                tracing::info!("[GATEWAY] {} {}", id, reason);
                self.record(&id, Action::FailbackNotNeeded, reason, serde_json::Value::Null);
            }
            Decision::Eject { reason, at_ms, hold } => {
                let fleet = self.clone();
                self.tasks.spawn(async move { fleet.eject(&id, reason, at_ms, hold).await });
            }
        }
    }

    /// Node `target` as the admin client addresses it.
    pub(super) fn admin_node<'a>(&'a self, target: &'a NodeEntry) -> crate::node_admin::Node<'a> {
        crate::node_admin::Node { id: &target.addr.id, admin_url: self.config.admin_url_of(&target.addr) }
    }

    pub(super) async fn start_recovery(&self, id: &str, reason: String) {
        let Some(node) = self.entry(id) else { return };
        let decided = match self.decide(id, Action::StartRecovery, &reason, serde_json::Value::Null, None).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("[GATEWAY] {} start-recovery not sent: {}; will retry on the next UP poll", id, e);
                let mut slot = node.slot.lock().expect("slot lock");
                slot.view = lifecycle::recovery_call_failed(&slot.view);
                return;
            }
        };
        let result = match self.still_acting(decided.token) {
            Ok(()) => self.admin.start_recovery(self.admin_node(node), &decided).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(body) => {
                tracing::info!("[GATEWAY] {} start-recovery sent reason=\"{}\" outcome={}", id, reason, body["outcome"]);
                self.report(id, Action::StartRecoverySent, "the node accepted it", body, &decided).await;
            }
            Err(e) => {
                tracing::warn!("[GATEWAY] {} start-recovery failed error=\"{}\"; will retry on the next UP poll", id, e);
                {
                    let mut slot = node.slot.lock().expect("slot lock");
                    slot.view = lifecycle::recovery_call_failed(&slot.view);
                }
                self.report(id, Action::StartRecoveryFailed, &e, serde_json::Value::Null, &decided).await;
            }
        }
    }

    /// Whether this replica still acts under fencing `token` (the one its decision was written
    /// with), checked before each node request: a decision write can take seconds, and a leader
    /// deposed meanwhile must not go on. `None` (standalone, an operator's request): yes.
    ///
    /// # Errors
    /// Why not, in words for the decision log.
    pub(super) fn still_acting(&self, token: Option<u64>) -> Result<(), String> {
        let Some(t) = token else { return Ok(()) };
        match self.leadership.authority()? {
            Some(now) if now == t => Ok(()),
            now => Err(format!("no longer acting under fencing token {t} (now {now:?})")),
        }
    }

    pub(super) async fn drain_node(&self, target: &NodeEntry, req: &DrainRequest, decided: Option<&Decided>) -> Result<DrainReport, shared::http::ApiError> {
        self.still_acting(decided.and_then(|d| d.token)).map_err(|e| shared::http::ApiError::conflict("not_leader", e))?;
        self.admin.drain(self.admin_node(target), req, decided).await
    }

    /// `POST /admin/hold` on `target`, waiting at most a poll interval and a margin.
    pub(super) async fn hold_on_node(&self, target: &NodeEntry, req: &HoldRequest, token: Option<u64>) -> Result<HoldReport, shared::http::ApiError> {
        self.still_acting(token).map_err(|e| shared::http::ApiError::conflict("not_leader", e))?;
        let timeout = self.config.poll_interval() + Duration::from_secs(2);
        self.admin.hold(self.admin_node(target), req, token, timeout).await
    }

    /// Drains the sessions of `partitions` from the nodes that stood in for `id`. `resume`: the id
    /// of a failback a previous leader started and did not finish, which this one finishes (its
    /// drains carry the same decision ids, so a node does each once).
    pub(super) async fn failback(&self, id: &str, partitions: Vec<i32>, reason: String, resume: Option<String>) {
        let Some(node) = self.entry(id) else { return };
        // One failback per node at a time: a second one's drains would overlap the first's.
        {
            let mut running = self.running_failbacks.lock().expect("failbacks lock");
            if let Some(other) = running.get(id) {
                tracing::info!("[GATEWAY] no second failback to {}: failback {} to it is running and goes on with its partitions", id, other);
                return;
            }
            running.insert(id.to_owned(), "(deciding)".to_owned());
        }
        let _running = Running { fleet: self, node: id.to_owned() };
        let stand_ins: Vec<&NodeEntry> = {
            let mut slot = node.slot.lock().expect("slot lock");
            let named = std::mem::take(&mut slot.stand_ins);
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
            None => self.decide(id, Action::FailbackStarted, &reason, inputs, None).await,
            Some(of) => self.decide(id, Action::FailbackResumed, &reason, inputs, Some(of)).await,
        };
        let fid = match (decided, resume) {
            (Ok(d), None) => d,
            (Ok(d), Some(of)) => Decided { id: of, token: d.token },
            (Err(e), _) => {
                tracing::warn!("[GATEWAY] failback to {} not started: {}", id, e);
                if let Some(n) = self.entry(id) {
                    let mut slot = n.slot.lock().expect("slot lock");
                    slot.view = lifecycle::failback_not_started(&slot.view);
                }
                return;
            }
        };
        tracing::info!("[GATEWAY] failback to {}: drain {:?} reason={} partitions={:?} decision={}", id, names, drain_reason, partitions, fid.id);
        self.running_failbacks.lock().expect("failbacks lock").insert(id.to_owned(), fid.id.clone());
        let started = Instant::now();
        let mut detail = BTreeMap::new();
        let mut failed = false;
        // Paced to the recovered node's room: each round drains the partitions whose sessions
        // (as the stand-ins count them, over every gateway replica: `failback_sessions`) fit in
        // its room (`failback_room`), waits until those sessions arrived there,
        // then for a fresh poll; the sessions of the others stay where they are (the stand-in
        // holds those partitions: its REVOKE_HOLD_MS, extended each round by `POST /admin/hold`
        // up to FAILBACK_PACE_LIMIT_MS) until room frees. A round that finds them gone (a hold
        // ran out and they moved by themselves) drains nothing for them.
        let mut left = partitions;
        let mut round = 0u32;
        // When the target was first seen DOWN in a row of checks, and whether a pause was written.
        let (mut down_since, mut paused): (Option<Instant>, bool) = (None, false);
        loop {
            if let Err(e) = self.leadership.authority() {
                tracing::warn!("[GATEWAY] failback {} to {} stops here: {} (the next leader finishes it)", fid.id, id, e);
                return;
            }
            // Every round first checks its target: a node that died or no longer owns these
            // partitions is not drained towards.
            let check = {
                let slot = node.slot.lock().expect("slot lock");
                let (ready, assigned) = slot.health.as_ref().map_or((false, Vec::new()), |(_, h)| (h.ready && !h.draining, h.assigned_partitions.clone()));
                lifecycle::failback_target(slot.view.status, ready, &assigned, &left)
            };
            match check {
                lifecycle::FailbackTarget::Serves => {
                    down_since = None;
                    if paused {
                        tracing::info!("[GATEWAY] failback {} to {} goes on: the node serves its partitions again", fid.id, id);
                        paused = false;
                    }
                }
                lifecycle::FailbackTarget::Not { why, down } => {
                    if !paused {
                        tracing::warn!("[GATEWAY] failback {} to {} paused: {}", fid.id, id, why);
                        self.report(id, Action::FailbackPaused, &why, serde_json::json!({"waiting": left}), &fid).await;
                        paused = true;
                    }
                    let gone_after = (3 * self.config.poll_interval()).max(Duration::from_secs(1));
                    let since = if down { *down_since.get_or_insert_with(Instant::now) } else { *down_since.insert(Instant::now()) };
                    if down && since.elapsed() >= gone_after {
                        tracing::warn!("[GATEWAY] failback {} to {} ends: the node has not answered for {}ms", fid.id, id, since.elapsed().as_millis());
                        failed = true;
                        detail.insert("stopped".into(), serde_json::json!({"why": why, "partitions": left}));
                        break;
                    }
                    if started.elapsed() > Duration::from_millis(self.config.failback_pace_limit_ms) {
                        failed = true;
                        detail.insert("stopped".into(), serde_json::json!({"why": format!("{why}, past FAILBACK_PACE_LIMIT_MS"), "partitions": left}));
                        break;
                    }
                    tokio::time::sleep(self.config.poll_interval()).await;
                    continue;
                }
            }
            let by_partition = self.failback_sessions(&stand_ins, &names);
            let (now, later) = crate::admission::pace_failback(&left, &by_partition, self.failback_room(id));
            let moving: usize = now.iter().filter_map(|p| by_partition.get(p)).sum();
            let arrived_before = self.arrivals(id);
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
                let step = Decided { id: crate::decisions::round_id(&fid.id, fid.token, round + 1), token: fid.token };
                let results = futures::future::join_all(stand_ins.iter().map(|n| self.drain_node(n, &req, Some(&step)))).await;
                for (n, r) in stand_ins.iter().zip(results) {
                    let key = if round == 0 { n.addr.id.clone() } else { format!("{} round {}", n.addr.id, round + 1) };
                    match r {
                        Ok(rep) => {
                            tracing::info!("[GATEWAY] failback drain of {} done partitions={:?} notified={} forceClosed={} tookMs={}", n.addr.id, now, rep.notified_sessions, rep.force_closed_sessions, rep.duration_ms);
                            if !rep.refused_partitions.is_empty() {
                                // Owned by the stand-in again, or no longer served there: nothing of them to hand over.
                                tracing::info!("[GATEWAY] {} does not hold partitions={:?}: none of their sessions moved from it", n.addr.id, rep.refused_partitions);
                            }
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
                self.report(id, Action::FailbackPaced, "the recovered node has no room for these partitions' sessions yet", serde_json::json!({"waiting": later, "moving": moving}), &fid).await;
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
        let action = if failed { Action::FailbackFailed } else { Action::FailbackCompleted };
        self.report(id, action, &format!("took {}ms", started.elapsed().as_millis()), serde_json::to_value(detail).unwrap_or_default(), &fid).await;
        tracing::info!("[GATEWAY] failback to {} {} tookMs={}", id, if failed { "finished with errors" } else { "completed" }, started.elapsed().as_millis());
    }

    /// The recovered node's room for a failback round: free seats by its last poll, counting the
    /// sessions this gateway proxies to it now if that is more (the poll may be older than their
    /// arrival), less the handshakes already waiting for it (they go first).
    pub(super) fn failback_room(&self, id: &str) -> Option<usize> {
        let max = {
            let slot = self.entry(id)?.slot.lock().expect("slot lock");
            slot.health.as_ref().map(|(_, h)| (h.max_sessions, h.session_seats))
        };
        let (max, seats) = max.filter(|(m, _)| *m > 0)?;
        let waiting = self.admission.waiting().get(id).copied().unwrap_or(0);
        Some(max.saturating_sub(seats.max(self.sessions.on(id))).saturating_sub(waiting))
    }

    /// The sessions a failback round moves per partition: what the `stand_ins` (`names`)
    /// reported in their last poll, or what this replica proxies to them if more
    /// ([`crate::admission::failback_sessions`]).
    fn failback_sessions(&self, stand_ins: &[&NodeEntry], names: &[&str]) -> BTreeMap<i32, usize> {
        let reported: Vec<Vec<shared::api::PartitionHealth>> =
            stand_ins.iter().map(|n| n.slot.lock().expect("slot lock").health.as_ref().map(|(_, h)| h.partitions.clone()).unwrap_or_default()).collect();
        crate::admission::failback_sessions(reported.iter().map(Vec::as_slice), &self.sessions.by_partition(names))
    }

    /// Where node `id` stands now: the sessions this replica proxies to it, and its own count by
    /// its last poll.
    fn arrivals(&self, id: &str) -> Arrivals {
        let reported = self.entry(id).and_then(|n| n.slot.lock().expect("slot lock").health.as_ref().map(|(_, h)| h.sessions));
        Arrivals { proxied: self.sessions.on(id), reported }
    }

    /// Waits until `moving` more sessions than `before` are on the recovered node `id` (the
    /// drained sessions arrived), by this replica's proxied count or by the node's own count in
    /// its polls (sessions that reconnected through other replicas count too), asking for a poll
    /// every half second; or until the grace period and a little more passed (some went away).
    pub(super) async fn await_arrivals(&self, id: &str, before: Arrivals, moving: usize) {
        let settle = Instant::now() + Duration::from_millis(self.config.failback_grace_ms) + Duration::from_secs(5);
        let mut asked = Instant::now();
        while !crate::admission::failback_arrived(before, self.arrivals(id), moving) && Instant::now() < settle {
            if self.leadership.authority().is_err() {
                return;
            }
            if asked.elapsed() >= Duration::from_millis(500) {
                self.request_refresh();
                asked = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Drains DEGRADED node `id` out of the broadcast group (reason NODE_DEGRADED): its
    /// partitions move to the nodes that serve, its sessions reconnect to them. Afterwards it is
    /// UP and recovers like any node (hysteresis counts the ejection as a flap). An ejection that
    /// fails (not written, or its drain failed) is rolled back ([`lifecycle::eject_failed`]): the
    /// node is not counted ejected, so it does not block every later ejection, and the rule may
    /// choose it again once the cooldown from `at_ms` has passed. `hold`: the node was ejected
    /// twice or more within `HOLD_DOWN_WINDOW_MS`, and its view holds it down from `at_ms`; once
    /// the drain is done that is written as `held_down`.
    pub(super) async fn eject(&self, id: &str, reason: String, at_ms: u64, hold: Option<lifecycle::HoldDown>) {
        let Some(node) = self.entry(id) else { return };
        let roll_back = || {
            let mut slot = node.slot.lock().expect("slot lock");
            slot.view = lifecycle::eject_failed(&slot.view, at_ms);
        };
        let req = DrainRequest { reason: DrainReason::NodeDegraded, grace_ms: self.config.failback_grace_ms, partitions: None };
        let inputs = serde_json::json!({"grace_ms": req.grace_ms, "held_down_for_ms": hold.map(|h| h.for_ms)});
        let decided = match self.decide(id, Action::Eject, &reason, inputs, None).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("[GATEWAY] {} not ejected: {}; tried again after EJECT_COOLDOWN_MS", id, e);
                roll_back();
                return;
            }
        };
        tracing::warn!("[GATEWAY] ejecting {}: drain it out of the broadcast group reason=\"{}\"", id, reason);
        match self.drain_node(node, &req, Some(&decided)).await {
            Ok(rep) => {
                tracing::info!("[GATEWAY] ejected {} notified={} forceClosed={} tookMs={}", id, rep.notified_sessions, rep.force_closed_sessions, rep.duration_ms);
                self.report(id, Action::EjectCompleted, "drained out of the broadcast group", serde_json::to_value(rep).unwrap_or_default(), &decided).await;
                if let Some(h) = hold {
                    self.held_down(id, at_ms, h, &decided).await;
                }
            }
            Err(e) => {
                tracing::warn!("[GATEWAY] ejecting {} failed error=\"{}\"; tried again after EJECT_COOLDOWN_MS", id, e.body.message);
                roll_back();
                self.report(id, Action::EjectFailed, &e.body.message, serde_json::to_value(&e.body).unwrap_or_default(), &decided).await;
            }
        }
        self.request_refresh();
    }

    /// Writes the hold-down that started with ejection `of` (at `at_ms`): its end in Unix ms
    /// (`until_ms`, so every replica holds the node until the same moment), its length and the
    /// ejections counted.
    async fn held_down(&self, id: &str, at_ms: u64, hold: lifecycle::HoldDown, of: &Decided) {
        let left = at_ms.saturating_add(hold.for_ms).saturating_sub(self.now_ms());
        let until_ms = shared::event::now_ms().saturating_add(left);
        let reason = format!(
            "ejected {} times within HOLD_DOWN_WINDOW_MS ({}ms): no start-recovery for {}ms (HOLD_DOWN_BASE_MS × {}, at most HOLD_DOWN_MAX_MS)",
            hold.ejections,
            self.config.hold_down_window_ms,
            hold.for_ms,
            hold.ejections - 1
        );
        tracing::warn!("[GATEWAY] {} held down: {}", id, reason);
        let detail = serde_json::json!({"until_ms": until_ms, "for_ms": hold.for_ms, "ejections": hold.ejections, "window_ms": self.config.hold_down_window_ms});
        self.report(id, Action::HeldDown, &reason, detail, of).await;
    }

    /// `POST /api/fleet/nodes/{id}/drain`: drains a whole node for maintenance.
    ///
    /// # Errors
    /// `None` when the node is unknown; `Err` with the node's answer when the drain failed.
    pub async fn maintenance_drain(&self, id: &str, grace_ms: u64) -> Option<Result<DrainReport, shared::http::ApiError>> {
        let node = self.entry(id)?;
        let req = DrainRequest { reason: DrainReason::Maintenance, grace_ms, partitions: None };
        tracing::info!("[GATEWAY] drain {} reason={} grace={}ms (operator request)", id, req.reason, grace_ms);
        // An operator's request, carried out by the leader under its fencing token (followers
        // forward it here, [`crate::to_leader`]); a standalone gateway sends none.
        let inputs = serde_json::json!({"reason": req.reason, "grace_ms": grace_ms});
        let decided = match self.decide(id, Action::Drain, "operator request", inputs, None).await {
            Ok(d) => d,
            Err(DecideError::NoAuthority(why)) => {
                return Some(Err(shared::http::ApiError::unavailable("not_leader", format!("this replica stopped leading before the drain was recorded ({why}); try again shortly"), 1)))
            }
            Err(e) => return Some(Err(shared::http::ApiError::unavailable("control_topic_unavailable", format!("the drain was not recorded, so not carried out: {e}"), 1))),
        };
        let r = self.drain_node(node, &req, Some(&decided)).await;
        match &r {
            Ok(rep) => self.report(id, Action::DrainCompleted, "operator request", serde_json::to_value(rep).unwrap_or_default(), &decided).await,
            Err(e) => self.report(id, Action::DrainFailed, &e.body.message, serde_json::to_value(&e.body).unwrap_or_default(), &decided).await,
        }
        self.request_refresh();
        Some(r)
    }
}
