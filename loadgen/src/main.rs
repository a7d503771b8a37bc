//! `load`: publishes a steady stream of pixel events to a few canvases through the publisher's
//! HTTP API, so a running fleet has traffic without a browser (the `load` service of
//! `docker-compose.yml`). Prints a line of counts every 5 s.

use clap::Parser;
use loadgen::Load;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Publishes `--rate` events/s, round-robin over `--canvases`, random pixels and colours.
#[derive(Debug, Parser)]
#[command(name = "load", version)]
struct Args {
    /// The publisher's base URL.
    #[arg(long, env = "PUBLISHER_URL", default_value = "http://localhost:8080")]
    publisher_url: String,
    /// Canvases to paint, comma-separated.
    #[arg(long, env = "LOAD_CANVASES", default_value = "c1,c2,c3,c4", value_delimiter = ',')]
    canvases: Vec<String>,
    /// Events per second over all canvases.
    #[arg(long, env = "LOAD_RATE", default_value_t = 20.0)]
    rate: f64,
    /// Canvas width the pixels are drawn in (must match the publisher's).
    #[arg(long, env = "CANVAS_WIDTH", default_value_t = 64)]
    canvas_width: u32,
    /// Canvas height.
    #[arg(long, env = "CANVAS_HEIGHT", default_value_t = 64)]
    canvas_height: u32,
    /// Validate the configuration, print it, and exit.
    #[arg(long)]
    check_config: bool,
}

impl Args {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !(self.publisher_url.starts_with("http://") || self.publisher_url.starts_with("https://")) {
            p.push(format!("PUBLISHER_URL {:?} must start with http:// or https://", self.publisher_url));
        }
        if self.canvases.is_empty() {
            p.push("LOAD_CANVASES is empty".into());
        }
        for c in &self.canvases {
            if let Err(e) = shared::ChannelId::parse(c) {
                p.push(format!("LOAD_CANVASES: {c:?}: {e}"));
            }
        }
        if !(self.rate > 0.0 && self.rate <= 100_000.0) {
            p.push(format!("LOAD_RATE {} must be in (0, 100000]", self.rate));
        }
        if self.canvas_width == 0 || self.canvas_height == 0 {
            p.push("CANVAS_WIDTH and CANVAS_HEIGHT must be at least 1".into());
        }
        p
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let problems = args.problems();
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        std::process::exit(2);
    }
    if args.check_config {
        println!(
            "{}",
            shared::telemetry::env_lines(&[
                ("PUBLISHER_URL", args.publisher_url.clone()),
                ("LOAD_CANVASES", args.canvases.join(",")),
                ("LOAD_RATE", args.rate.to_string()),
                ("CANVAS_WIDTH", args.canvas_width.to_string()),
                ("CANVAS_HEIGHT", args.canvas_height.to_string()),
            ])
        );
        return Ok(());
    }
    shared::shutdown::run_main(async move {
        let shutdown = shared::shutdown::signal_token();
        println!("load: {} events/s over {:?} to {}", args.rate, args.canvases, args.publisher_url);
        let load = Load::start(&args.publisher_url, args.canvases.clone(), args.rate, args.canvas_width, args.canvas_height);
        let mut every = tokio::time::interval(Duration::from_secs(5));
        every.tick().await;
        loop {
            tokio::select! {
                _ = every.tick() => {
                    let s = &load.stats;
                    println!(
                        "load: accepted {} · 503 {} · failed {}",
                        s.accepted.load(Ordering::Relaxed),
                        s.unavailable.load(Ordering::Relaxed),
                        s.failed.load(Ordering::Relaxed)
                    );
                }
                _ = shutdown.cancelled() => break,
            }
        }
        load.stop().await;
        Ok(())
    })
}
