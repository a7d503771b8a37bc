//! Application progress: what tells a node that answers `/health` from one that serves.
//!
//! Three ways a ready node stops making progress while its HTTP side still answers:
//! - the broadcast consumer stops returning from polls (librdkafka heartbeats from its own
//!   thread, so the group keeps the node's partitions until `max.poll.interval.ms`);
//! - an owned partition's position stands while records wait (its lag is above zero and the
//!   position has not moved for `STALL_AFTER_MS`; a partition with nothing to read is idle, not
//!   stalled);
//! - the process was frozen (SIGSTOP, a long pause): its assignment may have been given away
//!   meanwhile, and the first answer after it must not report that ownership as current. The
//!   [`Watch`] thread ticks every [`TICK`]; a gap of more than [`PAUSE_GAP`] between ticks, or a
//!   tick older than that when `/health` is answered (the handler ran before the ticker after
//!   SIGCONT), is a pause. The ownership is confirmed again by the group: a rebalance callback
//!   after the pause, or, for a pause shorter than the session timeout, a few heartbeats with no
//!   rebalance (the member survived; a heartbeat would have learnt of a rebalance).
//!
//! [`assess`] is the pure rule over those facts; the node calls it for every `/health`.

use shared::api::Pause;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the watch thread ticks.
pub const TICK: Duration = Duration::from_millis(200);
/// A gap between ticks longer than this is a pause of the process (ten ticks: scheduling delays
/// of a busy machine stay well below it).
pub const PAUSE_GAP: Duration = Duration::from_secs(2);

/// The thresholds of [`assess`].
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// A poll not returned for this long, or an owned partition standing this long with records
    /// waiting, is a stall (`STALL_AFTER_MS`).
    pub stall_after: Duration,
    /// The broadcast consumer's `session.timeout.ms`: a pause longer than this lost the assignment.
    pub session_timeout: Duration,
    /// Its `heartbeat.interval.ms`: after a shorter pause, three heartbeats without a rebalance
    /// confirm the assignment.
    pub heartbeat_interval: Duration,
}

impl Settings {
    /// How long after a pause shorter than the session timeout the assignment counts as
    /// confirmed when no rebalance came: three heartbeats and a second for their answers.
    pub fn confirm_after(&self) -> Duration {
        3 * self.heartbeat_interval + Duration::from_secs(1)
    }
}

/// One owned partition's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionProgress {
    pub partition: i32,
    /// `end − position` as last read (`None`: the end is not known yet).
    pub lag: Option<i64>,
    /// Since the position last moved or the partition was assigned.
    pub since_moved: Duration,
}

/// The facts [`assess`] judges, all measured at the same moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Since the broadcast consumer last returned from a poll (`None`: it does not run).
    pub since_poll: Option<Duration>,
    /// Since the watch thread last ticked.
    pub since_tick: Duration,
    /// The last pause the watch thread saw, and how long ago it ended.
    pub last_pause: Option<(Duration, Duration)>,
    /// Since the last rebalance callback (`None`: none yet).
    pub since_rebalance: Option<Duration>,
    pub owned: Vec<PartitionProgress>,
}

/// What [`assess`] concludes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    pub ownership_confirmed: bool,
    pub stalled_partitions: Vec<i32>,
    /// Why the node is DEGRADED, in an operator's words (`None`: it makes progress).
    pub degraded: Option<String>,
}

/// Judges a ready node's progress.
pub fn assess(f: &Facts, s: &Settings) -> Assessment {
    let ownership_confirmed = if f.since_tick > PAUSE_GAP {
        // Frozen until just now: the watch thread has not run since.
        false
    } else {
        match f.last_pause {
            None => true,
            Some((length, ago)) => {
                let rebalanced_since = f.since_rebalance.is_some_and(|r| r < ago);
                // A pause longer than the session timeout lost the assignment: only the group's
                // rebalance confirms the new one (with a session timeout's margin in case none comes).
                let wait = if length >= s.session_timeout { s.session_timeout + s.confirm_after() } else { s.confirm_after() };
                rebalanced_since || ago >= wait
            }
        }
    };
    let stalled_partitions: Vec<i32> =
        f.owned.iter().filter(|p| p.lag.is_some_and(|l| l > 0) && p.since_moved >= s.stall_after).map(|p| p.partition).collect();
    let degraded = if !ownership_confirmed {
        let pause = if f.since_tick > PAUSE_GAP { f.since_tick } else { f.last_pause.map_or(Duration::ZERO, |(l, _)| l) };
        Some(format!("the process was frozen for {}ms; its assignment is not confirmed by the group yet", pause.as_millis()))
    } else if let Some(d) = f.since_poll.filter(|d| *d >= s.stall_after) {
        Some(format!("the broadcast consumer has not returned from a poll for {}ms", d.as_millis()))
    } else if !stalled_partitions.is_empty() {
        Some(format!(
            "owned partitions {:?} have records waiting and their positions have not moved for {}ms or more",
            stalled_partitions,
            s.stall_after.as_millis()
        ))
    } else {
        None
    };
    Assessment { ownership_confirmed, stalled_partitions, degraded }
}

/// The watch thread's record: the last tick and the last pause.
#[derive(Debug)]
pub struct Watch {
    started: Instant,
    /// Milliseconds from `started` of the last tick.
    last_tick_ms: AtomicU64,
    /// The last pause: its length, when it ended (as an `Instant`) and its Unix epoch ms.
    last_pause: Mutex<Option<(Duration, Instant, u64)>>,
}

impl Watch {
    /// Starts the watch thread (it runs for the life of the process).
    pub fn start() -> Arc<Self> {
        let watch = Arc::new(Self { started: Instant::now(), last_tick_ms: AtomicU64::new(0), last_pause: Mutex::new(None) });
        let w = watch.clone();
        std::thread::Builder::new()
            .name("pause-watch".into())
            .spawn(move || loop {
                std::thread::sleep(TICK);
                w.tick(Instant::now());
            })
            .expect("spawn the pause-watch thread");
        watch
    }

    fn tick(&self, now: Instant) {
        let now_ms = now.duration_since(self.started).as_millis() as u64;
        let last = self.last_tick_ms.swap(now_ms, Ordering::AcqRel);
        let gap = Duration::from_millis(now_ms.saturating_sub(last));
        if gap > PAUSE_GAP {
            let length = gap.saturating_sub(TICK);
            tracing::warn!(
                "[NODE] the process did not run for {}ms (frozen, or starved of CPU); the assignment counts as unconfirmed until the group confirms it",
                length.as_millis()
            );
            *self.last_pause.lock().expect("pause lock") = Some((length, now, shared::event::now_ms()));
        }
    }

    /// Since the last tick, at `now`.
    pub fn since_tick(&self, now: Instant) -> Duration {
        let last = self.started + Duration::from_millis(self.last_tick_ms.load(Ordering::Acquire));
        now.saturating_duration_since(last)
    }

    /// The last pause: (its length, how long ago it ended) at `now`.
    pub fn last_pause(&self, now: Instant) -> Option<(Duration, Duration)> {
        self.last_pause.lock().expect("pause lock").map(|(l, at, _)| (l, now.saturating_duration_since(at)))
    }

    /// The last pause as `/health` reports it.
    pub fn reported_pause(&self) -> Option<Pause> {
        self.last_pause.lock().expect("pause lock").map(|(l, _, at_ms)| Pause { at_ms, for_ms: l.as_millis() as u64 })
    }
}

/// The progress facts the readers report (readable ends, polls, rebalances) and how long each
/// partition's position has stood, under a lock of their own (the broadcast consumer notes a poll
/// every 100 ms; the hub's lock is for applying events).
#[derive(Debug, Default)]
pub struct Sampler {
    st: Mutex<SamplerState>,
}

#[derive(Debug, Default)]
struct SamplerState {
    /// Per partition, its readable end as last read: lag = end − position.
    ends: shared::replay::Offsets,
    /// Per partition, its position when last sampled and since when it has been there.
    moved: HashMap<i32, (i64, Instant)>,
    last_broadcast_poll: Option<Instant>,
    /// The last rebalance callback of the broadcast consumer: when, and its Unix epoch ms.
    rebalanced_at: Option<(Instant, u64)>,
}

impl Sampler {
    fn lock(&self) -> std::sync::MutexGuard<'_, SamplerState> {
        self.st.lock().expect("progress sampler lock poisoned")
    }

    /// Records the readable end of each partition (for the lag in `/health`).
    pub fn set_ends(&self, ends: shared::replay::Offsets) {
        self.lock().ends = ends;
    }

    /// The readable end of each partition as last read.
    pub fn ends(&self) -> shared::replay::Offsets {
        self.lock().ends.clone()
    }

    /// Notes where every position is now (`positions`); a position that changed since the last
    /// sample has moved now.
    pub fn sample(&self, positions: &shared::replay::Offsets, now: Instant) {
        let mut st = self.lock();
        for (p, pos) in positions {
            match st.moved.get_mut(p) {
                Some(s) if s.0 == *pos => {}
                Some(s) => *s = (*pos, now),
                None => {
                    st.moved.insert(*p, (*pos, now));
                }
            }
        }
    }

    /// `partitions` were assigned at `now`: a position stands from its assignment on at the
    /// earliest.
    pub fn assigned(&self, partitions: &[i32], now: Instant) {
        let mut st = self.lock();
        for p in partitions {
            if let Some(s) = st.moved.get_mut(p) {
                s.1 = now;
            }
        }
    }

    /// Since when each partition's position has stood, as last sampled.
    pub fn standing_since(&self) -> HashMap<i32, Instant> {
        self.lock().moved.iter().map(|(p, (_, since))| (*p, *since)).collect()
    }

    /// The sampled part of the progress facts at `now`, for the `owned` partitions at `positions`:
    /// since the last poll, since the last rebalance, and each owned partition's lag and standing
    /// time.
    pub fn facts(&self, now: Instant, owned: &[i32], positions: &shared::replay::Offsets) -> (Option<Duration>, Option<Duration>, Vec<PartitionProgress>) {
        let st = self.lock();
        let owned = owned
            .iter()
            .map(|p| {
                let lag = match (st.ends.get(p), positions.get(p)) {
                    (Some(end), Some(pos)) => Some((end - pos).max(0)),
                    (Some(end), None) => Some(*end),
                    _ => None,
                };
                let since_moved = st.moved.get(p).map_or(Duration::ZERO, |(_, t)| now.saturating_duration_since(*t));
                PartitionProgress { partition: *p, lag, since_moved }
            })
            .collect();
        (st.last_broadcast_poll.map(|t| now.saturating_duration_since(t)), st.rebalanced_at.map(|(t, _)| now.saturating_duration_since(t)), owned)
    }

    /// Notes a rebalance callback of the broadcast consumer (assignment or revocation).
    pub fn rebalanced(&self) {
        self.lock().rebalanced_at = Some((Instant::now(), shared::event::now_ms()));
    }

    /// The last rebalance callback: when, and its Unix epoch ms.
    pub fn last_rebalance(&self) -> Option<(Instant, u64)> {
        self.lock().rebalanced_at
    }

    /// Notes that the broadcast consumer polled (a stalled consumer stops noting it).
    pub fn broadcast_polled(&self) {
        self.lock().last_broadcast_poll = Some(Instant::now());
    }

    /// Time since the broadcast consumer last polled, if it ever did.
    pub fn since_broadcast_poll(&self) -> Option<Duration> {
        self.lock().last_broadcast_poll.map(|t| t.elapsed())
    }

    /// Forgets the last broadcast poll (the consumer stopped on purpose).
    pub fn clear_broadcast_poll(&self) {
        self.lock().last_broadcast_poll = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Settings =
        Settings { stall_after: Duration::from_secs(10), session_timeout: Duration::from_secs(6), heartbeat_interval: Duration::from_millis(250) };

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }
    fn ms(m: u64) -> Duration {
        Duration::from_millis(m)
    }
    fn part(partition: i32, lag: Option<i64>, since_moved: Duration) -> PartitionProgress {
        PartitionProgress { partition, lag, since_moved }
    }
    fn facts() -> Facts {
        Facts { since_poll: Some(ms(50)), since_tick: ms(100), last_pause: None, since_rebalance: Some(secs(60)), owned: vec![] }
    }

    #[test]
    fn assessment_table() {
        // (name, facts, ownership confirmed, stalled partitions, degraded)
        let cases: Vec<(&str, Facts, bool, Vec<i32>, bool)> = vec![
            ("a polling node with moving partitions", Facts { owned: vec![part(0, Some(3), ms(200))], ..facts() }, true, vec![], false),
            ("an idle fleet is not stalled", Facts { owned: vec![part(0, Some(0), secs(600)), part(1, None, secs(600))], ..facts() }, true, vec![], false),
            ("a standing position with records waiting", Facts { owned: vec![part(0, Some(0), secs(60)), part(1, Some(5), secs(10))], ..facts() }, true, vec![1], true),
            ("standing, but not for long enough", Facts { owned: vec![part(1, Some(5), ms(9_999))], ..facts() }, true, vec![], false),
            ("a poll that has not returned", Facts { since_poll: Some(secs(11)), ..facts() }, true, vec![], true),
            ("no broadcast consumer (not serving) is not a stall", Facts { since_poll: None, ..facts() }, true, vec![], false),
            ("frozen until just now: the handler runs before the ticker", Facts { since_tick: secs(20), ..facts() }, false, vec![], true),
            ("a short pause, heartbeats not yet answered", Facts { last_pause: Some((secs(3), ms(500))), ..facts() }, false, vec![], true),
            ("a short pause, confirmed by three heartbeats", Facts { last_pause: Some((secs(3), ms(1_750))), ..facts() }, true, vec![], false),
            ("a long pause: time alone does not confirm", Facts { last_pause: Some((secs(20), secs(3))), ..facts() }, false, vec![], true),
            ("a long pause, then a rebalance", Facts { last_pause: Some((secs(20), secs(3))), since_rebalance: Some(secs(1)), ..facts() }, true, vec![], false),
            ("a long pause, a rebalance only before it", Facts { last_pause: Some((secs(20), secs(3))), since_rebalance: Some(secs(25)), ..facts() }, false, vec![], true),
            ("a long pause and no rebalance for a session timeout more", Facts { last_pause: Some((secs(20), secs(8))), since_rebalance: None, ..facts() }, true, vec![], false),
        ];
        for (name, f, confirmed, stalled, degraded) in cases {
            let a = assess(&f, &S);
            assert_eq!(a.ownership_confirmed, confirmed, "{name}: ownership");
            assert_eq!(a.stalled_partitions, stalled, "{name}: stalled");
            assert_eq!(a.degraded.is_some(), degraded, "{name}: degraded ({:?})", a.degraded);
        }
    }

    #[test]
    fn the_reason_names_the_cause() {
        let frozen = assess(&Facts { since_tick: secs(20), ..facts() }, &S).degraded.unwrap();
        assert!(frozen.contains("frozen for 20000ms"), "{frozen}");
        let poll = assess(&Facts { since_poll: Some(secs(12)), ..facts() }, &S).degraded.unwrap();
        assert!(poll.contains("poll for 12000ms"), "{poll}");
        let part = assess(&Facts { owned: vec![part(4, Some(1), secs(30))], ..facts() }, &S).degraded.unwrap();
        assert!(part.contains("[4]"), "{part}");
    }

    #[test]
    fn the_watch_sees_a_gap_as_a_pause() {
        let w = Watch { started: Instant::now(), last_tick_ms: AtomicU64::new(0), last_pause: Mutex::new(None) };
        let t0 = w.started;
        w.tick(t0 + ms(200));
        w.tick(t0 + ms(400));
        assert!(w.last_pause(t0 + ms(400)).is_none(), "regular ticks are no pause");
        assert_eq!(w.since_tick(t0 + ms(3_400)), secs(3), "a tick overdue is seen before the ticker runs");
        w.tick(t0 + ms(5_400));
        let (length, ago) = w.last_pause(t0 + ms(6_400)).unwrap();
        assert_eq!((length, ago), (ms(4_800), secs(1)));
        assert_eq!(w.reported_pause().unwrap().for_ms, 4_800);
    }
}
