//! The `stream` model: no state but the version.
//!
//! Every publication's data is any JSON value and is delivered as it is; a channel's state is
//! nothing (`null` in frames), its snapshot body is empty (encoding `none`), so snapshot records
//! carry only the version and epoch and checkpoints keep moving. A client that resumes from beyond
//! a node's window of recent publications gets a `reset` (what it missed is the application's to
//! reload), never a silent gap.

use super::{sha256_hex, Data, Invalid, Model, ModelKind, State};

/// The model.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stream;

/// A stream's state: nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Nothing;

impl Model for Stream {
    fn kind(&self) -> ModelKind {
        ModelKind::Stream
    }

    fn validate(&self, _data: &Data) -> Result<(), Invalid> {
        Ok(())
    }

    fn empty(&self) -> Box<dyn State> {
        Box::new(Nothing)
    }

    fn from_json(&self, state: &serde_json::Value) -> Result<Box<dyn State>, Invalid> {
        match state {
            serde_json::Value::Null => Ok(Box::new(Nothing)),
            _ => Err(Invalid::Data("a stream's state is null".into())),
        }
    }

    fn decode(&self, encoding: &str, body: &[u8]) -> Result<Box<dyn State>, Invalid> {
        match (encoding, body) {
            ("none", []) => Ok(Box::new(Nothing)),
            ("none", _) => Err(Invalid::Snapshot("a stream's snapshot has no body".into())),
            (other, _) => Err(Invalid::Snapshot(format!("encoding {other:?} is not a stream's (none)"))),
        }
    }
}

impl State for Nothing {
    fn apply(&mut self, _data: &Data) -> Result<(), Invalid> {
        Ok(())
    }

    fn try_apply(&mut self, _data: &Data, _max_state_bytes: usize) -> Result<(), Invalid> {
        Ok(())
    }

    fn encode(&self) -> (&'static str, Vec<u8>) {
        ("none", Vec::new())
    }

    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"null");
    }

    /// SHA-256 of `null`.
    fn hash(&self) -> String {
        sha256_hex(b"null")
    }

    fn byte_len(&self) -> usize {
        0
    }

    fn clone_box(&self) -> Box<dyn State> {
        Box::new(*self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::data;

    #[test]
    fn a_stream_keeps_nothing_and_takes_any_json() {
        let mut s = Stream.empty();
        let before = s.hash();
        for d in ["1", "\"hi\"", r#"{"text":"hello","from":"ann"}"#, "[1,2]", "null"] {
            assert_eq!(Stream.validate(&data(d)), Ok(()), "{d}");
            assert_eq!(s.try_apply(&data(d), 0), Ok(()), "{d}: a stream's state never grows");
        }
        assert_eq!((s.hash(), s.to_json(), s.byte_len()), (before, "null".to_owned(), 0));
        assert_eq!(s.hash(), sha256_hex(b"null"));
    }

    #[test]
    fn its_snapshot_is_empty() {
        let (enc, body) = Stream.empty().encode();
        assert_eq!((enc, body.len()), ("none", 0));
        assert!(Stream.decode("none", &[]).is_ok());
        for (enc, body) in [("none", &b"x"[..]), ("json", &b"null"[..]), ("lz4", &[][..])] {
            assert!(matches!(Stream.decode(enc, body), Err(Invalid::Snapshot(_))), "{enc}");
        }
    }
}
