//! What the publisher's routes share: the answer of a publish error, the client token check, the
//! `Idempotency-Key` headers, and the count of single publishes by status. The pixel routes
//! ([`crate::api`]) and the channel routes ([`crate::channels_api`]) both answer with them.

use crate::log::EventLog;
use crate::types::PublishError;
use crate::versions::Versions;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use shared::client_token::{ClientTokens, Grant};
use shared::http::ApiError;
use std::sync::Arc;

/// `Retry-After` of a 503, seconds.
pub const RETRY_AFTER_SECS: u64 = 1;

/// The HTTP answer of a publish that was not accepted.
pub fn publish_error(e: PublishError) -> ApiError {
    match e {
        PublishError::NotReady => ApiError::unavailable("not_ready", e.to_string(), RETRY_AFTER_SECS),
        PublishError::Standby => ApiError::unavailable(
            "standby",
            "this publisher is a standby (--standby): it follows the log and accepts writes only once the gateway leader \
             promotes it; nothing was applied, send the request to the active publisher",
            RETRY_AFTER_SECS,
        ),
        PublishError::Fenced => ApiError::unavailable(
            "fenced",
            "another publisher took over this topic; this one accepts no writes and is stopping: nothing was applied, \
             send the request to the publisher that accepts writes",
            RETRY_AFTER_SECS,
        ),
        PublishError::NotWritten(_) => ApiError::unavailable(
            "kafka_unavailable",
            "the kafka transaction carrying the event did not commit; nothing was applied, retry",
            RETRY_AFTER_SECS,
        ),
        PublishError::Unknown(_) => ApiError::unavailable(
            "kafka_outcome_unknown",
            "kafka did not confirm the transaction in time: the event may or may not have been applied; retry with the \
             same Idempotency-Key to apply it exactly once (GET /canvases/{id} shows the head)",
            RETRY_AFTER_SECS,
        ),
        PublishError::KeyConflict => ApiError::conflict("idempotency_key_conflict", e.to_string()),
        PublishError::KeyInFlight => {
            let mut a = ApiError::conflict("idempotency_key_in_flight", e.to_string());
            a.retry_after_secs = Some(RETRY_AFTER_SECS);
            a
        }
        PublishError::IdempotencyStoreFull { retry_after_secs, .. } => {
            ApiError::unavailable("idempotency_store_full", e.to_string(), retry_after_secs)
        }
        PublishError::ChannelLimit { .. } => ApiError::conflict("channel_limit", e.to_string()),
        PublishError::OutOfBounds { field, .. } => ApiError::field(field, e.to_string()),
        PublishError::UnknownNamespace(_) => ApiError::new(StatusCode::BAD_REQUEST, "unknown_namespace", e.to_string()),
        PublishError::InvalidData(_) => {
            let mut a = ApiError::new(StatusCode::BAD_REQUEST, "invalid_data", e.to_string());
            a.body.field = Some("data".into());
            a
        }
        PublishError::DataTooLarge { .. } => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "data_too_large", e.to_string()),
        PublishError::StateTooLarge { .. } => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "state_too_large", e.to_string()),
        PublishError::UnknownChannel(_) => ApiError::new(StatusCode::NOT_FOUND, "unknown_channel", e.to_string()),
    }
}

/// Header of a retry-safe publish (`Idempotency-Key`, 1–128 visible ASCII characters).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Response header set to `true` when the answer is the replay of an earlier request.
pub const REPLAYED: &str = "idempotent-replayed";

/// The verifier of client tokens (`None`: publishing needs none), a request extension.
#[derive(Clone, Default)]
pub struct ClientAuth(pub Option<Arc<ClientTokens>>);

impl ClientAuth {
    /// Verifies the request's Bearer token: its grant, or `None` when no token is needed.
    pub(crate) fn grant(&self, headers: &HeaderMap) -> Result<Option<Grant>, ApiError> {
        let Some(tokens) = &self.0 else { return Ok(None) };
        tokens.verify(shared::auth::bearer(headers)).map(Some).map_err(refuse)
    }
}

pub(crate) fn refuse(e: shared::client_token::TokenError) -> ApiError {
    tracing::info!(code = e.code(), "publish refused: client token");
    e.api_error()
}

/// Counts a single publish's answer (`POST /canvases/{id}/pixels`) by its status.
pub async fn count_publish<L: EventLog>(State(v): State<Arc<Versions<L>>>, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let resp = next.run(req).await;
    v.counters().metrics.published("single", resp.status().as_u16());
    resp
}


/// A batch's publishes answered: `items` grouped by their channel (`channel_of`), each channel's
/// published in item order by `publish` (given the group's indexes), channels side by side. Each
/// result becomes an answer (`accepted` with the published version and whether it was a replay,
/// `refused` with the error); an item after a failure of its channel was not attempted (503
/// `not_attempted` with `message` when the failure was a "not now", else 409). Returns the answers in item order, each with the `Retry-After` it asks for.
pub async fn run_batch<'a, T, A, Fut>(
    items: &'a [T],
    channel_of: impl Fn(&'a T) -> &'a shared::ChannelId,
    publish: impl Fn(&'a shared::ChannelId, &[usize]) -> Fut,
    accepted: impl Fn(&crate::types::Published, bool) -> A,
    refused: impl Fn(ApiError) -> A,
    message: &str,
) -> Vec<(A, Option<u64>)>
where
    Fut: std::future::Future<Output = Vec<Result<(crate::types::Published, bool), PublishError>>>,
{
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: std::collections::HashMap<&shared::ChannelId, usize> = std::collections::HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let g = *group_of.entry(channel_of(item)).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    let (accepted, refused) = (&accepted, &refused);
    let done = futures::future::join_all(groups.into_iter().map(|group| {
        let publishing = publish(channel_of(&items[group[0]]), &group);
        async move {
            let results = publishing.await;
            // Set once an item of this channel failed: the retry later that failure asked for.
            let mut failed: Option<Option<u64>> = None;
            let mut out = Vec::with_capacity(group.len());
            for (n, i) in group.into_iter().enumerate() {
                let err = match results.get(n) {
                    Some(Ok((published, replayed))) => {
                        out.push((i, (accepted(published, *replayed), None)));
                        continue;
                    }
                    Some(Err(err)) => {
                        let err = publish_error(err.clone());
                        failed = Some(err.retry_after_secs);
                        err
                    }
                    None => match failed.unwrap_or(Some(RETRY_AFTER_SECS)) {
                        Some(secs) => ApiError::unavailable("not_attempted", message, secs),
                        None => ApiError::conflict("not_attempted", message),
                    },
                };
                let retry = err.retry_after_secs;
                out.push((i, (refused(err), retry)));
            }
            out
        }
    }))
    .await;
    let mut results: Vec<Option<(A, Option<u64>)>> = (0..items.len()).map(|_| None).collect();
    for (i, r) in done.into_iter().flatten() {
        results[i] = Some(r);
    }
    results.into_iter().map(|r| r.expect("every item of the batch has a result")).collect()
}
