//! The second input: records of Kafka topics of the users' own (`INPUT_TOPICS`), each topic
//! publishing to a namespace, versioned exactly once as Kafka Streams' consume-transform-produce
//! does it (KIP-98 transactions with the consumer's offsets in them, KIP-447's group metadata).
//!
//! - [`config`]: the settings. [`record`]: a record as a publication (its channel from the key or
//!   `INPUT_CHANNEL_HEADER`, its data the JSON value) or a record to skip, and why.
//! - [`consumer`]: the consumer of the group `INPUT_GROUP` (static membership, eager rebalances,
//!   `read_committed`, no auto-commit: offsets are committed only inside transactions), on a
//!   thread of its own; it offers what it polls to the [`queue`] and pauses its partitions while
//!   the queue holds too much.
//! - [`queue`]: the records not committed yet, per input partition. The committers take from it
//!   ([`crate::committer`]): the shared writer the prefixes whose publications all go to shared
//!   partitions, an isolated partition's writer those that go to it alone, so a transaction
//!   carries all of a prefix's outputs and, through `send_offsets_to_transaction`, the offset
//!   after it; nothing else ever commits those offsets.
//! - [`stats`]: what `/health` and `GET /metrics` show.
//!
//! Why this keeps the promise (docs/publisher.md, "Data that is already in Kafka"): the outputs
//! and the offset commit or abort together; an aborted take goes back to the front of its
//! partition, which is where the committed offset reads from; a crash leaves the offsets where
//! the last commit put them, and the restarted publisher's producers (same transactional ids)
//! abort what was open before its consumer reads from those offsets; a fenced publisher's
//! transactions cannot commit, and an old assignment's group metadata makes the group refuse its
//! offsets.

pub mod config;
pub mod consumer;
pub mod queue;
pub mod record;
pub mod stats;

pub use queue::{InputQueue, Take, INPUT_ROOM};

/// The records a transaction of `writer` takes from `queue` ([`InputQueue::take_for`]); none
/// once writes `stopped` (fenced, or failed until the start-over: the queue is closed then, and a
/// take would make the committer's loop go round without awaiting).
pub fn take(queue: Option<&std::sync::Arc<InputQueue>>, stopped: bool, writer: crate::log::Writer, partitions: &[std::sync::Arc<crate::partition::Partition>]) -> Option<Take> {
    let q = queue?;
    if stopped {
        q.close();
        return None;
    }
    q.take_for(writer, partitions)
}

/// How the transaction that carried a take ended, for the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Committed: the take's offsets are the group's.
    Committed,
    /// Not committed (or never sent) for a partition's sake: taken again at once, the isolated
    /// partitions' records by their own writers.
    Retry,
    /// Not committed for no partition's sake: taken again after a backoff.
    RetryLater,
}

/// Tells `queue` how the transaction carrying `take` ended: a take that did not commit goes back
/// to the front of its partitions, where a seek to the committed offset would read it from.
pub fn ended(queue: Option<&std::sync::Arc<InputQueue>>, take: Option<Take>, how: Ended) {
    let (Some(q), Some(t)) = (queue, take) else { return };
    match how {
        Ended::Committed => q.committed(t),
        Ended::Retry => q.requeue(t, false),
        Ended::RetryLater => q.requeue(t, true),
    }
}

/// Resolves when `rx` sees a change (never without a receiver).
pub async fn changed(rx: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    match rx {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Marks every change seen so far as seen (before a committer looks for work, so a change after
/// that look wakes it).
pub fn seen(rx: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    if let Some(rx) = rx {
        rx.borrow_and_update();
    }
}

#[cfg(test)]
mod tests;
