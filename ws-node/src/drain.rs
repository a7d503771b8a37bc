//! Handing sessions over: the drain steps of the brief, for a whole node or some partitions.
//!
//! 1. The sessions in scope are already out of the hub (no more events reach them: no broadcast
//!    while draining) and new handshakes for the scope get 503.
//! 2. Every session gets a `reconnect` notice with `retry_after_ms`.
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

/// Sends every session in `sessions` the reconnect notice, waits up to `grace` for them to leave
/// (less when all left sooner), and closes the rest with `final_code`. Logs the `[DRAIN]` steps.
pub async fn hand_over(
    sessions: Vec<SessionHandle>,
    reason: DrainReason,
    grace: Duration,
    retry_after_ms: u64,
    final_code: u16,
) -> HandOverOutcome {
    let started = Instant::now();
    let notice: tungstenite::Utf8Bytes = ServerMessage::Reconnect { reason, retry_after_ms }.to_json().into();
    let mut notified = 0;
    for s in &sessions {
        match s.try_send(notice.clone()) {
            Ok(()) => notified += 1,
            // A full queue cannot take the notice: close now; the client resumes by version.
            Err(_) => s.close(final_code, format!("{reason}: reconnect with since")),
        }
    }
    tracing::info!("[DRAIN] reconnect notice broadcast done reason={} sessionCount={}", reason, notified);
    let all_left = futures::future::join_all(sessions.iter().map(|s| s.closed()));
    let _ = tokio::time::timeout(grace, all_left).await;
    let remaining: Vec<&SessionHandle> = sessions.iter().filter(|s| !s.is_closed()).collect();
    tracing::info!("[DRAIN] force closing remainingSessions={} reason={} code={}", remaining.len(), reason, final_code);
    for s in &remaining {
        s.close(final_code, format!("{reason}: grace period over, reconnect with since"));
    }
    HandOverOutcome { notified, force_closed: remaining.len(), took: started.elapsed() }
}
