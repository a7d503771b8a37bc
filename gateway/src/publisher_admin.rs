//! The gateway's client of the publishers' admin route `POST /admin/promote`, which makes a
//! standby publisher (started with `--standby`) accept writes.
//!
//! The request is the same as the gateway's calls to the nodes' admin routes
//! ([`crate::node_admin::admin_post`]): body `{}` declared JSON, the admin token when one is set,
//! and the decision it carries out (its id, and the leader's fencing token, which the publisher's
//! fence checks against the newest claim it has read, as a node's does). The answers
//! ([`promote_answer`], pure):
//! - 200 `{"active":true}`: it accepts writes ([`Promoted::Active`]);
//! - 202 `{"active":false,"promoting":true}`: still promoting, it finishes by itself
//!   ([`Promoted::Promoting`]);
//! - a refusal ([`PromoteError::Refused`]): 409 `stale_leader` / `unknown_claim` /
//!   `fencing_token_required` or 503 `control_topic_catching_up` from its fence, 409
//!   `not_standby` from a publisher started active, 401 without the right token.

use crate::decisions::Decided;
use std::time::Duration;

/// How long a promotion may take to answer.
pub const PROMOTE_TIMEOUT: Duration = Duration::from_secs(10);

/// A standby's answer to a promotion it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promoted {
    /// 200 `{"active":true}`: it accepts writes.
    Active,
    /// 202 `{"active":false,"promoting":true}`: it is promoting and finishes by itself.
    Promoting,
}

/// Why a promotion was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromoteError {
    /// No answer: the connection failed, or nothing came within [`PROMOTE_TIMEOUT`] (it may be
    /// promoting all the same).
    #[error("no answer from {url}: {cause}")]
    NoAnswer { url: String, cause: String },
    /// The publisher refused, with its error code and message.
    #[error("{status} {code}: {message}")]
    Refused { status: u16, code: String, message: String },
    /// An answer that is neither an acceptance nor a refusal with an error code.
    #[error("unexpected answer {status}: {body}")]
    Unexpected { status: u16, body: String },
}

impl PromoteError {
    /// The facts for the decision log: the status and error code of a refusal.
    pub fn detail(&self) -> serde_json::Value {
        match self {
            Self::NoAnswer { .. } => serde_json::json!({"status": null, "code": "no_answer"}),
            Self::Refused { status, code, .. } => serde_json::json!({"status": status, "code": code}),
            Self::Unexpected { status, .. } => serde_json::json!({"status": status, "code": "unexpected_answer"}),
        }
    }
}

/// What an answer to `POST /admin/promote` (`status`, JSON `body`) means (see the module docs).
///
/// # Errors
/// [`PromoteError::Refused`] for an error status with a JSON error body,
/// [`PromoteError::Unexpected`] for anything else that is not an acceptance.
pub fn promote_answer(status: u16, body: &[u8]) -> Result<Promoted, PromoteError> {
    let json = serde_json::from_slice::<serde_json::Value>(body).unwrap_or(serde_json::Value::Null);
    match status {
        200 if json["active"] == true => Ok(Promoted::Active),
        202 => Ok(Promoted::Promoting),
        200..=299 => Err(PromoteError::Unexpected { status, body: String::from_utf8_lossy(body).into_owned() }),
        _ => match serde_json::from_value::<shared::api::ErrorBody>(json) {
            Ok(e) => Err(PromoteError::Refused { status, code: e.error, message: e.message }),
            Err(_) => Err(PromoteError::Unexpected { status, body: String::from_utf8_lossy(body).into_owned() }),
        },
    }
}

/// The client.
pub struct PublisherAdmin {
    http: reqwest::Client,
    token: Option<shared::auth::AdminToken>,
}

impl PublisherAdmin {
    /// Calls through `http`, with `token` as the bearer credential when set.
    pub fn new(http: reqwest::Client, token: Option<shared::auth::AdminToken>) -> Self {
        Self { http, token }
    }

    /// `POST {admin_url}/admin/promote` carrying out `decided`.
    ///
    /// # Errors
    /// As [`promote_answer`]; [`PromoteError::NoAnswer`] when no answer came.
    pub async fn promote(&self, admin_url: &str, decided: &Decided) -> Result<Promoted, PromoteError> {
        let url = format!("{admin_url}/admin/promote");
        let req = crate::node_admin::admin_post(&self.http, self.token.as_ref(), &url, Some(decided)).json(&serde_json::json!({})).timeout(PROMOTE_TIMEOUT);
        let no_answer = |cause: String| PromoteError::NoAnswer { url: url.clone(), cause };
        let resp = req.send().await.map_err(|e| {
            no_answer(if e.is_timeout() { format!("no answer within {} s", PROMOTE_TIMEOUT.as_secs()) } else { crate::publishers::error_text(&e) })
        })?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(|e| no_answer(format!("reading the answer: {e}")))?;
        promote_answer(status, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promote_answer_table() {
        let refused = |status: u16, code: &str| Err(PromoteError::Refused { status, code: code.into(), message: "m".into() });
        let cases: Vec<(u16, &str, Result<Promoted, PromoteError>)> = vec![
            (200, r#"{"active":true}"#, Ok(Promoted::Active)),
            (202, r#"{"active":false,"promoting":true}"#, Ok(Promoted::Promoting)),
            (202, "", Ok(Promoted::Promoting)),
            (409, r#"{"error":"stale_leader","message":"m"}"#, refused(409, "stale_leader")),
            (409, r#"{"error":"unknown_claim","message":"m"}"#, refused(409, "unknown_claim")),
            (409, r#"{"error":"fencing_token_required","message":"m"}"#, refused(409, "fencing_token_required")),
            (503, r#"{"error":"control_topic_catching_up","message":"m"}"#, refused(503, "control_topic_catching_up")),
            (409, r#"{"error":"not_standby","message":"m"}"#, refused(409, "not_standby")),
            (401, r#"{"error":"missing_token","message":"m"}"#, refused(401, "missing_token")),
            (200, r#"{"active":false}"#, Err(PromoteError::Unexpected { status: 200, body: r#"{"active":false}"#.into() })),
            (404, "nope", Err(PromoteError::Unexpected { status: 404, body: "nope".into() })),
            (500, "", Err(PromoteError::Unexpected { status: 500, body: String::new() })),
        ];
        for (status, body, want) in cases {
            assert_eq!(promote_answer(status, body.as_bytes()), want, "{status} {body}");
        }
    }
}
