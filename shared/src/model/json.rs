//! The `json` model: the state is a JSON document, and a publication changes part of it.
//!
//! A publication's data is an RFC 7386 JSON merge patch (`{"score":{"home":2}}` sets one field,
//! `{"note":null}` removes one), or, in a namespace configured with `patch = "json-patch"`, an
//! RFC 6902 JSON patch (a list of operations), applied by the `json-patch` crate. The document is
//! `{}` at version 0. Its snapshot is the document's JSON text (encoding `json`); its hash is the
//! SHA-256 of the document's canonical JSON. A publication after which the document would be
//! larger than `max_state_bytes` (its compact JSON text) is refused with nothing changed.

use super::{canonical_hash, parse, Data, Invalid, Model, ModelKind, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a publication patches the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PatchKind {
    /// RFC 7386 JSON merge patch.
    #[default]
    Merge,
    /// RFC 6902 JSON patch.
    JsonPatch,
}

/// The model.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json {
    pub patch: PatchKind,
}

/// A document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    patch: PatchKind,
    doc: Value,
}

impl Model for Json {
    fn kind(&self) -> ModelKind {
        ModelKind::Json
    }

    fn validate(&self, data: &Data) -> Result<(), Invalid> {
        match self.patch {
            PatchKind::Merge => Ok(()),
            PatchKind::JsonPatch => serde_json::from_str::<json_patch::Patch>(data.get())
                .map(|_| ())
                .map_err(|e| Invalid::Data(format!("not an RFC 6902 JSON patch: {e}"))),
        }
    }

    fn empty(&self) -> Box<dyn State> {
        Box::new(Document { patch: self.patch, doc: Value::Object(Default::default()) })
    }

    fn from_json(&self, state: &serde_json::Value) -> Result<Box<dyn State>, Invalid> {
        Ok(Box::new(Document { patch: self.patch, doc: state.clone() }))
    }

    fn decode(&self, encoding: &str, body: &[u8]) -> Result<Box<dyn State>, Invalid> {
        if encoding != "json" {
            return Err(Invalid::Snapshot(format!("encoding {encoding:?} is not json's (json)")));
        }
        let doc = serde_json::from_slice(body).map_err(|e| Invalid::Snapshot(e.to_string()))?;
        Ok(Box::new(Document { patch: self.patch, doc }))
    }
}

impl Document {
    /// The document after `data`, leaving this one as it is.
    fn patched(&self, data: &Data) -> Result<Value, Invalid> {
        let mut doc = self.doc.clone();
        patch(self.patch, &mut doc, data)?;
        Ok(doc)
    }
}

/// Applies `data` to `doc` as a patch of `kind`. A JSON patch that fails part way leaves `doc`
/// as it was (the crate undoes the operations it applied).
fn patch(kind: PatchKind, doc: &mut Value, data: &Data) -> Result<(), Invalid> {
    match kind {
        PatchKind::Merge => {
            json_patch::merge(doc, &parse(data)?);
            Ok(())
        }
        PatchKind::JsonPatch => {
            let ops: json_patch::Patch = serde_json::from_str(data.get()).map_err(|e| Invalid::Data(e.to_string()))?;
            json_patch::patch(doc, &ops).map_err(|e| Invalid::Data(e.to_string()))
        }
    }
}

/// Bytes of `v`'s compact JSON text.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    serde_json::to_writer(&mut n, v).expect("a JSON value serialises");
    n.0
}

impl State for Document {
    fn apply(&mut self, data: &Data) -> Result<(), Invalid> {
        patch(self.patch, &mut self.doc, data)
    }

    fn try_apply(&mut self, data: &Data, max_state_bytes: usize) -> Result<(), Invalid> {
        let next = self.patched(data)?;
        let size = json_len(&next);
        if size > max_state_bytes {
            return Err(Invalid::StateTooLarge { size, limit: max_state_bytes });
        }
        self.doc = next;
        Ok(())
    }

    fn encode(&self) -> (&'static str, Vec<u8>) {
        ("json", serde_json::to_vec(&self.doc).expect("a JSON value serialises"))
    }

    fn write_json(&self, out: &mut Vec<u8>) {
        serde_json::to_writer(out, &self.doc).expect("a JSON value serialises");
    }

    fn hash(&self) -> String {
        canonical_hash(&self.doc)
    }

    fn byte_len(&self) -> usize {
        json_len(&self.doc)
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
    use crate::model::data;

    fn merged(target: &str, patch: &str) -> String {
        let mut s = Json::default().decode("json", target.as_bytes()).unwrap();
        s.apply(&data(patch)).unwrap();
        s.to_json()
    }

    #[test]
    fn merge_patches_follow_rfc_7386_appendix_a() {
        // Every example of RFC 7386, Appendix A (target, patch, result).
        for (target, patch, result) in [
            (r#"{"a":"b"}"#, r#"{"a":"c"}"#, r#"{"a":"c"}"#),
            (r#"{"a":"b"}"#, r#"{"b":"c"}"#, r#"{"a":"b","b":"c"}"#),
            (r#"{"a":"b"}"#, r#"{"a":null}"#, r#"{}"#),
            (r#"{"a":"b","b":"c"}"#, r#"{"a":null}"#, r#"{"b":"c"}"#),
            (r#"{"a":["b"]}"#, r#"{"a":"c"}"#, r#"{"a":"c"}"#),
            (r#"{"a":"c"}"#, r#"{"a":["b"]}"#, r#"{"a":["b"]}"#),
            (r#"{"a":{"b":"c"}}"#, r#"{"a":{"b":"d","c":null}}"#, r#"{"a":{"b":"d"}}"#),
            (r#"{"a":[{"b":"c"}]}"#, r#"{"a":[1]}"#, r#"{"a":[1]}"#),
            (r#"["a","b"]"#, r#"["c","d"]"#, r#"["c","d"]"#),
            (r#"{"a":"b"}"#, r#"["c"]"#, r#"["c"]"#),
            (r#"{"a":"foo"}"#, "null", "null"),
            (r#"{"a":"foo"}"#, r#""bar""#, r#""bar""#),
            (r#"{"e":null}"#, r#"{"a":1}"#, r#"{"a":1,"e":null}"#),
            (r#"[1,2]"#, r#"{"a":"b","c":null}"#, r#"{"a":"b"}"#),
            (r#"{}"#, r#"{"a":{"bb":{"ccc":null}}}"#, r#"{"a":{"bb":{}}}"#),
        ] {
            assert_eq!(merged(target, patch), result, "{target} + {patch}");
        }
    }

    #[test]
    fn a_document_starts_empty_and_hashes_canonically() {
        let mut s = Json::default().empty();
        assert_eq!(s.to_json(), "{}");
        s.apply(&data(r#"{"home":{"score":2.0},"away":{"score":1}}"#)).unwrap();
        assert_eq!(s.hash(), crate::model::sha256_hex(br#"{"away":{"score":1},"home":{"score":2}}"#));
    }

    #[test]
    fn a_patch_past_the_state_limit_is_refused_and_changes_nothing() {
        let mut s = Json::default().empty();
        s.try_apply(&data(r#"{"a":"12345"}"#), 13).unwrap();
        assert_eq!(s.try_apply(&data(r#"{"b":1}"#), 13), Err(Invalid::StateTooLarge { size: 19, limit: 13 }));
        assert_eq!(s.to_json(), r#"{"a":"12345"}"#);
        s.try_apply(&data(r#"{"a":"1234567"}"#), 15).unwrap();
        assert_eq!(s.byte_len(), 15);
    }

    #[test]
    fn json_patch_namespaces_take_rfc_6902_operations() {
        let m = Json { patch: PatchKind::JsonPatch };
        let mut s = m.empty();
        let ops = r#"[{"op":"add","path":"/players","value":["ann"]},{"op":"add","path":"/players/-","value":"bob"}]"#;
        assert_eq!(m.validate(&data(ops)), Ok(()));
        s.try_apply(&data(ops), 1024).unwrap();
        assert_eq!(s.to_json(), r#"{"players":["ann","bob"]}"#);
        assert!(matches!(m.validate(&data(r#"{"a":1}"#)), Err(Invalid::Data(_))), "a merge patch is not a JSON patch");
        let failing = r#"[{"op":"add","path":"/x","value":1},{"op":"test","path":"/players/0","value":"zed"}]"#;
        assert!(matches!(s.try_apply(&data(failing), 1024), Err(Invalid::Data(_))));
        assert_eq!(s.to_json(), r#"{"players":["ann","bob"]}"#, "a failed patch changes nothing");
    }

    #[test]
    fn its_snapshot_is_the_document() {
        let mut s = Json::default().empty();
        s.apply(&data(r#"{"title":"Q3","rows":[1,2]}"#)).unwrap();
        let (enc, body) = s.encode();
        let back = Json::default().decode(enc, &body).unwrap();
        assert_eq!((back.to_json(), back.hash()), (s.to_json(), s.hash()));
        assert!(Json::default().decode("json", b"{").is_err());
        assert!(Json::default().decode("none", b"").is_err());
    }
}
