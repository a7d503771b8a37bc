//! The input topics' consumer, on a thread of its own: it joins `INPUT_GROUP` (static
//! membership), offers what it polls to the [`InputQueue`], pauses its partitions while the queue
//! holds too much, and tells the queue about rebalances. It never commits an offset itself
//! (`enable.auto.commit=false`): the offsets go into the publisher's transactions
//! ([`super::queue`]), so a publisher that was fenced cannot move them.
//!
//! It runs while the publisher accepts writes (an active publisher that started or was promoted;
//! never a standby) and ends when the publisher starts over, is fenced or stops; a start-over runs
//! a new one, which reads from the group's committed offsets.

use super::config::InputSettings;
use super::queue::{Incoming, InputQueue, Source};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientContext, TopicPartitionList};
use shared::kafka::{FleetContext, KafkaSettings};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one poll waits for a record.
const POLL: Duration = Duration::from_millis(100);
/// Records polled at most before they are offered to the queue together.
const BATCH: usize = 1_000;
/// A repeating consumer error is logged once per this.
const ERROR_EVERY: Duration = Duration::from_secs(10);

/// The consumer's context: librdkafka's logs, and rebalances told to the queue.
struct InputContext {
    logs: FleetContext,
    queue: Arc<InputQueue>,
}

impl ClientContext for InputContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
        self.logs.log(level, fac, msg);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        self.logs.error(error, reason);
    }
}

fn sources(tpl: &TopicPartitionList) -> Vec<Source> {
    tpl.elements().iter().map(|e| Source { topic: e.topic().into(), partition: e.partition() }).collect()
}

impl ConsumerContext for InputContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            self.queue.revoked(&sources(tpl));
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            // The metadata of this generation: a transaction commits the offsets of records read
            // under it only while it is the group's (KIP-447).
            Rebalance::Assign(tpl) => self.queue.assigned(&sources(tpl), consumer.group_metadata()),
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "the input consumer's rebalance failed; it rejoins the group"),
        }
    }
}

/// Starts the consumer's thread; it runs while `keep_going` says so and the queue is open, then
/// closes the queue and leaves.
///
/// # Errors
/// When the thread cannot be spawned.
pub fn spawn(kafka: KafkaSettings, settings: InputSettings, queue: Arc<InputQueue>, keep_going: impl Fn() -> bool + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new().name("input".into()).spawn(move || {
        run(&kafka, &settings, &queue, &keep_going);
        queue.close();
    })?;
    Ok(())
}

fn run(kafka: &KafkaSettings, settings: &InputSettings, queue: &Arc<InputQueue>, keep_going: &dyn Fn() -> bool) {
    let config = kafka.input_consumer("core-publisher-input", &settings.group, &settings.instance, settings.offset_reset.as_str());
    let consumer: BaseConsumer<InputContext> = match config.create_with_context(InputContext { logs: FleetContext::default(), queue: queue.clone() }) {
        Ok(c) => c,
        Err(e) => return tracing::error!(error = %e, "cannot create the input consumer; the input topics are not read"),
    };
    let topics = settings.topic_names();
    if let Err(e) = consumer.subscribe(&topics) {
        return tracing::error!(error = %e, topics = ?topics, "cannot subscribe to the input topics; they are not read");
    }
    tracing::info!(topics = %super::config::describe_topics(&settings.topics), group = %settings.group, instance = %settings.instance,
        offset_reset = settings.offset_reset.as_str(),
        "reading the input topics from the group's committed offsets (exactly once: the offsets commit in the publisher's transactions)");
    let (mut paused, mut applied_to) = (false, u64::MAX);
    let mut last_error: Option<Instant> = None;
    while keep_going() && !queue.is_closed() {
        // Back-pressure: no fetching while the queue holds too much (the consumer still polls, so
        // the group sees it alive and rebalances are served).
        let want = if paused { !queue.has_room() } else { queue.is_full() };
        let assignment = queue.assignment();
        if want != paused || (paused && assignment != applied_to) {
            if let Ok(tpl) = consumer.assignment() {
                let r = if want { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
                if let Err(e) = r {
                    tracing::warn!(error = %e, "could not pause or resume the input partitions");
                }
            }
            if want != paused {
                tracing::info!(paused = want, "input: {}", if want { "the queue holds too much; fetching paused" } else { "fetching again" });
            }
            paused = want;
            applied_to = assignment;
            queue.set_paused(paused);
        }
        let mut batch = Vec::new();
        let mut wait = POLL;
        while batch.len() < BATCH {
            match consumer.poll(wait) {
                Some(Ok(m)) => batch.push(incoming(&m, settings.channel_header.as_deref())),
                Some(Err(e)) => {
                    if last_error.is_none_or(|t| t.elapsed() >= ERROR_EVERY) {
                        tracing::warn!(error = %e, "the input consumer reported an error (an input topic missing? it is read once it exists)");
                        last_error = Some(Instant::now());
                    }
                    break;
                }
                None => break,
            }
            wait = Duration::ZERO;
        }
        queue.offer(batch);
    }
    // No offset is committed on the way out: they are the transactions' alone.
    queue.close();
    drop(consumer);
    tracing::info!("the input consumer stopped");
}

/// A polled record as the queue takes it: its channel from the header named `header` (when set)
/// or from its key.
fn incoming(m: &rdkafka::message::BorrowedMessage<'_>, header: Option<&str>) -> Incoming {
    let channel = match header {
        Some(name) => m.headers().and_then(|hs| hs.iter().find(|h| h.key == name).and_then(|h| h.value.map(<[u8]>::to_vec))),
        None => m.key().map(<[u8]>::to_vec),
    };
    Incoming { topic: m.topic().to_owned(), partition: m.partition(), offset: m.offset(), channel, value: m.payload().map(<[u8]>::to_vec) }
}
