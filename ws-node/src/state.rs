//! One canvas's state on a node: the canvas, and its recent events as ready-to-send frames.
//!
//! The recent events let a resuming client (`since = n`) get events `n+1..` instead of a
//! snapshot, for as long as they are held (the last `capacity` versions). The state also keeps the
//! canvas's reset counter, its part of the stream's epoch ([`shared::epoch`]).

use tungstenite::Utf8Bytes;
use shared::canvas::Applied;
use shared::protocol::ServerMessage;
use shared::{Canvas, CanvasDims, PixelEvent};
use std::collections::VecDeque;

/// A serialised server message, shared by every session it is sent to (cloning is a reference
/// count): the WebSocket frames that carry its JSON text, encoded once (server frames are
/// unmasked, so the bytes are the same for every client; long texts as 2 KiB fragments). Only the
/// wire form is kept: an event held in a canvas's recent window costs its frame's bytes once.
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

/// How much of a canvas's recent events a node keeps, so resumes are served as events: at most
/// `events` events and `bytes` bytes of their frames (the newest event is always kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub events: usize,
    pub bytes: usize,
}

/// What a new session gets before live events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backlog {
    /// The events after `since`, oldest first (empty when the client is current).
    Events(Vec<Frame>),
    /// A snapshot at the canvas's current version (`since = 0`, or the events are no longer held).
    Snapshot { frame: Frame, version: u64 },
    /// The client is ahead of this node's state (`since > version`): not yet servable.
    Behind { have: u64 },
}

/// A canvas and its recent event frames.
#[derive(Debug)]
pub struct CanvasState {
    canvas: Canvas,
    /// (version, frame), contiguous, newest last; within `window`.
    recent: VecDeque<(u64, Frame)>,
    /// Bytes of the frames in `recent`.
    recent_bytes: usize,
    window: Window,
    id: String,
    /// The canvas's reset counter (from its snapshot; 0 for a canvas built from events only).
    resets: u64,
    /// Whether the canvas-size mismatch was reported already (once per canvas).
    warned_size: bool,
}

impl CanvasState {
    /// An empty (white, version 0) canvas keeping the recent events `window` allows.
    pub fn new(id: &str, dims: CanvasDims, window: Window) -> Self {
        Self::restored(id, Canvas::new(dims), 0, window)
    }

    /// A state restored from a snapshot of a canvas reset `resets` times (no recent events: a
    /// resume from before it gets the snapshot).
    pub fn restored(id: &str, canvas: Canvas, resets: u64, window: Window) -> Self {
        let window = Window { events: window.events.max(1), bytes: window.bytes };
        Self { canvas, recent: VecDeque::new(), recent_bytes: 0, window, id: id.to_owned(), resets, warned_size: false }
    }

    /// The canvas's reset counter.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// Bytes of the recent events held.
    pub fn recent_bytes(&self) -> usize {
        self.recent_bytes
    }

    /// The version the state reflects.
    pub fn version(&self) -> u64 {
        self.canvas.version()
    }

    /// The canvas.
    pub fn canvas(&self) -> &Canvas {
        &self.canvas
    }

    /// Replaces the canvas with `canvas`, a rebuilt one at the same version (a heal of versions
    /// the log skipped): the recent events stay, they are the same versions.
    pub fn replace_canvas(&mut self, canvas: Canvas) {
        debug_assert_eq!(canvas.version(), self.canvas.version());
        self.canvas = canvas;
    }

    /// Applies `ev`. Returns the frame to fan out when it was new, `None` for a duplicate.
    pub fn apply(&mut self, ev: &PixelEvent) -> Option<Frame> {
        if !self.canvas.dims().contains(ev.x, ev.y) && !self.warned_size {
            self.warned_size = true;
            tracing::error!(canvas = %ev.canvas, x = ev.x, y = ev.y, width = self.canvas.dims().width, height = self.canvas.dims().height,
                "an event paints outside this node's canvas: CANVAS_WIDTH/CANVAS_HEIGHT differ from the publisher's");
        }
        match self.canvas.apply(ev) {
            Applied::Duplicate => None,
            applied => {
                if let Applied::Gap { expected } = applied {
                    tracing::error!(canvas = %ev.canvas, expected, got = ev.version,
                        "the log skips versions of this canvas; clients will resync");
                    // Held events must stay contiguous, so a gap forgets them (resumes get a snapshot).
                    self.recent.clear();
                    self.recent_bytes = 0;
                }
                // The frame is written in place: no copy of the event, nor of its text.
                let frame = Frame { wire: shared::ws::encode_text_with(|out| shared::protocol::write_event_json(ev, out)) };
                self.recent_bytes += frame.byte_len();
                self.recent.push_back((ev.version, frame.clone()));
                while self.recent.len() > 1 && (self.recent.len() > self.window.events || self.recent_bytes > self.window.bytes) {
                    let (_, old) = self.recent.pop_front().expect("more than one held");
                    self.recent_bytes -= old.byte_len();
                }
                Some(frame)
            }
        }
    }

    /// What a client that applied everything up to `since` needs before live events. `holds` says
    /// the client holds version `since` of this history (it named the current epoch): then
    /// `since = 0` is the blank canvas it was sent, and versions 1.. are due as events like any
    /// other resume; without it `since = 0` is a client with nothing, sent a snapshot.
    pub fn backlog(&self, since: u64, holds: bool) -> Backlog {
        let version = self.version();
        if since > version {
            return Backlog::Behind { have: version };
        }
        let resumes = since > 0 || holds;
        if since == version && resumes {
            return Backlog::Events(Vec::new());
        }
        let oldest_held = self.recent.front().map(|(v, _)| *v);
        match oldest_held {
            Some(oldest) if resumes && since + 1 >= oldest => Backlog::Events(
                self.recent.iter().filter(|(v, _)| *v > since).map(|(_, f)| f.clone()).collect(),
            ),
            _ => Backlog::Snapshot { frame: self.snapshot_frame(), version },
        }
    }

    /// A `snapshot` frame of the current state.
    pub fn snapshot_frame(&self) -> Frame {
        snapshot_frame(&self.id, &self.canvas)
    }
}

/// A `snapshot` frame of `canvas` named `id`.
pub fn snapshot_frame(id: &str, canvas: &Canvas) -> Frame {
    let dims = canvas.dims();
    ServerMessage::Snapshot { canvas: id.to_owned(), version: canvas.version(), width: dims.width, height: dims.height, pixels: canvas.pixels_base64() }
        .to_json()
        .into()
}

/// The backlog of a canvas with no event and no snapshot, from the shared `blank` canvas: its
/// version-0 snapshot, nothing for a client that holds version 0 already (`holds`, as in
/// [`CanvasState::backlog`]), or `Behind` for a client that says it has versions.
pub fn blank_backlog(id: &str, blank: &Canvas, since: u64, holds: bool) -> Backlog {
    if since > 0 {
        Backlog::Behind { have: 0 }
    } else if holds {
        Backlog::Events(Vec::new())
    } else {
        Backlog::Snapshot { frame: snapshot_frame(id, blank), version: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{ChannelId, Color};

    fn ev(v: u64) -> PixelEvent {
        PixelEvent { canvas: ChannelId::parse("c1").unwrap(), version: v, x: 0, y: 0, color: Color([v as u8, 0, 0]), published_at_ms: 0 }
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

    fn state_with(n: u64, events: usize) -> CanvasState {
        state_within(n, Window { events, bytes: usize::MAX })
    }

    fn state_within(n: u64, window: Window) -> CanvasState {
        let mut s = CanvasState::new("c1", CanvasDims { width: 4, height: 4 }, window);
        for v in 1..=n {
            assert!(s.apply(&ev(v)).is_some());
        }
        s
    }

    #[test]
    fn backlog_table() {
        let s = state_with(10, 5); // holds 6..=10
        assert_eq!(versions(&s.backlog(10, false)), Vec::<u64>::new());
        assert_eq!(versions(&s.backlog(9, false)), vec![10]);
        assert_eq!(versions(&s.backlog(5, false)), vec![6, 7, 8, 9, 10], "since+1 is the oldest held");
        assert!(matches!(s.backlog(4, false), Backlog::Snapshot { version: 10, .. }), "7 events needed, 5 held");
        assert!(matches!(s.backlog(0, false), Backlog::Snapshot { version: 10, .. }), "since=0 with nothing held gets a snapshot");
        assert!(matches!(s.backlog(0, true), Backlog::Snapshot { version: 10, .. }), "version 0 held, but 1..=5 are no longer");
        assert_eq!(s.backlog(11, false), Backlog::Behind { have: 10 });
        assert_eq!(versions(&s.backlog(9, true)), vec![10], "holding a version > 0 says nothing new");
    }

    #[test]
    fn a_client_holding_version_0_resumes_by_events() {
        // It was sent the blank canvas (a snapshot at version 0) and dropped before any event: it
        // holds version 0 of this history, so 1.. are due as events, not as a second snapshot.
        let s = state_with(4, 10); // holds 1..=4
        assert_eq!(versions(&s.backlog(0, true)), vec![1, 2, 3, 4]);
        assert!(matches!(s.backlog(0, false), Backlog::Snapshot { version: 4, .. }), "a client with nothing");
        let blank = Canvas::new(CanvasDims { width: 4, height: 4 });
        assert_eq!(versions(&blank_backlog("c1", &blank, 0, true)), Vec::<u64>::new());
        assert!(matches!(blank_backlog("c1", &blank, 0, false), Backlog::Snapshot { version: 0, .. }));
        assert_eq!(versions(&state_with(0, 5).backlog(0, true)), Vec::<u64>::new());
    }

    #[test]
    fn empty_canvas_gives_a_version_0_snapshot() {
        let s = state_with(0, 5);
        assert!(matches!(s.backlog(0, false), Backlog::Snapshot { version: 0, .. }));
        assert_eq!(s.backlog(1, false), Backlog::Behind { have: 0 });
    }

    #[test]
    fn duplicates_are_not_fanned_out_and_not_held_twice() {
        let mut s = state_with(3, 10);
        assert!(s.apply(&ev(2)).is_none());
        assert!(s.apply(&ev(3)).is_none());
        assert_eq!(versions(&s.backlog(1, false)), vec![2, 3]);
    }

    #[test]
    fn snapshot_frame_decodes_to_the_same_canvas() {
        let s = state_with(4, 10);
        match serde_json::from_str::<ServerMessage>(&s.snapshot_frame().text()).unwrap() {
            ServerMessage::Snapshot { canvas, version, width, height, pixels } => {
                assert_eq!((canvas.as_str(), version, width, height), ("c1", 4, 4, 4));
                let c = Canvas::from_base64(CanvasDims { width, height }, version, &pixels).unwrap();
                assert_eq!(c.hash(), s.canvas().hash());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_window_is_bounded_in_bytes_too() {
        let one = state_with(1, 1).recent_bytes();
        assert!(one > 0);
        // Room for three events' frames (versions 1..9 encode to the same length).
        let s = state_within(9, Window { events: 100, bytes: 3 * one });
        assert_eq!(s.recent_bytes(), 3 * one);
        assert_eq!(versions(&s.backlog(6, false)), vec![7, 8, 9]);
        assert!(matches!(s.backlog(5, false), Backlog::Snapshot { version: 9, .. }), "version 6 no longer held");
        // A window smaller than one event still keeps the newest.
        let tiny = state_within(3, Window { events: 100, bytes: 1 });
        assert_eq!(versions(&tiny.backlog(2, false)), vec![3]);
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
        assert_eq!(versions(&s.backlog(4, false)), vec![5]);
        assert!(matches!(s.backlog(2, false), Backlog::Snapshot { version: 5, .. }));
    }
}
