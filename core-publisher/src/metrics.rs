//! The publisher's `GET /metrics` (Prometheus; see `docs/metrics.md` for the table).
//!
//! [`PublisherMetrics`] lives in the committers' [`crate::committer::Counters`] (shared by the
//! committers, the routes and start-up): publishes by status, the transactions' commit time,
//! records and events per group commit, snapshots written, the rebuild time, keyed publishes
//! refused by a full idempotency-key store. The state figures (ready, channels, partitions in
//! doubt, idempotency keys held, standing by) are set from plain [`Figures`] at each scrape.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use shared::metrics::{Labels, SecondsGauge};
use std::sync::Mutex;
use std::time::Duration;

/// The publisher's registry, its counters and scrape-time gauges.
#[derive(Debug)]
pub struct PublisherMetrics {
    registry: Registry,
    /// Publishes answered, by `route` (`single`: `POST /canvases/{id}/pixels`; `batch`: each
    /// event of a `POST /pixels`) and HTTP `status` (`201`, `400`, `409`, `503`, …).
    pub publishes: Family<Labels, Counter>,
    /// Time of each Kafka transaction (produce, then commit or abort), seconds.
    pub commit_seconds: Histogram,
    /// Records per committed transaction (a group commit carries many publishes).
    pub commit_records: Histogram,
    /// Events per committed transaction.
    pub commit_events: Histogram,
    /// Channel snapshots committed to the snapshot topic.
    pub snapshots_written: Counter,
    /// Rebuilds of the channel versions from the log that finished (start-up, or starting over).
    pub rebuilds: Counter,
    /// How long the last rebuild took, seconds.
    pub rebuild_seconds: SecondsGauge,
    /// Keyed publishes refused because the idempotency-key store is full of keys younger than
    /// the window.
    pub idempotency_store_full: Counter,
    /// Records of the input topics, by `outcome` (`published`, `skipped`) and the skip's `reason`.
    pub input_records: Family<Labels, Counter>,
    ready: Gauge,
    standby: Gauge,
    channels: Gauge,
    in_doubt: Gauge,
    uncovered: Gauge,
    incomplete: Gauge,
    partitions: Gauge,
    idempotency_keys: Gauge,
    /// One scrape at a time sets the gauges and encodes them.
    scrape: Mutex<()>,
}

impl Default for PublisherMetrics {
    fn default() -> Self {
        let m = Self {
            registry: Registry::default(),
            publishes: Family::default(),
            commit_seconds: shared::metrics::seconds_histogram(),
            commit_records: shared::metrics::count_histogram(),
            commit_events: shared::metrics::count_histogram(),
            snapshots_written: Counter::default(),
            rebuilds: Counter::default(),
            rebuild_seconds: SecondsGauge::default(),
            idempotency_store_full: Counter::default(),
            input_records: Family::default(),
            ready: Gauge::default(),
            standby: Gauge::default(),
            channels: Gauge::default(),
            in_doubt: Gauge::default(),
            uncovered: Gauge::default(),
            incomplete: Gauge::default(),
            partitions: Gauge::default(),
            idempotency_keys: Gauge::default(),
            scrape: Mutex::new(()),
        };
        let mut r = Registry::with_prefix("publisher");
        r.register("ready", "1 while writes are accepted (rebuilt, neither fenced nor failed)", m.ready.clone());
        r.register("standby", "1 while a standby (--standby) follows the log, until promoted", m.standby.clone());
        r.register("channels", "Channels with a version (was publisher_canvases)", m.channels.clone());
        r.register("partitions", "Partitions of the events topic", m.partitions.clone());
        r.register("in_doubt_partitions", "Partitions whose last transaction's outcome is not known yet", m.in_doubt.clone());
        r.register("uncovered_channels", "Channels with publications no snapshot covers yet (was publisher_uncovered_canvases)", m.uncovered.clone());
        r.register("incomplete_channels", "Channels whose early versions are gone from the log with no snapshot covering them (was publisher_incomplete_canvases)", m.incomplete.clone());
        r.register("publishes", "Publishes answered, by route (single, batch: per event) and HTTP status", m.publishes.clone());
        r.register("commit_seconds", "Time of each Kafka transaction (produce, then commit or abort)", m.commit_seconds.clone());
        r.register("commit_records", "Records per committed transaction (group commit)", m.commit_records.clone());
        r.register("commit_events", "Events per committed transaction", m.commit_events.clone());
        r.register("snapshots_written", "Snapshots of channels committed to the snapshot topic", m.snapshots_written.clone());
        r.register("rebuilds", "Rebuilds of the channels' versions from the log that finished", m.rebuilds.clone());
        r.register("rebuild_seconds", "How long the last rebuild of the channel versions took", m.rebuild_seconds.clone());
        r.register(
            "idempotency_store_full",
            "Keyed publishes refused because the idempotency-key store is full of keys younger than the window",
            m.idempotency_store_full.clone(),
        );
        r.register("idempotency_keys", "Idempotency keys held (with an outcome within the window, and in flight)", m.idempotency_keys.clone());
        r.register(
            "input_records",
            "Records of the input topics committed, by outcome (published, skipped) and the reason of a skip",
            m.input_records.clone(),
        );
        Self { registry: r, ..m }
    }
}

impl PublisherMetrics {
    /// A publish on `route` was answered with `status`.
    pub fn published(&self, route: &'static str, status: u16) {
        self.publishes.get_or_create(&vec![("route", route.to_owned()), ("status", status.to_string())]).inc();
    }

    /// A transaction of `records` records and `events` events committed.
    pub fn committed(&self, records: usize, events: usize) {
        self.commit_records.observe(records as f64);
        self.commit_events.observe(events as f64);
    }

    /// A rebuild finished after `took`.
    pub fn rebuilt(&self, took: Duration) {
        self.rebuilds.inc();
        self.rebuild_seconds.set(took.as_secs_f64());
    }

    /// Sets the gauges from `figures` and encodes the registry.
    pub fn render(&self, figures: &Figures, accept: Option<&axum::http::HeaderValue>) -> axum::response::Response {
        let _one = self.scrape.lock().expect("scrape lock");
        self.ready.set(i64::from(figures.ready));
        self.standby.set(i64::from(figures.standby));
        self.channels.set(figures.channels as i64);
        self.partitions.set(i64::from(figures.partitions));
        self.in_doubt.set(figures.in_doubt as i64);
        self.uncovered.set(figures.uncovered as i64);
        self.incomplete.set(figures.incomplete as i64);
        self.idempotency_keys.set(figures.idempotency_keys as i64);
        shared::metrics::respond(&self.registry, accept)
    }
}

/// The publisher's state at a scrape, as the gauges show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// Writes are accepted.
    pub ready: bool,
    /// A standby following the log (not promoted yet).
    pub standby: bool,
    /// Channels with a version.
    pub channels: usize,
    /// Partitions of the events topic (0 until known).
    pub partitions: u32,
    /// Partitions whose last transaction's outcome is not known yet.
    pub in_doubt: usize,
    /// Channels with events no snapshot covers yet.
    pub uncovered: usize,
    /// Channels whose early versions are gone with no snapshot covering them.
    pub incomplete: usize,
    /// Idempotency keys held (with an outcome, and in flight).
    pub idempotency_keys: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_are_counted_by_route_and_status() {
        let m = PublisherMetrics::default();
        m.published("single", 201);
        m.published("single", 201);
        m.published("batch", 503);
        m.committed(3, 7);
        m.rebuilt(Duration::from_millis(1500));
        m.idempotency_store_full.inc();
        let figures = Figures { ready: true, standby: false, channels: 4, partitions: 6, in_doubt: 1, uncovered: 2, incomplete: 0, idempotency_keys: 12 };
        let _ = m.render(&figures, None);
        let t = shared::metrics::text(&m.registry);
        for line in [
            "publisher_publishes_total{route=\"single\",status=\"201\"} 2",
            "publisher_publishes_total{route=\"batch\",status=\"503\"} 1",
            "publisher_commit_records_count 1",
            "publisher_commit_events_sum 7.0",
            "publisher_rebuild_seconds 1.5",
            "publisher_ready 1",
            "publisher_standby 0",
            "publisher_channels 4",
            "publisher_in_doubt_partitions 1",
            "publisher_idempotency_store_full_total 1",
            "publisher_idempotency_keys 12",
        ] {
            assert!(t.contains(line), "{line} in\n{t}");
        }
    }
}
