//! The canvas model: `width × height` RGB pixels, unset = white, plus the version it reflects.
//!
//! Canonical bytes: the row-major RGB array, `width * height * 3` bytes, pixel `(x, y)` at
//! `(y * width + x) * 3`. The canvas hash is the lowercase hex SHA-256 of those bytes; the
//! publisher's `GET /canvases/{id}` and every client's copy are compared by it.

use crate::event::PixelEvent;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// Canvas size in pixels. Default 64 × 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CanvasDims {
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

impl Default for CanvasDims {
    fn default() -> Self {
        Self { width: 64, height: 64 }
    }
}

impl CanvasDims {
    /// Length of the canonical bytes: `width * height * 3`.
    pub fn byte_len(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }

    /// Whether `(x, y)` lies on the canvas.
    pub fn contains(&self, x: u32, y: u32) -> bool {
        x < self.width && y < self.height
    }
}

/// What [`Canvas::apply`] did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The event was the next version; the canvas now has it.
    Next,
    /// The event's version is at or below the canvas's: dropped (at-least-once delivery repeats).
    Duplicate,
    /// The event skipped versions (`expected` was next). It was applied anyway, because the log is
    /// the truth, but the log broke the publisher's contiguity promise: callers log it loudly.
    Gap { expected: u64 },
}

/// A canvas and the version it reflects (0 = nothing applied yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canvas {
    dims: CanvasDims,
    version: u64,
    pixels: Vec<u8>,
}

impl Canvas {
    /// An all-white canvas at version 0.
    pub fn new(dims: CanvasDims) -> Self {
        Self { dims, version: 0, pixels: vec![0xff; dims.byte_len()] }
    }

    /// A canvas from a snapshot's canonical bytes.
    ///
    /// # Errors
    /// `None` when `pixels` is not `width * height * 3` bytes long.
    pub fn from_bytes(dims: CanvasDims, version: u64, pixels: Vec<u8>) -> Option<Self> {
        (pixels.len() == dims.byte_len()).then_some(Self { dims, version, pixels })
    }

    /// The version this canvas reflects.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Its size.
    pub fn dims(&self) -> CanvasDims {
        self.dims
    }

    /// The canonical bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.pixels
    }

    /// Applies `ev` if it is newer than this canvas (see [`Applied`]). A pixel outside the canvas
    /// only advances the version (the publisher never writes one; a reader configured with other
    /// dimensions must still keep versions contiguous).
    pub fn apply(&mut self, ev: &PixelEvent) -> Applied {
        if ev.version <= self.version {
            return Applied::Duplicate;
        }
        let expected = self.version + 1;
        if self.dims.contains(ev.x, ev.y) {
            let i = (ev.y as usize * self.dims.width as usize + ev.x as usize) * 3;
            self.pixels[i..i + 3].copy_from_slice(&ev.color.0);
        }
        self.version = ev.version;
        if ev.version == expected {
            Applied::Next
        } else {
            Applied::Gap { expected }
        }
    }

    /// Lowercase hex SHA-256 of the canonical bytes.
    pub fn hash(&self) -> String {
        hash_bytes(&self.pixels)
    }

    /// Standard base64 (RFC 4648 §4, padded) of the canonical bytes, as in a `snapshot` frame.
    pub fn pixels_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.pixels)
    }

    /// Decodes a snapshot's `pixels` field.
    ///
    /// # Errors
    /// `None` when it is not valid base64 or not `width * height * 3` bytes.
    pub fn from_base64(dims: CanvasDims, version: u64, pixels: &str) -> Option<Self> {
        let bytes = base64::engine::general_purpose::STANDARD.decode(pixels).ok()?;
        Self::from_bytes(dims, version, bytes)
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn hash_bytes(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ChannelId, Color};

    fn ev(version: u64, x: u32, y: u32, rgb: [u8; 3]) -> PixelEvent {
        PixelEvent {
            canvas: ChannelId::parse("c1").unwrap(),
            version,
            x,
            y,
            color: Color(rgb),
            published_at_ms: 0,
        }
    }

    #[test]
    fn new_canvas_is_white_and_hash_is_sha256_of_bytes() {
        let c = Canvas::new(CanvasDims { width: 2, height: 1 });
        assert_eq!(c.bytes(), &[255; 6]);
        // sha256 of six 0xff bytes
        assert_eq!(c.hash(), hash_bytes(&[255; 6]));
        assert_eq!(
            hash_bytes(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn apply_is_row_major_and_drops_old_versions() {
        let mut c = Canvas::new(CanvasDims { width: 3, height: 2 });
        assert_eq!(c.apply(&ev(1, 2, 1, [1, 2, 3])), Applied::Next);
        assert_eq!(&c.bytes()[15..18], &[1, 2, 3]);
        assert_eq!(c.apply(&ev(1, 0, 0, [9, 9, 9])), Applied::Duplicate);
        assert_eq!(&c.bytes()[0..3], &[255, 255, 255]);
        assert_eq!(c.apply(&ev(3, 0, 0, [9, 9, 9])), Applied::Gap { expected: 2 });
        assert_eq!(c.version(), 3);
    }

    #[test]
    fn out_of_bounds_pixel_only_advances_version() {
        let mut c = Canvas::new(CanvasDims { width: 2, height: 2 });
        let before = c.hash();
        assert_eq!(c.apply(&ev(1, 5, 0, [0, 0, 0])), Applied::Next);
        assert_eq!(c.version(), 1);
        assert_eq!(c.hash(), before);
    }

    #[test]
    fn base64_round_trip() {
        let mut c = Canvas::new(CanvasDims { width: 4, height: 4 });
        c.apply(&ev(1, 1, 1, [7, 8, 9]));
        let back = Canvas::from_base64(c.dims(), 1, &c.pixels_base64()).unwrap();
        assert_eq!(back, c);
        assert!(Canvas::from_base64(CanvasDims { width: 5, height: 4 }, 1, &c.pixels_base64()).is_none());
        assert!(Canvas::from_base64(c.dims(), 1, "!!").is_none());
    }
}
