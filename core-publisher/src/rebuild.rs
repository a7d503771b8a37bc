//! The start-up read behind [`crate::versions::Versions::rebuild`]: every channel's head and the
//! idempotency keys below each checkpoint from the snapshot topic ([`crate::keylog`]; read while
//! the producers are initialised, [`Preread`]), then the
//! events log after each partition's checkpoint (and, where a log was written before key records
//! existed, back through the key window for its keys), into the partitions the committers start
//! from. It does not read a log where another producer's transaction is open
//! ([`refuse_open_transactions`]).

use crate::idempotency::KeyStore;
use crate::log::{EventLog, Logged, LoggedEvent, LoggedOp, OpenTxn, PrepareError, ReadError, Tail};
use crate::keylog::KeyBook;
use crate::partition::Partition;
use crate::snapshots::Coverage;
use crate::types::{Fingerprint, Published};
use shared::snapshot::KeyEntry;
use crate::heads::{self, Head};
use shared::namespaces::Namespaces;
use shared::ChannelId;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why the rebuild did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// The transactional producers could not be initialised (retry).
    #[error(transparent)]
    Prepare(PrepareError),
    /// The log could not be read (retry).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Another publisher took over while this one was starting: it must not write.
    #[error("fenced by another publisher while starting")]
    Fenced,
    /// Another producer's transaction is open on these partitions, on two reads
    /// [`RECHECK_OPEN_AFTER`] apart ([`refuse_open_transactions`]; retry: it ends when that
    /// producer commits or aborts, when an operator aborts it, or at its transaction timeout).
    #[error("{}", describe_hanging(.0))]
    Hanging(Vec<OpenTxn>),
}


/// What a rebuild builds while it streams the log's tail.
struct Rebuilt {
    namespaces: Arc<Namespaces>,
    heads: Vec<HashMap<ChannelId, Head>>,
    coverage: Vec<Coverage>,
    /// Channels whose versions skip (records deleted that no snapshot covers).
    incomplete: Vec<ChannelId>,
    /// Channels with an event newer than their head in the tail.
    fresh: HashSet<ChannelId>,
    /// Per partition, the keyed events read (below the checkpoint: only for the key store).
    keyed: Vec<Vec<KeyEntry>>,
    /// Per partition, the reset floor: its checkpoint's, raised by the deletes read in the tail.
    floors: Vec<u64>,
    events: usize,
}

impl Rebuilt {
    /// Applies one event of the tail; returns whether it was new to the heads.
    fn apply(&mut self, le: &LoggedEvent, now: std::time::Instant) -> bool {
        let p = le.partition as usize;
        let (Some(heads), Some(cover)) = (self.heads.get_mut(p), self.coverage.get_mut(p)) else { return false };
        let ev = &le.event;
        let before = heads.get(&ev.channel).map_or(0, |h| h.version);
        if ev.version <= before {
            return false;
        }
        if ev.version > before + 1 {
            tracing::error!(channel = %ev.channel, expected = before + 1, got = ev.version, partition = le.partition, offset = le.offset,
                "this channel's versions skip in the log and no snapshot covers them (records deleted by retention?): its state before version {} is lost",
                ev.version);
            if !self.incomplete.contains(&ev.channel) {
                self.incomplete.push(ev.channel.clone());
            }
        }
        heads::apply(heads, &self.namespaces, ev, le.offset);
        cover.recorded(&ev.channel, le.offset, now);
        if !self.fresh.contains(&ev.channel) {
            self.fresh.insert(ev.channel.clone());
        }
        self.events += 1;
        true
    }

    /// Applies one op of the tail: a reset or delete ends the channel's history, and with it any
    /// gap found in it.
    fn apply_op(&mut self, lo: &LoggedOp, now: std::time::Instant) {
        let p = lo.partition as usize;
        let (Some(heads), Some(coverage), Some(floor)) = (self.heads.get_mut(p), self.coverage.get_mut(p), self.floors.get_mut(p)) else { return };
        let mut book = crate::partition::BookParts { heads, coverage, floor };
        book.apply_op(&self.namespaces, &lo.op, lo.offset, now);
        self.incomplete.retain(|c| *c != lo.op.channel);
        self.fresh.insert(lo.op.channel.clone());
    }
}

/// What the read found: the partitions the committers start from.
pub struct Restored {
    /// Each partition's heads, coverage and end position, numbered from 0.
    pub partitions: Vec<Arc<Partition>>,
    /// Channels found with versions missing from the log and no snapshot covering them.
    pub incomplete: Vec<ChannelId>,
    /// Events read from the log.
    pub events_read: usize,
    /// Where each partition's read of the events ended.
    pub positions: shared::replay::Offsets,
    /// Where each partition's read of the snapshot topic ended.
    pub snapshot_positions: shared::replay::Offsets,
    /// Each partition's checkpoint as read (where the keys its key book holds start).
    pub checkpoints: shared::replay::Offsets,
}

/// What a start reads before its producers fence the active publisher (while they are
/// initialised): the snapshot topic, and where each partition's idempotency-key window starts in
/// the events log.
///
/// Reading it before the fence is safe: whatever that publisher commits to the snapshot topic
/// until it is fenced (snapshots, a checkpoint further on, key records) is missing here, so the
/// checkpoints are older than the newest and the tail, read after the fence, starts earlier and
/// reads the events those records would have covered (their keys included). Every event is in the
/// log after the checkpoints read here; nothing is missed, some is read twice over.
pub struct Preread {
    loaded: shared::snapshot::Loaded,
    snapshot_positions: shared::replay::Offsets,
    window_starts: shared::replay::Offsets,
}

/// Reads the snapshot topic and the key window's start (`key_window` back from now), both at once.
///
/// # Errors
/// [`RebuildError::Read`] when either cannot be read.
pub async fn preread<L: EventLog>(log: &L, key_window: Duration) -> Result<Preread, RebuildError> {
    let started = std::time::Instant::now();
    let key_from_ms = shared::event::now_ms().saturating_sub(key_window.as_millis() as u64) as i64;
    let (snapshots, window_starts) = tokio::join!(log.read_snapshots_from(shared::replay::Offsets::new()), log.offsets_for_time(key_from_ms));
    let (loaded, snapshot_positions) = snapshots?;
    tracing::info!(records = loaded.records, snapshots = loaded.canvases.len() + loaded.channels.len(), took_ms = started.elapsed().as_millis() as u64,
        "snapshot topic read");
    Ok(Preread { loaded, snapshot_positions, window_starts: window_starts? })
}

/// Reads the heads of a topic of `n` partitions and canvases of `dims`: the snapshots (`pre`),
/// then the log's tail after each checkpoint, teaching `keys` the idempotency keys of the window.
///
/// # Errors
/// [`RebuildError::Read`] when the log cannot be read, or a snapshot cannot be used;
/// [`RebuildError::Hanging`] while another producer's transaction holds a partition's readable
/// end ([`refuse_open_transactions`]).
pub async fn read_heads<L: EventLog>(log: &L, pre: Preread, namespaces: &Arc<Namespaces>, n: u32, keys: &Arc<Mutex<KeyStore>>) -> Result<Restored, RebuildError> {
    refuse_open_transactions(log).await?;
    heads_after(log, pre, namespaces, n, keys).await
}

/// As [`read_heads`] with its [`preread`] first, without waiting for other producers' open
/// transactions to end: a standby ([`crate::follow`]) reads while the active publisher's
/// transactions come and go, and reads on after them (a promotion checks for open transactions
/// once it has fenced that publisher).
///
/// # Errors
/// As [`read_heads`], except [`RebuildError::Hanging`].
pub async fn read_heads_now<L: EventLog>(log: &L, namespaces: &Arc<Namespaces>, n: u32, key_window: Duration, keys: &Arc<Mutex<KeyStore>>) -> Result<Restored, RebuildError> {
    let pre = preread(log, key_window).await?;
    heads_after(log, pre, namespaces, n, keys).await
}

/// Heads and keys from the snapshot topic, then the log's tail after each partition's
/// checkpoint, streamed (never the whole topic in memory); the tail starts earlier only where the
/// window's keys are not all in key records.
async fn heads_after<L: EventLog>(log: &L, pre: Preread, namespaces: &Arc<Namespaces>, n: u32, keys: &Arc<Mutex<KeyStore>>) -> Result<Restored, RebuildError> {
    let Preread { loaded, snapshot_positions, window_starts: mut wanted } = pre;
    let now_ms = shared::event::now_ms();
    // The keys of the window below each checkpoint come from the key records, where they are
    // complete (from the partition's "complete from" offset on): the log is read for keys only
    // below that, where a publisher without key records wrote within the window.
    wanted.retain(|p, w| loaded.keys_from.get(p).is_none_or(|from| *w < *from));

    let mut rebuilt = Rebuilt {
        namespaces: namespaces.clone(),
        heads: (0..n).map(|_| HashMap::new()).collect(),
        coverage: (0..n).map(|_| Coverage::default()).collect(),
        incomplete: Vec::new(),
        fresh: HashSet::new(),
        keyed: (0..n).map(|_| Vec::new()).collect(),
        floors: (0..n as i32).map(|p| loaded.floors.get(&p).copied().unwrap_or(0)).collect(),
        events: 0,
    };
    // A snapshot this process cannot use (unreadable: a newer format after a rollback, or
    // corrupt; or of another canvas size) may be the only record of its channel's head: going
    // on without it would hand that channel's versions out again. Refuse until fixed.
    if loaded.skipped > 0 {
        return Err(RebuildError::Read(ReadError(format!(
            "{} snapshot record(s) could not be read (see the warnings; a newer format needs a newer publisher): refusing to start \
             without them, as their channels' versions would be reused",
            loaded.skipped
        ))));
    }
    // Every snapshot as a head (one of another canvas size or model than the namespaces say is
    // refused: starting without it would reuse its channel's versions).
    let mut snapshot_heads: Vec<(i32, ChannelId, u64, u64, i64, Head)> = Vec::with_capacity(loaded.canvases.len() + loaded.channels.len());
    for (channel, (p, snap)) in &loaded.canvases {
        let head = heads::from_canvas(namespaces, snap).map_err(|e| RebuildError::Read(ReadError(format!("{e}: refusing to start"))))?;
        snapshot_heads.push((*p, channel.clone(), snap.version, snap.epoch, snap.offset, head));
    }
    for (channel, (p, snap)) in &loaded.channels {
        let head = heads::from_channel(namespaces, snap).map_err(|e| RebuildError::Read(ReadError(format!("{e}: refusing to start"))))?;
        snapshot_heads.push((*p, channel.clone(), snap.version, snap.epoch, snap.offset, head));
    }
    let from_snapshots = snapshot_heads.len();
    // Where each restored channel's snapshot ends, to name those whose later records are gone.
    let restored_at: Vec<(i32, ChannelId, i64)> = snapshot_heads.iter().map(|(p, c, _, _, offset, _)| (*p, c.clone(), *offset)).collect();
    for (p, channel, version, epoch, offset, head) in snapshot_heads {
        let (Some(heads), Some(cover)) = (rebuilt.heads.get_mut(p as usize), rebuilt.coverage.get_mut(p as usize)) else { continue };
        cover.restored(&channel, version, epoch, offset);
        heads.insert(channel, head);
    }
    let needed: shared::replay::Offsets = loaded.checkpoints.into_iter().filter(|(p, _)| (*p as u32) < n).collect();
    let needed_at = needed.clone();
    let state = Arc::new(Mutex::new(rebuilt));
    let (sink_keys, sink_state) = (keys.clone(), state.clone());
    let now = std::time::Instant::now();
    let (_, end) = log
        .read_tail(Tail { needed, wanted, following: false }, move |logged: Logged| {
            let mut state = sink_state.lock().expect("rebuild state lock");
            let le = match logged {
                Logged::Event(le) => le,
                Logged::Op(lo) => return state.apply_op(&lo, now),
            };
            state.apply(&le, now);
            if let Some(k) = &le.idempotency_key {
                let ev = &le.event;
                let fp = Fingerprint::of(&ev.channel, &ev.data);
                let published = Published { channel: ev.channel.clone(), version: ev.version, partition: le.partition, offset: le.offset };
                sink_keys.lock().expect("key store lock").learn(k, fp, published, ev.published_at_ms, shared::event::now_ms());
                if let Some(keyed) = state.keyed.get_mut(le.partition as usize) {
                    keyed.push(heads::key_entries(std::iter::once((ev, Some(k.as_str()))), le.offset).remove(0));
                }
            }
        })
        .await?;
    let rebuilt = std::mem::replace(
        &mut *state.lock().expect("rebuild state lock"),
        Rebuilt {
            namespaces: namespaces.clone(),
            heads: Vec::new(),
            coverage: Vec::new(),
            incomplete: Vec::new(),
            fresh: HashSet::new(),
            keyed: Vec::new(),
            floors: Vec::new(),
            events: 0,
        },
    );
    let (marker_only, lost): (Vec<i32>, Vec<i32>) =
        end.truncated.iter().partition(|p| only_a_marker_deleted(**p, &needed_at, &end.starts, &restored_at));
    if !marker_only.is_empty() {
        tracing::info!(partitions = ?marker_only,
            "the log of these idle partitions was deleted up to past their checkpoint's commit marker (retention): every channel there is in its snapshot");
    }
    if !lost.is_empty() {
        return Err(deleted_tail(&lost, &needed_at, &end.starts, &restored_at, &rebuilt.fresh));
    }
    // The keys of the key records, except on a partition whose log moved back under its
    // checkpoint (the events topic recreated with the snapshot topic kept): those belong to the
    // old history; they are tombstoned with the first checkpoint of the new one.
    let moved: Vec<bool> = (0..n as i32).map(|p| needed_at.get(&p).is_some_and(|cp| *cp > end.positions.get(&p).copied().unwrap_or(0))).collect();
    let moved_back = |p: i32| moved.get(p as usize).copied().unwrap_or(false);
    let mut live: Vec<Vec<(String, u64)>> = (0..n).map(|_| Vec::new()).collect();
    let mut from_records = 0usize;
    {
        let mut store = keys.lock().expect("key store lock");
        for (p, rec) in &loaded.keys {
            let old_history = moved_back(*p);
            if let Some(l) = live.get_mut(*p as usize) {
                l.push((rec.name.clone(), if old_history { 0 } else { rec.newest_ms() }));
            }
            if old_history {
                continue;
            }
            for e in &rec.entries {
                let Ok(channel) = ChannelId::parse(&e.canvas) else { continue };
                let fp = heads::fingerprint_of(&channel, e);
                let published = Published { channel, version: e.version, partition: *p, offset: e.offset };
                store.learn(&e.key, fp, published, e.at_ms, now_ms);
                from_records += 1;
            }
        }
    }
    tracing::info!(channels_from_snapshots = from_snapshots, records_read = end.records, events_applied = rebuilt.events,
        incomplete = rebuilt.incomplete.len(), keys_from_key_records = from_records,
        "heads rebuilt from the snapshots and the log after them");
    let events_read = end.records as usize;
    let ends = end.positions.clone();
    let mut keyed = rebuilt.keyed;
    let floors = rebuilt.floors;
    let mut key_from = shared::replay::Offsets::new();
    let partitions: Vec<Arc<Partition>> = rebuilt
        .heads
        .into_iter()
        .zip(rebuilt.coverage)
        .zip(live)
        .enumerate()
        .map(|(p, ((h, mut c), live))| {
            let end = ends.get(&(p as i32)).copied().unwrap_or(0);
            c.clamp_to(end);
            // The keys of the records the next checkpoint moves past: those at or after where
            // the heads' read started (the checkpoint; the log start where it moved back).
            let checkpoint = needed_at.get(&(p as i32)).copied().unwrap_or(0);
            let from = if checkpoint > end { 0 } else { checkpoint };
            key_from.insert(p as i32, from);
            let complete_from = if moved_back(p as i32) { None } else { loaded.keys_from.get(&(p as i32)).copied() };
            let mut book = KeyBook::restored(live, complete_from, from);
            for e in std::mem::take(&mut keyed[p]).into_iter().filter(|e| e.offset >= from) {
                book.record(e.offset, vec![e]);
            }
            let part = Partition::restored(p as i32, namespaces.clone(), h, c, end, book);
            part.with_book(|b| b.floor = floors[p]);
            Arc::new(part)
        })
        .collect();
    Ok(Restored { partitions, incomplete: rebuilt.incomplete, events_read, positions: end.positions, snapshot_positions, checkpoints: key_from })
}

/// Whether the only record deleted after partition `p`'s checkpoint was the commit marker at
/// it: the checkpoint was written with every channel of `p` covered (it equals the newest
/// snapshot's end, `restored_at`: the offset after the partition's last record then, where that
/// record's transaction put its marker), and the log now starts right after it (`starts`). An
/// idle partition whose whole log retention deleted looks like this, and lost nothing: a record
/// written after that checkpoint would have been snapshotted, moving the checkpoint past it,
/// long before retention could delete it. Pure.
fn only_a_marker_deleted(p: i32, checkpoints: &shared::replay::Offsets, starts: &shared::replay::Offsets, restored_at: &[(i32, ChannelId, i64)]) -> bool {
    let Some(&checkpoint) = checkpoints.get(&p) else { return false };
    let newest_snapshot_end = restored_at.iter().filter(|(q, _, _)| *q == p).map(|(_, _, end)| *end).max();
    newest_snapshot_end == Some(checkpoint) && starts.get(&p).is_some_and(|start| *start <= checkpoint + 1)
}

/// The refusal of a rebuild whose `truncated` partitions lost records after their checkpoints
/// (`checkpoints`; the read started at `starts`, the log start): those records were the only
/// copy of versions no snapshot covers, so the heads read are behind the versions already handed
/// out, and starting would hand them out again with other pixels. It names each partition with
/// its checkpoint and log start, and the channels restored there from a snapshot older than the
/// log start with no later event read (`restored_at`: partition, channel, the snapshot's end;
/// `fresh`: channels with an event in the tail). A channel whose every record was deleted, with no
/// snapshot, cannot be named: the refusal is per partition.
fn deleted_tail(
    truncated: &[i32],
    checkpoints: &shared::replay::Offsets,
    starts: &shared::replay::Offsets,
    restored_at: &[(i32, ChannelId, i64)],
    fresh: &HashSet<ChannelId>,
) -> RebuildError {
    let mut parts = Vec::new();
    for p in truncated {
        let start = starts.get(p).copied().unwrap_or(0);
        let mut channels: Vec<&str> =
            restored_at.iter().filter(|(q, c, end)| q == p && *end < start && !fresh.contains(c)).map(|(_, c, _)| c.as_str()).collect();
        channels.sort_unstable();
        let named = if channels.is_empty() { "no channel known from a snapshot".to_owned() } else { format!("channels {}", channels.join(", ")) };
        parts.push(format!("partition {p} (checkpoint {}, log start {start}: {named})", checkpoints.get(p).copied().unwrap_or(0)));
    }
    RebuildError::Read(ReadError(format!(
        "records after the snapshots' checkpoint were deleted on {} (retention shorter than SNAPSHOT_EVERY_MS, or DeleteRecords): the versions \
         they held are known to no snapshot, so starting would hand them out again; refusing to start (docs/publisher.md: \"A log that lost \
         uncovered records\")",
        parts.join("; ")
    )))
}

/// How long after a partition is first seen with a transaction open it is looked at again before
/// the transaction is called hanging: a transaction's commit markers reach its partitions one by
/// one, so a last stable offset can trail the end for a moment after the transaction ended.
pub const RECHECK_OPEN_AFTER: Duration = Duration::from_millis(500);

/// The partitions open on both reads (`first`, then `second`), with the second read's offsets.
/// Pure.
pub fn still_open(first: &[OpenTxn], second: &[OpenTxn]) -> Vec<OpenTxn> {
    second.iter().filter(|o| first.iter().any(|f| f.partition == o.partition)).cloned().collect()
}

/// Refuses to read a log where another producer's transaction is open: records committed after
/// its first one are invisible to a `read_committed` reader until it ends, so the heads read
/// would be behind versions already handed out. Called after [`EventLog::prepare`], which ended
/// whatever this publisher's own transactional ids left open, so an open transaction is
/// another producer's. A partition is looked at again [`RECHECK_OPEN_AFTER`] later before the
/// transaction is called hanging.
///
/// # Errors
/// [`RebuildError::Hanging`] naming the partitions; [`RebuildError::Read`] when the offsets
/// cannot be read.
pub async fn refuse_open_transactions<L: EventLog>(log: &L) -> Result<(), RebuildError> {
    let first = log.open_transactions().await?;
    if first.is_empty() {
        return Ok(());
    }
    tokio::time::sleep(RECHECK_OPEN_AFTER).await;
    let hanging = still_open(&first, &log.open_transactions().await?);
    if hanging.is_empty() {
        Ok(())
    } else {
        Err(RebuildError::Hanging(hanging))
    }
}

/// The text of [`RebuildError::Hanging`].
fn describe_hanging(open: &[OpenTxn]) -> String {
    let parts: Vec<String> = open
        .iter()
        .map(|o| format!("partition {} of {} (last stable offset {}, high watermark {})", o.partition, o.topic, o.stable, o.high))
        .collect();
    let first = open.first().map_or_else(|| ("<topic>".to_owned(), 0, 0), |o| (o.topic.clone(), o.partition, o.stable));
    format!(
        "a transaction of another producer is open on {}: records committed after its start are invisible to a read_committed \
         reader until it ends, so rebuilding now would hand their versions out again; not rebuilding until it ends (retrying). \
         See it with kafka-transactions.sh --bootstrap-server <broker> describe-producers --topic {} --partition {} (or find-hanging \
         --topic {}), end it with kafka-transactions.sh --bootstrap-server <broker> abort --topic {} --partition {} --start-offset {}; \
         its transaction coordinator aborts it by itself after the producer's transaction.timeout.ms",
        parts.join("; "),
        first.0,
        first.1,
        first.0,
        first.0,
        first.1,
        first.2
    )
}

#[cfg(test)]
mod tests {
    use crate::log::fake::{Fate, FakeLog};
    use crate::versions::{Timings, Versions};
    use shared::{CanvasDims, ChannelId, Color, PixelEvent};
    use std::sync::Arc;
    use super::only_a_marker_deleted;

    #[test]
    fn only_a_deleted_commit_marker_after_a_checkpoint_at_the_end_is_harmless() {
        let c = |s: &str| ChannelId::parse(s).unwrap();
        let offsets = |v: &[(i32, i64)]| v.iter().copied().collect::<shared::replay::Offsets>();
        let restored = vec![(0, c("a"), 7), (0, c("b"), 11), (1, c("x"), 4)];
        // (partition, checkpoints, log starts) -> harmless
        let table = [
            (0, offsets(&[(0, 11)]), offsets(&[(0, 12)]), true),
            // More than the marker: data after the checkpoint may be gone.
            (0, offsets(&[(0, 11)]), offsets(&[(0, 13)]), false),
            // The checkpoint is not at the newest snapshot's end: a channel was uncovered there.
            (1, offsets(&[(1, 6)]), offsets(&[(1, 7)]), false),
            // No checkpoint: records before any snapshot were deleted.
            (0, offsets(&[]), offsets(&[(0, 1)]), false),
            // No snapshot on the partition.
            (2, offsets(&[(2, 3)]), offsets(&[(2, 4)]), false),
        ];
        for (p, cps, starts, want) in table {
            assert_eq!(only_a_marker_deleted(p, &cps, &starts, &restored), want, "partition {p}: {cps:?} {starts:?}");
        }
    }

    const DIMS: CanvasDims = CanvasDims { width: 8, height: 8 };

    /// Another producer's transaction, open on the channel's partition, holds the last stable
    /// offset below a version this publisher committed after it: a rebuild then would read the
    /// channel's head one version short and hand that version out again.
    #[tokio::test]
    async fn a_rebuild_refuses_a_log_held_open_by_another_producers_transaction_until_it_ends() {
        let log = Arc::new(FakeLog::new(1, |_| Fate::Commit));
        let first = Versions::shared(log.clone(), DIMS, 1, Timings::default());
        first.rebuild().await.expect("an empty log rebuilds");
        let c1 = ChannelId::parse("c1").unwrap();
        assert_eq!(first.publish(&c1, 0, 0, Color([1, 1, 1])).await.expect("v1").version, 1);
        let stray = PixelEvent { canvas: ChannelId::parse("stray").unwrap(), version: 1, x: 0, y: 0, color: Color([9, 9, 9]), published_at_ms: 0 };
        log.open_foreign(0, vec![(stray.into(), None)]);
        assert_eq!(first.publish(&c1, 1, 0, Color([2, 2, 2])).await.expect("v2").version, 2);
        // Record v1 at 0, its marker at 1, the open record at 2, v2 at 3, its marker at 4.
        drop(first);

        let second = Versions::shared(Arc::new(log.another_publisher()), DIMS, 1, Timings::default());
        let started = std::time::Instant::now();
        let e = second.rebuild().await.expect_err("no rebuild from a log whose end an open transaction hides");
        assert!(started.elapsed() >= super::RECHECK_OPEN_AFTER, "looked twice before calling it hanging");
        let text = e.to_string();
        for part in ["partition 0", "last stable offset 2", "high watermark 5", "kafka-transactions.sh", "abort"] {
            assert!(text.contains(part), "{part:?} not in: {text}");
        }
        assert!(!second.is_ready());
        assert_eq!(second.start_problem().as_deref(), Some(text.as_str()), "the reason is kept for /health and /ready");

        log.end_foreign(0, false);
        second.rebuild().await.expect("the transaction ended: the rebuild goes on");
        assert_eq!(second.start_problem(), None);
        assert_eq!(second.publish(&c1, 2, 0, Color([3, 3, 3])).await.expect("v3").version, 3, "v2 was read, not handed out again");
    }

    /// A start reads the snapshot topic while its producers are initialised, before they fence
    /// the active publisher: what that one commits in between (events, snapshots and a checkpoint
    /// further on, a keyed event) is read from the log after the older checkpoint; no version is
    /// handed out twice and the key is answered, not applied again.
    #[tokio::test]
    async fn what_the_active_publisher_commits_between_the_snapshot_read_and_the_fence_is_read() {
        use crate::snapshots::SnapshotPolicy;
        use std::time::Duration;
        let log = Arc::new(FakeLog::new(2, |_| Fate::Commit));
        let timings = Timings { snapshots: SnapshotPolicy { every_versions: 2, every: Duration::from_secs(3600), ..SnapshotPolicy::default() }, ..Timings::default() };
        let active = Versions::shared(log.clone(), DIMS, 2, timings);
        active.rebuild().await.unwrap();
        let channels: Vec<ChannelId> = (0..4).map(|i| ChannelId::parse(&format!("c{i}")).unwrap()).collect();
        for c in &channels {
            for x in 0..3 {
                active.publish(c, x, 0, Color([1, 0, 0])).await.unwrap();
            }
        }

        let next = log.another_publisher();
        let gate = next.hold_prepare();
        let starting = Arc::new(Versions::shared(Arc::new(next), DIMS, 2, timings));
        let reads = log.snapshot_reads();
        let rebuild = tokio::spawn({
            let s = starting.clone();
            async move { s.rebuild().await }
        });
        while log.snapshot_reads() == reads {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let before: Vec<Vec<i64>> = (0..2).map(|p| log.checkpoints(p)).collect();
        for c in &channels {
            for x in 3..7 {
                active.publish(c, x, 1, Color([2, 0, 0])).await.unwrap();
            }
        }
        let (keyed, _) = active.publish_with_key(&channels[0], 7, 7, Color([7, 7, 7]), Some("between")).await.unwrap();
        let after: Vec<Vec<i64>> = (0..2).map(|p| log.checkpoints(p)).collect();
        assert_ne!(before, after, "the active publisher moved a checkpoint after the read");
        assert!(!starting.is_ready());

        gate.notify_one();
        rebuild.await.unwrap().expect("rebuilt");
        assert_eq!(active.publish(&channels[0], 0, 0, Color([9, 9, 9])).await, Err(crate::types::PublishError::Fenced));
        for c in &channels {
            let last = log.events_of(c.as_str()).last().copied().unwrap_or(0);
            assert_eq!(starting.publish(c, 0, 2, Color([3, 0, 0])).await.unwrap().version, last + 1, "{c}: versions continue");
        }
        let (again, replayed) = starting.publish_with_key(&channels[0], 7, 7, Color([7, 7, 7]), Some("between")).await.unwrap();
        assert_eq!((again.version, replayed), (keyed.version, true), "the key is known");
    }

    /// A transaction seen open once, then ended (its markers were being written), is not hanging;
    /// one open on both reads is, with the second read's offsets.
    #[test]
    fn only_a_partition_open_on_both_reads_is_hanging() {
        let open = |partition, stable, high| crate::log::OpenTxn { topic: "t".into(), partition, stable, high };
        assert_eq!(super::still_open(&[open(0, 5, 9)], &[]), vec![]);
        assert_eq!(super::still_open(&[open(0, 5, 9), open(2, 1, 3)], &[open(2, 1, 4), open(3, 0, 1)]), vec![open(2, 1, 4)]);
        assert_eq!(super::still_open(&[], &[open(1, 0, 1)]), vec![], "not open on the first read: not looked at twice");
    }
}
