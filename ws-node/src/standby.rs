//! Warm standby: the node keeps the state of every partition current, not only of the partitions
//! it owns (Kafka Streams' standby replicas are the model). A group-less reader is assigned every
//! partition the node neither owns nor holds, from the node's positions, and applies their events
//! to the channels and their recent-events windows; nothing of them is fanned out (the hub fans
//! out owned and held partitions only). When partitions move to the node, its state is already at
//! their head: the broadcast consumer starts there, and resumes are served as events, so takeover
//! and failback time do not grow with the node's uptime. `STANDBY=false` turns it off (the node
//! then reads only what it owns, and a takeover starts from the snapshots when far behind).

use crate::config::Config;
use crate::hub::Hub;
use rdkafka::consumer::{BaseConsumer, Consumer};
use shared::kafka::FleetContext;
use shared::replay::fmt_offsets;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The partitions the standby reader reads: every partition the node knows minus the ones it owns
/// or holds (read by the broadcast consumer and the release reader). Pure.
pub fn scope(known: &BTreeSet<i32>, owned: &[i32], held: &[i32]) -> Vec<i32> {
    known.iter().copied().filter(|p| !owned.contains(p) && !held.contains(p)).collect()
}

/// Runs the standby reader on `reader` until `stop` (blocking: its own thread). A position found
/// below its partition's log start (offset out of range) restores those partitions from the
/// snapshots ([`crate::snapshot::from_log_start`]) and reads on from their checkpoints.
pub fn run(reader: BaseConsumer<FleetContext>, config: &Config, hub: Arc<Hub>, stop: Arc<AtomicBool>) {
    let topic = config.topic.as_str();
    let mut reading: Vec<i32> = Vec::new();
    let mut checked = std::time::Instant::now() - Duration::from_secs(1);
    while !stop.load(Ordering::Acquire) {
        if checked.elapsed() >= Duration::from_millis(100) {
            checked = std::time::Instant::now();
            let positions = hub.positions();
            let known: BTreeSet<i32> = positions.keys().copied().collect();
            let want = scope(&known, &hub.owned(), &hub.held());
            if want != reading {
                match crate::readers::assign_from(&reader, topic, &want, &positions) {
                    Ok(()) => tracing::info!(
                        "[STANDBY] reading partitions={:?} from offsets={} (kept current, not served)",
                        want,
                        fmt_offsets(&want.iter().filter_map(|p| positions.get(p).map(|o| (*p, *o))).collect())
                    ),
                    Err(e) => tracing::error!(partitions = ?want, error = %e, "[STANDBY] assign failed"),
                }
                reading = want;
            }
        }
        if reading.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        match reader.poll(Duration::from_millis(50)) {
            Some(Ok(msg)) => {
                use rdkafka::message::Message;
                let (p, off) = (msg.partition(), msg.offset());
                // A partition that just moved to the node is the broadcast consumer's now.
                if reading.contains(&p) && !hub.owned().contains(&p) {
                    if let Err(e) = hub.apply_record(p, off, shared::record::RecordHeaders::of(&msg), msg.payload()) {
                        // A record of a later format is not skipped: the node stops (the hub logged why).
                        if !e.stops() {
                            tracing::warn!(partition = p, offset = off, error = %e, "[STANDBY] skipping a record that is not a publication");
                        }
                    }
                }
            }
            Some(Err(e)) if shared::kafka::out_of_range(&e) => {
                tracing::warn!(error = %e, partitions = ?reading, "[STANDBY] a position is below its partition's log start (records deleted); restoring from the snapshots");
                crate::snapshot::from_log_start(config, &hub, &reading);
                // Assigned again from the raised positions at the next check.
                reading.clear();
                let _ = reader.unassign();
            }
            Some(Err(e)) => tracing::warn!(error = %e, "[STANDBY] reader error (librdkafka retries)"),
            None => crate::readers::note_read_to_end(crate::ownership::Reader::Standby, &reader, topic, &hub),
        }
    }
    let _ = reader.unassign();
}

/// The partitions a node stands by for now (for `/health`).
pub fn partitions(hub: &Hub) -> Vec<i32> {
    let known: BTreeSet<i32> = hub.positions().keys().copied().collect();
    scope(&known, &hub.owned(), &hub.held())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_is_what_the_node_neither_owns_nor_holds() {
        let known: BTreeSet<i32> = (0..6).collect();
        assert_eq!(scope(&known, &[0, 2], &[4]), vec![1, 3, 5]);
        assert_eq!(scope(&known, &[0, 1, 2, 3, 4, 5], &[]), Vec::<i32>::new());
        assert_eq!(scope(&BTreeSet::new(), &[], &[]), Vec::<i32>::new());
    }
}
