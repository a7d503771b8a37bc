//! The live pages in a real browser: headless Chromium (Debian's, driven by playwright-core from
//! `web/test/browser/pages.mjs`) opens `/` on two canvases (`/?canvas=`), on a channel of each
//! other model (`/?channel=scores:final` json, `chat:lobby` stream, `prices:eur` latest; the
//! fleet reads their namespaces from a fleet.toml) and `/fleet` while this harness runs kill -9 →
//! takeover → recovery → failback under steady publishing to all of them. Then: each page's canvas
//! ends equal to the publisher's (version and hash), the page of the killed node's canvas passed
//! through `backoff` and came back to `stable`; each channel page shows the publisher's model,
//! version and state hash (`GET /api/channels/{id}`), the json and latest pages' trees are the
//! publisher's state pretty-printed, and the stream page's list holds the last 200 publications
//! this harness made, in order; `/fleet` showed ws-1 DOWN, then UP, then HEALTHY, and its charts
//! drew the kill: a DOWN band for ws-1, and a partition of ws-1 owned by ws-2, then by ws-1 again.
//! Screenshots of every page and the drawn `/fleet` page (`fleet.html`) are saved in
//! `target/browser-artifacts/`.
//!
//! Needs Node.js, `npm ci` in `web/` and Chromium at `/usr/bin/chromium` (or `CHROMIUM_PATH`):
//! `scripts/setup-web.sh` installs them; this test fails (never skips) without them.

use e2e::broker::{repo_root, Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::Timeline;
use e2e::scenario::{pick_canvases, ModelLoad, MODEL_CHANNELS, MODEL_FLEET_TOML};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The publications a stream page's list keeps (`STREAM_LIMIT` of web/pages/app.js).
const STREAM_LIMIT: usize = 200;

fn node<'a>(f: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    f["nodes"].as_array().and_then(|n| n.iter().find(|n| n["id"] == id)).unwrap_or(&serde_json::Value::Null)
}

/// Whether `want` appears in `seq` in this order (not necessarily adjacent).
fn in_order(seq: &[String], want: &[&str]) -> bool {
    let mut i = 0;
    for s in seq {
        if i < want.len() && s == want[i] {
            i += 1;
        }
    }
    i == want.len()
}

async fn pages_follow_the_fleet() {
    let root = repo_root();
    let chromium = std::env::var("CHROMIUM_PATH").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(std::path::Path::new(&chromium).exists(), "Chromium not found at {chromium}: run scripts/setup-web.sh");
    assert!(root.join("web/node_modules/playwright-core").exists(), "playwright-core missing: run scripts/setup-web.sh");
    let artifacts = root.join("target/browser-artifacts");
    let _ = std::fs::remove_dir_all(&artifacts);

    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    // The namespaces of the channel pages (the default namespace stays the canvases' pixels).
    let toml = tempfile::Builder::new().prefix("fleet-").suffix(".toml").tempfile().expect("a fleet.toml");
    std::fs::write(toml.path(), MODEL_FLEET_TOML).expect("write fleet.toml");
    let spec = FleetSpec { env: vec![("FLEET_CONFIG".into(), toml.path().display().to_string())], ..FleetSpec::default() };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let channels: Vec<String> = MODEL_CHANNELS.iter().map(|c| (*c).to_owned()).collect();
    let state = fleet.fleet_state().await.unwrap();
    // One canvas on each node: the kill moves the first.
    let canvases = pick_canvases(&state, fleet.spec.partitions, 2, &["ws-1".to_owned(), "ws-2".to_owned()]);
    let load = Load::start(&fleet.publisher.url(), canvases.clone(), 20.0, fleet.spec.width, fleet.spec.height);

    let mut driver = tokio::process::Command::new("node")
        .arg(root.join("web/test/browser/pages.mjs"))
        .args(["--gateway", &fleet.gateway.url(), "--canvases", &canvases.join(","), "--channels", &channels.join(","), "--out"])
        .arg(&artifacts)
        .args(["--chromium", &chromium])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("run node web/test/browser/pages.mjs");
    let mut stdin = driver.stdin.take().unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(120), lines.next_line()).await.expect("the pages within 120 s");
    assert_eq!(ready.unwrap().as_deref(), Some("READY"), "the pages did not come up");
    tl.mark("browser pages are up and stable");
    // The channel pages see every publication from the first on (they hold version 0).
    let model_load = ModelLoad::recording(&fleet.publisher.url(), channels.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;

    fleet.nodes[0].kill9().await;
    fleet
        .wait_fleet("ws-2 to own every partition", Duration::from_secs(60), |f| {
            let n = node(f, "ws-2")["assigned_partitions"].as_array().map_or(0, |a| a.len());
            (n == 6).then_some(()).ok_or(format!("ws-2 owns {n}"))
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restart_at = shared::event::now_ms();
    fleet.nodes[0].start().unwrap();
    fleet
        .wait_fleet("the failback to ws-1 to complete", Duration::from_secs(120), |f| {
            let done = f["decisions"].as_array().into_iter().flatten().any(|d| {
                d["node"] == "ws-1" && d["action"] == "failback_completed" && d["at_ms"].as_u64().unwrap_or(0) > restart_at
            });
            done.then_some(()).ok_or(format!("ws-1 {}", node(f, "ws-1")["state"]))
        })
        .await
        .unwrap();
    // The json channel is reset: its page follows it into the next epoch (checked at the end
    // against the publisher's state, version and hash).
    let epoch = e2e::scenario::reset_channel(&fleet, "scores:final").await.expect("reset scores:final");
    tl.mark(format!("reset scores:final: epoch {epoch}"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The stream page's list is bounded at 200: publish past it on each channel.
    let enough = STREAM_LIMIT as u64 + 50;
    let by = std::time::Instant::now() + Duration::from_secs(60);
    while model_load.accepted() < enough * channels.len() as u64 && std::time::Instant::now() < by {
        tl.mark(format!("waiting for {} publications to the channels ({} so far)", enough * channels.len() as u64, model_load.accepted()));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    load.stop().await;
    let published = model_load.published().await;
    let mut truth = serde_json::Map::new();
    for c in &canvases {
        let (version, hash) = fleet.truth(c).await.unwrap();
        truth.insert(c.clone(), serde_json::json!({"version": version, "hash": hash}));
    }
    let mut of_channels = serde_json::Map::new();
    for c in &channels {
        let mut mine: Vec<_> = published.iter().filter(|p| &p.channel == c).map(|p| (p.version, p.data.clone())).collect();
        mine.sort_by_key(|(v, _)| *v);
        of_channels.insert(c.clone(), serde_json::json!({ "published": mine }));
    }
    let finish = serde_json::json!({ "canvases": truth, "channels": of_channels });
    stdin.write_all(format!("FINISH {finish}\n").as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let result_line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
        .await
        .expect("the pages' result within 120 s")
        .unwrap()
        .unwrap_or_default();
    let status = driver.wait().await.unwrap();
    fleet.stop().await;
    drop(toml);
    let result: serde_json::Value = serde_json::from_str(result_line.strip_prefix("RESULT ").expect("a RESULT line")).unwrap();
    println!("browser result: {}", serde_json::to_string_pretty(&result).unwrap());

    assert!(status.success(), "the pages' checks failed: {}", result["failures"]);
    let seq = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
    };
    let killed = &result["pages"][&canvases[0]];
    assert!(
        in_order(&seq(&killed["states"]), &["stable", "backoff", "stable"]),
        "the killed node's canvas page went stable → backoff → stable: {}",
        killed["states"]
    );
    for c in &canvases {
        let page = &result["pages"][c];
        assert_eq!(page["hash"], page["publisher"]["hash"], "{c}: the page's canvas is the publisher's");
        assert_eq!(seq(&page["states"]).last().map(String::as_str), Some("stable"));
    }
    for c in &channels {
        let page = &result["channels"][c];
        assert_eq!(page["hash"], page["publisher"]["hash"], "{c}: the page's state hash is GET /api/channels/{c}'s");
        assert_eq!(page["model"], page["publisher"]["model"], "{c}: the page names the channel's model");
        assert_eq!(seq(&page["states"]).last().map(String::as_str), Some("stable"));
    }
    let stream = &result["channels"]["chat:lobby"];
    assert_eq!(stream["streamLength"].as_u64(), Some(STREAM_LIMIT as u64), "the stream page keeps its last {STREAM_LIMIT} publications: {stream}");
    let ws1 = seq(&result["fleet"]["ws-1"]);
    assert!(in_order(&ws1, &["HEALTHY", "DOWN", "UP", "HEALTHY"]), "/fleet showed ws-1 DOWN, UP, HEALTHY: {ws1:?}");
    let charts = &result["charts"];
    assert!(charts["downBands"]["ws-1"].as_u64().unwrap_or(0) >= 1, "the sessions chart shades ws-1's DOWN stretch: {charts}");
    assert!(charts["downBands"]["ws-2"].is_null(), "ws-2 was never DOWN once it was up (start-up bands are startBands): {charts}");
    let moved_and_back = charts["owners"]
        .as_object()
        .into_iter()
        .flatten()
        .any(|(_, owners)| in_order(&seq(owners), &["ws-1", "ws-2", "ws-1"]));
    assert!(moved_and_back, "the ownership chart shows a partition of ws-1 taken over by ws-2 and failed back: {charts}");
    assert_eq!(seq(&charts["sessionLines"]), ["ws-1", "ws-2"], "one sessions line per node: {charts}");
    let channel_shots = channels.iter().map(|c| format!("channel-{}.png", c.replace(':', "-")));
    for shot in ["fleet.html".to_owned(), "fleet.png".to_owned(), format!("canvas-{}.png", canvases[0]), format!("canvas-{}.png", canvases[1])].into_iter().chain(channel_shots) {
        let path = artifacts.join(&shot);
        assert!(std::fs::metadata(&path).map(|m| m.len() > 1000).unwrap_or(false), "screenshot {} saved", path.display());
    }
}

#[test]
fn pages_follow_kill_recovery_and_failback_in_a_real_browser() {
    crate::block_on(pages_follow_the_fleet());
}
