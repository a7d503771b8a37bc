//! The peers of the benchmarks, end to end on a real broker: Apache Kafka (KRaft, on the JVM),
//! then for each peer (Centrifugo, Socket.IO) a fresh 6-partition topic, the peer consuming it,
//! 3 clients on each of 2 canvases and of 2 `stream` channels (`bench:…`), and 20 events per
//! channel produced the way the benchmark does (key = channel, explicit partition,
//! `centrifugo-channels` header): pixel events to the canvases, format-2 publications with 16 KiB
//! of data to the stream channels. Every client must get exactly versions 1..=20 of its channel,
//! in order, and a stream channel's client every publication's data as it was produced (the
//! same bytes: a peer that passed the record on as a string holding it would escape them).
//!
//! Fails, never skips, when a peer cannot be installed or started: its install script needs Go
//! and the Go module proxy (Centrifugo), Node.js 20.19+ and the npm registry (Socket.IO).
//!
//! `cargo test --release -p e2e --test suite peers:: -- --nocapture`

use anyhow::{bail, Context};
use e2e::bench::kafka::{create_topic, DirectProducer};
use e2e::bench::payload::{Payload, StreamRecords};
use e2e::bench::peers::{on_text, subscribe, Peer, PeerServer, Ws};
use e2e::broker::{Broker, BrokerKind};
use futures::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const PARTITIONS: i32 = 6;
const CANVASES: usize = 2;
const CLIENTS_PER_CANVAS: usize = 3;
const EVENTS_PER_CANVAS: u64 = 20;
/// How long the clients may take to receive every event once all are produced.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a client keeps listening after its last expected event, to catch duplicates.
const QUIET_AFTER: Duration = Duration::from_millis(500);

/// The stream channels' payload: 16 KiB of data, a WebSocket message of several fragments.
const STREAM: Payload = Payload::STREAM_16_KIB;

/// Two channel ids of `payload` on different partitions of the topic (so both the partition
/// routing and more than one partition consumer are exercised).
fn channels(payload: Payload) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = Vec::new();
    for i in 0.. {
        let canvas = payload.channel(&format!("bench-c{i}"));
        let p = shared::partitioner::partition_for(canvas.as_bytes(), PARTITIONS as u32);
        if !seen.contains(&p) {
            seen.push(p);
            out.push(canvas);
        }
        if out.len() == CANVASES {
            break;
        }
    }
    out
}

/// Produces `EVENTS_PER_CANVAS` events of `payload` per channel, channels interleaved, with the
/// benchmark's own producer (key = channel, explicit partition, `centrifugo-channels` header).
async fn produce(bootstrap: &str, topic: &str, canvases: &[String], payload: Payload) -> anyhow::Result<()> {
    let mut producer = DirectProducer::new(bootstrap, topic, PARTITIONS as u32, 64, canvases.to_vec(), false)?.carrying(payload);
    for _ in 1..=EVENTS_PER_CANVAS {
        for i in 0..canvases.len() {
            producer.send(i).await?;
        }
    }
    producer.flush()
}

/// Reads `ws` until it has `EVENTS_PER_CANVAS` versions (then `QUIET_AFTER` more), answering pings:
/// the versions, the text of every frame, and what went wrong, if anything.
async fn receive(peer: Peer, mut ws: Ws, deadline: tokio::time::Instant) -> (Vec<u64>, Vec<String>, Option<String>) {
    let mut texts = Vec::new();
    let mut versions = Vec::new();
    let mut quiet_until: Option<tokio::time::Instant> = None;
    loop {
        let until = quiet_until.unwrap_or(deadline);
        let msg = match tokio::time::timeout_at(until, ws.next()).await {
            Err(_) if quiet_until.is_some() => return (versions, texts, None),
            Err(_) => return (versions, texts, Some("timed out".into())),
            Ok(m) => m,
        };
        match msg {
            Some(Ok(Message::Text(t))) => {
                if let Some(reply) = on_text(peer, &t, &mut versions) {
                    if let Err(e) = ws.send(Message::text(reply)).await {
                        return (versions, texts, Some(format!("send pong: {e}")));
                    }
                }
                texts.push(t.to_string());
            }
            Some(Ok(Message::Close(f))) => return (versions, texts, Some(format!("closed by the server: {f:?}"))),
            Some(Ok(_)) => {}
            Some(Err(e)) => return (versions, texts, Some(format!("WebSocket error: {e}"))),
            None => return (versions, texts, Some("the WebSocket ended".into())),
        }
        if quiet_until.is_none() && versions.len() as u64 >= EVENTS_PER_CANVAS {
            quiet_until = Some(tokio::time::Instant::now() + QUIET_AFTER);
        }
    }
}

async fn check_peer(peer: Peer, bootstrap: &str) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let topic = format!("peers-{}-{:08x}", peer.slug(), rand::random::<u32>());
    create_topic(bootstrap, &topic, PARTITIONS).await?;
    println!("[test] {}: topic {topic} ({PARTITIONS} partitions) created", peer.label());
    let server = PeerServer::start(peer, bootstrap, &topic).await?;
    let started = t0.elapsed();
    println!("[test] {} ready (pid {}) at {} after {:.1} s", peer.label(), server.pid(), server.ws_url(), started.as_secs_f64());

    let canvases = channels(Payload::Pixels);
    let streams = channels(STREAM);
    let mut clients = Vec::new();
    for canvas in canvases.iter().chain(&streams) {
        for i in 0..CLIENTS_PER_CANVAS {
            let ws = subscribe(peer, &server.ws_url(), canvas)
                .await
                .with_context(|| format!("{}: subscribe client {i} to {canvas}", peer.label()))?;
            clients.push((canvas.clone(), i, ws));
        }
    }
    println!("[test] {}: {} clients subscribed to {canvases:?} and {streams:?}", peer.label(), clients.len());

    let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
    let readers: Vec<_> = clients
        .into_iter()
        .map(|(canvas, i, ws)| (canvas, i, tokio::spawn(receive(peer, ws, deadline))))
        .collect();
    let produce_start = Instant::now();
    produce(bootstrap, &topic, &canvases, Payload::Pixels).await?;
    produce(bootstrap, &topic, &streams, STREAM).await?;
    println!("[test] {}: produced {} events per canvas in {:.2} s; waiting for the clients (up to {} s)",
        peer.label(), EVENTS_PER_CANVAS, produce_start.elapsed().as_secs_f64(), DELIVERY_TIMEOUT.as_secs());

    let expected: Vec<u64> = (1..=EVENTS_PER_CANVAS).collect();
    let mut failures = Vec::new();
    let Payload::Stream { data_bytes } = STREAM else { unreachable!("STREAM is a stream payload") };
    let records = StreamRecords::new(data_bytes, 64);
    for (canvas, i, reader) in readers {
        let (versions, texts, problem) = reader.await?;
        if versions != expected {
            failures.push(format!(
                "client {i} of {canvas} got versions {versions:?} (expected 1..={EVENTS_PER_CANVAS} in order){}",
                problem.map(|p| format!("; {p}")).unwrap_or_default()
            ));
        }
        if streams.contains(&canvas) {
            // Each publication's version and data, byte for byte as the producer wrote them.
            let all = texts.concat();
            let altered: Vec<u64> = expected.iter().copied().filter(|v| !all.contains(&format!("\"version\":{v},\"data\":{}", records.data(*v)))).collect();
            if !altered.is_empty() {
                let sample: String = texts.last().map(|t| t.chars().take(160).collect()).unwrap_or_default();
                failures.push(format!("client {i} of {canvas} did not get the data of versions {altered:?} as produced (a frame begins {sample:?})"));
            }
        }
    }
    let delivered = produce_start.elapsed();
    let stop_start = Instant::now();
    server.stop().await;
    println!("[test] {}: stopped in {:.2} s", peer.label(), stop_start.elapsed().as_secs_f64());
    if !failures.is_empty() {
        bail!("{} did not deliver every event, as produced, to every client within {} s of producing:\n  {}",
            peer.label(), DELIVERY_TIMEOUT.as_secs(), failures.join("\n  "));
    }
    println!("[test] {}: every client got versions 1..={EVENTS_PER_CANVAS} in order ({:.2} s from the first produce to the last check, incl. {} ms of quiet); {:.1} s in all",
        peer.label(), delivered.as_secs_f64(), QUIET_AFTER.as_millis(), t0.elapsed().as_secs_f64());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_deliver_every_event_in_order() -> anyhow::Result<()> {
    let _turn = crate::one_at_a_time();
    let t0 = Instant::now();
    let broker = Broker::start(BrokerKind::Real).await?;
    let bootstrap = broker.bootstrap.clone();
    let mut errors = Vec::new();
    for peer in Peer::ALL {
        println!("[test] === {} ({:.1} s) ===", peer.label(), t0.elapsed().as_secs_f64());
        if let Err(e) = check_peer(peer, &bootstrap).await {
            println!("[test] {} FAILED: {e:#}", peer.label());
            errors.push(format!("{}: {e:#}", peer.label()));
        }
    }
    println!("[test] done in {:.1} s", t0.elapsed().as_secs_f64());
    if !errors.is_empty() {
        bail!("{}", errors.join("\n"));
    }
    Ok(())
}
