//! The latency measure's rows: every path at every load, the targets beside them.

use super::{pct, Dist, Level};
use crate::bench::report::{Better, Cell, Row};
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
    }
    rows
}
