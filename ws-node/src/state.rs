//! One canvas's state on a node: the canvas, and its recent events as ready-to-send frames.
//!
//! The recent events let a resuming client (`since = n`) get events `n+1..` instead of a
//! snapshot, for as long as they are held (the last `capacity` versions).

use tungstenite::Utf8Bytes;
use shared::canvas::Applied;
use shared::protocol::ServerMessage;
use shared::{Canvas, CanvasDims, PixelEvent};
use std::collections::VecDeque;

/// A serialised server message, shared by every session it is sent to (cloning is a reference
/// count): its JSON text, and the WebSocket frames that carry it, encoded once (server frames are
/// unmasked, so the bytes are the same for every client; long texts as 2 KiB fragments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    text: Utf8Bytes,
    wire: bytes::Bytes,
}

impl Frame {
    /// The message's JSON text.
    pub fn as_str(&self) -> &str {
        self.text.as_str()
    }

    /// The bytes to write to a client's socket.
    pub fn wire(&self) -> &bytes::Bytes {
        &self.wire
    }
}

impl From<Utf8Bytes> for Frame {
    fn from(text: Utf8Bytes) -> Self {
        let wire = shared::ws::encode_text(text.as_bytes());
        Self { text, wire }
    }
}

impl From<String> for Frame {
    fn from(text: String) -> Self {
        Utf8Bytes::from(text).into()
    }
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
    /// (version, frame), contiguous, newest last; at most `capacity` long.
    recent: VecDeque<(u64, Frame)>,
    capacity: usize,
    id: String,
    /// Whether the canvas-size mismatch was reported already (once per canvas).
    warned_size: bool,
}

impl CanvasState {
    /// An empty (white, version 0) canvas keeping `capacity` recent events.
    pub fn new(id: &str, dims: CanvasDims, capacity: usize) -> Self {
        Self { canvas: Canvas::new(dims), recent: VecDeque::new(), capacity: capacity.max(1), id: id.to_owned(), warned_size: false }
    }

    /// A state restored from a snapshot (no recent events: a resume from before it gets the
    /// snapshot).
    pub fn restored(id: &str, canvas: Canvas, capacity: usize) -> Self {
        Self { canvas, recent: VecDeque::new(), capacity: capacity.max(1), id: id.to_owned(), warned_size: false }
    }

    /// The version the state reflects.
    pub fn version(&self) -> u64 {
        self.canvas.version()
    }

    /// The canvas.
    pub fn canvas(&self) -> &Canvas {
        &self.canvas
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
                }
                let frame: Frame = ServerMessage::Event(ev.clone()).to_json().into();
                if self.recent.len() == self.capacity {
                    self.recent.pop_front();
                }
                self.recent.push_back((ev.version, frame.clone()));
                Some(frame)
            }
        }
    }

    /// What a client that applied everything up to `since` needs before live events.
    pub fn backlog(&self, since: u64) -> Backlog {
        let version = self.version();
        if since > version {
            return Backlog::Behind { have: version };
        }
        if since == version && since > 0 {
            return Backlog::Events(Vec::new());
        }
        let oldest_held = self.recent.front().map(|(v, _)| *v);
        match oldest_held {
            Some(oldest) if since > 0 && since + 1 >= oldest => Backlog::Events(
                self.recent.iter().filter(|(v, _)| *v > since).map(|(_, f)| f.clone()).collect(),
            ),
            _ => Backlog::Snapshot { frame: self.snapshot_frame(), version },
        }
    }

    /// A `snapshot` frame of the current state.
    pub fn snapshot_frame(&self) -> Frame {
        let dims = self.canvas.dims();
        ServerMessage::Snapshot {
            canvas: self.id.clone(),
            version: self.version(),
            width: dims.width,
            height: dims.height,
            pixels: self.canvas.pixels_base64(),
        }
        .to_json()
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{CanvasId, Color};

    fn ev(v: u64) -> PixelEvent {
        PixelEvent { canvas: CanvasId::parse("c1").unwrap(), version: v, x: 0, y: 0, color: Color([v as u8, 0, 0]), published_at_ms: 0 }
    }

    fn versions(b: &Backlog) -> Vec<u64> {
        match b {
            Backlog::Events(fs) => fs
                .iter()
                .map(|f| match serde_json::from_str::<ServerMessage>(f.as_str()).unwrap() {
                    ServerMessage::Event(e) => e.version,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("not events: {other:?}"),
        }
    }

    fn state_with(n: u64, capacity: usize) -> CanvasState {
        let mut s = CanvasState::new("c1", CanvasDims { width: 4, height: 4 }, capacity);
        for v in 1..=n {
            assert!(s.apply(&ev(v)).is_some());
        }
        s
    }

    #[test]
    fn backlog_table() {
        let s = state_with(10, 5); // holds 6..=10
        assert_eq!(versions(&s.backlog(10)), Vec::<u64>::new());
        assert_eq!(versions(&s.backlog(9)), vec![10]);
        assert_eq!(versions(&s.backlog(5)), vec![6, 7, 8, 9, 10], "since+1 is the oldest held");
        assert!(matches!(s.backlog(4), Backlog::Snapshot { version: 10, .. }), "7 events needed, 5 held");
        assert!(matches!(s.backlog(0), Backlog::Snapshot { version: 10, .. }), "since=0 always gets a snapshot");
        assert_eq!(s.backlog(11), Backlog::Behind { have: 10 });
    }

    #[test]
    fn empty_canvas_gives_a_version_0_snapshot() {
        let s = state_with(0, 5);
        assert!(matches!(s.backlog(0), Backlog::Snapshot { version: 0, .. }));
        assert_eq!(s.backlog(1), Backlog::Behind { have: 0 });
    }

    #[test]
    fn duplicates_are_not_fanned_out_and_not_held_twice() {
        let mut s = state_with(3, 10);
        assert!(s.apply(&ev(2)).is_none());
        assert!(s.apply(&ev(3)).is_none());
        assert_eq!(versions(&s.backlog(1)), vec![2, 3]);
    }

    #[test]
    fn snapshot_frame_decodes_to_the_same_canvas() {
        let s = state_with(4, 10);
        match serde_json::from_str::<ServerMessage>(s.snapshot_frame().as_str()).unwrap() {
            ServerMessage::Snapshot { canvas, version, width, height, pixels } => {
                assert_eq!((canvas.as_str(), version, width, height), ("c1", 4, 4, 4));
                let c = Canvas::from_base64(CanvasDims { width, height }, version, &pixels).unwrap();
                assert_eq!(c.hash(), s.canvas().hash());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_gap_forgets_held_events_so_resumes_get_a_snapshot() {
        let mut s = state_with(3, 10);
        assert!(s.apply(&ev(5)).is_some());
        assert_eq!(versions(&s.backlog(4)), vec![5]);
        assert!(matches!(s.backlog(2), Backlog::Snapshot { version: 5, .. }));
    }
}
