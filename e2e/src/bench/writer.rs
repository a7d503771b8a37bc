//! Publisher failover on a log it has just written (ours only): how long writes are refused after
//! a kill -9 of the publisher, what the restarted publisher's rebuild costs in memory, and whether
//! any version was lost or used twice.
//!
//! For each log size, on a fresh two-node fleet with the gateway (its own topic), the measure
//! publishes the events through the publisher in batches of [`BATCH`] (`POST /pixels`, no
//! idempotency keys) over the size's canvases, round robin, from [`CONCURRENT`] requests at a
//! time, as fast as it takes them. Right after the last batch's answer it kills the publisher
//! with SIGKILL, starts it again at once, and times kill → the first 201 of a publish sent through
//! the gateway (`POST /api/canvases/{id}/pixels`, retried every [`RETRY_EVERY`]; the gateway
//! answers 503 while the publisher is down or rebuilding). Then it takes the restarted
//! publisher's peak resident memory (`VmHWM`: the rebuild's peak) and reads the events topic back
//! (`read_committed`): per canvas the versions must be 1..=n, each once, and every version a 201
//! answered must be there.
//!
//! Then the same with a standby: a second publisher started with `PUBLISHER_STANDBY=true` follows
//! the log while it is written; the active one gets kill -9 and is not restarted, and the gateway
//! leader promotes the standby after 3 polls with no publisher ready (the bar: the poll interval
//! × 3 + 2 s). The peak RSS is the promoted standby's.
//!
//! With `--before <dir>` every figure is also taken with the binaries in `<dir>` (an earlier
//! build), each build on its own fresh fleet and topic (without the standby, which earlier builds
//! do not have).

use super::age::Build;
use super::http::LeanHttp;
use super::report::{fmt_num, Better, Row};
use super::Ctx;
use crate::audit::TopicLog;
use crate::fleet::{Fleet, FleetSpec};
use crate::procs::Timeline;
use anyhow::Context;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WHY: &str = "no HTTP publisher: the peers take events from Kafka only";

/// Events per `POST /pixels`.
const BATCH: u64 = 1_000;

/// Batch requests in flight at once.
const CONCURRENT: usize = 4;

/// Pause between two publishes of the probe after the kill.
const RETRY_EVERY: Duration = Duration::from_millis(20);

/// How long the restarted publisher may take to accept a write before the measure fails.
const LONGEST_RESTART: Duration = Duration::from_secs(300);

/// The bar of kill → first 201, ms.
const RESTART_TARGET_MS: u64 = 3_000;

/// The bar of the peak RSS after a restart, as a multiple of the smallest log's.
const RSS_TARGET_RATIO: f64 = 1.25;

/// The figures of one build on one log size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Takeover {
    pub build: Build,
    /// A standby was promoted (not the killed publisher restarted).
    pub standby: bool,
    /// The gateway's poll interval, ms.
    pub poll_ms: u64,
    /// Events published before the kill.
    pub events: u64,
    /// How long publishing them took, s.
    pub write_s: f64,
    /// kill -9 → the first 201 through the gateway, ms.
    pub restart_ms: u64,
    /// Publishes sent through the gateway until that 201 (the last one included).
    pub attempts: u64,
    /// Peak resident memory of the restarted publisher when it answered that 201, MB.
    pub peak_rss_mb: f64,
    /// What the log holds against what was answered.
    pub verdict: Verdict,
}

/// The log read back against the answers: versions lost or used twice.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// Committed events in the log.
    pub log_events: u64,
    /// Publishes answered 201.
    pub acked: u64,
    /// `(canvas, version)` missing: below a canvas's highest version in the log, or answered 201
    /// and not in the log. Each counted once.
    pub lost: u64,
    /// `(canvas, version)` in the log more than once, or answered 201 more than once: each extra
    /// occurrence counted.
    pub reused: u64,
    /// Events in the log no 201 answered (a publish whose answer was lost: not a violation).
    pub unanswered: u64,
}

/// Checks `log` (each canvas's versions in log order) against `acked` (each canvas's versions
/// answered 201, in any order).
pub fn verdict(log: &TopicLog, acked: &BTreeMap<String, Vec<u64>>) -> Verdict {
    let audit = crate::audit::check(log, &[]);
    let mut lost: BTreeSet<(&str, u64)> = audit.gaps.iter().map(|(c, v)| (c.as_str(), *v)).collect();
    let mut reused = audit.duplicated.len() as u64;
    let mut answered: BTreeSet<(&str, u64)> = BTreeSet::new();
    for (canvas, versions) in acked {
        let in_log: BTreeSet<u64> = log.get(canvas).map(|l| l.iter().map(|(v, _)| *v).collect()).unwrap_or_default();
        for v in versions {
            if !answered.insert((canvas.as_str(), *v)) {
                reused += 1;
            }
            if !in_log.contains(v) {
                lost.insert((canvas.as_str(), *v));
            }
        }
    }
    let unanswered = log
        .iter()
        .flat_map(|(c, l)| l.iter().map(move |(v, _)| (c.as_str(), *v)))
        .collect::<BTreeSet<_>>()
        .difference(&answered)
        .count() as u64;
    Verdict { log_events: audit.events as u64, acked: answered.len() as u64, lost: lost.len() as u64, reused, unanswered }
}

/// The body of batch `b` of a log of `total` events over `canvases` (event `i` of the log goes to
/// canvas `i % canvases`): `(body, canvas index of each event)`.
fn batch_body(b: u64, total: u64, canvases: &[String], side: u32) -> (String, Vec<usize>) {
    let (from, to) = (b * BATCH, ((b + 1) * BATCH).min(total));
    let mut body = String::with_capacity(64 * (to - from) as usize + 16);
    let mut which = Vec::with_capacity((to - from) as usize);
    body.push_str(r#"{"events":["#);
    for i in from..to {
        let c = (i % canvases.len() as u64) as usize;
        let cell = i / canvases.len() as u64;
        if i > from {
            body.push(',');
        }
        body.push_str(&format!(
            r##"{{"canvas":"{}","x":{},"y":{},"color":"#2060a0"}}"##,
            canvases[c],
            cell % u64::from(side),
            (cell / u64::from(side)) % u64::from(side)
        ));
        which.push(c);
    }
    body.push_str("]}");
    (body, which)
}

#[derive(serde::Deserialize)]
struct BatchAnswer {
    results: Vec<EventAnswer>,
}

#[derive(serde::Deserialize)]
struct EventAnswer {
    status: u16,
    version: Option<u64>,
}

/// Publishes `total` events over `canvases` through `lean` (the publisher) in batches of
/// [`BATCH`], [`CONCURRENT`] at a time, printing progress every few seconds. Returns each
/// canvas's versions answered 201 (by index). Fails when a batch is not answered 200 with every
/// event 201: the log would not be the one measured.
async fn write_log(lean: Arc<LeanHttp>, canvases: Arc<Vec<String>>, total: u64, side: u32) -> anyhow::Result<Vec<Vec<u64>>> {
    let batches = total.div_ceil(BATCH);
    let next = Arc::new(AtomicU64::new(0));
    let written = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let progress = {
        let written = written.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            tick.tick().await;
            loop {
                tick.tick().await;
                let n = written.load(Ordering::Relaxed);
                let s = started.elapsed().as_secs_f64();
                println!("[bench]     {n} of {total} events written in {s:.0} s ({:.0} events/s)", n as f64 / s);
            }
        })
    };
    let loops = (0..CONCURRENT).map(|_| {
        let (lean, canvases, next, written) = (lean.clone(), canvases.clone(), next.clone(), written.clone());
        async move {
            let mut acked: Vec<(usize, u64)> = Vec::new();
            loop {
                let b = next.fetch_add(1, Ordering::Relaxed);
                if b >= batches {
                    return anyhow::Ok(acked);
                }
                let (body, which) = batch_body(b, total, &canvases, side);
                let (status, answer) = lean.post_json("/pixels", body.into(), Duration::from_secs(60)).await?;
                anyhow::ensure!(status == 200, "batch {b} was answered {status}: {}", String::from_utf8_lossy(&answer));
                let answer: BatchAnswer = serde_json::from_slice(&answer).context("a batch answer")?;
                anyhow::ensure!(answer.results.len() == which.len(), "batch {b}: {} results for {} events", answer.results.len(), which.len());
                for (r, c) in answer.results.iter().zip(&which) {
                    anyhow::ensure!(r.status == 201, "batch {b}: an event was answered {}", r.status);
                    acked.push((*c, r.version.context("a 201 without a version")?));
                }
                written.fetch_add(which.len() as u64, Ordering::Relaxed);
            }
        }
    });
    let results = futures::future::join_all(loops).await;
    progress.abort();
    let mut by_canvas = vec![Vec::new(); canvases.len()];
    for r in results {
        for (c, v) in r? {
            by_canvas[c].push(v);
        }
    }
    Ok(by_canvas)
}

/// Publishes one event to `canvas` through the gateway until one is answered 201: (its version,
/// publishes sent). Every other answer (503 while the publisher is down or rebuilding, a failed
/// connection) is retried after [`RETRY_EVERY`].
async fn first_201(gateway: &LeanHttp, canvas: &str) -> anyhow::Result<(u64, u64)> {
    let path = format!("/api/canvases/{canvas}/pixels");
    let started = Instant::now();
    let mut attempts = 0;
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        attempts += 1;
        match gateway.post_json(&path, r##"{"x":0,"y":0,"color":"#a02060"}"##.into(), Duration::from_secs(10)).await {
            Ok((201, body)) => {
                let v: serde_json::Value = serde_json::from_slice(&body).context("a 201's body")?;
                let answers = seen.iter().map(|(k, n)| format!("{k} ×{n}")).collect::<Vec<_>>().join(", ");
                println!("[bench]     answers before the first 201: {}", if answers.is_empty() { "none".into() } else { answers });
                return Ok((v["version"].as_u64().context("a 201 without a version")?, attempts));
            }
            Ok((status, body)) => {
                let error = serde_json::from_slice::<serde_json::Value>(&body).ok().and_then(|v| v["error"].as_str().map(str::to_owned));
                *seen.entry(format!("{status} {}", error.unwrap_or_default())).or_default() += 1;
            }
            Err(_) => *seen.entry("no answer".into()).or_default() += 1,
        }
        anyhow::ensure!(started.elapsed() < LONGEST_RESTART, "no 201 within {LONGEST_RESTART:?}: {seen:?}");
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

async fn measure(ctx: &Ctx, events: u64, build: Build, dir: Option<&Path>, standby: bool) -> anyhow::Result<Takeover> {
    let spec = FleetSpec {
        bin_dir: dir.map(Path::to_path_buf),
        width: ctx.canvas_side,
        height: ctx.canvas_side,
        publishers: if standby { 2 } else { 1 },
        ..FleetSpec::default()
    };
    let poll_ms = spec.poll_interval_ms;
    let timeline = Timeline::new(std::env::var_os("BENCH_TIMELINE").is_some());
    let mut fleet = Fleet::start(&ctx.broker, spec, timeline.clone()).await?;
    let result = async {
        let canvases: Arc<Vec<String>> = Arc::new((0..ctx.size.writer_canvases).map(|i| format!("canvas-{i}")).collect());
        let publisher = Arc::new(LeanHttp::new(&fleet.publisher.url())?);
        let gateway = LeanHttp::new(&fleet.gateway.url())?;
        if standby {
            let p = &mut fleet.more_publishers[0];
            p.env.insert("PUBLISHER_STANDBY".into(), "true".into());
            p.start()?;
        }
        let started = Instant::now();
        let by_index = write_log(publisher, canvases.clone(), events, ctx.canvas_side).await?;
        let write_s = started.elapsed().as_secs_f64();
        let what = if standby { "kill -9 of the active publisher (a standby follows)" } else { "kill -9 of the publisher" };
        println!("[bench]     {}: {events} events written in {write_s:.1} s ({:.0} events/s); {what}", build.label(), events as f64 / write_s);

        let killed = Instant::now();
        fleet.publisher.kill9().await;
        let pid = if standby {
            fleet.more_publishers[0].pid().context("the standby runs")?
        } else {
            fleet.publisher.start()?;
            fleet.publisher.pid().context("the restarted publisher runs")?
        };
        let (version, attempts) = first_201(&gateway, &canvases[0]).await?;
        let restart_ms = killed.elapsed().as_millis() as u64;
        let peak_rss_mb = super::sys::peak_rss_bytes(pid)? as f64 / 1e6;
        let whose = if standby { "promoted standby" } else { "restarted publisher" };
        if std::env::var_os("BENCH_PUBLISHER_LOG").is_some() {
            let name = if standby { &fleet.more_publishers[0].name } else { &fleet.publisher.name };
            for line in timeline.logs_of(name) {
                println!("[bench]       {line}");
            }
        }
        println!(
            "[bench]     {}: kill -9 → first 201 through the gateway in {restart_ms} ms ({attempts} publishes); {whose}'s peak RSS {peak_rss_mb:.0} MB",
            build.label()
        );

        let mut acked: BTreeMap<String, Vec<u64>> = canvases.iter().cloned().zip(by_index).collect();
        acked.entry(canvases[0].clone()).or_default().push(version);
        let (bootstrap, topic) = (ctx.broker.bootstrap.clone(), fleet.topic.clone());
        let read = Instant::now();
        let log = tokio::task::spawn_blocking(move || crate::audit::read_topic(&bootstrap, &topic)).await??;
        let verdict = verdict(&log, &acked);
        println!(
            "[bench]     {}: the log read back in {:.1} s: {} events, {} answered 201; versions lost {}, reused {}; events no 201 answered {}",
            build.label(),
            read.elapsed().as_secs_f64(),
            verdict.log_events,
            verdict.acked,
            verdict.lost,
            verdict.reused,
            verdict.unanswered
        );
        Ok(Takeover { build, standby, poll_ms, events, write_s, restart_ms, attempts, peak_rss_mb, verdict })
    }
    .await;
    fleet.stop().await;
    result
}

/// Runs the measure for this build and, with `before`, for the binaries there; returns the rows.
pub async fn run(ctx: &Ctx, before: Option<&PathBuf>) -> Vec<Row> {
    let builds = Build::all(before);
    let mut takeovers = Vec::new();
    for events in ctx.size.writer_events.iter().copied() {
        for (build, dir) in &builds {
            println!("[bench]   writer, {}: {events} events over {} canvases, then kill -9 of the publisher", build.label(), ctx.size.writer_canvases);
            match measure(ctx, events, *build, *dir, false).await {
                Ok(t) => takeovers.push(t),
                Err(e) => ctx.error(format!("writer: {} after {events} events: {e:#}", build.label())),
            }
        }
    }
    for events in ctx.size.writer_events.iter().copied() {
        println!("[bench]   writer with a standby: {events} events over {} canvases, then kill -9 of the active publisher", ctx.size.writer_canvases);
        match measure(ctx, events, Build::After, None, true).await {
            Ok(t) => takeovers.push(t),
            Err(e) => ctx.error(format!("writer with a standby after {events} events: {e:#}")),
        }
    }
    rows(ctx, &takeovers)
}

fn rows(ctx: &Ctx, takeovers: &[Takeover]) -> Vec<Row> {
    let smallest = ctx.size.writer_events.first().copied().unwrap_or(0);
    let baseline = |t: &Takeover| takeovers.iter().find(|b| b.build == t.build && b.standby == t.standby && b.events == smallest);
    let mut out = Vec::new();
    for t in takeovers {
        let b = format!("{}{}, after {} events", t.build.label(), if t.standby { ", with a standby" } else { "" }, fmt_num(t.events as f64));
        let failover = if t.standby {
            "a second publisher with PUBLISHER_STANDBY=true following the log; kill -9 of the active one right after the last answer, not restarted \
             (the gateway leader promotes the standby after 3 polls with no publisher ready)"
        } else {
            "kill -9 of the publisher right after the last answer and restart at once"
        };
        let setup = format!(
            "two ws-nodes and the gateway, default settings; {} events over {} canvases ({}×{}) on a fresh topic, POST /pixels of {BATCH} events without \
             idempotency keys, {CONCURRENT} at a time, in {:.1} s ({:.0} events/s); {failover}; gateway poll interval {} ms; a publish through the \
             gateway every {} ms until 201 ({} sent); the log read back read_committed ({} events, {} answered 201, {} written without an answer); {}",
            fmt_num(t.events as f64),
            fmt_num(ctx.size.writer_canvases as f64),
            ctx.canvas_side,
            ctx.canvas_side,
            t.write_s,
            t.events as f64 / t.write_s.max(1e-9),
            t.poll_ms,
            RETRY_EVERY.as_millis(),
            t.attempts,
            t.verdict.log_events,
            t.verdict.acked,
            t.verdict.unanswered,
            ctx.broker_label
        );
        let mut restart =
            Row::ours_only("writer", &format!("{b}: publisher kill -9 → first 201 through the gateway, ms"), setup.clone(), Better::Lower, t.restart_ms as f64, WHY);
        if t.build == Build::After {
            let bar = if t.standby { t.poll_ms * 3 + 2_000 } else { RESTART_TARGET_MS };
            restart = restart.with_target(format!("≤ {}", fmt_num(bar as f64)), t.restart_ms <= bar);
        }
        out.push(restart);
        let whose = if t.standby { "promoted standby's peak RSS" } else { "publisher peak RSS after restart" };
        let mut rss = Row::ours_only("writer", &format!("{b}: {whose}, MB"), setup.clone(), Better::Lower, t.peak_rss_mb, WHY);
        // The memory bar is the restart's (a standby's peak is its following, not a rebuild).
        if let Some(base) = baseline(t).filter(|_| t.build == Build::After && t.events != smallest && !t.standby) {
            rss = rss.with_target(
                format!("≤ {RSS_TARGET_RATIO}× after {} events ({:.0} MB)", fmt_num(smallest as f64), RSS_TARGET_RATIO * base.peak_rss_mb),
                t.peak_rss_mb <= RSS_TARGET_RATIO * base.peak_rss_mb,
            );
        }
        out.push(rss);
        let v = &t.verdict;
        out.push(
            Row::ours_only(
                "writer",
                &format!("{b}: versions lost or reused in the log (lost {}, reused {})", v.lost, v.reused),
                setup,
                Better::Lower,
                (v.lost + v.reused) as f64,
                WHY,
            )
            .with_target("0", v.lost + v.reused == 0),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(canvas: &str, versions: &[u64]) -> TopicLog {
        [(canvas.to_owned(), versions.iter().map(|v| (*v, None)).collect())].into_iter().collect()
    }

    fn acked(canvas: &str, versions: &[u64]) -> BTreeMap<String, Vec<u64>> {
        [(canvas.to_owned(), versions.to_vec())].into_iter().collect()
    }

    /// (log of canvas "c", versions answered 201) → (lost, reused, unanswered).
    #[test]
    fn verdict_counts_lost_and_reused_versions() {
        let cases: Vec<(&str, Vec<u64>, Vec<u64>, (u64, u64, u64))> = vec![
            ("clean", vec![1, 2, 3], vec![1, 2, 3], (0, 0, 0)),
            ("answered out of order", vec![1, 2, 3], vec![3, 1, 2], (0, 0, 0)),
            ("a gap in the log", vec![1, 3], vec![1, 3], (1, 0, 0)),
            ("answered, not in the log", vec![1, 2], vec![1, 2, 3], (1, 0, 0)),
            ("a gap that was also answered: counted once", vec![1, 3], vec![1, 2, 3], (1, 0, 0)),
            ("a version twice in the log", vec![1, 2, 2], vec![1, 2], (0, 1, 0)),
            ("a version answered twice", vec![1, 2], vec![1, 2, 2], (0, 1, 0)),
            ("written without an answer", vec![1, 2, 3], vec![1, 2], (0, 0, 1)),
        ];
        for (name, l, a, (lost, reused, unanswered)) in cases {
            let v = verdict(&log("c", &l), &acked("c", &a));
            assert_eq!((v.lost, v.reused, v.unanswered), (lost, reused, unanswered), "{name}: {v:?}");
        }
    }

    #[test]
    fn a_canvas_answered_but_absent_from_the_log_lost_everything() {
        let v = verdict(&TopicLog::new(), &acked("c", &[1, 2]));
        assert_eq!((v.lost, v.reused, v.log_events, v.acked), (2, 0, 0, 2));
    }

    #[test]
    fn batches_cover_the_log_round_robin() {
        let canvases: Vec<String> = (0..3).map(|i| format!("c{i}")).collect();
        let (body, which) = batch_body(1, 2_500, &canvases, 4);
        let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
        let events = v["events"].as_array().expect("events");
        assert_eq!((events.len(), which.len()), (1_000, 1_000));
        // Event 1,000 of the log: canvas 1,000 % 3 = 1, its 333rd event (x 333 % 4, y 83 % 4).
        assert_eq!(events[0]["canvas"], "c1");
        assert_eq!((events[0]["x"].as_u64(), events[0]["y"].as_u64()), (Some(1), Some(3)));
        assert_eq!(which[0], 1);
        let (_, last) = batch_body(2, 2_500, &canvases, 4);
        assert_eq!(last.len(), 500);
    }
}
