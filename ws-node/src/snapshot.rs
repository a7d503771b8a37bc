//! Snapshots on the node's side of a takeover and of an offset out of range.
//!
//! - Every reader has `auto.offset.reset=error`: a position below a partition's log start (its
//!   records deleted by retention while the node did not read them: frozen, or down for longer than
//!   the retention) is reported, never silently moved. [`from_log_start`] then restores the
//!   partition's channels from the snapshot topic and raises the position to its checkpoint, and
//!   the reader is assigned again from there. (With `STANDBY=false`, assignment checks the same
//!   before it starts, see below.)
//! - A position past a partition's readable end (the topic deleted and created again, or the log
//!   truncated by an unclean leader election) is never trusted: the partition is a new history.
//!   Its channels are forgotten (their sessions closed with 1012, to resume on the rebuilt
//!   state), restored from the snapshots, and read from the checkpoint, or from the log start
//!   where the checkpoint is past the end too; the node then checks the events topic's ID.
//! - When the standby reader is off (`STANDBY=false`), a partition assigned to this node is read
//!   from the node's own position, which is only as recent as the node's last catch-up when it did
//!   not own the partition since. When that position is far behind the partition's end
//!   ([`skip_ahead`]), the node first restores the partition's channels from the snapshot topic
//!   ([`shared::snapshot`]) and moves its position up to the partition's checkpoint: the replay is
//!   then bounded by the snapshot interval, not by how long the node ran.

use crate::config::Config;
use crate::hub::Hub;
use rdkafka::consumer::{BaseConsumer, Consumer};
use shared::kafka::FleetContext;
use shared::replay::{fmt_offsets, Offsets};
use std::time::{Duration, Instant};

/// A partition whose position is more than this many offsets behind its end starts from the
/// snapshots (fewer are replayed faster than the snapshots are read).
pub const SKIP_AHEAD_LAG: i64 = 10_000;

/// Whether a reader at `position` (none: never read) of a partition whose log spans `low..high`
/// should start from the snapshots when it takes the partition over without standby. Pure.
pub fn from_snapshots(position: Option<i64>, low: i64, high: i64) -> bool {
    below_log_start(position, low) || position.is_some_and(|p| high - p > SKIP_AHEAD_LAG)
}

/// Whether a reader at `position` (none: never read) is past the partition's readable end
/// `high`: not this log's history. Pure.
pub fn moved_past_end(position: Option<i64>, high: i64) -> bool {
    position.is_some_and(|p| p > high)
}

/// Whether a reader at `position` (none: never read) would ask for records retention deleted:
/// it must start from the snapshots (`auto.offset.reset=error` never moves it silently). Pure.
pub fn below_log_start(position: Option<i64>, low: i64) -> bool {
    position.is_none_or(|p| p < low)
}

/// For each of `partitions` that [`from_snapshots`] picks, restores its channels from their
/// snapshots where those are newer and raises the node's position to its checkpoint. Blocking.
/// Returns the positions it raised.
pub fn skip_ahead(config: &Config, hub: &Hub, partitions: &[i32]) -> Offsets {
    restore_partitions(config, hub, partitions, from_snapshots, "far behind or below the log start").0
}

/// For each of `partitions` whose position is below its log start (records deleted by retention
/// since the node read them: a reader reported an offset out of range, or is about to), restores
/// its channels from their snapshots and raises the position to the checkpoint. Blocking. Returns
/// the positions it raised; the caller assigns its reader there again. A partition that could not
/// be restored (the snapshot topic unreadable) is returned at its unchanged position after a
/// second's pause: read from there, it reports the offset out of range again, which retries.
pub fn from_log_start(config: &Config, hub: &Hub, partitions: &[i32]) -> Offsets {
    let (mut raised, unrestored) = restore_partitions(config, hub, partitions, |position, low, _| below_log_start(position, low), "below the log start");
    if !raised.is_empty() {
        hub.count_log_start_recovery();
    }
    if !unrestored.is_empty() {
        std::thread::sleep(Duration::from_secs(1));
        let positions = hub.positions();
        raised.extend(unrestored.iter().filter_map(|p| positions.get(p).map(|o| (*p, *o))));
    } else if raised.is_empty() {
        // Nothing is below the log start or past the end: another reader restored it already. The
        // caller reads again; a pause keeps a position that stays out of range from spinning.
        tracing::warn!(partitions = ?partitions, "[SNAPSHOT] an offset out of range with every position within its log now; reading again");
        std::thread::sleep(Duration::from_millis(250));
    }
    // An offset out of range may be a topic deleted and created again: the node checks its ID.
    hub.suspect_history();
    raised
}

/// Restores the partitions `pick(position, low, high)` selects from the snapshot topic: their
/// channels take their snapshots where newer (sessions on them get the snapshot frame), and their
/// positions rise to their checkpoints (at least to the log start). A partition whose needed
/// records are gone with no checkpoint covering them is an error in the log, naming it; its
/// channels whose versions then skip are named in `/health` as they are applied. Returns the
/// raised positions, and the picked partitions it could not restore.
fn restore_partitions(
    config: &Config,
    hub: &Hub,
    partitions: &[i32],
    pick: impl Fn(Option<i64>, i64, i64) -> bool,
    why: &str,
) -> (Offsets, Vec<i32>) {
    let started = Instant::now();
    let consumer: BaseConsumer<FleetContext> =
        match config.kafka().reader(&format!("{}-snapshots", config.node_id)).create_with_context(FleetContext::default()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "[SNAPSHOT] cannot create a reader; replaying from the node's position");
                return (Offsets::new(), partitions.to_vec());
            }
        };
    let positions = hub.positions();
    let mut picked = Vec::new();
    let mut lows = Offsets::new();
    let mut ends = Offsets::new();
    let mut moved_back = Vec::new();
    for p in partitions {
        match consumer.fetch_watermarks(&config.topic, *p, Duration::from_secs(5)) {
            Ok((low, high)) => {
                lows.insert(*p, low);
                ends.insert(*p, high);
                let position = positions.get(p).copied();
                if moved_past_end(position, high) {
                    tracing::warn!(partition = p, position = position.unwrap_or(0), end = high,
                        "[SNAPSHOT] a position past the partition's readable end: the log moved backwards (the topic recreated, or truncated by an unclean leader election); rebuilding the partition as a new history");
                    hub.count_log_moved_back();
                    moved_back.push(*p);
                    picked.push(*p);
                } else if pick(position, low, high) {
                    picked.push(*p);
                }
            }
            Err(e) => tracing::warn!(partition = p, error = %e, "[SNAPSHOT] cannot read the watermarks; replaying from the node's position"),
        }
    }
    if picked.is_empty() {
        return (Offsets::new(), Vec::new());
    }
    let loaded = match shared::snapshot::load_partitions(&consumer, &config.snapshot_topic(), Some(&picked), Duration::from_secs(30), &|| false) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(partitions = ?picked, error = %e, "[SNAPSHOT] cannot read the snapshots; replaying from the node's position");
            return (Offsets::new(), picked);
        }
    };
    let checkpoints = loaded.checkpoints.clone();
    // A snapshot that does not read under this node's namespaces (another canvas size, another
    // model) is refused before anything moves: raising the positions to the checkpoints would
    // skip that channel's records.
    let mut restorable = match hub.restorable(&loaded) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(partitions = ?picked, error = %e,
                "[SNAPSHOT] a snapshot this node's namespaces cannot read (fleet.toml, CANVAS_WIDTH/CANVAS_HEIGHT differ from the publisher's): not used, and the positions stay where they are");
            return (Offsets::new(), picked);
        }
    };
    let mut positions = positions;
    if !moved_back.is_empty() {
        // Start where the snapshots cover, or the log start where their checkpoint is past the
        // end too; what the node held of these partitions is forgotten first.
        let starts: Offsets = moved_back
            .iter()
            .map(|p| {
                let (low, high) = (lows.get(p).copied().unwrap_or(0), ends.get(p).copied().unwrap_or(0));
                (*p, shared::replay::start_of(checkpoints.get(p).copied(), None, low, high).0)
            })
            .collect();
        let n = shared::replay::partition_count(&consumer, &config.topic, Duration::from_secs(5)).unwrap_or(0);
        crate::hub::of_another_log(&mut restorable, &moved_back, n);
        for s in hub.forget_partitions(&moved_back, n, &starts) {
            s.close(shared::protocol::close::SERVICE_RESTART, "the log moved backwards: reconnect to get the rebuilt state");
        }
        positions.extend(starts);
    }
    let restored = hub.restore(restorable);
    match shared::replay::partition_count(&consumer, &config.topic, Duration::from_secs(5)) {
        Ok(n) => {
            hub.forget_deleted(&loaded, n);
        }
        Err(e) => tracing::warn!(error = %e, "[SNAPSHOT] cannot read the partition count: channels deleted meanwhile are kept until their partition is read again"),
    }
    let mut raised = Offsets::new();
    for p in &picked {
        if moved_back.contains(p) {
            raised.insert(*p, positions[p]);
            continue;
        }
        let low = lows.get(p).copied().unwrap_or(0);
        let have = positions.get(p).copied().unwrap_or(0);
        let checkpoint = checkpoints.get(p).copied().unwrap_or(0);
        if checkpoint.max(have) < low {
            tracing::error!(partition = p, position = have, checkpoint, log_start = low,
                "[SNAPSHOT] records this node needs were deleted and no snapshot covers them: channels of this partition may miss old versions (named in /health as they are applied)");
        }
        // Never below the log start: what is below is gone, and a read from there would be out of range.
        let target = checkpoint.max(have).max(low);
        if target > have || !positions.contains_key(p) {
            raised.insert(*p, target);
        }
    }
    hub.advance_positions(&raised);
    let _ = consumer.unassign();
    tracing::info!(
        "[SNAPSHOT] partitions={:?} ({}) restored channelsFromSnapshots={} positions={} tookMs={}",
        picked,
        why,
        restored,
        fmt_offsets(&raised),
        started.elapsed().as_millis()
    );
    (raised, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_snapshots_table() {
        // (position, low watermark, high watermark) → start from the snapshots
        let table = [
            (None, 0, 0, true),
            (Some(5), 0, 10, false),
            (Some(5), 0, 5 + SKIP_AHEAD_LAG, false),
            (Some(5), 0, 6 + SKIP_AHEAD_LAG, true),
            (Some(5), 6, 10, true),
            (Some(6), 6, 10, false),
        ];
        for (position, low, high, want) in table {
            assert_eq!(from_snapshots(position, low, high), want, "position {position:?}, log {low}..{high}");
        }
    }

    #[test]
    fn moved_past_end_table() {
        // (position, readable end) → not this log's history
        for (position, high, want) in [(None, 0, false), (Some(0), 0, false), (Some(5), 5, false), (Some(5000), 0, true), (Some(21), 15, true)] {
            assert_eq!(moved_past_end(position, high), want, "position {position:?}, end {high}");
        }
    }

    #[test]
    fn below_log_start_table() {
        // (position, low watermark) → records it would read are gone
        for (position, low, want) in [(None, 0, true), (Some(0), 0, false), (Some(4), 5, true), (Some(5), 5, false), (Some(9), 5, false)] {
            assert_eq!(below_log_start(position, low), want, "position {position:?}, log start {low}");
        }
    }
}
