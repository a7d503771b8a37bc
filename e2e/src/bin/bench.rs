//! `cargo run --release -p e2e --bin bench`: the benchmarks, side by side with Centrifugo and
//! Socket.IO, in one run on this machine. Prints progress, then a markdown table; writes
//! `<out>/results.json` and `<out>/results.md`. Exits non-zero when a measure failed (a missed
//! target is reported in the table, not as a failure).

use clap::{Parser, ValueEnum};
use e2e::bench::report::Results;
use e2e::bench::{self, Ctx, Measure, Size};
use e2e::broker::{Broker, BrokerKind};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SizeChoice {
    /// A few seconds of each measure (what CI runs so the tool cannot rot).
    Tiny,
    /// The sizes of the published results (about 23 minutes on 2 cores).
    Full,
}

/// Benchmarks of the fleet against Centrifugo and Socket.IO.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// How big.
    #[arg(long, value_enum, default_value = "full")]
    size: SizeChoice,
    /// Only these measures (repeatable); all by default.
    #[arg(long, value_enum)]
    only: Vec<Measure>,
    /// Measure the fleet alone (skip Centrifugo and Socket.IO).
    #[arg(long)]
    no_peers: bool,
    /// Canvas side for the fleet, pixels (its snapshot frames grow with it: 64 → 16 KiB).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    canvas_side: u32,
    /// The latency measure's offered loads, events/s (repeatable); the size's by default
    /// (full: 1000, 10000, 50000).
    #[arg(long = "rate", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    rates: Vec<u32>,
    /// The binaries of an earlier build (a directory with core-publisher, ws-node and gateway),
    /// measured beside this build's by the age and writer measures.
    #[arg(long)]
    before: Option<PathBuf>,
    /// Where results.json and results.md go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber_init();
    let nofile = bench::sys::raise_nofile(65_536);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let started = Instant::now();
        let started_at = now_rfc3339();
        let mut size = match args.size {
            SizeChoice::Tiny => Size::tiny(),
            SizeChoice::Full => Size::full(),
        };
        if !args.rates.is_empty() {
            size.latency_rates = args.rates.iter().map(|&r| f64::from(r)).collect();
        }
        let mut measures = if args.only.is_empty() {
            vec![Measure::Fanout, Measure::Latency, Measure::Publish, Measure::Replay, Measure::Memory, Measure::Failover]
        } else {
            args.only.clone()
        };
        measures.sort();
        measures.dedup();
        println!("[bench] size {}, measures {measures:?}, peers {}, open-file limit {nofile}", size.name, !args.no_peers);
        // A real broker unless KAFKA_BOOTSTRAP names one (the peers need a real Kafka protocol
        // implementation; the mock cluster is not one).
        let kind = match BrokerKind::from_env() {
            BrokerKind::External(b) => BrokerKind::External(b),
            _ => BrokerKind::Real,
        };
        println!("[bench] starting the broker: {}", kind.label());
        let broker = Broker::start(kind).await?;
        let mut ctx = Ctx::new(broker, size.clone(), !args.no_peers, args.canvas_side);
        ctx.before = args.before.clone();
        let rows = bench::run(&ctx, &measures).await;
        let mut command = format!("cargo run --release -p e2e --bin bench -- --size {}", size.name);
        for m in &args.only {
            command += &format!(" --only {}", m.to_possible_value().map_or(String::new(), |v| v.get_name().to_owned()));
        }
        if args.no_peers {
            command += " --no-peers";
        }
        for r in &args.rates {
            command += &format!(" --rate {r}");
        }
        if let Some(d) = &args.before {
            command += &format!(" --before {}", d.display());
        }
        if args.canvas_side != 64 {
            command += &format!(" --canvas-side {}", args.canvas_side);
        }
        let results = Results {
            size: size.name.into(),
            machine: bench::sys::machine(),
            broker: ctx.broker.kind.label(),
            command,
            started_at,
            duration_s: started.elapsed().as_secs_f64(),
            rows,
            errors: ctx.errors(),
        };
        let md = results.markdown();
        println!("\n{md}");
        std::fs::create_dir_all(&args.out)?;
        std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&results)?)?;
        std::fs::write(args.out.join("results.md"), &md)?;
        println!("[bench] wrote {} and {}", args.out.join("results.json").display(), args.out.join("results.md").display());
        if !results.errors.is_empty() {
            anyhow::bail!("{} measure(s) failed: {}", results.errors.len(), results.errors.join("; "));
        }
        Ok(())
    })
}

fn tracing_subscriber_init() {
    // Quiet by default: the tool prints its own progress.
    let _ = tracing_subscriber::fmt().with_env_filter(std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into())).try_init();
}

/// Now, RFC 3339 in UTC, to the second.
fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
