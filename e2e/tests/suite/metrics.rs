//! `GET /metrics` of every service through a kill, a recovery and a failback, read the way
//! Prometheus reads it, on the embedded broker.
//!
//! The fleet's real processes run with clients and steady publishing; the test scrapes the
//! publisher, both nodes and the gateway and checks that the figures move as they must: a kill -9
//! shows the node DOWN in the gateway's figures and the moved partitions' lag on the survivor; the
//! restart shows the UP streak climbing, start-recovery, and the catch-up's target and position
//! meeting; the failback shows sessions on the recovered node again. Every exposition passes
//! `promtool check metrics`, the alert rules pass `promtool check rules` and their unit tests
//! (`promtool test rules deploy/prometheus/alerts.test.yml`), and a real Prometheus
//! scraping the test fleet (the job names of `deploy/prometheus/prometheus.yml`) returns at least
//! one series for every query of the dashboard (`deploy/grafana/dashboards/fleet.json`).
//!
//! Needs Debian's `prometheus` package (`scripts/setup-prometheus.sh`, which `scripts/test.sh`
//! runs); fails, naming the script, when it is missing.

use e2e::broker::{free_port, repo_root, Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::{die_with_parent, eventually, Timeline};
use e2e::scenario::{pick_canvases, spawn_clients};
use shared::CanvasDims;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One sample of an exposition: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a classic-text-format exposition (label values here hold no `,`, `"` or `}`).
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned())))
                .collect();
            Some(Sample { name: name.to_owned(), labels, value: value.parse().ok()? })
        })
        .collect()
}

/// The samples of `name` whose labels include `with`.
fn series<'a>(samples: &'a [Sample], name: &str, with: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples.iter().filter(|s| s.name == name && with.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))).collect()
}

/// The sum of `name`'s samples whose labels include `with` (0 when none).
fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    series(samples, name, with).iter().map(|s| s.value).sum()
}

/// `Some(v)` as `eventually`'s answer, or what was seen instead.
fn until<T>(v: Option<T>, seen: impl FnOnce() -> String) -> Result<Option<T>, String> {
    v.map(Some).ok_or_else(seen)
}

/// `GET {base}/metrics` as a curl would (no `Accept`: the classic text format).
async fn scrape(http: &reqwest::Client, base: &str) -> Result<String, String> {
    let r = http.get(format!("{base}/metrics")).timeout(Duration::from_secs(3)).send().await.map_err(|e| e.to_string())?;
    if r.status() != 200 {
        return Err(format!("{base}/metrics answered {}", r.status()));
    }
    r.text().await.map_err(|e| e.to_string())
}

/// `promtool check metrics` on `text`.
fn promtool_lint(what: &str, text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to promtool");
    let out = child.wait_with_output().expect("promtool ends");
    assert!(
        out.status.success(),
        "promtool check metrics refused {what}'s exposition: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn require_prometheus() {
    for tool in ["prometheus", "promtool"] {
        let found = Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
        assert!(found, "`{tool}` is not installed: run scripts/setup-prometheus.sh (Debian's prometheus package)");
    }
}

/// The four services' `/metrics`, linted, parsed: (publisher, ws-1, ws-2, gateway); a node that
/// does not answer (killed) gives no samples.
async fn scrape_all(fleet: &Fleet) -> [Vec<Sample>; 4] {
    let urls = [fleet.publisher.url(), fleet.nodes[0].url(), fleet.nodes[1].url(), fleet.gateway.url()];
    let mut out: [Vec<Sample>; 4] = Default::default();
    for (i, url) in urls.iter().enumerate() {
        if let Ok(text) = scrape(&fleet.http, url).await {
            out[i] = parse(&text);
        }
    }
    out
}

/// Every `expr` of the dashboard's panels.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = repo_root().join("deploy/grafana/dashboards/fleet.json");
    let dash: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("the dashboard")).expect("dashboard JSON");
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((p["title"].as_str().unwrap_or_default().to_owned(), t["expr"].as_str().expect("a target's expr").to_owned()));
        }
    }
    out
}

/// A Prometheus process scraping the test fleet; killed when dropped.
struct Prometheus {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_prometheus(fleet: &Fleet) -> Prometheus {
    let dir = tempfile::tempdir().expect("a temp dir");
    let host = |url: String| url.trim_start_matches("http://").to_owned();
    let rules = repo_root().join("deploy/prometheus/alerts.yml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\nscrape_configs:\n\
         \x20 - job_name: publisher\n    static_configs:\n      - targets: [\"{p}\"]\n\
         \x20 - job_name: ws-node\n    static_configs:\n      - targets: [\"{n1}\", \"{n2}\"]\n\
         \x20 - job_name: gateway\n    static_configs:\n      - targets: [\"{g}\"]\n",
        rules = rules.display(),
        p = host(fleet.publisher.url()),
        n1 = host(fleet.nodes[0].url()),
        n2 = host(fleet.nodes[1].url()),
        g = host(fleet.gateway.url()),
    );
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config).expect("write the Prometheus config");
    let port = free_port().expect("a free port");
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config_path.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    die_with_parent(&mut cmd);
    let child = cmd.spawn().expect("start prometheus");
    Prometheus { child, url: format!("http://127.0.0.1:{port}"), _dir: dir }
}

/// `GET /api/v1/query` of `expr`: the number of series in the result.
async fn query(http: &reqwest::Client, prom: &str, expr: &str) -> Result<usize, String> {
    let url = reqwest::Url::parse_with_params(&format!("{prom}/api/v1/query"), [("query", expr)]).map_err(|e| e.to_string())?;
    let r = http.get(url).timeout(Duration::from_secs(5)).send().await.map_err(|e| e.to_string())?;
    let body: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
    if body["status"] != "success" {
        return Err(format!("{expr}: {body}"));
    }
    Ok(body["data"]["result"].as_array().map_or(0, Vec::len))
}

#[test]
fn metrics_follow_a_kill_a_recovery_and_a_failback() {
    crate::block_on(scenario());
}

async fn scenario() {
    require_prometheus();
    let rules = repo_root().join("deploy/prometheus/alerts.yml");
    let out = Command::new("promtool").args(["check", "rules"]).arg(&rules).output().expect("promtool runs");
    assert!(out.status.success(), "promtool check rules: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // The rules' own unit tests: two gateway replicas' views, one alert per node or partition.
    let cases = repo_root().join("deploy/prometheus/alerts.test.yml");
    let out = Command::new("promtool").args(["test", "rules"]).arg(&cases).output().expect("promtool runs");
    assert!(out.status.success(), "promtool test rules: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    let mut fleet = Fleet::start(&broker, FleetSpec::default(), tl.clone()).await.expect("fleet");
    let prom = start_prometheus(&fleet);
    let (parts, threshold) = (fleet.spec.partitions as usize, f64::from(fleet.spec.up_threshold));
    let state = fleet.fleet_state().await.unwrap();
    let canvases = pick_canvases(&state, fleet.spec.partitions, 4, &["ws-1".to_owned(), "ws-2".to_owned()]);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let clients = spawn_clients(&fleet, &canvases, 8, dims).await.expect("clients");
    let load = Load::start(&fleet.publisher.url(), canvases.clone(), 30.0, dims.width, dims.height);

    // ---- steady: sessions on both nodes, deliveries and publishes moving, both nodes HEALTHY.
    eventually("8 proxied sessions in the gateway's metrics", Duration::from_secs(30), || async {
        let g = parse(&scrape(&fleet.http, &fleet.gateway.url()).await?);
        let n = sum(&g, "gateway_proxied_sessions_all", &[]);
        until((n == 8.0).then_some(()), || format!("{n} proxied"))
    })
    .await
    .unwrap();
    let before = scrape_all(&fleet).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let steady = scrape_all(&fleet).await;
    let [pub0, ws1_0, ws2_0, _] = &before;
    let [pub1, ws1, ws2, gw] = &steady;
    for (node, s0, s1) in [("ws-1", ws1_0, ws1), ("ws-2", ws2_0, ws2)] {
        assert!(sum(s1, "ws_node_sessions", &[]) > 0.0, "{node} has sessions");
        assert!(sum(s1, "ws_node_deliveries_total", &[]) > sum(s0, "ws_node_deliveries_total", &[]), "{node}'s deliveries move");
        assert!(sum(s1, "ws_node_sent_bytes_total", &[]) > sum(s0, "ws_node_sent_bytes_total", &[]), "{node}'s bytes sent move");
        assert_eq!(sum(s1, "ws_node_ready", &[]), 1.0, "{node} ready");
        assert_eq!(sum(gw, "gateway_node_state", &[("node", node), ("state", "HEALTHY")]), 1.0, "{node} HEALTHY in the gateway's view");
    }
    assert_eq!(sum(ws1, "ws_node_owned_partitions", &[]) + sum(ws2, "ws_node_owned_partitions", &[]), parts as f64, "every partition owned once");
    let ok = |s: &[Sample]| sum(s, "publisher_publishes_total", &[("route", "single"), ("status", "201")]);
    assert!(ok(pub1) > ok(pub0), "accepted publishes move: {} then {}", ok(pub0), ok(pub1));
    assert!(sum(pub1, "publisher_commit_seconds_count", &[]) > 0.0, "commits are timed");
    assert!(sum(pub1, "publisher_commit_records_count", &[]) > 0.0, "records per commit are observed");
    assert_eq!(sum(pub1, "publisher_rebuilds_total", &[]), 1.0, "one rebuild at start-up");
    assert!(series(gw, "gateway_partition_owners", &[]).iter().all(|s| s.value == 1.0), "each partition has one owner");
    // The OpenMetrics form, as Prometheus asks for it.
    for url in [fleet.publisher.url(), fleet.nodes[0].url(), fleet.gateway.url()] {
        let r = fleet.http.get(format!("{url}/metrics")).header("accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5").send().await.unwrap();
        assert_eq!(r.headers()["content-type"], shared::metrics::OPENMETRICS, "{url}");
        assert!(r.text().await.unwrap().ends_with("# EOF\n"), "{url}: OpenMetrics ends with # EOF");
    }
    for (what, url) in [("publisher", fleet.publisher.url()), ("ws-1", fleet.nodes[0].url()), ("ws-2", fleet.nodes[1].url()), ("gateway", fleet.gateway.url())] {
        promtool_lint(what, &scrape(&fleet.http, &url).await.unwrap());
    }
    let moved: Vec<String> =
        series(ws1, "ws_node_partition_position", &[("role", "owned")]).iter().map(|s| s.labels["partition"].clone()).collect();
    assert!(!moved.is_empty(), "ws-1 owns partitions before the kill");
    let assigns_before = sum(ws2, "ws_node_rebalances_total", &[("kind", "assign")]);

    // ---- kill -9 ws-1: the gateway shows it DOWN, its partitions' lag shows on ws-2.
    fleet.nodes[0].kill9().await;
    tl.mark("ws-1 killed");
    let (gw, ws2) = eventually("ws-1 DOWN and ws-2 reporting the lag of every partition as owned", Duration::from_secs(60), || async {
        let g = parse(&scrape(&fleet.http, &fleet.gateway.url()).await?);
        let w = parse(&scrape(&fleet.http, &fleet.nodes[1].url()).await?);
        let down = sum(&g, "gateway_node_state", &[("node", "ws-1"), ("state", "DOWN")]);
        let owned_lag = series(&w, "ws_node_consumer_lag", &[("role", "owned")]).len();
        until((down == 1.0 && owned_lag == parts).then_some((g.clone(), w.clone())), || format!("ws-1 DOWN={down}, ws-2 owned lag series {owned_lag}/{parts}"))
    })
    .await
    .unwrap();
    for p in &moved {
        assert_eq!(series(&ws2, "ws_node_consumer_lag", &[("role", "owned"), ("partition", p)]).len(), 1, "partition {p}'s lag moved to ws-2");
    }
    assert_eq!(sum(&ws2, "ws_node_owned_partitions", &[]), parts as f64);
    assert!(sum(&ws2, "ws_node_rebalances_total", &[("kind", "assign")]) > assigns_before, "ws-2 counted the assignment");
    assert_eq!(sum(&gw, "gateway_node_up_streak", &[("node", "ws-1")]), 0.0, "a DOWN node has no UP streak");
    assert!(sum(&gw, "gateway_decisions_total", &[("kind", "transition"), ("node", "ws-1")]) >= 1.0, "the transition is counted");
    eventually("every partition served again", Duration::from_secs(60), || async {
        let g = parse(&scrape(&fleet.http, &fleet.gateway.url()).await?);
        let owners = series(&g, "gateway_partition_owners", &[]);
        let all = owners.len() == parts && owners.iter().all(|s| s.value >= 1.0);
        until(all.then_some(()), || format!("{owners:?}"))
    })
    .await
    .unwrap();
    let ws2_closes_before = sum(&ws2, "ws_node_session_closes_total", &[]);

    // ---- restart: UP streak, start-recovery, catch-up target and position meet, failback.
    fleet.nodes[0].start().unwrap();
    tl.mark("ws-1 restarted");
    let max_streak = std::cell::Cell::new(0.0f64);
    let ws1 = eventually("ws-1's catch-up position to meet its target on every partition", Duration::from_secs(90), || {
        let (max_streak, fleet) = (&max_streak, &fleet);
        async move {
            let g = parse(&scrape(&fleet.http, &fleet.gateway.url()).await?);
            max_streak.set(max_streak.get().max(sum(&g, "gateway_node_up_streak", &[("node", "ws-1")])));
            let w = parse(&scrape(&fleet.http, &fleet.nodes[0].url()).await?);
            let targets = series(&w, "ws_node_catchup_target", &[]);
            let met = targets.iter().all(|t| sum(&w, "ws_node_catchup_position", &[("partition", &t.labels["partition"])]) >= t.value);
            let done = targets.len() == parts && met && sum(&w, "ws_node_catchup_running", &[]) == 0.0;
            until(done.then_some(w.clone()), || format!("{} targets, met {met}, streak {}", targets.len(), max_streak.get()))
        }
    })
    .await
    .unwrap();
    assert_eq!(sum(&ws1, "ws_node_catchup_remaining", &[]), 0.0, "nothing left to replay");
    assert!(sum(&ws1, "ws_node_catchup_target", &[]) > 0.0, "the catch-up had records to reach");
    let max_streak = max_streak.get();
    assert!(max_streak >= threshold, "the UP streak reached the threshold ({max_streak} < {threshold})");
    let gw = parse(&scrape(&fleet.http, &fleet.gateway.url()).await.unwrap());
    assert!(sum(&gw, "gateway_decisions_total", &[("kind", "start_recovery"), ("node", "ws-1")]) >= 1.0, "start-recovery counted");
    eventually("the failback to ws-1: decided, partitions and proxied sessions back on ws-1", Duration::from_secs(120), || async {
        let g = parse(&scrape(&fleet.http, &fleet.gateway.url()).await?);
        let w = parse(&scrape(&fleet.http, &fleet.nodes[0].url()).await?);
        let done = sum(&g, "gateway_decisions_total", &[("kind", "failback_completed"), ("node", "ws-1")]);
        let owned = sum(&w, "ws_node_owned_partitions", &[]);
        let proxied = sum(&g, "gateway_proxied_sessions", &[("node", "ws-1")]);
        until((done >= 1.0 && owned > 0.0 && proxied > 0.0).then_some(()), || format!("failback_completed {done}, ws-1 owns {owned}, proxied {proxied}"))
    })
    .await
    .unwrap();
    let ws2 = parse(&scrape(&fleet.http, &fleet.nodes[1].url()).await.unwrap());
    assert!(sum(&ws2, "ws_node_session_closes_total", &[]) > ws2_closes_before, "ws-2 counted the sessions it handed back");
    assert!(sum(&ws2, "ws_node_rebalances_total", &[("kind", "revoke")]) >= 1.0, "ws-2 counted the revocation");
    for (what, url) in [("publisher", fleet.publisher.url()), ("ws-1", fleet.nodes[0].url()), ("ws-2", fleet.nodes[1].url()), ("gateway", fleet.gateway.url())] {
        promtool_lint(what, &scrape(&fleet.http, &url).await.unwrap());
    }

    // ---- a real Prometheus: every target up, the rules loaded, a series for every panel.
    let http = reqwest::Client::new();
    eventually("Prometheus to scrape the four services", Duration::from_secs(30), || async {
        let n = query(&http, &prom.url, "up == 1").await?;
        until((n == 4).then_some(()), || format!("{n}/4 targets up"))
    })
    .await
    .unwrap();
    let rules: serde_json::Value = http.get(format!("{}/api/v1/rules", prom.url)).send().await.unwrap().json().await.unwrap();
    let loaded = rules["data"]["groups"].as_array().map_or(0, |g| g.iter().map(|g| g["rules"].as_array().map_or(0, Vec::len)).sum());
    assert!(loaded >= 5, "Prometheus loaded the alert rules: {rules}");
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "the dashboard has its panels");
    for (title, expr) in &queries {
        eventually(&format!("a series for panel {title:?}: {expr}"), Duration::from_secs(30), || async {
            let n = query(&http, &prom.url, expr).await?;
            until((n > 0).then_some(()), || "no series".to_owned())
        })
        .await
        .unwrap();
    }

    load.stop().await;
    for c in clients {
        c.stop().await;
    }
    fleet.stop().await;
    drop(prom);
}
