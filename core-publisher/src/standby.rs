//! A standby publisher's life ([`crate::role`]): following the log until promoted
//! ([`Versions::follow`]), then handing what it read to the committers
//! ([`Versions::rebuild`] after [`Versions::promote`]).

use crate::follow::{Follower, FOLLOW_EVERY};
use crate::log::EventLog;
use crate::rebuild::{refuse_open_transactions, RebuildError, Restored};
use crate::role::{on_promote, PromoteAnswer, Role};
use crate::versions::Versions;
use backon::{BackoffBuilder, ExponentialBuilder};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

impl<L: EventLog> Versions<L> {
    /// Makes this publisher a standby: it writes nothing until [`Versions::promote`].
    #[must_use]
    pub fn as_standby(self) -> Self {
        *self.role.lock().expect("role lock") = Role::Standby;
        self
    }

    /// Writing, promoting or standing by.
    pub fn role(&self) -> Role {
        *self.role.lock().expect("role lock")
    }

    /// Asks a standby to become the active publisher: [`Versions::follow`] returns, and the
    /// start-up's [`Versions::rebuild`] then initialises the producers (fencing the publisher
    /// that was active) and reads on to the log's end.
    pub fn promote(&self) -> PromoteAnswer {
        let answer = {
            let mut role = self.role.lock().expect("role lock");
            let (next, answer) = on_promote(*role);
            *role = next;
            answer
        };
        if answer == PromoteAnswer::Started {
            tracing::info!("promoted by the gateway leader: fencing the active publisher, then reading the log to its end; writes get 503 until done");
            self.promotion.notify_one();
        }
        answer
    }

    /// While a standby: reads the log as it grows ([`Follower`]: at once again after a round that
    /// found events, else after [`FOLLOW_EVERY`]), starting again from the snapshots when a read
    /// fails, until promoted or `stop`.
    pub async fn follow(&self, stop: &CancellationToken) {
        let retry = ExponentialBuilder::default().with_min_delay(Duration::from_millis(200)).with_max_delay(Duration::from_secs(5)).with_jitter();
        let mut delays = retry.build();
        let mut said = Instant::now();
        while self.role() == Role::Standby && !stop.is_cancelled() {
            let mut slot = self.follower.lock().await;
            let outcome = match slot.as_mut() {
                None => {
                    let n = self.partitions().max(1);
                    match Follower::start(self.log.as_ref(), &self.namespaces, n, self.timings.key_window, &self.keys).await {
                        Ok(f) => {
                            tracing::info!(events = f.events, positions = %shared::replay::fmt_offsets(&f.positions()),
                                "standby: heads read from the snapshots and the log after them; following the log until promoted");
                            *slot = Some(f);
                            Ok(true)
                        }
                        Err(e) => Err(e),
                    }
                }
                Some(f) => f.read_on(self.log.as_ref(), &self.keys).await.map(|events| events > 0),
            };
            let wait = match outcome {
                // A round that found events reads on at once (a busy log is followed as fast as
                // it is read); an idle one waits FOLLOW_EVERY.
                Ok(found) => {
                    delays = retry.build();
                    if said.elapsed() >= Duration::from_secs(60) {
                        if let Some(f) = slot.as_ref() {
                            tracing::info!(events = f.events, positions = %shared::replay::fmt_offsets(&f.positions()), "standby: following the log");
                        }
                        said = Instant::now();
                    }
                    if found { Duration::ZERO } else { FOLLOW_EVERY }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "standby: reading the log failed; reading again from the snapshots");
                    *slot = None;
                    delays.next().unwrap_or(Duration::from_secs(5))
                }
            };
            drop(slot);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.promotion.notified() => {}
                () = stop.cancelled() => {}
            }
        }
    }

    /// A promoted standby's last read, once the producers are initialised (the publisher that
    /// was active is fenced, its open transactions ended): no other producer's transaction may
    /// hold the log ([`refuse_open_transactions`]); then the snapshot topic and the events to
    /// their ends. A read that fails falls back to the rebuild's read from the snapshots.
    ///
    /// # Errors
    /// As [`crate::rebuild::read_heads`].
    pub(crate) async fn read_on_promoted(&self, mut follower: Follower) -> Result<Restored, RebuildError> {
        let started = Instant::now();
        if let Err(e) = refuse_open_transactions(self.log.as_ref()).await {
            *self.follower.lock().await = Some(follower);
            return Err(e);
        }
        let n = self.partitions().max(1);
        match follower.read_on(self.log.as_ref(), &self.keys).await {
            Ok(events) => {
                tracing::info!(events, took_ms = started.elapsed().as_millis() as u64, positions = %shared::replay::fmt_offsets(&follower.positions()),
                    "standby promoted: read the log to its end");
                Ok(follower.into_restored())
            }
            Err(e) => {
                tracing::warn!(error = %e, "promotion: reading on failed; reading the snapshots and the log after them instead");
                crate::rebuild::read_heads_now(self.log.as_ref(), &self.namespaces, n, self.timings.key_window, &self.keys).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::log::fake::{Fate, FakeLog};
    use crate::role::{PromoteAnswer, Role};
    use crate::snapshots::SnapshotPolicy;
    use crate::types::PublishError;
    use crate::versions::{Timings, Versions};
    use shared::{CanvasDims, ChannelId, Color};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    const DIMS: CanvasDims = CanvasDims { width: 8, height: 8 };

    fn id(s: &str) -> ChannelId {
        ChannelId::parse(s).unwrap()
    }

    /// Each partition's checkpoint as its coverage would write it now, and its channels' heads.
    fn state(partitions: &[Arc<crate::partition::Partition>]) -> Vec<(i64, Vec<(String, u64)>)> {
        partitions
            .iter()
            .map(|p| {
                p.with_book(|b| {
                    let mut heads: Vec<(String, u64)> = b.heads.iter().map(|(c, h)| (c.as_str().to_owned(), h.version)).collect();
                    heads.sort();
                    (b.coverage.checkpoint_after(&[], b.end), heads)
                })
            })
            .collect()
    }

    #[tokio::test]
    async fn a_promoted_standby_continues_every_channel_keeps_the_keys_and_fences_the_active_one() {
        let log = Arc::new(FakeLog::new(2, |_| Fate::Commit));
        let timings = Timings { snapshots: SnapshotPolicy { every_versions: 3, every: Duration::from_secs(3600), ..SnapshotPolicy::default() }, ..Timings::default() };
        let active = Versions::shared(log.clone(), DIMS, 2, timings);
        active.rebuild().await.unwrap();
        let channels: Vec<ChannelId> = (0..6).map(|i| id(&format!("c{i}"))).collect();
        let mut keyed = Vec::new();
        for (i, c) in channels.iter().enumerate() {
            for x in 0..(i as u32 + 2) {
                active.publish(c, x, 0, Color([1, 0, 0])).await.unwrap();
            }
            keyed.push(active.publish_with_key(c, 7, 7, Color([7, 7, 7]), Some(&format!("before-{i}"))).await.unwrap().0);
        }

        let standby = Arc::new(Versions::shared(Arc::new(log.another_publisher()), DIMS, 2, timings).as_standby());
        assert_eq!(standby.publish(&channels[0], 0, 0, Color([2, 2, 2])).await, Err(PublishError::Standby));
        let stop = CancellationToken::new();
        let following = tokio::spawn({
            let (s, stop) = (standby.clone(), stop.clone());
            async move { s.follow(&stop).await }
        });
        // While it follows: more versions (snapshots and checkpoints move), more keys.
        for round in 0..4u32 {
            for (i, c) in channels.iter().enumerate().filter(|(i, _)| (i + round as usize) % 2 == 0) {
                active.publish(c, round, 1, Color([3, 0, 0])).await.unwrap();
                keyed.push(active.publish_with_key(c, 6, 6, Color([6, 6, 6]), Some(&format!("during-{round}-{i}"))).await.unwrap().0);
            }
            tokio::time::sleep(super::FOLLOW_EVERY * 2).await;
        }
        tokio::time::sleep(super::FOLLOW_EVERY * 3).await;

        // What a rebuild from the snapshots reads now: the standby must know the same.
        let keys = Arc::new(std::sync::Mutex::new(crate::idempotency::KeyStore::new(1000, 600_000)));
        let fresh = crate::rebuild::read_heads_now(log.as_ref(), &Arc::new(DIMS.into()), 2, Duration::from_secs(600), &keys).await.unwrap();
        {
            let slot = standby.follower.lock().await;
            let followed = slot.as_ref().expect("the standby follows");
            assert_eq!(state(&followed.partitions), state(&fresh.partitions), "checkpoints and heads as a rebuild reads them");
        }

        assert_eq!(standby.promote(), PromoteAnswer::Started);
        assert_eq!(standby.promote(), PromoteAnswer::Running);
        tokio::time::timeout(Duration::from_secs(5), following).await.expect("following ends on promotion").unwrap();
        standby.rebuild().await.expect("the promotion reads on");
        assert_eq!(standby.role(), Role::Active { promoted: true });
        assert_eq!(standby.promote(), PromoteAnswer::Done);
        assert_eq!(active.publish(&channels[0], 0, 0, Color([9, 9, 9])).await, Err(PublishError::Fenced), "the active one is fenced");
        for c in &channels {
            let before = log.events_of(c.as_str()).last().copied().unwrap_or(0);
            assert_eq!(standby.publish(c, 0, 3, Color([4, 0, 0])).await.unwrap().version, before + 1, "{c}: versions continue");
        }
        for p in &keyed {
            let key = log.record_at(p.partition, p.offset).and_then(|r| r.iter().find_map(|(_, k)| k.clone())).expect("a keyed record");
            let e = log.record_at(p.partition, p.offset).unwrap().into_iter().find(|(_, k)| k.as_deref() == Some(key.as_str())).unwrap().0;
            let paint = e.paint().unwrap();
            let (again, replayed) = standby.publish_with_key(&p.channel, paint.x, paint.y, paint.color, Some(&key)).await.unwrap();
            assert_eq!((again.version, replayed), (p.version, true), "{key}: answered from the standby's keys, not applied again");
        }
        stop.cancel();
    }

    /// This process's CPU time (user + system), in 1/100 s.
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }

    /// A promotion whose check for other producers' open transactions fails returns that error
    /// (the start-up retries it) instead of waiting for ever on its own follower's lock.
    #[tokio::test]
    async fn a_promotion_whose_open_transaction_check_fails_returns_its_error() {
        let log = Arc::new(FakeLog::new(1, |_| Fate::Commit));
        let active = Versions::shared(log.clone(), DIMS, 1, Timings::default());
        active.rebuild().await.unwrap();
        active.publish(&id("c1"), 0, 0, Color([1, 1, 1])).await.unwrap();
        let standby = Arc::new(Versions::shared(Arc::new(log.another_publisher()), DIMS, 1, Timings::default()).as_standby());
        let stop = CancellationToken::new();
        let following = tokio::spawn({
            let (s, stop) = (standby.clone(), stop.clone());
            async move { s.follow(&stop).await }
        });
        tokio::time::sleep(super::FOLLOW_EVERY * 3).await;
        let stray = shared::PixelEvent { canvas: id("stray"), version: 1, x: 0, y: 0, color: Color([9, 9, 9]), published_at_ms: 0 };
        log.open_foreign(0, vec![(stray.into(), None)]);
        assert_eq!(standby.promote(), PromoteAnswer::Started);
        following.await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), standby.rebuild()).await.expect("the promotion's rebuild returns");
        assert!(matches!(r, Err(crate::rebuild::RebuildError::Hanging(_))), "{r:?}");
        log.end_foreign(0, false);
        standby.rebuild().await.expect("retried once the transaction ended");
        assert_eq!(standby.publish(&id("c1"), 1, 0, Color([2, 2, 2])).await.unwrap().version, 2, "from the follower's heads");
    }

    /// A channel written before the standby started and idle since, snapshotted by age afterwards:
    /// the promoted publisher knows it covered, keeps the active one's checkpoint, does not spin,
    /// and a restart after retention deleted below that checkpoint starts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_channel_snapshotted_after_the_standby_started_is_covered_after_the_promotion() {
        let log = Arc::new(FakeLog::new(1, |_| Fate::Commit));
        let policy = SnapshotPolicy { every_versions: 1000, every: Duration::from_millis(100), ..SnapshotPolicy::default() };
        let timings = Timings { snapshots: policy, ..Timings::default() };
        let active = Versions::shared(log.clone(), DIMS, 1, timings);
        active.rebuild().await.unwrap();
        active.publish(&id("idle"), 0, 0, Color([1, 1, 1])).await.unwrap();
        let standby = Arc::new(Versions::shared(Arc::new(log.another_publisher()), DIMS, 1, timings).as_standby());
        let stop = CancellationToken::new();
        let following = tokio::spawn({
            let (s, stop) = (standby.clone(), stop.clone());
            async move { s.follow(&stop).await }
        });
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(log.snapshot_entries(0).iter().any(|e| matches!(e, shared::snapshot::Entry::Canvas(s) if s.canvas.as_str() == "idle")), "snapshotted by age");
        let active_checkpoint = *log.checkpoints(0).last().unwrap();
        {
            let slot = standby.follower.lock().await;
            let followed = slot.as_ref().unwrap().partitions[0].with_book(|b| b.coverage.checkpoint_after(&[], b.end));
            assert!(followed >= active_checkpoint, "the standby's checkpoint {followed} is below the active one's {active_checkpoint}");
        }
        drop(active);
        assert_eq!(standby.promote(), PromoteAnswer::Started);
        following.await.unwrap();
        standby.rebuild().await.unwrap();
        assert_eq!(standby.uncovered_channels(), 0);
        let before = cpu_ticks();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let spent = cpu_ticks() - before;
        assert!(spent < 30, "an idle promoted publisher used {spent} ticks in 1 s");
        standby.publish(&id("busy"), 0, 0, Color([2, 2, 2])).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let promoted_checkpoint = *log.checkpoints(0).last().unwrap();
        assert!(promoted_checkpoint >= active_checkpoint, "the checkpoint went back: {promoted_checkpoint} < {active_checkpoint}");
        log.delete_records(0, active_checkpoint);
        drop(standby);
        let next = Versions::shared(Arc::new(log.another_publisher()), DIMS, 1, timings);
        next.rebuild().await.expect("a restart after retention deleted below the active one's checkpoint");
        stop.cancel();
    }

    #[tokio::test]
    async fn an_active_publisher_refuses_a_promotion() {
        let v = Versions::shared(Arc::new(FakeLog::new(1, |_| Fate::Commit)), DIMS, 1, Timings::default());
        assert_eq!(v.promote(), PromoteAnswer::NotStandby);
        assert_eq!(v.role(), Role::Active { promoted: false });
    }
}
