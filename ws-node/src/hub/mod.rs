//! The hub: every channel's state and the sessions subscribed to it, behind one lock.
//!
//! Applying an event and registering a session happen under the same lock, which is what makes a
//! session's stream exact: a new session gets the backlog up to version `v` and is registered in
//! the same critical section, so the next event it sees is `v + 1` (no gap, nothing twice).
//!
//! Fan-out never blocks: each session has a bounded queue, and a session whose queue is full is
//! removed and closed with 1013 (Try Again Later); it resumes by version on reconnect. Memory per
//! session is therefore bounded by its queue length.
//!
//! The hub also holds the node's *position* per partition (the next offset its state needs: last
//! applied + 1), which catch-up starts from and the broadcast consumer seeks to on assignment, and
//! the set of partitions the broadcast consumer owns.
//!
//! A partition Kafka moved to another node is *held* for a while (make-before-break): this node no
//! longer admits sessions for it, but its open sessions keep getting events, read from the log by
//! the broadcast module's release reader, until a scoped drain hands them over (the gateway's
//! failback, once the new owner serves) or the hold runs out. Between such a revocation and the
//! rebalance's next round the partitions this node keeps are *bridged*: the release reader reads
//! them too, because librdkafka hands the broadcast consumer nothing of them until that round
//! (measured: about 1 s); events already applied are dropped by version, so each is fanned out
//! once.
//!
//! A channel stream's epoch ([`shared::epoch`]) is the events topic's ID, which the node learns
//! before it serves ([`Hub::set_topic_id`]), and the channel's reset counter from its state; a
//! session whose client names another epoch gets a snapshot ([`Hub::subscribe_at`]).

mod apply;
mod handle;
mod heal;
mod restore;

pub use crate::outbox::CloseOrder;
pub use handle::{SessionHandle, SessionRx};
pub use heal::{heals, NotHealed, Rebuilt};
pub use restore::{of_another_log, Restorable};
use apply::send_state;

use crate::fanout::Fanout;
use crate::ownership::Ownership;
use crate::progress::Sampler;
use crate::state::{Backlog, ChannelState, Window};
use shared::epoch::{self, Epoch};
use shared::model::Model;
use shared::namespaces::Namespaces;
use shared::record::Publication;
use shared::replay::Offsets;
use shared::ChannelId;
use std::sync::Arc;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub use crate::ownership::Refusal;

/// A channel on this node: its state once it has a publication or a snapshot (a channel with
/// neither is blank: its sessions are sent its model's empty state, and it is forgotten when its
/// last session ends), and its sessions.
struct Channel {
    state: Option<ChannelState>,
    sessions: Vec<SessionHandle>,
    /// A blank channel's reset count: its partition's reset floor when it was made blank (where
    /// the publisher starts its next history; after a delete, the epoch its sessions were told).
    blank_resets: u64,
}

impl Channel {
    /// A blank channel at reset count `resets` (its partition's floor, [`Inner::floors`]).
    fn blank(resets: u64) -> Self {
        Self { state: None, sessions: Vec::new(), blank_resets: resets }
    }

    /// Its reset count: the state's, or the blank one's.
    fn resets(&self) -> u64 {
        self.state.as_ref().map_or(self.blank_resets, ChannelState::resets)
    }
}

struct Inner {
    channels: HashMap<ChannelId, Channel>,
    positions: Offsets,
    /// Each partition's role here ([`crate::ownership`]).
    own: Ownership,
    /// Channels whose versions skipped as they were applied (their records were deleted with no
    /// snapshot covering them), until a snapshot restores them: the version of the first event
    /// after their latest gap (a snapshot at or past the version before it covers the gap).
    incomplete: BTreeMap<ChannelId, u64>,
    /// Channels a heal is rebuilding ([`heal`]): the events applied to them since it started.
    healing: HashMap<ChannelId, Vec<Publication>>,
    /// Each partition's reset floor ([`shared::snapshot::Checkpoint::floor`]): from the
    /// checkpoints loaded, raised by the deletes applied. A channel with no history here starts
    /// at it, as the publisher starts it.
    floors: HashMap<i32, u64>,
}

impl Inner {
    /// The reset floor of `partition`.
    fn floor(&self, partition: i32) -> u64 {
        self.floors.get(&partition).copied().unwrap_or(0)
    }
}

/// What a new session is sent before live events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The channel stream's current epoch (named in the `welcome`).
    pub epoch: Epoch,
    /// The version the backlog starts after: the client's `since`, or 0 when its epoch is not
    /// the current one.
    pub since: u64,
    pub backlog: Backlog,
}

/// Channel states, sessions, positions and ownership of one node.
pub struct Hub {
    /// The namespaces: each channel's model.
    namespaces: Arc<Namespaces>,
    /// The events topic's ID (the topic half of every channel's epoch); the zero ID until learned.
    topic_id: Mutex<String>,
    window: Window,
    inner: Mutex<Inner>,
    applied: Notify,
    open_sessions: AtomicUsize,
    next_session_id: AtomicU64,
    fanout: Fanout,
    /// Times a reader's position was found below its partition's log start and the partition was
    /// restored from the snapshots ([`crate::snapshot::from_log_start`]).
    log_start_recoveries: AtomicU64,
    /// Times a reader found a position past its partition's readable end: the log moved
    /// backwards (the topic recreated, or truncated by an unclean leader election).
    log_moved_back: AtomicU64,
    /// Incomplete channels healed ([`heal`]).
    healed: AtomicU64,
    /// Woken when a reader saw an offset out of range or an end below its position: the node
    /// checks the events topic's ID then ([`Hub::suspect_history`]).
    pub history_suspect: Notify,
    /// Times the events topic's ID changed under the serving node ([`crate::node::Node::rebuild_history`]).
    pub history_changes: AtomicU64,
    /// Event counts and durations for `GET /metrics` ([`crate::counters`]).
    pub counters: crate::counters::Counters,
    /// Readable ends, polls, rebalances and how long positions stand ([`crate::progress`]).
    pub sampler: Sampler,
    /// Records read and their namespaces fingerprints ([`crate::counters::Formats`]).
    pub formats: crate::counters::Formats,
    /// Why the node must stop (a record of a format it does not read), once set; the node's run
    /// loop waits on [`Hub::stopping`].
    fatal: std::sync::OnceLock<String>,
    /// Woken when `fatal` is set.
    pub stopping: Notify,
}

impl Hub {
    /// An empty hub: channels of `namespaces`, keeping what `window` allows of their recent
    /// publications.
    pub fn new(namespaces: Arc<Namespaces>, window: Window) -> Self {
        let formats = crate::counters::Formats::new(namespaces.fingerprint());
        Self {
            namespaces,
            topic_id: Mutex::new(epoch::ZERO_TOPIC_ID.to_owned()),
            window,
            inner: Mutex::new(Inner { channels: HashMap::new(), positions: Offsets::new(), own: Ownership::default(), incomplete: BTreeMap::new(), healing: HashMap::new(), floors: HashMap::new() }),
            applied: Notify::new(),
            open_sessions: AtomicUsize::new(0),
            next_session_id: AtomicU64::new(1),
            fanout: Fanout::new(),
            log_start_recoveries: AtomicU64::new(0),
            log_moved_back: AtomicU64::new(0),
            healed: AtomicU64::new(0),
            history_suspect: Notify::new(),
            history_changes: AtomicU64::new(0),
            counters: crate::counters::Counters::default(),
            sampler: Sampler::default(),
            formats,
            fatal: std::sync::OnceLock::new(),
            stopping: Notify::new(),
        }
    }

    /// The namespaces.
    pub fn namespaces(&self) -> &Namespaces {
        &self.namespaces
    }

    /// The model of `channel`: its namespace's, or, for a namespace this node does not know (a
    /// publisher configured with more), `stream`, which keeps versions without reading data.
    pub fn model_of(&self, channel: &ChannelId) -> &dyn Model {
        match self.namespaces.of(channel) {
            Ok(ns) => ns.model.as_ref(),
            Err(_) => &shared::model::stream::Stream,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while the lock is held; a poisoned lock would mean a bug worth crashing on.
        self.inner.lock().expect("hub lock poisoned")
    }

    /// Samples every position ([`Sampler::sample`]): about once a second and on every `/health`.
    pub fn sample_progress(&self) {
        let positions = self.positions();
        self.sampler.sample(&positions, Instant::now());
    }

    /// The hub's part of the progress facts at `now`: since the last poll, since the last
    /// rebalance, and each owned partition's lag and standing time.
    pub fn progress_facts(&self, now: Instant) -> (Option<Duration>, Option<Duration>, Vec<crate::progress::PartitionProgress>) {
        let (owned, positions) = {
            let inner = self.lock();
            (inner.own.owned(), inner.positions.clone())
        };
        self.sampler.facts(now, &owned, &positions)
    }

    /// The node's position on every partition it has read (next offset its state needs).
    pub fn positions(&self) -> Offsets {
        self.lock().positions.clone()
    }

    /// Marks `partitions` as owned by this node's broadcast consumer.
    /// A held partition assigned back ends its hold: its sessions simply stay.
    pub fn assign(&self, partitions: &[i32]) {
        self.lock().own.assign(partitions);
        self.sampler.assigned(partitions, Instant::now());
    }

    /// Marks `partitions` as moved to another node but *held*: no new sessions here, and the open
    /// ones keep their events (read by the release reader) until [`Hub::end_hold`] or a scoped
    /// drain ([`Hub::pause`]) takes them. Returns the hold's number (for
    /// [`Hub::end_hold`]) and how many sessions are held.
    pub fn hold(&self, partitions: &[i32]) -> (u64, usize) {
        let mut inner = self.lock();
        let hold = inner.own.hold(partitions);
        let scope: BTreeSet<i32> = partitions.iter().copied().collect();
        (hold, inner.channels.values().flat_map(|c| &c.sessions).filter(|s| scope.contains(&s.partition)).count())
    }

    /// See [`Ownership::bridge`].
    pub fn bridge(&self, partitions: &[i32]) {
        self.lock().own.bridge(partitions);
    }

    /// See [`Ownership::assignment_came`].
    pub fn assignment_came(&self) {
        self.lock().own.assignment_came();
    }

    /// See [`Ownership::release_scope`].
    pub fn release_scope(&self, longest: Duration) -> (Vec<i32>, Vec<i32>) {
        self.lock().own.release_scope(longest)
    }

    /// Partitions held now (see [`Hub::hold`]), sorted.
    pub fn held(&self) -> Vec<i32> {
        self.lock().own.held()
    }

    /// Keeps the holds of those of `partitions` held now until `until` at least (the hold's own
    /// timer asks [`Hub::hold_deadline`] when it runs out). A hold is extended as a whole: its
    /// other partitions still held stay too (a paced failback asks for all it waits for and has
    /// drained the rest). Returns the partitions held, sorted.
    pub fn extend_holds(&self, partitions: &[i32], until: Instant) -> Vec<i32> {
        self.lock().own.extend_holds(partitions, until)
    }

    /// Until when hold number `hold` was extended ([`Hub::extend_holds`]), if it was.
    pub fn hold_deadline(&self, hold: u64) -> Option<Instant> {
        self.lock().own.hold_deadline(hold)
    }

    /// Ends hold number `hold` of those of `partitions` still in it, taking their sessions out
    /// for the caller to hand over (none when a drain took them already, the partition came
    /// back, or a later hold has it now: that one ends on its own timer).
    pub fn end_hold(&self, hold: u64, partitions: &[i32]) -> Vec<SessionHandle> {
        let mut inner = self.lock();
        let scope = inner.own.end_hold(hold, partitions);
        if scope.is_empty() {
            return Vec::new();
        }
        take_sessions(&mut inner, Some(&scope))
    }

    /// Marks `partitions` as no longer owned and takes the sessions of their channels out of the
    /// hub (they get no more events from here) for the caller to hand over.
    pub fn revoke(&self, partitions: &[i32]) -> Vec<SessionHandle> {
        let mut inner = self.lock();
        inner.own.revoke(partitions);
        let scope: BTreeSet<i32> = partitions.iter().copied().collect();
        take_sessions(&mut inner, Some(&scope))
    }

    /// Forgets every owned partition (the broadcast consumer stopped), taking all sessions.
    pub fn revoke_all(&self) -> Vec<SessionHandle> {
        let mut inner = self.lock();
        inner.own.revoke_all();
        take_sessions(&mut inner, None)
    }

    /// Partitions owned now, sorted.
    pub fn owned(&self) -> Vec<i32> {
        self.lock().own.owned()
    }

    /// Takes every session out of the hub for a drain of the whole node (they get no more events
    /// from here); the holds end ([`Ownership::drain_all`]).
    pub fn take_all(&self) -> Vec<SessionHandle> {
        let mut inner = self.lock();
        inner.own.drain_all();
        take_sessions(&mut inner, None)
    }

    /// Starts a scoped drain of `partitions`: they admit no new session, and the sessions on them
    /// stay (they keep their events) until the drain takes them one by one
    /// ([`Hub::take_session`]). Returns those sessions' channels and ids.
    /// [`Hub::resume`] ends the pause.
    pub fn pause(&self, partitions: &BTreeSet<i32>) -> Vec<(ChannelId, u64)> {
        let mut inner = self.lock();
        inner.own.pause(partitions);
        inner
            .channels
            .iter()
            .flat_map(|(c, ch)| ch.sessions.iter().filter(|s| partitions.contains(&s.partition)).map(move |s| (c.clone(), s.id)))
            .collect()
    }

    /// Starts a failback's scoped drain of `partitions`: pauses those this node holds, as
    /// [`Hub::pause`] does, and refuses the others ([`Ownership::pause_held`]), in one step with
    /// the sessions it returns. Returns the held partitions paused, their sessions' channels and
    /// ids, and the refused partitions.
    pub fn pause_held(&self, partitions: &BTreeSet<i32>) -> (BTreeSet<i32>, Vec<(ChannelId, u64)>, Vec<i32>) {
        let mut inner = self.lock();
        let (held, refused) = inner.own.pause_held(partitions);
        let sessions = inner
            .channels
            .iter()
            .flat_map(|(c, ch)| ch.sessions.iter().filter(|s| held.contains(&s.partition)).map(move |s| (c.clone(), s.id)))
            .collect();
        (held, sessions, refused)
    }

    /// Takes session `id` of `channel` out of the hub: no event reaches it after this (`None`
    /// when it is gone already: ended, or taken by a revocation or a hold's end).
    pub fn take_session(&self, channel: &ChannelId, id: u64) -> Option<SessionHandle> {
        let mut inner = self.lock();
        let channel = inner.channels.get_mut(channel)?;
        let at = channel.sessions.iter().position(|s| s.id == id)?;
        Some(channel.sessions.remove(at))
    }

    /// Ends a pause started by [`Hub::pause`]: the partitions admit sessions again where they
    /// are owned, and their holds end (the drain handed the held sessions over).
    pub fn resume(&self, partitions: &BTreeSet<i32>) {
        self.lock().own.resume(partitions);
    }

    /// Whether a session of a channel in `partition` may be served now.
    ///
    /// # Errors
    /// [`Refusal::NotOwner`] or [`Refusal::Paused`].
    pub fn admits(&self, partition: i32) -> Result<(), Refusal> {
        self.lock().own.admits(partition)
    }

    /// The version of `channel` in this node's state (0 when it has none).
    pub fn version_of(&self, channel: &ChannelId) -> u64 {
        self.lock().channels.get(channel).and_then(|c| c.state.as_ref()).map_or(0, ChannelState::version)
    }

    /// Waits until the state of `channel` reaches `since`, at most `timeout`. Returns the version.
    pub async fn wait_for_version(&self, channel: &ChannelId, since: u64, timeout: Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Register interest before checking, so an apply between the check and the wait
            // still wakes us.
            let notified = self.applied.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let have = self.version_of(channel);
            if have >= since {
                return have;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.version_of(channel);
            }
        }
    }

    /// Sets the events topic's ID (learned before the node serves); returns the one it replaces
    /// when that was another (the topic was recreated while this node ran).
    pub fn set_topic_id(&self, id: &str) -> Option<String> {
        let mut have = self.topic_id.lock().expect("topic id lock poisoned");
        if *have == id {
            return None;
        }
        Some(std::mem::replace(&mut *have, id.to_owned()))
    }

    /// The events topic's ID as known ([`epoch::ZERO_TOPIC_ID`] until learned).
    pub fn topic_id(&self) -> String {
        self.topic_id.lock().expect("topic id lock poisoned").clone()
    }

    /// The current epoch of `channel`'s stream (of a channel not held here: reset count 0; see
    /// [`Hub::epoch_in`]).
    pub fn epoch_of(&self, channel: &ChannelId) -> Epoch {
        let topic = self.topic_id();
        let resets = self.lock().channels.get(channel).map_or(0, Channel::resets);
        Epoch::of(&topic, resets)
    }

    /// The current epoch of `channel`'s stream, a channel of `partition`: of one not held here,
    /// the partition's reset floor, where its next history starts.
    pub fn epoch_in(&self, partition: i32, channel: &ChannelId) -> Epoch {
        let topic = self.topic_id();
        let inner = self.lock();
        let resets = inner.channels.get(channel).map_or_else(|| inner.floor(partition), Channel::resets);
        Epoch::of(&topic, resets)
    }

    /// [`Hub::subscribe_at`] for a client that names no epoch; returns the backlog.
    ///
    /// # Errors
    /// As [`Hub::subscribe_at`].
    pub fn subscribe(&self, handle: SessionHandle, since: u64) -> Result<Backlog, Refusal> {
        self.subscribe_at(handle, since, None).map(|start| start.backlog)
    }

    /// Registers a session for `channel` (in `partition`) whose client has applied up to `since`
    /// of the stream `epoch` (`None`: it does not say), and returns what it must be sent before
    /// live events: a client of another epoch than the current one is served as one that has
    /// nothing (a snapshot; never refused as ahead). Registration and backlog are atomic with
    /// respect to [`Hub::apply`].
    ///
    /// # Errors
    /// [`Refusal`] when the partition is not served here now, or the state is behind `since`.
    pub fn subscribe_at(&self, handle: SessionHandle, since: u64, epoch: Option<&Epoch>) -> Result<Start, Refusal> {
        let topic = self.topic_id();
        let mut inner = self.lock();
        inner.own.admits(handle.partition)?;
        let floor = inner.floor(handle.partition);
        let channel = inner.channels.entry(handle.channel.clone()).or_insert_with(|| Channel::blank(floor));
        let current = Epoch::of(&topic, channel.resets());
        let since = epoch::resume_after(since, epoch, &current);
        // A client naming the current epoch holds version `since` of this history, 0 included.
        let holds = epoch == Some(&current);
        let backlog = match &channel.state {
            Some(state) => state.backlog(since, holds, handle.style),
            None => crate::state::blank_backlog(handle.channel.as_str(), self.model_of(&handle.channel).empty().as_ref(), since, holds, handle.style),
        };
        match backlog {
            Backlog::Behind { have } => Err(Refusal::Behind { have, since }),
            // A reset names the epoch its version belongs to (the client's position is then that).
            Backlog::Reset { version, .. } => {
                let frame = crate::state::reset_frame(handle.channel.as_str(), version, Some(current.clone()));
                channel.sessions.push(handle);
                Ok(Start { epoch: current, since, backlog: Backlog::Reset { frame, version } })
            }
            backlog => {
                channel.sessions.push(handle);
                Ok(Start { epoch: current, since, backlog })
            }
        }
    }

    /// Removes session `id` of `channel` (its task ended).
    pub fn unsubscribe(&self, channel: &ChannelId, id: u64) {
        let mut inner = self.lock();
        if let Some(c) = inner.channels.get_mut(channel) {
            c.sessions.retain(|s| s.id != id);
            // A blank channel is forgotten with its last session.
            if c.state.is_none() && c.sessions.is_empty() {
                inner.channels.remove(channel);
            }
        }
    }

    /// A fresh session id.
    pub fn next_session_id(&self) -> u64 {
        self.next_session_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a session as open until the returned guard is dropped.
    pub fn session_guard(&self) -> SessionGuard<'_> {
        self.open_sessions.fetch_add(1, Ordering::Relaxed);
        SessionGuard(&self.open_sessions)
    }

    /// Open WebSocket sessions.
    pub fn open_sessions(&self) -> usize {
        self.open_sessions.load(Ordering::Relaxed)
    }

    /// Sessions in the hub per partition of their channels (owned or held; the sessions a drain
    /// took out are no longer counted), for `/health`. Partitions without sessions are left out.
    pub fn sessions_by_partition(&self) -> BTreeMap<i32, usize> {
        let mut by = BTreeMap::new();
        for s in self.lock().channels.values().flat_map(|c| &c.sessions) {
            *by.entry(s.partition).or_insert(0) += 1;
        }
        by
    }

    /// Sessions closed so far because their queue was full.
    pub fn slow_closed(&self) -> u64 {
        self.fanout.slow_closed()
    }

    /// Frames waiting in the sessions' outboxes, over every session (`/metrics`).
    pub fn outbox_frames(&self) -> usize {
        self.lock().channels.values().flat_map(|c| &c.sessions).map(|s| s.out.waiting()).sum()
    }

    /// Channels held.
    pub fn channel_count(&self) -> usize {
        self.lock().channels.values().filter(|c| c.state.is_some()).count()
    }

    /// Bytes of recent events held over every channel.
    pub fn recent_bytes(&self) -> usize {
        self.lock().channels.values().filter_map(|c| c.state.as_ref()).map(ChannelState::recent_bytes).sum()
    }
}

/// Keeps a session counted as open while alive.
pub struct SessionGuard<'a>(&'a AtomicUsize);

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn take_sessions(inner: &mut Inner, scope: Option<&BTreeSet<i32>>) -> Vec<SessionHandle> {
    let mut taken = Vec::new();
    for channel in inner.channels.values_mut() {
        if channel.sessions.is_empty() {
            continue;
        }
        let (take, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut channel.sessions)
            .into_iter()
            .partition(|s| scope.is_none_or(|ps| ps.contains(&s.partition)));
        channel.sessions = keep;
        taken.extend(take);
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Frame;
    use shared::protocol::{close, FrameStyle, ServerMessage};
    use shared::record::RecordHeaders;
    use shared::{CanvasDims, Color, PixelEvent};

    fn id(s: &str) -> ChannelId {
        ChannelId::parse(s).unwrap()
    }

    fn pixel(channel: &str, v: u64) -> PixelEvent {
        PixelEvent { canvas: id(channel), version: v, x: 0, y: 0, color: Color([0, 0, 0]), published_at_ms: 0 }
    }

    fn ev(channel: &str, v: u64) -> Publication {
        pixel(channel, v).into()
    }

    impl Hub {
        /// Restores today's canvas snapshots, as a snapshot load does.
        pub(crate) fn restore_canvases(&self, snapshots: impl IntoIterator<Item = shared::snapshot::Snapshot>) -> Result<u64, String> {
            let mut loaded = shared::snapshot::Loaded::default();
            for s in snapshots {
                loaded.add(0, shared::snapshot::Entry::Canvas(s));
            }
            Ok(self.restore(self.restorable(&loaded)?))
        }
    }

    fn version_of_frame(f: &Frame) -> u64 {
        match serde_json::from_str::<ServerMessage>(&f.text()).unwrap() {
            ServerMessage::Event(e) => e.version,
            ServerMessage::Snapshot { version, .. } => version,
            other => panic!("{other:?}"),
        }
    }

    /// The version in the event frame `wire` (one unfragmented text frame, as the fan-out wrote it).
    fn version_of_wire(wire: &bytes::Bytes) -> u64 {
        assert_eq!(wire[0], 0x81, "a final text frame");
        let start = match wire[1] {
            126 => 4,
            127 => 10,
            _ => 2,
        };
        let text: Frame = String::from_utf8(wire[start..].to_vec()).unwrap().into();
        assert_eq!(text.wire(), wire);
        version_of_frame(&text)
    }

    fn hub() -> Hub {
        Hub::new(Arc::new(Namespaces::pixels_only(CanvasDims { width: 4, height: 4 })), Window { events: 100, bytes: usize::MAX })
    }

    #[test]
    fn a_session_sees_backlog_then_live_without_gap_or_repeat() {
        let h = hub();
        h.assign(&[0]);
        for v in 1..=5 {
            h.apply(0, v as i64 - 1, &ev("c1", v));
        }
        let (handle, rx) = SessionHandle::new(1, id("c1"), 0, 16);
        let backlog = h.subscribe(handle, 3).unwrap();
        let Backlog::Events(frames) = backlog else { panic!("events expected") };
        let mut seen: Vec<u64> = frames.iter().map(version_of_frame).collect();
        for v in 6..=8 {
            h.apply(0, v as i64 - 1, &ev("c1", v));
        }
        h.apply(0, 7, &ev("c1", 8)); // redelivered record: not sent again
        h.fanout.settle();
        seen.extend(rx.out.take_waiting().iter().map(version_of_wire));
        assert_eq!(seen, vec![4, 5, 6, 7, 8]);
        assert_eq!(h.positions()[&0], 8);
    }

    #[test]
    fn a_group_record_applies_every_event_and_a_bad_record_is_skipped() {
        let h = hub();
        h.assign(&[0]);
        let (handle, rx) = SessionHandle::new(1, id("c1"), 0, 16);
        h.subscribe(handle, 0).unwrap();
        let group = PixelEvent::record_value(&[pixel("c1", 1), pixel("c1", 2), pixel("c1", 3)]);
        h.apply_record(0, 0, RecordHeaders::NONE, Some(group.as_bytes())).unwrap();
        assert!(h.apply_record(0, 1, RecordHeaders::NONE, Some(b"[]")).is_err(), "an empty group is not a record of ours");
        h.apply_record(0, 2, RecordHeaders::NONE, Some(pixel("c1", 4).to_json().as_bytes())).unwrap();
        h.fanout.settle();
        let seen: Vec<u64> = rx.out.take_waiting().iter().skip_while(|w| w[0] != 0x81).map(version_of_wire).collect();
        assert_eq!(seen, vec![1, 2, 3, 4]);
        assert_eq!(h.positions()[&0], 3, "the position is past the skipped record");
        assert_eq!(h.version_of(&id("c1")), 4);
    }

    #[test]
    fn a_scoped_drain_admits_nobody_and_its_sessions_keep_their_events_until_taken() {
        let h = hub();
        let (handle, _rx) = SessionHandle::new(1, id("c1"), 2, 16);
        assert_eq!(h.subscribe(handle, 0).unwrap_err(), Refusal::NotOwner { partition: 2 });
        h.assign(&[2]);
        let (a, ra) = SessionHandle::new(2, id("c1"), 2, 16);
        let (b, rb) = SessionHandle::new(3, id("c1"), 2, 16);
        assert!(matches!(h.subscribe(a, 0).unwrap(), Backlog::Snapshot { version: 0, .. }));
        h.subscribe(b, 0).unwrap();
        let scope = BTreeSet::from([2]);
        assert_eq!(h.pause(&scope), vec![(id("c1"), 2), (id("c1"), 3)]);
        assert_eq!(h.admits(2), Err(Refusal::Paused { partition: 2 }));
        h.apply(2, 0, &ev("c1", 1));
        let taken = h.take_session(&id("c1"), 2).expect("session 2 is in the hub");
        assert!(h.take_session(&id("c1"), 2).is_none(), "taken once");
        h.apply(2, 1, &ev("c1", 2));
        h.fanout.settle();
        let versions = |rx: &SessionRx| rx.out.take_waiting().iter().skip_while(|w| w[0] != 0x81).map(version_of_wire).collect::<Vec<u64>>();
        assert_eq!(versions(&ra), vec![1], "events until it was taken, none after");
        assert_eq!(versions(&rb), vec![1, 2], "a session not taken yet keeps its events");
        h.resume(&scope);
        assert_eq!(h.admits(2), Ok(()));
        assert_eq!(h.version_of(&id("c1")), 2, "events are applied while paused");
        drop(taken);
    }

    #[test]
    fn sessions_on_blank_canvases_allocate_no_canvas() {
        let h = hub();
        h.assign(&[0]);
        let mut rxs = Vec::new();
        for i in 0..50 {
            let (handle, rx) = SessionHandle::new(i, id(&format!("new-{i}")), 0, 16);
            assert!(matches!(h.subscribe(handle, 0).unwrap(), Backlog::Snapshot { version: 0, .. }));
            rxs.push(rx);
        }
        assert_eq!(h.channel_count(), 0, "no canvas state for canvases without events");
        assert_eq!(h.sessions_by_partition(), BTreeMap::from([(0, 50)]), "sessions on blank canvases are counted");
        for i in 0..50 {
            h.unsubscribe(&id(&format!("new-{i}")), i);
        }
        assert!(h.sessions_by_partition().is_empty());
        assert!(h.lock().channels.is_empty(), "blank canvases are forgotten with their last session");
        // A session on a blank channel still gets the channel's first event.
        let (handle, rx) = SessionHandle::new(99, id("c1"), 0, 16);
        h.subscribe(handle, 0).unwrap();
        h.apply(0, 0, &ev("c1", 1));
        h.fanout.settle();
        let seen: Vec<u64> = rx.out.take_waiting().iter().map(version_of_wire).collect();
        assert_eq!(seen, vec![1]);
        assert_eq!(h.channel_count(), 1);
        h.unsubscribe(&id("c1"), 99);
        assert_eq!(h.channel_count(), 1, "a canvas with events stays");
        drop(rxs);
    }

    /// (backlog kind, versions it holds): events → their versions; a snapshot → its version.
    fn served(b: &Backlog) -> (&'static str, Vec<u64>) {
        match b {
            Backlog::Events(fs) => ("events", fs.iter().map(version_of_frame).collect()),
            Backlog::Snapshot { version, .. } => ("snapshot", vec![*version]),
            Backlog::Reset { version, .. } => ("reset", vec![*version]),
            Backlog::Behind { have } => ("behind", vec![*have]),
        }
    }

    #[test]
    fn a_client_of_another_epoch_gets_a_snapshot_and_one_of_this_epoch_resumes_by_events() {
        let h = hub();
        h.assign(&[0]);
        assert_eq!(h.set_topic_id("T1"), Some(shared::epoch::ZERO_TOPIC_ID.to_owned()));
        for v in 1..=5 {
            h.apply(0, v as i64 - 1, &ev("c1", v));
        }
        let now = Epoch::of("T1", 0);
        assert_eq!(h.epoch_of(&id("c1")), now);
        // (since, client's epoch) → (start after, backlog)
        type Case = (u64, Option<Epoch>, u64, (&'static str, Vec<u64>));
        let cases: [Case; 8] = [
            (3, Some(now.clone()), 3, ("events", vec![4, 5])),
            // Version 0 of this history held (the blank channel was sent): every version as events.
            (0, Some(now.clone()), 0, ("events", vec![1, 2, 3, 4, 5])),
            (0, None, 0, ("snapshot", vec![5])), // a client with nothing
            (3, None, 3, ("events", vec![4, 5])), // an older client: by since alone
            (3, Some(Epoch::of("T0", 0)), 0, ("snapshot", vec![5])), // the topic was recreated
            (3, Some(Epoch::of("T1", 1)), 0, ("snapshot", vec![5])), // another reset count
            // Version 9 of another history is not "ahead" of this node: a snapshot, not a refusal.
            (9, Some(Epoch::of("T0", 0)), 0, ("snapshot", vec![5])),
            (5, Some(now.clone()), 5, ("events", vec![])),
        ];
        for (i, (since, epoch, want_since, want)) in cases.into_iter().enumerate() {
            let (handle, _rx) = SessionHandle::new(i as u64, id("c1"), 0, 16);
            let start = h.subscribe_at(handle, since, epoch.as_ref()).unwrap();
            assert_eq!((start.since, served(&start.backlog)), (want_since, want), "since={since} epoch={epoch:?}");
            assert_eq!(start.epoch, now, "the welcome names the current epoch");
        }
        let (handle, _rx) = SessionHandle::new(99, id("c1"), 0, 16);
        assert_eq!(h.subscribe_at(handle, 9, Some(&now)).unwrap_err(), Refusal::Behind { have: 5, since: 9 }, "ahead in this epoch");
        assert_eq!(h.set_topic_id("T1"), None, "the same id again is no change");
    }

    #[test]
    fn a_restored_channel_carries_its_snapshot_s_reset_count_and_a_later_reset_wins() {
        let h = hub();
        h.assign(&[0]);
        h.set_topic_id("T");
        for v in 1..=5 {
            h.apply(0, v as i64 - 1, &ev("c1", v));
        }
        let dims = CanvasDims { width: 4, height: 4 };
        let snap = |version: u64, resets: u64| shared::snapshot::Snapshot {
            canvas: id("c1"),
            version,
            epoch: resets,
            dims,
            offset: 0,
            pixels: vec![7; dims.byte_len()],
        };
        assert_eq!(h.restore_canvases([snap(4, 0)]), Ok(0), "an older snapshot of the same reset is not used");
        assert_eq!(h.restore_canvases([snap(2, 1)]), Ok(1), "a snapshot of a later reset replaces the state, even at a lower version");
        assert_eq!((h.version_of(&id("c1")), h.epoch_of(&id("c1"))), (2, Epoch::of("T", 1)));
        assert_eq!(h.restore_canvases([snap(9, 0)]), Ok(0), "nothing of an earlier reset replaces it");
        // A client still on reset 0 at version 5 gets the snapshot; one on reset 1 resumes.
        let (a, _ra) = SessionHandle::new(1, id("c1"), 0, 16);
        assert_eq!(served(&h.subscribe_at(a, 5, Some(&Epoch::of("T", 0))).unwrap().backlog), ("snapshot", vec![2]));
        h.apply(0, 5, &ev("c1", 3));
        let (b, _rb) = SessionHandle::new(2, id("c1"), 0, 16);
        assert_eq!(served(&h.subscribe_at(b, 2, Some(&Epoch::of("T", 1))).unwrap().backlog), ("events", vec![3]));
    }

    #[test]
    fn a_snapshot_of_another_canvas_size_is_refused_and_nothing_is_restored() {
        let h = hub();
        let snap = |channel: &str, dims: CanvasDims| shared::snapshot::Snapshot { canvas: id(channel), version: 3, epoch: 0, dims, offset: 9, pixels: vec![7; dims.byte_len()] };
        let ours = snap("a", CanvasDims { width: 4, height: 4 });
        let other = snap("b", CanvasDims { width: 8, height: 4 });
        let e = h.restore_canvases([ours, other]).unwrap_err();
        assert!(e.contains("8x4") && e.contains("4x4"), "{e}");
        assert_eq!((h.version_of(&id("a")), h.version_of(&id("b"))), (0, 0), "nothing restored: the caller keeps its positions");
    }

    fn op(op: shared::record::OpKind, channel: &str, resets: u64) -> shared::record::ChannelOp {
        shared::record::ChannelOp { op, channel: id(channel), resets, published_at_ms: 0 }
    }

    fn json_hub() -> Hub {
        let ns = Namespaces::from_toml("[namespaces.docs]\nmodel = \"json\"\n[namespaces.chat]\nmodel = \"stream\"\n", CanvasDims { width: 4, height: 4 }).unwrap();
        Hub::new(Arc::new(ns), Window { events: 100, bytes: usize::MAX })
    }

    fn doc(channel: &str, v: u64, data: &str) -> Publication {
        Publication { channel: id(channel), version: v, data: serde_json::value::RawValue::from_string(data.into()).unwrap(), published_at_ms: 0 }
    }

    /// The frames a session was sent, as short words: `welcome`-less kinds with their versions.
    fn words(rx: &SessionRx) -> Vec<String> {
        rx.out
            .take_waiting()
            .iter()
            .filter(|w| w[0] == 0x81)
            .map(|w| {
                let start = match w[1] {
                    126 => 4,
                    127 => 10,
                    _ => 2,
                };
                match serde_json::from_slice::<ServerMessage>(&w[start..]).unwrap() {
                    ServerMessage::Publication { version, .. } => format!("p{version}"),
                    ServerMessage::State { version, state, .. } => format!("state@{version}={state}"),
                    ServerMessage::Reset { version, epoch, .. } => format!("reset@{version}/{}", epoch.unwrap()),
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn a_reset_starts_the_channel_again_and_the_old_history_is_never_applied_on_top() {
        use shared::record::OpKind;
        let h = json_hub();
        h.assign(&[0]);
        h.set_topic_id("T");
        let (live, rx) = SessionHandle::of_style(1, id("docs:a"), 0, 64, FrameStyle::Channel);
        h.subscribe_at(live, 0, None).unwrap();
        let (old, old_rx) = SessionHandle::new(2, id("docs:a"), 0, 64);
        h.subscribe(old, 0).unwrap();
        for v in 1..=3 {
            h.apply(0, v as i64 - 1, &doc("docs:a", v, &format!(r#"{{"n":{v}}}"#)));
        }
        h.apply_op(0, 3, &op(OpKind::Reset, "docs:a", 1));
        h.fanout.settle();
        let seen = words(&rx);
        assert_eq!(seen[seen.len() - 2..], ["reset@0/T-1".to_owned(), "state@0={}".to_owned()], "{seen:?}");
        assert_eq!(old_rx.out.order().map(|o| o.code), Some(close::SERVICE_RESTART), "today's frames have no reset: closed, it resumes");
        assert_eq!((h.version_of(&id("docs:a")), h.epoch_of(&id("docs:a"))), (0, Epoch::of("T", 1)));
        // Another reader's late copies of the old history and of the op: not applied.
        h.apply(0, 2, &doc("docs:a", 3, r#"{"n":3}"#));
        h.apply_op(0, 3, &op(OpKind::Reset, "docs:a", 1));
        h.apply(0, 4, &doc("docs:a", 1, r#"{"m":1}"#));
        h.fanout.settle();
        assert_eq!(words(&rx), ["p1"]);
        let mut json = Vec::new();
        h.lock().channels[&id("docs:a")].state.as_ref().unwrap().state().write_json(&mut json);
        assert_eq!(String::from_utf8(json).unwrap(), r#"{"m":1}"#);
        // A client of the old epoch gets the state; one of the new resumes by publications.
        let (a, _ra) = SessionHandle::of_style(3, id("docs:a"), 0, 16, FrameStyle::Channel);
        assert_eq!(served(&h.subscribe_at(a, 3, Some(&Epoch::of("T", 0))).unwrap().backlog).0, "snapshot");
        let (b, _rb) = SessionHandle::of_style(4, id("docs:a"), 0, 16, FrameStyle::Channel);
        assert!(matches!(h.subscribe_at(b, 0, Some(&Epoch::of("T", 1))).unwrap().backlog, Backlog::Events(f) if f.len() == 1), "version 1 of the new epoch");
        // A snapshot of the old history does not replace the reset state; one of the new does.
        let restored = |version: u64, epoch: u64, offset: i64| Restorable {
            channel: id("docs:a"), version, epoch, offset, kind: shared::model::ModelKind::Json,
            state: shared::model::json::Json::default().from_json(&serde_json::json!({"s": version})).unwrap(),
        };
        assert_eq!(h.restore([restored(3, 0, 3)]), 0);
        assert_eq!(h.restore([restored(1, 1, 5)]), 0, "not newer than the state at version 1");
        assert_eq!(h.restore([restored(4, 1, 9)]), 1);
        h.apply(0, 5, &doc("docs:a", 2, r#"{"late":1}"#));
        assert_eq!(h.version_of(&id("docs:a")), 4, "a record the snapshot covers is not applied");
    }

    #[test]
    fn a_reset_of_a_channel_not_held_here_keeps_its_reset_count_and_a_stream_gets_no_state() {
        use shared::record::OpKind;
        let h = json_hub();
        h.assign(&[0]);
        h.set_topic_id("T");
        h.apply_op(0, 0, &op(OpKind::Reset, "docs:b", 4));
        assert_eq!((h.version_of(&id("docs:b")), h.epoch_of(&id("docs:b"))), (0, Epoch::of("T", 4)));
        let (s, rx) = SessionHandle::of_style(1, id("chat:c"), 0, 16, FrameStyle::Channel);
        h.subscribe_at(s, 0, None).unwrap();
        h.apply(0, 1, &doc("chat:c", 1, r#""hi""#));
        h.apply_op(0, 2, &op(OpKind::Reset, "chat:c", 1));
        h.fanout.settle();
        assert_eq!(words(&rx), ["p1", "reset@0/T-1"], "a stream has no state to send");
    }

    #[test]
    fn a_delete_frees_the_channel_and_a_late_copy_does_not_bring_it_back() {
        use shared::record::OpKind;
        let h = json_hub();
        h.assign(&[0]);
        h.set_topic_id("T");
        for v in 1..=3 {
            h.apply(0, v as i64 - 1, &doc("docs:a", v, &format!(r#"{{"n":{v}}}"#)));
            h.apply(0, v as i64 + 9, &doc("docs:gone", v, r#"{"x":1}"#));
        }
        let (s, rx) = SessionHandle::of_style(1, id("docs:a"), 0, 64, FrameStyle::Channel);
        h.subscribe_at(s, 3, Some(&Epoch::of("T", 0))).unwrap();
        assert_eq!(h.channel_count(), 2);
        h.apply_op(0, 20, &op(OpKind::Delete, "docs:a", 0));
        h.apply_op(0, 21, &op(OpKind::Delete, "docs:gone", 0));
        h.fanout.settle();
        assert_eq!(words(&rx), ["reset@0/T-1", "state@0={}"], "the next history's epoch: where the publisher starts it");
        assert_eq!(h.channel_count(), 0, "both states freed");
        assert_eq!(h.epoch_of(&id("docs:a")), Epoch::of("T", 1), "kept for its sessions");
        assert_eq!(h.epoch_of(&id("docs:gone")), Epoch::of("T", 0), "forgotten without sessions");
        assert!(!h.lock().channels.contains_key(&id("docs:gone")), "a deleted channel without sessions is forgotten");
        // Another reader's late copy of an old record creates nothing.
        h.apply(0, 12, &doc("docs:gone", 3, r#"{"x":1}"#));
        h.apply(0, 2, &doc("docs:a", 3, r#"{"n":3}"#));
        assert_eq!(h.channel_count(), 0);
        // The publisher starts the next history with a reset to that count: the session was told.
        h.apply_op(0, 22, &op(OpKind::Reset, "docs:a", 1));
        h.apply(0, 23, &doc("docs:a", 1, r#"{"again":1}"#));
        h.fanout.settle();
        assert_eq!(words(&rx), ["p1"]);
        assert_eq!((h.version_of(&id("docs:a")), h.epoch_of(&id("docs:a"))), (1, Epoch::of("T", 1)));
        // A publisher that forgot the delete starts it without the reset: the session's epoch holds.
        let (s2, rx2) = SessionHandle::of_style(2, id("docs:b"), 0, 64, FrameStyle::Channel);
        h.apply(0, 24, &doc("docs:b", 1, "{}"));
        h.subscribe_at(s2, 1, Some(&Epoch::of("T", 0))).unwrap();
        h.apply_op(0, 25, &op(OpKind::Delete, "docs:b", 0));
        h.apply(0, 26, &doc("docs:b", 1, r#"{"b":1}"#));
        h.fanout.settle();
        assert_eq!(words(&rx2), ["reset@0/T-1", "state@0={}", "p1"]);
        assert_eq!(h.epoch_of(&id("docs:b")), Epoch::of("T", 1));
    }

    /// A node far behind a partition (`STANDBY=false`, more than `SKIP_AHEAD_LAG`), or below its
    /// log start, restores the partition from the snapshot topic and raises its position to the
    /// checkpoint (`snapshot::restore_partitions`: `restorable`, `restore`, `advance_positions`).
    /// A delete between its position and the checkpoint is never read: the snapshot topic keeps
    /// no trace of it (`Loaded::tombstone` only drops what it holds), so the channel keeps the
    /// deleted history's state, which new sessions are served, while the publisher answers
    /// version 0 of the next epoch.
    #[test]
    fn a_restore_past_a_delete_forgets_the_deleted_channel() {
        let h = json_hub();
        h.assign(&[0]);
        h.set_topic_id("T");
        for v in 1..=3 {
            h.apply(0, v as i64 - 1, &doc("docs:a", v, &format!(r#"{{"n":{v}}}"#)));
        }
        // The log goes on without the node: docs:a deleted at offset 3 (its snapshot
        // tombstoned), other channels' records, a checkpoint at 10.
        let mut loaded = shared::snapshot::Loaded::default();
        loaded.tombstone(0, "docs:a");
        loaded.add(0, shared::snapshot::Entry::Checkpoint(shared::snapshot::Checkpoint { offset: 10, floor: 2 }));
        let (held, rx) = SessionHandle::of_style(1, id("docs:a"), 0, 16, FrameStyle::Channel);
        h.subscribe_at(held, 3, Some(&Epoch::of("T", 0))).unwrap();
        h.restore(h.restorable(&loaded).unwrap());
        assert_eq!(h.forget_deleted(&loaded, 1), 1);
        h.advance_positions(&Offsets::from([(0, 10)]));
        h.fanout.settle();
        assert_eq!(words(&rx), ["reset@0/T-2", "state@0={}"], "its session is told the next history's epoch: the checkpoint's floor");
        let (s, _rx) = SessionHandle::of_style(2, id("docs:a"), 0, 16, FrameStyle::Channel);
        let start = h.subscribe_at(s, 3, Some(&Epoch::of("T", 0))).unwrap();
        assert_eq!((h.version_of(&id("docs:a")), served(&start.backlog), start.epoch), (0, ("snapshot", vec![0]), Epoch::of("T", 2)), "the publisher's docs:a is at version 0");
        assert_eq!(h.channel_count(), 0, "a deleted channel's state is freed on every node");
        assert_eq!(h.epoch_in(0, &id("docs:new")), Epoch::of("T", 2), "a channel with no history starts at the floor");
    }

    #[test]
    fn behind_clients_are_refused_until_state_catches_up() {
        let h = hub();
        h.assign(&[0]);
        h.apply(0, 0, &ev("c1", 1));
        let (handle, _rx) = SessionHandle::new(1, id("c1"), 0, 16);
        assert_eq!(h.subscribe(handle, 3).unwrap_err(), Refusal::Behind { have: 1, since: 3 });
    }

    #[test]
    fn a_full_queue_closes_the_session_with_1013_and_others_keep_going() {
        let h = hub();
        h.assign(&[0]);
        let (slow, slow_rx) = SessionHandle::new(1, id("c1"), 0, 2);
        let (fast, fast_rx) = SessionHandle::new(2, id("c1"), 0, 64);
        h.subscribe(slow, 0).unwrap();
        h.subscribe(fast, 0).unwrap();
        for v in 1..=5 {
            h.apply(0, v as i64 - 1, &ev("c1", v));
        }
        h.fanout.settle();
        let order = slow_rx.out.order().expect("slow session closed");
        assert_eq!(order.code, close::TRY_AGAIN_LATER);
        assert_eq!(h.slow_closed(), 1);
        assert_eq!(fast_rx.out.take_waiting().len(), 5);
    }

    #[test]
    fn revoke_takes_only_the_sessions_of_revoked_partitions() {
        let h = hub();
        h.assign(&[0, 1]);
        let (a, _ra) = SessionHandle::new(1, id("a"), 0, 4);
        let (b, _rb) = SessionHandle::new(2, id("b"), 1, 4);
        h.subscribe(a, 0).unwrap();
        h.subscribe(b, 0).unwrap();
        let taken = h.revoke(&[1]);
        assert_eq!(taken.iter().map(|s| s.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(h.owned(), vec![0]);
        assert_eq!(h.revoke_all().len(), 1);
        assert!(h.owned().is_empty());
    }

    #[test]
    fn a_held_partition_keeps_its_sessions_live_but_admits_nobody_new() {
        let h = hub();
        h.assign(&[0, 1]);
        let (a, ra) = SessionHandle::new(1, id("a"), 0, 8);
        let (b, rb) = SessionHandle::new(2, id("b"), 1, 8);
        h.subscribe(a, 0).unwrap();
        h.subscribe(b, 0).unwrap();
        let (hold, held) = h.hold(&[1]);
        assert_eq!(held, 1);
        assert_eq!((h.owned(), h.held()), (vec![0], vec![1]));
        assert_eq!(h.admits(1), Err(Refusal::NotOwner { partition: 1 }));
        h.apply(1, 0, &ev("b", 1));
        h.apply(0, 0, &ev("a", 1));
        h.fanout.settle();
        assert_eq!((ra.out.take_waiting().len(), rb.out.take_waiting().len()), (1, 1), "held sessions still get events");
        // A scoped drain keeps the hold while it hands the sessions over, and its end ends the
        // hold; ending it later finds nothing.
        let sessions = h.pause(&BTreeSet::from([1]));
        assert_eq!(sessions, vec![(id("b"), 2)]);
        assert_eq!(h.held(), vec![1], "the release reader goes on reading it during the drain");
        assert!(h.take_session(&sessions[0].0, sessions[0].1).is_some());
        h.resume(&BTreeSet::from([1]));
        assert!(h.held().is_empty());
        assert!(h.end_hold(hold, &[1]).is_empty());
    }

    #[test]
    fn a_hold_ends_by_handing_over_or_by_the_partition_coming_back() {
        let h = hub();
        h.assign(&[0, 1]);
        let (a, _ra) = SessionHandle::new(1, id("a"), 0, 8);
        let (b, _rb) = SessionHandle::new(2, id("b"), 1, 8);
        h.subscribe(a, 0).unwrap();
        h.subscribe(b, 0).unwrap();
        let (hold, _) = h.hold(&[0, 1]);
        h.assign(&[0]); // partition 0 came back: its session stays, nothing to hand over
        let taken = h.end_hold(hold, &[0, 1]);
        assert_eq!(taken.iter().map(|s| s.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!((h.owned(), h.held()), (vec![0], vec![]));
        let (c, rc) = SessionHandle::new(3, id("b"), 1, 8);
        assert!(h.subscribe(c, 0).is_err());
        h.apply(1, 0, &ev("b", 1));
        h.fanout.settle();
        assert!(rc.out.take_waiting().is_empty());
    }

    #[test]
    fn an_earlier_hold_s_timer_does_not_end_a_later_hold_of_the_same_partition() {
        let h = hub();
        h.assign(&[1]);
        let (b, _rb) = SessionHandle::new(2, id("b"), 1, 8);
        h.subscribe(b, 0).unwrap();
        let (first, _) = h.hold(&[1]);
        h.assign(&[1]); // back before the first hold ran out
        let (second, held) = h.hold(&[1]); // and moved again
        assert_eq!(held, 1);
        assert!(h.end_hold(first, &[1]).is_empty(), "the first hold's timer finds its hold over");
        assert_eq!(h.held(), vec![1], "the second hold goes on");
        assert_eq!(h.end_hold(second, &[1]).len(), 1);
        assert!(h.held().is_empty());
    }

    #[test]
    fn a_hold_is_extended_only_for_held_partitions_and_only_later() {
        let h = hub();
        h.assign(&[0, 1, 2]);
        let (hold, _) = h.hold(&[0, 1]);
        assert_eq!(h.hold_deadline(hold), None, "not extended: REVOKE_HOLD_MS applies");
        let t = Instant::now() + Duration::from_secs(10);
        assert_eq!(h.extend_holds(&[1, 2, 5, 1], t), vec![1], "2 is owned, 5 unknown: only 1 is held");
        assert_eq!(h.hold_deadline(hold), Some(t));
        assert_eq!(h.extend_holds(&[0], t - Duration::from_secs(5)), vec![0]);
        assert_eq!(h.hold_deadline(hold), Some(t), "an earlier deadline does not shorten the hold");
        h.end_hold(hold, &[0, 1]);
        assert_eq!(h.hold_deadline(hold), None);
        assert!(h.extend_holds(&[0, 1], t).is_empty(), "nothing held any more");
    }

    #[test]
    fn bridged_partitions_are_read_until_the_next_round_and_each_event_goes_out_once() {
        let h = hub();
        h.assign(&[0, 1]);
        let (a, ra) = SessionHandle::new(1, id("a"), 0, 8);
        h.subscribe(a, 0).unwrap();
        h.hold(&[1]);
        h.bridge(&h.owned());
        assert_eq!(h.release_scope(Duration::from_secs(10)), (vec![1], vec![0]));
        // Both readers deliver the same record of partition 0: one frame.
        h.apply(0, 0, &ev("a", 1));
        h.apply(0, 0, &ev("a", 1));
        h.apply(0, 1, &ev("a", 2));
        h.fanout.settle();
        assert_eq!(ra.out.take_waiting().len(), 2);
        h.assignment_came(); // the revocation's own round: still stalled
        assert_eq!(h.release_scope(Duration::from_secs(10)), (vec![1], vec![0]));
        h.assignment_came(); // the next round
        assert_eq!(h.release_scope(Duration::from_secs(10)), (vec![1], vec![]));
        // A bridge whose round never comes ends by itself.
        h.bridge(&[0]);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(h.release_scope(Duration::from_millis(1)), (vec![1], vec![]));
    }

    #[tokio::test]
    async fn wait_for_version_wakes_on_apply() {
        let h = std::sync::Arc::new(hub());
        let h2 = h.clone();
        let waiter = tokio::spawn(async move { h2.wait_for_version(&id("c1"), 2, Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        h.apply(0, 0, &ev("c1", 1));
        h.apply(0, 1, &ev("c1", 2));
        assert_eq!(waiter.await.unwrap(), 2);
        assert_eq!(h.wait_for_version(&id("c1"), 9, Duration::from_millis(20)).await, 2);
    }
}
