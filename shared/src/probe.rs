//! The orchestrators' probes, the same on every service (Kubernetes' names):
//!
//! - `GET /livez`: `200 {"status":"alive"}` whenever the process answers. A liveness probe that
//!   fails restarts the process, so it asks nothing of the service's state: a node waiting for
//!   start-recovery or a publisher rebuilding must not be killed for it.
//! - `GET /readyz`: `200` while the service serves, else `503` + `Retry-After` with the fleet's
//!   JSON error (`{"error":"not_ready",...}`, or the service's own code), so a readiness probe or a
//!   load balancer sends it nothing until it does. What "serves" means is each service's: a node
//!   HEALTHY, a publisher accepting writes, a gateway with a fresh view and a node serving.
//!
//! Probes need no credential. `/health` stays each service's detailed view (the gateway polls the
//! nodes' one), and where `/ready` existed it stays, the same answer as `/readyz`.

use crate::http::ApiError;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use axum::{Json, Router};

/// The liveness probe's path.
pub const LIVEZ: &str = "/livez";
/// The readiness probe's path.
pub const READYZ: &str = "/readyz";
/// `Retry-After` of a `/readyz` 503, seconds: probes ask again about this often anyway.
pub const RETRY_AFTER_SECS: u64 = 1;

/// `GET /livez`.
pub async fn livez() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "alive"}))
}

/// The `200` of a service that serves: `{"status":"ready","ready":true}`.
pub fn ready() -> Response {
    Json(serde_json::json!({"status": "ready", "ready": true})).into_response()
}

/// The `503 not_ready` + `Retry-After` of a service that does not serve, saying why.
pub fn not_ready(message: impl Into<String>) -> ApiError {
    ApiError::unavailable("not_ready", message, RETRY_AFTER_SECS)
}

/// `/livez`, and `/readyz` answered by `readyz`: merged into a service's public router.
pub fn routes<S: Clone + Send + Sync + 'static>(readyz: MethodRouter<S>) -> Router<S> {
    Router::new().route(LIVEZ, get(livez)).route(READYZ, readyz)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use tower::ServiceExt;

    async fn call(app: &Router, path: &str) -> (StatusCode, Option<String>, serde_json::Value) {
        let resp = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        let status = resp.status();
        let retry = resp.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
        (status, retry, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn livez_answers_and_readyz_says_why_not() {
        let serving = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = serving.clone();
        let app = routes(get(move || {
            let s = s.clone();
            async move { if s.load(std::sync::atomic::Ordering::SeqCst) { Ok(ready()) } else { Err(not_ready("starting")) } }
        }));
        assert_eq!(call(&app, LIVEZ).await, (StatusCode::OK, None, serde_json::json!({"status": "alive"})));
        let (status, retry, body) = call(&app, READYZ).await;
        assert_eq!((status, retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("1")));
        assert_eq!(body, serde_json::json!({"error": "not_ready", "message": "starting"}));
        serving.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(call(&app, READYZ).await, (StatusCode::OK, None, serde_json::json!({"status": "ready", "ready": true})));
    }
}
