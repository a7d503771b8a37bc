//! Applying records: each publication to its channel's state, the frames fanned out to the
//! channel's sessions in their styles, and the stop on a record of a later format.

use super::{Channel, Hub, SessionHandle};
use crate::fanout::Fanout;
use crate::state::{ChannelState, Frame};
use shared::protocol::FrameStyle;
use shared::record::{DecodeError, Publication, RecordHeaders};

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
        let pos = inner.positions.entry(partition).or_insert(offset + 1);
        *pos = (*pos).max(offset + 1);
        let live = inner.own.live(partition);
        let window = self.window;
        // Looked up before inserting: the id is cloned only for a channel new to the node.
        if !inner.canvases.contains_key(&p.channel) {
            inner.canvases.insert(p.channel.clone(), Channel { state: None, sessions: Vec::new() });
        }
        let channel = inner.canvases.get_mut(&p.channel).expect("present or just inserted");
        let state = channel.state.get_or_insert_with(|| ChannelState::new(p.channel.as_str(), model, window));
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
        let channel = inner.canvases.get_mut(&p.channel).expect("the channel just applied");
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
        match Publication::decode_record(headers.format, value) {
            Ok(pubs) => {
                for p in &pubs {
                    self.apply_quietly(partition, offset, p);
                }
                Ok(())
            }
            Err(e @ DecodeError::NewerFormat(_)) => {
                self.stop_applying(format!("the record at partition {partition} offset {offset}: {e}"));
                Err(e)
            }
            Err(e) => {
                self.skip(partition, offset);
                Err(e)
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
