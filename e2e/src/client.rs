//! A test client: one WebSocket subscriber of one channel, through the gateway, that reconnects
//! like a good client should and records everything it receives. It speaks today's canvas frames
//! (`canvas=`: `snapshot`, `event`) or the channel frames (`channel=`: `state`, `publication`,
//! `reset`) of any model, and holds the channel's state under its model to compare hashes.
//!
//! - Resume: every connection carries `since` = the last version applied and `epoch` = the epoch
//!   of the last `welcome` once a snapshot gave it a canvas (none before: it holds nothing; with
//!   it, `since=0` means "I hold the blank canvas" and is resumed by events); versions at or below
//!   it are recorded (the fleet sent a duplicate) and dropped; a jump is recorded (the fleet skipped a version) and answered
//!   with a resync (reconnect with `since`) instead of being applied. A `welcome` naming another
//!   epoch than the one sent means the client's versions belong to another history: it forgets its
//!   canvas and version, and the snapshot that follows is its new base.
//! - Backoff: exponential with jitter and a cap (`backon`), reset only after a connection stayed
//!   open for the stable period; a 503's `Retry-After` and a reconnect notice's `retry_after_ms`
//!   are honoured.

use backon::BackoffBuilder;
use futures::StreamExt;
use shared::epoch::Epoch;
use shared::model::{Model, State as ModelState};
use shared::protocol::{FrameStyle, ServerMessage};
use shared::CanvasDims;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;

/// What a frame was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `snapshot` or `state` frame.
    Snapshot,
    /// An `event` or `publication` frame.
    Event,
    /// A `reset` frame: the position moved to its version without the publications between.
    Reset,
}

/// One frame received.
#[derive(Debug, Clone)]
pub struct Got {
    /// Receive time, Unix epoch ms.
    pub at_ms: u64,
    pub kind: Kind,
    pub version: u64,
    /// For events: when the publisher accepted it (epoch ms).
    pub published_at_ms: u64,
    /// Which connection (1-based) delivered it.
    pub session: u32,
}

/// One connection.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub n: u32,
    pub since: u64,
    /// When the connect attempt that opened it started (Unix epoch ms).
    pub dialed_ms: u64,
    pub opened_ms: u64,
    pub closed_ms: Option<u64>,
    /// Why it ended (`close_1012`, `reconnect_notice`, `dropped`, `gap_resync`, ...).
    pub end: Option<String>,
    /// Index of the gateway it went through (in the list the client was given).
    pub gateway: usize,
    /// Its `welcome` came (the session was established, not only the WebSocket upgrade).
    pub welcomed: bool,
}

/// How an attempt ended, for the choice of the next gateway ([`next_gateway`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayOutcome {
    /// It failed before its `welcome` (refused, connect error, closed early).
    Failed,
    /// A session that had its `welcome` ended (close, error, gap, bad frame).
    Dropped,
    /// The server sent a `reconnect` notice (a drain or a hand-over).
    Notice,
}

/// The gateway of the next attempt after one on `index` (of `count`) ended with `outcome`, and
/// whether that next attempt is the one retry of its gateway after a drop: the browser client's
/// rule (web/client/machine.js `nextGateway`). A failed attempt moves to the next gateway; a
/// dropped session retries its gateway once, then moves on; a notice stays (the gateway routes the
/// reconnect to the new owner). The backoff is not reset by a move.
#[must_use]
pub fn next_gateway(index: usize, count: usize, outcome: GatewayOutcome, retried: bool) -> (usize, bool) {
    let count = count.max(1);
    let advance = ((index + 1) % count, false);
    match outcome {
        GatewayOutcome::Failed => advance,
        GatewayOutcome::Dropped if retried => advance,
        GatewayOutcome::Dropped => (index % count, true),
        GatewayOutcome::Notice => (index % count, retried),
    }
}

/// Everything a client saw.
#[derive(Debug, Clone, Default)]
pub struct ClientReport {
    pub name: String,
    pub channel: String,
    pub got: Vec<Got>,
    pub sessions: Vec<SessionInfo>,
    /// Reconnects by cause.
    pub causes: BTreeMap<String, u32>,
    /// Handshakes refused (503) or failed.
    pub refused: u32,
    /// Last version applied.
    pub version: u64,
    /// The epoch of the last `welcome` (sent back on every reconnect).
    pub epoch: Option<Epoch>,
    /// Welcomes that named another epoch than the one the client had.
    pub epoch_changes: u32,
    /// Index in `got` of the first frame of the current epoch (0 until an epoch change): the
    /// stream of the current history starts there ([`crate::checker::check_history`]).
    pub history_from: usize,
    /// Hash of the client's state of its channel.
    pub hash: String,
    /// `reset` frames received (a stream resumed from beyond the node's window).
    pub resets: u32,
}

/// Client timing.
#[derive(Debug, Clone, Copy)]
pub struct ClientTiming {
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// A connection open this long resets the backoff.
    pub stable: Duration,
}

impl Default for ClientTiming {
    fn default() -> Self {
        Self { backoff_min: Duration::from_millis(100), backoff_max: Duration::from_secs(2), stable: Duration::from_secs(2) }
    }
}

struct State {
    report: ClientReport,
    /// The channel's state held (`None`: nothing held yet).
    held: Option<Box<dyn ModelState>>,
    /// Its model.
    model: Arc<dyn Model>,
    /// Which frames it asks for.
    style: FrameStyle,
    /// Whether it names its channel in a `subscribe` first frame instead of the `/ws` query.
    subscribing: bool,
}

/// What a test can make a running client do (the faults of a client: it stops reading; it drops
/// its connection with everyone else at once).
#[derive(Debug)]
struct Control {
    /// While true the client reads nothing from its socket (a stalled tab, a slow consumer).
    paused: tokio::sync::watch::Sender<bool>,
    /// Closes the open connection; the client reconnects at once.
    kick: tokio::sync::Notify,
}

/// A running client.
pub struct Client {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
    cancel: CancellationToken,
    control: Arc<Control>,
}

impl Client {
    /// Starts a client of `channel` through `ws_base` (`ws://127.0.0.1:port`).
    pub fn spawn(name: &str, ws_base: &str, channel: &str, dims: CanvasDims, timing: ClientTiming) -> Self {
        Self::spawn_with_token(name, ws_base, channel, dims, timing, None)
    }

    /// [`Client::spawn`] with a client token (a JWT), sent as `token=` on every attempt.
    pub fn spawn_with_token(name: &str, ws_base: &str, channel: &str, dims: CanvasDims, timing: ClientTiming, token: Option<String>) -> Self {
        Self::spawn_with_gateways(name, &[ws_base.to_owned()], channel, dims, timing, token)
    }

    /// A client that knows several gateways (`ws://host:port` each), tried in turn by
    /// [`next_gateway`]; the first attempt uses the first.
    ///
    /// # Panics
    /// With an empty list.
    pub fn spawn_with_gateways(name: &str, ws_bases: &[String], channel: &str, dims: CanvasDims, timing: ClientTiming, token: Option<String>) -> Self {
        Self::start(name, ws_bases, channel, Arc::new(shared::model::pixels::Pixels { dims }), FrameStyle::Canvas, timing, token)
    }

    /// A client of `channel` (of `model`, as its namespace says) in the channel frames.
    pub fn spawn_channel(name: &str, ws_bases: &[String], channel: &str, model: Arc<dyn Model>, timing: ClientTiming, token: Option<String>) -> Self {
        Self::start(name, ws_bases, channel, model, FrameStyle::Channel, timing, token)
    }

    /// [`Client::spawn_channel`] that opens `/ws` without a channel and names it (with its
    /// position and token) in a `subscribe` first frame.
    pub fn spawn_subscribing(name: &str, ws_bases: &[String], channel: &str, model: Arc<dyn Model>, timing: ClientTiming, token: Option<String>) -> Self {
        let c = Self::start(name, ws_bases, channel, model, FrameStyle::Channel, timing, token);
        c.state.lock().expect("client lock").subscribing = true;
        c
    }

    fn start(name: &str, ws_bases: &[String], channel: &str, model: Arc<dyn Model>, style: FrameStyle, timing: ClientTiming, token: Option<String>) -> Self {
        assert!(!ws_bases.is_empty(), "a client needs at least one gateway");
        let ws_bases = ws_bases.to_vec();
        let state = Arc::new(Mutex::new(State {
            report: ClientReport { name: name.into(), channel: channel.into(), ..Default::default() },
            held: None,
            model,
            style,
            subscribing: false,
        }));
        let cancel = CancellationToken::new();
        let control = Arc::new(Control { paused: tokio::sync::watch::channel(false).0, kick: tokio::sync::Notify::new() });
        let task = tokio::spawn(run(state.clone(), ws_bases, channel.to_owned(), token, timing, cancel.clone(), control.clone()));
        Self { state, task, cancel, control }
    }

    /// Stops reading from the socket (`true`) or reads again (`false`): frames pile up in the
    /// node's send queue and the TCP buffers, pings go unanswered.
    pub fn pause_reading(&self, paused: bool) {
        self.control.paused.send_replace(paused);
    }

    /// Closes the open connection (1000) and reconnects at once, without backoff: one client's
    /// part in a reconnect storm.
    pub fn kick(&self) {
        self.control.kick.notify_waiters();
    }

    /// The last version applied.
    pub fn version(&self) -> u64 {
        self.state.lock().expect("client lock").report.version
    }

    /// A copy of the report so far.
    pub fn report(&self) -> ClientReport {
        snapshot(&self.state)
    }

    /// Whether a connection is open now.
    pub fn connected(&self) -> bool {
        self.state.lock().expect("client lock").report.sessions.last().is_some_and(|s| s.closed_ms.is_none())
    }

    /// Closes the connection (1000) and returns the final report.
    pub async fn stop(self) -> ClientReport {
        self.cancel.cancel();
        let _ = self.task.await;
        snapshot(&self.state)
    }
}

fn snapshot(state: &Mutex<State>) -> ClientReport {
    let s = state.lock().expect("client lock");
    let mut r = s.report.clone();
    r.hash = s.held.as_ref().map(|c| c.hash()).unwrap_or_default();
    r
}

fn now_ms() -> u64 {
    shared::event::now_ms()
}

enum Next {
    /// Reconnect after this delay (`None`: use the backoff).
    After(Option<Duration>),
    Stop,
}

/// The `/ws` URL of an attempt: `channel`, `since`, the `epoch` of the last `welcome` when there
/// was one, and the client token (percent-encoded) when there is one.
pub fn session_url(base: &str, channel: &str, since: u64, epoch: Option<&str>, token: Option<&str>) -> String {
    session_url_as(FrameStyle::Canvas, base, channel, since, epoch, token)
}

/// [`session_url`] in frames of `style` (`channel=` or `canvas=`).
pub fn session_url_as(style: FrameStyle, base: &str, channel: &str, since: u64, epoch: Option<&str>, token: Option<&str>) -> String {
    let param = if style == FrameStyle::Channel { "channel" } else { "canvas" };
    let mut url = match epoch {
        Some(e) => format!("{base}/ws?{param}={channel}&since={since}&epoch={e}"),
        None => format!("{base}/ws?{param}={channel}&since={since}"),
    };
    if let Some(t) = token.filter(|t| !t.is_empty()) {
        url.push_str("&token=");
        url.extend(form_urlencoded::byte_serialize(t.as_bytes()));
    }
    url
}

#[allow(clippy::too_many_arguments)]
async fn run(
    state: Arc<Mutex<State>>,
    bases: Vec<String>,
    channel: String,
    token: Option<String>,
    t: ClientTiming,
    cancel: CancellationToken,
    control: Arc<Control>,
) {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(t.backoff_min)
        .with_max_delay(t.backoff_max)
        .with_jitter()
        .without_max_times();
    let mut backoff = builder.build();
    let mut n = 0u32;
    let (mut gateway, mut retried) = (0usize, false);
    loop {
        let (since, epoch, style, subscribing) = {
            let s = state.lock().expect("client lock");
            // The epoch says "I hold version `since` of this history": only with a state held (a
            // welcome then a drop before the snapshot leaves nothing, which `since=0` alone says).
            (s.report.version, s.held.as_ref().and(s.report.epoch.clone()), s.style, s.subscribing)
        };
        let url = if subscribing {
            format!("{}/ws", bases[gateway])
        } else {
            session_url_as(style, &bases[gateway], &channel, since, epoch.as_ref().map(|e| e.as_str()), token.as_deref())
        };
        let dialed_ms = now_ms();
        let connect = tokio::select! {
            r = tokio_tungstenite::connect_async(url.as_str()) => r,
            _ = cancel.cancelled() => return,
        };
        let next = match connect {
            Err(e) => {
                let (cause, retry_after) = match &e {
                    tungstenite::Error::Http(resp) => (
                        format!("refused_{}", resp.status().as_u16()),
                        resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok()),
                    ),
                    _ => ("connect_error".to_owned(), None),
                };
                let mut s = state.lock().expect("client lock");
                s.report.refused += 1;
                *s.report.causes.entry(cause).or_default() += 1;
                drop(s);
                (gateway, retried) = next_gateway(gateway, bases.len(), GatewayOutcome::Failed, retried);
                // Honour Retry-After as a floor, but keep the backoff growing.
                let b = backoff.next().unwrap_or(t.backoff_max);
                Next::After(Some(retry_after.map_or(b, |r| b.max(Duration::from_secs(r).min(t.backoff_max)))))
            }
            Ok((mut ws, _)) => {
                if subscribing {
                    let channel = shared::ChannelId::parse(&channel).expect("a client's channel is a channel id");
                    let frame = shared::protocol::ClientMessage::Subscribe { channel, since, epoch: epoch.clone(), token: token.clone() };
                    let _ = futures::SinkExt::send(&mut ws, tungstenite::Message::Text(frame.to_json().into())).await;
                }
                n += 1;
                let opened = Instant::now();
                state.lock().expect("client lock").report.sessions.push(SessionInfo {
                    n,
                    since,
                    dialed_ms,
                    opened_ms: now_ms(),
                    closed_ms: None,
                    end: None,
                    gateway,
                    welcomed: false,
                });
                let (next, end) = session(&state, ws, n, &cancel, &control).await;
                let mut s = state.lock().expect("client lock");
                let mut welcomed = false;
                if let Some(last) = s.report.sessions.last_mut() {
                    last.closed_ms = Some(now_ms());
                    last.end = Some(end.clone());
                    welcomed = last.welcomed;
                }
                let outcome = match end.as_str() {
                    "reconnect_notice" => GatewayOutcome::Notice,
                    _ if welcomed => GatewayOutcome::Dropped,
                    _ => GatewayOutcome::Failed,
                };
                if !matches!(next, Next::Stop) {
                    *s.report.causes.entry(end).or_default() += 1;
                }
                drop(s);
                if opened.elapsed() >= t.stable {
                    backoff = builder.build();
                    retried = false;
                }
                (gateway, retried) = next_gateway(gateway, bases.len(), outcome, retried);
                next
            }
        };
        match next {
            Next::Stop => return,
            Next::After(d) => {
                let d = d.unwrap_or_else(|| backoff.next().unwrap_or(t.backoff_max));
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = cancel.cancelled() => return,
                }
            }
        }
    }
}

/// Takes in a whole state (`state` or today's `snapshot` frame) at `version`.
fn take_state(s: &mut State, version: u64, state: &serde_json::Value, n: u32) -> Option<(Next, String)> {
    s.report.got.push(Got { at_ms: now_ms(), kind: Kind::Snapshot, version, published_at_ms: 0, session: n });
    match s.model.from_json(state) {
        Ok(c) => {
            s.held = Some(c);
            s.report.version = version;
            None
        }
        Err(_) => Some((Next::After(None), "bad_snapshot".into())),
    }
}

/// Takes in one publication's `data` at `version`.
fn take_publication(s: &mut State, version: u64, data: &serde_json::value::RawValue, published_at_ms: u64, n: u32) -> Option<(Next, String)> {
    s.report.got.push(Got { at_ms: now_ms(), kind: Kind::Event, version, published_at_ms, session: n });
    let have = s.report.version;
    if version <= have {
        return None; // duplicate: recorded, dropped
    }
    if version != have + 1 || s.held.is_none() {
        return Some((Next::After(Some(Duration::ZERO)), "gap_resync".into()));
    }
    if let Some(c) = s.held.as_mut() {
        if c.apply(data).is_err() {
            return Some((Next::After(None), "bad_publication".into()));
        }
    }
    s.report.version = version;
    None
}

/// Applies one frame; returns how to leave the session when the frame ends it.
fn apply_frame(s: &mut State, frame: ServerMessage, n: u32) -> Option<(Next, String)> {
    match frame {
        ServerMessage::Snapshot { version, width, height, pixels, .. } => {
            take_state(s, version, &serde_json::json!({ "width": width, "height": height, "pixels": pixels }), n)
        }
        ServerMessage::State { version, state, .. } => take_state(s, version, &state, n),
        ServerMessage::Event(ev) => {
            let data = shared::model::pixels::Paint { x: ev.x, y: ev.y, color: ev.color }.to_data();
            take_publication(s, ev.version, &data, ev.published_at_ms, n)
        }
        ServerMessage::Publication { version, data, published_at_ms, .. } => {
            let data = serde_json::value::to_raw_value(&data).expect("a JSON value is JSON");
            take_publication(s, version, &data, published_at_ms, n)
        }
        ServerMessage::Reset { version, epoch, .. } => {
            // What came between is not coming: the position moves on, the state (a stream's is
            // nothing) stays; a stateful model's `state` follows.
            s.report.got.push(Got { at_ms: now_ms(), kind: Kind::Reset, version, published_at_ms: 0, session: n });
            s.report.resets += 1;
            let stateless = s.model.kind() == shared::model::ModelKind::Stream;
            if epoch.is_some() && s.report.epoch.is_some() && epoch != s.report.epoch {
                // The channel was reset (or deleted): another history starts, at this reset for a
                // stream, at the `state` that follows for a model with state.
                s.report.epoch_changes += 1;
                s.report.history_from = if stateless { s.report.got.len() - 1 } else { s.report.got.len() };
                s.report.epoch = epoch;
                if !stateless {
                    s.held = None;
                }
            }
            if s.held.is_none() && stateless {
                s.held = Some(s.model.empty());
            }
            s.report.version = version;
            None
        }
        ServerMessage::Reconnect { retry_after_ms, .. } => {
            let jitter = rand::random::<u64>() % (retry_after_ms / 2 + 1);
            Some((Next::After(Some(Duration::from_millis(retry_after_ms + jitter))), "reconnect_notice".into()))
        }
        ServerMessage::Error { retry_after_ms: Some(ms), .. } => Some((Next::After(Some(Duration::from_millis(ms))), "refused_frame".into())),
        ServerMessage::Welcome { epoch, .. } => {
            // (A node older than epochs names none: that says nothing about the history.)
            if epoch.is_some() && s.report.epoch.is_some() && epoch != s.report.epoch {
                // Another history: nothing the client holds applies to it.
                s.report.epoch_changes += 1;
                s.report.history_from = s.report.got.len();
                s.report.version = 0;
                s.held = None;
            }
            s.report.epoch = epoch;
            if let Some(last) = s.report.sessions.last_mut() {
                last.welcomed = true;
            }
            None
        }
        ServerMessage::Error { .. } => None,
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn session(state: &Arc<Mutex<State>>, mut ws: Ws, n: u32, cancel: &CancellationToken, control: &Control) -> (Next, String) {
    let mut paused = control.paused.subscribe();
    loop {
        let reading = !*paused.borrow_and_update();
        let msg = tokio::select! {
            m = ws.next(), if reading => m,
            _ = paused.changed() => continue,
            () = control.kick.notified() => {
                let _ = ws.close(None).await;
                return (Next::After(Some(Duration::ZERO)), "kicked".into());
            }
            _ = cancel.cancelled() => {
                let _ = ws.close(None).await;
                return (Next::Stop, "client_stopped".into());
            }
        };
        let msg = match msg {
            None => return (Next::After(None), "dropped".into()),
            Some(Err(e)) => return (Next::After(None), format!("error: {e}")),
            Some(Ok(m)) => m,
        };
        match msg {
            Message::Text(text) => {
                let Ok(frame) = serde_json::from_str::<ServerMessage>(text.as_str()) else {
                    return (Next::After(None), "bad_frame".into());
                };
                // Decide under the lock, act (await) after it.
                let leave = apply_frame(&mut state.lock().expect("client lock"), frame, n);
                if let Some((next, cause)) = leave {
                    let _ = ws.close(None).await;
                    return (next, cause);
                }
            }
            Message::Close(frame) => {
                let code = frame.map(|f| u16::from(f.code)).unwrap_or(1005);
                return (Next::After(None), format!("close_{code}"));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: CanvasDims = CanvasDims { width: 2, height: 2 };

    #[test]
    fn next_gateway_follows_the_browser_clients_table() {
        use GatewayOutcome::{Dropped, Failed, Notice};
        // (index, count, outcome, retried) → (next index, retried after)
        let table = [
            ((0, 2, Failed, false), (1, false)),
            ((1, 2, Failed, false), (0, false)),
            ((1, 2, Failed, true), (0, false)),
            ((0, 2, Dropped, false), (0, true)),
            ((0, 2, Dropped, true), (1, false)),
            ((1, 3, Dropped, true), (2, false)),
            ((0, 2, Notice, false), (0, false)),
            ((1, 2, Notice, true), (1, true)),
            // One gateway: always that one.
            ((0, 1, Failed, false), (0, false)),
            ((0, 1, Dropped, false), (0, true)),
            ((0, 1, Dropped, true), (0, false)),
        ];
        for ((index, count, outcome, retried), want) in table {
            assert_eq!(next_gateway(index, count, outcome, retried), want, "{index} of {count} {outcome:?} retried={retried}");
        }
    }

    #[test]
    fn session_url_carries_epoch_and_token() {
        assert_eq!(session_url("ws://g:1", "c1", 0, None, None), "ws://g:1/ws?canvas=c1&since=0");
        assert_eq!(session_url("ws://g:1", "c1", 5, Some("e-0"), None), "ws://g:1/ws?canvas=c1&since=5&epoch=e-0");
        assert_eq!(session_url("ws://g:1", "c1", 5, None, Some("a.b+c/=")), "ws://g:1/ws?canvas=c1&since=5&token=a.b%2Bc%2F%3D");
        assert_eq!(session_url("ws://g:1", "c1", 5, Some("e"), Some("")), "ws://g:1/ws?canvas=c1&since=5&epoch=e");
        // What the servers parse back.
        let q = shared::http::parse_ws_query("canvas=c1&since=5&token=a.b%2Bc%2F%3D").unwrap();
        assert_eq!(q.token.as_deref(), Some("a.b+c/="));
    }

    fn welcome(epoch: Option<&str>) -> ServerMessage {
        ServerMessage::Welcome { node: "ws-1".into(), canvas: Some("c1".into()), channel: None, model: None, since: 0, epoch: epoch.map(|e| Epoch::parse(e).unwrap()) }
    }

    fn snapshot(version: u64) -> ServerMessage {
        let canvas = shared::Canvas::new(DIMS);
        ServerMessage::Snapshot { canvas: "c1".into(), version, width: 2, height: 2, pixels: canvas.pixels_base64() }
    }

    fn event(version: u64) -> ServerMessage {
        let canvas = shared::ChannelId::parse("c1").unwrap();
        ServerMessage::Event(shared::PixelEvent { canvas, version, x: 1, y: 1, color: shared::Color([1, 2, 3]), published_at_ms: 0 })
    }

    #[test]
    fn a_welcome_of_another_epoch_makes_the_next_snapshot_the_base_even_when_older() {
        let mut s = State { report: ClientReport::default(), held: None, model: Arc::new(shared::model::pixels::Pixels { dims: DIMS }), style: FrameStyle::Canvas, subscribing: false };
        for f in [welcome(Some("T1-0")), snapshot(10), event(11)] {
            assert!(apply_frame(&mut s, f, 1).is_none());
        }
        assert_eq!((s.report.version, s.report.epoch.as_ref().map(Epoch::as_str)), (11, Some("T1-0")));
        // The same epoch again: nothing is forgotten.
        assert!(apply_frame(&mut s, welcome(Some("T1-0")), 2).is_none());
        assert_eq!((s.report.version, s.report.epoch_changes), (11, 0));
        // The topic was recreated: version 3 of the new history replaces version 11 of the old.
        for f in [welcome(Some("T2-0")), snapshot(3), event(4)] {
            assert!(apply_frame(&mut s, f, 3).is_none());
        }
        assert_eq!((s.report.version, s.report.epoch_changes), (4, 1));
        assert_eq!(s.report.epoch.as_ref().map(Epoch::as_str), Some("T2-0"));
        // A node older than epochs names none: the client then sends none.
        assert!(apply_frame(&mut s, welcome(None), 4).is_none());
        assert_eq!((s.report.version, s.report.epoch.clone()), (4, None));
    }
}
