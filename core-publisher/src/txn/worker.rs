//! The writer's thread: one transactional producer's transactions, aborts and in-doubt
//! commits, as the table in [`super`] says.

use super::producer::{settle_reports, Polling, ProducerSettings, TxnContext, TxnProducer, Deliveries, Produced, IDLE_POLL, INDEX_BITS, SETTLE_AT_MOST};
use crate::log::{InputOffsets, PrepareError, Record, Resolution, SnapshotWrite, TxnOutcome};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use shared::event::IDEMPOTENCY_HEADER;
use shared::kafka::FleetContext;
use shared::record::{Publication, FORMAT_HEADER, NAMESPACES_HEADER, OP_HEADER};

/// The value of every record's [`FORMAT_HEADER`].
const FORMAT_VALUE: &str = "2";
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;


/// How long one `init_transactions` call may take (it waits for the coordinator to finish what an
/// older producer left open).
const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one attempt of [`super::TxnWriter::resolve`] asks the coordinator.
const RESOLVE_ATTEMPT: Duration = Duration::from_secs(5);

/// How long past `message.timeout.ms` a transaction waits for its delivery reports before it
/// gives up on them (librdkafka fails a record at `message.timeout.ms`; the report can come a
/// little after).
const DELIVERY_GRACE: Duration = Duration::from_secs(1);
/// The shortest commit attempt: a retried commit near its deadline still gets this long.
const MIN_COMMIT_ATTEMPT: Duration = Duration::from_millis(100);

/// One call of `abort_transaction`: between calls the writer serves its producer's delivery
/// reports (purged records report too), which a single long call would wait for in vain.
const ABORT_ATTEMPT: Duration = Duration::from_millis(200);

/// How an abort that a transaction needed ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AbortEnd {
    /// The coordinator aborted it: nothing of it is or becomes visible.
    Finished,
    /// Not finished yet (timed out, coordinator moving): the writer finishes it later.
    Unfinished(String),
    /// The producer is fenced or failed for good.
    Dead(Dead),
}

/// What a transaction's outcome is once the abort it needed ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AfterAbort {
    NotCommitted,
    /// Not known: ask again ([`super::TxnWriter::resolve`]), which finishes the abort first.
    InDoubt,
    Fenced,
    Fatal(String),
}

/// The outcome of a transaction whose abort ended as `end`. `commit_sent`: a commit was
/// attempted, so only a finished abort proves it did not commit; before any commit, the
/// transaction cannot commit whatever the abort did (a pending abort is finished later). Pure.
fn after_abort(end: &AbortEnd, commit_sent: bool) -> AfterAbort {
    match end {
        AbortEnd::Finished => AfterAbort::NotCommitted,
        AbortEnd::Unfinished(_) if commit_sent => AfterAbort::InDoubt,
        AbortEnd::Unfinished(_) => AfterAbort::NotCommitted,
        AbortEnd::Dead(Dead::Fenced) => AfterAbort::Fenced,
        AbortEnd::Dead(Dead::Fatal(why)) => AfterAbort::Fatal(why.clone()),
    }
}

/// The longest a transaction of this writer stays open before it is committed, aborted, or
/// reported in doubt, with `message_timeout` (`message.timeout.ms`): its deliveries (up to
/// `message_timeout` + [`DELIVERY_GRACE`]), the reports settled ([`SETTLE_AT_MOST`]), then a
/// commit retried, or an abort, for up to `message_timeout` more (its last call at least
/// [`MIN_COMMIT_ATTEMPT`]). `transaction.timeout.ms` must be above it, or the coordinator aborts
/// a transaction this writer still drives (which librdkafka reports as fencing).
pub fn longest_open(message_timeout: Duration) -> Duration {
    message_timeout + DELIVERY_GRACE + SETTLE_AT_MOST + message_timeout + MIN_COMMIT_ATTEMPT
}


/// A job for the writer's thread.
pub(super) enum Job {
    Prepare(oneshot::Sender<Result<(), PrepareError>>),
    Transact(Vec<Record>, Vec<SnapshotWrite>, Option<InputOffsets>, Option<Duration>, oneshot::Sender<TxnOutcome>),
    Resolve(oneshot::Sender<Result<Resolution, String>>),
}

/// Starts a writer's thread for the producer `transactional_id` (created by its first prepare
/// job); returns where its jobs go and its count of jobs not finished.
pub(super) fn spawn(settings: Arc<ProducerSettings>, transactional_id: String, polling: Polling) -> (mpsc::Sender<Job>, Arc<AtomicUsize>) {
    let (tx, rx) = mpsc::channel();
    let busy = Arc::new(AtomicUsize::new(0));
    let thread = format!("txn-{}", transactional_id.rsplit('-').next().unwrap_or("?"));
    let worker = Worker {
        settings,
        transactional_id,
        polling,
        producer: None,
        seq: 0,
        in_doubt: None,
        abort_pending: false,
        dead: None,
        deferred_abort: None,
    };
    std::thread::Builder::new()
        .name(thread)
        .spawn({
            let busy = busy.clone();
            move || worker.run(rx, &busy)
        })
        .expect("spawn a transactional writer thread");
    (tx, busy)
}


/// Why a producer accepts nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dead {
    Fenced,
    Fatal(String),
}

struct Worker {
    settings: Arc<ProducerSettings>,
    /// This producer's `transactional.id`.
    transactional_id: String,
    polling: Polling,
    producer: Option<TxnProducer>,
    /// Sequence number of the current transaction.
    seq: usize,
    /// The last transaction's commit was sent and not confirmed: its records' offsets.
    in_doubt: Option<Vec<i64>>,
    /// The last transaction failed before its commit and its abort did not finish yet.
    abort_pending: bool,
    /// Fenced, or failed for good.
    dead: Option<Dead>,
    /// A stalled transaction answered but not aborted yet: (wait for its records until, why).
    deferred_abort: Option<(Instant, String)>,
}

/// What the writer's thread does after answering a job.
enum After {
    Nothing,
    /// Wait for the transaction's outstanding records until `until`, then abort it.
    DrainThenAbort { until: Instant, why: String },
}

/// Whether a librdkafka error means another producer of this `transactional.id` took over.
fn is_fenced(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::InvalidProducerEpoch)
    )
}

/// librdkafka's classes of a transactional API error: (retriable, requires abort, fatal).
fn classes(e: &KafkaError) -> (bool, bool, bool) {
    match e {
        KafkaError::Transaction(t) => (t.is_retriable(), t.txn_requires_abort(), t.is_fatal()),
        // The flush before the commit timed out: the commit was not sent yet; retrying is safe.
        KafkaError::Flush(_) => (true, false, false),
        _ => (false, false, false),
    }
}

impl Worker {
    fn run(mut self, jobs: mpsc::Receiver<Job>, busy: &AtomicUsize) {
        // While an abort is pending the writer counts as busy, so a transaction goes to another
        // producer of the writer (or waits, see `EventLog::available`) instead of to one that
        // must finish the abort first.
        let mut holding = false;
        loop {
            let job = match jobs.recv_timeout(IDLE_POLL) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(p) = &self.producer {
                        p.poll_now();
                    }
                    // A pending abort is finished here, not left until the next job: until it
                    // is, the transaction stays open (holding its partitions' last stable
                    // offset), and at `transaction.timeout.ms` the coordinator would abort it
                    // with an epoch bump that the next publish would meet as fencing. An in-doubt
                    // one is the committer's to resolve.
                    if self.abort_pending && self.in_doubt.is_none() && self.dead.is_none() {
                        if let AbortEnd::Finished = self.abort_once() {
                            tracing::info!(transactional_id = %self.transactional_id, "the pending abort finished");
                        }
                    }
                    None
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            if let Some(job) = job {
                self.handle(job);
                busy.fetch_sub(1, Ordering::AcqRel);
            }
            let pending = self.abort_pending && self.dead.is_none();
            if pending != holding {
                if pending {
                    busy.fetch_add(1, Ordering::AcqRel);
                } else {
                    busy.fetch_sub(1, Ordering::AcqRel);
                }
                holding = pending;
            }
        }
        // The writer was dropped: the producer goes with the thread (librdkafka purges what is
        // queued; an open transaction is aborted by the coordinator or the next publisher).
    }

    fn handle(&mut self, job: Job) {
        match job {
            Job::Prepare(reply) => {
                let _ = reply.send(self.prepare());
            }
            Job::Transact(records, snapshots, input, stall_after, reply) => {
                let (outcome, after) = self.transact(records, snapshots, input.as_ref(), stall_after);
                let _ = reply.send(outcome);
                if let After::DrainThenAbort { until, why } = after {
                    self.drain_then_abort(until, &why);
                }
            }
            Job::Resolve(reply) => {
                let _ = reply.send(self.resolve());
            }
        }
    }

    /// After a stalled transaction was answered: waits for its outstanding records (acknowledged,
    /// or failed at `message.timeout.ms`), then aborts it. Aborting at once, while the partition
    /// registration still waited on the stalled broker, made the coordinator refuse the abort
    /// with `INVALID_TXN_STATE` more often (seen with a follower paused in the ISR): librdkafka
    /// sends `EndTxn` for a transaction the coordinator never registered (confluentinc/librdkafka
    /// #4849, open) and makes the answer fatal. It still happens sometimes; the publisher then
    /// starts over (see [`crate::log`]).
    fn drain_then_abort(&mut self, until: Instant, why: &str) {
        if let Some(p) = self.producer.as_ref() {
            p.wait_deliveries(until);
        }
        let _ = self.abort(why, Vec::new());
    }

    fn create(&self) -> Result<TxnProducer, KafkaError> {
        let context = TxnContext { logs: FleetContext::default(), deliveries: Mutex::new(Deliveries::default()), delivered: Condvar::new() };
        let config = self.settings
            .kafka
            .transactional_producer(
                &format!("core-publisher-{}", self.transactional_id.rsplit('-').next().unwrap_or("?")),
                &self.transactional_id,
                self.settings.message_timeout,
                self.settings.transaction_timeout,
            );
        Ok(match self.polling {
            Polling::Thread => TxnProducer::Thread(config.create_with_context(context)?),
            Polling::Own => TxnProducer::Own(config.create_with_context(context)?),
        })
    }

    /// A producer with `init_transactions` done, created when there is none (only at start-up:
    /// see [`crate::log`]).
    fn init(&mut self) -> Result<(), PrepareError> {
        match &self.dead {
            Some(Dead::Fenced) => return Err(PrepareError::Fenced),
            Some(Dead::Fatal(why)) => return Err(PrepareError::Failed(why.clone())),
            None => {}
        }
        if self.producer.is_some() {
            return Ok(());
        }
        let producer = self.create().map_err(|e| PrepareError::Failed(e.to_string()))?;
        match producer.init_transactions(INIT_TIMEOUT) {
            Ok(()) => {
                tracing::info!(transactional_id = %self.transactional_id, "transactional producer ready (older producers of this id are fenced)");
                self.producer = Some(producer);
                self.abort_pending = false;
                Ok(())
            }
            Err(e) if is_fenced(&e) => {
                self.dead = Some(Dead::Fenced);
                Err(PrepareError::Fenced)
            }
            Err(e) => Err(PrepareError::Failed(e.to_string())),
        }
    }

    /// The outcome for a producer that accepts nothing more.
    fn dead_outcome(&self, commit_sent: bool) -> Option<TxnOutcome> {
        self.dead.as_ref().map(|d| match d {
            Dead::Fenced => TxnOutcome::Fenced { commit_sent },
            Dead::Fatal(why) => TxnOutcome::Fatal { why: why.clone(), commit_sent },
        })
    }

    /// Records a librdkafka error that ends the producer (fenced or fatal); returns whether it did.
    fn note_dead(&mut self, e: &KafkaError) -> bool {
        if is_fenced(e) {
            self.dead = Some(Dead::Fenced);
        } else if classes(e).2 {
            tracing::error!(transactional_id = %self.transactional_id, error = %e, "fatal transactional producer error; it accepts nothing more");
            self.dead = Some(Dead::Fatal(e.to_string()));
        }
        self.dead.is_some()
    }

    fn prepare(&mut self) -> Result<(), PrepareError> {
        self.init()
    }

    fn transact(&mut self, records: Vec<Record>, snapshots: Vec<SnapshotWrite>, input: Option<&InputOffsets>, stall_after: Option<Duration>) -> (TxnOutcome, After) {
        let outcome = self.transact_inner(records, snapshots, input, stall_after);
        let after = match self.deferred_abort.take() {
            Some((until, why)) => After::DrainThenAbort { until, why },
            None => After::Nothing,
        };
        (outcome, after)
    }

    fn transact_inner(&mut self, records: Vec<Record>, snapshots: Vec<SnapshotWrite>, input: Option<&InputOffsets>, stall_after: Option<Duration>) -> TxnOutcome {
        if let Some(o) = self.dead_outcome(false) {
            return o;
        }
        if self.in_doubt.is_some() {
            return TxnOutcome::NotCommitted { why: "the previous transaction is still in doubt".into(), stalled: Vec::new() };
        }
        match self.init() {
            Ok(()) => {}
            Err(_) if self.dead.is_some() => return self.dead_outcome(false).expect("dead"),
            Err(e) => return TxnOutcome::NotCommitted { why: e.to_string(), stalled: Vec::new() },
        }
        if self.abort_pending {
            if let Err(outcome) = self.abort("the previous transaction's abort had not finished", Vec::new()) {
                return outcome;
            }
        }
        let Some(producer) = self.producer.as_ref() else {
            return TxnOutcome::NotCommitted { why: "no producer".into(), stalled: Vec::new() };
        };
        if let Err(e) = producer.begin_transaction() {
            return self.failed_before_commit(e, "begin_transaction", Vec::new());
        }
        self.seq += 1;
        let seq = self.seq;
        {
            let mut d = producer.context().deliveries.lock().expect("deliveries lock");
            d.seq = seq;
            d.results = vec![None; records.len() + snapshots.len()];
        }
        let began = Instant::now();
        let deliver_by = began + self.settings.message_timeout + DELIVERY_GRACE;
        let stall_at = stall_after.map_or(deliver_by, |s| (began + s).min(deliver_by));
        for (i, r) in records.iter().enumerate() {
            if let Err(e) = self.send(producer, seq, i, r, deliver_by) {
                return self.failed_before_commit(e, "produce", vec![r.partition]);
            }
        }
        for (j, w) in snapshots.iter().enumerate() {
            if let Err(e) = self.send_snapshot(producer, seq, records.len() + j, w, deliver_by) {
                return self.failed_before_commit(e, "produce a snapshot", vec![w.partition]);
            }
        }
        // The input's offsets, while the records are in flight: they commit with them or not at all.
        if let Some(input) = input.filter(|i| !i.offsets.is_empty()) {
            if let Err(e) = producer.send_offsets(input, deliver_by.saturating_duration_since(Instant::now())) {
                return self.failed_before_commit(e, "send the input offsets", Vec::new());
            }
        }
        // The partition of each delivery slot: the records', then the snapshots'.
        let slot_partitions: Vec<i32> = records.iter().map(|r| r.partition).chain(snapshots.iter().map(|w| w.partition)).collect();
        // Wait for every delivery report (librdkafka fails a record after `message.timeout.ms`),
        // or until the stall bound.
        let offsets = {
            producer.wait_deliveries(stall_at);
            let d = producer.context().deliveries.lock().expect("deliveries lock");
            let mut offsets = Vec::with_capacity(records.len());
            let mut stalled = std::collections::BTreeSet::new();
            let mut failure = None;
            let pending = d.results.iter().any(Option::is_none);
            for (i, (partition, result)) in slot_partitions.iter().zip(&d.results).enumerate() {
                match result {
                    Some(Ok(o)) => {
                        if i < records.len() {
                            offsets.push(*o);
                        }
                    }
                    Some(Err(e)) => {
                        stalled.insert(*partition);
                        failure = Some(e.clone());
                    }
                    None => {
                        stalled.insert(*partition);
                        failure.get_or_insert_with(|| format!("not acknowledged within {} ms", stall_at.duration_since(began).as_millis()));
                    }
                }
            }
            drop(d);
            if let Some(why) = failure {
                let stalled: Vec<i32> = stalled.into_iter().collect();
                let why = format!("partitions {stalled:?}: {why}");
                if pending {
                    // Answer now (the commit is never sent, so it cannot commit); abort once the
                    // records are no longer in flight.
                    self.deferred_abort = Some((deliver_by, why.clone()));
                    return TxnOutcome::NotCommitted { why, stalled };
                }
                return match self.abort(&why, stalled.clone()) {
                    Ok(()) => TxnOutcome::NotCommitted { why, stalled },
                    Err(outcome) => outcome,
                };
            }
            offsets
        };
        let delivered = began.elapsed();
        let outcome = self.commit(offsets);
        tracing::debug!(transactional_id = %self.transactional_id, records = records.len(), delivered_us = delivered.as_micros() as u64,
            committed_us = began.elapsed().as_micros() as u64, "transaction");
        outcome
    }

    /// Queues one record (waiting while librdkafka's queue is full).
    fn send(&self, producer: &TxnProducer, seq: usize, index: usize, r: &Record, by: Instant) -> Result<(), KafkaError> {
        if let Some(op) = &r.op {
            // A reset or delete: its format, namespaces and op headers, no keys.
            let payload = op.record_value();
            let headers = OwnedHeaders::new_with_capacity(3)
                .insert(Header { key: FORMAT_HEADER, value: Some(FORMAT_VALUE) })
                .insert(Header { key: NAMESPACES_HEADER, value: Some(self.settings.namespaces_fingerprint.as_str()) })
                .insert(Header { key: OP_HEADER, value: Some(op.op.as_str()) });
            let record = BaseRecord::with_opaque_to(&self.settings.topic, seq << INDEX_BITS | index)
                .partition(r.partition)
                .key(op.channel.as_str())
                .payload(&payload)
                .timestamp(op.published_at_ms as i64)
                .headers(headers);
            return producer.queue(record, by);
        }
        let first = r.events.first().expect("a record carries at least one event");
        let payload = Publication::record_value(&r.events);
        let mut record = BaseRecord::with_opaque_to(&self.settings.topic, seq << INDEX_BITS | index)
            .partition(r.partition)
            .key(first.channel.as_str())
            .payload(&payload)
            .timestamp(first.published_at_ms as i64);
        // The record's format and the namespaces it was written under; then one key header per
        // event, in order (a null value: that event has no key), or none at all.
        let mut headers = OwnedHeaders::new_with_capacity(2 + r.keys.len())
            .insert(Header { key: FORMAT_HEADER, value: Some(FORMAT_VALUE) })
            .insert(Header { key: NAMESPACES_HEADER, value: Some(self.settings.namespaces_fingerprint.as_str()) });
        if r.keys.iter().any(Option::is_some) {
            for k in &r.keys {
                headers = headers.insert(Header { key: IDEMPOTENCY_HEADER, value: k.as_deref() });
            }
        }
        record = record.headers(headers);
        producer.queue(record, by)
    }

    /// Queues one snapshot-topic record (waiting while librdkafka's queue is full).
    fn send_snapshot(&self, producer: &TxnProducer, seq: usize, index: usize, w: &SnapshotWrite, by: Instant) -> Result<(), KafkaError> {
        let record = Produced::<[u8]>::with_opaque_to(&self.settings.snapshot_topic, seq << INDEX_BITS | index)
            .partition(w.partition)
            .key(w.key.as_str());
        // An empty value is a tombstone: no payload at all.
        let record = if w.value.is_empty() { record } else { record.payload(w.value.as_slice()) };
        producer.queue(record, by)
    }

    /// A failure before the commit was sent: the transaction cannot commit.
    fn failed_before_commit(&mut self, e: KafkaError, step: &str, stalled: Vec<i32>) -> TxnOutcome {
        if self.note_dead(&e) {
            return self.dead_outcome(false).expect("dead");
        }
        let why = format!("{step}: {e}");
        match self.abort(&why, stalled.clone()) {
            Ok(()) => TxnOutcome::NotCommitted { why, stalled },
            Err(outcome) => outcome,
        }
    }

    /// Aborts the current transaction, in calls of [`ABORT_ATTEMPT`] with the producer served
    /// between them, for up to `message.timeout.ms`. An abort not finished by then stays pending
    /// (the idle loop, or the next transaction, finishes it).
    fn abort_until_done(&mut self, why: &str) -> AbortEnd {
        if self.producer.is_none() {
            return AbortEnd::Finished;
        }
        tracing::warn!(transactional_id = %self.transactional_id, reason = why, "aborting the transaction");
        let deadline = Instant::now() + self.settings.message_timeout;
        loop {
            let end = self.abort_once();
            if !matches!(end, AbortEnd::Unfinished(_)) || Instant::now() >= deadline {
                return end;
            }
        }
    }

    /// One `abort_transaction` call of at most [`ABORT_ATTEMPT`], after serving the producer.
    fn abort_once(&mut self) -> AbortEnd {
        let Some(producer) = self.producer.as_ref() else { return AbortEnd::Finished };
        producer.poll_now();
        match producer.abort_transaction(ABORT_ATTEMPT) {
            Ok(()) => {
                self.abort_pending = false;
                AbortEnd::Finished
            }
            Err(e) => {
                if self.note_dead(&e) {
                    return AbortEnd::Dead(self.dead.clone().expect("dead"));
                }
                self.abort_pending = true;
                AbortEnd::Unfinished(e.to_string())
            }
        }
    }

    /// Aborts the current transaction before its commit was sent (so it cannot commit, finished
    /// or not). `Err` carries the outcome when the abort did not finish: still not committed, or
    /// dead.
    fn abort(&mut self, why: &str, stalled: Vec<i32>) -> Result<(), TxnOutcome> {
        match self.abort_until_done(why) {
            AbortEnd::Finished => Ok(()),
            AbortEnd::Unfinished(e) => Err(TxnOutcome::NotCommitted { why: format!("{why}; abort: {e}"), stalled }),
            AbortEnd::Dead(_) => Err(self.dead_outcome(false).expect("dead")),
        }
    }

    /// Commits, retrying retriable errors until `message.timeout.ms` has passed.
    fn commit(&mut self, offsets: Vec<i64>) -> TxnOutcome {
        let deadline = Instant::now() + self.settings.message_timeout;
        if let Some(p) = self.producer.as_ref() {
            settle_reports(p);
        }
        loop {
            let Some(producer) = self.producer.as_ref() else { return TxnOutcome::InDoubt("no producer".into()) };
            let left = deadline.saturating_duration_since(Instant::now()).max(MIN_COMMIT_ATTEMPT);
            let e = match producer.commit_transaction(left) {
                Ok(()) => return TxnOutcome::Committed(offsets),
                Err(e) => e,
            };
            let (retriable, requires_abort, _) = classes(&e);
            if self.note_dead(&e) {
                return self.dead_outcome(true).expect("dead");
            }
            if requires_abort {
                // The coordinator refused the commit: only a finished abort proves it did not
                // happen; until then the outcome is in doubt (resolve finishes the abort).
                let why = format!("commit: {e}");
                let end = self.abort_until_done(&why);
                return match after_abort(&end, true) {
                    AfterAbort::NotCommitted => TxnOutcome::NotCommitted { why, stalled: Vec::new() },
                    AfterAbort::InDoubt => {
                        self.in_doubt = Some(offsets);
                        TxnOutcome::InDoubt(format!("{why}; the abort has not finished"))
                    }
                    AfterAbort::Fenced | AfterAbort::Fatal(_) => self.dead_outcome(true).expect("dead after abort"),
                };
            }
            if retriable && Instant::now() < deadline {
                tracing::warn!(transactional_id = %self.transactional_id, error = %e, "commit not confirmed yet; retrying");
                continue;
            }
            self.in_doubt = Some(offsets);
            return TxnOutcome::InDoubt(e.to_string());
        }
    }

    fn resolve(&mut self) -> Result<Resolution, String> {
        match &self.dead {
            Some(Dead::Fenced) => return Ok(Resolution::Fenced),
            Some(Dead::Fatal(why)) => return Ok(Resolution::Fatal(why.clone())),
            None => {}
        }
        let Some(offsets) = self.in_doubt.clone() else { return Ok(Resolution::NotCommitted) };
        if self.abort_pending {
            // A commit refused as needing an abort, whose abort has not finished yet.
            return self.resolve_by_abort("the abort of a refused commit");
        }
        let Some(producer) = self.producer.as_ref() else { return Ok(Resolution::Fatal("no producer".into())) };
        match producer.commit_transaction(RESOLVE_ATTEMPT) {
            Ok(()) => {
                self.in_doubt = None;
                Ok(Resolution::Committed(offsets))
            }
            Err(e) => {
                let (_, requires_abort, _) = classes(&e);
                if self.note_dead(&e) {
                    return Ok(match self.dead.clone() {
                        Some(Dead::Fatal(why)) => Resolution::Fatal(why),
                        _ => Resolution::Fenced,
                    });
                }
                if requires_abort {
                    return self.resolve_by_abort(&format!("commit: {e}"));
                }
                Err(e.to_string())
            }
        }
    }

    /// Resolves the in-doubt transaction by aborting it: definite only once the abort finished.
    fn resolve_by_abort(&mut self, why: &str) -> Result<Resolution, String> {
        let end = self.abort_until_done(why);
        match after_abort(&end, true) {
            AfterAbort::NotCommitted => {
                self.in_doubt = None;
                Ok(Resolution::NotCommitted)
            }
            AfterAbort::InDoubt => Err(format!("{why}: the abort has not finished ({end:?})")),
            AfterAbort::Fenced => Ok(Resolution::Fenced),
            AfterAbort::Fatal(why) => Ok(Resolution::Fatal(why)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_finished_abort_means_not_committed_once_a_commit_was_tried() {
        let unfinished = AbortEnd::Unfinished("Local: Timed out".into());
        let fatal = AbortEnd::Dead(Dead::Fatal("boom".into()));
        let cases = [
            (AbortEnd::Finished, false, AfterAbort::NotCommitted),
            (AbortEnd::Finished, true, AfterAbort::NotCommitted),
            // Before any commit the transaction cannot commit; the abort is finished later.
            (unfinished.clone(), false, AfterAbort::NotCommitted),
            // After a commit was tried, an unfinished abort proves nothing.
            (unfinished, true, AfterAbort::InDoubt),
            (AbortEnd::Dead(Dead::Fenced), true, AfterAbort::Fenced),
            (AbortEnd::Dead(Dead::Fenced), false, AfterAbort::Fenced),
            (fatal, true, AfterAbort::Fatal("boom".into())),
        ];
        for (end, commit_sent, want) in cases {
            assert_eq!(after_abort(&end, commit_sent), want, "{end:?}, commit sent: {commit_sent}");
        }
    }

    #[test]
    fn the_longest_open_transaction_covers_deliveries_and_a_commit() {
        assert_eq!(longest_open(Duration::from_secs(5)), Duration::from_millis(11_120));
    }
}
