//! Session capacity: at most `MAX_SESSIONS` sessions on a node, counted with seats.
//!
//! A handshake takes a [`Seat`] before the node answers the upgrade, so concurrent handshakes
//! cannot pass the limit between the check and the session's start; the seat is given back when
//! it is dropped: when the session ends, or when the upgrade never completes (the client went
//! away between the 101 and the first byte, or the handshake was refused later on). A full node
//! refuses new handshakes with 503 `full`; it never closes an open session to make room.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The node's seats: how many are taken, out of how many.
#[derive(Debug)]
pub struct Seats {
    max: usize,
    taken: Arc<AtomicUsize>,
}

/// One taken seat; dropping it frees the seat.
#[derive(Debug)]
pub struct Seat(Arc<AtomicUsize>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Seats {
    /// `max` seats, none taken.
    pub fn new(max: usize) -> Self {
        Self { max, taken: Arc::new(AtomicUsize::new(0)) }
    }

    /// Takes a seat, or `None` when all `max` are taken. Atomic: of N concurrent callers for the
    /// last K seats, exactly K get one.
    pub fn try_take(&self) -> Option<Seat> {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1))
            .ok()
            .map(|_| Seat(self.taken.clone()))
    }

    /// Seats taken now: open sessions plus handshakes that hold a seat.
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }

    /// The capacity (`MAX_SESSIONS`).
    pub fn max(&self) -> usize {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seats_are_bounded_and_given_back_on_drop() {
        let seats = Seats::new(2);
        let a = seats.try_take().expect("first seat");
        let b = seats.try_take().expect("second seat");
        assert!(seats.try_take().is_none(), "a full node gives no third seat");
        assert_eq!(seats.taken(), 2);
        drop(a);
        assert_eq!(seats.taken(), 1);
        let c = seats.try_take().expect("a freed seat is taken again");
        assert!(seats.try_take().is_none());
        drop((b, c));
        assert_eq!(seats.taken(), 0);
        assert!(Seats::new(0).try_take().is_none(), "capacity 0 admits nobody");
    }

    #[test]
    fn concurrent_takers_never_pass_the_limit() {
        let seats = Arc::new(Seats::new(50));
        let held: Vec<Option<Seat>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let seats = seats.clone();
                    s.spawn(move || (0..20).map(|_| seats.try_take()).collect::<Vec<_>>())
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().expect("taker thread")).collect()
        });
        assert_eq!(held.iter().filter(|s| s.is_some()).count(), 50, "160 takers for 50 seats: exactly 50 win");
        assert_eq!(seats.taken(), 50);
        drop(held);
        assert_eq!(seats.taken(), 0);
    }
}
