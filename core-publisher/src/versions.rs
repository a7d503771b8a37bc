//! The version authority: every channel's versions are contiguous from 1, each used once, and a
//! publish is answered 201 only once the Kafka transaction carrying it committed.
//!
//! Start-up ([`Versions::rebuild`]): initialise every transactional producer first
//! (`init_transactions` fences an older publisher and finishes what it left open), then read the
//! topic with `read_committed` up to each partition's last stable offset. After that nothing else
//! can write the partitions, so the heads read are the log's. Then the committers
//! ([`crate::committer`]) hand out versions: a partition is written by one committer at a time,
//! and a channel belongs to one partition, so its versions have a single author.
//!
//! Why transactions: with a plain idempotent producer a record whose acknowledgement timed out
//! could still land *after* the publisher had read the log to find out, and its version be handed
//! out again; and nothing stopped a second publisher process. Under a transaction the outcome is
//! decided by the commit: until it is confirmed no reader sees the records and the partition's
//! next version is not handed out; an aborted transaction is never visible.

use crate::committer::{self, Counters, Ctx, Status};
use crate::idempotency::KeyStore;
use crate::log::{EventLog, PrepareError};
use crate::metrics::Figures;
use crate::follow::Follower;
use crate::rebuild;
use crate::role::Role;
pub use crate::rebuild::RebuildError;
use crate::snapshots::SnapshotPolicy;
use crate::partition::{Activity, IsolationPolicy, Mode, Partition};
use crate::types::PublishError;
use shared::namespaces::Namespaces;
use shared::partitioner::partition_for;
use shared::{ChannelId, Color};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Default capacity of the idempotency-key store (`IDEMPOTENCY_KEYS_MAX`): keys with an outcome
/// within the window held before new keys are refused ([`PublishError::IdempotencyStoreFull`]).
pub const KEYS_REMEMBERED: usize = 100_000;

mod ops;
mod publish;

/// One pixel of a publish: (x, y, colour, idempotency key).
pub type Pixel<'a> = (u32, u32, Color, Option<&'a str>);

/// Timings of the version authority.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// How long a caller waits for its transaction's answer (then: 503, "not written" while it
    /// was still queued, "outcome unknown" once a transaction took it).
    pub answer_timeout: Duration,
    /// A shared transaction whose records are not all acknowledged by then is aborted and the
    /// partitions still waiting are isolated.
    pub stall_after: Duration,
    /// When channels are snapshotted.
    pub snapshots: SnapshotPolicy,
    /// How long an idempotency key is kept after its publish, and how far back a restarted
    /// publisher reads the log for keys (beyond the snapshots' checkpoints): a retry with the same
    /// key within it is answered once.
    pub key_window: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            answer_timeout: Duration::from_secs(11),
            stall_after: Duration::from_secs(1),
            snapshots: SnapshotPolicy::default(),
            key_window: Duration::from_secs(600),
        }
    }
}

/// What `/health` shows of one partition.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PartitionReport {
    pub partition: i32,
    /// `shared`, or `isolated` (in transactions of its own, see [`crate::committer`]).
    pub mode: &'static str,
    pub activity: Activity,
}

/// The version authority for every channel.
pub struct Versions<L> {
    pub(crate) log: Arc<L>,
    /// The namespaces: each channel's model and limits.
    pub(crate) namespaces: Arc<Namespaces>,
    /// Partition count of the topic; 0 until known (then the publisher is not ready anyway).
    partitions: std::sync::atomic::AtomicU32,
    /// The committers' shared state, once rebuilt (none while starting, or starting over).
    ctx: std::sync::RwLock<Option<Arc<Ctx<L>>>>,
    pub(crate) keys: Arc<Mutex<KeyStore>>,
    status: Arc<Status>,
    counters: Arc<Counters>,
    pub(crate) timings: Timings,
    /// Channels found with versions missing from the log and no snapshot covering them.
    pub(crate) incomplete: Mutex<Vec<ChannelId>>,
    /// Why the last rebuild failed, until one succeeds.
    start_problem: Mutex<Option<String>>,
    /// A publish that would create a channel past this many is refused ([`PublishError::ChannelLimit`]).
    max_channels: usize,
    /// Stops the committers (cancelled on drop).
    stop: CancellationToken,
    /// Writing, or standing by ([`crate::standby`]).
    pub(crate) role: Mutex<Role>,
    /// Notified when a promotion is asked for.
    pub(crate) promotion: Notify,
    /// A standby's reading of the log, handed to the committers by a promotion.
    pub(crate) follower: tokio::sync::Mutex<Option<Follower>>,
    /// The events topic's ID (the topic half of every channel's epoch), once read.
    pub(crate) topic_id: tokio::sync::OnceCell<String>,
    /// The input topics (topic → namespace) and their counters, when there are any
    /// ([`crate::input`]): each rebuild makes a new queue of them for its committers.
    input: Option<(std::collections::HashMap<String, String>, Arc<crate::input::stats::Stats>)>,
}

impl<L> Drop for Versions<L> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl<L: EventLog> Versions<L> {
    /// An authority over `log` for a topic of `partitions` partitions (0: not known yet, see
    /// [`Versions::set_partitions`]). Not ready until [`Versions::rebuild`] ran.
    pub fn new(log: L, namespaces: impl Into<Namespaces>, partitions: u32, timings: Timings) -> Self {
        Self::shared(Arc::new(log), namespaces, partitions, timings)
    }

    /// Refuses publishes that would create a channel past `limit` ([`PublishError::ChannelLimit`]).
    #[must_use]
    pub fn with_max_channels(mut self, limit: usize) -> Self {
        self.max_channels = limit;
        self
    }

    /// Holds at most `capacity` idempotency keys with an outcome within the window
    /// ([`KEYS_REMEMBERED`] by default): past it, publishes with a new key are refused
    /// ([`PublishError::IdempotencyStoreFull`]) rather than keys forgotten. Set before the rebuild.
    #[must_use]
    pub fn with_idempotency_keys(mut self, capacity: usize) -> Self {
        self.keys = Arc::new(Mutex::new(KeyStore::new(capacity, self.key_window_ms())));
        self
    }

    fn key_window_ms(&self) -> u64 {
        u64::try_from(self.timings.key_window.as_millis()).unwrap_or(u64::MAX)
    }

    /// The channel limit ([`Versions::with_max_channels`]; unlimited by default).
    pub fn max_channels(&self) -> usize {
        self.max_channels
    }

    /// Like [`Versions::new`] over a log shared with others (tests: two publishers on one log).
    pub fn shared(log: Arc<L>, namespaces: impl Into<Namespaces>, partitions: u32, timings: Timings) -> Self {
        Self {
            log,
            namespaces: Arc::new(namespaces.into()),
            partitions: std::sync::atomic::AtomicU32::new(partitions),
            ctx: std::sync::RwLock::new(None),
            keys: Arc::new(Mutex::new(KeyStore::new(KEYS_REMEMBERED, u64::try_from(timings.key_window.as_millis()).unwrap_or(u64::MAX)))),
            status: Arc::new(Status::default()),
            counters: Arc::new(Counters::default()),
            timings,
            incomplete: Mutex::new(Vec::new()),
            start_problem: Mutex::new(None),
            max_channels: usize::MAX,
            stop: CancellationToken::new(),
            role: Mutex::new(Role::Active { promoted: false }),
            promotion: Notify::new(),
            follower: tokio::sync::Mutex::new(None),
            topic_id: tokio::sync::OnceCell::new(),
            input: None,
        }
    }

    /// Reads `topics` (topic → namespace) as a second input ([`crate::input`]): once rebuilt, the
    /// committers take their records from [`Versions::input_queue`], which a consumer fills.
    #[must_use]
    pub fn with_input(mut self, topics: std::collections::HashMap<String, String>) -> Self {
        let stats = crate::input::stats::Stats::new(self.counters.metrics.input_records.clone());
        self.input = Some((topics, Arc::new(stats)));
        self
    }

    /// The input queue of the current committers (none without input topics, or before the
    /// rebuild).
    pub fn input_queue(&self) -> Option<Arc<crate::input::InputQueue>> {
        self.current()?.input.clone()
    }

    /// What `/health` shows of the input (null without input topics).
    pub fn input_report(&self) -> serde_json::Value {
        let Some((topics, stats)) = &self.input else { return serde_json::Value::Null };
        let mut report = stats.to_json();
        report["topics"] = serde_json::json!(topics);
        if let Some(q) = self.input_queue() {
            if let (Some(r), Some(q)) = (report.as_object_mut(), q.report().as_object()) {
                r.extend(q.clone());
            }
        }
        report
    }

    /// Whether writes are accepted (rebuilt, and neither fenced nor failed).
    pub fn is_ready(&self) -> bool {
        self.status.is_ready()
    }

    /// Whether another publisher took over (no more writes, ever).
    pub fn is_fenced(&self) -> bool {
        self.status.is_fenced()
    }

    /// Whether writes stopped (fenced for good, or a producer failed until the publisher started
    /// over), and why.
    pub fn stopped(&self) -> Option<String> {
        self.status.is_stopped().then(|| self.status.why().unwrap_or_default())
    }

    /// Resolves once writes stopped for good (fenced, or a producer failed).
    pub async fn stopped_for_good(&self) {
        loop {
            let notified = self.status.stopped_now.notified();
            if self.status.is_stopped() {
                return;
            }
            notified.await;
        }
    }

    /// The namespaces.
    pub fn namespaces(&self) -> &Arc<Namespaces> {
        &self.namespaces
    }

    /// Partition count of the topic (0 until known).
    pub fn partitions(&self) -> u32 {
        self.partitions.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sets the topic's partition count, once it is known (before [`Versions::rebuild`]).
    pub fn set_partitions(&self, n: u32) {
        self.partitions.store(n, std::sync::atomic::Ordering::Release);
    }

    /// What the committers did since start.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    fn current(&self) -> Option<Arc<Ctx<L>>> {
        self.ctx.read().expect("ctx lock").clone()
    }

    /// Each partition's mode and activity (empty before the rebuild).
    pub fn partition_reports(&self) -> Vec<PartitionReport> {
        self.current().map_or_else(Vec::new, |c| {
            c.partitions
                .iter()
                .map(|p| PartitionReport {
                    partition: p.id,
                    mode: if matches!(p.mode(), Mode::Shared) { "shared" } else { "isolated" },
                    activity: p.activity(),
                })
                .collect()
        })
    }

    /// Partitions whose last commit is not confirmed yet (their committer is asking).
    pub fn in_doubt_partitions(&self) -> Vec<i32> {
        self.partition_reports().into_iter().filter(|r| r.activity == Activity::InDoubt).map(|r| r.partition).collect()
    }

    /// Initialises every transactional producer (fencing older publishers), reads the topic's
    /// committed records, sets every channel's head to its last version, starts the committers and
    /// accepts writes. Returns the number of events read.
    ///
    /// # Errors
    /// [`RebuildError`]: retry, except [`RebuildError::Fenced`]. The error is kept until a rebuild
    /// succeeds ([`Versions::start_problem`]).
    pub async fn rebuild(&self) -> Result<usize, RebuildError> {
        let r = self.rebuild_once().await;
        *self.start_problem.lock().expect("start problem lock") = r.as_ref().err().map(ToString::to_string);
        r
    }

    async fn rebuild_once(&self) -> Result<usize, RebuildError> {
        if self.current().is_some() {
            return Ok(0);
        }
        let n = self.partitions().max(1);
        // A start reads the snapshot topic while its producers are initialised
        // ([`rebuild::Preread`] says why that is safe); a promoted standby reads on from where
        // it is instead.
        let promoting = self.follower.lock().await.is_some();
        let (prepared, pre) = if promoting {
            (self.log.prepare(n).await, None)
        } else {
            let (prepared, pre) = tokio::join!(self.log.prepare(n), rebuild::preread(self.log.as_ref(), self.timings.key_window));
            (prepared, Some(pre))
        };
        match prepared {
            Ok(()) => {}
            Err(PrepareError::Fenced) => {
                self.status.set_fenced();
                return Err(RebuildError::Fenced);
            }
            Err(e) => return Err(RebuildError::Prepare(e)),
        }
        // A promoted standby reads on from where it is; otherwise the snapshots and the log after.
        // Taken out first: the promotion's read puts it back on an error, under the same lock.
        let followed = self.follower.lock().await.take();
        let restored = match followed {
            Some(follower) => self.read_on_promoted(follower).await?,
            None => {
                let pre = match pre {
                    Some(pre) => pre?,
                    None => rebuild::preread(self.log.as_ref(), self.timings.key_window).await?,
                };
                rebuild::read_heads(self.log.as_ref(), pre, &self.namespaces, n, &self.keys).await?
            }
        };
        *self.incomplete.lock().expect("incomplete lock") = restored.incomplete;
        let (events_read, partitions) = (restored.events_read, restored.partitions);
        let input = self.input.as_ref().map(|(topics, stats)| {
            Arc::new(crate::input::InputQueue::new(topics.clone(), self.namespaces.clone(), n, self.max_channels, stats.clone()))
        });
        let ctx = Arc::new(Ctx {
            input,
            log: self.log.clone(),
            partitions: partitions.clone(),
            keys: self.keys.clone(),
            status: self.status.clone(),
            counters: self.counters.clone(),
            policy: IsolationPolicy::with_stall_after(self.timings.stall_after),
            snapshots: SnapshotPolicy { key_window: self.timings.key_window, ..self.timings.snapshots },
            shared_wake: Notify::new(),
            stop: self.stop.child_token(),
        });
        tokio::spawn(committer::run_shared(ctx.clone()));
        for p in &partitions {
            tokio::spawn(committer::run_isolated(ctx.clone(), p.clone()));
        }
        *self.ctx.write().expect("ctx lock") = Some(ctx);
        {
            let mut role = self.role.lock().expect("role lock");
            *role = crate::role::on_ready(*role);
        }
        self.status.set_ready();
        Ok(events_read)
    }

    /// Why the last [`Versions::rebuild`] failed, until one succeeds (`/health`'s `start_error`,
    /// `/ready`'s message): a broker that does not answer, or another producer's transaction
    /// holding the log ([`RebuildError::Hanging`]).
    pub fn start_problem(&self) -> Option<String> {
        self.start_problem.lock().expect("start problem lock").clone()
    }

    /// Channels whose versions skip in the log where no snapshot covers them (their early publications
    /// are lost); empty on a healthy log.
    pub fn incomplete_channels(&self) -> Vec<ChannelId> {
        self.incomplete.lock().expect("incomplete lock").clone()
    }

    /// Channels with records that no snapshot covers yet, over every partition.
    pub fn uncovered_channels(&self) -> usize {
        self.current().map_or(0, |ctx| ctx.partitions.iter().map(|p| p.uncovered_count()).sum())
    }

    /// Whether a producer failed for good and the publisher must start over.
    pub fn failed(&self) -> bool {
        self.status.is_failed()
    }

    /// Starts over after a producer failed for good, as a restarted process would: stops the
    /// committers, drops every producer and forgets the keys in flight (their requests were
    /// answered); writes get 503 `not_ready` until [`Versions::rebuild`] ran again (it
    /// initialises new producers, fencing any older publisher, and reads the log, which says what
    /// the interrupted transactions did).
    pub fn start_over(&self) {
        if let Some(ctx) = self.ctx.write().expect("ctx lock").take() {
            // Cancelled before the keys are released below: the old state's committers and callers
            // release no key after that (see `Ctx::release`).
            ctx.stop.cancel();
            for p in &ctx.partitions {
                p.close();
            }
            // The new state reads the input again from the committed offsets (its own queue).
            if let Some(q) = &ctx.input {
                q.close();
            }
        }
        self.log.reset();
        self.lock_keys().release_in_flight();
        self.status.set_preparing();
    }

    fn lock_keys(&self) -> std::sync::MutexGuard<'_, KeyStore> {
        self.keys.lock().expect("key store lock is never poisoned: no panics while held")
    }

    /// The partition of `channel`.
    pub fn partition_of(&self, channel: &ChannelId) -> i32 {
        partition_for(channel.as_str().as_bytes(), self.partitions().max(1)) as i32
    }

    fn partition(&self, channel: &ChannelId) -> Option<(Arc<Ctx<L>>, Arc<Partition>)> {
        let ctx = self.current()?;
        let p = ctx.partitions.get(self.partition_of(channel) as usize)?.clone();
        Some((ctx, p))
    }

    /// Why nothing can be written now, if so (fenced, a standby, not ready: starting, or
    /// promoting, which the gateway then no longer takes for a standby to promote).
    pub fn not_writable(&self) -> Option<PublishError> {
        if self.status.is_fenced() {
            Some(PublishError::Fenced)
        } else if self.role() == Role::Standby {
            Some(PublishError::Standby)
        } else if !self.status.is_ready() {
            Some(PublishError::NotReady)
        } else {
            None
        }
    }

    /// Number of channels with at least one event.
    pub fn channel_count(&self) -> usize {
        self.current().map_or(0, |c| c.partitions.iter().map(|p| p.channel_count()).sum())
    }

    /// The state figures `GET /metrics` shows.
    pub fn figures(&self) -> Figures {
        Figures {
            ready: self.is_ready(),
            standby: self.role() == Role::Standby,
            channels: self.channel_count(),
            partitions: self.partitions(),
            in_doubt: self.in_doubt_partitions().len(),
            uncovered: self.uncovered_channels(),
            incomplete: self.incomplete.lock().expect("incomplete lock").len(),
            idempotency_keys: self.lock_keys().len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::fake::{Fate, FakeLog};
    use crate::log::Writer;
    use shared::{Canvas, CanvasDims};
    use std::collections::HashMap;

    const DIMS: CanvasDims = CanvasDims { width: 8, height: 8 };
    const WAIT: Duration = Duration::from_secs(5);

    fn id(s: &str) -> ChannelId {
        ChannelId::parse(s).unwrap()
    }

    async fn ready(log: FakeLog) -> Arc<Versions<FakeLog>> {
        ready_on(Arc::new(log), WAIT).await
    }

    async fn ready_on(log: Arc<FakeLog>, answer_timeout: Duration) -> Arc<Versions<FakeLog>> {
        let v = Arc::new(Versions::shared(log, DIMS, 3, Timings { answer_timeout, ..Timings::default() }));
        v.rebuild().await.unwrap();
        v
    }

    /// Another publisher process on the same log, started and rebuilt (it fences `v`).
    async fn successor(v: &Versions<FakeLog>) -> Arc<Versions<FakeLog>> {
        ready(v.log.another_publisher()).await
    }

    fn assert_contiguous(versions: &[u64], channel: &str) {
        let want: Vec<u64> = (1..=versions.len() as u64).collect();
        assert_eq!(versions, want.as_slice(), "versions of {channel} in the log are not 1..=n in order");
    }

    async fn until(what: &str, cond: impl Fn() -> bool) {
        let started = std::time::Instant::now();
        while !cond() {
            assert!(started.elapsed() < Duration::from_secs(5), "{what}: not within 5 s");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn versions_stay_contiguous_under_concurrent_publishes() {
        let v = ready(FakeLog::new(3, |_| Fate::Commit)).await;
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let v = v.clone();
            tasks.push(tokio::spawn(async move {
                let channel = id(["a", "b", "c", "d"][(i % 4) as usize]);
                v.publish(&channel, i % 8, 0, Color([1, 2, 3])).await.unwrap()
            }));
        }
        let mut got: HashMap<String, Vec<u64>> = HashMap::new();
        for t in tasks {
            let p = t.await.unwrap();
            got.entry(p.channel.to_string()).or_default().push(p.version);
        }
        for c in ["a", "b", "c", "d"] {
            let mut answered = got[c].clone();
            answered.sort();
            assert_contiguous(&answered, c);
            assert_contiguous(&v.log.events_of(c), c);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn publishes_waiting_for_a_transaction_go_out_together() {
        let v = ready(FakeLog::new(3, |_| Fate::Commit)).await;
        let c = id("hot");
        let mut tasks = Vec::new();
        for i in 0..300u32 {
            let (v, c) = (v.clone(), c.clone());
            tasks.push(tokio::spawn(async move { v.publish_with_key(&c, i % 8, i / 8 % 8, Color([1, 1, 1]), Some(&format!("k{i}"))).await.unwrap().0 }));
        }
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        assert_contiguous(&v.log.events_of("hot"), "hot");
        let (records, transactions) = (v.log.record_count(), v.log.attempts());
        assert!(transactions < 300, "300 concurrent publishes to one canvas took {transactions} transactions: nothing was grouped");
        // A channel's events share a record (up to MAX_EVENTS_PER_RECORD each: a transaction that
        // took more than that of the 300 needs a second one).
        let most = transactions as usize + 300 / shared::event::MAX_EVENTS_PER_RECORD;
        assert!(records <= most, "{records} records in {transactions} transactions: a canvas's events share a record");
        let mut versions: Vec<u64> = answers.iter().map(|p| p.version).collect();
        versions.sort_unstable();
        assert_contiguous(&versions, "hot (answers)");
        // Each answer names the offset of the record that carries its version.
        for p in &answers {
            let rec = v.log.record_at(p.partition, p.offset).expect("a committed record at the answered offset");
            assert!(rec.iter().any(|(e, _)| e.version == p.version), "version {} is not in the record at offset {}", p.version, p.offset);
            assert!(rec.iter().all(|(_, k)| k.is_some()), "each event keeps its own key");
        }
        // A restarted publisher learns every key of every record from the log.
        let restarted = successor(&v).await;
        for (i, p) in answers.iter().enumerate() {
            let i = i as u32;
            let again = restarted.publish_with_key(&c, i % 8, i / 8 % 8, Color([1, 1, 1]), Some(&format!("k{i}"))).await.unwrap();
            assert_eq!(again, (p.clone(), true));
        }
        assert_eq!(restarted.log.events_of("hot").len(), 300, "the replays wrote nothing");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_committed_publish_is_answered_without_waiting_for_the_next_transaction() {
        let log = FakeLog::new(3, |_| Fate::Commit);
        let (first_commit, second_commit) = (log.gate(0), log.gate(1));
        let v = ready(log).await;
        let c = id("c1");
        let spawn = |x: u32| {
            let (v, c) = (v.clone(), c.clone());
            tokio::spawn(async move { v.publish(&c, x, 0, Color([4, 4, 4])).await })
        };
        let first = spawn(0);
        until("the first transaction began", || v.log.attempts() >= 1).await;
        // A second publish arrives while the first's transaction is open: it waits for the next.
        let second = spawn(1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        first_commit.notify_one();
        let answered = tokio::time::timeout(Duration::from_secs(2), first).await;
        assert_eq!(answered.expect("the first publish waited for the next transaction").unwrap().unwrap().version, 1);
        assert!(!second.is_finished());
        second_commit.notify_one();
        assert_eq!(second.await.unwrap().unwrap().version, 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_aborted_transaction_fails_every_publish_in_it_and_uses_no_version() {
        // Every other transaction aborts, the first included: however the 200 publishes fall
        // into transactions (all in the first, on a loaded machine), some are refused.
        let v = ready(FakeLog::new(3, |n| if n % 2 == 0 { Fate::Abort } else { Fate::Commit })).await;
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let v = v.clone();
            tasks.push(tokio::spawn(async move { v.publish(&id("hot"), i % 8, 0, Color([2, 2, 2])).await }));
        }
        let mut answered = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(p) => answered.push(p.version),
                Err(e) => assert!(matches!(e, PublishError::NotWritten(_)), "{e:?}"),
            }
        }
        assert!(answered.len() < 200, "half the transactions aborted: some publishes must have been refused");
        answered.sort_unstable();
        let in_log = v.log.events_of("hot");
        assert_eq!(answered, in_log, "exactly the accepted publishes are in the log");
        assert_contiguous(&in_log, "hot");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn failed_transactions_use_no_version_whatever_their_end() {
        // Every third transaction fails, in each of the ways one can.
        let v = ready(FakeLog::new(3, |n| match n % 9 {
            2 => Fate::Abort,
            5 => Fate::InDoubtThenCommit,
            8 => Fate::InDoubtThenAbort,
            _ => Fate::Commit,
        }))
        .await;
        // Waves of concurrent publishes, so that there are many transactions.
        let mut accepted = 0;
        for wave in 0..50u32 {
            let tasks: Vec<_> = (0..3u32)
                .map(|i| {
                    let v = v.clone();
                    tokio::spawn(async move {
                        let channel = id(if (wave + i) % 2 == 0 { "even" } else { "odd" });
                        v.publish(&channel, 0, 0, Color([0, 0, 0])).await.ok()
                    })
                })
                .collect();
            for t in tasks {
                accepted += t.await.unwrap().is_some() as usize;
            }
        }
        assert!(accepted < 150, "the schedule must have failed some publishes");
        assert!(v.log.attempts() >= 20, "{} transactions", v.log.attempts());
        for c in ["even", "odd"] {
            assert_contiguous(&v.log.events_of(c), c);
        }
        // The publisher's head is the log's head: one more publish per channel continues it.
        for c in ["even", "odd"] {
            let channel = id(c);
            let mut p = None;
            for _ in 0..5 {
                if let Ok(ok) = v.publish(&channel, 1, 1, Color([9, 9, 9])).await {
                    p = Some(ok);
                    break;
                }
            }
            let p = p.expect("a publish eventually succeeds");
            let in_log = v.log.events_of(c);
            assert_eq!(p.version, *in_log.last().unwrap());
            assert_contiguous(&in_log, c);
            assert_eq!(v.truth(&channel).await.unwrap().version, p.version);
        }
    }

    /// The case: a commit that is not confirmed, and lands later. No version of the
    /// partition may be handed out until its outcome is known (the fake lands it before the
    /// partition's next transaction if nobody resolved it: a version handed out meanwhile would
    /// then be in the log twice).
    #[tokio::test]
    async fn an_in_doubt_commit_that_lands_later_never_has_its_version_reused() {
        let log = FakeLog::new(3, |n| if n == 1 { Fate::InDoubtThenCommit } else { Fate::Commit });
        log.stay_in_doubt(3);
        let v = ready(log).await;
        let c = id("c1");
        assert_eq!(v.publish(&c, 0, 0, Color([1, 1, 1])).await.unwrap().version, 1);
        assert!(matches!(v.publish(&c, 1, 0, Color([2, 2, 2])).await, Err(PublishError::Unknown(_))));
        // Version 2 committed although its caller got "unknown": the next publish is version 3.
        assert_eq!(v.publish(&c, 2, 0, Color([3, 3, 3])).await.unwrap().version, 3);
        assert_eq!(v.log.events_of("c1"), vec![1, 2, 3]);
        let mut want = Canvas::new(DIMS);
        for (ev, _) in v.log.committed().into_iter().flatten() {
            want.apply(&ev.to_pixel_event().unwrap());
        }
        assert_eq!(v.truth(&c).await.unwrap().hash, want.hash(), "the truth includes the pixel that landed");
    }

    #[tokio::test]
    async fn an_in_doubt_commit_that_did_not_land_frees_its_version() {
        let log = FakeLog::new(3, |n| if n == 0 { Fate::InDoubtThenAbort } else { Fate::Commit });
        log.stay_in_doubt(2);
        let v = ready(log).await;
        let c = id("c1");
        assert!(matches!(v.publish(&c, 1, 0, Color([2, 2, 2])).await, Err(PublishError::Unknown(_))));
        assert_eq!(v.publish(&c, 2, 0, Color([3, 3, 3])).await.unwrap().version, 1);
        assert_eq!(v.log.events_of("c1"), vec![1]);
    }

    #[tokio::test]
    async fn a_retry_with_the_same_key_waits_for_the_in_doubt_outcome_then_replays() {
        let log = FakeLog::new(3, |n| if n == 0 { Fate::InDoubtThenCommit } else { Fate::Commit });
        log.stay_in_doubt(1_000_000);
        let v = ready(log).await;
        let c = id("c1");
        let first = v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("key-1")).await;
        assert!(matches!(first, Err(PublishError::Unknown(_))));
        // Still in doubt: the retry is refused, not run a second time.
        assert_eq!(v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("key-1")).await, Err(PublishError::KeyInFlight));
        assert_eq!(v.in_doubt_partitions(), vec![v.partition_of(&c)]);
        v.log.stay_in_doubt(0);
        until("the in-doubt transaction resolved", || v.in_doubt_partitions().is_empty()).await;
        let (p, replayed) = v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("key-1")).await.unwrap();
        assert_eq!((p.version, replayed), (1, true));
        assert_eq!(v.log.events_of("c1"), vec![1], "applied exactly once");
        // The same key with another pixel is a conflict, and writes nothing.
        assert_eq!(v.publish_with_key(&c, 2, 2, Color([5, 5, 5]), Some("key-1")).await, Err(PublishError::KeyConflict));
        assert_eq!(v.log.events_of("c1"), vec![1]);
    }

    #[tokio::test]
    async fn a_retry_after_a_transaction_that_did_not_commit_writes_once() {
        let v = ready(FakeLog::new(3, |n| match n {
            0 => Fate::InDoubtThenAbort,
            1 => Fate::Abort,
            _ => Fate::Commit,
        }))
        .await;
        let c = id("c1");
        assert!(matches!(v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await, Err(PublishError::Unknown(_))));
        until("resolved", || v.in_doubt_partitions().is_empty()).await;
        assert!(matches!(v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await, Err(PublishError::NotWritten(_))));
        let (p, replayed) = v.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await.unwrap();
        assert_eq!((p.version, replayed), (1, false));
        assert_eq!(v.log.events_of("c1"), vec![1]);
    }

    #[tokio::test]
    async fn a_restarted_publisher_rebuilds_heads_and_keys_from_the_log() {
        let first = ready(FakeLog::new(3, |_| Fate::Commit)).await;
        for i in 0..5 {
            first.publish(&id("c1"), i, 0, Color([i as u8, 0, 0])).await.unwrap();
        }
        let (p, _) = first.publish_with_key(&id("c1"), 1, 1, Color([1, 1, 1]), Some("once")).await.unwrap();
        let truth = first.truth(&id("c1")).await.unwrap();
        // A new process over the same log.
        let restarted = Versions::shared(Arc::new(first.log.another_publisher()), DIMS, 3, Timings { answer_timeout: WAIT, ..Timings::default() });
        assert_eq!(restarted.publish(&id("c1"), 0, 0, Color([0, 0, 0])).await, Err(PublishError::NotReady));
        assert_eq!(restarted.rebuild().await.unwrap(), 6);
        assert_eq!(restarted.truth(&id("c1")).await.unwrap(), truth);
        assert_eq!(restarted.publish_with_key(&id("c1"), 1, 1, Color([1, 1, 1]), Some("once")).await.unwrap(), (p, true));
        assert_eq!(restarted.publish(&id("c1"), 0, 0, Color([0, 0, 0])).await.unwrap().version, 7);
        assert_eq!(restarted.log.events_of("c1"), (1..=7).collect::<Vec<u64>>());
    }

    /// A key's window counts from its event's `published_at_ms` whether the key was answered here
    /// or learnt from the log by a restarted publisher: it ends at the same moment on both, also
    /// when the commit took a while.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_keys_window_starts_at_publish_time_live_and_after_a_restart() {
        let log = FakeLog::new(3, |_| Fate::Commit);
        let commit = log.gate(0);
        let v = ready(log).await;
        let publish = tokio::spawn({
            let v = v.clone();
            async move { v.publish_with_key(&id("c1"), 1, 1, Color([1, 1, 1]), Some("slow")).await }
        });
        until("the transaction began", || v.log.attempts() >= 1).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
        commit.notify_one();
        publish.await.unwrap().unwrap();
        let live = v.keys.lock().unwrap().window_start_of("slow").expect("kept");
        let restarted = Versions::shared(Arc::new(v.log.another_publisher()), DIMS, 3, Timings { answer_timeout: WAIT, ..Timings::default() });
        restarted.rebuild().await.unwrap();
        let relearnt = restarted.keys.lock().unwrap().window_start_of("slow").expect("relearnt");
        assert_eq!(live, relearnt, "the window starts when the event was placed, on both paths");
    }

    fn snapshotting(every_versions: u64, every: Duration) -> Timings {
        Timings { answer_timeout: WAIT, snapshots: SnapshotPolicy { every_versions, every, ..SnapshotPolicy::default() }, ..Timings::default() }
    }

    /// The snapshot of `channel` with the highest version in the fake's snapshot topic, and the
    /// partition's latest checkpoint.
    fn latest_snapshot(log: &FakeLog, partition: i32, channel: &str) -> (Option<shared::snapshot::Snapshot>, Option<i64>) {
        let mut snap: Option<shared::snapshot::Snapshot> = None;
        let mut checkpoint = None;
        for e in log.snapshot_entries(partition) {
            match e {
                shared::snapshot::Entry::Canvas(s) if s.canvas.as_str() == channel => {
                    assert!(snap.as_ref().is_none_or(|have| s.version > have.version), "a snapshot never goes back");
                    snap = Some(s);
                }
                shared::snapshot::Entry::Canvas(_) | shared::snapshot::Entry::Channel(_) => {}
                shared::snapshot::Entry::Checkpoint(c) => {
                    assert!(checkpoint.is_none_or(|have| c.offset >= have), "a checkpoint never goes back");
                    checkpoint = Some(c.offset);
                }
                shared::snapshot::Entry::Keys(_) | shared::snapshot::Entry::KeysFrom(_) => {}
            }
        }
        (snap, checkpoint)
    }

    #[tokio::test]
    async fn a_channel_is_snapshotted_every_n_versions_inside_the_transactions() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let v = Versions::shared(log.clone(), DIMS, 3, snapshotting(5, Duration::from_secs(3600)));
        v.rebuild().await.unwrap();
        let c = id("c1");
        let p = v.partition_of(&c);
        for i in 0..12 {
            v.publish(&c, i % 8, 0, Color([i as u8, 0, 0])).await.unwrap();
        }
        // Taken of the committed head by the transactions of versions 6 and 11.
        let (snap, checkpoint) = latest_snapshot(&log, p, "c1");
        let snap = snap.expect("a snapshot");
        assert_eq!(snap.version, 10);
        let mut at_10 = Canvas::new(DIMS);
        for i in 0..10u32 {
            at_10.apply(&shared::PixelEvent { canvas: c.clone(), version: i as u64 + 1, x: i % 8, y: 0, color: Color([i as u8, 0, 0]), published_at_ms: 0 });
        }
        assert_eq!(snap.to_canvas().hash(), at_10.hash(), "the snapshot holds the pixels of version 10");
        // The snapshot covers the record of version 10; replay starts right after it (its
        // marker), before version 11's record.
        let at = |version| (0..log.end_of(p)).find(|o| log.record_at(p, *o).is_some_and(|r| r[0].0.version == version)).unwrap();
        assert_eq!(snap.offset, at(10) + 1);
        assert_eq!(checkpoint, Some(snap.offset));
        assert!(snap.offset <= at(11));
        assert_eq!(v.counters().to_json()["snapshots"], 2);
    }

    #[tokio::test]
    async fn a_restarted_publisher_writes_back_the_reset_count_of_the_snapshot_it_started_from() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let c = id("c1");
        let p = shared::partitioner::partition_for(c.as_str().as_bytes(), 3) as i32;
        let mut head = Canvas::new(DIMS);
        for v in 1..=3 {
            head.apply(&shared::PixelEvent { canvas: c.clone(), version: v, x: v as u32, y: 0, color: Color([v as u8, 0, 0]), published_at_ms: 0 });
        }
        // A channel reset twice (no operation does that yet; its snapshot says so).
        log.put_snapshot(p, &shared::snapshot::Snapshot::of(&c, &head, 2, 0));
        let v = Versions::shared(log.clone(), DIMS, 3, snapshotting(1, Duration::from_secs(3600)));
        v.rebuild().await.unwrap();
        assert_eq!(v.publish(&c, 0, 1, Color([9, 9, 9])).await.unwrap().version, 4);
        v.publish(&c, 1, 1, Color([9, 9, 9])).await.unwrap();
        let snap = latest_snapshot(&log, p, "c1").0.expect("snapshots of the new versions");
        assert!(snap.version >= 4, "a snapshot written by this publisher: {}", snap.version);
        assert_eq!(snap.epoch, 2, "the reset count is carried, not written back as 0");
    }

    #[tokio::test]
    async fn a_partition_written_fast_is_snapshotted_by_records_so_the_checkpoint_stays_near_its_end() {
        let log = Arc::new(FakeLog::new(1, |_| Fate::Commit));
        // Neither the version count nor the age would make a snapshot due in this test.
        let policy = SnapshotPolicy { every_versions: 1_000_000, every: Duration::from_secs(3600), every_records: 20, ..SnapshotPolicy::default() };
        let v = Versions::shared(log.clone(), DIMS, 1, Timings { answer_timeout: WAIT, snapshots: policy, ..Timings::default() });
        v.rebuild().await.unwrap();
        // 40 channels, 3 versions each: 120 events, each in a transaction of its own (a record
        // and a marker), about 240 offsets.
        for round in 0..3u32 {
            for c in 0..40u32 {
                v.publish(&id(&format!("c{c}")), round, 0, Color([c as u8, 0, 0])).await.unwrap();
            }
        }
        let end = log.end_of(0);
        let (_, checkpoint) = latest_snapshot(&log, 0, "");
        let checkpoint = checkpoint.expect("a checkpoint written");
        // Every channel whose oldest uncovered record is 20 offsets behind the end is due, so the
        // checkpoint trails the end by about 20 offsets (plus what the last transactions added).
        assert!(end - checkpoint <= 40, "checkpoint {checkpoint}, end {end}");
        assert!(v.counters().to_json()["snapshots"].as_u64().unwrap() > 0);
    }

    #[tokio::test]
    async fn keys_below_the_checkpoint_come_back_from_the_snapshot_topic_not_the_log() {
        let log = Arc::new(FakeLog::new(1, |_| Fate::Commit));
        let timings = snapshotting(2, Duration::from_secs(3600));
        let first = Versions::shared(log.clone(), DIMS, 1, timings);
        first.rebuild().await.unwrap();
        let c = id("c1");
        let (keyed, replayed) = first.publish_with_key(&c, 1, 1, Color([9, 9, 9]), Some("k-1")).await.unwrap();
        assert!(!replayed);
        for x in 0..5 {
            first.publish(&c, x, 0, Color([1, 0, 0])).await.unwrap();
        }
        let (_, checkpoint) = latest_snapshot(&log, 0, "c1");
        let checkpoint = checkpoint.expect("a checkpoint");
        assert!(checkpoint > keyed.offset, "the checkpoint moved past the keyed record");
        // Every record below the checkpoint is deleted, as retention would: within the key
        // window, only the snapshot topic still knows k-1.
        log.delete_records(0, checkpoint);
        let restarted = Versions::shared(Arc::new(log.another_publisher()), DIMS, 1, timings);
        let read = restarted.rebuild().await.unwrap();
        assert!(read <= 2, "the log is read from the checkpoint only: {read} records");
        let (again, replayed) = restarted.publish_with_key(&c, 1, 1, Color([9, 9, 9]), Some("k-1")).await.unwrap();
        assert_eq!((again.version, replayed), (keyed.version, true), "a retry within the window is answered, not applied again");
        assert_eq!(restarted.publish_with_key(&c, 2, 2, Color([9, 9, 9]), Some("k-1")).await, Err(PublishError::KeyConflict));
    }

    #[tokio::test]
    async fn key_records_of_an_old_history_are_not_learned_on_a_recreated_events_topic() {
        let log = Arc::new(FakeLog::new(1, |_| Fate::Commit));
        let timings = snapshotting(2, Duration::from_secs(3600));
        let first = Versions::shared(log.clone(), DIMS, 1, timings);
        first.rebuild().await.unwrap();
        let c = id("c1");
        first.publish_with_key(&c, 1, 1, Color([9, 9, 9]), Some("k-1")).await.unwrap();
        for x in 0..5 {
            first.publish(&c, x, 0, Color([1, 0, 0])).await.unwrap();
        }
        assert!(log.snapshot_entries(0).iter().any(|e| matches!(e, shared::snapshot::Entry::Keys(_))), "a key record was written");
        log.recreate_events_topic();
        let restarted = Versions::shared(Arc::new(log.another_publisher()), DIMS, 1, timings);
        restarted.rebuild().await.unwrap();
        let (p, replayed) = restarted.publish_with_key(&c, 1, 1, Color([9, 9, 9]), Some("k-1")).await.unwrap();
        assert!(!replayed, "the old history's answer (version {}) is not this log's", p.version);
        // The old history's key records go with the new history's first checkpoint.
        for x in 0..4 {
            restarted.publish(&c, x, 2, Color([2, 0, 0])).await.unwrap();
        }
        let again = Versions::shared(Arc::new(log.another_publisher()), DIMS, 1, timings);
        again.rebuild().await.unwrap();
        assert_eq!(again.publish_with_key(&c, 1, 1, Color([9, 9, 9]), Some("k-1")).await.unwrap(), (p, true), "the new history's answer");
    }

    #[tokio::test]
    async fn a_restart_reads_the_log_from_the_checkpoints_not_back_through_the_key_window() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let timings = snapshotting(1, Duration::from_secs(3600));
        let first = Versions::shared(log.clone(), DIMS, 3, timings);
        first.rebuild().await.unwrap();
        for i in 0..30u32 {
            first.publish(&id(&format!("c{}", i % 6)), i % 8, 0, Color([i as u8, 0, 0])).await.unwrap();
        }
        let restarted = Versions::shared(Arc::new(log.another_publisher()), DIMS, 3, timings);
        let read = restarted.rebuild().await.unwrap();
        // Every version is snapshotted, by the transaction after it: what is left to read is each
        // channel's last record, 6 of the 30 (all within the key window).
        assert_eq!(read, 6, "records read");
    }

    #[tokio::test]
    async fn an_idle_channel_is_snapshotted_by_age_so_the_checkpoint_moves() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let v = Versions::shared(log.clone(), DIMS, 3, snapshotting(1_000, Duration::from_millis(50)));
        v.rebuild().await.unwrap();
        let (a, b) = (id("c1"), id("c4"));
        assert_eq!(v.partition_of(&a), v.partition_of(&b), "two canvases of one partition");
        let p = v.partition_of(&a);
        v.publish(&a, 0, 0, Color([1, 0, 0])).await.unwrap();
        v.publish(&b, 0, 0, Color([2, 0, 0])).await.unwrap();
        v.publish(&b, 1, 0, Color([2, 0, 0])).await.unwrap();
        // Nobody publishes again: the committer writes a transaction of snapshots alone.
        until("both canvases snapshotted", || latest_snapshot(&log, p, "c1").0.is_some() && latest_snapshot(&log, p, "c4").0.is_some()).await;
        let (sb, checkpoint) = latest_snapshot(&log, p, "c4");
        assert_eq!(sb.unwrap().version, 2);
        assert!(checkpoint.unwrap() >= log.end_of(p) - 1, "every canvas is covered: the checkpoint is the partition's end");
        assert_eq!(v.uncovered_channels(), 0);
    }

    /// A publisher that stopped writing (here fenced) while a channel is due a snapshot by age: its
    /// committer found the snapshot due, `commit` returned at once (writes stopped) and the loop
    /// went round again without ever awaiting anything, pinning a worker thread forever (on a
    /// current-thread runtime, nothing else ever ran again; a fenced process could not exit).
    #[test]
    fn a_stopped_publisher_with_a_snapshot_due_does_not_spin() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
                let old = Versions::shared(log.clone(), DIMS, 3, snapshotting(1_000, Duration::from_millis(50)));
                old.rebuild().await.unwrap();
                let c = id("c1");
                old.publish(&c, 0, 0, Color([1, 0, 0])).await.unwrap();
                // Another publisher fences this one before the snapshot is due.
                let new = Versions::shared(Arc::new(log.another_publisher()), DIMS, 3, snapshotting(1_000, Duration::from_secs(3600)));
                new.rebuild().await.unwrap();
                // At the idle committer's next look (every second) the old one's snapshot
                // transaction is fenced; writes stop; the snapshot stays due.
                tokio::time::sleep(Duration::from_millis(2_500)).await;
                let _ = tx.send(old.is_fenced());
            });
        });
        let fenced = rx.recv_timeout(Duration::from_secs(10)).expect("the runtime ran nothing else for 10 s: a committer spins");
        assert!(fenced, "the snapshot transaction found the old publisher fenced");
    }

    #[tokio::test]
    async fn an_aborted_transaction_leaves_no_snapshot_and_the_next_one_takes_it() {
        let log = Arc::new(FakeLog::new(3, |n| if n == 3 { Fate::Abort } else { Fate::Commit }));
        let v = Versions::shared(log.clone(), DIMS, 3, snapshotting(3, Duration::from_secs(3600)));
        v.rebuild().await.unwrap();
        let c = id("c1");
        let p = v.partition_of(&c);
        for i in 0..3 {
            v.publish(&c, i, 0, Color([1, 0, 0])).await.unwrap();
        }
        // Attempt 3 carries the snapshot of version 3 and is aborted.
        assert!(v.publish(&c, 3, 0, Color([1, 0, 0])).await.is_err());
        assert_eq!(latest_snapshot(&log, p, "c1").0, None);
        v.publish(&c, 3, 0, Color([1, 0, 0])).await.unwrap();
        assert_eq!(latest_snapshot(&log, p, "c1").0.map(|s| s.version), Some(3));
    }

    #[tokio::test]
    async fn a_restart_after_retention_deleted_every_covered_record_continues_the_versions() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let first = Versions::shared(log.clone(), DIMS, 3, snapshotting(4, Duration::from_millis(50)));
        first.rebuild().await.unwrap();
        let (a, quiet) = (id("c1"), id("c2"));
        for i in 0..9 {
            first.publish(&a, i % 8, 1, Color([9, i as u8, 0])).await.unwrap();
        }
        first.publish(&quiet, 3, 3, Color([7, 7, 7])).await.unwrap();
        until("every canvas covered", || first.uncovered_channels() == 0).await;
        let truths = (first.truth(&a).await.unwrap(), first.truth(&quiet).await.unwrap());
        // Retention deletes everything below each partition's checkpoint.
        for p in 0..3 {
            if let (_, Some(cp)) = latest_snapshot(&log, p, "") {
                log.delete_records(p, cp);
            }
        }
        let restarted = Versions::shared(Arc::new(log.another_publisher()), DIMS, 3, snapshotting(4, Duration::from_millis(50)));
        restarted.rebuild().await.unwrap();
        assert_eq!((restarted.truth(&a).await.unwrap(), restarted.truth(&quiet).await.unwrap()), truths);
        assert!(restarted.incomplete_channels().is_empty());
        assert_eq!(restarted.publish(&quiet, 0, 0, Color([0, 0, 0])).await.unwrap().version, 2, "the head came from the snapshot");
        assert_eq!(restarted.publish(&a, 0, 0, Color([0, 0, 0])).await.unwrap().version, 10);
    }

    #[tokio::test]
    async fn a_restart_that_cannot_use_a_snapshot_refuses_to_start_rather_than_reuse_versions() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let first = Versions::shared(log.clone(), DIMS, 3, snapshotting(2, Duration::from_secs(3600)));
        first.rebuild().await.unwrap();
        let c = id("c1");
        for i in 0..3 {
            first.publish(&c, i, 0, Color([1, 0, 0])).await.unwrap();
        }
        assert_eq!(first.counters().to_json()["snapshots"], 1);
        // Another canvas size: that snapshot cannot be used, and it may be the only head.
        let other = CanvasDims { width: 4, height: 4 };
        let restarted = Versions::shared(Arc::new(log.another_publisher()), other, 3, snapshotting(2, Duration::from_secs(3600)));
        let e = restarted.rebuild().await.unwrap_err();
        assert!(e.to_string().contains("canvas size"), "{e}");
        assert!(!restarted.is_ready());
    }

    #[tokio::test]
    async fn an_idle_covered_partition_whose_whole_log_retention_deleted_starts() {
        let log = Arc::new(FakeLog::new(1, |_| Fate::Commit));
        let timings = snapshotting(1_000, Duration::from_millis(50));
        let first = Versions::shared(log.clone(), DIMS, 1, timings);
        first.rebuild().await.unwrap();
        let c = id("c1");
        for x in 0..3 {
            first.publish(&c, x, 0, Color([1, 0, 0])).await.unwrap();
        }
        until("every canvas covered", || first.uncovered_channels() == 0).await;
        let (snap, checkpoint) = latest_snapshot(&log, 0, "c1");
        assert_eq!(snap.map(|s| s.version), Some(3));
        // The checkpoint, written with everything covered, is the offset after the last record:
        // its transaction's commit marker. A week later retention deletes the whole log, marker
        // included (Kafka rolls the active segment when all of it has expired).
        assert_eq!(checkpoint, Some(log.end_of(0) - 1));
        log.delete_records(0, log.end_of(0));
        let restarted = Versions::shared(Arc::new(log.another_publisher()), DIMS, 1, timings);
        restarted.rebuild().await.expect("only a commit marker was deleted after the checkpoint");
        assert_eq!(restarted.publish(&c, 0, 1, Color([2, 0, 0])).await.unwrap().version, 4);
    }

    #[tokio::test]
    async fn a_restart_that_finds_needed_records_deleted_refuses_naming_the_partition() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let first = ready_on(log.clone(), WAIT).await;
        let c = id("c1");
        for i in 0..4 {
            first.publish(&c, i, 0, Color([1, 0, 0])).await.unwrap();
        }
        // No snapshot covers them (the default interval is a minute), and the log loses the
        // first two records: versions 1 and 2 of c1, and any other channel's records there, are
        // known nowhere, so a channel whose every record was there would start again at 1.
        let p = first.partition_of(&c);
        let second = (0..log.end_of(p)).filter(|o| log.record_at(p, *o).is_some()).nth(2).unwrap();
        log.delete_records(p, second);
        let restarted = Versions::shared(Arc::new(log.another_publisher()), DIMS, 3, Timings { answer_timeout: WAIT, ..Timings::default() });
        let e = restarted.rebuild().await.expect_err("records no snapshot covers were deleted").to_string();
        assert!(e.contains(&format!("partition {p} (checkpoint")) && e.contains(&format!("log start {second}")), "{e}");
        assert!(!restarted.is_ready());
    }

    #[tokio::test]
    async fn a_restart_whose_uncovered_tail_was_deleted_refuses_rather_than_reuse_versions() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let first = Versions::shared(log.clone(), DIMS, 3, snapshotting(3, Duration::from_secs(3600)));
        first.rebuild().await.unwrap();
        let c = id("c1");
        let p = first.partition_of(&c);
        for i in 0..5 {
            first.publish(&c, i, 0, Color([1, 0, 0])).await.unwrap();
        }
        let (snap, checkpoint) = latest_snapshot(&log, p, "c1");
        assert_eq!((snap.map(|s| s.version), checkpoint.is_some()), (Some(3), true), "versions 4 and 5 are not covered");
        // Every record after the checkpoint is deleted (retention shorter than the snapshot
        // interval): versions 4 and 5 exist nowhere but in what clients already saw.
        log.delete_records(p, log.end_of(p));
        let restarted = Versions::shared(Arc::new(log.another_publisher()), DIMS, 3, snapshotting(3, Duration::from_secs(3600)));
        let e = restarted.rebuild().await.expect_err("a restart would hand out versions 4 and 5 again");
        let e = e.to_string();
        assert!(e.contains("c1") && e.contains(&format!("partition {p}")), "names the canvas and its partition: {e}");
        assert!(!restarted.is_ready());
    }

    #[tokio::test]
    async fn a_second_publisher_fences_the_first_and_continues_its_versions() {
        let old = ready(FakeLog::new(3, |_| Fate::Commit)).await;
        let c = id("c1");
        for x in 0..3 {
            old.publish(&c, x, 0, Color([1, 1, 1])).await.unwrap();
        }
        let new = successor(&old).await;
        // The old one learns it at its next write: nothing is written, and it accepts no more.
        assert_eq!(old.publish(&c, 3, 0, Color([1, 1, 1])).await, Err(PublishError::Fenced));
        assert!(old.is_fenced() && !old.is_ready());
        tokio::time::timeout(Duration::from_secs(1), old.stopped_for_good()).await.expect("stopped_for_good() resolves");
        assert!(old.stopped().is_some_and(|why| why.contains("fenced")));
        assert_eq!(old.publish(&id("other"), 0, 0, Color([1, 1, 1])).await, Err(PublishError::Fenced), "every partition refuses");
        assert_eq!(old.truth(&c).await, Err(PublishError::Fenced));
        assert_eq!(new.publish(&c, 4, 0, Color([1, 1, 1])).await.unwrap().version, 4);
        assert_eq!(new.log.events_of("c1"), vec![1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn fenced_while_committing_is_an_unknown_outcome_the_successor_knows() {
        let old = ready(FakeLog::new(3, |n| if n == 0 { Fate::FencedCommitted } else { Fate::Commit })).await;
        let c = id("c1");
        assert!(matches!(old.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await, Err(PublishError::Unknown(_))));
        assert!(old.is_fenced());
        let new = successor(&old).await;
        assert!(new.publish_with_key(&c, 1, 1, Color([5, 5, 5]), Some("k")).await.unwrap().1, "the successor read the key from the log");
        assert_eq!(new.log.events_of("c1"), vec![1]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_still_queued_at_its_deadline_is_not_written_and_frees_its_key() {
        let log = FakeLog::new(3, |_| Fate::Commit);
        let stuck = log.gate(0);
        let v = ready_on(Arc::new(log), Duration::from_millis(200)).await;
        let c = id("c1");
        let first = {
            let (v, c) = (v.clone(), c.clone());
            tokio::spawn(async move { v.publish(&c, 0, 0, Color([1, 1, 1])).await })
        };
        until("the first transaction began", || v.log.attempts() >= 1).await;
        // Queued behind a transaction that does not end: withdrawn at the deadline, certainly unwritten.
        let queued = v.publish_with_key(&c, 1, 0, Color([2, 2, 2]), Some("q")).await;
        assert!(matches!(queued, Err(PublishError::NotWritten(_))), "{queued:?}");
        // The first one's transaction had begun: its outcome is unknown to its caller.
        assert!(matches!(first.await.unwrap(), Err(PublishError::Unknown(_))));
        stuck.notify_one();
        until("the first transaction committed", || v.log.events_of("c1") == vec![1]).await;
        // The key was released: a retry runs, once.
        let (p, replayed) = v.publish_with_key(&c, 1, 0, Color([2, 2, 2]), Some("q")).await.unwrap();
        assert_eq!((p.version, replayed), (2, false));
        assert_eq!(v.log.events_of("c1"), vec![1, 2]);
    }

    #[tokio::test]
    async fn a_group_of_one_channel_commits_in_one_transaction_and_stops_at_a_reused_key() {
        let v = ready(FakeLog::new(3, |_| Fate::Commit)).await;
        let c = id("c1");
        let (p, _) = v.publish_with_key(&c, 0, 0, Color([1, 1, 1]), Some("used")).await.unwrap();
        let before = v.log.attempts();
        let pixels: Vec<Pixel<'_>> = (0..1_000).map(|i| (i % 8, i / 8 % 8, Color([2, 2, 2]), None)).collect();
        let results = v.publish_many(&c, &pixels).await;
        assert_eq!(v.log.attempts() - before, 1, "1,000 events of one canvas: one transaction");
        let versions: Vec<u64> = results.iter().map(|r| r.as_ref().unwrap().0.version).collect();
        assert_eq!(versions, (2..=1_001).collect::<Vec<u64>>());
        // A replayed key keeps its first answer; a conflicting one stops the group there.
        let pixels: Vec<Pixel<'_>> =
            vec![(0, 0, Color([1, 1, 1]), Some("used")), (1, 1, Color([3, 3, 3]), Some("fresh")), (0, 0, Color([9, 9, 9]), Some("used")), (2, 2, Color([3, 3, 3]), None)];
        let results = v.publish_many(&c, &pixels).await;
        assert_eq!(results.len(), 3, "nothing after the conflict is attempted");
        assert_eq!(results[0], Ok((p, true)));
        assert_eq!(results[1].as_ref().unwrap().0.version, 1_002);
        assert_eq!(results[2], Err(PublishError::KeyConflict));
        assert_eq!(*v.log.events_of("c1").last().unwrap(), 1_002);
    }

    /// Channels of different partitions that publish at the same time share transactions.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn publishes_to_several_partitions_share_a_transaction() {
        let log = FakeLog::new(3, |_| Fate::Commit);
        let first = log.gate(0);
        let v = ready(log).await;
        // Three channels on three different partitions.
        let channels: Vec<ChannelId> = {
            let mut found: HashMap<i32, ChannelId> = HashMap::new();
            for i in 0.. {
                let c = id(&format!("c{i}"));
                found.entry(v.partition_of(&c)).or_insert(c);
                if found.len() == 3 {
                    break;
                }
            }
            found.into_values().collect()
        };
        let blocker = {
            let v = v.clone();
            tokio::spawn(async move { v.publish(&id("blocker"), 0, 0, Color([1, 1, 1])).await })
        };
        until("the first transaction began", || v.log.attempts() >= 1).await;
        let tasks: Vec<_> = channels
            .iter()
            .flat_map(|c| (0..3).map(move |x| (c.clone(), x)))
            .map(|(c, x)| {
                let v = v.clone();
                tokio::spawn(async move { v.publish(&c, x, 0, Color([2, 2, 2])).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        first.notify_one();
        blocker.await.unwrap().unwrap();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(v.log.attempts(), 2, "nine publishes on three partitions that waited together: one transaction");
        assert!(v.log.writers().iter().all(|w| *w == Writer::Shared));
        for c in &channels {
            assert_contiguous(&v.log.events_of(c.as_str()), c.as_str());
        }
    }

    /// A partition whose records stall the shared transaction is isolated: the others' publishes
    /// are retried in the next shared transaction (their callers never see the abort), the stalled
    /// one's in transactions of its own, and nothing is written twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_partition_that_stalls_the_shared_transaction_is_isolated_and_the_others_go_on() {
        let log = FakeLog::new(3, |n| if n == 1 { Fate::StallLowest } else { Fate::Commit });
        let first = log.gate(0);
        let v = ready(log).await;
        let mut by_partition: HashMap<i32, ChannelId> = HashMap::new();
        for i in 0.. {
            let c = id(&format!("s{i}"));
            by_partition.entry(v.partition_of(&c)).or_insert(c);
            if by_partition.len() == 3 {
                break;
            }
        }
        let blocker = {
            let v = v.clone();
            tokio::spawn(async move { v.publish(&id("blocker"), 0, 0, Color([1, 1, 1])).await })
        };
        until("the first transaction began", || v.log.attempts() >= 1).await;
        let tasks: Vec<_> = by_partition
            .values()
            .map(|c| {
                let (v, c) = (v.clone(), c.clone());
                tokio::spawn(async move { v.publish(&c, 1, 1, Color([2, 2, 2])).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        first.notify_one();
        blocker.await.unwrap().unwrap();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap().version, 1, "every publish was answered 201 once, at version 1");
        }
        let writers = v.log.writers();
        assert_eq!(writers[1], Writer::Shared, "the stalled transaction was the shared one");
        assert!(writers.contains(&Writer::Partition(0)), "partition 0 (the lowest of the stalled transaction) got a transaction of its own: {writers:?}");
        let reports = v.partition_reports();
        assert_eq!(reports[0].mode, "isolated");
        assert!(reports[1..].iter().all(|r| r.mode == "shared"), "{reports:?}");
        assert_eq!(v.counters().isolations.load(std::sync::atomic::Ordering::Relaxed), 1);
        for c in by_partition.values() {
            assert_eq!(v.log.events_of(c.as_str()), vec![1], "{c}: written once");
        }
        // The isolated partition keeps working on its own writer.
        let c0 = by_partition[&0].clone();
        assert_eq!(v.publish(&c0, 2, 2, Color([3, 3, 3])).await.unwrap().version, 2);
        assert_eq!(*v.log.writers().last().unwrap(), Writer::Partition(0));
    }

    #[tokio::test]
    async fn after_a_fatal_producer_error_the_publisher_starts_over_and_writes_once() {
        let v = ready(FakeLog::new(3, |n| if n == 0 { Fate::FatalBeforeCommit } else { Fate::Commit })).await;
        let c = id("c1");
        assert_eq!(v.publish_with_key(&c, 0, 0, Color([1, 1, 1]), Some("k")).await, Err(PublishError::NotReady));
        assert!(v.failed() && v.stopped().is_some_and(|why| why.contains("failed for good")), "{:?}", v.stopped());
        assert!(!v.is_ready() && !v.is_fenced());
        assert_eq!(v.publish(&c, 0, 0, Color([1, 1, 1])).await, Err(PublishError::NotReady));
        assert!(v.log.events_of("c1").is_empty());
        // Starting over (new producers, the log read again), as a restart would.
        v.start_over();
        assert!(!v.failed());
        v.rebuild().await.unwrap();
        assert!(v.is_ready());
        let (p, replayed) = v.publish_with_key(&c, 0, 0, Color([1, 1, 1]), Some("k")).await.unwrap();
        assert_eq!((p.version, replayed), (1, false));
        assert_eq!(v.publish_with_key(&c, 0, 0, Color([1, 1, 1]), Some("k")).await.unwrap(), (p, true));
        assert_eq!(v.log.events_of("c1"), vec![1]);
    }

    /// A publish still queued in the committers' state from before a start-over must not touch the
    /// key store of the publisher that started over: its caller's deadline used to release its key
    /// even though a retry had taken that key since (in flight in the new state), so a third
    /// request with the key ran again and the publish was applied twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_publish_left_queued_by_a_start_over_does_not_release_a_retry_s_key() {
        let log = FakeLog::new(3, |n| match n {
            0 => Fate::StallLowest,
            3 => Fate::FatalBeforeCommit,
            _ => Fate::Commit,
        });
        let (old_blocker, retry_txn) = (log.gate(2), log.gate(4));
        let v = ready_on(Arc::new(log), Duration::from_millis(1_000)).await;
        let on = |want: i32| (0..).map(|i| id(&format!("p{i}"))).find(|c| v.partition_of(c) == want).unwrap();
        let (c0, c1) = (on(0), on(1));
        // Transaction 0 stalls on partition 0, which is isolated; its publish commits in 1.
        assert_eq!(v.publish(&c0, 0, 0, Color([1, 1, 1])).await.unwrap().version, 1);
        assert_eq!(v.partition_reports()[0].mode, "isolated");
        // The shared committer is held in transaction 2; a keyed publish queues behind it.
        let blocker = {
            let (v, c1) = (v.clone(), c1.clone());
            tokio::spawn(async move { v.publish(&c1, 0, 0, Color([1, 1, 1])).await })
        };
        until("transaction 2 began", || v.log.attempts() >= 3).await;
        let first = {
            let (v, c1) = (v.clone(), c1.clone());
            tokio::spawn(async move { v.publish_with_key(&c1, 1, 1, Color([7, 7, 7]), Some("k")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The isolated partition's producer fails for good (transaction 3): the publisher starts
        // over, as `lib.rs` does.
        assert_eq!(v.publish(&c0, 1, 0, Color([1, 1, 1])).await, Err(PublishError::NotReady));
        assert!(v.failed());
        v.start_over();
        v.rebuild().await.unwrap();
        drop(old_blocker);
        // A retry with the key runs in the new state; its transaction (4) does not end yet.
        let retry = {
            let (v, c1) = (v.clone(), c1.clone());
            tokio::spawn(async move { v.publish_with_key(&c1, 1, 1, Color([7, 7, 7]), Some("k")).await })
        };
        until("transaction 4 began", || v.log.attempts() >= 5).await;
        // The first request was still queued in the old state: certainly not written.
        let first = first.await.unwrap();
        assert_eq!(first, Err(PublishError::NotReady), "answered when its state stopped, not at its deadline");
        // The retry's key is still in flight: a third request must not run.
        let third = {
            let (v, c1) = (v.clone(), c1.clone());
            tokio::spawn(async move { v.publish_with_key(&c1, 1, 1, Color([7, 7, 7]), Some("k")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        retry_txn.notify_one();
        let (third, _, _) = (third.await.unwrap(), retry.await.unwrap(), blocker.await.unwrap());
        let applied = v.log.committed().into_iter().flatten().filter(|(_, k)| k.as_deref() == Some("k")).count();
        assert_eq!(applied, 1, "the publish with key k was applied {applied} times (third request: {third:?})");
        assert_eq!(third, Err(PublishError::KeyInFlight));
    }

    /// Issue 32: a full key store refuses new keys rather than forgetting one within the window,
    /// and a restarted publisher keeps every key of the window it reads, past the capacity.
    #[tokio::test]
    async fn a_full_key_store_refuses_new_keys_and_keeps_replaying_the_applied_ones() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let timings = Timings { answer_timeout: WAIT, ..Timings::default() };
        let v = Versions::shared(log.clone(), DIMS, 3, timings).with_idempotency_keys(3);
        v.rebuild().await.unwrap();
        let c = id("c1");
        let mut first = Vec::new();
        for i in 0..3u32 {
            first.push(v.publish_with_key(&c, i, 0, Color([1, 1, 1]), Some(&format!("k{i}"))).await.unwrap().0);
        }
        let refused = v.publish_with_key(&c, 3, 0, Color([1, 1, 1]), Some("k3")).await;
        let Err(PublishError::IdempotencyStoreFull { retry_after_secs, capacity, window_secs }) = refused else { panic!("{refused:?}") };
        assert!((599..=601).contains(&retry_after_secs), "until the oldest key leaves the 600 s window: {retry_after_secs}");
        assert_eq!((capacity, window_secs), (3, 600));
        // Known keys are answered as ever; publishes without a key go on.
        assert_eq!(v.publish_with_key(&c, 0, 0, Color([1, 1, 1]), Some("k0")).await.unwrap(), (first[0].clone(), true));
        assert_eq!(v.publish_with_key(&c, 7, 7, Color([1, 1, 1]), Some("k1")).await, Err(PublishError::KeyConflict));
        assert_eq!(v.publish(&c, 3, 0, Color([1, 1, 1])).await.unwrap().version, 4);
        // A group stops at the refused key.
        let pixels: Vec<Pixel<'_>> = vec![(4, 0, Color([2, 2, 2]), None), (5, 0, Color([2, 2, 2]), Some("k5")), (6, 0, Color([2, 2, 2]), None)];
        let results = v.publish_many(&c, &pixels).await;
        assert_eq!(results.len(), 2, "nothing after the refusal is attempted");
        assert!(matches!(results[1], Err(PublishError::IdempotencyStoreFull { .. })), "{results:?}");
        assert_eq!(v.log.events_of("c1"), vec![1, 2, 3, 4, 5], "the refused keys wrote nothing");
        assert_eq!(v.counters().metrics.idempotency_store_full.get(), 2, "each refusal is counted");
        assert_eq!(v.figures().idempotency_keys, 3);
        // A restarted publisher with a smaller store learns all three keys from the log.
        let restarted = Versions::shared(Arc::new(log.another_publisher()), DIMS, 3, timings).with_idempotency_keys(2);
        restarted.rebuild().await.unwrap();
        for (i, p) in first.iter().enumerate() {
            let i = i as u32;
            assert_eq!(restarted.publish_with_key(&c, i, 0, Color([1, 1, 1]), Some(&format!("k{i}"))).await.unwrap(), (p.clone(), true), "k{i}");
        }
        assert!(matches!(restarted.publish_with_key(&c, 3, 0, Color([1, 1, 1]), Some("k3")).await, Err(PublishError::IdempotencyStoreFull { .. })));
        assert_eq!(restarted.log.events_of("c1"), vec![1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn out_of_bounds_pixels_publish_nothing() {
        let v = ready(FakeLog::new(3, |_| Fate::Commit)).await;
        assert_eq!(v.publish(&id("c1"), 8, 0, Color([0, 0, 0])).await, Err(PublishError::OutOfBounds { field: "x", limit: 8 }));
        assert_eq!(v.publish(&id("c1"), 0, 8, Color([0, 0, 0])).await, Err(PublishError::OutOfBounds { field: "y", limit: 8 }));
        assert!(v.log.events_of("c1").is_empty());
        assert_eq!(v.log.attempts(), 0);
    }
}
