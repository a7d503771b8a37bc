//! One partition's transactional producer (KIP-98), on a thread of its own.
//!
//! The publisher writes each partition with producers of its own (`transactional.id` =
//! `<TRANSACTIONAL_ID>-<partition>-<slot>`, two taking turns, see
//! [`crate::log::PRODUCERS_PER_PARTITION`]), as Kafka Streams' first exactly-once mode had one
//! producer per task: a partition whose leader is slow or gone stalls only its own transactions,
//! and a second publisher process fences the first producer by producer with the same ids (both
//! derive them from the same setting and numbers, never from anything local).
//!
//! A transaction here is: `begin_transaction`; produce every record (`acks=all`); wait for every
//! delivery report; `commit_transaction`. The librdkafka calls block, so they run on the writer's
//! thread; [`TxnWriter`]'s async methods hand it jobs and await the answers. How each failure is
//! classed (librdkafka's `rd_kafka_error_is_retriable` / `txn_requires_abort` / `is_fatal`):
//!
//! | where | error | outcome |
//! |---|---|---|
//! | produce or delivery | any (timeout, no leader, too large) | abort → [`TxnOutcome::NotCommitted`]: the commit was never sent, so the transaction cannot commit; a record that reached the log anyway stays invisible |
//! | commit | retriable (timed out, coordinator moving) | retried until the commit deadline, then [`TxnOutcome::InDoubt`]; [`TxnWriter::resolve`] retries it further |
//! | commit | requires abort | abort → [`TxnOutcome::NotCommitted`] |
//! | anywhere | fatal `_FENCED` (`PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`) | [`TxnOutcome::Fenced`]; the writer refuses everything after it |
//! | commit | other fatal | the producer is dropped; the next [`TxnWriter::resolve`] creates one and `init_transactions` finishes the transaction: [`Resolution::Reinitialised`] |
//!
//! librdkafka reports the coordinator aborting a transaction that stayed open past
//! `transaction.timeout.ms` (the publisher paused that long) as `_FENCED` too: it cannot be told
//! apart from another publisher taking over, and is treated the same (see `lib.rs`).

use crate::log::{PrepareError, Record, Resolution, TxnOutcome};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message};
use shared::event::IDEMPOTENCY_HEADER;
use shared::kafka::{FleetContext, KafkaSettings};
use shared::PixelEvent;
use std::sync::{mpsc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long one `init_transactions` call may take (it waits for the coordinator to finish what an
/// older producer left open).
const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one attempt of [`TxnWriter::resolve`] asks the coordinator.
const RESOLVE_ATTEMPT: Duration = Duration::from_secs(5);

/// A job for the writer's thread.
enum Job {
    Prepare(oneshot::Sender<Result<(), PrepareError>>),
    Transact(Vec<Record>, oneshot::Sender<TxnOutcome>),
    Resolve(oneshot::Sender<Result<Resolution, String>>),
}

/// The transactional producer of one partition, driven from its own thread.
pub struct TxnWriter {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl TxnWriter {
    /// Starts the writer's thread; its producer is created by the first [`TxnWriter::prepare`].
    pub fn start(
        settings: KafkaSettings,
        topic: String,
        partition: i32,
        transactional_id: String,
        message_timeout: Duration,
        transaction_timeout: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        let worker = Worker {
            settings,
            topic,
            partition,
            transactional_id,
            message_timeout,
            transaction_timeout,
            producer: None,
            seq: 0,
            in_doubt: None,
            abort_pending: false,
            fenced: false,
        };
        std::thread::Builder::new()
            .name(format!("txn-{partition}"))
            .spawn(move || worker.run(rx))
            .expect("spawn a transactional writer thread");
        Self { jobs: Mutex::new(tx) }
    }

    async fn ask<T>(&self, job: impl FnOnce(oneshot::Sender<T>) -> Job, gone: T) -> T {
        let (tx, rx) = oneshot::channel();
        if self.jobs.lock().expect("jobs lock").send(job(tx)).is_err() {
            return gone;
        }
        rx.await.unwrap_or(gone)
    }

    /// `init_transactions`: fences older producers of this `transactional.id` and finishes their
    /// open transaction.
    pub async fn prepare(&self) -> Result<(), PrepareError> {
        self.ask(Job::Prepare, Err(PrepareError::Failed("the writer thread ended".into()))).await
    }

    /// Writes `records` in one transaction and commits it.
    pub async fn transact(&self, records: Vec<Record>) -> TxnOutcome {
        self.ask(|tx| Job::Transact(records, tx), TxnOutcome::InDoubt("the writer thread ended".into())).await
    }

    /// One more attempt to learn how the in-doubt transaction ended.
    pub async fn resolve(&self) -> Result<Resolution, String> {
        self.ask(Job::Resolve, Err("the writer thread ended".into())).await
    }
}

/// Delivery reports of the transaction in progress.
#[derive(Default)]
struct Deliveries {
    /// Which transaction the reports belong to (reports of an older one are ignored).
    seq: usize,
    results: Vec<Option<Result<i64, String>>>,
}

/// The producer's context: librdkafka's logs as `tracing` events, and delivery reports into
/// [`Deliveries`] (the opaque is `seq << 20 | record index`).
struct TxnContext {
    logs: FleetContext,
    deliveries: Mutex<Deliveries>,
    delivered: Condvar,
}

/// Records per transaction are below 2^20 (the opaque's low bits).
const INDEX_BITS: u32 = 20;

impl ClientContext for TxnContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        self.logs.log(level, fac, msg);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.logs.error(error, reason);
    }
}

impl ProducerContext for TxnContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let (seq, index) = (opaque >> INDEX_BITS, opaque & ((1 << INDEX_BITS) - 1));
        let mut d = self.deliveries.lock().expect("deliveries lock");
        if d.seq != seq {
            return;
        }
        if let Some(slot) = d.results.get_mut(index) {
            *slot = Some(match result {
                Ok(m) => Ok(m.offset()),
                Err((e, _)) => Err(e.to_string()),
            });
        }
        if d.results.iter().all(Option::is_some) {
            self.delivered.notify_all();
        }
    }
}

type TxnProducer = ThreadedProducer<TxnContext>;

struct Worker {
    settings: KafkaSettings,
    topic: String,
    partition: i32,
    transactional_id: String,
    message_timeout: Duration,
    transaction_timeout: Duration,
    producer: Option<TxnProducer>,
    /// Sequence number of the current transaction.
    seq: usize,
    /// The last transaction's commit was sent and not confirmed: its records' offsets.
    in_doubt: Option<Vec<i64>>,
    /// The last transaction failed before its commit and its abort did not finish yet.
    abort_pending: bool,
    fenced: bool,
}

/// Waits (at most 20 ms) until librdkafka counts no message or report of the producer as
/// outstanding. rdkafka's `commit_transaction` first flushes, and its flush, while
/// `rd_kafka_outq_len` is above zero, polls in steps of 100 ms that do not end early; the last
/// delivery report still counts while the polling thread finishes handling it (microseconds after
/// our callback saw it), so committing at once cost a whole 100 ms step in about one commit of
/// ten (measured on a single broker).
fn settle_reports(producer: &TxnProducer) {
    let until = Instant::now() + Duration::from_millis(20);
    while producer.in_flight_count() > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_micros(50));
    }
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
    fn run(mut self, jobs: mpsc::Receiver<Job>) {
        while let Ok(job) = jobs.recv() {
            match job {
                Job::Prepare(reply) => {
                    let _ = reply.send(self.prepare());
                }
                Job::Transact(records, reply) => {
                    let _ = reply.send(self.transact(records));
                }
                Job::Resolve(reply) => {
                    let _ = reply.send(self.resolve());
                }
            }
        }
        // The writer was dropped: the producer goes with the thread (librdkafka purges what is
        // queued; an open transaction is aborted by the coordinator or the next publisher).
    }

    fn create(&self) -> Result<TxnProducer, KafkaError> {
        let context = TxnContext { logs: FleetContext::default(), deliveries: Mutex::new(Deliveries::default()), delivered: Condvar::new() };
        self.settings
            .transactional_producer(
                &format!("core-publisher-{}", self.partition),
                &self.transactional_id,
                self.message_timeout,
                self.transaction_timeout,
            )
            .create_with_context(context)
    }

    /// A producer with `init_transactions` done, created when there is none.
    fn init(&mut self) -> Result<(), PrepareError> {
        if self.fenced {
            return Err(PrepareError::Fenced);
        }
        if self.producer.is_some() {
            return Ok(());
        }
        let producer = self.create().map_err(|e| PrepareError::Failed(e.to_string()))?;
        match producer.init_transactions(INIT_TIMEOUT) {
            Ok(()) => {
                tracing::info!(partition = self.partition, transactional_id = %self.transactional_id,
                    "transactional producer ready (older producers of this id are fenced)");
                self.producer = Some(producer);
                self.abort_pending = false;
                Ok(())
            }
            Err(e) if is_fenced(&e) => {
                self.fenced = true;
                Err(PrepareError::Fenced)
            }
            Err(e) => Err(PrepareError::Failed(e.to_string())),
        }
    }

    fn prepare(&mut self) -> Result<(), PrepareError> {
        self.init()
    }

    fn transact(&mut self, records: Vec<Record>) -> TxnOutcome {
        if self.fenced {
            return TxnOutcome::Fenced { commit_sent: false };
        }
        if self.in_doubt.is_some() {
            return TxnOutcome::NotCommitted("the previous transaction is still in doubt".into());
        }
        match self.init() {
            Ok(()) => {}
            Err(PrepareError::Fenced) => return TxnOutcome::Fenced { commit_sent: false },
            Err(e) => return TxnOutcome::NotCommitted(e.to_string()),
        }
        if self.abort_pending {
            if let Err(outcome) = self.abort("the previous transaction's abort had not finished") {
                return outcome;
            }
        }
        let Some(producer) = self.producer.as_ref() else { return TxnOutcome::NotCommitted("no producer".into()) };
        if let Err(e) = producer.begin_transaction() {
            return self.failed_before_commit(e, "begin_transaction");
        }
        self.seq += 1;
        let seq = self.seq;
        {
            let mut d = producer.context().deliveries.lock().expect("deliveries lock");
            d.seq = seq;
            d.results = vec![None; records.len()];
        }
        let began = Instant::now();
        let deliver_by = began + self.message_timeout + Duration::from_secs(1);
        for (i, r) in records.iter().enumerate() {
            if let Err(e) = self.send(producer, seq, i, r, deliver_by) {
                return self.failed_before_commit(e, "produce");
            }
        }
        // Wait for every delivery report (librdkafka fails a record after `message.timeout.ms`).
        let offsets = {
            let ctx = producer.context();
            let mut d = ctx.deliveries.lock().expect("deliveries lock");
            while d.results.iter().any(Option::is_none) {
                let left = deliver_by.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                d = ctx.delivered.wait_timeout(d, left).expect("deliveries lock").0;
            }
            let mut offsets = Vec::with_capacity(records.len());
            let mut failure = None;
            for r in &d.results {
                match r {
                    Some(Ok(o)) => offsets.push(*o),
                    Some(Err(e)) => failure = Some(e.clone()),
                    None => failure = Some("no delivery report in time".into()),
                }
            }
            drop(d);
            if let Some(why) = failure {
                return match self.abort(&format!("a record was not delivered: {why}")) {
                    Ok(()) | Err(TxnOutcome::NotCommitted(_)) => TxnOutcome::NotCommitted(why),
                    Err(other) => other,
                };
            }
            offsets
        };
        let delivered = began.elapsed();
        let outcome = self.commit(offsets);
        tracing::debug!(partition = self.partition, records = records.len(), delivered_us = delivered.as_micros() as u64,
            committed_us = began.elapsed().as_micros() as u64, "transaction");
        outcome
    }

    /// Queues one record (waiting while librdkafka's queue is full).
    fn send(&self, producer: &TxnProducer, seq: usize, index: usize, r: &Record, by: Instant) -> Result<(), KafkaError> {
        let first = r.events.first().expect("a record carries at least one event");
        let payload = PixelEvent::record_value(&r.events);
        let mut record = BaseRecord::with_opaque_to(&self.topic, seq << INDEX_BITS | index)
            .partition(self.partition)
            .key(first.canvas.as_str())
            .payload(&payload)
            .timestamp(first.published_at_ms as i64);
        // One header per event, in order (a null value: that event has no key), or none at all.
        if r.keys.iter().any(Option::is_some) {
            let mut headers = OwnedHeaders::new_with_capacity(r.keys.len());
            for k in &r.keys {
                headers = headers.insert(Header { key: IDEMPOTENCY_HEADER, value: k.as_deref() });
            }
            record = record.headers(headers);
        }
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) if Instant::now() < by => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// A failure before the commit was sent: the transaction cannot commit.
    fn failed_before_commit(&mut self, e: KafkaError, step: &str) -> TxnOutcome {
        if is_fenced(&e) {
            self.fenced = true;
            return TxnOutcome::Fenced { commit_sent: false };
        }
        let why = format!("{step}: {e}");
        match self.abort(&why) {
            Err(TxnOutcome::Fenced { .. }) => TxnOutcome::Fenced { commit_sent: false },
            _ => TxnOutcome::NotCommitted(why),
        }
    }

    /// Aborts the current transaction. `Err` carries the outcome when the abort itself failed:
    /// still [`TxnOutcome::NotCommitted`] (the commit was never sent), or fenced.
    fn abort(&mut self, why: &str) -> Result<(), TxnOutcome> {
        let Some(producer) = self.producer.as_ref() else { return Ok(()) };
        tracing::warn!(partition = self.partition, reason = why, "aborting the transaction");
        match producer.abort_transaction(self.message_timeout) {
            Ok(()) => {
                self.abort_pending = false;
                Ok(())
            }
            Err(e) if is_fenced(&e) => {
                self.fenced = true;
                Err(TxnOutcome::Fenced { commit_sent: false })
            }
            Err(e) => {
                let (retriable, _, fatal) = classes(&e);
                if fatal || !retriable {
                    // init_transactions on a new producer aborts it.
                    self.producer = None;
                    self.abort_pending = false;
                } else {
                    self.abort_pending = true;
                }
                Err(TxnOutcome::NotCommitted(format!("{why}; abort: {e}")))
            }
        }
    }

    /// Commits, retrying retriable errors until `message.timeout.ms` has passed.
    fn commit(&mut self, offsets: Vec<i64>) -> TxnOutcome {
        let deadline = Instant::now() + self.message_timeout;
        if let Some(p) = self.producer.as_ref() {
            settle_reports(p);
        }
        loop {
            let Some(producer) = self.producer.as_ref() else { return TxnOutcome::InDoubt("no producer".into()) };
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
            let e = match producer.commit_transaction(left) {
                Ok(()) => return TxnOutcome::Committed(offsets),
                Err(e) => e,
            };
            if is_fenced(&e) {
                self.fenced = true;
                return TxnOutcome::Fenced { commit_sent: true };
            }
            let (retriable, requires_abort, fatal) = classes(&e);
            if requires_abort {
                return match self.abort(&format!("commit: {e}")) {
                    Err(TxnOutcome::Fenced { .. }) => TxnOutcome::Fenced { commit_sent: true },
                    _ => TxnOutcome::NotCommitted(format!("commit: {e}")),
                };
            }
            if retriable && Instant::now() < deadline {
                tracing::warn!(partition = self.partition, error = %e, "commit not confirmed yet; retrying");
                continue;
            }
            if fatal {
                // A new producer's init_transactions will finish this transaction one way or the
                // other; the log then says which.
                self.producer = None;
            }
            self.in_doubt = Some(offsets);
            return TxnOutcome::InDoubt(e.to_string());
        }
    }

    fn resolve(&mut self) -> Result<Resolution, String> {
        if self.fenced {
            return Ok(Resolution::Fenced);
        }
        let Some(offsets) = self.in_doubt.clone() else { return Ok(Resolution::NotCommitted) };
        let Some(producer) = self.producer.as_ref() else {
            return match self.init() {
                Ok(()) => {
                    self.in_doubt = None;
                    Ok(Resolution::Reinitialised)
                }
                Err(PrepareError::Fenced) => Ok(Resolution::Fenced),
                Err(e) => Err(e.to_string()),
            };
        };
        match producer.commit_transaction(RESOLVE_ATTEMPT) {
            Ok(()) => {
                self.in_doubt = None;
                Ok(Resolution::Committed(offsets))
            }
            Err(e) if is_fenced(&e) => {
                self.fenced = true;
                Ok(Resolution::Fenced)
            }
            Err(e) => {
                let (retriable, requires_abort, fatal) = classes(&e);
                if requires_abort {
                    self.in_doubt = None;
                    return match self.abort(&format!("commit: {e}")) {
                        Err(TxnOutcome::Fenced { .. }) => Ok(Resolution::Fenced),
                        _ => Ok(Resolution::NotCommitted),
                    };
                }
                if fatal || !retriable {
                    self.producer = None;
                }
                Err(e.to_string())
            }
        }
    }
}
