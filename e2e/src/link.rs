//! A TCP proxy on one node's link to the broker, which a test can freeze, slow or cut.
//!
//! A proxy in front of the bootstrap address alone would not see a Kafka client's traffic: after
//! its first metadata answer the client connects to the brokers' advertised addresses. So the
//! broker gets a second listener per link ([`crate::broker::Broker::start_with_links`]), advertised
//! at the proxy's port: a node bootstrapped there is told that the broker lives at the proxy, and
//! every connection it makes (metadata, fetches, the group coordinator) goes through it (Kafka's
//! multiple listeners, KIP-103).
//!
//! What a mode does to the bytes is the pure [`step`]; [`LinkProxy`] carries it out.

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The state of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// Bytes pass as they come.
    Pass,
    /// Every chunk is held this long before it is passed on (latency, both ways).
    Slow(Duration),
    /// Nothing is read or passed on; connections stay open (a partition that drops packets: the
    /// client's requests time out, its TCP connections do not close).
    Freeze,
    /// Every connection is closed, and new ones are closed as they arrive (a refused route).
    Cut,
}

impl std::fmt::Display for LinkMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkMode::Pass => f.write_str("pass"),
            LinkMode::Slow(d) => write!(f, "slow (+{} ms per chunk)", d.as_millis()),
            LinkMode::Freeze => f.write_str("frozen"),
            LinkMode::Cut => f.write_str("cut"),
        }
    }
}

/// What one direction of a connection does next under a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Read a chunk and pass it on after this delay.
    Forward(Duration),
    /// Do not read; wait for the mode to change.
    Hold,
    /// Close the connection.
    Close,
}

/// The rule: pass (with the slow mode's delay), hold while frozen, close when cut.
#[must_use]
pub fn step(mode: LinkMode) -> Step {
    match mode {
        LinkMode::Pass => Step::Forward(Duration::ZERO),
        LinkMode::Slow(d) => Step::Forward(d),
        LinkMode::Freeze => Step::Hold,
        LinkMode::Cut => Step::Close,
    }
}

/// A running proxy from a loopback port to `upstream`; it stops when dropped.
pub struct LinkProxy {
    /// The port it listens on (the port the broker advertises for this link).
    pub port: u16,
    mode: Arc<watch::Sender<LinkMode>>,
    task: tokio::task::JoinHandle<()>,
}

impl LinkProxy {
    /// Listens on loopback `port` (0: any free port) and forwards each connection to `upstream`
    /// (`host:port`), in [`LinkMode::Pass`].
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub async fn start(port: u16, upstream: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let port = listener.local_addr()?.port();
        let mode = Arc::new(watch::channel(LinkMode::Pass).0);
        let m = mode.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                if step(*m.borrow()) == Step::Close {
                    drop(conn);
                    continue;
                }
                let (m, upstream) = (m.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(&upstream).await else { return };
                    let _ = conn.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    let (cr, cw) = conn.into_split();
                    let (ur, uw) = up.into_split();
                    // Either direction ending ends both (a cut closes the whole connection).
                    tokio::select! {
                        () = pipe(cr, uw, m.subscribe()) => {}
                        () = pipe(ur, cw, m.subscribe()) => {}
                    }
                });
            }
        });
        Ok(Self { port, mode, task })
    }

    /// Sets the link's mode (every open connection follows at once).
    pub fn set(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }

    /// The current mode.
    #[must_use]
    pub fn mode(&self) -> LinkMode {
        *self.mode.borrow()
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Open connections end at their next chunk.
        self.mode.send_replace(LinkMode::Cut);
    }
}

/// Copies `from` to `to` under the mode in `mode` until either side ends or the link is cut.
async fn pipe(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, mut mode: watch::Receiver<LinkMode>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let now = *mode.borrow_and_update();
        let delay = match step(now) {
            Step::Close => return,
            Step::Hold => {
                if mode.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Step::Forward(d) => d,
        };
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            // A change while waiting for bytes: look at the new mode first.
            r = mode.changed() => {
                if r.is_err() {
                    return;
                }
                continue;
            }
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        // Bytes read before a freeze are passed on; a cut drops them with the connection.
        if step(*mode.borrow()) == Step::Close {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_has_its_step() {
        let table = [
            (LinkMode::Pass, Step::Forward(Duration::ZERO)),
            (LinkMode::Slow(Duration::from_millis(300)), Step::Forward(Duration::from_millis(300))),
            (LinkMode::Freeze, Step::Hold),
            (LinkMode::Cut, Step::Close),
        ];
        for (mode, want) in table {
            assert_eq!(step(mode), want, "{mode}");
        }
    }

    /// An echo server behind the proxy: bytes pass, a frozen link holds them until it thaws, a
    /// slow one delays them, a cut one closes the connection and refuses new ones.
    #[tokio::test]
    async fn a_link_passes_holds_delays_and_cuts() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = c.read(&mut buf).await {
                        if n == 0 || c.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let proxy = LinkProxy::start(0, echo_addr).await.unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        let mut buf = [0u8; 5];
        c.write_all(b"hello").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut buf)).await.expect("passes").unwrap();
        assert_eq!(&buf, b"hello");

        proxy.set(LinkMode::Freeze);
        c.write_all(b"hello").await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(500), c.read_exact(&mut buf)).await.is_err(), "frozen: nothing comes back");
        proxy.set(LinkMode::Pass);
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut buf)).await.expect("thawed: the held bytes come").unwrap();
        assert_eq!(&buf, b"hello");

        proxy.set(LinkMode::Slow(Duration::from_millis(200)));
        let t = std::time::Instant::now();
        c.write_all(b"hello").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut buf)).await.expect("slow still passes").unwrap();
        assert!(t.elapsed() >= Duration::from_millis(400), "held in both directions: {:?}", t.elapsed());

        proxy.set(LinkMode::Cut);
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest)).await.expect("cut: the connection closes");
        assert!(n.map_or(true, |n| n == 0));
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        let _ = fresh.write_all(b"hello").await;
        let got = tokio::time::timeout(Duration::from_secs(5), fresh.read(&mut buf)).await.expect("a new connection is closed");
        assert!(got.map_or(true, |n| n == 0), "nothing comes back over a cut link");
    }
}
