//! The admin credential: `Authorization: Bearer <ADMIN_TOKEN>` on every state-changing admin
//! route (a node's `POST /admin/start-recovery` and `/admin/drain`, the gateway's
//! `POST /api/fleet/nodes/{id}/drain`) and for the full `/api/fleet`.
//!
//! The token is compared in constant time ([`subtle`]), so the time an answer takes says nothing
//! about how much of a guess was right. No credential and a wrong one are both 401 with the usual
//! JSON error body (`missing_token`, `invalid_token`) and `WWW-Authenticate: Bearer` (RFC 6750 §3):
//! the admin API has one credential, so there is no "authenticated but not allowed" case for 403.
//!
//! With no token configured a service does not serve its admin routes on its public listener
//! (they answer 404 there) but on a second listener that must be bound to loopback
//! (`ADMIN_LISTEN_ADDR`); see [`admin_listen_problem`]. What else every admin route refuses (a
//! POST not declared JSON, an `Origin`, a foreign `Host`): [`crate::admin_guard`].

use crate::http::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The configured admin token (non-empty).
#[derive(Clone)]
pub struct AdminToken(Arc<str>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// The token of `ADMIN_TOKEN`; `None` when unset or empty (an empty token would let an empty
    /// `Bearer` in, so it counts as none).
    pub fn from_setting(raw: Option<&str>) -> Option<Self> {
        raw.filter(|t| !t.is_empty()).map(|t| Self(Arc::from(t)))
    }

    /// The token, for a client that sends it (the gateway to the nodes).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token, in time that depends only on the lengths.
    pub fn matches(&self, given: &str) -> bool {
        bool::from(self.0.as_bytes().ct_eq(given.as_bytes()))
    }

    /// Checks the request's `Authorization: Bearer <token>`.
    ///
    /// # Errors
    /// 401 `missing_token` without a Bearer credential, 401 `invalid_token` with another token.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match bearer(headers) {
            None => Err(ApiError::unauthorized("missing_token", "this route needs Authorization: Bearer <admin token>")),
            Some(t) if self.matches(t) => Ok(()),
            Some(_) => Err(ApiError::unauthorized("invalid_token", "the admin token is not valid")),
        }
    }

    /// Whether the request carries this token (for answers that show more to an admin).
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        self.check(headers).is_ok()
    }
}

/// The credential of `Authorization: Bearer <credential>` (scheme case-insensitive, RFC 9110
/// §11.1), if the header is there and of that scheme.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim()).filter(|t| !t.is_empty())
}

/// Axum middleware: the request goes on only with the admin token (`from_fn_with_state`).
pub async fn require_admin(State(token): State<AdminToken>, req: Request, next: Next) -> Response {
    match token.check(req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::info!(path = %req.uri().path(), code = %e.body.error, "admin request refused");
            e.into_response()
        }
    }
}

/// A problem with `ADMIN_LISTEN_ADDR` when the admin routes are served there (no token): it must
/// be a loopback address, so only processes on the same host reach them.
pub fn admin_listen_problem(addr: &std::net::SocketAddr) -> Option<String> {
    (!addr.ip().is_loopback()).then(|| {
        format!("ADMIN_LISTEN_ADDR ({addr}) must be a loopback address (127.0.0.1, ::1) when no ADMIN_TOKEN is set")
    })
}

/// Admin tokens published in this project's files and demos, and the usual placeholders: known to
/// anyone, so a process serving on more than loopback refuses them.
pub const KNOWN_DEMO_TOKENS: &[&str] = &["local-demo-admin-token", "e2e-admin-token", "node-test-admin-token", "changeme", "change-me", "admin", "secret", "password"];

/// A problem with an `ADMIN_TOKEN` of [`KNOWN_DEMO_TOKENS`] on a process that listens on `listen`,
/// an address other hosts can reach: anyone could drain its nodes. Pure.
pub fn demo_token_problem(token: Option<&str>, listen: &std::net::SocketAddr) -> Option<String> {
    let token = token?.trim();
    (KNOWN_DEMO_TOKENS.contains(&token) && !listen.ip().is_loopback()).then(|| {
        format!(
            "ADMIN_TOKEN is a published demo value ({token:?}) and LISTEN_ADDR ({listen}) is reachable from other hosts: \
             set a secret of your own (e.g. openssl rand -hex 24), or listen on loopback"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_demo_token_is_refused_beyond_loopback() {
        let (public, local): (std::net::SocketAddr, std::net::SocketAddr) = ("0.0.0.0:8000".parse().unwrap(), "127.0.0.1:8000".parse().unwrap());
        assert!(demo_token_problem(Some("local-demo-admin-token"), &public).is_some());
        assert!(demo_token_problem(Some(" changeme "), &public).is_some());
        assert!(demo_token_problem(Some("local-demo-admin-token"), &local).is_none(), "a laptop demo on loopback");
        assert!(demo_token_problem(Some("7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4"), &public).is_none());
        assert!(demo_token_problem(None, &public).is_none());
    }

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        h
    }

    #[test]
    fn admin_token_checks_the_bearer_credential() {
        let t = AdminToken::from_setting(Some("s3cret")).unwrap();
        for (auth, want) in [
            (None, Err("missing_token")),
            (Some("Basic czNjcmV0"), Err("missing_token")),
            (Some("Bearer"), Err("missing_token")),
            (Some("Bearer "), Err("missing_token")),
            (Some("Bearer wrong"), Err("invalid_token")),
            (Some("Bearer s3cre"), Err("invalid_token")),
            (Some("Bearer s3cret2"), Err("invalid_token")),
            (Some("Bearer S3CRET"), Err("invalid_token")),
            (Some("Bearer s3cret"), Ok(())),
            (Some("bearer s3cret"), Ok(())),
            (Some("Bearer  s3cret "), Ok(())),
        ] {
            let got = t.check(&headers(auth)).map_err(|e| {
                assert_eq!(e.status, axum::http::StatusCode::UNAUTHORIZED, "{auth:?}");
                e.body.error
            });
            assert_eq!(got, want.map_err(str::to_owned), "{auth:?}");
        }
    }

    #[test]
    fn an_empty_setting_is_no_token() {
        assert!(AdminToken::from_setting(None).is_none());
        assert!(AdminToken::from_setting(Some("")).is_none());
        assert!(format!("{:?}", AdminToken::from_setting(Some("x")).unwrap()).contains("redacted"));
    }

    #[test]
    fn the_admin_listener_must_be_loopback() {
        assert!(admin_listen_problem(&"127.0.0.1:9081".parse().unwrap()).is_none());
        assert!(admin_listen_problem(&"[::1]:9081".parse().unwrap()).is_none());
        assert!(admin_listen_problem(&"0.0.0.0:9081".parse().unwrap()).is_some());
        assert!(admin_listen_problem(&"10.1.2.3:9081".parse().unwrap()).is_some());
    }

    #[test]
    fn a_refusal_says_bearer() {
        let r = ApiError::unauthorized("invalid_token", "x").into_response();
        assert_eq!(r.status(), 401);
        assert!(r.headers()[header::WWW_AUTHENTICATE].to_str().unwrap().starts_with("Bearer"));
    }
}
