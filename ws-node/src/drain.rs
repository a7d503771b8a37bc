//! Handing sessions over: the drain steps of the brief, for a whole node or some partitions.
//!
//! 1. The sessions in scope are already out of the hub (no more events reach them: no broadcast
//!    while draining) and new handshakes for the scope get 503.
//! 2. Every session gets a `reconnect` notice with `retry_after_ms`, spread over `spread` (slow
//!    start: the node the sessions move to is not hit by all of them in the same instant).
//! 3. Clients reconnect through the gateway, with `since` = their last version, and land on the
//!    node that owns their canvas now.
//! 4. After the grace period the sessions that remain are closed (1012 Service Restart, or the
//!    code the caller asks for, e.g. 1001 on shutdown).

use crate::hub::SessionHandle;
use shared::protocol::{DrainReason, ServerMessage};
use std::time::{Duration, Instant};

/// What a hand-over did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandOverOutcome {
    /// Sessions that got the reconnect notice.
    pub notified: usize,
    /// Sessions still open after the grace period, closed by force.
    pub force_closed: usize,
    /// Time the hand-over took.
    pub took: Duration,
}

/// The `retry_after_ms` of each of `n` notices: `base` plus an even share of `spread` (the first
/// session `base`, the last nearly `base + spread`).
pub fn notice_delays(n: usize, base: u64, spread: Duration) -> impl Iterator<Item = u64> {
    let spread = spread.as_millis() as u64;
    (0..n as u64).map(move |i| base + i * spread / (n as u64).max(1))
}

/// The spread of a hand-over's notices: `RECONNECT_SPREAD_MS`, at most half the grace period (the
/// clients must have left before the rest are closed).
pub fn spread_for(grace: Duration, spread_ms: u64) -> Duration {
    Duration::from_millis(spread_ms).min(grace / 2)
}

/// Sends every session in `sessions` the reconnect notice (its `retry_after_ms` spread over
/// `spread`, see [`notice_delays`]), waits up to `grace` for them to leave (less when all left
/// sooner), and closes the rest with `final_code`. Logs the `[DRAIN]` steps.
pub async fn hand_over(
    sessions: Vec<SessionHandle>,
    reason: DrainReason,
    grace: Duration,
    (retry_after_ms, spread): (u64, Duration),
    final_code: u16,
) -> HandOverOutcome {
    let started = Instant::now();
    let mut notified = 0;
    for (s, delay) in sessions.iter().zip(notice_delays(sessions.len(), retry_after_ms, spread)) {
        let notice: tungstenite::Utf8Bytes = ServerMessage::Reconnect { reason, retry_after_ms: delay }.to_json().into();
        match s.try_send(notice) {
            Ok(()) => notified += 1,
            // A full queue cannot take the notice: close now; the client resumes by version.
            Err(_) => s.close(final_code, format!("{reason}: reconnect with since")),
        }
    }
    tracing::info!("[DRAIN] reconnect notice broadcast done reason={} sessionCount={} spreadMs={}", reason, notified, spread.as_millis());
    let all_left = futures::future::join_all(sessions.iter().map(|s| s.closed()));
    let _ = tokio::time::timeout(grace, all_left).await;
    let remaining: Vec<&SessionHandle> = sessions.iter().filter(|s| !s.is_closed()).collect();
    tracing::info!("[DRAIN] force closing remainingSessions={} reason={} code={}", remaining.len(), reason, final_code);
    for s in &remaining {
        s.close(final_code, format!("{reason}: grace period over, reconnect with since"));
    }
    HandOverOutcome { notified, force_closed: remaining.len(), took: started.elapsed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_spread_evenly() {
        let cases: [(usize, u64, u64, Vec<u64>); 4] = [
            (0, 250, 1000, vec![]),
            (1, 250, 1000, vec![250]),
            (4, 250, 1000, vec![250, 500, 750, 1000]),
            (3, 100, 0, vec![100, 100, 100]),
        ];
        for (n, base, spread, want) in cases {
            assert_eq!(notice_delays(n, base, Duration::from_millis(spread)).collect::<Vec<_>>(), want, "{n} sessions");
        }
    }

    #[test]
    fn the_spread_stays_within_half_the_grace() {
        assert_eq!(spread_for(Duration::from_millis(3000), 1000), Duration::from_millis(1000));
        assert_eq!(spread_for(Duration::from_millis(1000), 1000), Duration::from_millis(500));
        assert_eq!(spread_for(Duration::ZERO, 1000), Duration::ZERO);
    }
}
