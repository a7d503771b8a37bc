//! `cargo run --release -p e2e --bin chaos -- --seed N --schedules K`: K random fault schedules,
//! the i-th drawn from seed N + i, each on a fresh fleet under steady publishing through the
//! gateway, each judged once the fleet is quiet again (see `e2e::chaos`). `--replay SEED` runs the
//! fault list of one seed again (with the same sizes and `--kafka` as the run that drew it). Exits
//! 0 only when every schedule passed; a failing one prints its seed and its faults.
//! `--leader-faults` adds the gateway leader to the targets (frozen past the session timeout,
//! killed, stopped); every schedule ends with an audit of the gateways' control topic
//! (`e2e::control_audit`): a decision a deposed leader wrote and carried out fails it.

use clap::{Parser, ValueEnum};
use e2e::broker::{Broker, BrokerKind};
use e2e::chaos::{self, Load, Sizes};
use e2e::fleet::FleetSpec;
use e2e::procs::Timeline;
use std::time::Duration;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KafkaChoice {
    /// librdkafka's mock cluster, hosted by this process (one per schedule).
    Embedded,
    /// Apache Kafka from Maven Central on the machine's Java (one broker for all schedules),
    /// with one proxied listener per node, so node links can fail.
    Real,
    /// Three Apache Kafka nodes (one cluster for all schedules), which the schedules kill and
    /// freeze.
    Cluster,
}

/// Random fault schedules against the fleet.
#[derive(Debug, Parser)]
#[command(name = "chaos")]
struct Args {
    /// The first schedule's seed (default: drawn from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// How many schedules (seeds N, N+1, ...).
    #[arg(long, default_value_t = 1)]
    schedules: u64,
    /// Run the fault list of this seed once (the list, not the exact interleaving).
    #[arg(long, conflicts_with_all = ["seed", "schedules"])]
    replay: Option<u64>,
    #[arg(long, value_enum, env = "E2E_BROKER", default_value = "embedded")]
    kafka: KafkaChoice,
    /// ws-nodes of the fleet.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// Gateway replicas (with more than one, HAProxy in front: scripts/setup-haproxy.sh).
    #[arg(long, default_value_t = 2)]
    gateways: usize,
    /// With `--kafka real`: the nodes reach the broker directly (no link faults).
    #[arg(long)]
    no_links: bool,
    /// Partitions of the events topic.
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// WebSocket clients through the gateway.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Canvases they and the publishing are spread over.
    #[arg(long, default_value_t = 6)]
    canvases: usize,
    /// Publishes per second through the gateway.
    #[arg(long, default_value_t = 30.0)]
    rate: f64,
    /// Faults per schedule.
    #[arg(long, default_value_t = 4)]
    faults: usize,
    /// Seconds within which the faults start.
    #[arg(long, default_value_t = 30)]
    span_secs: u64,
    /// The gateway leader is a target of its own (whichever replica leads when the fault starts):
    /// killed, stopped, or frozen for 7–20 s, longer than the group's 6 s session timeout. Changes
    /// the draw: replay such a seed with the flag.
    #[arg(long)]
    leader_faults: bool,
    /// Print every process's log lines as they come.
    #[arg(long)]
    verbose: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (first, count) = match args.replay {
        Some(seed) => (seed, 1),
        None => (args.seed.unwrap_or_else(|| shared::event::now_ms() % 1_000_000), args.schedules.max(1)),
    };
    let links = matches!(args.kafka, KafkaChoice::Real) && !args.no_links;
    let sizes = Sizes {
        nodes: args.nodes.max(1),
        gateways: args.gateways.max(1),
        span: Duration::from_secs(args.span_secs),
        faults: args.faults,
        links,
        brokers: if matches!(args.kafka, KafkaChoice::Cluster) { e2e::broker::CLUSTER_NODES as usize } else { 0 },
        clients: args.clients.max(1),
        leader_faults: args.leader_faults,
    };
    let load = Load { clients: args.clients.max(1), canvases: args.canvases.max(1), rate: args.rate };
    println!(
        "chaos: {count} schedule(s) from seed {first}; {} nodes × {} partitions, {} gateway(s), {} clients over {} canvases, {} events/s; {} faults within {} s each; Kafka: {:?}{}{}",
        sizes.nodes,
        args.partitions,
        sizes.gateways,
        load.clients,
        load.canvases,
        load.rate,
        sizes.faults,
        args.span_secs,
        args.kafka,
        if links { ", a link proxy per node" } else { "" },
        if sizes.leader_faults { "; the gateway leader among the targets" } else { "" }
    );
    let kind = match args.kafka {
        KafkaChoice::Embedded => BrokerKind::Embedded,
        KafkaChoice::Real => BrokerKind::Real,
        KafkaChoice::Cluster => BrokerKind::Cluster,
    };
    let shared_broker = match kind {
        BrokerKind::Real if links => Some(Broker::start_with_links(sizes.nodes).await?),
        BrokerKind::Real | BrokerKind::Cluster => Some(Broker::start(kind.clone()).await?),
        _ => None,
    };
    let mut failed = Vec::new();
    let mut longest = Vec::new();
    for seed in first..first + count {
        let faults = chaos::schedule(seed, &sizes);
        println!("\n[chaos] schedule {} of {count}, seed {seed}:", seed - first + 1);
        for f in &faults {
            println!("[chaos]   {f}");
        }
        let own_broker = if shared_broker.is_none() { Some(Broker::start(kind.clone()).await?) } else { None };
        let broker = shared_broker.as_ref().or(own_broker.as_ref()).expect("a broker");
        if matches!(kind, BrokerKind::Cluster) {
            // A schedule that failed half way must not leave the next one a broken cluster.
            e2e::faults::heal(broker).await?;
        }
        let spec = FleetSpec { nodes: sizes.nodes, partitions: args.partitions, gateways: sizes.gateways, ..FleetSpec::default() };
        let tl = Timeline::new(args.verbose);
        let outcome = chaos::run(broker, spec, &load, seed, faults, tl.clone()).await?;
        if !args.verbose {
            for e in tl.entries().iter().filter(|e| e.text.contains("[CHAOS]")) {
                println!("  {:>7.2}s {}", e.at.as_secs_f64(), e.text);
            }
        }
        print!("{}", outcome.summary());
        longest.push((seed, outcome.longest_wait_ms()));
        if !outcome.passed() {
            failed.push(seed);
        }
    }
    println!("\n[chaos] {} of {count} schedules passed; longest waits (seed: ms): {:?}", count - failed.len() as u64, longest);
    if failed.is_empty() {
        Ok(())
    } else {
        println!("[chaos] failed seeds: {failed:?} (replay one with --replay SEED)");
        std::process::exit(1);
    }
}
