//! Namespaces: which model and limits a channel has, from the part of its id before the `:`.
//!
//! Every binary reads the same `fleet.toml` (`--config`, env `FLEET_CONFIG`), because the publisher, the
//! nodes and the gateway must agree on them:
//!
//! ```toml
//! [default]                 # channels without a prefix
//! model = "pixels"
//! width = 64
//! height = 64
//!
//! [namespaces.scores]
//! model = "json"            # "stream", "latest", "json" or "pixels"
//! patch = "merge"           # json only: "merge" (RFC 7386, the default) or "json-patch" (RFC 6902)
//! max_data_bytes = 65536    # a publication's data, at most 1 MiB (default 64 KiB)
//! max_state_bytes = 1048576 # latest and json: the state, at most 3 MiB (default 1 MiB)
//! ```
//!
//! Without a file the default namespace is `pixels` of the size the binary is configured with
//! (`CANVAS_WIDTH`, `CANVAS_HEIGHT`) and there is no other: the fleet of before namespaces.
//!
//! The [`Namespaces::fingerprint`] covers what decides how a record is read (each namespace's
//! model, patch kind and canvas size), not the limits: the publisher writes it into every record,
//! and a node that reads another one says so instead of quietly misreading records.

use crate::canvas::CanvasDims;
use crate::channel::ChannelId;
use crate::model::json::{Json, PatchKind};
use crate::model::latest::Latest;
use crate::model::pixels::Pixels;
use crate::model::stream::Stream;
use crate::model::{Model, ModelKind};
use crate::snapshot::MAX_SIDE;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Default of `max_data_bytes`: 64 KiB.
pub const DEFAULT_MAX_DATA_BYTES: usize = 64 * 1024;
/// Largest `max_data_bytes`: 1 MiB.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;
/// Default of `max_state_bytes`: 1 MiB.
pub const DEFAULT_MAX_STATE_BYTES: usize = 1024 * 1024;
/// Largest `max_state_bytes`: 3 MiB, so a snapshot record stays within the snapshot topic's
/// `max.message.bytes` ([`crate::snapshot::MAX_RECORD_BYTES`]).
pub const MAX_STATE_BYTES: usize = 3 * 1024 * 1024;

/// One namespace as the file writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {
    pub model: ModelKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<PatchKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_data_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_state_bytes: Option<usize>,
}

/// The namespaces part of `fleet.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespacesSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<NamespaceSpec>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub namespaces: BTreeMap<String, NamespaceSpec>,
}

/// A namespace, resolved: its model and limits.
#[derive(Debug, Clone)]
pub struct Namespace {
    /// Its name (`None`: the default namespace).
    pub name: Option<String>,
    pub model: Arc<dyn Model>,
    pub max_data_bytes: usize,
    pub max_state_bytes: usize,
    /// What it resolved to, every field set (for `--check-config` and the fingerprint).
    pub resolved: NamespaceSpec,
}

impl Namespace {
    /// Its model's kind.
    pub fn kind(&self) -> ModelKind {
        self.model.kind()
    }

    /// The canvas size of a `pixels` namespace.
    pub fn dims(&self) -> Option<CanvasDims> {
        match (self.resolved.width, self.resolved.height) {
            (Some(width), Some(height)) if self.kind() == ModelKind::Pixels => Some(CanvasDims { width, height }),
            _ => None,
        }
    }
}

/// A channel whose namespace is not configured (HTTP 400 `unknown_namespace`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("namespace {0:?} is not configured (fleet.toml's [namespaces.{0}])")]
pub struct UnknownNamespace(pub String);

/// A namespace setting that is not allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{namespace}: {problem}")]
pub struct SpecError {
    /// `default` or `namespaces.<name>`.
    pub namespace: String,
    pub problem: String,
}

/// Every namespace of the fleet.
#[derive(Debug, Clone)]
pub struct Namespaces {
    default: Namespace,
    named: BTreeMap<String, Namespace>,
    fingerprint: String,
}

impl Namespaces {
    /// The fleet without a file: the default namespace is `pixels` of `dims`, no other.
    pub fn pixels_only(dims: CanvasDims) -> Self {
        Self::resolve(&NamespacesSpec::default(), dims).expect("a pixels default namespace is valid")
    }

    /// Resolves `spec`; `dims` is the canvas size of a `pixels` namespace that sets none (and of
    /// the default namespace when the file has no `[default]`).
    ///
    /// # Errors
    /// Every problem found, each naming its namespace.
    pub fn resolve(spec: &NamespacesSpec, dims: CanvasDims) -> Result<Self, Vec<SpecError>> {
        let mut problems = Vec::new();
        let pixels = NamespaceSpec { model: ModelKind::Pixels, width: None, height: None, patch: None, max_data_bytes: None, max_state_bytes: None };
        let default = one(None, spec.default.as_ref().unwrap_or(&pixels), dims, &mut problems);
        let mut named = BTreeMap::new();
        for (name, ns) in &spec.namespaces {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                problems.push(SpecError { namespace: format!("namespaces.{name}"), problem: "a namespace name is one or more of A-Z a-z 0-9 - _".into() });
                continue;
            }
            if let Some(n) = one(Some(name), ns, dims, &mut problems) {
                named.insert(name.clone(), n);
            }
        }
        match default {
            Some(default) if problems.is_empty() => {
                let fingerprint = fingerprint(&default, &named);
                Ok(Self { default, named, fingerprint })
            }
            _ => Err(problems),
        }
    }

    /// Resolves the namespaces of a TOML text (the `[default]` and `[namespaces.*]` tables).
    ///
    /// # Errors
    /// The parse error, or every problem found, as one message.
    pub fn from_toml(text: &str, dims: CanvasDims) -> Result<Self, String> {
        let spec: NamespacesSpec = toml::from_str(text).map_err(|e| e.to_string())?;
        Self::resolve(&spec, dims).map_err(|es| es.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
    }

    /// The namespace of `channel`.
    ///
    /// # Errors
    /// [`UnknownNamespace`] when its prefix names none.
    pub fn of(&self, channel: &ChannelId) -> Result<&Namespace, UnknownNamespace> {
        match channel.namespace() {
            None => Ok(&self.default),
            Some(ns) => self.named.get(ns).ok_or_else(|| UnknownNamespace(ns.to_owned())),
        }
    }

    /// The default namespace.
    pub fn default_namespace(&self) -> &Namespace {
        &self.default
    }

    /// The named namespaces, by name.
    pub fn named(&self) -> impl Iterator<Item = &Namespace> {
        self.named.values()
    }

    /// Sixteen hex digits naming what decides how records are read (see the module doc).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The resolved namespaces, every field set, in the file's shape.
    pub fn to_spec(&self) -> NamespacesSpec {
        NamespacesSpec {
            default: Some(self.default.resolved.clone()),
            namespaces: self.named.iter().map(|(k, v)| (k.clone(), v.resolved.clone())).collect(),
        }
    }
}

impl From<CanvasDims> for Namespaces {
    /// [`Namespaces::pixels_only`].
    fn from(dims: CanvasDims) -> Self {
        Namespaces::pixels_only(dims)
    }
}

/// Resolves one namespace, adding its problems to `problems`.
fn one(name: Option<&str>, spec: &NamespaceSpec, dims: CanvasDims, problems: &mut Vec<SpecError>) -> Option<Namespace> {
    let label = name.map_or_else(|| "default".to_owned(), |n| format!("namespaces.{n}"));
    let before = problems.len();
    let mut problem = |p: String| problems.push(SpecError { namespace: label.clone(), problem: p });
    let max_data_bytes = spec.max_data_bytes.unwrap_or(DEFAULT_MAX_DATA_BYTES);
    if !(1..=MAX_DATA_BYTES).contains(&max_data_bytes) {
        problem(format!("max_data_bytes {max_data_bytes} is outside 1..={MAX_DATA_BYTES}"));
    }
    let max_state_bytes = spec.max_state_bytes.unwrap_or(DEFAULT_MAX_STATE_BYTES);
    if !(1..=MAX_STATE_BYTES).contains(&max_state_bytes) {
        problem(format!("max_state_bytes {max_state_bytes} is outside 1..={MAX_STATE_BYTES}"));
    }
    if spec.patch.is_some() && spec.model != ModelKind::Json {
        problem(format!("patch is a json namespace's setting, not {}'s", spec.model));
    }
    if (spec.width.is_some() || spec.height.is_some()) && spec.model != ModelKind::Pixels {
        problem(format!("width and height are a pixels namespace's settings, not {}'s", spec.model));
    }
    let mut resolved = NamespaceSpec { max_data_bytes: Some(max_data_bytes), max_state_bytes: Some(max_state_bytes), ..spec.clone() };
    let model: Arc<dyn Model> = match spec.model {
        ModelKind::Stream => Arc::new(Stream),
        ModelKind::Latest => Arc::new(Latest),
        ModelKind::Json => {
            let patch = spec.patch.unwrap_or_default();
            resolved.patch = Some(patch);
            Arc::new(Json { patch })
        }
        ModelKind::Pixels => {
            let d = CanvasDims { width: spec.width.unwrap_or(dims.width), height: spec.height.unwrap_or(dims.height) };
            if !(1..=MAX_SIDE).contains(&d.width) || !(1..=MAX_SIDE).contains(&d.height) {
                problem(format!("canvas size {}x{} is outside 1..={MAX_SIDE}", d.width, d.height));
            }
            (resolved.width, resolved.height) = (Some(d.width), Some(d.height));
            Arc::new(Pixels { dims: d })
        }
    };
    (problems.len() == before).then(|| Namespace { name: name.map(str::to_owned), model, max_data_bytes, max_state_bytes, resolved })
}

/// The fingerprint of `default` and `named` (see [`Namespaces::fingerprint`]).
fn fingerprint(default: &Namespace, named: &BTreeMap<String, Namespace>) -> String {
    let reading = |n: &Namespace| NamespaceSpec { max_data_bytes: None, max_state_bytes: None, ..n.resolved.clone() };
    let spec = NamespacesSpec { default: Some(reading(default)), namespaces: named.iter().map(|(k, v)| (k.clone(), reading(v))).collect() };
    let text = serde_jcs::to_vec(&spec).expect("a namespace spec serialises");
    crate::model::sha256_hex(&text)[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: CanvasDims = CanvasDims { width: 64, height: 64 };

    fn from_toml(text: &str) -> Result<Namespaces, Vec<SpecError>> {
        Namespaces::resolve(&toml::from_str(text).expect("test TOML parses"), DIMS)
    }

    fn id(raw: &str) -> ChannelId {
        ChannelId::parse(raw).unwrap()
    }

    #[test]
    fn channels_find_their_namespace_by_prefix() {
        let ns = from_toml(
            r#"
            [default]
            model = "pixels"
            width = 8
            height = 4
            [namespaces.scores]
            model = "json"
            [namespaces.chat]
            model = "stream"
            max_data_bytes = 1024
            "#,
        )
        .unwrap();
        assert_eq!(ns.of(&id("c1")).unwrap().dims(), Some(CanvasDims { width: 8, height: 4 }));
        assert_eq!(ns.of(&id("scores:final")).unwrap().kind(), ModelKind::Json);
        let chat = ns.of(&id("chat:lobby")).unwrap();
        assert_eq!((chat.kind(), chat.max_data_bytes, chat.max_state_bytes), (ModelKind::Stream, 1024, DEFAULT_MAX_STATE_BYTES));
        assert_eq!(ns.of(&id("prices:eur")).unwrap_err(), UnknownNamespace("prices".into()));
    }

    #[test]
    fn without_a_file_the_default_namespace_is_pixels_of_the_configured_size() {
        let ns = Namespaces::pixels_only(CanvasDims { width: 16, height: 9 });
        assert_eq!(ns.of(&id("c1")).unwrap().dims(), Some(CanvasDims { width: 16, height: 9 }));
        assert!(ns.of(&id("a:b")).is_err());
        assert_eq!(ns.fingerprint(), from_toml("[default]\nmodel = \"pixels\"\nwidth = 16\nheight = 9").unwrap().fingerprint());
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let errs = from_toml(
            r#"
            [default]
            model = "stream"
            width = 3
            [namespaces.big]
            model = "latest"
            max_data_bytes = 2000000
            max_state_bytes = 0
            [namespaces.canvas]
            model = "pixels"
            width = 2000
            [namespaces.doc]
            model = "latest"
            patch = "merge"
            "#,
        )
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(errs.len(), 5, "{text:#?}");
        for want in ["default: width and height", "namespaces.big: max_data_bytes 2000000", "namespaces.big: max_state_bytes 0", "namespaces.canvas: canvas size 2000x64", "namespaces.doc: patch"] {
            assert!(text.iter().any(|t| t.starts_with(want)), "{want} in {text:#?}");
        }
        assert!(toml::from_str::<NamespacesSpec>("[namespaces.x]\nmodel = \"blob\"").is_err(), "an unknown model");
        assert!(toml::from_str::<NamespacesSpec>("[namespaces.x]\nmodel = \"json\"\nmax_bytes = 1").is_err(), "an unknown setting");
    }

    #[test]
    fn the_fingerprint_follows_how_records_are_read_not_the_limits() {
        let base = from_toml("[namespaces.s]\nmodel = \"json\"").unwrap();
        let same = from_toml("[namespaces.s]\nmodel = \"json\"\npatch = \"merge\"\nmax_data_bytes = 10\n[default]\nmodel = \"pixels\"").unwrap();
        assert_eq!(base.fingerprint(), same.fingerprint());
        assert_eq!(base.fingerprint().len(), 16);
        for other in [
            "[namespaces.s]\nmodel = \"json\"\npatch = \"json-patch\"",
            "[namespaces.s]\nmodel = \"latest\"",
            "[namespaces.t]\nmodel = \"json\"",
            "[namespaces.s]\nmodel = \"json\"\n[default]\nmodel = \"pixels\"\nwidth = 65",
        ] {
            assert_ne!(from_toml(other).unwrap().fingerprint(), base.fingerprint(), "{other}");
        }
    }
}
