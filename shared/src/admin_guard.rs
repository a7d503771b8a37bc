//! What every admin route asks of a request before its handler (or its credential) sees it, so
//! a web page cannot use a browser as its client:
//!
//! - **no `Origin`**: a browser sends `Origin` with every cross-origin request and every POST,
//!   and the fleet's admin clients (the gateway, `curl`, the test harness) send none; so a request
//!   carrying one comes from a page, and gets `403 origin_not_allowed`;
//! - **a POST declares JSON** (`Content-Type: application/json`, parameters allowed): a page can
//!   send a cross-origin POST without a CORS preflight only with a "simple" content type
//!   (`text/plain`, form encodings, or none) — a `no-cors` fetch of a drain, say; JSON needs a
//!   preflight, which the admin routes never grant. Anything else is `415 unsupported_media_type`;
//! - on the **loopback admin listener** (no `ADMIN_TOKEN`), a `Host` that is loopback
//!   (`localhost`, `127.x.y.z`, `[::1]`, any port) or none: a name that resolves to 127.0.0.1 for
//!   a page's own origin (DNS rebinding) makes the page same-origin with the listener, and its
//!   requests then need no preflight; they still carry the attacker's name in `Host`:
//!   `403 host_not_allowed`.
//!
//! [`guard`] is the axum middleware (`from_fn_with_state` with an [`AdminGuard`]), applied with
//! `route_layer` to the admin routes of the nodes and the gateway, inside the token check where
//! there is one (a request without the token is 401 first).

use crate::http::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Where the admin routes are served, for [`guard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminGuard {
    /// Behind `ADMIN_TOKEN` on the public listener: any `Host` (the service's public names).
    Token,
    /// On the loopback `ADMIN_LISTEN_ADDR` without a credential: loopback `Host` only.
    Loopback,
}

/// Axum middleware: refuses what a web page could send (see the module doc) with the JSON error
/// body, before the route's handler.
pub async fn guard(State(mode): State<AdminGuard>, req: Request, next: Next) -> Response {
    match check(mode, req.method(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::info!(path = %req.uri().path(), code = %e.body.error, "admin request refused");
            e.into_response()
        }
    }
}

/// The decision of [`guard`] on a request's method and headers. Pure.
///
/// # Errors
/// 403 `origin_not_allowed` for any `Origin`; 403 `host_not_allowed` for a `Host` that is not
/// loopback under [`AdminGuard::Loopback`]; 415 `unsupported_media_type` for a POST (or any method
/// with a body: PUT, PATCH, DELETE) not declared `application/json`.
pub fn check(mode: AdminGuard, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let shown = String::from_utf8_lossy(origin.as_bytes()).chars().take(100).collect::<String>();
        return Err(ApiError::forbidden(
            "origin_not_allowed",
            format!("admin routes take no request from a web page (Origin {shown:?}); call them from a tool or a service, without Origin"),
        ));
    }
    if mode == AdminGuard::Loopback {
        if let Some(host) = headers.get(header::HOST) {
            if !is_loopback_host(host.to_str().unwrap_or("")) {
                let shown = String::from_utf8_lossy(host.as_bytes()).chars().take(100).collect::<String>();
                return Err(ApiError::forbidden(
                    "host_not_allowed",
                    format!("the loopback admin listener answers only requests for a loopback host (localhost, 127.0.0.1, [::1]), not {shown:?}"),
                ));
            }
        }
    }
    if method != Method::GET && method != Method::HEAD && method != Method::OPTIONS && !declares_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "admin requests must be sent with Content-Type: application/json and a JSON body (e.g. {})",
        ));
    }
    Ok(())
}

/// Whether `Content-Type` is `application/json` (any case, any parameters).
fn declares_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether a `Host` value names this machine's loopback: `localhost` (or a name under it),
/// `127.0.0.0/8` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((ip, port)) if port.is_empty() || port.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok()) => ip,
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.parse::<u16>().is_ok() => name,
            Some(_) => return false,
            None => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn code(r: Result<(), ApiError>) -> Option<(u16, String)> {
        r.err().map(|e| (e.status.as_u16(), e.body.error))
    }

    #[test]
    fn a_post_must_declare_json() {
        let post = |ct: Option<&str>| {
            let h = ct.map_or_else(HeaderMap::new, |ct| headers(&[(header::CONTENT_TYPE, ct)]));
            code(check(AdminGuard::Token, &Method::POST, &h))
        };
        let refused = Some((415, "unsupported_media_type".to_owned()));
        for ct in [None, Some("text/plain"), Some("text/plain;charset=UTF-8"), Some("application/x-www-form-urlencoded"), Some("multipart/form-data; boundary=x"), Some("application/jsonx"), Some("")] {
            assert_eq!(post(ct), refused, "{ct:?}");
        }
        for ct in ["application/json", "Application/JSON", "application/json; charset=utf-8", " application/json ;x=1"] {
            assert_eq!(post(Some(ct)), None, "{ct:?}");
        }
        // A read declares nothing.
        assert_eq!(code(check(AdminGuard::Loopback, &Method::GET, &HeaderMap::new())), None);
        assert_eq!(code(check(AdminGuard::Token, &Method::DELETE, &HeaderMap::new())), refused);
    }

    #[test]
    fn any_origin_is_refused() {
        let json = (header::CONTENT_TYPE, "application/json");
        for origin in ["http://127.0.0.1:8000", "null", "https://canvas.example", ""] {
            for mode in [AdminGuard::Token, AdminGuard::Loopback] {
                let h = headers(&[json.clone(), (header::ORIGIN, origin)]);
                assert_eq!(code(check(mode, &Method::POST, &h)), Some((403, "origin_not_allowed".to_owned())), "{origin:?}");
                let h = headers(&[(header::ORIGIN, origin)]);
                assert_eq!(code(check(mode, &Method::GET, &h)), Some((403, "origin_not_allowed".to_owned())), "GET {origin:?}");
            }
        }
    }

    #[test]
    fn the_loopback_listener_takes_loopback_hosts_only() {
        let json = (header::CONTENT_TYPE, "application/json");
        for host in ["127.0.0.1:9081", "127.0.0.1", "127.1.2.3:80", "localhost:9000", "LOCALHOST", "localhost.", "a.localhost:1", "[::1]:9081", "[::1]"] {
            let h = headers(&[json.clone(), (header::HOST, host)]);
            assert_eq!(code(check(AdminGuard::Loopback, &Method::POST, &h)), None, "{host}");
        }
        for host in ["rebound.example:9081", "10.0.0.5:9081", "0.0.0.0:9081", "localhost.example", "127.0.0.1.nip.io", "[::2]:1", "127.0.0.1:x", "[::1]x", ""] {
            let h = headers(&[json.clone(), (header::HOST, host)]);
            assert_eq!(code(check(AdminGuard::Loopback, &Method::POST, &h)), Some((403, "host_not_allowed".to_owned())), "{host}");
            // Behind the token the service's public names are fine.
            assert_eq!(code(check(AdminGuard::Token, &Method::POST, &h)), None, "{host}");
        }
        // No Host at all (HTTP/1.0 tools): not a browser.
        assert_eq!(code(check(AdminGuard::Loopback, &Method::POST, &headers(&[json]))), None);
    }
}
