//! What lets a client's handshake through to a node: the node's handshake rate bound (slow start)
//! over its circuit breaker ([`crate::breaker`], pure). One per gateway, keyed by node id.

use crate::breaker::{self, State};
use crate::refusal::Refused;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A breaker's change worth a log line or a decision-log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Open → half-open: trials go through.
    HalfOpen,
    /// Handshakes failed without an answer: open (from the state named).
    Opened { from: &'static str },
    /// Trials answered: closed again.
    Closed,
}

/// The rate bounds and breakers of every node.
pub struct Handshakes {
    rate: Option<governor::DefaultKeyedRateLimiter<String>>,
    rate_per_node: u32,
    breakers: Mutex<BTreeMap<String, State>>,
    settings: breaker::Settings,
}

impl Handshakes {
    /// `rate_per_node` handshakes a second with a burst of `burst` (0: the rate) per node, 0: no
    /// bound; breakers with `settings`.
    pub fn new(rate_per_node: u32, burst: u32, settings: breaker::Settings) -> Self {
        let rate = std::num::NonZeroU32::new(rate_per_node).map(|r| {
            let burst = std::num::NonZeroU32::new(burst).unwrap_or(r);
            governor::RateLimiter::keyed(governor::Quota::per_second(r).allow_burst(burst))
        });
        Self { rate, rate_per_node, breakers: Mutex::new(BTreeMap::new()), settings }
    }

    /// May a handshake go to node `id` at `now_ms`: within its rate and its breaker closed or
    /// letting a trial through. `Ok(Some(HalfOpen))` when this call moved the breaker to half-open.
    ///
    /// # Errors
    /// The refusal for the client: 503 `node_busy` with a jittered Retry-After (1–3 s, so the
    /// excess does not come back in one wave), or `node_circuit_open`.
    pub fn admit(&self, id: &str, now_ms: u64) -> Result<Option<Change>, Refused> {
        if let Some(limiter) = &self.rate {
            if limiter.check_key(&id.to_owned()).is_err() {
                return Err(Refused {
                    code: "node_busy".into(),
                    message: format!("node {id} takes more than {} handshakes a second (HANDSHAKE_RATE_PER_NODE); try again shortly", self.rate_per_node),
                    retry_after_secs: 1 + rand::random::<u64>() % 3,
                });
            }
        }
        let mut breakers = self.breakers.lock().expect("breaker lock");
        let state = breakers.entry(id.to_owned()).or_default();
        let (next, allowed) = breaker::allow(*state, now_ms, &self.settings);
        let change = matches!((*state, next), (State::Open { .. }, State::HalfOpen { .. })).then_some(Change::HalfOpen);
        *state = next;
        if allowed {
            Ok(change)
        } else {
            Err(Refused {
                code: "node_circuit_open".into(),
                message: format!("node {id} stopped answering handshakes; it gets none until trials succeed"),
                retry_after_secs: 1,
            })
        }
    }

    /// A handshake to node `id` ended: `answered` when the node answered it (accepted or refused).
    pub fn done(&self, id: &str, answered: bool, now_ms: u64) -> Option<Change> {
        let mut breakers = self.breakers.lock().expect("breaker lock");
        let state = breakers.entry(id.to_owned()).or_default();
        let before = *state;
        *state = breaker::record(before, answered, now_ms, &self.settings);
        match (before, *state) {
            (State::Closed { .. } | State::HalfOpen { .. }, State::Open { .. }) => Some(Change::Opened { from: before.name() }),
            (State::HalfOpen { .. }, State::Closed { .. }) => Some(Change::Closed),
            _ => None,
        }
    }

    /// The name of node `id`'s breaker state (`closed` for a node never seen).
    pub fn circuit(&self, id: &str) -> &'static str {
        self.breakers.lock().expect("breaker lock").get(id).copied().unwrap_or_default().name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_refuses_the_excess_and_the_breaker_opens_and_closes() {
        let s = breaker::Settings { failures: 2, open_ms: 1000, trials: 1, trial_timeout_ms: 500 };
        let h = Handshakes::new(1, 1, s);
        assert_eq!(h.admit("ws-1", 0).unwrap(), None);
        assert_eq!(h.admit("ws-1", 0).unwrap_err().code, "node_busy", "one a second, burst 1");
        let h = Handshakes::new(0, 0, s);
        assert_eq!(h.done("ws-1", false, 0), None);
        assert_eq!(h.done("ws-1", false, 10), Some(Change::Opened { from: "closed" }));
        assert_eq!(h.circuit("ws-1"), "open");
        assert_eq!(h.admit("ws-1", 20).unwrap_err().code, "node_circuit_open");
        assert_eq!(h.admit("ws-1", 2000).unwrap(), Some(Change::HalfOpen));
        assert_eq!(h.done("ws-1", true, 2010), Some(Change::Closed));
        assert_eq!(h.circuit("ws-2"), "closed");
    }
}
