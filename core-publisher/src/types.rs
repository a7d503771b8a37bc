//! The publisher's answers and errors, shared by the version authority ([`crate::versions`]), the
//! per-partition committers ([`crate::lane`]) and the idempotency-key store ([`crate::idempotency`]).

use shared::{ChannelId, Color};

/// The answer to an accepted publish: `201 {"canvas","version","partition","offset"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Published {
    pub canvas: ChannelId,
    pub version: u64,
    pub partition: i32,
    /// Offset of the record that carries the event (a record can carry several events).
    pub offset: i64,
}

/// A canvas as the publisher knows it: `{"canvas","version","hash"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CanvasTruth {
    pub canvas: ChannelId,
    pub version: u64,
    /// Hex SHA-256 of the canonical bytes.
    pub hash: String,
}

/// What an `Idempotency-Key` stands for: the request it was first used with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub canvas: ChannelId,
    pub x: u32,
    pub y: u32,
    pub color: Color,
}

/// Why a publish was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The transactional producers are being initialised or the heads rebuilt from the log:
    /// nothing was applied; retry later.
    #[error("the publisher is rebuilding canvas versions from the log")]
    NotReady,
    /// This publisher stands by (`--standby`) until the gateway leader promotes it: nothing was
    /// applied; send writes to the active publisher.
    #[error("this publisher is a standby: it accepts writes once promoted")]
    Standby,
    /// Another publisher process took over the topic's transactional id: this one accepts no
    /// more writes (nothing was applied; send it to the publisher that accepts writes).
    #[error("another publisher took over this topic's transactional id; this one accepts no writes")]
    Fenced,
    /// The transaction carrying the event certainly did not commit (it was aborted, or never
    /// began): nothing was applied and no version was used; retry.
    #[error("kafka did not write the event: {0}")]
    NotWritten(String),
    /// The commit was sent but its outcome is not known yet: the event may or may not be applied.
    /// The publisher keeps asking Kafka until it knows, and hands out no version of the partition
    /// meanwhile; a retry with the same `Idempotency-Key` applies it exactly once.
    #[error("kafka did not confirm the transaction in time: {0}")]
    Unknown(String),
    /// The `Idempotency-Key` was used before with another request.
    #[error("the Idempotency-Key was already used with a different request")]
    KeyConflict,
    /// The first request with this `Idempotency-Key` is still running (or its outcome is still
    /// being resolved).
    #[error("a request with this Idempotency-Key is still running")]
    KeyInFlight,
    /// A new `Idempotency-Key`, refused: the publisher holds `capacity` keys (`IDEMPOTENCY_KEYS_MAX`)
    /// all younger than the window (`IDEMPOTENCY_WINDOW_MS`), and forgetting one would let its
    /// retry be applied twice. Nothing was written; retry after `retry_after_secs`, when the
    /// oldest key leaves the window.
    #[error("the publisher holds {capacity} idempotency keys younger than its {window_secs} s window (IDEMPOTENCY_KEYS_MAX, \
             IDEMPOTENCY_WINDOW_MS): a new key is refused; retry in {retry_after_secs} s")]
    IdempotencyStoreFull { retry_after_secs: u64, capacity: usize, window_secs: u64 },
    /// The canvas has no event yet and the publisher already holds `limit` canvases
    /// (`MAX_CANVASES`): nothing was written.
    #[error("the publisher holds {limit} canvases, its limit (MAX_CANVASES); this publish would create another")]
    CanvasLimit { limit: usize },
    /// The pixel is outside the canvas.
    #[error("{field} must be below {limit}")]
    OutOfBounds { field: &'static str, limit: u32 },
}
