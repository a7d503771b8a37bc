//! The events topic's Kafka topic ID (KIP-516): the topic half of a canvas stream's
//! [`crate::epoch::Epoch`].
//!
//! Kafka gives every topic a random 128-bit ID when it creates it (since 2.8) and never reuses one,
//! so a topic deleted and created again under the same name has another ID. rust-rdkafka does not
//! expose it, so [`describe`] calls librdkafka's `rd_kafka_DescribeTopics` admin API (librdkafka
//! ≥ 2.3) through the bindings rust-rdkafka re-exports, on any client handle. librdkafka's mock
//! cluster gives its topics random IDs too, so the embedded broker behaves like Kafka here.
//!
//! The text form is Kafka's own (`Uuid.toString()`: the 16 bytes, most significant first, in
//! URL-safe base64 without padding, 22 characters), the one `kafka-topics.sh --describe` prints.

use base64::Engine;
use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::RDKafkaErrorCode;
use std::ffi::{CStr, CString};
use std::time::Duration;

/// Why the topic ID could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicIdError {
    #[error("topic {topic}: metadata: {source}")]
    Metadata { topic: String, source: rdkafka::error::KafkaError },
    #[error("topic {topic}: DescribeTopics got no answer within {timeout:?}")]
    Timeout { topic: String, timeout: Duration },
    #[error("topic {topic}: DescribeTopics failed: {code:?}: {message}")]
    Broker { topic: String, code: RDKafkaErrorCode, message: String },
    #[error("topic {topic}: DescribeTopics answered without the topic")]
    Missing { topic: String },
    #[error("topic name {0:?} has a NUL byte")]
    BadName(String),
}

/// Kafka's text form of a topic ID given its two halves.
pub fn encode(most_significant: i64, least_significant: i64) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&most_significant.to_be_bytes());
    bytes[8..].copy_from_slice(&least_significant.to_be_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Frees what librdkafka allocated for one request, whatever path the function leaves by.
struct Request {
    names: *mut rd::rd_kafka_TopicCollection_t,
    options: *mut rd::rd_kafka_AdminOptions_t,
    queue: *mut rd::rd_kafka_queue_t,
    event: *mut rd::rd_kafka_event_t,
}

impl Drop for Request {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or was returned by the matching librdkafka constructor and
        // is destroyed exactly once, here.
        unsafe {
            if !self.event.is_null() {
                rd::rd_kafka_event_destroy(self.event);
            }
            if !self.queue.is_null() {
                rd::rd_kafka_queue_destroy(self.queue);
            }
            if !self.options.is_null() {
                rd::rd_kafka_AdminOptions_destroy(self.options);
            }
            if !self.names.is_null() {
                rd::rd_kafka_TopicCollection_destroy(self.names);
            }
        }
    }
}

fn text(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: librdkafka returns NUL-terminated strings that live as long as their object.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The topic ID of `topic`, in Kafka's text form ([`encode`]); [`crate::epoch::ZERO_TOPIC_ID`]
/// from a broker that has none. Blocking (about twice `timeout` at most): call from a blocking
/// thread. Give it a client that does not create topics by asking for them (a consumer:
/// `allow.auto.create.topics` is false by default there, true for producers).
///
/// librdkafka sends DescribeTopics to the controller by default, and the mock cluster names no
/// controller; any broker answers it (it is a Metadata request), so it goes to the broker that
/// answered a metadata request first.
///
/// # Errors
/// [`TopicIdError`]: no answer in time, or the broker's error (an unknown topic is
/// `UnknownTopicOrPartition`).
pub fn describe<C: ClientContext>(client: &Client<C>, topic: &str, timeout: Duration) -> Result<String, TopicIdError> {
    let name = CString::new(topic).map_err(|_| TopicIdError::BadName(topic.into()))?;
    let metadata = client.fetch_metadata(Some(topic), timeout).map_err(|source| TopicIdError::Metadata { topic: topic.into(), source })?;
    // The broker that answered, unless it was a bootstrap address (id -1): then any broker listed.
    let broker = Some(metadata.orig_broker_id()).filter(|id| *id >= 0).or_else(|| metadata.brokers().first().map(|b| b.id())).unwrap_or(-1);
    let rk = client.native_ptr();
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let mut names = [name.as_ptr()];
    // SAFETY: `rk` is a live handle owned by `client` (borrowed for this call); `names` outlives
    // the collection's construction (librdkafka copies the strings); every object created is
    // freed by `req`'s drop; the description and its UUID are read before the event that owns
    // them is destroyed.
    unsafe {
        let mut req = Request {
            names: rd::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), 1),
            options: rd::rd_kafka_AdminOptions_new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS),
            queue: rd::rd_kafka_queue_new(rk),
            event: std::ptr::null_mut(),
        };
        let mut errstr = [0 as std::os::raw::c_char; 256];
        // These only fail for out-of-range values, which the conversion above and a broker id
        // from the cluster prevent; librdkafka then keeps its defaults.
        rd::rd_kafka_AdminOptions_set_request_timeout(req.options, timeout_ms, errstr.as_mut_ptr(), errstr.len());
        if broker >= 0 {
            rd::rd_kafka_AdminOptions_set_broker(req.options, broker, errstr.as_mut_ptr(), errstr.len());
        }
        rd::rd_kafka_DescribeTopics(rk, req.names, req.options, req.queue);
        req.event = rd::rd_kafka_queue_poll(req.queue, timeout_ms.saturating_add(1000));
        if req.event.is_null() {
            return Err(TopicIdError::Timeout { topic: topic.into(), timeout });
        }
        let err = rd::rd_kafka_event_error(req.event);
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(TopicIdError::Broker { topic: topic.into(), code: err.into(), message: text(rd::rd_kafka_event_error_string(req.event)) });
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(req.event);
        if result.is_null() {
            return Err(TopicIdError::Missing { topic: topic.into() });
        }
        let mut count = 0usize;
        let topics = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        for i in 0..count {
            let desc = *topics.add(i);
            if text(rd::rd_kafka_TopicDescription_name(desc)) != topic {
                continue;
            }
            let error = rd::rd_kafka_TopicDescription_error(desc);
            if !error.is_null() {
                let code = rd::rd_kafka_error_code(error);
                if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    return Err(TopicIdError::Broker { topic: topic.into(), code: code.into(), message: text(rd::rd_kafka_error_string(error)) });
                }
            }
            let id = rd::rd_kafka_TopicDescription_topic_id(desc);
            if id.is_null() {
                return Ok(crate::epoch::ZERO_TOPIC_ID.to_owned());
            }
            return Ok(encode(rd::rd_kafka_Uuid_most_significant_bits(id), rd::rd_kafka_Uuid_least_significant_bits(id)));
        }
        Err(TopicIdError::Missing { topic: topic.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;
    use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext};
    use rdkafka::ClientConfig;

    #[test]
    fn the_text_form_is_kafka_s() {
        // Kafka's Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID (new Uuid(0L, 1L)), as Java prints them.
        assert_eq!(encode(0, 0), crate::epoch::ZERO_TOPIC_ID);
        assert_eq!(encode(0, 1), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(encode(-1, -1), "_____________________w");
    }

    #[test]
    fn the_mock_cluster_gives_each_topic_its_own_id() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("a", 3, 1).expect("topic a");
        cluster.create_topic("b", 3, 1).expect("topic b");
        let client: BaseConsumer<DefaultConsumerContext> =
            ClientConfig::new().set("bootstrap.servers", cluster.bootstrap_servers()).create().expect("client");
        let timeout = Duration::from_secs(10);
        let a = describe(client.client(), "a", timeout).expect("a's id");
        let b = describe(client.client(), "b", timeout).expect("b's id");
        assert_eq!(a.len(), 22, "{a}");
        assert_ne!(a, crate::epoch::ZERO_TOPIC_ID);
        assert_ne!(a, b, "two topics, two ids");
        assert_eq!(describe(client.client(), "a", timeout).unwrap(), a, "an id does not change");
        match describe(client.client(), "nope", timeout) {
            Err(TopicIdError::Broker { code, .. }) => assert_eq!(code, RDKafkaErrorCode::UnknownTopicOrPartition),
            other => panic!("an unknown topic: {other:?}"),
        }
    }
}
