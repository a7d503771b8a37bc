//! Applying records: each publication to its channel's state, the frames fanned out to the
//! channel's sessions in their styles; a channel's reset and delete ([`ChannelOp`]); and the stop
//! on a record of a later format.
//!
//! A record is applied to a channel only at an offset past what its state reflects
//! ([`ChannelState::covered`]: a snapshot's offset, or past a reset), and a record that would
//! give a channel with no state a new one only at an offset the partition's position has not
//! passed (below it, it is another reader's late copy of a record of a channel deleted since).
//! Versions alone cannot tell: a reset or a delete starts them over.

use super::{Channel, Hub, SessionHandle};
use crate::fanout::Fanout;
use crate::state::{ChannelState, Frame};
use shared::epoch::Epoch;
use shared::model::Model;
use shared::ChannelId;
use shared::protocol::{close, FrameStyle};
use shared::record::{ChannelOp, DecodeError, Decoded, OpKind, Publication, RecordHeaders};

impl Hub {
    /// Why the node must stop, once a reader met a record it must not skip.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.get().cloned()
    }

    /// Stops applying records, for `why` (the first reason is kept), and wakes the run loop.
    fn stop_applying(&self, why: String) {
        if self.fatal.set(why.clone()).is_ok() {
            tracing::error!(reason = %why, "[NODE] stopping: a record this node cannot read without skipping versions");
        }
        self.stopping.notify_waiters();
        self.stopping.notify_one();
    }

    /// Applies the publication of the record at `offset` of `partition` and fans it out to the
    /// channel's sessions when it is new and this node owns (or holds) the partition and is not
    /// handing it over.
    pub fn apply(&self, partition: i32, offset: i64, p: &Publication) {
        self.apply_quietly(partition, offset, p);
        self.fanout.write_pending();
    }

    /// [`Hub::apply`] without writing: the frame is queued for the next
    /// [`crate::fanout::Fanout::write_pending`].
    fn apply_quietly(&self, partition: i32, offset: i64, p: &Publication) {
        let model = self.model_of(&p.channel);
        let mut inner = self.lock();
        let pos = inner.positions.entry(partition).or_insert(offset);
        let passed = offset < *pos;
        *pos = (*pos).max(offset + 1);
        let live = inner.own.live(partition);
        let window = self.window;
        // Looked up before inserting: the id is cloned only for a channel new to the node.
        if !inner.channels.contains_key(&p.channel) {
            if passed {
                return;
            }
            let floor = inner.floor(partition);
            inner.channels.insert(p.channel.clone(), Channel::blank(floor));
        }
        let channel = inner.channels.get_mut(&p.channel).expect("present or just inserted");
        match &channel.state {
            Some(state) if offset < state.covered() => return,
            None if passed => return,
            _ => {}
        }
        let blank_resets = channel.blank_resets;
        let state = channel.state.get_or_insert_with(|| {
            let mut s = ChannelState::new(p.channel.as_str(), model, window);
            if blank_resets > 0 {
                // A deleted channel's next history, its reset not read here (the publisher had
                // forgotten the delete): it goes on in the epoch its sessions were told.
                s.reset(model, blank_resets, offset - 1);
            }
            s
        });
        let before = state.version();
        let Some(frame) = state.apply(p) else { return };
        if p.version > before + 1 {
            inner.incomplete.insert(p.channel.clone(), p.version);
        }
        if !inner.healing.is_empty() {
            if let Some(buffer) = inner.healing.get_mut(&p.channel) {
                buffer.push(p.clone());
            }
        }
        let channel = inner.channels.get_mut(&p.channel).expect("the channel just applied");
        if live && !channel.sessions.is_empty() {
            // Written after the hub lock is released, in apply order, to the sessions registered now.
            self.counters.delivered(channel.sessions.len(), channel.sessions.len() * frame.byte_len());
            self.fan_out(&channel.sessions, frame, || crate::state::event_of(p));
        }
        drop(inner);
        self.applied.notify_waiters();
    }

    /// Queues `frame` for `sessions` of the channel style, and `canvas_frame()` (today's frame of
    /// the same thing, made only when some session needs it) for those of today's style.
    fn fan_out(&self, sessions: &[SessionHandle], frame: Frame, canvas_frame: impl FnOnce() -> Option<Frame>) {
        if sessions.iter().all(|s| s.style == FrameStyle::Channel) {
            self.fanout.send(sessions.iter().map(|s| s.out.clone()).collect(), frame);
            return;
        }
        let (channel, canvas): (Vec<_>, Vec<_>) = sessions.iter().partition(|s| s.style == FrameStyle::Channel);
        if !channel.is_empty() {
            self.fanout.send(channel.iter().map(|s| s.out.clone()).collect(), frame);
        }
        if let Some(f) = canvas_frame() {
            self.fanout.send(canvas.iter().map(|s| s.out.clone()).collect(), f);
        }
    }

    /// Applies every publication of the record at `offset` of `partition` (one, or a channel's
    /// group; see [`Publication::decode_record`]) as [`Hub::apply`] does, and writes their frames
    /// together (one write per session).
    ///
    /// # Errors
    /// When the value is not a publication or a group of them: the record is skipped
    /// ([`Hub::skip`]) and the error returned for the caller's log. A record of a later format is
    /// not skipped: the hub stops applying records and the node stops ([`Hub::fatal`]).
    pub fn apply_record(&self, partition: i32, offset: i64, headers: RecordHeaders<'_>, value: Option<&[u8]>) -> Result<(), DecodeError> {
        let r = self.queue_record(partition, offset, headers, value);
        // A group's frames leave together: one write per session.
        self.write_queued();
        r
    }

    /// [`Hub::apply_record`] without writing: the frames wait for [`Hub::write_queued`], so the
    /// frames of several records already read leave with one write per session.
    ///
    /// # Errors
    /// As [`Hub::apply_record`].
    pub fn queue_record(&self, partition: i32, offset: i64, headers: RecordHeaders<'_>, value: Option<&[u8]>) -> Result<(), DecodeError> {
        // A lock-free look on every record: set once, when the node stops.
        if let Some(why) = self.fatal.get() {
            return Err(DecodeError::Stopped(why.clone()));
        }
        self.formats.read(headers.namespaces);
        match shared::record::decode(headers, value) {
            Ok(Decoded::Publications(pubs)) => {
                for p in &pubs {
                    self.apply_quietly(partition, offset, p);
                }
                Ok(())
            }
            Ok(Decoded::Op(op)) => {
                self.apply_op(partition, offset, &op);
                Ok(())
            }
            Err(e) if e.stops() => {
                self.stop_applying(format!("the record at partition {partition} offset {offset}: {e}"));
                Err(e)
            }
            Err(e) => {
                self.skip(partition, offset);
                Err(e)
            }
        }
    }

    /// Applies the op record at `offset` of `partition`: a reset gives the channel its model's
    /// empty state at version 0 of the op's reset count; a delete drops its state (the channel is
    /// blank, and forgotten once it has no session). The channel's sessions in the channel style
    /// are sent `reset` to version 0 of the new epoch and, for a model with state, that state;
    /// sessions of today's frames (which have no `reset`) are closed with 1012 Service Restart and
    /// resume with a snapshot of the new epoch. An op at an offset the channel's state reflects,
    /// or the partition's position passed, was applied already.
    pub fn apply_op(&self, partition: i32, offset: i64, op: &ChannelOp) {
        let model = self.model_of(&op.channel);
        let topic = self.topic_id();
        let mut inner = self.lock();
        let pos = inner.positions.entry(partition).or_insert(offset);
        let passed = offset < *pos;
        *pos = (*pos).max(offset + 1);
        let live = inner.own.live(partition);
        let window = self.window;
        // A delete raises the partition's reset floor past the deleted history's count, and the
        // channel's next history starts at the floor (as the publisher plans it), held here or not.
        let floor = match op.op {
            OpKind::Reset => inner.floor(partition),
            OpKind::Delete => {
                let floor = inner.floors.entry(partition).or_insert(0);
                *floor = (*floor).max(op.resets + 1);
                *floor
            }
        };
        let Some(channel) = inner.channels.get_mut(&op.channel) else {
            // Not held here: a reset starts a state (so its reset count is known), a delete has
            // nothing to drop.
            if op.op == OpKind::Reset && !passed {
                let mut state = ChannelState::new(op.channel.as_str(), model, window);
                state.reset(model, op.resets, offset);
                inner.channels.insert(op.channel.clone(), Channel { state: Some(state), ..Channel::blank(op.resets) });
            }
            return;
        };
        match &channel.state {
            Some(state) if offset < state.covered() => return,
            None if passed => return,
            _ => {}
        }
        // The epoch the channel is at after the op: a reset's count, or after a delete the next
        // history's (the partition's floor, where the publisher starts it).
        let resets = match op.op {
            OpKind::Reset => op.resets,
            OpKind::Delete => floor,
        };
        // Told already (a delete's next history, now started by its reset): nothing new to send.
        let told = op.op == OpKind::Reset && channel.resets() == resets && channel.state.as_ref().is_none_or(|s| s.version() == 0);
        match op.op {
            OpKind::Reset => {
                let state = channel.state.get_or_insert_with(|| ChannelState::new(op.channel.as_str(), model, window));
                state.reset(model, op.resets, offset);
            }
            OpKind::Delete => {
                channel.state = None;
                channel.blank_resets = resets;
            }
        }
        let sessions = channel.sessions.len();
        match op.op {
            OpKind::Reset => tracing::info!(channel = %op.channel, resets, sessions, partition, offset, "[CHANNEL] reset: the channel starts again at version 0 of its next epoch"),
            OpKind::Delete => tracing::info!(channel = %op.channel, sessions, partition, offset, "[CHANNEL] deleted: its state and recent publications are freed"),
        }
        if live && !told {
            self.tell_new_epoch(channel, &op.channel, model, &Epoch::of(&topic, resets), op.op.as_str());
        }
        if channel.state.is_none() && channel.sessions.is_empty() {
            inner.channels.remove(&op.channel);
        }
        inner.incomplete.remove(&op.channel);
        inner.healing.remove(&op.channel);
        drop(inner);
        self.applied.notify_waiters();
    }

    /// Tells the sessions of `channel` (`id`, of `model`) that it is at version 0 of `epoch` now
    /// (after a reset or a delete, `why`): those in the channel style are sent `reset` and, for a
    /// model with state, the empty state; those of today's frames (which have no `reset`) are
    /// closed with 1012 Service Restart and resume with a snapshot of the new epoch.
    pub(super) fn tell_new_epoch(&self, channel: &mut Channel, id: &ChannelId, model: &dyn Model, epoch: &Epoch, why: &str) {
        if channel.sessions.is_empty() {
            return;
        }
        let (canvas, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut channel.sessions).into_iter().partition(|s| s.style == FrameStyle::Canvas);
        channel.sessions = keep;
        for s in &canvas {
            s.close(close::SERVICE_RESTART, format!("channel {why}: reconnect"));
        }
        let outs: Vec<_> = channel.sessions.iter().map(|s| s.out.clone()).collect();
        if !outs.is_empty() {
            self.fanout.send(outs.clone(), crate::state::reset_frame(id.as_str(), 0, Some(epoch.clone())));
            if model.kind() != shared::model::ModelKind::Stream {
                self.fanout.send(outs, crate::state::state_frame(id.as_str(), 0, model.empty().as_ref(), FrameStyle::Channel));
            }
        }
    }

    /// Events applied and waiting to be written to their sessions (see [`Hub::write_queued`]).
    pub fn queued_events(&self) -> usize {
        self.fanout.queued()
    }

    /// Writes the frames of the events applied so far to their sessions (see
    /// [`crate::fanout::Fanout::write_pending`]). Call without holding anything of the hub.
    pub fn write_queued(&self) {
        self.fanout.write_pending();
    }
}

/// Queues the state frame of `state` for `sessions`, each in its style.
pub(super) fn send_state(fanout: &Fanout, sessions: &[SessionHandle], state: &ChannelState) {
    for style in [FrameStyle::Channel, FrameStyle::Canvas] {
        let outs: Vec<_> = sessions.iter().filter(|s| s.style == style).map(|s| s.out.clone()).collect();
        if !outs.is_empty() {
            fanout.send(outs, state.snapshot_frame(style));
        }
    }
}
