//! The node-wide fan-out writer ([`Fanout`]): each applied event's frame, to the sessions
//! registered when it was applied, in apply order.

use crate::outbox::{CloseOrder, Offer, Outbox};
use crate::state::Frame;
use bytes::Bytes;
use shared::protocol::close;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// The fan-out writer: writes each event's frame to the sessions registered when it was applied.
///
/// `Hub::apply` hands it (sessions, frame) under the hub lock, in apply order
/// ([`Fanout::send`]), and after releasing the lock calls [`Fanout::write_pending`]: the first
/// thread to get there writes everything handed over so far, and keeps writing what other threads
/// (the broadcast consumer, the release reader) hand over meanwhile; the others return at once.
/// One writer at a time and a FIFO queue keep every session's frames in apply order, and the
/// applying thread writes itself: no thread is woken per event (a dedicated writer thread cost a
/// wake-up and a context switch per handed-over batch: 7–9 % of the node's CPU at 5,000 events/s).
/// To each session, all of its frames of a batch leave in one system call; nothing waits to fill
/// a batch. A session gets only the events applied after it registered (the list of sessions is
/// taken under the hub lock).
pub struct Fanout {
    shared: Arc<FanoutShared>,
}

struct FanoutShared {
    jobs: Mutex<Jobs>,
    idle: std::sync::Condvar,
    slow_closed: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Jobs {
    queue: Vec<(Vec<Arc<Outbox>>, Frame)>,
    /// A thread is writing (it takes what is queued before it stops).
    busy: bool,
}

impl Fanout {
    /// A writer with nothing queued.
    pub fn new() -> Self {
        let shared = Arc::new(FanoutShared {
            jobs: Mutex::new(Jobs::default()),
            idle: std::sync::Condvar::new(),
            slow_closed: std::sync::atomic::AtomicU64::new(0),
        });
        Self { shared }
    }

    /// Queues `frame` for `sessions` (called under the hub lock, in apply order); written by the
    /// next [`Fanout::write_pending`].
    pub fn send(&self, sessions: Vec<Arc<Outbox>>, frame: Frame) {
        self.shared.jobs.lock().expect("fan-out lock poisoned").queue.push((sessions, frame));
    }

    /// Writes what is queued, unless another thread is writing (it takes it). Call without the
    /// hub lock. Never blocks on a socket: what the kernel does not take waits in the session's
    /// outbox for its task.
    pub fn write_pending(&self) {
        self.shared.write_pending();
    }

    /// Events queued and not yet being written.
    pub fn queued(&self) -> usize {
        self.shared.jobs.lock().expect("fan-out lock poisoned").queue.len()
    }

    /// Writes what is queued and waits until everything handed over was written or queued in
    /// outboxes (tests).
    pub fn settle(&self) {
        self.write_pending();
        let mut jobs = self.shared.jobs.lock().expect("fan-out lock poisoned");
        while !jobs.queue.is_empty() || jobs.busy {
            jobs = self.shared.idle.wait(jobs).expect("fan-out lock poisoned");
        }
    }

    /// Sessions closed so far because too many of their frames waited.
    pub fn slow_closed(&self) -> u64 {
        self.shared.slow_closed.load(Ordering::Relaxed)
    }
}

impl Default for Fanout {
    fn default() -> Self {
        Self::new()
    }
}

/// Clears the writer's `busy` flag if its turn ends in a panic (a panic while writing must not stop
/// every later fan-out of the node); a normal turn clears it itself, under the same lock as its
/// last look at the queue, so a frame queued after that look is written by whoever queued it.
struct WriterTurn<'a>(&'a FanoutShared);

impl Drop for WriterTurn<'_> {
    fn drop(&mut self) {
        self.0.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).busy = false;
        self.0.idle.notify_all();
    }
}

impl FanoutShared {
    fn write_pending(&self) {
        let mut batch = Vec::new();
        let mut jobs = self.jobs.lock().expect("fan-out lock poisoned");
        if jobs.busy {
            return;
        }
        jobs.busy = true;
        let turn = WriterTurn(self);
        loop {
            if jobs.queue.is_empty() {
                jobs.busy = false;
                drop(jobs);
                std::mem::forget(turn);
                self.idle.notify_all();
                return;
            }
            std::mem::swap(&mut batch, &mut jobs.queue);
            drop(jobs);
            self.write(&mut batch);
            batch.clear();
            jobs = self.jobs.lock().expect("fan-out lock poisoned");
        }
    }

    fn write(&self, batch: &mut [(Vec<Arc<Outbox>>, Frame)]) {
        let mut slow = Vec::new();
        if let [(sessions, frame)] = batch {
            for s in sessions.iter() {
                if s.offer(frame) == Offer::Full {
                    slow.push(s.clone());
                }
            }
        } else {
            // Each session's frames, in order, for one write each.
            let mut index: std::collections::HashMap<*const Outbox, usize> = std::collections::HashMap::new();
            let mut per: Vec<(Arc<Outbox>, Vec<Bytes>)> = Vec::new();
            for (sessions, frame) in batch.iter_mut() {
                for s in sessions.drain(..) {
                    let i = *index.entry(Arc::as_ptr(&s)).or_insert_with(|| {
                        per.push((s.clone(), Vec::new()));
                        per.len() - 1
                    });
                    per[i].1.push(frame.wire().clone());
                }
            }
            for (s, frames) in per {
                if s.offer_many(frames) == Offer::Full {
                    slow.push(s);
                }
            }
        }
        if !slow.is_empty() {
            for s in &slow {
                s.order_close(CloseOrder { code: close::TRY_AGAIN_LATER, reason: "slow consumer: outbound queue full; resume with since".into() });
            }
            self.slow_closed.fetch_add(slow.len() as u64, Ordering::Relaxed);
            tracing::warn!(sessions = slow.len(), "closing sessions too slow to keep up (1013)");
        }
    }
}
