//! The node harness of `tests/node.rs`: a node in-process against librdkafka's mock cluster,
//! its producer, and the WebSocket frame helpers.

use futures::StreamExt;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use shared::partitioner::partition_for;
use shared::protocol::ServerMessage;
use shared::{ChannelId, Color, PixelEvent};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use ws_node::config::Config;

pub(crate) const PARTITIONS: i32 = 3;

/// Fields drop in order: clients first, the mock cluster last.
pub(crate) struct Harness {
    pub(crate) producer: FutureProducer<shared::kafka::FleetContext>,
    pub(crate) topic: String,
    pub(crate) url: String,
    pub(crate) ws: String,
    pub(crate) shutdown: CancellationToken,
    pub(crate) task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub(crate) http: reqwest::Client,
    pub(crate) versions: std::collections::HashMap<String, u64>,
    /// The node's configuration, for a second node of the same group ([`Harness::join`]).
    pub(crate) config: Config,
    pub(crate) _cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
}

/// The admin token of the harness's nodes.
pub(crate) const ADMIN_TOKEN: &str = "node-test-admin-token";

/// An HTTP client that sends the admin token with every request.
pub(crate) fn admin_client() -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert(reqwest::header::AUTHORIZATION, format!("Bearer {ADMIN_TOKEN}").parse().unwrap());
    reqwest::Client::builder().default_headers(h).build().unwrap()
}

impl Harness {
    pub(crate) async fn start(tune: impl FnOnce(&mut Config)) -> Self {
        shared::telemetry::init();
        let cluster = MockCluster::new(1).expect("mock cluster");
        let topic = format!("t-{:08x}", rand_u32());
        cluster.create_topic(&topic, PARTITIONS, 1).expect("topic");
        let bootstrap = cluster.bootstrap_servers();
        let producer: FutureProducer<shared::kafka::FleetContext> = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create_with_context(shared::kafka::FleetContext::default())
            .expect("producer");
        let mut config = Config::for_node("ws-test", &bootstrap);
        config.topic = topic.clone();
        config.broadcast_group = format!("g-{topic}");
        // The admin routes are then on the node's own listener, behind the token this harness's
        // client sends with every request.
        config.admin_token = Some(ADMIN_TOKEN.into());
        tune(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(ws_node::run(config.clone(), listener, shutdown.clone()));
        Self {
            producer,
            topic,
            url: format!("http://{addr}"),
            ws: format!("ws://{addr}"),
            shutdown,
            task: Some(task),
            http: admin_client(),
            versions: Default::default(),
            config,
            _cluster: cluster,
        }
    }

    /// Stops the node (drain, leave the group) before the mock cluster goes away.
    pub(crate) async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }

    /// Starts a second node `id` in this node's broadcast group (same topic and cluster), and
    /// recovers it: it joins the group and takes some partitions over. Stopped when the token is
    /// cancelled (the harness's shutdown cancels it too).
    pub(crate) async fn join(&self, id: &str) -> String {
        let mut config = self.config.clone();
        config.node_id = id.into();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(ws_node::run(config, listener, self.shutdown.child_token()));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.http.post(format!("{url}/admin/start-recovery")).json(&serde_json::json!({})).send().await {
                Ok(r) if r.status().is_success() => break,
                _ => assert!(Instant::now() < deadline, "{id} does not answer start-recovery"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        url
    }

    /// Appends the next version of `canvas` to its partition.
    pub(crate) async fn publish(&mut self, canvas: &str) -> u64 {
        let v = self.versions.entry(canvas.into()).or_default();
        *v += 1;
        let ev = PixelEvent {
            canvas: ChannelId::parse(canvas).unwrap(),
            version: *v,
            x: (*v % 64) as u32,
            y: 0,
            color: Color([1, 2, 3]),
            published_at_ms: shared::event::now_ms(),
        };
        let p = partition_for(canvas.as_bytes(), PARTITIONS as u32) as i32;
        let json = ev.to_json();
        self.producer
            .send(FutureRecord::to(&self.topic).partition(p).key(canvas).payload(&json), Duration::from_secs(5))
            .await
            .expect("produce");
        ev.version
    }

    /// Appends the next version of `channel` with `data`, as the publisher writes it (format 2,
    /// the namespaces fingerprint `fingerprint`), or with `format` as its format header.
    pub(crate) async fn publish_data(&mut self, channel: &str, data: serde_json::Value, format: &str, fingerprint: &str) -> u64 {
        use rdkafka::message::{Header, OwnedHeaders};
        let v = self.versions.entry(channel.into()).or_default();
        *v += 1;
        let p = shared::record::Publication {
            channel: ChannelId::parse(channel).unwrap(),
            version: *v,
            data: serde_json::value::to_raw_value(&data).unwrap(),
            published_at_ms: shared::event::now_ms(),
        };
        let partition = partition_for(channel.as_bytes(), PARTITIONS as u32) as i32;
        let value = shared::record::Publication::record_value(std::slice::from_ref(&p));
        let headers = OwnedHeaders::new()
            .insert(Header { key: shared::record::FORMAT_HEADER, value: Some(format) })
            .insert(Header { key: shared::record::NAMESPACES_HEADER, value: Some(fingerprint) });
        self.producer
            .send(FutureRecord::to(&self.topic).partition(partition).key(channel).payload(&value).headers(headers), Duration::from_secs(5))
            .await
            .expect("produce");
        p.version
    }

    /// Writes an op record (a reset or a delete) of `channel` as the publisher would: a reset to
    /// `resets` starts its versions again at 1.
    pub(crate) async fn publish_op(&mut self, channel: &str, op: shared::record::OpKind, resets: u64, fingerprint: &str) {
        use rdkafka::message::{Header, OwnedHeaders};
        let value = shared::record::ChannelOp { op, channel: ChannelId::parse(channel).unwrap(), resets, published_at_ms: shared::event::now_ms() }.record_value();
        self.versions.insert(channel.into(), 0);
        let partition = partition_for(channel.as_bytes(), PARTITIONS as u32) as i32;
        let headers = OwnedHeaders::new()
            .insert(Header { key: shared::record::FORMAT_HEADER, value: Some("2") })
            .insert(Header { key: shared::record::NAMESPACES_HEADER, value: Some(fingerprint) })
            .insert(Header { key: shared::record::OP_HEADER, value: Some(op.as_str()) });
        self.producer
            .send(FutureRecord::to(&self.topic).partition(partition).key(channel).payload(&value).headers(headers), Duration::from_secs(5))
            .await
            .expect("produce");
    }

    pub(crate) async fn health(&self) -> serde_json::Value {
        self.http.get(format!("{}/health", self.url)).send().await.unwrap().json().await.unwrap()
    }

    pub(crate) async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        let r = self.http.post(format!("{}{path}", self.url)).json(&body).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or_default())
    }

    pub(crate) async fn wait_health(&self, what: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let h = self.health().await;
            if pred(&h) {
                return h;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; health: {h}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Recovers the node and waits until it owns every partition.
    pub(crate) async fn recover(&self) -> serde_json::Value {
        let (status, ack) = self.post("/admin/start-recovery", serde_json::json!({})).await;
        assert_eq!(status, 202, "{ack}");
        assert_eq!(ack["outcome"], "started");
        self.wait_health("HEALTHY with every partition", |h| {
            h["state"] == "HEALTHY" && h["assigned_partitions"].as_array().map_or(0, |a| a.len()) == PARTITIONS as usize
        })
        .await
    }

    pub(crate) async fn connect(&self, canvas: &str, since: u64) -> Result<Ws, (u16, serde_json::Value, Option<String>)> {
        self.connect_with(&format!("canvas={canvas}&since={since}")).await
    }

    pub(crate) async fn connect_with(&self, query: &str) -> Result<Ws, (u16, serde_json::Value, Option<String>)> {
        match tokio_tungstenite::connect_async(format!("{}/ws?{query}", self.ws)).await {
            Ok((ws, _)) => Ok(ws),
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
                let body = resp.body().as_ref().map(|b| serde_json::from_slice(b).unwrap_or_default()).unwrap_or_default();
                Err((resp.status().as_u16(), body, retry))
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(crate) type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) fn rand_u32() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() ^ std::process::id()
}

/// The next frame after the session's `welcome` (server message or close code), within 10 s.
pub(crate) async fn next(ws: &mut Ws) -> Result<ServerMessage, Option<u16>> {
    loop {
        match next_frame(ws).await? {
            ServerMessage::Welcome { .. } => continue,
            m => return Ok(m),
        }
    }
}

/// The next frame, whatever it is.
pub(crate) async fn next_frame(ws: &mut Ws) -> Result<ServerMessage, Option<u16>> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("a frame within 10 s") {
            Some(Ok(Message::Text(t))) => return Ok(serde_json::from_str(t.as_str()).expect("a server message")),
            Some(Ok(Message::Close(f))) => return Err(f.map(|f| u16::from(f.code))),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(None),
        }
    }
}

pub(crate) fn version(m: &ServerMessage) -> u64 {
    match m {
        ServerMessage::Event(e) => e.version,
        ServerMessage::Snapshot { version, .. } => *version,
        other => panic!("not a versioned frame: {other:?}"),
    }
}

pub const NODE_SECRET: &str = "node-client-token-secret-01234567";
pub const OTHER_SECRET: &str = "other-client-token-secret-0123456";

pub fn client_token(secret: &str, canvases: &[&str], ttl_secs: u64) -> String {
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + ttl_secs;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"exp": exp, "sub": "tester", "canvases": canvases}),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}
