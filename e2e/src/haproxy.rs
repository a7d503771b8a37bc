//! HAProxy in front of gateway replicas: Debian's `haproxy` (scripts/setup-haproxy.sh installs
//! it) as a process, with the configuration docker-compose.yml gives the official image
//! (deploy/haproxy/haproxy.cfg, addresses moved to loopback): HTTP mode (WebSocket upgrades become tunnels), round robin, a health
//! check on every gateway's `/readyz`, and a retry on another gateway when a connection to one is
//! refused, so a dead gateway costs a client one reconnect and a writer nothing.

use crate::broker::free_port;
use crate::procs::{die_with_parent, eventually, Timeline};
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running HAProxy; killed when dropped.
pub struct Haproxy {
    /// The loopback port clients use.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

/// The deployment's HAProxy configuration (deploy/haproxy/haproxy.cfg, what docker-compose.yml
/// gives the official image).
///
/// # Panics
/// When the file is missing from the checkout.
#[must_use]
pub fn deploy_config() -> String {
    let path = crate::broker::repo_root().join("deploy/haproxy/haproxy.cfg");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The deployment's configuration for `backends` (name, `host:port`) behind a frontend on
/// loopback `port`: its `bind` line is replaced by one on 127.0.0.1, its `server` lines by one
/// per backend (checked every 500 ms instead of every second, for the tests' short timeouts).
#[must_use]
pub fn config(port: u16, backends: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut servers_written = false;
    for line in deploy_config().lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("bind ") {
            out.push_str(&format!("  bind 127.0.0.1:{port}\n"));
        } else if trimmed.starts_with("server ") {
            if !servers_written {
                for (name, addr) in backends {
                    out.push_str(&format!("  server {name} {addr} inter 500ms\n"));
                }
                servers_written = true;
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(servers_written, "deploy/haproxy/haproxy.cfg lists no server");
    out
}

impl Haproxy {
    /// Starts HAProxy in front of `backends` (name, `host:port`) and waits until it accepts.
    ///
    /// # Errors
    /// When `haproxy` is not installed (run scripts/setup-haproxy.sh), the configuration is
    /// refused, or it does not listen within 10 s.
    pub async fn start(backends: &[(String, String)], timeline: Arc<Timeline>) -> anyhow::Result<Self> {
        let bin = binary().context("haproxy is not on the PATH: run scripts/setup-haproxy.sh")?;
        let port = free_port()?;
        let dir = tempfile::tempdir()?;
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, config(port, backends))?;
        let check = std::process::Command::new(&bin).arg("-c").arg("-q").arg("-f").arg(&cfg).output()?;
        if !check.status.success() {
            bail!("haproxy refused its configuration: {}", String::from_utf8_lossy(&check.stderr));
        }
        let mut cmd = Command::new(&bin);
        // -db: stay in the foreground, logs to stdout/stderr; -W not needed for one process.
        cmd.arg("-db").arg("-f").arg(&cfg).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        die_with_parent(cmd.as_std_mut());
        let mut child = cmd.spawn().with_context(|| format!("spawn {}", bin.display()))?;
        for stream in [child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
                       child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)]
            .into_iter()
            .flatten()
        {
            let tl = timeline.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    // HAProxy logs little at `notice`: server UP/DOWN; all of it belongs in the timeline.
                    tl.push("haproxy", line);
                }
            });
        }
        let child = std::sync::Mutex::new(child);
        eventually("haproxy to listen", Duration::from_secs(10), || async {
            if let Ok(Some(status)) = child.lock().expect("child lock").try_wait() {
                return Err(format!("haproxy exited ({status}); its log is in the timeline"));
            }
            match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                Ok(_) => Ok(Some(())),
                Err(e) => Err(e.to_string()),
            }
        })
        .await?;
        let names: Vec<&str> = backends.iter().map(|(n, _)| n.as_str()).collect();
        timeline.mark(format!("haproxy on port {port} in front of {}", names.join(", ")));
        Ok(Self { port, child: child.into_inner().expect("child lock"), _dir: dir })
    }

    /// `http://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `ws://127.0.0.1:<port>`, the base the test client appends `/ws?...` to.
    #[must_use]
    pub fn ws(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// The `haproxy` binary: on the PATH, or in /usr/sbin where Debian puts it.
#[must_use]
pub fn binary() -> Option<PathBuf> {
    which("haproxy")
}

fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(bin)).find(|p| p.is_file())
        .or_else(|| ["/usr/sbin", "/sbin"].iter().map(|d| PathBuf::from(d).join(bin)).find(|p| p.is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_lists_every_gateway_with_a_health_check() {
        let cfg = config(8080, &[("gateway".into(), "127.0.0.1:1".into()), ("gateway-2".into(), "127.0.0.1:2".into())]);
        assert!(cfg.contains("bind 127.0.0.1:8080\n"));
        assert!(!cfg.contains("bind :8000"), "the deployment's bind line is replaced");
        assert!(cfg.contains("server gateway 127.0.0.1:1 inter 500ms\n"));
        assert!(cfg.contains("server gateway-2 127.0.0.1:2 inter 500ms\n"));
        assert!(!cfg.contains("gateway:8000"), "the deployment's servers are replaced");
        // The rest is the deployment's: checks on the readiness probe, retries on another gateway.
        assert!(cfg.contains(&format!("option httpchk GET {}", shared::probe::READYZ)), "{cfg}");
        assert!(cfg.contains("default-server check"));
        assert!(cfg.contains("option redispatch"));
    }
}
