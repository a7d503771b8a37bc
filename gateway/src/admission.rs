//! Capacity-aware admission: a bounded FIFO wait queue per node, in front of the proxy.
//!
//! A node that serves its capacity (`MAX_SESSIONS`) refuses a handshake with 503 `full`; that
//! answer is what counts. The gateway then holds the client's handshake in the node's queue, at
//! most `ADMISSION_QUEUE` waiters and at most `ADMISSION_WAIT_MS` from the client's arrival, and
//! tries again when a place frees at that node: the oldest waiter first. It learns that a place
//! freed from two sources: a session it proxies to that node ends (it sees every session end), and
//! a poll whose `/health` shows free seats (`max_sessions − session_seats`: the capacity hint,
//! which also covers sessions that do not go through this gateway). A client that cannot wait (the
//! queue is full, or its time ran out) gets 503 `full` with a `Retry-After` drawn at random from
//! `ADMISSION_RETRY_AFTER_S ..= ADMISSION_RETRY_AFTER_S + ADMISSION_RETRY_JITTER_S` seconds, so
//! the clients sent away together do not come back in one spike (with `refusal=frame`, the same
//! value as the error frame's `retry_after_ms`).
//!
//! FIFO: a newcomer for a node with waiters does not try the node (it would take the place freed
//! for the oldest); it joins the back of the queue. A waiter that was woken but refused again (the
//! place went to a client that came in another way, or the node had not freed the seat yet) goes
//! back to its place in the queue, ahead of everyone who came after it.
//!
//! The decisions are the pure function [`step`]; [`pace_failback`] is the failback's share of
//! the recovered node's room, with [`failback_sessions`] (what each partition moves) and
//! [`failback_arrived`] (when a round's sessions are there), also pure.

use crate::refusal::{Refused, FULL};
use shared::api::PartitionHealth;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The admission settings (from the gateway's [`crate::config::Config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Most handshakes waiting per node (0: no queue, a full node's refusal is passed on).
    pub queue: usize,
    /// Longest a handshake waits, from its arrival.
    pub wait: Duration,
    /// Least `Retry-After` of a `full` refusal, seconds.
    pub retry_after_s: u64,
    /// Random seconds added to it (0 ..= this).
    pub retry_jitter_s: u64,
}

/// Where a handshake stands, as [`step`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// Waiters in the node's queue ahead of this handshake (for a newcomer: all of them).
    pub ahead: usize,
    /// The node's last answer to this handshake was `full`.
    pub refused_full: bool,
    /// This handshake already holds a place in the queue (it was woken and refused again).
    pub has_place: bool,
    /// Time left before the handshake's wait runs out.
    pub left: Duration,
}

/// What to do with a handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Ask the node.
    Try,
    /// Wait in the node's queue until woken (or out of time).
    Wait,
    /// Answer 503 `full` with a jittered Retry-After.
    Refuse,
}

/// The admission rule. Pure.
pub fn step(ask: Ask, settings: &Settings) -> Step {
    let can_wait = settings.queue > 0 && !ask.left.is_zero();
    match (ask.refused_full, ask.has_place) {
        // Nobody waits for this node: the node decides.
        (false, _) if ask.ahead == 0 => Step::Try,
        // Others wait already: queue behind them (not past them), if there is room.
        (false, false) | (true, false) if can_wait && ask.ahead < settings.queue => Step::Wait,
        // A woken waiter refused again keeps its place.
        (true, true) | (false, true) if can_wait => Step::Wait,
        _ => Step::Refuse,
    }
}

/// The `Retry-After` of a `full` refusal, seconds, for a random draw `r`. Pure.
pub fn retry_after_secs(settings: &Settings, r: u64) -> u64 {
    settings.retry_after_s + r % (settings.retry_jitter_s + 1)
}

/// The sessions a failback moves per partition: the partition's `sessions` in the last `/health`
/// of each node that stood in (`reported`, one list per node), summed over them (a node counts
/// the sessions of every gateway replica); or the sessions this replica proxies to them (`own`)
/// where that is more (its own count may be newer than the poll). Pure.
pub fn failback_sessions<'a>(reported: impl IntoIterator<Item = &'a [PartitionHealth]>, own: &BTreeMap<i32, usize>) -> BTreeMap<i32, usize> {
    let mut by: BTreeMap<i32, usize> = BTreeMap::new();
    for p in reported.into_iter().flatten() {
        *by.entry(p.partition).or_default() += p.sessions;
    }
    for (p, n) in own {
        let at = by.entry(*p).or_default();
        *at = (*at).max(*n);
    }
    by
}

/// Where the recovered node stood when a failback round began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrivals {
    /// Sessions this replica proxied to it.
    pub proxied: usize,
    /// Sessions it reported in its last `/health` (`None`: no answer).
    pub reported: Option<usize>,
}

/// Whether the `moving` sessions of a failback round are on the recovered node: `now` (where it
/// stands now) shows that many more than `before`, by this replica's proxied count or by the
/// node's own count (which also sees the sessions that reconnected through other replicas). Pure.
pub fn failback_arrived(before: Arrivals, now: Arrivals, moving: usize) -> bool {
    let by_node = matches!((before.reported, now.reported), (Some(b), Some(n)) if n >= b + moving);
    moving == 0 || now.proxied >= before.proxied + moving || by_node
}

/// The failback's share of the recovered node's room: which of `partitions` to drain now so that
/// their sessions (`sessions[p]`, on the nodes that stood in: [`failback_sessions`]) fit in `room` free places
/// (`None`: no capacity known, drain all), taken in order; and which must wait for room. A
/// partition without sessions always goes now. Pure.
pub fn pace_failback(partitions: &[i32], sessions: &BTreeMap<i32, usize>, room: Option<usize>) -> (Vec<i32>, Vec<i32>) {
    let Some(mut room) = room else { return (partitions.to_vec(), Vec::new()) };
    let (mut now, mut later) = (Vec::new(), Vec::new());
    for p in partitions {
        let n = sessions.get(p).copied().unwrap_or(0);
        if n <= room {
            room -= n;
            now.push(*p);
        } else {
            later.push(*p);
        }
    }
    (now, later)
}

/// One node's queue.
#[derive(Default)]
struct NodeQueue {
    /// Waiters by arrival number (the oldest first), each with its wake-up.
    waiters: BTreeMap<u64, oneshot::Sender<()>>,
    /// Woken waiters still asking the node: a poll's free seats are for the others.
    trying: usize,
}

/// The wait queues, per node.
pub struct Admission {
    pub settings: Settings,
    queues: Mutex<HashMap<String, NodeQueue>>,
    next: AtomicU64,
}

/// Removes a waiter from its queue when its wait ends in any way (woken, timed out, the handshake
/// dropped).
struct Place<'a> {
    admission: &'a Admission,
    node: String,
    seq: u64,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(q) = self.admission.queues.lock().expect("admission lock").get_mut(&self.node) {
            q.waiters.remove(&self.seq);
        }
    }
}

/// A woken waiter asking its node; ends the `trying` count when dropped.
struct Trying<'a> {
    admission: &'a Admission,
    node: String,
}

impl Drop for Trying<'_> {
    fn drop(&mut self) {
        if let Some(q) = self.admission.queues.lock().expect("admission lock").get_mut(&self.node) {
            q.trying = q.trying.saturating_sub(1);
        }
    }
}

impl Admission {
    /// Empty queues.
    pub fn new(settings: Settings) -> Self {
        Self { settings, queues: Mutex::new(HashMap::new()), next: AtomicU64::new(1) }
    }

    /// Waiters in `node`'s queue (all of them, or those that came before `seq`).
    fn ahead(&self, node: &str, seq: Option<u64>) -> usize {
        let queues = self.queues.lock().expect("admission lock");
        queues.get(node).map_or(0, |q| seq.map_or(q.waiters.len(), |s| q.waiters.range(..s).count()))
    }

    /// Handshakes waiting per node (nodes with none are left out).
    pub fn waiting(&self) -> BTreeMap<String, usize> {
        let queues = self.queues.lock().expect("admission lock");
        queues.iter().filter(|(_, q)| !q.waiters.is_empty()).map(|(n, q)| (n.clone(), q.waiters.len())).collect()
    }

    /// A place freed at `node` (a session there ended): wakes its oldest waiter. Returns how many
    /// were woken (0 or 1).
    pub fn freed(&self, node: &str) -> usize {
        self.wake(node, 1, false)
    }

    /// A poll of `node` shows `free` seats: wakes that many of its oldest waiters, less the woken
    /// ones still asking the node (the seats may be theirs). Returns how many were woken.
    pub fn polled(&self, node: &str, free: usize) -> usize {
        self.wake(node, free, true)
    }

    fn wake(&self, node: &str, n: usize, less_trying: bool) -> usize {
        let mut queues = self.queues.lock().expect("admission lock");
        let Some(q) = queues.get_mut(node) else { return 0 };
        let n = if less_trying { n.saturating_sub(q.trying) } else { n };
        let mut woken = 0;
        while woken < n {
            let Some((_, tx)) = q.waiters.pop_first() else { break };
            // A waiter whose handshake is gone does not count.
            if tx.send(()).is_ok() {
                woken += 1;
            }
        }
        q.trying += woken;
        woken
    }

    /// Waits in `node`'s queue with arrival number `seq` until woken or `deadline`. Returns
    /// the woken waiter's [`Trying`] mark, or `None` when the time ran out.
    async fn wait(&self, node: &str, seq: u64, deadline: Instant) -> Option<Trying<'_>> {
        let (tx, rx) = oneshot::channel();
        self.queues.lock().expect("admission lock").entry(node.to_owned()).or_default().waiters.insert(seq, tx);
        let _place = Place { admission: self, node: node.to_owned(), seq };
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(())) => Some(Trying { admission: self, node: node.to_owned() }),
            _ => None,
        }
    }

    /// A `full` refusal with a jittered Retry-After.
    fn refuse(&self, node: Option<&str>, why: &str) -> Refused {
        let secs = retry_after_secs(&self.settings, rand::random());
        let at = node.map_or_else(|| "the channel's node".to_owned(), |n| format!("node {n}"));
        Refused { code: FULL.into(), message: format!("{at} serves its capacity: {why}; try again in {secs} s"), retry_after_secs: secs }
    }
}

impl Admission {
    /// Opens the upstream of one handshake through the admission queue of its channel's node:
    /// `owner` names the node that would serve it now, `attempt` asks that node (the proxy's
    /// upstream handshake), `refresh` asks for a fresh poll. A node's `full` answer makes the
    /// handshake wait for a place (see the module doc) instead of failing at once.
    ///
    /// # Errors
    /// [`Refused`]: the node's own refusal other than `full`, or `full` when the handshake could not
    /// wait or its wait ran out.
    pub async fn admit<T, A, F>(&self, channel: &str, owner: impl Fn() -> Option<String>, mut attempt: A, refresh: impl Fn()) -> Result<T, Refused>
    where
        A: FnMut() -> F,
        F: std::future::Future<Output = Result<T, Refused>>,
    {
        let deadline = Instant::now() + self.settings.wait;
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let (mut refused_full, mut has_place) = (false, false);
        let mut waited = false;
        // Set while this handshake, woken, asks the node.
        let mut trying = None;
        loop {
            let node = owner();
            let ahead = node.as_deref().map_or(0, |n| self.ahead(n, has_place.then_some(seq)));
            let ask = Ask { ahead, refused_full, has_place, left: deadline.saturating_duration_since(Instant::now()) };
            match (step(ask, &self.settings), node) {
                (Step::Wait, Some(node)) => {
                    has_place = true;
                    waited = true;
                    trying = self.wait(&node, seq, deadline).await;
                    // Woken: a place freed; the node decides again.
                    refused_full = false;
                    if trying.is_none() {
                        tracing::info!(node = %node, channel = channel, "admission wait ran out");
                        return Err(self.refuse(Some(&node), &format!("no place freed within {}ms", self.settings.wait.as_millis())));
                    }
                }
                (Step::Refuse, node) => {
                    let why = if has_place { "no place freed in time" } else { "its wait queue is full" };
                    return Err(self.refuse(node.as_deref(), why));
                }
                // Try, or nobody to wait for (the channel has no routed owner now): the node decides.
                (_, node) => match attempt().await {
                    Ok(open) => {
                        if let (true, Some(node)) = (waited, &node) {
                            tracing::info!(node = %node, channel = channel, seq, "admitted after waiting for a place");
                        }
                        return Ok(open);
                    }
                    Err(r) if r.code == FULL => {
                        // No longer asking: the poll's free seats are for the others again.
                        drop(trying.take());
                        if has_place {
                            // Woken, but the place was not there yet: a fresh poll shows the seats.
                            refresh();
                        }
                        refused_full = true;
                        if node.is_none() {
                            return Err(self.refuse(None, "the node answered full"));
                        }
                    }
                    Err(r) => return Err(r),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const S: Settings = Settings { queue: 3, wait: Duration::from_secs(5), retry_after_s: 2, retry_jitter_s: 3 };

    #[test]
    fn step_table() {
        let ask = |ahead, refused_full, has_place, left_ms| Ask { ahead, refused_full, has_place, left: Duration::from_millis(left_ms) };
        let no_queue = Settings { queue: 0, ..S };
        let cases: Vec<(&str, Ask, Settings, Step)> = vec![
            ("newcomer, nobody waits: ask the node", ask(0, false, false, 5000), S, Step::Try),
            ("newcomer behind waiters: queue, not past them", ask(2, false, false, 5000), S, Step::Wait),
            ("newcomer, queue full: refuse", ask(3, false, false, 5000), S, Step::Refuse),
            ("node said full, queue empty: wait", ask(0, true, false, 5000), S, Step::Wait),
            ("node said full, queue has room: wait", ask(2, true, false, 5000), S, Step::Wait),
            ("node said full, queue full: refuse", ask(3, true, false, 5000), S, Step::Refuse),
            ("woken, refused again: keeps its place even in a full queue", ask(3, true, true, 5000), S, Step::Wait),
            ("woken, refused, out of time: refuse", ask(0, true, true, 0), S, Step::Refuse),
            ("woken, oldest: ask the node", ask(0, false, true, 10), S, Step::Try),
            ("woken, but older waiters are back ahead: wait", ask(1, false, true, 10), S, Step::Wait),
            ("no queue configured: a full answer is passed on", ask(0, true, false, 5000), no_queue, Step::Refuse),
            ("no queue configured: newcomers ask the node", ask(0, false, false, 5000), no_queue, Step::Try),
            ("no time to wait (ADMISSION_WAIT_MS=0): refuse", ask(0, true, false, 0), S, Step::Refuse),
        ];
        for (name, a, s, want) in cases {
            assert_eq!(step(a, &s), want, "{name}");
        }
    }

    #[test]
    fn retry_after_is_spread_over_the_jitter_range() {
        let got: std::collections::BTreeSet<u64> = (0..100).map(|r| retry_after_secs(&S, r)).collect();
        assert_eq!(got, (2..=5).collect(), "2 s plus 0..=3 s");
        assert_eq!(retry_after_secs(&Settings { retry_jitter_s: 0, ..S }, 12345), 2);
    }

    #[test]
    fn failback_is_paced_to_the_room() {
        let sessions = BTreeMap::from([(0, 10), (1, 30), (2, 0), (3, 15)]);
        // (case, room, drained now, left for later)
        type Case = (&'static str, Option<usize>, Vec<i32>, Vec<i32>);
        let cases: Vec<Case> = vec![
            ("no capacity known: everything", None, vec![0, 1, 2, 3], vec![]),
            ("room for all", Some(55), vec![0, 1, 2, 3], vec![]),
            ("room for some: in order, skipping what does not fit", Some(30), vec![0, 2, 3], vec![1]),
            ("room for the first only", Some(10), vec![0, 2], vec![1, 3]),
            ("no room: only partitions without sessions", Some(0), vec![2], vec![0, 1, 3]),
        ];
        for (name, room, now, later) in cases {
            assert_eq!(pace_failback(&[0, 1, 2, 3], &sessions, room), (now, later), "{name}");
        }
    }

    #[test]
    fn failback_sessions_sum_the_stand_ins_counts_or_take_this_replicas_own() {
        let part = |partition, sessions| PartitionHealth {
            partition,
            role: shared::api::PartitionRole::Held,
            position: 0,
            end: None,
            lag: None,
            since_moved_ms: 0,
            sessions,
        };
        // (case, each stand-in's partitions, this replica's own counts, wanted)
        type Case = (&'static str, Vec<Vec<PartitionHealth>>, Vec<(i32, usize)>, Vec<(i32, usize)>);
        let cases: Vec<Case> = vec![
            ("nothing known", vec![], vec![], vec![]),
            ("the nodes count what other replicas proxy", vec![vec![part(1, 30), part(2, 30)]], vec![], vec![(1, 30), (2, 30)]),
            ("summed over the stand-ins", vec![vec![part(1, 30)], vec![part(1, 12), part(2, 4)]], vec![], vec![(1, 42), (2, 4)]),
            ("own count newer than the poll: the larger", vec![vec![part(1, 3), part(2, 30)]], vec![(1, 5), (2, 7)], vec![(1, 5), (2, 30)]),
            ("a stand-in that reports no sessions: the own count", vec![vec![part(1, 0)], vec![]], vec![(1, 6), (3, 2)], vec![(1, 6), (3, 2)]),
        ];
        for (name, reported, own, want) in cases {
            let got = failback_sessions(reported.iter().map(Vec::as_slice), &own.into_iter().collect());
            assert_eq!(got, want.into_iter().collect::<BTreeMap<_, _>>(), "{name}");
        }
    }

    #[test]
    fn failback_arrivals_count_by_this_replica_or_by_the_node() {
        let at = |proxied, reported| Arrivals { proxied, reported };
        // (case, before, now, moving, arrived)
        let cases: Vec<(&str, Arrivals, Arrivals, usize, bool)> = vec![
            ("nothing moving", at(0, Some(0)), at(0, Some(0)), 0, true),
            ("none arrived yet", at(2, Some(10)), at(2, Some(10)), 30, false),
            ("all through this replica", at(2, Some(10)), at(32, Some(25)), 30, true),
            ("through other replicas: the node's count", at(2, Some(10)), at(5, Some(40)), 30, true),
            ("the node's count short of it", at(2, Some(10)), at(5, Some(39)), 30, false),
            ("no node answer at the start: this replica's count only", at(2, None), at(5, Some(40)), 30, false),
            ("no node answer now: this replica's count only", at(2, Some(10)), at(5, None), 30, false),
        ];
        for (name, before, now, moving, want) in cases {
            assert_eq!(failback_arrived(before, now, moving), want, "{name}");
        }
    }

    #[tokio::test]
    async fn waiters_are_woken_oldest_first_and_leave_the_queue() {
        let adm = Arc::new(Admission::new(S));
        let mut tasks = Vec::new();
        for seq in 1..=3u64 {
            let a = adm.clone();
            // The last one is never woken: it runs out of time.
            let deadline = Instant::now() + Duration::from_millis(if seq == 3 { 300 } else { 5000 });
            tasks.push(tokio::spawn(async move { (seq, a.wait("ws-1", seq, deadline).await.is_some()) }));
            while adm.ahead("ws-1", None) < seq as usize {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(adm.waiting(), BTreeMap::from([("ws-1".to_owned(), 3)]));
        assert_eq!(adm.ahead("ws-1", Some(3)), 2);
        assert_eq!(adm.freed("ws-1"), 1);
        // Two seats free at the poll, but the first woken may still be asking for one of them.
        assert_eq!(adm.polled("ws-1", 2), 1);
        assert_eq!(tasks.remove(0).await.unwrap(), (1, true));
        assert_eq!(tasks.remove(0).await.unwrap(), (2, true));
        assert_eq!(adm.waiting(), BTreeMap::from([("ws-1".to_owned(), 1)]));
        assert_eq!(adm.freed("ws-2"), 0, "another node's queue is empty");
        // The last one runs out of time and leaves the queue by itself.
        assert_eq!(tasks.remove(0).await.unwrap(), (3, false));
        assert!(adm.waiting().is_empty());
    }
}
