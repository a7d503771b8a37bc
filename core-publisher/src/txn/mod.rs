//! One transactional producer (KIP-98), on a thread of its own.
//!
//! The publisher's writers ([`crate::log::Writer`]) are made of these: the shared writer has two
//! taking turns (`transactional.id` `<TRANSACTIONAL_ID>-shared-0` and `-1`), each partition one of
//! its own (`<TRANSACTIONAL_ID>-p<partition>`), used while it is isolated. The ids derive from the
//! setting and numbers only, never from anything local, so a second publisher process fences the
//! first producer by producer.
//!
//! A transaction here is: `begin_transaction`; produce every record (`acks=all`, each to its own
//! partition); send the input's offsets, if any (`send_offsets_to_transaction`, while the records
//! are in flight); wait for every delivery report; `commit_transaction`. The librdkafka calls block,
//! so they run on the writer's thread; [`TxnWriter`]'s async methods hand it jobs and await the
//! answers. How each failure is classed (librdkafka's `rd_kafka_error_is_retriable` /
//! `txn_requires_abort` / `is_fatal`):
//!
//! | where | error | outcome |
//! |---|---|---|
//! | delivery | not all acknowledged within the stall bound (shared writer only) | abort → [`TxnOutcome::NotCommitted`] naming the partitions still waiting |
//! | produce or delivery | any (timeout, no leader, too large) | abort → [`TxnOutcome::NotCommitted`] naming the failed records' partitions: the commit was never sent, so the transaction cannot commit; a record that reached the log anyway stays invisible |
//! | input offsets (`send_offsets_to_transaction`) | any but fencing or fatal (the group's generation moved on: `ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `FENCED_INSTANCE_ID`; the group coordinator not answering in time) | abort → [`TxnOutcome::NotCommitted`], for no partition's sake |
//! | commit | retriable (timed out, coordinator moving) | retried until `message.timeout.ms` after the commit began, then [`TxnOutcome::InDoubt`]; [`TxnWriter::resolve`] retries it further |
//! | commit | requires abort | abort → [`TxnOutcome::NotCommitted`] once the abort finished; [`TxnOutcome::InDoubt`] until then ([`TxnWriter::resolve`] finishes it) |
//! | anywhere | fatal `_FENCED` (`PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`) | [`TxnOutcome::Fenced`]; the writer refuses everything after it |
//! | anywhere | other fatal | [`TxnOutcome::Fatal`]; the writer refuses everything after it (the process stops; a producer is initialised only at start-up, see [`crate::log`]) |
//!
//! An abort runs in short calls with the producer served between them (purged records report
//! too); one that does not finish within `message.timeout.ms` stays pending and the writer's idle
//! loop finishes it, so the transaction does not stay open until the coordinator aborts it at
//! `transaction.timeout.ms` (an epoch bump the next publish would meet as `_FENCED`).
//!
//! librdkafka reports the coordinator aborting a transaction that stayed open past
//! `transaction.timeout.ms` (the publisher paused that long) as `_FENCED` too: it cannot be told
//! apart from another publisher taking over, and is treated the same.


mod producer;
mod worker;

pub use producer::{Polling, ProducerSettings};
pub use worker::longest_open;

use crate::log::{InputOffsets, PrepareError, Record, Resolution, SnapshotWrite, TxnOutcome};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use worker::Job;


/// One transactional producer, driven from its own thread.
pub struct TxnWriter {
    jobs: Mutex<mpsc::Sender<Job>>,
    /// Jobs handed over and not finished yet, clean-up included (the abort of a stalled
    /// transaction can outlast its answer). A count, not a flag the thread clears when its queue
    /// looks empty: a job handed over between that look and the clearing would run "not busy".
    busy: Arc<AtomicUsize>,
}

impl TxnWriter {
    /// Starts the writer's thread; its producer is created by the first [`TxnWriter::prepare`].
    pub fn start(settings: Arc<ProducerSettings>, transactional_id: String, polling: Polling) -> Self {
        let (tx, busy) = worker::spawn(settings, transactional_id, polling);
        Self { jobs: Mutex::new(tx), busy }
    }

    /// Whether the thread is working on a job (or cleaning up after one).
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Acquire) > 0
    }

    async fn ask<T>(&self, job: impl FnOnce(oneshot::Sender<T>) -> Job, gone: T) -> T {
        let (tx, rx) = oneshot::channel();
        self.busy.fetch_add(1, Ordering::AcqRel);
        if self.jobs.lock().expect("jobs lock").send(job(tx)).is_err() {
            self.busy.fetch_sub(1, Ordering::AcqRel);
            return gone;
        }
        rx.await.unwrap_or(gone)
    }

    /// `init_transactions`: fences older producers of this `transactional.id` and finishes their
    /// open transaction.
    pub async fn prepare(&self) -> Result<(), PrepareError> {
        self.ask(Job::Prepare, Err(PrepareError::Failed("the writer thread ended".into()))).await
    }

    /// Writes `records` in one transaction, with `input`'s offsets when given, and commits it
    /// (aborting when not every record is acknowledged within `stall_after`, when given).
    pub async fn transact(&self, records: Vec<Record>, snapshots: Vec<SnapshotWrite>, input: Option<InputOffsets>, stall_after: Option<Duration>) -> TxnOutcome {
        self.ask(|tx| Job::Transact(records, snapshots, input, stall_after, tx), TxnOutcome::InDoubt("the writer thread ended".into())).await
    }

    /// One more attempt to learn how the in-doubt transaction ended.
    pub async fn resolve(&self) -> Result<Resolution, String> {
        self.ask(Job::Resolve, Err("the writer thread ended".into())).await
    }
}
