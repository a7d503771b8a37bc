//! The gateway's client of the nodes' admin routes (`POST /admin/start-recovery`, `/admin/drain`,
//! `/admin/hold`): the admin token, and the decision each call carries out (its id, which a node
//! does once, and the fencing token a node checks against the newest leader's claim).

use crate::decisions::Decided;
use serde::Serialize;
use shared::api::{DrainReport, DrainRequest, HoldReport, HoldRequest};
use shared::http::ApiError;
use std::time::Duration;

/// A POST to an admin route of the fleet (a node's, or a publisher's: [`crate::publisher_admin`])
/// through `http`: `Authorization: Bearer <token>` when `token` is set, and the decision it
/// carries out, its id in [`shared::control::DECISION_HEADER`] and, when it was decided under
/// one, the leader's fencing token in [`shared::control::FENCING_HEADER`].
pub fn admin_post(http: &reqwest::Client, token: Option<&shared::auth::AdminToken>, url: &str, decided: Option<&Decided>) -> reqwest::RequestBuilder {
    let mut req = http.post(url);
    if let Some(t) = token {
        req = req.bearer_auth(t.expose());
    }
    if let Some(d) = decided {
        req = req.header(shared::control::DECISION_HEADER, &d.id);
        if let Some(t) = d.token {
            req = req.header(shared::control::FENCING_HEADER, t.to_string());
        }
    }
    req
}

/// A node as its admin routes know it.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub id: &'a str,
    /// The base URL of its admin routes (`NODE_ADMIN_URLS`, else its public URL).
    pub admin_url: &'a str,
}

/// The client.
pub struct NodeAdmin {
    http: reqwest::Client,
    token: Option<shared::auth::AdminToken>,
}

impl NodeAdmin {
    /// Calls through `http`, with `token` as the bearer credential when set.
    pub fn new(http: reqwest::Client, token: Option<shared::auth::AdminToken>) -> Self {
        Self { http, token }
    }

    /// A POST to a node's admin route ([`admin_post`]).
    fn post(&self, url: &str, decided: Option<&Decided>) -> reqwest::RequestBuilder {
        admin_post(&self.http, self.token.as_ref(), url, decided)
    }

    /// `POST /admin/start-recovery` with the body `{}` (the nodes take only admin POSTs declared
    /// JSON): the node's answer body.
    ///
    /// # Errors
    /// The transport error or the node's status and body, as text.
    pub async fn start_recovery(&self, node: Node<'_>, decided: &Decided) -> Result<serde_json::Value, String> {
        let url = format!("{}/admin/start-recovery", node.admin_url);
        let req = self.post(&url, Some(decided)).json(&serde_json::json!({})).timeout(Duration::from_secs(5));
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
        if status.is_success() {
            Ok(body)
        } else {
            Err(format!("{status}: {body}"))
        }
    }

    /// `POST /admin/drain`, waiting for the drain's grace period and a margin.
    ///
    /// # Errors
    /// As [`NodeAdmin::call`].
    pub async fn drain(&self, node: Node<'_>, req: &DrainRequest, decided: Option<&Decided>) -> Result<DrainReport, ApiError> {
        let timeout = Duration::from_millis(req.grace_ms) + Duration::from_secs(15);
        self.call(node, "drain", req, timeout, decided).await
    }

    /// `POST /admin/hold` under fencing `token`, with no decision id: each round's extension is a
    /// new one, which the node must not take for a repeat.
    ///
    /// # Errors
    /// As [`NodeAdmin::call`].
    pub async fn hold(&self, node: Node<'_>, req: &HoldRequest, token: Option<u64>, timeout: Duration) -> Result<HoldReport, ApiError> {
        let url = format!("{}/admin/hold", node.admin_url);
        let mut req_b = self.post(&url, None);
        if let Some(t) = token {
            req_b = req_b.header(shared::control::FENCING_HEADER, t.to_string());
        }
        self.send(node, "hold", req_b.json(req).timeout(timeout)).await
    }

    /// `POST /admin/<action>` on `node` with `body`, and its JSON answer.
    ///
    /// # Errors
    /// 503 `node_unreachable`; the node's own refusal (409 conflict, 400 ...) passed through,
    /// naming the node; 502 for an answer that is not the expected report.
    pub async fn call<B: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        node: Node<'_>,
        action: &str,
        body: &B,
        timeout: Duration,
        decided: Option<&Decided>,
    ) -> Result<R, ApiError> {
        let url = format!("{}/admin/{action}", node.admin_url);
        self.send(node, action, self.post(&url, decided).json(body).timeout(timeout)).await
    }

    async fn send<R: serde::de::DeserializeOwned>(&self, node: Node<'_>, action: &str, req: reqwest::RequestBuilder) -> Result<R, ApiError> {
        let resp = req.send().await.map_err(|e| ApiError::unavailable("node_unreachable", format!("node {}: {e}", node.id), 1))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            let mut e = crate::refusal::relay_error(status.as_u16(), &text);
            e.body.message = format!("node {}: {}", node.id, e.body.message);
            return Err(e);
        }
        resp.json::<R>().await.map_err(|e| ApiError::bad_gateway(format!("node {}: bad {action} report: {e}", node.id)))
    }
}
