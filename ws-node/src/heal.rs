//! Incomplete channels heal while the node serves.
//!
//! A channel whose versions skipped as it was applied (its records deleted with no snapshot
//! covering them: a node frozen past the retention, records deleted by an operator) misses
//! publications. It is refused to new sessions (503 `channel_incomplete`) and every `HEAL_EVERY_MS` the
//! node reads the newest snapshots of the partitions it is on. A snapshot that holds the
//! missing versions ([`crate::hub::heals`]) heals it: the channel is rebuilt from the snapshot and
//! the log's records of it after the snapshot up to the node's position, then the events applied
//! meanwhile ([`Hub::begin_heal`], [`Hub::finish_heal`]), and replaces the live channel; its
//! sessions get the snapshot frame. A channel no snapshot covers yet stays incomplete until the
//! publisher's next snapshot of it.

use crate::config::Config;
use crate::hub::Hub;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Message;
use shared::kafka::FleetContext;
use shared::replay::{Offsets, ReplayPlan};
use crate::hub::{Rebuilt, Restorable};
use shared::record::{Publication, RecordHeaders};
use shared::ChannelId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What one heal round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    /// Channels healed.
    pub healed: u64,
    /// Incomplete channels with no snapshot that covers their gap yet.
    pub waiting: u64,
}

/// One heal round over the hub's incomplete channels (see the module doc). Blocking.
///
/// # Errors
/// A message naming what could not be read (the channels stay incomplete; the next round tries
/// again).
pub fn heal_once(config: &Config, hub: &Hub) -> Result<Round, String> {
    let incomplete = hub.incomplete();
    if incomplete.is_empty() {
        return Ok(Round::default());
    }
    let started = Instant::now();
    let consumer: BaseConsumer<FleetContext> = config
        .kafka()
        .reader(&format!("{}-heal", config.node_id))
        .create_with_context(FleetContext::default())
        .map_err(|e| format!("cannot create a reader: {e}"))?;
    let n = shared::replay::partition_count(&consumer, &config.topic, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let partition_of = |c: &ChannelId| shared::partitioner::partition_for(c.as_str().as_bytes(), n.max(1)) as i32;
    let mut partitions: Vec<i32> = incomplete.iter().map(|(c, _, _)| partition_of(c)).collect();
    partitions.sort_unstable();
    partitions.dedup();
    let loaded = shared::snapshot::load_partitions(&consumer, &config.snapshot_topic(), Some(&partitions), Duration::from_secs(30), &|| false)
        .map_err(|e| format!("cannot read the snapshots: {e}"))?;
    let mut round = Round::default();
    // The snapshots this node reads (one it cannot read heals nothing).
    let snapshots: HashMap<ChannelId, Restorable> = hub.restorable(&loaded)?.into_iter().map(|r| (r.channel.clone(), r)).collect();
    // The channels a snapshot heals, each rebuilt from it.
    let mut rebuilding: HashMap<ChannelId, (i32, Restorable, Rebuilt, bool)> = HashMap::new();
    for (channel, gap, resets) in &incomplete {
        match snapshots.get(channel) {
            Some(s) if crate::hub::heals(s.version, s.epoch, *gap, *resets) => {
                let rebuilt = Rebuilt { state: s.state.clone(), version: s.version };
                rebuilding.insert(channel.clone(), (partition_of(channel), s.clone(), rebuilt, true));
            }
            _ => round.waiting += 1,
        }
    }
    if rebuilding.is_empty() {
        return Ok(round);
    }
    let ids: Vec<ChannelId> = rebuilding.keys().cloned().collect();
    let positions = hub.begin_heal(&ids);
    // Per partition: from the oldest snapshot's offset to the node's position now.
    let mut plan = ReplayPlan { starts: Offsets::new(), targets: Offsets::new() };
    for (p, s, _, _) in rebuilding.values() {
        let start = plan.starts.entry(*p).or_insert(s.offset);
        *start = (*start).min(s.offset);
        plan.targets.insert(*p, positions.get(p).copied().unwrap_or(0));
    }
    for (p, start) in plan.starts.clone() {
        let low = consumer.fetch_watermarks(&config.topic, p, Duration::from_secs(5)).map(|(low, _)| low).unwrap_or(i64::MAX);
        let target = plan.targets[&p];
        if start < target && start < low {
            // The records after the snapshot are gone too: wait for a newer snapshot.
            tracing::info!(partition = p, snapshot_offset = start, log_start = low, "[HEAL] the records after the snapshots are deleted too; waiting for newer snapshots");
            for (_, (q, _, _, ok)) in rebuilding.iter_mut() {
                if *q == p {
                    *ok = false;
                }
            }
            plan.starts.remove(&p);
            plan.targets.remove(&p);
        } else if start >= target {
            plan.starts.remove(&p);
            plan.targets.remove(&p);
        }
    }
    let read = shared::replay::run(
        &consumer,
        &config.topic,
        &plan,
        Duration::from_secs(30),
        &|| false,
        |msg| {
            let Ok(pubs) = Publication::decode_record(RecordHeaders::of(msg).format, msg.payload()) else { return };
            for p in pubs {
                if let Some((_, s, rebuilt, ok)) = rebuilding.get_mut(&p.channel) {
                    if msg.offset() >= s.offset && *ok && rebuilt.apply(&p).is_err() {
                        // The log skips versions after the snapshot too: not this snapshot.
                        *ok = false;
                    }
                }
            }
        },
        |_| {},
    );
    let _ = consumer.unassign();
    if let Err(e) = &read {
        tracing::warn!(error = %e, "[HEAL] cannot read the events after the snapshots; trying again later");
    }
    for (channel, (_, s, rebuilt, ok)) in rebuilding {
        let rebuilt = (ok && read.is_ok()).then_some((rebuilt, s.epoch));
        match hub.finish_heal(&channel, rebuilt) {
            Ok(version) => {
                round.healed += 1;
                tracing::info!(channel = %channel, snapshot_version = s.version, version,
                    "[HEAL] channel healed from its snapshot: complete again, its sessions got its state");
            }
            Err(why) => {
                round.waiting += 1;
                tracing::info!(channel = %channel, snapshot_version = s.version, why = ?why, "[HEAL] channel not healed in this round");
            }
        }
    }
    tracing::info!(healed = round.healed, waiting = round.waiting, took_ms = started.elapsed().as_millis() as u64, "[HEAL] round done");
    Ok(round)
}
