//! The latency measure's rows: every path at every load, the targets beside them.

use super::{pct, Dist, Level};
use crate::bench::payload::Payload;
use crate::bench::peers::Peer;
use crate::bench::report::{Better, Cell, Row};
use crate::bench::subs::System;
use crate::bench::Ctx;

pub(super) fn rows(ctx: &Ctx, levels: &[Level]) -> Vec<Row> {
    let mut rows = Vec::new();
    let peers_run = ctx.systems().len() > 1;
    for l in levels {
        let bare = l.bare.as_ref();
        let setup = format!(
            "offered {} events/s round-robin over {} canvases, {} s after {:.1} s at the same rate not measured (every path alike), one subscriber per canvas (the fleet: one on the ws-node and one through the gateway); \
             latency = client receive − the moment the bench sent the event (the HTTP POST that carried it for \"publish\" and \"batch publish\", librdkafka produce() for \"produce\"), same clock; the publisher has one record per canvas in flight and sends a canvas's publishes that waited for it as one record (group commit); \
             bare baseline: librdkafka producer → librdkafka consumer on the same topic layout{}; {}",
            l.rate, ctx.size.latency_canvases, ctx.size.duration.as_secs(), ctx.size.latency_warmup.as_secs_f64(),
            bare.map_or(String::new(), |b| format!(" (p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms; cores {} busy)", b.p50_ms, b.p99_ms, b.p999_ms, pct(b.cores_busy_pct))),
            ctx.broker_label
        );
        let pick = |d: &Option<Dist>, f: fn(&Dist) -> f64, run: bool| -> Cell {
            match d {
                Some(d) => Cell::Value(f(d)),
                None if run => Cell::na("failed: see errors"),
                None => Cell::na("not run (--no-peers)"),
            }
        };
        for (q, f) in [("p50", (|d: &Dist| d.p50_ms) as fn(&Dist) -> f64), ("p99", |d: &Dist| d.p99_ms), ("p99.9", |d: &Dist| d.p999_ms)] {
            // Publish through the fleet's HTTP API (peers have no publisher: their row is the next).
            for (how, d) in [
                ("HTTP publish", &l.fleet_http_direct),
                ("HTTP batch publish (the events due each ms in one POST /pixels)", &l.fleet_batch_direct),
            ] {
                let mut r = Row {
                    section: "latency".into(),
                    figure: format!(
                        "{} ev/s: {how} → client {q}, ms (achieved {:.0} ev/s; cores {} busy)",
                        l.rate,
                        d.as_ref().map_or(0.0, |d| d.achieved_rate),
                        pct(d.as_ref().and_then(|d| d.cores_busy_pct))
                    ),
                    setup: setup.clone(),
                    better: Better::Lower,
                    ours: pick(d, f, true),
                    centrifugo: Cell::na("they have no HTTP publisher; their Kafka-in latency is in the produce rows"),
                    socketio: Cell::na("they have no HTTP publisher; their Kafka-in latency is in the produce rows"),
                    target: None,
                    met: None,
                };
                if q == "p99" {
                    if let (Some(o), Some(b)) = (d, bare) {
                        let target = format!("≤ 2× bare produce→consume p99 ({:.2} ms)", b.p99_ms);
                        // The target is at the offered load: a path that fell behind it missed,
                        // whatever the latency of what it did accept.
                        r = if o.achieved_rate >= 0.95 * l.rate {
                            r.with_target(target, o.p99_ms <= 2.0 * b.p99_ms)
                        } else {
                            r.with_target(format!("{target} at {} ev/s: fell behind ({:.0} ev/s accepted)", l.rate, o.achieved_rate), false)
                        };
                    }
                }
                rows.push(r);
            }
            if let Some(bt) = &l.bare_txn {
                rows.push(Row::ours_only(
                "latency",
                &format!(
                    "{} ev/s: bare librdkafka in Kafka transactions (the publisher's protocol alone, {:.1} events per transaction) produce → consume {q}, ms",
                    l.rate,
                    l.bare_txn_events_per_txn.unwrap_or(0.0)
                ),
                format!(
                    "one transactional producer: each transaction carries every event that came due while the previous one committed (begin, produce, wait for the acknowledgements, commit), timed from when the event came due; a read_committed consumer; cores {} busy; {}",
                    pct(bt.cores_busy_pct),
                    ctx.broker_label
                ),
                Better::Neither,
                f(bt),
                "a baseline of the protocol, not of a system",
            ));
            }
            rows.push(Row {
                section: "latency".into(),
                figure: format!("{} ev/s: Kafka produce → client {q}, ms", l.rate),
                setup: setup.clone(),
                better: Better::Lower,
                ours: pick(&l.fleet_kafka, f, true),
                centrifugo: pick(&l.centrifugo, f, peers_run),
                socketio: pick(&l.socketio, f, peers_run),
                target: None,
                met: None,
            });
        }
        // How full the machine was while each system took the same Kafka-in load. Context for
        // the latencies above, not a score: it counts every process on the machine (the broker,
        // the bench, the fleet's idle publisher and gateway), so it gets no ratio.
        let busy = |d: &Option<Dist>, run: bool| match d {
            Some(Dist { cores_busy_pct: Some(p), .. }) => Cell::Value(*p),
            Some(_) => Cell::na("could not read /proc/stat"),
            None => pick(d, |d| d.p50_ms, run),
        };
        rows.push(Row {
            section: "latency".into(),
            figure: format!(
                "{} ev/s: cores busy while producing straight to Kafka, % of all cores (every process on the machine; bare librdkafka: {})",
                l.rate,
                pct(bare.and_then(|b| b.cores_busy_pct))
            ),
            setup: setup.clone(),
            better: Better::Neither,
            ours: busy(&l.fleet_kafka, true),
            centrifugo: busy(&l.centrifugo, peers_run),
            socketio: busy(&l.socketio, peers_run),
            target: None,
            met: None,
        });
        for (how, direct, gateway) in [
            ("one event per request", &l.fleet_http_direct, &l.fleet_http_gateway),
            ("batch publish", &l.fleet_batch_direct, &l.fleet_batch_gateway),
        ] {
            if let (Some(d), Some(g)) = (direct, gateway) {
                let added = g.p99_ms - d.p99_ms;
                let mut row = Row::ours_only(
                    "latency",
                    &format!("{} ev/s ({how}): what the gateway proxy adds at p99, ms (p50: {:.2})", l.rate, g.p50_ms - d.p50_ms),
                    setup.clone(),
                    Better::Lower,
                    added,
                    "no proxy of theirs",
                );
                // When the publish path fell behind the offered load, both sides queue for seconds
                // and their difference says nothing about the proxy.
                if d.achieved_rate >= 0.95 * l.rate {
                    row = row.with_target("< 1 ms", added < 1.0);
                } else {
                    row.target = Some(format!("< 1 ms — not judged: the publish path fell behind ({:.0} of {} ev/s accepted)", d.achieved_rate, l.rate));
                }
                rows.push(row);
            }
        }
        // Where the publish path's time goes: how much of it passes before the publisher answers
        // (its record is in the log then).
        for (how, answer, delivered) in [
            ("one event per request", &l.fleet_http_answer, &l.fleet_http_direct),
            ("batch publish", &l.fleet_batch_answer, &l.fleet_batch_direct),
        ] {
            if let (Some(a), Some(d)) = (answer, delivered) {
                rows.push(Row::ours_only(
                    "latency",
                    &format!("{} ev/s ({how}): request → HTTP answer p99, ms (p50: {:.2}; → client p99: {:.2})", l.rate, a.p50_ms, d.p99_ms),
                    setup.clone(),
                    Better::Lower,
                    a.p99_ms,
                    "they have no HTTP publisher",
                ));
            }
        }
        let missing: u64 = [&l.fleet_http_direct, &l.fleet_http_gateway, &l.fleet_batch_direct, &l.fleet_batch_gateway, &l.fleet_kafka].iter().filter_map(|d| d.as_ref()).map(|d| d.missing).sum();
        rows.push(Row {
            section: "latency".into(),
            figure: format!("{} ev/s: events not received 2 s after the last was sent", l.rate),
            setup: setup.clone(),
            better: Better::Lower,
            ours: Cell::Value(missing as f64),
            centrifugo: pick(&l.centrifugo, |d| d.missing as f64, peers_run),
            socketio: pick(&l.socketio, |d| d.missing as f64, peers_run),
            target: None,
            met: None,
        });
        rows.extend(stream_rows(ctx, l, peers_run));
    }
    rows
}

/// The rows of `l`'s `stream` paths: each payload's latencies, the cores' busy share and what was
/// not received, per system; then the ratio the target names, `stream` 100 B ÷ pixels at p99.
fn stream_rows(ctx: &Ctx, l: &Level, peers_run: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    let cell = |d: &Option<Dist>, f: &dyn Fn(&Dist) -> Option<f64>, run: bool| -> Cell {
        match d {
            Some(d) => f(d).map_or_else(|| Cell::na("could not read /proc/stat"), Cell::Value),
            None if run => Cell::na("failed: see errors"),
            None => Cell::na("not run (--no-peers)"),
        }
    };
    for sl in &l.stream {
        let Payload::Stream { data_bytes } = sl.payload else { continue };
        let label = sl.payload.label();
        let setup = format!(
            "offered {} events/s round-robin over {} `stream` channels (namespace `{}`), each record a format-2 publication with {data_bytes} B of data, \
             produced straight to Kafka to every system; {} s after {:.1} s at the same rate not measured, on the same server right after its pixel paths, \
             one subscriber per channel (the fleet: on the ws-node); latency = client receive − librdkafka produce() of the record, same clock; {}",
            l.rate, ctx.size.latency_canvases, crate::bench::payload::NAMESPACE, ctx.size.duration.as_secs(), ctx.size.latency_warmup.as_secs_f64(), ctx.broker_label
        );
        let row = |figure: String, better: Better, f: &dyn Fn(&Dist) -> Option<f64>| Row {
            section: "latency".into(),
            figure,
            setup: setup.clone(),
            better,
            ours: cell(&sl.fleet, f, true),
            centrifugo: cell(&sl.centrifugo, f, peers_run),
            socketio: cell(&sl.socketio, f, peers_run),
            target: None,
            met: None,
        };
        for (q, f) in [("p50", (|d: &Dist| Some(d.p50_ms)) as fn(&Dist) -> Option<f64>), ("p99", |d: &Dist| Some(d.p99_ms)), ("p99.9", |d: &Dist| Some(d.p999_ms))] {
            rows.push(row(format!("{} ev/s, {label}: Kafka produce → client {q}, ms", l.rate), Better::Lower, &f));
        }
        rows.push(row(format!("{} ev/s, {label}: cores busy while producing straight to Kafka, % of all cores (every process on the machine)", l.rate), Better::Neither, &|d| d.cores_busy_pct));
        rows.push(row(format!("{} ev/s, {label}: events not received 2 s after the last was sent", l.rate), Better::Lower, &|d| Some(d.missing as f64)));
    }
    rows.extend(p99_ratio_row(l, peers_run));
    rows
}

/// The ratio issue 33's target names at `l`'s load: each system's p99 on `stream` 100 B ÷ its p99
/// on pixel events, both produced straight to Kafka in the same run; ours judged (at most 1.10).
fn p99_ratio_row(l: &Level, peers_run: bool) -> Option<Row> {
    let sl = l.stream.iter().find(|sl| sl.payload == Payload::STREAM_100_B)?;
    let pixel = |s: System| match s {
        System::Fleet => &l.fleet_kafka,
        System::Peer(Peer::Centrifugo) => &l.centrifugo,
        System::Peer(Peer::SocketIo) => &l.socketio,
    };
    let ratio = |s: System| match (sl.of(s), pixel(s)) {
        (Some(st), Some(px)) => Cell::Value(st.p99_ms / px.p99_ms.max(1e-9)),
        _ if s != System::Fleet && !peers_run => Cell::na("not run (--no-peers)"),
        _ => Cell::na("failed: see errors"),
    };
    let ours = ratio(System::Fleet);
    let mut row = Row {
        section: "latency".into(),
        figure: format!("{} ev/s: {} ÷ pixels, Kafka produce → client p99 (same run)", l.rate, sl.payload.label()),
        setup: format!("the p99 rows above of the `{}` and the pixel Kafka-in paths, same server, same load", sl.payload.label()),
        better: Better::Neither,
        ours: ours.clone(),
        centrifugo: ratio(System::Peer(Peer::Centrifugo)),
        socketio: ratio(System::Peer(Peer::SocketIo)),
        target: None,
        met: None,
    };
    if let Cell::Value(r) = ours {
        row = row.with_target("≤ 1.10 (ours within 10 % of pixels, or better)", r <= 1.10);
    }
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::latency::StreamLevel;

    fn p99(ms: f64) -> Option<Dist> {
        Some(Dist { samples: 1000, p50_ms: ms / 2.0, p99_ms: ms, p999_ms: ms * 2.0, missing: 0, achieved_rate: 1000.0, cores_busy_pct: Some(50.0) })
    }

    #[test]
    fn the_p99_ratio_is_stream_100_b_over_pixels_per_system() {
        let mut l = Level { rate: 1000.0, fleet_kafka: p99(4.0), centrifugo: p99(5.0), socketio: p99(10.0), ..Level::default() };
        assert!(p99_ratio_row(&l, true).is_none(), "no stream path, no ratio");
        l.stream = vec![
            StreamLevel { payload: Payload::STREAM_1_KIB, fleet: p99(8.0), centrifugo: None, socketio: None },
            StreamLevel { payload: Payload::STREAM_100_B, fleet: p99(4.2), centrifugo: p99(6.0), socketio: None },
        ];
        let r = p99_ratio_row(&l, true).expect("a 100 B path");
        assert!(matches!(r.ours, Cell::Value(v) if (v - 1.05).abs() < 1e-9), "{:?}", r.ours);
        assert!(matches!(r.centrifugo, Cell::Value(v) if (v - 1.2).abs() < 1e-9));
        assert!(matches!(r.socketio, Cell::NotApplicable { .. }));
        assert_eq!(r.met, Some(true));
        l.stream[1].fleet = p99(4.5);
        assert_eq!(p99_ratio_row(&l, true).unwrap().met, Some(false), "1.125 is more than 10 % above pixels");
        l.stream[1].fleet = None;
        let r = p99_ratio_row(&l, false).unwrap();
        assert_eq!(r.met, None, "not judged without our figure");
        assert!(matches!(&r.socketio, Cell::NotApplicable { not_applicable } if not_applicable.contains("--no-peers")));
    }
}
