//! The records read from the input topics and not committed yet, per input partition, in offset
//! order, and the takes the committers make of them.
//!
//! The consumer thread ([`super::consumer`]) offers what it polls; a committer takes, for its
//! next transaction, the longest prefix of each input partition whose publications all land on
//! events-topic partitions it writes (the shared writer: every shared partition; an isolated
//! partition's writer: that partition), up to [`INPUT_ROOM`] records. An input partition is in at
//! most one transaction at a time (`in_flight`), so its records are versioned in its order, and a
//! transaction carries all of a taken prefix's outputs with the offset after it: the offset moves
//! exactly when the outputs commit. A skipped record goes with the prefix (its offset is committed,
//! it has no output).
//!
//! A transaction that did not commit gives its take back ([`InputQueue::requeue`]): the records
//! go back to the front, which is where a seek to the committed offset would read them from again
//! (the queue starts at the committed offset by construction). After a rebalance the records of
//! the old assignment are dropped, and the new one is read from the group's committed offsets.

use super::record::{parse, Parsed, Skip};
use super::stats::Stats;
use crate::log::{InputOffsets, Writer};
use crate::partition::{Mode, Partition, Pending, MAX_TXN_EVENTS};
use crate::types::Fingerprint;
use rdkafka::consumer::ConsumerGroupMetadata;
use shared::namespaces::Namespaces;
use shared::ChannelId;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Records of the input one transaction takes at most: half of what a transaction carries, so the
/// HTTP publishes always have the other half (and the input one take per transaction).
pub const INPUT_ROOM: usize = MAX_TXN_EVENTS / 2;

/// Records held at most (queued and in transactions) before the consumer pauses its partitions...
pub const MAX_HELD_RECORDS: usize = 20_000;
/// ...or bytes of their data; fetching resumes below half of both.
pub const MAX_HELD_BYTES: usize = 32 << 20;

/// How long a rebalance's revocation waits for the transactions carrying the revoked partitions'
/// records to end, so the records read under the old assignment commit (or not) before the new
/// one reads from the committed offsets.
pub const REVOKE_WAIT: Duration = Duration::from_secs(10);

/// The first wait before a take given back by a transaction that failed for no partition's sake
/// is taken again (doubling up to 5 s): a record that cannot be written is retried, not spun on.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// An input partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source {
    pub topic: Arc<str>,
    pub partition: i32,
}

/// One record as the consumer polled it.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Its key, or its channel header's value.
    pub channel: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// One record read and not committed yet.
#[derive(Debug, Clone)]
pub struct Entry {
    pub offset: i64,
    pub parsed: Parsed,
}

impl Entry {
    fn bytes(&self) -> usize {
        match &self.parsed {
            Parsed::Publish { data, .. } => data.get().len() + 64,
            Parsed::Skip(_) => 64,
        }
    }
}

/// Records a committer took for one transaction.
pub struct Take {
    /// The assignment the records were read under.
    pub assignment: u64,
    /// That assignment's consumer group metadata (none in unit tests).
    pub group: Option<Arc<ConsumerGroupMetadata>>,
    /// Each input partition's prefix, in offset order.
    pub parts: Vec<(Source, Vec<Entry>)>,
    /// The publications of this attempt, in input order: (events partition, channel, event).
    pub pendings: Vec<(i32, ChannelId, Pending)>,
    /// Records skipped in this attempt against the heads (state size, channel limit).
    pub refused: Vec<(Source, i64, Skip)>,
}

impl Take {
    /// The offsets this transaction commits: after the last record of each prefix.
    pub fn offsets(&self) -> InputOffsets {
        InputOffsets {
            offsets: self.parts.iter().filter_map(|(s, es)| Some((s.topic.to_string(), s.partition, es.last()?.offset + 1))).collect(),
            group: self.group.clone(),
            assignment: self.assignment,
        }
    }

    /// Records taken.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|(_, es)| es.len()).sum()
    }

    /// Whether it took nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Default)]
struct Part {
    entries: VecDeque<Entry>,
    /// In a transaction (its records are taken up to some offset).
    in_flight: bool,
    /// The offset after the last record a transaction committed, since this assignment.
    committed: Option<i64>,
    /// The next offset expected from the consumer (records below it were offered already).
    next: Option<i64>,
    /// Not taken before this (a failed transaction's retry).
    hold_until: Option<Instant>,
    backoff: Duration,
}

#[derive(Default)]
struct Inner {
    parts: BTreeMap<Source, Part>,
    /// Counts the assignments (rebalances) of this queue.
    assignment: u64,
    group: Option<Arc<ConsumerGroupMetadata>>,
    /// Records and bytes held (queued, and in transactions).
    held: usize,
    held_bytes: usize,
    /// Where the next take starts, so every input partition gets its turn.
    turn: usize,
    paused: bool,
    closed: bool,
}

/// The input's records between the consumer and the committers (see the module docs).
pub struct InputQueue {
    inner: Mutex<Inner>,
    /// Signalled when an input partition leaves a transaction (a revocation waits for it).
    left: Condvar,
    /// Bumped whenever a committer may find something new to take.
    changed: tokio::sync::watch::Sender<u64>,
    /// Each topic's namespace.
    topics: HashMap<String, String>,
    namespaces: Arc<Namespaces>,
    /// The events topic's partition count.
    partitions: u32,
    max_channels: usize,
    stats: Arc<Stats>,
}

impl InputQueue {
    /// A queue for `topics` (topic → namespace), publishing under `namespaces` to an events topic
    /// of `partitions` partitions, creating at most `max_channels` channels in all.
    pub fn new(topics: HashMap<String, String>, namespaces: Arc<Namespaces>, partitions: u32, max_channels: usize, stats: Arc<Stats>) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            left: Condvar::new(),
            changed: tokio::sync::watch::Sender::new(0),
            topics,
            namespaces,
            partitions,
            max_channels,
            stats,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("input queue lock is never poisoned: no panics while held")
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every change that may give a committer something to take.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The counters of the input (shared by every queue of this process).
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// A new assignment of `sources` (a rebalance ended), read under the group's `group`
    /// metadata: each starts empty, to be read from the group's committed offset.
    pub fn assigned(&self, sources: &[Source], group: Option<ConsumerGroupMetadata>) {
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        inner.assignment += 1;
        inner.group = group.map(Arc::new);
        let kept: HashSet<&Source> = sources.iter().collect();
        let gone: Vec<Source> = inner.parts.keys().filter(|s| !kept.contains(s)).cloned().collect();
        for s in gone {
            drop_part(&mut inner, &s);
        }
        for s in sources {
            drop_part(&mut inner, s);
            inner.parts.insert(s.clone(), Part { backoff: RETRY_FIRST, ..Part::default() });
        }
        tracing::info!(assignment = inner.assignment, partitions = %describe(sources),
            "input partitions assigned; reading them from the group's committed offsets");
        drop(inner);
        self.bump();
    }

    /// `sources` are revoked (a rebalance begins): waits up to [`REVOKE_WAIT`] for the
    /// transactions carrying their records to end, then drops what is queued of them.
    pub fn revoked(&self, sources: &[Source]) {
        let deadline = Instant::now() + REVOKE_WAIT;
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        loop {
            let busy = sources.iter().any(|s| inner.parts.get(s).is_some_and(|p| p.in_flight));
            let left = deadline.saturating_duration_since(Instant::now());
            if !busy || inner.closed || left.is_zero() {
                if busy && !inner.closed {
                    tracing::warn!(partitions = %describe(sources), waited_ms = REVOKE_WAIT.as_millis() as u64,
                        "input partitions revoked while a transaction still carries their records; that transaction commits under the old \
                         generation or not at all (the group refuses it), and the new assignment reads from the committed offsets");
                }
                break;
            }
            inner = self.left.wait_timeout(inner, left).expect("input queue lock").0;
        }
        for s in sources {
            drop_part(&mut inner, s);
        }
        inner.assignment += 1;
        tracing::info!(partitions = %describe(sources), "input partitions revoked (rebalance); their uncommitted records are dropped here");
    }

    /// Offers records the consumer polled, in poll order. Records of a partition not assigned, or
    /// below what was offered already, are dropped.
    pub fn offer(&self, records: Vec<Incoming>) {
        if records.is_empty() {
            return;
        }
        let parsed: Vec<(Source, Entry)> = records
            .into_iter()
            .map(|r| {
                let namespace = self.topics.get(&r.topic).map_or("", String::as_str);
                let parsed = parse(namespace, r.channel.as_deref(), r.value.as_deref(), &self.namespaces, self.partitions);
                (Source { topic: r.topic.into(), partition: r.partition }, Entry { offset: r.offset, parsed })
            })
            .collect();
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        for (s, e) in parsed {
            let bytes = e.bytes();
            let Some(part) = inner.parts.get_mut(&s) else { continue };
            if part.next.is_some_and(|n| e.offset < n) {
                continue;
            }
            part.next = Some(e.offset + 1);
            part.entries.push_back(e);
            inner.held += 1;
            inner.held_bytes += bytes;
        }
        drop(inner);
        self.bump();
    }

    /// Takes, for a transaction of a writer whose partitions `mine` names, the longest prefix of
    /// each input partition that is not in a transaction whose publications all go to those
    /// partitions, [`INPUT_ROOM`] records in all at most, and checks them against the heads of
    /// `partitions` (state size, channel limit). `None` when there is nothing to take.
    pub fn take(&self, mine: impl Fn(i32) -> bool, partitions: &[Arc<Partition>]) -> Option<Take> {
        let now = Instant::now();
        let (assignment, group, parts) = {
            let mut inner = self.lock();
            if inner.closed {
                return None;
            }
            let n = inner.parts.len();
            let start = inner.turn;
            inner.turn = inner.turn.wrapping_add(1);
            let keys: Vec<Source> = inner.parts.keys().cloned().collect();
            let mut room = INPUT_ROOM;
            let mut parts = Vec::new();
            for i in 0..n {
                let s = &keys[(start + i) % n];
                let part = inner.parts.get_mut(s).expect("a key of the map");
                if part.in_flight || part.hold_until.is_some_and(|t| t > now) || room == 0 {
                    continue;
                }
                let count = part.entries.iter().take(room).take_while(|e| match &e.parsed {
                    Parsed::Publish { partition, .. } => mine(*partition),
                    Parsed::Skip(_) => true,
                });
                let count = count.count();
                if count == 0 {
                    continue;
                }
                part.in_flight = true;
                part.hold_until = None;
                room -= count;
                parts.push((s.clone(), part.entries.drain(..count).collect::<Vec<Entry>>()));
            }
            if parts.is_empty() {
                return None;
            }
            (inner.assignment, inner.group.clone(), parts)
        };
        let mut take = Take { assignment, group, parts, pendings: Vec::new(), refused: Vec::new() };
        self.check(&mut take, partitions);
        Some(take)
    }

    /// [`InputQueue::take`] for a transaction of `writer`: the shared writer's takes go to shared
    /// partitions only, an isolated partition's writer's to that partition only.
    pub fn take_for(&self, writer: Writer, partitions: &[Arc<Partition>]) -> Option<Take> {
        match writer {
            Writer::Shared => self.take(|p| partitions.get(p as usize).is_some_and(|p| matches!(p.mode(), Mode::Shared)), partitions),
            Writer::Partition(id) => self.take(|p| p == id, partitions),
        }
    }

    /// Sorts the publications of `take` into those this attempt writes and those the heads refuse
    /// (the state after them past `max_state_bytes`, a new channel past the limit).
    fn check(&self, take: &mut Take, partitions: &[Arc<Partition>]) {
        let mut states: HashMap<ChannelId, Box<dyn shared::model::State>> = HashMap::new();
        let mut new_channels: HashSet<ChannelId> = HashSet::new();
        let mut count: Option<usize> = None;
        for (s, entries) in &take.parts {
            for e in entries {
                let Parsed::Publish { channel, partition, data } = &e.parsed else { continue };
                let Some(p) = partitions.get(*partition as usize) else { continue };
                let known = p.has(channel) || new_channels.contains(channel);
                if !known {
                    let n = *count.get_or_insert_with(|| partitions.iter().map(|p| p.channel_count()).sum());
                    if n + new_channels.len() >= self.max_channels {
                        take.refused.push((s.clone(), e.offset, Skip::ChannelLimit { limit: self.max_channels }));
                        continue;
                    }
                }
                if let Err(why) = self.fits(&mut states, p, channel, data) {
                    take.refused.push((s.clone(), e.offset, Skip::Refused(why.to_string())));
                    continue;
                }
                if !known {
                    new_channels.insert(channel.clone());
                }
                let pending = Pending { fp: Fingerprint { channel: channel.clone(), data: String::new() }, data: data.clone(), key: None };
                take.pendings.push((*partition, channel.clone(), pending));
            }
        }
    }

    /// Whether `data` keeps `channel`'s state within its namespace's `max_state_bytes`, after its
    /// committed head and the publications of this take before it (`states`).
    fn fits(&self, states: &mut HashMap<ChannelId, Box<dyn shared::model::State>>, p: &Partition, channel: &ChannelId, data: &shared::model::Data) -> Result<(), shared::model::Invalid> {
        let Ok(ns) = self.namespaces.of(channel) else { return Ok(()) };
        match ns.kind() {
            shared::model::ModelKind::Latest if data.get().len() > ns.max_state_bytes => {
                Err(shared::model::Invalid::StateTooLarge { size: data.get().len(), limit: ns.max_state_bytes })
            }
            shared::model::ModelKind::Json => {
                let state = states.entry(channel.clone()).or_insert_with(|| {
                    p.with_book(|b| b.heads.get(channel).map(|h| h.state.clone())).unwrap_or_else(|| ns.model.empty())
                });
                state.try_apply(data, ns.max_state_bytes)
            }
            _ => Ok(()),
        }
    }

    /// `take`'s transaction committed: its offsets are the group's now, its skipped records are
    /// counted (and logged, at most once a minute).
    pub fn committed(&self, take: Take) {
        {
            let mut inner = self.lock();
            let current = inner.assignment == take.assignment;
            for (s, entries) in &take.parts {
                let bytes: usize = entries.iter().map(Entry::bytes).sum();
                inner.held = inner.held.saturating_sub(entries.len());
                inner.held_bytes = inner.held_bytes.saturating_sub(bytes);
                // A take of an assignment since revoked leaves the new assignment's parts alone.
                if let Some(part) = inner.parts.get_mut(s).filter(|_| current) {
                    part.in_flight = false;
                    part.committed = entries.last().map(|e| e.offset + 1).or(part.committed);
                    part.backoff = RETRY_FIRST;
                }
            }
            self.left.notify_all();
        }
        // Its skipped records in offset order (those refused against the heads among them).
        let parsed = take.parts.iter().flat_map(|(s, es)| {
            es.iter().filter_map(move |e| if let Parsed::Skip(skip) = &e.parsed { Some((s, e.offset, skip)) } else { None })
        });
        let mut skips: Vec<(&Source, i64, &Skip)> = parsed.chain(take.refused.iter().map(|(s, o, skip)| (s, *o, skip))).collect();
        skips.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        self.stats.committed(take.pendings.len() as u64, skips.into_iter().map(|(s, o, skip)| (&*s.topic, s.partition, o, skip)));
        self.bump();
    }

    /// `take`'s transaction did not commit: its records go back to the front of their partitions
    /// (those of an assignment since revoked are dropped). `hold`: taken again only after a
    /// backoff (the failure was not a partition's stall).
    pub fn requeue(&self, take: Take, hold: bool) {
        {
            let mut inner = self.lock();
            let current = inner.assignment;
            let now = Instant::now();
            for (s, entries) in take.parts {
                let bytes: usize = entries.iter().map(Entry::bytes).sum();
                match inner.parts.get_mut(&s) {
                    Some(part) if take.assignment == current && part.in_flight => {
                        for e in entries.into_iter().rev() {
                            part.entries.push_front(e);
                        }
                        part.in_flight = false;
                        if hold {
                            part.hold_until = Some(now + part.backoff);
                            part.backoff = (part.backoff * 2).min(RETRY_MAX);
                        }
                    }
                    _ => {
                        inner.held = inner.held.saturating_sub(entries.len());
                        inner.held_bytes = inner.held_bytes.saturating_sub(bytes);
                    }
                }
            }
            self.left.notify_all();
        }
        self.bump();
    }

    /// Whether the consumer should stop fetching (pause its partitions).
    pub fn is_full(&self) -> bool {
        let inner = self.lock();
        inner.held >= MAX_HELD_RECORDS || inner.held_bytes >= MAX_HELD_BYTES
    }

    /// Whether a paused consumer may fetch again.
    pub fn has_room(&self) -> bool {
        let inner = self.lock();
        inner.held < MAX_HELD_RECORDS / 2 && inner.held_bytes < MAX_HELD_BYTES / 2
    }

    /// Notes whether the consumer's partitions are paused (for `/health`).
    pub fn set_paused(&self, paused: bool) {
        self.lock().paused = paused;
    }

    /// The assignment count (it moves on every rebalance).
    pub fn assignment(&self) -> u64 {
        self.lock().assignment
    }

    /// Stops the queue (the publisher started over, was fenced or stops): the consumer ends and
    /// nothing more is taken.
    pub fn close(&self) {
        {
            let mut inner = self.lock();
            inner.closed = true;
            inner.parts.clear();
            inner.held = 0;
            inner.held_bytes = 0;
            self.left.notify_all();
        }
        self.bump();
    }

    /// Whether [`InputQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// What `/health` shows of the queue: each assigned partition, and what is held.
    pub fn report(&self) -> serde_json::Value {
        let inner = self.lock();
        let partitions: Vec<serde_json::Value> = inner
            .parts
            .iter()
            .map(|(s, p)| {
                serde_json::json!({
                    "topic": &*s.topic,
                    "partition": s.partition,
                    "committed": p.committed,
                    "read_to": p.next,
                    "queued": p.entries.len(),
                    "in_transaction": p.in_flight,
                })
            })
            .collect();
        serde_json::json!({
            "assignment": inner.assignment,
            "partitions": partitions,
            "held_records": inner.held,
            "held_bytes": inner.held_bytes,
            "paused": inner.paused,
        })
    }
}

fn drop_part(inner: &mut Inner, s: &Source) {
    if let Some(part) = inner.parts.remove(s) {
        let bytes: usize = part.entries.iter().map(Entry::bytes).sum();
        inner.held = inner.held.saturating_sub(part.entries.len());
        inner.held_bytes = inner.held_bytes.saturating_sub(bytes);
    }
}

fn describe(sources: &[Source]) -> String {
    sources.iter().map(|s| format!("{}/{}", s.topic, s.partition)).collect::<Vec<_>>().join(",")
}
