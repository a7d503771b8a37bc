//! A session as the hub holds it ([`SessionHandle`]) and as its task holds it ([`SessionRx`]):
//! two ends of one [`Outbox`].

use crate::outbox::{CloseOrder, Offer, Outbox};
use crate::state::Frame;
use shared::protocol::FrameStyle;
use shared::ChannelId;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The hub's end of a session: its writer (see [`Outbox`]) and its close switch.
#[derive(Debug)]
pub struct SessionHandle {
    pub id: u64,
    pub channel: ChannelId,
    pub partition: i32,
    /// Which frames it is sent.
    pub style: FrameStyle,
    pub(super) out: Arc<Outbox>,
}

/// The session task's end: the same writer, with the close orders. Dropping it marks the session
/// ended (and releases its socket).
#[derive(Debug)]
pub struct SessionRx {
    pub out: Arc<Outbox>,
}

impl Drop for SessionRx {
    fn drop(&mut self) {
        self.out.finish();
    }
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        self.out.handle_dropped();
    }
}

impl SessionHandle {
    /// A handle of today's frames ([`FrameStyle::Canvas`]) that lets at most `queue` frames
    /// wait, and the session task's end of it.
    pub fn new(id: u64, channel: ChannelId, partition: i32, queue: usize) -> (Self, SessionRx) {
        Self::of_style(id, channel, partition, queue, FrameStyle::Canvas)
    }

    /// As [`SessionHandle::new`], of frames of `style`.
    pub fn of_style(id: u64, channel: ChannelId, partition: i32, queue: usize, style: FrameStyle) -> (Self, SessionRx) {
        let out = Arc::new(Outbox::new(queue));
        (Self { id, channel, partition, style, out: out.clone() }, SessionRx { out })
    }

    /// Sends `frame` without waiting: written to the socket at once when it takes it, else queued.
    ///
    /// # Errors
    /// When the queue is full or the session ended.
    pub fn try_send(&self, frame: impl Into<Frame>) -> Result<(), mpsc::error::TrySendError<Frame>> {
        let frame = frame.into();
        match self.out.offer(&frame) {
            Offer::Taken => Ok(()),
            Offer::Full => Err(mpsc::error::TrySendError::Full(frame)),
            Offer::Closed => Err(mpsc::error::TrySendError::Closed(frame)),
        }
    }

    /// Tells the session task to close with `code` and `reason` (frames that did not start
    /// leaving are dropped; the client resumes by version either way).
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        self.out.order_close(CloseOrder { code, reason: reason.into() });
    }

    /// Whether the session task has ended.
    pub fn is_closed(&self) -> bool {
        self.out.is_closed()
    }

    /// Resolves when the session task has ended.
    pub async fn closed(&self) {
        self.out.closed().await
    }
}
