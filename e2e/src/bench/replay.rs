//! Catch-up replay rate: how fast a recovering ws-node replays and applies the log, against a bare
//! librdkafka consumer reading the same records from the same broker (the ceiling).

use super::kafka::{bare_read_all, create_topic, DirectProducer};
use super::report::{Better, Row};
use super::servers::PARTITIONS;
use super::Ctx;
use crate::broker::free_port;
use crate::procs::{eventually, get_json, Service, Timeline};
use anyhow::Context;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What one replay measure found: the medians of its rounds, and each round.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub events: u64,
    pub canvases: usize,
    pub bare_events_per_s: f64,
    pub node_events_per_s: f64,
    /// The node's own catch-up time (`tookMs` of its `[CATCHUP] completed` line), ms.
    pub node_took_ms: u64,
    /// From `POST /admin/start-recovery` to `/health` ready, ms.
    pub node_ready_ms: u64,
    /// Each round's bare rate and node rate, events/s, in the order they ran.
    pub rounds: Vec<(f64, f64)>,
}

/// The median of `xs` (the upper middle of an even count).
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

async fn measure(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let events = ctx.size.replay_events;
    let canvases: Vec<String> = (0..ctx.size.replay_canvases).map(|i| format!("rp-{i}")).collect();
    let topic = format!("bench-replay-{:08x}", rand::random::<u32>());
    create_topic(&ctx.broker.bootstrap, &topic, PARTITIONS as i32).await?;
    println!("[bench]   writing {events} events over {} canvases and {PARTITIONS} partitions to {topic}", canvases.len());
    let mut p = DirectProducer::new(&ctx.broker.bootstrap, &topic, PARTITIONS, ctx.canvas_side, canvases.clone(), false)?;
    let started = Instant::now();
    p.send_round_robin(events, "replay log").await?;
    println!("[bench]   written in {:.1} s", started.elapsed().as_secs_f64());

    // Bare read and node replay alternate, so that both see the machine in the same states.
    let rounds_n = ctx.size.replay_rounds.max(1);
    let mut rounds = Vec::new();
    let mut nodes = Vec::new();
    for round in 1..=rounds_n {
        println!("[bench]   round {round} of {rounds_n}: bare librdkafka consumer reading them from the log start");
        let (bs, topic2) = (ctx.broker.bootstrap.clone(), topic.clone());
        let (n, secs) = tokio::task::spawn_blocking(move || bare_read_all(&bs, &topic2, PARTITIONS)).await??;
        anyhow::ensure!(n == events, "the bare consumer read {n} records, {events} were written");
        let bare = n as f64 / secs;
        println!("[bench]   bare consumer: {n} records in {secs:.2} s = {bare:.0}/s");
        let (count, took, ready_ms) = node_replay(ctx, &topic).await?;
        anyhow::ensure!(count == events, "the node replayed {count} events, {events} were written");
        let rate = count as f64 / (took.max(1) as f64 / 1000.0);
        println!("[bench]   ws-node: {count} events replayed and applied in {took} ms = {rate:.0}/s ({:.0}% of this round's bare consumer); ready {ready_ms} ms after start-recovery", 100.0 * rate / bare);
        rounds.push((bare, rate));
        nodes.push((rate, took, ready_ms));
    }
    let bare = median(&rounds.iter().map(|r| r.0).collect::<Vec<_>>());
    let rate = median(&rounds.iter().map(|r| r.1).collect::<Vec<_>>());
    let (_, took, ready_ms) = nodes.iter().copied().find(|n| n.0 == rate).expect("the median is one of the rounds");
    if rounds_n > 1 {
        println!("[bench]   medians of {rounds_n} rounds: bare {bare:.0}/s, ws-node {rate:.0}/s ({:.0}%)", 100.0 * rate / bare);
    }
    Ok(Outcome { events, canvases: canvases.len(), bare_events_per_s: bare, node_events_per_s: rate, node_took_ms: took, node_ready_ms: ready_ms, rounds })
}

/// A ws-node that starts UP with no state and recovers by replaying the whole of `topic`, in
/// groups of its own: (events replayed, its catch-up's tookMs, start-recovery → ready ms).
async fn node_replay(ctx: &Ctx, topic: &str) -> anyhow::Result<(u64, u64, u64)> {
    let port = free_port()?;
    let tag = format!("{:08x}", rand::random::<u32>());
    let env: BTreeMap<String, String> = [
        ("KAFKA_BOOTSTRAP", ctx.broker.bootstrap.clone()),
        ("KAFKA_TOPIC", topic.to_owned()),
        ("TOPIC_PARTITIONS", PARTITIONS.to_string()),
        ("NODE_ID", "ws-replay".into()),
        ("CANVAS_WIDTH", ctx.canvas_side.to_string()),
        ("CANVAS_HEIGHT", ctx.canvas_side.to_string()),
        ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
        ("ADMIN_TOKEN", crate::fleet::ADMIN_TOKEN.to_owned()),
        // No gateway leads this node: no control topic to read.
        ("CONTROL_TOPIC", String::new()),
        ("BROADCAST_GROUP", format!("bench-broadcast-{tag}")),
        ("CATCHUP_GROUP", format!("bench-catchup-{tag}")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let tl = Timeline::new(false);
    let mut node = Service::new("ws-replay", "ws-node", port, env, tl.clone());
    node.start()?;
    let http = reqwest::Client::new();
    let url = node.url();
    let result = async {
        eventually("the replay node to answer /health", Duration::from_secs(30), || async {
            Ok(get_json(&http, &format!("{url}/health")).await.ok().map(|_| ()))
        })
        .await?;
        let t0 = Instant::now();
        let r = http.post(format!("{url}/admin/start-recovery")).bearer_auth(crate::fleet::ADMIN_TOKEN).json(&serde_json::json!({})).send().await?;
        anyhow::ensure!(r.status().is_success(), "start-recovery answered {}", r.status());
        println!("[bench]   ws-node replaying (start-recovery sent)");
        let catchup = eventually("the replay node to be ready", Duration::from_secs(900), || async {
            let h = get_json(&http, &format!("{url}/health")).await?;
            if h["ready"] == true {
                Ok(Some(h["catchup"].clone()))
            } else {
                Err(format!("replayed {}", h["catchup"]["replay_count"]))
            }
        })
        .await?;
        let ready_ms = t0.elapsed().as_millis() as u64;
        let count = catchup["replay_count"].as_u64().context("replay_count in the catch-up report")?;
        let took = catchup["took_ms"].as_u64().context("took_ms in the catch-up report")?;
        Ok((count, took, ready_ms))
    }
    .await;
    node.terminate(Duration::from_secs(10)).await;
    result
}

/// Runs the replay measure; returns the rows.
pub async fn run(ctx: &Ctx) -> Vec<Row> {
    println!("[bench] catch-up replay of {} events", ctx.size.replay_events);
    let o = match measure(ctx).await {
        Ok(o) => o,
        Err(e) => {
            ctx.error(format!("replay: {e:#}"));
            return Vec::new();
        }
    };
    let setup = format!(
        "{} events ({} B JSON values) over {} canvases and {PARTITIONS} partitions, written before the reader starts; the ws-node starts with no state \
         and replays from the log start to the high watermarks (rate = replayCount / its tookMs: decode, apply to the canvas, keep recent events); \
         the ceiling is a bare librdkafka BaseConsumer with the node's catch-up fetch settings, reading the same records without decoding; \
         {} round(s) of a bare read then a node's replay, medians (rounds, bare/node events/s: {}); {}",
        o.events, super::kafka::event("canvas-1", 1, ctx.canvas_side).to_json().len(), o.canvases, o.rounds.len(),
        o.rounds.iter().map(|(b, n)| format!("{b:.0}/{n:.0}")).collect::<Vec<_>>().join(", "), ctx.broker_label
    );
    let why = "no replay from the log: its consumer starts at the committed offset, history lives in memory";
    let ratio = o.node_events_per_s / o.bare_events_per_s;
    vec![
        Row::ours_only("replay", "bare librdkafka consumer, events/s (the ceiling)", setup.clone(), Better::Higher, o.bare_events_per_s, why),
        Row::ours_only("replay", "ws-node catch-up, events/s replayed and applied", setup.clone(), Better::Higher, o.node_events_per_s, why),
        Row::ours_only("replay", "ws-node catch-up ÷ bare consumer, %", setup.clone(), Better::Higher, 100.0 * ratio, why).with_target("≥ 85%", ratio >= 0.85),
        Row::ours_only("replay", "start-recovery → ready, ms", setup, Better::Lower, o.node_ready_ms as f64, why),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_median_of_the_rounds() {
        for (xs, want) in [(vec![], 0.0), (vec![3.0], 3.0), (vec![5.0, 1.0, 3.0], 3.0), (vec![4.0, 1.0], 4.0)] {
            assert_eq!(super::median(&xs), want, "{xs:?}");
        }
    }
}
