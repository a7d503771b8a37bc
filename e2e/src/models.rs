//! The channels of the other models the end-to-end runs publish to and check beside the
//! canvases: their namespaces (a `fleet.toml` every binary reads), their data, their steady
//! publishing ([`ModelLoad`]), and their reset and delete through the gateway's admin routes.

use crate::fleet::Fleet;
use anyhow::Context;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The channels of the other models the scenario publishes to (one per model), and the
/// `fleet.toml` that declares their namespaces (the default namespace stays pixels of the fleet's
/// `CANVAS_WIDTH` × `CANVAS_HEIGHT`).
pub const MODEL_CHANNELS: [&str; 3] = ["scores:final", "chat:lobby", "prices:eur"];

/// The channel of [`MODEL_CHANNELS`] the scenario resets mid-run: its clients go on in its next
/// epoch (a `reset` to version 0, then its empty state), checked from there.
pub const RESET_CHANNEL: &str = "scores:final";

/// The namespaces of [`MODEL_CHANNELS`].
pub const MODEL_FLEET_TOML: &str = "[namespaces.scores]\nmodel = \"json\"\n\n[namespaces.chat]\nmodel = \"stream\"\n\n[namespaces.prices]\nmodel = \"latest\"\n";

/// The data of the `i`th publication to `channel` (of [`MODEL_CHANNELS`]).
pub fn model_data(channel: &str, i: u64) -> serde_json::Value {
    match channel.split(':').next() {
        Some("scores") => serde_json::json!({ "home": i / 3, "away": i / 5, format!("p{}", i % 4): i }),
        Some("chat") => serde_json::json!({ "text": format!("message {i}"), "from": "e2e" }),
        _ => serde_json::json!({ "bid": i as f64 / 4.0, "ask": (i + 1) as f64 / 4.0 }),
    }
}

/// A `fleet.toml` with the namespaces of [`MODEL_CHANNELS`] ([`MODEL_FLEET_TOML`]), for
/// `FLEET_CONFIG` (removed when dropped).
///
/// # Errors
/// When the file cannot be written.
pub fn model_fleet_toml() -> anyhow::Result<tempfile::NamedTempFile> {
    let toml = tempfile::Builder::new().prefix("fleet-").suffix(".toml").tempfile().context("a fleet.toml")?;
    std::fs::write(toml.path(), MODEL_FLEET_TOML).context("write fleet.toml")?;
    Ok(toml)
}

/// Resets `channel` through the gateway's admin route (`POST /api/channels/{id}/reset`); returns
/// the epoch the answer names.
///
/// # Errors
/// When the answer is not 200 with an epoch.
pub async fn reset_channel(fleet: &Fleet, channel: &str) -> anyhow::Result<String> {
    let url = format!("{}/api/channels/{channel}/reset", fleet.gateway.url());
    let r = fleet.admin(fleet.http.post(&url)).json(&serde_json::json!({})).timeout(Duration::from_secs(15)).send().await?;
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    anyhow::ensure!(status == 200, "reset of {channel} answered {status}: {body}");
    body["epoch"].as_str().map(str::to_owned).with_context(|| format!("reset of {channel}: no epoch in {body}"))
}

/// Deletes `channel` through the gateway's admin route (`DELETE /api/channels/{id}`); returns
/// the epoch the answer names (the channel's next history's).
///
/// # Errors
/// When the answer is not 200.
pub async fn delete_channel(fleet: &Fleet, channel: &str) -> anyhow::Result<String> {
    let url = format!("{}/api/channels/{channel}", fleet.gateway.url());
    let r = fleet.admin(fleet.http.delete(&url)).json(&serde_json::json!({})).timeout(Duration::from_secs(15)).send().await?;
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    anyhow::ensure!(status == 200 && body["deleted"] == true, "delete of {channel} answered {status}: {body}");
    body["epoch"].as_str().map(str::to_owned).with_context(|| format!("delete of {channel}: no epoch in {body}"))
}

/// Steady publishing to channels of the other models: one publication to each every 50 ms (a
/// publish the publisher does not answer 201 is not retried: the next one carries the next data).
/// Made with [`ModelLoad::recording`], it keeps what it published, for checks of what clients show.
pub struct ModelLoad {
    stop: tokio_util::sync::CancellationToken,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Vec<Published>>,
}

/// A publication [`ModelLoad`] made: its channel, the version the publisher gave it, its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub channel: String,
    pub version: u64,
    pub data: serde_json::Value,
}

impl ModelLoad {
    /// Starts publishing to `channels` through `publisher`.
    pub fn start(publisher: &str, channels: Vec<String>) -> Self {
        Self::spawn(publisher, channels, false)
    }

    /// Starts publishing to `channels` through `publisher`, keeping each publication for
    /// [`ModelLoad::published`].
    pub fn recording(publisher: &str, channels: Vec<String>) -> Self {
        Self::spawn(publisher, channels, true)
    }

    fn spawn(publisher: &str, channels: Vec<String>, record: bool) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let accepted = Arc::new(AtomicU64::new(0));
        let (publisher, token, count) = (publisher.to_owned(), stop.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut published = Vec::new();
            let mut i = 0u64;
            while !token.is_cancelled() && !channels.is_empty() {
                for c in &channels {
                    let data = model_data(c, i);
                    let url = format!("{publisher}/channels/{c}/publications");
                    let Ok(r) = http.post(&url).json(&serde_json::json!({ "data": data })).timeout(Duration::from_secs(10)).send().await else { continue };
                    if r.status().as_u16() != 201 {
                        continue;
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                    if !record {
                        continue;
                    }
                    if let Some(version) = r.json::<serde_json::Value>().await.ok().and_then(|b| b["version"].as_u64()) {
                        published.push(Published { channel: c.clone(), version, data });
                    }
                }
                i += 1;
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    () = token.cancelled() => {}
                }
            }
            published
        });
        Self { stop, accepted, task }
    }

    /// Publications accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Stops; returns the publications accepted.
    pub async fn stop(self) -> u64 {
        self.stop.cancel();
        let _ = self.task.await;
        self.accepted.load(Ordering::Relaxed)
    }

    /// Stops; returns the publications accepted, in the order they were answered (each channel's
    /// in version order); none unless made by [`ModelLoad::recording`].
    pub async fn published(self) -> Vec<Published> {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}
