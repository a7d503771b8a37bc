//! The promise, checked per client: after its first snapshot, every version up to the
//! publisher's head arrived as an event, none twice, none out of order, no resume served as a
//! snapshot, and the client's canvas hash equals the publisher's ([`check`], one [`Verdict`] per
//! client); and over a set of clients ([`Summary`]: each kind of violation counted, and their
//! total), the one figure the scenario and the benchmark's failover row both judge by.

use crate::client::{ClientReport, Kind};

/// One client's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub name: String,
    pub channel: String,
    /// Version of the first snapshot.
    pub base: u64,
    /// Publisher's head version of the channel.
    pub head: u64,
    /// Event frames received.
    pub events: usize,
    /// Versions in `(base, head]` never received as an event.
    pub lost: Vec<u64>,
    /// Event frames of a version already received.
    pub duplicated: usize,
    /// Event frames that skipped ahead of the next expected version.
    pub out_of_order: usize,
    /// Snapshots after the first (resumes that were not served as events).
    pub extra_snapshots: usize,
    /// `reset` frames (a `stream` resumed from beyond the node's window): the versions they pass
    /// over are not lost, they are the application's to reload.
    pub resets: usize,
    /// Client hash == publisher hash.
    pub hash_matches: bool,
    /// Reconnects of the client.
    pub sessions: usize,
}

impl Verdict {
    /// Whether the client got exactly what it should have.
    pub fn ok(&self) -> bool {
        self.lost.is_empty() && self.duplicated == 0 && self.out_of_order == 0 && self.extra_snapshots == 0 && self.hash_matches
    }
}

/// The verdicts of a set of clients, summed: one count per kind of violation of the promise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Clients checked.
    pub clients: usize,
    /// Versions never received as an event, over all clients.
    pub lost: usize,
    /// Event frames of a version already received.
    pub duplicated: usize,
    /// Event frames that skipped ahead of the next expected version.
    pub out_of_order: usize,
    /// Snapshots after a client's first (resumes not served as events).
    pub extra_snapshots: usize,
    /// Clients whose final canvas (hash and version) differs from the publisher's.
    pub hash_mismatches: usize,
    /// Clients whose verdict is not [`Verdict::ok`].
    pub clients_not_ok: usize,
}

impl Summary {
    /// Sums `verdicts`.
    pub fn of(verdicts: &[Verdict]) -> Self {
        let mut s = Self { clients: verdicts.len(), ..Self::default() };
        for v in verdicts {
            s.lost += v.lost.len();
            s.duplicated += v.duplicated;
            s.out_of_order += v.out_of_order;
            s.extra_snapshots += v.extra_snapshots;
            s.hash_mismatches += usize::from(!v.hash_matches);
            s.clients_not_ok += usize::from(!v.ok());
        }
        s
    }

    /// Every violation of every kind: lost + duplicated + out of order + extra snapshots + hash
    /// mismatches. Zero exactly when every client is [`Verdict::ok`].
    pub fn violations(&self) -> usize {
        self.lost + self.duplicated + self.out_of_order + self.extra_snapshots + self.hash_mismatches
    }

    /// Whether the promise held for every client.
    pub fn ok(&self) -> bool {
        self.violations() == 0 && self.clients_not_ok == 0
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} violations: lost {}, duplicated {}, out of order {}, extra snapshots {}, hash mismatches {} ({} of {} clients not ok)",
            self.violations(),
            self.lost,
            self.duplicated,
            self.out_of_order,
            self.extra_snapshots,
            self.hash_mismatches,
            self.clients_not_ok,
            self.clients
        )
    }
}

/// Checks `report` against the publisher's `head` version and `hash` of its canvas.
pub fn check(report: &ClientReport, head: u64, hash: &str) -> Verdict {
    let mut base = None;
    let mut extra_snapshots = 0;
    let mut expected = 0u64;
    let mut seen = std::collections::BTreeSet::new();
    let (mut duplicated, mut out_of_order, mut events, mut resets) = (0, 0, 0, 0);
    // Versions a reset passed over.
    let mut passed: Vec<(u64, u64)> = Vec::new();
    for g in &report.got {
        match g.kind {
            Kind::Snapshot => {
                if base.is_none() {
                    base = Some(g.version);
                    expected = g.version + 1;
                } else {
                    // A resume served as a snapshot: a violation of its own; the client applied
                    // it, so the stream continues after it.
                    extra_snapshots += 1;
                    expected = expected.max(g.version + 1);
                }
            }
            Kind::Reset => {
                resets += 1;
                if base.is_none() {
                    base = Some(g.version);
                    expected = g.version + 1;
                } else {
                    passed.push((expected, g.version));
                    expected = expected.max(g.version + 1);
                }
            }
            Kind::Event => {
                events += 1;
                if base.is_none() || !seen.insert(g.version) || g.version < expected {
                    duplicated += usize::from(base.is_some());
                    continue;
                }
                if g.version > expected {
                    // The client does not apply a jump: it resyncs, and the versions in between
                    // come in the next session.
                    out_of_order += 1;
                    seen.remove(&g.version);
                    continue;
                }
                expected += 1;
            }
        }
    }
    let base = base.unwrap_or(0);
    let lost = ((base + 1)..=head).filter(|v| !seen.contains(v) && !passed.iter().any(|(from, to)| (*from..=*to).contains(v))).collect();
    Verdict {
        name: report.name.clone(),
        channel: report.channel.clone(),
        base,
        head,
        events,
        lost,
        duplicated,
        out_of_order,
        extra_snapshots,
        resets,
        hash_matches: report.hash == hash && report.version == head,
        sessions: report.sessions.len(),
    }
}

/// [`check`] of the current history only: the frames from the client's last epoch change on
/// (the whole stream when its epoch never changed). A history that ended (a topic deleted and
/// created again) is not this one's to judge; the new one must be complete from its first frame.
pub fn check_history(report: &ClientReport, head: u64, hash: &str) -> Verdict {
    let current = ClientReport { got: report.got[report.history_from.min(report.got.len())..].to_vec(), ..report.clone() };
    check(&current, head, hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Got;

    #[test]
    fn versions_a_reset_passes_over_are_not_lost() {
        let r = report(&[(Kind::Snapshot, 0), (Kind::Event, 1), (Kind::Reset, 5), (Kind::Event, 6)]);
        let v = check(&ClientReport { version: 6, ..r }, 6, "");
        assert_eq!((v.lost.clone(), v.resets, v.out_of_order), (Vec::<u64>::new(), 1, 0));
        // A reset is the first frame here (its version is the base); what skips ahead of it is
        // still out of order, and never applied: lost until it comes in order.
        let v = check(&report(&[(Kind::Reset, 3), (Kind::Event, 4), (Kind::Event, 6)]), 6, "");
        assert_eq!((v.base, v.lost.clone(), v.out_of_order), (3, vec![5, 6], 1));
    }

    fn report(frames: &[(Kind, u64)]) -> ClientReport {
        ClientReport {
            name: "t".into(),
            channel: "c".into(),
            got: frames.iter().map(|(k, v)| Got { at_ms: 0, kind: *k, version: *v, published_at_ms: 0, session: 1 }).collect(),
            hash: "h".into(),
            version: frames.last().map_or(0, |f| f.1),
            ..Default::default()
        }
    }

    use Kind::{Event as E, Snapshot as S};

    #[test]
    fn verdict_table() {
        // (frames, head, lost, duplicated, out_of_order, extra snapshots)
        let cases: &[(&[(Kind, u64)], u64, &[u64], usize, usize, usize)] = &[
            (&[(S, 0), (E, 1), (E, 2), (E, 3)], 3, &[], 0, 0, 0),
            (&[(S, 5), (E, 6), (E, 7)], 7, &[], 0, 0, 0),
            (&[(S, 0), (E, 1), (E, 3)], 3, &[2, 3], 0, 1, 0),
            (&[(S, 0), (E, 1), (E, 3), (E, 2), (E, 3)], 3, &[], 0, 1, 0),
            (&[(S, 0), (E, 1), (E, 2), (E, 2), (E, 3)], 3, &[], 1, 0, 0),
            (&[(S, 0), (E, 1), (S, 2), (E, 3)], 3, &[2], 0, 0, 1),
            (&[(S, 0), (E, 1)], 4, &[2, 3, 4], 0, 0, 0),
        ];
        for (frames, head, lost, dup, ooo, snaps) in cases {
            let v = check(&report(frames), *head, "h");
            assert_eq!(v.lost, *lost, "{frames:?}");
            assert_eq!(v.duplicated, *dup, "{frames:?}");
            assert_eq!(v.out_of_order, *ooo, "{frames:?}");
            assert_eq!(v.extra_snapshots, *snaps, "{frames:?}");
        }
        assert!(check(&report(&[(S, 0), (E, 1)]), 1, "h").ok());
        assert!(!check(&report(&[(S, 0), (E, 1)]), 1, "other").ok());
    }

    #[test]
    fn a_new_history_is_judged_from_its_first_frame() {
        // Old history to 7, then a new epoch whose snapshot is at 3 and events follow.
        let mut r = report(&[(S, 0), (E, 1), (S, 7), (S, 3), (E, 4), (E, 5)]);
        assert!(!check(&r, 5, "h").ok(), "as one stream: an extra snapshot");
        r.history_from = 3;
        assert!(check_history(&r, 5, "h").ok(), "{:?}", check_history(&r, 5, "h"));
        r.history_from = 4; // the new history's snapshot not counted: it has no base
        assert!(!check_history(&r, 5, "h").ok());
    }

    #[test]
    fn summary_table() {
        let ok = || check(&report(&[(S, 0), (E, 1), (E, 2)]), 2, "h");
        let lost = check(&report(&[(S, 0), (E, 1)]), 3, "h"); // 2 and 3 lost, so its canvas is behind too
        let dup = check(&report(&[(S, 0), (E, 1), (E, 1), (E, 2)]), 2, "h");
        let ooo = check(&report(&[(S, 0), (E, 2), (E, 1), (E, 2)]), 2, "h");
        // A resume (since=2) served as a snapshot at the head: nothing lost, nothing else wrong.
        let snap = check(&report(&[(S, 0), (E, 1), (E, 2), (S, 2)]), 2, "h");
        let hash = check(&report(&[(S, 0), (E, 1), (E, 2)]), 2, "other"); // every event, the wrong canvas
        assert_eq!((snap.lost.len(), snap.duplicated, snap.out_of_order, snap.hash_matches), (0, 0, 0, true), "{snap:?}");
        assert_eq!((hash.lost.len(), hash.duplicated, hash.out_of_order, hash.extra_snapshots), (0, 0, 0, 0), "{hash:?}");
        // (verdicts, lost, duplicated, out of order, extra snapshots, hash mismatches, violations, clients not ok)
        let cases: Vec<(&str, Vec<Verdict>, [usize; 7])> = vec![
            ("none", vec![], [0, 0, 0, 0, 0, 0, 0]),
            ("all ok", vec![ok(), ok(), ok()], [0, 0, 0, 0, 0, 0, 0]),
            ("lost", vec![ok(), lost.clone()], [2, 0, 0, 0, 1, 3, 1]),
            ("duplicated", vec![dup.clone(), ok()], [0, 1, 0, 0, 0, 1, 1]),
            ("out of order", vec![ooo.clone()], [0, 0, 1, 0, 0, 1, 1]),
            ("an extra snapshot alone", vec![ok(), snap.clone()], [0, 0, 0, 1, 0, 1, 1]),
            ("a hash mismatch alone", vec![hash.clone(), ok()], [0, 0, 0, 0, 1, 1, 1]),
            ("every kind", vec![lost, dup, ooo, snap, hash, ok()], [2, 1, 1, 1, 2, 7, 5]),
        ];
        for (name, verdicts, [l, d, o, x, h, total, not_ok]) in cases {
            let s = Summary::of(&verdicts);
            assert_eq!(
                (s.clients, s.lost, s.duplicated, s.out_of_order, s.extra_snapshots, s.hash_mismatches),
                (verdicts.len(), l, d, o, x, h),
                "{name}: {s}"
            );
            assert_eq!((s.violations(), s.clients_not_ok), (total, not_ok), "{name}: {s}");
            assert_eq!(s.ok(), verdicts.iter().all(Verdict::ok), "{name}: the summary agrees with the verdicts");
            assert_eq!(s.ok(), total == 0, "{name}");
        }
    }
}
