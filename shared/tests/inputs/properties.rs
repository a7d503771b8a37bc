//! Property tests of the parsers of outside input in `shared`: generated valid values serialise
//! and parse back equal; generated near-valid ones (a bad character, an out-of-range number, a
//! wrong type, an unknown field, a truncated value) are refused with the documented error.

use proptest::prelude::*;
use shared::epoch::{self, Epoch};
use shared::event::{ChannelId, ChannelIdError, Color, ColorError, DecodeError, PixelEvent};
use shared::protocol::{Refusal, WsQuery};
use shared::snapshot::{self, Checkpoint, Entry, Snapshot, SnapshotError, CHECKPOINT_KEY};
use shared::CanvasDims;

fn canvas_id() -> impl Strategy<Value = ChannelId> {
    "[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9_-]{1,60})?".prop_map(|s| ChannelId::parse(&s).expect("the regex is the rule"))
}

fn an_epoch() -> impl Strategy<Value = Epoch> {
    "[A-Za-z0-9_-]{1,100}".prop_map(|s| Epoch::parse(&s).expect("the regex is the rule"))
}

fn color() -> impl Strategy<Value = Color> {
    any::<[u8; 3]>().prop_map(Color)
}

fn ws_query() -> impl Strategy<Value = WsQuery> {
    let refusal = prop_oneof![Just(Refusal::Http), Just(Refusal::Frame)];
    (
        canvas_id(),
        any::<bool>(),
        any::<u64>(),
        proptest::option::of(an_epoch()),
        refusal,
        proptest::option::of(".{0,40}"),
    )
        .prop_map(|(id, as_channel, since, epoch, refusal, token)| WsQuery {
            channel: as_channel.then(|| id.clone()),
            canvas: (!as_channel).then_some(id),
            since,
            epoch,
            refusal,
            token,
        })
}

/// The query string a client sends for `q`.
fn query_of(q: &WsQuery) -> String {
    match q.refusal {
        Refusal::Frame => format!("{}&refusal=frame", q.resume_query()),
        Refusal::Http => q.resume_query(),
    }
}

/// Events `start`, `start + 1`, ... of one canvas, as one record carries them.
fn group() -> impl Strategy<Value = Vec<PixelEvent>> {
    (
        canvas_id(),
        1..=u64::MAX - 300,
        proptest::collection::vec((any::<u32>(), any::<u32>(), color(), any::<u64>()), 1..=12),
    )
        .prop_map(|(canvas, start, px)| {
            px.into_iter()
                .enumerate()
                .map(|(i, (x, y, color, published_at_ms))| PixelEvent {
                    canvas: canvas.clone(),
                    version: start + i as u64,
                    x,
                    y,
                    color,
                    published_at_ms,
                })
                .collect()
        })
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (
        canvas_id(),
        1u32..=16,
        1u32..=16,
        any::<u64>(),
        any::<u64>(),
        any::<i64>(),
        any::<bool>(),
    )
        .prop_flat_map(|(canvas, width, height, version, epoch, offset, runs)| {
            let dims = CanvasDims { width, height };
            // Either noise or a few colours (which LZ4 compresses with matches).
            let byte = if runs {
                (0u8..3).boxed()
            } else {
                any::<u8>().boxed()
            };
            proptest::collection::vec(byte, dims.byte_len()).prop_map(move |pixels| Snapshot {
                canvas: canvas.clone(),
                version,
                epoch,
                dims,
                offset,
                pixels,
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_ws_query_round_trips(q in ws_query()) {
        let raw = query_of(&q);
        prop_assert_eq!(shared::http::parse_ws_query(&raw).unwrap(), q);
    }

    /// One parameter of a valid query made invalid: a 400 naming exactly that parameter.
    #[test]
    fn a_bad_ws_query_parameter_is_named(
        q in ws_query(),
        which in 0usize..7,
        n in 1u64..u64::MAX,
        junk in "[A-Za-z0-9]{0,8}[ /.+%!~\u{e9}][A-Za-z0-9]{0,8}",
    ) {
        let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let (param, value) = match which {
            0 => ("since", format!("-{n}")),
            1 => ("since", format!("{}{}", u64::MAX, n % 10)),
            2 => ("since", format!("{n}x")),
            3 => ("canvas", enc(&junk)),
            4 => ("canvas", "a".repeat(129 + (n % 100) as usize)),
            5 => ("epoch", enc(&junk)),
            _ => ("refusal", enc(&junk)),
        };
        // The bad parameter replaces the valid one (serde refuses a parameter given twice).
        let mut raw = format!("{param}={value}");
        for part in query_of(&q).split('&') {
            if part.split('=').next() != Some(param) {
                raw = format!("{raw}&{part}");
            }
        }
        let e = shared::http::parse_ws_query(&raw).unwrap_err();
        prop_assert_eq!(e.status.as_u16(), 400);
        prop_assert_eq!(e.body.error.as_str(), "invalid_field");
        prop_assert_eq!(e.body.field.as_deref(), Some(param), "{}: {}", raw, e.body.message);
    }

    #[test]
    fn a_record_round_trips(events in group()) {
        let value = PixelEvent::record_value(&events);
        prop_assert_eq!(value.starts_with('['), events.len() > 1);
        prop_assert_eq!(PixelEvent::decode_record(Some(value.as_bytes())).unwrap(), events);
    }

    /// One field of a valid event made invalid (unknown field, out-of-range number, wrong type,
    /// missing field, bad colour or canvas): the record is refused, never read as another event.
    #[test]
    fn a_near_valid_record_is_refused(events in group(), which in 0usize..9, n in any::<u64>(), name in "[a-z_]{1,12}") {
        let ev = &events[0];
        let fields = ["canvas", "version", "x", "y", "color", "published_at_ms"];
        prop_assume!(!fields.contains(&name.as_str()));
        let mut parts = vec![
            format!("\"canvas\":\"{}\"", ev.canvas),
            format!("\"version\":{}", ev.version),
            format!("\"x\":{}", ev.x),
            format!("\"y\":{}", ev.y),
            format!("\"color\":\"{}\"", ev.color),
            format!("\"published_at_ms\":{}", ev.published_at_ms),
        ];
        match which {
            0 => parts.push(format!("\"{name}\":{n}")),
            1 => parts[1] = format!("\"version\":-{}", n.max(1)),
            2 => parts[1] = format!("\"version\":{}{}", u64::MAX, n % 10),
            3 => parts[2] = format!("\"x\":{}", u64::from(u32::MAX) + 1 + n % 1000),
            4 => parts[3] = format!("\"y\":\"{n}\""),
            5 => parts[4] = format!("\"color\":\"#{:07x}\"", n % 0x1000_0000),
            6 => parts[0] = format!("\"canvas\":\"{}\"", "a".repeat(129 + (n % 10) as usize)),
            7 => { parts.remove((n % 6) as usize); }
            _ => parts[5] = format!("\"published_at_ms\":{n}.5"),
        }
        let value = format!("{{{}}}", parts.join(","));
        let got = PixelEvent::decode_record(Some(value.as_bytes()));
        prop_assert!(matches!(got, Err(DecodeError::Json(_))), "{}: {:?}", value, got);
        // The same event inside a group is refused too.
        let group = format!("[{}]", value);
        prop_assert!(PixelEvent::decode_record(Some(group.as_bytes())).is_err(), "{}", group);
    }

    #[test]
    fn a_snapshot_round_trips(s in snapshot()) {
        let key = s.canvas.as_str().as_bytes().to_vec();
        prop_assert_eq!(snapshot::decode(Some(&key), Some(&s.encode())).unwrap(), Some(Entry::Canvas(s)));
    }

    #[test]
    fn a_checkpoint_round_trips(offset in any::<i64>(), floor in any::<u64>()) {
        let c = Checkpoint { offset, floor };
        prop_assert_eq!(snapshot::decode(Some(CHECKPOINT_KEY.as_bytes()), Some(&c.encode())).unwrap(), Some(Entry::Checkpoint(c)));
    }

    /// Any strict prefix of a valid snapshot or checkpoint value is refused, never read as a
    /// smaller or partly-blank canvas.
    #[test]
    fn a_truncated_snapshot_is_refused(s in snapshot(), cut in any::<prop::sample::Index>()) {
        let value = s.encode();
        let len = cut.index(value.len());
        let got = snapshot::decode(Some(s.canvas.as_str().as_bytes()), Some(&value[..len]));
        prop_assert!(got.is_err(), "prefix of {} bytes of {}: {:?}", len, value.len(), got);
        let c = Checkpoint { offset: s.offset, floor: 0 }.encode();
        let len = cut.index(c.len());
        prop_assert!(snapshot::decode(Some(CHECKPOINT_KEY.as_bytes()), Some(&c[..len])).is_err());
    }

    /// A snapshot whose header says another size than its pixels is refused.
    #[test]
    fn a_snapshot_of_the_wrong_size_is_refused(s in snapshot(), dw in 1u32..4) {
        let mut wrong = s.clone();
        wrong.dims.width += dw;
        let value = wrong.encode();
        let got = snapshot::decode(Some(s.canvas.as_str().as_bytes()), Some(&value));
        prop_assert!(matches!(got, Err(SnapshotError::Pixels { .. })), "{:?}", got);
    }

    #[test]
    fn a_canvas_id_round_trips(id in canvas_id()) {
        prop_assert_eq!(ChannelId::parse(id.as_str()), Ok(id.clone()));
        let json = serde_json::to_string(&id).unwrap();
        prop_assert_eq!(serde_json::from_str::<ChannelId>(&json).unwrap(), id);
    }

    #[test]
    fn a_bad_canvas_id_names_its_rule(
        head in "[A-Za-z0-9_-]{0,30}",
        bad in "[ -,./;-@\\[-^`{-~\u{80}-\u{10ffff}]",
        tail in "[A-Za-z0-9_-]{0,30}",
        extra in 129usize..300,
    ) {
        let with_bad = format!("{head}{bad}{tail}");
        prop_assert_eq!(ChannelId::parse(&with_bad), Err(if with_bad.len() > 128 { ChannelIdError::TooLong } else { ChannelIdError::BadChar }));
        prop_assert_eq!(ChannelId::parse(&format!("{head}:{tail}")).is_ok(), !head.is_empty() && !tail.is_empty());
        prop_assert_eq!(ChannelId::parse(&format!("{head}:{tail}:x")), Err(ChannelIdError::BadChar));
        prop_assert_eq!(ChannelId::parse(&"a".repeat(extra)), Err(ChannelIdError::TooLong));
    }

    #[test]
    fn a_color_round_trips_in_either_case(c in color()) {
        let s = c.to_string();
        prop_assert_eq!(Color::parse(&s), Ok(c));
        prop_assert_eq!(Color::parse(&s.to_ascii_uppercase()), Ok(c));
    }

    #[test]
    fn a_near_valid_color_is_refused(c in color(), at in 0usize..7, bad in "[g-zG-Z#+ \u{e9}]") {
        let mut s: Vec<char> = c.to_string().chars().collect();
        s[at] = bad.chars().next().unwrap();
        let s: String = s.into_iter().collect();
        prop_assume!(s != c.to_string());
        prop_assert_eq!(Color::parse(&s), Err(ColorError), "{}", s);
        prop_assert_eq!(Color::parse(&c.to_string()[1..]), Err(ColorError));
        let longer = format!("{c}0");
        prop_assert_eq!(Color::parse(&longer), Err(ColorError));
    }

    #[test]
    fn an_epoch_round_trips(e in an_epoch()) {
        prop_assert_eq!(Epoch::parse(e.as_str()), Ok(e.clone()));
        let json = serde_json::to_string(&e).unwrap();
        prop_assert_eq!(serde_json::from_str::<Epoch>(&json).unwrap(), e);
    }

    #[test]
    fn a_bad_epoch_is_refused(e in an_epoch(), bad in "[ +/.=%\u{e9}]", extra in 1usize..50) {
        let with_bad = format!("{e}{bad}");
        prop_assert!(Epoch::parse(&with_bad).is_err());
        prop_assert!(Epoch::parse(&"x".repeat(epoch::MAX_LEN + extra)).is_err());
    }
}
