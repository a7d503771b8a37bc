//! The `latest` model: the state is the last publication's data.
//!
//! For values where only the newest matters (a score, a price, a status): a client that joins or
//! resumes from beyond the window gets the current value as a `state`, then every publication.
//! The state is `null` at version 0; its snapshot is the data's JSON text (encoding `json`); its
//! hash is the SHA-256 of the data's canonical JSON.

use super::{canonical_hash, Data, Invalid, Model, ModelKind, State};

/// The model.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latest;

/// The last data published (`null` before any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// JSON text.
    text: String,
}

impl Value {
    fn null() -> Self {
        Self { text: "null".into() }
    }
}

impl Model for Latest {
    fn kind(&self) -> ModelKind {
        ModelKind::Latest
    }

    fn validate(&self, _data: &Data) -> Result<(), Invalid> {
        Ok(())
    }

    fn empty(&self) -> Box<dyn State> {
        Box::new(Value::null())
    }

    fn from_json(&self, state: &serde_json::Value) -> Result<Box<dyn State>, Invalid> {
        Ok(Box::new(Value { text: state.to_string() }))
    }

    fn decode(&self, encoding: &str, body: &[u8]) -> Result<Box<dyn State>, Invalid> {
        if encoding != "json" {
            return Err(Invalid::Snapshot(format!("encoding {encoding:?} is not latest's (json)")));
        }
        let text = std::str::from_utf8(body).map_err(|e| Invalid::Snapshot(e.to_string()))?;
        serde_json::from_str::<&serde_json::value::RawValue>(text).map_err(|e| Invalid::Snapshot(e.to_string()))?;
        Ok(Box::new(Value { text: text.to_owned() }))
    }
}

impl State for Value {
    fn apply(&mut self, data: &Data) -> Result<(), Invalid> {
        data.get().clone_into(&mut self.text);
        Ok(())
    }

    fn try_apply(&mut self, data: &Data, max_state_bytes: usize) -> Result<(), Invalid> {
        if data.get().len() > max_state_bytes {
            return Err(Invalid::StateTooLarge { size: data.get().len(), limit: max_state_bytes });
        }
        self.apply(data)
    }

    fn encode(&self) -> (&'static str, Vec<u8>) {
        ("json", self.text.as_bytes().to_vec())
    }

    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.text.as_bytes());
    }

    fn hash(&self) -> String {
        canonical_hash(&serde_json::from_str(&self.text).expect("held text is JSON"))
    }

    fn byte_len(&self) -> usize {
        self.text.len()
    }

    fn clone_box(&self) -> Box<dyn State> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{data, sha256_hex};

    #[test]
    fn the_state_is_the_last_data() {
        let mut s = Latest.empty();
        assert_eq!((s.to_json(), s.hash()), ("null".to_owned(), sha256_hex(b"null")));
        for (d, want) in [
            (r#"{"home":1,"away":0}"#, r#"{"home":1,"away":0}"#),
            ("42.5", "42.5"),
            (r#"{"away":2, "home":1}"#, r#"{"away":2, "home":1}"#),
            ("null", "null"),
        ] {
            s.apply(&data(d)).unwrap();
            assert_eq!(s.to_json(), want);
        }
        s.apply(&data(r#"{"b":2.0,"a":1}"#)).unwrap();
        assert_eq!(s.hash(), sha256_hex(br#"{"a":1,"b":2}"#), "canonical: keys sorted, 2.0 written 2");
    }

    #[test]
    fn data_larger_than_the_state_limit_is_refused_and_changes_nothing() {
        let mut s = Latest.empty();
        s.try_apply(&data("[1,2,3]"), 7).unwrap();
        assert_eq!(s.try_apply(&data("[1,2,3,4]"), 7), Err(Invalid::StateTooLarge { size: 9, limit: 7 }));
        assert_eq!(s.to_json(), "[1,2,3]");
    }

    #[test]
    fn its_snapshot_is_the_json_text() {
        let mut s = Latest.empty();
        s.apply(&data(r#"{"price":101.25}"#)).unwrap();
        let (enc, body) = s.encode();
        let back = Latest.decode(enc, &body).unwrap();
        assert_eq!((back.to_json(), back.hash()), (s.to_json(), s.hash()));
        assert!(Latest.decode("json", b"{not json").is_err());
        assert!(Latest.decode("lz4", b"1").is_err());
    }
}
