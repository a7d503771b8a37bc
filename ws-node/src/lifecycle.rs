//! The node's lifecycle as a state machine: one pure transition function, no I/O.
//!
//! ```text
//!         start-recovery            catch-up completed
//!   Up ─────────────────▶ CatchingUp ─────────────────▶ Ready
//!   ▲  ◀───────────────── (catch-up failed)               │
//!   │                                                     │ full drain started
//!   └──────────────── Draining ◀──────────────────────────┘
//!        drain finished
//! ```
//!
//! A changed events-topic ID while `Ready` (the topic deleted and created again) is a full drain
//! whose end forgets the state and starts the catch-up at once: `Ready → Draining → Up →
//! CatchingUp → Ready`, never serving the old history's state on the new topic.
//!
//! `/health` reports `Up` and `CatchingUp` as `UP`, `Ready` as `HEALTHY`, `Draining` as `DRAINING`.
//! A drain scoped to partitions does not change the phase.

use shared::api::NodeState;

/// Where the node is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Answers, not serving: waiting for start-recovery.
    Up,
    /// Replaying the log up to the recorded targets.
    CatchingUp,
    /// Caught up, in the broadcast group, serving sessions.
    Ready,
    /// A full drain is handing every session over.
    Draining,
}

impl Phase {
    /// The state `/health` reports.
    pub fn reported(self) -> NodeState {
        match self {
            Phase::Up | Phase::CatchingUp => NodeState::Up,
            Phase::Ready => NodeState::Healthy,
            Phase::Draining => NodeState::Draining,
        }
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// `POST /admin/start-recovery`.
    StartRecovery,
    CatchupCompleted,
    CatchupFailed,
    /// The broadcast consumer could not start after catch-up.
    BroadcastFailed,
    /// `POST /admin/drain` without partitions, or SIGTERM.
    DrainRequested,
    DrainFinished,
    /// The events topic's ID changed while the node served: its state is of another history.
    HistoryChanged,
}

/// What the I/O loop must do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing to do (the input was accepted but changes nothing, e.g. a repeated start-recovery).
    None,
    /// Start the catch-up replay.
    StartCatchup,
    /// Catch-up is done: start the broadcast consumer and accept sessions.
    StartBroadcast,
    /// Begin the full drain: hand sessions over and leave the broadcast group.
    StartDrain,
    /// Stop serving another history: a full drain, then forget the state and catch up again.
    Rebuild,
    /// The input does not apply in this phase; answer with this reason.
    Reject(&'static str),
}

/// The transition table.
pub fn transition(phase: Phase, input: Input) -> (Phase, Effect) {
    use Effect as E;
    use Input as I;
    use Phase as P;
    match (phase, input) {
        (P::Up, I::StartRecovery) => (P::CatchingUp, E::StartCatchup),
        (P::CatchingUp, I::StartRecovery) => (P::CatchingUp, E::None),
        (P::Ready, I::StartRecovery) => (P::Ready, E::None),
        (P::Draining, I::StartRecovery) => (P::Draining, E::Reject("the node is draining; recover after the drain")),

        (P::CatchingUp, I::CatchupCompleted) => (P::Ready, E::StartBroadcast),
        (P::CatchingUp, I::CatchupFailed) => (P::Up, E::None),
        (P::Ready, I::BroadcastFailed) => (P::Up, E::None),
        (p, I::BroadcastFailed) => (p, E::Reject("the broadcast consumer is not starting")),
        (p, I::CatchupCompleted | I::CatchupFailed) => (p, E::Reject("no catch-up is running")),

        (P::Ready | P::Up, I::DrainRequested) => (P::Draining, E::StartDrain),
        (P::CatchingUp, I::DrainRequested) => (P::CatchingUp, E::Reject("the node is catching up; it has no sessions")),
        (P::Draining, I::DrainRequested) => (P::Draining, E::Reject("a drain is already running")),

        (P::Ready, I::HistoryChanged) => (P::Draining, E::Rebuild),
        // Not serving: the next catch-up reads the new ID and forgets the old state.
        (p, I::HistoryChanged) => (p, E::None),

        (P::Draining, I::DrainFinished) => (P::Up, E::None),
        (p, I::DrainFinished) => (p, E::Reject("no drain is running")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Effect as E;
    use Input as I;
    use Phase as P;

    #[test]
    fn transition_table() {
        let table = [
            (P::Up, I::StartRecovery, P::CatchingUp, E::StartCatchup),
            (P::CatchingUp, I::StartRecovery, P::CatchingUp, E::None),
            (P::Ready, I::StartRecovery, P::Ready, E::None),
            (P::CatchingUp, I::CatchupCompleted, P::Ready, E::StartBroadcast),
            (P::CatchingUp, I::CatchupFailed, P::Up, E::None),
            (P::Ready, I::BroadcastFailed, P::Up, E::None),
            (P::Ready, I::DrainRequested, P::Draining, E::StartDrain),
            (P::Up, I::DrainRequested, P::Draining, E::StartDrain),
            (P::Draining, I::DrainFinished, P::Up, E::None),
            (P::Ready, I::HistoryChanged, P::Draining, E::Rebuild),
            (P::Up, I::HistoryChanged, P::Up, E::None),
            (P::CatchingUp, I::HistoryChanged, P::CatchingUp, E::None),
            (P::Draining, I::HistoryChanged, P::Draining, E::None),
        ];
        for (from, input, to, effect) in table {
            assert_eq!(transition(from, input), (to, effect), "{from:?} + {input:?}");
        }
    }

    #[test]
    fn inputs_that_do_not_apply_change_nothing() {
        for (from, input) in [
            (P::Draining, I::StartRecovery),
            (P::Draining, I::DrainRequested),
            (P::CatchingUp, I::DrainRequested),
            (P::Ready, I::CatchupCompleted),
            (P::Up, I::CatchupFailed),
            (P::Ready, I::DrainFinished),
            (P::Up, I::DrainFinished),
            (P::Draining, I::BroadcastFailed),
        ] {
            let (to, effect) = transition(from, input);
            assert_eq!(to, from, "{from:?} + {input:?}");
            assert!(matches!(effect, E::Reject(_)), "{from:?} + {input:?}");
        }
    }

    #[test]
    fn a_full_cycle_reports_up_healthy_draining_up() {
        let mut p = P::Up;
        let mut seen = vec![p.reported()];
        for input in [I::StartRecovery, I::CatchupCompleted, I::DrainRequested, I::DrainFinished] {
            p = transition(p, input).0;
            seen.push(p.reported());
        }
        use shared::api::NodeState as S;
        assert_eq!(seen, [S::Up, S::Up, S::Healthy, S::Draining, S::Up]);
    }
}
