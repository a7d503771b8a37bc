//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber for a binary. Log lines read
/// `2026-11-29T19:40:00.123Z  INFO ws_node::catchup: [CATCHUP] completed replayCount=3 ...`.
///
/// Calling it twice is harmless (the second call does nothing), so tests may call it freely.
pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,rdkafka=warn,hyper=warn,reqwest=warn"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr)
        .try_init();
}

/// A configuration as `VARIABLE=value` lines (what `--check-config` prints).
pub fn env_lines(pairs: &[(&str, String)]) -> String {
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\n")
}
