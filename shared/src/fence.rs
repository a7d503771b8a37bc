//! The admin routes' guard against a deposed gateway leader, and their once-per-decision rule,
//! for every process a gateway leader sends admin requests to (`ws-node`, `core-publisher`).
//!
//! A leader's admin request carries its fencing token and the id of the decision it carries out
//! ([`crate::control`]). The process accepts a token only when it is the latest claim its own
//! reader has read from the control topic ([`spawn_claim_reader`]): an older one is 409 `stale_leader`,
//! one that no claim backs (the reader is past its offset, or does not reach it within
//! [`FENCE_WAIT`]) is 409 `unknown_claim`, so a forged token locks nobody out. Until the reader
//! has reached the topic's end (after a start) a request with a token gets 503
//! `control_topic_catching_up`. Once a leader has claimed, a request without a token on the public
//! port is 409 `fencing_token_required` (only the loopback admin listener takes one from an
//! operator on the host). A request whose decision id was seen before gets the first one's answer, without doing the
//! action again; a repeat that arrives while the first is still running waits for its answer.
//! The action itself runs to its end even when the caller goes away (a leader killed in the
//! middle of a node's drain does not leave it half done).
//!
//! Each user names itself by a role (`"NODE"`, `"PUBLISHER"`): `[{role}]` tags the log lines, and
//! its lowercase word names the process in refusals ("this node"). Each registers
//! [`Guard::refusals`] in its own metrics registry under its own prefix.

use crate::control::{Fence, Fencing, Listener, DECISION_HEADER, FENCING_HEADER};
use crate::http::ApiError;
use crate::metrics::{label, Labels};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

/// How long a request waits for the claim reader to reach its token's offset, or the topic's
/// end after a start, before it is refused.
pub const FENCE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Decisions remembered for their answers.
const REMEMBERED: usize = 1024;
/// Largest admin answer kept for a repeat.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// One decision's answer: its status, content type and body.
type Answer = (StatusCode, Option<axum::http::HeaderValue>, bytes::Bytes);

/// A decision's request (a digest of its method, path and body) and its answer, once there.
type Remembered = (u64, Arc<tokio::sync::OnceCell<Answer>>);

/// The fence and the answers of recent decisions.
pub struct Guard {
    pub fence: Arc<Fence>,
    answers: Mutex<lru::LruCache<String, Remembered>>,
    /// Admin requests the fence refused, by error (`stale_leader`, `unknown_claim`,
    /// `fencing_token_required`, `control_topic_catching_up`): each user's `GET /metrics` shows
    /// them under its own name (ws-node's `ws_node_fencing_refusals`), so a test or an operator
    /// sees a deposed leader knocking.
    pub refusals: Family<Labels, Counter>,
    /// The tag of the log lines (`NODE`, `PUBLISHER`).
    role: &'static str,
    /// The role's word in refusals (`node`, `publisher`).
    noun: String,
}

/// The errors of [`Guard::refusals`], each present (at 0) from the start.
pub const REFUSALS: [&str; 4] = ["stale_leader", "unknown_claim", "fencing_token_required", "control_topic_catching_up"];

/// A digest of a request: what makes two requests with one decision id the same decision.
fn digest(method: &axum::http::Method, path: &str, body: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (method.as_str(), path, body).hash(&mut h);
    h.finish()
}

impl Guard {
    /// A guard whose fence a claim reader feeds (`reading`), or one with no control topic to read;
    /// `role` (`"NODE"`, `"PUBLISHER"`) tags its log lines and, in lowercase, names the process
    /// in its refusals.
    pub fn new(reading: bool, role: &'static str) -> Self {
        let fence = if reading { Fence::reading() } else { Fence::without_topic() };
        let refusals = Family::<Labels, Counter>::default();
        for error in REFUSALS {
            refusals.get_or_create(&label("error", error)).inc_by(0);
        }
        Self {
            fence: Arc::new(fence),
            answers: Mutex::new(lru::LruCache::new(NonZeroUsize::new(REMEMBERED).expect("non-zero"))),
            refusals,
            role,
            noun: role.to_lowercase(),
        }
    }

    fn refused(&self, error: &'static str) {
        self.refusals.get_or_create(&label("error", error)).inc();
    }
}

/// The fencing token and decision id of a request: a pure parse.
///
/// # Errors
/// 400 `invalid_header` for a token that is not a number or an id that is empty or too long.
pub fn parse_headers(headers: &HeaderMap) -> Result<(Option<u64>, Option<String>), ApiError> {
    let token = match headers.get(FENCING_HEADER) {
        None => None,
        Some(v) => Some(v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()).ok_or_else(|| {
            ApiError::bad_request("invalid_header", format!("{FENCING_HEADER} must be a decimal number (the offset of a leader's claim)"))
        })?),
    };
    let id = match headers.get(DECISION_HEADER) {
        None => None,
        Some(v) => {
            let s = v.to_str().map_err(|_| ApiError::bad_request("invalid_header", format!("{DECISION_HEADER} must be visible ASCII")))?;
            if s.is_empty() || s.len() > 200 {
                return Err(ApiError::bad_request("invalid_header", format!("{DECISION_HEADER} must be 1 to 200 characters")));
            }
            Some(s.to_owned())
        }
    };
    Ok((token, id))
}

/// The middleware of the admin routes on `listener`.
pub async fn guard(State((guard, listener)): State<(Arc<Guard>, Listener)>, req: Request, next: Next) -> Response {
    let (token, id) = match parse_headers(req.headers()) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    match (guard.fence.admit(token, listener, FENCE_WAIT).await, token) {
        (Fencing::Accept, _) => {}
        (Fencing::TokenRequired { latest }, _) => {
            guard.refused("fencing_token_required");
            tracing::warn!("[{}] refused an admin request without a fencing token on the public port (the leader's claim is at {})", guard.role, latest);
            return ApiError::conflict(
                "fencing_token_required",
                format!(
                    "a gateway leader has claimed (fencing token {latest}): admin requests from other hosts must carry its token; \
                     send operator requests to a gateway (the leader carries them out), or use the {}'s loopback admin listener",
                    guard.noun
                ),
            )
            .into_response();
        }
        (Fencing::Stale { latest }, t) => {
            let t = t.unwrap_or_default();
            guard.refused("stale_leader");
            tracing::warn!("[{}] refused an admin request with fencing token {} (a newer leader claimed at {})", guard.role, t, latest);
            return ApiError::conflict(
                "stale_leader",
                format!("fencing token {t} is older than the latest leader's claim ({latest}): this gateway is no longer the leader"),
            )
            .into_response();
        }
        (Fencing::UnknownClaim | Fencing::NotYet, t) => {
            let t = t.unwrap_or_default();
            guard.refused("unknown_claim");
            let view = guard.fence.view();
            tracing::warn!("[{}] refused an admin request with fencing token {} that no leader's claim backs (claims read up to offset {})", guard.role, t, view.read_to);
            let why = if view.reading {
                format!("fencing token {t} is not a leader's claim this {} has read from the control topic (read up to offset {})", guard.noun, view.read_to)
            } else {
                format!("fencing token {t} cannot be checked: this {} reads no control topic (CONTROL_TOPIC is empty)", guard.noun)
            };
            return ApiError::conflict("unknown_claim", why).into_response();
        }
        (Fencing::CatchingUp, _) => {
            guard.refused("control_topic_catching_up");
            return ApiError::unavailable(
                "control_topic_catching_up",
                format!("this {} has not read the control topic (the leaders' claims) to its end yet; try again shortly", guard.noun),
                1,
            )
            .into_response();
        }
    }
    // A decision id names one request: its body is read here to tell a repeat from another
    // request that reuses the id.
    let (req, request_digest) = match &id {
        None => (req, 0),
        Some(_) => {
            let (parts, body) = req.into_parts();
            let Ok(bytes) = axum::body::to_bytes(body, crate::http::MAX_BODY_BYTES).await else {
                return ApiError::bad_request("invalid_body", "the admin request's body could not be read").into_response();
            };
            let d = digest(&parts.method, parts.uri.path(), &bytes);
            (Request::from_parts(parts, Body::from(bytes)), d)
        }
    };
    let run = async move {
        // Runs to its end on its own task, whoever waits for it.
        let resp = match tokio::spawn(next.run(req)).await {
            Ok(r) => r,
            Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, None, bytes::Bytes::from(format!("admin action failed: {e}"))),
        };
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_ANSWER_BYTES).await.unwrap_or_default();
        (parts.status, parts.headers.get(axum::http::header::CONTENT_TYPE).cloned(), bytes)
    };
    let answer = match id {
        None => run.await,
        Some(id) => {
            let (first, cell) = guard.answers.lock().expect("answers lock").get_or_insert(id.clone(), || (request_digest, Default::default())).clone();
            if first != request_digest {
                tracing::warn!("[{}] refused an admin request that reuses decision id {} for another request", guard.role, id);
                return ApiError::conflict(
                    "decision_id_reused",
                    format!("decision id {id} was used for another request (another route or body); each decision needs an id of its own"),
                )
                .into_response();
            }
            cell.get_or_init(|| run).await.clone()
        }
    };
    let (status, content_type, body) = answer;
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    if let Some(ct) = content_type {
        resp.headers_mut().insert(axum::http::header::CONTENT_TYPE, ct);
    }
    resp
}

/// Reads the leaders' claims from the control topic into `fence` (a thread of its own, until
/// `stop` is cancelled): the claims it reads are the only tokens the process accepts, and a
/// deposed leader is refused even by a process the new one has not called yet. Its Kafka client
/// id is `{client_id_prefix}-claims`; `role` tags its log lines as in [`Guard::new`].
pub fn spawn_claim_reader(
    settings: crate::kafka::KafkaSettings,
    client_id_prefix: &str,
    topic: String,
    fence: Arc<Fence>,
    stop: tokio_util::sync::CancellationToken,
    role: &'static str,
) {
    let reader = fence.clone();
    crate::control::spawn_follower(
        settings,
        format!("{client_id_prefix}-claims"),
        topic,
        stop,
        move |offset, record| {
            let offset = offset.max(0) as u64;
            if let Ok(crate::control::ControlRecord::Claim { gateway, .. }) = record {
                tracing::info!("[{}] gateway {} is the leader now (fencing token {})", role, gateway, offset);
                reader.claimed(offset);
            }
            reader.read_to(offset + 1);
        },
        move |next| fence.reached_end(next.max(0) as u64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn headers_parse_or_are_named() {
        assert_eq!(parse_headers(&headers(&[])).unwrap(), (None, None));
        assert_eq!(parse_headers(&headers(&[(FENCING_HEADER, "12"), (DECISION_HEADER, "gw/12/3")])).unwrap(), (Some(12), Some("gw/12/3".into())));
        for bad in ["x", "-1", "1.5", ""] {
            let e = parse_headers(&headers(&[(FENCING_HEADER, bad)])).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad:?}");
            assert!(e.body.message.contains(FENCING_HEADER));
        }
        let long = "a".repeat(201);
        assert!(parse_headers(&headers(&[(DECISION_HEADER, long.as_str())])).is_err());
    }

    async fn counted(State(n): State<Arc<std::sync::atomic::AtomicU32>>) -> String {
        let k = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        format!("call {k}")
    }

    fn app(guard: Arc<Guard>, n: Arc<std::sync::atomic::AtomicU32>) -> axum::Router {
        app_on(guard, n, Listener::Public)
    }

    fn app_on(guard: Arc<Guard>, n: Arc<std::sync::atomic::AtomicU32>, listener: Listener) -> axum::Router {
        axum::Router::new()
            .route("/admin/x", axum::routing::post(counted))
            .with_state(n)
            .layer(axum::middleware::from_fn_with_state((guard, listener), super::guard))
    }

    async fn call(app: &axum::Router, pairs: &[(&'static str, &str)]) -> (StatusCode, String) {
        use tower::ServiceExt;
        let mut req = Request::post("/admin/x").body(Body::empty()).unwrap();
        for (k, v) in pairs {
            req.headers_mut().insert(*k, v.parse().unwrap());
        }
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_decision_id_reused_for_another_request_is_refused() {
        use tower::ServiceExt;
        let (guard, n) = (Arc::new(Guard::new(false, "NODE")), Arc::new(std::sync::atomic::AtomicU32::new(0)));
        let app = app(guard, n.clone());
        let send = |body: &'static str| {
            let app = app.clone();
            async move {
                let mut req = Request::post("/admin/x").body(Body::from(body)).unwrap();
                req.headers_mut().insert(DECISION_HEADER, "gw-a/-abc/1".parse().unwrap());
                let resp = app.oneshot(req).await.unwrap();
                let status = resp.status();
                (status, String::from_utf8_lossy(&axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap()).into_owned())
            }
        };
        assert_eq!(send(r#"{"partitions":[1]}"#).await, (StatusCode::OK, "call 1".into()));
        assert_eq!(send(r#"{"partitions":[1]}"#).await, (StatusCode::OK, "call 1".into()), "a repeat gets the first answer");
        let (status, body) = send(r#"{"partitions":[2]}"#).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert!(body.contains("decision_id_reused"), "{body}");
        assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_decision_is_done_once_and_a_stale_token_is_refused() {
        let (guard, n) = (Arc::new(Guard::new(true, "NODE")), Arc::new(std::sync::atomic::AtomicU32::new(0)));
        let app = app(guard.clone(), n.clone());
        // Not read to the end yet: a token is not judged now.
        assert_eq!(call(&app, &[(FENCING_HEADER, "5")]).await.0, StatusCode::SERVICE_UNAVAILABLE);
        guard.fence.claimed(5);
        guard.fence.reached_end(6);
        // Two concurrent requests of one decision: one action, the same answer.
        let d = [(FENCING_HEADER, "5"), (DECISION_HEADER, "gw-a/5/1")];
        let (a, b) = tokio::join!(call(&app, &d), call(&app, &d));
        assert_eq!(a, (StatusCode::OK, "call 1".into()));
        assert_eq!(b, a);
        assert_eq!(call(&app, &[(FENCING_HEADER, "5"), (DECISION_HEADER, "gw-a/5/2")]).await.1, "call 2");
        // A newer leader's claim read from the topic: the old token is refused, the new one acts.
        guard.fence.claimed(9);
        let (status, body) = call(&app, &[(FENCING_HEADER, "5"), (DECISION_HEADER, "gw-a/5/3")]).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(body.contains("stale_leader"), "{body}");
        let refused = |error: &'static str| guard.refusals.get_or_create(&label("error", error)).get();
        assert_eq!((refused("stale_leader"), refused("control_topic_catching_up"), refused("unknown_claim")), (1, 1, 0), "refusals are counted by error");
        // The new leader repeating its predecessor's decision gets the first answer.
        assert_eq!(call(&app, &[(FENCING_HEADER, "9"), (DECISION_HEADER, "gw-a/5/1")]).await.1, "call 1");
        // A request without a token on the public port, once a leader has claimed: refused; on
        // the loopback admin listener (an operator on the host) it acts.
        let (status, body) = call(&app, &[]).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(body.contains("fencing_token_required"), "{body}");
        let loopback = app_on(guard.clone(), n.clone(), Listener::Loopback);
        assert_eq!(call(&loopback, &[]).await.1, "call 3");
        assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(call(&app, &[(FENCING_HEADER, "x")]).await.0, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn refusals_name_the_process_by_its_role() {
        let (guard, n) = (Arc::new(Guard::new(false, "PUBLISHER")), Arc::new(std::sync::atomic::AtomicU32::new(0)));
        let (status, body) = call(&app(guard, n), &[(FENCING_HEADER, "5")]).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(body.contains("unknown_claim") && body.contains("this publisher reads no control topic"), "{body}");
    }

    #[tokio::test]
    async fn without_a_claim_a_request_without_a_token_acts() {
        let (guard, n) = (Arc::new(Guard::new(true, "NODE")), Arc::new(std::sync::atomic::AtomicU32::new(0)));
        let app = app(guard.clone(), n.clone());
        guard.fence.reached_end(0);
        assert_eq!(call(&app, &[]).await, (StatusCode::OK, "call 1".into()), "no leader has claimed: a standalone gateway's fleet");
    }
}
