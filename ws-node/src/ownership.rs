//! Ownership: what the node does with each partition of the events topic, as one enum per
//! partition and one pure transition function ([`transition`]), with the holds and the bridge that
//! a cooperative rebalance needs.
//!
//! - **Owned**: assigned to this node's broadcast consumer; its sessions are served here.
//! - **Held**: moved to another node (make-before-break): no new sessions here, but the open ones
//!   keep getting their events, read from the log by the release reader, until a scoped drain
//!   hands them over, the partition comes back, or the hold ends ([`Ownership::end_hold`]). Each
//!   revocation is one hold, with a number: a later hold of the same partition is not ended by an
//!   earlier hold's timer.
//! - **Paused** (beside either role): a scoped drain is handing its sessions over, one at a time
//!   over the notices' spread: no new session until it resumes, and the sessions not handed over
//!   yet keep getting their events (a held partition stays held, so the release reader goes on
//!   reading it). When the drain is over the hold ends.
//! - **Bridged**: owned partitions the release reader also reads until the rebalance's next round,
//!   because librdkafka hands the broadcast consumer nothing of them until then (see
//!   [`Ownership::bridge`]).
//!
//! The hub keeps this under its own lock, beside the channels: whether an event is fanned out and
//! whether a session is admitted are decided atomically with applying and registering.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Why a session cannot be served here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this node does not own partition {partition}")]
    NotOwner { partition: i32 },
    #[error("partition {partition} is being handed over")]
    Paused { partition: i32 },
    #[error("this node's state is at version {have}, behind the client's {since}")]
    Behind { have: u64, since: u64 },
}

/// A partition's role on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Not served here (never assigned, revoked, or its hold ended).
    #[default]
    NotOwned,
    /// Assigned to this node's broadcast consumer.
    Owned,
    /// Moved to another node; its open sessions are served from the log under hold number `.0`.
    Held(u64),
}

/// One partition: its role, and how many scoped drains running now paused it (two failbacks'
/// drains can overlap: the first one's end must not end the second one's pause or hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Part {
    pub role: Role,
    pub pauses: u32,
}

impl Part {
    /// Whether a drain running now paused it.
    pub fn paused(self) -> bool {
        self.pauses > 0
    }

    /// Whether events of this partition are fanned out to its sessions here (a paused one's
    /// sessions are those a drain has not handed over yet).
    pub fn live(self) -> bool {
        matches!(self.role, Role::Owned | Role::Held(_))
    }
}

/// What happens to a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The broadcast consumer was assigned it (a held partition assigned back ends its hold: its
    /// sessions simply stay).
    Assigned,
    /// A cooperative rebalance moved it away; hold number `.0` keeps its sessions here.
    Held(u64),
    /// Revoked with its sessions taken out (lost, leaving the group, or no hold).
    Revoked,
    /// A drain scoped to it hands its sessions over: no new ones (a held partition stays held
    /// until the drain is over: its sessions not handed over yet keep their events).
    Paused,
    /// A scoped drain is over: its sessions were handed over; when it was the last drain
    /// pausing the partition, the pause ends and so does a hold.
    Resumed,
    /// Hold number `.0` ran out: ends the hold if the partition is still in it.
    HoldEnded(u64),
    /// A drain of the whole node takes every session: holds end, nothing is paused.
    DrainedAll,
}

/// The transition table. Pure.
pub fn transition(part: Part, event: Event) -> Part {
    match event {
        Event::Assigned => Part { role: Role::Owned, ..part },
        Event::Held(n) => Part { role: Role::Held(n), ..part },
        Event::Revoked => Part { role: Role::NotOwned, ..part },
        Event::Paused => Part { pauses: part.pauses.saturating_add(1), ..part },
        Event::Resumed if part.pauses > 1 => Part { pauses: part.pauses - 1, ..part },
        Event::Resumed => Part { role: if matches!(part.role, Role::Held(_)) { Role::NotOwned } else { part.role }, pauses: 0 },
        Event::HoldEnded(n) if part.role == Role::Held(n) => Part { role: Role::NotOwned, ..part },
        Event::HoldEnded(_) => part,
        Event::DrainedAll => Part { role: if matches!(part.role, Role::Held(_)) { Role::NotOwned } else { part.role }, ..part },
    }
}

/// The node's readers of the events topic, each applying the records of the partitions in its
/// scope ([`Ownership::applies`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The broadcast consumer: the owned partitions.
    Broadcast,
    /// The release reader: the held partitions, and the owned ones during a bridge.
    Release,
    /// The standby reader: the partitions neither owned nor held (it skips the records of a
    /// partition that became owned).
    Standby,
}

/// Owned partitions the release reader also reads until the rebalance's next round.
#[derive(Debug, Default)]
struct Bridge {
    partitions: BTreeSet<i32>,
    since: Option<Instant>,
    /// Assignment callbacks still to come before the bridge ends.
    assigns_left: u8,
}

/// Every partition's [`Part`], the holds' numbers and extensions, and the bridge.
#[derive(Debug, Default)]
pub struct Ownership {
    parts: BTreeMap<i32, Part>,
    /// Number of the last hold.
    holds: u64,
    /// Holds kept past `REVOKE_HOLD_MS` ([`Ownership::extend_holds`]): hold number → until when.
    hold_until: BTreeMap<u64, Instant>,
    bridge: Bridge,
}

impl Ownership {
    fn part(&self, p: i32) -> Part {
        self.parts.get(&p).copied().unwrap_or_default()
    }

    fn apply(&mut self, p: i32, event: Event) {
        let next = transition(self.part(p), event);
        if next == Part::default() {
            self.parts.remove(&p);
        } else {
            self.parts.insert(p, next);
        }
    }

    /// Whether events of `p` are fanned out here (owned or held, not paused).
    pub fn live(&self, p: i32) -> bool {
        self.part(p).live()
    }

    /// Whether a session of a channel in `partition` may be served now.
    ///
    /// # Errors
    /// [`Refusal::NotOwner`] or [`Refusal::Paused`].
    pub fn admits(&self, partition: i32) -> Result<(), Refusal> {
        let part = self.part(partition);
        if part.role != Role::Owned {
            return Err(Refusal::NotOwner { partition });
        }
        if part.paused() {
            return Err(Refusal::Paused { partition });
        }
        Ok(())
    }

    /// Whether `reader` applies every record of `p` it reads now.
    pub fn applies(&self, reader: Reader, p: i32) -> bool {
        let role = self.part(p).role;
        match reader {
            Reader::Broadcast => role == Role::Owned,
            Reader::Release => role != Role::NotOwned,
            Reader::Standby => role == Role::NotOwned,
        }
    }

    /// Whether `p` is owned.
    pub fn is_owned(&self, p: i32) -> bool {
        self.part(p).role == Role::Owned
    }

    /// Whether `p` is held.
    pub fn is_held(&self, p: i32) -> bool {
        matches!(self.part(p).role, Role::Held(_))
    }

    /// Partitions owned now, sorted.
    pub fn owned(&self) -> Vec<i32> {
        self.parts.iter().filter(|(_, s)| s.role == Role::Owned).map(|(p, _)| *p).collect()
    }

    /// Partitions held now, sorted.
    pub fn held(&self) -> Vec<i32> {
        self.parts.iter().filter(|(_, s)| matches!(s.role, Role::Held(_))).map(|(p, _)| *p).collect()
    }

    /// Marks `partitions` owned.
    pub fn assign(&mut self, partitions: &[i32]) {
        for p in partitions {
            self.apply(*p, Event::Assigned);
        }
    }

    /// Holds `partitions` under a new hold; returns its number.
    pub fn hold(&mut self, partitions: &[i32]) -> u64 {
        self.holds += 1;
        let n = self.holds;
        for p in partitions {
            self.apply(*p, Event::Held(n));
        }
        n
    }

    /// Makes the release reader also read `partitions` until the rebalance's next round.
    /// librdkafka follows a cooperative revocation with an assignment callback of the same round
    /// (nothing new) and then one of the next round; the bridge ends with the second
    /// ([`Ownership::assignment_came`]).
    pub fn bridge(&mut self, partitions: &[i32]) {
        self.bridge = Bridge { partitions: partitions.iter().copied().collect(), since: Some(Instant::now()), assigns_left: 2 };
    }

    /// An assignment callback came; the second after [`Ownership::bridge`] ends the bridge.
    pub fn assignment_came(&mut self) {
        self.bridge.assigns_left = self.bridge.assigns_left.saturating_sub(1);
        if self.bridge.assigns_left == 0 {
            self.bridge = Bridge::default();
        }
    }

    /// What the release reader reads now: the held partitions and the bridged ones, sorted. A
    /// bridge older than `longest` ends here (a next round that never came).
    pub fn release_scope(&mut self, longest: Duration) -> (Vec<i32>, Vec<i32>) {
        if self.bridge.since.is_some_and(|t| t.elapsed() > longest) {
            tracing::warn!("[RELEASE] no rebalance round came {}ms after a revocation; stop reading partitions={:?} for the broadcast consumer", longest.as_millis(), self.bridge.partitions);
            self.bridge = Bridge::default();
        }
        let bridged: Vec<i32> = self.bridge.partitions.iter().copied().filter(|p| self.is_owned(*p)).collect();
        (self.held(), bridged)
    }

    /// Keeps the holds of those of `partitions` held now until `until` at least. A hold is
    /// extended as a whole. Returns the partitions held, sorted.
    pub fn extend_holds(&mut self, partitions: &[i32], until: Instant) -> Vec<i32> {
        let mut held = Vec::new();
        for p in partitions {
            if let Role::Held(hold) = self.part(*p).role {
                let at = self.hold_until.entry(hold).or_insert(until);
                *at = (*at).max(until);
                held.push(*p);
            }
        }
        held.sort_unstable();
        held.dedup();
        held
    }

    /// Until when hold number `hold` was extended, if it was.
    pub fn hold_deadline(&self, hold: u64) -> Option<Instant> {
        self.hold_until.get(&hold).copied()
    }

    /// Ends hold number `hold` for those of `partitions` still in it; returns them (their
    /// sessions are the caller's to take).
    pub fn end_hold(&mut self, hold: u64, partitions: &[i32]) -> BTreeSet<i32> {
        self.hold_until.remove(&hold);
        let scope: BTreeSet<i32> = partitions.iter().copied().filter(|p| self.part(*p).role == Role::Held(hold)).collect();
        for p in &scope {
            self.apply(*p, Event::HoldEnded(hold));
        }
        scope
    }

    /// Marks `partitions` not owned and not held.
    pub fn revoke(&mut self, partitions: &[i32]) {
        for p in partitions {
            self.apply(*p, Event::Revoked);
        }
    }

    /// Forgets every owned and held partition (the broadcast consumer stopped).
    pub fn revoke_all(&mut self) {
        let all: Vec<i32> = self.parts.keys().copied().collect();
        self.revoke(&all);
    }

    /// A scoped drain starts handing over the sessions of `partitions`: they admit nobody new.
    pub fn pause(&mut self, partitions: &BTreeSet<i32>) {
        partitions.iter().for_each(|p| self.apply(*p, Event::Paused));
    }

    /// A failback's scoped drain: pauses those of `partitions` this node holds, and returns them
    /// with the rest, which it refuses (an owned one's sessions would come straight back here, and
    /// one neither owned nor held has nothing to hand over). Both sorted.
    pub fn pause_held(&mut self, partitions: &BTreeSet<i32>) -> (BTreeSet<i32>, Vec<i32>) {
        let (held, refused): (BTreeSet<i32>, BTreeSet<i32>) = partitions.iter().partition(|p| self.is_held(**p));
        self.pause(&held);
        (held, refused.into_iter().collect())
    }

    /// A drain of the whole node takes every session: the holds end, nothing is paused.
    pub fn drain_all(&mut self) {
        let all: Vec<i32> = self.parts.keys().copied().collect();
        all.into_iter().for_each(|p| self.apply(p, Event::DrainedAll));
    }

    /// Ends a pause started by [`Ownership::pause`], and the holds of those partitions.
    pub fn resume(&mut self, partitions: &BTreeSet<i32>) {
        for p in partitions {
            self.apply(*p, Event::Resumed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FREE: Part = Part { role: Role::NotOwned, pauses: 0 };
    const OWNED: Part = Part { role: Role::Owned, pauses: 0 };

    #[test]
    fn transition_table() {
        let held = |n| Part { role: Role::Held(n), pauses: 0 };
        let paused = |role| Part { role, pauses: 1 };
        let twice = |role| Part { role, pauses: 2 };
        // (from, event) → to
        let table = [
            (FREE, Event::Assigned, OWNED),
            (held(3), Event::Assigned, OWNED),
            (OWNED, Event::Held(1), held(1)),
            (held(1), Event::Held(2), held(2)),
            (OWNED, Event::Revoked, FREE),
            (held(1), Event::Revoked, FREE),
            (OWNED, Event::Paused, paused(Role::Owned)),
            (held(1), Event::Paused, paused(Role::Held(1))),
            (paused(Role::Owned), Event::Resumed, OWNED),
            (paused(Role::Held(1)), Event::Resumed, FREE),
            (paused(Role::Owned), Event::Paused, twice(Role::Owned)),
            (twice(Role::Held(1)), Event::Resumed, paused(Role::Held(1))),
            (twice(Role::Owned), Event::Resumed, paused(Role::Owned)),
            (paused(Role::Owned), Event::Held(4), paused(Role::Held(4))),
            (held(1), Event::HoldEnded(1), FREE),
            (held(2), Event::HoldEnded(1), held(2)),
            (OWNED, Event::HoldEnded(1), OWNED),
            (held(2), Event::DrainedAll, FREE),
            (OWNED, Event::DrainedAll, OWNED),
            (paused(Role::Owned), Event::DrainedAll, paused(Role::Owned)),
        ];
        for (from, event, to) in table {
            assert_eq!(transition(from, event), to, "{from:?} + {event:?}");
        }
    }

    #[test]
    fn overlapping_scoped_drains_each_keep_their_pause() {
        let mut o = Ownership::default();
        o.assign(&[1, 2]);
        o.hold(&[2]);
        let both = BTreeSet::from([1, 2]);
        o.pause(&both);
        o.pause(&both);
        // The first drain ends; the second still hands sessions over.
        o.resume(&both);
        assert_eq!(o.admits(1), Err(Refusal::Paused { partition: 1 }), "still paused by the second drain");
        assert!(o.applies(Reader::Release, 2), "the hold stays while the second drain runs");
        o.resume(&both);
        assert_eq!(o.admits(1), Ok(()));
        assert!(!o.applies(Reader::Release, 2), "the last drain's end ends the hold");
    }

    #[test]
    fn a_scoped_drain_takes_only_held_partitions() {
        let fresh = || {
            let mut o = Ownership::default();
            o.assign(&[1, 2]);
            o.hold(&[2, 3]);
            o
        };
        // (named, paused, refused): 1 owned, 2 and 3 held, 4 neither
        let table: [(&[i32], &[i32], &[i32]); 4] =
            [(&[2, 3], &[2, 3], &[]), (&[1], &[], &[1]), (&[1, 2, 4], &[2], &[1, 4]), (&[], &[], &[])];
        for (named, paused, refused) in table {
            let mut o = fresh();
            let (got, no) = o.pause_held(&named.iter().copied().collect());
            assert_eq!((got.into_iter().collect::<Vec<_>>(), no), (paused.to_vec(), refused.to_vec()), "named {named:?}");
            for p in paused {
                assert_eq!(o.admits(*p), Err(Refusal::NotOwner { partition: *p }));
                assert!(o.part(*p).paused());
            }
            for p in refused {
                assert!(!o.part(*p).paused(), "a refused partition {p} is not paused");
            }
        }
        let mut o = fresh();
        o.pause_held(&BTreeSet::from([1, 2]));
        assert_eq!(o.admits(1), Ok(()), "an owned partition named in a drain still admits");
    }

    #[test]
    fn which_reader_applies_a_partition() {
        let mut o = Ownership::default();
        o.assign(&[1, 2]);
        o.hold(&[2]);
        // (partition, reader) → applies: 1 owned, 2 held, 3 neither
        let table = [
            (1, Reader::Broadcast, true),
            (1, Reader::Release, true), // bridged until the rebalance's next round
            (1, Reader::Standby, false),
            (2, Reader::Broadcast, false),
            (2, Reader::Release, true),
            (2, Reader::Standby, false),
            (3, Reader::Broadcast, false),
            (3, Reader::Release, false),
            (3, Reader::Standby, true),
        ];
        for (p, reader, want) in table {
            assert_eq!(o.applies(reader, p), want, "partition {p}, {reader:?}");
        }
    }

    #[test]
    fn live_and_admits_follow_the_role_and_the_pause() {
        let mut o = Ownership::default();
        assert_eq!(o.admits(1), Err(Refusal::NotOwner { partition: 1 }));
        o.assign(&[1, 2]);
        assert!(o.live(1) && o.admits(1).is_ok());
        o.hold(&[2]);
        assert!(o.live(2), "held sessions still get events");
        assert_eq!(o.admits(2), Err(Refusal::NotOwner { partition: 2 }));
        o.pause(&BTreeSet::from([1]));
        assert!(o.live(1), "the sessions a drain has not handed over yet keep their events");
        assert_eq!(o.admits(1), Err(Refusal::Paused { partition: 1 }));
        o.resume(&BTreeSet::from([1]));
        assert_eq!((o.owned(), o.held()), (vec![1], vec![2]));
        o.pause(&BTreeSet::from([2]));
        assert_eq!((o.held(), o.live(2)), (vec![2], true), "a held partition stays held while its drain runs");
        o.resume(&BTreeSet::from([2]));
        assert!(o.held().is_empty(), "the drain's end ends the hold");
        o.hold(&[1]);
        o.assign(&[1]);
        o.hold(&[2]);
        o.drain_all();
        assert_eq!((o.owned(), o.held()), (vec![1], vec![]), "a whole-node drain ends the holds");
    }
}
