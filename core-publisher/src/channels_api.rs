//! The publisher's channel routes: publications of any model's data.
//!
//! | method and path | answer |
//! |---|---|
//! | `POST /channels/{id}/publications` `{"data": <JSON>}`, optional header `Idempotency-Key` | `201 {"channel","version","partition","offset"}` after the Kafka transaction carrying it committed |
//! | `POST /publications` `{"publications":[{"channel","data","idempotency_key"?}, …]}` (1–1,000) | `200 {"results":[…]}`, one per publication in order: `{"status":201,"channel","version","partition","offset","replayed"}` or `{"status":4xx/503,"error","message","field"?}` |
//! | `GET /channels/{id}` | `200 {"channel","model","version","epoch","state","hash"}` |
//! | `POST /channels/{id}/reset` (admin) | `200 {"channel","version":0,"epoch","partition","offset"}` once the reset committed: the channel's state starts again, empty, at version 0 of its next epoch |
//! | `DELETE /channels/{id}` (admin) | `200 {"channel","deleted":true,"epoch","partition","offset"}` once the delete committed: its state and snapshot are gone (tombstoned), and a later publication starts a new history |
//!
//! The two admin routes need `Authorization: Bearer <ADMIN_TOKEN>` and `Content-Type:
//! application/json` (as every admin route, [`shared::admin_guard`]); without an `ADMIN_TOKEN`
//! they answer 403 `admin_token_required`. Both answer 404 `unknown_channel` for a channel with
//! no publication.
//!
//! Errors are those of the pixel routes (`api`), and: 400 `unknown_namespace` (the id's
//! namespace is not in `fleet.toml`), 400 `invalid_data` (not the model's data: a pixel that is
//! not `{"x","y","color"}`, a JSON patch that does not apply), 413 `data_too_large` (over the
//! namespace's `max_data_bytes`), 413 `state_too_large` (the state after it would pass the
//! namespace's `max_state_bytes`; nothing written). Client tokens name channels as they name
//! channels (patterns such as `scores:*`).

use crate::answers::{publish_error, ClientAuth, IDEMPOTENCY_KEY, REPLAYED};
use crate::log::EventLog;
use crate::types::Published;
use crate::versions::Versions;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::value::RawValue;
use shared::client_token::Action;
use shared::http::{parse_json, ApiError, ChannelPath, JsonBodyUpTo};
use shared::rate_limit::PublishLimiter;
use shared::ChannelId;
use std::collections::HashMap;
use std::sync::Arc;

/// Largest body of `POST /channels/{id}/publications`: the largest data a namespace may take
/// and room for the envelope.
pub const MAX_PUBLICATION_BODY_BYTES: usize = shared::namespaces::MAX_DATA_BYTES + 4096;

/// Most publications one `POST /publications` takes.
pub const MAX_PUBLICATIONS: usize = 1000;

/// Largest body of `POST /publications`.
pub const MAX_PUBLICATIONS_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Body of `POST /channels/{id}/publications`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicationRequest {
    pub data: Box<RawValue>,
}

/// Body of `POST /publications`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicationsRequest {
    pub publications: Vec<BatchPublication>,
}

/// One publication of a [`PublicationsRequest`].
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchPublication {
    pub channel: ChannelId,
    pub data: Box<RawValue>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// The answer to an accepted publication, in the channel routes' words.
#[derive(serde::Serialize)]
struct Accepted<'a> {
    channel: &'a ChannelId,
    version: u64,
    partition: i32,
    offset: i64,
}

fn accepted(p: &Published) -> serde_json::Value {
    serde_json::to_value(Accepted { channel: &p.channel, version: p.version, partition: p.partition, offset: p.offset }).expect("an answer serialises")
}

/// The `Idempotency-Key` header, checked.
fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get(IDEMPOTENCY_KEY) {
        None => Ok(None),
        Some(v) => {
            let k = v.to_str().map_err(|_| ApiError::field("Idempotency-Key", "not visible ASCII"))?;
            if let Some(problem) = crate::idempotency::key_problem(k) {
                return Err(ApiError::field("Idempotency-Key", problem));
            }
            Ok(Some(k.to_owned()))
        }
    }
}

fn allow(auth: &ClientAuth, headers: &HeaderMap, channels: &[&ChannelId]) -> Result<(), ApiError> {
    let Some(tokens) = &auth.0 else { return Ok(()) };
    let grant = tokens.verify(shared::auth::bearer(headers)).map_err(|e| e.api_error())?;
    for c in channels {
        grant.check(c.as_str(), Action::Publish).map_err(|e| {
            tracing::info!(code = e.code(), channel = %c, "publish refused: client token");
            e.api_error()
        })?;
    }
    Ok(())
}

fn internal(e: tokio::task::JoinError) -> ApiError {
    tracing::error!(error = %e, "a publish task failed");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the publish failed; GET /channels/{id} shows the head")
}

async fn post_publication<L: EventLog>(
    State(v): State<Arc<Versions<L>>>,
    Extension(auth): Extension<ClientAuth>,
    ChannelPath(channel): ChannelPath,
    headers: HeaderMap,
    JsonBodyUpTo(body): JsonBodyUpTo<MAX_PUBLICATION_BODY_BYTES>,
) -> Result<Response, ApiError> {
    allow(&auth, &headers, &[&channel])?;
    let req: PublicationRequest = parse_json(&body)?;
    let key = key_of(&headers)?;
    // Run to the end even if the client goes away: a publish cut off while Kafka writes its
    // record would leave the channel's head behind the log.
    let task = tokio::spawn(async move { v.publish_data(&channel, &[(req.data.as_ref(), key.as_deref())]).await });
    let result = task.await.map_err(internal)?.into_iter().next().unwrap_or(Err(crate::types::PublishError::NotReady));
    let (published, replayed) = result.map_err(publish_error)?;
    let answer = Accepted { channel: &published.channel, version: published.version, partition: published.partition, offset: published.offset };
    let mut resp = (StatusCode::CREATED, Json(answer)).into_response();
    if replayed {
        resp.headers_mut().insert(REPLAYED, axum::http::HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// `POST /publications`: checked first (1 to [`MAX_PUBLICATIONS`] publications, keys valid and
/// none used twice: else 400 naming it, nothing published); then each channel's publications in
/// their order, in one transaction, channels side by side. As `POST /pixels`: a failure stops its
/// channel there (`not_attempted` for the rest of it), `Retry-After` is the longest any asks for.
async fn post_publications<L: EventLog>(
    State(v): State<Arc<Versions<L>>>,
    Extension(auth): Extension<ClientAuth>,
    headers: HeaderMap,
    JsonBodyUpTo(body): JsonBodyUpTo<MAX_PUBLICATIONS_BODY_BYTES>,
) -> Result<Response, ApiError> {
    let req: PublicationsRequest = parse_json(&body)?;
    allow(&auth, &headers, &req.publications.iter().map(|p| &p.channel).collect::<Vec<_>>())?;
    check(&req)?;
    if let Some(e) = v.not_writable() {
        return Err(publish_error(e));
    }
    let results = tokio::spawn(publish_all(v.clone(), req.publications)).await.map_err(internal)?;
    let retry = results.iter().filter_map(|(_, retry)| *retry).max();
    for (r, _) in &results {
        v.counters().metrics.published("batch", r["status"].as_u64().unwrap_or(500) as u16);
    }
    let results: Vec<serde_json::Value> = results.into_iter().map(|(r, _)| r).collect();
    let mut resp = Json(serde_json::json!({ "results": results })).into_response();
    if let Some(secs) = retry {
        resp.headers_mut().insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    Ok(resp)
}

/// Checks a parsed `POST /publications` body.
///
/// # Errors
/// 400 `invalid_field` naming `publications` or the first publication at fault.
pub fn check(req: &PublicationsRequest) -> Result<(), ApiError> {
    if req.publications.is_empty() {
        return Err(ApiError::field("publications", "at least one publication is needed"));
    }
    if req.publications.len() > MAX_PUBLICATIONS {
        return Err(ApiError::field("publications", format!("at most {MAX_PUBLICATIONS} publications per request")));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, p) in req.publications.iter().enumerate() {
        if let Some(k) = p.idempotency_key.as_deref() {
            if let Some(problem) = crate::idempotency::key_problem(k) {
                return Err(ApiError::field(format!("publications[{i}].idempotency_key"), problem));
            }
            if let Some(first) = seen.insert(k, i) {
                return Err(ApiError::field(
                    format!("publications[{i}].idempotency_key"),
                    format!("the same Idempotency-Key as publications[{first}]: one key names one publish"),
                ));
            }
        }
    }
    Ok(())
}

/// Publishes checked `pubs`: each channel's in one group, channels side by side. Returns each
/// one's result, in request order, and the `Retry-After` it asks for, if any.
async fn publish_all<L: EventLog>(v: Arc<Versions<L>>, pubs: Vec<BatchPublication>) -> Vec<(serde_json::Value, Option<u64>)> {
    let v = &v;
    crate::answers::run_batch(
        &pubs,
        |p| &p.channel,
        |channel, group| {
            let items: Vec<(&shared::model::Data, Option<&str>)> = group.iter().map(|&i| (pubs[i].data.as_ref(), pubs[i].idempotency_key.as_deref())).collect();
            async move { v.publish_data(channel, &items).await }
        },
        |published, replayed| {
            let mut r = accepted(published);
            r["status"] = 201.into();
            r["replayed"] = replayed.into();
            r
        },
        |err| {
            let mut r = serde_json::to_value(&err.body).expect("an error body serialises");
            r["status"] = err.status.as_u16().into();
            r
        },
        "an earlier publication of this channel in the request failed; this one was not published",
    )
    .await
}

async fn get_channel<L: EventLog>(State(v): State<Arc<Versions<L>>>, ChannelPath(channel): ChannelPath) -> Result<Response, ApiError> {
    Ok(Json(v.channel_truth(&channel).await.map_err(publish_error)?).into_response())
}

/// The answer to a reset or a delete.
#[derive(serde::Serialize)]
struct Changed<'a> {
    channel: &'a ChannelId,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    deleted: bool,
    epoch: &'a shared::epoch::Epoch,
    partition: i32,
    offset: i64,
}

async fn post_reset<L: EventLog>(State(v): State<Arc<Versions<L>>>, ChannelPath(channel): ChannelPath) -> Result<Response, ApiError> {
    // Run to the end even if the caller goes away, as a publish does.
    let task = tokio::spawn(async move { v.reset_channel(&channel).await });
    let c = task.await.map_err(internal)?.map_err(publish_error)?;
    let body = Changed { channel: &c.channel, version: Some(0), deleted: false, epoch: &c.epoch, partition: c.partition, offset: c.offset };
    Ok(Json(body).into_response())
}

async fn delete_channel<L: EventLog>(State(v): State<Arc<Versions<L>>>, ChannelPath(channel): ChannelPath) -> Result<Response, ApiError> {
    let task = tokio::spawn(async move { v.delete_channel(&channel).await });
    let c = task.await.map_err(internal)?.map_err(publish_error)?;
    let body = Changed { channel: &c.channel, version: None, deleted: true, epoch: &c.epoch, partition: c.partition, offset: c.offset };
    Ok(Json(body).into_response())
}

/// The admin routes of channels (a reset, a delete), for the caller to put behind the admin
/// token and [`shared::admin_guard`].
pub fn admin_routes<L: EventLog>() -> Router<Arc<Versions<L>>> {
    Router::new().route("/channels/{id}/reset", post(post_reset::<L>)).route("/channels/{id}", axum::routing::delete(delete_channel::<L>))
}

/// The admin routes of channels when no `ADMIN_TOKEN` is set: 403 `admin_token_required`.
pub fn admin_routes_refused<L: EventLog>() -> Router<Arc<Versions<L>>> {
    let refuse = || async {
        ApiError::forbidden("admin_token_required", "resetting or deleting a channel needs the publisher's ADMIN_TOKEN (Authorization: Bearer), and none is set")
    };
    Router::new().route("/channels/{id}/reset", post(refuse)).route("/channels/{id}", axum::routing::delete(refuse))
}

/// The channel routes, the publish routes rate-limited by `limiter` and counted by status.
pub fn routes<L: EventLog>(versions: Arc<Versions<L>>, limiter: Arc<PublishLimiter>) -> Router<Arc<Versions<L>>> {
    let limited = || axum::middleware::from_fn_with_state(limiter.clone(), shared::rate_limit::enforce);
    let counted = axum::middleware::from_fn_with_state(versions, crate::answers::count_publish::<L>);
    Router::new()
        .route(
            "/channels/{id}/publications",
            post(post_publication::<L>).layer(DefaultBodyLimit::max(MAX_PUBLICATION_BODY_BYTES)).layer(limited()).layer(counted),
        )
        .route("/publications", post(post_publications::<L>).layer(DefaultBodyLimit::max(MAX_PUBLICATIONS_BODY_BYTES)).layer(limited()))
        .route("/channels/{id}", get(get_channel::<L>))
}

#[cfg(test)]
mod tests {
    use crate::log::fake::{Fate, FakeLog};
    use crate::versions::{Timings, Versions};
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use shared::namespaces::Namespaces;
    use std::sync::Arc;
    use tower::ServiceExt;

    const FLEET: &str = r#"
        [default]
        model = "pixels"
        width = 8
        height = 8
        [namespaces.scores]
        model = "json"
        max_state_bytes = 64
        [namespaces.chat]
        model = "stream"
        max_data_bytes = 32
        [namespaces.prices]
        model = "latest"
    "#;

    async fn app() -> axum::Router {
        let spaces = Namespaces::from_toml(FLEET, shared::CanvasDims::default()).unwrap();
        let v = Arc::new(Versions::new(FakeLog::new(3, |_| Fate::Commit), spaces, 3, Timings::default()));
        v.rebuild().await.unwrap();
        crate::api::router(v)
    }

    async fn call(app: &axum::Router, method: &str, uri: &str, body: &str) -> (u16, serde_json::Value) {
        let req = Request::builder().method(method).uri(uri).header("content-type", "application/json").body(Body::from(body.to_owned())).unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
    }

    #[tokio::test]
    async fn each_model_publishes_its_data_and_get_shows_its_state() {
        let app = app().await;
        // (channel, data of each publication, state after them)
        let cases = [
            ("scores:final", vec![r#"{"home":1,"away":0}"#, r#"{"home":2}"#, r#"{"away":null}"#], serde_json::json!({"home": 2})),
            ("prices:eur", vec![r#"{"bid":1.5}"#, "1.25"], serde_json::json!(1.25)),
            ("chat:lobby", vec![r#""hello""#, r#"{"text":"hi"}"#], serde_json::Value::Null),
            ("c1", vec![r##"{"x":1,"y":2,"color":"#ff0000"}"##], serde_json::Value::Null),
        ];
        for (channel, datas, state) in cases {
            for (i, d) in datas.iter().enumerate() {
                let (s, j) = call(&app, "POST", &format!("/channels/{channel}/publications"), &format!(r#"{{"data":{d}}}"#)).await;
                assert_eq!((s, j["channel"].as_str(), j["version"].as_u64()), (201, Some(channel), Some(i as u64 + 1)), "{channel} {d}: {j}");
            }
            let (s, j) = call(&app, "GET", &format!("/channels/{channel}"), "").await;
            assert_eq!((s, j["version"].as_u64()), (200, Some(datas.len() as u64)), "{j}");
            if channel != "c1" {
                assert_eq!(j["state"], state, "{channel}: {j}");
            } else {
                assert_eq!((j["model"].as_str(), j["state"]["width"].as_u64()), (Some("pixels"), Some(8)), "{j}");
            }
            assert_eq!(j["hash"].as_str().map(str::len), Some(64));
        }
        // The pixel route and the channel route are one channel.
        let (s, j) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":0,"y":0,"color":"#00ff00"}"##).await;
        assert_eq!((s, j["version"].as_u64()), (201, Some(2)));
        let (_, by_canvas) = call(&app, "GET", "/canvases/c1", "").await;
        let (_, by_channel) = call(&app, "GET", "/channels/c1", "").await;
        assert_eq!(by_canvas["hash"], by_channel["hash"]);
    }

    #[tokio::test]
    async fn refusals_name_what_is_wrong_and_write_nothing() {
        let app = app().await;
        let big = format!(r#"{{"data":"{}"}}"#, "x".repeat(40));
        for (uri, body, status, code) in [
            ("/channels/nope:a/publications", r#"{"data":1}"#, 400, "unknown_namespace"),
            ("/channels/chat:a/publications", big.as_str(), 413, "data_too_large"),
            ("/channels/scores:a/publications", &format!(r#"{{"data":{{"k":"{}"}}}}"#, "v".repeat(60)), 413, "state_too_large"),
            ("/channels/c1/publications", r#"{"data":{"x":1}}"#, 400, "invalid_data"),
            ("/channels/c1/publications", r##"{"data":{"x":9,"y":0,"color":"#000000"}}"##, 400, "invalid_field"),
            ("/channels/chat:a/publications", r#"{"dat":1}"#, 400, "invalid_field"),
            ("/canvases/chat:a/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##, 400, "invalid_field"),
            ("/canvases/nope:a/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##, 400, "unknown_namespace"),
        ] {
            let (s, j) = call(&app, "POST", uri, body).await;
            assert_eq!((s, j["error"].as_str()), (status, Some(code)), "{uri} {body}: {j}");
        }
        for channel in ["chat:a", "scores:a", "c1"] {
            assert_eq!(call(&app, "GET", &format!("/channels/{channel}"), "").await.1["version"], 0, "{channel}: nothing written");
        }
        assert_eq!(call(&app, "GET", "/channels/nope:a", "").await.1["error"], "unknown_namespace");
    }

    #[tokio::test]
    async fn a_batch_over_channels_answers_each_publication_in_order() {
        let app = app().await;
        let body = r#"{"publications":[
            {"channel":"chat:a","data":"one"},
            {"channel":"scores:b","data":{"x":1}},
            {"channel":"chat:a","data":"two","idempotency_key":"k-2"},
            {"channel":"nope:c","data":1}
        ]}"#;
        let (s, j) = call(&app, "POST", "/publications", body).await;
        assert_eq!(s, 200, "{j}");
        let got: Vec<(u64, Option<&str>, Option<u64>)> =
            j["results"].as_array().unwrap().iter().map(|r| (r["status"].as_u64().unwrap(), r["channel"].as_str(), r["version"].as_u64())).collect();
        assert_eq!(got, vec![(201, Some("chat:a"), Some(1)), (201, Some("scores:b"), Some(1)), (201, Some("chat:a"), Some(2)), (400, None, None)]);
        assert_eq!(j["results"][3]["error"], "unknown_namespace");
        // The key answers the same publication again.
        let (_, again) = call(&app, "POST", "/publications", r#"{"publications":[{"channel":"chat:a","data":"two","idempotency_key":"k-2"}]}"#).await;
        assert_eq!((again["results"][0]["version"].as_u64(), again["results"][0]["replayed"].as_bool()), (Some(2), Some(true)), "{again}");
        let (s, j) = call(&app, "POST", "/publications", r#"{"publications":[]}"#).await;
        assert_eq!((s, j["field"].as_str()), (400, Some("publications")));
    }
}
