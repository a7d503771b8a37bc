//! Models: what a channel's state is and how a publication changes it.
//!
//! A namespace ([`crate::namespaces`]) names one model for all its channels. The fleet keeps the
//! promise (every version once, in order) the same way for every model; the model only decides
//! what a publication's data may be, what the state after it is, how the state is written to the
//! snapshot topic, and how it is shown to a client (the `state` frame, `GET /channels/{id}`).
//!
//! - [`stream`]: no state but the version; any JSON data (chat, notifications, a feed);
//! - [`latest`]: the state is the last publication's data (a score, a price, a status);
//! - [`json`]: the state is a JSON document; a publication is an RFC 7386 merge patch (or, per
//!   namespace, an RFC 6902 patch) applied to it;
//! - [`pixels`]: a `width × height` RGB canvas; a publication paints one pixel.
//!
//! A [`Model`] holds a namespace's rules (its limits, a canvas's size); a [`State`] is one
//! channel's value under them. The holder of a state (the publisher, a node) keeps the version
//! beside it: the model never sees versions.
//!
//! A publication's data is JSON text ([`Data`], kept as the bytes the publisher was sent and
//! written into Kafka and frames as they are); the publisher checks it ([`Model::validate`]) and
//! applies it to its own copy of the state within the namespace's `max_state_bytes`
//! ([`State::try_apply`]) before giving it a version, so a node applies only data its model
//! accepts.

pub mod json;
pub mod latest;
pub mod pixels;
pub mod stream;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use std::fmt;

/// A publication's data: JSON text.
pub type Data = RawValue;

/// The kinds of model, as a namespace names them (`model = "json"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    Stream,
    Latest,
    Json,
    Pixels,
}

impl ModelKind {
    /// The name in configuration, frames and snapshot records.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Stream => "stream",
            ModelKind::Latest => "latest",
            ModelKind::Json => "json",
            ModelKind::Pixels => "pixels",
        }
    }

    /// Every kind, in the order of the docs.
    pub const ALL: [ModelKind; 4] = [ModelKind::Stream, ModelKind::Latest, ModelKind::Json, ModelKind::Pixels];
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a publication's data or a snapshot body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The data is not what the model takes (HTTP 400 `invalid_data`).
    #[error("{0}")]
    Data(String),
    /// A pixel outside the canvas (HTTP 400 `out_of_bounds`, naming the field).
    #[error("{field} must be below {limit}")]
    OutOfBounds { field: &'static str, limit: u32 },
    /// The state after it would be larger than the namespace allows (HTTP 413 `state_too_large`).
    #[error("the state would be {size} bytes, more than this namespace's max_state_bytes ({limit})")]
    StateTooLarge { size: usize, limit: usize },
    /// A snapshot body that does not decode under the model.
    #[error("snapshot: {0}")]
    Snapshot(String),
}

/// A namespace's model: its rules, and how its states are made.
pub trait Model: Send + Sync + fmt::Debug {
    /// Which model it is.
    fn kind(&self) -> ModelKind;

    /// Checks one publication's data against the model's rules (its size was checked before).
    ///
    /// # Errors
    /// [`Invalid::Data`] or [`Invalid::OutOfBounds`] naming what is wrong.
    fn validate(&self, data: &Data) -> Result<(), Invalid>;

    /// The state of a channel at version 0 (nothing published).
    fn empty(&self) -> Box<dyn State>;

    /// A state from a snapshot record's body written with `encoding` ([`State::encode`]).
    ///
    /// # Errors
    /// [`Invalid::Snapshot`] when the body or the encoding is not the model's.
    fn decode(&self, encoding: &str, body: &[u8]) -> Result<Box<dyn State>, Invalid>;

    /// A state from its JSON form ([`State::write_json`]: a `state` frame's `state`), as a
    /// client holds it.
    ///
    /// # Errors
    /// [`Invalid::Data`] when it is not the model's JSON form.
    fn from_json(&self, state: &serde_json::Value) -> Result<Box<dyn State>, Invalid>;
}

/// One channel's state under its model.
pub trait State: Send + Sync + fmt::Debug {
    /// Applies one publication's data, which the model validated. Data it cannot apply (a record
    /// of another model, written under another configuration) leaves the state as it is and says
    /// why; the version still moves on (the log is the truth).
    ///
    /// # Errors
    /// [`Invalid::Data`] for data the model does not take.
    fn apply(&mut self, data: &Data) -> Result<(), Invalid>;

    /// Applies `data` only if the state after it stays within `max_state_bytes` (the publisher's
    /// check before a version is given out); unchanged when refused.
    ///
    /// # Errors
    /// [`Invalid::StateTooLarge`], or [`State::apply`]'s error.
    fn try_apply(&mut self, data: &Data, max_state_bytes: usize) -> Result<(), Invalid>;

    /// The snapshot record's body and its encoding's name.
    fn encode(&self) -> (&'static str, Vec<u8>);

    /// Appends the state's JSON form: the `state` of a `state` frame and of `GET /channels/{id}`.
    fn write_json(&self, out: &mut Vec<u8>);

    /// Lowercase hex SHA-256 of the state's canonical form (see each model), which clients and
    /// checkers compare with `GET /channels/{id}`'s `hash`.
    fn hash(&self) -> String;

    /// Bytes it holds (memory accounting).
    fn byte_len(&self) -> usize;

    /// A copy.
    fn clone_box(&self) -> Box<dyn State>;

    /// The concrete state (the pixels model's canvas for today's `snapshot` frames).
    fn as_any(&self) -> &dyn std::any::Any;
}

impl Clone for Box<dyn State> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

impl dyn State {
    /// The JSON form as text.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out);
        String::from_utf8(out).expect("JSON is UTF-8")
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Lowercase hex SHA-256 of `value`'s canonical JSON (RFC 8785, JCS: keys sorted, numbers in
/// ECMAScript's form), which a browser computes as `JSON.stringify` with sorted keys.
pub fn canonical_hash(value: &serde_json::Value) -> String {
    sha256_hex(&serde_jcs::to_vec(value).expect("a JSON value has a canonical form"))
}

/// `data` parsed as a JSON value (it is JSON text: it came through a [`RawValue`]).
fn parse(data: &Data) -> Result<serde_json::Value, Invalid> {
    serde_json::from_str(data.get()).map_err(|e| Invalid::Data(e.to_string()))
}

#[cfg(test)]
pub(crate) fn data(text: &str) -> Box<Data> {
    RawValue::from_string(text.to_owned()).expect("test data is JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_models_state_round_trips_through_its_json_form() {
        let pixels = pixels::Pixels { dims: crate::canvas::CanvasDims { width: 2, height: 2 } };
        let table: [(&dyn Model, &str); 4] = [
            (&stream::Stream, r#""hi""#),
            (&latest::Latest, r#"{"b":2.5,"a":[1]}"#),
            (&json::Json::default(), r#"{"a":{"b":1}}"#),
            (&pixels, r##"{"x":1,"y":1,"color":"#102030"}"##),
        ];
        for (model, d) in table {
            let mut s = model.empty();
            s.apply(&data(d)).unwrap();
            let back = model.from_json(&serde_json::from_str(&s.to_json()).unwrap()).unwrap();
            assert_eq!(back.hash(), s.hash(), "{}", model.kind());
        }
        assert!(pixels.from_json(&serde_json::json!({"width": 3, "height": 2, "pixels": ""})).is_err());
    }

    #[test]
    fn kinds_are_spelled_as_in_configuration() {
        for k in ModelKind::ALL {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
        }
    }

    #[test]
    fn the_canonical_hash_sorts_keys_and_writes_numbers_as_ecmascript_does() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b":1.0,"a":[1e21,0.5,"x"]}"#).unwrap();
        assert_eq!(serde_jcs::to_string(&a).unwrap(), r#"{"a":[1e+21,0.5,"x"],"b":1}"#);
        assert_eq!(canonical_hash(&a), sha256_hex(br#"{"a":[1e+21,0.5,"x"],"b":1}"#));
    }
}
