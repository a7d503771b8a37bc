//! The system under test, started fresh for a measure: our fleet (one ws-node, the gateway and the
//! publisher) or a peer, each on its own new topic of the same broker.

use super::peers::{Peer, PeerServer};
use super::subs::System;
use crate::fleet::{Fleet, FleetSpec};
use crate::procs::Timeline;

/// Partitions of every benchmark topic (the fleet's default).
pub const PARTITIONS: u32 = 6;

enum Inner {
    /// The fleet, and the `fleet.toml` its binaries read (removed when dropped).
    Fleet(Box<Fleet>, tempfile::TempPath),
    Peer(PeerServer),
}

/// A running system under test.
pub struct Server {
    pub system: System,
    pub topic: String,
    /// The WebSocket server's pid: the ws-node, Centrifugo, or the Node.js process.
    pub pid: u32,
    /// Where subscribers connect directly (`ws://127.0.0.1:port`, plus the peer's path).
    pub ws_base: String,
    /// The gateway (fleet only): its `ws://` base and pid.
    pub gateway: Option<(String, u32)>,
    /// The publisher's `http://` base and pid (fleet only).
    pub publisher: Option<String>,
    pub publisher_pid: Option<u32>,
    inner: Inner,
}

impl Server {
    /// Starts `system` against the context's broker on a fresh topic and waits until it serves.
    /// The fleet's binaries read the bench's `fleet.toml` ([`super::payload::fleet_toml`]: canvases
    /// of `ctx.canvas_side` pixels, and the `stream` namespace of the `stream` payloads), and its
    /// node must show that file's namespaces fingerprint, the one the bench's records carry.
    ///
    /// # Errors
    /// When it does not come up, or its node reads other namespaces.
    pub async fn start(system: System, ctx: &super::Ctx) -> anyhow::Result<Self> {
        let broker = &ctx.broker;
        println!("[bench]   starting {}", system.label());
        match system {
            System::Fleet => {
                let toml = tempfile::Builder::new().prefix("bench-fleet-").suffix(".toml").tempfile()?.into_temp_path();
                std::fs::write(&toml, super::payload::fleet_toml(ctx.canvas_side))?;
                let env = vec![("FLEET_CONFIG".to_owned(), toml.display().to_string())];
                let spec = FleetSpec { nodes: 1, partitions: PARTITIONS, width: ctx.canvas_side, height: ctx.canvas_side, env, ..FleetSpec::default() };
                let mut fleet = Fleet::start(broker, spec, Timeline::new(false)).await?;
                let want = super::payload::fingerprint(ctx.canvas_side);
                let health: serde_json::Value = fleet.http.get(format!("{}/health", fleet.nodes[0].url())).send().await?.json().await?;
                if health["namespaces_fingerprint"].as_str() != Some(want.as_str()) {
                    fleet.stop().await;
                    anyhow::bail!("the ws-node reads namespaces {} (GET /health), not the bench's {want}: it did not read {}", health["namespaces_fingerprint"], toml.display());
                }
                let pid = fleet.nodes[0].pid().unwrap_or(0);
                Ok(Self {
                    system,
                    topic: fleet.topic.clone(),
                    pid,
                    ws_base: format!("ws://127.0.0.1:{}", fleet.nodes[0].port),
                    gateway: Some((fleet.gateway_ws(), fleet.gateway.pid().unwrap_or(0))),
                    publisher: Some(fleet.publisher.url()),
                    publisher_pid: fleet.publisher.pid(),
                    inner: Inner::Fleet(Box::new(fleet), toml),
                })
            }
            System::Peer(peer) => {
                let topic = format!("bench-{}-{:08x}", match peer { Peer::Centrifugo => "centrifugo", Peer::SocketIo => "socketio" }, rand::random::<u32>());
                super::kafka::create_topic(&broker.bootstrap, &topic, PARTITIONS as i32).await?;
                let server = PeerServer::start(peer, &broker.bootstrap, &topic).await?;
                Ok(Self { system, topic, pid: server.pid(), ws_base: server.ws_url(), gateway: None, publisher: None, publisher_pid: None, inner: Inner::Peer(server) })
            }
        }
    }

    /// Stops every process of the system.
    pub async fn stop(self) {
        match self.inner {
            Inner::Fleet(mut f, _toml) => f.stop().await,
            Inner::Peer(p) => p.stop().await,
        }
    }
}
