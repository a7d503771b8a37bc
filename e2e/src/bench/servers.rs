//! The system under test, started fresh for a measure: our fleet (one ws-node, the gateway and the
//! publisher) or a peer, each on its own new topic of the same broker.

use super::peers::{Peer, PeerServer};
use super::subs::System;
use crate::fleet::{Fleet, FleetSpec};
use crate::procs::Timeline;

/// Partitions of every benchmark topic (the fleet's default).
pub const PARTITIONS: u32 = 6;

enum Inner {
    Fleet(Box<Fleet>),
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
    /// Starts `system` against the context's broker on a fresh topic (the fleet with
    /// `ctx.canvas_side`-pixel square canvases) and waits until it serves.
    ///
    /// # Errors
    /// When it does not come up.
    pub async fn start(system: System, ctx: &super::Ctx) -> anyhow::Result<Self> {
        let broker = &ctx.broker;
        println!("[bench]   starting {}", system.label());
        match system {
            System::Fleet => {
                let spec = FleetSpec { nodes: 1, partitions: PARTITIONS, width: ctx.canvas_side, height: ctx.canvas_side, ..FleetSpec::default() };
                let fleet = Fleet::start(broker, spec, Timeline::new(false)).await?;
                let pid = fleet.nodes[0].pid().unwrap_or(0);
                Ok(Self {
                    system,
                    topic: fleet.topic.clone(),
                    pid,
                    ws_base: format!("ws://127.0.0.1:{}", fleet.nodes[0].port),
                    gateway: Some((fleet.gateway_ws(), fleet.gateway.pid().unwrap_or(0))),
                    publisher: Some(fleet.publisher.url()),
                    publisher_pid: fleet.publisher.pid(),
                    inner: Inner::Fleet(Box::new(fleet)),
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
            Inner::Fleet(mut f) => f.stop().await,
            Inner::Peer(p) => p.stop().await,
        }
    }
}
