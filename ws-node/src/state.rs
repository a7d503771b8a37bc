//! One channel's state on a node: its model's state, and its recent publications as ready-to-send
//! frames.
//!
//! The recent publications let a resuming client (`since = n`) get publications `n+1..` instead of
//! the whole state, for as long as they are held (the last `capacity` versions). The state also
//! keeps the channel's reset counter, its part of the stream's epoch ([`shared::epoch`]).
//!
//! Frames come in two styles ([`FrameStyle`]): a session opened with `channel=` gets `state`,
//! `publication` and `reset` frames; one opened with today's `canvas=` (a `pixels` channel) gets
//! today's `snapshot` and `event` frames. Publications are held in the first style; a resume in
//! the second converts the few it needs.

use tungstenite::Utf8Bytes;
use shared::model::pixels::{Paint, Raster};
use shared::model::{Model, ModelKind, State};
use shared::protocol::{FrameStyle, ServerMessage};
use shared::record::Publication;
use shared::PixelEvent;
use std::collections::VecDeque;

/// A serialised server message, shared by every session it is sent to (cloning is a reference
/// count): the WebSocket frames that carry its JSON text, encoded once (server frames are
/// unmasked, so the bytes are the same for every client; long texts as 2 KiB fragments). Only the
/// wire form is kept: an event held in a channel's recent window costs its frame's bytes once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    wire: bytes::Bytes,
}

impl Frame {
    /// The message's JSON text, put together from the frame's fragments (for tests and logs).
    pub fn text(&self) -> String {
        let mut text = Vec::with_capacity(self.wire.len());
        let mut at = 0;
        while at + 2 <= self.wire.len() {
            let (len, header) = match self.wire[at + 1] & 0x7f {
                126 => (u16::from_be_bytes([self.wire[at + 2], self.wire[at + 3]]) as usize, 4),
                127 => (u64::from_be_bytes(self.wire[at + 2..at + 10].try_into().expect("8 bytes")) as usize, 10),
                n => (n as usize, 2),
            };
            text.extend_from_slice(&self.wire[at + header..at + header + len]);
            at += header + len;
        }
        String::from_utf8(text).expect("a text frame's payload is UTF-8")
    }

    /// The bytes to write to a client's socket.
    pub fn wire(&self) -> &bytes::Bytes {
        &self.wire
    }

    /// How many bytes it holds.
    pub fn byte_len(&self) -> usize {
        self.wire.len()
    }
}

impl From<Utf8Bytes> for Frame {
    fn from(text: Utf8Bytes) -> Self {
        Self { wire: shared::ws::encode_text(text.as_bytes()) }
    }
}

impl From<String> for Frame {
    fn from(text: String) -> Self {
        Self { wire: shared::ws::encode_text(text.as_bytes()) }
    }
}

/// How much of a channel's recent publications a node keeps, so resumes are served as
/// publications: at most `events` of them and `bytes` bytes of their frames (the newest is always
/// kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub events: usize,
    pub bytes: usize,
}

/// What a new session gets before live publications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backlog {
    /// The publications after `since`, oldest first (empty when the client is current).
    Events(Vec<Frame>),
    /// The state at the channel's current version (`since = 0`, or the publications are no longer
    /// held): a `state` frame, or a `snapshot` frame in today's style.
    Snapshot { frame: Frame, version: u64 },
    /// A `stream` channel's client that resumes from before the window: a `reset` to the current
    /// version (what it missed is not coming).
    Reset { frame: Frame, version: u64 },
    /// The client is ahead of this node's state (`since > version`): not yet servable.
    Behind { have: u64 },
}

/// A channel's state and its recent publication frames.
#[derive(Debug)]
pub struct ChannelState {
    state: Box<dyn State>,
    kind: ModelKind,
    version: u64,
    /// (version, frame), contiguous, newest last; within `window`.
    recent: VecDeque<(u64, Frame)>,
    /// Bytes of the frames in `recent`.
    recent_bytes: usize,
    window: Window,
    id: String,
    /// The channel's reset counter (from its snapshot or a reset; 0 for a channel built from
    /// publications only).
    resets: u64,
    /// The events-topic offset below which the channel's records are reflected in the state (a
    /// snapshot's offset, or past a reset): a record there is never applied again, which keeps a
    /// history that a reset ended from being applied on top of the next one (versions start over).
    covered: i64,
    /// Whether data the model refused was reported already (once per channel).
    warned: bool,
}

impl ChannelState {
    /// A channel at version 0 under `model`, keeping the recent publications `window` allows.
    pub fn new(id: &str, model: &dyn Model, window: Window) -> Self {
        Self::restored(id, model.kind(), model.empty(), 0, 0, 0, window)
    }

    /// A state restored from a snapshot at `version` of a channel reset `resets` times, which
    /// reflects the channel's records below `offset` (no recent publications: a resume from before
    /// it gets the state).
    pub fn restored(id: &str, kind: ModelKind, state: Box<dyn State>, version: u64, resets: u64, offset: i64, window: Window) -> Self {
        let window = Window { events: window.events.max(1), bytes: window.bytes };
        Self { state, kind, version, recent: VecDeque::new(), recent_bytes: 0, window, id: id.to_owned(), resets, covered: offset, warned: false }
    }

    /// The channel's reset counter.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// The offset below which the channel's records are reflected (see the field).
    pub fn covered(&self) -> i64 {
        self.covered
    }

    /// The channel reset by the op record at `offset`: `model`'s empty state at version 0 of reset
    /// count `resets`, nothing held.
    pub fn reset(&mut self, model: &dyn Model, resets: u64, offset: i64) {
        self.state = model.empty();
        self.kind = model.kind();
        self.version = 0;
        self.recent.clear();
        self.recent_bytes = 0;
        self.resets = resets;
        self.covered = offset + 1;
        self.warned = false;
    }

    /// Bytes of the recent publications held.
    pub fn recent_bytes(&self) -> usize {
        self.recent_bytes
    }

    /// The version the state reflects.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Its model.
    pub fn kind(&self) -> ModelKind {
        self.kind
    }

    /// The model's state.
    pub fn state(&self) -> &dyn State {
        self.state.as_ref()
    }

    /// Replaces the state with `state`, a rebuilt one at the same version (a heal of versions
    /// the log skipped): the recent publications stay, they are the same versions.
    pub fn replace_state(&mut self, state: Box<dyn State>) {
        self.state = state;
    }

    /// Applies `p`. Returns the frame to fan out when it was new, `None` for a duplicate.
    pub fn apply(&mut self, p: &Publication) -> Option<Frame> {
        if p.version <= self.version {
            return None;
        }
        let expected = self.version + 1;
        if let Err(e) = self.state.apply(&p.data) {
            if !self.warned {
                self.warned = true;
                tracing::error!(channel = %p.channel, version = p.version, model = %self.kind, error = %e,
                    "a publication this channel's model cannot apply: the publisher's namespaces differ from this node's (compare namespaces_fingerprint in /health)");
            }
        }
        self.version = p.version;
        if p.version != expected {
            tracing::error!(channel = %p.channel, expected, got = p.version, "the log skips versions of this channel; clients will resync");
            // Held publications must stay contiguous, so a gap forgets them (resumes get the state).
            self.recent.clear();
            self.recent_bytes = 0;
        }
        // The frame is written in place: the data's text is copied once, never parsed.
        let frame = Frame { wire: shared::ws::encode_text_with(|out| shared::protocol::write_publication_json(p, out)) };
        self.recent_bytes += frame.byte_len();
        self.recent.push_back((p.version, frame.clone()));
        while self.recent.len() > 1 && (self.recent.len() > self.window.events || self.recent_bytes > self.window.bytes) {
            let (_, old) = self.recent.pop_front().expect("more than one held");
            self.recent_bytes -= old.byte_len();
        }
        Some(frame)
    }

    /// What a client that applied everything up to `since` needs before live publications, in
    /// `style`. `holds` says the client holds version `since` of this history (it named the
    /// current epoch): then `since = 0` is the empty state it was sent, and versions 1.. are due
    /// as publications like any other resume; without it `since = 0` is a client with nothing,
    /// sent the state.
    pub fn backlog(&self, since: u64, holds: bool, style: FrameStyle) -> Backlog {
        let version = self.version;
        if since > version {
            return Backlog::Behind { have: version };
        }
        let resumes = since > 0 || holds;
        if since == version && resumes {
            return Backlog::Events(Vec::new());
        }
        let oldest_held = self.recent.front().map(|(v, _)| *v);
        match oldest_held {
            Some(oldest) if resumes && since + 1 >= oldest => {
                let held = self.recent.iter().filter(|(v, _)| *v > since).map(|(_, f)| f.clone());
                Backlog::Events(match style {
                    FrameStyle::Channel => held.collect(),
                    FrameStyle::Canvas => held.filter_map(|f| event_frame_of(&f)).collect(),
                })
            }
            _ if resumes && self.kind == ModelKind::Stream && style == FrameStyle::Channel => {
                Backlog::Reset { frame: reset_frame(&self.id, version, None), version }
            }
            _ => Backlog::Snapshot { frame: self.snapshot_frame(style), version },
        }
    }

    /// The state frame of the current state in `style`.
    pub fn snapshot_frame(&self, style: FrameStyle) -> Frame {
        state_frame(&self.id, self.version, self.state.as_ref(), style)
    }
}

/// The frame of `state` of channel `id` at `version` in `style`: a `state` frame, or today's
/// `snapshot` frame (of a `pixels` channel; any other state is sent as a blank 1x1 canvas, which
/// no `canvas=` session gets: the handshake refuses them).
pub fn state_frame(id: &str, version: u64, state: &dyn State, style: FrameStyle) -> Frame {
    match style {
        FrameStyle::Channel => Frame { wire: shared::ws::encode_text(&shared::protocol::state_json(id, version, state)) },
        FrameStyle::Canvas => {
            let blank;
            let raster = match state.as_any().downcast_ref::<Raster>() {
                Some(r) => r,
                None => {
                    blank = Raster::white(shared::CanvasDims { width: 1, height: 1 });
                    &blank
                }
            };
            let dims = raster.dims();
            ServerMessage::Snapshot { canvas: id.to_owned(), version, width: dims.width, height: dims.height, pixels: raster.base64() }.to_json().into()
        }
    }
}

/// A `reset` frame of channel `id` to `version`.
pub fn reset_frame(id: &str, version: u64, epoch: Option<shared::epoch::Epoch>) -> Frame {
    ServerMessage::Reset { channel: id.to_owned(), version, epoch }.to_json().into()
}

/// Today's `event` frame of `p` (a `pixels` channel's publication), `None` for other data.
pub fn event_of(p: &Publication) -> Option<Frame> {
    let paint: Paint = serde_json::from_str(p.data.get()).ok()?;
    let ev = PixelEvent { canvas: p.channel.clone(), version: p.version, x: paint.x, y: paint.y, color: paint.color, published_at_ms: p.published_at_ms };
    Some(Frame { wire: shared::ws::encode_text_with(|out| shared::protocol::write_event_json(&ev, out)) })
}

/// Today's `event` frame of a held `publication` frame (a resume in today's style).
fn event_frame_of(f: &Frame) -> Option<Frame> {
    match serde_json::from_str::<ServerMessage>(&f.text()).ok()? {
        ServerMessage::Publication { channel, version, data, published_at_ms } => {
            let data = serde_json::value::to_raw_value(&data).ok()?;
            event_of(&Publication { channel: shared::ChannelId::parse(&channel).ok()?, version, data, published_at_ms })
        }
        _ => None,
    }
}

/// The backlog of a channel with no publication and no snapshot: its version-0 state (`empty`),
/// nothing for a client that holds version 0 already (`holds`, as in [`ChannelState::backlog`]),
/// or `Behind` for a client that says it has versions.
pub fn blank_backlog(id: &str, empty: &dyn State, since: u64, holds: bool, style: FrameStyle) -> Backlog {
    if since > 0 {
        Backlog::Behind { have: 0 }
    } else if holds {
        Backlog::Events(Vec::new())
    } else {
        Backlog::Snapshot { frame: state_frame(id, 0, empty, style), version: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::model::pixels::Pixels;
    use shared::{CanvasDims, ChannelId, Color};

    const PIXELS: Pixels = Pixels { dims: CanvasDims { width: 4, height: 4 } };

    fn ev(v: u64) -> Publication {
        PixelEvent { canvas: ChannelId::parse("c1").unwrap(), version: v, x: 0, y: 0, color: Color([v as u8, 0, 0]), published_at_ms: 0 }.into()
    }

    fn versions(b: &Backlog) -> Vec<u64> {
        match b {
            Backlog::Events(fs) => fs
                .iter()
                .map(|f| match serde_json::from_str::<ServerMessage>(&f.text()).unwrap() {
                    ServerMessage::Event(e) => e.version,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("not events: {other:?}"),
        }
    }

    fn state_with(n: u64, events: usize) -> ChannelState {
        state_within(n, Window { events, bytes: usize::MAX })
    }

    fn state_within(n: u64, window: Window) -> ChannelState {
        let mut s = ChannelState::new("c1", &PIXELS, window);
        for v in 1..=n {
            assert!(s.apply(&ev(v)).is_some());
        }
        s
    }

    #[test]
    fn backlog_table() {
        let s = state_with(10, 5); // holds 6..=10
        assert_eq!(versions(&s.backlog(10, false, FrameStyle::Canvas)), Vec::<u64>::new());
        assert_eq!(versions(&s.backlog(9, false, FrameStyle::Canvas)), vec![10]);
        assert_eq!(versions(&s.backlog(5, false, FrameStyle::Canvas)), vec![6, 7, 8, 9, 10], "since+1 is the oldest held");
        assert!(matches!(s.backlog(4, false, FrameStyle::Canvas), Backlog::Snapshot { version: 10, .. }), "7 events needed, 5 held");
        assert!(matches!(s.backlog(0, false, FrameStyle::Canvas), Backlog::Snapshot { version: 10, .. }), "since=0 with nothing held gets a snapshot");
        assert!(matches!(s.backlog(0, true, FrameStyle::Canvas), Backlog::Snapshot { version: 10, .. }), "version 0 held, but 1..=5 are no longer");
        assert_eq!(s.backlog(11, false, FrameStyle::Canvas), Backlog::Behind { have: 10 });
        assert_eq!(versions(&s.backlog(9, true, FrameStyle::Canvas)), vec![10], "holding a version > 0 says nothing new");
    }

    #[test]
    fn a_client_holding_version_0_resumes_by_events() {
        // It was sent the blank canvas (a snapshot at version 0) and dropped before any event: it
        // holds version 0 of this history, so 1.. are due as events, not as a second snapshot.
        let s = state_with(4, 10); // holds 1..=4
        assert_eq!(versions(&s.backlog(0, true, FrameStyle::Canvas)), vec![1, 2, 3, 4]);
        assert!(matches!(s.backlog(0, false, FrameStyle::Canvas), Backlog::Snapshot { version: 4, .. }), "a client with nothing");
        let blank = PIXELS.empty();
        assert_eq!(versions(&blank_backlog("c1", blank.as_ref(), 0, true, FrameStyle::Canvas)), Vec::<u64>::new());
        assert!(matches!(blank_backlog("c1", blank.as_ref(), 0, false, FrameStyle::Canvas), Backlog::Snapshot { version: 0, .. }));
        assert_eq!(versions(&state_with(0, 5).backlog(0, true, FrameStyle::Canvas)), Vec::<u64>::new());
    }

    #[test]
    fn empty_channel_gives_a_version_0_state() {
        let s = state_with(0, 5);
        assert!(matches!(s.backlog(0, false, FrameStyle::Canvas), Backlog::Snapshot { version: 0, .. }));
        assert_eq!(s.backlog(1, false, FrameStyle::Canvas), Backlog::Behind { have: 0 });
    }

    #[test]
    fn duplicates_are_not_fanned_out_and_not_held_twice() {
        let mut s = state_with(3, 10);
        assert!(s.apply(&ev(2)).is_none());
        assert!(s.apply(&ev(3)).is_none());
        assert_eq!(versions(&s.backlog(1, false, FrameStyle::Canvas)), vec![2, 3]);
    }

    #[test]
    fn snapshot_frame_decodes_to_the_same_canvas() {
        let s = state_with(4, 10);
        match serde_json::from_str::<ServerMessage>(&s.snapshot_frame(FrameStyle::Canvas).text()).unwrap() {
            ServerMessage::Snapshot { canvas, version, width, height, pixels } => {
                assert_eq!((canvas.as_str(), version, width, height), ("c1", 4, 4, 4));
                let c = shared::Canvas::from_base64(CanvasDims { width, height }, version, &pixels).unwrap();
                assert_eq!(c.hash(), s.state().hash());
            }
            other => panic!("{other:?}"),
        }
        match serde_json::from_str::<ServerMessage>(&s.snapshot_frame(FrameStyle::Channel).text()).unwrap() {
            ServerMessage::State { channel, version, state } => {
                assert_eq!((channel.as_str(), version), ("c1", 4));
                assert_eq!(state["pixels"].as_str().map(str::len), Some(64), "4x4x3 bytes in base64");
            }
            other => panic!("{other:?}"),
        }
    }

    fn publication(channel: &str, v: u64, data: &str) -> Publication {
        Publication { channel: ChannelId::parse(channel).unwrap(), version: v, data: serde_json::value::RawValue::from_string(data.into()).unwrap(), published_at_ms: 5 }
    }

    /// The versions of publication frames, and the kind of any other frame.
    fn channel_frames(b: &Backlog) -> Vec<String> {
        let frames = match b {
            Backlog::Events(fs) => fs.clone(),
            Backlog::Snapshot { frame, .. } | Backlog::Reset { frame, .. } => vec![frame.clone()],
            Backlog::Behind { .. } => vec![],
        };
        frames
            .iter()
            .map(|f| match serde_json::from_str::<ServerMessage>(&f.text()).unwrap() {
                ServerMessage::Publication { version, .. } => version.to_string(),
                ServerMessage::State { version, state, .. } => format!("state@{version}={state}"),
                ServerMessage::Reset { version, .. } => format!("reset@{version}"),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn channel_backlogs_per_model_table() {
        use shared::model::{json::Json, latest::Latest, stream::Stream};
        let window = Window { events: 3, bytes: usize::MAX };
        let models: [(&dyn Model, &str); 3] = [(&Stream, "chat:a"), (&Latest, "prices:a"), (&Json::default(), "docs:a")];
        for (model, id) in models {
            let mut s = ChannelState::new(id, model, window);
            for v in 1..=5 {
                assert!(s.apply(&publication(id, v, &format!(r#"{{"n":{v}}}"#))).is_some());
            }
            let kind = model.kind();
            let state = match kind {
                ModelKind::Stream => "null",
                _ => r#"{"n":5}"#,
            };
            let beyond = if kind == ModelKind::Stream { "reset@5".to_owned() } else { format!("state@5={state}") };
            for (since, holds, want) in [
                (4, false, vec!["5".to_owned()]),
                (2, false, vec!["3".into(), "4".into(), "5".into()]),
                (1, false, vec![beyond.clone()]),
                (0, true, vec![beyond]),
                (0, false, vec![format!("state@5={state}")]),
                (5, true, vec![]),
            ] {
                assert_eq!(channel_frames(&s.backlog(since, holds, FrameStyle::Channel)), want, "{kind} since {since} holds {holds}");
            }
        }
    }

    #[test]
    fn a_canvas_style_resume_gets_todays_event_frames() {
        let s = state_with(3, 10);
        let Backlog::Events(fs) = s.backlog(1, false, FrameStyle::Canvas) else { panic!() };
        assert!(fs[0].text().starts_with(r##"{"type":"event","canvas":"c1","version":2,"x":0,"y":0,"color":"#020000""##), "{}", fs[0].text());
        let Backlog::Events(fs) = s.backlog(1, false, FrameStyle::Channel) else { panic!() };
        assert!(fs[0].text().starts_with(r##"{"type":"publication","channel":"c1","version":2,"data":{"x":0,"y":0,"color":"#020000"}"##), "{}", fs[0].text());
    }

    #[test]
    fn the_window_is_bounded_in_bytes_too() {
        let one = state_with(1, 1).recent_bytes();
        assert!(one > 0);
        // Room for three events' frames (versions 1..9 encode to the same length).
        let s = state_within(9, Window { events: 100, bytes: 3 * one });
        assert_eq!(s.recent_bytes(), 3 * one);
        assert_eq!(versions(&s.backlog(6, false, FrameStyle::Canvas)), vec![7, 8, 9]);
        assert!(matches!(s.backlog(5, false, FrameStyle::Canvas), Backlog::Snapshot { version: 9, .. }), "version 6 no longer held");
        // A window smaller than one event still keeps the newest.
        let tiny = state_within(3, Window { events: 100, bytes: 1 });
        assert_eq!(versions(&tiny.backlog(2, false, FrameStyle::Canvas)), vec![3]);
    }

    #[test]
    fn a_frame_s_text_survives_fragmentation() {
        let long = format!("{{\"x\":\"{}\"}}", "y".repeat(5000));
        assert_eq!(Frame::from(long.clone()).text(), long);
        assert_eq!(Frame::from("{}".to_owned()).text(), "{}");
    }

    #[test]
    fn a_gap_forgets_held_events_so_resumes_get_a_snapshot() {
        let mut s = state_with(3, 10);
        assert!(s.apply(&ev(5)).is_some());
        assert_eq!(versions(&s.backlog(4, false, FrameStyle::Canvas)), vec![5]);
        assert!(matches!(s.backlog(2, false, FrameStyle::Canvas), Backlog::Snapshot { version: 5, .. }));
    }
}
