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
}

/// The whole `main` of a service: reports configuration problems (exit 2), or with
/// `--check-config` prints the configuration; else sets up logging and the shutdown signal, binds
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
    let problems = config.problems();
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
    run_main(async move {
        crate::telemetry::init();
        let shutdown = signal_token();
        let listener = tokio::net::TcpListener::bind(config.listen()).await?;
        run(config, listener, shutdown).await
    })
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
