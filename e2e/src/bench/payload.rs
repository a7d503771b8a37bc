//! What the benchmark's records carry, the same bytes for every system: today's pixel events
//! (format 1, a canvas of the default namespace) or publications of `stream` channels with data of
//! a given size (format 2, channels of the [`NAMESPACE`] namespace, a `stream` model in the
//! [`fleet_toml`] the fleet is started with).
//!
//! A `stream` record is the fleet's format 2 ([`shared::record`]): value
//! `{"channel":"bench:…","version":N,"data":{"n":N,"text":"…"},"published_at_ms":T}` with `data`
//! exactly the payload's size, headers `fleet-format: 2` and `fleet-namespaces` (the fingerprint of
//! [`fleet_toml`]). The peers consume the same records: Centrifugo publishes each value as is to the
//! channel in its `centrifugo-channels` header (namespace `bench` configured like the default one),
//! Socket.IO emits each value, parsed, to the room of its key; their clients receive the record
//! value as JSON, as the fleet's receive its `publication` frame.

use shared::record::{FORMAT_HEADER, NAMESPACES_HEADER};

/// The namespace of the benchmark's `stream` channels.
pub const NAMESPACE: &str = "bench";

/// Most data bytes per second a latency path offers on `stream` channels: a size runs at the loads
/// where rate × size stays within it (100 B up to 50,000 events/s, 1 KiB up to 10,000, 16 KiB at
/// 1,000), so that no path measures a broker or a client that cannot take the bytes on two cores.
pub const LATENCY_DATA_RATE_CAP: f64 = 16.0 * 1024.0 * 1024.0;

/// What each record of a case carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Payload {
    /// Today's pixel event (format 1) of a canvas of the default namespace (`pixels`).
    Pixels,
    /// A publication of a `stream` channel of [`NAMESPACE`] whose `data` is this many bytes of JSON.
    Stream { data_bytes: usize },
}

impl Payload {
    /// `stream` data of 100 B, 1 KiB and 16 KiB: the sizes the measures run.
    pub const STREAM_100_B: Payload = Payload::Stream { data_bytes: 100 };
    pub const STREAM_1_KIB: Payload = Payload::Stream { data_bytes: 1024 };
    pub const STREAM_16_KIB: Payload = Payload::Stream { data_bytes: 16 * 1024 };

    /// How the reports name it: `pixels`, `stream 100 B`, `stream 1 KiB`, `stream 16 KiB`.
    pub fn label(&self) -> String {
        match self {
            Payload::Pixels => "pixels".into(),
            Payload::Stream { data_bytes } if *data_bytes >= 1024 && data_bytes % 1024 == 0 => format!("stream {} KiB", data_bytes / 1024),
            Payload::Stream { data_bytes } => format!("stream {data_bytes} B"),
        }
    }

    /// The channel id of a case's channel `name`: the name itself (a canvas) or `bench:<name>`.
    pub fn channel(&self, name: &str) -> String {
        match self {
            Payload::Pixels => name.to_owned(),
            Payload::Stream { .. } => format!("{NAMESPACE}:{name}"),
        }
    }

    /// Whether a latency path offers it at `rate` events/s (see [`LATENCY_DATA_RATE_CAP`]).
    pub fn fits_rate(&self, rate: f64) -> bool {
        match self {
            Payload::Pixels => true,
            Payload::Stream { data_bytes } => rate * *data_bytes as f64 <= LATENCY_DATA_RATE_CAP,
        }
    }
}

/// The fleet's `fleet.toml` in the benchmarks: the default namespace is today's canvases of
/// `side` × `side` pixels, and [`NAMESPACE`] is a `stream` namespace with the default limits (64 KiB
/// of data a publication).
pub fn fleet_toml(side: u32) -> String {
    format!("[default]\nmodel = \"pixels\"\nwidth = {side}\nheight = {side}\n\n[namespaces.{NAMESPACE}]\nmodel = \"stream\"\n")
}

/// The namespaces fingerprint of [`fleet_toml`] (what the publisher would put in its records'
/// `fleet-namespaces` header).
pub fn fingerprint(side: u32) -> String {
    let dims = shared::CanvasDims { width: side, height: side };
    shared::namespaces::Namespaces::from_toml(&fleet_toml(side), dims).expect("the bench's fleet.toml is valid").fingerprint().to_owned()
}

/// Writes the values of `stream` records of one size: the text of every `data` is the same
/// padding, only its `n` (the version) changes, so each value is written without parsing.
#[derive(Debug, Clone)]
pub struct StreamRecords {
    data_bytes: usize,
    /// The namespaces fingerprint written into every record's header.
    pub fingerprint: String,
    /// Letters to pad `text` with; its start is cut to the length each version needs.
    padding: String,
}

impl StreamRecords {
    /// Records of `data_bytes` bytes of data for a fleet of canvases of `side` pixels.
    pub fn new(data_bytes: usize, side: u32) -> Self {
        let padding = "abcdefghijklmnopqrstuvwxyz".chars().cycle().take(data_bytes).collect();
        Self { data_bytes, fingerprint: fingerprint(side), padding }
    }

    /// The record headers besides `centrifugo-channels`: `fleet-format: 2` and the fingerprint.
    pub fn headers(&self) -> [(&'static str, &[u8]); 2] {
        [(FORMAT_HEADER, b"2"), (NAMESPACES_HEADER, self.fingerprint.as_bytes())]
    }

    /// The `data` of `version`: `{"n":<version>,"text":"abc…"}`, exactly the size's bytes (or the
    /// shortest such object, 20 bytes and more, when the size is smaller).
    pub fn data(&self, version: u64) -> String {
        let head = format!("{{\"n\":{version},\"text\":\"");
        let pad = self.data_bytes.saturating_sub(head.len() + 2);
        format!("{head}{}\"}}", &self.padding[..pad])
    }

    /// The record value of `version` of `channel`, published at `published_at_ms`.
    pub fn value(&self, channel: &str, version: u64, published_at_ms: u64) -> String {
        // Channel ids are letters, digits, `-`, `_` and one `:`: nothing to escape in JSON.
        format!("{{\"channel\":\"{channel}\",\"version\":{version},\"data\":{},\"published_at_ms\":{published_at_ms}}}", self.data(version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::record::Publication;

    #[test]
    fn labels_and_channels() {
        assert_eq!(Payload::Pixels.label(), "pixels");
        assert_eq!(Payload::STREAM_100_B.label(), "stream 100 B");
        assert_eq!(Payload::STREAM_1_KIB.label(), "stream 1 KiB");
        assert_eq!(Payload::STREAM_16_KIB.label(), "stream 16 KiB");
        assert_eq!(Payload::Pixels.channel("fo1-a0"), "fo1-a0");
        assert_eq!(Payload::STREAM_1_KIB.channel("fo1-a0"), "bench:fo1-a0");
    }

    #[test]
    fn the_latency_paths_offer_at_most_the_cap_of_data() {
        assert!(Payload::Pixels.fits_rate(1e9));
        assert!(Payload::STREAM_100_B.fits_rate(50_000.0));
        assert!(Payload::STREAM_1_KIB.fits_rate(10_000.0) && !Payload::STREAM_1_KIB.fits_rate(50_000.0));
        assert!(Payload::STREAM_16_KIB.fits_rate(1_000.0) && !Payload::STREAM_16_KIB.fits_rate(10_000.0));
    }

    #[test]
    fn a_value_is_a_format_2_publication_with_data_of_the_size() {
        for size in [100, 1024, 16 * 1024] {
            let records = StreamRecords::new(size, 64);
            for version in [1, 99, 123_456_789] {
                let channel = Payload::Stream { data_bytes: size }.channel("lk00ab12-3");
                let value = records.value(&channel, version, 1_764_400_000_000);
                let pubs = Publication::decode_record(Some(b"2"), Some(value.as_bytes())).expect("a format-2 record");
                assert_eq!(pubs.len(), 1);
                let p = &pubs[0];
                assert_eq!((p.channel.as_str(), p.version, p.published_at_ms), (channel.as_str(), version, 1_764_400_000_000));
                assert_eq!(p.data.get().len(), size, "data of {size} B at version {version}");
                assert_eq!(p.data.get(), records.data(version));
                // The same bytes as the publisher's own encoder writes.
                assert_eq!(Publication::record_value(&pubs), value.as_bytes());
            }
        }
    }

    #[test]
    fn the_headers_say_format_2_and_the_fleet_toml_s_fingerprint() {
        let records = StreamRecords::new(100, 64);
        let [(f, two), (n, fp)] = records.headers();
        assert_eq!((f, two), ("fleet-format", &b"2"[..]));
        assert_eq!(n, "fleet-namespaces");
        let dims = shared::CanvasDims { width: 64, height: 64 };
        let ns = shared::namespaces::Namespaces::from_toml(&fleet_toml(64), dims).unwrap();
        assert_eq!(fp, ns.fingerprint().as_bytes());
        assert_ne!(fingerprint(64), fingerprint(8), "the canvas size is part of how records are read");
        assert_eq!(ns.of(&shared::ChannelId::parse("bench:x").unwrap()).unwrap().kind(), shared::model::ModelKind::Stream);
    }
}
