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

