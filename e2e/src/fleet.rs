//! The whole fleet as processes: publisher, ws-1..ws-n, gateway, on loopback ports.

use crate::broker::{free_port, Broker};
use crate::procs::{eventually, get_json, wait_ready, Service, Timeline};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Timings and sizes of a fleet.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub nodes: usize,
    pub partitions: u32,
    /// Gateway poll interval, ms.
    pub poll_interval_ms: u64,
    pub up_threshold: u32,
    /// Drain grace periods (failback, revocation), ms.
    pub grace_ms: u64,
    pub width: u32,
    pub height: u32,
    /// Publisher processes the gateway knows (`PUBLISHER_URL` lists them all); only the first is
    /// started with the fleet, the others by [`Fleet::start_publisher`].
    pub publishers: usize,
    /// Extra environment of every publisher (e.g. `PRODUCE_TIMEOUT_MS`).
    pub publisher_env: Vec<(String, String)>,
    /// Extra environment of every node (e.g. `MAX_SESSIONS`, `MAX_CONNECTIONS`).
    pub node_env: Vec<(String, String)>,
    /// Extra environment of the gateway (e.g. `ADMISSION_QUEUE`, `ALLOWED_ORIGINS`).
    pub gateway_env: Vec<(String, String)>,
    /// Gateway replicas (they elect their leader through the broker); all are started.
    pub gateways: usize,
    /// Where the binaries are, when not the harness's own (the bench runs an earlier build).
    pub bin_dir: Option<std::path::PathBuf>,
    /// `ADMIN_TOKEN` of the nodes and the gateway ([`ADMIN_TOKEN`] by default, so every test
    /// goes the authenticated way); `None` puts the admin routes on loopback listeners
    /// (`ADMIN_LISTEN_ADDR`, and `NODE_ADMIN_URLS` for the gateway).
    pub admin_token: Option<String>,
    /// Extra environment of every service (publishers, nodes, gateway), e.g. `CLIENT_TOKEN_*`
    /// or `KAFKA_CLIENT_*`.
    pub env: Vec<(String, String)>,
}

/// The admin token the harness gives the fleet by default.
pub const ADMIN_TOKEN: &str = "e2e-admin-token";

impl Default for FleetSpec {
    fn default() -> Self {
        Self {
            nodes: 2,
            partitions: 6,
            poll_interval_ms: 500,
            up_threshold: 5,
            grace_ms: 3000,
            width: 64,
            height: 64,
            publishers: 1,
            publisher_env: Vec::new(),
            node_env: Vec::new(),
            gateway_env: Vec::new(),
            gateways: 1,
            bin_dir: None,
            admin_token: Some(ADMIN_TOKEN.to_owned()),
            env: Vec::new(),
        }
    }
}

/// A running fleet.
pub struct Fleet {
    pub spec: FleetSpec,
    pub topic: String,
    pub group: String,
    pub publisher: Service,
    /// The other publishers of [`FleetSpec::publishers`] (not started with the fleet).
    pub more_publishers: Vec<Service>,
    pub nodes: Vec<Service>,
    /// The first gateway replica (`gateway`).
    pub gateway: Service,
    /// The other replicas of [`FleetSpec::gateways`] (`gateway-2`, ...).
    pub more_gateways: Vec<Service>,
    /// The control topic of the gateways' claims and decisions.
    pub control_topic: String,
    pub timeline: Arc<Timeline>,
    pub http: reqwest::Client,
}

impl Fleet {
    /// Starts every service against `broker` with a fresh topic and consumer groups, and waits
    /// until the publisher accepts writes and every node is HEALTHY with partitions.
    ///
    /// # Errors
    /// When a process cannot start or the fleet does not come up in time.
    pub async fn start(broker: &Broker, spec: FleetSpec, timeline: Arc<Timeline>) -> anyhow::Result<Self> {
        let suffix = format!("{:08x}", rand::random::<u32>());
        let topic = format!("canvas-events-{suffix}");
        let group = format!("ws-broadcast-{suffix}");
        broker.precreate_topic(&topic, spec.partitions as i32)?;
        let control_topic = format!("fleet-control-{suffix}");
        broker.precreate_one_topic(&control_topic, 1)?;
        let common = |extra: &[(&str, String)]| -> BTreeMap<String, String> {
            let mut env: BTreeMap<String, String> = [
                ("KAFKA_BOOTSTRAP", broker.bootstrap.clone()),
                ("KAFKA_TOPIC", topic.clone()),
                ("TOPIC_PARTITIONS", spec.partitions.to_string()),
                ("CANVAS_WIDTH", spec.width.to_string()),
                ("CANVAS_HEIGHT", spec.height.to_string()),
                ("CONTROL_TOPIC", control_topic.clone()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
            env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
            env.extend(spec.env.iter().cloned());
            match &spec.admin_token {
                Some(t) => {
                    env.insert("ADMIN_TOKEN".into(), t.clone());
                }
                None => {
                    env.remove("ADMIN_TOKEN");
                }
            }
            env
        };
        let bin = |name: &str| spec.bin_dir.as_ref().map_or_else(|| name.to_owned(), |d| d.join(name).display().to_string());
        // The publishers create the topic: with every replica the broker can hold (3 on the cluster).
        let mut publishers = Vec::new();
        for i in 0..spec.publishers.max(1) {
            let port = free_port()?;
            let mut env = common(&[("LISTEN_ADDR", format!("127.0.0.1:{port}")), ("TOPIC_REPLICATION_FACTOR", broker.kind.replication_factor().to_string())]);
            env.extend(spec.publisher_env.iter().cloned());
            let name = if i == 0 { "publisher".to_owned() } else { format!("publisher-{}", i + 1) };
            // Without a token a standby's promotion route is on a loopback port of its own.
            let admin = if spec.admin_token.is_none() { Some(free_port()?) } else { None };
            if let Some(a) = admin {
                env.insert("ADMIN_LISTEN_ADDR".into(), format!("127.0.0.1:{a}"));
            }
            let mut publisher = Service::new(&name, &bin("core-publisher"), port, env, timeline.clone());
            publisher.admin_port = admin;
            publishers.push(publisher);
        }
        let publisher = publishers.remove(0);
        let more_publishers = publishers;
        let mut nodes = Vec::new();
        // Without a token each service's admin routes are on a loopback port of its own.
        let admin_port = || -> anyhow::Result<Option<u16>> { Ok(if spec.admin_token.is_none() { Some(free_port()?) } else { None }) };
        for i in 1..=spec.nodes {
            let port = free_port()?;
            let id = format!("ws-{i}");
            let admin = admin_port()?;
            let mut env = common(&[
                ("NODE_ID", id.clone()),
                ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                ("BROADCAST_GROUP", group.clone()),
                ("CATCHUP_GROUP", format!("ws-catchup-{id}-{suffix}")),
                ("REVOKE_GRACE_MS", spec.grace_ms.to_string()),
            ]);
            env.extend(spec.node_env.iter().cloned());
            // A broker with links (Broker::start_with_links): node i talks to Kafka through link i.
            if let Some(link) = broker.link_bootstrap(i - 1) {
                env.insert("KAFKA_BOOTSTRAP".into(), link);
            }
            if let Some(a) = admin {
                env.insert("ADMIN_LISTEN_ADDR".into(), format!("127.0.0.1:{a}"));
            }
            let mut node = Service::new(&id, &bin("ws-node"), port, env, timeline.clone());
            node.admin_port = admin;
            nodes.push(node);
        }
        let node_list: Vec<String> = nodes.iter().map(|n| format!("{}={}", n.name, n.url())).collect();
        let admin_list: Vec<String> = nodes.iter().filter_map(|n| Some(format!("{}=http://127.0.0.1:{}", n.name, n.admin_port?))).collect();
        let mut gateways = Vec::new();
        for i in 1..=spec.gateways.max(1) {
            let name = if i == 1 { "gateway".to_owned() } else { format!("gateway-{i}") };
            let gw_port = free_port()?;
            let gw_admin = admin_port()?;
            let mut gateway = Service::new(
                &name,
                &bin("gateway"),
                gw_port,
                common(&[
                    ("LISTEN_ADDR", format!("127.0.0.1:{gw_port}")),
                    ("GATEWAY_ID", name.clone()),
                    ("GATEWAY_GROUP", format!("fleet-gateways-{suffix}")),
                    ("TOPIC_REPLICATION_FACTOR", broker.kind.replication_factor().to_string()),
                    ("NODES", node_list.join(",")),
                    ("PUBLISHER_URL", std::iter::once(&publisher).chain(&more_publishers).map(Service::url).collect::<Vec<_>>().join(",")),
                    ("POLL_INTERVAL_MS", spec.poll_interval_ms.to_string()),
                    ("POLL_TIMEOUT_MS", (spec.poll_interval_ms * 4 / 5).max(50).to_string()),
                    ("UP_THRESHOLD", spec.up_threshold.to_string()),
                    ("FAILBACK_GRACE_MS", spec.grace_ms.to_string()),
                ])
                .into_iter()
                .chain(spec.gateway_env.iter().cloned())
                .collect(),
                timeline.clone(),
            );
            if let Some(a) = gw_admin {
                gateway.env.insert("ADMIN_LISTEN_ADDR".into(), format!("127.0.0.1:{a}"));
                gateway.env.insert("NODE_ADMIN_URLS".into(), admin_list.join(","));
                let publisher_admin: Vec<String> =
                    std::iter::once(&publisher).chain(&more_publishers).filter_map(|p| Some(format!("http://127.0.0.1:{}", p.admin_port?))).collect();
                gateway.env.insert("PUBLISHER_ADMIN_URLS".into(), publisher_admin.join(","));
                gateway.admin_port = Some(a);
            }
            gateways.push(gateway);
        }
        let gateway = gateways.remove(0);
        let more_gateways = gateways;
        let mut fleet =
            Self { spec, topic, group, publisher, more_publishers, nodes, gateway, more_gateways, control_topic, timeline, http: reqwest::Client::new() };
        fleet.publisher.start()?;
        for n in &mut fleet.nodes {
            n.start()?;
        }
        fleet.gateway.start()?;
        for g in &mut fleet.more_gateways {
            g.start()?;
        }
        wait_ready(&fleet.http, &fleet.publisher.url(), "the publisher to accept writes", Duration::from_secs(60)).await?;
        fleet.timeline.mark("publisher is ready");
        let n = fleet.nodes.len();
        fleet
            .wait_fleet("every node HEALTHY and every partition assigned", Duration::from_secs(120), move |f| {
                let nodes = f["nodes"].as_array().cloned().unwrap_or_default();
                let healthy = nodes.iter().filter(|n| n["state"] == "HEALTHY" && n["ready"] == true).count();
                let with_partitions = nodes.iter().filter(|n| !n["assigned_partitions"].as_array().is_none_or(|a| a.is_empty())).count();
                let assigned: std::collections::BTreeSet<i64> =
                    nodes.iter().flat_map(|n| n["assigned_partitions"].as_array().cloned().unwrap_or_default()).filter_map(|p| p.as_i64()).collect();
                let total = f["partition_count"].as_u64().unwrap_or(0) as usize;
                (healthy == n && with_partitions == n && assigned.len() == total)
                    .then_some(())
                    .ok_or(format!("{healthy}/{n} healthy, {with_partitions}/{n} with partitions, {}/{total} partitions assigned", assigned.len()))
            })
            .await?;
        fleet.timeline.mark("fleet is up: every node HEALTHY, every partition assigned");
        Ok(fleet)
    }

    /// `ws://127.0.0.1:<gateway port>`.
    pub fn gateway_ws(&self) -> String {
        format!("ws://127.0.0.1:{}", self.gateway.port)
    }

    /// `GET /api/fleet` of the gateway, in full: with the admin token, or without one from the
    /// gateway's loopback admin listener.
    ///
    /// # Errors
    /// When the gateway does not answer.
    pub async fn fleet_state(&self) -> Result<serde_json::Value, String> {
        self.fleet_state_of(&self.gateway).await
    }

    /// Every gateway replica, the first one first.
    pub fn gateways(&self) -> impl Iterator<Item = &Service> {
        std::iter::once(&self.gateway).chain(&self.more_gateways)
    }

    /// `GET /api/fleet` of gateway replica `gateway`, in full.
    ///
    /// # Errors
    /// When it does not answer.
    pub async fn fleet_state_of(&self, gateway: &Service) -> Result<serde_json::Value, String> {
        let url = format!("{}/api/fleet", self.admin_base(gateway));
        let resp = self.admin(self.http.get(&url)).timeout(Duration::from_secs(3)).send().await.map_err(|e| e.to_string())?;
        resp.json().await.map_err(|e| e.to_string())
    }

    /// Where `service`'s admin routes are: its loopback admin listener when the fleet has no
    /// admin token, else its own URL.
    pub fn admin_base(&self, service: &Service) -> String {
        service.admin_port.map_or_else(|| service.url(), |p| format!("http://127.0.0.1:{p}"))
    }

    /// `req` with the fleet's admin token, when it has one.
    pub fn admin(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.spec.admin_token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Waits until `pred` accepts the gateway's `/api/fleet` (it returns `Err(state)` to report
    /// what it saw).
    ///
    /// # Errors
    /// When the deadline passes.
    pub async fn wait_fleet<T>(&self, what: &str, timeout: Duration, pred: impl Fn(&serde_json::Value) -> Result<T, String>) -> anyhow::Result<T> {
        let pred = &pred;
        eventually(what, timeout, || async move {
            let f = self.fleet_state().await?;
            pred(&f).map(Some)
        })
        .await
    }

    /// [`Fleet::wait_fleet`] on gateway replica `gateway`.
    ///
    /// # Errors
    /// When the deadline passes.
    pub async fn wait_fleet_of<T>(
        &self,
        gateway: &Service,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> Result<T, String>,
    ) -> anyhow::Result<T> {
        let pred = &pred;
        eventually(what, timeout, || async move {
            let f = self.fleet_state_of(gateway).await?;
            pred(&f).map(Some)
        })
        .await
    }

    /// The node that owns `partition` according to the gateway, if any.
    pub fn owner(fleet_state: &serde_json::Value, partition: i64) -> Option<String> {
        fleet_state["nodes"].as_array()?.iter().find_map(|n| {
            n["assigned_partitions"].as_array()?.iter().any(|p| p.as_i64() == Some(partition)).then(|| n["id"].as_str().unwrap_or_default().to_owned())
        })
    }

    /// `GET /canvases/{id}` of the publisher that accepts writes (the first publisher that
    /// answers with a version: a fenced one refuses): (version, hash).
    ///
    /// # Errors
    /// When no publisher answers.
    pub async fn truth(&self, canvas: &str) -> Result<(u64, String), String> {
        let mut last = String::from("no publisher");
        for p in std::iter::once(&self.publisher).chain(&self.more_publishers) {
            match get_json(&self.http, &format!("{}/canvases/{canvas}", p.url())).await {
                Ok(v) if v["version"].is_u64() => {
                    return Ok((v["version"].as_u64().unwrap_or(0), v["hash"].as_str().unwrap_or_default().to_owned()));
                }
                Ok(v) => last = format!("{}: {v}", p.name),
                Err(e) => last = format!("{}: {e}", p.name),
            }
        }
        Err(last)
    }

    /// Starts publisher number `n` of [`FleetSpec::publishers`] (1 = the second) and waits until it
    /// accepts writes (it fences the others).
    ///
    /// # Errors
    /// When it cannot start or does not become ready within 60 s.
    pub async fn start_publisher(&mut self, n: usize) -> anyhow::Result<()> {
        let p = self.more_publishers.get_mut(n - 1).ok_or_else(|| anyhow::anyhow!("no publisher number {n}"))?;
        p.start()?;
        let (url, name) = (p.url(), p.name.clone());
        wait_ready(&self.http, &url, &format!("{name} to accept writes"), Duration::from_secs(60)).await
    }

    /// Stops every process (SIGTERM, then SIGKILL).
    pub async fn stop(&mut self) {
        self.gateway.terminate(Duration::from_secs(5)).await;
        for g in &mut self.more_gateways {
            g.terminate(Duration::from_secs(5)).await;
        }
        for n in &mut self.nodes {
            n.terminate(Duration::from_secs(10)).await;
        }
        self.publisher.terminate(Duration::from_secs(5)).await;
        for p in &mut self.more_publishers {
            p.terminate(Duration::from_secs(5)).await;
        }
    }
}
