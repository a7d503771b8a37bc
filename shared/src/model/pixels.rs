//! The `pixels` model: a `width × height` RGB canvas, white where nothing was painted.
//!
//! A publication paints one pixel: `{"x":1,"y":2,"color":"#ff0000"}` (`x < width`, `y < height`,
//! no other field). The state's JSON form is `{"width","height","pixels"}`, `pixels` being the
//! standard base64 of the canonical bytes (row-major RGB, `width * height * 3` bytes, pixel
//! `(x, y)` at `(y * width + x) * 3`); its hash is the SHA-256 of those bytes; its snapshot body
//! is those bytes LZ4-compressed (encoding `lz4`, lz4_flex's block format with the length
//! prepended). Today's records and `snapshot`/`event` frames are this model's data under other
//! names ([`crate::event::PixelEvent`]).

use super::{sha256_hex, Data, Invalid, Model, ModelKind, State};
use crate::canvas::CanvasDims;
use crate::event::Color;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The model, with the namespace's canvas size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pixels {
    pub dims: CanvasDims,
}

/// One publication's data: a pixel and its new colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paint {
    pub x: u32,
    pub y: u32,
    pub color: Color,
}

impl Paint {
    /// The data's JSON text.
    pub fn to_data(&self) -> Box<Data> {
        serde_json::value::to_raw_value(self).expect("a paint serialises")
    }
}

/// A canvas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raster {
    dims: CanvasDims,
    bytes: Vec<u8>,
}

impl Raster {
    /// An all-white canvas.
    pub fn white(dims: CanvasDims) -> Self {
        Self { dims, bytes: vec![0xff; dims.byte_len()] }
    }

    /// A canvas of `bytes` (`None` unless `width * height * 3` of them).
    pub fn from_bytes(dims: CanvasDims, bytes: Vec<u8>) -> Option<Self> {
        (bytes.len() == dims.byte_len()).then_some(Self { dims, bytes })
    }

    /// Its size.
    pub fn dims(&self) -> CanvasDims {
        self.dims
    }

    /// The canonical bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Paints `p` (a pixel outside the canvas changes nothing).
    pub fn paint(&mut self, p: &Paint) {
        if self.dims.contains(p.x, p.y) {
            let i = (p.y as usize * self.dims.width as usize + p.x as usize) * 3;
            self.bytes[i..i + 3].copy_from_slice(&p.color.0);
        }
    }

    /// Standard base64 of the canonical bytes.
    pub fn base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.bytes)
    }
}

/// The JSON form of a canvas.
#[derive(Serialize)]
struct Form<'a> {
    width: u32,
    height: u32,
    pixels: &'a str,
}

impl Pixels {
    /// `data` as a paint of this canvas.
    ///
    /// # Errors
    /// [`Invalid::Data`] when it is not `{"x","y","color"}`, [`Invalid::OutOfBounds`] when the
    /// pixel is not on the canvas.
    pub fn paint_of(&self, data: &Data) -> Result<Paint, Invalid> {
        let p: Paint = serde_json::from_str(data.get()).map_err(|e| Invalid::Data(format!("pixel data is {{\"x\",\"y\",\"color\"}}: {e}")))?;
        if p.x >= self.dims.width {
            return Err(Invalid::OutOfBounds { field: "x", limit: self.dims.width });
        }
        if p.y >= self.dims.height {
            return Err(Invalid::OutOfBounds { field: "y", limit: self.dims.height });
        }
        Ok(p)
    }
}

impl Model for Pixels {
    fn kind(&self) -> ModelKind {
        ModelKind::Pixels
    }

    fn validate(&self, data: &Data) -> Result<(), Invalid> {
        self.paint_of(data).map(|_| ())
    }

    fn empty(&self) -> Box<dyn State> {
        Box::new(Raster::white(self.dims))
    }

    fn from_json(&self, state: &serde_json::Value) -> Result<Box<dyn State>, Invalid> {
        #[derive(Deserialize)]
        struct Owned {
            width: u32,
            height: u32,
            pixels: String,
        }
        let f: Owned = serde_json::from_value(state.clone()).map_err(|e| Invalid::Data(e.to_string()))?;
        if (f.width, f.height) != (self.dims.width, self.dims.height) {
            return Err(Invalid::Data(format!("a {}x{} canvas, not {}x{}", f.width, f.height, self.dims.width, self.dims.height)));
        }
        let bytes = base64::engine::general_purpose::STANDARD.decode(&f.pixels).map_err(|e| Invalid::Data(e.to_string()))?;
        Raster::from_bytes(self.dims, bytes).map(|r| Box::new(r) as Box<dyn State>).ok_or_else(|| Invalid::Data("pixels of another length".into()))
    }

    /// The bytes of a canvas of this namespace's size. (A snapshot of another size, written under
    /// another configuration, is refused: its pixels would be misplaced.)
    fn decode(&self, encoding: &str, body: &[u8]) -> Result<Box<dyn State>, Invalid> {
        if encoding != "lz4" {
            return Err(Invalid::Snapshot(format!("encoding {encoding:?} is not pixels' (lz4)")));
        }
        let expected = self.dims.byte_len();
        let declared = body.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize);
        if declared != Some(expected) {
            return Err(Invalid::Snapshot(format!("the body holds {declared:?} bytes, a {}x{} canvas {expected}", self.dims.width, self.dims.height)));
        }
        let bytes = lz4_flex::block::decompress(&body[4..], expected).map_err(|e| Invalid::Snapshot(e.to_string()))?;
        Raster::from_bytes(self.dims, bytes)
            .map(|r| Box::new(r) as Box<dyn State>)
            .ok_or_else(|| Invalid::Snapshot(format!("pixels do not decompress to {expected} bytes")))
    }
}

impl State for Raster {
    fn apply(&mut self, data: &Data) -> Result<(), Invalid> {
        let p: Paint = serde_json::from_str(data.get()).map_err(|e| Invalid::Data(e.to_string()))?;
        self.paint(&p);
        Ok(())
    }

    fn try_apply(&mut self, data: &Data, _max_state_bytes: usize) -> Result<(), Invalid> {
        self.apply(data)
    }

    fn encode(&self) -> (&'static str, Vec<u8>) {
        ("lz4", lz4_flex::compress_prepend_size(&self.bytes))
    }

    fn write_json(&self, out: &mut Vec<u8>) {
        let form = Form { width: self.dims.width, height: self.dims.height, pixels: &self.base64() };
        serde_json::to_writer(out, &form).expect("a canvas serialises");
    }

    fn hash(&self) -> String {
        sha256_hex(&self.bytes)
    }

    fn byte_len(&self) -> usize {
        self.bytes.len()
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

    const M: Pixels = Pixels { dims: CanvasDims { width: 3, height: 2 } };

    #[test]
    fn publications_are_checked_against_the_canvas() {
        for (d, want) in [
            (r##"{"x":2,"y":1,"color":"#010203"}"##, Ok(())),
            (r##"{"x":3,"y":0,"color":"#010203"}"##, Err(Invalid::OutOfBounds { field: "x", limit: 3 })),
            (r##"{"x":0,"y":2,"color":"#010203"}"##, Err(Invalid::OutOfBounds { field: "y", limit: 2 })),
        ] {
            assert_eq!(M.validate(&data(d)), want, "{d}");
        }
        for bad in [r#"{"x":0,"y":0,"color":"red"}"#, r##"{"x":0,"y":0}"##, r##"{"x":0,"y":0,"color":"#000000","z":1}"##, "1"] {
            assert!(matches!(M.validate(&data(bad)), Err(Invalid::Data(_))), "{bad}");
        }
    }

    #[test]
    fn paint_is_row_major_and_the_hash_is_of_the_bytes() {
        let mut s = M.empty();
        assert_eq!(s.hash(), sha256_hex(&[0xff; 18]));
        s.apply(&data(r##"{"x":2,"y":1,"color":"#010203"}"##)).unwrap();
        let r = s.as_any().downcast_ref::<Raster>().unwrap();
        assert_eq!(&r.bytes()[15..18], &[1, 2, 3]);
        assert_eq!(s.hash(), sha256_hex(r.bytes()));
        assert_eq!(s.to_json(), format!(r#"{{"width":3,"height":2,"pixels":"{}"}}"#, r.base64()));
    }

    #[test]
    fn its_snapshot_is_lz4_of_the_bytes() {
        let mut s = M.empty();
        s.apply(&data(r##"{"x":1,"y":1,"color":"#0a0b0c"}"##)).unwrap();
        let (enc, body) = s.encode();
        assert_eq!(enc, "lz4");
        assert_eq!(M.decode(enc, &body).unwrap().hash(), s.hash());
        let other = Pixels { dims: CanvasDims { width: 2, height: 2 } };
        assert!(matches!(other.decode(enc, &body), Err(Invalid::Snapshot(_))), "another size is refused");
        assert!(M.decode("json", &body).is_err());
        assert!(M.decode("lz4", &[1, 2]).is_err());
    }

    #[test]
    fn paint_data_round_trips() {
        let p = Paint { x: 1, y: 2, color: Color([255, 0, 0]) };
        assert_eq!(p.to_data().get(), r##"{"x":1,"y":2,"color":"#ff0000"}"##);
    }
}
