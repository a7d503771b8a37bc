//! The publishers' probe on the poll interval, and the promotion of a standby publisher it
//! leads to ([`crate::promotion`]'s rule): when no publisher accepted writes in
//! [`PROMOTE_AFTER_MISSES`] probes in a row and one is a standby, the first standby is decided
//! (`promote_publisher`), asked to promote (`POST /admin/promote`, [`crate::publisher_admin`])
//! under the decision's id and fencing token, and the outcome written
//! (`promote_publisher_completed` for a 200 or a 202, `promote_publisher_failed` otherwise).
//!
//! Every replica probes (its own forwarding prefers the publisher found ready), but only the
//! replica with the authority to act (the leader, or a standalone gateway) counts misses and
//! promotes. A replica without it keeps its count at 0: one that becomes the leader first sees
//! as many misses itself, which also gives a promotion its predecessor just asked for the time to
//! finish. After an accepted promotion the next probe comes at once, so the preferred publisher
//! moves to the promoted one without waiting for a poll interval.

use super::Fleet;
use crate::decisions::Action;
use crate::promotion::{self, PROMOTE_AFTER_MISSES};
use crate::publisher_admin::Promoted;
use crate::publishers::PublisherState;
use std::sync::Arc;

impl Fleet {
    /// Probes the publishers on the poll interval until `shutdown`, promoting a standby by
    /// [`promotion::promotion`] after each probe (see the module docs).
    pub async fn run_publisher_probe(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut ticker = tokio::time::interval(self.config.poll_interval());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut misses = 0;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {
                    let states = self.publishers.probe().await;
                    if self.leadership.authority().is_err() {
                        misses = 0;
                        continue;
                    }
                    misses = promotion::missed(misses, &states);
                    let Some(i) = promotion::promotion(misses, &states) else { continue };
                    // Whatever comes of it, the next attempt needs as many misses again.
                    let counted = std::mem::take(&mut misses);
                    if self.promote_publisher(i, counted, &states).await {
                        ticker.reset_immediately();
                    }
                }
            }
        }
    }

    /// Promotes publisher `i` after `misses` probes without a ready publisher, the latest of
    /// which found `states`: decides it, asks the publisher, writes the outcome. Whether the
    /// publisher accepted (200, or 202 while it finishes by itself).
    async fn promote_publisher(&self, i: usize, misses: u32, states: &[PublisherState]) -> bool {
        let urls = self.publishers.urls();
        let (Some(url), Some(admin_url)) = (urls.get(i).copied(), self.config.publisher_admin_url(i)) else { return false };
        let seen: Vec<String> = urls.iter().zip(states).map(|(u, s)| format!("{u} {s}")).collect();
        let reason = format!("no publisher accepted writes in the last {misses} polls ({})", seen.join(", "));
        let detail = serde_json::json!({"publisher": url, "misses": misses, "states": states});
        let decided = match self.decide(url, Action::PromotePublisher, &reason, detail, None).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("[GATEWAY] standby publisher {} not promoted: {}; tried again after {} more polls without a ready publisher", url, e, PROMOTE_AFTER_MISSES);
                return false;
            }
        };
        tracing::warn!("[GATEWAY] promoting standby publisher {}: {}", url, reason);
        let result = match self.still_acting(decided.token) {
            Ok(()) => self.publisher_admin.promote(admin_url, &decided).await.map_err(|e| (e.to_string(), e.detail())),
            Err(e) => Err((e, serde_json::json!({"status": null, "code": "not_leader"}))),
        };
        match result {
            Ok(Promoted::Active) => {
                tracing::info!("[GATEWAY] standby publisher {} promoted: it accepts writes", url);
                let detail = serde_json::json!({"publisher": url, "active": true, "promoting": false});
                self.report(url, Action::PromotePublisherCompleted, "it accepts writes", detail, &decided).await;
                true
            }
            Ok(Promoted::Promoting) => {
                tracing::info!("[GATEWAY] standby publisher {} is promoting: it accepts writes once it finishes, by itself", url);
                let detail = serde_json::json!({"publisher": url, "active": false, "promoting": true});
                self.report(url, Action::PromotePublisherCompleted, "it is promoting and finishes by itself", detail, &decided).await;
                true
            }
            Err((why, mut detail)) => {
                tracing::warn!(
                    "[GATEWAY] promoting standby publisher {} failed: {}; tried again after {} more polls without a ready publisher",
                    url,
                    why,
                    PROMOTE_AFTER_MISSES
                );
                detail["publisher"] = serde_json::Value::String(url.to_owned());
                self.report(url, Action::PromotePublisherFailed, &why, detail, &decided).await;
                false
            }
        }
    }
}
