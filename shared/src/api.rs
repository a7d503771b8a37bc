//! JSON bodies between the gateway and the nodes (and for operators reading them).

use crate::protocol::DrainReason;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A node's own view of its lifecycle, as reported by `GET /health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeState {
    /// The process answers but is not serving (it has not caught up, or a full drain ended).
    Up,
    /// Caught up, in the broadcast group, accepting sessions.
    Healthy,
    /// Handing its sessions over: new handshakes get 503.
    Draining,
    /// Caught up and in the broadcast group, but not making progress it can vouch for: its
    /// broadcast consumer stopped returning from polls, an owned partition's position stands
    /// while records wait, or the process was frozen and the group has not confirmed its
    /// assignment since ([`Progress::degraded`] says which). Not accepting sessions.
    Degraded,
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeState::Up => "UP",
            NodeState::Healthy => "HEALTHY",
            NodeState::Draining => "DRAINING",
            NodeState::Degraded => "DEGRADED",
        })
    }
}

/// Progress of the catch-up replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchupStatus {
    /// No start-recovery received yet (or since the last full drain).
    Idle,
    /// Replaying: positions are moving towards the targets.
    Running,
    /// Every partition's position reached its target.
    Completed,
    /// The replay failed (the node stays not ready; a new start-recovery retries).
    Failed,
}

/// The `catchup` object of `/health`. Offsets are keyed by partition number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatchupReport {
    pub status: CatchupStatus,
    /// Each partition's readable end when recovery started: its last stable offset (the high
    /// watermark when no transaction is open), the offset the replay must reach.
    pub target_offsets: BTreeMap<i32, i64>,
    /// Offset of the last record consumed per partition (absent: none consumed in this replay).
    pub last_consumed_offsets: BTreeMap<i32, i64>,
    /// The catch-up consumer's position per partition (the next offset it reads; past the
    /// transaction markers it read, so it can be above last consumed + 1). A partition is caught
    /// up when its position reaches its target.
    #[serde(default)]
    pub positions: BTreeMap<i32, i64>,
    /// Records replayed (applied or dropped as duplicates) in this replay.
    pub replay_count: u64,
    /// Channels whose state came from their snapshot in this recovery (the replay then started at
    /// each partition's checkpoint): `channels_from_snapshots` (and, deprecated, its name before
    /// channels, `canvases_from_snapshots`).
    #[serde(flatten)]
    pub restored: Restored,
    /// How long the replay took, ms, once `status` is `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
    /// Catch-ups this process completed, this one included (a node drained and recovered again
    /// counts each).
    #[serde(default)]
    pub completed: u64,
    /// Why the last replay failed, when `status` is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Body of a node's `GET /health` (always 200 while the process answers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHealth {
    pub node_id: String,
    pub state: NodeState,
    /// Always true in an answer (a node that does not answer is DOWN in the gateway's view).
    pub up: bool,
    /// Accepting sessions: caught up, broadcast consumer running and not stalled, not draining.
    pub ready: bool,
    pub draining: bool,
    /// Partitions the broadcast consumer currently owns (sorted).
    pub assigned_partitions: Vec<i32>,
    /// Partitions of the topic (what the node's partitioner divides by).
    pub partition_count: u32,
    /// Open WebSocket sessions.
    pub sessions: usize,
    /// The node's session capacity (`MAX_SESSIONS`); 0 from a node that does not report one.
    #[serde(default)]
    pub max_sessions: usize,
    /// Seats taken: open sessions plus handshakes in progress, at most `max_sessions`. A node
    /// with `session_seats == max_sessions` refuses handshakes with 503 `full`.
    #[serde(default)]
    pub session_seats: usize,
    pub catchup: CatchupReport,
    /// Partitions this node does not own but keeps current (warm standby), sorted.
    #[serde(default)]
    pub standby_partitions: Vec<i32>,
    /// Every partition the node knows: what it does with it, and how far behind its end it is.
    #[serde(default)]
    pub partitions: Vec<PartitionHealth>,
    /// Times a reader's position was found below its partition's log start (records deleted by
    /// retention) and the partition was restored from the snapshots.
    #[serde(default)]
    pub log_start_recoveries: u64,
    /// Times a reader found a position past its partition's readable end (the log moved
    /// backwards: the topic recreated, or truncated by an unclean leader election) and rebuilt
    /// the partition as a new history.
    #[serde(default)]
    pub log_moved_back: u64,
    /// Times the events topic's ID changed under the serving node, which then left service,
    /// forgot the old history and caught up on the new topic.
    #[serde(default)]
    pub history_changes: u64,
    /// The per-channel figures, each also under its name before channels (deprecated).
    #[serde(flatten)]
    pub per_channel: PerChannel,
    /// Bytes of the recent-events windows' frames over every channel (`RECENT_BYTES` bounds each).
    #[serde(default)]
    pub recent_window_bytes: usize,
    /// Application progress: whether the broadcast consumer polls, whether owned partitions move,
    /// and whether the node's view of its assignment is current.
    #[serde(default)]
    pub progress: Progress,
    /// The fingerprint of the node's namespaces ([`crate::namespaces::Namespaces::fingerprint`]):
    /// every binary of a fleet shows the same. Empty from a node that does not report one.
    #[serde(default)]
    pub namespaces_fingerprint: String,
    /// Another fingerprint read in the records' `fleet-namespaces` header (the publisher runs with
    /// other namespaces: their data may be misread), the last one read; absent when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces_mismatch: Option<String>,
}

crate::renamed::renamed_fields! {
    /// The per-channel figures of a node's `/health`, written under their names and their names
    /// before channels (deprecated; [`crate::renamed`]), read under either.
    pub struct PerChannel {
        /// Channels with state (a publication or a snapshot) on this node (was `canvases`).
        pub channels / canvases: usize,
        /// Channels whose versions skipped as they were applied: their records were deleted with no
        /// snapshot covering them, so they may miss old publications (sorted, at most 100 named;
        /// was `incomplete_canvases`)...
        pub incomplete_channels / incomplete_canvases: Vec<String>,
        /// ...and how many there are in all (was `incomplete_canvas_count`).
        pub incomplete_channel_count / incomplete_canvas_count: usize,
        /// Incomplete channels healed from a newer snapshot while the node served (was
        /// `healed_canvases`).
        pub healed_channels / healed_canvases: u64,
    }
}

crate::renamed::renamed_fields! {
    /// What a catch-up restored from the snapshots, under the new name and the name before
    /// channels (deprecated).
    pub struct Restored {
        /// Channels whose state came from their snapshot (was `canvases_from_snapshots`).
        pub channels_from_snapshots / canvases_from_snapshots: u64,
    }
}

/// Application progress in a node's `/health` (what tells a node that answers from one that
/// serves). The default (a body from a node that does not report it) is a node that makes
/// progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Time since the broadcast consumer last returned from a poll, ms (absent while it does not
    /// run). librdkafka heartbeats from its own thread, so a stuck poll keeps the partitions until
    /// `max.poll.interval.ms`: this is what shows it.
    pub since_poll_ms: Option<u64>,
    /// When the broadcast consumer's assignment last changed (a rebalance callback), Unix epoch ms.
    pub assignment_at_ms: Option<u64>,
    /// The last time the process was seen frozen (SIGSTOP, a long pause): its own clock ticks stopped.
    pub paused: Option<Pause>,
    /// Whether the node's ownership is current: false from the first answer after a freeze until
    /// the group confirmed the assignment (a rebalance callback, or the heartbeats of a pause
    /// shorter than the session timeout). Stale ownership is not reported as current.
    pub ownership_confirmed: bool,
    /// Owned partitions whose position has not moved for `STALL_AFTER_MS` while records wait.
    pub stalled_partitions: Vec<i32>,
    /// Why the node is DEGRADED (absent when it is not).
    pub degraded: Option<String>,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            since_poll_ms: None,
            assignment_at_ms: None,
            paused: None,
            ownership_confirmed: true,
            stalled_partitions: Vec::new(),
            degraded: None,
        }
    }
}

/// A freeze of the node's process, as its own clock saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// When the node noticed it (the first tick after it), Unix epoch ms.
    pub at_ms: u64,
    /// How long the process did not run, ms.
    pub for_ms: u64,
}

/// What a node does with a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionRole {
    /// Assigned to this node by the broadcast group: its events are fanned out here.
    Owned,
    /// Moved to another node; this node still serves its sessions from the log until the new
    /// owner serves them.
    Held,
    /// Kept current by the standby reader, not served.
    Standby,
    /// Not read (standby off, or the node is not serving): its state is as old as its position.
    NotRead,
}

/// One partition in a node's `/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionHealth {
    pub partition: i32,
    pub role: PartitionRole,
    /// The offset after the last record the node's state applied (or after the transaction
    /// markers that end the partition, once a reader has gone through them).
    pub position: i64,
    /// The partition's readable end (under read_committed its last stable offset, which is the
    /// high watermark when no transaction is open), as last read (about once a second); absent
    /// until read.
    pub end: Option<i64>,
    /// `end − position` (0 when the position is at or past the end read last).
    pub lag: Option<i64>,
    /// Time since the position last moved (or the partition was assigned), ms.
    #[serde(default)]
    pub since_moved_ms: u64,
    /// Open sessions of this partition's channels on this node (owned or held), through every
    /// gateway replica: what a failback moves when it drains the partition here. 0 from a node
    /// that does not report it.
    #[serde(default)]
    pub sessions: usize,
}

/// Body of `POST /admin/drain` on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    pub reason: DrainReason,
    /// Grace period before the remaining sessions are force-closed (ms). Default 3000.
    #[serde(default = "default_grace_ms")]
    pub grace_ms: u64,
    /// Drain only the sessions of these partitions' channels, of those the node holds (a
    /// failback's drain of a stand-in). Absent: drain the whole node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<i32>>,
}

/// Default drain grace period, ms (the brief: 3 s).
pub const DEFAULT_GRACE_MS: u64 = 3000;
/// Longest grace period a drain accepts, ms.
pub const MAX_GRACE_MS: u64 = 60_000;

fn default_grace_ms() -> u64 {
    DEFAULT_GRACE_MS
}

/// Body of `POST /admin/hold` on a node: keep holding these partitions (moved away by a
/// rebalance, their sessions still served here from the log) for `for_ms` from now, instead of
/// handing their sessions over when `REVOKE_HOLD_MS` runs out. The gateway sends it while a
/// failback waits for room on the recovered node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldRequest {
    pub partitions: Vec<i32>,
    /// How long from now, ms (1 to [`MAX_HOLD_EXTENSION_MS`]); a later call replaces an earlier
    /// deadline only when it is later.
    pub for_ms: u64,
}

/// Longest extension one `POST /admin/hold` grants, ms: a gateway that stops asking (it died, or
/// gave up) lets the hold run out within this.
pub const MAX_HOLD_EXTENSION_MS: u64 = 60_000;

/// Answer of `POST /admin/hold`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldReport {
    /// The requested partitions this node holds, now kept until `until_ms` at least; the others
    /// are not held here (never were, drained already, or the hold ran out).
    pub held: Vec<i32>,
    /// Unix epoch ms until which they are kept.
    pub until_ms: u64,
}

/// Answer of `POST /admin/drain`, sent when the drain is over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainReport {
    pub reason: DrainReason,
    /// `None`: the whole node was drained.
    pub partitions: Option<Vec<i32>>,
    /// Sessions that got the reconnect notice.
    pub notified_sessions: usize,
    /// Sessions still open after the grace period, closed with 1012.
    pub force_closed_sessions: usize,
    /// Time from start to end of the drain, ms.
    pub duration_ms: u64,
    /// Partitions the request named that this node does not hold, so it handed none of their
    /// sessions over: those it owns (their sessions would reconnect to it) and those it does not
    /// serve. Empty for a drain of the whole node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_partitions: Vec<i32>,
}

/// Answer of `POST /admin/start-recovery`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryAck {
    /// `started`, `already_running` or `already_ready`.
    pub outcome: String,
    pub catchup: CatchupReport,
}

/// The stable error body of every 4xx/5xx the fleet's HTTP APIs answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable code, e.g. `invalid_field`, `not_ready`.
    pub error: String,
    /// What was wrong, for a human.
    pub message: String,
    /// The offending field, when one input field was at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_request_defaults_and_rejects_unknown_fields() {
        let r: DrainRequest = serde_json::from_str(r#"{"reason":"MAINTENANCE"}"#).unwrap();
        assert_eq!(r.grace_ms, 3000);
        assert_eq!(r.partitions, None);
        assert!(serde_json::from_str::<DrainRequest>(r#"{"reason":"MAINTENANCE","x":1}"#).is_err());
        assert!(serde_json::from_str::<DrainRequest>(r#"{"reason":"nope"}"#).is_err());
    }

    #[test]
    fn health_round_trip_uses_documented_names() {
        let h = NodeHealth {
            node_id: "ws-1".into(),
            state: NodeState::Healthy,
            up: true,
            ready: true,
            draining: false,
            assigned_partitions: vec![0, 2],
            partition_count: 6,
            sessions: 3,
            max_sessions: 50,
            session_seats: 4,
            catchup: CatchupReport {
                status: CatchupStatus::Completed,
                target_offsets: BTreeMap::from([(0, 3)]),
                last_consumed_offsets: BTreeMap::from([(0, 2)]),
                positions: BTreeMap::from([(0, 3)]),
                replay_count: 3,
                restored: Restored { channels_from_snapshots: 1 },
                took_ms: Some(12),
                completed: 1,
                error: None,
            },
            standby_partitions: vec![1, 3],
            partitions: vec![PartitionHealth { partition: 0, role: PartitionRole::Owned, position: 3, end: Some(5), lag: Some(2), since_moved_ms: 40, sessions: 2 }],
            log_start_recoveries: 1,
            log_moved_back: 0,
            history_changes: 0,
            per_channel: PerChannel { channels: 4, incomplete_channels: vec!["c7".into()], incomplete_channel_count: 1, healed_channels: 2 },
            recent_window_bytes: 520,
            progress: Progress {
                since_poll_ms: Some(20),
                assignment_at_ms: Some(1_700_000_000_000),
                paused: Some(Pause { at_ms: 1_700_000_001_000, for_ms: 4_000 }),
                ownership_confirmed: true,
                stalled_partitions: vec![],
                degraded: None,
            },
            namespaces_fingerprint: "0123456789abcdef".into(),
            namespaces_mismatch: None,
        };
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json["namespaces_fingerprint"], "0123456789abcdef");
        assert_eq!(json["state"], "HEALTHY");
        assert_eq!(json["progress"]["since_poll_ms"], 20);
        assert_eq!(json["progress"]["paused"]["for_ms"], 4000);
        assert_eq!(json["partitions"][0]["since_moved_ms"], 40);
        assert_eq!(json["catchup"]["status"], "completed");
        assert_eq!(json["catchup"]["target_offsets"]["0"], 3);
        assert_eq!(json["partitions"][0]["role"], "owned");
        assert_eq!(json["partitions"][0]["lag"], 2);
        assert_eq!(json["partitions"][0]["sessions"], 2);
        assert_eq!((json["max_sessions"].as_u64(), json["session_seats"].as_u64()), (Some(50), Some(4)));
        assert_eq!(serde_json::from_value::<NodeHealth>(json).unwrap(), h);
    }

    /// A `/health` body as a node answers it: every channel figure under its new name and its
    /// name before channels, with the same value.
    #[test]
    fn health_carries_the_channel_names_and_the_old_ones() {
        let per_channel = PerChannel { channels: 4, incomplete_channels: vec!["c7".into(), "c9".into()], incomplete_channel_count: 2, healed_channels: 3 };
        let json = serde_json::to_value(&per_channel).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "channels": 4, "canvases": 4,
                "incomplete_channels": ["c7", "c9"], "incomplete_canvases": ["c7", "c9"],
                "incomplete_channel_count": 2, "incomplete_canvas_count": 2,
                "healed_channels": 3, "healed_canvases": 3,
            })
        );
        assert_eq!(PerChannel::NAMES.len(), 4);
        for (new, old) in PerChannel::NAMES {
            assert_eq!(json[new], json[old], "{new} and {old}");
        }
        let restored = serde_json::to_value(Restored { channels_from_snapshots: 5 }).unwrap();
        assert_eq!(restored, serde_json::json!({"channels_from_snapshots": 5, "canvases_from_snapshots": 5}));
    }

    /// An older node (before channels) answers only the old names; a newer one, the new names
    /// (once the old ones are removed); today's, both: each reads the same.
    #[test]
    fn health_is_read_under_the_new_names_or_the_old_ones() {
        let old = serde_json::json!({"canvases": 4, "incomplete_canvases": ["c7"], "incomplete_canvas_count": 1, "healed_canvases": 2});
        let new = serde_json::json!({"channels": 4, "incomplete_channels": ["c7"], "incomplete_channel_count": 1, "healed_channels": 2});
        let want = PerChannel { channels: 4, incomplete_channels: vec!["c7".into()], incomplete_channel_count: 1, healed_channels: 2 };
        assert_eq!(serde_json::from_value::<PerChannel>(old).unwrap(), want);
        assert_eq!(serde_json::from_value::<PerChannel>(new).unwrap(), want);
        assert_eq!(serde_json::from_value::<PerChannel>(serde_json::to_value(&want).unwrap()).unwrap(), want);
        // Where both names came with different values, the new name wins.
        assert_eq!(serde_json::from_value::<PerChannel>(serde_json::json!({"channels": 5, "canvases": 4})).unwrap().channels, 5);
        // Neither: the default, as before the fields existed.
        assert_eq!(serde_json::from_value::<PerChannel>(serde_json::json!({})).unwrap(), PerChannel::default());
        let restored: Restored = serde_json::from_value(serde_json::json!({"canvases_from_snapshots": 3})).unwrap();
        assert_eq!(restored.channels_from_snapshots, 3);
    }

    /// A whole `/health` of an older node, with only the old names, reads as the gateway needs.
    #[test]
    fn an_older_nodes_health_is_read() {
        let body = serde_json::json!({
            "node_id": "ws-1", "state": "HEALTHY", "up": true, "ready": true, "draining": false,
            "assigned_partitions": [0], "partition_count": 2, "sessions": 1,
            "catchup": {"status": "completed", "target_offsets": {"0": 3}, "last_consumed_offsets": {"0": 2},
                        "replay_count": 3, "canvases_from_snapshots": 2},
            "healed_canvases": 1, "incomplete_canvases": ["c7"], "incomplete_canvas_count": 1, "canvases": 9,
        });
        let h: NodeHealth = serde_json::from_value(body).unwrap();
        assert_eq!(h.per_channel, PerChannel { channels: 9, incomplete_channels: vec!["c7".into()], incomplete_channel_count: 1, healed_channels: 1 });
        assert_eq!(h.catchup.restored.channels_from_snapshots, 2);
        assert_eq!((h.catchup.replay_count, &h.assigned_partitions[..]), (3, &[0][..]));
        let again = serde_json::to_value(&h).unwrap();
        assert_eq!((again["channels"].as_u64(), again["canvases"].as_u64()), (Some(9), Some(9)));
        assert_eq!((again["catchup"]["channels_from_snapshots"].as_u64(), again["catchup"]["canvases_from_snapshots"].as_u64()), (Some(2), Some(2)));
    }
}
