//! The broadcast consumer: live events from the shared consumer group, fanned out by the hub.
//!
//! - Group assignment decides which node owns which partitions; `cooperative-sticky` (KIP-429)
//!   means a rebalance only revokes partitions that move, so other sessions are not disturbed.
//! - On assignment the node does not start at the group's committed offset: each assigned
//!   partition starts at the node's own position (the offset after the last record its state
//!   applied), so nothing between its state and the live stream is skipped; duplicates are dropped
//!   by version. Nothing is committed to the broadcast group.
//! - On revocation in a cooperative rebalance (partitions moved to another node) the hand-over is
//!   make-before-break: the partitions are *held* ([`Hub::hold`]). This node admits no new session
//!   for them, but its open sessions keep getting their events, read from the log by the *release
//!   reader* (a plain consumer, partitions assigned by hand from the node's positions, no group).
//!   The new owner is assigned them only in the rebalance's second round (about a second later);
//!   the sessions are handed over when it serves: by the gateway's scoped failback drain, or when
//!   the hold (`REVOKE_HOLD_MS`) runs out. So no client goes without events while nobody consumes.
//!   Until that second round librdkafka delivers nothing of the partitions this node keeps either
//!   (measured: about 1 s, every session of the node waiting), so the release reader reads those
//!   too until the round comes ([`Hub::bridge`]); the hub drops what both deliver by version.
//! - When the assignment was lost (the group gave the partitions away after a session timeout), or
//!   the node is leaving the group, or the hold is 0, the sessions are taken out of the hub at once,
//!   inside the callback, and handed to the drain task, which sends the reconnect notice and closes
//!   them after the grace period.
//!
//! The consumer runs on its own thread, the release reader on another; rebalance callbacks run on
//! the consumer's thread inside `poll`.

use crate::config::Config;
use crate::hub::{Hub, SessionHandle};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use shared::kafka::FleetContext;
use shared::replay::fmt_offsets;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc;

/// What a revocation leaves for the node's hand-over task.
#[derive(Debug)]
pub enum Revoked {
    /// Sessions taken out of the hub, to be handed over now, and the partitions revoked.
    HandOver(Vec<i32>, Vec<SessionHandle>),
    /// Partitions held by hold number `.0` (see the module docs): hand over whatever is still in
    /// that hold when it runs out.
    Held(u64, Vec<i32>),
}

struct BroadcastContext {
    hub: Arc<Hub>,
    /// For [`crate::snapshot::skip_ahead`] on assignment.
    config: Config,
    topic: String,
    handover: mpsc::UnboundedSender<Revoked>,
    /// `REVOKE_HOLD_MS`; zero hands over at once.
    hold: Duration,
    /// Set when the node leaves the group: nothing is held then.
    stop: Arc<AtomicBool>,
    logs: FleetContext,
    /// Partitions assigned and not read from yet, with when they were assigned (logged once the
    /// first record comes: how long a moved partition's sessions waited for the consumer).
    first_record: std::sync::Mutex<std::collections::HashMap<i32, std::time::Instant>>,
}

impl ClientContext for BroadcastContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        self.logs.log(level, fac, msg);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.logs.error(error, reason);
    }
}

impl ConsumerContext for BroadcastContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let partitions: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        self.hub.counters.rebalanced(crate::counters::rebalance_kind(err), partitions.len());
        self.hub.sampler.rebalanced();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                // The second after a revocation is the rebalance's next round: the consumer
                // delivers the kept partitions again.
                self.hub.assignment_came();
                // Without the standby reader, partitions not followed for long (or whose records
                // were deleted) start from their snapshots: the replay is bounded by the snapshot
                // interval. Held partitions are current (the release reader reads them) and
                // have sessions that must not skip versions.
                let (owned, held) = (self.hub.owned(), self.hub.held());
                let fresh: Vec<i32> = partitions.iter().copied().filter(|p| !owned.contains(p) && !held.contains(p)).collect();
                if !self.config.standby && !fresh.is_empty() {
                    crate::snapshot::skip_ahead(&self.config, &self.hub, &fresh);
                }
                let positions = self.hub.positions();
                let mut starts = shared::replay::Offsets::new();
                for p in &partitions {
                    let start = positions.get(p).copied();
                    if let Some(o) = start {
                        starts.insert(*p, o);
                    }
                    let offset = start.map_or(Offset::Beginning, Offset::Offset);
                    if let Err(e) = tpl.set_partition_offset(&self.topic, *p, offset) {
                        tracing::error!(partition = p, error = %e, "[BROADCAST] cannot set the start offset");
                    }
                }
                let r = if cooperative { consumer.incremental_assign(tpl) } else { consumer.assign(tpl) };
                match r {
                    Ok(()) => {
                        self.hub.assign(&partitions);
                        self.hub.counters.hold_ended(&partitions);
                        let now = std::time::Instant::now();
                        self.first_record.lock().expect("first-record lock").extend(partitions.iter().map(|p| (*p, now)));
                        tracing::info!(
                            "[BROADCAST] assigned partitions={:?} startOffsets={} owned={:?}",
                            partitions,
                            fmt_offsets(&starts),
                            self.hub.owned()
                        );
                    }
                    Err(e) => tracing::error!(partitions = ?partitions, error = %e, "[BROADCAST] assign failed"),
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let lost = consumer.assignment_lost();
                let holding = cooperative && !lost && !self.hold.is_zero() && !self.stop.load(Ordering::Acquire);
                if holding {
                    let (hold, held) = self.hub.hold(&partitions);
                    self.hub.counters.hold_started(&partitions);
                    tracing::info!(
                        "[BROADCAST] revoked partitions={:?} (moved to another node); serving their {} sessions from the log until the new owner serves them (hold at most {}ms) owned={:?}",
                        partitions,
                        held,
                        self.hold.as_millis(),
                        self.hub.owned()
                    );
                    let _ = self.handover.send(Revoked::Held(hold, partitions.clone()));
                    self.hub.bridge(&self.hub.owned());
                    if let Err(e) = consumer.incremental_unassign(tpl) {
                        tracing::error!(partitions = ?partitions, error = %e, "[BROADCAST] unassign failed");
                    }
                    return;
                }
                let sessions = self.hub.revoke(&partitions);
                tracing::info!(
                    "[BROADCAST] revoked partitions={:?} lost={} sessionsToHandOver={} owned={:?}",
                    partitions,
                    lost,
                    sessions.len(),
                    self.hub.owned()
                );
                if !sessions.is_empty() {
                    let _ = self.handover.send(Revoked::HandOver(partitions.clone(), sessions));
                }
                let r = if cooperative { consumer.incremental_unassign(tpl) } else { consumer.unassign() };
                if let Err(e) = r {
                    tracing::error!(partitions = ?partitions, error = %e, "[BROADCAST] unassign failed");
                }
            }
            other => {
                tracing::error!(error = ?other, "[BROADCAST] rebalance error; dropping the whole assignment");
                let revoked = self.hub.owned();
                let sessions = self.hub.revoke_all();
                if !sessions.is_empty() {
                    let _ = self.handover.send(Revoked::HandOver(revoked, sessions));
                }
                let _ = consumer.unassign();
            }
        }
    }
}

/// A running broadcast consumer.
pub struct Broadcast {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    release: Option<JoinHandle<()>>,
    /// The standby reader ([`crate::standby`]), when `STANDBY` is on.
    standby: Option<JoinHandle<()>>,
    /// Reads every partition's end once a second, for the lag in `/health`.
    ends: Option<JoinHandle<()>>,
}

impl Broadcast {
    /// Joins the broadcast group of `config` and starts consuming on a new thread.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration or the subscription.
    pub fn start(config: &Config, hub: Arc<Hub>, handover: mpsc::UnboundedSender<Revoked>) -> Result<Self, KafkaError> {
        let stop = Arc::new(AtomicBool::new(false));
        let context = BroadcastContext {
            hub: hub.clone(),
            config: config.clone(),
            topic: config.topic.clone(),
            handover,
            hold: config.revoke_hold(),
            stop: stop.clone(),
            logs: FleetContext::default(),
            first_record: std::sync::Mutex::new(std::collections::HashMap::new()),
        };
        let reader: BaseConsumer<FleetContext> =
            config.kafka().reader(&format!("{}-release", config.node_id)).create_with_context(FleetContext::default())?;
        let ends_reader: BaseConsumer<FleetContext> =
            config.kafka().reader(&format!("{}-ends", config.node_id)).create_with_context(FleetContext::default())?;
        let standby_reader: Option<BaseConsumer<FleetContext>> = if config.standby {
            Some(config.kafka().reader(&format!("{}-standby", config.node_id)).create_with_context(FleetContext::default())?)
        } else {
            None
        };
        let consumer: BaseConsumer<BroadcastContext> = config
            .kafka()
            .broadcast_consumer(&config.broadcast_group, &config.node_id)
            .create_with_context(context)?;
        consumer.subscribe(&[&config.topic])?;
        tracing::info!(group = %config.broadcast_group, topic = %config.topic, "[BROADCAST] joined the broadcast group; waiting for an assignment");
        let (stop2, hub2, config2) = (stop.clone(), hub.clone(), config.clone());
        let release = std::thread::Builder::new()
            .name("release".into())
            .spawn(move || release_loop(reader, &config2, hub2, stop2))
            .expect("spawn the release reader thread");
        let standby = if let Some(standby_reader) = standby_reader {
            let (stop2, hub2, config2) = (stop.clone(), hub.clone(), config.clone());
            Some(
                std::thread::Builder::new()
                    .name("standby".into())
                    .spawn(move || crate::standby::run(standby_reader, &config2, hub2, stop2))
                    .expect("spawn the standby reader thread"),
            )
        } else {
            None
        };
        let (stop2, hub2, topic) = (stop.clone(), hub.clone(), config.topic.clone());
        let ends = std::thread::Builder::new()
            .name("log-ends".into())
            .spawn(move || ends_loop(&ends_reader, &topic, &hub2, &stop2))
            .expect("spawn the log-ends thread");
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("broadcast".into())
            .spawn(move || poll_loop(consumer, hub, stop2))
            .expect("spawn the broadcast thread");
        Ok(Self { stop, thread: Some(thread), release: Some(release), standby, ends: Some(ends) })
    }

    /// Leaves the group (the partitions move to the other members) and waits for the thread.
    pub async fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        let threads: Vec<JoinHandle<()>> =
            self.thread.take().into_iter().chain(self.release.take()).chain(self.standby.take()).chain(self.ends.take()).collect();
        let _ = tokio::task::spawn_blocking(move || threads.into_iter().for_each(|t| drop(t.join()))).await;
    }
}

impl Drop for Broadcast {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Reads the readable end of every partition the node has a position for, about once a second,
/// into the hub (`/health` shows each partition's lag behind it).
fn ends_loop(reader: &BaseConsumer<FleetContext>, topic: &str, hub: &Hub, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        let mut ends = hub.sampler.ends();
        for p in hub.positions().keys() {
            if let Ok((_, high)) = reader.fetch_watermarks(topic, *p, Duration::from_secs(2)) {
                ends.insert(*p, high);
            }
        }
        hub.sampler.set_ends(ends);
        hub.sample_progress();
        for _ in 0..10 {
            if stop.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Longest the release reader reads kept partitions for the broadcast consumer after a revocation
/// (the rebalance's next round normally comes within about a second).
const BRIDGE_AT_MOST: Duration = Duration::from_secs(10);

/// The release reader: reads the held partitions ([`Hub::hold`]) from the node's positions and
/// applies their records, so held sessions keep their events until they are handed over. Its
/// assignment follows the hub's held and bridged sets (checked every poll, at most 50 ms apart).
fn release_loop(reader: BaseConsumer<FleetContext>, config: &Config, hub: Arc<Hub>, stop: Arc<AtomicBool>) {
    let topic = config.topic.as_str();
    // Learn the topic's leaders now: a first assignment without them waits for a metadata round
    // and a connection (measured: 0.8–1.3 s on a real broker, against 0.2 s when warm).
    if let Err(e) = reader.fetch_metadata(Some(topic), Duration::from_secs(5)) {
        tracing::warn!(error = %e, "[RELEASE] cannot read the topic's metadata yet; the first hold will be slower");
    }
    let mut reading: Vec<i32> = Vec::new();
    let mut assigned_at: Option<std::time::Instant> = None;
    while !stop.load(Ordering::Acquire) {
        let (held, bridged) = hub.release_scope(BRIDGE_AT_MOST);
        let scope: Vec<i32> = held.iter().chain(&bridged).copied().collect::<std::collections::BTreeSet<i32>>().into_iter().collect();
        if scope != reading {
            let held = scope;
            let positions = hub.positions();
            match crate::readers::assign_from(&reader, topic, &held, &positions) {
                Ok(()) if held.is_empty() => tracing::info!("[RELEASE] stopped reading partitions={:?} (handed over or back)", reading),
                Ok(()) => tracing::info!(
                    "[RELEASE] reading partitions={:?} (held={:?}, kept but stalled until the rebalance's next round={:?}) from offsets={} for their sessions",
                    held,
                    held.iter().filter(|p| !bridged.contains(p)).collect::<Vec<_>>(),
                    bridged,
                    fmt_offsets(&held.iter().filter_map(|p| positions.get(p).map(|o| (*p, *o))).collect())
                ),
                Err(e) => tracing::error!(partitions = ?held, error = %e, "[RELEASE] assign failed"),
            }
            assigned_at = (!held.is_empty()).then(std::time::Instant::now);
            reading = held;
        }
        let timeout = if reading.is_empty() { Duration::from_millis(50) } else { Duration::from_millis(20) };
        match reader.poll(timeout) {
            Some(Ok(msg)) => {
                use rdkafka::message::Message;
                let (p, off) = (msg.partition(), msg.offset());
                if let Some(t) = assigned_at.take() {
                    tracing::info!("[RELEASE] first record of the held partitions read {}ms after their assignment (partition={} offset={})", t.elapsed().as_millis(), p, off);
                }
                let _ = hub.apply_record(p, off, shared::record::RecordHeaders::of(&msg), msg.payload());
            }
            Some(Err(e)) if shared::kafka::out_of_range(&e) => {
                tracing::warn!(error = %e, partitions = ?reading, "[RELEASE] a position is below its partition's log start (records deleted); restoring from the snapshots");
                crate::snapshot::from_log_start(config, &hub, &reading);
                reading.clear();
                let _ = reader.unassign();
            }
            Some(Err(e)) => tracing::warn!(error = %e, "[RELEASE] reader error (librdkafka retries)"),
            None if !reading.is_empty() => crate::readers::note_read_to_end(crate::ownership::Reader::Release, &reader, topic, &hub),
            None => {}
        }
    }
}

/// An owned partition's position is below its log start (records deleted while the node did not
/// read them: it was frozen, or its position came from long ago): librdkafka stopped fetching it
/// (`auto.offset.reset=error`). Its channels are restored from the snapshots (sessions on them get
/// the snapshot frame), and the partition is assigned again from its checkpoint.
///
/// The error does not say which partition stopped, and another reader may have restored it first
/// (the hub's position is then already past the log start while this consumer's fetch is still
/// stopped), so every owned partition is assigned again from the node's position: a stopped
/// partition cannot be seeked. Records fetched but not applied are read again; duplicates are
/// dropped by version.
fn restart_below_log_start(consumer: &BaseConsumer<BroadcastContext>, hub: &Hub, e: &KafkaError) {
    let owned = hub.owned();
    tracing::warn!(error = %e, partitions = ?owned, "[BROADCAST] a position is out of range (records deleted?); restoring from the snapshots what is below the log start");
    let ctx = consumer.context();
    crate::snapshot::from_log_start(&ctx.config, hub, &owned);
    if consumer.assignment_lost() {
        // The group gave the partitions away: the revocation is coming, and the next assignment
        // starts from the node's positions.
        return;
    }
    let owned = hub.owned();
    let positions = hub.positions();
    let mut tpl = TopicPartitionList::new();
    for p in &owned {
        let offset = positions.get(p).copied().map_or(Offset::Beginning, Offset::Offset);
        if let Err(e) = tpl.add_partition_offset(&ctx.topic, *p, offset) {
            tracing::error!(partition = p, error = %e, "[BROADCAST] cannot set the restart offset");
            return;
        }
    }
    let r = consumer.incremental_unassign(&tpl).and_then(|()| consumer.incremental_assign(&tpl));
    match r {
        Ok(()) => tracing::info!(
            "[BROADCAST] reading partitions={:?} again from offsets={}",
            owned,
            fmt_offsets(&owned.iter().filter_map(|p| positions.get(p).map(|o| (*p, *o))).collect())
        ),
        Err(e) => tracing::error!(error = %e, "[BROADCAST] cannot assign the owned partitions again"),
    }
}

/// Records already fetched that are applied before their frames are written (one write per
/// session for all of them)...
const DRAIN_AT_MOST: usize = 64;
/// ...as long as fewer events than this wait to be written: a record can carry a group of up to
/// 256 events, and a session whose frames would not fit its outbound bound (`SESSION_QUEUE`, 1,024
/// frames by default) after one write is closed as too slow, though it reads normally.
const DRAIN_EVENTS_AT_MOST: usize = 256;

fn poll_loop(consumer: BaseConsumer<BroadcastContext>, hub: Arc<Hub>, stop: Arc<AtomicBool>) {
    let apply = |msg: rdkafka::message::BorrowedMessage<'_>| {
        use rdkafka::message::Message;
        let (p, off) = (msg.partition(), msg.offset());
        if let Some(t) = consumer.context().first_record.lock().expect("first-record lock").remove(&p) {
            tracing::info!("[BROADCAST] first record of assigned partition={} read {}ms after its assignment (offset={})", p, t.elapsed().as_millis(), off);
        }
        if let Err(e) = hub.queue_record(p, off, shared::record::RecordHeaders::of(&msg), msg.payload()) {
            // A record of a later format is not skipped: the node stops (the hub logged why).
            if !e.stops() {
                tracing::warn!(partition = p, offset = off, error = %e, "[BROADCAST] skipping a record that is not a publication");
            }
        }
    };
    while !stop.load(Ordering::Acquire) {
        hub.sampler.broadcast_polled();
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => {
                apply(msg);
                // What librdkafka already fetched goes out with this record: nothing waits for
                // more, but the frames of records that arrived together leave together.
                for _ in 1..DRAIN_AT_MOST {
                    if hub.queued_events() >= DRAIN_EVENTS_AT_MOST {
                        break;
                    }
                    match consumer.poll(Duration::ZERO) {
                        Some(Ok(msg)) => apply(msg),
                        Some(Err(e)) if shared::kafka::out_of_range(&e) => {
                            restart_below_log_start(&consumer, &hub, &e);
                            break;
                        }
                        Some(Err(e)) => tracing::warn!(error = %e, "[BROADCAST] consumer error (librdkafka retries)"),
                        None => break,
                    }
                }
                hub.write_queued();
            }
            Some(Err(e)) if shared::kafka::out_of_range(&e) => restart_below_log_start(&consumer, &hub, &e),
            Some(Err(e)) => tracing::warn!(error = %e, "[BROADCAST] consumer error (librdkafka retries)"),
            None => crate::readers::note_read_to_end(crate::ownership::Reader::Broadcast, &consumer, &consumer.context().topic, &hub),
        }
    }
    tracing::info!("[BROADCAST] leaving the broadcast group");
    consumer.unsubscribe();
    drop(consumer); // closes: revokes (callback above) and sends LeaveGroup
    let left = hub.revoke_all();
    if !left.is_empty() {
        tracing::warn!(sessions = left.len(), "[BROADCAST] sessions still registered after leaving; closing them");
        for s in left {
            s.close(shared::protocol::close::SERVICE_RESTART, "node left the broadcast group");
        }
    }
    hub.sampler.clear_broadcast_poll();
    tracing::info!("[BROADCAST] left the broadcast group");
}
