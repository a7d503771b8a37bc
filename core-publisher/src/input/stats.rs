//! What the input did since the process started: publications committed, records skipped by
//! reason (the last one named), for `/health` and `publisher_input_records_total`; and the
//! once-a-minute log line of skipped records.

use super::record::Skip;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use shared::metrics::Labels;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Skipped records are logged at most this often (the others counted in the next line).
pub const SKIP_LOG_EVERY: Duration = Duration::from_secs(60);

/// A skipped record as `/health` names it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SkippedRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub reason: &'static str,
    pub error: String,
}

#[derive(Debug, Default)]
struct SkipLog {
    last_logged: Option<Instant>,
    /// Skipped since the last line.
    unlogged: u64,
    last: Option<SkippedRecord>,
}

/// Whether a skip at `now` is logged, the last line having been at `last`. Pure.
pub fn log_now(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|t| now.duration_since(t) >= SKIP_LOG_EVERY)
}

/// The input's counters (shared by the queues of one process, which a start-over replaces).
#[derive(Debug, Default)]
pub struct Stats {
    published: AtomicU64,
    skipped: [AtomicU64; Skip::REASONS.len()],
    log: Mutex<SkipLog>,
    /// `publisher_input_records_total{outcome, reason}`.
    metric: Family<Labels, Counter>,
}

impl Stats {
    /// Counters that also count into `metric`.
    pub fn new(metric: Family<Labels, Counter>) -> Self {
        Self { metric, ..Self::default() }
    }

    /// Counts what a committed transaction did of the input: `published` publications, and
    /// `skips` (topic, partition, offset, why), each logged at most once per [`SKIP_LOG_EVERY`].
    pub fn committed<'a>(&self, published: u64, skips: impl IntoIterator<Item = (&'a str, i32, i64, &'a Skip)>) {
        self.published.fetch_add(published, Ordering::Relaxed);
        if published > 0 {
            self.metric.get_or_create(&vec![("outcome", "published".to_owned()), ("reason", String::new())]).inc_by(published);
        }
        for (topic, partition, offset, skip) in skips {
            self.skipped(topic, partition, offset, skip);
        }
    }

    fn skipped(&self, topic: &str, partition: i32, offset: i64, skip: &Skip) {
        let reason = skip.reason();
        if let Some(i) = Skip::REASONS.iter().position(|r| *r == reason) {
            self.skipped[i].fetch_add(1, Ordering::Relaxed);
        }
        self.metric.get_or_create(&vec![("outcome", "skipped".to_owned()), ("reason", reason.to_owned())]).inc();
        let record = SkippedRecord { topic: topic.to_owned(), partition, offset, reason, error: skip.to_string() };
        let mut log = self.log.lock().expect("skip log lock");
        let now = Instant::now();
        if log_now(log.last_logged, now) {
            tracing::warn!(topic, partition, offset, reason, also_skipped = log.unlogged,
                "skipped an input record ({skip}); its offset is committed, so it is not read again (skipped records are logged at most once a minute; \
                 also_skipped counts those since the last line)");
            log.last_logged = Some(now);
            log.unlogged = 0;
        } else {
            log.unlogged += 1;
        }
        log.last = Some(record);
    }

    /// Publications committed from the input.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Records skipped, over every reason.
    pub fn skipped_total(&self) -> u64 {
        self.skipped.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    /// `{"published","skipped","skipped_by_reason":{...},"last_skipped"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let by_reason: serde_json::Map<String, serde_json::Value> =
            Skip::REASONS.iter().zip(&self.skipped).map(|(r, n)| ((*r).to_owned(), n.load(Ordering::Relaxed).into())).collect();
        serde_json::json!({
            "published": self.published(),
            "skipped": self.skipped_total(),
            "skipped_by_reason": by_reason,
            "last_skipped": self.log.lock().expect("skip log lock").last.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_records_are_logged_at_most_once_a_minute() {
        let t0 = Instant::now();
        let cases = [(None, 0, true), (Some(0), 1, false), (Some(0), 59, false), (Some(0), 60, true), (Some(0), 3_600, true)];
        for (last, at, want) in cases {
            let last = last.map(|s: u64| t0 + Duration::from_secs(s));
            assert_eq!(log_now(last, t0 + Duration::from_secs(at)), want, "last {last:?}, now +{at} s");
        }
    }
}
