//! A session's ordered writer ([`Outbox`]), shared by the fan-out and the session task.
//!
//! The fan-out writes a frame's bytes straight to the session's socket with a non-blocking write
//! when nothing waits before it; only when the kernel's send buffer is full (or the session has not
//! written its backlog yet) do bytes wait here, in order, for the session task to write them when
//! the socket is writable, several frames per system call. All writes to a socket (frames, pings,
//! pongs, close frames) go through its outbox, under its lock, so they leave in order. Frames
//! waiting beyond the session's bound are refused ([`Offer::Full`]: the fan-out closes the session
//! with 1013).

use crate::state::Frame;
use bytes::{Buf, Bytes};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

/// An order to close a session, with the WebSocket close code and reason to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseOrder {
    pub code: u16,
    pub reason: String,
}

/// Waiting chunks written per system call at most.
const IOV: usize = 64;

/// What [`Outbox::offer`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Written, or queued behind bytes that wait.
    Taken,
    /// The session already has its bound of frames waiting.
    Full,
    /// The session ended or is closing.
    Closed,
}

/// A session's ordered writer, shared by the hub's fan-out (through the hub's `SessionHandle`) and the
/// session task.
#[derive(Debug)]
pub struct Outbox {
    st: Mutex<OutState>,
    /// Frames (not control frames) that may wait at most.
    limit: usize,
    /// Wakes the session task: bytes wait, a close order, a failed write, the handle dropped.
    pub(crate) wake: Notify,
    ended: AtomicBool,
    ended_notify: Notify,
}

#[derive(Debug, Default)]
struct OutState {
    /// The socket; `None` before the session starts writing (and in tests) and after it ended.
    sock: Option<Arc<TcpStream>>,
    /// The backlog is in `pending`: frames may be written directly when nothing waits.
    started: bool,
    /// The session is sending its close frame: no more frames.
    closing: bool,
    /// Bytes to write, in order; the flag tells a frame counted against `limit`.
    pending: VecDeque<(Bytes, bool)>,
    /// Counted frames in `pending`.
    queued: usize,
    /// The first chunk of `pending` is partly written (it must be finished before anything else).
    front_partial: bool,
    /// When bytes started waiting or last made progress.
    progress: Option<Instant>,
    order: Option<CloseOrder>,
    handle_gone: bool,
    failed: Option<String>,
}

/// What the session task acts on, read under the outbox lock.
pub(crate) struct Status {
    pub(crate) order: Option<CloseOrder>,
    pub(crate) handle_gone: bool,
    pub(crate) failed: Option<String>,
    /// When waiting bytes last made progress (`None` when nothing waits).
    pub(crate) waiting_since: Option<Instant>,
}

impl Outbox {
    /// An outbox that lets at most `limit` frames wait.
    pub fn new(limit: usize) -> Self {
        Self { st: Mutex::new(OutState::default()), limit: limit.max(1), wake: Notify::new(), ended: AtomicBool::new(false), ended_notify: Notify::new() }
    }

    fn lock(&self) -> MutexGuard<'_, OutState> {
        // Nothing panics while the lock is held.
        self.st.lock().expect("outbox lock poisoned")
    }

    /// Whether frames are no longer taken: the session is closing, ordered closed, failed or ended.
    fn refuses(&self, st: &OutState) -> bool {
        st.closing || st.order.is_some() || st.failed.is_some() || self.ended.load(Ordering::Relaxed)
    }

    /// Writes `frame` to the socket now when nothing waits before it and the kernel takes it,
    /// else queues it (or what the kernel did not take) for the session task. Never blocks.
    pub fn offer(&self, frame: &Frame) -> Offer {
        let mut st = self.lock();
        if self.refuses(&st) {
            return Offer::Closed;
        }
        if !st.pending.is_empty() || !st.started || st.sock.is_none() {
            if st.queued >= self.limit {
                return Offer::Full;
            }
            self.enqueue(&mut st, frame.wire().clone(), true);
            return Offer::Taken;
        }
        if self.write_direct(&mut st, frame.wire(), true) {
            Offer::Taken
        } else {
            Offer::Closed
        }
    }

    /// [`Outbox::offer`] for several frames, written with one system call when nothing waits.
    pub fn offer_many(&self, frames: Vec<Bytes>) -> Offer {
        let mut st = self.lock();
        if self.refuses(&st) {
            return Offer::Closed;
        }
        let direct = st.pending.is_empty() && st.started && st.sock.is_some();
        if !direct {
            for f in frames {
                if st.queued >= self.limit {
                    return Offer::Full;
                }
                self.enqueue(&mut st, f, true);
            }
            return Offer::Taken;
        }
        st.queued += frames.len();
        st.pending.extend(frames.into_iter().map(|f| (f, true)));
        match Self::flush_locked(&mut st) {
            Ok(true) => Offer::Taken,
            Ok(false) => {
                // The kernel took part: the session task writes the rest.
                st.progress = Some(Instant::now());
                self.wake.notify_one();
                if st.queued > self.limit {
                    Offer::Full
                } else {
                    Offer::Taken
                }
            }
            Err(_) => {
                self.wake.notify_one();
                Offer::Closed
            }
        }
    }

    /// Writes a control frame (ping, pong, close reply) in order with the frames. Waiting control
    /// frames count against the same bound as frames: a client that sends pings faster than it
    /// reads the pongs ends its session instead of growing the node's memory.
    pub(crate) fn push_raw(&self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        let mut st = self.lock();
        if st.failed.is_some() {
            return;
        }
        if !st.pending.is_empty() || !st.started || st.sock.is_none() {
            if st.queued >= self.limit {
                st.failed = Some("the client sends control frames faster than it reads the replies".into());
                self.wake.notify_one();
                return;
            }
            self.enqueue(&mut st, bytes, true);
        } else {
            self.write_direct(&mut st, &bytes, false);
        }
    }

    fn enqueue(&self, st: &mut OutState, bytes: Bytes, counted: bool) {
        if st.pending.is_empty() {
            st.progress = Some(Instant::now());
            self.wake.notify_one();
        }
        st.queued += usize::from(counted);
        st.pending.push_back((bytes, counted));
    }

    /// Writes `bytes` with nothing waiting; queues the rest when the kernel takes only part.
    /// Returns false when the socket failed.
    fn write_direct(&self, st: &mut OutState, bytes: &Bytes, counted: bool) -> bool {
        let sock = st.sock.as_ref().expect("direct writes need a socket");
        match sock.try_write(bytes) {
            Ok(n) if n == bytes.len() => true,
            Ok(n) => {
                st.front_partial = n > 0;
                self.enqueue(st, bytes.slice(n..), counted);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.enqueue(st, bytes.clone(), counted);
                true
            }
            Err(e) => {
                st.failed = Some(e.to_string());
                self.wake.notify_one();
                false
            }
        }
    }

    /// Writes what waits, as much as the kernel takes. Returns whether nothing waits any more.
    fn flush_locked(st: &mut OutState) -> Result<bool, String> {
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        let Some(sock) = st.sock.clone() else { return Ok(st.pending.is_empty()) };
        while !st.pending.is_empty() {
            let slices: Vec<IoSlice<'_>> = st.pending.iter().take(IOV).map(|(b, _)| IoSlice::new(b)).collect();
            let written = match sock.try_write_vectored(&slices) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => {
                    st.failed = Some(e.to_string());
                    return Err(e.to_string());
                }
            };
            drop(slices);
            st.progress = Some(Instant::now());
            let mut left = written;
            while left > 0 {
                let (front, counted) = st.pending.front_mut().expect("written bytes were queued");
                if front.len() <= left {
                    left -= front.len();
                    let counted = *counted;
                    st.pending.pop_front();
                    st.queued -= usize::from(counted);
                    st.front_partial = false;
                } else {
                    front.advance(left);
                    st.front_partial = true;
                    left = 0;
                }
            }
        }
        st.progress = None;
        Ok(true)
    }

    /// Writes what waits, as much as the kernel takes. Returns whether nothing waits any more.
    pub(crate) fn flush(&self) -> Result<bool, String> {
        Self::flush_locked(&mut self.lock())
    }

    /// Starts writing on `sock`: `first` (welcome and backlog) before any frame queued since the
    /// session was registered.
    pub(crate) fn start(&self, sock: Arc<TcpStream>, first: Vec<Bytes>) {
        let mut st = self.lock();
        for b in first.into_iter().rev() {
            st.pending.push_front((b, false));
        }
        st.sock = Some(sock);
        st.started = true;
        if !st.pending.is_empty() {
            st.progress = Some(Instant::now());
            let _ = Self::flush_locked(&mut st);
        }
    }

    /// Stops taking frames and queues `close` after what is being written (whole frames that
    /// did not start are dropped: the client resumes by version).
    pub(crate) fn begin_close(&self, close: Bytes) {
        let mut st = self.lock();
        st.closing = true;
        let keep = usize::from(st.front_partial);
        st.pending.truncate(keep);
        st.queued = st.pending.iter().filter(|(_, c)| *c).count();
        if !close.is_empty() {
            st.pending.push_back((close, false));
        }
        st.progress = Some(Instant::now());
        let _ = Self::flush_locked(&mut st);
    }

    pub(crate) fn status(&self) -> Status {
        let st = self.lock();
        Status {
            order: st.order.clone(),
            handle_gone: st.handle_gone,
            failed: st.failed.clone(),
            waiting_since: if st.pending.is_empty() { None } else { st.progress },
        }
    }

    /// Orders the session closed with `order` (the latest order wins).
    pub fn order_close(&self, order: CloseOrder) {
        self.lock().order = Some(order);
        self.wake.notify_one();
    }

    /// The hub's handle is gone: the session was handed over without an order.
    pub fn handle_dropped(&self) {
        self.lock().handle_gone = true;
        self.wake.notify_one();
    }

    /// The session task ended: releases the socket and wakes [`Outbox::closed`].
    pub fn finish(&self) {
        {
            let mut st = self.lock();
            st.sock = None;
            st.pending.clear();
            st.queued = 0;
        }
        self.ended.store(true, Ordering::SeqCst);
        self.ended_notify.notify_waiters();
    }

    /// Whether the session task has ended.
    pub fn is_closed(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Resolves when the session task has ended.
    pub async fn closed(&self) {
        loop {
            let notified = self.ended_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    /// The close order given, if any.
    pub fn order(&self) -> Option<CloseOrder> {
        self.lock().order.clone()
    }

    /// Frames (and control frames) waiting to be written.
    pub fn waiting(&self) -> usize {
        self.lock().queued
    }

    /// Takes the bytes waiting (for tests without a socket).
    pub fn take_waiting(&self) -> Vec<Bytes> {
        let mut st = self.lock();
        st.queued = 0;
        st.pending.drain(..).map(|(b, _)| b).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::ws::encode_ping;

    #[test]
    fn control_frames_waiting_beyond_the_bound_end_the_session() {
        // No socket yet: everything waits, as for a client that does not read.
        let out = Outbox::new(4);
        for _ in 0..4 {
            out.push_raw(encode_ping());
        }
        assert!(out.status().failed.is_none(), "within the bound nothing fails");
        assert_eq!(out.take_waiting().len(), 4);
        for _ in 0..5 {
            out.push_raw(encode_ping());
        }
        assert!(out.status().failed.is_some(), "a fifth waiting control frame ends the session");
        assert_eq!(out.take_waiting().len(), 4, "nothing is queued past the bound");
    }
}
