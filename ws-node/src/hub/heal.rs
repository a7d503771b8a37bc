//! Incomplete channels healed under a running node: a channel whose versions skipped (its records
//! deleted with no snapshot covering them) is rebuilt from a newer snapshot and the log after it,
//! while live events keep being applied and fanned out. See [`crate::heal`] for the reads.

use super::Hub;
use shared::model::State;
use shared::record::Publication;
use shared::replay::Offsets;
use shared::ChannelId;

/// A channel's state as a heal rebuilds it: a snapshot's state and the publications after it.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    pub state: Box<dyn State>,
    pub version: u64,
}

impl Rebuilt {
    /// Applies `p` if it is newer.
    ///
    /// # Errors
    /// The version that was expected, when `p` skips versions (it is applied anyway).
    pub fn apply(&mut self, p: &Publication) -> Result<(), u64> {
        if p.version <= self.version {
            return Ok(());
        }
        let expected = self.version + 1;
        // Data the model refuses is the live state's concern too (it logs it); versions move on.
        let _ = self.state.apply(&p.data);
        self.version = p.version;
        if p.version == expected {
            Ok(())
        } else {
            Err(expected)
        }
    }
}

/// Whether a snapshot at `version` of reset `epoch` heals a channel whose latest gap was found at
/// version `gap` (the first version after the missing ones) and whose state is of reset
/// `resets`: it must hold the missing versions (`version >= gap - 1`) of the same reset (a later
/// reset is restored whole by [`Hub::restore`]). Pure.
pub fn heals(version: u64, epoch: u64, gap: u64, resets: u64) -> bool {
    epoch == resets && version + 1 >= gap
}

/// Why a heal did not replace a channel's state (it stays incomplete; the next round tries again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotHealed {
    /// The channel is no longer on this node, or has no state.
    Gone,
    /// The channel was reset since the snapshot was read.
    Reset,
    /// The rebuilt channel ends at another version than the live one (records were missing).
    Version { rebuilt: u64, live: u64 },
    /// Versions skipped again while the heal read (more records deleted): the channel stays
    /// incomplete, from that newer gap.
    GapDuringHeal { expected: u64, got: u64 },
    /// The channel's state was replaced while the heal read (a restore from a snapshot, or the
    /// channel forgotten): what the heal rebuilt is older than it.
    Superseded,
}

impl Hub {
    /// The incomplete channels, with the version of the first event after each one's latest gap
    /// and the reset counter of their state.
    pub fn incomplete(&self) -> Vec<(ChannelId, u64, u64)> {
        let inner = self.lock();
        inner
            .incomplete
            .iter()
            .map(|(c, g)| (c.clone(), *g, inner.channels.get(c).and_then(|ch| ch.state.as_ref()).map_or(0, |s| s.resets())))
            .collect()
    }

    /// How many incomplete channels healed.
    pub fn healed_channels(&self) -> u64 {
        self.healed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether `channel` is incomplete here: its state misses versions, so it is not handed to a
    /// new session until it heals.
    pub fn is_incomplete(&self, channel: &ChannelId) -> bool {
        self.lock().incomplete.contains_key(channel)
    }

    /// Starts a heal of `channels`: from now on the events applied to them are also kept for the
    /// heal. Returns the positions now: the heal rebuilds each channel from its snapshot and the log
    /// up to its partition's position here, and [`Hub::finish_heal`] applies what came after.
    pub fn begin_heal(&self, channels: &[ChannelId]) -> Offsets {
        let mut inner = self.lock();
        for c in channels {
            inner.healing.insert(c.clone(), Vec::new());
        }
        inner.positions.clone()
    }

    /// Ends the heal of channel `id` (begun with [`Hub::begin_heal`]) with `rebuilt`, its snapshot of
    /// reset `resets` with the log's events up to the positions `begin_heal` returned (`None`:
    /// the heal could not rebuild it). The events applied since are applied to it (one that skips
    /// versions, or a state replaced meanwhile, ends the heal: [`NotHealed`]); when it then
    /// reaches the live state's version it replaces the live channel (the recent events stay: they
    /// are the same versions), the channel is complete again, and its sessions get the snapshot
    /// frame, as after any resync.
    pub fn finish_heal(&self, id: &ChannelId, rebuilt: Option<(Rebuilt, u64)>) -> Result<u64, NotHealed> {
        let mut inner = self.lock();
        // Gone from `healing`: a restore or a forget replaced the state the heal started from.
        let Some(since) = inner.healing.remove(id) else { return Err(NotHealed::Superseded) };
        let Some((mut rebuilt, resets)) = rebuilt else { return Err(NotHealed::Gone) };
        let Some(channel) = inner.channels.get_mut(id) else { return Err(NotHealed::Gone) };
        let Some(state) = channel.state.as_mut() else { return Err(NotHealed::Gone) };
        if state.resets() != resets {
            return Err(NotHealed::Reset);
        }
        for p in &since {
            if let Err(expected) = rebuilt.apply(p) {
                return Err(NotHealed::GapDuringHeal { expected, got: p.version });
            }
        }
        if rebuilt.version != state.version() {
            return Err(NotHealed::Version { rebuilt: rebuilt.version, live: state.version() });
        }
        state.replace_state(rebuilt.state);
        let version = state.version();
        if !channel.sessions.is_empty() {
            super::send_state(&self.fanout, &channel.sessions, state);
        }
        inner.incomplete.remove(id);
        drop(inner);
        self.healed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.fanout.write_pending();
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::SessionHandle;
    use crate::state::Window;
    use shared::model::pixels::Pixels;
    use shared::model::Model as _;
    use shared::{CanvasDims, Color, PixelEvent};

    fn id(s: &str) -> ChannelId {
        ChannelId::parse(s).unwrap()
    }

    const DIMS: CanvasDims = CanvasDims { width: 4, height: 4 };

    fn ev(v: u64) -> Publication {
        PixelEvent { canvas: id("c1"), version: v, x: (v % 4) as u32, y: (v / 4 % 4) as u32, color: Color([v as u8, 1, 2]), published_at_ms: 0 }.into()
    }

    fn hub() -> Hub {
        Hub::new(std::sync::Arc::new(shared::namespaces::Namespaces::pixels_only(DIMS)), Window { events: 100, bytes: usize::MAX })
    }

    /// The publisher's channel after versions 1..=v.
    fn truth(v: u64) -> Rebuilt {
        let mut c = Rebuilt { state: Pixels { dims: DIMS }.empty(), version: 0 };
        for v in 1..=v {
            c.apply(&ev(v)).unwrap();
        }
        c
    }

    #[test]
    fn a_channel_with_a_gap_is_refused_then_heals_with_the_events_applied_meanwhile() {
        let h = hub();
        h.assign(&[0]);
        // Versions 1-2, then 3-5 deleted from the log: the node skips to 6.
        for (o, v) in [(0, 1), (1, 2), (5, 6), (6, 7)] {
            h.apply(0, o, &ev(v));
        }
        assert!(h.is_incomplete(&id("c1")));
        assert_eq!(h.incomplete(), vec![(id("c1"), 6, 0)]);
        let (handle, rx) = SessionHandle::new(1, id("c1"), 0, 16);
        h.subscribe(handle, 7).unwrap();
        // A heal starts: the rebuilt channel is the snapshot at version 5 and the log up to the
        // position now (versions 6-7); version 8 is applied while it reads.
        let positions = h.begin_heal(&[id("c1")]);
        assert_eq!(positions[&0], 7);
        h.apply(0, 7, &ev(8));
        let mut rebuilt = truth(5);
        for v in 6..=7 {
            rebuilt.apply(&ev(v)).unwrap();
        }
        assert_eq!(h.finish_heal(&id("c1"), Some((rebuilt, 0))), Ok(8));
        assert!(!h.is_incomplete(&id("c1")));
        assert_eq!(h.incomplete_channels(10).1, 0);
        let inner = h.lock();
        assert_eq!(inner.channels[&id("c1")].state.as_ref().unwrap().state().hash(), truth(8).state.hash(), "the healed canvas is the publisher's");
        drop(inner);
        h.fanout.settle();
        let sent = rx.out.take_waiting();
        assert_eq!(sent.len(), 2, "version 8, then the healed snapshot: {sent:?}");
        assert!(String::from_utf8_lossy(&sent[1]).contains("\"snapshot\""), "the session got the snapshot frame");
    }

    #[test]
    fn a_rebuilt_channel_at_another_version_is_not_used() {
        let h = hub();
        h.assign(&[0]);
        for (o, v) in [(0, 1), (4, 5)] {
            h.apply(0, o, &ev(v));
        }
        h.begin_heal(&[id("c1")]);
        assert_eq!(h.finish_heal(&id("c1"), Some((truth(4), 0))), Err(NotHealed::Version { rebuilt: 4, live: 5 }));
        h.begin_heal(&[id("c1")]);
        assert_eq!(h.finish_heal(&id("c1"), Some((truth(5), 1))), Err(NotHealed::Reset));
        assert!(h.is_incomplete(&id("c1")), "still refused to new sessions");
        assert!(h.lock().healing.is_empty(), "no events kept after a heal ends");
    }

    #[test]
    fn a_second_gap_during_the_heal_keeps_the_channel_incomplete() {
        let h = hub();
        h.assign(&[0]);
        for (o, v) in [(0, 1), (1, 2), (5, 6), (6, 7)] {
            h.apply(0, o, &ev(v));
        }
        h.begin_heal(&[id("c1")]);
        // Versions 8-10 deleted too: the node skips to 11 while the heal reads.
        h.apply(0, 10, &ev(11));
        let mut rebuilt = truth(5);
        for v in 6..=7 {
            rebuilt.apply(&ev(v)).unwrap();
        }
        assert_eq!(h.finish_heal(&id("c1"), Some((rebuilt, 0))), Err(NotHealed::GapDuringHeal { expected: 8, got: 11 }));
        assert_eq!(h.incomplete(), vec![(id("c1"), 11, 0)], "still incomplete, from the newer gap");
    }

    #[test]
    fn a_restore_during_the_heal_is_not_undone() {
        let h = hub();
        h.assign(&[0]);
        for (o, v) in [(0, 1), (1, 2), (5, 6), (6, 7)] {
            h.apply(0, o, &ev(v));
        }
        h.begin_heal(&[id("c1")]);
        // A reader restores the channel from a snapshot at version 9 meanwhile, then applies 10.
        let t9 = truth(9);
        let raster = t9.state.as_any().downcast_ref::<shared::model::pixels::Raster>().unwrap();
        let snap = shared::snapshot::Snapshot { canvas: id("c1"), version: 9, epoch: 0, dims: DIMS, offset: 9, pixels: raster.bytes().to_vec() };
        assert_eq!(h.restore_canvases([snap]), Ok(1));
        h.apply(0, 9, &ev(10));
        let mut rebuilt = truth(5);
        for v in 6..=7 {
            rebuilt.apply(&ev(v)).unwrap();
        }
        assert_eq!(h.finish_heal(&id("c1"), Some((rebuilt, 0))), Err(NotHealed::Superseded));
        let hash = h.lock().channels[&id("c1")].state.as_ref().unwrap().state().hash();
        assert_eq!(hash, truth(10).state.hash(), "the restored canvas stays");
        assert!(h.lock().healing.is_empty(), "no events kept after a heal ends");
    }

    #[test]
    fn heals_table() {
        // (snapshot version, snapshot reset, gap found at, state's reset) → heals
        let table = [
            (9, 0, 10, 0, true),  // holds versions up to 9: the missing ones end at 9
            (12, 0, 10, 0, true), // newer than the gap
            (8, 0, 10, 0, false), // misses version 9
            (0, 0, 1, 0, true),   // a gap at version 1 is nothing missing
            (12, 1, 10, 0, false), // a later reset: a whole restore, not a heal
            (12, 0, 10, 1, false), // an earlier reset's snapshot
        ];
        for (version, epoch, gap, resets, want) in table {
            assert_eq!(heals(version, epoch, gap, resets), want, "snapshot v{version} reset {epoch}, gap at {gap}, state reset {resets}");
        }
    }
}
