//! Restores and the log's edges: channels from snapshots, positions raised, records skipped, and
//! the channels whose versions skipped.

use super::{Channel, Hub, SessionHandle};
use crate::state::ChannelState;
use shared::model::pixels::Raster;
use shared::model::stream::Stream;
use shared::model::{Model as _, ModelKind, State};
use shared::replay::Offsets;
use shared::snapshot::Loaded;
use shared::ChannelId;
use std::sync::atomic::Ordering;

/// The position a partition's state may take when its reader stands at `read` (past records and
/// markers): `read`, only when that is the partition's readable `end` exactly (nothing is left to
/// read: what lies between is markers and aborted records, never delivered), above the
/// `position`, and the position is still the one the reader's caller `seen` (one moved by
/// another reader, or lowered for a log that moved backwards, is left alone). Pure.
pub fn past_end_marker(position: i64, seen: i64, read: i64, end: i64) -> Option<i64> {
    (position == seen && read == end && read > position).then_some(read)
}

/// A snapshot read under this node's namespaces: what [`Hub::restore`] restores.
#[derive(Debug, Clone)]
pub struct Restorable {
    pub channel: ChannelId,
    pub version: u64,
    /// The channel's reset counter.
    pub epoch: u64,
    /// The events-topic offset after the last record it reflects.
    pub offset: i64,
    pub kind: ModelKind,
    pub state: Box<dyn State>,
}

impl Hub {
    /// The snapshots of `loaded` as states of this node's namespaces. A channel of a namespace
    /// this node does not know is restored as a `stream` (its versions, not its data).
    ///
    /// # Errors
    /// A snapshot that does not read under its namespace (a canvas of another size, another
    /// model: the publisher's namespaces differ from this node's), naming it: nothing may be
    /// restored, and the caller must not move its positions to the snapshots' checkpoints (that
    /// channel's records would be skipped).
    pub fn restorable(&self, loaded: &Loaded) -> Result<Vec<Restorable>, String> {
        let mut out = Vec::with_capacity(loaded.canvases.len() + loaded.channels.len());
        for (_, s) in loaded.canvases.values() {
            let state = match self.namespaces().of(&s.canvas) {
                Ok(ns) if ns.dims() == Some(s.dims) => {
                    Box::new(Raster::from_bytes(s.dims, s.pixels.clone()).expect("decode checked the pixel length")) as Box<dyn State>
                }
                Ok(ns) => match ns.dims() {
                    Some(d) => {
                        return Err(format!(
                            "the snapshot of {} is {}x{}, not its namespace's canvas size {}x{} (this node's size differs from the publisher's)",
                            s.canvas, s.dims.width, s.dims.height, d.width, d.height
                        ))
                    }
                    None => return Err(format!("the snapshot of {} is a canvas, but its namespace's model is {}", s.canvas, ns.kind())),
                },
                Err(_) => Stream.empty(),
            };
            let kind = state_kind(self, &s.canvas);
            out.push(Restorable { channel: s.canvas.clone(), version: s.version, epoch: s.epoch, offset: s.offset, kind, state });
        }
        for (_, s) in loaded.channels.values() {
            let state = match self.namespaces().of(&s.channel) {
                Ok(ns) => s.state(ns.model.as_ref()).map_err(|e| format!("the snapshot of {}: {e}", s.channel))?,
                Err(_) => Stream.empty(),
            };
            let kind = state_kind(self, &s.channel);
            out.push(Restorable { channel: s.channel.clone(), version: s.version, epoch: s.epoch, offset: s.offset, kind, state });
        }
        Ok(out)
    }

    /// Restores channels from their snapshots where a snapshot is newer than the state. Sessions
    /// already on a restored channel get the state frame, as after any resync. Returns how many
    /// channels were restored.
    pub fn restore(&self, snapshots: impl IntoIterator<Item = Restorable>) -> u64 {
        let mut restored = 0;
        let mut inner = self.lock();
        for snap in snapshots {
            let window = self.window;
            let channel = inner.channels.entry(snap.channel.clone()).or_insert_with(|| Channel::blank(0));
            // A later reset is newer whatever its version; within one, the higher version.
            if (snap.epoch, snap.version) <= channel.state.as_ref().map_or((0, 0), |s| (s.resets(), s.version())) {
                continue;
            }
            let state = channel.state.insert(ChannelState::restored(snap.channel.as_str(), snap.kind, snap.state, snap.version, snap.epoch, snap.offset, window));
            restored += 1;
            if !channel.sessions.is_empty() {
                super::send_state(&self.fanout, &channel.sessions, state);
            }
            inner.incomplete.remove(&snap.channel);
            inner.healing.remove(&snap.channel);
        }
        drop(inner);
        self.fanout.write_pending();
        restored
    }

    /// After `loaded` was restored ([`Hub::restore`]) and before the positions rise to its
    /// checkpoints: raises each partition's reset floor to its checkpoint's, and forgets the
    /// channels the snapshots say were deleted while this node did not read the log. A channel
    /// held here whose state reflects only records below its partition's checkpoint, with no
    /// snapshot in `loaded`, was deleted (every other channel with a record below a checkpoint
    /// has a snapshot; a deleted one's was tombstoned): its state is dropped, and its sessions
    /// are told its next epoch as a delete read from the log tells them. Channels of partitions
    /// `loaded` has no checkpoint for are not touched, nor any on a load that skipped an unreadable
    /// snapshot. Returns how many were forgotten.
    pub fn forget_deleted(&self, loaded: &Loaded, partition_count: u32) -> usize {
        let topic = self.topic_id();
        let mut inner = self.lock();
        for (p, f) in &loaded.floors {
            let floor = inner.floors.entry(*p).or_insert(0);
            *floor = (*floor).max(*f);
        }
        if loaded.skipped > 0 {
            // An unreadable snapshot may be the one of a channel held here: nothing is taken
            // for deleted on such a load.
            return 0;
        }
        let snapshotted = |c: &ChannelId| loaded.canvases.contains_key(c) || loaded.channels.contains_key(c);
        let gone: Vec<(ChannelId, i32, i64)> = inner
            .channels
            .iter()
            .filter_map(|(c, ch)| {
                let state = ch.state.as_ref()?;
                let p = shared::partitioner::partition_for(c.as_str().as_bytes(), partition_count.max(1)) as i32;
                let checkpoint = *loaded.checkpoints.get(&p)?;
                (state.covered() <= checkpoint && !snapshotted(c)).then(|| (c.clone(), p, checkpoint))
            })
            .collect();
        for (c, p, checkpoint) in &gone {
            let (floor, live) = (inner.floor(*p), inner.own.live(*p));
            let model = self.model_of(c);
            let channel = inner.channels.get_mut(c).expect("listed above");
            tracing::info!(channel = %c, partition = p, checkpoint, sessions = channel.sessions.len(),
                "[SNAPSHOT] deleted while this node did not read its partition (no snapshot below the checkpoint): its state is freed");
            channel.state = None;
            channel.blank_resets = floor;
            if live {
                self.tell_new_epoch(channel, c, model, &shared::epoch::Epoch::of(&topic, floor), "delete");
            }
            if channel.sessions.is_empty() {
                inner.channels.remove(c);
            }
            inner.incomplete.remove(c);
            inner.healing.remove(c);
        }
        drop(inner);
        self.fanout.write_pending();
        gone.len()
    }

    /// Raises the positions to `positions` where they are higher (catch-up sets the positions of
    /// partitions it had nothing to read on).
    pub fn advance_positions(&self, positions: &Offsets) {
        let mut inner = self.lock();
        for (p, o) in positions {
            let pos = inner.positions.entry(*p).or_insert(*o);
            *pos = (*pos).max(*o);
        }
    }

    /// Raises positions past the transaction markers at their partition's end: for each partition
    /// in `read` (where a reader's consumer stands, past records and markers), see
    /// [`past_end_marker`], with the position the caller saw in `seen` and the readable end as
    /// last sampled. Only the partitions `reader` applies every record of now are raised (the
    /// standby reader skips the records of a partition the broadcast consumer owns).
    pub fn reached_ends(&self, reader: crate::ownership::Reader, seen: &Offsets, read: &Offsets) {
        let ends = self.sampler.ends();
        let mut inner = self.lock();
        for (p, to) in read {
            let applies = inner.own.applies(reader, *p);
            let (true, Some(seen), Some(end)) = (applies, seen.get(p), ends.get(p)) else { continue };
            if let Some(pos) = inner.positions.get_mut(p) {
                if let Some(raised) = past_end_marker(*pos, *seen, *to, *end) {
                    *pos = raised;
                }
            }
        }
    }

    /// Counts one restore of partitions whose position was below their log start.
    pub fn count_log_start_recovery(&self) {
        self.log_start_recoveries.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times partitions were restored because their position was below the log start.
    pub fn log_start_recoveries(&self) -> u64 {
        self.log_start_recoveries.load(Ordering::Relaxed)
    }

    /// Channels whose versions skipped as they were applied: their records were deleted with no
    /// snapshot covering them, so they may miss old pixels (sorted; at most `limit`), and how many
    /// there are in all.
    pub fn incomplete_channels(&self, limit: usize) -> (Vec<String>, usize) {
        let inner = self.lock();
        (inner.incomplete.keys().take(limit).map(|c| c.to_string()).collect(), inner.incomplete.len())
    }

    /// Advances the position of `partition` past a record that could not be applied (not a pixel
    /// event), so catch-up and assignment do not read it again.
    pub fn skip(&self, partition: i32, offset: i64) {
        let mut inner = self.lock();
        let pos = inner.positions.entry(partition).or_insert(offset + 1);
        *pos = (*pos).max(offset + 1);
    }

    /// Counts one partition found with its position past its readable end.
    pub fn count_log_moved_back(&self) {
        self.log_moved_back.fetch_add(1, Ordering::Relaxed);
        self.history_suspect.notify_one();
    }

    /// How many times a position was found past its partition's readable end.
    pub fn log_moved_back(&self) -> u64 {
        self.log_moved_back.load(Ordering::Relaxed)
    }

    /// Asks the node to check the events topic's ID now (a reader saw an offset out of range).
    pub fn suspect_history(&self) {
        self.history_suspect.notify_one();
    }

    /// Forgets everything of `partitions` (of a topic of `partition_count`): their log moved
    /// backwards, so their channels' states belong to another history. Their channels are
    /// dropped, their positions set to `positions` (lower ones included), and their sessions
    /// returned for the caller to close: their clients resume with the state rebuilt.
    pub fn forget_partitions(&self, partitions: &[i32], partition_count: u32, positions: &Offsets) -> Vec<SessionHandle> {
        let in_scope = |c: &shared::ChannelId| partitions.contains(&(shared::partitioner::partition_for(c.as_str().as_bytes(), partition_count.max(1)) as i32));
        let mut inner = self.lock();
        let gone: Vec<shared::ChannelId> = inner.channels.keys().filter(|c| in_scope(c)).cloned().collect();
        let mut sessions = Vec::new();
        for c in &gone {
            if let Some(ch) = inner.channels.remove(c) {
                sessions.extend(ch.sessions);
            }
            inner.incomplete.remove(c);
            inner.healing.remove(c);
        }
        for p in partitions {
            match positions.get(p) {
                Some(o) => inner.positions.insert(*p, *o),
                None => inner.positions.remove(p),
            };
        }
        sessions
    }

    /// Forgets every channel, session and position: the events topic is another one now (its ID
    /// changed), so nothing the hub holds belongs to its history. Returns the sessions.
    pub fn forget_all(&self) -> Vec<SessionHandle> {
        let mut inner = self.lock();
        inner.positions.clear();
        inner.incomplete.clear();
        inner.healing.clear();
        inner.channels.drain().flat_map(|(_, ch)| ch.sessions).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::past_end_marker;

    #[test]
    fn past_end_marker_table() {
        // (position, seen, reader's position, readable end) → new position
        let table = [
            (13, 13, 14, 14, Some(14)), // a commit marker at 13 ends the partition
            (10, 10, 14, 14, Some(14)), // an aborted transaction's records and marker
            (13, 13, 14, 20, None),     // records left to read: they move the position
            (13, 12, 14, 14, None),     // another reader moved it meanwhile
            (14, 14, 14, 14, None),     // at the end already
            (0, 0, 5000, 0, None),      // a reader of the old history, past the end of a new log
            (0, 5000, 5000, 5000, None), // lowered for a log that moved back after it was seen
        ];
        for (position, seen, read, end, want) in table {
            assert_eq!(past_end_marker(position, seen, read, end), want, "position {position}, seen {seen}, read {read}, end {end}");
        }
    }
}

/// Marks the snapshots of channels in `partitions` (of a topic of `partition_count`) as covering
/// nothing: those partitions' logs moved backwards (the topic recreated with the snapshot topic
/// kept, or truncated), so the offsets the snapshots name are of another log, and a record of the
/// new one must not be taken for one they reflect ([`crate::state::ChannelState::covered`]).
pub fn of_another_log(restorable: &mut [Restorable], partitions: &[i32], partition_count: u32) {
    for r in restorable {
        let p = shared::partitioner::partition_for(r.channel.as_str().as_bytes(), partition_count.max(1)) as i32;
        if partitions.contains(&p) {
            r.offset = 0;
        }
    }
}

/// The model kind `channel` is kept under here ([`Hub::model_of`]).
fn state_kind(hub: &Hub, channel: &ChannelId) -> ModelKind {
    hub.model_of(channel).kind()
}
