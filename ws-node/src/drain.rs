//! Handing sessions over: the drain steps of the brief, for a whole node or some partitions.
//!
//! A whole node ([`hand_over`]), and a revocation or a hold that ran out:
//! 1. The sessions in scope are already out of the hub (no more events reach them: no broadcast
//!    while draining) and new handshakes for the scope get 503.
//! 2. Every session gets a `reconnect` notice with `retry_after_ms`, spread over `spread` (slow
//!    start: the node the sessions move to is not hit by all of them in the same instant).
//! 3. Clients reconnect through the gateway, with `since` = their last version, and land on the
//!    node that owns their channel now.
//! 4. After the grace period the sessions that remain are closed (1012 Service Restart, or the
//!    code the caller asks for, e.g. 1001 on shutdown).
//!
//! Some partitions ([`hand_over_paced`], the gateway's failback once the new owner serves them):
//! the sessions stay in the hub and keep their events while they wait for their turn; the node
//! spreads the notices themselves over `spread`, each taking its session out of the hub as it is
//! sent, with `retry_after_ms` 0. A client then goes without events only for its own reconnect,
//! not for a notice's delay, and the new owner still sees the sessions arrive spread out.

use crate::hub::{Hub, SessionHandle};
use shared::ChannelId;
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

/// When the `i`th of `n` paced notices is sent, from the start of the hand-over: an even share of
/// `spread` (the first at once, the last nearly `spread` later). Pure.
pub fn paced_at(i: usize, n: usize, spread: Duration) -> Duration {
    spread.mul_f64(i as f64 / n.max(1) as f64)
}

/// Hands over the sessions `ids` (of a scoped drain, [`Hub::pause`]) one at a time: the `i`th at
/// [`paced_at`], taken out of the hub (it had its events until then) and sent the reconnect
/// notice with `retry_after_ms` 0. Then waits until `grace` from the start for them to leave and
/// closes the rest with `final_code`. A session gone meanwhile (ended, or taken by a revocation)
/// is skipped. Logs the `[DRAIN]` steps.
pub async fn hand_over_paced(hub: &Hub, ids: Vec<(ChannelId, u64)>, reason: DrainReason, grace: Duration, spread: Duration, final_code: u16) -> HandOverOutcome {
    let started = tokio::time::Instant::now();
    let n = ids.len();
    let mut notified = 0;
    let mut taken = Vec::with_capacity(n);
    for (i, (channel, id)) in ids.into_iter().enumerate() {
        tokio::time::sleep_until(started + paced_at(i, n, spread)).await;
        let Some(s) = hub.take_session(&channel, id) else { continue };
        let notice: tungstenite::Utf8Bytes = ServerMessage::Reconnect { reason, retry_after_ms: 0 }.to_json().into();
        match s.try_send(notice) {
            Ok(()) => notified += 1,
            Err(_) => s.close(final_code, format!("{reason}: reconnect with since")),
        }
        taken.push(s);
    }
    tracing::info!("[DRAIN] reconnect notices sent one by one reason={} sessionCount={} spreadMs={} (each kept its events until its notice)", reason, notified, spread.as_millis());
    let all_left = futures::future::join_all(taken.iter().map(|s| s.closed()));
    let _ = tokio::time::timeout_at(started + grace.max(spread), all_left).await;
    let remaining: Vec<&SessionHandle> = taken.iter().filter(|s| !s.is_closed()).collect();
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
    fn paced_notices_are_spread_evenly_from_the_start() {
        let ms = |i, n, spread| paced_at(i, n, Duration::from_millis(spread)).as_millis() as u64;
        // (i, n, spread ms) → sent at, ms
        for (i, n, spread, want) in [(0, 1, 1000, 0), (0, 4, 1000, 0), (1, 4, 1000, 250), (3, 4, 1000, 750), (2, 3, 0, 0), (0, 0, 1000, 0)] {
            assert_eq!(ms(i, n, spread), want, "notice {i} of {n} over {spread} ms");
        }
    }

    #[tokio::test]
    async fn a_paced_hand_over_keeps_each_session_live_until_its_notice() {
        use crate::state::Window;
        use shared::{CanvasDims, Color, PixelEvent};
        use std::collections::BTreeSet;
        let hub = std::sync::Arc::new(Hub::new(std::sync::Arc::new(shared::namespaces::Namespaces::pixels_only(CanvasDims { width: 4, height: 4 })), Window { events: 100, bytes: usize::MAX }));
        hub.assign(&[0]);
        let c = ChannelId::parse("c1").unwrap();
        let mut rxs = Vec::new();
        for id in 1..=4 {
            let (handle, rx) = SessionHandle::new(id, c.clone(), 0, 64);
            hub.subscribe(handle, 0).unwrap();
            rxs.push(rx);
        }
        let ids = hub.pause(&BTreeSet::from([0]));
        let drain = tokio::spawn({
            let hub = hub.clone();
            async move { hand_over_paced(&hub, ids, DrainReason::FailbackToRecoveredServer, Duration::from_secs(3), Duration::from_millis(400), 1012).await }
        });
        // One event every 20 ms while the notices go out at 0, 100, 200 and 300 ms.
        for v in 1..=25u64 {
            let ev = PixelEvent { canvas: c.clone(), version: v, x: 0, y: 0, color: Color([0, 0, 0]), published_at_ms: 0 };
            hub.apply(0, v as i64 - 1, &ev.into());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Each session's frames: the events it got, then its notice (retry_after_ms 0).
        let frames: Vec<Vec<String>> = rxs.iter().map(|rx| rx.out.take_waiting().iter().map(|w| String::from_utf8_lossy(&w[2..]).into_owned()).collect()).collect();
        for rx in &rxs {
            rx.out.finish(); // the client left
        }
        let out = drain.await.unwrap();
        assert_eq!((out.notified, out.force_closed), (4, 0));
        let events: Vec<usize> = frames.iter().map(|f| f.iter().filter(|t| t.contains("\"event\"")).count()).collect();
        assert!(events.windows(2).all(|w| w[0] <= w[1]) && events[0] < events[3], "sessions noticed later kept their events longer: {events:?}");
        for f in &frames {
            let last = f.last().expect("a notice");
            assert!(last.contains("\"reconnect\"") && last.contains("\"retry_after_ms\":0"), "the notice comes last, with no delay: {last}");
        }
    }

    #[test]
    fn the_spread_stays_within_half_the_grace() {
        assert_eq!(spread_for(Duration::from_millis(3000), 1000), Duration::from_millis(1000));
        assert_eq!(spread_for(Duration::from_millis(1000), 1000), Duration::from_millis(500));
        assert_eq!(spread_for(Duration::ZERO, 1000), Duration::ZERO);
    }
}
