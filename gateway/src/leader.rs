//! Leadership among gateway replicas, chosen by Kafka.
//!
//! Every replica joins one consumer group on the one-partition control topic
//! ([`shared::control`]); the member the group assigns that partition is the leader, as Kafka
//! Connect elects its leader through the group protocol: no consensus code of our own. A member
//! newly assigned the partition writes a claim record; the claim's offset is its fencing token.
//! It acts only once its reader has read the topic up to its claim (so it knows every decision
//! of its predecessors), and only while the group coordinator keeps confirming it: the leader
//! commits an offset every heartbeat, which the coordinator refuses from a member that is no
//! longer in the current generation; with no confirmation for two thirds of the session timeout
//! it stops acting by itself, before the group can have chosen another leader.
//!
//! The rules are pure ([`step`], [`authority`]); [`run_until`] is the I/O around them.

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::Serialize;
use shared::control::ControlRecord;
use shared::kafka::{FleetContext, KafkaSettings};
use std::sync::atomic::{AtomicI64, Ordering};
use tokio_util::sync::CancellationToken;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// This replica's part in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// No Kafka configured: the only gateway, deciding alone.
    Standalone,
    /// Another member holds the control partition (or none yet).
    Follower,
    /// Assigned the control partition; its claim is written at `token` (once known) and the
    /// reader has not reached it yet.
    Claiming { token: Option<u64> },
    /// The leader, with its fencing token.
    Leader { token: u64 },
}

/// What the election thread does next: a pure function of what it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Write a claim record.
    Claim,
    /// The reader read past our claim: act as leader.
    Lead { token: u64 },
    /// Not (or no longer) the leader.
    Follow,
    /// Nothing changes.
    Stay,
}

/// The election's next step. `assigned`: the group assigned us the control partition.
/// `latest_claim`: the offset of the latest claim the reader has read. `read_to`: the next offset
/// the reader will read.
pub fn step(role: Role, assigned: bool, latest_claim: Option<u64>, read_to: i64) -> Step {
    match role {
        Role::Standalone => Step::Stay,
        _ if !assigned => {
            if role == Role::Follower {
                Step::Stay
            } else {
                Step::Follow
            }
        }
        Role::Follower => Step::Claim,
        Role::Claiming { token: None } => Step::Stay,
        Role::Claiming { token: Some(t) } => {
            if latest_claim.is_some_and(|c| c > t) {
                // Someone claimed after us while we were assigned (a deposed leader's late
                // claim): claim again, above it.
                Step::Claim
            } else if read_to > t as i64 {
                Step::Lead { token: t }
            } else {
                Step::Stay
            }
        }
        Role::Leader { token } => {
            if latest_claim.is_some_and(|c| c > token) {
                Step::Claim
            } else {
                Step::Stay
            }
        }
    }
}

/// Whether this replica may act now: `Ok(token)` (`None` when standalone), or why not.
/// `since_confirmed_ms`: how long since the coordinator last confirmed the leader's membership.
///
/// # Errors
/// The reason this replica does not act, in words for the decision log.
pub fn authority(role: Role, since_confirmed_ms: Option<u64>, session_timeout_ms: u64) -> Result<Option<u64>, String> {
    match role {
        Role::Standalone => Ok(None),
        Role::Follower => Err("a follower: the leader decides".into()),
        Role::Claiming { .. } => Err("claiming leadership: reading the control topic up to the claim".into()),
        Role::Leader { token } => match since_confirmed_ms {
            Some(ms) if ms.saturating_mul(3) < session_timeout_ms.saturating_mul(2) => Ok(Some(token)),
            Some(ms) => Err(format!(
                "no confirmation from the group coordinator for {ms}ms (two thirds of the {session_timeout_ms}ms session timeout): not acting on authority that may be stale"
            )),
            None => Err("leadership not confirmed by the group coordinator yet".into()),
        },
    }
}

#[derive(Debug)]
struct State {
    role: Role,
    assigned: bool,
    /// When the coordinator last confirmed this leader (the commit that succeeded was sent then).
    confirmed_at: Option<Instant>,
    /// The latest claim read from the topic: its offset and gateway.
    latest_claim: Option<(u64, String)>,
    /// The URL in the latest claim (where operator requests are forwarded).
    leader_url: Option<String>,
    /// When the role last changed.
    since: Instant,
}

/// This replica's leadership, shared by the election thread, the control reader and the fleet.
#[derive(Debug)]
pub struct Leadership {
    pub gateway: String,
    /// This replica's public URL, written in its claim.
    pub url: Option<String>,
    session_timeout_ms: u64,
    state: Mutex<State>,
    /// Next offset the control reader will read.
    read_to: AtomicI64,
    /// Bumped whenever this replica becomes leader (the fleet resumes open failbacks then).
    pub became_leader: tokio::sync::watch::Sender<u64>,
}

impl Leadership {
    fn with_role(gateway: String, url: Option<String>, role: Role, session_timeout_ms: u64) -> Arc<Self> {
        Arc::new(Self {
            gateway,
            url,
            session_timeout_ms,
            state: Mutex::new(State { role, assigned: false, confirmed_at: None, latest_claim: None, leader_url: None, since: Instant::now() }),
            read_to: AtomicI64::new(0),
            became_leader: tokio::sync::watch::Sender::new(0),
        })
    }

    /// A gateway with no Kafka: it decides alone.
    pub fn standalone(gateway: String) -> Arc<Self> {
        Self::with_role(gateway, None, Role::Standalone, 0)
    }

    /// A replica that joins the election (a follower until the group assigns it the partition);
    /// `url`: where the other replicas reach its public port once it leads.
    pub fn elected(gateway: String, url: Option<String>, session_timeout_ms: u64) -> Arc<Self> {
        Self::with_role(gateway, url, Role::Follower, session_timeout_ms)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn role(&self) -> Role {
        self.lock().role
    }

    /// Whether this replica may act now ([`authority`]).
    ///
    /// # Errors
    /// Why not.
    pub fn authority(&self) -> Result<Option<u64>, String> {
        let s = self.lock();
        authority(s.role, s.confirmed_at.map(|t| t.elapsed().as_millis() as u64), self.session_timeout_ms)
    }

    /// The control reader read a claim at `offset` by `gateway`, reachable at `url`.
    pub fn read_claim(&self, offset: i64, gateway: &str, url: Option<&str>) {
        let mut s = self.lock();
        let o = offset.max(0) as u64;
        if s.latest_claim.as_ref().is_none_or(|(c, _)| o > *c) {
            s.latest_claim = Some((o, gateway.to_owned()));
            s.leader_url = url.map(str::to_owned);
        }
        if let Role::Leader { token } = s.role {
            if o > token {
                tracing::warn!("[GATEWAY] {} claimed leadership at offset {} after our claim {}: we stop acting", gateway, o, token);
                s.role = Role::Follower;
                s.since = Instant::now();
            }
        }
    }

    /// The offset of the latest claim read from the control topic (the newest leader's token).
    pub fn latest_claim(&self) -> Option<u64> {
        self.lock().latest_claim.as_ref().map(|(o, _)| *o)
    }

    /// The latest claim's gateway and the URL it claimed with (the leader, as far as this
    /// replica has read).
    pub fn leader(&self) -> Option<(String, Option<String>)> {
        let s = self.lock();
        s.latest_claim.as_ref().map(|(_, g)| (g.clone(), s.leader_url.clone()))
    }

    /// The control reader will read `next` next.
    pub fn read_to(&self, next: i64) {
        self.read_to.fetch_max(next, Ordering::Relaxed);
    }

    fn set_role(&self, role: Role) {
        let mut s = self.lock();
        if s.role != role {
            s.role = role;
            s.since = Instant::now();
            if !matches!(role, Role::Leader { .. }) {
                s.confirmed_at = None;
            }
        }
    }

    /// The `leadership` part of `/api/fleet`.
    pub fn snapshot(&self) -> serde_json::Value {
        let s = self.lock();
        let auth = authority(s.role, s.confirmed_at.map(|t| t.elapsed().as_millis() as u64), self.session_timeout_ms);
        serde_json::json!({
            "gateway": self.gateway,
            "role": s.role,
            "acting": auth.is_ok(),
            "not_acting_because": auth.err(),
            "since_ms": s.since.elapsed().as_millis() as u64,
            "confirmed_ms_ago": s.confirmed_at.map(|t| t.elapsed().as_millis() as u64),
            "leader": s.latest_claim.as_ref().map(|(o, g)| serde_json::json!({"gateway": g, "token": o, "url": s.leader_url})),
            "control_read_to": self.read_to.load(Ordering::Relaxed),
        })
    }
}

/// The election consumer's context: the fleet's Kafka logging, and the group's assignment.
struct ElectionContext {
    logs: FleetContext,
    leadership: Arc<Leadership>,
}

impl ClientContext for ElectionContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        self.logs.log(level, fac, msg);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        self.logs.error(error, reason);
    }
}

impl ConsumerContext for ElectionContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        // Cooperative rebalancing: only a member that loses the partition is revoked (a replica
        // joining does not interrupt the leader).
        if let Rebalance::Revoke(tpl) = rebalance {
            if tpl.count() == 0 {
                return;
            }
            // Stop acting before the partition can be anyone else's.
            let was = self.leadership.role();
            self.leadership.lock().assigned = false;
            self.leadership.set_role(Role::Follower);
            if matches!(was, Role::Leader { .. }) {
                tracing::warn!("[GATEWAY] {} lost the control partition in a rebalance: no longer the leader", self.leadership.gateway);
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            if tpl.count() > 0 {
                self.leadership.lock().assigned = true;
                tracing::info!("[GATEWAY] {} was assigned the control partition: claiming leadership", self.leadership.gateway);
            }
        }
    }
}

/// The election's settings.
#[derive(Debug, Clone)]
pub struct Election {
    pub kafka: KafkaSettings,
    pub topic: String,
    pub group: String,
    pub session_timeout: Duration,
    pub heartbeat: Duration,
}

/// Runs the election on this (blocking) thread until `stop` is cancelled; the consumer leaves the
/// group then, so a replica that shuts down hands leadership over at once.
pub fn run_until(leadership: &Arc<Leadership>, election: &Election, producer: &FutureProducer<FleetContext>, stop: &CancellationToken) {
    if let Err(e) = run_election(leadership, election, producer, stop) {
        tracing::error!(error = %e, "[GATEWAY] the leader election stopped: this replica stays a follower");
        leadership.set_role(Role::Follower);
    }
}

fn run_election(leadership: &Arc<Leadership>, e: &Election, producer: &FutureProducer<FleetContext>, stop: &CancellationToken) -> Result<(), String> {
    let mut config = e.kafka.reader(&leadership.gateway);
    config
        .set("group.id", &e.group)
        .set("session.timeout.ms", e.session_timeout.as_millis().to_string())
        .set("heartbeat.interval.ms", e.heartbeat.as_millis().to_string())
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("auto.offset.reset", "latest")
        .set("fetch.wait.max.ms", "500");
    let consumer: BaseConsumer<ElectionContext> =
        config.create_with_context(ElectionContext { logs: FleetContext::default(), leadership: leadership.clone() }).map_err(|e| e.to_string())?;
    consumer.subscribe(&[&e.topic]).map_err(|e| e.to_string())?;
    tracing::info!("[GATEWAY] {} joined the gateways' group {} on {} (session timeout {}ms)", leadership.gateway, e.group, e.topic, e.session_timeout.as_millis());
    let mut last_commit = Instant::now() - e.heartbeat;
    let mut last_claim_try: Option<Instant> = None;
    let mut commit_warned = false;
    while !stop.is_cancelled() {
        // Serves the rebalance callbacks; the records themselves are the reader's business.
        let _ = consumer.poll(Duration::from_millis(100));
        let (role, assigned, latest) = {
            let s = leadership.lock();
            (s.role, s.assigned, s.latest_claim.as_ref().map(|(o, _)| *o))
        };
        match step(role, assigned, latest, leadership.read_to.load(Ordering::Relaxed)) {
            Step::Stay => {}
            Step::Follow => leadership.set_role(Role::Follower),
            Step::Claim => {
                if last_claim_try.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                    continue;
                }
                last_claim_try = Some(Instant::now());
                leadership.set_role(Role::Claiming { token: None });
                let record = ControlRecord::Claim { gateway: leadership.gateway.clone(), at_ms: shared::event::now_ms(), url: leadership.url.clone() };
                let value = serde_json::to_vec(&record).expect("a claim serializes");
                let key = shared::control::record_key(&record);
                let sent = futures::executor::block_on(producer.send(FutureRecord::to(&e.topic).partition(0).key(&key).payload(&value), Duration::from_secs(10)));
                match sent {
                    Ok(d) => {
                        let token = d.offset.max(0) as u64;
                        let mut s = leadership.lock();
                        // A revocation while the claim was in flight wins: it stays unused.
                        if s.assigned && s.role == (Role::Claiming { token: None }) {
                            s.role = Role::Claiming { token: Some(token) };
                            tracing::info!("[GATEWAY] {} wrote its claim at offset {}: reading the control topic up to it", leadership.gateway, token);
                        }
                    }
                    Err((err, _)) => {
                        tracing::warn!("[GATEWAY] {} could not write its claim: {}; retrying", leadership.gateway, err);
                        leadership.set_role(Role::Follower);
                    }
                }
            }
            Step::Lead { token } => {
                // Confirm with the coordinator before the first act.
                let sent = Instant::now();
                if commit(&consumer, &e.topic, token).is_ok() {
                    let mut s = leadership.lock();
                    if s.assigned && s.role == (Role::Claiming { token: Some(token) }) {
                        s.role = Role::Leader { token };
                        s.since = Instant::now();
                        s.confirmed_at = Some(sent);
                        drop(s);
                        last_commit = sent;
                        tracing::info!("[GATEWAY] {} is the leader (fencing token {})", leadership.gateway, token);
                        leadership.became_leader.send_modify(|n| *n += 1);
                    }
                }
            }
        }
        if let Role::Leader { token } = leadership.role() {
            if last_commit.elapsed() >= e.heartbeat {
                let sent = Instant::now();
                last_commit = sent;
                match commit(&consumer, &e.topic, token) {
                    Ok(()) => {
                        commit_warned = false;
                        let mut s = leadership.lock();
                        if s.role == (Role::Leader { token }) {
                            s.confirmed_at = Some(sent);
                        }
                    }
                    Err(err) if !commit_warned => {
                        commit_warned = true;
                        tracing::warn!("[GATEWAY] {} could not confirm its leadership with the group coordinator: {}", leadership.gateway, err);
                    }
                    Err(_) => {}
                }
            }
        }
    }
    leadership.set_role(Role::Follower);
    tracing::info!("[GATEWAY] {} leaves the gateways' group", leadership.gateway);
    consumer.unsubscribe();
    Ok(())
}

/// Commits `token + 1` on the control partition: the coordinator accepts it only from the member
/// of the current generation.
fn commit(consumer: &BaseConsumer<ElectionContext>, topic: &str, token: u64) -> Result<(), String> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(token as i64 + 1)).map_err(|e| e.to_string())?;
    consumer.commit(&tpl, CommitMode::Sync).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_table() {
        use Role::*;
        // (role, assigned, latest claim, read_to) → step
        let cases = [
            (Standalone, true, None, 0, Step::Stay),
            (Follower, false, Some(3), 4, Step::Stay),
            (Follower, true, Some(3), 4, Step::Claim),
            (Claiming { token: None }, true, Some(3), 4, Step::Stay),
            (Claiming { token: None }, false, Some(3), 4, Step::Follow),
            (Claiming { token: Some(5) }, true, Some(3), 5, Step::Stay),
            (Claiming { token: Some(5) }, true, Some(5), 6, Step::Lead { token: 5 }),
            (Claiming { token: Some(5) }, true, Some(7), 8, Step::Claim),
            (Leader { token: 5 }, true, Some(5), 9, Step::Stay),
            (Leader { token: 5 }, true, Some(8), 9, Step::Claim),
            (Leader { token: 5 }, false, Some(5), 9, Step::Follow),
        ];
        for (role, assigned, latest, read_to, want) in cases {
            assert_eq!(step(role, assigned, latest, read_to), want, "{role:?} assigned={assigned} latest={latest:?} read_to={read_to}");
        }
    }

    #[test]
    fn authority_table() {
        use Role::*;
        let cases: [(Role, Option<u64>, Option<Option<u64>>); 7] = [
            (Standalone, None, Some(None)),
            (Follower, Some(0), None),
            (Claiming { token: Some(4) }, Some(0), None),
            (Leader { token: 4 }, None, None),
            (Leader { token: 4 }, Some(0), Some(Some(4))),
            (Leader { token: 4 }, Some(3999), Some(Some(4))),
            (Leader { token: 4 }, Some(4000), None),
        ];
        for (role, since, want) in cases {
            assert_eq!(authority(role, since, 6000).ok(), want, "{role:?} since={since:?}");
        }
        assert!(authority(Leader { token: 4 }, Some(5000), 6000).unwrap_err().contains("two thirds"));
    }

    #[test]
    fn a_later_claim_deposes_the_leader() {
        let l = Leadership::elected("gw-a".into(), None, 6000);
        l.set_role(Role::Leader { token: 5 });
        l.read_claim(3, "gw-old", None);
        assert_eq!(l.role(), Role::Leader { token: 5 });
        l.read_claim(9, "gw-b", Some("http://gw-b:8000"));
        assert_eq!(l.role(), Role::Follower);
        assert_eq!(l.snapshot()["leader"]["gateway"], "gw-b");
        assert_eq!(l.leader(), Some(("gw-b".to_owned(), Some("http://gw-b:8000".to_owned()))));
        l.read_claim(7, "gw-c", Some("http://gw-c:8000"));
        assert_eq!(l.leader().unwrap().0, "gw-b", "an older claim read late changes nothing");
    }
}
