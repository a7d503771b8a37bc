//! `cargo run --release -p e2e --bin demo`: the brief's whole scenario with short timings, a
//! readable timeline and a summary table. Exits 0 only when no client lost, duplicated or
//! reordered an event and the lifecycle went as it must.
//!
//! `--keep-running` leaves the fleet up afterwards (or instead, with `--no-scenario`) and prints
//! where everything is, until Ctrl-C: the pages of its canvases and of its channels of the other
//! models (`/?channel=scores:final`, … when the fleet has their namespaces), to which it keeps
//! publishing.

use clap::{Parser, ValueEnum};
use e2e::broker::{Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::procs::Timeline;
use e2e::scenario::{run_keeping, ModelLoad, Running, ScenarioConfig, MODEL_CHANNELS};
use std::time::Duration;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KafkaChoice {
    /// librdkafka's mock cluster, hosted by this process.
    Embedded,
    /// Apache Kafka from Maven Central, run with the machine's Java (jars fetched on first use).
    Real,
    /// Three Apache Kafka nodes on the JVM (replication factor 3, min ISR 2), as `real`.
    Cluster,
    /// The official apache/kafka image in Docker, through testcontainers (needs a Docker engine).
    Container,
}

/// Runs kill → takeover → recovery → failback against a broker and checks every client.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Args {
    /// Which broker to start (`KAFKA_BOOTSTRAP=host:port` uses yours instead).
    #[arg(long, value_enum, env = "E2E_BROKER", default_value = "embedded")]
    kafka: KafkaChoice,
    /// WebSocket clients, through the gateway.
    #[arg(long, default_value_t = 20)]
    clients: usize,
    /// Canvases the clients and the load are spread over.
    #[arg(long, default_value_t = 4)]
    canvases: usize,
    /// Publish rate, events/s.
    #[arg(long, default_value_t = 60.0)]
    rate: f64,
    /// Seconds of each calm phase (normal, outage, settle).
    #[arg(long, default_value_t = 3)]
    phase_secs: u64,
    /// Leave the fleet running afterwards and print its addresses (Ctrl-C stops it).
    #[arg(long)]
    keep_running: bool,
    /// With --keep-running: start the fleet without running the scenario.
    #[arg(long, requires = "keep_running")]
    no_scenario: bool,
}

fn print_running(fleet: &Fleet, broker: &Broker, canvases: &[String], channels: &[(String, String)], rate: f64) {
    println!("\nThe fleet is running (Ctrl-C stops it):");
    let where_ = match broker.pid() {
        Some(p) => format!("pid {p}"),
        None if broker.kind == BrokerKind::Cluster => "three JVMs".to_owned(),
        None => "in this process".to_owned(),
    };
    println!("  broker     {}  ({}, {where_})", broker.bootstrap, broker.kind.label());
    for n in broker.cluster_nodes().unwrap_or_default() {
        println!("  kafka-{}    {}  (controller 127.0.0.1:{}, log {}/server.log)  pid {}",
            n.id, n.addr(), n.controller_port, n.dir.display(), n.pid.map_or("stopped".into(), |p| p.to_string()));
    }
    println!("  gateway    {}  (ws: {}/ws?channel=<id>&since=<version>, fleet: {}/api/fleet)  pid {}",
        fleet.gateway.url(), fleet.gateway_ws(), fleet.gateway.url(), fleet.gateway.pid().unwrap_or(0));
    println!("  publisher  {}  (POST /channels/<id>/publications, POST /canvases/<id>/pixels)  pid {}", fleet.publisher.url(), fleet.publisher.pid().unwrap_or(0));
    for n in &fleet.nodes {
        println!("  {:<10} {}  (/health)  pid {}", n.name, n.url(), n.pid().map_or("stopped".into(), |p| p.to_string()));
    }
    println!("  topic {}  broadcast group {}", fleet.topic, fleet.group);
    println!("\nPages (publishing {rate} events/s over these canvases until Ctrl-C):");
    for c in canvases {
        println!("  {}/?canvas={c}", fleet.gateway.url());
    }
    if !channels.is_empty() {
        println!("Channels of the other models (about 20 publications/s each):");
    }
    for (c, model) in channels {
        println!("  {}/?channel={c}  ({model})", fleet.gateway.url());
    }
    println!("  {}/fleet", fleet.gateway.url());
}

/// Which of `candidates` the fleet has a namespace of another model than pixels for, with that
/// model: the publisher's `GET /channels/{id}` answers 200 with the model, or 400 for an unknown
/// namespace.
async fn channels_with_namespaces(fleet: &Fleet, candidates: &[String]) -> Vec<(String, String)> {
    let http = reqwest::Client::new();
    let mut out = Vec::new();
    for c in candidates {
        let url = format!("{}/channels/{c}", fleet.publisher.url());
        let Ok(r) = http.get(&url).timeout(Duration::from_secs(5)).send().await else { continue };
        let Ok(body) = r.json::<serde_json::Value>().await else { continue };
        match body["model"].as_str() {
            Some(model) if model != "pixels" => out.push((c.clone(), model.to_owned())),
            _ => {}
        }
    }
    out
}

async fn hold(mut running: Running, rate: f64) {
    let spec = &running.fleet.spec;
    let load = e2e::load::Load::start(&running.fleet.publisher.url(), running.canvases.clone(), rate, spec.width, spec.height);
    let channels = channels_with_namespaces(&running.fleet, &running.channels).await;
    let model_load = ModelLoad::start(&running.fleet.publisher.url(), channels.iter().map(|(c, _)| c.clone()).collect());
    print_running(&running.fleet, &running.broker, &running.canvases, &channels, rate);
    shared::shutdown::signal_token().cancelled().await;
    println!("\nstopping the fleet");
    load.stop().await;
    model_load.stop().await;
    running.fleet.stop().await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let broker = BrokerKind::external().unwrap_or(match args.kafka {
        KafkaChoice::Embedded => BrokerKind::Embedded,
        KafkaChoice::Real => BrokerKind::Real,
        KafkaChoice::Cluster => BrokerKind::Cluster,
        KafkaChoice::Container => BrokerKind::Container,
    });
    if args.no_scenario {
        let timeline = Timeline::new(true);
        let b = Broker::start(broker).await?;
        let fleet = Fleet::start(&b, FleetSpec::default(), timeline).await?;
        let canvases = (1..=args.canvases.max(1)).map(|i| format!("c{i}")).collect();
        // The channels of the other models, when FLEET_CONFIG declares their namespaces.
        let channels = MODEL_CHANNELS.iter().map(|c| (*c).to_owned()).collect();
        hold(Running { fleet, broker: b, canvases, channels }, args.rate).await;
        return Ok(());
    }
    println!("Scenario: normal → kill -9 ws-1 → ws-2 takes over → ws-1 restarts, UP×5, start-recovery, catch-up → failback drain → clients back.");
    println!("Broker: {}. {} clients over {} canvases, {} events/s.\n", broker.label(), args.clients, args.canvases, args.rate);
    let cfg = ScenarioConfig {
        broker,
        clients: args.clients,
        canvases: args.canvases.max(2),
        rate: args.rate,
        phase: Duration::from_secs(args.phase_secs),
        echo: true,
        ..ScenarioConfig::default()
    };
    let (report, running) = run_keeping(cfg, args.keep_running).await?;
    let c = &report.catchup_report;
    println!(
        "\nCatch-up of the restarted ws-1 (its /health): {} records replayed in {} ms, {} canvases from snapshots, positions {}\n",
        c["replay_count"], c["took_ms"], c["channels_from_snapshots"], c["positions"]
    );
    println!("{}", report.table());
    for v in report.verdicts.iter().filter(|v| !v.ok()) {
        println!("FAILED client {} ({}): lost {:?}, duplicated {}, out of order {}, extra snapshots {}, hash matches {}",
            v.name, v.channel, v.lost, v.duplicated, v.out_of_order, v.extra_snapshots, v.hash_matches);
    }
    if !report.lifecycle_missing.is_empty() {
        println!("FAILED lifecycle: missing {:?}", report.lifecycle_missing);
    }
    let passed = report.passed();
    println!("{}", if passed { "PASSED: every client saw every version once, in order, and ends with the publisher's canvas." } else { "FAILED" });
    if let Some(r) = running {
        hold(r, args.rate).await;
    }
    std::process::exit(if passed { 0 } else { 1 });
}
