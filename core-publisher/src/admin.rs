//! The publisher's admin route: `POST /admin/promote`, by which the gateway leader makes a
//! standby the active publisher ([`crate::role`]).
//!
//! | method and path | answer |
//! |---|---|
//! | `POST /admin/promote` `{}` | `200 {"active":true}` once this publisher accepts writes; `202 {"active":false,"promoting":true}` when it is still reading the log after [`PROMOTE_WAIT`] (it finishes by itself); `409 not_standby` for a publisher started active; `503 fenced` for one another publisher took over |
//!
//! As on the nodes, the route needs `Authorization: Bearer <ADMIN_TOKEN>` (401 otherwise) on the
//! public port, and without an `ADMIN_TOKEN` it is served only on the loopback
//! `ADMIN_LISTEN_ADDR`; [`shared::admin_guard`] refuses what a browser page could send. Once a
//! gateway leader has claimed, a promotion must carry its fencing token: the publisher checks it
//! against the claims it reads from the control topic itself ([`shared::fence`]: 409
//! `stale_leader`, `unknown_claim`, `fencing_token_required`; 503 `control_topic_catching_up`),
//! so a deposed leader or a script with the admin secret cannot promote a second writer.

use crate::log::EventLog;
use crate::role::PromoteAnswer;
use crate::versions::Versions;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use shared::admin_guard::AdminGuard;
use shared::control::Listener;
use shared::fence::Guard;
use shared::http::{method_not_allowed, ApiError, JsonBody};
use std::sync::Arc;
use std::time::Duration;

/// How long a promotion request waits for the publisher to accept writes before it answers 202
/// (with the fence's wait, within the gateway's 10 s timeout of the request).
pub const PROMOTE_WAIT: Duration = Duration::from_secs(5);

/// The admin routes on `listener` (`mode`: where they are served), behind `guard`'s fence.
pub fn routes<L: EventLog>(versions: Arc<Versions<L>>, guard: Arc<Guard>, listener: Listener, mode: AdminGuard) -> Router {
    Router::new()
        .route("/admin/promote", post(promote::<L>))
        .route_layer(axum::middleware::from_fn_with_state((guard, listener), shared::fence::guard))
        .route_layer(axum::middleware::from_fn_with_state(mode, shared::admin_guard::guard))
        .with_state(versions)
}

/// The admin routes alone, for the loopback admin listener (no `ADMIN_TOKEN`).
pub fn loopback_router<L: EventLog>(versions: Arc<Versions<L>>, guard: Arc<Guard>) -> Router {
    routes(versions, guard, Listener::Loopback, AdminGuard::Loopback)
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(method_not_allowed)
}

/// `POST /admin/promote`.
async fn promote<L: EventLog>(State(v): State<Arc<Versions<L>>>, JsonBody(_): JsonBody) -> Result<Response, ApiError> {
    if v.is_fenced() {
        return Err(crate::api::publish_error(crate::types::PublishError::Fenced));
    }
    match v.promote() {
        PromoteAnswer::NotStandby => Err(ApiError::conflict(
            "not_standby",
            "this publisher was started active (without --standby): it already writes, there is nothing to promote",
        )),
        PromoteAnswer::Done => Ok(Json(serde_json::json!({"active": true})).into_response()),
        PromoteAnswer::Started | PromoteAnswer::Running => {
            let deadline = tokio::time::Instant::now() + PROMOTE_WAIT;
            while !v.is_ready() && !v.is_fenced() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if v.is_fenced() {
                return Err(crate::api::publish_error(crate::types::PublishError::Fenced));
            }
            if v.is_ready() {
                Ok(Json(serde_json::json!({"active": true})).into_response())
            } else {
                Ok((StatusCode::ACCEPTED, Json(serde_json::json!({"active": false, "promoting": true}))).into_response())
            }
        }
    }
}
