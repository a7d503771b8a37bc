//! A channel's reset and delete, and its epoch.
//!
//! Both are op records ([`shared::record::ChannelOp`]) written by the channel's partition's
//! committer in order with its publications, in the same Kafka transactions: a reset gives the
//! channel its model's empty state at version 0 of its next reset count (a snapshot of it follows
//! at once, so the checkpoint moves past the old history); a delete drops its head and tombstones
//! its snapshot in the same transaction, and a later publication to it starts a new history with
//! a reset first (the reset count after the deleted one), so a client that held a position in the
//! deleted history never resumes in the new one as if it were the same.

use super::Versions;
use crate::log::EventLog;
use crate::types::{ChannelChanged, PublishError};
use shared::epoch::Epoch;
use shared::record::OpKind;
use shared::ChannelId;

impl<L: EventLog> Versions<L> {
    /// Resets `channel`: its state starts again, empty, at version 0 of its next epoch. Returns
    /// once the transaction carrying the op committed.
    ///
    /// # Errors
    /// [`PublishError::UnknownChannel`] for a channel with no publication; otherwise those of a
    /// publish ([`Versions::publish_data`]).
    pub async fn reset_channel(&self, channel: &ChannelId) -> Result<ChannelChanged, PublishError> {
        self.change(channel, OpKind::Reset).await
    }

    /// Deletes `channel`: its head, and its snapshot (tombstoned). Returns once the transaction
    /// carrying the op committed, with the epoch of its next history (the deleted one's reset
    /// count + 1), which nodes tell its clients.
    ///
    /// # Errors
    /// As [`Versions::reset_channel`].
    pub async fn delete_channel(&self, channel: &ChannelId) -> Result<ChannelChanged, PublishError> {
        self.change(channel, OpKind::Delete).await
    }

    async fn change(&self, channel: &ChannelId, op: OpKind) -> Result<ChannelChanged, PublishError> {
        if let Some(e) = self.not_writable() {
            return Err(e);
        }
        self.namespaces.of(channel).map_err(|e| PublishError::UnknownNamespace(e.to_string()))?;
        let Some((ctx, p)) = self.partition(channel) else { return Err(PublishError::NotReady) };
        if !p.has(channel) {
            return Err(PublishError::UnknownChannel(channel.to_string()));
        }
        let (id, mut answer) = p.push_op(channel.clone(), op);
        ctx.wake(&p);
        let wait = self.timings.answer_timeout;
        let published = match tokio::time::timeout(wait, &mut answer).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(PublishError::Unknown("the partition's committer stopped".into())),
            Err(_) => match p.withdraw(id) {
                Some(_) => {
                    return Err(PublishError::NotWritten(format!("waited {} ms for partition {}'s transaction; nothing was written", wait.as_millis(), p.id)))
                }
                None => answer.try_recv().unwrap_or_else(|_| {
                    Err(PublishError::Unknown(format!("partition {}'s transaction did not end within {} ms", p.id, wait.as_millis())))
                })?,
            },
        };
        // No op record: the channel was deleted meanwhile (by a concurrent delete).
        let record = published.into_iter().next().ok_or_else(|| PublishError::UnknownChannel(channel.to_string()))?;
        // The reset count of the history this op starts (after a delete: the next history's, the
        // deleted one's + 1, as nodes tell its clients; a publication starts it with a reset to
        // it), carried by the answer's version ([`crate::partition::Placement`]): an op committed
        // later in the same transaction does not change this one's answer.
        let resets = record.version;
        tracing::info!(channel = %channel, op = op.as_str(), resets, partition = record.partition, offset = record.offset,
            "[CHANNEL] {} committed", op.as_str());
        Ok(ChannelChanged { channel: channel.clone(), epoch: self.epoch_with(resets).await, partition: record.partition, offset: record.offset })
    }

    /// The current epoch of `channel` ([`shared::epoch`]): the events topic's ID and its reset
    /// count (the topic ID is read once; until it can be, the zero ID).
    pub async fn epoch_of(&self, channel: &ChannelId) -> Epoch {
        let resets = self.partition(channel).map_or(0, |(_, p)| p.resets_of(channel));
        self.epoch_with(resets).await
    }

    async fn epoch_with(&self, resets: u64) -> Epoch {
        let topic = self.topic_id.get_or_try_init(|| async { self.log.topic_id().await }).await;
        let topic = match topic {
            Ok(t) => t.as_str(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the events topic's ID; epochs name the zero ID until it can be read");
                shared::epoch::ZERO_TOPIC_ID
            }
        };
        Epoch::of(topic, resets)
    }
}

#[cfg(test)]
mod tests {
    use crate::log::fake::{Fate, FakeLog, FAKE_TOPIC_ID};
    use crate::snapshots::SnapshotPolicy;
    use crate::types::PublishError;
    use crate::versions::{Timings, Versions};
    use serde_json::value::RawValue;
    use shared::epoch::Epoch;
    use shared::namespaces::Namespaces;
    use shared::record::OpKind;
    use shared::ChannelId;
    use std::sync::Arc;
    use std::time::Duration;

    fn id(s: &str) -> ChannelId {
        ChannelId::parse(s).unwrap()
    }

    fn spaces() -> Namespaces {
        Namespaces::from_toml("[namespaces.docs]\nmodel = \"json\"\n[namespaces.chat]\nmodel = \"stream\"\n", shared::CanvasDims { width: 8, height: 8 }).unwrap()
    }

    /// A publisher on `log` that snapshots a channel every `every_versions` versions.
    async fn publisher(log: Arc<FakeLog>, every_versions: u64) -> Arc<Versions<FakeLog>> {
        let snapshots = SnapshotPolicy { every_versions, every: Duration::from_secs(3600), ..SnapshotPolicy::default() };
        let v = Arc::new(Versions::shared(log, spaces(), 3, Timings { answer_timeout: Duration::from_secs(5), snapshots, ..Timings::default() }));
        v.rebuild().await.unwrap();
        v
    }

    async fn put(v: &Versions<FakeLog>, channel: &str, data: &str) -> u64 {
        let data = RawValue::from_string(data.to_owned()).unwrap();
        let r = v.publish_data(&id(channel), &[(data.as_ref(), None)]).await.remove(0);
        r.unwrap().0.version
    }

    async fn state(v: &Versions<FakeLog>, channel: &str) -> (u64, String, String) {
        let t = v.channel_truth(&id(channel)).await.unwrap();
        (t.version, t.epoch.to_string(), t.state.get().to_owned())
    }

    async fn until(what: &str, cond: impl Fn() -> bool) {
        let started = std::time::Instant::now();
        while !cond() {
            assert!(started.elapsed() < Duration::from_secs(5), "{what}: not within 5 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_reset_starts_the_channel_again_in_a_new_epoch_and_survives_a_restart() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let v = publisher(log.clone(), 2).await;
        let c = id("docs:a");
        let p = v.partition_of(&c);
        for i in 1..=3 {
            assert_eq!(put(&v, "docs:a", &format!(r#"{{"n":{i}}}"#)).await, i);
        }
        let epoch0 = Epoch::of(FAKE_TOPIC_ID, 0).to_string();
        assert_eq!(state(&v, "docs:a").await, (3, epoch0, r#"{"n":3}"#.to_owned()));
        let changed = v.reset_channel(&c).await.unwrap();
        let epoch1 = Epoch::of(FAKE_TOPIC_ID, 1).to_string();
        assert_eq!((changed.epoch.to_string(), changed.partition), (epoch1.clone(), p));
        assert_eq!(state(&v, "docs:a").await, (0, epoch1.clone(), "{}".to_owned()));
        let ops = log.ops_of(p);
        assert_eq!(ops.len(), 1);
        assert_eq!((ops[0].0, ops[0].1.op, ops[0].1.resets), (changed.offset, OpKind::Reset, 1));
        // A snapshot of the reset state follows at once (the old one is of the history before).
        until("a snapshot at version 0 of reset 1", || {
            log.snapshot_entries(p).iter().any(|e| matches!(e, shared::snapshot::Entry::Channel(s) if s.epoch == 1 && s.version == 0))
        })
        .await;
        assert_eq!(put(&v, "docs:a", r#"{"m":1}"#).await, 1, "versions start again at 1");
        // Another publisher starts from the snapshots and the log: the old history's records are
        // below the new snapshot's offset, or before the reset in the tail; neither is applied.
        let next = publisher(Arc::new(log.another_publisher()), 1_000).await;
        assert_eq!(state(&next, "docs:a").await, (1, epoch1.clone(), r#"{"m":1}"#.to_owned()));
        assert_eq!(put(&next, "docs:a", r#"{"m":2}"#).await, 2);
        // A reset of a channel with no publication is refused.
        assert_eq!(next.reset_channel(&id("docs:none")).await.unwrap_err(), PublishError::UnknownChannel("docs:none".into()));
        assert!(matches!(next.reset_channel(&id("nope:x")).await, Err(PublishError::UnknownNamespace(_))));
    }

    #[tokio::test]
    async fn a_delete_frees_the_channel_tombstones_its_snapshot_and_its_next_history_is_another_epoch() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let v = publisher(log.clone(), 2).await;
        let c = id("docs:b");
        let p = v.partition_of(&c);
        for i in 1..=3 {
            put(&v, "docs:b", &format!(r#"{{"n":{i}}}"#)).await;
        }
        put(&v, "chat:keep", r#""hi""#).await;
        assert!(log.snapshot_keys(p).iter().any(|(k, tomb)| k == "docs:b" && !tomb), "snapshotted before the delete");
        let before = v.channel_count();
        let changed = v.delete_channel(&c).await.unwrap();
        assert_eq!(changed.epoch, Epoch::of(FAKE_TOPIC_ID, 1), "the next history's epoch, as nodes tell its clients");
        assert_eq!(v.channel_count(), before - 1);
        assert_eq!(log.snapshot_keys(p).last(), Some(&("docs:b".to_owned(), true)), "its snapshot tombstoned in the same transaction");
        assert_eq!(state(&v, "docs:b").await, (0, Epoch::of(FAKE_TOPIC_ID, 1).to_string(), "{}".to_owned()));
        assert_eq!(v.delete_channel(&c).await.unwrap_err(), PublishError::UnknownChannel("docs:b".into()), "deleted already");
        // A restart learns the delete from the log's tail, and the next history starts with a
        // reset to the count after the deleted one's.
        let next = publisher(Arc::new(log.another_publisher()), 2).await;
        assert_eq!(state(&next, "docs:b").await.0, 0);
        assert_eq!(put(&next, "docs:b", r#"{"again":1}"#).await, 1);
        let ops: Vec<(OpKind, u64)> = log.ops_of(p).iter().filter(|(_, o)| o.channel == c).map(|(_, o)| (o.op, o.resets)).collect();
        assert_eq!(ops, [(OpKind::Delete, 0), (OpKind::Reset, 1)]);
        assert_eq!(state(&next, "docs:b").await, (1, Epoch::of(FAKE_TOPIC_ID, 1).to_string(), r#"{"again":1}"#.to_owned()));
        assert_eq!(state(&next, "chat:keep").await.0, 1, "other channels are untouched");
    }

    /// Each reset answers the epoch it started: `change` reads the channel's reset count after
    /// the commit (`resets_of`), not from its own op record, so two resets committed in one
    /// transaction both answer the second's epoch (and a reset answers a later op's epoch
    /// whenever one committed before its answer was made).
    #[tokio::test]
    async fn two_resets_in_one_transaction_answer_their_own_epochs() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let v = publisher(log.clone(), 1_000).await;
        let c = id("docs:twice");
        put(&v, "docs:twice", r#"{"n":1}"#).await;
        // A transaction held at the broker: the two resets queue behind it and go in the next.
        let held = log.attempts();
        let gate = log.gate(held);
        let (v1, v2, v3) = (v.clone(), v.clone(), v.clone());
        let blocker = tokio::spawn(async move { put(&v1, "docs:twice", r#"{"n":2}"#).await });
        until("the held transaction", || log.attempts() > held).await;
        let (c1, c2) = (c.clone(), c.clone());
        let first = tokio::spawn(async move { v2.reset_channel(&c1).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = tokio::spawn(async move { v3.reset_channel(&c2).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.notify_one();
        assert_eq!(blocker.await.unwrap(), 2);
        let (first, second) = (first.await.unwrap().unwrap(), second.await.unwrap().unwrap());
        let ops: Vec<(i64, u64)> = log.ops_of(v.partition_of(&c)).iter().map(|(o, op)| (*o, op.resets)).collect();
        assert_eq!(ops, [(first.offset, 1), (second.offset, 2)], "one transaction, two op records");
        assert_eq!((first.epoch, second.epoch), (Epoch::of(FAKE_TOPIC_ID, 1), Epoch::of(FAKE_TOPIC_ID, 2)));
    }

    /// The delete is in the log only (its snapshot is tombstoned), and the checkpoint moves past it
    /// as soon as another channel of the partition is snapshotted (`Coverage::forget` lets it go).
    /// A publisher that starts after that (a restart, a standby's start) never reads the op, so
    /// the next history starts at reset count 0 with no reset record: the deleted history's own
    /// epoch, and not the one the delete answered and nodes told the channel's subscribers. A
    /// client that held version v of the deleted history then resumes in the new one at v.
    #[tokio::test]
    async fn a_delete_below_the_checkpoint_is_still_known_to_the_next_publisher() {
        let log = Arc::new(FakeLog::new(3, |_| Fate::Commit));
        let v = publisher(log.clone(), 2).await;
        let c = id("docs:gone");
        let p = v.partition_of(&c);
        let other = (0..).map(|i| format!("docs:other{i}")).find(|o| v.partition_of(&id(o)) == p).expect("a channel of the same partition");
        for i in 1..=3 {
            put(&v, "docs:gone", &format!(r#"{{"n":{i}}}"#)).await;
        }
        let changed = v.delete_channel(&c).await.unwrap();
        assert_eq!(changed.epoch, Epoch::of(FAKE_TOPIC_ID, 1));
        // Another channel of the partition goes on; its snapshots move the checkpoint past the op.
        for i in 1..=6 {
            put(&v, &other, &format!(r#"{{"n":{i}}}"#)).await;
        }
        until("a checkpoint past the delete", || log.checkpoints(p).iter().any(|cp| *cp > changed.offset)).await;
        let next = publisher(Arc::new(log.another_publisher()), 2).await;
        assert_eq!(next.epoch_of(&c).await, Epoch::of(FAKE_TOPIC_ID, 1), "the epoch the delete answered, which nodes told its subscribers");
        assert_eq!(put(&next, "docs:gone", r#"{"again":1}"#).await, 1);
        let ops: Vec<(OpKind, u64)> = log.ops_of(p).iter().filter(|(_, o)| o.channel == c).map(|(_, o)| (o.op, o.resets)).collect();
        assert_eq!(ops, [(OpKind::Delete, 0), (OpKind::Reset, 1)], "the next history starts with a reset to the count after the deleted one's");
        assert_eq!(state(&next, "docs:gone").await.1, Epoch::of(FAKE_TOPIC_ID, 1).to_string());
    }
}
