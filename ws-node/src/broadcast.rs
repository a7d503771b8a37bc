//! The broadcast consumer: live events from the shared consumer group, fanned out by the hub.
//!
//! - Group assignment decides which node owns which partitions; `cooperative-sticky` (KIP-429)
//!   means a rebalance only revokes partitions that move, so other sessions are not disturbed.
//! - On assignment the node does not start at the group's committed offset: each assigned
//!   partition starts at the node's own position (the offset after the last record its state
//!   applied), so nothing between its state and the live stream is skipped; duplicates are dropped
//!   by version. Nothing is committed to the broadcast group.
//! - On revocation (partitions moved to another node, or the assignment was lost) the sessions of
//!   those canvases are taken out of the hub at once, inside the callback (no event of a revoked
//!   partition reaches them afterwards), and handed to the drain task, which sends the reconnect
//!   notice and closes them after the grace period.
//!
//! The consumer runs on its own thread; rebalance callbacks run on it inside `poll`.

use crate::config::Config;
use crate::hub::{Hub, SessionHandle};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use shared::kafka::FleetContext;
use shared::replay::fmt_offsets;
use shared::PixelEvent;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc;

/// Sessions taken out of the hub by a revocation, to be handed over, and the partitions revoked.
pub type HandOver = (Vec<i32>, Vec<SessionHandle>);

struct BroadcastContext {
    hub: Arc<Hub>,
    topic: String,
    handover: mpsc::UnboundedSender<HandOver>,
    logs: FleetContext,
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
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
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
                let sessions = self.hub.revoke(&partitions);
                tracing::info!(
                    "[BROADCAST] revoked partitions={:?} lost={} sessionsToHandOver={} owned={:?}",
                    partitions,
                    lost,
                    sessions.len(),
                    self.hub.owned()
                );
                if !sessions.is_empty() {
                    let _ = self.handover.send((partitions.clone(), sessions));
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
                    let _ = self.handover.send((revoked, sessions));
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
}

impl Broadcast {
    /// Joins the broadcast group of `config` and starts consuming on a new thread.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration or the subscription.
    pub fn start(config: &Config, hub: Arc<Hub>, handover: mpsc::UnboundedSender<HandOver>) -> Result<Self, KafkaError> {
        let context = BroadcastContext { hub: hub.clone(), topic: config.topic.clone(), handover, logs: FleetContext::default() };
        let consumer: BaseConsumer<BroadcastContext> = config
            .kafka()
            .broadcast_consumer(&config.broadcast_group, &config.node_id)
            .create_with_context(context)?;
        consumer.subscribe(&[&config.topic])?;
        tracing::info!(group = %config.broadcast_group, topic = %config.topic, "[BROADCAST] joined the broadcast group; waiting for an assignment");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("broadcast".into())
            .spawn(move || poll_loop(consumer, hub, stop2))
            .expect("spawn the broadcast thread");
        Ok(Self { stop, thread: Some(thread) })
    }

    /// Leaves the group (the partitions move to the other members) and waits for the thread.
    pub async fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

impl Drop for Broadcast {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn poll_loop(consumer: BaseConsumer<BroadcastContext>, hub: Arc<Hub>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        hub.broadcast_polled();
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => {
                use rdkafka::message::Message;
                let (p, off) = (msg.partition(), msg.offset());
                match PixelEvent::from_record(msg.payload()) {
                    Ok(ev) => hub.apply(p, off, &ev),
                    Err(e) => {
                        tracing::warn!(partition = p, offset = off, error = %e, "[BROADCAST] skipping a record that is not a pixel event");
                        hub.skip(p, off);
                    }
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "[BROADCAST] consumer error (librdkafka retries)"),
            None => {}
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
    hub.clear_broadcast_poll();
    tracing::info!("[BROADCAST] left the broadcast group");
}
