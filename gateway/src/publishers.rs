//! The publishers behind `/api/canvases/...` and `/api/pixels`, and which of them gets each
//! forwarded request.
//!
//! A deployment runs one publisher, or for a moment several on one topic: a newer one fences the
//! older (which then answers every write with 503 `fenced` and exits), one still rebuilding
//! answers 503 `not_ready`, and a standby (started with `--standby`: it follows the log without
//! writing until promoted) answers 503 `standby`; none of them applied anything. The gateway keeps
//! a *preferred* publisher — the last one that accepted a write, or the one a background probe of
//! every publisher's `/ready` found ready — and tries it first.
//!
//! The probe learns each publisher's [`PublisherState`] from its `/ready` ([`ready_state`]): 200
//! `ready`; 503 `standby`, `not_ready` or `fenced`; `unreachable` (no connection, or no answer
//! within `POLL_TIMEOUT_MS`); `other` (any other answer). `/api/fleet` shows it as each
//! publisher's `state`; the fleet probes on the poll interval and promotes a standby when
//! none is ready ([`crate::promotion`]).
//!
//! A request moves on to the next publisher only when the answer proves nothing was applied: the
//! connection could not be established, or 503 `fenced` / `not_ready` / `standby`. Each publisher
//! is tried at most once per request. Whatever may have been applied goes back to the client as
//! it came and is never sent to another publisher: a timeout or a broken connection after the
//! request went out (504 `publisher_outcome_unknown`), 503 `kafka_outcome_unknown`, any other
//! answer. When every publisher refused, the client gets the last refusal (503 + `Retry-After`),
//! or 503 `publisher_unavailable` when none could be reached.
//!
//! The policy is pure ([`choose`], [`classify_answer`], [`ready_state`], [`probe_choice`]) and
//! tested as tables; [`Publishers`] runs it.

use crate::config::Config;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shared::http::ApiError;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why an attempt proves that nothing was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotApplied {
    /// The connection could not be established: the request never went out.
    Unreachable,
    /// 503 `fenced`: a newer publisher took over the topic; this one applies nothing.
    Fenced,
    /// 503 `not_ready`: the publisher is still rebuilding; nothing was applied.
    NotReady,
    /// 503 `standby`: a standby publisher follows the log and applies nothing until promoted.
    Standby,
}

impl NotApplied {
    /// The reason as logged.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Fenced => "fenced",
            Self::NotReady => "not_ready",
            Self::Standby => "standby",
        }
    }
}

/// What a publisher's `/ready` (or a forwarded request's answer) last said about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PublisherState {
    /// 200 `{"ready":true}`: it accepts writes.
    Ready,
    /// 503 `standby`: it follows the log without writing until promoted (`POST /admin/promote`).
    Standby,
    /// 503 `not_ready`: it is still rebuilding.
    NotReady,
    /// 503 `fenced`: a newer publisher took over the topic; it is about to exit.
    Fenced,
    /// No connection, or no answer within `POLL_TIMEOUT_MS`.
    Unreachable,
    /// Any other answer (another status or error code, a body that is not the expected one).
    Other,
}

impl PublisherState {
    /// Its name, as in `/api/fleet` and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Standby => "standby",
            Self::NotReady => "not_ready",
            Self::Fenced => "fenced",
            Self::Unreachable => "unreachable",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for PublisherState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<NotApplied> for PublisherState {
    fn from(why: NotApplied) -> Self {
        match why {
            NotApplied::Unreachable => Self::Unreachable,
            NotApplied::Fenced => Self::Fenced,
            NotApplied::NotReady => Self::NotReady,
            NotApplied::Standby => Self::Standby,
        }
    }
}

/// What became of one attempt at one publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing was applied: the request may go to another publisher.
    NotApplied(NotApplied),
    /// Any other answer (a success, a 4xx, another 503 such as `kafka_outcome_unknown`): it is
    /// the client's.
    Answered,
    /// The request went out and no answer came (a timeout, a connection broken after sending):
    /// it may have been applied.
    Ambiguous,
}

/// The next step of a forwarded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Send the request to the publisher of this index.
    Try(usize),
    /// Send nothing more: reply with the last answer (or, when every publisher proved that
    /// nothing was applied, with the last refusal).
    Stop,
}

/// Which publisher a request goes to next, given the attempts so far (in order): `count`
/// publishers, the `preferred` one first, then the others in configured order after it
/// (wrapping). Only an attempt that proves nothing was applied lets the request move on, and no
/// publisher is tried twice, so a request makes at most `count` attempts.
pub fn choose(count: usize, preferred: Option<usize>, tried: &[(usize, Outcome)]) -> Choice {
    if tried.iter().any(|(_, o)| !matches!(o, Outcome::NotApplied(_))) {
        return Choice::Stop;
    }
    let start = preferred.filter(|p| *p < count).unwrap_or(0);
    (start..count)
        .chain(0..start)
        .find(|i| !tried.iter().any(|(t, _)| t == i))
        .map_or(Choice::Stop, Choice::Try)
}

/// What a publisher's answer (`status`, JSON `body`) proves: 503 with `error` `fenced`,
/// `not_ready` or `standby` means nothing was applied; anything else is an answer for the client.
pub fn classify_answer(status: u16, body: &[u8]) -> Outcome {
    if status != 503 {
        return Outcome::Answered;
    }
    match serde_json::from_slice::<shared::api::ErrorBody>(body).map(|b| b.error) {
        Ok(code) if code == "fenced" => Outcome::NotApplied(NotApplied::Fenced),
        Ok(code) if code == "not_ready" => Outcome::NotApplied(NotApplied::NotReady),
        Ok(code) if code == "standby" => Outcome::NotApplied(NotApplied::Standby),
        _ => Outcome::Answered,
    }
}

/// The state an answer of `GET /ready` (`status`, JSON `body`) shows: 200 `{"ready":true}` is
/// [`PublisherState::Ready`]; 503 with `error` `standby`, `not_ready` or `fenced` that state;
/// anything else [`PublisherState::Other`]. (No answer at all is
/// [`PublisherState::Unreachable`], decided by the caller.)
pub fn ready_state(status: u16, body: &[u8]) -> PublisherState {
    match status {
        200 => match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(v) if v["ready"] == true => PublisherState::Ready,
            _ => PublisherState::Other,
        },
        503 => match serde_json::from_slice::<shared::api::ErrorBody>(body).map(|b| b.error).as_deref() {
            Ok("standby") => PublisherState::Standby,
            Ok("not_ready") => PublisherState::NotReady,
            Ok("fenced") => PublisherState::Fenced,
            _ => PublisherState::Other,
        },
        _ => PublisherState::Other,
    }
}

/// The preferred publisher after a probe found `ready` (one flag per publisher): the current one
/// while it is ready (several may say so while a newer one fences an older one: the one that
/// last accepted a write stays), else the first ready one, else the current one (nothing better
/// is known).
pub fn probe_choice(current: Option<usize>, ready: &[bool]) -> Option<usize> {
    if current.is_some_and(|c| ready.get(c).copied().unwrap_or(false)) {
        return current;
    }
    ready.iter().position(|r| *r).or(current)
}

/// Answer headers passed back from the publisher.
const FORWARDED_ANSWER_HEADERS: &[&str] = &["retry-after", "idempotent-replayed"];

/// One request to forward.
#[derive(Debug, Clone)]
pub struct Forward {
    pub method: reqwest::Method,
    /// Path and query on the publisher, e.g. `/canvases/c1/pixels`.
    pub path: String,
    /// JSON body, sent as it came.
    pub body: Option<bytes::Bytes>,
    /// Request headers passed on.
    pub headers: Vec<(&'static str, HeaderValue)>,
    /// How long the publisher may take to answer; past it the outcome is unknown.
    pub timeout: Duration,
}

impl Forward {
    /// Whether the request writes (a success then shows that its publisher accepts writes).
    fn is_write(&self) -> bool {
        self.method != reqwest::Method::GET
    }
}

/// A publisher's answer, read whole.
struct Answer {
    status: StatusCode,
    headers: Vec<(&'static str, HeaderValue)>,
    body: bytes::Bytes,
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut out = (self.status, [(axum::http::header::CONTENT_TYPE, "application/json")], self.body).into_response();
        for (name, v) in self.headers {
            out.headers_mut().insert(name, v);
        }
        out
    }
}

/// One publisher as the gateway knows it.
#[derive(Debug, Default)]
struct View {
    /// What it said last (a probe or a forwarded request); `None` until the first probe.
    state: Option<PublisherState>,
    last_error: Option<String>,
    /// When `state` was last learned; a probe that started before does not overwrite it.
    learned: Option<Instant>,
}

impl View {
    /// Whether it accepts writes, as last seen.
    fn ready(&self) -> bool {
        self.state == Some(PublisherState::Ready)
    }
}

struct Entry {
    url: String,
    view: Mutex<View>,
}

/// The configured publishers, the preferred one, and the forwarding.
pub struct Publishers {
    entries: Vec<Entry>,
    preferred: Mutex<Option<usize>>,
    /// Its connect timeout is the poll timeout: a publisher that does not accept a connection
    /// in that time counts as unreachable (nothing was sent), and the request moves on.
    http: reqwest::Client,
    probe_timeout: Duration,
}

impl Publishers {
    /// The publishers of `config`, none preferred until one is found ready or accepts a write.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(config: &Config) -> Result<Self, reqwest::Error> {
        let entries = config.publisher_url.0.iter().map(|url| Entry { url: url.clone(), view: Mutex::new(View::default()) }).collect();
        let http = reqwest::Client::builder().connect_timeout(config.poll_timeout()).pool_idle_timeout(shared::serve::CLIENT_POOL_IDLE).build()?;
        Ok(Self {
            entries,
            preferred: Mutex::new(None),
            http,
            probe_timeout: config.poll_timeout(),
        })
    }

    /// The preferred publisher's index, if any.
    pub fn preferred(&self) -> Option<usize> {
        *self.preferred.lock().expect("preferred publisher lock")
    }

    /// Makes publisher `i` the preferred one, logging the change.
    fn prefer(&self, i: usize, reason: &str) {
        self.prefer_by(|_| Some(i), reason);
    }

    /// Sets the preferred publisher to what `choice` makes of the current one (decided under the
    /// lock, so a probe cannot undo a write accepted meanwhile), logging a change.
    fn prefer_by(&self, choice: impl FnOnce(Option<usize>) -> Option<usize>, reason: &str) {
        let (was, now) = {
            let mut p = self.preferred.lock().expect("preferred publisher lock");
            let now = choice(*p).filter(|i| *i < self.entries.len());
            if now.is_none() || now == *p {
                return;
            }
            (std::mem::replace(&mut *p, now), now)
        };
        let url = |i: Option<usize>| i.map_or("none", |i| self.entries[i].url.as_str());
        tracing::info!("[GATEWAY] publisher {} accepts writes (was {}) reason=\"{}\"", url(now), url(was), reason);
    }

    /// Records what a forwarded request or a probe (`since`: when it started) learned of
    /// publisher `i`; a probe does not overwrite what a request learned after it started.
    fn learn(&self, i: usize, state: PublisherState, error: Option<String>, since: Instant) {
        let mut v = self.entries[i].view.lock().expect("publisher view lock");
        if v.learned.is_some_and(|l| l > since) {
            return;
        }
        *v = View { state: Some(state), last_error: error, learned: Some(since) };
    }

    /// Forwards `req` by [`choose`] and returns the answer for the client (see the module docs).
    pub async fn forward(&self, req: &Forward) -> Response {
        let mut tried: Vec<(usize, Outcome)> = Vec::new();
        // The last answer that proves nothing was applied, and the reply once one is final.
        let mut refusal: Option<Answer> = None;
        let mut reply: Option<Response> = None;
        while let Choice::Try(i) = choose(self.entries.len(), self.preferred(), &tried) {
            let url = self.entries[i].url.as_str();
            let started = Instant::now();
            let outcome = match self.attempt(url, req).await {
                Ok(answer) => {
                    let outcome = classify_answer(answer.status.as_u16(), &answer.body);
                    match outcome {
                        Outcome::NotApplied(why) => {
                            tracing::info!(publisher = url, reason = why.as_str(), "publisher refused; nothing was applied");
                            self.learn(i, why.into(), Some(format!("answered 503 {}", why.as_str())), started);
                            refusal = Some(answer);
                        }
                        _ => {
                            if req.is_write() && answer.status.is_success() {
                                self.learn(i, PublisherState::Ready, None, started);
                                self.prefer(i, "it accepted a write");
                            }
                            reply = Some(answer.into_response());
                        }
                    }
                    outcome
                }
                Err(Failed::Unreachable(e)) => {
                    tracing::warn!(publisher = url, error = %e, "publisher could not be reached; nothing was sent");
                    self.learn(i, PublisherState::Unreachable, Some(e), started);
                    Outcome::NotApplied(NotApplied::Unreachable)
                }
                Err(Failed::Ambiguous(e)) => {
                    tracing::warn!(publisher = url, error = %e.body.message, "publisher did not answer a forwarded request");
                    reply = Some(e.into_response());
                    Outcome::Ambiguous
                }
            };
            tried.push((i, outcome));
        }
        if let Some(r) = reply {
            return r;
        }
        if let Some(r) = refusal {
            return r.into_response();
        }
        let urls: Vec<&str> = self.entries.iter().map(|e| e.url.as_str()).collect();
        ApiError::unavailable(
            "publisher_unavailable",
            format!("no publisher could be reached (tried {}); nothing was applied", urls.join(", ")),
            1,
        )
        .into_response()
    }

    /// Sends `req` to the publisher at `url` and reads its answer whole.
    async fn attempt(&self, url: &str, req: &Forward) -> Result<Answer, Failed> {
        let mut out = self.http.request(req.method.clone(), format!("{url}{}", req.path)).timeout(req.timeout);
        if let Some(body) = &req.body {
            out = out.header("content-type", "application/json").body(body.clone());
        }
        for (name, v) in &req.headers {
            out = out.header(*name, v.as_bytes());
        }
        let resp = out.send().await.map_err(|e| {
            // A connect error (refused, or no connection within the connect timeout) is checked
            // first: it may also be a timeout, but the request never went out.
            if e.is_connect() {
                return Failed::Unreachable(error_text(&e));
            }
            let message = if e.is_timeout() {
                format!("the publisher at {url} did not answer in {} ms", req.timeout.as_millis())
            } else {
                format!("the connection to the publisher at {url} broke after the request was sent ({})", error_text(&e))
            };
            Failed::Ambiguous(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "publisher_outcome_unknown",
                format!("{message}: the request may or may not have been applied; retry with the same Idempotency-Key / idempotency_key to apply it once"),
            ))
        })?;
        let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let headers = FORWARDED_ANSWER_HEADERS
            .iter()
            .filter_map(|name| {
                let v = resp.headers().get(*name)?;
                Some((*name, HeaderValue::from_bytes(v.as_bytes()).ok()?))
            })
            .collect();
        match resp.bytes().await {
            Ok(body) => Ok(Answer { status, headers, body }),
            // The answer began: whatever it was, it is not a proof that nothing was applied.
            Err(e) => Err(Failed::Ambiguous(ApiError::bad_gateway(format!("reading the answer of the publisher at {url}: {e}")))),
        }
    }

    /// Probes every publisher's `/ready` once (at most the poll timeout each, side by side),
    /// updates the preferred one by [`probe_choice`], and returns what each answered, in
    /// configured order.
    pub async fn probe(&self) -> Vec<PublisherState> {
        let started = Instant::now();
        let answers = futures::future::join_all(self.entries.iter().map(|e| self.ready(&e.url))).await;
        let states: Vec<PublisherState> = answers.iter().map(|(state, _)| *state).collect();
        for (i, (state, error)) in answers.into_iter().enumerate() {
            self.learn(i, state, error, started);
        }
        let ready: Vec<bool> = self.entries.iter().map(|e| e.view.lock().expect("publisher view lock").ready()).collect();
        self.prefer_by(|current| probe_choice(current, &ready).filter(|i| ready.get(*i) == Some(&true)), "/ready answered 200");
        states
    }

    /// `GET {url}/ready`: its [`ready_state`], and the error to show when it is not ready.
    async fn ready(&self, url: &str) -> (PublisherState, Option<String>) {
        let resp = match self.http.get(format!("{url}/ready")).timeout(self.probe_timeout).send().await {
            Ok(resp) => resp,
            Err(e) => {
                let text = if e.is_timeout() && !e.is_connect() { format!("/ready timed out after {} ms", self.probe_timeout.as_millis()) } else { error_text(&e) };
                return (PublisherState::Unreachable, Some(text));
            }
        };
        let status = resp.status();
        let body = match resp.bytes().await {
            Ok(body) => body,
            Err(e) => return (PublisherState::Other, Some(format!("reading /ready: {e}"))),
        };
        let state = ready_state(status.as_u16(), &body);
        let error = match state {
            PublisherState::Ready => None,
            _ if status == reqwest::StatusCode::OK => Some("/ready answered 200 without \"ready\":true".to_owned()),
            _ => {
                let code = serde_json::from_slice::<shared::api::ErrorBody>(&body).map(|b| b.error).unwrap_or_default();
                Some(format!("/ready answered {status} {code}").trim_end().to_owned())
            }
        };
        (state, error)
    }

    /// The publishers for `/api/fleet`: `[{"url","ready","state","preferred","last_error"}]`, in
    /// configured order; `state` is a [`PublisherState`]'s name (`null` before the first probe).
    pub fn snapshot(&self) -> serde_json::Value {
        let preferred = self.preferred();
        let list: Vec<serde_json::Value> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let v = e.view.lock().expect("publisher view lock");
                serde_json::json!({"url": e.url, "ready": v.ready(), "state": v.state, "preferred": preferred == Some(i), "last_error": v.last_error})
            })
            .collect();
        serde_json::Value::Array(list)
    }

    /// The configured URLs, in order.
    pub fn urls(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.url.as_str()).collect()
    }
}

/// An HTTP client error with its causes (reqwest's own text does not name them: "error sending
/// request for url (...): connection refused").
pub(crate) fn error_text(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// Why an attempt brought no answer.
enum Failed {
    /// The connection could not be established (the error's text).
    Unreachable(String),
    /// The request went out; the answer for the client (504, or 502 when the answer broke off).
    Ambiguous(ApiError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use NotApplied::{Fenced, NotReady, Standby, Unreachable};
    use Outcome::{Ambiguous, Answered};

    const NA_FENCED: Outcome = Outcome::NotApplied(Fenced);
    const NA_READY: Outcome = Outcome::NotApplied(NotReady);
    const NA_CONN: Outcome = Outcome::NotApplied(Unreachable);
    const NA_STANDBY: Outcome = Outcome::NotApplied(Standby);

    /// (publishers, preferred, attempts so far, next)
    type ChoiceCase = (usize, Option<usize>, &'static [(usize, Outcome)], Choice);

    #[test]
    fn choice_table() {
        let cases: &[ChoiceCase] = &[
            (1, None, &[], Choice::Try(0)),
            (2, None, &[], Choice::Try(0)),
            (2, Some(1), &[], Choice::Try(1)),
            (3, Some(7), &[], Choice::Try(0)),
            // nothing applied: the next one, after the preferred (wrapping)
            (2, Some(0), &[(0, NA_FENCED)], Choice::Try(1)),
            (2, Some(0), &[(0, NA_READY)], Choice::Try(1)),
            (2, Some(0), &[(0, NA_CONN)], Choice::Try(1)),
            (2, Some(0), &[(0, NA_STANDBY)], Choice::Try(1)),
            (3, Some(1), &[(1, NA_FENCED)], Choice::Try(2)),
            (3, Some(2), &[(2, NA_CONN)], Choice::Try(0)),
            (3, Some(2), &[(2, NA_CONN), (0, NA_READY)], Choice::Try(1)),
            // every one refused: stop (each at most once, no loop)
            (1, Some(0), &[(0, NA_FENCED)], Choice::Stop),
            (2, Some(0), &[(0, NA_FENCED), (1, NA_CONN)], Choice::Stop),
            (3, None, &[(0, NA_CONN), (1, NA_CONN), (2, NA_CONN)], Choice::Stop),
            // the preferred changed meanwhile (another request found the new one)
            (3, Some(2), &[(0, NA_FENCED)], Choice::Try(2)),
            (2, Some(1), &[(0, NA_FENCED), (1, NA_READY)], Choice::Stop),
            (2, Some(0), &[(1, NA_FENCED)], Choice::Try(0)),
            // an answer or an ambiguous failure is final
            (2, Some(0), &[(0, Answered)], Choice::Stop),
            (2, Some(0), &[(0, Ambiguous)], Choice::Stop),
            (3, Some(0), &[(0, NA_FENCED), (1, Ambiguous)], Choice::Stop),
            (3, Some(0), &[(0, NA_CONN), (1, Answered)], Choice::Stop),
            (0, None, &[], Choice::Stop),
        ];
        for (count, preferred, tried, want) in cases {
            assert_eq!(choose(*count, *preferred, tried), *want, "{count} publishers, preferred {preferred:?}, tried {tried:?}");
        }
    }

    #[test]
    fn a_request_makes_at_most_one_attempt_per_publisher_whatever_the_refusals() {
        for count in 0..6usize {
            for preferred in [None, Some(0), Some(count.saturating_sub(1)), Some(count + 3)] {
                let mut tried = Vec::new();
                while let Choice::Try(i) = choose(count, preferred, &tried) {
                    assert!(i < count && !tried.iter().any(|(t, _)| *t == i), "{count} {preferred:?}: {i} again after {tried:?}");
                    tried.push((i, NA_FENCED));
                }
                assert_eq!(tried.len(), count);
            }
        }
    }

    #[test]
    fn answer_table() {
        let cases: &[(u16, &str, Outcome)] = &[
            (503, r#"{"error":"fenced","message":"a newer publisher took over"}"#, NA_FENCED),
            (503, r#"{"error":"not_ready","message":"rebuilding"}"#, NA_READY),
            (503, r#"{"error":"standby","message":"a standby: promote it to write"}"#, NA_STANDBY),
            (409, r#"{"error":"standby","message":"m"}"#, Answered),
            (503, r#"{"error":"kafka_outcome_unknown","message":"m"}"#, Answered),
            (503, r#"{"error":"kafka_unavailable","message":"m"}"#, Answered),
            (503, "not json", Answered),
            (503, "", Answered),
            (201, r#"{"canvas":"c1","version":1}"#, Answered),
            (200, r#"{"error":"fenced","message":"m"}"#, Answered),
            (500, r#"{"error":"fenced","message":"m"}"#, Answered),
            (409, r#"{"error":"idempotency_key_reused","message":"m"}"#, Answered),
            (400, r#"{"error":"invalid_field","message":"m","field":"x"}"#, Answered),
        ];
        for (status, body, want) in cases {
            assert_eq!(classify_answer(*status, body.as_bytes()), *want, "{status} {body}");
        }
    }

    #[test]
    fn ready_state_table() {
        use PublisherState as S;
        let cases: &[(u16, &str, PublisherState)] = &[
            (200, r#"{"ready":true}"#, S::Ready),
            (200, r#"{"ready":false}"#, S::Other),
            (200, "not json", S::Other),
            (503, r#"{"error":"standby","message":"following the log; POST /admin/promote"}"#, S::Standby),
            (503, r#"{"error":"not_ready","message":"rebuilding"}"#, S::NotReady),
            (503, r#"{"error":"fenced","message":"a newer publisher took over"}"#, S::Fenced),
            (503, r#"{"error":"kafka_unavailable","message":"m"}"#, S::Other),
            (503, "", S::Other),
            (500, r#"{"error":"standby","message":"m"}"#, S::Other),
            (404, "", S::Other),
        ];
        for (status, body, want) in cases {
            assert_eq!(ready_state(*status, body.as_bytes()), *want, "{status} {body}");
        }
        let names: Vec<String> =
            [S::Ready, S::Standby, S::NotReady, S::Fenced, S::Unreachable, S::Other].iter().map(|s| serde_json::to_value(s).unwrap().as_str().unwrap().to_owned()).collect();
        assert_eq!(names, ["ready", "standby", "not_ready", "fenced", "unreachable", "other"]);
        assert!([S::Ready, S::Standby, S::NotReady, S::Fenced, S::Unreachable, S::Other].iter().all(|s| serde_json::to_value(s).unwrap() == s.as_str()));
    }

    #[test]
    fn probe_choice_table() {
        // (current, ready flags, preferred after the probe)
        let cases: &[(Option<usize>, &[bool], Option<usize>)] = &[
            (None, &[false, false], None),
            (None, &[false, true], Some(1)),
            (None, &[true, true], Some(0)),
            (Some(1), &[true, true], Some(1)),
            (Some(0), &[false, true], Some(1)),
            (Some(0), &[false, false], Some(0)),
            (Some(5), &[false, true], Some(1)),
            (Some(1), &[true, false, true], Some(0)),
        ];
        for (current, ready, want) in cases {
            assert_eq!(probe_choice(*current, ready), *want, "{current:?} {ready:?}");
        }
    }
}
