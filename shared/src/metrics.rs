//! `GET /metrics` of every service: a [`prometheus_client`] registry in the exposition format
//! Prometheus asks for, and the few helpers every service's metrics share.
//!
//! Each service instance holds its own [`Registry`] (several services may run in one process in
//! tests), so there is no global recorder. Figures that are state already (sessions, positions,
//! node views) are set from that state when scraped, so they cannot drift; event counts are
//! counters bumped where the event happens; durations are histograms in seconds.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

pub use prometheus_client;

/// The content type of OpenMetrics 1.0.0 text, the format Prometheus (2.x and 3.x) asks for first
/// in its `Accept` header and the one [`prometheus_client`] writes.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of Prometheus's classic text format 0.0.4, served to clients that do not ask
/// for OpenMetrics (curl, `promtool check metrics`, older scrapers).
pub const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label set given as (name, value) pairs, for families whose labels are known at run time.
pub type Labels = Vec<(&'static str, String)>;

/// A gauge family set at scrape time (cleared first, so a label set that is gone disappears).
pub type StateGauge = Family<Labels, Gauge>;

/// A gauge of seconds (or any float), set at scrape time.
pub type SecondsGauge = Gauge<f64, AtomicU64>;

/// Buckets for durations in seconds: 1 ms … about 65 s, doubling.
pub fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Buckets for counts of things (records per commit, frames per batch): 1 … 4096, doubling.
pub fn count_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 13))
}

/// `registry` as OpenMetrics text (ends with `# EOF`).
pub fn text(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; an encoding error would be a bug in a metric's labels.
    if let Err(e) = encode(&mut out, registry) {
        tracing::error!(error = %e, "cannot encode the metrics");
    }
    out
}

/// The `GET /metrics` answer for `registry`: `200` with OpenMetrics text when `accept` names
/// `application/openmetrics-text` (as Prometheus's scrapes do), else the classic text format
/// ([`to_text_format`]).
pub fn respond(registry: &Registry, accept: Option<&header::HeaderValue>) -> Response {
    let open = accept.and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("application/openmetrics-text"));
    let body = text(registry);
    if open {
        (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], body).into_response()
    } else {
        (StatusCode::OK, [(header::CONTENT_TYPE, TEXT_FORMAT)], to_text_format(&body)).into_response()
    }
}

/// OpenMetrics text as Prometheus's classic text format 0.0.4: a counter's family is named by its
/// samples (`x_total`, as 0.0.4 has no family/sample split), `# UNIT` and `# EOF` go, `unknown`
/// is `untyped`. Pure; the sample lines are the same in both formats.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, "counter")) = rest.split_once(' ') {
                counters.insert(name.to_owned());
            }
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "].into_iter().find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let tail = if prefix == "# TYPE " && tail == "unknown" { "untyped" } else { tail };
                let suffix = if counters.contains(name) { "_total" } else { "" };
                out.push_str(&format!("{prefix}{name}{suffix} {tail}\n"));
            }
            None => {
                // A counter's creation time has no place in 0.0.4.
                let sample = line.split(['{', ' ']).next().unwrap_or("");
                if sample.strip_suffix("_created").is_some_and(|n| counters.contains(n)) {
                    continue;
                }
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// `(name, value)` as a one-label set.
pub fn label(name: &'static str, value: impl ToString) -> Labels {
    vec![(name, value.to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn exposition_is_openmetrics_with_total_suffix_and_eof() {
        let mut registry = Registry::with_prefix("demo");
        let c: Family<Labels, Counter> = Family::default();
        registry.register("deliveries", "Frames handed to sessions", c.clone());
        c.get_or_create(&label("code", 1000)).inc_by(3);
        let g = StateGauge::default();
        registry.register("sessions", "Open sessions", g.clone());
        g.get_or_create(&label("node", "ws-1")).set(2);
        let h = seconds_histogram();
        registry.register("hold_seconds", "Hold durations", h.clone());
        h.observe(0.5);
        let t = text(&registry);
        assert!(t.contains("# TYPE demo_deliveries counter"), "{t}");
        assert!(t.contains("demo_deliveries_total{code=\"1000\"} 3"), "{t}");
        assert!(t.contains("demo_sessions{node=\"ws-1\"} 2"), "{t}");
        assert!(t.contains("demo_hold_seconds_count 1"), "{t}");
        assert!(t.ends_with("# EOF\n"), "{t}");
        g.clear();
        assert!(!text(&registry).contains("demo_sessions{"), "a cleared family has no series");
    }

    #[test]
    fn text_format_names_counter_families_by_their_samples() {
        let cases = [
            (
                "# HELP a_x Things.\n# TYPE a_x counter\na_x_total{k=\"v\"} 3\na_x_created 1.5\n# EOF\n",
                "# HELP a_x_total Things.\n# TYPE a_x_total counter\na_x_total{k=\"v\"} 3\n",
            ),
            (
                "# HELP a_s Secs.\n# TYPE a_s histogram\n# UNIT a_s seconds\na_s_sum 1.0\na_s_count 1\n# EOF\n",
                "# HELP a_s Secs.\n# TYPE a_s histogram\na_s_sum 1.0\na_s_count 1\n",
            ),
            ("# HELP g G.\n# TYPE g gauge\ng 2\n# EOF\n", "# HELP g G.\n# TYPE g gauge\ng 2\n"),
            ("# TYPE u unknown\nu 1\n# EOF\n", "# TYPE u untyped\nu 1\n"),
            // A gauge whose name ends in _created is kept.
            ("# TYPE b_created gauge\nb_created 4\n", "# TYPE b_created gauge\nb_created 4\n"),
        ];
        for (open, classic) in cases {
            assert_eq!(to_text_format(open), classic, "{open}");
        }
    }

    #[test]
    fn scrapers_get_openmetrics_only_when_they_ask() {
        let registry = Registry::default();
        let ask = header::HeaderValue::from_static("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5");
        let ct = |r: Response| r.headers()[header::CONTENT_TYPE].to_str().unwrap().to_owned();
        assert_eq!(ct(respond(&registry, Some(&ask))), OPENMETRICS);
        assert_eq!(ct(respond(&registry, None)), TEXT_FORMAT);
        assert_eq!(ct(respond(&registry, Some(&header::HeaderValue::from_static("*/*")))), TEXT_FORMAT);
    }
}
