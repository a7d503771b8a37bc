//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), as text lines for
//! people or, with `LOG_FORMAT=json`, one JSON object per line for a log pipeline.

use tracing_subscriber::EnvFilter;

/// How log lines are written (`LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `2026-11-29T19:40:00.123Z  INFO ws_node::catchup: [CATCHUP] completed replayCount=3 ...`
    #[default]
    Text,
    /// tracing-subscriber's JSON lines with the same fields as the text lines:
    /// `{"timestamp":"…","level":"INFO","fields":{"message":"[CATCHUP] completed","replayCount":3,…},"target":"ws_node::catchup"}`.
    Json,
}

impl LogFormat {
    /// Parses a `LOG_FORMAT` value (`text` or `json`, any case).
    ///
    /// # Errors
    /// A message naming the variable for any other value.
    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "" | "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("LOG_FORMAT={other:?}: expected `text` or `json`")),
        }
    }

    /// The format `LOG_FORMAT` asks for (text when unset).
    ///
    /// # Errors
    /// See [`LogFormat::parse`].
    pub fn from_env() -> Result<Self, String> {
        std::env::var("LOG_FORMAT").map_or(Ok(Self::Text), |v| Self::parse(&v))
    }
}

/// Installs the global subscriber for a binary, in the format `LOG_FORMAT` asks for (text when it
/// is unset or invalid; [`crate::shutdown::service_main`] refuses an invalid value first).
///
/// Calling it twice is harmless (the second call does nothing), so tests may call it freely.
pub fn init() {
    init_as(LogFormat::from_env().unwrap_or_default());
}

/// Installs the global subscriber writing `format` (see [`init`]).
pub fn init_as(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,rdkafka=warn,hyper=warn,reqwest=warn"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).with_current_span(true).try_init(),
    };
}

/// A configuration as `VARIABLE=value` lines (what `--check-config` prints).
pub fn env_lines(pairs: &[(&str, String)]) -> String {
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_format_values() {
        for (raw, want) in [("", Ok(LogFormat::Text)), ("text", Ok(LogFormat::Text)), ("JSON", Ok(LogFormat::Json)), (" json ", Ok(LogFormat::Json))] {
            assert_eq!(LogFormat::parse(raw), want, "{raw:?}");
        }
        assert!(LogFormat::parse("yaml").unwrap_err().contains("LOG_FORMAT"));
    }
}
