//! A canvas stream's epoch: which history its versions belong to.
//!
//! Versions alone do not name a position in a canvas's stream: when the events topic is deleted
//! and created again (or, one day, a canvas is reset), versions start over, and a client holding
//! version 40 of the old history must not be sent version 41 of the new one on top of it. As in
//! Centrifugo's stream position (offset + epoch), a resume is therefore `since` plus an epoch:
//!
//! ```text
//! <topic id>-<resets>        e.g. "q5XGvJ9mR2yqH7Y1cjTQfA-0"
//! ```
//!
//! - `topic id`: the events topic's Kafka topic ID (KIP-516; what `kafka-topics.sh --describe`
//!   prints), which Kafka gives a topic when it is created and never reuses, read with
//!   [`crate::topic_id`]. A broker without topic IDs (before Kafka 2.8) reports the zero ID
//!   [`ZERO_TOPIC_ID`]: the epoch then still carries the reset counter, but a recreated topic is
//!   not detected.
//! - `resets`: the canvas's reset counter, carried in its snapshots ([`crate::snapshot::Snapshot`]'s
//!   `epoch`). No operation resets a canvas yet, so it is 0; a canvas restored from a snapshot takes
//!   the snapshot's.
//!
//! The `welcome` frame names the current epoch; a client sends it back as `epoch=` with `since=`
//! when it reconnects. Clients treat it as opaque: the only question is whether it is the current
//! one ([`resume_after`]). Any other epoch (another topic, another reset, a format this node does not
//! know) is *not* the current one, and the client gets a snapshot; a client that sends none (an
//! older client, a first connect) is served by `since` alone, as before epochs existed.

use serde::{Deserialize, Serialize};

/// The topic ID a broker without topic IDs reports (Kafka's `Uuid.ZERO_UUID`, as text).
pub const ZERO_TOPIC_ID: &str = "AAAAAAAAAAAAAAAAAAAAAA";

/// Longest epoch accepted in a query.
pub const MAX_LEN: usize = 100;

/// An epoch as it travels (in `welcome` and in the `/ws` query): 1–[`MAX_LEN`] characters of
/// `A-Z a-z 0-9 - _` (base64url and digits, so it needs no escaping in a URL).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Epoch(String);

/// Why a string is not an epoch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an epoch is 1-{MAX_LEN} characters of A-Z a-z 0-9 - _")]
pub struct EpochError;

impl Epoch {
    /// The epoch of a canvas of the events topic whose topic ID is `topic_id` (see
    /// [`crate::topic_id::encode`]) that was reset `resets` times.
    pub fn of(topic_id: &str, resets: u64) -> Self {
        Self(format!("{topic_id}-{resets}"))
    }

    /// Validates `raw`.
    ///
    /// # Errors
    /// [`EpochError`] when it is empty, longer than [`MAX_LEN`], or has other characters.
    pub fn parse(raw: &str) -> Result<Self, EpochError> {
        let ok = !raw.is_empty() && raw.len() <= MAX_LEN && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(EpochError)
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Epoch {
    type Error = EpochError;
    fn try_from(s: String) -> Result<Self, EpochError> {
        Self::parse(&s)
    }
}

impl From<Epoch> for String {
    fn from(e: Epoch) -> String {
        e.0
    }
}

/// The version a resuming client's backlog starts after: `since` when it sent no epoch or the
/// current one; 0 (nothing: it gets a snapshot, and is never "ahead" of the node) when its epoch
/// is another one, whatever its `since`. Pure.
pub fn resume_after(since: u64, client: Option<&Epoch>, current: &Epoch) -> u64 {
    match client {
        Some(e) if e != current => 0,
        _ => since,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_is_the_topic_id_and_the_reset_count() {
        assert_eq!(Epoch::of("q5XGvJ9mR2yqH7Y1cjTQfA", 0).as_str(), "q5XGvJ9mR2yqH7Y1cjTQfA-0");
        assert_eq!(Epoch::of(ZERO_TOPIC_ID, 3).to_string(), "AAAAAAAAAAAAAAAAAAAAAA-3");
        // A topic ID may itself hold '-' and '_' (base64url): still one valid epoch.
        assert!(Epoch::parse(Epoch::of("a-_b", 12).as_str()).is_ok());
    }

    #[test]
    fn only_url_safe_epochs_of_bounded_length_are_accepted() {
        for bad in ["", "a b", "a+b", "a/b", "é", &"x".repeat(MAX_LEN + 1)] {
            assert_eq!(Epoch::parse(bad), Err(EpochError), "{bad:?}");
        }
        assert!(Epoch::parse(&"x".repeat(MAX_LEN)).is_ok());
        assert!(serde_json::from_str::<Epoch>(r#""a b""#).is_err());
        assert_eq!(serde_json::to_string(&Epoch::of("t", 1)).unwrap(), r#""t-1""#);
    }

    #[test]
    fn resume_table() {
        let now = Epoch::of("new", 0);
        let old_topic = Epoch::of("old", 0);
        let reset = Epoch::of("new", 1);
        // (since, client's epoch, expected start)
        let cases: [(u64, Option<&Epoch>, u64); 6] = [
            (40, None, 40),             // an old client or a first connect: as before epochs
            (40, Some(&now), 40),       // the same history: resume by events
            (0, Some(&now), 0),
            (40, Some(&old_topic), 0),  // the topic was recreated: a snapshot
            (40, Some(&reset), 0),      // another reset count: a snapshot
            (0, Some(&old_topic), 0),
        ];
        for (since, client, want) in cases {
            assert_eq!(resume_after(since, client, &now), want, "since={since} client={client:?}");
        }
    }
}
