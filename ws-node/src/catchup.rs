//! Catch-up: replay, in order, the stretch of the log this node's state is missing, before it
//! serves anyone.
//!
//! 1. Load the snapshot topic ([`shared::snapshot`]): every channel whose snapshot is newer than
//!    the node's state takes it (size ∝ channels, not events), and each partition's checkpoint
//!    says where the log must be read from: every channel's records below it are in its snapshot.
//! 2. Record the readable end of every partition: the targets. The catch-up consumer reads
//!    `read_committed`, so that is the partition's last stable offset (what `query_watermark_offsets`
//!    returns to such a consumer), not the high watermark: records of an open transaction may
//!    still be aborted.
//! 3. With the node's own catch-up consumer group (never the broadcast group, so replay does not
//!    disturb live delivery), read each partition from its checkpoint or the node's position (the
//!    offset after the last record its state applied), whichever is later, and apply every record
//!    (a channel skips the records its snapshot already holds). A start past a partition's
//!    readable end is a log that moved backwards (the topic recreated, or truncated): the node
//!    forgets that partition's channels and reads it from its log start. Needed records that retention
//!    deleted are an error in the log, naming the partitions; the channels whose versions then
//!    skip are named as they are applied.
//! 4. Complete when the consumer's position has reached the target on every partition (a
//!    partition with nothing to read is complete at once; a partition that ends in a transaction
//!    marker has no record at target − 1, see [`shared::replay`]), log
//!    `[CATCHUP] completed replayCount=.. channelsFromSnapshots=.. targetOffsets=.. lastConsumedOffsets=..`,
//!    and commit the positions to the catch-up group (so `kafka-consumer-groups --describe` shows
//!    where replay ended; the node itself always starts from its in-memory state).
//!
//! Records published after the targets were recorded are not lost: the broadcast consumer starts
//! each partition it is assigned at the node's position, which is where catch-up stopped.
//! At-least-once: a record is counted in the position only after it was applied.

use crate::config::Config;
use crate::hub::Hub;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use shared::api::{CatchupReport, CatchupStatus};
use shared::kafka::FleetContext;
use shared::replay::{self, fmt_offsets, Offsets, Progress, ReplayError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a replay may see no record while records remain before it fails.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A catch-up report before any recovery.
pub fn idle_report() -> CatchupReport {
    CatchupReport {
        status: CatchupStatus::Idle,
        target_offsets: Default::default(),
        last_consumed_offsets: Default::default(),
        positions: Default::default(),
        replay_count: 0,
        restored: Default::default(),
        took_ms: None,
        completed: 0,
        error: None,
    }
}

/// Runs one catch-up to completion (blocking: call from a blocking thread). `report` is updated as
/// it goes, for `/health`. Returns the partition count of the topic and the final progress.
///
/// # Errors
/// [`ReplayError`] when the broker cannot be read, the replay stalls, or `cancelled` turns true.
pub fn run(
    config: &Config,
    hub: &Hub,
    report: &Mutex<CatchupReport>,
    cancelled: &dyn Fn() -> bool,
) -> Result<(u32, Progress), ReplayError> {
    let started = Instant::now();
    let consumer: BaseConsumer<FleetContext> = config
        .kafka()
        .catchup_consumer(&config.catchup_group(), &format!("{}-catchup", config.node_id))
        .create_with_context(FleetContext::default())
        .map_err(ReplayError::Client)?;
    // 1. The snapshots (size ∝ channels, not events), then each partition from its checkpoint
    //    (or the node's own position where that is later).
    let snapshot_topic = config.snapshot_topic();
    let loaded = shared::snapshot::load(&consumer, &snapshot_topic, STALL_TIMEOUT, cancelled)?;
    let (snapshot_records, checkpoints) = (loaded.records, loaded.checkpoints.clone());
    let mut needed = hub.positions();
    for (p, checkpoint) in &checkpoints {
        let at = needed.entry(*p).or_insert(*checkpoint);
        *at = (*at).max(*checkpoint);
    }
    let (plan, gaps) = replay::plan_wanting(&consumer, &config.topic, &needed, &Offsets::new(), Duration::from_secs(10))?;
    let partitions = plan.targets.len() as u32;
    if !gaps.moved_back.is_empty() {
        // A position or checkpoint past the readable end: what this node holds of those
        // partitions is of another history. Forget it; the snapshots and the log rebuild it.
        let moved: Vec<i32> = gaps.moved_back.iter().map(|m| m.partition).collect();
        for m in &gaps.moved_back {
            tracing::warn!(partition = m.partition, position = m.position, end = m.end,
                "[CATCHUP] the log moved backwards on this partition (position past its readable end): its channels are rebuilt from the snapshots and the log from its start");
            hub.count_log_moved_back();
        }
        for s in hub.forget_partitions(&moved, partitions, &plan.starts) {
            s.close(shared::protocol::close::SERVICE_RESTART, "the log moved backwards: reconnect to get the rebuilt state");
        }
    }
    let mut restorable = hub.restorable(&loaded).map_err(ReplayError::Refused)?;
    let moved: Vec<i32> = gaps.moved_back.iter().map(|m| m.partition).collect();
    crate::hub::of_another_log(&mut restorable, &moved, partitions);
    let from_snapshots = hub.restore(restorable);
    hub.forget_deleted(&loaded, partitions);
    tracing::info!(
        "[CATCHUP] snapshots loaded topic={} records={} channelsFromSnapshots={} checkpoints={}",
        snapshot_topic,
        snapshot_records,
        from_snapshots,
        fmt_offsets(&checkpoints)
    );
    if !gaps.truncated.is_empty() {
        tracing::error!(partitions = ?gaps.truncated,
            "[CATCHUP] records this node needs were deleted on these partitions and no snapshot covers them: channels there \
             may miss old versions (the log reports the channels whose versions skip)");
    }
    // The state reflects everything before the start (nothing exists before the log start).
    hub.advance_positions(&plan.starts);
    set_report(report, CatchupStatus::Running, &Progress::new(&plan), None);
    report.lock().expect("catch-up report lock").restored.channels_from_snapshots = from_snapshots;
    let total = Progress::new(&plan).remaining();
    tracing::info!(
        "[CATCHUP] started groupId={} startOffsets={} targetOffsets={} toReplay={}",
        config.catchup_group(),
        fmt_offsets(&plan.starts),
        fmt_offsets(&plan.targets),
        total
    );
    let mut last_log = Instant::now();
    let progress = replay::run(
        &consumer,
        &config.topic,
        &plan,
        STALL_TIMEOUT,
        cancelled,
        |msg| {
            let (p, off) = (msg.partition(), msg.offset());
            if let Err(e) = hub.apply_record(p, off, shared::record::RecordHeaders::of(msg), msg.payload()) {
                // A record of a later format is not skipped: the node stops (the hub logged why).
                if !e.stops() {
                    tracing::warn!(partition = p, offset = off, error = %e, "[CATCHUP] skipping a record that is not a publication");
                }
            }
        },
        |pr| {
            set_report(report, CatchupStatus::Running, pr, None);
            if last_log.elapsed() >= Duration::from_secs(1) && !pr.is_complete() {
                tracing::info!("[CATCHUP] progress replayed={} remaining={} positions={}", pr.count, pr.remaining(), fmt_offsets(&pr.positions));
                last_log = Instant::now();
            }
        },
    )?;
    hub.advance_positions(&progress.positions);
    {
        // One lock: a reader never sees `completed` status without its count and time.
        let mut r = report.lock().expect("catch-up report lock");
        fill_report(&mut r, CatchupStatus::Completed, &progress, None);
        r.took_ms = Some(started.elapsed().as_millis() as u64);
        r.completed += 1;
    }
    tracing::info!(
        "[CATCHUP] completed replayCount={} channelsFromSnapshots={} targetOffsets={} lastConsumedOffsets={} positions={} tookMs={}",
        progress.count,
        from_snapshots,
        fmt_offsets(&progress.targets),
        fmt_offsets(&progress.last_consumed),
        fmt_offsets(&progress.positions),
        started.elapsed().as_millis()
    );
    commit_positions(&consumer, &config.topic, &progress);
    Ok((partitions, progress))
}

/// Records a failed recovery in the report (the gateway sends start-recovery again), with the
/// Kafka clients' last error of the past minute when there is one: behind a generic "broker
/// transport failure" it names the cause (a refused SASL login, an untrusted certificate).
pub fn mark_failed(report: &Mutex<CatchupReport>, error: &str) {
    let mut r = report.lock().expect("catch-up report lock");
    r.status = CatchupStatus::Failed;
    r.error = Some(shared::kafka::with_recent_client_error(error));
}

fn set_report(report: &Mutex<CatchupReport>, status: CatchupStatus, pr: &Progress, error: Option<String>) {
    fill_report(&mut report.lock().expect("catch-up report lock"), status, pr, error);
}

fn fill_report(r: &mut CatchupReport, status: CatchupStatus, pr: &Progress, error: Option<String>) {
    r.status = status;
    r.target_offsets = pr.targets.clone();
    r.last_consumed_offsets = pr.last_consumed.clone();
    r.positions = pr.positions.clone();
    r.replay_count = pr.count;
    r.error = error;
}

fn commit_positions(consumer: &BaseConsumer<FleetContext>, topic: &str, progress: &Progress) {
    let mut tpl = TopicPartitionList::new();
    for (p, pos) in &progress.positions {
        if tpl.add_partition_offset(topic, *p, Offset::Offset(*pos)).is_err() {
            return;
        }
    }
    if let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
        tracing::warn!(error = %e, "[CATCHUP] could not commit positions to the catch-up group (informational only)");
    }
}
