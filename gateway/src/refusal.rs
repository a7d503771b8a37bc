//! Why a client's handshake got no upstream, and the codes the gateway names it by.
//!
//! The node's own refusals (`not_ready`, `draining`, `not_owner`, `behind`, `full`, ...) are
//! passed on as they came ([`relay_error`]); the gateway adds its own (`no_owner`, `node_busy`,
//! `node_circuit_open`, `upstream_unreachable`, `upstream_timeout`).

use shared::http::ApiError;

/// The refusal code of a full node (the node's and the gateway's).
pub const FULL: &str = "full";

/// The refusal codes of a handshake the node did not answer (what opens its circuit breaker).
pub const UNREACHABLE: &str = "upstream_unreachable";
pub const TIMEOUT: &str = "upstream_timeout";

/// Why no upstream could be opened.
#[derive(Debug)]
pub struct Refused {
    pub code: String,
    pub message: String,
    pub retry_after_secs: u64,
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> Self {
        ApiError::unavailable(&r.code, r.message, r.retry_after_secs)
    }
}

/// An upstream's error answer (status and `{"error","message"}` body) as our own.
pub fn relay_error(status: u16, body: &str) -> ApiError {
    let status = axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_GATEWAY);
    match serde_json::from_str::<shared::api::ErrorBody>(body) {
        Ok(b) => ApiError { status, body: b, retry_after_secs: None },
        Err(_) => ApiError::new(status, "upstream_error", body.chars().take(200).collect::<String>()),
    }
}
