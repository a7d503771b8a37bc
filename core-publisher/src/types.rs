//! The publisher's answers and errors, shared by the version authority ([`crate::versions`]), the
//! per-partition committers ([`crate::lane`]) and the idempotency-key store ([`crate::idempotency`]).

use shared::model::Data;
use shared::{ChannelId, Color};

/// The answer to an accepted publish: `201 {"canvas","version","partition","offset"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Published {
    /// `canvas` on the wire: the pixel routes' answer (the channel routes answer `channel`).
    #[serde(rename = "canvas")]
    pub channel: ChannelId,
    pub version: u64,
    pub partition: i32,
    /// Offset of the record that carries the event (a record can carry several events).
    pub offset: i64,
}

/// A channel as the publisher knows it, in the pixel route's form (`GET /canvases/{id}`):
/// `{"canvas","version","hash"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CanvasTruth {
    pub canvas: ChannelId,
    pub version: u64,
    /// Hex SHA-256 of the canonical bytes.
    pub hash: String,
}

/// A channel as the publisher knows it: `GET /channels/{id}`'s answer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChannelTruth {
    pub channel: ChannelId,
    pub model: shared::model::ModelKind,
    pub version: u64,
    /// The epoch of its history ([`shared::epoch`]): a client holding `version` of this epoch
    /// holds this state.
    pub epoch: shared::epoch::Epoch,
    /// Its model's JSON form of the state.
    pub state: Box<Data>,
    /// [`shared::model::State::hash`].
    pub hash: String,
}

/// What an `Idempotency-Key` stands for: the request it was first used with (its channel, and its
/// data's canonical JSON: the same data however it was spaced or its keys ordered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub channel: ChannelId,
    pub data: String,
}

impl Fingerprint {
    /// The fingerprint of publishing `data` to `channel`.
    pub fn of(channel: &ChannelId, data: &Data) -> Self {
        let value: serde_json::Value = serde_json::from_str(data.get()).unwrap_or(serde_json::Value::Null);
        Self { channel: channel.clone(), data: serde_jcs::to_string(&value).expect("a JSON value has a canonical form") }
    }

    /// The fingerprint of painting `(x, y)` of `channel` in `color` (a `pixels` publication).
    pub fn of_paint(channel: &ChannelId, x: u32, y: u32, color: Color) -> Self {
        Self::of(channel, &shared::model::pixels::Paint { x, y, color }.to_data())
    }
}

/// A channel's reset or delete, committed: its op record, and the channel's epoch after it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChannelChanged {
    pub channel: ChannelId,
    /// The epoch its clients resume with now ([`shared::epoch`]).
    pub epoch: shared::epoch::Epoch,
    pub partition: i32,
    /// The op record's offset.
    pub offset: i64,
}

/// Why a publish was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The transactional producers are being initialised or the heads rebuilt from the log:
    /// nothing was applied; retry later.
    #[error("the publisher is rebuilding channel versions from the log")]
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
    /// The channel has no event yet and the publisher already holds `limit` channels
    /// (`MAX_CHANNELS`): nothing was written.
    #[error("the publisher holds {limit} channels, its limit (MAX_CHANNELS); this publish would create another")]
    ChannelLimit { limit: usize },
    /// The pixel is outside the canvas.
    #[error("{field} must be below {limit}")]
    OutOfBounds { field: &'static str, limit: u32 },
    /// The channel's namespace is not configured (`fleet.toml`).
    #[error("{0}")]
    UnknownNamespace(String),
    /// The data is not what the channel's model takes.
    #[error("{0}")]
    InvalidData(String),
    /// The data is larger than the namespace's `max_data_bytes`.
    #[error("the data is {size} bytes, more than this namespace's max_data_bytes ({limit})")]
    DataTooLarge { size: usize, limit: usize },
    /// A reset or delete of a channel with no publication (or deleted already).
    #[error("channel {0} has no publication")]
    UnknownChannel(String),
    /// The channel's state after it would be larger than the namespace's `max_state_bytes`.
    #[error("the state would be {size} bytes, more than this namespace's max_state_bytes ({limit})")]
    StateTooLarge { size: usize, limit: usize },
}

impl From<shared::model::Invalid> for PublishError {
    fn from(e: shared::model::Invalid) -> Self {
        use shared::model::Invalid;
        match e {
            Invalid::OutOfBounds { field, limit } => PublishError::OutOfBounds { field, limit },
            Invalid::StateTooLarge { size, limit } => PublishError::StateTooLarge { size, limit },
            Invalid::Data(m) | Invalid::Snapshot(m) => PublishError::InvalidData(m),
        }
    }
}
