//! The process-wide shutdown signal, and the runtime every binary's `main` runs on.

use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long, after a service's main future returned, the process waits for blocking work still
/// running (a Kafka metadata call can block for seconds when the broker is unreachable).
pub const BLOCKING_GRACE: Duration = Duration::from_secs(2);

/// What a service binary's configuration offers the launcher.
pub trait ServiceConfig {
    /// Every problem the per-value checks cannot see, all at once (empty when valid).
    fn problems(&self) -> Vec<String>;
    /// The effective configuration, `VARIABLE=value` lines.
    fn describe(&self) -> String;
    /// Whether `--check-config` was given.
    fn check_only(&self) -> bool;
    /// Where to listen.
    fn listen(&self) -> std::net::SocketAddr;
    /// Notes on the configuration, such as a deprecated name used: `--check-config` prints them
    /// in [`ServiceConfig::describe`], a running service logs them as warnings.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The whole `main` of a service: reports configuration problems (exit 2), or with
/// `--check-config` prints the configuration; else sets up logging (`RUST_LOG`, `LOG_FORMAT`), logs the
/// configuration's notes, sets up the shutdown signal, binds
/// the listener and runs `run(config, listener, shutdown)` on [`run_main`]'s runtime.
///
/// # Errors
/// When binding fails or `run` fails.
pub fn service_main<C, F, Fut, E>(config: C, run: F) -> Result<(), E>
where
    C: ServiceConfig,
    F: FnOnce(C, tokio::net::TcpListener, CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<std::io::Error>,
{
    let mut problems = config.problems();
    let log_format = crate::telemetry::LogFormat::from_env().unwrap_or_else(|e| {
        problems.push(e);
        crate::telemetry::LogFormat::Text
    });
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        std::process::exit(2);
    }
    if config.check_only() {
        println!("{}", config.describe());
        return Ok(());
    }
    let notes = config.notes();
    run_main(async move {
        crate::telemetry::init_as(log_format);
        for note in notes {
            tracing::warn!("configuration: {note}");
        }
        let shutdown = signal_token();
        let listener = listen(config.listen())?;
        run(config, listener, shutdown).await
    })
}

/// Accept-queue length asked for each service's listening socket. Reconnect bursts (every client
/// of a draining node at once, and the gateway's upstream connections for them) overflowed the
/// standard library's 128 (what `TcpListener::bind` uses): the kernel dropped the extra SYNs and
/// those clients retried after TCP's 1 s initial retransmission timeout (measured: SIGTERM with
/// 1,000 clients took 1.5–1.9 s in a third of runs, 0.4–0.5 s otherwise). Linux caps the value at
/// `net.core.somaxconn` (4096 by default since 5.4).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `addr` with an accept queue of [`LISTEN_BACKLOG`] (`SO_REUSEADDR` set,
/// as `TcpListener::bind` does).
///
/// # Errors
/// When the address cannot be bound (in use, not local) or the socket cannot listen.
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Runs `main` on a multi-threaded tokio runtime and returns its output once it finished and
/// blocking work ended, or [`BLOCKING_GRACE`] passed, so SIGTERM stops a process promptly.
///
/// # Panics
/// When the runtime cannot be built (no threads or no I/O driver: nothing could run anyway).
pub fn run_main<T>(main: impl Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("build the tokio runtime");
    let out = rt.block_on(main);
    rt.shutdown_timeout(BLOCKING_GRACE);
    out
}

/// A token cancelled on the first SIGINT or SIGTERM. `main` creates it and hands child tokens to
/// each subsystem; every loop `select!`s on it.
pub fn signal_token() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received: stopping");
        t.cancel();
    });
    token
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A burst of connections bigger than the standard library's backlog (128) is queued by the
    /// kernel while nobody accepts: each connect completes at once instead of waiting for a SYN
    /// retransmission (1 s).
    #[tokio::test]
    async fn a_burst_of_connections_is_queued_without_accepting() {
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut open = Vec::new();
        for i in 0..400 {
            let c = tokio::time::timeout(Duration::from_millis(500), tokio::net::TcpStream::connect(addr)).await;
            match c {
                Ok(Ok(s)) => open.push(s),
                other => panic!("connection {i} was not queued: {other:?}"),
            }
        }
        assert_eq!(open.len(), 400);
    }
}
