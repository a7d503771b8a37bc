//! One transactional producer as a writer drives it: its settings, its context (librdkafka's
//! logs, delivery reports), and how it is polled.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message};
use shared::kafka::{FleetContext, KafkaSettings};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};


/// What every transactional producer of one publisher is made with.
#[derive(Debug, Clone)]
pub struct ProducerSettings {
    pub kafka: KafkaSettings,
    /// The events topic.
    pub topic: String,
    /// Where snapshots and checkpoints go ([`shared::snapshot`]).
    pub snapshot_topic: String,
    /// The base of the producers' `transactional.id`s (see [`crate::log::kafka::KafkaLog::transactional_id_of`]).
    pub transactional_id: String,
    /// `message.timeout.ms`: a record not acknowledged by then fails.
    pub message_timeout: Duration,
    /// `transaction.timeout.ms`: the coordinator aborts a transaction left open longer.
    pub transaction_timeout: Duration,
    /// The namespaces fingerprint every record carries ([`shared::record::NAMESPACES_HEADER`]).
    pub namespaces_fingerprint: String,
}

/// At most this long is spent serving the last delivery reports before a commit
/// ([`settle_reports`]).
pub(super) const SETTLE_AT_MOST: Duration = Duration::from_millis(20);


/// Delivery reports of the transaction in progress.
#[derive(Default)]
pub(super) struct Deliveries {
    /// Which transaction the reports belong to (reports of an older one are ignored).
    pub(super) seq: usize,
    pub(super) results: Vec<Option<Result<i64, String>>>,
}

/// The producer's context: librdkafka's logs as `tracing` events, and delivery reports into
/// [`Deliveries`] (the opaque is `seq << 20 | record index`), signalled on `delivered`.
pub(super) struct TxnContext {
    pub(super) logs: FleetContext,
    pub(super) deliveries: Mutex<Deliveries>,
    pub(super) delivered: Condvar,
}

/// A record as a writer produces it: key = channel id (or the checkpoint key), value `P`.
pub(super) type Produced<'a, P> = BaseRecord<'a, str, P, usize>;

/// Records per transaction are below 2^20 (the opaque's low bits; a transaction carries at most
/// [`crate::partition::MAX_TXN_EVENTS`] events).
pub(super) const INDEX_BITS: u32 = 20;

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

/// How a writer's producer is polled (delivery reports, logs, errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polling {
    /// By rdkafka's polling thread: a delivery report wakes the writer at once. That thread's
    /// `poll` spins through the last millisecond of every 100 ms wait, about 1 % of a core per
    /// producer even when idle: for the busy shared writer.
    Thread,
    /// By the writer's own thread: while it waits for delivery reports it polls every
    /// [`POLL_PAUSE`], and an idle one every [`IDLE_POLL`] (no cost when idle): for the isolated
    /// partitions' writers, which are idle nearly always.
    Own,
}

/// How long the writer sleeps between polls while it waits for delivery reports ([`Polling::Own`]).
const POLL_PAUSE: Duration = Duration::from_micros(200);
/// How often an idle writer polls its producer ([`Polling::Own`]).
pub(super) const IDLE_POLL: Duration = Duration::from_millis(200);

/// A transactional producer, polled as its [`Polling`] says.
pub(super) enum TxnProducer {
    Thread(ThreadedProducer<TxnContext>),
    Own(BaseProducer<TxnContext>),
}

macro_rules! with_producer {
    ($p:expr, $inner:ident => $e:expr) => {
        match $p {
            TxnProducer::Thread($inner) => $e,
            TxnProducer::Own($inner) => $e,
        }
    };
}

impl TxnProducer {
    pub(super) fn context(&self) -> &TxnContext {
        with_producer!(self, p => p.context().as_ref())
    }

    pub(super) fn init_transactions(&self, timeout: Duration) -> Result<(), KafkaError> {
        with_producer!(self, p => p.init_transactions(timeout))
    }

    pub(super) fn begin_transaction(&self) -> Result<(), KafkaError> {
        with_producer!(self, p => p.begin_transaction())
    }

    pub(super) fn commit_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        with_producer!(self, p => p.commit_transaction(timeout))
    }

    pub(super) fn abort_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        with_producer!(self, p => p.abort_transaction(timeout))
    }

    #[allow(clippy::result_large_err)] // rdkafka's own signature: the record comes back to be retried
    // rdkafka's `send` hands the record back in the error the same way.
    #[allow(clippy::result_large_err)]
    pub(super) fn send<'a, P: ToBytes + ?Sized>(&self, record: Produced<'a, P>) -> Result<(), (KafkaError, Produced<'a, P>)> {
        with_producer!(self, p => p.send(record))
    }

    /// Queues `record`, waiting while librdkafka's queue is full, until `by`.
    pub(super) fn queue<P: ToBytes + ?Sized>(&self, mut record: Produced<'_, P>, by: Instant) -> Result<(), KafkaError> {
        loop {
            match self.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) if Instant::now() < by => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// `send_offsets_to_transaction` of `input`'s offsets under its group metadata (waiting up to
    /// `timeout` for the group coordinator). Without metadata (no consumer) there is nothing to
    /// send.
    pub(super) fn send_offsets(&self, input: &crate::log::InputOffsets, timeout: Duration) -> Result<(), KafkaError> {
        let Some(group) = input.group.as_deref() else { return Ok(()) };
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (topic, partition, next) in &input.offsets {
            tpl.add_partition_offset(topic, *partition, rdkafka::Offset::Offset(*next))?;
        }
        with_producer!(self, p => p.send_offsets_to_transaction(&tpl, group, timeout))
    }

    pub(super) fn poll_now(&self) {
        if let TxnProducer::Own(p) = self {
            p.poll(Duration::ZERO);
        }
    }

    pub(super) fn in_flight_count(&self) -> i32 {
        with_producer!(self, p => p.in_flight_count())
    }

    /// Waits until every delivery report of the transaction is in, or `until`.
    pub(super) fn wait_deliveries(&self, until: Instant) {
        let ctx = self.context();
        match self {
            TxnProducer::Thread(_) => {
                let mut d = ctx.deliveries.lock().expect("deliveries lock");
                while d.results.iter().any(Option::is_none) {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    d = ctx.delivered.wait_timeout(d, left).expect("deliveries lock").0;
                }
            }
            TxnProducer::Own(p) => loop {
                p.poll(Duration::ZERO);
                let done = ctx.deliveries.lock().expect("deliveries lock").results.iter().all(Option::is_some);
                if done || Instant::now() >= until {
                    break;
                }
                std::thread::sleep(POLL_PAUSE);
            },
        }
    }
}

/// Serves the producer's events until librdkafka counts nothing of it as outstanding, at most
/// 20 ms. rdkafka's `commit_transaction` first flushes, and its flush, while `rd_kafka_outq_len` is
/// above zero, polls in steps of 100 ms that do not end early; the last delivery report still
/// counts while its poll finishes handling it (microseconds after our callback saw it), so
/// committing at once cost a whole 100 ms step in about one commit of ten (measured on a single
/// broker).
pub(super) fn settle_reports(producer: &TxnProducer) {
    let until = Instant::now() + SETTLE_AT_MOST;
    loop {
        producer.poll_now();
        if producer.in_flight_count() == 0 || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}
