//! Operator requests on a replica that is not the leader: forwarded to the leader, which carries
//! them out under its fencing token (as Kafka Connect's workers forward REST requests to their
//! group's leader). Nodes refuse an admin request without the leader's token once a leader has
//! claimed, so a follower must not act on its own.
//!
//! The leader's URL comes from its claim on the control topic (`GATEWAY_ADVERTISED_URL`). A
//! forwarded request carries [`FORWARDED_BY`]: a replica that gets one and is not the leader
//! either answers 503 instead of forwarding again (leadership is moving; no loops).

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use shared::http::ApiError;
use std::time::Duration;

/// The header a follower adds to a request it forwards: its `GATEWAY_ID`.
pub const FORWARDED_BY: &str = "x-forwarded-by-gateway";

/// Where an operator request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// This replica acts (the leader, or a standalone gateway).
    Here,
    /// To the leader `leader` at `url`.
    Forward { leader: String, url: String },
    /// Nowhere now: the answer.
    Refuse(Refusal),
}

/// Why an operator request is not carried out or forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No leader is known, or this replica is the latest claimant but not acting: 503, retry.
    NoLeader(String),
    /// A forwarded request reached a replica that is not the leader either: 503, retry.
    NotLeaderEither { from: String, leader: Option<String> },
    /// The leader gave no URL (it runs an older version), or this replica cannot authenticate to
    /// it (no `ADMIN_TOKEN`: the leader serves the route on its loopback listener only): 409.
    SendToLeader { leader: String, why: &'static str },
}

impl Refusal {
    pub fn api_error(&self) -> ApiError {
        match self {
            Refusal::NoLeader(why) => ApiError::unavailable("no_leader", format!("no gateway leads the fleet now ({why}); try again shortly"), 1),
            Refusal::NotLeaderEither { from, leader } => ApiError::unavailable(
                "not_leader",
                format!("forwarded by {from}, but this replica is not the leader either (the latest claim is {}): leadership is moving; try again shortly", leader.as_deref().unwrap_or("unknown")),
                1,
            ),
            Refusal::SendToLeader { leader, why } => ApiError::conflict("not_leader", format!("this replica is not the leader and cannot forward the request ({why}): send it to the leader, {leader}")),
        }
    }
}

/// The rule: a pure function of this replica's authority, the request's [`FORWARDED_BY`], the
/// latest claim read (gateway, URL) and whether this replica can authenticate to the leader.
pub fn route(authority: Result<Option<u64>, String>, forwarded_by: Option<&str>, leader: Option<(String, Option<String>)>, me: &str, can_forward: bool) -> Route {
    let why = match authority {
        Ok(_) => return Route::Here,
        Err(why) => why,
    };
    if let Some(from) = forwarded_by {
        return Route::Refuse(Refusal::NotLeaderEither { from: from.to_owned(), leader: leader.map(|(g, _)| g) });
    }
    match leader {
        None => Route::Refuse(Refusal::NoLeader(why)),
        Some((g, _)) if g == me => Route::Refuse(Refusal::NoLeader(why)),
        Some((g, None)) => Route::Refuse(Refusal::SendToLeader { leader: g, why: "its claim names no URL" }),
        Some((g, Some(_))) if !can_forward => Route::Refuse(Refusal::SendToLeader { leader: g, why: "no ADMIN_TOKEN to authenticate with" }),
        Some((leader, Some(url))) => Route::Forward { leader, url },
    }
}

/// The URL of the route made of `segments` (each percent-encoded as one path segment) on the
/// leader at `base`.
///
/// # Errors
/// When `base` is not an http(s) URL that can take a path.
pub fn target(base: &str, segments: &[&str]) -> Result<reqwest::Url, String> {
    let mut url = reqwest::Url::parse(base).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme {} is not http or https", url.scheme()));
    }
    url.path_segments_mut().map_err(|()| "it cannot take a path".to_owned())?.pop_if_empty().extend(segments);
    Ok(url)
}

/// Sends `body` as a POST to `target` on the leader, with this replica's admin token and
/// [`FORWARDED_BY`], and answers with the leader's answer (502 `leader_unreachable` when there is
/// none).
pub async fn forward(http: &reqwest::Client, target: reqwest::Url, body: Bytes, token: &shared::auth::AdminToken, me: &str, timeout: Duration) -> Response {
    let url = target.to_string();
    let sent = http
        .post(target)
        .bearer_auth(token.expose())
        .header(FORWARDED_BY, me)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .timeout(timeout)
        .send()
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => return ApiError::new(axum::http::StatusCode::BAD_GATEWAY, "leader_unreachable", format!("the leader at {url} did not answer: {e}")).into_response(),
    };
    let status = axum::http::StatusCode::from_u16(resp.status().as_u16()).unwrap_or(axum::http::StatusCode::BAD_GATEWAY);
    let (content_type, retry_after) = (resp.headers().get(reqwest::header::CONTENT_TYPE).cloned(), resp.headers().get(reqwest::header::RETRY_AFTER).cloned());
    let bytes = match resp.bytes().await {
        Ok(b) => b,
        Err(e) => return ApiError::new(axum::http::StatusCode::BAD_GATEWAY, "leader_unreachable", format!("the leader at {url} broke off its answer: {e}")).into_response(),
    };
    let mut out = Response::new(axum::body::Body::from(bytes));
    *out.status_mut() = status;
    for (name, value) in [(axum::http::header::CONTENT_TYPE, content_type), (axum::http::header::RETRY_AFTER, retry_after)] {
        if let Some(v) = value.and_then(|v| axum::http::HeaderValue::from_bytes(v.as_bytes()).ok()) {
            out.headers_mut().insert(name, v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_table() {
        let leader = |g: &str, url: Option<&str>| Some((g.to_owned(), url.map(str::to_owned)));
        let follower: Result<Option<u64>, String> = Err("a follower".into());
        let cases: Vec<(&str, Result<Option<u64>, String>, Option<&str>, Option<(String, Option<String>)>, bool, Route)> = vec![
            ("the leader acts", Ok(Some(7)), None, leader("me", Some("http://me")), true, Route::Here),
            ("a standalone gateway acts", Ok(None), None, None, true, Route::Here),
            ("the leader acts on a forwarded request", Ok(Some(7)), Some("gw-b"), leader("me", None), true, Route::Here),
            ("a follower forwards", follower.clone(), None, leader("gw-a", Some("http://a:8000")), true, Route::Forward { leader: "gw-a".into(), url: "http://a:8000".into() }),
            ("no leader known", follower.clone(), None, None, true, Route::Refuse(Refusal::NoLeader("a follower".into()))),
            ("the latest claim is ours but not confirmed", follower.clone(), None, leader("me", Some("http://me")), true, Route::Refuse(Refusal::NoLeader("a follower".into()))),
            (
                "forwarded to a follower: no second hop",
                follower.clone(),
                Some("gw-b"),
                leader("gw-a", Some("http://a:8000")),
                true,
                Route::Refuse(Refusal::NotLeaderEither { from: "gw-b".into(), leader: Some("gw-a".into()) }),
            ),
            ("a claim without a URL", follower.clone(), None, leader("gw-a", None), true, Route::Refuse(Refusal::SendToLeader { leader: "gw-a".into(), why: "its claim names no URL" })),
            (
                "no admin token to forward with",
                follower.clone(),
                None,
                leader("gw-a", Some("http://a:8000")),
                false,
                Route::Refuse(Refusal::SendToLeader { leader: "gw-a".into(), why: "no ADMIN_TOKEN to authenticate with" }),
            ),
        ];
        for (name, authority, forwarded_by, leader, can_forward, want) in cases {
            assert_eq!(route(authority, forwarded_by, leader, "me", can_forward), want, "{name}");
        }
        assert_eq!(Refusal::NoLeader("x".into()).api_error().status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(Refusal::NoLeader("x".into()).api_error().retry_after_secs, Some(1));
        assert_eq!(Refusal::SendToLeader { leader: "g".into(), why: "w" }.api_error().body.error, "not_leader");
    }

    #[test]
    fn targets_encode_each_segment() {
        let t = target("http://gw-a:8000/", &["api", "fleet", "nodes", "ws 1/x", "drain"]).unwrap();
        assert_eq!(t.as_str(), "http://gw-a:8000/api/fleet/nodes/ws%201%2Fx/drain");
        assert_eq!(target("http://gw-a:8000", &["a"]).unwrap().as_str(), "http://gw-a:8000/a");
        assert!(target("mailto:x@y", &["a"]).is_err());
        assert!(target("not a url", &["a"]).is_err());
    }
}
