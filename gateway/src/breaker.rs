//! A circuit breaker per node on the proxy path, independent of the poller: the handshakes
//! themselves open it.
//!
//! ```text
//!   Closed ──(BREAKER_FAILURES consecutive failed handshakes)──▶ Open
//!     ▲                                                          │ BREAKER_OPEN_MS
//!     │                                                          ▼
//!     └──(BREAKER_TRIALS trial handshakes succeeded)──────── HalfOpen ──(a trial failed)──▶ Open
//! ```
//!
//! A failed handshake is one the node did not answer: the connection was refused or reset, or it
//! timed out (a frozen node accepts TCP in its kernel backlog and answers nothing, so each
//! handshake would wait `UPSTREAM_CONNECT_TIMEOUT_MS`). A node's own refusal (503 not ready, full,
//! draining) is an answer: it counts as a success. While open, the proxy does not send the node
//! handshakes (another owner is tried, or the client is answered at once with 503); half-open lets
//! at most `BREAKER_TRIALS` handshakes through at a time, and a trial that never reports (its
//! client left) stops counting after `trial_timeout_ms`.

/// The breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Consecutive failed handshakes that open the breaker.
    pub failures: u32,
    /// How long it stays open before trials, ms.
    pub open_ms: u64,
    /// Trial handshakes let through at a time while half-open; as many successes close it.
    pub trials: u32,
    /// A trial without a result for this long no longer counts as in flight, ms.
    pub trial_timeout_ms: u64,
}

/// A node's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed { failures: u32 },
    Open { since_ms: u64 },
    HalfOpen { started: u32, succeeded: u32, since_ms: u64 },
}

impl Default for State {
    fn default() -> Self {
        State::Closed { failures: 0 }
    }
}

impl State {
    /// The name `/api/fleet` shows.
    pub fn name(self) -> &'static str {
        match self {
            State::Closed { .. } => "closed",
            State::Open { .. } => "open",
            State::HalfOpen { .. } => "half_open",
        }
    }
}

/// May a handshake go to the node at `now_ms`? Returns the next state and the answer (a half-open
/// breaker counts the trial it lets through).
pub fn allow(state: State, now_ms: u64, s: &Settings) -> (State, bool) {
    match state {
        State::Closed { .. } => (state, true),
        State::Open { since_ms } if now_ms.saturating_sub(since_ms) >= s.open_ms => {
            (State::HalfOpen { started: 1, succeeded: 0, since_ms: now_ms }, true)
        }
        State::Open { .. } => (state, false),
        State::HalfOpen { started, succeeded, since_ms } => {
            if started < s.trials {
                (State::HalfOpen { started: started + 1, succeeded, since_ms }, true)
            } else if now_ms.saturating_sub(since_ms) >= s.trial_timeout_ms {
                // The trials never reported (their clients left): try afresh.
                (State::HalfOpen { started: succeeded + 1, succeeded, since_ms: now_ms }, true)
            } else {
                (state, false)
            }
        }
    }
}

/// A handshake's result: `answered` when the node answered (accepted or refused it itself).
pub fn record(state: State, answered: bool, now_ms: u64, s: &Settings) -> State {
    match (state, answered) {
        (State::Closed { .. }, true) => State::Closed { failures: 0 },
        (State::Closed { failures }, false) if failures + 1 >= s.failures => State::Open { since_ms: now_ms },
        (State::Closed { failures }, false) => State::Closed { failures: failures + 1 },
        // A result of a handshake let through before the breaker opened changes nothing.
        (State::Open { .. }, _) => state,
        (State::HalfOpen { succeeded, started, since_ms }, true) => {
            if succeeded + 1 >= s.trials {
                State::Closed { failures: 0 }
            } else {
                State::HalfOpen { started, succeeded: succeeded + 1, since_ms }
            }
        }
        (State::HalfOpen { .. }, false) => State::Open { since_ms: now_ms },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Settings = Settings { failures: 3, open_ms: 5_000, trials: 2, trial_timeout_ms: 12_000 };

    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// A handshake is asked for at this time; expect it allowed or not.
        Ask(u64, bool),
        /// A handshake's result at this time.
        Done(u64, bool),
    }
    use Step::{Ask, Done};

    fn run(steps: &[Step]) -> State {
        let mut st = State::default();
        for (i, step) in steps.iter().enumerate() {
            st = match *step {
                Ask(t, want) => {
                    let (next, ok) = allow(st, t, &S);
                    assert_eq!(ok, want, "step {i} {step:?} from {st:?}");
                    next
                }
                Done(t, answered) => record(st, answered, t, &S),
            };
        }
        st
    }

    #[test]
    fn breaker_table() {
        let open = [Ask(0, true), Done(10, false), Ask(20, true), Done(30, false), Ask(40, true), Done(50, false)];
        let cases: Vec<(&str, Vec<Step>, &str)> = vec![
            ("answers keep it closed", vec![Ask(0, true), Done(1, true), Ask(2, true), Done(3, true)], "closed"),
            ("a refusal by the node is an answer", vec![Ask(0, true), Done(1, false), Ask(2, true), Done(3, true), Ask(4, true), Done(5, false), Ask(6, true), Done(7, false)], "closed"),
            ("three failures in a row open it", open.to_vec(), "open"),
            ("open: handshakes are not sent", [&open[..], &[Ask(4_000, false), Ask(5_049, false)]].concat(), "open"),
            ("after open_ms: one trial, then a second", [&open[..], &[Ask(5_050, true), Ask(5_060, true), Ask(5_070, false)]].concat(), "half_open"),
            ("both trials answered: closed", [&open[..], &[Ask(5_050, true), Ask(5_060, true), Done(5_100, true), Done(5_200, true), Ask(5_300, true)]].concat(), "closed"),
            ("one answered is not enough", [&open[..], &[Ask(5_050, true), Done(5_100, true), Ask(5_150, true)]].concat(), "half_open"),
            ("a failed trial opens it again", [&open[..], &[Ask(5_050, true), Done(5_100, false), Ask(5_200, false)]].concat(), "open"),
            ("trials that never report are retried", [&open[..], &[Ask(5_050, true), Ask(5_060, true), Ask(17_049, false), Ask(17_050, true)]].concat(), "half_open"),
            ("a late result while open changes nothing", [&open[..], &[Done(60, true)]].concat(), "open"),
        ];
        for (name, steps, want) in cases {
            assert_eq!(run(&steps).name(), want, "{name}");
        }
    }
}
