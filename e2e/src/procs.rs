//! The real binaries as processes: start on loopback ports, capture their logs into a timeline,
//! kill -9, terminate (SIGTERM), freeze (SIGSTOP) and thaw (SIGCONT), and restart.

use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Log tags that make a line part of the timeline.
pub const TIMELINE_TAGS: &[&str] = &["[CATCHUP]", "[DRAIN]", "[BROADCAST]", "[RELEASE]", "[NODE]", "[GATEWAY]", "[HARNESS]", "[SNAPSHOT]", "[STANDBY]"];

/// One timeline line.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Since the timeline started.
    pub at: Duration,
    /// `ws-1`, `gateway`, `harness`, ...
    pub source: String,
    pub text: String,
}

/// Every log line of every process, and the timeline of lifecycle lines.
pub struct Timeline {
    pub start: Instant,
    entries: Mutex<Vec<Entry>>,
    logs: Mutex<Vec<(String, String)>>,
    /// Print timeline lines as they arrive.
    pub echo: bool,
}

impl Timeline {
    /// A timeline starting now.
    pub fn new(echo: bool) -> Arc<Self> {
        Arc::new(Self { start: Instant::now(), entries: Mutex::new(Vec::new()), logs: Mutex::new(Vec::new()), echo })
    }

    /// Adds a harness line (a phase of the scenario).
    pub fn mark(&self, text: impl Into<String>) {
        self.push("harness", format!("[HARNESS] {}", text.into()));
    }

    /// Adds `text` from `source` to the timeline.
    pub fn push(&self, source: &str, text: String) {
        let e = Entry { at: self.start.elapsed(), source: source.into(), text };
        if self.echo {
            println!("{:>7.2}s {:<10} {}", e.at.as_secs_f64(), e.source, e.text);
        }
        self.entries.lock().expect("timeline lock").push(e);
    }

    fn log_line(&self, source: &str, line: &str) {
        self.logs.lock().expect("logs lock").push((source.to_owned(), line.to_owned()));
        if let Some(i) = TIMELINE_TAGS.iter().filter_map(|t| line.find(t)).min() {
            self.push(source, line[i..].to_owned());
        } else if line.contains(" WARN ") || line.contains(" ERROR ") {
            self.push(source, line.split_once("Z ").map_or(line, |(_, rest)| rest).trim().to_owned());
        }
    }

    /// Timeline entries so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().expect("timeline lock").clone()
    }

    /// Log lines of `source` containing `needle`.
    pub fn grep(&self, source: &str, needle: &str) -> Vec<String> {
        self.logs
            .lock()
            .expect("logs lock")
            .iter()
            .filter(|(s, l)| s == source && l.contains(needle))
            .map(|(_, l)| l.clone())
            .collect()
    }

    /// Every captured log line of `source`.
    pub fn logs_of(&self, source: &str) -> Vec<String> {
        self.logs.lock().expect("logs lock").iter().filter(|(s, _)| s == source).map(|(_, l)| l.clone()).collect()
    }
}

/// Where the fleet's binaries are: `FLEET_BIN_DIR`, else next to this executable (tests run from
/// `target/<profile>/deps`, the demo from `target/<profile>`).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FLEET_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("current exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// The fleet's binaries, built when the harness runs under cargo (`cargo run`, `cargo test`):
/// `cargo build --workspace --bins` in the harness's own profile, once per process (a no-op when
/// they are up to date). With `FLEET_BIN_DIR` set, nothing is built.
///
/// # Errors
/// When the build fails, or a binary is missing and there is no cargo to build it.
pub fn ensure_binaries() -> anyhow::Result<()> {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            if std::env::var_os("FLEET_BIN_DIR").is_some() {
                return Ok(());
            }
            let Some(cargo) = std::env::var_os("CARGO") else { return Ok(()) };
            let dir = bin_dir();
            let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug").to_owned();
            let manifest = repo_root().join("Cargo.toml");
            let mut cmd = std::process::Command::new(cargo);
            // The whole workspace, as the test command builds it: the same features, so nothing is
            // built twice...
            cmd.args(["build", "--workspace", "--bins", "--manifest-path"]).arg(&manifest);
            // ...and without the variables `cargo run` / `cargo test` set for the harness itself
            // (CARGO_PKG_NAME=e2e, CARGO_MANIFEST_DIR, ...): build scripts that watch them (ring's
            // does, with `rerun-if-env-changed`) would see them differ from a plain build's and
            // rebuild, about 2 minutes here, on every run.
            for (key, _) in std::env::vars_os() {
                let Some(k) = key.to_str() else { continue };
                if k.starts_with("CARGO_PKG_")
                    || k.starts_with("CARGO_MANIFEST_")
                    || k.starts_with("CARGO_BIN_")
                    || matches!(k, "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "CARGO_RUSTC_CURRENT_DIR")
                {
                    cmd.env_remove(k);
                }
            }
            match profile.as_str() {
                "debug" => {}
                "release" => {
                    cmd.arg("--release");
                }
                other => {
                    cmd.args(["--profile", other]);
                }
            }
            println!("[harness] building the fleet's binaries ({profile} profile); a first build takes a few minutes");
            let status = cmd.status().map_err(|e| format!("run cargo: {e}"))?;
            if status.success() { Ok(()) } else { Err(format!("cargo build of the fleet's binaries failed ({status})")) }
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// One service process.
pub struct Service {
    pub name: String,
    pub bin: String,
    pub port: u16,
    pub env: BTreeMap<String, String>,
    child: Option<Child>,
    timeline: Arc<Timeline>,
    /// How many times it was started.
    pub starts: u32,
    /// The loopback port of its admin listener, when it has one (no `ADMIN_TOKEN`).
    pub admin_port: Option<u16>,
}

impl Service {
    /// A service named `name` running binary `bin` on `port` with `env` (not started).
    pub fn new(name: &str, bin: &str, port: u16, env: BTreeMap<String, String>, timeline: Arc<Timeline>) -> Self {
        Self { name: name.into(), bin: bin.into(), port, env, child: None, timeline, starts: 0, admin_port: None }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The pid while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Starts the process (its logs go to the timeline).
    ///
    /// # Errors
    /// When the binary is missing or cannot be spawned.
    pub fn start(&mut self) -> anyhow::Result<()> {
        ensure_binaries()?;
        let path = bin_dir().join(&self.bin);
        if !path.exists() {
            bail!("{} not found: build the binaries first (cargo build --release --workspace --bins)", path.display());
        }
        let mut cmd = Command::new(&path);
        cmd.envs(&self.env)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", std::env::var("FLEET_LOG").unwrap_or_else(|_| "info,rdkafka=warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(cmd.as_std_mut());
        let mut child = cmd.spawn().with_context(|| format!("spawn {}", path.display()))?;
        for stream in [child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
                       child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)]
            .into_iter()
            .flatten()
        {
            let tl = self.timeline.clone();
            let name = self.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tl.log_line(&name, &line);
                }
            });
        }
        self.starts += 1;
        self.timeline.mark(format!("started {} (pid {}) on port {}", self.name, child.id().unwrap_or(0), self.port));
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL, and wait for the process to be gone.
    pub async fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id().unwrap_or(0);
            let _ = c.start_kill();
            let _ = c.wait().await;
            self.timeline.mark(format!("kill -9 {} (pid {pid})", self.name));
        }
    }

    /// SIGSTOP: the process stays, with its sockets open, and does nothing until [`Service::thaw`].
    pub fn freeze(&self) {
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGSTOP);
            self.timeline.mark(format!("SIGSTOP {} (pid {pid})", self.name));
        }
    }

    /// SIGCONT after [`Service::freeze`].
    pub fn thaw(&self) {
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGCONT);
            self.timeline.mark(format!("SIGCONT {} (pid {pid})", self.name));
        }
    }

    /// SIGTERM, and wait up to `timeout` for a clean exit (then SIGKILL). Returns how the process
    /// ended: `Some(status)` when it exited within `timeout` (`None` when it had to be killed or
    /// was not running).
    pub async fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        if let Some(pid) = c.id() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
            self.timeline.mark(format!("SIGTERM {} (pid {pid})", self.name));
        }
        match tokio::time::timeout(timeout, c.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = c.start_kill();
                let _ = c.wait().await;
                None
            }
        }
    }

    /// Waits up to `timeout` for the process to exit by itself: how it ended (`None`: still
    /// running then, or not started).
    pub async fn exited_within(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let c = self.child.as_mut()?;
        let status = tokio::time::timeout(timeout, c.wait()).await.ok()?.ok()?;
        self.child = None;
        self.timeline.mark(format!("{} exited by itself: {status}", self.name));
        Some(status)
    }

    /// Whether the process is running.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

/// Makes the child get SIGTERM when the harness dies, however it dies (SIGKILL included), so no
/// fleet process outlives a killed test or demo (Linux `PR_SET_PDEATHSIG`). The signal follows the
/// thread that spawned the child; the harness spawns from runtime threads that live as long as it.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    die_with_parent_by(cmd, nix::sys::signal::Signal::SIGTERM);
}

/// [`die_with_parent`] with another signal: the Kafka cluster's nodes get SIGKILL, because a node
/// whose peers are gone too waits up to 5 minutes for a controller to approve its controlled
/// shutdown after a SIGTERM. As there, the signal fires when the *thread* that spawned the child
/// ends, not the process.
pub fn die_with_parent_by(cmd: &mut std::process::Command, signal: nix::sys::signal::Signal) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only makes one
        // async-signal-safe system call (prctl).
        unsafe {
            cmd.pre_exec(move || nix::sys::prctl::set_pdeathsig(signal).map_err(std::io::Error::from));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (cmd, signal);
}

/// Waits up to `timeout` until the service at `url` says `"ready": true` in its `/health` (a
/// publisher that accepts writes, a node that serves).
///
/// # Errors
/// When the deadline passes.
pub async fn wait_ready(http: &reqwest::Client, url: &str, what: &str, timeout: Duration) -> anyhow::Result<()> {
    eventually(what, timeout, || async {
        let h = get_json(http, &format!("{url}/health")).await?;
        Ok(h["ready"].as_bool().unwrap_or(false).then_some(()))
    })
    .await
}

/// Waits until `check` returns `Some`, at most `timeout`, printing progress every 5 s.
///
/// # Errors
/// When the deadline passes; the error names what was awaited and the last state seen.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut last_state = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(state) => last_state = state,
        }
        if started.elapsed() > timeout {
            bail!("timed out after {:?} waiting for: {what} (last seen: {last_state})", timeout);
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            println!("[harness] still waiting for: {what} ({} s){}", started.elapsed().as_secs(),
                if last_state.is_empty() { String::new() } else { format!(" — {last_state}") });
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// GET `url` as JSON.
///
/// # Errors
/// When the request fails or the body is not JSON.
pub async fn get_json(http: &reqwest::Client, url: &str) -> Result<serde_json::Value, String> {
    let resp = http.get(url).timeout(Duration::from_secs(3)).send().await.map_err(|e| e.to_string())?;
    resp.json().await.map_err(|e| e.to_string())
}

/// The repository root (where `Cargo.toml` of the workspace is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("e2e is one level below the root").to_path_buf()
}
