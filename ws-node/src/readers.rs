//! What the node's group-less readers (the release reader, the standby reader) share: a manual
//! assignment from the node's positions.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use shared::kafka::FleetContext;

/// Assigns `reader` (no group) exactly `partitions` of `topic`, each from the node's position in
/// `positions` (the log start when it has none); unassigns when `partitions` is empty. Used by the
/// release reader and the standby reader.
pub fn assign_from(
    reader: &BaseConsumer<FleetContext>,
    topic: &str,
    partitions: &[i32],
    positions: &shared::replay::Offsets,
) -> rdkafka::error::KafkaResult<()> {
    if partitions.is_empty() {
        return reader.unassign();
    }
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition_offset(topic, *p, positions.get(p).copied().map_or(Offset::Beginning, Offset::Offset))?;
    }
    reader.assign(&tpl)
}

/// Raises the node's positions past transaction markers at the end of the log: a partition whose
/// last entry is a commit marker has no record at its end − 1, so the positions the node counts
/// from applied records stand one short of the end while the reader has read everything (lag 1,
/// which would read as a stalled partition). Call when a poll of `reader` came back empty: the
/// positions librdkafka reports then are past every record and marker the reader went through
/// ([`Hub::reached_ends`] keeps only those at the readable end).
pub fn note_read_to_end<C: rdkafka::consumer::ConsumerContext>(which: crate::ownership::Reader, reader: &BaseConsumer<C>, topic: &str, hub: &crate::hub::Hub) {
    // The node's positions first: one that moves before the reader's is read is left alone.
    let seen = hub.positions();
    let Ok(tpl) = reader.position() else { return };
    let read: shared::replay::Offsets = tpl
        .elements_for_topic(topic)
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect();
    if !read.is_empty() {
        hub.reached_ends(which, &seen, &read);
    }
}
