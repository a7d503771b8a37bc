//! The heads: each channel's committed state and version, as the publisher keeps them, and what
//! is written from them (snapshots, key entries).
//!
//! A head's state is its namespace's model's ([`shared::model`]); a channel of a namespace the
//! publisher does not know (records of another configuration read back) is kept as a `stream`,
//! whose state is its version alone.

use shared::model::pixels::Raster;
use shared::model::{Model, ModelKind, State};
use shared::namespaces::Namespaces;
use shared::record::Publication;
use shared::snapshot::{ChannelSnapshot, Snapshot};
use shared::ChannelId;
use std::collections::HashMap;

/// One channel's committed state.
#[derive(Debug, Clone)]
pub struct Head {
    pub state: Box<dyn State>,
    pub version: u64,
    pub kind: ModelKind,
}

impl Head {
    /// A channel at version 0 under `model`.
    pub fn empty(model: &dyn Model) -> Self {
        Self { state: model.empty(), version: 0, kind: model.kind() }
    }

    /// The head of `channel` at version 0 under `namespaces`.
    pub fn of(namespaces: &Namespaces, channel: &ChannelId) -> Self {
        Self::empty(model_of(namespaces, channel))
    }

    /// Its hash ([`State::hash`]).
    pub fn hash(&self) -> String {
        self.state.hash()
    }

    /// The snapshot record's value of this head of `channel`: a canvas snapshot (format 1, which
    /// every reader reads) for `pixels`, a channel snapshot (format 3) for the other models.
    pub fn snapshot_value(&self, channel: &ChannelId, resets: u64, offset: i64) -> Vec<u8> {
        match self.state.as_any().downcast_ref::<Raster>() {
            Some(r) => Snapshot { canvas: channel.clone(), version: self.version, epoch: resets, dims: r.dims(), offset, pixels: r.bytes().to_vec() }.encode(),
            None => ChannelSnapshot::of(channel, self.kind, self.state.as_ref(), self.version, resets, offset).encode(),
        }
    }
}

/// The model of `channel`: its namespace's, or `stream` for a namespace not configured here.
pub fn model_of<'a>(namespaces: &'a Namespaces, channel: &ChannelId) -> &'a dyn Model {
    match namespaces.of(channel) {
        Ok(ns) => ns.model.as_ref(),
        Err(_) => &shared::model::stream::Stream,
    }
}

/// The head a canvas snapshot restores, under `namespaces`.
///
/// # Errors
/// A message naming the snapshot when its namespace is not `pixels` of its size.
pub fn from_canvas(namespaces: &Namespaces, s: &Snapshot) -> Result<Head, String> {
    match namespaces.of(&s.canvas) {
        Ok(ns) if ns.dims() == Some(s.dims) => {
            let state = Box::new(Raster::from_bytes(s.dims, s.pixels.clone()).expect("decode checked the pixel length"));
            Ok(Head { state, version: s.version, kind: ModelKind::Pixels })
        }
        Ok(ns) => Err(match ns.dims() {
            Some(d) => format!(
                "the snapshot of {} is {}x{}, not its namespace's canvas size {}x{} (CANVAS_WIDTH x CANVAS_HEIGHT, fleet.toml)",
                s.canvas, s.dims.width, s.dims.height, d.width, d.height
            ),
            None => format!("the snapshot of {} is a canvas, but its namespace's model is {}", s.canvas, ns.kind()),
        }),
        Err(_) => Ok(Head { state: shared::model::stream::Stream.empty(), version: s.version, kind: ModelKind::Stream }),
    }
}

/// The head a channel snapshot restores, under `namespaces`.
///
/// # Errors
/// A message naming the snapshot when it does not read under its namespace's model.
pub fn from_channel(namespaces: &Namespaces, s: &ChannelSnapshot) -> Result<Head, String> {
    let model = model_of(namespaces, &s.channel);
    let state = match namespaces.of(&s.channel) {
        Ok(_) => s.state(model).map_err(|e| format!("the snapshot of {}: {e}", s.channel))?,
        Err(_) => model.empty(),
    };
    Ok(Head { state, version: s.version, kind: model.kind() })
}

/// Applies one publication read from or written to the log (at `offset`) to its channel's head in
/// `heads` (a new one when it has none). Returns whether it was applied (not a version the head
/// has already).
///
/// Versions start over after a reset or a delete, so a record of an ended history is told apart
/// by its place in the log, not its version: every read of the publisher's is contiguous from a
/// checkpoint, so it meets the op record after the ended history's records and before the next
/// one's, and the op puts the head right ([`crate::partition::BookParts::apply_op`]).
pub fn apply(heads: &mut HashMap<ChannelId, Head>, namespaces: &Namespaces, p: &Publication, offset: i64) -> bool {
    let head = heads.entry(p.channel.clone()).or_insert_with(|| Head::of(namespaces, &p.channel));
    if p.version <= head.version {
        return false;
    }
    let expected = head.version + 1;
    if let Err(e) = head.state.apply(&p.data) {
        tracing::error!(channel = %p.channel, version = p.version, offset, error = %e, "a publication its channel's model cannot apply (records of another configuration)");
    }
    head.version = p.version;
    if p.version != expected {
        tracing::error!(channel = %p.channel, expected, got = p.version, offset, "the log skips versions of this channel");
    }
    true
}

/// The key entries of the keyed publications of one record at `offset`: (publication, its key).
pub fn key_entries<'a>(pubs: impl Iterator<Item = (&'a Publication, Option<&'a str>)>, offset: i64) -> Vec<shared::snapshot::KeyEntry> {
    pubs.filter_map(|(p, key)| {
        key.map(|k| {
            // A pixel is written as today's fields (so a publisher of today reads it); other data
            // as its JSON text.
            let (x, y, color, data) = match serde_json::from_str::<shared::model::pixels::Paint>(p.data.get()) {
                Ok(paint) => (paint.x, paint.y, paint.color.0, None),
                Err(_) => (0, 0, [0; 3], Some(p.data.get().to_owned())),
            };
            shared::snapshot::KeyEntry {
                key: k.to_owned(),
                canvas: p.channel.as_str().to_owned(),
                x,
                y,
                color,
                data,
                version: p.version,
                offset,
                at_ms: p.published_at_ms,
            }
        })
    })
    .collect()
}

/// The fingerprint a key entry stands for.
pub fn fingerprint_of(channel: &ChannelId, e: &shared::snapshot::KeyEntry) -> crate::types::Fingerprint {
    match &e.data {
        Some(text) => match serde_json::value::RawValue::from_string(text.clone()) {
            Ok(data) => crate::types::Fingerprint::of(channel, &data),
            Err(_) => crate::types::Fingerprint { channel: channel.clone(), data: text.clone() },
        },
        None => crate::types::Fingerprint::of_paint(channel, e.x, e.y, shared::Color(e.color)),
    }
}
