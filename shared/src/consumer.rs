//! Small helpers for a consumer the fleet reads with: serving its queued events, and reading its
//! errors. Apart from the Kafka settings module (which re-exports them), so that the replay,
//! which that module uses, does not import it back.

use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use std::time::Duration;

/// Serves the events librdkafka queued on `consumer`: its log lines and errors reach the client
/// context only when the client is polled, so a client that failed before it was ever polled
/// (a metadata request refused by SASL or TLS) has its cause recorded (as the
/// Kafka clients' recent error) only after this. Messages polled here are dropped:
/// call it on a consumer that is given up on.
pub fn serve_queued_events<C: ConsumerContext>(consumer: &BaseConsumer<C>) {
    // A zero-timeout poll serves at most one queued event; a few hundred cover a failed start.
    for _ in 0..256 {
        let _ = consumer.poll(Duration::ZERO);
    }
}

/// Closes `consumer` on a thread of its own: rdkafka's drop of a consumer with a group id polls
/// for up to 100 ms until librdkafka reports it closed, which a reader that is done with it need
/// not wait for.
pub fn close_in_background<C: ConsumerContext + 'static>(consumer: BaseConsumer<C>) {
    let spawned = std::thread::Builder::new().name("consumer-close".into()).spawn(move || drop(consumer));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread to close a Kafka reader on; it stays open until the process ends");
    }
}

/// Whether a consumer's error says a partition's position is out of range (below the log start:
/// records deleted by retention; or past the end). With `auto.offset.reset=error` librdkafka stops
/// fetching that partition until it is assigned or seeked again.
pub fn out_of_range(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    matches!(
        e,
        KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
            | KafkaError::MessageConsumptionFatal(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
    )
}
