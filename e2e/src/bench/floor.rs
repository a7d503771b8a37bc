//! The write floor of a fan-out case: what delivering each event with one `write` per client costs
//! on this machine when nothing else is done — no broker, no server, no WebSocket library, just a
//! thread writing a pre-encoded WebSocket frame to each subscriber's loopback TCP socket at the
//! case's rate, and plain readers on the other side.
//!
//! A server that gives each delivery its own system call cannot deliver more events per
//! CPU-second than this thread writes frames per CPU-second; only several events per write (which,
//! at a client's pace, means holding events back) can go past it. On one machine the kernel's
//! loopback send also runs the receiver's TCP receive and its wake-up in the sender's context, so
//! most of that cost is the kernel's, for every system alike. The figure sits next to the fan-out
//! rows as the bare consumer sits next to replay. It leaves out everything else a server does per
//! event (consuming, waking up for it, idle connections), so it is a bound, not a model.

use super::payload::Payload;
use anyhow::Context;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// One fan-out shape, and what its records carry.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// Pixel events or `stream` publications of a size.
    pub payload: Payload,
    /// Canvases receiving events; the active clients are spread evenly over them.
    pub active_canvases: usize,
    pub active_clients: usize,
    /// Clients subscribed to canvases that receive nothing.
    pub idle_clients: usize,
    /// Events per second produced over the active canvases.
    pub rate: f64,
}

/// What the floor measured for one case.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Floor {
    /// Frames written (events × the clients of their canvas).
    pub writes: u64,
    /// CPU seconds the writing thread spent writing (`CLOCK_THREAD_CPUTIME_ID` around each burst).
    pub cpu_seconds: f64,
    /// Bytes the readers received; equals `writes × frame bytes` when nothing was lost.
    pub bytes_read: u64,
    /// Bytes of each message on the wire: its WebSocket frame header(s) and the event's JSON.
    pub frame_bytes: usize,
}

impl Floor {
    /// Frames written per CPU-second of the writing thread.
    pub fn per_cpu_second(&self) -> f64 {
        self.writes as f64 / self.cpu_seconds.max(1e-6)
    }
}

/// CPU time of the calling thread so far, seconds: `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`,
/// which brings the running thread's time up to now (`getrusage(RUSAGE_THREAD)` only counts up
/// to the last scheduler tick or switch, too coarse for a window of a few hundred microseconds).
fn thread_cpu_seconds() -> f64 {
    let mut ts = nix::libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux defines.
    let rc = unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) cannot fail on Linux");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Runs the floor of `case` for `duration`: its active clients as plain TCP readers in this
/// process (spread over its canvases as the subscribers are), one thread writing `message` (the
/// wire bytes of an unmasked WebSocket text message, as the node writes it: see
/// [`shared::ws::encode_text`]) with one `write` to every client of an event's canvas, events
/// round-robin over the canvases at the case's rate. Idle clients are left out: nothing is
/// written to them.
///
/// # Errors
/// When a loopback connection cannot be made or a write fails.
pub async fn measure(case: &Case, duration: Duration, message: &[u8]) -> anyhow::Result<Floor> {
    let frame = message.to_vec();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let read = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::with_capacity(case.active_clients);
    // sockets[c] = the server ends of canvas c's clients.
    let mut sockets: Vec<Vec<std::net::TcpStream>> = (0..case.active_canvases).map(|_| Vec::new()).collect();
    for i in 0..case.active_clients {
        let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        let mut client = client.context("connect to the floor's listener")?;
        let (server, _) = accepted?;
        let server = server.into_std()?;
        server.set_nonblocking(false)?;
        server.set_nodelay(true)?;
        // A reader that stalls without closing must not hang the writer (and the run) forever.
        server.set_write_timeout(Some(Duration::from_secs(10)))?;
        sockets[i % case.active_canvases].push(server);
        let read = read.clone();
        readers.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = client.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                read.fetch_add(n as u64, Ordering::Relaxed);
            }
        }));
    }
    let rate = case.rate;
    let writer = std::thread::Builder::new().name("floor-writer".into()).spawn(move || -> anyhow::Result<(u64, f64)> {
        // Wake every millisecond and write every event due by then, one write per frame per
        // client; only the writing is timed (the pacing is not a server's work per delivery).
        let start = Instant::now();
        let total = (rate * duration.as_secs_f64()) as u64;
        let canvases = sockets.len() as u64;
        let (mut writes, mut cpu, mut n) = (0u64, 0.0f64, 0u64);
        while n < total {
            std::thread::sleep(Duration::from_millis(1));
            let due = ((start.elapsed().as_secs_f64() * rate) as u64).min(total);
            let cpu0 = thread_cpu_seconds();
            for event in n..due {
                for s in &mut sockets[(event % canvases) as usize] {
                    s.write_all(&frame).context("write a frame")?;
                    writes += 1;
                }
            }
            cpu += thread_cpu_seconds() - cpu0;
            n = n.max(due);
        }
        drop(sockets);
        Ok((writes, cpu))
    })?;
    let (writes, cpu_seconds) = tokio::task::spawn_blocking(move || writer.join()).await?.map_err(|_| anyhow::anyhow!("the floor's writer panicked"))??;
    for r in readers {
        let _ = tokio::time::timeout(Duration::from_secs(10), r).await;
    }
    Ok(Floor { writes, cpu_seconds, bytes_read: read.load(Ordering::Relaxed), frame_bytes: message.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_event_is_written_once_to_each_client_of_its_canvas_and_read_whole() {
        let case = Case { name: "t".into(), payload: Payload::Pixels, active_canvases: 3, active_clients: 6, idle_clients: 0, rate: 300.0 };
        let message = shared::ws::encode_text(br#"{"type":"event","canvas":"c1","version":1}"#);
        let f = measure(&case, Duration::from_millis(200), &message).await.expect("floor runs on loopback");
        // 300 events/s for 0.2 s = 60 events, each to the 2 clients of its canvas.
        assert_eq!(f.writes, 120);
        assert_eq!(f.frame_bytes, message.len());
        assert_eq!(f.bytes_read, f.writes * f.frame_bytes as u64, "the readers got every byte");
        assert!(f.cpu_seconds > 0.0 && f.per_cpu_second().is_finite());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fragmented_message_leaves_in_one_write_and_is_read_whole() {
        let case = Case { name: "t".into(), payload: Payload::STREAM_16_KIB, active_canvases: 1, active_clients: 2, idle_clients: 0, rate: 100.0 };
        let message = shared::ws::encode_text(&[b'x'; 16 * 1024]);
        assert!(message.len() > 16 * 1024 + 4, "a text frame and continuation frames, each with its header");
        let f = measure(&case, Duration::from_millis(200), &message).await.expect("floor runs on loopback");
        assert_eq!(f.writes, 40);
        assert_eq!(f.bytes_read, f.writes * message.len() as u64);
    }
}
