//! Topic creation and partition metadata (leader, replicas, in-sync replicas) through the admin
//! and metadata APIs, for [`super::Broker`] and the cluster's start-up.

use anyhow::bail;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use shared::kafka::KafkaSettings;
use std::time::Duration;

/// Creates `topic` with `partitions` × `replication` through the admin API (an existing topic
/// counts as created).
///
/// # Errors
/// When the broker refuses (too few brokers for the replication factor, say) or does not answer.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32, replication: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = KafkaSettings::new(bootstrap).admin("e2e-cluster-admin").create()?;
    let res = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(replication))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?;
    for r in res {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => bail!("create topic {t}: {e}"),
        }
    }
    Ok(())
}


/// [`fetch_partition`] on a blocking thread.
pub(super) async fn fetch_partition_async(bootstrap: &str, topic: &str, partition: i32) -> Result<(i32, Vec<i32>, Vec<i32>), String> {
    let (b, t) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || fetch_partition(&b, &t, partition)).await.map_err(|e| e.to_string())?
}

/// `(leader, replicas, isr)` of `topic`/`partition` from one metadata request (blocking, at most
/// 3 s). An error describes what was missing: no answer, unknown topic, no leader.
fn fetch_partition(bootstrap: &str, topic: &str, partition: i32) -> Result<(i32, Vec<i32>, Vec<i32>), String> {
    let consumer: BaseConsumer = KafkaSettings::new(bootstrap).reader("e2e-metadata").create().map_err(|e| e.to_string())?;
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(3)).map_err(|e| format!("metadata request: {e}"))?;
    let t = md.topics().iter().find(|t| t.name() == topic).ok_or_else(|| format!("topic {topic} not in the metadata"))?;
    if let Some(e) = t.error() {
        return Err(format!("topic {topic}: {}", RDKafkaErrorCode::from(e)));
    }
    let p = t.partitions().iter().find(|p| p.id() == partition).ok_or_else(|| format!("{topic} has no partition {partition}"))?;
    // An offline replica is reported in the lists, not an error of the partition.
    if let Some(e) = p.error().map(RDKafkaErrorCode::from).filter(|e| *e != RDKafkaErrorCode::ReplicaNotAvailable) {
        return Err(format!("{topic}/{partition}: {e}"));
    }
    if p.leader() < 0 {
        return Err(format!("{topic}/{partition} has no leader (replicas {:?}, isr {:?})", p.replicas(), p.isr()));
    }
    Ok((p.leader(), p.replicas().to_vec(), p.isr().to_vec()))
}

/// [`Broker::wait_partition`], asking the brokers `bootstrap()` names at each attempt (the
/// cluster's start-up uses it before there is a [`Broker`]).
pub(super) async fn wait_partition_on(
    bootstrap: impl Fn() -> String,
    topic: &str,
    partition: i32,
    what: &str,
    timeout: Duration,
    pred: impl Fn(i32, &[i32], &[i32]) -> bool,
) -> anyhow::Result<(i32, Vec<i32>, Vec<i32>)> {
    let (pred, bootstrap) = (&pred, &bootstrap);
    crate::procs::eventually(what, timeout, || async move {
        let (leader, replicas, isr) = fetch_partition_async(&bootstrap(), topic, partition).await?;
        if pred(leader, &replicas, &isr) {
            Ok(Some((leader, replicas, isr)))
        } else {
            Err(format!("leader {leader}, replicas {replicas:?}, isr {isr:?}"))
        }
    })
    .await
}
