//! Channel ids: `name` or `namespace:name`.
//!
//! A channel is one versioned stream of publications (a canvas, a scoreboard, a chat room). Its id
//! is the Kafka record key of its publications, so it also picks its partition. The part before the
//! `:` names its namespace ([`crate::namespaces`]), which names its model and its limits; an id
//! without one is in the default namespace.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest channel id, in bytes (namespace, `:` and name together).
pub const CHANNEL_ID_MAX_LEN: usize = 128;

/// Why a channel id was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelIdError {
    #[error("channel id is empty")]
    Empty,
    #[error("channel id is longer than {CHANNEL_ID_MAX_LEN} bytes")]
    TooLong,
    #[error("channel id may only contain A-Z, a-z, 0-9, '-' and '_', and one ':' between a namespace and a name")]
    BadChar,
}

/// Whether `b` may appear in a namespace or a name.
fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// A validated channel id: 1 to [`CHANNEL_ID_MAX_LEN`] bytes, `name` or `namespace:name`, each
/// part one or more of `[A-Za-z0-9_-]`.
///
/// The same rule is applied by the publisher (HTTP path), the nodes and the gateway (`/ws` query),
/// so an id that reaches Kafka is always one a client can subscribe to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ChannelId(String);

impl ChannelId {
    /// Validates `raw`.
    ///
    /// # Errors
    /// [`ChannelIdError`] naming the rule that failed.
    pub fn parse(raw: &str) -> Result<Self, ChannelIdError> {
        if raw.is_empty() {
            return Err(ChannelIdError::Empty);
        }
        if raw.len() > CHANNEL_ID_MAX_LEN {
            return Err(ChannelIdError::TooLong);
        }
        let mut parts = raw.split(':');
        let ok = match (parts.next(), parts.next(), parts.next()) {
            (Some(name), None, _) => name.bytes().all(is_id_byte),
            (Some(ns), Some(name), None) => !ns.is_empty() && !name.is_empty() && ns.bytes().chain(name.bytes()).all(is_id_byte),
            _ => false,
        };
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(ChannelIdError::BadChar)
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its namespace: the part before the `:`, `None` for the default namespace.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once(':').map(|(ns, _)| ns)
    }

    /// Its name within the namespace.
    pub fn name(&self) -> &str {
        self.0.split_once(':').map_or(&self.0, |(_, name)| name)
    }
}

impl<'de> Deserialize<'de> for ChannelId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = std::borrow::Cow::<str>::deserialize(d)?;
        ChannelId::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for ChannelId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_id_rules() {
        for (raw, want) in [
            ("c1", Ok((None, "c1"))),
            ("A-b_9", Ok((None, "A-b_9"))),
            ("scores:match-1", Ok((Some("scores"), "match-1"))),
            ("", Err(ChannelIdError::Empty)),
            ("c 1", Err(ChannelIdError::BadChar)),
            ("c/1", Err(ChannelIdError::BadChar)),
            ("é", Err(ChannelIdError::BadChar)),
            (":name", Err(ChannelIdError::BadChar)),
            ("ns:", Err(ChannelIdError::BadChar)),
            (":", Err(ChannelIdError::BadChar)),
            ("a:b:c", Err(ChannelIdError::BadChar)),
            ("a::b", Err(ChannelIdError::BadChar)),
        ] {
            let got = ChannelId::parse(raw);
            assert_eq!(got.as_ref().map(|id| (id.namespace(), id.name())), want.as_ref().map(|(ns, n)| (*ns, *n)), "{raw:?}");
        }
        assert!(ChannelId::parse(&"a".repeat(128)).is_ok());
        assert_eq!(ChannelId::parse(&"a".repeat(129)), Err(ChannelIdError::TooLong));
        assert!(ChannelId::parse(&format!("ns:{}", "a".repeat(125))).is_ok());
    }

    #[test]
    fn the_json_form_is_the_text_and_checks_the_rule() {
        let id = ChannelId::parse("chat:lobby").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""chat:lobby""#);
        assert_eq!(serde_json::from_str::<ChannelId>(r#""chat:lobby""#).unwrap(), id);
        assert!(serde_json::from_str::<ChannelId>(r#""chat:""#).is_err());
    }
}
