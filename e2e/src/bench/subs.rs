//! Light WebSocket subscribers for every system, the same client code for all: each counts the
//! events (pixel events or `stream` publications) it receives and, when asked, keeps the receive
//! time of each (channel, version), taken when the frame that carried it was read whole.

use super::peers::{self, Peer};
use futures::{SinkExt, StreamExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// The system a subscriber talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum System {
    /// Our ws-node (directly or through the gateway): `/ws?canvas=<id>&since=0` for a canvas of the
    /// default namespace (today's `event` frames), `/ws?channel=<id>&since=0` for a channel of a
    /// namespace (`publication` frames).
    Fleet,
    Peer(Peer),
}

impl System {
    /// A short name for progress lines.
    pub fn label(&self) -> &'static str {
        match self {
            System::Fleet => "fleet",
            System::Peer(Peer::Centrifugo) => "centrifugo",
            System::Peer(Peer::SocketIo) => "socket.io",
        }
    }
}

/// What one subscriber saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Events received.
    pub events: AtomicU64,
    /// The connection ended (closed by the server or failed) while the benchmark ran.
    pub ended: AtomicBool,
    /// (version, receive time) of each event, when recording.
    pub times: Mutex<Vec<(u64, Instant)>>,
}

/// One subscriber: its canvas (by index) and what it saw.
pub struct Sub {
    pub canvas: usize,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Small WebSocket buffers: the benchmark holds up to 10,000 connections in one process
/// (tungstenite's default read buffer is 128 KiB each).
pub fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0)
}

#[derive(serde::Deserialize)]
struct FleetFrame {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    version: u64,
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(system: System, base: &str, canvas: &str) -> anyhow::Result<Ws> {
    match system {
        System::Fleet => {
            // A channel of a namespace is no canvas: its session takes `channel=`.
            let key = if canvas.contains(':') { "channel" } else { "canvas" };
            let url = format!("{base}/ws?{key}={canvas}&since=0");
            let (mut ws, _) = tokio_tungstenite::connect_async_with_config(url.as_str(), Some(ws_config()), false).await?;
            // The welcome frame says the session is open on the node.
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                Ok(Some(Ok(Message::Text(_)))) => Ok(ws),
                other => anyhow::bail!("no welcome frame from {url}: {other:?}"),
            }
        }
        System::Peer(p) => peers::subscribe(p, base, canvas).await,
    }
}

fn on_text(system: System, text: &str, versions: &mut Vec<u64>) -> Option<String> {
    match system {
        System::Fleet => {
            if let Ok(f) = serde_json::from_str::<FleetFrame>(text) {
                if f.kind == "event" || f.kind == "publication" {
                    versions.push(f.version);
                }
            }
            None
        }
        System::Peer(p) => peers::on_text(p, text, versions),
    }
}

/// Opens one subscriber of `canvas` (index `canvas_index`) at `base`; returns once subscribed.
///
/// # Errors
/// When the connection or the subscription fails.
pub async fn subscribe(system: System, base: &str, canvas: &str, canvas_index: usize, record: bool) -> anyhow::Result<Sub> {
    let mut ws = open(system, base, canvas).await?;
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let mut versions = Vec::with_capacity(8);
        while let Some(msg) = ws.next().await {
            match msg {
                Ok(Message::Text(t)) => {
                    let at = Instant::now();
                    versions.clear();
                    if let Some(reply) = on_text(system, t.as_str(), &mut versions) {
                        if ws.send(Message::text(reply)).await.is_err() {
                            break;
                        }
                    }
                    if !versions.is_empty() {
                        s.events.fetch_add(versions.len() as u64, Ordering::Relaxed);
                        if record {
                            s.times.lock().expect("times lock").extend(versions.iter().map(|v| (*v, at)));
                        }
                    }
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        s.ended.store(true, Ordering::Relaxed);
    });
    Ok(Sub { canvas: canvas_index, seen, task })
}

/// Opens `n` subscribers, subscriber `k` on canvas `k % canvases.len()`, at most 100 handshakes at
/// a time, printing progress.
///
/// # Errors
/// When a subscription fails.
pub async fn subscribe_many(system: System, base: &str, canvases: &[String], n: usize, record: bool) -> anyhow::Result<Vec<Sub>> {
    let started = Instant::now();
    let mut last = Instant::now();
    let mut subs = Vec::with_capacity(n);
    let mut pending = futures::stream::iter((0..n).map(|k| {
        let c = k % canvases.len();
        let canvas = canvases[c].clone();
        let base = base.to_owned();
        async move {
            let mut tries = 0;
            loop {
                match subscribe(system, &base, &canvas, c, record).await {
                    Ok(s) => return Ok(s),
                    Err(e) if tries < 3 => {
                        tries += 1;
                        tracing::debug!("subscribe retry: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }))
    .buffer_unordered(100);
    while let Some(s) = pending.next().await {
        subs.push(s?);
        if last.elapsed() > Duration::from_secs(3) {
            println!("[bench]   {}: {}/{n} subscribers connected ({:.0} s)", system.label(), subs.len(), started.elapsed().as_secs_f64());
            last = Instant::now();
        }
    }
    Ok(subs)
}

/// Events received by all `subs`.
pub fn total_events(subs: &[Sub]) -> u64 {
    subs.iter().map(|s| s.seen.events.load(Ordering::Relaxed)).sum()
}

/// Subscribers whose connection ended.
pub fn ended(subs: &[Sub]) -> usize {
    subs.iter().filter(|s| s.seen.ended.load(Ordering::Relaxed)).count()
}
