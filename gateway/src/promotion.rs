//! When the gateway promotes a standby publisher: a pure rule over the publishers' states in
//! consecutive probes ([`crate::publishers::Publishers::probe`]).
//!
//! A *miss* is a probe in which no publisher was [`PublisherState::Ready`]; a probe with a ready
//! publisher resets the count ([`missed`]). Once [`PROMOTE_AFTER_MISSES`] probes in a row missed
//! and the latest probe found a publisher in [`PublisherState::Standby`], the first such one in
//! configured order is promoted ([`promotion`]). Whatever the attempt's result, the count starts
//! again at 0, so the next attempt needs as many misses again: one attempt per
//! `PROMOTE_AFTER_MISSES` poll intervals at most, never a storm.
//!
//! [`crate::fleet`] feeds the probes in and carries the promotion out, on the replica with the
//! authority to act only.

use crate::publishers::PublisherState;

/// Consecutive probes without a ready publisher before a standby is promoted.
pub const PROMOTE_AFTER_MISSES: u32 = 3;

/// The count of consecutive misses after a probe that found `states` (one per publisher, in
/// configured order), given `misses` before it: 0 when a publisher was ready, else one more.
pub fn missed(misses: u32, states: &[PublisherState]) -> u32 {
    if states.contains(&PublisherState::Ready) {
        0
    } else {
        misses.saturating_add(1)
    }
}

/// Which publisher to promote after a probe that found `states`, with `misses` counted
/// ([`missed`], this probe included): the first standby once `misses` reached
/// [`PROMOTE_AFTER_MISSES`], else none. The caller resets `misses` to 0 after the attempt.
pub fn promotion(misses: u32, states: &[PublisherState]) -> Option<usize> {
    if misses < PROMOTE_AFTER_MISSES || states.contains(&PublisherState::Ready) {
        return None;
    }
    states.iter().position(|s| *s == PublisherState::Standby)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PublisherState::{Fenced, NotReady, Other, Ready, Standby, Unreachable};

    #[test]
    fn promotion_table() {
        // (misses counted, states of the latest probe, promote)
        let cases: &[(u32, &[PublisherState], Option<usize>)] = &[
            (0, &[Ready, Standby], None),
            (1, &[Unreachable, Standby], None),
            (2, &[Unreachable, Standby], None),
            (3, &[Unreachable, Standby], Some(1)),
            (4, &[Unreachable, Standby], Some(1)),
            (3, &[Standby, Standby], Some(0)),
            (3, &[Fenced, NotReady, Standby, Standby], Some(2)),
            (3, &[Other, Standby], Some(1)),
            // a ready one: nothing to promote, whatever was counted before
            (7, &[Ready, Standby], None),
            // no standby to promote
            (3, &[Unreachable, NotReady], None),
            (9, &[Fenced, Other], None),
            (3, &[], None),
        ];
        for (misses, states, want) in cases {
            assert_eq!(promotion(*misses, states), *want, "{misses} misses, {states:?}");
        }
    }

    #[test]
    fn misses_count_consecutive_probes_without_a_ready_publisher() {
        // (misses before, states of the probe, misses after)
        let cases: &[(u32, &[PublisherState], u32)] = &[
            (0, &[Unreachable, Standby], 1),
            (2, &[Unreachable, Standby], 3),
            (2, &[Unreachable, Ready], 0),
            (5, &[Ready], 0),
            (0, &[], 1),
            (u32::MAX, &[Standby], u32::MAX),
        ];
        for (before, states, want) in cases {
            assert_eq!(missed(*before, states), *want, "{before} {states:?}");
        }
    }

    /// The loop as the fleet runs it: count, promote, reset.
    fn run(probes: &[&[PublisherState]]) -> Vec<Option<usize>> {
        let mut misses = 0;
        probes
            .iter()
            .map(|states| {
                misses = missed(misses, states);
                let p = promotion(misses, states);
                if p.is_some() {
                    misses = 0;
                }
                p
            })
            .collect()
    }

    #[test]
    fn a_failed_attempt_needs_as_many_misses_again_and_a_ready_probe_restarts_the_count() {
        let down: &[PublisherState] = &[Unreachable, Standby];
        let up: &[PublisherState] = &[Ready, Standby];
        assert_eq!(run(&[down, down, down, down, down, down, down]), [None, None, Some(1), None, None, Some(1), None]);
        assert_eq!(run(&[down, down, up, down, down, down]), [None, None, None, None, None, Some(1)]);
        // A standby seen only in the latest probe is enough; one seen before and gone is not.
        let gone: &[PublisherState] = &[Unreachable, Unreachable];
        assert_eq!(run(&[gone, gone, down]), [None, None, Some(1)]);
        assert_eq!(run(&[down, down, gone, down]), [None, None, None, Some(1)]);
    }
}
